//! The chunk checksum table: one [`RawChecksumEntry`] per index row, in a span of the
//! payload area that the footer metadata names (docs/tet-v1.md, "Chunk checksums").
//! Parsed and checked in place, without allocating, so firmware can check the raw
//! chunks it folds.

use zerocopy::FromBytes;

use super::finding::{Code, Finding};
use super::raw::RawChecksumEntry;
use super::{Chunk, TetFile};
use crate::arith::{mul, slice, u64_of};
use crate::checksum::crc32c;
use crate::error::{Error, ErrorKind};

/// Bytes per entry.
pub const CHECKSUM_ENTRY_LEN: u64 = 16;

/// A checksum table whose span lies between the end of the index and the end of the
/// payload area and whose entry count is the index's row count.
#[derive(Clone, Copy, Debug)]
pub struct ChecksumTable<'a> {
    entries: &'a [RawChecksumEntry],
    offset: u64,
}

impl<'a> ChecksumTable<'a> {
    /// The table of `rows` entries at `offset` of `file`, as the metadata names it.
    pub fn parse(file: &TetFile<'a>, offset: u64, rows: u64) -> Result<Self, Finding> {
        let bad = |kind| {
            Finding::new(
                Code::ChecksumTable,
                Error::new(kind, "tet_checksums", offset),
            )
        };
        let count = u64_of(file.rows().len());
        if rows != count {
            return Err(bad(ErrorKind::Mismatch {
                expected: count,
                found: rows,
            }));
        }
        let len = mul(rows, CHECKSUM_ENTRY_LEN, "tet_checksums.rows", offset)
            .map_err(|e| Finding::new(Code::ChecksumTable, e))?;
        let limit = file.payload_limit();
        let end = offset.saturating_add(len);
        if offset < file.payload_floor() || end > limit {
            return Err(bad(ErrorKind::OutOfRange {
                value: offset,
                max: limit.saturating_sub(len),
            }));
        }
        let bytes = slice(file.bytes(), offset, len, "tet_checksums")
            .map_err(|e| Finding::new(Code::ChecksumTable, e))?;
        let entries =
            <[RawChecksumEntry]>::ref_from_bytes(bytes).map_err(|_| bad(ErrorKind::Invalid))?;
        Ok(ChecksumTable { entries, offset })
    }

    /// Absolute offset of the table.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Length of the table in bytes.
    pub fn len(&self) -> u64 {
        u64_of(self.entries.len()).saturating_mul(CHECKSUM_ENTRY_LEN)
    }

    /// Whether the table has no entries (the file has no rows).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The checksum recorded for `row`, when it applies to the payload the row points at
    /// now.
    pub fn expected(&self, row: u64, payload_offset: u64) -> Option<u32> {
        let e = self.entries.get(usize::try_from(row).ok()?)?;
        (e.payload_offset.get() == payload_offset).then(|| e.crc32c.get())
    }

    /// Checks `chunk`'s stored bytes: `Ok(true)` when they match, `Ok(false)` when no
    /// entry applies, a `chunk-checksum` finding when they differ.
    pub fn check(&self, chunk: &Chunk<'_>) -> Result<bool, Finding> {
        let Some(stored) = self.expected(chunk.row, chunk.payload_offset) else {
            return Ok(false);
        };
        compare(stored, chunk).map(|()| true).map_err(|e| {
            Finding::new(Code::ChunkChecksum, e)
                .in_dataset(chunk.dataset.0)
                .at_row(chunk.row)
                .at_coords(chunk.coords)
        })
    }

    /// How many of `file`'s rows have an entry that applies.
    pub fn covered(&self, file: &TetFile<'_>) -> u64 {
        let rows = file.rows().iter().zip(self.entries);
        u64_of(
            rows.filter(|(r, e)| r.payload_offset.get() == e.payload_offset.get())
                .count(),
        )
    }
}

impl Chunk<'_> {
    /// Compares the stored bytes with the checksum the file's table records for this
    /// row ([`Chunk::checksum`]): `Ok(true)` when they match, `Ok(false)` when no entry
    /// applies, a `ChecksumMismatch` at the payload's first byte when they differ.
    pub fn check_checksum(&self) -> Result<bool, Error> {
        let Some(stored) = self.checksum else {
            return Ok(false);
        };
        compare(stored, self).map(|()| true)
    }
}

/// `chunk`'s stored bytes against the CRC-32C `stored`: a `ChecksumMismatch` at the
/// payload's first byte when they differ.
fn compare(stored: u32, chunk: &Chunk<'_>) -> Result<(), Error> {
    let computed = crc32c(chunk.payload);
    if computed == stored {
        return Ok(());
    }
    Err(Error::new(
        ErrorKind::ChecksumMismatch {
            stored: stored.into(),
            computed: computed.into(),
        },
        "chunk payload",
        chunk.payload_offset,
    ))
}
