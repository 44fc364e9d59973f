//! Selections (hyperslabs) and the read plan: which chunks a selection touches and, inside
//! each chunk, which runs of elements to read. No allocation: chunks are enumerated axis
//! by axis, and runs are produced by a callback, so planning costs `O(touched chunks)` and
//! reading a chunk costs `O(selected elements)`.
//!
//! Slices follow Python's semantics: `start`/`stop` may be absent, negative values count
//! from the end, out-of-range bounds are clamped, `step` must be at least 1.

use super::{Coords, Dataset, MAX_NDIM};

/// One axis of a selection as written by a user (Python slice).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Slice {
    /// First index (default 0); negative counts from the end.
    pub start: Option<i64>,
    /// One past the last index (default the axis length); negative counts from the end.
    pub stop: Option<i64>,
    /// Stride (default 1); must be ≥ 1.
    pub step: Option<i64>,
}

/// One axis of a normalised selection: indices `start + k × step` for `k < count`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct AxisSel {
    /// First selected index.
    pub start: u64,
    /// Stride, ≥ 1.
    pub step: u64,
    /// Number of selected indices (0 for an empty selection).
    pub count: u64,
}

/// Why a selection is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum SelectError {
    /// `step` is 0 or negative on this axis.
    Step {
        /// The axis.
        axis: usize,
        /// The step given.
        step: i64,
    },
    /// More slices than the dataset has axes.
    Rank {
        /// Slices given.
        given: usize,
        /// The dataset's rank.
        ndim: usize,
    },
}

fn clamp(v: i64, len: u64) -> u64 {
    if v < 0 {
        len.saturating_sub(v.unsigned_abs())
    } else {
        v.unsigned_abs().min(len)
    }
}

impl Slice {
    /// The indices this slice selects on an axis of length `len` (`axis` names it in
    /// errors).
    pub fn normalize(&self, len: u64, axis: usize) -> Result<AxisSel, SelectError> {
        let step = self.step.unwrap_or(1);
        if step < 1 {
            return Err(SelectError::Step { axis, step });
        }
        let step = step.unsigned_abs();
        let start = self.start.map_or(0, |s| clamp(s, len));
        let stop = self.stop.map_or(len, |s| clamp(s, len));
        let span = stop.saturating_sub(start);
        let count = span.div_ceil(step.max(1));
        Ok(AxisSel { start, step, count })
    }
}

/// A normalised selection over every axis of a dataset.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Selection {
    ndim: usize,
    axes: [AxisSel; MAX_NDIM],
}

impl Selection {
    /// Normalises `slices` against `shape`; missing trailing slices select whole axes.
    pub fn new(shape: &[u64], slices: &[Slice]) -> Result<Selection, SelectError> {
        if slices.len() > shape.len() || shape.len() > MAX_NDIM {
            return Err(SelectError::Rank {
                given: slices.len(),
                ndim: shape.len(),
            });
        }
        let mut sel = Selection {
            ndim: shape.len(),
            axes: [AxisSel::default(); MAX_NDIM],
        };
        for (d, (slot, len)) in sel.axes.iter_mut().zip(shape).enumerate() {
            let s = slices.get(d).copied().unwrap_or_default();
            *slot = s.normalize(*len, d)?;
        }
        Ok(sel)
    }

    /// The whole dataset.
    pub fn all(shape: &[u64]) -> Selection {
        Selection::new(shape, &[]).unwrap_or_default()
    }

    /// The axes.
    pub fn axes(&self) -> &[AxisSel] {
        self.axes.get(..self.ndim).unwrap_or(&[])
    }

    /// Selected extent along each axis.
    pub fn shape(&self) -> Coords {
        let mut v = [0u64; MAX_NDIM];
        for (slot, a) in v.iter_mut().zip(self.axes()) {
            *slot = a.count;
        }
        Coords::from_slice(v.get(..self.ndim).unwrap_or(&[])).unwrap_or_default()
    }

    /// Number of selected elements (saturating).
    pub fn len(&self) -> u64 {
        self.axes()
            .iter()
            .fold(1u64, |a, x| a.saturating_mul(x.count))
    }

    /// Whether nothing is selected.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The chunk indices along one axis that a selection touches, in increasing order.
#[derive(Clone, Copy, Debug)]
pub struct TouchedAxis {
    sel: AxisSel,
    chunk: u64,
    next_ordinal: u64,
}

impl TouchedAxis {
    /// For an axis selection `sel` with chunk extent `chunk` (≥ 1).
    pub fn new(sel: AxisSel, chunk: u64) -> Self {
        TouchedAxis {
            sel,
            chunk: chunk.max(1),
            next_ordinal: 0,
        }
    }
}

impl Iterator for TouchedAxis {
    /// `(chunk index, ordinal of its first selected index, selected count in it)`.
    type Item = (u64, u64, u64);

