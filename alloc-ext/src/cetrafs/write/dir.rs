//! Directory entries: found, added (a new block when every slot is taken) and removed,
//! each block resealed (section 10).

use alloc::vec::Vec;

use tet_core::block::{Block, BlockDeviceMut, BLOCK_SIZE, BLOCK_SIZE_U64};
use tet_core::cetrafs::raw::{RawDirEntry, RawInode};
use tet_core::cetrafs::{DIRENTS_PER_BLOCK, TAIL_AT, TAIL_DIR};
use tet_core::checksum::crc32c_skipping;
use zerocopy::{FromBytes, FromZeros, IntoBytes};

use super::tree::Ext;
use super::txn::Txn;
use super::{Errno, WriteError, Writer};

const ENTRY: usize = 266;

/// Where an entry lies, and what it names.
#[derive(Clone, Copy, Debug)]
pub(super) struct Found {
    pub lba: u64,
    pub slot: usize,
    pub ino: u64,
    pub file_type: u8,
}

/// Checks a name (section 10): 1 ..= 255 bytes, no `/` or NUL, not `.` or `..`.
pub(super) fn check_name(name: &[u8]) -> Result<(), Errno> {
    if name.len() > 255 {
        return Err(Errno::ENAMETOOLONG);
    }
    if name.is_empty()
        || name == b"."
        || name == b".."
        || name.iter().any(|b| *b == b'/' || *b == 0)
    {
        return Err(Errno::EINVAL);
    }
    Ok(())
}

pub(super) fn seal_dir(b: &mut Block) {
    if let Some(d) = b.get_mut(TAIL_AT..TAIL_AT + 4) {
        d.copy_from_slice(&TAIL_DIR);
    }
    let crc = crc32c_skipping(b, TAIL_AT + 8);
    if let Some(d) = b.get_mut(TAIL_AT + 8..TAIL_AT + 16) {
        d.copy_from_slice(&crc.to_le_bytes());
    }
}

fn entry_at(b: &Block, slot: usize) -> Option<&RawDirEntry> {
    let at = slot.checked_mul(ENTRY)?;
    RawDirEntry::ref_from_bytes(b.get(at..at.checked_add(ENTRY)?)?).ok()
}

impl<D: BlockDeviceMut> Writer<D> {
    /// The directory's blocks, in logical order.
    pub(super) fn dir_blocks(&self, t: &Txn, dir: &RawInode) -> Result<Vec<u64>, WriteError> {
        let m = self.map_of(t, dir)?;
        let n = dir.size.get() / BLOCK_SIZE_U64;
        // Walked extent by extent (sorted), never block by block of what `size` claims:
        // a hostile size cannot make this loop longer than the blocks mapped, nor past
        // the filesystem's size.
        if n > self.fs.superblock().total_blocks() {
            return Err(Errno::EIO.into());
        }
        let mut out = Vec::new();
        for e in &m.exts {
            let have = tet_core::arith::u64_of(out.len());
            if have >= n {
                break;
            }
            if e.logical != have || e.uninit {
                return Err(Errno::EIO.into());
            }
            for k in 0..e.len.min(n.saturating_sub(have)) {
                out.push(e.physical.saturating_add(k));
            }
        }
        if tet_core::arith::u64_of(out.len()) != n {
            return Err(Errno::EIO.into());
        }
        Ok(out)
    }

    /// Every entry of `dir`.
    pub(super) fn entries(
        &self,
        t: &Txn,
        dir: &RawInode,
    ) -> Result<Vec<(Found, Vec<u8>)>, WriteError> {
        let mut out = Vec::new();
        for lba in self.dir_blocks(t, dir)? {
            let b = self.read(t, lba)?;
            for slot in 0..DIRENTS_PER_BLOCK {
                let Some(e) = entry_at(&b, slot) else {
                    continue;
                };
                if e.inode.get() == 0 {
                    continue;
                }
                let len = usize::from(e.name_len.get()).min(255);
                out.push((
                    Found {
                        lba,
                        slot,
                        ino: e.inode.get(),
                        file_type: e.file_type,
                    },
                    e.name.get(..len).unwrap_or(&[]).to_vec(),
                ));
            }
        }
        Ok(out)
    }

