//! Queries run on every core: a query document ([`super::query_doc`]) made ready
//! against a file ([`Query::new`], names resolved by [`super::dims`], then
//! [`Query::plan`]), answered by `tet_alloc::tet::query`'s kernels on a Rayon pool
//! ([`Planned::answer`], [`run`]), or its selected values copied out
//! ([`Planned::select`], [`select_values`]). `tet-host query` and the Python binding's
//! `query` both go this way, so every answer is the same bits; each renders it its own
//! way (JSON, a table, a NumPy array).
//!
//! Results are bit-identical whatever `-j`: chunk partials are computed in parallel and
//! merged in grid order; partial-axis reductions fold each group of chunks (a disjoint box
//! of output cells) on one thread, chunks in grid order.

// `QueryError` carries a located decode error by value, as the libraries do.
#![allow(clippy::result_large_err)]

use std::path::Path;

use rayon::prelude::*;
use serde_json::{json, Value as Json};
use tet_alloc::tet::decode::ChunkDecoder;
use tet_alloc::tet::query::{
    chunk_partial, chunk_range, counts_bytes, decode_part, execute, finish, finish_groups, groups,
    groups_bytes, histogram_chunk, plan, position_coords, Axes, Bins, ChunkRange, Group, Histogram,
    MergePiece, Operation, Output, QueryError, ReadPlan,
};
use tet_core::tet::fold::{Acc, Value};
use tet_core::tet::select::for_each_run;
use tet_core::tet::{DType, Dataset, TetFile};

use super::dims::Resolved;
use super::query_doc::QueryDoc;
use super::{budget_for, budget_source, raise_budget};
use crate::tet::codec::CZstd;
use crate::{Error, Progress};

/// Bytes per task on the linear-scan path.
const LINEAR_WINDOW: u64 = 64 << 20;

/// Runs a query on every core. `threads` limits the pool; the budget bounds the decode
/// buffers (threads are reduced to fit) and the output.
pub fn run<'f>(
    file: &TetFile<'f>,
    plan_: &ReadPlan<'f>,
    op: Operation,
    axes: &Axes,
    threads: usize,
    budget: u64,
) -> Result<Output, QueryError> {
    run_with(file, plan_, op, axes, threads, budget, &())
}

/// The decoded bytes of the largest chunk `plan_` reads (what each decoder must hold).
pub fn largest_chunk(file: &TetFile<'_>, plan_: &ReadPlan<'_>) -> u64 {
    plan_
        .rows
        .iter()
        .filter_map(|r| file.rows().get(usize::try_from(*r).ok()?))
        .map(|r| r.raw_byte_len.get())
        .max()
        .unwrap_or(0)
}

/// Decoder contexts that fit `budget` beside each other, at most `threads` (at least one):
/// each holds the largest chunk of the plan (and its masked copy, for a masked plan).
fn threads_for(file: &TetFile<'_>, plan_: &ReadPlan<'_>, threads: usize, budget: u64) -> usize {
    let largest = largest_chunk(file, plan_);
    let probe = ChunkDecoder::new(CZstd::new(), budget);
    // A masked plan's threads each hold the masked copy too (8 bytes an element when
    // widened to f64).
    let per_thread = match plan_.mask {
        Some(m) => probe.memory_needed_masked(largest, plan_.dataset.dtype(), m),
        None => probe.memory_needed(largest),
    };
    let fit = budget
        .checked_div(per_thread.max(1))
        .and_then(|n| usize::try_from(n).ok())
        .unwrap_or(1);
    threads.min(fit).max(1)
}

/// A pool of `threads`, or the budget's error.
fn pool(threads: usize, budget: u64) -> Result<rayon::ThreadPool, QueryError> {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .map_err(|_| QueryError::Budget {
            needed: 0,
            budget,
            what: "a thread pool",
        })
}

