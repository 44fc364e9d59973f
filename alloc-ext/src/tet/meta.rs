//! Axis metadata in the footer's `metadata` object: dimension names, coordinates and
//! attributes per dataset (`metadata.datasets[name]`), and the file's `metadata.file`.
//!
//! The keys are the other implementation's (`dim_names`, `coords.<axis>.labels`, `attrs`,
//! `file.{tool, library_version, created_at}`), plus one of ours, `tet_coords`, naming a
//! 1-D numeric dataset of the same file as an axis's coordinate (docs/tet-v1.md, "Axis
//! metadata"). That reader ignores the key, so such files still open there.
//!
//! Reading is typed and capped ([`parse`]): every list and map has a ceiling and every
//! string at most [`MAX_STRING`] bytes, so what is held is bounded by the JSON the file
//! holds (each label costs at least its two quotes and a comma there). [`check`] applies
//! the rules (one name per axis, unique names, coordinates as long as their axis,
//! referenced datasets that exist and are 1-D) and returns what breaks them as
//! [`Problem`]s with finding codes; the writer refuses metadata with any.

use alloc::borrow::Cow;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt;
use core::marker::PhantomData;

use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::{json, Map, Value};
use tet_core::tet::{Code, DType, Finding, TetFile, MAX_NDIM};
use tet_core::{Error, ErrorKind};

/// Longest string read (a name, label, attr key or value), in bytes; the other
/// implementation's limit too.
pub const MAX_STRING: usize = 1024;
/// Most entries read in `metadata.datasets`.
pub const MAX_DATASETS: usize = 4096;
/// Most attrs read per dataset.
pub const MAX_ATTRS: usize = 1024;
/// Most inline labels read per axis (the other implementation writes at most 64; larger
/// coordinates belong in a coordinate dataset).
pub const MAX_LABELS: usize = 65_536;
/// Most inline labels the other implementation reads per axis; the writer writes no
/// more (a longer coordinate is a dataset, `tet_coords`).
pub const PEER_LABELS: usize = 64;

/// An axis's coordinate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Coord {
    /// Inline labels, one per index (`coords.<axis>.labels`).
    Labels(Vec<String>),
    /// A 1-D dataset of this file holding one value per index (`tet_coords.<axis>.dataset`).
    Dataset(String),
}

/// One dataset's metadata.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DatasetMeta {
    /// One name per axis.
    pub dim_names: Option<Vec<String>>,
    /// Coordinates, keyed as written: a dimension name or a decimal axis index.
    pub coords: Vec<(String, Coord)>,
    /// Attributes (`units`, `long_name`, `_FillValue`, ...), in file order. Numbers and
    /// booleans other writers put here are kept as their JSON text.
    pub attrs: Vec<(String, String)>,
}

/// `metadata.file`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FileInfo {
    /// The tool that wrote the file.
    pub tool: Option<String>,
    /// Its version.
    pub library_version: Option<String>,
    /// When (RFC 3339 text, or the other implementation's Unix seconds).
    pub created_at: Option<String>,
}

/// The key of the root group in [`Metadata::groups`] (`tet_groups`).
pub const ROOT_GROUP: &str = "/";

/// The footer metadata's axis layer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Metadata {
    /// `metadata.file`.
    pub file: Option<FileInfo>,
    /// `metadata.datasets`, in file order.
    pub datasets: Vec<(String, DatasetMeta)>,
    /// `metadata.tet_groups` (ours): the attributes of the source's groups, each keyed by
    /// its path as the names of its datasets begin (`obs/sub`; [`ROOT_GROUP`] for the
    /// root, a NetCDF file's global attributes `title`, `Conventions`, `history`), in
    /// file order. The other implementation ignores the key.
    pub groups: Vec<(String, Vec<(String, String)>)>,
}

impl Metadata {
    /// The metadata of dataset `name`.
    pub fn dataset(&self, name: &str) -> Option<&DatasetMeta> {
        self.datasets
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, d)| d)
    }

    /// Runs `f` on the entry of dataset `name`, created empty when missing.
    pub fn edit(&mut self, name: &str, f: impl FnOnce(&mut DatasetMeta)) {
        match self.datasets.iter_mut().find(|(n, _)| n == name) {
            Some((_, d)) => f(d),
            None => {
                let mut d = DatasetMeta::default();
                f(&mut d);
                self.datasets.push((name.to_string(), d));
            }
        }
    }

    /// Whether there is nothing to write.
    pub fn is_empty(&self) -> bool {
        self.file.is_none()
            && self.datasets.iter().all(|(_, d)| d.is_empty())
            && self.groups.iter().all(|(_, a)| a.is_empty())
    }

    /// The attributes of group `path` ([`Metadata::groups`]).
    pub fn group(&self, path: &str) -> Option<&[(String, String)]> {
        self.groups
            .iter()
            .find(|(p, _)| p == path)
            .map(|(_, a)| a.as_slice())
    }

    /// The metadata as the JSON object both implementations read (empty entries left
    /// out); `tet_coords` for coordinate datasets.
    pub fn to_json(&self) -> Map<String, Value> {
        let mut m = Map::new();
        if let Some(f) = &self.file {
            let mut o = Map::new();
            for (k, v) in [
                ("tool", &f.tool),
                ("library_version", &f.library_version),
                ("created_at", &f.created_at),
            ] {
                if let Some(v) = v {
                    o.insert(k.into(), Value::String(v.clone()));
                }
            }
            m.insert("file".into(), Value::Object(o));
        }
        let mut ds = Map::new();
        for (name, d) in &self.datasets {
            if !d.is_empty() {
                ds.insert(name.clone(), Value::Object(d.to_json()));
            }
        }
        if !ds.is_empty() {
            m.insert("datasets".into(), Value::Object(ds));
        }
        let mut groups = Map::new();
        for (path, attrs) in self.groups.iter().filter(|(_, a)| !a.is_empty()) {
            let a: Map<String, Value> = attrs
                .iter()
                .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                .collect();
            groups.insert(path.clone(), json!({ "attrs": a }));
        }
        if !groups.is_empty() {
            m.insert("tet_groups".into(), Value::Object(groups));
        }
        m
    }
}

