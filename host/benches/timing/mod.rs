//! Shared by the benches: best wall time of several runs, and the synthetic field the
//! data-path benches write.

#![allow(clippy::restriction, reason = "tests and benches fail by panicking")]

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Counts live heap bytes and their peak (file mappings and the page cache are not
/// heap). A bench declares `#[global_allocator] static A: Counting = Counting;`.
#[allow(dead_code)]
pub struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator; only counts.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(l) };
        if !p.is_null() {
            let now = LIVE.fetch_add(l.size(), Ordering::Relaxed) + l.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        unsafe { System.dealloc(p, l) };
        LIVE.fetch_sub(l.size(), Ordering::Relaxed);
    }
}

/// Heap bytes live now.
#[allow(dead_code)]
pub fn live() -> usize {
    LIVE.load(Ordering::Relaxed)
}

/// Restarts the peak from the bytes live now; returns them.
#[allow(dead_code)]
pub fn reset_peak() -> usize {
    let now = LIVE.load(Ordering::Relaxed);
    PEAK.store(now, Ordering::Relaxed);
    now
}

/// The peak since the last [`reset_peak`].
#[allow(dead_code)]
pub fn peak() -> usize {
    PEAK.load(Ordering::Relaxed)
}

#[allow(dead_code)]
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

/// Tile `(i, j)` of a `chunk × chunk` f32 field: smooth plus low-bit noise, so zstd has
/// about as much to do as on measured data (roughly 2.7× compression at level 3).
#[allow(dead_code)]
pub fn field_tile(i: u64, j: u64, chunk: u64, out: &mut Vec<u8>) {
    out.clear();
    let mut x = i.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ j;
    for r in 0..chunk {
        for c in 0..chunk {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let gy = (i * chunk + r) as f32;
            let gx = (j * chunk + c) as f32;
            let smooth = (gy * 0.001).sin() * 100.0 + (gx * 0.0007).cos() * 50.0;
            let v = (smooth * 16.0).round() / 16.0 + ((x & 0xf) as f32) / 256.0;
            out.extend_from_slice(&v.to_le_bytes());
        }
    }
}
