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
#[derive(Clone, PartialEq)]
pub struct Bins {
    first: f64,
    last: f64,
    n: usize,
    edges: Vec<f64>,
    /// [`Bins::with_f32_table`]: the slot of every `f32` whose top 16 bits are the
    /// index, or [`MIXED`] where those `f32`s fall in more than one slot.
    f32_slots: Vec<u16>,
    /// Beside `f32_slots` (empty when it is, or when there are too many runs to number):
    /// for each span, the number of the run of spans, consecutive in value order, that
    /// share its slot, or [`MIXED`] with it.
    f32_runs: Vec<u16>,
    /// The pages of finer spans `f32_slots` names for spans across an edge.
    f32_pages: Vec<u16>,
    /// `f32_runs` for the finer spans of `f32_pages`.
    page_runs: Vec<u16>,
    /// Each run's values and slot: every `f32` in `lo ..= hi` has `slot`, which lets
    /// [`Scatter`] count a block of a smooth field at once ([`inside_f32`]).
    run_bounds: Vec<RunBounds>,
}

/// The values of a run of spans with one slot ([`Bins::f32_runs`]).
#[derive(Clone, Copy, Debug, PartialEq)]
struct RunBounds {
    lo: f32,
    hi: f32,
    slot: usize,
}

impl fmt::Debug for Bins {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The tables' 2 × 65,536 entries say nothing a reader of the output needs.
        f.debug_struct("Bins")
            .field("first", &self.first)
            .field("last", &self.last)
            .field("n", &self.n)
            .field("edges", &self.edges)
            .field("f32_table", &!self.f32_slots.is_empty())
            .finish()
    }
}

/// An entry of [`Bins::with_f32_table`]'s tables whose `f32`s do not share one slot.
const MIXED: u16 = u16::MAX;
/// Entries of the first table from here to [`MIXED`] name a page of the second, where
/// the span's 256 finer spans (by bits 8 to 15) each have an entry. Slots lie below
/// ([`MAX_FAST_SLOTS`]).
const PAGE: u16 = 0x4000;
/// Entries in a page.
const PAGE_SPANS: usize = 256;

/// Selections of at least this many `f32` elements are worth the tables (with a few
/// bins they take about as long to build as counting this many elements the scalar
/// way), and of at least [`F32_TABLE_PER_SLOT`] per slot: the pages grow with the edges.
pub const F32_TABLE_MIN: u64 = 1 << 20;

/// Elements per slot a selection needs for [`Bins::for_plan`] to build the tables.
pub const F32_TABLE_PER_SLOT: u64 = 8192;

