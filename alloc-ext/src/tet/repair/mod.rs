//! Repair of `.tet` files: a [`Plan`] of named fixes, each answering findings and marked
//! lossless or lossy, and [`apply`], which streams the repaired file to an [`Output`].
//!
//! Fixes that lose nothing:
//! * reserved fields, padding, undefined superblock flag bits and unused coordinate slots
//!   are zeroed in place;
//! * unreferenced bytes after the last payload are removed; a valid footer that follows
//!   them is kept and moved up (its `metadata_ref` adjusted);
//! * what the structure pins down is restored (`pinned`): a magic whose structure
//!   validates with it, a row's coordinates that canonical order makes certain.
//!
//! Fixes that lose something (applied only when asked):
//! * an invalid or truncated footer is dropped (flag cleared, file truncated after the
//!   payloads): the history is lost, and so is any partial payload the end of the file
//!   cuts (named, with its size);
//! * a chunk whose payload cannot be decoded is replaced, when asked, by a raw chunk of
//!   zeros (NaN for float dtypes) appended after the payloads; each loss is recorded as a
//!   `repair` row in the history footer.
//!
//! Nothing else changes: payload bytes are copied as they are, rows keep their order.

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use serde_json::Value;
use tet_core::arith::u64_of;
use tet_core::tet::raw::off;
use tet_core::tet::{Code, Coords, DType, Finding, Span, TetFile, FLAG_HISTORY_FOOTER};
use zerocopy::IntoBytes;

use crate::tet::writer::{footer_tail, Output};

mod pinned;

/// What a fix does.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Action {
    /// Overwrite `bytes.len()` bytes at `offset`.
    Patch {
        /// Absolute offset.
        offset: u64,
        /// New bytes.
        bytes: Vec<u8>,
    },
    /// Remove the unreferenced bytes after the last payload.
    RemoveTrailing,
    /// Drop the footer (clear flag bit 0, truncate after the payloads).
    DropFooter,
    /// Replace row `row`'s payload by a raw chunk of zeros (NaN for floats).
    ZeroChunk {
        /// Index row.
        row: u64,
        /// Its dataset's element type.
        dtype: DType,
        /// Decoded tile size.
        raw_byte_len: u64,
        /// Dataset id.
        dataset: u32,
        /// Grid coordinates.
        coords: Coords,
        /// Why the payload is lost.
        code: Code,
    },
}

/// One fix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fix {
    /// The finding code it answers.
    pub code: Code,
    /// Whether applying it loses information (history, chunk contents).
    pub lossy: bool,
    /// What it does, for a person.
    pub description: String,
    /// The change.
    pub action: Action,
}

/// The fixes for a file, and the findings no fix answers.
#[derive(Clone, Debug, Default)]
pub struct Plan {
    /// Fixes, in file order.
    pub fixes: Vec<Fix>,
    /// Findings left as they are (no safe fix, or `zero_bad_chunks` not asked).
    pub unfixable: Vec<Finding>,
    /// A fix of this plan lets the next check read what this one could not (a
    /// superblock or index magic restored: nothing past it was read; a row's coordinates
    /// set: its chunk was not decoded): the caller checks the result and plans again.
    pub again: bool,
}

/// What the planner needs to know beyond the bytes: what `verify` found.
#[derive(Clone, Copy, Debug)]
pub struct Inputs<'a, 'f> {
    /// The file.
    pub bytes: &'a [u8],
    /// Every finding (structural, footer JSON, decode).
    pub findings: &'f [Finding],
    /// Rows whose payloads failed to decode.
    pub bad_rows: &'f [u64],
    /// End of the last referenced byte (`VerifySummary::data_end`).
    pub data_end: u64,
    /// The metadata spill, when the footer JSON is valid and names one.
    pub metadata_spill: Option<Span>,
    /// Replace undecodable chunks by zeros (a lossy fix) instead of leaving them.
    pub zero_bad_chunks: bool,
}

fn is_footer_code(c: Code) -> bool {
    matches!(
        c,
        Code::FooterTruncated
            | Code::FooterMagic
            | Code::FooterVersion
            | Code::FooterLength
            | Code::FooterJson
            | Code::MetadataSpill
    )
}

fn is_decode_code(c: Code) -> bool {
    matches!(
        c,
        Code::ZstdFrame
            | Code::ZstdWindow
            | Code::DecodedLength
            | Code::ContentChecksum
            | Code::ZstdTrailing
    )
}

