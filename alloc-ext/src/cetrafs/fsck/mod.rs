//! The full cetrafs check (`tet-host verify IMAGE`): the allocation-free structure checks
//! of `tet_core::cetrafs::check`, plus the cross-structure passes that need maps, in the
//! order of `docs/cetrafs.md` section 13:
//!
//! 1. journals of every node, transactions chained across journals by checksums;
//! 2. registry, zone ownership, pending-free queues;
//! 3. inodes and extent trees, building one block-ownership map;
//! 4. directories (entries, names, types);
//! 5. connectivity from the root;
//! 6. link counts;
//! 7. bitmaps and free counters against the computed maps.
//!
//! Memory is sized from the validated geometry before anything is read, reserved with
//! `try_reserve`, and refused (a `check-incomplete` finding, then the allocation-free
//! check alone) when it would pass [`Options::memory_limit`]: one ownership bit per data
//! block, one bit and a 4-byte index per inode, 32 bytes per inode in use, 32 bytes per directory entry,
//! 64 bytes per committed journal slot.

mod bitmaps;
mod dirs;
mod journal;
mod links;
mod maps;
mod registry;
mod scan;

pub use maps::OwnershipMap;

use alloc::vec::Vec;

use tet_core::arith::{div_ceil, u64_of};
use tet_core::block::{Block, BlockDevice, BLOCK_SIZE, BLOCK_SIZE_U64};
use tet_core::cetrafs::check::{self, check_inode_bitmap, Counting, Sink, Summary};
use tet_core::cetrafs::copies::{self, Located, Source, Substituted};
use tet_core::cetrafs::{
    Buffers, Code, Committed, FileType, Finding, Fs, Overlay, OverlayDevice, BITS_PER_BITMAP_BLOCK,
};
use tet_core::{Error, ErrorKind};

use dirs::Infos;
use maps::{Bits, Ownership};

/// Limits of a check.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// Most bytes the maps may take; a larger image is checked without cross-checks.
    pub memory_limit: u64,
    /// The block of the superblock copy to use instead of the primary (`-b N`); `None`
    /// uses the primary, or the copy the search of section 3.1 finds when it fails.
    pub superblock: Option<u64>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            memory_limit: 1 << 30,
            superblock: None,
        }
    }
}

impl Options {
    /// The default limits with `memory_limit` bytes for the maps.
    pub fn with_memory(memory_limit: u64) -> Self {
        Options {
            memory_limit,
            ..Options::default()
        }
    }
}

/// What a check did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Findings counted by severity, and inodes checked.
    pub summary: Summary,
    /// Whether the cross-structure passes ran.
    pub cross_checked: bool,
    /// Bytes the fixed-size maps took (ownership bits, inode bits, inode index).
    pub map_bytes: u64,
    /// Directory entries seen.
    pub entries: u64,
    /// Where the superblock the check used came from (a copy when the primary fails,
    /// or when one was named).
    pub superblock: Source,
}

fn err(kind: ErrorKind, what: &'static str, lba: u64, field: usize) -> Error {
    Error::new(
        kind,
        what,
        lba.saturating_mul(BLOCK_SIZE_U64)
            .saturating_add(u64_of(field)),
    )
}

/// The `what` of a block-shared finding about a file's extent (repair clones it).
pub const EXTENT_SHARED: &str = "extent.physical (a block another owner holds)";

/// Checks `dev` and returns every finding, in the order found.
pub fn findings<D: BlockDevice>(dev: D, opts: &Options) -> (Vec<Finding>, Outcome) {
    let mut found = Vec::new();
    let outcome = check(dev, opts, &mut |f: &Finding| found.push(*f));
    (found, outcome)
}

/// Checks the image on `dev` and reports every finding to `sink`.
pub fn check<D: BlockDevice>(dev: D, opts: &Options, sink: &mut dyn Sink<Finding>) -> Outcome {
    check_keeping_maps(dev, opts, sink).0
}

/// [`check()`], also returning the ownership map when the cross-structure passes ran.
pub fn check_keeping_maps<D: BlockDevice>(
    dev: D,
    opts: &Options,
    sink: &mut dyn Sink<Finding>,
) -> (Outcome, Option<OwnershipMap>) {
    let mut kept = None;
    let o = check_inner(dev, opts, sink, &mut kept);
    (o, kept)
}

/// The findings a check reports about bitmaps and counters alone: each names a bit or
/// a count that disagrees with the maps the walk computed, never a block the walk reads.
pub const BITMAP_CODES: [Code; 7] = [
    Code::InodeUnmarked,
    Code::BitmapPadding,
    Code::BlockLeaked,
    Code::BlockUnmarked,
    Code::GroupFreeCount,
    Code::ZoneFreeCount,
    Code::FreeCountStale,
];

