//! `cargo bench -p tet-host --bench deep_raw`: `verify --deep` and a raw `sum` on a raw
//! file of a few hundred MB, next to rooflines over the same mapped bytes measured in the
//! same run, on every core:
//!
//! * CRC-32C over the whole file (what the check must compute for every payload byte);
//! * a plain sum over every 8-byte word of the file (memory-bandwidth roofline);
//! * a plain eight-lane `f32` sum over the payloads (the `sum` roofline).
//!
//! `sum` is timed with the checksum table attached (as `tet-host query` reads) and
//! without it (as it read before chunks were checked), so the check's cost is measured,
//! not estimated. The files are written under `target/` (`TET_BENCH_DIR` to choose) and
//! removed at the end. Best of 7 after a warm-up pass, the passes taking turns.

#![allow(clippy::restriction, reason = "tests and benches fail by panicking")]

mod timing;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use rayon::prelude::*;
use tet_alloc::tet::history::open_for_reading;
use tet_alloc::tet::query::{plan, Axes, Operation};
use tet_alloc::tet::writer::{DatasetSpec, Writer};
use tet_core::tet::fold::Reduce;
use tet_core::tet::{Codec, DType, DatasetId, TetFile};
use tet_host::atomic::{AtomicFile, RealFs};
use tet_host::tet::query::run;
use tet_host::tet::verify::{check_with, DecodeOptions};

/// 6144 × 16384 f32: 384 MiB of payload.
const ROWS: u64 = 6144;
const COLS: u64 = 16384;

fn write(path: &Path, chunk: u64) {
    let _ = std::fs::remove_file(path);
    let spec = [DatasetSpec {
        name: "field",
        dtype: DType::F32,
        shape: &[ROWS, COLS],
        chunk_shape: &[chunk, chunk],
    }];
    let mut w = Writer::new(AtomicFile::create(path, RealFs).unwrap(), &spec).unwrap();
    let mut t = Vec::new();
    for i in 0..ROWS / chunk {
        for j in 0..COLS / chunk {
            timing::field_tile(i, j, chunk, &mut t);
            w.write_chunk(DatasetId(0), &[i, j], &t, Codec::Raw)
                .unwrap();
        }
    }
    w.finish(None).unwrap().commit().unwrap();
}

/// Pieces for the parallel rooflines: 1 MiB, so every core stays busy to the end.
const PIECE: usize = 1 << 20;

fn crc_all(bytes: &[u8]) -> u32 {
    bytes
        .par_chunks(PIECE)
        .map(tet_core::checksum::crc32c)
        .reduce(|| 0, |a, b| a ^ b)
}

/// A plain pass over every byte, eight bytes at a time (wrapping adds of the words: as
/// little work per byte as a pass can do, so memory bandwidth bounds it).
fn word_sum(bytes: &[u8]) -> u64 {
    bytes
        .par_chunks(PIECE)
        .map(|p| {
            let mut lanes = [0u64; 4];
            for g in p.chunks_exact(32) {
                for (l, w) in lanes.iter_mut().zip(g.chunks_exact(8)) {
                    *l = l.wrapping_add(u64::from_le_bytes(w.try_into().unwrap()));
                }
            }
            lanes.iter().fold(0u64, |a, b| a.wrapping_add(*b))
        })
        .reduce(|| 0, u64::wrapping_add)
}

/// Best of `rounds` for each pass, the passes taking turns, so a change in the machine's
/// load (it is shared) falls on all of them alike.
fn interleaved<const N: usize>(rounds: usize, passes: [&dyn Fn(); N]) -> [Duration; N] {
    let mut best = [Duration::MAX; N];
    for _ in 0..rounds {
        for (b, f) in best.iter_mut().zip(&passes) {
            let t = Instant::now();
            f();
            *b = (*b).min(t.elapsed());
        }
    }
    best
}

fn f32_sum(bytes: &[u8]) -> f32 {
    bytes
        .par_chunks(PIECE)
        .map(|p| {
            let mut lanes = [0f32; 8];
            for g in p.chunks_exact(32) {
                for (l, e) in lanes.iter_mut().zip(g.chunks_exact(4)) {
                    *l += f32::from_le_bytes(e.try_into().unwrap());
                }
            }
            lanes.iter().sum::<f32>()
        })
        .sum()
}

