//! Extent trees: mapping a logical block, and walking every extent. Walks descend one
//! level at a time through one caller buffer and check that each child's depth is its
//! parent's minus one, so no image can make them loop.

use core::ops::ControlFlow;

use zerocopy::FromBytes;

use super::check_tail;
use super::fs::Fs;
use super::inode::{check_header, Inode};
use super::raw::{RawExtent, RawExtentHeader, RawExtentIndex};
use super::scratch::Scratch;
use super::{err, EXTENT_UNINIT, INDEX_MAX, LEAF_MAX, MAX_DEPTH, TAIL_EXTENT};
use crate::block::{Block, BlockDevice};
use crate::error::{Error, ErrorKind};

/// One leaf extent, validated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Extent {
    /// First logical block.
    pub logical: u32,
    /// Blocks, ≥ 1.
    pub len: u32,
    /// First physical block.
    pub physical: u64,
    /// Preallocated, reads as zeros.
    pub uninit: bool,
}

/// Where a logical block lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Mapping {
    /// No extent maps it: zeros.
    Hole,
    /// Mapped: `physical` is the block; `run` blocks from here on are contiguous in the
    /// same extent (≥ 1).
    Mapped {
        /// Physical block.
        physical: u64,
        /// Contiguous blocks remaining in the extent, this one included.
        run: u32,
        /// Uninitialized (reads as zeros).
        uninit: bool,
    },
}

/// Entries of one tree level: the inode's inline slots or a tree block.
#[derive(Clone, Copy)]
enum Level<'b> {
    Inline(&'b [u8; 64], u64),
    Block(&'b Block, u64),
}

impl Level<'_> {
    fn lba(&self) -> u64 {
        match self {
            Level::Inline(_, l) | Level::Block(_, l) => *l,
        }
    }

    /// Byte offset (in its block) and bytes of entry `i` of `size` bytes.
    fn entry(&self, i: u16, size: usize) -> Option<(usize, &[u8])> {
        let i = usize::from(i);
        match self {
            Level::Inline(slots, _) => {
                let at = i.checked_mul(16)?;
                Some((at.checked_add(116)?, slots.get(at..at.checked_add(size)?)?))
            }
            Level::Block(b, _) => {
                let at = i.checked_mul(size)?.checked_add(12)?;
                Some((at, b.get(at..at.checked_add(size)?)?))
            }
        }
    }

    fn extent<E: From<Error>>(&self, i: u16) -> Result<(usize, RawExtent), E> {
        let (at, b) =
            self.entry(i, 16)
                .ok_or(err::<E>(ErrorKind::Invalid, "extent", self.lba(), 0))?;
        let e = RawExtent::read_from_bytes(b)
            .map_err(|_| err::<E>(ErrorKind::Invalid, "extent", self.lba(), at))?;
        Ok((at, e))
    }

    fn index<E: From<Error>>(&self, i: u16) -> Result<(usize, RawExtentIndex), E> {
        let (at, b) =
            self.entry(i, 12)
                .ok_or(err::<E>(ErrorKind::Invalid, "extent_index", self.lba(), 0))?;
        let e = RawExtentIndex::read_from_bytes(b)
            .map_err(|_| err::<E>(ErrorKind::Invalid, "extent_index", self.lba(), at))?;
        Ok((at, e))
    }
}

impl<D: BlockDevice, E: From<Error>> Fs<D, E> {
    fn valid_extent(&self, raw: &RawExtent, lba: u64, at: usize) -> Result<Extent, E> {
        let len = raw.len.get() & !EXTENT_UNINIT;
        if len == 0 {
            return Err(err(
                ErrorKind::Zero,
                "extent.len",
                lba,
                at.saturating_add(4),
            ));
        }
        let logical = raw.logical.get();
        if u64::from(logical).saturating_add(u64::from(len)) > 1u64 << 32 {
            return Err(err(ErrorKind::Overflow, "extent.logical", lba, at));
        }
        let physical = raw.physical.get();
        self.check_data_range(
            physical,
            len.into(),
            "extent.physical",
            lba,
            at.saturating_add(8),
        )?;
        let uninit = raw.len.get() & EXTENT_UNINIT != 0;
        if uninit && self.superblock().features().incompat & 2 == 0 {
            return Err(err(
                ErrorKind::UnknownFlags {
                    bits: EXTENT_UNINIT.into(),
                },
                "extent.len (UNINIT while INCOMPAT_UNINIT is clear)",
                lba,
                at.saturating_add(4),
            ));
        }
        Ok(Extent {
            logical,
            len,
            physical,
            uninit,
        })
    }

