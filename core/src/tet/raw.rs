//! On-disk structures of `.tet` layout v1, byte for byte. Offsets are relative to the
//! start of the structure; `docs/tet-v1.md` has the tables these mirror. Nothing here is
//! validated: use the views in the parent module.

use zerocopy::little_endian::{U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

/// Superblock, at file offset 0 (32 bytes).
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct RawSuperblock {
    /// 0: `TETR`.
    pub magic: [u8; 4],
    /// 4: must be 1.
    pub layout_version: U32,
    /// 8: number of dataset records; 0 means no directory and no index.
    pub dataset_count: U32,
    /// 12: bit 0 (value 1) = history footer present; other bits undefined, must be 0.
    pub flags: U32,
    /// 16: `align8(40 + dataset_blob_len)`, or 32 when `dataset_count == 0`.
    pub chunk_index_offset: U64,
    /// 24: `32 + entry_count * 104`, or 0 when `dataset_count == 0`.
    pub chunk_index_length: U64,
}

/// Fixed head of a dataset record (16 bytes); the name, padding, shape and chunk shape
/// follow it.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct RawRecordHeader {
    /// 0: byte length of the UTF-8 name.
    pub name_len: U32,
    /// 4: element type tag, 1 ..= 10.
    pub dtype: U32,
    /// 8: rank, 1 ..= 8.
    pub ndim: U32,
    /// 12: must be 0.
    pub reserved: U32,
}

/// Chunk index (`TIDX`) header (32 bytes).
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct RawTidxHeader {
    /// 0: `TIDX`.
    pub magic: [u8; 4],
    /// 4: must be 1.
    pub index_version: U32,
    /// 8: number of 104-byte rows that follow.
    pub entry_count: U64,
    /// 16: memory budget in basis points of host RAM (10000 = 100 %); 0 = default 25 %.
    pub memory_budget_percent_bps: U16,
    /// 18: must be 0.
    pub reserved0: U16,
    /// 20: fixed memory budget in bytes; 0 = use the percentage.
    pub memory_budget_bytes: U32,
    /// 24: must be 0.
    pub reserved1: U64,
}

/// One chunk index row (104 bytes).
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct RawIndexEntry {
    /// 0: 0-based index into the dataset directory.
    pub dataset_id: U64,
    /// 8: chunk grid coordinates; slots at and past the dataset's `ndim` must be 0.
    pub chunk_index: [U64; 8],
    /// 72: file offset of the stored bytes.
    pub payload_offset: U64,
    /// 80: decoded size: clipped tile element count times dtype size.
    pub raw_byte_len: U64,
    /// 88: bytes on disk at `payload_offset`.
    pub stored_byte_len: U64,
    /// 96: 0 = raw, 1 = zstd.
    pub codec: U32,
    /// 100: must be 0.
    pub reserved: U32,
}

impl RawIndexEntry {
    /// The eight `chunk_index` slots as integers.
    pub fn coords(&self) -> [u64; 8] {
        self.chunk_index.map(|c| c.get())
    }
}

/// The last 16 bytes of a file whose superblock has flag bit 0 set.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct RawFooterTail {
    /// 0: byte length of `history_json`, which ends where this tail begins.
    pub history_json_len: U64,
    /// 8: must be 1.
    pub history_version: U32,
    /// 12: `THST`.
    pub magic: [u8; 4],
}

/// One entry of the chunk checksum table (16 bytes; entry `i` belongs to index row `i`;
/// docs/tet-v1.md, "Chunk checksums").
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
pub struct RawChecksumEntry {
    /// 0: the row's `payload_offset` when the checksum was taken; an entry whose offset
    /// differs from its row's (the row was repointed, e.g. by repair) does not apply.
    pub payload_offset: U64,
    /// 8: CRC-32C (Castagnoli, reflected, init and final xor `0xffffffff`) of the row's
    /// `stored_byte_len` stored bytes.
    pub crc32c: U32,
    /// 12: zero.
    pub reserved: U32,
}

const _: () = assert!(core::mem::size_of::<RawSuperblock>() == 32);
const _: () = assert!(core::mem::size_of::<RawChecksumEntry>() == 16);
const _: () = assert!(core::mem::size_of::<RawRecordHeader>() == 16);
const _: () = assert!(core::mem::size_of::<RawTidxHeader>() == 32);
const _: () = assert!(core::mem::size_of::<RawIndexEntry>() == 104);
const _: () = assert!(core::mem::size_of::<RawFooterTail>() == 16);

/// Byte offsets of fields, for error reporting (kept next to the structs they describe).
pub mod off {
    /// Superblock field offsets.
    pub mod sb {
        /// `magic`.
        pub const MAGIC: u64 = 0;
        /// `layout_version`.
        pub const LAYOUT_VERSION: u64 = 4;
        /// `dataset_count`.
        pub const DATASET_COUNT: u64 = 8;
        /// `flags`.
        pub const FLAGS: u64 = 12;
        /// `chunk_index_offset`.
        pub const CHUNK_INDEX_OFFSET: u64 = 16;
        /// `chunk_index_length`.
        pub const CHUNK_INDEX_LENGTH: u64 = 24;
    }
    /// Record header field offsets.
    pub mod rec {
        /// `name_len`.
        pub const NAME_LEN: u64 = 0;
        /// `dtype`.
        pub const DTYPE: u64 = 4;
        /// `ndim`.
        pub const NDIM: u64 = 8;
        /// `reserved`.
        pub const RESERVED: u64 = 12;
        /// First name byte.
        pub const NAME: u64 = 16;
    }
    /// TIDX header field offsets.
    pub mod tidx {
        /// `magic`.
        pub const MAGIC: u64 = 0;
        /// `index_version`.
        pub const INDEX_VERSION: u64 = 4;
        /// `entry_count`.
        pub const ENTRY_COUNT: u64 = 8;
        /// `memory_budget_percent_bps`.
        pub const BUDGET_BPS: u64 = 16;
        /// First reserved field.
        pub const RESERVED0: u64 = 18;
        /// `memory_budget_bytes`.
        pub const BUDGET_BYTES: u64 = 20;
        /// Second reserved field.
        pub const RESERVED1: u64 = 24;
    }
    /// Index row field offsets.
    pub mod row {
        /// `dataset_id`.
        pub const DATASET_ID: u64 = 0;
        /// `chunk_index[0]`.
        pub const CHUNK_INDEX: u64 = 8;
        /// `payload_offset`.
        pub const PAYLOAD_OFFSET: u64 = 72;
        /// `raw_byte_len`.
        pub const RAW_BYTE_LEN: u64 = 80;
        /// `stored_byte_len`.
        pub const STORED_BYTE_LEN: u64 = 88;
        /// `codec`.
        pub const CODEC: u64 = 96;
        /// `reserved`.
        pub const RESERVED: u64 = 100;
    }
    /// Footer tail offsets, relative to the tail's first byte.
    pub mod footer {
        /// `history_json_len`.
        pub const HISTORY_JSON_LEN: u64 = 0;
        /// `history_version`.
        pub const HISTORY_VERSION: u64 = 8;
        /// `magic`.
        pub const MAGIC: u64 = 12;
    }
}
