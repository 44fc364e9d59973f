//! Checking an image: the finding codes of `docs/cetrafs.md` section 13, and every check
//! that needs no memory beyond the caller's [`Buffers`]: each structure on its own, the
//! extent tree rules, directory blocks against their directory, bitmap padding, cached
//! free counts against the bitmaps, registry liveness and pending-free placement.
//!
//! [`verify`] runs all of them, which is what a bootloader or firmware can afford. The
//! cross-structure passes (block ownership, connectivity, link counts, journal chains)
//! need per-block and per-inode maps and live in `tet-alloc`'s `fsck`, which calls the
//! building blocks here with visitors so nothing is read twice.

use core::ops::ControlFlow;

use super::groups::{BlockGroup, NodeRow, NodeState, PendingFree, ZoneGroup};
use super::inode::Inode;
pub use super::journal::Committed;
use super::journal::{walk_journal, JournalProblem, SlotClass};
use super::scratch::{Buffers, Scratch};
use super::tree::{Extent, TreeEvent, TreeProblem};
use super::{
    bitmap_blocks, err, DirEntry, Fs, BITS_PER_BITMAP_BLOCK, DIRENTS_PER_BLOCK, SB_CLEAN,
    XATTRS_PER_BLOCK, ZG_NO_OWNER,
};
use crate::block::{Block, BlockDevice, BLOCK_SIZE_U64};
use crate::error::{Error, ErrorKind};
use crate::finding::codes;
pub use crate::finding::{Report, Severity, Sink};

codes! {
    Mount = "mount", Error, "The superblock, the region map, the features or the group tables fail the mount checks (sections 2-4, 11).";
    Checksum = "checksum", Error, "A stored CRC-32C differs from the one computed over its structure.";
    Magic = "magic", Error, "A structure's magic is wrong (for an inode marked in use: the block is not an inode).";
    ReadFailed = "read-failed", Error, "A block could not be read (the device is shorter than the image, or failed).";
    RegionHeader = "region-header", Error, "A block group region header disagrees with its descriptor.";
    RegistryRow = "registry-row", Error, "A node registry row breaks a field rule (row, node_id, state, journal_start).";
    PendingEntry = "pending-entry", Error, "A pending-free entry breaks a field rule (count, or a range outside every data area).";
    JournalFlag = "journal-flag", Error, "A journal flag block breaks a field rule (state, row).";
    JournalSlot = "journal-slot", Error, "A journal slot header breaks a field rule (flags, txn_id, txn_index, target_lba).";
    Inode = "inode", Error, "An inode marked in use breaks a field rule (ino, flags, mode, nlink, size, extent root).";
    ExtentTree = "extent-tree", Error, "An extent tree block or an extent breaks a field rule (header, tail, length, a block outside the data areas).";
    DirBlock = "dir-block", Error, "A directory block breaks a field rule (entry fields, names, padding).";
    XattrBlock = "xattr-block", Error, "An xattr block breaks a field rule (key, value length, padding).";
    BitmapPadding = "bitmap-padding", Error, "A bitmap padding bit, or the inode bitmap's bit 0, is clear.";
    JournalTxn = "journal-txn", Error, "Slots of one transaction disagree (txn_slots, txn_index order, F_COMMIT before the last slot) or a txn_id is used twice.";
    JournalPayload = "journal-payload", Error, "A slot of a transaction whose last slot carries F_COMMIT has a payload that fails payload_checksum.";
    JournalReplay = "journal-replay", Warning, "A committed transaction in a dirty journal is not applied yet: the image needs journal replay (`tet-host replay IMAGE`, or repair).";
    JournalConflict = "journal-conflict", Error, "A committed slot's target matches neither its pre-change nor its post-change checksum, even after the transactions before it.";
    CleanWithReplay = "clean-with-replay", Warning, "The superblock says SB_CLEAN but a journal holds transactions that need replay: an offline repair or replay was cut short (a mounted node clears SB_CLEAN first). `tet-host replay IMAGE`, or repair again, finishes it.";
    NodeDuplicate = "node-duplicate", Error, "Two registry rows carry the same node_id.";
    ZoneOwner = "zone-owner", Error, "A zone group is owned by a free registry row or by a node that has LEFT.";
    ZoneOwnerFenced = "zone-owner-fenced", Warning, "A zone group is owned by a FENCED node: its ownership awaits recovery.";
    JournalUnowned = "journal-unowned", Error, "The journal of a free registry row, or of a node that has LEFT, holds transactions that need replay.";
    PendingZone = "pending-zone", Error, "A pending-free entry frees blocks outside its own zone group, or across two block groups.";
    PendingDuplicate = "pending-duplicate", Error, "Two pending-free entries free the same block.";
    PendingInUse = "pending-in-use", Error, "A block waiting in a pending-free queue is also owned by a file.";
    InodeUnmarked = "inode-unmarked", Error, "A valid inode (magic, number, checksum and field rules) has its inode bitmap bit clear.";
    BlockShared = "block-shared", Error, "A block is owned twice (by two files, or twice by one file's tree and data).";
    ExtentOverlap = "extent-overlap", Error, "Two extents of one file map the same logical block.";
    IndexLogical = "index-logical", Error, "An index entry's logical is not the lowest logical block its subtree maps.";
    IndexRange = "index-range", Error, "A subtree maps a block below its index entry's logical, or at or above the next entry's.";
    InodeBlocks = "inode-blocks", Error, "An inode's blocks differs from the sum of its extent lengths.";
    DirHole = "dir-hole", Error, "A directory has a hole or an uninitialized extent below its size.";
    DirSize = "dir-size", Error, "A directory's size is not its mapped block count times 4096.";
    DirentFree = "dirent-free-inode", Error, "A directory entry names an inode that is not in use.";
    DirentDuplicate = "dirent-duplicate", Error, "A name appears twice in one directory.";
    DirentType = "dirent-type", Error, "A directory entry's file_type disagrees with its inode's mode.";
    XattrDuplicate = "xattr-duplicate", Error, "A key appears twice in one xattr block.";
    RootInode = "root-inode", Error, "Inode 1 is not an in-use directory whose parent is itself.";
    Orphan = "orphan", Error, "An inode in use is not reachable from the root directory.";
    DirLinked = "dir-linked", Error, "A directory is named by more than one entry (a directory hard link, or a loop).";
    DirParent = "dir-parent", Error, "A directory's parent differs from the directory whose entry names it.";
    LinkCount = "link-count", Error, "An inode's nlink differs from the references counted (files: entries naming it; directories: 2 + subdirectories).";
    BlockLeaked = "block-leaked", Error, "Data blocks are marked used in the bitmap but no file, tree or queue owns them.";
    BlockUnmarked = "block-unmarked", Error, "Data blocks owned by a file, tree or queue are marked free in the bitmap.";
    GroupFreeCount = "group-free-count", Error, "A block group's free_data_blocks differs from the clear bits of its data bitmap.";
    ZoneFreeCount = "zone-free-count", Error, "A zone group's free_data_blocks differs from the sum over its block groups.";
    FreeCountStale = "free-count-stale", Warning, "A zone group owned by a node whose registry row is ACTIVE or FENCED (a writer that crashed, or one writing now) has a free count behind its bitmaps, as a cut after a transaction leaves it: `tet-host replay IMAGE` recovers a crashed writer and sets them.";
    SuperblockCopy = "superblock-copy", Warning, "A superblock copy (COMPAT_SB_COPIES, section 3.1) cannot be read, fails its checks, or differs from the superblock in use: the image depends on fewer copies than it has (`tet-host repair` rewrites it).";
    CheckIncomplete = "check-incomplete", Error, "A pass could not run (its memory would exceed the budget, or the image did not mount); findings are missing.";
}

