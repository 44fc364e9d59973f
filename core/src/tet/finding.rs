//! Findings: one reported problem with a stable code, a severity and the error that
//! locates it. The table of codes is in `docs/tet-v1.md`.

use super::Coords;
use crate::error::Error;
use crate::finding::codes;
pub use crate::finding::{Report, Severity, Sink};

/// A sink keeping the first error-severity `.tet` finding.
pub type FirstError = crate::finding::FirstError<Finding>;

codes! {
    FileTruncated = "file-truncated", Error, "The file ends inside a fixed structure.";
    SuperblockMagic = "superblock-magic", Error, "Bytes 0..4 are not `TETR`.";
    LayoutVersion = "layout-version", Error, "`layout_version` is not 1.";
    SuperblockFlags = "superblock-flags", Warning, "Undefined superblock flag bits are set.";
    IndexOffset = "index-offset", Error, "`chunk_index_offset` is not where the directory says the index starts.";
    IndexLength = "index-length", Error, "`chunk_index_length` is not `32 + entry_count * 104` (or 0 for an empty file).";
    IndexBounds = "index-bounds", Error, "The chunk index region does not fit between the directory and the footer or end of file.";
    IndexPadding = "index-padding", Warning, "Padding between the directory and the index is not zero.";
    DirectoryBounds = "directory-bounds", Error, "`dataset_blob_len` runs past the end of the file.";
    DirectoryLength = "directory-length", Error, "The records do not fill `dataset_blob_len` exactly.";
    RecordTruncated = "record-truncated", Error, "A dataset record runs past the end of the directory.";
    RecordName = "record-name", Error, "A dataset name is not UTF-8.";
    RecordDtype = "record-dtype", Error, "A dataset `dtype` is not a tag 1..=10.";
    RecordNdim = "record-ndim", Error, "A dataset `ndim` is not in 1..=8.";
    RecordReserved = "record-reserved", Warning, "A dataset record's reserved field is not zero.";
    RecordPadding = "record-padding", Warning, "Padding after a dataset name is not zero.";
    RecordChunkShape = "record-chunk-shape", Error, "A `chunk_shape` extent is zero.";
    RecordSize = "record-size", Error, "The dataset's byte size or chunk count overflows 64 bits.";
    IndexMagic = "index-magic", Error, "The chunk index does not start with `TIDX`.";
    IndexVersion = "index-version", Error, "`index_version` is not 1.";
    IndexReserved = "index-reserved", Warning, "A reserved field of the `TIDX` header is not zero.";
    BudgetPercent = "budget-percent", Warning, "`memory_budget_percent_bps` is above 10000 (100 %).";
    ChunkDataset = "chunk-dataset", Error, "An index row names a dataset that does not exist.";
    ChunkCoords = "chunk-coords", Error, "An index row's coordinates are outside the chunk grid.";
    ChunkCoordsUnused = "chunk-coords-unused", Error, "An index row has a nonzero coordinate past the dataset's rank.";
    ChunkCodec = "chunk-codec", Error, "An index row has an unknown codec.";
    ChunkReserved = "chunk-reserved", Warning, "An index row's reserved field is not zero.";
    ChunkRawLen = "chunk-raw-len", Error, "`raw_byte_len` is not the clipped tile's element count times the dtype size.";
    ChunkStoredLen = "chunk-stored-len", Error, "A raw chunk's `stored_byte_len` differs from its `raw_byte_len`.";
    PayloadBounds = "payload-bounds", Error, "A payload runs past the end of the payload area (file end, or footer start).";
    PayloadMetadata = "payload-metadata", Error, "A payload starts inside the superblock, directory or index.";
    PayloadOverlap = "payload-overlap", Error, "Two payloads share bytes.";
    ChunkMissing = "chunk-missing", Error, "A chunk grid cell has no index row.";
    ChunkDuplicate = "chunk-duplicate", Error, "A chunk grid cell has more than one index row.";
    TrailingBytes = "trailing-bytes", Warning, "Bytes after the last payload are neither payload nor footer.";
    FooterTruncated = "footer-truncated", Error, "Flag bit 0 is set but the file is too short for a footer.";
    FooterMagic = "footer-magic", Error, "The last four bytes are not `THST`.";
    FooterVersion = "footer-version", Error, "`history_version` is not 1.";
    FooterLength = "footer-length", Error, "`history_json_len` reaches back into the index or superblock.";
    FooterJson = "footer-json", Error, "`history_json` is not a valid history object.";
    MetadataSpill = "metadata-spill", Error, "`metadata_ref` does not name a valid span between the payloads and `history_json`.";
    ChecksumTable = "checksum-table", Error, "The chunk checksum table the metadata names does not lie between the index and the end of the payload area, or has a row count other than the index's.";
    MetadataShape = "metadata-shape", Error, "The footer `metadata` is not in the shapes readers take (`datasets[name]` with `dim_names`, `coords`, `tet_coords`, `attrs`), or passes a reader's cap (8 names, 65536 labels, 1 KiB strings).";
    MetadataDims = "metadata-dims", Error, "A dataset's `dim_names` does not give one nonempty, unique, non-numeric name per axis.";
    MetadataCoords = "metadata-coords", Error, "A coordinate names no axis, is not as long as its axis, or references a dataset that is missing or not 1-D.";
    MetadataAttrs = "metadata-attrs", Warning, "A dataset's `_FillValue` or `missing_value` (each value of a list, at most 9) is not a number its elements can equal, or its packing is not finite.";
    ChunkChecksum = "chunk-checksum", Error, "A chunk's stored bytes do not match its checksum table entry (CRC-32C).";
    VerifyIncomplete = "verify-incomplete", Error, "The caller's scratch buffer was too small to check coverage and overlap.";
    ZstdFrame = "zstd-frame", Error, "A zstd payload is not one well-formed frame (bad magic, reserved bit, truncated or corrupt block, dictionary, empty span).";
    ZstdWindow = "zstd-window", Error, "A zstd frame declares a window larger than 128 MiB.";
    DecodedLength = "decoded-length", Error, "A zstd frame declares or decodes to a size other than `raw_byte_len`.";
    ContentChecksum = "content-checksum", Error, "A zstd frame's content checksum does not match the decoded bytes.";
    ZstdTrailing = "zstd-trailing", Error, "Bytes follow the zstd frame inside the stored span.";
}

