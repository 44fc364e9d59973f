//! `tet-host extract` through the real binary: a tree restored from an image matches the
//! host tree it was made from (names, contents, holes, modes, times, symlinks, hard
//! links, xattrs, owners as root); nothing is written outside DEST, even for an image
//! whose directory names `..`.

#![allow(clippy::restriction, reason = "tests and benches fail by panicking")]

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

mod common;
use common::run;

fn scratch(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tet-extract-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn tree(root: &Path) {
    let t = root.join("tree");
    std::fs::create_dir_all(t.join("sub/deeper")).unwrap();
    std::fs::write(t.join("a.txt"), b"alpha\n").unwrap();
    std::fs::write(t.join("empty"), b"").unwrap();
    let mut sparse = vec![0u8; 1 << 20];
    sparse[(1 << 20) - 1] = 1;
    std::fs::write(t.join("sub/sparse.bin"), &sparse).unwrap();
    std::fs::write(t.join("sub/deeper/c.bin"), (0u8..=255).collect::<Vec<_>>()).unwrap();
    std::fs::hard_link(t.join("a.txt"), t.join("sub/a-again.txt")).unwrap();
    std::os::unix::fs::symlink("../a.txt", t.join("sub/link")).unwrap();
    xattr::set(t.join("a.txt"), "user.origin", b"host").unwrap();
    std::fs::set_permissions(t.join("a.txt"), std::fs::Permissions::from_mode(0o640)).unwrap();
    std::fs::set_permissions(t.join("sub"), std::fs::Permissions::from_mode(0o750)).unwrap();
    let when = std::time::UNIX_EPOCH + std::time::Duration::new(1_700_000_000, 123_456_789);
    for f in ["a.txt", "empty", "sub/sparse.bin", "sub/deeper/c.bin"] {
        std::fs::File::options()
            .write(true)
            .open(t.join(f))
            .unwrap()
            .set_modified(when)
            .unwrap();
    }
}

/// Every entry below `dir`, relative, sorted.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            out.push(p.strip_prefix(dir).unwrap().to_path_buf());
            if std::fs::symlink_metadata(&p).unwrap().is_dir() {
                stack.push(p);
            }
        }
    }
    out.sort();
    out
}

#[test]
fn a_tree_comes_back_as_it_went_in() {
    let d = scratch("tree");
    tree(&d);
    let (code, _, err) = run(&["mkfs", "img", "--size", "16M", "--from", "tree"], &d);
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = run(&["extract", "--json", "img", "out"], &d);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(
        (
            v["files"].as_u64(),
            v["directories"].as_u64(),
            v["symlinks"].as_u64()
        ),
        (Some(4), Some(2), Some(1)),
        "{v}"
    );
    assert_eq!(v["hard_links"], 1);
    let (src, dst) = (d.join("tree"), d.join("out"));
    assert_eq!(walk(&src), walk(&dst));
    for rel in walk(&src) {
        let (a, b) = (src.join(&rel), dst.join(&rel));
        let (ma, mb) = (
            std::fs::symlink_metadata(&a).unwrap(),
            std::fs::symlink_metadata(&b).unwrap(),
        );
        assert_eq!(ma.file_type(), mb.file_type(), "{rel:?}");
        assert_eq!(ma.mode() & 0o7777, mb.mode() & 0o7777, "{rel:?}");
        if ma.file_type().is_symlink() {
            assert_eq!(
                std::fs::read_link(&a).unwrap(),
                std::fs::read_link(&b).unwrap()
            );
            continue;
        }
        assert_eq!(ma.mtime(), mb.mtime(), "{rel:?}");
        assert_eq!(ma.mtime_nsec(), mb.mtime_nsec(), "{rel:?}");
        if ma.is_file() {
            assert_eq!(
                std::fs::read(&a).unwrap(),
                std::fs::read(&b).unwrap(),
                "{rel:?}"
            );
        }
        if ma.uid() == 0 {
            assert_eq!((ma.uid(), ma.gid()), (mb.uid(), mb.gid()), "{rel:?}");
        }
    }
    // The hard link is a link, the holes are holes, the xattr is back.
    let ino = |p: &str| std::fs::metadata(dst.join(p)).unwrap().ino();
    assert_eq!(ino("a.txt"), ino("sub/a-again.txt"));
    assert!(
        std::fs::metadata(dst.join("sub/sparse.bin"))
            .unwrap()
            .blocks()
            < 64
    );
    assert_eq!(
        xattr::get(dst.join("a.txt"), "user.origin").unwrap(),
        Some(b"host".to_vec())
    );
    // One file; a DEST that is not empty, or is a file, is refused.
    let (code, _, err) = run(&["extract", "img", "/sub/deeper/c.bin", "one"], &d);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        std::fs::read(d.join("one/c.bin")).unwrap(),
        (0u8..=255).collect::<Vec<_>>()
    );
    let (code, _, err) = run(&["extract", "img", "out"], &d);
    assert_eq!(code, 16, "{err}");
    assert!(err.contains("is not empty"), "{err}");
    let (code, _, err) = run(&["extract", "img", "img"], &d);
    assert_eq!(code, 16, "{err}");
    let _ = std::fs::remove_dir_all(&d);
}

