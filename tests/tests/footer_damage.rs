//! Reads that survive metadata damage: a history footer cut at every length, or with a
//! byte of its tail, JSON or spill overwritten, leaves every chunk readable; the file opens,
//! says why the footer is unreadable, and verify still reports it.
#![allow(clippy::unwrap_used)]

use tet_alloc::tet::writer::{DatasetSpec, FooterSpec, HistoryRow, Writer, INLINE_JSON_LIMIT};
use tet_core::tet::{Code, Codec, DType, DatasetId, TetFile};
use tet_tests::{codes, logical_bytes};

/// A file with raw and zstd chunks and a footer whose metadata spills.
fn spilled() -> Vec<u8> {
    let specs = [
        DatasetSpec {
            name: "a",
            dtype: DType::F32,
            shape: &[6, 5],
            chunk_shape: &[4, 2],
        },
        DatasetSpec {
            name: "b",
            dtype: DType::U16,
            shape: &[300],
            chunk_shape: &[128],
        },
    ];
    let mut w = Writer::new(Vec::new(), &specs).unwrap();
    let a: Vec<u8> = (0..30)
        .flat_map(|v| (v as f32 * 0.25).to_le_bytes())
        .collect();
    w.write_array(DatasetId(0), &a, Codec::Raw).unwrap();
    let b: Vec<u8> = (0..300u16).flat_map(|v| (v % 13).to_le_bytes()).collect();
    w.write_array(DatasetId(1), &b, Codec::Zstd).unwrap();
    let footer = FooterSpec {
        history: vec![HistoryRow {
            op: "create".into(),
            source: "footer_damage".into(),
            at: "2026-12-01T00:00:00Z".into(),
            params: vec![("k".into(), "v".into())],
        }],
        metadata: Some(format!(
            r#"{{"notes":"{}"}}"#,
            "n".repeat(INLINE_JSON_LIMIT)
        )),
    };
    w.finish(Some(&footer)).unwrap()
}

fn names(file: &TetFile<'_>) -> Vec<String> {
    file.datasets()
        .map(|d| d.unwrap().name().to_string())
        .collect()
}

/// Every dataset of `damaged` reads back as in `good`.
fn same_data(good: &[u8], damaged: &[u8], what: &str) {
    let g = TetFile::open(good).unwrap();
    let d = TetFile::open(damaged).unwrap_or_else(|e| panic!("{what}: open failed: {e}"));
    for n in names(&g) {
        assert_eq!(logical_bytes(&g, &n), logical_bytes(&d, &n), "{what}: {n}");
    }
}

/// Every position in `end..len` near the boundaries of the footer regions (the payload
/// end, the JSON start, the tail), and every 257th between: the spilled file's footer
/// is 64 KiB, too long to verify once per byte in a debug build.
fn positions(good: &[u8]) -> Vec<usize> {
    let end = payload_end(good);
    let json = TetFile::open(good).unwrap().footer().unwrap().json_offset() as usize;
    (end..good.len())
        .filter(|&p| {
            [end, json, good.len() - 16]
                .iter()
                .any(|&b| p.abs_diff(b) < 300)
                || p % 257 == 0
        })
        .collect()
}

fn payload_end(bytes: &[u8]) -> usize {
    let f = TetFile::open(bytes).unwrap();
    f.rows()
        .iter()
        .map(|r| r.payload_offset.get() + r.stored_byte_len.get())
        .max()
        .unwrap() as usize
}

#[test]
fn a_footer_cut_at_every_length_leaves_every_chunk_readable() {
    for good in [tet_alloc::tet::example::temperature().unwrap(), spilled()] {
        for len in positions(&good) {
            let cut = &good[..len];
            same_data(&good, cut, &format!("cut at {len}"));
            let f = TetFile::open(cut).unwrap();
            let problem = f.footer_problem().unwrap_or_else(|| panic!("cut at {len}"));
            assert!(problem.code.is_footer_tail());
            assert!(codes(cut).contains(&problem.code), "verify names it");
        }
    }
}

#[test]
fn any_footer_byte_overwritten_leaves_every_chunk_readable() {
    for good in [tet_alloc::tet::example::temperature().unwrap(), spilled()] {
        // Except `history_json_len` (the tail's first 8 bytes): a length that still
        // leaves a well-formed tail but reaches back into the payloads moves the end of
        // the payload area, which v1 cannot tell from payload damage (docs/tet-v1.md).
        let len_field = good.len() - 16..good.len() - 8;
        for at in positions(&good)
            .into_iter()
            .filter(|p| !len_field.contains(p))
        {
            let mut bad = good.clone();
            bad[at] ^= 0x5a;
            same_data(&good, &bad, &format!("byte {at}"));
        }
        // Verify names the damage to the tail.
        let mut bad = good.clone();
        let n = bad.len();
        bad[n - 1] ^= 0x5a;
        assert!(codes(&bad).contains(&Code::FooterMagic));
        bad[n - 1] ^= 0x5a;
        bad[n - 8] ^= 0x5a;
        assert!(codes(&bad).contains(&Code::FooterVersion));
    }
}
