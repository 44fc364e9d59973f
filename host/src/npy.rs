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
    let mut f = AtomicFile::create(path, RealFs)?;
    f.append(&header(descr(dtype), shape))?;
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
        Value::I64(_) => ("<i8", Vec::new()),
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
