//! A file's extents as its blocks are placed, and the extent tree that maps them: held
//! in the inode (up to four), or behind one or two levels of tree blocks.

use alloc::vec::Vec;

use tet_core::block::{Block, BLOCK_SIZE};
use tet_core::cetrafs::raw::{RawExtent, RawExtentHeader, RawExtentIndex};
use tet_core::cetrafs::{
    EXTENT_MAGIC, EXTENT_UNINIT, INDEX_MAX, INLINE_SLOTS, LEAF_MAX, TAIL_EXTENT,
};
use tet_core::Error;
use zerocopy::{FromZeros, IntoBytes};

use super::allocator::Allocator;
use super::emit::{seal_tail, BlockSink};
use super::{full, invalid, put, Placement};

/// One extent: logical block, length, first physical block, uninitialized.
pub(super) type Extent = (u32, u32, u64, bool);

/// A file's extents as its blocks are placed, each block merged into the last extent
/// when it continues it logically and physically.
#[derive(Default)]
pub(super) struct Extents {
    pub(super) list: Vec<Extent>,
    /// Blocks placed (`inode.blocks`).
    pub(super) blocks: u64,
}

impl Extents {
    fn push(&mut self, logical: u32, phys: u64, uninit: bool) {
        self.blocks = self.blocks.saturating_add(1);
        match self.list.last_mut() {
            Some(e)
                if e.0.checked_add(e.1) == Some(logical)
                    && e.2.checked_add(u64::from(e.1)) == Some(phys)
                    && e.3 == uninit
                    && e.1 < 0x7fff_ffff =>
            {
                e.1 = e.1.saturating_add(1);
            }
            _ => self.list.push((logical, 1, phys, uninit)),
        }
    }
}

/// Takes a block for logical block `l`, writes `content` there (None: allocated but not
/// written, uninitialized) and records it.
pub(super) fn place(
    l: u32,
    content: Option<&Block>,
    placement: Placement,
    alloc: &mut Allocator,
    sink: &mut dyn BlockSink,
    extents: &mut Extents,
) -> Result<(), Error> {
    let phys = alloc.take(placement)?;
    if let Some(c) = content {
        sink.write_block(phys, c)?;
    }
    extents.push(l, phys, content.is_none());
    Ok(())
}

/// Builds the extent tree for `extents`, writing tree blocks, and returns the inode's
/// root: its header and four slots.
pub(super) fn write_tree(
    unordered: bool,
    sink: &mut dyn BlockSink,
    alloc: &mut Allocator,
    extents: &[Extent],
    is_dir: bool,
) -> Result<(RawExtentHeader, [u8; 64]), Error> {
    let order = |n: usize| -> Vec<usize> {
        let mut v: Vec<usize> = (0..n).collect();
        if unordered {
            v.reverse();
        }
        v
    };
    // Writes one tree block of entries (16-byte leaves or 12-byte index entries).
    let write_block = |alloc: &mut Allocator,
                       sink: &mut dyn BlockSink,
                       entries: &[Vec<u8>],
                       max: u16,
                       depth: u16|
     -> Result<u64, Error> {
        let lba = alloc.take(Placement::Contiguous)?;
        let mut blk: Block = [0; BLOCK_SIZE];
        put(
            &mut blk,
            0,
            tree_header(entries.len(), max, depth).as_bytes(),
        );
        let mut at = 12usize;
        for i in order(entries.len()) {
            let e = entries.get(i).ok_or(invalid("tree"))?;
            put(&mut blk, at, e);
            at = at.saturating_add(e.len());
        }
        seal_tail(&mut blk, TAIL_EXTENT);
        sink.write_block(lba, &blk)?;
        Ok(lba)
    };
    // Leaves of `chunk`, in tree blocks of at most `LEAF_MAX`; an index entry each.
    let leaves = |alloc: &mut Allocator,
                  sink: &mut dyn BlockSink,
                  group: &[Extent],
                  out: &mut Vec<Vec<u8>>|
     -> Result<(), Error> {
        for chunk in group.chunks(usize::from(LEAF_MAX)) {
            let entries: Vec<Vec<u8>> = chunk.iter().map(leaf_bytes).collect();
            let lba = write_block(alloc, sink, &entries, LEAF_MAX, 0)?;
            out.push(index_bytes(chunk.first().map_or(0, |e| e.0), lba));
        }
        Ok(())
    };
    let inline = usize::from(INLINE_SLOTS);
    let leaf = usize::from(LEAF_MAX);
    let interior = usize::from(INDEX_MAX);
    let (depth, slots): (u16, Vec<Vec<u8>>) = if extents.len() <= inline {
        (0, extents.iter().map(leaf_bytes).collect())
    } else if extents.len() <= inline.saturating_mul(leaf) {
        let mut s = Vec::new();
        leaves(alloc, sink, extents, &mut s)?;
        (1, s)
    } else if !is_dir && extents.len() <= inline.saturating_mul(interior).saturating_mul(leaf) {
        let per_interior = extents
            .len()
            .div_ceil(inline)
            .div_ceil(leaf)
            .saturating_mul(leaf);
        let mut s = Vec::new();
        for group in extents.chunks(per_interior) {
            let mut idx = Vec::new();
            leaves(alloc, sink, group, &mut idx)?;
            let lba = write_block(alloc, sink, &idx, INDEX_MAX, 1)?;
            s.push(index_bytes(group.first().map_or(0, |e| e.0), lba));
        }
        (2, s)
    } else {
        return Err(full("extent tree"));
    };
    let mut root = [0u8; 64];
    for (k, i) in order(slots.len()).into_iter().enumerate() {
        put(
            &mut root,
            k.saturating_mul(16),
            slots.get(i).ok_or(invalid("tree"))?,
        );
    }
    Ok((tree_header(slots.len(), INLINE_SLOTS, depth), root))
}

fn leaf_bytes(e: &Extent) -> Vec<u8> {
    let mut x = RawExtent::new_zeroed();
    x.logical.set(e.0);
    x.len.set(e.1 | if e.3 { EXTENT_UNINIT } else { 0 });
    x.physical.set(e.2);
    x.as_bytes().to_vec()
}

fn index_bytes(logical: u32, child: u64) -> Vec<u8> {
    let mut x = RawExtentIndex::new_zeroed();
    x.logical.set(logical);
    x.child.set(child);
    x.as_bytes().to_vec()
}

fn tree_header(entries: usize, max: u16, depth: u16) -> RawExtentHeader {
    let mut h = RawExtentHeader::new_zeroed();
    h.magic.set(EXTENT_MAGIC);
    h.entries.set(u16::try_from(entries).unwrap_or(0));
    h.max.set(max);
    h.depth.set(depth);
    h
}
