//! Query documents: JSON or TOML, the flat shape the other implementation accepts,
//! parsed into a [`QueryDoc`].

use std::io::Read;
use std::path::{Path, PathBuf};

use serde_json::Value as Json;
use tet_alloc::tet::decode::Marker;
use tet_alloc::tet::meta::Bound;
use tet_alloc::tet::query::{
    Cov, Histogram, Operation, Quantile, Quantiles, MAX_BINS, MAX_QUANTILES,
};
use tet_core::tet::fold::Reduce;
use tet_core::tet::select::Slice;
use tet_core::tet::ExecutionSettings;

/// A parsed query document.
#[derive(Clone, Debug, PartialEq)]
pub struct QueryDoc {
    /// Dataset name.
    pub dataset: String,
    /// Per-axis slices (bounds given by value are in `by_value`, resolved against the
    /// dataset's coordinates when the query runs).
    pub selection: Vec<Slice>,
    /// Selection bounds given by coordinate value (`start_label`, `stop_label`), one
    /// entry per selection axis that has any.
    pub by_value: Vec<ValueBounds>,
    /// The operation and the axes it reduces (`None`: all, a scalar); negative axes
    /// count from the end, names are the dataset's `dim_names`.
    pub op: Option<(Operation, Option<Vec<AxisRef>>)>,
    /// `execution` overrides of the memory budget.
    pub execution: Option<ExecutionSettings>,
    /// `null_count`: its `fill`, when the query gives one (`Some(None)`: the dataset's
    /// `_FillValue` or `missing_value` attr). The operation in `op` is then a stand-in
    /// that [`crate::tet::dims::resolve`] replaces.
    pub null_count: Option<Option<Marker>>,
}

/// An axis as a query names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AxisRef {
    /// By number (negative: from the end).
    Index(i64),
    /// By dimension name (or a decimal index written as a string, as the other
    /// implementation accepts).
    Name(String),
}

impl std::fmt::Display for AxisRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AxisRef::Index(i) => write!(f, "{i}"),
            AxisRef::Name(n) => write!(f, "{n:?}"),
        }
    }
}

/// A selection axis's bounds by coordinate value: half-open, `start` included, `stop`
/// excluded.
#[derive(Clone, Debug, PartialEq)]
pub struct ValueBounds {
    /// The selection axis.
    pub axis: usize,
    /// `start_label`.
    pub start: Option<Bound>,
    /// `stop_label`.
    pub stop: Option<Bound>,
}

/// Every operation key a query document accepts.
pub const OPS: &[&str] = &[
    "sum",
    "prod",
    "mean",
    "min",
    "max",
    "count",
    "var",
    "std",
    "argmin",
    "argmax",
    "nan_sum",
    "nan_mean",
    "nan_min",
    "nan_max",
    "nan_var",
    "nan_std",
    "nan_count",
    "inf_count",
    "all_finite",
    "any_nan",
    "any_inf",
    "norm_l1",
    "norm_l2",
    "histogram",
    "covariance",
    "correlation",
    "quantile",
    "median",
    "null_count",
];

/// The QUERY argument, read: the document's text and, when it came from a file, the path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueryText {
    /// The document.
    pub text: String,
    /// The file it was read from (`None`: inline or standard input).
    pub file: Option<PathBuf>,
}

/// Why the QUERY argument gave no document.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArgError {
    /// What to say.
    pub message: String,
    /// A file that cannot be read (exit 8), rather than a document that is wrong (16).
    pub unreadable: bool,
}

/// Whether an argument that names no existing file was meant as a path: it ends in
/// `.json` or `.toml`, or it holds neither `{` (every JSON query has one) nor `=` (every
/// TOML query with a key has one), so it cannot be a document.
pub fn looks_like_path(arg: &str) -> bool {
    let lower = arg.to_ascii_lowercase();
    lower.ends_with(".json")
        || lower.ends_with(".toml")
        || (!arg.contains('{') && !arg.contains('='))
}

