//! Adding datasets to an existing file: the file is written again through the streaming
//! writer, every existing chunk's stored bytes copied as they are (raw or zstd, never
//! decoded), its history and metadata kept, one history row added for the change.
//!
//! The writer lays out a file as directory, index and checksum table before the payloads,
//! so adding datasets moves every payload; the bytes of each stay identical. A chunk the
//! old checksum table covers is checked before it is copied: a damaged chunk is never
//! given a fresh checksum. A chunk without an entry (a file from another writer) is copied
//! as it reads and gets its checksum from those bytes.

use alloc::string::{String, ToString};
use alloc::vec::Vec;

use serde_json::Value;
use tet_core::tet::{Codec, DType, DatasetId, TetFile};

use crate::tet::history;
use crate::tet::scan::ChunkTable;
use crate::tet::writer::{
    interop, DatasetSpec, FooterSpec, HistoryRow, Output, WriteError, Writer,
};

/// One existing dataset's declaration.
#[derive(Clone, Debug)]
pub struct Declared {
    /// Its name.
    pub name: String,
    /// Its element type.
    pub dtype: DType,
    /// Its shape.
    pub shape: Vec<u64>,
    /// Its chunk shape.
    pub chunk_shape: Vec<u64>,
}

/// What an append keeps of the file it adds to.
pub struct Base<'a> {
    file: TetFile<'a>,
    /// The existing datasets, in id order (they keep their ids).
    pub datasets: Vec<Declared>,
    history: Vec<HistoryRow>,
    metadata: serde_json::Map<String, Value>,
}

/// Why an append cannot be made.
#[derive(Debug)]
pub enum AppendError<E> {
    /// The existing file cannot be kept as it is: it does not open, its footer does not
    /// read, or a chunk fails its checksum (the message names it).
    Base(String),
    /// A new dataset's name is taken.
    NameTaken(String),
    /// Writing failed.
    Write(WriteError<E>),
}

impl<E: core::fmt::Display> core::fmt::Display for AppendError<E> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            AppendError::Base(m) => f.write_str(m),
            AppendError::NameTaken(n) => write!(
                f,
                "the file already has a dataset '{n}' (each name once; convert it under another \
                 name)"
            ),
            AppendError::Write(e) => write!(f, "{e}"),
        }
    }
}

impl<E> From<WriteError<E>> for AppendError<E> {
    fn from(e: WriteError<E>) -> Self {
        AppendError::Write(e)
    }
}

impl<'a> Base<'a> {
    /// Reads what `bytes` (an existing file) keeps: its datasets, history rows and
    /// metadata. A file that does not open strictly, or whose footer does not read, is
    /// refused (repair it first).
    pub fn open<E>(bytes: &'a [u8]) -> Result<Base<'a>, AppendError<E>> {
        let file = TetFile::open(bytes).map_err(|e| {
            AppendError::Base(alloc::format!(
                "not a readable .tet file ({e}); `tet-host repair` it before adding to it"
            ))
        })?;
        let mut datasets = Vec::new();
        for d in file.datasets() {
            let d =
                d.map_err(|e| AppendError::Base(alloc::format!("dataset directory: {}", e.error)))?;
            datasets.push(Declared {
                name: d.name().to_string(),
                dtype: d.dtype(),
                shape: d.shape().collect(),
                chunk_shape: d.chunk_shape().collect(),
            });
        }
        let history = match file.footer() {
            None => Vec::new(),
            Some(f) => rows(f.history_json()).map_err(AppendError::Base)?,
        };
        let metadata = match history::metadata(&file) {
            Ok(Some(Value::Object(m))) => m,
            Ok(None) => serde_json::Map::new(),
            Ok(Some(_)) => {
                return Err(AppendError::Base(String::from(
                    "footer metadata: not a JSON object",
                )))
            }
            Err(e) => return Err(AppendError::Base(alloc::format!("footer metadata: {e}"))),
        };
        if history.len() >= interop::HISTORY_ROWS {
            return Err(AppendError::Base(alloc::format!(
                "the history has {} rows, the most a file may hold: nothing can be recorded",
                history.len()
            )));
        }
        Ok(Base {
            file,
            datasets,
            history,
            metadata,
        })
    }

    /// The file's history rows, oldest first.
    pub fn history(&self) -> &[HistoryRow] {
        &self.history
    }

    /// Refuses a new dataset whose name the file has.
    pub fn check_names<'n, E>(
        &self,
        names: impl IntoIterator<Item = &'n str>,
    ) -> Result<(), AppendError<E>> {
        for n in names {
            if self.datasets.iter().any(|d| d.name == n) {
                return Err(AppendError::NameTaken(n.to_string()));
            }
        }
        Ok(())
    }

