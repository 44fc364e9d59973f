//! Query documents run as `tet-host query` runs them: the same parser, the same name
//! resolution, planner and parallel fold (`tet_host::tet::query::run`), so the values are
//! the same bits. The GIL is released for the whole run.

// `QueryError` carries a located decode error by value, as the libraries do.
#![allow(clippy::result_large_err)]

use numpy::PyArray1;
use pyo3::prelude::*;
use pyo3::types::PyList;
use rayon::prelude::*;
use serde_json::json;
use tet_alloc::tet::decode::ChunkDecoder;
use tet_alloc::tet::query::{
    decode_part, plan, Axes, Bins, Histogram, Operation, Output, QueryError, ReadPlan,
};
use tet_core::tet::fold::Value;
use tet_core::tet::select::for_each_run;
use tet_core::tet::TetFile;
use tet_host::tet::codec::CZstd;
use tet_host::tet::query::{histogram_range, result_dtype};

use crate::error::Failure;
use crate::file::{budget_source, open_reading, query_failure, Handle};

/// Parts (a range of plan parts), first output element, elements.
type Slab = (std::ops::Range<usize>, u64, u64);

/// The selected values of `plan_`, row-major little-endian bytes, at most `budget`:
/// `tet-host`'s selection (`select_values`), each run of consecutive elements copied in
/// one piece.
pub fn select_parallel<'f>(
    file: &TetFile<'f>,
    plan_: &ReadPlan<'f>,
    budget: u64,
) -> Result<Vec<u8>, QueryError> {
    Ok(select_slice(file, plan_, budget, None)?.unwrap_or_default())
}