/// Reads the QUERY argument: `-` is standard input, an existing path is a file, an
/// argument that looks like a path ([`looks_like_path`]) and names nothing is "no such
/// file", anything else is the document itself.
pub fn read_query_arg(arg: &str) -> Result<QueryText, ArgError> {
    let unreadable = |message: String| ArgError {
        message,
        unreadable: true,
    };
    if arg == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|e| unreadable(format!("cannot read the query from standard input: {e}")))?;
        return Ok(QueryText { text, file: None });
    }
    let p = Path::new(arg);
    match std::fs::metadata(p) {
        Ok(m) if m.is_dir() => Err(unreadable(format!(
            "cannot read the query {arg}: it is a directory"
        ))),
        Ok(_) => {
            let text = std::fs::read_to_string(p)
                .map_err(|e| unreadable(format!("cannot read the query {arg}: {e}")))?;
            Ok(QueryText {
                text,
                file: Some(p.to_path_buf()),
            })
        }
        Err(e) if looks_like_path(arg) => {
            let why = if e.kind() == std::io::ErrorKind::NotFound {
                "no such file".to_string()
            } else {
                e.to_string()
            };
            Err(unreadable(format!(
                "cannot read the query {arg}: {why} (an inline query is a JSON object, \
                 '{{\"dataset\": ...}}', or TOML, 'dataset = ...')"
            )))
        }
        Err(_) => Ok(QueryText {
            text: arg.to_string(),
            file: None,
        }),
    }
}

/// Parses the document [`read_query_arg`] read: a file ending in `.json` or `.toml` as
/// that, anything else as JSON when it starts with `{`, else TOML. Syntax errors point
/// into the text: the line and column, the line itself and a caret.
pub fn parse_query(q: &QueryText) -> Result<QueryDoc, String> {
    let ext = q
        .file
        .as_deref()
        .and_then(Path::extension)
        .map(|e| e.to_string_lossy().to_ascii_lowercase());
    let json = match ext.as_deref() {
        Some("json") => true,
        Some("toml") => false,
        _ => q.text.trim_start().starts_with('{'),
    };
    let from = q
        .file
        .as_deref()
        .map(|f| format!(" in {}", f.display()))
        .unwrap_or_default();
    let v: Json = if json {
        parse_json(&q.text).map_err(|e| format!("query JSON{from}: {e}"))?
    } else {
        toml::from_str(&q.text)
            .map_err(|e| format!("query TOML{from}: {}", e.to_string().trim_end()))?
    };
    doc_of(&v)
}

/// JSON text as a value, or the parser's message with the line it stopped in and a caret
/// under the column (drawn as the TOML parser draws its own).
pub fn parse_json(text: &str) -> Result<Json, String> {
    serde_json::from_str(text).map_err(|e| {
        let msg = e.to_string();
        match excerpt(text, e.line(), e.column()) {
            Some(x) => format!("{msg}\n{x}"),
            None => msg,
        }
    })
}

/// Line `line` (1-based) of `text` with a caret under byte column `column` (1-based; 0
/// points at the line's start), gutter first, as the TOML parser draws them. A long line
/// shows at most the 60 characters before the caret and 40 from it.
pub fn excerpt(text: &str, line: usize, column: usize) -> Option<String> {
    let src = text.lines().nth(line.checked_sub(1)?)?;
    let mut cut = column.saturating_sub(1).min(src.len());
    while !src.is_char_boundary(cut) {
        cut = cut.saturating_sub(1);
    }
    let before = src.get(..cut)?;
    let after: String = src.get(cut..)?.chars().take(40).collect();
    let skip = before.chars().count().saturating_sub(60);
    let shown: String = before.chars().skip(skip).collect();
    let lead = if skip > 0 { "..." } else { "" };
    let gutter = " ".repeat(line.to_string().len());
    let pad = " ".repeat(lead.len().saturating_add(shown.chars().count()));
    Some(format!(
        "{gutter} |\n{line} | {lead}{shown}{after}\n{gutter} | {pad}^"
    ))
}

/// Parses a JSON or TOML query document (JSON when it starts with `{`).
pub fn parse_doc(text: &str) -> Result<QueryDoc, String> {
    parse_query(&QueryText {
        text: text.to_string(),
        file: None,
    })
}

/// Parses a selection given alone (`export --selection`): a JSON list of `{start, stop,
/// step}` objects, syntax errors pointing into it.
pub fn parse_selection_arg(text: &str) -> Result<Vec<Slice>, String> {
    let (s, by_value) = parse_selection_values(&parse_json(text)?)?;
    if let Some(b) = by_value.first() {
        return Err(format!(
            "selection[{}]: start_label and stop_label belong in a query document \
             (--selection takes index bounds)",
            b.axis
        ));
    }
    Ok(s)
}

