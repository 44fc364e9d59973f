//! Bitmaps and free counts: data bitmaps rebuilt from the check's ownership map, the
//! inode bitmap's padding bits, and the search for a free bit.

use alloc::vec::Vec;

use tet_core::block::{Block, BlockDeviceMut, BLOCK_SIZE, BLOCK_SIZE_U64};
use tet_core::cetrafs::raw::{RawBlockGroup, RawZoneGroupHot};
use tet_core::cetrafs::{bitmap_blocks, Code, Finding, Fs, BITS_PER_BITMAP_BLOCK};
use tet_core::Error;

use super::patches::{set_bit, Patches, Record};
use super::Fix;
use crate::cetrafs::fsck::OwnershipMap;

/// A clear bit below `limit` in the bitmap blocks from `start` (`count` of them), not
/// in `avoid`; returns its index.
pub(super) fn free_bit<D: BlockDeviceMut>(
    patches: &mut Patches<'_, D>,
    start: u64,
    count: u64,
    limit: u64,
    skip: impl Fn(u64) -> bool,
) -> Result<Option<u64>, Error> {
    for k in 0..count {
        let base = k.saturating_mul(BITS_PER_BITMAP_BLOCK);
        let b = *patches.block(start.saturating_add(k))?;
        for i in 0..BITS_PER_BITMAP_BLOCK {
            let abs = base.saturating_add(i);
            if abs >= limit {
                return Ok(None);
            }
            let set = usize::try_from(i / 8)
                .ok()
                .and_then(|x| b.get(x))
                .is_some_and(|x| x & (1u8 << (i % 8)) != 0);
            if !set && !skip(abs) {
                return Ok(Some(abs));
            }
        }
    }
    Ok(None)
}

/// A free count of a descriptor: the fix that sets it, where it is in the record, and
/// how to set it.
struct FreeCount<T> {
    code: Code,
    action: &'static str,
    /// Byte offset of the count in the record.
    at: u64,
    set: fn(&mut T, u64),
}

const GROUP_FREE: FreeCount<RawBlockGroup> = FreeCount {
    code: Code::GroupFreeCount,
    action: "block group free_data_blocks set from its bitmap",
    at: 64,
    set: |d, n| d.free_data_blocks.set(n),
};

const ZONE_FREE: FreeCount<RawZoneGroupHot> = FreeCount {
    code: Code::ZoneFreeCount,
    action: "zone group free_data_blocks set to its groups' sum",
    at: 16,
    set: |h, n| h.free_data_blocks.set(n),
};

impl<T: Record> FreeCount<T> {
    /// Sets the count in the record at the start of block `lba` to `free` when it says
    /// `was`.
    fn fix<D: BlockDeviceMut>(
        &self,
        patches: &mut Patches<'_, D>,
        fixes: &mut Vec<Fix>,
        lba: u64,
        was: u64,
        free: u64,
    ) -> Result<(), Error> {
        if free != was {
            patches.edit(lba, |r: &mut T| (self.set)(r, free))?;
            fixes.push(Fix {
                code: self.code,
                action: self.action,
                offset: lba.saturating_mul(BLOCK_SIZE_U64).saturating_add(self.at),
                value: Some(free),
                lossless: true,
            });
        }
        Ok(())
    }
}

/// Data bitmaps equal to the ownership map (padding bits set), and free counts that
/// match them, per block group and per zone group.
pub(super) fn rebuild_bitmaps<D: BlockDeviceMut>(
    fs: &Fs<D>,
    own: &OwnershipMap,
    keep_set: bool,
    patches: &mut Patches<'_, D>,
    fixes: &mut Vec<Fix>,
) -> Result<(), Error> {
    let sb = *fs.superblock();
    let mut buf: Block = [0; BLOCK_SIZE];
    for z in 0..sb.zone_group_count() {
        let zg = fs.zone_group(z, &mut buf)?;
        let first = zg.cold().first_bg_id.get();
        let mut zone_free = 0u64;
        for bi in first..first.saturating_add(zg.cold().bg_count.get()) {
            let bg = fs.block_group(bi, &mut buf)?;
            let raw = *bg.raw();
            let data = raw.data_block_count.get();
            let dbm = bitmap_blocks(raw.length_blocks.get());
            let mut used = 0u64;
            for k in 0..dbm {
                let lba = raw.start_block.get().saturating_add(1).saturating_add(k);
                let base = k.saturating_mul(BITS_PER_BITMAP_BLOCK);
                let disk = *patches.block(lba)?;
                let mut want: Block = [0; BLOCK_SIZE];
                let (mut used_want, mut used_disk) = (0u64, 0u64);
                for i in 0..BITS_PER_BITMAP_BLOCK {
                    let abs = base.saturating_add(i);
                    let was = usize::try_from(i / 8)
                        .ok()
                        .and_then(|x| disk.get(x))
                        .is_some_and(|x| x & (1u8 << (i % 8)) != 0);
                    let on = abs >= data || own.owned(bi, abs) || (keep_set && was);
                    if abs < data {
                        used_want = used_want.saturating_add(u64::from(on));
                        used_disk = used_disk.saturating_add(u64::from(was));
                    }
                    set_bit(&mut want, i, on);
                }
                let fix = Fix {
                    code: Code::BlockLeaked,
                    action: "data bitmap rebuilt from the blocks files, trees and queues own",
                    offset: lba.saturating_mul(BLOCK_SIZE_U64),
                    value: None,
                    lossless: true,
                };
                // A rebuild answered no: the free counts follow the bitmap as it stays.
                if disk != want && patches.allows(&fix) {
                    *patches.block(lba)? = want;
                    fixes.push(fix);
                    used = used.saturating_add(used_want);
                } else {
                    used = used.saturating_add(used_disk);
                }
            }
            let free = data.saturating_sub(used);
            zone_free = zone_free.saturating_add(free);
            GROUP_FREE.fix(patches, fixes, bg.lba(), raw.free_data_blocks.get(), free)?;
        }
        let was = zg.hot().free_data_blocks.get();
        ZONE_FREE.fix(patches, fixes, zg.lba(), was, zone_free)?;
    }
    Ok(())
}

