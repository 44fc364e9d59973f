//! The streaming `.tet` writer.
//!
//! Datasets are declared up front; the chunk grid, and so the index size, follows from
//! their shapes, so the writer reserves the superblock, directory, index and chunk
//! checksum table (docs/tet-v1.md, "Chunk checksums") at the start,
//! appends payloads as chunks arrive (in arrival order: a zstd chunk's size is known only
//! once it is compressed) and fills in the header and the index, rows in canonical order,
//! at [`Writer::finish`]. Chunks written in canonical order give payloads right after the
//! checksum table, in index order ([`Writer::reference_layout`]: right after the index). Memory is the index bookkeeping
//! (24 bytes per grid cell) plus one compressed chunk, never the array.
//!
//! Every on-disk structure is serialised through the zerocopy structs of
//! [`tet_core::tet::raw`], the same ones the reader parses.
//!
//! ```
//! use tet_alloc::tet::writer::{DatasetSpec, Writer};
//! use tet_core::tet::{Codec, DType, DatasetId, TetFile};
//!
//! let spec = DatasetSpec { name: "a", dtype: DType::U8, shape: &[2, 3], chunk_shape: &[2, 2] };
//! let mut w = Writer::new(Vec::new(), &[spec])?;
//! w.write_chunk(DatasetId(0), &[0, 1], &[3, 6], Codec::Raw)?;
//! w.write_chunk(DatasetId(0), &[0, 0], &[1, 2, 4, 5], Codec::Zstd)?;
//! let bytes = w.finish(None)?;
//! let file = TetFile::open(&bytes)?;
//! let ds = file.dataset("a")?;
//! assert_eq!(file.chunk(&ds, &[0, 1])?.payload, &[3, 6]);
//! # Ok::<(), Box<dyn core::error::Error>>(())
//! ```

use alloc::boxed::Box;
use alloc::string::String;
use alloc::vec::Vec;
use core::convert::Infallible;
use core::fmt;

use tet_core::arith::u64_of;
use tet_core::checksum::crc32c;
use tet_core::tet::raw::RawChecksumEntry;
use tet_core::tet::CHECKSUM_ENTRY_LEN;
use tet_core::tet::{Codec, Coords, DType, DatasetId, ExecutionSettings};
use tet_core::Error;
use zerocopy::IntoBytes;

/// Where a file goes: appended to in order, with earlier bytes overwritten in place at
/// the end (the header and index). `tet-host` implements it for files.
pub trait Output {
    /// The output's error.
    type Error;
    /// Appends `bytes` at the current end.
    fn append(&mut self, bytes: &[u8]) -> Result<(), Self::Error>;
    /// Overwrites bytes already appended, starting at `offset`.
    fn write_at(&mut self, offset: u64, bytes: &[u8]) -> Result<(), Self::Error>;
}

impl Output for Vec<u8> {
    type Error = Infallible;
    fn append(&mut self, bytes: &[u8]) -> Result<(), Infallible> {
        self.extend_from_slice(bytes);
        Ok(())
    }
    fn write_at(&mut self, offset: u64, bytes: &[u8]) -> Result<(), Infallible> {
        let start = usize::try_from(offset).unwrap_or(usize::MAX);
        let end = start.saturating_add(bytes.len());
        if let Some(dst) = self.get_mut(start..end) {
            dst.copy_from_slice(bytes);
        }
        Ok(())
    }
}

/// Compresses one chunk into one zstd frame.
pub trait Compressor {
    /// Replaces `out` with the frame for `raw`.
    fn compress(&mut self, raw: &[u8], out: &mut Vec<u8>) -> Result<(), Error>;
}

/// The pure-Rust compressor (ruzstd's fastest level, about zstd level 1). `tet-host`
/// uses the reference C compressor, whose level is configurable.
#[derive(Default, Clone, Copy, Debug)]
pub struct RuzstdCompressor;

impl Compressor for RuzstdCompressor {
    fn compress(&mut self, raw: &[u8], out: &mut Vec<u8>) -> Result<(), Error> {
        *out = ruzstd::encoding::compress_to_vec(raw, ruzstd::encoding::CompressionLevel::Fastest);
        Ok(())
    }
}

