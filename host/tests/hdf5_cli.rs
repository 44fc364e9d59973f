//! `convert` of HDF5 files written by libhdf5 itself (through `hdf5-metno`): values,
//! types, groups, chunking and attributes compared with what was written; the refusals
//! (a string dataset, a wrong `--chunk`, an existing output, a cut file) and the options
//! for other inputs. Built only with the `hdf5` feature (the test command runs it); files
//! written by h5py and netCDF4-python are checked by tests/interop/check_hdf5_netcdf.py.
#![cfg(feature = "hdf5")]
#![allow(clippy::restriction, reason = "tests and benches fail by panicking")]

use std::path::{Path, PathBuf};

use hdf5_metno as h5;

mod common;

/// libhdf5 is serialised by the crate, but the files are written in turn anyway.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("tet-hdf5-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn run(args: &[&str]) -> (i32, String, String) {
    let (c, o, e) = common::run(args, &dir());
    (c, String::from_utf8(o).unwrap(), e)
}

/// The element bytes of an exported `.npy` (version 1 header).
fn npy_data(path: &Path) -> Vec<u8> {
    let b = std::fs::read(path).unwrap();
    let len = usize::from(u16::from_le_bytes([b[8], b[9]]));
    b[10 + len..].to_vec()
}

fn export(file: &str, ds: &str) -> Vec<u8> {
    let out = dir().join(format!("{}.npy", ds.replace('/', "_")));
    let (c, _, e) = run(&[
        "export",
        file,
        "--dataset",
        ds,
        out.to_str().unwrap(),
        "--force",
    ]);
    assert_eq!(c, 0, "{e}");
    npy_data(&out)
}

fn text(s: &str) -> h5::types::VarLenUnicode {
    s.parse().unwrap()
}

/// A file with a chunked u16 grid, a contiguous f64 vector with attributes, an int8
/// dataset in a nested group and a string dataset.
fn write(path: &Path) {
    let f = h5::File::create(path).unwrap();
    let grid = ndarray::Array2::<u16>::from_shape_fn((5, 7), |(i, j)| {
        u16::try_from(i * 7 + j).unwrap() * 3
    });
    f.new_dataset_builder()
        .with_data(&grid)
        .chunk((2, 3))
        .create("grid")
        .unwrap();
    let v = f
        .new_dataset_builder()
        .with_data(&ndarray::arr1(&[0.5f64, -1.25, 1e300]))
        .create("v")
        .unwrap();
    v.new_attr::<h5::types::VarLenUnicode>()
        .shape(())
        .create("units")
        .unwrap()
        .write_scalar(&text("m s-1"))
        .unwrap();
    v.new_attr::<f32>()
        .shape(())
        .create("scale")
        .unwrap()
        .write_scalar(&0.01f32)
        .unwrap();
    v.new_attr::<i32>()
        .shape(3)
        .create("levels")
        .unwrap()
        .write_raw(&[1, 2, 3])
        .unwrap();
    f.new_attr::<h5::types::VarLenUnicode>()
        .shape(())
        .create("title")
        .unwrap()
        .write_scalar(&text("an HDF5 test file"))
        .unwrap();
    let a = f.create_group("a").unwrap();
    a.new_attr::<i32>()
        .shape(2)
        .create("levels")
        .unwrap()
        .write_raw(&[7, 8])
        .unwrap();
    let g = a.create_group("b").unwrap();
    g.new_dataset_builder()
        .with_data(&ndarray::arr1(&[-3i8, 4, -128]))
        .create("small")
        .unwrap();
    f.new_dataset_builder()
        .with_data(&ndarray::arr1(&[text("x"), text("yz")]))
        .create("names")
        .unwrap();
}

