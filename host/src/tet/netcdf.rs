//! NetCDF files (classic, 64-bit offset, CDF-5 and NetCDF-4) for `convert`, through the
//! `netcdf` crate and the system's libnetcdf (cargo feature `netcdf`).
//!
//! Every numeric variable becomes a dataset (a variable in a group is named
//! `group/variable`), its dimensions its `dim_names`, its attributes its `attrs`, and
//! each 1-D coordinate variable (a variable named as its one dimension, CF's rule) the
//! coordinate of the variables along that dimension, referenced as a coordinate dataset.
//! CF packing (`scale_factor`, `add_offset`, `_FillValue`, `missing_value`) is kept as
//! stored, with its attributes, which the `nan_*` reductions decode (docs/query.md,
//! "Packed data"). `_Unsigned = "true"` stores a signed variable's bits as the unsigned
//! type of their width; a scalar variable is one element marked `numpy_shape = []`; the
//! global and group attributes go to the footer's `tet_groups`. A chunked variable keeps
//! its chunk shape unless `--chunk` is given.
//! Data is read one output tile at a time, so memory is a batch of tiles.

use std::path::Path;

use tet_alloc::tet::meta::{Coord, Metadata, ROOT_GROUP};
use tet_core::tet::DType;

use crate::tet::convert::{ConvertOptions, LibraryOptions};
use crate::tet::ingest::{self, Fail, LibArray, LibKind, LibVar};
use crate::Exit;

/// The deepest group nesting walked.
const MAX_DEPTH: usize = 32;

/// One variable to convert.
struct Var {
    a: LibArray,
    dims: Vec<String>,
    /// Each dimension's identity ([`dim_key`]): a group's own `x` hides an outer `x`,
    /// so a coordinate variable must be on the very dimension, not one of its name.
    dim_keys: Vec<String>,
}

impl LibVar for (String, Var) {
    fn array(&self) -> &LibArray {
        &self.1.a
    }
    fn array_mut(&mut self) -> &mut LibArray {
        &mut self.1.a
    }
}

/// The `.tet` type of a NetCDF type, its name, and NumPy's descr when `.tet` widens it.
fn dtype_of(
    t: &netcdf::types::NcVariableType,
) -> Option<(DType, &'static str, Option<&'static str>)> {
    use netcdf::types::{FloatType, IntType, NcVariableType as T};
    Some(match t {
        T::Int(IntType::U8) => (DType::U8, "ubyte", None),
        T::Int(IntType::I8) => (DType::I16, "byte", Some("|i1")),
        T::Int(IntType::U16) => (DType::U16, "ushort", None),
        T::Int(IntType::I16) => (DType::I16, "short", None),
        T::Int(IntType::U32) => (DType::U32, "uint", None),
        T::Int(IntType::I32) => (DType::I32, "int", None),
        T::Int(IntType::U64) => (DType::U64, "uint64", None),
        T::Int(IntType::I64) => (DType::I64, "int64", None),
        T::Float(FloatType::F32) => (DType::F32, "float", None),
        T::Float(FloatType::F64) => (DType::F64, "double", None),
        _ => return None,
    })
}

/// The width of a signed integer type, for `_Unsigned` ([`ingest::apply_unsigned`]).
fn signed_bits(t: &netcdf::types::NcVariableType) -> Option<u32> {
    use netcdf::types::{IntType, NcVariableType as T};
    match t {
        T::Int(IntType::I8) => Some(8),
        T::Int(IntType::I16) => Some(16),
        T::Int(IntType::I32) => Some(32),
        T::Int(IntType::I64) => Some(64),
        _ => None,
    }
}

/// What a type `.tet` cannot hold is called.
fn unsupported(t: &netcdf::types::NcVariableType) -> &'static str {
    use netcdf::types::NcVariableType as T;
    match t {
        T::Char => "char (text)",
        T::String => "string",
        T::Compound(_) => "compound",
        T::Vlen(_) => "variable-length",
        T::Opaque(_) => "opaque",
        T::Enum(_) => "enum",
        T::Int(_) | T::Float(_) => "numeric",
    }
}

