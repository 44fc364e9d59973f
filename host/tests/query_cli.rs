//! `tet-host query` end to end: the JSON output of every operation on the example file
//! (golden), TOML documents with arrays of tables, standard input, exit codes, `--plan`,
//! `--output` NumPy files, and the conformance corpus through the command line.

#![allow(clippy::restriction, reason = "tests and benches fail by panicking")]

use std::path::PathBuf;

mod common;
use common::golden;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn q(doc: &str, extra: &[&str]) -> (i32, String, String) {
    let mut args = vec!["query", doc, "-t", "docs/examples/temperature.tet"];
    args.extend_from_slice(extra);
    let (c, o, e) = common::run(&args, &root());
    (c, String::from_utf8(o).unwrap(), e)
}

#[test]
fn every_operation_golden() {
    let mut out = String::new();
    for ds in ["temperature", "station_id", "pressure"] {
        for op in tet_host::tet::query_doc::OPS
            .iter()
            .filter(|o| **o != "quantile")
        {
            for axes in ["[]", "0"] {
                let doc = format!(r#"{{"dataset": "{ds}", "{op}": {axes}}}"#);
                let (code, o, e) = q(&doc, &[]);
                out.push_str(&format!("{doc} -> {code} {o}{e}"));
                if !o.ends_with('\n') && !e.ends_with('\n') {
                    out.push('\n');
                }
            }
        }
        let doc = format!(r#"{{"dataset": "{ds}", "quantile": {{"q": 0.25, "axis": 0}}}}"#);
        let (code, o, _) = q(&doc, &[]);
        out.push_str(&format!("{doc} -> {code} {o}"));
    }
    golden("query_ops.out", &out);
}

#[test]
fn toml_stdin_and_selection_forms() {
    let toml = "dataset = \"pressure\"\nstd = { axes = [0], ddof = 1 }\n\n[[selection]]\nstart = 2\n\n[[selection]]\nstop = -1\nstep = 3\n";
    let dir = std::env::temp_dir().join(format!("tet-query-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("q.toml"), toml).unwrap();
    let path = dir.join("q.toml");
    let (code, from_file, _) = q(path.to_str().unwrap(), &[]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&from_file).unwrap();
    assert_eq!(v["result"]["shape"], serde_json::json!([5]));
    // The same document inline, and on standard input.
    let (_, inline, _) = q(toml, &[]);
    assert_eq!(inline, from_file);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tet-host"))
        .args(["query", "-", "-t", "docs/examples/temperature.tet"])
        .current_dir(root())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().unwrap().write_all(toml.as_bytes())?;
            c.wait_with_output()
        })
        .unwrap();
    assert_eq!(String::from_utf8(out.stdout).unwrap(), from_file);
    // Null and omitted bounds, a stop past the end.
    let (code, o, _) = q(
        r#"{"dataset": "temperature", "selection": [{"start": null, "stop": 100}, {"step": 2}], "sum": []}"#,
        &[],
    );
    assert_eq!(code, 0);
    assert!(o.contains(r#""result":66.0"#), "{o}");
}

#[test]
fn refusals_name_what_is_wrong() {
    for (doc, needle) in [
        (
            r#"{"dataset": "pressure", "sum": [], "max": []}"#,
            "two operations",
        ),
        (
            r#"{"dataset": "pressure", "summ": []}"#,
            "unknown key \"summ\"",
        ),
        (
            r#"{"dataset": "pressure", "sum": [2]}"#,
            "axis 2 is out of range",
        ),
        (
            r#"{"dataset": "pressure", "selection": [{"step": -1}], "sum": []}"#,
            "selection axis 0: step must be at least 1",
        ),
        (r#"{"dataset": "nope", "sum": []}"#, "no dataset \"nope\""),
        (
            r#"{"dataset": "pressure", "sum": {"ddof": 1}}"#,
            "unknown parameter \"ddof\"",
        ),
        (
            r#"{"dataset": "pressure", "quantile": []}"#,
            "quantile needs",
        ),
        ("dataset = ", "query TOML"),
    ] {
        let (code, _, err) = q(doc, &[]);
        assert_eq!(code, 16, "{doc}: {err}");
        assert!(err.contains(needle), "{doc}: {err}");
    }
    // A request the data cannot satisfy is not a usage error: exit 8.
    let (code, _, err) = q(
        r#"{"dataset": "pressure", "selection": [{"start": 99}], "max": []}"#,
        &[],
    );
    assert_eq!(code, 8, "{err}");
    assert!(err.contains("needs at least one element"), "{err}");
    let (code, _, err) = q(
        r#"{"dataset": "pressure", "sum": []}"#,
        &["--memory-budget", "1K"],
    );
    assert_eq!(code, 8, "{err}");
}

#[test]
fn plan_quiet_table_and_npy_output() {
    let (code, o, _) = q(
        r#"{"dataset": "pressure", "selection": [{"step": 9}, {"step": 9}], "sum": []}"#,
        &["--plan"],
    );
    assert_eq!(code, 0);
    assert!(
        o.contains("4 chunk(s), 760 bytes to read, 2048 bytes to decode"),
        "{o}"
    );
    let (_, o, _) = q(r#"{"dataset": "station_id", "max": []}"#, &["-q"]);
    assert_eq!(o, "station_id max = 105\n");
    let (_, o, _) = q(
        r#"{"dataset": "temperature", "sum": 0}"#,
        &["--format", "table"],
    );
    assert_eq!(
        o,
        "# temperature sum over axes [0]: result f64, dataset f32, shape [6]\n\
         # coordinates: dataset indices along axes [1] (the selection starts at 0 with step 1 there)\n\
         [0]\t18.0\n[1]\t20.0\n[2]\t22.0\n[3]\t24.0\n[4]\t26.0\n[5]\t28.0\n"
    );
    let dir = std::env::temp_dir().join(format!("tet-query-npy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let npy = dir.join("out.npy");
    let (code, _, e) = q(
        r#"{"dataset": "pressure", "mean": 1}"#,
        &["--output", npy.to_str().unwrap()],
    );
    assert_eq!(code, 0, "{e}");
    let b = std::fs::read(&npy).unwrap();
    assert!(b.starts_with(b"\x93NUMPY\x01\x00"));
    let hlen = u16::from_le_bytes([b[8], b[9]]) as usize;
    let header = std::str::from_utf8(&b[10..10 + hlen]).unwrap();
    assert!(
        header.contains("'descr': '<f8'") && header.contains("'shape': (16,)"),
        "{header}"
    );
    assert_eq!((10 + hlen) % 64, 0);
    assert_eq!(b.len() - 10 - hlen, 16 * 8);
    let first = f64::from_le_bytes(b[10 + hlen..18 + hlen].try_into().unwrap());
    assert_eq!(first, 1000.0 + 7.5 / 4.0);
    // Values without an operation, previewed.
    let (_, o, _) = q(r#"{"dataset": "station_id"}"#, &["--preview", "2"]);
    assert_eq!(
        o,
        "# station_id values: dtype u16, shape [6]\n\
         # coordinates: dataset indices along axes [0] (the selection starts at 0 with step 1 there)\n\
         [0]\t100\n[1]\t101\n\
         # first 2 of 6 values (--output FILE.npy writes them all)\n"
    );
}

#[test]
fn conformance_values_through_the_command_line() {
    let dir = root().join("../shared/conformance/tet-upstream");
    if !dir.is_dir() {
        assert!(std::env::var_os("CI").is_none(), "CI needs ../shared");
        return;
    }
    for (f, ds, op, want) in [
        ("sample.tet", "temperature", "sum", "21.0"),
        ("sample.tet", "temperature", "mean", "3.5"),
        ("sample.tet", "temperature", "min", "1.0"),
        ("sample.tet", "temperature", "max", "6.0"),
        ("multichunk_u8.tet", "a", "sum", "21"),
        ("multichunk_u32.tet", "a", "mean", "3.5"),
        ("multichunk_f16.tet", "a", "sum", "21.0"),
        ("large.tet", "a", "sum", "2366400.0"),
        ("large.tet", "a", "mean", "1087.5"),
        ("large.tet", "a", "max", "2175.0"),
    ] {
        let path = dir.join(f);
        let (code, o, e) = common::run(
            &[
                "query",
                &format!(r#"{{"dataset": "{ds}", "{op}": []}}"#),
                "-t",
                path.to_str().unwrap(),
            ],
            &root(),
        );
        assert_eq!(code, 0, "{e}");
        let o = String::from_utf8(o).unwrap();
        assert!(
            o.contains(&format!(r#""result":{want}}}"#)),
            "{f} {op}: {o}"
        );
    }
}

/// Runs a query on `bytes` written to a scratch file.
fn q_on(name: &str, bytes: &[u8], doc: &str, extra: &[&str]) -> (i32, String, String) {
    let dir = std::env::temp_dir().join(format!("tet-query-numpy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(name), bytes).unwrap();
    let mut args = vec!["query", doc, "-t", name];
    args.extend_from_slice(extra);
    let (c, o, e) = common::run(&args, &dir);
    (c, String::from_utf8(o).unwrap(), e)
}

fn one_dataset(dtype: tet_core::tet::DType, shape: &[u64], data: &[u8]) -> Vec<u8> {
    use tet_alloc::tet::writer::{DatasetSpec, Writer};
    let spec = [DatasetSpec {
        name: "a",
        dtype,
        shape,
        chunk_shape: shape,
    }];
    let mut w = Writer::new(Vec::new(), &spec).unwrap();
    w.write_array(tet_core::tet::DatasetId(0), data, tet_core::tet::Codec::Raw)
        .unwrap();
    w.finish(None).unwrap()
}

#[test]
fn numpy_answers_through_the_command_line() {
    use tet_core::tet::DType;
    // A sum past 64 bits is an exact JSON integer; .npy output of it is refused.
    let big: Vec<u8> = [u64::MAX; 4].iter().flat_map(|v| v.to_le_bytes()).collect();
    let b = one_dataset(DType::U64, &[2, 2], &big);
    let (code, o, e) = q_on("big.tet", &b, r#"{"dataset": "a", "sum": []}"#, &[]);
    assert_eq!(code, 0, "{e}");
    assert_eq!(
        o.trim(),
        r#"{"dataset":"a","op":"sum","dtype":"u64","result_dtype":"i128","result":73786976294838206460}"#
    );
    let (code, o, _) = q_on("big.tet", &b, r#"{"dataset": "a", "sum": 0}"#, &["-q"]);
    assert_eq!(code, 0);
    assert_eq!(
        o.trim(),
        r#"a sum = {"shape":[2],"data":[36893488147419103230,36893488147419103230]}"#
    );
    let (code, _, e) = q_on(
        "big.tet",
        &b,
        r#"{"dataset": "a", "sum": 0}"#,
        &["--output", "s.npy"],
    );
    assert_eq!(code, 16);
    assert!(e.contains("outside 64 bits"), "{e}");
    // An all-NaN output cell is NaN, with one warning naming the first and the count.
    let n = f64::NAN;
    let v: Vec<u8> = [n, n, 2.0, 4.0, n, n]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let b = one_dataset(DType::F64, &[3, 2], &v);
    let (code, o, e) = q_on("nan.tet", &b, r#"{"dataset": "a", "nan_mean": 1}"#, &[]);
    assert_eq!(code, 0, "{e}");
    assert!(o.contains(r#""data":["NaN",3.0,"NaN"]"#), "{o}");
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(
        e.contains("nan_mean had only NaN elements in 2 output cell(s), first [0]"),
        "{e}"
    );
    // Quantiles as numpy.quantile: an integer q = 0 over [-inf, 1, 2, 5] is -inf.
    let v: Vec<u8> = [f64::NEG_INFINITY, 1.0, 2.0, 5.0]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let b = one_dataset(DType::F64, &[4], &v);
    let (_, o, _) = q_on(
        "inf.tet",
        &b,
        r#"{"dataset": "a", "quantile": {"q": 0}}"#,
        &["-q"],
    );
    assert_eq!(o.trim(), "a quantile = -inf");
    let (_, o, _) = q_on("inf.tet", &b, r#"{"dataset": "a", "median": []}"#, &["-q"]);
    assert_eq!(o.trim(), "a median = 1.5");
}

/// A scratch directory for one test.
fn scratch(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tet-query-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn a_mistyped_query_file_is_no_such_file_and_syntax_errors_point_into_the_text() {
    for arg in [
        "nope.json",
        "q.TOML",
        "queries/mean",
        "{\"dataset\": 1}.json",
    ] {
        let (code, o, e) = q(arg, &["-q"]);
        assert_eq!(code, 8, "{arg}: {e}");
        assert_eq!(o, "");
        assert_eq!(
            e,
            format!(
                "tet-host: cannot read the query {arg}: no such file (an inline query is a JSON \
                 object, '{{\"dataset\": ...}}', or TOML, 'dataset = ...')\n"
            ),
            "{arg}"
        );
    }
    let d = scratch("syntax");
    let (code, _, e) = q(d.to_str().unwrap(), &["-q"]);
    assert_eq!(code, 8);
    assert!(e.ends_with("it is a directory\n"), "{e}");
    // Inline JSON: the line, and a caret under the column the parser stopped at.
    let (code, _, e) = q(r#"{"dataset": "pressure" "sum": []}"#, &["-q"]);
    assert_eq!(code, 16);
    assert_eq!(
        e,
        "tet-host: query JSON: expected `,` or `}` at line 1 column 24\n  |\n1 | {\"dataset\": \
         \"pressure\" \"sum\": []}\n  |                        ^\n"
    );
    // A JSON file: named, and the line of the file.
    std::fs::write(
        d.join("q.json"),
        "{\n  \"dataset\": \"pressure\",\n  \"mean\": [],,\n}\n",
    )
    .unwrap();
    let (code, _, e) = q(d.join("q.json").to_str().unwrap(), &["-q"]);
    assert_eq!(code, 16);
    assert_eq!(
        e,
        format!(
            "tet-host: query JSON in {}: key must be a string at line 3 column 14\n  |\n3 |   \
             \"mean\": [],,\n  |              ^\n",
            d.join("q.json").display()
        )
    );
    // A TOML file: named, with the TOML parser's own excerpt.
    std::fs::write(d.join("q.toml"), "dataset = \"pressure\"\nmean = [\n").unwrap();
    let (code, _, e) = q(d.join("q.toml").to_str().unwrap(), &["-q"]);
    assert_eq!(code, 16);
    assert_eq!(
        e,
        format!(
            "tet-host: query TOML in {}: TOML parse error at line 2, column 9\n  |\n2 | mean = \
             [\n  |         ^\nunclosed array, expected `]`\n",
            d.join("q.toml").display()
        )
    );
    // A .json file is read as JSON even when it does not start with '{'.
    std::fs::write(d.join("list.json"), "[1]").unwrap();
    let (code, _, e) = q(d.join("list.json").to_str().unwrap(), &["-q"]);
    assert_eq!(code, 16);
    assert_eq!(
        e,
        "tet-host: the query must be an object (JSON) or a table (TOML)\n"
    );
}

#[test]
fn axes_repeated_both_keys_and_negative() {
    for (doc, says) in [
        (
            r#"{"dataset": "pressure", "sum": [0, 0]}"#,
            "tet-host: docs/examples/temperature.tet: axis 0 is named twice\n",
        ),
        (
            r#"{"dataset": "pressure", "sum": [1, -1]}"#,
            "tet-host: docs/examples/temperature.tet: axis -1 is axis 1, named twice\n",
        ),
        (
            r#"{"dataset": "pressure", "mean": {"axis": 0, "axes": [1]}}"#,
            "tet-host: mean has both \"axis\" and \"axes\"; give one of them\n",
        ),
        (
            r#"{"dataset": "pressure", "sum": -3}"#,
            "tet-host: docs/examples/temperature.tet: axis -3 is out of range for a dataset \
             with 2 axes (0 ..= 1, or -2 ..= -1 from the end)\n",
        ),
    ] {
        let (code, o, e) = q(doc, &["-q"]);
        assert_eq!((code, o.as_str(), e.as_str()), (16, "", says), "{doc}");
    }
    // -1 is the last axis, -2 the first: the same answers as 1 and 0.
    for (neg, pos) in [("-1", "1"), ("-2", "0"), ("[-2, -1]", "[0, 1]")] {
        let (c1, a, _) = q(&format!(r#"{{"dataset": "pressure", "mean": {neg}}}"#), &[]);
        let (c2, b, _) = q(&format!(r#"{{"dataset": "pressure", "mean": {pos}}}"#), &[]);
        assert_eq!((c1, c2), (0, 0));
        assert_eq!(a, b, "{neg}");
    }
    let (_, o, _) = q(r#"{"dataset": "temperature", "max": -2}"#, &["-q"]);
    assert_eq!(
        o,
        "temperature max = {\"shape\":[6],\"data\":[9.0,9.5,10.0,10.5,11.0,11.5]}\n"
    );
}

#[test]
fn preview_quiet_values_dtypes_and_table_index_space() {
    // --preview on a partial result: the first N cells as a table, and how many there were.
    let (code, o, _) = q(
        r#"{"dataset": "pressure", "median": 0}"#,
        &["--preview", "3"],
    );
    assert_eq!(code, 0);
    assert_eq!(
        o,
        "# pressure median over axes [0]: result f64, dataset f64, shape [16]\n\
         # coordinates: dataset indices along axes [1] (the selection starts at 0 with step 1 there)\n\
         [0]\t1030.0\n[1]\t1030.25\n[2]\t1030.5\n\
         # first 3 of 16 cells (--output FILE.npy writes them all)\n"
    );
    // -q on a selection without an operation: one line, not 256 values.
    let (code, o, _) = q(r#"{"dataset": "pressure"}"#, &["-q"]);
    assert_eq!(code, 0);
    assert_eq!(
        o,
        "pressure values: shape [16, 16], dtype f64, 256 value(s)\n"
    );
    let (_, o, _) = q(
        r#"{"dataset": "pressure", "selection": [{"stop": 3}, {"start": 1, "step": 5}]}"#,
        &["-q"],
    );
    assert_eq!(o, "pressure values: shape [3, 3], dtype f64, 9 value(s)\n");
    // The result's dtype beside the dataset's; the operation as asked (median, not quantile).
    let (_, o, _) = q(r#"{"dataset": "station_id", "median": []}"#, &[]);
    assert_eq!(
        o,
        "{\"dataset\":\"station_id\",\"op\":\"median\",\"dtype\":\"u16\",\"result_dtype\":\"f64\",\"result\":102.5}\n"
    );
    let (_, o, _) = q(r#"{"dataset": "station_id", "sum": []}"#, &[]);
    assert!(
        o.contains(r#""dtype":"u16","result_dtype":"u64","result":615"#),
        "{o}"
    );
    let (_, o, _) = q(
        r#"{"dataset": "station_id", "selection": [{"stop": 2}]}"#,
        &[],
    );
    assert_eq!(
        o,
        "{\"dataset\":\"station_id\",\"op\":null,\"dtype\":\"u16\",\"result_dtype\":\"u16\",\"result\":{\"shape\":[2],\"data\":[100,101]}}\n"
    );
    // A strided selection: the table says its coordinates are selection indices and how
    // they map to the dataset's; argmax says its values are dataset coordinates.
    let (_, o, _) = q(
        r#"{"dataset": "pressure", "selection": [{"start": 2, "step": 5}], "argmax": 1}"#,
        &["--format", "table"],
    );
    assert_eq!(
        o,
        "# pressure argmax over axes [1]: result coords, dataset f64, shape [3]\n\
         # coordinates: selection indices i along axes [0]; dataset index = axis 0: 2 + 5·i\n\
         # values: dataset coordinates of the first extreme (numpy.unravel_index)\n\
         [0]\t[2,15]\n[1]\t[7,15]\n[2]\t[12,15]\n"
    );
    let (_, o, _) = q(
        r#"{"dataset": "pressure", "mean": []}"#,
        &["--format", "table"],
    );
    assert_eq!(
        o,
        "# pressure mean over every axis: result f64, dataset f64, shape []\n1031.875\n"
    );
}

#[test]
fn budgets_in_units_and_percent_and_how_to_raise_them() {
    let doc = r#"{"dataset": "pressure", "median": []}"#;
    // The median gathers 2048 bytes of f64: the budget in every unit, exactly.
    for (b, bytes) in [
        ("1.5K", 1536u64),
        ("1KB", 1000),
        ("1KiB", 1024),
        ("0.001M", 1048),
        ("0.000001GB", 1000),
    ] {
        let (code, _, e) = q(doc, &["-q", "--memory-budget", b]);
        assert_eq!(code, 8, "{b}");
        assert_eq!(
            e,
            format!(
                "tet-host: docs/examples/temperature.tet: the quantile's elements needs 2048 \
                 bytes, over the memory budget of {bytes} bytes; raise it with --memory-budget \
                 SIZE (e.g. 512M, 2G or 50%; the budget came from --memory-budget)\n"
            ),
            "{b}"
        );
    }
    for b in ["512M", "512MiB", "512MB", "1.5G", "1GiB", "10%"] {
        let (code, o, e) = q(doc, &["-q", "--memory-budget", b]);
        assert_eq!(
            (code, o.as_str()),
            (0, "pressure median = 1031.875\n"),
            "{b}: {e}"
        );
    }
    // A percentage is of this machine's memory, as the file's TIDX settings are.
    let ram = tet_host::budget::host_ram();
    let (_, _, e) = q(doc, &["-q", "--memory-budget", "0.0000001%"]);
    assert!(
        e.contains(&format!(
            "over the memory budget of {} bytes",
            ram / 1_000_000_000
        )),
        "{e}"
    );
    let (code, _, e) = q(doc, &["--memory-budget", "12 parsecs"]);
    assert_eq!(code, 16);
    assert!(
        e.contains(
            "invalid memory budget '12 parsecs' (a number of bytes with an optional unit: \
             512M or 512MiB (2^20 bytes), 512MB (10^6), 1.5G, 1GiB, or a percentage of RAM: 10%)"
        ),
        "{e}"
    );
    // The budget from the query's execution object says so.
    let (code, _, e) = q(
        r#"{"dataset": "pressure", "median": [], "execution": {"memory_budget_bytes": 100}}"#,
        &["-q"],
    );
    assert_eq!(code, 8);
    assert!(
        e.ends_with("the budget came from the query's execution object)\n"),
        "{e}"
    );
}

#[test]
fn unknown_datasets_are_listed_by_every_command() {
    let (code, _, e) = q(r#"{"dataset": "presure", "sum": []}"#, &["-q"]);
    assert_eq!(code, 16);
    assert_eq!(
        e,
        "tet-host: docs/examples/temperature.tet: no dataset \"presure\" (datasets: \
         \"temperature\", \"station_id\", \"pressure\")\n"
    );
    let d = scratch("nods");
    let example = root().join("docs/examples/temperature.tet");
    let (code, _, e) = common::run(
        &[
            "export",
            example.to_str().unwrap(),
            "--dataset",
            "presure",
            "x.npy",
        ],
        &d,
    );
    assert_eq!(code, 16);
    assert_eq!(
        e,
        format!(
            "tet-host: {}: no dataset \"presure\" (datasets: \"temperature\", \"station_id\", \
             \"pressure\")\n",
            example.display()
        )
    );
    assert!(!d.join("x.npy").exists());
}

#[test]
fn flags_that_do_nothing_are_gone_or_say_what_they_do() {
    let doc = r#"{"dataset": "pressure", "mean": []}"#;
    // --deep: query and export read only the chunks they need, repair decodes them all.
    let (code, _, e) = q(doc, &["--deep"]);
    assert_eq!(code, 16);
    assert!(
        e.starts_with("error: unexpected argument '--deep' found"),
        "{e}"
    );
    let d = scratch("flags");
    let example = root().join("docs/examples/temperature.tet");
    let ex = example.to_str().unwrap();
    for args in [
        vec!["export", ex, "--dataset", "pressure", "p.npy", "--deep"],
        vec!["export", ex, "--dataset", "pressure", "p.npy", "-j", "2"],
        vec!["repair", ex, "-n", "--deep"],
    ] {
        let (code, _, e) = common::run(&args, &d);
        assert_eq!(code, 16, "{args:?}");
        assert!(e.starts_with("error: unexpected argument"), "{args:?}: {e}");
    }
    // -x is accepted (the other implementation needs it), runs the query as without it,
    // and is refused beside --plan, which does not run it.
    let (code, o, _) = q(doc, &["-x", "-q"]);
    assert_eq!((code, o.as_str()), (0, "pressure mean = 1031.875\n"));
    let (code, _, e) = q(doc, &["-x", "--plan"]);
    assert_eq!(code, 16);
    assert!(e.contains("cannot be used with '--plan'"), "{e}");
    let (_, help, _) = common::run(&["query", "--help"], &d);
    let help = String::from_utf8(help).unwrap();
    assert!(
        help.contains("No effect: queries always run here (--plan prints the plan instead)"),
        "{help}"
    );
}

/// Splits a shell line of words and single-quoted strings (all the docs use).
fn words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    let mut any = false;
    for c in line.chars() {
        match c {
            '\'' => {
                quoted = !quoted;
                any = true;
            }
            ' ' if !quoted => {
                if any {
                    out.push(std::mem::take(&mut cur));
                    any = false;
                }
            }
            c => {
                cur.push(c);
                any = true;
            }
        }
    }
    assert!(!quoted, "unbalanced quote in {line}");
    if any {
        out.push(cur);
    }
    out
}

/// Every `$ tet-host ...` line in docs/query.md's console blocks prints exactly the lines
/// under it.
#[test]
fn the_examples_in_docs_query_md_print_what_they_say() {
    let doc = std::fs::read_to_string(root().join("docs/query.md")).unwrap();
    let mut examples: Vec<(String, String)> = Vec::new();
    let mut in_block = false;
    for line in doc.lines() {
        if line.starts_with("```") {
            in_block = line == "```console";
            continue;
        }
        if !in_block {
            continue;
        }
        if let Some(cmd) = line.strip_prefix("$ ") {
            examples.push((cmd.to_string(), String::new()));
        } else if let Some((_, out)) = examples.last_mut() {
            out.push_str(line);
            out.push('\n');
        }
    }
    assert!(examples.len() >= 5, "{examples:?}");
    for (cmd, want) in &examples {
        let w = words(cmd);
        assert_eq!(w[0], "tet-host", "{cmd}");
        let (code, o, e) = common::run(&w[1..], &root());
        assert_eq!(code, 0, "{cmd}: {e}");
        assert_eq!(&String::from_utf8(o).unwrap(), want, "{cmd}");
    }
}

#[test]
fn histogram_parameters_are_checked_and_numpy_edge_cases_hold() {
    use tet_core::tet::DType;
    for (doc, says) in [
        (
            r#"{"dataset": "pressure", "histogram": {"bins": 0}}"#,
            "histogram.bins must be an integer 1 ..= 1048576, got 0",
        ),
        (
            r#"{"dataset": "pressure", "histogram": {"bins": 2097152}}"#,
            "histogram.bins must be an integer 1 ..= 1048576",
        ),
        (
            r#"{"dataset": "pressure", "histogram": {"bins": 1.5}}"#,
            "histogram.bins",
        ),
        (
            r#"{"dataset": "pressure", "histogram": {"range": [3, 1]}}"#,
            "histogram.range must be [min, max]",
        ),
        (
            r#"{"dataset": "pressure", "histogram": {"range": [1, 2, 3]}}"#,
            "histogram.range",
        ),
        (
            r#"{"dataset": "pressure", "histogram": {"range": ["a", 2]}}"#,
            "histogram.range",
        ),
        (
            r#"{"dataset": "pressure", "histogram": {"q": 0.5}}"#,
            "unknown parameter \"q\" for histogram",
        ),
    ] {
        let (code, _, e) = q(doc, &[]);
        assert_eq!(code, 16, "{doc}: {e}");
        assert!(e.contains(says), "{doc}: {e}");
    }
    // NumPy's autodetected range refuses NaN and inf; a given range counts them apart.
    let v: Vec<u8> = [f64::NAN, 1.0, 2.0, f64::INFINITY, -3.0, 2.0]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let b = one_dataset(DType::F64, &[6], &v);
    let (code, _, e) = q_on("h.tet", &b, r#"{"dataset": "a", "histogram": {}}"#, &[]);
    assert_eq!(code, 8, "{e}");
    assert!(e.contains("give histogram.range"), "{e}");
    let (code, o, e) = q_on(
        "h.tet",
        &b,
        r#"{"dataset": "a", "histogram": {"bins": 2, "range": [1, 2]}}"#,
        &["-q"],
    );
    assert_eq!(code, 0, "{e}");
    // np.histogram([1, 2, 2], 2, (1, 2)) is ([1, 2], [1, 1.5, 2]): the last bin is closed.
    assert_eq!(
        o.trim(),
        r#"a histogram = {"edges":[1.0,1.5,2.0],"counts":[1,2],"under":1,"over":1,"nan":1}"#
    );
    // An empty range widens by 0.5 each way, as NumPy's.
    let (_, o, _) = q_on(
        "h.tet",
        &b,
        r#"{"dataset": "a", "histogram": {"bins": 1, "range": [2, 2]}}"#,
        &["-q"],
    );
    assert!(o.contains(r#""edges":[1.5,2.5],"counts":[2]"#), "{o}");
}

#[test]
fn several_quantiles_in_one_pass_as_numpy_gives_them() {
    // np.quantile(np.arange(100, 106), [0.05, 0.5, 1]) is [100.25, 102.5, 105.0].
    let (code, o, e) = q(
        r#"{"dataset": "station_id", "quantile": {"q": [0.05, 0.5, 1]}}"#,
        &["-q"],
    );
    assert_eq!(code, 0, "{e}");
    assert_eq!(
        o.trim(),
        r#"station_id quantile = {"shape":[3],"data":[100.25,102.5,105.0]}"#
    );
    // Along an axis the quantiles are the first axis, as NumPy's.
    let (code, o, e) = q(
        r#"{"dataset": "temperature", "quantile": {"q": [0.25, 0.75], "axis": 1}}"#,
        &["-q"],
    );
    assert_eq!(code, 0, "{e}");
    assert!(o.contains(r#"{"shape":[2,4],"#), "{o}");
    let many = format!(
        r#"{{"dataset": "station_id", "quantile": {{"q": [{}]}}}}"#,
        vec!["0.5"; 17].join(",")
    );
    for (doc, says) in [
        (
            many.as_str(),
            "quantile.q: a list of 1 ..= 16 quantiles, got 17",
        ),
        (
            r#"{"dataset": "station_id", "quantile": {"q": []}}"#,
            "quantile.q: a list of 1 ..= 16 quantiles, got 0",
        ),
        (
            r#"{"dataset": "station_id", "quantile": {"q": [0.5, 1.5]}}"#,
            "quantile q = 1.5 is outside 0 ..= 1",
        ),
        (
            r#"{"dataset": "station_id", "quantile": {"q": [0.5, "x"]}}"#,
            "quantile.q must be a number or a list of numbers",
        ),
    ] {
        let (code, _, e) = q(doc, &[]);
        assert_eq!(code, 16, "{doc}: {e}");
        assert!(e.contains(says), "{doc}: {e}");
    }
}

/// A NumPy bool array converted from `.npy` (stored as u8 0/1, `numpy_dtype` b1) answers
/// min and max as booleans, as NumPy does; its sum stays an integer count.
#[test]
fn a_bool_dataset_answers_min_and_max_as_booleans() {
    let d = std::env::temp_dir().join(format!("tet-query-bool-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(
        d.join("b.npy"),
        common::npy("|b1", false, &[2, 2], &[0, 1, 0, 0]),
    )
    .unwrap();
    let (code, _, err) = common::run(&["convert", "b.npy", "b.tet"], &d);
    assert_eq!(code, 0, "{err}");
    let ask = |doc: &str| {
        let (code, o, e) = common::run(&["query", doc, "-t", "b.tet"], &d);
        assert_eq!(code, 0, "{doc}: {e}");
        serde_json::from_slice::<serde_json::Value>(&o).unwrap()
    };
    let v = ask(r#"{"dataset": "b", "max": []}"#);
    assert_eq!(v["result"], serde_json::json!(true), "{v}");
    assert_eq!(v["result_dtype"], "bool", "{v}");
    let v = ask(r#"{"dataset": "b", "min": 1}"#);
    assert_eq!(
        v["result"]["data"],
        serde_json::json!([false, false]),
        "{v}"
    );
    let v = ask(r#"{"dataset": "b", "nan_max": 0}"#);
    assert_eq!(v["result"]["data"], serde_json::json!([false, true]), "{v}");
    let v = ask(r#"{"dataset": "b", "sum": []}"#);
    assert_eq!(v["result"], serde_json::json!(1), "{v}");
    let _ = std::fs::remove_dir_all(&d);
}
