//! Growing a file's extent tree (`docs/cetrafs.md` section 9: arrays are append-only and
//! unordered, so growing a file edits a single block). New extents after every block the
//! file maps are appended to one array of the tree's right edge: the leaf that holds the
//! file's last extent when it has room, else the block above it, which gains the entries
//! of new leaves (written whole, `F_FRESH`), else the one above that. The other arrays
//! keep their bytes, whatever order their entries are in.

use alloc::vec::Vec;

use tet_core::block::{Block, BlockDeviceMut};
use tet_core::cetrafs::raw::{RawExtentHeader, RawExtentIndex, RawInode};
use tet_core::cetrafs::{INDEX_MAX, INLINE_SLOTS, LEAF_MAX, TAIL_AT};
use tet_core::checksum::crc32c_skipping;
use zerocopy::{FromBytes, FromZeros, IntoBytes};

use super::tree::{ext_of, header, put_at, raw_ext, tree_block, Ext, Map, MAX_LEN};
use super::txn::Txn;
use super::{Errno, WriteError, Writer};

/// Bytes of an extent, of an index entry, and of an inline slot.
const EXT: usize = 16;
const IX: usize = 12;
const SLOT: usize = 16;
const CRC_AT: usize = TAIL_AT + 8;

/// The extents `exts` adds to `orig` when that is growth: `orig` kept as it is and every
/// added extent after each block `orig` maps. `None` for any other edit.
pub(super) fn growth(orig: &[Ext], exts: &[Ext]) -> Option<Vec<Ext>> {
    let mut new = exts.to_vec();
    new.sort_unstable_by_key(|e| e.logical);
    if new.get(..orig.len())? != orig {
        return None;
    }
    let end = orig.iter().map(Ext::end).max().unwrap_or(0);
    let added = new.split_off(orig.len());
    added.iter().all(|e| e.logical >= end).then_some(added)
}

/// The `logical` of entry `i` of an array of `stride`-byte entries (extents and index
/// entries both begin with it).
fn logical_at(entries: &[u8], i: usize, stride: usize) -> Option<u32> {
    let at = i.checked_mul(stride)?;
    let b = entries.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes(b.try_into().ok()?))
}

/// The entry with the greatest `logical` among the first `n` (arrays are unordered).
fn last_entry(entries: &[u8], n: usize, stride: usize) -> Option<usize> {
    (0..n).max_by_key(|i| logical_at(entries, *i, stride))
}

/// The child of index entry `i`.
fn child_at(entries: &[u8], i: usize, stride: usize) -> Option<u64> {
    let at = i.checked_mul(stride)?;
    let ix = RawExtentIndex::read_from_bytes(entries.get(at..at.checked_add(IX)?)?).ok()?;
    Some(ix.child.get())
}

/// An index entry for `child`, whose lowest logical block is `logical`.
fn index(logical: u64, child: u64) -> RawExtentIndex {
    let mut ix = RawExtentIndex::new_zeroed();
    ix.logical.set(u32::try_from(logical).unwrap_or(u32::MAX));
    ix.child.set(child);
    ix
}

/// The header of tree block `b`.
fn header_of(b: &Block) -> Option<RawExtentHeader> {
    RawExtentHeader::read_from_bytes(b.get(..12)?).ok()
}

/// Tree block `b` with its header's `entries` set to `n` and its tail's crc sealed.
fn seal(b: &mut Block, n: usize) {
    if let Some(mut h) = header_of(b) {
        h.entries.set(u16::try_from(n).unwrap_or(0));
        put_at(b, 0, h.as_bytes());
    }
    put_at(b, CRC_AT, &[0; 8]);
    let crc = crc32c_skipping(b, CRC_AT);
    put_at(b, CRC_AT, &crc.to_le_bytes());
}

/// Whether `new` entries fit an array of `max` that holds `n`, the first of them taking
/// the place of an entry it lengthens when `lengthen`.
fn fits(n: usize, new: usize, lengthen: bool, max: usize) -> bool {
    n.saturating_add(new).saturating_sub(usize::from(lengthen)) <= max
}

impl<D: BlockDeviceMut> Writer<D> {
    /// `b` appended to `a` when they are one run in one block group (they merge).
    fn lengthened(&self, a: &Ext, b: &Ext) -> Option<Ext> {
        (a.end() == b.logical
            && a.physical.saturating_add(a.len) == b.physical
            && a.uninit == b.uninit
            && a.len.saturating_add(b.len) <= MAX_LEN
            && self.group_of(a.physical) == self.group_of(b.physical))
        .then_some(Ext {
            len: a.len.saturating_add(b.len),
            ..*a
        })
    }