impl DatasetMeta {
    /// Whether the entry holds nothing.
    pub fn is_empty(&self) -> bool {
        self.dim_names.is_none() && self.coords.is_empty() && self.attrs.is_empty()
    }

    /// The attribute `key`.
    pub fn attr(&self, key: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Sets attribute `key` (replacing an earlier value).
    pub fn set_attr(&mut self, key: &str, value: &str) {
        match self.attrs.iter_mut().find(|(k, _)| k == key) {
            Some((_, v)) => *v = value.to_string(),
            None => self.attrs.push((key.to_string(), value.to_string())),
        }
    }

    /// The axis called `name`: a dimension name, or a decimal index (as the other
    /// implementation takes `"0"`). `Err` says why not, naming the dataset's dimensions.
    pub fn axis(&self, name: &str, ndim: usize) -> Result<usize, String> {
        if !name.is_empty() && name.bytes().all(|b| b.is_ascii_digit()) {
            return name
                .parse::<usize>()
                .ok()
                .filter(|a| *a < ndim)
                .ok_or_else(|| format!("axis {name} is out of range for {ndim} axes"));
        }
        let Some(names) = &self.dim_names else {
            return Err(format!(
                "axis \"{name}\": the dataset has no dimension names (dim_names)"
            ));
        };
        if names.len() != ndim {
            return Err(format!(
                "axis \"{name}\": the dataset's dim_names has {} names for {ndim} axes",
                names.len()
            ));
        }
        let mut found = names.iter().enumerate().filter(|(_, n)| *n == name);
        match (found.next(), found.next()) {
            (Some((i, _)), None) => Ok(i),
            (Some(_), Some(_)) => Err(format!("axis \"{name}\" is named twice in dim_names")),
            (None, _) => Err(format!(
                "no axis is called \"{name}\" (dim_names: {})",
                names.join(", ")
            )),
        }
    }

    /// The coordinate of axis `d`: keyed by its dimension name, else by its decimal
    /// index (the other implementation's fallback).
    pub fn coord(&self, d: usize) -> Option<&Coord> {
        let by_name = self
            .dim_names
            .as_ref()
            .and_then(|n| n.get(d))
            .and_then(|n| self.coords.iter().find(|(k, _)| k == n));
        let index = d.to_string();
        by_name
            .or_else(|| self.coords.iter().find(|(k, _)| *k == index))
            .map(|(_, c)| c)
    }

    /// The value marking missing elements: `_FillValue`, else `missing_value` (CF); a
    /// plain `fill_value` (Zarr's value for never-written chunks) is not one. `Err`: the
    /// attr is not a number.
    pub fn missing_value(&self) -> Option<Result<(&'static str, f64), String>> {
        ["_FillValue", "missing_value"].into_iter().find_map(|k| {
            let raw = self.attr(k)?;
            Some(
                parse_number(raw)
                    .map(|v| (k, v))
                    .ok_or_else(|| format!("attr {k} = {raw:?} is not a number")),
            )
        })
    }

    fn to_json(&self) -> Map<String, Value> {
        let mut m = Map::new();
        if !self.attrs.is_empty() {
            let a: Map<String, Value> = self
                .attrs
                .iter()
                .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                .collect();
            m.insert("attrs".into(), Value::Object(a));
        }
        if let Some(n) = &self.dim_names {
            m.insert("dim_names".into(), json!(n));
        }
        let mut labels = Map::new();
        let mut refs = Map::new();
        for (k, c) in &self.coords {
            match c {
                Coord::Labels(l) => labels.insert(k.clone(), json!({ "labels": l })),
                Coord::Dataset(d) => refs.insert(k.clone(), json!({ "dataset": d })),
            };
        }
        if !labels.is_empty() {
            m.insert("coords".into(), Value::Object(labels));
        }
        if !refs.is_empty() {
            m.insert("tet_coords".into(), Value::Object(refs));
        }
        m
    }
}

/// A number as attrs write it: decimal text, or `nan`, `inf`, `-inf` (any case).
pub fn parse_number(raw: &str) -> Option<f64> {
    let t = raw.trim();
    match t.to_ascii_lowercase().as_str() {
        "nan" => Some(f64::NAN),
        "inf" | "+inf" | "infinity" => Some(f64::INFINITY),
        "-inf" | "-infinity" => Some(f64::NEG_INFINITY),
        _ => t.parse::<f64>().ok(),
    }
}

// ---------------------------------------------------------------------------------
// Reading, capped.

/// A string of at most [`MAX_STRING`] bytes.
struct Str(String);

impl<'de> Deserialize<'de> for Str {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = Cow::<'de, str>::deserialize(d)?;
        if s.len() > MAX_STRING {
            return Err(de::Error::custom(format!(
                "a string of {} bytes (at most {MAX_STRING})",
                s.len()
            )));
        }
        Ok(Str(s.into_owned()))
    }
}

/// An attr value: a string, or a number or boolean kept as its JSON text.
struct AttrValue(String);

impl<'de> Deserialize<'de> for AttrValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = AttrValue;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an attr value (a string, number or boolean)")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<AttrValue, E> {
                if s.len() > MAX_STRING {
                    return Err(E::custom(format!(
                        "an attr value of {} bytes (at most {MAX_STRING})",
                        s.len()
                    )));
                }
                Ok(AttrValue(s.to_string()))
            }
            fn visit_bool<E>(self, b: bool) -> Result<AttrValue, E> {
                Ok(AttrValue(b.to_string()))
            }
            fn visit_i64<E>(self, n: i64) -> Result<AttrValue, E> {
                Ok(AttrValue(n.to_string()))
            }
            fn visit_u64<E>(self, n: u64) -> Result<AttrValue, E> {
                Ok(AttrValue(n.to_string()))
            }
            fn visit_f64<E>(self, n: f64) -> Result<AttrValue, E> {
                Ok(AttrValue(n.to_string()))
            }
        }
        d.deserialize_any(V)
    }
}

