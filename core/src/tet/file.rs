//! [`TetFile`]: the fixed structures of a file, validated, plus chunk lookup.

use super::finding::{Code, Finding, FirstError, Sink};
use super::index::{check_row, PayloadArea};
use super::raw::{off, RawIndexEntry};
use super::{
    ChecksumTable, Codec, Coords, Dataset, DatasetId, DatasetIter, Directory, Footer, IndexHeader,
    Superblock, DIRECTORY_OFFSET, RECORDS_OFFSET, SUPERBLOCK_LEN,
};
use crate::arith::{add, align8, slice, u64_of};
use crate::error::{Error, ErrorKind};

/// An opened `.tet` file: superblock, directory, index header and footer tail, all
/// validated. Borrows the file bytes; `Copy`, `Send` and `Sync`.
#[derive(Clone, Copy, Debug)]
pub struct TetFile<'a> {
    bytes: &'a [u8],
    superblock: Superblock,
    directory: Option<Directory<'a>>,
    index: Option<IndexHeader<'a>>,
    footer: Option<Footer<'a>>,
    /// Why the footer tail did not parse (flag bit 0 set): its code and error.
    footer_problem: Option<(Code, Error)>,
    payload_limit: u64,
    /// The chunk checksum table the footer metadata names, once a caller that reads
    /// the metadata has attached it ([`TetFile::with_checksums`]).
    checksums: Option<ChecksumTable<'a>>,
}

/// A chunk whose index row passed every row check.
#[derive(Clone, Copy, Debug)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Chunk<'a> {
    /// Owning dataset.
    pub dataset: DatasetId,
    /// Index row number.
    pub row: u64,
    /// Grid coordinates.
    pub coords: Coords,
    /// Payload codec.
    pub codec: Codec,
    /// Decoded size in bytes.
    pub raw_byte_len: u64,
    /// Absolute offset of the payload.
    pub payload_offset: u64,
    /// The stored bytes.
    pub payload: &'a [u8],
    /// The CRC-32C of the stored bytes that the file's checksum table records for this
    /// row, when a table is attached and its entry applies to the payload the row points
    /// at ([`Chunk::check_checksum`] compares; decoders call it).
    pub checksum: Option<u32>,
}

fn region_err(code: Code, kind: ErrorKind, what: &'static str, offset: u64) -> Finding {
    Finding::new(code, Error::new(kind, what, offset))
}