/// Whether block `lba` holds only bitmaps or counters: a zone group or block group
/// record, an inode bitmap block, or a data bitmap block of a block group region. No
/// pass before pass 7 reads one but the inode bitmap, which [`recheck_bitmaps`] reads
/// again.
pub fn holds_bitmaps_or_counters(sb: &tet_core::cetrafs::Superblock, lba: u64) -> bool {
    let r = sb.raw();
    let tables = r.zg_table_start.get()
        ..r.bg_table_start
            .get()
            .saturating_add(u64::from(sb.block_group_count()));
    let inode_bitmap = r.inode_bitmap_start.get()
        ..r.inode_bitmap_start
            .get()
            .saturating_add(r.inode_bitmap_blocks.get());
    let data_bitmap = || {
        let rel = lba.checked_sub(sb.bg_regions_start())?;
        let bg = rel.checked_div(sb.bg_size_blocks())?;
        let start = sb
            .bg_regions_start()
            .checked_add(bg.checked_mul(sb.bg_size_blocks())?)?;
        let len = sb
            .bg_size_blocks()
            .min(sb.total_blocks().checked_sub(start)?);
        let i = lba.checked_sub(start)?;
        Some(i >= 1 && i <= tet_core::cetrafs::bitmap_blocks(len))
    };
    tables.contains(&lba) || inode_bitmap.contains(&lba) || data_bitmap() == Some(true)
}

/// Checks the image again after a change that wrote only bitmap blocks and group
/// counters, against the maps of the full check before it (`kept`), when that check
/// found nothing but [`BITMAP_CODES`]: every block the walk of passes 3 to 6 reads is
/// as that check read it, so its findings and maps stand, and what is read again is
/// what could have changed: the superblock and its copies, the journals, the registry
/// and queues, the inode bitmap (against the inodes found in use) and the data bitmaps
/// and counters (pass 7). Returns `None`, having reported nothing, when anything reads
/// other than clean (a finding of any severity, queues that changed, a bit that differs,
/// maps that do not fit): the caller then runs the full check, which says what.
pub fn recheck_bitmaps<D: BlockDevice>(
    dev: D,
    opts: &Options,
    kept: OwnershipMap,
) -> Option<(Outcome, OwnershipMap)> {
    let mut found = 0u64;
    let mut counting = |_: &Finding| found = found.saturating_add(1);
    let mut sink = Counting::new(&mut counting);
    let mut bufs = Buffers::new();
    let mut bitmap: Block = [0; BLOCK_SIZE];
    let located = superblock(&dev, opts, &mut bufs.data, &mut sink).ok()?;
    let source = located.source;
    let dev = Substituted::new(dev, &located.sb);
    let raw_fs = check::mount(&dev, &mut bufs.data, &mut sink).ok()?;
    superblock_copies(dev.inner(), &located, &mut bufs.data, &mut sink);
    let sb = *raw_fs.superblock();
    let words_per_bg = div_ceil(sb.bg_size_blocks(), 64);
    let fits = u64_of(kept.in_use.len()) == div_ceil(sb.inode_count(), 64)
        && kept.words_per_bg == words_per_bg
        && u64_of(kept.bits.len())
            == u64::from(sb.block_group_count()).saturating_mul(words_per_bg);
    if !fits {
        return None;
    }
    let mut pass1 = journal::journals(&raw_fs, &mut bufs, &mut bitmap, &mut sink);
    let n = pass1.committed.len();
    let overlay = Overlay::from_classified(&mut pass1.committed, n);
    let odev = OverlayDevice::new(&dev, &overlay);
    let fs = Fs::open_shortened(odev, &mut bufs.data).ok()?;
    let mut own = Ownership::new(Bits(kept.bits), words_per_bg, &sb);
    let pending =
        registry::registry_and_queues(&fs, &mut bufs.data, &pass1.replay_rows, &mut own, &mut sink);
    let mut same = pending == kept.pending;
    let count = sb.inode_count();
    check_inode_bitmap(&fs, &mut bitmap, &mut sink, &mut |k, block| {
        let base = k.saturating_mul(BITS_PER_BITMAP_BLOCK);
        let live = count.saturating_sub(base).min(BITS_PER_BITMAP_BLOCK);
        for (j, mut w) in maps::live_words(block, live) {
            if k == 0 && j == 0 {
                w &= !1; // inode 0: its bit is padding, checked as such
            }
            let at = usize::try_from((base / 64).saturating_add(u64_of(j))).ok();
            if at.and_then(|i| kept.in_use.get(i)) != Some(&w) {
                same = false;
            }
        }
    });
    bitmaps::bitmaps(&fs, &mut bufs, &own, &mut sink);
    let summary = sink.summary;
    if found != 0 || !same || !pass1.complete {
        return None;
    }
    let outcome = Outcome {
        summary: Summary {
            inodes: kept.inodes,
            ..summary
        },
        cross_checked: true,
        map_bytes: u64_of(kept.in_use.len())
            .saturating_add(u64_of(own.bits.0.len()))
            .saturating_mul(8),
        entries: kept.entries,
        superblock: source,
    };
    let kept = OwnershipMap {
        bits: own.bits.0,
        words_per_bg,
        in_use: kept.in_use,
        pending,
        inodes: kept.inodes,
        entries: kept.entries,
    };
    Some((outcome, kept))
}

