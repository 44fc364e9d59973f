//! A file's extents read whole into memory and written back into its tree (section 9:
//! inline, then leaves, then interior blocks). Growth appends to one array
//! ([`super::grow`]). Any other edit lays the extents out again: each extent stays in the
//! leaf whose range holds it and each leaf in its interior block; one that overflows
//! splits in place, one that empties is freed, and an array whose entries stay the same
//! keeps its bytes, so an edit anywhere in a file rewrites the leaves it touches and the
//! interior blocks above them, not every later leaf (section 15, "Extent trees as
//! written").

use alloc::vec::Vec;
use core::ops::Range;

use tet_core::block::{Block, BlockDeviceMut, BLOCK_SIZE, BLOCK_SIZE_U64};
use tet_core::cetrafs::raw::{RawExtent, RawExtentHeader, RawExtentIndex, RawInode};
use tet_core::cetrafs::{
    EXTENT_MAGIC, EXTENT_UNINIT, INDEX_MAX, INLINE_SLOTS, LEAF_MAX, TAIL_AT, TAIL_EXTENT,
};
use tet_core::checksum::crc32c_skipping;
use tet_core::{Error, ErrorKind};
use zerocopy::{FromBytes, IntoBytes};

use super::txn::Txn;
use super::{Errno, WriteError, Writer};

/// One extent: `len` logical blocks from `logical` at `physical`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Ext {
    pub logical: u64,
    pub len: u64,
    pub physical: u64,
    pub uninit: bool,
}

impl Ext {
    pub fn end(&self) -> u64 {
        self.logical.saturating_add(self.len)
    }
}

/// A file's mapping: its extents sorted by logical block (changed by the caller), its
/// tree blocks, and of those the leaves and the interior blocks, each with the lowest
/// logical block it maps (in tree order); `orig`, the extents as read, tells growth from
/// other edits.
pub(super) struct Map {
    pub exts: Vec<Ext>,
    pub tree: Vec<u64>,
    pub leaves: Vec<(u64, u64)>,
    pub interiors: Vec<(u64, u64)>,
    pub orig: Vec<Ext>,
}

impl Map {
    /// A mapping of `exts` that has no tree blocks yet.
    pub fn fresh(exts: Vec<Ext>) -> Self {
        Map {
            exts,
            tree: Vec::new(),
            leaves: Vec::new(),
            interiors: Vec::new(),
            orig: Vec::new(),
        }
    }
}

const CRC_AT: usize = TAIL_AT + 8;
pub(super) const MAX_LEN: u64 = (1 << 31) - 1;

fn bad(what: &'static str, lba: u64, at: usize) -> WriteError {
    WriteError::Device(Error::new(
        ErrorKind::Invalid,
        what,
        lba.saturating_mul(BLOCK_SIZE_U64)
            .saturating_add(u64::try_from(at).unwrap_or(0)),
    ))
}

pub(super) fn ext_of(bytes: &[u8]) -> Option<Ext> {
    let e = RawExtent::read_from_bytes(bytes.get(..16)?).ok()?;
    let len = e.len.get();
    Some(Ext {
        logical: u64::from(e.logical.get()),
        len: u64::from(len & !EXTENT_UNINIT),
        physical: e.physical.get(),
        uninit: len & EXTENT_UNINIT != 0,
    })
}

pub(super) fn raw_ext(e: &Ext) -> RawExtent {
    let mut r = RawExtent::read_from_bytes(&[0u8; 16][..]).unwrap_or_else(|_| zero_ext());
    r.logical.set(u32::try_from(e.logical).unwrap_or(u32::MAX));
    let len = u32::try_from(e.len).unwrap_or(0);
    r.len.set(if e.uninit { len | EXTENT_UNINIT } else { len });
    r.physical.set(e.physical);
    r
}

fn zero_ext() -> RawExtent {
    zerocopy::FromZeros::new_zeroed()
}

pub(super) fn header(entries: usize, max: u16, depth: u16) -> RawExtentHeader {
    let mut h: RawExtentHeader = zerocopy::FromZeros::new_zeroed();
    h.magic.set(EXTENT_MAGIC);
    h.entries.set(u16::try_from(entries).unwrap_or(0));
    h.max.set(max);
    h.depth.set(depth);
    h
}

pub(super) fn put_at(b: &mut [u8], at: usize, bytes: &[u8]) {
    if let Some(d) = b.get_mut(at..at.saturating_add(bytes.len())) {
        d.copy_from_slice(bytes);
    }
}

