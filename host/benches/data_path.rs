//! `cargo bench -p tet-host --bench data_path`: the `.tet` data path on a file of 2 GiB
//! of decoded f32 (16384 × 32768 in 1024 × 1024 chunks, 512 chunks of 4 MiB), next to
//! baselines measured in the same run:
//!
//! * writer throughput, raw and zstd level 3 (C compressor), against a plain write of
//!   the same bytes (`cat` speed) and against the C compressor's single-thread speed;
//! * `verify --deep` (structure + every chunk decoded, on the memory-mapped file, one
//!   thread per core) against the C decoder's single-thread speed over the same payloads
//!   times the core count, with the peak heap measured by a counting allocator.
//!
//! `TET_BENCH_DIR` sets where the 2 GiB files go (default: the system temp dir); they are
//! removed afterwards. Plain `Instant` timing; no timing happens in tests.

#![allow(clippy::restriction, reason = "tests and benches fail by panicking")]

mod timing;

use std::hint::black_box;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tet_alloc::tet::writer::{Compressor, DatasetSpec, Writer};
use tet_core::tet::{Codec, DType, DatasetId, TetFile};
use tet_host::atomic::{AtomicFile, RealFs};
use tet_host::tet::codec::CCompressor;
use tet_host::tet::verify::{check_with, DecodeOptions};

#[global_allocator]
static ALLOC: timing::Counting = timing::Counting;

const ROWS: u64 = 16384;
const COLS: u64 = 32768;
const CHUNK: u64 = 1024;

fn tile(i: u64, j: u64, out: &mut Vec<u8>) {
    timing::field_tile(i, j, CHUNK, out);
}

fn spec() -> [DatasetSpec<'static>; 1] {
    [DatasetSpec {
        name: "field",
        dtype: DType::F32,
        shape: &[ROWS, COLS],
        chunk_shape: &[CHUNK, CHUNK],
    }]
}

fn gbps(bytes: u64, d: Duration) -> f64 {
    bytes as f64 / d.as_secs_f64() / 1e9
}

/// Writes the file with the streaming writer (zstd: `batch` tiles compressed in parallel
/// at a time, or one thread when `batch` is 1); returns the time spent writing (tile
/// generation excluded).
fn write_file(path: &Path, codec: Codec, batch: usize) -> Duration {
    let _ = std::fs::remove_file(path);
    let out = AtomicFile::create(path, RealFs).unwrap();
    let mut w = Writer::new(out, &spec()).unwrap();
    w.set_compressor(Box::new(CCompressor::new(3)));
    let mut spent = Duration::ZERO;
    let mut pending: Vec<tet_host::tet::write::Tile> = Vec::new();
    for i in 0..ROWS / CHUNK {
        for j in 0..COLS / CHUNK {
            let mut t = Vec::new();
            tile(i, j, &mut t);
            pending.push((DatasetId(0), vec![i, j], t));
            if pending.len() >= batch {
                let s = Instant::now();
                tet_host::tet::write::write_batch(&mut w, &pending, codec, 3).unwrap();
                spent += s.elapsed();
                pending.clear();
            }
        }
    }
    let s = Instant::now();
    w.finish(None).unwrap().commit().unwrap();
    spent + s.elapsed()
}

/// A plain write of 2 GiB (the same tiles, no format) with the same fsync at the end.
fn cat_speed(path: &Path) -> Duration {
    let _ = std::fs::remove_file(path);
    let mut f = std::fs::File::create(path).unwrap();
    let mut t = Vec::new();
    let mut spent = Duration::ZERO;
    for i in 0..ROWS / CHUNK {
        for j in 0..COLS / CHUNK {
            tile(i, j, &mut t);
            let s = Instant::now();
            f.write_all(&t).unwrap();
            spent += s.elapsed();
        }
    }
    let s = Instant::now();
    f.sync_all().unwrap();
    let _ = std::fs::remove_file(path);
    spent + s.elapsed()
}

/// C compressor, one thread, over the same tiles.
fn c_compress_speed() -> Duration {
    let mut c = CCompressor::new(3);
    let mut t = Vec::new();
    let mut out = Vec::new();
    let mut spent = Duration::ZERO;
    for i in 0..ROWS / CHUNK {
        for j in 0..COLS / CHUNK {
            tile(i, j, &mut t);
            let s = Instant::now();
            c.compress(&t, &mut out).unwrap();
            black_box(&out);
            spent += s.elapsed();
        }
    }
    spent
}

