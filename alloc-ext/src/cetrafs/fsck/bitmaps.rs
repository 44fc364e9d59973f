//! Pass 7: the data bitmaps against the ownership map the walk computed (free counts
//! are checked against the bitmaps by `check_groups` itself).

use alloc::collections::BTreeMap;

use tet_core::arith::u64_of;
use tet_core::block::{BlockDevice, BLOCK_SIZE_U64};
use tet_core::cetrafs::check::{check_groups, Sink};
use tet_core::cetrafs::{Buffers, Code, Finding, Fs, BITS_PER_BITMAP_BLOCK};
use tet_core::{Error, ErrorKind};

use super::maps::{live_words, Ownership};

/// Compares every data bitmap word with the ownership map; reports, per block group,
/// the bits set for blocks nothing owns and the bits clear for owned blocks.
pub(super) fn bitmaps<D: BlockDevice>(
    fs: &Fs<D>,
    bufs: &mut Buffers,
    own: &Ownership,
    sink: &mut dyn Sink<Finding>,
) {
    let words_per_bg = own.words_per_bg;
    let mut leaked: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
    let mut unmarked: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
    check_groups(fs, bufs, sink, &mut |bg, k, block| {
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
                Error::new(ErrorKind::Blocks { count: *count }, what, *first),
            ));
        }
    }
}
