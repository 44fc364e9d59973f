//! `tet-host convert` (NumPy `.npy`/`.npz` to `.tet`) and `tet-host export` (a dataset or
//! a selection to `.npy`).
//!
//! `.npy` input is memory-mapped and converted tile by tile, so files larger than RAM
//! convert; `.npz` members stored uncompressed (`np.savez`) are read in place, deflated
//! members (`np.savez_compressed`) are inflated into memory first. Big-endian and Fortran-order
//! arrays are converted; `bool` becomes `u8` and `int8` widens to `i16` (`.tet` has no
//! 8-bit signed type); object, string, complex, datetime and structured arrays are refused.


use std::path::Path;

use tet_alloc::tet::writer::{DatasetSpec, FooterSpec, HistoryRow, Writer};
use tet_core::tet::{Codec, DType, DatasetId};

use crate::atomic::{AtomicFile, RealFs};
use crate::write::{write_batch, Tile};
use crate::Exit;

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
        k if k.starts_with('O') => {
            return Err(format!(
                "dtype '{descr}' is an object array (Python objects); .tet holds numbers only"
            ))
        }
        _ => {
            return Err(format!(
                "dtype '{descr}' has no .tet equivalent (supported: bool, u1-u8, i1-i8, f2, f4, f8)"
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
    if shape.is_empty() {
        shape.push(1);
    }
    Ok(Npy {
        descr,
        source,
        shape,
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

/// Options of `tet-host convert`.
#[derive(Clone, Debug)]
pub struct ConvertOptions {
    /// Chunk shape (default about 1 MiB per chunk).
    pub chunk: Option<Vec<u64>>,
    /// Codec.
    pub codec: Codec,
    /// zstd level.
    pub level: i32,
    /// Dataset name for a `.npy` input (default: the file stem).
    pub name: Option<String>,
}

/// Tiles compressed per parallel batch.
const BATCH: usize = 16;

/// `tet-host convert`.
pub fn convert(input: &Path, output: &Path, o: &ConvertOptions) -> Exit {
    let src = match crate::input::Input::open(input) {
        Ok(i) => i,
        Err(e) => {
            eprintln!("tet-host: cannot read {}: {e}", input.display());
            return Exit::Operational;
        }
    };
    let bytes = src.bytes();
    let mut members: Vec<(String, Vec<u8>)> = Vec::new(); // inflated npz members
    let mut arrays: Vec<(String, Npy<'_>)> = Vec::new();
    let is_zip = bytes.starts_with(b"PK\x03\x04");
    let mut stored: Vec<(String, std::ops::Range<usize>)> = Vec::new();
    if is_zip {
        match npz_members(bytes) {
            Ok((s, m)) => {
                stored = s;
                members = m;
            }
            Err(e) => {
                eprintln!("tet-host: {}: {e}", input.display());
                return Exit::Usage;
            }
        }
    }
    let result: Result<(), String> = (|| {
        if is_zip {
            for (name, range) in &stored {
                let b = bytes
                    .get(range.clone())
                    .ok_or("archive member out of range")?;
                arrays.push((name.clone(), parse_npy(b)?));
            }
            for (name, b) in &members {
                arrays.push((name.clone(), parse_npy(b)?));
            }
        } else {
            let name = o.name.clone().unwrap_or_else(|| {
                input
                    .file_stem()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_else(|| "data".into())
            });
            arrays.push((name, parse_npy(bytes)?));
        }
        Ok(())
    })();
    if let Err(e) = result {
        eprintln!("tet-host: {}: {e}", input.display());
        return Exit::Usage;
    }
    if arrays.is_empty() {
        eprintln!("tet-host: {}: no arrays to convert", input.display());
        return Exit::Usage;
    }
    let chunks: Vec<Vec<u64>> = arrays
        .iter()
        .map(|(_, a)| {
            o.chunk
                .clone()
                .filter(|c| c.len() == a.shape.len())
                .unwrap_or_else(|| default_chunk(&a.shape, a.source.dtype.size()))
        })
        .collect();
    if let Some(c) = &o.chunk {
        if let Some((name, a)) = arrays.iter().find(|(_, a)| a.shape.len() != c.len()) {
            eprintln!(
                "tet-host: --chunk has {} axes but array '{name}' has {}",
                c.len(),
                a.shape.len()
            );
            return Exit::Usage;
        }
    }
    let specs: Vec<DatasetSpec<'_>> = arrays
        .iter()
        .zip(&chunks)
        .map(|((name, a), c)| DatasetSpec {
            name,
            dtype: a.source.dtype,
            shape: &a.shape,
            chunk_shape: c,
        })
        .collect();
    let out = match AtomicFile::create(output, RealFs) {
        Ok(f) => f,
        Err(e) => {
            eprintln!(
                "tet-host: cannot create a file beside {}: {e}",
                output.display()
            );
            return Exit::Operational;
        }
    };
    let mut w = match Writer::new(out, &specs) {
        Ok(w) => w,
        Err(e) => {
            eprintln!("tet-host: {}: {e}", output.display());
            return Exit::Usage;
        }
    };
    for (i, ((_, a), c)) in arrays.iter().zip(&chunks).enumerate() {
        let grid: Vec<u64> = a
            .shape
            .iter()
            .zip(c)
            .map(|(s, k)| s.div_ceil((*k).max(1)))
            .collect();
        let cells = grid.iter().fold(1u64, |x, g| x.saturating_mul(*g));
        let id = DatasetId(u32::try_from(i).unwrap_or(u32::MAX));
        let mut batch: Vec<Tile> = Vec::new();
        for cell in 0..cells {
            let coords = tet_alloc::tet::query::position_coords(&grid, cell);
            let mut t = Vec::new();
            tile(a, c, &coords, &mut t);
            batch.push((id, coords, t));
            if batch.len() >= BATCH || cell.saturating_add(1) == cells {
                if let Err(e) = write_batch(&mut w, &batch, o.codec, o.level) {
                    eprintln!("tet-host: {}: {e}", output.display());
                    return Exit::Operational;
                }
                batch.clear();
            }
        }
    }
    let descrs: Vec<String> = arrays
        .iter()
        .map(|(n, a)| format!("{n}:{}", a.descr))
        .collect();
    let footer = FooterSpec {
        history: vec![HistoryRow {
            op: "convert".into(),
            source: input.display().to_string(),
            at: crate::tet_repair::now_rfc3339(),
            params: Some(
                serde_json::json!({
                    "from": if is_zip { "npz" } else { "npy" },
                    "arrays": descrs,
                    "codec": o.codec.name(),
                })
                .to_string(),
            ),
        }],
        metadata: None,
    };
    match w.finish(Some(&footer)).map(|f| f.commit()) {
        Ok(Ok(())) => Exit::Clean,
        Ok(Err(e)) => {
            eprintln!("tet-host: {}: {e}", output.display());
            Exit::Operational
        }
        Err(e) => {
            eprintln!("tet-host: {}: {e}", output.display());
            Exit::Operational
        }
    }
}

/// The members of an `.npz`: stored ones as byte ranges of `bytes`, deflated ones
/// inflated in memory (bounded by the archive's declared sizes, checked as they inflate).
type Members = (
    Vec<(String, std::ops::Range<usize>)>,
    Vec<(String, Vec<u8>)>,
);

fn npz_members(bytes: &[u8]) -> Result<Members, String> {
    use std::io::Read;
    let mut zip = zip::ZipArchive::new(std::io::Cursor::new(bytes))
        .map_err(|e| format!("not a readable .npz archive: {e}"))?;
    let mut stored = Vec::new();
    let mut inflated = Vec::new();
    for i in 0..zip.len() {
        let mut f = zip
            .by_index(i)
            .map_err(|e| format!("archive member {i}: {e}"))?;
        let name = f.name().trim_end_matches(".npy").to_string();
        if f.compression() == zip::CompressionMethod::Stored {
            let start = f
                .data_start()
                .and_then(|s| usize::try_from(s).ok())
                .ok_or("archive member without a data offset")?;
            let len = usize::try_from(f.size()).map_err(|_| "archive member too large")?;
            stored.push((name, start..start.saturating_add(len)));
        } else {
            let mut v = Vec::new();
            f.read_to_end(&mut v)
                .map_err(|e| format!("archive member '{name}': {e}"))?;
            inflated.push((name, v));
        }
    }
    Ok((stored, inflated))
}

/// Parses `--chunk 256,256`.
pub fn parse_chunk(s: &str) -> Result<Vec<u64>, String> {
    s.split(',')
        .map(|p| {
            p.trim()
                .parse::<u64>()
                .ok()
                .filter(|v| *v > 0)
                .ok_or_else(|| {
                    format!("--chunk wants positive integers separated by commas, got '{s}'")
                })
        })
        .collect()
}

/// `tet-host export FILE --dataset NAME OUT.npy [--selection JSON]`.
pub fn export(
    path: &Path,
    bytes: &[u8],
    dataset: &str,
    selection: &[tet_core::tet::select::Slice],
    out: &Path,
    budget: Option<u64>,
) -> Exit {
    let file = match crate::query_cmd::open_tet(path, bytes) {
        Ok(f) => f,
        Err(e) => return e,
    };
    let Ok(ds) = file.dataset(dataset) else {
        eprintln!("tet-host: {}: no dataset \"{dataset}\"", path.display());
        return Exit::Usage;
    };
    let budget = crate::query_cmd::budget_for(&file, None, budget);
    let p = match tet_alloc::tet::query::plan(&file, ds, selection) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("tet-host: {}: {e}", path.display());
            return Exit::Usage;
        }
    };
    let values = match crate::query_cmd::select_values(&file, &p, budget) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("tet-host: {}: {e}", path.display());
            return Exit::Operational;
        }
    };
    let shape: Vec<u64> = p.selection.shape().as_slice().to_vec();
    match crate::npy::write_raw(out, ds.dtype(), &shape, &values) {
        Ok(()) => Exit::Clean,
        Err(e) => {
            eprintln!("tet-host: cannot write {}: {e}", out.display());
            Exit::Operational
        }
    }
}
