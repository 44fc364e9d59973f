//! Superblock copies (`docs/cetrafs.md` section 3.1): where a geometry puts them, how one
//! is read and written, and the bounded search a reader runs when the primary fails.
//!
//! A copy is the primary's 424 bytes, with `sb_flags` 0 and `location` set to the copy's
//! own absolute byte offset, resealed, at byte [`COPY_AT`] of a metadata block that no
//! bitmap maps: the block of the last block group descriptor, and the region header
//! blocks of block group 0 and of the last block group. No file can hold those bytes, so
//! a checker that does not know `COMPAT_SB_COPIES` sees no leaked block and a repair
//! frees nothing.
//!
//! Nothing here is on the bootloader's path: [`Fs::open_for_read`](super::Fs) reads the
//! primary only.

use core::cell::Cell;

use zerocopy::{FromBytes, IntoBytes};

use super::raw::{RawBlockGroup, RawSuperblock};
use super::superblock::{Superblock, ANY_DEVICE};
use super::{
    err, sealed, BG_MAGIC, SB_CHECKSUM_AT, SB_MAGIC, SUPERBLOCK_LEN, ZG_COLD_MAGIC, ZG_MAGIC,
};
use crate::block::{Block, BlockDevice, BlockDeviceMut, BLOCK_SIZE, BLOCK_SIZE_U64, SECTOR};
use crate::checksum::crc32c_skipping;
use crate::error::{Error, ErrorKind, Result};

/// `feature_compat` bit 2: the superblock has copies.
pub const COMPAT_SB_COPIES: u64 = 1 << 2;

/// Byte offset of a copy in its block: the block's second sector, so the record it
/// shares the block with (a 128-byte descriptor or a 64-byte region header, both in the
/// first sector) and the copy are each one sector write.
pub const COPY_AT: usize = SECTOR;

/// Most blocks the table scan of [`locate`] reads: a hostile image whose every block
/// looks like a descriptor costs this many reads, not the whole device.
pub const MAX_TABLE_SCAN: u64 = 1 << 22;

/// Most blocks the last step of [`locate`] reads, from block 1 on, looking for a copy in
/// each: 1 GiB of a device whose start (the primary and the group tables) is gone.
pub const MAX_COPY_SCAN: u64 = 1 << 18;

/// Most copies a geometry has.
pub const MAX_COPIES: usize = 3;

/// The blocks a geometry puts copies in, in the order a reader prefers them on a tie.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CopyBlocks {
    blocks: [u64; MAX_COPIES],
    len: usize,
}

impl CopyBlocks {
    /// The block numbers.
    pub fn as_slice(&self) -> &[u64] {
        self.blocks.get(..self.len).unwrap_or(&[])
    }
    /// Whether a copy belongs at block `lba`.
    pub fn contains(&self, lba: u64) -> bool {
        self.as_slice().contains(&lba)
    }
}

/// Absolute byte offset of the copy in block `lba`.
pub fn copy_offset(lba: u64) -> u64 {
    lba.saturating_mul(BLOCK_SIZE_U64)
        .saturating_add(crate::arith::u64_of(COPY_AT))
}

/// Reseals a superblock record after a change: its checksum over bytes 0..424.
pub fn reseal(raw: &mut RawSuperblock) {
    raw.checksum.set(0);
    let crc = crc32c_skipping(raw.as_bytes(), SB_CHECKSUM_AT);
    raw.checksum.set(crc);
}

impl Superblock {
    /// Whether `COMPAT_SB_COPIES` is set.
    pub fn has_copies(&self) -> bool {
        self.features().compat & COMPAT_SB_COPIES != 0
    }

    /// Where this geometry puts the copies (whether or not the bit is set): the block of
    /// the last block group descriptor, the region header block of group 0, and that of
    /// the last group when there are two groups or more. Three places in three regions
    /// (two when `B = 1`), none of them block 0.
    pub fn copy_blocks(&self) -> CopyBlocks {
        let b = self.block_group_count();
        let last_desc = self
            .raw()
            .bg_table_start
            .get()
            .saturating_add(u64::from(b.saturating_sub(1)));
        let first = self.bg_regions_start();
        let (last, _) = self.bg_span(b.saturating_sub(1));
        CopyBlocks {
            blocks: [last_desc, first, last],
            len: if b >= 2 { 3 } else { 2 },
        }
    }

