//! The inputs the `fsck` and `repair` benches share: a tree of 200,000 small files in
//! 10,000 directories, a cetrafs image built from it by `ImageBuilder` and an ext4 image
//! `mkfs.ext4 -d` built from the same tree. All three live in `TET_BENCH_DIR` (default
//! `target/fsck-bench`, about 4 GiB) and are made once, then reused.

#![allow(clippy::restriction, reason = "tests and benches fail by panicking")]
#![allow(dead_code, reason = "each bench uses a part")]

use std::path::{Path, PathBuf};
use std::process::Command;

use tet_alloc::cetrafs::mkfs::{ImageBuilder, Params, Placement, Sparse};

/// Directories in the tree (100 top directories of 100 each).
pub const DIRS: usize = 10_000;
/// Files in each directory.
pub const FILES_PER_DIR: usize = 20;
/// Size of both images.
pub const IMAGE: u64 = 2 << 30;
/// Inodes of both images.
pub const INODES: u64 = 220_000;

/// The benches' inputs, made if absent.
pub struct Inputs {
    /// `TET_BENCH_DIR`.
    pub dir: PathBuf,
    /// The cetrafs image.
    pub cetrafs: PathBuf,
    /// The ext4 image.
    pub ext4: PathBuf,
}

/// File `f` of directory `d`: 1 to 200 bytes of letters.
fn content(d: usize, f: usize) -> Vec<u8> {
    let len = (d * 7 + f * 13) % 200 + 1;
    (0..len).map(|i| b'a' + ((d + f + i) % 26) as u8).collect()
}

fn name(prefix: char, i: usize) -> String {
    format!("{prefix}{i:05}")
}

fn make_tree(root: &Path) {
    let marker = root.join(".done");
    if marker.exists() {
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
    std::fs::write(marker, b"").unwrap();
}

fn make_cetrafs(img: &Path) {
    if img.exists() {
        return;
    }
    let params = Params {
        size_bytes: IMAGE,
        bg_size_blocks: 32768,
        zone_groups: 4,
        nodes: 8,
        inodes: INODES,
        ..Params::default()
    };
    let mut b = ImageBuilder::new(params);
    let tops: Vec<_> = (0..DIRS / 100)
        .map(|t| {
            b.mkdir(ImageBuilder::ROOT, name('t', t).as_bytes(), 0o755)
                .unwrap()
        })
        .collect();
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
    // Through a temporary name, so an interrupted run leaves no half image behind.
    let part = img.with_extension("img.part");
    std::fs::write(&part, b.build().unwrap()).unwrap();
    std::fs::rename(&part, img).unwrap();
}

fn make_ext4(tree: &Path, img: &Path) {
    if img.exists() {
        return;
    }
    let part = img.with_extension("img.part");
    let _ = std::fs::remove_file(&part);
    let ok = Command::new("mkfs.ext4")
        .args(["-q", "-F", "-b", "4096", "-N", &INODES.to_string(), "-d"])
        .arg(tree)
        .arg(&part)
        .arg("2G")
        .status()
        .expect("mkfs.ext4 (e2fsprogs) is needed for this bench")
        .success();
    assert!(ok, "mkfs.ext4 failed");
    std::fs::rename(&part, img).unwrap();
}

/// Makes (or finds) the tree and both images.
pub fn inputs() -> Inputs {
    let dir = std::env::var_os("TET_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/fsck-bench"));
    std::fs::create_dir_all(&dir).unwrap();
    let tree = dir.join("tree");
    let cetrafs = dir.join("cetrafs.img");
    let ext4 = dir.join("ext4.img");
    make_tree(&tree);
    make_cetrafs(&cetrafs);
    make_ext4(&tree, &ext4);
    Inputs { dir, cetrafs, ext4 }
}

/// The release `tet-host` binary the benches run (built by `cargo build --release -p tet-host`).
pub fn tet_host() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/release/tet-host")
}
