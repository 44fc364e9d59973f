//! `tet-host export`: a dataset, or a selection of it, to a NumPy `.npy` file, streamed
//! a slab of chunks at a time (the header first, then the output's rows in order), so
//! memory is one slab and one decoded chunk whatever the selection's size.

// `QueryError` carries a located decode error by value, as the libraries do.
#![allow(clippy::result_large_err)]

use std::path::Path;

use crate::Exit;

/// `tet-host export FILE --dataset NAME OUT.npy [--selection JSON]`.
pub fn export(
    path: &Path,
    bytes: &[u8],
    dataset: &str,
    selection: &[tet_core::tet::select::Slice],
    out: &Path,
    budget: Option<u64>,
    force: bool,
) -> Exit {
    export_with(path, bytes, dataset, selection, out, budget, force, false)
}

/// Where `export --coords` writes the axis metadata of `out`: `OUT.coords.json`.
pub fn coords_path(out: &Path) -> std::path::PathBuf {
    let mut p = out.as_os_str().to_owned();
    p.push(".coords.json");
    std::path::PathBuf::from(p)
}

/// The axis metadata of a selection of `ds`, as `export --coords` writes it: the
/// dataset's `dims` and `attrs`, and per axis with a coordinate its values over the
/// selected indices.
fn coords_json(
    file: &tet_core::tet::TetFile<'_>,
    ds: &tet_core::tet::Dataset<'_>,
    sel: &[tet_core::tet::select::AxisSel],
    budget: u64,
) -> Result<serde_json::Value, String> {
    use serde_json::json;
    use tet_alloc::tet::meta::Values;
    let m = crate::tet::dims::metadata(file)?.unwrap_or_default();
    let empty = tet_alloc::tet::meta::DatasetMeta::default();
    let dm = m.dataset(ds.name()).unwrap_or(&empty);
    let mut coords = serde_json::Map::new();
    for (d, a) in sel.iter().enumerate() {
        let Some(c) = dm.coord(d) else { continue };
        let v = crate::tet::dims::coord_values(file, c, budget)?;
        let pick = |i: u64| -> Option<usize> {
            usize::try_from(a.start.checked_add(i.checked_mul(a.step)?)?).ok()
        };
        let values: Vec<serde_json::Value> = (0..a.count)
            .filter_map(pick)
            .filter_map(|i| match &v {
                Values::Labels(l) => l.get(i).map(|x| json!(x)),
                Values::Ints(n) => n
                    .get(i)
                    .map(|x| i64::try_from(*x).map_or_else(|_| json!(x.to_string()), |x| json!(x))),
                Values::Floats(f) => f.get(i).map(|x| {
                    if x.is_finite() {
                        json!(x)
                    } else {
                        json!(x.to_string())
                    }
                }),
            })
            .collect();
        let key = dm
            .dim_names
            .as_ref()
            .and_then(|n| n.get(d))
            .cloned()
            .unwrap_or_else(|| d.to_string());
        // A coordinate dataset's own attrs (`units`, `calendar`: what its numbers mean)
        // travel with its values.
        let mut entry = serde_json::Map::new();
        entry.insert("axis".into(), json!(d));
        entry.insert("values".into(), serde_json::Value::Array(values));
        if let tet_alloc::tet::meta::Coord::Dataset(name) = c {
            entry.insert("dataset".into(), json!(name));
            if let Some(cm) = m.dataset(name).filter(|cm| !cm.attrs.is_empty()) {
                let a = crate::tet::dims::user_attrs(&cm.attrs, true);
                entry.insert("attrs".into(), serde_json::Value::Object(a));
            }
        }
        coords.insert(key, serde_json::Value::Object(entry));
    }
    let attrs = crate::tet::dims::user_attrs(&dm.attrs, true);
    Ok(json!({
        "dataset": ds.name(),
        "dims": dm.dim_names,
        "attrs": attrs,
        "coords": coords,
    }))
}

/// [`export`], with `--coords`: the axis metadata written beside the data.
#[allow(clippy::too_many_arguments)]
pub fn export_with(
    path: &Path,
    bytes: &[u8],
    dataset: &str,
    selection: &[tet_core::tet::select::Slice],
    out: &Path,
    budget: Option<u64>,
    force: bool,
    with_coords: bool,
) -> Exit {
    export_streaming(
        path,
        bytes,
        dataset,
        selection,
        out,
        budget,
        force,
        with_coords,
        &|_, _| {},
    )
}

