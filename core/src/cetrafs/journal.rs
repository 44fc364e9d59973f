//! Per-node journals: flag blocks, slots, transaction commit and replay classification,
//! and a device view that serves committed, not-yet-replayed blocks from the journal.

use super::fs::Fs;
use super::raw::{RawJournalFlag, RawSlotHeader};
use super::scratch::Scratch;
use super::sealed;
use super::{err, zero, F_COMMIT, F_FRESH, JF_MAGIC, JOURNAL_DIRTY, JS_MAGIC};
use crate::block::{Block, BlockDevice, BLOCK_SIZE};
use crate::checksum::crc32c;
use crate::error::{Error, ErrorKind, Result};

/// The rule a problem reported by [`walk_journal`] breaks (the checker maps each to its
/// finding code).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum JournalProblem {
    /// The flag block is malformed (its error says which field); the walk stops.
    Flag,
    /// A slot header is malformed; the walk skips it.
    Slot,
    /// Slots of one transaction disagree (`txn_slots`, `txn_index` order, `F_COMMIT`
    /// before the last slot).
    Txn,
    /// A slot of a committed transaction fails its `payload_checksum`.
    Payload,
}

/// A journal flag block with valid magic and checksum.
#[derive(Clone, Copy, Debug)]
pub struct JournalFlag {
    pub(crate) raw: RawJournalFlag,
    pub(crate) lba: u64,
}

impl JournalFlag {
    /// The flag block, as checked.
    pub fn raw(&self) -> &RawJournalFlag {
        &self.raw
    }

    /// Its block.
    pub fn lba(&self) -> u64 {
        self.lba
    }

    /// Whether committed transactions may await replay.
    pub fn is_dirty(&self) -> bool {
        self.raw.state.get() == JOURNAL_DIRTY
    }
}

/// A slot whose header is valid.
#[derive(Clone, Copy, Debug)]
pub struct Slot {
    pub(crate) index: u64,
    pub(crate) header: RawSlotHeader,
    pub(crate) lba: u64,
    pub(crate) payload_lba: u64,
    pub(crate) payload_ok: bool,
    pub(crate) payload_crc: u64,
}

impl Slot {
    /// Slot number in its journal.
    pub fn index(&self) -> u64 {
        self.index
    }
    /// The header, as checked.
    pub fn header(&self) -> &RawSlotHeader {
        &self.header
    }
    /// Header block.
    pub fn lba(&self) -> u64 {
        self.lba
    }
    /// Payload block.
    pub fn payload_lba(&self) -> u64 {
        self.payload_lba
    }
    /// Whether the payload matches `payload_checksum`.
    pub fn payload_ok(&self) -> bool {
        self.payload_ok
    }
    /// The checksum the payload block has.
    pub fn payload_crc(&self) -> u64 {
        self.payload_crc
    }
}

/// What a committed slot of a dirty journal means for replay (`docs/cetrafs.md`
/// section 7).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum SlotClass {
    /// The target already holds the payload. (Numbered from 1 so that `None` can be
    /// 0 and a `static` table of [`Committed::EMPTY`] costs no flash.)
    AlreadyApplied = 1,
    /// The target holds the pre-change contents (or is `F_FRESH`): copy the payload.
    NeedsReplay,
    /// The target changed since: replaying would clobber another node's write.
    Conflicting,
}

impl SlotClass {
    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            SlotClass::AlreadyApplied => "already-applied",
            SlotClass::NeedsReplay => "needs-replay",
            SlotClass::Conflicting => "conflicting",
        }
    }
}

/// A slot of a committed transaction in a dirty journal: what replay needs to know.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Committed {
    /// Registry row of the journal.
    pub row: u32,
    /// Whether the journal's flag block is `DIRTY`.
    pub dirty: bool,
    /// The slot.
    pub slot: u64,
    /// Header block.
    pub lba: u64,
    /// Payload block.
    pub payload_lba: u64,
    /// Transaction.
    pub txn_id: u64,
    /// Target block.
    pub target: u64,
    /// `pre_checksum` (meaningless with `fresh`).
    pub pre: u64,
    /// `payload_checksum`.
    pub post: u64,
    /// `F_FRESH`.
    pub fresh: bool,
    /// The replay class, once [`Fs::classify_chains`] has run.
    pub class: Option<SlotClass>,
    /// Its journal's flag says a replay was writing this transaction when it stopped
    /// (`replaying_txn`): a target matching neither checksum is a torn write.
    pub in_replay: bool,
}

