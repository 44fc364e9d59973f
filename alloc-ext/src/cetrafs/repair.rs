//! cetrafs repair (`tet-host repair IMAGE`): replay the journals, check, and fix what the
//! check computed the right value for, through the journal, so a power cut at any write
//! is recovered by running repair again.
//!
//! Each round checks the image (`crate::cetrafs::fsck`), plans fixes as whole new blocks (every
//! fix names the finding it answers), writes them as one committed transaction per
//! batch into a clean journal, and replays it (`tet_core::cetrafs::replay`): the journal
//! makes a batch all-or-nothing. Rounds repeat while they fix something (removing an
//! entry changes link counts, say), at most [`MAX_ROUNDS`] times.
//!
//! Fixes: data bitmaps rebuilt from the computed ownership map, and with them block and
//! zone group free counts; bitmap padding bits; link counts set to the references
//! counted; `blocks`, a directory's `size` and `parent`, and an entry's `file_type` set to
//! the values the structure implies (all lossless, so `-p` applies them); entries naming
//! inodes that are not in use removed, a directory's second name (a hard link, or the
//! entry closing a loop) removed, and repeated names renamed with a `~` and the inode
//! number, and a block owned twice cloned for its later owner (`-y` only); orphans named
//! in `/lost+found` by their inode number. Everything else is reported and left: tree
//! blocks owned twice, broken trees, checksums, features.

use alloc::collections::BTreeMap;
use alloc::vec;
use alloc::vec::Vec;

use tet_core::block::{Block, BlockDeviceMut, BLOCK_SIZE, BLOCK_SIZE_U64};
use tet_core::cetrafs::check::Severity;
use tet_core::cetrafs::raw::{
    RawBlockGroup, RawDirEntry, RawInode, RawJournalFlag, RawSlotHeader, RawZoneGroupHot,
};
use tet_core::cetrafs::replay::{replay, ReplayError, ReplayOptions, ReplayReport};
use tet_core::cetrafs::{
    bitmap_blocks, Buffers, Code, Committed, Finding, Fs, BITS_PER_BITMAP_BLOCK, F_COMMIT,
    JOURNAL_CLEAN, JOURNAL_DIRTY, JS_MAGIC, TAIL_AT,
};
use tet_core::checksum::{crc32c, crc32c_skipping};
use tet_core::{Error, ErrorKind};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::cetrafs::fsck::{self, OwnershipMap};

/// Rounds of check-and-fix before repair gives up on converging.
pub const MAX_ROUNDS: u32 = 4;

/// Which fixes to apply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Mode {
    /// None: report what would be done.
    No,
    /// Those that lose nothing (`-p`).
    Preen,
    /// Every fix (`-y`), or those a caller's `decide` accepts.
    Yes,
}

/// Limits and identity of a repair.
#[derive(Clone, Copy, Debug)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct RepairOptions {
    /// The id journals are claimed under.
    pub node_id: u64,
    /// Repair although the registry shows nodes `ACTIVE` (the filesystem may be mounted).
    pub force: bool,
    /// Memory for the check's maps.
    pub memory_limit: u64,
}

/// One planned fix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fix {
    /// The finding it answers.
    pub code: Code,
    /// What it does.
    pub action: &'static str,
    /// Absolute byte offset of what it changes.
    pub offset: u64,
    /// The value written, where one number says it.
    pub value: Option<u64>,
    /// Whether it loses nothing (applied by `-p`).
    pub lossless: bool,
}

/// What a repair did.
#[derive(Debug, Default)]
pub struct RepairOutcome {
    /// The journal replay that ran first.
    pub replay: ReplayReport,
    /// Fixes applied (or, with [`Mode::No`], that would be).
    pub fixes: Vec<Fix>,
    /// Error findings left after the last round.
    pub left: Vec<Finding>,
    /// Rounds run.
    pub rounds: u32,
    /// Whether the first check (after replay) found an error or a journal awaiting
    /// replay: with [`RepairOutcome::replay`], whether there was anything to repair.
    pub found: bool,
}

/// Why a repair stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum RepairError {
    /// The registry shows nodes `ACTIVE`: the filesystem may be mounted.
    Mounted {
        /// A live node's registry row.
        row: u32,
        /// Its node id.
        node_id: u64,
    },
    /// Replay refused or failed.
    Replay(ReplayError),
    /// No clean journal with room for a fix to go through.
    NoJournal,
}

impl From<ReplayError> for RepairError {
    fn from(e: ReplayError) -> Self {
        RepairError::Replay(e)
    }
}

impl From<Error> for RepairError {
    fn from(e: Error) -> Self {
        RepairError::Replay(ReplayError::Device(e))
    }
}

/// New contents of the blocks a round changes, read from the device on first touch.
struct Patches<'f, D: BlockDeviceMut> {
    fs: &'f Fs<D>,
    blocks: BTreeMap<u64, Block>,
    /// Blocks allocated this round (nothing references them yet): written first.
    fresh: Vec<u64>,
}