/// A tree block holding `h` then `entries`, with its tail sealed.
pub(super) fn tree_block(h: &RawExtentHeader, entries: &[&[u8]]) -> Block {
    let mut b: Block = [0; BLOCK_SIZE];
    put_at(&mut b, 0, h.as_bytes());
    let mut at = 12usize;
    for e in entries {
        put_at(&mut b, at, e);
        at = at.saturating_add(e.len());
    }
    put_at(&mut b, TAIL_AT, &TAIL_EXTENT);
    let crc = crc32c_skipping(&b, CRC_AT);
    put_at(&mut b, CRC_AT, &crc.to_le_bytes());
    b
}

impl<D: BlockDeviceMut> Writer<D> {
    /// Every extent of `inode`, sorted, and its tree blocks.
    pub(super) fn map_of(&self, t: &Txn, inode: &RawInode) -> Result<Map, WriteError> {
        let mut m = Map::fresh(Vec::new());
        let h = &inode.extent_header;
        let n = usize::from(h.entries.get().min(INLINE_SLOTS));
        let depth = h.depth.get();
        for i in 0..n {
            let slot = inode.slots.get(i.saturating_mul(16)..).unwrap_or(&[]);
            if depth == 0 {
                m.exts.extend(ext_of(slot));
            } else if let Some(ix) = slot
                .get(..12)
                .and_then(|s| RawExtentIndex::read_from_bytes(s).ok())
            {
                self.walk(t, ix.child.get(), depth.saturating_sub(1), &mut m)?;
            }
        }
        m.exts.sort_unstable_by_key(|e| e.logical);
        m.orig.clone_from(&m.exts);
        Ok(m)
    }

    fn walk(&self, t: &Txn, lba: u64, depth: u16, m: &mut Map) -> Result<(), WriteError> {
        if lba >= self.fs.superblock().total_blocks() || m.tree.len() > 4 + 4 * 339 {
            return Err(bad("extent_index.child", lba, 0));
        }
        let b = self.read(t, lba)?;
        let h = RawExtentHeader::read_from_bytes(b.get(..12).unwrap_or(&[]))
            .map_err(|_| bad("extent tree block", lba, 0))?;
        if h.magic.get() != EXTENT_MAGIC || h.depth.get() != depth {
            return Err(bad("extent_header.magic or depth", lba, 0));
        }
        if b.get(TAIL_AT..TAIL_AT + 4) != Some(&TAIL_EXTENT[..]) {
            return Err(bad("extent tail.magic", lba, TAIL_AT));
        }
        let stored = b
            .get(CRC_AT..CRC_AT + 8)
            .and_then(|s| <[u8; 8]>::try_from(s).ok())
            .map_or(0, u64::from_le_bytes);
        if stored != crc32c_skipping(&b, CRC_AT) {
            return Err(bad("extent tail.crc", lba, CRC_AT));
        }
        if m.tree.contains(&lba) {
            // Two entries naming one block: writing it back would use or free it twice.
            return Err(bad(
                "extent_index.child (a block the tree names twice)",
                lba,
                0,
            ));
        }
        m.tree.push(lba);
        let max = if depth == 0 { LEAF_MAX } else { INDEX_MAX };
        let n = usize::from(h.entries.get().min(max));
        let first = m.exts.len();
        if depth == 1 {
            let lo = (0..n)
                .filter_map(|i| {
                    let at = 12usize.saturating_add(i.saturating_mul(12));
                    b.get(at..at.saturating_add(4))
                        .and_then(|s| <[u8; 4]>::try_from(s).ok())
                        .map(u32::from_le_bytes)
                })
                .min();
            if let Some(lo) = lo {
                m.interiors.push((u64::from(lo), lba));
            }
        }
        for i in 0..n {
            if depth == 0 {
                let at = 12usize.saturating_add(i.saturating_mul(16));
                m.exts.extend(b.get(at..).and_then(ext_of));
            } else {
                let at = 12usize.saturating_add(i.saturating_mul(12));
                if let Some(ix) = b
                    .get(at..at.saturating_add(12))
                    .and_then(|s| RawExtentIndex::read_from_bytes(s).ok())
                {
                    self.walk(t, ix.child.get(), depth.saturating_sub(1), m)?;
                }
            }
        }
        if depth == 0 {
            if let Some(lo) = m
                .exts
                .get(first..)
                .and_then(|e| e.iter().map(|e| e.logical).min())
            {
                m.leaves.push((lo, lba));
            }
        }
        Ok(())
    }

