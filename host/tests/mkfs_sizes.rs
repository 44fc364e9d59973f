//! `mkfs` at every size from the smallest the settings allow to 1 TiB: each image is
//! written sparse (only metadata takes disk space), verifies clean, and both commands
//! stay under a 64 MiB data limit (`RLIMIT_DATA`; file mappings are not data).

#![allow(clippy::restriction, reason = "tests and benches fail by panicking")]

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

fn scratch() -> PathBuf {
    let d = std::env::temp_dir().join(format!("tet-host-mkfs-sizes-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Runs tet-host with `ulimit -d` (KiB) set; returns the exit code and both outputs.
fn limited(kib: u64, args: &[&str], cwd: &Path) -> (i32, String) {
    let out = Command::new("bash")
        .arg("-c")
        .arg(format!("ulimit -d {kib}; exec \"$@\""))
        .arg("_")
        .arg(env!("CARGO_BIN_EXE_tet-host"))
        .args(args)
        .current_dir(cwd)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[test]
fn mkfs_streams_every_size_up_to_a_tebibyte() {
    let d = scratch();
    // The smallest size these settings allow, found from the refusal message.
    let (code, msg) = limited(
        65536,
        &[
            "mkfs",
            "tiny",
            "--size",
            "4K",
            "--zone-groups",
            "1",
            "--nodes",
            "1",
            "--inodes",
            "16",
        ],
        &d,
    );
    assert_eq!(code, 16, "{msg}");
    let smallest = msg
        .rsplit("the smallest image is ")
        .next()
        .unwrap()
        .trim()
        .to_string();
    assert!(
        msg.contains("with 1 zone group, 1 node and 16 inodes"),
        "{msg}"
    );
    let mut sizes: Vec<(String, Vec<&str>)> = vec![(
        smallest.clone(),
        vec!["--zone-groups", "1", "--nodes", "1", "--inodes", "16"],
    )];
    for s in ["1M", "64M", "1G", "64G", "1T"] {
        sizes.push((s.to_string(), vec![]));
    }
    for (size, extra) in &sizes {
        let img = format!("img-{size}");
        let mut args = vec!["mkfs", img.as_str(), "--size", size.as_str(), "--json"];
        args.extend(extra.iter().copied());
        let (code, out) = limited(65536, &args, &d);
        assert_eq!(code, 0, "mkfs --size {size}: {out}");
        let v: serde_json::Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
        let meta = std::fs::metadata(d.join(&img)).unwrap();
        let want = tet_host::cetrafs::mkfs::parse_size(size).unwrap() / 4096 * 4096;
        assert_eq!(meta.len(), want, "{size}: file length");
        // Sparse: what mkfs wrote is all the disk holds (512-byte units), and it grows
        // far slower than the image.
        let written = v["bytes_written"].as_u64().unwrap();
        assert!(
            meta.blocks() * 512 <= written + (1 << 20),
            "{size}: not sparse"
        );
        assert!(
            written <= (16 << 20),
            "{size}: wrote {written} bytes of metadata"
        );
        let (code, out) = limited(65536, &["verify", &img], &d);
        assert_eq!(code, 0, "verify --size {size}: {out}");
        std::fs::remove_file(d.join(&img)).unwrap();
    }
    // `T` is a unit, and a size with no room is refused in words.
    assert_eq!(tet_host::cetrafs::mkfs::parse_size("2T"), Ok(2 << 40));
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn defaults_scale_with_the_size() {
    use tet_host::cetrafs::mkfs::{default_bg_blocks, default_inodes, default_journal_blocks};
    // 16 MiB groups up to 16 GiB, then about 1024 groups, at most 1 GiB each.
    assert_eq!(default_bg_blocks(64 << 20), 4096);
    assert_eq!(default_bg_blocks(64 << 30), 16384);
    assert_eq!(default_bg_blocks(1 << 40), 262_144);
    assert_eq!(default_bg_blocks(1 << 50), 262_144);
    // One inode per 64 KiB up to 1024, then one per MiB up to 4 Mi.
    assert_eq!(default_inodes(1 << 20), 16);
    assert_eq!(default_inodes(64 << 20), 1024);
    assert_eq!(default_inodes(4 << 30), 4096);
    assert_eq!(default_inodes(1 << 40), 1 << 20);
    assert_eq!(default_inodes(1 << 50), 1 << 22);
    // 16 journal slots a node up to 16 MiB, doubling with the size to 256 from 128 MiB.
    assert_eq!(default_journal_blocks(1 << 20), 33);
    assert_eq!(default_journal_blocks(8 << 20), 33);
    assert_eq!(default_journal_blocks(16 << 20), 65);
    assert_eq!(default_journal_blocks((32 << 20) - 4096), 65);
    assert_eq!(default_journal_blocks(32 << 20), 129);
    assert_eq!(default_journal_blocks(64 << 20), 257);
    assert_eq!(default_journal_blocks((128 << 20) - 4096), 257);
    assert_eq!(default_journal_blocks(128 << 20), 513);
    assert_eq!(default_journal_blocks(1 << 30), 513);
    assert_eq!(default_journal_blocks(1 << 50), 513);
}
