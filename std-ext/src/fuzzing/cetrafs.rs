//! Bodies of the cetrafs fuzz targets.

use std::ops::ControlFlow;
use std::sync::OnceLock;

use tet_alloc::cetrafs::mkfs::{ImageBuilder, Params, Placement, Sparse};
use tet_alloc::cetrafs::testing::{register_node, reseal, write_journal_txn};
use tet_core::block::MemDevice;
use tet_core::cetrafs::{Buffers, Committed, Fs, Inode, OverlayDevice};
use tet_core::finding::Severity;
use tet_core::Fault;

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
            register_node(&mut img, 1, 11, 1, b"fuzz")?;
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

/// The bytes of the base image that hold a superblock: block 0, then each copy's sector.
fn superblock_bytes() -> Vec<usize> {
    let base = cetrafs_base();
    let mut at: Vec<usize> = (0..4096).collect();
    let mut blk = [0u8; 4096];
    if let Some(b0) = base.get(..4096) {
        blk.copy_from_slice(b0);
    }
    if let Ok(sb) = tet_core::cetrafs::Superblock::parse(&blk, tet_core::cetrafs::ANY_DEVICE) {
        for &lba in sb.copy_blocks().as_slice() {
            let c = tet_core::cetrafs::copies::copy_offset(lba) as usize;
            at.extend(c..c + 512);
        }
    }
    at
}

/// Applies `data` to the base image as `(u32 offset, u8 value)` records (offsets wrap
/// around the image), recomputes every checksum, then runs the verifier and walks every
/// directory and file. With the first byte odd, `data[1..]` is the image instead. With
/// its bit 1 set, the records land in the superblocks (block 0 and the copies' sectors),
/// and checksums are recomputed only when its bit 2 is set too: a damaged primary is
/// read through a copy, and the same rules hold.
pub fn cetrafs_open_walk(data: &[u8]) {
    let first = data.first().copied().unwrap_or(0);
    let targeted = first & 3 == 2;
    let mut img = match data.split_first() {
        Some((m, rest)) if m & 1 == 1 => rest.to_vec(),
        _ => {
            let mut img = cetrafs_base().to_vec();
            let places = if targeted {
                superblock_bytes()
            } else {
                Vec::new()
            };
            for rec in data.get(1..).unwrap_or(&[]).chunks_exact(5) {
                let off = u32::from_le_bytes([rec[0], rec[1], rec[2], rec[3]]) as usize;
                let at = match std::num::NonZeroUsize::new(places.len()) {
                    Some(n) => places[off % n.get()],
                    None => off % img.len().max(1),
                };
                if let Some(b) = img.get_mut(at) {
                    *b = rec[4];
                }
            }
            img
        }
    };
    if !targeted || first & 4 == 4 {
        reseal(&mut img);
    }
    // The superblock search never panics; whatever it takes mounts or is refused.
    let mut one = [0u8; 4096];
    if let Ok(l) = tet_core::cetrafs::copies::locate(
        &MemDevice::new(&img),
        &mut one,
        tet_core::cetrafs::ANY_DEVICE,
        None,
    ) {
        let through = tet_core::cetrafs::copies::Substituted::new(MemDevice::new(&img), &l.sb);
        let _ = Fs::open_shortened(&through, &mut one);
    }
    let (found, _) = tet_alloc::cetrafs::fsck::findings(MemDevice::new(&img), &Default::default());
    let clean = found.iter().all(|f| f.severity() != Severity::Error);
    // Verify checks the image as it is after replay; walk that view.
    let mut bufs = Buffers::new();
    let mut table = Vec::new();
    if let Ok(raw) = Fs::open(MemDevice::new(&img), &mut bufs.data) {
        table = tet_alloc::cetrafs::journal::committed_slots(&raw, &mut bufs).unwrap_or_default();
    }
    let overlay = Fs::open(MemDevice::new(&img), &mut bufs.data)
        .ok()
        .and_then(|raw| raw.overlay(&mut table, &mut bufs).ok());
    let Some(overlay) = overlay else {
        assert!(!clean, "verify was clean but the image does not mount");
        return;
    };
    let Ok(fs) = Fs::open(
        OverlayDevice::new(MemDevice::new(&img), &overlay),
        &mut bufs.data,
    ) else {
        assert!(!clean, "verify was clean but the image does not mount");
        return;
    };
    let Ok(root) = fs.inode(fs.superblock().root_inode(), &mut bufs.data) else {
        assert!(!clean, "verify was clean but the root inode does not read");
        return;
    };
    let mut problems = 0u64;
    walk(&fs, &root, &mut bufs, 0, &mut problems);
    if clean {
        assert_eq!(
            problems, 0,
            "verify was clean, yet a directory did not list or a file did not read whole: {found:?}"
        );
    }
    // A bootloader's read path, with one-byte faults, meets the same fate as with full
    // errors: the same names and bytes, or a fault of the same category.
    let agreed = boot_paths_agree(&img);
    assert!(
        agreed.is_ok(),
        "the read path differs with one-byte faults: {agreed:?}"
    );
}