/// An attribute's value as `.tet` attrs hold it: a string as it is, one number as its
/// decimal text, several as a JSON array.
fn attr_text(v: &netcdf::AttributeValue) -> String {
    use netcdf::AttributeValue as A;
    fn list<T: ToString>(v: &[T]) -> String {
        let items: Vec<String> = v.iter().map(ToString::to_string).collect();
        format!("[{}]", items.join(", "))
    }
    match v {
        A::Uchar(x) => x.to_string(),
        A::Schar(x) => x.to_string(),
        A::Ushort(x) => x.to_string(),
        A::Short(x) => x.to_string(),
        A::Uint(x) => x.to_string(),
        A::Int(x) => x.to_string(),
        A::Ulonglong(x) => x.to_string(),
        A::Longlong(x) => x.to_string(),
        A::Float(x) => x.to_string(),
        A::Double(x) => x.to_string(),
        A::Str(s) => s.clone(),
        A::Uchars(v) => list(v),
        A::Schars(v) => list(v),
        A::Ushorts(v) => list(v),
        A::Shorts(v) => list(v),
        A::Uints(v) => list(v),
        A::Ints(v) => list(v),
        A::Ulonglongs(v) => list(v),
        A::Longlongs(v) => list(v),
        A::Floats(v) => list(v),
        A::Doubles(v) => list(v),
        // One NC_STRING is a text, as netCDF4-python gives it (a `str`); several, a list.
        A::Strs(v) => match v.as_slice() {
            [one] => one.clone(),
            _ => serde_json::to_string(v).unwrap_or_default(),
        },
    }
}

/// A dimension's id, which libnetcdf keeps unique across a file's groups. The crate's
/// identifier offers no comparison and no accessor, only `Debug` (`... dimid: 3 }`),
/// and its group id is the viewing group's: the id alone is the identity.
fn dim_key(d: &netcdf::Dimension<'_>) -> String {
    let shown = format!("{:?}", d.identifier());
    shown.split("dimid:").nth(1).map_or(shown.clone(), |r| {
        r.trim_matches(|c: char| !c.is_ascii_digit()).to_string()
    })
}

