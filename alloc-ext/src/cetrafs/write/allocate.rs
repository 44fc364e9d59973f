//! Block and inode allocation (`docs/cetrafs.md` section 15, "Allocation"): data blocks
//! from zone groups the node owns, claimed by compare-and-write of their hot sector;
//! bitmaps changed through the transaction; contiguous runs preferred.

use tet_core::block::{Block, BlockDeviceMut, BLOCK_SIZE};
use tet_core::cetrafs::{bitmap_blocks, BITS_PER_BITMAP_BLOCK};
use tet_core::{Error, ErrorKind};

use super::txn::{changed, first_sector, Txn};
use super::{Errno, GroupCount, WriteError, Writer};

/// Where block group `bg`'s data lies: (first bitmap block, first data block, data
/// block count).
#[derive(Clone, Copy, Debug)]
pub(super) struct Area {
    pub bitmap: u64,
    pub data: u64,
    pub count: u64,
}

fn bit(b: &Block, i: u64) -> bool {
    let byte = usize::try_from(i / 8)
        .ok()
        .and_then(|k| b.get(k))
        .copied()
        .unwrap_or(0xFF);
    let shift = u32::try_from(i % 8).unwrap_or(0);
    (byte >> shift) & 1 == 1
}

fn set_bit(b: &mut Block, i: u64, on: bool) {
    let shift = u32::try_from(i % 8).unwrap_or(0);
    if let Some(byte) = usize::try_from(i / 8).ok().and_then(|k| b.get_mut(k)) {
        let m = 1u8.checked_shl(shift).unwrap_or(0);
        if on {
            *byte |= m;
        } else {
            *byte &= !m;
        }
    }
}

impl<D: BlockDeviceMut> Writer<D> {
    /// The data area of block group `bg`.
    pub(super) fn area(&self, bg: u32) -> Area {
        let (start, len) = self.fs.superblock().bg_span(bg);
        let dbm = bitmap_blocks(len);
        Area {
            bitmap: start.saturating_add(1),
            data: start.saturating_add(1).saturating_add(dbm),
            count: len.saturating_sub(1).saturating_sub(dbm),
        }
    }

    /// The block group whose data area holds `lba`.
    pub(super) fn group_of(&self, lba: u64) -> Option<u32> {
        let sb = self.fs.superblock();
        let rel = lba.checked_sub(sb.bg_regions_start())?;
        let bg = u32::try_from(rel.checked_div(sb.bg_size_blocks())?).ok()?;
        if bg >= sb.block_group_count() {
            return None;
        }
        let a = self.area(bg);
        (lba >= a.data && lba < a.data.saturating_add(a.count)).then_some(bg)
    }

    /// Claims zone group `z` (section 15): compare-and-write of its hot sector to this
    /// node's row, then its groups' free counts from their bitmaps, each with
    /// `reconcile_seq` + 1.
    pub(super) fn claim(&mut self, z: u32) -> Result<(), WriteError> {
        if self.owned.contains(&z) {
            return Ok(());
        }
        let mut b: Block = [0; BLOCK_SIZE];
        let zg = self.fs.zone_group(z, &mut b)?;
        match zg.owner() {
            None => {}
            Some(o) if u32::from(o) == self.row => {}
            Some(o) => {
                return Err(WriteError::ZoneOwned {
                    zone_group: z,
                    owner: o,
                })
            }
        }
        let (first, n) = (zg.cold().first_bg_id.get(), zg.cold().bg_count.get());
        // The claim itself: owner = us, free count as it was.
        self.fs.device().read_block(zg.lba(), &mut b)?;
        let old = first_sector(&b);
        let mut h = *zg.hot();
        if h.owner_node_id.get() != u16::try_from(self.row).unwrap_or(u16::MAX) {
            h.owner_node_id
                .set(u16::try_from(self.row).map_err(|_| Errno::EINVAL)?);
            h.hb_seq.set(h.hb_seq.get().wrapping_add(1));
            h.hot_checksum.set(tet_core::checksum::crc32c_skipping(
                zerocopy::IntoBytes::as_bytes(&h),
                56,
            ));
            let mut new = old;
            if let Some(dst) = new.get_mut(..64) {
                dst.copy_from_slice(zerocopy::IntoBytes::as_bytes(&h));
            }
            if !self.fs.device().compare_and_write(zg.lba(), &old, &new)? {
                return Err(changed("zone group", zg.lba()));
            }
            self.fs.device().flush()?;
        }
        self.owned.push(z);
        for bg in first..first.saturating_add(n) {
            // The owner changed: `reconcile_seq` advances even when the count does not,
            // so a late compare-and-write of the previous owner, built on the old
            // sequence and count, fails.
            let d = self.fs.block_group(bg, &mut b)?;
            let seq = d.raw().reconcile_seq.get().wrapping_add(1);
            let counted = self.count_free(bg)?;
            self.write_group_count(bg, counted, seq)?;
            self.counts.insert(
                bg,
                GroupCount {
                    free: counted,
                    reconcile_seq: seq,
                },
            );
        }
        self.write_zone(z, Some(self.row))?;
        self.fs.device().flush()?;
        Ok(())
    }