/// [`run`], telling `progress` the plan's read bytes, then each chunk's stored bytes.
pub fn run_with<'f>(
    file: &TetFile<'f>,
    plan_: &ReadPlan<'f>,
    op: Operation,
    axes: &Axes,
    threads: usize,
    budget: u64,
    progress: &dyn Progress,
) -> Result<Output, QueryError> {
    let tick = |i: usize| {
        let n = plan_
            .rows
            .get(i)
            .and_then(|r| file.rows().get(usize::try_from(*r).ok()?))
            .map_or(0, |r| r.stored_byte_len.get());
        progress.advance(n);
    };
    let dtype = plan_.dtype();
    let pool = pool(threads_for(file, plan_, threads, budget), budget)?;
    progress.begin(plan_.read_bytes);
    let out = pool.install(|| match op {
        Operation::Reduce(r) if axes.scalar() => {
            // Linear scan: raw payloads that follow each other are read as windows of
            // about 64 MiB, one task per window walking its chunks in order, instead of
            // one task per chunk. Either way each chunk yields one partial, merged below
            // in grid order, so both paths give the same bits.
            let window = if plan_.contiguous_raw {
                let per = plan_
                    .read_bytes
                    .checked_div(u64::try_from(plan_.parts.len()).unwrap_or(1).max(1))
                    .unwrap_or(1)
                    .max(1);
                usize::try_from(LINEAR_WINDOW.checked_div(per).unwrap_or(1))
                    .unwrap_or(1)
                    .max(1)
            } else {
                1
            };
            let indices: Vec<usize> = (0..plan_.parts.len()).collect();
            let partials: Vec<Vec<Acc>> = indices
                .par_chunks(window)
                .map_init(
                    || ChunkDecoder::new(CZstd::new(), budget),
                    |dec, win| -> Result<Vec<Acc>, QueryError> {
                        let mut out = Vec::with_capacity(win.len());
                        for &i in win {
                            let tile = decode_part(file, plan_, i, dec)?;
                            let part = plan_.parts.get(i).copied().unwrap_or_default();
                            out.push(chunk_partial(plan_, &part, tile, r));
                            tick(i);
                        }
                        Ok(out)
                    },
                )
                .collect::<Result<Vec<Vec<Acc>>, QueryError>>()?;
            let partials: Vec<Acc> = partials.into_iter().flatten().collect();
            let mut total = Acc::new();
            for p in &partials {
                total.merge(r, p);
            }
            finish(r, dtype, Vec::new(), std::slice::from_ref(&total))
        }
        Operation::Reduce(r) => {
            let mut gs = groups(plan_, axes, Some(r), budget)?;
            let fold_into = |dec: &mut ChunkDecoder<CZstd>,
                             g: &mut Group,
                             parts: &[usize]|
             -> Result<(), QueryError> {
                for &i in parts {
                    let tile = decode_part(file, plan_, i, dec)?;
                    if let Some(part) = plan_.parts.get(i) {
                        g.fold_chunk(plan_, axes, part, tile, r);
                    }
                    tick(i);
                }
                // One stripe folded (a group of a few parts is one): its plain sums join
                // the box's totals, as the library flushes them.
                g.flush(r);
                Ok(())
            };
            // Groups of a few parts fold on one thread each, all groups at once.
            gs.par_iter_mut()
                .filter(|g| !g.striped())
                .try_for_each_init(
                    || ChunkDecoder::new(CZstd::new(), budget),
                    |dec, g| {
                        let parts = g.parts.clone();
                        fold_into(dec, g, &parts)
                    },
                )?;
            // A group of many parts (one output box that every chunk adds to, as a time
            // mean over a cube chunked one step at a time) folds its stripes on every
            // thread, a wave at a time, merged in stripe order: the library's bits.
            let threads = rayon::current_num_threads().max(1);
            for g in gs.iter_mut().filter(|g| g.striped()) {
                // The budget counted one stripe's box beside each group's; more boxes in
                // flight only where it has room for them.
                let spare = budget
                    .saturating_sub(groups_bytes(plan_, axes))
                    .checked_div(g.box_bytes().max(1))
                    .unwrap_or(0);
                let wave = usize::try_from(spare)
                    .unwrap_or(usize::MAX)
                    .saturating_add(1)
                    .min(threads)
                    .max(1);
                let stripes: Vec<Vec<usize>> = g.stripes().map(<[usize]>::to_vec).collect();
                for (w, batch) in stripes.chunks(wave).enumerate() {
                    let boxes: Vec<Group> = batch
                        .par_iter()
                        .map_init(
                            || ChunkDecoder::new(CZstd::new(), budget),
                            |dec, stripe| -> Result<Group, QueryError> {
                                let mut b = g.empty_box(plan_, axes, r);
                                fold_into(dec, &mut b, stripe)?;
                                Ok(b)
                            },
                        )
                        .collect::<Result<Vec<Group>, QueryError>>()?;
                    for (k, b) in boxes.into_iter().enumerate() {
                        if w == 0 && k == 0 {
                            g.take_first(r, b);
                        } else {
                            // Each cell merges on its own: pieces on every thread.
                            g.merge_pieces(r, &b, MERGE_PIECE)
                                .into_par_iter()
                                .for_each(MergePiece::run);
                        }
                    }
                }
            }
            let shape = axes.out_shape(plan_.selection.shape().as_slice());
            finish_groups(r, dtype, shape, gs)
        }
        Operation::Quantile(_)
        | Operation::Quantiles(_)
        | Operation::Median
        | Operation::Covariance(_) => {
            let mut dec = ChunkDecoder::new(CZstd::new(), budget);
            execute(file, plan_, op, axes, &mut dec)
        }
        Operation::Histogram(h) => histogram_par(file, plan_, h, axes, budget, &tick),
    });
    progress.end();
    out
}