impl Committed {
    /// An unused table entry, for `static` overlay tables.
    pub const EMPTY: Committed = Committed {
        row: 0,
        dirty: false,
        slot: 0,
        lba: 0,
        payload_lba: 0,
        txn_id: 0,
        target: 0,
        pre: 0,
        post: 0,
        fresh: false,
        class: None,
        in_replay: false,
    };

    /// From a slot of registry row `row`'s journal.
    pub fn of(row: u32, dirty: bool, replaying_txn: u64, s: &Slot) -> Self {
        Committed {
            row,
            dirty,
            slot: s.index,
            lba: s.lba,
            payload_lba: s.payload_lba,
            txn_id: s.header.txn_id.get(),
            target: s.header.target_lba.get(),
            pre: s.header.pre_checksum.get(),
            post: s.header.payload_checksum.get(),
            fresh: s.header.flags.get() & F_FRESH != 0,
            class: None,
            in_replay: replaying_txn != 0 && replaying_txn == s.header.txn_id.get(),
        }
    }
}

/// The final version of every block that committed, not-yet-replayed transactions
/// change, in a caller-sized table sorted by target: what a reader of a dirty image
/// must see instead of the on-disk block.
#[derive(Debug)]
pub struct Overlay<'t> {
    table: &'t mut [Committed],
    len: usize,
}

