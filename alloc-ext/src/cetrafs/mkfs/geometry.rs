//! The geometry of a new image: [`Params`], and the checked computation of where every
//! region lies (docs/cetrafs.md section 1).

use alloc::string::String;

use tet_core::arith::u64_of;
use tet_core::block::BLOCK_SIZE_U64;
use tet_core::cetrafs::{
    bitmap_blocks, BITS_PER_BITMAP_BLOCK, DIRENTS_PER_BLOCK, PENDING_PER_BLOCK, ROWS_PER_BLOCK,
};

use super::tree::Kind;
use tet_core::{Error, ErrorKind};

use super::{full, invalid, ImageBuilder};

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
    /// The volume's UUID; `None` derives one from the geometry, so the same parameters
    /// give the same bytes (`tet-host mkfs` draws a random one unless told).
    pub uuid: Option<[u8; 16]>,
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
            uuid: None,
        }
    }
}

/// Computed geometry. Every region ends at or below `total`, itself at most the image's
/// size in blocks: a region's start plus an index inside it cannot overflow, so the
/// writers use saturating arithmetic on these values.
pub(super) struct Geometry {
    pub(super) total: u64,
    /// Zone groups (at least 1).
    pub(super) z: u32,
    /// Block groups (at least `z`).
    pub(super) b: u32,
    /// Block groups per zone group (at least 1).
    pub(super) per_zg: u32,
    pub(super) inode_bitmap_start: u64,
    pub(super) inode_bitmap_blocks: u64,
    pub(super) inode_table_start: u64,
    pub(super) registry_start: u64,
    pub(super) registry_blocks: u64,
    pub(super) pending_start: u64,
    pub(super) pending_blocks: u64,
    pub(super) journal_start: u64,
    pub(super) bg_regions_start: u64,
    /// Nominal block group size, from [`Params::bg_size_blocks`].
    pub(super) bg_size: u64,
}

impl Geometry {
    /// The layout `p` gives, or why it gives none.
    pub(super) fn of(p: &Params) -> Result<Geometry, Error> {
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
        // `lo < hi` in the loop: the midpoint and its neighbours stay inside `1 ..= hi`.
        let (mut lo, mut hi) = (1u64, device_blocks.max(1));
        while lo < hi {
            let mid = lo.saturating_add(hi.saturating_sub(lo).div_ceil(2));
            if fits(mid) {
                lo = mid;
            } else {
                hi = mid.saturating_sub(1);
            }
        }
        let b = lo;
        let fixed = fixed_for(b).ok_or(full("image size"))?;
        // The last group takes what is left, up to a full group; a remainder too short
        // for another group's metadata is left unused at the end. (A sum past 2^64 is
        // past the device too.)
        let total = device_blocks.min(fixed.saturating_add(b.saturating_mul(p.bg_size_blocks)));
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
        // Each start below is a partial sum of the terms `fixed_for(b)` added without
        // overflow, so none of these additions can overflow.
        let pending_blocks = z.saturating_mul(pending_per_zg);
        let inode_bitmap_start = z.saturating_add(b).saturating_add(1);
        let inode_table_start = inode_bitmap_start.saturating_add(inode_bitmap_blocks);
        let registry_start = inode_table_start.saturating_add(p.inodes);
        let pending_start = registry_start.saturating_add(registry_blocks);
        let journal_start = pending_start.saturating_add(pending_blocks);
        Ok(Geometry {
            total,
            z: z32,
            b: b32,
            // 1 ≤ z ≤ b, so the quotient is at least 1 and at most `b`.
            per_zg: b32.div_ceil(z32.max(1)),
            inode_bitmap_start,
            inode_bitmap_blocks,
            inode_table_start,
            registry_start,
            registry_blocks,
            pending_start,
            pending_blocks,
            journal_start,
            bg_regions_start: fixed,
            bg_size: p.bg_size_blocks,
        })
    }

    /// Block group `i`'s first block and length (the last group may be short).
    pub(super) fn bg_span(&self, i: u32) -> (u64, u64) {
        let start = self
            .bg_regions_start
            .saturating_add(u64::from(i).saturating_mul(self.bg_size));
        (start, self.bg_size.min(self.total.saturating_sub(start)))
    }

    /// Block group `i`'s data area: its first block, its length, and the data bitmap's
    /// length (the region header and the bitmap come first; every group has at least
    /// 3 blocks, so at least one data block).
    pub(super) fn data_area(&self, i: u32) -> (u64, u64, u64) {
        let (start, len) = self.bg_span(i);
        let dbm = bitmap_blocks(len);
        (
            start.saturating_add(1).saturating_add(dbm),
            len.saturating_sub(1).saturating_sub(dbm),
            dbm,
        )
    }

