//! A deterministic cetrafs 0x0006 image builder (the `mkfs` behind `tet-host mkfs` and
//! every cetrafs test), plus a journal writer for tests of replay classification.
//!
//! The same input always produces the same bytes: inodes are numbered in insertion
//! order, blocks are allocated first-fit from block group 0 upwards, nothing reads a
//! clock.
//!
//! Arithmetic here works on a geometry that `geometry()` has checked to fit an image held
//! in memory (so every block number is below `size_bytes / 4096`), which is why the
//! module allows plain operators; values that come from callers of
//! [`write_journal_txn`] use checked or saturating arithmetic.
#![allow(clippy::arithmetic_side_effects, clippy::indexing_slicing)]

use alloc::boxed::Box;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;

use tet_core::block::Block;
use tet_core::block::{BLOCK_SIZE, BLOCK_SIZE_U64};
use tet_core::cetrafs::raw::{
    RawBlockGroup, RawDirEntry, RawExtent, RawExtentHeader, RawExtentIndex, RawInode,
    RawJournalFlag, RawRegionHeader, RawSuperblock, RawTail, RawXattr, RawZoneGroupCold,
    RawZoneGroupHot,
};
use tet_core::cetrafs::{
    bitmap_blocks, BG_MAGIC, BITS_PER_BITMAP_BLOCK, DIRENTS_PER_BLOCK, EXTENT_MAGIC, EXTENT_UNINIT,
    FORMAT_VERSION, INDEX_MAX, INLINE_SLOTS, INODE_MAGIC, JF_MAGIC, LEAF_MAX, PENDING_PER_BLOCK,
    RH_MAGIC, ROWS_PER_BLOCK, SB_CHECKSUM_AT, SB_CLEAN, SB_MAGIC, TAIL_AT, TAIL_DIR, TAIL_EXTENT,
    TAIL_XATTR, XATTRS_PER_BLOCK, ZG_COLD_AT, ZG_COLD_MAGIC, ZG_MAGIC, ZG_NO_OWNER,
};
use tet_core::checksum::{crc32c, crc32c_skipping};
use tet_core::{Error, ErrorKind};
use zerocopy::{FromZeros, IntoBytes};

/// Geometry of a new image.
#[derive(Clone, Debug)]
pub struct Params {
    /// Image size in bytes (rounded down to whole blocks).
    pub size_bytes: u64,
    /// Nominal block group size in blocks.
    pub bg_size_blocks: u64,
    /// Zone groups (clamped to the block group count).
    pub zone_groups: u32,
    /// Node registry capacity.
    pub nodes: u32,
    /// Inode table length (inode 0 is never used).
    pub inodes: u64,
    /// Blocks per node journal (odd, ≥ 3).
    pub journal_blocks: u64,
    /// Pending-free slots per zone group.
    pub pending_slots: u32,
    /// Volume label.
    pub label: String,
    /// Write every extent and index array in reverse order (readers must not care).
    pub unordered: bool,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            size_bytes: 64 << 20,
            bg_size_blocks: 4096,
            zone_groups: 2,
            nodes: 4,
            inodes: 1024,
            journal_blocks: 33,
            pending_slots: 256,
            label: String::new(),
            unordered: false,
        }
    }
}

/// How all-zero blocks of a file are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sparse {
    /// Every block is allocated and written.
    Dense,
    /// All-zero blocks are holes (no extent).
    Holes,
    /// All-zero blocks are allocated as uninitialized extents (not written).
    Uninit,
}

/// Placement of a file's data blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// As contiguous as the allocator allows.
    Contiguous,
    /// Every other block, so each block is its own extent (to grow deep trees).
    Fragmented,
}

/// A file's bytes, read block by block while the image is written, so a builder copying
/// files from elsewhere never holds their contents (`mkfs --from`). `Vec<u8>` is one.
pub trait Content {
    /// Length in bytes.
    fn size(&self) -> u64;
    /// Fills `buf` (at most one block) with the bytes at `offset`; a source that ends
    /// early (a file that shrank) is an error.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), Error>;
}

impl Content for Vec<u8> {
    fn size(&self) -> u64 {
        u64::try_from(self.len()).unwrap_or(u64::MAX)
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), Error> {
        let at = usize_of(offset);
        let src = self
            .get(at..at.saturating_add(buf.len()))
            .ok_or(invalid("file content"))?;
        buf.copy_from_slice(src);
        Ok(())
    }
}

enum Kind {
    File {
        data: Box<dyn Content>,
        sparse: Sparse,
        placement: Placement,
    },
    Symlink {
        target: Vec<u8>,
    },
    Dir {
        entries: Vec<(Vec<u8>, u64, u8)>,
    },
}

struct Node {
    kind: Kind,
    mode: u32,
    uid: u32,
    gid: u32,
    mtime_ns: u64,
    parent: u64,
    xattrs: Vec<(Vec<u8>, Vec<u8>)>,
    /// Directory entries naming a file or symlink (hard links).
    links: u32,
}

