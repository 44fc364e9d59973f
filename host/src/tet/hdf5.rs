//! HDF5 files (as h5py, h5netcdf and the HDF5 tools write them) for `convert`, through
//! the `hdf5-metno` crate and the system's libhdf5 (cargo feature `hdf5`).
//!
//! Every numeric dataset becomes a `.tet` dataset named by its path (`grp/temp`), its
//! attributes its `attrs`. Dimension scales give dimension names: a dataset whose
//! `DIMENSION_LIST` attaches a scale to an axis has that axis named after the scale
//! (its `NAME`, else its own name), and the scale, a 1-D numeric dataset converted
//! beside it, is that axis's coordinate. The root's and the groups' attributes go to the
//! footer's `tet_groups`; a scalar dataset is one element marked `numpy_shape = []`;
//! `_Unsigned` applies as for NetCDF. A chunked dataset keeps its chunk shape unless
//! `--chunk` is given. libhdf5 is serialised by the crate (one call at a time), so tiles
//! are read in turn and compressed on every core.

use std::path::Path;

use h5::types::{FixedAscii, FixedUnicode, FloatSize, IntSize, TypeDescriptor, VarLenAscii};
use h5::types::{VarLenArray, VarLenUnicode};
use hdf5_metno as h5;
use tet_alloc::tet::meta::{Coord, Metadata, ROOT_GROUP};
use tet_core::tet::DType;

use crate::tet::convert::{ConvertOptions, LibraryOptions};
use crate::tet::ingest::{self, Fail, LibArray, LibKind, LibVar};
use crate::Exit;

/// The deepest group nesting walked (hard links can make a cycle).
const MAX_DEPTH: usize = 32;
/// The attributes of the dimension-scale machinery: read for names, not kept.
const SCALE_ATTRS: [&str; 4] = ["DIMENSION_LIST", "REFERENCE_LIST", "CLASS", "NAME"];
/// What libnetcdf and h5netcdf leave in a NetCDF-4 file for themselves.
const NETCDF_ATTRS: [&str; 4] = [
    "_Netcdf4Dimid",
    "_Netcdf4Coordinates",
    "_nc3_strict",
    "_NCProperties",
];
/// The start of the `NAME` libnetcdf gives a dimension without a coordinate variable.
const NETCDF_PHONY_SCALE: &str = "This is a netCDF dimension but not a netCDF variable";

/// Each axis's name and the `.tet` name of the scale attached to it.
type Axes = Vec<(String, Option<String>)>;

/// One dataset to convert.
struct Var {
    a: LibArray,
    ds: h5::Dataset,
    dims: Option<Axes>,
}

impl LibVar for Var {
    fn array(&self) -> &LibArray {
        &self.a
    }
    fn array_mut(&mut self) -> &mut LibArray {
        &mut self.a
    }
}

/// The `.tet` type of an HDF5 type, its NumPy name, and NumPy's descr when `.tet`
/// stores it as another type.
fn dtype_of(t: &TypeDescriptor) -> Option<(DType, &'static str, Option<&'static str>)> {
    use TypeDescriptor as T;
    Some(match t {
        T::Boolean => (DType::U8, "bool", Some("|b1")),
        T::Integer(IntSize::U1) => (DType::I16, "int8", Some("|i1")),
        T::Unsigned(IntSize::U1) => (DType::U8, "uint8", None),
        T::Integer(IntSize::U2) => (DType::I16, "int16", None),
        T::Unsigned(IntSize::U2) => (DType::U16, "uint16", None),
        T::Integer(IntSize::U4) => (DType::I32, "int32", None),
        T::Unsigned(IntSize::U4) => (DType::U32, "uint32", None),
        T::Integer(IntSize::U8) => (DType::I64, "int64", None),
        T::Unsigned(IntSize::U8) => (DType::U64, "uint64", None),
        T::Float(FloatSize::U2) => (DType::F16, "float16", None),
        T::Float(FloatSize::U4) => (DType::F32, "float32", None),
        T::Float(FloatSize::U8) => (DType::F64, "float64", None),
        _ => return None,
    })
}