/// The selection's range for a histogram without one (its smallest and largest elements,
/// NumPy's autodetection), chunk partials folded on every thread and merged in grid order.
pub fn histogram_range<'f>(
    file: &TetFile<'f>,
    plan_: &ReadPlan<'f>,
    budget: u64,
) -> Result<(f64, f64), QueryError> {
    if plan_.selection.is_empty() {
        return Ok((0.0, 1.0));
    }
    let parts: Vec<ChunkRange> = (0..plan_.parts.len())
        .into_par_iter()
        .map_init(
            || ChunkDecoder::new(CZstd::new(), budget),
            |dec, i| -> Result<ChunkRange, QueryError> {
                let tile = decode_part(file, plan_, i, dec)?;
                let part = plan_.parts.get(i).copied().unwrap_or_default();
                Ok(chunk_range(plan_, &part, tile))
            },
        )
        .collect::<Result<Vec<_>, QueryError>>()?;
    let mut all = ChunkRange::default();
    for r in &parts {
        all.merge(r);
    }
    all.check()
}

/// A histogram on every thread: each thread counts its chunks into counts of its own
/// (one set per thread, checked against the budget), added at the end. Counts are
/// integers, so the result is the same whatever `-j` or the order of the rows.
fn histogram_par<'f>(
    file: &TetFile<'f>,
    plan_: &ReadPlan<'f>,
    h: Histogram,
    axes: &Axes,
    budget: u64,
    tick: &(dyn Fn(usize) + Sync),
) -> Result<Output, QueryError> {
    let (first, last) = match h.range {
        Some(r) => r,
        None => histogram_range(file, plan_, budget)?,
    };
    let bins = Bins::new(h.bins, first, last)
        .map_err(QueryError::Histogram)?
        .for_plan(plan_);
    let mut shape = axes.out_shape(plan_.selection.shape().as_slice());
    let cells = shape.iter().fold(1u64, |a, n| a.saturating_mul(*n));
    let one = counts_bytes(cells, bins.slots());
    let threads = u64::try_from(rayon::current_num_threads().max(1)).unwrap_or(1);
    // A set of counts per thread, but never more sets than the budget holds.
    let sets = budget.checked_div(one.max(1)).unwrap_or(0).min(threads);
    if sets == 0 {
        return Err(QueryError::Budget {
            needed: one,
            budget,
            what: "the histogram's counts",
        });
    }
    let len = usize::try_from(one.checked_div(8).unwrap_or(0)).unwrap_or(0);
    let indices: Vec<usize> = (0..plan_.parts.len()).collect();
    let per = indices
        .len()
        .checked_div(usize::try_from(sets).unwrap_or(1))
        .unwrap_or(1)
        .max(1)
        .saturating_add(1);
    let sets_counted: Vec<Vec<u64>> = indices
        .par_chunks(per)
        .map(|win| -> Result<Vec<u64>, QueryError> {
            let mut dec = ChunkDecoder::new(CZstd::new(), budget);
            let mut counts = vec![0u64; len];
            for &i in win {
                let tile = decode_part(file, plan_, i, &mut dec)?;
                let part = plan_.parts.get(i).copied().unwrap_or_default();
                histogram_chunk(plan_, axes, &part, tile, &bins, &mut counts);
                tick(i);
            }
            Ok(counts)
        })
        .collect::<Result<Vec<_>, QueryError>>()?;
    let mut total = vec![0u64; len];
    for set in &sets_counted {
        for (t, c) in total.iter_mut().zip(set) {
            *t = t.saturating_add(*c);
        }
    }
    shape.push(u64::try_from(bins.slots()).unwrap_or(0));
    Ok(Output {
        shape,
        values: total.into_iter().map(Value::U64).collect(),
        nothing_left: None,
    })
}

