//! What a mounted image shows, over any device and independent of the kernel interface
//! that asks: file bytes read a contiguous extent run per device call, directories
//! listed a page at a time with offsets that survive changes between pages, the free
//! counts `statfs` reports, and the check that no other node writes the image.
//!
//! Every function holds a bounded amount of memory whatever the image: a page of
//! directory entries, the caller's output buffer, and a block or two of scratch.

use alloc::collections::BTreeMap;
use alloc::vec::Vec;
use core::ops::ControlFlow;

use tet_core::block::{Block, BlockDevice, BLOCK_SIZE, BLOCK_SIZE_U64};
use tet_core::cetrafs::{Buffers, Fs, Inode, Mapping};
use tet_core::{Error, ErrorKind};

/// Directory offset of `.`; `..` is the next. Entries' offsets start above.
pub const DOT_COOKIE: u64 = 1;
/// Directory offset of `..`.
pub const DOTDOT_COOKIE: u64 = 2;
/// The first offset an entry can have.
const FIRST_COOKIE: u64 = 3;

/// The directory offset of the entry named `name`: a 64-bit FNV-1a hash of the name,
/// folded into `3 .. 2^63`. It depends on the name alone, so a listing resumed after
/// it goes on at the same place whatever was added or removed in between (entries are
/// listed in cookie order). Two names with one cookie would list only the first after
/// a page break between them: a chance of about 2^-62 per pair.
pub fn cookie(name: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    (h >> 1).max(FIRST_COOKIE)
}

/// One directory entry of a page.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PageEntry {
    /// Its offset ([`cookie`] of the name): the next page starts after it.
    pub cookie: u64,
    /// The name.
    pub name: Vec<u8>,
    /// The inode it names.
    pub ino: u64,
    /// The file type code (1 regular, 2 directory, 7 symlink).
    pub file_type: u8,
}

/// Up to `max` entries of directory `dir` whose cookies come after `after`, in cookie
/// order (`.` and `..` are the caller's). One pass over the directory, keeping the
/// `max` smallest: memory is one page, whatever the directory's size.
pub fn dir_page<D: BlockDevice>(
    fs: &Fs<D>,
    dir: &Inode,
    after: u64,
    max: usize,
    bufs: &mut Buffers,
) -> Result<Vec<PageEntry>, Error> {
    let mut keep: BTreeMap<(u64, Vec<u8>), (u64, u8)> = BTreeMap::new();
    fs.read_dir(dir, bufs, |e| {
        let c = cookie(e.name());
        if c > after {
            let full = keep.len() >= max;
            let beyond = full && keep.last_key_value().is_some_and(|(k, _)| k.0 < c);
            if !beyond {
                keep.insert((c, e.name().to_vec()), (e.inode, e.file_type.code()));
                if keep.len() > max {
                    let _ = keep.pop_last();
                }
            }
        }
        ControlFlow::Continue(())
    })?;
    Ok(keep
        .into_iter()
        .map(|((cookie, name), (ino, file_type))| PageEntry {
            cookie,
            name,
            ino,
            file_type,
        })
        .collect())
}

fn overflow(inode: &Inode) -> Error {
    Error::new(
        ErrorKind::Overflow,
        "read offset",
        inode.lba().saturating_mul(BLOCK_SIZE_U64),
    )
}

