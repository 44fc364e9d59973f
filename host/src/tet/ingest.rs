//! What every foreign input of `convert` shares (a Zarr store, a NetCDF or HDF5 file):
//! the chunk plan and its limits, the footer metadata's common parts (the file record,
//! `--dims`, `--attr`), the metadata check before any data is written, and the batched
//! write loop with its progress bar and history row. Each input module describes its
//! arrays and reads tiles; this module turns them into a `.tet` file, atomically.

use std::path::Path;

use tet_alloc::tet::meta::{FileInfo, Metadata, Problem};
use tet_alloc::tet::writer::{interop, DatasetSpec, FooterSpec, HistoryRow, Writer};
use tet_core::tet::{DType, DatasetId};

use crate::atomic::{AtomicFile, RealFs};
use crate::tet::convert::ConvertOptions;
use crate::tet::write::{write_pieces, Payload, Piece};
use crate::Exit;

/// The largest tile read at once, in bytes.
pub(crate) const MAX_TILE: u64 = 1 << 30;
/// The most chunks one dataset may have.
pub(crate) const MAX_CHUNKS: u64 = 1 << 26;
/// Tiles read, then compressed on every core, per batch.
const BATCH_CELLS: u64 = 16;

/// Why a conversion stopped: its exit status and what to say (nothing when it was said).
pub(crate) struct Fail(pub Exit, pub String);

impl Fail {
    /// The input is damaged (exit 4).
    pub(crate) fn damaged(msg: String) -> Self {
        Fail(Exit::Problems, msg)
    }
    /// The command cannot do what it was asked (exit 16).
    pub(crate) fn usage(msg: String) -> Self {
        Fail(Exit::Usage, msg)
    }
    /// The system failed (exit 8).
    pub(crate) fn operational(msg: String) -> Self {
        Fail(Exit::Operational, msg)
    }
}

/// Runs a conversion and turns its outcome into the exit status, saying why it stopped.
pub(crate) fn finish(outcome: Result<(), Fail>) -> Exit {
    match outcome {
        Ok(()) => Exit::Clean,
        Err(Fail(exit, msg)) => {
            if !msg.is_empty() {
                crate::say!("{msg}");
            }
            exit
        }
    }
}

/// The checks before anything is read: the output may be written (refused when it
/// exists without `--force`, or is the input), and the options for `.npy` inputs only
/// are not given. `kind` names the input in the refusal ("a Zarr store's arrays").
pub(crate) fn check_start(
    input: &Path,
    output: &Path,
    o: &ConvertOptions,
    kind: &str,
) -> Result<(), Fail> {
    if let Err(e) = crate::atomic::check_output(output, &[input], o.force) {
        // check_output has said why.
        return Err(Fail(e, String::new()));
    }
    if o.name.is_some() || !o.meta.coords.is_empty() || !o.meta.labels.is_empty() {
        return Err(Fail::usage(format!(
            "--name, --coord and --labels are for .npy/.npz inputs; {kind} keep their \
             names, dimensions and coordinates"
        )));
    }
    Ok(())
}

/// One array to write: its dataset name, type, shape and `.tet` chunk shape.
pub(crate) struct Planned<'a> {
    pub name: &'a str,
    pub dtype: DType,
    pub shape: &'a [u64],
    pub chunk: Vec<u64>,
}

fn product(v: &[u64]) -> Option<u64> {
    v.iter().try_fold(1u64, |a, b| a.checked_mul(*b))
}

/// The grid of `chunk` over `shape`: chunks per axis, as the writer counts them (an
/// empty axis has none, so an empty array writes no chunk).
fn grid(shape: &[u64], chunk: &[u64]) -> Vec<u64> {
    shape
        .iter()
        .zip(chunk)
        .map(|(n, k)| n.div_ceil((*k).max(1)))
        .collect()
}

/// The `.tet` chunk shape of array `name`: `--chunk` when given and of its rank, else the
/// source's own chunk shape (`native`), else about 1 MiB per chunk; clipped to the array (a tile never
/// exceeds it). Refused when a tile would pass [`MAX_TILE`] bytes or the grid
/// [`MAX_CHUNKS`] chunks. `what` names the source's kind of array ("variable").
pub(crate) fn chunk_of(
    input: &Path,
    what: &str,
    name: &str,
    shape: &[u64],
    dtype: DType,
    given: Option<&[u64]>,
    native: Option<&[u64]>,
) -> Result<Vec<u64>, Fail> {
    // A --chunk of another rank is for other arrays (a CF file's 1-D coordinates keep
    // theirs); [`check_chunk_rank`] refuses one that fits none.
    let given = given.filter(|c| c.len() == shape.len());
    let chunk = match (given, native) {
        (Some(c), _) => c.to_vec(),
        (None, Some(c)) if c.len() == shape.len() => c.to_vec(),
        (None, _) => crate::tet::npy::default_chunk(shape, dtype.size()),
    };
    let chunk: Vec<u64> = chunk
        .iter()
        .zip(shape)
        .map(|(k, n)| (*k).min((*n).max(1)).max(1))
        .collect();
    let tile_bytes = product(&chunk).and_then(|n| n.checked_mul(dtype.size()));
    if tile_bytes.is_none_or(|b| b > MAX_TILE) {
        return Err(Fail::usage(format!(
            "{}: {what} '{name}': a chunk of shape {chunk:?} is over the {MAX_TILE}-byte \
             limit of one tile (give a smaller --chunk)",
            input.display()
        )));
    }
    if product(&grid(shape, &chunk)).is_none_or(|c| c > MAX_CHUNKS) {
        return Err(Fail::usage(format!(
            "{}: {what} '{name}': shape {shape:?} in chunks of {chunk:?} is over \
             {MAX_CHUNKS} chunks",
            input.display()
        )));
    }
    Ok(chunk)
}