    /// Writes `m` back into `inode` (and tree blocks). Growth (extents added after every
    /// block the file maps) edits one array of the tree ([`Writer::grow`]); any other
    /// edit, or growth of a tree with no room on its right edge, lays the extents out
    /// again, merging adjacent ones: tree blocks no longer needed are freed, new ones
    /// allocated near the file's end. `max_depth`: 1 for directories, 2 for files.
    pub(super) fn store_map(
        &mut self,
        t: &mut Txn,
        inode: &mut RawInode,
        mut m: Map,
        max_depth: u16,
    ) -> Result<(), WriteError> {
        if let Some(added) = super::grow::growth(&m.orig, &m.exts) {
            if self.grow(t, inode, &m, added, max_depth)? {
                return Ok(());
            }
        }
        m.exts.sort_unstable_by_key(|e| e.logical);
        let mut exts: Vec<Ext> = Vec::with_capacity(m.exts.len());
        for e in m.exts {
            if let Some(last) = exts.last_mut() {
                if last.end() == e.logical
                    && last.physical.saturating_add(last.len) == e.physical
                    && last.uninit == e.uninit
                    && last.len.saturating_add(e.len) <= MAX_LEN
                    && self.group_of(last.physical) == self.group_of(e.physical)
                {
                    last.len = last.len.saturating_add(e.len);
                    continue;
                }
            }
            exts.push(e);
        }
        if exts
            .iter()
            .any(|e| e.end() > u64::from(u32::MAX) || e.len > MAX_LEN)
        {
            return Err(Errno::EFBIG.into());
        }
        let n = exts.len();
        let inline = usize::from(INLINE_SLOTS);
        let index = usize::from(INDEX_MAX);
        // The leaves: each a range of `exts` and the old leaf block it stays in, if any.
        // Kept where they are when that shape is allowed, else packed full.
        let shape = |leaves: usize| -> Option<(u16, usize)> {
            let s = if n <= inline {
                (0u16, 0usize)
            } else if leaves <= inline {
                (1, 0)
            } else {
                (2, leaves.div_ceil(index))
            };
            (s.0 <= max_depth && s.1 <= inline).then_some(s)
        };
        let mut leaves = if n <= inline {
            Vec::new()
        } else {
            let mut l = in_place(&m.leaves, &exts).unwrap_or_default();
            // Splits never undo themselves: past the most leaves the tree can hold,
            // neighbours that fit one leaf together are merged first (a merge rewrites
            // one leaf), so that a file shaped by edits is not repacked whole.
            let cap = if max_depth <= 1 {
                inline
            } else {
                inline.saturating_mul(index)
            };
            merge_to(&mut l, cap);
            l
        };
        let (depth, interiors) = match shape(leaves.len()) {
            Some(s) if n <= inline || !leaves.is_empty() => s,
            _ => {
                leaves = packed(n);
                shape(leaves.len()).ok_or(if max_depth == 1 {
                    Errno::ENOSPC
                } else {
                    Errno::EFBIG
                })?
            }
        };
        // Interior blocks (depth 2) keep their leaves: a leaf goes to the interior block
        // whose range holds its first extent, as an extent goes to its leaf; spread
        // evenly instead when that needs more than the root holds.
        let groups = if depth == 2 {
            let firsts: Vec<u64> = leaves
                .iter()
                .map(|(r, _)| exts.get(r.start).map_or(0, |e| e.logical))
                .collect();
            in_place_by(&m.interiors, &firsts, usize::from(INDEX_MAX))
                .filter(|g| g.len() <= inline)
                .unwrap_or_else(|| spread(leaves.len(), interiors))
        } else {
            Vec::new()
        };
        // Tree blocks: the leaves and interior blocks that stay keep theirs; other
        // leaves take the file's other old leaf blocks, interior blocks its old interior
        // blocks, then either the other kind, then new blocks near `hint`; old blocks
        // left over are freed.
        let kept = |b: &u64| {
            leaves.iter().any(|l| l.1 == Some(*b)) || groups.iter().any(|g| g.1 == Some(*b))
        };
        let was_leaf = |b: &u64| m.leaves.iter().any(|l| l.1 == *b);
        let mut spare_leaves: Vec<u64> = m
            .tree
            .iter()
            .copied()
            .filter(|b| was_leaf(b) && !kept(b))
            .collect();
        let mut spare_interiors: Vec<u64> = m
            .tree
            .iter()
            .copied()
            .filter(|b| !was_leaf(b) && !kept(b))
            .collect();
        spare_leaves.reverse();
        spare_interiors.reverse();
        let hint = exts.last().map(|e| e.physical.saturating_add(e.len));
        let mut take = |w: &mut Self, t: &mut Txn, interior: bool| -> Result<u64, WriteError> {
            let (first, second) = if interior {
                (&mut spare_interiors, &mut spare_leaves)
            } else {
                (&mut spare_leaves, &mut spare_interiors)
            };
            if let Some(b) = first.pop().or_else(|| second.pop()) {
                return Ok(b);
            }
            let (lba, _) = w.alloc_run(t, hint, 1)?;
            t.fresh.insert(lba);
            Ok(lba)
        };
        let raws: Vec<RawExtent> = exts.iter().map(raw_ext).collect();
        let mut leaf_ix: Vec<(u64, u64)> = Vec::with_capacity(leaves.len());
        for (range, old) in &leaves {
            let lba = match old {
                Some(b) => *b,
                None => take(self, t, false)?,
            };
            let chunk = raws.get(range.clone()).unwrap_or(&[]);
            let entries: Vec<&[u8]> = chunk.iter().map(|r| r.as_bytes()).collect();
            let b = tree_block(&header(chunk.len(), LEAF_MAX, 0), &entries);
            self.put_tree(t, lba, b)?;
            let first = chunk.first().map_or(0, |r| u64::from(r.logical.get()));
            leaf_ix.push((first, lba));
        }
        let mut root: Vec<(u64, u64)> = Vec::new(); // (logical, child) of the root's entries
        if depth == 1 {
            root = leaf_ix;
        } else if depth == 2 {
            for (range, old) in &groups {
                let chunk = leaf_ix.get(range.clone()).unwrap_or(&[]);
                let lba = match old {
                    Some(b) => *b,
                    None => take(self, t, true)?,
                };
                let ixs: Vec<RawExtentIndex> = chunk
                    .iter()
                    .map(|(l, c)| {
                        let mut ix: RawExtentIndex = zerocopy::FromZeros::new_zeroed();
                        ix.logical.set(u32::try_from(*l).unwrap_or(u32::MAX));
                        ix.child.set(*c);
                        ix
                    })
                    .collect();
                let entries: Vec<&[u8]> = ixs.iter().map(|r| r.as_bytes()).collect();
                let b = tree_block(&header(chunk.len(), INDEX_MAX, 1), &entries);
                self.put_tree(t, lba, b)?;
                root.push((chunk.first().map_or(0, |c| c.0), lba));
            }
        }
        for old in spare_leaves.into_iter().chain(spare_interiors) {
            self.free_run(t, old, 1)?;
        }
        inode.extent_header = header(if depth == 0 { n } else { root.len() }, INLINE_SLOTS, depth);
        inode.slots = [0; 64];
        if depth == 0 {
            for (i, r) in raws.iter().enumerate() {
                put_at(&mut inode.slots, i.saturating_mul(16), r.as_bytes());
            }
        } else {
            for (i, (l, c)) in root.iter().enumerate() {
                let mut ix: RawExtentIndex = zerocopy::FromZeros::new_zeroed();
                ix.logical.set(u32::try_from(*l).unwrap_or(u32::MAX));
                ix.child.set(*c);
                put_at(&mut inode.slots, i.saturating_mul(16), ix.as_bytes());
            }
        }
        Ok(())
    }