    /// The copy that belongs at block `lba`: this superblock with `sb_flags` 0 and
    /// `location` the copy's byte offset, resealed. Writers serialise copies only
    /// through this.
    pub fn copy_record(&self, lba: u64) -> RawSuperblock {
        let mut raw = *self.raw();
        raw.sb_flags.set(0);
        raw.location.set(copy_offset(lba));
        reseal(&mut raw);
        raw
    }

    /// The primary this superblock stands for, resealed (`location` 0; the flags as
    /// they are: a superblock read from a copy carries none).
    pub fn primary_record(&self) -> RawSuperblock {
        let mut raw = *self.raw();
        raw.location.set(0);
        reseal(&mut raw);
        raw
    }

    /// Reads the copy at byte [`COPY_AT`] of `block`, which is block `lba`, checked as
    /// [`Superblock::parse`] checks the primary against a device of `device_blocks`
    /// blocks, and also: `location` is the copy's own offset, `sb_flags` is 0,
    /// `COMPAT_SB_COPIES` is set, and the copy's own geometry puts a copy at `lba` (so a
    /// stray record from another filesystem or another place is never taken). Errors
    /// name the copy's bytes. The result is the primary the copy stands for, with no
    /// flags (a filesystem mounted from a copy is not known to be clean).
    pub fn parse_copy(block: &Block, lba: u64, device_blocks: u64) -> Result<Superblock> {
        let base = copy_offset(lba);
        let bytes = block
            .get(COPY_AT..COPY_AT.saturating_add(SUPERBLOCK_LEN))
            .unwrap_or(&[]);
        let raw: &RawSuperblock = sealed::<_, Error>(
            bytes,
            SB_MAGIC,
            SB_CHECKSUM_AT,
            ("superblock_copy.magic", "superblock_copy.checksum"),
            lba,
            COPY_AT,
        )?;
        let found = raw.location.get();
        if found != base {
            return Err(err(
                ErrorKind::Mismatch {
                    expected: base,
                    found,
                },
                "superblock_copy.location (its own byte offset)",
                lba,
                COPY_AT.saturating_add(280),
            ));
        }
        let flags = raw.sb_flags.get();
        if flags != 0 {
            return Err(err(
                ErrorKind::UnknownFlags { bits: flags.into() },
                "superblock_copy.sb_flags (0 in a copy)",
                lba,
                COPY_AT.saturating_add(12),
            ));
        }
        let mut primary = *raw;
        primary.location.set(0);
        reseal(&mut primary);
        let mut tmp: Block = [0; BLOCK_SIZE];
        if let Some(head) = tmp.get_mut(..SUPERBLOCK_LEN) {
            head.copy_from_slice(primary.as_bytes());
        }
        // The checks of the primary, their offsets moved onto the copy's bytes.
        let sb = Superblock::parse(&tmp, device_blocks).map_err(|mut e| {
            e.offset = e.offset.saturating_add(base);
            e
        })?;
        if !sb.has_copies() {
            return Err(err(
                ErrorKind::MissingFlags {
                    bits: COMPAT_SB_COPIES,
                },
                "superblock_copy.feature_compat (COMPAT_SB_COPIES)",
                lba,
                COPY_AT.saturating_add(40),
            ));
        }
        if !sb.copy_blocks().contains(lba) {
            return Err(err(
                ErrorKind::Mismatch {
                    expected: sb.copy_blocks().as_slice().first().copied().unwrap_or(0),
                    found: lba,
                },
                "superblock_copy.location (its geometry puts no copy in this block)",
                lba,
                COPY_AT.saturating_add(280),
            ));
        }
        Ok(sb)
    }
}

/// Where the superblock a reader uses came from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Source {
    /// Block 0.
    #[default]
    Primary,
    /// The copy in this block.
    Copy(u64),
}