impl<D: BlockDeviceMut> Patches<'_, D> {
    fn block(&mut self, lba: u64) -> Result<&mut Block, Error> {
        if !self.blocks.contains_key(&lba) {
            let mut b: Block = [0; BLOCK_SIZE];
            self.fs.device().read_block(lba, &mut b)?;
            self.blocks.insert(lba, b);
        }
        self.blocks
            .get_mut(&lba)
            .ok_or(Error::new(ErrorKind::Invalid, "repair patch", 0))
    }

    /// Changes the `T` at the start of block `lba` through its fields and recomputes its
    /// checksum (the 8 bytes at `crc_at` of `T`).
    fn record<T: FromBytes + IntoBytes + KnownLayout + Immutable>(
        &mut self,
        lba: u64,
        crc_at: usize,
        f: impl FnOnce(&mut T),
    ) -> Result<(), Error> {
        let len = core::mem::size_of::<T>();
        let b = self.block(lba)?;
        let mut r = T::read_from_bytes(b.get(..len).unwrap_or(&[]))
            .map_err(|_| Error::new(ErrorKind::Invalid, "repaired structure", lba))?;
        f(&mut r);
        let c = crc32c_skipping(r.as_bytes(), crc_at);
        if let Some(dst) = b.get_mut(..len) {
            dst.copy_from_slice(r.as_bytes());
        }
        if let Some(dst) = b.get_mut(crc_at..crc_at.saturating_add(8)) {
            dst.copy_from_slice(&c.to_le_bytes());
        }
        Ok(())
    }

    /// Changes the inode in block `lba` and reseals it.
    fn inode(&mut self, lba: u64, f: impl FnOnce(&mut RawInode)) -> Result<(), Error> {
        self.record(lba, 248, f)
    }

    /// Changes block group descriptor `lba` and reseals it.
    fn group(&mut self, lba: u64, f: impl FnOnce(&mut RawBlockGroup)) -> Result<(), Error> {
        self.record(lba, 112, f)
    }

    /// Changes the hot part of zone group descriptor `lba` and reseals it.
    fn zone(&mut self, lba: u64, f: impl FnOnce(&mut RawZoneGroupHot)) -> Result<(), Error> {
        self.record(lba, 56, f)
    }

    /// Changes the directory entry at byte `off` of block `lba` and reseals the block.
    fn dirent(
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
    fn clear_dirent(&mut self, lba: u64, off: usize) -> Result<(), Error> {
        self.dirent(lba, off, |d| d.as_mut_bytes().fill(0))
    }

    /// Marks `len` data blocks from data block `first` of block group `bi` in use, and
    /// takes them from the group's and its zone group's free counts.
    fn take_blocks(&mut self, bi: u32, first: u64, len: u64) -> Result<(), Error> {
        let mut buf: Block = [0; BLOCK_SIZE];
        let bg = self.fs.block_group(bi, &mut buf)?;
        let zg = self.fs.zone_group(bg.raw().owner_zg.get(), &mut buf)?;
        let start = bg.raw().start_block.get().saturating_add(1);
        for k in 0..len {
            let i = first.saturating_add(k);
            let b = self.block(start.saturating_add(i / BITS_PER_BITMAP_BLOCK))?;
            set_bit(b, i % BITS_PER_BITMAP_BLOCK, true);
        }
        self.group(bg.lba(), |d| {
            d.free_data_blocks
                .set(d.free_data_blocks.get().saturating_sub(len));
        })?;
        self.zone(zg.lba(), |h| {
            h.free_data_blocks
                .set(h.free_data_blocks.get().saturating_sub(len));
        })
    }
}

/// Recomputes the tail checksum of a tree, directory or xattr block.
fn reseal_tail(b: &mut Block) {
    let c = crc32c_skipping(&b[..], TAIL_AT.saturating_add(8));
    if let Some(dst) = b.get_mut(TAIL_AT.saturating_add(8)..) {
        dst.copy_from_slice(&c.to_le_bytes());
    }
}

fn split(offset: u64) -> (u64, usize) {
    (
        offset / BLOCK_SIZE_U64,
        usize::try_from(offset % BLOCK_SIZE_U64).unwrap_or(0),
    )
}

fn expected(f: &Finding) -> Option<u64> {
    match f.error.kind {
        ErrorKind::Mismatch { expected, .. } => Some(expected),
        _ => None,
    }
}

