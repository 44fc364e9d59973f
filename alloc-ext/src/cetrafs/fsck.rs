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

use alloc::collections::BTreeMap;
use alloc::vec::Vec;

use tet_core::arith::{div_ceil, u64_of};
use tet_core::block::{Block, BlockDevice, BLOCK_SIZE, BLOCK_SIZE_U64};
use tet_core::cetrafs::check::{
    self, check_groups, check_inode, check_inode_bitmap, check_journal, check_pending,
    check_registry, report_replay, Counting, InodeVisitor, Sink, Summary,
};
use tet_core::cetrafs::{
    bitmap_blocks, Buffers, Code, Committed, DirEntry, Extent, FileType, Finding, Fs, Overlay,
    OverlayDevice, SlotClass, BITS_PER_BITMAP_BLOCK, SB_CLEAN,
};
use tet_core::{Error, ErrorKind};

/// Limits of a check.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// Most bytes the maps may take; a larger image is checked without cross-checks.
    pub memory_limit: u64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            memory_limit: 1 << 30,
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
}

fn err(kind: ErrorKind, what: &'static str, lba: u64, field: usize) -> Error {
    Error::new(
        kind,
        what,
        lba.saturating_mul(BLOCK_SIZE_U64)
            .saturating_add(u64_of(field)),
    )
}

/// A bitmap in `u64` words (bit `i` = word `i / 64`, bit `i % 64`).
struct Bits(Vec<u64>);

impl Bits {
    fn new(bits: u64) -> Result<Bits, ()> {
        let words = usize::try_from(div_ceil(bits, 64)).map_err(|_| ())?;
        let mut v = Vec::new();
        v.try_reserve_exact(words).map_err(|_| ())?;
        v.resize(words, 0);
        Ok(Bits(v))
    }
    fn get(&self, i: u64) -> bool {
        usize::try_from(i / 64)
            .ok()
            .and_then(|w| self.0.get(w))
            .is_some_and(|w| w & (1u64 << (i % 64)) != 0)
    }
    /// Sets bit `i`; returns whether it was set already.
    fn set(&mut self, i: u64) -> bool {
        match usize::try_from(i / 64).ok().and_then(|w| self.0.get_mut(w)) {
            Some(w) => {
                let m = 1u64 << (i % 64);
                let was = *w & m != 0;
                *w |= m;
                was
            }
            None => false,
        }
    }
}

/// Where a data block's ownership bit lives: block groups are laid out one after the
/// other, `words_per_bg` words each, bit `i` of a group = its data block `i` (the
/// on-disk bitmap's layout, so pass 7 compares whole words).
struct Ownership {
    bits: Bits,
    regions: u64,
    bg_size: u64,
    words_per_bg: u64,
    total: u64,
}

impl Ownership {
    fn index(&self, lba: u64) -> Option<u64> {
        let rel = lba.checked_sub(self.regions)?;
        let bg = rel.checked_div(self.bg_size)?;
        let start = self.regions.checked_add(bg.checked_mul(self.bg_size)?)?;
        let len = self.bg_size.min(self.total.checked_sub(start)?);
        let data = start.checked_add(1)?.checked_add(bitmap_blocks(len))?;
        let i = lba.checked_sub(data)?;
        bg.checked_mul(self.words_per_bg)?
            .checked_mul(64)?
            .checked_add(i)
    }
}

/// The `what` of a block-shared finding about a file's extent (repair clones it).
pub const EXTENT_SHARED: &str = "extent.physical (a block another owner holds)";

/// The 64-bit words of a bitmap block that hold its first `live` bits, each masked to
/// those bits, with their index.
fn live_words(block: &Block, live: u64) -> impl Iterator<Item = (usize, u64)> + '_ {
    block
        .chunks_exact(8)
        .enumerate()
        .take_while(move |(j, _)| u64_of(*j).saturating_mul(64) < live)
        .map(move |(j, chunk)| {
            let mut w = u64::from_le_bytes(chunk.try_into().unwrap_or([0; 8]));
            let valid = live.saturating_sub(u64_of(j).saturating_mul(64));
            if valid < 64 {
                w &= (1u64 << valid).wrapping_sub(1);
            }
            (j, w)
        })
}

