//! Corruption tests: build a small valid file in code, overwrite one named field, and
//! assert the exact finding code, severity and byte offset.

use tet_alloc::tet::testing::TetWriter;
use tet_core::tet::raw::off;
use tet_core::tet::{
    verify, Code, Codec, DType, Severity, TetFile, VerifyOptions, INDEX_ENTRY_LEN,
};
use tet_core::ErrorKind;
use tet_tests::{codes, findings};

const HISTORY: &[u8] = br#"{"history":[{"op":"create","source":"test","at":"2026-11-30"}]}"#;

/// Two datasets: `temperature` f32 [2,3]/[2,2] (2 chunks, the second clipped) and
/// `counts` u16 [5]/[2] (3 chunks, the last clipped), plus a history footer.
fn base() -> Vec<u8> {
    let mut w = TetWriter::new();
    let t = w
        .add_dataset("temperature", DType::F32, &[2, 3], &[2, 2])
        .unwrap();
    let vals: Vec<u8> = (1..=6).flat_map(|v| (v as f32).to_le_bytes()).collect();
    w.add_array(t, &vals).unwrap();
    let c = w.add_dataset("counts", DType::U16, &[5], &[2]).unwrap();
    let vals: Vec<u8> = (10..15u16).flat_map(|v| v.to_le_bytes()).collect();
    w.add_array(c, &vals).unwrap();
    w.set_history(HISTORY, b"");
    w.to_bytes().unwrap()
}

struct Map {
    rec0: u64,
    rec1: u64,
    index: u64,
    len: u64,
}

fn map(bytes: &[u8]) -> Map {
    let f = TetFile::open(bytes).unwrap();
    let mut ds = f.datasets();
    Map {
        rec0: ds.next().unwrap().unwrap().offset(),
        rec1: ds.next().unwrap().unwrap().offset(),
        index: f.index().unwrap().offset(),
        len: bytes.len() as u64,
    }
}

fn row(m: &Map, i: u64) -> u64 {
    m.index + 32 + i * INDEX_ENTRY_LEN
}

fn patch(bytes: &mut [u8], at: u64, with: &[u8]) {
    let at = at as usize;
    bytes[at..at + with.len()].copy_from_slice(with);
}

fn patched(at: impl Fn(&Map) -> u64, with: &[u8]) -> Vec<u8> {
    let mut b = base();
    let m = map(&b);
    patch(&mut b, at(&m), with);
    b
}

/// Asserts the file has exactly one finding, with this code, at this offset.
fn only(bytes: &[u8], code: Code, offset: u64) -> tet_core::tet::Finding {
    let f = findings(bytes);
    assert_eq!(f.len(), 1, "expected only {code:?}, got {f:#?}");
    assert_eq!(f[0].code, code);
    assert_eq!(f[0].error.offset, offset, "offset of {code:?}");
    f[0]
}

/// Asserts the findings include `code` at `offset`.
fn has(bytes: &[u8], code: Code, offset: u64) -> tet_core::tet::Finding {
    let f = findings(bytes);
    *f.iter()
        .find(|f| f.code == code && f.error.offset == offset)
        .unwrap_or_else(|| panic!("no {code:?} at {offset:#x} in {f:#?}"))
}

#[test]
fn base_is_clean_and_canonical() {
    let b = base();
    assert_eq!(findings(&b), vec![]);
    let m = map(&b);
    assert_eq!(m.rec0, 40);
    let f = TetFile::open(&b).unwrap();
    assert_eq!(f.rows().len(), 5);
    let counts = f.dataset("counts").unwrap();
    assert_eq!(counts.first_canonical_row(), 2);
    let c = f.chunk(&counts, &[2]).unwrap();
    assert_eq!(
        (c.row, c.raw_byte_len, c.payload),
        (4, 2, &14u16.to_le_bytes()[..])
    );
}

#[test]
fn superblock_magic() {
    let b = patched(|_| off::sb::MAGIC, b"TETX");
    let f = only(&b, Code::SuperblockMagic, 0);
    assert_eq!(f.severity(), Severity::Error);
    let e = TetFile::open(&b).unwrap_err();
    assert_eq!(
        e.kind,
        ErrorKind::BadMagic {
            expected: *b"TETR",
            found: *b"TETX"
        }
    );
    assert_eq!((e.what, e.offset), ("superblock.magic", 0));
}

