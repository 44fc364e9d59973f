//! The fold engine: read planning, decoding under the budget, scalar and partial-axis
//! reductions, quantiles.
//!
//! A [`ReadPlan`] lists the chunks a selection touches in grid order, with their index
//! rows, in `O(touched chunks)`. Execution is split into pieces a scheduler can run in any
//! order and on any thread, and a merge that is always done in grid order, so results are
//! bit-identical whatever the thread count or path:
//! * scalar reductions: one [`Acc`] per chunk ([`chunk_partial`]), merged left to right;
//! * partial-axis reductions: chunks that share their kept-axis grid coordinates form a
//!   [`Group`] owning a disjoint box of output cells; a group folds its chunks in grid
//!   order into its box ([`Group::fold_chunk`]), and boxes are scattered into the output.
//!
//! [`execute`] runs everything on one thread (firmware-sized callers, tests); `tet-host`
//! runs chunks and groups in parallel with the same pieces.

use alloc::collections::BTreeMap;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;
use core::fmt;

use tet_core::arith::u64_of;
use tet_core::tet::fold::{Acc, FoldError, Reduce, Value};
use tet_core::tet::select::{
    for_each_chunk, for_each_run, ChunkPart, SelectError, Selection, Slice, TouchedAxis,
};
use tet_core::tet::{Chunk, Codec, Coords, DType, Dataset, TetFile, MAX_NDIM};

use crate::decode::{ChunkDecoder, DecodeError, FrameBackend};

/// What to compute.
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Operation {
    /// A mergeable reduction.
    Reduce(Reduce),
    /// The `q` quantile (0 ≤ q ≤ 1), NumPy's default linear interpolation.
    Quantile(f64),
}

impl Operation {
    /// The operation's name in queries and output.
    pub fn name(&self) -> &'static str {
        match self {
            Operation::Reduce(r) => r.name(),
            Operation::Quantile(_) => "quantile",
        }
    }
}

/// Why a query cannot be answered.
#[derive(Debug)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum QueryError {
    /// The selection is invalid (a step below 1 names its axis).
    Select(SelectError),
    /// An axis to reduce is not one of the dataset's.
    Axis {
        /// The axis given.
        axis: usize,
        /// The dataset's rank.
        ndim: usize,
    },
    /// The quantile is outside `0 ..= 1`.
    Quantile(f64),
    /// A grid cell the selection needs has no readable index row.
    Chunk(Coords),
    /// The selection touches more chunks than the index has rows, so some are missing
    /// (checked before anything is enumerated).
    TooManyChunks {
        /// Rows in the index.
        rows: u64,
    },
    /// A chunk could not be decoded (corruption or budget).
    Decode(DecodeError),
    /// The operation needs an element, or the result does not fit its type, in an output
    /// cell (`cell` is its row-major index in the output; 0 for a scalar).
    Fold {
        /// What went wrong.
        error: FoldError,
        /// Output cell.
        cell: u64,
    },
    /// Quantiles or the output need more memory than the budget allows.
    Budget {
        /// Bytes needed.
        needed: u64,
        /// The budget.
        budget: u64,
        /// For what.
        what: &'static str,
    },
}

impl fmt::Display for QueryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QueryError::Select(SelectError::Step { axis, step }) => {
                write!(
                    f,
                    "selection axis {axis}: step must be at least 1, got {step}"
                )
            }
            QueryError::Select(SelectError::Rank { given, ndim }) => write!(
                f,
                "selection has {given} entries but the dataset has {ndim} axes"
            ),
            QueryError::Axis { axis, ndim } => write!(
                f,
                "axis {axis} is out of range for a dataset with {ndim} axes"
            ),
            QueryError::Quantile(q) => write!(f, "quantile q = {q} is outside 0 ..= 1"),
            QueryError::Chunk(c) => write!(f, "chunk {c} has no readable index row"),
            QueryError::TooManyChunks { rows } => write!(
                f,
                "the selection touches more chunks than the index has rows ({rows}): the file \
                 is missing chunks (run `tet-host verify`)"
            ),
            QueryError::Decode(e) => write!(f, "{e}"),
            QueryError::Fold { error, cell } => {
                let what = match error {
                    FoldError::Empty => "needs at least one element, the selection has none",
                    FoldError::Overflow => "overflows the output type",
                    FoldError::Ddof => "has ddof at least as large as the element count",
                };
                write!(f, "the result {what} (output cell {cell})")
            }
            QueryError::Budget {
                needed,
                budget,
                what,
            } => write!(
                f,
                "{what} needs {needed} bytes, over the memory budget of {budget} bytes"
            ),
        }
    }
}

impl core::error::Error for QueryError {}