/// An inode in use that parsed.
#[derive(Clone, Copy)]
struct Info {
    ino: u64,
    parent: u64,
    nlink: u32,
    refs: u32,
    subdirs: u32,
    kind: Option<FileType>,
    reached: bool,
}

/// A directory entry, remembered for passes 4 to 6.
#[derive(Clone, Copy)]
struct Entry {
    dir: u64,
    target: u64,
    lba: u64,
    off: u16,
    ftype: FileType,
}

struct Scan<'a> {
    own: &'a mut Ownership,
    pending: &'a [(u64, u64)],
    extents: Vec<(Extent, u64, usize)>,
    tree_blocks: Vec<(u64, u64)>,
    xattr: Option<u64>,
    entries: &'a mut Vec<Entry>,
    names: Vec<u8>,
    name_at: Vec<(usize, usize, u64, usize)>,
    oom: bool,
}

impl InodeVisitor for Scan<'_> {
    fn tree_block(&mut self, ino: u64, lba: u64) {
        self.tree_blocks.push((lba, ino));
    }
    fn extent(&mut self, _ino: u64, e: &Extent, lba: u64, at: usize) {
        if self.extents.try_reserve(1).is_ok() {
            self.extents.push((*e, lba, at));
        } else {
            self.oom = true;
        }
    }
    fn dir_entry(&mut self, dir: u64, e: &DirEntry, lba: u64, off: usize) {
        if self.entries.try_reserve(1).is_err() || self.names.try_reserve(e.name().len()).is_err() {
            self.oom = true;
            return;
        }
        self.entries.push(Entry {
            dir,
            target: e.inode,
            lba,
            off: u16::try_from(off).unwrap_or(u16::MAX),
            ftype: e.file_type,
        });
        let start = self.names.len();
        self.names.extend_from_slice(e.name());
        self.name_at.push((start, self.names.len(), lba, off));
    }
    fn xattr_block(&mut self, _ino: u64, lba: u64) {
        self.xattr = Some(lba);
    }
}

