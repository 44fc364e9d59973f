//! `tet-host transform`: an element-wise transform of one dataset (`zscore`, `minmax`,
//! `center`, `scale`, `log1p`, `sqrt`, `clip`; `tet_alloc::tet::transform`) written to a
//! new `.tet` file chunk by chunk. The statistics the transform needs are folded first on
//! every core (bit-identical for any `-j`); then batches of chunks are decoded, mapped and
//! compressed on every core and written in grid order, so the output does not depend on
//! `-j`. The output keeps the dataset's name, shape, chunking, each chunk's codec, its
//! dims, coordinates (coordinate datasets are copied as stored) and attrs, the source's
//! history, and adds one history row naming the transform, its parameters and the source.

// `QueryError` carries a located decode error by value, as the libraries do.
#![allow(clippy::result_large_err)]

use std::path::Path;

use crate::tet::query::run;
use rayon::prelude::*;
use tet_alloc::tet::append::Base;
use tet_alloc::tet::decode::ChunkDecoder;
use tet_alloc::tet::meta::{Coord, Metadata};
use tet_alloc::tet::query::{decode_part, plan, Axes, Operation, QueryError};
use tet_alloc::tet::transform::{Funcs, Map, Stats, Transform};
use tet_alloc::tet::writer::{interop, Compressor, DatasetSpec, FooterSpec, HistoryRow, Writer};
use tet_core::tet::{Codec, DatasetId};

use crate::atomic::{AtomicFile, RealFs};
use crate::tet::codec::{CCompressor, CZstd};
use crate::Exit;

/// Options of `tet-host transform`.
#[derive(Clone, Debug)]
pub struct TransformOptions {
    /// The dataset.
    pub dataset: String,
    /// The transform, its parameters parsed.
    pub transform: Transform,
    /// Threads (default: one per core).
    pub threads: Option<usize>,
    /// Memory budget override.
    pub budget: Option<u64>,
    /// zstd level of the chunks written as zstd.
    pub level: i32,
    /// Replace the output when it exists (never when it is the input).
    pub force: bool,
}

/// The platform's `log1p` and `sqrt` (the C library's, as NumPy's `float64` loops use).
pub const STD_FUNCS: Funcs = Funcs {
    log1p: f64::ln_1p,
    sqrt: f64::sqrt,
};

/// One chunk mapped: grid coordinates, codec, raw length, stored bytes.
type Mapped = (Vec<u64>, Codec, u64, Vec<u8>);

/// Why mapping a chunk stopped.
enum Step {
    Read(QueryError),
    Compress(tet_core::Error),
}

/// Chunks mapped per thread in one batch.
const PER_THREAD: usize = 4;

