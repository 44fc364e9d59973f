//! Axis metadata on the command line: `convert --dims/--attr/--coord/--labels` (a `.npy`
//! and an `.npz` with per-dataset options and a member as coordinate), refusals naming
//! the rule, `info --metadata` and `--history`, queries by name and value, `verify`,
//! `repair` keeping the metadata, `export --coords`.

#![allow(clippy::restriction, reason = "tests and benches fail by panicking")]

use std::path::{Path, PathBuf};

mod common;
use common::npy;

fn dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("tet-dims-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn run(args: &[&str]) -> (i32, String, String) {
    let (c, o, e) = common::run(args, &dir());
    (c, String::from_utf8(o).unwrap(), e)
}

fn f32s(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn i64s(v: &[i64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn f64s(v: &[f64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// `temp.npy` (f32 4×3×2, -9999 at two places), `times.npy` (4 hourly i64), `lat.npy`
/// (3 descending f64).
fn inputs(d: &Path) {
    let mut t: Vec<f32> = (0..24).map(|i| i as f32).collect();
    t[0] = -9999.0;
    t[13] = -9999.0;
    std::fs::write(d.join("temp.npy"), npy("<f4", false, &[4, 3, 2], &f32s(&t))).unwrap();
    let times: Vec<i64> = (0..4).map(|h| 1_704_067_200 + 3600 * h).collect();
    std::fs::write(d.join("times.npy"), npy("<i8", false, &[4], &i64s(&times))).unwrap();
    std::fs::write(
        d.join("lat.npy"),
        npy("<f8", false, &[3], &f64s(&[10.0, 0.0, -10.0])),
    )
    .unwrap();
}

fn convert_weather(out: &str) {
    let (c, _, e) = run(&[
        "convert",
        "temp.npy",
        out,
        "--force",
        "--dims",
        "time,lat,lon",
        "--attr",
        "units=K",
        "--attr",
        "_FillValue=-9999",
        "--coord",
        "time=times.npy",
        "--coord",
        "lat=lat.npy",
        "--labels",
        "lon=west,east",
        "--attr",
        "time:units=seconds since 1970-01-01",
    ]);
    assert_eq!(c, 0, "{e}");
}

fn query(file: &str, q: &str) -> (i32, String, String) {
    run(&["query", "-t", file, q, "-q"])
}

#[test]
fn convert_info_query_verify() {
    let d = dir();
    inputs(&d);
    convert_weather("w.tet");
    let (c, o, e) = run(&["info", "w.tet", "--metadata", "--history"]);
    assert_eq!(c, 0, "{e}");
    for want in [
        "written by:  tet-host ",
        "metadata of temp:",
        "  dims:   (time, lat, lon)",
        "  coord:  time (dataset time), 4 value(s), 1704067200 .. 1704078000",
        "  coord:  lat (dataset lat), 3 value(s), 10.0 .. -10.0",
        "  coord:  lon (labels), 2 value(s), \"west\" .. \"east\"",
        "  attr:   units = K",
        "  attr:   _FillValue = -9999",
        "metadata of time:",
        "  attr:   units = seconds since 1970-01-01",
        "history:",
        "  convert  temp.npy  from=npy",
    ] {
        assert!(o.contains(want), "{want:?} not in\n{o}");
    }
    let (c, o, _) = run(&["info", "w.tet", "--metadata", "--json"]);
    assert_eq!(c, 0);
    let v: serde_json::Value = serde_json::from_str(&o).unwrap();
    let m = &v["metadata"]["datasets"][0];
    assert_eq!(m["dims"], serde_json::json!(["time", "lat", "lon"]));
    assert_eq!(m["coords"][0]["len"], 4);
    assert_eq!(m["coords"][1]["last"], -10.0);
    assert_eq!(v["metadata"]["file"]["tool"], "tet-host");
    let (c, o, e) = run(&["verify", "w.tet"]);
    assert_eq!(c, 0, "{o}{e}");
    // Names and values.
    let a = query("w.tet", r#"{"dataset": "temp", "sum": "time"}"#);
    let b = query("w.tet", r#"{"dataset": "temp", "sum": 0}"#);
    assert_eq!(a, b);
    assert_eq!(a.0, 0, "{}", a.2);
    // TOML takes the same keys.
    let t = query("w.tet", "dataset = \"temp\"\nsum = \"time\"\n");
    assert_eq!(t, b);
    let t = query(
        "w.tet",
        "dataset = \"temp\"\ncount = []\n[[selection]]\nstart_label = 1704070800\n",
    );
    assert_eq!(t.1, "temp count = 18\n", "{}", t.2);
    let a = query(
        "w.tet",
        r#"{"dataset": "temp", "selection": [{"start_label": 1704070800, "stop_label": 1704078000}, {"start_label": 5.0}, {"stop_label": "east"}], "count": []}"#,
    );
    // Times 1..3, latitudes at or below 5 (1..3, descending), longitudes before "east".
    assert_eq!(a.1, "temp count = 4\n", "{}", a.2);
    let (c, o, e) = query(
        "w.tet",
        r#"{"dataset": "temp", "null_count": {"axes": ["lat", "lon"]}}"#,
    );
    assert_eq!(c, 0, "{e}");
    // The result's axes keep their names.
    assert_eq!(
        o,
        "temp null_count = {\"shape\":[4],\"dims\":[\"time\"],\"data\":[1,0,1,0]}\n"
    );
    let (c, o, e) = run(&[
        "query",
        "-t",
        "w.tet",
        r#"{"dataset": "temp", "max": "time"}"#,
        "--format",
        "table",
    ]);
    assert_eq!(c, 0, "{e}");
    assert!(
        o.starts_with(
            "# temp max over axes [0]: result f64, dataset f32, shape [3, 2], dims (lat, lon)\n"
        ),
        "{o}"
    );
    // --plan shows what each selection by value resolved to.
    let (c, o, e) = run(&[
        "query",
        "-t",
        "w.tet",
        r#"{"dataset": "temp", "selection": [{"start_label": 1704070800, "stop_label": 1704078000}, {}, {"stop_label": "east"}], "count": []}"#,
        "--plan",
    ]);
    assert_eq!(c, 0, "{e}");
    assert!(
        o.contains("\n  axis 0 (time): start_label 1704070800 -> index 1, stop_label 1704078000 -> index 3\n"),
        "{o}"
    );
    assert!(
        o.contains("\n  axis 2 (lon): stop_label \"east\" -> index 1\n"),
        "{o}"
    );
    let (c, o, _) = query("w.tet", r#"{"dataset": "temp", "nan_min": []}"#);
    assert_eq!((c, o.as_str()), (0, "temp nan_min = 1.0\n"));
    let (c, _, e) = query("w.tet", r#"{"dataset": "temp", "mean": "depth"}"#);
    assert_eq!(c, 16);
    assert!(
        e.contains("no axis is called \"depth\" (dim_names: time, lat, lon)"),
        "{e}"
    );
    // --coords beside an export.
    let (c, _, e) = run(&[
        "export",
        "w.tet",
        "--dataset",
        "temp",
        "e.npy",
        "--selection",
        r#"[{"start": 1, "stop": 3}]"#,
        "--coords",
        "--force",
    ]);
    assert_eq!(c, 0, "{e}");
    let side: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("e.npy.coords.json")).unwrap())
            .unwrap();
    assert_eq!(
        side["coords"]["time"]["values"],
        serde_json::json!([1_704_070_800i64, 1_704_074_400i64])
    );
    assert_eq!(
        side["coords"]["lon"]["values"],
        serde_json::json!(["west", "east"])
    );
    assert_eq!(side["attrs"]["units"], "K");
    // A coordinate dataset's attrs say what its numbers are.
    assert_eq!(side["coords"]["time"]["dataset"], "time");
    assert_eq!(
        side["coords"]["time"]["attrs"]["units"],
        "seconds since 1970-01-01"
    );
    assert!(side["coords"]["lon"].get("attrs").is_none(), "{side}");
    // Exported again without --coords: the earlier sidecar no longer describes it.
    let (c, _, e) = run(&["export", "w.tet", "--dataset", "temp", "e.npy", "--force"]);
    assert_eq!(c, 0, "{e}");
    assert!(!d.join("e.npy.coords.json").exists());
    assert!(e.contains("removed"), "{e}");
    // A file of the user's by that name is not ours to remove.
    std::fs::write(d.join("e.npy.coords.json"), "my notes\n").unwrap();
    let (c, _, e) = run(&["export", "w.tet", "--dataset", "temp", "e.npy", "--force"]);
    assert_eq!(c, 0, "{e}");
    assert_eq!(
        std::fs::read_to_string(d.join("e.npy.coords.json")).unwrap(),
        "my notes\n"
    );
    assert!(e.contains("is left as it was"), "{e}");
}

#[test]
fn repair_keeps_the_metadata() {
    let d = dir();
    // Compressible, so the chunks are zstd frames (a frame that does not decode is what
    // --zero-bad-chunks replaces).
    let t: Vec<f32> = (0..384).map(|i| (i % 3) as f32).collect();
    std::fs::write(d.join("big.npy"), npy("<f4", false, &[64, 3, 2], &f32s(&t))).unwrap();
    let times: Vec<i64> = (0..64).collect();
    std::fs::write(d.join("t64.npy"), npy("<i8", false, &[64], &i64s(&times))).unwrap();
    let (c, _, e) = run(&[
        "convert",
        "big.npy",
        "r.tet",
        "--force",
        "--codec",
        "zstd",
        "--chunk",
        "32,3,2",
        "--dims",
        "time,lat,lon",
        "--attr",
        "units=K",
        "--coord",
        "time=t64.npy",
    ]);
    assert_eq!(c, 0, "{e}");
    // The first chunk's frame magic broken: it no longer decodes.
    let mut b = std::fs::read(d.join("r.tet")).unwrap();
    let idx = u64::from_le_bytes(b[16..24].try_into().unwrap()) as usize;
    let row = idx + 32 + 72;
    let off = u64::from_le_bytes(b[row..row + 8].try_into().unwrap()) as usize;
    b[off] ^= 0xFF;
    std::fs::write(d.join("r.tet"), &b).unwrap();
    let (c, _, _) = run(&["verify", "r.tet"]);
    assert_eq!(c, 4);
    let (c, o, e) = run(&[
        "repair",
        "r.tet",
        "-y",
        "--zero-bad-chunks",
        "-o",
        "fixed.tet",
        "--force",
    ]);
    // 1: problems were fixed.
    assert_eq!(c, 1, "{o}{e}");
    let (c, o, e) = run(&["verify", "fixed.tet"]);
    assert_eq!(c, 0, "{o}{e}");
    let (_, o, _) = run(&["info", "fixed.tet", "--metadata", "--history"]);
    assert!(o.contains("  dims:   (time, lat, lon)"), "{o}");
    assert!(
        o.contains("  coord:  time (dataset time), 64 value(s)"),
        "{o}"
    );
    assert!(o.contains("  attr:   units = K"), "{o}");
    assert!(o.contains("  repair  "), "{o}");
    let (c, o, e) = query("fixed.tet", r#"{"dataset": "big", "count": "time"}"#);
    assert_eq!(c, 0, "{e}");
    assert!(o.starts_with("big count = "), "{o}");
}

#[test]
fn npz_per_dataset_and_member_coordinates() {
    let d = dir();
    let mut z = zip::ZipWriter::new(std::fs::File::create(d.join("pair.npz")).unwrap());
    let opts =
        zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    for (name, body) in [
        (
            "a.npy",
            npy(
                "<f4",
                false,
                &[3, 2],
                &f32s(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]),
            ),
        ),
        ("b.npy", npy("<f4", false, &[3], &f32s(&[7.0, 8.0, 9.0]))),
        ("t.npy", npy("<i8", false, &[3], &i64s(&[10, 20, 30]))),
    ] {
        z.start_file(name, opts).unwrap();
        std::io::Write::write_all(&mut z, &body).unwrap();
    }
    z.finish().unwrap();
    let (c, _, e) = run(&[
        "convert",
        "pair.npz",
        "p.tet",
        "--force",
        "--dims",
        "a:t,x",
        "--dims",
        "b:t",
        "--coord",
        "t=t",
        "--attr",
        "a:units=m",
        "--labels",
        "a:x=l,r",
    ]);
    assert_eq!(c, 0, "{e}");
    let (c, o, e) = run(&["info", "p.tet", "--metadata"]);
    assert_eq!(c, 0, "{e}");
    assert!(o.contains("metadata of a:\n  dims:   (t, x)\n  coord:  t (dataset t), 3 value(s), 10 .. 30\n  coord:  x (labels), 2 value(s), \"l\" .. \"r\"\n  attr:   units = m"), "{o}");
    assert!(
        o.contains("metadata of b:\n  dims:   (t)\n  coord:  t (dataset t), 3 value(s), 10 .. 30"),
        "{o}"
    );
    let (c, o, _) = query(
        "p.tet",
        r#"{"dataset": "b", "selection": [{"start_label": 15}], "sum": "t"}"#,
    );
    assert_eq!((c, o.as_str()), (0, "b sum = 17.0\n"));
}

#[test]
fn refusals_name_the_rule() {
    let d = dir();
    inputs(&d);
    for (args, says) in [
        (
            vec!["--dims", "time,lat"],
            "--dims: 2 names for 3 axes (dataset \"temp\")",
        ),
        (vec!["--dims", "a,b,a"], "\"a\" names two axes"),
        (
            vec!["--dims", "time,lat,lon", "--coord", "lat=times.npy"],
            "of 4 values for 3 indices",
        ),
        (
            vec!["--dims", "time,lat,lon", "--labels", "lon=a,b,c"],
            "--labels: axis \"lon\" has 3 labels for 2 indices",
        ),
        (vec!["--coord", "time=nothing.npy"], "is not a file"),
        (vec!["--attr", "units"], "wants KEY=VALUE"),
        (vec!["--attr", "ghost:units=K"], "no dataset 'ghost'"),
        (
            vec!["--coord", "temp=times.npy"],
            "already has an array called 'temp'",
        ),
    ] {
        let mut a = vec!["convert", "temp.npy", "bad.tet", "--force"];
        a.extend(args.iter());
        let (c, _, e) = run(&a);
        assert_eq!(c, 16, "{args:?}: {e}");
        assert!(e.contains(says), "{args:?}: {e}");
        assert!(!d.join("bad.tet").exists(), "{args:?} left a file");
    }
    // 70 inline labels are past the other implementation's 64: a coordinate dataset.
    let labels: Vec<String> = (0..70).map(|i| format!("s{i}")).collect();
    let t: Vec<f32> = (0..70).map(|i| i as f32).collect();
    std::fs::write(d.join("wide.npy"), npy("<f4", false, &[70], &f32s(&t))).unwrap();
    let l = format!("x={}", labels.join(","));
    let (c, _, e) = run(&[
        "convert", "wide.npy", "bad.tet", "--force", "--dims", "x", "--labels", &l,
    ]);
    assert_eq!(c, 16, "{e}");
    assert!(e.contains("has 70 entries (at most 64)"), "{e}");
    // A marker no element of an integer dataset can equal would mask nothing.
    for (attr, says) in [
        (
            "_FillValue=1.5",
            "attr _FillValue = \"1.5\" is not an integer, so no i64 element can be it",
        ),
        (
            "missing_value=1e30",
            "attr missing_value = \"1e30\" is outside the range of i64",
        ),
        ("_FillValue=nan", "is not an integer"),
    ] {
        let (c, _, e) = run(&["convert", "times.npy", "bad.tet", "--force", "--attr", attr]);
        assert_eq!(c, 16, "{attr}: {e}");
        assert!(e.contains(says), "{attr}: {e}");
        assert!(!d.join("bad.tet").exists(), "{attr} left a file");
    }
    let (c, _, e) = run(&[
        "convert",
        "times.npy",
        "ok.tet",
        "--force",
        "--attr",
        "_FillValue=-9.0e3",
    ]);
    assert_eq!(c, 0, "a whole number written as a float is one: {e}");
}

/// A `_FillValue` a float32 cannot hold exactly (1e20, CMIP's; -9999.9) marks the
/// elements that store it, as NumPy's `a == 1e20` does for a float32 `a`.
#[test]
fn a_fill_value_matches_in_the_datasets_precision() {
    let d = dir().join("fill32");
    std::fs::create_dir_all(&d).unwrap();
    let v = [1.0f32, 1e20, 3.0, -9999.9, 5.0, 1e20];
    std::fs::write(d.join("f.npy"), npy("<f4", false, &[2, 3], &f32s(&v))).unwrap();
    let p = |n: &str| d.join(n).to_str().unwrap().to_string();
    for (fill, nulls, mean) in [("1e20", 2, "-2497.725"), ("-9999.9", 1, "4e19")] {
        let (code, _, e) = run(&[
            "convert",
            &p("f.npy"),
            &p("f.tet"),
            "--force",
            "--attr",
            &format!("_FillValue={fill}"),
        ]);
        assert_eq!(code, 0, "{e}");
        let (code, o, e) = run(&[
            "query",
            r#"{"dataset": "f", "null_count": []}"#,
            "-t",
            &p("f.tet"),
        ]);
        assert_eq!(code, 0, "{e}");
        let out: serde_json::Value = serde_json::from_str(&o).unwrap();
        assert_eq!(out["result"], nulls, "fill {fill}: {o}");
        let (_, o, _) = run(&[
            "query",
            r#"{"dataset": "f", "nan_mean": []}"#,
            "-t",
            &p("f.tet"),
        ]);
        let out: serde_json::Value = serde_json::from_str(&o).unwrap();
        let got = out["result"].as_f64().unwrap();
        let want: f64 = mean.parse().unwrap();
        assert!(
            (got - want).abs() <= 1e-6 * want.abs(),
            "fill {fill}: nan_mean {got}, want {want}"
        );
    }
    // The query's own fill is compared the same way.
    let (_, o, _) = run(&[
        "query",
        r#"{"dataset": "f", "null_count": {"fill": 1e20}}"#,
        "-t",
        &p("f.tet"),
    ]);
    let out: serde_json::Value = serde_json::from_str(&o).unwrap();
    assert_eq!(out["result"], 2, "{o}");
}

/// With an .npz input, options without a dataset are checked as for a .npy: a misspelt
/// dimension in --coord or --labels, a member that is not 1-D, and labels beside a
/// coordinate dataset on one axis are refused; --attr and --dims leave the members that
/// are coordinates alone.
#[test]
fn npz_options_without_a_dataset_are_checked() {
    let d = dir().join("npzopts");
    std::fs::create_dir_all(&d).unwrap();
    let p = |n: &str| d.join(n).to_str().unwrap().to_string();
    let npy_of = |descr: &str, shape: &[u64], data: Vec<u8>| npy(descr, false, shape, &data);
    let mut z = zip::ZipWriter::new(std::fs::File::create(d.join("s.npz")).unwrap());
    for (name, bytes) in [
        ("t2m.npy", npy_of("<f4", &[2, 3, 4], f32s(&[0.0; 24]))),
        ("latitude.npy", npy_of("<f8", &[3], f64s(&[1.0, 2.0, 3.0]))),
        ("lon.npy", npy_of("<f8", &[4], f64s(&[0.0, 1.0, 2.0, 3.0]))),
    ] {
        z.start_file(name, zip::write::SimpleFileOptions::default())
            .unwrap();
        std::io::Write::write_all(&mut z, &bytes).unwrap();
    }
    z.finish().unwrap();
    let (src, out) = (p("s.npz"), p("s.tet"));
    let convert = |extra: &[&str]| {
        let mut a = vec!["convert", &src, &out, "--force", "--dims", "time,lat,lon"];
        a.extend_from_slice(extra);
        run(&a)
    };
    let (code, _, e) = convert(&["--coord", "lati=latitude"]);
    assert_eq!(code, 16, "{e}");
    assert!(
        e.contains("no array of the input has a dimension named 'lati'"),
        "{e}"
    );
    let (code, _, e) = convert(&["--labels", "lonn=a,b,c,d"]);
    assert_eq!(code, 16, "{e}");
    let (code, _, e) = convert(&["--coord", "lat=t2m"]);
    assert_eq!(code, 16, "{e}");
    assert!(e.contains("a coordinate is a 1-D array"), "{e}");
    let (code, _, e) = convert(&["--coord", "lon=lon", "--labels", "lon=a,b,c,d"]);
    assert_eq!(code, 16, "{e}");
    assert!(e.contains("an axis has at most one"), "{e}");
    let (code, _, e) = convert(&[
        "--coord",
        "lat=latitude",
        "--coord",
        "lon=lon",
        "--attr",
        "units=K",
    ]);
    assert_eq!(code, 0, "{e}");
    let (_, o, _) = run(&["info", "--json", "--metadata", &p("s.tet")]);
    let v: serde_json::Value = serde_json::from_str(&o).unwrap();
    let ds = v["metadata"]["datasets"].as_array().unwrap();
    let of = |n: &str| ds.iter().find(|x| x["dataset"] == n).unwrap().clone();
    assert_eq!(of("t2m")["attrs"]["units"], "K", "{v}");
    assert!(of("latitude")["attrs"].get("units").is_none(), "{v}");
    assert_eq!(of("latitude")["dims"], serde_json::json!(["lat"]), "{v}");
}

/// A query that needs the axis metadata exits 4 when the file's own metadata or
/// coordinate dataset is damaged (the input's damage), 16 when the query names what is
/// not there (the user's error); an integer dataset with a `_FillValue` answers the
/// `nan_*` family in f64 with the fill left out.
#[test]
fn damaged_metadata_is_the_files_problem_and_integers_mask() {
    let d = dir();
    inputs(&d);
    convert_weather("dmg.tet");
    let good = std::fs::read(d.join("dmg.tet")).unwrap();
    // The time coordinate's only chunk (raw, 4 i64): one flipped bit fails its checksum.
    let needle: Vec<u8> = 1_704_067_200i64.to_le_bytes().to_vec();
    let at = good.windows(8).position(|w| w == needle).unwrap();
    let mut b = good.clone();
    b[at] ^= 1;
    std::fs::write(d.join("dmg-coord.tet"), &b).unwrap();
    let label = r#"{"dataset": "temp", "selection": [{"start_label": 1704070800}], "sum": []}"#;
    let (c, _, e) = query("dmg-coord.tet", label);
    assert_eq!(c, 4, "{e}");
    assert!(e.contains("coordinate dataset \"time\""), "{e}");
    // The footer's metadata JSON no longer parses.
    let key = b"\"dim_names\":[";
    let at = good.windows(key.len()).position(|w| w == key).unwrap();
    let mut b = good.clone();
    b[at + key.len() - 1] = b'{';
    std::fs::write(d.join("dmg-meta.tet"), &b).unwrap();
    let (c, _, e) = query("dmg-meta.tet", r#"{"dataset": "temp", "mean": "time"}"#);
    assert_eq!(c, 4, "{e}");
    assert!(e.contains("metadata"), "{e}");
    // A nan_* reduction still runs on the elements as stored, and says what it missed.
    let (c, o, e) = query("dmg-meta.tet", r#"{"dataset": "temp", "nan_min": []}"#);
    assert_eq!((c, o.as_str()), (0, "temp nan_min = -9999.0\n"), "{e}");
    assert!(
        e.contains("without the missing-value markers or packing"),
        "{e}"
    );
    // The user's own error stays 16.
    let (c, _, e) = query("dmg.tet", r#"{"dataset": "temp", "mean": "depth"}"#);
    assert_eq!(c, 16, "{e}");

    // u16 counts with a fill of 65535, two cells missing.
    let counts: Vec<u16> = vec![3, 65535, 5, 7, 65535, 9];
    let raw: Vec<u8> = counts.iter().flat_map(|v| v.to_le_bytes()).collect();
    std::fs::write(d.join("counts.npy"), npy("<u2", false, &[2, 3], &raw)).unwrap();
    let (c, _, e) = run(&[
        "convert",
        "counts.npy",
        "counts.tet",
        "--force",
        "--dims",
        "y,x",
        "--attr",
        "_FillValue=65535",
    ]);
    assert_eq!(c, 0, "{e}");
    let (c, o, e) = run(&[
        "query",
        "-t",
        "counts.tet",
        r#"{"dataset": "counts", "nan_mean": "y"}"#,
    ]);
    assert_eq!(c, 0, "{e}");
    let v: serde_json::Value = serde_json::from_str(&o).unwrap();
    // Column 1 is all fill: NaN, with NumPy's all-NaN warning.
    assert_eq!(
        v["result"]["data"],
        serde_json::json!([5.0, "NaN", 7.0]),
        "{o}"
    );
    assert!(
        e.contains("only NaN elements in 1 output cell(s), first [1]"),
        "{e}"
    );
    assert_eq!(v["result_dtype"], "f64", "{o}");
}

/// A `datetime64` coordinate (NumPy's `<M8[s]`) is stored as CF encodes it (int64
/// seconds since 1970-01-01, `calendar` proleptic_gregorian), shown as dates by `info`,
/// selected by ISO dates, and exported back as `datetime64`; NaT is its `_FillValue`.
#[test]
fn datetime64_coordinates() {
    let d = dir();
    inputs(&d);
    let times: Vec<i64> = (0..4).map(|h| 1_704_067_200 + 3600 * h).collect();
    std::fs::write(d.join("dt.npy"), npy("<M8[s]", false, &[4], &i64s(&times))).unwrap();
    let (c, _, e) = run(&[
        "convert",
        "temp.npy",
        "dt.tet",
        "--force",
        "--dims",
        "time,lat,lon",
        "--coord",
        "time=dt.npy",
    ]);
    assert_eq!(c, 0, "{e}");
    let (c, o, e) = run(&["info", "dt.tet", "--metadata"]);
    assert_eq!(c, 0, "{e}");
    assert!(
        o.contains(
            "  coord:  time (dataset time), 4 value(s), 1704067200 .. 1704078000 \
             (2024-01-01T00:00:00 .. 2024-01-01T03:00:00)"
        ),
        "{o}"
    );
    assert!(
        o.contains("  attr:   units = seconds since 1970-01-01"),
        "{o}"
    );
    assert!(
        o.contains("  attr:   calendar = proleptic_gregorian"),
        "{o}"
    );
    // Dates select: [01:00, 03:00) is hours 1 and 2, 12 elements; a date between two
    // values starts at the next.
    let q = r#"{"dataset": "temp", "selection": [{"start_label": "2024-01-01T01:00", "stop_label": "2024-01-01 03:00:00"}], "count": []}"#;
    assert_eq!(query("dt.tet", q).1, "temp count = 12\n");
    let q =
        r#"{"dataset": "temp", "selection": [{"start_label": "2024-01-01T00:30"}], "count": []}"#;
    assert_eq!(query("dt.tet", q).1, "temp count = 18\n");
    let q = r#"{"dataset": "temp", "selection": [{"start_label": "2024-02-30"}], "count": []}"#;
    let (c, _, e) = query("dt.tet", q);
    assert_eq!(c, 16);
    assert!(
        e.contains("\"2024-02-30\" is not a date of the calendar"),
        "{e}"
    );
    // Exported back with its own dtype.
    let (c, _, e) = run(&[
        "export",
        "dt.tet",
        "--dataset",
        "time",
        "back.npy",
        "--force",
    ]);
    assert_eq!(c, 0, "{e}");
    let back = std::fs::read(d.join("back.npy")).unwrap();
    let head = String::from_utf8_lossy(&back[..128]).to_string();
    assert!(head.contains("'descr': '<M8[s]'"), "{head}");
    assert!(back.ends_with(&i64s(&times)));
    // NaT marks missing; an unsupported unit is refused by name.
    let nat = [i64::MIN, 5, 7];
    std::fs::write(d.join("nat.npy"), npy("<m8[ms]", false, &[3], &i64s(&nat))).unwrap();
    let (c, _, e) = run(&["convert", "nat.npy", "nat.tet", "--force"]);
    assert_eq!(c, 0, "{e}");
    let (_, o, _) = run(&["info", "nat.tet", "--metadata"]);
    assert!(o.contains("  attr:   units = milliseconds"), "{o}");
    assert!(
        o.contains("  attr:   _FillValue = -9223372036854775808"),
        "{o}"
    );
    let (c, o, e) = query("nat.tet", r#"{"dataset": "nat", "nan_mean": []}"#);
    assert_eq!(c, 0, "{e}");
    assert_eq!(o, "nat nan_mean = 6.0\n");
    std::fs::write(d.join("y.npy"), npy("<M8[Y]", false, &[1], &i64s(&[54]))).unwrap();
    let (c, _, e) = run(&["convert", "y.npy", "y.tet", "--force"]);
    assert_eq!(c, 16);
    assert!(e.contains("datetime64[Y] has no CF unit here"), "{e}");
}
