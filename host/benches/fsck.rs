//! `cargo bench -p tet-host --bench fsck`: the full cetrafs check (`tet-host verify`)
//! on an image of 200,000 files in 10,000 directories, side by side with `e2fsck -fn` on
//! an ext4 image that `mkfs.ext4 -d` built from the same tree, both warm, in one run.
//!
//! The tree, both images and the ext4 one's inputs are kept in `TET_BENCH_DIR` (default
//! `target/fsck-bench`, about 4 GiB) and reused by later runs. Reported: best wall time
//! of 3 runs of each command (process start included for both), our peak heap measured
//! in-process by a counting allocator, and a roofline: reading every block the check
//! must read (inode table, directory blocks) with plain 1 MiB `pread`s.

#![allow(clippy::restriction, reason = "tests and benches fail by panicking")]

mod common;
mod timing;

use std::os::unix::fs::FileExt;
use std::process::Command;
use std::time::{Duration, Instant};

use tet_alloc::cetrafs::fsck;
use tet_host::cetrafs::device::FileDevice;

#[global_allocator]
static ALLOC: timing::Counting = timing::Counting;

fn best_cmd(runs: usize, mut cmd: impl FnMut() -> Command) -> Duration {
    let mut best = Duration::MAX;
    for _ in 0..runs {
        let t = Instant::now();
        let out = cmd().output().unwrap();
        best = best.min(t.elapsed());
        assert!(
            out.status.code().is_some_and(|c| c == 0),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
    best
}

fn main() {
    let t = Instant::now();
    let common::Inputs {
        cetrafs: cimg,
        ext4: eimg,
        ..
    } = common::inputs();
    println!("inputs ready in {:.1} s", t.elapsed().as_secs_f64());

    // In-process: findings, counts and peak heap.
    let mut peak = 0usize;
    let mut inproc = Duration::MAX;
    let mut outcome = None;
    for _ in 0..3 {
        let dev = FileDevice::open(&cimg).unwrap();
        let base = timing::reset_peak();
        let s = Instant::now();
        let (found, o) = fsck::findings(&dev, &fsck::Options::default());
        inproc = inproc.min(s.elapsed());
        peak = peak.max(timing::peak() - base);
        assert!(found.is_empty(), "{:?}", &found[..found.len().min(5)]);
        outcome = Some(o);
    }
    let o = outcome.unwrap();

    // Roofline: read the inode table and the directory and data areas' used prefix with
    // 1 MiB preads (every block the check reads, in the cheapest order).
    let f = std::fs::File::open(&cimg).unwrap();
    let mut buf = vec![0u8; 1 << 20];
    let roof = timing::best_of(3, || {
        let mut sum = 0u64;
        let mut off = 0u64;
        // The check reads about (inodes + directory blocks + metadata) blocks.
        let want = (o.summary.inodes + o.entries / 15 + 4096) * 4096;
        while off < want {
            let n = f.read_at(&mut buf, off).unwrap();
            if n == 0 {
                break;
            }
            sum = sum.wrapping_add(u64::from(buf[0]));
            off += n as u64;
        }
        sum
    });

    let bin = common::tet_host();
    let ours = bin.exists().then(|| {
        best_cmd(3, || {
            let mut c = Command::new(&bin);
            c.arg("verify").arg(&cimg);
            c
        })
    });
    let theirs = best_cmd(3, || {
        let mut c = Command::new("e2fsck");
        c.arg("-fn").arg(&eimg);
        c
    });
    println!(
        "image: {} inodes in use, {} directory entries, maps {:.1} MiB",
        o.summary.inodes,
        o.entries,
        o.map_bytes as f64 / (1 << 20) as f64
    );
    println!(
        "tet-host verify (in-process fsck::check): {:.3} s, peak heap {:.1} MiB",
        inproc.as_secs_f64(),
        peak as f64 / (1 << 20) as f64
    );
    match ours {
        Some(d) => println!(
            "tet-host verify (binary):                 {:.3} s",
            d.as_secs_f64()
        ),
        None => println!(
            "tet-host verify (binary): build it first with cargo build --release -p tet-host"
        ),
    }
    println!(
        "e2fsck -fn (ext4, same tree):             {:.3} s",
        theirs.as_secs_f64()
    );
    println!(
        "roofline (1 MiB preads of the blocks read): {:.3} s",
        roof.as_secs_f64()
    );
}
