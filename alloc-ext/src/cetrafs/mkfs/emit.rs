//! Writing the image: every structure serialised through the `tet_core::cetrafs::raw`
//! structs, block by block, into a [`BlockSink`].
//!
//! Block numbers here are region starts from the checked [`Geometry`] plus an index
//! inside the region, so they stay below the image's block count and the arithmetic
//! saturates where it cannot overflow.

use alloc::vec;
use alloc::vec::Vec;

use tet_core::block::{Block, BLOCK_SIZE, BLOCK_SIZE_U64};
use tet_core::cetrafs::copies::{COMPAT_SB_COPIES, COPY_AT};
use tet_core::cetrafs::raw::{RawDirEntry, RawInode, RawSuperblock, RawTail, RawXattr};
use tet_core::cetrafs::{Superblock, ANY_DEVICE};
use tet_core::cetrafs::{
    BITS_PER_BITMAP_BLOCK, DIRENTS_PER_BLOCK, FORMAT_VERSION, INODE_MAGIC, SB_CHECKSUM_AT,
    SB_CLEAN, SB_MAGIC, TAIL_AT, TAIL_DIR, TAIL_XATTR, ZG_NO_OWNER,
};
use tet_core::checksum::{crc32c, crc32c_skipping};
use tet_core::Error;
use zerocopy::{FromZeros, IntoBytes};

use super::allocator::Allocator;
use super::extents::{place, write_tree, Extents};
use super::geometry::Geometry;
use super::tree::{Kind, Node};
use super::{full, invalid, put, usize_of, ImageBuilder, Placement, Sparse};
use crate::cetrafs::records;

/// Where [`ImageBuilder::build_into`] writes: whole blocks by number.
pub trait BlockSink {
    /// Writes block `lba`.
    fn write_block(&mut self, lba: u64, block: &Block) -> Result<(), Error>;
    /// Makes every block written so far durable before any written after (a device's
    /// flush). The superblock copies and then the primary are each written after one,
    /// so a cut leaves no superblock that names structures not yet written.
    fn barrier(&mut self) -> Result<(), Error> {
        Ok(())
    }
}

/// A sink over an image held in memory.
pub struct MemSink<'a>(pub &'a mut [u8]);

impl BlockSink for MemSink<'_> {
    fn write_block(&mut self, lba: u64, block: &Block) -> Result<(), Error> {
        let at = usize_of(lba.saturating_mul(BLOCK_SIZE_U64));
        let dst = self
            .0
            .get_mut(at..at.saturating_add(BLOCK_SIZE))
            .ok_or(full("image"))?;
        dst.copy_from_slice(block);
        Ok(())
    }
}

/// Which optional features the written tree uses (superblock feature bits).
#[derive(Default)]
struct Features {
    holes: bool,
    uninit: bool,
    xattr: bool,
}

impl ImageBuilder {
    /// Writes the image into memory (tests, small images). Same bytes as
    /// [`ImageBuilder::build_into`] writes to any sink.
    pub fn build(&self) -> Result<Vec<u8>, Error> {
        let g = Geometry::of(&self.params)?;
        let mut img = vec![0u8; usize_of(g.total.saturating_mul(BLOCK_SIZE_U64))];
        self.build_into(&mut MemSink(&mut img))?;
        Ok(img)
    }

