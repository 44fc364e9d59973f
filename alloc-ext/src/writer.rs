//! A writer for `.tet` layout v1. It lays files out as the reference writer does:
//! superblock, directory, index, payloads in row order, then the optional footer.
//! Rows keep the order chunks were added in, so tests can also build non-canonical
//! files.

use alloc::string::String;
use alloc::vec::Vec;

use tet_core::tet::{
    Codec, DType, DatasetId, FLAG_HISTORY_FOOTER, FOOTER_MAGIC, HISTORY_VERSION, INDEX_ENTRY_LEN,
    INDEX_HEADER_LEN, INDEX_MAGIC, INDEX_VERSION, LAYOUT_VERSION, MAX_NDIM, RECORDS_OFFSET,
    SUPERBLOCK_LEN, SUPERBLOCK_MAGIC,
};
use tet_core::{Error, ErrorKind};

struct DatasetSpec {
    name: String,
    dtype: DType,
    shape: Vec<u64>,
    chunk_shape: Vec<u64>,
}

struct ChunkSpec {
    dataset: u32,
    coords: Vec<u64>,
    codec: Codec,
    raw_byte_len: u64,
    stored: Vec<u8>,
}

/// Builds a file in memory.
#[derive(Default)]
pub struct TetWriter {
    datasets: Vec<DatasetSpec>,
    chunks: Vec<ChunkSpec>,
    budget_bps: u16,
    budget_bytes: u32,
    history_json: Option<Vec<u8>>,
    metadata_spill: Vec<u8>,
}

fn invalid(what: &'static str) -> Error {
    Error::new(ErrorKind::Invalid, what, 0)
}

fn overflow(what: &'static str) -> Error {
    Error::new(ErrorKind::Overflow, what, 0)
}