/// An inode in use that parsed.
#[derive(Clone, Copy)]
struct Info {
    ino: u64,
    /// `inode.parent`.
    parent: u64,
    /// `inode.nlink`.
    nlink: u32,
    /// Live entries naming it.
    refs: u32,
    /// Live entries in it naming directories.
    subdirs: u32,
    kind: Option<FileType>,
    /// Reached from the root (or below a reported orphan).
    reached: bool,
}

/// A directory entry, remembered for passes 4 to 6.
#[derive(Clone, Copy)]
struct Entry {
    /// The directory holding it.
    dir: u64,
    /// `dirent.inode`.
    target: u64,
    /// Its block and byte offset there.
    lba: u64,
    off: u16,
    /// `dirent.file_type`.
    ftype: FileType,
}

// The sizes the memory statement in the module docs and docs/cetrafs.md counts on.
const _: () = assert!(core::mem::size_of::<Info>() == 32);
const _: () = assert!(core::mem::size_of::<Entry>() == 32);

/// The outcome of a check that stopped at a mount failure (reported as `finding`).
/// Absolute byte offset of byte `at` of block `lba`.
fn byte_at(lba: u64, at: usize) -> u64 {
    lba.saturating_mul(BLOCK_SIZE_U64)
        .saturating_add(u64_of(at))
}

/// The overlap of a block claimed twice: the block's absolute byte offset.
fn overlap_block(lba: u64) -> ErrorKind {
    ErrorKind::Overlap {
        other: byte_at(lba, 0),
    }
}

fn unmounted(sink: &mut Counting<'_>, e: Error) -> Outcome {
    sink.report(&Finding::structural(Code::Mount, e));
    Outcome {
        summary: sink.summary,
        ..Outcome::default()
    }
}

/// Pass 0: the superblock in use (section 3.1) and its copies. A primary that fails
/// while a copy passes is reported (an error: the image is damaged) and the check goes
/// on through the copy; each copy that is missing, damaged or stale is a
/// `superblock-copy` warning.
fn superblock<D: BlockDevice>(
    dev: &D,
    opts: &Options,
    buf: &mut Block,
    sink: &mut Counting<'_>,
) -> Result<Located, Error> {
    let located = copies::locate(dev, buf, tet_core::cetrafs::ANY_DEVICE, opts.superblock)?;
    if let Some(e) = located.primary {
        sink.report(&Finding::structural(Code::Mount, e));
    }
    Ok(located)
}

/// The end of pass 0, once the image mounts (an image cut short is reported first):
/// each copy that cannot be read, fails, or differs from the superblock in use.
fn superblock_copies<D: BlockDevice>(
    dev: &D,
    located: &Located,
    buf: &mut Block,
    sink: &mut Counting<'_>,
) {
    if !located.sb.has_copies() {
        return;
    }
    for c in crate::cetrafs::copies::audit(dev, &located.sb, buf) {
        // The copy in use is the superblock: it cannot differ from itself. A copy past
        // the end of an image cut short is the truncation, reported already.
        let past_end = c
            .problem
            .is_some_and(|e| matches!(e.kind, ErrorKind::PastEnd { .. }));
        if let (Some(e), false, false) =
            (c.problem, located.source == Source::Copy(c.lba), past_end)
        {
            // A block that does not read is the device's failure, as anywhere else.
            let code = if c.unread {
                Code::ReadFailed
            } else {
                Code::SuperblockCopy
            };
            sink.report(&Finding::new(code, e));
        }
    }
}

