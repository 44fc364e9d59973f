//! `tet-host transform`: every transform over float and integer datasets (raw and zstd
//! chunks, edge chunks, NaN and ±inf) reads back equal, bit for bit, to NumPy's
//! expression computed here in `f64` as NumPy computes it (the expressions of
//! docs/query.md, "Transforms"), with the statistics the history row records, which are
//! checked against a plain `f64` reference; the output type is NumPy's; the output
//! does not depend on `-j`; chunking, codecs, dims, coordinates and attrs are kept; the
//! history row names the transform, its parameters and the source; the input is never
//! overwritten.

#![allow(clippy::restriction, reason = "tests and benches fail by panicking")]

use std::path::{Path, PathBuf};

mod common;
use common::npy;
use tet_core::tet::DType;

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tet-transform-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// An array to transform: descr, element bytes, values as f64 (integers exactly).
struct Src {
    descr: &'static str,
    dtype: DType,
    bytes: Vec<u8>,
    values: Vec<f64>,
}

fn floats(descr: &'static str, dtype: DType, v: &[f64]) -> Src {
    let bytes = match dtype {
        DType::F64 => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        DType::F32 => v.iter().flat_map(|x| (*x as f32).to_le_bytes()).collect(),
        DType::F16 => v
            .iter()
            .flat_map(|x| half::f16::from_f64(*x).to_le_bytes())
            .collect(),
        _ => unreachable!(),
    };
    let values = match dtype {
        DType::F64 => v.to_vec(),
        DType::F32 => v.iter().map(|x| f64::from(*x as f32)).collect(),
        _ => v.iter().map(|x| half::f16::from_f64(*x).to_f64()).collect(),
    };
    Src {
        descr,
        dtype,
        bytes,
        values,
    }
}

fn ints(descr: &'static str, dtype: DType, v: &[i64]) -> Src {
    let bytes = match dtype {
        DType::I16 => v.iter().flat_map(|x| (*x as i16).to_le_bytes()).collect(),
        DType::U8 => v.iter().map(|x| *x as u8).collect(),
        DType::I64 => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        _ => unreachable!(),
    };
    Src {
        descr,
        dtype,
        bytes,
        values: v.iter().map(|x| *x as f64).collect(),
    }
}

/// Decoded elements of a dataset of `file` as f64, and its dtype.
fn read_all(tet: &Path, name: &str) -> (DType, Vec<u8>) {
    let bytes = std::fs::read(tet).unwrap();
    let file = tet_core::tet::TetFile::open(&bytes).unwrap();
    let ds = file.dataset(name).unwrap();
    let p = tet_alloc::tet::query::plan(&file, ds, &[]).unwrap();
    let v = tet_host::tet::query::select_values(&file, &p, 1 << 30, &()).unwrap();
    (ds.dtype(), v)
}

/// The last history row of `tet`: op, source, params.
fn last_row(tet: &Path) -> serde_json::Value {
    let bytes = std::fs::read(tet).unwrap();
    let file = tet_core::tet::TetFile::open(&bytes).unwrap();
    let h: serde_json::Value =
        serde_json::from_slice(file.footer().unwrap().history_json()).unwrap();
    h["history"].as_array().unwrap().last().unwrap().clone()
}

fn metadata(tet: &Path) -> serde_json::Value {
    let bytes = std::fs::read(tet).unwrap();
    let file = tet_core::tet::TetFile::open(&bytes).unwrap();
    tet_alloc::tet::history::metadata(&file).unwrap().unwrap()
}

fn param(row: &serde_json::Value, k: &str) -> f64 {
    row["params"][k]
        .as_str()
        .unwrap_or_else(|| panic!("param {k} in {row}"))
        .parse()
        .unwrap()
}

/// The stored payloads of every chunk of dataset 0, in row order.
fn payloads(tet: &Path) -> Vec<(u32, Vec<u8>)> {
    let bytes = std::fs::read(tet).unwrap();
    let file = tet_core::tet::TetFile::open(&bytes).unwrap();
    file.rows()
        .iter()
        .map(|r| {
            let at = r.payload_offset.get() as usize;
            let n = r.stored_byte_len.get() as usize;
            (r.codec.get(), bytes[at..at + n].to_vec())
        })
        .collect()
}

