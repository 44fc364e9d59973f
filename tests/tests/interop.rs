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
            append: false,
            meta: Default::default(),
        };
        assert_eq!(convert(&input, &out, &o), Exit::Clean);
        let bytes = std::fs::read(&out).unwrap();
        assert_peer_readable(&bytes);
        // A dataset appended: the file is still the other implementation's to read.
        let more = d.join("more.npy");
        std::fs::write(&more, npy_f64(&[7.0, 8.0])).unwrap();
        let appended = d.join(format!("b-{}.tet", codec.wire()));
        std::fs::copy(&out, &appended).unwrap();
        let add = ConvertOptions {
            force: false,
            append: true,
            ..o.clone()
        };
        assert_eq!(convert(&more, &appended, &add), Exit::Clean);
        assert_peer_readable(&std::fs::read(&appended).unwrap());
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

/// The other way round: a file the other implementation wrote (its `tet convert` of a
/// Zarr v3 store, `tests/interop/make_peer_fixture.sh`), kept like the conformance files.
/// We verify it clean (every chunk decoded; its 7 raw chunks carry no checksum of ours),
/// read its history and metadata, and answer its own queries with its own values.
#[test]
fn the_peers_converted_file_reads_back_with_its_values() {
    use tet_alloc::tet::query::{plan, Axes, Operation};
    use tet_core::tet::fold::{Reduce, Value};
    use tet_host::tet::verify::{check_with, DecodeOptions};
    let bytes = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/peer/zarr_convert.tet"
    ))
    .unwrap();
    let c = check_with(
        &bytes,
        &DecodeOptions {
            deep: true,
            threads: Some(2),
            budget: Some(1 << 20),
        },
    )
    .unwrap();
    assert_eq!(c.found.kept, vec![]);
    assert_eq!(
        c.checksummed,
        (7, 0),
        "its chunks carry no checksum table entry"
    );
    assert_eq!(c.decoded, (7, 7));
    let h = c.history.unwrap();
    assert_eq!((h.rows, h.inline_metadata), (1, true));
    let reading = tet_alloc::tet::history::open_for_reading(&bytes).unwrap();
    assert!(reading.problems.is_empty());
    assert!(reading.file.checksums().is_none());
    let file = reading.file;
    let names: Vec<String> = file
        .datasets()
        .map(|d| d.unwrap().name().to_string())
        .collect();
    assert_eq!(names, ["counts", "temperature"]);
    let temperature: Vec<f64> = (0..24).map(|i| ((i * 37) % 101) as f64 / 4.0).collect();
    assert_eq!(tet_tests::values(&file, "temperature"), temperature);
    let counts: Vec<f64> = (0..10).map(|i| (i * i - 20) as f64).collect();
    assert_eq!(tet_tests::values(&file, "counts"), counts);
    // Its own answers (`tet query ... -x -q`, printed by the script).
    let answer = |ds: &str, r: Reduce| {
        let d = file.dataset(ds).unwrap();
        let p = plan(&file, d, &[]).unwrap();
        let ax = Axes::new(d.ndim(), None).unwrap();
        tet_host::tet::query::run(&file, &p, Operation::Reduce(r), &ax, 2, 1 << 20)
            .unwrap()
            .values[0]
    };
    let f = |v: Value| match v {
        Value::F64(x) => x,
        Value::I64(x) => x as f64,
        Value::U64(x) => x as f64,
        other => panic!("{other:?}"),
    };
    for (ds, r, want) in [
        ("temperature", Reduce::Sum, 280.5),
        ("temperature", Reduce::Mean, 11.6875),
        ("temperature", Reduce::Min, 0.0),
        ("temperature", Reduce::Max, 24.25),
        ("counts", Reduce::Sum, 85.0),
        ("counts", Reduce::Mean, 8.5),
        ("counts", Reduce::Min, -20.0),
        ("counts", Reduce::Max, 61.0),
    ] {
        assert_eq!(f(answer(ds, r)), want, "{ds} {r:?}");
    }
}