    /// Grows `inode`'s tree (read into `m`) by `added` (sorted, after every block it
    /// maps), editing one of its arrays. `false` when the tree has no room on its right
    /// edge (the caller then repacks it); nothing is changed then.
    pub(super) fn grow(
        &mut self,
        t: &mut Txn,
        inode: &mut RawInode,
        m: &Map,
        added: Vec<Ext>,
        max_depth: u16,
    ) -> Result<bool, WriteError> {
        // The new extents merged where they follow one another.
        let mut new: Vec<Ext> = Vec::with_capacity(added.len());
        for e in added {
            match new
                .last_mut()
                .and_then(|l| self.lengthened(l, &e).map(|x| (l, x)))
            {
                Some((l, x)) => *l = x,
                None => new.push(e),
            }
        }
        if new
            .iter()
            .any(|e| e.end() > u64::from(u32::MAX) || e.len > MAX_LEN)
        {
            return Err(Errno::EFBIG.into());
        }
        let Some(first) = new.first().copied() else {
            return Ok(true);
        };
        let last = m.orig.iter().max_by_key(|e| e.logical).copied();
        let joined = last.and_then(|l| self.lengthened(&l, &first).map(|j| (l, j)));
        let h = inode.extent_header;
        let depth = h.depth.get();
        let n = usize::from(h.entries.get().min(INLINE_SLOTS));
        let inline = usize::from(INLINE_SLOTS);
        if depth == 0 {
            let slots = &inode.slots;
            let exts: Vec<Ext> = (0..n)
                .filter_map(|i| slots.get(i.saturating_mul(SLOT)..).and_then(ext_of))
                .collect();
            let at = joined.and_then(|(l, _)| exts.iter().position(|e| *e == l));
            if fits(n, new.len(), at.is_some(), inline) {
                let mut slots = inode.slots;
                let rest = match (at, joined) {
                    (Some(i), Some((_, j))) => {
                        put_at(&mut slots, i.saturating_mul(SLOT), raw_ext(&j).as_bytes());
                        new.get(1..).unwrap_or(&[])
                    }
                    _ => &new[..],
                };
                let mut k = n;
                for e in rest {
                    put_at(&mut slots, k.saturating_mul(SLOT), raw_ext(e).as_bytes());
                    k = k.saturating_add(1);
                }
                inode.slots = slots;
                inode.extent_header = header(k, INLINE_SLOTS, 0);
                return Ok(true);
            }
            // The root full: its extents (the last lengthened) and the new ones move to
            // new leaves, and the root indexes them; only the inode changes.
            let mut all = exts;
            match (at, joined) {
                (Some(i), Some((_, j))) => {
                    if let Some(e) = all.get_mut(i) {
                        *e = j;
                    }
                    all.extend_from_slice(new.get(1..).unwrap_or(&[]));
                }
                _ => all.extend_from_slice(&new),
            }
            return self.new_root(t, inode, &all, max_depth);
        }
        // The right edge: the root's last entry, at depth 2 its interior block's last
        // entry: the leaf that holds the file's last extent.
        let mine = |lba: u64| m.tree.contains(&lba).then_some(lba);
        let Some(c1) = last_entry(&inode.slots, n, SLOT)
            .and_then(|i| child_at(&inode.slots, i, SLOT))
            .and_then(mine)
        else {
            return Ok(false);
        };
        let mut interior: Option<(u64, Block, usize)> = None;
        let leaf_lba = if depth == 2 {
            let b = self.read(t, c1)?;
            let p = header_of(&b).map_or(0, |h| usize::from(h.entries.get().min(INDEX_MAX)));
            let ents = b.get(12..).unwrap_or(&[]);
            let Some(c2) = last_entry(ents, p, IX)
                .and_then(|i| child_at(ents, i, IX))
                .and_then(mine)
            else {
                return Ok(false);
            };
            interior = Some((c1, b, p));
            c2
        } else {
            c1
        };
        let mut leaf = self.read(t, leaf_lba)?;
        let q = header_of(&leaf).map_or(0, |h| usize::from(h.entries.get().min(LEAF_MAX)));
        let at = joined.and_then(|(l, _)| {
            (0..q).find(|i| {
                leaf.get(12usize.saturating_add(i.saturating_mul(EXT))..)
                    .and_then(ext_of)
                    == Some(l)
            })
        });
        if fits(q, new.len(), at.is_some(), usize::from(LEAF_MAX)) {
            // 1. The leaf has room: the one block edited.
            let rest = match (at, joined) {
                (Some(i), Some((_, j))) => {
                    put_at(
                        &mut leaf,
                        12usize.saturating_add(i.saturating_mul(EXT)),
                        raw_ext(&j).as_bytes(),
                    );
                    new.get(1..).unwrap_or(&[])
                }
                _ => &new[..],
            };
            let mut k = q;
            for e in rest {
                put_at(
                    &mut leaf,
                    12usize.saturating_add(k.saturating_mul(EXT)),
                    raw_ext(e).as_bytes(),
                );
                k = k.saturating_add(1);
            }
            seal(&mut leaf, k);
            Self::put(t, leaf_lba, leaf);
            return Ok(true);
        }
        // 2. New leaves for the new extents, indexed by the block above the leaf.
        let leaves = new.len().div_ceil(usize::from(LEAF_MAX));
        let index_max = usize::from(INDEX_MAX);
        match interior {
            None => {
                if fits(n, leaves, false, inline) {
                    let ix = self.new_leaves(t, &new)?;
                    let mut slots = inode.slots;
                    for (k, (l, c)) in ix.iter().enumerate() {
                        let at = n.saturating_add(k).saturating_mul(SLOT);
                        put_at(&mut slots, at, index(*l, *c).as_bytes());
                    }
                    inode.slots = slots;
                    inode.extent_header = header(n.saturating_add(ix.len()), INLINE_SLOTS, 1);
                    return Ok(true);
                }
                // 3. The root full: its entries and the new leaves' go to new interior
                //    blocks, which the root indexes (only the inode changes).
                if max_depth < 2 {
                    return Ok(false);
                }
                let old: Vec<(u64, u64)> = (0..n)
                    .filter_map(|i| {
                        Some((
                            u64::from(logical_at(&inode.slots, i, SLOT)?),
                            child_at(&inode.slots, i, SLOT)?,
                        ))
                    })
                    .collect();
                if old.len().saturating_add(leaves).div_ceil(index_max) > inline {
                    return Ok(false);
                }
                let ix = self.new_leaves(t, &new)?;
                let mut all = old;
                all.extend(ix);
                self.new_interiors(t, inode, &[], &all)?;
                Ok(true)
            }
            Some((ilba, mut ib, p)) => {
                if fits(p, leaves, false, index_max) {
                    let ix = self.new_leaves(t, &new)?;
                    let mut k = p;
                    for (l, c) in &ix {
                        let at = 12usize.saturating_add(k.saturating_mul(IX));
                        put_at(&mut ib, at, index(*l, *c).as_bytes());
                        k = k.saturating_add(1);
                    }
                    seal(&mut ib, k);
                    Self::put(t, ilba, ib);
                    return Ok(true);
                }
                // 3. The interior block full: new interior blocks for the new leaves,
                //    appended to the root.
                if n.saturating_add(leaves.div_ceil(index_max)) > inline {
                    return Ok(false);
                }
                let ix = self.new_leaves(t, &new)?;
                let old: Vec<(u64, u64)> = (0..n)
                    .filter_map(|i| {
                        Some((
                            u64::from(logical_at(&inode.slots, i, SLOT)?),
                            child_at(&inode.slots, i, SLOT)?,
                        ))
                    })
                    .collect();
                self.new_interiors(t, inode, &old, &ix)?;
                Ok(true)
            }
        }
    }

