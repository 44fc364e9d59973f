//! `tet-host repair` for `.tet` files: check (every chunk decoded), plan fixes with
//! `tet_alloc::tet::repair`, choose them by mode, write the result crash-safely, and check
//! the result again.
//!
//! The conventions, shared with the cetrafs repair:
//!
//! | mode | applies |
//! | --- | --- |
//! | `-n` | nothing; prints what it would do |
//! | `-p` | fixes that lose nothing |
//! | `-y` | every fix, including those that lose something (each named as such) |
//! | none | asks per fix on a terminal; refuses (exit 16) when standard input is not one |
//!
//! Exit codes: 0 nothing to fix, 1 problems found and all corrected, 4 problems left,
//! 8 operational error (nothing written), 16 usage error.

use std::path::Path;

use tet_alloc::tet::repair::{self, Inputs, Plan};
use tet_core::tet::TetFile;

use super::verify::{check_watched, DecodeOptions};
use super::{budget_message, now_rfc3339};
use crate::atomic::{AtomicFile, FsOps, RealFs};
use crate::repair_mode::{check_can_ask, Asker, Mode};
use crate::tet::report::{rendered, Names};
use crate::Exit;

/// Options of `tet-host repair`.
#[derive(Clone, Copy, Debug)]
pub struct RepairOptions<'a> {
    /// Mode.
    pub mode: Mode,
    /// Write here instead of replacing the input.
    pub output: Option<&'a Path>,
    /// Replace undecodable chunks by zeros / NaN (lossy; with `-y` or when asked).
    pub zero_bad_chunks: bool,
    /// How payloads are decoded (always every chunk).
    pub decode: DecodeOptions,
    /// Replace `output` when it exists (never when it is the input).
    pub force: bool,
}

/// `tet-host repair FILE`, with the real file system.
pub fn repair(path: &Path, bytes: &[u8], opts: &RepairOptions<'_>) -> Exit {
    repair_with(path, bytes, opts, RealFs)
}

/// `tet-host repair FILE` with file-system steps from `ops` (tests stop them midway).
pub fn repair_with<F: FsOps + Clone>(
    path: &Path,
    bytes: &[u8],
    opts: &RepairOptions<'_>,
    ops: F,
) -> Exit {
    round(path, bytes, opts, ops, 0)
}

