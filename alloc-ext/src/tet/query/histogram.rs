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
    /// [`Bins::with_f32_table`]: the slot of every `f32` whose top 16 bits are the
    /// index, or [`MIXED`] where those `f32`s fall in more than one slot.
    f32_slots: Vec<u16>,
}

/// An entry of [`Bins::with_f32_table`]'s table whose `f32`s do not share one slot.
const MIXED: u16 = u16::MAX;

/// Selections of at least this many `f32` elements are worth the table (it takes about
/// as long to build as counting this many elements the scalar way).
pub const F32_TABLE_MIN: u64 = 1 << 20;

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
            f32_slots: Vec::new(),
        })
    }

    /// These bins to count `plan`'s selection with: for a selection of at least
    /// [`F32_TABLE_MIN`] `f32` elements, with a table of the slot of each `f32` by its
    /// top 16 bits (sign,
    /// exponent, 7 fraction bits: a span of 1/128 of its magnitude), which
    /// [`histogram_chunk`] reads in place of [`Bins::slot`] for contiguous `f32` runs.
    /// An entry holds a slot only when the span's lowest and highest values have that
    /// slot and no edge lies between them, so the table's answer is always `slot`'s;
    /// spans across an edge (at most a few per edge) say [`MIXED`] and take `slot`.
    /// Nothing changes when there are more slots than the table holds.
    #[must_use]
    pub fn for_plan(self, plan: &ReadPlan<'_>) -> Bins {
        if plan.dtype() == tet_core::tet::DType::F32 && plan.selection.len() >= F32_TABLE_MIN {
            self.with_f32_table()
        } else {
            self
        }
    }

    /// These bins with a table of the slot of each `f32` by its top 16 bits; see
    /// [`Bins::for_plan`], which adds it when the selection is large enough to pay.
    #[must_use]
    pub fn with_f32_table(mut self) -> Bins {
        if !self.fast() {
            return self;
        }
        let mut table = Vec::with_capacity(1 << 16);
        for top in 0u32..1 << 16 {
            let a = f64::from(f32::from_bits(top << 16));
            let b = f64::from(f32::from_bits((top << 16) | 0xFFFF));
            let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
            let (sa, sb) = (self.slot(a), self.slot(b));
            // An edge in (lo, hi] would put the span's values in two bins.
            let at = self.edges.partition_point(|e| *e <= lo);
            let edge_inside = self.edges.get(at).is_some_and(|e| *e <= hi);
            table.push(match u16::try_from(sa) {
                Ok(v) if sa == sb && v != MIXED && !edge_inside => v,
                _ => MIXED,
            });
        }
        self.f32_slots = table;
        self
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
        // `f >= 0` here; truncated through `i64` (one instruction, where a conversion to
        // `usize` takes several), the last edge in the last bin.
        #[allow(
            clippy::as_conversions,
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss
        )]
        let mut i = (f as i64).clamp(
            0,
            i64::try_from(self.n).unwrap_or(i64::MAX).saturating_sub(1),
        ) as usize;
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

/// Sets of counts [`Scatter`] increments in turn: a run of equal slots (a smooth field,
/// whose neighbours share a bin) is then four short chains of increments through memory
/// instead of one long one.
const SETS: usize = 4;

/// The most slots a histogram takes the blocked path with: its [`SETS`] sets of `u32`
/// counts stay in L2.
const MAX_FAST_SLOTS: usize = 1 << 14;

impl Bins {
    /// Whether a histogram of these bins counts long runs in [`SETS`] sets of counts
    /// ([`Scatter`]): their counts stay small.
    fn fast(&self) -> bool {
        self.slots() <= MAX_FAST_SLOTS
    }
}

/// Counts of one output cell kept in [`SETS`] sets of `u32`, for the runs [`Bins::fast`]
/// takes, added to the cell's counts when the cell changes, before a set could overflow,
/// and at the end of a chunk.
struct Scatter {
    /// `SETS` sets of `slots` counts.
    sets: Vec<u32>,
    slots: usize,
    /// The cell's first slot in the counts, while counts are held.
    base: Option<usize>,
    /// Elements counted since the last flush.
    held: u64,
}

impl Scatter {
    fn new(slots: usize) -> Scatter {
        Scatter {
            sets: vec![0; slots.saturating_mul(SETS)],
            slots,
            base: None,
            held: 0,
        }
    }

    /// Adds the held counts to `counts` and clears them.
    fn flush(&mut self, counts: &mut [u64]) {
        let Some(base) = self.base.take() else { return };
        for set in self.sets.chunks_exact_mut(self.slots) {
            let cell = counts.get_mut(base..).unwrap_or_default();
            for (c, h) in cell.iter_mut().zip(set.iter_mut()) {
                *c = c.wrapping_add(u64::from(*h));
                *h = 0;
            }
        }
        self.held = 0;
    }

