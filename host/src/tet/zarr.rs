//! Zarr v3 stores for `convert` (a store to `.tet`) and `export` (`.tet` to a store),
//! through the `zarrs` crate.
//!
//! The store's hierarchy is walked here (each node's `zarr.json`, read with a size cap and
//! checked field by field so a bad store is named precisely); the data goes through
//! `zarrs`, which decodes every codec of its default features (bytes in either
//! endianness, transpose, zstd, gzip, blosc, crc32c, sharding) and gives missing chunks
//! as the fill value. Conversion reads one output tile at a time (by default the source
//! chunk), so memory is a batch of tiles, never the array.
//!
//! With zstd output, an array whose chunks are stored as zstd frames of exactly the
//! bytes a `.tet` tile holds (codecs `bytes` little-endian then `zstd` with a content
//! checksum) has its interior chunks' frames copied unchanged, each first held to every
//! rule the `.tet` reader applies to a zstd chunk ([`copied_frame`]); the rest is
//! decoded and re-encoded.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rayon::prelude::*;
use serde_json::{json, Map, Value};
use tet_alloc::tet::decode::ChunkDecoder;
use tet_core::tet::{Chunk, Codec, Coords, DType, DatasetId};
use zarrs::array::{Array, ArrayBytes, ArraySubset};
use zarrs::filesystem::FilesystemStore;

use crate::tet::codec::CZstd;
use crate::tet::convert::ConvertOptions;
use crate::tet::ingest::{self, Fail, Planned, Provenance};
use crate::tet::write::Payload;
use crate::Exit;

/// The largest `zarr.json` read (a hostile store cannot make us read more).
const MAX_METADATA: u64 = 16 << 20;
/// The deepest group nesting walked.
const MAX_DEPTH: usize = 32;

pub use crate::tet::dims::{FILL_KEY, JSON_ATTRS_KEY};

/// Whether `path` is a Zarr v3 store: a directory with a `zarr.json`.
pub fn is_store(path: &Path) -> bool {
    path.is_dir() && path.join("zarr.json").is_file()
}

/// One array of the source store.
struct Source {
    /// The dataset name: the array's path in the store, without the leading `/`.
    name: String,
    /// The array's path in the store (`/` for a root array).
    node: String,
    /// The `zarr.json` it came from (for messages).
    file: PathBuf,
    /// Zarr's `data_type`.
    zarr_type: String,
    dtype: DType,
    shape: Vec<u64>,
    chunk: Vec<u64>,
    dims: Option<Vec<String>>,
    attrs: Vec<(String, String)>,
    json_attrs: Vec<String>,
    fill: Value,
    /// Whether its stored chunks are zstd frames (with a content checksum) of the bytes a
    /// `.tet` tile holds ([`frames_copyable`]).
    frames: bool,
    /// A 0-d array: `shape` and `chunk` are `[1]` (a `.tet` dataset has at least one
    /// axis), read as the array's one element and marked `numpy_shape = []`.
    scalar: bool,
}

/// A codec entry of `codecs`: its name and configuration (an entry may be the bare name);
/// `None` for an entry with anything else in it (`must_understand`, say).
fn codec_parts(v: &Value) -> Option<(&str, Option<&Map<String, Value>>)> {
    match v {
        Value::String(name) => Some((name, None)),
        Value::Object(o) => {
            if o.keys().any(|k| k != "name" && k != "configuration") {
                return None;
            }
            let name = o.get("name")?.as_str()?;
            match o.get("configuration") {
                None => Some((name, None)),
                Some(Value::Object(c)) => Some((name, Some(c))),
                Some(_) => None,
            }
        }
        _ => None,
    }
}

/// Whether the array's stored chunks are zstd frames of exactly the bytes a `.tet` tile
/// of the same shape holds: `codecs` is `bytes` (little-endian, or a one-byte type) then
/// `zstd` with `checksum: true` and nothing else (no transpose, sharding or checksum
/// codec, no storage transformer), and the type is stored as itself (`bool` and `int8`
/// are not: `.tet` restores or widens them).
fn frames_copyable(m: &Map<String, Value>, zarr_type: &str) -> bool {
    let Some((dtype, None)) = dtype_of(zarr_type) else {
        return false;
    };
    match m.get("storage_transformers") {
        None | Some(Value::Null) => {}
        Some(Value::Array(a)) if a.is_empty() => {}
        Some(_) => return false,
    }
    let Some(Value::Array(codecs)) = m.get("codecs") else {
        return false;
    };
    let [bytes, zstd] = codecs.as_slice() else {
        return false;
    };
    let (Some(("bytes", bytes)), Some(("zstd", Some(zstd)))) =
        (codec_parts(bytes), codec_parts(zstd))
    else {
        return false;
    };
    let bytes_ok = match bytes {
        None => dtype.size() == 1,
        Some(c) => {
            c.keys().all(|k| k == "endian")
                && match c.get("endian") {
                    Some(Value::String(e)) if e == "little" => true,
                    _ => dtype.size() == 1,
                }
        }
    };
    bytes_ok
        && zstd.keys().all(|k| k == "level" || k == "checksum")
        && zstd.get("checksum") == Some(&Value::Bool(true))
}

/// The `.tet` type of a Zarr `data_type`, and the NumPy descr `export` restores when
/// `.tet` stores it as another type.
fn dtype_of(zarr: &str) -> Option<(DType, Option<&'static str>)> {
    Some(match zarr {
        "bool" => (DType::U8, Some("|b1")),
        "int8" => (DType::I16, Some("|i1")),
        "uint8" => (DType::U8, None),
        "int16" => (DType::I16, None),
        "uint16" => (DType::U16, None),
        "int32" => (DType::I32, None),
        "uint32" => (DType::U32, None),
        "int64" => (DType::I64, None),
        "uint64" => (DType::U64, None),
        "float16" => (DType::F16, None),
        "float32" => (DType::F32, None),
        "float64" => (DType::F64, None),
        _ => return None,
    })
}

