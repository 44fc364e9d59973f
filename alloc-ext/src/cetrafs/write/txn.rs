//! One transaction: the blocks it changes, kept in memory until the commit writes them
//! through the node's journal (`docs/cetrafs.md` section 15, "The journal's life").

use alloc::boxed::Box;
use alloc::collections::{BTreeMap, BTreeSet};
use alloc::vec::Vec;

use tet_core::block::{Block, BlockDeviceMut, BLOCK_SIZE, SECTOR};
use tet_core::cetrafs::raw::{RawBlockGroup, RawJournalFlag, RawSlotHeader, RawZoneGroupHot};
use tet_core::cetrafs::{F_COMMIT, F_FRESH, JOURNAL_CLEAN, JOURNAL_DIRTY, JS_MAGIC};
use tet_core::checksum::{crc32c, crc32c_skipping};
use tet_core::{Error, ErrorKind};
use zerocopy::{FromBytes, FromZeros, IntoBytes};

use super::{Errno, WriteError, Writer};

/// The blocks a transaction changes, and what its allocation did.
///
/// The blocks change only through [`Writer::put`] and [`Writer::put_data`], which log
/// what they replace while an operation is being added to a batch ([`Txn::mark`]): an
/// operation that fails, or does not fit, is taken out again by undoing its own
/// changes, so adding one costs what it changes, not a copy of the batch.
#[derive(Default)]
pub(super) struct Txn {
    /// Journaled targets: their new contents.
    blocks: BTreeMap<u64, Box<Block>>,
    /// Targets that were free before (`F_FRESH`).
    pub fresh: BTreeSet<u64>,
    /// Newly allocated file data, written directly before the commit.
    data: BTreeMap<u64, Box<Block>>,
    /// Data blocks freed (never handed out again in the same transaction: the old
    /// file still maps them until the commit).
    pub freed: BTreeSet<u64>,
    /// Inodes freed.
    pub freed_inodes: BTreeSet<u64>,
    /// Block group → data blocks allocated, and freed.
    pub allocated_in: BTreeMap<u32, u64>,
    pub freed_in: BTreeMap<u32, u64>,
    /// While an operation is added to a batch: each block it set, with what the
    /// transaction held there before (`None`: nothing), oldest first.
    undo: Option<Vec<Undo>>,
}

/// A block an operation set in a batch, and what it replaced.
struct Undo {
    lba: u64,
    /// In `data` (new file data), else in `blocks`.
    data: bool,
    old: Option<Box<Block>>,
}

/// What a transaction held besides its blocks before an operation was added to it.
pub(super) struct Mark {
    fresh: BTreeSet<u64>,
    freed: BTreeSet<u64>,
    freed_inodes: BTreeSet<u64>,
    allocated_in: BTreeMap<u32, u64>,
    freed_in: BTreeMap<u32, u64>,
}

/// Newly allocated data blocks a batched transaction holds at most (16 MiB).
const BATCH_DATA: usize = 4096;

impl Txn {
    /// Block `lba`'s new contents when the transaction changes it.
    pub(super) fn changed(&self, lba: u64) -> Option<&Block> {
        self.blocks
            .get(&lba)
            .or_else(|| self.data.get(&lba))
            .map(|b| &**b)
    }

    /// The blocks in `from .. to` the transaction changes, with their new contents.
    pub(super) fn changed_in(&self, from: u64, to: u64) -> impl Iterator<Item = (u64, &Block)> {
        let r = from..to.max(from);
        self.blocks
            .range(r.clone())
            .chain(self.data.range(r))
            .map(|(l, b)| (*l, &**b))
    }

    /// Starts adding an operation: its block changes are logged from here, and the
    /// rest (a few small sets) remembered, until [`Txn::accept`] or [`Txn::roll_back`].
    fn mark(&mut self) -> Mark {
        self.undo = Some(Vec::new());
        Mark {
            fresh: self.fresh.clone(),
            freed: self.freed.clone(),
            freed_inodes: self.freed_inodes.clone(),
            allocated_in: self.allocated_in.clone(),
            freed_in: self.freed_in.clone(),
        }
    }