/// Adds attribute `key` = `text` of `what` `name` to `attrs`. CF allows several missing
/// values in a list, and every one marks (as xarray masks them): the list is kept as
/// `missing_value_list`, which the markers read ([`tet_alloc::tet::decode::cf_markers`]),
/// and its first value as `missing_value`, for a reader that takes one number (said on
/// standard error). Kept so, a list of more than
/// [`tet_alloc::tet::decode::MAX_MISSING_VALUES`] values is refused (exit 16), naming
/// the attribute; with `unpack` (`--unpack` decodes it, with every value) any length is
/// taken. (A Zarr store's list stays JSON, as `export` gives it back.)
#[cfg(any(feature = "netcdf", feature = "hdf5"))]
pub(crate) fn push_attr(
    attrs: &mut Vec<(String, String)>,
    key: String,
    text: String,
    input: &Path,
    what: &str,
    name: &str,
    unpack: bool,
) -> Result<(), Fail> {
    use tet_alloc::tet::decode::{marker_texts, MAX_MISSING_VALUES};
    if key != "missing_value" || !text.starts_with('[') {
        // A value over what `.tet` metadata holds (a long `comment`) is left out, named,
        // as a group's is; the markers and packing never are (they are numbers).
        let limit = tet_alloc::tet::meta::MAX_STRING;
        if key.len() > limit || text.len() > limit {
            crate::errln!(
                "tet-host: {}: {what} '{name}': attribute '{key}' ({} bytes) is longer than \
                 the {limit} bytes .tet metadata holds; not kept",
                input.display(),
                key.len().max(text.len())
            );
            return Ok(());
        }
        attrs.push((key, text));
        return Ok(());
    }
    let values: Vec<String> = marker_texts(&key, &text).map(str::to_string).collect();
    let mut distinct: Vec<&str> = values.iter().map(String::as_str).collect();
    distinct.sort_unstable();
    distinct.dedup();
    if distinct.len() > MAX_MISSING_VALUES && !unpack {
        return Err(Fail::usage(format!(
            "{}: {what} '{name}': attribute missing_value holds {} distinct values, more \
             than the {MAX_MISSING_VALUES} (besides _FillValue) .tet marks missing elements \
             with (--unpack decodes them all to NaN){SKIP_HINT}",
            input.display(),
            distinct.len()
        )));
    }
    let Some(first) = values.first().cloned() else {
        // An empty list marks nothing: kept as it is.
        attrs.push((key, text));
        return Ok(());
    };
    // Said by [`say_lists`] once `--unpack` has or has not decoded it.
    attrs.push(("missing_value_list".into(), text));
    attrs.push((key, first));
    Ok(())
}

/// Says on standard error what became of each `missing_value` list of `what` `name`
/// ([`push_attr`]): kept as `missing_value_list` with its first value as
/// `missing_value`, or decoded to NaN by `--unpack` (in [`DECODED_KEY`]).
#[cfg(any(feature = "netcdf", feature = "hdf5"))]
fn say_lists(input: &Path, what: &str, a: &LibArray) {
    let list = |attrs: &[(String, String)]| {
        attrs
            .iter()
            .find(|(k, _)| k == "missing_value_list")
            .map(|(_, v)| v.clone())
    };
    let decoded = a
        .attrs
        .iter()
        .find(|(k, _)| k == DECODED_KEY)
        .and_then(|(_, v)| serde_json::from_str::<serde_json::Value>(v).ok())
        .and_then(|j| Some(j.get("missing_value_list")?.as_str()?.to_string()));
    if let Some(l) = list(&a.attrs) {
        crate::errln!(
            "tet-host: {}: {what} '{}': missing_value holds {l}; each value marks missing \
             elements (the list is kept as missing_value_list, its first value as \
             missing_value)",
            input.display(),
            a.name
        );
    } else if let Some(l) = decoded {
        crate::errln!(
            "tet-host: {}: {what} '{}': missing_value holds {l}; --unpack made every \
             element equal to one of them NaN",
            input.display(),
            a.name
        );
    }
}

/// How a refusal of an array of an unsupported kind ends; left out where the array is
/// listed as skipped ([`skip_reason`]).
#[cfg(any(feature = "netcdf", feature = "hdf5"))]
pub(crate) const SKIP_HINT: &str = "; give --skip-unsupported to convert the others";

/// A refusal as the list of skipped arrays gives it: without [`SKIP_HINT`].
#[cfg(any(feature = "netcdf", feature = "hdf5"))]
pub(crate) fn skip_reason(why: String) -> String {
    match why.strip_suffix(SKIP_HINT) {
        Some(r) => r.to_string(),
        None => why,
    }
}