/// Reads and parses one `zarr.json`, capped at [`MAX_METADATA`] bytes.
fn read_json(file: &Path) -> Result<Map<String, Value>, Fail> {
    use std::io::Read;
    let f = std::fs::File::open(file)
        .map_err(|e| Fail::operational(format!("cannot read {}: {e}", file.display())))?;
    let mut text = Vec::new();
    f.take(MAX_METADATA.saturating_add(1))
        .read_to_end(&mut text)
        .map_err(|e| Fail::operational(format!("cannot read {}: {e}", file.display())))?;
    if u64::try_from(text.len()).unwrap_or(u64::MAX) > MAX_METADATA {
        return Err(Fail::damaged(format!(
            "{}: over {MAX_METADATA} bytes; not Zarr metadata",
            file.display()
        )));
    }
    match serde_json::from_slice::<Value>(&text) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(Fail::damaged(format!(
            "{}: not a JSON object",
            file.display()
        ))),
        Err(e) => Err(Fail::damaged(format!(
            "{}: not valid JSON: {e}",
            file.display()
        ))),
    }
}

/// A list of unsigned integers at `field`.
fn u64_list(m: &Map<String, Value>, field: &str, file: &Path) -> Result<Vec<u64>, Fail> {
    let v = m.get(field).and_then(Value::as_array).ok_or_else(|| {
        Fail::damaged(format!(
            "{}: {field}: missing or not a list",
            file.display()
        ))
    })?;
    v.iter()
        .map(|x| {
            x.as_u64().ok_or_else(|| {
                Fail::damaged(format!(
                    "{}: {field}: {x} is not a non-negative integer",
                    file.display()
                ))
            })
        })
        .collect()
}

/// The [`Source`] an array node's metadata describes.
fn parse_array(
    name: String,
    node: String,
    file: PathBuf,
    m: &Map<String, Value>,
) -> Result<Source, Fail> {
    let at = file.display().to_string();
    let zarr_type = match m.get("data_type") {
        Some(Value::String(s)) => s.clone(),
        Some(other) => {
            return Err(Fail::usage(format!(
                "{at}: data_type {other} is an extension type, which .tet cannot hold"
            )))
        }
        None => return Err(Fail::damaged(format!("{at}: data_type: missing"))),
    };
    let Some((dtype, _)) = dtype_of(&zarr_type) else {
        return Err(Fail::usage(format!(
            "{at}: array '{name}' has data_type '{zarr_type}', which .tet cannot hold \
             (it holds bool, int8 .. int64, uint8 .. uint64, float16, float32, float64)"
        )));
    };
    let mut shape = u64_list(m, "shape", &file)?;
    let grid = m
        .get("chunk_grid")
        .and_then(Value::as_object)
        .ok_or_else(|| Fail::damaged(format!("{at}: chunk_grid: missing or not an object")))?;
    match grid.get("name").and_then(Value::as_str) {
        Some("regular") => {}
        Some(other) => {
            return Err(Fail::usage(format!(
                "{at}: chunk_grid.name is '{other}'; only regular chunk grids convert"
            )))
        }
        None => return Err(Fail::damaged(format!("{at}: chunk_grid.name: missing"))),
    }
    let conf = grid
        .get("configuration")
        .and_then(Value::as_object)
        .ok_or_else(|| Fail::damaged(format!("{at}: chunk_grid.configuration: missing")))?;
    let mut chunk = u64_list(conf, "chunk_shape", &file).map_err(|Fail(x, e)| {
        Fail(
            x,
            e.replace("chunk_shape", "chunk_grid.configuration.chunk_shape"),
        )
    })?;
    if chunk.len() != shape.len() {
        return Err(Fail::damaged(format!(
            "{at}: chunk_grid.configuration.chunk_shape has {} axes but shape has {}",
            chunk.len(),
            shape.len()
        )));
    }
    if chunk.contains(&0) {
        return Err(Fail::damaged(format!(
            "{at}: chunk_grid.configuration.chunk_shape {chunk:?} has a zero extent"
        )));
    }
    let dims = match m.get("dimension_names") {
        None | Some(Value::Null) => None,
        Some(Value::Array(a)) => {
            if a.len() != shape.len() {
                return Err(Fail::damaged(format!(
                    "{at}: dimension_names has {} names but shape has {} axes",
                    a.len(),
                    shape.len()
                )));
            }
            let names: Option<Vec<String>> =
                a.iter().map(|v| v.as_str().map(str::to_string)).collect();
            if names.is_none() {
                crate::errln!(
                    "tet-host: {at}: warning: dimension_names has unnamed (null) axes; \
                     '{name}' gets no dim_names"
                );
            }
            names
        }
        Some(other) => {
            return Err(Fail::damaged(format!(
                "{at}: dimension_names: {other} is not a list"
            )))
        }
    };
    let (attrs, json_attrs) = attributes(m, &at)?;
    let fill = m
        .get("fill_value")
        .cloned()
        .ok_or_else(|| Fail::damaged(format!("{at}: fill_value: missing")))?;
    // A 0-d array (zarr-python's `zarr.create_array(shape=())`) is one element.
    let scalar = shape.is_empty();
    if scalar {
        shape = vec![1];
        chunk = vec![1];
    }
    if shape.len() > tet_core::tet::MAX_NDIM {
        return Err(Fail::usage(format!(
            "{at}: array '{name}' has {} axes, more than .tet's {}",
            shape.len(),
            tet_core::tet::MAX_NDIM
        )));
    }
    let dims = dims.filter(|_| !scalar);
    let frames = !scalar && frames_copyable(m, &zarr_type);
    Ok(Source {
        name,
        node,
        file,
        zarr_type,
        dtype,
        shape,
        chunk,
        dims,
        attrs,
        json_attrs,
        fill,
        frames,
        scalar,
    })
}

/// A node's attrs, and the keys of those kept as JSON text.
type Attributes = (Vec<(String, String)>, Vec<String>);

/// A node's `attributes` as `.tet` attrs: a string as it is, any other value as its JSON
/// text, those keys listed second (for [`JSON_ATTRS_KEY`]). `at` names the node's
/// `zarr.json` in the refusal of attributes that are not an object.
fn attributes(m: &Map<String, Value>, at: &str) -> Result<Attributes, Fail> {
    let mut attrs = Vec::new();
    let mut json_attrs = Vec::new();
    match m.get("attributes") {
        None | Some(Value::Null) => {}
        Some(Value::Object(a)) => {
            for (k, v) in a {
                match v {
                    Value::String(s) if k == "_FillValue" => {
                        attrs.push((k.clone(), xarray_fill(s).unwrap_or_else(|| s.clone())));
                    }
                    Value::String(s) => attrs.push((k.clone(), s.clone())),
                    other => {
                        attrs.push((k.clone(), other.to_string()));
                        json_attrs.push(k.clone());
                    }
                }
            }
        }
        Some(other) => {
            return Err(Fail::damaged(format!(
                "{at}: attributes: {other} is not an object"
            )))
        }
    }
    Ok((attrs, json_attrs))
}