    /// Keeps the operation added since [`Txn::mark`].
    fn accept(&mut self) {
        self.undo = None;
    }

    /// Takes the operation added since [`Txn::mark`] out again: the transaction is as
    /// it was then.
    fn roll_back(&mut self, m: Mark) {
        for u in self.undo.take().unwrap_or_default().into_iter().rev() {
            let map = if u.data {
                &mut self.data
            } else {
                &mut self.blocks
            };
            match u.old {
                Some(b) => {
                    map.insert(u.lba, b);
                }
                None => {
                    map.remove(&u.lba);
                }
            }
        }
        self.fresh = m.fresh;
        self.freed = m.freed;
        self.freed_inodes = m.freed_inodes;
        self.allocated_in = m.allocated_in;
        self.freed_in = m.freed_in;
    }

    /// Logs that block `lba` (of `data` or `blocks`) held `old` before.
    fn log(&mut self, lba: u64, data: bool, old: Option<Box<Block>>) {
        if let Some(u) = self.undo.as_mut() {
            u.push(Undo { lba, data, old });
        }
    }
}

/// Most blocks one device call writes: 1 MiB, so a batch's 16 MiB of new data goes out
/// in 16 calls (one per 4 KiB block before), and the run buffer stays small.
const RUN_BLOCKS: usize = 256;

/// Gathers blocks given in ascending order into runs of consecutive LBAs, each written
/// with one [`BlockDeviceMut::write_blocks`] (a block with no neighbour, with one
/// [`BlockDeviceMut::write_block`]). The blocks are copied into one buffer of at most
/// [`RUN_BLOCKS`] blocks, reused from run to run.
struct Runs<'d, D> {
    dev: &'d D,
    first: u64,
    buf: Vec<u8>,
}

impl<'d, D: BlockDeviceMut> Runs<'d, D> {
    fn new(dev: &'d D) -> Self {
        Runs {
            dev,
            first: 0,
            buf: Vec::new(),
        }
    }

    /// Adds block `lba`: it extends the run when it follows it, else the run is
    /// written and `lba` starts the next.
    fn push(&mut self, lba: u64, b: &Block) -> Result<(), WriteError> {
        let n = self.buf.len() / BLOCK_SIZE;
        let next = self.first.saturating_add(tet_core::arith::u64_of(n));
        if n > 0 && (next != lba || n >= RUN_BLOCKS) {
            self.finish()?;
        }
        if self.buf.is_empty() {
            self.first = lba;
        }
        self.buf.extend_from_slice(b);
        Ok(())
    }

    /// Writes the run gathered so far.
    fn finish(&mut self) -> Result<(), WriteError> {
        if self.buf.len() == BLOCK_SIZE {
            let one: &Block = self
                .buf
                .as_slice()
                .try_into()
                .map_err(|_| Error::new(ErrorKind::Invalid, "write run", 0))?;
            self.dev.write_block(self.first, one)?;
        } else if !self.buf.is_empty() {
            self.dev.write_blocks(self.first, &self.buf)?;
        }
        self.buf.clear();
        Ok(())
    }
}

pub(super) fn first_sector(b: &Block) -> [u8; SECTOR] {
    let mut s = [0u8; SECTOR];
    s.copy_from_slice(b.get(..SECTOR).unwrap_or(&[0; SECTOR]));
    s
}

impl<D: BlockDeviceMut> Writer<D> {
    /// Block `lba` as the transaction sees it: its new contents, or the device's.
    pub(super) fn read(&self, t: &Txn, lba: u64) -> Result<Block, WriteError> {
        if let Some(b) = t.changed(lba) {
            return Ok(*b);
        }
        let mut b: Block = [0; BLOCK_SIZE];
        self.fs.device().read_block(lba, &mut b)?;
        Ok(b)
    }