/// Plans one round's fixes from the findings and the ownership map.
fn plan<D: BlockDeviceMut>(
    fs: &Fs<D>,
    found: &[Finding],
    own: Option<&OwnershipMap>,
    patches: &mut Patches<'_, D>,
    fixes: &mut Vec<Fix>,
) -> Result<(), Error> {
    let has = |c: Code| found.iter().any(|f| f.code == c);
    // Bitmaps and counters, rebuilt from the ownership map.
    if let Some(own) = own {
        if has(Code::BlockLeaked)
            || has(Code::BlockUnmarked)
            || has(Code::GroupFreeCount)
            || has(Code::ZoneFreeCount)
            || has(Code::BitmapPadding)
        {
            // When an inode in use, or part of its tree, could not be read, the blocks
            // it owns are unknown: bits are only ever set then, never cleared, so no
            // block of an unreadable file is handed out again.
            let unknown_owners = found.iter().any(|f| {
                f.ino.is_some()
                    && matches!(
                        f.code,
                        Code::Inode
                            | Code::Checksum
                            | Code::Magic
                            | Code::ExtentTree
                            | Code::ReadFailed
                    )
            });
            rebuild_bitmaps(fs, own, unknown_owners, patches, fixes)?;
        }
    }
    if has(Code::BitmapPadding) {
        let sb = fs.superblock();
        let start = sb.raw().inode_bitmap_start.get();
        for k in 0..sb.raw().inode_bitmap_blocks.get() {
            let lba = start.saturating_add(k);
            let base = k.saturating_mul(BITS_PER_BITMAP_BLOCK);
            let live = sb
                .inode_count()
                .saturating_sub(base)
                .min(BITS_PER_BITMAP_BLOCK);
            let b = patches.block(lba)?;
            let before = *b;
            for i in live..BITS_PER_BITMAP_BLOCK {
                set_bit(b, i, true);
            }
            if k == 0 {
                set_bit(b, 0, true);
            }
            if *b != before {
                fixes.push(Fix {
                    code: Code::BitmapPadding,
                    action: "inode bitmap padding bits set",
                    offset: lba.saturating_mul(BLOCK_SIZE_U64),
                    value: None,
                    lossless: true,
                });
            }
        }
    }
    // Entries decide link counts: while entries are being fixed, counts wait for the
    // next round's check.
    let entries_change = found.iter().any(|f| {
        matches!(
            f.code,
            Code::DirentType
                | Code::DirentFree
                | Code::DirentDuplicate
                | Code::DirLinked
                | Code::DirBlock
        )
    });
    for f in found {
        let (lba, off) = split(f.error.offset);
        let want = expected(f);
        let fix = |action, lossless| Fix {
            code: f.code,
            action,
            offset: f.error.offset,
            value: want,
            lossless,
        };
        match (f.code, want) {
            // No names at all is an orphan (reconnecting is not done here), not nlink 0.
            (Code::LinkCount, Some(n)) if n >= 1 && !entries_change => {
                let n32 = u32::try_from(n).unwrap_or(u32::MAX);
                patches.inode(lba, |r| r.nlink.set(n32))?;
                fixes.push(fix("nlink set to the references counted", true));
            }
            (Code::InodeBlocks, Some(n)) => {
                patches.inode(lba, |r| r.blocks.set(n))?;
                fixes.push(fix("blocks set to the extents' total", true));
            }
            (Code::DirSize, Some(n)) => {
                patches.inode(lba, |r| r.size.set(n))?;
                fixes.push(fix("directory size set to its mapped blocks", true));
            }
            (Code::DirParent, Some(n)) => {
                patches.inode(lba, |r| r.parent.set(n))?;
                fixes.push(fix("parent set to the directory naming it", true));
            }
            (Code::DirentType, Some(t)) => {
                let t8 = u8::try_from(t).unwrap_or(0);
                patches.dirent(lba, off.saturating_sub(10), |d| d.file_type = t8)?;
                fixes.push(fix("file_type set to the inode's", true));
            }
            // A directory named twice (a hard link, or the entry closing a loop): the
            // later entry goes; the directory stays reachable through the first.
            (Code::DirLinked, _) => {
                patches.clear_dirent(lba, off)?;
                fixes.push(fix("entry naming a directory a second time removed", false));
            }
            // An entry naming an inode past the table stops its block from parsing: it
            // goes like one naming a free inode.
            (Code::DirBlock, _)
                if f.error.what == "dirent.inode"
                    && matches!(f.error.kind, ErrorKind::OutOfRange { .. }) =>
            {
                patches.clear_dirent(lba, off)?;
                fixes.push(fix("entry naming an inode past the table removed", false));
            }
            // An inode whose checksum alone is wrong: resealed when, with the checksum
            // recomputed, it passes every other inode rule (its tree and data are checked
            // again next round).
            (Code::Checksum, _) if f.error.what == "inode.checksum" => {
                let itable = fs.superblock().raw().inode_table_start.get();
                let ino = lba.saturating_sub(itable);
                let before = *patches.block(lba)?;
                patches.inode(lba, |_| {})?;
                let after = *patches.block(lba)?;
                if tet_core::cetrafs::Inode::parse(&after, lba, ino).is_ok() {
                    fixes.push(fix(
                        "inode checksum recomputed (the inode is otherwise sound)",
                        true,
                    ));
                } else if let Some(b) = patches.blocks.get_mut(&lba) {
                    *b = before;
                }
            }
            (Code::DirentFree, _) => {
                patches.clear_dirent(lba, off)?;
                fixes.push(fix("entry naming an inode not in use removed", false));
            }
            (Code::DirentDuplicate, _) => {
                let mut renamed = false;
                patches.dirent(lba, off.saturating_sub(11), |d| {
                    let len = usize::from(d.name_len.get()).min(255);
                    let mut suffix = [0u8; 21];
                    let n = write_suffix(&mut suffix, d.inode.get());
                    let keep = len.min(255usize.saturating_sub(n));
                    if let (Some(dst), Some(src)) = (
                        d.name.get_mut(keep..keep.saturating_add(n)),
                        suffix.get(..n),
                    ) {
                        dst.copy_from_slice(src);
                        d.name_len
                            .set(u16::try_from(keep.saturating_add(n)).unwrap_or(255));
                        renamed = true;
                    }
                })?;
                if renamed {
                    fixes.push(fix(
                        "repeated name renamed with ~ and the inode number",
                        false,
                    ));
                }
            }
            _ => {}
        }
    }
    // Orphans, once nothing else in this round changes entries or bitmaps (the new
    // directory's blocks are allocated from what the bitmaps say is free).
    let busy = entries_change
        || !patches.blocks.is_empty()
        || has(Code::BlockLeaked)
        || has(Code::BlockUnmarked);
    if !busy {
        if let Some(own) = own {
            reconnect_orphans(fs, found, own, patches, fixes)?;
            if patches.blocks.is_empty() {
                if let Some(f) = found
                    .iter()
                    .find(|f| f.code == Code::BlockShared && f.error.what == fsck::EXTENT_SHARED)
                {
                    clone_extent(fs, f, own, patches, fixes)?;
                }
            }
        }
    }
    Ok(())
}

