//! `tet-host info` and `tet-host verify` for `.tet` files.

use std::collections::BTreeMap;
use std::path::Path;

use rayon::prelude::*;
use serde_json::{json, Value};
use tet_alloc::tet::decode::{ChunkDecoder, DecodeError};
use tet_alloc::tet::scan::ChunkTable;
use tet_core::tet::{Code, Codec, Finding, Sink, Span, TetFile};
use tet_core::{Error, ErrorKind};

use crate::codec::CZstd;
use crate::history;
use crate::report::{finding_json, message, Collector, Names};
use crate::{Exit, Output};

/// Parses the footer JSON (if any) and returns the metadata spill span it names; JSON
/// problems become findings.
fn footer_checks(
    file: &TetFile<'_>,
    out: &mut Collector,
) -> (Option<history::History>, Option<Span>) {
    let Some(footer) = file.footer() else {
        return (None, None);
    };
    let at = footer.json_offset();
    match history::parse(footer.history_json()) {
        Err(e) => {
            out.report_with_note(
                Finding::new(
                    Code::FooterJson,
                    Error::new(ErrorKind::Invalid, "footer.history_json", at),
                ),
                e,
            );
            (None, None)
        }
        Ok(h) => {
            let span = h.metadata_ref.map(|(offset, len)| Span { offset, len });
            if let Some(s) = span {
                let spill = usize::try_from(s.offset).ok().and_then(|o| {
                    let end = o.checked_add(usize::try_from(s.len).ok()?)?;
                    file.bytes().get(o..end)
                });
                if let Some(bytes) = spill.filter(|_| s.offset.saturating_add(s.len) <= at) {
                    if let Err(e) = history::check_spill(bytes) {
                        out.report_with_note(
                            Finding::new(
                                Code::MetadataSpill,
                                Error::new(ErrorKind::Invalid, "metadata_spill", s.offset),
                            ),
                            e,
                        );
                    }
                }
            }
            (Some(h), span)
        }
    }
}

/// How a pass reads payloads.
#[derive(Clone, Copy, Debug, Default)]
pub struct DecodeOptions {
    /// Decode every chunk (`--deep`); otherwise the first 128 rows (quick scan).
    pub deep: bool,
    /// Threads (`-j`); `None` = one per core.
    pub threads: Option<usize>,
    /// Memory budget in bytes; `None` = the file's `TIDX` execution settings.
    pub budget: Option<u64>,
    /// Draw a progress bar on standard error.
    pub progress: bool,
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
}

/// Runs every structural check plus the quick decode scan.
pub fn check(bytes: &[u8]) -> Result<(Collector, Option<history::History>), Error> {
    let c = check_with(bytes, &DecodeOptions::default())?;
    Ok((c.found, c.history))
}

/// This machine's memory in bytes (`/proc/meminfo`), or 1 GiB when it cannot be read.
pub fn host_ram() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            let line = m.lines().find(|l| l.starts_with("MemTotal:"))?;
            let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
            kib.checked_mul(1024)
        })
        .unwrap_or(1 << 30)
}

