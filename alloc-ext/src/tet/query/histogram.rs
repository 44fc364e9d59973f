//! Histograms as `numpy.histogram` makes them: `bins` equal bins over `[first, last]`
//! (the last bin closed), the edges NumPy's `linspace`, and each element's bin found by
//! NumPy's arithmetic and its edge corrections, so an element on an edge lands where
//! NumPy puts it. Elements below the range, above it and NaN are counted apart (NumPy
//! drops them).
//!
//! Counts are integers, so partials add in any order: the result is the same whatever
//! the thread count or the order of the index rows.

use alloc::vec;
use alloc::vec::Vec;

use tet_core::arith::u64_of;
use tet_core::tet::fold::{fold_f64, Value};
use tet_core::tet::select::{for_each_run, ChunkPart};

use super::*;

/// Most bins a histogram may ask for.
pub const MAX_BINS: u32 = 1 << 20;

/// Counts after the bins in each output cell: below the range, above it, NaN.
pub const EXTRA_SLOTS: usize = 3;

/// A histogram request: `bins` equal bins over `range`, or over the selection's range
/// (its smallest and largest elements, as NumPy's `a.min()`, `a.max()`; `[0, 1]` for an
/// empty selection; refused when it holds NaN or ±inf) when `range` is `None`.
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Histogram {
    /// Number of bins, 1 ..= [`MAX_BINS`].
    pub bins: u32,
    /// `[min, max]`, both finite, `min <= max`.
    pub range: Option<(f64, f64)>,
}

/// Why a histogram cannot be made.
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum HistogramError {
    /// `bins` is 0 or above [`MAX_BINS`].
    Bins(u64),
    /// The range's minimum is above its maximum.
    Order(f64, f64),
    /// A range bound given is not finite.
    NotFinite(f64, f64),
    /// The selection's range is not finite (it holds ±inf, or only NaN): NumPy refuses it
    /// too; give a range.
    AutoNotFinite(f64, f64),
}

impl fmt::Display for HistogramError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HistogramError::Bins(b) => {
                write!(f, "histogram.bins must be 1 ..= {MAX_BINS}, got {b}")
            }
            HistogramError::Order(a, b) => write!(
                f,
                "histogram.range [{a}, {b}]: the minimum must not be above the maximum"
            ),
            HistogramError::NotFinite(a, b) => {
                write!(f, "histogram.range [{a}, {b}] is not finite")
            }
            HistogramError::AutoNotFinite(a, b) => write!(
                f,
                "the selection's range [{a}, {b}] is not finite, so it gives no bins (as \
                 NumPy's autodetected range); give histogram.range"
            ),
        }
    }
}

/// Resolved bins: the outer edges (widened by 0.5 each way when equal, as NumPy does)
/// and every edge.
#[derive(Clone, Debug, PartialEq)]
pub struct Bins {
    first: f64,
    last: f64,
    n: usize,
    edges: Vec<f64>,
}

#[allow(clippy::as_conversions)]
fn usize_f64(v: usize) -> f64 {
    v as f64
}

impl Bins {
    /// `bins` bins over `[first, last]` as `numpy.histogram(a, bins, (first, last))`.
    pub fn new(bins: u32, first: f64, last: f64) -> Result<Bins, HistogramError> {
        if bins == 0 || bins > MAX_BINS {
            return Err(HistogramError::Bins(u64::from(bins)));
        }
        if first > last {
            return Err(HistogramError::Order(first, last));
        }
        if !(first.is_finite() && last.is_finite()) {
            return Err(HistogramError::NotFinite(first, last));
        }
        let (first, last) = if first == last {
            (first - 0.5, last + 0.5)
        } else {
            (first, last)
        };
        let n = usize::try_from(bins).map_err(|_| HistogramError::Bins(u64::from(bins)))?;
        // `numpy.linspace(first, last, n + 1)`: `i * step + first` (or `i / n * delta +
        // first` when the step underflows to 0), the last edge exactly `last`.
        let delta = last - first;
        let div = usize_f64(n);
        let step = delta / div;
        let mut edges = Vec::with_capacity(n.saturating_add(1));
        for i in 0..n {
            let fi = usize_f64(i);
            edges.push(if step == 0.0 {
                fi / div * delta + first
            } else {
                fi * step + first
            });
        }
        edges.push(last);
        Ok(Bins {
            first,
            last,
            n,
            edges,
        })
    }

