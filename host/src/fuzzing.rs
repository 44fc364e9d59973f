//! Bodies of the fuzz targets, shared with the regression tests that replay them.

use tet_core::tet::{Severity, TetFile};

/// Runs every check `tet-host verify` runs, then opens the file and looks up chunks of
/// every dataset (a bounded number of each). Panics only on a broken invariant: a file
/// that opens and verifies without errors must serve every chunk of every dataset.
// Panicking on a broken invariant is how a fuzz target reports it.
#[allow(clippy::panic)]
pub fn open_walk(data: &[u8]) {
    let verified_clean = match crate::tet_cmd::check(data) {
        Ok((found, _)) => !found.kept.iter().any(|f| f.severity() == Severity::Error),
        Err(_) => false,
    };
    let Ok(file) = TetFile::open(data) else {
        assert!(!verified_clean, "verify found no error but open failed");
        return;
    };
    for ds in file.datasets().take(32) {
        let Ok(ds) = ds else { break };
        for cell in 0..ds.grid_cells().min(256) {
            let coords = ds.delinearize(cell);
            let got = file.chunk(&ds, coords.as_slice());
            if verified_clean {
                let chunk = match got {
                    Ok(c) => c,
                    Err(e) => panic!("clean file cannot serve chunk {coords}: {e}"),
                };
                assert_eq!(chunk.coords, coords);
                assert_eq!(
                    u64::try_from(chunk.payload.len()).ok(),
                    Some(
                        file.rows()[usize::try_from(chunk.row).unwrap_or(0)]
                            .stored_byte_len
                            .get()
                    )
                );
            }
        }
    }
}

use std::ops::ControlFlow;
use std::sync::OnceLock;

use tet_alloc::cetrafs::{reseal, write_journal_txn, ImageBuilder, Params, Placement, Sparse};
use tet_core::block::MemDevice;
use tet_core::cetrafs::{Buffers, Fs, Inode};

/// A small image with every kind of structure: directories over several blocks, a
/// fragmented file with a depth-1 tree, a sparse file, xattrs, a symlink and a committed
/// journal transaction. Built once.
pub fn cetrafs_base() -> &'static [u8] {
    static IMG: OnceLock<Vec<u8>> = OnceLock::new();
    IMG.get_or_init(|| {
        let p = Params {
            size_bytes: 320 * 4096,
            bg_size_blocks: 96,
            zone_groups: 2,
            nodes: 2,
            inodes: 48,
            journal_blocks: 5,
            pending_slots: 4,
            ..Params::default()
        };
        let mut b = ImageBuilder::new(p);
        let build = |b: &mut ImageBuilder| -> Result<Vec<u8>, tet_core::Error> {
            let d = b.mkdir(ImageBuilder::ROOT, b"dir", 0o755)?;
            for i in 0..20u8 {
                b.add_file(
                    d,
                    &[b'f', b'a' + i],
                    vec![i; usize::from(i) * 100],
                    Sparse::Dense,
                    Placement::Contiguous,
                )?;
            }
            let f = b.add_file(
                ImageBuilder::ROOT,
                b"frag",
                vec![3u8; 6 * 4096],
                Sparse::Dense,
                Placement::Fragmented,
            )?;
            b.set_xattr(f, b"user.a", b"1")?;
            let mut sparse = vec![0u8; 8 * 4096];
            sparse[5 * 4096] = 1;
            b.add_file(
                ImageBuilder::ROOT,
                b"sparse",
                sparse.clone(),
                Sparse::Holes,
                Placement::Contiguous,
            )?;
            b.add_file(
                ImageBuilder::ROOT,
                b"uninit",
                sparse,
                Sparse::Uninit,
                Placement::Contiguous,
            )?;
            b.add_symlink(ImageBuilder::ROOT, b"link", b"dir/fa")?;
            let mut img = b.build()?;
            let target = img.len() as u64 / 4096 - 1;
            write_journal_txn(
                &mut img,
                1,
                0,
                5,
                &[(target, vec![9; 64], false)],
                true,
                true,
            )?;
            Ok(img)
        };
        build(&mut b).unwrap_or_default()
    })
}

/// Applies `data` to the base image as `(u32 offset, u8 value)` records (offsets wrap
/// around the image), recomputes every checksum, then runs the verifier and walks every
/// directory and file. With the first byte odd, `data[1..]` is the image instead.
pub fn cetrafs_open_walk(data: &[u8]) {
    let mut img = match data.split_first() {
        Some((m, rest)) if m & 1 == 1 => rest.to_vec(),
        _ => {
            let mut img = cetrafs_base().to_vec();
            for rec in data.get(1..).unwrap_or(&[]).chunks_exact(5) {
                let off = u32::from_le_bytes([rec[0], rec[1], rec[2], rec[3]]) as usize;
                if let Some(len) = std::num::NonZeroUsize::new(img.len()) {
                    img[off % len.get()] = rec[4];
                }
            }
            img
        }
    };
    reseal(&mut img);
    let _ = crate::cetrafs_cmd::check_image(&img);
    let mut bufs = Buffers::new();
    let Ok(fs) = Fs::open(MemDevice::new(&img), &mut bufs.data) else {
        return;
    };
    if let Ok(root) = fs.inode(fs.superblock().root_inode(), &mut bufs.data) {
        walk(&fs, &root, &mut bufs, 0);
    }
}

fn walk(fs: &Fs<MemDevice<'_>>, dir: &Inode, bufs: &mut Buffers, depth: u32) {
    if depth > 8 {
        return;
    }
    let mut children = Vec::new();
    let _ = fs.read_dir(dir, bufs, |e| {
        children.push(e.inode);
        ControlFlow::Continue(())
    });
    for ino in children {
        let Ok(i) = fs.inode(ino, &mut bufs.data) else {
            continue;
        };
        if i.is_dir() {
            walk(fs, &i, bufs, depth + 1);
        } else {
            let mut out = vec![0u8; 8192];
            let _ = fs.read(&i, 0, &mut out, bufs);
            let _ = fs.read(&i, i.size().saturating_sub(100), &mut out, bufs);
        }
    }
}

/// Resolves `path` in the base image and reads what it names; must never panic, and a
/// file that resolves must read exactly its size.
pub fn cetrafs_path(path: &[u8]) {
    let img = cetrafs_base();
    let mut bufs = Buffers::new();
    let Ok(fs) = Fs::open(MemDevice::new(img), &mut bufs.data) else {
        return;
    };
    if let Ok(i) = fs.resolve(path, &mut bufs) {
        if !i.is_dir() {
            let mut out = vec![0u8; usize::try_from(i.size()).unwrap_or(0).min(1 << 20)];
            let n = fs.read(&i, 0, &mut out, &mut bufs).unwrap_or(usize::MAX);
            assert_eq!(n, out.len(), "a resolved file must read its whole size");
        }
    }
}