    /// A depth 0 root full: `all` its extents and the new ones, packed into new leaves
    /// under the root (or under new interior blocks when more than 4 leaves).
    fn new_root(
        &mut self,
        t: &mut Txn,
        inode: &mut RawInode,
        all: &[Ext],
        max_depth: u16,
    ) -> Result<bool, WriteError> {
        let inline = usize::from(INLINE_SLOTS);
        let leaves = all.len().div_ceil(usize::from(LEAF_MAX));
        if leaves > inline && (max_depth < 2 || leaves.div_ceil(usize::from(INDEX_MAX)) > inline) {
            return Ok(false);
        }
        let ix = self.new_leaves(t, all)?;
        if ix.len() <= inline {
            inode.slots = [0; 64];
            for (k, (l, c)) in ix.iter().enumerate() {
                put_at(
                    &mut inode.slots,
                    k.saturating_mul(SLOT),
                    index(*l, *c).as_bytes(),
                );
            }
            inode.extent_header = header(ix.len(), INLINE_SLOTS, 1);
            return Ok(true);
        }
        self.new_interiors(t, inode, &[], &ix)?;
        Ok(true)
    }

    /// `exts` in new leaves, full in order; their index entries.
    fn new_leaves(&mut self, t: &mut Txn, exts: &[Ext]) -> Result<Vec<(u64, u64)>, WriteError> {
        let hint = exts.last().map(|e| e.physical.saturating_add(e.len));
        let mut out = Vec::new();
        for chunk in exts.chunks(usize::from(LEAF_MAX)) {
            let raws: Vec<_> = chunk.iter().map(raw_ext).collect();
            let entries: Vec<&[u8]> = raws.iter().map(|r| r.as_bytes()).collect();
            let lba = self.new_tree_block(t, hint)?;
            Self::put(
                t,
                lba,
                tree_block(&header(chunk.len(), LEAF_MAX, 0), &entries),
            );
            let lo = chunk.iter().map(|e| e.logical).min().unwrap_or(0);
            out.push((lo, lba));
        }
        Ok(out)
    }