    /// Number of bins.
    pub fn bins(&self) -> usize {
        self.n
    }

    /// The `bins + 1` edges, as `numpy.histogram` returns them.
    pub fn edges(&self) -> &[f64] {
        &self.edges
    }

    /// The outer edges.
    pub fn range(&self) -> (f64, f64) {
        (self.first, self.last)
    }

    /// Slots per output cell: the bins, then below, above, NaN.
    pub fn slots(&self) -> usize {
        self.n.saturating_add(EXTRA_SLOTS)
    }

    /// The slot of `x`: its bin (`0 .. bins`), or `bins` (below), `bins + 1` (above),
    /// `bins + 2` (NaN).
    #[inline]
    pub fn slot(&self, x: f64) -> usize {
        if x.is_nan() {
            return self.n.saturating_add(2);
        }
        if x < self.first {
            return self.n;
        }
        if x > self.last {
            return self.n.saturating_add(1);
        }
        // NumPy: `((x - first) / (last - first)) * n` truncated, the last edge in the last
        // bin, then one step down or up where the edges say so.
        let f = ((x - self.first) / (self.last - self.first)) * usize_f64(self.n);
        #[allow(
            clippy::as_conversions,
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss
        )]
        let mut i = (f as usize).min(self.n);
        if i == self.n {
            i = i.saturating_sub(1);
        }
        if self.edges.get(i).is_some_and(|e| x < *e) {
            i = i.saturating_sub(1);
        }
        if i.saturating_add(1) != self.n
            && self.edges.get(i.saturating_add(1)).is_some_and(|e| x >= *e)
        {
            i = i.saturating_add(1);
        }
        i
    }
}

/// The selection's range as NumPy's autodetection takes it: its smallest and largest
/// elements, `[0, 1]` for an empty selection; refused ([`HistogramError::AutoNotFinite`])
/// when a NaN or an infinity makes it not finite.
pub fn auto_range<'f, B: FrameBackend>(
    file: &TetFile<'f>,
    plan: &ReadPlan<'f>,
    dec: &mut ChunkDecoder<B>,
) -> Result<(f64, f64), QueryError> {
    if plan.selection.is_empty() {
        return Ok((0.0, 1.0));
    }
    let mut all = ChunkRange::default();
    for (i, part) in plan.parts.iter().enumerate() {
        let tile = decode_part(file, plan, i, dec)?;
        all.merge(&chunk_range(plan, part, tile));
    }
    all.check()
}

/// The smallest and largest elements a chunk's selection holds, and whether it holds a
/// NaN: the pass that finds a histogram's range (exact, so partials merge in any order).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ChunkRange {
    lo: f64,
    hi: f64,
    nan: bool,
}

impl Default for ChunkRange {
    fn default() -> Self {
        ChunkRange {
            lo: f64::INFINITY,
            hi: f64::NEG_INFINITY,
            nan: false,
        }
    }
}

impl ChunkRange {
    /// Merges another chunk's range.
    pub fn merge(&mut self, o: &ChunkRange) {
        self.lo = self.lo.min(o.lo);
        self.hi = self.hi.max(o.hi);
        self.nan |= o.nan;
    }

    /// The range as NumPy's autodetection takes it (NaN or ±inf refused).
    pub fn check(&self) -> Result<(f64, f64), QueryError> {
        if self.nan {
            return check_auto(f64::NAN, f64::NAN);
        }
        check_auto(self.lo, self.hi)
    }
}

/// The [`ChunkRange`] of the selected elements of `part` in `tile`.
pub fn chunk_range(plan: &ReadPlan<'_>, part: &ChunkPart, tile: &[u8]) -> ChunkRange {
    let dtype = plan.dtype();
    let mut r = ChunkRange::default();
    for_each_run(&plan.dataset, &plan.selection, part, |run| {
        let (lo, hi, nan) = fold_f64(
            dtype,
            tile,
            run.tile_index,
            run.count,
            run.tile_stride,
            (r.lo, r.hi, r.nan),
            |(lo, hi, nan), v| (lo.min(v), hi.max(v), nan | v.is_nan()),
        );
        r = ChunkRange { lo, hi, nan };
    });
    r
}