/// The number a `_FillValue` attribute text stands for when xarray wrote it: xarray keeps
/// a float `_FillValue` of a Zarr v3 array as the base64 of its little-endian `f64`
/// bytes (`"AAAAAAAA+H8="` is NaN), and of 4 bytes an `f32`. `None` for any other text
/// (a number as text is already one).
fn xarray_fill(text: &str) -> Option<String> {
    use base64::Engine as _;
    if text.parse::<f64>().is_ok() {
        return None;
    }
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text)
        .ok()?;
    let v = match bytes.as_slice() {
        [a, b, c, d, e, f, g, h] => f64::from_le_bytes([*a, *b, *c, *d, *e, *f, *g, *h]),
        [a, b, c, d] => f64::from(f32::from_le_bytes([*a, *b, *c, *d])),
        _ => return None,
    };
    Some(if v.is_nan() {
        "nan".into()
    } else {
        v.to_string()
    })
}

/// A CF attribute of an array of Zarr type `ztype`, kept as text (from NetCDF, HDF5 or
/// an option), as xarray reads it back from a Zarr v3 store: `_FillValue` a JSON integer
/// for an integer array, and for a float one the base64 of the little-endian `f64` bytes
/// of the value the array's type holds (xarray's encoding); `missing_value` (a list as a JSON array: `list` is the
/// `missing_value_list` kept beside it), `scale_factor`, `add_offset`, `valid_min`,
/// `valid_max` and `valid_range` JSON numbers. `None` for other keys, or a text that
/// is not numbers (kept as a string).
fn cf_attr_json(key: &str, text: &str, ztype: &str, list: Option<&str>) -> Option<Value> {
    use base64::Engine as _;
    let number = |t: &str| -> Option<Value> {
        let t = t.trim();
        if let Ok(i) = t.parse::<i64>() {
            return Some(Value::from(i));
        }
        if let Ok(u) = t.parse::<u64>() {
            return Some(Value::from(u));
        }
        let f = t.parse::<f64>().ok()?;
        serde_json::Number::from_f64(f).map(Value::Number)
    };
    let numbers = |t: &str| -> Option<Value> {
        match t.trim().strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
            Some(inner) => inner
                .split(',')
                .map(number)
                .collect::<Option<Vec<Value>>>()
                .map(Value::Array),
            None => number(t),
        }
    };
    match key {
        "_FillValue" if ztype.starts_with("float") => {
            // The marker as the array's own type holds it: a float32 variable's 1e20 is
            // float32(1e20) = 1.0000000200408773e20, which a reader compares with the
            // stored values (the f64 1e20 would match none of them).
            let t = text.trim();
            let f = match ztype {
                "float32" => f64::from(t.parse::<f32>().ok()?),
                "float16" => f64::from(t.parse::<half::f16>().ok()?),
                _ => t.parse::<f64>().ok()?,
            };
            Some(Value::from(
                base64::engine::general_purpose::STANDARD.encode(f.to_le_bytes()),
            ))
        }
        "_FillValue" => number(text),
        "missing_value" => numbers(list.unwrap_or(text)),
        "scale_factor" | "add_offset" | "valid_min" | "valid_max" | "valid_range" => numbers(text),
        _ => None,
    }
}

/// Every array under `dir` (node path `node`), depth first in name order, into `out`;
/// the attributes of each group into `groups` (the store's root as `/`, with
/// [`JSON_ATTRS_KEY`] listing those not strings).
fn walk(
    root: &Path,
    dir: &Path,
    node: &str,
    depth: usize,
    out: &mut Vec<Source>,
    groups: &mut Vec<ingest::GroupAttrs>,
) -> Result<(), Fail> {
    let file = dir.join("zarr.json");
    let m = read_json(&file)?;
    match m.get("zarr_format") {
        Some(v) if v.as_u64() == Some(3) => {}
        Some(v) => {
            return Err(Fail::usage(format!(
                "{}: zarr_format is {v}; this reads Zarr v3 stores",
                file.display()
            )))
        }
        None => {
            return Err(Fail::damaged(format!(
                "{}: zarr_format: missing",
                file.display()
            )))
        }
    }
    match m.get("node_type").and_then(Value::as_str) {
        Some("array") => {
            let name = if node == "/" {
                root.file_stem()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_else(|| "data".into())
            } else {
                node.trim_start_matches('/').to_string()
            };
            out.push(parse_array(name, node.to_string(), file, &m)?);
            Ok(())
        }
        Some("group") => {
            if depth >= MAX_DEPTH {
                return Err(Fail::usage(format!(
                    "{}: groups nested deeper than {MAX_DEPTH}",
                    dir.display()
                )));
            }
            let mut children: Vec<String> = std::fs::read_dir(dir)
                .map_err(|e| Fail::operational(format!("cannot list {}: {e}", dir.display())))?
                .filter_map(Result::ok)
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .filter(|e| e.path().join("zarr.json").is_file())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect();
            children.sort();
            let (mut attrs, json_attrs) = attributes(&m, &file.display().to_string())?;
            if !json_attrs.is_empty() {
                attrs.push((JSON_ATTRS_KEY.into(), Value::from(json_attrs).to_string()));
            }
            let path = match node.trim_start_matches('/') {
                "" => tet_alloc::tet::meta::ROOT_GROUP,
                p => p,
            };
            groups.extend(ingest::group_entry(root, path, attrs));
            for c in children {
                let child = if node == "/" {
                    format!("/{c}")
                } else {
                    format!("{node}/{c}")
                };
                walk(
                    root,
                    &dir.join(&c),
                    &child,
                    depth.saturating_add(1),
                    out,
                    groups,
                )?;
            }
            Ok(())
        }
        Some(other) => Err(Fail::damaged(format!(
            "{}: node_type is '{other}', neither array nor group",
            file.display()
        ))),
        None => Err(Fail::damaged(format!(
            "{}: node_type: missing",
            file.display()
        ))),
    }
}

fn product(v: &[u64]) -> Option<u64> {
    v.iter().try_fold(1u64, |a, b| a.checked_mul(*b))
}

