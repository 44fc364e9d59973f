//! `cargo bench -p tet-host --bench ops`: the operations of issue 24 beside their
//! baselines, measured in the same run (the machine is shared):
//!
//! * `histogram`, `norm_l2`, `norm_l1`, `any_nan` over 1 GiB of raw f32 (16384 × 16384
//!   in 1024 × 1024 chunks, the `data_path` field), against the scalar `sum` of the same
//!   file (goal: at least 0.7× its speed);
//! * `median` and `quantile` of 50 M f32 values (raw, 1 Mi-element chunks, pseudo-random)
//!   against `numpy.quantile` / `numpy.median` on the loaded array (a `.npy` of the same
//!   values, timed by `TET_PYTHON`, default `/work/venv-tet/bin/python`), with the
//!   engine's peak heap against the selection as `f64`; then a `histogram` of those
//!   values, which follow no order (so no block of them is counted at once), beside
//!   their `sum`.
//!
//! `TET_BENCH_DIR` sets where the files go (default: the temp dir); they are removed.

#![allow(clippy::restriction, reason = "tests and benches fail by panicking")]

mod timing;

#[global_allocator]
static A: timing::Counting = timing::Counting;

use std::path::Path;
use std::time::Duration;

use tet_alloc::tet::history::open_for_reading;
use tet_alloc::tet::query::{plan, Axes, Histogram, Operation, Quantile, Quantiles};
use tet_alloc::tet::writer::{DatasetSpec, Writer};
use tet_core::tet::fold::Reduce;
use tet_core::tet::{Codec, DType, DatasetId};
use tet_host::atomic::{AtomicFile, RealFs};
use tet_host::tet::query::run;

const SIDE: u64 = 16384;
const CHUNK: u64 = 1024;
const N_Q: u64 = 50_000_000;
const Q_CHUNK: u64 = 1 << 20;

fn write_field(path: &Path) {
    let _ = std::fs::remove_file(path);
    let spec = [DatasetSpec {
        name: "field",
        dtype: DType::F32,
        shape: &[SIDE, SIDE],
        chunk_shape: &[CHUNK, CHUNK],
    }];
    let mut w = Writer::new(AtomicFile::create(path, RealFs).unwrap(), &spec).unwrap();
    let mut batch = Vec::new();
    for i in 0..SIDE / CHUNK {
        for j in 0..SIDE / CHUNK {
            let mut t = Vec::new();
            timing::field_tile(i, j, CHUNK, &mut t);
            batch.push((DatasetId(0), vec![i, j], t));
            if batch.len() == 8 {
                tet_host::tet::write::write_batch(&mut w, &batch, Codec::Raw, 3).unwrap();
                batch.clear();
            }
        }
    }
    w.finish(None).unwrap().commit().unwrap();
}

/// 50 M pseudo-random f32 values (xorshift, about 24 significant bits each).
fn values() -> Vec<u8> {
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut out = Vec::with_capacity((N_Q * 4) as usize);
    for _ in 0..N_Q {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let v = ((x >> 40) as f32) / 16_777_216.0 * 200.0 - 100.0;
        out.extend_from_slice(&v.to_le_bytes());
    }
    out
}