/// The width of a signed integer type, for `_Unsigned` ([`ingest::apply_unsigned`]).
fn signed_bits(t: &TypeDescriptor) -> Option<u32> {
    match t {
        TypeDescriptor::Integer(IntSize::U1) => Some(8),
        TypeDescriptor::Integer(IntSize::U2) => Some(16),
        TypeDescriptor::Integer(IntSize::U4) => Some(32),
        TypeDescriptor::Integer(IntSize::U8) => Some(64),
        _ => None,
    }
}

/// What a type `.tet` cannot hold is called.
fn unsupported(t: &TypeDescriptor) -> &'static str {
    use TypeDescriptor as T;
    match t {
        T::FixedAscii(_) | T::FixedUnicode(_) | T::VarLenAscii | T::VarLenUnicode => "string",
        T::Compound(_) => "compound",
        T::VarLenArray(_) => "variable-length",
        T::FixedArray(..) => "array",
        T::Enum(_) => "enum",
        T::Reference(_) => "reference",
        _ => "numeric",
    }
}

/// Reads every element of `a` as `T`, converted by libhdf5.
fn all<T: h5::H5Type>(a: &h5::Attribute) -> Result<Vec<T>, String> {
    a.read_raw::<T>().map_err(|e| e.to_string())
}

/// Numbers as `.tet` attrs hold them: one as its decimal text, several as a JSON array.
fn numbers<T: ToString>(v: &[T]) -> String {
    match v {
        [one] => one.to_string(),
        _ => {
            let items: Vec<String> = v.iter().map(ToString::to_string).collect();
            format!("[{}]", items.join(", "))
        }
    }
}

/// Texts as `.tet` attrs hold them: one as it is, several as a JSON array.
fn texts(v: Vec<String>) -> String {
    match v.as_slice() {
        [one] => one.clone(),
        _ => serde_json::to_string(&v).unwrap_or_default(),
    }
}

/// An attribute's value as `.tet` attrs hold it, or `None` for a type attrs cannot hold
/// (a reference, a compound).
fn attr_text(a: &h5::Attribute) -> Result<Option<String>, String> {
    use TypeDescriptor as T;
    let t = a
        .dtype()
        .and_then(|d| d.to_descriptor())
        .map_err(|e| e.to_string())?;
    Ok(Some(match t {
        T::Integer(_) => numbers(&all::<i64>(a)?),
        T::Unsigned(_) => numbers(&all::<u64>(a)?),
        // A float32 keeps its shortest text (0.01, not 0.009999999776482582).
        T::Float(FloatSize::U2 | FloatSize::U4) => numbers(&all::<f32>(a)?),
        T::Float(FloatSize::U8) => numbers(&all::<f64>(a)?),
        T::Boolean => numbers(&all::<bool>(a)?),
        T::VarLenUnicode => texts(
            all::<VarLenUnicode>(a)?
                .iter()
                .map(|s| s.as_str().to_string())
                .collect(),
        ),
        T::VarLenAscii => texts(
            all::<VarLenAscii>(a)?
                .iter()
                .map(|s| s.as_str().to_string())
                .collect(),
        ),
        // Fixed-length strings are converted to this length by libhdf5.
        T::FixedAscii(_) => texts(
            all::<FixedAscii<4096>>(a)?
                .iter()
                .map(|s| s.as_str().to_string())
                .collect(),
        ),
        T::FixedUnicode(_) => texts(
            all::<FixedUnicode<4096>>(a)?
                .iter()
                .map(|s| s.as_str().to_string())
                .collect(),
        ),
        _ => return Ok(None),
    }))
}

/// The `.tet` name of an HDF5 path.
fn tet_name(path: &str) -> String {
    path.trim_start_matches('/').to_string()
}

/// A string attribute of `obj`, when it has one that reads.
fn text_attr(obj: &h5::Location, name: &str) -> Option<String> {
    let a = obj.attr(name).ok()?;
    attr_text(&a).ok().flatten()
}

