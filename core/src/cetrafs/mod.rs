//! cetrafs format 0x0006 (`docs/cetrafs.md`): raw structures, validated views, a
//! read-only filesystem over any [`BlockDevice`](crate::block::BlockDevice), and journal
//! inspection. No allocation: every walk uses caller-owned [`Buffers`], or one [`Block`]
//! where RAM is tight (see [`Scratch`]).

pub mod check;
pub mod raw;
pub mod replay;

pub mod copies;
mod dir;
mod fs;
mod groups;
mod inode;
mod journal;
mod read;
mod scratch;
mod superblock;
mod tree;

pub use check::{Code, Finding};
pub use dir::{DirEntry, FileType, Xattr, MAX_PATH_COMPONENTS};
pub use fs::Fs;
pub use groups::{BlockGroup, NodeRow, NodeState, PendingFree, ZoneGroup};
pub use inode::Inode;
pub use journal::{
    Committed, JournalFlag, JournalProblem, Overlay, OverlayDevice, Slot, SlotClass,
};
pub use read::Stat;
pub use scratch::{Buffers, Scratch};
pub use superblock::{Features, Region, Superblock, ANY_DEVICE, REGION_NAMES};
pub use tree::{Extent, Mapping, TreeEvent, TreeProblem};

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use crate::block::{Block, BLOCK_SIZE_U64};
use crate::error::{Error, ErrorKind};

/// `CTFS`.
pub const SB_MAGIC: [u8; 4] = *b"CTFS";
/// `CTZG`.
pub const ZG_MAGIC: [u8; 4] = *b"CTZG";
/// `CTZC`.
pub const ZG_COLD_MAGIC: [u8; 4] = *b"CTZC";
/// `CTBG`.
pub const BG_MAGIC: [u8; 4] = *b"CTBG";
/// `CTRH`.
pub const RH_MAGIC: [u8; 4] = *b"CTRH";
/// `CTND`.
pub const NODE_MAGIC: [u8; 4] = *b"CTND";
/// `CTPF`.
pub const PF_MAGIC: [u8; 4] = *b"CTPF";
/// `CTJF`.
pub const JF_MAGIC: [u8; 4] = *b"CTJF";
/// `CTJS`.
pub const JS_MAGIC: [u8; 4] = *b"CTJS";
/// `CTIN`.
pub const INODE_MAGIC: [u8; 4] = *b"CTIN";
/// Extent header magic.
pub const EXTENT_MAGIC: u16 = 0xCE7A;
/// `CTET`.
pub const TAIL_EXTENT: [u8; 4] = *b"CTET";
/// `CTDR`.
pub const TAIL_DIR: [u8; 4] = *b"CTDR";
/// `CTXA`.
pub const TAIL_XATTR: [u8; 4] = *b"CTXA";
/// The format version this crate reads.
pub const FORMAT_VERSION: u32 = 0x0006;
/// `owner_node_id` of an unowned zone group.
pub const ZG_NO_OWNER: u16 = 0xFFFF;
/// Superblock size.
pub const SUPERBLOCK_LEN: usize = 424;
/// Offset of the superblock checksum.
pub const SB_CHECKSUM_AT: usize = 416;
/// Offset of the zone group cold part.
pub const ZG_COLD_AT: usize = 512;
/// Data blocks one bitmap block maps.
pub const BITS_PER_BITMAP_BLOCK: u64 = 32768;
/// Registry rows per block.
pub const ROWS_PER_BLOCK: u64 = 32;
/// Pending-free entries per block.
pub const PENDING_PER_BLOCK: u64 = 256;
/// Offset of the 16-byte tail in tree, directory and xattr blocks.
pub const TAIL_AT: usize = 4080;
/// Directory entries per block.
pub const DIRENTS_PER_BLOCK: usize = 15;
/// Xattr entries per block.
pub const XATTRS_PER_BLOCK: usize = 12;
/// Leaf extents per tree block.
pub const LEAF_MAX: u16 = 254;
/// Index entries per interior tree block.
pub const INDEX_MAX: u16 = 339;
/// Inline slots in the inode.
pub const INLINE_SLOTS: u16 = 4;
/// Deepest extent tree.
pub const MAX_DEPTH: u16 = 2;
/// Uninitialized-extent flag in `len`.
pub const EXTENT_UNINIT: u32 = 1 << 31;
/// Journal slot flag: the target was unallocated before.
pub const F_FRESH: u32 = 1;
/// Journal slot flag: last slot of a committed transaction.
pub const F_COMMIT: u32 = 2;
/// Journal flag block state: nothing to replay.
pub const JOURNAL_CLEAN: u32 = 0;
/// Journal flag block state: committed transactions may need replay.
pub const JOURNAL_DIRTY: u32 = 1;
/// Superblock flag: cleanly unmounted.
pub const SB_CLEAN: u32 = 1;

/// Blocks of data bitmap for a group of `length_blocks`: `ceil((length − 1) / 32769)`.
pub fn bitmap_blocks(length_blocks: u64) -> u64 {
    crate::arith::div_ceil(
        length_blocks.saturating_sub(1),
        BITS_PER_BITMAP_BLOCK.saturating_add(1),
    )
}