/// Runs every structural check, then decodes the payloads `opts` asks for.
pub fn check_with(bytes: &[u8], opts: &DecodeOptions) -> Result<Checked, Error> {
    let mut out = Collector::default();
    let mut spill = None;
    let mut hist = None;
    let file = TetFile::parse(bytes, &mut |_: &Finding| {});
    if let Some(file) = &file {
        (hist, spill) = footer_checks(file, &mut out);
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
    };
    let Some(file) = file else {
        return Ok(checked);
    };
    checked.budget = crate::query_cmd::budget_for(&file, None, opts.budget);
    let table = ChunkTable::new(file)?;
    let pass = decode_pass(&table, opts, checked.budget);
    for e in &pass.corrupt {
        if let Some(f) = e.finding() {
            checked.found.report(&f);
        }
        checked.bad_rows.push(e.row);
    }
    checked.operational = pass.operational;
    Ok(checked)
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
/// budget; a chunk that alone exceeds it is an operational failure.
pub fn decode_pass(table: &ChunkTable<'_>, opts: &DecodeOptions, budget: u64) -> DecodePass {
    let rows = table.scan_rows(opts.deep);
    let probe: ChunkDecoder<CZstd> = ChunkDecoder::new(CZstd::new(), budget);
    let mut largest = 0u64;
    let mut stored_total = 0u64;
    for r in 0..rows {
        if table.is_zstd(r) {
            if let Some(row) = usize::try_from(r)
                .ok()
                .and_then(|i| table.file().rows().get(i))
            {
                largest = largest.max(probe.memory_needed(row.raw_byte_len.get()));
                stored_total = stored_total.saturating_add(row.stored_byte_len.get());
            }
        }
    }
    let wanted = opts
        .threads
        .unwrap_or_else(rayon::current_num_threads)
        .max(1);
    let fit =
        usize::try_from(budget.checked_div(largest).unwrap_or(u64::MAX)).unwrap_or(usize::MAX);
    let threads = wanted.min(fit).max(1);
    let bar = progress_bar(opts.progress, stored_total);
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
                        if let Some(b) = &bar {
                            b.inc(u64::try_from(c.payload.len()).unwrap_or(0));
                        }
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
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    pass
}

/// A progress bar on standard error (elapsed, bytes, throughput, ETA) when `wanted` and
/// standard error is a terminal; `None` otherwise.
pub fn progress_bar(wanted: bool, total: u64) -> Option<indicatif::ProgressBar> {
    use std::io::IsTerminal;
    if !wanted || !std::io::stderr().is_terminal() {
        return None;
    }
    let bar = indicatif::ProgressBar::with_draw_target(
        Some(total),
        indicatif::ProgressDrawTarget::stderr(),
    );
    if let Ok(style) = indicatif::ProgressStyle::with_template(
        "{elapsed_precise} [{bar:30}] {binary_bytes}/{binary_total_bytes} {binary_bytes_per_sec} ETA {eta}",
    ) {
        bar.set_style(style.progress_chars("=> "));
    }
    Some(bar)
}

/// The message for a chunk the budget does not allow decoding.
pub fn budget_message(e: &DecodeError) -> String {
    format!(
        "{e}; not checked. Raise the budget with --memory-budget BYTES (the default comes \
         from the file's TIDX execution settings: 25 % of RAM when they are 0)"
    )
}

/// `tet-host verify`.
pub fn verify(path: &Path, bytes: &[u8], output: Output, opts: &DecodeOptions) -> Exit {
    let checked = match check_with(bytes, opts) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("tet-host: {}: {e}", path.display());
            return Exit::Operational;
        }
    };
    let found = &checked.found;
    let file = TetFile::parse(bytes, &mut |_: &Finding| {});
    let file = file.as_ref();
    let mut findings: Vec<(usize, &Finding)> = found.kept.iter().enumerate().collect();
    findings.sort_by_key(|(i, f)| (f.error.offset, *i));
    let names = Names::for_findings(file, &found.kept);
    let msg = |i: usize, f: &Finding| message(&names, f, found.notes.get(&i));
    let status = if checked.operational.is_some() {
        "incomplete"
    } else if found.errors > 0 {
        "errors"
    } else if found.warnings > 0 {
        "warnings"
    } else {
        "clean"
    };
    match output {
        Output::Json => {
            let list: Vec<Value> = findings
                .iter()
                .map(|(i, f)| finding_json(&names, f, found.notes.get(i)))
                .collect();
            let v = json!({
                "file": path.display().to_string(),
                "format": "tet",
                "status": status,
                "scan": if opts.deep { "deep" } else { "quick" },
                "errors": found.errors,
                "warnings": found.warnings,
                "findings_not_listed": found.dropped,
                "findings": list,
            });
            println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
        }
        Output::Quiet => {
            if found.is_clean() {
                println!("{}: {status}", path.display());
            } else {
                let first = findings
                    .iter()
                    .find(|(_, f)| f.severity() == tet_core::tet::Severity::Error)
                    .or(findings.first())
                    .map(|(i, f)| {
                        format!(
                            " first: {}[{}] {}",
                            f.severity().name(),
                            f.code.as_str(),
                            msg(*i, f)
                        )
                    })
                    .unwrap_or_default();
                println!(
                    "{}: {} error(s), {} warning(s);{first}",
                    path.display(),
                    found.errors,
                    found.warnings
                );
            }
        }
        Output::Human => {
            for (i, f) in &findings {
                println!(
                    "{}[{}] {}",
                    f.severity().name(),
                    f.code.as_str(),
                    msg(*i, f)
                );
            }
            if found.dropped > 0 {
                println!("... and {} more findings not listed", found.dropped);
            }
            if found.is_clean() {
                println!("{}: {status}", path.display());
            } else {
                println!(
                    "{}: {} error(s), {} warning(s)",
                    path.display(),
                    found.errors,
                    found.warnings
                );
            }
        }
    }
    if let Some(e) = &checked.operational {
        eprintln!("tet-host: {}: {}", path.display(), budget_message(e));
        return Exit::Operational;
    }
    if found.is_clean() {
        Exit::Clean
    } else {
        Exit::Problems
    }
}

