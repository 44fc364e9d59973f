//! Passes 3 and 4 of the walk: every inode in use, its extent tree, directory blocks and
//! xattr block, each block claimed once in the ownership map; extents of one file that
//! overlap, and names repeated in one directory.

use alloc::vec::Vec;

use tet_core::arith::u64_of;
use tet_core::block::{Block, BlockDevice};
use tet_core::cetrafs::check::{check_inode_bitmap, check_parsed_inode, InodeVisitor, Sink};
use tet_core::cetrafs::{
    Buffers, Code, DirEntry, Extent, FileType, Finding, Fs, Inode, BITS_PER_BITMAP_BLOCK,
    INODE_MAGIC,
};
use tet_core::{ErrorKind, Result};

use super::maps::{live_words, Bits, Ownership};
use super::{byte_at, err, overlap_block, Entry, Info, EXTENT_SHARED};

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
        // Every block is claimed, also those after the first one owned already: while
        // a block is claimed twice, every claimant's blocks stay owned (section 14's
        // block rule). The first shared block is reported.
        let mut reported = false;
        for b in lba..lba.saturating_add(count) {
            let Some(i) = self.own.index(b) else {
                continue;
            };
            if self.own.bits.set(i) && !reported {
                reported = true;
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

/// Reports inode `ino`, valid but clear in the inode bitmap (`inode-unmarked`).
fn report_unmarked(ino: u64, bitmap: u64, sink: &mut dyn Sink<Finding>) {
    let at = bitmap.saturating_add(ino / BITS_PER_BITMAP_BLOCK);
    let byte = usize::try_from((ino % BITS_PER_BITMAP_BLOCK) / 8).unwrap_or(0);
    sink.report(
        &Finding::new(
            Code::InodeUnmarked,
            err(
                ErrorKind::Mismatch {
                    expected: 1,
                    found: 0,
                },
                "inode bitmap bit (clear for a valid inode)",
                at,
                byte,
            ),
        )
        .of_inode(ino),
    );
}

/// Inode blocks a batch reads.
const BATCH: u64 = 2048;
/// Bytes of an inode, at the start of its block.
const INODE_LEN: usize = 256;

/// The inode table read a batch at a time ([`BlockDevice::read_prefixes`]: one call per
/// [`BATCH`] inodes, which a file serves with whole runs read on several threads). A
/// batch that fails to read (a block past a cut image's end, an I/O error) or to be
/// allocated is not used: its inodes are read one at a time, each with its own error.
/// (It holds what the blocks held when it was read: the walk writes nothing.)
struct InodeBatch {
    first: u64,
    count: u64,
    /// `count` slots of [`INODE_LEN`] bytes (kept from batch to batch).
    bytes: Vec<u8>,
    /// Whether the batch read.
    read: bool,
}

impl InodeBatch {
    fn new() -> Self {
        InodeBatch {
            first: 0,
            count: 0,
            bytes: Vec::new(),
            read: false,
        }
    }

    /// Inode `ino`, as [`Fs::inode`] gives it, from the batch that holds it (read when
    /// `ino` is past the one before); `buf` is used only when the batch did not read.
    fn inode<D: BlockDevice>(&mut self, fs: &Fs<D>, ino: u64, buf: &mut Block) -> Result<Inode> {
        if ino < self.first || ino >= self.first.saturating_add(self.count) {
            self.fill(fs, ino);
        }
        let at = usize::try_from(ino.saturating_sub(self.first))
            .ok()
            .and_then(|k| k.checked_mul(INODE_LEN));
        let slot = at
            .filter(|_| self.read)
            .and_then(|at| self.bytes.get(at..at.saturating_add(INODE_LEN)));
        match slot {
            Some(bytes) => fs.inode_from(ino, bytes),
            None => fs.inode(ino, buf),
        }
    }

    /// Reads the batch from `ino`: up to [`BATCH`] inodes, to the table's end.
    fn fill<D: BlockDevice>(&mut self, fs: &Fs<D>, ino: u64) {
        let count = fs.superblock().inode_count().saturating_sub(ino).min(BATCH);
        self.first = ino;
        self.count = count.max(1);
        self.read = false;
        let len = usize::try_from(count)
            .ok()
            .and_then(|n| n.checked_mul(INODE_LEN))
            .unwrap_or(0);
        let more = len.saturating_sub(self.bytes.len());
        if len == 0 || self.bytes.try_reserve(more).is_err() {
            return;
        }
        self.bytes.resize(len, 0);
        let lba = fs
            .superblock()
            .raw()
            .inode_table_start
            .get()
            .saturating_add(ino);
        self.read = fs
            .device()
            .read_prefixes(lba, INODE_LEN, &mut self.bytes)
            .is_ok();
    }
}

/// What the inode walk found.
pub(super) struct Scanned {
    /// The inodes in use that parsed, in inode order.
    pub(super) infos: Vec<Info>,
    /// Every directory entry, grouped by directory in inode order.
    pub(super) entries: Vec<Entry>,
    /// Inodes checked.
    pub(super) inodes: u64,
    /// Whether every list could be kept whole.
    pub(super) complete: bool,
}

/// Reads the inode bitmap into `in_use` and checks every inode it marks, claiming
/// blocks in `own` (`pending`: the blocks the pending-free queues hold).
pub(super) fn inodes<D: BlockDevice>(
    fs: &Fs<D>,
    bufs: &mut Buffers,
    bitmap: &mut Block,
    in_use: &mut Bits,
    own: &mut Ownership,
    pending: &[(u64, u64)],
    sink: &mut dyn Sink<Finding>,
) -> Scanned {
    let inode_count = fs.superblock().inode_count();
    check_inode_bitmap(fs, bitmap, sink, &mut |k, block| {
        let base = k.saturating_mul(BITS_PER_BITMAP_BLOCK);
        let live = inode_count.saturating_sub(base).min(BITS_PER_BITMAP_BLOCK);
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
    let mut scan = Scan {
        own,
        pending,
        extents: Vec::new(),
        tree_blocks: Vec::new(),
        xattr: None,
        entries: &mut entries,
        names: Vec::new(),
        name_at: Vec::new(),
        oom: false,
    };
    // One pass in inode order: an inode whose bit is set is checked; one whose bit is
    // clear is read once, and when it is valid (section 8: the inodes decide) it is
    // reported, marked and checked from what was read.
    let bitmap_start = fs.superblock().raw().inode_bitmap_start.get();
    let itable = fs.superblock().raw().inode_table_start.get();
    let mut batch = InodeBatch::new();
    for ino in 1..inode_count {
        let inode = if in_use.get(ino) {
            inodes = inodes.saturating_add(1);
            // As `check_inode`, the inode taken from the batch.
            match batch.inode(fs, ino, &mut bufs.data) {
                Ok(inode) => {
                    check_parsed_inode(fs, inode, bufs, sink, &mut scan);
                    Some(inode)
                }
                Err(e) => {
                    sink.report(&Finding::structural(Code::Inode, e).of_inode(ino));
                    None
                }
            }
        } else {
            let inode = match batch.inode(fs, ino, &mut bufs.data) {
                Ok(inode) => inode,
                Err(e) => {
                    // A clear bit over a block that is not free (section 8: a free
                    // inode's block is all zero) yet says it is this inode: an inode in
                    // use that does not read. Reported, so no rebuild takes its blocks
                    // for free space and repair can reseal (or, -y, clear) it.
                    let mut blk: Block = [0; tet_core::block::BLOCK_SIZE];
                    let read = fs.device().read_block(itable.saturating_add(ino), &mut blk);
                    let says_so = read.is_ok()
                        && (blk.get(..4) == Some(&INODE_MAGIC[..])
                            || blk.get(8..16) == Some(&ino.to_le_bytes()[..]));
                    if says_so {
                        in_use.set(ino);
                        report_unmarked(ino, bitmap_start, sink);
                        sink.report(&Finding::structural(Code::Inode, e).of_inode(ino));
                        inodes = inodes.saturating_add(1);
                    }
                    continue;
                }
            };
            in_use.set(ino);
            report_unmarked(ino, bitmap_start, sink);
            inodes = inodes.saturating_add(1);
            check_parsed_inode(fs, inode, bufs, sink, &mut scan);
            Some(inode)
        };
        scan.finish_inode(ino, sink);
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
    let complete = !scan.oom;
    Scanned {
        infos,
        entries,
        inodes,
        complete,
    }
}
