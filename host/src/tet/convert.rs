//! `tet-host convert`: NumPy `.npy`/`.npz` to `.tet`.
//!
//! `.npy` input is memory-mapped and converted tile by tile, so files larger than RAM
//! convert; `.npz` members stored uncompressed (`np.savez`) are read in place, deflated
//! members (`np.savez_compressed`) are inflated into memory first. Big-endian and Fortran-order
//! arrays are converted; `bool` becomes `u8` and `int8` widens to `i16` (`.tet` has no
//! 8-bit signed type); object, string, complex, datetime and structured arrays are refused.

use std::path::Path;

use tet_alloc::tet::writer::{interop, DatasetSpec, FooterSpec, HistoryRow, Writer};
use tet_core::tet::{Codec, DatasetId};

use tet_alloc::tet::append::Base;

use crate::atomic::{AtomicFile, RealFs};
use crate::tet::write::{write_batch, Tile};
use crate::Exit;

use super::npy::{default_chunk, parse_npy, tile, Npy};

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
    /// Replace `output` when it exists (never when it is the input).
    pub force: bool,
    /// Add the arrays to `output`, an existing file ([`tet_alloc::tet::append`]).
    pub append: bool,
    /// Axis metadata: `--dims`, `--attr`, `--coord`, `--labels` ([`MetaArgs`]).
    pub meta: MetaArgs,
}

/// The axis metadata options of `convert`, each `[DATASET:]...`: without a dataset they
/// apply to every array of the input (not to coordinate datasets they add).
#[derive(Clone, Debug, Default)]
pub struct MetaArgs {
    /// `--dims time,lat,lon`.
    pub dims: Vec<String>,
    /// `--attr units=K`.
    pub attrs: Vec<String>,
    /// `--coord time=times.npy` (or an `.npz` member's name).
    pub coords: Vec<String>,
    /// `--labels station=A,B,C`.
    pub labels: Vec<String>,
}

/// Splits `[DATASET:]rest`, where the dataset prefix ends at a `:` before any `=` (so
/// `units=m:s` has none).
pub(crate) fn target(arg: &str) -> (Option<&str>, &str) {
    let eq = arg.find('=').unwrap_or(arg.len());
    match arg.find(':') {
        Some(c) if c < eq => (arg.get(..c), arg.get(c.saturating_add(1)..).unwrap_or("")),
        _ => (None, arg),
    }
}

pub(crate) fn key_value<'a>(arg: &'a str, what: &str) -> Result<(&'a str, &'a str), String> {
    arg.split_once('=')
        .filter(|(k, _)| !k.is_empty())
        .ok_or_else(|| {
            format!("{what} wants KEY=VALUE (optionally DATASET:KEY=VALUE), got '{arg}'")
        })
}

/// A coordinate to add: the dataset it becomes (or already is) and, when it comes from a
/// `.npy` file, that file.
struct CoordSource {
    dim: String,
    path: Option<std::path::PathBuf>,
}

/// Tiles compressed per parallel batch.
const BATCH: usize = 16;

/// The system library a file input is read through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Library {
    /// libnetcdf (feature `netcdf`): NetCDF classic, 64-bit offset, CDF-5, NetCDF-4.
    NetCdf,
    /// libhdf5 (feature `hdf5`): HDF5 files.
    Hdf5,
}

/// The options of `convert` for the inputs a [`Library`] reads.
#[derive(Clone, Copy, Debug, Default)]
pub struct LibraryOptions {
    /// Convert the numeric arrays and list the others as skipped, instead of refusing.
    pub skip_unsupported: bool,
    /// Decode CF packing and missing values into floats ([`tet_alloc::tet::decode::CfDecode`])
    /// instead of keeping the stored values and their attributes.
    pub unpack: bool,
}

/// The names NetCDF files go by (`.nc`, `.nc4`, `.cdf`, `.netcdf`).
const NETCDF_NAMES: [&str; 4] = ["nc", "nc4", "cdf", "netcdf"];
/// The names HDF5 files go by.
const HDF5_NAMES: [&str; 5] = ["h5", "hdf5", "he5", "hdf", "mat"];

fn extension_in(path: &Path, names: &[&str]) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| names.contains(&e.to_ascii_lowercase().as_str()))
}

