//! `.tet` layout v1: raw structures, validated views, a reader and a verifier.
//!
//! * [`TetFile::open`] checks everything that has a fixed place (superblock, dataset
//!   directory, `TIDX` header, `THST` footer tail) in `O(datasets)` and rejects the first
//!   error; warnings (reserved bits, padding) do not stop it.
//! * Rows are checked when they are read ([`TetFile::chunk`]), and all of them at once by
//!   [`verify()`], which also proves that every grid cell is covered exactly once and that
//!   no two payloads overlap.

pub mod fold;
pub mod raw;
pub mod select;
pub mod zstd;

mod checksums;
mod directory;
mod file;
mod finding;
mod footer;
mod index;
mod superblock;
mod verify;

pub use checksums::{ChecksumTable, CHECKSUM_ENTRY_LEN};
pub use directory::{Dataset, DatasetIter, Directory};
pub use file::{Chunk, TetFile};
pub use finding::{Code, Finding, FirstError, Severity, Sink};
pub use footer::Footer;
pub use index::{ExecutionSettings, IndexHeader};
pub use superblock::Superblock;
pub use verify::{scratch_words, verify, Span, VerifyOptions, VerifySummary};

use core::fmt;

/// `TETR`.
pub const SUPERBLOCK_MAGIC: [u8; 4] = *b"TETR";
/// `TIDX`.
pub const INDEX_MAGIC: [u8; 4] = *b"TIDX";
/// `THST`.
pub const FOOTER_MAGIC: [u8; 4] = *b"THST";
/// The only layout version defined.
pub const LAYOUT_VERSION: u32 = 1;
/// The only index version defined.
pub const INDEX_VERSION: u32 = 1;
/// The only history footer version defined.
pub const HISTORY_VERSION: u32 = 1;
/// Superblock flag: a `THST` history footer ends the file.
pub const FLAG_HISTORY_FOOTER: u32 = 1;
/// Superblock size.
pub const SUPERBLOCK_LEN: u64 = 32;
/// Offset of `dataset_blob_len`.
pub const DIRECTORY_OFFSET: u64 = 32;
/// Offset of the first dataset record.
pub const RECORDS_OFFSET: u64 = 40;
/// `TIDX` header size.
pub const INDEX_HEADER_LEN: u64 = 32;
/// Index row size.
pub const INDEX_ENTRY_LEN: u64 = 104;
/// Footer tail size.
pub const FOOTER_TAIL_LEN: u64 = 16;
/// Largest rank.
pub const MAX_NDIM: usize = 8;

/// Typed dataset index (0-based position in the directory).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct DatasetId(pub u32);

/// Element types, by their wire tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum DType {
    F32,
    F64,
    I32,
    I64,
    U8,
    U16,
    I16,
    U32,
    F16,
    U64,
}

impl DType {
    /// Every type, in tag order.
    pub const ALL: [DType; 10] = [
        DType::F32,
        DType::F64,
        DType::I32,
        DType::I64,
        DType::U8,
        DType::U16,
        DType::I16,
        DType::U32,
        DType::F16,
        DType::U64,
    ];

    /// The type for a wire tag (1 ..= 10).
    pub fn from_tag(tag: u32) -> Option<DType> {
        let i = usize::try_from(tag.checked_sub(1)?).ok()?;
        DType::ALL.get(i).copied()
    }

    /// The wire tag.
    pub fn tag(self) -> u32 {
        match self {
            DType::F32 => 1,
            DType::F64 => 2,
            DType::I32 => 3,
            DType::I64 => 4,
            DType::U8 => 5,
            DType::U16 => 6,
            DType::I16 => 7,
            DType::U32 => 8,
            DType::F16 => 9,
            DType::U64 => 10,
        }
    }

    /// Bytes per element.
    pub fn size(self) -> u64 {
        match self {
            DType::U8 => 1,
            DType::U16 | DType::I16 | DType::F16 => 2,
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F64 | DType::I64 | DType::U64 => 8,
        }
    }

    /// Whether the type is a float (`f16`, `f32`, `f64`).
    pub fn is_float(self) -> bool {
        matches!(self, DType::F16 | DType::F32 | DType::F64)
    }

    /// Lower-case name (`f32`, `u8`, ...).
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::U8 => "u8",
            DType::U16 => "u16",
            DType::I16 => "i16",
            DType::U32 => "u32",
            DType::F16 => "f16",
            DType::U64 => "u64",
        }
    }
}

/// Payload codecs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Codec {
    /// Stored bytes are the tile, `stored_byte_len == raw_byte_len`.
    Raw,
    /// Stored bytes are one zstd frame decoding to `raw_byte_len` bytes.
    Zstd,
}

impl Codec {
    /// The codec for a wire value.
    pub fn from_wire(v: u32) -> Option<Codec> {
        match v {
            0 => Some(Codec::Raw),
            1 => Some(Codec::Zstd),
            _ => None,
        }
    }

    /// The wire value.
    pub fn wire(self) -> u32 {
        match self {
            Codec::Raw => 0,
            Codec::Zstd => 1,
        }
    }

    /// `raw` or `zstd`.
    pub fn name(self) -> &'static str {
        match self {
            Codec::Raw => "raw",
            Codec::Zstd => "zstd",
        }
    }
}

/// Chunk grid coordinates of rank 1 ..= 8, stored inline.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Coords {
    len: u8,
    v: [u64; MAX_NDIM],
}

impl Coords {
    /// Coordinates from a slice; `None` if longer than 8.
    pub fn from_slice(s: &[u64]) -> Option<Coords> {
        let mut c = Coords::default();
        c.v.get_mut(..s.len())?.copy_from_slice(s);
        c.len = u8::try_from(s.len()).ok()?;
        Some(c)
    }

    /// The coordinates.
    pub fn as_slice(&self) -> &[u64] {
        self.v.get(..usize::from(self.len)).unwrap_or(&[])
    }
}

impl fmt::Display for Coords {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("(")?;
        for (i, c) in self.as_slice().iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{c}")?;
        }
        f.write_str(")")
    }
}

#[cfg(test)]
mod tests;