/// Refuses an array of a rank `.tet` cannot hold (more than [`tet_core::tet::MAX_NDIM`]
/// axes; a scalar is stored as one element, [`scalar_shape`]) as unsupported (exit 16,
/// which `--skip-unsupported` skips), naming it.
#[cfg(any(feature = "netcdf", feature = "hdf5"))]
pub(crate) fn check_rank(input: &Path, what: &str, name: &str, rank: usize) -> Result<(), Fail> {
    if rank > tet_core::tet::MAX_NDIM {
        return Err(Fail::usage(format!(
            "{}: {what} '{name}' has {rank} axes, more than .tet's {}{SKIP_HINT}",
            input.display(),
            tet_core::tet::MAX_NDIM
        )));
    }
    Ok(())
}

/// After an input's arrays are found: lists those skipped on standard error, refuses an
/// input with nothing to convert, and gives the history row's extra parameters (how many
/// were skipped, and decoded with `--unpack`).
#[cfg(any(feature = "netcdf", feature = "hdf5"))]
fn after_walk(
    input: &Path,
    found: usize,
    skipped: &[String],
    decoded: usize,
    noun: &str,
) -> Result<Vec<(String, String)>, Fail> {
    for why in skipped {
        crate::errln!("tet-host: skipped: {why}");
    }
    if found == 0 && !skipped.is_empty() {
        return Err(Fail::usage(format!(
            "{}: nothing left to convert: of its {noun}, {} skipped (listed above) and none \
             converted",
            input.display(),
            skipped.len()
        )));
    }
    if found == 0 {
        return Err(Fail::usage(format!(
            "{}: no numeric {noun} to convert",
            input.display()
        )));
    }
    let mut extra = Vec::new();
    if !skipped.is_empty() {
        extra.push(("skipped".into(), skipped.len().to_string()));
    }
    if decoded > 0 {
        extra.push(("unpacked".into(), decoded.to_string()));
    }
    Ok(extra)
}

/// The attributes CF decoding consumes.
#[cfg(any(feature = "netcdf", feature = "hdf5"))]
const CF_KEYS: [&str; 5] = [
    "scale_factor",
    "add_offset",
    "_FillValue",
    "missing_value",
    "missing_value_list",
];

/// The attribute keeping the CF attributes `--unpack` decoded (the library's: `query`
/// reads it for its `null_count` hint in every build).
#[cfg(any(feature = "netcdf", feature = "hdf5"))]
pub(crate) use crate::tet::dims::DECODED_KEY;

/// How `--unpack` decodes one array: its stored type and the decoding.
#[cfg(any(feature = "netcdf", feature = "hdf5"))]
pub(crate) struct Decoding {
    stored: DType,
    cf: tet_alloc::tet::decode::CfDecode,
}

#[cfg(any(feature = "netcdf", feature = "hdf5"))]
impl Decoding {
    /// The array's `.tet` type once decoded.
    fn dtype(&self) -> DType {
        self.cf.to
    }

    /// Decodes one tile of stored elements.
    fn apply(&self, tile: &[u8]) -> Vec<u8> {
        let mut scratch = Vec::new();
        let mut out = Vec::new();
        self.cf.apply(tile, self.stored, &mut scratch, &mut out);
        out
    }
}

/// With `--unpack`: the decoding of `what` `name`, stored as `stored` with its
/// `scale_factor`/`add_offset` written as `packed_as`, and its CF attributes moved out of
/// `attrs` into [`DECODED_KEY`]; `None` when there is nothing to decode. A CF attribute
/// that is not a number is the file's damage (exit 4).
#[cfg(any(feature = "netcdf", feature = "hdf5"))]
fn unpacking(
    input: &Path,
    what: &str,
    name: &str,
    stored: DType,
    packed_as: Option<DType>,
    attrs: &mut Vec<(String, String)>,
) -> Result<Option<Decoding>, Fail> {
    let lookup = |k: &str| {
        attrs
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.as_str())
    };
    let cf = tet_alloc::tet::decode::CfDecode::of(stored, lookup, packed_as)
        .map_err(|e| Fail::damaged(format!("{}: {what} '{name}': {e}", input.display())))?;
    let Some(cf) = cf else { return Ok(None) };
    let mut decoded = serde_json::Map::new();
    attrs.retain(|(k, v)| {
        let cf_key = CF_KEYS.contains(&k.as_str());
        if cf_key {
            decoded.insert(k.clone(), serde_json::Value::String(v.clone()));
        }
        !cf_key
    });
    // A list too long for the metadata is decoded whole and kept as its length.
    let limit = tet_alloc::tet::meta::MAX_STRING;
    let mut text = serde_json::Value::Object(decoded.clone()).to_string();
    if text.len() > limit {
        let n = decoded
            .get("missing_value_list")
            .and_then(serde_json::Value::as_str)
            .map_or(0, |l| {
                tet_alloc::tet::decode::marker_texts("missing_value", l).count()
            });
        decoded.insert(
            "missing_value_list".into(),
            serde_json::Value::String(format!("{n} values (too long to keep)")),
        );
        text = serde_json::Value::Object(decoded).to_string();
        crate::errln!(
            "tet-host: {}: {what} '{name}': its missing_value list of {n} values, all \
             decoded, is too long for {DECODED_KEY}, which keeps its length",
            input.display()
        );
    }
    if text.len() <= limit {
        attrs.push((DECODED_KEY.into(), text));
    }
    Ok(Some(Decoding { stored, cf }))
}

