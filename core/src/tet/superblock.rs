//! The 32-byte superblock.

use zerocopy::FromBytes;

use super::finding::{Code, Finding, Sink};
use super::raw::{off, RawSuperblock};
use super::{FLAG_HISTORY_FOOTER, LAYOUT_VERSION, SUPERBLOCK_LEN, SUPERBLOCK_MAGIC};
use crate::arith::u64_of;
use crate::error::{Error, ErrorKind};

/// A superblock whose magic and version are correct.
#[derive(Clone, Copy, Debug)]
pub struct Superblock {
    raw: RawSuperblock,
}

impl Superblock {
    /// Parses the superblock at the start of `bytes`. Fatal problems (short file, magic,
    /// version) are returned; undefined flag bits are reported to `sink` as warnings.
    pub fn parse(bytes: &[u8], sink: &mut dyn Sink<Finding>) -> Result<Superblock, Finding> {
        let Ok((raw, _)) = RawSuperblock::read_from_prefix(bytes) else {
            return Err(Finding::new(
                Code::FileTruncated,
                Error::new(
                    ErrorKind::Truncated {
                        needed: SUPERBLOCK_LEN,
                        available: u64_of(bytes.len()),
                    },
                    "superblock",
                    0,
                ),
            ));
        };
        if raw.magic != SUPERBLOCK_MAGIC {
            return Err(Finding::new(
                Code::SuperblockMagic,
                Error::new(
                    ErrorKind::BadMagic {
                        expected: SUPERBLOCK_MAGIC,
                        found: raw.magic,
                    },
                    "superblock.magic",
                    off::sb::MAGIC,
                ),
            ));
        }
        let version = raw.layout_version.get();
        if version != LAYOUT_VERSION {
            return Err(Finding::new(
                Code::LayoutVersion,
                Error::new(
                    ErrorKind::Unsupported {
                        version: version.into(),
                    },
                    "superblock.layout_version",
                    off::sb::LAYOUT_VERSION,
                ),
            ));
        }
        let unknown = raw.flags.get() & !FLAG_HISTORY_FOOTER;
        if unknown != 0 {
            sink.report(&Finding::new(
                Code::SuperblockFlags,
                Error::new(
                    ErrorKind::UnknownFlags {
                        bits: unknown.into(),
                    },
                    "superblock.flags",
                    off::sb::FLAGS,
                ),
            ));
        }
        Ok(Superblock { raw })
    }

    /// The raw fields, for tools that must show them.
    pub fn raw(&self) -> &RawSuperblock {
        &self.raw
    }

    /// Number of dataset records.
    pub fn dataset_count(&self) -> u32 {
        self.raw.dataset_count.get()
    }

    /// The flags word as stored.
    pub fn flags(&self) -> u32 {
        self.raw.flags.get()
    }

    /// Whether flag bit 0 announces a history footer.
    pub fn has_history_footer(&self) -> bool {
        self.flags() & FLAG_HISTORY_FOOTER != 0
    }

    /// `chunk_index_offset`.
    pub fn chunk_index_offset(&self) -> u64 {
        self.raw.chunk_index_offset.get()
    }

    /// `chunk_index_length`.
    pub fn chunk_index_length(&self) -> u64 {
        self.raw.chunk_index_length.get()
    }
}