impl Scan<'_> {
    /// Claims `count` blocks from `lba` for `ino`; reports the first block already owned.
    fn claim(
        &mut self,
        lba: u64,
        count: u64,
        ino: u64,
        at: (u64, usize),
        sink: &mut dyn Sink<Finding>,
    ) {
        self.claim_as(lba, count, ino, at, "block (already owned)", sink);
    }

    /// [`Scan::claim`], naming what claims (`what`) in the finding.
    fn claim_as(
        &mut self,
        lba: u64,
        count: u64,
        ino: u64,
        at: (u64, usize),
        shared: &'static str,
        sink: &mut dyn Sink<Finding>,
    ) {
        for b in lba..lba.saturating_add(count) {
            let Some(i) = self.own.index(b) else {
                continue;
            };
            if self.own.bits.set(i) {
                let queued = self.pending.iter().any(|(s, e)| b >= *s && b < *e);
                let (code, what) = if queued {
                    (
                        Code::PendingInUse,
                        "block (also waiting in a pending-free queue)",
                    )
                } else {
                    (Code::BlockShared, shared)
                };
                sink.report(
                    &Finding::new(code, err(overlap_block(b), what, at.0, at.1)).of_inode(ino),
                );
                return;
            }
        }
    }

    /// After one inode's walk: extent overlap, ownership claims, unique names.
    fn finish_inode(&mut self, ino: u64, sink: &mut dyn Sink<Finding>) {
        let mut extents = core::mem::take(&mut self.extents);
        extents.sort_unstable_by_key(|(e, _, _)| e.logical);
        let mut end: u64 = 0;
        // Absolute byte offset of the extent entry that reaches `end`.
        let mut end_at: u64 = 0;
        for (e, lba, at) in &extents {
            let start = u64::from(e.logical);
            if start < end {
                sink.report(
                    &Finding::new(
                        Code::ExtentOverlap,
                        err(
                            ErrorKind::Overlap { other: end_at },
                            "extent.logical (overlaps another extent of the file)",
                            *lba,
                            *at,
                        ),
                    )
                    .of_inode(ino),
                );
                continue;
            }
            end = start.saturating_add(e.len.into());
            end_at = byte_at(*lba, *at);
            self.claim_as(
                e.physical,
                e.len.into(),
                ino,
                (*lba, at.saturating_add(8)),
                EXTENT_SHARED,
                sink,
            );
        }
        extents.clear();
        self.extents = extents;
        let trees = core::mem::take(&mut self.tree_blocks);
        for (lba, owner) in &trees {
            self.claim(*lba, 1, *owner, (*lba, 0), sink);
        }
        self.tree_blocks = trees;
        self.tree_blocks.clear();
        if let Some(x) = self.xattr.take() {
            self.claim(x, 1, ino, (x, 0), sink);
        }
        // Names: sort the spans by their bytes; neighbours that compare equal repeat.
        let names = &self.names;
        let name = |s: usize, e: usize| names.get(s..e).unwrap_or(&[]);
        self.name_at.sort_unstable_by(|a, b| {
            name(a.0, a.1)
                .cmp(name(b.0, b.1))
                .then(a.2.cmp(&b.2))
                .then(a.3.cmp(&b.3))
        });
        for w in self.name_at.windows(2) {
            if let [a, b] = w {
                if name(a.0, a.1) == name(b.0, b.1) {
                    sink.report(
                        &Finding::new(
                            Code::DirentDuplicate,
                            err(
                                ErrorKind::Duplicate {
                                    first: byte_at(a.2, a.3),
                                },
                                "dirent.name (repeated in the directory)",
                                b.2,
                                b.3.saturating_add(11),
                            ),
                        )
                        .of_inode(ino),
                    );
                }
            }
        }
        self.name_at.clear();
        self.names.clear();
    }
}

fn kind_of(inode: &tet_core::cetrafs::Inode) -> FileType {
    if inode.is_dir() {
        FileType::Directory
    } else if inode.is_symlink() {
        FileType::Symlink
    } else {
        FileType::Regular
    }
}

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

/// The block-ownership map a check computed: for block group `g`, bit `i` of words
/// `g × words_per_bg ..` says whether data block `i` is owned (the on-disk bitmap's
/// layout). Repair rebuilds bitmaps and free counts from it.
pub struct OwnershipMap {
    bits: Vec<u64>,
    /// Words per block group.
    pub words_per_bg: u64,
}

impl OwnershipMap {
    /// Whether data block `i` of block group `bg` is owned.
    pub fn owned(&self, bg: u32, i: u64) -> bool {
        u64::from(bg)
            .checked_mul(self.words_per_bg)
            .and_then(|w| w.checked_add(i / 64))
            .and_then(|w| usize::try_from(w).ok())
            .and_then(|w| self.bits.get(w))
            .is_some_and(|w| w & (1u64 << (i % 64)) != 0)
    }
}

