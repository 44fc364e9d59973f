//! Files both implementations open: every footer our writer, `convert`, `repair` and the
//! example write is one the other implementation (thicclatka/tetration) reads
//! ([`tet_tests::assert_peer_readable`]), and the writer refuses footers it would not.
//! `tests/interop/check_peer.sh` checks the same files with its real `tet` binary.
#![allow(clippy::unwrap_used)]

use tet_alloc::tet::writer::{DatasetSpec, FooterSpec, HistoryRow, WriteError, Writer};
use tet_core::tet::{Codec, DType, DatasetId};
use tet_host::tet::convert::{convert, ConvertOptions};
use tet_host::Exit;
use tet_tests::assert_peer_readable;

fn npy_f64(values: &[f64]) -> Vec<u8> {
    let mut out = tet_host::tet::npy::header("<f8", &[values.len() as u64]);
    out.extend(values.iter().flat_map(|v| v.to_le_bytes()));
    out
}

#[test]
fn the_example_file_is_peer_readable() {
    assert_peer_readable(&tet_alloc::tet::example::temperature().unwrap());
}

#[test]
fn converted_files_carry_string_params() {
    let d = std::env::temp_dir().join(format!("tet-interop-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    let input = d.join("a.npy");
    std::fs::write(&input, npy_f64(&[1.0, 2.5, -3.0, 4.0, 5.0])).unwrap();
    for codec in [Codec::Raw, Codec::Zstd] {
        let out = d.join(format!("a-{}.tet", codec.wire()));
        let o = ConvertOptions {
            chunk: Some(vec![2]),
            codec,
            level: 3,
            name: None,
            force: true,
        };
        assert_eq!(convert(&input, &out, &o), Exit::Clean);
        let bytes = std::fs::read(&out).unwrap();
        assert_peer_readable(&bytes);
        let file = tet_core::tet::TetFile::open(&bytes).unwrap();
        let v: serde_json::Value =
            serde_json::from_slice(file.footer().unwrap().history_json()).unwrap();
        let p = &v["history"][0]["params"];
        assert_eq!(p["arrays"], r#"["a:<f8"]"#);
        assert_eq!(p["from"], "npy");
    }
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn footers_the_peer_would_refuse_are_refused() {
    let spec = [DatasetSpec {
        name: "a",
        dtype: DType::U8,
        shape: &[4],
        chunk_shape: &[4],
    }];
    let row = |params: Vec<(String, String)>| HistoryRow {
        op: "create".into(),
        source: "test".into(),
        at: "2026-12-01T00:00:00Z".into(),
        params,
    };
    let bad = [
        FooterSpec {
            history: vec![row(vec![("k".into(), String::new())])],
            metadata: None,
        },
        FooterSpec {
            history: vec![row(vec![])],
            metadata: Some(r#"{"datasets":{"a":{"attrs":{"units":7}}}}"#.into()),
        },
        FooterSpec {
            history: vec![row(vec![]); 4097],
            metadata: None,
        },
    ];
    for f in &bad {
        let mut w = Writer::new(Vec::new(), &spec).unwrap();
        w.write_array(DatasetId(0), &[1, 2, 3, 4], Codec::Raw)
            .unwrap();
        assert!(
            matches!(w.finish(Some(f)), Err(WriteError::Footer(_))),
            "{f:?}"
        );
    }
}