fn gbps(bytes: usize, d: Duration) -> f64 {
    bytes as f64 / d.as_secs_f64() / 1e9
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Best wall time of `runs` runs of the real binary (process start and mapping included).
fn cli(runs: usize, args: &[&str]) -> Duration {
    let exe = env!("CARGO_BIN_EXE_tet-host");
    let mut best = Duration::MAX;
    for _ in 0..runs {
        let t = Instant::now();
        let out = Command::new(exe).args(args).output().unwrap();
        best = best.min(t.elapsed());
        assert!(out.status.success(), "{args:?}: {out:?}");
    }
    best
}

fn main() {
    let dir = std::env::var_os("TET_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"));
    let cores = rayon::current_num_threads();
    println!("cores: {cores}; one f32 dataset {ROWS} × {COLS} (384 MiB), raw");
    println!();
    println!(
        "| chunks | file | CRC-32C roofline | word-sum roofline | verify --deep | of CRC roofline | of word-sum | CRC-32C, fresh mapping | `tet-host verify --deep` |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    let mut sums = Vec::new();
    for chunk in [1024u64, 128] {
        let path = dir.join(format!("tet-deep-raw-{chunk}.tet"));
        write(&path, chunk);
        let input = tet_host::input::Input::open(&path).unwrap();
        let bytes = input.bytes();
        let n = bytes.len();
        let opts = DecodeOptions {
            deep: true,
            threads: None,
            budget: Some(1 << 30),
        };
        // Warm the page cache and check the file is what it should be.
        let c = check_with(bytes, &opts).unwrap();
        assert_eq!(c.found.errors, 0);
        assert_eq!(
            c.checksummed.0, c.checksummed.1,
            "every chunk has a checksum"
        );
        let [crc, fresh, bsum, deep] = interleaved(
            7,
            [
                &|| {
                    std::hint::black_box(crc_all(bytes));
                },
                &|| {
                    let input = tet_host::input::Input::open(&path).unwrap();
                    std::hint::black_box(crc_all(input.bytes()));
                },
                &|| {
                    std::hint::black_box(word_sum(bytes));
                },
                &|| {
                    std::hint::black_box(check_with(bytes, &opts).unwrap().found.errors);
                },
            ],
        );
        let p = path.to_str().unwrap();
        let deep_cli = cli(3, &["verify", "--deep", "-q", p]);
        println!(
            "| {} of {chunk}² ({} KiB) | {} MiB | {:.1} ms ({:.2} GB/s) | {:.1} ms ({:.2} GB/s) | {:.1} ms ({:.2} GB/s) | {:.0} % | {:.0} % | {:.1} ms | {:.1} ms |",
            (ROWS / chunk) * (COLS / chunk),
            chunk * chunk * 4 / 1024,
            n >> 20,
            ms(crc),
            gbps(n, crc),
            ms(bsum),
            gbps(n, bsum),
            ms(deep),
            gbps(n, deep),
            100.0 * crc.as_secs_f64() / deep.as_secs_f64(),
            100.0 * bsum.as_secs_f64() / deep.as_secs_f64(),
            ms(fresh),
            ms(deep_cli),
        );

        // `sum` with the checks (the table attached) and without.
        let checked = open_for_reading(bytes).unwrap().file;
        assert!(checked.checksums().is_some());
        let plain = TetFile::open(bytes).unwrap();
        let payload = &bytes[plain.payload_floor() as usize..plain.payload_limit() as usize];
        let sum = |file: &TetFile<'_>| {
            let ds = file.dataset("field").unwrap();
            let p = plan(file, ds, &[]).unwrap();
            let ax = Axes::new(2, None).unwrap();
            let op = Operation::Reduce(Reduce::Sum);
            std::hint::black_box(run(file, &p, op, &ax, cores, 8 << 30).unwrap());
        };
        let [roof, without, with] = interleaved(
            7,
            [
                &|| {
                    std::hint::black_box(f32_sum(payload));
                },
                &|| sum(&plain),
                &|| sum(&checked),
            ],
        );
        sums.push((chunk, payload.len(), roof, without, with));
        drop(input);
        let _ = std::fs::remove_file(&path);
    }
    println!();
    println!("| chunks | f32 sum roofline | `sum` unchecked | `sum` checked | cost of the check |");
    println!("| --- | --- | --- | --- | --- |");
    for (chunk, n, roof, without, with) in sums {
        println!(
            "| {chunk}² | {:.1} ms ({:.2} GB/s) | {:.1} ms ({:.2} GB/s) | {:.1} ms ({:.2} GB/s) | {:+.0} % |",
            ms(roof),
            gbps(n, roof),
            ms(without),
            gbps(n, without),
            ms(with),
            gbps(n, with),
            100.0 * (with.as_secs_f64() / without.as_secs_f64() - 1.0),
        );
    }
}