/// A list of at most `N` items; `W` names them in the error.
struct List<T, const N: usize>(Vec<T>);

impl<'de, T: Deserialize<'de>, const N: usize> Deserialize<'de> for List<T, N> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T, const N: usize>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>, const N: usize> Visitor<'de> for V<T, N> {
            type Value = List<T, N>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                write!(f, "a list of at most {N} entries")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<List<T, N>, A::Error> {
                let mut out = Vec::new();
                while let Some(x) = seq.next_element::<T>()? {
                    if out.len() >= N {
                        return Err(de::Error::custom(format!(
                            "a list of more than {N} entries"
                        )));
                    }
                    out.push(x);
                }
                Ok(List(out))
            }
        }
        d.deserialize_seq(V::<T, N>(PhantomData))
    }
}

/// A map of at most `N` entries with unique keys of at most [`MAX_STRING`] bytes.
struct Entries<T, const N: usize>(Vec<(String, T)>);

impl<'de, T: Deserialize<'de>, const N: usize> Deserialize<'de> for Entries<T, N> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T, const N: usize>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>, const N: usize> Visitor<'de> for V<T, N> {
            type Value = Entries<T, N>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                write!(f, "an object of at most {N} entries")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Entries<T, N>, A::Error> {
                let mut out: Vec<(String, T)> = Vec::new();
                while let Some(Str(k)) = map.next_key::<Str>()? {
                    if out.len() >= N {
                        return Err(de::Error::custom(format!(
                            "an object of more than {N} entries"
                        )));
                    }
                    if out.iter().any(|(p, _)| *p == k) {
                        return Err(de::Error::custom(format!("the key {k:?} given twice")));
                    }
                    let v = map.next_value::<T>()?;
                    out.push((k, v));
                }
                Ok(Entries(out))
            }
        }
        d.deserialize_map(V::<T, N>(PhantomData))
    }
}

#[derive(Deserialize)]
struct RawLabels {
    labels: List<Str, MAX_LABELS>,
}

#[derive(Deserialize)]
struct RawRef {
    dataset: Str,
}

#[derive(Deserialize)]
struct RawDataset {
    #[serde(default)]
    attrs: Option<Entries<AttrValue, MAX_ATTRS>>,
    #[serde(default)]
    dim_names: Option<List<Str, MAX_NDIM>>,
    #[serde(default)]
    coords: Option<Entries<RawLabels, MAX_NDIM>>,
    #[serde(default)]
    tet_coords: Option<Entries<RawRef, MAX_NDIM>>,
}

#[derive(Deserialize)]
struct RawFile {
    #[serde(default)]
    tool: Option<Str>,
    #[serde(default)]
    library_version: Option<Str>,
    #[serde(default)]
    created_at: Option<Str>,
}

#[derive(Deserialize)]
struct RawGroup {
    #[serde(default)]
    attrs: Option<Entries<AttrValue, MAX_ATTRS>>,
}

#[derive(Deserialize)]
struct RawMeta {
    #[serde(default)]
    file: Option<RawFile>,
    #[serde(default)]
    datasets: Option<Entries<RawDataset, MAX_DATASETS>>,
    #[serde(default)]
    tet_groups: Option<Entries<RawGroup, MAX_DATASETS>>,
}

#[derive(Deserialize)]
struct RawFooter {
    #[serde(default)]
    metadata: Option<RawMeta>,
    #[serde(default)]
    #[allow(dead_code)]
    history: IgnoredAny,
}

impl From<RawMeta> for Metadata {
    fn from(r: RawMeta) -> Metadata {
        let file = r.file.map(|f| FileInfo {
            tool: f.tool.map(|s| s.0),
            library_version: f.library_version.map(|s| s.0),
            created_at: f.created_at.map(|s| s.0),
        });
        let datasets = r
            .datasets
            .map(|e| e.0)
            .unwrap_or_default()
            .into_iter()
            .map(|(name, d)| {
                let mut coords: Vec<(String, Coord)> = d
                    .coords
                    .map(|e| e.0)
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, l)| {
                        (
                            k,
                            Coord::Labels(l.labels.0.into_iter().map(|s| s.0).collect()),
                        )
                    })
                    .collect();
                coords.extend(
                    d.tet_coords
                        .map(|e| e.0)
                        .unwrap_or_default()
                        .into_iter()
                        .map(|(k, r)| (k, Coord::Dataset(r.dataset.0))),
                );
                let meta = DatasetMeta {
                    dim_names: d.dim_names.map(|l| l.0.into_iter().map(|s| s.0).collect()),
                    coords,
                    attrs: d
                        .attrs
                        .map(|e| e.0)
                        .unwrap_or_default()
                        .into_iter()
                        .map(|(k, v)| (k, v.0))
                        .collect(),
                };
                (name, meta)
            })
            .collect();
        let groups = r
            .tet_groups
            .map(|e| e.0)
            .unwrap_or_default()
            .into_iter()
            .map(|(path, g)| {
                let attrs = g
                    .attrs
                    .map(|e| e.0)
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| (k, v.0))
                    .collect();
                (path, attrs)
            })
            .collect();
        Metadata {
            file,
            datasets,
            groups,
        }
    }
}

/// Why the metadata could not be read: where (absolute byte offset of the JSON the
/// parser stopped in) and what the parser said.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseError {
    /// The offset in the file.
    pub offset: u64,
    /// The parser's words.
    pub message: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "metadata at byte {}: {}", self.offset, self.message)
    }
}

fn at(base: u64, e: &serde_json::Error) -> ParseError {
    // The JSON this writer and the other one write is one line, so the column is the
    // byte; on later lines the offset is the JSON's start.
    let col = if e.line() == 1 {
        u64::try_from(e.column().saturating_sub(1)).unwrap_or(0)
    } else {
        0
    };
    ParseError {
        offset: base.saturating_add(col),
        message: e.to_string(),
    }
}