/// One problem found in an image.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Finding {
    /// The rule broken.
    pub code: Code,
    /// Where, which field, and the values involved.
    pub error: Error,
    /// The inode concerned, if any.
    pub ino: Option<u64>,
}

impl Finding {
    /// A finding with no inode attached.
    pub fn new(code: Code, error: Error) -> Self {
        Finding {
            code,
            error,
            ino: None,
        }
    }

    /// A finding for an error raised while checking a structure: checksum, magic and
    /// read errors get their own codes, anything else the structure's.
    pub fn structural(structure: Code, error: Error) -> Self {
        let code = match error.kind {
            ErrorKind::ChecksumMismatch { .. } => Code::Checksum,
            ErrorKind::BadMagic { .. } => Code::Magic,
            ErrorKind::Io | ErrorKind::PastEnd { .. } | ErrorKind::ShortDevice { .. } => {
                Code::ReadFailed
            }
            ErrorKind::Truncated { .. } if structure != Code::Mount => Code::ReadFailed,
            _ => structure,
        };
        Finding::new(code, error)
    }

    /// Attaches an inode.
    pub fn of_inode(mut self, ino: u64) -> Self {
        self.ino = Some(ino);
        self
    }

    /// The code's severity.
    pub fn severity(&self) -> Severity {
        self.code.severity()
    }
}

impl Report for Finding {
    fn code_name(&self) -> &'static str {
        self.code.as_str()
    }
    fn severity(&self) -> Severity {
        self.code.severity()
    }
    fn error(&self) -> &Error {
        &self.error
    }
}

