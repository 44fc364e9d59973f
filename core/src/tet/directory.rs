//! The dataset directory: `dataset_blob_len` at byte 32, then variable-length records.

use zerocopy::little_endian::U64;
use zerocopy::FromBytes;

use super::finding::{Code, Finding, Sink};
use super::raw::{off, RawRecordHeader};
use super::{Coords, DType, DatasetId, MAX_NDIM};
use crate::arith::{add, align8, div_ceil, mul, slice, to_usize, u64_of};
use crate::error::{Error, ErrorKind};

/// The directory region: `count` records in `[start, end)` of `file`.
#[derive(Clone, Copy, Debug)]
pub struct Directory<'a> {
    file: &'a [u8],
    start: u64,
    end: u64,
    count: u32,
}

/// One validated dataset record.
#[derive(Clone, Copy, Debug)]
pub struct Dataset<'a> {
    id: DatasetId,
    offset: u64,
    len: u64,
    name: &'a str,
    dtype: DType,
    shape: &'a [U64],
    chunk_shape: &'a [U64],
    shape_offset: u64,
    elements: u64,
    grid_cells: u64,
    first_row: u64,
}

impl<'a> Directory<'a> {
    pub(crate) fn new(file: &'a [u8], start: u64, end: u64, count: u32) -> Self {
        Directory {
            file,
            start,
            end,
            count,
        }
    }

    /// Number of records the superblock announces.
    pub fn count(&self) -> u32 {
        self.count
    }

    /// Absolute offset of the first record.
    pub fn start(&self) -> u64 {
        self.start
    }

    /// Absolute end offset (`40 + dataset_blob_len`).
    pub fn end(&self) -> u64 {
        self.end
    }

    /// Iterates the records in order. Warnings go nowhere; use [`Directory::iter_with`]
    /// to receive them.
    pub fn iter(&self) -> DatasetIter<'a, 'static> {
        DatasetIter::new(*self, None)
    }

    /// Iterates the records, reporting warnings (reserved fields, padding) to `sink`.
    pub fn iter_with<'s>(&self, sink: &'s mut dyn Sink<Finding>) -> DatasetIter<'a, 's> {
        DatasetIter::new(*self, Some(sink))
    }

    /// The record with this name (the first, if names repeat).
    pub fn find(&self, name: &str) -> Result<Dataset<'a>, Error> {
        for d in self.iter() {
            let d = d.map_err(|f| f.error)?;
            if d.name == name {
                return Ok(d);
            }
        }
        Err(Error::new(ErrorKind::NotFound, "dataset.name", self.start))
    }

    /// The record with this id (walks the directory: `O(id)`).
    pub fn get(&self, id: DatasetId) -> Result<Dataset<'a>, Error> {
        for d in self.iter() {
            let d = d.map_err(|f| f.error)?;
            if d.id == id {
                return Ok(d);
            }
        }
        Err(Error::new(
            ErrorKind::OutOfRange {
                value: id.0.into(),
                max: u64::from(self.count).saturating_sub(1),
            },
            "dataset_id",
            self.start,
        ))
    }

    /// Parses the record at absolute offset `at` (which the caller knows to be a record
    /// start, for instance from an earlier walk).
    pub(crate) fn record_at(
        &self,
        at: u64,
        id: DatasetId,
        first_row: u64,
        sink: Option<&mut dyn Sink<Finding>>,
    ) -> Result<Dataset<'a>, Finding> {
        parse_record(self.file, at, self.end, id, first_row, sink)
    }
}

/// Fused iterator over dataset records: after the first error it yields nothing more.
pub struct DatasetIter<'a, 's> {
    dir: Directory<'a>,
    at: u64,
    next_id: u32,
    first_row: u64,
    done: bool,
    sink: Option<&'s mut dyn Sink<Finding>>,
}

impl<'a, 's> DatasetIter<'a, 's> {
    fn new(dir: Directory<'a>, sink: Option<&'s mut dyn Sink<Finding>>) -> Self {
        DatasetIter {
            at: dir.start,
            dir,
            next_id: 0,
            first_row: 0,
            done: false,
            sink,
        }
    }

    /// Absolute offset where the next record would start (after the last one, once
    /// the iterator is exhausted without error).
    pub fn position(&self) -> u64 {
        self.at
    }
}

impl<'a> Iterator for DatasetIter<'a, '_> {
    type Item = Result<Dataset<'a>, Finding>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done || self.next_id >= self.dir.count {
            return None;
        }
        let sink: Option<&mut dyn Sink<Finding>> = match &mut self.sink {
            Some(s) => Some(&mut **s),
            None => None,
        };
        let r = parse_record(
            self.dir.file,
            self.at,
            self.dir.end,
            DatasetId(self.next_id),
            self.first_row,
            sink,
        );
        match &r {
            Ok(d) => {
                self.at = self.at.saturating_add(d.len);
                self.next_id = self.next_id.saturating_add(1);
                self.first_row = self.first_row.saturating_add(d.grid_cells);
            }
            Err(_) => self.done = true,
        }
        Some(r)
    }
}

