//! A query's names resolved against the dataset's axis metadata (`tet_alloc::tet::meta`):
//! axes by dimension name, selection bounds by coordinate value, and the missing-value
//! marker for `null_count` and the `nan_*` reductions.

// `QueryError` carries a located decode error by value, as the libraries do.
#![allow(clippy::result_large_err)]

use tet_alloc::tet::decode::{cf_markers, cf_packing, Markers, Mask, Unpack};
use tet_alloc::tet::meta::{self, Coord, DatasetMeta, Metadata, Values};
use tet_alloc::tet::query::{plan, Operation};
use tet_core::tet::fold::Reduce;
use tet_core::tet::select::Slice;
use tet_core::tet::{DType, Dataset, TetFile};

use super::query_doc::{AxisRef, QueryDoc};

/// The attribute listing (as a JSON array of names) the attributes whose Zarr values
/// were not strings: `.tet` keeps them as their JSON text, `export` gives them back as
/// JSON.
pub const JSON_ATTRS_KEY: &str = "zarr_json_attrs";

/// The attribute recording the source's Zarr `fill_value` (its JSON text).
pub const FILL_KEY: &str = "zarr_fill_value";

/// The attribute keeping, as a JSON object of their texts, the CF attributes `convert
/// --unpack` decoded (read by `query`'s `null_count` hint).
pub const DECODED_KEY: &str = "cf_decoded";

/// The attribute marking a dataset converted from a 0-d array (`"[]"`): `export` writes
/// it back with shape `()`.
pub const SCALAR_KEY: &str = "numpy_shape";

/// The attributes `convert` keeps for `export` to restore the source, not the source's
/// own: left out where attributes are shown (`info --metadata`, `export --coords`).
const BOOKKEEPING: [&str; 2] = [JSON_ATTRS_KEY, SCALAR_KEY];

/// `attrs` as a user reads them: without the bookkeeping keys, and, with `json`, the
/// values [`JSON_ATTRS_KEY`] lists and [`FILL_KEY`] as the JSON they were in the source
/// (others, and all of them without `json`, as their texts).
pub fn user_attrs(
    attrs: &[(String, String)],
    json: bool,
) -> serde_json::Map<String, serde_json::Value> {
    use serde_json::Value;
    let listed: Vec<String> = attrs
        .iter()
        .find(|(k, _)| k == JSON_ATTRS_KEY)
        .and_then(|(_, v)| serde_json::from_str(v).ok())
        .unwrap_or_default();
    attrs
        .iter()
        .filter(|(k, _)| !BOOKKEEPING.contains(&k.as_str()))
        .map(|(k, v)| {
            let value = if json && (listed.contains(k) || k == FILL_KEY) {
                serde_json::from_str(v).unwrap_or_else(|_| Value::String(v.clone()))
            } else {
                Value::String(v.clone())
            };
            (k.clone(), value)
        })
        .collect()
}

/// A query with its names resolved.
#[derive(Clone, Debug, PartialEq)]
pub struct Resolved {
    /// Index selection.
    pub selection: Vec<Slice>,
    /// The operation to run and its axes by number.
    pub op: Option<(Operation, Option<Vec<i64>>)>,
    /// The mask the plan applies.
    pub mask: Option<Mask>,
    /// The operation's name in the output (`null_count` runs as `nan_count` or `sum`).
    pub name: Option<&'static str>,
    /// The dataset's dimension names, one per axis, when its metadata gives them.
    pub dims: Option<Vec<String>>,
    /// Each selection by value as resolved: axis, the bounds as written, and the index
    /// range they give (`--plan` shows them).
    pub resolved_bounds: Vec<ResolvedBound>,
    /// A warning for the user: the footer metadata did not read, so a `nan_*`
    /// reduction ran without the missing-value markers and packing it may declare.
    pub warning: Option<String>,
}

/// A selection by coordinate value resolved to indices.
#[derive(Clone, Debug, PartialEq)]
pub struct ResolvedBound {
    /// The axis.
    pub axis: usize,
    /// `start_label` as written, and the index it gave.
    pub start: Option<(String, i64)>,
    /// `stop_label` as written, and the index it gave.
    pub stop: Option<(String, i64)>,
}

impl Resolved {
    /// The output as the query names it: `null_count` over an integer dataset runs as
    /// a sum of 0/1 indicators, its count given here as `u64`.
    pub fn finish(&self, out: &mut tet_alloc::tet::query::Output) {
        if self.name == Some("null_count") {
            for v in &mut out.values {
                if let tet_core::tet::fold::Value::I64(n) = v {
                    *v = tet_core::tet::fold::Value::U64(u64::try_from(*n).unwrap_or(0));
                }
            }
        }
    }
}

