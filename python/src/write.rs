//! Writing a file: the library's streaming writer into a temporary file beside the
//! target, renamed over it when the file is finished (`tet_std::atomic`). Appending
//! binds the library's append (`tet_alloc::tet::append`): the existing chunks are copied
//! as stored, its history and metadata kept, one history row added.

use std::path::PathBuf;
use std::sync::Arc;

use numpy::PyReadonlyArray1;
use pyo3::prelude::*;
use tet_alloc::tet::append::{AppendError, Base};
use tet_alloc::tet::writer::{interop, DatasetSpec, FooterSpec, HistoryRow, Writer};
use tet_core::tet::{Codec, DType, DatasetId};
use tet_std::atomic::{AtomicFile, RealFs};
use tet_std::input::Input;
use tet_std::tet::codec::CCompressor;

use crate::error::Failure;

/// A declared dataset: name, dtype, shape, chunk shape.
type Declared = (String, DType, Vec<u64>, Vec<u64>);

/// One history row as Python gives it: op, source, at, params.
type Row = (String, String, String, Vec<(String, String)>);

/// The writer behind `tetrs.Writer`.
#[pyclass(module = "tetrs._tetrs")]
pub struct RawWriter {
    target: PathBuf,
    base: Option<Arc<Input>>,
    base_count: usize,
    declared: Vec<Declared>,
    // In a mutex only to be `Sync` (the compressor is not): every use has `&mut self`.
    writer: std::sync::Mutex<Option<Writer<AtomicFile<RealFs>>>>,
    level: i32,
    closed: bool,
}

fn dtype_of(name: &str) -> Result<DType, Failure> {
    DType::ALL
        .iter()
        .copied()
        .find(|d| d.name() == name)
        .ok_or_else(|| {
            let names: Vec<&str> = DType::ALL.iter().map(|d| d.name()).collect();
            Failure::usage(format!(
                "dtype {name:?} is not one .tet holds ({})",
                names.join(", ")
            ))
        })
}

fn codec_of(name: &str) -> Result<Codec, Failure> {
    match name {
        "raw" => Ok(Codec::Raw),
        "zstd" => Ok(Codec::Zstd),
        other => Err(Failure::usage(format!(
            "codec {other:?}: a chunk is stored \"raw\" or \"zstd\""
        ))),
    }
}

fn base_failure<E: std::fmt::Display>(target: &std::path::Path, e: &AppendError<E>) -> Failure {
    let category = match e {
        AppendError::Base(_) => tet_core::Category::Corrupt,
        AppendError::NameTaken(_) => tet_core::Category::Usage,
        AppendError::Write(_) => tet_core::Category::Io,
    };
    Failure::of(category, format!("{}: {e}", target.display()))
}

impl RawWriter {
    fn started(&mut self) -> Result<&mut Writer<AtomicFile<RealFs>>, Failure> {
        if self.closed {
            return Err(Failure::usage(format!(
                "{}: the writer is closed",
                self.target.display()
            )));
        }
        let poisoned = || Failure::io("the writer panicked earlier".into());
        if self.writer.get_mut().map_err(|_| poisoned())?.is_none() {
            let base = match &self.base {
                Some(i) => Some(
                    Base::open::<std::io::Error>(i.bytes())
                        .map_err(|e| base_failure(&self.target, &e))?,
                ),
                None => None,
            };
            let mine: Vec<DatasetSpec<'_>> = self
                .declared
                .iter()
                .map(|(name, dtype, shape, chunk)| DatasetSpec {
                    name,
                    dtype: *dtype,
                    shape,
                    chunk_shape: chunk,
                })
                .collect();
            if let Some(b) = &base {
                b.check_names::<std::io::Error>(mine.iter().map(|s| s.name))
                    .map_err(|e| base_failure(&self.target, &e))?;
            }
            let all: Vec<DatasetSpec<'_>> = match &base {
                Some(b) => b.specs().into_iter().chain(mine.iter().copied()).collect(),
                None => mine.clone(),
            };
            let out = AtomicFile::create(&self.target, RealFs).map_err(|e| {
                Failure::io(format!(
                    "cannot create a file beside {}: {e}",
                    self.target.display()
                ))
            })?;
            let mut w = Writer::new(out, &all)
                .map_err(|e| Failure::usage(format!("{}: {e}", self.target.display())))?;
            w.set_compressor(Box::new(CCompressor::new(self.level)));
            if let Some(b) = &base {
                b.copy_into(&mut w, |_| {})
                    .map_err(|e| base_failure(&self.target, &e))?;
            }
            *self.writer.get_mut().map_err(|_| poisoned())? = Some(w);
        }
        self.writer
            .get_mut()
            .map_err(|_| poisoned())?
            .as_mut()
            .ok_or_else(|| Failure::io("the writer did not start".into()))
    }

    fn id(&self, index: usize) -> Result<DatasetId, Failure> {
        if index >= self.declared.len() {
            return Err(Failure::usage(format!(
                "dataset number {index} was not declared"
            )));
        }
        let id = index
            .checked_add(self.base_count)
            .and_then(|i| u32::try_from(i).ok())
            .ok_or_else(|| Failure::usage("too many datasets".into()))?;
        Ok(DatasetId(id))
    }
}