/// The dimension names of `ds` from its attached scales (`DIMENSION_LIST`), each with
/// the scale's path; an axis without a scale is `phony_dim_K`, as h5netcdf names it. A
/// scale itself names its one axis. `None` when no axis has a scale.
fn dimensions(ds: &h5::Dataset, rank: usize) -> Result<Option<Axes>, String> {
    let is_scale = text_attr(ds, "CLASS").is_some_and(|c| c == "DIMENSION_SCALE");
    let own = tet_name(&ds.name());
    let scale_name = |s: &h5::Dataset| {
        let path = tet_name(&s.name());
        let base = path.rsplit('/').next().unwrap_or_default().to_string();
        let named = text_attr(s, "NAME")
            .filter(|n| !n.is_empty() && !n.starts_with(NETCDF_PHONY_SCALE) && !n.contains('/'));
        (named.unwrap_or(base), path)
    };
    let Ok(list) = ds.attr("DIMENSION_LIST") else {
        if is_scale && rank == 1 {
            return Ok(Some(vec![(scale_name(ds).0, Some(own))]));
        }
        return Ok(None);
    };
    let refs = list
        .read_raw::<VarLenArray<h5::ObjectReference1>>()
        .map_err(|e| format!("attribute 'DIMENSION_LIST' does not read: {e}"))?;
    if refs.len() != rank {
        return Err(format!(
            "attribute 'DIMENSION_LIST' lists {} axes, the dataset has {rank}",
            refs.len()
        ));
    }
    let mut out = Vec::with_capacity(rank);
    for (k, axis) in refs.iter().enumerate() {
        // The first scale attached to an axis names it (netCDF-4 attaches one).
        let scale = axis
            .as_slice()
            .first()
            .map(|r| ds.dereference(r))
            .transpose()
            .map_err(|e| format!("a scale of axis {k} (DIMENSION_LIST) does not open: {e}"))?;
        out.push(match scale {
            Some(h5::ReferencedObject::Dataset(s)) => {
                let (name, path) = scale_name(&s);
                (name, Some(path))
            }
            _ => (format!("phony_dim_{k}"), None),
        });
    }
    Ok(Some(out))
}

/// A dataset's description, or why it is not converted (exit 16, so `--skip-unsupported`
/// can skip it).
fn describe(
    ds: h5::Dataset,
    name: String,
    input: &Path,
    lib: LibraryOptions,
) -> Result<Option<Var>, Fail> {
    // A NetCDF dimension without a coordinate variable: libnetcdf stores it as a scale of
    // zeros. It names axes; it is not a variable.
    let phony = text_attr(&ds, "CLASS").is_some_and(|c| c == "DIMENSION_SCALE")
        && text_attr(&ds, "NAME").is_some_and(|n| n.starts_with(NETCDF_PHONY_SCALE));
    if phony {
        return Ok(None);
    }
    let damaged =
        |what: String| Fail::damaged(format!("{}: dataset '{name}': {what}", input.display()));
    let t = ds.dtype().and_then(|d| d.to_descriptor()).map_err(|e| {
        Fail::usage(format!(
            "{}: dataset '{name}' is of a type .tet cannot hold ({e}){}",
            input.display(),
            ingest::SKIP_HINT
        ))
    })?;
    let Some((dtype, h5_type, numpy_dtype)) = dtype_of(&t) else {
        return Err(Fail::usage(format!(
            "{}: dataset '{name}' is of {} type, which .tet cannot hold (only numbers){}",
            input.display(),
            unsupported(&t),
            ingest::SKIP_HINT
        )));
    };
    let shape: Vec<u64> = ds
        .shape()
        .iter()
        .map(|n| u64::try_from(*n).unwrap_or(u64::MAX))
        .collect();
    ingest::check_rank(input, "dataset", &name, shape.len())?;
    let (shape, scalar) = ingest::scalar_shape(shape);
    let chunking = ds.chunk().map(|c| {
        c.iter()
            .map(|k| u64::try_from(*k).unwrap_or(1).max(1))
            .collect()
    });
    // A scalar has no axis to name.
    let dims = if scalar {
        None
    } else {
        dimensions(&ds, shape.len()).map_err(damaged)?
    };
    let mut attrs = Vec::new();
    let mut packed_as = None;
    let names = ds
        .attr_names()
        .map_err(|e| damaged(format!("its attributes do not list: {e}")))?;
    for key in names {
        if SCALE_ATTRS.contains(&key.as_str()) || NETCDF_ATTRS.contains(&key.as_str()) {
            continue;
        }
        let read = ds
            .attr(&key)
            .map_err(|e| e.to_string())
            .and_then(|a| attr_text(&a));
        if matches!(key.as_str(), "scale_factor" | "add_offset") {
            let t = ds
                .attr(&key)
                .and_then(|a| a.dtype())
                .and_then(|d| d.to_descriptor());
            packed_as = match t {
                Ok(TypeDescriptor::Float(FloatSize::U4)) => Some(DType::F32),
                Ok(TypeDescriptor::Float(FloatSize::U8)) => Some(DType::F64),
                _ => packed_as,
            };
        }
        match read {
            Ok(Some(text)) => {
                ingest::push_attr(&mut attrs, key, text, input, "dataset", &name, lib.unpack)?
            }
            Ok(None) => crate::errln!(
                "tet-host: {}: dataset '{name}': attribute '{key}' is of a type .tet attrs \
                 cannot hold (a reference or a compound); not kept",
                input.display()
            ),
            Err(e) => return Err(damaged(format!("attribute '{key}' does not read: {e}"))),
        }
    }
    let mut a = LibArray {
        name,
        source_type: h5_type,
        dtype,
        numpy_dtype,
        shape,
        chunking,
        attrs,
        packed_as,
        decode: None,
        unsigned: false,
        scalar,
    };
    ingest::apply_unsigned(&mut a, signed_bits(&t));
    Ok(Some(Var { a, ds, dims }))
}