/// [`export_with`], calling `release(offset, len)` on the stored bytes of each group of
/// chunks once it is written (a mapped input drops their pages:
/// [`crate::input::Input::release`]).
#[allow(clippy::too_many_arguments)]
pub fn export_streaming(
    path: &Path,
    bytes: &[u8],
    dataset: &str,
    selection: &[tet_core::tet::select::Slice],
    out: &Path,
    budget: Option<u64>,
    force: bool,
    with_coords: bool,
    release: &dyn Fn(u64, u64),
) -> Exit {
    if let Err(e) = crate::atomic::check_output(out, &[path], force) {
        return e;
    }
    if with_coords {
        if let Err(e) = crate::atomic::check_output(&coords_path(out), &[path], force) {
            return e;
        }
    }
    let file = match crate::tet::open_tet(path, bytes) {
        Ok(f) => f,
        Err(e) => return e,
    };
    let Ok(ds) = file.dataset(dataset) else {
        return crate::tet::no_dataset(path, &file, dataset);
    };
    let source = crate::tet::query::budget_source(None, budget);
    let budget = crate::tet::budget_for(&file, None, budget);
    let p = match tet_alloc::tet::query::plan(&file, ds, selection) {
        Ok(p) => p,
        Err(e) => {
            crate::say!("{}: {e}", path.display());
            return Exit::of(e.category());
        }
    };
    let src = match tet_alloc::tet::history::metadata(&file) {
        Ok(m) => numpy_source(m.as_ref(), dataset),
        Err(e) => {
            crate::errln!(
                "tet-host: {}: warning: the footer metadata is unreadable ({e}), so the \
                 source's NumPy dtype and shape are unknown: written as stored",
                path.display()
            );
            NumpySource::default()
        }
    };
    let sidecar = if with_coords {
        match coords_json(&file, &ds, p.selection.axes(), budget) {
            Ok(v) => Some(v),
            Err(e) => {
                crate::say!("{}: --coords: {e}", path.display());
                return Exit::Usage;
            }
        }
    } else {
        None
    };
    // Progress over the bytes decoded (standard error, terminal only).
    let bar = crate::progress::progress_bar(true, p.decode_bytes);
    let window = SLAB_BYTES.min(budget.checked_div(2).unwrap_or(0));
    let written = write_npy(&file, &p, &src, out, window, budget, bar.as_ref(), release);
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    match written {
        Ok(Some(why)) => crate::errln!("tet-host: {}: warning: {why}", path.display()),
        Ok(None) => {}
        Err(Failed::Read(e)) => return crate::tet::query::fail_reading(path, &ds, &e, source),
        Err(Failed::Write(e)) => {
            crate::say!("cannot write {}: {e}", out.display());
            return Exit::Operational;
        }
    }
    let target = coords_path(out);
    match sidecar {
        Some(v) => {
            let text = serde_json::to_string_pretty(&v).unwrap_or_default();
            if let Err(e) = write_atomic(&target, format!("{text}\n").as_bytes()) {
                crate::say!("cannot write {}: {e}", target.display());
                return Exit::Operational;
            }
        }
        None => remove_stale_sidecar(&target, path, ds.name()),
    }
    Exit::Clean
}

/// `bytes` written to `target` atomically (a temporary file renamed over it).
fn write_atomic(target: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use tet_alloc::tet::writer::Output;
    let mut f = crate::atomic::AtomicFile::create(target, crate::atomic::RealFs)?;
    f.append(bytes)?;
    f.commit()
}

/// An export without `--coords` over an earlier one with it: the earlier sidecar
/// describes other values, so it is removed (and said), when it is one `export` wrote
/// (a JSON object with `dataset` and `coords`); anything else there is left, with a
/// warning.
fn remove_stale_sidecar(target: &Path, input: &Path, dataset: &str) {
    let Ok(text) = std::fs::read(target) else {
        return;
    };
    let ours = serde_json::from_slice::<serde_json::Value>(&text)
        .ok()
        .is_some_and(|v| v.get("dataset").is_some() && v.get("coords").is_some());
    if ours {
        match std::fs::remove_file(target) {
            Ok(()) => crate::errln!(
                "tet-host: {}: removed {}, an earlier export's coordinates that no longer \
                 describe {dataset:?} (--coords writes them anew)",
                input.display(),
                target.display()
            ),
            Err(e) => crate::errln!(
                "tet-host: {}: warning: {} is an earlier export's coordinates, which no \
                 longer describe {dataset:?}, and could not be removed: {e}",
                input.display(),
                target.display()
            ),
        }
    } else {
        crate::errln!(
            "tet-host: {}: warning: {} is left as it was; it does not describe this export",
            input.display(),
            target.display()
        );
    }
}

