//! Timing shared by the benches: best wall time of several runs.

use std::hint::black_box;
use std::time::{Duration, Instant};

/// The fastest of `runs` runs of `f` (its result is kept alive so it is not optimised out).
pub fn best_of<T>(runs: usize, mut f: impl FnMut() -> T) -> Duration {
    let mut best = Duration::MAX;
    for _ in 0..runs {
        let t = Instant::now();
        black_box(f());
        best = best.min(t.elapsed());
    }
    best
}
