//! `tet-host export`: a dataset, or a selection of it, to a NumPy `.npy` file.

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
                let a: serde_json::Map<String, serde_json::Value> = cm
                    .attrs
                    .iter()
                    .map(|(k, v)| (k.clone(), json!(v)))
                    .collect();
                entry.insert("attrs".into(), serde_json::Value::Object(a));
            }
        }
        coords.insert(key, serde_json::Value::Object(entry));
    }
    let attrs: serde_json::Map<String, serde_json::Value> = dm
        .attrs
        .iter()
        .map(|(k, v)| (k.clone(), json!(v)))
        .collect();
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
    // Progress over the bytes decoded (standard error, terminal only).
    let bar = crate::progress::progress_bar(true, p.decode_bytes);
    let selected = crate::tet::query::select_values(&file, &p, budget, bar.as_ref());
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    let values = match selected {
        Ok(v) => v,
        Err(e) => return crate::tet::query::fail_reading(path, &ds, &e, source),
    };
    let shape: Vec<u64> = p.selection.shape().as_slice().to_vec();
    let source = match tet_alloc::tet::history::metadata(&file) {
        Ok(m) => numpy_source(m.as_ref(), dataset),
        Err(e) => {
            eprintln!(
                "tet-host: {}: warning: the footer metadata is unreadable ({e}), so the \
                 source's NumPy dtype and shape are unknown: written as stored",
                path.display()
            );
            NumpySource::default()
        }
    };
    let ((descr, shape, values), why) = restore(ds.dtype(), shape, values, &source);
    if let Some(why) = why {
        eprintln!("tet-host: {}: warning: {why}", path.display());
    }
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
    if let Err(e) = crate::tet::npy::write_descr(out, &descr, &shape, &values) {
        crate::say!("cannot write {}: {e}", out.display());
        return Exit::Operational;
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
    if ours && std::fs::remove_file(target).is_ok() {
        eprintln!(
            "tet-host: {}: removed {}, an earlier export's coordinates that no longer \
             describe {dataset:?} (--coords writes them anew)",
            input.display(),
            target.display()
        );
    } else {
        eprintln!(
            "tet-host: {}: warning: {} is left as it was; it does not describe this export",
            input.display(),
            target.display()
        );
    }
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
