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
//! Before the first round, group tables that fail are rebuilt from the superblock's
//! geometry (`tables`); an image whose superblock or map fails is never written.
//!
//! Fixes (docs/cetrafs.md section 14 has the table, with what each loses): bitmaps and
//! free counts from the ownership map; counts, sizes, parents and entry types set to
//! what the structure implies; region headers, free registry rows, pending entries,
//! journal flags and clean slot headers rebuilt; inodes, tree and xattr tails resealed
//! when they read as they were sealed; directory blocks salvaged entry by entry; orphans
//! named in `/lost+found`. With `-y` also: entries naming free inodes or closing loops
//! removed, repeated names renamed, shared blocks cloned, unreadable inodes cleared and
//! unreadable xattr blocks dropped. A fix that loses something is withheld before it
//! changes a block unless the mode and the answers allow it.
//!
//! Layout: `plan` orders the fix families of a round; `patches` holds the new blocks,
//! the record edits and what is allowed; the families are `entries` (single fields,
//! entries, inode reseals), `dir_blocks`, `derived`, `unreadable`, `bitmaps`,
//! `lost_found` and `clone`; `tables` rebuilds the group tables, `paths` names what a
//! lossy fix loses, and `apply` writes a round (journal blocks, transactions, tables).

mod apply;
mod bitmaps;
mod clone;
mod derived;
mod dir_blocks;
mod entries;
mod lost_found;
mod patches;
mod paths;
mod plan;
mod root;
mod superblock;
mod tables;
mod unreadable;

use alloc::collections::BTreeMap;
use alloc::vec::Vec;
use core::fmt;

use tet_core::block::{Block, BlockDevice, BlockDeviceMut, BLOCK_SIZE_U64};
use tet_core::cetrafs::check::Severity;
use tet_core::cetrafs::copies::Substituted;
use tet_core::cetrafs::replay::{ReplayError, ReplayReport};
use tet_core::cetrafs::{Buffers, Code, Finding, Fs, NodeState};
use tet_core::{Category, Error, ErrorKind};

use crate::cetrafs::fsck;
use apply::{apply, replay_all};
use patches::Patches;
use plan::plan;
pub use superblock::{COPIES_ADDED, COPIES_ADDED_OVER, COPY_REWRITTEN, RESTORED};

/// Rounds of check-and-fix before repair gives up on converging.
pub const MAX_ROUNDS: u32 = 8;

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
    /// The block of the superblock copy to restore the primary from (`-b N`); `None`
    /// restores from the copy the search of section 3.1 takes when the primary fails.
    pub superblock: Option<u64>,
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
    /// Fixes the last round planned but the mode or the answers did not allow: what
    /// `-y` would do about the findings left (each says what it loses).
    pub withheld: Vec<Fix>,
    /// What the fixes that lose something (made or withheld) touch, by the fix's
    /// offset: the path of a file cleared, the name of an entry removed.
    pub names: Vec<(u64, Vec<u8>)>,
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
    /// Replay refused (a live node's journal, a journal another replayer holds) or
    /// failed on what it read. Device I/O errors during replay are [`RepairError::Device`].
    Replay(ReplayError),
    /// Reading, writing or flushing the device failed (an [`ErrorKind::Io`] error),
    /// during replay or repair.
    Device(Error),
    /// A structure the repair must read to fix the image does not parse (damage repair
    /// does not handle; the check's findings say more), or a table did not fit in
    /// memory (`Budget`). The error's kind says which.
    Stopped(Error),
    /// No clean journal with room for a fix to go through.
    NoJournal,
}

impl RepairError {
    /// The category the CLI derives its exit code from: device I/O is
    /// [`Category::Io`]; damage repair cannot handle is the error's own category
    /// ([`Category::Corrupt`], or `Truncated`, `Incompatible`); a refusal on the
    /// filesystem's state (mounted, a live or claimed journal, no clean journal) is
    /// operational, like device I/O ([`Category::Io`]: nothing about the request is
    /// wrong, and the same command succeeds once the state changes); memory is the
    /// budget error's [`Category::Resource`].
    pub fn category(&self) -> Category {
        match self {
            RepairError::Device(_)
            | RepairError::Mounted { .. }
            | RepairError::Replay(ReplayError::LiveNode { .. })
            | RepairError::Replay(ReplayError::Claimed { .. })
            | RepairError::NoJournal => Category::Io,
            RepairError::Replay(ReplayError::Device(e)) | RepairError::Stopped(e) => {
                e.kind.category()
            }
        }
    }
}

