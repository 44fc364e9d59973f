//! What `tet-host info --metadata --history` shows, as JSON values: the axis metadata
//! (dimension names, coordinates and their ends, attrs) and the history rows.

use serde_json::{json, Value};
use tet_alloc::tet::meta::{Coord, Values};
use tet_core::tet::TetFile;

fn set(v: &mut Value, k: &str, x: Value) {
    if let Some(o) = v.as_object_mut() {
        o.insert(k.to_string(), x);
    }
}

/// One coordinate value as JSON.
fn coord_value(v: &Values, i: usize) -> Value {
    match v {
        Values::Labels(l) => l.get(i).map_or(Value::Null, |s| json!(s)),
        Values::Ints(n) => n.get(i).map_or(Value::Null, |x| {
            i64::try_from(*x)
                .map(|x| json!(x))
                .unwrap_or_else(|_| json!(x.to_string()))
        }),
        Values::Floats(f) => f.get(i).map_or(Value::Null, |x| {
            if x.is_finite() {
                json!(x)
            } else {
                json!(x.to_string())
            }
        }),
    }
}

/// `--metadata` as JSON: `metadata.file`, per dataset of the file its `dims`, `coords`
/// (axis, dimension, where it is stored, length, first and last values), `attrs` and,
/// for a 0-d source, `source_shape` `[]`, and `groups`, each source group's `attrs`
/// (`tet_groups`, the root as `/`); `error` when the metadata is unreadable. The attrs
/// are the source's as [`super::dims::user_attrs`] gives them: a Zarr store's
/// non-string values as their JSON, the bookkeeping for `export` left out.
pub fn metadata_json(file: &TetFile<'_>) -> Value {
    let m = match super::dims::metadata(file) {
        Ok(m) => m.unwrap_or_default(),
        Err(e) => return json!({ "error": e }),
    };
    let budget = super::budget_for(file, None, None);
    let mut out = Vec::new();
    for ds in file.datasets() {
        let Ok(ds) = ds else { break };
        let Some(dm) = m.dataset(ds.name()) else {
            continue;
        };
        let mut coords = Vec::new();
        for d in 0..ds.ndim() {
            let Some(c) = dm.coord(d) else { continue };
            let dim = dm.dim_names.as_ref().and_then(|n| n.get(d)).cloned();
            let (storage, source) = match c {
                Coord::Labels(_) => ("labels", Value::Null),
                Coord::Dataset(n) => ("dataset", json!(n)),
            };
            let mut e = json!({"axis": d, "dim": dim, "storage": storage, "dataset": source});
            match super::dims::coord_ends(file, c, budget) {
                Ok((n, first, last)) => {
                    set(&mut e, "len", json!(n));
                    set(&mut e, "first", coord_value(&first, 0));
                    set(&mut e, "last", coord_value(&last, 0));
                    // A CF time coordinate's ends as dates too.
                    let units = match c {
                        Coord::Dataset(n) => super::dims::time_units(m.dataset(n)).ok().flatten(),
                        Coord::Labels(_) => None,
                    };
                    if let Some(u) = units {
                        let date = |v: &Values| match v {
                            Values::Ints(x) => x
                                .first()
                                .and_then(|x| tet_alloc::tet::cftime::format(*x, &u))
                                .map_or(Value::Null, Value::String),
                            _ => Value::Null,
                        };
                        set(&mut e, "first_date", date(&first));
                        set(&mut e, "last_date", date(&last));
                    }
                }
                Err(why) => set(&mut e, "error", json!(why)),
            }
            coords.push(e);
        }
        let attrs = super::dims::user_attrs(&dm.attrs, true);
        let mut entry = json!({
            "dataset": ds.name(),
            "dims": dm.dim_names,
            "coords": coords,
            "attrs": attrs,
        });
        // A 0-d source, stored as one element: its shape as the source had it.
        // (Only where `export` restores it.)
        let one = ds.shape().collect::<Vec<u64>>() == [1];
        if one && dm.attr(super::dims::SCALAR_KEY) == Some("[]") {
            set(&mut entry, "source_shape", json!([]));
        }
        out.push(entry);
    }
    let file_info = m.file.as_ref().map(|f| {
        json!({"tool": f.tool, "library_version": f.library_version, "created_at": f.created_at})
    });
    let groups: Vec<Value> = m
        .groups
        .iter()
        .map(|(path, attrs)| {
            let a = super::dims::user_attrs(attrs, true);
            json!({ "group": path, "attrs": a })
        })
        .collect();
    json!({ "file": file_info, "groups": groups, "datasets": out })
}

/// `--history` as JSON: the rows as written (objects, or legacy `[op, source, at]`
/// turned into objects).
pub fn history_json(file: &TetFile<'_>) -> Value {
    let Some(f) = file.footer() else {
        return json!([]);
    };
    let v: Value = match serde_json::from_slice(f.history_json()) {
        Ok(v) => v,
        Err(e) => return json!({ "error": format!("the footer JSON is invalid: {e}") }),
    };
    let rows = v
        .get("history")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    Value::Array(
        rows.into_iter()
            .map(|r| match r {
                Value::Array(a) => json!({
                    "op": a.first(), "source": a.get(1), "at": a.get(2)
                }),
                other => other,
            })
            .collect(),
    )
}
