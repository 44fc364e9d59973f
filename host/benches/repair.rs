//! `cargo bench -p tet-host --bench repair`: `tet-host repair -y` on the `fsck` bench's
//! cetrafs image (200,000 files in 10,000 directories) with its inode bitmap zeroed,
//! side by side with `e2fsck -fy` on the ext4 image of the same tree with every group's
//! inode bitmap zeroed, in one run.
//!
//! Inputs are the `fsck` bench's (`TET_BENCH_DIR`, default `target/fsck-bench`), made if
//! absent. Each of 4 runs copies both images (`cp --sparse=always`), zeroes the bitmaps,
//! flushes the copies, then runs each tool under `/usr/bin/time -f '%e %M'` (the copy is
//! warm in the page cache, its writeback done), each tool first in every other run. Both
//! tools must exit 1 ("errors corrected"), and afterwards `tet-host verify` and
//! `e2fsck -fn` must find the copies clean. Reported: the best wall time of 4 (measured
//! around the process) with that
//! run's peak RSS; then, in-process, the repair's time and peak heap beside a full check
//! of the damaged image and one of the repaired image.

#![allow(clippy::restriction, reason = "tests and benches fail by panicking")]

mod common;
mod timing;

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use tet_alloc::cetrafs::{fsck, repair};
use tet_core::cetrafs::raw::RawSuperblock;
use tet_host::cetrafs::device::FileDevice;
use zerocopy::FromBytes;

#[global_allocator]
static ALLOC: timing::Counting = timing::Counting;

/// Runs of each command (an even number: each goes first in half of them).
const RUNS: usize = 4;
const BLOCK: u64 = 4096;

/// The cetrafs inode bitmap's blocks, from the superblock.
fn cetrafs_inode_bitmap(img: &Path) -> Vec<u64> {
    let mut head = [0u8; 424];
    File::open(img)
        .unwrap()
        .read_exact_at(&mut head, 0)
        .unwrap();
    let sb = RawSuperblock::read_from_bytes(&head[..]).unwrap();
    assert_eq!(&sb.magic, b"CTFS", "{} is not cetrafs", img.display());
    let start = sb.inode_bitmap_start.get();
    (start..start + sb.inode_bitmap_blocks.get()).collect()
}

/// Every ext4 group's inode bitmap block, as `dumpe2fs` prints them, and the block size.
fn ext4_inode_bitmaps(img: &Path) -> (Vec<u64>, u64) {
    let out = Command::new("dumpe2fs")
        .arg(img)
        .stderr(std::process::Stdio::null())
        .output()
        .expect("dumpe2fs (e2fsprogs) is needed for this bench");
    assert!(out.status.success(), "dumpe2fs {} failed", img.display());
    let text = String::from_utf8(out.stdout).unwrap();
    let mut block_size = None;
    let mut blocks = Vec::new();
    for line in text.lines() {
        if let Some(v) = line.strip_prefix("Block size:") {
            block_size = Some(v.trim().parse::<u64>().unwrap());
        }
        // "  Inode bitmap at 18 (+18), csum 0x…" or "  Inode bitmap at 1026 (bg #0 + 1026)".
        if let Some((_, rest)) = line.split_once("Inode bitmap at ") {
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            blocks.push(digits.parse::<u64>().unwrap());
        }
    }
    assert!(!blocks.is_empty(), "dumpe2fs printed no inode bitmap");
    (blocks, block_size.expect("dumpe2fs printed no block size"))
}

/// Overwrites the given blocks with zeros and flushes the file, so neither tool pays
/// for writing back the copy or the damage.
fn zero_blocks(img: &Path, blocks: &[u64], block_size: u64) {
    let f = OpenOptions::new().write(true).open(img).unwrap();
    let zeros = vec![0u8; block_size as usize];
    for b in blocks {
        f.write_all_at(&zeros, b * block_size).unwrap();
    }
    f.sync_all().unwrap();
}

fn sparse_copy(from: &Path, to: &Path) {
    let _ = std::fs::remove_file(to);
    let ok = Command::new("cp")
        .arg("--sparse=always")
        .arg(from)
        .arg(to)
        .status()
        .unwrap()
        .success();
    assert!(ok, "cp {} {} failed", from.display(), to.display());
}

/// One command under `/usr/bin/time`.
struct Timed {
    /// Around the process, measured here.
    wall: Duration,
    /// `%e` (elapsed seconds, as `time` reports them).
    elapsed: f64,
    /// `%M` (peak RSS, KiB).
    rss_kib: u64,
    code: i32,
    /// Lines it printed (standard output and error).
    lines: usize,
}