/// A block owned twice: the later claimant's extent gets a copy of its blocks in free
/// space (as e2fsck clones), one extent per round. No room: left.
fn clone_extent<D: BlockDeviceMut>(
    fs: &Fs<D>,
    f: &Finding,
    own: &OwnershipMap,
    patches: &mut Patches<'_, D>,
    fixes: &mut Vec<Fix>,
) -> Result<(), Error> {
    let (elba, field) = split(f.error.offset);
    let entry = field.saturating_sub(8);
    let raw = *patches.block(elba)?;
    let Some(bytes) = raw.get(entry..entry.saturating_add(16)) else {
        return Ok(());
    };
    let ext = tet_core::cetrafs::raw::RawExtent::read_from_bytes(bytes)
        .map_err(|_| Error::new(ErrorKind::Invalid, "extent", elba))?;
    let len = u64::from(ext.len.get() & !tet_core::cetrafs::EXTENT_UNINIT);
    let old = ext.physical.get();
    if len == 0 || len > 4096 {
        return Ok(());
    }
    let sb = *fs.superblock();
    let mut buf: Block = [0; BLOCK_SIZE];
    // A run of `len` blocks free in the bitmap and owned by nothing, in one group.
    let mut found_run = None;
    'groups: for bi in 0..sb.block_group_count() {
        let bg = fs.block_group(bi, &mut buf)?;
        let r = *bg.raw();
        let start = r.start_block.get().saturating_add(1);
        let mut run = 0u64;
        for i in 0..r.data_block_count.get() {
            let k = i / BITS_PER_BITMAP_BLOCK;
            let b = patches.block(start.saturating_add(k))?;
            let bit = i % BITS_PER_BITMAP_BLOCK;
            let set = usize::try_from(bit / 8)
                .ok()
                .and_then(|x| b.get(x))
                .is_some_and(|x| x & (1u8 << (bit % 8)) != 0);
            run = if set || own.owned(bi, i) {
                0
            } else {
                run.saturating_add(1)
            };
            if run == len {
                let first = i.saturating_add(1).saturating_sub(len);
                found_run = Some((bi, first, bg.data_start().saturating_add(first)));
                break 'groups;
            }
        }
    }
    let Some((bi, first, new)) = found_run else {
        // No room for a copy: the later owner's extent is cleared, its range becomes a
        // hole (as e2fsck does). Only an extent held in the inode itself; one in a tree
        // block is left.
        let is_inode = elba >= sb.raw().inode_table_start.get()
            && elba
                < sb.raw()
                    .inode_table_start
                    .get()
                    .saturating_add(sb.inode_count());
        let Some(k) = entry.checked_sub(116).map(|x| x / 16).filter(|k| *k < 4) else {
            return Ok(());
        };
        if !is_inode {
            return Ok(());
        }
        patches.inode(elba, |r| {
            let n = usize::from(r.extent_header.entries.get()).min(4);
            if r.extent_header.depth.get() != 0 || k >= n {
                return;
            }
            let mut slots = [0u8; 64];
            let mut w = 0usize;
            for (i, slot) in r.slots.chunks_exact(16).enumerate().take(n) {
                if i != k {
                    if let Some(dst) = slots.get_mut(w..w.saturating_add(16)) {
                        dst.copy_from_slice(slot);
                    }
                    w = w.saturating_add(16);
                }
            }
            r.slots = slots;
            r.extent_header
                .entries
                .set(u16::try_from(n.saturating_sub(1)).unwrap_or(0));
            r.blocks.set(r.blocks.get().saturating_sub(len));
        })?;
        fixes.push(Fix {
            code: Code::BlockShared,
            action: "extent cleared (no free space for a copy): its range reads as a hole",
            offset: f.error.offset,
            value: Some(old),
            lossless: false,
        });
        return Ok(());
    };
    for k in 0..len {
        fs.device().read_block(old.saturating_add(k), &mut buf)?;
        patches.fresh.push(new.saturating_add(k));
        let dst = patches.block(new.saturating_add(k))?;
        *dst = buf;
    }
    // The extent points at the copy; the block holding it is resealed.
    let is_inode = elba >= sb.raw().inode_table_start.get()
        && elba
            < sb.raw()
                .inode_table_start
                .get()
                .saturating_add(sb.inode_count());
    let b = patches.block(elba)?;
    if let Some(dst) = b.get_mut(entry.saturating_add(8)..entry.saturating_add(16)) {
        dst.copy_from_slice(&new.to_le_bytes());
    }
    if is_inode {
        patches.inode(elba, |_| {})?;
    } else {
        reseal_tail(b);
    }
    // Bitmap bits and free counts for the copy.
    patches.take_blocks(bi, first, len)?;
    fixes.push(Fix {
        code: Code::BlockShared,
        action: "extent cloned: its blocks copied to free space for the later owner",
        offset: f.error.offset,
        value: Some(new),
        lossless: false,
    });
    Ok(())
}

/// The name `lost+found`.
const LOST_FOUND: &[u8] = b"lost+found";

/// The first empty entry slot of directory `dir`'s blocks: (block, byte offset).
fn free_slot<D: BlockDeviceMut>(
    fs: &Fs<D>,
    dir: &tet_core::cetrafs::Inode,
    patches: &mut Patches<'_, D>,
    taken: &[(u64, usize)],
) -> Result<Option<(u64, usize)>, Error> {
    let mut bufs = Buffers::new();
    let mut blocks = Vec::new();
    let _ = fs.for_each_extent(dir, &mut bufs.tree, |e| {
        for b in 0..u64::from(e.len) {
            blocks.push(e.physical.saturating_add(b));
        }
        Ok(core::ops::ControlFlow::Continue(()))
    })?;
    for lba in blocks {
        let b = patches.block(lba)?;
        for k in 0..tet_core::cetrafs::DIRENTS_PER_BLOCK {
            let off = k.saturating_mul(266);
            let empty = b
                .get(off..off.saturating_add(8))
                .is_some_and(|x| x.iter().all(|v| *v == 0));
            if empty && !taken.contains(&(lba, off)) {
                return Ok(Some((lba, off)));
            }
        }
    }
    Ok(None)
}

