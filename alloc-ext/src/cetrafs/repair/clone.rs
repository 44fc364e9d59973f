//! A block owned twice: the later owner's extent gets its own copy.

use alloc::vec::Vec;

use tet_core::block::{Block, BlockDeviceMut, BLOCK_SIZE};
use tet_core::cetrafs::{Code, Finding, Fs, BITS_PER_BITMAP_BLOCK};
use tet_core::{Error, ErrorKind};
use zerocopy::FromBytes;

use super::patches::{reseal_tail, split, Patches};
use super::Fix;
use crate::cetrafs::fsck::OwnershipMap;

/// A block owned twice: the later claimant's extent gets a copy of its blocks in free
/// space (as e2fsck clones), one extent per round. No room: left.
pub(super) fn clone_extent<D: BlockDeviceMut>(
    fs: &Fs<D>,
    f: &Finding,
    own: &OwnershipMap,
    patches: &mut Patches<'_, D>,
    fixes: &mut Vec<Fix>,
) -> Result<(), Error> {
    let (elba, field) = split(f.error.offset);
    let entry = field.saturating_sub(8);
    let raw = *patches.block(elba)?;
    let Some(bytes) = raw.get(entry..entry.saturating_add(16)) else {
        return Ok(());
    };
    let ext = tet_core::cetrafs::raw::RawExtent::read_from_bytes(bytes)
        .map_err(|_| Error::new(ErrorKind::Invalid, "extent", elba))?;
    let len = u64::from(ext.len.get() & !tet_core::cetrafs::EXTENT_UNINIT);
    let old = ext.physical.get();
    if len == 0 || len > 4096 {
        return Ok(());
    }
    let sb = *fs.superblock();
    let mut buf: Block = [0; BLOCK_SIZE];
    // Whether the extent lies in an inode (else in a tree block).
    let itable = sb.raw().inode_table_start.get();
    let is_inode = elba >= itable && elba < itable.saturating_add(sb.inode_count());
    // A run of `len` blocks free in the bitmap and owned by nothing, in one group.
    let mut found_run = None;
    'groups: for bi in 0..sb.block_group_count() {
        let bg = fs.block_group(bi, &mut buf)?;
        let r = *bg.raw();
        let start = r.start_block.get().saturating_add(1);
        let mut run = 0u64;
        for i in 0..r.data_block_count.get() {
            let k = i / BITS_PER_BITMAP_BLOCK;
            let b = patches.block(start.saturating_add(k))?;
            let bit = i % BITS_PER_BITMAP_BLOCK;
            let set = usize::try_from(bit / 8)
                .ok()
                .and_then(|x| b.get(x))
                .is_some_and(|x| x & (1u8 << (bit % 8)) != 0);
            run = if set || own.owned(bi, i) {
                0
            } else {
                run.saturating_add(1)
            };
            if run == len {
                let first = i.saturating_add(1).saturating_sub(len);
                found_run = Some((bi, first, bg.data_start().saturating_add(first)));
                break 'groups;
            }
        }
    }
    let Some((bi, first, new)) = found_run else {
        // No room for a copy: the later owner's extent is cleared, its range becomes a
        // hole (as e2fsck does). Only an extent held in the inode itself; one in a tree
        // block is left.
        let Some(k) = entry.checked_sub(116).map(|x| x / 16).filter(|k| *k < 4) else {
            return Ok(());
        };
        if !is_inode {
            return Ok(());
        }
        patches.inode(elba, |r| {
            let n = usize::from(r.extent_header.entries.get()).min(4);
            if r.extent_header.depth.get() != 0 || k >= n {
                return;
            }
            let mut slots = [0u8; 64];
            let mut w = 0usize;
            for (i, slot) in r.slots.chunks_exact(16).enumerate().take(n) {
                if i != k {
                    if let Some(dst) = slots.get_mut(w..w.saturating_add(16)) {
                        dst.copy_from_slice(slot);
                    }
                    w = w.saturating_add(16);
                }
            }
            r.slots = slots;
            r.extent_header
                .entries
                .set(u16::try_from(n.saturating_sub(1)).unwrap_or(0));
            r.blocks.set(r.blocks.get().saturating_sub(len));
        })?;
        fixes.push(Fix {
            code: Code::BlockShared,
            action: "extent cleared (no free space for a copy): its range reads as a hole",
            offset: f.error.offset,
            value: Some(old),
            lossless: false,
        });
        return Ok(());
    };
    for k in 0..len {
        fs.device().read_block(old.saturating_add(k), &mut buf)?;
        patches.fresh.push(new.saturating_add(k));
        let dst = patches.block(new.saturating_add(k))?;
        *dst = buf;
    }
    // The extent points at the copy; the block holding it is resealed.
    let b = patches.block(elba)?;
    if let Some(dst) = b.get_mut(entry.saturating_add(8)..entry.saturating_add(16)) {
        dst.copy_from_slice(&new.to_le_bytes());
    }
    if is_inode {
        patches.inode(elba, |_| {})?;
    } else {
        reseal_tail(b);
    }
    // Bitmap bits and free counts for the copy.
    patches.take_blocks(bi, first, len)?;
    fixes.push(Fix {
        code: Code::BlockShared,
        action: "extent cloned: its blocks copied to free space for the later owner",
        offset: f.error.offset,
        value: Some(new),
        lossless: false,
    });
    Ok(())
}