/// Parses a metadata object (`json` starting at file offset `base`).
pub fn parse(json: &[u8], base: u64) -> Result<Metadata, ParseError> {
    let mut de = serde_json::Deserializer::from_slice(json);
    let m = RawMeta::deserialize(&mut de).map_err(|e| at(base, &e))?;
    de.end().map_err(|e| at(base, &e))?;
    Ok(m.into())
}

/// The axis metadata of `file`: `Ok(None)` when it has no footer or no metadata.
/// Inline metadata is read from the footer JSON, a spill from the span `metadata_ref`
/// names (only when it lies inside the file).
pub fn read(file: &TetFile<'_>) -> Result<Option<Metadata>, ParseError> {
    let Some(footer) = file.footer() else {
        return Ok(None);
    };
    let base = footer.json_offset();
    let h = crate::tet::history::parse(footer.history_json()).map_err(|message| ParseError {
        offset: base,
        message,
    })?;
    if h.inline_metadata {
        let mut de = serde_json::Deserializer::from_slice(footer.history_json());
        let f = RawFooter::deserialize(&mut de).map_err(|e| at(base, &e))?;
        return Ok(f.metadata.map(Metadata::from));
    }
    let Some((offset, len)) = h.metadata_ref else {
        return Ok(None);
    };
    let spill = usize::try_from(offset)
        .ok()
        .zip(usize::try_from(len).ok())
        .and_then(|(o, l)| file.bytes().get(o..o.checked_add(l)?))
        .ok_or_else(|| ParseError {
            offset: base,
            message: format!("metadata_ref {offset}+{len} lies outside the file"),
        })?;
    parse(spill, offset).map(Some)
}

// ---------------------------------------------------------------------------------
// Rules.

/// One broken rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// The finding code.
    pub code: Code,
    /// The field, as docs/tet-v1.md names it.
    pub field: &'static str,
    /// The dataset whose metadata breaks it.
    pub dataset: String,
    /// What is wrong, naming the values.
    pub message: String,
}

impl Problem {
    /// The finding, located at `offset` (the metadata JSON's start).
    pub fn finding(&self, offset: u64) -> Finding {
        Finding::new(
            self.code,
            Error::new(ErrorKind::Invalid, self.field, offset),
        )
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.field.strip_prefix("metadata.datasets.") {
            Some(key) => write!(
                f,
                "metadata.datasets[{:?}].{key}: {}",
                self.dataset, self.message
            ),
            None => write!(f, "metadata.datasets[{:?}]: {}", self.dataset, self.message),
        }
    }
}

/// Checks `meta` against the file's datasets, `shape_of(name)` giving a dataset's shape
/// (`None`: no such dataset).
pub fn check(meta: &Metadata, shape_of: &dyn Fn(&str) -> Option<Vec<u64>>) -> Vec<Problem> {
    check_typed(meta, shape_of, &|_| None)
}

/// The range of an integer element type, `None` for floats.
fn int_range(d: DType) -> Option<(i128, i128)> {
    let r = match d {
        DType::U8 => (0, i128::from(u8::MAX)),
        DType::U16 => (0, i128::from(u16::MAX)),
        DType::U32 => (0, i128::from(u32::MAX)),
        DType::U64 => (0, i128::from(u64::MAX)),
        DType::I16 => (i128::from(i16::MIN), i128::from(i16::MAX)),
        DType::I32 => (i128::from(i32::MIN), i128::from(i32::MAX)),
        DType::I64 => (i128::from(i64::MIN), i128::from(i64::MAX)),
        DType::F16 | DType::F32 | DType::F64 => return None,
    };
    Some(r)
}

/// Why a missing-value marker written as `text` can never equal an element of `dtype`
/// (an integer type holds no fraction, NaN or infinity, and nothing past its range).
pub fn marker_unrepresentable(text: &str, dtype: DType) -> Option<String> {
    let (lo, hi) = int_range(dtype)?;
    let v = parse_number(text)?;
    let out_of_range = || {
        Some(format!(
            "is outside the range of {} ({lo} ..= {hi}), so no element can be it",
            dtype.name()
        ))
    };
    if let Ok(i) = text.trim().parse::<i128>() {
        return if (lo..=hi).contains(&i) {
            None
        } else {
            out_of_range()
        };
    }
    // Written as a float (`70000.0`, `1e3`): a whole number is compared as one. A finite
    // f64 prints in full without a point exactly when it is whole.
    let shown = format!("{v}");
    if !v.is_finite() || shown.contains('.') {
        return Some(format!(
            "is not an integer, so no {} element can be it",
            dtype.name()
        ));
    }
    match shown.parse::<i128>() {
        Ok(i) if (lo..=hi).contains(&i) => None,
        _ => out_of_range(),
    }
}

