//! `cargo bench -p tet-host --bench time_mean`: the time-mean map of a cube converted as a
//! time series (240 × 361 × 576 f32 in 1 × 361 × 576 chunks, 200 MB raw, as issue 24
//! tried it): `mean` along axis 0, where every chunk adds to one output box, next to the
//! scalar `mean` of the same file, and two rooflines measured in the same run over the
//! same mapped payloads: a plain per-cell sum in `f64` on every core (each thread a band
//! of time steps into its own map, the maps added at the end), and on one core.
//! Where `python3` (or `TET_PYTHON`) has NumPy, `numpy.mean(a, axis=0)` on the array
//! already in memory.
//!
//! `TET_BENCH_DIR` sets where the file goes (default: the temp dir); it is removed.

#![allow(clippy::restriction, reason = "tests and benches fail by panicking")]

mod timing;

use rayon::prelude::*;
use tet_alloc::tet::history::open_for_reading;
use tet_alloc::tet::query::{plan, Axes, Operation};
use tet_alloc::tet::writer::{DatasetSpec, Writer};
use tet_core::tet::fold::Reduce;
use tet_core::tet::{Codec, DType, DatasetId};
use tet_host::atomic::{AtomicFile, RealFs};
use tet_host::tet::query::run;

const T: u64 = 240;
const Y: u64 = 361;
const X: u64 = 576;

/// One time step's field: smooth in space, drifting in time.
fn step(t: u64) -> Vec<u8> {
    (0..Y * X)
        .flat_map(|i| {
            let (y, x) = (i / X, i % X);
            let v = 280.0
                + (y as f32 * 0.05).sin() * 20.0
                + (x as f32 * 0.03).cos() * 5.0
                + t as f32 * 0.01;
            v.to_le_bytes()
        })
        .collect()
}

/// Per-cell sums of the steps in `payload` (each `Y * X` f32).
fn cell_sums(payload: &[u8]) -> Vec<f64> {
    let mut out = vec![0f64; (Y * X) as usize];
    for s in payload.chunks_exact((Y * X * 4) as usize) {
        for (o, e) in out.iter_mut().zip(s.chunks_exact(4)) {
            *o += f64::from(f32::from_le_bytes(e.try_into().unwrap()));
        }
    }
    out
}

fn main() {
    let dir = std::env::var_os("TET_BENCH_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let path = dir.join("tet-time-mean.tet");
    let spec = [DatasetSpec {
        name: "t2m",
        dtype: DType::F32,
        shape: &[T, Y, X],
        chunk_shape: &[1, Y, X],
    }];
    let mut w = Writer::new(AtomicFile::create(&path, RealFs).unwrap(), &spec).unwrap();
    for t in 0..T {
        w.write_chunk(DatasetId(0), &[t, 0, 0], &step(t), Codec::Raw)
            .unwrap();
    }
    w.finish(None).unwrap().commit().unwrap();
    let input = tet_host::input::Input::open(&path).unwrap();
    let bytes = input.bytes();
    let file = open_for_reading(bytes).unwrap().file;
    let ds = file.dataset("t2m").unwrap();
    let p = plan(&file, ds, &[]).unwrap();
    let payload = &bytes[file.payload_floor() as usize..][..(T * Y * X * 4) as usize];
    let step_bytes = (Y * X * 4) as usize;
    let roof_n = timing::best_of(5, || {
        let steps = T as usize;
        let band = steps.div_ceil(cores) * step_bytes;
        let maps: Vec<Vec<f64>> = payload.par_chunks(band).map(cell_sums).collect();
        let mut total = vec![0f64; (Y * X) as usize];
        for m in &maps {
            for (a, b) in total.iter_mut().zip(m) {
                *a += b;
            }
        }
        total
    });
    let roof_1 = timing::best_of(3, || cell_sums(payload));
    let q = |op: Reduce, axes: Option<&[usize]>, threads: usize| {
        let ax = Axes::new(3, axes).unwrap();
        timing::best_of(5, || {
            run(&file, &p, Operation::Reduce(op), &ax, threads, 8 << 30).unwrap()
        })
    };
    let map = q(Reduce::Mean, Some(&[0]), cores);
    let map_1 = q(Reduce::Mean, Some(&[0]), 1);
    let scalar = q(Reduce::Mean, None, cores);
    let python = std::env::var("TET_PYTHON").unwrap_or_else(|_| "python3".into());
    let numpy = std::process::Command::new(&python)
        .args([
            "-c",
            &format!(
                "import numpy as np, time\n\
                 a = np.fromfile({:?}, dtype='<f4', count={}, offset={}).reshape({T}, {Y}, {X})\n\
                 best = 1e9\n\
                 for _ in range(5):\n    t = time.perf_counter(); m = a.mean(axis=0); best = min(best, time.perf_counter() - t)\n\
                 print(best)",
                path.display().to_string(),
                T * Y * X,
                file.payload_floor()
            ),
        ])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse::<f64>().ok());
    let gb = (T * Y * X * 4) as f64 / 1e9;
    let row = |name: &str, d: std::time::Duration| {
        println!(
            "| {name} | {:.1} ms | {:.1} GB/s | {:.0} % |",
            d.as_secs_f64() * 1e3,
            gb / d.as_secs_f64(),
            roof_n.as_secs_f64() / d.as_secs_f64() * 100.0
        );
    };
    println!(
        "{cores} cores; {:.0} MB raw in {T} chunks of 1 × {Y} × {X}",
        gb * 1e3
    );
    println!("| pass | time | rate | of the per-cell roofline |");
    println!("| --- | --- | --- | --- |");
    row("per-cell f64 sum, every core (roofline)", roof_n);
    row("per-cell f64 sum, one core", roof_1);
    row("`mean` axis 0, every core", map);
    row("`mean` axis 0, `-j 1`", map_1);
    row("scalar `mean`, every core", scalar);
    match numpy {
        Some(s) => println!(
            "| `numpy.mean(a, axis=0)`, array in memory | {:.1} ms | {:.1} GB/s | {:.0} % |",
            s * 1e3,
            gb / s,
            roof_n.as_secs_f64() / s * 100.0
        ),
        None => println!("| `numpy.mean(a, axis=0)` | (no NumPy for python3) | | |"),
    }
    drop(input);
    let _ = std::fs::remove_file(&path);
}