/// Whether `path` is named as a NetCDF or HDF5 file is (`.nc`, `.h5`, `.mat`, ...), so an
/// input that is not one can be called damaged rather than not a `.npy` file.
pub fn library_named(path: &Path) -> bool {
    extension_in(path, &NETCDF_NAMES) || extension_in(path, &HDF5_NAMES)
}

/// Which library reads `path`, when it is a regular file that starts as a NetCDF or an
/// HDF5 file does: `CDF` 1, 2 or 5 is NetCDF; HDF5's signature (at byte 0, or after a
/// user block of 512 bytes times a power of two, as MATLAB's v7.3 files have) is NetCDF-4
/// when the name says so and this build reads NetCDF, else HDF5 when this build reads
/// HDF5 (a NetCDF-4 file is an HDF5 file), else NetCDF.
pub fn library_for(path: &Path) -> Option<Library> {
    use std::io::{Read, Seek, SeekFrom};
    // Only a regular file is opened: opening a FIFO would wait for a writer (the input
    // checks refuse special files before anything opens them).
    let len = std::fs::metadata(path)
        .ok()
        .filter(std::fs::Metadata::is_file)?
        .len();
    let mut f = std::fs::File::open(path).ok()?;
    let mut head = [0u8; 8];
    f.read_exact(&mut head).ok()?;
    if matches!(head.get(..4), Some(b"CDF\x01" | b"CDF\x02" | b"CDF\x05")) {
        return Some(Library::NetCdf);
    }
    let signature = *b"\x89HDF\r\n\x1a\n";
    let mut at = 512u64;
    let mut hdf5 = head == signature;
    while !hdf5 && at.saturating_add(8) <= len && at <= 1 << 20 {
        hdf5 = f.seek(SeekFrom::Start(at)).is_ok()
            && f.read_exact(&mut head).is_ok()
            && head == signature;
        at = at.saturating_mul(2);
    }
    if !hdf5 {
        return None;
    }
    let netcdf_name = extension_in(path, &NETCDF_NAMES);
    Some(
        if (netcdf_name && cfg!(feature = "netcdf")) || !cfg!(feature = "hdf5") {
            Library::NetCdf
        } else {
            Library::Hdf5
        },
    )
}

