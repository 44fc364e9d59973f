//! Verifying a `.tet` file: every structural check, the chunk checksums and the decode
//! pass (`tet-host verify`, `repair`, the Python binding's `verify`), and the report they
//! make as a value.

use std::path::Path;

use rayon::prelude::*;
use serde_json::{json, Value};
use tet_alloc::tet::decode::{ChunkDecoder, DecodeError};
use tet_alloc::tet::history;
use tet_alloc::tet::scan::ChunkTable;
use tet_core::tet::{ChecksumTable, Finding, Sink, Span, TetFile};
use tet_core::{Category, Error};

use crate::report::Rendered;
use crate::tet::codec::CZstd;
use crate::tet::report::{rendered, Collector, Names};
use crate::Progress;

/// How a pass reads payloads.
#[derive(Clone, Copy, Debug, Default)]
pub struct DecodeOptions {
    /// Decode every chunk (`--deep`); otherwise the first 128 rows (quick scan).
    pub deep: bool,
    /// Threads (`-j`); `None` = one per core.
    pub threads: Option<usize>,
    /// Memory budget in bytes; `None` = the file's `TIDX` execution settings.
    pub budget: Option<u64>,
}

/// What a full check found.
pub struct Checked {
    /// Structural and decode findings.
    pub found: Collector,
    /// The footer JSON, when valid.
    pub history: Option<history::History>,
    /// The first chunk that could not be decoded for lack of memory (operational).
    pub operational: Option<DecodeError>,
    /// The budget in force.
    pub budget: u64,
    /// Rows whose payloads failed to decode (corruption), in row order.
    pub bad_rows: Vec<u64>,
    /// End of the last referenced byte.
    pub data_end: u64,
    /// The metadata spill the footer JSON names.
    pub spill: Option<Span>,
    /// Index rows, and how many of them have a checksum table entry that applies.
    pub checksummed: (u64, u64),
    /// Chunks the decode pass covered (all with `--deep`, else the quick scan's first
    /// rows), of how many.
    pub decoded: (u64, u64),
}

/// Runs every structural check plus the quick decode scan.
pub fn check(bytes: &[u8]) -> Result<(Collector, Option<history::History>), Error> {
    let c = check_with(bytes, &DecodeOptions::default())?;
    Ok((c.found, c.history))
}

/// Runs every structural check, then decodes the payloads `opts` asks for.
pub fn check_with(bytes: &[u8], opts: &DecodeOptions) -> Result<Checked, Error> {
    check_watched(bytes, opts, &())
}

/// [`check_with`], telling `progress` the stored bytes of the chunks it decodes.
pub fn check_watched(
    bytes: &[u8],
    opts: &DecodeOptions,
    progress: &dyn Progress,
) -> Result<Checked, Error> {
    let mut out = Collector::default();
    let mut spill = None;
    let mut hist = None;
    let mut sums = None;
    let file = TetFile::parse(bytes, &mut |_: &Finding| {});
    if let Some(file) = &file {
        let footer = history::check_footer(file);
        match footer.table(file) {
            Some(Ok(t)) => sums = Some(t),
            Some(Err(f)) => out.report(&f),
            None => {}
        }
        for (f, note) in footer.problems {
            out.report_with_note(f, note);
        }
        // The axis metadata's rules (names, coordinate lengths, referenced datasets).
        for (f, note) in tet_alloc::tet::meta::findings(file) {
            out.report_with_note(f, note);
        }
        (hist, spill) = (footer.history, footer.spill);
    }
    let summary = tet_alloc::tet::verify_owned(bytes, spill, &mut out)?;
    let mut checked = Checked {
        found: out,
        history: hist,
        operational: None,
        budget: 0,
        bad_rows: Vec::new(),
        data_end: summary.data_end,
        spill,
        checksummed: (0, 0),
        decoded: (0, 0),
    };
    let Some(file) = file else {
        return Ok(checked);
    };
    checked.checksummed = (
        u64::try_from(file.rows().len()).unwrap_or(u64::MAX),
        sums.map_or(0, |s| s.covered(&file)),
    );
    checked.budget = super::budget_for(&file, None, opts.budget);
    let table = ChunkTable::new(file)?;
    checked.decoded = (table.scan_rows(opts.deep), table.rows());
    let mismatched = sums.map_or_else(Vec::new, |s| checksum_pass(&table, &s, opts.deep));
    let pass = decode_pass(&table, opts, checked.budget, progress);
    for e in &pass.corrupt {
        if let Some(f) = e.finding() {
            checked.found.report(&f);
        }
        checked.bad_rows.push(e.row);
    }
    // A frame that does not decode is named by its decode finding; the checksum speaks
    // for raw chunks and for frames whose own checks pass.
    for f in mismatched {
        if let Some(r) = f.row.filter(|r| !checked.bad_rows.contains(r)) {
            checked.found.report(&f);
            checked.bad_rows.push(r);
        } else if f.row.is_none() {
            checked.found.report(&f);
        }
    }
    checked.operational = pass.operational;
    Ok(checked)
}