/// What a walk of the file finds.
#[derive(Default)]
struct Found {
    /// The datasets to convert.
    vars: Vec<Var>,
    /// Why each skipped one is not converted.
    skipped: Vec<String>,
    /// The groups' attributes (the root's as `/`), for `tet_groups`.
    groups: Vec<ingest::GroupAttrs>,
}

/// The attributes of group `g` (`path`; `/` for the root, a NetCDF-4 file's global
/// attributes) as `.tet` attrs hold them, less libnetcdf's own; one of a type attrs
/// cannot hold is named on standard error and left out.
fn group_attrs(g: &h5::Group, path: &str, input: &Path) -> Result<Vec<(String, String)>, Fail> {
    let damaged =
        |what: String| Fail::damaged(format!("{}: group '{path}': {what}", input.display()));
    let names = g
        .attr_names()
        .map_err(|e| damaged(format!("its attributes do not list: {e}")))?;
    let mut out = Vec::new();
    for key in names {
        if NETCDF_ATTRS.contains(&key.as_str()) || SCALE_ATTRS.contains(&key.as_str()) {
            continue;
        }
        let read = g
            .attr(&key)
            .map_err(|e| e.to_string())
            .and_then(|a| attr_text(&a))
            .map_err(|e| damaged(format!("attribute '{key}' does not read: {e}")))?;
        match read {
            Some(text) => out.push((key, text)),
            None => crate::errln!(
                "tet-host: {}: group '{path}': attribute '{key}' is of a type .tet attrs \
                 cannot hold (a reference or a compound); not kept",
                input.display()
            ),
        }
    }
    Ok(out)
}

