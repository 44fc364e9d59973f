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
//!
//! Inside, `plan` plans reads, `fold` holds the per-chunk and per-group pieces and
//! `quantile` gathers and interpolates.

mod cov;
mod fold;
mod histogram;
mod plan;
mod quantile;
pub use cov::Cov;
pub use histogram::{
    auto_range, check_auto, chunk_range, counts_bytes, histogram_chunk, value_f64, Bins,
    ChunkRange, Histogram, HistogramError, EXTRA_SLOTS, MAX_BINS,
};
use quantile::quantile;
pub use quantile::{numpy_median, numpy_quantile, numpy_quantiles};

pub use fold::{
    chunk_partial, finish, finish_groups, groups, groups_bytes, Axes, Group, MergePiece, Output,
    SumCell, STRIPE_PARTS,
};
pub use plan::{describe, plan, position_coords, ReadPlan};

use alloc::vec::Vec;
use core::fmt;

use tet_core::Category;

use tet_core::tet::fold::{Acc, FoldError, Reduce};
use tet_core::tet::select::SelectError;
use tet_core::tet::{Chunk, Coords, TetFile};

use crate::tet::decode::{ChunkDecoder, DecodeError, FrameBackend};

/// What to compute.
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Operation {
    /// A mergeable reduction.
    Reduce(Reduce),
    /// The `q` quantile (0 ≤ q ≤ 1), as `numpy.quantile` (default `linear` method).
    Quantile(Quantile),
    /// The median, as `numpy.median`: the middle element, or the mean of the middle two
    /// (which differs from the 0.5 quantile where infinities meet).
    Median,
    /// Several quantiles in one pass, as `numpy.quantile(a, [q, ...])`: the output has a
    /// first axis of one entry per `q`.
    Quantiles(Quantiles),
    /// A covariance or correlation matrix of a rank-2 selection (`numpy.cov`,
    /// `numpy.corrcoef`).
    Covariance(Cov),
    /// A histogram as `numpy.histogram` (with the elements outside the range and NaN
    /// counted apart).
    Histogram(Histogram),
}

/// A quantile's `q`, as NumPy takes it: an integer `q` (0 or 1) picks the first or last
/// sorted element; a float `q` interpolates (so `q = 0.0` over `[-inf, 1]` is NaN, `q = 0`
/// is `-inf`, exactly as `numpy.quantile`).
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Quantile {
    /// The quantile, 0 ..= 1.
    pub q: f64,
    /// Whether `q` was given as an integer.
    pub integral: bool,
}

/// Most quantiles one query may ask for (an [`Operation`] stays small and `Copy`).
pub const MAX_QUANTILES: usize = 16;

/// Up to [`MAX_QUANTILES`] quantiles, asked together.
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Quantiles {
    q: [f64; MAX_QUANTILES],
    /// Bit `i`: whether `q[i]` was given as an integer.
    integral: u16,
    len: u8,
}

impl Quantiles {
    /// The quantiles `qs`; `None` when there are none or more than [`MAX_QUANTILES`].
    pub fn new(qs: &[Quantile]) -> Option<Quantiles> {
        if qs.is_empty() || qs.len() > MAX_QUANTILES {
            return None;
        }
        let mut out = Quantiles {
            q: [0.0; MAX_QUANTILES],
            integral: 0,
            len: u8::try_from(qs.len()).ok()?,
        };
        for (i, (slot, q)) in out.q.iter_mut().zip(qs).enumerate() {
            *slot = q.q;
            if q.integral {
                out.integral |= 1u16.checked_shl(u32::try_from(i).ok()?)?;
            }
        }
        Some(out)
    }

    /// The quantiles, in the order given.
    pub fn to_vec(&self) -> Vec<Quantile> {
        self.q
            .iter()
            .take(usize::from(self.len))
            .enumerate()
            .map(|(i, q)| Quantile {
                q: *q,
                integral: u32::try_from(i)
                    .ok()
                    .and_then(|i| self.integral.checked_shr(i))
                    .is_some_and(|b| b & 1 == 1),
            })
            .collect()
    }
}

