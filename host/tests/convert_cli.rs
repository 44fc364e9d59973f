//! `tet-host convert` and `export`: NumPy files written by hand (C and Fortran order,
//! little- and big-endian, bool, int8, 0-d), `.npz` archives with stored and deflated
//! members, refusals, and a round trip through `export`.

#![allow(clippy::restriction, reason = "tests and benches fail by panicking")]

use std::path::{Path, PathBuf};

mod common;
use common::npy;

fn dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("tet-convert-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn run(args: &[&str]) -> (i32, String, String) {
    let (c, o, e) = common::run(args, &dir());
    (c, String::from_utf8(o).unwrap(), e)
}

fn values(tet: &Path, ds: &str) -> serde_json::Value {
    let (code, o, e) = run(&[
        "query",
        &format!(r#"{{"dataset": "{ds}"}}"#),
        "-t",
        tet.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{e}");
    let v: serde_json::Value = serde_json::from_str(&o).unwrap();
    v["result"].clone()
}

#[test]
fn npy_layouts_and_types() {
    let d = dir();
    // C order f32 [5, 7] in 2 x 3 chunks, zstd.
    let data: Vec<u8> = (0..35).flat_map(|i| (i as f32).to_le_bytes()).collect();
    std::fs::write(d.join("c.npy"), npy("<f4", false, &[5, 7], &data)).unwrap();
    let (code, _, e) = run(&["convert", "c.npy", "c.tet", "--chunk", "2,3"]);
    assert_eq!(code, 0, "{e}");
    let r = values(&d.join("c.tet"), "c");
    assert_eq!(r["shape"], serde_json::json!([5, 7]));
    assert_eq!(r["data"][34], serde_json::json!(34.0));
    let (code, _, _) = run(&["verify", "--deep", "c.tet"]);
    assert_eq!(code, 0);
    // Fortran order i4 [3, 4]: element (i, j) stored at j * 3 + i.
    let mut f = Vec::new();
    for j in 0..4i32 {
        for i in 0..3i32 {
            f.extend_from_slice(&(i * 10 + j).to_le_bytes());
        }
    }
    std::fs::write(d.join("f.npy"), npy("<i4", true, &[3, 4], &f)).unwrap();
    let (code, _, e) = run(&["convert", "f.npy", "f.tet", "--codec", "raw", "--name", "m"]);
    assert_eq!(code, 0, "{e}");
    let r = values(&d.join("f.tet"), "m");
    assert_eq!(
        r["data"],
        serde_json::json!([0, 1, 2, 3, 10, 11, 12, 13, 20, 21, 22, 23])
    );
    // Big-endian f8, bool, int8 widened, a 0-d array.
    let be: Vec<u8> = [1.5f64, -2.0, 1e300]
        .iter()
        .flat_map(|v| v.to_be_bytes())
        .collect();
    std::fs::write(d.join("be.npy"), npy(">f8", false, &[3], &be)).unwrap();
    std::fs::write(d.join("b.npy"), npy("|b1", false, &[4], &[0, 1, 7, 0])).unwrap();
    std::fs::write(
        d.join("i.npy"),
        npy("|i1", false, &[3], &[0xff, 0x7f, 0x80]),
    )
    .unwrap();
    std::fs::write(d.join("z.npy"), npy("<u2", false, &[], &9u16.to_le_bytes())).unwrap();
    for (f, want) in [
        ("be", serde_json::json!([1.5, -2.0, 1e300])),
        ("b", serde_json::json!([0, 1, 1, 0])),
        ("i", serde_json::json!([-1, 127, -128])),
        ("z", serde_json::json!([9])),
    ] {
        let (code, _, e) = run(&["convert", &format!("{f}.npy"), &format!("{f}.tet")]);
        assert_eq!(code, 0, "{f}: {e}");
        assert_eq!(values(&d.join(format!("{f}.tet")), f)["data"], want, "{f}");
    }
    let (_, o, _) = run(&["info", "--json", "i.tet"]);
    assert!(o.contains("\"dtype\": \"i16\""), "{o}");
    // The history records the conversion.
    let (_, o, _) = run(&["info", "--json", "c.tet"]);
    assert!(o.contains("\"history_rows\": 1"), "{o}");
}

#[test]
fn refusals() {
    let d = dir();
    std::fs::write(d.join("o.npy"), npy("|O", false, &[2], &[0; 16])).unwrap();
    let (code, _, e) = run(&["convert", "o.npy", "o.tet"]);
    assert_eq!(code, 16);
    assert!(e.contains("object array"), "{e}");
    std::fs::write(d.join("c16.npy"), npy("<c16", false, &[1], &[0; 16])).unwrap();
    let (code, _, e) = run(&["convert", "c16.npy", "c16.tet"]);
    assert_eq!(code, 16);
    assert!(e.contains("no .tet equivalent"), "{e}");
    let mut short = npy("<f4", false, &[10], &[0; 40]);
    short.truncate(short.len() - 3);
    std::fs::write(d.join("short.npy"), short).unwrap();
    let (code, _, e) = run(&["convert", "short.npy", "short.tet"]);
    assert_eq!(code, 16);
    assert!(e.contains("truncated"), "{e}");
    assert!(!d.join("short.tet").exists(), "no partial output");
    let (code, _, e) = run(&["convert", "o.npy", "x.tet", "--chunk", "0,2"]);
    assert_eq!(code, 16, "{e}");
}

#[test]
fn npz_members_stored_and_deflated() {
    use std::io::Write;
    let d = dir();
    let a: Vec<u8> = (0..12).flat_map(|i| (i as u16).to_le_bytes()).collect();
    let b: Vec<u8> = (0..5)
        .flat_map(|i| (i as f64 * 0.5).to_le_bytes())
        .collect();
    let f = std::fs::File::create(d.join("arch.npz")).unwrap();
    let mut z = zip::ZipWriter::new(f);
    let stored =
        zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    let deflated = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated);
    z.start_file("alpha.npy", stored).unwrap();
    z.write_all(&npy("<u2", false, &[3, 4], &a)).unwrap();
    z.start_file("beta.npy", deflated).unwrap();
    z.write_all(&npy("<f8", false, &[5], &b)).unwrap();
    z.finish().unwrap();
    let (code, _, e) = run(&["convert", "arch.npz", "arch.tet"]);
    assert_eq!(code, 0, "{e}");
    assert_eq!(
        values(&d.join("arch.tet"), "alpha")["data"][11],
        serde_json::json!(11)
    );
    assert_eq!(
        values(&d.join("arch.tet"), "beta")["data"],
        serde_json::json!([0.0, 0.5, 1.0, 1.5, 2.0])
    );
    // One byte of the stored member's data changed: its CRC-32 no longer matches, and
    // the archive is refused (NumPy refuses it too), never converted.
    let mut bad = std::fs::read(d.join("arch.npz")).unwrap();
    // A byte inside the first (stored) member's data.
    let at = bad.windows(6).position(|w| w == b"\x93NUMPY").unwrap() + 20;
    bad[at] ^= 0x40;
    std::fs::write(d.join("bad.npz"), &bad).unwrap();
    let (code, _, e) = run(&["convert", "bad.npz", "bad.tet"]);
    assert_eq!(code, 16, "{e}");
    assert!(e.contains("CRC-32") && e.contains("damaged"), "{e}");
    assert!(!d.join("bad.tet").exists());
}

#[test]
fn export_round_trip() {
    let d = dir();
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let example = root.join("docs/examples/temperature.tet");
    let (code, _, e) = run(&[
        "export",
        example.to_str().unwrap(),
        "--dataset",
        "pressure",
        "p.npy",
        "--selection",
        r#"[{"start": 2, "stop": 6}, {"step": 4}]"#,
    ]);
    assert_eq!(code, 0, "{e}");
    let (code, _, e) = run(&["convert", "p.npy", "p.tet", "--chunk", "3,3"]);
    assert_eq!(code, 0, "{e}");
    let got = values(&d.join("p.tet"), "p");
    let (_, o, _) = common::run(
        &[
            "query",
            r#"{"dataset": "pressure", "selection": [{"start": 2, "stop": 6}, {"step": 4}]}"#,
            "-t",
            example.to_str().unwrap(),
        ],
        &d,
    );
    let want: serde_json::Value = serde_json::from_str(&String::from_utf8(o).unwrap()).unwrap();
    assert_eq!(got, want["result"]);
    assert_eq!(got["shape"], serde_json::json!([4, 4]));
}

#[test]
fn default_chunks_are_about_a_mebibyte() {
    use tet_host::tet::npy::default_chunk;
    assert_eq!(default_chunk(&[16384, 32768], 4), vec![8, 32768]);
    assert_eq!(default_chunk(&[10, 10], 8), vec![10, 10]);
    assert_eq!(default_chunk(&[4, 1 << 20], 4), vec![1, 262144]);
}

/// A plain `verify` decodes the first 128 chunks only and says so after `clean`; `--deep`
/// decodes them all and says plain `clean`; `--json` carries the counts.
#[test]
fn quick_verify_says_it_was_partial() {
    let d = dir();
    // 200 chunks of 4 int32 values each.
    let data: Vec<u8> = (0..800i32).flat_map(|v| v.to_le_bytes()).collect();
    std::fs::write(d.join("many.npy"), npy("<i4", false, &[800], &data)).unwrap();
    let (code, _, e) = run(&["convert", "many.npy", "many.tet", "--chunk", "4"]);
    assert_eq!(code, 0, "{e}");
    let (code, o, _) = run(&["verify", "many.tet"]);
    assert_eq!(code, 0);
    assert_eq!(
        o.trim_end(),
        "many.tet: clean (quick: 128 of 200 chunks decoded; --deep decodes all)"
    );
    let (code, o, _) = run(&["verify", "--deep", "many.tet"]);
    assert_eq!(code, 0);
    assert_eq!(o.trim_end(), "many.tet: clean");
    let (_, o, _) = run(&["verify", "--json", "many.tet"]);
    let v: serde_json::Value = serde_json::from_str(&o).unwrap();
    assert_eq!(
        (v["chunks"].as_u64(), v["chunks_decoded"].as_u64()),
        (Some(200), Some(128))
    );
}

/// The NumPy header of a `.npy` file, and its data.
fn npy_parts(path: &Path) -> (String, Vec<u8>) {
    let b = std::fs::read(path).unwrap();
    let hlen = u16::from_le_bytes([b[8], b[9]]) as usize;
    let header = String::from_utf8(b[10..10 + hlen].to_vec()).unwrap();
    (header.trim_end().to_string(), b[10 + hlen..].to_vec())
}

fn zip_of(path: &Path, members: &[(&str, Vec<u8>)]) {
    use std::io::Write;
    let mut z = zip::ZipWriter::new(std::fs::File::create(path).unwrap());
    for (name, data) in members {
        z.start_file(*name, zip::write::SimpleFileOptions::default())
            .unwrap();
        z.write_all(data).unwrap();
    }
    z.finish().unwrap();
}

#[test]
fn names_are_refused_when_empty_repeated_or_given_for_an_npz() {
    let d = dir();
    let one = npy("<u2", false, &[2], &[1, 0, 2, 0]);
    std::fs::write(d.join("n.npy"), &one).unwrap();
    zip_of(
        &d.join("n.npz"),
        &[("a.npy", one.clone()), ("b.npy", one.clone())],
    );
    let (code, _, e) = run(&["convert", "n.npz", "n.tet", "--name", "x"]);
    assert_eq!(code, 16);
    assert_eq!(
        e,
        "tet-host: n.npz: --name names the dataset of a .npy input; an .npz's datasets are \
         named after its members\n"
    );
    let (code, _, e) = run(&["convert", "n.npy", "n.tet", "--name", ""]);
    assert_eq!(code, 16);
    assert_eq!(e, "tet-host: --name is empty: a dataset needs a name\n");
    // Two members that give one dataset name: refused by the writer, naming both.
    zip_of(
        &d.join("dup.npz"),
        &[("a.npy", one.clone()), ("a", one.clone())],
    );
    let (code, _, e) = run(&["convert", "dup.npz", "dup.tet"]);
    assert_eq!(code, 16);
    assert_eq!(
        e,
        "tet-host: dup.npz: dataset 1: the name \"a\" is already dataset 0's (dataset names \
         must be unique: a reader finds only the first by name)\n"
    );
    zip_of(&d.join("empty.npz"), &[(".npy", one.clone())]);
    let (code, _, e) = run(&["convert", "empty.npz", "empty.tet"]);
    assert_eq!(code, 16);
    assert_eq!(
        e,
        "tet-host: empty.npz: archive member 0 (\".npy\") gives an empty dataset name\n"
    );
    for f in ["n.tet", "dup.tet", "empty.tet"] {
        assert!(!d.join(f).exists(), "{f}");
    }
}

#[test]
fn a_warning_when_the_index_outweighs_the_data() {
    let d = dir();
    let data: Vec<u8> = (0..800i32).flat_map(|v| v.to_le_bytes()).collect();
    std::fs::write(d.join("w.npy"), npy("<i4", false, &[800], &data)).unwrap();
    let (code, _, e) = run(&["convert", "w.npy", "w4.tet", "--chunk", "4"]);
    assert_eq!(code, 0);
    assert_eq!(
        e,
        "tet-host: w4.tet: warning: the index (24112 bytes for 200 chunks) is 753% of the \
         data (3200 bytes); dataset 'w' has chunks of 4 i32 (16 bytes, under 4 KiB): larger \
         chunks (--chunk; the default is about 1 MiB per chunk) make the file smaller and its \
         reads faster\n"
    );
    // Chunks of 4 KiB and more, with the index under 10 % of the data: no warning; nor for
    // a dataset of one chunk, which no --chunk can improve.
    let big: Vec<u8> = (0..8192i32).flat_map(|v| v.to_le_bytes()).collect();
    std::fs::write(d.join("big.npy"), npy("<i4", false, &[8192], &big)).unwrap();
    for args in [
        ["convert", "big.npy", "big.tet", "--chunk", "1024"],
        ["convert", "w.npy", "w1.tet", "--chunk", "800"],
    ] {
        let (code, _, e) = run(&args);
        assert_eq!((code, e.as_str()), (0, ""), "{args:?}");
    }
    let (_, _, e) = run(&["convert", "big.npy", "big2.tet", "--chunk", "512"]);
    assert!(
        e.contains("dataset 'big' has chunks of 512 i32 (2048 bytes, under 4 KiB)"),
        "{e}"
    );
}

#[test]
fn export_gives_back_bool_int8_and_0d() {
    let d = dir();
    std::fs::write(d.join("rb.npy"), npy("|b1", false, &[2, 2], &[0, 1, 1, 0])).unwrap();
    std::fs::write(
        d.join("ri.npy"),
        npy("|i1", false, &[3], &[0xff, 0x7f, 0x80]),
    )
    .unwrap();
    std::fs::write(
        d.join("rz.npy"),
        npy("<f8", false, &[], &2.5f64.to_le_bytes()),
    )
    .unwrap();
    for f in ["rb", "ri", "rz"] {
        let (code, _, e) = run(&["convert", &format!("{f}.npy"), &format!("{f}.tet")]);
        assert_eq!(code, 0, "{e}");
        let (code, _, e) = run(&[
            "export",
            &format!("{f}.tet"),
            "--dataset",
            f,
            &format!("{f}.out.npy"),
        ]);
        assert_eq!((code, e.as_str()), (0, ""), "{f}");
    }
    let (h, b) = npy_parts(&d.join("rb.out.npy"));
    assert_eq!(
        h,
        "{'descr': '|b1', 'fortran_order': False, 'shape': (2, 2), }"
    );
    assert_eq!(b, [0, 1, 1, 0]);
    let (h, b) = npy_parts(&d.join("ri.out.npy"));
    assert_eq!(
        h,
        "{'descr': '|i1', 'fortran_order': False, 'shape': (3,), }"
    );
    assert_eq!(b, [0xff, 0x7f, 0x80]);
    let (h, b) = npy_parts(&d.join("rz.out.npy"));
    assert_eq!(h, "{'descr': '<f8', 'fortran_order': False, 'shape': (), }");
    assert_eq!(b, 2.5f64.to_le_bytes());
    // A selection of a bool dataset stays bool; an empty one of a 0-d cannot be 0-d.
    let (code, _, _) = run(&[
        "export",
        "rb.tet",
        "--dataset",
        "rb",
        "rb1.npy",
        "--selection",
        r#"[{"start": 1}]"#,
    ]);
    assert_eq!(code, 0);
    assert_eq!(
        npy_parts(&d.join("rb1.npy")),
        (
            "{'descr': '|b1', 'fortran_order': False, 'shape': (1, 2), }".to_string(),
            vec![1, 0]
        )
    );
    let (code, _, e) = run(&[
        "export",
        "rz.tet",
        "--dataset",
        "rz",
        "rz0.npy",
        "--selection",
        r#"[{"stop": 0}]"#,
    ]);
    assert_eq!(code, 0);
    assert_eq!(
        e,
        "tet-host: rz.tet: warning: the source was 0-d, but this selection has shape [0]: \
         written with that shape\n"
    );
    // A file without the record (the example) exports as stored, silently.
    let (code, _, e) = run(&[
        "export",
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../docs/examples/temperature.tet")
            .to_str()
            .unwrap(),
        "--dataset",
        "station_id",
        "s.npy",
    ]);
    assert_eq!((code, e.as_str()), (0, ""));
    assert!(npy_parts(&d.join("s.npy")).0.contains("'<u2'"));
}

#[test]
fn restore_says_why_it_cannot() {
    use tet_core::tet::DType;
    use tet_host::tet::export::{restore, NumpySource};
    let int8 = NumpySource {
        dtype: Some("|i1".into()),
        scalar: false,
    };
    let wide: Vec<u8> = [5i16, 300].iter().flat_map(|v| v.to_le_bytes()).collect();
    let ((descr, shape, bytes), why) = restore(DType::I16, vec![2], wide.clone(), &int8);
    assert_eq!((descr.as_str(), shape, bytes), ("<i2", vec![2], wide));
    assert_eq!(
        why.as_deref(),
        Some("the source was int8, but element 1 is 300, outside int8: written as i16")
    );
    let boolean = NumpySource {
        dtype: Some("|b1".into()),
        scalar: false,
    };
    let (_, why) = restore(DType::U8, vec![2], vec![1, 2], &boolean);
    assert_eq!(
        why.as_deref(),
        Some("the source was bool, but element 1 is 2, not 0 or 1: written as u8")
    );
    let (_, why) = restore(DType::F32, vec![1], vec![0; 4], &boolean);
    assert_eq!(
        why.as_deref(),
        Some("the source was |b1, but the dataset is f32: written as stored")
    );
}

/// The stored bytes of every chunk of `ds`, in grid order.
fn stored(bytes: &[u8], ds: &str) -> Vec<Vec<u8>> {
    let f = tet_core::tet::TetFile::open(bytes).unwrap();
    let d = f.dataset(ds).unwrap();
    let t = tet_alloc::tet::scan::ChunkTable::new(f).unwrap();
    let mut out: Vec<(Vec<u64>, Vec<u8>)> = (0..t.rows())
        .filter_map(|r| t.chunk(r))
        .filter(|c| c.dataset == d.id())
        .map(|c| (c.coords.as_slice().to_vec(), c.payload.to_vec()))
        .collect();
    out.sort();
    out.into_iter().map(|(_, b)| b).collect()
}

#[test]
fn append_adds_datasets_and_keeps_every_stored_byte() {
    let d = dir().join("append");
    std::fs::create_dir_all(&d).unwrap();
    let t: Vec<u8> = (0..2 * 300 * 40)
        .flat_map(|i| (i as f32).to_le_bytes())
        .collect();
    std::fs::write(d.join("t.npy"), npy("<f4", false, &[2, 300, 40], &t)).unwrap();
    let m: Vec<u8> = (0..12u8).map(|i| i % 2).collect();
    std::fs::write(d.join("mask.npy"), npy("|u1", false, &[3, 4], &m)).unwrap();
    let path = |n: &str| d.join(n).to_str().unwrap().to_string();
    let (code, _, e) = run(&[
        "convert",
        &path("t.npy"),
        &path("a.tet"),
        "--chunk",
        "1,100,40",
        "--dims",
        "time,y,x",
        "--attr",
        "units=K",
    ]);
    assert_eq!(code, 0, "{e}");
    let before = std::fs::read(d.join("a.tet")).unwrap();
    let (code, _, e) = run(&["convert", &path("mask.npy"), &path("a.tet"), "--append"]);
    assert_eq!(code, 0, "{e}");
    let after = std::fs::read(d.join("a.tet")).unwrap();
    // Every chunk of the old dataset has the same stored bytes; the new one reads back.
    assert_eq!(stored(&before, "t"), stored(&after, "t"));
    assert_eq!(stored(&before, "t").len(), 6);
    assert_eq!(
        values(&d.join("a.tet"), "mask")["data"],
        serde_json::json!(m.iter().map(|v| *v as u64).collect::<Vec<_>>())
    );
    let (code, o, _) = run(&["verify", "--deep", &path("a.tet")]);
    assert_eq!(code, 0, "{o}");
    // History and metadata kept, one row added.
    let (_, o, _) = run(&["info", "--json", "--history", "--metadata", &path("a.tet")]);
    let v: serde_json::Value = serde_json::from_str(&o).unwrap();
    let ops: Vec<&str> = v["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["op"].as_str().unwrap())
        .collect();
    assert_eq!(ops, ["convert", "append"], "{v}");
    let t = &v["metadata"]["datasets"][0];
    assert_eq!(
        (&t["dataset"], &t["dims"]),
        (
            &serde_json::json!("t"),
            &serde_json::json!(["time", "y", "x"])
        ),
        "{v}"
    );
    assert_eq!(t["attrs"]["units"], "K", "{v}");
    // A name the file has is refused, and the file is left as it was.
    let (code, _, e) = run(&["convert", &path("mask.npy"), &path("a.tet"), "--append"]);
    assert_eq!(code, 16, "{e}");
    assert!(e.contains("already has a dataset 'mask'"), "{e}");
    assert_eq!(std::fs::read(d.join("a.tet")).unwrap(), after);
    // Appending to a file that is not there, or with --force: refused.
    let (code, _, e) = run(&["convert", &path("mask.npy"), &path("none.tet"), "--append"]);
    assert_eq!(code, 8, "{e}");
    assert!(!d.join("none.tet").exists());
    let (code, _, _) = run(&[
        "convert",
        &path("mask.npy"),
        &path("a.tet"),
        "--append",
        "--force",
    ]);
    assert_eq!(code, 16);
    // A damaged chunk is never given a fresh checksum: the append is refused.
    let mut bad = after.clone();
    let f = tet_core::tet::TetFile::open(&after).unwrap();
    let r = f.rows()[0];
    bad[r.payload_offset.get() as usize + 3] ^= 1;
    std::fs::write(d.join("bad.tet"), &bad).unwrap();
    std::fs::write(d.join("q.npy"), npy("<i8", false, &[2], &[0u8; 16])).unwrap();
    let (code, _, e) = run(&["convert", &path("q.npy"), &path("bad.tet"), "--append"]);
    assert_eq!(code, 4, "{e}");
    assert!(e.contains("--zero-bad-chunks"), "{e}");
    assert_eq!(std::fs::read(d.join("bad.tet")).unwrap(), bad);
}
