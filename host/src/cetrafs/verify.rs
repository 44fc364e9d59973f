//! `tet-host verify` for a cetrafs image: the full check.

use std::path::Path;

use serde_json::{json, Value};
use tet_alloc::cetrafs::fsck;
use tet_core::cetrafs::Finding;
use tet_core::finding::Severity;
use tet_core::{Category, ErrorKind};

use super::*;
use crate::report::{summary_line, Rendered};
use crate::{Exit, Output};

/// `tet-host verify` for an image: the full check (`tet_alloc::cetrafs::fsck`), findings in the
/// order found, exit 0 when clean (warnings included) and 4 otherwise.
pub fn verify(
    path: &Path,
    dev: Dev<'_>,
    output: Output,
    memory_limit: u64,
    superblock: Option<u64>,
) -> Exit {
    // The first findings are kept to print (crate::report::KEEP), the rest counted; what
    // decides the exit (a read that failed, a budget too small) and an image cut short
    // are noted whenever they come.
    let mut found: Vec<Finding> = Vec::new();
    let mut dropped: u64 = 0;
    let mut operational: Option<Finding> = None;
    let mut short: Option<Finding> = None;
    if let Some(lba) = superblock {
        if let Err(e) = check_pick(path, dev, lba) {
            return e;
        }
    }
    let opts = fsck::Options {
        memory_limit,
        superblock,
    };
    let ticking = Ticking::new(dev);
    let outcome = fsck::check(&ticking, &opts, &mut |f: &Finding| {
        if operational.is_none()
            && f.severity() == Severity::Error
            && matches!(f.error.kind.category(), Category::Io | Category::Resource)
        {
            operational = Some(*f);
        }
        if short.is_none() && matches!(f.error.kind, ErrorKind::ShortDevice { .. }) {
            short = Some(*f);
        }
        if found.len() < crate::report::KEEP {
            found.push(*f);
        } else {
            dropped = dropped.saturating_add(1);
        }
    });
    // The check reports an image cut short first; the commands that read say it too.
    if let Some(f) = short {
        warn_shortened(path, &f.error);
    }
    if let tet_core::cetrafs::copies::Source::Copy(lba) = outcome.superblock {
        crate::report::warn(format!(
            "{}: checked through the superblock copy in block {lba}",
            path.display()
        ));
    }
    // A primary that fails with no copy found: say what is left to try.
    let unmounted = !outcome.cross_checked
        && found.first().is_some_and(|f| {
            use tet_core::cetrafs::Code;
            f.error.offset < 4096 && matches!(f.code, Code::Mount | Code::Checksum | Code::Magic)
        });
    if unmounted && outcome.superblock == tet_core::cetrafs::copies::Source::Primary {
        say_no_copy(path);
    }
    let (errors, warnings) = (outcome.summary.errors, outcome.summary.warnings);
    let status = if errors > 0 {
        "errors"
    } else if warnings > 0 {
        "warnings"
    } else {
        "clean"
    };
    drop(ticking);
    // Inodes named by their paths, when the walk from the root reaches them.
    let names = names_for(dev, &found);
    let shown: Vec<Rendered> = found.iter().map(|f| rendered_at(f, &names)).collect();
    match output {
        Output::Json => {
            let v = json!({"file": path.display().to_string(), "format": "cetrafs", "status": status,
                "errors": errors, "warnings": warnings, "inodes": outcome.summary.inodes,
                "cross_checked": outcome.cross_checked,
                "superblock": match outcome.superblock { tet_core::cetrafs::copies::Source::Copy(b) => json!({"copy": b}), tet_core::cetrafs::copies::Source::Primary => json!("primary") },
                "findings_not_listed": dropped,
                "findings": shown.iter().map(Rendered::json).collect::<Vec<Value>>()});
            crate::report::print_json(&v);
        }
        Output::Quiet => match shown.first() {
            None => println!("{}: clean", path.display()),
            Some(r) => println!(
                "{}: {errors} error(s), {warnings} warning(s); first: {}",
                path.display(),
                r.line()
            ),
        },
        Output::Human => {
            for r in &shown {
                println!("{}", r.line());
            }
            if dropped > 0 {
                println!("... and {dropped} more findings not listed");
            }
            println!("{}", summary_line(path, errors, warnings));
        }
    }
    // A check cut short by the machine (a block that cannot be read, a memory budget
    // too small for the cross-checks) is operational, as the README's table says.
    match (operational.as_ref(), errors) {
        (Some(f), _) => {
            crate::say!(
                "{}: the check could not finish: {}",
                path.display(),
                describe(&f.error)
            );
            Exit::Operational
        }
        (None, 0) => Exit::Clean,
        (None, _) => Exit::Problems,
    }
}