/// Builds an image in memory.
pub struct ImageBuilder {
    params: Params,
    nodes: Vec<Node>,
}

pub(super) fn invalid(what: &'static str) -> Error {
    Error::new(ErrorKind::Invalid, what, 0)
}

pub(super) fn full(what: &'static str) -> Error {
    Error::new(
        ErrorKind::BufferTooSmall {
            needed: 1,
            available: 0,
        },
        what,
        0,
    )
}

pub(super) fn put(buf: &mut [u8], at: usize, bytes: &[u8]) {
    if let Some(dst) = buf.get_mut(at..at.saturating_add(bytes.len())) {
        dst.copy_from_slice(bytes);
    }
}

pub(super) fn usize_of(v: u64) -> usize {
    usize::try_from(v).unwrap_or(usize::MAX)
}

/// Computed geometry.
struct Geometry {
    total: u64,
    z: u32,
    b: u32,
    inode_bitmap_start: u64,
    inode_bitmap_blocks: u64,
    inode_table_start: u64,
    registry_start: u64,
    registry_blocks: u64,
    pending_start: u64,
    pending_blocks: u64,
    journal_start: u64,
    bg_regions_start: u64,
}

impl Geometry {
    fn bg_span(&self, size: u64, i: u32) -> (u64, u64) {
        let start = self
            .bg_regions_start
            .saturating_add(u64::from(i).saturating_mul(size));
        (start, size.min(self.total.saturating_sub(start)))
    }
}

impl ImageBuilder {
    /// A builder with an empty root directory (inode 1, mode 0755).
    pub fn new(params: Params) -> Self {
        let root = Node {
            kind: Kind::Dir {
                entries: Vec::new(),
            },
            mode: 0o040_755,
            uid: 0,
            gid: 0,
            mtime_ns: 0,
            parent: 1,
            xattrs: Vec::new(),
            links: 1,
        };
        // Index 0 stands for inode 0 and is never written.
        let placeholder = Node {
            kind: Kind::Dir {
                entries: Vec::new(),
            },
            mode: 0,
            uid: 0,
            gid: 0,
            mtime_ns: 0,
            parent: 0,
            xattrs: Vec::new(),
            links: 1,
        };
        ImageBuilder {
            params,
            nodes: vec![placeholder, root],
        }
    }

    /// The root directory's inode.
    pub const ROOT: u64 = 1;

    fn node_mut(&mut self, ino: u64) -> Result<&mut Node, Error> {
        self.nodes.get_mut(usize_of(ino)).ok_or(invalid("inode"))
    }

    fn link(&mut self, dir: u64, name: &[u8], ino: u64, ftype: u8) -> Result<(), Error> {
        if name.is_empty()
            || name.len() > 255
            || name.contains(&b'/')
            || name.contains(&0)
            || name == b"."
            || name == b".."
        {
            return Err(invalid("name"));
        }
        match &mut self.node_mut(dir)?.kind {
            Kind::Dir { entries } => {
                if entries.iter().any(|(n, _, _)| n == name) {
                    return Err(invalid("name (exists)"));
                }
                entries.push((name.to_vec(), ino, ftype));
                Ok(())
            }
            _ => Err(invalid("parent (not a directory)")),
        }
    }

    fn add(&mut self, dir: u64, name: &[u8], node: Node, ftype: u8) -> Result<u64, Error> {
        let ino = u64::try_from(self.nodes.len()).map_err(|_| full("inodes"))?;
        if ino >= self.params.inodes {
            return Err(full("inode table"));
        }
        self.link(dir, name, ino, ftype)?;
        self.nodes.push(node);
        Ok(ino)
    }

    /// Adds a directory `name` in `dir`.
    pub fn mkdir(&mut self, dir: u64, name: &[u8], mode: u32) -> Result<u64, Error> {
        let node = Node {
            kind: Kind::Dir {
                entries: Vec::new(),
            },
            mode: 0o040_000 | (mode & 0o7777),
            uid: 0,
            gid: 0,
            mtime_ns: 0,
            parent: dir,
            xattrs: Vec::new(),
            links: 1,
        };
        self.add(dir, name, node, 2)
    }

    /// Adds a regular file.
    pub fn add_file(
        &mut self,
        dir: u64,
        name: &[u8],
        data: Vec<u8>,
        sparse: Sparse,
        placement: Placement,
    ) -> Result<u64, Error> {
        self.add_file_from(dir, name, Box::new(data), sparse, placement)
    }

    /// Adds a regular file whose bytes are read from `data` while the image is written.
    pub fn add_file_from(
        &mut self,
        dir: u64,
        name: &[u8],
        data: Box<dyn Content>,
        sparse: Sparse,
        placement: Placement,
    ) -> Result<u64, Error> {
        let node = Node {
            kind: Kind::File {
                data,
                sparse,
                placement,
            },
            mode: 0o100_644,
            uid: 0,
            gid: 0,
            mtime_ns: 0,
            parent: 0,
            xattrs: Vec::new(),
            links: 1,
        };
        self.add(dir, name, node, 1)
    }

