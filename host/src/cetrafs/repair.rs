//! `tet-host repair` for a cetrafs image.

use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;

use serde_json::json;
use tet_alloc::cetrafs::repair::{Fix, Mode as RepairMode, RepairOutcome};
use tet_alloc::tet::writer::Output as _;

use crate::atomic::{check_output, AtomicFile, RealFs};

use super::*;
use crate::{Exit, Output};

/// `tet-host repair IMAGE` for cetrafs: replay, check, fix (`tet_alloc::cetrafs::repair`),
/// in place through the journal. `-n` writes nothing; `-p` applies lossless fixes; `-y`
/// every fix; without one it asks per fix on a terminal (exit 16 when standard input is
/// not one). With `copy_to`, the image is first copied there (sparse, atomically) and the
/// copy repaired: the input stays byte-identical (`-n` copies nothing). An image shorter
/// than its filesystem is refused except by `-n` (exit 4). Exit 0 clean, 1 problems
/// found and all corrected, 4 problems left, 8 when refused or the image cannot be
/// written.
pub fn repair(
    path: &Path,
    copy_to: Option<&Path>,
    mode: crate::repair_mode::Mode,
    force: bool,
    superblock: Option<u64>,
    output: Output,
) -> Exit {
    use tet_alloc::cetrafs::repair::{repair as run, Fix, Mode, RepairError, RepairOptions};
    let m = match mode {
        crate::repair_mode::Mode::No => Mode::No,
        crate::repair_mode::Mode::Preen => Mode::Preen,
        crate::repair_mode::Mode::Yes | crate::repair_mode::Mode::Ask => Mode::Yes,
    };
    let asking = mode == crate::repair_mode::Mode::Ask;
    if let Err(e) = crate::repair_mode::check_can_ask(mode) {
        return e;
    }
    // What is only read may change under a live writer: said once, about the source
    // (one written in place is refused instead, below).
    if m == Mode::No || copy_to.is_some() {
        crate::cetrafs::write::warn_if_in_use(path);
    }
    let _out_hold = match copy_to.filter(|to| to.exists()) {
        Some(to) if m != Mode::No => match crate::cetrafs::write::gate("repair", to) {
            Ok(h) => h,
            Err(e) => return e,
        },
        _ => None,
    };
    if let Some(to) = copy_to {
        if let Err(e) = check_output(to, &[path], force) {
            return e;
        }
    }
    // An image cut short is only read (docs/cetrafs.md section 2, check 3): `-n` reports
    // what the check finds, every other mode is refused before anything is copied.
    if m != Mode::No {
        if let Some(e) = shortened(path) {
            refuse_shortened(path, &e);
            return Exit::of(e.kind.category());
        }
    }
    // An image whose superblock or map fails is never written (docs/cetrafs.md section
    // 14), so neither is a copy of it: it is reported as it is. (One whose group tables
    // fail is repaired: they are rebuilt from the geometry.)
    // A primary that fails while a copy passes is repaired (restored from the copy).
    let mounts = crate::cetrafs::device::FileDevice::open(path).is_ok_and(|d| {
        let mut b = Buffers::new();
        tet_core::cetrafs::copies::locate(&d, &mut b.data, d.block_count(), superblock).is_ok_and(
            |l| {
                tet_core::cetrafs::Fs::open_for_read(
                    tet_core::cetrafs::copies::Substituted::new(&d, &l.sb),
                    &mut b.data,
                )
                .is_ok()
            },
        )
    });
    let m = if copy_to.is_some() && !mounts {
        Mode::No
    } else {
        m
    };
    let path = match copy_to {
        Some(to) if m != Mode::No => {
            if let Err(e) = copy_sparse(path, to) {
                crate::say!("cannot copy {} to {}: {e}", path.display(), to.display());
                return Exit::Operational;
            }
            to
        }
        _ => path,
    };
    // Written in place: nobody else may hold it meanwhile (--force or not). An output
    // over an existing image: that image is held for the copy and the rename.
    let _hold = if m == Mode::No {
        None
    } else {
        match crate::cetrafs::write::gate("repair", path) {
            Ok(h) => h,
            Err(e) => return e,
        }
    };
    let opened = if m == Mode::No {
        crate::cetrafs::device::FileDevice::open(path)
    } else {
        crate::cetrafs::device::FileDevice::open_rw(path)
    };
    let dev = match opened {
        Ok(d) => d,
        Err(e) => {
            crate::say!("cannot open {}: {e}", path.display());
            return Exit::Operational;
        }
    };
    if let Some(lba) = superblock {
        if let Err(e) = check_pick(path, &dev, lba) {
            return e;
        }
    }
    let opts = RepairOptions {
        node_id: u64::MAX,
        force,
        memory_limit: crate::budget::host_ram() / 4,
        superblock,
    };
    let mut asker = crate::repair_mode::Asker::default();
    let mut decide = |f: &Fix| -> bool {
        if !asking {
            return true;
        }
        let key = format!("{} {:#x}", f.action, f.offset);
        asker.ask(f.lossless, f.code.as_str(), f.action, &key)
    };
    // A bar while it runs, on a terminal, unless it asks questions there.
    let out = match if asking {
        run(&dev, m, &opts, &mut decide)
    } else {
        run(Ticking::new(&dev), m, &opts, &mut decide)
    } {
        Ok(o) => o,
        Err(e) => {
            // The library's message; the remedy for a mounted image is this tool's.
            let hint = match e {
                RepairError::Mounted { .. } => ". Repair it offline, or pass --force",
                _ => "",
            };
            crate::say!("{}: {e}{hint}", path.display());
            return Exit::of(e.category());
        }
    };
    // The inodes of what is left, named by their paths as the image now reads.
    let names = names_for(&dev, &out.left);
    match output {
        Output::Json => {
            println!(
                "{}",
                json!({"file": path.display().to_string(), "mode": format!("{m:?}").to_lowercase(),
                       "replayed_journals": out.replay.journals, "rounds": out.rounds,
                       "fixes": out.fixes.iter().map(|f| json!({"code": f.code.as_str(), "action": f.action, "offset": f.offset, "value": f.value, "lossless": f.lossless, "paths": out.names.iter().filter(|(at, _)| *at == f.offset).map(|(_, p)| escaped(p)).collect::<Vec<_>>()})).collect::<Vec<_>>(),
                       "left": out.left.iter().map(|f| rendered_at(f, &names).json()).collect::<Vec<_>>(),
                       "needs_yes": withheld(&out).iter().map(|f| json!({"code": f.code.as_str(), "action": f.action, "offset": f.offset, "value": f.value})).collect::<Vec<_>>()})
            );
            crate::report::printed();
        }
        _ => {
            if let Err(e) = render(
                &mut io::BufWriter::new(io::stdout().lock()),
                path,
                m,
                &out,
                &names,
            ) {
                return crate::cli::stdout_failed(&e);
            }
        }
    }
    let had = out.found || out.replay.journals > 0;
    if !out.left.is_empty() || (m == Mode::No && had) {
        Exit::Problems
    } else if m == Mode::No {
        // What -n would do to an image with nothing wrong (add superblock copies).
        Exit::Clean
    } else if had || !out.fixes.is_empty() {
        Exit::Fixed
    } else {
        Exit::Clean
    }
}