/// The footer metadata of the converted arrays: for each, `dim_names` from
/// `dimension_names`, `attrs` from `attributes`, plus [`FILL_KEY`], [`JSON_ATTRS_KEY`]
/// and `numpy_dtype` for the types `.tet` widens; the groups' attributes (`tet_groups`);
/// then `--dims` and `--attr`.
fn metadata(
    sources: &[Source],
    groups: Vec<ingest::GroupAttrs>,
    o: &ConvertOptions,
) -> Result<String, String> {
    let mut m = ingest::new_metadata();
    m.groups = groups;
    for s in sources {
        m.edit(&s.name, |e| {
            e.dim_names.clone_from(&s.dims);
            for (k, v) in &s.attrs {
                e.set_attr(k, v);
            }
            e.set_attr(FILL_KEY, &s.fill.to_string());
            if !s.json_attrs.is_empty() {
                e.set_attr(
                    JSON_ATTRS_KEY,
                    &Value::from(s.json_attrs.clone()).to_string(),
                );
            }
            if let Some((_, Some(descr))) = dtype_of(&s.zarr_type) {
                e.set_attr("numpy_dtype", descr);
            }
            if s.scalar {
                e.set_attr(crate::tet::dims::SCALAR_KEY, "[]");
            }
        });
    }
    let ranks: Vec<(&str, usize)> = sources
        .iter()
        .map(|s| (s.name.as_str(), s.shape.len()))
        .collect();
    ingest::apply_options(&mut m, &ranks, o, "array", "in the store")?;
    Ok(Value::Object(m.to_json()).to_string())
}

/// `tet-host convert STORE.zarr OUT.tet [--array PATH]`.
pub fn convert(input: &Path, output: &Path, array: Option<&str>, o: &ConvertOptions) -> Exit {
    ingest::finish(convert_inner(input, output, array, o))
}

fn convert_inner(
    input: &Path,
    output: &Path,
    array: Option<&str>,
    o: &ConvertOptions,
) -> Result<(), Fail> {
    ingest::check_start(input, output, o, "a Zarr store's arrays")?;
    let mut sources = Vec::new();
    let mut groups = Vec::new();
    walk(input, input, "/", 0, &mut sources, &mut groups)?;
    if let Some(want) = array {
        let want = want.trim_matches('/');
        sources.retain(|s| {
            s.name == want
                || s.name
                    .strip_prefix(want)
                    .is_some_and(|r| r.starts_with('/'))
        });
        if sources.is_empty() {
            return Err(Fail::usage(format!(
                "{}: --array {want}: no array or group of that path in the store",
                input.display()
            )));
        }
    }
    // Every group's attributes, those of a group without arrays too; with --array, the
    // root's and those of the groups holding a converted array.
    if array.is_some() {
        groups.retain(|(path, _)| {
            path == tet_alloc::tet::meta::ROOT_GROUP
                || sources.iter().any(|s| {
                    s.name
                        .strip_prefix(path.as_str())
                        .is_some_and(|r| r.starts_with('/'))
                })
        });
    }
    if sources.is_empty() {
        return Err(Fail::usage(format!(
            "{}: no arrays in the store",
            input.display()
        )));
    }
    let store = Arc::new(
        FilesystemStore::new(input)
            .map_err(|e| Fail::operational(format!("cannot open {}: {e}", input.display())))?,
    );
    let ranks: Vec<usize> = sources.iter().map(|s| s.shape.len()).collect();
    ingest::check_chunk_rank(o, &ranks, "arrays")?;
    let mut arrays = Vec::new();
    let mut planned = Vec::new();
    for s in &sources {
        // zarrs decodes whole source chunks: a hostile chunk shape is refused before
        // anything is allocated, whatever the `.tet` chunk shape.
        let source_chunk = product(&s.chunk).and_then(|n| n.checked_mul(s.dtype.size()));
        if source_chunk.is_none_or(|b| b > ingest::MAX_TILE) {
            return Err(Fail::usage(format!(
                "{}: array '{}': its chunks of shape {:?} are over the {}-byte limit of \
                 one decode",
                s.file.display(),
                s.name,
                s.chunk,
                ingest::MAX_TILE
            )));
        }
        let a = Array::open(store.clone(), &s.node)
            .map_err(|e| Fail::damaged(format!("{}: {e}", s.file.display())))?;
        let chunk = ingest::chunk_of(
            &s.file,
            "array",
            &s.name,
            &s.shape,
            s.dtype,
            o.chunk.as_deref(),
            Some(&s.chunk),
        )?;
        arrays.push(a);
        planned.push(Planned {
            name: &s.name,
            dtype: s.dtype,
            shape: &s.shape,
            chunk,
        });
    }
    let meta = metadata(&sources, ingest::capped_groups(input, groups), o)
        .map_err(|e| Fail::usage(format!("{}: {e}", input.display())))?;
    let provenance = Provenance {
        from: "zarr",
        descrs: sources
            .iter()
            .map(|s| format!("{}:{}", s.name, s.zarr_type))
            .collect(),
        extra: Vec::new(),
    };
    // Frames are copied for zstd output when the `.tet` chunk is the source chunk.
    let copies: Vec<bool> = sources
        .iter()
        .zip(&planned)
        .map(|(s, p)| s.frames && o.codec == Codec::Zstd && p.chunk == s.chunk)
        .collect();
    // A batch of tiles is read on every core: frames checked, the rest decoded through
    // zarrs.
    ingest::write(input, output, &planned, meta, provenance, o, |i, tiles| {
        let (Some(s), Some(a), Some(p)) = (sources.get(i), arrays.get(i), planned.get(i)) else {
            return Ok(Vec::new());
        };
        let copy = copies.get(i).copied().unwrap_or(false);
        tiles
            .par_iter()
            .map_init(
                // The tile's size is capped (MAX_TILE) before anything is read, so the
                // check needs no budget of its own.
                || ChunkDecoder::new(CZstd::new(), u64::MAX),
                |check, coords| {
                    if let Some(frame) = copy
                        .then(|| copied_frame(s, a, &p.chunk, coords, check))
                        .flatten()
                    {
                        return Ok(frame);
                    }
                    read_tile(s, a, &p.chunk, coords).map(Payload::Elements)
                },
            )
            .collect()
    })
}