/// Most pages of finer spans: 512 KiB (with the first table's 128 KiB, the tables stay
/// under 700 KiB whatever the bins); spans past them take the arithmetic.
const MAX_PAGES: u16 = 1024;

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
            f32_runs: Vec::new(),
            f32_pages: Vec::new(),
            page_runs: Vec::new(),
            run_bounds: Vec::new(),
        })
    }

    /// These bins to count `plan`'s selection with: for a selection of at least
    /// [`F32_TABLE_MIN`] `f32` elements, with a table of the slot of each `f32` by its
    /// top 16 bits (sign,
    /// exponent, 7 fraction bits: a span of 1/128 of its magnitude), which
    /// [`histogram_chunk`] reads in place of [`Bins::slot`] for contiguous `f32` runs.
    /// An entry holds a slot only when the span's lowest and highest values have that
    /// slot and no edge lies between them, so the table's answer is always `slot`'s;
    /// a span across an edge (a few per edge) names a page of 256 finer spans with an
    /// entry each, kept by the same rule, and the rest (a few finer spans per edge) take
    /// `slot`.
    /// Nothing changes when there are more slots than the table holds.
    #[must_use]
    pub fn for_plan(self, plan: &ReadPlan<'_>) -> Bins {
        let min = F32_TABLE_MIN.max(u64_of(self.slots()).saturating_mul(F32_TABLE_PER_SLOT));
        if plan.dtype() == tet_core::tet::DType::F32 && plan.selection.len() >= min {
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
        let mut pages: Vec<u16> = Vec::new();
        for top in 0u32..1 << 16 {
            let entry = match self.span_slot(top << 16, 0xFFFF) {
                Some(v) => v,
                // A span across an edge gets a page of 256 finer spans, while pages last.
                None => match u16::try_from(pages.len() / PAGE_SPANS) {
                    Ok(p) if p < MAX_PAGES => {
                        pages.extend((0u32..256).map(|low| {
                            self.span_slot((top << 16) | (low << 8), 0xFF)
                                .unwrap_or(MIXED)
                        }));
                        PAGE.saturating_add(p)
                    }
                    _ => MIXED,
                },
            };
            table.push(entry);
        }
        self.f32_pages = pages;
        (self.f32_runs, self.page_runs, self.run_bounds) = runs_of(&table, &self.f32_pages);
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
        // NumPy's arithmetic, then one step down or up where the edges say so.
        let mut i = self.index(x);
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

    /// The slot every `f32` with bits `base ..= base | mask` has (`mask` a run of low
    /// ones), when provably one: its lowest and highest values have it, no edge lies
    /// between them, and (for a bin) both have one truncated index, so every value
    /// between has that index too (the arithmetic is monotone) and `slot`'s corrections
    /// are fixed thresholds, equal at both ends. `None` otherwise.
    fn span_slot(&self, base: u32, mask: u32) -> Option<u16> {
        let a = f64::from(f32::from_bits(base));
        let b = f64::from(f32::from_bits(base | mask));
        let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
        let (sa, sb) = (self.slot(a), self.slot(b));
        // An edge in (lo, hi] would put the span's values in two bins.
        let at = self.edges.partition_point(|e| *e <= lo);
        let edge_inside = self.edges.get(at).is_some_and(|e| *e <= hi);
        let same = sa == sb && (sa >= self.n || self.index(lo) == self.index(hi));
        match u16::try_from(sa) {
            Ok(v) if same && v < PAGE && !edge_inside => Some(v),
            _ => None,
        }
    }

    /// The slot of the `f32` with these bits by the tables ([`Bins::with_f32_table`]),
    /// or by the arithmetic where they do not say.
    #[inline]
    fn slot_f32(&self, bits: u32) -> usize {
        let top = usize::try_from(bits >> 16).unwrap_or(0);
        match self.f32_slots.get(top) {
            Some(v) if *v < PAGE => usize::from(*v),
            _ => self.slot_f32_fine(bits),
        }
    }

    /// [`Bins::slot_f32`] for a span across an edge: out of line, so the common case
    /// stays a load and a compare.
    #[inline(never)]
    fn slot_f32_fine(&self, bits: u32) -> usize {
        let top = usize::try_from(bits >> 16).unwrap_or(0);
        let fine = match self.f32_slots.get(top) {
            Some(v) if *v >= PAGE && *v != MIXED => {
                let at = usize::from(v.saturating_sub(PAGE))
                    .saturating_mul(PAGE_SPANS)
                    .saturating_add(usize::try_from((bits >> 8) & 0xFF).unwrap_or(0));
                self.f32_pages.get(at).copied()
            }
            _ => None,
        };
        match fine {
            Some(s) if s != MIXED => usize::from(s),
            _ => self.slot(f64::from(f32::from_bits(bits))),
        }
    }

    /// The bin NumPy's arithmetic gives `x` in `[first, last]` before its edge
    /// corrections: `((x - first) / (last - first)) * n` truncated, the last edge in the
    /// last bin. Monotone in `x`: each step rounds a monotone operation.
    #[inline]
    fn index(&self, x: f64) -> usize {
        let f = ((x - self.first) / (self.last - self.first)) * usize_f64(self.n);
        // `f >= 0` here; truncated through `i64` (one instruction, where a conversion to
        // `usize` takes several).
        #[allow(
            clippy::as_conversions,
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss
        )]
        let i = (f as i64).clamp(
            0,
            i64::try_from(self.n).unwrap_or(i64::MAX).saturating_sub(1),
        ) as usize;
        i
    }
}