/// Whether a finding says a chunk's payload cannot be trusted: it does not decode, or
/// its stored bytes differ from their checksum. `--zero-bad-chunks` replaces such chunks.
pub fn is_bad_chunk_code(c: Code) -> bool {
    is_decode_code(c) || c == Code::ChunkChecksum
}

fn zero_patch(offset: u64, len: u64) -> Action {
    Action::Patch {
        offset,
        bytes: alloc::vec![0u8; usize::try_from(len).unwrap_or(0)],
    }
}

/// Plans the fixes for what `inputs` says `verify` found.
pub fn plan(inputs: &Inputs<'_, '_>) -> Plan {
    let mut p = Plan::default();
    let bytes = inputs.bytes;
    let has = |c: Code| inputs.findings.iter().any(|f| f.code == c);
    let Some(file) = TetFile::parse(bytes, &mut |_: &Finding| {}) else {
        // Nothing past the superblock can be read; a magic whose structure validates
        // once restored is the one fix, and the next check sees the rest.
        let fix = has(Code::SuperblockMagic)
            .then(|| pinned::superblock_magic(bytes))
            .flatten();
        p.unfixable = inputs
            .findings
            .iter()
            .filter(|f| !(fix.is_some() && f.code == Code::SuperblockMagic))
            .copied()
            .collect();
        p.again = fix.is_some();
        p.fixes.extend(fix);
        return p;
    };
    let mut answered_findings: Vec<Finding> = Vec::new();
    let mut answered: Vec<Code> = Vec::new();
    let fix = |p: &mut Plan, code: Code, lossy: bool, description: String, action: Action| {
        p.fixes.push(Fix {
            code,
            lossy,
            description,
            action,
        });
    };

    // Zeroing, walked from the structures so every byte of each field is covered.
    let sb = file.superblock();
    if has(Code::SuperblockFlags) {
        let keep = sb.flags() & FLAG_HISTORY_FOOTER;
        fix(
            &mut p,
            Code::SuperblockFlags,
            false,
            format!(
                "clear undefined superblock flag bits {:#x}",
                sb.flags() & !keep
            ),
            Action::Patch {
                offset: off::sb::FLAGS,
                bytes: keep.to_le_bytes().to_vec(),
            },
        );
        answered.push(Code::SuperblockFlags);
    }
    let mut blob_end = None;
    if let Some(dir) = file.directory() {
        blob_end = Some(dir.end());
        for ds in dir.iter() {
            let Ok(ds) = ds else { break };
            let at = ds.offset();
            let reserved = bytes
                .get(usize::try_from(at.saturating_add(off::rec::RESERVED)).unwrap_or(usize::MAX)..)
                .and_then(|b| b.get(..4))
                .is_some_and(|b| b.iter().any(|x| *x != 0));
            if reserved {
                fix(
                    &mut p,
                    Code::RecordReserved,
                    false,
                    format!(
                        "zero the reserved field of dataset {} '{}'",
                        ds.id().0,
                        ds.name()
                    ),
                    zero_patch(at.saturating_add(off::rec::RESERVED), 4),
                );
                answered.push(Code::RecordReserved);
            }
            let pad_start = at
                .saturating_add(off::rec::NAME)
                .saturating_add(u64_of(ds.name().len()));
            let pad_len = ds.shape_offset().saturating_sub(pad_start);
            if nonzero(bytes, pad_start, pad_len) {
                fix(
                    &mut p,
                    Code::RecordPadding,
                    false,
                    format!(
                        "zero the name padding of dataset {} '{}'",
                        ds.id().0,
                        ds.name()
                    ),
                    zero_patch(pad_start, pad_len),
                );
                answered.push(Code::RecordPadding);
            }
        }
    }
    if let (Some(end), Some(ix)) = (blob_end, file.index()) {
        let len = ix.offset().saturating_sub(end);
        if nonzero(bytes, end, len) {
            fix(
                &mut p,
                Code::IndexPadding,
                false,
                String::from("zero the padding before the chunk index"),
                zero_patch(end, len),
            );
            answered.push(Code::IndexPadding);
        }
    }
    if let Some(ix) = file.index() {
        for (rel, len) in [(off::tidx::RESERVED0, 2), (off::tidx::RESERVED1, 8)] {
            let at = ix.offset().saturating_add(rel);
            if nonzero(bytes, at, len) {
                fix(
                    &mut p,
                    Code::IndexReserved,
                    false,
                    format!("zero the TIDX reserved field at byte {at:#x}"),
                    zero_patch(at, len),
                );
                answered.push(Code::IndexReserved);
            }
        }
        let ndims: Vec<usize> = file
            .datasets()
            .map_while(|d| d.ok().map(|d| d.ndim()))
            .collect();
        for (i, row) in ix.rows().iter().enumerate() {
            let i = u64_of(i);
            let row_at = ix.row_offset(i);
            if row.reserved.get() != 0 {
                fix(
                    &mut p,
                    Code::ChunkReserved,
                    false,
                    format!("zero the reserved field of tidx row {i}"),
                    zero_patch(row_at.saturating_add(off::row::RESERVED), 4),
                );
                answered.push(Code::ChunkReserved);
            }
            let ndim = usize::try_from(row.dataset_id.get())
                .ok()
                .and_then(|d| ndims.get(d).copied());
            if let Some(ndim) = ndim {
                let unused = row
                    .coords()
                    .get(ndim..)
                    .is_some_and(|s| s.iter().any(|c| *c != 0));
                if unused {
                    let start =
                        off::row::CHUNK_INDEX.saturating_add(u64_of(ndim).saturating_mul(8));
                    fix(
                        &mut p,
                        Code::ChunkCoordsUnused,
                        false,
                        format!("zero the unused coordinate slots {ndim}..8 of tidx row {i}"),
                        zero_patch(
                            row_at.saturating_add(start),
                            off::row::PAYLOAD_OFFSET.saturating_sub(start),
                        ),
                    );
                    answered.push(Code::ChunkCoordsUnused);
                }
            }
        }
    }

    // What the structure pins down.
    if has(Code::IndexMagic) {
        if let Some((f, rows)) = pinned::index_magic(&file) {
            p.fixes.push(f);
            answered.push(Code::IndexMagic);
            // The check could read no row past a bad index magic: the next one reads them.
            p.again = true;
            // Without an index the checksum table's row count could not match; with it
            // restored, it does.
            let table_rows = crate::tet::history::check_footer(&file)
                .checksums
                .map(|(_, n)| n);
            if table_rows == Some(rows) {
                answered.push(Code::ChecksumTable);
            }
        }
    }
    for (f, findings) in pinned::row_coords(&file, inputs.findings) {
        p.fixes.push(f);
        answered_findings.extend(findings);
        // A row outside the grid was not decoded: the next check decodes it.
        p.again = true;
    }

    // The footer: its magic restored when the rest of it validates, else dropped. Both
    // need the index (the drop truncates after the last payload it names).
    let magic_only = inputs
        .findings
        .iter()
        .filter(|f| is_footer_code(f.code))
        .all(|f| f.code == Code::FooterMagic);
    let restored = (has(Code::FooterMagic) && magic_only)
        .then(|| pinned::footer_magic(&file))
        .flatten();
    let index_known = file.index().is_some() || sb.dataset_count() == 0;
    // A chunk replaced is recorded in the footer, which the restore makes readable only
    // once written: the replacements wait for the next round.
    let defer_zero = restored.is_some()
        && inputs.zero_bad_chunks
        && inputs.findings.iter().any(|f| is_bad_chunk_code(f.code));
    if defer_zero {
        p.again = true;
    }
    if let Some(f) = restored {
        p.fixes.push(f);
        answered.push(Code::FooterMagic);
    } else if index_known && inputs.findings.iter().any(|f| is_footer_code(f.code)) {
        let code = inputs
            .findings
            .iter()
            .map(|f| f.code)
            .find(|c| is_footer_code(*c))
            .unwrap_or(Code::FooterJson);
        fix(
            &mut p,
            code,
            true,
            drop_footer_description(&file),
            Action::DropFooter,
        );
        answered.extend(
            inputs
                .findings
                .iter()
                .map(|f| f.code)
                .filter(|c| is_footer_code(*c)),
        );
    }
    if has(Code::TrailingBytes) && index_known {
        fix(
            &mut p,
            Code::TrailingBytes,
            false,
            String::from(
                "remove the unreferenced bytes after the last payload (a footer is kept and \
                 moved up)",
            ),
            Action::RemoveTrailing,
        );
        answered.push(Code::TrailingBytes);
    }

    // Undecodable chunks.
    if inputs.zero_bad_chunks && !defer_zero {
        let table = crate::tet::scan::ChunkTable::new(file).ok();
        for f in inputs.findings.iter().filter(|f| is_bad_chunk_code(f.code)) {
            let (Some(row), Some(t)) = (f.row, table.as_ref()) else {
                continue;
            };
            if !inputs.bad_rows.contains(&row) {
                continue;
            }
            let Some(chunk) = t.chunk(row) else { continue };
            let dtype = file
                .datasets()
                .nth(usize::try_from(chunk.dataset.0).unwrap_or(usize::MAX))
                .and_then(|d| d.ok())
                .map(|d| d.dtype())
                .unwrap_or(DType::U8);
            fix(
                &mut p,
                f.code,
                true,
                format!(
                    "LOSES DATA: replace dataset {} chunk {} (tidx row {row}) by a raw chunk of {}",
                    chunk.dataset.0,
                    chunk.coords,
                    if is_float(dtype) { "NaN" } else { "zeros" }
                ),
                Action::ZeroChunk {
                    row,
                    dtype,
                    raw_byte_len: chunk.raw_byte_len,
                    dataset: chunk.dataset.0,
                    coords: chunk.coords,
                    code: f.code,
                },
            );
        }
    }
    let zeroed: Vec<u64> = p
        .fixes
        .iter()
        .filter_map(|f| match f.action {
            Action::ZeroChunk { row, .. } => Some(row),
            _ => None,
        })
        .collect();
    p.unfixable = inputs
        .findings
        .iter()
        .filter(|f| {
            let replaced = is_bad_chunk_code(f.code) && f.row.is_some_and(|r| zeroed.contains(&r));
            !(answered.contains(&f.code) || replaced || answered_findings.contains(f))
        })
        .copied()
        .collect();
    p
}