    /// The block of block group `i`'s descriptor (the table follows the zone groups').
    pub(super) fn bg_descriptor(&self, i: u32) -> u64 {
        u64::from(self.z)
            .saturating_add(u64::from(i))
            .saturating_add(1)
    }
}

impl ImageBuilder {
    /// The smallest image size (bytes, whole blocks) these parameters allow, or `None`
    /// when no size up to 2^50 bytes works (the parameters themselves are invalid).
    pub fn min_size_bytes(params: &Params) -> Option<u64> {
        let probe = |blocks: u64| {
            let mut p = params.clone();
            p.size_bytes = blocks.checked_mul(BLOCK_SIZE_U64)?;
            Geometry::of(&p).ok()
        };
        // Grow until a size works (a geometry with more than 2^32 groups does not),
        // then bisect below it. Every value stays at most 2^38 blocks.
        let mut lo = 1u64;
        let mut hi = 64u64;
        while probe(hi).is_none() {
            lo = hi.saturating_add(1);
            hi = hi.checked_mul(2).filter(|h| *h <= 1 << 38)?;
        }
        while lo < hi {
            let mid = lo.saturating_add(hi.saturating_sub(lo) / 2);
            if probe(mid).is_some() {
                hi = mid;
            } else {
                lo = mid.saturating_add(1);
            }
        }
        // Sizes just above the found one must work too (the search assumed so).
        if (0..64).all(|k| probe(lo.saturating_add(k)).is_some()) {
            lo.checked_mul(BLOCK_SIZE_U64)
        } else {
            None
        }
    }

    /// The block group count `params` give, or why they give no image.
    pub fn block_groups(params: &Params) -> Result<u32, Error> {
        Geometry::of(params).map(|g| g.b)
    }

    /// The blocks the image will have (`total_blocks`), or why the parameters give none.
    pub fn total_blocks(&self) -> Result<u64, Error> {
        Geometry::of(&self.params).map(|g| g.total)
    }
}

impl ImageBuilder {
    /// An upper bound on the data blocks the tree takes: every block of every file
    /// (holes counted as if written), every block of a symlink target, every directory
    /// block (an empty directory counted as one), one xattr block per inode with xattrs,
    /// and, for each file or directory past its inode's 4 inline extents, one extent tree
    /// block per 339 extents and one more (as if every block were its own extent).
    pub fn data_blocks_needed(&self) -> u64 {
        let tree = |blocks: u64| {
            if blocks <= 4 {
                0
            } else {
                blocks.div_ceil(339).saturating_add(1)
            }
        };
        self.nodes.iter().skip(1).fold(0u64, |acc, n| {
            let own = match &n.kind {
                Kind::File { data, .. } => {
                    let b = data.size().div_ceil(BLOCK_SIZE_U64);
                    b.saturating_add(tree(b))
                }
                Kind::Symlink { target } => u64_of(target.len()).div_ceil(BLOCK_SIZE_U64),
                Kind::Dir { entries } => {
                    let b = u64_of(entries.len())
                        .div_ceil(u64_of(DIRENTS_PER_BLOCK))
                        .max(1);
                    b.saturating_add(tree(b))
                }
            };
            acc.saturating_add(own)
                .saturating_add(u64::from(!n.xattrs.is_empty()))
        })
    }

    /// The data blocks an image of `params` offers: its groups' data areas.
    pub fn data_blocks_of(params: &Params) -> Result<u64, Error> {
        let g = Geometry::of(params)?;
        Ok((0..g.b).fold(0u64, |acc, i| acc.saturating_add(g.data_area(i).1)))
    }

    /// The smallest size (bytes, a whole number of MiB) with `params`' other settings
    /// whose data area holds `blocks` data blocks, or `None` when none up to 2^50 bytes
    /// does.
    pub fn size_for_data(params: &Params, blocks: u64) -> Option<u64> {
        let fits = |mib: u64| {
            let mut p = params.clone();
            p.size_bytes = mib.checked_mul(1 << 20)?;
            ImageBuilder::data_blocks_of(&p)
                .ok()
                .filter(|d| *d >= blocks)
        };
        let mut lo = 1u64;
        let mut hi = 1u64;
        while fits(hi).is_none() {
            lo = hi.saturating_add(1);
            hi = hi.checked_mul(2).filter(|h| *h <= 1 << 30)?;
        }
        while lo < hi {
            let mid = lo.saturating_add(hi.saturating_sub(lo) / 2);
            if fits(mid).is_some() {
                hi = mid;
            } else {
                lo = mid.saturating_add(1);
            }
        }
        lo.checked_mul(1 << 20)
    }
}