/// The fixes `-p` (or an answer) held back, each once: what `-y` would do about the
/// findings left, in its own words (each says what it loses).
fn withheld(out: &RepairOutcome) -> Vec<Fix> {
    let mut seen: Vec<Fix> = Vec::new();
    for f in &out.withheld {
        if !seen
            .iter()
            .any(|s| s.action == f.action && s.offset == f.offset)
        {
            seen.push(*f);
        }
    }
    seen
}

/// The human report: replay, fixes, findings left, and what `-y` would do about them.
fn render(
    w: &mut impl Write,
    path: &Path,
    m: RepairMode,
    out: &RepairOutcome,
    names: &Names,
) -> io::Result<()> {
    let verb = if m == RepairMode::No {
        "would fix"
    } else {
        "fixed"
    };
    if out.replay.journals > 0 {
        writeln!(
            w,
            "replayed {} journal(s): {} block(s) written",
            out.replay.journals, out.replay.written
        )?;
    }
    // The paths a lossy fix touches, after it.
    let named = |f: &Fix| -> String {
        let paths: Vec<String> = out
            .names
            .iter()
            .filter(|(at, _)| *at == f.offset)
            .map(|(_, p)| escaped(p))
            .collect();
        if paths.is_empty() {
            String::new()
        } else {
            format!(": {}", paths.join(", "))
        }
    };
    // -n lists each finding once, with what a repair would do about it (a fix of its code
    // in its block); what no fix answers is left, and fixes no finding names (a count
    // that follows from another fix, /lost+found made) come after.
    let answers = |x: &Fix, f: &tet_core::cetrafs::Finding| {
        use tet_core::cetrafs::Code;
        // A bad magic or checksum is reported under its own code whatever the structure;
        // a group table rebuilt answers whatever made it fail.
        let related = x.code == f.code
            || x.code == Code::Mount
            || matches!(f.code, Code::Magic | Code::Checksum);
        let block = tet_core::block::BLOCK_SIZE_U64;
        related && x.offset / block == f.error.offset / block
    };
    let needs = |x: &Fix| {
        if m == RepairMode::No && !x.lossless {
            " (needs -y)"
        } else {
            ""
        }
    };
    let value = |x: &Fix| x.value.map(|v| format!(" = {v}")).unwrap_or_default();
    if m == RepairMode::No {
        for f in &out.left {
            let r = rendered_at(f, names);
            match out
                .fixes
                .iter()
                .filter(|x| answers(x, f))
                .collect::<Vec<_>>()[..]
            {
                [] => writeln!(w, "{}", r.line_as("left"))?,
                ref xs => {
                    let what: Vec<String> = xs
                        .iter()
                        .map(|x| format!("{}{}{}{}", x.action, needs(x), value(x), named(x)))
                        .collect();
                    writeln!(w, "{} -> {}", r.line_as(verb), what.join("; "))?;
                }
            }
        }
    }
    for x in &out.fixes {
        if m == RepairMode::No && out.left.iter().any(|f| answers(x, f)) {
            continue;
        }
        writeln!(
            w,
            "{verb}[{}]{} {} (byte {:#x}){}{}",
            x.code.as_str(),
            needs(x),
            x.action,
            x.offset,
            value(x),
            named(x)
        )?;
    }
    if m != RepairMode::No {
        for f in &out.left {
            writeln!(w, "{}", rendered_at(f, names).line_as("left"))?;
        }
    }
    let held = withheld(out);
    if m != RepairMode::No && !held.is_empty() {
        writeln!(w, "repair -y would also (each loses what it says):")?;
        for f in &held {
            writeln!(
                w,
                "needs -y[{}] {} (byte {:#x}){}",
                f.code.as_str(),
                f.action,
                f.offset,
                named(f)
            )?;
        }
    }
    if out.replay.journals == 0 && out.fixes.is_empty() && out.left.is_empty() {
        let held = withheld(out).len();
        if held == 0 {
            writeln!(w, "{}: clean, nothing to repair", path.display())?;
        } else {
            writeln!(
                w,
                "{}: no errors; {held} change(s) above need -y, nothing written",
                path.display()
            )?;
        }
    }
    w.flush()
}

/// Copies the file at `from` to a new file `to`, atomically; all-zero blocks stay holes,
/// as in an image `mkfs` writes.
fn copy_sparse(from: &Path, to: &Path) -> io::Result<()> {
    let mut src = File::open(from)?;
    // From the end, not the metadata: a block device's metadata says 0 bytes.
    let len = std::io::Seek::seek(&mut src, std::io::SeekFrom::End(0))?;
    let mut out = AtomicFile::create(to, RealFs)?;
    let mut buf = vec![0u8; 1 << 20];
    let mut at = 0u64;
    loop {
        let n = src.read_at(&mut buf, at)?;
        if n == 0 {
            break;
        }
        let mut block_at = at;
        for block in buf.get(..n).unwrap_or(&[]).chunks(4096) {
            if block.iter().any(|b| *b != 0) {
                out.write_at(block_at, block)?;
            }
            block_at = block_at.saturating_add(u64::try_from(block.len()).unwrap_or(0));
        }
        at = block_at;
    }
    out.set_len(len)?;
    out.commit()
}