/// What dropping a broken footer loses, exactly: the history and metadata, and every
/// payload the end of the file cuts (a file cut inside its last payload keeps only part
/// of it, which the truncation after the last whole payload drops), each named with the
/// bytes present.
fn drop_footer_description(file: &TetFile<'_>) -> String {
    let floor = file.payload_floor();
    let limit = file.payload_limit();
    let names: Vec<(u32, String)> = file
        .datasets()
        .map_while(|d| d.ok().map(|d| (d.id().0, String::from(d.name()))))
        .collect();
    let mut cut: Vec<String> = Vec::new();
    let mut lost = 0u64;
    for (i, row) in file.rows().iter().enumerate() {
        let start = row.payload_offset.get();
        let len = row.stored_byte_len.get();
        let ends_past = start.checked_add(len).is_none_or(|e| e > limit);
        if start < floor || start >= limit || !ends_past {
            continue;
        }
        let present = limit.saturating_sub(start);
        lost = lost.saturating_add(present);
        let id = row.dataset_id.get();
        let name = names
            .iter()
            .find(|(d, _)| u64::from(*d) == id)
            .map_or("?", |(_, n)| n.as_str());
        let ndim = file
            .datasets()
            .nth(usize::try_from(id).unwrap_or(usize::MAX))
            .and_then(Result::ok)
            .map_or(0, |d| d.ndim());
        let coords =
            Coords::from_slice(row.coords().get(..ndim).unwrap_or(&[])).unwrap_or_default();
        cut.push(format!(
            "the partial payload of dataset {id} '{name}' chunk {coords} (tidx row {i}): {present} \
             of its {len} bytes, at byte {start:#x}"
        ));
    }
    if cut.is_empty() {
        return String::from(
            "LOSES HISTORY: drop the invalid history footer (clear superblock flag bit 0, \
             truncate after the last payload); every chunk is kept",
        );
    }
    format!(
        "LOSES HISTORY AND {lost} BYTES OF CUT PAYLOADS: drop the invalid history footer \
         (clear superblock flag bit 0, truncate after the last whole payload), which also \
         drops {} (the end of the file cuts it, so it cannot be read either way); every \
         other chunk is kept",
        cut.join("; ")
    )
}

