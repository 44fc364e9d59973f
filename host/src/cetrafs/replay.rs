//! `tet-host replay`: journal replay only.

use std::path::Path;

use serde_json::json;
use tet_core::cetrafs::{Buffers, Finding};

use super::*;
use crate::{Exit, Output};

/// `tet-host replay IMAGE`: journal replay only (as e2fsck's `-E journal_only`). Exit 0
/// when no journal was dirty, 1 when journals were replayed, 4 when some slots conflict
/// (reported, not written) or the image is shorter than its filesystem (refused: it is
/// only read), 8 when refused (a live node's journal, another replayer's claim) or the
/// image cannot be written.
pub fn replay(
    path: &Path,
    dev: &crate::cetrafs::device::FileDevice,
    node_id: u64,
    force: bool,
    output: Output,
) -> Exit {
    use tet_core::cetrafs::replay::{replay as run, ReplayError, ReplayOptions};
    let mut bufs = Buffers::new();
    let fs = match open_fs_to_write(path, dev) {
        Ok(f) => f,
        Err(e) => return e,
    };
    let mut table = match tet_alloc::cetrafs::journal::committed_slots(&fs, &mut bufs) {
        Ok(t) => t,
        Err(e) => {
            crate::say!("{}: {}", path.display(), describe(&e));
            return Exit::of(e.kind.category());
        }
    };
    let mut conflicts: Vec<Finding> = Vec::new();
    let r = run(
        &fs,
        ReplayOptions { node_id, force },
        &mut table,
        &mut bufs,
        &mut |f: &Finding| conflicts.push(*f),
    );
    let report = match r {
        Ok(r) => r,
        Err(e) => {
            let why = match e {
                ReplayError::LiveNode { row, node_id } => format!(
                    "the journal of node {node_id} (registry row {row}) needs replay, but the \
                     registry shows that node ACTIVE: it replays its own journal. If it is \
                     down, fence it or pass --force"
                ),
                ReplayError::Claimed { row, owner } => format!(
                    "the journal of registry row {row} is being replayed by node {owner}; pass \
                     --force to take it over"
                ),
                ReplayError::Device(e) => format!("replay stopped: {}", describe(&e)),
            };
            crate::say!("{}: {why}", path.display());
            return Exit::of(e.category());
        }
    };
    // A crashed writer (docs/cetrafs.md section 15): with --force, the node named by
    // --node-id is recovered (its zone groups released with their counts from the
    // bitmaps, its row LEFT), without a second node.
    let recovered = if force {
        match tet_alloc::cetrafs::write::recover(dev, node_id) {
            Ok(r) => r.row.map(|row| (row, r.released)),
            Err(e) => {
                crate::say!("{}: recovering node {node_id:#x}: {e}", path.display());
                return Exit::Operational;
            }
        }
    } else {
        None
    };
    match output {
        Output::Json => {
            let mut v = json!({"file": path.display().to_string(), "journals": report.journals,
                   "written": report.written, "already_applied": report.already,
                   "conflicts": report.conflicts,
                   "findings": conflicts.iter().map(|f| rendered(f).json()).collect::<Vec<_>>()});
            // Only when a crashed writer was recovered (the key is absent otherwise).
            if let (Some((row, zones)), Some(o)) = (recovered, v.as_object_mut()) {
                o.insert(
                    "recovered".into(),
                    json!({"node_id": node_id, "row": row, "zone_groups_released": zones}),
                );
            }
            println!("{v}");
            crate::report::printed();
        }
        _ => {
            for f in &conflicts {
                println!("{}", rendered(f).line());
            }
            if report.journals == 0 {
                println!("{}: no journal needs replay", path.display());
            } else {
                println!(
                    "{}: replayed {} journal(s): {} block(s) written, {} already applied, {} conflicting",
                    path.display(),
                    report.journals,
                    report.written,
                    report.already,
                    report.conflicts
                );
            }
        }
    }
    if output != Output::Json {
        if let Some((row, zones)) = recovered {
            println!(
                "{}: recovered node {node_id:#x}: {zones} zone group(s) released, registry row {row} LEFT",
                path.display()
            );
        }
    }
    if report.conflicts > 0 {
        Exit::Problems
    } else if report.journals > 0 || recovered.is_some() {
        Exit::Fixed
    } else {
        Exit::Clean
    }
}
