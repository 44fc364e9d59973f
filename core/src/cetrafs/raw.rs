//! On-disk structures of cetrafs 0x0006, byte for byte (tables in `docs/cetrafs.md`).
//! Nothing here is validated: use the views in the parent module.

use zerocopy::little_endian::{U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

macro_rules! raw {
    ($(#[$m:meta])* $name:ident, $size:expr, { $($(#[$fm:meta])* $f:ident : $t:ty,)* }) => {
        $(#[$m])*
        #[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
        #[repr(C)]
        pub struct $name { $($(#[$fm])* pub $f: $t,)* }
        const _: () = assert!(core::mem::size_of::<$name>() == $size);
    };
}

raw!(
    /// Superblock, LBA 0 (424 bytes).
    RawSuperblock, 424, {
    /// 0: `CTFS`.
    magic: [u8; 4],
    /// 4: `0x0006`.
    format_version: U32,
    /// 8: 4096.
    block_size: U32,
    /// 12: bit 0 `SB_CLEAN`.
    sb_flags: U32,
    /// 16.
    uuid: [u8; 16],
    /// 32.
    total_blocks: U64,
    /// 40.
    feature_compat: U64,
    /// 48.
    feature_incompat: U64,
    /// 56.
    feature_ro_compat: U64,
    /// 64: Z.
    zone_group_count: U32,
    /// 68: B.
    block_group_count: U32,
    /// 72: 1.
    zg_table_start: U64,
    /// 80: 1 + Z.
    bg_table_start: U64,
    /// 88.
    inode_bitmap_start: U64,
    /// 96.
    inode_bitmap_blocks: U64,
    /// 104.
    inode_table_start: U64,
    /// 112.
    inode_count: U64,
    /// 120.
    registry_start: U64,
    /// 128.
    registry_blocks: U64,
    /// 136: N.
    node_capacity: U32,
    /// 140.
    pending_slots_per_zg: U32,
    /// 144.
    pending_start: U64,
    /// 152.
    pending_blocks: U64,
    /// 160.
    node_journal_start: U64,
    /// 168.
    node_journal_blocks: U64,
    /// 176.
    bg_regions_start: U64,
    /// 184.
    bg_size_blocks: U64,
    /// 192: 1.
    root_inode: U64,
    /// 200.
    label: [u8; 64],
    /// 264.
    mkfs_time: U64,
    /// 272: advanced by every rewrite after mkfs (copies: the newest wins).
    generation: U64,
    /// 280: the record's own absolute byte offset: 0 in the primary, the copy's place
    /// in a copy (`COMPAT_SB_COPIES`, taken from reserved space).
    location: U64,
    /// 288.
    reserved: [u8; 128],
    /// 416.
    checksum: U64,
});

raw!(
    /// Zone group hot part, bytes 0..64 of its block.
    RawZoneGroupHot, 64, {
    /// 0: `CTZG`.
    magic: [u8; 4],
    /// 4.
    reserved0: U32,
    /// 8.
    zg_id: U32,
    /// 12: registry row or `0xFFFF`.
    owner_node_id: U16,
    /// 14.
    reserved1: U16,
    /// 16.
    free_data_blocks: U64,
    /// 24.
    hb_seq: U64,
    /// 32.
    reserved2: [u8; 24],
    /// 56.
    hot_checksum: U64,
});

raw!(
    /// Zone group cold part, bytes 512..576 of its block.
    RawZoneGroupCold, 64, {
    /// 512: `CTZC`.
    magic: [u8; 4],
    /// 516.
    first_bg_id: U32,
    /// 520.
    bg_count: U32,
    /// 524.
    reserved: [u8; 44],
    /// 568.
    cold_checksum: U64,
});

raw!(
    /// Block group descriptor (128 bytes).
    RawBlockGroup, 128, {
    /// 0: `CTBG`.
    magic: [u8; 4],
    /// 4.
    bg_id: U32,
    /// 8.
    owner_zg: U32,
    /// 12.
    reserved0: U32,
    /// 16.
    start_block: U64,
    /// 24.
    length_blocks: U64,
    /// 32: 0.
    header_offset: U64,
    /// 40: 1.
    bitmap_offset: U64,
    /// 48: 1 + dbm.
    data_offset: U64,
    /// 56.
    data_block_count: U64,
    /// 64.
    free_data_blocks: U64,
    /// 72.
    reserved1: [u8; 40],
    /// 112.
    checksum: U64,
    /// 120.
    reconcile_seq: U64,
});

raw!(
    /// Block group region header (64 bytes).
    RawRegionHeader, 64, {
    /// 0: `CTRH`.
    magic: [u8; 4],
    /// 4.
    bg_id: U32,
    /// 8.
    start_block: U64,
    /// 16.
    length_blocks: U64,
    /// 24.
    reserved: [u8; 32],
    /// 56.
    checksum: U64,
});

raw!(
    /// Node registry row (128 bytes).
    RawNodeRow, 128, {
    /// 0: `CTND`.
    magic: [u8; 4],
    /// 4.
    row: U32,
    /// 8.
    node_id: U64,
    /// 16.
    state: U32,
    /// 20.
    reserved0: U32,
    /// 24.
    lease_seq: U64,
    /// 32.
    last_heartbeat: U64,
    /// 40.
    journal_start: U64,
    /// 48.
    hostname: [u8; 64],
    /// 112.
    reserved1: [u8; 8],
    /// 120.
    checksum: U64,
});

raw!(
    /// Pending-free entry (16 bytes).
    RawPendingFree, 16, {
    /// 0.
    lba: U64,
    /// 8.
    count: U32,
    /// 12: `CTPF`.
    magic: [u8; 4],
});

raw!(
    /// Journal flag block (64 bytes).
    RawJournalFlag, 64, {
    /// 0: `CTJF`.
    magic: [u8; 4],
    /// 4: 0 clean, 1 dirty.
    state: U32,
    /// 8.
    replay_owner: U64,
    /// 16.
    seq: U64,
    /// 24.
    row: U32,
    /// 28: the transaction a replay or checkpoint is writing, 0 = none (taken from
    /// reserved space without a feature bit: `docs/cetrafs.md` sections 1 and 11.1).
    replaying_txn: U64,
    /// 36.
    reserved: [u8; 20],
    /// 56.
    checksum: U64,
});

raw!(
    /// Journal slot header (64 bytes).
    RawSlotHeader, 64, {
    /// 0: `CTJS`.
    magic: [u8; 4],
    /// 4: `F_FRESH`, `F_COMMIT`.
    flags: U32,
    /// 8.
    txn_id: U64,
    /// 16.
    target_lba: U64,
    /// 24.
    payload_checksum: U64,
    /// 32.
    pre_checksum: U64,
    /// 40.
    txn_index: U32,
    /// 44.
    txn_slots: U32,
    /// 48.
    reserved: [u8; 8],
    /// 56.
    header_checksum: U64,
});

raw!(
    /// Extent header (12 bytes).
    RawExtentHeader, 12, {
    /// 0: `0xCE7A`.
    magic: U16,
    /// 2.
    entries: U16,
    /// 4.
    max: U16,
    /// 6.
    depth: U16,
    /// 8.
    generation: U32,
});

raw!(
    /// Leaf extent (16 bytes).
    RawExtent, 16, {
    /// 0.
    logical: U32,
    /// 4: length in bits 0..31, bit 31 uninitialized.
    len: U32,
    /// 8.
    physical: U64,
});

raw!(
    /// Index entry (12 bytes).
    RawExtentIndex, 12, {
    /// 0.
    logical: U32,
    /// 4.
    child: U64,
});

raw!(
    /// Tree, directory and xattr block tail (16 bytes at 4080).
    RawTail, 16, {
    /// 0.
    magic: [u8; 4],
    /// 4.
    reserved: U32,
    /// 8.
    crc: U64,
});

raw!(
    /// Inode (256 bytes at the start of its block).
    RawInode, 256, {
    /// 0: `CTIN`.
    magic: [u8; 4],
    /// 4.
    flags: U32,
    /// 8.
    ino: U64,
    /// 16.
    mode: U32,
    /// 20.
    uid: U32,
    /// 24.
    gid: U32,
    /// 28.
    nlink: U32,
    /// 32.
    size: U64,
    /// 40.
    blocks: U64,
    /// 48.
    atime_ns: U64,
    /// 56.
    mtime_ns: U64,
    /// 64.
    ctime_ns: U64,
    /// 72.
    crtime_ns: U64,
    /// 80.
    generation: U64,
    /// 88.
    parent: U64,
    /// 96.
    xattr_block: U64,
    /// 104.
    extent_header: RawExtentHeader,
    /// 116: four 16-byte slots.
    slots: [u8; 64],
    /// 180.
    reserved: [u8; 68],
    /// 248.
    checksum: U64,
});

raw!(
    /// Directory entry (266 bytes).
    RawDirEntry, 266, {
    /// 0: 0 = empty.
    inode: U64,
    /// 8.
    name_len: U16,
    /// 10.
    file_type: u8,
    /// 11.
    name: [u8; 255],
});

raw!(
    /// Extended attribute entry (322 bytes).
    RawXattr, 322, {
    /// 0: NUL-padded; empty = free.
    key: [u8; 64],
    /// 64.
    value_len: U16,
    /// 66.
    value: [u8; 256],
});