    /// Reads tree block `child` (named by the entry at `at` of block `parent`) into `buf`
    /// and checks its tail, checksum and header; returns its entry count.
    fn read_tree_block(
        &self,
        child: u64,
        depth: u16,
        buf: &mut Block,
        parent: u64,
        at: usize,
    ) -> Result<u16, E> {
        self.check_data_range(child, 1, "extent_index.child", parent, at.saturating_add(4))?;
        self.load(child, buf)?;
        check_tail::<E>(
            buf,
            child,
            TAIL_EXTENT,
            ("extent_block.tail.magic", "extent_block.tail.crc"),
        )?;
        let h = RawExtentHeader::read_from_bytes(buf.get(..12).unwrap_or(&[]))
            .map_err(|_| err::<E>(ErrorKind::Invalid, "extent_header", child, 0))?;
        let max = if depth == 0 { LEAF_MAX } else { INDEX_MAX };
        check_header::<E>(&h, max, MAX_DEPTH, Some(depth), child, 0)?;
        let size: usize = if depth == 0 { 16 } else { 12 };
        let end = usize::from(h.entries.get())
            .saturating_mul(size)
            .saturating_add(12);
        super::zero::<E>(
            buf.get(end..super::TAIL_AT).unwrap_or(&[]),
            "extent_block (unused entries)",
            child,
            end,
        )?;
        Ok(h.entries.get())
    }

    /// Where logical block `logical` of `inode` lives. Reads at most two tree blocks.
    pub fn map_block(&self, inode: &Inode, logical: u32, tree: &mut Block) -> Result<Mapping, E> {
        self.map_run(inode, logical, tree).map(|(m, _)| m)
    }

    /// [`Fs::map_block`], and for a hole how many blocks it spans: up to the next
    /// extent or index entry that starts after `logical` (to the end of the 2^32-block
    /// address space when none does), so a sparse file is skipped a run at a time.
    pub(crate) fn map_run(
        &self,
        inode: &Inode,
        logical: u32,
        tree: &mut Block,
    ) -> Result<(Mapping, u32), E> {
        let root = inode.raw.extent_header;
        let mut depth = root.depth.get();
        let mut entries = root.entries.get();
        let slots = inode.raw.slots;
        // The first logical block after `logical` that some entry starts at.
        let mut next: u64 = 1 << 32;
        let mut after = |start: u32| {
            if start > logical {
                next = next.min(start.into());
            }
        };
        // `None` while in the inode's inline slots, then the tree block held in `tree`.
        let mut in_block: Option<u64> = None;
        loop {
            let level = match in_block {
                Some(lba) => Level::Block(tree, lba),
                None => Level::Inline(&slots, inode.lba),
            };
            if depth == 0 {
                for i in 0..entries {
                    let (at, raw) = level.extent::<E>(i)?;
                    let e = self.valid_extent(&raw, level.lba(), at)?;
                    if logical >= e.logical
                        && u64::from(logical) < u64::from(e.logical).saturating_add(e.len.into())
                    {
                        let off = logical.saturating_sub(e.logical);
                        let m = Mapping::Mapped {
                            physical: e.physical.saturating_add(off.into()),
                            run: e.len.saturating_sub(off),
                            uninit: e.uninit,
                        };
                        return Ok((m, 0));
                    }
                    after(e.logical);
                }
                break;
            }
            let mut best: Option<(u32, u64, usize)> = None;
            for i in 0..entries {
                let (at, ix) = level.index::<E>(i)?;
                let l = ix.logical.get();
                after(l);
                if l <= logical && best.is_none_or(|(b, _, _)| l > b) {
                    best = Some((l, ix.child.get(), at));
                }
            }
            let Some((_, child, at)) = best else {
                break;
            };
            let parent = level.lba();
            depth = depth.saturating_sub(1);
            entries = self.read_tree_block(child, depth, tree, parent, at)?;
            in_block = Some(child);
        }
        let hole = next.saturating_sub(logical.into());
        Ok((Mapping::Hole, u32::try_from(hole).unwrap_or(u32::MAX)))
    }