/// Checks the stored bytes of the rows the scan covers (every row with `deep`, else the
/// quick scan's) against the checksum table, in parallel; mismatches in row order.
pub fn checksum_pass(table: &ChunkTable<'_>, sums: &ChecksumTable<'_>, deep: bool) -> Vec<Finding> {
    let rows = table.scan_rows(deep);
    let mut found = Vec::new();
    let mut start = 0u64;
    while start < rows && found.len() < crate::report::KEEP {
        let end = start.saturating_add(BATCH_ROWS).min(rows);
        let bad: Vec<Finding> = (start..end)
            .into_par_iter()
            .filter_map(|r| table.chunk(r))
            .filter_map(|c| sums.check(&c).err())
            .collect();
        found.extend(bad);
        start = end;
    }
    found
}

/// What decoding found.
pub struct DecodePass {
    /// Corruption, in row order.
    pub corrupt: Vec<DecodeError>,
    /// The first operational failure (over budget, out of memory).
    pub operational: Option<DecodeError>,
}

/// Rows decoded per parallel batch: results are gathered per batch, so memory for
/// results stays bounded however many rows fail.
const BATCH_ROWS: u64 = 4096;

/// Decodes the zstd rows `opts` selects, in parallel, reporting in row order whatever
/// the thread count. Threads are reduced so that `threads × largest chunk` fits the
/// budget; a chunk that alone exceeds it is an operational failure. `progress` is told
/// the stored bytes of each chunk decoded.
pub fn decode_pass(
    table: &ChunkTable<'_>,
    opts: &DecodeOptions,
    budget: u64,
    progress: &dyn Progress,
) -> DecodePass {
    let rows = table.scan_rows(opts.deep);
    let probe: ChunkDecoder<CZstd> = ChunkDecoder::new(CZstd::new(), budget);
    let mut largest = 0u64;
    let mut stored_total = 0u64;
    let mut zstd_rows = 0u64;
    for r in 0..rows {
        if table.is_zstd(r) {
            zstd_rows = zstd_rows.saturating_add(1);
            if let Some(row) = usize::try_from(r)
                .ok()
                .and_then(|i| table.file().rows().get(i))
            {
                largest = largest.max(probe.memory_needed(row.raw_byte_len.get()));
                stored_total = stored_total.saturating_add(row.stored_byte_len.get());
            }
        }
    }
    // A raw file has nothing to decode (its checksums are the checksum pass's): no
    // pool, no walk over the rows.
    if zstd_rows == 0 {
        return DecodePass {
            corrupt: Vec::new(),
            operational: None,
        };
    }
    let wanted = opts
        .threads
        .unwrap_or_else(rayon::current_num_threads)
        .max(1);
    let fit =
        usize::try_from(budget.checked_div(largest).unwrap_or(u64::MAX)).unwrap_or(usize::MAX);
    let threads = wanted.min(fit).max(1);
    progress.begin(stored_total);
    let run = || {
        let mut pass = DecodePass {
            corrupt: Vec::new(),
            operational: None,
        };
        let mut start = 0u64;
        while start < rows {
            let end = start.saturating_add(BATCH_ROWS).min(rows);
            let errors: Vec<DecodeError> = (start..end)
                .into_par_iter()
                .filter(|r| table.is_zstd(*r))
                .filter_map(|r| table.chunk(r))
                .map_init(
                    || ChunkDecoder::new(CZstd::new(), budget),
                    |dec, c| {
                        let r = dec.decode(&c).err();
                        progress.advance(u64::try_from(c.payload.len()).unwrap_or(0));
                        r
                    },
                )
                .flatten()
                .collect();
            for e in errors {
                if e.is_operational() {
                    pass.operational.get_or_insert(e);
                } else if pass.corrupt.len() < crate::report::KEEP {
                    pass.corrupt.push(e);
                }
            }
            start = end;
        }
        pass
    };
    let pass = match rayon::ThreadPoolBuilder::new().num_threads(threads).build() {
        Ok(pool) => pool.install(run),
        Err(_) => run(),
    };
    progress.end();
    pass
}