/// Reads file bytes at `offset` into `out`; returns how many (fewer only at the end
/// of the file). Each contiguous run of an extent the range covers is one
/// [`BlockDevice::read_blocks`] call (straight into `out` when aligned), holes and
/// uninitialized extents read as zeros; mapping a run reads at most two tree blocks
/// into `tree`. A damaged tree or a block that does not read is the error, naming the
/// field and offset.
pub fn read_at<D: BlockDevice>(
    fs: &Fs<D>,
    inode: &Inode,
    offset: u64,
    out: &mut [u8],
    tree: &mut Block,
) -> Result<usize, Error> {
    let want = tet_core::arith::u64_of(out.len()).min(inode.size().saturating_sub(offset));
    let want = usize::try_from(want).map_err(|_| overflow(inode))?;
    let mut done = 0usize;
    let mut edge: Vec<u8> = Vec::new();
    while done < want {
        let pos = offset.saturating_add(tet_core::arith::u64_of(done));
        let logical = u32::try_from(pos / BLOCK_SIZE_U64).map_err(|_| overflow(inode))?;
        let in_block = usize::try_from(pos % BLOCK_SIZE_U64).map_err(|_| overflow(inode))?;
        let left = want.saturating_sub(done);
        let n = match fs.map_block(inode, logical, tree)? {
            Mapping::Mapped {
                physical,
                run,
                uninit: false,
            } => {
                let needed = in_block.saturating_add(left).div_ceil(BLOCK_SIZE);
                let k = usize::try_from(run)
                    .map_or(needed, |r| r.min(needed))
                    .max(1);
                let bytes = k.saturating_mul(BLOCK_SIZE);
                let n = bytes.saturating_sub(in_block).min(left);
                let dst = out
                    .get_mut(done..done.saturating_add(n))
                    .ok_or_else(|| overflow(inode))?;
                if in_block == 0 && n == bytes {
                    fs.device().read_blocks(physical, dst)?;
                } else {
                    edge.resize(bytes, 0);
                    fs.device().read_blocks(physical, &mut edge)?;
                    let src = edge
                        .get(in_block..in_block.saturating_add(n))
                        .ok_or_else(|| overflow(inode))?;
                    dst.copy_from_slice(src);
                }
                n
            }
            _ => {
                let n = BLOCK_SIZE.saturating_sub(in_block).min(left);
                out.get_mut(done..done.saturating_add(n))
                    .ok_or_else(|| overflow(inode))?
                    .fill(0);
                n
            }
        };
        done = done.saturating_add(n);
    }
    Ok(done)
}

/// What `statfs` reports, from the block group descriptors (which every commit keeps
/// current) and the inode bitmap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Counts {
    /// Data blocks of all block groups.
    pub data_blocks: u64,
    /// Of those, free.
    pub free_blocks: u64,
    /// Inodes (the table's size).
    pub inodes: u64,
    /// Of those, free.
    pub free_inodes: u64,
}

/// The free counts of the filesystem now.
pub fn counts<D: BlockDevice>(fs: &Fs<D>, buf: &mut Block) -> Result<Counts, Error> {
    let mut data_blocks = 0u64;
    let mut free_blocks = 0u64;
    let mut failed = None;
    fs.for_each_block_group(buf, |_, g| {
        match g {
            Ok(g) => {
                data_blocks = data_blocks.saturating_add(g.raw().data_block_count.get());
                free_blocks = free_blocks.saturating_add(g.raw().free_data_blocks.get());
            }
            Err(e) => failed = Some(e),
        }
        ControlFlow::Continue(())
    })?;
    if let Some(e) = failed {
        return Err(e);
    }
    let sb = fs.superblock();
    let start = sb.raw().inode_bitmap_start.get();
    let bits = sb.inode_count();
    let mut used = 0u64;
    for k in 0..sb.raw().inode_bitmap_blocks.get() {
        fs.device().read_block(start.saturating_add(k), buf)?;
        let here = bits.saturating_sub(k.saturating_mul(32768)).min(32768);
        used = used.saturating_add(tet_core::cetrafs::check::count_ones(buf, here));
    }
    Ok(Counts {
        data_blocks,
        free_blocks,
        inodes: bits,
        free_inodes: bits.saturating_sub(used),
    })
}

/// A registry row `ACTIVE`: a node that writes the image (or crashed writing it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ActiveRow {
    /// The row.
    pub row: u32,
    /// Its node id.
    pub node_id: u64,
    /// Its hostname (UTF-8 up to the first NUL).
    pub hostname: Vec<u8>,
}

/// The first registry row in state `ACTIVE`, if any.
pub fn active_row<D: BlockDevice>(fs: &Fs<D>, buf: &mut Block) -> Result<Option<ActiveRow>, Error> {
    for row in 0..fs.superblock().node_capacity() {
        let Some(r) = fs.node_row(row, buf)? else {
            continue;
        };
        if r.state() == tet_core::cetrafs::NodeState::Active {
            let raw = r.raw();
            let end = raw.hostname.iter().position(|b| *b == 0).unwrap_or(64);
            return Ok(Some(ActiveRow {
                row,
                node_id: raw.node_id.get(),
                hostname: raw.hostname.get(..end).unwrap_or(&[]).to_vec(),
            }));
        }
    }
    Ok(None)
}