/// [`check`], with each dataset's element type from `dtype_of` (`None`: unknown), so a
/// missing-value marker no element can equal is reported too.
pub fn check_typed(
    meta: &Metadata,
    shape_of: &dyn Fn(&str) -> Option<Vec<u64>>,
    dtype_of: &dyn Fn(&str) -> Option<DType>,
) -> Vec<Problem> {
    let mut out = Vec::new();
    for (name, d) in &meta.datasets {
        let mut say = |code: Code, field: &'static str, message: String| {
            out.push(Problem {
                code,
                field,
                dataset: name.clone(),
                message,
            });
        };
        // An entry for a dataset the file lacks is free metadata, which no rule reads.
        let Some(shape) = shape_of(name) else {
            continue;
        };
        let ndim = shape.len();
        if let Some(names) = &d.dim_names {
            if names.len() != ndim {
                say(
                    Code::MetadataDims,
                    "metadata.datasets.dim_names",
                    format!("{} names for {ndim} axes", names.len()),
                );
            }
            for (i, n) in names.iter().enumerate() {
                if n.is_empty() {
                    say(
                        Code::MetadataDims,
                        "metadata.datasets.dim_names",
                        format!("name {i} is empty"),
                    );
                } else if names.iter().take(i).any(|p| p == n) {
                    say(
                        Code::MetadataDims,
                        "metadata.datasets.dim_names",
                        format!("{n:?} names two axes"),
                    );
                } else if n.bytes().all(|b| b.is_ascii_digit()) {
                    say(
                        Code::MetadataDims,
                        "metadata.datasets.dim_names",
                        format!("{n:?} is a number, which names an axis by index"),
                    );
                }
            }
        }
        for (i, (key, c)) in d.coords.iter().enumerate() {
            let field = match c {
                Coord::Labels(_) => "metadata.datasets.coords",
                Coord::Dataset(_) => "metadata.datasets.tet_coords",
            };
            let axis = d
                .dim_names
                .as_ref()
                .and_then(|n| n.iter().position(|x| x == key))
                .filter(|a| *a < ndim)
                .or_else(|| {
                    key.bytes()
                        .all(|b| b.is_ascii_digit())
                        .then(|| key.parse::<usize>().ok())
                        .flatten()
                        .filter(|a| *a < ndim)
                });
            let Some(axis) = axis else {
                say(
                    Code::MetadataCoords,
                    field,
                    format!("{key:?} is neither a dimension name nor an axis index"),
                );
                continue;
            };
            if d.coords.iter().take(i).any(|(k, _)| k == key) {
                say(
                    Code::MetadataCoords,
                    field,
                    format!("axis {key:?} has both inline labels and a coordinate dataset"),
                );
            }
            let len = shape.get(axis).copied().unwrap_or(0);
            match c {
                Coord::Labels(l) => {
                    let n = u64::try_from(l.len()).unwrap_or(u64::MAX);
                    if n != len {
                        say(
                            Code::MetadataCoords,
                            field,
                            format!("axis {key:?} has {n} labels for {len} indices"),
                        );
                    }
                }
                Coord::Dataset(r) => match shape_of(r) {
                    None => say(
                        Code::MetadataCoords,
                        field,
                        format!("axis {key:?} names dataset {r:?}, which the file does not have"),
                    ),
                    Some(s) if s.len() != 1 => say(
                        Code::MetadataCoords,
                        field,
                        format!(
                            "axis {key:?} names dataset {r:?} of {} axes (a coordinate is 1-D)",
                            s.len()
                        ),
                    ),
                    Some(s) if s.first().copied() != Some(len) => say(
                        Code::MetadataCoords,
                        field,
                        format!(
                            "axis {key:?} names dataset {r:?} of {} values for {len} indices",
                            s.first().copied().unwrap_or(0)
                        ),
                    ),
                    Some(_) => {}
                },
            }
        }
        if let Err(e) = crate::tet::decode::cf_markers(|k| d.attr(k)) {
            say(
                Code::MetadataAttrs,
                "metadata.datasets.attrs",
                e.to_string(),
            );
        }
        for key in ["scale_factor", "add_offset"] {
            if let Some(text) = d.attr(key) {
                if !parse_number(text).is_some_and(f64::is_finite) {
                    say(
                        Code::MetadataAttrs,
                        "metadata.datasets.attrs",
                        format!("attr {key} = {text:?} is not a finite number"),
                    );
                }
            }
        }
        if let Some(dtype) = dtype_of(name) {
            for key in crate::tet::decode::MARKER_KEYS {
                let Some(text) = d.attr(key) else { continue };
                // `missing_value` beside a list is the list's first value, said with it.
                if key == "missing_value" && d.attr("missing_value_list").is_some() {
                    continue;
                }
                for item in crate::tet::decode::marker_texts(key, text) {
                    let Some(why) = marker_unrepresentable(item, dtype) else {
                        continue;
                    };
                    // A list's value is named within it.
                    let message = if item == text.trim() {
                        format!("attr {key} = {text:?} {why}")
                    } else {
                        format!("attr {key} = {text:?}: its value {item} {why}")
                    };
                    say(Code::MetadataAttrs, "metadata.datasets.attrs", message);
                }
            }
        }
    }
    out
}

/// [`check`] against the datasets of `file` (a dataset record that does not parse has
/// no shape, so metadata naming it is reported as naming nothing).
pub fn check_file(meta: &Metadata, file: &TetFile<'_>) -> Vec<Problem> {
    let shape_of =
        |name: &str| -> Option<Vec<u64>> { file.dataset(name).ok().map(|d| d.shape().collect()) };
    let dtype_of = |name: &str| file.dataset(name).ok().map(|d| d.dtype());
    check_typed(meta, &shape_of, &dtype_of)
}

/// The offset where `file`'s metadata JSON starts (the spill, or the footer JSON).
pub fn offset(file: &TetFile<'_>) -> u64 {
    let Some(footer) = file.footer() else {
        return 0;
    };
    match crate::tet::history::parse(footer.history_json()) {
        Ok(h) => h.metadata_ref.map_or(footer.json_offset(), |(o, _)| o),
        Err(_) => footer.json_offset(),
    }
}

/// Every metadata finding of `file`, each with its note: `metadata-shape` when the
/// metadata does not parse in these shapes, else one per broken rule. Nothing when the
/// footer JSON or the spill is invalid or misplaced (`footer-json`, `metadata-spill`).
pub fn findings(file: &TetFile<'_>) -> Vec<(Finding, String)> {
    let Some(footer) = file.footer() else {
        return Vec::new();
    };
    // A footer JSON or spill that is not valid, or a spill outside the room before the
    // footer, is `footer-json`'s or `metadata-spill`'s.
    let checked = crate::tet::history::check_footer(file);
    let misplaced = checked.history.as_ref().is_some_and(|h| {
        h.metadata_ref
            .is_some_and(|(o, l)| o.checked_add(l).is_none_or(|e| e > footer.json_offset()))
    });
    if !checked.problems.is_empty() || checked.history.is_none() || misplaced {
        return Vec::new();
    }
    match read(file) {
        Ok(None) => Vec::new(),
        Ok(Some(m)) => {
            let at = offset(file);
            check_file(&m, file)
                .iter()
                .map(|p| (p.finding(at), p.to_string()))
                .collect()
        }
        Err(e) => {
            let f = Finding::new(
                Code::MetadataShape,
                Error::new(ErrorKind::Invalid, "metadata", e.offset),
            );
            alloc::vec![(f, e.message)]
        }
    }
}