/// The datasets of `g` and (depth first) of its groups, and the groups' attributes
/// (`g`'s own first).
fn walk(
    g: &h5::Group,
    prefix: &str,
    ancestors: &mut Vec<h5::LocationToken>,
    lib: LibraryOptions,
    input: &Path,
    found: &mut Found,
) -> Result<(), Fail> {
    // `prefix` ends with a `/` per group walked into.
    if prefix.matches('/').count() > MAX_DEPTH {
        return Err(Fail::damaged(format!(
            "{}: group '{prefix}' is nested deeper than {MAX_DEPTH} groups (a cycle of \
             hard links?)",
            input.display()
        )));
    }
    let path = match prefix.strip_suffix('/') {
        Some(p) => p,
        None => ROOT_GROUP,
    };
    let attrs = group_attrs(g, path, input)?;
    found.groups.extend(ingest::group_entry(input, path, attrs));
    let names = g.member_names().map_err(|e| {
        Fail::damaged(format!(
            "{}: group '{}' does not list: {e}",
            input.display(),
            g.name()
        ))
    })?;
    // By link name, so a soft link or a second hard link is a dataset of its own name.
    for member in names {
        let path = format!("{prefix}{member}");
        let described = if let Ok(ds) = g.dataset(&member) {
            describe(ds, path, input, lib)
        } else if let Ok(sub) = g.group(&member) {
            // A hard link back to a group above it is a cycle: its datasets are
            // converted once, under their first path.
            let token = sub.loc_info().ok().map(|i| i.token);
            if token.is_some_and(|t| ancestors.contains(&t)) {
                crate::errln!(
                    "tet-host: {}: group '{path}' links back to a group above it (a cycle): \
                     not followed",
                    input.display()
                );
                continue;
            }
            ancestors.extend(token);
            let walked = walk(&sub, &format!("{path}/"), ancestors, lib, input, found);
            if token.is_some() {
                ancestors.pop();
            }
            walked?;
            continue;
        } else {
            Err(Fail::usage(format!(
                "{}: '{path}' is neither a dataset nor a group (a link to nothing, an \
                 external link, a named type){}",
                input.display(),
                ingest::SKIP_HINT
            )))
        };
        match described {
            Ok(Some(v)) => found.vars.push(v),
            Ok(None) => {}
            Err(Fail(Exit::Usage, why)) if lib.skip_unsupported => {
                found.skipped.push(ingest::skip_reason(why))
            }
            Err(f) => return Err(f),
        }
    }
    Ok(())
}

/// Each dataset's `dim_names` (from its scales) and the scales as its coordinates, into
/// the footer metadata `m`.
fn axes(vars: &[Var], m: &mut Metadata) {
    for v in vars {
        m.edit(&v.a.name, |e| {
            if let Some(dims) = &v.dims {
                e.dim_names = Some(dims.iter().map(|(n, _)| n.clone()).collect());
                for ((dim, scale), n) in dims.iter().zip(&v.a.shape) {
                    // A scale is a coordinate when it is converted too, is 1-D and
                    // runs the length of the axis.
                    let Some(path) = scale.as_ref().filter(|p| **p != v.a.name) else {
                        continue;
                    };
                    let fits = vars
                        .iter()
                        .any(|c| c.a.name == *path && c.a.shape.as_slice() == [*n]);
                    if fits {
                        e.coords.push((dim.clone(), Coord::Dataset(path.clone())));
                    }
                }
            }
        });
    }
}

/// `tet-host convert FILE.h5 OUT.tet`.
pub fn convert(input: &Path, output: &Path, lib: LibraryOptions, o: &ConvertOptions) -> Exit {
    ingest::finish(convert_inner(input, output, lib, o))
}

fn convert_inner(
    input: &Path,
    output: &Path,
    lib: LibraryOptions,
    o: &ConvertOptions,
) -> Result<(), Fail> {
    ingest::check_start(input, output, o, "an HDF5 file's datasets")?;
    let file = h5::File::open(input).map_err(|e| {
        Fail::damaged(format!(
            "{}: not a readable HDF5 file: {e}",
            input.display()
        ))
    })?;
    let mut found = Found::default();
    let mut ancestors: Vec<h5::LocationToken> =
        file.loc_info().map(|i| i.token).into_iter().collect();
    walk(&file, "", &mut ancestors, lib, input, &mut found)?;
    let Found {
        mut vars,
        skipped,
        groups,
    } = found;
    let kind = LibKind {
        from: "hdf5",
        what: "dataset",
        whats: "datasets",
    };
    ingest::convert_library(
        input, output, o, lib, &kind, &mut vars, &skipped, groups, axes, read_tile,
    )
}

/// An element type read from HDF5 and written as `.tet` little-endian bytes.
trait Element: h5::H5Type + Copy {
    /// Appends the element's `.tet` bytes (int8 widened to i16, bool as u8).
    fn put(self, out: &mut Vec<u8>);
}

macro_rules! element {
    ($($t:ty),*) => {$(
        impl Element for $t {
            fn put(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
        }
    )*};
}
element!(u8, u16, i16, u32, i32, u64, i64, f32, f64, half::f16);

impl Element for i8 {
    fn put(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&i16::from(self).to_le_bytes());
    }
}