/// A variable's description, or why it is not converted.
fn describe(
    v: &netcdf::Variable<'_>,
    prefix: &str,
    input: &Path,
    lib: LibraryOptions,
) -> Result<Var, Fail> {
    let name = format!("{prefix}{}", v.name());
    let t = v.vartype();
    let Some((dtype, nc_type, numpy_dtype)) = dtype_of(&t) else {
        return Err(Fail(
            Exit::Usage,
            format!(
                "{}: variable '{name}' is of {} type, which .tet cannot hold (only numbers){}",
                input.display(),
                unsupported(&t),
                ingest::SKIP_HINT
            ),
        ));
    };
    let shape: Vec<u64> = v
        .dimensions()
        .iter()
        .map(|d| u64::try_from(d.len()).unwrap_or(u64::MAX))
        .collect();
    ingest::check_rank(input, "variable", &name, shape.len())?;
    let (shape, scalar) = ingest::scalar_shape(shape);
    let dims = v.dimensions().iter().map(|d| d.name()).collect();
    let dim_keys = v.dimensions().iter().map(dim_key).collect();
    let chunking = v.chunking().ok().flatten().map(|c| {
        c.iter()
            .map(|k| u64::try_from(*k).unwrap_or(1).max(1))
            .collect()
    });
    let mut attrs = Vec::new();
    let mut packed_as = None;
    for a in v.attributes() {
        match a.value() {
            Ok(val) => {
                if matches!(a.name(), "scale_factor" | "add_offset") {
                    use netcdf::AttributeValue as A;
                    packed_as = match val {
                        A::Float(_) | A::Floats(_) => Some(DType::F32),
                        A::Double(_) | A::Doubles(_) => Some(DType::F64),
                        _ => packed_as,
                    };
                }
                ingest::push_attr(
                    &mut attrs,
                    a.name().to_string(),
                    attr_text(&val),
                    input,
                    "variable",
                    &name,
                    lib.unpack,
                )?;
            }
            Err(netcdf::Error::TypeUnknown(t)) => {
                unkept(input, &format!("variable '{name}'"), &a, t)
            }
            Err(e) => {
                return Err(Fail(
                    Exit::Problems,
                    format!(
                        "{}: variable '{name}': attribute '{}' does not read: {e}",
                        input.display(),
                        a.name()
                    ),
                ))
            }
        }
    }
    let mut a = LibArray {
        name,
        source_type: nc_type,
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
    Ok(Var { a, dims, dim_keys })
}

/// The variables of `g` and (depth first) of its groups, with their paths.
fn walk(
    g: &netcdf::Group<'_>,
    prefix: &str,
    depth: usize,
    lib: LibraryOptions,
    input: &Path,
    out: &mut Vec<(String, Var)>,
    skipped: &mut Vec<String>,
) -> Result<(), Fail> {
    if depth > MAX_DEPTH {
        return Err(Fail(
            Exit::Problems,
            format!("{}: groups nested deeper than {MAX_DEPTH}", input.display()),
        ));
    }
    for v in g.variables() {
        match describe(&v, prefix, input, lib) {
            Ok(var) => out.push((prefix.to_string(), var)),
            Err(Fail(Exit::Usage, why)) if lib.skip_unsupported => {
                skipped.push(ingest::skip_reason(why))
            }
            Err(f) => return Err(f),
        }
    }
    for sub in g.groups() {
        let p = format!("{prefix}{}/", sub.name());
        walk(&sub, &p, depth.saturating_add(1), lib, input, out, skipped)?;
    }
    Ok(())
}

/// The attributes of a group (or, `path` `/`, the file's global attributes) as `.tet`
/// attrs hold them. One of a user-defined type (enum, compound, opaque, variable-length),
/// which libnetcdf's reader does not give as a value, is named on standard error and
/// left out; an attribute that does not read otherwise is the file's damage.
fn attributes<'g>(
    attrs: impl Iterator<Item = netcdf::Attribute<'g>>,
    path: &str,
    input: &Path,
) -> Result<Vec<(String, String)>, Fail> {
    let mut out = Vec::new();
    for a in attrs {
        let v = match a.value() {
            Ok(v) => v,
            Err(netcdf::Error::TypeUnknown(t)) => {
                unkept(input, &format!("group '{path}'"), &a, t);
                continue;
            }
            Err(e) => {
                return Err(Fail::damaged(format!(
                    "{}: group '{path}': attribute '{}' does not read: {e}",
                    input.display(),
                    a.name()
                )))
            }
        };
        out.push((a.name().to_string(), attr_text(&v)));
    }
    Ok(out)
}

/// Says on standard error that attribute `a` of `owner` (its NetCDF type number `t`, a
/// user-defined type) is not kept.
fn unkept(input: &Path, owner: &str, a: &netcdf::Attribute<'_>, t: i32) {
    crate::errln!(
        "tet-host: {}: {owner}: attribute '{}' is of a user-defined type (NetCDF type {t}: \
         an enum, compound, opaque or variable-length type), which .tet attrs cannot hold; \
         not kept",
        input.display(),
        a.name()
    );
}

/// The attributes of the groups under `g` (`prefix` its path, ending in `/`), depth
/// first, for `tet_groups`.
fn group_attributes(
    g: &netcdf::Group<'_>,
    prefix: &str,
    depth: usize,
    input: &Path,
    out: &mut Vec<ingest::GroupAttrs>,
) -> Result<(), Fail> {
    if depth > MAX_DEPTH {
        return Ok(());
    }
    for sub in g.groups() {
        let path = format!("{prefix}{}", sub.name());
        let attrs = attributes(sub.attributes(), &path, input)?;
        out.extend(ingest::group_entry(input, &path, attrs));
        group_attributes(
            &sub,
            &format!("{path}/"),
            depth.saturating_add(1),
            input,
            out,
        )?;
    }
    Ok(())
}

