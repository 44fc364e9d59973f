//! Fixes the structure pins down, each losing nothing: a magic whose structure
//! validates once it is restored, and a row's coordinates that canonical order makes
//! certain (docs/tet-v1.md, "Repair").

use alloc::format;
use alloc::vec::Vec;

use tet_core::arith::u64_of;
use tet_core::tet::raw::{off, RawSuperblock};
use tet_core::tet::{
    Code, Coords, Dataset, Finding, Footer, TetFile, FOOTER_MAGIC, INDEX_MAGIC, SUPERBLOCK_LEN,
    SUPERBLOCK_MAGIC,
};
use tet_core::ErrorKind;
use zerocopy::FromBytes;

use super::{Action, Fix};
use crate::tet::history;

/// The number of index rows `TetFile::open` finds once the four bytes at `at` read
/// `magic`; `None` when the file still does not open. Checked on a copy of the file's
/// fixed structures only (superblock, directory, index: the first `end` bytes), so
/// memory follows the index, never the payloads.
fn opens_with(bytes: &[u8], end: u64, at: u64, magic: [u8; 4]) -> Option<u64> {
    let prefix = bytes.get(..usize::try_from(end).ok()?)?;
    let mut copy = Vec::new();
    copy.try_reserve_exact(prefix.len()).ok()?;
    copy.extend_from_slice(prefix);
    let start = usize::try_from(at).ok()?;
    copy.get_mut(start..start.checked_add(4)?)?
        .copy_from_slice(&magic);
    // The copy ends with the index, so a footer flag finds no footer there: that is not
    // a reason for `open` to fail, and the footer is not what is being judged.
    let file = TetFile::open(&copy).ok()?;
    Some(u64_of(file.rows().len()))
}

fn restore(code: Code, at: u64, magic: [u8; 4], description: alloc::string::String) -> Fix {
    Fix {
        code,
        lossy: false,
        description,
        action: Action::Patch {
            offset: at,
            bytes: magic.to_vec(),
        },
    }
}

/// The superblock's magic restored, when with `TETR` in place the superblock, the
/// dataset directory and the chunk index header all validate.
pub(super) fn superblock_magic(bytes: &[u8]) -> Option<Fix> {
    let (raw, _) = RawSuperblock::read_from_prefix(bytes).ok()?;
    if raw.magic == SUPERBLOCK_MAGIC {
        return None;
    }
    let end = raw
        .chunk_index_offset
        .get()
        .checked_add(raw.chunk_index_length.get())?
        .max(SUPERBLOCK_LEN);
    let rows = opens_with(bytes, end, off::sb::MAGIC, SUPERBLOCK_MAGIC)?;
    Some(restore(
        Code::SuperblockMagic,
        off::sb::MAGIC,
        SUPERBLOCK_MAGIC,
        format!(
            "restore the superblock magic 'TETR' (it reads '{}'): with it the superblock, \
             the dataset directory and the chunk index header ({rows} rows) validate",
            raw.magic.escape_ascii()
        ),
    ))
}

/// The chunk index magic restored, when with `TIDX` in place the index header
/// validates; with the number of rows the index then has.
pub(super) fn index_magic(file: &TetFile<'_>) -> Option<(Fix, u64)> {
    let sb = file.superblock();
    let at = sb.chunk_index_offset();
    let end = at.checked_add(sb.chunk_index_length())?;
    let found = file.bytes().get(usize::try_from(at).ok()?..)?.get(..4)?;
    if found == INDEX_MAGIC {
        return None;
    }
    let rows = opens_with(
        file.bytes(),
        end,
        at.saturating_add(off::tidx::MAGIC),
        INDEX_MAGIC,
    )?;
    let fix = restore(
        Code::IndexMagic,
        at.saturating_add(off::tidx::MAGIC),
        INDEX_MAGIC,
        format!(
            "restore the chunk index magic 'TIDX' at byte {at:#x} (it reads '{}'): with it \
             the index header validates ({rows} rows, as chunk_index_length says)",
            found.escape_ascii()
        ),
    );
    Some((fix, rows))
}