/// One problem found in a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Finding {
    /// What rule was broken.
    pub code: Code,
    /// Where, which field, and the values involved.
    pub error: Error,
    /// The dataset concerned, if any.
    pub dataset: Option<u32>,
    /// The index row concerned, if any.
    pub row: Option<u64>,
    /// The chunk grid cell concerned, if any.
    pub coords: Option<Coords>,
}

impl Code {
    /// Whether the code is about the footer tail (found when the file is opened); the
    /// data never depends on it.
    pub fn is_footer_tail(self) -> bool {
        matches!(
            self,
            Code::FooterTruncated | Code::FooterMagic | Code::FooterVersion | Code::FooterLength
        )
    }
}

impl Finding {
    /// A finding with no dataset, row or coordinates attached.
    pub fn new(code: Code, error: Error) -> Self {
        Finding {
            code,
            error,
            dataset: None,
            row: None,
            coords: None,
        }
    }

    /// Attaches a dataset.
    pub fn in_dataset(mut self, id: u32) -> Self {
        self.dataset = Some(id);
        self
    }

    /// Attaches a row.
    pub fn at_row(mut self, row: u64) -> Self {
        self.row = Some(row);
        self
    }

    /// Attaches coordinates.
    pub fn at_coords(mut self, c: Coords) -> Self {
        self.coords = Some(c);
        self
    }

    /// The code's severity.
    pub fn severity(&self) -> Severity {
        self.code.severity()
    }
}

impl Report for Finding {
    fn code_name(&self) -> &'static str {
        self.code.as_str()
    }
    fn severity(&self) -> Severity {
        self.code.severity()
    }
    fn error(&self) -> &Error {
        &self.error
    }
}