/// Mounts `dev` for a check: the full mount check of [`Fs::open`], except that a device
/// shorter than `total_blocks` mounts too ([`Fs::open_shortened`]). That is reported
/// first, as a `read-failed` finding about `superblock.total_blocks` (byte 32) that
/// gives both lengths; the rest of the check then runs, and each block it needs past
/// the device's end is a `read-failed` finding of its own.
pub fn mount<D: BlockDevice>(
    dev: D,
    buf: &mut Block,
    sink: &mut dyn Sink<Finding>,
) -> Result<Fs<D>, Error> {
    let fs = Fs::<D>::mount_as(dev, buf, true)?;
    // Before the group tables: a cut through them is reported after what caused it.
    if let Some(e) = fs.shortened() {
        sink.report(&Finding::new(Code::ReadFailed, e));
    }
    fs.check_group_tables(buf)?;
    Ok(fs)
}

/// Whether bit `i` of a bitmap block is set (LSB first).
pub fn bit(block: &Block, i: u64) -> bool {
    usize::try_from(i / 8)
        .ok()
        .and_then(|b| block.get(b))
        .is_some_and(|b| b & (1u8 << (i % 8)) != 0)
}

/// Extents of `len` logical blocks start at `start`; the one from the inode passed to
/// [`check_inode`] and its directory blocks are reported to the visitor.
#[allow(unused_variables)]
pub trait InodeVisitor {
    /// A valid extent tree block of `ino`.
    fn tree_block(&mut self, ino: u64, lba: u64) {}
    /// A valid extent of `ino`, found at byte `at` of block `lba`.
    fn extent(&mut self, ino: u64, e: &Extent, lba: u64, at: usize) {}
    /// A valid entry of directory `dir`, at byte `off` of directory block `lba`.
    fn dir_entry(&mut self, dir: u64, e: &DirEntry, lba: u64, off: usize) {}
    /// The valid xattr block of `ino`.
    fn xattr_block(&mut self, ino: u64, lba: u64) {}
}

/// A visitor that wants nothing.
pub struct NoVisitor;
impl InodeVisitor for NoVisitor {}

/// Checks one inode marked in use and everything it owns alone: the inode, every extent
/// tree block and extent with the index rules, `blocks` against the extents, for a
/// directory every directory block, its size and holes, and the xattr block with
/// unique keys. Returns the inode when it parsed. Reads at most the tree (section 12)
/// plus, for a directory, `total_blocks` blocks.
pub fn check_inode<D: BlockDevice>(
    fs: &Fs<D>,
    ino: u64,
    bufs: &mut Buffers,
    sink: &mut dyn Sink<Finding>,
    v: &mut dyn InodeVisitor,
) -> Option<Inode> {
    let inode = match fs.inode(ino, &mut bufs.data) {
        Ok(i) => i,
        Err(e) => {
            sink.report(&Finding::structural(Code::Inode, e).of_inode(ino));
            return None;
        }
    };
    check_parsed_inode(fs, inode, bufs, sink, v);
    Some(inode)
}

