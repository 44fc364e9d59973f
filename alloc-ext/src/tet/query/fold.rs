//! The pieces of a reduction a scheduler runs in any order: per-chunk partials, groups
//! of chunks owning disjoint boxes of output cells, and the merge into an [`Output`].

use alloc::collections::BTreeMap;
use alloc::vec;
use alloc::vec::Vec;

use tet_core::arith::u64_of;
use tet_core::tet::fold::{Acc, Reduce, Value};
use tet_core::tet::select::{for_each_run, ChunkPart};
use tet_core::tet::{DType, MAX_NDIM};

use super::*;

/// The scalar partial of one chunk: every selected element of `part` in `tile` folded.
pub fn chunk_partial(plan: &ReadPlan<'_>, part: &ChunkPart, tile: &[u8], op: Reduce) -> Acc {
    let mut acc = Acc::new();
    let dtype = plan.dataset.dtype();
    for_each_run(&plan.dataset, &plan.selection, part, |r| {
        acc.fold_run(op, dtype, tile, r);
    });
    acc
}

/// Which axes a reduction keeps, and the output's shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Axes {
    ndim: usize,
    reduced: [bool; MAX_NDIM],
}

impl Axes {
    /// Reduce `axes` of a rank-`ndim` dataset (`None`: all of them, a scalar result).
    /// An axis named twice is refused, as NumPy refuses `axis=(0, 0)`.
    pub fn new(ndim: usize, axes: Option<&[usize]>) -> Result<Axes, QueryError> {
        let mut reduced = [axes.is_none(); MAX_NDIM];
        if let Some(list) = axes {
            for a in list {
                let given = i64::try_from(*a).unwrap_or(i64::MAX);
                match reduced.get_mut(*a).filter(|_| *a < ndim) {
                    Some(slot) if *slot => {
                        return Err(QueryError::AxisRepeated { axis: *a, given })
                    }
                    Some(slot) => *slot = true,
                    None => return Err(QueryError::Axis { axis: given, ndim }),
                }
            }
        }
        Ok(Axes { ndim, reduced })
    }

    /// [`Axes::new`] for axes as a query writes them: a negative axis counts from the end
    /// (`-1` is the last), as NumPy's `axis=-1`; one named twice, in either form, is
    /// refused.
    pub fn signed(ndim: usize, axes: Option<&[i64]>) -> Result<Axes, QueryError> {
        let Some(list) = axes else {
            return Axes::new(ndim, None);
        };
        let mut reduced = [false; MAX_NDIM];
        for a in list {
            let resolved = if *a < 0 {
                i64::try_from(ndim).ok().and_then(|n| n.checked_add(*a))
            } else {
                Some(*a)
            };
            let axis = resolved
                .and_then(|r| usize::try_from(r).ok())
                .filter(|r| *r < ndim)
                .ok_or(QueryError::Axis { axis: *a, ndim })?;
            match reduced.get_mut(axis) {
                Some(slot) if *slot => return Err(QueryError::AxisRepeated { axis, given: *a }),
                Some(slot) => *slot = true,
                None => return Err(QueryError::Axis { axis: *a, ndim }),
            }
        }
        Ok(Axes { ndim, reduced })
    }

    /// Whether every axis is reduced (a scalar result).
    pub fn scalar(&self) -> bool {
        self.reduced.iter().take(self.ndim).all(|r| *r)
    }

    /// Whether axis `d` is kept (not reduced), so it is an axis of the output.
    pub fn kept(&self, d: usize) -> bool {
        !self.reduced.get(d).copied().unwrap_or(true)
    }

    /// The output shape for a selection of `sel_shape`.
    pub fn out_shape(&self, sel_shape: &[u64]) -> Vec<u64> {
        sel_shape
            .iter()
            .enumerate()
            .filter(|(d, _)| self.kept(*d))
            .map(|(_, n)| *n)
            .collect()
    }
}

/// Chunks that share their kept-axis coordinates, and the box of output cells they own.
#[derive(Clone, Debug)]
pub struct Group {
    /// Indices into the plan's parts, grid order.
    pub parts: Vec<usize>,
    /// Per kept axis (in axis order): first output ordinal and extent of the box.
    pub(super) origin: Vec<(u64, u64)>,
    /// The box's accumulators, row-major over the kept axes.
    pub cells: Vec<Acc>,
    /// Per-chunk plain sums and NaN counts for the float sum kernel (reused).
    scratch: Vec<(f64, u64, u64)>,
}