impl<'a> TetFile<'a> {
    /// Opens a file, failing on the first error-severity problem in the superblock,
    /// directory or index header. Index rows are checked when read. A footer tail that
    /// does not parse does not fail it: the data does not depend on the footer, so the
    /// file opens without one and [`TetFile::footer_problem`] says why (the payload area
    /// then runs to the end of the file).
    pub fn open(bytes: &'a [u8]) -> Result<TetFile<'a>, Error> {
        /// Passes on every finding but the footer tail's.
        struct DataOnly(FirstError);
        impl Sink<Finding> for DataOnly {
            fn report(&mut self, f: &Finding) {
                if !f.code.is_footer_tail() {
                    self.0.report(f);
                }
            }
        }
        let mut first = DataOnly(FirstError::default());
        let file = TetFile::parse(bytes, &mut first);
        let first = first.0;
        match (first.0, file) {
            (Some(f), _) => Err(f.error),
            (None, Some(file)) => Ok(file),
            (None, None) => Err(Error::new(ErrorKind::Invalid, "superblock", 0)),
        }
    }

    /// Parses the fixed structures, reporting every problem to `sink` and continuing
    /// past the ones that do not hide later structures. Returns `None` only when the
    /// superblock itself is unusable; a part that failed is then absent
    /// ([`TetFile::directory`], [`TetFile::index`] return `None`).
    pub fn parse(bytes: &'a [u8], sink: &mut dyn Sink<Finding>) -> Option<TetFile<'a>> {
        let superblock = match Superblock::parse(bytes, sink) {
            Ok(sb) => sb,
            Err(f) => {
                sink.report(&f);
                return None;
            }
        };
        let file_len = u64_of(bytes.len());
        let mut file = TetFile {
            bytes,
            superblock,
            directory: None,
            index: None,
            footer: None,
            footer_problem: None,
            payload_limit: file_len,
            checksums: None,
        };
        if superblock.has_history_footer() {
            match Footer::parse(bytes, SUPERBLOCK_LEN) {
                Ok(footer) => {
                    file.payload_limit = footer.json_offset();
                    file.footer = Some(footer);
                }
                Err(f) => {
                    sink.report(&f);
                    file.footer_problem = Some((f.code, f.error));
                }
            }
        }
        let limit = file.payload_limit;
        let idx_off = superblock.chunk_index_offset();
        let idx_len = superblock.chunk_index_length();

        if superblock.dataset_count() == 0 {
            if idx_off != SUPERBLOCK_LEN {
                sink.report(&region_err(
                    Code::IndexOffset,
                    ErrorKind::Mismatch {
                        expected: SUPERBLOCK_LEN,
                        found: idx_off,
                    },
                    "superblock.chunk_index_offset",
                    off::sb::CHUNK_INDEX_OFFSET,
                ));
            }
            if idx_len != 0 {
                sink.report(&region_err(
                    Code::IndexLength,
                    ErrorKind::Mismatch {
                        expected: 0,
                        found: idx_len,
                    },
                    "superblock.chunk_index_length",
                    off::sb::CHUNK_INDEX_LENGTH,
                ));
            }
            return Some(file);
        }

        // Dataset directory.
        let blob_len = match slice(bytes, DIRECTORY_OFFSET, 8, "directory.dataset_blob_len") {
            Ok(b) if limit >= RECORDS_OFFSET => {
                let mut w = [0u8; 8];
                w.copy_from_slice(b);
                u64::from_le_bytes(w)
            }
            _ => {
                sink.report(&region_err(
                    Code::FileTruncated,
                    ErrorKind::Truncated {
                        needed: RECORDS_OFFSET,
                        available: limit,
                    },
                    "directory.dataset_blob_len",
                    DIRECTORY_OFFSET,
                ));
                return Some(file);
            }
        };
        let blob_end = match add(
            RECORDS_OFFSET,
            blob_len,
            "directory.dataset_blob_len",
            DIRECTORY_OFFSET,
        ) {
            Ok(end) if end <= limit => end,
            Ok(end) => {
                sink.report(&region_err(
                    Code::DirectoryBounds,
                    ErrorKind::Truncated {
                        needed: end,
                        available: limit,
                    },
                    "directory.dataset_blob_len",
                    DIRECTORY_OFFSET,
                ));
                return Some(file);
            }
            Err(e) => {
                sink.report(&Finding::new(Code::DirectoryBounds, e));
                return Some(file);
            }
        };
        let dir = Directory::new(bytes, RECORDS_OFFSET, blob_end, superblock.dataset_count());
        let mut iter = dir.iter_with(sink);
        let mut failed = None;
        for r in iter.by_ref() {
            if let Err(f) = r {
                failed = Some(f);
            }
        }
        let consumed = iter.position().saturating_sub(RECORDS_OFFSET);
        match failed {
            Some(f) => sink.report(&f),
            None if consumed != blob_len => sink.report(&region_err(
                Code::DirectoryLength,
                ErrorKind::Mismatch {
                    expected: consumed,
                    found: blob_len,
                },
                "directory.dataset_blob_len",
                DIRECTORY_OFFSET,
            )),
            None => file.directory = Some(dir),
        }

        // Chunk index region.
        let expected_off = match align8(
            blob_end,
            "superblock.chunk_index_offset",
            off::sb::CHUNK_INDEX_OFFSET,
        ) {
            Ok(v) => v,
            Err(e) => {
                sink.report(&Finding::new(Code::IndexOffset, e));
                return Some(file);
            }
        };
        if idx_off != expected_off {
            sink.report(&region_err(
                Code::IndexOffset,
                ErrorKind::Mismatch {
                    expected: expected_off,
                    found: idx_off,
                },
                "superblock.chunk_index_offset",
                off::sb::CHUNK_INDEX_OFFSET,
            ));
        } else if let Ok(pad) = slice(
            bytes,
            blob_end,
            expected_off.saturating_sub(blob_end),
            "index.padding",
        ) {
            if let Some(i) = pad.iter().position(|b| *b != 0) {
                sink.report(&region_err(
                    Code::IndexPadding,
                    ErrorKind::NonZero {
                        value: pad.get(i).copied().unwrap_or(0).into(),
                    },
                    "index.padding",
                    blob_end.saturating_add(u64_of(i)),
                ));
            }
        }
        let idx_end = idx_off.checked_add(idx_len);
        match idx_end {
            Some(end) if idx_off >= blob_end && end <= limit => {}
            _ => {
                let kind = match idx_end {
                    Some(end) if idx_off >= blob_end => ErrorKind::Truncated {
                        needed: end,
                        available: limit,
                    },
                    Some(_) => ErrorKind::OutOfRange {
                        value: idx_off,
                        max: blob_end,
                    },
                    None => ErrorKind::Overflow,
                };
                sink.report(&region_err(
                    Code::IndexBounds,
                    kind,
                    "superblock.chunk_index_offset",
                    off::sb::CHUNK_INDEX_OFFSET,
                ));
                return Some(file);
            }
        }
        match IndexHeader::parse(bytes, idx_off, idx_len, sink) {
            Ok(ix) => file.index = Some(ix),
            Err(f) => sink.report(&f),
        }
        Some(file)
    }

    /// The whole file.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// The superblock.
    pub fn superblock(&self) -> &Superblock {
        &self.superblock
    }

    /// The directory, when it parsed.
    pub fn directory(&self) -> Option<Directory<'a>> {
        self.directory
    }

    /// The index header, when it parsed.
    pub fn index(&self) -> Option<IndexHeader<'a>> {
        self.index
    }