impl Element for bool {
    fn put(self, out: &mut Vec<u8>) {
        out.push(u8::from(self));
    }
}

/// The tile of `v` at grid `coords`: the hyperslab read through libhdf5 (which converts
/// the file's byte order), as `.tet` elements.
fn read_tile(v: &Var, chunk: &[u64], coords: &[u64]) -> Result<Vec<u8>, String> {
    let mut ranges = Vec::with_capacity(v.a.shape.len());
    for ((n, k), c) in v.a.shape.iter().zip(chunk).zip(coords) {
        let start = c.checked_mul(*k).ok_or("tile out of range")?;
        let stop = start.saturating_add(*k).min(*n);
        let s = usize::try_from(start).map_err(|_| "tile out of range")?;
        let e = usize::try_from(stop.max(start)).map_err(|_| "tile out of range")?;
        ranges.push(s..e);
    }
    if ranges.iter().any(|r| r.is_empty()) {
        return Ok(Vec::new());
    }
    if v.a.scalar {
        // Its one element, read whole ([`values`]).
        ranges.clear();
    }
    if v.a.unsigned {
        // `_Unsigned`: the signed elements read as they are stored (libhdf5 would clamp
        // a negative one read as unsigned), their bits kept as the unsigned type's.
        return match v.a.dtype {
            DType::U8 => Ok(values::<i8>(&v.ds, ranges)?
                .iter()
                .flat_map(|x| x.to_le_bytes())
                .collect()),
            DType::U16 => slab::<i16>(&v.ds, ranges),
            DType::U32 => slab::<i32>(&v.ds, ranges),
            _ => slab::<i64>(&v.ds, ranges),
        };
    }
    match v.a.numpy_dtype {
        Some("|b1") => slab::<bool>(&v.ds, ranges),
        Some(_) => slab::<i8>(&v.ds, ranges),
        None => match v.a.dtype {
            DType::U8 => slab::<u8>(&v.ds, ranges),
            DType::U16 => slab::<u16>(&v.ds, ranges),
            DType::I16 => slab::<i16>(&v.ds, ranges),
            DType::U32 => slab::<u32>(&v.ds, ranges),
            DType::I32 => slab::<i32>(&v.ds, ranges),
            DType::U64 => slab::<u64>(&v.ds, ranges),
            DType::I64 => slab::<i64>(&v.ds, ranges),
            DType::F16 => slab::<half::f16>(&v.ds, ranges),
            DType::F32 => slab::<f32>(&v.ds, ranges),
            DType::F64 => slab::<f64>(&v.ds, ranges),
        },
    }
}

/// Reads the hyperslab `ranges` of `ds` (every element of a scalar) as `T`, in C order,
/// as `.tet` elements.
fn slab<T: Element>(
    ds: &h5::Dataset,
    ranges: Vec<std::ops::Range<usize>>,
) -> Result<Vec<u8>, String> {
    let values = values::<T>(ds, ranges)?;
    let size = std::mem::size_of::<T>().max(1);
    let mut out = Vec::with_capacity(values.len().saturating_mul(size));
    for x in values {
        x.put(&mut out);
    }
    Ok(out)
}

/// Reads the hyperslab `ranges` of `ds` (every element of a scalar) as `T`, in C order.
fn values<T: h5::H5Type>(
    ds: &h5::Dataset,
    ranges: Vec<std::ops::Range<usize>>,
) -> Result<Vec<T>, String> {
    Ok(if ranges.is_empty() {
        ds.read_raw::<T>()
            .map_err(|e| format!("does not read: {e}"))?
    } else {
        let sel = h5::Hyperslab::from(
            ranges
                .into_iter()
                .map(h5::SliceOrIndex::from)
                .collect::<Vec<_>>(),
        );
        let a: ndarray::ArrayD<T> = ds
            .read_slice::<T, _, ndarray::IxDyn>(h5::Selection::from(sel))
            .map_err(|e| format!("does not read: {e}"))?;
        a.into_raw_vec_and_offset().0
    })
}