/// The superblock a reader uses, where it came from, and why the primary was not used.
#[derive(Clone, Copy, Debug)]
pub struct Located {
    /// The superblock, as the primary it stands for.
    pub sb: Superblock,
    /// Where it was read.
    pub source: Source,
    /// Why the primary was passed over (`None` when it is the source, or when a copy was
    /// asked for and the primary is valid too).
    pub primary: Option<Error>,
    /// Blocks read to decide.
    pub reads: u64,
}

/// What the search tried: how many blocks it read, and the copies it found valid.
struct Search<'a, D> {
    dev: &'a D,
    limit: u64,
    reads: u64,
}

impl<D: BlockDevice> Search<'_, D> {
    fn copy_at(&mut self, lba: u64, buf: &mut Block) -> Option<Superblock> {
        self.reads = self.reads.saturating_add(1);
        self.dev.read_block(lba, buf).ok()?;
        Superblock::parse_copy(buf, lba, self.limit).ok()
    }

    /// Among the copies `found`'s geometry places, the one with the highest
    /// `generation` (the first in [`Superblock::copy_blocks`] order on a tie), and its
    /// block.
    fn newest(&mut self, found: (Superblock, u64), buf: &mut Block) -> (Superblock, u64) {
        let mut best = found;
        for &lba in found.0.copy_blocks().as_slice() {
            if lba == found.1 {
                continue;
            }
            if let Some(sb) = self.copy_at(lba, buf) {
                let (g, bg) = (sb.raw().generation.get(), best.0.raw().generation.get());
                let earlier = found
                    .0
                    .copy_blocks()
                    .as_slice()
                    .iter()
                    .position(|x| *x == lba)
                    < found
                        .0
                        .copy_blocks()
                        .as_slice()
                        .iter()
                        .position(|x| *x == best.1);
                if g > bg || (g == bg && earlier) {
                    best = (sb, lba);
                }
            }
        }
        best
    }
}

/// Finds the superblock to use on `dev` (section 3.1), checking each candidate against
/// a device of `limit` blocks ([`ANY_DEVICE`] for a read-only mount of an image cut
/// short). `pick` names a copy's block (`-b N`): that copy alone is used, or its error
/// returned.
///
/// Otherwise the primary is used when it passes; when it fails, the search reads:
/// 1. the copies the primary's own fields place, when those fields still pass the map
///    checks (a damaged label or checksum): at most 3 blocks;
/// 2. the tables from block 1 on, while each block holds a zone group or block group
///    descriptor by its magic, trying the copy in every block group descriptor's block
///    and in the region header block of group 0 and of the last valid descriptor: at
///    most `Z + B + 1` blocks and 2 more;
/// 3. when neither finds one (the device's start wiped, tables and all), every block from
///    block 1 on, up to [`MAX_COPY_SCAN`] blocks (1 GiB), for a copy that passes where it
///    lies;
/// 4. once one copy passes, the other copies its geometry places (at most 2 blocks), and
///    takes the one with the highest `generation`.
///
/// On an image whose tables are where its map says, the search reads at most
/// `Z + B + 9` blocks ([`Located::reads`]); whatever the image, never more than
/// [`MAX_TABLE_SCAN`] + [`MAX_COPY_SCAN`] + 9, and never past the device's end. It holds one block. With no
/// valid copy, the primary's error is returned.
pub fn locate<D: BlockDevice>(
    dev: &D,
    buf: &mut Block,
    limit: u64,
    pick: Option<u64>,
) -> Result<Located> {
    let primary = dev
        .read_block(0, buf)
        .and_then(|()| Superblock::parse(buf, limit).map(|_| ()))
        .err();
    let mut s = Search {
        dev,
        limit,
        reads: 1,
    };
    if let Some(lba) = pick {
        dev.read_block(lba, buf)?;
        let sb = Superblock::parse_copy(buf, lba, limit)?;
        return Ok(Located {
            sb,
            source: Source::Copy(lba),
            primary,
            reads: 2,
        });
    }
    let Some(e) = primary else {
        let sb = Superblock::parse(buf, limit)?;
        return Ok(Located {
            sb,
            source: Source::Primary,
            primary: None,
            reads: 1,
        });
    };
    // A device shorter than a valid primary says: its copies say the same. A primary
    // sealed by a newer tool (a format version or an incompatible feature this reader
    // does not know) is not damage: no copy overrides it.
    if matches!(
        e.kind,
        ErrorKind::ShortDevice { .. } | ErrorKind::Unsupported { .. }
    ) || e.what == "superblock.feature_incompat (bit position)"
    {
        return Err(e);
    }
    let found = from_primary_fields(&mut s, buf)
        .or_else(|| from_tables(&mut s, buf))
        .or_else(|| from_a_scan(&mut s, buf));
    match found {
        Some(f) => {
            let (sb, lba) = s.newest(f, buf);
            Ok(Located {
                sb,
                source: Source::Copy(lba),
                primary: Some(e),
                reads: s.reads,
            })
        }
        None => Err(e),
    }
}

