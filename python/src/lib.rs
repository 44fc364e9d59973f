//! `tetrs._tetrs`: the compiled half of the `tetrs` Python package.
//!
//! The Rust side opens files through `tet-std`'s one mapping function, reads and folds
//! with the libraries' engines (the same code path as `tet-host query`), and writes with
//! the library writer. The Python half (`tetrs/__init__.py`) turns NumPy-style keys into
//! slices, builds query documents and wraps the results.
//!
//! Every heavy call runs with the GIL released. `unsafe` is allowed in one module,
//! [`buffer`], which exports chunk bytes through the buffer protocol.

mod buffer;
mod error;
mod file;
mod query;
mod verify;
mod write;

use pyo3::prelude::*;

/// The extension module.
#[pymodule]
fn _tetrs(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<file::Handle>()?;
    m.add_class::<buffer::ChunkBuffer>()?;
    m.add_class::<write::RawWriter>()?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_function(wrap_pyfunction!(parse_budget, m)?)?;
    m.add_function(wrap_pyfunction!(verify::verify_path, m)?)?;
    Ok(())
}

/// A memory budget given as text (`512M`, `2G`, `50%`), in bytes, as `--memory-budget`
/// reads it.
#[pyfunction]
fn parse_budget(text: &str) -> PyResult<u64> {
    tet_std::budget::parse_budget(text)
        .map_err(|e| error::Failure::usage(format!("memory_budget={text:?}: {e}")).into_py_err())
}