/// The footer magic restored, when with `THST` in place the tail's length and version
/// validate, `history_json` is a valid history object and the spill it names, if any, is
/// a JSON object. The history is then kept rather than dropped.
pub(super) fn footer_magic(file: &TetFile<'_>) -> Option<Fix> {
    if !file.superblock().has_history_footer() || file.footer().is_some() {
        return None;
    }
    let footer = Footer::parse_restoring_magic(file.bytes(), file.payload_floor()).ok()?;
    let h = history::parse(footer.history_json()).ok()?;
    if let Some((offset, len)) = h.metadata_ref {
        let start = usize::try_from(offset).ok()?;
        let end = start.checked_add(usize::try_from(len).ok()?)?;
        if offset.checked_add(len)? > footer.json_offset() {
            return None;
        }
        history::check_spill(file.bytes().get(start..end)?).ok()?;
    }
    let at = footer.tail_offset().saturating_add(off::footer::MAGIC);
    let found = file.bytes().get(usize::try_from(at).ok()?..)?.get(..4)?;
    Some(restore(
        Code::FooterMagic,
        at,
        FOOTER_MAGIC,
        format!(
            "restore the footer magic 'THST' at byte {at:#x} (it reads '{}'): with it the \
             footer's length and version validate and its history JSON ({} history row(s)) parses; \
             the history is kept",
            found.escape_ascii(),
            h.rows
        ),
    ))
}

/// Row coordinates that canonical order makes certain: a grid cell no row holds
/// (`chunk-missing`) whose canonical row (`first_canonical_row + linear`) belongs to
/// the same dataset, holds a tile of exactly that cell's length, and sits between rows
/// that hold their own canonical cells, while its own coordinates name a cell outside
/// the grid or one another row holds. Each fix comes with the findings it answers.
pub(super) fn row_coords(file: &TetFile<'_>, findings: &[Finding]) -> Vec<(Fix, Vec<Finding>)> {
    let mut out = Vec::new();
    let Some(ix) = file.index() else {
        return out;
    };
    let rows = file.rows();
    let datasets: Vec<Dataset<'_>> = file.datasets().map_while(Result::ok).collect();
    let canonical_at = |ds: &Dataset<'_>, r: u64| -> bool {
        let Some(k) = r.checked_sub(ds.first_canonical_row()) else {
            return true; // before the dataset: not this dataset's evidence
        };
        if k >= ds.grid_cells() {
            return true;
        }
        let Some(row) = usize::try_from(r).ok().and_then(|i| rows.get(i)) else {
            return true;
        };
        row.dataset_id.get() == u64::from(ds.id().0)
            && row.coords().get(..ds.ndim()) == Some(ds.delinearize(k).as_slice())
    };
    for f in findings.iter().filter(|f| f.code == Code::ChunkMissing) {
        let (Some(id), Some(cell)) = (f.dataset, f.coords) else {
            continue;
        };
        let Some(ds) = datasets.get(usize::try_from(id).unwrap_or(usize::MAX)) else {
            continue;
        };
        let Some(r) = ds
            .linear(cell.as_slice())
            .and_then(|k| ds.first_canonical_row().checked_add(k))
        else {
            continue;
        };
        let Some(row) = usize::try_from(r).ok().and_then(|i| rows.get(i)) else {
            continue;
        };
        let row_at = ix.row_offset(r);
        let held = row.coords();
        let held = held.get(..ds.ndim()).unwrap_or(&[]);
        let ours = row.dataset_id.get() == u64::from(id);
        let fits = ds.tile_bytes(cell.as_slice()) == Some(row.raw_byte_len.get());
        let neighbours =
            canonical_at(ds, r.wrapping_sub(1)) && canonical_at(ds, r.saturating_add(1));
        // Its own cell: outside the grid (`chunk-coords`), or held by another row
        // (`chunk-duplicate`).
        let answered: Vec<Finding> = findings
            .iter()
            .filter(|g| {
                // A raw length judged against the wrong cell is right for its own.
                ((g.code == Code::ChunkCoords || g.code == Code::ChunkRawLen) && g.row == Some(r))
                    || (g.code == Code::ChunkDuplicate
                        && (g.row == Some(r)
                            || matches!(g.error.kind, ErrorKind::Duplicate { first } if first == row_at)))
                    || (g.code == Code::ChunkMissing && g.dataset == Some(id) && g.coords == Some(cell))
            })
            .copied()
            .collect();
        let explained = answered
            .iter()
            .any(|g| matches!(g.code, Code::ChunkCoords | Code::ChunkDuplicate));
        if !(ours && fits && neighbours && explained) {
            continue;
        }
        let mut patch = Vec::new();
        for c in cell.as_slice() {
            patch.extend_from_slice(&c.to_le_bytes());
        }
        let was = Coords::from_slice(held).unwrap_or_default();
        out.push((
            Fix {
                code: Code::ChunkMissing,
                lossy: false,
                description: format!(
                    "set the coordinates of tidx row {r} (dataset {id} '{}') from {was} to \
                     {cell}: the rows are in canonical order, which puts cell {cell}'s row \
                     there; no other row holds that cell, and the row's {} bytes are its \
                     tile's",
                    ds.name(),
                    row.raw_byte_len.get()
                ),
                action: Action::Patch {
                    offset: row_at.saturating_add(off::row::CHUNK_INDEX),
                    bytes: patch,
                },
            },
            answered,
        ));
    }
    out
}