    /// Releases zone group `z` (section 15, "Allocation"; every transaction already
    /// checkpointed): each of its block groups' free count set from its bitmap with
    /// `reconcile_seq` + 1, flushed, then the zone group's owner `0xFFFF`. A cut between
    /// leaves the zone group the row's, and recovery does the same again before it
    /// releases it.
    pub(super) fn release_zone(&mut self, z: u32) -> Result<(), WriteError> {
        let (first, n) = self
            .zones
            .get(usize::try_from(z).unwrap_or(usize::MAX))
            .copied()
            .unwrap_or((0, 0));
        for bg in first..first.saturating_add(n) {
            let mut b: Block = [0; BLOCK_SIZE];
            let seq = self
                .fs
                .block_group(bg, &mut b)?
                .raw()
                .reconcile_seq
                .get()
                .wrapping_add(1);
            let free = self.count_free(bg)?;
            self.write_group_count(bg, free, seq)?;
            self.counts.insert(
                bg,
                GroupCount {
                    free,
                    reconcile_seq: seq,
                },
            );
        }
        self.fs.device().flush()?;
        self.write_zone(z, None)
    }

    /// Clear bits of block group `bg`'s data bitmap (padding bits are set).
    pub(super) fn count_free(&self, bg: u32) -> Result<u64, WriteError> {
        let a = self.area(bg);
        let mut b: Block = [0; BLOCK_SIZE];
        let mut free = 0u64;
        for k in 0..a.data.saturating_sub(a.bitmap) {
            self.fs
                .device()
                .read_block(a.bitmap.saturating_add(k), &mut b)?;
            let ones: u64 = b.iter().map(|x| u64::from(x.count_ones())).sum();
            free = free.saturating_add(BITS_PER_BITMAP_BLOCK.saturating_sub(ones));
        }
        Ok(free)
    }

    /// Whether data block `lba` is free as the transaction sees it.
    fn block_free(&self, t: &Txn, bg: u32, lba: u64) -> Result<bool, WriteError> {
        if t.freed.contains(&lba) {
            return Ok(false);
        }
        let a = self.area(bg);
        let i = lba.saturating_sub(a.data);
        let bm = self.read(t, a.bitmap.saturating_add(i / BITS_PER_BITMAP_BLOCK))?;
        Ok(!bit(&bm, i % BITS_PER_BITMAP_BLOCK))
    }