/// The chunks a selection touches, with their rows, in grid order.
#[derive(Clone, Debug)]
pub struct ReadPlan<'a> {
    /// The dataset.
    pub dataset: Dataset<'a>,
    /// The normalised selection.
    pub selection: Selection,
    /// Touched chunks, grid order.
    pub parts: Vec<ChunkPart>,
    /// Index row of each part.
    pub rows: Vec<u64>,
    /// Stored bytes the plan reads.
    pub read_bytes: u64,
    /// Bytes the plan decodes (zstd chunks' `raw_byte_len`).
    pub decode_bytes: u64,
    /// Whether every touched chunk is raw and their payloads follow each other in plan
    /// order (the spec's linear-scan condition).
    pub contiguous_raw: bool,
}

/// Plans `slices` over `ds`. Rows are found in `O(1)` per chunk on canonical files; other
/// files get a map of the dataset's rows built once.
pub fn plan<'a>(
    file: &TetFile<'a>,
    ds: Dataset<'a>,
    slices: &[Slice],
) -> Result<ReadPlan<'a>, QueryError> {
    let shape: Vec<u64> = ds.shape().collect();
    let selection = Selection::new(&shape, slices).map_err(QueryError::Select)?;
    // A file holds one row per grid cell, so a selection touching more chunks than there
    // are rows cannot be answered; count before enumerating (each axis stops counting at
    // the row count), so a hostile shape cannot make planning loop or allocate.
    let rows_total = u64_of(file.rows().len());
    let cap = usize::try_from(rows_total.saturating_add(1)).unwrap_or(usize::MAX);
    let mut touched = 1u64;
    for (a, c) in selection.axes().iter().zip(ds.chunk_shape()) {
        let n = u64_of(TouchedAxis::new(*a, c).take(cap).count());
        touched = touched.saturating_mul(n);
        if n == 0 {
            touched = 0;
            break;
        }
    }
    if touched > rows_total {
        return Err(QueryError::TooManyChunks { rows: rows_total });
    }
    let mut parts = Vec::new();
    for_each_chunk(&ds, &selection, |p| parts.push(*p));
    let all_rows = file.rows();
    let id = u64::from(ds.id().0);
    let probe = |linear: u64| -> Option<u64> {
        let r = ds.first_canonical_row().checked_add(linear)?;
        let row = all_rows.get(usize::try_from(r).ok()?)?;
        (row.dataset_id.get() == id
            && ds.delinearize(linear).as_slice() == row.coords().get(..ds.ndim()).unwrap_or(&[]))
        .then_some(r)
    };
    let mut map: Option<BTreeMap<u64, u64>> = None;
    let mut rows = Vec::with_capacity(parts.len());
    let mut read_bytes = 0u64;
    let mut decode_bytes = 0u64;
    let mut contiguous_raw = true;
    let mut next_offset: Option<u64> = None;
    for p in &parts {
        let linear = ds
            .linear(p.coords.as_slice())
            .ok_or(QueryError::Chunk(p.coords))?;
        let row = match probe(linear) {
            Some(r) => r,
            None => {
                let m = map.get_or_insert_with(|| {
                    let mut m = BTreeMap::new();
                    for (i, row) in all_rows.iter().enumerate() {
                        if row.dataset_id.get() == id {
                            if let Some(l) = ds.linear(row.coords().get(..ds.ndim()).unwrap_or(&[]))
                            {
                                m.entry(l).or_insert(u64_of(i));
                            }
                        }
                    }
                    m
                });
                *m.get(&linear).ok_or(QueryError::Chunk(p.coords))?
            }
        };
        let raw = all_rows
            .get(usize::try_from(row).unwrap_or(usize::MAX))
            .ok_or(QueryError::Chunk(p.coords))?;
        read_bytes = read_bytes.saturating_add(raw.stored_byte_len.get());
        if Codec::from_wire(raw.codec.get()) == Some(Codec::Zstd) {
            decode_bytes = decode_bytes.saturating_add(raw.raw_byte_len.get());
            contiguous_raw = false;
        }
        let start = raw.payload_offset.get();
        if next_offset.is_some_and(|n| n != start) {
            contiguous_raw = false;
        }
        next_offset = start.checked_add(raw.stored_byte_len.get());
        rows.push(row);
    }
    Ok(ReadPlan {
        dataset: ds,
        selection,
        parts,
        rows,
        read_bytes,
        decode_bytes,
        contiguous_raw,
    })
}

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
    pub fn new(ndim: usize, axes: Option<&[usize]>) -> Result<Axes, QueryError> {
        let mut reduced = [axes.is_none(); MAX_NDIM];
        if let Some(list) = axes {
            for a in list {
                match reduced.get_mut(*a).filter(|_| *a < ndim) {
                    Some(slot) => *slot = true,
                    None => return Err(QueryError::Axis { axis: *a, ndim }),
                }
            }
        }
        Ok(Axes { ndim, reduced })
    }

    /// Whether every axis is reduced (a scalar result).
    pub fn scalar(&self) -> bool {
        self.reduced.iter().take(self.ndim).all(|r| *r)
    }

    fn kept(&self, d: usize) -> bool {
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
    origin: Vec<(u64, u64)>,
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
fn box_index(origin: &[(u64, u64)], axes: &Axes, ndim: usize, ordinals: &[u64]) -> u64 {
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
fn box_to_out(origin: &[(u64, u64)], out_shape: &[u64], cell: usize) -> u64 {
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
}

/// Turns accumulators into values (the first failing cell is an error).
pub fn finish(
    op: Reduce,
    dtype: DType,
    shape: Vec<u64>,
    accs: &[Acc],
) -> Result<Output, QueryError> {
    let mut values = Vec::with_capacity(accs.len());
    for (i, a) in accs.iter().enumerate() {
        values.push(a.result(op, dtype).map_err(|error| QueryError::Fold {
            error,
            cell: u64_of(i),
        })?);
    }
    Ok(Output { shape, values })
}

/// The decoded tile of part `i` of `plan` (a raw payload is returned in place).
pub fn decode_part<'d, 'f: 'd, B: FrameBackend>(
    file: &TetFile<'f>,
    plan: &ReadPlan<'f>,
    i: usize,
    dec: &'d mut ChunkDecoder<B>,
) -> Result<&'d [u8], QueryError> {
    let part = plan
        .parts
        .get(i)
        .ok_or(QueryError::Chunk(Coords::default()))?;
    let row = plan.rows.get(i).copied().unwrap_or(u64::MAX);
    let raw = file
        .rows()
        .get(usize::try_from(row).unwrap_or(usize::MAX))
        .ok_or(QueryError::Chunk(part.coords))?;
    let chunk: Chunk<'f> = file
        .checked_chunk(&plan.dataset, row, raw)
        .map_err(|_| QueryError::Chunk(part.coords))?;
    dec.decode(&chunk).map_err(QueryError::Decode)
}