    /// The root at depth 2: its entries `kept` (interior blocks that stay) then new
    /// interior blocks holding the index entries `ix`, full in order.
    fn new_interiors(
        &mut self,
        t: &mut Txn,
        inode: &mut RawInode,
        kept: &[(u64, u64)],
        ix: &[(u64, u64)],
    ) -> Result<(), WriteError> {
        let hint = ix.last().map(|(_, c)| c.saturating_add(1));
        let mut root: Vec<(u64, u64)> = kept.to_vec();
        for chunk in ix.chunks(usize::from(INDEX_MAX)) {
            let raws: Vec<RawExtentIndex> = chunk.iter().map(|(l, c)| index(*l, *c)).collect();
            let entries: Vec<&[u8]> = raws.iter().map(|r| r.as_bytes()).collect();
            let lba = self.new_tree_block(t, hint)?;
            Self::put(
                t,
                lba,
                tree_block(&header(chunk.len(), INDEX_MAX, 1), &entries),
            );
            root.push((chunk.iter().map(|c| c.0).min().unwrap_or(0), lba));
        }
        inode.slots = [0; 64];
        for (k, (l, c)) in root.iter().enumerate() {
            put_at(
                &mut inode.slots,
                k.saturating_mul(SLOT),
                index(*l, *c).as_bytes(),
            );
        }
        inode.extent_header = header(root.len(), INLINE_SLOTS, 2);
        Ok(())
    }

    /// A newly allocated tree block (`F_FRESH`) near `hint`.
    fn new_tree_block(&mut self, t: &mut Txn, hint: Option<u64>) -> Result<u64, WriteError> {
        let (lba, _) = self.alloc_run(t, hint, 1)?;
        t.fresh.insert(lba);
        Ok(lba)
    }
}

#[cfg(test)]
#[allow(clippy::restriction, reason = "tests fail by panicking")]
mod tests {
    use alloc::vec;

    use tet_core::block::{MemDevice, MemDeviceMut, BLOCK_SIZE};
    use tet_core::cetrafs::check::Severity;
    use tet_core::cetrafs::{Buffers, Fs};

    use super::*;
    use crate::cetrafs::fsck;
    use crate::cetrafs::mkfs::{ImageBuilder, Params};
    use crate::cetrafs::write::JoinOptions;

    const B: usize = BLOCK_SIZE;

    fn errors(img: &[u8]) -> Vec<alloc::string::String> {
        let (f, _) = fsck::findings(MemDevice::new(img), &fsck::Options::default());
        f.iter()
            .filter(|f| f.severity() == Severity::Error)
            .map(|f| alloc::format!("{:?} {}", f.code, f.error))
            .collect()
    }