/// [`check_inode`] of an inode already read and parsed (a caller that had to read it
/// anyway, to learn whether it is valid, does not read it twice).
pub fn check_parsed_inode<D: BlockDevice>(
    fs: &Fs<D>,
    inode: Inode,
    bufs: &mut Buffers,
    sink: &mut dyn Sink<Finding>,
    v: &mut dyn InodeVisitor,
) {
    let ino = inode.ino();
    let is_dir = inode.is_dir();
    let dir_blocks = inode.size().div_ceil(BLOCK_SIZE_U64);
    let budget = fs.superblock().total_blocks();
    let mut reads: u64 = 0;
    let mut mapped: u64 = 0;
    let mut past_size = false;
    let mut uninit_dir = None;
    // Whether the whole tree read: counts are compared only then (repair sets them from
    // the check, and a part it could not read is not a part that is missing).
    let mut whole = true;
    // A file's data is not read by the check, so on a device cut short its first extent
    // reaching past the end is reported here, once (a directory's blocks are read below).
    let device_end = fs.device().block_count();
    let mut past_end_reported = false;
    let data = &mut bufs.data;
    fs.walk_tree(&inode, &mut bufs.tree, |ev| match ev {
        TreeEvent::Block { lba, .. } => v.tree_block(ino, lba),
        TreeEvent::Problem(p, e) => {
            whole = false;
            let code = match p {
                TreeProblem::Structure => Finding::structural(Code::ExtentTree, e).code,
                TreeProblem::IndexLogical => Code::IndexLogical,
                TreeProblem::IndexRange => Code::IndexRange,
            };
            sink.report(&Finding::new(code, e).of_inode(ino));
        }
        TreeEvent::Extent { extent, lba, at } => {
            mapped = mapped.saturating_add(extent.len.into());
            v.extent(ino, &extent, lba, at);
            if !is_dir {
                let end = extent.physical.saturating_add(extent.len.into());
                if !extent.uninit && !past_end_reported && end > device_end {
                    past_end_reported = true;
                    let block = extent.physical.max(device_end);
                    sink.report(
                        &Finding::new(
                            Code::ReadFailed,
                            err(
                                ErrorKind::PastEnd {
                                    block,
                                    blocks: device_end,
                                },
                                "extent.physical (file data past the device's end)",
                                lba,
                                at.saturating_add(8),
                            ),
                        )
                        .of_inode(ino),
                    );
                }
                return;
            }
            if extent.uninit && uninit_dir.is_none() {
                uninit_dir = Some(err(
                    ErrorKind::Invalid,
                    "extent.len (uninitialized directory extent)",
                    lba,
                    at.saturating_add(4),
                ));
            }
            for b in 0..u64::from(extent.len) {
                if u64::from(extent.logical).saturating_add(b) >= dir_blocks {
                    past_size = true;
                    break;
                }
                if extent.uninit {
                    continue;
                }
                reads = reads.saturating_add(1);
                if reads > budget {
                    return;
                }
                let block = extent.physical.saturating_add(b);
                if let Err(e) = fs.device().read_block(block, data) {
                    sink.report(&Finding::structural(Code::DirBlock, e).of_inode(ino));
                    continue;
                }
                // The block's own rules, then each entry on its own: one bad entry or a
                // bad tail hides none of the others (repair keeps them, section 14).
                if let Err(e) = Fs::<D>::dir_block_frame(data, block) {
                    sink.report(&Finding::structural(Code::DirBlock, e).of_inode(ino));
                }
                for k in 0..DIRENTS_PER_BLOCK {
                    let off = k.saturating_mul(266);
                    match fs.dir_entry_at(data, block, off) {
                        Ok(Some(e)) => v.dir_entry(ino, &e, block, off),
                        Ok(None) => {}
                        Err(e) => {
                            sink.report(&Finding::structural(Code::DirBlock, e).of_inode(ino))
                        }
                    }
                }
            }
        }
    });
    if reads > budget {
        sink.report(
            &Finding::new(
                Code::DirBlock,
                err(
                    ErrorKind::Exhausted { budget },
                    "directory walk block budget",
                    inode.lba,
                    104,
                ),
            )
            .of_inode(ino),
        );
    }
    if whole && mapped != inode.raw.blocks.get() {
        sink.report(
            &Finding::new(
                Code::InodeBlocks,
                err(
                    ErrorKind::Mismatch {
                        expected: mapped,
                        found: inode.raw.blocks.get(),
                    },
                    "inode.blocks",
                    inode.lba,
                    40,
                ),
            )
            .of_inode(ino),
        );
    }
    if is_dir {
        if let Some(e) = uninit_dir {
            sink.report(&Finding::new(Code::DirHole, e).of_inode(ino));
        }
        if whole && (mapped != dir_blocks || inode.size() % BLOCK_SIZE_U64 != 0) {
            sink.report(
                &Finding::new(
                    Code::DirSize,
                    err(
                        ErrorKind::Mismatch {
                            expected: mapped.saturating_mul(BLOCK_SIZE_U64),
                            found: inode.size(),
                        },
                        "inode.size (directory)",
                        inode.lba,
                        32,
                    ),
                )
                .of_inode(ino),
            );
        } else if past_size {
            // As many blocks mapped as the size needs, but some beyond it: extents do
            // not overlap (the ownership pass checks), so some block below is a hole.
            sink.report(
                &Finding::new(
                    Code::DirHole,
                    err(
                        ErrorKind::Missing,
                        "directory extents (a block below size is unmapped)",
                        inode.lba,
                        104,
                    ),
                )
                .of_inode(ino),
            );
        }
    }
    check_xattrs(fs, &inode, bufs, sink, v);
}

fn check_xattrs<D: BlockDevice>(
    fs: &Fs<D>,
    inode: &Inode,
    bufs: &mut Buffers,
    sink: &mut dyn Sink<Finding>,
    v: &mut dyn InodeVisitor,
) {
    let xb = inode.raw.xattr_block.get();
    if xb == 0 {
        return;
    }
    let mut keys = [([0u8; 64], 0usize); XATTRS_PER_BLOCK];
    let mut n = 0usize;
    // The repeated entry and the earlier one with the same key.
    let mut dup: Option<(usize, usize)> = None;
    let r = fs.xattrs(inode, bufs, |x| {
        let k = x.key();
        let seen = keys.get(..n).unwrap_or(&[]);
        if dup.is_none() {
            dup = seen
                .iter()
                .position(|(b, l)| b.get(..*l).is_some_and(|p| p == k))
                .map(|first| (n, first));
        }
        if let Some(slot) = keys.get_mut(n) {
            slot.1 = crate::arith::copy_prefix(&mut slot.0, k);
            n = n.saturating_add(1);
        }
        ControlFlow::Continue(())
    });
    match r {
        Err(e) => sink.report(&Finding::structural(Code::XattrBlock, e).of_inode(inode.ino)),
        Ok(()) => {
            v.xattr_block(inode.ino, xb);
            if let Some((i, first)) = dup {
                sink.report(
                    &Finding::new(
                        Code::XattrDuplicate,
                        err(
                            ErrorKind::Duplicate {
                                first: super::at(xb, first.saturating_mul(322)),
                            },
                            "xattr.key (repeated)",
                            xb,
                            i.saturating_mul(322),
                        ),
                    )
                    .of_inode(inode.ino),
                );
            }
        }
    }
}