/// A dataset to declare.
#[derive(Clone, Copy, Debug)]
pub struct DatasetSpec<'a> {
    /// UTF-8 name.
    pub name: &'a str,
    /// Element type.
    pub dtype: DType,
    /// Global shape, rank 1 ..= 8.
    pub shape: &'a [u64],
    /// Chunk shape, same rank, every extent ≥ 1.
    pub chunk_shape: &'a [u64],
}

/// One row of the footer's `history` array.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HistoryRow {
    /// What was done (`create`, `convert`, `repair`, ...).
    pub op: String,
    /// What it was done from or by.
    pub source: String,
    /// When (RFC 3339 text).
    pub at: String,
    /// Parameters, a map of strings to strings (the shape both implementations read),
    /// in the order given; keys unique.
    pub params: Vec<(String, String)>,
}

/// The `THST` footer to write.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FooterSpec {
    /// History rows, oldest first.
    pub history: Vec<HistoryRow>,
    /// Metadata: JSON object text, in the shapes [`interop::check_metadata`] accepts.
    /// Spilled to `metadata_spill` when the inline JSON would exceed [`INLINE_JSON_LIMIT`].
    pub metadata: Option<String>,
}

/// The largest inline `history_json` (64 KiB, as the spec says); larger metadata spills.
pub const INLINE_JSON_LIMIT: usize = 64 * 1024;

/// Why writing failed.
#[derive(Debug)]
pub enum WriteError<E> {
    /// A dataset declaration layout v1 cannot hold; `index` is its position.
    Dataset {
        /// Position in the declaration list.
        index: usize,
        /// What is wrong.
        problem: &'static str,
    },
    /// A chunk that does not fit its dataset.
    Chunk {
        /// Dataset id.
        dataset: DatasetId,
        /// Grid coordinates as given.
        coords: Coords,
        /// What is wrong.
        problem: ChunkProblem,
    },
    /// `finish` found a grid cell no chunk was written for.
    Missing {
        /// Dataset id.
        dataset: DatasetId,
        /// Grid coordinates.
        coords: Coords,
    },
    /// Two datasets declared with one name (a reader finds only the first by name).
    DuplicateName {
        /// Position of the later declaration.
        index: usize,
        /// Position of the first declaration with that name.
        first: usize,
        /// The name.
        name: String,
    },
    /// Footer text that is not valid JSON of the right shape.
    Footer(String),
    /// Sizes overflow 64 bits, or memory for the index bookkeeping could not be had.
    TooLarge(&'static str),
    /// The compressor failed.
    Compress(Error),
    /// The output failed.
    Output(E),
}

/// What is wrong with a chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum ChunkProblem {
    /// No such dataset.
    UnknownDataset,
    /// Coordinate count differs from the rank.
    Rank,
    /// A coordinate is outside the grid.
    OutsideGrid,
    /// Already written.
    Duplicate,
    /// Tile bytes differ from the clipped tile size.
    Length {
        /// Clipped tile element count × dtype size.
        expected: u64,
        /// Bytes given.
        found: u64,
    },
}

impl<E: fmt::Display> fmt::Display for WriteError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WriteError::Dataset { index, problem } => write!(f, "dataset {index}: {problem}"),
            WriteError::Chunk {
                dataset,
                coords,
                problem,
            } => {
                write!(f, "dataset {} chunk {coords}: ", dataset.0)?;
                match problem {
                    ChunkProblem::UnknownDataset => write!(f, "no such dataset"),
                    ChunkProblem::Rank => write!(f, "wrong number of coordinates"),
                    ChunkProblem::OutsideGrid => write!(f, "outside the chunk grid"),
                    ChunkProblem::Duplicate => write!(f, "written twice"),
                    ChunkProblem::Length { expected, found } => {
                        write!(f, "{found} bytes given, the clipped tile holds {expected}")
                    }
                }
            }
            WriteError::Missing { dataset, coords } => {
                write!(f, "dataset {} chunk {coords} was never written", dataset.0)
            }
            WriteError::DuplicateName { index, first, name } => write!(
                f,
                "dataset {index}: the name {name:?} is already dataset {first}'s (dataset names \
                 must be unique: a reader finds only the first by name)"
            ),
            WriteError::Footer(m) => write!(f, "footer: {m}"),
            WriteError::TooLarge(what) => write!(f, "{what} is too large"),
            WriteError::Compress(e) => write!(f, "compressing: {e}"),
            WriteError::Output(e) => write!(f, "writing: {e}"),
        }
    }
}