/// A directory entry that says `..` (a hostile or damaged image) is not followed out of
/// DEST: the core's read path skips an entry that does not validate (verify reports it),
/// and extract restores the rest.
#[test]
fn nothing_is_written_outside_dest() {
    let d = scratch("escape");
    std::fs::create_dir_all(d.join("tree/QQ")).unwrap();
    std::fs::write(d.join("tree/QQ/evil"), b"escaped").unwrap();
    std::fs::write(d.join("tree/keep"), b"kept").unwrap();
    let (code, _, err) = run(&["mkfs", "img", "--size", "8M", "--from", "tree"], &d);
    assert_eq!(code, 0, "{err}");
    let mut img = std::fs::read(d.join("img")).unwrap();
    let at = img.windows(2).position(|w| w == b"QQ").unwrap();
    img[at..at + 2].copy_from_slice(b"..");
    tet_alloc::cetrafs::testing::reseal(&mut img);
    std::fs::write(d.join("img"), &img).unwrap();
    std::fs::create_dir_all(d.join("dest")).unwrap();
    let (code, _, err) = run(&["extract", "img", "dest/inner"], &d);
    assert_eq!(code, 0, "{err}");
    assert_eq!(std::fs::read(d.join("dest/inner/keep")).unwrap(), b"kept");
    assert!(!d.join("dest/evil").exists() && !d.join("evil").exists());
    let (code, out, _) = run(&["verify", "img"], &d);
    assert_eq!(code, 4, "{}", String::from_utf8_lossy(&out));
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_failed_extract_creates_nothing() {
    let d = scratch("nothing");
    std::fs::create_dir_all(d.join("tree")).unwrap();
    std::fs::write(d.join("tree/a"), b"a").unwrap();
    let (code, _, err) = run(&["mkfs", "img", "--size", "8M", "--from", "tree"], &d);
    assert_eq!(code, 0, "{err}");
    // A path the image does not hold: said as ls says it, and DEST is not made.
    let (code, _, err) = run(&["extract", "img", "/nope", "out"], &d);
    assert_eq!(code, 8, "{err}");
    assert!(err.contains("/nope: no such file or directory"), "{err}");
    assert!(!d.join("out").exists());
    // An image that does not mount: nothing made either.
    std::fs::write(d.join("zero.img"), vec![0u8; 1 << 20]).unwrap();
    let (code, _, err) = run(&["extract", "zero.img", "out"], &d);
    assert_ne!(code, 0, "{err}");
    assert!(!d.join("out").exists(), "{err}");
    // The same request that succeeds makes it.
    let (code, _, err) = run(&["extract", "img", "/a", "out"], &d);
    assert_eq!(code, 0, "{err}");
    assert_eq!(std::fs::read(d.join("out/a")).unwrap(), b"a");
    let _ = std::fs::remove_dir_all(&d);
}