/// Output cells a piece of a box merge covers (a few hundred KiB of accumulators).
const MERGE_PIECE: usize = 4096;

/// The selected elements themselves, row-major, as raw little-endian bytes (at most
/// `budget` bytes), telling `progress` the plan's decoded bytes, then each tile's.
pub fn select_values<'f>(
    file: &TetFile<'f>,
    plan_: &ReadPlan<'f>,
    budget: u64,
    progress: &dyn Progress,
) -> Result<Vec<u8>, QueryError> {
    let total = selected_bytes(plan_, budget)?;
    let mut out = vec![0u8; usize::try_from(total).unwrap_or(0)];
    select_into(file, plan_, budget, &mut out, progress)?;
    Ok(out)
}

/// The bytes of the selection, or the budget's error when they are more than it.
fn selected_bytes(plan_: &ReadPlan<'_>, budget: u64) -> Result<u64, QueryError> {
    let total = plan_
        .selection
        .len()
        .saturating_mul(plan_.dataset.dtype().size());
    if total > budget {
        return Err(QueryError::Budget {
            needed: total,
            budget,
            what: "the selected values",
        });
    }
    Ok(total)
}

/// Parts (a range of plan parts), first output element, elements.
type Slab = (std::ops::Range<usize>, u64, u64);

/// [`select_values`] into `out`, which must hold exactly the selection's bytes (the
/// Python binding passes NumPy's allocation). The rows of chunks along axis 0 are copied
/// on every thread at once (as many as the budget has decoders for), each run of
/// consecutive elements in one piece; a chunk that fails is reported as the first in
/// grid order that fails, whatever the threads.
pub fn select_into<'f>(
    file: &TetFile<'f>,
    plan_: &ReadPlan<'f>,
    budget: u64,
    out: &mut [u8],
    progress: &dyn Progress,
) -> Result<(), QueryError> {
    let total = selected_bytes(plan_, budget)?;
    if u64::try_from(out.len()).ok() != Some(total) {
        return Err(QueryError::Budget {
            needed: total,
            budget: u64::try_from(out.len()).unwrap_or(0),
            what: "the output array (its length is not the selection's bytes)",
        });
    }
    let ds = &plan_.dataset;
    let shape = plan_.selection.shape();
    let sel_shape = shape.as_slice();
    let es = usize::try_from(ds.dtype().size()).unwrap_or(1);
    let at = |e: u64| usize::try_from(e).unwrap_or(usize::MAX).saturating_mul(es);
    let slabs = slabs(plan_, sel_shape);
    let mut pieces: Vec<(&Slab, &mut [u8])> = Vec::new();
    let mut rest: &mut [u8] = out;
    for s in &slabs {
        let n = at(s.2).min(rest.len());
        let (head, tail) = rest.split_at_mut(n);
        pieces.push((s, head));
        rest = tail;
    }
    let copy = |dec: &mut ChunkDecoder<CZstd>,
                (range, first, _): &Slab,
                slab: &mut [u8]|
     -> Result<(), QueryError> {
        let base = at(*first);
        for i in range.clone() {
            let tile = decode_part(file, plan_, i, dec)?;
            progress.advance(u64::try_from(tile.len()).unwrap_or(0));
            let Some(part) = plan_.parts.get(i) else {
                continue;
            };
            for_each_run(ds, &plan_.selection, part, |r| {
                // Output index of the run's first element (row-major over the selection).
                let mut idx = 0u64;
                for (d, n) in sel_shape.iter().enumerate() {
                    idx = idx
                        .saturating_mul(*n)
                        .saturating_add(r.ordinals.get(d).copied().unwrap_or(0));
                }
                let step = if r.tile_stride == 1 { r.count } else { 1 };
                let n = at(step);
                let mut k = 0u64;
                while k < r.count {
                    let src = at(r.tile_index.saturating_add(k.saturating_mul(r.tile_stride)));
                    let dst = at(idx.saturating_add(k)).saturating_sub(base);
                    if let (Some(s), Some(d)) = (
                        tile.get(src..src.saturating_add(n)),
                        slab.get_mut(dst..dst.saturating_add(n)),
                    ) {
                        d.copy_from_slice(s);
                    }
                    k = k.saturating_add(step);
                }
            });
        }
        Ok(())
    };
    let all = || -> Vec<Result<(), QueryError>> {
        pieces
            .into_par_iter()
            .map_init(
                || ChunkDecoder::new(CZstd::new(), budget),
                |dec, (slab, bytes)| copy(dec, slab, bytes),
            )
            .collect()
    };
    progress.begin(plan_.decode_bytes);
    // As many decoders as the budget holds: the pool this runs on, or a smaller one.
    let current = rayon::current_num_threads();
    let fit = threads_for(file, plan_, current, budget);
    let results = if fit < current {
        pool(fit, budget)?.install(all)
    } else {
        all()
    };
    progress.end();
    results.into_iter().collect()
}