#[test]
fn layout_version() {
    let b = patched(|_| off::sb::LAYOUT_VERSION, &2u32.to_le_bytes());
    only(&b, Code::LayoutVersion, 4);
    assert_eq!(
        TetFile::open(&b).unwrap_err().kind,
        ErrorKind::Unsupported { version: 2 }
    );
}

#[test]
fn unknown_flag_bits_warn_but_open() {
    let b = patched(|_| off::sb::FLAGS, &0x5u32.to_le_bytes());
    let f = only(&b, Code::SuperblockFlags, 12);
    assert_eq!(f.severity(), Severity::Warning);
    assert_eq!(f.error.kind, ErrorKind::UnknownFlags { bits: 4 });
    assert!(TetFile::open(&b).is_ok());
}

#[test]
fn chunk_index_offset_mismatch() {
    let b = patched(|_| off::sb::CHUNK_INDEX_OFFSET, &0x400u64.to_le_bytes());
    let f = has(&b, Code::IndexOffset, 16);
    assert!(matches!(
        f.error.kind,
        ErrorKind::Mismatch { found: 0x400, .. }
    ));
    assert!(TetFile::open(&b).is_err());
}

#[test]
fn chunk_index_length_mismatch() {
    let b = patched(
        |_| off::sb::CHUNK_INDEX_LENGTH,
        &(32u64 + 4 * 104).to_le_bytes(),
    );
    let f = only(&b, Code::IndexLength, 24);
    assert_eq!(
        f.error.kind,
        ErrorKind::Mismatch {
            expected: 32 + 5 * 104,
            found: 32 + 4 * 104
        }
    );
}

#[test]
fn chunk_index_length_past_eof() {
    let b = patched(|_| off::sb::CHUNK_INDEX_LENGTH, &u64::MAX.to_le_bytes());
    let f = only(&b, Code::IndexBounds, 16);
    assert_eq!(f.error.kind, ErrorKind::Overflow);
}

#[test]
fn dataset_blob_len_hostile() {
    let b = patched(|_| 32, &u64::MAX.to_le_bytes());
    let f = only(&b, Code::DirectoryBounds, 32);
    assert_eq!(f.error.kind, ErrorKind::Overflow);
    let b = patched(|_| 32, &(1u64 << 40).to_le_bytes());
    only(&b, Code::DirectoryBounds, 32);
}

#[test]
fn dataset_count_too_large_truncates_a_record() {
    let b = patched(|_| off::sb::DATASET_COUNT, &1000u32.to_le_bytes());
    has(&b, Code::RecordTruncated, 40 + 64 + 40);
}

#[test]
fn record_dtype() {
    let b = patched(|m| m.rec1 + off::rec::DTYPE, &11u32.to_le_bytes());
    let f = only(&b, Code::RecordDtype, 40 + 64 + 4);
    assert_eq!(f.dataset, Some(1));
    assert_eq!(f.error.kind, ErrorKind::OutOfRange { value: 11, max: 10 });
}

#[test]
fn record_ndim() {
    for bad in [0u32, 9, u32::MAX] {
        let b = patched(|m| m.rec0 + off::rec::NDIM, &bad.to_le_bytes());
        only(&b, Code::RecordNdim, 48);
    }
}

#[test]
fn record_reserved_warns() {
    let b = patched(|m| m.rec0 + off::rec::RESERVED, &1u32.to_le_bytes());
    let f = only(&b, Code::RecordReserved, 52);
    assert_eq!(f.severity(), Severity::Warning);
}

#[test]
fn record_name_utf8() {
    let b = patched(|m| m.rec0 + off::rec::NAME + 3, &[0xff]);
    let f = only(&b, Code::RecordName, 56);
    assert_eq!(f.error.kind, ErrorKind::InvalidUtf8 { valid_up_to: 3 });
}

#[test]
fn record_name_len_past_blob() {
    let b = patched(
        |m| m.rec1 + off::rec::NAME_LEN,
        &0xffff_fff0u32.to_le_bytes(),
    );
    has(&b, Code::RecordTruncated, 104);
}