/// Splits a plan into groups for a partial-axis reduction, in the order of their kept
/// coordinates. Output memory (one [`Acc`] per output cell) is checked against `budget`.
pub fn groups(plan: &ReadPlan<'_>, axes: &Axes, budget: u64) -> Result<Vec<Group>, QueryError> {
    let sel_shape = plan.selection.shape();
    let out_cells = axes
        .out_shape(sel_shape.as_slice())
        .iter()
        .fold(1u64, |a, n| a.saturating_mul(*n));
    // Each output cell: its accumulator in a group box, the scratch of the float sum
    // kernel, and its slot in the scattered output.
    let per_cell = core::mem::size_of::<Acc>()
        .saturating_mul(2)
        .saturating_add(core::mem::size_of::<(f64, u64, u64)>());
    let needed = out_cells.saturating_mul(u64_of(per_cell));
    if needed > budget {
        return Err(QueryError::Budget {
            needed,
            budget,
            what: "the partial-reduction output",
        });
    }
    let ndim = plan.dataset.ndim();
    let mut by_key: BTreeMap<Vec<u64>, usize> = BTreeMap::new();
    let mut out: Vec<Group> = Vec::new();
    for (i, p) in plan.parts.iter().enumerate() {
        let key: Vec<u64> = (0..ndim)
            .filter(|d| axes.kept(*d))
            .map(|d| p.coords.as_slice().get(d).copied().unwrap_or(0))
            .collect();
        let g = match by_key.get(&key) {
            Some(g) => *g,
            None => {
                let origin: Vec<(u64, u64)> = (0..ndim)
                    .filter(|d| axes.kept(*d))
                    .map(|d| {
                        (
                            p.first_ordinal.get(d).copied().unwrap_or(0),
                            p.count.get(d).copied().unwrap_or(0),
                        )
                    })
                    .collect();
                let n = origin.iter().fold(1u64, |a, (_, c)| a.saturating_mul(*c));
                let n = usize::try_from(n).map_err(|_| QueryError::Budget {
                    needed,
                    budget,
                    what: "the partial-reduction output",
                })?;
                out.push(Group {
                    parts: Vec::new(),
                    origin,
                    cells: vec![Acc::new(); n],
                    scratch: Vec::new(),
                });
                let g = out.len().saturating_sub(1);
                by_key.insert(key, g);
                g
            }
        };
        if let Some(group) = out.get_mut(g) {
            group.parts.push(i);
        }
    }
    // Keys sort like the output's row-major order; the map's order is that order.
    let order: Vec<usize> = by_key.values().copied().collect();
    let mut sorted = Vec::with_capacity(out.len());
    let mut slots: Vec<Option<Group>> = out.into_iter().map(Some).collect();
    for g in order {
        if let Some(group) = slots.get_mut(g).and_then(Option::take) {
            sorted.push(group);
        }
    }
    Ok(sorted)
}

impl Group {
    /// Folds the selected elements of `part` (whose decoded tile is `tile`) into the box.
    pub fn fold_chunk(
        &mut self,
        plan: &ReadPlan<'_>,
        axes: &Axes,
        part: &ChunkPart,
        tile: &[u8],
        op: Reduce,
    ) {
        let ndim = plan.dataset.ndim();
        let dtype = plan.dataset.dtype();
        let last = ndim.saturating_sub(1);
        let last_kept = axes.kept(last);
        let float = matches!(dtype, DType::F16 | DType::F32 | DType::F64);
        let sum_kernel = float
            && last_kept
            && matches!(
                op,
                Reduce::Sum | Reduce::NanSum | Reduce::Mean | Reduce::NanMean
            );
        if sum_kernel {
            self.fold_chunk_sum(plan, axes, part, tile, op);
            return;
        }
        let origin = &self.origin;
        let cells = &mut self.cells;
        for_each_run(&plan.dataset, &plan.selection, part, |r| {
            let local = box_index(origin, axes, ndim, &r.ordinals);
            let at = usize::try_from(local).unwrap_or(usize::MAX);
            if last_kept {
                let end = at.saturating_add(usize::try_from(r.count).unwrap_or(0));
                if let Some(outs) = cells.get_mut(at..end) {
                    Acc::fold_spread(outs, op, dtype, tile, r);
                }
            } else if let Some(acc) = cells.get_mut(at) {
                acc.fold_run(op, dtype, tile, r);
            }
        });
    }

    /// The float sum kernel: the chunk's elements are summed per output cell in plain
    /// `f64` (a chunk holds at most a few thousand per cell), then each cell's chunk sum
    /// joins its compensated total once.
    fn fold_chunk_sum(
        &mut self,
        plan: &ReadPlan<'_>,
        axes: &Axes,
        part: &ChunkPart,
        tile: &[u8],
        op: Reduce,
    ) {
        let ndim = plan.dataset.ndim();
        let dtype = plan.dataset.dtype();
        let n = self.cells.len();
        self.scratch.clear();
        self.scratch.resize(n, (0.0, 0, 0));
        let mut sums = vec![0f64; 0];
        let mut nans = vec![0u64; 0];
        let origin = &self.origin;
        let scratch = &mut self.scratch;
        let skip = op.skips_nan();
        for_each_run(&plan.dataset, &plan.selection, part, |r| {
            let local = box_index(origin, axes, ndim, &r.ordinals);
            let at = usize::try_from(local).unwrap_or(usize::MAX);
            let len = usize::try_from(r.count).unwrap_or(0);
            let end = at.saturating_add(len);
            let Some(cells) = scratch.get_mut(at..end) else {
                return;
            };
            sums.clear();
            sums.resize(len, 0.0);
            nans.clear();
            nans.resize(len, 0);
            Acc::spread_sum(
                &mut sums,
                &mut nans,
                dtype,
                tile,
                r.tile_index,
                r.tile_stride,
                skip,
            );
            for ((c, s), k) in cells.iter_mut().zip(&sums).zip(&nans) {
                c.0 += *s;
                c.1 = c.1.saturating_add(1);
                c.2 = c.2.saturating_add(*k);
            }
        });
        for (acc, (s, counted, nan)) in self.cells.iter_mut().zip(&self.scratch) {
            if *counted > 0 {
                acc.add_sum_block(op, *s, *counted, *nan);
            }
        }
    }