/// Most bytes of output the streaming export gathers at a time (further bounded by half
/// the memory budget): one slab of chunks along the first axis, or a piece of one.
pub const SLAB_BYTES: u64 = 32 << 20;

/// Why a streaming export stopped.
#[derive(Debug)]
pub enum Failed {
    /// A chunk could not be read (or the budget is too small for it).
    Read(tet_alloc::tet::query::QueryError),
    /// The output could not be written.
    Write(std::io::Error),
}

/// How the elements are given back to NumPy's type while they stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// As stored.
    Stored,
    /// `u8` 0/1 written as `bool` (the same bytes; checked).
    Bool,
    /// `i16` narrowed to `int8` (checked).
    Narrow,
}

/// The header and mode [`restore`] would give the selection: the same decisions, made
/// before any element is read. `why`: the warning known up front.
fn plan_restore(
    dtype: tet_core::tet::DType,
    shape: &[u64],
    src: &NumpySource,
) -> (String, Vec<u64>, Mode, Option<String>) {
    use tet_core::tet::DType;
    let stored = crate::tet::npy::descr(dtype).to_string();
    let (descr, mode) = match (src.dtype.as_deref().and_then(|d| d.get(1..)), dtype) {
        (Some("b1"), DType::U8) => ("|b1".to_string(), Mode::Bool),
        (Some("i1"), DType::I16) => ("|i1".to_string(), Mode::Narrow),
        // datetime64/timedelta64: the int64 counts as stored, under their own dtype.
        (Some(k), DType::I64) if k.starts_with("M8[") || k.starts_with("m8[") => {
            (format!("<{k}"), Mode::Stored)
        }
        (Some("b1" | "i1"), _) => {
            let why = format!(
                "the source was {}, but the dataset is {}: written as stored",
                src.dtype.as_deref().unwrap_or_default(),
                dtype.name()
            );
            return (stored, shape.to_vec(), Mode::Stored, Some(why));
        }
        _ => (stored, Mode::Stored),
    };
    if src.scalar && shape != [1] {
        let why = format!(
            "the source was 0-d, but this selection has shape {shape:?}: written with that shape"
        );
        return (descr, shape.to_vec(), mode, Some(why));
    }
    let shape = if src.scalar {
        Vec::new()
    } else {
        shape.to_vec()
    };
    (descr, shape, mode, None)
}

