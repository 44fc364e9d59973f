//! NumPy `.npy` files (format 1.0 and 2.0): writing query results and selected values,
//! and reading arrays for `convert`. Files are written crash-safely through
//! [`crate::atomic::AtomicFile`].

use std::io;
use std::path::Path;

use tet_alloc::tet::query::{position_coords, Output};
use tet_alloc::tet::writer::Output as _;
use tet_core::tet::fold::Value;
use tet_core::tet::DType;

use crate::atomic::{AtomicFile, RealFs};

/// The `descr` of a dtype.
pub fn descr(d: DType) -> &'static str {
    match d {
        DType::U8 => "|u1",
        DType::U16 => "<u2",
        DType::U32 => "<u4",
        DType::U64 => "<u8",
        DType::I16 => "<i2",
        DType::I32 => "<i4",
        DType::I64 => "<i8",
        DType::F16 => "<f2",
        DType::F32 => "<f4",
        DType::F64 => "<f8",
    }
}

/// The `.npy` header for `descr` and `shape` (version 1.0, padded to 64 bytes).
pub fn header(descr: &str, shape: &[u64]) -> Vec<u8> {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    let shape_txt = match dims.len() {
        1 => format!("({},)", dims.join("")),
        _ => format!("({})", dims.join(", ")),
    };
    let mut dict =
        format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape_txt}, }}");
    // magic (6) + version (2) + length (2) + dict + '\n', a multiple of 64.
    let unpadded = dict.len().saturating_add(11);
    let pad = unpadded.next_multiple_of(64).saturating_sub(unpadded);
    dict.push_str(&" ".repeat(pad));
    dict.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&u16::try_from(dict.len()).unwrap_or(u16::MAX).to_le_bytes());
    out.extend_from_slice(dict.as_bytes());
    out
}

/// Writes raw little-endian element bytes as an array of `dtype` and `shape`.
pub fn write_raw(path: &Path, dtype: DType, shape: &[u64], bytes: &[u8]) -> io::Result<()> {
    write_descr(path, descr(dtype), shape, bytes)
}

/// Writes `bytes` as a `.npy` of NumPy dtype `descr` (replaced atomically).
pub fn write_descr(path: &Path, descr: &str, shape: &[u64], bytes: &[u8]) -> io::Result<()> {
    let mut f = AtomicFile::create(path, RealFs)?;
    f.append(&header(descr, shape))?;
    f.append(bytes)?;
    f.commit()
}

/// Writes a query result: floats as `<f8`, integers as `<u8`/`<i8`, booleans as `|b1`,
/// positions as `<u8` coordinates (one more axis, of the dataset's rank).
pub fn write_values(path: &Path, out: &Output, ds_shape: &[u64]) -> io::Result<()> {
    let first = out.values.first().copied().unwrap_or(Value::F64(0.0));
    let mut shape = out.shape.clone();
    let (d, mut bytes) = match first {
        Value::F64(_) => ("<f8", Vec::new()),
        Value::U64(_) => ("<u8", Vec::new()),
        Value::I64(_) | Value::I128(_) => ("<i8", Vec::new()),
        Value::Bool(_) => ("|b1", Vec::new()),
        Value::Position(_) => {
            shape.push(u64::try_from(ds_shape.len()).unwrap_or(0));
            ("<u8", Vec::new())
        }
    };
    for v in &out.values {
        match v {
            Value::F64(x) => bytes.extend_from_slice(&x.to_le_bytes()),
            Value::U64(x) => bytes.extend_from_slice(&x.to_le_bytes()),
            Value::I64(x) => bytes.extend_from_slice(&x.to_le_bytes()),
            // Refused by the caller (`query`): .npy has no exact type for it.
            Value::I128(_) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "an integer outside 64 bits",
                ))
            }
            Value::Bool(b) => bytes.push(u8::from(*b)),
            Value::Position(p) => {
                for c in position_coords(ds_shape, *p) {
                    bytes.extend_from_slice(&c.to_le_bytes());
                }
            }
        }
    }
    let mut f = AtomicFile::create(path, RealFs)?;
    f.append(&header(d, &shape))?;
    f.append(&bytes)?;
    f.commit()
}

/// How source elements become `.tet` elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Source {
    /// The target dtype.
    pub dtype: DType,
    /// Source bytes per element.
    pub size: usize,
    /// Source is big-endian.
    pub big_endian: bool,
    /// `bool` (any nonzero byte becomes 1).
    pub boolean: bool,
    /// `int8` widened to `i16`.
    pub widen_i8: bool,
}