fn rec_err(code: Code, kind: ErrorKind, what: &'static str, at: u64, id: DatasetId) -> Finding {
    Finding::new(code, Error::new(kind, what, at)).in_dataset(id.0)
}

fn parse_record<'a>(
    file: &'a [u8],
    at: u64,
    end: u64,
    id: DatasetId,
    first_row: u64,
    mut sink: Option<&mut dyn Sink<Finding>>,
) -> Result<Dataset<'a>, Finding> {
    let avail = end.saturating_sub(at);
    let truncated = |needed: u64, what: &'static str| {
        rec_err(
            Code::RecordTruncated,
            ErrorKind::Truncated {
                needed: at.saturating_add(needed),
                available: end,
            },
            what,
            at,
            id,
        )
    };
    let wrap = |e: Error| Finding::new(Code::RecordTruncated, e).in_dataset(id.0);
    if avail < 16 {
        return Err(truncated(16, "dataset.header"));
    }
    let head_bytes = slice(file, at, 16, "dataset.header").map_err(wrap)?;
    let head = RawRecordHeader::read_from_bytes(head_bytes)
        .map_err(|_| truncated(16, "dataset.header"))?;

    let name_len = u64::from(head.name_len.get());
    let name_end = add(16, name_len, "dataset.name_len", at).map_err(wrap)?;
    if name_end > avail {
        return Err(truncated(name_end, "dataset.name_len"));
    }
    let name_at = at.saturating_add(off::rec::NAME);
    let name_bytes = slice(file, name_at, name_len, "dataset.name").map_err(wrap)?;
    let name = core::str::from_utf8(name_bytes).map_err(|e| {
        rec_err(
            Code::RecordName,
            ErrorKind::InvalidUtf8 {
                valid_up_to: u64_of(e.valid_up_to()),
            },
            "dataset.name",
            name_at,
            id,
        )
    })?;

    let dtype = DType::from_tag(head.dtype.get()).ok_or_else(|| {
        rec_err(
            Code::RecordDtype,
            ErrorKind::OutOfRange {
                value: head.dtype.get().into(),
                max: 10,
            },
            "dataset.dtype",
            at.saturating_add(off::rec::DTYPE),
            id,
        )
    })?;
    let ndim_raw = head.ndim.get();
    let ndim = usize::try_from(ndim_raw)
        .ok()
        .filter(|n| (1..=MAX_NDIM).contains(n))
        .ok_or_else(|| {
            rec_err(
                Code::RecordNdim,
                ErrorKind::OutOfRange {
                    value: ndim_raw.into(),
                    max: 8,
                },
                "dataset.ndim",
                at.saturating_add(off::rec::NDIM),
                id,
            )
        })?;
    if head.reserved.get() != 0 {
        if let Some(s) = sink.as_deref_mut() {
            s.report(&rec_err(
                Code::RecordReserved,
                ErrorKind::NonZero {
                    value: head.reserved.get().into(),
                },
                "dataset.reserved",
                at.saturating_add(off::rec::RESERVED),
                id,
            ));
        }
    }

    let shape_rel = align8(name_end, "dataset.name_len", at).map_err(wrap)?;
    let dims_len = u64_of(ndim).saturating_mul(8);
    let rec_len = shape_rel.saturating_add(dims_len.saturating_mul(2));
    if rec_len > avail {
        return Err(truncated(rec_len, "dataset.shape"));
    }
    let pad_at = at.saturating_add(name_end);
    let padding = slice(
        file,
        pad_at,
        shape_rel.saturating_sub(name_end),
        "dataset.padding",
    )
    .map_err(wrap)?;
    if let Some(i) = padding.iter().position(|b| *b != 0) {
        if let Some(s) = sink {
            s.report(&rec_err(
                Code::RecordPadding,
                ErrorKind::NonZero {
                    value: padding.get(i).copied().unwrap_or(0).into(),
                },
                "dataset.padding",
                pad_at.saturating_add(u64_of(i)),
                id,
            ));
        }
    }
    let shape_offset = at.saturating_add(shape_rel);
    let dims = slice(
        file,
        shape_offset,
        dims_len.saturating_mul(2),
        "dataset.shape",
    )
    .map_err(wrap)?;
    let dims = <[U64]>::ref_from_bytes(dims).map_err(|_| truncated(rec_len, "dataset.shape"))?;
    let (shape, chunk_shape) = dims
        .split_at_checked(ndim)
        .ok_or_else(|| truncated(rec_len, "dataset.shape"))?;

    let chunk_offset = shape_offset.saturating_add(dims_len);
    for (i, c) in chunk_shape.iter().enumerate() {
        if c.get() == 0 {
            return Err(rec_err(
                Code::RecordChunkShape,
                ErrorKind::Zero,
                "dataset.chunk_shape",
                chunk_offset.saturating_add(u64_of(i).saturating_mul(8)),
                id,
            ));
        }
    }
    let size_err = |e: Error| Finding::new(Code::RecordSize, e).in_dataset(id.0);
    let (elements, grid_cells) = if shape.iter().any(|d| d.get() == 0) {
        (0, 0)
    } else {
        let mut elements: u64 = 1;
        let mut cells: u64 = 1;
        for (s, c) in shape.iter().zip(chunk_shape) {
            elements = mul(elements, s.get(), "dataset.shape", shape_offset).map_err(size_err)?;
            cells = mul(
                cells,
                div_ceil(s.get(), c.get()),
                "dataset.shape",
                shape_offset,
            )
            .map_err(size_err)?;
        }
        (elements, cells)
    };
    mul(elements, dtype.size(), "dataset.shape", shape_offset).map_err(size_err)?;
    // A dataset whose row count cannot be addressed on this target is unusable here.
    to_usize(grid_cells, "dataset.shape", shape_offset).map_err(size_err)?;

    Ok(Dataset {
        id,
        offset: at,
        len: rec_len,
        name,
        dtype,
        shape,
        chunk_shape,
        shape_offset,
        elements,
        grid_cells,
        first_row,
    })
}