/// [`check`], also returning the ownership map when the cross-structure passes ran.
pub fn check_keeping_maps<D: BlockDevice>(
    dev: D,
    opts: &Options,
    sink: &mut dyn Sink<Finding>,
) -> (Outcome, Option<OwnershipMap>) {
    let mut kept = None;
    let o = check_inner(dev, opts, sink, &mut kept);
    (o, kept)
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
    let raw_fs = match Fs::open(&dev, &mut bufs.data) {
        Ok(fs) => fs,
        Err(e) => {
            sink.report(&Finding::structural(Code::Mount, e));
            return Outcome {
                summary: sink.summary,
                ..Outcome::default()
            };
        }
    };
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
            ..Outcome::default()
        };
    };
    let mut own = Ownership {
        bits: own_bits,
        regions: sb.bg_regions_start(),
        bg_size: sb.bg_size_blocks(),
        words_per_bg,
        total: sb.total_blocks(),
    };

    // Pass 1: journals, read as they are on disk.
    let mut oom = false;
    // One walk of the journals both checks them and gathers the committed slots.
    let mut committed: Vec<Committed> = Vec::new();
    for row in 0..sb.node_capacity() {
        check_journal(&raw_fs, row, &mut bufs, &mut sink, &mut |c| {
            if c.dirty {
                if committed.try_reserve(1).is_ok() {
                    committed.push(c);
                } else {
                    oom = true;
                }
            }
        });
    }
    let replay_rows = classify(&raw_fs, &mut committed, &mut bitmap, &mut sink);
    if !replay_rows.is_empty() && sb.raw().sb_flags.get() & SB_CLEAN != 0 {
        sink.report(&Finding::new(
            Code::CleanWithReplay,
            err(ErrorKind::Invalid, "superblock.sb_flags (SB_CLEAN)", 0, 12),
        ));
    }
    // Passes 2 to 7 check the filesystem as it will be after replay: through the
    // overlay of every block replay would write, so nothing replay fixes is reported.
    // The slots pass 1 classified make the overlay; nothing is read again.
    let n = committed.len();
    let overlay = Overlay::from_classified(&mut committed, n);
    let odev = OverlayDevice::new(&dev, &overlay);
    let fs = match Fs::open(odev, &mut bufs.data) {
        Ok(fs) => fs,
        Err(e) => {
            sink.report(&Finding::structural(Code::Mount, e));
            return Outcome {
                summary: sink.summary,
                ..Outcome::default()
            };
        }
    };

    // Pass 2: registry, zone owners, pending-free queues.
    let mut nodes: Vec<(u64, u32, u64, usize)> = Vec::new();
    let mut row_state: BTreeMap<u32, u32> = BTreeMap::new();
    let reg = sb.raw().registry_start.get();
    check_registry(&fs, &mut bufs.data, &mut sink, &mut |row, n| {
        if let Some(n) = n {
            let lba = reg.saturating_add(u64::from(row) / 32);
            let off = usize::try_from(u64::from(row) % 32)
                .unwrap_or(0)
                .saturating_mul(128);
            nodes.push((n.raw().node_id.get(), row, lba, off));
            row_state.insert(row, n.raw().state.get());
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
    for (row, lba) in &replay_rows {
        let state = row_state.get(row).copied().unwrap_or(0);
        if state == 0 || state == 3 {
            sink.report(&Finding::new(
                Code::JournalUnowned,
                err(
                    ErrorKind::Invalid,
                    if state == 0 {
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
    check_pending(&fs, &mut bufs.data, &mut sink, &mut |_, e, lba, off| {
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
    let ranges: Vec<(u64, u64)> = pending.iter().map(|p| (p.0, p.1)).collect();

    // Passes 3 and 4: every inode in use, its tree, directory blocks and xattr block.
    check_inode_bitmap(&fs, &mut bitmap, &mut sink, &mut |k, block| {
        let base = k.saturating_mul(BITS_PER_BITMAP_BLOCK);
        let live = sb
            .inode_count()
            .saturating_sub(base)
            .min(BITS_PER_BITMAP_BLOCK);
        let first_word = base / 64;
        for (j, w) in live_words(block, live) {
            if let Some(dst) = usize::try_from(first_word.saturating_add(u64_of(j)))
                .ok()
                .and_then(|i| in_use.0.get_mut(i))
            {
                *dst = w;
            }
        }
    });
    // Inode 0 is never in use, whatever its bit says (pass 0 reports a clear bit).
    if let Some(w) = in_use.0.first_mut() {
        *w &= !1;
    }
    let mut infos: Vec<Info> = Vec::new();
    let mut entries: Vec<Entry> = Vec::new();
    let mut inodes: u64 = 0;
    {
        let mut scan = Scan {
            own: &mut own,
            pending: &ranges,
            extents: Vec::new(),
            tree_blocks: Vec::new(),
            xattr: None,
            entries: &mut entries,
            names: Vec::new(),
            name_at: Vec::new(),
            oom: false,
        };
        for (w, word) in in_use.0.iter().enumerate() {
            if *word == 0 {
                continue;
            }
            for b in 0..64u64 {
                if word & (1u64 << b) == 0 {
                    continue;
                }
                let ino = u64_of(w).saturating_mul(64).saturating_add(b);
                inodes = inodes.saturating_add(1);
                let inode = check_inode(&fs, ino, &mut bufs, &mut sink, &mut scan);
                scan.finish_inode(ino, &mut sink);
                if let Some(i) = inode {
                    if infos.try_reserve(1).is_err() {
                        scan.oom = true;
                        continue;
                    }
                    infos.push(Info {
                        ino,
                        parent: i.raw().parent.get(),
                        nlink: i.raw().nlink.get(),
                        refs: 0,
                        subdirs: 0,
                        kind: Some(kind_of(&i)),
                        reached: false,
                    });
                }
            }
        }
        oom |= scan.oom;
    }
    let entry_count = u64_of(entries.len());
    let mut index: Vec<u32> = Vec::new();
    let count = usize::try_from(sb.inode_count()).unwrap_or(usize::MAX);
    if index.try_reserve_exact(count).is_ok() {
        index.resize(count, 0);
        for (k, i) in infos.iter().enumerate() {
            let slot = usize::try_from(i.ino).ok().and_then(|n| index.get_mut(n));
            if let (Some(slot), Ok(pos)) = (slot, u32::try_from(k.saturating_add(1))) {
                *slot = pos;
            }
        }
    } else {
        oom = true;
    }
    if oom {
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
    let mut infos = Infos { list: infos, index };
    connectivity(&sb, &in_use, &mut infos, &entries, &mut sink);

    // Pass 7: bitmaps and counters.
    let mut leaked: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
    let mut unmarked: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
    check_groups(&fs, &mut bufs, &mut sink, &mut |bg, k, block| {
        let bi = bg.raw().bg_id.get();
        let data = bg.raw().data_block_count.get();
        let base_bit = k.saturating_mul(BITS_PER_BITMAP_BLOCK);
        let live = data.saturating_sub(base_bit).min(BITS_PER_BITMAP_BLOCK);
        let first_word = u64::from(bi)
            .saturating_mul(words_per_bg)
            .saturating_add(base_bit / 64);
        for (j, disk) in live_words(block, live) {
            let j64 = u64_of(j);
            let owned = usize::try_from(first_word.saturating_add(j64))
                .ok()
                .and_then(|w| own.bits.0.get(w))
                .copied()
                .unwrap_or(0);
            let at = bg
                .raw()
                .start_block
                .get()
                .saturating_add(1)
                .saturating_add(k)
                .saturating_mul(BLOCK_SIZE_U64)
                .saturating_add(u64_of(j).saturating_mul(8));
            for (diff, map) in [(disk & !owned, &mut leaked), (owned & !disk, &mut unmarked)] {
                if diff != 0 {
                    let e = map
                        .entry(bi)
                        .or_insert((at.saturating_add(u64::from(diff.trailing_zeros()) / 8), 0));
                    e.1 = e.1.saturating_add(u64::from(diff.count_ones()));
                }
            }
        }
    });
    for (code, map, what) in [
        (
            Code::BlockLeaked,
            &leaked,
            "data bitmap (bits set for blocks nothing owns)",
        ),
        (
            Code::BlockUnmarked,
            &unmarked,
            "data bitmap (bits clear for owned blocks)",
        ),
    ] {
        for (first, count) in map.values() {
            sink.report(&Finding::new(
                code,
                Error::new(ErrorKind::Unreferenced { len: *count }, what, *first),
            ));
        }
    }
    *kept = Some(OwnershipMap {
        bits: own.bits.0,
        words_per_bg,
    });
    Outcome {
        summary: Summary {
            inodes,
            ..sink.summary
        },
        cross_checked: true,
        map_bytes,
        entries: entry_count,
    }
}

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

/// The inodes in use that parsed, and where each inode number's entry is (0 = none,
/// else position + 1): 4 bytes per inode, so every lookup of passes 4 to 6 is direct.
struct Infos {
    list: Vec<Info>,
    index: Vec<u32>,
}

impl Infos {
    fn get_mut(&mut self, ino: u64) -> Option<&mut Info> {
        let at = usize::try_from(ino)
            .ok()
            .and_then(|i| self.index.get(i))
            .copied()?;
        let at = usize::try_from(at).ok()?.checked_sub(1)?;
        self.list.get_mut(at)
    }
}

fn info_mut(infos: &mut Infos, ino: u64) -> Option<&mut Info> {
    infos.get_mut(ino)
}

/// Passes 4 to 6 over the remembered entries: targets in use and of the right type,
/// reachability from the root, directories named once with the right parent, orphans,
/// link counts.
fn connectivity(
    sb: &tet_core::cetrafs::Superblock,
    in_use: &Bits,
    infos: &mut Infos,
    entries: &[Entry],
    sink: &mut dyn Sink<Finding>,
) {
    let root = sb.root_inode();
    let inode_lba = |ino: u64| sb.raw().inode_table_start.get().saturating_add(ino);
    match infos.get_mut(root).map(|r| *r) {
        Some(r) if r.kind == Some(FileType::Directory) && r.parent == root => {}
        _ => sink.report(&Finding::new(
            Code::RootInode,
            err(
                ErrorKind::Invalid,
                "root inode (inode 1)",
                inode_lba(root),
                0,
            ),
        )),
    }
    // The entry a directory keeps when several name it: the one in the directory its
    // `parent` names, else the first; every other is the extra link.
    let mut keeper: BTreeMap<u64, usize> = BTreeMap::new();
    for (k, e) in entries.iter().enumerate() {
        if e.ftype != FileType::Directory || e.target == root {
            continue;
        }
        let Some(t) = info_mut(infos, e.target).map(|t| *t) else {
            continue;
        };
        if t.kind != Some(FileType::Directory) {
            continue;
        }
        match keeper.get(&e.target).copied() {
            None => {
                keeper.insert(e.target, k);
            }
            Some(prev) => {
                let prev_right = entries.get(prev).is_some_and(|p| p.dir == t.parent);
                if !prev_right && e.dir == t.parent {
                    keeper.insert(e.target, k);
                }
            }
        }
    }
    // Entries that count: the target is in use and parsed, and the type agrees.
    let mut live: Vec<bool> = Vec::new();
    live.resize(entries.len(), false);
    for (k, e) in entries.iter().enumerate() {
        let at_name = (e.lba, usize::from(e.off));
        if e.target == 0 || !in_use.get(e.target) {
            sink.report(
                &Finding::new(
                    Code::DirentFree,
                    err(
                        ErrorKind::Mismatch {
                            expected: 1,
                            found: 0,
                        },
                        "dirent.inode (not in use)",
                        at_name.0,
                        at_name.1,
                    ),
                )
                .of_inode(e.dir),
            );
            continue;
        }
        let Some(t) = info_mut(infos, e.target) else {
            continue; // in use but unreadable: reported by pass 3
        };
        if t.kind != Some(e.ftype) {
            sink.report(
                &Finding::new(
                    Code::DirentType,
                    err(
                        ErrorKind::Mismatch {
                            expected: t.kind.map_or(0, |k| k.code()).into(),
                            found: e.ftype.code().into(),
                        },
                        "dirent.file_type",
                        at_name.0,
                        at_name.1.saturating_add(10),
                    ),
                )
                .of_inode(e.dir),
            );
            continue;
        }
        t.refs = t.refs.saturating_add(1);
        let is_dir = t.kind == Some(FileType::Directory);
        let parent = t.parent;
        if let Some(l) = live.get_mut(k) {
            *l = true;
        }
        if is_dir {
            if let Some(d) = info_mut(infos, e.dir) {
                d.subdirs = d.subdirs.saturating_add(1);
            }
            if keeper.get(&e.target) != Some(&k) || e.target == root {
                sink.report(
                    &Finding::new(
                        Code::DirLinked,
                        err(
                            ErrorKind::Invalid,
                            "dirent.inode (a directory named twice)",
                            at_name.0,
                            at_name.1,
                        ),
                    )
                    .of_inode(e.target),
                );
            } else if parent != e.dir {
                sink.report(
                    &Finding::new(
                        Code::DirParent,
                        err(
                            ErrorKind::Mismatch {
                                expected: e.dir,
                                found: parent,
                            },
                            "inode.parent",
                            inode_lba(e.target),
                            88,
                        ),
                    )
                    .of_inode(e.target),
                );
            }
        }
    }
    // Reachability: breadth-first from the root over live entries. Entries are grouped
    // by directory in ascending inode order (pass 3 walked inodes in order).
    let children = |dir: u64| {
        let lo = entries.partition_point(|e| e.dir < dir);
        let hi = entries.partition_point(|e| e.dir <= dir);
        (lo, hi)
    };
    let mut queue: Vec<u64> = Vec::new();
    if let Some(r) = info_mut(infos, root) {
        r.reached = true;
        queue.push(root);
    }
    let mut head = 0usize;
    while let Some(dir) = queue.get(head).copied() {
        head = head.saturating_add(1);
        let (lo, hi) = children(dir);
        for k in lo..hi {
            let (Some(e), Some(true)) = (entries.get(k), live.get(k).copied()) else {
                continue;
            };
            if let Some(t) = info_mut(infos, e.target) {
                if !t.reached {
                    t.reached = true;
                    if t.kind == Some(FileType::Directory) {
                        queue.push(e.target);
                    }
                }
            }
        }
    }
    // Orphans: the tops of unreachable subtrees (named by no live entry) are reported,
    // and what hangs below them is marked so it is not reported again; what remains
    // unreached after that is a cycle of directories, each reported.
    let tops: Vec<u64> = infos
        .list
        .iter()
        .filter(|i| !i.reached && i.refs == 0)
        .map(|i| i.ino)
        .collect();
    let mut below: Vec<u64> = Vec::new();
    for top in &tops {
        report_orphan(*top, sb, sink);
        below.clear();
        below.push(*top);
        let mut head = 0usize;
        while let Some(dir) = below.get(head).copied() {
            head = head.saturating_add(1);
            if let Some(t) = info_mut(infos, dir) {
                if t.reached {
                    continue;
                }
                t.reached = true;
                if t.kind != Some(FileType::Directory) {
                    continue;
                }
            }
            let (lo, hi) = children(dir);
            for k in lo..hi {
                if let (Some(e), Some(true)) = (entries.get(k), live.get(k).copied()) {
                    below.push(e.target);
                }
            }
        }
    }
    for i in infos.list.iter() {
        if !i.reached {
            report_orphan(i.ino, sb, sink);
        }
        let expected = if i.kind == Some(FileType::Directory) {
            i.subdirs.saturating_add(2)
        } else {
            i.refs
        };
        if i.nlink != expected {
            sink.report(
                &Finding::new(
                    Code::LinkCount,
                    err(
                        ErrorKind::Mismatch {
                            expected: expected.into(),
                            found: i.nlink.into(),
                        },
                        "inode.nlink",
                        inode_lba(i.ino),
                        28,
                    ),
                )
                .of_inode(i.ino),
            );
        }
    }
}

fn report_orphan(ino: u64, sb: &tet_core::cetrafs::Superblock, sink: &mut dyn Sink<Finding>) {
    sink.report(
        &Finding::new(
            Code::Orphan,
            err(
                ErrorKind::Invalid,
                "inode (in use, not reachable from the root)",
                sb.raw().inode_table_start.get().saturating_add(ino),
                0,
            ),
        )
        .of_inode(ino),
    );
}

// The sizes the memory statement in the module docs and docs/cetrafs.md counts on.
const _: () = assert!(core::mem::size_of::<Info>() == 32);
const _: () = assert!(core::mem::size_of::<Entry>() == 32);