/// Refuses a `--chunk` that no array of the input has the rank of (each array of its rank
/// takes it, the others keep their own chunking).
pub(crate) fn check_chunk_rank(
    o: &ConvertOptions,
    ranks: &[usize],
    whats: &str,
) -> Result<(), Fail> {
    match &o.chunk {
        Some(c) if !ranks.contains(&c.len()) => Err(Fail::usage(format!(
            "--chunk has {} axes, and none of the {whats} has {} (it applies to the {whats} of its \
             rank)",
            c.len(),
            c.len()
        ))),
        _ => Ok(()),
    }
}

/// Footer metadata with this tool's file record and no datasets yet.
pub(crate) fn new_metadata() -> Metadata {
    Metadata {
        file: Some(FileInfo {
            tool: Some("tet-host".into()),
            library_version: Some(env!("CARGO_PKG_VERSION").into()),
            created_at: Some(super::now_rfc3339()),
        }),
        datasets: Vec::new(),
        groups: Vec::new(),
    }
}

/// Applies `--dims` and `--attr` (each `[DATASET:]...`) to `m`, over the arrays `(name,
/// rank)`: without a dataset, `--dims` names the axes of every array of its rank and
/// `--attr` sets the attribute on every array. `missing` ends the refusal of a dataset
/// that is not there ("in the store").
pub(crate) fn apply_options(
    m: &mut Metadata,
    arrays: &[(&str, usize)],
    o: &ConvertOptions,
    what: &str,
    missing: &str,
) -> Result<(), String> {
    let pick = |ds: Option<&str>, option: &str| -> Result<Vec<String>, String> {
        match ds {
            None => Ok(arrays.iter().map(|(n, _)| (*n).to_string()).collect()),
            Some(d) if arrays.iter().any(|(n, _)| *n == d) => Ok(vec![d.to_string()]),
            Some(d) => Err(format!("{option}: no {what} '{d}' {missing}")),
        }
    };
    for arg in &o.meta.dims {
        let (ds, list) = crate::tet::convert::target(arg);
        let names: Vec<String> = list.split(',').map(|s| s.trim().to_string()).collect();
        for d in pick(ds, "--dims")? {
            let rank = arrays.iter().find(|(n, _)| *n == d).map(|(_, r)| *r);
            if ds.is_some() || rank == Some(names.len()) {
                m.edit(&d, |e| {
                    // The input's coordinates follow their axes to the new names.
                    if let Some(old) = &e.dim_names {
                        for (dim, _) in &mut e.coords {
                            let axis = old.iter().position(|o| o == dim);
                            if let Some(new) = axis.and_then(|i| names.get(i)) {
                                dim.clone_from(new);
                            }
                        }
                    }
                    e.dim_names = Some(names.clone());
                });
            }
        }
    }
    for arg in &o.meta.attrs {
        let (ds, rest) = crate::tet::convert::target(arg);
        let (k, v) = crate::tet::convert::key_value(rest, "--attr")?;
        for d in pick(ds, "--attr")? {
            m.edit(&d, |e| e.set_attr(k, v));
        }
    }
    Ok(())
}

/// Checks footer metadata `meta` against the datasets it describes before any data is
/// written (the writer checks again when it finishes): the format's rules
/// ([`tet_alloc::tet::meta::check`]) and what the other implementation reads
/// ([`interop::check_metadata`]). A broken rule is said by `explain`. A missing-value
/// marker no element of its dataset's type can equal (`missing_value = 1e20` on an
/// `int16`, which CF files do hold) breaks no rule: it marks nothing, as xarray reads
/// it, and `verify` warns of it. It is kept, and returned to be said as a warning.
pub(crate) fn check_metadata(
    meta: &str,
    specs: &[DatasetSpec<'_>],
    explain: impl Fn(&Problem) -> String,
) -> Result<Vec<Problem>, String> {
    let shape_of = |name: &str| {
        specs
            .iter()
            .find(|d| d.name == name)
            .map(|d| d.shape.to_vec())
    };
    let dtype_of = |name: &str| specs.iter().find(|d| d.name == name).map(|d| d.dtype);
    let m = tet_alloc::tet::meta::parse(meta.as_bytes(), 0).map_err(|e| e.message)?;
    let rules = tet_alloc::tet::meta::check(&m, &shape_of);
    if let Some(p) = rules.first() {
        return Err(explain(p));
    }
    interop::check_metadata(meta).map_err(|e| format!("metadata: {e}"))?;
    // What the typed check adds to the rules: the markers no element can equal.
    Ok(tet_alloc::tet::meta::check_typed(&m, &shape_of, &dtype_of))
}

/// Where the converted arrays came from, for the history row.
pub(crate) struct Provenance<'a> {
    /// The input format (`zarr`, `netcdf`, `hdf5`).
    pub from: &'a str,
    /// Each array's `name:source-type`.
    pub descrs: Vec<String>,
    /// More parameters, after `codec` (`skipped`).
    pub extra: Vec<(String, String)>,
}

