//! Reading file bytes: [`Fs::stream`] a block at a time through any [`Scratch`], and
//! [`Fs::read`] into a caller's buffer (one extent tree sweep for large ranges), and
//! [`Fs::stat`].

use core::ops::ControlFlow;

use super::err;
use super::fs::Fs;
use super::inode::Inode;
use super::scratch::Scratch;
use super::tree::Mapping;
use crate::arith::u64_of;
use crate::block::{Block, BlockDevice, BLOCK_SIZE, BLOCK_SIZE_U64};
use crate::error::{Error, ErrorKind, Result};

/// Reads spanning more blocks than this walk the extent tree once instead of looking up
/// every block (a lookup costs up to two tree block reads and checksums).
const SWEEP_THRESHOLD: u64 = 64;

/// What a stream hands on: bytes of the file, or a run of zeros it need not copy.
#[derive(Clone, Copy)]
enum Piece<'b> {
    Bytes(&'b [u8]),
    Zeros(usize),
}

/// What `stat` shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Stat {
    /// Inode number.
    pub ino: u64,
    /// Type and permission bits.
    pub mode: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Links.
    pub nlink: u32,
    /// Bytes.
    pub size: u64,
    /// Data blocks allocated.
    pub blocks: u64,
    /// Modification time (ns).
    pub mtime_ns: u64,
    /// Parent directory (directories only).
    pub parent: u64,
    /// Xattr block, 0 = none.
    pub xattr_block: u64,
    /// Extent tree depth.
    pub depth: u16,
}

impl<D: BlockDevice, E: From<Error>> Fs<D, E> {
    /// `stat` of an inode.
    pub fn stat(&self, inode: &Inode) -> Stat {
        let r = &inode.raw;
        Stat {
            ino: inode.ino,
            mode: r.mode.get(),
            uid: r.uid.get(),
            gid: r.gid.get(),
            nlink: r.nlink.get(),
            size: r.size.get(),
            blocks: r.blocks.get(),
            mtime_ns: r.mtime_ns.get(),
            parent: r.parent.get(),
            xattr_block: r.xattr_block.get(),
            depth: inode.depth(),
        }
    }

    /// Calls `f` with the bytes of `inode` in file order, a block at a time (less at the
    /// end of the file), through `scratch` alone: with one [`Block`] this checksums or
    /// copies a file of any size in 4 KiB of RAM. Holes and uninitialized extents give
    /// zeros. Returns `Break` when `f` stopped the stream. The work follows the file's
    /// size, holes included (a sparse 1 TiB file is 2^28 calls of zeros): a bootloader
    /// checks `inode.size()` against the partition before streaming.
    pub fn stream(
        &self,
        inode: &Inode,
        scratch: &mut impl Scratch,
        mut f: impl FnMut(&[u8]) -> ControlFlow<()>,
    ) -> Result<ControlFlow<()>, E> {
        self.stream_range::<false>(inode, 0, inode.size(), scratch, |piece| match piece {
            Piece::Bytes(b) => f(b),
            // Not produced without `ZEROS`.
            Piece::Zeros(_) => ControlFlow::Continue(()),
        })
    }