    /// The footer, when flag bit 0 is set and the tail parsed.
    pub fn footer(&self) -> Option<Footer<'a>> {
        self.footer
    }

    /// Whether flag bit 0 is set but the footer tail is malformed.
    pub fn footer_invalid(&self) -> bool {
        self.footer_problem.is_some()
    }

    /// Why the footer tail did not parse, when flag bit 0 is set and it did not
    /// (`footer-truncated`, `footer-magic`, `footer-version` or `footer-length`).
    pub fn footer_problem(&self) -> Option<Finding> {
        self.footer_problem.map(|(c, e)| Finding::new(c, e))
    }

    /// The file with its chunk checksum table attached: every [`Chunk`] read from it
    /// then carries its row's recorded CRC-32C ([`Chunk::checksum`]). The table is named
    /// by the footer metadata, which this crate does not parse; `tet-alloc` finds it.
    pub fn with_checksums(mut self, table: ChecksumTable<'a>) -> TetFile<'a> {
        self.checksums = Some(table);
        self
    }

    /// The attached chunk checksum table, if any.
    pub fn checksums(&self) -> Option<ChecksumTable<'a>> {
        self.checksums
    }

    /// End of the payload area: the footer's first byte, or the file length.
    pub fn payload_limit(&self) -> u64 {
        self.payload_limit
    }

    /// First byte payloads may occupy: the end of the index (or of the superblock).
    pub fn payload_floor(&self) -> u64 {
        match self.index {
            Some(ix) => ix.end(),
            None => SUPERBLOCK_LEN,
        }
    }

    /// The datasets, in directory order.
    pub fn datasets(&self) -> DatasetIter<'a, 'static> {
        match self.directory {
            Some(d) => d.iter(),
            None => Directory::new(self.bytes, RECORDS_OFFSET, RECORDS_OFFSET, 0).iter(),
        }
    }

    /// The dataset called `name` (the first, if names repeat).
    pub fn dataset(&self, name: &str) -> Result<Dataset<'a>, Error> {
        match self.directory {
            Some(d) => d.find(name),
            None => Err(Error::new(
                ErrorKind::NotFound,
                "dataset.name",
                DIRECTORY_OFFSET,
            )),
        }
    }

    /// The index rows, unvalidated (empty without an index).
    pub fn rows(&self) -> &'a [RawIndexEntry] {
        self.index.map(|i| i.rows()).unwrap_or(&[])
    }

    pub(crate) fn area(&self) -> PayloadArea {
        PayloadArea {
            floor: self.payload_floor(),
            limit: self.payload_limit,
        }
    }

    /// The chunk of `ds` at grid coordinates `coords`, with its row fully checked.
    ///
    /// When rows are in canonical order (datasets in directory order, each grid
    /// row-major) the row is found in `O(1)` at `first_canonical_row + linear`. Otherwise
    /// this falls back to a linear scan of the index, `O(entry_count)`, with no
    /// allocation; callers that look up many chunks of a non-canonical file should build
    /// their own map (as `tet-alloc` does).
    pub fn chunk(&self, ds: &Dataset<'a>, coords: &[u64]) -> Result<Chunk<'a>, Error> {
        let ix = self.index.ok_or(Error::new(
            ErrorKind::NotFound,
            "tidx",
            self.superblock.chunk_index_offset(),
        ))?;
        let linear = ds.linear(coords).ok_or(Error::new(
            ErrorKind::OutOfRange {
                value: coords.first().copied().unwrap_or(0),
                max: ds.grid_cells(),
            },
            "chunk coordinates",
            ds.shape_offset(),
        ))?;
        let matches = |row: &RawIndexEntry| {
            row.dataset_id.get() == u64::from(ds.id().0)
                && row
                    .chunk_index
                    .iter()
                    .zip(coords)
                    .all(|(a, b)| a.get() == *b)
        };
        let probe = ds.first_canonical_row().saturating_add(linear);
        let rows = ix.rows();
        let hit = usize::try_from(probe)
            .ok()
            .and_then(|p| rows.get(p))
            .filter(|r| matches(r))
            .map(|r| (probe, r))
            .or_else(|| {
                rows.iter()
                    .enumerate()
                    .find(|(_, r)| matches(r))
                    .map(|(i, r)| (u64_of(i), r))
            });
        let (row_no, row) =
            hit.ok_or(Error::new(ErrorKind::NotFound, "tidx.entry", ix.offset()))?;
        self.checked_chunk(ds, row_no, row)
    }

    /// Row `row_no` as a chunk of `ds`, after every row check.
    pub fn checked_chunk(
        &self,
        ds: &Dataset<'a>,
        row_no: u64,
        row: &RawIndexEntry,
    ) -> Result<Chunk<'a>, Error> {
        let ix = self.index.ok_or(Error::new(
            ErrorKind::NotFound,
            "tidx",
            self.superblock.chunk_index_offset(),
        ))?;
        let row_at = ix.row_offset(row_no);
        let mut first = FirstError::default();
        let facts = check_row(ds, row, row_no, row_at, self.area(), &mut first);
        if let Some(f) = first.0 {
            return Err(f.error);
        }
        let bad = Error::new(ErrorKind::Invalid, "tidx.entry", row_at);
        let (start, end) = facts.span.ok_or(bad)?;
        Ok(Chunk {
            dataset: ds.id(),
            row: row_no,
            coords: facts.coords.ok_or(bad)?,
            codec: facts.codec.ok_or(bad)?,
            raw_byte_len: row.raw_byte_len.get(),
            payload_offset: start,
            checksum: self
                .checksums
                .and_then(|t| t.expected(row_no, row.payload_offset.get())),
            payload: slice(
                self.bytes,
                start,
                end.saturating_sub(start),
                "tidx.entry.payload_offset",
            )?,
        })
    }
}
