//! Journal replay (`docs/cetrafs.md` section 7): claim each dirty journal, write every
//! committed transaction that needs it in `txn_id` order, then mark the journals clean.
//! No allocation beyond a caller-sized table of committed slots, so firmware that must
//! mount after a crash can replay.
//!
//! The write order, which makes a power cut at any write recoverable by running replay
//! again:
//!
//! 1. claim: compare-and-write of each dirty journal's flag block (`replay_owner` = us,
//!    `seq` + 1), flush;
//! 2. per transaction needing replay, in `txn_id` order: compare-and-write of its
//!    journal's flag (`replaying_txn` = the transaction), flush, write each target,
//!    flush;
//! 3. per claimed journal: compare-and-write of its flag to `CLEAN` (owner, transaction
//!    and state cleared, `seq` + 1), flush.
//!
//! A journal whose flag names a transaction being replayed (`replaying_txn`) was cut
//! inside it: that transaction's targets that match neither its pre- nor its
//! post-change checksum are torn writes, classified as needing replay
//! (`Fs::classify_chains`), so they are written again; the checker sees the same.
//!
//! Replay is idempotent: a second run finds every journal clean and writes nothing.

use zerocopy::IntoBytes;

use super::check::{report_replay, Finding, Sink};
use super::journal::{Committed, SlotClass};
use super::raw::RawJournalFlag;
use super::{Buffers, Fs, JOURNAL_CLEAN};
use crate::block::{BlockDeviceMut, BLOCK_SIZE_U64, SECTOR};
use crate::checksum::{crc32c, crc32c_skipping};
use crate::error::{Error, ErrorKind};

/// Who replays, and whether live nodes' journals may be taken.
#[derive(Clone, Copy, Debug)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct ReplayOptions {
    /// The replaying node's id (written to `replay_owner`); nonzero.
    pub node_id: u64,
    /// Replay journals of nodes the registry shows `ACTIVE`, and journals another
    /// replayer has claimed.
    pub force: bool,
}

/// What a replay did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct ReplayReport {
    /// Dirty journals claimed and made clean.
    pub journals: u32,
    /// Slots written to their targets.
    pub written: u64,
    /// Slots whose target already held the payload.
    pub already: u64,
    /// Slots not written: their target changed after the transaction.
    pub conflicts: u64,
}

/// Why a replay did not run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum ReplayError {
    /// The journal's node is alive (`ACTIVE` in the registry): it replays its own
    /// journal. Override with `force`.
    LiveNode {
        /// Registry row.
        row: u32,
        /// Its node id.
        node_id: u64,
    },
    /// Another replayer holds the journal (`replay_owner`), or took it between our read
    /// and our compare-and-write.
    Claimed {
        /// Registry row.
        row: u32,
        /// The owner found.
        owner: u64,
    },
    /// Reading, writing or a structure failed.
    Device(Error),
}

impl ReplayError {
    /// The category, for exit codes: a refusal (a live node, another replayer's claim) is
    /// operational, like a device error; a structure's failure has its own.
    pub fn category(&self) -> crate::Category {
        match self {
            ReplayError::LiveNode { .. } | ReplayError::Claimed { .. } => crate::Category::Io,
            ReplayError::Device(e) => e.kind.category(),
        }
    }
}

impl From<Error> for ReplayError {
    fn from(e: Error) -> Self {
        ReplayError::Device(e)
    }
}

/// The first 512 bytes of a flag block, and the flag they hold.
fn read_flag<D: BlockDeviceMut>(
    fs: &Fs<D>,
    row: u32,
    bufs: &mut Buffers,
) -> Result<([u8; SECTOR], RawJournalFlag), Error> {
    let flag = fs.journal_flag(row, &mut bufs.data)?;
    let mut sector = [0u8; SECTOR];
    sector.copy_from_slice(bufs.data.get(..SECTOR).unwrap_or(&[0; SECTOR]));
    Ok((sector, *flag.raw()))
}

/// Compare-and-write of a changed flag over `old`; flushes. `false` when someone else
/// changed the block first.
fn cas_flag<D: BlockDeviceMut>(
    fs: &Fs<D>,
    row: u32,
    old: &[u8; SECTOR],
    mut flag: RawJournalFlag,
) -> Result<bool, Error> {
    flag.seq.set(flag.seq.get().wrapping_add(1));
    flag.checksum.set(crc32c_skipping(flag.as_bytes(), 56));
    let mut new = *old;
    if let Some(dst) = new.get_mut(..64) {
        dst.copy_from_slice(flag.as_bytes());
    }
    let lba = fs.journal_start(row);
    let wrote = fs.device().compare_and_write(lba, old, &new)?;
    fs.device().flush()?;
    Ok(wrote)
}

/// Writes slot `c`'s payload over its target (reading the payload through `bufs.data`).
fn write_slot<D: BlockDeviceMut>(
    fs: &Fs<D>,
    c: &Committed,
    bufs: &mut Buffers,
) -> Result<(), Error> {
    fs.device().read_block(c.payload_lba, &mut bufs.data)?;
    if u64::from(crc32c(&bufs.data[..])) != c.post {
        // The payload changed since the journal was checked: never write it.
        return Err(Error::new(
            ErrorKind::ChecksumMismatch {
                stored: c.post,
                computed: u64::from(crc32c(&bufs.data[..])),
            },
            "slot.payload_checksum (at replay)",
            c.lba.saturating_mul(BLOCK_SIZE_U64).saturating_add(24),
        ));
    }
    fs.device().write_block(c.target, &bufs.data)
}

