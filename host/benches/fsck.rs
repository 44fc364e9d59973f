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

mod timing;

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use tet_alloc::cetrafs::fsck;
use tet_alloc::cetrafs::mkfs::{ImageBuilder, Params, Placement, Sparse};
use tet_host::cetrafs::device::FileDevice;

#[global_allocator]
static ALLOC: timing::Counting = timing::Counting;

const DIRS: usize = 10_000;
const FILES_PER_DIR: usize = 20;
const IMAGE: u64 = 2 << 30;

fn content(d: usize, f: usize) -> Vec<u8> {
    let n = (d * 7 + f * 13) % 200 + 1;
    (0..n).map(|i| b'a' + ((d + f + i) % 26) as u8).collect()
}

fn name(prefix: char, i: usize) -> String {
    format!("{prefix}{i:05}")
}

fn make_tree(root: &Path) {
    let done = root.join(".done");
    if done.exists() {
        return;
    }
    let _ = std::fs::remove_dir_all(root);
    for d in 0..DIRS {
        // Two levels: 100 top directories of 100 each, as trees usually look.
        let dir = root.join(name('t', d / 100)).join(name('d', d));
        std::fs::create_dir_all(&dir).unwrap();
        for f in 0..FILES_PER_DIR {
            std::fs::write(dir.join(name('f', f)), content(d, f)).unwrap();
        }
    }
    std::fs::write(done, b"").unwrap();
}

fn make_cetrafs(img: &Path) {
    if img.exists() {
        return;
    }
    let p = Params {
        size_bytes: IMAGE,
        bg_size_blocks: 32768,
        zone_groups: 4,
        nodes: 8,
        inodes: 220_000,
        ..Params::default()
    };
    let mut b = ImageBuilder::new(p);
    let mut tops = Vec::new();
    for t in 0..DIRS / 100 {
        tops.push(
            b.mkdir(ImageBuilder::ROOT, name('t', t).as_bytes(), 0o755)
                .unwrap(),
        );
    }
    for d in 0..DIRS {
        let dir = b
            .mkdir(tops[d / 100], name('d', d).as_bytes(), 0o755)
            .unwrap();
        for f in 0..FILES_PER_DIR {
            b.add_file(
                dir,
                name('f', f).as_bytes(),
                content(d, f),
                Sparse::Dense,
                Placement::Contiguous,
            )
            .unwrap();
        }
    }
    std::fs::write(img, b.build().unwrap()).unwrap();
}

fn make_ext4(tree: &Path, img: &Path) {
    if img.exists() {
        return;
    }
    let ok = Command::new("mkfs.ext4")
        .args(["-q", "-F", "-b", "4096", "-N", "220000", "-d"])
        .arg(tree)
        .arg(img)
        .arg("2G")
        .status()
        .expect("mkfs.ext4 (e2fsprogs) is needed for this bench")
        .success();
    assert!(ok, "mkfs.ext4 failed");
}

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
    let dir = std::env::var_os("TET_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/fsck-bench"));
    std::fs::create_dir_all(&dir).unwrap();
    let tree = dir.join("tree");
    let (cimg, eimg) = (dir.join("cetrafs.img"), dir.join("ext4.img"));
    let t = Instant::now();
    make_tree(&tree);
    make_cetrafs(&cimg);
    make_ext4(&tree, &eimg);
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

    let bin = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/release/tet-host");
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
