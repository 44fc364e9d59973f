//! The group tables rebuilt from the superblock's geometry, before the image is mounted
//! (docs/cetrafs.md section 14): a zone or block group descriptor that fails its checks
//! makes the image unmountable, yet every field of it but the cached free count, the
//! owner and the sequence numbers follows from the superblock, and those are set from
//! the bitmaps (the count) or reset (no owner: repair runs offline).
//!
//! The tables are not journal targets (section 7): a descriptor's hot sector is written
//! by compare-and-write, and a zone group's cold part (its second sector) after it, by a
//! write of the block whose first sector is then already the new one. A cut at any write
//! leaves each descriptor old or new, and the next run rebuilds what is still old.

use alloc::vec::Vec;

use tet_core::block::{Block, BlockDeviceMut, BLOCK_SIZE, BLOCK_SIZE_U64};
use tet_core::cetrafs::raw::RawBlockGroup;
use tet_core::cetrafs::{
    bitmap_blocks, BlockGroup, Code, Fs, ZoneGroup, BITS_PER_BITMAP_BLOCK, ZG_NO_OWNER,
};
use tet_core::Error;
use zerocopy::{FromBytes, IntoBytes};

use super::Fix;
use crate::cetrafs::records;

/// A table block rebuilt: where, its new contents, and the fix that says so.
#[derive(Clone)]
pub(super) struct Rebuilt {
    pub(super) lba: u64,
    pub(super) block: Block,
    pub(super) fix: Fix,
}

/// Which block groups each zone group holds: `(first, count)` per zone group, from the
/// cold parts that validate, and for the others from their neighbours (a damaged one
/// starts where the one before ends and ends where the next intact one starts), or, for
/// a run of damaged ones, mkfs's partition of `ceil(B / Z)` groups each.
fn partition(z: u32, b: u32, intact: &[Option<(u32, u32)>]) -> Vec<(u32, u32)> {
    let per = b.div_ceil(z.max(1)).max(1);
    let mut out: Vec<(u32, u32)> = Vec::new();
    let mut next: u32 = 0;
    for zi in 0..z {
        let i = usize::try_from(zi).unwrap_or(usize::MAX);
        let range = match intact.get(i).copied().flatten() {
            Some(r) => r,
            None => {
                let first = next;
                let end = match intact.get(i.saturating_add(1)).copied().flatten() {
                    Some((f, _)) if f > first => f,
                    _ if zi.saturating_add(1) == z => b,
                    _ => first.saturating_add(per).min(b),
                };
                (first, end.saturating_sub(first))
            }
        };
        next = range.0.saturating_add(range.1);
        out.push(range);
    }
    out
}

/// Free data blocks of a group as its bitmap says: clear bits below `data`.
fn free_in_bitmap<D: BlockDeviceMut>(
    fs: &Fs<D>,
    start: u64,
    length: u64,
    buf: &mut Block,
) -> Result<u64, Error> {
    let data = length
        .saturating_sub(1)
        .saturating_sub(bitmap_blocks(length));
    let mut free: u64 = 0;
    for k in 0..bitmap_blocks(length) {
        fs.device()
            .read_block(start.saturating_add(1).saturating_add(k), buf)?;
        let base = k.saturating_mul(BITS_PER_BITMAP_BLOCK);
        let live = data.saturating_sub(base).min(BITS_PER_BITMAP_BLOCK);
        let used: u64 = (0..live)
            .filter(|i| {
                usize::try_from(i / 8)
                    .ok()
                    .and_then(|x| buf.get(x))
                    .is_some_and(|byte| byte & (1u8 << (i % 8)) != 0)
            })
            .count()
            .try_into()
            .unwrap_or(0);
        free = free.saturating_add(live.saturating_sub(used));
    }
    Ok(free)
}