impl From<ReplayError> for RepairError {
    fn from(e: ReplayError) -> Self {
        match e {
            ReplayError::Device(e) if e.kind == ErrorKind::Io => RepairError::Device(e),
            e => RepairError::Replay(e),
        }
    }
}

impl From<Error> for RepairError {
    fn from(e: Error) -> Self {
        if e.kind == ErrorKind::Io {
            RepairError::Device(e)
        } else {
            RepairError::Stopped(e)
        }
    }
}

impl fmt::Display for RepairError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RepairError::Mounted { row, node_id } => write!(
                f,
                "node {node_id} (registry row {row}) is ACTIVE: the filesystem may be mounted"
            ),
            RepairError::Replay(ReplayError::LiveNode { row, node_id }) => write!(
                f,
                "the journal of node {node_id} (registry row {row}) needs replay but that \
                 node is ACTIVE"
            ),
            RepairError::Replay(ReplayError::Claimed { row, owner }) => write!(
                f,
                "the journal of registry row {row} is being replayed by node {owner}"
            ),
            RepairError::Replay(ReplayError::Device(e)) => write!(f, "replay failed: {e}"),
            RepairError::Device(e) => write!(f, "device I/O failed: {e}"),
            RepairError::Stopped(e) => write!(f, "repair stopped: {e}"),
            RepairError::NoJournal => write!(f, "no clean journal to write fixes through"),
        }
    }
}

impl core::error::Error for RepairError {}

/// Repairs the image on `dev` (see the module docs). `decide` is asked about every fix
/// the mode allows and may refuse it (interactive repair); with [`Mode::No`] nothing is
/// written and `fixes` lists what one round would do.
pub fn repair<D: BlockDeviceMut>(
    dev: D,
    mode: Mode,
    opts: &RepairOptions,
    decide: &mut dyn FnMut(&Fix) -> bool,
) -> Result<RepairOutcome, RepairError> {
    // Every step reads block 0 as the superblock in use: a copy's, when the primary
    // fails, until the restore writes it.
    let mut buf: Block = [0; tet_core::block::BLOCK_SIZE];
    let restore = superblock::restore_plan(&dev, opts.superblock, &mut buf);
    let dev = match &restore {
        Some((_, sb)) => Substituted::new(&dev, sb),
        None => Substituted::unchanged(&dev),
    };
    let mut first: Vec<Fix> = Vec::new();
    let mut refused: Option<Fix> = None;
    if let Some((fix, sb)) = restore {
        if mode == Mode::No {
            first.push(fix);
        } else if decide(&fix) {
            if !opts.force {
                refuse_if_mounted(&dev)?;
            }
            superblock::restore(&dev, &sb)?;
            first.push(fix);
        } else {
            refused = Some(fix);
        }
    }
    let mut out = repair_rounds(&dev, mode, opts, decide)?;
    out.found |= !first.is_empty() || refused.is_some();
    out.fixes.splice(0..0, first);
    out.withheld.extend(refused);
    superblock::copies(&dev, mode, decide, &mut out)?;
    // What -n would do, or what -p held back: named as the image reads now.
    let unmade = if mode == Mode::No {
        &out.fixes
    } else {
        &out.withheld
    };
    if !unmade.is_empty() {
        if let Ok(fs) = Fs::open(&dev, &mut buf) {
            let named = paths::name_losses(&fs, unmade);
            out.names.extend(named);
        }
    }
    Ok(out)
}