/// A clear bit below `limit` in the bitmap blocks from `start` (`count` of them), not
/// in `avoid`; returns its index.
fn free_bit<D: BlockDeviceMut>(
    patches: &mut Patches<'_, D>,
    start: u64,
    count: u64,
    limit: u64,
    skip: impl Fn(u64) -> bool,
) -> Result<Option<u64>, Error> {
    for k in 0..count {
        let base = k.saturating_mul(BITS_PER_BITMAP_BLOCK);
        let b = *patches.block(start.saturating_add(k))?;
        for i in 0..BITS_PER_BITMAP_BLOCK {
            let abs = base.saturating_add(i);
            if abs >= limit {
                return Ok(None);
            }
            let set = usize::try_from(i / 8)
                .ok()
                .and_then(|x| b.get(x))
                .is_some_and(|x| x & (1u8 << (i % 8)) != 0);
            if !set && !skip(abs) {
                return Ok(Some(abs));
            }
        }
    }
    Ok(None)
}

/// Names every orphan in `/lost+found` (made if absent) by its inode number, as
/// e2fsck does. A directory moved there gets `/lost+found` as its parent; link counts
/// follow in the next round. Orphans beyond the free entry slots wait for later rounds.
fn reconnect_orphans<D: BlockDeviceMut>(
    fs: &Fs<D>,
    found: &[Finding],
    own: &OwnershipMap,
    patches: &mut Patches<'_, D>,
    fixes: &mut Vec<Fix>,
) -> Result<(), Error> {
    let orphans: Vec<u64> = found
        .iter()
        .filter(|f| f.code == Code::Orphan)
        .filter_map(|f| f.ino)
        .collect();
    if orphans.is_empty() {
        return Ok(());
    }
    let sb = *fs.superblock();
    let mut bufs = Buffers::new();
    let root = fs.inode(sb.root_inode(), &mut bufs.data)?;
    let itable = sb.raw().inode_table_start.get();
    let found_dir = fs.lookup(&root, LOST_FOUND, &mut bufs)?;
    let lf_ino = match found_dir {
        Some(i) if fs.inode(i, &mut bufs.data).is_ok_and(|x| x.is_dir()) => i,
        Some(_) => return Ok(()), // a file by that name: leave the orphans
        None => {
            // A new directory: an inode, one block, an entry in the root.
            let Some((root_blk, root_off)) = free_slot(fs, &root, patches, &[])? else {
                return Ok(());
            };
            let ib = sb.raw().inode_bitmap_start.get();
            let Some(ino) = free_bit(
                patches,
                ib,
                sb.raw().inode_bitmap_blocks.get(),
                sb.inode_count(),
                |i| i == 0,
            )?
            else {
                return Ok(());
            };
            // A data block free in the bitmap and owned by nothing.
            let mut block = None;
            for bi in 0..sb.block_group_count() {
                let bg = fs.block_group(bi, &mut bufs.data)?;
                let raw = *bg.raw();
                let start = raw.start_block.get().saturating_add(1);
                let dbm = bitmap_blocks(raw.length_blocks.get());
                if let Some(i) = free_bit(patches, start, dbm, raw.data_block_count.get(), |i| {
                    own.owned(bi, i)
                })? {
                    block = Some((bi, i, bg.data_start().saturating_add(i)));
                    break;
                }
            }
            let Some((bi, bit, lba)) = block else {
                return Ok(());
            };
            // The directory block, empty.
            patches.fresh.push(lba);
            patches.fresh.push(itable.saturating_add(ino));
            let b = patches.block(lba)?;
            *b = [0; BLOCK_SIZE];
            if let Some(dst) = b.get_mut(TAIL_AT..TAIL_AT.saturating_add(4)) {
                dst.copy_from_slice(&tet_core::cetrafs::TAIL_DIR);
            }
            reseal_tail(b);
            // The inode.
            let ilba = itable.saturating_add(ino);
            let ib_blk = patches.block(ilba)?;
            *ib_blk = [0; BLOCK_SIZE];
            patches.inode(ilba, |r| {
                r.magic = tet_core::cetrafs::INODE_MAGIC;
                r.ino.set(ino);
                r.mode.set(0o040_700);
                r.nlink.set(2);
                r.size.set(BLOCK_SIZE_U64);
                r.blocks.set(1);
                r.parent.set(sb.root_inode());
                r.extent_header.magic.set(tet_core::cetrafs::EXTENT_MAGIC);
                r.extent_header.entries.set(1);
                r.extent_header.max.set(4);
                let mut e = [0u8; 16];
                e[4..8].copy_from_slice(&1u32.to_le_bytes());
                e[8..16].copy_from_slice(&lba.to_le_bytes());
                r.slots[..16].copy_from_slice(&e);
            })?;
            // Bitmaps and counts.
            let ibm = patches.block(ib.saturating_add(ino / BITS_PER_BITMAP_BLOCK))?;
            set_bit(ibm, ino % BITS_PER_BITMAP_BLOCK, true);
            patches.take_blocks(bi, bit, 1)?;
            // The root's entry and link count.
            patches.dirent(root_blk, root_off, |e| {
                e.inode.set(ino);
                e.name_len.set(10);
                e.file_type = 2;
                if let Some(dst) = e.name.get_mut(..LOST_FOUND.len()) {
                    dst.copy_from_slice(LOST_FOUND);
                }
            })?;
            patches.inode(root.lba(), |r| r.nlink.set(r.nlink.get().saturating_add(1)))?;
            fixes.push(Fix {
                code: Code::Orphan,
                action: "/lost+found created",
                offset: ilba.saturating_mul(BLOCK_SIZE_U64),
                value: Some(ino),
                lossless: true,
            });
            // Its entries are written below, in the block just made.
            ino
        }
    };
    let lf = if found_dir.is_some() {
        fs.inode(lf_ino, &mut bufs.data)?
    } else {
        // Not on the device yet: parse it from the patch.
        let ilba = itable.saturating_add(lf_ino);
        let b = *patches.block(ilba)?;
        tet_core::cetrafs::Inode::parse(&b, ilba, lf_ino)?
    };
    let mut taken: Vec<(u64, usize)> = Vec::new();
    let mut subdirs = 0u32;
    for o in orphans {
        let Ok(inode) = fs.inode(o, &mut bufs.data) else {
            continue;
        };
        let Some((blk, off)) = free_slot(fs, &lf, patches, &taken)? else {
            break;
        };
        taken.push((blk, off));
        let ftype = if inode.is_dir() {
            2
        } else if inode.is_symlink() {
            7
        } else {
            1
        };
        let mut name = [0u8; 21];
        let n = write_suffix(&mut name, o);
        let digits = name.get(1..n).unwrap_or(&[]).to_vec();
        patches.dirent(blk, off, |e| {
            e.inode.set(o);
            e.name_len.set(u16::try_from(digits.len()).unwrap_or(0));
            e.file_type = ftype;
            if let Some(dst) = e.name.get_mut(..digits.len()) {
                dst.copy_from_slice(&digits);
            }
        })?;
        if inode.is_dir() {
            patches.inode(inode.lba(), |r| r.parent.set(lf_ino))?;
            subdirs = subdirs.saturating_add(1);
        }
        fixes.push(Fix {
            code: Code::Orphan,
            action: "orphan named in /lost+found by its inode number",
            offset: inode.lba().saturating_mul(BLOCK_SIZE_U64),
            value: Some(o),
            lossless: true,
        });
    }
    if subdirs > 0 {
        patches.inode(lf.lba(), |r| {
            r.nlink.set(r.nlink.get().saturating_add(subdirs))
        })?;
    }
    Ok(())
}

