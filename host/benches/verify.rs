//! `cargo bench -p tet-host --bench verify`: structural verification throughput on
//! in-memory files, next to two baselines measured in the same run:
//! * `sum-bytes`: a plain sum over every byte of the file (memory-bandwidth roofline);
//! * `sum-index`: a sum over the `payload_offset` of every index row (the least work
//!   any row walk can do).
//!
//! Plain `Instant` timing, best of several runs; no timing happens in tests.

#![allow(clippy::restriction, reason = "tests and benches fail by panicking")]

mod timing;
use timing::best_of;

use tet_alloc::tet::testing::TetWriter;
use tet_core::tet::{DType, DatasetId, Finding, TetFile};

/// A `u8` dataset of `side × side` elements in `chunk × chunk` tiles, rows in canonical
/// order, or reversed when `shuffled`.
fn file(side: u64, chunk: u64, shuffled: bool) -> Vec<u8> {
    let mut w = TetWriter::new();
    let id = w
        .add_dataset("a", DType::U8, &[side, side], &[chunk, chunk])
        .unwrap_or(DatasetId(0));
    let grid = side.div_ceil(chunk);
    let tile = vec![1u8; (chunk * chunk) as usize];
    let mut cells: Vec<(u64, u64)> = (0..grid)
        .flat_map(|i| (0..grid).map(move |j| (i, j)))
        .collect();
    if shuffled {
        cells.reverse();
    }
    for (i, j) in cells {
        w.add_chunk_raw(id, &[i, j], &tile);
    }
    w.to_bytes().unwrap_or_default()
}

fn main() {
    println!("| file | rows | bytes | verify | rows/s | sum-index | sum-bytes (GB/s) |");
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    for (name, side, chunk, shuffled) in [
        ("canonical 4096² / 64²", 4096u64, 64u64, false),
        ("reversed 4096² / 64²", 4096, 64, true),
        ("canonical 4096² / 16²", 4096, 16, false),
        ("reversed 4096² / 16²", 4096, 16, true),
    ] {
        let bytes = file(side, chunk, shuffled);
        let rows = TetFile::open(&bytes).map(|f| f.rows().len()).unwrap_or(0);
        let verify = best_of(5, || {
            let mut n = 0u64;
            let _ = tet_alloc::tet::verify_owned(&bytes, None, &mut |_: &Finding| n += 1);
            assert_eq!(n, 0);
            n
        });
        let sum_index = best_of(5, || {
            TetFile::open(&bytes)
                .map(|f| {
                    f.rows()
                        .iter()
                        .map(|r| r.payload_offset.get())
                        .fold(0u64, u64::wrapping_add)
                })
                .unwrap_or(0)
        });
        let sum_bytes = best_of(5, || bytes.iter().map(|b| u64::from(*b)).sum::<u64>());
        println!(
            "| {name} | {rows} | {} MiB | {:.2} ms | {:.1} M | {:.3} ms | {:.2} ms ({:.1}) |",
            bytes.len() >> 20,
            verify.as_secs_f64() * 1e3,
            rows as f64 / verify.as_secs_f64() / 1e6,
            sum_index.as_secs_f64() * 1e3,
            sum_bytes.as_secs_f64() * 1e3,
            bytes.len() as f64 / sum_bytes.as_secs_f64() / 1e9,
        );
    }
}