/// The stored zstd frame of the source chunk at grid `coords` (the `.tet` chunk shape
/// `chunk` being the source's), when it can be the `.tet` chunk's payload as it is: an
/// interior chunk (a Zarr edge chunk is stored full-size with padding, a `.tet` one
/// clipped), read undecoded through the store, whose frame declares the tile's size as
/// its content size, carries a content checksum, and passes every rule the `.tet`
/// reader applies to a zstd chunk (`check` decodes it: one frame, nothing after it, the
/// exact length, the checksum). `None` sends the tile through [`read_tile`]: a missing
/// chunk (the fill value), a frame that fails a rule (re-encoded, or refused there when
/// zarrs cannot decode it either), a store error (reported there).
fn copied_frame<T: zarrs::storage::ReadableStorageTraits + ?Sized + 'static>(
    s: &Source,
    a: &Array<T>,
    chunk: &[u64],
    coords: &[u64],
    check: &mut ChunkDecoder<CZstd>,
) -> Option<Payload> {
    if coords.len() != chunk.len() || chunk.len() != s.shape.len() {
        return None;
    }
    let mut elements = 1u64;
    for ((g, k), n) in coords.iter().zip(chunk).zip(&s.shape) {
        if g.checked_add(1)?.checked_mul(*k)? > *n {
            return None;
        }
        elements = elements.checked_mul(*k)?;
    }
    let raw_len = elements.checked_mul(s.dtype.size())?;
    let frame = a.retrieve_encoded_chunk(coords).ok()??;
    let header = tet_core::tet::zstd::parse_frame_header(&frame, 0).ok()?;
    if !header.has_checksum || header.content_size != Some(raw_len) {
        return None;
    }
    let as_chunk = Chunk {
        dataset: DatasetId(0),
        row: 0,
        coords: Coords::from_slice(coords)?,
        codec: Codec::Zstd,
        raw_byte_len: raw_len,
        payload_offset: 0,
        payload: &frame,
        checksum: None,
    };
    check.decode(&as_chunk).ok()?;
    Some(Payload::Frame { frame, raw_len })
}

/// The `.tet` tile at grid `coords` of chunk shape `chunk`: the region read through
/// `zarrs` (missing chunks give the fill value), clipped to the array, as little-endian
/// `.tet` elements (`int8` widened to `i16`).
fn read_tile<T: zarrs::storage::ReadableStorageTraits + ?Sized + 'static>(
    s: &Source,
    a: &Array<T>,
    chunk: &[u64],
    coords: &[u64],
) -> Result<Vec<u8>, Fail> {
    let mut start = Vec::with_capacity(coords.len());
    let mut shape = Vec::with_capacity(coords.len());
    for ((g, k), n) in coords.iter().zip(chunk).zip(&s.shape) {
        let lo = g.checked_mul(*k).unwrap_or(u64::MAX).min(*n);
        start.push(lo);
        shape.push(n.saturating_sub(lo).min(*k));
    }
    if product(&shape) == Some(0) {
        return Ok(Vec::new());
    }
    if s.scalar {
        // The one element of a 0-d array is its whole (empty) subset.
        start.clear();
        shape.clear();
    }
    let dir = s.file.parent().unwrap_or(&s.file);
    let where_ = || {
        format!(
            "{}: array '{}', the chunk data of the tile starting at element {start:?}",
            dir.display(),
            s.name
        )
    };
    let subset = ArraySubset::new_with_start_shape(start.clone(), shape.clone())
        .map_err(|e| Fail::damaged(format!("{}: {e}", where_())))?;
    let bytes: ArrayBytes<'static> = a
        .retrieve_array_subset(&subset)
        .map_err(|e| Fail::damaged(format!("{}: {e}", where_())))?;
    let raw = bytes
        .into_fixed()
        .map_err(|e| Fail::damaged(format!("{}: {e}", where_())))?
        .into_owned();
    let want = product(&shape).and_then(|n| {
        n.checked_mul(if s.zarr_type == "int8" {
            1
        } else {
            s.dtype.size()
        })
    });
    if want != Some(u64::try_from(raw.len()).unwrap_or(u64::MAX)) {
        return Err(Fail::damaged(format!(
            "{}: decoded {} bytes, expected {want:?}",
            where_(),
            raw.len()
        )));
    }
    if s.zarr_type == "int8" {
        return Ok(raw
            .iter()
            .flat_map(|b| i16::from(i8::from_ne_bytes([*b])).to_le_bytes())
            .collect());
    }
    Ok(native_to_le(raw, s.dtype.size()))
}

/// `zarrs` decodes to native byte order; `.tet` is little-endian.
fn native_to_le(mut raw: Vec<u8>, size: u64) -> Vec<u8> {
    if cfg!(target_endian = "big") {
        if let Ok(n) = usize::try_from(size) {
            for e in raw.chunks_exact_mut(n.max(1)) {
                e.reverse();
            }
        }
    }
    raw
}

/// The Zarr `data_type` of a dataset as `export` writes it: the source's `bool` or
/// `int8` back (from `numpy_dtype`), else the `.tet` type.
fn zarr_type(descr: &str) -> Option<&'static str> {
    Some(match descr.get(1..)? {
        "b1" => "bool",
        "i1" => "int8",
        "u1" => "uint8",
        "i2" => "int16",
        "u2" => "uint16",
        "i4" => "int32",
        "u4" => "uint32",
        "i8" => "int64",
        "u8" => "uint64",
        "f2" => "float16",
        "f4" => "float32",
        "f8" => "float64",
        _ => return None,
    })
}

/// The `zarr.json` of an exported array.
fn array_json(
    zarr_type: &str,
    shape: &[u64],
    chunk: &[u64],
    zstd: Option<i32>,
    fill: Value,
    dims: Option<&Vec<String>>,
    attrs: Map<String, Value>,
) -> Value {
    let bytes = if matches!(zarr_type, "bool" | "int8" | "uint8") {
        json!({ "name": "bytes" })
    } else {
        json!({ "name": "bytes", "configuration": { "endian": "little" } })
    };
    let mut codecs = vec![bytes];
    if let Some(level) = zstd {
        codecs.push(
            json!({ "name": "zstd", "configuration": { "level": level, "checksum": false } }),
        );
    }
    let mut m = json!({
        "zarr_format": 3,
        "node_type": "array",
        "shape": shape,
        "data_type": zarr_type,
        "chunk_grid": { "name": "regular", "configuration": { "chunk_shape": chunk } },
        "chunk_key_encoding": { "name": "default", "configuration": { "separator": "/" } },
        "fill_value": fill,
        "codecs": codecs,
        "attributes": attrs,
    });
    if let (Some(d), Some(o)) = (dims, m.as_object_mut()) {
        o.insert("dimension_names".into(), json!(d));
    }
    m
}