    /// Marks `len` blocks from `lba` (one block group) used or free in the bitmap.
    pub(super) fn mark(
        &mut self,
        t: &mut Txn,
        lba: u64,
        len: u64,
        used: bool,
    ) -> Result<(), WriteError> {
        let bg = self.group_of(lba).ok_or_else(|| bad_block(lba))?;
        if !self.owned.iter().any(|z| {
            self.zones
                .get(usize::try_from(*z).unwrap_or(usize::MAX))
                .is_some_and(|(f, n)| bg >= *f && bg < f.saturating_add(*n))
        }) {
            let z = self.zone_of(bg).ok_or_else(|| bad_block(lba))?;
            self.claim(z)?;
        }
        let a = self.area(bg);
        let mut i = lba.saturating_sub(a.data);
        let end = i.saturating_add(len);
        // An extent stays inside one block group's data area (section 9).
        if end > a.count {
            return Err(bad_block(lba.saturating_add(len)));
        }
        while i < end {
            let blk = a.bitmap.saturating_add(i / BITS_PER_BITMAP_BLOCK);
            let mut bm = self.read(t, blk)?;
            while i < end {
                set_bit(&mut bm, i % BITS_PER_BITMAP_BLOCK, used);
                i = i.saturating_add(1);
                if i % BITS_PER_BITMAP_BLOCK == 0 {
                    break;
                }
            }
            Self::put(t, blk, bm);
        }
        let map = if used {
            &mut t.allocated_in
        } else {
            for k in 0..len {
                t.freed.insert(lba.saturating_add(k));
            }
            &mut t.freed_in
        };
        let e = map.entry(bg).or_insert(0);
        *e = e.saturating_add(len);
        Ok(())
    }

    /// Frees `len` data blocks from `lba` (one extent).
    pub(super) fn free_run(&mut self, t: &mut Txn, lba: u64, len: u64) -> Result<(), WriteError> {
        self.mark(t, lba, len, false)
    }

    /// The free blocks of group `bg` as the transaction sees them.
    fn free_now(&self, t: &Txn, bg: u32) -> u64 {
        let c = self.counts.get(&bg).map_or(0, |c| c.free);
        c.saturating_sub(t.allocated_in.get(&bg).copied().unwrap_or(0))
    }

    /// Allocates up to `want` contiguous data blocks, preferring the run at `hint`
    /// (the block after a file's last), then the first run of `want`, then the longest
    /// run found; marks them used. `ENOSPC` when no block is free.
    pub(super) fn alloc_run(
        &mut self,
        t: &mut Txn,
        hint: Option<u64>,
        want: u64,
    ) -> Result<(u64, u64), WriteError> {
        let want = want.clamp(1, 1 << 30);
        if let Some(h) = hint {
            if let Some(bg) = self.group_of(h) {
                if let Some(z) = self.zone_of(bg) {
                    if self.claim(z).is_ok() {
                        let a = self.area(bg);
                        let end = a.data.saturating_add(a.count);
                        let mut n = 0u64;
                        while n < want
                            && h.saturating_add(n) < end
                            && self.block_free(t, bg, h.saturating_add(n))?
                        {
                            n = n.saturating_add(1);
                        }
                        if n > 0 {
                            self.mark(t, h, n, true)?;
                            return Ok((h, n));
                        }
                    }
                }
            }
        }
        let mut best: Option<(u64, u64)> = None;
        let zones = u32::try_from(self.zones.len()).unwrap_or(0);
        // Owned zone groups first, then the others in order (claimed when used).
        let mut order: alloc::vec::Vec<u32> = self.owned.clone();
        order.extend((0..zones).filter(|z| !self.owned.contains(z)));
        for z in order {
            if !self.owned.contains(&z) {
                if best.is_some() {
                    break;
                }
                let mut b: Block = [0; BLOCK_SIZE];
                let zg = self.fs.zone_group(z, &mut b)?;
                if zg.owner().is_some() || zg.hot().free_data_blocks.get() == 0 {
                    continue;
                }
                self.claim(z)?;
            }
            let (first, n) = self
                .zones
                .get(usize::try_from(z).unwrap_or(usize::MAX))
                .copied()
                .unwrap_or((0, 0));
            for bg in first..first.saturating_add(n) {
                if self.free_now(t, bg) == 0 {
                    continue;
                }
                if let Some((s, len)) = self.find_run(t, bg, want)? {
                    if len >= want {
                        self.mark(t, s, len, true)?;
                        return Ok((s, len));
                    }
                    if best.is_none_or(|(_, l)| len > l) {
                        best = Some((s, len));
                    }
                }
            }
        }
        let (s, len) = best.ok_or(Errno::ENOSPC)?;
        self.mark(t, s, len, true)?;
        Ok((s, len))
    }