/// Receives each block group's data bitmap blocks as they are read.
pub type BitmapVisitor<'a> = &'a mut dyn FnMut(&BlockGroup, u64, &Block);

/// Whether zone group `zg` is owned by a registry row that is `ACTIVE` or `FENCED`.
fn owner_is_writer<D: BlockDevice>(fs: &Fs<D>, zg: &ZoneGroup, buf: &mut Block) -> bool {
    let owner = zg.hot.owner_node_id.get();
    owner != ZG_NO_OWNER
        && fs.node_row(owner.into(), buf).is_ok_and(|n| {
            n.is_some_and(|n| matches!(n.state(), NodeState::Active | NodeState::Fenced))
        })
}

/// Region headers, data bitmap padding, each group's `free_data_blocks` against its
/// bitmap, and each zone group's against the sum of its groups. `on_bitmap(bg, k,
/// block)` sees bitmap block `k` of every group (the fsck compares it with ownership).
pub fn check_groups<D: BlockDevice>(
    fs: &Fs<D>,
    bufs: &mut Buffers,
    sink: &mut dyn Sink<Finding>,
    on_bitmap: BitmapVisitor<'_>,
) {
    let sb = fs.superblock();
    for z in 0..sb.zone_group_count() {
        let zg = match fs.zone_group(z, &mut bufs.tree) {
            Ok(zg) => zg,
            Err(e) => {
                sink.report(&Finding::structural(Code::Mount, e));
                continue;
            }
        };
        let first = zg.cold.first_bg_id.get();
        let end = first.saturating_add(zg.cold.bg_count.get());
        // A writer's counts trail its bitmaps between a transaction and its count
        // updates (docs/cetrafs.md section 15, step 6): for a zone group an ACTIVE or
        // FENCED row owns, that is the crash recovery sets right, not damage.
        let (group_code, zone_code) = if owner_is_writer(fs, &zg, &mut bufs.data) {
            (Code::FreeCountStale, Code::FreeCountStale)
        } else {
            (Code::GroupFreeCount, Code::ZoneFreeCount)
        };
        let mut free_sum: u64 = 0;
        for bi in first..end {
            let bg = match fs.block_group(bi, &mut bufs.tree) {
                Ok(bg) => bg,
                Err(e) => {
                    sink.report(&Finding::structural(Code::Mount, e));
                    continue;
                }
            };
            free_sum = free_sum.saturating_add(bg.raw.free_data_blocks.get());
            let start = bg.raw.start_block.get();
            let r = fs
                .device()
                .read_block(start, &mut bufs.data)
                .and_then(|()| bg.check_region_header(&bufs.data));
            if let Err(e) = r {
                sink.report(&Finding::structural(Code::RegionHeader, e));
            }
            let data = bg.raw.data_block_count.get();
            let dbm = bitmap_blocks(bg.raw.length_blocks.get());
            let mut used: u64 = 0;
            let mut padding_reported = false;
            // A bitmap block that could not be read leaves the free count unknown.
            let mut unread = false;
            for k in 0..dbm {
                let lba = start.saturating_add(1).saturating_add(k);
                if let Err(e) = fs.device().read_block(lba, &mut bufs.data) {
                    sink.report(&Finding::structural(Code::ReadFailed, e));
                    unread = true;
                    continue;
                }
                let base = k.saturating_mul(BITS_PER_BITMAP_BLOCK);
                let live = data.saturating_sub(base).min(BITS_PER_BITMAP_BLOCK);
                used = used.saturating_add(count_ones(&bufs.data, live));
                if !padding_reported {
                    if let Some(i) = (live..BITS_PER_BITMAP_BLOCK).find(|i| !bit(&bufs.data, *i)) {
                        padding_reported = true;
                        sink.report(&Finding::new(
                            Code::BitmapPadding,
                            err(
                                padding_bit(i),
                                "data bitmap padding bit clear",
                                lba,
                                usize::try_from(i / 8).unwrap_or(0),
                            ),
                        ));
                    }
                }
                on_bitmap(&bg, k, &bufs.data);
            }
            let free = data.saturating_sub(used);
            if !unread && free != bg.raw.free_data_blocks.get() {
                sink.report(&Finding::new(
                    group_code,
                    err(
                        ErrorKind::Mismatch {
                            expected: free,
                            found: bg.raw.free_data_blocks.get(),
                        },
                        "block_group.free_data_blocks",
                        bg.lba,
                        64,
                    ),
                ));
            }
        }
        if free_sum != zg.hot.free_data_blocks.get() {
            sink.report(&Finding::new(
                zone_code,
                err(
                    ErrorKind::Mismatch {
                        expected: free_sum,
                        found: zg.hot.free_data_blocks.get(),
                    },
                    "zone_group.free_data_blocks",
                    zg.lba,
                    16,
                ),
            ));
        }
    }
}