/// The `zarr.json` of group `path` (`/` for the store's root), with the attributes the
/// footer keeps for it (`tet_groups`): the texts [`JSON_ATTRS_KEY`] lists as the JSON
/// values they were, the others as strings.
fn group_json(meta: &tet_alloc::tet::meta::Metadata, path: &str) -> Value {
    let attrs = meta.group(path).unwrap_or_default();
    let json_attrs: Vec<String> = attrs
        .iter()
        .find(|(k, _)| k == JSON_ATTRS_KEY)
        .and_then(|(_, v)| serde_json::from_str::<Vec<String>>(v).ok())
        .unwrap_or_default();
    let mut a = Map::new();
    for (k, v) in attrs.iter().filter(|(k, _)| k != JSON_ATTRS_KEY) {
        let value = if json_attrs.contains(k) {
            serde_json::from_str::<Value>(v).unwrap_or_else(|_| json!(v))
        } else {
            json!(v)
        };
        a.insert(k.clone(), value);
    }
    json!({ "zarr_format": 3, "node_type": "group", "attributes": a })
}

fn write_json(dir: &Path, v: &Value) -> Result<(), Fail> {
    let text = serde_json::to_string_pretty(v).unwrap_or_default();
    std::fs::create_dir_all(dir)
        .and_then(|()| std::fs::write(dir.join("zarr.json"), format!("{text}\n")))
        .map_err(|e| Fail::operational(format!("cannot write {}: {e}", dir.display())))
}

/// The default fill value of a Zarr type, when the source recorded none.
fn default_fill(zarr_type: &str) -> Value {
    match zarr_type {
        "bool" => json!(false),
        t if t.starts_with("float") => json!(0.0),
        _ => json!(0),
    }
}

/// `tet-host export FILE.tet OUT.zarr [--dataset NAME]`: every dataset (or the one
/// named) as a Zarr v3 array, in a store written beside `out` and renamed into place.
pub fn export(
    path: &Path,
    bytes: &[u8],
    dataset: Option<&str>,
    out: &Path,
    budget: Option<u64>,
    force: bool,
) -> Exit {
    match export_checked(path, bytes, dataset, out, budget, force) {
        Ok(()) => Exit::Clean,
        Err(Fail(exit, msg)) => {
            if !msg.is_empty() {
                crate::say!("{msg}");
            }
            exit
        }
    }
}

/// The checks of a Zarr export's output `out` of input `path`, made before the input is
/// read: not the input, not existing without `force`, in a directory that is there, and,
/// to be replaced, a Zarr store holding nothing else (`--force` removes the old store
/// whole, so a file of the user's inside it, the input among them, is refused). Gives
/// the path to write: a symbolic link to a store is followed, and a directory named
/// through `.` or `..` is resolved, so the store itself is replaced. A refusal is exit 16,
/// a missing directory exit 8.
pub fn check_export_output(
    path: &Path,
    out: &Path,
    force: bool,
) -> Result<PathBuf, (Exit, String)> {
    let usage = |m: String| Err((Exit::Usage, m));
    let mut out = out.to_path_buf();
    if std::fs::metadata(&out).is_ok_and(|m| m.is_dir()) {
        if let Ok(real) = std::fs::canonicalize(&out) {
            out = real;
        }
    }
    if crate::atomic::same_file(&out, path) {
        return usage(format!(
            "the output {} is the input {} (the same file); write to another path",
            out.display(),
            path.display()
        ));
    }
    let exists = std::fs::symlink_metadata(&out).is_ok();
    if exists && !force {
        return usage(format!(
            "{} exists; pass --force to replace it",
            out.display()
        ));
    }
    crate::atomic::check_parent(&out).map_err(|m| (Exit::Operational, m))?;
    if !exists {
        return Ok(out);
    }
    if !is_store(&out) {
        // --force replaces a Zarr store, never another directory or file.
        return usage(format!(
            "{} exists and is not a Zarr store (no zarr.json); not replacing it",
            out.display()
        ));
    }
    if std::fs::canonicalize(path).is_ok_and(|p| p.starts_with(&out)) {
        return usage(format!(
            "the input {} is inside {}, which --force would replace; write to another path",
            path.display(),
            out.display()
        ));
    }
    if let Some(foreign) = foreign_entry(&out, 0) {
        return usage(format!(
            "{} holds {}, which is not part of the Zarr store; not replacing it (move it \
             out, or write to another path)",
            out.display(),
            foreign.display()
        ));
    }
    Ok(out)
}

/// The first entry under the Zarr group directory `dir` that is not a node of the store
/// (a `zarr.json`, or a directory of a group or array): an array's directory holds its
/// chunks and is not looked into. `None` when there is none. A group nested past
/// [`MAX_DEPTH`] counts as foreign.
fn foreign_entry(dir: &Path, depth: usize) -> Option<PathBuf> {
    if depth > MAX_DEPTH {
        return Some(dir.to_path_buf());
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Some(dir.to_path_buf());
    };
    for e in entries {
        let Ok(e) = e else {
            return Some(dir.to_path_buf());
        };
        let p = e.path();
        let is_dir = e.file_type().is_ok_and(|t| t.is_dir());
        if !is_dir {
            if e.file_name() == "zarr.json" {
                continue;
            }
            return Some(p);
        }
        let node = std::fs::read(p.join("zarr.json"))
            .ok()
            .and_then(|b| serde_json::from_slice::<Value>(&b).ok());
        match node.as_ref().and_then(|n| n.get("node_type")?.as_str()) {
            Some("array") => {}
            Some("group") => {
                if let Some(f) = foreign_entry(&p, depth.saturating_add(1)) {
                    return Some(f);
                }
            }
            _ => return Some(p),
        }
    }
    None
}

