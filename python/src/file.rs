//! An open `.tet` file: its bytes (mapped through `tet_std::input`, or read into
//! memory), what it holds, its checks, and reads of selections and single chunks, each
//! through the library's one path (`tet_std::tet`: open, verify report, query).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use numpy::PyArray1;
use pyo3::prelude::*;
use serde_json::{json, Value as Json};
use tet_alloc::tet::meta::Coord;
use tet_core::tet::select::Slice;
use tet_core::tet::Codec;
use tet_std::input::Input;
use tet_std::tet::query::{Planned, Query};
use tet_std::tet::{dataset, open_reading, open_tet};

use crate::buffer::ChunkBuffer;
use crate::error::Failure;

/// Bytes hashed at each end of the file for [`Handle::identity`].
const IDENTITY_SPAN: usize = 64 * 1024;

/// An open file: the bytes every dataset, view and query of it shares.
#[pyclass(frozen, module = "tetrs._tetrs")]
pub struct Handle {
    input: Arc<Input>,
    path: PathBuf,
    warnings: Vec<String>,
}

impl Handle {
    /// The path as messages name it.
    pub fn shown(&self) -> String {
        self.path.display().to_string()
    }

    /// The bytes.
    pub fn bytes(&self) -> &[u8] {
        self.input.bytes()
    }
}

/// The selection `sel` of dataset `name` of `bytes` (the file at `path`), planned for
/// reading within `memory_budget`.
fn planned<'a>(
    path: &Path,
    bytes: &'a [u8],
    name: &str,
    sel: Vec<Slice>,
    memory_budget: Option<u64>,
) -> Result<Planned<'a>, Failure> {
    let file = open_reading(path, bytes)?.file;
    Query::selection(path, file, name, sel, memory_budget)
        .and_then(|q| q.plan(path))
        .map_err(Failure::reading)
}

fn slices(sel: &[(Option<i64>, Option<i64>, Option<i64>)]) -> Vec<Slice> {
    sel.iter()
        .map(|(start, stop, step)| Slice {
            start: *start,
            stop: *stop,
            step: *step,
        })
        .collect()
}

#[pymethods]
impl Handle {
    /// Opens `path`: mapped (`mmap=True`) or read into memory.
    #[new]
    #[pyo3(signature = (path, mmap = true))]
    fn new(py: Python<'_>, path: PathBuf, mmap: bool) -> PyResult<Handle> {
        let opened = py.detach(|| -> Result<Handle, Failure> {
            let input = Input::load(&path, !mmap)?;
            let warnings = open_reading(&path, input.bytes())?.warnings;
            Ok(Handle {
                input: Arc::new(input),
                path,
                warnings,
            })
        });
        Ok(opened?)
    }

    /// The path it was opened by.
    #[getter]
    fn path(&self) -> String {
        self.shown()
    }

    /// Whether the bytes are a mapping.
    #[getter]
    fn mapped(&self) -> bool {
        matches!(*self.input, Input::Mapped(_))
    }

    /// What a reader could not use (an unreadable footer, an unusable checksum table),
    /// as `tet-host` warns.
    #[getter]
    fn warnings(&self) -> Vec<String> {
        self.warnings.clone()
    }

    /// The file's size and the CRC-32C of its first and last 64 KiB: what a worker that
    /// reopens the file by path compares.
    fn identity(&self) -> (u64, u32) {
        let b = self.bytes();
        let head = b.get(..IDENTITY_SPAN).unwrap_or(b);
        let tail = b
            .get(b.len().saturating_sub(IDENTITY_SPAN)..)
            .unwrap_or(&[]);
        let crc = crc32c::crc32c_append(crc32c::crc32c(head), tail);
        (u64::try_from(b.len()).unwrap_or(u64::MAX), crc)
    }

    /// Every dataset: name, dtype, shape, chunk shape, dims, coords and attrs (JSON).
    fn datasets_json(&self) -> PyResult<String> {
        let path = self.path.as_path();
        let file = open_tet(path, self.bytes()).map_err(Failure::from)?;
        let meta = tet_alloc::tet::meta::read(&file)
            .ok()
            .flatten()
            .unwrap_or_default();
        let mut out = Vec::new();
        for d in file.datasets() {
            let d = d.map_err(|f| {
                Failure::of(
                    f.error.kind.category(),
                    format!("{}: dataset directory: {}", path.display(), f.error),
                )
            })?;
            let dm = meta.dataset(d.name());
            let coords: serde_json::Map<String, Json> = dm
                .map(|m| {
                    m.coords
                        .iter()
                        .map(|(k, c)| {
                            let v = match c {
                                Coord::Labels(l) => json!({ "labels": l }),
                                Coord::Dataset(n) => json!({ "dataset": n }),
                            };
                            (k.clone(), v)
                        })
                        .collect()
                })
                .unwrap_or_default();
            let attrs: serde_json::Map<String, Json> = dm
                .map(|m| m.attrs.iter().map(|(k, v)| (k.clone(), json!(v))).collect())
                .unwrap_or_default();
            out.push(json!({
                "name": d.name(),
                "dtype": d.dtype().name(),
                "shape": d.shape().collect::<Vec<u64>>(),
                "chunks": d.chunk_shape().collect::<Vec<u64>>(),
                "dims": dm.and_then(|m| m.dim_names.clone()),
                "coords": coords,
                "attrs": attrs,
            }));
        }
        Ok(Json::Array(out).to_string())
    }