    /// Copies the box's results into `out` (row-major over the output shape).
    pub fn scatter(&self, out_shape: &[u64], out: &mut [Acc]) {
        for (i, acc) in self.cells.iter().enumerate() {
            let idx = box_to_out(&self.origin, out_shape, i);
            if let Some(slot) = usize::try_from(idx).ok().and_then(|x| out.get_mut(x)) {
                *slot = *acc;
            }
        }
    }
}

/// The row-major index inside a box (at `origin`) of the element with selection
/// `ordinals`.
pub(super) fn box_index(origin: &[(u64, u64)], axes: &Axes, ndim: usize, ordinals: &[u64]) -> u64 {
    let mut local = 0u64;
    let mut k = 0usize;
    for d in 0..ndim {
        if axes.kept(d) {
            let (first, count) = origin.get(k).copied().unwrap_or((0, 0));
            let o = ordinals.get(d).copied().unwrap_or(0);
            local = local
                .saturating_mul(count)
                .saturating_add(o.saturating_sub(first));
            k = k.saturating_add(1);
        }
    }
    local
}

/// The output index of cell `cell` (row-major in its box) of a box at `origin`.
pub(super) fn box_to_out(origin: &[(u64, u64)], out_shape: &[u64], cell: usize) -> u64 {
    let n = origin.len();
    let mut rem = u64_of(cell);
    let mut coords = [0u64; MAX_NDIM];
    for k in (0..n).rev() {
        let (_, c) = origin.get(k).copied().unwrap_or((0, 1));
        if let Some(slot) = coords.get_mut(k) {
            *slot = rem.checked_rem(c).unwrap_or(0);
        }
        rem = rem.checked_div(c).unwrap_or(0);
    }
    let mut idx = 0u64;
    for k in 0..n {
        let (first, _) = origin.get(k).copied().unwrap_or((0, 0));
        idx = idx
            .saturating_mul(out_shape.get(k).copied().unwrap_or(1))
            .saturating_add(first.saturating_add(coords.get(k).copied().unwrap_or(0)));
    }
    idx
}

/// A result: a scalar (empty shape) or an array, row-major.
#[derive(Clone, Debug, PartialEq)]
pub struct Output {
    /// Output shape (empty for a scalar).
    pub shape: Vec<u64>,
    /// Values, row-major.
    pub values: Vec<Value>,
    /// Output cells whose `nan_*` reduction had nothing left (every element NaN; the value
    /// is NaN, as NumPy's): the first one's row-major index and how many.
    pub nothing_left: Option<(u64, u64)>,
}

/// Turns accumulators into values (the first failing cell is an error).
pub fn finish(
    op: Reduce,
    dtype: DType,
    shape: Vec<u64>,
    accs: &[Acc],
) -> Result<Output, QueryError> {
    let mut values = Vec::with_capacity(accs.len());
    let mut nothing_left: Option<(u64, u64)> = None;
    for (i, a) in accs.iter().enumerate() {
        values.push(a.result(op, dtype).map_err(|error| QueryError::Fold {
            error,
            cell: u64_of(i),
        })?);
        if a.nothing_left(op) {
            let (first, n) = nothing_left.unwrap_or((u64_of(i), 0));
            nothing_left = Some((first, n.saturating_add(1)));
        }
    }
    Ok(Output {
        shape,
        values,
        nothing_left,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;

    #[test]
    fn negative_axes_count_from_the_end_and_repeats_are_refused() {
        let a = Axes::signed(3, Some(&[-1])).unwrap();
        assert_eq!(a, Axes::new(3, Some(&[2])).unwrap());
        assert_eq!(a.out_shape(&[4, 5, 6]), vec![4, 5]);
        assert_eq!(
            Axes::signed(3, Some(&[0, -3])).unwrap_err().to_string(),
            "axis -3 is axis 0, named twice"
        );
        assert_eq!(
            Axes::signed(2, Some(&[1, 1])).unwrap_err().to_string(),
            "axis 1 is named twice"
        );
        assert_eq!(
            Axes::new(2, Some(&[0, 0])).unwrap_err().to_string(),
            "axis 0 is named twice"
        );
        assert_eq!(
            Axes::signed(2, Some(&[-3])).unwrap_err().to_string(),
            "axis -3 is out of range for a dataset with 2 axes (0 ..= 1, or -2 ..= -1 from the end)"
        );
        assert!(Axes::signed(2, Some(&[i64::MIN])).is_err());
        assert!(Axes::signed(2, None).unwrap().scalar());
    }
}