fn export_checked(
    path: &Path,
    bytes: &[u8],
    dataset: Option<&str>,
    out: &Path,
    budget: Option<u64>,
    force: bool,
) -> Result<(), Fail> {
    let out = &check_export_output(path, out, force).map_err(|(e, m)| Fail(e, m))?;
    let exists = std::fs::symlink_metadata(out).is_ok();
    let file = crate::tet::open_tet(path, bytes).map_err(|e| Fail(e, String::new()))?;
    let names: Vec<String> = match dataset {
        Some(d) => {
            if file.dataset(d).is_err() {
                return Err(Fail(crate::tet::no_dataset(path, &file, d), String::new()));
            }
            vec![d.to_string()]
        }
        None => file
            .datasets()
            .filter_map(Result::ok)
            .map(|d| d.name().to_string())
            .collect(),
    };
    let meta = crate::tet::dims::metadata(&file)
        .map_err(|e| Fail::damaged(format!("{}: footer metadata: {e}", path.display())))?
        .unwrap_or_default();
    let footer = tet_alloc::tet::history::metadata(&file).ok().flatten();
    let budget = crate::tet::budget_for(&file, None, budget);
    let parent = out
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let base = out
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "out.zarr".into());
    let tmp = parent.join(format!(".{base}.tmp-{}", std::process::id()));
    let all = dataset.is_none();
    let result = export_into(
        path,
        &file,
        &names,
        &meta,
        footer.as_ref(),
        budget,
        &tmp,
        all,
    );
    if let Err(e) = result {
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(e);
    }
    let old = parent.join(format!(".{base}.old-{}", std::process::id()));
    if exists {
        if let Err(e) = std::fs::rename(out, &old) {
            let _ = std::fs::remove_dir_all(&tmp);
            return Err(Fail::operational(format!(
                "cannot replace {}: {e}",
                out.display()
            )));
        }
    }
    if let Err(e) = std::fs::rename(&tmp, out) {
        let _ = exists && std::fs::rename(&old, out).is_ok();
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(Fail::operational(format!(
            "cannot write {}: {e}",
            out.display()
        )));
    }
    if exists {
        let _ = std::fs::remove_dir_all(&old);
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn export_into(
    path: &Path,
    file: &tet_core::tet::TetFile<'_>,
    names: &[String],
    meta: &tet_alloc::tet::meta::Metadata,
    footer: Option<&Value>,
    budget: u64,
    tmp: &Path,
    all: bool,
) -> Result<(), Fail> {
    write_json(tmp, &group_json(meta, tet_alloc::tet::meta::ROOT_GROUP))?;
    let store = Arc::new(
        FilesystemStore::new(tmp)
            .map_err(|e| Fail::operational(format!("cannot write {}: {e}", tmp.display())))?,
    );
    let empty = tet_alloc::tet::meta::DatasetMeta::default();
    let total: u64 = names
        .iter()
        .filter_map(|n| file.dataset(n).ok())
        .filter_map(|d| product(&d.shape().collect::<Vec<_>>())?.checked_mul(d.dtype().size()))
        .fold(0u64, u64::saturating_add);
    let bar = crate::progress::progress_bar(true, total);
    for name in names {
        let ds = file
            .dataset(name)
            .map_err(|e| Fail::damaged(format!("{}: dataset '{name}': {e}", path.display())))?;
        // Groups for a slash-separated name.
        let parts = node_path(path, "dataset", name)?;
        let groups = parts.split_last().map_or(&[][..], |(_, g)| g);
        write_groups(&mut tmp.to_path_buf(), groups, meta)?;
        let dm = meta.dataset(name).unwrap_or(&empty);
        let src = crate::tet::export::numpy_source(footer, name);
        let shape: Vec<u64> = ds.shape().collect();
        let chunk: Vec<u64> = ds.chunk_shape().collect();
        let descr = src
            .dtype
            .clone()
            .unwrap_or_else(|| crate::tet::npy::descr(ds.dtype()).to_string());
        let ztype = zarr_type(&descr).unwrap_or("uint8");
        let grid: Vec<u64> = ds.grid().collect();
        let cells = ds.grid_cells();
        // zstd when the file's chunks are (its first stored chunk says).
        let zstd = (0..cells)
            .filter_map(|c| {
                file.chunk(&ds, &tet_alloc::tet::query::position_coords(&grid, c))
                    .ok()
            })
            .map(|c| c.codec == tet_core::tet::Codec::Zstd)
            .next()
            .unwrap_or(false)
            .then_some(3);
        let json_attrs: Vec<String> = dm
            .attrs
            .iter()
            .find(|(k, _)| k == JSON_ATTRS_KEY)
            .and_then(|(_, v)| serde_json::from_str::<Vec<String>>(v).ok())
            .unwrap_or_default();
        let mut attrs = Map::new();
        let mut fill = default_fill(ztype);
        let list = dm
            .attrs
            .iter()
            .find(|(k, _)| k == "missing_value_list")
            .map(|(_, v)| v.as_str());
        let has_missing = dm.attrs.iter().any(|(k, _)| k == "missing_value");
        for (k, v) in &dm.attrs {
            match k.as_str() {
                FILL_KEY => {
                    if let Ok(f) = serde_json::from_str::<Value>(v) {
                        fill = f;
                    }
                }
                JSON_ATTRS_KEY | "numpy_dtype" | "numpy_shape" => {}
                // The whole list goes out as `missing_value`, as CF writes it (as itself
                // when there is no `missing_value` to carry it).
                "missing_value_list" if !json_attrs.contains(k) && has_missing => {}
                _ if json_attrs.contains(k) => {
                    let parsed = serde_json::from_str::<Value>(v).unwrap_or_else(|_| json!(v));
                    attrs.insert(k.clone(), parsed);
                }
                _ => {
                    let cf = cf_attr_json(k, v, ztype, list.filter(|_| k == "missing_value"));
                    attrs.insert(k.clone(), cf.unwrap_or_else(|| json!(v)));
                }
            }
        }
        let node_dir = tmp.join(name);
        // A 0-d source (one element marked `numpy_shape = []`) goes back 0-d.
        let scalar = shape == [1] && dm.attr(crate::tet::dims::SCALAR_KEY) == Some("[]");
        let (zshape, zchunk): (&[u64], &[u64]) = if scalar {
            (&[], &[])
        } else {
            (shape.as_slice(), chunk.as_slice())
        };
        write_json(
            &node_dir,
            &array_json(
                ztype,
                zshape,
                zchunk,
                zstd,
                fill,
                dm.dim_names.as_ref().filter(|_| !scalar),
                attrs,
            ),
        )?;
        let node = format!("/{name}");
        let array = Array::open(store.clone(), &node)
            .map_err(|e| Fail::operational(format!("{}: {e}", node_dir.display())))?;
        for cell in 0..cells {
            let coords = tet_alloc::tet::query::position_coords(&grid, cell);
            let mut slices = Vec::with_capacity(coords.len());
            let mut start = Vec::with_capacity(coords.len());
            let mut extent = Vec::with_capacity(coords.len());
            for ((g, k), n) in coords.iter().zip(&chunk).zip(&shape) {
                let lo = g.checked_mul(*k).unwrap_or(u64::MAX).min(*n);
                let hi = lo.saturating_add(*k).min(*n);
                start.push(lo);
                extent.push(hi.saturating_sub(lo));
                slices.push(tet_core::tet::select::Slice {
                    start: i64::try_from(lo).ok(),
                    stop: i64::try_from(hi).ok(),
                    step: None,
                });
            }
            if product(&extent) == Some(0) {
                continue;
            }
            let p = tet_alloc::tet::query::plan(file, ds, &slices)
                .map_err(|e| Fail(Exit::of(e.category()), format!("{}: {e}", path.display())))?;
            let values = crate::tet::query::select_values(file, &p, budget, &()).map_err(|e| {
                Fail(
                    crate::tet::query::fail_reading(path, &ds, &e, "--memory-budget"),
                    String::new(),
                )
            })?;
            let raw = u64::try_from(values.len()).unwrap_or(0);
            let ((_, _, restored), why) =
                crate::tet::export::restore(ds.dtype(), extent.clone(), values, &src);
            if let Some(why) = why {
                return Err(Fail::usage(format!(
                    "{}: dataset '{name}': {why}; a Zarr array has one type",
                    path.display()
                )));
            }
            let (start, extent) = if scalar {
                (Vec::new(), Vec::new())
            } else {
                (start, extent)
            };
            let subset = ArraySubset::new_with_start_shape(start, extent)
                .map_err(|e| Fail::operational(format!("{}: {e}", node_dir.display())))?;
            let size = if matches!(ztype, "bool" | "int8") {
                1
            } else {
                ds.dtype().size()
            };
            array
                .store_array_subset(&subset, ArrayBytes::new_flen(native_to_le(restored, size)))
                .map_err(|e| Fail::operational(format!("{}: {e}", node_dir.display())))?;
            if let Some(b) = &bar {
                b.inc(raw);
            }
        }
    }
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    // A group the footer keeps attributes for and no exported array is in (a NetCDF
    // group of attributes only) is written too, when every dataset is exported.
    if all {
        for (group, _) in &meta.groups {
            if group == tet_alloc::tet::meta::ROOT_GROUP {
                continue;
            }
            let parts = node_path(path, "group", group)?;
            // Not inside an array (a Zarr array has no children).
            let in_array = (1..=parts.len()).any(|n| {
                let prefix = parts.get(..n).unwrap_or_default().join("/");
                names.contains(&prefix)
            });
            if in_array {
                crate::errln!(
                    "tet-host: {}: warning: group '{group}' is at or under a dataset's \
                     path; its attributes are not exported",
                    path.display()
                );
                continue;
            }
            write_groups(&mut tmp.to_path_buf(), &parts, meta)?;
        }
    }
    Ok(())
}

/// The parts of `name`, the slash-separated path of a `what` (dataset or group) of
/// `path`, refused (exit 16) when one is empty, `.` or `..`.
fn node_path<'a>(path: &Path, what: &str, name: &'a str) -> Result<Vec<&'a str>, Fail> {
    let parts: Vec<&str> = name.split('/').collect();
    if parts
        .iter()
        .any(|p| p.is_empty() || *p == "." || *p == "..")
    {
        return Err(Fail::usage(format!(
            "{}: {what} '{name}' is not a Zarr node path (empty, '.' or '..' part)",
            path.display()
        )));
    }
    Ok(parts)
}

