//! Per-node journals: flag blocks, slots, transaction commit and replay classification,
//! and a device view that serves committed, not-yet-replayed blocks from the journal.

use core::ops::ControlFlow;

use super::raw::{RawJournalFlag, RawSlotHeader};
use super::sealed;
use super::{err, Buffers, Fs, F_COMMIT, F_FRESH, JF_MAGIC, JOURNAL_DIRTY, JS_MAGIC};
use crate::block::{Block, BlockDevice};
use crate::checksum::crc32c;
use crate::error::{Error, ErrorKind, Result};

/// A journal flag block with valid magic and checksum.
#[derive(Clone, Copy, Debug)]
pub struct JournalFlag {
    /// The raw block.
    pub raw: RawJournalFlag,
    /// Its block.
    pub lba: u64,
}

impl JournalFlag {
    /// Whether committed transactions may await replay.
    pub fn is_dirty(&self) -> bool {
        self.raw.state.get() == JOURNAL_DIRTY
    }
}

/// A slot whose header is valid.
#[derive(Clone, Copy, Debug)]
pub struct Slot {
    /// Slot number in its journal.
    pub index: u64,
    /// The header.
    pub header: RawSlotHeader,
    /// Header block.
    pub lba: u64,
    /// Payload block.
    pub payload_lba: u64,
    /// Whether the payload matches `payload_checksum`.
    pub payload_ok: bool,
}

/// What a slot means for replay (`docs/cetrafs.md` section 7).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotClass {
    /// The journal is `CLEAN`: the slot is history.
    Clean,
    /// Part of a transaction that never committed: ignored.
    Uncommitted,
    /// The target already holds the payload.
    AlreadyApplied,
    /// The target holds the pre-change contents (or is `F_FRESH`): copy the payload.
    NeedsReplay,
    /// The target changed since: replaying would clobber another node's write.
    Conflicting,
}

impl SlotClass {
    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            SlotClass::Clean => "clean",
            SlotClass::Uncommitted => "uncommitted",
            SlotClass::AlreadyApplied => "already-applied",
            SlotClass::NeedsReplay => "needs-replay",
            SlotClass::Conflicting => "conflicting",
        }
    }
}

/// The committed, not-yet-replayed blocks of every dirty journal: `(target, payload
/// block, txn_id)`, sorted by target, in a caller-sized table.
#[derive(Debug)]
pub struct Overlay<'t> {
    table: &'t mut [(u64, u64, u64)],
    len: usize,
}

impl Overlay<'_> {
    /// The entries, sorted by target.
    pub fn entries(&self) -> &[(u64, u64, u64)] {
        self.table.get(..self.len).unwrap_or(&[])
    }

    /// Where to read `lba` from.
    pub fn redirect(&self, lba: u64) -> u64 {
        let e = self.entries();
        match e.binary_search_by_key(&lba, |x| x.0) {
            Ok(i) => e.get(i).map_or(lba, |x| x.1),
            Err(_) => lba,
        }
    }
}

/// A device that reads journaled blocks from the journal.
pub struct OverlayDevice<'o, 't, D> {
    dev: D,
    overlay: &'o Overlay<'t>,
}

impl<'o, 't, D: BlockDevice> OverlayDevice<'o, 't, D> {
    /// Wraps `dev`.
    pub fn new(dev: D, overlay: &'o Overlay<'t>) -> Self {
        OverlayDevice { dev, overlay }
    }
}

impl<D: BlockDevice> BlockDevice for OverlayDevice<'_, '_, D> {
    fn block_count(&self) -> u64 {
        self.dev.block_count()
    }
    fn read_block(&self, lba: u64, buf: &mut Block) -> Result<()> {
        self.dev.read_block(self.overlay.redirect(lba), buf)
    }
}

impl<D: BlockDevice> Fs<D> {
    /// Slots per journal.
    pub fn journal_slots(&self) -> u64 {
        self.superblock().node_journal_blocks().saturating_sub(1) / 2
    }