/// `tet-host convert`.
pub fn convert(input: &Path, output: &Path, o: &ConvertOptions) -> Exit {
    // With --append the output is the file added to: it must exist, and be another file
    // than the input.
    let checked = if o.append {
        crate::atomic::check_output(output, &[input], true)
    } else {
        crate::atomic::check_output(output, &[input], o.force)
    };
    if let Err(e) = checked {
        return e;
    }
    let base_input = if o.append {
        match crate::input::Input::open(output) {
            Ok(i) => Some(i),
            Err(e) => {
                crate::say!(
                    "--append: cannot read {} ({e}); --append adds to an existing .tet file",
                    output.display()
                );
                return Exit::Operational;
            }
        }
    } else {
        None
    };
    let base = match base_input
        .as_ref()
        .map(|i| Base::open::<std::io::Error>(i.bytes()))
    {
        Some(Ok(b)) => Some(b),
        Some(Err(e)) => {
            crate::say!("{}: {e}", output.display());
            return Exit::Problems;
        }
        None => None,
    };
    let src = match crate::input::Input::open(input) {
        Ok(i) => i,
        Err(e) => {
            crate::say!("cannot read {}: {e}", input.display());
            return Exit::Operational;
        }
    };
    let bytes = src.bytes();
    let is_zip = bytes.starts_with(b"PK\x03\x04");
    match o.name.as_deref() {
        Some(_) if is_zip => {
            crate::say!(
                "{}: --name names the dataset of a .npy input; an .npz's datasets are named \
                 after its members",
                input.display()
            );
            return Exit::Usage;
        }
        Some("") => {
            crate::say!("--name is empty: a dataset needs a name");
            return Exit::Usage;
        }
        _ => {}
    }
    // Coordinates from .npy files, opened before the arrays that borrow them.
    let mut coord_files: Vec<(String, crate::input::Input)> = Vec::new();
    let mut coord_sources: Vec<(Option<String>, CoordSource)> = Vec::new();
    for arg in &o.meta.coords {
        let (ds, rest) = target(arg);
        let (dim, source) = match key_value(rest, "--coord") {
            Ok(kv) => kv,
            Err(e) => {
                crate::say!("{e}");
                return Exit::Usage;
            }
        };
        let as_path = std::path::Path::new(source);
        let is_file = as_path.is_file();
        coord_sources.push((
            ds.map(str::to_string),
            CoordSource {
                dim: dim.to_string(),
                path: is_file.then(|| as_path.to_path_buf()),
            },
        ));
        if is_file && !coord_files.iter().any(|(d, _)| d == dim) {
            match crate::input::Input::open(as_path) {
                Ok(i) => coord_files.push((dim.to_string(), i)),
                Err(e) => {
                    crate::say!("cannot read {}: {e}", as_path.display());
                    return Exit::Operational;
                }
            }
        } else if !is_file && !is_zip {
            crate::say!(
                "--coord {arg}: {source} is not a file (a coordinate is a .npy file, or the \
                 name of a member of an .npz input)"
            );
            return Exit::Usage;
        }
    }
    let mut members: Vec<(String, Vec<u8>)> = Vec::new(); // inflated npz members
    let mut arrays: Vec<(String, Npy<'_>)> = Vec::new();
    let mut stored: Vec<(String, std::ops::Range<usize>)> = Vec::new();
    if is_zip {
        match npz_members(bytes) {
            Ok((s, m)) => {
                stored = s;
                members = m;
            }
            Err(e) => {
                crate::say!("{}: {e}", input.display());
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
        crate::say!("{}: {e}", input.display());
        return Exit::Usage;
    }
    if arrays.is_empty() {
        crate::say!("{}: no arrays to convert", input.display());
        return Exit::Usage;
    }
    let data_names: Vec<String> = arrays.iter().map(|(n, _)| n.clone()).collect();
    for (dim, f) in &coord_files {
        if data_names.contains(dim) {
            crate::say!(
                "--coord {dim}=...: the input already has an array called '{dim}', which would \
                 be the coordinate dataset's name"
            );
            return Exit::Usage;
        }
        match parse_npy(f.bytes()) {
            Ok(a) if a.shape.len() == 1 && !a.scalar => arrays.push((dim.clone(), a)),
            Ok(a) => {
                crate::say!(
                    "--coord {dim}=...: a coordinate is a 1-D array; this one has shape {:?}",
                    a.shape
                );
                return Exit::Usage;
            }
            Err(e) => {
                crate::say!("--coord {dim}=...: {e}");
                return Exit::Usage;
            }
        }
    }
    let metadata = match axis_metadata(&arrays, &data_names, &coord_sources, &o.meta) {
        Ok(m) => m,
        Err(e) => {
            crate::say!("{}: {e}", input.display());
            return Exit::Usage;
        }
    };
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
        if let Some((name, a)) = arrays
            .iter()
            .find(|(n, a)| a.shape.len() != c.len() && data_names.contains(n))
        {
            crate::say!(
                "--chunk has {} axes but array '{name}' has {}",
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
    // The metadata's rules, checked before any data is written.
    // A marker no element can equal, which a file's own attributes may hold, is here one
    // the user typed (`--attr _FillValue=1.5` on integers): refused as the slip it is.
    let problem = crate::tet::ingest::check_metadata(&metadata, &specs, in_options)
        .and_then(|w| w.first().map_or(Ok(()), |p| Err(in_options(p))));
    if let Err(e) = problem {
        crate::say!("{}: {e}", input.display());
        return Exit::Usage;
    }
    if let Some(b) = &base {
        if let Err(e) = b.check_names::<std::io::Error>(specs.iter().map(|s| s.name)) {
            crate::say!("{}: {e}", output.display());
            return Exit::Usage;
        }
    }
    // The datasets a file added to has come first, keeping their ids.
    let first_id = base.as_ref().map_or(0, |b| b.datasets.len());
    let all_specs: Vec<DatasetSpec<'_>> = match &base {
        Some(b) => b.specs().into_iter().chain(specs.iter().copied()).collect(),
        None => specs.clone(),
    };
    let out = match AtomicFile::create(output, RealFs) {
        Ok(f) => f,
        Err(e) => {
            crate::say!("cannot create a file beside {}: {e}", output.display());
            return Exit::Operational;
        }
    };
    let mut w = match Writer::new(out, &all_specs) {
        Ok(w) => w,
        Err(e) => {
            crate::say!("{}: {e}", input.display());
            return Exit::Usage;
        }
    };
    if let Some(warning) = index_warning(&specs, w.position()) {
        crate::errln!("tet-host: {}: warning: {warning}", output.display());
    }
    // Progress over the source's bytes (standard error, terminal only).
    let total: u64 = arrays
        .iter()
        .map(|(_, a)| u64::try_from(a.data.len()).unwrap_or(0))
        .sum::<u64>()
        .saturating_add(base.as_ref().map_or(0, Base::stored_bytes));
    let bar = crate::progress::progress_bar(true, total);
    if let Some(b) = &base {
        let copied = b.copy_into(&mut w, |n| {
            if let Some(bar) = &bar {
                bar.inc(n);
            }
        });
        if let Err(e) = copied {
            if let Some(bar) = &bar {
                bar.finish_and_clear();
            }
            crate::say!("{}: {e}", output.display());
            return match e {
                tet_alloc::tet::append::AppendError::Write(_) => Exit::Operational,
                _ => Exit::Problems,
            };
        }
    }
    for (i, ((_, a), c)) in arrays.iter().zip(&chunks).enumerate() {
        let grid: Vec<u64> = a
            .shape
            .iter()
            .zip(c)
            .map(|(s, k)| s.div_ceil((*k).max(1)))
            .collect();
        let cells = grid.iter().fold(1u64, |x, g| x.saturating_mul(*g));
        let id = DatasetId(u32::try_from(i.saturating_add(first_id)).unwrap_or(u32::MAX));
        let mut batch: Vec<Tile> = Vec::new();
        for cell in 0..cells {
            let coords = tet_alloc::tet::query::position_coords(&grid, cell);
            let mut t = Vec::new();
            tile(a, c, &coords, &mut t);
            batch.push((id, coords, t));
            if batch.len() >= BATCH || cell.saturating_add(1) == cells {
                if let Err(e) = write_batch(&mut w, &batch, o.codec, o.level) {
                    crate::say!("{}: {e}", output.display());
                    return Exit::Operational;
                }
                if let Some(b) = &bar {
                    b.inc(crate::tet::write::batch_bytes(&batch));
                }
                batch.clear();
            }
        }
    }
    let descrs: Vec<String> = arrays
        .iter()
        .map(|(n, a)| format!("{n}:{}", a.descr))
        .collect();
    let row = HistoryRow {
        op: if o.append { "append" } else { "convert" }.into(),
        source: interop::clip(&input.display().to_string()).to_string(),
        at: super::now_rfc3339(),
        params: vec![
            ("from".into(), if is_zip { "npz" } else { "npy" }.into()),
            ("arrays".into(), arrays_param(&descrs)),
            ("codec".into(), o.codec.name().into()),
        ],
    };
    let footer = match &base {
        None => FooterSpec {
            history: vec![row],
            metadata: Some(metadata),
        },
        Some(b) => match b.footer(row, Some(&metadata)) {
            Ok(f) => f,
            Err(e) => {
                crate::say!("{}: {e}", output.display());
                return Exit::Usage;
            }
        },
    };
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    match w.finish(Some(&footer)).map(|f| f.commit()) {
        Ok(Ok(())) => Exit::Clean,
        Ok(Err(e)) => {
            crate::say!("{}: {e}", output.display());
            Exit::Operational
        }
        Err(e) => {
            crate::say!("{}: {e}", output.display());
            Exit::Operational
        }
    }
}

/// Chunks smaller than this make the index a large share of the file.
const SMALL_CHUNK: u64 = 4 << 10;

/// The warning for chunks so small that the index outweighs the data: the bytes before
/// the first payload (superblock, directory, index, checksum table) over 10 % of the
/// data's, or chunks under 4 KiB. Only for datasets of more than one chunk: a one-chunk
/// dataset cannot have fewer rows, whatever `--chunk` says.
fn index_warning(specs: &[DatasetSpec<'_>], index_bytes: u64) -> Option<String> {
    let bytes = |shape: &[u64], d: &DatasetSpec<'_>| {
        shape
            .iter()
            .fold(d.dtype.size(), |a, n| a.saturating_mul(*n))
    };
    let cells = |d: &DatasetSpec<'_>| {
        d.shape
            .iter()
            .zip(d.chunk_shape)
            .fold(1u64, |a, (s, c)| a.saturating_mul(s.div_ceil((*c).max(1))))
    };
    let data: u64 = specs
        .iter()
        .map(|d| bytes(d.shape, d))
        .fold(0, u64::saturating_add);
    let rows: u64 = specs.iter().map(cells).fold(0, u64::saturating_add);
    let multi: Vec<&DatasetSpec<'_>> = specs.iter().filter(|d| cells(d) > 1).collect();
    if multi.is_empty() {
        return None;
    }
    let small = multi.iter().find(|d| bytes(d.chunk_shape, d) < SMALL_CHUNK);
    let heavy = index_bytes.saturating_mul(10) > data;
    if small.is_none() && !heavy {
        return None;
    }
    let mut why = Vec::new();
    if heavy {
        why.push(format!(
            "the index ({index_bytes} bytes for {rows} chunks) is {}% of the data ({data} bytes)",
            index_bytes
                .saturating_mul(100)
                .checked_div(data)
                .unwrap_or(100)
        ));
    }
    if let Some(d) = small {
        let shape: Vec<String> = d.chunk_shape.iter().map(|c| c.to_string()).collect();
        why.push(format!(
            "dataset '{}' has chunks of {} {} ({} bytes, under 4 KiB)",
            d.name,
            shape.join("×"),
            d.dtype.name(),
            bytes(d.chunk_shape, d)
        ));
    }
    Some(format!(
        "{}: larger chunks (--chunk; the default is about 1 MiB per chunk) make the file \
         smaller and its reads faster",
        why.join("; ")
    ))
}

/// The footer metadata: `metadata.file` (this tool, its version, now), what
/// [`numpy_metadata`] records, then the axis metadata the options give.
fn axis_metadata(
    arrays: &[(String, Npy<'_>)],
    data_names: &[String],
    coords: &[(Option<String>, CoordSource)],
    args: &MetaArgs,
) -> Result<String, String> {
    use tet_alloc::tet::meta::{Coord, FileInfo, Metadata};
    let mut m = Metadata {
        file: Some(FileInfo {
            tool: Some("tet-host".into()),
            library_version: Some(env!("CARGO_PKG_VERSION").into()),
            created_at: Some(super::now_rfc3339()),
        }),
        datasets: Vec::new(),
        groups: Vec::new(),
    };
    if let Some(text) = numpy_metadata(arrays) {
        let n = tet_alloc::tet::meta::parse(text.as_bytes(), 0).map_err(|e| e.message)?;
        m.datasets = n.datasets;
    }
    // The .npz members named as coordinates: an option without a dataset leaves them
    // alone (a coordinate dataset is its own axis, named after it).
    let members: Vec<String> = coords
        .iter()
        .filter(|(_, c)| c.path.is_none())
        .filter_map(|(_, c)| {
            args.coords
                .iter()
                .filter_map(|a| key_value(target(a).1, "--coord").ok())
                .find(|(d, _)| *d == c.dim)
                .map(|(_, s)| s.to_string())
        })
        .collect();
    for name in &members {
        if let Some((_, a)) = arrays.iter().find(|(n, _)| n == name) {
            if a.shape.len() != 1 || a.scalar {
                return Err(format!(
                    "--coord ...={name}: a coordinate is a 1-D array; member '{name}' has shape \
                     {:?}",
                    a.shape
                ));
            }
        }
    }
    let all = |ds: Option<&str>, what: &str| -> Result<Vec<String>, String> {
        match ds {
            None if data_names.len() > 1 => Ok(data_names
                .iter()
                .filter(|n| !members.contains(n))
                .cloned()
                .collect()),
            None => Ok(data_names.to_vec()),
            Some(d) if arrays.iter().any(|(n, _)| n == d) => Ok(vec![d.to_string()]),
            Some(d) => Err(format!("{what}: no dataset '{d}' in the output")),
        }
    };
    for arg in &args.dims {
        let (ds, list) = target(arg);
        let names: Vec<String> = list.split(',').map(|s| s.trim().to_string()).collect();
        let mut targets = all(ds, "--dims")?;
        if ds.is_none() && targets.len() > 1 {
            // Without a dataset, the arrays of that rank.
            targets.retain(|d| {
                arrays
                    .iter()
                    .any(|(n, a)| n == d && a.shape.len() == names.len())
            });
            if targets.is_empty() {
                return Err(format!(
                    "--dims {list}: no array of the input has {} axes",
                    names.len()
                ));
            }
        }
        for d in targets {
            m.edit(&d, |e| e.dim_names = Some(names.clone()));
        }
    }
    // Without a dataset, a coordinate goes to the arrays with that dimension name (or
    // to the only array).
    let having = |m: &Metadata, ds: Option<&str>, dim: &str, what: &str| {
        let t = all(ds, what)?;
        if ds.is_some() || t.len() <= 1 {
            return Ok::<Vec<String>, String>(t);
        }
        let named: Vec<String> = t
            .into_iter()
            .filter(|d| {
                m.dataset(d)
                    .and_then(|e| e.dim_names.as_ref())
                    .is_some_and(|n| n.iter().any(|x| x == dim))
            })
            .collect();
        if named.is_empty() {
            // A misspelt dimension is said, as it is for a .npy input.
            return Err(format!(
                "{what} {dim}=...: no array of the input has a dimension named '{dim}'                  (name the axes with --dims, or give the dataset: {what} DATASET:{dim}=...)"
            ));
        }
        Ok(named)
    };
    for (ds, c) in coords {
        let targets = having(&m, ds.as_deref(), &c.dim, "--coord")?;
        let source = if c.path.is_some() {
            c.dim.clone()
        } else {
            // An .npz member named as the coordinate.
            let member = args
                .coords
                .iter()
                .filter_map(|a| key_value(target(a).1, "--coord").ok())
                .find(|(d, _)| *d == c.dim)
                .map(|(_, s)| s.to_string())
                .unwrap_or_default();
            match arrays.iter().find(|(n, _)| *n == member) {
                None => {
                    return Err(format!(
                        "--coord {}={member}: no such file, and no member '{member}' in the \
                         archive",
                        c.dim
                    ))
                }
                Some((_, a)) if a.shape.len() != 1 || a.scalar => {
                    return Err(format!(
                        "--coord {}={member}: a coordinate is a 1-D array; member '{member}' \
                         has shape {:?}",
                        c.dim, a.shape
                    ))
                }
                Some(_) => {}
            }
            member
        };
        for d in targets.iter().filter(|d| **d != source) {
            m.edit(d, |e| {
                e.coords.retain(|(k, _)| *k != c.dim);
                e.coords
                    .push((c.dim.clone(), Coord::Dataset(source.clone())));
            });
        }
        // The coordinate dataset is its own axis, as CF writes a coordinate variable.
        m.edit(&source, |e| {
            if e.dim_names.is_none() {
                e.dim_names = Some(vec![c.dim.clone()]);
            }
        });
    }
    for arg in &args.labels {
        let (ds, rest) = target(arg);
        let (dim, list) = key_value(rest, "--labels")?;
        let labels: Vec<String> = list.split(',').map(str::to_string).collect();
        for d in having(&m, ds, dim, "--labels")? {
            if m.dataset(&d)
                .is_some_and(|e| e.coords.iter().any(|(k, _)| k == dim))
            {
                return Err(format!(
                    "--labels {dim}=... and --coord {dim}=... both give axis '{dim}' of \
                     '{d}' a coordinate; an axis has at most one"
                ));
            }
            m.edit(&d, |e| {
                e.coords.retain(|(k, _)| k != dim);
                e.coords
                    .push((dim.to_string(), Coord::Labels(labels.clone())));
            });
        }
    }
    for arg in &args.attrs {
        let (ds, rest) = target(arg);
        let (k, v) = key_value(rest, "--attr")?;
        for d in all(ds, "--attr")? {
            m.edit(&d, |e| e.set_attr(k, v));
        }
    }
    Ok(serde_json::Value::Object(m.to_json()).to_string())
}

/// The footer metadata that lets `export` give back what `.tet` cannot hold: for each
/// bool, int8 or 0-d array, `metadata.datasets[name].attrs` records `numpy_dtype` (the
/// source's descr) and `numpy_shape` (`[]`). At most the first
/// [`interop::METADATA_DATASETS`] such arrays (the other implementation's limit).
fn numpy_metadata(arrays: &[(String, Npy<'_>)]) -> Option<String> {
    let mut datasets = serde_json::Map::new();
    for (name, a) in arrays {
        let kind = a.descr.get(1..).unwrap_or_default();
        let mut attrs = serde_json::Map::new();
        if matches!(kind, "b1" | "i1") {
            attrs.insert("numpy_dtype".into(), a.descr.clone().into());
        }
        if let Some((units, datetime)) = time_units(&a.descr) {
            // CF, as xarray encodes datetime64: counts of a unit since an epoch, NaT
            // (the smallest int64) the missing value.
            attrs.insert("numpy_dtype".into(), a.descr.clone().into());
            attrs.insert("units".into(), units.into());
            if datetime {
                attrs.insert("calendar".into(), "proleptic_gregorian".into());
            }
            let nat = i64::MIN.to_le_bytes();
            if a.data.chunks_exact(8).any(|e| e == nat) {
                attrs.insert("_FillValue".into(), i64::MIN.to_string().into());
            }
        }
        if a.scalar {
            attrs.insert("numpy_shape".into(), "[]".into());
        }
        if !attrs.is_empty() && datasets.len() < interop::METADATA_DATASETS {
            datasets.insert(name.clone(), serde_json::json!({ "attrs": attrs }));
        }
    }
    (!datasets.is_empty()).then(|| serde_json::json!({ "datasets": datasets }).to_string())
}

/// The CF units of a `datetime64`/`timedelta64` descr (`<M8[s]`), and whether it is a
/// datetime.
fn time_units(descr: &str) -> Option<(String, bool)> {
    let kind = descr.get(1..)?;
    let datetime = kind.starts_with("M8[");
    if !datetime && !kind.starts_with("m8[") {
        return None;
    }
    let code = kind.get(3..)?.strip_suffix(']')?;
    tet_alloc::tet::cftime::numpy_units(code, datetime)
        .ok()
        .map(|u| (u, datetime))
}

/// The `arrays` history param: the `name:descr` list as JSON text (a string, as the other
/// implementation requires), or when that is too long for it, the count and the dtypes.
pub(crate) fn arrays_param(descrs: &[String]) -> String {
    let list = serde_json::to_string(descrs).unwrap_or_default();
    if list.len() <= interop::ATTR_STRING_BYTES {
        return list;
    }
    let mut dtypes: Vec<&str> = descrs
        .iter()
        .filter_map(|d| d.rsplit_once(':').map(|(_, t)| t))
        .collect();
    dtypes.sort_unstable();
    dtypes.dedup();
    interop::clip(&format!("{} arrays of {}", descrs.len(), dtypes.join(" "))).to_string()
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
        if name.is_empty() {
            return Err(format!(
                "archive member {i} ({:?}) gives an empty dataset name",
                f.name()
            ));
        }
        if f.compression() == zip::CompressionMethod::Stored {
            let start = f
                .data_start()
                .and_then(|s| usize::try_from(s).ok())
                .ok_or("archive member without a data offset")?;
            let len = usize::try_from(f.size()).map_err(|_| "archive member too large")?;
            let range = start..start.saturating_add(len);
            // Read in place, so the archive's CRC-32 is checked here (NumPy checks it
            // too): a damaged member is refused, never converted.
            let data = bytes
                .get(range.clone())
                .ok_or_else(|| format!("archive member '{name}' runs past the end of the file"))?;
            let crc = crc::Crc::<u32>::new(&crc::CRC_32_ISO_HDLC).checksum(data);
            if crc != f.crc32() {
                return Err(format!(
                    "archive member '{name}': CRC-32 is {crc:#010x}, the archive says {:#010x} \
                     (the member is damaged)",
                    f.crc32()
                ));
            }
            stored.push((name, range));
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

/// A metadata rule broken by what the command line asked for, named by the option that
/// gave it (`--dims`, `--labels`, `--coord`, `--attr`) rather than the footer field.
fn in_options(p: &tet_alloc::tet::meta::Problem) -> String {
    let option = match p.field {
        "metadata.datasets.dim_names" => "--dims",
        "metadata.datasets.coords" => "--labels",
        "metadata.datasets.tet_coords" => "--coord",
        "metadata.datasets.attrs" => "--attr",
        _ => return p.to_string(),
    };
    format!("{option}: {} (dataset {:?})", p.message, p.dataset)
}