    /// `stream` of the `len` bytes at `offset` (clipped to the file). Each run of blocks
    /// (an extent's remainder, or a hole up to the next extent) is mapped once, reading
    /// up to two tree blocks, then read block by block into the data block, which with
    /// one buffer is the tree block itself. Zeros (holes, uninitialized extents) come as
    /// [`Piece::Zeros`] with `ZEROS` (a reader filling its own buffer), else as bytes of
    /// a zeroed data block.
    fn stream_range<const ZEROS: bool>(
        &self,
        inode: &Inode,
        offset: u64,
        len: u64,
        scratch: &mut impl Scratch,
        mut f: impl FnMut(Piece<'_>) -> ControlFlow<()>,
    ) -> Result<ControlFlow<()>, E> {
        let end = offset.saturating_add(len).min(inode.size());
        let overflow = || err::<E>(ErrorKind::Overflow, "read offset", inode.lba, 32);
        let mut pos = offset;
        while pos < end {
            let logical = u32::try_from(pos / BLOCK_SIZE_U64).map_err(|_| overflow())?;
            let (tree, data) = scratch.split();
            let (mapping, hole) = self.map_run(inode, logical, tree)?;
            let data = data.unwrap_or(tree);
            let run = match mapping {
                Mapping::Hole => hole,
                Mapping::Mapped { run, .. } => run,
            };
            for b in 0..run.max(1) {
                if pos >= end {
                    break;
                }
                let at = pos % BLOCK_SIZE_U64;
                let n = BLOCK_SIZE_U64
                    .saturating_sub(at)
                    .min(end.saturating_sub(pos));
                let from = usize::try_from(at).map_err(|_| overflow())?;
                let to = usize::try_from(at.saturating_add(n)).map_err(|_| overflow())?;
                let piece = match mapping {
                    Mapping::Mapped {
                        physical,
                        uninit: false,
                        ..
                    } => {
                        self.load(physical.saturating_add(b.into()), data)?;
                        Piece::Bytes(data.get(from..to).ok_or_else(overflow)?)
                    }
                    _ if ZEROS => Piece::Zeros(to.saturating_sub(from)),
                    _ => {
                        // Zeros, written once per run (`f` cannot change them).
                        if b == 0 {
                            data.fill(0);
                        }
                        Piece::Bytes(data.get(from..to).ok_or_else(overflow)?)
                    }
                };
                if f(piece).is_break() {
                    return Ok(ControlFlow::Break(()));
                }
                pos = pos.saturating_add(n);
            }
        }
        Ok(ControlFlow::Continue(()))
    }
}

impl<D: BlockDevice> Fs<D> {
    /// Reads file bytes at `offset` into `out`; returns how many were read (fewer than
    /// `out.len()` only at end of file). Holes and uninitialized extents read as zeros.
    pub fn read(
        &self,
        inode: &Inode,
        offset: u64,
        out: &mut [u8],
        scratch: &mut impl Scratch,
    ) -> Result<usize> {
        let size = inode.size();
        let want = u64_of(out.len()).min(size.saturating_sub(offset));
        let out = out.get_mut(..usize::try_from(want).unwrap_or(usize::MAX));
        let out = out.ok_or(err(ErrorKind::Overflow, "read", inode.lba, 0))?;
        let first = offset / BLOCK_SIZE_U64;
        let blocks = offset
            .saturating_add(want)
            .div_ceil(BLOCK_SIZE_U64)
            .saturating_sub(first);
        if let (tree, Some(data)) = scratch.split() {
            if blocks > SWEEP_THRESHOLD && inode.depth() > 0 {
                return self.read_sweep(inode, offset, out, tree, data);
            }
        }
        let mut done = 0usize;
        let _whole = self.stream_range::<true>(inode, offset, want, scratch, |piece| {
            let n = match piece {
                Piece::Bytes(b) => b.len(),
                Piece::Zeros(n) => n,
            };
            if let Some(dst) = out.get_mut(done..done.saturating_add(n)) {
                match piece {
                    // Whole blocks as arrays: a plain `memcpy`, no length check.
                    Piece::Bytes(b) => match (
                        <&mut [u8; BLOCK_SIZE]>::try_from(&mut *dst),
                        <&[u8; BLOCK_SIZE]>::try_from(b),
                    ) {
                        (Ok(d), Ok(s)) => *d = *s,
                        _ => {
                            crate::arith::copy_prefix(dst, b);
                        }
                    },
                    Piece::Zeros(_) => dst.fill(0),
                }
            }
            done = done.saturating_add(n);
            ControlFlow::Continue(())
        })?;
        Ok(done)
    }

    /// `read` for large ranges with two buffers: zero the output, then walk every extent
    /// once and copy the blocks that intersect the range. Valid extents never overlap,
    /// so more block reads than blocks in the range prove overlapping extents: the read
    /// budget is the range's block count, and exhausting it is reported instead of being
    /// allowed to multiply the work.
    fn read_sweep(
        &self,
        inode: &Inode,
        offset: u64,
        out: &mut [u8],
        tree: &mut Block,
        data: &mut Block,
    ) -> Result<usize> {
        out.fill(0);
        let want = u64_of(out.len());
        let end = offset.saturating_add(want);
        let first = offset / BLOCK_SIZE_U64;
        let last = end.div_ceil(BLOCK_SIZE_U64);
        let budget = last.saturating_sub(first);
        let mut reads: u64 = 0;
        let _all = self.for_each_extent(inode, tree, |e| {
            if e.uninit {
                return Ok(ControlFlow::Continue(()));
            }
            let lo = u64::from(e.logical).max(first);
            let hi = u64::from(e.logical).saturating_add(e.len.into()).min(last);
            for l in lo..hi {
                reads = reads.saturating_add(1);
                if reads > budget {
                    return Err(err(
                        ErrorKind::Exhausted { budget },
                        "extent.logical (overlapping extents)",
                        inode.lba,
                        104,
                    ));
                }
                let physical = e
                    .physical
                    .saturating_add(l.saturating_sub(e.logical.into()));
                self.device().read_block(physical, data)?;
                // Bytes of block `l` inside [offset, end).
                let b_start = l.saturating_mul(BLOCK_SIZE_U64).max(offset);
                let b_end = l.saturating_add(1).saturating_mul(BLOCK_SIZE_U64).min(end);
                let src_at = usize::try_from(b_start % BLOCK_SIZE_U64).unwrap_or(0);
                let len = usize::try_from(b_end.saturating_sub(b_start)).unwrap_or(0);
                let dst_at = usize::try_from(b_start.saturating_sub(offset)).unwrap_or(usize::MAX);
                let (Some(dst), Some(src)) = (
                    out.get_mut(dst_at..dst_at.saturating_add(len)),
                    data.get(src_at..src_at.saturating_add(len)),
                ) else {
                    return Err(err(ErrorKind::Overflow, "read", inode.lba, 0));
                };
                crate::arith::copy_prefix(dst, src);
            }
            Ok(ControlFlow::Continue(()))
        })?;
        Ok(out.len())
    }
}