/// The selection's output cut along axis 0, one slab per row of chunks: each is
/// contiguous in row-major order. Rows of chunks out of order (a file from another
/// writer) make one slab.
fn slabs(plan_: &ReadPlan<'_>, sel_shape: &[u64]) -> Vec<Slab> {
    let inner = sel_shape
        .iter()
        .skip(1)
        .fold(1u64, |x, n| x.saturating_mul(*n));
    let mut slabs: Vec<Slab> = Vec::new();
    let mut end = 0u64;
    let mut i = 0usize;
    let parts = &plan_.parts;
    while let Some(p) = parts.get(i) {
        let row = p.coords.as_slice().first().copied();
        let mut j = i.saturating_add(1);
        while parts
            .get(j)
            .is_some_and(|q| q.coords.as_slice().first().copied() == row)
        {
            j = j.saturating_add(1);
        }
        let first = p
            .first_ordinal
            .first()
            .copied()
            .unwrap_or(0)
            .saturating_mul(inner);
        let len = p.count.first().copied().unwrap_or(0).saturating_mul(inner);
        if first != end {
            return vec![(0..parts.len(), 0, plan_.selection.len())];
        }
        end = first.saturating_add(len);
        slabs.push((i..j, first, len));
        i = j;
    }
    slabs
}

/// A result value to print: JSON, or an integer outside 64 bits, which a JSON value
/// here cannot hold but the serializer writes exactly (JSON integers have no size limit).
#[derive(Clone, Debug, PartialEq)]
pub enum Printed {
    /// A JSON value.
    Json(Json),
    /// An exact integer outside 64 bits.
    Wide(i128),
}

impl serde::Serialize for Printed {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Printed::Json(j) => j.serialize(s),
            Printed::Wide(v) => s.serialize_i128(*v),
        }
    }
}

impl Printed {
    /// The value for a line of text: strings unquoted.
    pub fn compact(&self) -> String {
        match self {
            Printed::Json(j) => compact(j),
            Printed::Wide(v) => v.to_string(),
        }
    }
}

/// A value as JSON: integers exact, NaN and ±inf as strings, positions as coordinates.
pub fn value_json(v: &Value, ds_shape: &[u64]) -> Printed {
    Printed::Json(match v {
        Value::U64(n) => json!(n),
        Value::I64(n) => json!(n),
        Value::I128(n) => return Printed::Wide(*n),
        Value::Bool(b) => json!(b),
        Value::Position(p) => json!(position_coords(ds_shape, *p)),
        Value::F64(f) => float_json(*f),
    })
}

