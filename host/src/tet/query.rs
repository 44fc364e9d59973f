//! `tet-host query`: parse a query document (JSON or TOML, the flat shape the other
//! implementation accepts), answer it with the library ([`tet_std::tet::query`],
//! re-exported here: the same sequence the Python binding runs), and render JSON, one
//! line, a table or a NumPy file.

use std::path::Path;

use serde_json::{json, Value as Json};
use tet_alloc::tet::query::{describe, position_coords, Bins, Operation, Output};
use tet_core::tet::fold::Value;

pub use tet_std::tet::query::*;

use crate::Exit;

pub use super::budget_source;
use super::open_tet;
use super::query_doc::QueryDoc;

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
    let q = match Query::new(path, file, doc, o.budget) {
        Ok(q) => q,
        Err(e) => return fail(&e),
    };
    if let Some(w) = &q.resolved.warning {
        crate::errln!("tet-host: {}: warning: {w}", path.display());
    }
    let planned = match q.plan(path) {
        Ok(p) => p,
        Err(e) => return fail(&e),
    };
    let (q, p) = (&planned.query, &planned.plan);
    let (resolved, ds) = (&q.resolved, &q.dataset);
    if o.plan_only {
        println!("{}: {}", path.display(), describe(p));
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
    if planned.operation().is_none() {
        return print_values(path, &planned, o);
    }
    let answered = planned.answer(path, o.threads, &crate::progress::Bar::new(true));
    let answer = match answered {
        Ok(a) => a,
        Err(e) => return fail(&e),
    };
    if let Some(w) = answer.nan_warning() {
        crate::errln!("tet-host: {}: warning: {w}", path.display());
    }
    let (op, op_name, axes) = (answer.op, answer.name, answer.axes);
    let (out, hist_bins) = (&answer.out, &answer.bins);
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
        return match crate::tet::npy::write_values(target, out, &ds_shape) {
            Ok(()) => Exit::Clean,
            Err(e) => {
                crate::say!("cannot write {}: {e}", target.display());
                Exit::Operational
            }
        };
    }
    let rdtype = answer.result_dtype;
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
        if let Some(b) = hist_bins {
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
    let result = if let Some(b) = hist_bins {
        Result::Scalar(Printed::Json(histogram_json(out, b)))
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

fn print_values(path: &Path, planned: &Planned<'_>, o: &QueryOptions) -> Exit {
    let (p, ds) = (&planned.plan, &planned.query.dataset);
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
    let bytes = match planned.select(path, &crate::progress::Bar::new(true)) {
        Ok(b) => b,
        Err(e) => return fail(&e),
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

/// Says `e` and gives its exit status.
fn fail(e: &tet_std::Error) -> Exit {
    crate::say!("{e}");
    Exit::of(e.category())
}

/// Says the error a read of `ds`'s chunks failed with ([`query_error`]: a chunk that
/// does not decode or fails its checksum is named with its dataset's name) and gives its
/// exit status.
pub fn fail_reading(
    path: &Path,
    ds: &tet_core::tet::Dataset<'_>,
    e: &tet_alloc::tet::query::QueryError,
    source: &str,
) -> Exit {
    fail(&query_error(path, ds.name(), e, source))
}
