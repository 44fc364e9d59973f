//! The pieces of a reduction a scheduler runs in any order: per-chunk partials, groups
//! of chunks owning disjoint boxes of output cells, and the merge into an [`Output`].

use alloc::collections::BTreeMap;
use alloc::vec;
use alloc::vec::Vec;

use tet_core::arith::u64_of;
use tet_core::tet::fold::{Acc, FSum, Reduce, Value};
use tet_core::tet::select::{for_each_run, ChunkPart};
use tet_core::tet::{DType, MAX_NDIM};

use super::*;

/// The scalar partial of one chunk: every selected element of `part` in `tile` folded.
pub fn chunk_partial(plan: &ReadPlan<'_>, part: &ChunkPart, tile: &[u8], op: Reduce) -> Acc {
    let mut acc = Acc::new();
    let dtype = plan.dtype();
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
    /// The box's accumulators, row-major over the kept axes (empty for an operation of
    /// the float sum kernel, whose box is `totals`, and in a stripe's box of plain sums).
    pub cells: Vec<Acc>,
    /// The float sum kernel's box, row-major over the kept axes: all an [`Acc`] of such an
    /// operation holds, in 32 bytes a cell instead of 144 (a time-mean map's box is
    /// written and read once a stripe, and its pages are what the pass costs).
    totals: Vec<SumCell>,
    /// Per-chunk plain sums and NaN counts for the float sum kernel (reused).
    scratch: SumScratch,
}

/// One output cell of the float sum kernel: its compensated total, and the elements and
/// NaN elements it took. [`Acc::of_sum_blocks`] gives the accumulator it stands for.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SumCell {
    sum: FSum,
    n: u64,
    nan: u64,
}

impl SumCell {
    fn add(&mut self, sum: f64, n: u64, nan: u64) {
        self.sum.add(sum);
        self.n = self.n.saturating_add(n);
        self.nan = self.nan.saturating_add(nan);
    }

    fn acc(&self, op: Reduce) -> Acc {
        Acc::of_sum_blocks(op, self.sum, self.n, self.nan)
    }
}

/// Bytes a partial-axis reduction of `plan` holds: for each output cell its accumulator
/// in a group box, the scratch of the float sum kernel, its slot in the scattered output,
/// and (a group folded in stripes) one stripe's box beside the group's.
pub fn groups_bytes(plan: &ReadPlan<'_>, axes: &Axes) -> u64 {
    let sel_shape = plan.selection.shape();
    let out_cells = axes
        .out_shape(sel_shape.as_slice())
        .iter()
        .fold(1u64, |a, n| a.saturating_mul(*n));
    let per_cell = core::mem::size_of::<Acc>()
        .saturating_mul(3)
        .saturating_add(core::mem::size_of::<(f64, u64, u64)>().saturating_mul(2));
    out_cells.saturating_mul(u64_of(per_cell))
}

