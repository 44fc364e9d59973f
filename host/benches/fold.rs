//! `cargo bench -p tet-host --bench fold`: queries over 2 GiB of f32 (16384 × 32768 in
//! 1024 × 1024 chunks, the `data_path` field), raw and zstd, page cache warm, next to
//! rooflines measured in the same run:
//!
//! * a plain vectorised sum (eight `f32` lanes) over the same mapped bytes, one thread and
//!   one per core;
//! * the C decoder's single-thread speed over the zstd payloads, times the cores.
//!
//! Files are opened as `tet-host query` opens them (each chunk checked against the
//! checksum table); the raw `sum` is also timed without the table, for the check's cost.
//!
//! The sum along axis 0 is also timed on one thread, next to NumPy's `a.sum(axis=0,
//! dtype=float64)` over a memory map of a `.npy` of the same field (`TET_PYTHON`, default
//! `/work/venv-tet/bin/python`; left out when it cannot run).
//!
//! `TET_BENCH_DIR` sets where the files go (default: the temp dir; 4 GiB free); they are
//! removed.

#![allow(clippy::restriction, reason = "tests and benches fail by panicking")]

mod timing;

use std::path::Path;
use std::time::Duration;

use rayon::prelude::*;
use tet_alloc::tet::history::open_for_reading;
use tet_alloc::tet::query::{plan, Axes, Operation};
use tet_alloc::tet::writer::{DatasetSpec, Writer};
use tet_core::tet::fold::Reduce;
use tet_core::tet::select::Slice;
use tet_core::tet::{Codec, DType, DatasetId, TetFile};
use tet_host::atomic::{AtomicFile, RealFs};
use tet_host::tet::query::run;

const ROWS: u64 = 16384;
const COLS: u64 = 32768;
const CHUNK: u64 = 1024;

fn write(path: &Path, codec: Codec) {
    let _ = std::fs::remove_file(path);
    let spec = [DatasetSpec {
        name: "field",
        dtype: DType::F32,
        shape: &[ROWS, COLS],
        chunk_shape: &[CHUNK, CHUNK],
    }];
    let mut w = Writer::new(AtomicFile::create(path, RealFs).unwrap(), &spec).unwrap();
    let mut batch = Vec::new();
    for i in 0..ROWS / CHUNK {
        for j in 0..COLS / CHUNK {
            let mut t = Vec::new();
            timing::field_tile(i, j, CHUNK, &mut t);
            batch.push((DatasetId(0), vec![i, j], t));
            if batch.len() == 8 {
                tet_host::tet::write::write_batch(&mut w, &batch, codec, 3).unwrap();
                batch.clear();
            }
        }
    }
    w.finish(None).unwrap().commit().unwrap();
}

/// NumPy's `sum(axis=0, dtype=float64)` over a memory map of a `.npy` of the field, best
/// of 3 (the first run warms the page cache), or `None` when Python cannot run it.
fn numpy_axis0(dir: &Path) -> Option<Duration> {
    let python = std::env::var("TET_PYTHON").unwrap_or_else(|_| "/work/venv-tet/bin/python".into());
    let npy = dir.join("tet-fold-field.npy");
    let mut all = vec![0u8; (ROWS * COLS * 4) as usize];
    let row_bytes = (COLS * 4) as usize;
    for i in 0..ROWS / CHUNK {
        for j in 0..COLS / CHUNK {
            let mut t = Vec::new();
            timing::field_tile(i, j, CHUNK, &mut t);
            for (r, tile_row) in t.chunks_exact((CHUNK * 4) as usize).enumerate() {
                let at =
                    (i * CHUNK) as usize * row_bytes + r * row_bytes + (j * CHUNK * 4) as usize;
                all[at..at + tile_row.len()].copy_from_slice(tile_row);
            }
        }
    }
    tet_host::tet::npy::write_raw(&npy, DType::F32, &[ROWS, COLS], &all).ok()?;
    drop(all);
    let script = format!(
        "import numpy as np, time\n\
         a = np.load({npy:?}, mmap_mode='r')\n\
         b = 1e9\n\
         for _ in range(4):\n\
         \x20   t = time.perf_counter(); a.sum(axis=0, dtype=np.float64); b = min(b, time.perf_counter() - t)\n\
         print(b)\n",
        npy = npy.display().to_string()
    );
    let out = std::process::Command::new(&python)
        .arg("-c")
        .arg(&script)
        .output()
        .ok();
    std::fs::remove_file(&npy).ok();
    let secs: f64 = String::from_utf8_lossy(&out?.stdout).trim().parse().ok()?;
    Some(Duration::from_secs_f64(secs))
}

/// The roofline: eight f32 lanes over every 4-byte word.
fn plain_sum(bytes: &[u8]) -> f32 {
    let mut lanes = [0f32; 8];
    for g in bytes.chunks_exact(32) {
        for (l, e) in lanes.iter_mut().zip(g.chunks_exact(4)) {
            *l += f32::from_le_bytes(e.try_into().unwrap());
        }
    }
    lanes.iter().sum()
}

fn gbps(bytes: u64, d: Duration) -> f64 {
    bytes as f64 / d.as_secs_f64() / 1e9
}

