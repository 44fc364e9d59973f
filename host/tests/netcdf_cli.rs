//! `convert` of NetCDF files written by libnetcdf itself (the library netCDF4-python and
//! every NetCDF tool wrap): NetCDF-4 (chunked, deflated, groups, an unlimited axis, CF
//! packing, a coordinate variable per axis) and classic (contiguous, big-endian on
//! disk); values, names and attributes compared with what was written; refusals.
//! Built only with the `netcdf` feature (the test command runs it).
#![cfg(feature = "netcdf")]
#![allow(clippy::restriction, reason = "tests and benches fail by panicking")]

use std::path::{Path, PathBuf};

mod common;

/// libnetcdf (and HDF5 beneath it) is not thread-safe: the tests write their files in
/// turn.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("tet-netcdf-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn run(args: &[&str]) -> (i32, String, String) {
    let (c, o, e) = common::run(args, &dir());
    (c, String::from_utf8(o).unwrap(), e)
}

fn query(file: &str, q: &str) -> String {
    let (c, o, e) = run(&["query", "-t", file, q, "-q"]);
    assert_eq!(c, 0, "{q}: {e}");
    o
}

/// The packed temperatures (time 4 × lat 3 × lon 2), -32767 the fill.
fn temps() -> Vec<i16> {
    let mut t: Vec<i16> = (0..24)
        .map(|i| 100 * i16::try_from(i).unwrap() - 500)
        .collect();
    t[5] = -32767;
    t[17] = -32767;
    t
}

/// A NetCDF-4 file as a climate model writes one.
fn write_nc4(path: &Path) {
    let mut f = netcdf::create(path).unwrap();
    f.add_unlimited_dimension("time").unwrap();
    f.add_dimension("lat", 3).unwrap();
    f.add_dimension("lon", 2).unwrap();
    f.add_attribute("title", "a test file").unwrap();
    f.add_attribute("Conventions", "CF-1.8").unwrap();
    // NC_STRING attributes: one string is a text, several a list.
    f.add_attribute("source", vec!["model run 7".to_string()])
        .unwrap();
    f.add_attribute("authors", vec!["a".to_string(), "b".to_string()])
        .unwrap();
    // A global attribute longer than .tet metadata holds is left out, named.
    f.add_attribute("history", "x".repeat(1500)).unwrap();
    {
        let mut v = f.add_variable::<f64>("time", &["time"]).unwrap();
        v.put_attribute("units", "hours since 2000-01-01 00:00:00")
            .unwrap();
        v.put_attribute("calendar", "standard").unwrap();
        v.put_values(&[0.0, 6.0, 12.0, 18.0], 0..4).unwrap();
    }
    {
        let mut v = f.add_variable::<f32>("lat", &["lat"]).unwrap();
        v.put_attribute("units", "degrees_north").unwrap();
        v.put_values(&[45.0f32, 0.0, -45.0], ..).unwrap();
    }
    {
        let mut v = f
            .add_variable::<i16>("tas", &["time", "lat", "lon"])
            .unwrap();
        v.set_chunking(&[1, 3, 2]).unwrap();
        v.set_compression(4, true).unwrap();
        v.put_attribute("_FillValue", -32767i16).unwrap();
        v.put_attribute("scale_factor", 0.01f32).unwrap();
        v.put_attribute("add_offset", 273.15f64).unwrap();
        v.put_attribute("long_name", "near-surface air temperature")
            .unwrap();
        v.put_attribute("valid_range", vec![-32000i16, 32000])
            .unwrap();
        v.put_values(&temps(), (0..4, .., ..)).unwrap();
    }
    {
        let mut g = f.add_group("obs").unwrap();
        g.add_attribute("network", "alpha").unwrap();
        g.add_attribute("stations", vec![3i32, 4]).unwrap();
        g.add_dimension("station", 3).unwrap();
        let mut v = g.add_variable::<i8>("flag", &["station"]).unwrap();
        v.put_values(&[-3i8, 0, 7], ..).unwrap();
        let mut v = g.add_variable::<u64>("count", &["lat"]).unwrap();
        v.put_values(&[u64::MAX, 1, 2], ..).unwrap();
    }
    {
        let mut v = f.add_string_variable("label", &["lat"]).unwrap();
        v.put_string("north", 0).unwrap();
    }
}

