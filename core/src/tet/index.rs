//! The `TIDX` chunk index header and the checks on single index rows.

use zerocopy::FromBytes;

use super::finding::{Code, Finding, Sink};
use super::raw::{off, RawIndexEntry, RawTidxHeader};
use super::{
    Codec, Coords, Dataset, INDEX_ENTRY_LEN, INDEX_HEADER_LEN, INDEX_MAGIC, INDEX_VERSION,
};
use crate::arith::{add, mul, slice};
use crate::error::{Error, ErrorKind};

/// The execution settings carried by the `TIDX` header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct ExecutionSettings {
    /// Basis points of host RAM (10000 = 100 %); 0 = engine default.
    pub memory_budget_percent_bps: u16,
    /// Fixed byte cap; 0 = use the percentage.
    pub memory_budget_bytes: u32,
}

impl ExecutionSettings {
    /// The engine default percentage, in basis points, used when both fields are 0.
    pub const DEFAULT_PERCENT_BPS: u16 = 2500;
}

/// A `TIDX` header whose magic and version are correct, with its row table.
#[derive(Clone, Copy, Debug)]
pub struct IndexHeader<'a> {
    raw: RawTidxHeader,
    offset: u64,
    rows: &'a [RawIndexEntry],
}

impl<'a> IndexHeader<'a> {
    /// Parses the index region `[offset, offset + length)` of `file`. The caller has
    /// already checked that the region lies inside the file.
    pub fn parse(
        file: &'a [u8],
        offset: u64,
        length: u64,
        sink: &mut dyn Sink<Finding>,
    ) -> Result<IndexHeader<'a>, Finding> {
        let region =
            slice(file, offset, length, "tidx").map_err(|e| Finding::new(Code::IndexBounds, e))?;
        let Ok((raw, _)) = RawTidxHeader::read_from_prefix(region) else {
            return Err(Finding::new(
                Code::IndexLength,
                Error::new(
                    ErrorKind::Mismatch {
                        expected: INDEX_HEADER_LEN,
                        found: length,
                    },
                    "superblock.chunk_index_length",
                    super::raw::off::sb::CHUNK_INDEX_LENGTH,
                ),
            ));
        };
        if raw.magic != INDEX_MAGIC {
            return Err(Finding::new(
                Code::IndexMagic,
                Error::new(
                    ErrorKind::BadMagic {
                        expected: INDEX_MAGIC,
                        found: raw.magic,
                    },
                    "tidx.magic",
                    offset.saturating_add(off::tidx::MAGIC),
                ),
            ));
        }
        let version = raw.index_version.get();
        if version != INDEX_VERSION {
            return Err(Finding::new(
                Code::IndexVersion,
                Error::new(
                    ErrorKind::Unsupported {
                        version: version.into(),
                    },
                    "tidx.index_version",
                    offset.saturating_add(off::tidx::INDEX_VERSION),
                ),
            ));
        }
        let count = raw.entry_count.get();
        let count_at = offset.saturating_add(off::tidx::ENTRY_COUNT);
        let len_err = |e: Error| Finding::new(Code::IndexLength, e);
        let expected = add(
            INDEX_HEADER_LEN,
            mul(count, INDEX_ENTRY_LEN, "tidx.entry_count", count_at).map_err(len_err)?,
            "tidx.entry_count",
            count_at,
        )
        .map_err(len_err)?;
        if expected != length {
            return Err(Finding::new(
                Code::IndexLength,
                Error::new(
                    ErrorKind::Mismatch {
                        expected,
                        found: length,
                    },
                    "superblock.chunk_index_length",
                    super::raw::off::sb::CHUNK_INDEX_LENGTH,
                ),
            ));
        }
        let rows_bytes = region.get(32..).unwrap_or(&[]);
        let rows = <[RawIndexEntry]>::ref_from_bytes(rows_bytes)
            .map_err(|_| len_err(Error::new(ErrorKind::Invalid, "tidx.entries", offset)))?;

        for (v, what, at) in [
            (
                u64::from(raw.reserved0.get()),
                "tidx.reserved",
                off::tidx::RESERVED0,
            ),
            (raw.reserved1.get(), "tidx.reserved", off::tidx::RESERVED1),
        ] {
            if v != 0 {
                sink.report(&Finding::new(
                    Code::IndexReserved,
                    Error::new(
                        ErrorKind::NonZero { value: v },
                        what,
                        offset.saturating_add(at),
                    ),
                ));
            }
        }
        let bps = raw.memory_budget_percent_bps.get();
        if bps > 10_000 {
            sink.report(&Finding::new(
                Code::BudgetPercent,
                Error::new(
                    ErrorKind::OutOfRange {
                        value: bps.into(),
                        max: 10_000,
                    },
                    "tidx.memory_budget_percent_bps",
                    offset.saturating_add(off::tidx::BUDGET_BPS),
                ),
            ));
        }
        Ok(IndexHeader { raw, offset, rows })
    }

    /// The raw header.
    pub fn raw(&self) -> &RawTidxHeader {
        &self.raw
    }

    /// Absolute offset of the header.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Absolute offset one past the last row.
    pub fn end(&self) -> u64 {
        self.row_offset(self.entry_count())
    }

    /// Number of rows.
    pub fn entry_count(&self) -> u64 {
        self.raw.entry_count.get()
    }

    /// The rows, unvalidated.
    pub fn rows(&self) -> &'a [RawIndexEntry] {
        self.rows
    }

    /// Absolute offset of row `i`.
    pub fn row_offset(&self, i: u64) -> u64 {
        self.offset
            .saturating_add(INDEX_HEADER_LEN)
            .saturating_add(i.saturating_mul(INDEX_ENTRY_LEN))
    }

    /// The execution settings.
    pub fn execution(&self) -> ExecutionSettings {
        ExecutionSettings {
            memory_budget_percent_bps: self.raw.memory_budget_percent_bps.get(),
            memory_budget_bytes: self.raw.memory_budget_bytes.get(),
        }
    }
}