#[test]
fn record_padding_warns() {
    // "temperature" is 11 bytes: 16 + 11 = 27, so padding is bytes 27..32 of the record.
    let b = patched(|m| m.rec0 + 29, &[7]);
    let f = only(&b, Code::RecordPadding, 40 + 29);
    assert_eq!(f.error.kind, ErrorKind::NonZero { value: 7 });
}

#[test]
fn record_chunk_shape_zero() {
    // temperature: shape at +32, chunk_shape at +48; second extent at +56.
    let b = patched(|m| m.rec0 + 56, &0u64.to_le_bytes());
    only(&b, Code::RecordChunkShape, 40 + 56);
}

#[test]
fn record_shape_overflows() {
    let b = patched(|m| m.rec0 + 32, &u64::MAX.to_le_bytes());
    let f = only(&b, Code::RecordSize, 40 + 32);
    assert_eq!(f.error.kind, ErrorKind::Overflow);
}

#[test]
fn tidx_magic_and_version() {
    let b = patched(|m| m.index, b"TIDY");
    only(&b, Code::IndexMagic, map(&base()).index);
    let b = patched(|m| m.index + off::tidx::INDEX_VERSION, &3u32.to_le_bytes());
    only(&b, Code::IndexVersion, map(&base()).index + 4);
}

#[test]
fn tidx_reserved_and_budget_warn() {
    let ix = map(&base()).index;
    let b = patched(|m| m.index + off::tidx::RESERVED0, &1u16.to_le_bytes());
    only(&b, Code::IndexReserved, ix + 18);
    let b = patched(|m| m.index + off::tidx::RESERVED1, &1u64.to_le_bytes());
    only(&b, Code::IndexReserved, ix + 24);
    let b = patched(
        |m| m.index + off::tidx::BUDGET_BPS,
        &10_001u16.to_le_bytes(),
    );
    let f = only(&b, Code::BudgetPercent, ix + 16);
    assert_eq!(f.severity(), Severity::Warning);
    let b = patched(
        |m| m.index + off::tidx::BUDGET_BPS,
        &10_000u16.to_le_bytes(),
    );
    assert_eq!(findings(&b), vec![]);
}

#[test]
fn tidx_entry_count() {
    let b = patched(|m| m.index + off::tidx::ENTRY_COUNT, &6u64.to_le_bytes());
    only(&b, Code::IndexLength, 24);
    let b = patched(
        |m| m.index + off::tidx::ENTRY_COUNT,
        &u64::MAX.to_le_bytes(),
    );
    let f = only(&b, Code::IndexLength, map(&base()).index + 8);
    assert_eq!(f.error.kind, ErrorKind::Overflow);
}

#[test]
fn row_dataset_id() {
    let b = patched(|m| row(m, 4) + off::row::DATASET_ID, &7u64.to_le_bytes());
    let m = map(&b);
    let f = has(&b, Code::ChunkDataset, row(&m, 4));
    assert_eq!(f.row, Some(4));
    // The cell that row covered is now missing.
    let missing = has(&b, Code::ChunkMissing, m.index);
    assert_eq!(missing.dataset, Some(1));
    assert_eq!(missing.coords.unwrap().as_slice(), &[2]);
    assert_eq!(codes(&b).len(), 2);
}

#[test]
fn row_coords_outside_grid_names_the_cell() {
    let b = patched(
        |m| row(m, 1) + off::row::CHUNK_INDEX + 8,
        &3u64.to_le_bytes(),
    );
    let m = map(&b);
    let at = row(&m, 1) + 16;
    let f = has(&b, Code::ChunkCoords, at);
    assert_eq!(f.error.kind, ErrorKind::OutOfRange { value: 3, max: 1 });
    assert_eq!(f.coords.unwrap().as_slice(), &[0, 3]);
    let file = TetFile::open(&b).unwrap();
    let names = tet_host::tet::report::Names::for_findings(Some(&file), &[f]);
    let msg = tet_host::tet::report::message(&names, &f, None);
    assert_eq!(
        msg,
        format!("dataset 0 'temperature': chunk (0, 3) is outside the 1×2 chunk grid (tidx row 1, byte {at:#x})")
    );
    has(&b, Code::ChunkMissing, m.index);
    // Lookup of the now-missing cell fails cleanly.
    let t = file.dataset("temperature").unwrap();
    assert_eq!(
        file.chunk(&t, &[0, 1]).unwrap_err().kind,
        ErrorKind::NotFound
    );
}