/// A float as JSON: NaN and ±inf as the strings `NaN`, `inf`, `-inf`.
pub fn float_json(f: f64) -> Json {
    if f.is_nan() {
        json!("NaN")
    } else if f.is_infinite() {
        json!(if f > 0.0 { "inf" } else { "-inf" })
    } else {
        json!(f)
    }
}

/// One element of `dtype` from little-endian bytes, as JSON.
pub fn element_json(dtype: DType, b: &[u8]) -> Json {
    let arr = |n: usize| -> [u8; 8] {
        let mut a = [0u8; 8];
        if let (Some(dst), Some(src)) = (a.get_mut(..n), b.get(..n)) {
            dst.copy_from_slice(src);
        }
        a
    };
    let a = arr(usize::try_from(dtype.size()).unwrap_or(0));
    let u = u64::from_le_bytes(a);
    match dtype {
        DType::U8 | DType::U16 | DType::U32 | DType::U64 => json!(u),
        DType::I16 => json!(i16::from_le_bytes([a[0], a[1]])),
        DType::I32 => json!(i32::from_le_bytes([a[0], a[1], a[2], a[3]])),
        DType::I64 => json!(i64::from_le_bytes(a)),
        DType::F16 => float_json(half::f16::from_le_bytes([a[0], a[1]]).to_f64()),
        DType::F32 => float_json(f64::from(f32::from_le_bytes([a[0], a[1], a[2], a[3]]))),
        DType::F64 => float_json(f64::from_le_bytes(a)),
    }
}

/// The dtype of a result's values, as `--output` writes them: `f64`, `u64`, `i64`,
/// `bool`, `coords` (argmin/argmax: `u64` dataset coordinates), or `i128` when an exact
/// integer sum or product left 64 bits. An empty partial result takes the type its
/// operation gives over `dtype`.
pub fn result_dtype(out: &Output, op: Operation, dtype: DType) -> &'static str {
    use tet_core::tet::fold::Reduce as R;
    if out.values.iter().any(|v| matches!(v, Value::I128(_))) {
        return "i128";
    }
    match out.values.first() {
        Some(Value::F64(_)) => "f64",
        Some(Value::U64(_)) => "u64",
        Some(Value::I64(_)) => "i64",
        Some(Value::Bool(_)) => "bool",
        Some(Value::Position(_)) => "coords",
        Some(Value::I128(_)) => "i128",
        None => match op {
            Operation::Quantile(_)
            | Operation::Quantiles(_)
            | Operation::Median
            | Operation::Covariance(_) => "f64",
            Operation::Histogram(_) => "u64",
            Operation::Reduce(r) => match r {
                R::Count | R::NanCount | R::InfCount => "u64",
                R::AllFinite | R::AnyNan | R::AnyInf => "bool",
                R::ArgMin | R::ArgMax => "coords",
                R::Sum | R::Prod | R::NanSum | R::Min | R::Max | R::NanMin | R::NanMax => {
                    match dtype {
                        DType::F16 | DType::F32 | DType::F64 => "f64",
                        DType::I16 | DType::I32 | DType::I64 => "i64",
                        DType::U8 | DType::U16 | DType::U32 | DType::U64 => "u64",
                    }
                }
                _ => "f64",
            },
        },
    }
}

/// Whether `op` answers one of the values it reduces (min, max and their NaN-skipping
/// forms), so its answer has the values' type.
fn extreme(op: Operation) -> bool {
    use tet_core::tet::fold::Reduce as R;
    matches!(
        op,
        Operation::Reduce(R::Min | R::Max | R::NanMin | R::NanMax)
    )
}

/// Whether dataset `name` of `file` holds a NumPy bool array: stored as `u8` with the
/// `numpy_dtype` attribute `b1` that `convert` and `to_tet` record.
fn stores_bool(file: &TetFile<'_>, name: &str, dtype: DType) -> bool {
    dtype == DType::U8
        && super::dims::metadata(file)
            .ok()
            .flatten()
            .and_then(|m| {
                m.dataset(name)
                    .and_then(|d| d.attr("numpy_dtype").map(str::to_string))
            })
            .is_some_and(|t| t.trim_start_matches(['|', '<', '>', '=']) == "b1")
}