fn repair_rounds<D: BlockDeviceMut>(
    dev: D,
    mode: Mode,
    opts: &RepairOptions,
    decide: &mut dyn FnMut(&Fix) -> bool,
) -> Result<RepairOutcome, RepairError> {
    let mut out = RepairOutcome::default();
    let mut bufs = Buffers::new();
    let check_opts = fsck::Options {
        memory_limit: opts.memory_limit,
        superblock: opts.superblock,
    };
    let errors_of = |found: &[Finding]| -> Vec<Finding> {
        found
            .iter()
            .filter(|f| f.severity() == Severity::Error)
            .copied()
            .collect()
    };
    // Before anything is written (the group tables included): a node that may have the
    // filesystem mounted. A row that does not validate but whose state reads ACTIVE
    // counts too: repair cannot tell it is not a live node's.
    if !opts.force {
        refuse_if_mounted(&dev)?;
    }
    if Fs::open(&dev, &mut bufs.data).is_err() {
        // The group tables are rebuilt from the geometry when the superblock and map
        // validate; any other mount failure is reported, and nothing is written.
        let rebuilt = match Fs::open_for_read(&dev, &mut bufs.data) {
            Ok(rfs) => tables::rebuild(&rfs)?,
            Err(_) => Vec::new(),
        };
        out.found = true;
        let accepted: Vec<tables::Rebuilt> = rebuilt
            .iter()
            .filter(|r| mode != Mode::No && decide(&r.fix))
            .cloned()
            .collect();
        if mode == Mode::No {
            out.fixes.extend(rebuilt.iter().map(|r| r.fix));
        }
        if !accepted.is_empty() {
            let rfs = Fs::open_for_read(&dev, &mut bufs.data)?;
            tables::write(&rfs, &accepted)?;
            out.fixes.extend(accepted.iter().map(|r| r.fix));
            out.rounds = 1;
        }
        if mode == Mode::No || Fs::open(&dev, &mut bufs.data).is_err() {
            let (found, _) = fsck::findings(&dev, &check_opts);
            out.left = errors_of(&found);
            out.found = true;
            return Ok(out);
        }
    }
    let fs = Fs::open(&dev, &mut bufs.data)?;
    if mode != Mode::No {
        out.replay = replay_all(&fs, opts, &mut bufs)?;
    }
    let mut txn = u64::from(u32::MAX);
    // The maps of the last check, when the round after it wrote only bitmaps and
    // counters in answer to findings about nothing else: the next check then reads
    // only what that round could have changed (`fsck::recheck_bitmaps`), and falls
    // back to the full check on anything but a clean result.
    let mut settled: Option<fsck::OwnershipMap> = None;
    loop {
        let mut found: Vec<Finding> = Vec::new();
        let rechecked = settled
            .take()
            .and_then(|kept| fsck::recheck_bitmaps(&dev, &check_opts, kept));
        let own = match rechecked {
            Some((_, kept)) => Some(kept),
            None => {
                fsck::check_keeping_maps(&dev, &check_opts, &mut |f: &Finding| found.push(*f)).1
            }
        };
        if out.rounds == 0 || !out.found {
            out.found = found
                .iter()
                .any(|f| f.severity() == Severity::Error || f.code == Code::JournalReplay);
        }
        let fs = Fs::open(&dev, &mut bufs.data)?;
        // `-p` plans only the fixes that lose nothing: one that loses something is
        // withheld before it changes a block, so it never holds back a block a lossless
        // fix needs, and the finding it answers is left with what `-y` would do.
        let lossless = |f: &Fix| f.lossless;
        let first_allow: Option<patches::Allow<'_>> = match mode {
            Mode::Preen => Some(&lossless),
            Mode::No | Mode::Yes => None,
        };
        let mut patches = Patches::new(&fs, first_allow);
        let mut planned = Vec::new();
        plan(&fs, &found, own.as_ref(), &mut patches, &mut planned)?;
        if mode == Mode::No || planned.is_empty() || out.rounds >= MAX_ROUNDS {
            if mode == Mode::No {
                out.fixes = planned;
            }
            out.withheld = patches.withheld;
            out.left = errors_of(&found);
            return Ok(out);
        }
        let mut accepted = Vec::new();
        let mut withheld = core::mem::take(&mut patches.withheld);
        for f in &planned {
            // (A family that plans without asking still never gets a lossy fix past -p.)
            if (mode != Mode::Preen || f.lossless) && decide(f) {
                accepted.push(*f);
            } else {
                withheld.push(*f);
            }
        }
        // Some answered no: the round is planned again without them, so a refused fix
        // changes nothing and what follows from the refusal (a free count set from the
        // bitmap as it stays) is planned too; a fix that plan did not offer before is
        // asked now. A fix whose family plans without asking and that was refused
        // leaves its blocks unwritten, also when an accepted fix shares them (refusing
        // wins).
        let same = |a: &Fix, b: &Fix| a.action == b.action && a.offset == b.offset;
        let refused: Vec<Fix> = planned
            .iter()
            .filter(|p| !accepted.iter().any(|a| same(a, p)))
            .copied()
            .collect();
        let not_refused =
            |f: &Fix| (mode != Mode::Preen || f.lossless) && !refused.iter().any(|r| same(r, f));
        let mut again;
        let (blocks, fresh, made) = if refused.is_empty() {
            (patches.blocks, patches.fresh, accepted)
        } else {
            again = Patches::new(&fs, Some(&not_refused));
            let mut replanned = Vec::new();
            plan(&fs, &found, own.as_ref(), &mut again, &mut replanned)?;
            let mut dropped: Vec<u64> = Vec::new();
            let mut made: Vec<Fix> = Vec::new();
            for p in &replanned {
                let yes = if accepted.iter().any(|a| same(a, p)) {
                    true
                } else if refused.iter().any(|r| same(r, p)) {
                    false
                } else {
                    (mode != Mode::Preen || p.lossless) && decide(p)
                };
                if yes {
                    made.push(*p);
                } else {
                    dropped.push(p.offset / BLOCK_SIZE_U64);
                    if !withheld.iter().any(|w| same(w, p)) {
                        withheld.push(*p);
                    }
                }
            }
            withheld.append(&mut again.withheld);
            let blocks: BTreeMap<u64, Block> = core::mem::take(&mut again.blocks)
                .into_iter()
                .filter(|(lba, _)| !dropped.contains(lba))
                .collect();
            (blocks, core::mem::take(&mut again.fresh), made)
        };
        if blocks.is_empty() || made.is_empty() {
            out.withheld = withheld;
            out.left = errors_of(&found);
            return Ok(out);
        }
        out.withheld = withheld;
        out.names.extend(paths::name_losses(&fs, &made));
        apply(&fs, &blocks, &fresh, opts, &mut txn, &mut bufs)?;
        let sb = *fs.superblock();
        if found.iter().all(|f| fsck::BITMAP_CODES.contains(&f.code))
            && blocks
                .keys()
                .all(|lba| fsck::holds_bitmaps_or_counters(&sb, *lba))
        {
            settled = own;
        }
        out.fixes.extend(made);
        out.rounds = out.rounds.saturating_add(1);
    }
}