    /// Adds a symbolic link.
    pub fn add_symlink(&mut self, dir: u64, name: &[u8], target: &[u8]) -> Result<u64, Error> {
        let node = Node {
            kind: Kind::Symlink {
                target: target.to_vec(),
            },
            mode: 0o120_777,
            uid: 0,
            gid: 0,
            mtime_ns: 0,
            parent: 0,
            xattrs: Vec::new(),
            links: 1,
        };
        self.add(dir, name, node, 7)
    }

    /// Names the existing file or symlink `ino` again, as `name` in `dir` (a hard link:
    /// one inode, `nlink` counting its names). Directories cannot be linked.
    pub fn add_link(&mut self, dir: u64, name: &[u8], ino: u64) -> Result<(), Error> {
        let ftype = match &self.nodes.get(usize_of(ino)).ok_or(invalid("inode"))?.kind {
            Kind::File { .. } => 1,
            Kind::Symlink { .. } => 7,
            Kind::Dir { .. } => return Err(invalid("hard link to a directory")),
        };
        if ino == 0 {
            return Err(invalid("inode"));
        }
        self.link(dir, name, ino, ftype)?;
        let n = self.node_mut(ino)?;
        n.links = n.links.checked_add(1).ok_or(full("links"))?;
        Ok(())
    }

    /// Sets owner, permission bits and mtime of `ino`.
    pub fn set_meta(
        &mut self,
        ino: u64,
        perm: u32,
        uid: u32,
        gid: u32,
        mtime_ns: u64,
    ) -> Result<(), Error> {
        let n = self.node_mut(ino)?;
        n.mode = (n.mode & 0o170_000) | (perm & 0o7777);
        n.uid = uid;
        n.gid = gid;
        n.mtime_ns = mtime_ns;
        Ok(())
    }

    /// Adds an extended attribute (key with namespace, ≤ 64 bytes; value ≤ 256 bytes;
    /// at most 12 per inode).
    pub fn set_xattr(&mut self, ino: u64, key: &[u8], value: &[u8]) -> Result<(), Error> {
        if key.is_empty()
            || key.len() > 64
            || key.contains(&0)
            || !key.contains(&b'.')
            || value.len() > 256
        {
            return Err(invalid("xattr"));
        }
        let n = self.node_mut(ino)?;
        if let Some(e) = n.xattrs.iter_mut().find(|(k, _)| k == key) {
            e.1 = value.to_vec();
            return Ok(());
        }
        if n.xattrs.len() >= XATTRS_PER_BLOCK {
            return Err(full("xattr block"));
        }
        n.xattrs.push((key.to_vec(), value.to_vec()));
        Ok(())
    }