fn len64(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

impl TetWriter {
    /// An empty file.
    pub fn new() -> Self {
        TetWriter::default()
    }

    /// Adds a dataset record. `chunk_shape` entries must be nonzero; rank 1 ..= 8.
    pub fn add_dataset(
        &mut self,
        name: &str,
        dtype: DType,
        shape: &[u64],
        chunk_shape: &[u64],
    ) -> Result<DatasetId, Error> {
        if shape.is_empty() || shape.len() > MAX_NDIM || shape.len() != chunk_shape.len() {
            return Err(invalid("dataset.ndim"));
        }
        if chunk_shape.contains(&0) {
            return Err(invalid("dataset.chunk_shape"));
        }
        let id = u32::try_from(self.datasets.len()).map_err(|_| overflow("dataset_count"))?;
        self.datasets.push(DatasetSpec {
            name: String::from(name),
            dtype,
            shape: shape.to_vec(),
            chunk_shape: chunk_shape.to_vec(),
        });
        Ok(DatasetId(id))
    }

    /// Adds one chunk row with stored bytes as given. `raw_byte_len` is the decoded size
    /// the row declares (for [`Codec::Raw`] pass `stored.len()`). Nothing is checked:
    /// tests use this to write rows that break rules on purpose.
    pub fn add_chunk_stored(
        &mut self,
        dataset: DatasetId,
        coords: &[u64],
        codec: Codec,
        raw_byte_len: u64,
        stored: &[u8],
    ) {
        self.chunks.push(ChunkSpec {
            dataset: dataset.0,
            coords: coords.to_vec(),
            codec,
            raw_byte_len,
            stored: stored.to_vec(),
        });
    }

    /// Adds a raw chunk.
    pub fn add_chunk_raw(&mut self, dataset: DatasetId, coords: &[u64], bytes: &[u8]) {
        self.add_chunk_stored(dataset, coords, Codec::Raw, len64(bytes.len()), bytes);
    }

    /// Splits a whole row-major array (little-endian element bytes) into clipped tiles
    /// and adds them as raw chunks in canonical (row-major grid) order.
    pub fn add_array(&mut self, dataset: DatasetId, data: &[u8]) -> Result<(), Error> {
        let spec = usize::try_from(dataset.0)
            .ok()
            .and_then(|i| self.datasets.get(i))
            .ok_or(invalid("dataset_id"))?;
        let esize = usize::try_from(spec.dtype.size()).map_err(|_| overflow("dtype"))?;
        let shape: Vec<usize> = spec
            .shape
            .iter()
            .map(|d| usize::try_from(*d).map_err(|_| overflow("dataset.shape")))
            .collect::<Result<_, _>>()?;
        let chunk: Vec<usize> = spec
            .chunk_shape
            .iter()
            .map(|d| usize::try_from(*d).map_err(|_| overflow("dataset.chunk_shape")))
            .collect::<Result<_, _>>()?;
        let elements = shape
            .iter()
            .try_fold(1usize, |a, d| a.checked_mul(*d))
            .ok_or(overflow("dataset.shape"))?;
        if elements.checked_mul(esize) != Some(data.len()) {
            return Err(invalid("array length"));
        }
        if elements == 0 {
            return Ok(());
        }
        let grid: Vec<usize> = shape
            .iter()
            .zip(&chunk)
            .map(|(s, c)| s.div_ceil(*c))
            .collect();
        for coords in grid_coords(&grid) {
            let at: Vec<usize> = coords
                .iter()
                .map(|c| usize::try_from(*c).map_err(|_| overflow("grid")))
                .collect::<Result<_, _>>()?;
            let tile = extract_tile(data, &shape, &chunk, &at, esize)?;
            self.add_chunk_raw(dataset, &coords, &tile);
        }
        Ok(())
    }

    /// Sets the `TIDX` execution settings.
    pub fn set_execution(&mut self, percent_bps: u16, bytes: u32) {
        self.budget_bps = percent_bps;
        self.budget_bytes = bytes;
    }

    /// Adds a history footer with this `history_json` (written as given) and an optional
    /// `metadata_spill` placed between the payloads and the JSON. Returns nothing; the
    /// spill's offset is known only after [`TetWriter::spill_offset`].
    pub fn set_history(&mut self, history_json: &[u8], metadata_spill: &[u8]) {
        self.history_json = Some(history_json.to_vec());
        self.metadata_spill = metadata_spill.to_vec();
    }

    fn directory_blob(&self) -> Result<Vec<u8>, Error> {
        let mut blob = Vec::new();
        for d in &self.datasets {
            let start = blob.len();
            let name_len = u32::try_from(d.name.len()).map_err(|_| overflow("dataset.name_len"))?;
            let ndim = u32::try_from(d.shape.len()).map_err(|_| overflow("dataset.ndim"))?;
            blob.extend_from_slice(&name_len.to_le_bytes());
            blob.extend_from_slice(&d.dtype.tag().to_le_bytes());
            blob.extend_from_slice(&ndim.to_le_bytes());
            blob.extend_from_slice(&0u32.to_le_bytes());
            blob.extend_from_slice(d.name.as_bytes());
            while (blob.len().wrapping_sub(start)) % 8 != 0 {
                blob.push(0);
            }
            for v in d.shape.iter().chain(&d.chunk_shape) {
                blob.extend_from_slice(&v.to_le_bytes());
            }
        }
        Ok(blob)
    }

    /// Offset the metadata spill will have in the written file (valid once all chunks
    /// are added).
    pub fn spill_offset(&self) -> Result<u64, Error> {
        let (_, payload_start) = self.layout()?;
        self.chunks
            .iter()
            .try_fold(payload_start, |a, c| a.checked_add(len64(c.stored.len())))
            .ok_or(overflow("payloads"))
    }

    fn layout(&self) -> Result<(u64, u64), Error> {
        if self.datasets.is_empty() {
            return Ok((SUPERBLOCK_LEN, SUPERBLOCK_LEN));
        }
        let blob = len64(self.directory_blob()?.len());
        let index_offset = RECORDS_OFFSET
            .checked_add(blob)
            .and_then(|v| v.checked_add(7))
            .map(|v| v & !7)
            .ok_or(overflow("chunk_index_offset"))?;
        let index_len = len64(self.chunks.len())
            .checked_mul(INDEX_ENTRY_LEN)
            .and_then(|v| v.checked_add(INDEX_HEADER_LEN))
            .ok_or(overflow("chunk_index_length"))?;
        Ok((
            index_offset,
            index_offset
                .checked_add(index_len)
                .ok_or(overflow("index"))?,
        ))
    }

    /// Serialises the file.
    pub fn to_bytes(&self) -> Result<Vec<u8>, Error> {
        let mut out = Vec::new();
        let flags = if self.history_json.is_some() {
            FLAG_HISTORY_FOOTER
        } else {
            0
        };
        let count = u32::try_from(self.datasets.len()).map_err(|_| overflow("dataset_count"))?;
        let (index_offset, payload_start) = self.layout()?;
        let index_len = payload_start.saturating_sub(index_offset);
        out.extend_from_slice(&SUPERBLOCK_MAGIC);
        out.extend_from_slice(&LAYOUT_VERSION.to_le_bytes());
        out.extend_from_slice(&count.to_le_bytes());
        out.extend_from_slice(&flags.to_le_bytes());
        out.extend_from_slice(&index_offset.to_le_bytes());
        out.extend_from_slice(&index_len.to_le_bytes());
        if count > 0 {
            let blob = self.directory_blob()?;
            out.extend_from_slice(&len64(blob.len()).to_le_bytes());
            out.extend_from_slice(&blob);
            while len64(out.len()) < index_offset {
                out.push(0);
            }
            out.extend_from_slice(&INDEX_MAGIC);
            out.extend_from_slice(&INDEX_VERSION.to_le_bytes());
            out.extend_from_slice(&len64(self.chunks.len()).to_le_bytes());
            out.extend_from_slice(&self.budget_bps.to_le_bytes());
            out.extend_from_slice(&0u16.to_le_bytes());
            out.extend_from_slice(&self.budget_bytes.to_le_bytes());
            out.extend_from_slice(&0u64.to_le_bytes());
            let mut at = payload_start;
            for c in &self.chunks {
                out.extend_from_slice(&u64::from(c.dataset).to_le_bytes());
                for i in 0..MAX_NDIM {
                    out.extend_from_slice(&c.coords.get(i).copied().unwrap_or(0).to_le_bytes());
                }
                out.extend_from_slice(&at.to_le_bytes());
                out.extend_from_slice(&c.raw_byte_len.to_le_bytes());
                out.extend_from_slice(&len64(c.stored.len()).to_le_bytes());
                out.extend_from_slice(&c.codec.wire().to_le_bytes());
                out.extend_from_slice(&0u32.to_le_bytes());
                at = at
                    .checked_add(len64(c.stored.len()))
                    .ok_or(overflow("payloads"))?;
            }
            for c in &self.chunks {
                out.extend_from_slice(&c.stored);
            }
        }
        if let Some(json) = &self.history_json {
            out.extend_from_slice(&self.metadata_spill);
            out.extend_from_slice(json);
            out.extend_from_slice(&len64(json.len()).to_le_bytes());
            out.extend_from_slice(&HISTORY_VERSION.to_le_bytes());
            out.extend_from_slice(&FOOTER_MAGIC);
        }
        Ok(out)
    }
}

/// Every grid coordinate in row-major order.
fn grid_coords(grid: &[usize]) -> Vec<Vec<u64>> {
    let total = grid.iter().product::<usize>();
    let mut out = Vec::with_capacity(total);
    for mut p in 0..total {
        let mut c = alloc::vec![0u64; grid.len()];
        for (slot, g) in c.iter_mut().zip(grid).rev() {
            *slot = len64(p.checked_rem(*g).unwrap_or(0));
            p = p.checked_div(*g).unwrap_or(0);
        }
        out.push(c);
    }
    out
}

/// Copies the clipped tile at grid `coords` out of a row-major array.
fn extract_tile(
    data: &[u8],
    shape: &[usize],
    chunk: &[usize],
    coords: &[usize],
    esize: usize,
) -> Result<Vec<u8>, Error> {
    let n = shape.len();
    let mut start = Vec::with_capacity(n);
    let mut extent = Vec::with_capacity(n);
    for ((s, c), k) in shape.iter().zip(chunk).zip(coords) {
        let b = k.checked_mul(*c).ok_or(overflow("tile"))?;
        start.push(b);
        extent.push((*c).min(s.saturating_sub(b)));
    }
    let count: usize = extent.iter().product();
    let mut out = Vec::with_capacity(count.saturating_mul(esize));
    let mut idx = alloc::vec![0usize; n];
    for _ in 0..count {
        // Flat element offset of start + idx in the global array.
        let mut flat = 0usize;
        for ((s, b), i) in shape.iter().zip(&start).zip(&idx) {
            flat = flat
                .checked_mul(*s)
                .and_then(|f| f.checked_add(b.saturating_add(*i)))
                .ok_or(overflow("tile"))?;
        }
        let at = flat.checked_mul(esize).ok_or(overflow("tile"))?;
        let elem = data
            .get(at..at.saturating_add(esize))
            .ok_or(invalid("array length"))?;
        out.extend_from_slice(elem);
        for (i, e) in idx.iter_mut().zip(&extent).rev() {
            *i = i.saturating_add(1);
            if *i < *e {
                break;
            }
            *i = 0;
        }
    }
    Ok(out)
}
