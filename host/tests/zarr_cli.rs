//! `tet-host convert STORE.zarr` and `export OUT.zarr`: the fixture store zarr-python
//! wrote (`tests/interop/make_zarr_fixtures.py`: every dtype, partial and missing chunks,
//! every default codec of zarrs, sharding, big-endian data, groups, dimension names,
//! attributes) converted and compared with zarr-python's values; a round trip through
//! our own export; and refusals of bad stores.

#![allow(clippy::restriction, reason = "tests and benches fail by panicking")]

use std::path::{Path, PathBuf};

mod common;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/zarr")
}

fn dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tet-zarr-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn run(d: &Path, args: &[&str]) -> (i32, String) {
    let (c, _, e) = common::run(args, d);
    (c, e)
}

fn expected() -> serde_json::Map<String, serde_json::Value> {
    let text = std::fs::read_to_string(fixtures().join("expected.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The descr and data of an `.npy` file.
fn npy(path: &Path) -> (String, Vec<u8>) {
    let b = std::fs::read(path).unwrap();
    let len = u16::from_le_bytes([b[8], b[9]]) as usize;
    let header = String::from_utf8_lossy(&b[10..10 + len]).to_string();
    let descr = header
        .split("'descr': '")
        .nth(1)
        .unwrap()
        .split('\'')
        .next()
        .unwrap();
    (descr.to_string(), b[10 + len..].to_vec())
}

/// Every array of `store` converted to `tet` and exported as .npy equals `expected`.
fn check_values(d: &Path, tet: &Path) {
    for (name, e) in expected() {
        let out = d.join(format!("{}.npy", name.replace('/', "_")));
        let (code, err) = run(
            d,
            &[
                "export",
                tet.to_str().unwrap(),
                "--dataset",
                &name,
                out.to_str().unwrap(),
            ],
        );
        assert_eq!(code, 0, "{name}: {err}");
        let (descr, data) = npy(&out);
        assert_eq!(descr, e["descr"].as_str().unwrap(), "{name}");
        assert_eq!(hex(&data), e["hex"].as_str().unwrap(), "{name}: values");
    }
}

#[test]
fn zarr_python_store_converts_with_values_names_and_attributes() {
    let d = dir("convert");
    let tet = d.join("f.tet");
    let store = fixtures().join("fixture.zarr");
    let (code, err) = run(
        &d,
        &["convert", store.to_str().unwrap(), tet.to_str().unwrap()],
    );
    assert_eq!(code, 0, "{err}");
    check_values(&d, &tet);
    // Dimension names and attributes in the footer metadata.
    let (c, o, e) = common::run(&["info", "--metadata", "--json", tet.to_str().unwrap()], &d);
    assert_eq!(c, 0, "{e}");
    let info = String::from_utf8(o).unwrap();
    for want in [
        "\"lat\"",
        "\"lon\"",
        "air temperature",
        "zarr_fill_value",
        "NaN",
    ] {
        assert!(info.contains(want), "{want} not in {info}");
    }
    // The Zarr fill_value is recorded under its own key, never as _FillValue, unless
    // the store's attributes carry one ("missing" does).
    let (_, o, _) = common::run(&["info", "--metadata", tet.to_str().unwrap()], &d);
    let text = String::from_utf8(o).unwrap();
    assert_eq!(text.matches("attr:   _FillValue = ").count(), 1, "{text}");
}

#[test]
fn round_trip_through_our_export_equals_the_source() {
    let d = dir("round");
    let tet = d.join("a.tet");
    let store = fixtures().join("fixture.zarr");
    assert_eq!(
        run(
            &d,
            &["convert", store.to_str().unwrap(), tet.to_str().unwrap()]
        )
        .0,
        0
    );
    let out = d.join("out.zarr");
    let (code, err) = run(
        &d,
        &["export", tet.to_str().unwrap(), out.to_str().unwrap()],
    );
    assert_eq!(code, 0, "{err}");
    for (name, e) in expected() {
        let meta: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(out.join(&name).join("zarr.json")).unwrap(),
        )
        .unwrap();
        let src: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(store.join(&name).join("zarr.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(meta["data_type"], src["data_type"], "{name}");
        assert_eq!(meta["shape"], src["shape"], "{name}");
        assert_eq!(meta["fill_value"], e["fill_value"], "{name}");
        assert_eq!(meta["attributes"], e["attrs"], "{name}");
        if e["dims"].is_null() {
            assert!(
                meta.get("dimension_names").is_none()
                    || meta["dimension_names"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .all(|v| v.is_null()),
                "{name}"
            );
        } else {
            assert_eq!(meta["dimension_names"], e["dims"], "{name}");
        }
    }
    // zstd datasets stay zstd.
    let t = std::fs::read_to_string(out.join("temperature/zarr.json")).unwrap();
    assert!(t.contains("\"zstd\""), "{t}");
    // And the exported store converts back to the same values.
    let tet2 = d.join("b.tet");
    let (code, err) = run(
        &d,
        &["convert", out.to_str().unwrap(), tet2.to_str().unwrap()],
    );
    assert_eq!(code, 0, "{err}");
    check_values(&d, &tet2);
    // An existing output needs --force; --force replaces a store, not another directory.
    let (code, err) = run(
        &d,
        &["export", tet.to_str().unwrap(), out.to_str().unwrap()],
    );
    assert_eq!(code, 16, "{err}");
    assert!(err.contains("--force"), "{err}");
    let (code, err) = run(
        &d,
        &[
            "export",
            tet.to_str().unwrap(),
            out.to_str().unwrap(),
            "--force",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let other = d.join("plain.zarr");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(other.join("keep.txt"), b"mine").unwrap();
    let (code, err) = run(
        &d,
        &[
            "export",
            tet.to_str().unwrap(),
            other.to_str().unwrap(),
            "--force",
        ],
    );
    assert_eq!(code, 16, "{err}");
    assert!(other.join("keep.txt").is_file());
    // One dataset, by name.
    let one = d.join("one.zarr");
    let (code, err) = run(
        &d,
        &[
            "export",
            tet.to_str().unwrap(),
            one.to_str().unwrap(),
            "--dataset",
            "small/int8",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert!(one.join("small/int8/zarr.json").is_file());
    assert!(!one.join("temperature").exists());
}

#[test]
fn array_option_and_chunk_option() {
    let d = dir("array");
    let tet = d.join("a.tet");
    let store = fixtures().join("fixture.zarr");
    let (code, err) = run(
        &d,
        &[
            "convert",
            store.to_str().unwrap(),
            tet.to_str().unwrap(),
            "--array",
            "types",
            "--chunk",
            "2",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let (_, o, _) = common::run(&["info", "--json", tet.to_str().unwrap()], &d);
    let info = String::from_utf8(o).unwrap();
    assert!(
        info.contains("types/u64") && !info.contains("temperature"),
        "{info}"
    );
    // Re-chunked (source chunks of 100, 3 and 4 read as tiles of 2): the same values.
    let e = expected();
    for name in ["types/u8", "types/u64", "types/f16"] {
        let out = d.join(format!("{}.npy", name.replace('/', "_")));
        let (code, err) = run(
            &d,
            &[
                "export",
                tet.to_str().unwrap(),
                "--dataset",
                name,
                out.to_str().unwrap(),
            ],
        );
        assert_eq!(code, 0, "{err}");
        assert_eq!(
            hex(&npy(&out).1),
            e[name]["hex"].as_str().unwrap(),
            "{name}"
        );
    }
    let (code, err) = run(
        &d,
        &[
            "convert",
            store.to_str().unwrap(),
            d.join("b.tet").to_str().unwrap(),
            "--array",
            "nope",
        ],
    );
    assert_eq!(code, 16, "{err}");
    assert!(err.contains("nope"), "{err}");
}

/// A copy of one array of the fixture as its own store, to damage.
fn copy_array(from: &str, to: &Path) {
    fn copy(a: &Path, b: &Path) {
        std::fs::create_dir_all(b).unwrap();
        for e in std::fs::read_dir(a).unwrap() {
            let e = e.unwrap();
            if e.file_type().unwrap().is_dir() {
                copy(&e.path(), &b.join(e.file_name()));
            } else {
                std::fs::copy(e.path(), b.join(e.file_name())).unwrap();
            }
        }
    }
    copy(&fixtures().join("fixture.zarr").join(from), to);
}

#[test]
fn bad_stores_are_refused_with_the_file_and_field() {
    let d = dir("bad");
    let out = d.join("o.tet");
    let o = out.to_str().unwrap();
    // Corrupt zarr.json.
    let s = d.join("corrupt.zarr");
    copy_array("big_endian", &s);
    std::fs::write(
        s.join("zarr.json"),
        b"{\"zarr_format\": 3, \"node_type\": \"array\", ",
    )
    .unwrap();
    let (code, err) = run(&d, &["convert", s.to_str().unwrap(), o]);
    assert_eq!(code, 4, "{err}");
    assert!(err.contains("zarr.json") && err.contains("JSON"), "{err}");
    // A chunk of the wrong size (big_endian has no compressor).
    let s = d.join("short.zarr");
    copy_array("big_endian", &s);
    let c = s.join("c/0/0");
    let b = std::fs::read(&c).unwrap();
    std::fs::write(&c, &b[..b.len() - 3]).unwrap();
    let (code, err) = run(&d, &["convert", s.to_str().unwrap(), o]);
    assert_eq!(code, 4, "{err}");
    assert!(
        err.contains("short.zarr") && err.contains("[0, 0]"),
        "{err}"
    );
    assert!(!out.exists());
    // A chunk whose crc32c does not match (transposed is stored with crc32c).
    let s = d.join("crc.zarr");
    copy_array("nested/deeper/transposed", &s);
    let c = s.join("c/0/0/0");
    let mut b = std::fs::read(&c).unwrap();
    b[0] ^= 0x40;
    std::fs::write(&c, &b).unwrap();
    let (code, err) = run(&d, &["convert", s.to_str().unwrap(), o]);
    assert_eq!(code, 4, "{err}");
    assert!(
        err.contains("crc.zarr") && err.contains("[0, 0, 0]"),
        "{err}"
    );
    // A hostile shape: refused before anything is allocated.
    for (field, value, what) in [
        (
            "shape",
            "[18446744073709551615, 18446744073709551615]",
            "chunks",
        ),
        ("chunk_shape", "[4294967296, 4294967296]", "limit"),
    ] {
        let s = d.join(format!("hostile-{field}.zarr"));
        copy_array("big_endian", &s);
        let m = std::fs::read_to_string(s.join("zarr.json")).unwrap();
        let mut v: serde_json::Value = serde_json::from_str(&m).unwrap();
        if field == "shape" {
            v["shape"] = serde_json::from_str(value).unwrap();
        } else {
            v["chunk_grid"]["configuration"]["chunk_shape"] = serde_json::from_str(value).unwrap();
        }
        std::fs::write(s.join("zarr.json"), v.to_string()).unwrap();
        let (code, err) = run(&d, &["convert", s.to_str().unwrap(), o]);
        assert_eq!(code, 16, "{field}: {err}");
        assert!(err.contains(what), "{field}: {err}");
    }
    // A type .tet cannot hold, and a missing field.
    let s = d.join("complex.zarr");
    copy_array("big_endian", &s);
    let m = std::fs::read_to_string(s.join("zarr.json")).unwrap();
    std::fs::write(
        s.join("zarr.json"),
        m.replace("\"uint16\"", "\"complex64\""),
    )
    .unwrap();
    let (code, err) = run(&d, &["convert", s.to_str().unwrap(), o]);
    assert_eq!(code, 16, "{err}");
    assert!(
        err.contains("complex64") && err.contains("data_type"),
        "{err}"
    );
    let mut v: serde_json::Value = serde_json::from_str(&m).unwrap();
    v.as_object_mut().unwrap().remove("fill_value");
    std::fs::write(s.join("zarr.json"), v.to_string()).unwrap();
    let (code, err) = run(&d, &["convert", s.to_str().unwrap(), o]);
    assert_eq!(code, 4, "{err}");
    assert!(err.contains("fill_value"), "{err}");
    // NumPy-only options are refused for a store, and .npy export still needs a dataset.
    let good = fixtures().join("fixture.zarr");
    let (code, err) = run(
        &d,
        &["convert", good.to_str().unwrap(), o, "--coord", "x=a.npy"],
    );
    assert_eq!(code, 16, "{err}");
    let (code, err) = run(&d, &["export", "x.tet", "x.npy"]);
    assert_eq!(code, 16, "{err}");
    assert!(err.contains("--dataset"), "{err}");
    // An existing output needs --force; the store is never its own output.
    std::fs::write(&out, b"x").unwrap();
    let (code, err) = run(&d, &["convert", good.to_str().unwrap(), o]);
    assert_eq!(code, 16, "{err}");
    assert_eq!(std::fs::read(&out).unwrap(), b"x");
}