    /// The flag block of registry row `row`'s journal.
    pub fn journal_flag(&self, row: u32, buf: &mut Block) -> Result<JournalFlag> {
        let lba = self.journal_start(row);
        self.device().read_block(lba, buf)?;
        let bytes = buf.get(..64).unwrap_or(&[]);
        let raw: RawJournalFlag = sealed(
            bytes,
            JF_MAGIC,
            56,
            ("journal_flag.magic", "journal_flag.checksum"),
            lba,
            0,
        )?;
        if raw.state.get() > JOURNAL_DIRTY {
            return Err(err(
                ErrorKind::OutOfRange {
                    value: raw.state.get().into(),
                    max: 1,
                },
                "journal_flag.state",
                lba,
                4,
            ));
        }
        if raw.row.get() != row {
            return Err(err(
                ErrorKind::Mismatch {
                    expected: row.into(),
                    found: raw.row.get().into(),
                },
                "journal_flag.row",
                lba,
                24,
            ));
        }
        Ok(JournalFlag { raw, lba })
    }

    /// Slot `s` of row `row`'s journal (`None` when empty). Reads the payload to check it.
    pub fn journal_slot(&self, row: u32, s: u64, bufs: &mut Buffers) -> Result<Option<Slot>> {
        let base = self
            .journal_start(row)
            .saturating_add(1)
            .saturating_add(s.saturating_mul(2));
        self.device().read_block(base, &mut bufs.data)?;
        let bytes = bufs.data.get(..64).unwrap_or(&[]);
        if bytes.iter().all(|b| *b == 0) {
            return Ok(None);
        }
        let h: RawSlotHeader = sealed(
            bytes,
            JS_MAGIC,
            56,
            ("slot.magic", "slot.header_checksum"),
            base,
            0,
        )?;
        let flags = h.flags.get();
        if flags & !(F_FRESH | F_COMMIT) != 0 {
            return Err(err(
                ErrorKind::UnknownFlags {
                    bits: (flags & !(F_FRESH | F_COMMIT)).into(),
                },
                "slot.flags",
                base,
                4,
            ));
        }
        if h.txn_id.get() == 0 {
            return Err(err(
                ErrorKind::OutOfRange {
                    value: 0,
                    max: u64::MAX,
                },
                "slot.txn_id",
                base,
                8,
            ));
        }
        if h.txn_slots.get() == 0 || h.txn_index.get() >= h.txn_slots.get() {
            return Err(err(
                ErrorKind::OutOfRange {
                    value: h.txn_index.get().into(),
                    max: h.txn_slots.get().saturating_sub(1).into(),
                },
                "slot.txn_index",
                base,
                40,
            ));
        }
        let target = h.target_lba.get();
        let sb = self.superblock();
        let jstart = sb.raw().node_journal_start.get();
        let jend = jstart
            .saturating_add(u64::from(sb.node_capacity()).saturating_mul(sb.node_journal_blocks()));
        let in_journals = target >= jstart && target < jend;
        if target < sb.raw().inode_bitmap_start.get() || target >= sb.total_blocks() || in_journals
        {
            return Err(err(
                ErrorKind::OutOfRange {
                    value: target,
                    max: sb.total_blocks().saturating_sub(1),
                },
                "slot.target_lba",
                base,
                16,
            ));
        }
        let payload_lba = base.saturating_add(1);
        self.device().read_block(payload_lba, &mut bufs.data)?;
        let payload_ok = u64::from(crc32c(&bufs.data[..])) == h.payload_checksum.get();
        Ok(Some(Slot {
            index: s,
            header: h,
            lba: base,
            payload_lba,
            payload_ok,
        }))
    }