fn main() {
    let dir = std::env::var_os("TET_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let raw_path = dir.join("tet-bench-raw.tet");
    let zstd_path = dir.join("tet-bench-zstd.tet");
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let logical = ROWS * COLS * 4;
    println!("cores: {cores}; logical data {} GiB", logical >> 30);

    // Writer: plain writes and raw writer twice each, alternating, best kept (the first
    // write of 2 GiB to a fresh file pays for page-cache allocation).
    let mut cat = Duration::MAX;
    let mut raw = Duration::MAX;
    for _ in 0..2 {
        cat = cat.min(cat_speed(&raw_path));
        raw = raw.min(write_file(&raw_path, Codec::Raw, 1));
    }
    let c1 = c_compress_speed();
    let z1 = write_file(&zstd_path, Codec::Zstd, 1);
    let z = write_file(&zstd_path, Codec::Zstd, 4 * cores);
    let stored = std::fs::metadata(&zstd_path).unwrap().len();
    println!();
    println!("| writer | time | GB/s (decoded) | baseline | baseline GB/s |");
    println!("| --- | --- | --- | --- | --- |");
    println!(
        "| raw | {:.2} s | {:.2} | plain write + fsync | {:.2} |",
        raw.as_secs_f64(),
        gbps(logical, raw),
        gbps(logical, cat)
    );
    println!(
        "| zstd 3, 1 thread | {:.2} s | {:.2} | C compressor 1 thread | {:.2} |",
        z1.as_secs_f64(),
        gbps(logical, z1),
        gbps(logical, c1),
    );
    println!(
        "| zstd 3, {cores} threads (`write_batch`) | {:.2} s | {:.2} | C compressor 1 thread × {cores} cores | {:.2} |",
        z.as_secs_f64(),
        gbps(logical, z),
        gbps(logical, c1) * cores as f64
    );
    println!(
        "zstd file: {stored} bytes ({:.2}× smaller)",
        logical as f64 / stored as f64
    );
    std::fs::remove_file(&raw_path).ok();

    // Decode.
    let input = tet_host::input::Input::open(&zstd_path).unwrap();
    let bytes = input.bytes();
    // Warm the page cache and measure the memory-bandwidth roofline over the file.
    let sum = timing::best_of(3, || bytes.iter().map(|b| u64::from(*b)).sum::<u64>());
    let file = TetFile::open(bytes).unwrap();
    let payloads: Vec<&[u8]> = file
        .rows()
        .iter()
        .map(|r| {
            let a = r.payload_offset.get() as usize;
            &bytes[a..a + r.stored_byte_len.get() as usize]
        })
        .collect();
    let mut dctx = zstd::zstd_safe::DCtx::create();
    let mut buf = vec![0u8; (CHUNK * CHUNK * 4) as usize];
    let c_single = timing::best_of(3, || {
        for p in &payloads {
            dctx.decompress(&mut buf[..], p).unwrap();
        }
    });
    let mut rz = ruzstd::decoding::FrameDecoder::new();
    let rz_single = timing::best_of(1, || {
        for p in payloads.iter().take(64) {
            rz.decode_all(p, &mut buf[..]).unwrap();
        }
    });
    let mut deep = Duration::MAX;
    let mut peak = 0usize;
    for _ in 0..3 {
        let base = timing::reset_peak();
        let s = Instant::now();
        let c = check_with(
            bytes,
            &DecodeOptions {
                deep: true,
                threads: Some(cores),
                budget: Some(1 << 30),
            },
        )
        .unwrap();
        deep = deep.min(s.elapsed());
        assert!(c.found.kept.is_empty());
        peak = peak.max(timing::peak() - base);
    }
    let bound = gbps(logical, c_single) * cores as f64;
    println!();
    println!("| pass | time | GB/s (decoded) |");
    println!("| --- | --- | --- |");
    println!(
        "| sum of every file byte (roofline, {} MiB) | {:.3} s | {:.2} (of file bytes) |",
        stored >> 20,
        sum.as_secs_f64(),
        gbps(stored, sum)
    );
    println!(
        "| C decoder, 1 thread, every chunk | {:.3} s | {:.2} |",
        c_single.as_secs_f64(),
        gbps(logical, c_single)
    );
    println!(
        "| ruzstd, 1 thread, first 64 chunks | {:.3} s | {:.2} |",
        rz_single.as_secs_f64(),
        gbps(64 * CHUNK * CHUNK * 4, rz_single)
    );
    println!(
        "| verify --deep, {cores} threads | {:.3} s | {:.2} |",
        deep.as_secs_f64(),
        gbps(logical, deep)
    );
    println!(
        "verify --deep reaches {:.0} % of C single-thread × {cores} cores ({bound:.2} GB/s); peak heap {:.1} MiB",
        100.0 * gbps(logical, deep) / bound,
        peak as f64 / (1 << 20) as f64
    );
    drop(input);
    std::fs::remove_file(&zstd_path).ok();
}