fn nonzero(bytes: &[u8], at: u64, len: u64) -> bool {
    let start = usize::try_from(at).unwrap_or(usize::MAX);
    let end = start.saturating_add(usize::try_from(len).unwrap_or(0));
    bytes
        .get(start..end)
        .is_some_and(|b| b.iter().any(|x| *x != 0))
}

fn is_float(d: DType) -> bool {
    matches!(d, DType::F16 | DType::F32 | DType::F64)
}

/// One element of a replacement chunk: zero, or a quiet NaN for float types.
fn fill_element(d: DType) -> Vec<u8> {
    match d {
        DType::F16 => 0x7e00u16.to_le_bytes().to_vec(),
        DType::F32 => 0x7fc0_0000u32.to_le_bytes().to_vec(),
        DType::F64 => 0x7ff8_0000_0000_0000u64.to_le_bytes().to_vec(),
        other => alloc::vec![0u8; usize::try_from(other.size()).unwrap_or(1)],
    }
}

/// The CRC-32C of `len` bytes of `d`'s fill (NaN or zeros), as a replaced chunk holds.
fn fill_crc(d: DType, len: u64) -> u32 {
    let e = fill_element(d);
    let mut crc = tet_core::checksum::Crc32c::new();
    let mut left = len;
    let mut buf = Vec::new();
    while u64_of(buf.len()) < len.min(u64_of(COPY_WINDOW)) {
        buf.extend_from_slice(&e);
    }
    while left > 0 {
        let n = usize::try_from(left.min(u64_of(buf.len()))).unwrap_or(0);
        let Some(piece) = buf.get(..n).filter(|p| !p.is_empty()) else {
            break;
        };
        crc.update(piece);
        left = left.saturating_sub(u64_of(n));
    }
    crc.finish()
}