#[test]
fn an_hdf5_file_converts_with_its_types_groups_chunks_and_attributes() {
    let _g = serial();
    let d = dir();
    let src = d.join("lib.h5");
    write(&src);
    let s = src.to_str().unwrap();
    let out = d.join("lib.tet");
    let o = out.to_str().unwrap();
    // The string dataset is refused by name, then skipped and listed.
    let (c, _, e) = run(&["convert", s, o]);
    assert_eq!(c, 16, "{e}");
    assert!(e.contains("dataset 'names' is of string type"), "{e}");
    assert!(!out.exists());
    let (c, _, e) = run(&["convert", s, o, "--skip-unsupported"]);
    assert_eq!(c, 0, "{e}");
    assert!(e.contains("skipped: ") && e.contains("'names'"), "{e}");
    assert!(!e.contains("give --skip-unsupported"), "{e}");
    // Values, as little-endian .tet elements (int8 back as int8 through export).
    let grid: Vec<u8> = (0u16..35).flat_map(|k| (k * 3).to_le_bytes()).collect();
    assert_eq!(export(o, "grid"), grid);
    let v: Vec<u8> = [0.5f64, -1.25, 1e300]
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .collect();
    assert_eq!(export(o, "v"), v);
    assert_eq!(export(o, "a/b/small"), vec![0xfd, 4, 0x80]);
    // Types, chunking, attributes and the history row.
    let (c, info, e) = run(&["info", "--json", "--metadata", "--history", o]);
    assert_eq!(c, 0, "{e}");
    let j: serde_json::Value = serde_json::from_str(&info).unwrap();
    let ds = |n: &str| {
        j["datasets"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["name"] == n)
            .unwrap_or_else(|| panic!("{n} in {info}"))
            .clone()
    };
    assert_eq!(ds("grid")["dtype"], "u16");
    assert_eq!(ds("grid")["chunk_shape"], serde_json::json!([2, 3]));
    assert_eq!(ds("a/b/small")["dtype"], "i16");
    let text = info.replace(' ', "");
    assert!(text.contains(r#""units":"ms-1""#), "{info}");
    assert!(text.contains(r#""scale":"0.01""#), "{info}");
    assert!(text.contains(r#""levels":"[1,2,3]""#), "{info}");
    assert!(text.contains(r#""numpy_dtype":"|i1""#), "{info}");
    assert!(text.contains(r#""from":"hdf5""#), "{info}");
    assert!(text.contains(r#""skipped":"1""#), "{info}");
    // The root's and the groups' attributes (tet_groups).
    assert_eq!(
        j["metadata"]["groups"],
        serde_json::json!([
            {"group": "/", "attrs": {"title": "an HDF5 test file"}},
            {"group": "a", "attrs": {"levels": "[7, 8]"}},
        ]),
        "{info}"
    );
}

#[test]
fn bad_hdf5_input_and_options_are_refused() {
    let _g = serial();
    let d = dir();
    let src = d.join("bad.h5");
    write(&src);
    let s = src.to_str().unwrap();
    let out = d.join("bad.tet");
    let o = out.to_str().unwrap();
    // A --chunk goes to the datasets of its rank (the 1-D ones keep theirs); one that
    // fits none is refused.
    let (c, _, e) = run(&["convert", s, o, "--skip-unsupported", "--chunk", "2,2"]);
    assert_eq!(c, 0, "{e}");
    let (_, info, _) = run(&["info", "--json", o]);
    let j: serde_json::Value = serde_json::from_str(&info).unwrap();
    assert_eq!(j["datasets"][0]["name"], "a/b/small", "{info}");
    assert_eq!(
        j["datasets"][0]["chunk_shape"],
        serde_json::json!([3]),
        "{info}"
    );
    assert_eq!(
        j["datasets"][1]["chunk_shape"],
        serde_json::json!([2, 2]),
        "{info}"
    );
    let (c, _, e) = run(&[
        "convert",
        s,
        o,
        "--skip-unsupported",
        "--chunk",
        "4,4,4",
        "--force",
    ]);
    assert_eq!(c, 16, "{e}");
    assert!(
        e.contains("--chunk has 3 axes, and none of the datasets has 3"),
        "{e}"
    );
    std::fs::remove_file(&out).unwrap();
    // Options of other inputs.
    for extra in [["--name", "x"], ["--labels", "x=a,b"]] {
        let (c, _, e) = run(&["convert", s, o, extra[0], extra[1]]);
        assert_eq!(c, 16, "{e}");
        assert!(e.contains("are for .npy/.npz inputs"), "{e}");
    }
    // An existing output is kept without --force.
    std::fs::write(&out, b"mine").unwrap();
    let (c, _, e) = run(&["convert", s, o, "--skip-unsupported"]);
    assert_ne!(c, 0, "{e}");
    assert_eq!(std::fs::read(&out).unwrap(), b"mine");
    // A file cut short is the file's damage, and leaves no output.
    let cut = d.join("cut.h5");
    let bytes = std::fs::read(&src).unwrap();
    std::fs::write(&cut, &bytes[..bytes.len() / 3]).unwrap();
    let cut_out = d.join("cut.tet");
    let (c, _, e) = run(&["convert", cut.to_str().unwrap(), cut_out.to_str().unwrap()]);
    assert_eq!(c, 4, "{e}");
    assert!(e.contains("cut.h5"), "{e}");
    assert!(!cut_out.exists());
    // --unpack and --skip-unsupported are for NetCDF and HDF5 inputs only.
    let npy = d.join("a.npy");
    let mut b = b"\x93NUMPY\x01\x00".to_vec();
    let header = "{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }";
    let mut h = header.to_string();
    while !(10 + h.len() + 1).is_multiple_of(64) {
        h.push(' ');
    }
    h.push('\n');
    b.extend_from_slice(&u16::try_from(h.len()).unwrap().to_le_bytes());
    b.extend_from_slice(h.as_bytes());
    b.extend_from_slice(&[1, 0, 0, 0, 2, 0, 0, 0]);
    std::fs::write(&npy, b).unwrap();
    let (c, _, e) = run(&["convert", npy.to_str().unwrap(), o, "--force", "--unpack"]);
    assert_eq!(c, 16, "{e}");
    assert!(e.contains("--unpack is for NetCDF and HDF5 files"), "{e}");
}

/// Scalar datasets (as h5py writes `np.float64(2.0)`) are stored as one element with
/// `numpy_shape = []`, keeping their attributes, and `export` gives them back 0-d; a
/// `grid_mapping` attribute names a dataset that is there.
#[test]
fn scalar_datasets_convert_and_export_as_0_d() {
    let _g = serial();
    let d = dir();
    let src = d.join("scalar.h5");
    {
        let f = h5::File::create(&src).unwrap();
        let h = f.new_dataset::<f64>().shape(()).create("height").unwrap();
        h.write_scalar(&2.0f64).unwrap();
        h.new_attr::<h5::types::VarLenUnicode>()
            .shape(())
            .create("units")
            .unwrap()
            .write_scalar(&text("m"))
            .unwrap();
        let c = f.new_dataset::<i8>().shape(()).create("crs").unwrap();
        c.write_scalar(&-5i8).unwrap();
        c.new_attr::<h5::types::VarLenUnicode>()
            .shape(())
            .create("grid_mapping_name")
            .unwrap()
            .write_scalar(&text("latitude_longitude"))
            .unwrap();
        let t = f
            .new_dataset_builder()
            .with_data(&ndarray::arr2(&[[1.5f32, 2.5], [3.5, 4.5]]))
            .create("t")
            .unwrap();
        t.new_attr::<h5::types::VarLenUnicode>()
            .shape(())
            .create("grid_mapping")
            .unwrap()
            .write_scalar(&text("crs"))
            .unwrap();
    }
    let s = src.to_str().unwrap();
    let out = d.join("scalar.tet");
    let o = out.to_str().unwrap();
    let (c, _, e) = run(&["convert", s, o, "--force"]);
    assert_eq!(c, 0, "{e}");
    let (c, v, e) = run(&["verify", o]);
    assert_eq!(c, 0, "{v}{e}");
    let (_, info, _) = run(&["info", "--json", "--metadata", o]);
    let j: serde_json::Value = serde_json::from_str(&info).unwrap();
    let ds = |n: &str| {
        j["datasets"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["name"] == n)
            .unwrap_or_else(|| panic!("{n} in {info}"))
            .clone()
    };
    assert_eq!(ds("height")["shape"], serde_json::json!([1]), "{info}");
    assert_eq!(ds("crs")["dtype"], "i16", "{info}");
    let text = info.replace(' ', "");
    assert!(text.contains(r#""source_shape":[]"#), "{info}");
    assert!(
        !text.contains("numpy_shape"),
        "bookkeeping, not an attr: {info}"
    );
    assert!(
        text.contains(r#""grid_mapping_name":"latitude_longitude""#),
        "{info}"
    );
    assert!(text.contains(r#""grid_mapping":"crs""#), "{info}");
    // export: 0-d arrays, the int8 one as int8.
    for (name, descr, bytes) in [
        ("height", "'<f8'", 2.0f64.to_le_bytes().to_vec()),
        ("crs", "'|i1'", vec![0xfb]),
    ] {
        let npy = d.join(format!("{name}.npy"));
        let (c, _, e) = run(&[
            "export",
            o,
            "--dataset",
            name,
            npy.to_str().unwrap(),
            "--force",
        ]);
        assert_eq!(c, 0, "{e}");
        let b = std::fs::read(&npy).unwrap();
        let head = String::from_utf8_lossy(&b[..100]).to_string();
        assert!(
            head.contains("'shape': ()") && head.contains(descr),
            "{head}"
        );
        assert_eq!(npy_data(&npy), bytes, "{name}");
    }
}

/// `_Unsigned = "true"` on a signed dataset (as a NetCDF-4 file read through libhdf5 can
/// carry it): the stored bits as the unsigned type, read as stored (libhdf5 would clamp a
/// negative element read as unsigned), the fill reinterpreted.
#[test]
fn unsigned_attribute_keeps_the_stored_bits() {
    let _g = serial();
    let d = dir();
    let src = d.join("unsigned.h5");
    {
        let f = h5::File::create(&src).unwrap();
        for (name, fill) in [("b", -1i64), ("s", -2)] {
            let ds = if name == "b" {
                f.new_dataset_builder()
                    .with_data(&ndarray::arr1(&[-1i8, 0, 127, -128]))
                    .create(name)
                    .unwrap()
            } else {
                f.new_dataset_builder()
                    .with_data(&ndarray::arr1(&[-2i16, 7, -32768, 32767]))
                    .create(name)
                    .unwrap()
            };
            ds.new_attr::<h5::types::VarLenUnicode>()
                .shape(())
                .create("_Unsigned")
                .unwrap()
                .write_scalar(&text("true"))
                .unwrap();
            ds.new_attr::<i64>()
                .shape(())
                .create("_FillValue")
                .unwrap()
                .write_scalar(&fill)
                .unwrap();
        }
    }
    let s = src.to_str().unwrap();
    let out = d.join("unsigned.tet");
    let o = out.to_str().unwrap();
    let (c, _, e) = run(&["convert", s, o, "--force"]);
    assert_eq!(c, 0, "{e}");
    assert_eq!(export(o, "b"), vec![255, 0, 127, 128]);
    let shorts: Vec<u8> = [65534u16, 7, 32768, 32767]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    assert_eq!(export(o, "s"), shorts);
    let (_, info, _) = run(&["info", "--json", "--metadata", "--history", o]);
    let text = info.replace(' ', "");
    assert!(text.contains(r#""_FillValue":"255""#), "{info}");
    assert!(text.contains(r#""_FillValue":"65534""#), "{info}");
    assert!(!text.contains("_Unsigned"), "{info}");
    assert!(text.contains(r#""unsigned":"2""#), "{info}");
}
