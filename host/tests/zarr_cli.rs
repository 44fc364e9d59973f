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
    // The list of JSON attributes is bookkeeping: not shown (for groups either), and
    // `export --coords` and `info --json` give the attributes back as the JSON they were.
    assert!(!text.contains("zarr_json_attrs"), "{text}");
    let j: serde_json::Value = serde_json::from_str(&info).unwrap();
    let temp = j["metadata"]["datasets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["dataset"] == "temperature")
        .unwrap();
    assert_eq!(temp["attrs"]["flags"], serde_json::json!([1, 2]), "{temp}");
    assert_eq!(temp["attrs"]["scale"], serde_json::json!(2.5), "{temp}");
    assert!(text.contains("  attr:   flags = [1,2]\n"), "{text}");
    let out = d.join("temperature-coords.npy");
    let (code, err) = run(
        &d,
        &[
            "export",
            tet.to_str().unwrap(),
            out.to_str().unwrap(),
            "--dataset",
            "temperature",
            "--coords",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let side: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(d.join("temperature-coords.npy.coords.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        side["attrs"],
        serde_json::json!({"units": "K", "long_name": "air temperature", "scale": 2.5,
            "flags": [1, 2], "zarr_fill_value": "NaN"}),
        "{side}"
    );
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

// ---- Frames copied from the store (issue 26's zstd path) ----

/// Writes `zarr.json` of an array at `dir`: `shape` in chunks of `chunk`, `codecs` as
/// given, the default `c/i/j` keys.
fn array_json(
    dir: &Path,
    data_type: &str,
    shape: &[u64],
    chunk: &[u64],
    codecs: serde_json::Value,
    fill: serde_json::Value,
) {
    std::fs::create_dir_all(dir).unwrap();
    let m = serde_json::json!({
        "zarr_format": 3,
        "node_type": "array",
        "shape": shape,
        "data_type": data_type,
        "chunk_grid": { "name": "regular", "configuration": { "chunk_shape": chunk } },
        "chunk_key_encoding": { "name": "default", "configuration": { "separator": "/" } },
        "fill_value": fill,
        "codecs": codecs,
        "attributes": {},
    });
    std::fs::write(dir.join("zarr.json"), m.to_string()).unwrap();
}

/// `bytes` (little-endian unless `single`) then `zstd` at level 3 with `checksum`.
fn zstd_codecs(single: bool, checksum: bool) -> serde_json::Value {
    let bytes = if single {
        serde_json::json!({ "name": "bytes" })
    } else {
        serde_json::json!({ "name": "bytes", "configuration": { "endian": "little" } })
    };
    serde_json::json!([bytes, { "name": "zstd", "configuration": { "level": 3, "checksum": checksum } }])
}

/// Stores `values` (native byte order, which is little-endian on the test machines) as
/// the whole array of the store at `store`, node `node`, through zarrs: every chunk is
/// written, edge chunks padded as Zarr pads them.
fn store_values(store: &Path, node: &str, shape: &[u64], values: Vec<u8>) {
    use zarrs::array::{Array, ArrayBytes, ArraySubset};
    let fs = std::sync::Arc::new(zarrs::filesystem::FilesystemStore::new(store).unwrap());
    let a = Array::open(fs, node).unwrap();
    let subset = ArraySubset::new_with_start_shape(vec![0; shape.len()], shape.to_vec()).unwrap();
    a.store_array_subset(&subset, ArrayBytes::new_flen(values))
        .unwrap();
}

/// The float32 test array: shape (10, 9) in (4, 3) chunks, so grid (3, 3) with the last
/// chunk row an edge; values `i * 0.25 - 3`.
const F_SHAPE: [u64; 2] = [10, 9];
const F_CHUNK: [u64; 2] = [4, 3];

fn f_values() -> Vec<f32> {
    (0..90u16).map(|i| f32::from(i) * 0.25 - 3.0).collect()
}

/// A group store at `store` with `f` (float32, see [`F_SHAPE`]; chunk (1, 1) removed, so
/// it reads as the fill value 7.5) and `u8` (uint8, 300 in chunks of 128: the last an
/// edge), both `bytes` + `zstd` with `checksum`.
fn checksum_store(store: &Path, checksum: bool) {
    std::fs::create_dir_all(store).unwrap();
    std::fs::write(
        store.join("zarr.json"),
        r#"{"zarr_format": 3, "node_type": "group", "attributes": {}}"#,
    )
    .unwrap();
    array_json(
        &store.join("f"),
        "float32",
        &F_SHAPE,
        &F_CHUNK,
        zstd_codecs(false, checksum),
        serde_json::json!(7.5),
    );
    let bytes: Vec<u8> = f_values().iter().flat_map(|v| v.to_ne_bytes()).collect();
    store_values(store, "/f", &F_SHAPE, bytes);
    std::fs::remove_file(store.join("f/c/1/1")).unwrap();
    array_json(
        &store.join("u8"),
        "uint8",
        &[300],
        &[128],
        zstd_codecs(true, checksum),
        serde_json::json!(0),
    );
    store_values(
        store,
        "/u8",
        &[300],
        (0..300u32).map(|i| (i % 251) as u8).collect(),
    );
}

/// The float32 values the `.tet` must hold for `f` of [`checksum_store`].
fn f_expected() -> Vec<u8> {
    f_values()
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let (r, c) = (i / 9, i % 9);
            if (4..8).contains(&r) && (3..6).contains(&c) {
                7.5f32
            } else {
                *v
            }
        })
        .flat_map(|v| v.to_le_bytes())
        .collect()
}

/// Exports dataset `name` of `tet` as `.npy` and gives its data.
fn values_of(d: &Path, tet: &Path, name: &str) -> Vec<u8> {
    let out = d.join(format!("{name}-values.npy"));
    let _ = std::fs::remove_file(&out);
    let (code, err) = run(
        d,
        &[
            "export",
            tet.to_str().unwrap(),
            "--dataset",
            name,
            out.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 0, "{name}: {err}");
    npy(&out).1
}

/// For each chunk of dataset `name` of `tet`: (grid coordinates, codec, stored bytes).
fn payloads(tet: &Path, name: &str) -> Vec<(Vec<u64>, tet_core::tet::Codec, Vec<u8>)> {
    let b = std::fs::read(tet).unwrap();
    let file = tet_core::tet::TetFile::open(&b).unwrap();
    let ds = file.dataset(name).unwrap();
    let grid: Vec<u64> = ds.grid().collect();
    (0..ds.grid_cells())
        .map(|cell| {
            let coords = tet_alloc::tet::query::position_coords(&grid, cell);
            let c = file.chunk(&ds, &coords).unwrap();
            (coords, c.codec, c.payload.to_vec())
        })
        .collect()
}

/// The stored chunk file of `coords` under array directory `array`, when there is one.
fn chunk_file(array: &Path, coords: &[u64]) -> Option<Vec<u8>> {
    let mut p = array.join("c");
    for c in coords {
        p.push(c.to_string());
    }
    std::fs::read(p).ok()
}

fn verify_deep(d: &Path, tet: &Path) {
    let (code, out, err) = common::run(&["verify", "--deep", tet.to_str().unwrap()], d);
    assert_eq!(
        code,
        0,
        "verify --deep: {}{err}",
        String::from_utf8_lossy(&out)
    );
}

/// The `frames_copied` parameter of the file's convert history row.
fn frames_copied(tet: &Path) -> Option<String> {
    let b = std::fs::read(tet).unwrap();
    let text = String::from_utf8_lossy(&b);
    let at = text.find("\"frames_copied\"")?;
    let rest = text.get(at..)?.split_once(':')?.1;
    Some(
        rest.split(['}', ','])
            .next()?
            .trim()
            .trim_matches('"')
            .to_string(),
    )
}

#[test]
fn zstd_frames_with_a_content_checksum_are_copied_unchanged() {
    let d = dir("frames");
    let store = d.join("sum.zarr");
    checksum_store(&store, true);
    let tet = d.join("sum.tet");
    let (code, err) = run(
        &d,
        &["convert", store.to_str().unwrap(), tet.to_str().unwrap()],
    );
    assert_eq!(code, 0, "{err}");
    verify_deep(&d, &tet);
    // Interior chunks are the store's chunk files byte for byte; the edge row and the
    // missing chunk are encoded here.
    let mut copied = 0;
    for (coords, codec, payload) in payloads(&tet, "f") {
        assert_eq!(codec, tet_core::tet::Codec::Zstd, "{coords:?}");
        let stored = chunk_file(&store.join("f"), &coords);
        match (coords[0] < 2, stored) {
            (true, Some(s)) => {
                assert_eq!(payload, s, "interior chunk {coords:?} is copied");
                copied += 1;
            }
            (true, None) => assert_eq!(coords, [1, 1], "the removed chunk"),
            (false, Some(s)) => assert_ne!(payload, s, "edge chunk {coords:?} is clipped"),
            (false, None) => panic!("edge chunk {coords:?} missing from the store"),
        }
    }
    assert_eq!(copied, 5);
    for (coords, _, payload) in payloads(&tet, "u8") {
        let stored = chunk_file(&store.join("u8"), &coords).unwrap();
        assert_eq!(payload == stored, coords[0] < 2, "u8 chunk {coords:?}");
    }
    assert_eq!(frames_copied(&tet).as_deref(), Some("7"));
    // Values: the source's, the fill value where the chunk is missing, edges clipped.
    assert_eq!(values_of(&d, &tet, "f"), f_expected());
    let u8s: Vec<u8> = (0..300u32).map(|i| (i % 251) as u8).collect();
    assert_eq!(values_of(&d, &tet, "u8"), u8s);
    // A --chunk other than the source's, and raw output, encode every chunk here.
    for extra in [&["--chunk", "2,3"][..], &["--codec", "raw"][..]] {
        let other = d.join("other.tet");
        let mut args = vec![
            "convert",
            store.to_str().unwrap(),
            other.to_str().unwrap(),
            "--force",
            "--array",
            "f",
        ];
        args.extend_from_slice(extra);
        let (code, err) = run(&d, &args);
        assert_eq!(code, 0, "{extra:?}: {err}");
        verify_deep(&d, &other);
        assert_eq!(frames_copied(&other), None, "{extra:?}");
        assert_eq!(values_of(&d, &other, "f"), f_expected(), "{extra:?}");
        let files: Vec<Vec<u8>> = (0..3u64)
            .flat_map(|r| (0..3u64).map(move |c| (r, c)))
            .filter_map(|(r, c)| chunk_file(&store.join("f"), &[r, c]))
            .collect();
        for (coords, _, payload) in payloads(&other, "f") {
            assert!(!files.contains(&payload), "{extra:?}: {coords:?} copied");
        }
    }
    // --chunk equal to the source's still copies.
    let same = d.join("same.tet");
    let (code, err) = run(
        &d,
        &[
            "convert",
            store.to_str().unwrap(),
            same.to_str().unwrap(),
            "--array",
            "f",
            "--chunk",
            "4,3",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(frames_copied(&same).as_deref(), Some("5"));
}

#[test]
fn zstd_frames_without_a_content_checksum_are_re_encoded() {
    let d = dir("nosum");
    let store = d.join("nosum.zarr");
    checksum_store(&store, false);
    let tet = d.join("nosum.tet");
    let (code, err) = run(
        &d,
        &["convert", store.to_str().unwrap(), tet.to_str().unwrap()],
    );
    assert_eq!(code, 0, "{err}");
    verify_deep(&d, &tet);
    assert_eq!(frames_copied(&tet), None);
    for name in ["f", "u8"] {
        for (coords, codec, payload) in payloads(&tet, name) {
            assert_eq!(codec, tet_core::tet::Codec::Zstd);
            if let Some(s) = chunk_file(&store.join(name), &coords) {
                assert_ne!(payload, s, "{name} {coords:?} re-encoded");
            }
        }
    }
    assert_eq!(values_of(&d, &tet, "f"), f_expected());
}

/// A one-array store `f` ([`F_SHAPE`], checksum on) whose chunk (0, 0) file is then
/// replaced by `frame(original)`.
fn store_with_frame(store: &Path, frame: impl Fn(Vec<u8>) -> Vec<u8>) {
    checksum_store(store, true);
    let _ = std::fs::remove_dir_all(store.join("u8"));
    let c = store.join("f/c/0/0");
    let b = std::fs::read(&c).unwrap();
    std::fs::write(&c, frame(b)).unwrap();
}

/// What a test does to a stored frame.
type Damage = Box<dyn Fn(Vec<u8>) -> Vec<u8>>;

#[test]
fn frames_failing_the_check_are_re_encoded_or_refused() {
    let d = dir("badframes");
    // The tile (0, 0): rows 0..4, columns 0..3 of the values.
    let tile: Vec<u8> = (0..4usize)
        .flat_map(|r| (0..3usize).map(move |c| r * 9 + c))
        .flat_map(|i| f_values()[i].to_le_bytes())
        .collect();
    // Frames zarrs decodes but the .tet reader would not take as they are: no content
    // size in the header, and a skippable frame after the frame. Each is re-encoded.
    let no_size = {
        let mut c = zstd::bulk::Compressor::new(3).unwrap();
        c.include_checksum(true).unwrap();
        c.include_contentsize(false).unwrap();
        c.compress(&tile).unwrap()
    };
    let cases: Vec<(&str, Damage)> = vec![
        ("no-size", Box::new(move |_| no_size.clone())),
        (
            "skippable",
            Box::new(|mut b: Vec<u8>| {
                b.extend_from_slice(&[0x50, 0x2a, 0x4d, 0x18, 2, 0, 0, 0, 0xab, 0xcd]);
                b
            }),
        ),
    ];
    for (tag, frame) in cases {
        let store = d.join(format!("{tag}.zarr"));
        store_with_frame(&store, frame);
        let tet = d.join(format!("{tag}.tet"));
        let (code, err) = run(
            &d,
            &["convert", store.to_str().unwrap(), tet.to_str().unwrap()],
        );
        assert_eq!(code, 0, "{tag}: {err}");
        verify_deep(&d, &tet);
        let stored = chunk_file(&store.join("f"), &[0, 0]).unwrap();
        let p = payloads(&tet, "f");
        assert_ne!(p[0].2, stored, "{tag}: re-encoded");
        assert_eq!(
            p[1].2,
            chunk_file(&store.join("f"), &[0, 1]).unwrap(),
            "{tag}: the next chunk is still copied"
        );
        assert_eq!(frames_copied(&tet).as_deref(), Some("4"), "{tag}");
        assert_eq!(values_of(&d, &tet, "f"), f_expected(), "{tag}");
    }
    // Frames that do not decode (a wrong content checksum, a corrupt block) are damage:
    // refused as today, naming the store and the tile, and no output is left.
    let bad: Vec<(&str, Damage)> = vec![
        (
            "checksum",
            Box::new(|mut b: Vec<u8>| {
                let n = b.len();
                b[n - 1] ^= 0x01;
                b
            }),
        ),
        (
            "block",
            Box::new(|mut b: Vec<u8>| {
                let n = b.len();
                b[n / 2] ^= 0xff;
                b[n / 2 + 1] ^= 0xff;
                b
            }),
        ),
    ];
    for (tag, frame) in bad {
        let store = d.join(format!("{tag}.zarr"));
        store_with_frame(&store, frame);
        let tet = d.join(format!("{tag}.tet"));
        let (code, err) = run(
            &d,
            &["convert", store.to_str().unwrap(), tet.to_str().unwrap()],
        );
        assert_eq!(code, 4, "{tag}: {err}");
        assert!(
            err.contains(&format!("{tag}.zarr")) && err.contains("[0, 0]"),
            "{tag}: {err}"
        );
        assert!(!tet.exists(), "{tag}");
    }
}

/// Group attributes (the store's root and its groups) are kept in the footer
/// (`tet_groups`), shown by `info --metadata`, and written back by `export`, each value
/// of the JSON type it was; `--array` keeps the root's and those of the groups it holds.
#[test]
fn group_attributes_are_kept_and_written_back() {
    let d = dir("groups");
    let store = d.join("g.zarr");
    copy_array("nested", &store.join("nested"));
    copy_array("small", &store.join("small"));
    let root = serde_json::json!({
        "zarr_format": 3,
        "node_type": "group",
        "attributes": {"title": "a store", "Conventions": "CF-1.8", "version": 3, "flags": [1, 2]},
    });
    std::fs::write(store.join("zarr.json"), root.to_string()).unwrap();
    let nested = serde_json::json!({
        "zarr_format": 3,
        "node_type": "group",
        "attributes": {"station": "x", "depth": 2.5},
    });
    std::fs::write(store.join("nested/zarr.json"), nested.to_string()).unwrap();
    let tet = d.join("g.tet");
    let (code, err) = run(
        &d,
        &["convert", store.to_str().unwrap(), tet.to_str().unwrap()],
    );
    assert_eq!(code, 0, "{err}");
    let (c, o, e) = common::run(&["verify", tet.to_str().unwrap()], &d);
    assert_eq!(c, 0, "{}{e}", String::from_utf8_lossy(&o));
    let (_, o, _) = common::run(&["info", "--metadata", tet.to_str().unwrap()], &d);
    let info = String::from_utf8(o).unwrap();
    assert!(!info.contains("zarr_json_attrs"), "{info}");
    for want in [
        "attrs of group /:\n  attr:   title = a store\n  attr:   Conventions = CF-1.8\n  attr:   version = 3\n  attr:   flags = [1,2]\n",
        "attrs of group nested:\n  attr:   station = x\n  attr:   depth = 2.5\n",
    ] {
        assert!(info.contains(want), "missing {want:?} in\n{info}");
    }
    // Back to Zarr: the same attributes, of the same JSON types.
    let back = d.join("back.zarr");
    let (code, err) = run(
        &d,
        &["export", tet.to_str().unwrap(), back.to_str().unwrap()],
    );
    assert_eq!(code, 0, "{err}");
    let read = |p: &Path| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(p.join("zarr.json")).unwrap()).unwrap()
    };
    assert_eq!(read(&back)["attributes"], root["attributes"]);
    assert_eq!(
        read(&back.join("nested"))["attributes"],
        nested["attributes"]
    );
    assert_eq!(
        read(&back.join("nested/deeper"))["attributes"],
        serde_json::json!({})
    );
    // A group of attributes only, no array in it, is kept and written back.
    let only = d.join("only.zarr");
    copy_array("small", &only.join("small"));
    std::fs::write(only.join("zarr.json"), root.to_string()).unwrap();
    std::fs::create_dir_all(only.join("about/inner")).unwrap();
    let about = serde_json::json!({
        "zarr_format": 3,
        "node_type": "group",
        "attributes": {"institution": "here", "n": 4},
    });
    std::fs::write(only.join("about/inner/zarr.json"), about.to_string()).unwrap();
    std::fs::write(
        only.join("about/zarr.json"),
        r#"{"zarr_format": 3, "node_type": "group"}"#,
    )
    .unwrap();
    let only_tet = d.join("only.tet");
    let only_back = d.join("only-back.zarr");
    for args in [
        vec![
            "convert",
            only.to_str().unwrap(),
            only_tet.to_str().unwrap(),
        ],
        vec![
            "export",
            only_tet.to_str().unwrap(),
            only_back.to_str().unwrap(),
        ],
    ] {
        let (code, err) = run(&d, &args);
        assert_eq!(code, 0, "{args:?}: {err}");
    }
    assert_eq!(
        read(&only_back.join("about/inner"))["attributes"],
        about["attributes"]
    );
    assert_eq!(read(&only_back.join("about"))["node_type"], "group");
    // `export --dataset` writes the one array and the groups on its path only.
    let one_back = d.join("one-back.zarr");
    let (code, err) = run(
        &d,
        &[
            "export",
            only_tet.to_str().unwrap(),
            one_back.to_str().unwrap(),
            "--dataset",
            "small/int8",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert!(one_back.join("small/int8/zarr.json").is_file());
    assert!(!one_back.join("about").exists());
    // --array small: the root's attributes, not the other group's.
    let one = d.join("one.tet");
    let (code, err) = run(
        &d,
        &[
            "convert",
            store.to_str().unwrap(),
            one.to_str().unwrap(),
            "--array",
            "small",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let (_, o, _) = common::run(&["info", "--metadata", "--json", one.to_str().unwrap()], &d);
    let j: serde_json::Value = serde_json::from_slice(&o).unwrap();
    let groups = &j["metadata"]["groups"];
    assert_eq!(groups.as_array().unwrap().len(), 1, "{j}");
    assert_eq!(groups[0]["group"], "/");
    assert_eq!(groups[0]["attrs"]["title"], "a store");
}

/// A store `x.zarr` in `d` whose root group holds the fixture's float32 `temperature`
/// array as `tas`.
fn tas_store(d: &Path) -> PathBuf {
    let store = d.join("x.zarr");
    copy_array("temperature", &store.join("tas"));
    std::fs::write(
        store.join("zarr.json"),
        serde_json::json!({"zarr_format": 3, "node_type": "group", "attributes": {}}).to_string(),
    )
    .unwrap();
    store
}

/// xarray keeps a float `_FillValue` of a Zarr v3 array as the base64 of its
/// little-endian f64 bytes: such a store converts with the number, and an export writes
/// the CF attributes back as xarray reads them (the base64 for a float `_FillValue`, JSON
/// numbers for the others, a `missing_value` list as one array).
#[test]
fn xarray_fill_values_convert_and_cf_attributes_export_as_xarray_reads_them() {
    let d = dir("xarray-fill");
    let store = tas_store(&d);
    let meta_path = store.join("tas/zarr.json");
    let mut meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&meta_path).unwrap()).unwrap();
    // NaN, as xarray writes a float32 variable's default fill.
    meta["attributes"] = serde_json::json!({"units": "K", "_FillValue": "AAAAAAAA+H8="});
    std::fs::write(&meta_path, meta.to_string()).unwrap();
    let tet = d.join("x.tet");
    let (code, err) = run(
        &d,
        &["convert", store.to_str().unwrap(), tet.to_str().unwrap()],
    );
    assert_eq!(code, 0, "{err}");
    let (_, o, _) = common::run(&["info", "--metadata", tet.to_str().unwrap()], &d);
    let info = String::from_utf8(o).unwrap();
    assert!(info.contains("attr:   _FillValue = nan"), "{info}");
    // Packing and a marker list set as texts, as a NetCDF source keeps them.
    let edited = d.join("edited.tet");
    let (code, err) = run(
        &d,
        &[
            "convert",
            store.to_str().unwrap(),
            edited.to_str().unwrap(),
            "--attr",
            "tas:scale_factor=0.5",
            "--attr",
            "tas:missing_value=-1",
            "--attr",
            "tas:missing_value_list=[-1, -2]",
            "--attr",
            "tas:comment=0.5",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let back = d.join("back.zarr");
    let (code, err) = run(
        &d,
        &["export", edited.to_str().unwrap(), back.to_str().unwrap()],
    );
    assert_eq!(code, 0, "{err}");
    let got: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(back.join("tas/zarr.json")).unwrap())
            .unwrap();
    let a = &got["attributes"];
    assert_eq!(a["_FillValue"], serde_json::json!("AAAAAAAA+H8="), "{a}");
    assert_eq!(a["scale_factor"], serde_json::json!(0.5), "{a}");
    assert_eq!(a["missing_value"], serde_json::json!([-1, -2]), "{a}");
    assert!(a.get("missing_value_list").is_none(), "{a}");
    // Not a CF number: the text stays a string.
    assert_eq!(a["comment"], serde_json::json!("0.5"), "{a}");
    assert_eq!(a["units"], serde_json::json!("K"), "{a}");
}

/// A float32 variable's `_FillValue` of 1e20 (as NetCDF producers write it) exports as
/// float32(1e20), the value its stored markers hold, so xarray's reader masks them; the
/// f64 1e20 would match none.
#[test]
fn a_float32_fill_value_exports_as_the_float32_value() {
    use base64::Engine as _;
    let d = dir("f32-fill");
    let store = tas_store(&d);
    let tet = d.join("x.tet");
    let (code, err) = run(
        &d,
        &[
            "convert",
            store.to_str().unwrap(),
            tet.to_str().unwrap(),
            "--attr",
            "tas:_FillValue=1e20",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let back = d.join("back.zarr");
    let (code, err) = run(
        &d,
        &["export", tet.to_str().unwrap(), back.to_str().unwrap()],
    );
    assert_eq!(code, 0, "{err}");
    let got: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(back.join("tas/zarr.json")).unwrap())
            .unwrap();
    assert_eq!(got["data_type"], "float32");
    let b64 = got["attributes"]["_FillValue"]
        .as_str()
        .unwrap()
        .to_string();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .unwrap();
    let f = f64::from_le_bytes(bytes.try_into().unwrap());
    assert_eq!(f, f64::from(1e20f32));
    assert_ne!(f, 1e20);
}

/// An output in a directory that is not there is refused before the input is read
/// (exit 8, naming the directory), and no directory is made for it.
#[test]
fn an_output_in_a_missing_directory_is_refused_first() {
    let d = dir("nodir");
    let store = d.join("s.zarr");
    copy_array("small", &store.join("small"));
    std::fs::write(
        store.join("zarr.json"),
        r#"{"zarr_format": 3, "node_type": "group", "attributes": {}}"#,
    )
    .unwrap();
    let tet = d.join("s.tet");
    let (code, err) = run(
        &d,
        &["convert", store.to_str().unwrap(), tet.to_str().unwrap()],
    );
    assert_eq!(code, 0, "{err}");
    // A damaged input: the output's directory is what is said, so nothing was read.
    std::fs::write(d.join("bad.npy"), b"\x93NUMPY not really").unwrap();
    for args in [
        vec!["export", "s.tet", "gone/out.zarr"],
        vec!["export", "s.tet", "gone/out.npy", "--dataset", "small/int8"],
        vec!["convert", "s.zarr", "gone/out.tet"],
        vec!["convert", "bad.npy", "gone/out.tet"],
    ] {
        let (code, err) = run(&d, &args);
        assert_eq!(code, 8, "{args:?}: {err}");
        assert!(
            err.contains("cannot create gone/out.") && err.contains("directory gone:"),
            "{args:?}: {err}"
        );
        assert!(!d.join("gone").exists(), "{args:?} made the directory");
    }
    // A file where the directory should be.
    std::fs::write(d.join("plain"), b"x").unwrap();
    let (code, err) = run(&d, &["export", "s.tet", "plain/out.zarr"]);
    assert_eq!(code, 8, "{err}");
    assert!(err.contains("plain is not a directory"), "{err}");
}

/// A `.npy` file of `descr` and `shape` (a NumPy tuple, `()` for 0-d) holding `data`.
fn npy_file(descr: &str, shape: &str, data: &[u8]) -> Vec<u8> {
    let mut h = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
    while (10 + h.len() + 1) % 64 != 0 {
        h.push(' ');
    }
    h.push('\n');
    let mut b = b"\x93NUMPY\x01\x00".to_vec();
    b.extend_from_slice(&(h.len() as u16).to_le_bytes());
    b.extend_from_slice(h.as_bytes());
    b.extend_from_slice(data);
    b
}

/// A 0-d array goes to Zarr 0-d (without dimension names, even when `--dims` gave it
/// one), and a store's 0-d array converts back as the one-element dataset `export`
/// gives back 0-d; the whole trip keeps the value.
#[test]
fn zero_d_arrays_go_to_zarr_and_back() {
    let d = dir("zero-d");
    std::fs::write(
        d.join("zero.npy"),
        npy_file("<f8", "()", &2.5f64.to_le_bytes()),
    )
    .unwrap();
    for args in [
        vec!["convert", "zero.npy", "z.tet", "--dims", "h"],
        vec!["export", "z.tet", "z.zarr"],
        vec!["convert", "z.zarr", "back.tet"],
        vec!["export", "back.tet", "back.npy", "--dataset", "zero"],
    ] {
        let (code, err) = run(&d, &args);
        assert_eq!(code, 0, "{args:?}: {err}");
    }
    let j: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("z.zarr/zero/zarr.json")).unwrap())
            .unwrap();
    assert_eq!(j["shape"], serde_json::json!([]), "{j}");
    assert!(j.get("dimension_names").is_none(), "{j}");
    let (descr, data) = npy(&d.join("back.npy"));
    assert_eq!(descr, "<f8");
    assert_eq!(data, 2.5f64.to_le_bytes());
    let b = std::fs::read(d.join("back.npy")).unwrap();
    assert!(String::from_utf8_lossy(&b[..80]).contains("'shape': ()"));
    let (_, o, _) = common::run(&["info", "--metadata", "back.tet"], &d);
    let o = String::from_utf8(o).unwrap();
    assert!(o.contains("  shape:  () in the source"), "{o}");
    // A shape the marker claims but export does not restore is not shown.
    std::fs::write(d.join("five.npy"), npy_file("<f4", "(5,)", &[0u8; 20])).unwrap();
    let (code, err) = run(
        &d,
        &[
            "convert",
            "five.npy",
            "five.tet",
            "--attr",
            "numpy_shape=[2,3]",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let (_, o, _) = common::run(&["info", "--metadata", "five.tet"], &d);
    assert!(!String::from_utf8(o).unwrap().contains("in the source"));
}

/// `export --force` replaces a store whole, so it refuses a store holding anything of
/// the user's, the input above all; through a symbolic link, or named `.` from inside
/// it, the store itself is replaced and nothing is left behind.
#[test]
fn export_force_never_deletes_what_is_not_the_store() {
    let d = dir("force");
    let store = d.join("s.zarr");
    copy_array("small", &store.join("small"));
    std::fs::write(
        store.join("zarr.json"),
        r#"{"zarr_format": 3, "node_type": "group", "attributes": {}}"#,
    )
    .unwrap();
    let (code, err) = run(&d, &["convert", "s.zarr", "s.tet"]);
    assert_eq!(code, 0, "{err}");
    let (code, err) = run(&d, &["export", "s.tet", "out.zarr"]);
    assert_eq!(code, 0, "{err}");
    // A note of the user's in the store: refused, kept.
    std::fs::write(d.join("out.zarr/README"), b"mine").unwrap();
    let (code, err) = run(&d, &["export", "s.tet", "out.zarr", "--force"]);
    assert_eq!(code, 16, "{err}");
    assert!(err.contains("holds") && err.contains("README"), "{err}");
    assert_eq!(std::fs::read(d.join("out.zarr/README")).unwrap(), b"mine");
    std::fs::remove_file(d.join("out.zarr/README")).unwrap();
    // The input inside the store.
    std::fs::copy(d.join("s.tet"), d.join("out.zarr/small/inside.tet")).unwrap();
    let (code, err) = run(
        &d,
        &["export", "out.zarr/small/inside.tet", "out.zarr", "--force"],
    );
    assert_eq!(code, 16, "{err}");
    assert!(err.contains("is inside"), "{err}");
    assert!(d.join("out.zarr/small/inside.tet").is_file());
    std::fs::remove_file(d.join("out.zarr/small/inside.tet")).unwrap();
    // Through a link: the store it names is replaced, the link stays a link.
    std::os::unix::fs::symlink("out.zarr", d.join("link.zarr")).unwrap();
    let (code, err) = run(&d, &["export", "s.tet", "link.zarr", "--force"]);
    assert_eq!(code, 0, "{err}");
    assert!(std::fs::symlink_metadata(d.join("link.zarr"))
        .unwrap()
        .file_type()
        .is_symlink());
    assert!(d.join("out.zarr/small/int8/zarr.json").is_file());
    // `.` from inside the store.
    let (code, _, e) = common::run(&["export", "../s.tet", ".", "--force"], &d.join("out.zarr"));
    assert_eq!(code, 0, "{e}");
    let left: Vec<String> = std::fs::read_dir(&d)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    assert!(d.join("out.zarr/zarr.json").is_file());
}
