//! First-fit data block allocation over the block groups' data areas.

use alloc::vec;
use alloc::vec::Vec;

use tet_core::Error;

use super::geometry::Geometry;
use super::{full, usize_of, Placement};

/// First-fit block allocator over block group data areas.
pub(super) struct Allocator {
    /// Each group's first data block and data block count.
    groups: Vec<(u64, u64)>,
    /// Each group's high-water mark: data blocks below it are taken or skipped.
    used: Vec<u64>,
    /// Blocks fragmented placement stepped over, per group: below the high-water mark
    /// but free.
    skipped: Vec<Vec<u64>>,
    cur: usize,
}

impl Allocator {
    pub(super) fn new(g: &Geometry) -> Self {
        let groups: Vec<(u64, u64)> = (0..g.b)
            .map(|i| {
                let (first, count, _) = g.data_area(i);
                (first, count)
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

    /// The next free data block for `placement`.
    pub(super) fn take(&mut self, placement: Placement) -> Result<u64, Error> {
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
                // `at < count` and the group lies inside the image: neither saturates.
                *used = at.saturating_add(1);
                return Ok(start.saturating_add(at));
            }
            self.cur = self.cur.saturating_add(1);
        }
        Err(full("data blocks"))
    }

    /// Blocks from the start of group `bi`'s data area up to its high-water mark, and
    /// the free blocks below it.
    pub(super) fn used_in(&self, bi: u32) -> (u64, &[u64]) {
        let i = usize_of(bi.into());
        (
            self.used.get(i).copied().unwrap_or(0),
            self.skipped.get(i).map_or(&[], Vec::as_slice),
        )
    }
}