/// Runs `prog args…` under `/usr/bin/time -f '%e %M'`, its output into `log`.
fn timed(prog: &Path, args: &[&str], img: &Path, log: &Path) -> Timed {
    let stats = log.with_extension("time");
    let out = File::create(log).unwrap();
    let err = out.try_clone().unwrap();
    let t = Instant::now();
    let status = Command::new("/usr/bin/time")
        .arg("-f")
        .arg("%e %M")
        .arg("-o")
        .arg(&stats)
        .arg(prog)
        .args(args)
        .arg(img)
        .stdout(out)
        .stderr(err)
        .status()
        .expect("/usr/bin/time (GNU time) is needed for this bench");
    let wall = t.elapsed();
    // With a non-zero exit, time writes "Command exited with non-zero status N" first.
    let text = std::fs::read_to_string(&stats).unwrap();
    let last = text.lines().last().unwrap_or_default().to_owned();
    let (e, m) = last
        .split_once(' ')
        .unwrap_or_else(|| panic!("unexpected /usr/bin/time output {text:?}"));
    let lines = std::fs::read_to_string(log).unwrap().lines().count();
    Timed {
        wall,
        elapsed: e.parse().unwrap(),
        rss_kib: m.parse().unwrap(),
        code: status.code().expect("killed by a signal"),
        lines,
    }
}

/// Runs a check that must find `img` clean (exit 0).
fn assert_clean(prog: &Path, args: &[&str], img: &Path) {
    let out = Command::new(prog).args(args).arg(img).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{} {} {} after repair:\n{}{}",
        prog.display(),
        args.join(" "),
        img.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs a check that must find `img` damaged (exit 4, "errors left uncorrected").
fn assert_damaged(prog: &Path, args: &[&str], img: &Path) {
    let out = Command::new(prog).args(args).arg(img).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(4),
        "{} {} {} did not see the damage",
        prog.display(),
        args.join(" "),
        img.display()
    );
}

fn better(best: &mut Option<Timed>, t: Timed) {
    if best.as_ref().is_none_or(|b| t.wall < b.wall) {
        *best = Some(t);
    }
}