/// Why applying failed.
#[derive(Debug)]
pub enum ApplyError<E> {
    /// The file no longer parses as it did when planned.
    Changed,
    /// The footer JSON could not be rewritten.
    Footer(String),
    /// The output failed.
    Output(E),
}

impl<E: core::fmt::Display> core::fmt::Display for ApplyError<E> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ApplyError::Changed => write!(f, "the file changed since it was checked"),
            ApplyError::Footer(m) => write!(f, "rewriting the footer: {m}"),
            ApplyError::Output(e) => write!(f, "writing: {e}"),
        }
    }
}

/// Bytes copied per output call.
const COPY_WINDOW: usize = 1 << 20;

/// Writes the repaired file to `out`: `inputs.bytes` with the `chosen` fixes of `plan`
/// applied. `at` is the time stamp for history rows (RFC 3339 text).
pub fn apply<O: Output>(
    inputs: &Inputs<'_, '_>,
    plan: &Plan,
    chosen: &[bool],
    at: &str,
    out: &mut O,
) -> Result<(), ApplyError<O::Error>> {
    let bytes = inputs.bytes;
    let parsed = TetFile::parse(bytes, &mut |_: &Finding| {});
    let fixes: Vec<&Fix> = plan
        .fixes
        .iter()
        .zip(chosen.iter().chain(core::iter::repeat(&false)))
        .filter(|(_, c)| **c)
        .map(|(f, _)| f)
        .collect();
    let mut patches: Vec<(u64, Vec<u8>)> = Vec::new();
    let mut remove_trailing = false;
    let mut drop_footer = false;
    let mut zero: Vec<(u64, DType, u64, u32, Coords, Code)> = Vec::new();
    for f in &fixes {
        match &f.action {
            Action::Patch { offset, bytes } => patches.push((*offset, bytes.clone())),
            Action::RemoveTrailing => remove_trailing = true,
            Action::DropFooter => drop_footer = true,
            Action::ZeroChunk {
                row,
                dtype,
                raw_byte_len,
                dataset,
                coords,
                code,
            } => zero.push((*row, *dtype, *raw_byte_len, *dataset, *coords, *code)),
        }
    }
    let file_len = u64_of(bytes.len());
    let Some(file) = parsed else {
        // A superblock that does not parse leaves only patches (its magic restored).
        if remove_trailing || drop_footer || !zero.is_empty() {
            return Err(ApplyError::Changed);
        }
        copy_patched(bytes, 0, file_len, &patches, out)?;
        return Ok(());
    };
    let footer_valid =
        file.footer().is_some() && !inputs.findings.iter().any(|f| is_footer_code(f.code));
    // A lost chunk is recorded in the footer; with an invalid footer kept, it cannot be.
    if file.superblock().has_history_footer() && !footer_valid && !drop_footer {
        zero.clear();
    }
    if !remove_trailing && !drop_footer && zero.is_empty() {
        copy_patched(bytes, 0, file_len, &patches, out)?;
        return Ok(());
    }

    // Where the kept payload area ends.
    let floor = file.payload_floor();
    let zero_rows: Vec<u64> = zero.iter().map(|z| z.0).collect();
    let mut keep_end = floor;
    for (i, row) in file.rows().iter().enumerate() {
        if zero_rows.contains(&u64_of(i)) {
            continue;
        }
        let start = row.payload_offset.get();
        if let Some(end) = start.checked_add(row.stored_byte_len.get()) {
            if start >= floor && end <= file.payload_limit() {
                keep_end = keep_end.max(end);
            }
        }
    }
    let keep_footer = footer_valid && !drop_footer;
    let spill = if keep_footer {
        inputs.metadata_spill
    } else {
        None
    };
    let json_at = file.footer().map_or(file_len, |f| f.json_offset());
    let body_end = if remove_trailing || (drop_footer && !footer_valid) {
        keep_end
    } else if keep_footer {
        spill.map_or(json_at, |s| s.offset)
    } else if drop_footer {
        // A valid footer dropped on request: the bytes before it stay.
        json_at
    } else {
        file_len
    }
    .max(keep_end);

    // Rows of replaced chunks point at their new raw payloads, appended after the body.
    let mut pos = body_end;
    let mut new_payloads = Vec::new();
    if let Some(ix) = file.index() {
        for (row, dtype, raw_len, _, _, _) in &zero {
            let row_at = ix.row_offset(*row);
            let mut b = Vec::new();
            b.extend_from_slice(zerocopy::little_endian::U64::new(pos).as_bytes());
            b.extend_from_slice(zerocopy::little_endian::U64::new(*raw_len).as_bytes());
            b.extend_from_slice(zerocopy::little_endian::U64::new(*raw_len).as_bytes());
            b.extend_from_slice(&0u32.to_le_bytes());
            patches.push((row_at.saturating_add(off::row::PAYLOAD_OFFSET), b));
            new_payloads.push((*dtype, *raw_len));
            pos = pos.saturating_add(*raw_len);
        }
    }
    // A replaced chunk keeps a checksum: its entry in the chunk checksum table (which
    // lies before the body's end, so it is copied with it) is repointed at the new
    // payload, with the CRC-32C of the fill it holds. The table goes with a dropped
    // footer; an unusable one is left to its own finding.
    if keep_footer {
        let sums = crate::tet::history::check_footer(&file)
            .checksums
            .and_then(|(o, n)| tet_core::tet::ChecksumTable::parse(&file, o, n).ok());
        if let Some(t) = sums {
            let mut at_pos = body_end;
            for (row, dtype, raw_len, _, _, _) in &zero {
                let entry = row
                    .checked_mul(tet_core::tet::CHECKSUM_ENTRY_LEN)
                    .and_then(|x| x.checked_add(t.offset()));
                let table_end = t.offset().saturating_add(t.len());
                let inside = |e: &u64| {
                    e.checked_add(tet_core::tet::CHECKSUM_ENTRY_LEN)
                        .is_some_and(|end| end <= table_end)
                };
                if let Some(entry) = entry.filter(inside) {
                    let mut b = Vec::new();
                    b.extend_from_slice(&at_pos.to_le_bytes());
                    b.extend_from_slice(&fill_crc(*dtype, *raw_len).to_le_bytes());
                    b.extend_from_slice(&0u32.to_le_bytes());
                    patches.push((entry, b));
                }
                at_pos = at_pos.saturating_add(*raw_len);
            }
        }
    }
    let history_rows: Vec<Value> = zero
        .iter()
        .map(|(row, _, _, dataset, coords, code)| {
            serde_json::json!({
                "op": "repair",
                "source": "tet-host repair --zero-bad-chunks",
                "at": at,
                // Strings only: the other implementation reads `params` as a string map.
                "params": {
                    "lost": "chunk",
                    "dataset": dataset.to_string(),
                    "coords": Value::from(coords.as_slice()).to_string(),
                    "row": row.to_string(),
                    "finding": code.as_str(),
                },
            })
        })
        .collect();
    let write_footer = keep_footer || !history_rows.is_empty();
    let flags = (file.superblock().flags() & !FLAG_HISTORY_FOOTER)
        | if write_footer { FLAG_HISTORY_FOOTER } else { 0 };
    // An explicit flags patch (undefined bits) is replaced by this one.
    let flags = if patches.iter().any(|(o, _)| *o == off::sb::FLAGS) {
        flags & FLAG_HISTORY_FOOTER
    } else {
        flags
    };
    patches.retain(|(o, _)| *o != off::sb::FLAGS);
    patches.push((off::sb::FLAGS, flags.to_le_bytes().to_vec()));

    copy_patched(bytes, 0, body_end, &patches, out)?;
    for (dtype, len) in new_payloads {
        let e = fill_element(dtype);
        let mut left = len;
        let mut buf = Vec::new();
        while left > 0 {
            buf.clear();
            while u64_of(buf.len()) < left.min(u64_of(COPY_WINDOW)) {
                buf.extend_from_slice(&e);
            }
            out.append(&buf).map_err(ApplyError::Output)?;
            left = left.saturating_sub(u64_of(buf.len()));
        }
    }
    if !write_footer {
        return Ok(());
    }
    let old_json = file
        .footer()
        .filter(|_| keep_footer)
        .map(|f| f.history_json());
    let mut new_spill_at = None;
    if let Some(s) = spill {
        new_spill_at = Some(pos);
        copy_patched(bytes, s.offset, s.offset.saturating_add(s.len), &[], out)?;
        if !remove_trailing {
            let gap_end = json_at;
            let gap_start = s.offset.saturating_add(s.len);
            if gap_end > gap_start {
                copy_patched(bytes, gap_start, gap_end, &[], out)?;
            }
        }
    }
    let moved = match (spill, new_spill_at) {
        (Some(s), Some(n)) => s.offset != n,
        _ => false,
    };
    let json: Vec<u8> = match old_json {
        Some(j) if !moved && history_rows.is_empty() => j.to_vec(),
        Some(j) => {
            let mut v: Value =
                serde_json::from_slice(j).map_err(|e| ApplyError::Footer(format!("{e}")))?;
            let obj = v
                .as_object_mut()
                .ok_or(ApplyError::Footer(String::from("not an object")))?;
            if let (true, Some(n)) = (moved, new_spill_at) {
                if let Some(r) = obj.get_mut("metadata_ref").and_then(|r| r.as_object_mut()) {
                    r.insert(String::from("offset"), Value::from(n));
                }
            }
            if !history_rows.is_empty() {
                let h = obj
                    .entry("history")
                    .or_insert_with(|| Value::Array(Vec::new()));
                if let Some(a) = h.as_array_mut() {
                    a.extend(history_rows.iter().cloned());
                }
            }
            serde_json::to_vec(&v).map_err(|e| ApplyError::Footer(format!("{e}")))?
        }
        None => serde_json::to_vec(&serde_json::json!({ "history": history_rows }))
            .map_err(|e| ApplyError::Footer(format!("{e}")))?,
    };
    out.append(&json).map_err(ApplyError::Output)?;
    out.append(footer_tail(u64_of(json.len())).as_bytes())
        .map_err(ApplyError::Output)?;
    Ok(())
}

