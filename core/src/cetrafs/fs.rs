//! [`Fs`]: a mounted (read-only) cetrafs image over a block device.

use core::marker::PhantomData;
use core::ops::ControlFlow;

use super::groups::{BlockGroup, NodeRow, PendingFree, ZoneGroup};
use super::superblock::Superblock;
use super::tree::{Inode, Mapping};
use super::{err, ROWS_PER_BLOCK};
use crate::arith::u64_of;
use crate::block::{Block, BlockDevice, BLOCK_SIZE, BLOCK_SIZE_U64};
use crate::error::{Error, ErrorKind, Result};

/// The caller-owned working memory of every walk: one block for extent tree blocks and
/// one for data, directory and xattr blocks (8 KiB in all; place it in a `static` on
/// small targets).
pub struct Buffers {
    /// Extent tree blocks.
    pub tree: Block,
    /// Data, directory and xattr blocks.
    pub data: Block,
}

impl Buffers {
    /// Zeroed buffers.
    pub const fn new() -> Self {
        Buffers {
            tree: [0; BLOCK_SIZE],
            data: [0; BLOCK_SIZE],
        }
    }
}

impl Default for Buffers {
    fn default() -> Self {
        Buffers::new()
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::Buffers {}
    impl Sealed for crate::block::Block {}
}

/// The working memory a walk reads through: [`Buffers`] (8 KiB: an extent tree block
/// stays cached while data blocks are read) or one [`Block`] (4 KiB: the tree blocks
/// are read again after data blocks have reused the buffer, which costs up to two block
/// reads per extent). Every walk, lookup and read takes either.
pub trait Scratch: sealed::Sealed {
    /// The block tree walks read into and, with two buffers, a separate one for data.
    fn split(&mut self) -> (&mut Block, Option<&mut Block>);
    /// The block single reads use (inodes, directory, xattr and journal blocks).
    fn block(&mut self) -> &mut Block;
}

impl Scratch for Buffers {
    fn split(&mut self) -> (&mut Block, Option<&mut Block>) {
        (&mut self.tree, Some(&mut self.data))
    }
    fn block(&mut self) -> &mut Block {
        &mut self.data
    }
}

impl Scratch for Block {
    fn split(&mut self) -> (&mut Block, Option<&mut Block>) {
        (self, None)
    }
    fn block(&mut self) -> &mut Block {
        self
    }
}

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

/// A mounted image. Opening performs the full mount check (`docs/cetrafs.md` section 2).
///
/// `E` is the error the read path reports: [`Error`] (the field, its offset and the
/// values) unless the image is opened with [`Fs::open_for_read_as`], which can pick the
/// one-byte [`Fault`](crate::Fault) for firmware that has no room for diagnostics. The
/// checks are the same either way.
#[derive(Debug)]
pub struct Fs<D, E = Error> {
    dev: D,
    sb: Superblock,
    /// `fn() -> E`: an `Fs` holds no `E`, it only returns them.
    error: PhantomData<fn() -> E>,
}

impl<D: BlockDevice> Fs<D> {
    /// Mounts `dev` read-only: superblock, map, features, and the zone and block group
    /// tables (which must agree with each other and with the map).
    pub fn open(dev: D, buf: &mut Block) -> Result<Fs<D>> {
        let fs = Fs::open_for_read(dev, buf)?;
        fs.check_group_tables(buf)?;
        Ok(fs)
    }

    /// Mounts `dev` for reading only what reading needs: the superblock, map and
    /// features (mount checks 1-6 of `docs/cetrafs.md` section 2), not the zone and
    /// block group tables (check 7), which only allocation depends on. A bootloader's
    /// mount: it reads one block, and the table checks stay out of its flash.
    pub fn open_for_read(dev: D, buf: &mut Block) -> Result<Fs<D>> {
        Fs::open_for_read_as(dev, buf)
    }