fn mib_of_kib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn main() {
    let t = Instant::now();
    let inputs = common::inputs();
    println!("inputs ready in {:.1} s", t.elapsed().as_secs_f64());
    let bin = common::tet_host();
    assert!(
        bin.exists(),
        "build it first: cargo build --release -p tet-host"
    );
    let e2fsck = Path::new("e2fsck");
    let ccopy = inputs.dir.join("repair-cetrafs.img");
    let ecopy = inputs.dir.join("repair-ext4.img");
    let cblocks = cetrafs_inode_bitmap(&inputs.cetrafs);
    let (eblocks, ebs) = ext4_inode_bitmaps(&inputs.ext4);
    println!(
        "zeroing: cetrafs inode bitmap blocks {}..={} ({}), ext4 {} inode bitmaps of {} bytes",
        cblocks[0],
        cblocks[cblocks.len() - 1],
        cblocks.len(),
        eblocks.len(),
        ebs
    );

    let (mut ours, mut theirs) = (None, None);
    for run in 0..RUNS {
        sparse_copy(&inputs.cetrafs, &ccopy);
        sparse_copy(&inputs.ext4, &ecopy);
        zero_blocks(&ccopy, &cblocks, BLOCK);
        zero_blocks(&ecopy, &eblocks, ebs);
        if run == 0 {
            assert_damaged(&bin, &["verify"], &ccopy);
            assert_damaged(e2fsck, &["-fn"], &ecopy);
        }
        // In turn first (the one that runs right after the copies and their flush may
        // share the machine with the host filesystem's writeback).
        let ours_run = || {
            timed(
                &bin,
                &["repair", "-y"],
                &ccopy,
                &inputs.dir.join("repair-cetrafs.log"),
            )
        };
        let theirs_run = || {
            timed(
                e2fsck,
                &["-fy"],
                &ecopy,
                &inputs.dir.join("repair-ext4.log"),
            )
        };
        let (c, e) = if run % 2 == 0 {
            let c = ours_run();
            (c, theirs_run())
        } else {
            let e = theirs_run();
            (ours_run(), e)
        };
        // 1: every problem found was corrected. 0 would mean the damage went unseen;
        // 4 and up, problems left or an operational error.
        assert_eq!(c.code, 1, "tet-host repair -y exited {}", c.code);
        assert_eq!(e.code, 1, "e2fsck -fy exited {}", e.code);
        assert_clean(&bin, &["verify"], &ccopy);
        assert_clean(e2fsck, &["-fn"], &ecopy);
        println!(
            "run {}: tet-host repair -y {:.3} s {:.1} MiB ({} lines); e2fsck -fy {:.3} s {:.1} MiB ({} lines)",
            run + 1,
            c.wall.as_secs_f64(),
            mib_of_kib(c.rss_kib),
            c.lines,
            e.wall.as_secs_f64(),
            mib_of_kib(e.rss_kib),
            e.lines
        );
        better(&mut ours, c);
        better(&mut theirs, e);
    }
    let (ours, theirs) = (ours.unwrap(), theirs.unwrap());

    // In-process, on 3 more damaged copies: the repair's time and peak heap, beside a
    // full check of the damaged image and one of the repaired image; best of 3 each.
    let opts = fsck::Options::default();
    let ropts = repair::RepairOptions {
        node_id: u64::MAX,
        force: false,
        memory_limit: opts.memory_limit,
        superblock: None,
    };
    let (mut check_damaged, mut whole, mut check_clean) =
        (Duration::MAX, Duration::MAX, Duration::MAX);
    let (mut heap, mut check_heap, mut found, mut out) = (0, 0, Vec::new(), None);
    for _ in 0..RUNS {
        sparse_copy(&inputs.cetrafs, &ccopy);
        zero_blocks(&ccopy, &cblocks, BLOCK);
        let base = timing::reset_peak();
        let s = Instant::now();
        found = fsck::findings(FileDevice::open(&ccopy).unwrap(), &opts).0;
        check_damaged = check_damaged.min(s.elapsed());
        check_heap = check_heap.max(timing::peak() - base);
        let dev = FileDevice::open_rw(&ccopy).unwrap();
        let base = timing::reset_peak();
        let s = Instant::now();
        let o = repair::repair(&dev, repair::Mode::Yes, &ropts, &mut |_| true).unwrap();
        whole = whole.min(s.elapsed());
        heap = heap.max(timing::peak() - base);
        assert!(o.left.is_empty(), "{:?}", &o.left[..o.left.len().min(5)]);
        drop(dev);
        let s = Instant::now();
        let after = fsck::findings(FileDevice::open(&ccopy).unwrap(), &opts).0;
        check_clean = check_clean.min(s.elapsed());
        assert!(after.is_empty(), "{:?}", &after[..after.len().min(5)]);
        out = Some(o);
    }
    let out = out.unwrap();
    let _ = std::fs::remove_file(&ccopy);
    let _ = std::fs::remove_file(&ecopy);

    println!();
    println!("| command | wall (best of {RUNS}) | `time` %e | peak RSS | lines printed |");
    println!("| --- | --- | --- | --- | --- |");
    for (what, r) in [
        ("`tet-host repair -y` (cetrafs)", &ours),
        ("`e2fsck -fy` (ext4, same tree)", &theirs),
    ] {
        println!(
            "| {what} | {:.3} s | {:.2} s | {:.1} MiB | {} |",
            r.wall.as_secs_f64(),
            r.elapsed,
            mib_of_kib(r.rss_kib),
            r.lines
        );
    }
    println!();
    println!(
        "in-process repair: {:.3} s, peak heap {:.1} MiB, {} rounds, {} fixes, {} findings before",
        whole.as_secs_f64(),
        heap as f64 / (1 << 20) as f64,
        out.rounds,
        out.fixes.len(),
        found.len()
    );
    println!(
        "  a finding is {} bytes, a fix {} bytes: {} findings take {:.1} MiB, {} fixes {:.1} MiB per copy",
        std::mem::size_of::<tet_core::cetrafs::Finding>(),
        std::mem::size_of::<repair::Fix>(),
        found.len(),
        (found.len() * std::mem::size_of::<tet_core::cetrafs::Finding>()) as f64 / (1 << 20) as f64,
        out.fixes.len(),
        (out.fixes.len() * std::mem::size_of::<repair::Fix>()) as f64 / (1 << 20) as f64
    );
    println!(
        "  peak heap of the check of the damaged image alone (its findings kept): {:.1} MiB",
        check_heap as f64 / (1 << 20) as f64
    );
    println!(
        "  a full check of the damaged image {:.3} s, of the repaired one {:.3} s (after a round \
         of bitmaps alone, repair itself checks again only what the round could change: \
         docs/cetrafs.md section 14)",
        check_damaged.as_secs_f64(),
        check_clean.as_secs_f64(),
    );
}