/// Replays every dirty journal of `fs` (see the module docs for the order of writes).
/// `table` must hold every committed slot of the dirty journals (a `Budget`
/// error says how many). Slots that conflict are reported to `sink` and not written.
/// A device shorter than the filesystem ([`Fs::shortened`]) is refused before anything
/// is read: an image cut short is read, never written.
pub fn replay<D: BlockDeviceMut>(
    fs: &Fs<D>,
    opts: ReplayOptions,
    table: &mut [Committed],
    bufs: &mut Buffers,
    sink: &mut dyn Sink<Finding>,
) -> Result<ReplayReport, ReplayError> {
    if let Some(e) = fs.shortened() {
        return Err(ReplayError::Device(e));
    }
    let mut report = ReplayReport::default();
    let rows = fs.superblock().node_capacity();
    // 1. Claim every dirty journal, after checking all of them (a refusal writes
    //    nothing).
    for pass in [false, true] {
        for row in 0..rows {
            // A malformed flag block is not replayed (the checker reports it).
            let Ok((sector, flag)) = read_flag(fs, row, bufs) else {
                continue;
            };
            if flag.state.get() == JOURNAL_CLEAN {
                continue;
            }
            if !pass {
                if opts.force {
                    continue;
                }
                if let Some(n) = fs.node_row(row, &mut bufs.data)? {
                    if n.state() == super::NodeState::Active {
                        return Err(ReplayError::LiveNode {
                            row,
                            node_id: n.raw().node_id.get(),
                        });
                    }
                }
                let owner = flag.replay_owner.get();
                if owner != 0 && owner != opts.node_id {
                    return Err(ReplayError::Claimed { row, owner });
                }
                continue;
            }
            let mut claimed = flag;
            claimed.replay_owner.set(opts.node_id);
            if !cas_flag(fs, row, &sector, claimed)? {
                return Err(ReplayError::Claimed {
                    row,
                    owner: flag.replay_owner.get(),
                });
            }
            report.journals = report.journals.saturating_add(1);
        }
    }
    if report.journals == 0 {
        return Ok(report);
    }
    let needed = fs.committed_slots(table, bufs);
    if needed > table.len() {
        return Err(ReplayError::Device(Error::new(
            ErrorKind::Budget {
                needed: crate::arith::u64_of(needed),
                available: crate::arith::u64_of(table.len()),
            },
            "journal slot table",
            0,
        )));
    }
    let slots = table.get_mut(..needed).unwrap_or(&mut []);
    // 2. Classify (chains across journals, torn targets included), then write in
    //    txn_id order.
    fs.classify_chains(slots, &mut bufs.data)?;
    crate::arith::sort_by_key(slots, |c| (c.txn_id, c.row, c.slot));
    let mut start = 0usize;
    while start < slots.len() {
        let txn = slots.get(start).map_or(0, |c| c.txn_id);
        let end = slots
            .get(start..)
            .unwrap_or(&[])
            .iter()
            .position(|c| c.txn_id != txn)
            .map_or(slots.len(), |k| start.saturating_add(k));
        let group = slots.get(start..end).unwrap_or(&[]);
        for c in group {
            match c.class {
                Some(SlotClass::AlreadyApplied) => {
                    report.already = report.already.saturating_add(1)
                }
                Some(SlotClass::Conflicting) => {
                    report.conflicts = report.conflicts.saturating_add(1);
                    report_replay(c, sink);
                }
                _ => {}
            }
        }
        let todo = group
            .iter()
            .any(|c| c.class == Some(SlotClass::NeedsReplay));
        if todo {
            let row = group.first().map_or(0, |c| c.row);
            let (sector, mut flag) = read_flag(fs, row, bufs)?;
            flag.replaying_txn.set(txn);
            if !cas_flag(fs, row, &sector, flag)? {
                return Err(ReplayError::Claimed {
                    row,
                    owner: flag.replay_owner.get(),
                });
            }
            for k in start..end {
                let Some(c) = slots.get(k).copied() else {
                    break;
                };
                if c.class == Some(SlotClass::NeedsReplay) {
                    write_slot(fs, &c, bufs)?;
                    report.written = report.written.saturating_add(1);
                }
            }
            fs.device().flush()?;
        }
        start = end;
    }
    // 3. Every claimed journal back to clean.
    for row in 0..rows {
        let Ok((sector, flag)) = read_flag(fs, row, bufs) else {
            continue;
        };
        if flag.state.get() == JOURNAL_CLEAN || flag.replay_owner.get() != opts.node_id {
            continue;
        }
        let mut clean = flag;
        clean.state.set(JOURNAL_CLEAN);
        clean.replay_owner.set(0);
        clean.replaying_txn.set(0);
        if !cas_flag(fs, row, &sector, clean)? {
            return Err(ReplayError::Claimed {
                row,
                owner: flag.replay_owner.get(),
            });
        }
    }
    Ok(report)
}

// The flag block layout this module rewrites is the zerocopy struct's.
const _: () = assert!(core::mem::size_of::<RawJournalFlag>() == 64);