// ---------------------------------------------------------------------------------
// Resolving selections by coordinate value.

/// A coordinate's values, as a selection compares them.
#[derive(Clone, Debug, PartialEq)]
pub enum Values {
    /// Strings (inline labels).
    Labels(Vec<String>),
    /// Integers (an integer coordinate dataset), exactly.
    Ints(Vec<i128>),
    /// Floats (a float coordinate dataset).
    Floats(Vec<f64>),
}

/// A bound of a selection by value.
#[derive(Clone, Debug, PartialEq)]
pub enum Bound {
    /// A label.
    Label(String),
    /// An integer.
    Int(i128),
    /// A float.
    Float(f64),
}

impl fmt::Display for Bound {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Bound::Label(s) => write!(f, "{s:?}"),
            Bound::Int(n) => write!(f, "{n}"),
            Bound::Float(x) => write!(f, "{x}"),
        }
    }
}

/// Which way a coordinate is sorted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Order {
    Ascending,
    Descending,
    Unsorted,
}

fn order_of<T>(v: &[T], le: impl Fn(&T, &T) -> bool) -> Order {
    let up = v.windows(2).all(|w| match w {
        [a, b] => le(a, b),
        _ => true,
    });
    if up {
        return Order::Ascending;
    }
    let down = v.windows(2).all(|w| match w {
        [a, b] => le(b, a),
        _ => true,
    });
    if down {
        Order::Descending
    } else {
        Order::Unsorted
    }
}

/// The index a bound resolves to: the first exact match, else (on a sorted coordinate)
/// the first index whose value is past the bound in the coordinate's order (at or above
/// it when ascending, at or below when descending), so `[start, stop)` of two bounds is
/// half-open. `Err`: the bound is of another kind than the values, or matches nothing
/// on an unsorted coordinate.
pub fn resolve_bound(values: &Values, b: &Bound) -> Result<u64, String> {
    fn find<T>(
        v: &[T],
        eq: impl Fn(&T) -> bool,
        below: impl Fn(&T) -> bool,
        above: impl Fn(&T) -> bool,
        le: impl Fn(&T, &T) -> bool,
    ) -> Result<usize, &'static str> {
        if let Some(i) = v.iter().position(eq) {
            return Ok(i);
        }
        match order_of(v, le) {
            Order::Ascending => Ok(v.partition_point(below)),
            Order::Descending => Ok(v.partition_point(above)),
            Order::Unsorted => Err("the coordinate is not sorted, so only its exact values select"),
        }
    }
    let r = match (values, b) {
        (_, Bound::Float(x)) if x.is_nan() => {
            return Err(format!(
                "{b} is not a bound: NaN equals no value and has no place in an order"
            ))
        }
        (Values::Labels(v), Bound::Label(s)) => find(
            v,
            |x| x == s,
            |x| x.as_str() < s.as_str(),
            |x| x.as_str() > s.as_str(),
            |a, b| a <= b,
        ),
        (Values::Ints(v), Bound::Int(n)) => {
            find(v, |x| x == n, |x| x < n, |x| x > n, |a, b| a <= b)
        }
        (Values::Ints(v), Bound::Float(x)) => find(
            v,
            |a| int_f64(*a) == *x,
            |a| int_f64(*a) < *x,
            |a| int_f64(*a) > *x,
            |a, b| a <= b,
        ),
        (Values::Floats(v), Bound::Int(n)) => float_bound(v, int_f64(*n)),
        (Values::Floats(v), Bound::Float(x)) => float_bound(v, *x),
        (Values::Labels(_), _) => {
            return Err(format!(
                "{b} is a number; this axis's coordinate is labels (give a string)"
            ))
        }
        (_, Bound::Label(_)) => {
            return Err(format!(
                "{b} is a string; this axis's coordinate is numbers (give a number)"
            ))
        }
    };
    match r {
        Ok(i) => Ok(u64::try_from(i).unwrap_or(u64::MAX)),
        Err(why) => Err(format!("{b} is not one of its values and {why}")),
    }
}

/// [`resolve_bound`] on a float coordinate: an exact value selects wherever it is, NaN
/// elements or not; between values, the coordinate must be sorted, which a NaN element
/// breaks (it has no place in an order).
fn float_bound(v: &[f64], x: f64) -> Result<usize, &'static str> {
    if let Some(i) = v.iter().position(|a| *a == x) {
        return Ok(i);
    }
    if v.iter().any(|a| a.is_nan()) {
        return Err(
            "the coordinate holds NaN, so it is not sorted and only its exact values select",
        );
    }
    match order_of(v, |a, b| a <= b) {
        Order::Ascending => Ok(v.partition_point(|a| *a < x)),
        Order::Descending => Ok(v.partition_point(|a| *a > x)),
        Order::Unsorted => Err("the coordinate is not sorted, so only its exact values select"),
    }
}