/// `~` and the decimal `ino` into `out`; returns the length.
fn write_suffix(out: &mut [u8; 21], ino: u64) -> usize {
    let mut digits = [0u8; 20];
    let mut n = 0usize;
    let mut v = ino;
    loop {
        if let Some(d) = digits.get_mut(n) {
            *d = b'0'.saturating_add(u8::try_from(v % 10).unwrap_or(0));
        }
        n = n.saturating_add(1);
        v /= 10;
        if v == 0 || n >= 20 {
            break;
        }
    }
    if let Some(o) = out.first_mut() {
        *o = b'~';
    }
    for k in 0..n {
        if let (Some(dst), Some(src)) = (
            out.get_mut(k.saturating_add(1)),
            digits.get(n.saturating_sub(1).saturating_sub(k)),
        ) {
            *dst = *src;
        }
    }
    n.saturating_add(1)
}

fn set_bit(b: &mut Block, i: u64, on: bool) {
    if let Some(byte) = usize::try_from(i / 8).ok().and_then(|k| b.get_mut(k)) {
        let m = 1u8 << (i % 8);
        if on {
            *byte |= m;
        } else {
            *byte &= !m;
        }
    }
}

/// Data bitmaps equal to the ownership map (padding bits set), and free counts that
/// match them, per block group and per zone group.
fn rebuild_bitmaps<D: BlockDeviceMut>(
    fs: &Fs<D>,
    own: &OwnershipMap,
    keep_set: bool,
    patches: &mut Patches<'_, D>,
    fixes: &mut Vec<Fix>,
) -> Result<(), Error> {
    let sb = *fs.superblock();
    let mut buf: Block = [0; BLOCK_SIZE];
    for z in 0..sb.zone_group_count() {
        let zg = fs.zone_group(z, &mut buf)?;
        let first = zg.cold().first_bg_id.get();
        let mut zone_free = 0u64;
        for bi in first..first.saturating_add(zg.cold().bg_count.get()) {
            let bg = fs.block_group(bi, &mut buf)?;
            let raw = *bg.raw();
            let data = raw.data_block_count.get();
            let dbm = bitmap_blocks(raw.length_blocks.get());
            let mut used = 0u64;
            for k in 0..dbm {
                let lba = raw.start_block.get().saturating_add(1).saturating_add(k);
                let base = k.saturating_mul(BITS_PER_BITMAP_BLOCK);
                let disk = *patches.block(lba)?;
                let mut want: Block = [0; BLOCK_SIZE];
                for i in 0..BITS_PER_BITMAP_BLOCK {
                    let abs = base.saturating_add(i);
                    let was = usize::try_from(i / 8)
                        .ok()
                        .and_then(|x| disk.get(x))
                        .is_some_and(|x| x & (1u8 << (i % 8)) != 0);
                    let on = abs >= data || own.owned(bi, abs) || (keep_set && was);
                    if on && abs < data {
                        used = used.saturating_add(1);
                    }
                    set_bit(&mut want, i, on);
                }
                let b = patches.block(lba)?;
                if *b != want {
                    *b = want;
                    fixes.push(Fix {
                        code: Code::BlockLeaked,
                        action: "data bitmap rebuilt from the blocks files, trees and queues own",
                        offset: lba.saturating_mul(BLOCK_SIZE_U64),
                        value: None,
                        lossless: true,
                    });
                }
            }
            let free = data.saturating_sub(used);
            zone_free = zone_free.saturating_add(free);
            if free != raw.free_data_blocks.get() {
                let lba = bg.lba();
                patches.group(lba, |d| d.free_data_blocks.set(free))?;
                fixes.push(Fix {
                    code: Code::GroupFreeCount,
                    action: "block group free_data_blocks set from its bitmap",
                    offset: lba.saturating_mul(BLOCK_SIZE_U64).saturating_add(64),
                    value: Some(free),
                    lossless: true,
                });
            }
        }
        if zone_free != zg.hot().free_data_blocks.get() {
            let lba = zg.lba();
            patches.zone(lba, |h| h.free_data_blocks.set(zone_free))?;
            fixes.push(Fix {
                code: Code::ZoneFreeCount,
                action: "zone group free_data_blocks set to its groups' sum",
                offset: lba.saturating_mul(BLOCK_SIZE_U64).saturating_add(16),
                value: Some(zone_free),
                lossless: true,
            });
        }
    }
    Ok(())
}