    fn check_group_tables(&self, buf: &mut Block) -> Result<()> {
        let z = self.sb.zone_group_count();
        let b = self.sb.block_group_count();
        let mut next_bg: u32 = 0;
        for zi in 0..z {
            let zg = self.zone_group(zi, buf)?;
            let first = zg.cold.first_bg_id.get();
            let count = zg.cold.bg_count.get();
            if first != next_bg {
                return Err(err(
                    ErrorKind::Mismatch {
                        expected: next_bg.into(),
                        found: first.into(),
                    },
                    "zone_group.first_bg_id",
                    zg.lba,
                    516,
                ));
            }
            let end = first
                .checked_add(count)
                .filter(|e| count >= 1 && *e <= b)
                .ok_or(err(
                    ErrorKind::OutOfRange {
                        value: count.into(),
                        max: b.saturating_sub(first).into(),
                    },
                    "zone_group.bg_count",
                    zg.lba,
                    520,
                ))?;
            if let Some(owner) = zg.owner() {
                if u32::from(owner) >= self.sb.node_capacity() {
                    return Err(err(
                        ErrorKind::OutOfRange {
                            value: owner.into(),
                            max: self.sb.node_capacity().saturating_sub(1).into(),
                        },
                        "zone_group.owner_node_id",
                        zg.lba,
                        12,
                    ));
                }
            }
            // Each descriptor is checked against the map (the free counts are cached
            // values: the checker compares them, the mount does not depend on them).
            for bi in first..end {
                self.block_group_in(bi, zi, buf)?;
            }
            next_bg = end;
        }
        if next_bg != b {
            return Err(err(
                ErrorKind::Mismatch {
                    expected: b.into(),
                    found: next_bg.into(),
                },
                "zone group table (block groups covered)",
                1,
                520,
            ));
        }
        Ok(())
    }

    /// Zone group `z`.
    pub fn zone_group(&self, z: u32, buf: &mut Block) -> Result<ZoneGroup> {
        if z >= self.sb.zone_group_count() {
            return Err(err(
                ErrorKind::OutOfRange {
                    value: z.into(),
                    max: self.sb.zone_group_count().saturating_sub(1).into(),
                },
                "zone group",
                0,
                64,
            ));
        }
        let lba = 1u64.saturating_add(z.into());
        self.dev.read_block(lba, buf)?;
        ZoneGroup::parse(buf, lba, z)
    }

    /// Block group `bi`, whose owner is looked up from the zone group table.
    pub fn block_group(&self, bi: u32, buf: &mut Block) -> Result<BlockGroup> {
        let mut owner = None;
        for zi in 0..self.sb.zone_group_count() {
            let zg = self.zone_group(zi, buf)?;
            let first = zg.cold.first_bg_id.get();
            if bi >= first && bi < first.saturating_add(zg.cold.bg_count.get()) {
                owner = Some(zi);
                break;
            }
        }
        let owner = owner.ok_or(err(
            ErrorKind::OutOfRange {
                value: bi.into(),
                max: self.sb.block_group_count().saturating_sub(1).into(),
            },
            "block group",
            0,
            68,
        ))?;
        self.block_group_in(bi, owner, buf)
    }