    /// Calls `f` with every extent of `inode`, in on-disk (unordered) order. Uses only
    /// `tree`; `f` may use any other buffer. Stops early when `f` breaks.
    pub fn for_each_extent(
        &self,
        inode: &Inode,
        tree: &mut Block,
        mut f: impl FnMut(Extent) -> Result<ControlFlow<()>, E>,
    ) -> Result<ControlFlow<()>, E> {
        self.each_extent(inode, tree, false, &mut |e, _| f(e))
    }

    /// `for_each_extent` whose `f` also gets a block for its own reads: the data block
    /// of [`Buffers`](super::Buffers), or with one block the tree buffer itself, in
    /// which case the leaf (and interior) block is read again before the next extent.
    pub(crate) fn for_each_extent_with(
        &self,
        inode: &Inode,
        scratch: &mut impl Scratch,
        mut f: impl FnMut(Extent, &mut Block) -> Result<ControlFlow<()>, E>,
    ) -> Result<ControlFlow<()>, E> {
        match scratch.split() {
            (tree, Some(data)) => self.each_extent(inode, tree, false, &mut |e, _| f(e, data)),
            (one, None) => self.each_extent(inode, one, true, &mut f),
        }
    }

    /// The extent walk. `f` gets the tree buffer too; `shared` says it may overwrite it,
    /// so tree blocks are read again before each use that follows a call.
    fn each_extent(
        &self,
        inode: &Inode,
        tree: &mut Block,
        shared: bool,
        f: &mut impl FnMut(Extent, &mut Block) -> Result<ControlFlow<()>, E>,
    ) -> Result<ControlFlow<()>, E> {
        let root = inode.raw.extent_header;
        let slots = inode.raw.slots;
        let inline = Level::Inline(&slots, inode.lba);
        let n = root.entries.get();
        match root.depth.get() {
            0 => {
                for i in 0..n {
                    let (at, raw) = inline.extent::<E>(i)?;
                    if f(self.valid_extent(&raw, inode.lba, at)?, tree)?.is_break() {
                        return Ok(ControlFlow::Break(()));
                    }
                }
            }
            1 => {
                for i in 0..n {
                    let (at, ix) = inline.index::<E>(i)?;
                    let leaf = ix.child.get();
                    if self
                        .leaf_extents(leaf, tree, shared, inode.lba, at, f)?
                        .is_break()
                    {
                        return Ok(ControlFlow::Break(()));
                    }
                }
            }
            _ => {
                for i in 0..n {
                    let (at, ix) = inline.index::<E>(i)?;
                    let interior = ix.child.get();
                    let m = self.read_tree_block(interior, 1, tree, inode.lba, at)?;
                    for j in 0..m {
                        // Re-read the interior block: the leaf walk below reuses `tree`.
                        if j > 0 {
                            self.read_tree_block(interior, 1, tree, inode.lba, at)?;
                        }
                        let (jat, jx) = Level::Block(tree, interior).index::<E>(j)?;
                        if self
                            .leaf_extents(jx.child.get(), tree, shared, interior, jat, f)?
                            .is_break()
                        {
                            return Ok(ControlFlow::Break(()));
                        }
                    }
                }
            }
        }
        Ok(ControlFlow::Continue(()))
    }

    fn leaf_extents(
        &self,
        leaf: u64,
        tree: &mut Block,
        shared: bool,
        parent: u64,
        at: usize,
        f: &mut impl FnMut(Extent, &mut Block) -> Result<ControlFlow<()>, E>,
    ) -> Result<ControlFlow<()>, E> {
        let m = self.read_tree_block(leaf, 0, tree, parent, at)?;
        for k in 0..m {
            if shared && k > 0 {
                self.read_tree_block(leaf, 0, tree, parent, at)?;
            }
            let (kat, raw) = Level::Block(tree, leaf).extent::<E>(k)?;
            let e = self.valid_extent(&raw, leaf, kat)?;
            if f(e, tree)?.is_break() {
                return Ok(ControlFlow::Break(()));
            }
        }
        Ok(ControlFlow::Continue(()))
    }
}

