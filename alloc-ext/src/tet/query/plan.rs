//! Read planning: the chunks a selection touches, with their index rows.

use alloc::collections::BTreeMap;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;

use tet_core::arith::u64_of;
use tet_core::tet::select::{for_each_chunk, ChunkPart, Selection, Slice, TouchedAxis};
use tet_core::tet::{Codec, Dataset, TetFile};

use super::*;

/// The chunks a selection touches, with their rows, in grid order.
#[derive(Clone, Debug)]
pub struct ReadPlan<'a> {
    /// The dataset.
    pub dataset: Dataset<'a>,
    /// The normalised selection.
    pub selection: Selection,
    /// Touched chunks, grid order.
    pub parts: Vec<ChunkPart>,
    /// Index row of each part.
    pub rows: Vec<u64>,
    /// Stored bytes the plan reads.
    pub read_bytes: u64,
    /// Bytes the plan decodes (zstd chunks' `raw_byte_len`).
    pub decode_bytes: u64,
    /// Whether every touched chunk is raw and their payloads follow each other in plan
    /// order (the spec's linear-scan condition).
    pub contiguous_raw: bool,
    /// A missing-value mask applied to every decoded tile (`None`: the elements as
    /// stored); set by the caller after planning.
    pub mask: Option<crate::tet::decode::Mask>,
}

impl ReadPlan<'_> {
    /// The element type of the tiles the plan's folds see: the dataset's, or `f64` when
    /// a missing-value mask widens an integer dataset ([`Mask::tile_dtype`]).
    ///
    /// [`Mask::tile_dtype`]: crate::tet::decode::Mask::tile_dtype
    pub fn dtype(&self) -> tet_core::tet::DType {
        let stored = self.dataset.dtype();
        self.mask.map_or(stored, |m| m.tile_dtype(stored))
    }
}

/// Plans `slices` over `ds`. Rows are found in `O(1)` per chunk on canonical files; other
/// files get a map of the dataset's rows built once.
pub fn plan<'a>(
    file: &TetFile<'a>,
    ds: Dataset<'a>,
    slices: &[Slice],
) -> Result<ReadPlan<'a>, QueryError> {
    let shape: Vec<u64> = ds.shape().collect();
    let selection = Selection::new(&shape, slices).map_err(QueryError::Select)?;
    // A file holds one row per grid cell, so a selection touching more chunks than there
    // are rows cannot be answered; count before enumerating (each axis stops counting at
    // the row count), so a hostile shape cannot make planning loop or allocate.
    let rows_total = u64_of(file.rows().len());
    let cap = usize::try_from(rows_total.saturating_add(1)).unwrap_or(usize::MAX);
    let mut touched = 1u64;
    for (a, c) in selection.axes().iter().zip(ds.chunk_shape()) {
        let n = u64_of(TouchedAxis::new(*a, c).take(cap).count());
        touched = touched.saturating_mul(n);
        if n == 0 {
            touched = 0;
            break;
        }
    }
    if touched > rows_total {
        return Err(QueryError::TooManyChunks { rows: rows_total });
    }
    let mut parts = Vec::new();
    for_each_chunk(&ds, &selection, |p| parts.push(*p));
    let all_rows = file.rows();
    let id = u64::from(ds.id().0);
    let probe = |linear: u64| -> Option<u64> {
        let r = ds.first_canonical_row().checked_add(linear)?;
        let row = all_rows.get(usize::try_from(r).ok()?)?;
        (row.dataset_id.get() == id
            && ds.delinearize(linear).as_slice() == row.coords().get(..ds.ndim()).unwrap_or(&[]))
        .then_some(r)
    };
    let mut map: Option<BTreeMap<u64, u64>> = None;
    let mut rows = Vec::with_capacity(parts.len());
    let mut read_bytes = 0u64;
    let mut decode_bytes = 0u64;
    let mut contiguous_raw = true;
    let mut next_offset: Option<u64> = None;
    for p in &parts {
        let linear = ds
            .linear(p.coords.as_slice())
            .ok_or(QueryError::Chunk(p.coords))?;
        let row = match probe(linear) {
            Some(r) => r,
            None => {
                let m = map.get_or_insert_with(|| {
                    let mut m = BTreeMap::new();
                    for (i, row) in all_rows.iter().enumerate() {
                        if row.dataset_id.get() == id {
                            if let Some(l) = ds.linear(row.coords().get(..ds.ndim()).unwrap_or(&[]))
                            {
                                m.entry(l).or_insert(u64_of(i));
                            }
                        }
                    }
                    m
                });
                *m.get(&linear).ok_or(QueryError::Chunk(p.coords))?
            }
        };
        let raw = all_rows
            .get(usize::try_from(row).unwrap_or(usize::MAX))
            .ok_or(QueryError::Chunk(p.coords))?;
        read_bytes = read_bytes.saturating_add(raw.stored_byte_len.get());
        if Codec::from_wire(raw.codec.get()) == Some(Codec::Zstd) {
            decode_bytes = decode_bytes.saturating_add(raw.raw_byte_len.get());
            contiguous_raw = false;
        }
        let start = raw.payload_offset.get();
        if next_offset.is_some_and(|n| n != start) {
            contiguous_raw = false;
        }
        next_offset = start.checked_add(raw.stored_byte_len.get());
        rows.push(row);
    }
    Ok(ReadPlan {
        dataset: ds,
        selection,
        parts,
        rows,
        read_bytes,
        decode_bytes,
        contiguous_raw,
        mask: None,
    })
}

/// Dataset coordinates of a row-major `position` (for argmin/argmax).
pub fn position_coords(shape: &[u64], mut position: u64) -> Vec<u64> {
    let mut out = vec![0u64; shape.len()];
    for (slot, n) in out.iter_mut().zip(shape).rev() {
        *slot = position.checked_rem(*n).unwrap_or(0);
        position = position.checked_div(*n).unwrap_or(0);
    }
    out
}

/// A short description of a plan (`--plan`).
pub fn describe(plan: &ReadPlan<'_>) -> String {
    alloc::format!(
        "{} chunk(s), {} bytes to read, {} bytes to decode{}",
        plan.parts.len(),
        plan.read_bytes,
        plan.decode_bytes,
        if plan.contiguous_raw && !plan.parts.is_empty() {
            ", raw payloads contiguous (linear scan)"
        } else {
            ""
        }
    )
}