#[pymethods]
impl RawWriter {
    /// A writer of `path`; with `append`, the datasets are added to the file there.
    #[new]
    #[pyo3(signature = (path, append = false, level = 3))]
    fn new(path: PathBuf, append: bool, level: i32) -> PyResult<RawWriter> {
        let (base, base_count) = if append {
            let input = Input::open(&path).map_err(|e| {
                Failure::io(format!(
                    "append: cannot read {} ({e}); append adds to an existing .tet file",
                    path.display()
                ))
            })?;
            let n = Base::open::<std::io::Error>(input.bytes())
                .map_err(|e| base_failure(&path, &e))?
                .datasets
                .len();
            (Some(Arc::new(input)), n)
        } else {
            (None, 0)
        };
        Ok(RawWriter {
            target: path,
            base,
            base_count,
            declared: Vec::new(),
            writer: std::sync::Mutex::new(None),
            level,
            closed: false,
        })
    }

    /// The existing datasets' names, when appending.
    fn base_names(&self) -> PyResult<Vec<String>> {
        match &self.base {
            None => Ok(Vec::new()),
            Some(i) => Ok(Base::open::<std::io::Error>(i.bytes())
                .map_err(|e| base_failure(&self.target, &e))?
                .datasets
                .into_iter()
                .map(|d| d.name)
                .collect()),
        }
    }

    /// Declares a dataset (before any data is written); returns its number.
    fn declare(
        &mut self,
        name: String,
        dtype: &str,
        shape: Vec<u64>,
        chunks: Vec<u64>,
    ) -> PyResult<usize> {
        let writing = self.writer.get_mut().map_or(true, |w| w.is_some());
        if writing || self.closed {
            return Err(Failure::usage(format!(
                "{}: dataset {name:?} declared after data was written: declare every \
                 dataset first",
                self.target.display()
            ))
            .into());
        }
        if self.declared.iter().any(|d| d.0 == name) {
            return Err(Failure::usage(format!(
                "{}: dataset {name:?} declared twice",
                self.target.display()
            ))
            .into());
        }
        let d = dtype_of(dtype)?;
        self.declared.push((name, d, shape, chunks));
        Ok(self.declared.len().saturating_sub(1))
    }

    /// Writes dataset `index` whole from `data` (its C-order bytes, not copied), chunk
    /// by chunk, with the GIL released.
    fn write_array(
        &mut self,
        py: Python<'_>,
        index: usize,
        data: PyReadonlyArray1<'_, u8>,
        codec: &str,
    ) -> PyResult<()> {
        let id = self.id(index)?;
        let codec = codec_of(codec)?;
        let bytes = data.as_slice()?;
        let target = self.target.clone();
        let w = self.started()?;
        py.detach(|| w.write_array(id, bytes, codec))
            .map_err(|e| Failure::usage(format!("{}: {e}", target.display())))?;
        Ok(())
    }

    /// Writes one chunk (its clipped tile, C order) of dataset `index`.
    fn write_chunk(
        &mut self,
        py: Python<'_>,
        index: usize,
        coords: Vec<u64>,
        data: PyReadonlyArray1<'_, u8>,
        codec: &str,
    ) -> PyResult<()> {
        let id = self.id(index)?;
        let codec = codec_of(codec)?;
        let bytes = data.as_slice()?;
        let target = self.target.clone();
        let w = self.started()?;
        py.detach(|| w.write_chunk(id, &coords, bytes, codec))
            .map_err(|e| Failure::usage(format!("{}: {e}", target.display())))?;
        Ok(())
    }

    /// Finishes the file: the footer with `metadata` (JSON object text) and `history`
    /// rows (for an append, the old rows and the last of these), then the rename over
    /// the target.
    #[pyo3(signature = (metadata, history))]
    fn finish(
        &mut self,
        py: Python<'_>,
        metadata: Option<String>,
        history: Vec<Row>,
    ) -> PyResult<()> {
        let target = self.target.clone();
        if let Some(m) = &metadata {
            interop::check_metadata(m)
                .map_err(|e| Failure::usage(format!("{}: metadata: {e}", target.display())))?;
        }
        let mut rows: Vec<HistoryRow> = Vec::new();
        for (op, source, at, params) in history {
            let row = HistoryRow {
                op,
                source,
                at,
                params,
            };
            interop::check_row(&row)
                .map_err(|e| Failure::usage(format!("{}: history: {e}", target.display())))?;
            rows.push(row);
        }
        self.started()?;
        let footer = match &self.base {
            None => FooterSpec {
                history: rows,
                metadata,
            },
            Some(i) => {
                let b = Base::open::<std::io::Error>(i.bytes())
                    .map_err(|e| base_failure(&target, &e))?;
                let row = rows.pop().unwrap_or(HistoryRow {
                    op: "append".into(),
                    source: "tetrs".into(),
                    at: tet_std::tet::now_rfc3339(),
                    params: Vec::new(),
                });
                b.footer(row, metadata.as_deref())
                    .map_err(|e| Failure::usage(format!("{}: {e}", target.display())))?
            }
        };
        let w = self
            .writer
            .get_mut()
            .ok()
            .and_then(Option::take)
            .ok_or_else(|| Failure::io("the writer did not start".into()))?;
        self.closed = true;
        py.detach(|| {
            let out = w
                .finish(Some(&footer))
                .map_err(|e| Failure::usage(format!("{}: {e}", target.display())))?;
            out.commit()
                .map_err(|e| Failure::io(format!("cannot write {}: {e}", target.display())))
        })?;
        Ok(())
    }

    /// Drops the temporary file; the target is untouched.
    fn abort(&mut self) {
        if let Ok(w) = self.writer.get_mut() {
            *w = None;
        }
        self.closed = true;
    }
}