/// The spans of an `f32` table in ascending value order: the negative ones from the most
/// negative (`0xFFFF`) to `-0` (`0x8000`), then `+0` (`0x0000`) up to `0x7FFF`.
fn spans_ascending() -> impl Iterator<Item = u16> {
    (0x8000..=0xFFFFu16).rev().chain(0..0x8000)
}

/// [`Bins::f32_runs`], [`Bins::page_runs`] and [`Bins::run_bounds`] for the tables:
/// spans and finer spans, walked in ascending value order, that have one slot share a
/// run. All empty when the runs are too many to number.
fn runs_of(table: &[u16], pages: &[u16]) -> (Vec<u16>, Vec<u16>, Vec<RunBounds>) {
    let mut runs = vec![MIXED; table.len()];
    let mut page_runs = vec![MIXED; pages.len()];
    let mut bounds: Vec<RunBounds> = Vec::new();
    let mut prev = MIXED;
    let none = || (Vec::new(), Vec::new(), Vec::new());
    // Adds the `f32`s with bits `base ..= base | mask` to the current run or a new one,
    // and returns the run's number.
    let mut visit = |prev: &mut u16, base: u32, mask: u32, slot: u16| -> Option<u16> {
        // The unit's lowest and highest values (a negative unit's lowest has the
        // largest magnitude; a unit of NaN has NaN bounds, which no value is inside).
        let (lo, hi) = if base & 0x8000_0000 != 0 {
            (f32::from_bits(base | mask), f32::from_bits(base))
        } else {
            (f32::from_bits(base), f32::from_bits(base | mask))
        };
        if slot != *prev {
            if bounds.len() >= usize::from(MIXED) {
                return None;
            }
            bounds.push(RunBounds {
                lo,
                hi,
                slot: usize::from(slot),
            });
            *prev = slot;
        } else if let Some(b) = bounds.last_mut() {
            b.hi = hi;
        }
        u16::try_from(bounds.len().saturating_sub(1)).ok()
    };
    for top in spans_ascending() {
        let at = usize::from(top);
        let base = u32::from(top) << 16;
        let Some(&entry) = table.get(at) else {
            return none();
        };
        if entry < PAGE {
            let Some(id) = visit(&mut prev, base, 0xFFFF, entry) else {
                return none();
            };
            if let Some(r) = runs.get_mut(at) {
                *r = id;
            }
        } else if entry != MIXED {
            let page = usize::from(entry.saturating_sub(PAGE)).saturating_mul(PAGE_SPANS);
            // Finer spans ascend by value: downwards through a negative span's bits.
            let fine: &mut dyn Iterator<Item = u32> = if top & 0x8000 != 0 {
                &mut (0u32..256).rev()
            } else {
                &mut (0u32..256)
            };
            for low in fine {
                let at = page.saturating_add(usize::try_from(low).unwrap_or(0));
                let Some(&slot) = pages.get(at) else {
                    return none();
                };
                if slot == MIXED {
                    prev = MIXED;
                    continue;
                }
                let Some(id) = visit(&mut prev, base | (low << 8), 0xFF, slot) else {
                    return none();
                };
                if let Some(r) = page_runs.get_mut(at) {
                    *r = id;
                }
            }
        } else {
            prev = MIXED;
        }
    }
    (runs, page_runs, bounds)
}

impl Bins {
    /// The run of the `f32` with these bits, when its span or finer span has one slot.
    #[inline]
    fn run_of(&self, bits: u32) -> Option<RunBounds> {
        let top = usize::try_from(bits >> 16).ok()?;
        let id = match *self.f32_runs.get(top)? {
            MIXED => {
                let entry = *self.f32_slots.get(top)?;
                if entry < PAGE || entry == MIXED {
                    return None;
                }
                let at = usize::from(entry.saturating_sub(PAGE))
                    .saturating_mul(PAGE_SPANS)
                    .saturating_add(usize::try_from((bits >> 8) & 0xFF).ok()?);
                *self.page_runs.get(at)?
            }
            id => id,
        };
        self.run_bounds.get(usize::from(id)).copied()
    }
}