/// Why a query's names could not be resolved, with its category: what the user wrote
/// (`usage`), the file's own damaged metadata or coordinates (`corrupt`), or what the
/// machine could not do within the memory budget (`resource`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// What went wrong, as the exit status sees it.
    pub category: tet_core::Category,
    /// The message, naming the field.
    pub message: String,
}

impl Refusal {
    fn damaged(message: String) -> Refusal {
        Refusal {
            category: tet_core::Category::Corrupt,
            message,
        }
    }

    fn resource(message: String) -> Refusal {
        Refusal {
            category: tet_core::Category::Resource,
            message,
        }
    }
}

impl From<String> for Refusal {
    fn from(message: String) -> Refusal {
        Refusal {
            category: tet_core::Category::Usage,
            message,
        }
    }
}

impl From<Refusal> for String {
    fn from(r: Refusal) -> String {
        r.message
    }
}

impl core::fmt::Display for Refusal {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(&self.message)
    }
}

/// The CF time units of a coordinate dataset's attrs (`units`, `calendar`), when its
/// units are `UNIT since DATE`.
pub fn time_units(
    cm: Option<&DatasetMeta>,
) -> Result<Option<tet_alloc::tet::cftime::TimeUnits>, String> {
    let Some(units) = cm.and_then(|c| c.attr("units")) else {
        return Ok(None);
    };
    tet_alloc::tet::cftime::parse_units(units, cm.and_then(|c| c.attr("calendar")))
}

/// A packed dataset's `scale_factor` and `add_offset` (CF; 1 and 0 when one is
/// absent), `None` when its attrs give neither.
fn packing(dm: Option<&DatasetMeta>, name: &str) -> Result<Option<(f64, f64)>, String> {
    let Some(d) = dm else { return Ok(None) };
    cf_packing(|k| d.attr(k)).map_err(|e| format!("dataset {name:?}: {e}"))
}

/// Most coordinate values loaded from a coordinate dataset (16 Mi values).
const MAX_COORD_VALUES: u64 = 1 << 24;

/// Reads the file's axis metadata; `Err` when it is there but unreadable.
pub fn metadata(file: &TetFile<'_>) -> Result<Option<Metadata>, String> {
    meta::read(file).map_err(|e| format!("the footer metadata is unreadable: {e}"))
}

/// The axes of `refs` as numbers.
pub fn axes(refs: &[AxisRef], dm: Option<&DatasetMeta>, ndim: usize) -> Result<Vec<i64>, String> {
    refs.iter()
        .map(|a| match a {
            AxisRef::Index(i) => Ok(*i),
            AxisRef::Name(n) => {
                let empty = DatasetMeta::default();
                let i = dm.unwrap_or(&empty).axis(n, ndim)?;
                i64::try_from(i).map_err(|_| format!("axis {n:?} is out of range"))
            }
        })
        .collect()
}

/// A coordinate's values: inline labels, or a coordinate dataset's elements.
pub fn coord_values(file: &TetFile<'_>, c: &Coord, budget: u64) -> Result<Values, Refusal> {
    let name = match c {
        Coord::Labels(l) => return Ok(Values::Labels(l.clone())),
        Coord::Dataset(n) => n,
    };
    let ds = file
        .dataset(name)
        .map_err(|_| Refusal::damaged(format!("coordinate dataset {name:?} is not in the file")))?;
    if ds.ndim() != 1 {
        return Err(Refusal::damaged(format!(
            "coordinate dataset {name:?} is not 1-D"
        )));
    }
    let n: u64 = ds.shape().product();
    if n > MAX_COORD_VALUES {
        return Err(Refusal::resource(format!(
            "coordinate dataset {name:?} has {n} values (at most {MAX_COORD_VALUES} are loaded)"
        )));
    }
    // The stored elements and the values compared (16 bytes each), under the budget.
    let needed = n.saturating_mul(ds.dtype().size().saturating_add(16));
    if needed > budget {
        return Err(Refusal::resource(format!(
            "coordinate dataset {name:?} needs {needed} bytes to compare its {n} values, over \
             the memory budget of {budget} bytes"
        )));
    }
    let located = |e: tet_alloc::tet::query::QueryError| Refusal {
        category: e.category(),
        message: format!("coordinate dataset {name:?}: {e}"),
    };
    let p = plan(file, ds, &[]).map_err(located)?;
    let bytes = crate::tet::query::select_values(file, &p, budget, &()).map_err(located)?;
    Ok(decode_values(ds.dtype(), &bytes))
}