fn doc_of(v: &Json) -> Result<QueryDoc, String> {
    let obj = v
        .as_object()
        .ok_or("the query must be an object (JSON) or a table (TOML)")?;
    let mut doc = QueryDoc {
        dataset: String::new(),
        selection: Vec::new(),
        by_value: Vec::new(),
        op: None,
        execution: None,
        null_count: None,
    };
    let mut dataset = None;
    let mut op_key: Option<&str> = None;
    for (k, val) in obj {
        match k.as_str() {
            "layout_version" => {
                if val.as_u64() != Some(1) {
                    return Err(format!("layout_version {val} is not supported (only 1)"));
                }
            }
            "dataset" => dataset = Some(val.as_str().ok_or("\"dataset\" must be a string")?),
            "selection" => (doc.selection, doc.by_value) = parse_selection_values(val)?,
            "execution" => doc.execution = Some(parse_execution(val)?),
            name if OPS.contains(&name) => {
                if let Some(prev) = op_key {
                    return Err(format!(
                        "two operations in one query: \"{prev}\" and \"{name}\""
                    ));
                }
                op_key = Some(name);
                doc.op = Some(parse_op(name, val)?);
                if name == "null_count" {
                    doc.null_count = Some(match val.get("fill") {
                        None | Some(Json::Null) => None,
                        Some(f) => Some(fill_of(f)?),
                    });
                }
            }
            other => {
                return Err(format!(
                    "unknown key \"{other}\" (accepted: layout_version, dataset, selection, \
                     execution, and one of {})",
                    OPS.join(", ")
                ))
            }
        }
    }
    doc.dataset = dataset.ok_or("the query names no \"dataset\"")?.to_string();
    Ok(doc)
}

fn int(v: &Json, what: &str) -> Result<Option<i64>, String> {
    match v {
        Json::Null => Ok(None),
        Json::Number(n) => n
            .as_i64()
            .map(Some)
            .ok_or_else(|| format!("{what} must be an integer, got {n}")),
        other => Err(format!("{what} must be an integer or null, got {other}")),
    }
}

fn fill_of(v: &Json) -> Result<Marker, String> {
    let text = match v {
        Json::Number(n) => n.to_string(),
        Json::String(s) => s.clone(),
        other => {
            return Err(format!(
                "null_count.fill must be a number or \"nan\", got {other}"
            ))
        }
    };
    Marker::parse(&text)
        .ok_or_else(|| format!("null_count.fill must be a number or \"nan\", got {text:?}"))
}

fn bound(v: &Json, what: &str) -> Result<Option<Bound>, String> {
    match v {
        Json::Null => Ok(None),
        Json::String(s) => Ok(Some(Bound::Label(s.clone()))),
        Json::Number(n) => {
            if let Some(i) = n.as_i64() {
                Ok(Some(Bound::Int(i128::from(i))))
            } else if let Some(u) = n.as_u64() {
                Ok(Some(Bound::Int(i128::from(u))))
            } else {
                n.as_f64()
                    .map(|f| Some(Bound::Float(f)))
                    .ok_or_else(|| format!("{what} must be a string or a number, got {n}"))
            }
        }
        other => Err(format!(
            "{what} must be a label (string) or a coordinate value (number), got {other}"
        )),
    }
}

type Selected = (Vec<Slice>, Vec<ValueBounds>);

fn parse_selection_values(v: &Json) -> Result<Selected, String> {
    let list = v.as_array().ok_or(
        "\"selection\" must be a list of {start, stop, step} (or start_label, stop_label) objects",
    )?;
    let mut out = Vec::with_capacity(list.len());
    let mut by_value = Vec::new();
    for (axis, item) in list.iter().enumerate() {
        let mut s = Slice::default();
        let mut vb = ValueBounds {
            axis,
            start: None,
            stop: None,
        };
        match item {
            Json::Null => {}
            Json::Object(m) => {
                for (k, x) in m {
                    let what = format!("selection[{axis}].{k}");
                    match k.as_str() {
                        "start" => s.start = int(x, &what)?,
                        "stop" => s.stop = int(x, &what)?,
                        "step" => s.step = int(x, &what)?,
                        "start_label" => vb.start = bound(x, &what)?,
                        "stop_label" => vb.stop = bound(x, &what)?,
                        other => {
                            return Err(format!(
                                "unknown key \"{other}\" in selection[{axis}] (accepted: start, \
                                 stop, step, start_label, stop_label)"
                            ))
                        }
                    }
                }
                for (index, label, name) in [
                    (s.start.is_some(), vb.start.is_some(), "start"),
                    (s.stop.is_some(), vb.stop.is_some(), "stop"),
                ] {
                    if index && label {
                        return Err(format!(
                            "selection[{axis}]: give either \"{name}\" or \"{name}_label\", not both"
                        ));
                    }
                }
                if vb.start.is_some() || vb.stop.is_some() {
                    by_value.push(vb);
                }
            }
            other => {
                return Err(format!(
                    "selection[{axis}] must be an object with start, stop, step, got {other}"
                ))
            }
        }
        out.push(s);
    }
    Ok((out, by_value))
}

