//! `tet-host verify` for `.tet` files: the library's check and report
//! ([`tet_std::tet::verify`], re-exported here), printed.

use std::path::Path;

use tet_core::tet::Severity;

pub use tet_std::tet::verify::*;

use crate::report::summary_line;
use crate::{Exit, Output};

/// `tet-host verify`. With `deep`, a progress bar on a terminal.
pub fn verify(path: &Path, bytes: &[u8], output: Output, opts: &DecodeOptions) -> Exit {
    let bar = crate::progress::Bar::new(opts.deep);
    let report = match report(path, bytes, opts, &bar) {
        Ok(r) => r,
        Err(e) => {
            crate::say!("{e}");
            return Exit::of(e.category());
        }
    };
    let shown = &report.findings;
    // The last line of a file with nothing found, `incomplete` when the budget stopped
    // the decode pass.
    let clean = format!(
        "{}: {}{}",
        path.display(),
        report.status(),
        partial(report.decoded)
    );
    match output {
        Output::Json => crate::report::print_json(&report.json()),
        Output::Quiet => {
            if report.is_clean() {
                println!("{clean}");
            } else {
                let first = shown
                    .iter()
                    .find(|r| r.severity == Severity::Error)
                    .or(shown.first())
                    .map(|r| format!(" first: {}", r.line()))
                    .unwrap_or_default();
                println!(
                    "{}: {} error(s), {} warning(s);{first}",
                    path.display(),
                    report.errors,
                    report.warnings
                );
            }
        }
        Output::Human => {
            for r in shown {
                println!("{}", r.line());
            }
            if report.dropped > 0 {
                println!("... and {} more findings not listed", report.dropped);
            }
            if let Some(note) = report.unchecked_note() {
                println!("note: {note}");
            }
            if report.is_clean() {
                println!("{clean}");
            } else {
                println!("{}", summary_line(path, report.errors, report.warnings));
            }
        }
    }
    if let Some(e) = &report.operational {
        crate::say!("{}: {}", path.display(), crate::tet::budget_message(e));
    }
    // Warnings alone exit 0, as for cetrafs (the README's table): they are printed and
    // counted, and nothing is wrong with the data.
    report.outcome().map_or(Exit::Clean, Exit::of)
}

/// What a quick scan left out, after `clean`: ` (quick: 128 of 455 chunks decoded;
/// --deep decodes all)`; nothing when every chunk was decoded.
fn partial((decoded, rows): (u64, u64)) -> String {
    if decoded >= rows {
        String::new()
    } else {
        format!(" (quick: {decoded} of {rows} chunks decoded; --deep decodes all)")
    }
}