    /// The existing datasets' specs, to declare first (ids 0 ..).
    pub fn specs(&self) -> Vec<DatasetSpec<'_>> {
        self.datasets
            .iter()
            .map(|d| DatasetSpec {
                name: &d.name,
                dtype: d.dtype,
                shape: &d.shape,
                chunk_shape: &d.chunk_shape,
            })
            .collect()
    }

    /// Bytes of stored payload the copy writes.
    pub fn stored_bytes(&self) -> u64 {
        self.file
            .rows()
            .iter()
            .fold(0u64, |a, r| a.saturating_add(r.stored_byte_len.get()))
    }

    /// Copies every existing chunk, in index row order, its stored bytes as they are;
    /// `progress` gets each chunk's stored length. A chunk that fails its checksum stops
    /// the copy.
    pub fn copy_into<O: Output>(
        &self,
        w: &mut Writer<O>,
        mut progress: impl FnMut(u64),
    ) -> Result<(), AppendError<O::Error>> {
        let reading = history::reading(self.file);
        let sums = reading.file.checksums();
        let table = ChunkTable::new(self.file)
            .map_err(|e| AppendError::Base(alloc::format!("chunk index: {e}")))?;
        for r in 0..table.rows() {
            let Some(c) = table.chunk(r) else { continue };
            if let Some(s) = sums.as_ref() {
                s.check(&c).map_err(|f| {
                    AppendError::Base(alloc::format!(
                        "dataset {} chunk {} (tidx row {r}): {}; `tet-host repair \
                         --zero-bad-chunks` it before adding to the file",
                        c.dataset.0,
                        c.coords,
                        f.error
                    ))
                })?;
            }
            let codec = if c.codec == Codec::Raw {
                Codec::Raw
            } else {
                Codec::Zstd
            };
            w.write_chunk_encoded(
                DatasetId(c.dataset.0),
                c.coords.as_slice(),
                codec,
                c.raw_byte_len,
                c.payload,
            )?;
            progress(u64::try_from(c.payload.len()).unwrap_or(0));
        }
        Ok(())
    }

    /// The footer of the new file: the old history and one more row, the old metadata
    /// with `added`'s merged in (its `datasets` entries beside the old ones; other keys
    /// only where the old metadata has none, so the file's `metadata.file` stays the
    /// creating tool's). The checksum table's key is the writer's to set.
    pub fn footer(&self, row: HistoryRow, added: Option<&str>) -> Result<FooterSpec, String> {
        let mut meta = self.metadata.clone();
        meta.remove("tet_checksums");
        if let Some(text) = added {
            let Value::Object(new) =
                serde_json::from_str::<Value>(text).map_err(|e| alloc::format!("metadata: {e}"))?
            else {
                return Err(String::from("metadata: not a JSON object"));
            };
            for (k, v) in new {
                match (meta.get_mut(&k), v) {
                    (Some(Value::Object(old)), Value::Object(more)) if k == "datasets" => {
                        for (name, entry) in more {
                            old.entry(name).or_insert(entry);
                        }
                    }
                    (Some(_), _) => {}
                    (None, v) => {
                        meta.insert(k, v);
                    }
                }
            }
        }
        let mut history = self.history.clone();
        history.push(row);
        Ok(FooterSpec {
            history,
            metadata: (!meta.is_empty()).then(|| Value::Object(meta).to_string()),
        })
    }
}

/// The history rows of a footer's JSON, each in the writer's shape: `params` values that
/// are not strings are kept as their JSON text (the other implementation reads strings).
fn rows(json: &[u8]) -> Result<Vec<HistoryRow>, String> {
    let v: Value =
        serde_json::from_slice(json).map_err(|e| alloc::format!("footer history: {e}"))?;
    let list = v
        .get("history")
        .and_then(Value::as_array)
        .ok_or_else(|| String::from("footer history: no history array"))?;
    let text = |v: Option<&Value>| -> String {
        match v {
            Some(Value::String(s)) => s.clone(),
            Some(other) => other.to_string(),
            None => String::new(),
        }
    };
    let mut out = Vec::new();
    for row in list {
        let r = match row {
            Value::Object(o) => HistoryRow {
                op: text(o.get("op")),
                source: text(o.get("source")),
                at: text(o.get("at")),
                params: o
                    .get("params")
                    .and_then(Value::as_object)
                    .map(|p| p.iter().map(|(k, v)| (k.clone(), text(Some(v)))).collect())
                    .unwrap_or_default(),
            },
            Value::Array(a) => HistoryRow {
                op: text(a.first()),
                source: text(a.get(1)),
                at: text(a.get(2)),
                params: Vec::new(),
            },
            _ => {
                return Err(String::from(
                    "footer history: a row is neither object nor array",
                ))
            }
        };
        out.push(r);
    }
    Ok(out)
}