impl<E: fmt::Debug + fmt::Display> core::error::Error for WriteError<E> {}

mod footer;
mod layout;

pub use footer::footer_json;
pub mod interop;
pub(crate) use footer::footer_tail;
#[cfg(feature = "testing")]
pub(crate) use layout::Plan;
pub(crate) use layout::{head_bytes, index_row, plan_datasets, regions, Layout};

#[derive(Clone, Copy, Default)]
struct Slot {
    payload_offset: u64,
    stored: u64,
    codec: Option<Codec>,
    /// CRC-32C of the stored bytes.
    crc: u32,
}

/// Rows written per `write_at` call at finish.
const _: () = assert!(core::mem::size_of::<Slot>() == 24);

const ROW_BATCH: usize = 512;

/// The streaming writer; see the module docs.
pub struct Writer<O: Output> {
    out: O,
    pos: u64,
    blob: Vec<u8>,
    layouts: Vec<Layout>,
    slots: Vec<Slot>,
    execution: ExecutionSettings,
    compressor: Box<dyn Compressor + Send>,
    scratch: Vec<u8>,
    /// Where the chunk checksum table goes (right after the index), if there is one.
    checksums_at: Option<u64>,
    /// Each dataset's name and shape, to check the footer's axis metadata against.
    shapes: Vec<(String, Vec<u64>)>,
}

