//! `tet-host` commands for `.tet` files, one module per command, and what they share:
//! opening a file for reading data, its memory budget, history timestamps.

use std::path::Path;

use tet_alloc::tet::decode::DecodeError;
use tet_core::tet::{Code, ExecutionSettings, Finding, TetFile};

use crate::Exit;

#[cfg(feature = "netcdf")]
mod cdf3;
pub mod codec;
pub mod convert;
pub mod dims;
pub mod export;
#[cfg(feature = "hdf5")]
pub mod hdf5;
pub mod info;
#[cfg_attr(
    not(any(feature = "zarr", feature = "netcdf", feature = "hdf5")),
    allow(
        dead_code,
        reason = "the Zarr, NetCDF and HDF5 inputs use all of it, .npy only its check"
    )
)]
pub(crate) mod ingest;
#[cfg(feature = "netcdf")]
pub mod netcdf;
pub mod npy;
pub mod query;
pub mod query_doc;
pub mod repair;
pub mod report;
pub mod transform;
pub mod verify;
pub mod write;
#[cfg(feature = "zarr")]
pub mod zarr;
/// A build without the `zarr` feature: stores are recognised, and refused with a message.
#[cfg(not(feature = "zarr"))]
pub mod zarr {
    use std::path::Path;

    use super::convert::ConvertOptions;
    use crate::Exit;

    /// Whether `path` is a Zarr v3 store (a directory with a `zarr.json`).
    pub fn is_store(path: &Path) -> bool {
        path.is_dir() && path.join("zarr.json").is_file()
    }

    fn refused() -> Exit {
        crate::say!("this tet-host was built without Zarr support (cargo feature `zarr`)");
        Exit::Usage
    }

    /// Refused: no Zarr support in this build.
    pub fn convert(_: &Path, _: &Path, _: Option<&str>, _: &ConvertOptions) -> Exit {
        refused()
    }

    /// Refused: no Zarr support in this build.
    pub fn export(_: &Path, _: &[u8], _: Option<&str>, _: &Path, _: Option<u64>, _: bool) -> Exit {
        refused()
    }
}

/// Opens `bytes` as a `.tet` file for reading data, or says why not (exit 4). The chunk
/// checksum table the footer metadata names is attached, so every chunk the command
/// reads is checked against it as it is decoded. A footer that cannot be read does not
/// stop the data: it is named on standard error ([`read_warnings`]) and the file opens
/// without it.
pub fn open_tet<'a>(path: &Path, bytes: &'a [u8]) -> Result<TetFile<'a>, Exit> {
    let file = TetFile::open(bytes).map_err(|e| {
        match crate::classify_bytes(bytes) {
            Err(what) => {
                crate::say!(
                    "{}: not a .tet file or a cetrafs image: {what}",
                    path.display()
                );
                return Exit::Operational;
            }
            Ok(crate::Format::Cetrafs) => {
                crate::say!(
                    "{}: a cetrafs image, not a .tet file; this command reads .tet files",
                    path.display()
                );
                return Exit::Usage;
            }
            Ok(crate::Format::Tet) => {}
        }
        crate::say!("{}: not a readable .tet file: {e}", path.display());
        Exit::of(e.kind.category())
    })?;
    let reading = tet_alloc::tet::history::reading(file);
    for w in read_warnings(&reading.problems) {
        crate::errln!("tet-host: {}: {w}", path.display());
    }
    Ok(reading.file)
}

/// The warnings for what a reader could not use
/// ([`tet_alloc::tet::history::Reading::problems`]), naming each rule broken and its
/// offset: one for the history footer (its first problem: the tail's, else the JSON's
/// or the spill's), one for a chunk checksum table that cannot be used.
pub fn read_warnings(problems: &[(Finding, Option<String>)]) -> Vec<String> {
    let say =
        |f: &Finding, note: Option<&String>| report::message(&report::Names::default(), f, note);
    let footer = problems
        .iter()
        .find(|(f, _)| f.code != Code::ChecksumTable)
        .map(|(f, note)| {
            format!(
                "warning[{}]: the history footer is unreadable: {}; the chunks are read \
                 without it (`tet-host verify` reports it, `tet-host repair -y` drops it)",
                f.code.as_str(),
                say(f, note.as_ref())
            )
        });
    let table = problems
        .iter()
        .find(|(f, _)| f.code == Code::ChecksumTable)
        .map(|(f, note)| {
            format!(
                "warning[{}]: the chunk checksum table cannot be used: {}; the chunks are \
                 read without their checksums (`tet-host verify` reports it)",
                f.code.as_str(),
                say(f, note.as_ref())
            )
        });
    footer.into_iter().chain(table).collect()
}

/// The memory budget: `cli` when given, else `doc` (a query's `execution` object), else
/// the file's `TIDX` execution settings, over this machine's RAM.
pub fn budget_for(file: &TetFile<'_>, doc: Option<ExecutionSettings>, cli: Option<u64>) -> u64 {
    cli.unwrap_or_else(|| {
        let settings = doc
            .or_else(|| file.index().map(|i| i.execution()))
            .unwrap_or(ExecutionSettings {
                memory_budget_percent_bps: 0,
                memory_budget_bytes: 0,
            });
        tet_alloc::tet::decode::budget_from_settings(settings, crate::budget::host_ram())
    })
}

/// The message for a chunk the budget does not allow decoding.
pub fn budget_message(e: &DecodeError) -> String {
    format!(
        "{e}; not checked. Raise it with --memory-budget SIZE (e.g. 512M, 2G or 50%; the \
         default comes from the file's TIDX execution settings: 25 % of RAM when they are 0)"
    )
}

/// How to raise a memory budget that was too small, naming where it came from (the
/// file's `TIDX` execution settings, a query's `execution` object, `--memory-budget`).
pub fn raise_budget(source: &str) -> String {
    let default = if source.starts_with("the file's") {
        ": 25 % of RAM when they are 0"
    } else {
        ""
    };
    format!(
        "raise it with --memory-budget SIZE (e.g. 512M, 2G or 50%; the budget came from \
         {source}{default})"
    )
}

/// That `file` has no dataset `name`, with the names it has (the CLI's and the Python
/// binding's one message).
pub fn no_dataset_message(path: &Path, file: &TetFile<'_>, name: &str) -> String {
    let names: Vec<String> = file
        .datasets()
        .map_while(|d| d.ok().map(|d| format!("{:?}", d.name())))
        .collect();
    let list = if names.is_empty() {
        "it has none".to_string()
    } else {
        format!("datasets: {}", names.join(", "))
    };
    format!("{}: no dataset {name:?} ({list})", path.display())
}

/// Says that `file` has no dataset `name` and lists those it has (exit 16).
pub fn no_dataset(path: &Path, file: &TetFile<'_>, name: &str) -> Exit {
    crate::say!("{}", no_dataset_message(path, file, name));
    Exit::Usage
}

/// Current UTC time as RFC 3339 text, for history rows.
pub fn now_rfc3339() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    crate::time::rfc3339(secs)
}