/// Streams the selection of `plan_` into the `.npy` file `out` (replaced atomically):
/// the header, then the output's rows in order, a slab of chunks at a time. Returns the
/// warning, if any, that [`restore`] would give; the bytes are those of the in-memory
/// export ([`gathered_npy`]). `window`: the most output bytes gathered at a time (the
/// export's is [`SLAB_BYTES`], at most half the budget).
#[allow(clippy::too_many_arguments)]
pub fn write_npy<'f>(
    file: &tet_core::tet::TetFile<'f>,
    plan_: &tet_alloc::tet::query::ReadPlan<'f>,
    src: &NumpySource,
    out: &Path,
    window: u64,
    budget: u64,
    bar: Option<&indicatif::ProgressBar>,
    release: &dyn Fn(u64, u64),
) -> Result<Option<String>, Failed> {
    use crate::atomic::{AtomicFile, RealFs};
    use tet_alloc::tet::writer::Output as _;
    let dtype = plan_.dataset.dtype();
    let shape: Vec<u64> = plan_.selection.shape().as_slice().to_vec();
    let (descr, npy_shape, mode, why) = plan_restore(dtype, &shape, src);
    let mut f = AtomicFile::create(out, RealFs).map_err(Failed::Write)?;
    let head = crate::tet::npy::header(&descr, &npy_shape);
    f.append(&head).map_err(Failed::Write)?;
    let mut bad: Option<(u64, i64)> = None;
    let narrow = mode == Mode::Narrow;
    let streamed = for_each_slab(
        file,
        plan_,
        window,
        budget,
        bar,
        release,
        &mut |first, slab| match mode {
            Mode::Stored => f.append(slab).map_err(Failed::Write),
            Mode::Bool => {
                if bad.is_none() {
                    if let Some(i) = slab.iter().position(|b| *b > 1) {
                        let v = slab.get(i).copied().unwrap_or(0);
                        let at = first.saturating_add(u64::try_from(i).unwrap_or(0));
                        bad = Some((at, i64::from(v)));
                    }
                }
                f.append(slab).map_err(Failed::Write)
            }
            Mode::Narrow => {
                let mut small = Vec::with_capacity(slab.len().checked_div(2).unwrap_or(0));
                for (i, c) in slab.chunks_exact(2).enumerate() {
                    let v = i16::from_le_bytes([
                        c.first().copied().unwrap_or(0),
                        c.get(1).copied().unwrap_or(0),
                    ]);
                    match i8::try_from(v) {
                        Ok(n) => small.extend_from_slice(&n.to_le_bytes()),
                        Err(_) => {
                            let at = first.saturating_add(u64::try_from(i).unwrap_or(0));
                            bad = Some((at, i64::from(v)));
                            return Err(Failed::Write(std::io::Error::other("narrowing")));
                        }
                    }
                }
                f.append(&small).map_err(Failed::Write)
            }
        },
    );
    match (streamed, bad) {
        (Ok(()), None) => {
            f.commit().map_err(Failed::Write)?;
            Ok(why)
        }
        (Ok(()), Some((i, v))) => {
            // Bool: the bytes written are the u8 values; only the header changes, to
            // what `restore` gives (`u1`, the shape as selected). Same length (both pad
            // to 64 bytes) so it is patched in place, else the export is made again.
            let why =
                format!("the source was bool, but element {i} is {v}, not 0 or 1: written as u8");
            let stored = crate::tet::npy::header(crate::tet::npy::descr(dtype), &shape);
            if stored.len() == head.len() {
                f.write_at(0, &stored).map_err(Failed::Write)?;
                f.commit().map_err(Failed::Write)?;
                return Ok(Some(why));
            }
            drop(f);
            again_as_stored(file, plan_, out, window, budget, release)?;
            Ok(Some(why))
        }
        (Err(_), Some((i, v))) if narrow => {
            drop(f);
            let why = format!(
                "the source was int8, but element {i} is {v}, outside int8: written as i16"
            );
            again_as_stored(file, plan_, out, window, budget, release)?;
            Ok(Some(why))
        }
        (Err(e), _) => Err(e),
    }
}

/// The export written again with the elements as stored (after a check of the source's
/// type failed part way).
fn again_as_stored<'f>(
    file: &tet_core::tet::TetFile<'f>,
    plan_: &tet_alloc::tet::query::ReadPlan<'f>,
    out: &Path,
    window: u64,
    budget: u64,
    release: &dyn Fn(u64, u64),
) -> Result<(), Failed> {
    use crate::atomic::{AtomicFile, RealFs};
    use tet_alloc::tet::writer::Output as _;
    let dtype = plan_.dataset.dtype();
    let shape: Vec<u64> = plan_.selection.shape().as_slice().to_vec();
    let mut f = AtomicFile::create(out, RealFs).map_err(Failed::Write)?;
    f.append(&crate::tet::npy::header(
        crate::tet::npy::descr(dtype),
        &shape,
    ))
    .map_err(Failed::Write)?;
    for_each_slab(
        file,
        plan_,
        window,
        budget,
        None,
        release,
        &mut |_, slab| f.append(slab).map_err(Failed::Write),
    )?;
    f.commit().map_err(Failed::Write)
}

/// Receives each slab of a streaming export: its first element's index and its bytes.
pub type Emit<'a> = dyn FnMut(u64, &[u8]) -> Result<(), Failed> + 'a;

/// Takes the tiles of one piece of a slab.
type Put<'a> = dyn FnMut(&tet_core::tet::select::ChunkPart, &[u8]) + 'a;
/// Hands each chunk of a piece of a slab, decoded, to a [`Put`].
type Tiles<'a> = dyn FnMut(&mut Put<'_>) -> Result<(), Failed> + 'a;

