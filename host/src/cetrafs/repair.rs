//! `tet-host repair` for a cetrafs image.

use std::path::Path;

use serde_json::json;

use super::*;
use crate::{Exit, Output};

/// `tet-host repair IMAGE` for cetrafs: replay, check, fix (`tet_alloc::cetrafs::repair`),
/// in place through the journal. `-n` writes nothing; `-p` applies lossless fixes; `-y`
/// every fix; without one it asks per fix on a terminal (exit 16 when standard input is
/// not one). Exit 0 clean, 1 problems found and all corrected, 4 problems left, 8 when
/// refused or the image cannot be written.
pub fn repair(path: &Path, mode: crate::repair_mode::Mode, force: bool, output: Output) -> Exit {
    use tet_alloc::cetrafs::repair::{repair as run, Fix, Mode, RepairError, RepairOptions};
    use tet_core::cetrafs::replay::ReplayError;
    let m = match mode {
        crate::repair_mode::Mode::No => Mode::No,
        crate::repair_mode::Mode::Preen => Mode::Preen,
        crate::repair_mode::Mode::Yes | crate::repair_mode::Mode::Ask => Mode::Yes,
    };
    let asking = mode == crate::repair_mode::Mode::Ask;
    if let Err(e) = crate::repair_mode::check_can_ask(mode) {
        return e;
    }
    let opened = if m == Mode::No {
        crate::cetrafs::device::FileDevice::open(path)
    } else {
        crate::cetrafs::device::FileDevice::open_rw(path)
    };
    let dev = match opened {
        Ok(d) => d,
        Err(e) => {
            eprintln!("tet-host: cannot open {}: {e}", path.display());
            return Exit::Operational;
        }
    };
    let opts = RepairOptions {
        node_id: u64::MAX,
        force,
        memory_limit: crate::budget::host_ram() / 4,
    };
    let mut decide = |f: &Fix| -> bool {
        if !asking {
            return true;
        }
        crate::repair_mode::ask(f.lossless, f.code.as_str(), f.action)
    };
    let out = match run(&dev, m, &opts, &mut decide) {
        Ok(o) => o,
        Err(RepairError::Mounted { row, node_id }) => {
            eprintln!(
                "tet-host: {}: node {node_id} (registry row {row}) is ACTIVE: the filesystem \
                 may be mounted. Repair it offline, or pass --force",
                path.display()
            );
            return Exit::Operational;
        }
        Err(RepairError::Replay(ReplayError::LiveNode { row, node_id })) => {
            eprintln!(
                "tet-host: {}: the journal of node {node_id} (registry row {row}) needs \
                 replay but that node is ACTIVE",
                path.display()
            );
            return Exit::Operational;
        }
        Err(RepairError::Replay(ReplayError::Claimed { row, owner })) => {
            eprintln!(
                "tet-host: {}: the journal of registry row {row} is being replayed by node {owner}",
                path.display()
            );
            return Exit::Operational;
        }
        Err(RepairError::Replay(ReplayError::Device(e))) => {
            eprintln!(
                "tet-host: {}: repair stopped: {}",
                path.display(),
                describe(&e)
            );
            return Exit::Operational;
        }
        Err(RepairError::NoJournal) => {
            eprintln!(
                "tet-host: {}: no clean journal to write fixes through",
                path.display()
            );
            return Exit::Operational;
        }
    };
    let verb = if m == Mode::No { "would fix" } else { "fixed" };
    match output {
        Output::Json => println!(
            "{}",
            json!({"file": path.display().to_string(), "mode": format!("{m:?}").to_lowercase(),
                   "replayed_journals": out.replay.journals, "rounds": out.rounds,
                   "fixes": out.fixes.iter().map(|f| json!({"code": f.code.as_str(), "action": f.action, "offset": f.offset, "value": f.value, "lossless": f.lossless})).collect::<Vec<_>>(),
                   "left": out.left.iter().map(|f| rendered(f).json()).collect::<Vec<_>>()})
        ),
        _ => {
            if out.replay.journals > 0 {
                println!(
                    "replayed {} journal(s): {} block(s) written",
                    out.replay.journals, out.replay.written
                );
            }
            for f in &out.fixes {
                println!(
                    "{verb}[{}] {} (byte {:#x}){}",
                    f.code.as_str(),
                    f.action,
                    f.offset,
                    f.value.map(|v| format!(" = {v}")).unwrap_or_default()
                );
            }
            for f in &out.left {
                println!("{}", rendered(f).line_as("left"));
            }
        }
    }
    let had = out.found || out.replay.journals > 0;
    if !out.left.is_empty() || (m == Mode::No && had) {
        Exit::Problems
    } else if had || !out.fixes.is_empty() {
        Exit::Fixed
    } else {
        Exit::Clean
    }
}