/// A coordinate's length and its first and last values, reading no more than those two
/// elements of a coordinate dataset (`info --metadata`).
pub fn coord_ends(
    file: &TetFile<'_>,
    c: &Coord,
    budget: u64,
) -> Result<(u64, Values, Values), String> {
    let name = match c {
        Coord::Labels(l) => {
            let one = |x: Option<&String>| Values::Labels(x.cloned().into_iter().collect());
            let n = u64::try_from(l.len()).unwrap_or(u64::MAX);
            return Ok((n, one(l.first()), one(l.last())));
        }
        Coord::Dataset(n) => n,
    };
    let ds = file
        .dataset(name)
        .map_err(|_| format!("coordinate dataset {name:?} is not in the file"))?;
    if ds.ndim() != 1 {
        return Err(format!("coordinate dataset {name:?} is not 1-D"));
    }
    let n: u64 = ds.shape().product();
    let at = |i: u64| -> Result<Values, String> {
        let start = i64::try_from(i).map_err(|_| "coordinate too long".to_string())?;
        let sel = [Slice {
            start: Some(start),
            stop: Some(start.saturating_add(1)),
            step: None,
        }];
        let p = plan(file, ds, &sel).map_err(|e| format!("coordinate dataset {name:?}: {e}"))?;
        let b = crate::tet::query::select_values(file, &p, budget, &())
            .map_err(|e| format!("coordinate dataset {name:?}: {e}"))?;
        Ok(decode_values(ds.dtype(), &b))
    };
    Ok((n, at(0)?, at(n.saturating_sub(1))?))
}

/// Little-endian elements of `dtype` as coordinate values.
pub fn decode_values(dtype: DType, bytes: &[u8]) -> Values {
    macro_rules! each {
        ($t:ty, $n:literal, $wrap:expr) => {
            bytes
                .chunks_exact($n)
                .filter_map(|b| <[u8; $n]>::try_from(b).ok())
                .map(|b| $wrap(<$t>::from_le_bytes(b)))
                .collect()
        };
    }
    match dtype {
        DType::U8 => Values::Ints(each!(u8, 1, i128::from)),
        DType::U16 => Values::Ints(each!(u16, 2, i128::from)),
        DType::U32 => Values::Ints(each!(u32, 4, i128::from)),
        DType::U64 => Values::Ints(each!(u64, 8, i128::from)),
        DType::I16 => Values::Ints(each!(i16, 2, i128::from)),
        DType::I32 => Values::Ints(each!(i32, 4, i128::from)),
        DType::I64 => Values::Ints(each!(i64, 8, i128::from)),
        DType::F16 => Values::Floats(each!(half::f16, 2, |v: half::f16| v.to_f64())),
        DType::F32 => Values::Floats(each!(f32, 4, f64::from)),
        DType::F64 => Values::Floats(each!(f64, 8, |v: f64| v)),
    }
}

/// The reductions a missing-value marker changes: the `nan_*` family.
fn masks(r: Reduce) -> bool {
    r.skips_nan() || matches!(r, Reduce::NanCount)
}