/// The kind for bitmap bit `i`, which must be set, found clear (reported at its byte).
fn padding_bit(i: u64) -> ErrorKind {
    ErrorKind::MissingFlags {
        bits: 1u64 << (i % 8),
    }
}

/// Set bits among the first `n` bits of a bitmap block (eight bytes at a time).
pub fn count_ones(block: &Block, n: u64) -> u64 {
    let whole = usize::try_from(n / 64).unwrap_or(0).saturating_mul(8);
    let head = block.get(..whole).unwrap_or(&[]);
    let mut c: u64 = head
        .chunks_exact(8)
        .map(|w| u64::from(u64::from_le_bytes(w.try_into().unwrap_or([0; 8])).count_ones()))
        .sum();
    for i in (n / 64).saturating_mul(64)..n {
        if bit(block, i) {
            c = c.saturating_add(1);
        }
    }
    c
}

/// The inode bitmap's bit 0 and padding bits. `on_block(k, block)` sees every bitmap
/// block (the checkers find the inodes in use there).
pub fn check_inode_bitmap<D: BlockDevice>(
    fs: &Fs<D>,
    buf: &mut Block,
    sink: &mut dyn Sink<Finding>,
    on_block: &mut dyn FnMut(u64, &Block),
) {
    let sb = fs.superblock();
    let start = sb.raw().inode_bitmap_start.get();
    let count = sb.inode_count();
    for k in 0..sb.raw().inode_bitmap_blocks.get() {
        let lba = start.saturating_add(k);
        if let Err(e) = fs.device().read_block(lba, buf) {
            sink.report(&Finding::structural(Code::ReadFailed, e));
            continue;
        }
        if k == 0 && !bit(buf, 0) {
            sink.report(&Finding::new(
                Code::BitmapPadding,
                err(
                    ErrorKind::MissingFlags { bits: 1 },
                    "inode bitmap bit 0 (inode 0) clear",
                    lba,
                    0,
                ),
            ));
        }
        let base = k.saturating_mul(BITS_PER_BITMAP_BLOCK);
        let live = count.saturating_sub(base).min(BITS_PER_BITMAP_BLOCK);
        if let Some(i) = (live..BITS_PER_BITMAP_BLOCK).find(|i| !bit(buf, *i)) {
            sink.report(&Finding::new(
                Code::BitmapPadding,
                err(
                    padding_bit(i),
                    "inode bitmap padding bit clear",
                    lba,
                    usize::try_from(i / 8).unwrap_or(0),
                ),
            ));
        }
        on_block(k, buf);
    }
}

/// Every registry row, and each zone group's owner against the registry (a free row or
/// a node that has LEFT may not own a group; a FENCED owner awaits recovery).
/// `on_row(row, node)` sees every row that parsed.
pub fn check_registry<D: BlockDevice>(
    fs: &Fs<D>,
    buf: &mut Block,
    sink: &mut dyn Sink<Finding>,
    on_row: &mut dyn FnMut(u32, Option<NodeRow>),
) {
    let sb = fs.superblock();
    // A registry block that cannot be read is reported once, not once per row in it.
    let mut unread: Option<u64> = None;
    for row in 0..sb.node_capacity() {
        let block = u64::from(row) / super::ROWS_PER_BLOCK;
        if unread == Some(block) {
            continue;
        }
        match fs.node_row(row, buf) {
            Ok(n) => on_row(row, n),
            Err(e) => {
                let f = Finding::structural(Code::RegistryRow, e);
                if f.code == Code::ReadFailed {
                    unread = Some(block);
                }
                sink.report(&f);
            }
        }
    }
    // Rows past the node capacity, in the registry's last block, must be zero.
    let cap = u64::from(sb.node_capacity());
    let rows_total = sb
        .raw()
        .registry_blocks
        .get()
        .saturating_mul(super::ROWS_PER_BLOCK);
    if rows_total > cap {
        let last = sb
            .raw()
            .registry_start
            .get()
            .saturating_add(cap / super::ROWS_PER_BLOCK);
        if fs.device().read_block(last, buf).is_ok() {
            let from = usize::try_from(cap % super::ROWS_PER_BLOCK)
                .unwrap_or(0)
                .saturating_mul(128);
            if let Err(e) = super::zero(
                buf.get(from..).unwrap_or(&[]),
                "registry (rows past node_capacity)",
                last,
                from,
            ) {
                sink.report(&Finding::new(Code::RegistryRow, e));
            }
        }
    }
    for z in 0..sb.zone_group_count() {
        let Ok(zg) = fs.zone_group(z, buf) else {
            continue;
        };
        let owner = zg.hot.owner_node_id.get();
        if owner == ZG_NO_OWNER {
            continue;
        }
        let state = match fs.node_row(owner.into(), buf) {
            Ok(Some(n)) => Some(n.state()),
            Ok(None) => None,
            Err(_) => continue,
        };
        let code = match state {
            Some(NodeState::Active) => continue,
            Some(NodeState::Fenced) => Code::ZoneOwnerFenced,
            _ => Code::ZoneOwner,
        };
        sink.report(&Finding::new(
            code,
            err(
                ErrorKind::Invalid,
                match state {
                    None => "zone_group.owner_node_id (a free registry row)",
                    Some(NodeState::Fenced) => "zone_group.owner_node_id (a FENCED node)",
                    _ => "zone_group.owner_node_id (a node that has LEFT)",
                },
                zg.lba,
                12,
            ),
        ));
    }
}

