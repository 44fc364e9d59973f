//! The committed slots of the node journals, gathered in one place: by readers and
//! replay ([`committed_slots`]) and by the full check, which gathers them in the same
//! walk that checks every journal ([`checked_committed_slots`]).

use alloc::vec::Vec;

use tet_core::arith::u64_of;
use tet_core::block::BlockDevice;
use tet_core::cetrafs::check::{check_journal, Sink};
use tet_core::cetrafs::{Committed, Finding, Fs, Scratch};
use tet_core::{Error, ErrorKind};

/// Every slot of every committed transaction in the dirty journals of `fs`, in journal
/// and slot order, not yet classified: a table of exactly that many, sized by the
/// image's own count (at most registry rows × slots per journal) and allocated with
/// `try_reserve_exact`. It is what `Fs::classify_chains` classifies, and the table
/// `Fs::overlay` and `replay` take (they gather into it again). A clean journal costs
/// one read, its flag block; a dirty one is walked twice (to count, then to fill).
///
/// An allocation that fails is a `Budget` error naming
/// `"committed journal slots"`, with the bytes needed.
pub fn committed_slots<D: BlockDevice, E: From<Error>>(
    fs: &Fs<D, E>,
    scratch: &mut impl Scratch,
) -> Result<Vec<Committed>, Error> {
    let n = fs.committed_slots(&mut [], scratch);
    let mut table = Vec::new();
    if table.try_reserve_exact(n).is_err() {
        return Err(Error::new(
            ErrorKind::Budget {
                needed: u64_of(n).saturating_mul(u64_of(size_of::<Committed>())),
                available: 0,
            },
            "committed journal slots",
            0,
        ));
    }
    table.resize(n, Committed::default());
    // A device that changed between the walks: keep what the second one found, up to
    // the table's size.
    let got = fs.committed_slots(&mut table, scratch);
    table.truncate(got);
    Ok(table)
}

/// Pass 1 of the full check: every journal of `fs` checked (`check_journal`, clean ones'
/// slots too), each problem reported to `sink`, and in the same walk the committed slots
/// of the dirty journals gathered as [`committed_slots`] gathers them. The flag is false
/// when an allocation failed and some slots were left out (the check then says it is
/// incomplete).
pub fn checked_committed_slots<D: BlockDevice>(
    fs: &Fs<D>,
    scratch: &mut impl Scratch,
    sink: &mut dyn Sink<Finding>,
) -> (Vec<Committed>, bool) {
    let mut slots: Vec<Committed> = Vec::new();
    let mut complete = true;
    for row in 0..fs.superblock().node_capacity() {
        check_journal(fs, row, scratch, sink, &mut |c| {
            if c.dirty {
                if slots.try_reserve(1).is_ok() {
                    slots.push(c);
                } else {
                    complete = false;
                }
            }
        });
    }
    (slots, complete)
}