    /// Writes the image block by block into `sink`: every block that must hold
    /// something is written whole, exactly once, in no particular order, except the
    /// blocks of the superblock copies, written again with them after a
    /// [`BlockSink::barrier`], and block 0, last, after another; blocks never
    /// written must read as zero only where section 13 of the spec does not check them
    /// (free inodes of the inode table, free data blocks), so a sink over a fresh sparse
    /// file may skip all-zero blocks and a sink over a used device must not. Memory: the
    /// tree being copied, plus a few blocks and one word per block group. Every layout is
    /// serialised through the `tet_core::cetrafs::raw` structs.
    pub fn build_into(&self, sink: &mut dyn BlockSink) -> Result<u64, Error> {
        let g = Geometry::of(&self.params)?;
        let mut alloc = Allocator::new(&g);
        let mut features = Features::default();
        let mut blk: Block = [0; BLOCK_SIZE];
        for (ino, node) in self.nodes.iter().enumerate().skip(1) {
            let ino = u64::try_from(ino).map_err(|_| full("inodes"))?;
            self.write_node(&g, ino, node, &mut alloc, sink, &mut blk, &mut features)?;
        }
        self.write_inode_bitmap(&g, sink, &mut blk)?;
        let sb = self.superblock(&g, &features)?;
        let copies = sb.copy_blocks();
        // The blocks that hold the copies are written with the rest, and again with
        // the copies once everything else is durable.
        let mut held: Vec<(u64, Block)> = Vec::new();
        write_groups(&g, &alloc, sink, &mut blk, copies.as_slice(), &mut held)?;
        self.write_journals(&g, sink, &mut blk)?;
        sink.barrier()?;
        for (lba, block) in &mut held {
            put(block, COPY_AT, sb.copy_record(*lba).as_bytes());
            sink.write_block(*lba, block)?;
        }
        sink.barrier()?;
        blk.fill(0);
        put(&mut blk, 0, sb.raw().as_bytes());
        sink.write_block(0, &blk)?;
        Ok(g.total)
    }

