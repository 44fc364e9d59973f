//! Superblock copies for the tools that check and write (`docs/cetrafs.md` section 3.1):
//! every copy compared with the superblock in use, and the primary and the copies
//! written in the order the spec fixes, so a power cut at any write leaves a valid
//! superblock.
//!
//! The records come from `tet_core::cetrafs::copies` ([`Superblock::copy_record`],
//! [`Superblock::primary_record`]); this module only reads and writes the sectors.

use alloc::vec::Vec;

use tet_core::block::{Block, BlockDevice, BlockDeviceMut, BLOCK_SIZE};
use tet_core::cetrafs::copies::{copy_offset, reseal, COMPAT_SB_COPIES, COPY_AT};
use tet_core::cetrafs::raw::RawSuperblock;
use tet_core::cetrafs::{Superblock, ANY_DEVICE, SUPERBLOCK_LEN};
use tet_core::{Error, ErrorKind};
use zerocopy::IntoBytes;

/// One place a copy belongs, and what is wrong there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CopyState {
    /// The block.
    pub lba: u64,
    /// `None` when the block holds exactly the copy the superblock in use makes;
    /// otherwise why not: the read's error, the copy's own check, or the first byte
    /// that differs ([`ErrorKind::Mismatch`] of the two bytes).
    pub problem: Option<Error>,
    /// Whether the copy's bytes are all zero (never written: repair adds the copy there
    /// without losing anything).
    pub blank: bool,
    /// Whether the block could not be read at all (`problem` is the device's error).
    pub unread: bool,
}

/// Each place `sb`'s geometry puts a copy, with its state (whether or not
/// `COMPAT_SB_COPIES` is set: without it, a blank place is what is expected).
pub fn audit<D: BlockDevice>(dev: &D, sb: &Superblock, buf: &mut Block) -> Vec<CopyState> {
    let mut out = Vec::new();
    for &lba in sb.copy_blocks().as_slice() {
        let state = match dev.read_block(lba, buf) {
            Err(e) => CopyState {
                lba,
                problem: Some(e),
                blank: false,
                unread: true,
            },
            Ok(()) => {
                let bytes = buf
                    .get(COPY_AT..COPY_AT.saturating_add(SUPERBLOCK_LEN))
                    .unwrap_or(&[]);
                let blank = bytes.iter().all(|b| *b == 0);
                let want = sb.copy_record(lba);
                let problem = match Superblock::parse_copy(buf, lba, ANY_DEVICE) {
                    Err(e) => Some(e),
                    Ok(_) => want
                        .as_bytes()
                        .iter()
                        .zip(bytes)
                        .position(|(w, h)| w != h)
                        .map(|i| {
                            let (w, h) = (
                                want.as_bytes().get(i).copied().unwrap_or(0),
                                bytes.get(i).copied().unwrap_or(0),
                            );
                            Error::new(
                                ErrorKind::Mismatch {
                                    expected: w.into(),
                                    found: h.into(),
                                },
                                "superblock_copy (a byte differs from the superblock in use)",
                                copy_offset(lba).saturating_add(tet_core::arith::u64_of(i)),
                            )
                        }),
                };
                CopyState {
                    lba,
                    problem,
                    blank,
                    unread: false,
                }
            }
        };
        out.push(state);
    }
    out
}

/// `sb` with `COMPAT_SB_COPIES` set and `generation` advanced: the superblock a tool
/// writes when it adds the copies.
pub fn with_copies(sb: &Superblock) -> RawSuperblock {
    let mut raw = sb.primary_record();
    let compat = raw.feature_compat.get() | COMPAT_SB_COPIES;
    raw.feature_compat.set(compat);
    raw.generation.set(raw.generation.get().saturating_add(1));
    reseal(&mut raw);
    raw
}

/// Rewrites the primary with `raw` (a resealed primary record, `location` 0): one write
/// of block 0 whose first sector holds all 424 bytes and whose other bytes are written
/// back as they read (zeros when block 0 cannot be read), then a flush. A power cut
/// leaves the old sector or the new one.
pub fn write_primary<D: BlockDeviceMut>(
    dev: &D,
    raw: &RawSuperblock,
    buf: &mut Block,
) -> Result<(), Error> {
    if dev.read_block(0, buf).is_err() {
        buf.fill(0);
    }
    put(buf, 0, raw.as_bytes());
    dev.write_block(0, buf)?;
    dev.flush()
}

/// Writes the copy `sb` makes into each of `lbas` (one block write each, the block's
/// other sectors written back as they read, each flushed before the next, so at most
/// one copy is ever in flight).
pub fn write_copies<D: BlockDeviceMut>(
    dev: &D,
    sb: &Superblock,
    lbas: &[u64],
    buf: &mut Block,
) -> Result<(), Error> {
    for &lba in lbas {
        dev.read_block(lba, buf)?;
        put(buf, COPY_AT, sb.copy_record(lba).as_bytes());
        dev.write_block(lba, buf)?;
        dev.flush()?;
    }
    Ok(())
}

/// A superblock change by a tool (`tune`, repair): the primary first, flushed, then
/// every copy when the superblock has them. `raw` is the new primary record (resealed).
/// At every cut one valid superblock remains: the old primary or the new one, and the
/// copies (old or new) beside it.
pub fn rewrite<D: BlockDeviceMut>(
    dev: &D,
    raw: &RawSuperblock,
    buf: &mut Block,
) -> Result<Superblock, Error> {
    let mut block: Block = [0; BLOCK_SIZE];
    put(&mut block, 0, raw.as_bytes());
    let sb = Superblock::parse(&block, ANY_DEVICE)?;
    write_primary(dev, raw, buf)?;
    if sb.has_copies() {
        write_copies(dev, &sb, sb.copy_blocks().as_slice(), buf)?;
    }
    Ok(sb)
}

/// Zeroes every superblock record of whatever filesystem `dev` holds (block 0 first,
/// then each copy the superblock found places), flushed: what mkfs does to a device before it writes a new filesystem, so a cut
/// partway leaves no superblock that describes the old one over the new structures.
pub fn erase<D: BlockDeviceMut>(dev: &D, buf: &mut Block) -> Result<(), Error> {
    let found = tet_core::cetrafs::copies::locate(dev, buf, ANY_DEVICE, None).ok();
    if dev.read_block(0, buf).is_ok() {
        put(buf, 0, &[0u8; SUPERBLOCK_LEN]);
        dev.write_block(0, buf)?;
        dev.flush()?;
    }
    if let Some(l) = found {
        for &lba in l.sb.copy_blocks().as_slice() {
            if dev.read_block(lba, buf).is_ok() {
                put(buf, COPY_AT, &[0u8; SUPERBLOCK_LEN]);
                dev.write_block(lba, buf)?;
            }
        }
        dev.flush()?;
    }
    Ok(())
}

fn put(buf: &mut Block, at: usize, bytes: &[u8]) {
    if let Some(dst) = buf.get_mut(at..at.saturating_add(bytes.len())) {
        dst.copy_from_slice(bytes);
    }
}