/// What [`boot_walk`] sees of one entry: its path, size, CRC-32C (of a file's bytes;
/// of nothing for a directory or a file over 16 MiB) and extended attributes.
pub type BootEntry = (Vec<u8>, u64, u32, Vec<(Vec<u8>, Vec<u8>)>);

/// Reads `img` as a bootloader does, through one block and reporting `E`: the read-only
/// mount, the journal overlay, then every entry of the tree below the root (depth-first,
/// at most 16 levels and 4096 entries, so a damaged tree stays finite), each file
/// streamed.
pub fn boot_walk<E: From<tet_core::Error>>(img: &[u8]) -> Result<Vec<BootEntry>, E> {
    let dev = MemDevice::new(img);
    let mut one = [0u8; 4096];
    let raw = Fs::<_, E>::open_for_read_as(&dev, &mut one)?;
    let mut table = vec![Committed::default(); raw.committed_slots(&mut [], &mut one)];
    let overlay = raw.overlay(&mut table, &mut one)?;
    let through = OverlayDevice::new(&dev, &overlay);
    let fs = Fs::<_, E>::open_for_read_as(&through, &mut one)?;
    let root = fs.resolve(b"/", &mut one)?;
    let mut seen = Vec::new();
    // (directory inode, its path, depth)
    let mut dirs = vec![(root, Vec::new(), 0u32)];
    while let Some((dir, path, depth)) = dirs.pop() {
        let mut entries = Vec::new();
        fs.read_dir(&dir, &mut one, |e| {
            entries.push((e.name().to_vec(), e.inode));
            ControlFlow::Continue(())
        })?;
        for (name, ino) in entries {
            if seen.len() >= 4096 {
                return Ok(seen);
            }
            let inode = fs.inode(ino, &mut one)?;
            let child = [&path[..], b"/", &name[..]].concat();
            let mut xattrs = Vec::new();
            fs.xattrs(&inode, &mut one, |x| {
                xattrs.push((x.key().to_vec(), x.value().to_vec()));
                ControlFlow::Continue(())
            })?;
            let mut crc = tet_core::checksum::Crc32c::new();
            if inode.is_dir() {
                if depth < 16 {
                    dirs.push((inode, child.clone(), depth + 1));
                }
            } else if inode.size() <= 1 << 24 {
                let _whole = fs.stream(&inode, &mut one, |b| {
                    crc.update(b);
                    ControlFlow::Continue(())
                })?;
            }
            seen.push((child, inode.size(), crc.finish(), xattrs));
        }
    }
    Ok(seen)
}

/// Whether [`boot_walk`] meets the same fate with `Error` and with `Fault`: the same
/// entries, or a fault of the failing error's category. `Ok` says whether it read the
/// image; `Err` how the two differ.
pub fn boot_paths_agree(img: &[u8]) -> Result<bool, String> {
    let full = boot_walk::<tet_core::Error>(img);
    let lean = boot_walk::<Fault>(img);
    match (&full, &lean) {
        (Ok(a), Ok(b)) if a == b => Ok(true),
        (Err(e), Err(f)) if *f == Fault(e.kind.category()) => Ok(false),
        _ => Err(format!(
            "Fs<_, Error> gives {full:?}, Fs<_, Fault> {lean:?}"
        )),
    }
}

