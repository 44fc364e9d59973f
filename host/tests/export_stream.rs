//! `tet-host export` streams: over several chunk shapes, selections with steps and memory
//! budgets small enough that slabs are gathered in pieces (and, for wide rows, along a
//! later axis), the `.npy` written is byte for byte the in-memory export's
//! (`gathered_npy`, the former path) and NumPy's slicing of the source array computed
//! here. The source-type checks (bool, int8) that fail part way give the in-memory
//! export's bytes and warning.

#![allow(clippy::restriction, reason = "tests and benches fail by panicking")]

use std::path::{Path, PathBuf};

mod common;
use common::npy;

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tet-export-stream-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Python's slice of one axis of length `n`: the selected indices.
fn axis_indices(n: u64, start: Option<i64>, stop: Option<i64>, step: u64) -> Vec<u64> {
    let n = n as i64;
    let norm = |v: i64| if v < 0 { (v + n).max(0) } else { v.min(n) };
    let a = start.map_or(0, norm);
    let b = stop.map_or(n, norm);
    (a..b).step_by(step as usize).map(|i| i as u64).collect()
}

/// NumPy's `a[sel]` of a C-order array of `es`-byte elements, as bytes.
fn numpy_slice(data: &[u8], shape: &[u64], es: usize, sel: &[Vec<u64>]) -> Vec<u8> {
    let mut out = Vec::new();
    let total: usize = sel.iter().map(Vec::len).product();
    for flat in 0..total {
        let mut rem = flat;
        let mut pick = vec![0u64; shape.len()];
        for d in (0..shape.len()).rev() {
            let len = sel[d].len();
            pick[d] = sel[d][rem % len];
            rem /= len;
        }
        let mut idx = 0u64;
        for d in 0..shape.len() {
            idx = idx * shape[d] + pick[d];
        }
        let at = idx as usize * es;
        out.extend_from_slice(&data[at..at + es]);
    }
    out
}

fn header_len(bytes: &[u8]) -> usize {
    10 + u16::from_le_bytes([bytes[8], bytes[9]]) as usize
}

/// The in-memory export of `sel` (the reference): bytes and warning.
fn gathered(tet: &Path, dataset: &str, sel: &str) -> (Vec<u8>, Option<String>) {
    let bytes = std::fs::read(tet).unwrap();
    let file = tet_core::tet::TetFile::open(&bytes).unwrap();
    let ds = file.dataset(dataset).unwrap();
    let slices = tet_host::tet::query_doc::parse_selection_arg(sel).unwrap();
    let p = tet_alloc::tet::query::plan(&file, ds, &slices).unwrap();
    let meta = tet_alloc::tet::history::metadata(&file).unwrap();
    let src = tet_host::tet::export::numpy_source(meta.as_ref(), dataset);
    tet_host::tet::export::gathered_npy(&file, &p, &src, 1 << 30).unwrap()
}

/// The streamed export of `sel` with slabs of at most `window` bytes, read back.
fn streamed(tet: &Path, dataset: &str, sel: &str, window: u64) -> (Vec<u8>, Option<String>) {
    let bytes = std::fs::read(tet).unwrap();
    let file = tet_core::tet::TetFile::open(&bytes).unwrap();
    let ds = file.dataset(dataset).unwrap();
    let slices = tet_host::tet::query_doc::parse_selection_arg(sel).unwrap();
    let p = tet_alloc::tet::query::plan(&file, ds, &slices).unwrap();
    let meta = tet_alloc::tet::history::metadata(&file).unwrap();
    let src = tet_host::tet::export::numpy_source(meta.as_ref(), dataset);
    let out = tet.with_extension(format!("w{window}.npy"));
    let released = std::cell::Cell::new(0u64);
    let why = tet_host::tet::export::write_npy(
        &file,
        &p,
        &src,
        &out,
        window,
        1 << 30,
        None,
        &|_, len| released.set(released.get() + len),
    )
    .unwrap();
    // Every touched chunk's stored bytes are released once written.
    let stored: u64 = p
        .rows
        .iter()
        .map(|r| file.rows()[*r as usize].stored_byte_len.get())
        .sum();
    assert!(released.get() >= stored, "{} < {stored}", released.get());
    (std::fs::read(&out).unwrap(), why)
}