/// Elements of a block [`Scatter`] tries to count at once.
const BLOCK: usize = 16;
/// Most blocks [`Scatter`] counts one element at a time before it tries a block at
/// once again, after blocks in a row could not be.
const MAX_SKIP: u32 = 64;
/// [`BLOCK`] as a count.
#[allow(clippy::as_conversions, clippy::cast_possible_truncation)]
const BLOCK_U32: u32 = BLOCK as u32;

/// Whether every element of `block` (little-endian `f32`, a whole number of groups of
/// 8) lies in `lo ..= hi`. NaN lies nowhere; a `-0` is inside where `+0` is, and
/// `slot` gives both one answer. Branch-free, so the compiler keeps it in vectors.
#[inline]
fn inside_f32(block: &[u8], lo: f32, hi: f32) -> bool {
    const W: usize = 8;
    let mut out = [0u32; W];
    for group in block.chunks_exact(4 * W) {
        let vals: [f32; W] = lanes(group);
        for (o, v) in out.iter_mut().zip(vals) {
            *o |= u32::from(!(v >= lo && v <= hi));
        }
    }
    out.iter().fold(0, |a, o| a | o) == 0
}

/// How many elements of `block` lie in `a` and how many in `b` (two different runs, so
/// no element is in both): a block across an edge, counted at once when the two
/// account for all of it. Branch-free, as [`inside_f32`].
#[inline]
fn count_two_f32(block: &[u8], a: RunBounds, b: RunBounds) -> (u32, u32) {
    const W: usize = 8;
    let mut in_a = [0u32; W];
    let mut in_b = [0u32; W];
    for group in block.chunks_exact(4 * W) {
        let vals: [f32; W] = lanes(group);
        for ((x, y), v) in in_a.iter_mut().zip(in_b.iter_mut()).zip(vals) {
            *x = x.wrapping_add(u32::from(v >= a.lo && v <= a.hi));
            *y = y.wrapping_add(u32::from(v >= b.lo && v <= b.hi));
        }
    }
    let sum = |c: [u32; W]| c.iter().fold(0u32, |s, v| s.wrapping_add(*v));
    (sum(in_a), sum(in_b))
}

/// The slot [`Scatter`] counts `block` in at once when its guess is the run of the
/// block's first element.
#[cfg(test)]
fn uniform_f32(bins: &Bins, block: &[u8]) -> Option<usize> {
    let first = u32::from_le_bytes(block.get(..4)?.try_into().ok()?);
    let r = bins.run_of(first)?;
    inside_f32(block, r.lo, r.hi).then_some(r.slot)
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
    /// Blocks in a row that could not be counted at once, and blocks left to count one
    /// element at a time before trying again: on a field that is not smooth the tries
    /// are soon made only once every [`MAX_SKIP`] blocks. Kept from run to run.
    misses: (u32, u32),
}