/// Writes `blocks` through a clean journal as committed transactions of at most one
/// journal's slots each, replaying each before the next.
fn apply<D: BlockDeviceMut>(
    fs: &Fs<D>,
    blocks: &BTreeMap<u64, Block>,
    fresh: &[u64],
    opts: &RepairOptions,
    txn: &mut u64,
    bufs: &mut Buffers,
) -> Result<(), RepairError> {
    let sb = *fs.superblock();
    let slots = fs.journal_slots();
    let row = (0..sb.node_capacity())
        .find(|r| {
            fs.journal_flag(*r, &mut bufs.data)
                .is_ok_and(|f| f.raw().state.get() == JOURNAL_CLEAN)
        })
        .ok_or(RepairError::NoJournal)?;
    if slots == 0 {
        return Err(RepairError::NoJournal);
    }
    // The group tables are hot-sector records (section 1): written by compare-and-write
    // of their first 512 bytes, after the journaled blocks, never through a journal
    // (whose targets lie past them).
    let tables_end = sb.raw().inode_bitmap_start.get();
    // Batches are atomic, their order is not: blocks nothing references yet go first,
    // then bitmaps, then the blocks that reference them, so a cut between batches leaves
    // at worst an unreferenced block or a leaked bit, which the next round fixes.
    let ib = sb.raw().inode_bitmap_start.get();
    let ib_end = ib.saturating_add(sb.raw().inode_bitmap_blocks.get());
    let mut bitmap_blocks_set: Vec<(u64, u64)> = vec![(ib, ib_end)];
    for bi in 0..sb.block_group_count() {
        let (start, len) = sb.bg_span(bi);
        let first = start.saturating_add(1);
        bitmap_blocks_set.push((first, first.saturating_add(bitmap_blocks(len))));
    }
    let rank = |l: u64| -> u8 {
        if fresh.contains(&l) {
            0
        } else if bitmap_blocks_set.iter().any(|(a, b)| l >= *a && l < *b) {
            1
        } else {
            2
        }
    };
    let mut list: Vec<(&u64, &Block)> = blocks.iter().filter(|(l, _)| **l >= tables_end).collect();
    list.sort_by_key(|(l, _)| (rank(**l), **l));
    let hot: Vec<(&u64, &Block)> = blocks.iter().filter(|(l, _)| **l < tables_end).collect();
    let per = usize::try_from(slots).unwrap_or(1).max(1);
    let start = fs.journal_start(row);
    for batch in list.chunks(per) {
        *txn = txn.saturating_add(1);
        let n = u32::try_from(batch.len()).unwrap_or(0);
        for (k, (target, new)) in batch.iter().enumerate() {
            let k32 = u32::try_from(k).unwrap_or(0);
            fs.device().read_block(**target, &mut bufs.data)?;
            let mut h = RawSlotHeader::read_from_bytes(&[0u8; 64][..])
                .map_err(|_| Error::new(ErrorKind::Invalid, "slot", 0))?;
            h.magic = JS_MAGIC;
            h.flags.set(if k32.saturating_add(1) == n {
                F_COMMIT
            } else {
                0
            });
            h.txn_id.set(*txn);
            h.target_lba.set(**target);
            h.payload_checksum.set(u64::from(crc32c(&new[..])));
            h.pre_checksum.set(u64::from(crc32c(&bufs.data[..])));
            h.txn_index.set(k32);
            h.txn_slots.set(n);
            h.header_checksum.set(crc32c_skipping(h.as_bytes(), 56));
            let hdr = start
                .saturating_add(1)
                .saturating_add(u64::from(k32).saturating_mul(2));
            let mut hb: Block = [0; BLOCK_SIZE];
            if let Some(dst) = hb.get_mut(..64) {
                dst.copy_from_slice(h.as_bytes());
            }
            fs.device().write_block(hdr.saturating_add(1), new)?;
            fs.device().write_block(hdr, &hb)?;
        }
        // The rest of the journal's slots: empty, so no stale slot joins the transaction.
        let empty: Block = [0; BLOCK_SIZE];
        for k in u64::from(n)..slots {
            let hdr = start.saturating_add(1).saturating_add(k.saturating_mul(2));
            fs.device().read_block(hdr, &mut bufs.data)?;
            if bufs.data.iter().any(|b| *b != 0) {
                fs.device().write_block(hdr, &empty)?;
            }
        }
        fs.device().flush()?;
        // Commit: the flag goes DIRTY by compare-and-write of its hot sector.
        fs.device().read_block(start, &mut bufs.data)?;
        let mut old = [0u8; 512];
        old.copy_from_slice(bufs.data.get(..512).unwrap_or(&[0; 512]));
        let mut flag = RawJournalFlag::read_from_bytes(bufs.data.get(..64).unwrap_or(&[]))
            .map_err(|_| Error::new(ErrorKind::Invalid, "journal flag", start))?;
        flag.state.set(JOURNAL_DIRTY);
        flag.seq.set(flag.seq.get().wrapping_add(1));
        flag.checksum.set(crc32c_skipping(flag.as_bytes(), 56));
        let mut new = old;
        if let Some(dst) = new.get_mut(..64) {
            dst.copy_from_slice(flag.as_bytes());
        }
        if !fs.device().compare_and_write(start, &old, &new)? {
            return Err(RepairError::NoJournal);
        }
        fs.device().flush()?;
        replay_all(fs, opts, bufs)?;
    }
    for (lba, new) in hot {
        fs.device().read_block(*lba, &mut bufs.data)?;
        let mut old = [0u8; 512];
        old.copy_from_slice(bufs.data.get(..512).unwrap_or(&[0; 512]));
        let mut sector = [0u8; 512];
        sector.copy_from_slice(new.get(..512).unwrap_or(&[0; 512]));
        if old != sector && !fs.device().compare_and_write(*lba, &old, &sector)? {
            return Err(RepairError::NoJournal);
        }
    }
    fs.device().flush()?;
    Ok(())
}

