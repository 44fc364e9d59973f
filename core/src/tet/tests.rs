//! Unit tests per structure, on bytes built by hand (no writer), so the core is tested
//! against the byte tables directly.

use super::*;
use crate::error::ErrorKind;

fn sb(count: u32, flags: u32, off: u64, len: u64) -> [u8; 32] {
    let mut b = [0u8; 32];
    b[0..4].copy_from_slice(b"TETR");
    b[4..8].copy_from_slice(&1u32.to_le_bytes());
    b[8..12].copy_from_slice(&count.to_le_bytes());
    b[12..16].copy_from_slice(&flags.to_le_bytes());
    b[16..24].copy_from_slice(&off.to_le_bytes());
    b[24..32].copy_from_slice(&len.to_le_bytes());
    b
}

/// One u8 dataset "ab", shape [3], chunk [2]: record is 16 + 2 + 6 pad + 8 + 8 = 40 bytes.
fn one_dataset() -> Vec<u8> {
    let mut v = Vec::new();
    v.extend_from_slice(&sb(1, 0, 80, 32 + 2 * 104));
    v.extend_from_slice(&40u64.to_le_bytes());
    v.extend_from_slice(&2u32.to_le_bytes());
    v.extend_from_slice(&5u32.to_le_bytes());
    v.extend_from_slice(&1u32.to_le_bytes());
    v.extend_from_slice(&0u32.to_le_bytes());
    v.extend_from_slice(b"ab\0\0\0\0\0\0");
    v.extend_from_slice(&3u64.to_le_bytes());
    v.extend_from_slice(&2u64.to_le_bytes());
    assert_eq!(v.len(), 80);
    v.extend_from_slice(b"TIDX");
    v.extend_from_slice(&1u32.to_le_bytes());
    v.extend_from_slice(&2u64.to_le_bytes());
    v.extend_from_slice(&[0u8; 16]);
    let payload0: u64 = 80 + 32 + 2 * 104;
    for (c, at, len) in [(0u64, payload0, 2u64), (1, payload0 + 2, 1)] {
        v.extend_from_slice(&0u64.to_le_bytes());
        v.extend_from_slice(&c.to_le_bytes());
        v.extend_from_slice(&[0u8; 56]);
        v.extend_from_slice(&at.to_le_bytes());
        v.extend_from_slice(&len.to_le_bytes());
        v.extend_from_slice(&len.to_le_bytes());
        v.extend_from_slice(&[0u8; 8]);
    }
    v.extend_from_slice(&[7, 8, 9]);
    v
}

fn findings(bytes: &[u8]) -> (usize, Option<Finding>) {
    let mut n = 0;
    let mut first = None;
    let mut scratch = [0u64; 16];
    verify(
        bytes,
        VerifyOptions {
            scratch: &mut scratch,
            metadata_spill: None,
        },
        &mut |f: &Finding| {
            n += 1;
            first.get_or_insert(*f);
        },
    );
    (n, first)
}

#[test]
fn superblock_fields() {
    let b = sb(0, 1, 32, 0);
    let s = Superblock::parse(&b, &mut |_: &Finding| {}).unwrap();
    assert_eq!(s.dataset_count(), 0);
    assert!(s.has_history_footer());
    assert_eq!((s.chunk_index_offset(), s.chunk_index_length()), (32, 0));
    let e = Superblock::parse(&b[..31], &mut |_: &Finding| {}).unwrap_err();
    assert_eq!(e.code, Code::FileTruncated);
    assert_eq!(
        e.error.kind,
        ErrorKind::Truncated {
            needed: 32,
            available: 31
        }
    );
}

#[test]
fn empty_file_opens_and_has_no_datasets() {
    let b = sb(0, 0, 32, 0);
    let f = TetFile::open(&b).unwrap();
    assert_eq!(f.datasets().count(), 0);
    assert!(f.index().is_none());
    assert_eq!(f.dataset("x").unwrap_err().kind, ErrorKind::NotFound);
    assert_eq!(findings(&b).0, 0);
}