/// Walks the tree below `dir`, counting directories that fail to list and files that
/// fail to read their whole size. A clean image has no loops; the depth cap keeps a
/// damaged one finite.
fn walk<D: tet_core::block::BlockDevice>(
    fs: &Fs<D>,
    dir: &Inode,
    bufs: &mut Buffers,
    depth: u32,
    problems: &mut u64,
) {
    if depth > 64 {
        *problems += 1;
        return;
    }
    let mut children = Vec::new();
    if fs
        .read_dir(dir, bufs, |e| {
            children.push(e.inode);
            ControlFlow::Continue(())
        })
        .is_err()
    {
        *problems += 1;
    }
    for ino in children {
        let Ok(i) = fs.inode(ino, &mut bufs.data) else {
            *problems += 1;
            continue;
        };
        if i.is_dir() {
            walk(fs, &i, bufs, depth + 1, problems);
        } else {
            let size = usize::try_from(i.size()).unwrap_or(usize::MAX);
            if size > 1 << 24 {
                continue;
            }
            let mut out = vec![0u8; size];
            if fs.read(&i, 0, &mut out, bufs).ok() != Some(size) {
                *problems += 1;
            }
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

/// Repairs (`-y`, forced) a copy of the base image mutated as in [`cetrafs_open_walk`]
/// and checks the invariant: either repair reports findings it left (exit 4), or the
/// image now verifies with no error. Never panics, never loops.
pub fn cetrafs_repair(data: &[u8]) {
    use tet_alloc::cetrafs::repair::{repair, Mode, RepairOptions};
    use tet_core::block::MemDeviceMut;
    let mut img = cetrafs_base().to_vec();
    for rec in data.chunks_exact(5) {
        let off = u32::from_le_bytes([rec[0], rec[1], rec[2], rec[3]]) as usize;
        if let Some(len) = std::num::NonZeroUsize::new(img.len()) {
            img[off % len.get()] = rec[4];
        }
    }
    reseal(&mut img);
    let opts = RepairOptions {
        node_id: u64::MAX,
        force: true,
        memory_limit: 1 << 28,
        superblock: None,
    };
    // -p: the block rule holds after it, and every file that read before reads the same.
    let before = readable_files(&img);
    let mut preened = img.clone();
    if repair(
        MemDeviceMut::new(&mut preened),
        Mode::Preen,
        &opts,
        &mut |_| true,
    )
    .is_ok()
    {
        if let Some((ino, lba)) = unmarked_mapped_block(&preened) {
            panic!("after -p, block {lba} of readable inode {ino} is marked free");
        }
        // Matched as (path, content) pairs, each used once: a damaged directory can hold
        // one name twice, each naming its own file.
        let mut after = readable_files(&preened);
        for (path, content) in &before {
            let at = after.iter().position(|(p, c)| p == path && c == content);
            assert!(
                at.is_some(),
                "after -p, {} no longer reads as before",
                String::from_utf8_lossy(path)
            );
            if let Some(i) = at {
                after.swap_remove(i);
            }
        }
    }
    let Ok(out) = repair(MemDeviceMut::new(&mut img), Mode::Yes, &opts, &mut |_| true) else {
        return;
    };
    if let Some((ino, lba)) = unmarked_mapped_block(&img) {
        panic!("after -y, block {lba} of readable inode {ino} is marked free");
    }
    if out.left.is_empty() {
        let (found, _) =
            tet_alloc::cetrafs::fsck::findings(MemDevice::new(&img), &Default::default());
        let errors: Vec<_> = found
            .iter()
            .filter(|f| f.severity() == Severity::Error)
            .collect();
        assert!(
            errors.is_empty(),
            "repair left nothing, yet verify finds {errors:?}"
        );
    }
}

/// Every regular file and symlink reachable from the root that reads whole, with its
/// content (paths as the walk finds them; each directory once).
fn readable_files(img: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut out = Vec::new();
    let mut bufs = Buffers::new();
    let Ok(fs) = Fs::open(MemDevice::new(img), &mut bufs.data) else {
        return out;
    };
    let root = fs.superblock().root_inode();
    let mut queue: Vec<(u64, Vec<u8>)> = vec![(root, Vec::new())];
    let mut seen = vec![root];
    while let Some((dir, path)) = queue.pop() {
        let Ok(inode) = fs.inode(dir, &mut bufs.data) else {
            continue;
        };
        let mut entries: Vec<(u64, Vec<u8>)> = Vec::new();
        let _ = fs.read_dir(&inode, &mut bufs, |e| {
            let mut p = path.clone();
            p.push(b'/');
            p.extend_from_slice(e.name());
            entries.push((e.inode, p));
            ControlFlow::Continue(())
        });
        for (ino, p) in entries {
            let Ok(i) = fs.inode(ino, &mut bufs.data) else {
                continue;
            };
            if i.is_dir() {
                if !seen.contains(&ino) {
                    seen.push(ino);
                    queue.push((ino, p));
                }
                continue;
            }
            let Ok(len) = usize::try_from(i.size()) else {
                continue;
            };
            if len > img.len() {
                continue;
            }
            let mut content = vec![0u8; len];
            if fs.read(&i, 0, &mut content, &mut bufs).is_ok() {
                out.push((p, content));
            }
        }
    }
    out
}

/// The block rule (docs/cetrafs.md section 14): the first block that an inode in use
/// whose check reports nothing maps (data, tree, xattr) and that its data bitmap marks
/// free, as `(inode, block)`.
fn unmarked_mapped_block(img: &[u8]) -> Option<(u64, u64)> {
    use tet_core::cetrafs::check::{check_inode, InodeVisitor};
    use tet_core::cetrafs::{bitmap_blocks, DirEntry, Extent, Finding, BITS_PER_BITMAP_BLOCK};
    #[derive(Default)]
    struct Blocks(Vec<u64>);
    impl InodeVisitor for Blocks {
        fn tree_block(&mut self, _: u64, lba: u64) {
            self.0.push(lba);
        }
        fn extent(&mut self, _: u64, e: &Extent, _: u64, _: usize) {
            self.0
                .extend(e.physical..e.physical.saturating_add(u64::from(e.len)));
        }
        fn dir_entry(&mut self, _: u64, _: &DirEntry, _: u64, _: usize) {}
        fn xattr_block(&mut self, _: u64, lba: u64) {
            self.0.push(lba);
        }
    }
    let mut bufs = Buffers::new();
    let fs = Fs::open(MemDevice::new(img), &mut bufs.data).ok()?;
    let sb = *fs.superblock();
    let marked = |lba: u64| -> bool {
        let size = sb.bg_size_blocks();
        let Some(rel) = lba.checked_sub(sb.bg_regions_start()) else {
            return true;
        };
        let Ok(bg) = u32::try_from(rel / size) else {
            return true;
        };
        let (start, len) = sb.bg_span(bg);
        let Some(i) = lba.checked_sub(start.saturating_add(1).saturating_add(bitmap_blocks(len)))
        else {
            return true;
        };
        let at = start
            .saturating_add(1)
            .saturating_add(i / BITS_PER_BITMAP_BLOCK);
        let bit = i % BITS_PER_BITMAP_BLOCK;
        usize::try_from(at.saturating_mul(4096).saturating_add(bit / 8))
            .ok()
            .and_then(|k| img.get(k))
            .is_none_or(|b| b & (1 << (bit % 8)) != 0)
    };
    for ino in 1..sb.inode_count() {
        let mut found = 0u32;
        let mut v = Blocks::default();
        let parsed = check_inode(
            &fs,
            ino,
            &mut bufs,
            &mut |f: &Finding| {
                if f.severity() == Severity::Error {
                    found += 1;
                }
            },
            &mut v,
        );
        // Only an inode whose bitmap bit is set or that is valid counts as in use:
        // check_inode parses any block, and a free all-zero inode does not parse.
        if parsed.is_none() || found > 0 {
            continue;
        }
        if let Some(lba) = v.0.iter().copied().find(|l| !marked(*l)) {
            return Some((ino, lba));
        }
    }
    None
}

/// A small image for the write target: two zone groups of small block groups (so
/// allocation claims both and runs out), a journal of 4 slots (so large operations are
/// split, or refused with ENOSPC), a few files. Built once.
fn write_base() -> &'static [u8] {
    static IMG: OnceLock<Vec<u8>> = OnceLock::new();
    IMG.get_or_init(|| {
        let p = Params {
            size_bytes: 400 * 4096,
            bg_size_blocks: 64,
            zone_groups: 2,
            nodes: 2,
            inodes: 64,
            journal_blocks: 9,
            ..Params::default()
        };
        let mut b = ImageBuilder::new(p);
        let build = |b: &mut ImageBuilder| -> Result<Vec<u8>, tet_core::Error> {
            let d = b.mkdir(ImageBuilder::ROOT, b"d", 0o755)?;
            b.add_file(d, b"f", vec![3; 5000], Sparse::Dense, Placement::Fragmented)?;
            b.add_file(
                ImageBuilder::ROOT,
                b"g",
                vec![4; 9000],
                Sparse::Dense,
                Placement::Contiguous,
            )?;
            b.build()
        };
        build(&mut b).unwrap_or_default()
    })
}

/// Fuzz body of `cetrafs_write`: `data` read as operations (4 bytes each: the operation,
/// then its arguments) applied through the write path to a small image. Invariants: no
/// panic; every failure is an operation's Unix error, never a device or structure
/// error (the image is sound); after leaving, the full check finds no error.
pub fn cetrafs_write(data: &[u8]) {
    use tet_alloc::cetrafs::write::{JoinOptions, SetAttr, WriteError, Writer};
    let mut img = write_base().to_vec();
    assert!(
        !img.is_empty(),
        "the write target's base image did not build"
    );
    {
        let dev = tet_core::block::MemDeviceMut::new(&mut img);
        let opts = JoinOptions {
            node_id: 9,
            hostname: b"fuzz".to_vec(),
            now_secs: 1,
        };
        let mut w = Writer::join(&dev, &opts).unwrap();
        let names: [&[u8]; 5] = [b"a", b"b", b"c", b"d", b"f"];
        let mut dirs: Vec<u64> = vec![1];
        let mut files: Vec<u64> = Vec::new();
        for op in data.chunks_exact(4).take(64) {
            let [k, a, b, c] = [op[0], op[1], op[2], op[3]];
            let dir = dirs[usize::from(a) % dirs.len()];
            let name = names[usize::from(b) % names.len()];
            let file = (!files.is_empty()).then(|| files[usize::from(c) % files.len()]);
            let r: Result<(), WriteError> = match k % 12 {
                0 => w.create(dir, name, 0o644, 0, 0).map(|i| files.push(i)),
                1 => w.mkdir(dir, name, 0o755, 0, 0).map(|i| dirs.push(i)),
                2 | 3 => match file {
                    Some(f) => w.write(f, u64::from(b) * 1531, &vec![c | 1; usize::from(a) * 97]),
                    None => Ok(()),
                },
                4 => file.map_or(Ok(()), |f| w.truncate(f, u64::from(a) * 613)),
                5 => w.unlink(dir, name),
                6 => w.rmdir(dir, name),
                7 => {
                    let to = dirs[usize::from(c) % dirs.len()];
                    w.rename(dir, name, to, names[usize::from(a) % names.len()])
                }
                8 => file.map_or(Ok(()), |f| w.link(f, dir, name)),
                9 => w
                    .symlink(dir, name, &vec![b'x'; usize::from(c) * 9 + 1], 0, 0)
                    .map(|_| ()),
                10 => file.map_or(Ok(()), |f| {
                    w.set_xattr(f, b"user.k", &vec![a; usize::from(b)])
                }),
                _ => file.map_or(Ok(()), |f| {
                    w.set_attr(
                        f,
                        &SetAttr {
                            mode: Some(u32::from(a)),
                            ..SetAttr::default()
                        },
                    )
                }),
            };
            if let Err(e) = r {
                assert!(matches!(e, WriteError::Errno(_)), "op {op:?}: {e:?}");
            }
            // Forget inodes that are gone.
            files.retain(|f| w.stat(*f).is_ok());
            dirs.retain(|d| {
                w.stat(*d)
                    .is_ok_and(|i| i.mode.get() & 0o170_000 == 0o040_000)
            });
        }
        w.leave().unwrap();
    }
    let (found, _) = tet_alloc::cetrafs::fsck::findings(MemDevice::new(&img), &Default::default());
    let errors: Vec<_> = found
        .iter()
        .filter(|f| f.severity() == Severity::Error)
        .collect();
    assert!(errors.is_empty(), "{errors:?}");
}