/// Calls `emit(first, bytes)` with the selected elements in row-major order, a slab at a
/// time (`first` is the slab's first element's row-major index in the selection): the
/// elements of the chunks that share their grid coordinates along the axes up to `d`, at
/// most `window` bytes at a time (at least one element). `d` is the first axis whose
/// trailing rows fit that window (0 unless one row of the selection is larger than it);
/// a slab larger than the window is gathered in pieces, its chunks decoded once per
/// piece (once in all when the slab is one chunk). One decoded chunk is held beside
/// the slab; after each slab `release` is called on its chunks' stored bytes.
pub fn for_each_slab<'f>(
    file: &tet_core::tet::TetFile<'f>,
    plan_: &tet_alloc::tet::query::ReadPlan<'f>,
    window: u64,
    budget: u64,
    bar: Option<&indicatif::ProgressBar>,
    release: &dyn Fn(u64, u64),
    emit: &mut Emit<'_>,
) -> Result<(), Failed> {
    use crate::tet::codec::CZstd;
    use rayon::prelude::*;
    use tet_alloc::tet::decode::ChunkDecoder;
    use tet_alloc::tet::query::{decode_part, QueryError};
    use tet_core::tet::select::{for_each_run, ChunkPart};
    use tet_core::tet::Codec;
    let ds = &plan_.dataset;
    let n = ds.ndim();
    let es = ds.dtype().size();
    let sel_shape = plan_.selection.shape();
    let sel = sel_shape.as_slice();
    let parts = &plan_.parts;
    if parts.is_empty() || n == 0 {
        return Ok(());
    }
    // stride[a]: elements between consecutive ordinals of axis a in the output.
    let mut stride = vec![1u64; n];
    for a in (0..n.saturating_sub(1)).rev() {
        let next = stride.get(a.saturating_add(1)).copied().unwrap_or(1);
        let len = sel.get(a.saturating_add(1)).copied().unwrap_or(1);
        if let Some(s) = stride.get_mut(a) {
            *s = next.saturating_mul(len);
        }
    }
    let window = window.max(es);
    let row_bytes = |a: usize| stride.get(a).copied().unwrap_or(1).saturating_mul(es);
    let d = (0..n)
        .find(|a| row_bytes(*a) <= window)
        .unwrap_or(n.saturating_sub(1));
    let step_rows = window.checked_div(row_bytes(d).max(1)).unwrap_or(1).max(1);
    let grid = |p: &ChunkPart, a: usize| p.coords.as_slice().get(a).copied().unwrap_or(0);
    let ord = |p: &ChunkPart, a: usize| p.first_ordinal.get(a).copied().unwrap_or(0);
    let cnt = |p: &ChunkPart, a: usize| p.count.get(a).copied().unwrap_or(0);
    let esz = usize::try_from(es).unwrap_or(1);
    let mut dec = ChunkDecoder::new(CZstd::new(), budget);
    // Threads for zstd slabs: each holds a decoder and a copy of its tile, so the count is
    // lowered until that fits the budget left beside the window.
    let largest = crate::tet::query::largest_chunk(file, plan_);
    let per_thread = dec.memory_needed(largest).saturating_add(largest).max(1);
    let fit = budget
        .saturating_sub(window)
        .checked_div(per_thread)
        .and_then(|n| usize::try_from(n).ok())
        .unwrap_or(1);
    let threads = rayon::current_num_threads().min(fit).max(1);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .map_err(|e| Failed::Write(std::io::Error::other(e)))?;
    // One decoder and one tile buffer per thread, kept from wave to wave.
    let mut workers: Vec<(ChunkDecoder<CZstd>, Vec<u8>)> = (0..threads)
        .map(|_| (ChunkDecoder::new(CZstd::new(), budget), Vec::new()))
        .collect();
    let zstd = |q: usize| {
        plan_
            .rows
            .get(q)
            .and_then(|r| file.rows().get(usize::try_from(*r).ok()?))
            .is_some_and(|r| Codec::from_wire(r.codec.get()) == Some(Codec::Zstd))
    };
    let release_parts = |range: std::ops::Range<usize>| {
        for i in range {
            let row = plan_
                .rows
                .get(i)
                .and_then(|r| file.rows().get(usize::try_from(*r).ok()?));
            if let Some(r) = row {
                release(r.payload_offset.get(), r.stored_byte_len.get());
            }
        }
    };
    // Copies the runs of `part`'s tile that fall in the block (`prefix` ordinals on the
    // axes before d, ordinals lo..hi on axis d) into `buf`, which starts at element
    // `base` of the output.
    let fill = |part: &ChunkPart,
                tile: &[u8],
                prefix: &[u64],
                lo: u64,
                hi: u64,
                base: u64,
                buf: &mut [u8]| {
        for_each_run(ds, &plan_.selection, part, |r| {
            if r.ordinals.get(..d) != Some(prefix) {
                return;
            }
            let od = r.ordinals.get(d).copied().unwrap_or(0);
            // Along the last axis a run covers ordinals od .. od + count; before it, one.
            let (k0, k1) = if d.saturating_add(1) == n {
                (
                    lo.saturating_sub(od).min(r.count),
                    hi.saturating_sub(od).min(r.count),
                )
            } else if od >= lo && od < hi {
                (0, r.count)
            } else {
                return;
            };
            let mut idx = 0u64;
            for (a, s) in stride.iter().enumerate() {
                idx =
                    idx.saturating_add(r.ordinals.get(a).copied().unwrap_or(0).saturating_mul(*s));
            }
            let at = |k: u64, stride: u64| -> (usize, usize) {
                let src = usize::try_from(r.tile_index.saturating_add(k.saturating_mul(stride)))
                    .unwrap_or(usize::MAX)
                    .saturating_mul(esz);
                let dst = usize::try_from(idx.saturating_add(k).saturating_sub(base))
                    .unwrap_or(usize::MAX)
                    .saturating_mul(esz);
                (src, dst)
            };
            if r.tile_stride == 1 {
                // A run of consecutive tile elements: one copy.
                let (src, dst) = at(k0, 1);
                let len = usize::try_from(k1.saturating_sub(k0))
                    .unwrap_or(0)
                    .saturating_mul(esz);
                if let (Some(s), Some(t)) = (
                    tile.get(src..src.saturating_add(len)),
                    buf.get_mut(dst..dst.saturating_add(len)),
                ) {
                    t.copy_from_slice(s);
                }
                return;
            }
            for k in k0..k1 {
                let src =
                    usize::try_from(r.tile_index.saturating_add(k.saturating_mul(r.tile_stride)))
                        .unwrap_or(usize::MAX)
                        .saturating_mul(esz);
                let dst = usize::try_from(idx.saturating_add(k).saturating_sub(base))
                    .unwrap_or(usize::MAX)
                    .saturating_mul(esz);
                if let (Some(s), Some(t)) = (
                    tile.get(src..src.saturating_add(esz)),
                    buf.get_mut(dst..dst.saturating_add(esz)),
                ) {
                    t.copy_from_slice(s);
                }
            }
        });
    };
    let tick = |tile: &[u8]| {
        if let Some(b) = bar {
            b.inc(u64::try_from(tile.len()).unwrap_or(0));
        }
    };
    let mut buf: Vec<u8> = Vec::new();
    // The chunks that share their grid coordinates along the axes before d are
    // consecutive in grid order: one group each, found by those coordinates.
    let mut by_prefix: std::collections::BTreeMap<&[u64], (usize, usize)> =
        std::collections::BTreeMap::new();
    for (q, p) in parts.iter().enumerate() {
        let key = p.coords.as_slice().get(..d).unwrap_or(&[]);
        by_prefix
            .entry(key)
            .and_modify(|g| g.1 = q.saturating_add(1))
            .or_insert((q, q.saturating_add(1)));
    }
    let axes = plan_.selection.axes();
    let chunk_shape: Vec<u64> = ds.chunk_shape().collect();
    let lead: Vec<u64> = sel.get(..d).unwrap_or(&[]).to_vec();
    let prefixes = lead.iter().fold(1u64, |x, c| x.saturating_mul(*c));
    // Every combination of ordinals on the axes before d, in row-major order: the
    // group holding it, then its chunks along axis d in order.
    for pi in 0..prefixes {
        let prefix = tet_alloc::tet::query::position_coords(&lead, pi);
        let key: Vec<u64> = prefix
            .iter()
            .zip(axes)
            .zip(&chunk_shape)
            .map(|((o, a), c)| {
                a.start
                    .saturating_add(o.saturating_mul(a.step))
                    .checked_div(*c)
                    .unwrap_or(0)
            })
            .collect();
        let Some(&(i, j)) = by_prefix.get(key.as_slice()) else {
            continue;
        };
        let Some(first) = parts.get(i) else { continue };
        // The group's last visit: its last ordinal along every axis before d.
        let last_visit = prefix
            .iter()
            .enumerate()
            .all(|(a, o)| o.saturating_add(1) == ord(first, a).saturating_add(cnt(first, a)));
        {
            let mut k = i;
            while k < j {
                let Some(pk) = parts.get(k) else { break };
                let mut m = k.saturating_add(1);
                while parts
                    .get(m)
                    .is_some_and(|q| m < j && grid(q, d) == grid(pk, d))
                {
                    m = m.saturating_add(1);
                }
                let (lo0, hi0) = (ord(pk, d), ord(pk, d).saturating_add(cnt(pk, d)));
                let mut base_prefix = 0u64;
                for (a, o) in prefix.iter().enumerate() {
                    base_prefix = base_prefix
                        .saturating_add(o.saturating_mul(stride.get(a).copied().unwrap_or(1)));
                }
                let sd = stride.get(d).copied().unwrap_or(1);
                let pieces = |lo: u64| (lo, lo.saturating_add(step_rows).min(hi0));
                let mut emit_piece =
                    |lo: u64, hi: u64, tiles: &mut Tiles<'_>| -> Result<(), Failed> {
                        let base = base_prefix.saturating_add(lo.saturating_mul(sd));
                        let len = hi.saturating_sub(lo).saturating_mul(sd).saturating_mul(es);
                        buf.clear();
                        buf.resize(usize::try_from(len).unwrap_or(0), 0);
                        let b = &mut buf;
                        tiles(&mut |part, tile| fill(part, tile, &prefix, lo, hi, base, b))?;
                        emit(base, &buf)
                    };
                if m.saturating_sub(k) == 1 {
                    // One chunk: decoded once for all its pieces.
                    let tile = decode_part(file, plan_, k, &mut dec).map_err(Failed::Read)?;
                    tick(tile);
                    let mut lo = lo0;
                    while lo < hi0 {
                        let (a, b) = pieces(lo);
                        emit_piece(a, b, &mut |put| {
                            put(pk, tile);
                            Ok(())
                        })?;
                        lo = b;
                    }
                } else {
                    let mut lo = lo0;
                    while lo < hi0 {
                        let (a, b) = pieces(lo);
                        emit_piece(a, b, &mut |put| {
                            let all: Vec<usize> = (k..m).collect();
                            for wave in all.chunks(threads) {
                                // zstd chunks decode a wave at a time on every thread (each
                                // tile copied out of its thread's decoder), then fill in
                                // order: the same bytes as one at a time.
                                if wave.len() > 1 && wave.iter().all(|q| zstd(*q)) {
                                    let decoded: Result<Vec<()>, QueryError> = pool.install(|| {
                                        workers
                                            .par_iter_mut()
                                            .zip(wave.par_iter())
                                            .map(|((d, out), &q)| {
                                                let t = decode_part(file, plan_, q, d)?;
                                                out.clear();
                                                out.extend_from_slice(t);
                                                Ok(())
                                            })
                                            .collect()
                                    });
                                    decoded.map_err(Failed::Read)?;
                                    for (&q, (_, t)) in wave.iter().zip(workers.iter()) {
                                        tick(t);
                                        put(&parts.get(q).copied().unwrap_or_default(), t);
                                    }
                                    continue;
                                }
                                for &q in wave {
                                    let part = parts.get(q).copied().unwrap_or_default();
                                    let tile = decode_part(file, plan_, q, &mut dec)
                                        .map_err(Failed::Read)?;
                                    tick(tile);
                                    put(&part, tile);
                                }
                            }
                            Ok(())
                        })?;
                        lo = b;
                    }
                }
                if last_visit {
                    release_parts(k..m);
                }
                k = m;
            }
        }
    }
    Ok(())
}