    /// A tree block's new contents, journaled only when its entries change: the same
    /// entries in another order (an array written unordered, section 9) keep the block.
    fn put_tree(&self, t: &mut Txn, lba: u64, b: Block) -> Result<(), WriteError> {
        if t.fresh.contains(&lba) || !same_entries(&self.read(t, lba)?, &b) {
            Self::put(t, lba, b);
        }
        Ok(())
    }
}

/// Whether tree blocks `a` and `b` hold the same header and the same entries, in any
/// order.
fn same_entries(a: &Block, b: &Block) -> bool {
    if a == b {
        return true;
    }
    let (Some(ha), Some(hb)) = (a.get(..12), b.get(..12)) else {
        return false;
    };
    if ha != hb {
        return false;
    }
    let Ok(h) = RawExtentHeader::read_from_bytes(ha) else {
        return false;
    };
    let stride = if h.depth.get() == 0 { 16 } else { 12 };
    let end = usize::from(h.entries.get())
        .saturating_mul(stride)
        .saturating_add(12);
    let entries = |x: &'_ Block| -> Option<Vec<Vec<u8>>> {
        let mut v: Vec<Vec<u8>> = x.get(12..end)?.chunks(stride).map(<[u8]>::to_vec).collect();
        v.sort_unstable();
        Some(v)
    };
    entries(a).is_some() && entries(a) == entries(b)
}