#[test]
fn hand_built_file_reads_and_verifies() {
    let b = one_dataset();
    assert_eq!(findings(&b), (0, None));
    let f = TetFile::open(&b).unwrap();
    let ds = f.dataset("ab").unwrap();
    assert_eq!((ds.dtype(), ds.ndim(), ds.grid_cells()), (DType::U8, 1, 2));
    assert_eq!(ds.record_len(), 40);
    assert_eq!(f.chunk(&ds, &[0]).unwrap().payload, &[7, 8]);
    let edge = f.chunk(&ds, &[1]).unwrap();
    assert_eq!(
        (edge.payload, edge.raw_byte_len, edge.row),
        (&[9u8][..], 1, 1)
    );
    assert_eq!(
        f.chunk(&ds, &[2]).unwrap_err().kind,
        ErrorKind::OutOfRange { value: 2, max: 2 }
    );
    let ix = f.index().unwrap();
    assert_eq!(ix.execution().memory_budget_percent_bps, 0);
    assert_eq!(ix.row_offset(1), 80 + 32 + 104);
}

#[test]
fn hand_built_file_corruptions() {
    // Padding byte after the name.
    let mut b = one_dataset();
    b[40 + 18] = 1;
    let (n, f) = findings(&b);
    assert_eq!(n, 1);
    let f = f.unwrap();
    assert_eq!(
        (f.code, f.error.offset, f.severity()),
        (Code::RecordPadding, 58, Severity::Warning)
    );
    // Edge chunk claims a padded tile.
    let mut b = one_dataset();
    let row1 = 80 + 32 + 104;
    b[row1 + 80..row1 + 88].copy_from_slice(&2u64.to_le_bytes());
    let (_, f) = findings(&b);
    let f = f.unwrap();
    assert_eq!(
        (f.code, f.error.offset),
        (Code::ChunkRawLen, row1 as u64 + 80)
    );
    assert_eq!(f.coords.unwrap().as_slice(), &[1]);
}

#[test]
fn dtype_tags_round_trip() {
    for (i, t) in DType::ALL.iter().enumerate() {
        assert_eq!(DType::from_tag(t.tag()), Some(*t));
        assert_eq!(t.tag() as usize, i + 1);
    }
    assert_eq!(DType::from_tag(0), None);
    assert_eq!(DType::from_tag(11), None);
    assert_eq!(DType::F16.size(), 2);
    assert_eq!(Codec::from_wire(2), None);
}

#[test]
fn coords_display_and_limits() {
    let c = Coords::from_slice(&[0, 3]).unwrap();
    assert_eq!(format!("{c}"), "(0, 3)");
    assert!(Coords::from_slice(&[0; 9]).is_none());
}

#[test]
fn grid_geometry_is_clipped_and_row_major() {
    let b = one_dataset();
    let f = TetFile::open(&b).unwrap();
    let ds = f.dataset("ab").unwrap();
    assert_eq!(ds.tile_shape(&[1]).unwrap().as_slice(), &[1]);
    assert_eq!(ds.linear(&[1]), Some(1));
    assert_eq!(ds.linear(&[0, 0]), None);
    assert_eq!(ds.delinearize(1).as_slice(), &[1]);
}

#[test]
fn footer_tail_parse() {
    let mut b = sb(0, 1, 32, 0).to_vec();
    b.extend_from_slice(b"{}");
    b.extend_from_slice(&2u64.to_le_bytes());
    b.extend_from_slice(&1u32.to_le_bytes());
    b.extend_from_slice(b"THST");
    let ft = Footer::parse(&b, 32).unwrap();
    assert_eq!(
        (ft.history_json(), ft.json_offset(), ft.tail_offset()),
        (&b"{}"[..], 32, 34)
    );
    assert_eq!(findings(&b).0, 0);
    // One byte too long reaches into the superblock.
    b[34..42].copy_from_slice(&3u64.to_le_bytes());
    let e = Footer::parse(&b, 32).unwrap_err();
    assert_eq!((e.code, e.error.offset), (Code::FooterLength, 34));
}