/// Writes the groups `parts` names under `dir`, each inside the one before, those not
/// written yet; `dir` ends at the last.
fn write_groups(
    dir: &mut std::path::PathBuf,
    parts: &[&str],
    meta: &tet_alloc::tet::meta::Metadata,
) -> Result<(), Fail> {
    for (i, p) in parts.iter().enumerate() {
        dir.push(p);
        if !dir.join("zarr.json").is_file() {
            let path = parts.get(..=i).unwrap_or_default().join("/");
            write_json(dir, &group_json(meta, &path))?;
        }
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::restriction, reason = "tests fail by panicking")]
mod tests {
    use serde_json::{json, Value};

    fn copyable(zarr_type: &str, codecs: Value) -> bool {
        let m = json!({ "codecs": codecs });
        super::frames_copyable(m.as_object().unwrap(), zarr_type)
    }

    fn zstd(checksum: bool) -> Value {
        json!({ "name": "zstd", "configuration": { "level": 3, "checksum": checksum } })
    }

    #[test]
    fn only_bytes_then_zstd_with_a_checksum_has_copyable_frames() {
        let le = json!({ "name": "bytes", "configuration": { "endian": "little" } });
        let be = json!({ "name": "bytes", "configuration": { "endian": "big" } });
        let bare = json!({ "name": "bytes" });
        assert!(copyable("float32", json!([le, zstd(true)])));
        assert!(copyable("uint8", json!([bare, zstd(true)])));
        assert!(copyable("uint8", json!(["bytes", zstd(true)])));
        assert!(
            copyable("uint8", json!([be, zstd(true)])),
            "one byte: no order"
        );
        assert!(!copyable("float32", json!([le, zstd(false)])));
        assert!(!copyable(
            "float32",
            json!([le, { "name": "zstd", "configuration": { "level": 3 } }])
        ));
        assert!(!copyable("float32", json!([be, zstd(true)])));
        assert!(!copyable("float32", json!([bare, zstd(true)])));
        // Types .tet restores or widens.
        assert!(!copyable("bool", json!([bare, zstd(true)])));
        assert!(!copyable("int8", json!([bare, zstd(true)])));
        // Any other codec, or anything else in an entry.
        let t = json!({ "name": "transpose", "configuration": { "order": [1, 0] } });
        assert!(!copyable("float32", json!([t, le, zstd(true)])));
        assert!(!copyable(
            "float32",
            json!([le, zstd(true), { "name": "crc32c" }])
        ));
        assert!(!copyable("float32", json!([zstd(true)])));
        assert!(!copyable(
            "float32",
            json!([le, { "name": "zstd", "configuration": { "level": 3, "checksum": true, "x": 1 } }])
        ));
        assert!(!copyable(
            "float32",
            json!([le, { "name": "zstd", "must_understand": false, "configuration": { "level": 3, "checksum": true } }])
        ));
        let shard = json!({ "name": "sharding_indexed", "configuration": {
            "chunk_shape": [2], "codecs": [le, zstd(true)], "index_codecs": [le] } });
        assert!(!copyable("float32", json!([shard])));
        // A storage transformer.
        let m = json!({ "codecs": [le, zstd(true)], "storage_transformers": [{ "name": "x" }] });
        assert!(!super::frames_copyable(m.as_object().unwrap(), "float32"));
    }
}
