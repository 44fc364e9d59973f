//! The fixed records every writer builds the same way, sealed: zone and block group
//! descriptors, region headers and the flag block of a clean journal. mkfs writes them
//! from its geometry; repair rebuilds a damaged one from the superblock's (docs/cetrafs.md
//! section 14), so both go through these functions and nothing else spells the layout.

use tet_core::block::{Block, BLOCK_SIZE};
use tet_core::cetrafs::raw::{
    RawBlockGroup, RawJournalFlag, RawRegionHeader, RawZoneGroupCold, RawZoneGroupHot,
};
use tet_core::cetrafs::{
    bitmap_blocks, BG_MAGIC, JF_MAGIC, JOURNAL_CLEAN, RH_MAGIC, ZG_COLD_AT, ZG_COLD_MAGIC, ZG_MAGIC,
};
use tet_core::checksum::crc32c_skipping;
use zerocopy::{FromZeros, IntoBytes};

/// The descriptor of block group `bg_id`, `length` blocks from `start`, in zone group
/// `owner_zg`, with `free` free data blocks and its `reconcile_seq`.
pub fn block_group(
    bg_id: u32,
    owner_zg: u32,
    start: u64,
    length: u64,
    free: u64,
    reconcile_seq: u64,
) -> RawBlockGroup {
    let dbm = bitmap_blocks(length);
    let mut d = RawBlockGroup::new_zeroed();
    d.magic = BG_MAGIC;
    d.bg_id.set(bg_id);
    d.owner_zg.set(owner_zg);
    d.start_block.set(start);
    d.length_blocks.set(length);
    d.bitmap_offset.set(1);
    d.data_offset.set(dbm.saturating_add(1));
    d.data_block_count
        .set(length.saturating_sub(1).saturating_sub(dbm));
    d.free_data_blocks.set(free);
    d.reconcile_seq.set(reconcile_seq);
    d.checksum.set(crc32c_skipping(d.as_bytes(), 112));
    d
}

/// The region header of block group `bg_id`.
pub fn region_header(bg_id: u32, start: u64, length: u64) -> RawRegionHeader {
    let mut rh = RawRegionHeader::new_zeroed();
    rh.magic = RH_MAGIC;
    rh.bg_id.set(bg_id);
    rh.start_block.set(start);
    rh.length_blocks.set(length);
    rh.checksum.set(crc32c_skipping(rh.as_bytes(), 56));
    rh
}

/// The hot part of zone group `zg_id`'s descriptor.
pub fn zone_group_hot(zg_id: u32, owner: u16, free: u64, hb_seq: u64) -> RawZoneGroupHot {
    let mut hot = RawZoneGroupHot::new_zeroed();
    hot.magic = ZG_MAGIC;
    hot.zg_id.set(zg_id);
    hot.owner_node_id.set(owner);
    hot.free_data_blocks.set(free);
    hot.hb_seq.set(hb_seq);
    hot.hot_checksum.set(crc32c_skipping(hot.as_bytes(), 56));
    hot
}

/// The cold part of a zone group's descriptor: its block groups.
pub fn zone_group_cold(first_bg_id: u32, bg_count: u32) -> RawZoneGroupCold {
    let mut cold = RawZoneGroupCold::new_zeroed();
    cold.magic = ZG_COLD_MAGIC;
    cold.first_bg_id.set(first_bg_id);
    cold.bg_count.set(bg_count);
    cold.cold_checksum.set(crc32c_skipping(cold.as_bytes(), 56));
    cold
}

/// A zone group's block: the hot part in its first sector, the cold part at
/// [`ZG_COLD_AT`], zeros elsewhere.
pub fn zone_group_block(hot: &RawZoneGroupHot, cold: &RawZoneGroupCold) -> Block {
    let mut b: Block = [0; BLOCK_SIZE];
    put(&mut b, 0, hot.as_bytes());
    put(&mut b, ZG_COLD_AT, cold.as_bytes());
    b
}

/// The flag block of a clean journal of registry `row`, at state-change count `seq`.
pub fn clean_journal_flag(row: u32, seq: u64) -> RawJournalFlag {
    let mut f = RawJournalFlag::new_zeroed();
    f.magic = JF_MAGIC;
    f.state.set(JOURNAL_CLEAN);
    f.row.set(row);
    f.seq.set(seq);
    f.checksum.set(crc32c_skipping(f.as_bytes(), 56));
    f
}

/// A block holding `record` at its start, zeros after.
pub fn block_with(record: &[u8]) -> Block {
    let mut b: Block = [0; BLOCK_SIZE];
    put(&mut b, 0, record);
    b
}

fn put(b: &mut Block, at: usize, bytes: &[u8]) {
    if let Some(dst) = b.get_mut(at..at.saturating_add(bytes.len())) {
        dst.copy_from_slice(bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tet_core::cetrafs::{BlockGroup, ZoneGroup};

    #[test]
    fn records_parse_as_the_reader_expects() {
        let d = block_group(3, 1, 8193, 2048, 2000, 7);
        let b = block_with(d.as_bytes());
        let bg = BlockGroup::parse(&b, 6, 3, 8193, 2048, 1).unwrap();
        assert_eq!(bg.raw().data_block_count.get(), 2046);
        assert_eq!(bg.raw().reconcile_seq.get(), 7);
        let z = zone_group_block(&zone_group_hot(1, 0xFFFF, 9, 0), &zone_group_cold(2, 2));
        let zg = ZoneGroup::parse(&z, 2, 1).unwrap();
        assert_eq!(
            (zg.cold().first_bg_id.get(), zg.cold().bg_count.get()),
            (2, 2)
        );
        assert_eq!(zg.hot().free_data_blocks.get(), 9);
        assert_eq!(zg.owner(), None);
    }
}
