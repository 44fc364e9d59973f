//! The check's maps: bitmaps in words, the block-ownership map laid out like the on-disk
//! data bitmaps, and the view of it repair keeps.

use alloc::vec::Vec;

use tet_core::arith::{div_ceil, u64_of};
use tet_core::block::Block;
use tet_core::cetrafs::{bitmap_blocks, Superblock};

/// A bitmap in `u64` words (bit `i` = word `i / 64`, bit `i % 64`).
pub(super) struct Bits(pub(super) Vec<u64>);

impl Bits {
    pub(super) fn new(bits: u64) -> Result<Bits, ()> {
        let words = usize::try_from(div_ceil(bits, 64)).map_err(|_| ())?;
        let mut v = Vec::new();
        v.try_reserve_exact(words).map_err(|_| ())?;
        v.resize(words, 0);
        Ok(Bits(v))
    }
    pub(super) fn get(&self, i: u64) -> bool {
        usize::try_from(i / 64)
            .ok()
            .and_then(|w| self.0.get(w))
            .is_some_and(|w| w & (1u64 << (i % 64)) != 0)
    }
    /// Sets bit `i`; returns whether it was set already.
    pub(super) fn set(&mut self, i: u64) -> bool {
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
pub(super) struct Ownership {
    pub(super) bits: Bits,
    pub(super) words_per_bg: u64,
    regions: u64,
    bg_size: u64,
    total: u64,
}

impl Ownership {
    /// The map over `bits` for the block groups `sb` describes.
    pub(super) fn new(bits: Bits, words_per_bg: u64, sb: &Superblock) -> Ownership {
        Ownership {
            bits,
            words_per_bg,
            regions: sb.bg_regions_start(),
            bg_size: sb.bg_size_blocks(),
            total: sb.total_blocks(),
        }
    }

    pub(super) fn index(&self, lba: u64) -> Option<u64> {
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

/// The block-ownership map a check computed: for block group `g`, bit `i` of words
/// `g × words_per_bg ..` says whether data block `i` is owned (the on-disk bitmap's
/// layout). Repair rebuilds bitmaps and free counts from it.
pub struct OwnershipMap {
    pub(super) bits: Vec<u64>,
    /// Words per block group.
    pub words_per_bg: u64,
    /// What [`super::recheck_bitmaps`] compares the image with after a round that wrote
    /// only bitmaps and counters: the inodes the walk found in use, the blocks the
    /// pending-free queues held, and the walk's counts.
    pub(super) in_use: Vec<u64>,
    pub(super) pending: Vec<(u64, u64)>,
    pub(super) inodes: u64,
    pub(super) entries: u64,
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

/// The 64-bit words of a bitmap block that hold its first `live` bits, each masked to
/// those bits, with their index.
pub(super) fn live_words(block: &Block, live: u64) -> impl Iterator<Item = (usize, u64)> + '_ {
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