#[test]
fn netcdf4_variables_dims_coords_attrs_and_values() {
    let _one = serial();
    let d = dir();
    write_nc4(&d.join("m.nc"));
    // The string variable is refused by name, then skipped on request.
    let (c, _, e) = run(&["convert", "m.nc", "m.tet", "--force"]);
    assert_eq!(c, 16, "{e}");
    assert!(e.contains("variable 'label' is of string type"), "{e}");
    assert!(e.contains("--skip-unsupported"), "{e}");
    assert!(!d.join("m.tet").exists());
    let (c, _, e) = run(&["convert", "m.nc", "m.tet", "--force", "--skip-unsupported"]);
    assert_eq!(c, 0, "{e}");
    assert!(e.contains("skipped:") && e.contains("'label'"), "{e}");
    assert!(
        e.contains("group '/': attribute 'history' (1500 bytes) is longer than the 1024 bytes"),
        "{e}"
    );
    let (c, o, e) = run(&["verify", "m.tet"]);
    assert_eq!(c, 0, "{o}{e}");
    let (c, o, e) = run(&["info", "m.tet", "--metadata", "--history"]);
    assert_eq!(c, 0, "{e}");
    for want in [
        // The global and group attributes (tet_groups).
        "attrs of group /:\n  attr:   title = a test file\n  attr:   Conventions = CF-1.8\n  attr:   source = model run 7\n  attr:   authors = [\"a\",\"b\"]\nattrs of group obs:\n  attr:   network = alpha\n  attr:   stations = [3, 4]\n",
        "metadata of tas:",
        "  dims:   (time, lat, lon)",
        "  coord:  time (dataset time), 4 value(s), 0.0 .. 18.0",
        "  coord:  lat (dataset lat), 3 value(s), 45.0 .. -45.0",
        "  attr:   _FillValue = -32767",
        "  attr:   scale_factor = 0.01",
        "  attr:   add_offset = 273.15",
        "  attr:   long_name = near-surface air temperature",
        "  attr:   valid_range = [-32000, 32000]",
        "metadata of obs/flag:",
        "  dims:   (station)",
        "  attr:   numpy_dtype = |i1",
        "from=netcdf",
    ] {
        assert!(o.contains(want), "missing {want:?} in\n{o}");
    }
    // The dimension `lat` of the group's `count` is the root's coordinate variable.
    assert!(
        o.contains("metadata of obs/count:\n  dims:   (lat)\n  coord:  lat (dataset lat)"),
        "{o}"
    );
    // Values: the packed integers as stored, the nan_* family unpacked.
    let t = temps();
    let sum: i64 = t.iter().map(|v| i64::from(*v)).sum();
    assert_eq!(
        query("m.tet", r#"{"dataset": "tas", "sum": []}"#),
        format!("tas sum = {sum}\n")
    );
    assert_eq!(
        query("m.tet", r#"{"dataset": "tas", "null_count": []}"#),
        "tas null_count = 2\n"
    );
    // The float32 scale_factor 0.01 is read as the decimal it prints as (0.01).
    let un = |p: i16| f64::from(p) * 0.01 + 273.15;
    assert_eq!(
        query("m.tet", r#"{"dataset": "tas", "nan_max": []}"#),
        format!("tas nan_max = {:?}\n", un(1800))
    );
    // A date selects on the CF time axis: 06:00 up to 18:00 is two steps of 6 elements.
    assert_eq!(
        query(
            "m.tet",
            r#"{"dataset": "tas", "selection": [{"start_label": "2000-01-01T06:00", "stop_label": "2000-01-01T18:00"}], "count": []}"#
        ),
        "tas count = 12\n"
    );
    assert_eq!(
        query("m.tet", r#"{"dataset": "obs/flag", "sum": []}"#),
        "obs/flag sum = 4\n"
    );
    assert_eq!(
        query("m.tet", r#"{"dataset": "obs/count", "max": []}"#),
        format!("obs/count max = {}\n", u64::MAX)
    );
    // The chunking is kept: 4 chunks of 1×3×2.
    let (_, o, _) = run(&["info", "m.tet"]);
    assert!(
        o.contains("tas        i16    4×3×2  1×3×2  4×1×1  4"),
        "{o}"
    );
    // Export gives the int8 variable back as int8.
    let (c, _, e) = run(&[
        "export",
        "m.tet",
        "--dataset",
        "obs/flag",
        "flag.npy",
        "--force",
    ]);
    assert_eq!(c, 0, "{e}");
    let b = std::fs::read(d.join("flag.npy")).unwrap();
    assert!(String::from_utf8_lossy(&b[..100]).contains("'|i1'"));
    assert_eq!(&b[b.len() - 3..], &[0xFD, 0, 7]);
}

#[test]
fn classic_files_and_refusals() {
    let _one = serial();
    let d = dir();
    let path = d.join("c.nc");
    {
        let mut f = netcdf::create_with(&path, netcdf::Options::_64BIT_OFFSET).unwrap();
        f.add_dimension("x", 5).unwrap();
        f.add_dimension("y", 2).unwrap();
        let mut v = f.add_variable::<f64>("z", &["y", "x"]).unwrap();
        v.put_attribute("units", "m").unwrap();
        // A classic file leaves define mode before data.
        f.enddef().unwrap();
        let vals: Vec<f64> = (0..10).map(|i| f64::from(i) * 1.5).collect();
        f.variable_mut("z").unwrap().put_values(&vals, ..).unwrap();
    }
    let head = std::fs::read(&path).unwrap();
    assert_eq!(&head[..4], b"CDF\x02");
    let (c, _, e) = run(&["convert", "c.nc", "c.tet", "--force", "--codec", "raw"]);
    assert_eq!(c, 0, "{e}");
    assert_eq!(
        query("c.tet", r#"{"dataset": "z", "sum": "x"}"#),
        "z sum = {\"shape\":[2],\"dims\":[\"y\"],\"data\":[15.0,52.5]}\n"
    );
    // An existing output needs --force; options for other inputs are refused.
    let (c, _, e) = run(&["convert", "c.nc", "c.tet"]);
    assert_eq!(c, 16, "{e}");
    let (c, _, e) = run(&["convert", "c.nc", "c2.tet", "--coord", "x=c.nc"]);
    assert_eq!(c, 16, "{e}");
    assert!(
        e.contains("--coord and --labels are for .npy/.npz inputs"),
        "{e}"
    );
    // A --chunk goes to the variables of its rank; one that fits none is refused.
    let (c, _, e) = run(&["convert", "c.nc", "c2.tet", "--chunk", "2,2,2"]);
    assert_eq!(c, 16, "{e}");
    assert!(
        e.contains("--chunk has 3 axes, and none of the variables has 3"),
        "{e}"
    );
    // A file cut short is named as damaged (4), and no output remains.
    std::fs::write(d.join("cut.nc"), &head[..head.len() / 2]).unwrap();
    let (c, _, e) = run(&["convert", "cut.nc", "cut.tet", "--force"]);
    assert!(c == 4, "{c}: {e}");
    assert!(e.contains("cut.nc"), "{e}");
    assert!(!d.join("cut.tet").exists());
}

/// A group's own dimension hides an outer one of its name: the outer coordinate
/// variable is not its coordinate. A list-valued `missing_value` (CF allows one) is kept
/// as `missing_value_list`, its first value as `missing_value`, and every value marks.
#[test]
fn shadowed_dimensions_and_missing_value_lists() {
    let _one = serial();
    let d = dir();
    let path = d.join("s.nc");
    let values = [5i32, -1, -2, -3, -4, 9];
    {
        let mut f = netcdf::create(&path).unwrap();
        f.add_dimension("x", 3).unwrap();
        f.add_dimension("n", 6).unwrap();
        let mut v = f.add_variable::<f64>("x", &["x"]).unwrap();
        v.put_values(&[1.0, 2.0, 3.0], ..).unwrap();
        let mut v = f.add_variable::<i32>("a", &["n"]).unwrap();
        v.put_attribute("missing_value", vec![-1i32, -2, -3])
            .unwrap();
        v.put_values(&values, ..).unwrap();
        let mut v = f.add_variable::<i16>("p", &["n"]).unwrap();
        v.put_attribute("missing_value", vec![-1i16, -2, -3])
            .unwrap();
        v.put_attribute("_FillValue", 9i16).unwrap();
        v.put_attribute("scale_factor", 0.5f64).unwrap();
        v.put_values(&[5i16, -1, -2, -3, -4, 9], ..).unwrap();
        let mut g = f.add_group("g").unwrap();
        g.add_dimension("x", 2).unwrap();
        let mut v = g.add_variable::<f32>("b", &["x"]).unwrap();
        v.put_values(&[0.5f32, 1.5], ..).unwrap();
    }
    let (c, _, e) = run(&["convert", "s.nc", "s.tet", "--force"]);
    assert_eq!(c, 0, "{e}");
    assert!(
        e.contains("missing_value holds [-1, -2, -3]; each value marks"),
        "{e}"
    );
    let (_, o, _) = run(&["info", "s.tet", "--metadata"]);
    let b = &o[o.find("metadata of g/b:").unwrap()..];
    assert!(b.starts_with("metadata of g/b:\n  dims:   (x)\n"), "{o}");
    assert!(!b.contains("coord:"), "{o}");
    assert!(
        o.contains("  attr:   missing_value_list = [-1, -2, -3]"),
        "{o}"
    );
    assert!(o.contains("  attr:   missing_value = -1"), "{o}");
    let (c, o, e) = run(&["verify", "s.tet"]);
    assert_eq!(c, 0, "{o}{e}");
    // NumPy: np.isin(a, [-1, -2, -3]) is true at 3 elements; the rest sum to 10.
    assert_eq!(
        query("s.tet", r#"{"dataset": "a", "null_count": []}"#),
        "a null_count = 3\n"
    );
    assert_eq!(
        query("s.tet", r#"{"dataset": "a", "nan_sum": []}"#),
        "a nan_sum = 10.0\n"
    );
    assert_eq!(
        query("s.tet", r#"{"dataset": "a", "nan_min": []}"#),
        "a nan_min = -4.0\n"
    );
    // With the fill: 4 marked; unpacked, 5 * 0.5 + -4 * 0.5 = 0.5.
    assert_eq!(
        query("s.tet", r#"{"dataset": "p", "null_count": []}"#),
        "p null_count = 4\n"
    );
    assert_eq!(
        query("s.tet", r#"{"dataset": "p", "nan_sum": []}"#),
        "p nan_sum = 0.5\n"
    );
    // --unpack: NaN at every listed value and the fill, as xarray decodes the file.
    let (c, _, e) = run(&["convert", "s.nc", "su.tet", "--force", "--unpack"]);
    assert_eq!(c, 0, "{e}");
    let out = d.join("p.npy");
    let (c, _, e) = run(&[
        "export",
        "su.tet",
        "--dataset",
        "p",
        out.to_str().unwrap(),
        "--force",
    ]);
    assert_eq!(c, 0, "{e}");
    let b = std::fs::read(&out).unwrap();
    let got: Vec<f64> = b[b.len() - 48..]
        .chunks_exact(8)
        .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(got[0], 2.5);
    assert!(got[1..4].iter().all(|v| v.is_nan()), "{got:?}");
    assert_eq!(got[4], -2.0);
    assert!(got[5].is_nan(), "{got:?}");
    let (_, o, _) = run(&["info", "su.tet", "--metadata"]);
    assert!(o.contains("missing_value_list"), "kept in cf_decoded: {o}");
    assert!(!o.contains("  attr:   missing_value_list"), "{o}");
}

/// A `missing_value` list longer than `.tet` marks with is refused, naming the file, the
/// variable and the attribute.
#[test]
fn long_missing_value_lists_are_refused() {
    let _one = serial();
    let d = dir();
    let path = d.join("long.nc");
    {
        let mut f = netcdf::create(&path).unwrap();
        f.add_dimension("n", 4).unwrap();
        let mut v = f.add_variable::<i32>("many", &["n"]).unwrap();
        v.put_attribute("missing_value", (1..=9).collect::<Vec<i32>>())
            .unwrap();
        v.put_attribute("_FillValue", 20i32).unwrap();
        v.put_values(&[1, 9, 10, 20], ..).unwrap();
    }
    let (c, _, e) = run(&["convert", "long.nc", "long.tet", "--force"]);
    assert_eq!(c, 16, "{e}");
    assert!(
        e.contains(
            "long.nc: variable 'many': attribute missing_value holds 9 distinct values, more than the 8 (besides _FillValue)"
        ),
        "{e}"
    );
    assert!(e.contains("(--unpack decodes them all to NaN)"), "{e}");
    assert!(!d.join("long.tet").exists());
    // --unpack masks with every value, past the ones .tet's markers hold too.
    let (c, _, e) = run(&["convert", "long.nc", "long.tet", "--force", "--unpack"]);
    assert_eq!(c, 0, "{e}");
    let out = d.join("long.npy");
    let (c, _, e) = run(&[
        "export",
        "long.tet",
        "--dataset",
        "many",
        out.to_str().unwrap(),
        "--force",
    ]);
    assert_eq!(c, 0, "{e}");
    let b = std::fs::read(&out).unwrap();
    let got: Vec<f64> = b[b.len() - 32..]
        .chunks_exact(8)
        .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert!(
        got[0].is_nan() && got[1].is_nan() && got[3].is_nan(),
        "{got:?}"
    );
    assert_eq!(got[2], 10.0, "{got:?}");
}

/// NetCDF-3's unsigned bytes and shorts (`_Unsigned = "true"` on a signed variable of a
/// classic file): stored as `u8`/`u16` with the stored bits, as netCDF4-python and xarray
/// read them, the fill reinterpreted too (-1 of a byte is 255); `_Unsigned` leaves the
/// attrs and the history row counts the variables; `--unpack` masks and scales the
/// unsigned values.
#[test]
fn unsigned_attribute_reinterprets_signed_variables() {
    let _one = serial();
    let d = dir();
    let path = d.join("u.nc");
    let bytes = [-1i8, 0, 1, 127, -128, -2];
    let shorts = [-1i16, 0, 1000, -32768, 32767, -2];
    {
        let mut f = netcdf::create_with(&path, netcdf::Options::CLASSIC).unwrap();
        f.add_dimension("n", 6).unwrap();
        let mut v = f.add_variable::<i8>("b", &["n"]).unwrap();
        v.put_attribute("_Unsigned", "true").unwrap();
        v.put_attribute("_FillValue", -1i8).unwrap();
        let mut v = f.add_variable::<i16>("s", &["n"]).unwrap();
        v.put_attribute("_Unsigned", "true").unwrap();
        v.put_attribute("missing_value", vec![-2i16, -32768])
            .unwrap();
        v.put_attribute("scale_factor", 0.5f32).unwrap();
        // A signed variable without the attribute stays signed.
        let mut v = f.add_variable::<i8>("plain", &["n"]).unwrap();
        v.put_attribute("_FillValue", -1i8).unwrap();
        f.enddef().unwrap();
        f.variable_mut("b").unwrap().put_values(&bytes, ..).unwrap();
        f.variable_mut("s")
            .unwrap()
            .put_values(&shorts, ..)
            .unwrap();
        f.variable_mut("plain")
            .unwrap()
            .put_values(&bytes, ..)
            .unwrap();
    }
    assert_eq!(&std::fs::read(&path).unwrap()[..4], b"CDF\x01");
    let (c, _, e) = run(&["convert", "u.nc", "u.tet", "--force"]);
    assert_eq!(c, 0, "{e}");
    let (c, o, e) = run(&["verify", "u.tet"]);
    assert_eq!(c, 0, "{o}{e}");
    let (_, o, _) = run(&["info", "u.tet", "--metadata", "--history"]);
    assert!(!o.contains("_Unsigned"), "{o}");
    assert!(o.contains("unsigned=2"), "{o}");
    let b = &o[o.find("metadata of b:").unwrap()..];
    assert!(b.contains("  attr:   _FillValue = 255"), "{o}");
    assert!(
        o.contains("  attr:   missing_value_list = [65534, 32768]"),
        "{o}"
    );
    assert!(o.contains("  attr:   missing_value = 65534"), "{o}");
    let p = &o[o.find("metadata of plain:").unwrap()..];
    assert!(p.contains("  attr:   _FillValue = -1"), "{o}");
    // The values, through export: NumPy's a.view('u1') and a.view('<u2').
    let out = d.join("b.npy");
    let (c, _, e) = run(&[
        "export",
        "u.tet",
        "--dataset",
        "b",
        out.to_str().unwrap(),
        "--force",
    ]);
    assert_eq!(c, 0, "{e}");
    let npy = std::fs::read(&out).unwrap();
    assert!(String::from_utf8_lossy(&npy[..100]).contains("'|u1'"));
    assert_eq!(&npy[npy.len() - 6..], &[255, 0, 1, 127, 128, 254]);
    assert_eq!(
        query("u.tet", r#"{"dataset": "s", "max": []}"#),
        "s max = 65535\n"
    );
    assert_eq!(
        query("u.tet", r#"{"dataset": "plain", "min": []}"#),
        "plain min = -128\n"
    );
    assert_eq!(
        query("u.tet", r#"{"dataset": "b", "null_count": []}"#),
        "b null_count = 1\n"
    );
    assert_eq!(
        query("u.tet", r#"{"dataset": "s", "null_count": []}"#),
        "s null_count = 2\n"
    );
    // --unpack: s = [65535, 0, 1000, NaN, 32767, NaN] * 0.5, as float32.
    let (c, _, e) = run(&["convert", "u.nc", "uu.tet", "--force", "--unpack"]);
    assert_eq!(c, 0, "{e}");
    let out = d.join("s.npy");
    let (c, _, e) = run(&[
        "export",
        "uu.tet",
        "--dataset",
        "s",
        out.to_str().unwrap(),
        "--force",
    ]);
    assert_eq!(c, 0, "{e}");
    let npy = std::fs::read(&out).unwrap();
    assert!(String::from_utf8_lossy(&npy[..100]).contains("'<f4'"));
    let got: Vec<f32> = npy[npy.len() - 24..]
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(got[..3], [32767.5, 0.0, 500.0]);
    assert!(got[3].is_nan() && got[5].is_nan(), "{got:?}");
    assert_eq!(got[4], 16383.5);
}

/// Scalar variables (a CF `crs` grid-mapping variable, a `height` coordinate) are stored
/// as one element with `numpy_shape = []`, keeping their attributes (the `grid_mapping`
/// of a variable names a dataset that is there), and `export` gives them back 0-d.
#[test]
fn scalar_variables_convert_and_export_as_0_d() {
    let _one = serial();
    let d = dir();
    let path = d.join("sc.nc");
    {
        let mut f = netcdf::create(&path).unwrap();
        f.add_dimension("x", 2).unwrap();
        let mut v = f.add_variable::<i32>("crs", &[]).unwrap();
        v.put_attribute("grid_mapping_name", "latitude_longitude")
            .unwrap();
        v.put_attribute("semi_major_axis", 6378137.0f64).unwrap();
        v.put_value(7i32, ..).unwrap();
        let mut v = f.add_variable::<f64>("height", &[]).unwrap();
        v.put_attribute("units", "m").unwrap();
        v.put_value(2.0f64, ..).unwrap();
        let mut v = f.add_variable::<f32>("tas", &["x"]).unwrap();
        v.put_attribute("grid_mapping", "crs").unwrap();
        v.put_attribute("coordinates", "height").unwrap();
        v.put_values(&[280.5f32, 281.0], ..).unwrap();
    }
    let (c, _, e) = run(&["convert", "sc.nc", "sc.tet", "--force"]);
    assert_eq!(c, 0, "{e}");
    let (c, o, e) = run(&["verify", "sc.tet"]);
    assert_eq!(c, 0, "{o}{e}");
    let (_, o, _) = run(&["info", "sc.tet", "--metadata"]);
    let crs = &o[o.find("metadata of crs:").unwrap()..];
    assert!(!crs.starts_with("metadata of crs:\n  dims:"), "{o}");
    for want in [
        "  shape:  () in the source (export gives it back so)",
        "  attr:   grid_mapping_name = latitude_longitude",
        "  attr:   semi_major_axis = 6378137",
    ] {
        assert!(crs.contains(want), "missing {want:?} in\n{o}");
    }
    // The marker is bookkeeping for export, not one of the file's attributes.
    assert!(!o.contains("numpy_shape"), "{o}");
    // To Zarr: 0-d arrays, as the source had them.
    #[cfg(feature = "zarr")]
    {
        let (c, _, e) = run(&["export", "sc.tet", "sc.zarr", "--force"]);
        assert_eq!(c, 0, "{e}");
        for name in ["crs", "height"] {
            let j: serde_json::Value = serde_json::from_str(
                &std::fs::read_to_string(d.join("sc.zarr").join(name).join("zarr.json")).unwrap(),
            )
            .unwrap();
            assert_eq!(j["shape"], serde_json::json!([]), "{name}: {j}");
            assert!(j["attributes"].get("numpy_shape").is_none(), "{j}");
        }
        let tas: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(d.join("sc.zarr/tas/zarr.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(tas["shape"], serde_json::json!([2]));
    }
    assert!(o.contains("  attr:   grid_mapping = crs"), "{o}");
    assert_eq!(
        query("sc.tet", r#"{"dataset": "crs", "sum": []}"#),
        "crs sum = 7\n"
    );
    // A --dims for the 1-D variables does not name a scalar's one element.
    let (c, _, e) = run(&["convert", "sc.nc", "sd.tet", "--force", "--dims", "station"]);
    assert_eq!(c, 0, "{e}");
    let (_, o, _) = run(&["info", "sd.tet", "--metadata"]);
    assert!(o.contains("metadata of tas:\n  dims:   (station)"), "{o}");
    assert!(!o.contains("metadata of crs:\n  dims:"), "{o}");
    for (name, descr, bytes) in [
        ("height", "'<f8'", 2.0f64.to_le_bytes().to_vec()),
        ("crs", "'<i4'", 7i32.to_le_bytes().to_vec()),
    ] {
        let npy = d.join(format!("{name}.npy"));
        let (c, _, e) = run(&[
            "export",
            "sc.tet",
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
        assert_eq!(&b[b.len() - bytes.len()..], &bytes[..], "{name}");
        assert_eq!(
            b.len() % 64,
            bytes.len() % 64,
            "{name}: nothing after the one element"
        );
    }
}

/// A NetCDF-3 file cut short inside its data (libnetcdf reads the missing part as stale
/// bytes, without an error) is refused as cut short, exit 4, naming both lengths; whole
/// files of each NetCDF-3 format, with several record variables of mixed sizes, convert.
#[test]
fn netcdf3_files_cut_inside_their_data_are_refused() {
    let _one = serial();
    let d = dir();
    for (tag, opts, magic) in [
        ("cdf1", netcdf::Options::empty(), 1u8),
        ("cdf2", netcdf::Options::_64BIT_OFFSET, 2),
        ("cdf5", netcdf::Options::_64BIT_DATA, 5),
    ] {
        let path = d.join(format!("{tag}.nc"));
        {
            let mut f = netcdf::create_with(&path, opts).unwrap();
            f.add_unlimited_dimension("t").unwrap();
            f.add_dimension("y", 20).unwrap();
            f.add_dimension("x", 100).unwrap();
            f.add_attribute("title", "cut test").unwrap();
            // A header longer than the first 64 KiB read of it.
            f.add_attribute("notes", "n".repeat(70_000)).unwrap();
            f.add_variable::<f32>("v", &["y", "x"]).unwrap();
            // Record variables of 3 shorts, 1 byte and 100 doubles per record.
            f.add_variable::<i16>("s", &["t", "x"]).unwrap();
            f.add_variable::<i8>("b", &["t"]).unwrap();
            f.add_variable::<f64>("r", &["t", "x"]).unwrap();
            f.enddef().unwrap();
            let v: Vec<f32> = (0..2000).map(|i| i as f32).collect();
            f.variable_mut("v").unwrap().put_values(&v, ..).unwrap();
            for t in 0..4usize {
                let s: Vec<i16> = (0..100).map(|i| (i + t) as i16).collect();
                f.variable_mut("s")
                    .unwrap()
                    .put_values(&s, (t..t + 1, ..))
                    .unwrap();
                f.variable_mut("b")
                    .unwrap()
                    .put_values(&[t as i8], t..t + 1)
                    .unwrap();
                let r: Vec<f64> = (0..100).map(|i| (i * t) as f64).collect();
                f.variable_mut("r")
                    .unwrap()
                    .put_values(&r, (t..t + 1, ..))
                    .unwrap();
            }
        }
        let whole = std::fs::read(&path).unwrap();
        assert_eq!(&whole[..4], [b'C', b'D', b'F', magic], "{tag}");
        let (c, _, e) = run(&[
            "convert",
            &format!("{tag}.nc"),
            &format!("{tag}.tet"),
            "--force",
        ]);
        assert_eq!(c, 0, "{tag} whole: {e}");
        for cut in [whole.len() - 1, whole.len() - 900, whole.len() - 5000] {
            let name = format!("{tag}-cut.nc");
            std::fs::write(d.join(&name), &whole[..cut]).unwrap();
            let out = format!("{tag}-cut.tet");
            let (c, _, e) = run(&["convert", &name, &out, "--force"]);
            assert_eq!(c, 4, "{tag} cut to {cut} of {}: {e}", whole.len());
            assert!(
                e.contains(&format!("{name}: cut short"))
                    && e.contains(&format!("the file has {cut} bytes")),
                "{e}"
            );
            assert!(!d.join(&out).exists());
        }
    }
}

/// What a CF file holds that `.tet` has no place for, said as it is: a `missing_value` no
/// element can equal (1e20 on a `short`) is kept with a warning; under `--unpack` a list
/// is said as decoded, and `null_count` points at `nan_count`; a group of attributes only
/// is kept; a `history` of several lines keeps `info`'s layout; a file whose every
/// variable is skipped says so.
#[test]
fn cf_oddities_are_kept_or_said() {
    let _one = serial();
    let d = dir();
    {
        let mut f = netcdf::create(d.join("odd.nc")).unwrap();
        f.add_attribute(
            "history",
            "2020-01-01 made\n2021-02-03 regridded\n2022 fixed",
        )
        .unwrap();
        f.add_dimension("n", 4).unwrap();
        let mut v = f.add_variable::<i16>("t", &["n"]).unwrap();
        v.put_attribute("missing_value", 1e20f64).unwrap();
        v.put_values(&[1i16, 2, 3, 4], ..).unwrap();
        let mut v = f.add_variable::<i32>("l", &["n"]).unwrap();
        v.put_attribute("missing_value", vec![-1i32, -2]).unwrap();
        v.put_values(&[-1i32, 5, -2, 7], ..).unwrap();
        let mut v = f.add_variable::<i16>("pk", &["n"]).unwrap();
        v.put_attribute("scale_factor", 0.5f64).unwrap();
        v.put_attribute("comment", "c".repeat(2000)).unwrap();
        v.put_values(&[1i16, 2, 3, 4], ..).unwrap();
        let mut v = f.add_variable::<i32>("huge", &["n"]).unwrap();
        v.put_attribute("missing_value", (1..=300).map(|i| -i).collect::<Vec<i32>>())
            .unwrap();
        v.put_values(&[-1i32, 5, -300, 7], ..).unwrap();
        let mut g = f.add_group("about").unwrap();
        g.add_attribute("institution", "here").unwrap();
    }
    // Kept as stored, 300 values are past what .tet marks with: --skip-unsupported.
    let (c, _, e) = run(&[
        "convert",
        "odd.nc",
        "odd.tet",
        "--force",
        "--skip-unsupported",
    ]);
    assert_eq!(c, 0, "{e}");
    assert!(
        e.contains("variable 'pk': attribute 'comment' (2000 bytes) is longer than the 1024 bytes .tet metadata holds; not kept"),
        "{e}"
    );
    assert!(e.contains("skipped: ") && e.contains("'huge'"), "{e}");
    // A marker typed with --attr is a slip, refused as for a .npy input.
    let (c, _, e) = run(&[
        "convert",
        "odd.nc",
        "slip.tet",
        "--force",
        "--skip-unsupported",
        "--attr",
        "pk:_FillValue=1e9",
    ]);
    assert_eq!(c, 16, "{e}");
    assert!(
        e.contains("--attr: attr _FillValue = \"1e9\" is outside the range of i16"),
        "{e}"
    );
    assert!(!d.join("slip.tet").exists());
    assert!(
        e.contains(
            "odd.nc: warning: 't': attr missing_value = \"100000000000000000000\" is outside \
             the range of i16 (-32768 ..= 32767), so no element can be it; kept as the file \
             has it (it marks no element)"
        ),
        "{e}"
    );
    assert!(
        e.contains("variable 'l': missing_value holds [-1, -2]; each value marks missing elements (the list is kept as missing_value_list"),
        "{e}"
    );
    // The marker matches nothing: every element counts, as xarray reads the file.
    assert_eq!(
        query("odd.tet", r#"{"dataset": "t", "nan_sum": []}"#),
        "t nan_sum = 10.0\n"
    );
    assert_eq!(
        query("odd.tet", r#"{"dataset": "l", "null_count": []}"#),
        "l null_count = 2\n"
    );
    let (_, o, _) = run(&["info", "odd.tet", "--metadata"]);
    assert!(
        o.contains(
            "attrs of group /:\n  attr:   history = 2020-01-01 made\n                    2021-02-03 regridded\n                    2022 fixed\n"
        ),
        "{o}"
    );
    assert!(
        o.contains("attrs of group about:\n  attr:   institution = here\n"),
        "{o}"
    );
    // --unpack: the list is decoded, and said so; null_count then points at nan_count.
    let (c, _, e) = run(&["convert", "odd.nc", "oddu.tet", "--force", "--unpack"]);
    assert_eq!(c, 0, "{e}");
    assert!(
        e.contains("variable 'l': missing_value holds [-1, -2]; --unpack made every element equal to one of them NaN"),
        "{e}"
    );
    assert!(!e.contains("missing_value_list"), "{e}");
    let (c, _, e) = run(&[
        "query",
        "-t",
        "oddu.tet",
        r#"{"dataset": "l", "null_count": []}"#,
    ]);
    assert_eq!(c, 16, "{e}");
    assert!(
        e.contains(
            "convert --unpack decoded its markers (missing_value) to NaN, which nan_count counts"
        ),
        "{e}"
    );
    // Packed only, nothing marked: no word of markers.
    let (c, _, e) = run(&[
        "query",
        "-t",
        "oddu.tet",
        r#"{"dataset": "pk", "null_count": []}"#,
    ]);
    assert_eq!(c, 16, "{e}");
    assert!(!e.contains("--unpack"), "{e}");
    // The 300-value list decoded whole, its length kept.
    assert_eq!(
        query("oddu.tet", r#"{"dataset": "huge", "nan_count": []}"#),
        "huge nan_count = 2\n"
    );
    let (_, o, _) = run(&["info", "oddu.tet", "--metadata"]);
    assert!(
        o.contains(r#""missing_value_list":"300 values (too long to keep)""#),
        "{o}"
    );
    assert_eq!(
        query("oddu.tet", r#"{"dataset": "l", "nan_count": []}"#),
        "l nan_count = 2\n"
    );
    // Every variable skipped: not "no numeric variables".
    {
        let mut f = netcdf::create(d.join("text.nc")).unwrap();
        f.add_dimension("n", 2).unwrap();
        f.add_string_variable("names", &["n"]).unwrap();
    }
    let (c, _, e) = run(&[
        "convert",
        "text.nc",
        "text.tet",
        "--force",
        "--skip-unsupported",
    ]);
    assert_eq!(c, 16, "{e}");
    assert!(e.contains("skipped: "), "{e}");
    assert!(
        e.contains("text.nc: nothing left to convert: of its variables, 1 skipped (listed above) and none converted"),
        "{e}"
    );
    assert!(!d.join("text.tet").exists());
    #[cfg(feature = "zarr")]
    {
        let (c, _, e) = run(&["export", "odd.tet", "odd.zarr", "--force"]);
        assert_eq!(c, 0, "{e}");
        let j: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(d.join("odd.zarr/about/zarr.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(j["attributes"]["institution"], "here", "{j}");
    }
}