/// Every pending-free entry: its fields, and that it frees blocks of its own zone
/// group's block groups. `on_entry(z, slot, entry, lba, off)` sees every valid entry.
pub fn check_pending<D: BlockDevice>(
    fs: &Fs<D>,
    buf: &mut Block,
    sink: &mut dyn Sink<Finding>,
    on_entry: &mut dyn FnMut(u32, PendingFree, u64, usize),
) {
    let sb = fs.superblock();
    let per_zg = sb.pending_blocks_per_zg();
    for z in 0..sb.zone_group_count() {
        let (first, count) = match fs.zone_group(z, buf) {
            Ok(zg) => (zg.cold.first_bg_id.get(), zg.cold.bg_count.get()),
            Err(_) => continue,
        };
        let lo = sb.bg_span(first).0;
        let last = first.saturating_add(count).saturating_sub(1);
        let (ls, ll) = sb.bg_span(last);
        let hi = ls.saturating_add(ll);
        // A queue block that cannot be read is reported once, not once per entry in it.
        let mut unread: Option<u64> = None;
        for slot in 0..sb.raw().pending_slots_per_zg.get() {
            let lba = sb
                .raw()
                .pending_start
                .get()
                .saturating_add(u64::from(z).saturating_mul(per_zg))
                .saturating_add(u64::from(slot) / super::PENDING_PER_BLOCK);
            if unread == Some(lba) {
                continue;
            }
            let off = usize::try_from(u64::from(slot) % super::PENDING_PER_BLOCK)
                .unwrap_or(0)
                .saturating_mul(16);
            match fs.pending_free(z, slot, buf) {
                Ok(None) => {}
                Ok(Some(e)) => {
                    let end = e.lba.saturating_add(e.count.into());
                    if e.lba < lo || end > hi {
                        sink.report(&Finding::new(
                            Code::PendingZone,
                            err(
                                ErrorKind::OutOfRange {
                                    value: e.lba,
                                    max: hi,
                                },
                                "pending_free.lba (outside its zone group)",
                                lba,
                                off,
                            ),
                        ));
                        continue;
                    }
                    on_entry(z, e, lba, off);
                }
                Err(e) => {
                    let f = Finding::structural(Code::PendingEntry, e);
                    if f.code == Code::ReadFailed {
                        unread = Some(lba);
                    }
                    // A range outside every data area is reported as a field error.
                    sink.report(&f);
                }
            }
        }
    }
}

/// The journal of registry row `row`: its flag block, every slot header, and for a
/// dirty journal its transaction boundaries and the payloads of committed transactions.
/// `on_committed` sees every slot of every committed transaction, in slot order; returns
/// whether the journal is dirty (`None` when the flag block is bad). A transaction cut
/// short (no `F_COMMIT`, or interrupted by an empty slot or the journal's end) is a torn
/// write and ignored. The journal overlay gathers committed slots with the same walk.
pub fn check_journal<D: BlockDevice, S: Sink<Finding> + ?Sized>(
    fs: &Fs<D>,
    row: u32,
    bufs: &mut impl Scratch,
    sink: &mut S,
    on_committed: &mut impl FnMut(Committed),
) -> Option<bool> {
    let mut report = |p: JournalProblem, e: Error| {
        sink.report(&match p {
            JournalProblem::Flag => Finding::structural(Code::JournalFlag, e),
            JournalProblem::Slot => Finding::structural(Code::JournalSlot, e),
            JournalProblem::Txn => Finding::new(Code::JournalTxn, e),
            JournalProblem::Payload => Finding::new(Code::JournalPayload, e),
        });
    };
    walk_journal(fs, row, bufs, &mut report, on_committed, true)
}