/// The `.npy` bytes of the in-memory export (every selected element gathered, then
/// restored as [`restore`] does): the reference the streaming export is tested against.
pub fn gathered_npy<'f>(
    file: &tet_core::tet::TetFile<'f>,
    plan_: &tet_alloc::tet::query::ReadPlan<'f>,
    src: &NumpySource,
    budget: u64,
) -> Result<(Vec<u8>, Option<String>), tet_alloc::tet::query::QueryError> {
    let values = crate::tet::query::select_values(file, plan_, budget, &())?;
    let shape: Vec<u64> = plan_.selection.shape().as_slice().to_vec();
    let ((descr, shape, values), why) = restore(plan_.dataset.dtype(), shape, values, src);
    let mut out = crate::tet::npy::header(&descr, &shape);
    out.extend_from_slice(&values);
    Ok((out, why))
}

/// What `convert` recorded of a dataset's NumPy source (`metadata.datasets[name].attrs`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NumpySource {
    /// `numpy_dtype`: the source's descr, when `.tet` stores it as another type.
    pub dtype: Option<String>,
    /// `numpy_shape` was `[]`: the source was 0-d (stored as `[1]`).
    pub scalar: bool,
}

/// Reads [`NumpySource`] from a footer's metadata.
pub fn numpy_source(meta: Option<&serde_json::Value>, dataset: &str) -> NumpySource {
    let attrs = meta
        .and_then(|m| m.get("datasets"))
        .and_then(|d| d.get(dataset))
        .and_then(|d| d.get("attrs"));
    let get = |k: &str| attrs.and_then(|a| a.get(k)).and_then(|v| v.as_str());
    NumpySource {
        dtype: get("numpy_dtype").map(str::to_string),
        scalar: get("numpy_shape") == Some("[]"),
    }
}