/// `tet-host transform FILE OUT --dataset NAME --op OP`.
pub fn transform(path: &Path, bytes: &[u8], out: &Path, o: &TransformOptions) -> Exit {
    if let Err(e) = crate::atomic::check_output(out, &[path], o.force) {
        return e;
    }
    let file = match crate::tet::open_tet(path, bytes) {
        Ok(f) => f,
        Err(e) => return e,
    };
    let Ok(ds) = file.dataset(&o.dataset) else {
        return crate::tet::no_dataset(path, &file, &o.dataset);
    };
    let base = match Base::open::<std::io::Error>(bytes) {
        Ok(b) => b,
        Err(e) => {
            crate::say!("{}: {e}", path.display());
            return Exit::Problems;
        }
    };
    let source = crate::tet::query::budget_source(None, o.budget);
    let budget = crate::tet::budget_for(&file, None, o.budget);
    let threads = o.threads.unwrap_or_else(rayon::current_num_threads).max(1);
    let p = match plan(&file, ds, &[]) {
        Ok(p) => p,
        Err(e) => {
            crate::say!("{}: {e}", path.display());
            return Exit::of(e.category());
        }
    };
    let t = o.transform;
    // The statistics, folded on every core.
    let mut stats = Stats::default();
    let axes = match Axes::new(ds.ndim(), None) {
        Ok(a) => a,
        Err(e) => return crate::tet::query::fail_reading(path, &ds, &e, source),
    };
    for (slot, r) in stats.values.iter_mut().zip(t.needs()) {
        match run(&file, &p, Operation::Reduce(*r), &axes, threads, budget) {
            Ok(out) => *slot = out.values.first().copied(),
            Err(e) => return crate::tet::query::fail_reading(path, &ds, &e, source),
        }
    }
    let map = match Map::new(t, ds.dtype(), &stats, STD_FUNCS) {
        Ok(m) => m,
        Err(e) => {
            crate::say!("{}: {} of {}: {e}", path.display(), t.name(), ds.name());
            return Exit::Usage;
        }
    };
    let params = map.params();
    let degenerate = match t {
        Transform::ZScore => params.iter().any(|(k, v)| k == "std" && v == "0.0"),
        Transform::MinMax => params.iter().any(|(k, v)| k == "range" && v == "0.0"),
        _ => false,
    };
    if degenerate {
        crate::errln!(
            "tet-host: {}: warning: {} of a constant dataset divides by zero: the output is \
             NaN (0/0) where NumPy's is too",
            path.display(),
            t.name()
        );
    }
    // What the output declares: the transformed dataset, then the coordinate datasets
    // its metadata names (copied as stored).
    let meta = match tet_alloc::tet::meta::read(&file) {
        Ok(m) => m.unwrap_or_default(),
        Err(e) => {
            crate::say!("{}: footer metadata: {}", path.display(), e.message);
            return Exit::Problems;
        }
    };
    let mut dmeta = meta.dataset(ds.name()).cloned().unwrap_or_default();
    let coord_names: Vec<String> = dmeta
        .coords
        .iter()
        .filter_map(|(_, c)| match c {
            Coord::Dataset(d) if d != ds.name() => Some(d.clone()),
            _ => None,
        })
        .fold(Vec::new(), |mut v, d| {
            if !v.contains(&d) {
                v.push(d);
            }
            v
        });
    let mut dropped = Vec::new();
    dmeta.attrs.retain(|(k, _)| {
        // The stored type's NumPy record no longer applies to a new type; a missing-value
        // marker would mark the images of other elements (marked ones are mapped too).
        let stale = (k == "numpy_dtype" && map.out_dtype() != ds.dtype())
            || tet_alloc::tet::decode::MARKER_KEYS.contains(&k.as_str());
        if stale {
            dropped.push(k.clone());
        }
        !stale
    });
    if !dropped.is_empty() {
        crate::errln!(
            "tet-host: {}: warning: attrs {} not kept: the transform maps every element, \
             marked ones too",
            path.display(),
            dropped.join(", ")
        );
    }
    let mut out_meta = Metadata {
        file: meta.file.clone(),
        datasets: vec![(ds.name().to_string(), dmeta)],
        // The source's group attributes describe the file the dataset came from.
        groups: meta.groups.clone(),
    };
    for c in &coord_names {
        if let Some(m) = meta.dataset(c) {
            out_meta.datasets.push((c.clone(), m.clone()));
        }
    }
    let shape: Vec<u64> = ds.shape().collect();
    let chunk: Vec<u64> = ds.chunk_shape().collect();
    let mut coords = Vec::new();
    for c in &coord_names {
        match file.dataset(c) {
            Ok(d) => coords.push((
                d,
                d.shape().collect::<Vec<u64>>(),
                d.chunk_shape().collect::<Vec<u64>>(),
            )),
            Err(_) => {
                crate::say!(
                    "{}: the coordinate dataset {c:?} is missing",
                    path.display()
                );
                return Exit::Problems;
            }
        }
    }
    let mut specs = vec![DatasetSpec {
        name: ds.name(),
        dtype: map.out_dtype(),
        shape: &shape,
        chunk_shape: &chunk,
    }];
    for (d, s, c) in &coords {
        specs.push(DatasetSpec {
            name: d.name(),
            dtype: d.dtype(),
            shape: s,
            chunk_shape: c,
        });
    }
    let target = match AtomicFile::create(out, RealFs) {
        Ok(f) => f,
        Err(e) => {
            crate::say!("cannot create a file beside {}: {e}", out.display());
            return Exit::Operational;
        }
    };
    let mut w = match Writer::new(target, &specs) {
        Ok(w) => w,
        Err(e) => {
            crate::say!("{}: {e}", out.display());
            return Exit::Operational;
        }
    };
    // Batches of chunks: decoded, mapped and compressed on every thread, written in grid
    // order. In flight per chunk: the decoded tile, its image and a frame.
    let largest = crate::tet::query::largest_chunk(&file, &p);
    let probe = ChunkDecoder::new(CZstd::new(), budget);
    let per_chunk = probe.memory_needed(largest).saturating_add(
        u64::try_from(map.out_len(usize::try_from(largest).unwrap_or(0)))
            .unwrap_or(0)
            .saturating_mul(2),
    );
    let fit = budget
        .checked_div(per_chunk.max(1))
        .and_then(|n| usize::try_from(n).ok())
        .unwrap_or(1)
        .max(1);
    let threads = threads.min(fit).max(1);
    let batch = threads.saturating_mul(PER_THREAD).min(fit).max(1);
    let pool = match rayon::ThreadPoolBuilder::new().num_threads(threads).build() {
        Ok(p) => p,
        Err(e) => {
            crate::say!("cannot start {threads} threads: {e}");
            return Exit::Operational;
        }
    };
    let bar = crate::progress::progress_bar(true, p.read_bytes);
    let indices: Vec<usize> = (0..p.parts.len()).collect();
    let level = o.level;
    for group in indices.chunks(batch) {
        let mapped: Result<Vec<Mapped>, Step> = pool.install(|| {
            group
                .par_iter()
                .map_init(
                    || {
                        (
                            ChunkDecoder::new(CZstd::new(), budget),
                            CCompressor::new(level),
                        )
                    },
                    |(dec, cc), &i| {
                        let codec = p
                            .rows
                            .get(i)
                            .and_then(|r| file.rows().get(usize::try_from(*r).ok()?))
                            .and_then(|r| Codec::from_wire(r.codec.get()))
                            .unwrap_or(Codec::Raw);
                        let tile = decode_part(&file, &p, i, dec).map_err(Step::Read)?;
                        let mut image = Vec::new();
                        map.apply(tile, &mut image);
                        let raw_len = u64::try_from(image.len()).unwrap_or(u64::MAX);
                        let coords = p
                            .parts
                            .get(i)
                            .map(|part| part.coords.as_slice().to_vec())
                            .unwrap_or_default();
                        if codec == Codec::Zstd {
                            let mut frame = Vec::new();
                            cc.compress(&image, &mut frame).map_err(Step::Compress)?;
                            Ok((coords, Codec::Zstd, raw_len, frame))
                        } else {
                            Ok((coords, Codec::Raw, raw_len, image))
                        }
                    },
                )
                .collect()
        });
        let mapped = match mapped {
            Ok(m) => m,
            Err(e) => {
                if let Some(b) = &bar {
                    b.finish_and_clear();
                }
                return match e {
                    Step::Read(e) => crate::tet::query::fail_reading(path, &ds, &e, source),
                    Step::Compress(e) => {
                        crate::say!("{}: {e}", out.display());
                        Exit::Operational
                    }
                };
            }
        };
        for (coords, codec, raw_len, stored) in &mapped {
            if let Err(e) = w.write_chunk_encoded(DatasetId(0), coords, *codec, *raw_len, stored) {
                crate::say!("{}: {e}", out.display());
                return Exit::Operational;
            }
        }
        if let Some(b) = &bar {
            for &i in group {
                let n = p
                    .rows
                    .get(i)
                    .and_then(|r| file.rows().get(usize::try_from(*r).ok()?))
                    .map_or(0, |r| r.stored_byte_len.get());
                b.inc(n);
            }
        }
    }
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    // Coordinate datasets: every chunk's stored bytes as they are.
    if let Err(e) = copy_coords(&file, &coords, &mut w) {
        crate::say!("{}: {e}", path.display());
        return Exit::Problems;
    }
    let mut row_params = vec![
        ("transform".to_string(), t.name().to_string()),
        ("dataset".to_string(), ds.name().to_string()),
        ("source_dataset".to_string(), ds.name().to_string()),
        ("source_dtype".to_string(), ds.dtype().name().to_string()),
        ("dtype".to_string(), map.out_dtype().name().to_string()),
    ];
    row_params.extend(params);
    let row = HistoryRow {
        op: "transform".into(),
        source: interop::clip(&path.display().to_string()).to_string(),
        at: super::now_rfc3339(),
        params: row_params,
    };
    let mut history = base.history().to_vec();
    history.push(row);
    let footer = FooterSpec {
        history,
        metadata: Some(serde_json::Value::Object(out_meta.to_json()).to_string()),
    };
    match w.finish(Some(&footer)).map(|f| f.commit()) {
        Ok(Ok(())) => Exit::Clean,
        Ok(Err(e)) => {
            crate::say!("{}: {e}", out.display());
            Exit::Operational
        }
        Err(e) => {
            crate::say!("{}: {e}", out.display());
            Exit::Operational
        }
    }
}

