//! Pass 2: the node registry (ids unique, dirty journals owned), and the pending-free
//! queues (no block queued twice; queued blocks count as owned).

use alloc::collections::BTreeMap;
use alloc::vec::Vec;

use tet_core::block::{Block, BlockDevice};
use tet_core::cetrafs::check::{check_pending, check_registry, Sink};
use tet_core::cetrafs::{Code, Finding, Fs, NodeState};
use tet_core::ErrorKind;

use super::maps::Ownership;
use super::{byte_at, err};

/// Checks the registry and the pending-free queues; marks every queued block owned and
/// returns the queued ranges (`start .. end`).
pub(super) fn registry_and_queues<D: BlockDevice>(
    fs: &Fs<D>,
    buf: &mut Block,
    replay_rows: &[(u32, u64)],
    own: &mut Ownership,
    sink: &mut dyn Sink<Finding>,
) -> Vec<(u64, u64)> {
    let mut nodes: Vec<(u64, u32, u64, usize)> = Vec::new();
    let mut row_state: BTreeMap<u32, NodeState> = BTreeMap::new();
    let reg = fs.superblock().raw().registry_start.get();
    check_registry(fs, buf, sink, &mut |row, n| {
        if let Some(n) = n {
            let lba = reg.saturating_add(u64::from(row) / 32);
            let off = usize::try_from(u64::from(row) % 32)
                .unwrap_or(0)
                .saturating_mul(128);
            nodes.push((n.raw().node_id.get(), row, lba, off));
            row_state.insert(row, n.state());
        }
    });
    nodes.sort_unstable();
    for w in nodes.windows(2) {
        if let [a, b] = w {
            if a.0 == b.0 {
                sink.report(&Finding::new(
                    Code::NodeDuplicate,
                    err(
                        ErrorKind::Duplicate {
                            first: byte_at(a.2, a.3),
                        },
                        "registry.node_id (used by another row)",
                        b.2,
                        b.3.saturating_add(8),
                    ),
                ));
            }
        }
    }
    for (row, lba) in replay_rows {
        let state = row_state.get(row).copied();
        if matches!(state, None | Some(NodeState::Left)) {
            sink.report(&Finding::new(
                Code::JournalUnowned,
                err(
                    ErrorKind::Invalid,
                    if state.is_none() {
                        "journal_flag.state (DIRTY journal of a free registry row)"
                    } else {
                        "journal_flag.state (DIRTY journal of a node that has LEFT)"
                    },
                    *lba,
                    4,
                ),
            ));
        }
    }
    let mut pending: Vec<(u64, u64, u64, usize)> = Vec::new();
    check_pending(fs, buf, sink, &mut |_, e, lba, off| {
        pending.push((e.lba, e.lba.saturating_add(e.count.into()), lba, off));
    });
    pending.sort_unstable();
    let mut end: u64 = 0;
    // Absolute byte offset of the entry that reaches `end`.
    let mut end_at: u64 = 0;
    for (s, e, lba, off) in &pending {
        if *s < end {
            sink.report(&Finding::new(
                Code::PendingDuplicate,
                err(
                    ErrorKind::Overlap { other: end_at },
                    "pending_free.lba (freed by another entry too)",
                    *lba,
                    *off,
                ),
            ));
        }
        if *e > end {
            end = *e;
            end_at = byte_at(*lba, *off);
        }
        for b in *s..*e {
            if let Some(i) = own.index(b) {
                own.bits.set(i);
            }
        }
    }
    pending.iter().map(|p| (p.0, p.1)).collect()
}