fn dims(it: impl Iterator<Item = u64>) -> String {
    it.map(|d| d.to_string()).collect::<Vec<_>>().join("×")
}

/// `tet-host info`.
pub fn info(path: &Path, bytes: &[u8], output: Output) -> Exit {
    let mut problems = Collector::default();
    let Some(file) = TetFile::parse(bytes, &mut problems) else {
        let f = problems.kept.first();
        eprintln!(
            "tet-host: {}: not a readable .tet file: {}",
            path.display(),
            f.map(|f| message(&Names::default(), f, None))
                .unwrap_or_default()
        );
        return Exit::Problems;
    };
    // Only the footer JSON is needed here; the row checks are verify's job.
    let hist = file
        .footer()
        .and_then(|f| history::parse(f.history_json()).ok());
    let sb = file.superblock();
    // Per-dataset row statistics; ids past the directory are ignored here (verify
    // reports them).
    #[derive(Default, Clone)]
    struct Stats {
        rows: u64,
        raw: u64,
        zstd: u64,
        other: u64,
        stored: u64,
    }
    let count = usize::try_from(sb.dataset_count()).unwrap_or(0);
    let mut stats = vec![Stats::default(); if file.directory().is_some() { count } else { 0 }];
    for row in file.rows() {
        let Some(s) = usize::try_from(row.dataset_id.get())
            .ok()
            .and_then(|i| stats.get_mut(i))
        else {
            continue;
        };
        s.rows = s.rows.saturating_add(1);
        match Codec::from_wire(row.codec.get()) {
            Some(Codec::Raw) => s.raw = s.raw.saturating_add(1),
            Some(Codec::Zstd) => s.zstd = s.zstd.saturating_add(1),
            None => s.other = s.other.saturating_add(1),
        }
        s.stored = s.stored.saturating_add(row.stored_byte_len.get());
    }
    let mut datasets = Vec::new();
    for (ds, st) in file.datasets().zip(stats.iter()) {
        let Ok(ds) = ds else { break };
        let mut codecs = BTreeMap::new();
        for (k, v) in [("raw", st.raw), ("zstd", st.zstd), ("unknown", st.other)] {
            if v > 0 {
                codecs.insert(k, v);
            }
        }
        datasets.push(json!({
            "id": ds.id().0,
            "name": ds.name(),
            "dtype": ds.dtype().name(),
            "shape": ds.shape().collect::<Vec<_>>(),
            "chunk_shape": ds.chunk_shape().collect::<Vec<_>>(),
            "chunk_grid": ds.grid().collect::<Vec<_>>(),
            "chunks": st.rows,
            "codecs": codecs,
            "stored_bytes": st.stored,
            "logical_bytes": ds.logical_bytes(),
        }));
    }
    let exec = file.index().map(|ix| ix.execution());
    let footer = file.footer().map(|f| {
        json!({
            "history_json_offset": f.json_offset(),
            "history_json_len": f.history_json().len(),
            "valid": hist.is_some(),
            "history_rows": hist.as_ref().map(|h| h.rows),
            "inline_metadata": hist.as_ref().map(|h| h.inline_metadata),
            "metadata_ref": hist.as_ref().and_then(|h| h.metadata_ref).map(|(o, l)| json!({"offset": o, "len": l})),
        })
    });
    let v = json!({
        "file": path.display().to_string(),
        "format": "tet",
        "file_len": bytes.len(),
        "superblock": {
            "layout_version": sb.raw().layout_version.get(),
            "dataset_count": sb.dataset_count(),
            "flags": sb.flags(),
            "history_footer": sb.has_history_footer(),
            "chunk_index_offset": sb.chunk_index_offset(),
            "chunk_index_length": sb.chunk_index_length(),
        },
        "entry_count": file.index().map(|i| i.entry_count()),
        "execution": exec.map(|e| json!({
            "memory_budget_percent_bps": e.memory_budget_percent_bps,
            "memory_budget_bytes": e.memory_budget_bytes,
        })),
        "datasets": datasets,
        "footer": footer,
        "structure_problems": problems.errors.saturating_add(problems.warnings),
    });
    match output {
        Output::Json => println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default()),
        Output::Human | Output::Quiet => print_info_human(path, &file, &v, exec, &problems),
    }
    if problems.errors > 0 {
        Exit::Problems
    } else {
        Exit::Clean
    }
}