/// Every extended attribute key of `inode`, each followed by a NUL (as `listxattr(2)`
/// returns them).
pub fn xattr_names<D: BlockDevice>(
    fs: &Fs<D>,
    inode: &Inode,
    bufs: &mut Buffers,
) -> Result<Vec<u8>, Error> {
    let mut out = Vec::new();
    fs.xattrs(inode, bufs, |x| {
        out.extend_from_slice(x.key());
        out.push(0);
        ControlFlow::Continue(())
    })?;
    Ok(out)
}

/// The value of xattr `key` of `inode` (`None` when it has none by that key).
pub fn xattr_value<D: BlockDevice>(
    fs: &Fs<D>,
    inode: &Inode,
    key: &[u8],
    bufs: &mut Buffers,
) -> Result<Option<Vec<u8>>, Error> {
    let mut out = None;
    fs.xattrs(inode, bufs, |x| {
        if x.key() == key {
            out = Some(x.value().to_vec());
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    })?;
    Ok(out)
}

#[cfg(test)]
#[allow(clippy::restriction, reason = "tests fail by panicking")]
mod tests {
    use super::*;
    use crate::cetrafs::mkfs::{ImageBuilder, Params, Placement, Sparse};
    use crate::cetrafs::write::{JoinOptions, Writer};
    use core::cell::Cell;
    use tet_core::block::{MemDevice, MemDeviceMut};

    /// A device that counts its calls.
    struct Counting<'a> {
        inner: MemDevice<'a>,
        runs: Cell<u64>,
        blocks: Cell<u64>,
    }

    impl BlockDevice for Counting<'_> {
        fn block_count(&self) -> u64 {
            self.inner.block_count()
        }
        fn read_block(&self, lba: u64, buf: &mut Block) -> tet_core::Result<()> {
            self.blocks.set(self.blocks.get() + 1);
            self.inner.read_block(lba, buf)
        }
        fn read_blocks(&self, lba: u64, buf: &mut [u8]) -> tet_core::Result<()> {
            self.runs.set(self.runs.get() + 1);
            self.inner.read_blocks(lba, buf)
        }
    }

    fn params() -> Params {
        Params {
            size_bytes: 64 << 20,
            bg_size_blocks: 2048,
            inodes: 1024,
            nodes: 2,
            journal_blocks: 33,
            ..Params::default()
        }
    }

    fn pattern(n: usize, seed: u32) -> Vec<u8> {
        (0..n)
            .map(|i| ((i as u32).wrapping_mul(2_654_435_761) ^ seed) as u8 | 1)
            .collect()
    }

    #[test]
    fn read_at_reads_a_run_per_call_and_agrees_with_fs_read() {
        let mut b = ImageBuilder::new(params());
        let n = 64 * BLOCK_SIZE + 123;
        let contig = pattern(n, 1);
        let mut sparse = pattern(n, 2);
        sparse[5 * BLOCK_SIZE..9 * BLOCK_SIZE].fill(0);
        b.add_file(
            ImageBuilder::ROOT,
            b"c",
            contig.clone(),
            Sparse::Dense,
            Placement::Contiguous,
        )
        .unwrap();
        b.add_file(
            ImageBuilder::ROOT,
            b"h",
            sparse.clone(),
            Sparse::Holes,
            Placement::Contiguous,
        )
        .unwrap();
        b.add_file(
            ImageBuilder::ROOT,
            b"u",
            sparse.clone(),
            Sparse::Uninit,
            Placement::Contiguous,
        )
        .unwrap();
        b.add_file(
            ImageBuilder::ROOT,
            b"f",
            contig.clone(),
            Sparse::Dense,
            Placement::Fragmented,
        )
        .unwrap();
        let img = b.build().unwrap();
        let dev = Counting {
            inner: MemDevice::new(&img),
            runs: Cell::new(0),
            blocks: Cell::new(0),
        };
        let mut bufs = Buffers::new();
        // Through a reference, as the mount holds its device: `&D` forwards `read_blocks`
        // (only a trait object reads a run a block at a time).
        let fs = Fs::open(&dev, &mut bufs.data).unwrap();
        let dev = *fs.device();
        // The whole contiguous file: one device call for its 65 blocks.
        let c = fs.resolve(b"/c", &mut bufs).unwrap();
        let mut out = alloc::vec![0u8; n + 10];
        dev.runs.set(0);
        assert_eq!(read_at(&fs, &c, 0, &mut out, &mut bufs.tree).unwrap(), n);
        assert_eq!(dev.runs.get(), 1, "one read for one extent run");
        assert!(out[..n] == contig[..]);
        // Every file, unaligned ranges, against the reader's own `read`.
        for (name, want) in [
            (&b"/c"[..], &contig),
            (b"/h", &sparse),
            (b"/u", &sparse),
            (b"/f", &contig),
        ] {
            let i = fs.resolve(name, &mut bufs).unwrap();
            for (off, len) in [
                (0, 1),
                (4095, 2),
                (100, 9000),
                (5 * 4096 - 7, 5 * 4096),
                (n - 5, 100),
                (n + 1, 4),
            ] {
                let mut got = alloc::vec![0xEEu8; len];
                let k = read_at(&fs, &i, off as u64, &mut got, &mut bufs.tree).unwrap();
                let end = (off + len).min(n);
                let exp = want.get(off.min(n)..end).unwrap();
                assert_eq!(k, exp.len(), "{name:?} at {off}");
                assert!(got[..k] == *exp, "{name:?} at {off}+{len}");
                let mut other = alloc::vec![0u8; len];
                let mut b2 = Buffers::new();
                let k2 = fs.read(&i, off as u64, &mut other, &mut b2).unwrap();
                assert_eq!((k, &got[..k]), (k2, &other[..k2]));
            }
        }
        // The fragmented file: every block its own extent, one call each.
        let f = fs.resolve(b"/f", &mut bufs).unwrap();
        dev.runs.set(0);
        read_at(&fs, &f, 0, &mut out, &mut bufs.tree).unwrap();
        assert_eq!(dev.runs.get(), 65);
    }

    fn listing(fs: &Fs<MemDevice<'_>>, dir: &Inode, page: usize) -> Vec<Vec<u8>> {
        let mut bufs = Buffers::new();
        let mut after = DOTDOT_COOKIE;
        let mut out = Vec::new();
        loop {
            let p = dir_page(fs, dir, after, page, &mut bufs).unwrap();
            let Some(last) = p.last() else { break };
            after = last.cookie;
            assert!(
                p.windows(2).all(|w| w[0].cookie < w[1].cookie),
                "cookie order"
            );
            assert!(p.len() <= page);
            out.extend(p.into_iter().map(|e| e.name));
        }
        out
    }

    #[test]
    fn dir_pages_resume_by_name_across_changes() {
        let names: Vec<Vec<u8>> = (0..300)
            .map(|i| alloc::format!("entry-{i}").into_bytes())
            .collect();
        let build = |keep: &dyn Fn(usize) -> bool, extra: &[&[u8]]| {
            let mut b = ImageBuilder::new(params());
            let d = b.mkdir(ImageBuilder::ROOT, b"d", 0o755).unwrap();
            for (i, n) in names.iter().enumerate() {
                if keep(i) {
                    b.add_file(d, n, Vec::new(), Sparse::Dense, Placement::Contiguous)
                        .unwrap();
                }
            }
            for n in extra {
                b.add_file(d, n, Vec::new(), Sparse::Dense, Placement::Contiguous)
                    .unwrap();
            }
            b.build().unwrap()
        };
        let a = build(&|_| true, &[]);
        let mut bufs = Buffers::new();
        let fsa = Fs::open(MemDevice::new(&a), &mut bufs.data).unwrap();
        let da = fsa.resolve(b"/d", &mut bufs).unwrap();
        let mut all = listing(&fsa, &da, 37);
        assert_eq!(all.len(), 300);
        all.sort();
        let mut want = names.clone();
        want.sort();
        assert_eq!(all, want, "every entry once");
        // A first page from the directory, the rest after every third entry was
        // removed and new ones added: each entry present throughout is listed once.
        let first = dir_page(&fsa, &da, DOTDOT_COOKIE, 50, &mut bufs).unwrap();
        let b_img = build(&|i| i % 3 != 0, &[b"new-1", b"new-2"]);
        let fsb = Fs::open(MemDevice::new(&b_img), &mut bufs.data).unwrap();
        let db = fsb.resolve(b"/d", &mut bufs).unwrap();
        let mut seen: Vec<Vec<u8>> = first.iter().map(|e| e.name.clone()).collect();
        let mut after = first.last().unwrap().cookie;
        loop {
            let p = dir_page(&fsb, &db, after, 50, &mut bufs).unwrap();
            let Some(last) = p.last() else { break };
            after = last.cookie;
            seen.extend(p.into_iter().map(|e| e.name));
        }
        for (i, n) in names.iter().enumerate() {
            let times = seen.iter().filter(|s| *s == n).count();
            if i % 3 != 0 {
                assert_eq!(times, 1, "{}", alloc::string::String::from_utf8_lossy(n));
            } else {
                assert!(times <= 1);
            }
        }
        assert_eq!(cookie(b"entry-1"), cookie(b"entry-1"));
        assert!(cookie(b"") >= 3 && cookie(b"x") != cookie(b"y"));
    }

    #[test]
    fn batched_small_writes_read_back_after_sync() {
        let mut img = ImageBuilder::new(params()).build().unwrap();
        let mut buf: Block = [0; BLOCK_SIZE];
        let dev = MemDeviceMut::new(&mut img);
        let opts = JoinOptions {
            node_id: 0x52,
            hostname: b"b".to_vec(),
            now_secs: 1,
        };
        let mut w = Writer::join(&dev, &opts).unwrap();
        w.set_batch(true).unwrap();
        let ino = w.create(1, b"small", 0o644, 0, 0).unwrap();
        let a = pattern(5000, 4);
        let b2 = pattern(3000, 5);
        w.write(ino, 0, &a).unwrap();
        w.write(ino, 4000, &b2).unwrap();
        w.write(ino, 20_000, b"tail").unwrap();
        // Pending, not on the device yet; the writer's own view has the size.
        assert_eq!(w.stat(ino).unwrap().size.get(), 20_004);
        w.sync().unwrap();
        let mut want = alloc::vec![0u8; 20_004];
        want[..5000].copy_from_slice(&a);
        want[4000..7000].copy_from_slice(&b2);
        want[20_000..].copy_from_slice(b"tail");
        let fs = Fs::open(&dev, &mut buf).unwrap();
        let mut bufs = Buffers::new();
        let i = fs.resolve(b"/small", &mut bufs).unwrap();
        let mut got = alloc::vec![0u8; 20_004];
        assert_eq!(
            read_at(&fs, &i, 0, &mut got, &mut bufs.tree).unwrap(),
            20_004
        );
        assert!(got == want);
        w.leave().unwrap();
    }

    #[test]
    fn counts_follow_allocation_and_active_rows_are_found() {
        let empty = ImageBuilder::new(params()).build().unwrap();
        let mut b = ImageBuilder::new(params());
        b.add_file(
            ImageBuilder::ROOT,
            b"f",
            pattern(10 * BLOCK_SIZE, 3),
            Sparse::Dense,
            Placement::Contiguous,
        )
        .unwrap();
        let full = b.build().unwrap();
        let mut buf: Block = [0; BLOCK_SIZE];
        let c0 = counts(
            &Fs::open(MemDevice::new(&empty), &mut buf).unwrap(),
            &mut buf,
        )
        .unwrap();
        let c1 = counts(
            &Fs::open(MemDevice::new(&full), &mut buf).unwrap(),
            &mut buf,
        )
        .unwrap();
        assert_eq!(c0.data_blocks, c1.data_blocks);
        // Ten for the file, one for the root directory's first entry block.
        assert_eq!(c0.free_blocks - c1.free_blocks, 11);
        assert_eq!(c0.free_inodes - c1.free_inodes, 1);
        assert_eq!(c0.inodes, 1024);
        assert!(c1.free_blocks < c1.data_blocks);

        let mut img = empty.clone();
        {
            let dev = MemDeviceMut::new(&mut img);
            let fs = Fs::open(&dev, &mut buf).unwrap();
            assert_eq!(active_row(&fs, &mut buf).unwrap(), None);
            let opts = JoinOptions {
                node_id: 0x51,
                hostname: b"here".to_vec(),
                now_secs: 1,
            };
            let w = Writer::join(&dev, &opts).unwrap();
            let fs = Fs::open(&dev, &mut buf).unwrap();
            assert_eq!(
                active_row(&fs, &mut buf).unwrap(),
                Some(ActiveRow {
                    row: 0,
                    node_id: 0x51,
                    hostname: b"here".to_vec()
                })
            );
            w.leave().unwrap();
            let fs = Fs::open(&dev, &mut buf).unwrap();
            assert_eq!(active_row(&fs, &mut buf).unwrap(), None);
        }
    }
}