type Restored = (String, Vec<u64>, Vec<u8>);

/// The values as the source had them: `bool` from `u8` 0/1, `int8` from `i16`, a 0-d
/// array from its one element; where that cannot be done, the values as stored and why.
pub fn restore(
    dtype: tet_core::tet::DType,
    shape: Vec<u64>,
    values: Vec<u8>,
    src: &NumpySource,
) -> (Restored, Option<String>) {
    use tet_core::tet::DType;
    let mut descr = crate::tet::npy::descr(dtype).to_string();
    let mut bytes = values;
    match (src.dtype.as_deref().and_then(|d| d.get(1..)), dtype) {
        (Some("b1"), DType::U8) => {
            if let Some(i) = bytes.iter().position(|b| *b > 1) {
                let v = bytes.get(i).copied().unwrap_or(0);
                let why = format!(
                    "the source was bool, but element {i} is {v}, not 0 or 1: written as u8"
                );
                return ((descr, shape, bytes), Some(why));
            }
            descr = "|b1".into();
        }
        (Some("i1"), DType::I16) => {
            let wide: Vec<i16> = bytes
                .chunks_exact(2)
                .map(|c| {
                    i16::from_le_bytes([
                        c.first().copied().unwrap_or(0),
                        c.get(1).copied().unwrap_or(0),
                    ])
                })
                .collect();
            let mut narrow = Vec::with_capacity(wide.len());
            for (i, v) in wide.iter().enumerate() {
                match i8::try_from(*v) {
                    Ok(n) => narrow.extend_from_slice(&n.to_le_bytes()),
                    Err(_) => {
                        let why = format!(
                            "the source was int8, but element {i} is {v}, outside int8: \
                             written as i16"
                        );
                        return ((descr, shape, bytes), Some(why));
                    }
                }
            }
            bytes = narrow;
            descr = "|i1".into();
        }
        // datetime64/timedelta64: the int64 counts as stored, under their own dtype.
        (Some(k), DType::I64) if k.starts_with("M8[") || k.starts_with("m8[") => {
            descr = format!("<{k}");
        }
        (Some("b1" | "i1"), _) => {
            let why = format!(
                "the source was {}, but the dataset is {}: written as stored",
                src.dtype.as_deref().unwrap_or_default(),
                dtype.name()
            );
            return ((descr, shape, bytes), Some(why));
        }
        _ => {}
    }
    if src.scalar && shape != [1] {
        let why = format!(
            "the source was 0-d, but this selection has shape {shape:?}: written with that shape"
        );
        return ((descr, shape, bytes), Some(why));
    }
    let shape = if src.scalar { Vec::new() } else { shape };
    ((descr, shape, bytes), None)
}