    /// Block `lba`'s new contents: journaled, unless the transaction allocated it for
    /// new data (nothing on disk refers to it before the commit, so it stays a direct
    /// write however often the batch changes it).
    pub(super) fn put(t: &mut Txn, lba: u64, b: Block) {
        match t.data.get_mut(&lba) {
            Some(d) => {
                let old = core::mem::replace(d, Box::new(b));
                t.log(lba, true, Some(old));
            }
            None => {
                let old = t.blocks.insert(lba, Box::new(b));
                t.log(lba, false, old);
            }
        }
    }

    /// Newly allocated data block `lba`'s contents, written directly before the commit.
    pub(super) fn put_data(t: &mut Txn, lba: u64, b: Block) {
        let old = t.data.insert(lba, Box::new(b));
        t.log(lba, true, old);
    }

    /// Whether `t` fits one journal.
    pub(super) fn fits(&self, t: &Txn) -> bool {
        tet_core::arith::u64_of(t.blocks.len()) <= self.slots()
    }

    /// Runs `f` as one transaction and commits it; an error writes nothing. In batch
    /// mode ([`Writer::set_batch`]) the operation joins the pending transaction while
    /// it fits one journal (the pending one is committed first when it would not), so
    /// that several operations share a commit: each is still wholly there or absent.
    pub(super) fn run<T>(
        &mut self,
        mut f: impl FnMut(&mut Self, &mut Txn) -> Result<T, WriteError>,
    ) -> Result<T, WriteError> {
        if self.left {
            return Err(Errno::EROFS.into());
        }
        if self.batch && !self.pending.blocks.is_empty() {
            // The operation is added to the pending transaction in place (nothing in
            // `f` reads `self.pending`: operations read through `t`), and taken out
            // again unless it succeeds and the two fit together.
            let mut t = core::mem::take(&mut self.pending);
            let mark = t.mark();
            let r = f(self, &mut t);
            if r.is_ok() && self.fits(&t) && t.data.len() < BATCH_DATA {
                t.accept();
                self.pending = t;
                return r;
            }
            t.roll_back(mark);
            self.pending = t;
            match r {
                Err(e) if e.errno() != Errno::ENOSPC => return Err(e),
                // Too big together (or out of space while blocks freed in the pending
                // transaction are held back): commit the pending one, run alone.
                _ => self.sync()?,
            }
        }
        let mut t = Txn::default();
        let r = f(self, &mut t)?;
        if !self.fits(&t) {
            return Err(Errno::ENOSPC.into());
        }
        if self.batch {
            self.pending = t;
        } else {
            self.commit(t)?;
        }
        Ok(r)
    }

    /// Commits the pending transaction of batch mode (a no-op otherwise): every
    /// operation returned before is durable when this returns.
    pub fn sync(&mut self) -> Result<(), WriteError> {
        let t = core::mem::take(&mut self.pending);
        if t.blocks.is_empty() && t.data.is_empty() {
            return Ok(());
        }
        self.commit(t)
    }

    /// Whether operations wait in the pending transaction for a [`Writer::sync`].
    pub fn has_pending(&self) -> bool {
        !(self.pending.blocks.is_empty() && self.pending.data.is_empty())
    }

    /// Batch mode: operations share transactions (as many as fit one journal), each
    /// still wholly there or absent after a crash; [`Writer::sync`] commits. Turning it
    /// off commits what is pending.
    pub fn set_batch(&mut self, on: bool) -> Result<(), WriteError> {
        if !on {
            self.sync()?;
        }
        self.batch = on;
        Ok(())
    }