fn as_f64s(dtype: DType, b: &[u8]) -> Vec<f64> {
    match dtype {
        DType::F64 => b
            .chunks(8)
            .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
            .collect(),
        DType::F32 => b
            .chunks(4)
            .map(|c| f64::from(f32::from_le_bytes(c.try_into().unwrap())))
            .collect(),
        DType::F16 => b
            .chunks(2)
            .map(|c| half::f16::from_le_bytes(c.try_into().unwrap()).to_f64())
            .collect(),
        DType::I16 => b
            .chunks(2)
            .map(|c| f64::from(i16::from_le_bytes(c.try_into().unwrap())))
            .collect(),
        DType::U8 => b.iter().map(|x| f64::from(*x)).collect(),
        DType::I64 => b
            .chunks(8)
            .map(|c| i64::from_le_bytes(c.try_into().unwrap()) as f64)
            .collect(),
        _ => unreachable!(),
    }
}

/// `x` rounded to `dtype` as NumPy's `astype` rounds (to nearest, even on ties).
fn round_to(dtype: DType, x: f64) -> f64 {
    match dtype {
        DType::F64 => x,
        DType::F32 => f64::from(x as f32),
        DType::F16 => half::f16::from_f64(x).to_f64(),
        _ => unreachable!(),
    }
}

fn same(a: f64, b: f64) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

