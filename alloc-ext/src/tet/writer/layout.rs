//! The writer's layout: each dataset's grid, the directory blob, the regions before the
//! payloads, the header and index rows as zerocopy structs, clipped tiles.

use alloc::vec::Vec;

use tet_core::arith::u64_of;
use tet_core::tet::raw::{RawIndexEntry, RawRecordHeader, RawSuperblock, RawTidxHeader};
use tet_core::tet::{
    Coords, DType, ExecutionSettings, FLAG_HISTORY_FOOTER, INDEX_ENTRY_LEN, INDEX_HEADER_LEN,
    INDEX_MAGIC, INDEX_VERSION, LAYOUT_VERSION, MAX_NDIM, RECORDS_OFFSET, SUPERBLOCK_LEN,
    SUPERBLOCK_MAGIC,
};
use zerocopy::little_endian::{U16, U32, U64};
use zerocopy::IntoBytes;

use super::*;

/// A declared dataset, with its grid.
#[derive(Clone, Debug)]
pub(crate) struct Layout {
    pub(crate) dtype: DType,
    pub(crate) shape: Coords,
    pub(crate) chunk: Coords,
    pub(crate) grid: Coords,
    pub(crate) first: u64,
    pub(crate) cells: u64,
}

impl Layout {
    /// Row-major position of `coords` in the grid, when inside it.
    pub(crate) fn linear(&self, coords: &[u64]) -> Option<u64> {
        if coords.len() != self.grid.as_slice().len() {
            return None;
        }
        coords
            .iter()
            .zip(self.grid.as_slice())
            .try_fold(0u64, |acc, (c, g)| {
                (c < g).then_some(())?;
                acc.checked_mul(*g)?.checked_add(*c)
            })
    }

    /// Grid coordinates of row-major position `pos`.
    pub(crate) fn delinearize(&self, mut pos: u64) -> Coords {
        let grid = self.grid.as_slice();
        let mut v = [0u64; MAX_NDIM];
        for (slot, g) in v.iter_mut().zip(grid).rev() {
            *slot = pos.checked_rem(*g).unwrap_or(0);
            pos = pos.checked_div(*g).unwrap_or(0);
        }
        Coords::from_slice(v.get(..grid.len()).unwrap_or(&[])).unwrap_or_default()
    }

    /// Walks a whole row-major array (`data`, little-endian) tile by tile in canonical
    /// order, handing each clipped tile to `f`; `Err(Some(expected))` when `data` is not
    /// `expected` bytes long (`None`: the size overflows).
    pub(crate) fn for_each_tile<E>(
        &self,
        data: &[u8],
        mut f: impl FnMut(&Coords, &[u8]) -> Result<(), E>,
    ) -> Result<Result<(), E>, Option<u64>> {
        let expected = self
            .shape
            .as_slice()
            .iter()
            .try_fold(self.dtype.size(), |a, s| a.checked_mul(*s));
        if expected != Some(u64_of(data.len())) {
            return Err(expected);
        }
        let mut tile = Vec::new();
        for cell in 0..self.cells {
            let coords = self.delinearize(cell);
            extract_tile(self, data, coords.as_slice(), &mut tile);
            if let Err(e) = f(&coords, &tile) {
                return Ok(Err(e));
            }
        }
        Ok(Ok(()))
    }

    /// Clipped tile byte size at `coords` (inside the grid).
    pub(crate) fn tile_bytes(&self, coords: &[u64]) -> Option<u64> {
        let mut n = self.dtype.size();
        for ((s, c), k) in self
            .shape
            .as_slice()
            .iter()
            .zip(self.chunk.as_slice())
            .zip(coords)
        {
            let start = k.checked_mul(*c)?;
            n = n.checked_mul((*c).min(s.checked_sub(start)?))?;
        }
        Some(n)
    }
}

/// The directory blob and the grid of every dataset, or the first declaration error.
/// The directory blob and every dataset's layout.
pub(crate) type Plan = (Vec<u8>, Vec<Layout>);