/// A JSON value for a line of text: strings unquoted.
pub fn compact(v: &Json) -> String {
    match v {
        Json::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The error a query on dataset `name` of the file at `path` failed with, in `tet-host
/// query`'s words: a chunk that does not decode or fails its checksum is named with its
/// dataset's name (and carries its finding code); a budget too small says how to raise
/// it (`source`: where the budget came from, [`super::budget_source`]).
pub fn query_error(path: &Path, name: &str, e: &QueryError, source: &str) -> Error {
    let category = e.category();
    let error = match e {
        QueryError::Decode(d) => {
            Error::new(category, format!("{}: {}", path.display(), d.named(name)))
                .with_code(d.code().map(|c| c.as_str()))
        }
        _ if category == tet_core::Category::Resource => Error::new(
            category,
            format!("{}: {e}; {}", path.display(), raise_budget(source)),
        ),
        _ => Error::new(category, format!("{}: {e}", path.display())),
    };
    error.at(path)
}

/// A query document made ready against an open file: its dataset found, its budget
/// chosen and its names resolved ([`super::dims::resolve`]). [`Query::plan`] plans the
/// read; the caller shows [`Resolved::warning`] first.
#[derive(Clone, Debug)]
pub struct Query<'f> {
    /// The file.
    pub file: TetFile<'f>,
    /// The dataset the document names.
    pub dataset: Dataset<'f>,
    /// The memory budget in force.
    pub budget: u64,
    /// Where the budget came from ([`super::budget_source`]).
    pub source: &'static str,
    /// The document's names resolved.
    pub resolved: Resolved,
}

impl<'f> Query<'f> {
    /// `doc` on `file` (the file at `path`, opened for reading); `budget` is the caller's
    /// own (`--memory-budget`), over the document's and the file's.
    pub fn new(
        path: &Path,
        file: TetFile<'f>,
        doc: &QueryDoc,
        budget: Option<u64>,
    ) -> Result<Query<'f>, Error> {
        let dataset = super::dataset(path, &file, &doc.dataset)?;
        let source = budget_source(doc.execution, budget);
        let budget = budget_for(&file, doc.execution, budget);
        let resolved = super::dims::resolve(&file, &dataset, doc, budget).map_err(|e| {
            // What the machine could not do (as the exit status sees it) may be the
            // budget's doing: say how to raise it.
            let message = if crate::Exit::of(e.category) == crate::Exit::Operational {
                format!("{}: {e}; {}", path.display(), raise_budget(source))
            } else {
                format!("{}: {e}", path.display())
            };
            Error::new(e.category, message).at(path)
        })?;
        Ok(Query {
            file,
            dataset,
            budget,
            source,
            resolved,
        })
    }

    /// A selection of dataset `name` by index alone (no document, no operation), read
    /// within `budget` (the caller's own; else the file's `TIDX` execution settings).
    pub fn selection(
        path: &Path,
        file: TetFile<'f>,
        name: &str,
        selection: Vec<tet_core::tet::select::Slice>,
        budget: Option<u64>,
    ) -> Result<Query<'f>, Error> {
        let dataset = super::dataset(path, &file, name)?;
        Ok(Query {
            file,
            dataset,
            budget: budget_for(&file, None, budget),
            source: budget_source(None, budget),
            resolved: Resolved {
                selection,
                op: None,
                mask: None,
                name: None,
                dims: None,
                resolved_bounds: Vec::new(),
                warning: None,
            },
        })
    }

    /// The read plan of the resolved selection, with the resolved mask.
    pub fn plan(self, path: &Path) -> Result<Planned<'f>, Error> {
        let mut plan_ = plan(&self.file, self.dataset, &self.resolved.selection)
            .map_err(|e| self.error(path, &e))?;
        plan_.mask = self.resolved.mask;
        Ok(Planned {
            query: self,
            plan: plan_,
        })
    }

    /// [`query_error`] for this query's dataset and budget.
    pub fn error(&self, path: &Path, e: &QueryError) -> Error {
        query_error(path, self.dataset.name(), e, self.source)
    }
}

/// A query with its read planned: [`Planned::answer`] runs its operation,
/// [`Planned::select`] copies out the selection of a document without one.
#[derive(Clone, Debug)]
pub struct Planned<'f> {
    /// The query.
    pub query: Query<'f>,
    /// The read plan.
    pub plan: ReadPlan<'f>,
}