/// What the row checks learned about a row: its codec and payload span when those are
/// valid, and whether its coordinates lie in the grid.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RowFacts {
    pub coords: Option<Coords>,
    pub codec: Option<Codec>,
    /// `(start, end)` when the payload lies inside `[payload_floor, payload_limit)`.
    pub span: Option<(u64, u64)>,
}

/// The bounds payloads must respect.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PayloadArea {
    /// First byte after the index (payloads may not start before it).
    pub floor: u64,
    /// First byte of the footer, or the file length.
    pub limit: u64,
}

/// Checks one row against its dataset and reports every problem to `sink`.
pub(crate) fn check_row(
    ds: &Dataset<'_>,
    row: &RawIndexEntry,
    row_no: u64,
    row_at: u64,
    area: PayloadArea,
    sink: &mut dyn Sink<Finding>,
) -> RowFacts {
    let at = |field: u64| row_at.saturating_add(field);
    let mut report =
        |code: Code, kind: ErrorKind, what: &'static str, offset: u64, coords: Option<Coords>| {
            let mut f = Finding::new(code, Error::new(kind, what, offset))
                .in_dataset(ds.id().0)
                .at_row(row_no);
            f.coords = coords;
            sink.report(&f);
        };
    let ndim = ds.ndim();
    let all = row.coords();
    let (used, unused) = all.split_at(ndim.min(all.len()));
    let coords = Coords::from_slice(used);
    for (i, c) in unused.iter().enumerate() {
        if *c != 0 {
            let slot = crate::arith::u64_of(ndim.saturating_add(i));
            report(
                Code::ChunkCoordsUnused,
                ErrorKind::NonZero { value: *c },
                "tidx.entry.chunk_index",
                at(off::row::CHUNK_INDEX.saturating_add(slot.saturating_mul(8))),
                coords,
            );
        }
    }
    let mut in_grid = None;
    if ds.linear(used).is_some() {
        in_grid = coords;
    } else {
        // Name the first axis that is out of range.
        let (axis, value, max) = used
            .iter()
            .zip(ds.grid())
            .enumerate()
            .find(|(_, (c, g))| **c >= *g)
            .map(|(i, (c, g))| (i, *c, g.saturating_sub(1)))
            .unwrap_or((0, 0, 0));
        report(
            Code::ChunkCoords,
            ErrorKind::OutOfRange { value, max },
            "tidx.entry.chunk_index",
            at(off::row::CHUNK_INDEX.saturating_add(crate::arith::u64_of(axis).saturating_mul(8))),
            coords,
        );
    }

    let codec = Codec::from_wire(row.codec.get());
    if codec.is_none() {
        report(
            Code::ChunkCodec,
            ErrorKind::OutOfRange {
                value: row.codec.get().into(),
                max: 1,
            },
            "tidx.entry.codec",
            at(off::row::CODEC),
            coords,
        );
    }
    if row.reserved.get() != 0 {
        report(
            Code::ChunkReserved,
            ErrorKind::NonZero {
                value: row.reserved.get().into(),
            },
            "tidx.entry.reserved",
            at(off::row::RESERVED),
            coords,
        );
    }
    let raw_len = row.raw_byte_len.get();
    let stored = row.stored_byte_len.get();
    if let Some(c) = in_grid {
        if let Some(expected) = ds.tile_bytes(c.as_slice()) {
            if expected != raw_len {
                report(
                    Code::ChunkRawLen,
                    ErrorKind::Mismatch {
                        expected,
                        found: raw_len,
                    },
                    "tidx.entry.raw_byte_len",
                    at(off::row::RAW_BYTE_LEN),
                    coords,
                );
            }
        }
    }
    if codec == Some(Codec::Raw) && stored != raw_len {
        report(
            Code::ChunkStoredLen,
            ErrorKind::Mismatch {
                expected: raw_len,
                found: stored,
            },
            "tidx.entry.stored_byte_len",
            at(off::row::STORED_BYTE_LEN),
            coords,
        );
    }
    let start = row.payload_offset.get();
    let mut span = None;
    match start.checked_add(stored) {
        Some(end) if end > area.limit => report(
            Code::PayloadBounds,
            ErrorKind::Truncated {
                needed: end,
                available: area.limit,
            },
            "tidx.entry.payload_offset",
            at(off::row::PAYLOAD_OFFSET),
            coords,
        ),
        None => report(
            Code::PayloadBounds,
            ErrorKind::Overflow,
            "tidx.entry.stored_byte_len",
            at(off::row::STORED_BYTE_LEN),
            coords,
        ),
        Some(_) if start < area.floor && stored > 0 => report(
            Code::PayloadMetadata,
            ErrorKind::OutOfRange {
                value: start,
                max: area.floor,
            },
            "tidx.entry.payload_offset",
            at(off::row::PAYLOAD_OFFSET),
            coords,
        ),
        Some(end) => span = Some((start, end)),
    }
    RowFacts {
        coords: in_grid,
        codec,
        span,
    }
}
