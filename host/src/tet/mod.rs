//! `tet-host` commands for `.tet` files, one module per command, and what they share:
//! opening a file for reading data, its memory budget, history timestamps.

use std::path::Path;

use tet_alloc::tet::decode::DecodeError;
use tet_core::tet::{ExecutionSettings, TetFile};

use crate::Exit;

pub mod codec;
pub mod convert;
pub mod export;
pub mod info;
pub mod npy;
pub mod query;
pub mod query_doc;
pub mod repair;
pub mod report;
pub mod verify;
pub mod write;

/// Opens `bytes` as a `.tet` file for reading data, or says why not (exit 4). A footer
/// that cannot be read does not stop the data: it is named on standard error
/// ([`footer_warning`]) and the file opens without it.
pub fn open_tet<'a>(path: &Path, bytes: &'a [u8]) -> Result<TetFile<'a>, Exit> {
    let file = TetFile::open(bytes).map_err(|e| {
        eprintln!(
            "tet-host: {}: not a readable .tet file: {e}",
            path.display()
        );
        Exit::of(e.kind.category())
    })?;
    if let Some(w) = footer_warning(&file) {
        eprintln!("tet-host: {}: {w}", path.display());
    }
    Ok(file)
}

/// The warning for a history footer that cannot be read, naming the rule broken and
/// its offset: the tail's (found when the file was opened), else the JSON's or the
/// spill's (parsed here, bounded by the largest history row).
pub fn footer_warning(file: &TetFile<'_>) -> Option<String> {
    let (f, note) = match file.footer_problem() {
        Some(f) => (f, None),
        None => tet_alloc::tet::history::check_footer(file)
            .problems
            .into_iter()
            .next()
            .map(|(f, n)| (f, Some(n)))?,
    };
    Some(format!(
        "warning[{}]: the history footer is unreadable: {}; the chunks are read without it \
         (`tet-host verify` reports it, `tet-host repair -y` drops it)",
        f.code.as_str(),
        report::message(&report::Names::default(), &f, note.as_ref())
    ))
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
        "{e}; not checked. Raise the budget with --memory-budget BYTES (the default comes \
         from the file's TIDX execution settings: 25 % of RAM when they are 0)"
    )
}

/// Current UTC time as RFC 3339 text, for history rows.
pub fn now_rfc3339() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let days = secs / 86_400;
    let rem = secs % 86_400;
    // Civil date from days since 1970-01-01 (proleptic Gregorian; days are never negative
    // here, so the era arithmetic stays unsigned).
    let z = days.saturating_add(719_468);
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = doe
        .saturating_sub(doe / 1460)
        .saturating_add(doe / 36_524)
        .saturating_sub(doe / 146_096)
        / 365;
    let doy = doe.saturating_sub(
        yoe.saturating_mul(365)
            .saturating_add(yoe / 4)
            .saturating_sub(yoe / 100),
    );
    let mp = doy.saturating_mul(5).saturating_add(2) / 153;
    let d = doy
        .saturating_sub(mp.saturating_mul(153).saturating_add(2) / 5)
        .saturating_add(1);
    let m = if mp < 10 {
        mp.saturating_add(3)
    } else {
        mp.saturating_sub(9)
    };
    let y = yoe
        .saturating_add(era.saturating_mul(400))
        .saturating_add(u64::from(m <= 2));
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}
