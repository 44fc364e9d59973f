//! `cargo build --release -p tet-host && cargo bench -p tet-host --bench mkfs_large`:
//! `tet-host mkfs` of an empty 1 TiB sparse image against `mkfs.ext4` on a 1 TiB sparse
//! file (lazy inode tables, its default), and `tet-host verify` of that image against
//! `e2fsck -fn` of the ext4 one, side by side in one run. Wall time is the best of 3;
//! peak memory is each process's maximum resident set (`/usr/bin/time -f %M`), which for
//! our commands is their heap plus code (no file is mapped). Files go to `TET_BENCH_DIR`
//! (default `target/mkfs-bench`; about 1.2 GiB of real disk for the ext4 metadata) and
//! are removed afterwards.

#![allow(clippy::restriction, reason = "tests and benches fail by panicking")]

use std::path::{Path, PathBuf};
use std::process::Command;

const SIZE: &str = "1T";

/// Best wall time (s) and the largest max-RSS (KiB) of 3 runs of `args`; `prepare`
/// runs before each (untimed).
fn measure(args: &[&str], mut prepare: impl FnMut()) -> (f64, u64) {
    let mut best = f64::MAX;
    let mut rss = 0u64;
    for _ in 0..3 {
        prepare();
        let out = Command::new("/usr/bin/time")
            .args(["-f", "@@ %e %M"])
            .args(args)
            .output()
            .expect("/usr/bin/time");
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let err = String::from_utf8_lossy(&out.stderr);
        let line = err.lines().rev().find(|l| l.starts_with("@@ ")).unwrap();
        let mut f = line[3..].split_whitespace();
        best = best.min(f.next().unwrap().parse().unwrap());
        rss = rss.max(f.next().unwrap().parse().unwrap());
    }
    (best, rss)
}

fn disk_use(p: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(p).map(|m| m.blocks() * 512).unwrap_or(0)
}

fn main() {
    let dir = std::env::var_os("TET_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/mkfs-bench"));
    std::fs::create_dir_all(&dir).unwrap();
    let bin = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/release/tet-host");
    assert!(
        bin.exists(),
        "build it first: cargo build --release -p tet-host"
    );
    let (ours, theirs) = (dir.join("cetrafs-1t.img"), dir.join("ext4-1t.img"));
    let (b, o, t) = (
        bin.to_str().unwrap(),
        ours.to_str().unwrap(),
        theirs.to_str().unwrap(),
    );

    let (mk_ours, mk_ours_rss) = measure(&[b, "mkfs", o, "--size", SIZE], || {
        let _ = std::fs::remove_file(&ours);
    });
    let (mk_theirs, mk_theirs_rss) = measure(&["mkfs.ext4", "-q", "-F", t], || {
        let _ = std::fs::remove_file(&theirs);
        let f = std::fs::File::create(&theirs).unwrap();
        f.set_len(1 << 40).unwrap();
    });
    // Warm both images once, then time the checks.
    let _ = Command::new(b).args(["verify", o]).output();
    let _ = Command::new("e2fsck").args(["-fn", t]).output();
    let (ck_ours, ck_ours_rss) = measure(&[b, "verify", o], || {});
    let (ck_theirs, ck_theirs_rss) = measure(&["e2fsck", "-fn", t], || {});

    println!("1 TiB sparse images, best of 3 (wall s, max RSS MiB, disk used MiB):");
    println!(
        "  tet-host mkfs     {mk_ours:6.3} s {:7.1} MiB {:8.1} MiB",
        mk_ours_rss as f64 / 1024.0,
        disk_use(&ours) as f64 / (1 << 20) as f64
    );
    println!(
        "  mkfs.ext4         {mk_theirs:6.3} s {:7.1} MiB {:8.1} MiB",
        mk_theirs_rss as f64 / 1024.0,
        disk_use(&theirs) as f64 / (1 << 20) as f64
    );
    println!(
        "  tet-host verify   {ck_ours:6.3} s {:7.1} MiB",
        ck_ours_rss as f64 / 1024.0
    );
    println!(
        "  e2fsck -fn        {ck_theirs:6.3} s {:7.1} MiB",
        ck_theirs_rss as f64 / 1024.0
    );
    let _ = std::fs::remove_file(&ours);
    let _ = std::fs::remove_file(&theirs);
}