/// Writes `arrays` to `output` atomically, with footer metadata `meta` and one history
/// row: every array in turn, its tiles in grid order, [`BATCH_CELLS`] at a time.
/// `read(i, tiles)` gives the payloads of array `i`'s tiles at those grid coordinates:
/// `.tet` little-endian elements clipped to the array, or a zstd frame of them copied
/// from the source and already checked ([`Payload::Frame`]); it may read them in
/// parallel. The batch's elements are then compressed on every core and the batch
/// written on a writer thread while the next batch is read, so memory is two batches of
/// tiles. The history row counts the copied frames
/// (`frames_copied`) when there are any.
pub(crate) fn write(
    input: &Path,
    output: &Path,
    arrays: &[Planned<'_>],
    meta: String,
    provenance: Provenance<'_>,
    o: &ConvertOptions,
    mut read: impl FnMut(usize, &[Vec<u64>]) -> Result<Vec<Payload>, Fail>,
) -> Result<(), Fail> {
    let in_input = |e: String| Fail::usage(format!("{}: {e}", input.display()));
    let in_output = |e: String| Fail::operational(format!("{}: {e}", output.display()));
    let specs: Vec<DatasetSpec<'_>> = arrays
        .iter()
        .map(|a| DatasetSpec {
            name: a.name,
            dtype: a.dtype,
            shape: a.shape,
            chunk_shape: &a.chunk,
        })
        .collect();
    for w in check_metadata(&meta, &specs, ToString::to_string).map_err(in_input)? {
        // A marker the user gave with --attr is a slip, refused as for a .npy input.
        let typed = o.meta.attrs.iter().any(|arg| {
            let (ds, rest) = crate::tet::convert::target(arg);
            let key = rest.split_once('=').map_or(rest, |(k, _)| k).trim();
            ds.is_none_or(|d| d == w.dataset) && w.message.starts_with(&format!("attr {key} = "))
        });
        if typed {
            return Err(in_input(format!(
                "--attr: {} (dataset {:?})",
                w.message, w.dataset
            )));
        }
        crate::errln!(
            "tet-host: {}: warning: '{}': {}; kept as the file has it (it marks no element)",
            input.display(),
            w.dataset,
            w.message
        );
    }
    let out = AtomicFile::create(output, RealFs).map_err(|e| {
        Fail::operational(format!(
            "cannot create a file beside {}: {e}",
            output.display()
        ))
    })?;
    let w = Writer::new(out, &specs).map_err(|e| in_input(e.to_string()))?;
    let total: u64 = arrays
        .iter()
        .filter_map(|a| product(a.shape)?.checked_mul(a.dtype.size()))
        .fold(0u64, u64::saturating_add);
    let bar = crate::progress::progress_bar(true, total);
    // Batches are read here and written on a thread of their own, so that reading the
    // next batch overlaps writing (and compressing) this one: at most two batches are
    // held. `read` stays on this thread (a library input's handles need not be `Send`).
    let (send, receive) = std::sync::mpsc::sync_channel::<Vec<Piece>>(0);
    let (read_outcome, written) = std::thread::scope(|scope| {
        let writer = std::thread::Builder::new()
            .name("tet-host write".into())
            .spawn_scoped(scope, || {
                let mut w = w;
                let mut copied = 0u64;
                for batch in receive {
                    let n = write_pieces(&mut w, &batch, o.codec, o.level)
                        .map_err(|e| in_output(e.to_string()))?;
                    copied = copied.saturating_add(n);
                    if let Some(b) = &bar {
                        b.inc(
                            batch
                                .iter()
                                .map(|(_, _, p)| p.raw_len())
                                .fold(0u64, u64::saturating_add),
                        );
                    }
                }
                Ok::<_, Fail>((w, copied))
            })
            .map_err(|e| Fail::operational(format!("cannot start a writer thread: {e}")));
        let writer = match writer {
            Ok(h) => h,
            Err(e) => return (Err(e), None),
        };
        let read_outcome = read_batches(arrays, &mut read, &send);
        // The writer ends once the last batch is taken (or has stopped on an error).
        drop(send);
        (read_outcome, Some(writer.join()))
    });
    read_outcome?;
    let (w, copied) = match written {
        Some(Ok(outcome)) => outcome?,
        _ => {
            return Err(Fail::operational(format!(
                "{}: the writer thread stopped",
                output.display()
            )))
        }
    };
    let mut params = vec![
        ("from".into(), provenance.from.into()),
        (
            "arrays".into(),
            crate::tet::convert::arrays_param(&provenance.descrs),
        ),
        ("codec".into(), o.codec.name().into()),
    ];
    params.extend(provenance.extra);
    if copied > 0 {
        params.push(("frames_copied".into(), copied.to_string()));
    }
    let footer = FooterSpec {
        history: vec![HistoryRow {
            op: "convert".into(),
            source: interop::clip(&input.display().to_string()).to_string(),
            at: super::now_rfc3339(),
            params,
        }],
        metadata: Some(meta),
    };
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    w.finish(Some(&footer))
        .map_err(|e| in_output(e.to_string()))?
        .commit()
        .map_err(|e| in_output(e.to_string()))
}

/// Reads every array's tiles in grid order, [`BATCH_CELLS`] at a time, and hands each
/// batch to the writer; stops early, without an error, when the writer has stopped (its
/// error is the one to report).
fn read_batches(
    arrays: &[Planned<'_>],
    read: &mut impl FnMut(usize, &[Vec<u64>]) -> Result<Vec<Payload>, Fail>,
    send: &std::sync::mpsc::SyncSender<Vec<Piece>>,
) -> Result<(), Fail> {
    for (i, a) in arrays.iter().enumerate() {
        let grid = grid(a.shape, &a.chunk);
        let cells = product(&grid).unwrap_or(0);
        let id = DatasetId(u32::try_from(i).unwrap_or(u32::MAX));
        let mut first = 0u64;
        while first < cells {
            let last = first.saturating_add(BATCH_CELLS).min(cells);
            let coords: Vec<Vec<u64>> = (first..last)
                .map(|cell| tet_alloc::tet::query::position_coords(&grid, cell))
                .collect();
            let tiles = read(i, &coords)?;
            let batch: Vec<Piece> = coords
                .into_iter()
                .zip(tiles)
                .map(|(c, t)| (id, c, t))
                .collect();
            if send.send(batch).is_err() {
                return Ok(());
            }
            first = last;
        }
    }
    Ok(())
}

/// One array of a NetCDF or HDF5 input: what every library input knows of it.
#[cfg(any(feature = "netcdf", feature = "hdf5"))]
pub(crate) struct LibArray {
    /// The dataset name (`group/variable`).
    pub name: String,
    /// The source type, as the source names it (for the history row).
    pub source_type: &'static str,
    /// The stored `.tet` type.
    pub dtype: DType,
    /// NumPy's descr when `.tet` stores it as another type (`|i1`, `|b1`).
    pub numpy_dtype: Option<&'static str>,
    pub shape: Vec<u64>,
    /// The source's chunk shape, when it is chunked.
    pub chunking: Option<Vec<u64>>,
    pub attrs: Vec<(String, String)>,
    /// The type `scale_factor`/`add_offset` were written in (the type `--unpack` decodes
    /// to).
    pub packed_as: Option<DType>,
    /// How `--unpack` decodes it (set by [`convert_library`]).
    pub decode: Option<Decoding>,
    /// The source's signed integers are stored reinterpreted as unsigned (its
    /// `_Unsigned = "true"`, [`apply_unsigned`]).
    pub unsigned: bool,
    /// The source is a scalar (rank 0), stored as `shape` `[1]` with the attribute
    /// [`SCALAR_KEY`] so that `export` gives back a 0-d array ([`scalar_shape`]).
    pub scalar: bool,
}

#[cfg(any(feature = "netcdf", feature = "hdf5"))]
pub(crate) use crate::tet::dims::SCALAR_KEY;

/// The `.tet` shape of a source array of shape `shape`, and whether it is a scalar: a
/// 0-d array (a CF `crs` grid-mapping variable, a `height` coordinate) is `[1]`, as
/// `.tet` datasets have 1 to 8 axes.
#[cfg(any(feature = "netcdf", feature = "hdf5"))]
pub(crate) fn scalar_shape(shape: Vec<u64>) -> (Vec<u64>, bool) {
    if shape.is_empty() {
        (vec![1], true)
    } else {
        (shape, false)
    }
}

#[cfg(any(feature = "netcdf", feature = "hdf5"))]
impl LibArray {
    /// The `numpy_dtype` attribute to write: none once decoded (floats have no source
    /// type to restore).
    fn numpy_dtype_kept(&self) -> Option<&'static str> {
        self.numpy_dtype.filter(|_| self.decode.is_none())
    }
}

/// One source group's attributes for the footer's `tet_groups`
/// ([`tet_alloc::tet::meta::Metadata::groups`]): its path and its attrs.
pub(crate) type GroupAttrs = (String, Vec<(String, String)>);

/// The entry of group `path` (`/` for the root) of `input` with attributes `attrs`, as
/// `.tet` metadata holds them: a value over the 1024 bytes a reader takes (a long
/// `history`) is left out and named on standard error; `None` when none is left.
pub(crate) fn group_entry(
    input: &Path,
    path: &str,
    attrs: Vec<(String, String)>,
) -> Option<GroupAttrs> {
    let limit = tet_alloc::tet::meta::MAX_STRING;
    if path.len() > limit {
        crate::errln!(
            "tet-host: {}: the attributes of group '{path}' are not kept: its path ({} bytes) \
             is longer than the {limit} bytes .tet metadata holds",
            input.display(),
            path.len()
        );
        return None;
    }
    let most = tet_alloc::tet::meta::MAX_ATTRS;
    if attrs.len() > most {
        crate::errln!(
            "tet-host: {}: group '{path}' has {} attributes; .tet metadata holds {most} a \
             group: the first {most} are kept",
            input.display(),
            attrs.len()
        );
    }
    let kept: Vec<(String, String)> = attrs
        .into_iter()
        .take(most)
        .filter(|(k, v)| {
            let fits = k.len() <= limit && v.len() <= limit && !k.is_empty();
            if !fits {
                crate::errln!(
                    "tet-host: {}: group '{path}': attribute '{k}' ({} bytes) is longer than \
                     the {limit} bytes .tet metadata holds; not kept",
                    input.display(),
                    v.len()
                );
            }
            fits
        })
        .collect();
    (!kept.is_empty()).then(|| (path.to_string(), kept))
}

/// The groups of `groups` that `.tet` metadata holds: the first
/// [`tet_alloc::tet::meta::MAX_DATASETS`] of them, the rest named on standard error.
pub(crate) fn capped_groups(input: &Path, mut groups: Vec<GroupAttrs>) -> Vec<GroupAttrs> {
    let most = tet_alloc::tet::meta::MAX_DATASETS;
    if groups.len() > most {
        crate::errln!(
            "tet-host: {}: {} groups carry attributes; .tet metadata holds {most}: the \
             attributes of the groups after '{}' are not kept",
            input.display(),
            groups.len(),
            groups
                .get(most.saturating_sub(1))
                .map_or("", |g| g.0.as_str())
        );
        groups.truncate(most);
    }
    groups
}

/// The attribute by which NetCDF-3, whose classic formats have no unsigned integer types,
/// says a signed integer variable holds unsigned values (NetCDF's user guide).
#[cfg(any(feature = "netcdf", feature = "hdf5"))]
pub(crate) const UNSIGNED_KEY: &str = "_Unsigned";

/// The unsigned `.tet` type of a signed source integer of `bits` bits.
#[cfg(any(feature = "netcdf", feature = "hdf5"))]
fn unsigned_type(bits: u32) -> Option<DType> {
    match bits {
        8 => Some(DType::U8),
        16 => Some(DType::U16),
        32 => Some(DType::U32),
        64 => Some(DType::U64),
        _ => None,
    }
}

/// A signed integer's decimal `text` as the unsigned integer of its `bits` bits (two's
/// complement: -1 of a byte is 255); a value that is not a signed integer of that width
/// (a fraction, a text, one already unsigned) is given back as it is.
#[cfg(any(feature = "netcdf", feature = "hdf5"))]
fn as_unsigned(text: &str, bits: u32) -> String {
    let (Ok(v), Some(span)) = (text.trim().parse::<i128>(), 1i128.checked_shl(bits.min(64))) else {
        return text.to_string();
    };
    let lowest = span.checked_div(2).map_or(0, |h| h.saturating_neg());
    if (lowest..0).contains(&v) {
        v.saturating_add(span).to_string()
    } else {
        text.to_string()
    }
}

/// NetCDF-3's unsigned integers: when `a`'s attrs say `_Unsigned = "true"` and its source
/// type is a signed integer of `signed_bits` bits (`None`: not a signed integer), its
/// stored bits are kept as the unsigned type of that width (`byte` as `u8`, not widened;
/// `short` as `u16`), as netCDF4-python and xarray read them, and its missing-value
/// markers (`_FillValue`, `missing_value`, a list of them) are reinterpreted the same
/// way, as netCDF4-python does (xarray reinterprets `_FillValue` only); `_Unsigned`
/// leaves `attrs` (the history row counts such arrays). The input's
/// tile reader gives the stored bits unchanged when [`LibArray::unsigned`] is set.
#[cfg(any(feature = "netcdf", feature = "hdf5"))]
pub(crate) fn apply_unsigned(a: &mut LibArray, signed_bits: Option<u32>) {
    let says = a
        .attrs
        .iter()
        // Exactly as netCDF4-python tests it ("true" or "True"; xarray takes "true").
        .any(|(k, v)| k == UNSIGNED_KEY && matches!(v.as_str(), "true" | "True"));
    let Some((bits, to)) = signed_bits.and_then(|b| Some((b, unsigned_type(b)?))) else {
        return;
    };
    if !says {
        return;
    }
    a.dtype = to;
    a.numpy_dtype = None;
    a.unsigned = true;
    a.attrs.retain(|(k, _)| k != UNSIGNED_KEY);
    for (k, v) in a.attrs.iter_mut() {
        if !tet_alloc::tet::decode::MARKER_KEYS.contains(&k.as_str()) {
            continue;
        }
        let items: Vec<String> = tet_alloc::tet::decode::marker_texts(k, v)
            .map(|t| as_unsigned(t, bits))
            .collect();
        *v = if v.trim_start().starts_with('[') && k != "_FillValue" {
            format!("[{}]", items.join(", "))
        } else {
            items.into_iter().next().unwrap_or_default()
        };
    }
}

/// An input's description of one array, around its [`LibArray`].
#[cfg(any(feature = "netcdf", feature = "hdf5"))]
pub(crate) trait LibVar {
    fn array(&self) -> &LibArray;
    fn array_mut(&mut self) -> &mut LibArray;
}

/// How a library input names itself and its arrays.
#[cfg(any(feature = "netcdf", feature = "hdf5"))]
pub(crate) struct LibKind {
    /// The history row's `from` (`netcdf`).
    pub from: &'static str,
    /// One array (`variable`), and several (`variables`).
    pub what: &'static str,
    pub whats: &'static str,
}

/// The rest of a NetCDF or HDF5 conversion once the input's arrays are found: `--unpack`,
/// the skipped list, the chunk plan, the footer metadata (`groups`, the attributes of the
/// input's groups, [`group_entry`]; `axes` adds the input's
/// dimension names and coordinates, over the arrays as decoded) and the write, reading each tile with `read(var, chunk, coords)` (in turn:
/// neither library reads on several threads) and decoding it.
#[cfg(any(feature = "netcdf", feature = "hdf5"))]
#[allow(
    clippy::too_many_arguments,
    reason = "the steps of one conversion, each from its own source"
)]
pub(crate) fn convert_library<V: LibVar>(
    input: &Path,
    output: &Path,
    o: &ConvertOptions,
    lib: crate::tet::convert::LibraryOptions,
    kind: &LibKind,
    vars: &mut [V],
    skipped: &[String],
    groups: Vec<GroupAttrs>,
    axes: impl FnOnce(&[V], &mut Metadata),
    mut read: impl FnMut(&V, &[u64], &[u64]) -> Result<Vec<u8>, String>,
) -> Result<(), Fail> {
    if lib.unpack {
        for v in vars.iter_mut() {
            let a = v.array_mut();
            a.decode = unpacking(
                input,
                kind.what,
                &a.name,
                a.dtype,
                a.packed_as,
                &mut a.attrs,
            )?;
        }
    }
    let vars: &[V] = vars;
    for v in vars {
        say_lists(input, kind.what, v.array());
    }
    let decoded = vars.iter().filter(|v| v.array().decode.is_some()).count();
    let mut extra = after_walk(input, vars.len(), skipped, decoded, kind.whats)?;
    let unsigned = vars.iter().filter(|v| v.array().unsigned).count();
    if unsigned > 0 {
        extra.push(("unsigned".into(), unsigned.to_string()));
    }
    let ranks: Vec<usize> = vars.iter().map(|v| v.array().shape.len()).collect();
    check_chunk_rank(o, &ranks, kind.whats)?;
    let mut planned = Vec::new();
    for v in vars {
        let a = v.array();
        let chunk = chunk_of(
            input,
            kind.what,
            &a.name,
            &a.shape,
            a.dtype,
            o.chunk.as_deref(),
            a.chunking.as_deref(),
        )?;
        planned.push(Planned {
            name: &a.name,
            dtype: a.decode.as_ref().map_or(a.dtype, Decoding::dtype),
            shape: &a.shape,
            chunk,
        });
    }
    // The footer metadata: the input's axes (`axes`: dimension names, coordinates), each
    // array's attributes and restored type, then `--dims` and `--attr`.
    let mut m = new_metadata();
    m.groups = capped_groups(input, groups);
    axes(vars, &mut m);
    for v in vars {
        let a = v.array();
        m.edit(&a.name, |e| {
            for (k, val) in &a.attrs {
                e.set_attr(k, val);
            }
            if let Some(d) = a.numpy_dtype_kept() {
                e.set_attr("numpy_dtype", d);
            }
            if a.scalar {
                e.set_attr(SCALAR_KEY, "[]");
            }
        });
    }
    // A scalar has no axis a `--dims` of 1-D arrays names (`--dims NAME:..` still does).
    let ranks: Vec<(&str, usize)> = vars
        .iter()
        .map(|v| {
            let a = v.array();
            (a.name.as_str(), if a.scalar { 0 } else { a.shape.len() })
        })
        .collect();
    apply_options(&mut m, &ranks, o, kind.what, "in the file")
        .map_err(|e| Fail::usage(format!("{}: {e}", input.display())))?;
    let meta = serde_json::Value::Object(m.to_json()).to_string();
    let provenance = Provenance {
        from: kind.from,
        descrs: vars
            .iter()
            .map(|v| format!("{}:{}", v.array().name, v.array().source_type))
            .collect(),
        extra,
    };
    write(input, output, &planned, meta, provenance, o, |i, tiles| {
        let (Some(v), Some(p)) = (vars.get(i), planned.get(i)) else {
            return Ok(Vec::new());
        };
        let a = v.array();
        tiles
            .iter()
            .map(|coords| {
                read(v, &p.chunk, coords)
                    .map(|t| {
                        Payload::Elements(match &a.decode {
                            Some(d) => d.apply(&t),
                            None => t,
                        })
                    })
                    .map_err(|e| {
                        Fail::damaged(format!(
                            "{}: {} '{}': {e}",
                            input.display(),
                            kind.what,
                            a.name
                        ))
                    })
            })
            .collect()
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::restriction, reason = "tests fail by panicking")]
    use super::*;

    #[test]
    fn group_attributes_are_capped_as_tet_metadata_holds_them() {
        let input = Path::new("in.nc");
        let limit = tet_alloc::tet::meta::MAX_STRING;
        let most = tet_alloc::tet::meta::MAX_ATTRS;
        let many: Vec<(String, String)> = (0..most + 6)
            .map(|i| (format!("a{i}"), i.to_string()))
            .collect();
        let (path, kept) = group_entry(input, "obs", many).unwrap();
        assert_eq!(path, "obs");
        assert_eq!(kept.len(), most);
        assert_eq!(kept.last().unwrap().0, format!("a{}", most - 1));
        // A value over the string cap is left out, the others kept.
        let long = vec![
            ("history".to_string(), "x".repeat(limit + 1)),
            ("title".to_string(), "t".to_string()),
        ];
        let (_, kept) = group_entry(input, "/", long).unwrap();
        assert_eq!(kept, vec![("title".to_string(), "t".to_string())]);
        // A group whose path is past the cap keeps nothing.
        let deep = "g/".repeat(limit);
        assert!(group_entry(input, &deep, vec![("k".into(), "v".into())]).is_none());
        // At most as many groups as datasets entries.
        let groups: Vec<GroupAttrs> = (0..tet_alloc::tet::meta::MAX_DATASETS + 3)
            .map(|i| (format!("g{i}"), vec![("k".to_string(), "v".to_string())]))
            .collect();
        let capped = capped_groups(input, groups);
        assert_eq!(capped.len(), tet_alloc::tet::meta::MAX_DATASETS);
        assert_eq!(
            capped.last().unwrap().0,
            format!("g{}", tet_alloc::tet::meta::MAX_DATASETS - 1)
        );
    }
}