impl Scatter {
    fn new(slots: usize) -> Scatter {
        Scatter {
            sets: vec![0; slots.saturating_mul(SETS)],
            slots,
            base: None,
            held: 0,
            misses: (0, 0),
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
    /// the cell at `base`: `f32` blocks at once where the tables allow, other elements
    /// four at a time, one into each set.
    fn add(&mut self, bytes: &[u8], size: usize, bins: &Bins, base: usize, counts: &mut [u64]) {
        // Held counts are flushed before they pass 2^31, checked here: a longer run is
        // counted in pieces of 2^28 elements, so no `u32` count can wrap (blocks counted
        // at once all go to the first set).
        let piece = (1usize << 28).saturating_mul(size.max(1));
        if bytes.len() > piece {
            for p in bytes.chunks(piece) {
                self.add(p, size, bins, base, counts);
            }
            return;
        }
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
            let slot = |e: &[u8]| bins.slot_f32(e.try_into().map_or(0, u32::from_le_bytes));
            let bump = |set: &mut [u32], k: usize| {
                if let Some(c) = set.get_mut(k) {
                    *c = c.wrapping_add(1);
                }
            };
            let each = |a: &mut [u32], b: &mut [u32], c: &mut [u32], d: &mut [u32], run: &[u8]| {
                let mut quads = run.chunks_exact(16);
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
            };
            // A smooth field's blocks mostly lie inside one run of one slot: each block
            // is tried against the run of the last element counted before it.
            let mut blocks = bytes.chunks_exact(BLOCK.saturating_mul(4));
            if bins.run_bounds.is_empty() {
                each(a, b, c, d, bytes);
            } else {
                let last_run = |block: &[u8]| {
                    block
                        .rchunks_exact(4)
                        .next()
                        .and_then(|e| e.try_into().ok())
                        .and_then(|e| bins.run_of(u32::from_le_bytes(e)))
                };
                let mut guess: Option<RunBounds> = None;
                let mut prev: &[u8] = &[];
                let (mut misses, mut skip) = self.misses;
                for block in blocks.by_ref() {
                    if skip > 0 {
                        skip = skip.saturating_sub(1);
                        each(a, b, c, d, block);
                        prev = block;
                        guess = None;
                        continue;
                    }
                    if guess.is_none() {
                        guess = last_run(prev);
                    }
                    prev = block;
                    if let Some(r) = guess.filter(|r| inside_f32(block, r.lo, r.hi)) {
                        if let Some(k) = a.get_mut(r.slot) {
                            *k = k.wrapping_add(BLOCK_U32);
                        }
                        misses = 0;
                        continue;
                    }
                    // Across an edge: the run of the guess and that of the block's last.
                    let last = last_run(block);
                    if let (Some(r), Some(l)) = (guess, last) {
                        let (nr, nl) = count_two_f32(block, r, l);
                        if r != l && nr.wrapping_add(nl) == BLOCK_U32 {
                            for (slot, k) in [(r.slot, nr), (l.slot, nl)] {
                                if let Some(v) = a.get_mut(slot) {
                                    *v = v.wrapping_add(k);
                                }
                            }
                            guess = last;
                            misses = 0;
                            continue;
                        }
                    }
                    each(a, b, c, d, block);
                    guess = last;
                    misses = misses.saturating_add(1);
                    if misses >= 2 {
                        skip = (1u32 << misses.saturating_sub(2).min(6)).min(MAX_SKIP);
                    }
                }
                self.misses = (misses, skip);
                each(a, b, c, d, blocks.remainder());
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
                    range_lanes::<f32>(bytes)
                } else {
                    range_lanes::<f64>(bytes)
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

/// Lanes of [`range_lanes`]: independent minima and maxima the compiler
/// keeps in vector registers.
const LANES: usize = 16;

/// The element types the laned passes read, little-endian: `f32` and `f64`.
trait Lane: Copy + PartialOrd {
    const SIZE: usize;
    const INFINITY: Self;
    const NEG_INFINITY: Self;
    const NAN: Self;
    /// A flag of the element's width, so flags share the values' vector lanes.
    type Flag: Copy + Default + PartialEq + core::ops::BitOrAssign + From<bool>;
    fn from_le(bytes: &[u8]) -> Option<Self>;
    fn wide(self) -> f64;
}

impl Lane for f32 {
    const SIZE: usize = 4;
    const INFINITY: Self = f32::INFINITY;
    const NEG_INFINITY: Self = f32::NEG_INFINITY;
    const NAN: Self = f32::NAN;
    type Flag = u32;
    #[inline]
    fn from_le(bytes: &[u8]) -> Option<Self> {
        bytes.try_into().ok().map(f32::from_le_bytes)
    }
    #[inline]
    fn wide(self) -> f64 {
        f64::from(self)
    }
}

impl Lane for f64 {
    const SIZE: usize = 8;
    const INFINITY: Self = f64::INFINITY;
    const NEG_INFINITY: Self = f64::NEG_INFINITY;
    const NAN: Self = f64::NAN;
    type Flag = u64;
    #[inline]
    fn from_le(bytes: &[u8]) -> Option<Self> {
        bytes.try_into().ok().map(f64::from_le_bytes)
    }
    #[inline]
    fn wide(self) -> f64 {
        self
    }
}

/// The first `W` elements of `group` (NaN for any it is too short to hold).
#[inline]
fn lanes<T: Lane, const W: usize>(group: &[u8]) -> [T; W] {
    core::array::from_fn(|j| {
        let at = j.saturating_mul(T::SIZE);
        group
            .get(at..at.saturating_add(T::SIZE))
            .and_then(T::from_le)
            .unwrap_or(T::NAN)
    })
}

/// The [`ChunkRange`] of contiguous elements, in [`LANES`] lanes (exact: a minimum is
/// the same in any order, and `f32` to `f64` keeps every value).
fn range_lanes<T: Lane>(bytes: &[u8]) -> ChunkRange {
    let mut lo = [T::INFINITY; LANES];
    let mut hi = [T::NEG_INFINITY; LANES];
    let mut nan = [T::Flag::default(); LANES];
    let mut blocks = bytes.chunks_exact(LANES.saturating_mul(T::SIZE));
    for b in blocks.by_ref() {
        let vals: [T; LANES] = lanes(b);
        for (((l, h), n), v) in lo
            .iter_mut()
            .zip(hi.iter_mut())
            .zip(nan.iter_mut())
            .zip(vals)
        {
            // Selects (NaN leaves them as they are, and is flagged apart) and flags of
            // the elements' width, so each is one vector instruction.
            *l = if v < *l { v } else { *l };
            *h = if v > *h { v } else { *h };
            #[allow(clippy::eq_op)]
            let is_nan = v != v;
            *n |= T::Flag::from(is_nan);
        }
    }
    let mut r = ChunkRange::default();
    for e in blocks.remainder().chunks_exact(T::SIZE) {
        let v = T::from_le(e).map_or(0.0, T::wide);
        r.merge(&ChunkRange {
            lo: v,
            hi: v,
            nan: v.is_nan(),
        });
    }
    for ((l, h), n) in lo.iter().zip(&hi).zip(&nan) {
        r.merge(&ChunkRange {
            lo: l.wide(),
            hi: h.wide(),
            nan: *n != T::Flag::default(),
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
                assert_eq!(range_lanes::<f64>(&b64), plain(&xs), "{len} {nan_at:?}");
                let x32: Vec<f64> = xs.iter().map(|x| f64::from(*x as f32)).collect();
                let b32: Vec<u8> = xs.iter().flat_map(|x| (*x as f32).to_le_bytes()).collect();
                let (a, b) = (range_lanes::<f32>(&b32), plain(&x32));
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
                // The tables' answer is `slot`'s for every f32 probe.
                for x in probes(&plain, &mut seed) {
                    let f = x as f32;
                    assert_eq!(
                        table.slot_f32(f.to_bits()),
                        plain.slot(f64::from(f)),
                        "{n} bins, {f}"
                    );
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

    /// A block [`inside_f32`] finds in one run holds only elements of that slot, and the
    /// blocks of smooth ramps (through every edge, across `-0`/`+0`, with NaN and
    /// infinities dropped in) count as each element's `slot` does.
    #[test]
    fn blocks_counted_at_once_equal_the_scalar_counts() {
        for (n, lo, hi) in [
            (64u32, -150.0, 150.0),
            (10, 0.0, 1.0),
            (7, -3.5, 7.25),
            (1000, -1e6, 3e7),
            (3, 5.0, 5.0),
        ] {
            let b = Bins::new(n, lo, hi).unwrap().with_f32_table();
            assert!(!b.f32_runs.is_empty(), "{n} bins: runs numbered");
            let (first, last) = b.range();
            let width = last - first;
            let mut xs: Vec<f32> = Vec::new();
            // Ramps of several slopes over and past the range.
            for steps in [100_000usize, 7_919, 1_000] {
                for k in 0..steps {
                    let t = k as f64 / steps as f64;
                    xs.push((first - 0.1 * width + 1.2 * width * t) as f32);
                }
            }
            // Runs of zeros of both signs, one NaN, both infinities inside blocks.
            xs.extend((0..4 * BLOCK).map(|k| if k % 3 == 0 { -0.0f32 } else { 0.0 }));
            for (at, v) in [
                (5usize, f32::NAN),
                (70, f32::INFINITY),
                (140, f32::NEG_INFINITY),
            ] {
                xs[at] = v;
            }
            let bytes: Vec<u8> = xs.iter().flat_map(|x| x.to_le_bytes()).collect();
            let mut at_once = 0usize;
            for block in bytes.chunks_exact(BLOCK * 4) {
                if let Some(s) = uniform_f32(&b, block) {
                    at_once += 1;
                    for e in block.chunks_exact(4) {
                        let x = f32::from_le_bytes(e.try_into().unwrap());
                        assert_eq!(b.slot(f64::from(x)), s, "{n} bins: {x:e} in a block of {s}");
                    }
                }
            }
            assert!(at_once > 500, "{n} bins: {at_once} blocks at once");
            for at in [5usize, 70] {
                // The blocks holding the NaN and the +inf (among values below) are not
                // counted at once.
                let block = at / BLOCK * BLOCK * 4;
                assert_eq!(uniform_f32(&b, &bytes[block..][..BLOCK * 4]), None, "{at}");
            }
            let slots = b.slots();
            let mut want = alloc::vec![0u64; slots];
            for x in &xs {
                want[b.slot(f64::from(*x))] += 1;
            }
            let mut counts = alloc::vec![0u64; slots];
            let mut sc = Scatter::new(slots);
            // In pieces that start off a block's alignment.
            for piece in bytes.chunks(4 * 1001) {
                sc.add(piece, 4, &b, 0, &mut counts);
            }
            sc.flush(&mut counts);
            assert_eq!(counts, want, "{n} bins");
        }
    }

    /// Random bins over random ranges, counted over random walks of random step sizes
    /// (smooth, rough, across zero, with NaN and infinities dropped in): the blocked
    /// counts equal each element's `slot`.
    #[test]
    fn random_walks_count_as_the_scalar_slots() {
        let mut seed = 0x51f1_5eed_d00d_cafeu64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let unit = |r: u64| (r >> 11) as f64 / (1u64 << 53) as f64;
        for case in 0..40 {
            let n = 1 + (next() % 300) as u32;
            let scale = 10f64.powi((next() % 12) as i32 - 6);
            let lo = (unit(next()) - 0.5) * 4.0 * scale;
            let hi = lo + unit(next()) * 3.0 * scale;
            let b = Bins::new(n, lo, hi).unwrap().with_f32_table();
            let (first, last) = b.range();
            let width = last - first;
            let step = width * 10f64.powi(-((next() % 6) as i32)) / f64::from(n);
            let mut x = first + unit(next()) * width;
            let mut xs: Vec<f32> = Vec::with_capacity(20_000);
            for _ in 0..20_000 {
                x += (unit(next()) - 0.5) * step;
                if x < first - 0.2 * width || x > last + 0.2 * width {
                    x = first + unit(next()) * width;
                }
                let r = next() % 5000;
                xs.push(match r {
                    0 => f32::NAN,
                    1 => f32::INFINITY,
                    2 => f32::NEG_INFINITY,
                    _ => x as f32,
                });
            }
            let bytes: Vec<u8> = xs.iter().flat_map(|v| v.to_le_bytes()).collect();
            let slots = b.slots();
            let mut want = alloc::vec![0u64; slots];
            for v in &xs {
                want[b.slot(f64::from(*v))] += 1;
            }
            let mut counts = alloc::vec![0u64; slots];
            let mut sc = Scatter::new(slots);
            let piece = 4 * (1 + (next() % 3000) as usize);
            for p in bytes.chunks(piece) {
                sc.add(p, 4, &b, 0, &mut counts);
            }
            sc.flush(&mut counts);
            assert_eq!(
                counts, want,
                "case {case}: {n} bins over [{lo}, {hi}], step {step}"
            );
        }
    }

    /// Spans in one run share a slot, and so does every span between them in value
    /// order; the run changes wherever the slot does.
    #[test]
    fn runs_number_stretches_of_one_slot() {
        // Zero inside bin 30 (no edge at it).
        let b = Bins::new(64, -1.0, 1.1).unwrap().with_f32_table();
        let order: Vec<u16> = spans_ascending().collect();
        assert_eq!(order.len(), 1 << 16);
        let mut last: Option<(u16, u16)> = None;
        for top in order {
            let (slot, run) = (b.f32_slots[top as usize], b.f32_runs[top as usize]);
            assert_eq!(slot >= PAGE, run == MIXED, "span {top:#06x}");
            if run != MIXED {
                let r = b.run_bounds[run as usize];
                assert_eq!(r.slot, usize::from(slot), "span {top:#06x}");
                for low in [0u32, 0x8000, 0xFFFF] {
                    let f = f32::from_bits((u32::from(top) << 16) | low);
                    assert!(
                        f.is_nan() || (r.lo <= f && f <= r.hi),
                        "span {top:#06x}: {f:e}"
                    );
                }
            }
            if let Some((ps, pr)) = last.filter(|_| run != MIXED) {
                assert_eq!(ps == slot, pr == run, "span {top:#06x}");
            }
            last = (run != MIXED).then_some((slot, run));
        }
        // Positive and negative zero lie next to each other in one run of bin 30.
        assert_eq!(b.f32_runs[0x0000], b.f32_runs[0x8000]);
        assert_eq!((b.f32_slots[0x0000], b.f32_slots[0x8000]), (30, 30));
    }

    /// Every `f32` of a span the tables give a slot has that slot: all 2^32 values would
    /// take minutes, so every 509th low half-word in each span, its ends and its middle,
    /// and in a span across an edge every value of each finer span with a slot.
    #[test]
    fn the_f32_tables_agree_with_slot_across_every_span() {
        for (n, lo, hi) in [
            (64u32, -1.0, 1.0),
            (10, 0.1, 0.3),
            (1000, -1e6, 3e7),
            (3, 5.0, 5.0),
        ] {
            let plain = Bins::new(n, lo, hi).unwrap();
            let table = plain.clone().with_f32_table();
            let (mut definite, mut paged, mut fine_mixed) = (0usize, 0usize, 0usize);
            for top in 0u32..1 << 16 {
                let t = table.f32_slots[top as usize];
                if t == MIXED {
                    continue;
                }
                if t < PAGE {
                    definite += 1;
                    for low in (0u32..1 << 16).step_by(509).chain([0x7FFF, 0xFFFF]) {
                        let f = f32::from_bits((top << 16) | low);
                        assert_eq!(usize::from(t), plain.slot(f64::from(f)), "{n} bins, {f:e}");
                    }
                    continue;
                }
                paged += 1;
                for low in 0u32..1 << 16 {
                    let bits = (top << 16) | low;
                    let f = f32::from_bits(bits);
                    let fine =
                        table.f32_pages[usize::from(t - PAGE) * PAGE_SPANS + (low >> 8) as usize];
                    if fine == MIXED {
                        fine_mixed += 1;
                    }
                    assert_eq!(
                        table.slot_f32(bits),
                        plain.slot(f64::from(f)),
                        "{n} bins, {f:e}"
                    );
                }
            }
            // Nearly every span is definite: a few per edge are not, and have pages in
            // which nearly every finer span is definite.
            assert!(
                definite > (1 << 16) - 8 * (n as usize + 4),
                "{n} bins: {definite}"
            );
            assert!(paged >= 1, "{n} bins: {paged} pages");
            assert!(
                fine_mixed <= paged * 4 * 256,
                "{n} bins: {fine_mixed} of {paged} pages"
            );
        }
    }
}