    /// The entry `name` of `dir`.
    pub(super) fn find(
        &self,
        t: &Txn,
        dir: &RawInode,
        name: &[u8],
    ) -> Result<Option<Found>, WriteError> {
        let mut buf: Block = [0; BLOCK_SIZE];
        for lba in self.dir_blocks(t, dir)? {
            // Read in place: a block of the transaction is not copied.
            let b = match t.changed(lba) {
                Some(b) => b,
                None => {
                    self.fs.device().read_block(lba, &mut buf)?;
                    &buf
                }
            };
            for slot in 0..DIRENTS_PER_BLOCK {
                let Some(e) = entry_at(b, slot) else {
                    continue;
                };
                let len = usize::from(e.name_len.get()).min(255);
                if e.inode.get() != 0 && e.name.get(..len) == Some(name) {
                    return Ok(Some(Found {
                        lba,
                        slot,
                        ino: e.inode.get(),
                        file_type: e.file_type,
                    }));
                }
            }
        }
        Ok(None)
    }

    /// Adds `name` → `ino` to `dir` (whose inode the caller writes back).
    pub(super) fn add_entry(
        &mut self,
        t: &mut Txn,
        dir: &mut RawInode,
        name: &[u8],
        ino: u64,
        file_type: u8,
    ) -> Result<(), WriteError> {
        let mut e = RawDirEntry::new_zeroed();
        e.inode.set(ino);
        e.name_len
            .set(u16::try_from(name.len()).map_err(|_| Errno::ENAMETOOLONG)?);
        e.file_type = file_type;
        if let Some(d) = e.name.get_mut(..name.len()) {
            d.copy_from_slice(name);
        }
        let blocks = self.dir_blocks(t, dir)?;
        for lba in &blocks {
            let mut b = self.read(t, *lba)?;
            let free = (0..DIRENTS_PER_BLOCK)
                .find(|s| entry_at(&b, *s).is_some_and(|x| x.inode.get() == 0));
            if let Some(slot) = free {
                let at = slot.saturating_mul(ENTRY);
                if let Some(d) = b.get_mut(at..at.saturating_add(ENTRY)) {
                    d.copy_from_slice(e.as_bytes());
                }
                seal_dir(&mut b);
                Self::put(t, *lba, b);
                return Ok(());
            }
        }
        // A new block at the end.
        let mut m = self.map_of(t, dir)?;
        let hint = blocks.last().map(|l| l.saturating_add(1));
        let (lba, _) = self.alloc_run(t, hint, 1)?;
        t.fresh.insert(lba);
        let mut b: Block = [0; BLOCK_SIZE];
        if let Some(d) = b.get_mut(..ENTRY) {
            d.copy_from_slice(e.as_bytes());
        }
        seal_dir(&mut b);
        Self::put(t, lba, b);
        let logical = tet_core::arith::u64_of(blocks.len());
        m.exts.push(Ext {
            logical,
            len: 1,
            physical: lba,
            uninit: false,
        });
        self.store_map(t, dir, m, 1)?;
        dir.size.set(dir.size.get().saturating_add(BLOCK_SIZE_U64));
        dir.blocks.set(dir.blocks.get().saturating_add(1));
        Ok(())
    }

    /// Removes the entry at `f`.
    pub(super) fn remove_entry(&self, t: &mut Txn, f: &Found) -> Result<(), WriteError> {
        let mut b = self.read(t, f.lba)?;
        let at = f.slot.saturating_mul(ENTRY);
        if let Some(d) = b.get_mut(at..at.saturating_add(ENTRY)) {
            d.fill(0);
        }
        seal_dir(&mut b);
        Self::put(t, f.lba, b);
        Ok(())
    }

    /// Points the entry at `f` to `ino` of `file_type`.
    pub(super) fn retarget_entry(
        &self,
        t: &mut Txn,
        f: &Found,
        ino: u64,
        file_type: u8,
    ) -> Result<(), WriteError> {
        let mut b = self.read(t, f.lba)?;
        let at = f.slot.saturating_mul(ENTRY);
        if let Some(d) = b.get_mut(at..at.saturating_add(8)) {
            put8(d, ino);
        }
        if let Some(x) = b.get_mut(at.saturating_add(10)) {
            *x = file_type;
        }
        seal_dir(&mut b);
        Self::put(t, f.lba, b);
        Ok(())
    }
}

fn put8(d: &mut [u8], v: u64) {
    if let Some(x) = d.get_mut(..8) {
        x.copy_from_slice(&v.to_le_bytes());
    }
}