/// Resolves `doc` against dataset `ds` of `file`.
pub fn resolve(
    file: &TetFile<'_>,
    ds: &Dataset<'_>,
    doc: &QueryDoc,
    budget: u64,
) -> Result<Resolved, Refusal> {
    let ndim = ds.ndim();
    let named = doc.op.as_ref().is_some_and(|(_, a)| {
        a.as_ref()
            .is_some_and(|a| a.iter().any(|x| matches!(x, AxisRef::Name(_))))
    });
    // The metadata is read for every query (its dimension names label the output); an
    // unreadable footer stops only what needs it: `nan_*` then run on the elements as
    // stored, as they do on files without metadata, with a warning that markers or
    // packing it may declare were not applied.
    let nan_op = matches!(doc.op, Some((Operation::Reduce(r), _)) if masks(r));
    let mut warning = None;
    let all = metadata(file);
    let all = match all {
        Ok(m) => m,
        Err(e) if named || !doc.by_value.is_empty() || doc.null_count.is_some() => {
            return Err(Refusal::damaged(e))
        }
        Err(e) => {
            if nan_op {
                warning = Some(format!(
                    "{e}: the elements are used as stored, without the missing-value \
                     markers or packing (scale_factor, add_offset) it may declare \
                     (verify names the damage)"
                ));
            }
            None
        }
    };
    let dm = all.as_ref().and_then(|m| m.dataset(ds.name()));
    let mut selection = doc.selection.clone();
    let mut resolved_bounds = Vec::new();
    for vb in &doc.by_value {
        if vb.axis >= ndim {
            return Err(format!("selection[{}]: the dataset has {ndim} axes", vb.axis).into());
        }
        let coord = dm.and_then(|d| d.coord(vb.axis)).ok_or_else(|| {
            format!(
                "selection[{}]: start_label/stop_label need a coordinate for axis {} in the \
                 footer metadata (coords or tet_coords), and dataset {:?} has none",
                vb.axis,
                vb.axis,
                ds.name()
            )
        })?;
        let values = coord_values(file, coord, budget)?;
        // A date on a CF time coordinate (`units = "hours since 2000-01-01"`) is the
        // count it encodes to.
        // (Units that cannot be read matter only to a date.)
        let time = match (coord, all.as_ref()) {
            (Coord::Dataset(name), Some(m)) => time_units(m.dataset(name))
                .map_err(|e| format!("selection[{}]: coordinate dataset {name:?}: {e}", vb.axis)),
            _ => Ok(None),
        };
        let as_count = |b: &meta::Bound| -> Result<meta::Bound, String> {
            match b {
                meta::Bound::Label(text) => match time.clone()? {
                    Some(u) => tet_alloc::tet::cftime::encode(text, &u).map_err(|e| {
                        format!(
                            "selection[{}]: {e}; this axis's coordinate is CF time \
                             (give a date or a number)",
                            vb.axis
                        )
                    }),
                    None => Ok(b.clone()),
                },
                _ => Ok(b.clone()),
            }
        };
        let slot = match selection.get_mut(vb.axis) {
            Some(s) => s,
            None => {
                selection.resize(vb.axis.saturating_add(1), Slice::default());
                selection
                    .get_mut(vb.axis)
                    .ok_or_else(|| "selection axis out of range".to_string())?
            }
        };
        let one = |b: &meta::Bound| -> Result<i64, String> {
            let i = meta::resolve_bound(&values, &as_count(b)?)
                .map_err(|e| format!("selection[{}]: {e}", vb.axis))?;
            i64::try_from(i).map_err(|_| format!("selection[{}]: index out of range", vb.axis))
        };
        let mut shown = ResolvedBound {
            axis: vb.axis,
            start: None,
            stop: None,
        };
        if let Some(b) = &vb.start {
            let i = one(b)?;
            slot.start = Some(i);
            shown.start = Some((b.to_string(), i));
        }
        if let Some(b) = &vb.stop {
            let i = one(b)?;
            slot.stop = Some(i);
            shown.stop = Some((b.to_string(), i));
        }
        resolved_bounds.push(shown);
    }
    let mut op = None;
    let mut mask = None;
    let mut name = None;
    if let Some((o, refs)) = &doc.op {
        let axes_n = refs.as_deref().map(|r| axes(r, dm, ndim)).transpose()?;
        let mut o = *o;
        // `_FillValue` and `missing_value` both mark elements missing (CF); either alone
        // does too.
        let marker = || -> Result<Option<Markers>, String> {
            let Some(d) = dm else {
                return Ok(None);
            };
            cf_markers(|k| d.attr(k)).map_err(|e| format!("dataset {:?}: {e}", ds.name()))
        };
        if let Some(explicit) = &doc.null_count {
            let m = match explicit {
                Some(m) => Markers::from(*m),
                None => marker().map_err(Refusal::damaged)?.ok_or_else(|| {
                    // `convert --unpack` made the markers NaN and moved them aside.
                    let decoded: Vec<String> = dm
                        .and_then(|d| d.attr(DECODED_KEY))
                        .and_then(|t| {
                            serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(t)
                                .ok()
                        })
                        .map(|j| {
                            ["_FillValue", "missing_value"]
                                .into_iter()
                                .filter(|k| j.contains_key(*k))
                                .map(str::to_string)
                                .collect()
                        })
                        .unwrap_or_default();
                    let decoded = if decoded.is_empty() {
                        String::new()
                    } else {
                        format!(
                            "; convert --unpack decoded its markers ({}) to NaN, which \
                             nan_count counts",
                            decoded.join(", ")
                        )
                    };
                    format!(
                        "null_count needs a \"fill\" in the query or a _FillValue or \
                         missing_value attr on dataset {:?}, which has neither{decoded}",
                        ds.name()
                    )
                })?,
            };
            mask = Some(Mask::Indicator(m));
            o = Operation::Reduce(if ds.dtype().is_float() {
                Reduce::NanCount
            } else {
                Reduce::Sum
            });
            name = Some("null_count");
        } else if let Operation::Reduce(r) = o {
            // A float dataset's NaNs are missing already; an integer dataset is widened
            // to f64 with NaN at its markers, as xarray decodes it.
            if masks(r) {
                let markers = marker().map_err(Refusal::damaged)?;
                match packing(dm, ds.name()).map_err(Refusal::damaged)? {
                    Some((scale, offset)) => {
                        mask = Some(Mask::Unpack(Unpack {
                            markers,
                            scale,
                            offset,
                        }));
                    }
                    None => {
                        if let Some(m) = markers.filter(|m| !m.only_nan()) {
                            mask = Some(Mask::Missing(m));
                        }
                    }
                }
            }
        }
        op = Some((o, axes_n));
    }
    Ok(Resolved {
        selection,
        op,
        mask,
        name,
        dims: dm
            .and_then(|d| d.dim_names.clone())
            .filter(|n| n.len() == ndim),
        resolved_bounds,
        warning,
    })
}