    /// Commits `t` (section 15's steps 1 to 6).
    pub(super) fn commit(&mut self, t: Txn) -> Result<(), WriteError> {
        let dev = self.fs.device();
        let mut runs = Runs::new(dev);
        // 1. Data first.
        for (lba, b) in &t.data {
            runs.push(*lba, b)?;
        }
        runs.finish()?;
        if t.blocks.is_empty() {
            dev.flush()?;
            return Ok(());
        }
        let txn = self.next_txn;
        self.next_txn = self.next_txn.saturating_add(1);
        let start = self.fs.journal_start(self.row);
        let n = u32::try_from(t.blocks.len()).map_err(|_| Errno::ENOSPC)?;
        // 2. Payloads, then headers, the last committing; stale headers emptied.
        let mut old: Block = [0; BLOCK_SIZE];
        for (k, (target, new)) in t.blocks.iter().enumerate() {
            let k32 = u32::try_from(k).map_err(|_| Errno::ENOSPC)?;
            let fresh = t.fresh.contains(target);
            let pre = if fresh {
                0
            } else {
                dev.read_block(*target, &mut old)?;
                u64::from(crc32c(&old))
            };
            let mut h = RawSlotHeader::new_zeroed();
            h.magic = JS_MAGIC;
            let last = k32.saturating_add(1) == n;
            h.flags
                .set(if fresh { F_FRESH } else { 0 } | if last { F_COMMIT } else { 0 });
            h.txn_id.set(txn);
            h.target_lba.set(*target);
            h.payload_checksum.set(u64::from(crc32c(&new[..])));
            h.pre_checksum.set(pre);
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
            // Header and payload are neighbours, and slot k + 1 follows slot k: the
            // slots go out as one run. Their order does not matter, since nothing
            // reads them before the flag below says DIRTY, after the flush.
            runs.push(hdr, &hb)?;
            runs.push(hdr.saturating_add(1), new)?;
        }
        let empty: Block = [0; BLOCK_SIZE];
        for k in u64::from(n)..self.stale {
            let hdr = start.saturating_add(1).saturating_add(k.saturating_mul(2));
            runs.push(hdr, &empty)?;
        }
        runs.finish()?;
        self.stale = u64::from(n);
        dev.flush()?;
        // 3. Commit: the flag DIRTY, naming the transaction the checkpoint writes (so a
        //    checkpoint write torn by a cut is rewritten by replay, section 7).
        self.set_flag(JOURNAL_DIRTY, txn)?;
        // 4. Checkpoint.
        for (target, new) in &t.blocks {
            runs.push(*target, new)?;
        }
        runs.finish()?;
        dev.flush()?;
        // 5. Clean again.
        self.set_flag(JOURNAL_CLEAN, 0)?;
        // 6. Free counts, by compare-and-write of the hot sectors.
        let mut zones: BTreeSet<u32> = BTreeSet::new();
        let touched: BTreeSet<u32> = t
            .allocated_in
            .keys()
            .chain(t.freed_in.keys())
            .copied()
            .collect();
        for bg in touched {
            let a = t.allocated_in.get(&bg).copied().unwrap_or(0);
            let f = t.freed_in.get(&bg).copied().unwrap_or(0);
            let Some(c) = self.counts.get_mut(&bg) else {
                continue;
            };
            c.free = c.free.saturating_sub(a).saturating_add(f);
            let (free, seq) = (c.free, c.reconcile_seq);
            self.write_group_count(bg, free, seq)?;
            if let Some(z) = self.zone_of(bg) {
                zones.insert(z);
            }
        }
        for z in zones {
            self.write_zone(z, Some(self.row))?;
        }
        // Not flushed here: the next transaction's first flush (or the leave's) makes
        // the counts durable; a cut before leaves them behind the bitmaps, which
        // recovery sets again.
        Ok(())
    }

    /// The node's journal flag set to `state` and `replaying_txn` by compare-and-write
    /// (`seq` + 1), flushed.
    pub(super) fn set_flag(&self, state: u32, replaying_txn: u64) -> Result<(), WriteError> {
        let dev = self.fs.device();
        let lba = self.fs.journal_start(self.row);
        let mut b: Block = [0; BLOCK_SIZE];
        let flag = self.fs.journal_flag(self.row, &mut b)?;
        let old = first_sector(&b);
        let mut f: RawJournalFlag = *flag.raw();
        f.state.set(state);
        f.replaying_txn.set(replaying_txn);
        f.seq.set(f.seq.get().wrapping_add(1));
        f.checksum.set(crc32c_skipping(f.as_bytes(), 56));
        let mut new = old;
        if let Some(dst) = new.get_mut(..64) {
            dst.copy_from_slice(f.as_bytes());
        }
        if !dev.compare_and_write(lba, &old, &new)? {
            return Err(changed("journal_flag", lba));
        }
        dev.flush()?;
        Ok(())
    }

