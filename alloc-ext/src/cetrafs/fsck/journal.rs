//! Pass 1: the journals of every node as they are on disk, transactions chained across
//! journals by checksums.

use alloc::vec::Vec;

use tet_core::block::{Block, BlockDevice};
use tet_core::cetrafs::check::{report_replay, Sink};
use tet_core::cetrafs::{Buffers, Code, Committed, Finding, Fs, SlotClass, SB_CLEAN};
use tet_core::ErrorKind;

use super::{byte_at, err};
use crate::cetrafs::journal::checked_committed_slots;

/// What pass 1 found.
pub(super) struct Journals {
    /// The committed slots of the dirty journals, classified.
    pub(super) committed: Vec<Committed>,
    /// The journals (row, flag block) holding a slot that needs replay.
    pub(super) replay_rows: Vec<(u32, u64)>,
    /// Whether every committed slot could be kept.
    pub(super) complete: bool,
}

/// Checks every journal, gathers and classifies the committed slots of the dirty ones
/// (one walk of the journals does both), and reports a superblock that says clean
/// while a journal needs replay.
pub(super) fn journals<D: BlockDevice>(
    fs: &Fs<D>,
    bufs: &mut Buffers,
    buf: &mut Block,
    sink: &mut dyn Sink<Finding>,
) -> Journals {
    let (mut committed, complete) = checked_committed_slots(fs, bufs, sink);
    let replay_rows = classify(fs, &mut committed, buf, sink);
    if !replay_rows.is_empty() && fs.superblock().raw().sb_flags.get() & SB_CLEAN != 0 {
        sink.report(&Finding::new(
            Code::CleanWithReplay,
            err(
                ErrorKind::Invalid,
                "superblock.sb_flags (SB_CLEAN, yet a journal needs replay: run tet-host replay)",
                0,
                12,
            ),
        ));
    }
    Journals {
        committed,
        replay_rows,
        complete,
    }
}

/// Pass 1's classification: committed slots of dirty journals, one `txn_id` per
/// transaction, each target's slots chained by their checksums (core's
/// `classify_chains`). Reports what needs replay or conflicts; returns the journals
/// (row, flag block) holding a slot that needs replay.
fn classify<D: BlockDevice>(
    fs: &Fs<D>,
    committed: &mut [Committed],
    buf: &mut Block,
    sink: &mut dyn Sink<Finding>,
) -> Vec<(u32, u64)> {
    committed.sort_unstable_by_key(|c| (c.txn_id, c.row, c.slot));
    // One txn_id, one transaction: the same id in two journals, or twice in one.
    for w in committed.windows(2) {
        if let [a, b] = w {
            if a.txn_id == b.txn_id && (a.row != b.row || b.slot != a.slot.saturating_add(1)) {
                sink.report(&Finding::new(
                    Code::JournalTxn,
                    err(
                        ErrorKind::Duplicate {
                            first: byte_at(a.lba, 0),
                        },
                        "slot.txn_id (used by another transaction)",
                        b.lba,
                        8,
                    ),
                ));
            }
        }
    }
    if let Err(e) = fs.classify_chains(committed, buf) {
        sink.report(&Finding::structural(Code::JournalSlot, e));
    }
    let mut rows: Vec<(u32, u64)> = Vec::new();
    // Report in journal order.
    committed.sort_unstable_by_key(|c| (c.row, c.slot));
    for c in committed.iter() {
        report_replay(c, sink);
        if c.class == Some(SlotClass::NeedsReplay) && !rows.iter().any(|(r, _)| *r == c.row) {
            rows.push((c.row, fs.journal_start(c.row)));
        }
    }
    rows
}