/// Every name is nonempty and unique. The format lets a directory hold an empty name or
/// one name twice (docs/tet-v1.md, decision 7: lookup returns the first), but a dataset a
/// name cannot reach is one no query or export can read, so this writer makes none.
fn check_names<E>(datasets: &[DatasetSpec<'_>]) -> Result<(), WriteError<E>> {
    let mut seen = alloc::collections::BTreeMap::new();
    for (index, d) in datasets.iter().enumerate() {
        if d.name.is_empty() {
            return Err(WriteError::Dataset {
                index,
                problem: "the name is empty",
            });
        }
        if let Some(first) = seen.insert(d.name, index) {
            return Err(WriteError::DuplicateName {
                index,
                first,
                name: d.name.into(),
            });
        }
    }
    Ok(())
}

impl<O: Output> Writer<O> {
    /// Declares `datasets` and reserves the header, directory, index and chunk checksum
    /// table in `out` (which must be empty). Every chunk's stored bytes get a CRC-32C in
    /// the table, which the footer metadata names (`tet_checksums`), so a file written
    /// here always has a footer.
    pub fn new(out: O, datasets: &[DatasetSpec<'_>]) -> Result<Self, WriteError<O::Error>> {
        Self::with_checksums(out, datasets, true)
    }

    /// [`Writer::new`] without the checksum table: payloads right after the index, the
    /// reference layout byte for byte (as the conformance files are). Raw chunks then
    /// carry no checksum.
    pub fn reference_layout(
        out: O,
        datasets: &[DatasetSpec<'_>],
    ) -> Result<Self, WriteError<O::Error>> {
        Self::with_checksums(out, datasets, false)
    }

    fn with_checksums(
        out: O,
        datasets: &[DatasetSpec<'_>],
        checksums: bool,
    ) -> Result<Self, WriteError<O::Error>> {
        check_names(datasets)?;
        let (blob, layouts) = plan_datasets(datasets)
            .map_err(|(index, problem)| WriteError::Dataset { index, problem })?;
        let total = layouts
            .last()
            .map_or(0, |l| l.first.saturating_add(l.cells));
        let (_, index_end) = regions(layouts.len(), u64_of(blob.len()), total)
            .ok_or(WriteError::TooLarge("chunk index"))?;
        let checksums_at = (checksums && total > 0).then_some(index_end);
        let table_len = if checksums_at.is_some() {
            total.checked_mul(CHECKSUM_ENTRY_LEN)
        } else {
            Some(0)
        };
        let payload_start = table_len
            .and_then(|t| index_end.checked_add(t))
            .ok_or(WriteError::TooLarge("checksum table"))?;
        let cells = usize::try_from(total).map_err(|_| WriteError::TooLarge("chunk grid"))?;
        let mut slots = Vec::new();
        slots
            .try_reserve_exact(cells)
            .map_err(|_| WriteError::TooLarge("chunk grid"))?;
        slots.resize(cells, Slot::default());
        let mut w = Writer {
            out,
            pos: 0,
            blob,
            layouts,
            slots,
            execution: ExecutionSettings {
                memory_budget_percent_bps: 0,
                memory_budget_bytes: 0,
            },
            compressor: Box::new(RuzstdCompressor),
            scratch: Vec::new(),
            checksums_at,
            shapes: datasets
                .iter()
                .map(|d| (String::from(d.name), d.shape.to_vec()))
                .collect(),
        };
        let zeros = [0u8; 4096];
        while w.pos < payload_start {
            let n = payload_start.saturating_sub(w.pos).min(u64_of(zeros.len()));
            let n = usize::try_from(n).unwrap_or(0);
            w.append(zeros.get(..n).unwrap_or(&[]))?;
        }
        Ok(w)
    }

    /// Sets the `TIDX` execution settings (default: both 0, the engine default).
    pub fn set_execution(&mut self, settings: ExecutionSettings) {
        self.execution = settings;
    }

    /// Replaces the zstd compressor (default [`RuzstdCompressor`]).
    pub fn set_compressor(&mut self, c: Box<dyn Compressor + Send>) {
        self.compressor = c;
    }

    /// Bytes written so far.
    pub fn position(&self) -> u64 {
        self.pos
    }

    fn append(&mut self, bytes: &[u8]) -> Result<(), WriteError<O::Error>> {
        self.out.append(bytes).map_err(WriteError::Output)?;
        self.pos = self
            .pos
            .checked_add(u64_of(bytes.len()))
            .ok_or(WriteError::TooLarge("file"))?;
        Ok(())
    }

    /// The slot for a chunk, after checking it fits.
    fn slot(
        &self,
        dataset: DatasetId,
        coords: &[u64],
        raw_len: u64,
    ) -> Result<usize, WriteError<O::Error>> {
        let c = Coords::from_slice(coords).unwrap_or_default();
        let err = |problem| WriteError::Chunk {
            dataset,
            coords: c,
            problem,
        };
        let l = usize::try_from(dataset.0)
            .ok()
            .and_then(|i| self.layouts.get(i))
            .ok_or(err(ChunkProblem::UnknownDataset))?;
        if coords.len() != l.grid.as_slice().len() {
            return Err(err(ChunkProblem::Rank));
        }
        let pos = l.linear(coords).ok_or(err(ChunkProblem::OutsideGrid))?;
        let expected = l.tile_bytes(coords).ok_or(err(ChunkProblem::OutsideGrid))?;
        if expected != raw_len {
            return Err(err(ChunkProblem::Length {
                expected,
                found: raw_len,
            }));
        }
        let i = l
            .first
            .checked_add(pos)
            .and_then(|i| usize::try_from(i).ok())
            .filter(|i| *i < self.slots.len())
            .ok_or(err(ChunkProblem::OutsideGrid))?;
        if self.slots.get(i).is_some_and(|s| s.codec.is_some()) {
            return Err(err(ChunkProblem::Duplicate));
        }
        Ok(i)
    }

    /// Writes one chunk: `tile` is the clipped tile's elements, row-major, little-endian;
    /// `codec` says how to store it.
    pub fn write_chunk(
        &mut self,
        dataset: DatasetId,
        coords: &[u64],
        tile: &[u8],
        codec: Codec,
    ) -> Result<(), WriteError<O::Error>> {
        let i = self.slot(dataset, coords, u64_of(tile.len()))?;
        let at = self.pos;
        let (stored, crc) = match codec {
            Codec::Raw => {
                self.append(tile)?;
                (u64_of(tile.len()), crc32c(tile))
            }
            Codec::Zstd => {
                let mut frame = core::mem::take(&mut self.scratch);
                self.compressor
                    .compress(tile, &mut frame)
                    .map_err(WriteError::Compress)?;
                let r = self.append(&frame);
                let n = (u64_of(frame.len()), crc32c(&frame));
                self.scratch = frame;
                r?;
                n
            }
        };
        self.fill(i, at, stored, codec, crc);
        Ok(())
    }

    /// Writes a chunk whose stored bytes are already encoded (copied from another file):
    /// `raw_byte_len` must be the clipped tile size; a raw payload must be that long.
    pub fn write_chunk_encoded(
        &mut self,
        dataset: DatasetId,
        coords: &[u64],
        codec: Codec,
        raw_byte_len: u64,
        stored: &[u8],
    ) -> Result<(), WriteError<O::Error>> {
        let i = self.slot(dataset, coords, raw_byte_len)?;
        if codec == Codec::Raw && u64_of(stored.len()) != raw_byte_len {
            return Err(WriteError::Chunk {
                dataset,
                coords: Coords::from_slice(coords).unwrap_or_default(),
                problem: ChunkProblem::Length {
                    expected: raw_byte_len,
                    found: u64_of(stored.len()),
                },
            });
        }
        let at = self.pos;
        self.append(stored)?;
        self.fill(i, at, u64_of(stored.len()), codec, crc32c(stored));
        Ok(())
    }

    fn fill(&mut self, i: usize, payload_offset: u64, stored: u64, codec: Codec, crc: u32) {
        if let Some(s) = self.slots.get_mut(i) {
            *s = Slot {
                payload_offset,
                stored,
                codec: Some(codec),
                crc,
            };
        }
    }

    /// Splits a whole row-major array into clipped tiles and writes them in canonical
    /// order (so the file gets the reference layout).
    pub fn write_array(
        &mut self,
        dataset: DatasetId,
        data: &[u8],
        codec: Codec,
    ) -> Result<(), WriteError<O::Error>> {
        let l = usize::try_from(dataset.0)
            .ok()
            .and_then(|i| self.layouts.get(i))
            .cloned()
            .ok_or(WriteError::Chunk {
                dataset,
                coords: Coords::default(),
                problem: ChunkProblem::UnknownDataset,
            })?;
        l.for_each_tile(data, |coords, tile| {
            self.write_chunk(dataset, coords.as_slice(), tile, codec)
        })
        .map_err(|expected| WriteError::Chunk {
            dataset,
            coords: Coords::default(),
            problem: ChunkProblem::Length {
                expected: expected.unwrap_or(u64::MAX),
                found: u64_of(data.len()),
            },
        })?
    }

    /// The footer's axis metadata ([`crate::tet::meta`]) follows the rules against the
    /// datasets declared: one name per axis, unique names, coordinates as long as their
    /// axis, referenced datasets that exist and are 1-D (the error-severity rules).
    fn check_axis_metadata(&self, text: &str) -> Result<(), WriteError<O::Error>> {
        let m = crate::tet::meta::parse(text.as_bytes(), 0)
            .map_err(|e| WriteError::Footer(alloc::format!("metadata: {}", e.message)))?;
        let shape_of = |name: &str| {
            self.shapes
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, s)| s.clone())
        };
        // Warnings (an entry for a dataset the file lacks, a marker that is not a number)
        // are the reader's to report; errors are refused.
        let problems = crate::tet::meta::check(&m, &shape_of);
        match problems
            .iter()
            .find(|p| p.code.severity() == tet_core::tet::Severity::Error)
        {
            Some(p) => Err(WriteError::Footer(alloc::format!("{p}"))),
            None => Ok(()),
        }
    }

    /// Checks every cell was written, writes the footer (if any), then the header and
    /// the index, and returns the output.
    pub fn finish(mut self, footer: Option<&FooterSpec>) -> Result<O, WriteError<O::Error>> {
        for (d, l) in self.layouts.iter().enumerate() {
            for cell in 0..l.cells {
                let i = usize::try_from(l.first.saturating_add(cell)).unwrap_or(usize::MAX);
                if self.slots.get(i).is_none_or(|s| s.codec.is_none()) {
                    return Err(WriteError::Missing {
                        dataset: DatasetId(u32::try_from(d).unwrap_or(u32::MAX)),
                        coords: l.delinearize(cell),
                    });
                }
            }
        }
        if let Some(text) = footer.and_then(|f| f.metadata.as_deref()) {
            self.check_axis_metadata(text)?;
        }
        let rows = u64_of(self.slots.len());
        // The checksum table is named in the metadata, so it brings a footer with it.
        let with_table = match (self.checksums_at, footer) {
            (Some(at), f) => {
                Some(footer::with_checksum_table(f, at, rows).map_err(WriteError::Footer)?)
            }
            (None, Some(f)) => Some(f.clone()),
            (None, None) => None,
        };
        if let Some(f) = &with_table {
            let (json, spill) = footer_json(f, self.pos, false).map_err(WriteError::Footer)?;
            self.append(&spill)?;
            self.append(&json)?;
            self.append(footer_tail(u64_of(json.len())).as_bytes())?;
        }
        if let Some(at) = self.checksums_at {
            let mut table = Vec::new();
            let mut pos = at;
            for chunk in self.slots.chunks(ROW_BATCH) {
                table.clear();
                for s in chunk {
                    let e = RawChecksumEntry {
                        payload_offset: s.payload_offset.into(),
                        crc32c: s.crc.into(),
                        reserved: 0.into(),
                    };
                    table.extend_from_slice(e.as_bytes());
                }
                self.out.write_at(pos, &table).map_err(WriteError::Output)?;
                pos = pos.saturating_add(u64_of(table.len()));
            }
        }
        let head = head_bytes(
            self.layouts.len(),
            &self.blob,
            rows,
            self.execution,
            with_table.is_some(),
        )
        .ok_or(WriteError::TooLarge("header"))?;
        self.out.write_at(0, &head).map_err(WriteError::Output)?;
        let mut at = u64_of(head.len());
        let mut batch: Vec<u8> = Vec::new();
        let flush = |batch: &mut Vec<u8>, at: &mut u64, out: &mut O| {
            let r = out.write_at(*at, batch);
            *at = at.saturating_add(u64_of(batch.len()));
            batch.clear();
            r.map_err(WriteError::Output)
        };
        for (d, l) in self.layouts.iter().enumerate() {
            for cell in 0..l.cells {
                let i = usize::try_from(l.first.saturating_add(cell)).unwrap_or(usize::MAX);
                let s = self.slots.get(i).copied().unwrap_or_default();
                let coords = l.delinearize(cell);
                let row = index_row(
                    u32::try_from(d).unwrap_or(0),
                    coords.as_slice(),
                    s.payload_offset,
                    l.tile_bytes(coords.as_slice()).unwrap_or(0),
                    s.stored,
                    s.codec.unwrap_or(Codec::Raw).wire(),
                );
                batch.extend_from_slice(row.as_bytes());
                if batch.len() >= ROW_BATCH.saturating_mul(104) {
                    flush(&mut batch, &mut at, &mut self.out)?;
                }
            }
        }
        if !batch.is_empty() {
            flush(&mut batch, &mut at, &mut self.out)?;
        }
        Ok(self.out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;

    fn spec(name: &str) -> DatasetSpec<'_> {
        DatasetSpec {
            name,
            dtype: DType::U8,
            shape: &[2],
            chunk_shape: &[2],
        }
    }

    #[test]
    fn names_must_be_unique_and_nonempty() {
        let e = Writer::new(Vec::new(), &[spec("a"), spec("b"), spec("a")])
            .err()
            .unwrap();
        assert!(
            matches!(&e, WriteError::DuplicateName { index: 2, first: 0, name } if name == "a"),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            "dataset 2: the name \"a\" is already dataset 0's (dataset names must be unique: a \
             reader finds only the first by name)"
        );
        let e = Writer::new(Vec::new(), &[spec("a"), spec("")])
            .err()
            .unwrap();
        assert_eq!(e.to_string(), "dataset 1: the name is empty");
        // Names that differ only in case are different names.
        assert!(Writer::new(Vec::new(), &[spec("a"), spec("A")]).is_ok());
    }
}