    /// One inode: its data (or symlink target, or directory blocks), its extent tree,
    /// its xattr block, and the inode itself.
    #[expect(
        clippy::too_many_arguments,
        reason = "the state of one image being written"
    )]
    fn write_node(
        &self,
        g: &Geometry,
        ino: u64,
        node: &Node,
        alloc: &mut Allocator,
        sink: &mut dyn BlockSink,
        blk: &mut Block,
        features: &mut Features,
    ) -> Result<(), Error> {
        // Each logical block is placed with its contents; holes are never placed.
        let mut extents = Extents::default();
        let size: u64 = match &node.kind {
            Kind::File {
                data,
                sparse,
                placement,
            } => {
                let size = data.size();
                for i in 0..size.div_ceil(BLOCK_SIZE_U64) {
                    // `i < 2^32` once `l` exists, so `off` is far below 2^64, and
                    // `off < size`.
                    let l = u32::try_from(i).map_err(|_| full("file size"))?;
                    let off = i.saturating_mul(BLOCK_SIZE_U64);
                    let n = usize_of(size.saturating_sub(off).min(BLOCK_SIZE_U64));
                    blk.fill(0);
                    data.read_at(off, blk.get_mut(..n).ok_or(invalid("file content"))?)?;
                    let zero = blk.iter().all(|b| *b == 0);
                    match (sparse, zero) {
                        (Sparse::Holes, true) => features.holes = true,
                        (Sparse::Uninit, true) => {
                            features.uninit = true;
                            place(l, None, *placement, alloc, sink, &mut extents)?;
                        }
                        _ => place(l, Some(blk), *placement, alloc, sink, &mut extents)?,
                    }
                }
                size
            }
            Kind::Symlink { target } => {
                for (i, chunk) in target.chunks(BLOCK_SIZE).enumerate() {
                    blk.fill(0);
                    put(blk, 0, chunk);
                    let l = u32::try_from(i).map_err(|_| full("symlink"))?;
                    place(
                        l,
                        Some(blk),
                        Placement::Contiguous,
                        alloc,
                        sink,
                        &mut extents,
                    )?;
                }
                u64::try_from(target.len()).map_err(|_| full("symlink"))?
            }
            Kind::Dir { entries } => {
                let dir_bytes = dir_blocks(entries);
                for (i, b) in dir_bytes.iter().enumerate() {
                    let l = u32::try_from(i).map_err(|_| full("dir"))?;
                    place(l, Some(b), Placement::Contiguous, alloc, sink, &mut extents)?;
                }
                u64::try_from(dir_bytes.len())
                    .map_err(|_| full("dir"))?
                    .saturating_mul(BLOCK_SIZE_U64)
            }
        };
        let is_dir = matches!(node.kind, Kind::Dir { .. });
        let (root_header, root_slots) =
            write_tree(self.params.unordered, sink, alloc, &extents.list, is_dir)?;

        let mut xattr_block = 0;
        if !node.xattrs.is_empty() {
            features.xattr = true;
            xattr_block = alloc.take(Placement::Contiguous)?;
            blk.fill(0);
            for (k, (key, value)) in node.xattrs.iter().enumerate() {
                let mut x = RawXattr::new_zeroed();
                put(&mut x.key, 0, key);
                x.value_len.set(u16::try_from(value.len()).unwrap_or(0));
                put(&mut x.value, 0, value);
                put(blk, k.saturating_mul(322), x.as_bytes());
            }
            seal_tail(blk, TAIL_XATTR);
            sink.write_block(xattr_block, blk)?;
        }

        let mut r = RawInode::new_zeroed();
        r.magic = INODE_MAGIC;
        r.ino.set(ino);
        r.mode.set(node.mode);
        r.uid.set(node.uid);
        r.gid.set(node.gid);
        r.nlink.set(match &node.kind {
            Kind::Dir { entries } => {
                let subdirs = entries.iter().filter(|e| e.2 == 2).count();
                u32::try_from(subdirs).unwrap_or(0).saturating_add(2)
            }
            _ => node.links,
        });
        r.size.set(size);
        r.blocks.set(extents.blocks);
        for t in [
            &mut r.atime_ns,
            &mut r.mtime_ns,
            &mut r.ctime_ns,
            &mut r.crtime_ns,
        ] {
            t.set(node.mtime_ns);
        }
        r.parent.set(if is_dir { node.parent } else { 0 });
        r.xattr_block.set(xattr_block);
        r.extent_header = root_header;
        r.slots = root_slots;
        r.checksum.set(crc32c_skipping(r.as_bytes(), 248));
        blk.fill(0);
        put(blk, 0, r.as_bytes());
        sink.write_block(g.inode_table_start.saturating_add(ino), blk)
    }

    /// Inode bitmap: inode 0, every used inode, and padding bits set; one block at a
    /// time.
    fn write_inode_bitmap(
        &self,
        g: &Geometry,
        sink: &mut dyn BlockSink,
        blk: &mut Block,
    ) -> Result<(), Error> {
        let used_inodes = u64::try_from(self.nodes.len()).unwrap_or(0);
        for k in 0..g.inode_bitmap_blocks {
            let base = k.saturating_mul(BITS_PER_BITMAP_BLOCK);
            blk.fill(0);
            set_bits(blk, base, 0, used_inodes);
            set_bits(blk, base, self.params.inodes, u64::MAX);
            sink.write_block(g.inode_bitmap_start.saturating_add(k), blk)?;
        }
        Ok(())
    }

    /// The registry and the pending-free queues start empty; each journal is a CLEAN
    /// flag block and empty slots. Written (as zeros) so a used device reads empty.
    fn write_journals(
        &self,
        g: &Geometry,
        sink: &mut dyn BlockSink,
        blk: &mut Block,
    ) -> Result<(), Error> {
        let p = &self.params;
        blk.fill(0);
        for lba in g.registry_start..g.registry_start.saturating_add(g.registry_blocks) {
            sink.write_block(lba, blk)?;
        }
        for lba in g.pending_start..g.pending_start.saturating_add(g.pending_blocks) {
            sink.write_block(lba, blk)?;
        }
        for row in 0..p.nodes {
            let lba = g
                .journal_start
                .saturating_add(u64::from(row).saturating_mul(p.journal_blocks));
            blk.fill(0);
            for slot in lba.saturating_add(1)..lba.saturating_add(p.journal_blocks) {
                sink.write_block(slot, blk)?;
            }
            *blk = records::block_with(records::clean_journal_flag(row, 0).as_bytes());
            sink.write_block(lba, blk)?;
        }
        Ok(())
    }

    /// The superblock of the image, with `COMPAT_SB_COPIES` (mkfs always writes the
    /// copies), checked as a reader checks it.
    fn superblock(&self, g: &Geometry, features: &Features) -> Result<Superblock, Error> {
        let p = &self.params;
        let mut sb = RawSuperblock::new_zeroed();
        sb.magic = SB_MAGIC;
        sb.format_version.set(FORMAT_VERSION);
        sb.block_size.set(4096);
        sb.sb_flags.set(SB_CLEAN);
        // Without a uuid given, one derived from the geometry, so images stay
        // deterministic.
        let derived = crc32c(&g.total.to_le_bytes()).to_le_bytes();
        match p.uuid {
            Some(u) => sb.uuid = u,
            None => {
                for (b, u) in sb.uuid.iter_mut().zip(derived.iter().cycle()) {
                    *b = *u;
                }
            }
        }
        sb.total_blocks.set(g.total);
        sb.feature_compat
            .set(u64::from(features.xattr) | (u64::from(features.holes) << 1) | COMPAT_SB_COPIES);
        sb.feature_incompat
            .set(1u64 | (u64::from(features.uninit) << 1));
        sb.feature_ro_compat.set(3);
        sb.zone_group_count.set(g.z);
        sb.block_group_count.set(g.b);
        sb.zg_table_start.set(1);
        sb.bg_table_start.set(g.bg_descriptor(0));
        sb.inode_bitmap_start.set(g.inode_bitmap_start);
        sb.inode_bitmap_blocks.set(g.inode_bitmap_blocks);
        sb.inode_table_start.set(g.inode_table_start);
        sb.inode_count.set(p.inodes);
        sb.registry_start.set(g.registry_start);
        sb.registry_blocks.set(g.registry_blocks);
        sb.node_capacity.set(p.nodes);
        sb.pending_slots_per_zg.set(p.pending_slots);
        sb.pending_start.set(g.pending_start);
        sb.pending_blocks.set(g.pending_blocks);
        sb.node_journal_start.set(g.journal_start);
        sb.node_journal_blocks.set(p.journal_blocks);
        sb.bg_regions_start.set(g.bg_regions_start);
        sb.bg_size_blocks.set(p.bg_size_blocks);
        sb.root_inode.set(1);
        let label = p.label.as_bytes();
        put(
            &mut sb.label,
            0,
            label.get(..label.len().min(64)).unwrap_or(&[]),
        );
        sb.checksum
            .set(crc32c_skipping(sb.as_bytes(), SB_CHECKSUM_AT));
        let mut blk: Block = [0; BLOCK_SIZE];
        put(&mut blk, 0, sb.as_bytes());
        Superblock::parse(&blk, ANY_DEVICE)
    }
}