/// Absolute byte offset of `field` in block `lba`, saturating.
#[inline(never)]
pub(crate) fn at(lba: u64, field: usize) -> u64 {
    lba.saturating_mul(BLOCK_SIZE_U64)
        .saturating_add(crate::arith::u64_of(field))
}

/// The error about `field` of block `lba`, as the error type `E` the caller reports
/// (for [`Fault`](crate::Fault) only the kind's category survives, and the optimiser
/// drops the rest).
pub(crate) fn err<E: From<Error>>(
    kind: ErrorKind,
    what: &'static str,
    lba: u64,
    field: usize,
) -> E {
    E::from(Error::new(kind, what, at(lba, field)))
}

pub(crate) fn check_magic<E: From<Error>>(
    found: [u8; 4],
    expected: [u8; 4],
    what: &'static str,
    lba: u64,
    field: usize,
) -> Result<(), E> {
    if found == expected {
        Ok(())
    } else {
        Err(err(
            ErrorKind::BadMagic { expected, found },
            what,
            lba,
            field,
        ))
    }
}

/// Verifies a checksum stored at `field` over `bytes` (which start at `base` in block `lba`).
pub(crate) fn check_crc<E: From<Error>>(
    bytes: &[u8],
    field: usize,
    stored: u64,
    what: &'static str,
    lba: u64,
    base: usize,
) -> Result<(), E> {
    let computed = crate::checksum::crc32c_skipping(bytes, field);
    if computed == stored {
        Ok(())
    } else {
        Err(err(
            ErrorKind::ChecksumMismatch { stored, computed },
            what,
            lba,
            base.saturating_add(field),
        ))
    }
}

/// Reads a structure that starts with a 4-byte magic and carries its own checksum at
/// `crc_field`: `bytes` are exactly the structure, found at byte `base` of block `lba`.
/// Checks the magic, then the checksum; `names` are the magic's and checksum's field names.
pub(crate) fn sealed<'b, T: FromBytes + KnownLayout + Immutable + Unaligned, E: From<Error>>(
    bytes: &'b [u8],
    magic: [u8; 4],
    crc_field: usize,
    names: (&'static str, &'static str),
    lba: u64,
    base: usize,
) -> Result<&'b T, E> {
    // A reference, not a copy: structures run to 424 bytes, and small stacks count.
    let raw = T::ref_from_bytes(bytes).map_err(|_| {
        err(
            ErrorKind::Truncated {
                needed: crate::arith::u64_of(core::mem::size_of::<T>()),
                available: crate::arith::u64_of(bytes.len()),
            },
            names.0,
            lba,
            base,
        )
    })?;
    let found = bytes
        .get(..4)
        .and_then(|m| <[u8; 4]>::try_from(m).ok())
        .unwrap_or_default();
    check_magic::<E>(found, magic, names.0, lba, base)?;
    let stored = bytes
        .get(crc_field..crc_field.saturating_add(8))
        .and_then(|b| <[u8; 8]>::try_from(b).ok())
        .map_or(0, u64::from_le_bytes);
    check_crc::<E>(bytes, crc_field, stored, names.1, lba, base)?;
    Ok(raw)
}

/// Checks that a reserved field (`bytes`, found at byte `field` of block `lba`) is all
/// zero, naming the first nonzero byte.
pub(crate) fn zero<E: From<Error>>(
    bytes: &[u8],
    what: &'static str,
    lba: u64,
    field: usize,
) -> Result<(), E> {
    match bytes.iter().position(|b| *b != 0) {
        None => Ok(()),
        Some(i) => Err(err(
            ErrorKind::NonZero {
                value: bytes.get(i).copied().unwrap_or(0).into(),
            },
            what,
            lba,
            field.saturating_add(i),
        )),
    }
}

/// Checks the 16-byte `{magic, crc}` tail of a tree, directory or xattr block: the magic
/// at byte 4080, and the crc (at 4088) over the whole block.
pub(crate) fn check_tail<E: From<Error>>(
    block: &Block,
    lba: u64,
    magic: [u8; 4],
    names: (&'static str, &'static str),
) -> Result<(), E> {
    let tail = raw::RawTail::read_from_bytes(block.get(TAIL_AT..).unwrap_or(&[]))
        .map_err(|_| err::<E>(ErrorKind::Invalid, names.0, lba, TAIL_AT))?;
    check_magic::<E>(tail.magic, magic, names.0, lba, TAIL_AT)?;
    check_crc::<E>(
        &block[..],
        TAIL_AT.saturating_add(8),
        tail.crc.get(),
        names.1,
        lba,
        0,
    )?;
    zero(
        tail.reserved.as_bytes(),
        "block tail reserved",
        lba,
        TAIL_AT.saturating_add(4),
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn dbm_matches_the_summary() {
        assert_eq!(super::bitmap_blocks(262_144), 8);
        assert_eq!(262_144 - 1 - super::bitmap_blocks(262_144), 262_135);
        assert_eq!(super::bitmap_blocks(3), 1);
        assert_eq!(super::bitmap_blocks(32_770), 1);
        assert_eq!(super::bitmap_blocks(32_771), 2);
    }
}