/// Step 1: the copies a damaged primary's fields place, if they pass the map checks.
/// `buf` holds block 0 (or whatever a failed read left).
fn from_primary_fields<D: BlockDevice>(
    s: &mut Search<'_, D>,
    buf: &mut Block,
) -> Option<(Superblock, u64)> {
    let mut raw = RawSuperblock::read_from_prefix(buf.as_slice()).ok()?.0;
    raw.magic = SB_MAGIC;
    raw.location.set(0);
    reseal(&mut raw);
    let mut tmp: Block = [0; BLOCK_SIZE];
    tmp.get_mut(..SUPERBLOCK_LEN)?
        .copy_from_slice(raw.as_bytes());
    let guess = Superblock::parse(&tmp, ANY_DEVICE).ok()?;
    guess
        .copy_blocks()
        .as_slice()
        .iter()
        .find_map(|&lba| s.copy_at(lba, buf).map(|sb| (sb, lba)))
}

/// Step 4: every block from 1 on, up to [`MAX_COPY_SCAN`], for a copy that passes where
/// it lies: what finds a copy when the device's start is wiped, the tables with it (the
/// first copy in map order, the region header copy of group 0, lies after the inode
/// table).
fn from_a_scan<D: BlockDevice>(
    s: &mut Search<'_, D>,
    buf: &mut Block,
) -> Option<(Superblock, u64)> {
    let end = s.dev.block_count().min(MAX_COPY_SCAN);
    (1..end).find_map(|lba| {
        s.reads = s.reads.saturating_add(1);
        s.dev.read_block(lba, buf).ok()?;
        if buf.get(COPY_AT..COPY_AT.saturating_add(4)) != Some(&SB_MAGIC[..]) {
            return None;
        }
        Superblock::parse_copy(buf, lba, s.limit)
            .ok()
            .map(|sb| (sb, lba))
    })
}

/// Step 2: the zone and block group tables from block 1, while they last.
fn from_tables<D: BlockDevice>(
    s: &mut Search<'_, D>,
    buf: &mut Block,
) -> Option<(Superblock, u64)> {
    let end = s.dev.block_count().min(MAX_TABLE_SCAN);
    let mut last_region = None;
    let mut lba = 1u64;
    while lba < end {
        s.reads = s.reads.saturating_add(1);
        if s.dev.read_block(lba, buf).is_err() {
            break;
        }
        let head = buf.get(..4).unwrap_or(&[]);
        let cold = buf.get(512..516).unwrap_or(&[]);
        if head == ZG_MAGIC || cold == ZG_COLD_MAGIC {
            lba = lba.saturating_add(1);
            continue;
        }
        if head != BG_MAGIC {
            break;
        }
        if let Ok(sb) = Superblock::parse_copy(buf, lba, s.limit) {
            return Some((sb, lba));
        }
        let region = buf
            .get(..128)
            .and_then(|d| sealed::<RawBlockGroup, Error>(d, BG_MAGIC, 112, ("", ""), lba, 0).ok())
            .map(|d| (d.bg_id.get(), d.start_block.get()));
        if let Some((id, start)) = region {
            if id == 0 {
                if let Some(sb) = s.copy_at(start, buf) {
                    return Some((sb, start));
                }
            }
            last_region = Some(start);
        }
        lba = lba.saturating_add(1);
    }
    let start = last_region?;
    s.copy_at(start, buf).map(|sb| (sb, start))
}

