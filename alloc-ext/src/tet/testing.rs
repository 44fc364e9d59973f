//! Test fixtures (feature `testing`, off by default): a layout builder that writes rows
//! exactly as told, in any order, with any field values, so tests can build files that
//! break rules on purpose. It serialises through the same functions as
//! [`crate::tet::writer::Writer`] (the zerocopy structs), so there is one encoding of every
//! structure; only the checks and the canonical row order are left out.

use alloc::string::String;
use alloc::vec::Vec;

use tet_core::arith::u64_of;
use tet_core::tet::{Codec, DType, DatasetId, ExecutionSettings};
use tet_core::{Error, ErrorKind};
use zerocopy::IntoBytes;

use crate::tet::writer::{footer_tail, head_bytes, index_row, plan_datasets, regions, DatasetSpec};

struct Declared {
    name: String,
    dtype: DType,
    shape: Vec<u64>,
    chunk_shape: Vec<u64>,
}

struct Row {
    dataset: u32,
    coords: Vec<u64>,
    codec: u32,
    raw_byte_len: u64,
    stored: Vec<u8>,
}

/// Builds a file in memory with rows in the order they were added.
#[derive(Default)]
pub struct TetWriter {
    datasets: Vec<Declared>,
    rows: Vec<Row>,
    execution: Option<ExecutionSettings>,
    history_json: Option<Vec<u8>>,
    metadata_spill: Vec<u8>,
}

fn invalid(what: &'static str) -> Error {
    Error::new(ErrorKind::Invalid, what, 0)
}

impl TetWriter {
    /// An empty file.
    pub fn new() -> Self {
        TetWriter::default()
    }

    /// Declares a dataset (checked as the streaming writer checks declarations).
    pub fn add_dataset(
        &mut self,
        name: &str,
        dtype: DType,
        shape: &[u64],
        chunk_shape: &[u64],
    ) -> Result<DatasetId, Error> {
        let spec = DatasetSpec {
            name,
            dtype,
            shape,
            chunk_shape,
        };
        plan_datasets(&[spec]).map_err(|(_, p)| invalid(p))?;
        let id = u32::try_from(self.datasets.len()).map_err(|_| invalid("dataset_count"))?;
        self.datasets.push(Declared {
            name: String::from(name),
            dtype,
            shape: shape.to_vec(),
            chunk_shape: chunk_shape.to_vec(),
        });
        Ok(DatasetId(id))
    }

    /// Adds one row with stored bytes as given; nothing is checked.
    pub fn add_chunk_stored(
        &mut self,
        dataset: DatasetId,
        coords: &[u64],
        codec: Codec,
        raw_byte_len: u64,
        stored: &[u8],
    ) {
        self.rows.push(Row {
            dataset: dataset.0,
            coords: coords.to_vec(),
            codec: codec.wire(),
            raw_byte_len,
            stored: stored.to_vec(),
        });
    }

    /// Adds a raw row.
    pub fn add_chunk_raw(&mut self, dataset: DatasetId, coords: &[u64], bytes: &[u8]) {
        self.add_chunk_stored(dataset, coords, Codec::Raw, u64_of(bytes.len()), bytes);
    }

    /// Splits a row-major array into clipped tiles, added as raw rows in canonical order.
    pub fn add_array(&mut self, dataset: DatasetId, data: &[u8]) -> Result<(), Error> {
        let (_, layouts) = self.plan()?;
        let l = usize::try_from(dataset.0)
            .ok()
            .and_then(|i| layouts.get(i))
            .ok_or(invalid("dataset_id"))?;
        l.for_each_tile(data, |c, tile| {
            self.add_chunk_raw(dataset, c.as_slice(), tile);
            Ok::<(), Error>(())
        })
        .map_err(|_| invalid("array length"))?
    }

    /// Sets the `TIDX` execution settings.
    pub fn set_execution(&mut self, percent_bps: u16, bytes: u32) {
        self.execution = Some(ExecutionSettings {
            memory_budget_percent_bps: percent_bps,
            memory_budget_bytes: bytes,
        });
    }

    /// Adds a footer with this `history_json` (as given) and `metadata_spill` before it.
    pub fn set_history(&mut self, history_json: &[u8], metadata_spill: &[u8]) {
        self.history_json = Some(history_json.to_vec());
        self.metadata_spill = metadata_spill.to_vec();
    }

    fn plan(&self) -> Result<crate::tet::writer::Plan, Error> {
        let specs: Vec<DatasetSpec<'_>> = self
            .datasets
            .iter()
            .map(|d| DatasetSpec {
                name: &d.name,
                dtype: d.dtype,
                shape: &d.shape,
                chunk_shape: &d.chunk_shape,
            })
            .collect();
        plan_datasets(&specs).map_err(|(_, p)| invalid(p))
    }

    fn payload_start(&self, blob: &[u8]) -> Result<u64, Error> {
        regions(
            self.datasets.len(),
            u64_of(blob.len()),
            u64_of(self.rows.len()),
        )
        .map(|r| r.1)
        .ok_or(invalid("chunk index"))
    }

    /// Where the metadata spill will start (after every payload added so far).
    pub fn spill_offset(&self) -> Result<u64, Error> {
        let (blob, _) = self.plan()?;
        let start = self.payload_start(&blob)?;
        Ok(self
            .rows
            .iter()
            .fold(start, |a, r| a.saturating_add(u64_of(r.stored.len()))))
    }

    /// Serialises the file.
    pub fn to_bytes(&self) -> Result<Vec<u8>, Error> {
        let (blob, _) = self.plan()?;
        let execution = self.execution.unwrap_or(ExecutionSettings {
            memory_budget_percent_bps: 0,
            memory_budget_bytes: 0,
        });
        let mut out = head_bytes(
            self.datasets.len(),
            &blob,
            u64_of(self.rows.len()),
            execution,
            self.history_json.is_some(),
        )
        .ok_or(invalid("header"))?;
        if !self.datasets.is_empty() {
            let mut at = self.payload_start(&blob)?;
            for r in &self.rows {
                let row = index_row(
                    r.dataset,
                    &r.coords,
                    at,
                    r.raw_byte_len,
                    u64_of(r.stored.len()),
                    r.codec,
                );
                out.extend_from_slice(row.as_bytes());
                at = at.saturating_add(u64_of(r.stored.len()));
            }
            for r in &self.rows {
                out.extend_from_slice(&r.stored);
            }
        }
        if let Some(json) = &self.history_json {
            out.extend_from_slice(&self.metadata_spill);
            out.extend_from_slice(json);
            out.extend_from_slice(footer_tail(u64_of(json.len())).as_bytes());
        }
        Ok(out)
    }
}