/// What [`Fs::walk_tree`] reports, in on-disk order.
#[derive(Clone, Copy, Debug)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum TreeEvent {
    /// A tree block whose tail, checksum and header are valid.
    Block {
        /// Its block.
        lba: u64,
        /// Its depth (0 = leaf).
        depth: u16,
    },
    /// A valid leaf extent, found in block `lba` (the inode's own block for inline
    /// extents) at byte `at`.
    Extent {
        /// The extent.
        extent: Extent,
        /// Block holding it.
        lba: u64,
        /// Byte offset of the entry in that block.
        at: usize,
    },
    /// A problem; the walk skips the entry or subtree concerned and goes on.
    Problem(TreeProblem, crate::error::Error),
}

/// The rule a [`TreeEvent::Problem`] breaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum TreeProblem {
    /// A tree block or an extent is malformed (its error says which field).
    Structure,
    /// An index entry's `logical` is not the lowest logical block its subtree maps.
    IndexLogical,
    /// A subtree maps a block outside the range its index entry allows (below the
    /// entry's `logical`, or at or above the next entry's).
    IndexRange,
}

/// Half-open logical range `lo .. hi` an index entry allows its subtree.
#[derive(Clone, Copy)]
struct Bounds {
    lo: u64,
    hi: u64,
}

/// Reports an index entry (at byte `from.1` of block `from.0`) whose `logical` is not
/// the lowest block its subtree maps.
fn check_lowest(lowest: Option<u64>, b: Bounds, from: (u64, usize), f: &mut impl FnMut(TreeEvent)) {
    if lowest != Some(b.lo) {
        f(TreeEvent::Problem(
            TreeProblem::IndexLogical,
            err(
                ErrorKind::Mismatch {
                    expected: lowest.unwrap_or(u64::MAX),
                    found: b.lo,
                },
                "extent_index.logical (not the lowest block of its subtree)",
                from.0,
                from.1,
            ),
        ));
    }
}

/// `logical` of the index entry that follows `l` among a level's entries (the smallest
/// one greater than `l`), or `hi` when none does.
fn next_logical(level: &Level<'_>, entries: u16, l: u32, hi: u64) -> u64 {
    let mut next = hi;
    for i in 0..entries {
        if let Ok((_, ix)) = level.index::<Error>(i) {
            let o = u64::from(ix.logical.get());
            if o > u64::from(l) && o < next {
                next = o;
            }
        }
    }
    next
}

impl<D: BlockDevice> Fs<D> {
    /// Walks the whole extent tree of `inode` for a checker: every tree block, every
    /// extent, and every broken rule, including the index rules of section 9 (each
    /// entry's `logical` is the lowest block its subtree maps, and the subtree stays
    /// below the next entry's). Unlike [`Fs::for_each_extent`] it does not stop at the
    /// first problem: it reports it and skips that entry or subtree. Uses only `tree`.
    /// Reads at most `4 × 339 × 2` tree blocks plus one re-read per interior entry.
    pub fn walk_tree(&self, inode: &Inode, tree: &mut Block, mut f: impl FnMut(TreeEvent)) {
        let root = inode.raw.extent_header;
        let slots = inode.raw.slots;
        let inline = Level::Inline(&slots, inode.lba);
        let all = Bounds {
            lo: 0,
            hi: 1u64 << 32,
        };
        let n = root.entries.get();
        let depth = root.depth.get();
        if depth == 0 {
            self.walk_extents(&inline, n, all, &mut f);
            return;
        }
        for i in 0..n {
            let Ok((at, ix)) = inline.index::<Error>(i) else {
                continue;
            };
            let l = ix.logical.get();
            let b = Bounds {
                lo: l.into(),
                hi: next_logical(&inline, n, l, all.hi),
            };
            self.walk_child(
                ix.child.get(),
                depth.saturating_sub(1),
                b,
                tree,
                (inode.lba, at),
                &mut f,
            );
        }
    }

