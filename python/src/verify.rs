//! `tet-host verify --json` from Python: the library's report (`tet_std::tet::verify`)
//! as the CLI's JSON document, with the exit status `tet-host` would end with. A file
//! that does not open (its superblock damaged, say) is still checked, as the CLI checks
//! it: [`verify_path`] needs no [`crate::file::Handle`].

use std::path::{Path, PathBuf};

use pyo3::prelude::*;
use serde_json::json;
use tet_std::input::Input;
use tet_std::tet::verify::DecodeOptions;
use tet_std::{Exit, Format};

use crate::error::Failure;

/// The report of `bytes` (the file at `path`): the CLI's document, plus `exit` (the
/// status `tet-host verify` ends with) and `operational` (the decode error the memory
/// budget stopped at).
pub fn report_json(
    path: &Path,
    bytes: &[u8],
    deep: bool,
    memory_budget: Option<u64>,
) -> Result<String, Failure> {
    let opts = DecodeOptions {
        deep,
        threads: None,
        budget: memory_budget,
    };
    let report = tet_std::tet::verify::report(path, bytes, &opts, &())?;
    let mut v = report.json();
    if let Some(o) = v.as_object_mut() {
        let exit = report.outcome().map_or(Exit::Clean, Exit::of);
        o.insert("exit".into(), json!(exit.code()));
        o.insert("operational".into(), json!(report.operational));
    }
    Ok(v.to_string())
}

/// Verifies the `.tet` file at `path` (mapped, or read with `mmap=False`) without
/// opening it for reading: [`report_json`]. A file of neither format is refused as the
/// CLI refuses it (exit 8), a cetrafs image as a usage error (16).
#[pyfunction]
#[pyo3(signature = (path, deep = false, memory_budget = None, mmap = true))]
pub fn verify_path(
    py: Python<'_>,
    path: PathBuf,
    deep: bool,
    memory_budget: Option<u64>,
    mmap: bool,
) -> PyResult<String> {
    let out = py.detach(|| -> Result<String, Failure> {
        let input = Input::load(&path, !mmap)?;
        match tet_std::classify_bytes(input.bytes()) {
            Ok(Format::Tet) => report_json(&path, input.bytes(), deep, memory_budget),
            Ok(Format::Cetrafs) => Err(Failure::usage(format!(
                "{}: a cetrafs image, not a .tet file; tetrs reads .tet files",
                path.display()
            ))),
            Err(what) => Err(Failure::io(format!(
                "{}: not a .tet file or a cetrafs image: {what}",
                path.display()
            ))),
        }
    })?;
    Ok(out)
}
