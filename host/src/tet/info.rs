//! `tet-host info` for `.tet` files.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{json, Value};
use tet_core::tet::{Codec, TetFile};

pub use tet_std::tet::info::{history_json, metadata_json};

use crate::tet::report::{message, Collector, Names};
use crate::{Exit, Output};
use tet_alloc::tet::history;

fn dims(it: impl Iterator<Item = u64>) -> String {
    it.map(|d| d.to_string()).collect::<Vec<_>>().join("×")
}

/// What `info` prints besides the structure.
#[derive(Clone, Copy, Debug, Default)]
pub struct More {
    /// `--metadata`: dimension names, coordinates and attrs per dataset.
    pub metadata: bool,
    /// `--history`: the footer's history rows.
    pub history: bool,
}

/// `tet-host info`.
pub fn info(path: &Path, bytes: &[u8], output: Output) -> Exit {
    info_with(path, bytes, output, More::default())
}

fn at<'v>(v: &'v Value, k: &str) -> &'v Value {
    v.get(k).unwrap_or(&Value::Null)
}

fn set(v: &mut Value, k: &str, x: Value) {
    if let Some(o) = v.as_object_mut() {
        o.insert(k.to_string(), x);
    }
}

/// One attribute line of `info --metadata`; a value of several lines (a NetCDF
/// `history`) goes on, each line under the first, so the listing keeps its layout.
fn print_attr(key: &str, value: &Value) {
    let text = value
        .as_str()
        .map_or_else(|| value.to_string(), str::to_string);
    let mut lines = text.lines();
    println!("  attr:   {key} = {}", lines.next().unwrap_or_default());
    let pad = " ".repeat(
        "  attr:   "
            .len()
            .saturating_add(key.chars().count())
            .saturating_add(3),
    );
    for l in lines {
        println!("{pad}{l}");
    }
}

fn print_more(v: &Value) {
    if let Some(m) = v.get("metadata") {
        if let Some(e) = m.get("error") {
            println!("metadata:    {}", e.as_str().unwrap_or_default());
        }
        if let Some(f) = m.get("file").filter(|f| !f.is_null()) {
            let s = |k: &str| f[k].as_str().unwrap_or("-").to_string();
            println!(
                "written by:  {} {} at {}",
                s("tool"),
                s("library_version"),
                s("created_at")
            );
        }
        let list = at(m, "datasets").as_array().cloned().unwrap_or_default();
        let groups = at(m, "groups").as_array().cloned().unwrap_or_default();
        if list.is_empty() && groups.is_empty() && m.get("error").is_none() {
            println!("metadata:    no dimension names, coordinates or attrs");
        }
        for g in &groups {
            println!(
                "attrs of group {}:",
                at(g, "group").as_str().unwrap_or_default()
            );
            for (k, val) in at(g, "attrs").as_object().into_iter().flatten() {
                print_attr(k, val);
            }
        }
        for d in list {
            println!(
                "metadata of {}:",
                at(&d, "dataset").as_str().unwrap_or_default()
            );
            if let Some(n) = at(&d, "dims").as_array() {
                let n: Vec<&str> = n.iter().filter_map(Value::as_str).collect();
                println!("  dims:   ({})", n.join(", "));
            }
            if let Some(s) = at(&d, "source_shape").as_array() {
                let s: Vec<String> = s.iter().map(ToString::to_string).collect();
                println!(
                    "  shape:  ({}) in the source (export gives it back so)",
                    s.join(", ")
                );
            }
            for c in at(&d, "coords").as_array().into_iter().flatten() {
                let name = at(c, "dim")
                    .as_str()
                    .map_or_else(|| format!("axis {}", at(c, "axis")), str::to_string);
                let from = match at(c, "dataset").as_str() {
                    Some(ds) => format!("dataset {ds}"),
                    None => "labels".to_string(),
                };
                match c.get("error") {
                    Some(e) => println!("  coord:  {name} ({from}): {}", e.as_str().unwrap_or("")),
                    None => {
                        let dates =
                            match (at(c, "first_date").as_str(), at(c, "last_date").as_str()) {
                                (Some(a), Some(b)) => format!(" ({a} .. {b})"),
                                _ => String::new(),
                            };
                        println!(
                            "  coord:  {name} ({from}), {} value(s), {} .. {}{dates}",
                            at(c, "len"),
                            at(c, "first"),
                            at(c, "last")
                        );
                    }
                }
            }
            for (k, val) in at(&d, "attrs").as_object().into_iter().flatten() {
                print_attr(k, val);
            }
        }
    }
    if let Some(h) = v.get("history") {
        match h.as_array() {
            Some(rows) if rows.is_empty() => println!("history:     no rows"),
            Some(rows) => {
                println!("history:");
                for r in rows {
                    let s = |k: &str| r[k].as_str().unwrap_or("-").to_string();
                    let params = at(r, "params")
                        .as_object()
                        .map(|p| {
                            p.iter()
                                .map(|(k, v)| {
                                    format!(
                                        "{k}={}",
                                        v.as_str().map_or_else(|| v.to_string(), str::to_string)
                                    )
                                })
                                .collect::<Vec<_>>()
                                .join(" ")
                        })
                        .unwrap_or_default();
                    println!("  {}  {}  {}  {params}", s("at"), s("op"), s("source"));
                }
            }
            None => println!(
                "history:     {}",
                at(h, "error").as_str().unwrap_or("unreadable")
            ),
        }
    }
}