/// A minimum or maximum as `f64` (NaN when there is none).
#[allow(clippy::as_conversions)]
pub fn value_f64(v: Result<Value, tet_core::tet::fold::FoldError>) -> f64 {
    match v {
        Ok(Value::F64(f)) => f,
        Ok(Value::I64(i)) => i as f64,
        Ok(Value::U64(u)) => u as f64,
        Ok(Value::I128(i)) => i as f64,
        _ => f64::NAN,
    }
}

/// NumPy's check of an autodetected range (NaN propagates through `a.min()`, so a NaN
/// anywhere, like ±inf, gives a range that is not finite).
pub fn check_auto(lo: f64, hi: f64) -> Result<(f64, f64), QueryError> {
    if lo.is_finite() && hi.is_finite() {
        Ok((lo, hi))
    } else {
        Err(QueryError::Histogram(HistogramError::AutoNotFinite(lo, hi)))
    }
}

/// Bytes the counts of a histogram with `slots` slots per cell over `cells` output
/// cells take.
pub fn counts_bytes(cells: u64, slots: usize) -> u64 {
    cells.saturating_mul(u64_of(slots)).saturating_mul(8)
}

/// Adds the selected elements of `part` (decoded as `tile`) to `counts`: `bins.slots()`
/// counts per output cell, cells row-major over `out_shape` (the kept axes).
pub fn histogram_chunk(
    plan: &ReadPlan<'_>,
    axes: &Axes,
    part: &ChunkPart,
    tile: &[u8],
    bins: &Bins,
    counts: &mut [u64],
) {
    let ndim = plan.dataset.ndim();
    let dtype = plan.dtype();
    let slots = bins.slots();
    let sel_shape = plan.selection.shape();
    let last_kept = axes.kept(ndim.saturating_sub(1));
    for_each_run(&plan.dataset, &plan.selection, part, |r| {
        // The output cell of the run's first element.
        let mut cell = 0u64;
        for d in (0..ndim).filter(|d| axes.kept(*d)) {
            cell = cell
                .saturating_mul(sel_shape.as_slice().get(d).copied().unwrap_or(1))
                .saturating_add(r.ordinals.get(d).copied().unwrap_or(0));
        }
        let base = usize::try_from(cell)
            .unwrap_or(usize::MAX)
            .saturating_mul(slots);
        let step = if last_kept { slots } else { 0 };
        // The position by value: kept in a register through the run.
        fold_f64(
            dtype,
            tile,
            r.tile_index,
            r.count,
            r.tile_stride,
            base,
            |base, x| {
                if let Some(c) = counts.get_mut(base.saturating_add(bins.slot(x))) {
                    *c = c.wrapping_add(1);
                }
                base.saturating_add(step)
            },
        );
    });
}

/// A histogram on one thread: `h`'s range (or the selection's, found first), then every
/// chunk's elements counted. The output has the kept axes' shape with one more axis of
/// `bins + 3` counts (`u64`): the bins, then below the range, above it, NaN.
pub(super) fn histogram<'f, B: FrameBackend>(
    file: &TetFile<'f>,
    plan: &ReadPlan<'f>,
    h: Histogram,
    axes: &Axes,
    dec: &mut ChunkDecoder<B>,
) -> Result<Output, QueryError> {
    let (first, last) = match h.range {
        Some(r) => r,
        None => auto_range(file, plan, dec)?,
    };
    let bins = Bins::new(h.bins, first, last).map_err(QueryError::Histogram)?;
    let sel_shape = plan.selection.shape();
    let mut shape = axes.out_shape(sel_shape.as_slice());
    let cells = shape.iter().fold(1u64, |a, n| a.saturating_mul(*n));
    let needed = counts_bytes(cells, bins.slots());
    let budget = dec.budget();
    if needed > budget {
        return Err(QueryError::Budget {
            needed,
            budget,
            what: "the histogram's counts",
        });
    }
    let mut counts = vec![0u64; usize::try_from(needed.checked_div(8).unwrap_or(0)).unwrap_or(0)];
    for (i, part) in plan.parts.iter().enumerate() {
        let tile = decode_part(file, plan, i, dec)?;
        histogram_chunk(plan, axes, part, tile, &bins, &mut counts);
    }
    shape.push(u64_of(bins.slots()));
    Ok(Output {
        shape,
        values: counts.into_iter().map(Value::U64).collect(),
        nothing_left: None,
    })
}