/// Splits a plan into groups for a partial-axis reduction by `op` (`None`: boxes of
/// accumulators that no fold fills, for a caller that only needs the grouping), in the
/// order of their kept coordinates. Output memory (one [`Acc`] per output cell) is
/// checked against `budget`.
pub fn groups(
    plan: &ReadPlan<'_>,
    axes: &Axes,
    op: Option<Reduce>,
    budget: u64,
) -> Result<Vec<Group>, QueryError> {
    let totals = op.is_some_and(|r| sum_kernel(plan, axes, r));
    let needed = groups_bytes(plan, axes);
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
                let (cells, sums) = if totals {
                    (Vec::new(), vec![SumCell::default(); n])
                } else {
                    (vec![Acc::new(); n], Vec::new())
                };
                out.push(Group {
                    parts: Vec::new(),
                    origin,
                    cells,
                    totals: sums,
                    scratch: SumScratch::default(),
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

/// The float sum kernel's plain per-cell sums, element counts and NaN counts since the
/// last [`Group::flush`] (allocated on the first chunk the kernel folds).
#[derive(Clone, Debug, Default)]
struct SumScratch {
    sums: Vec<f64>,
    nans: Vec<u64>,
    /// Elements each cell took: the same for every cell, as every chunk of a group
    /// spans the whole box along the kept axes.
    count: u64,
}

/// Whether `op` over `plan` folds through the float sum kernel: a float sum or mean
/// whose last axis is kept (runs along it spread over distinct output cells).
fn sum_kernel(plan: &ReadPlan<'_>, axes: &Axes, op: Reduce) -> bool {
    let dtype = plan.dtype();
    matches!(dtype, DType::F16 | DType::F32 | DType::F64)
        && axes.kept(plan.dataset.ndim().saturating_sub(1))
        && matches!(
            op,
            Reduce::Sum | Reduce::NanSum | Reduce::Mean | Reduce::NanMean
        )
}

/// Adds plain per-cell sums to `cells`' compensated totals, each cell's block once.
fn absorb_sums(into: Into<'_>, op: Reduce, sums: &[f64], nans: &[u64], count: u64) {
    if count == 0 {
        return;
    }
    match into {
        Into::Cells(cells) => {
            for (acc, (s, nan)) in cells.iter_mut().zip(sums.iter().zip(nans)) {
                acc.add_sum_block(op, *s, count, *nan);
            }
        }
        Into::Totals(totals) => {
            for (t, (s, nan)) in totals.iter_mut().zip(sums.iter().zip(nans)) {
                t.add(*s, count, *nan);
            }
        }
    }
}

/// What a piece of a later box holds.
#[derive(Debug)]
enum Later<'a> {
    Cells(&'a [Acc]),
    Sums(&'a [f64], &'a [u64], u64),
}

/// The cells of a box a piece merges into.
#[derive(Debug)]
enum Into<'a> {
    Cells(&'a mut [Acc]),
    Totals(&'a mut [SumCell]),
}

/// One piece of a box merge ([`Group::merge_pieces`]).
#[derive(Debug)]
pub struct MergePiece<'a> {
    op: Reduce,
    into: Into<'a>,
    from: Later<'a>,
}

impl MergePiece<'_> {
    /// Merges the piece.
    pub fn run(self) {
        match (self.from, self.into) {
            (Later::Cells(c), Into::Cells(into)) => {
                for (a, o) in into.iter_mut().zip(c) {
                    a.merge(self.op, o);
                }
            }
            (Later::Sums(s, k, count), into) => absorb_sums(into, self.op, s, k, count),
            // A box of totals takes only plain sums: a stripe of an operation of the
            // float sum kernel folds into plain sums ([`Group::empty_box`]), by the same
            // test that gave the group its totals.
            (Later::Cells(_), Into::Totals(_)) => {
                debug_assert!(false, "a box of accumulators merged into one of totals");
            }
        }
    }
}

/// A group of more parts than this folds them in stripes of this many consecutive parts,
/// each into a box of its own, and merges the boxes in stripe order: a scheduler can fold
/// the stripes of one group on several threads (a time mean over a cube chunked one step
/// at a time is one group of every chunk), and the result does not depend on how many
/// it uses. A constant, so the bits of a result never depend on the machine.
pub const STRIPE_PARTS: usize = 32;

impl Group {
    /// The group's parts in stripes of [`STRIPE_PARTS`], in grid order; a group of at
    /// most that many parts is one stripe, folded straight into its box.
    pub fn stripes(&self) -> core::slice::Chunks<'_, usize> {
        self.parts.chunks(STRIPE_PARTS)
    }

    /// Whether the group folds in several stripes (and needs a box for each).
    pub fn striped(&self) -> bool {
        self.parts.len() > STRIPE_PARTS
    }

    /// Output cells of the box.
    pub fn width(&self) -> usize {
        let n = self
            .origin
            .iter()
            .fold(1u64, |a, (_, c)| a.saturating_mul(*c));
        usize::try_from(n).unwrap_or(usize::MAX)
    }

    /// An empty box over the same output cells, for one stripe of the parts: for an
    /// operation of the float sum kernel only its plain sums (a stripe's chunks add there,
    /// and [`Group::merge_box`] adds them to the totals), else a full box of
    /// accumulators.
    pub fn empty_box(&self, plan: &ReadPlan<'_>, axes: &Axes, op: Reduce) -> Group {
        let cells = if sum_kernel(plan, axes, op) {
            Vec::new()
        } else {
            vec![Acc::new(); self.cells.len()]
        };
        Group {
            parts: Vec::new(),
            origin: self.origin.clone(),
            cells,
            totals: Vec::new(),
            scratch: SumScratch::default(),
        }
    }

    /// Merges the box of a later stripe (flushed) into this one: the first stripe folds
    /// straight into the group's box, each later one into a box of its own merged here in
    /// stripe order, by every scheduler. A box of plain sums joins the totals as
    /// [`Group::flush`] adds them.
    pub fn merge_box(&mut self, op: Reduce, later: &Group) {
        for p in self.merge_pieces(op, later, usize::MAX) {
            p.run();
        }
    }

    /// [`Group::merge_box`] as independent pieces of at most `cells` output cells each,
    /// which a scheduler may run on any threads in any order (each cell's merge is its
    /// own): the same bits.
    pub fn merge_pieces<'a>(
        &'a mut self,
        op: Reduce,
        later: &'a Group,
        cells: usize,
    ) -> Vec<MergePiece<'a>> {
        let n = cells.max(1);
        let sc = &later.scratch;
        let from: Vec<Later<'a>> = if later.cells.is_empty() {
            sc.sums
                .chunks(n)
                .zip(sc.nans.chunks(n))
                .map(|(s, k)| Later::Sums(s, k, sc.count))
                .collect()
        } else {
            later.cells.chunks(n).map(Later::Cells).collect()
        };
        let into: Vec<Into<'a>> = if self.totals.is_empty() {
            self.cells.chunks_mut(n).map(Into::Cells).collect()
        } else {
            self.totals.chunks_mut(n).map(Into::Totals).collect()
        };
        into.into_iter()
            .zip(from)
            .map(|(into, from)| MergePiece { op, into, from })
            .collect()
    }

    /// Takes a box folded (and flushed) from the first stripe as this group's box; a box
    /// of plain sums is added to the group's empty totals.
    pub fn take_first(&mut self, op: Reduce, first: Group) {
        if first.cells.is_empty() || !self.totals.is_empty() {
            self.merge_box(op, &first);
        } else {
            self.cells = first.cells;
        }
    }

    /// Bytes one stripe's box takes at most (accumulators and the sum kernel's sums).
    pub fn box_bytes(&self) -> u64 {
        let per =
            core::mem::size_of::<Acc>().saturating_add(core::mem::size_of::<(f64, u64, u64)>());
        u64_of(self.width()).saturating_mul(u64_of(per))
    }

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
        let dtype = plan.dtype();
        let last_kept = axes.kept(ndim.saturating_sub(1));
        if sum_kernel(plan, axes, op) {
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

    /// The float sum kernel: the chunk's elements are added per output cell to plain
    /// `f64` sums, which join each cell's compensated total at [`Group::flush`].
    fn fold_chunk_sum(
        &mut self,
        plan: &ReadPlan<'_>,
        axes: &Axes,
        part: &ChunkPart,
        tile: &[u8],
        op: Reduce,
    ) {
        let ndim = plan.dataset.ndim();
        let dtype = plan.dtype();
        let n = self.width();
        let sc = &mut self.scratch;
        if sc.sums.len() != n {
            sc.sums = vec![0.0; n];
            sc.nans = vec![0; n];
        }
        // Each cell takes one element per selected index of the chunk along the reduced
        // axes.
        let per_cell = (0..ndim).filter(|d| !axes.kept(*d)).fold(1u64, |a, d| {
            a.saturating_mul(part.count.get(d).copied().unwrap_or(0))
        });
        sc.count = sc.count.saturating_add(per_cell);
        let origin = &self.origin;
        let skip = op.skips_nan();
        for_each_run(&plan.dataset, &plan.selection, part, |r| {
            let local = box_index(origin, axes, ndim, &r.ordinals);
            let at = usize::try_from(local).unwrap_or(usize::MAX);
            let len = usize::try_from(r.count).unwrap_or(0);
            let end = at.saturating_add(len);
            let (Some(sums), Some(nans)) = (sc.sums.get_mut(at..end), sc.nans.get_mut(at..end))
            else {
                return;
            };
            // Each element of a run along the kept last axis goes to its own cell.
            Acc::spread_sum(sums, nans, dtype, tile, r.tile_index, r.tile_stride, skip);
        });
    }

    /// Adds the float sum kernel's plain per-cell sums to the box's compensated totals
    /// and clears them. A scheduler calls it after each stripe (before merging or
    /// scattering the box): the sums of a stripe's chunks (at most [`STRIPE_PARTS`], each
    /// a few thousand elements a cell) are added in plain `f64` and join each cell's
    /// total once, so a chunk costs one pass over the small sums, not over the box.
    pub fn flush(&mut self, op: Reduce) {
        let sc = &self.scratch;
        let into = if !self.totals.is_empty() {
            Into::Totals(&mut self.totals)
        } else if !self.cells.is_empty() {
            Into::Cells(&mut self.cells)
        } else {
            // A box of plain sums: they wait for the group's merge.
            return;
        };
        absorb_sums(into, op, &sc.sums, &sc.nans, sc.count);
        let sc = &mut self.scratch;
        sc.sums.fill(0.0);
        sc.nans.fill(0);
        sc.count = 0;
    }

    /// Copies the box's cells into `out` (row-major over the output shape).
    fn scatter(&self, out_shape: &[u64], out: &mut OutCells) {
        fn put<T: Copy>(origin: &[(u64, u64)], shape: &[u64], from: &[T], out: &mut [T]) {
            for (i, c) in from.iter().enumerate() {
                let idx = box_to_out(origin, shape, i);
                if let Some(slot) = usize::try_from(idx).ok().and_then(|x| out.get_mut(x)) {
                    *slot = *c;
                }
            }
        }
        match out {
            OutCells::Accs(o) => put(&self.origin, out_shape, &self.cells, o),
            OutCells::Totals(o) => put(&self.origin, out_shape, &self.totals, o),
        }
    }

    /// Whether the box is the whole output, in its order (one group spanning it).
    fn is_whole(&self, out_shape: &[u64]) -> bool {
        self.origin.len() == out_shape.len()
            && self
                .origin
                .iter()
                .zip(out_shape)
                .all(|((first, count), n)| *first == 0 && count == n)
    }
}

