//! Query documents answered by the library's one query path (`tet_std::tet::query`:
//! the parser, name resolution, planner and parallel fold `tet-host query` runs), so the
//! values are the same bits; here they become a JSON header and a NumPy array. The GIL
//! is released for the whole run.

use std::path::Path;

use numpy::PyArray1;
use pyo3::prelude::*;
use pyo3::types::PyList;
use serde_json::json;
use tet_alloc::tet::query::{position_coords, Output};
use tet_core::tet::fold::Value;
use tet_std::tet::query::Query;

use crate::error::Failure;

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
                    Value::Position(p) => position_coords(ds_shape, *p),
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

/// Runs `doc` on `bytes` (the file at `path`): the header (JSON: dataset, op, dtype,
/// result_dtype, shape, histogram edges, the all-NaN warning) and the values as a flat
/// array (`object` list for integers outside 64 bits; the selected bytes as `uint8`
/// without an operation).
pub fn run<'py>(
    py: Python<'py>,
    path: &Path,
    bytes: &[u8],
    doc: &str,
    memory_budget: Option<u64>,
    threads: Option<usize>,
) -> PyResult<(String, Bound<'py, PyAny>)> {
    let answered = py.detach(|| -> Result<(serde_json::Value, Values), Failure> {
        let doc = tet_std::tet::query_doc::parse_doc(doc).map_err(Failure::usage)?;
        let file = tet_std::tet::open_reading(path, bytes)?.file;
        let planned = Query::new(path, file, &doc, memory_budget)
            .and_then(|q| q.plan(path))
            .map_err(Failure::reading)?;
        let ds = planned.query.dataset;
        let name = ds.name();
        let ds_shape: Vec<u64> = ds.shape().collect();
        if planned.operation().is_none() {
            let data = planned.select(path, &()).map_err(Failure::reading)?;
            let sel_shape: Vec<u64> = planned.plan.selection.shape().as_slice().to_vec();
            let head = json!({
                "dataset": name, "op": null, "dtype": ds.dtype().name(),
                "result_dtype": ds.dtype().name(), "shape": sel_shape,
            });
            return Ok((head, Values::Bytes(data)));
        }
        let answer = planned
            .answer(path, threads, &())
            .map_err(Failure::reading)?;
        let warning = answer
            .nan_warning()
            .map(|w| format!("{}: {w}", path.display()));
        let rdtype = answer.result_dtype;
        let mut shape = answer.out.shape.clone();
        if rdtype == "coords" {
            shape.push(u64::try_from(ds_shape.len()).unwrap_or(0));
        }
        let edges = answer.bins.as_ref().map(|b| (b.edges().to_vec(), b.bins()));
        let head = json!({
            "dataset": name,
            "op": answer.name,
            "dtype": ds.dtype().name(),
            "result_dtype": rdtype,
            "shape": shape,
            "warning": warning,
            "edges": edges.as_ref().map(|(e, _)| e),
            "bins": edges.as_ref().map(|(_, b)| b),
        });
        Ok((head, values(&answer.out, rdtype, &ds_shape)))
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