    /// The first run of `want` free blocks in group `bg`, else its longest.
    fn find_run(&self, t: &Txn, bg: u32, want: u64) -> Result<Option<(u64, u64)>, WriteError> {
        let a = self.area(bg);
        let mut best: Option<(u64, u64)> = None;
        let mut run: Option<(u64, u64)> = None;
        let mut k = u64::MAX;
        let mut bm: Block = [0; BLOCK_SIZE];
        let mut i = 0u64;
        while i < a.count {
            if i / BITS_PER_BITMAP_BLOCK != k {
                k = i / BITS_PER_BITMAP_BLOCK;
                bm = self.read(t, a.bitmap.saturating_add(k))?;
            }
            // 64 blocks in use at once (a filling group is mostly these).
            let within = i % BITS_PER_BITMAP_BLOCK;
            if within % 64 == 0 && i.saturating_add(64) <= a.count {
                let at = usize::try_from(within / 8).unwrap_or(usize::MAX);
                let word = bm
                    .get(at..at.saturating_add(8))
                    .and_then(|w| <[u8; 8]>::try_from(w).ok())
                    .map_or(0, u64::from_le_bytes);
                if word == u64::MAX {
                    run = None;
                    i = i.saturating_add(64);
                    continue;
                }
            }
            let lba = a.data.saturating_add(i);
            let free = !bit(&bm, i % BITS_PER_BITMAP_BLOCK) && !t.freed.contains(&lba);
            if free {
                let r = run.map_or((lba, 1), |(s, l)| (s, l.saturating_add(1)));
                run = Some(r);
                if r.1 >= want {
                    return Ok(Some(r));
                }
                if best.is_none_or(|(_, l)| r.1 > l) {
                    best = Some(r);
                }
            } else {
                run = None;
            }
            i = i.saturating_add(1);
        }
        Ok(best)
    }

    /// Allocates an inode: bit clear and block all zero (section 8's in-use rule);
    /// marks its bit. `ENOSPC` when none is free.
    pub(super) fn alloc_inode(&mut self, t: &mut Txn) -> Result<u64, WriteError> {
        let sb = *self.fs.superblock();
        let start = sb.raw().inode_bitmap_start.get();
        let count = sb.inode_count();
        let mut k = u64::MAX;
        let mut bm: Block = [0; BLOCK_SIZE];
        let from = self.inode_hint.max(2);
        for n in (from..count).chain(2..from.min(count)) {
            if n / BITS_PER_BITMAP_BLOCK != k {
                k = n / BITS_PER_BITMAP_BLOCK;
                bm = self.read(t, start.saturating_add(k))?;
            }
            if bit(&bm, n % BITS_PER_BITMAP_BLOCK) || t.freed_inodes.contains(&n) {
                continue;
            }
            let blk = self.read(t, sb.raw().inode_table_start.get().saturating_add(n))?;
            if blk.iter().any(|b| *b != 0) {
                continue;
            }
            set_bit(&mut bm, n % BITS_PER_BITMAP_BLOCK, true);
            Self::put(t, start.saturating_add(k), bm);
            self.inode_hint = n.saturating_add(1);
            return Ok(n);
        }
        Err(Errno::ENOSPC.into())
    }

    /// Frees inode `ino`: its block zeroed and its bit cleared, in the transaction.
    pub(super) fn free_inode(&mut self, t: &mut Txn, ino: u64) -> Result<(), WriteError> {
        let sb = *self.fs.superblock();
        let start = sb.raw().inode_bitmap_start.get();
        let blk = start.saturating_add(ino / BITS_PER_BITMAP_BLOCK);
        let mut bm = self.read(t, blk)?;
        set_bit(&mut bm, ino % BITS_PER_BITMAP_BLOCK, false);
        Self::put(t, blk, bm);
        Self::put(
            t,
            sb.raw().inode_table_start.get().saturating_add(ino),
            [0; BLOCK_SIZE],
        );
        t.freed_inodes.insert(ino);
        Ok(())
    }
}

/// A block outside every data area, where a structure says data lies.
pub(super) fn bad_block(lba: u64) -> WriteError {
    WriteError::Device(Error::new(
        ErrorKind::OutOfRange { value: lba, max: 0 },
        "extent.physical (outside every data area)",
        lba.saturating_mul(tet_core::block::BLOCK_SIZE_U64),
    ))
}
