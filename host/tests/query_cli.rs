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
    assert_eq!(o.lines().count(), 6);
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
    assert_eq!(o, "[0]\t100\n[1]\t101\n");
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
        r#"{"dataset":"a","op":"sum","dtype":"u64","result":73786976294838206460}"#
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