/// The inode bitmap bit of every valid inode whose bit is clear (`inode-unmarked`), set:
/// the inodes decide which are in use (docs/cetrafs.md section 8). Planned before the
/// data bitmap rebuild, whose ownership map already counts these inodes' blocks. One fix
/// per bitmap block, whose value is the number of bits it sets (a zeroed bitmap of
/// 200,000 files is a few fixes, not 200,000).
pub(super) fn mark_inodes<D: BlockDeviceMut>(
    fs: &Fs<D>,
    found: &[Finding],
    patches: &mut Patches<'_, D>,
    fixes: &mut Vec<Fix>,
) -> Result<(), Error> {
    let start = fs.superblock().raw().inode_bitmap_start.get();
    // (bitmap block, bits it sets), in the order found (inode order).
    let mut per_block: Vec<(u64, u64)> = Vec::new();
    for f in found.iter().filter(|f| f.code == Code::InodeUnmarked) {
        let Some(ino) = f.ino else { continue };
        let lba = start.saturating_add(ino / BITS_PER_BITMAP_BLOCK);
        match per_block.last_mut() {
            Some((l, n)) if *l == lba => *n = n.saturating_add(1),
            _ => per_block.push((lba, 1)),
        }
    }
    let mut allowed: Vec<(u64, Fix)> = Vec::new();
    for (lba, n) in per_block {
        let fix = Fix {
            code: Code::InodeUnmarked,
            action: "inode bitmap bits set for valid inodes (the inodes decide which are in use)",
            offset: lba.saturating_mul(BLOCK_SIZE_U64),
            value: Some(n),
            lossless: true,
        };
        if patches.allows(&fix) {
            allowed.push((lba, fix));
        }
    }
    let mut lbas: Vec<u64> = allowed.iter().map(|(lba, _)| *lba).collect();
    lbas.sort_unstable();
    lbas.dedup();
    // One pass over the findings; each run of them in one bitmap block sets its bits
    // through one lookup of the block.
    let mut block: Option<(u64, &mut Block)> = None;
    for f in found.iter().filter(|f| f.code == Code::InodeUnmarked) {
        let Some(ino) = f.ino else { continue };
        let lba = start.saturating_add(ino / BITS_PER_BITMAP_BLOCK);
        if lbas.binary_search(&lba).is_err() {
            continue;
        }
        if block.as_ref().map(|(l, _)| *l) != Some(lba) {
            block = Some((lba, patches.block(lba)?));
        }
        if let Some((_, b)) = block.as_mut() {
            set_bit(b, ino % BITS_PER_BITMAP_BLOCK, true);
        }
    }
    fixes.extend(allowed.into_iter().map(|(_, f)| f));
    Ok(())
}

/// The inode bitmap's padding bits (past the inode count) and inode 0's bit, set.
pub(super) fn pad_inode_bitmap<D: BlockDeviceMut>(
    fs: &Fs<D>,
    patches: &mut Patches<'_, D>,
    fixes: &mut Vec<Fix>,
) -> Result<(), Error> {
    let sb = fs.superblock();
    let start = sb.raw().inode_bitmap_start.get();
    for k in 0..sb.raw().inode_bitmap_blocks.get() {
        let lba = start.saturating_add(k);
        let base = k.saturating_mul(BITS_PER_BITMAP_BLOCK);
        let live = sb
            .inode_count()
            .saturating_sub(base)
            .min(BITS_PER_BITMAP_BLOCK);
        let b = patches.block(lba)?;
        let before = *b;
        for i in live..BITS_PER_BITMAP_BLOCK {
            set_bit(b, i, true);
        }
        if k == 0 {
            set_bit(b, 0, true);
        }
        if *b != before {
            fixes.push(Fix {
                code: Code::BitmapPadding,
                action: "inode bitmap padding bits set",
                offset: lba.saturating_mul(BLOCK_SIZE_U64),
                value: None,
                lossless: true,
            });
        }
    }
    Ok(())
}