/// The descriptors of the zone and block group tables that fail their checks, rebuilt.
/// `fs` is mounted for reading only (the superblock and map validate; the tables are
/// what is being repaired).
pub(super) fn rebuild<D: BlockDeviceMut>(fs: &Fs<D>) -> Result<Vec<Rebuilt>, Error> {
    let sb = *fs.superblock();
    let (z, b) = (sb.zone_group_count(), sb.block_group_count());
    let mut buf: Block = [0; BLOCK_SIZE];
    let mut zgs: Vec<Option<ZoneGroup>> = Vec::new();
    for zi in 0..z {
        zgs.push(fs.zone_group(zi, &mut buf).ok());
    }
    let intact: Vec<Option<(u32, u32)>> = zgs
        .iter()
        .map(|g| g.map(|g| (g.cold().first_bg_id.get(), g.cold().bg_count.get())))
        .collect();
    let ranges = partition(z, b, &intact);
    let bg_table = sb.raw().bg_table_start.get();
    let mut out = Vec::new();
    let mut zone_free: Vec<u64> = Vec::new();
    for (zi, &(first, count)) in (0..z).zip(ranges.iter()) {
        let mut sum: u64 = 0;
        for bi in first..first.saturating_add(count).min(b) {
            let lba = bg_table.saturating_add(bi.into());
            let (start, length) = sb.bg_span(bi);
            fs.device().read_block(lba, &mut buf)?;
            if let Ok(g) = BlockGroup::parse(&buf, lba, bi, start, length, zi) {
                sum = sum.saturating_add(g.raw().free_data_blocks.get());
                continue;
            }
            // reconcile_seq advances whenever the free count is set from the bitmap.
            let seq = RawBlockGroup::read_from_bytes(buf.get(..128).unwrap_or(&[]))
                .map(|r| r.reconcile_seq.get().wrapping_add(1))
                .unwrap_or(1);
            let free = free_in_bitmap(fs, start, length, &mut buf)?;
            sum = sum.saturating_add(free);
            let d = records::block_group(bi, zi, start, length, free, seq);
            out.push(Rebuilt {
                lba,
                block: records::block_with(d.as_bytes()),
                fix: Fix {
                    code: Code::Mount,
                    action: "block group descriptor rebuilt from the superblock's geometry \
                             (free count from its bitmap)",
                    offset: lba.saturating_mul(BLOCK_SIZE_U64),
                    value: Some(free),
                    lossless: true,
                },
            });
        }
        zone_free.push(sum);
    }
    for (zi, g) in (0..z).zip(zgs.iter()) {
        let lba = 1u64.saturating_add(zi.into());
        let i = usize::try_from(zi).unwrap_or(usize::MAX);
        let (first, count) = ranges.get(i).copied().unwrap_or((0, 0));
        let free = zone_free.get(i).copied().unwrap_or(0);
        let owner_ok = g
            .and_then(|g| g.owner())
            .is_none_or(|o| u32::from(o) < sb.node_capacity());
        if g.is_some() && owner_ok {
            continue;
        }
        fs.device().read_block(lba, &mut buf)?;
        let hb_seq = u64::from_le_bytes(
            buf.get(24..32)
                .and_then(|s| s.try_into().ok())
                .unwrap_or([0; 8]),
        );
        let hot = records::zone_group_hot(zi, ZG_NO_OWNER, free, hb_seq.wrapping_add(1));
        let cold = records::zone_group_cold(first, count);
        out.push(Rebuilt {
            lba,
            block: records::zone_group_block(&hot, &cold),
            fix: Fix {
                code: Code::Mount,
                action: "zone group descriptor rebuilt from the superblock's geometry \
                         (no owner; free count its groups' sum)",
                offset: lba.saturating_mul(BLOCK_SIZE_U64),
                value: Some(free),
                lossless: true,
            },
        });
    }
    Ok(out)
}

/// Writes the rebuilt descriptors: the first sector by compare-and-write against what
/// the device holds, then the whole block (its first sector already new), then a flush.
pub(super) fn write<D: BlockDeviceMut>(fs: &Fs<D>, rebuilt: &[Rebuilt]) -> Result<(), Error> {
    let mut buf: Block = [0; BLOCK_SIZE];
    for r in rebuilt {
        fs.device().read_block(r.lba, &mut buf)?;
        let mut old = [0u8; 512];
        let mut new = [0u8; 512];
        old.copy_from_slice(buf.get(..512).unwrap_or(&[0; 512]));
        new.copy_from_slice(r.block.get(..512).unwrap_or(&[0; 512]));
        if old != new && !fs.device().compare_and_write(r.lba, &old, &new)? {
            return Err(Error::new(
                tet_core::ErrorKind::Io,
                "group table (changed while being repaired)",
                r.lba.saturating_mul(BLOCK_SIZE_U64),
            ));
        }
        if buf != r.block {
            fs.device().write_block(r.lba, &r.block)?;
        }
    }
    fs.device().flush()
}

#[cfg(test)]
mod tests {
    use super::partition;

    #[test]
    fn a_damaged_zone_group_takes_the_range_its_neighbours_leave() {
        // 10 groups in 3 zone groups of 4, 4, 2 (mkfs's partition).
        assert_eq!(
            partition(3, 10, &[Some((0, 4)), None, Some((8, 2))]),
            [(0, 4), (4, 4), (8, 2)]
        );
        // A partition mkfs would not make is still followed.
        assert_eq!(
            partition(3, 10, &[Some((0, 2)), None, Some((5, 5))]),
            [(0, 2), (2, 3), (5, 5)]
        );
        assert_eq!(
            partition(3, 10, &[None, None, None]),
            [(0, 4), (4, 4), (8, 2)]
        );
        assert_eq!(partition(1, 7, &[None]), [(0, 7)]);
    }
}