/// Runs a whole query on one thread. Quantiles gather the selected elements of one group
/// of output cells at a time (checked against `budget`).
pub fn execute<'f, B: FrameBackend>(
    file: &TetFile<'f>,
    plan: &ReadPlan<'f>,
    op: Operation,
    axes: &Axes,
    dec: &mut ChunkDecoder<B>,
) -> Result<Output, QueryError> {
    let dtype = plan.dataset.dtype();
    let sel_shape = plan.selection.shape();
    let out_shape = axes.out_shape(sel_shape.as_slice());
    let budget = dec.budget();
    match op {
        Operation::Reduce(r) if axes.scalar() => {
            let mut total = Acc::new();
            for (i, part) in plan.parts.iter().enumerate() {
                let tile = decode_part(file, plan, i, dec)?;
                let acc = chunk_partial(plan, part, tile, r);
                total.merge(r, &acc);
            }
            finish(r, dtype, Vec::new(), core::slice::from_ref(&total))
        }
        Operation::Reduce(r) => {
            let mut gs = groups(plan, axes, budget)?;
            for g in gs.iter_mut() {
                for i in g.parts.clone() {
                    let tile = decode_part(file, plan, i, dec)?;
                    if let Some(part) = plan.parts.get(i) {
                        g.fold_chunk(plan, axes, part, tile, r);
                    }
                }
            }
            let cells = out_shape.iter().fold(1u64, |a, n| a.saturating_mul(*n));
            let mut out = vec![Acc::new(); usize::try_from(cells).unwrap_or(0)];
            for g in &gs {
                g.scatter(&out_shape, &mut out);
            }
            finish(r, dtype, out_shape, &out)
        }
        Operation::Quantile(q) => quantile(file, plan, q, axes, dec),
    }
}