fn parse_execution(v: &Json) -> Result<ExecutionSettings, String> {
    let m = v.as_object().ok_or("\"execution\" must be an object")?;
    let mut e = ExecutionSettings {
        memory_budget_percent_bps: 0,
        memory_budget_bytes: 0,
    };
    for (k, x) in m {
        match k.as_str() {
            "memory_budget_bytes" => {
                e.memory_budget_bytes = x
                    .as_u64()
                    .and_then(|n| u32::try_from(n).ok())
                    .ok_or("execution.memory_budget_bytes must be an integer below 2^32")?;
            }
            "memory_budget_percent_bps" => {
                e.memory_budget_percent_bps = x
                    .as_u64()
                    .and_then(|n| u16::try_from(n).ok())
                    .filter(|n| *n <= 10_000)
                    .ok_or("execution.memory_budget_percent_bps must be 0 ..= 10000")?;
            }
            other => {
                return Err(format!(
                    "unknown key \"{other}\" in execution (accepted: memory_budget_bytes, \
                     memory_budget_percent_bps)"
                ))
            }
        }
    }
    Ok(e)
}

fn axes_of(v: &Json, what: &str) -> Result<Option<Vec<AxisRef>>, String> {
    let one = |x: &Json| -> Result<AxisRef, String> {
        match x {
            Json::String(s) if !s.is_empty() && s.len() <= 1024 => Ok(AxisRef::Name(s.clone())),
            _ => x.as_i64().map(AxisRef::Index).ok_or_else(|| {
                format!(
                    "{what}: an axis must be an integer (negative counts from the end) or a \
                     dimension name, got {x}"
                )
            }),
        }
    };
    match v {
        Json::Null => Ok(None),
        Json::Array(a) if a.is_empty() => Ok(None),
        Json::Array(a) if a.len() > 64 => Err(format!("{what}: {} axes (at most 64)", a.len())),
        Json::Array(a) => a.iter().map(one).collect::<Result<Vec<_>, _>>().map(Some),
        n @ (Json::Number(_) | Json::String(_)) => Ok(Some(vec![one(n)?])),
        other => Err(format!(
            "{what}: axes must be a list or a number, got {other}"
        )),
    }
}

type Op = (Operation, Option<Vec<AxisRef>>);

/// `histogram.range`: `[min, max]`, finite numbers with `min <= max`, or null.
fn range_of(x: &Json) -> Result<Option<(f64, f64)>, String> {
    let bad =
        || format!("histogram.range must be [min, max] (finite, min <= max) or null, got {x}");
    match x {
        Json::Null => Ok(None),
        Json::Array(a) => match a.as_slice() {
            [lo, hi] => {
                let (Some(lo), Some(hi)) = (lo.as_f64(), hi.as_f64()) else {
                    return Err(bad());
                };
                if lo.is_finite() && hi.is_finite() && lo <= hi {
                    Ok(Some((lo, hi)))
                } else {
                    Err(bad())
                }
            }
            _ => Err(bad()),
        },
        _ => Err(bad()),
    }
}

