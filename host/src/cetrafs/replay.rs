//! `tet-host replay`: journal replay only.

use std::path::Path;

use serde_json::json;
use tet_core::cetrafs::{Buffers, Finding};

use super::*;
use crate::{Exit, Output};

/// Which journals and writers `replay` takes.
#[derive(Clone, Copy, Debug)]
pub struct Which {
    /// The id this tool claims journals under; with `force`, also a crashed writer to
    /// recover by its id.
    pub node_id: u64,
    /// Replay journals of rows that are `ACTIVE` or claimed by another replayer.
    pub force: bool,
    /// The command holds the image's gate (docs/cetrafs.md section 15, "Holding an
    /// image"): no process of this host is a node of it, so every `ACTIVE` or `FENCED`
    /// row is a writer that crashed, replayed and recovered without `--force`.
    pub held: bool,
}

/// `tet-host replay IMAGE`: journal replay, then every crashed writer recovered (its
/// zone groups' free counts set from the bitmaps and released, its row `LEFT`,
/// `SB_CLEAN` set again), so the image ends as clean leaves would have left it. Exit 0
/// when there was nothing to do, 1 when journals were replayed or writers recovered, 4
/// when some slots conflict (reported, not written) or the image is shorter than its
/// filesystem (refused: it is only read), 8 when refused (held by a live process,
/// another replayer's claim) or the image cannot be written.
pub fn replay(
    path: &Path,
    dev: &crate::cetrafs::device::FileDevice,
    which: Which,
    output: Output,
) -> Exit {
    use tet_core::cetrafs::replay::{replay as run, ReplayError, ReplayOptions};
    let Which {
        node_id,
        force,
        held,
    } = which;
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
        ReplayOptions {
            node_id,
            force: force || held,
        },
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
    // Each crashed writer (docs/cetrafs.md section 15, "Recovery of a crashed
    // writer"): its zone groups released with their counts from the bitmaps, its row
    // LEFT, without a second node.
    let done = if held {
        tet_alloc::cetrafs::write::recover_all(dev)
    } else if force {
        tet_alloc::cetrafs::write::recover(dev, node_id).map(|r| vec![(node_id, r)])
    } else {
        Ok(Vec::new())
    };
    let recovered: Vec<(u64, u32, u32)> = match done {
        Ok(all) => all
            .into_iter()
            .filter_map(|(id, r)| r.row.map(|row| (id, row, r.released)))
            .collect(),
        Err(e) => {
            crate::say!("{}: recovering crashed writers: {e}", path.display());
            return crate::cetrafs::write::exit_of(&e);
        }
    };
    match output {
        Output::Json => {
            let mut v = json!({"file": path.display().to_string(), "journals": report.journals,
                   "written": report.written, "already_applied": report.already,
                   "conflicts": report.conflicts,
                   "findings": conflicts.iter().map(|f| rendered(f).json()).collect::<Vec<_>>()});
            // Only when crashed writers were recovered (the key is absent otherwise).
            if let (false, Some(o)) = (recovered.is_empty(), v.as_object_mut()) {
                o.insert(
                    "recovered".into(),
                    recovered
                        .iter()
                        .map(|(id, row, zones)| {
                            json!({"node_id": id, "row": row, "zone_groups_released": zones})
                        })
                        .collect(),
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
        for (id, row, zones) in &recovered {
            println!(
                "{}: recovered node {id:#x}: {zones} zone group(s) released, registry row {row} LEFT",
                path.display()
            );
        }
    }
    if report.conflicts > 0 {
        Exit::Problems
    } else if report.journals > 0 || !recovered.is_empty() {
        Exit::Fixed
    } else {
        Exit::Clean
    }
}
