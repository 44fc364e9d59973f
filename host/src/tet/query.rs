//! `tet-host query`: parse a query document (JSON or TOML, the flat shape the other
//! implementation accepts), run it with `tet_alloc::tet::query` on every core, render JSON,
//! one line, a table or a NumPy file.
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
    chunk_partial, chunk_range, counts_bytes, decode_part, describe, execute, finish,
    finish_groups, groups, groups_bytes, histogram_chunk, plan, position_coords, Axes, Bins,
    ChunkRange, Group, Histogram, MergePiece, Operation, Output, QueryError, ReadPlan,
};
use tet_core::tet::fold::{Acc, Value};
use tet_core::tet::select::for_each_run;
use tet_core::tet::{DType, Dataset, TetFile};

use crate::tet::codec::CZstd;
use crate::Exit;

use super::query_doc::QueryDoc;
use super::*;

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
    run_with(file, plan_, op, axes, threads, budget, None)
}

/// [`run`], advancing `progress` by each chunk's stored bytes.
pub fn run_with<'f>(
    file: &TetFile<'f>,
    plan_: &ReadPlan<'f>,
    op: Operation,
    axes: &Axes,
    threads: usize,
    budget: u64,
    progress: Option<&indicatif::ProgressBar>,
) -> Result<Output, QueryError> {
    let tick = |i: usize| {
        if let Some(b) = progress {
            let n = plan_
                .rows
                .get(i)
                .and_then(|r| file.rows().get(usize::try_from(*r).ok()?))
                .map_or(0, |r| r.stored_byte_len.get());
            b.inc(n);
        }
    };
    let dtype = plan_.dtype();
    let largest = plan_
        .rows
        .iter()
        .filter_map(|r| file.rows().get(usize::try_from(*r).ok()?))
        .map(|r| r.raw_byte_len.get())
        .max()
        .unwrap_or(0);
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
    let threads = threads.min(fit).max(1);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .map_err(|_| QueryError::Budget {
            needed: 0,
            budget,
            what: "a thread pool",
        })?;
    pool.install(|| match op {
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
    })
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
/// `budget` bytes).
pub fn select_values<'f>(
    file: &TetFile<'f>,
    plan_: &ReadPlan<'f>,
    budget: u64,
    bar: Option<&indicatif::ProgressBar>,
) -> Result<Vec<u8>, QueryError> {
    let ds = &plan_.dataset;
    let size = ds.dtype().size();
    let total = plan_.selection.len().saturating_mul(size);
    if total > budget {
        return Err(QueryError::Budget {
            needed: total,
            budget,
            what: "the selected values",
        });
    }
    let mut out = vec![0u8; usize::try_from(total).unwrap_or(0)];
    let shape = plan_.selection.shape();
    let sel_shape = shape.as_slice();
    let es = usize::try_from(size).unwrap_or(1);
    let mut dec = ChunkDecoder::new(CZstd::new(), budget);
    for (i, part) in plan_.parts.iter().enumerate() {
        let tile = decode_part(file, plan_, i, &mut dec)?;
        if let Some(b) = bar {
            b.inc(u64::try_from(tile.len()).unwrap_or(0));
        }
        for_each_run(ds, &plan_.selection, part, |r| {
            // Output index of the run's first element (row-major over the selection).
            let mut idx = 0u64;
            for (d, n) in sel_shape.iter().enumerate() {
                idx = idx
                    .saturating_mul(*n)
                    .saturating_add(r.ordinals.get(d).copied().unwrap_or(0));
            }
            for k in 0..r.count {
                let src =
                    usize::try_from(r.tile_index.saturating_add(k.saturating_mul(r.tile_stride)))
                        .unwrap_or(usize::MAX)
                        .saturating_mul(es);
                let dst = usize::try_from(idx.saturating_add(k))
                    .unwrap_or(usize::MAX)
                    .saturating_mul(es);
                if let (Some(s), Some(d)) = (
                    tile.get(src..src.saturating_add(es)),
                    out.get_mut(dst..dst.saturating_add(es)),
                ) {
                    d.copy_from_slice(s);
                }
            }
        });
    }
    Ok(out)
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
    fn compact(&self) -> String {
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

fn float_json(f: f64) -> Json {
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

/// Output style.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Style {
    /// JSON on standard output.
    Json,
    /// One human line.
    Quiet,
    /// A table.
    Table,
}

/// Options of `tet-host query`.
#[derive(Clone, Debug)]
pub struct QueryOptions {
    /// Output style.
    pub style: Style,
    /// Print only the plan.
    pub plan_only: bool,
    /// Threads.
    pub threads: Option<usize>,
    /// Budget override from the command line.
    pub budget: Option<u64>,
    /// Write a partial result or the selected values to this `.npy` file.
    pub output: Option<std::path::PathBuf>,
    /// Print only the first N selected values (no operation).
    pub preview: Option<usize>,
    /// Replace the `output` file when it exists (never when it is an input).
    pub force: bool,
    /// The query document's file, when it came from one (an input too).
    pub query_file: Option<std::path::PathBuf>,
}

/// Most values a selection without an operation prints as JSON; beyond, use `--output`.
pub const MAX_PRINTED: u64 = 1 << 20;

/// `tet-host query`.
pub fn query(path: &Path, bytes: &[u8], doc: &QueryDoc, o: &QueryOptions) -> Exit {
    if let Some(target) = &o.output {
        let mut inputs = vec![path];
        inputs.extend(o.query_file.as_deref());
        if let Err(e) = crate::atomic::check_output(target, &inputs, o.force) {
            return e;
        }
    }
    let file = match open_tet(path, bytes) {
        Ok(f) => f,
        Err(e) => return e,
    };
    let ds = match file.dataset(&doc.dataset) {
        Ok(d) => d,
        Err(_) => return no_dataset(path, &file, &doc.dataset),
    };
    let budget = budget_for(&file, doc.execution, o.budget);
    let source = budget_source(doc.execution, o.budget);
    let resolved = match crate::tet::dims::resolve(&file, &ds, doc, budget) {
        Ok(r) => r,
        Err(e) => {
            if e.exit == Exit::Operational {
                crate::say!("{}: {e}; {}", path.display(), raise_budget(source));
            } else {
                crate::say!("{}: {e}", path.display());
            }
            return e.exit;
        }
    };
    if let Some(w) = &resolved.warning {
        crate::errln!("tet-host: {}: warning: {w}", path.display());
    }
    let mut p = match plan(&file, ds, &resolved.selection) {
        Ok(p) => p,
        Err(e) => return fail(path, &e, source),
    };
    p.mask = resolved.mask;
    if o.plan_only {
        println!("{}: {}", path.display(), describe(&p));
        // Selections by value, as the coordinate resolved them (half-open).
        for b in &resolved.resolved_bounds {
            let side = |x: &Option<(String, i64)>, label: &str| {
                x.as_ref().map(|(v, i)| format!("{label} {v} -> index {i}"))
            };
            let parts: Vec<String> = [side(&b.start, "start_label"), side(&b.stop, "stop_label")]
                .into_iter()
                .flatten()
                .collect();
            let axis = resolved
                .dims
                .as_ref()
                .and_then(|n| n.get(b.axis))
                .map_or_else(
                    || format!("axis {}", b.axis),
                    |n| format!("axis {} ({n})", b.axis),
                );
            println!("  {axis}: {}", parts.join(", "));
        }
        return Exit::Clean;
    }
    let ds_shape: Vec<u64> = ds.shape().collect();
    let threads = o.threads.unwrap_or_else(rayon::current_num_threads);
    let Some((op, axes)) = resolved.op.clone() else {
        return print_values(path, &file, &p, &ds, o, budget, source);
    };
    let op_name = resolved.name.unwrap_or(op.name());
    let axes = match Axes::signed(ds.ndim(), axes.as_deref()) {
        Ok(a) => a,
        Err(e) => return fail(path, &e, source),
    };
    // A histogram's edges are printed with its counts: the selection's range is found
    // first when the query gives none.
    let mut op = op;
    let mut hist_bins = None;
    if let Operation::Histogram(h) = op {
        let range = match h.range {
            Some(r) => Ok(r),
            None => histogram_range(&file, &p, budget),
        };
        let bins = range.and_then(|(a, b)| Bins::new(h.bins, a, b).map_err(QueryError::Histogram));
        match bins {
            Ok(b) => {
                op = Operation::Histogram(Histogram {
                    bins: h.bins,
                    range: Some(b.range()),
                });
                hist_bins = Some(b);
            }
            Err(e) => return fail_reading(path, &ds, &e, source),
        }
    }
    let bar = crate::progress::progress_bar(true, p.read_bytes);
    let res = run_with(&file, &p, op, &axes, threads, budget, bar.as_ref());
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    let mut out = match res {
        Ok(out) => out,
        Err(e) => return fail_reading(path, &ds, &e, source),
    };
    resolved.finish(&mut out);
    if let Some((first, n)) = out.nothing_left {
        let cell = position_coords(&out.shape, first);
        crate::errln!(
            "tet-host: {}: warning: {} had only NaN elements in {n} output cell(s), first \
             {cell:?}: those cells are NaN (as NumPy's all-NaN slice)",
            path.display(),
            op_name
        );
    }
    if let Some(target) = &o.output {
        if out.shape.is_empty() {
            crate::say!("--output writes partial results and values; this result is a scalar");
            return Exit::Usage;
        }
        if let Some(i) = out.values.iter().position(|v| matches!(v, Value::I128(_))) {
            let cell = position_coords(&out.shape, u64::try_from(i).unwrap_or(0));
            crate::errln!(
                "tet-host: {}: output cell {cell:?} is an integer outside 64 bits, which .npy \
                 cannot hold exactly; not written (the JSON output has it exactly)",
                target.display()
            );
            return Exit::Usage;
        }
        return match crate::tet::npy::write_values(target, &out, &ds_shape) {
            Ok(()) => Exit::Clean,
            Err(e) => {
                crate::say!("cannot write {}: {e}", target.display());
                Exit::Operational
            }
        };
    }
    let rdtype = result_dtype(&out, op, p.dtype());
    let kept: Vec<usize> = (0..ds.ndim()).filter(|d| axes.kept(*d)).collect();
    // The result's dimension names: the kept axes' names, when the dataset has names and
    // the output has one axis per kept axis (a histogram's counts add one: not named).
    let out_dims: Option<Vec<String>> = resolved.dims.as_ref().and_then(|names| {
        let d: Vec<String> = kept.iter().filter_map(|a| names.get(*a).cloned()).collect();
        (!d.is_empty() && d.len() == out.shape.len() && hist_bins.is_none()).then_some(d)
    });
    if o.style == Style::Table || o.preview.is_some() {
        let reduced: Vec<usize> = (0..ds.ndim()).filter(|d| !axes.kept(*d)).collect();
        let over = if kept.is_empty() {
            "over every axis".to_string()
        } else {
            format!("over axes {reduced:?}")
        };
        let dims_note = out_dims
            .as_ref()
            .map(|d| format!(", dims ({})", d.join(", ")))
            .unwrap_or_default();
        let mut head = vec![format!(
            "# {} {} {over}: result {rdtype}, dataset {}, shape {:?}{dims_note}",
            doc.dataset,
            op_name,
            ds.dtype().name(),
            out.shape
        )];
        head.extend(index_space(p.selection.axes(), &kept));
        if matches!(
            op,
            Operation::Reduce(
                tet_core::tet::fold::Reduce::ArgMin | tet_core::tet::fold::Reduce::ArgMax
            )
        ) {
            head.push(
                "# values: dataset coordinates of the first extreme (numpy.unravel_index)".into(),
            );
        }
        if let Some(b) = &hist_bins {
            let edges: Vec<String> = b.edges().iter().map(|e| compact(&float_json(*e))).collect();
            head.push(format!(
                "# last axis: {} bins, then the counts below the range, above it and NaN; edges [{}]",
                b.bins(),
                edges.join(", ")
            ));
        }
        let cells = out
            .values
            .iter()
            .map(|v| value_json(v, &ds_shape).compact());
        return print_table(&head, &out.shape, cells, o.preview, "cells");
    }
    #[derive(serde::Serialize)]
    struct Partial {
        shape: Vec<u64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        dims: Option<Vec<String>>,
        data: Vec<Printed>,
    }
    #[derive(serde::Serialize)]
    #[serde(untagged)]
    enum Result {
        Scalar(Printed),
        Partial(Partial),
    }
    #[derive(serde::Serialize)]
    struct Answer<'a> {
        dataset: &'a str,
        op: &'a str,
        dtype: &'a str,
        result_dtype: &'a str,
        result: Result,
    }
    let result = if let Some(b) = &hist_bins {
        Result::Scalar(Printed::Json(histogram_json(&out, b)))
    } else if out.shape.is_empty() {
        Result::Scalar(
            out.values
                .first()
                .map_or(Printed::Json(Json::Null), |v| value_json(v, &ds_shape)),
        )
    } else {
        Result::Partial(Partial {
            shape: out.shape.clone(),
            dims: out_dims.clone(),
            data: out
                .values
                .iter()
                .map(|v| value_json(v, &ds_shape))
                .collect(),
        })
    };
    match o.style {
        Style::Json | Style::Table => {
            let answer = Answer {
                dataset: &doc.dataset,
                op: op_name,
                dtype: ds.dtype().name(),
                result_dtype: rdtype,
                result,
            };
            println!("{}", serde_json::to_string(&answer).unwrap_or_default());
            crate::report::printed();
        }
        Style::Quiet => {
            let text = match &result {
                Result::Scalar(v) => v.compact(),
                Result::Partial(p) => serde_json::to_string(p).unwrap_or_default(),
            };
            println!("{} {} = {text}", doc.dataset, op_name);
        }
    }
    Exit::Clean
}

/// A histogram's JSON: `edges` (`bins + 1`), `counts` and the `under`, `over` and `nan`
/// counts; a scalar histogram as lists and numbers, one along axes as `{shape, data}`
/// arrays (`counts` with one more axis of `bins`).
fn histogram_json(out: &Output, bins: &Bins) -> Json {
    let n = bins.slots();
    let count = |v: &Value| match v {
        Value::U64(c) => *c,
        _ => 0,
    };
    let cells: Vec<&[Value]> = out.values.chunks(n.max(1)).collect();
    let kept: Vec<u64> = out
        .shape
        .get(..out.shape.len().saturating_sub(1))
        .unwrap_or(&[])
        .to_vec();
    let mut counts = Vec::new();
    let mut extra: [Vec<u64>; 3] = [Vec::new(), Vec::new(), Vec::new()];
    for c in &cells {
        counts.extend(c.iter().take(bins.bins()).map(count));
        for (k, e) in extra.iter_mut().enumerate() {
            e.push(c.get(bins.bins().saturating_add(k)).map_or(0, count));
        }
    }
    let edges: Vec<Json> = bins.edges().iter().map(|e| float_json(*e)).collect();
    let [under, over, nan] = extra;
    if kept.is_empty() {
        json!({"edges": edges, "counts": counts, "under": under.first().copied().unwrap_or(0),
               "over": over.first().copied().unwrap_or(0), "nan": nan.first().copied().unwrap_or(0)})
    } else {
        let mut with_bins = kept.clone();
        with_bins.push(u64::try_from(bins.bins()).unwrap_or(0));
        json!({
            "edges": edges,
            "counts": {"shape": with_bins, "data": counts},
            "under": {"shape": kept, "data": under},
            "over": {"shape": kept, "data": over},
            "nan": {"shape": kept, "data": nan},
        })
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

/// Header lines naming the index space of a table's coordinates: each coordinate is an
/// index into the selection along a kept dataset axis, which is the dataset's own index
/// where the selection is that whole axis (start 0, step 1), and `start + i·step`
/// otherwise.
fn index_space(sel: &[tet_core::tet::select::AxisSel], kept: &[usize]) -> Vec<String> {
    if kept.is_empty() {
        return Vec::new();
    }
    let identity = kept
        .iter()
        .all(|d| sel.get(*d).is_none_or(|a| a.start == 0 && a.step == 1));
    if identity {
        return vec![format!(
            "# coordinates: dataset indices along axes {kept:?} (the selection starts at 0 \
             with step 1 there)"
        )];
    }
    let maps: Vec<String> = kept
        .iter()
        .filter_map(|d| sel.get(*d).map(|a| (d, a)))
        .map(|(d, a)| format!("axis {d}: {} + {}·i", a.start, a.step))
        .collect();
    vec![format!(
        "# coordinates: selection indices i along axes {kept:?}; dataset index = {}",
        maps.join(", ")
    )]
}

fn compact(v: &Json) -> String {
    match v {
        Json::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Prints `head`, then one line per cell (`[i, j]\tvalue`, or the value alone for a
/// scalar), at most `limit` of them, with a last line saying how many were left out.
fn print_table(
    head: &[String],
    shape: &[u64],
    cells: impl Iterator<Item = String>,
    limit: Option<usize>,
    what: &str,
) -> Exit {
    use std::io::Write;
    let total = shape.iter().fold(1u64, |a, n| a.saturating_mul(*n));
    let mut w = std::io::BufWriter::new(std::io::stdout().lock());
    let emit = || -> std::io::Result<()> {
        for h in head {
            writeln!(w, "{h}")?;
        }
        let mut shown = 0u64;
        for (i, v) in cells.take(limit.unwrap_or(usize::MAX)).enumerate() {
            if shape.is_empty() {
                writeln!(w, "{v}")?;
            } else {
                let idx = position_coords(shape, u64::try_from(i).unwrap_or(0));
                let idx: Vec<String> = idx.iter().map(|x| x.to_string()).collect();
                writeln!(w, "[{}]\t{v}", idx.join(", "))?;
            }
            shown = shown.saturating_add(1);
        }
        if shown < total {
            writeln!(
                w,
                "# first {shown} of {total} {what} (--output FILE.npy writes them all)"
            )?;
        }
        w.flush()
    };
    match emit() {
        Ok(()) => Exit::Clean,
        Err(e) => crate::cli::stdout_failed(&e),
    }
}

fn print_values(
    path: &Path,
    file: &TetFile<'_>,
    p: &ReadPlan<'_>,
    ds: &Dataset<'_>,
    o: &QueryOptions,
    budget: u64,
    source: &str,
) -> Exit {
    let n = p.selection.len();
    let shape: Vec<u64> = p.selection.shape().as_slice().to_vec();
    if o.style == Style::Quiet {
        println!(
            "{} values: shape {shape:?}, dtype {}, {n} value(s)",
            ds.name(),
            ds.dtype().name()
        );
        return Exit::Clean;
    }
    let shown = o
        .preview
        .map_or(n, |k| n.min(u64::try_from(k).unwrap_or(u64::MAX)));
    if o.output.is_none() && shown > MAX_PRINTED {
        crate::say!(
            "{}: the selection has {n} values, more than the {MAX_PRINTED} printed as \
             JSON; write them with --output FILE.npy or look at a few with --preview N",
            path.display()
        );
        return Exit::Usage;
    }
    let bar = crate::progress::progress_bar(true, p.decode_bytes);
    let selected = select_values(file, p, budget, bar.as_ref());
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    let bytes = match selected {
        Ok(b) => b,
        Err(e) => return fail_reading(path, ds, &e, source),
    };
    if let Some(target) = &o.output {
        return match crate::tet::npy::write_raw(target, ds.dtype(), &shape, &bytes) {
            Ok(()) => Exit::Clean,
            Err(e) => {
                crate::say!("cannot write {}: {e}", target.display());
                Exit::Operational
            }
        };
    }
    let es = usize::try_from(ds.dtype().size()).unwrap_or(1);
    let data = bytes.chunks_exact(es).map(|b| element_json(ds.dtype(), b));
    if o.preview.is_some() || o.style == Style::Table {
        let mut head = vec![format!(
            "# {} values: dtype {}, shape {shape:?}",
            ds.name(),
            ds.dtype().name()
        )];
        let all: Vec<usize> = (0..shape.len()).collect();
        head.extend(index_space(p.selection.axes(), &all));
        return print_table(
            &head,
            &shape,
            data.map(|v| compact(&v)),
            o.preview,
            "values",
        );
    }
    let data: Vec<Json> = data.collect();
    println!(
        "{}",
        json!({
            "dataset": ds.name(),
            "op": Json::Null,
            "dtype": ds.dtype().name(),
            "result_dtype": ds.dtype().name(),
            "result": {"shape": shape, "data": data},
        })
    );
    Exit::Clean
}

/// Where the memory budget came from, for the message that says how to raise it.
pub(crate) fn budget_source(
    doc: Option<tet_core::tet::ExecutionSettings>,
    cli: Option<u64>,
) -> &'static str {
    match (cli, doc) {
        (Some(_), _) => "--memory-budget",
        (None, Some(_)) => "the query's execution object",
        (None, None) => "the file's TIDX execution settings",
    }
}

fn fail(path: &Path, e: &QueryError, source: &str) -> Exit {
    if e.category() == tet_core::Category::Resource {
        crate::say!("{}: {e}; {}", path.display(), raise_budget(source));
    } else {
        crate::say!("{}: {e}", path.display());
    }
    Exit::of(e.category())
}

/// [`fail`] for an error while reading `ds`'s chunks: a chunk that does not decode or
/// fails its checksum is named with its dataset's name.
pub fn fail_reading(path: &Path, ds: &Dataset<'_>, e: &QueryError, source: &str) -> Exit {
    match e {
        QueryError::Decode(d) => {
            crate::say!("{}: {}", path.display(), d.named(ds.name()));
            Exit::of(e.category())
        }
        _ => fail(path, e, source),
    }
}
