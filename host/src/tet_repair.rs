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


use std::io::{BufRead, IsTerminal, Write};
use std::path::Path;

use tet_alloc::tet::repair::{self, Fix, Inputs, Plan};
use tet_core::tet::TetFile;

use crate::atomic::{AtomicFile, FsOps, RealFs};
use crate::report::{message, Names};
use crate::tet_cmd::{budget_message, check_with, DecodeOptions};
use crate::Exit;

/// How fixes are chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// `-n`: change nothing.
    No,
    /// `-p`: lossless fixes only.
    Preen,
    /// `-y`: every fix.
    Yes,
    /// Ask per fix.
    Ask,
}

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

fn ask(fix: &Fix) -> bool {
    eprint!(
        "{}[{}] {}? [y/N] ",
        if fix.lossy { "lossy fix" } else { "fix" },
        fix.code.as_str(),
        fix.description
    );
    let _ = std::io::stderr().flush();
    let mut line = String::new();
    if std::io::stdin().lock().read_line(&mut line).is_err() {
        return false;
    }
    matches!(line.trim(), "y" | "Y" | "yes")
}

/// `tet-host repair FILE`, with the real file system.
pub fn repair(path: &Path, bytes: &[u8], opts: &RepairOptions<'_>) -> Exit {
    repair_with(path, bytes, opts, RealFs)
}

/// `tet-host repair FILE` with file-system steps from `ops` (tests stop them midway).
pub fn repair_with<F: FsOps>(path: &Path, bytes: &[u8], opts: &RepairOptions<'_>, ops: F) -> Exit {
    if opts.mode == Mode::Ask && !std::io::stdin().is_terminal() {
        eprintln!(
            "tet-host: repair needs -n, -p or -y when standard input is not a terminal \
             (it asks before each fix otherwise)"
        );
        return Exit::Usage;
    }
    let decode = DecodeOptions {
        deep: true,
        ..opts.decode
    };
    let checked = match check_with(bytes, &decode) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("tet-host: {}: {e}", path.display());
            return Exit::Operational;
        }
    };
    if let Some(e) = &checked.operational {
        eprintln!(
            "tet-host: {}: {}; nothing was written",
            path.display(),
            budget_message(e)
        );
        return Exit::Operational;
    }
    let findings = &checked.found.kept;
    if checked.found.dropped > 0 {
        eprintln!(
            "tet-host: {}: more than {} findings; repair works on the first ones only, \
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
    let chosen: Vec<bool> = plan
        .fixes
        .iter()
        .map(|f| match opts.mode {
            Mode::No => false,
            Mode::Preen => !f.lossy,
            Mode::Yes => true,
            Mode::Ask => ask(f),
        })
        .collect();
    report_plan(path, bytes, &plan, &chosen, opts.mode);
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
    let mut out = match AtomicFile::create(target, ops) {
        Ok(o) => o,
        Err(e) => {
            eprintln!(
                "tet-host: cannot create a file beside {}: {e}",
                target.display()
            );
            return Exit::Operational;
        }
    };
    if let Err(e) = repair::apply(&inputs, &plan, &chosen, &now_rfc3339(), &mut out) {
        eprintln!(
            "tet-host: {}: {e}; the original is unchanged",
            target.display()
        );
        return Exit::Operational;
    }
    if let Err(e) = out.commit() {
        eprintln!(
            "tet-host: {}: {e}; the original is unchanged",
            target.display()
        );
        return Exit::Operational;
    }
    // Check what was written.
    // Mapped like the input, so checking the result costs no more memory than checking
    // the original did.
    let written = match crate::input::Input::open(target) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("tet-host: cannot read back {}: {e}", target.display());
            return Exit::Operational;
        }
    };
    let after = match check_with(written.bytes(), &decode) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("tet-host: {}: {e}", target.display());
            return Exit::Operational;
        }
    };
    let left = after.found.kept.len();
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

fn report_plan(path: &Path, bytes: &[u8], plan: &Plan, chosen: &[bool], mode: Mode) {
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
        let hint = if matches!(
            f.code,
            tet_core::tet::Code::ZstdFrame
                | tet_core::tet::Code::ZstdWindow
                | tet_core::tet::Code::DecodedLength
                | tet_core::tet::Code::ContentChecksum
                | tet_core::tet::Code::ZstdTrailing
        ) {
            " (--zero-bad-chunks -y replaces the chunk)"
        } else {
            " (no safe fix)"
        };
        println!(
            "unfixed[{}] {}{hint}",
            f.code.as_str(),
            message(&names, f, None)
        );
    }
    let _ = path;
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