/// One check, plan and write; a plan that says the result reads further (`again`) is
/// followed by another round on what it wrote, up to 4 in all (a superblock magic, then
/// the index magic, then rows' coordinates, then the chunks they reach).
fn round<F: FsOps + Clone>(
    path: &Path,
    bytes: &[u8],
    opts: &RepairOptions<'_>,
    ops: F,
    n: u32,
) -> Exit {
    if let Err(e) = check_can_ask(opts.mode) {
        return e;
    }
    if let Some(out) = opts.output {
        if let Err(e) = crate::atomic::check_output(out, &[path], opts.force) {
            return e;
        }
    }
    let decode = DecodeOptions {
        deep: true,
        ..opts.decode
    };
    let checked = match check_watched(bytes, &decode, &crate::progress::Bar::new(true)) {
        Ok(c) => c,
        Err(e) => {
            crate::say!("{}: {e}", path.display());
            return Exit::of(e.kind.category());
        }
    };
    if let Some(e) = &checked.operational {
        crate::say!(
            "{}: {}; nothing was written",
            path.display(),
            budget_message(e)
        );
        return Exit::Operational;
    }
    let findings = &checked.found.kept;
    if checked.found.dropped > 0 {
        crate::say!(
            "{}: more than {} findings; repair works on the first ones only, \
             run it again afterwards",
            path.display(),
            findings.len()
        );
    }
    if findings.is_empty() {
        println!("{}: clean, nothing to repair", path.display());
        return Exit::Clean;
    }
    let inputs = Inputs {
        bytes,
        findings,
        bad_rows: &checked.bad_rows,
        data_end: checked.data_end,
        metadata_spill: checked.spill,
        zero_bad_chunks: opts.zero_bad_chunks,
    };
    let plan = repair::plan(&inputs);
    let mut asker = Asker::default();
    let chosen: Vec<bool> = plan
        .fixes
        .iter()
        .map(|f| match opts.mode {
            Mode::No => false,
            Mode::Preen => !f.lossy,
            Mode::Yes => true,
            Mode::Ask => asker.ask(!f.lossy, f.code.as_str(), &f.description, &f.description),
        })
        .collect();
    report_plan(bytes, &plan, &chosen, opts.mode);
    let any = chosen.iter().any(|c| *c);
    if !any {
        println!(
            "{}: {} problem(s), {} fixable; nothing written",
            path.display(),
            findings.len(),
            plan.fixes.len()
        );
        return Exit::Problems;
    }
    let target = opts.output.unwrap_or(path);
    let mut out = match AtomicFile::create(target, ops.clone()) {
        Ok(o) => o,
        Err(e) => {
            crate::say!("cannot create a file beside {}: {e}", target.display());
            return Exit::Operational;
        }
    };
    if let Err(e) = repair::apply(&inputs, &plan, &chosen, &now_rfc3339(), &mut out) {
        crate::say!("{}: {e}; the original is unchanged", target.display());
        return Exit::Operational;
    }
    if let Err(e) = out.commit() {
        crate::say!("{}: {e}; the original is unchanged", target.display());
        return Exit::Operational;
    }
    // Check what was written.
    // Mapped like the input, so checking the result costs no more memory than checking
    // the original did.
    let written = match crate::input::Input::open(target) {
        Ok(b) => b,
        Err(e) => {
            crate::say!("cannot read back {}: {e}", target.display());
            return Exit::Operational;
        }
    };
    let after = match check_watched(written.bytes(), &decode, &crate::progress::Bar::new(true)) {
        Ok(c) => c,
        Err(e) => {
            crate::say!("{}: {e}", target.display());
            return Exit::Operational;
        }
    };
    let left = after.found.kept.len();
    if left > 0 && plan.again && n < 3 {
        println!(
            "{}: the restored structure reads further; checking again",
            target.display()
        );
        let next = RepairOptions {
            output: None,
            force: true,
            ..*opts
        };
        return round(target, written.bytes(), &next, ops, n.saturating_add(1));
    }
    if left == 0 && after.operational.is_none() {
        println!("{}: repaired; verifies clean", target.display());
        Exit::Fixed
    } else {
        println!(
            "{}: {left} problem(s) left; run `tet-host verify --deep` for details",
            target.display()
        );
        Exit::Problems
    }
}

fn report_plan(bytes: &[u8], plan: &Plan, chosen: &[bool], mode: Mode) {
    for (f, c) in plan.fixes.iter().zip(chosen) {
        let verb = match (c, mode) {
            (true, _) => "fixed",
            (false, Mode::No) => "would fix",
            (false, _) if f.lossy => "left (lossy; -y)",
            (false, _) => "left",
        };
        println!("{verb}[{}] {}", f.code.as_str(), f.description);
    }
    let file = TetFile::parse(bytes, &mut |_: &tet_core::tet::Finding| {});
    let names = Names::for_findings(file.as_ref(), &plan.unfixable);
    for f in &plan.unfixable {
        let hint = if tet_alloc::tet::repair::is_bad_chunk_code(f.code) {
            " (--zero-bad-chunks -y replaces the chunk)"
        } else {
            " (no safe fix)"
        };
        println!("{}{hint}", rendered(&names, f, None).line_as("unfixed"));
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn time_stamps_are_rfc3339() {
        let t = super::now_rfc3339();
        assert_eq!(t.len(), 20, "{t}");
        assert!(t.starts_with("20") && t.ends_with('Z') && t.as_bytes().get(10) == Some(&b'T'));
    }
}