pub(crate) fn plan_datasets(specs: &[DatasetSpec<'_>]) -> Result<Plan, (usize, &'static str)> {
    let mut blob = Vec::new();
    let mut layouts = Vec::new();
    let mut first = 0u64;
    for (i, d) in specs.iter().enumerate() {
        let e = |p: &'static str| (i, p);
        let ndim = d.shape.len();
        if ndim == 0 || ndim > MAX_NDIM {
            return Err(e("rank must be 1 ..= 8"));
        }
        if d.chunk_shape.len() != ndim {
            return Err(e("chunk_shape rank differs from shape rank"));
        }
        if d.chunk_shape.contains(&0) {
            return Err(e("chunk_shape extents must be at least 1"));
        }
        let elements = d
            .shape
            .iter()
            .try_fold(1u64, |a, s| a.checked_mul(*s))
            .ok_or(e("element count overflows 64 bits"))?;
        elements
            .checked_mul(d.dtype.size())
            .ok_or(e("byte size overflows 64 bits"))?;
        let mut grid = [0u64; MAX_NDIM];
        for ((g, s), c) in grid.iter_mut().zip(d.shape).zip(d.chunk_shape) {
            *g = s.div_ceil(*c);
        }
        let grid = grid.get(..ndim).unwrap_or(&[]);
        let cells = grid
            .iter()
            .try_fold(1u64, |a, g| a.checked_mul(*g))
            .ok_or(e("chunk count overflows 64 bits"))?;
        let name_len = u32::try_from(d.name.len()).map_err(|_| e("name is too long"))?;
        let header = RawRecordHeader {
            name_len: U32::new(name_len),
            dtype: U32::new(d.dtype.tag()),
            ndim: U32::new(u32::try_from(ndim).unwrap_or(0)),
            reserved: U32::new(0),
        };
        let start = blob.len();
        blob.extend_from_slice(header.as_bytes());
        blob.extend_from_slice(d.name.as_bytes());
        while blob.len().saturating_sub(start) % 8 != 0 {
            blob.push(0);
        }
        for v in d.shape.iter().chain(d.chunk_shape) {
            blob.extend_from_slice(U64::new(*v).as_bytes());
        }
        let coords = |s: &[u64]| Coords::from_slice(s).unwrap_or_default();
        layouts.push(Layout {
            dtype: d.dtype,
            shape: coords(d.shape),
            chunk: coords(d.chunk_shape),
            grid: coords(grid),
            first,
            cells,
        });
        first = first
            .checked_add(cells)
            .ok_or(e("total chunk count overflows 64 bits"))?;
    }
    Ok((blob, layouts))
}

/// Where the index starts and where payloads start, for a directory blob of `blob_len`
/// bytes and `rows` rows (`None` on overflow).
pub(crate) fn regions(datasets: usize, blob_len: u64, rows: u64) -> Option<(u64, u64)> {
    if datasets == 0 {
        return Some((SUPERBLOCK_LEN, SUPERBLOCK_LEN));
    }
    let index = RECORDS_OFFSET.checked_add(blob_len)?.checked_add(7)? & !7;
    let end = rows
        .checked_mul(INDEX_ENTRY_LEN)?
        .checked_add(INDEX_HEADER_LEN)?
        .checked_add(index)?;
    Some((index, end))
}

/// The superblock, directory length, directory, padding and `TIDX` header: every byte
/// before the first row.
pub(crate) fn head_bytes(
    datasets: usize,
    blob: &[u8],
    rows: u64,
    execution: ExecutionSettings,
    footer: bool,
) -> Option<Vec<u8>> {
    let (index, end) = regions(datasets, u64_of(blob.len()), rows)?;
    let sb = RawSuperblock {
        magic: SUPERBLOCK_MAGIC,
        layout_version: U32::new(LAYOUT_VERSION),
        dataset_count: U32::new(u32::try_from(datasets).ok()?),
        flags: U32::new(if footer { FLAG_HISTORY_FOOTER } else { 0 }),
        chunk_index_offset: U64::new(index),
        chunk_index_length: U64::new(end.saturating_sub(index)),
    };
    let mut out = Vec::new();
    out.extend_from_slice(sb.as_bytes());
    if datasets == 0 {
        return Some(out);
    }
    out.extend_from_slice(U64::new(u64_of(blob.len())).as_bytes());
    out.extend_from_slice(blob);
    out.resize(usize::try_from(index).ok()?, 0);
    let tidx = RawTidxHeader {
        magic: INDEX_MAGIC,
        index_version: U32::new(INDEX_VERSION),
        entry_count: U64::new(rows),
        memory_budget_percent_bps: U16::new(execution.memory_budget_percent_bps),
        reserved0: U16::new(0),
        memory_budget_bytes: U32::new(execution.memory_budget_bytes),
        reserved1: U64::new(0),
    };
    out.extend_from_slice(tidx.as_bytes());
    Some(out)
}

/// One index row.
pub(crate) fn index_row(
    dataset: u32,
    coords: &[u64],
    payload_offset: u64,
    raw_byte_len: u64,
    stored_byte_len: u64,
    codec: u32,
) -> RawIndexEntry {
    let mut chunk_index = [U64::new(0); MAX_NDIM];
    for (slot, c) in chunk_index.iter_mut().zip(coords) {
        *slot = U64::new(*c);
    }
    RawIndexEntry {
        dataset_id: U64::new(u64::from(dataset)),
        chunk_index,
        payload_offset: U64::new(payload_offset),
        raw_byte_len: U64::new(raw_byte_len),
        stored_byte_len: U64::new(stored_byte_len),
        codec: U32::new(codec),
        reserved: U32::new(0),
    }
}

/// Copies the clipped tile at grid `coords` out of a row-major array into `out`.
pub(crate) fn extract_tile(l: &Layout, data: &[u8], coords: &[u64], out: &mut Vec<u8>) {
    out.clear();
    let esize = usize::try_from(l.dtype.size()).unwrap_or(1);
    let shape = l.shape.as_slice();
    let n = shape.len();
    let mut start = [0u64; MAX_NDIM];
    let mut extent = [0u64; MAX_NDIM];
    for (((st, ex), (s, c)), k) in start
        .iter_mut()
        .zip(extent.iter_mut())
        .zip(shape.iter().zip(l.chunk.as_slice()))
        .zip(coords)
    {
        *st = k.saturating_mul(*c);
        *ex = (*c).min(s.saturating_sub(*st));
    }
    let extent = extent.get(..n).unwrap_or(&[]);
    if extent.contains(&0) {
        return;
    }
    // Copy whole rows along the last axis at once.
    let last = extent.last().copied().unwrap_or(1);
    let row_bytes = usize::try_from(last).unwrap_or(0).saturating_mul(esize);
    let outer: u64 = extent.iter().rev().skip(1).product();
    let mut idx = [0u64; MAX_NDIM];
    for _ in 0..outer {
        let mut flat = 0u64;
        for (d, s) in shape.iter().enumerate() {
            let i = idx.get(d).copied().unwrap_or(0);
            let b = start.get(d).copied().unwrap_or(0);
            flat = flat.saturating_mul(*s).saturating_add(b.saturating_add(i));
        }
        let at = usize::try_from(flat)
            .unwrap_or(usize::MAX)
            .saturating_mul(esize);
        if let Some(src) = data.get(at..at.saturating_add(row_bytes)) {
            out.extend_from_slice(src);
        }
        // Advance every axis but the last.
        for d in (0..n.saturating_sub(1)).rev() {
            let (Some(i), Some(e)) = (idx.get_mut(d), extent.get(d)) else {
                break;
            };
            *i = i.saturating_add(1);
            if *i < *e {
                break;
            }
            *i = 0;
        }
    }
}
