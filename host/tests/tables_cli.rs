//! An image whose group tables fail (`docs/cetrafs.md` section 2, check 7), through the
//! real binary: the reading commands (`ls`, `cat`, `stat`, `extract`, and
//! `mount --read-only`) read through it with a warning naming the failing field, since a
//! reader does not depend on the tables (each block group's place comes from the
//! superblock); `verify` reports the damage, and a writing command refuses.

#![allow(clippy::restriction, reason = "tests and benches fail by panicking")]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tet_alloc::cetrafs::mkfs::{ImageBuilder, Params, Placement, Sparse};
use tet_alloc::cetrafs::testing::reseal;
use tet_core::block::MemDevice;
use tet_core::cetrafs::{Buffers, Fs};

mod common;
use common::run;

const BIN: &str = env!("CARGO_BIN_EXE_tet-host");

fn scratch(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tet-host-tables-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// An image with `/etc/motd` and a file of two blocks, `/data.bin`.
fn image() -> Vec<u8> {
    let mut b = ImageBuilder::new(Params {
        size_bytes: 8 << 20,
        bg_size_blocks: 512,
        ..Params::default()
    });
    let d = b.mkdir(ImageBuilder::ROOT, b"etc", 0o755).unwrap();
    b.add_file(
        d,
        b"motd",
        b"welcome\n".to_vec(),
        Sparse::Dense,
        Placement::Contiguous,
    )
    .unwrap();
    b.add_file(
        ImageBuilder::ROOT,
        b"data.bin",
        data(),
        Sparse::Dense,
        Placement::Contiguous,
    )
    .unwrap();
    b.build().unwrap()
}

fn data() -> Vec<u8> {
    (0..2 * 4096 + 100).map(|i| (i % 251) as u8).collect()
}

/// The two kinds of table damage: a descriptor whose checksum fails, and a zone group
/// whose range is wrong with its checksum resealed (a table that disagrees with the map).
fn damaged(kind: &str) -> Vec<u8> {
    let mut img = image();
    let (zg, bg) = {
        let mut bufs = Buffers::new();
        let fs = Fs::open(MemDevice::new(&img), &mut bufs.data).unwrap();
        let sb = fs.superblock().raw();
        (
            sb.zg_table_start.get() as usize * 4096,
            sb.bg_table_start.get() as usize * 4096,
        )
    };
    match kind {
        "checksum" => img[bg + 64] ^= 1,
        _ => {
            // zone group 0's cold part: bg_count (byte 520) 0
            img[zg + 520..zg + 524].copy_from_slice(&0u32.to_le_bytes());
            reseal(&mut img);
        }
    }
    assert!(Fs::open(MemDevice::new(&img), &mut Buffers::new().data).is_err());
    img
}

#[test]
fn reading_commands_read_through_group_tables_that_fail_and_writers_refuse() {
    for (kind, field) in [
        ("checksum", "block_group"),
        ("range", "zone_group.bg_count"),
    ] {
        let d = scratch(kind);
        std::fs::write(d.join("img"), damaged(kind)).unwrap();
        let warned = |err: &str| {
            assert!(
                err.contains("the group tables fail their checks")
                    && err.contains(field)
                    && err.contains("reading without them"),
                "{kind}: {err}"
            );
        };
        let (code, out, err) = run(&["ls", "img", "/etc"], &d);
        assert_eq!(code, 0, "{kind}: ls: {err}");
        assert!(String::from_utf8_lossy(&out).contains("motd"), "{kind}");
        warned(&err);
        let (code, out, err) = run(&["cat", "img", "/etc/motd"], &d);
        assert_eq!(
            (code, out.as_slice()),
            (0, &b"welcome\n"[..]),
            "{kind}: {err}"
        );
        warned(&err);
        let (code, _, err) = run(&["stat", "img", "/data.bin"], &d);
        assert_eq!(code, 0, "{kind}: stat: {err}");
        let (code, _, err) = run(&["extract", "img", "out"], &d);
        assert_eq!(code, 0, "{kind}: extract: {err}");
        warned(&err);
        assert_eq!(std::fs::read(d.join("out/data.bin")).unwrap(), data());
        assert_eq!(std::fs::read(d.join("out/etc/motd")).unwrap(), b"welcome\n");
        // The checker reports the damage; a writing command refuses (exit 4).
        let (code, _, _) = run(&["verify", "img"], &d);
        assert_ne!(code, 0, "{kind}: verify called a damaged table clean");
        std::fs::write(d.join("new"), b"x").unwrap();
        let (code, _, err) = run(&["put", "img", "new", "/new"], &d);
        assert_eq!(code, 4, "{kind}: put: {err}");
        assert!(err.contains(field), "{kind}: put: {err}");
        mount_read_only(&d, kind);
        // Cut short too (section 2, check 3): both relaxations of a read-only mount hold
        // at once, each with its warning.
        let mut short = damaged(kind);
        short.truncate(short.len() - 4 * 4096);
        std::fs::write(d.join("short"), short).unwrap();
        let (code, out, err) = run(&["cat", "short", "/etc/motd"], &d);
        assert_eq!(
            (code, out.as_slice()),
            (0, &b"welcome\n"[..]),
            "{kind}: {err}"
        );
        warned(&err);
        assert!(err.contains("was it truncated?"), "{kind}: {err}");
        let _ = std::fs::remove_dir_all(&d);
    }
}

/// `mount --read-only` of the damaged image in `d`: it mounts with the warning and the
/// files read back. Needs `/dev/fuse` (skipped without it, as `mount_cli` is).
fn mount_read_only(d: &Path, kind: &str) {
    let fuse = Path::new("/dev/fuse").exists()
        && Command::new("sh")
            .args(["-c", "command -v fusermount3 || [ $(id -u) = 0 ]"])
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
    if !fuse {
        assert!(
            std::env::var_os("CI").is_none(),
            "/dev/fuse is required under CI"
        );
        println!("SKIPPING mount --read-only: no /dev/fuse");
        return;
    }
    let mnt = d.join("mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    let mut child = Command::new(BIN)
        .args(["mount", "img", "mnt", "--read-only", "--foreground"])
        .current_dir(d)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let want = std::fs::canonicalize(&mnt).unwrap();
    let mounted = || {
        std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap()
            .lines()
            .any(|l| l.split(' ').nth(4) == Some(&*want.to_string_lossy()) && l.contains(" - fuse"))
    };
    let t0 = Instant::now();
    while !mounted() {
        if let Ok(Some(st)) = child.try_wait() {
            let out = child.wait_with_output().unwrap();
            panic!(
                "{kind}: mount --read-only exited ({st:?}): {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "{kind}: mount did not come up"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let motd = std::fs::read(mnt.join("etc/motd"));
    let bin = std::fs::read(mnt.join("data.bin"));
    let refused = std::fs::write(mnt.join("new"), b"x").is_err();
    for _ in 0..300 {
        let ok = Command::new("umount")
            .arg(&mnt)
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let t0 = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t0.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("{kind}: the mount did not end after umount");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{kind}: mount exit: {err}");
    assert!(
        err.contains("the group tables fail their checks"),
        "{kind}: {err}"
    );
    assert_eq!(motd.unwrap(), b"welcome\n", "{kind}");
    assert_eq!(bin.unwrap(), data(), "{kind}");
    assert!(refused, "{kind}: a read-only mount took a write");
}