/// A parsed `.npy` array over borrowed bytes.
#[derive(Clone, Debug)]
pub struct Npy<'a> {
    /// The `descr` text.
    pub descr: String,
    /// Element conversion.
    pub source: Source,
    /// Shape (a 0-d array has shape `[]` and is converted as `[1]`).
    pub shape: Vec<u64>,
    /// Whether the array was 0-d (its `shape` is then `[1]`).
    pub scalar: bool,
    /// Fortran (column-major) order.
    pub fortran: bool,
    /// The element bytes.
    pub data: &'a [u8],
}

fn source_of(descr: &str) -> Result<Source, String> {
    let (order, kind) = descr.split_at(descr.len().min(1));
    let big_endian = order == ">";
    if !matches!(order, "<" | ">" | "|" | "=") {
        return Err(format!("unsupported dtype '{descr}'"));
    }
    let s = |dtype, size| Source {
        dtype,
        size,
        big_endian,
        boolean: false,
        widen_i8: false,
    };
    Ok(match kind {
        "b1" => Source {
            boolean: true,
            ..s(DType::U8, 1)
        },
        "u1" => s(DType::U8, 1),
        "i1" => Source {
            widen_i8: true,
            ..s(DType::I16, 1)
        },
        "u2" => s(DType::U16, 2),
        "i2" => s(DType::I16, 2),
        "u4" => s(DType::U32, 4),
        "i4" => s(DType::I32, 4),
        "u8" => s(DType::U64, 8),
        "i8" => s(DType::I64, 8),
        "f2" => s(DType::F16, 2),
        "f4" => s(DType::F32, 4),
        "f8" => s(DType::F64, 8),
        // datetime64 and timedelta64: int64 counts of a unit, stored as they are (CF
        // encodes them so; convert records the units).
        k if k.starts_with("M8[") || k.starts_with("m8[") => {
            let code = k.get(3..).and_then(|c| c.strip_suffix(']')).unwrap_or_default();
            tet_alloc::tet::cftime::numpy_units(code, k.starts_with('M'))
                .map_err(|e| format!("dtype '{descr}': {e}"))?;
            s(DType::I64, 8)
        }
        k if k.starts_with('O') => {
            return Err(format!(
                "dtype '{descr}' is an object array (Python objects); .tet holds numbers only"
            ))
        }
        _ => {
            return Err(format!(
                "dtype '{descr}' has no .tet equivalent (supported: bool, u1-u8, i1-i8, f2, f4, f8, datetime64, timedelta64)"
            ))
        }
    })
}

/// The value of `key` in a NumPy header dict (`'key': value`), as text.
fn header_value<'h>(header: &'h str, key: &str) -> Option<&'h str> {
    let pat = format!("'{key}':");
    let at = header.find(&pat)?;
    let rest = header.get(at.checked_add(pat.len())?..)?.trim_start();
    let end = if rest.starts_with('(') {
        rest.find(')')?.checked_add(1)?
    } else if let Some(r) = rest.strip_prefix('\'') {
        r.find('\'')?.checked_add(2)?
    } else {
        rest.find([',', '}']).unwrap_or(rest.len())
    };
    rest.get(..end).map(str::trim)
}

/// Parses a `.npy` file (format 1.0, 2.0 or 3.0).
pub fn parse_npy(bytes: &[u8]) -> Result<Npy<'_>, String> {
    let magic = bytes.get(..6).ok_or("too short for a .npy file")?;
    if magic != b"\x93NUMPY" {
        return Err("not a .npy file (no \\x93NUMPY magic)".into());
    }
    let major = *bytes.get(6).ok_or("truncated .npy header")?;
    let (len, start) = match major {
        1 => {
            let b = bytes.get(8..10).ok_or("truncated .npy header")?;
            (
                usize::from(u16::from_le_bytes([
                    b.first().copied().unwrap_or(0),
                    b.get(1).copied().unwrap_or(0),
                ])),
                10usize,
            )
        }
        2 | 3 => {
            let b: [u8; 4] = bytes
                .get(8..12)
                .and_then(|b| b.try_into().ok())
                .ok_or("truncated .npy header")?;
            (
                usize::try_from(u32::from_le_bytes(b)).unwrap_or(usize::MAX),
                12usize,
            )
        }
        v => return Err(format!(".npy format version {v} is not supported")),
    };
    let end = start.checked_add(len).ok_or("bad .npy header length")?;
    let header = bytes
        .get(start..end)
        .and_then(|h| std::str::from_utf8(h).ok())
        .ok_or("truncated or non-text .npy header")?;
    let descr_txt = header_value(header, "descr").ok_or("the header has no 'descr'")?;
    if !descr_txt.starts_with('\'') {
        return Err(format!(
            "structured dtype {descr_txt} is not supported (one array of numbers per dataset)"
        ));
    }
    let descr = descr_txt.trim_matches('\'').to_string();
    let source = source_of(&descr)?;
    let fortran =
        header_value(header, "fortran_order").ok_or("the header has no 'fortran_order'")? == "True";
    let shape_txt = header_value(header, "shape").ok_or("the header has no 'shape'")?;
    let mut shape = Vec::new();
    for part in shape_txt.trim_matches(|c| c == '(' || c == ')').split(',') {
        let p = part.trim();
        if p.is_empty() {
            continue;
        }
        shape.push(
            p.parse::<u64>()
                .map_err(|_| format!("bad shape {shape_txt}"))?,
        );
    }
    let count = shape
        .iter()
        .try_fold(1u64, |a, d| a.checked_mul(*d))
        .ok_or("shape overflows")?;
    let need = count
        .checked_mul(u64::try_from(source.size).unwrap_or(u64::MAX))
        .and_then(|n| usize::try_from(n).ok())
        .ok_or("array too large")?;
    let data = bytes
        .get(end..)
        .and_then(|d| d.get(..need))
        .ok_or_else(|| format!("the .npy data is truncated: {need} bytes needed"))?;
    let scalar = shape.is_empty();
    if scalar {
        shape.push(1);
    }
    Ok(Npy {
        descr,
        source,
        shape,
        scalar,
        fortran,
        data,
    })
}