    fn next(&mut self) -> Option<(u64, u64, u64)> {
        if self.next_ordinal >= self.sel.count {
            return None;
        }
        let first = self
            .sel
            .start
            .saturating_add(self.next_ordinal.saturating_mul(self.sel.step));
        let k = first.checked_div(self.chunk).unwrap_or(0);
        let end = k.saturating_add(1).saturating_mul(self.chunk);
        // Selected indices in [first, end): ordinals next .. next + n.
        let n = end
            .saturating_sub(first)
            .div_ceil(self.sel.step.max(1))
            .min(self.sel.count.saturating_sub(self.next_ordinal));
        let ordinal = self.next_ordinal;
        self.next_ordinal = self.next_ordinal.saturating_add(n.max(1));
        Some((k, ordinal, n))
    }
}

/// One chunk's share of a selection.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct ChunkPart {
    /// Grid coordinates.
    pub coords: Coords,
    /// Per axis: ordinal (in the selection) of the first selected index in this chunk.
    pub first_ordinal: [u64; MAX_NDIM],
    /// Per axis: how many selected indices fall in this chunk.
    pub count: [u64; MAX_NDIM],
}

/// A contiguous-in-selection run along the last axis of one chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Run {
    /// Index of the first element inside the decoded tile (row-major, in elements).
    pub tile_index: u64,
    /// Elements in the run.
    pub count: u64,
    /// Distance between consecutive elements inside the tile, in elements.
    pub tile_stride: u64,
    /// Row-major index of the first element in the whole dataset.
    pub position: u64,
    /// Distance between consecutive elements in the dataset, in elements.
    pub position_stride: u64,
    /// Ordinal of the first element along each axis of the selection.
    pub ordinals: [u64; MAX_NDIM],
}

/// Calls `f` for every run of `part` inside a tile of dataset `ds` selected by `sel`,
/// in row-major order.
pub fn for_each_run(ds: &Dataset<'_>, sel: &Selection, part: &ChunkPart, mut f: impl FnMut(&Run)) {
    let n = ds.ndim();
    if n == 0 || part.count.iter().take(n).any(|c| *c == 0) {
        return;
    }
    let Some(tile) = ds.tile_shape(part.coords.as_slice()) else {
        return;
    };
    let tile = tile.as_slice();
    let shape: [u64; MAX_NDIM] = {
        let mut v = [0u64; MAX_NDIM];
        for (slot, s) in v.iter_mut().zip(ds.shape()) {
            *slot = s;
        }
        v
    };
    let chunk: [u64; MAX_NDIM] = {
        let mut v = [0u64; MAX_NDIM];
        for (slot, s) in v.iter_mut().zip(ds.chunk_shape()) {
            *slot = s;
        }
        v
    };
    let axes = sel.axes();
    let at = |a: &[u64; MAX_NDIM], d: usize| a.get(d).copied().unwrap_or(0);
    // Strides (elements) inside the tile and in the dataset.
    let mut tile_stride = [0u64; MAX_NDIM];
    let mut ds_stride = [0u64; MAX_NDIM];
    let (mut ts, mut dsst) = (1u64, 1u64);
    for d in (0..n).rev() {
        if let (Some(t), Some(s)) = (tile_stride.get_mut(d), ds_stride.get_mut(d)) {
            *t = ts;
            *s = dsst;
        }
        ts = ts.saturating_mul(tile.get(d).copied().unwrap_or(0));
        dsst = dsst.saturating_mul(at(&shape, d));
    }
    let last = n.saturating_sub(1);
    let axis = |d: usize| axes.get(d).copied().unwrap_or_default();
    // Global index of selected ordinal `o` along axis d.
    let global = |d: usize, o: u64| axis(d).start.saturating_add(o.saturating_mul(axis(d).step));
    let coord = |d: usize| part.coords.as_slice().get(d).copied().unwrap_or(0);
    let mut k = [0u64; MAX_NDIM]; // offsets (in selected ordinals) along the outer axes
    loop {
        let mut tile_index = 0u64;
        let mut position = 0u64;
        let mut ordinals = [0u64; MAX_NDIM];
        for d in 0..n {
            let o =
                at(&part.first_ordinal, d).saturating_add(if d == last { 0 } else { at(&k, d) });
            if let Some(slot) = ordinals.get_mut(d) {
                *slot = o;
            }
            let g = global(d, o);
            let local = g.saturating_sub(coord(d).saturating_mul(at(&chunk, d)));
            tile_index = tile_index.saturating_add(local.saturating_mul(at(&tile_stride, d)));
            position = position.saturating_add(g.saturating_mul(at(&ds_stride, d)));
        }
        let step = axis(last).step;
        f(&Run {
            tile_index,
            count: at(&part.count, last),
            tile_stride: step,
            position,
            position_stride: step,
            ordinals,
        });
        // Advance the outer axes odometer.
        let mut d = last;
        loop {
            if d == 0 {
                return;
            }
            d = d.saturating_sub(1);
            let Some(slot) = k.get_mut(d) else { return };
            *slot = slot.saturating_add(1);
            if *slot < at(&part.count, d) {
                break;
            }
            *slot = 0;
        }
    }
}