/// Reports a classified committed slot that needs replay (a warning: replay will fix
/// it) or conflicts (an error).
pub fn report_replay(c: &Committed, sink: &mut dyn Sink<Finding>) {
    let f = match c.class {
        Some(SlotClass::NeedsReplay) => Finding::new(
            Code::JournalReplay,
            err(
                ErrorKind::Mismatch {
                    expected: c.post,
                    found: c.pre,
                },
                "slot (committed, not yet applied to target_lba)",
                c.lba,
                16,
            ),
        ),
        Some(SlotClass::Conflicting) => Finding::new(
            Code::JournalConflict,
            err(
                ErrorKind::Mismatch {
                    expected: c.pre,
                    found: c.post,
                },
                "slot.pre_checksum (the target is at neither this slot's pre- nor post-change version)",
                c.lba,
                32,
            ),
        ),
        _ => return,
    };
    sink.report(&f);
}

/// What [`verify`] found, counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Summary {
    /// Error-severity findings.
    pub errors: u64,
    /// Warning-severity findings.
    pub warnings: u64,
    /// Inodes marked in use and checked.
    pub inodes: u64,
}

/// Counts findings on their way to another sink.
pub struct Counting<'s> {
    inner: &'s mut dyn Sink<Finding>,
    /// The counts so far.
    pub summary: Summary,
}

impl<'s> Counting<'s> {
    /// Wraps `inner`.
    pub fn new(inner: &'s mut dyn Sink<Finding>) -> Self {
        Counting {
            inner,
            summary: Summary::default(),
        }
    }
}

impl Sink<Finding> for Counting<'_> {
    fn report(&mut self, f: &Finding) {
        match f.severity() {
            Severity::Error => self.summary.errors = self.summary.errors.saturating_add(1),
            Severity::Warning => self.summary.warnings = self.summary.warnings.saturating_add(1),
        }
        self.inner.report(f);
    }
}

/// The allocation-free check of a mounted image: everything in this module, journals
/// classified by the chain rule when `table` holds every committed slot of the dirty
/// journals (a `check-incomplete` finding otherwise). It does not build the ownership
/// or connectivity maps (the `tet-alloc` fsck does). Reads every metadata block once,
/// every inode marked in use, its tree, its directory blocks and its xattr block; two
/// blocks of memory (`bufs`), one bitmap block (`bitmap`) and the caller's table. An
/// image cut short is checked when `fs` comes from [`mount`], which reports the cut.
pub fn verify<D: BlockDevice>(
    fs: &Fs<D>,
    bufs: &mut Buffers,
    bitmap: &mut Block,
    table: &mut [Committed],
    sink: &mut dyn Sink<Finding>,
) -> Summary {
    let mut sink = Counting::new(sink);
    let sb = *fs.superblock();
    // One walk of the journals both checks them and gathers the committed slots.
    let mut needed = 0usize;
    for row in 0..sb.node_capacity() {
        let _ = check_journal(fs, row, bufs, &mut sink, &mut |c| {
            if c.dirty {
                if let Some(t) = table.get_mut(needed) {
                    *t = c;
                }
                needed = needed.saturating_add(1);
            }
        });
    }
    let mut replay_needed = false;
    if needed > table.len() {
        sink.report(&Finding::new(
            Code::CheckIncomplete,
            Error::new(
                ErrorKind::Budget {
                    needed: crate::arith::u64_of(needed),
                    available: crate::arith::u64_of(table.len()),
                },
                "journal slot table (journals not classified)",
                0,
            ),
        ));
    } else {
        let slots = table.get_mut(..needed).unwrap_or(&mut []);
        match fs.classify_chains(slots, bitmap) {
            Ok(()) => {
                for c in slots.iter() {
                    replay_needed |= c.class == Some(SlotClass::NeedsReplay);
                    report_replay(c, &mut sink);
                }
            }
            Err(e) => sink.report(&Finding::structural(Code::JournalSlot, e)),
        }
    }
    if replay_needed && sb.raw().sb_flags.get() & SB_CLEAN != 0 {
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
    check_registry(fs, &mut bufs.data, &mut sink, &mut |_, _| {});
    check_pending(fs, &mut bufs.data, &mut sink, &mut |_, _, _, _| {});
    check_groups(fs, bufs, &mut sink, &mut |_, _, _| {});
    check_inode_bitmap(fs, bitmap, &mut sink, &mut |_, _| {});
    let ib = sb.raw().inode_bitmap_start.get();
    let mut inodes: u64 = 0;
    for k in 0..sb.raw().inode_bitmap_blocks.get() {
        if fs
            .device()
            .read_block(ib.saturating_add(k), bitmap)
            .is_err()
        {
            continue;
        }
        let base = k.saturating_mul(BITS_PER_BITMAP_BLOCK);
        let live = sb
            .inode_count()
            .saturating_sub(base)
            .min(BITS_PER_BITMAP_BLOCK);
        for i in 0..live {
            let ino = base.saturating_add(i);
            if ino == 0 || !bit(bitmap, i) {
                continue;
            }
            inodes = inodes.saturating_add(1);
            let _ = check_inode(fs, ino, bufs, &mut sink, &mut NoVisitor);
        }
    }
    let mut s = sink.summary;
    s.inodes = inodes;
    s
}
