//! The blocks a repair round changes, as whole new blocks read on first touch, and the
//! record-level edits every fix is made of (each resealing what it changes).

use alloc::collections::BTreeMap;
use alloc::vec::Vec;

use tet_core::block::{Block, BlockDeviceMut, BLOCK_SIZE, BLOCK_SIZE_U64};
use tet_core::cetrafs::raw::{RawBlockGroup, RawDirEntry, RawInode, RawZoneGroupHot};
use tet_core::cetrafs::{Finding, Fs, BITS_PER_BITMAP_BLOCK, TAIL_AT};
use tet_core::checksum::crc32c_skipping;
use tet_core::{Error, ErrorKind};

use super::Fix;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// A record at the start of a block, sealed by the crc32c of its other bytes stored at
/// `CRC_AT` of its own bytes.
pub(super) trait Record: FromBytes + IntoBytes + KnownLayout + Immutable {
    /// Where its checksum is.
    const CRC_AT: usize;
}

impl Record for RawInode {
    const CRC_AT: usize = 248;
}

impl Record for RawBlockGroup {
    const CRC_AT: usize = 112;
}

/// The hot half of a zone group descriptor (the cold half has its own checksum).
impl Record for RawZoneGroupHot {
    const CRC_AT: usize = 56;
}

/// Which fixes a round may make: asked before a fix that loses something changes a
/// block, so a refused fix never shares a block with one that is made.
pub(super) type Allow<'a> = &'a dyn Fn(&Fix) -> bool;

/// New contents of the blocks a round changes, read from the device on first touch.
pub(super) struct Patches<'f, D: BlockDeviceMut> {
    pub(super) fs: &'f Fs<D>,
    pub(super) blocks: BTreeMap<u64, Block>,
    /// Blocks allocated this round (nothing references them yet): written first.
    pub(super) fresh: Vec<u64>,
    /// Which fixes may change blocks (`None`: all).
    pub(super) allow: Option<Allow<'f>>,
    /// Fixes planned but not allowed: what `-y` (or another answer) would have done.
    pub(super) withheld: Vec<Fix>,
}

impl<'f, D: BlockDeviceMut> Patches<'f, D> {
    pub(super) fn new(fs: &'f Fs<D>, allow: Option<Allow<'f>>) -> Self {
        Patches {
            fs,
            blocks: BTreeMap::new(),
            fresh: Vec::new(),
            allow,
            withheld: Vec::new(),
        }
    }

    /// Whether `fix` may be made; when not, it is remembered as withheld.
    pub(super) fn allows(&mut self, fix: &Fix) -> bool {
        match self.allow {
            Some(allow) if !allow(fix) => {
                self.withheld.push(*fix);
                false
            }
            _ => true,
        }
    }

    pub(super) fn block(&mut self, lba: u64) -> Result<&mut Block, Error> {
        if !self.blocks.contains_key(&lba) {
            let mut b: Block = [0; BLOCK_SIZE];
            self.fs.device().read_block(lba, &mut b)?;
            self.blocks.insert(lba, b);
        }
        self.blocks
            .get_mut(&lba)
            .ok_or(Error::new(ErrorKind::Invalid, "repair patch", 0))
    }

    /// Changes the record `T` at the start of block `lba` through its fields and
    /// recomputes its checksum.
    pub(super) fn edit<T: Record>(
        &mut self,
        lba: u64,
        f: impl FnOnce(&mut T),
    ) -> Result<(), Error> {
        let len = core::mem::size_of::<T>();
        let b = self.block(lba)?;
        let mut r = T::read_from_bytes(b.get(..len).unwrap_or(&[]))
            .map_err(|_| Error::new(ErrorKind::Invalid, "repaired structure", lba))?;
        f(&mut r);
        let c = crc32c_skipping(r.as_bytes(), T::CRC_AT);
        if let Some(dst) = b.get_mut(..len) {
            dst.copy_from_slice(r.as_bytes());
        }
        if let Some(dst) = b.get_mut(T::CRC_AT..T::CRC_AT.saturating_add(8)) {
            dst.copy_from_slice(&c.to_le_bytes());
        }
        Ok(())
    }

    /// Changes the inode in block `lba` and reseals it.
    pub(super) fn inode(&mut self, lba: u64, f: impl FnOnce(&mut RawInode)) -> Result<(), Error> {
        self.edit(lba, f)
    }

    /// Changes the directory entry at byte `off` of block `lba` and reseals the block.
    pub(super) fn dirent(
        &mut self,
        lba: u64,
        off: usize,
        f: impl FnOnce(&mut RawDirEntry),
    ) -> Result<(), Error> {
        let b = self.block(lba)?;
        let end = off.saturating_add(266);
        let mut d = RawDirEntry::read_from_bytes(b.get(off..end).unwrap_or(&[]))
            .map_err(|_| Error::new(ErrorKind::Invalid, "dirent", lba))?;
        f(&mut d);
        if let Some(dst) = b.get_mut(off..end) {
            dst.copy_from_slice(d.as_bytes());
        }
        reseal_tail(b);
        Ok(())
    }

    /// Empties the directory entry at byte `off` of block `lba`.
    pub(super) fn clear_dirent(&mut self, lba: u64, off: usize) -> Result<(), Error> {
        self.dirent(lba, off, |d| d.as_mut_bytes().fill(0))
    }

    /// Marks `len` data blocks from data block `first` of block group `bi` in use, and
    /// takes them from the group's and its zone group's free counts.
    pub(super) fn take_blocks(&mut self, bi: u32, first: u64, len: u64) -> Result<(), Error> {
        let mut buf: Block = [0; BLOCK_SIZE];
        let bg = self.fs.block_group(bi, &mut buf)?;
        let zg = self.fs.zone_group(bg.raw().owner_zg.get(), &mut buf)?;
        let start = bg.raw().start_block.get().saturating_add(1);
        for k in 0..len {
            let i = first.saturating_add(k);
            let b = self.block(start.saturating_add(i / BITS_PER_BITMAP_BLOCK))?;
            set_bit(b, i % BITS_PER_BITMAP_BLOCK, true);
        }
        self.edit(bg.lba(), |d: &mut RawBlockGroup| {
            d.free_data_blocks
                .set(d.free_data_blocks.get().saturating_sub(len));
        })?;
        self.edit(zg.lba(), |h: &mut RawZoneGroupHot| {
            h.free_data_blocks
                .set(h.free_data_blocks.get().saturating_sub(len));
        })
    }
}

/// Recomputes the tail checksum of a tree, directory or xattr block.
pub(super) fn reseal_tail(b: &mut Block) {
    let c = crc32c_skipping(&b[..], TAIL_AT.saturating_add(8));
    if let Some(dst) = b.get_mut(TAIL_AT.saturating_add(8)..) {
        dst.copy_from_slice(&c.to_le_bytes());
    }
}

pub(super) fn split(offset: u64) -> (u64, usize) {
    (
        offset / BLOCK_SIZE_U64,
        usize::try_from(offset % BLOCK_SIZE_U64).unwrap_or(0),
    )
}

pub(super) fn expected(f: &Finding) -> Option<u64> {
    match f.error.kind {
        ErrorKind::Mismatch { expected, .. } => Some(expected),
        _ => None,
    }
}

/// Sets or clears bit `i` of a bitmap block.
pub(super) fn set_bit(b: &mut Block, i: u64, on: bool) {
    if let Some(byte) = usize::try_from(i / 8).ok().and_then(|k| b.get_mut(k)) {
        let m = 1u8 << (i % 8);
        if on {
            *byte |= m;
        } else {
            *byte &= !m;
        }
    }
}