    /// An image holding `/f`, whose tree is built by hand at depth 2: `interiors`
    /// interior blocks, each full (339 leaves), every leaf holding one extent except the
    /// very last, which is full (254); extent `k` maps logical block `2k`, whose first
    /// byte is `k % 251 + 1`. The image, the inode, and the number of extents.
    fn full_edge(interiors: usize) -> (Vec<u8>, u64, usize) {
        let leaves = interiors * 339;
        let n = leaves - 1 + 254;
        let mut img = ImageBuilder::new(Params {
            size_bytes: 48 << 20,
            bg_size_blocks: 4096,
            inodes: 64,
            nodes: 1,
            journal_blocks: 2 * (n + 400) as u64 + 1,
            ..Params::default()
        })
        .build()
        .unwrap();
        let f = {
            let dev = MemDeviceMut::new(&mut img);
            let opts = JoinOptions {
                node_id: 1,
                hostname: b"t".to_vec(),
                now_secs: 0,
            };
            let mut w = Writer::join(&dev, &opts).unwrap();
            let f = w.create(1, b"f", 0o644, 0, 0).unwrap();
            w.run(|w, t| {
                let mut r = w.inode(t, f)?;
                let mut exts = Vec::new();
                for k in 0..n {
                    let (p, _) = w.alloc_run(t, None, 1)?;
                    let mut b: Block = [0; B];
                    b[0] = (k % 251) as u8 + 1;
                    Writer::<&MemDeviceMut<'_>>::put_data(t, p, b);
                    exts.push(Ext {
                        logical: 2 * k as u64,
                        len: 1,
                        physical: p,
                        uninit: false,
                    });
                }
                let mut ix = Vec::new();
                for e in &exts[..leaves - 1] {
                    ix.extend(w.new_leaves(t, core::slice::from_ref(e))?);
                }
                ix.extend(w.new_leaves(t, &exts[leaves - 1..])?);
                w.new_interiors(t, &mut r, &[], &ix)?;
                r.blocks.set(n as u64);
                r.size.set((2 * n as u64 - 1) * B as u64);
                w.put_inode(t, f, r);
                Ok(())
            })
            .unwrap();
            w.leave().unwrap();
            f
        };
        assert_eq!(errors(&img), Vec::<alloc::string::String>::new());
        (img, f, n)
    }

    /// The file's first bytes of each even block, its depth and root entries.
    fn read_back(img: &[u8], f: u64) -> (Vec<u8>, u16, u16) {
        let mut bufs = Buffers::new();
        let fs = Fs::open(MemDevice::new(img), &mut bufs.data).unwrap();
        let ino = fs.inode(f, &mut bufs.data).unwrap();
        let mut out = vec![0u8; ino.size() as usize];
        fs.read(&ino, 0, &mut out, &mut bufs).unwrap();
        let firsts = out.iter().step_by(2 * B).copied().collect();
        (firsts, ino.depth(), ino.raw().extent_header.entries.get())
    }

    #[test]
    fn growth_past_a_full_interior_block_adds_one_to_the_root() {
        // Step 3 at depth 2: the last leaf and its interior block full, the root not:
        // a new leaf under a new interior block, and the root gains its entry; no
        // block of the tree as it was is edited (the inode is the one array).
        let (mut img, f, n) = full_edge(1);
        let before = img.clone();
        let tree = {
            let dev = MemDeviceMut::new(&mut img);
            let opts = JoinOptions {
                node_id: 1,
                hostname: b"t".to_vec(),
                now_secs: 0,
            };
            let mut w = Writer::join(&dev, &opts).unwrap();
            let t = Txn::default();
            let tree = w.map_of(&t, &w.inode(&t, f).unwrap()).unwrap().tree;
            assert_eq!(tree.len(), 340);
            w.write(f, 2 * n as u64 * B as u64, &[0xEE]).unwrap();
            w.write(f, (2 * n as u64 + 2) * B as u64, &[0xEF]).unwrap();
            w.leave().unwrap();
            tree
        };
        assert_eq!(errors(&img), Vec::<alloc::string::String>::new());
        let (firsts, depth, roots) = read_back(&img, f);
        assert_eq!((depth, roots), (2, 2));
        let mut want: Vec<u8> = (0..n).map(|k| (k % 251) as u8 + 1).collect();
        want.extend([0xEE, 0xEF]);
        assert_eq!(firsts, want);
        // Every block of the tree as it was keeps its bytes.
        for lba in tree {
            let at = lba as usize * B;
            assert!(before[at..at + B] == img[at..at + B], "block {lba} changed");
        }
    }

    #[test]
    fn growth_of_a_full_tree_lays_it_out_again_and_reads_back() {
        // The right edge full and the root too (4 interior blocks of 339 leaves): not
        // growth within the rule; the leaves are merged and the extents laid out again.
        let (mut img, f, n) = full_edge(4);
        {
            let dev = MemDeviceMut::new(&mut img);
            let opts = JoinOptions {
                node_id: 1,
                hostname: b"t".to_vec(),
                now_secs: 0,
            };
            let mut w = Writer::join(&dev, &opts).unwrap();
            w.write(f, 2 * n as u64 * B as u64, &[0xEE]).unwrap();
            w.leave().unwrap();
        }
        assert_eq!(errors(&img), Vec::<alloc::string::String>::new());
        let (firsts, depth, _) = read_back(&img, f);
        assert_eq!(depth, 2);
        let mut want: Vec<u8> = (0..n).map(|k| (k % 251) as u8 + 1).collect();
        want.push(0xEE);
        assert_eq!(firsts, want);
    }
}