fn parse_op(name: &str, v: &Json) -> Result<Op, String> {
    let mut axes = None;
    let mut ddof: u32 = 0;
    let mut ddof_given = false;
    let mut q: Option<Quantile> = None;
    let mut qs: Option<Quantiles> = None;
    // NumPy's default: 10 bins over the data's range.
    let mut hist = Histogram {
        bins: 10,
        range: None,
    };
    match v {
        Json::Object(m) => {
            if m.contains_key("axis") && m.contains_key("axes") {
                return Err(format!(
                    "{name} has both \"axis\" and \"axes\"; give one of them"
                ));
            }
            for (k, x) in m {
                match k.as_str() {
                    "axes" | "axis" => axes = axes_of(x, name)?,
                    "ddof"
                        if matches!(name, "var" | "std" | "nan_var" | "nan_std" | "covariance") =>
                    {
                        ddof_given = true;
                        ddof = x
                            .as_u64()
                            .and_then(|n| u32::try_from(n).ok())
                            .ok_or_else(|| format!("{name}.ddof must be a non-negative integer"))?;
                    }
                    "fill" if name == "null_count" => {}
                    "bins" if name == "histogram" => {
                        hist.bins = x
                            .as_u64()
                            .filter(|b| (1..=u64::from(MAX_BINS)).contains(b))
                            .and_then(|b| u32::try_from(b).ok())
                            .ok_or_else(|| {
                                format!(
                                    "histogram.bins must be an integer 1 ..= {MAX_BINS}, got {x}"
                                )
                            })?;
                    }
                    "range" if name == "histogram" => hist.range = range_of(x)?,
                    "q" if name == "quantile" => {
                        // NumPy treats an integer q (0, 1) and a float one differently.
                        let one = |x: &Json| -> Result<Quantile, String> {
                            Ok(Quantile {
                                q: x.as_f64().ok_or_else(|| {
                                    format!(
                                        "quantile.q must be a number or a list of numbers, got {x}"
                                    )
                                })?,
                                integral: x.is_i64() || x.is_u64(),
                            })
                        };
                        match x {
                            Json::Array(list) => {
                                if list.is_empty() || list.len() > MAX_QUANTILES {
                                    return Err(format!(
                                        "quantile.q: a list of 1 ..= {MAX_QUANTILES} quantiles, got {}",
                                        list.len()
                                    ));
                                }
                                let all = list.iter().map(one).collect::<Result<Vec<_>, _>>()?;
                                qs = Quantiles::new(&all);
                            }
                            _ => q = Some(one(x)?),
                        }
                    }
                    other => return Err(format!("unknown parameter \"{other}\" for {name}")),
                }
            }
        }
        other => axes = axes_of(other, name)?,
    }
    let r = match name {
        "sum" => Reduce::Sum,
        "prod" => Reduce::Prod,
        "mean" => Reduce::Mean,
        "min" => Reduce::Min,
        "max" => Reduce::Max,
        "count" => Reduce::Count,
        "var" => Reduce::Var(ddof),
        "std" => Reduce::Std(ddof),
        "argmin" => Reduce::ArgMin,
        "argmax" => Reduce::ArgMax,
        "nan_sum" => Reduce::NanSum,
        "nan_mean" => Reduce::NanMean,
        "nan_min" => Reduce::NanMin,
        "nan_max" => Reduce::NanMax,
        "nan_var" => Reduce::NanVar(ddof),
        "nan_std" => Reduce::NanStd(ddof),
        "nan_count" => Reduce::NanCount,
        "inf_count" => Reduce::InfCount,
        "all_finite" => Reduce::AllFinite,
        "any_nan" => Reduce::AnyNan,
        "any_inf" => Reduce::AnyInf,
        "norm_l1" => Reduce::NormL1,
        "norm_l2" => Reduce::NormL2,
        "null_count" => Reduce::NanCount,
        "median" => return Ok((Operation::Median, axes)),
        "histogram" => return Ok((Operation::Histogram(hist), axes)),
        // numpy.cov's default ddof is 1 (bias=False).
        "covariance" => {
            let ddof = if ddof_given { ddof } else { 1 };
            return Ok((
                Operation::Covariance(Cov {
                    ddof,
                    correlation: false,
                }),
                axes,
            ));
        }
        "correlation" => {
            return Ok((
                Operation::Covariance(Cov {
                    ddof: 1,
                    correlation: true,
                }),
                axes,
            ))
        }
        "quantile" => {
            if let Some(qs) = qs {
                return Ok((Operation::Quantiles(qs), axes));
            }
            let q = q.ok_or("quantile needs {\"q\": 0..1} or {\"q\": [0.05, 0.5, ...]}")?;
            return Ok((Operation::Quantile(q), axes));
        }
        other => return Err(format!("unknown operation {other}")),
    };
    Ok((Operation::Reduce(r), axes))
}