#[test]
fn every_transform_reads_back_as_numpy_computes_it() {
    let d = dir("all");
    let n = 7 * 9;
    let smooth: Vec<f64> = (0..n)
        .map(|i| (i as f64 * 0.37).sin() * 40.0 + 3.5)
        .collect();
    let mut special = smooth.clone();
    special[5] = f64::NAN;
    special[17] = f64::INFINITY;
    special[40] = -0.0;
    let iv: Vec<i64> = (0..n).map(|i| (i * 37 % 101) - 20).collect();
    let uv: Vec<i64> = (0..n).map(|i| i * 13 % 250).collect();
    // Large integers (their f64 sum is inexact), below 2^53 so each is exact as f64.
    let big: Vec<i64> = (0..n).map(|i| (1i64 << 50) + i * 1_000_003 - 7).collect();
    let sources = vec![
        ("f64", floats("<f8", DType::F64, &smooth)),
        ("f32", floats("<f4", DType::F32, &smooth)),
        ("f16", floats("<f2", DType::F16, &smooth)),
        ("nan", floats("<f8", DType::F64, &special)),
        ("i16", ints("<i2", DType::I16, &iv)),
        ("u8", ints("|u1", DType::U8, &uv)),
        ("i64", ints("<i8", DType::I64, &big)),
    ];
    let ops: Vec<(&str, Vec<&str>)> = vec![
        ("zscore", vec![]),
        ("minmax", vec![]),
        ("center", vec![]),
        ("scale", vec!["--factor", "-2.5"]),
        ("log1p", vec![]),
        ("sqrt", vec![]),
        ("clip", vec!["--min", "-3", "--max", "20"]),
        ("clip", vec!["--max", "10"]),
    ];
    let mut checked = 0;
    for (tag, src) in &sources {
        std::fs::write(
            d.join(format!("{tag}.npy")),
            npy(src.descr, false, &[7, 9], &src.bytes),
        )
        .unwrap();
        for codec in ["raw", "zstd"] {
            let tet = format!("{tag}-{codec}.tet");
            let (code, _, e) = common::run(
                &[
                    "convert",
                    &format!("{tag}.npy"),
                    &tet,
                    "--name",
                    "a",
                    "--chunk",
                    "3,4",
                    "--codec",
                    codec,
                    "--force",
                ],
                &d,
            );
            assert_eq!(code, 0, "{e}");
            for (op, args) in &ops {
                let out = format!("{tag}-{codec}-{op}.tet");
                let mut cmd = vec![
                    "transform",
                    &tet,
                    &out,
                    "--dataset",
                    "a",
                    "--op",
                    op,
                    "--force",
                    "-j",
                    "1",
                ];
                cmd.extend(args.iter().copied());
                let (code, _, e) = common::run(&cmd, &d);
                assert_eq!(code, 0, "{tag} {op}: {e}");
                let (dtype, got) = read_all(&d.join(&out), "a");
                let float_in = matches!(src.dtype, DType::F16 | DType::F32 | DType::F64);
                // NumPy's output type: floats keep theirs, integers become float64, but
                // clip keeps the integer type.
                let want_dtype = if float_in || *op == "clip" {
                    src.dtype
                } else {
                    DType::F64
                };
                assert_eq!(dtype, want_dtype, "{tag} {op}");
                let got = as_f64s(dtype, &got);
                let row = last_row(&d.join(&out));
                assert_eq!(row["op"], "transform");
                assert_eq!(row["source"], tet.as_str());
                assert_eq!(row["params"]["transform"], *op);
                assert_eq!(row["params"]["source_dataset"], "a");
                assert!(
                    row["params"]
                        .as_object()
                        .unwrap()
                        .values()
                        .all(|v| v.is_string()),
                    "{row}"
                );
                let xs = &src.values;
                // A plain f64 reference over the elements as f64 (integers beyond 2^53
                // rounded, as NumPy's `a - a.mean()` rounds them), from deviations to the
                // first element so that nothing cancels.
                let dev: Vec<f64> = xs.iter().map(|x| x - xs[0]).collect();
                let md = dev.iter().sum::<f64>() / n as f64;
                let mean_ref = xs[0] + md;
                let var_ref = dev.iter().map(|x| (x - md) * (x - md)).sum::<f64>() / n as f64;
                // The fold engine's variance of integers near 2^50 is only good to about
                // 1e-9 (it is not NumPy's two-pass over f64 deviations): a looser bound
                // there, recorded as a known difference.
                let tol = if *tag == "i64" { 1e-8 } else { 1e-12 };
                let close = |a: f64, b: f64| same(a, b) || (a - b).abs() <= tol * b.abs().max(1.0);
                let want: Vec<f64> = match *op {
                    "zscore" => {
                        let (m, s) = (param(&row, "mean"), param(&row, "std"));
                        assert!(close(m, mean_ref), "{tag}: mean {m} vs {mean_ref}");
                        assert!(
                            close(s, var_ref.sqrt()),
                            "{tag}: std {s} vs {}",
                            var_ref.sqrt()
                        );
                        xs.iter().map(|x| (x - m) / s).collect()
                    }
                    "center" => {
                        let m = param(&row, "mean");
                        assert!(close(m, mean_ref), "{tag}: mean {m} vs {mean_ref}");
                        xs.iter().map(|x| x - m).collect()
                    }
                    "minmax" => {
                        let lo = xs.iter().copied().fold(f64::INFINITY, |a, b| {
                            if b.is_nan() || a.is_nan() {
                                f64::NAN
                            } else {
                                a.min(b)
                            }
                        });
                        let hi = xs.iter().copied().fold(f64::NEG_INFINITY, |a, b| {
                            if b.is_nan() || a.is_nan() {
                                f64::NAN
                            } else {
                                a.max(b)
                            }
                        });
                        if *tag == "i64" {
                            // Exact integer differences, then divided in f64.
                            let lo = big.iter().min().unwrap();
                            let hi = big.iter().max().unwrap();
                            assert_eq!(row["params"]["min"], lo.to_string().as_str());
                            big.iter()
                                .map(|x| (x - lo) as f64 / (hi - lo) as f64)
                                .collect()
                        } else {
                            assert!(same(param(&row, "min"), lo), "{tag}");
                            xs.iter().map(|x| (x - lo) / (hi - lo)).collect()
                        }
                    }
                    "scale" => xs.iter().map(|x| x * -2.5).collect(),
                    "log1p" => xs.iter().map(|x| x.ln_1p()).collect(),
                    "sqrt" => xs.iter().map(|x| x.sqrt()).collect(),
                    _ => {
                        let bound = |flag: &str| {
                            args.iter()
                                .position(|a| *a == flag)
                                .map(|i| args[i + 1].parse::<f64>().unwrap())
                        };
                        let (lo, hi) = (bound("--min"), bound("--max"));
                        xs.iter()
                            .map(|x| {
                                if x.is_nan() {
                                    return *x;
                                }
                                let y = lo.map_or(*x, |l| if *x < l { l } else { *x });
                                hi.map_or(y, |h| if y > h { h } else { y })
                            })
                            .collect()
                    }
                };
                let want: Vec<f64> = want
                    .iter()
                    .map(|w| {
                        if want_dtype == DType::F64 || !float_in {
                            *w
                        } else {
                            round_to(want_dtype, *w)
                        }
                    })
                    .collect();
                for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                    assert!(
                        same(*g, *w),
                        "{tag} {codec} {op} element {i}: {g} vs NumPy's {w}"
                    );
                }
                assert_eq!(got.len() as i64, n);
                // Chunking and codecs kept.
                let p = payloads(&d.join(&out));
                assert_eq!(p.len(), 9, "{tag} {op}");
                let wire = if codec == "raw" { 0 } else { 1 };
                assert!(p.iter().all(|(c, _)| *c == wire), "{tag} {op} {codec}");
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 7 * 2 * 8);
}

#[test]
fn output_does_not_depend_on_threads_and_keeps_metadata() {
    let d = dir("meta");
    let v: Vec<f64> = (0..40 * 30)
        .map(|i| (i as f64 * 0.011).cos() * 7.0)
        .collect();
    let src = floats("<f4", DType::F32, &v);
    std::fs::write(d.join("t2m.npy"), npy("<f4", false, &[40, 30], &src.bytes)).unwrap();
    let time: Vec<u8> = (0..40i64)
        .flat_map(|t| (1_700_000_000 + t * 3600).to_le_bytes())
        .collect();
    std::fs::write(d.join("time.npy"), npy("<i8", false, &[40], &time)).unwrap();
    let (code, _, e) = common::run(
        &[
            "convert",
            "t2m.npy",
            "t2m.tet",
            "--chunk",
            "7,8",
            "--dims",
            "time,lon",
            "--attr",
            "units=K",
            "--attr",
            "_FillValue=-999",
            "--coord",
            "time=time.npy",
            "--labels",
            "lon=a,b,c,d,e,f,g,h,i,j,k,l,m,n,o,p,q,r,s,t,u,v,w,x,y,z,aa,bb,cc,dd",
        ],
        &d,
    );
    assert_eq!(code, 0, "{e}");
    let mut outs = Vec::new();
    for j in ["1", "2", "3"] {
        let out = format!("z{j}.tet");
        let (code, _, e) = common::run(
            &[
                "transform",
                "t2m.tet",
                &out,
                "--dataset",
                "t2m",
                "--op",
                "zscore",
                "-j",
                j,
            ],
            &d,
        );
        assert_eq!(code, 0, "{e}");
        assert_eq!(
            e,
            "tet-host: t2m.tet: warning: attrs _FillValue not kept: the transform maps every element, marked ones too\n"
        );
        outs.push(payloads(&d.join(&out)));
    }
    assert!(
        outs[0] == outs[1] && outs[1] == outs[2],
        "-j changed the stored chunks"
    );
    // The library's one-thread statistics give the bits the command recorded.
    {
        use tet_alloc::tet::transform::{stats, Map, Transform};
        let bytes = std::fs::read(d.join("t2m.tet")).unwrap();
        let file = tet_core::tet::TetFile::open(&bytes).unwrap();
        let ds = file.dataset("t2m").unwrap();
        let p = tet_alloc::tet::query::plan(&file, ds, &[]).unwrap();
        let mut dec =
            tet_alloc::tet::decode::ChunkDecoder::new(tet_host::tet::codec::CZstd::new(), 1 << 30);
        let s = stats(&file, &p, Transform::ZScore, &mut dec).unwrap();
        let m = Map::new(
            Transform::ZScore,
            ds.dtype(),
            &s,
            tet_host::tet::transform::STD_FUNCS,
        )
        .unwrap();
        let row = last_row(&d.join("z2.tet"));
        for (k, v) in m.params() {
            assert_eq!(row["params"][&k], v.as_str(), "{k}");
        }
    }
    let m = metadata(&d.join("z1.tet"));
    let a = &m["datasets"]["t2m"];
    assert_eq!(a["dim_names"], serde_json::json!(["time", "lon"]));
    assert_eq!(a["attrs"]["units"], "K");
    assert!(a["attrs"].get("_FillValue").is_none());
    assert_eq!(a["tet_coords"]["time"]["dataset"], "time");
    assert_eq!(a["coords"]["lon"]["labels"][29], "dd");
    // The coordinate dataset is copied as stored.
    let (dt, t) = read_all(&d.join("z1.tet"), "time");
    assert_eq!((dt, t), (DType::I64, time.clone()));
    // The history: convert's row, then the transform's.
    let bytes = std::fs::read(d.join("z1.tet")).unwrap();
    let file = tet_core::tet::TetFile::open(&bytes).unwrap();
    let h: serde_json::Value =
        serde_json::from_slice(file.footer().unwrap().history_json()).unwrap();
    let ops: Vec<&str> = h["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["op"].as_str().unwrap())
        .collect();
    assert_eq!(ops, ["convert", "transform"]);
    // verify finds the output clean.
    let (code, o, e) = common::run(&["verify", "z1.tet"], &d);
    assert_eq!(code, 0, "{}{e}", String::from_utf8_lossy(&o));
}

#[test]
fn refusals() {
    let d = dir("refuse");
    let src = floats("<f8", DType::F64, &[1.0, 2.0, 4.0]);
    std::fs::write(d.join("a.npy"), npy("<f8", false, &[3], &src.bytes)).unwrap();
    let (code, _, e) = common::run(&["convert", "a.npy", "a.tet"], &d);
    assert_eq!(code, 0, "{e}");
    let before = std::fs::read(d.join("a.tet")).unwrap();
    // The output is the input, even with --force.
    let (code, _, e) = common::run(
        &[
            "transform",
            "a.tet",
            "a.tet",
            "--dataset",
            "a",
            "--op",
            "sqrt",
            "--force",
        ],
        &d,
    );
    assert_eq!(code, 16, "{e}");
    assert!(e.contains("is the input"), "{e}");
    assert_eq!(std::fs::read(d.join("a.tet")).unwrap(), before);
    for (args, msg) in [
        (vec!["--op", "scale"], "scale needs its factor"),
        (vec!["--op", "clip"], "clip needs a bound"),
        (
            vec!["--op", "sqrt", "--factor", "2"],
            "sqrt takes no factor",
        ),
        (
            vec!["--op", "zscore", "--min", "0"],
            "zscore takes no bounds",
        ),
    ] {
        let mut cmd = vec!["transform", "a.tet", "b.tet", "--dataset", "a"];
        cmd.extend(args.iter().copied());
        let (code, _, e) = common::run(&cmd, &d);
        assert_eq!(code, 16, "{args:?}: {e}");
        assert!(e.contains(msg), "{args:?}: {e}");
        assert!(!d.join("b.tet").exists());
    }
    // A non-integral bound on an integer dataset.
    std::fs::write(d.join("i.npy"), npy("<i2", false, &[2], &[1, 0, 2, 0])).unwrap();
    let (code, _, e) = common::run(&["convert", "i.npy", "i.tet"], &d);
    assert_eq!(code, 0, "{e}");
    let (code, _, e) = common::run(
        &[
            "transform",
            "i.tet",
            "c.tet",
            "--dataset",
            "i",
            "--op",
            "clip",
            "--max",
            "1.5",
        ],
        &d,
    );
    assert_eq!(code, 16, "{e}");
    assert!(e.contains("not an integer"), "{e}");
    // A dataset the file does not have.
    let (code, _, e) = common::run(
        &[
            "transform",
            "a.tet",
            "b.tet",
            "--dataset",
            "nope",
            "--op",
            "sqrt",
        ],
        &d,
    );
    assert_eq!(code, 16, "{e}");
    // A constant dataset: zscore divides by zero, as NumPy's, with a warning.
    let c = floats("<f8", DType::F64, &[2.0, 2.0]);
    std::fs::write(d.join("k.npy"), npy("<f8", false, &[2], &c.bytes)).unwrap();
    common::run(&["convert", "k.npy", "k.tet"], &d);
    let (code, _, e) = common::run(
        &[
            "transform",
            "k.tet",
            "kz.tet",
            "--dataset",
            "k",
            "--op",
            "zscore",
        ],
        &d,
    );
    assert_eq!(code, 0, "{e}");
    assert!(e.contains("divides by zero"), "{e}");
    let (_, v) = read_all(&d.join("kz.tet"), "k");
    assert!(as_f64s(DType::F64, &v).iter().all(|x| x.is_nan()));
}