/// `dev` with block 0 read as a superblock's primary record: what a reader mounts when
/// [`locate`] took a copy, so every reader, checker and planner runs unchanged. The rest
/// of block 0 reads as the device holds it (zeros when block 0 cannot be read). Writes
/// go to the device; a write of block 0 also becomes what block 0 reads as (a repair
/// that restores the primary then reads what it wrote).
#[derive(Debug)]
pub struct Substituted<D> {
    dev: D,
    record: Cell<Option<RawSuperblock>>,
}

impl<D: BlockDevice> Substituted<D> {
    /// `dev`, its block 0 read as `sb`'s [`Superblock::primary_record`].
    pub fn new(dev: D, sb: &Superblock) -> Self {
        Substituted {
            dev,
            record: Cell::new(Some(sb.primary_record())),
        }
    }

    /// `dev` as it is (until block 0 is written through it).
    pub fn unchanged(dev: D) -> Self {
        Substituted {
            dev,
            record: Cell::new(None),
        }
    }

    /// The device underneath.
    pub fn inner(&self) -> &D {
        &self.dev
    }
}

impl<D: BlockDevice> BlockDevice for Substituted<D> {
    fn block_count(&self) -> u64 {
        self.dev.block_count()
    }
    fn read_block(&self, lba: u64, buf: &mut Block) -> Result<()> {
        let Some(record) = self.record.get().filter(|_| lba == 0) else {
            return self.dev.read_block(lba, buf);
        };
        if self.dev.read_block(0, buf).is_err() {
            buf.fill(0);
        }
        if let Some(head) = buf.get_mut(..SUPERBLOCK_LEN) {
            head.copy_from_slice(record.as_bytes());
        }
        Ok(())
    }
    fn read_block_prefix(&self, lba: u64, buf: &mut Block, len: usize) -> Result<()> {
        if lba == 0 && self.record.get().is_some() {
            self.read_block(0, buf)
        } else {
            self.dev.read_block_prefix(lba, buf, len)
        }
    }
    /// Straight to the device below, block 0 apart when it is the substituted one.
    fn read_blocks(&self, lba: u64, buf: &mut [u8]) -> Result<()> {
        if lba != 0 || self.record.get().is_none() || buf.is_empty() {
            return self.dev.read_blocks(lba, buf);
        }
        let (head, rest) = buf.split_at_mut(buf.len().min(BLOCK_SIZE));
        let first: &mut Block = head.try_into().map_err(|_| {
            Error::new(
                ErrorKind::Invalid,
                "read_blocks length (not whole blocks)",
                0,
            )
        })?;
        self.read_block(0, first)?;
        self.dev.read_blocks(1, rest)
    }
    fn read_prefixes(&self, lba: u64, len: usize, out: &mut [u8]) -> Result<()> {
        if lba == 0 && self.record.get().is_some() {
            crate::block::read_prefixes_each(self, lba, len, out)
        } else {
            self.dev.read_prefixes(lba, len, out)
        }
    }
}

impl<D: BlockDeviceMut> BlockDeviceMut for Substituted<D> {
    fn write_block(&self, lba: u64, buf: &Block) -> Result<()> {
        self.dev.write_block(lba, buf)?;
        if lba == 0 {
            if let Ok((raw, _)) = RawSuperblock::read_from_prefix(buf.as_slice()) {
                self.record.set(Some(raw));
            }
        }
        Ok(())
    }
    fn flush(&self) -> Result<()> {
        self.dev.flush()
    }
    fn compare_and_write(
        &self,
        lba: u64,
        expected: &[u8; SECTOR],
        new: &[u8; SECTOR],
    ) -> Result<bool> {
        let wrote = self.dev.compare_and_write(lba, expected, new)?;
        if wrote && lba == 0 {
            if let Ok((raw, _)) = RawSuperblock::read_from_prefix(new.as_slice()) {
                self.record.set(Some(raw));
            }
        }
        Ok(wrote)
    }
}