#[test]
fn row_unused_coordinate_slot() {
    let b = patched(
        |m| row(m, 0) + off::row::CHUNK_INDEX + 2 * 8,
        &1u64.to_le_bytes(),
    );
    let m = map(&b);
    has(&b, Code::ChunkCoordsUnused, row(&m, 0) + 24);
}

#[test]
fn row_codec_and_reserved() {
    let b = patched(|m| row(m, 2) + off::row::CODEC, &7u32.to_le_bytes());
    only(&b, Code::ChunkCodec, row(&map(&base()), 2) + 96);
    let b = patched(|m| row(m, 2) + off::row::RESERVED, &7u32.to_le_bytes());
    let f = only(&b, Code::ChunkReserved, row(&map(&base()), 2) + 100);
    assert_eq!(f.severity(), Severity::Warning);
}

#[test]
fn row_raw_byte_len_must_match_the_clipped_tile() {
    // Row 1 is temperature's clipped [2,1] tile: 8 bytes. Claim the padded 16.
    let b = patched(|m| row(m, 1) + off::row::RAW_BYTE_LEN, &16u64.to_le_bytes());
    let r = row(&map(&b), 1);
    let f = has(&b, Code::ChunkRawLen, r + 80);
    assert_eq!(
        f.error.kind,
        ErrorKind::Mismatch {
            expected: 8,
            found: 16
        }
    );
    let f = has(&b, Code::ChunkStoredLen, r + 88);
    assert_eq!(
        f.error.kind,
        ErrorKind::Mismatch {
            expected: 16,
            found: 8
        }
    );
    let file = TetFile::open(&b).unwrap();
    let t = file.dataset("temperature").unwrap();
    assert_eq!(file.chunk(&t, &[0, 1]).unwrap_err().offset, r + 80);
}

#[test]
fn row_payload_bounds() {
    let b = patched(
        |m| row(m, 3) + off::row::PAYLOAD_OFFSET,
        &(1u64 << 50).to_le_bytes(),
    );
    has(&b, Code::PayloadBounds, row(&map(&b), 3) + 72);
    let b = patched(
        |m| row(m, 3) + off::row::STORED_BYTE_LEN,
        &u64::MAX.to_le_bytes(),
    );
    has(&b, Code::PayloadBounds, row(&map(&b), 3) + 88);
}

#[test]
fn payload_may_not_run_into_the_footer() {
    // The last payload ends where history_json starts; move it 1 byte later.
    let b0 = base();
    let f = TetFile::open(&b0).unwrap();
    let last = f.rows()[4].payload_offset.get();
    let b = patched(
        |m| row(m, 4) + off::row::PAYLOAD_OFFSET,
        &(last + 1).to_le_bytes(),
    );
    let found = has(&b, Code::PayloadBounds, row(&map(&b), 4) + 72);
    assert_eq!(
        found.error.kind,
        ErrorKind::Truncated {
            needed: last + 3,
            available: f.payload_limit()
        }
    );
}

#[test]
fn payload_inside_metadata() {
    let b = patched(
        |m| row(m, 0) + off::row::PAYLOAD_OFFSET,
        &40u64.to_le_bytes(),
    );
    has(&b, Code::PayloadMetadata, row(&map(&b), 0) + 72);
}

#[test]
fn payload_overlap() {
    let b0 = base();
    let p0 = TetFile::open(&b0).unwrap().rows()[0].payload_offset.get();
    let b = patched(
        |m| row(m, 1) + off::row::PAYLOAD_OFFSET,
        &(p0 + 4).to_le_bytes(),
    );
    let f = has(&b, Code::PayloadOverlap, row(&map(&b), 1) + 72);
    assert_eq!(f.error.kind, ErrorKind::Overlap { other: p0 });
    assert_eq!(f.row, Some(1));
}

#[test]
fn duplicate_chunk_names_both_rows() {
    // Row 3 (counts (1)) claims counts (0), already row 2's.
    let b = patched(|m| row(m, 3) + off::row::CHUNK_INDEX, &0u64.to_le_bytes());
    let m = map(&b);
    let f = has(&b, Code::ChunkDuplicate, row(&m, 3) + 8);
    assert_eq!(f.error.kind, ErrorKind::Duplicate { first: row(&m, 2) });
    assert_eq!(f.coords.unwrap().as_slice(), &[0]);
    // Its raw length is now also wrong (a full 2-element tile is 4 bytes; it declares 4),
    // so only the duplicate and the missing cell (1) are reported.
    let missing = has(&b, Code::ChunkMissing, m.index);
    assert_eq!(missing.coords.unwrap().as_slice(), &[1]);
    assert_eq!(codes(&b).len(), 2);
}