fn selection_json(sel: &[(Option<i64>, Option<i64>, u64)]) -> String {
    let items: Vec<String> = sel
        .iter()
        .map(|(a, b, s)| {
            let f = |v: &Option<i64>| v.map_or("null".to_string(), |v| v.to_string());
            format!(r#"{{"start": {}, "stop": {}, "step": {s}}}"#, f(a), f(b))
        })
        .collect();
    format!("[{}]", items.join(", "))
}

#[test]
fn streamed_bytes_equal_the_gathered_export_and_numpy() {
    let d = dir("shapes");
    // (shape, chunk shapes, selections (start, stop, step) per axis)
    type Sel = Vec<(Option<i64>, Option<i64>, u64)>;
    type Case = (Vec<u64>, Vec<Vec<u64>>, Vec<Sel>);
    let cases: Vec<Case> = vec![
        (
            vec![37, 23],
            vec![
                vec![5, 4],
                vec![1, 23],
                vec![37, 1],
                vec![8, 23],
                vec![37, 23],
            ],
            vec![
                vec![],
                vec![(Some(3), Some(30), 2), (None, None, 3)],
                vec![(Some(-10), None, 1), (Some(5), Some(6), 1)],
                vec![(None, None, 7), (Some(1), Some(-1), 5)],
                vec![(Some(40), None, 1)],
            ],
        ),
        (
            vec![9, 6, 50],
            vec![vec![2, 3, 7], vec![1, 6, 50], vec![9, 1, 16]],
            vec![
                vec![],
                vec![(Some(1), None, 3), (None, None, 2), (Some(3), Some(45), 4)],
                vec![
                    (Some(4), Some(5), 1),
                    (Some(2), Some(3), 1),
                    (None, None, 1),
                ],
            ],
        ),
        (
            vec![300],
            vec![vec![7], vec![300], vec![64]],
            vec![
                vec![],
                vec![(Some(5), Some(290), 3)],
                vec![(None, None, 64)],
            ],
        ),
    ];
    let mut checked = 0;
    for (shape, chunks, sels) in &cases {
        let n: u64 = shape.iter().product();
        // f64 values that say where they came from.
        let data: Vec<u8> = (0..n)
            .flat_map(|i| (i as f64 * 0.5 - 3.0).to_le_bytes())
            .collect();
        let name = format!("a{}", shape.len());
        std::fs::write(
            d.join(format!("{name}.npy")),
            npy("<f8", false, shape, &data),
        )
        .unwrap();
        for (ci, chunk) in chunks.iter().enumerate() {
            let chunk_arg: Vec<String> = chunk.iter().map(u64::to_string).collect();
            let tet = format!("{name}-{ci}.tet");
            for codec in ["raw", "zstd"] {
                let (code, _, e) = common::run(
                    &[
                        "convert",
                        &format!("{name}.npy"),
                        &tet,
                        "--name",
                        &name,
                        "--chunk",
                        &chunk_arg.join(","),
                        "--codec",
                        codec,
                        "--force",
                    ],
                    &d,
                );
                assert_eq!(code, 0, "{e}");
                for sel in sels {
                    let sel_json = selection_json(sel);
                    let picks: Vec<Vec<u64>> = (0..shape.len())
                        .map(|a| {
                            let (s, t, st) = sel.get(a).copied().unwrap_or((None, None, 1));
                            axis_indices(shape[a], s, t, st)
                        })
                        .collect();
                    let want_body = numpy_slice(&data, shape, 8, &picks);
                    let (want, why) = gathered(&d.join(&tet), &name, &sel_json);
                    assert_eq!(why, None);
                    assert_eq!(
                        &want[header_len(&want)..],
                        &want_body[..],
                        "{tet} {sel_json}"
                    );
                    // The command (one slab at a time), then windows that cut slabs
                    // into pieces of a few rows, or of part of one row.
                    let args = [
                        "export",
                        &tet,
                        "--dataset",
                        &name,
                        "out.npy",
                        "--force",
                        "--selection",
                        &sel_json,
                    ];
                    let (code, _, e) = common::run(&args, &d);
                    assert_eq!((code, e.as_str()), (0, ""), "{tet} {sel_json}");
                    let got = std::fs::read(d.join("out.npy")).unwrap();
                    assert!(got == want, "{tet} {codec} {sel_json}");
                    for window in [8, 100, 700] {
                        let (got, why) = streamed(&d.join(&tet), &name, &sel_json, window);
                        assert_eq!(why, None);
                        assert!(got == want, "{tet} {codec} {sel_json} window {window}");
                        checked += 1;
                    }
                }
            }
        }
    }
    assert!(checked > 60, "{checked}");
}

#[test]
fn source_types_that_fail_their_check_late_give_the_stored_bytes() {
    let d = dir("types");
    // u8 values recorded as bool, the first bad one (2) far into the array.
    let mut bools = vec![0u8; 400];
    for (i, b) in bools.iter_mut().enumerate() {
        *b = (i % 2) as u8;
    }
    bools[333] = 2;
    std::fs::write(d.join("b.npy"), npy("|u1", false, &[20, 20], &bools)).unwrap();
    // i16 values recorded as int8, one outside it at element 250.
    let mut ints: Vec<i16> = (0..300).map(|i| (i % 200) as i16 - 100).collect();
    ints[250] = 300;
    let ib: Vec<u8> = ints.iter().flat_map(|v| v.to_le_bytes()).collect();
    std::fs::write(d.join("i.npy"), npy("<i2", false, &[300], &ib)).unwrap();
    // The same, all in range: exported as int8.
    let good: Vec<u8> = (0..300)
        .flat_map(|i| ((i % 200) as i16 - 100).to_le_bytes())
        .collect();
    std::fs::write(d.join("g.npy"), npy("<i2", false, &[300], &good)).unwrap();
    for (f, chunk, attr) in [
        ("b", "3,7", "numpy_dtype=|b1"),
        ("i", "16", "numpy_dtype=|i1"),
        ("g", "16", "numpy_dtype=|i1"),
    ] {
        let (code, _, e) = common::run(
            &[
                "convert",
                &format!("{f}.npy"),
                &format!("{f}.tet"),
                "--chunk",
                chunk,
                "--attr",
                attr,
            ],
            &d,
        );
        assert_eq!(code, 0, "{e}");
        let (want, why) = gathered(&d.join(format!("{f}.tet")), f, "[]");
        let args = [
            "export",
            &format!("{f}.tet"),
            "--dataset",
            f,
            "out.npy",
            "--force",
        ];
        let (code, _, e) = common::run(&args, &d);
        assert_eq!(code, 0, "{e}");
        assert_eq!(
            e,
            why.clone().map_or(String::new(), |w| format!(
                "tet-host: {f}.tet: warning: {w}\n"
            )),
            "{f}"
        );
        // Small windows: many slabs, so the bad element is met after some are written.
        for window in [16, 50] {
            let (got, w) = streamed(&d.join(format!("{f}.tet")), f, "[]", window);
            assert!(got == want, "{f} window {window}");
            assert_eq!(w, why, "{f} window {window}");
        }
        let got = std::fs::read(d.join("out.npy")).unwrap();
        assert_eq!(got, want, "{f}");
        match f {
            "b" => {
                assert_eq!(
                    why.as_deref(),
                    Some("the source was bool, but element 333 is 2, not 0 or 1: written as u8")
                );
                assert!(String::from_utf8_lossy(&got[..header_len(&got)]).contains("'|u1'"));
                assert_eq!(&got[header_len(&got)..], &bools[..]);
            }
            "i" => {
                assert_eq!(
                    why.as_deref(),
                    Some(
                        "the source was int8, but element 250 is 300, outside int8: written as i16"
                    )
                );
                assert_eq!(&got[header_len(&got)..], &ib[..]);
            }
            _ => {
                assert_eq!(why, None);
                assert!(String::from_utf8_lossy(&got[..header_len(&got)]).contains("'|i1'"));
                let narrow: Vec<u8> = (0..300)
                    .map(|i| ((i % 200) as i16 - 100) as i8 as u8)
                    .collect();
                assert_eq!(&got[header_len(&got)..], &narrow[..]);
            }
        }
        assert_eq!(
            e,
            why.map_or(String::new(), |w| format!(
                "tet-host: {f}.tet: warning: {w}\n"
            )),
            "{f}"
        );
    }
}