/// What a query's operation answered.
#[derive(Clone, Debug)]
pub struct Answer {
    /// The operation run (a histogram with its range found).
    pub op: Operation,
    /// The operation's name as the document gave it (`null_count` runs as another).
    pub name: &'static str,
    /// The axes it reduced and kept.
    pub axes: Axes,
    /// The values, and their shape.
    pub out: Output,
    /// A histogram's bins.
    pub bins: Option<Bins>,
    /// The values' type ([`result_dtype`]).
    pub result_dtype: &'static str,
}

impl Answer {
    /// That some output cells had only NaN elements, when they did (those cells are NaN).
    pub fn nan_warning(&self) -> Option<String> {
        self.out.nothing_left.map(|(first, n)| {
            let cell = position_coords(&self.out.shape, first);
            format!(
                "{} had only NaN elements in {n} output cell(s), first {cell:?}: those \
                 cells are NaN (as NumPy's all-NaN slice)",
                self.name
            )
        })
    }
}

impl Planned<'_> {
    /// The operation and its axes, or `None` for a selection alone.
    pub fn operation(&self) -> Option<(Operation, Option<Vec<i64>>)> {
        self.query.resolved.op.clone()
    }

    /// Runs the query's operation on `threads` (at most; `None`: one per core, fewer when
    /// the budget has room for fewer decoders), telling `progress` the bytes read. A
    /// histogram without a range finds the selection's first. A document without an
    /// operation is a usage error here: see [`Planned::select`].
    pub fn answer(
        &self,
        path: &Path,
        threads: Option<usize>,
        progress: &dyn Progress,
    ) -> Result<Answer, Error> {
        let q = &self.query;
        let p = &self.plan;
        let Some((op, axes)) = self.operation() else {
            return Err(Error::usage(format!(
                "{}: the query has no operation; its selection is read with select",
                path.display()
            ))
            .at(path));
        };
        let fail = |e: QueryError| q.error(path, &e);
        let name = q.resolved.name.unwrap_or(op.name());
        let axes = Axes::signed(q.dataset.ndim(), axes.as_deref()).map_err(fail)?;
        // A histogram's edges go with its counts: the selection's range is found first
        // when the query gives none.
        let mut op = op;
        let mut bins = None;
        if let Operation::Histogram(h) = op {
            let range = match h.range {
                Some(r) => Ok(r),
                None => histogram_range(&q.file, p, q.budget),
            };
            let b = range
                .and_then(|(a, b)| Bins::new(h.bins, a, b).map_err(QueryError::Histogram))
                .map_err(fail)?;
            op = Operation::Histogram(Histogram {
                bins: h.bins,
                range: Some(b.range()),
            });
            bins = Some(b);
        }
        let threads = threads.unwrap_or_else(rayon::current_num_threads);
        let mut out = run_with(&q.file, p, op, &axes, threads, q.budget, progress).map_err(fail)?;
        q.resolved.finish(&mut out);
        // A NumPy bool array (stored as u8 0/1, `numpy_dtype` "b1"): its min and max are
        // booleans, as NumPy gives them.
        if extreme(op) && stores_bool(&q.file, q.dataset.name(), p.dtype()) {
            for v in &mut out.values {
                if let Value::U64(x) = *v {
                    *v = Value::Bool(x != 0);
                }
            }
        }
        let result_dtype = result_dtype(&out, op, p.dtype());
        Ok(Answer {
            op,
            name,
            axes,
            out,
            bins,
            result_dtype,
        })
    }

    /// The selected values, row-major little-endian bytes ([`select_values`]).
    pub fn select(&self, path: &Path, progress: &dyn Progress) -> Result<Vec<u8>, Error> {
        let q = &self.query;
        select_values(&q.file, &self.plan, q.budget, progress).map_err(|e| q.error(path, &e))
    }

    /// [`Planned::select`] into `out`, which must hold exactly the selection's bytes.
    pub fn select_into(
        &self,
        path: &Path,
        out: &mut [u8],
        progress: &dyn Progress,
    ) -> Result<(), Error> {
        let q = &self.query;
        select_into(&q.file, &self.plan, q.budget, out, progress).map_err(|e| q.error(path, &e))
    }
}