    /// Calls `f` with every block group in order, reading each zone group once (so a
    /// full pass costs `Z + B` block reads, where [`Fs::block_group`] costs `Z + 1` per
    /// group). Uses only `buf`.
    pub fn for_each_block_group(
        &self,
        buf: &mut Block,
        mut f: impl FnMut(u32, Result<BlockGroup>) -> ControlFlow<()>,
    ) -> Result<()> {
        for zi in 0..self.sb.zone_group_count() {
            let zg = self.zone_group(zi, buf)?;
            let first = zg.cold.first_bg_id.get();
            let end = first
                .saturating_add(zg.cold.bg_count.get())
                .min(self.sb.block_group_count());
            for bi in first..end {
                if f(bi, self.block_group_in(bi, zi, buf)).is_break() {
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    fn block_group_in(&self, bi: u32, owner: u32, buf: &mut Block) -> Result<BlockGroup> {
        let lba = self.sb.raw().bg_table_start.get().saturating_add(bi.into());
        self.dev.read_block(lba, buf)?;
        let (start, len) = self.sb.bg_span(bi);
        BlockGroup::parse(buf, lba, bi, start, len, owner)
    }

    /// Registry row `row` (`None` when free).
    pub fn node_row(&self, row: u32, buf: &mut Block) -> Result<Option<NodeRow>> {
        if row >= self.sb.node_capacity() {
            return Err(err(
                ErrorKind::OutOfRange {
                    value: row.into(),
                    max: self.sb.node_capacity().saturating_sub(1).into(),
                },
                "registry row",
                0,
                136,
            ));
        }
        let lba = self
            .sb
            .raw()
            .registry_start
            .get()
            .saturating_add(u64::from(row) / ROWS_PER_BLOCK);
        self.dev.read_block(lba, buf)?;
        let off = usize::try_from(u64::from(row) % ROWS_PER_BLOCK)
            .unwrap_or(0)
            .saturating_mul(128);
        NodeRow::parse(buf, lba, off, row, self.journal_start(row))
    }

    /// Pending-free slot `slot` of zone group `z` (`None` when free).
    pub fn pending_free(&self, z: u32, slot: u32, buf: &mut Block) -> Result<Option<PendingFree>> {
        let per_zg = self.sb.pending_blocks_per_zg();
        let lba = self
            .sb
            .raw()
            .pending_start
            .get()
            .saturating_add(u64::from(z).saturating_mul(per_zg))
            .saturating_add(u64::from(slot) / super::PENDING_PER_BLOCK);
        self.dev.read_block(lba, buf)?;
        let off = usize::try_from(u64::from(slot) % super::PENDING_PER_BLOCK)
            .unwrap_or(0)
            .saturating_mul(16);
        let entry = PendingFree::parse(buf, lba, off)?;
        if let Some(e) = entry {
            self.check_data_range(e.lba, e.count.into(), "pending_free.lba", lba, off)?;
        }
        Ok(entry)
    }
}

impl<D: BlockDevice, E: From<Error>> Fs<D, E> {
    /// [`Fs::open_for_read`], with `E` as the error of the mount and of everything read
    /// through this `Fs`: `Fs::<_, Fault>::open_for_read_as(dev, buf)` runs the same
    /// checks and reports one-byte [`Fault`](crate::Fault)s.
    pub fn open_for_read_as(dev: D, buf: &mut Block) -> Result<Self, E> {
        let blocks = dev.block_count();
        if blocks == 0 {
            return Err(err(
                ErrorKind::Truncated {
                    needed: BLOCK_SIZE_U64,
                    available: 0,
                },
                "superblock",
                0,
                0,
            ));
        }
        dev.read_block(0, buf)?;
        // `map`, not `?` and `Ok`: the superblock then moves once, into the result (on
        // Cortex-M3 the other form copies it twice, 336 bytes more code).
        Superblock::parse_as(buf, blocks).map(|sb| Fs {
            dev,
            sb,
            error: PhantomData,
        })
    }

    /// The device.
    pub fn device(&self) -> &D {
        &self.dev
    }

    /// The checked superblock.
    pub fn superblock(&self) -> &Superblock {
        &self.sb
    }

    /// Reads block `lba` into `buf`, a device error reported as `E`: one conversion
    /// for every read of the read path.
    pub(crate) fn load(&self, lba: u64, buf: &mut Block) -> Result<(), E> {
        self.dev.read_block(lba, buf).map_err(E::from)
    }

    /// First block of registry row `row`'s journal slice.
    pub fn journal_start(&self, row: u32) -> u64 {
        self.sb
            .raw()
            .node_journal_start
            .get()
            .saturating_add(u64::from(row).saturating_mul(self.sb.node_journal_blocks()))
    }

    /// Checks that blocks `start .. start + len` lie inside one block group's data area.
    /// `lba`/`field` locate the pointer being checked, for the error.
    pub fn check_data_range(
        &self,
        start: u64,
        len: u64,
        what: &'static str,
        lba: u64,
        field: usize,
    ) -> Result<(), E> {
        let regions = self.sb.bg_regions_start();
        let size = self.sb.bg_size_blocks();
        let bad = || -> E {
            err(
                ErrorKind::OutOfRange {
                    value: start,
                    max: self.sb.total_blocks(),
                },
                what,
                lba,
                field,
            )
        };
        let rel = start.checked_sub(regions).ok_or_else(bad)?;
        let bg =
            u32::try_from(crate::arith::div_u64(rel, size).ok_or_else(bad)?).map_err(|_| bad())?;
        if bg >= self.sb.block_group_count() {
            return Err(bad());
        }
        let (bg_start, bg_len) = self.sb.bg_span(bg);
        let data_start = bg_start
            .saturating_add(1)
            .saturating_add(super::bitmap_blocks(bg_len));
        let end = start.checked_add(len).ok_or_else(bad)?;
        if start < data_start || end > bg_start.saturating_add(bg_len) {
            return Err(bad());
        }
        Ok(())
    }

    /// Inode `ino` (1 ..< `inode_count`).
    pub fn inode(&self, ino: u64, buf: &mut Block) -> Result<Inode, E> {
        if ino == 0 || ino >= self.sb.inode_count() {
            return Err(err(
                ErrorKind::OutOfRange {
                    value: ino,
                    max: self.sb.inode_count().saturating_sub(1),
                },
                "inode number",
                0,
                112,
            ));
        }
        let lba = self.sb.raw().inode_table_start.get().saturating_add(ino);
        self.dev.read_block_prefix(lba, buf, 256).map_err(E::from)?;
        Inode::parse_as(buf, lba, ino)
    }

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
    /// so more block reads than blocks in the range prove overlapping extents, which is
    /// reported instead of being allowed to multiply the work.
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
                        ErrorKind::Overlap { other: l },
                        "extent.logical (overlapping extents)",
                        inode.lba,
                        104,
                    ));
                }
                let physical = e
                    .physical
                    .saturating_add(l.saturating_sub(e.logical.into()));
                self.dev.read_block(physical, data)?;
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