    /// The smallest image size (bytes, whole blocks) these parameters allow, or `None`
    /// when no size up to 2^50 bytes works (the parameters themselves are invalid).
    pub fn min_size_bytes(params: &Params) -> Option<u64> {
        let probe = |blocks: u64| {
            let mut p = params.clone();
            p.size_bytes = blocks.checked_mul(BLOCK_SIZE_U64)?;
            ImageBuilder::new(p).geometry().ok()
        };
        // Grow until a size works (a geometry with more than 2^32 groups does not),
        // then bisect below it.
        let mut lo = 1u64;
        let mut hi = 64u64;
        while probe(hi).is_none() {
            lo = hi + 1;
            hi = hi.checked_mul(2).filter(|h| *h <= 1 << 38)?;
        }
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if probe(mid).is_some() {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        // Sizes just above the found one must work too (the search assumed so).
        (0..64)
            .all(|k| probe(lo + k).is_some())
            .then(|| lo * BLOCK_SIZE_U64)
    }

    /// The block group count `params` give, or why they give no image.
    pub fn block_groups(params: &Params) -> Result<u32, Error> {
        ImageBuilder::new(params.clone()).geometry().map(|g| g.b)
    }

    fn geometry(&self) -> Result<Geometry, Error> {
        let p = &self.params;
        let device_blocks = p.size_bytes / BLOCK_SIZE_U64;
        if p.bg_size_blocks < 3
            || p.journal_blocks < 3
            || p.journal_blocks % 2 == 0
            || p.nodes == 0
            || p.inodes < 2
            || p.pending_slots == 0
            || p.zone_groups == 0
        {
            return Err(invalid("mkfs parameters"));
        }
        let inode_bitmap_blocks = p.inodes.div_ceil(BITS_PER_BITMAP_BLOCK);
        let registry_blocks = u64::from(p.nodes).div_ceil(ROWS_PER_BLOCK);
        let pending_per_zg = u64::from(p.pending_slots).div_ceil(PENDING_PER_BLOCK);
        let journals = u64::from(p.nodes).saturating_mul(p.journal_blocks);
        // Blocks before the first group with `b` block groups. Checked: `--inodes` near
        // 2^64 must be a refusal, not a wrap.
        let fixed_for = |b: u64| -> Option<u64> {
            let z = u64::from(p.zone_groups).min(b);
            [
                z,
                b,
                inode_bitmap_blocks,
                p.inodes,
                registry_blocks,
                z.checked_mul(pending_per_zg)?,
                journals,
            ]
            .iter()
            .try_fold(1u64, |a, x| a.checked_add(*x))
        };
        // `b` groups fit when the last one gets at least its 3 blocks (header, bitmap,
        // one data block): fixed(b) + (b - 1) × size + 3 ≤ blocks. That grows with `b`, so
        // the most groups that fit is found by bisection.
        let fits = |b: u64| {
            fixed_for(b)
                .and_then(|f| f.checked_add(b.checked_sub(1)?.checked_mul(p.bg_size_blocks)?))
                .and_then(|x| x.checked_add(3))
                .is_some_and(|need| need <= device_blocks)
        };
        if !fits(1) {
            return Err(full("image size"));
        }
        let (mut lo, mut hi) = (1u64, device_blocks.max(1));
        while lo < hi {
            let mid = lo + (hi - lo).div_ceil(2);
            if fits(mid) {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        let b = lo;
        let fixed = fixed_for(b).ok_or(full("image size"))?;
        // The last group takes what is left, up to a full group; a remainder too short
        // for another group's metadata is left unused at the end.
        let total = device_blocks.min(fixed + b * p.bg_size_blocks);
        if u64::from(p.zone_groups) > b {
            return Err(Error::new(
                ErrorKind::OutOfRange {
                    value: p.zone_groups.into(),
                    max: b,
                },
                "zone groups (more than block groups)",
                0,
            ));
        }
        let z = u64::from(p.zone_groups);
        let z32 = u32::try_from(z).map_err(|_| full("zone groups"))?;
        let b32 = u32::try_from(b).map_err(|_| full("block groups"))?;
        let inode_bitmap_start = 1 + z + b;
        let inode_table_start = inode_bitmap_start + inode_bitmap_blocks;
        let registry_start = inode_table_start + p.inodes;
        let pending_start = registry_start + registry_blocks;
        let journal_start = pending_start + z * pending_per_zg;
        Ok(Geometry {
            total,
            z: z32,
            b: b32,
            inode_bitmap_start,
            inode_bitmap_blocks,
            inode_table_start,
            registry_start,
            registry_blocks,
            pending_start,
            pending_blocks: z * pending_per_zg,
            journal_start,
            bg_regions_start: fixed,
        })
    }

    /// Writes the image into memory (tests, small images). Same bytes as
    /// [`ImageBuilder::build_into`] writes to any sink.
    pub fn build(&self) -> Result<Vec<u8>, Error> {
        let g = self.geometry()?;
        let mut img = vec![0u8; usize_of(g.total.saturating_mul(BLOCK_SIZE_U64))];
        self.build_into(&mut MemSink(&mut img))?;
        Ok(img)
    }

    /// The blocks the image will have (`total_blocks`), or why the parameters give none.
    pub fn total_blocks(&self) -> Result<u64, Error> {
        self.geometry().map(|g| g.total)
    }

    /// Writes the image block by block into `sink`: every block that must hold
    /// something is written whole, exactly once, in no particular order; blocks never
    /// written must read as zero only where section 13 of the spec does not check them
    /// (free inodes of the inode table, free data blocks), so a sink over a fresh sparse
    /// file may skip all-zero blocks and a sink over a used device must not. Memory: the
    /// tree being copied, plus a few blocks and one word per block group. Every layout is
    /// serialised through the `tet_core::cetrafs::raw` structs.
    pub fn build_into(&self, sink: &mut dyn BlockSink) -> Result<u64, Error> {
        let p = &self.params;
        let g = self.geometry()?;
        let mut alloc = Allocator::new(&g, p.bg_size_blocks);
        let mut any_holes = false;
        let mut any_uninit = false;
        let mut any_xattr = false;
        let mut blk: Block = [0; BLOCK_SIZE];

        for (ino, node) in self.nodes.iter().enumerate().skip(1) {
            let ino = u64::try_from(ino).map_err(|_| full("inodes"))?;
            // Each logical block goes to `emit` with its contents (None = allocated but
            // not written: uninit); holes are never emitted.
            let mut extents: Vec<(u32, u32, u64, bool)> = Vec::new();
            let mut nblocks: u64 = 0;
            let mut emit = |l: u32,
                            content: Option<&Block>,
                            placement: Placement,
                            alloc: &mut Allocator,
                            sink: &mut dyn BlockSink|
             -> Result<(), Error> {
                let phys = alloc.take(placement)?;
                if let Some(c) = content {
                    sink.write_block(phys, c)?;
                }
                nblocks += 1;
                let uninit = content.is_none();
                match extents.last_mut() {
                    Some(e)
                        if e.0 + e.1 == l
                            && e.2 + u64::from(e.1) == phys
                            && e.3 == uninit
                            && e.1 < 0x7fff_ffff =>
                    {
                        e.1 += 1
                    }
                    _ => extents.push((l, 1, phys, uninit)),
                }
                Ok(())
            };
            let size: u64;
            match &node.kind {
                Kind::File {
                    data,
                    sparse,
                    placement,
                } => {
                    size = data.size();
                    let nb = size.div_ceil(BLOCK_SIZE_U64);
                    for i in 0..nb {
                        let l = u32::try_from(i).map_err(|_| full("file size"))?;
                        let off = i * BLOCK_SIZE_U64;
                        let n = usize_of((size - off).min(BLOCK_SIZE_U64));
                        blk.fill(0);
                        data.read_at(off, &mut blk[..n])?;
                        let zero = blk.iter().all(|b| *b == 0);
                        match (sparse, zero) {
                            (Sparse::Holes, true) => any_holes = true,
                            (Sparse::Uninit, true) => {
                                any_uninit = true;
                                emit(l, None, *placement, &mut alloc, sink)?;
                            }
                            _ => emit(l, Some(&blk), *placement, &mut alloc, sink)?,
                        }
                    }
                }
                Kind::Symlink { target } => {
                    size = u64::try_from(target.len()).map_err(|_| full("symlink"))?;
                    for (i, chunk) in target.chunks(BLOCK_SIZE).enumerate() {
                        blk.fill(0);
                        put(&mut blk, 0, chunk);
                        let l = u32::try_from(i).map_err(|_| full("symlink"))?;
                        emit(l, Some(&blk), Placement::Contiguous, &mut alloc, sink)?;
                    }
                }
                Kind::Dir { entries } => {
                    let dir_bytes = dir_blocks(entries);
                    size = u64::try_from(dir_bytes.len())
                        .map_err(|_| full("dir"))?
                        .saturating_mul(BLOCK_SIZE_U64);
                    for (i, b) in dir_bytes.iter().enumerate() {
                        let l = u32::try_from(i).map_err(|_| full("dir"))?;
                        emit(l, Some(b), Placement::Contiguous, &mut alloc, sink)?;
                    }
                }
            }
            let is_dir = matches!(node.kind, Kind::Dir { .. });
            let (root_header, root_slots) = self.write_tree(sink, &mut alloc, &extents, is_dir)?;

            let mut xattr_block = 0;
            if !node.xattrs.is_empty() {
                any_xattr = true;
                xattr_block = alloc.take(Placement::Contiguous)?;
                blk.fill(0);
                for (k, (key, value)) in node.xattrs.iter().enumerate() {
                    let mut x = RawXattr::new_zeroed();
                    put(&mut x.key, 0, key);
                    x.value_len.set(u16::try_from(value.len()).unwrap_or(0));
                    put(&mut x.value, 0, value);
                    put(&mut blk, k * 322, x.as_bytes());
                }
                seal_tail(&mut blk, TAIL_XATTR);
                sink.write_block(xattr_block, &blk)?;
            }

            let mut r = RawInode::new_zeroed();
            r.magic = INODE_MAGIC;
            r.ino.set(ino);
            r.mode.set(node.mode);
            r.uid.set(node.uid);
            r.gid.set(node.gid);
            r.nlink.set(match &node.kind {
                Kind::Dir { entries } => {
                    2 + u32::try_from(entries.iter().filter(|e| e.2 == 2).count()).unwrap_or(0)
                }
                _ => node.links,
            });
            r.size.set(size);
            r.blocks.set(nblocks);
            for t in [
                &mut r.atime_ns,
                &mut r.mtime_ns,
                &mut r.ctime_ns,
                &mut r.crtime_ns,
            ] {
                t.set(node.mtime_ns);
            }
            r.parent.set(if is_dir { node.parent } else { 0 });
            r.xattr_block.set(xattr_block);
            r.extent_header = root_header;
            r.slots = root_slots;
            r.checksum.set(crc32c_skipping(r.as_bytes(), 248));
            blk.fill(0);
            put(&mut blk, 0, r.as_bytes());
            sink.write_block(g.inode_table_start + ino, &blk)?;
        }

        // Inode bitmap: inode 0, every used inode, and padding bits set; one block at a
        // time.
        let used_inodes = u64::try_from(self.nodes.len()).unwrap_or(0);
        for k in 0..g.inode_bitmap_blocks {
            let base = k * BITS_PER_BITMAP_BLOCK;
            blk.fill(0);
            set_bits(&mut blk, base, 0, used_inodes);
            set_bits(&mut blk, base, p.inodes, u64::MAX);
            sink.write_block(g.inode_bitmap_start + k, &blk)?;
        }

        // Block groups: bitmaps, region headers, descriptors.
        let per_zg = g.b.div_ceil(g.z);
        let mut zg_free = vec![0u64; usize_of(g.z.into())];
        for bi in 0..g.b {
            let (start, len) = g.bg_span(p.bg_size_blocks, bi);
            let dbm = bitmap_blocks(len);
            let data = len - 1 - dbm;
            let (high, gaps) = alloc.used_in(bi);
            let used = high - u64::try_from(gaps.len()).unwrap_or(0);
            for k in 0..dbm {
                let base = k * BITS_PER_BITMAP_BLOCK;
                blk.fill(0);
                set_bits(&mut blk, base, 0, high);
                set_bits(&mut blk, base, data, u64::MAX);
                for gap in gaps
                    .iter()
                    .filter(|x| **x >= base && **x < base + BITS_PER_BITMAP_BLOCK)
                {
                    let i = gap - base;
                    blk[usize_of(i / 8)] &= !(1u8 << (i % 8));
                }
                sink.write_block(start + 1 + k, &blk)?;
            }
            let mut rh = RawRegionHeader::new_zeroed();
            rh.magic = RH_MAGIC;
            rh.bg_id.set(bi);
            rh.start_block.set(start);
            rh.length_blocks.set(len);
            rh.checksum.set(crc32c_skipping(rh.as_bytes(), 56));
            blk.fill(0);
            put(&mut blk, 0, rh.as_bytes());
            sink.write_block(start, &blk)?;
            let owner = bi / per_zg;
            let free = data - used;
            if let Some(f) = zg_free.get_mut(usize_of(owner.into())) {
                *f += free;
            }
            let mut d = RawBlockGroup::new_zeroed();
            d.magic = BG_MAGIC;
            d.bg_id.set(bi);
            d.owner_zg.set(owner);
            d.start_block.set(start);
            d.length_blocks.set(len);
            d.bitmap_offset.set(1);
            d.data_offset.set(1 + dbm);
            d.data_block_count.set(data);
            d.free_data_blocks.set(free);
            d.checksum.set(crc32c_skipping(d.as_bytes(), 112));
            blk.fill(0);
            put(&mut blk, 0, d.as_bytes());
            sink.write_block(1 + u64::from(g.z) + u64::from(bi), &blk)?;
        }
        for zi in 0..g.z {
            let first = zi * per_zg;
            let mut hot = RawZoneGroupHot::new_zeroed();
            hot.magic = ZG_MAGIC;
            hot.zg_id.set(zi);
            hot.owner_node_id.set(ZG_NO_OWNER);
            hot.free_data_blocks
                .set(zg_free.get(usize_of(zi.into())).copied().unwrap_or(0));
            hot.hot_checksum.set(crc32c_skipping(hot.as_bytes(), 56));
            let mut cold = RawZoneGroupCold::new_zeroed();
            cold.magic = ZG_COLD_MAGIC;
            cold.first_bg_id.set(first);
            cold.bg_count.set(per_zg.min(g.b - first));
            cold.cold_checksum.set(crc32c_skipping(cold.as_bytes(), 56));
            blk.fill(0);
            put(&mut blk, 0, hot.as_bytes());
            put(&mut blk, ZG_COLD_AT, cold.as_bytes());
            sink.write_block(1 + u64::from(zi), &blk)?;
        }

        // The registry and the pending-free queues start empty; each journal is a CLEAN
        // flag block and empty slots. Written (as zeros) so a used device reads empty.
        blk.fill(0);
        for lba in g.registry_start..g.registry_start + g.registry_blocks {
            sink.write_block(lba, &blk)?;
        }
        for lba in g.pending_start..g.pending_start + g.pending_blocks {
            sink.write_block(lba, &blk)?;
        }
        for row in 0..p.nodes {
            let lba = g.journal_start + u64::from(row) * p.journal_blocks;
            blk.fill(0);
            for slot in lba + 1..lba + p.journal_blocks {
                sink.write_block(slot, &blk)?;
            }
            let mut f = RawJournalFlag::new_zeroed();
            f.magic = JF_MAGIC;
            f.row.set(row);
            f.checksum.set(crc32c_skipping(f.as_bytes(), 56));
            put(&mut blk, 0, f.as_bytes());
            sink.write_block(lba, &blk)?;
        }

        // Superblock.
        let mut sb = RawSuperblock::new_zeroed();
        sb.magic = SB_MAGIC;
        sb.format_version.set(FORMAT_VERSION);
        sb.block_size.set(4096);
        sb.sb_flags.set(SB_CLEAN);
        // A uuid derived from the geometry, so images stay deterministic.
        let uuid = crc32c(&g.total.to_le_bytes()).to_le_bytes();
        for (k, b) in sb.uuid.iter_mut().enumerate() {
            *b = uuid[k % 4];
        }
        sb.total_blocks.set(g.total);
        sb.feature_compat
            .set(u64::from(any_xattr) | (u64::from(any_holes) << 1));
        sb.feature_incompat.set(1u64 | (u64::from(any_uninit) << 1));
        sb.feature_ro_compat.set(3);
        sb.zone_group_count.set(g.z);
        sb.block_group_count.set(g.b);
        sb.zg_table_start.set(1);
        sb.bg_table_start.set(1 + u64::from(g.z));
        sb.inode_bitmap_start.set(g.inode_bitmap_start);
        sb.inode_bitmap_blocks.set(g.inode_bitmap_blocks);
        sb.inode_table_start.set(g.inode_table_start);
        sb.inode_count.set(p.inodes);
        sb.registry_start.set(g.registry_start);
        sb.registry_blocks.set(g.registry_blocks);
        sb.node_capacity.set(p.nodes);
        sb.pending_slots_per_zg.set(p.pending_slots);
        sb.pending_start.set(g.pending_start);
        sb.pending_blocks.set(g.pending_blocks);
        sb.node_journal_start.set(g.journal_start);
        sb.node_journal_blocks.set(p.journal_blocks);
        sb.bg_regions_start.set(g.bg_regions_start);
        sb.bg_size_blocks.set(p.bg_size_blocks);
        sb.root_inode.set(1);
        let label = p.label.as_bytes();
        put(
            &mut sb.label,
            0,
            label.get(..label.len().min(64)).unwrap_or(&[]),
        );
        sb.checksum
            .set(crc32c_skipping(sb.as_bytes(), SB_CHECKSUM_AT));
        blk.fill(0);
        put(&mut blk, 0, sb.as_bytes());
        sink.write_block(0, &blk)?;
        Ok(g.total)
    }

    /// Builds the extent tree for `extents`, writing tree blocks, and returns the inode's
    /// root: its header and four slots.
    fn write_tree(
        &self,
        sink: &mut dyn BlockSink,
        alloc: &mut Allocator,
        extents: &[(u32, u32, u64, bool)],
        is_dir: bool,
    ) -> Result<(RawExtentHeader, [u8; 64]), Error> {
        let unordered = self.params.unordered;
        let leaf_bytes = |e: &(u32, u32, u64, bool)| {
            let mut x = RawExtent::new_zeroed();
            x.logical.set(e.0);
            x.len.set(e.1 | if e.3 { EXTENT_UNINIT } else { 0 });
            x.physical.set(e.2);
            x.as_bytes().to_vec()
        };
        let header = |entries: usize, max: u16, depth: u16| {
            let mut h = RawExtentHeader::new_zeroed();
            h.magic.set(EXTENT_MAGIC);
            h.entries.set(u16::try_from(entries).unwrap_or(0));
            h.max.set(max);
            h.depth.set(depth);
            h
        };
        let order = |n: usize| -> Vec<usize> {
            let mut v: Vec<usize> = (0..n).collect();
            if unordered {
                v.reverse();
            }
            v
        };
        // Writes one tree block of entries (16-byte leaves or 12-byte index entries).
        let write_block = |alloc: &mut Allocator,
                           sink: &mut dyn BlockSink,
                           entries: &[Vec<u8>],
                           max: u16,
                           depth: u16|
         -> Result<u64, Error> {
            let lba = alloc.take(Placement::Contiguous)?;
            let mut blk: Block = [0; BLOCK_SIZE];
            put(&mut blk, 0, header(entries.len(), max, depth).as_bytes());
            let mut at = 12;
            for i in order(entries.len()) {
                let e = entries.get(i).ok_or(invalid("tree"))?;
                put(&mut blk, at, e);
                at += e.len();
            }
            seal_tail(&mut blk, TAIL_EXTENT);
            sink.write_block(lba, &blk)?;
            Ok(lba)
        };
        let index_bytes = |logical: u32, child: u64| {
            let mut x = RawExtentIndex::new_zeroed();
            x.logical.set(logical);
            x.child.set(child);
            x.as_bytes().to_vec()
        };
        let inline = usize::from(INLINE_SLOTS);
        let leaf = usize::from(LEAF_MAX);
        let interior = usize::from(INDEX_MAX);
        let (depth, slots): (u16, Vec<Vec<u8>>) = if extents.len() <= inline {
            (0, extents.iter().map(leaf_bytes).collect())
        } else if extents.len() <= inline * leaf {
            let mut s = Vec::new();
            for chunk in extents.chunks(leaf) {
                let entries: Vec<Vec<u8>> = chunk.iter().map(leaf_bytes).collect();
                let lba = write_block(alloc, sink, &entries, LEAF_MAX, 0)?;
                s.push(index_bytes(chunk.first().map_or(0, |e| e.0), lba));
            }
            (1, s)
        } else if !is_dir && extents.len() <= inline * interior * leaf {
            let per_interior = extents.len().div_ceil(inline).div_ceil(leaf) * leaf;
            let mut s = Vec::new();
            for group in extents.chunks(per_interior) {
                let mut idx = Vec::new();
                for chunk in group.chunks(leaf) {
                    let entries: Vec<Vec<u8>> = chunk.iter().map(leaf_bytes).collect();
                    let lba = write_block(alloc, sink, &entries, LEAF_MAX, 0)?;
                    idx.push(index_bytes(chunk.first().map_or(0, |e| e.0), lba));
                }
                let lba = write_block(alloc, sink, &idx, INDEX_MAX, 1)?;
                s.push(index_bytes(group.first().map_or(0, |e| e.0), lba));
            }
            (2, s)
        } else {
            return Err(full("extent tree"));
        };
        let mut root = [0u8; 64];
        for (k, i) in order(slots.len()).into_iter().enumerate() {
            put(&mut root, 16 * k, slots.get(i).ok_or(invalid("tree"))?);
        }
        Ok((header(slots.len(), INLINE_SLOTS, depth), root))
    }
}

/// Where [`ImageBuilder::build_into`] writes: whole blocks by number.
pub trait BlockSink {
    /// Writes block `lba`.
    fn write_block(&mut self, lba: u64, block: &Block) -> Result<(), Error>;
}

/// A sink over an image held in memory.
pub struct MemSink<'a>(pub &'a mut [u8]);

impl BlockSink for MemSink<'_> {
    fn write_block(&mut self, lba: u64, block: &Block) -> Result<(), Error> {
        let at = usize_of(lba.saturating_mul(BLOCK_SIZE_U64));
        let dst = self
            .0
            .get_mut(at..at.saturating_add(BLOCK_SIZE))
            .ok_or(full("image"))?;
        dst.copy_from_slice(block);
        Ok(())
    }
}

/// Sets bits `lo .. hi` (absolute bit numbers) that fall in the bitmap block whose
/// first bit is `base`.
pub(super) fn set_bits(blk: &mut Block, base: u64, lo: u64, hi: u64) {
    let end = base + BITS_PER_BITMAP_BLOCK;
    let (lo, hi) = (lo.max(base), hi.min(end));
    let mut i = lo;
    while i < hi {
        let rel = i - base;
        if rel % 8 == 0 && i + 8 <= hi {
            blk[usize_of(rel / 8)] = 0xFF;
            i += 8;
        } else {
            blk[usize_of(rel / 8)] |= 1 << (rel % 8);
            i += 1;
        }
    }
}

/// Writes the `{magic, reserved, crc}` tail of a tree, directory or xattr block.
pub(super) fn seal_tail(blk: &mut Block, magic: [u8; 4]) {
    let mut t = RawTail::new_zeroed();
    t.magic = magic;
    put(blk, TAIL_AT, t.as_bytes());
    let c = crc32c_skipping(&blk[..], TAIL_AT + 8);
    put(blk, TAIL_AT + 8, &c.to_le_bytes());
}

pub(super) fn dir_blocks(entries: &[(Vec<u8>, u64, u8)]) -> Vec<Block> {
    let mut out = Vec::new();
    for chunk in entries.chunks(DIRENTS_PER_BLOCK) {
        let mut blk: Block = [0; BLOCK_SIZE];
        for (k, (name, ino, ft)) in chunk.iter().enumerate() {
            let mut d = RawDirEntry::new_zeroed();
            d.inode.set(*ino);
            d.name_len.set(u16::try_from(name.len()).unwrap_or(0));
            d.file_type = *ft;
            put(&mut d.name, 0, name);
            put(&mut blk, k * 266, d.as_bytes());
        }
        seal_tail(&mut blk, TAIL_DIR);
        out.push(blk);
    }
    out
}

/// First-fit block allocator over block group data areas.
struct Allocator {
    groups: Vec<(u64, u64)>,
    used: Vec<u64>,
    /// Blocks fragmented placement stepped over, per group: below the high-water mark
    /// but free.
    skipped: Vec<Vec<u64>>,
    cur: usize,
}

impl Allocator {
    fn new(g: &Geometry, size: u64) -> Self {
        let groups: Vec<(u64, u64)> = (0..g.b)
            .map(|i| {
                let (start, len) = g.bg_span(size, i);
                let dbm = bitmap_blocks(len);
                (start + 1 + dbm, len - 1 - dbm)
            })
            .collect();
        let used = vec![0; groups.len()];
        let skipped = vec![Vec::new(); groups.len()];
        Allocator {
            groups,
            used,
            skipped,
            cur: 0,
        }
    }

    fn take(&mut self, placement: Placement) -> Result<u64, Error> {
        let skip = u64::from(placement == Placement::Fragmented);
        while let (Some((start, count)), Some(used)) =
            (self.groups.get(self.cur), self.used.get_mut(self.cur))
        {
            // Fragmented placement leaves a free block before each allocation.
            let at = used.saturating_add(skip);
            if at < *count {
                if skip == 1 {
                    if let Some(g) = self.skipped.get_mut(self.cur) {
                        g.push(*used);
                    }
                }
                *used = at + 1;
                return Ok(start + at);
            }
            self.cur += 1;
        }
        Err(full("data blocks"))
    }

    /// Blocks from the start of group `bi`'s data area up to its high-water mark, and
    /// the free blocks below it.
    fn used_in(&self, bi: u32) -> (u64, &[u64]) {
        let i = usize_of(bi.into());
        (
            self.used.get(i).copied().unwrap_or(0),
            self.skipped.get(i).map_or(&[], Vec::as_slice),
        )
    }
}