    /// `tet-host info --metadata --history` as one JSON object.
    fn info_json(&self) -> PyResult<String> {
        let file = open_tet(&self.path, self.bytes()).map_err(Failure::from)?;
        let mut datasets = Vec::new();
        for d in file.datasets() {
            let Ok(d) = d else { break };
            datasets.push(json!({
                "name": d.name(),
                "dtype": d.dtype().name(),
                "shape": d.shape().collect::<Vec<u64>>(),
                "chunks": d.chunk_shape().collect::<Vec<u64>>(),
                "grid": d.grid().collect::<Vec<u64>>(),
                "logical_bytes": d.logical_bytes(),
            }));
        }
        let stored: u64 = file.rows().iter().map(|r| r.stored_byte_len.get()).sum();
        Ok(json!({
            "file": self.shown(),
            "format": "tet",
            "size": self.bytes().len(),
            "mapped": self.mapped(),
            "chunks": file.rows().len(),
            "stored_bytes": stored,
            "datasets": datasets,
            "metadata": tet_std::tet::info::metadata_json(&file),
            "history": tet_std::tet::info::history_json(&file),
        })
        .to_string())
    }

    /// `tet-host verify --json` as one JSON object (the quick scan, or every chunk with
    /// `deep`), findings in offset order with their codes.
    #[pyo3(signature = (deep = false, memory_budget = None))]
    fn verify_json(
        &self,
        py: Python<'_>,
        deep: bool,
        memory_budget: Option<u64>,
    ) -> PyResult<String> {
        let path = self.path.clone();
        let bytes = self.bytes();
        let out = py.detach(|| crate::verify::report_json(&path, bytes, deep, memory_budget))?;
        Ok(out)
    }

    /// The stored bytes of the raw chunk of `name` at grid `coords` as a read-only
    /// buffer onto the file's bytes, and its tile shape; `None` for a zstd chunk.
    fn chunk_view(
        &self,
        name: &str,
        coords: Vec<u64>,
    ) -> PyResult<Option<(ChunkBuffer, Vec<u64>)>> {
        let path = self.path.as_path();
        let file = open_tet(path, self.bytes()).map_err(Failure::from)?;
        let ds = dataset(path, &file, name).map_err(Failure::from)?;
        let chunk = file.chunk(&ds, &coords).map_err(|e| {
            Failure::of(
                e.kind.category(),
                format!("{}: dataset {name:?} chunk {coords:?}: {e}", path.display()),
            )
        })?;
        if chunk.codec != Codec::Raw {
            return Ok(None);
        }
        let tile: Vec<u64> = ds
            .tile_shape(&coords)
            .map(|t| t.as_slice().to_vec())
            .unwrap_or_default();
        let start = usize::try_from(chunk.payload_offset).unwrap_or(usize::MAX);
        Ok(
            ChunkBuffer::new(Arc::clone(&self.input), start, chunk.payload.len())
                .map(|b| (b, tile)),
        )
    }

    /// The selected elements of `name`, row-major, as little-endian bytes in a new
    /// array (decoded on the calling thread with the GIL released).
    #[pyo3(signature = (name, selection, memory_budget = None))]
    fn read<'py>(
        &self,
        py: Python<'py>,
        name: &str,
        selection: Vec<(Option<i64>, Option<i64>, Option<i64>)>,
        memory_budget: Option<u64>,
    ) -> PyResult<Bound<'py, PyArray1<u8>>> {
        let path = self.path.as_path();
        let bytes = self.bytes();
        let sel = slices(&selection);
        let data = py.detach(|| -> Result<Vec<u8>, Failure> {
            planned(path, bytes, name, sel, memory_budget)?
                .select(path, &())
                .map_err(Failure::reading)
        })?;
        Ok(PyArray1::from_vec(py, data))
    }

    /// [`Handle::read`] into `out`, a `uint8` array of exactly the selection's bytes
    /// (NumPy's allocation: large ones get huge pages, which a fresh vector does not).
    #[pyo3(signature = (name, selection, out, memory_budget = None))]
    fn read_into(
        &self,
        py: Python<'_>,
        name: &str,
        selection: Vec<(Option<i64>, Option<i64>, Option<i64>)>,
        mut out: numpy::PyReadwriteArray1<'_, u8>,
        memory_budget: Option<u64>,
    ) -> PyResult<()> {
        let path = self.path.as_path();
        let bytes = self.bytes();
        let sel = slices(&selection);
        let buf = out.as_slice_mut()?;
        py.detach(|| -> Result<(), Failure> {
            planned(path, bytes, name, sel, memory_budget)?
                .select_into(path, buf, &())
                .map_err(Failure::reading)
        })?;
        Ok(())
    }

    /// Runs a query document (JSON or TOML text) as `tet-host query` does; see
    /// [`crate::query`].
    #[pyo3(signature = (doc, memory_budget = None, threads = None))]
    fn query<'py>(
        &self,
        py: Python<'py>,
        doc: &str,
        memory_budget: Option<u64>,
        threads: Option<usize>,
    ) -> PyResult<(String, Bound<'py, PyAny>)> {
        crate::query::run(py, &self.path, self.bytes(), doc, memory_budget, threads)
    }
}