    /// Counts the contiguous `f32` (`size` 4) or `f64` (`size` 8) elements of `bytes` for
    /// the cell at `base`, four at a time, one into each set.
    fn add(&mut self, bytes: &[u8], size: usize, bins: &Bins, base: usize, counts: &mut [u64]) {
        if self.base != Some(base) || self.held > u64::from(u32::MAX >> 1) {
            self.flush(counts);
            self.base = Some(base);
        }
        let slots = self.slots;
        let (a, rest) = self.sets.split_at_mut(slots);
        let (b, rest) = rest.split_at_mut(slots);
        let (c, d) = rest.split_at_mut(slots);
        let bump = |set: &mut [u32], x: f64| {
            if let Some(k) = set.get_mut(bins.slot(x)) {
                *k = k.wrapping_add(1);
            }
        };
        let read = |e: &[u8]| -> f64 {
            if size == 4 {
                f64::from(e.try_into().map_or(0.0, f32::from_le_bytes))
            } else {
                e.try_into().map_or(0.0, f64::from_le_bytes)
            }
        };
        if size == 4 && bins.f32_slots.len() == 1 << 16 {
            let table = bins.f32_slots.as_slice();
            let slot = |e: &[u8]| -> usize {
                let bits = e.try_into().map_or(0, u32::from_le_bytes);
                match table.get(usize::try_from(bits >> 16).unwrap_or(0)) {
                    Some(v) if *v != MIXED => usize::from(*v),
                    _ => bins.slot(f64::from(f32::from_bits(bits))),
                }
            };
            let bump = |set: &mut [u32], k: usize| {
                if let Some(c) = set.get_mut(k) {
                    *c = c.wrapping_add(1);
                }
            };
            let mut quads = bytes.chunks_exact(16);
            for q in quads.by_ref() {
                let mut e = q.chunks_exact(4);
                for set in [&mut *a, &mut *b, &mut *c, &mut *d] {
                    if let Some(x) = e.next() {
                        bump(set, slot(x));
                    }
                }
            }
            for x in quads.remainder().chunks_exact(4) {
                bump(a, slot(x));
            }
            let n = bytes.len().checked_div(4).unwrap_or(0);
            self.held = self.held.saturating_add(u64_of(n));
            return;
        }
        let mut quads = bytes.chunks_exact(size.saturating_mul(SETS));
        for q in quads.by_ref() {
            let mut e = q.chunks_exact(size);
            for set in [&mut *a, &mut *b, &mut *c, &mut *d] {
                if let Some(x) = e.next() {
                    bump(set, read(x));
                }
            }
        }
        for x in quads.remainder().chunks_exact(size) {
            bump(a, read(x));
        }
        let n = bytes.len().checked_div(size).unwrap_or(0);
        self.held = self.held.saturating_add(u64_of(n));
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
    let size = match dtype {
        tet_core::tet::DType::F32 => 4,
        tet_core::tet::DType::F64 => 8,
        _ => 0,
    };
    for_each_run(&plan.dataset, &plan.selection, part, |run| {
        if size != 0 && run.tile_stride == 1 {
            let start = usize::try_from(run.tile_index.saturating_mul(u64_of(size)));
            let len = usize::try_from(run.count.saturating_mul(u64_of(size)));
            if let (Ok(start), Ok(len)) = (start, len) {
                let bytes = tile
                    .get(start..start.saturating_add(len))
                    .unwrap_or_default();
                r.merge(&if size == 4 {
                    range_f32(bytes)
                } else {
                    range_f64(bytes)
                });
                return;
            }
        }
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

/// Lanes of [`range_f32`] and [`range_f64`]: independent minima and maxima the compiler
/// keeps in vector registers.
const LANES: usize = 16;

/// The [`ChunkRange`] of contiguous little-endian `f32` elements, in [`LANES`] lanes
/// (exact: a minimum is the same in any order, and `f32` to `f64` keeps every value).
fn range_f32(bytes: &[u8]) -> ChunkRange {
    let mut lo = [f32::INFINITY; LANES];
    let mut hi = [f32::NEG_INFINITY; LANES];
    let mut nan = [false; LANES];
    let mut blocks = bytes.chunks_exact(LANES.saturating_mul(4));
    for b in blocks.by_ref() {
        for (j, e) in b.chunks_exact(4).enumerate() {
            let v = e.try_into().map_or(0.0, f32::from_le_bytes);
            if let (Some(l), Some(h), Some(n)) = (lo.get_mut(j), hi.get_mut(j), nan.get_mut(j)) {
                *l = l.min(v);
                *h = h.max(v);
                *n |= v.is_nan();
            }
        }
    }
    let mut r = ChunkRange::default();
    for e in blocks.remainder().chunks_exact(4) {
        let v = f64::from(e.try_into().map_or(0.0, f32::from_le_bytes));
        r.merge(&ChunkRange {
            lo: v,
            hi: v,
            nan: v.is_nan(),
        });
    }
    for ((l, h), n) in lo.iter().zip(&hi).zip(&nan) {
        r.merge(&ChunkRange {
            lo: f64::from(*l),
            hi: f64::from(*h),
            nan: *n,
        });
    }
    r
}

/// [`range_f32`] for `f64` elements.
fn range_f64(bytes: &[u8]) -> ChunkRange {
    let mut lo = [f64::INFINITY; LANES];
    let mut hi = [f64::NEG_INFINITY; LANES];
    let mut nan = [false; LANES];
    let mut blocks = bytes.chunks_exact(LANES.saturating_mul(8));
    for b in blocks.by_ref() {
        for (j, e) in b.chunks_exact(8).enumerate() {
            let v = e.try_into().map_or(0.0, f64::from_le_bytes);
            if let (Some(l), Some(h), Some(n)) = (lo.get_mut(j), hi.get_mut(j), nan.get_mut(j)) {
                *l = l.min(v);
                *h = h.max(v);
                *n |= v.is_nan();
            }
        }
    }
    let mut r = ChunkRange::default();
    for e in blocks.remainder().chunks_exact(8) {
        let v = e.try_into().map_or(0.0, f64::from_le_bytes);
        r.merge(&ChunkRange {
            lo: v,
            hi: v,
            nan: v.is_nan(),
        });
    }
    for ((l, h), n) in lo.iter().zip(&hi).zip(&nan) {
        r.merge(&ChunkRange {
            lo: *l,
            hi: *h,
            nan: *n,
        });
    }
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
    // Contiguous f32/f64 runs of one cell take the blocked path (when the run is long
    // enough to pay for a flush of the sets).
    let size = match dtype {
        tet_core::tet::DType::F32 => 4,
        tet_core::tet::DType::F64 => 8,
        _ => 0,
    };
    let blocked = size != 0 && !last_kept && bins.fast();
    let min_run = u64_of(slots.saturating_mul(SETS));
    let mut scatter: Option<Scatter> = None;
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
        if blocked && r.tile_stride == 1 && r.count >= min_run {
            let start = usize::try_from(r.tile_index.saturating_mul(u64_of(size)));
            let len = usize::try_from(r.count.saturating_mul(u64_of(size)));
            if let (Ok(start), Ok(len)) = (start, len) {
                let bytes = tile
                    .get(start..start.saturating_add(len))
                    .unwrap_or_default();
                scatter
                    .get_or_insert_with(|| Scatter::new(slots))
                    .add(bytes, size, bins, base, counts);
                return;
            }
        }
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
    if let Some(mut s) = scatter {
        s.flush(counts);
    }
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
    let bins = Bins::new(h.bins, first, last)
        .map_err(QueryError::Histogram)?
        .for_plan(plan);
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

#[cfg(test)]
#[allow(clippy::restriction, reason = "tests fail by panicking")]
mod tests {
    use super::*;

    /// Values on, beside and between the edges of `bins`, out of range, NaN and ±inf.
    fn probes(b: &Bins, seed: &mut u64) -> Vec<f64> {
        let mut v = alloc::vec![f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -0.0, 0.0];
        for e in b.edges() {
            v.extend([*e, f64::from_bits(e.to_bits().wrapping_add(1))]);
            v.push(f64::from_bits(e.to_bits().wrapping_sub(1)));
        }
        let (first, last) = b.range();
        for _ in 0..2000 {
            *seed ^= *seed << 13;
            *seed ^= *seed >> 7;
            *seed ^= *seed << 17;
            let u = (*seed >> 11) as f64 / (1u64 << 53) as f64;
            v.push(first + (last - first) * (u * 1.2 - 0.1));
        }
        v
    }

    /// The laned range passes equal a plain fold, with NaN anywhere and every length.
    #[test]
    fn laned_ranges_equal_a_plain_fold() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        for len in [0usize, 1, 5, 16, 17, 33, 100, 1000] {
            for nan_at in [None, Some(0), Some(len / 2), Some(len.saturating_sub(1))] {
                let mut xs: Vec<f64> = (0..len)
                    .map(|_| {
                        seed ^= seed << 13;
                        seed ^= seed >> 7;
                        seed ^= seed << 17;
                        (seed >> 20) as f64 / 1e9 - 4000.0
                    })
                    .collect();
                if let Some(k) = nan_at.filter(|k| *k < len) {
                    xs[k] = f64::NAN;
                }
                let plain = |xs: &[f64]| {
                    let mut r = ChunkRange::default();
                    for v in xs {
                        r.merge(&ChunkRange {
                            lo: *v,
                            hi: *v,
                            nan: v.is_nan(),
                        });
                    }
                    r
                };
                let b64: Vec<u8> = xs.iter().flat_map(|x| x.to_le_bytes()).collect();
                assert_eq!(range_f64(&b64), plain(&xs), "{len} {nan_at:?}");
                let x32: Vec<f64> = xs.iter().map(|x| f64::from(*x as f32)).collect();
                let b32: Vec<u8> = xs.iter().flat_map(|x| (*x as f32).to_le_bytes()).collect();
                let (a, b) = (range_f32(&b32), plain(&x32));
                assert_eq!((a.lo, a.hi, a.nan), (b.lo, b.hi, b.nan), "{len} {nan_at:?}");
            }
        }
    }

    /// The [`Scatter`] counts equal counting each value's [`Bins::slot`], over bins of
    /// every count and ranges of several scales, values on and beside every edge.
    #[test]
    fn scatter_counts_equal_the_scalar_ones() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for (lo, hi) in [
            (0.0, 1.0),
            (-3.5, 7.25),
            (1e-300, 3e-300),
            (-1e12, 1e12),
            (5.0, 5.0),
            (0.1, 0.3),
        ] {
            for n in [1u32, 2, 3, 7, 10, 64, 100, 1000, 4093] {
                let plain = Bins::new(n, lo, hi).unwrap();
                if !plain.fast() {
                    continue;
                }
                let table = plain.clone().with_f32_table();
                // The table's answer is `slot`'s for every f32 probe.
                for x in probes(&plain, &mut seed) {
                    let f = x as f32;
                    let t = table.f32_slots[(f.to_bits() >> 16) as usize];
                    if t != MIXED {
                        assert_eq!(usize::from(t), plain.slot(f64::from(f)), "{n} bins, {f}");
                    }
                }
                for b in [plain, table] {
                    let xs = probes(&b, &mut seed);
                    // f32 and f64 bytes through Scatter, with a flush between two cells.
                    for size in [4usize, 8] {
                        let bytes: Vec<u8> = if size == 4 {
                            xs.iter().flat_map(|x| (*x as f32).to_le_bytes()).collect()
                        } else {
                            xs.iter().flat_map(|x| x.to_le_bytes()).collect()
                        };
                        let slots = b.slots();
                        let mut want = alloc::vec![0u64; 2 * slots];
                        for (k, e) in bytes.chunks_exact(size).enumerate() {
                            let x = if size == 4 {
                                f64::from(f32::from_le_bytes(e.try_into().unwrap()))
                            } else {
                                f64::from_le_bytes(e.try_into().unwrap())
                            };
                            want[(k % 2) * slots + b.slot(x)] += 1;
                        }
                        // (Each element a run of its own: a flush per element, so few bins.)
                        if n <= 100 {
                            let mut counts = alloc::vec![0u64; 2 * slots];
                            let mut sc = Scatter::new(slots);
                            for (k, e) in bytes.chunks_exact(size).enumerate() {
                                sc.add(e, size, &b, (k % 2) * slots, &mut counts);
                            }
                            sc.flush(&mut counts);
                            assert_eq!(counts, want, "{n} bins, size {size}");
                        }
                        let mut counts = alloc::vec![0u64; slots];
                        let mut sc = Scatter::new(slots);
                        sc.add(&bytes, size, &b, 0, &mut counts);
                        sc.flush(&mut counts);
                        let whole: Vec<u64> =
                            (0..slots).map(|s| want[s] + want[slots + s]).collect();
                        assert_eq!(counts, whole, "{n} bins, size {size}, one run");
                    }
                }
            }
        }
    }

    /// Every `f32` of a span the table gives a slot has that slot: all 2^32 values would
    /// take minutes, so every 509th low half-word in each span, its ends and its middle.
    #[test]
    fn the_f32_table_agrees_with_slot_across_every_span() {
        for (n, lo, hi) in [
            (64u32, -1.0, 1.0),
            (10, 0.1, 0.3),
            (1000, -1e6, 3e7),
            (3, 5.0, 5.0),
        ] {
            let plain = Bins::new(n, lo, hi).unwrap();
            let table = plain.clone().with_f32_table();
            let mut definite = 0usize;
            for top in 0u32..1 << 16 {
                let t = table.f32_slots[top as usize];
                if t == MIXED {
                    continue;
                }
                definite += 1;
                for low in (0u32..1 << 16).step_by(509).chain([0x7FFF, 0xFFFF]) {
                    let f = f32::from_bits((top << 16) | low);
                    assert_eq!(usize::from(t), plain.slot(f64::from(f)), "{n} bins, {f:e}");
                }
            }
            // Nearly every span is definite: a few per edge are not.
            assert!(
                definite > (1 << 16) - 8 * (n as usize + 4),
                "{n} bins: {definite}"
            );
        }
    }
}