/// A partial reduction's cells in output order: accumulators, or the float sum kernel's
/// totals.
#[derive(Debug)]
enum OutCells {
    Accs(Vec<Acc>),
    Totals(Vec<SumCell>),
}

/// The result of a partial-axis reduction by `op` whose groups `gs` are folded: their
/// cells gathered in output order (a single group spanning the output is taken as it
/// is, not copied) and turned into values as [`finish`] does.
pub fn finish_groups(
    op: Reduce,
    dtype: DType,
    out_shape: Vec<u64>,
    mut gs: Vec<Group>,
) -> Result<Output, QueryError> {
    let totals = gs.iter().any(|g| !g.totals.is_empty());
    if gs.len() == 1 && gs.first().is_some_and(|g| g.is_whole(&out_shape)) {
        if let Some(g) = gs.pop() {
            return if totals {
                finish_cells(op, dtype, out_shape, &g.totals, |c| c.acc(op))
            } else {
                finish(op, dtype, out_shape, &g.cells)
            };
        }
    }
    let cells = out_shape.iter().fold(1u64, |a, n| a.saturating_mul(*n));
    let n = usize::try_from(cells).unwrap_or(0);
    let mut out = if totals {
        OutCells::Totals(vec![SumCell::default(); n])
    } else {
        OutCells::Accs(vec![Acc::new(); n])
    };
    for g in &gs {
        g.scatter(&out_shape, &mut out);
    }
    drop(gs);
    match &out {
        OutCells::Accs(accs) => finish(op, dtype, out_shape, accs),
        OutCells::Totals(t) => finish_cells(op, dtype, out_shape, t, |c| c.acc(op)),
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
    finish_cells(op, dtype, shape, accs, |a| *a)
}

/// [`finish`] over cells that each give their accumulator.
fn finish_cells<C>(
    op: Reduce,
    dtype: DType,
    shape: Vec<u64>,
    cells: &[C],
    acc_of: impl Fn(&C) -> Acc,
) -> Result<Output, QueryError> {
    let mut values = Vec::with_capacity(cells.len());
    let mut nothing_left: Option<(u64, u64)> = None;
    for (i, c) in cells.iter().enumerate() {
        let a = acc_of(c);
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