fn replay_all<D: BlockDeviceMut>(
    fs: &Fs<D>,
    opts: &RepairOptions,
    bufs: &mut Buffers,
) -> Result<ReplayReport, ReplayError> {
    let n = fs.committed_slots(&mut [], bufs);
    let mut table = vec![Committed::default(); n];
    replay(
        fs,
        ReplayOptions {
            node_id: opts.node_id,
            force: true,
        },
        &mut table,
        bufs,
        &mut |_: &Finding| {},
    )
}

/// Repairs the image on `dev` (see the module docs). `decide` is asked about every fix
/// the mode allows and may refuse it (interactive repair); with [`Mode::No`] nothing is
/// written and `fixes` lists what one round would do.
pub fn repair<D: BlockDeviceMut>(
    dev: D,
    mode: Mode,
    opts: &RepairOptions,
    decide: &mut dyn FnMut(&Fix) -> bool,
) -> Result<RepairOutcome, RepairError> {
    let mut out = RepairOutcome::default();
    let mut bufs = Buffers::new();
    let check_opts = fsck::Options {
        memory_limit: opts.memory_limit,
    };
    let errors_of = |found: &[Finding]| -> Vec<Finding> {
        found
            .iter()
            .filter(|f| f.severity() == Severity::Error)
            .copied()
            .collect()
    };
    let fs = match Fs::open(&dev, &mut bufs.data) {
        Ok(fs) => fs,
        Err(_) => {
            // A mount failure is not repaired here: report the check's findings.
            let (found, _) = fsck::findings(&dev, &check_opts);
            out.left = errors_of(&found);
            out.found = true;
            return Ok(out);
        }
    };
    if !opts.force {
        for row in 0..fs.superblock().node_capacity() {
            if let Ok(Some(n)) = fs.node_row(row, &mut bufs.data) {
                if n.raw().state.get() == 1 {
                    return Err(RepairError::Mounted {
                        row,
                        node_id: n.raw().node_id.get(),
                    });
                }
            }
        }
    }
    if mode != Mode::No {
        out.replay = replay_all(&fs, opts, &mut bufs)?;
    }
    let mut txn = u64::from(u32::MAX);
    loop {
        let mut found: Vec<Finding> = Vec::new();
        let (_, own) =
            fsck::check_keeping_maps(&dev, &check_opts, &mut |f: &Finding| found.push(*f));
        if out.rounds == 0 {
            out.found = found
                .iter()
                .any(|f| f.severity() == Severity::Error || f.code == Code::JournalReplay);
        }
        let fs = Fs::open(&dev, &mut bufs.data)?;
        let mut patches = Patches {
            fs: &fs,
            blocks: BTreeMap::new(),
            fresh: Vec::new(),
        };
        let mut planned = Vec::new();
        plan(&fs, &found, own.as_ref(), &mut patches, &mut planned)?;
        let allowed: Vec<Fix> = planned
            .iter()
            .filter(|f| match mode {
                Mode::No => true,
                Mode::Preen => f.lossless,
                Mode::Yes => true,
            })
            .copied()
            .collect();
        if mode == Mode::No || allowed.is_empty() || out.rounds >= MAX_ROUNDS {
            if mode == Mode::No {
                out.fixes = allowed;
            }
            out.left = errors_of(&found);
            return Ok(out);
        }
        // Only the blocks of the fixes allowed and accepted.
        let mut accepted = Vec::new();
        for f in &allowed {
            if decide(f) {
                accepted.push(*f);
            }
        }
        if accepted.is_empty() {
            out.left = errors_of(&found);
            return Ok(out);
        }
        let keep: BTreeMap<u64, Block> = if accepted.len() == planned.len() {
            patches.blocks
        } else {
            // A refused fix's block is not written; a block shared by an accepted and a
            // refused fix is left whole (refusing wins).
            let refused: Vec<u64> = planned
                .iter()
                .filter(|p| !accepted.contains(p))
                .map(|p| p.offset / BLOCK_SIZE_U64)
                .collect();
            patches
                .blocks
                .into_iter()
                .filter(|(lba, _)| !refused.contains(lba))
                .collect()
        };
        if keep.is_empty() {
            out.left = errors_of(&found);
            return Ok(out);
        }
        apply(&fs, &keep, &patches.fresh, opts, &mut txn, &mut bufs)?;
        out.fixes.extend(accepted);
        out.rounds = out.rounds.saturating_add(1);
    }
}