/// Each variable's `dim_names` and the coordinate variables of its dimensions (found in
/// its own group or an enclosing one, CF's scoping), into the footer metadata `m`.
fn axes(vars: &[(String, Var)], m: &mut Metadata) {
    // A coordinate variable: 1-D, named as its dimension (CF).
    let is_coord = |v: &Var| {
        let base = v.a.name.rsplit('/').next().unwrap_or_default();
        v.a.shape.len() == 1 && v.dims.first().is_some_and(|d| d == base)
    };
    // A scalar has no dimension to name.
    for (prefix, v) in vars.iter().filter(|(_, v)| !v.dims.is_empty()) {
        m.edit(&v.a.name, |e| {
            e.dim_names = Some(v.dims.clone());
            for (dim, key) in v.dims.iter().zip(&v.dim_keys) {
                // The nearest coordinate variable named `dim`: this group, then outward.
                let mut scope = prefix.as_str();
                let found = loop {
                    let candidate = format!("{scope}{dim}");
                    if candidate != v.a.name
                        && vars.iter().any(|(_, c)| {
                            c.a.name == candidate && is_coord(c) && c.dim_keys.first() == Some(key)
                        })
                    {
                        break Some(candidate);
                    }
                    if scope.is_empty() {
                        break None;
                    }
                    let trimmed = scope.trim_end_matches('/');
                    scope = trimmed
                        .rfind('/')
                        .and_then(|i| scope.get(..=i))
                        .unwrap_or_default();
                };
                if let Some(c) = found {
                    e.coords.push((dim.clone(), Coord::Dataset(c)));
                }
            }
        });
    }
}

/// The first bytes of a NetCDF-3 file read for its header, and the most read when the
/// header runs past them (a header longer than that, with thousands of attributes, is
/// not checked).
const HEADER_FIRST: u64 = 64 << 10;
const HEADER_MOST: u64 = 16 << 20;

/// Refuses a NetCDF-3 file shorter than its header says its data runs (cut short: exit
/// 4, naming both lengths), which libnetcdf would read as stale bytes without an error.
/// A NetCDF-4 file, or a header this does not read to its end, is not checked here.
fn check_length(input: &Path) -> Result<(), Fail> {
    use std::io::Read;
    let Ok(f) = std::fs::File::open(input) else {
        return Ok(());
    };
    let len = f.metadata().map_or(0, |m| m.len());
    let mut head = Vec::new();
    let mut f = f.take(HEADER_FIRST);
    if f.read_to_end(&mut head).is_err() || !head.starts_with(b"CDF") {
        return Ok(());
    }
    let mut end = super::cdf3::data_end(&head);
    if end.is_none() && tet_core::arith::u64_of(head.len()) == HEADER_FIRST {
        // A header longer than the first read: the rest of it, up to the most.
        f.set_limit(HEADER_MOST.saturating_sub(HEADER_FIRST));
        if f.read_to_end(&mut head).is_err() {
            return Ok(());
        }
        end = super::cdf3::data_end(&head);
    }
    match end {
        Some(end) if end > len => Err(Fail::damaged(format!(
            "{}: cut short: its header puts variable data up to byte {end}, and the file \
             has {len} bytes",
            input.display()
        ))),
        _ => Ok(()),
    }
}

/// `tet-host convert FILE.nc OUT.tet`.
pub fn convert(input: &Path, output: &Path, lib: LibraryOptions, o: &ConvertOptions) -> Exit {
    ingest::finish(convert_inner(input, output, lib, o))
}