/// Copies the chunks of the coordinate datasets `coords` (ids 1 .. in the output) as
/// they are stored.
fn copy_coords<O: tet_alloc::tet::writer::Output>(
    file: &tet_core::tet::TetFile<'_>,
    coords: &[(tet_core::tet::Dataset<'_>, Vec<u64>, Vec<u64>)],
    w: &mut Writer<O>,
) -> Result<(), String>
where
    O::Error: std::fmt::Display,
{
    for (k, (d, _, _)) in coords.iter().enumerate() {
        let id = DatasetId(u32::try_from(k.saturating_add(1)).unwrap_or(u32::MAX));
        let p = plan(file, *d, &[]).map_err(|e| format!("coordinate {:?}: {e}", d.name()))?;
        for (part, row) in p.parts.iter().zip(&p.rows) {
            let raw = file
                .rows()
                .get(usize::try_from(*row).unwrap_or(usize::MAX))
                .ok_or_else(|| {
                    format!(
                        "coordinate {:?}: chunk {} has no row",
                        d.name(),
                        part.coords
                    )
                })?;
            let c = file
                .checked_chunk(d, *row, raw)
                .map_err(|e| format!("coordinate {:?} chunk {}: {e}", d.name(), part.coords))?;
            let codec = if c.codec == Codec::Raw {
                Codec::Raw
            } else {
                Codec::Zstd
            };
            w.write_chunk_encoded(id, part.coords.as_slice(), codec, c.raw_byte_len, c.payload)
                .map_err(|e| format!("{e}"))?;
        }
    }
    Ok(())
}