/// `n` leaves spread evenly over `parts` new interior blocks.
fn spread(n: usize, parts: usize) -> Vec<(Range<usize>, Option<u64>)> {
    let at = |k: usize| n.saturating_mul(k).checked_div(parts).unwrap_or(0);
    (0..parts)
        .map(|k| (at(k)..at(k.saturating_add(1)), None))
        .collect()
}

/// `n` extents packed into full leaves, all in new blocks.
fn packed(n: usize) -> Vec<(Range<usize>, Option<u64>)> {
    let leaf = usize::from(LEAF_MAX);
    (0..n.div_ceil(leaf))
        .map(|k| {
            let lo = k.saturating_mul(leaf);
            (lo..lo.saturating_add(leaf).min(n), None)
        })
        .collect()
}

/// Merges neighbouring leaves of `leaves` (ranges that follow one another), the pair
/// with the fewest extents together first, while there are more than `cap` leaves and
/// some pair fits one leaf. The merged leaf keeps the first of the two blocks it had.
fn merge_to(leaves: &mut Vec<(Range<usize>, Option<u64>)>, cap: usize) {
    let leaf = usize::from(LEAF_MAX);
    while leaves.len() > cap {
        let best = leaves
            .windows(2)
            .enumerate()
            .filter_map(|(i, w)| match w {
                [a, b] => Some((i, a.0.len().saturating_add(b.0.len()))),
                _ => None,
            })
            .filter(|(_, n)| *n <= leaf)
            .min_by_key(|(_, n)| *n);
        let Some((i, _)) = best else { return };
        let Some((b, b_lba)) =
            (i.saturating_add(1) < leaves.len()).then(|| leaves.remove(i.saturating_add(1)))
        else {
            return;
        };
        if let Some(a) = leaves.get_mut(i) {
            a.0 = a.0.start..b.end;
            a.1 = a.1.or(b_lba);
        }
    }
}

/// `exts` (sorted) laid out in the old leaves `old` ((lowest logical, block) each): an
/// extent goes to the last leaf whose lowest logical block is at or before its own (the
/// first leaf takes any before them all). A leaf given more than it holds splits into
/// even parts, the first keeping its block (the last leaf fills parts in order, so
/// appending leaves full leaves behind); a leaf given none is dropped (its block left
/// for another leaf, or freed). `None` when there are no old leaves or two of them
/// begin at the same block.
fn in_place(old: &[(u64, u64)], exts: &[Ext]) -> Option<Vec<(Range<usize>, Option<u64>)>> {
    let keys: Vec<u64> = exts.iter().map(|e| e.logical).collect();
    in_place_by(old, &keys, usize::from(LEAF_MAX))
}

/// [`in_place`] for any entries: `keys` (sorted) laid out in the old blocks `old`, each
/// holding at most `leaf` entries.
fn in_place_by(
    old: &[(u64, u64)],
    keys: &[u64],
    leaf: usize,
) -> Option<Vec<(Range<usize>, Option<u64>)>> {
    let mut old = old.to_vec();
    old.sort_unstable_by_key(|l| l.0);
    let count = old.len();
    old.dedup_by_key(|l| l.0);
    if old.is_empty() || old.len() != count {
        return None;
    }
    let n = keys.len();
    let mut out = Vec::with_capacity(old.len());
    let mut start = 0usize;
    for (i, (_, lba)) in old.iter().enumerate() {
        let last = i.saturating_add(1) == old.len();
        let end = match old.get(i.saturating_add(1)) {
            Some((next, _)) => start.saturating_add(
                keys.get(start..)
                    .unwrap_or(&[])
                    .partition_point(|k| k < next),
            ),
            None => n,
        };
        let k = end.saturating_sub(start);
        let parts = k.div_ceil(leaf);
        for p in 0..parts {
            let (lo, hi) = if last {
                let lo = start.saturating_add(p.saturating_mul(leaf));
                (lo, lo.saturating_add(leaf).min(end))
            } else {
                let at = |p: usize| {
                    start.saturating_add(k.saturating_mul(p).checked_div(parts).unwrap_or(0))
                };
                (at(p), at(p.saturating_add(1)))
            };
            out.push((lo..hi, (p == 0).then_some(*lba)));
        }
        start = end;
    }
    Some(out)
}