/// `tet-host info` with `--metadata` and `--history`.
pub fn info_with(path: &Path, bytes: &[u8], output: Output, more: More) -> Exit {
    let mut problems = Collector::default();
    let Some(file) = TetFile::parse(bytes, &mut problems) else {
        let f = problems.kept.first();
        crate::say!(
            "{}: not a readable .tet file: {}",
            path.display(),
            f.map(|f| message(&Names::default(), f, None))
                .unwrap_or_default()
        );
        return Exit::Problems;
    };
    for w in crate::tet::read_warnings(&history::reading(file).problems) {
        crate::errln!("tet-host: {}: {w}", path.display());
    }
    // A broken footer tail is warned about above; it hides nothing else.
    let footer_errors = problems
        .kept
        .iter()
        .filter(|f| f.code.is_footer_tail())
        .map(|_| 1u64)
        .sum::<u64>();
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
    let sums = history::check_footer(&file)
        .table(&file)
        .and_then(Result::ok);
    let rows = u64::try_from(file.rows().len()).unwrap_or(u64::MAX);
    let covered = sums.map_or(0, |s| s.covered(&file));
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
        "checksums": {
            "algorithm": sums.map(|_| "crc32c"),
            "table_offset": sums.map(|s| s.offset()),
            "chunks": rows,
            "chunks_without_checksum": rows.saturating_sub(covered),
        },
        "structure_problems": problems.errors.saturating_add(problems.warnings),
    });
    let mut v = v;
    if more.metadata {
        set(&mut v, "metadata", metadata_json(&file));
    }
    if more.history {
        set(&mut v, "history", history_json(&file));
    }
    match output {
        Output::Json => crate::report::print_json(&v),
        Output::Human | Output::Quiet => {
            print_info_human(path, &file, &v, exec, &problems);
            print_more(&v);
        }
    }
    if problems.errors > footer_errors {
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
    let c = &v["checksums"];
    match c["table_offset"].as_u64() {
        Some(at) => println!(
            "checksums:   CRC-32C table at {at:#x}; {} of {} chunk(s) carry no checksum",
            c["chunks_without_checksum"], c["chunks"]
        ),
        None => println!(
            "checksums:   none; {} of {} chunk(s) carry no checksum",
            c["chunks_without_checksum"], c["chunks"]
        ),
    }
    if problems.errors > 0 || problems.warnings > 0 {
        println!(
            "structure:   {} error(s), {} warning(s) in fixed structures; run `tet-host verify`",
            problems.errors, problems.warnings
        );
    }
}
