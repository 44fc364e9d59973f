//! Bodies of the fuzz targets, shared with the regression tests that replay them.

use tet_core::tet::{Severity, TetFile};

/// Runs every check `tet-host verify --deep` runs, then opens the file and looks up
/// chunks of every dataset (a bounded number of each). Panics only on a broken invariant:
/// a file that opens and verifies without errors must serve every chunk of every dataset,
/// and every chunk must decode to exactly its `raw_byte_len` bytes.
// Panicking on a broken invariant is how a fuzz target reports it.
#[allow(clippy::panic)]
pub fn open_walk(data: &[u8]) {
    let opts = crate::tet_cmd::DecodeOptions {
        deep: true,
        threads: Some(1),
        budget: Some(64 << 20),
        progress: false,
    };
    let verified_clean = match crate::tet_cmd::check_with(data, &opts) {
        Ok(c) => {
            c.operational.is_none() && !c.found.kept.iter().any(|f| f.severity() == Severity::Error)
        }
        Err(_) => false,
    };
    let mut decoder = tet_alloc::tet::decode::ChunkDecoder::new(crate::codec::CZstd::new(), 64 << 20);
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
                match decoder.decode(&chunk) {
                    Ok(b) => assert_eq!(u64::try_from(b.len()).ok(), Some(chunk.raw_byte_len)),
                    Err(e) => panic!("clean file cannot decode chunk {coords}: {e}"),
                }
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

/// Decodes one chunk from arbitrary bytes with both backends. The first 3 bytes give
/// `raw_byte_len` (up to 16 MiB); the rest is the stored span. Panics when the backends
/// disagree, when a decode succeeds with a length other than `raw_byte_len`, or when a
/// chunk over the 4 MiB budget is not refused before decoding.
#[allow(clippy::panic)]
pub fn decode_chunk(data: &[u8]) {
    use tet_alloc::tet::decode::{ChunkDecoder, DecodeErrorKind, Ruzstd};
    use tet_core::tet::{Chunk, Codec, Coords, DatasetId};
    let Some((head, span)) = data.split_first_chunk::<3>() else {
        return;
    };
    let raw = u64::from(u32::from_le_bytes([head[0], head[1], head[2], 0]));
    let chunk = Chunk {
        dataset: DatasetId(0),
        row: 0,
        coords: Coords::default(),
        codec: Codec::Zstd,
        raw_byte_len: raw,
        payload_offset: 1000,
        payload: span,
    };
    const BUDGET: u64 = 4 << 20;
    let mut r = ChunkDecoder::new(Ruzstd::new(), BUDGET);
    let mut c = ChunkDecoder::new(crate::codec::CZstd::new(), BUDGET);
    let a = r.decode(&chunk).map(|b| b.to_vec());
    let b = c.decode(&chunk).map(|b| b.to_vec());
    match (&a, &b) {
        (Ok(x), Ok(y)) => {
            assert_eq!(x, y, "backends decoded different bytes");
            assert_eq!(u64::try_from(x.len()).ok(), Some(raw));
        }
        (Err(x), Err(y)) => {
            if !x.is_operational() && !y.is_operational() {
                assert_eq!(x.code(), y.code(), "backends disagree: {x} / {y}");
            }
            for e in [x, y] {
                if let DecodeErrorKind::OverBudget { needed, budget } = e.kind {
                    assert!(needed > budget);
                }
            }
        }
        // The C decoder enforces a few bit-stream rules ruzstd does not (found by this
        // target: `fuzz/regressions/tet_decode_chunk`); ruzstd's output is still held to
        // the exact length and the content checksum. The reverse would be a bug.
        (Ok(_), Err(e)) if e.code() == Some(tet_core::tet::Code::ZstdFrame) => {}
        (Ok(_), Err(e)) | (Err(e), Ok(_)) => {
            // Otherwise only the budget may differ: the backends need different memory.
            if !e.is_operational() {
                panic!("one backend accepts, the other says {e}");
            }
        }
    }
}

/// Repairs an arbitrary file in memory with every fix (`-y --zero-bad-chunks`). Panics
/// when planning or applying fails on a file that opened, or when a plan that claims to
/// answer every finding leaves a file that does not verify clean.
#[allow(clippy::panic)]
pub fn repair_all(data: &[u8]) {
    use tet_alloc::tet::repair::{apply, plan, Inputs};
    let opts = crate::tet_cmd::DecodeOptions {
        deep: true,
        threads: Some(1),
        budget: Some(64 << 20),
        progress: false,
    };
    let Ok(checked) = crate::tet_cmd::check_with(data, &opts) else {
        return;
    };
    if checked.operational.is_some() || checked.found.kept.is_empty() || checked.found.dropped > 0 {
        return;
    }
    let inputs = Inputs {
        bytes: data,
        findings: &checked.found.kept,
        bad_rows: &checked.bad_rows,
        data_end: checked.data_end,
        metadata_spill: checked.spill,
        zero_bad_chunks: true,
    };
    let p = plan(&inputs);
    let all = vec![true; p.fixes.len()];
    let mut out: Vec<u8> = Vec::new();
    if let Err(e) = apply(&inputs, &p, &all, "2026-01-01T00:00:00Z", &mut out) {
        if tet_core::tet::TetFile::parse(data, &mut |_: &tet_core::tet::Finding| {}).is_some() {
            panic!("apply failed: {e}");
        }
        return;
    }
    if p.unfixable.is_empty() {
        let after = match crate::tet_cmd::check_with(&out, &opts) {
            Ok(c) => c,
            Err(e) => panic!("repaired file does not check: {e}"),
        };
        assert!(
            after.found.kept.is_empty(),
            "repair answered every finding but left {:?}",
            after.found.kept.iter().map(|f| f.code).collect::<Vec<_>>()
        );
    }
}

/// Plans and folds arbitrary selections over the datasets of an arbitrary file. The first
/// 12 bytes choose the operation, the reduced axes and up to 3 slices; the rest is the
/// file. Panics when the parallel engine and the single-threaded one disagree, or when a
/// result's shape is not the selection's shape without the reduced axes.
#[allow(clippy::panic)]
pub fn query_fold(data: &[u8]) {
    use tet_alloc::tet::decode::{ChunkDecoder, Ruzstd};
    use tet_alloc::tet::query::{execute, plan, Axes, Operation};
    use tet_core::tet::fold::Reduce;
    use tet_core::tet::select::Slice;
    let Some((head, file_bytes)) = data.split_first_chunk::<12>() else {
        return;
    };
    let Ok(file) = TetFile::open(file_bytes) else {
        return;
    };
    let ops = [
        Operation::Reduce(Reduce::Sum),
        Operation::Reduce(Reduce::NanMean),
        Operation::Reduce(Reduce::Prod),
        Operation::Reduce(Reduce::Min),
        Operation::Reduce(Reduce::ArgMax),
        Operation::Reduce(Reduce::Count),
        Operation::Reduce(Reduce::NanCount),
        Operation::Reduce(Reduce::AllFinite),
        Operation::Reduce(Reduce::Var(1)),
        Operation::Reduce(Reduce::NanStd(0)),
        Operation::Quantile(0.3),
    ];
    let op = ops
        .get(usize::from(head[0]) % ops.len())
        .copied()
        .unwrap_or(Operation::Reduce(Reduce::Sum));
    let bound = |b: u8| -> Option<i64> { (b & 0x80 == 0).then(|| i64::from(b & 0x3f) - 16) };
    let slices: Vec<Slice> = head[3..12]
        .chunks(3)
        .take(usize::from(head[2]) % 4)
        .map(|c| Slice {
            start: bound(c[0]),
            stop: bound(c[1]),
            step: (c[2] & 0x80 == 0).then(|| i64::from(c[2] & 0x7) - 1),
        })
        .collect();
    const BUDGET: u64 = 16 << 20;
    for ds in file.datasets().take(4) {
        let Ok(ds) = ds else { break };
        let axes_list: Vec<usize> = (0..ds.ndim()).filter(|d| head[1] >> d & 1 == 1).collect();
        let axes = if head[1] & 0x80 != 0 {
            None
        } else {
            Some(&axes_list[..])
        };
        let Ok(ax) = Axes::new(ds.ndim(), axes) else {
            continue;
        };
        let Ok(p) = plan(&file, ds, &slices) else {
            continue;
        };
        if p.selection.len() > 1 << 22 {
            continue;
        }
        let par = crate::query_cmd::run(&file, &p, op, &ax, 2, BUDGET);
        let mut dec = ChunkDecoder::new(Ruzstd::new(), BUDGET);
        let seq = execute(&file, &p, op, &ax, &mut dec);
        match (&par, &seq) {
            (Ok(a), Ok(b)) => {
                let bits = |o: &tet_alloc::tet::query::Output| -> Vec<u64> {
                    o.values
                        .iter()
                        .map(|v| match v {
                            tet_core::tet::fold::Value::F64(f) => f.to_bits(),
                            tet_core::tet::fold::Value::U64(u)
                            | tet_core::tet::fold::Value::Position(u) => *u,
                            tet_core::tet::fold::Value::I64(i) => {
                                u64::from_le_bytes(i.to_le_bytes())
                            }
                            tet_core::tet::fold::Value::Bool(b) => u64::from(*b),
                        })
                        .collect()
                };
                assert_eq!(bits(a), bits(b), "parallel and sequential folds differ");
                assert_eq!(a.shape, ax.out_shape(p.selection.shape().as_slice()));
            }
            (Err(_), Err(_)) => {}
            // The C and ruzstd decoders may disagree on crafted frames (see decode_chunk).
            (Err(tet_alloc::tet::query::QueryError::Decode(_)), Ok(_))
            | (Ok(_), Err(tet_alloc::tet::query::QueryError::Decode(_))) => {}
            _ => panic!("parallel {:?} vs sequential {:?}", par.err(), seq.err()),
        }
    }
}

use std::ops::ControlFlow;
use std::sync::OnceLock;

use tet_alloc::cetrafs::testing::{register_node, reseal, write_journal_txn};
use tet_alloc::cetrafs::mkfs::{ImageBuilder, Params, Placement, Sparse};
use tet_core::block::MemDevice;
use tet_core::cetrafs::{Buffers, Committed, Fs, Inode, OverlayDevice};
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
    let (found, _) = tet_alloc::cetrafs::fsck::findings(MemDevice::new(&img), &Default::default());
    let clean = found.iter().all(|f| f.severity() != Severity::Error);
    // Verify checks the image as it is after replay; walk that view.
    let mut bufs = Buffers::new();
    let mut table = Vec::new();
    if let Ok(raw) = Fs::open(MemDevice::new(&img), &mut bufs.data) {
        table = vec![Committed::default(); raw.committed_slots(&mut [], &mut bufs)];
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
    };
    let Ok(out) = repair(MemDeviceMut::new(&mut img), Mode::Yes, &opts, &mut |_| true) else {
        return;
    };
    if out.left.is_empty() {
        let (found, _) = tet_alloc::cetrafs::fsck::findings(MemDevice::new(&img), &Default::default());
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
