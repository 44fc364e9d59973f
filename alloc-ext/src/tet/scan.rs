//! Random access to a file's chunks by row number, for passes that decode payloads
//! (`verify`, `repair`) and may run rows in parallel.

use alloc::vec::Vec;

use tet_core::tet::{Chunk, Codec, Dataset, TetFile};
use tet_core::{Error, ErrorKind};

/// Rows to decode in a quick scan: the first 128 in file order, as the spec's quick scan.
pub const QUICK_SCAN_ROWS: u64 = 128;

/// A file's datasets by id, so any row can be turned into a checked [`Chunk`] in `O(1)`.
/// `Send + Sync`: share one across threads.
#[derive(Clone, Debug)]
pub struct ChunkTable<'a> {
    file: TetFile<'a>,
    datasets: Vec<Dataset<'a>>,
}

impl<'a> ChunkTable<'a> {
    /// Builds the table. Memory is one [`Dataset`] view per directory record, and the
    /// records were bounded by the file size when the directory parsed.
    pub fn new(file: TetFile<'a>) -> Result<Self, Error> {
        let mut datasets = Vec::new();
        if let Some(dir) = file.directory() {
            let n = usize::try_from(dir.count()).unwrap_or(usize::MAX);
            datasets
                .try_reserve_exact(n)
                .map_err(|_| Error::new(ErrorKind::Overflow, "dataset_count", 8))?;
            for d in dir.iter() {
                match d {
                    Ok(d) => datasets.push(d),
                    Err(_) => break,
                }
            }
        }
        Ok(ChunkTable { file, datasets })
    }

    /// The file.
    pub fn file(&self) -> &TetFile<'a> {
        &self.file
    }

    /// Number of index rows (0 without a parsed directory).
    pub fn rows(&self) -> u64 {
        if self.datasets.is_empty() {
            return 0;
        }
        u64::try_from(self.file.rows().len()).unwrap_or(u64::MAX)
    }

    /// Row `row` as a chunk, or `None` when it fails a row check (which the structural
    /// verifier reports) or does not exist. Nonzero coordinate slots past the dataset's
    /// rank are ignored here (verify reports them, repair zeroes them), so a row whose
    /// only fault is one of those still has its payload decoded: repair must know whether
    /// it would hand back a readable chunk.
    pub fn chunk(&self, row: u64) -> Option<Chunk<'a>> {
        let raw = self.file.rows().get(usize::try_from(row).ok()?)?;
        let ds = self
            .datasets
            .get(usize::try_from(raw.dataset_id.get()).ok()?)?;
        let mut row_copy = *raw;
        for slot in row_copy.chunk_index.iter_mut().skip(ds.ndim()) {
            *slot = zerocopy::little_endian::U64::new(0);
        }
        self.file.checked_chunk(ds, row, &row_copy).ok()
    }

    /// Whether row `row` holds a zstd payload (its codec field says 1), checked or not.
    pub fn is_zstd(&self, row: u64) -> bool {
        usize::try_from(row)
            .ok()
            .and_then(|r| self.file.rows().get(r))
            .is_some_and(|r| Codec::from_wire(r.codec.get()) == Some(Codec::Zstd))
    }

    /// The rows a pass decodes: all of them when `deep`, else the quick-scan prefix.
    pub fn scan_rows(&self, deep: bool) -> u64 {
        if deep {
            self.rows()
        } else {
            self.rows().min(QUICK_SCAN_ROWS)
        }
    }
}