fn write_values(path: &Path, bytes: &[u8]) {
    let _ = std::fs::remove_file(path);
    let spec = [DatasetSpec {
        name: "v",
        dtype: DType::F32,
        shape: &[N_Q],
        chunk_shape: &[Q_CHUNK],
    }];
    let mut w = Writer::new(AtomicFile::create(path, RealFs).unwrap(), &spec).unwrap();
    w.write_array(DatasetId(0), bytes, Codec::Raw).unwrap();
    w.finish(None).unwrap().commit().unwrap();
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

fn main() {
    let dir = std::env::var_os("TET_BENCH_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let python = std::env::var("TET_PYTHON").unwrap_or_else(|_| "/work/venv-tet/bin/python".into());

    // Reductions over 1 GiB of raw f32.
    let field = dir.join("tet-ops-field.tet");
    write_field(&field);
    let input = tet_host::input::Input::open(&field).unwrap();
    let file = open_for_reading(input.bytes()).unwrap().file;
    let ds = file.dataset("field").unwrap();
    let p = plan(&file, ds, &[]).unwrap();
    let ax = Axes::new(2, None).unwrap();
    let t = |op: Operation| timing::best_of(3, || run(&file, &p, op, &ax, cores, 8 << 30).unwrap());
    // The baseline first and last, its better time kept (the machine is shared).
    let sum_a = t(Operation::Reduce(Reduce::Sum));
    let rows: Vec<(&str, Duration)> = vec![
        ("`norm_l2`", t(Operation::Reduce(Reduce::NormL2))),
        ("`norm_l1`", t(Operation::Reduce(Reduce::NormL1))),
        ("`any_nan`", t(Operation::Reduce(Reduce::AnyNan))),
        (
            "`histogram`, 64 bins, range given",
            t(Operation::Histogram(Histogram {
                bins: 64,
                range: Some((-150.0, 150.0)),
            })),
        ),
        (
            "`histogram`, 64 bins, the data's range (two passes)",
            t(Operation::Histogram(Histogram {
                bins: 64,
                range: None,
            })),
        ),
    ];
    let sum = sum_a.min(t(Operation::Reduce(Reduce::Sum)));
    drop(input);
    std::fs::remove_file(&field).ok();
    println!("cores: {cores}; 1 GiB of raw f32, 1024 × 1024 chunks");
    println!();
    println!("| query | time | speed vs the scalar `sum` |");
    println!("| --- | --- | --- |");
    println!("| `sum` (baseline) | {:.3} s | 1.00× |", secs(sum));
    for (name, d) in &rows {
        println!(
            "| {name} | {:.3} s | {:.2}× |",
            secs(*d),
            secs(sum) / secs(*d)
        );
    }

    // Quantiles of 50 M f32 values against NumPy on the loaded array.
    let bytes = values();
    let qpath = dir.join("tet-ops-quantile.tet");
    let npy = dir.join("tet-ops-quantile.npy");
    write_values(&qpath, &bytes);
    tet_host::tet::npy::write_raw(&npy, DType::F32, &[N_Q], &bytes).unwrap();
    drop(bytes);
    let script = format!(
        "import numpy as np, time\n\
         a = np.load({npy:?})\n\
         def best(f):\n\
         \x20   b = 1e9\n\
         \x20   for _ in range(3):\n\
         \x20       t = time.perf_counter(); f(); b = min(b, time.perf_counter() - t)\n\
         \x20   return b\n\
         print(best(lambda: np.median(a)), best(lambda: np.quantile(a, 0.5)), \
         best(lambda: np.quantile(a, [0.05, 0.5, 0.95])))\n",
        npy = npy.display().to_string()
    );
    let np_out = std::process::Command::new(&python)
        .arg("-c")
        .arg(&script)
        .output()
        .expect("run python");
    let np: Vec<f64> = String::from_utf8_lossy(&np_out.stdout)
        .split_whitespace()
        .filter_map(|s| s.parse().ok())
        .collect();
    let input = tet_host::input::Input::open(&qpath).unwrap();
    let file = open_for_reading(input.bytes()).unwrap().file;
    let ds = file.dataset("v").unwrap();
    let p = plan(&file, ds, &[]).unwrap();
    let ax = Axes::new(1, None).unwrap();
    let as_f64 = (N_Q * 8) as f64;
    let q = |op: Operation| {
        timing::reset_peak();
        let base = timing::live();
        let d = timing::best_of(3, || run(&file, &p, op, &ax, cores, 8 << 30).unwrap());
        (d, (timing::peak() - base) as f64 / as_f64)
    };
    let half = Quantile {
        q: 0.5,
        integral: false,
    };
    let med = q(Operation::Median);
    let q50 = q(Operation::Quantile(half));
    let three: Vec<Quantile> = [0.05, 0.5, 0.95]
        .iter()
        .map(|q| Quantile {
            q: *q,
            integral: false,
        })
        .collect();
    let q3 = q(Operation::Quantiles(Quantiles::new(&three).unwrap()));
    // A histogram of values with no order (no block lies in one bin), beside their sum.
    let t = |op: Operation| timing::best_of(3, || run(&file, &p, op, &ax, cores, 8 << 30).unwrap());
    let noise_sum = t(Operation::Reduce(Reduce::Sum));
    let noise_hist = t(Operation::Histogram(Histogram {
        bins: 64,
        range: Some((-100.0, 100.0)),
    }));
    drop(input);
    std::fs::remove_file(&qpath).ok();
    std::fs::remove_file(&npy).ok();
    println!();
    println!("50 M f32 values (raw, 1 Mi-element chunks); NumPy {python} on the loaded array");
    println!();
    println!("| query | ours | NumPy | ours vs NumPy | peak heap / selection as f64 |");
    println!("| --- | --- | --- | --- | --- |");
    let np_at = |i: usize| np.get(i).copied().unwrap_or(f64::NAN);
    for (name, (d, peak), base) in [
        ("`median`", med, np_at(0)),
        ("`quantile` 0.5", q50, np_at(1)),
        ("`quantile` [0.05, 0.5, 0.95]", q3, np_at(2)),
    ] {
        println!(
            "| {name} | {:.3} s | {base:.3} s | {:.2}× | {peak:.2} |",
            secs(d),
            base / secs(d)
        );
    }
    println!();
    println!(
        "The same 50 M values, uniform in [-100, 100): `sum` {:.3} s, `histogram` (64 bins) \
         {:.3} s ({:.2}× the sum's speed)",
        secs(noise_sum),
        secs(noise_hist),
        secs(noise_sum) / secs(noise_hist)
    );
}
