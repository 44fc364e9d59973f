//! `tet-host verify` for a cetrafs image: the full check.

use std::path::Path;

use serde_json::{json, Value};
use tet_alloc::cetrafs::fsck;
use tet_core::block::BLOCK_SIZE_U64;
use tet_core::cetrafs::Finding;

use super::*;
use crate::{Exit, Output};

/// `tet-host verify` for an image: the full check (`tet_alloc::cetrafs::fsck`), findings in the
/// order found, exit 0 when clean (warnings included) and 4 otherwise.
pub fn verify(path: &Path, dev: Dev<'_>, output: Output, memory_limit: u64) -> Exit {
    let mut found: Vec<Finding> = Vec::new();
    let outcome = fsck::check(dev, &fsck::Options { memory_limit }, &mut |f: &Finding| {
        found.push(*f)
    });
    let (errors, warnings) = (outcome.summary.errors, outcome.summary.warnings);
    let status = if errors > 0 {
        "errors"
    } else if warnings > 0 {
        "warnings"
    } else {
        "clean"
    };
    match output {
        Output::Json => {
            let list: Vec<Value> = found
                .iter()
                .map(|f| json!({"code": f.code.as_str(), "severity": f.severity().name(), "field": f.error.what, "offset": f.error.offset, "block": f.error.offset / BLOCK_SIZE_U64, "inode": f.ino, "message": describe(&f.error)}))
                .collect();
            let v = json!({"file": path.display().to_string(), "format": "cetrafs", "status": status, "errors": errors, "warnings": warnings, "inodes": outcome.summary.inodes, "cross_checked": outcome.cross_checked, "findings": list});
            println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
        }
        Output::Quiet => match found.first() {
            None => println!("{}: clean", path.display()),
            Some(f) => println!(
                "{}: {errors} error(s), {warnings} warning(s); first: {}[{}] {}",
                path.display(),
                f.severity().name(),
                f.code.as_str(),
                describe(&f.error)
            ),
        },
        Output::Human => {
            for f in &found {
                let ino = f.ino.map(|i| format!(" inode {i}:")).unwrap_or_default();
                println!(
                    "{}[{}]{ino} {}",
                    f.severity().name(),
                    f.code.as_str(),
                    describe(&f.error)
                );
            }
            if errors == 0 && warnings == 0 {
                println!("{}: clean", path.display());
            } else {
                println!(
                    "{}: {errors} error(s), {warnings} warning(s)",
                    path.display()
                );
            }
        }
    }
    if errors > 0 {
        Exit::Problems
    } else {
        Exit::Clean
    }
}