/// Refuses (before anything is written, the group tables included) when a node may have
/// the filesystem mounted. A row that does not validate but whose state reads ACTIVE
/// counts too: repair cannot tell it is not a live node's.
fn refuse_if_mounted<D: BlockDevice>(dev: &D) -> Result<(), RepairError> {
    let mut bufs = Buffers::new();
    if let Ok(rfs) = Fs::open_for_read(dev, &mut bufs.data) {
        let reg = rfs.superblock().raw().registry_start.get();
        for row in 0..rfs.superblock().node_capacity() {
            let active = match rfs.node_row(row, &mut bufs.data) {
                Ok(Some(n)) => (n.state() == NodeState::Active).then(|| n.raw().node_id.get()),
                Ok(None) => None,
                Err(_) => {
                    let at = usize::try_from(u64::from(row) % 32)
                        .unwrap_or(0)
                        .saturating_mul(128);
                    let lba = reg.saturating_add(u64::from(row) / 32);
                    let mut b: Block = [0; tet_core::block::BLOCK_SIZE];
                    rfs.device().read_block(lba, &mut b)?;
                    let word = |o: usize, n: usize| {
                        b.get(at.saturating_add(o)..at.saturating_add(o).saturating_add(n))
                            .map(|x| x.iter().rev().fold(0u64, |v, y| (v << 8) | u64::from(*y)))
                            .unwrap_or(0)
                    };
                    (word(16, 4) == 1).then(|| word(8, 8))
                }
            };
            if let Some(node_id) = active {
                return Err(RepairError::Mounted { row, node_id });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;

    #[test]
    fn device_io_is_its_own_error_and_category() {
        let io = Error::new(ErrorKind::Io, "power cut", 0);
        let bad = Error::new(ErrorKind::Invalid, "repaired structure", 4096);
        assert_eq!(RepairError::from(io), RepairError::Device(io));
        assert_eq!(
            RepairError::from(ReplayError::Device(io)),
            RepairError::Device(io)
        );
        assert_eq!(RepairError::from(bad), RepairError::Stopped(bad));
        assert_eq!(
            RepairError::from(ReplayError::Device(bad)),
            RepairError::Replay(ReplayError::Device(bad))
        );
        assert_eq!(RepairError::Device(io).category(), Category::Io);
        assert_eq!(RepairError::Stopped(bad).category(), Category::Corrupt);
        assert_eq!(
            RepairError::Replay(ReplayError::Device(bad)).category(),
            Category::Corrupt
        );
        let refusals = [
            RepairError::Mounted { row: 0, node_id: 7 },
            RepairError::Replay(ReplayError::LiveNode { row: 1, node_id: 7 }),
            RepairError::Replay(ReplayError::Claimed { row: 1, owner: 9 }),
            RepairError::NoJournal,
        ];
        for e in refusals {
            assert_eq!(e.category(), Category::Io, "{e}");
        }
        assert_eq!(
            RepairError::Device(io).to_string(),
            "device I/O failed: power cut (byte 0x0) could not be read"
        );
    }
}