/// What to say about chunks without a checksum table entry (`(rows, covered)`), if any.
pub fn unchecked_note((rows, covered): (u64, u64)) -> Option<String> {
    let without = rows.saturating_sub(covered);
    (without > 0).then(|| {
        format!(
            "{without} of {rows} chunk(s) carry no checksum (no table entry): raw payloads \
             among them cannot be checked, zstd frames only by their content checksum"
        )
    })
}

/// What `verify` found, as values: the findings rendered in offset order, the counts,
/// and what the scan covered. `tet-host verify` prints it (lines, one line, or
/// [`Report::json`]); the Python binding returns the same JSON.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    /// The file, as given.
    pub file: String,
    /// Whether every chunk was decoded (`--deep`), or the quick scan's first rows.
    pub deep: bool,
    /// Findings kept, in offset order (stable for equal offsets).
    pub findings: Vec<Rendered>,
    /// Errors found (kept or not).
    pub errors: u64,
    /// Warnings found (kept or not).
    pub warnings: u64,
    /// Findings counted but not kept.
    pub dropped: u64,
    /// Index rows, and how many of them have a checksum table entry that applies.
    pub checksummed: (u64, u64),
    /// Chunks the decode pass covered, of how many.
    pub decoded: (u64, u64),
    /// The first chunk the memory budget did not allow decoding, as its error says it.
    pub operational: Option<String>,
}

impl Report {
    /// The report of `checked`, a check of `bytes` (read again for the dataset names the
    /// findings mention).
    pub fn new(path: &Path, bytes: &[u8], checked: &Checked, deep: bool) -> Report {
        let found = &checked.found;
        let file = TetFile::parse(bytes, &mut |_: &Finding| {});
        let mut order: Vec<(usize, &Finding)> = found.kept.iter().enumerate().collect();
        order.sort_by_key(|(i, f)| (f.error.offset, *i));
        let names = Names::for_findings(file.as_ref(), &found.kept);
        Report {
            file: path.display().to_string(),
            deep,
            findings: order
                .iter()
                .map(|(i, f)| rendered(&names, f, found.notes.get(i)))
                .collect(),
            errors: found.errors,
            warnings: found.warnings,
            dropped: found.dropped,
            checksummed: checked.checksummed,
            decoded: checked.decoded,
            operational: checked.operational.as_ref().map(ToString::to_string),
        }
    }

    /// `incomplete` (the budget stopped the decode pass), `errors`, `warnings` or
    /// `clean`.
    pub fn status(&self) -> &'static str {
        if self.operational.is_some() {
            "incomplete"
        } else if self.errors > 0 {
            "errors"
        } else if self.warnings > 0 {
            "warnings"
        } else {
            "clean"
        }
    }

    /// Whether nothing was found (the decode pass may still be incomplete).
    pub fn is_clean(&self) -> bool {
        self.errors == 0 && self.warnings == 0
    }

    /// What the outcome is, as an error's category would say it: `None` when the file
    /// passed (warnings alone pass: nothing is wrong with the data), `resource` when the
    /// budget stopped the decode pass, `corrupt` when errors were found.
    pub fn outcome(&self) -> Option<Category> {
        if self.operational.is_some() {
            Some(Category::Resource)
        } else if self.errors > 0 {
            Some(Category::Corrupt)
        } else {
            None
        }
    }

    /// What to say about chunks without a checksum table entry, if any.
    pub fn unchecked_note(&self) -> Option<String> {
        unchecked_note(self.checksummed)
    }

    /// The `verify --json` document.
    pub fn json(&self) -> Value {
        json!({
            "file": self.file,
            "format": "tet",
            "status": self.status(),
            "scan": if self.deep { "deep" } else { "quick" },
            "errors": self.errors,
            "warnings": self.warnings,
            "findings_not_listed": self.dropped,
            "chunks": self.checksummed.0,
            "chunks_decoded": self.decoded.0,
            "chunks_without_checksum": self.checksummed.0.saturating_sub(self.checksummed.1),
            "findings": self.findings.iter().map(Rendered::json).collect::<Vec<Value>>(),
        })
    }
}

/// Checks `bytes` (the file at `path`) as `opts` asks and reports what was found; an
/// error only when the file cannot be checked at all.
pub fn report(
    path: &Path,
    bytes: &[u8],
    opts: &DecodeOptions,
    progress: &dyn Progress,
) -> Result<Report, crate::Error> {
    let checked = check_watched(bytes, opts, progress).map_err(|e| {
        crate::Error::new(e.kind.category(), format!("{}: {e}", path.display())).at(path)
    })?;
    Ok(Report::new(path, bytes, &checked, opts.deep))
}