    /// Classifies every non-empty slot of row `row`'s journal, calling `f` in slot order.
    /// Each slot is read twice at most (once to find its transaction's extent, once to
    /// classify), so the walk is linear in the journal size.
    pub fn classify_journal(
        &self,
        row: u32,
        bufs: &mut Buffers,
        mut f: impl FnMut(&Slot, SlotClass) -> Result<ControlFlow<()>>,
    ) -> Result<JournalFlag> {
        let flag = self.journal_flag(row, &mut bufs.data)?;
        let n = self.journal_slots();
        let mut s = 0u64;
        while s < n {
            let Some(first) = self.journal_slot(row, s, bufs)? else {
                s = s.saturating_add(1);
                continue;
            };
            // Find the transaction starting here: consecutive slots, same txn_id,
            // indices 0, 1, ...; committed if complete, all payloads valid and the last
            // carries F_COMMIT.
            let txn = first.header.txn_id.get();
            let want = u64::from(first.header.txn_slots.get());
            let mut committed = first.header.txn_index.get() == 0 && first.payload_ok;
            let mut len = 1u64;
            let mut last_commit = first.header.flags.get() & F_COMMIT != 0;
            while committed && len < want {
                let next = s.saturating_add(len);
                if next >= n {
                    committed = false;
                    break;
                }
                match self.journal_slot(row, next, bufs)? {
                    Some(sl)
                        if sl.header.txn_id.get() == txn
                            && u64::from(sl.header.txn_index.get()) == len =>
                    {
                        committed = sl.payload_ok;
                        last_commit = sl.header.flags.get() & F_COMMIT != 0;
                        len = len.saturating_add(1);
                    }
                    _ => committed = false,
                }
            }
            committed = committed && len == want && last_commit;
            for k in 0..len {
                let Some(sl) = self.journal_slot(row, s.saturating_add(k), bufs)? else {
                    continue;
                };
                let class = if !flag.is_dirty() {
                    SlotClass::Clean
                } else if !committed {
                    SlotClass::Uncommitted
                } else {
                    self.device()
                        .read_block(sl.header.target_lba.get(), &mut bufs.tree)?;
                    let cur = u64::from(crc32c(&bufs.tree[..]));
                    if cur == sl.header.payload_checksum.get() {
                        SlotClass::AlreadyApplied
                    } else if sl.header.flags.get() & F_FRESH != 0
                        || cur == sl.header.pre_checksum.get()
                    {
                        SlotClass::NeedsReplay
                    } else {
                        SlotClass::Conflicting
                    }
                };
                if f(&sl, class)?.is_break() {
                    return Ok(flag);
                }
            }
            s = s.saturating_add(len.max(1));
        }
        Ok(flag)
    }

    /// Builds the overlay of every `NeedsReplay` slot of every journal into `table`
    /// (a later `txn_id` wins for the same target). A table too small for them is a
    /// `BufferTooSmall` error naming `"journal overlay table"`.
    pub fn overlay<'t>(
        &self,
        table: &'t mut [(u64, u64, u64)],
        bufs: &mut Buffers,
    ) -> Result<Overlay<'t>> {
        let mut len = 0usize;
        let mut needed = 0u64;
        for row in 0..self.superblock().node_capacity() {
            self.classify_journal(row, bufs, |sl, class| {
                if class != SlotClass::NeedsReplay {
                    return Ok(ControlFlow::Continue(()));
                }
                let target = sl.header.target_lba.get();
                let txn = sl.header.txn_id.get();
                let used = table.get_mut(..len).unwrap_or(&mut []);
                if let Some(e) = used.iter_mut().find(|e| e.0 == target) {
                    if txn > e.2 {
                        *e = (target, sl.payload_lba, txn);
                    }
                    return Ok(ControlFlow::Continue(()));
                }
                needed = needed.saturating_add(1);
                if let Some(slot) = table.get_mut(len) {
                    *slot = (target, sl.payload_lba, txn);
                    len = len.saturating_add(1);
                }
                Ok(ControlFlow::Continue(()))
            })?;
        }
        if needed > crate::arith::u64_of(len) {
            return Err(Error::new(
                ErrorKind::BufferTooSmall {
                    needed,
                    available: crate::arith::u64_of(table.len()),
                },
                "journal overlay table",
                0,
            ));
        }
        let used = table.get_mut(..len).unwrap_or(&mut []);
        used.sort_unstable_by_key(|e| e.0);
        Ok(Overlay { table, len })
    }
}