impl Operation {
    /// The operation's name in queries and output.
    pub fn name(&self) -> &'static str {
        match self {
            Operation::Reduce(r) => r.name(),
            Operation::Quantile(_) | Operation::Quantiles(_) => "quantile",
            Operation::Median => "median",
            Operation::Histogram(_) => "histogram",
            Operation::Covariance(c) if c.correlation => "correlation",
            Operation::Covariance(_) => "covariance",
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
        /// The axis given (negative: counted from the end).
        axis: i64,
        /// The dataset's rank.
        ndim: usize,
    },
    /// An axis to reduce is named more than once (`[0, 0]`, or `[1, -1]` in two dimensions).
    AxisRepeated {
        /// The axis, counted from the start.
        axis: usize,
        /// How the repeat was written.
        given: i64,
    },
    /// The quantile is outside `0 ..= 1`.
    Quantile(f64),
    /// Covariance and correlation take a rank-2 dataset and one axis of observations.
    CovRank(usize),
    /// A histogram's bins or range cannot be made.
    Histogram(HistogramError),
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

impl QueryError {
    /// The category, for exit codes: budgets are operational, unreadable chunks are the
    /// file's damage, the rest is a request the query cannot make.
    pub fn category(&self) -> Category {
        match self {
            QueryError::Budget { .. } => Category::Resource,
            QueryError::Decode(d) => d.category(),
            QueryError::Chunk(_) | QueryError::TooManyChunks { .. } => Category::Corrupt,
            QueryError::Fold { .. } => Category::Unsatisfiable,
            QueryError::Histogram(HistogramError::AutoNotFinite(..)) => Category::Unsatisfiable,
            QueryError::Histogram(_) | QueryError::CovRank(_) => Category::Usage,
            QueryError::Select(_)
            | QueryError::Axis { .. }
            | QueryError::AxisRepeated { .. }
            | QueryError::Quantile(_) => Category::Usage,
        }
    }
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
                "axis {axis} is out of range for a dataset with {ndim} axes (0 ..= {}, or \
                 -{ndim} ..= -1 from the end)",
                ndim.saturating_sub(1)
            ),
            QueryError::AxisRepeated { axis, given } if i64::try_from(*axis) == Ok(*given) => {
                write!(f, "axis {axis} is named twice")
            }
            QueryError::AxisRepeated { axis, given } => {
                write!(f, "axis {given} is axis {axis}, named twice")
            }
            QueryError::Quantile(q) => write!(f, "quantile q = {q} is outside 0 ..= 1"),
            QueryError::Histogram(h) => write!(f, "{h}"),
            QueryError::CovRank(n) => write!(
                f,
                "covariance and correlation take a 2-D dataset (this one has {n} axes) and \
                 one axis of observations (axis 1, NumPy's rowvar=True, when none is given)"
            ),
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
    match plan.mask {
        Some(m) => dec.decode_masked(&chunk, plan.dataset.dtype(), m),
        None => dec.decode(&chunk),
    }
    .map_err(QueryError::Decode)
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
    let dtype = plan.dtype();
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
            let mut gs = groups(plan, axes, Some(r), budget)?;
            for g in gs.iter_mut() {
                // The first stripe folds into the group's box, each later one into its
                // own box merged in stripe order (as `tet-host` folds them: the same
                // bits), so at most two boxes are held.
                let stripes: Vec<Vec<usize>> = g.stripes().map(<[usize]>::to_vec).collect();
                for (k, stripe) in stripes.iter().enumerate() {
                    let mut later = (k > 0).then(|| g.empty_box(plan, axes, r));
                    for &i in stripe {
                        let tile = decode_part(file, plan, i, dec)?;
                        if let Some(part) = plan.parts.get(i) {
                            later
                                .as_mut()
                                .unwrap_or(g)
                                .fold_chunk(plan, axes, part, tile, r);
                        }
                    }
                    match later {
                        Some(mut b) => {
                            b.flush(r);
                            g.merge_box(r, &b);
                        }
                        None => g.flush(r),
                    }
                }
            }
            finish_groups(r, dtype, out_shape, gs)
        }
        Operation::Quantile(q) => quantile(
            file,
            plan,
            Some(core::slice::from_ref(&q)),
            false,
            axes,
            dec,
        ),
        Operation::Quantiles(qs) => quantile(file, plan, Some(&qs.to_vec()), true, axes, dec),
        Operation::Median => quantile(file, plan, None, false, axes, dec),
        Operation::Histogram(h) => histogram::histogram(file, plan, h, axes, dec),
        Operation::Covariance(c) => cov::covariance(file, plan, c, axes, dec),
    }
}