/// Appends `bytes[start..end)` to `out` in windows, with `patches` (absolute offsets)
/// applied where they fall inside.
fn copy_patched<O: Output>(
    bytes: &[u8],
    start: u64,
    end: u64,
    patches: &[(u64, Vec<u8>)],
    out: &mut O,
) -> Result<(), ApplyError<O::Error>> {
    let mut at = start;
    let mut buf = Vec::new();
    while at < end {
        let stop = end.min(at.saturating_add(u64_of(COPY_WINDOW)));
        let (a, b) = (
            usize::try_from(at).unwrap_or(usize::MAX),
            usize::try_from(stop).unwrap_or(usize::MAX),
        );
        let src = bytes.get(a..b).ok_or(ApplyError::Changed)?;
        buf.clear();
        buf.extend_from_slice(src);
        for (p_at, p) in patches {
            for (i, byte) in p.iter().enumerate() {
                let o = p_at.saturating_add(u64_of(i));
                if o >= at && o < stop {
                    if let Some(dst) = usize::try_from(o.saturating_sub(at))
                        .ok()
                        .and_then(|k| buf.get_mut(k))
                    {
                        *dst = *byte;
                    }
                }
            }
        }
        out.append(&buf).map_err(ApplyError::Output)?;
        at = stop;
    }
    Ok(())
}