impl Overlay<'_> {
    /// One slot per target (its last version), sorted by target.
    pub fn entries(&self) -> &[Committed] {
        self.table.get(..self.len).unwrap_or(&[])
    }

    /// Where to read `lba` from.
    pub fn redirect(&self, lba: u64) -> u64 {
        let e = self.entries();
        match e.binary_search_by_key(&lba, |x| x.target) {
            Ok(i) => e.get(i).map_or(lba, |x| x.payload_lba),
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
    fn read_block_prefix(&self, lba: u64, buf: &mut Block, len: usize) -> Result<()> {
        self.dev
            .read_block_prefix(self.overlay.redirect(lba), buf, len)
    }
    /// The run in one call to the device below, then each block the overlay redirects
    /// read again from its journal payload.
    fn read_blocks(&self, lba: u64, buf: &mut [u8]) -> Result<()> {
        self.dev.read_blocks(lba, buf)?;
        let mut b: Block = [0; BLOCK_SIZE];
        for (k, chunk) in (0u64..).zip(buf.chunks_exact_mut(BLOCK_SIZE)) {
            let at = lba.saturating_add(k);
            let to = self.overlay.redirect(at);
            if to != at {
                self.dev.read_block(to, &mut b)?;
                chunk.copy_from_slice(&b);
            }
        }
        Ok(())
    }
    /// As [`OverlayDevice::read_blocks`]: the prefixes in one call to the device below,
    /// then each block the overlay redirects read again from its payload.
    fn read_prefixes(&self, lba: u64, len: usize, out: &mut [u8]) -> Result<()> {
        crate::block::prefix_slots(lba, len, out.len())?;
        self.dev.read_prefixes(lba, len, out)?;
        let mut b: Block = [0; BLOCK_SIZE];
        for (k, slot) in (0u64..).zip(out.chunks_exact_mut(len)) {
            let at = lba.saturating_add(k);
            let to = self.overlay.redirect(at);
            if to != at {
                self.dev.read_block_prefix(to, &mut b, len)?;
                let src = b
                    .get(..len)
                    .ok_or_else(|| Error::new(ErrorKind::Invalid, "read_prefixes length", 0))?;
                slot.copy_from_slice(src);
            }
        }
        Ok(())
    }
}

impl<D: BlockDevice, E: From<Error>> Fs<D, E> {
    /// Slots per journal.
    pub fn journal_slots(&self) -> u64 {
        self.superblock().node_journal_blocks().saturating_sub(1) / 2
    }

    /// The flag block of registry row `row`'s journal.
    pub fn journal_flag(&self, row: u32, buf: &mut Block) -> Result<JournalFlag, E> {
        let lba = self.journal_start(row);
        self.load(lba, buf)?;
        let bytes = buf.get(..64).unwrap_or(&[]);
        let raw: &RawJournalFlag = sealed::<_, E>(
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
        zero::<E>(&raw.reserved, "journal_flag.reserved", lba, 36)?;
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
        Ok(JournalFlag { raw: *raw, lba })
    }

    /// Slot `s` of row `row`'s journal (`None` when empty). Reads the payload to check it.
    pub fn journal_slot(
        &self,
        row: u32,
        s: u64,
        scratch: &mut impl Scratch,
    ) -> Result<Option<Slot>, E> {
        let buf = scratch.block();
        let base = self
            .journal_start(row)
            .saturating_add(1)
            .saturating_add(s.saturating_mul(2));
        self.load(base, buf)?;
        let bytes = buf.get(..64).unwrap_or(&[]);
        if bytes.iter().all(|b| *b == 0) {
            return Ok(None);
        }
        let h: RawSlotHeader = *sealed::<_, E>(
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
            return Err(err(ErrorKind::Zero, "slot.txn_id", base, 8));
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
        zero::<E>(&h.reserved, "slot.reserved", base, 48)?;
        if flags & F_FRESH != 0 && h.pre_checksum.get() != 0 {
            return Err(err(
                ErrorKind::NonZero {
                    value: h.pre_checksum.get(),
                },
                "slot.pre_checksum (must be 0 with F_FRESH)",
                base,
                32,
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
        self.load(payload_lba, buf)?;
        let payload_crc = u64::from(crc32c(&buf[..]));
        let payload_ok = payload_crc == h.payload_checksum.get();
        Ok(Some(Slot {
            index: s,
            header: h,
            lba: base,
            payload_lba,
            payload_ok,
            payload_crc,
        }))
    }

    /// Every slot of every committed transaction in a dirty journal, in journal and
    /// slot order, into `table`; returns how many there are (more than `table.len()`
    /// means the table was too small and only its length was filled). Malformed slots
    /// are skipped here; the checker reports them. A clean journal costs one read, its
    /// flag block.
    pub fn committed_slots(&self, table: &mut [Committed], scratch: &mut impl Scratch) -> usize {
        let mut n = 0usize;
        for row in 0..self.superblock().node_capacity() {
            let _ = walk_journal(
                self,
                row,
                scratch,
                &mut |_, _: E| {},
                &mut |c: Committed| {
                    if c.dirty {
                        if let Some(t) = table.get_mut(n) {
                            *t = c;
                        }
                        n = n.saturating_add(1);
                    }
                },
                false,
            );
        }
        n
    }

    /// Classifies committed slots by the replay rule of section 7, chained across
    /// journals, and stores each slot's class in it: `slots` is sorted in place by
    /// target and `txn_id`; for each target the disk is at the last slot whose
    /// post-change checksum it matches (that slot and those before are already
    /// applied), or before the first; from there each slot needs replay when it is
    /// `F_FRESH` or its pre-change checksum is the previous version's, and conflicts
    /// otherwise (as does every slot after a conflict). Reads each target once.
    pub fn classify_chains(&self, slots: &mut [Committed], buf: &mut Block) -> Result<(), E> {
        chain_order(slots);
        let mut start = 0usize;
        while start < slots.len() {
            let target = slots.get(start).map_or(0, |c| c.target);
            let end = slots
                .get(start..)
                .unwrap_or(&[])
                .iter()
                .position(|c| c.target != target)
                .map_or(slots.len(), |k| start.saturating_add(k));
            let group = slots.get_mut(start..end).unwrap_or(&mut []);
            self.load(target, buf)?;
            let cur = u64::from(crc32c(&buf[..]));
            let mut applied = group.iter().rposition(|c| c.post == cur);
            let starts = group.first().is_some_and(|c| c.fresh || c.pre == cur);
            // A replay cut inside a transaction leaves its targets torn (matching no
            // version): everything before that transaction was applied, and it is
            // written again.
            let mut torn = None;
            if applied.is_none() && !starts {
                torn = group
                    .iter()
                    .position(|c| c.in_replay && c.pre != cur && c.post != cur);
                applied = torn.and_then(|t| t.checked_sub(1));
            }
            // The version the next slot must start from; None after a conflict.
            let mut at: Option<u64> = Some(cur);
            for (k, c) in group.iter_mut().enumerate() {
                let class = match (applied, at) {
                    _ if torn == Some(k) => SlotClass::NeedsReplay,
                    (Some(a), _) if k <= a => SlotClass::AlreadyApplied,
                    (_, Some(v)) if c.fresh || c.pre == v => SlotClass::NeedsReplay,
                    _ => SlotClass::Conflicting,
                };
                at = match class {
                    SlotClass::Conflicting => None,
                    _ => Some(c.post),
                };
                c.class = Some(class);
            }
            start = end;
        }
        Ok(())
    }

    /// Builds the overlay of every dirty journal into `table`: the committed slots are
    /// classified by [`Fs::classify_chains`] and each target that needs replay is
    /// served at its last version (a chain is served at its end). A table too small
    /// for the committed slots is a `Budget` error naming
    /// `"journal overlay table"`.
    pub fn overlay<'t>(
        &self,
        table: &'t mut [Committed],
        scratch: &mut impl Scratch,
    ) -> Result<Overlay<'t>, E> {
        let needed = self.committed_slots(table, scratch);
        if needed > table.len() {
            return Err(E::from(Error::new(
                ErrorKind::Budget {
                    needed: crate::arith::u64_of(needed),
                    available: crate::arith::u64_of(table.len()),
                },
                "journal overlay table",
                0,
            )));
        }
        let slots = table.get_mut(..needed).unwrap_or(&mut []);
        self.classify_chains(slots, scratch.block())?;
        Ok(Overlay::from_classified(table, needed))
    }
}

impl<'t> Overlay<'t> {
    /// The overlay of the first `len` slots of `table`, already classified by
    /// [`Fs::classify_chains`]: each target needing replay served at its last version.
    /// Sorts and compacts `table` in place.
    pub fn from_classified(table: &'t mut [Committed], len: usize) -> Overlay<'t> {
        let slots = table.get_mut(..len).unwrap_or(&mut []);
        chain_order(slots);
        // Compact in place: the last slot needing replay of each target, in target
        // order.
        let mut kept = 0usize;
        for k in 0..slots.len() {
            let Some(c) = slots.get(k).copied() else {
                break;
            };
            if c.class != Some(SlotClass::NeedsReplay) {
                continue;
            }
            let same = kept
                .checked_sub(1)
                .and_then(|p| slots.get(p))
                .is_some_and(|p| p.target == c.target);
            let at = if same { kept.saturating_sub(1) } else { kept };
            // Swapped, not copied (the slot left at `k` is never looked at again): an
            // overlapping copy would pull `memmove` (1.6 KiB) into firmware.
            if let Some([first, .., last]) = slots.get_mut(at..=k) {
                core::mem::swap(first, last);
            }
            if !same {
                kept = kept.saturating_add(1);
            }
        }
        Overlay { table, len: kept }
    }
}

/// Walks the journal of registry row `row`: its flag block, every slot header, and for a
/// dirty journal its transaction boundaries and the payloads of committed transactions.
/// Each problem goes to `report` with the rule it breaks; `on_committed` sees every slot
/// of every committed transaction, in slot order. Returns whether the journal is dirty
/// (`None` when the flag block is bad). A transaction cut short (no `F_COMMIT`, or
/// interrupted by an empty slot or the journal's end) is a torn write and ignored. A
/// clean journal's slots are read only when `check_clean` is set: gathering committed
/// slots needs nothing from a clean journal, and reading its slots (two blocks each)
/// would make every boot read every node's whole journal.
pub(crate) fn walk_journal<D: BlockDevice, E: From<Error>>(
    fs: &Fs<D, E>,
    row: u32,
    bufs: &mut impl Scratch,
    report: &mut impl FnMut(JournalProblem, E),
    on_committed: &mut impl FnMut(Committed),
    check_clean: bool,
) -> Option<bool> {
    let flag = match fs.journal_flag(row, bufs.block()) {
        Ok(f) => f,
        Err(e) => {
            report(JournalProblem::Flag, e);
            return None;
        }
    };
    let dirty = flag.is_dirty();
    let n = fs.journal_slots();
    if !dirty {
        // A clean journal's slots are history, partly overwritten by later transactions:
        // each header must still be well formed, but transactions are not gathered.
        if !check_clean {
            return Some(false);
        }
        for s in 0..n {
            if let Err(e) = fs.journal_slot(row, s, bufs) {
                report(JournalProblem::Slot, e);
            }
        }
        return Some(false);
    }
    // The transaction being gathered: first slot, txn_id, txn_slots, length so far,
    // whether every payload matched.
    let mut cur: Option<(u64, u64, u32, u32, bool)> = None;
    let mut s = 0u64;
    while s <= n {
        let slot = if s == n {
            None
        } else {
            match fs.journal_slot(row, s, bufs) {
                Ok(x) => x,
                Err(e) => {
                    report(JournalProblem::Slot, e);
                    cur = None;
                    s = s.saturating_add(1);
                    continue;
                }
            }
        };
        let Some(sl) = slot else {
            cur = None;
            s = s.saturating_add(1);
            continue;
        };
        let h = sl.header;
        let (txn, idx, total) = (h.txn_id.get(), h.txn_index.get(), h.txn_slots.get());
        let commit = h.flags.get() & F_COMMIT != 0;
        let bad =
            |what: &'static str, at: usize, kind: ErrorKind| -> E { err(kind, what, sl.lba, at) };
        let continues = cur.is_some_and(|(_, t, _, len, _)| t == txn && idx == len);
        if continues {
            if let Some(c) = cur.as_mut() {
                if c.2 != total {
                    report(
                        JournalProblem::Txn,
                        bad(
                            "slot.txn_slots (differs within the transaction)",
                            44,
                            ErrorKind::Mismatch {
                                expected: c.2.into(),
                                found: total.into(),
                            },
                        ),
                    );
                    cur = None;
                    s = s.saturating_add(1);
                    continue;
                }
                c.3 = c.3.saturating_add(1);
                c.4 = c.4 && sl.payload_ok;
            }
        } else if idx == 0 {
            cur = Some((s, txn, total, 1, sl.payload_ok));
        } else {
            report(
                JournalProblem::Txn,
                bad(
                    "slot.txn_index (a transaction must start at index 0)",
                    40,
                    ErrorKind::Mismatch {
                        expected: 0,
                        found: idx.into(),
                    },
                ),
            );
            cur = None;
            s = s.saturating_add(1);
            continue;
        }
        let Some((first, _, total, len, payloads_ok)) = cur else {
            s = s.saturating_add(1);
            continue;
        };
        if commit && len < total {
            report(
                JournalProblem::Txn,
                bad(
                    "slot.flags (F_COMMIT before the transaction's last slot)",
                    4,
                    ErrorKind::UnknownFlags {
                        bits: F_COMMIT.into(),
                    },
                ),
            );
            cur = None;
        } else if len == total {
            cur = None;
            if commit {
                // Committed as far as the headers go: every payload must match.
                for k in first..=s {
                    let Ok(Some(x)) = fs.journal_slot(row, k, bufs) else {
                        continue;
                    };
                    if x.payload_ok {
                        if payloads_ok {
                            on_committed(Committed::of(
                                row,
                                dirty,
                                flag.raw.replaying_txn.get(),
                                &x,
                            ));
                        }
                    } else {
                        report(
                            JournalProblem::Payload,
                            err(
                                ErrorKind::ChecksumMismatch {
                                    stored: x.header.payload_checksum.get(),
                                    computed: x.payload_crc,
                                },
                                "slot.payload_checksum (committed transaction)",
                                x.lba,
                                24,
                            ),
                        );
                    }
                }
            }
        }
        s = s.saturating_add(1);
    }
    Some(dirty)
}

/// Sorts committed slots into chains: by target, then transaction, journal and slot.
/// (One function for both callers: each closure would be a sort of its own in flash.)
fn chain_order(slots: &mut [Committed]) {
    crate::arith::sort_by_key(slots, |c| (c.target, c.txn_id, c.row, c.slot));
}

// The size the checker's memory statement (docs/cetrafs.md section 13) counts on.
const _: () = assert!(core::mem::size_of::<Committed>() == 64);