/// The physical block of `logical` in `exts`, if mapped (and initialized).
pub(super) fn lookup(exts: &[Ext], logical: u64) -> Option<(u64, bool)> {
    exts.iter()
        .find(|e| logical >= e.logical && logical < e.end())
        .map(|e| {
            (
                e.physical.saturating_add(logical.saturating_sub(e.logical)),
                e.uninit,
            )
        })
}

/// Makes logical block `logical` of an uninitialized extent of `exts` an initialized
/// extent of its own, the rest of the extent staying uninitialized on either side
/// ([`Writer::store_map`] merges it with initialized neighbours). Nothing changes when
/// the block is not in an uninitialized extent.
pub(super) fn initialize(exts: &mut Vec<Ext>, logical: u64) {
    let Some(i) = exts
        .iter()
        .position(|e| e.uninit && logical >= e.logical && logical < e.end())
    else {
        return;
    };
    let e = exts.swap_remove(i);
    let before = logical.saturating_sub(e.logical);
    let after = e.end().saturating_sub(logical).saturating_sub(1);
    if before > 0 {
        exts.push(Ext { len: before, ..e });
    }
    exts.push(Ext {
        logical,
        len: 1,
        physical: e.physical.saturating_add(before),
        uninit: false,
    });
    if after > 0 {
        exts.push(Ext {
            logical: logical.saturating_add(1),
            len: after,
            physical: e.physical.saturating_add(before).saturating_add(1),
            uninit: true,
        });
    }
}

/// Cuts every mapping at or past logical block `from`; returns the physical runs cut.
pub(super) fn cut(exts: &mut Vec<Ext>, from: u64) -> Vec<(u64, u64)> {
    let mut freed = Vec::new();
    let mut kept = Vec::with_capacity(exts.len());
    for e in exts.drain(..) {
        if e.end() <= from {
            kept.push(e);
        } else if e.logical >= from {
            freed.push((e.physical, e.len));
        } else {
            let keep = from.saturating_sub(e.logical);
            freed.push((e.physical.saturating_add(keep), e.len.saturating_sub(keep)));
            kept.push(Ext { len: keep, ..e });
        }
    }
    *exts = kept;
    freed
}

#[cfg(test)]
#[allow(clippy::restriction, reason = "tests fail by panicking")]
mod tests {
    use super::*;

    /// Leaves of `sizes` extents one after the other, in blocks 1, 2, …
    fn leaves(sizes: &[usize]) -> Vec<(Range<usize>, Option<u64>)> {
        let mut at = 0;
        sizes
            .iter()
            .enumerate()
            .map(|(i, n)| {
                at += n;
                (at - n..at, Some(i as u64 + 1))
            })
            .collect()
    }

    #[test]
    fn leaves_past_the_cap_merge_the_smallest_neighbours_that_fit_one_leaf() {
        // 60 + 70 is the one pair that fits; then none does, and 4 leaves stay.
        let mut l = leaves(&[200, 60, 70, 254, 10]);
        merge_to(&mut l, 3);
        assert_eq!(
            l,
            alloc::vec![
                (0..200, Some(1)),
                (200..330, Some(2)),
                (330..584, Some(4)),
                (584..594, Some(5)),
            ]
        );
        // Two merges: 10 + 20, then 30 + 30.
        let mut l = leaves(&[10, 20, 30, 40]);
        merge_to(&mut l, 2);
        assert_eq!(l, alloc::vec![(0..60, Some(1)), (60..100, Some(4))]);
        // Under the cap nothing changes; a new part merged keeps its neighbour's block.
        let mut l = leaves(&[10, 20]);
        merge_to(&mut l, 2);
        assert_eq!(l, leaves(&[10, 20]));
        let mut l = alloc::vec![(0..10, None), (10..20, Some(7))];
        merge_to(&mut l, 1);
        assert_eq!(l, alloc::vec![(0..20, Some(7))]);
    }
}