    /// Block group `bg`'s descriptor with `free` and `reconcile_seq`, by
    /// compare-and-write of its hot sector.
    pub(super) fn write_group_count(
        &self,
        bg: u32,
        free: u64,
        reconcile_seq: u64,
    ) -> Result<(), WriteError> {
        let dev = self.fs.device();
        let lba = self
            .fs
            .superblock()
            .raw()
            .bg_table_start
            .get()
            .saturating_add(bg.into());
        let mut b: Block = [0; BLOCK_SIZE];
        dev.read_block(lba, &mut b)?;
        let old = first_sector(&b);
        let mut d = RawBlockGroup::read_from_bytes(old.get(..128).unwrap_or(&[]))
            .map_err(|_| changed("block group descriptor", lba))?;
        if d.free_data_blocks.get() == free && d.reconcile_seq.get() == reconcile_seq {
            return Ok(());
        }
        d.free_data_blocks.set(free);
        d.reconcile_seq.set(reconcile_seq);
        d.checksum.set(crc32c_skipping(d.as_bytes(), 112));
        let mut new = old;
        if let Some(dst) = new.get_mut(..128) {
            dst.copy_from_slice(d.as_bytes());
        }
        if !dev.compare_and_write(lba, &old, &new)? {
            return Err(changed("block group descriptor", lba));
        }
        Ok(())
    }

    /// Zone group `z`'s hot part with owner `owner` (`None`: released), its free count
    /// the sum of its groups' as the node counts them, by compare-and-write; `hb_seq`
    /// advances when the owner changes.
    pub(super) fn write_zone(&self, z: u32, owner: Option<u32>) -> Result<(), WriteError> {
        let dev = self.fs.device();
        let lba = 1u64.saturating_add(z.into());
        let mut b: Block = [0; BLOCK_SIZE];
        dev.read_block(lba, &mut b)?;
        let old = first_sector(&b);
        let mut h = RawZoneGroupHot::read_from_bytes(old.get(..64).unwrap_or(&[]))
            .map_err(|_| changed("zone group", lba))?;
        let (first, count) = self
            .zones
            .get(usize::try_from(z).unwrap_or(usize::MAX))
            .copied()
            .unwrap_or((0, 0));
        let mut free = 0u64;
        for bg in first..first.saturating_add(count) {
            free = free.saturating_add(self.counts.get(&bg).map_or(0, |c| c.free));
        }
        let owner16 = owner.map_or(tet_core::cetrafs::ZG_NO_OWNER, |r| {
            u16::try_from(r).unwrap_or(tet_core::cetrafs::ZG_NO_OWNER)
        });
        if h.owner_node_id.get() != owner16 {
            h.hb_seq.set(h.hb_seq.get().wrapping_add(1));
        }
        h.owner_node_id.set(owner16);
        h.free_data_blocks.set(free);
        h.hot_checksum.set(crc32c_skipping(h.as_bytes(), 56));
        let mut new = old;
        if let Some(dst) = new.get_mut(..64) {
            dst.copy_from_slice(h.as_bytes());
        }
        if new == old {
            return Ok(());
        }
        if !dev.compare_and_write(lba, &old, &new)? {
            return Err(changed("zone group", lba));
        }
        Ok(())
    }
}

/// A compare-and-write found the record changed by someone else.
pub(super) fn changed(what: &'static str, lba: u64) -> WriteError {
    WriteError::Device(Error::new(
        ErrorKind::Invalid,
        what,
        lba.saturating_mul(tet_core::block::BLOCK_SIZE_U64),
    ))
}