#[test]
fn non_canonical_row_order_is_valid_and_readable() {
    let mut w = TetWriter::new();
    let a = w.add_dataset("a", DType::U8, &[3, 3], &[2, 2]).unwrap();
    let tiles: [(&[u64], &[u8]); 4] = [
        (&[1, 1], &[9]),
        (&[0, 0], &[1, 2, 4, 5]),
        (&[1, 0], &[7, 8]),
        (&[0, 1], &[3, 6]),
    ];
    for (c, t) in tiles {
        w.add_chunk_raw(a, c, t);
    }
    let b = w.to_bytes().unwrap();
    assert_eq!(findings(&b), vec![]);
    let f = TetFile::open(&b).unwrap();
    assert_eq!(
        tet_tests::values(&f, "a"),
        (1..=9).map(f64::from).collect::<Vec<_>>()
    );
    // Without scratch the core says it could not finish, rather than guessing.
    let mut sink = Vec::new();
    verify(
        &b,
        VerifyOptions {
            scratch: &mut [],
            metadata_spill: None,
        },
        &mut |f: &tet_core::tet::Finding| sink.push(*f),
    );
    assert_eq!(sink.len(), 1);
    assert_eq!(sink[0].code, Code::VerifyIncomplete);
    assert_eq!(
        sink[0].error.kind,
        ErrorKind::Budget {
            needed: 2 + 4,
            available: 0
        }
    );
}

#[test]
fn missing_cells_are_capped_then_summarised() {
    let mut w = TetWriter::new();
    let a = w.add_dataset("a", DType::U8, &[1 << 40], &[1]).unwrap();
    w.add_chunk_raw(a, &[5], &[1]);
    let b = w.to_bytes().unwrap();
    let f = findings(&b);
    let missing: Vec<_> = f.iter().filter(|f| f.code == Code::ChunkMissing).collect();
    assert_eq!(missing.len(), 65);
    assert_eq!(missing[0].coords.unwrap().as_slice(), &[0]);
    assert_eq!(missing[5].coords.unwrap().as_slice(), &[6]);
    assert_eq!(
        missing[64].error.kind,
        ErrorKind::Mismatch {
            expected: 1 << 40,
            found: 1
        }
    );
}

#[test]
fn trailing_bytes_warn() {
    let mut w = TetWriter::new();
    let a = w.add_dataset("a", DType::U8, &[2], &[2]).unwrap();
    w.add_array(a, &[1, 2]).unwrap();
    let mut b = w.to_bytes().unwrap();
    let end = b.len() as u64;
    b.extend_from_slice(&[0; 5]);
    let f = only(&b, Code::TrailingBytes, end);
    assert_eq!(f.error.kind, ErrorKind::Unreferenced { len: 5 });
    assert_eq!(f.severity(), Severity::Warning);
}

#[test]
fn footer_tail() {
    let len = map(&base()).len;
    let b = patched(|m| m.len - 4, b"THSX");
    has(&b, Code::FooterMagic, len - 4);
    let b = patched(|m| m.len - 8, &2u32.to_le_bytes());
    has(&b, Code::FooterVersion, len - 8);
    let b = patched(|m| m.len - 16, &u64::MAX.to_le_bytes());
    let f = has(&b, Code::FooterLength, len - 16);
    assert!(matches!(
        f.error.kind,
        ErrorKind::OutOfRange {
            value: u64::MAX,
            ..
        }
    ));
    // A broken tail does not also produce trailing-byte noise.
    assert!(!codes(&b).contains(&Code::TrailingBytes));
}

#[test]
fn footer_json() {
    let b = patched(|m| m.len - 16 - HISTORY.len() as u64, b"[");
    let at = map(&base()).len - 16 - HISTORY.len() as u64;
    only(&b, Code::FooterJson, at);
}