fn check_inner<D: BlockDevice>(
    dev: D,
    opts: &Options,
    sink: &mut dyn Sink<Finding>,
    kept: &mut Option<OwnershipMap>,
) -> Outcome {
    let mut sink = Counting::new(sink);
    let mut bufs = Buffers::new();
    let mut bitmap: Block = [0; BLOCK_SIZE];
    let located = match superblock(&dev, opts, &mut bufs.data, &mut sink) {
        Ok(l) => l,
        Err(e) => return unmounted(&mut sink, e),
    };
    let source = located.source;
    // Everything below reads block 0 as the superblock in use.
    let dev = Substituted::new(dev, &located.sb);
    let raw_fs = match check::mount(&dev, &mut bufs.data, &mut sink) {
        Ok(fs) => fs,
        Err(e) => return unmounted(&mut sink, e),
    };
    superblock_copies(dev.inner(), &located, &mut bufs.data, &mut sink);
    let sb = *raw_fs.superblock();
    let words_per_bg = div_ceil(sb.bg_size_blocks(), 64);
    let own_bits =
        u64::from(sb.block_group_count()).saturating_mul(words_per_bg.saturating_mul(64));
    // Ownership bits, in-use bits, and the 4-byte inode index of passes 4 to 6.
    let map_bytes = own_bits
        .saturating_add(sb.inode_count())
        .div_ceil(8)
        .saturating_add(sb.inode_count().saturating_mul(4));
    let maps = if map_bytes <= opts.memory_limit {
        Bits::new(own_bits)
            .and_then(|o| Ok((o, Bits::new(sb.inode_count())?)))
            .ok()
    } else {
        None
    };
    let Some((own_bits, mut in_use)) = maps else {
        sink.report(&Finding::new(
            Code::CheckIncomplete,
            Error::new(
                ErrorKind::Budget {
                    needed: map_bytes,
                    available: opts.memory_limit,
                },
                "fsck maps (cross-structure passes skipped)",
                0,
            ),
        ));
        let mut table: Vec<Committed> = Vec::new();
        let s = check::verify(&raw_fs, &mut bufs, &mut bitmap, &mut table, &mut sink);
        return Outcome {
            summary: Summary {
                inodes: s.inodes,
                ..sink.summary
            },
            map_bytes: 0,
            superblock: source,
            ..Outcome::default()
        };
    };
    let mut own = Ownership::new(own_bits, words_per_bg, &sb);

    // Pass 1: journals, read as they are on disk.
    let mut pass1 = journal::journals(&raw_fs, &mut bufs, &mut bitmap, &mut sink);
    // Passes 2 to 7 check the filesystem as it will be after replay: through the
    // overlay of every block replay would write, so nothing replay fixes is reported.
    // The slots pass 1 classified make the overlay; nothing is read again.
    let n = pass1.committed.len();
    let overlay = Overlay::from_classified(&mut pass1.committed, n);
    let odev = OverlayDevice::new(&dev, &overlay);
    let fs = match Fs::open_shortened(odev, &mut bufs.data) {
        Ok(fs) => fs,
        Err(e) => return unmounted(&mut sink, e),
    };

    // Pass 2: registry, zone owners, pending-free queues.
    let pending =
        registry::registry_and_queues(&fs, &mut bufs.data, &pass1.replay_rows, &mut own, &mut sink);

    // Passes 3 and 4: every inode in use, its tree, directory blocks and xattr block.
    let scanned = scan::inodes(
        &fs,
        &mut bufs,
        &mut bitmap,
        &mut in_use,
        &mut own,
        &pending,
        &mut sink,
    );
    let entry_count = u64_of(scanned.entries.len());
    let (mut infos, indexed) = Infos::new(scanned.infos, sb.inode_count());
    if !(pass1.complete && scanned.complete && indexed) {
        sink.report(&Finding::new(
            Code::CheckIncomplete,
            Error::new(
                ErrorKind::Budget {
                    needed: 1,
                    available: 0,
                },
                "fsck lists (an allocation failed; some cross-checks are incomplete)",
                0,
            ),
        ));
    }
    links::connectivity(&sb, &in_use, &mut infos, &scanned.entries, &mut sink);

    // Pass 7: bitmaps and counters.
    bitmaps::bitmaps(&fs, &mut bufs, &own, &mut sink);
    *kept = Some(OwnershipMap {
        bits: own.bits.0,
        words_per_bg,
        in_use: in_use.0,
        pending,
        inodes: scanned.inodes,
        entries: entry_count,
    });
    Outcome {
        summary: Summary {
            inodes: scanned.inodes,
            ..sink.summary
        },
        cross_checked: true,
        map_bytes,
        entries: entry_count,
        superblock: source,
    }
}