/// An integer as the nearest `f64` (exact below 2^53, as coordinates are).
pub(crate) fn int_f64(n: i128) -> f64 {
    // The workspace forbids `as`; i64's range is exact enough for coordinates, and a
    // value beyond it compares as the extreme.
    match i64::try_from(n) {
        Ok(v) => {
            let hi = i32::try_from(v >> 32).unwrap_or(0);
            let lo = u32::try_from(v & 0xFFFF_FFFF).unwrap_or(0);
            f64::from(hi) * 4_294_967_296.0 + f64::from(lo)
        }
        Err(_) if n < 0 => f64::NEG_INFINITY,
        Err(_) => f64::INFINITY,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;
    use alloc::vec;

    fn shapes(name: &str) -> Option<Vec<u64>> {
        match name {
            "t" => Some(vec![3, 2]),
            "time" => Some(vec![3]),
            "grid" => Some(vec![3, 2]),
            _ => None,
        }
    }

    #[test]
    fn parses_peer_shapes_and_ours() {
        let m = parse(
            br#"{"file":{"tool":"tet","created_at":"1"},"datasets":{"t":{"dim_names":["time","x"],"coords":{"x":{"labels":["a","b"]}},"tet_coords":{"time":{"dataset":"time"}},"attrs":{"units":"K","_FillValue":-9999,"ok":true}}},"tet_checksums":{"algorithm":"crc32c","offset":1,"rows":1}}"#,
            0,
        )
        .unwrap();
        let d = m.dataset("t").unwrap();
        assert_eq!(d.axis("time", 2), Ok(0));
        assert_eq!(d.axis("1", 2), Ok(1));
        assert!(d.axis("y", 2).unwrap_err().contains("time, x"));
        assert_eq!(d.coord(0), Some(&Coord::Dataset("time".into())));
        assert_eq!(
            d.coord(1),
            Some(&Coord::Labels(vec!["a".into(), "b".into()]))
        );
        assert_eq!(d.attr("_FillValue"), Some("-9999"));
        assert_eq!(d.missing_value().unwrap().unwrap().1, -9999.0);
        assert!(check(&m, &shapes).is_empty());
        let back = parse(
            serde_json::Value::Object(m.to_json())
                .to_string()
                .as_bytes(),
            0,
        )
        .unwrap();
        assert_eq!(back.dataset("t"), m.dataset("t"));
    }

    /// Group attributes (`tet_groups`) read back as written, in order; a value that is
    /// not a string, number or boolean is a shape error.
    #[test]
    fn group_attributes_round_trip() {
        let m = parse(
            br#"{"datasets":{"t":{"attrs":{"units":"K"}}},"tet_groups":{"/":{"attrs":{"title":"a run","Conventions":"CF-1.8","version":3}},"obs":{"attrs":{"station":"x"}},"empty":{}}}"#,
            0,
        )
        .unwrap();
        assert_eq!(
            m.group(ROOT_GROUP),
            Some(
                &[
                    ("title".to_string(), "a run".to_string()),
                    ("Conventions".to_string(), "CF-1.8".to_string()),
                    ("version".to_string(), "3".to_string()),
                ][..]
            )
        );
        assert_eq!(
            m.group("obs"),
            Some(&[("station".to_string(), "x".to_string())][..])
        );
        assert_eq!(m.group("empty"), Some(&[][..]));
        let j = serde_json::Value::Object(m.to_json()).to_string();
        assert!(
            j.contains(r#""tet_groups":{"/":{"attrs":{"title":"a run","Conventions":"CF-1.8","version":"3"}},"obs":{"attrs":{"station":"x"}}}"#),
            "{j}"
        );
        let back = parse(j.as_bytes(), 0).unwrap();
        assert_eq!(back.group(ROOT_GROUP), m.group(ROOT_GROUP));
        assert_eq!(back.group("empty"), None);
        assert!(parse(br#"{"tet_groups":{"/":{"attrs":{"a":[1]}}}}"#, 0).is_err());
        assert!(!Metadata {
            groups: vec![("/".into(), vec![("a".into(), "b".into())])],
            ..Metadata::default()
        }
        .is_empty());
    }

    #[test]
    fn caps_and_shapes_are_errors_with_offsets() {
        let many: Vec<String> = (0..70_000).map(|i| format!("\"{i}\"")).collect();
        let big = format!(
            r#"{{"datasets":{{"t":{{"coords":{{"x":{{"labels":[{}]}}}}}}}}}}"#,
            many.join(",")
        );
        let e = parse(big.as_bytes(), 100).unwrap_err();
        assert!(e.message.contains("more than 65536"), "{e}");
        assert!(e.offset > 100);
        let long = format!(
            r#"{{"datasets":{{"t":{{"attrs":{{"u":"{}"}}}}}}}}"#,
            "x".repeat(2000)
        );
        assert!(parse(long.as_bytes(), 0)
            .unwrap_err()
            .message
            .contains("2000 bytes"));
        for bad in [
            r#"{"datasets":{"t":{"dim_names":["a","b","c","d","e","f","g","h","i"]}}}"#,
            r#"{"datasets":{"t":{"dim_names":"a"}}}"#,
            r#"{"datasets":{"t":{"attrs":{"a":[1]}}}}"#,
            r#"{"datasets":{"t":{"coords":{"x":{}}}}}"#,
            r#"{"datasets":{"t":{},"t":{}}}"#,
        ] {
            assert!(parse(bad.as_bytes(), 0).is_err(), "{bad}");
        }
    }

    #[test]
    fn rules() {
        let m = parse(
            br#"{"datasets":{
              "t":{"dim_names":["a","a","c"],"coords":{"q":{"labels":[]},"0":{"labels":["x"]}},"tet_coords":{"1":{"dataset":"nope"},"0":{"dataset":"grid"}},"attrs":{"_FillValue":"none"}},
              "ghost":{"attrs":{"u":"K"}},
              "grid":{"tet_coords":{"0":{"dataset":"grid"}}}}}"#,
            0,
        )
        .unwrap();
        let p = check(&m, &shapes);
        let says: Vec<String> = p.iter().map(|p| p.to_string()).collect();
        let has = |code: Code, s: &str| {
            assert!(
                p.iter().any(|x| x.code == code && x.message.contains(s)),
                "{code:?} {s}: {says:?}"
            )
        };
        has(Code::MetadataDims, "3 names for 2 axes");
        has(Code::MetadataDims, "names two axes");
        has(Code::MetadataCoords, "neither a dimension name");
        has(Code::MetadataCoords, "1 labels for 3 indices");
        has(Code::MetadataCoords, "does not have");
        has(Code::MetadataCoords, "of 2 axes");
        has(Code::MetadataCoords, "both inline labels");
        has(Code::MetadataAttrs, "not a number");
        assert!(!says.iter().any(|s| s.contains("ghost")), "{says:?}");
    }

    #[test]
    fn bounds() {
        let l = Values::Labels(vec!["2024-01".into(), "2024-02".into(), "2024-04".into()]);
        let lb = |s: &str| Bound::Label(s.into());
        assert_eq!(resolve_bound(&l, &lb("2024-02")), Ok(1));
        assert_eq!(resolve_bound(&l, &lb("2024-03")), Ok(2));
        assert_eq!(resolve_bound(&l, &lb("2025")), Ok(3));
        assert!(resolve_bound(&l, &Bound::Int(1)).is_err());
        let u = Values::Labels(vec!["b".into(), "a".into(), "c".into()]);
        assert_eq!(resolve_bound(&u, &lb("a")), Ok(1));
        assert!(resolve_bound(&u, &lb("bb"))
            .unwrap_err()
            .contains("not sorted"));
        let d = Values::Floats(vec![90.0, 45.0, 0.0, -45.0]);
        assert_eq!(resolve_bound(&d, &Bound::Float(50.0)), Ok(1));
        assert_eq!(resolve_bound(&d, &Bound::Int(0)), Ok(2));
        let i = Values::Ints(vec![10, 20, 30]);
        assert_eq!(resolve_bound(&i, &Bound::Int(25)), Ok(2));
        assert_eq!(resolve_bound(&i, &Bound::Float(20.5)), Ok(2));
        assert_eq!(int_f64(-3), -3.0);
        assert_eq!(int_f64(1 << 40), 1_099_511_627_776.0);
    }

    #[test]
    fn nan_in_a_float_coordinate() {
        let f = Values::Floats(vec![10.0, f64::NAN, 30.0, 40.0]);
        // Exact values select wherever they are.
        assert_eq!(resolve_bound(&f, &Bound::Float(30.0)), Ok(2));
        assert_eq!(resolve_bound(&f, &Bound::Int(40)), Ok(3));
        assert_eq!(resolve_bound(&f, &Bound::Float(10.0)), Ok(0));
        // Between values the order is broken by the NaN.
        let e = resolve_bound(&f, &Bound::Float(35.0)).unwrap_err();
        assert!(e.contains("holds NaN"), "{e}");
        // A NaN bound is refused on every kind of coordinate.
        for v in [
            f.clone(),
            Values::Floats(vec![1.0, 2.0]),
            Values::Ints(vec![1, 2]),
        ] {
            let e = resolve_bound(&v, &Bound::Float(f64::NAN)).unwrap_err();
            assert!(e.contains("NaN is not a bound"), "{e}");
        }
    }

    #[test]
    fn markers_an_element_can_equal() {
        let no = |t: &str, d: DType| marker_unrepresentable(t, d);
        assert_eq!(no("255", DType::U8), None);
        assert_eq!(no("-1", DType::I16), None);
        assert_eq!(no("-32768.0", DType::I16), None);
        assert_eq!(no("1e20", DType::F32), None);
        assert_eq!(no("nan", DType::F64), None);
        assert!(no("256", DType::U8).unwrap().contains("u8 (0 ..= 255)"));
        assert!(no("-1", DType::U64).unwrap().contains("outside the range"));
        assert!(no("0.5", DType::I32).unwrap().contains("not an integer"));
        assert!(no("inf", DType::I64).unwrap().contains("not an integer"));
        assert!(no("5e9", DType::U32).unwrap().contains("outside the range"));
        // Found by the typed check, as a warning-severity attrs finding.
        let m = parse(br#"{"datasets":{"c":{"attrs":{"_FillValue":"300"}}}}"#, 0).unwrap();
        let p = check_typed(&m, &|_| Some(alloc::vec![4]), &|_| Some(DType::U8));
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].code, Code::MetadataAttrs);
        assert!(
            p[0].to_string().contains("attr _FillValue = \"300\""),
            "{}",
            p[0]
        );
        assert!(check(&m, &|_| Some(alloc::vec![4])).is_empty());
        let m = parse(
            br#"{"datasets":{"c":{"attrs":{"scale_factor":"x","add_offset":"inf"}}}}"#,
            0,
        )
        .unwrap();
        let p = check(&m, &|_| Some(alloc::vec![4]));
        assert_eq!(p.len(), 2);
        assert!(p[0]
            .to_string()
            .contains("scale_factor = \"x\" is not a finite number"));
        assert!(p[1].to_string().contains("add_offset = \"inf\""));
        // Each value of a missing_value list is checked, and a list longer than the
        // markers hold is named.
        let m = parse(
            br#"{"datasets":{"c":{"attrs":{"missing_value":"1","missing_value_list":"[1, 2, 300]"}}}}"#,
            0,
        )
        .unwrap();
        let p = check_typed(&m, &|_| Some(alloc::vec![4]), &|_| Some(DType::U8));
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(
            p[0].to_string()
                .contains("missing_value_list = \"[1, 2, 300]\": its value 300 is outside"),
            "{}",
            p[0]
        );
        let long = r#"{"datasets":{"c":{"attrs":{"_FillValue":"0","missing_value_list":"[1, 2, 3, 4, 5, 6, 7, 8, 9]"}}}}"#;
        let p = check(&parse(long.as_bytes(), 0).unwrap(), &|_| {
            Some(alloc::vec![4])
        });
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(
            p[0].to_string()
                .contains("attr missing_value_list = \"[1, 2, 3, 4, 5, 6, 7, 8, 9]\" is not a list .tet can mark with (at most 9 distinct markers, _FillValue and missing_value together)"),
            "{}",
            p[0]
        );
        let ok = r#"{"datasets":{"c":{"attrs":{"_FillValue":"0","missing_value":"[1, 2]","missing_value_list":"[1, 2, 3, 4, 5, 6, 7, 8]"}}}}"#;
        assert!(check(&parse(ok.as_bytes(), 0).unwrap(), &|_| Some(alloc::vec![4])).is_empty());
    }
}