/// Block groups (bitmaps, region headers, descriptors), then the zone groups with the
/// free counts their groups add up to.
/// A block in `held_back` is also kept in `held` (to be written again with a copy).
fn write_groups(
    g: &Geometry,
    alloc: &Allocator,
    sink: &mut dyn BlockSink,
    blk: &mut Block,
    held_back: &[u64],
    held: &mut Vec<(u64, Block)>,
) -> Result<(), Error> {
    let mut write = |lba: u64, blk: &Block, sink: &mut dyn BlockSink| {
        if held_back.contains(&lba) {
            held.push((lba, *blk));
        }
        sink.write_block(lba, blk)
    };
    let mut zg_free = vec![0u64; usize_of(g.z.into())];
    for bi in 0..g.b {
        let (start, len) = g.bg_span(bi);
        let (_, data, dbm) = g.data_area(bi);
        let (high, gaps) = alloc.used_in(bi);
        // Skipped blocks lie below the high-water mark.
        let used = high.saturating_sub(u64::try_from(gaps.len()).unwrap_or(0));
        for k in 0..dbm {
            let base = k.saturating_mul(BITS_PER_BITMAP_BLOCK);
            let end = base.saturating_add(BITS_PER_BITMAP_BLOCK);
            blk.fill(0);
            set_bits(blk, base, 0, high);
            set_bits(blk, base, data, u64::MAX);
            for gap in gaps.iter().filter(|x| **x >= base && **x < end) {
                let i = gap.saturating_sub(base);
                if let Some(byte) = blk.get_mut(usize_of(i / 8)) {
                    *byte &= !(1u8 << (i % 8));
                }
            }
            sink.write_block(start.saturating_add(1).saturating_add(k), blk)?;
        }
        *blk = records::block_with(records::region_header(bi, start, len).as_bytes());
        write(start, blk, sink)?;
        let owner = bi.checked_div(g.per_zg).unwrap_or(0);
        let free = data.saturating_sub(used);
        if let Some(f) = zg_free.get_mut(usize_of(owner.into())) {
            *f = f.saturating_add(free);
        }
        let d = records::block_group(bi, owner, start, len, free, 0);
        *blk = records::block_with(d.as_bytes());
        write(g.bg_descriptor(bi), blk, sink)?;
    }
    for zi in 0..g.z {
        let first = zi.saturating_mul(g.per_zg);
        let free = zg_free.get(usize_of(zi.into())).copied().unwrap_or(0);
        let hot = records::zone_group_hot(zi, ZG_NO_OWNER, free, 0);
        let cold = records::zone_group_cold(first, g.per_zg.min(g.b.saturating_sub(first)));
        *blk = records::zone_group_block(&hot, &cold);
        sink.write_block(u64::from(zi).saturating_add(1), blk)?;
    }
    Ok(())
}