fn main() {
    let dir = std::env::var_os("TET_BENCH_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let logical = ROWS * COLS * 4;
    let raw_path = dir.join("tet-fold-raw.tet");
    let zstd_path = dir.join("tet-fold-zstd.tet");
    write(&raw_path, Codec::Raw);
    write(&zstd_path, Codec::Zstd);

    let raw_in = tet_host::input::Input::open(&raw_path).unwrap();
    let raw = raw_in.bytes();
    // As `tet-host query` opens it: every chunk checked against the checksum table. The
    // same file without the table reads as before the check, for its cost.
    let file = open_for_reading(raw).unwrap().file;
    assert!(file.checksums().is_some());
    let unchecked = TetFile::open(raw).unwrap();
    let ds = file.dataset("field").unwrap();
    let payload = &raw[file.payload_floor() as usize..];
    let roof1 = timing::best_of(5, || plain_sum(payload));
    let roof_n = timing::best_of(5, || {
        payload
            .par_chunks(payload.len().div_ceil(cores) & !31)
            .map(plain_sum)
            .sum::<f32>()
    });
    let q = |file: &TetFile<'_>, sl: &[Slice], op: Reduce, axes: Option<&[usize]>| {
        let ds = file.dataset("field").unwrap();
        let p = plan(file, ds, sl).unwrap();
        let ax = Axes::new(2, axes).unwrap();
        timing::best_of(3, || {
            run(file, &p, Operation::Reduce(op), &ax, cores, 8 << 30).unwrap()
        })
    };
    let sum = q(&file, &[], Reduce::Sum, None);
    let sum_unchecked = q(&unchecked, &[], Reduce::Sum, None);
    let mean = q(&file, &[], Reduce::Mean, None);
    let axis0 = q(&file, &[], Reduce::Sum, Some(&[0]));
    let axis0_one = {
        let p = plan(&file, ds, &[]).unwrap();
        let ax = Axes::new(2, Some(&[0])).unwrap();
        timing::best_of(3, || {
            run(&file, &p, Operation::Reduce(Reduce::Sum), &ax, 1, 8 << 30).unwrap()
        })
    };
    let numpy_axis0 = numpy_axis0(&dir);
    let axis1 = q(&file, &[], Reduce::Sum, Some(&[1]));
    let strided = [
        Slice {
            start: None,
            stop: None,
            step: Some(8192),
        },
        Slice {
            start: None,
            stop: None,
            step: Some(12288),
        },
    ];
    let p = plan(&file, ds, &strided).unwrap();
    let touched = p.parts.len();
    let strided_t = q(&file, &strided, Reduce::Sum, None);

    let z_in = tet_host::input::Input::open(&zstd_path).unwrap();
    let zb = z_in.bytes();
    let zfile = open_for_reading(zb).unwrap().file;
    let payloads: Vec<&[u8]> = zfile
        .rows()
        .iter()
        .map(|r| &zb[r.payload_offset.get() as usize..][..r.stored_byte_len.get() as usize])
        .collect();
    let mut dctx = zstd::zstd_safe::DCtx::create();
    let mut buf = vec![0u8; (CHUNK * CHUNK * 4) as usize];
    let c1 = timing::best_of(2, || {
        for p in &payloads {
            dctx.decompress(&mut buf[..], p).unwrap();
        }
    });
    let zsum = q(&zfile, &[], Reduce::Sum, None);
    let zmean = q(&zfile, &[], Reduce::Mean, None);

    println!("cores: {cores}; 2 GiB of f32, 1024 × 1024 chunks");
    println!();
    println!("| pass | time | GB/s | vs baseline |");
    println!("| --- | --- | --- | --- |");
    let line = |name: &str, t: Duration, base: f64, base_name: &str| {
        println!(
            "| {name} | {:.3} s | {:.2} | {:.0} % of {base_name} |",
            t.as_secs_f64(),
            gbps(logical, t),
            100.0 * gbps(logical, t) / base
        );
    };
    let r1 = gbps(logical, roof1);
    let rn = gbps(logical, roof_n);
    println!(
        "| plain f32 sum, 1 thread (roofline) | {:.3} s | {r1:.2} | |",
        roof1.as_secs_f64()
    );
    println!(
        "| plain f32 sum, {cores} threads | {:.3} s | {rn:.2} | |",
        roof_n.as_secs_f64()
    );
    line("raw `sum`", sum, r1, "1-thread roofline");
    line(
        "raw `sum` unchecked (no checksum table, as before)",
        sum_unchecked,
        r1,
        "1-thread roofline",
    );
    line("raw `mean`", mean, r1, "1-thread roofline");
    line("raw `sum` along axis 0", axis0, r1, "1-thread roofline");
    line(
        "raw `sum` along axis 0, 1 thread",
        axis0_one,
        r1,
        "1-thread roofline",
    );
    if let Some(np) = numpy_axis0 {
        line(
            "NumPy `a.sum(axis=0, dtype=float64)`, memory-mapped `.npy`",
            np,
            r1,
            "1-thread roofline",
        );
    }
    line("raw `sum` along axis 1", axis1, r1, "1-thread roofline");
    let cz = gbps(logical, c1) * cores as f64;
    println!(
        "| C decoder, 1 thread, every chunk | {:.3} s | {:.2} | |",
        c1.as_secs_f64(),
        gbps(logical, c1)
    );
    line("zstd `sum`", zsum, cz, "C 1 thread × cores");
    line("zstd `mean`", zmean, cz, "C 1 thread × cores");
    println!(
        "| strided `sum` touching {touched} of 512 chunks ({:.1} %) | {:.4} s | | {:.1} % of the full raw `sum` time |",
        100.0 * touched as f64 / 512.0,
        strided_t.as_secs_f64(),
        100.0 * strided_t.as_secs_f64() / sum.as_secs_f64()
    );
    drop(raw_in);
    drop(z_in);
    std::fs::remove_file(&raw_path).ok();
    std::fs::remove_file(&zstd_path).ok();
}