fn print_info_human(
    path: &Path,
    file: &TetFile<'_>,
    v: &Value,
    exec: Option<tet_core::tet::ExecutionSettings>,
    problems: &Collector,
) {
    let sb = file.superblock();
    println!(
        "file:        {} ({} bytes)",
        path.display(),
        file.bytes().len()
    );
    println!(
        "superblock:  layout v1, {} dataset(s), flags {:#x}{}",
        sb.dataset_count(),
        sb.flags(),
        if sb.has_history_footer() {
            " (history footer)"
        } else {
            ""
        }
    );
    match file.index() {
        Some(ix) => println!(
            "chunk index: offset {:#x}, length {} bytes, {} row(s)",
            ix.offset(),
            sb.chunk_index_length(),
            ix.entry_count()
        ),
        None => println!("chunk index: none"),
    }
    if let Some(e) = exec {
        let bps = |b: u16| format!("{}.{:02} %", b / 100, b % 100);
        let pct = match e.memory_budget_percent_bps {
            0 => format!(
                "default ({})",
                bps(tet_core::tet::ExecutionSettings::DEFAULT_PERCENT_BPS)
            ),
            b => bps(b),
        };
        let fixed = match e.memory_budget_bytes {
            0 => "none".to_string(),
            b => format!("{b} bytes"),
        };
        println!("execution:   memory budget {pct} of host RAM, fixed cap {fixed}");
    }
    if let Some(list) = v["datasets"].as_array().filter(|l| !l.is_empty()) {
        let header = [
            "id", "name", "dtype", "shape", "chunk", "grid", "chunks", "codecs", "stored",
            "logical",
        ];
        let rows: Vec<Vec<String>> = list
            .iter()
            .map(|d| {
                let dimstr = |k: &str| {
                    dims(
                        d[k].as_array()
                            .into_iter()
                            .flatten()
                            .filter_map(Value::as_u64),
                    )
                };
                let codecs = d["codecs"]
                    .as_object()
                    .map(|m| {
                        m.iter()
                            .map(|(k, v)| format!("{k} {v}"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    })
                    .unwrap_or_default();
                vec![
                    d["id"].to_string(),
                    d["name"].as_str().unwrap_or_default().to_string(),
                    d["dtype"].as_str().unwrap_or_default().to_string(),
                    dimstr("shape"),
                    dimstr("chunk_shape"),
                    dimstr("chunk_grid"),
                    d["chunks"].to_string(),
                    if codecs.is_empty() {
                        "-".into()
                    } else {
                        codecs
                    },
                    d["stored_bytes"].to_string(),
                    d["logical_bytes"].to_string(),
                ]
            })
            .collect();
        let widths: Vec<usize> = (0..header.len())
            .map(|c| {
                rows.iter()
                    .filter_map(|r| r.get(c))
                    .map(|s| s.chars().count())
                    .chain(header.get(c).map(|h| h.len()))
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        println!("datasets:");
        let line = |cells: Vec<String>| {
            let parts: Vec<String> = cells
                .iter()
                .zip(&widths)
                .map(|(s, w)| format!("{s}{}", " ".repeat(w.saturating_sub(s.chars().count()))))
                .collect();
            println!("  {}", parts.join("  ").trim_end());
        };
        line(header.iter().map(|s| s.to_string()).collect());
        for r in rows {
            line(r);
        }
    } else {
        println!("datasets:    none");
    }
    let f = &v["footer"];
    if f.is_null() {
        println!(
            "footer:      {}",
            if file.footer_invalid() {
                "flag set but the tail is malformed"
            } else {
                "none"
            }
        );
    } else {
        println!(
            "footer:      history_json {} bytes at {:#x}, {}",
            f["history_json_len"],
            f["history_json_offset"].as_u64().unwrap_or(0),
            if f["valid"].as_bool() == Some(true) {
                format!("{} history row(s)", f["history_rows"])
            } else {
                "invalid JSON (run verify)".to_string()
            }
        );
    }
    if problems.errors > 0 || problems.warnings > 0 {
        println!(
            "structure:   {} error(s), {} warning(s) in fixed structures; run `tet-host verify`",
            problems.errors, problems.warnings
        );
    }
}
