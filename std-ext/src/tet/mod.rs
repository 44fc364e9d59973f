//! `.tet` files: opening one for reading data, its memory budget, verifying, querying,
//! the C zstd codec, and what the commands and the Python binding both say about them.

use std::path::Path;

use tet_core::tet::{Code, Dataset, ExecutionSettings, Finding, TetFile};

use crate::{Error, Format};

pub mod codec;
pub mod dims;
pub mod info;
pub mod query;
pub mod query_doc;
pub mod report;
pub mod verify;

/// Opens `bytes` as a `.tet` file, or says why not: a file of neither format is named as
/// what it looks like (`io`: "not ours" is not damage), a cetrafs image is refused
/// (`usage`), a damaged `.tet` file fails with its error's category.
pub fn open_tet<'a>(path: &Path, bytes: &'a [u8]) -> Result<TetFile<'a>, Error> {
    TetFile::open(bytes).map_err(|e| {
        let error = match crate::classify_bytes(bytes) {
            Err(what) => Error::io(format!(
                "{}: not a .tet file or a cetrafs image: {what}",
                path.display()
            )),
            Ok(Format::Cetrafs) => Error::usage(format!(
                "{}: a cetrafs image, not a .tet file; this command reads .tet files",
                path.display()
            )),
            Ok(Format::Tet) => Error::new(
                e.kind.category(),
                format!("{}: not a readable .tet file: {e}", path.display()),
            ),
        };
        error.at(path)
    })
}

/// A `.tet` file opened for reading data ([`open_reading`]).
#[derive(Clone, Debug)]
pub struct Opened<'a> {
    /// The file, its chunk checksum table attached when it can be used.
    pub file: TetFile<'a>,
    /// What the reader could not use ([`read_warnings`]), for the caller to show.
    pub warnings: Vec<String>,
}

/// Opens `bytes` as a `.tet` file for reading data ([`open_tet`]). The chunk checksum
/// table the footer metadata names is attached, so every chunk read is checked against
/// it as it is decoded. A footer that cannot be read does not stop the data: it is named
/// in [`Opened::warnings`] and the file opens without it.
pub fn open_reading<'a>(path: &Path, bytes: &'a [u8]) -> Result<Opened<'a>, Error> {
    let reading = tet_alloc::tet::history::reading(open_tet(path, bytes)?);
    Ok(Opened {
        file: reading.file,
        warnings: read_warnings(&reading.problems),
    })
}

/// Dataset `name` of `file`, or a usage error naming those it has.
pub fn dataset<'a>(path: &Path, file: &TetFile<'a>, name: &str) -> Result<Dataset<'a>, Error> {
    file.dataset(name)
        .map_err(|_| Error::usage(no_dataset_message(path, file, name)).at(path))
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

/// Where the memory budget came from, for the message that says how to raise it.
pub fn budget_source(doc: Option<ExecutionSettings>, cli: Option<u64>) -> &'static str {
    match (cli, doc) {
        (Some(_), _) => "--memory-budget",
        (None, Some(_)) => "the query's execution object",
        (None, None) => "the file's TIDX execution settings",
    }
}

/// The message for a chunk the budget does not allow decoding (`e`, its decode error).
pub fn budget_message(e: &dyn core::fmt::Display) -> String {
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

/// Current UTC time as RFC 3339 text, for history rows.
pub fn now_rfc3339() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    crate::time::rfc3339(secs)
}
