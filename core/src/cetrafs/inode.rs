//! [`Inode`]: the validated view of an inode block, and the extent header rules its
//! root and every tree block share.

use super::raw::{RawExtentHeader, RawInode};
use super::{err, sealed, EXTENT_MAGIC, INLINE_SLOTS, INODE_MAGIC, MAX_DEPTH};
use crate::block::Block;
use crate::error::{Error, ErrorKind, Result};

/// An inode whose magic, checksum, number and extent root are valid.
#[derive(Clone, Copy, Debug)]
pub struct Inode {
    pub(crate) raw: RawInode,
    pub(crate) ino: u64,
    pub(crate) lba: u64,
}

/// File type bits of `mode`.
pub const S_IFMT: u32 = 0o170_000;
/// Regular file.
pub const S_IFREG: u32 = 0o100_000;
/// Directory.
pub const S_IFDIR: u32 = 0o040_000;
/// Symbolic link.
pub const S_IFLNK: u32 = 0o120_000;

impl Inode {
    /// Parses inode `ino` from `block` (read from `lba`).
    pub fn parse(block: &Block, lba: u64, ino: u64) -> Result<Inode> {
        Inode::parse_as(block, lba, ino)
    }

    /// [`Inode::parse`] reporting `E` (see [`Fs::open_for_read_as`](super::Fs::open_for_read_as)),
    /// from the block's first 256 bytes or more.
    pub(crate) fn parse_as<E: From<Error>>(bytes: &[u8], lba: u64, ino: u64) -> Result<Inode, E> {
        let bytes = bytes.get(..256).unwrap_or(&[]);
        // Checked in the block, copied once into the result.
        let raw: &RawInode = sealed::<_, E>(
            bytes,
            INODE_MAGIC,
            248,
            ("inode.magic", "inode.checksum"),
            lba,
            0,
        )?;
        if raw.ino.get() != ino {
            return Err(err(
                ErrorKind::Mismatch {
                    expected: ino,
                    found: raw.ino.get(),
                },
                "inode.ino",
                lba,
                8,
            ));
        }
        if raw.flags.get() != 0 {
            return Err(err(
                ErrorKind::NonZero {
                    value: raw.flags.get().into(),
                },
                "inode.flags",
                lba,
                4,
            ));
        }
        let kind = raw.mode.get() & S_IFMT;
        if ![S_IFREG, S_IFDIR, S_IFLNK].contains(&kind) {
            return Err(err(
                ErrorKind::OutOfRange {
                    value: kind.into(),
                    max: S_IFLNK.into(),
                },
                "inode.mode",
                lba,
                16,
            ));
        }
        if raw.nlink.get() == 0 {
            return Err(err(ErrorKind::Zero, "inode.nlink", lba, 28));
        }
        let max_size = 1u64 << 44;
        if raw.size.get() > max_size {
            return Err(err(
                ErrorKind::OutOfRange {
                    value: raw.size.get(),
                    max: max_size,
                },
                "inode.size",
                lba,
                32,
            ));
        }
        let max_depth = if kind == S_IFDIR { 1 } else { MAX_DEPTH };
        check_header::<E>(&raw.extent_header, INLINE_SLOTS, max_depth, None, lba, 104)?;
        super::zero::<E>(&raw.reserved, "inode.reserved", lba, 180)?;
        // Unused inline bytes: slots past `entries`, and an index entry's last 4 bytes.
        let used = usize::from(raw.extent_header.entries.get());
        for (i, slot) in raw.slots.chunks_exact(16).enumerate() {
            let from = if i >= used {
                0
            } else if raw.extent_header.depth.get() > 0 {
                12
            } else {
                16
            };
            super::zero::<E>(
                slot.get(from..).unwrap_or(&[]),
                "inode extent slot (unused bytes)",
                lba,
                116usize
                    .saturating_add(i.saturating_mul(16))
                    .saturating_add(from),
            )?;
        }
        Ok(Inode {
            raw: *raw,
            ino,
            lba,
        })
    }

    /// The inode, as checked.
    pub fn raw(&self) -> &RawInode {
        &self.raw
    }

    /// Its number.
    pub fn ino(&self) -> u64 {
        self.ino
    }

    /// Its block.
    pub fn lba(&self) -> u64 {
        self.lba
    }

    /// Whether this is a directory.
    pub fn is_dir(&self) -> bool {
        self.raw.mode.get() & S_IFMT == S_IFDIR
    }

    /// Whether this is a symbolic link.
    pub fn is_symlink(&self) -> bool {
        self.raw.mode.get() & S_IFMT == S_IFLNK
    }

    /// File size in bytes.
    pub fn size(&self) -> u64 {
        self.raw.size.get()
    }

    /// Tree depth of the root.
    pub fn depth(&self) -> u16 {
        self.raw.extent_header.depth.get()
    }
}

pub(super) fn check_header<E: From<Error>>(
    h: &RawExtentHeader,
    max: u16,
    max_depth: u16,
    depth: Option<u16>,
    lba: u64,
    off: usize,
) -> Result<(), E> {
    if h.magic.get() != EXTENT_MAGIC {
        return Err(err(
            ErrorKind::Mismatch {
                expected: EXTENT_MAGIC.into(),
                found: h.magic.get().into(),
            },
            "extent_header.magic",
            lba,
            off,
        ));
    }
    if h.max.get() != max {
        return Err(err(
            ErrorKind::Mismatch {
                expected: max.into(),
                found: h.max.get().into(),
            },
            "extent_header.max",
            lba,
            off.saturating_add(4),
        ));
    }
    if h.entries.get() > max {
        return Err(err(
            ErrorKind::OutOfRange {
                value: h.entries.get().into(),
                max: max.into(),
            },
            "extent_header.entries",
            lba,
            off.saturating_add(2),
        ));
    }
    if h.generation.get() != 0 {
        return Err(err(
            ErrorKind::NonZero {
                value: h.generation.get().into(),
            },
            "extent_header.generation",
            lba,
            off.saturating_add(8),
        ));
    }
    let d = h.depth.get();
    match depth {
        Some(expected) if d != expected => Err(err(
            ErrorKind::Mismatch {
                expected: expected.into(),
                found: d.into(),
            },
            "extent_header.depth",
            lba,
            off.saturating_add(6),
        )),
        _ if d > max_depth => Err(err(
            ErrorKind::OutOfRange {
                value: d.into(),
                max: max_depth.into(),
            },
            "extent_header.depth",
            lba,
            off.saturating_add(6),
        )),
        _ => Ok(()),
    }
}