#[test]
fn footer_flag_without_footer() {
    let mut w = TetWriter::new();
    let a = w.add_dataset("a", DType::U8, &[2], &[2]).unwrap();
    w.add_array(a, &[1, 2]).unwrap();
    let mut b = w.to_bytes().unwrap();
    patch(&mut b, off::sb::FLAGS, &1u32.to_le_bytes());
    let len = b.len() as u64;
    has(&b, Code::FooterMagic, len - 4);
    let mut empty = TetWriter::new().to_bytes().unwrap();
    patch(&mut empty, off::sb::FLAGS, &1u32.to_le_bytes());
    let f = only(&empty, Code::FooterTruncated, 32);
    assert_eq!(
        f.error.kind,
        ErrorKind::Truncated {
            needed: 48,
            available: 32
        }
    );
}

#[test]
fn metadata_spill() {
    let mut w = TetWriter::new();
    let a = w.add_dataset("a", DType::U8, &[2], &[2]).unwrap();
    w.add_array(a, &[1, 2]).unwrap();
    let spill = br#"{"units":"K"}"#;
    let at = w.spill_offset().unwrap();
    let json = format!(
        r#"{{"metadata_ref":{{"offset":{at},"len":{}}}}}"#,
        spill.len()
    );
    w.set_history(json.as_bytes(), spill);
    let b = w.to_bytes().unwrap();
    assert_eq!(findings(&b), vec![]);
    // A reference that points into the payloads.
    let mut w2 = TetWriter::new();
    let a = w2.add_dataset("a", DType::U8, &[2], &[2]).unwrap();
    w2.add_array(a, &[1, 2]).unwrap();
    let json = format!(
        r#"{{"metadata_ref":{{"offset":{},"len":{}}}}}"#,
        at - 2,
        spill.len()
    );
    w2.set_history(json.as_bytes(), spill);
    let b = w2.to_bytes().unwrap();
    let c = codes(&b);
    assert!(c.contains(&Code::MetadataSpill), "{c:?}");
    // A spill that is not a JSON object.
    let mut w3 = TetWriter::new();
    let a = w3.add_dataset("a", DType::U8, &[2], &[2]).unwrap();
    w3.add_array(a, &[1, 2]).unwrap();
    let json = format!(r#"{{"metadata_ref":{{"offset":{at},"len":3}}}}"#);
    w3.set_history(json.as_bytes(), b"[1]");
    let b = w3.to_bytes().unwrap();
    only(&b, Code::MetadataSpill, at);
}

#[test]
fn empty_file() {
    let b = TetWriter::new().to_bytes().unwrap();
    assert_eq!(b.len(), 32);
    assert_eq!(findings(&b), vec![]);
    let mut bad = b.clone();
    patch(&mut bad, off::sb::CHUNK_INDEX_OFFSET, &40u64.to_le_bytes());
    only(&bad, Code::IndexOffset, 16);
    let mut bad = b.clone();
    patch(&mut bad, off::sb::CHUNK_INDEX_LENGTH, &1u64.to_le_bytes());
    only(&bad, Code::IndexLength, 24);
}

#[test]
fn every_truncation_is_reported_without_panic() {
    let b = base();
    for n in 0..b.len() {
        let f = findings(&b[..n]);
        assert!(
            f.iter().any(|f| f.severity() == Severity::Error),
            "truncation to {n} bytes passed: {f:?}"
        );
        if n < 32 {
            assert_eq!(f[0].code, Code::FileTruncated);
        }
    }
}

#[test]
fn zstd_rows_need_not_match_raw_length() {
    let mut w = TetWriter::new();
    let a = w.add_dataset("a", DType::U32, &[4], &[4]).unwrap();
    w.add_chunk_stored(a, &[0], Codec::Zstd, 16, &[0x28, 0xb5, 0x2f, 0xfd, 0, 0]);
    let b = w.to_bytes().unwrap();
    // Structurally fine (stored 6 bytes for 16 raw); the quick decode scan then finds
    // a header with no blocks.
    let f = findings(&b);
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(f[0].code, Code::ZstdFrame);
    assert_eq!(f[0].row, Some(0));
    w.add_chunk_stored(a, &[0], Codec::Zstd, 12, &[0]);
    let b = w.to_bytes().unwrap();
    assert!(codes(&b).contains(&Code::ChunkRawLen));
}