fn convert_inner(
    input: &Path,
    output: &Path,
    lib: LibraryOptions,
    o: &ConvertOptions,
) -> Result<(), Fail> {
    let skip_unsupported = lib.skip_unsupported;
    ingest::check_start(input, output, o, "a NetCDF file's variables")?;
    let file = netcdf::open(input).map_err(|e| {
        Fail(
            Exit::Problems,
            format!("{}: not a readable NetCDF file: {e}", input.display()),
        )
    })?;
    check_length(input)?;
    let mut vars = Vec::new();
    let mut skipped = Vec::new();
    // The root's variables, then its groups' (a classic file has no groups).
    for v in file.variables() {
        match describe(&v, "", input, lib) {
            Ok(var) => vars.push((String::new(), var)),
            Err(Fail(Exit::Usage, why)) if skip_unsupported => {
                skipped.push(ingest::skip_reason(why))
            }
            Err(f) => return Err(f),
        }
    }
    // The global attributes (title, Conventions, history), then each group's.
    let root = attributes(file.attributes(), ROOT_GROUP, input)?;
    let mut groups: Vec<ingest::GroupAttrs> = ingest::group_entry(input, ROOT_GROUP, root)
        .into_iter()
        .collect();
    if let Ok(gs) = file.groups() {
        for g in gs {
            let p = format!("{}/", g.name());
            walk(&g, &p, 1, lib, input, &mut vars, &mut skipped)?;
            let attrs = attributes(g.attributes(), g.name().as_str(), input)?;
            groups.extend(ingest::group_entry(input, &g.name(), attrs));
            group_attributes(&g, &p, 1, input, &mut groups)?;
        }
    }
    let kind = LibKind {
        from: "netcdf",
        what: "variable",
        whats: "variables",
    };
    ingest::convert_library(
        input,
        output,
        o,
        lib,
        &kind,
        &mut vars,
        &skipped,
        groups,
        axes,
        |(_, v), chunk, coords| {
            with_variable(&file, &v.a.name, |var| read_tile(var, v, chunk, coords))
                .unwrap_or_else(|| Err("is no longer in the file".into()))
        },
    )
}

/// Calls `f` with the variable at path `name` (`group/sub/var`); `None` when there is
/// none (a variable borrows its group, so it is reached from the file each time).
fn with_variable<R>(
    file: &netcdf::File,
    name: &str,
    f: impl FnOnce(&netcdf::Variable<'_>) -> R,
) -> Option<R> {
    fn down<R>(
        g: &netcdf::Group<'_>,
        path: &str,
        f: impl FnOnce(&netcdf::Variable<'_>) -> R,
    ) -> Option<R> {
        match path.split_once('/') {
            None => g.variable(path).map(|v| f(&v)),
            Some((first, rest)) => down(&g.group(first)?, rest, f),
        }
    }
    match name.split_once('/') {
        None => file.variable(name).map(|v| f(&v)),
        Some((first, rest)) => down(&file.group(first).ok()??, rest, f),
    }
}

/// The `.tet` tile at grid `coords`: the region read through libnetcdf (native order,
/// the library converts a big-endian file), as little-endian `.tet` elements (`byte`
/// widened to `i16`; an `_Unsigned` variable's bits as they are, its `.tet` type being
/// the unsigned one of their width).
fn read_tile(
    var: &netcdf::Variable<'_>,
    v: &Var,
    chunk: &[u64],
    coords: &[u64],
) -> Result<Vec<u8>, String> {
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
    let raw = if v.a.scalar {
        // Its one element, at no index.
        var.get_raw_values(..)
    } else {
        var.get_raw_values(ranges.as_slice())
    }
    .map_err(|e| format!("does not read: {e}"))?;
    let size = match v.a.numpy_dtype {
        Some(_) => 1,
        None => v.a.dtype.size(),
    };
    let mut raw = raw;
    if cfg!(target_endian = "big") {
        if let Ok(n) = usize::try_from(size) {
            for e in raw.chunks_exact_mut(n.max(1)) {
                e.reverse();
            }
        }
    }
    if v.a.numpy_dtype.is_some() {
        // NetCDF `byte` is signed: widened to i16.
        return Ok(raw
            .iter()
            .flat_map(|b| i16::from(i8::from_le_bytes([*b])).to_le_bytes())
            .collect());
    }
    Ok(raw)
}