    /// Extents `0..n` of a leaf level, each checked against `b`; returns the lowest
    /// logical block mapped, if any.
    fn walk_extents(
        &self,
        level: &Level<'_>,
        n: u16,
        b: Bounds,
        f: &mut impl FnMut(TreeEvent),
    ) -> Option<u64> {
        let mut lowest: Option<u64> = None;
        for i in 0..n {
            let checked = level
                .extent(i)
                .and_then(|(at, raw)| Ok((at, self.valid_extent(&raw, level.lba(), at)?)));
            let (at, e) = match checked {
                Ok(x) => x,
                Err(e) => {
                    f(TreeEvent::Problem(TreeProblem::Structure, e));
                    continue;
                }
            };
            let start = u64::from(e.logical);
            let end = start.saturating_add(e.len.into());
            if start < b.lo || end > b.hi {
                f(TreeEvent::Problem(
                    TreeProblem::IndexRange,
                    err(
                        ErrorKind::OutOfRange {
                            value: if start < b.lo { start } else { end },
                            max: b.hi,
                        },
                        "extent.logical (outside its index entry's range)",
                        level.lba(),
                        at,
                    ),
                ));
                continue;
            }
            lowest = Some(lowest.map_or(start, |m| m.min(start)));
            f(TreeEvent::Extent {
                extent: e,
                lba: level.lba(),
                at,
            });
        }
        lowest
    }

    /// The subtree under the index entry at byte `from.1` of block `from.0`, whose
    /// `logical` is `b.lo`; reports an index-logical problem when its lowest mapped
    /// block differs.
    fn walk_child(
        &self,
        child: u64,
        depth: u16,
        b: Bounds,
        tree: &mut Block,
        from: (u64, usize),
        f: &mut impl FnMut(TreeEvent),
    ) {
        let n = match self.read_tree_block(child, depth, tree, from.0, from.1) {
            Ok(n) => n,
            Err(e) => {
                f(TreeEvent::Problem(TreeProblem::Structure, e));
                return;
            }
        };
        f(TreeEvent::Block { lba: child, depth });
        let lowest = if depth == 0 {
            self.walk_extents(&Level::Block(tree, child), n, b, f)
        } else {
            let mut lowest: Option<u64> = None;
            for j in 0..n {
                // Descending reuses `tree`: re-read this block for every entry after the
                // first (its checks passed above; a changed block is reported again).
                if j > 0 {
                    if let Err(e) = self.read_tree_block(child, depth, tree, from.0, from.1) {
                        f(TreeEvent::Problem(TreeProblem::Structure, e));
                        return;
                    }
                }
                let level = Level::Block(tree, child);
                let Ok((at, ix)) = level.index::<Error>(j) else {
                    continue;
                };
                let l = ix.logical.get();
                let lo = u64::from(l);
                if lo < b.lo || lo >= b.hi {
                    f(TreeEvent::Problem(
                        TreeProblem::IndexRange,
                        err(
                            ErrorKind::OutOfRange {
                                value: lo,
                                max: b.hi,
                            },
                            "extent_index.logical (outside its parent entry's range)",
                            child,
                            at,
                        ),
                    ));
                    continue;
                }
                let cb = Bounds {
                    lo,
                    hi: next_logical(&level, n, l, b.hi),
                };
                let grand = ix.child.get();
                if let Some(m) = self.walk_child_leaf(grand, cb, tree, (child, at), f) {
                    lowest = Some(lowest.map_or(m, |x| x.min(m)));
                }
            }
            lowest
        };
        check_lowest(lowest, b, from, f);
    }

    /// A leaf below an interior block (depth 0), checked like [`Fs::walk_child`];
    /// returns its lowest mapped block.
    fn walk_child_leaf(
        &self,
        leaf: u64,
        b: Bounds,
        tree: &mut Block,
        from: (u64, usize),
        f: &mut impl FnMut(TreeEvent),
    ) -> Option<u64> {
        let n = match self.read_tree_block(leaf, 0, tree, from.0, from.1) {
            Ok(n) => n,
            Err(e) => {
                f(TreeEvent::Problem(TreeProblem::Structure, e));
                return None;
            }
        };
        f(TreeEvent::Block {
            lba: leaf,
            depth: 0,
        });
        let lowest = self.walk_extents(&Level::Block(tree, leaf), n, b, f);
        check_lowest(lowest, b, from, f);
        lowest
    }
}