/// The selection copied into `into` (which must hold exactly its bytes), or into a new
/// vector returned when `into` is `None`.
pub fn select_slice<'f>(
    file: &TetFile<'f>,
    plan_: &ReadPlan<'f>,
    budget: u64,
    into: Option<&mut [u8]>,
) -> Result<Option<Vec<u8>>, QueryError> {
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
    let mut owned = Vec::new();
    let out: &mut [u8] = match into {
        Some(buf) => buf,
        None => {
            owned = vec![0u8; usize::try_from(total).unwrap_or(0)];
            &mut owned
        }
    };
    if u64::try_from(out.len()).ok() != Some(total) {
        return Err(QueryError::Budget {
            needed: total,
            budget: u64::try_from(out.len()).unwrap_or(0),
            what: "the output array (its length is not the selection's bytes)",
        });
    }
    let shape = plan_.selection.shape();
    let sel_shape = shape.as_slice();
    let es = usize::try_from(size).unwrap_or(1);
    let at = |e: u64| usize::try_from(e).unwrap_or(usize::MAX).saturating_mul(es);
    // Slabs of the output along axis 0, one per row of chunks: each is contiguous in
    // row-major order, so the rows of chunks are copied on every thread at once.
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
            // Rows of chunks out of order (a file from another writer): one slab.
            slabs = vec![(0..parts.len(), 0, plan_.selection.len())];
            break;
        }
        end = first.saturating_add(len);
        slabs.push((i..j, first, len));
        i = j;
    }
    let mut pieces: Vec<(&Slab, &mut [u8])> = Vec::new();
    let mut rest: &mut [u8] = out;
    for s in &slabs {
        let n = at(s.2).min(rest.len());
        let (head, tail) = rest.split_at_mut(n);
        pieces.push((s, head));
        rest = tail;
    }
    pieces.into_par_iter().try_for_each_init(
        || ChunkDecoder::new(CZstd::new(), budget),
        |dec, ((range, first, _), slab)| -> Result<(), QueryError> {
            let base = at(*first);
            for i in range.clone() {
                let tile = decode_part(file, plan_, i, dec)?;
                let Some(part) = plan_.parts.get(i) else {
                    continue;
                };
                for_each_run(ds, &plan_.selection, part, |r| {
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
        },
    )?;
    Ok((!owned.is_empty() || total == 0).then_some(owned))
}

/// What a query answered.
enum Values {
    F64(Vec<f64>),
    U64(Vec<u64>),
    I64(Vec<i64>),
    Bool(Vec<bool>),
    /// Integers outside 64 bits, exactly.
    Wide(Vec<i128>),
    /// The selected elements' bytes (no operation).
    Bytes(Vec<u8>),
}

fn values(out: &Output, rdtype: &str, ds_shape: &[u64]) -> Values {
    let v = &out.values;
    match rdtype {
        "u64" => Values::U64(
            v.iter()
                .map(|x| match x {
                    Value::U64(n) => *n,
                    _ => 0,
                })
                .collect(),
        ),
        "i64" => Values::I64(
            v.iter()
                .map(|x| match x {
                    Value::I64(n) => *n,
                    Value::U64(n) => i64::try_from(*n).unwrap_or(i64::MAX),
                    _ => 0,
                })
                .collect(),
        ),
        "bool" => Values::Bool(v.iter().map(|x| matches!(x, Value::Bool(true))).collect()),
        "coords" => Values::U64(
            v.iter()
                .flat_map(|x| match x {
                    Value::Position(p) => tet_alloc::tet::query::position_coords(ds_shape, *p),
                    _ => vec![0; ds_shape.len()],
                })
                .collect(),
        ),
        "i128" => Values::Wide(
            v.iter()
                .map(|x| match x {
                    Value::I128(n) => *n,
                    Value::I64(n) => i128::from(*n),
                    Value::U64(n) => i128::from(*n),
                    _ => 0,
                })
                .collect(),
        ),
        _ => Values::F64(
            v.iter()
                .map(|x| match x {
                    Value::F64(f) => *f,
                    _ => f64::NAN,
                })
                .collect(),
        ),
    }
}

/// Runs `doc` on `h`'s file: the header (JSON: dataset, op, dtype, result_dtype, shape,
/// histogram edges, the all-NaN warning) and the values as a flat array (`object` list
/// for integers outside 64 bits; the selected bytes as `uint8` without an operation).
pub fn run<'py>(
    py: Python<'py>,
    h: &Handle,
    doc: &str,
    memory_budget: Option<u64>,
    threads: Option<usize>,
) -> PyResult<(String, Bound<'py, PyAny>)> {
    let path = std::path::PathBuf::from(h.shown());
    let bytes = h.bytes();
    let answered = py.detach(|| -> Result<(serde_json::Value, Values), Failure> {
        let doc = tet_host::tet::query_doc::parse_doc(doc).map_err(Failure::usage)?;
        let file = open_reading(&path, bytes)?;
        let ds = crate::file::dataset(&path, &file, &doc.dataset)?;
        let name = ds.name();
        let budget = tet_host::tet::budget_for(&file, doc.execution, memory_budget);
        let source = budget_source(doc.execution.is_some(), memory_budget);
        let resolved = tet_host::tet::dims::resolve(&file, &ds, &doc, budget).map_err(|e| {
            // The file's own damage (4), the budget (8) or the query (16), as tet-host.
            let category = match e.exit {
                tet_host::Exit::Problems => tet_core::Category::Corrupt,
                tet_host::Exit::Operational => tet_core::Category::Resource,
                _ => tet_core::Category::Usage,
            };
            Failure::of(category, format!("{}: {e}", path.display()))
        })?;
        let fail = |e: QueryError| query_failure(&path, name, &e, source);
        let mut p = plan(&file, ds, &resolved.selection).map_err(fail)?;
        p.mask = resolved.mask;
        let ds_shape: Vec<u64> = ds.shape().collect();
        let sel_shape: Vec<u64> = p.selection.shape().as_slice().to_vec();
        let Some((op, axes)) = resolved.op.clone() else {
            let data = select_parallel(&file, &p, budget).map_err(fail)?;
            let head = json!({
                "dataset": name, "op": null, "dtype": ds.dtype().name(),
                "result_dtype": ds.dtype().name(), "shape": sel_shape,
            });
            return Ok((head, Values::Bytes(data)));
        };
        let op_name = resolved.name.unwrap_or(op.name());
        let axes = Axes::signed(ds.ndim(), axes.as_deref()).map_err(fail)?;
        let mut op = op;
        let mut edges = None;
        if let Operation::Histogram(hist) = op {
            let range = match hist.range {
                Some(r) => Ok(r),
                None => histogram_range(&file, &p, budget),
            };
            let bins = range
                .and_then(|(a, b)| Bins::new(hist.bins, a, b).map_err(QueryError::Histogram))
                .map_err(fail)?;
            op = Operation::Histogram(Histogram {
                bins: hist.bins,
                range: Some(bins.range()),
            });
            edges = Some((bins.edges().to_vec(), bins.bins()));
        }
        let threads = threads.unwrap_or_else(rayon::current_num_threads).max(1);
        let mut out =
            tet_host::tet::query::run(&file, &p, op, &axes, threads, budget).map_err(fail)?;
        resolved.finish(&mut out);
        let warning = out.nothing_left.map(|(first, n)| {
            let cell = tet_alloc::tet::query::position_coords(&out.shape, first);
            format!(
                "{}: {op_name} had only NaN elements in {n} output cell(s), first {cell:?}: \
                 those cells are NaN (as NumPy's all-NaN slice)",
                path.display()
            )
        });
        let rdtype = result_dtype(&out, op, p.dtype());
        let mut shape = out.shape.clone();
        if rdtype == "coords" {
            shape.push(u64::try_from(ds_shape.len()).unwrap_or(0));
        }
        let head = json!({
            "dataset": name,
            "op": op_name,
            "dtype": ds.dtype().name(),
            "result_dtype": rdtype,
            "shape": shape,
            "warning": warning,
            "edges": edges.as_ref().map(|(e, _)| e),
            "bins": edges.as_ref().map(|(_, b)| b),
        });
        Ok((head, values(&out, rdtype, &ds_shape)))
    })?;
    let (head, vals) = answered;
    let arr: Bound<'py, PyAny> = match vals {
        Values::F64(v) => PyArray1::from_vec(py, v).into_any(),
        Values::U64(v) => PyArray1::from_vec(py, v).into_any(),
        Values::I64(v) => PyArray1::from_vec(py, v).into_any(),
        Values::Bool(v) => PyArray1::from_vec(py, v).into_any(),
        Values::Bytes(v) => PyArray1::from_vec(py, v).into_any(),
        Values::Wide(v) => PyList::new(py, v)?.into_any(),
    };
    Ok((head.to_string(), arr))
}