/// Sets bits `lo .. hi` (absolute bit numbers) that fall in the bitmap block whose
/// first bit is `base`.
pub(super) fn set_bits(blk: &mut Block, base: u64, lo: u64, hi: u64) {
    let end = base.saturating_add(BITS_PER_BITMAP_BLOCK);
    let (lo, hi) = (lo.max(base), hi.min(end));
    // `base <= i < hi <= end`: `rel` is below the block's bit count.
    let mut i = lo;
    while i < hi {
        let rel = i.saturating_sub(base);
        let byte = blk.get_mut(usize_of(rel / 8));
        if rel % 8 == 0 && i.saturating_add(8) <= hi {
            if let Some(b) = byte {
                *b = 0xFF;
            }
            i = i.saturating_add(8);
        } else {
            if let Some(b) = byte {
                *b |= 1 << (rel % 8);
            }
            i = i.saturating_add(1);
        }
    }
}

/// Writes the `{magic, reserved, crc}` tail of a tree, directory or xattr block.
pub(super) fn seal_tail(blk: &mut Block, magic: [u8; 4]) {
    let mut t = RawTail::new_zeroed();
    t.magic = magic;
    put(blk, TAIL_AT, t.as_bytes());
    let c = crc32c_skipping(blk.as_slice(), TAIL_AT + 8);
    put(blk, TAIL_AT + 8, &c.to_le_bytes());
}

/// A directory's blocks for `entries` (name, inode, file type), sealed.
pub(super) fn dir_blocks(entries: &[(Vec<u8>, u64, u8)]) -> Vec<Block> {
    let mut out = Vec::new();
    for chunk in entries.chunks(DIRENTS_PER_BLOCK) {
        let mut blk: Block = [0; BLOCK_SIZE];
        for (k, (name, ino, ft)) in chunk.iter().enumerate() {
            let mut d = RawDirEntry::new_zeroed();
            d.inode.set(*ino);
            d.name_len.set(u16::try_from(name.len()).unwrap_or(0));
            d.file_type = *ft;
            put(&mut d.name, 0, name);
            put(&mut blk, k.saturating_mul(266), d.as_bytes());
        }
        seal_tail(&mut blk, TAIL_DIR);
        out.push(blk);
    }
    out
}