/// Gathers the selected elements per output cell of each group and interpolates.
fn quantile<'f, B: FrameBackend>(
    file: &TetFile<'f>,
    plan: &ReadPlan<'f>,
    q: f64,
    axes: &Axes,
    dec: &mut ChunkDecoder<B>,
) -> Result<Output, QueryError> {
    if !(0.0..=1.0).contains(&q) {
        return Err(QueryError::Quantile(q));
    }
    let budget = dec.budget();
    let sel_shape = plan.selection.shape();
    let out_shape = axes.out_shape(sel_shape.as_slice());
    let cells = out_shape.iter().fold(1u64, |a, n| a.saturating_mul(*n));
    let per_cell = plan.selection.len().checked_div(cells.max(1)).unwrap_or(0);
    let dtype = plan.dataset.dtype();
    let mut values = vec![Value::F64(f64::NAN); usize::try_from(cells).unwrap_or(0)];
    // A count accumulator per cell tells where each element goes: reuse the groups.
    let gs = groups(plan, axes, budget)?;
    for g in &gs {
        let needed = u64_of(g.cells.len())
            .saturating_mul(per_cell)
            .saturating_mul(8);
        if needed > budget {
            return Err(QueryError::Budget {
                needed,
                budget,
                what: "the quantile's elements",
            });
        }
        let mut buckets: Vec<Vec<f64>> = vec![Vec::new(); g.cells.len()];
        let ndim = plan.dataset.ndim();
        for &i in &g.parts {
            let tile = decode_part(file, plan, i, dec)?;
            let Some(part) = plan.parts.get(i) else {
                continue;
            };
            for_each_run(&plan.dataset, &plan.selection, part, |r| {
                let last = ndim.saturating_sub(1);
                for k in 0..r.count {
                    let mut ordinals = r.ordinals;
                    if let Some(o) = ordinals.get_mut(last) {
                        *o = o.saturating_add(k);
                    }
                    let local = box_index(&g.origin, axes, ndim, &ordinals);
                    let idx = r.tile_index.saturating_add(k.saturating_mul(r.tile_stride));
                    if let (Some(b), Some(v)) = (
                        usize::try_from(local).ok().and_then(|l| buckets.get_mut(l)),
                        tile_element(dtype, tile, idx),
                    ) {
                        b.push(v);
                    }
                }
            });
        }
        for (cell, b) in buckets.iter_mut().enumerate() {
            let out_idx = box_to_out(&g.origin, &out_shape, cell);
            let v = interpolate(b, q).ok_or(QueryError::Fold {
                error: FoldError::Empty,
                cell: out_idx,
            })?;
            if let Some(slot) = usize::try_from(out_idx)
                .ok()
                .and_then(|i| values.get_mut(i))
            {
                *slot = Value::F64(v);
            }
        }
    }
    if cells > 0 && gs.is_empty() {
        return Err(QueryError::Fold {
            error: FoldError::Empty,
            cell: 0,
        });
    }
    Ok(Output {
        shape: out_shape,
        values,
    })
}

/// Element `index` of a tile as `f64`.
fn tile_element(dtype: DType, tile: &[u8], index: u64) -> Option<f64> {
    let size = usize::try_from(dtype.size()).ok()?;
    let at = usize::try_from(index).ok()?.checked_mul(size)?;
    tet_core::tet::fold::element_f64(dtype, tile.get(at..at.checked_add(size)?)?)
}

#[allow(clippy::as_conversions)]
fn i64_f64(v: i64) -> f64 {
    v as f64
}

#[allow(clippy::as_conversions)]
fn u64_f64(v: u64) -> f64 {
    v as f64
}

/// NumPy's default (`linear`) quantile of `v`; NaN when any element is NaN; `None` when
/// `v` is empty.
fn interpolate(v: &mut [f64], q: f64) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    if v.iter().any(|x| x.is_nan()) {
        return Some(f64::NAN);
    }
    v.sort_unstable_by(f64::total_cmp);
    let last = u64_of(v.len()).saturating_sub(1);
    let pos = q * u64_f64(last);
    let lo = floor(pos);
    let frac = pos - lo;
    #[allow(
        clippy::as_conversions,
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss
    )]
    let lo_i = lo as usize;
    let a = *v.get(lo_i)?;
    let b = *v.get(lo_i.saturating_add(1)).unwrap_or(&a);
    // NumPy's `_lerp`, to the operation: a + (b - a) t below t = 0.5, b - (b - a)(1 - t)
    // from there (so infinities give NaN exactly where NumPy's do).
    let diff = b - a;
    Some(if frac < 0.5 {
        a + diff * frac
    } else {
        b - diff * (1.0 - frac)
    })
}

fn floor(x: f64) -> f64 {
    #[allow(clippy::as_conversions, clippy::cast_possible_truncation)]
    let t = x as i64;
    let t = i64_f64(t);
    if t > x {
        t - 1.0
    } else {
        t
    }
}

/// Dataset coordinates of a row-major `position` (for argmin/argmax).
pub fn position_coords(shape: &[u64], mut position: u64) -> Vec<u64> {
    let mut out = vec![0u64; shape.len()];
    for (slot, n) in out.iter_mut().zip(shape).rev() {
        *slot = position.checked_rem(*n).unwrap_or(0);
        position = position.checked_div(*n).unwrap_or(0);
    }
    out
}

/// A short description of a plan (`--plan`).
pub fn describe(plan: &ReadPlan<'_>) -> String {
    alloc::format!(
        "{} chunk(s), {} bytes to read, {} bytes to decode{}",
        plan.parts.len(),
        plan.read_bytes,
        plan.decode_bytes,
        if plan.contiguous_raw && !plan.parts.is_empty() {
            ", raw payloads contiguous (linear scan)"
        } else {
            ""
        }
    )
}