impl<'a> Dataset<'a> {
    /// Position in the directory.
    pub fn id(&self) -> DatasetId {
        self.id
    }

    /// Absolute offset of the record.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Byte length of the record, padding included.
    pub fn record_len(&self) -> u64 {
        self.len
    }

    /// Absolute offset of `shape[0]`.
    pub fn shape_offset(&self) -> u64 {
        self.shape_offset
    }

    /// The UTF-8 name.
    pub fn name(&self) -> &'a str {
        self.name
    }

    /// Element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Rank, 1 ..= 8.
    pub fn ndim(&self) -> usize {
        self.shape.len()
    }

    /// Global shape.
    pub fn shape(&self) -> impl DoubleEndedIterator<Item = u64> + ExactSizeIterator + 'a {
        self.shape.iter().map(|d| d.get())
    }

    /// Chunk shape.
    pub fn chunk_shape(&self) -> impl DoubleEndedIterator<Item = u64> + ExactSizeIterator + 'a {
        self.chunk_shape.iter().map(|d| d.get())
    }

    /// Chunks along each axis: `ceil(shape / chunk_shape)`.
    pub fn grid(&self) -> impl DoubleEndedIterator<Item = u64> + ExactSizeIterator + 'a {
        self.shape
            .iter()
            .zip(self.chunk_shape)
            .map(|(s, c)| div_ceil(s.get(), c.get()))
    }

    /// Number of chunks in the grid (the number of index rows this dataset must own).
    pub fn grid_cells(&self) -> u64 {
        self.grid_cells
    }

    /// Number of elements.
    pub fn element_count(&self) -> u64 {
        self.elements
    }

    /// Logical size in bytes (element count times dtype size; checked at parse time).
    pub fn logical_bytes(&self) -> u64 {
        self.elements.saturating_mul(self.dtype.size())
    }

    /// The index row this dataset's first chunk has when rows are in canonical order
    /// (datasets in directory order, each grid in row-major order).
    pub fn first_canonical_row(&self) -> u64 {
        self.first_row
    }

    /// Row-major position of `coords` in the grid, or `None` when the rank differs or a
    /// coordinate is outside the grid.
    pub fn linear(&self, coords: &[u64]) -> Option<u64> {
        if coords.len() != self.ndim() {
            return None;
        }
        let mut pos: u64 = 0;
        for (c, g) in coords.iter().zip(self.grid()) {
            if *c >= g {
                return None;
            }
            pos = pos.checked_mul(g)?.checked_add(*c)?;
        }
        Some(pos)
    }

    /// Grid coordinates of row-major position `pos` (which must be below
    /// [`Dataset::grid_cells`]).
    pub fn delinearize(&self, mut pos: u64) -> Coords {
        let mut v = [0u64; MAX_NDIM];
        let n = self.ndim();
        for (slot, g) in v.iter_mut().take(n).rev().zip(self.grid().rev()) {
            *slot = pos.checked_rem(g).unwrap_or(0);
            pos = pos.checked_div(g).unwrap_or(0);
        }
        Coords::from_slice(v.get(..n).unwrap_or(&[])).unwrap_or_default()
    }

    /// Extent of the tile at `coords` along each axis, clipped to the array bounds;
    /// `None` when `coords` is not in the grid.
    pub fn tile_shape(&self, coords: &[u64]) -> Option<Coords> {
        self.linear(coords)?;
        let mut v = [0u64; MAX_NDIM];
        for ((slot, c), (s, k)) in v
            .iter_mut()
            .zip(coords)
            .zip(self.shape.iter().zip(self.chunk_shape))
        {
            let start = c.checked_mul(k.get())?;
            *slot = k.get().min(s.get().checked_sub(start)?);
        }
        Coords::from_slice(v.get(..self.ndim())?)
    }

    /// Bytes of the decoded tile at `coords` (clipped), or `None` outside the grid.
    pub fn tile_bytes(&self, coords: &[u64]) -> Option<u64> {
        let t = self.tile_shape(coords)?;
        t.as_slice()
            .iter()
            .try_fold(self.dtype.size(), |acc, e| acc.checked_mul(*e))
    }
}