/// Enumerates the chunks a selection touches, in grid (row-major) order, calling `f` for
/// each. Cost: `O(touched chunks × rank)`.
pub fn for_each_chunk(ds: &Dataset<'_>, sel: &Selection, mut f: impl FnMut(&ChunkPart)) {
    let n = ds.ndim();
    if n == 0 || sel.is_empty() {
        return;
    }
    let chunk: [u64; MAX_NDIM] = {
        let mut v = [0u64; MAX_NDIM];
        for (slot, s) in v.iter_mut().zip(ds.chunk_shape()) {
            *slot = s;
        }
        v
    };
    let axis_iter = |d: usize| {
        TouchedAxis::new(
            sel.axes().get(d).copied().unwrap_or_default(),
            chunk.get(d).copied().unwrap_or(1),
        )
    };
    let mut iters: [Option<TouchedAxis>; MAX_NDIM] = [None; MAX_NDIM];
    let mut cur = [(0u64, 0u64, 0u64); MAX_NDIM];
    for d in 0..n {
        let mut it = axis_iter(d);
        match it.next() {
            Some(c) => {
                if let Some(s) = cur.get_mut(d) {
                    *s = c;
                }
            }
            None => return,
        }
        if let Some(s) = iters.get_mut(d) {
            *s = Some(it);
        }
    }
    loop {
        let mut part = ChunkPart::default();
        let mut coords = [0u64; MAX_NDIM];
        for (d, (k, o, c)) in cur.iter().take(n).enumerate() {
            if let (Some(a), Some(b), Some(e)) = (
                coords.get_mut(d),
                part.first_ordinal.get_mut(d),
                part.count.get_mut(d),
            ) {
                *a = *k;
                *b = *o;
                *e = *c;
            }
        }
        part.coords = Coords::from_slice(coords.get(..n).unwrap_or(&[])).unwrap_or_default();
        f(&part);
        // Advance: last axis fastest.
        let mut d = n;
        loop {
            if d == 0 {
                return;
            }
            d = d.saturating_sub(1);
            let next = iters
                .get_mut(d)
                .and_then(|i| i.as_mut())
                .and_then(|i| i.next());
            match next {
                Some(c) => {
                    if let Some(s) = cur.get_mut(d) {
                        *s = c;
                    }
                    // Restart every faster axis.
                    for e in d.saturating_add(1)..n {
                        let mut it = axis_iter(e);
                        if let (Some(first), Some(s)) = (it.next(), cur.get_mut(e)) {
                            *s = first;
                        }
                        if let Some(s) = iters.get_mut(e) {
                            *s = Some(it);
                        }
                    }
                    break;
                }
                None => continue,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(start: Option<i64>, stop: Option<i64>, step: Option<i64>) -> Slice {
        Slice { start, stop, step }
    }

    #[test]
    fn python_slice_semantics() {
        let n = |sl: Slice, len| sl.normalize(len, 0).unwrap();
        assert_eq!(
            n(s(None, None, None), 5),
            AxisSel {
                start: 0,
                step: 1,
                count: 5
            }
        );
        assert_eq!(
            n(s(Some(-2), None, None), 5),
            AxisSel {
                start: 3,
                step: 1,
                count: 2
            }
        );
        assert_eq!(
            n(s(Some(0), Some(100), None), 2),
            AxisSel {
                start: 0,
                step: 1,
                count: 2
            }
        );
        assert_eq!(
            n(s(Some(1), Some(-1), Some(2)), 6),
            AxisSel {
                start: 1,
                step: 2,
                count: 2
            }
        );
        assert_eq!(n(s(Some(4), Some(2), None), 6).count, 0);
        assert_eq!(
            n(s(Some(-100), Some(3), None), 6),
            AxisSel {
                start: 0,
                step: 1,
                count: 3
            }
        );
        assert_eq!(n(s(Some(0), Some(10), Some(3)), 10).count, 4);
        assert_eq!(
            s(None, None, Some(0)).normalize(3, 2),
            Err(SelectError::Step { axis: 2, step: 0 })
        );
        assert!(s(None, None, Some(-1)).normalize(3, 0).is_err());
        assert!(Selection::new(&[2, 2], &[Slice::default(); 3]).is_err());
    }

    #[test]
    fn touched_chunks_skip_gaps_of_a_strided_selection() {
        // Indices 0, 10, 20 with chunks of 4: chunks 0, 2, 5.
        let sel = AxisSel {
            start: 0,
            step: 10,
            count: 3,
        };
        let t: Vec<_> = TouchedAxis::new(sel, 4).collect();
        assert_eq!(t, vec![(0, 0, 1), (2, 1, 1), (5, 2, 1)]);
        // Indices 1..7 with chunks of 3: chunks 0 (1,2), 1 (3,4,5), 2 (6).
        let sel = AxisSel {
            start: 1,
            step: 1,
            count: 6,
        };
        let t: Vec<_> = TouchedAxis::new(sel, 3).collect();
        assert_eq!(t, vec![(0, 0, 2), (1, 2, 3), (2, 5, 1)]);
    }
}
