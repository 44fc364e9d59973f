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
        if r.state_name() == "ACTIVE" {
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