/// The default chunk shape: whole trailing axes while they fit in about 1 MiB, the rest
/// of the budget on the next axis, 1 on the others.
pub fn default_chunk(shape: &[u64], esize: u64) -> Vec<u64> {
    let mut left = (1u64 << 20).checked_div(esize).unwrap_or(1).max(1);
    let mut out = vec![1u64; shape.len()];
    for (slot, d) in out.iter_mut().zip(shape).rev() {
        let d = (*d).max(1);
        if d <= left {
            *slot = d;
            left = left.checked_div(d).unwrap_or(1).max(1);
        } else {
            *slot = left;
            left = 1;
        }
    }
    out
}

fn convert_element(src: &Source, b: &[u8], out: &mut Vec<u8>) {
    let mut e = [0u8; 8];
    if let Some(dst) = e.get_mut(..b.len()) {
        dst.copy_from_slice(b);
        if src.big_endian {
            dst.reverse();
        }
    }
    if src.boolean {
        out.push(u8::from(e.first().copied().unwrap_or(0) != 0));
    } else if src.widen_i8 {
        let v = i16::from(i8::from_le_bytes([e.first().copied().unwrap_or(0)]));
        out.extend_from_slice(&v.to_le_bytes());
    } else {
        out.extend_from_slice(e.get(..src.size).unwrap_or(&[]));
    }
}

/// Copies the clipped tile at `coords` (chunk shape `chunk`) out of `arr`, converted.
pub fn tile(arr: &Npy<'_>, chunk: &[u64], coords: &[u64], out: &mut Vec<u8>) {
    out.clear();
    let n = arr.shape.len();
    let start: Vec<u64> = coords
        .iter()
        .zip(chunk)
        .map(|(k, c)| k.saturating_mul(*c))
        .collect();
    let ext: Vec<u64> = (0..n)
        .map(|d| {
            let c = chunk.get(d).copied().unwrap_or(1);
            let s = arr.shape.get(d).copied().unwrap_or(0);
            c.min(s.saturating_sub(start.get(d).copied().unwrap_or(0)))
        })
        .collect();
    let count: u64 = ext.iter().fold(1u64, |a, e| a.saturating_mul(*e));
    // Source strides in elements.
    let mut stride = vec![1u64; n];
    let mut acc = 1u64;
    let order: Vec<usize> = if arr.fortran {
        (0..n).collect()
    } else {
        (0..n).rev().collect()
    };
    for d in order {
        if let Some(s) = stride.get_mut(d) {
            *s = acc;
        }
        acc = acc.saturating_mul(arr.shape.get(d).copied().unwrap_or(1));
    }
    let size = arr.source.size;
    let mut idx = vec![0u64; n];
    for _ in 0..count {
        let mut flat = 0u64;
        for d in 0..n {
            let g = start
                .get(d)
                .copied()
                .unwrap_or(0)
                .saturating_add(idx.get(d).copied().unwrap_or(0));
            flat = flat.saturating_add(g.saturating_mul(stride.get(d).copied().unwrap_or(0)));
        }
        let at = usize::try_from(flat)
            .unwrap_or(usize::MAX)
            .saturating_mul(size);
        if let Some(b) = arr.data.get(at..at.saturating_add(size)) {
            convert_element(&arr.source, b, out);
        }
        for d in (0..n).rev() {
            let (Some(i), Some(e)) = (idx.get_mut(d), ext.get(d)) else {
                break;
            };
            *i = i.saturating_add(1);
            if *i < *e {
                break;
            }
            *i = 0;
        }
    }
}
