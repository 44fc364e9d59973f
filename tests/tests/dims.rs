//! Axis metadata (dimension names, coordinates, attrs; docs/tet-v1.md "Axis metadata"):
//! axes by name give what axes by number give, for every operation; selections by label
//! or value give the index selections they resolve to; the other implementation's file
//! with CF attrs answers null_count and nan_* as expected; hostile metadata gives
//! findings, never a panic; the writer refuses metadata that breaks the rules.
#![allow(clippy::restriction, reason = "tests and benches fail by panicking")]

use proptest::prelude::*;
use tet_alloc::tet::meta::{self, Coord, DatasetMeta, Metadata};
use tet_alloc::tet::query::{plan, Axes, Output};
use tet_alloc::tet::writer::{DatasetSpec, FooterSpec, Writer};
use tet_core::tet::{Code, Codec, DType, DatasetId, TetFile};
use tet_host::tet::dims::resolve;
use tet_host::tet::query::run;
use tet_host::tet::query_doc::parse_doc;

const BUDGET: u64 = 64 << 20;

/// A weather-like file: `temp` (f64, time × lat × lon) with coordinate datasets `time`
/// (i64, ascending, uneven steps) and `lat` (f64, descending), inline `lon` labels
/// (sorted), `_FillValue` -9999 where `fill` says.
#[derive(Debug, Clone)]
struct Case {
    shape: [u64; 3],
    chunk: [u64; 3],
    steps: Vec<i64>,
    values: Vec<f64>,
}

fn case() -> impl Strategy<Value = Case> {
    (1u64..=6, 1u64..=5, 1u64..=4)
        .prop_flat_map(|(t, y, x)| {
            let n = (t * y * x) as usize;
            (
                Just([t, y, x]),
                (1u64..=t, 1u64..=y, 1u64..=x),
                proptest::collection::vec(1i64..=5000, t as usize),
                proptest::collection::vec(prop_oneof![4 => -50i32..50, 1 => Just(-9999)], n),
            )
        })
        .prop_map(|(shape, (a, b, c), steps, v)| Case {
            shape,
            chunk: [a, b, c],
            steps,
            values: v
                .into_iter()
                .map(|i| {
                    if i == -9999 {
                        -9999.0
                    } else {
                        f64::from(i) / 2.0
                    }
                })
                .collect(),
        })
}

fn times(c: &Case) -> Vec<i64> {
    let mut t = 1_700_000_000i64;
    c.steps
        .iter()
        .map(|s| {
            t += s;
            t
        })
        .collect()
}

fn lats(c: &Case) -> Vec<f64> {
    (0..c.shape[1]).map(|i| 60.0 - 7.5 * i as f64).collect()
}

fn lons(c: &Case) -> Vec<String> {
    (0..c.shape[2]).map(|i| format!("x{i:02}")).collect()
}

fn metadata(c: &Case) -> Metadata {
    let mut m = Metadata::default();
    m.edit("temp", |d| {
        d.dim_names = Some(vec!["time".into(), "lat".into(), "lon".into()]);
        d.coords
            .push(("time".into(), Coord::Dataset("time".into())));
        d.coords.push(("lat".into(), Coord::Dataset("lat".into())));
        d.coords.push(("lon".into(), Coord::Labels(lons(c))));
        d.set_attr("units", "K");
        d.set_attr("_FillValue", "-9999");
    });
    m.edit("time", |d| {
        d.dim_names = Some(vec!["time".into()]);
        d.set_attr("units", "seconds since 1970-01-01");
        d.set_attr("calendar", "standard");
    });
    m
}

fn write(c: &Case, m: Option<&Metadata>) -> Vec<u8> {
    let t = [c.shape[0]];
    let y = [c.shape[1]];
    let specs = [
        DatasetSpec {
            name: "temp",
            dtype: DType::F64,
            shape: &c.shape,
            chunk_shape: &c.chunk,
        },
        DatasetSpec {
            name: "time",
            dtype: DType::I64,
            shape: &t,
            chunk_shape: &t,
        },
        DatasetSpec {
            name: "lat",
            dtype: DType::F64,
            shape: &y,
            chunk_shape: &y,
        },
    ];
    let mut w = Writer::new(Vec::new(), &specs).unwrap();
    let data: Vec<u8> = c.values.iter().flat_map(|v| v.to_le_bytes()).collect();
    w.write_array(DatasetId(0), &data, Codec::Zstd).unwrap();
    let td: Vec<u8> = times(c).iter().flat_map(|v| v.to_le_bytes()).collect();
    w.write_array(DatasetId(1), &td, Codec::Raw).unwrap();
    let ld: Vec<u8> = lats(c).iter().flat_map(|v| v.to_le_bytes()).collect();
    w.write_array(DatasetId(2), &ld, Codec::Raw).unwrap();
    let footer = m.map(|m| FooterSpec {
        history: Vec::new(),
        metadata: Some(serde_json::Value::Object(m.to_json()).to_string()),
    });
    w.finish(footer.as_ref()).unwrap()
}

/// Runs a query document against `bytes`: the resolved selection and the output.
fn answer(bytes: &[u8], q: &str) -> Result<(Vec<tet_core::tet::select::Slice>, Output), String> {
    let file = TetFile::open(bytes).unwrap();
    let doc = parse_doc(q)?;
    let ds = file.dataset(&doc.dataset).unwrap();
    let r = resolve(&file, &ds, &doc, BUDGET)?;
    let mut p = plan(&file, ds, &r.selection).map_err(|e| e.to_string())?;
    p.mask = r.mask;
    let (op, axes) = r.op.clone().ok_or("no operation")?;
    let axes = Axes::signed(ds.ndim(), axes.as_deref()).map_err(|e| e.to_string())?;
    let mut out = run(&file, &p, op, &axes, 2, BUDGET).map_err(|e| e.to_string())?;
    r.finish(&mut out);
    Ok((r.selection, out))
}

/// Every operation the query document accepts that takes axes alone (the others need
/// more than an axis: `q`, bins, or rank 2), so a new operation joins these tests.
fn ops() -> Vec<&'static str> {
    tet_host::tet::query_doc::OPS
        .iter()
        .copied()
        .filter(|o| !matches!(*o, "quantile" | "histogram" | "covariance" | "correlation"))
        .collect()
}

const NAMES: [&str; 3] = ["time", "lat", "lon"];

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Every operation, every set of axes: by name, by number and by decimal string give
    /// the same bits.
    #[test]
    fn axes_by_name_equal_axes_by_number(c in case(), mask in 1u8..8, op in 0usize..ops().len()) {
        let bytes = write(&c, Some(&metadata(&c)));
        let axes: Vec<usize> = (0..3).filter(|d| mask >> d & 1 == 1).collect();
        let names: Vec<String> = axes.iter().map(|d| format!("\"{}\"", NAMES[*d])).collect();
        let nums: Vec<String> = axes.iter().map(|d| d.to_string()).collect();
        let strs: Vec<String> = axes.iter().map(|d| format!("\"{d}\"")).collect();
        let op = ops()[op];
        let q = |list: &[String]| format!(r#"{{"dataset": "temp", "{op}": {{"axes": [{}]}}}}"#, list.join(", "));
        let by_name = answer(&bytes, &q(&names));
        let by_number = answer(&bytes, &q(&nums));
        let by_string = answer(&bytes, &q(&strs));
        prop_assert_eq!(format!("{by_name:?}"), format!("{by_number:?}"));
        prop_assert_eq!(format!("{by_string:?}"), format!("{by_number:?}"));
        if axes.len() == 1 {
            // A bare name, as "mean": "time".
            let bare = answer(&bytes, &format!(r#"{{"dataset": "temp", "{op}": {}}}"#, names[0]));
            prop_assert_eq!(format!("{bare:?}"), format!("{by_number:?}"));
        }
    }

    /// Bounds by coordinate value (exact values, values between, labels) select what the
    /// index bounds they resolve to select.
    #[test]
    fn value_selections_equal_index_selections(
        c in case(),
        cut in proptest::collection::vec((0u64..8, 0u64..8), 3),
        between in any::<bool>(),
    ) {
        let bytes = write(&c, Some(&metadata(&c)));
        let t = times(&c);
        let l = lats(&c);
        let x = lons(&c);
        let ends: Vec<(u64, u64)> = cut
            .iter()
            .zip(c.shape)
            .map(|((a, b), n)| {
                let a = a % n;
                (a, a + b % (n - a + 1))
            })
            .collect();
        // A bound for index i (i == len: no bound, the axis's end).
        let tb = |i: u64| -> String {
            match t.get(i as usize) {
                None => "null".into(),
                // Just past the previous value resolves to i too on an ascending axis.
                Some(v) if between && i > 0 && t[i as usize - 1] + 1 < *v => format!("{}", t[i as usize - 1] + 1),
                Some(v) => v.to_string(),
            }
        };
        let lb = |i: u64| -> String {
            match l.get(i as usize) {
                None => "null".into(),
                Some(v) if between && i > 0 => format!("{:?}", v + 1.0),
                Some(v) => format!("{v:?}"),
            }
        };
        let xb = |i: u64| -> String {
            match x.get(i as usize) {
                None => "null".into(),
                // "x00~" sorts between "x00" and "x01".
                Some(_) if between && i > 0 => format!("\"{}~\"", x[i as usize - 1]),
                Some(v) => format!("\"{v}\""),
            }
        };
        let q_values = format!(
            r#"{{"dataset": "temp", "selection": [{{"start_label": {}, "stop_label": {}}}, {{"start_label": {}, "stop_label": {}}}, {{"start_label": {}, "stop_label": {}}}], "sum": [1]}}"#,
            tb(ends[0].0), tb(ends[0].1), lb(ends[1].0), lb(ends[1].1), xb(ends[2].0), xb(ends[2].1)
        );
        let q_index = format!(
            r#"{{"dataset": "temp", "selection": [{{"start": {}, "stop": {}}}, {{"start": {}, "stop": {}}}, {{"start": {}, "stop": {}}}], "sum": [1]}}"#,
            ends[0].0, ends[0].1, ends[1].0, ends[1].1, ends[2].0, ends[2].1
        );
        let by_value = answer(&bytes, &q_values);
        let by_index = answer(&bytes, &q_index);
        match (&by_value, &by_index) {
            (Ok((sv, ov)), Ok((_, oi))) => {
                for (d, (s, (a, b))) in sv.iter().zip(&ends).enumerate() {
                    prop_assert_eq!(s.start.unwrap_or(0), *a as i64, "axis {} start", d);
                    prop_assert_eq!(s.stop.unwrap_or(c.shape[d] as i64), *b as i64, "axis {} stop", d);
                }
                prop_assert_eq!(format!("{ov:?}"), format!("{oi:?}"));
            }
            _ => prop_assert_eq!(by_value.map(|x| x.1.values.len()).ok(), by_index.map(|x| x.1.values.len()).ok()),
        }
    }
}

#[test]
fn unsorted_coordinates_take_exact_values_only() {
    let c = Case {
        shape: [3, 2, 3],
        chunk: [3, 2, 3],
        steps: vec![5, 1, 1],
        values: (0..18).map(f64::from).collect(),
    };
    let mut m = metadata(&c);
    m.edit("temp", |d| {
        d.coords.retain(|(k, _)| k != "lon");
        d.coords.push((
            "lon".into(),
            Coord::Labels(vec!["b".into(), "a".into(), "c".into()]),
        ));
    });
    let bytes = write(&c, Some(&m));
    let (s, out) = answer(
        &bytes,
        r#"{"dataset": "temp", "selection": [{}, {}, {"start_label": "a"}], "sum": []}"#,
    )
    .unwrap();
    assert_eq!(s[2].start, Some(1));
    let (_, by_index) = answer(
        &bytes,
        r#"{"dataset": "temp", "selection": [{}, {}, {"start": 1}], "sum": []}"#,
    )
    .unwrap();
    assert_eq!(
        format!("{:?}", out.values),
        format!("{:?}", by_index.values)
    );
    let e = answer(
        &bytes,
        r#"{"dataset": "temp", "selection": [{}, {}, {"start_label": "ab"}], "sum": []}"#,
    )
    .unwrap_err();
    assert!(e.contains("not sorted"), "{e}");
    let e = answer(
        &bytes,
        r#"{"dataset": "temp", "selection": [{"start_label": "2024"}], "sum": []}"#,
    )
    .unwrap_err();
    // The time coordinate is CF time (seconds since 1970-01-01): a string is a date.
    assert!(
        e.contains("\"2024\" is not a date") && e.contains("coordinate is CF time"),
        "{e}"
    );
    let e = answer(
        &bytes,
        r#"{"dataset": "temp", "selection": [{}, {"start_label": "north"}], "sum": []}"#,
    )
    .unwrap_err();
    assert!(
        e.contains("is a string; this axis's coordinate is numbers"),
        "{e}"
    );
    let e = answer(&bytes, r#"{"dataset": "time", "mean": "lat"}"#).unwrap_err();
    assert!(
        e.contains("no axis is called \"lat\" (dim_names: time)"),
        "{e}"
    );
    let e = answer(
        &bytes,
        r#"{"dataset": "lat", "selection": [{"start_label": 1}], "sum": []}"#,
    )
    .unwrap_err();
    assert!(e.contains("need a coordinate"), "{e}");
}

#[test]
fn fill_value_is_missing_for_nan_ops_and_null_count() {
    let c = Case {
        shape: [2, 2, 2],
        chunk: [1, 2, 1],
        steps: vec![1, 1],
        values: vec![1.0, -9999.0, 3.0, 4.0, -9999.0, 6.0, f64::NAN, 8.0],
    };
    let bytes = write(&c, Some(&metadata(&c)));
    let v = |q: &str| format!("{:?}", answer(&bytes, q).unwrap().1.values);
    assert_eq!(v(r#"{"dataset": "temp", "null_count": []}"#), "[U64(2)]");
    assert_eq!(
        v(r#"{"dataset": "temp", "null_count": {"axis": "time"}}"#),
        "[U64(1), U64(1), U64(0), U64(0)]"
    );
    assert_eq!(
        v(r#"{"dataset": "temp", "null_count": {"fill": "nan"}}"#),
        "[U64(1)]"
    );
    // 1 + 3 + 4 + 6 + 8 over 5: the fill values and the NaN are left out.
    assert_eq!(v(r#"{"dataset": "temp", "nan_mean": []}"#), "[F64(4.4)]");
    assert_eq!(v(r#"{"dataset": "temp", "nan_count": []}"#), "[U64(3)]");
    // Plain reductions see the elements as stored.
    assert_eq!(v(r#"{"dataset": "temp", "count": []}"#), "[U64(8)]");
    // Without metadata the fill is an ordinary number, and null_count needs a fill.
    let plain = write(&c, None);
    let e = answer(&plain, r#"{"dataset": "temp", "null_count": []}"#).unwrap_err();
    assert!(e.contains("null_count needs a \"fill\""), "{e}");
    let n = answer(
        &plain,
        r#"{"dataset": "temp", "null_count": {"fill": -9999}}"#,
    )
    .unwrap();
    assert_eq!(format!("{:?}", n.1.values), "[U64(2)]");
    let e = answer(&plain, r#"{"dataset": "temp", "mean": "time"}"#).unwrap_err();
    assert!(e.contains("no dimension names"), "{e}");
}

/// `tests/tests/data/peer/zarr_fill.tet`, written by the other implementation's `tet
/// convert` (tests/interop/make_peer_dims_fixture.sh): `sst` (f64 3×4) and `sst32` (f32)
/// hold 0, 0.5, ..., 5.5 with -9999 at flat indices 1 and 7 and `_FillValue` "-9999";
/// `obs` (i32) holds 0, 3, ..., 21 with -1 at index 2 and `missing_value` "-1". Its own
/// answers (the script prints them): sst32 null_count 2, obs null_count 1, obs sum 77,
/// sst sum -19969; it gives sst (f64) null_count 0 and nan_mean NaN, and per-axis
/// null_count zeros, which the data contradict.
#[test]
fn peer_file_with_cf_attrs() {
    let bytes = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/peer/zarr_fill.tet"
    ))
    .unwrap();
    let file = TetFile::open(&bytes).unwrap();
    assert!(meta::findings(&file).is_empty());
    let m = meta::read(&file).unwrap().unwrap();
    let sst = m.dataset("sst").unwrap();
    assert_eq!(sst.attr("units"), Some("K"));
    assert_eq!(sst.attr("long_name"), Some("sea surface temperature"));
    assert_eq!(
        m.file.as_ref().unwrap().tool.as_deref(),
        Some("tet convert")
    );
    let v = |q: &str| format!("{:?}", answer(&bytes, q).unwrap().1.values);
    assert_eq!(v(r#"{"dataset": "sst32", "null_count": []}"#), "[U64(2)]");
    assert_eq!(v(r#"{"dataset": "sst", "null_count": []}"#), "[U64(2)]");
    assert_eq!(
        v(r#"{"dataset": "sst", "null_count": {"axis": 0}}"#),
        "[U64(0), U64(1), U64(0), U64(1)]"
    );
    assert_eq!(v(r#"{"dataset": "sst", "nan_mean": []}"#), "[F64(2.9)]");
    assert_eq!(v(r#"{"dataset": "sst", "sum": []}"#), "[F64(-19969.0)]");
    assert_eq!(v(r#"{"dataset": "obs", "null_count": []}"#), "[U64(1)]");
    assert_eq!(v(r#"{"dataset": "obs", "sum": []}"#), "[I64(77)]");
    // An integer dataset with a marker is widened to f64 with NaN at the marker for the
    // nan_* family, as xarray decodes it: 0 + 3 + 9 + ... + 21 = 78 over 7 elements.
    assert_eq!(v(r#"{"dataset": "obs", "nan_sum": []}"#), "[F64(78.0)]");
    // nan_count counts the missing (NaN) elements.
    assert_eq!(v(r#"{"dataset": "obs", "nan_count": []}"#), "[U64(1)]");
    assert_eq!(
        v(r#"{"dataset": "obs", "nan_mean": []}"#),
        format!("[F64({:?})]", 78.0 / 7.0)
    );
    assert_eq!(v(r#"{"dataset": "obs", "nan_min": []}"#), "[F64(0.0)]");
    assert_eq!(v(r#"{"dataset": "obs", "nan_max": []}"#), "[F64(21.0)]");
}

/// A CF-packed dataset (`scale_factor`, `add_offset`, a packed `_FillValue`): the
/// `nan_*` family sees it unpacked to f64 as xarray's `mask_and_scale` decodes it; the
/// plain reductions see the packed integers.
#[test]
fn packed_datasets_unpack_for_nan_ops() {
    let shape = [2u64, 3];
    let packed: [i16; 6] = [100, -32767, 200, 300, 400, -32767];
    let specs = [DatasetSpec {
        name: "t",
        dtype: DType::I16,
        shape: &shape,
        chunk_shape: &[1, 3],
    }];
    let mut w = Writer::new(Vec::new(), &specs).unwrap();
    let data: Vec<u8> = packed.iter().flat_map(|v| v.to_le_bytes()).collect();
    w.write_array(DatasetId(0), &data, Codec::Zstd).unwrap();
    let mut m = Metadata::default();
    m.edit("t", |d| {
        d.dim_names = Some(vec!["y".into(), "x".into()]);
        d.set_attr("scale_factor", "0.01");
        d.set_attr("add_offset", "273.15");
        d.set_attr("_FillValue", "-32767");
    });
    let bytes = w
        .finish(Some(&FooterSpec {
            history: Vec::new(),
            metadata: Some(serde_json::Value::Object(m.to_json()).to_string()),
        }))
        .unwrap();
    let un = |p: i16| f64::from(p) * 0.01 + 273.15;
    let one = |q: &str| match answer(&bytes, q).unwrap().1.values[..] {
        [tet_core::tet::fold::Value::F64(v)] => v,
        ref other => panic!("{other:?}"),
    };
    assert_eq!(one(r#"{"dataset": "t", "nan_min": []}"#), un(100));
    assert_eq!(one(r#"{"dataset": "t", "nan_max": []}"#), un(400));
    let mean = (un(100) + un(200) + un(300) + un(400)) / 4.0;
    assert!((one(r#"{"dataset": "t", "nan_mean": []}"#) - mean).abs() < 1e-9);
    let v = |q: &str| format!("{:?}", answer(&bytes, q).unwrap().1.values);
    assert_eq!(
        v(r#"{"dataset": "t", "nan_max": "y"}"#),
        format!(
            "[F64({:?}), F64({:?}), F64({:?})]",
            un(300),
            un(400),
            un(200)
        )
    );
    assert_eq!(v(r#"{"dataset": "t", "null_count": []}"#), "[U64(2)]");
    assert_eq!(v(r#"{"dataset": "t", "max": []}"#), "[I64(400)]");
}

/// An integer dataset whose attrs give both `_FillValue` and `missing_value` (CF:
/// either marks an element missing): the `nan_*` reductions skip both, per output cell,
/// in f64; `null_count` counts both; the plain ones see every element as stored.
#[test]
fn integer_markers_mask_in_f64() {
    let shape = [2u64, 4];
    let values: [i16; 8] = [5, -1, 7, -32768, -1, -1, 2, 4];
    for chunk in [[1u64, 4], [2, 2], [1, 1]] {
        let specs = [DatasetSpec {
            name: "q",
            dtype: DType::I16,
            shape: &shape,
            chunk_shape: &chunk,
        }];
        let mut w = Writer::new(Vec::new(), &specs).unwrap();
        let data: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        w.write_array(DatasetId(0), &data, Codec::Raw).unwrap();
        let mut m = Metadata::default();
        m.edit("q", |d| {
            d.dim_names = Some(vec!["y".into(), "x".into()]);
            d.set_attr("_FillValue", "-32768");
            d.set_attr("missing_value", "-1");
        });
        let bytes = w
            .finish(Some(&FooterSpec {
                history: Vec::new(),
                metadata: Some(serde_json::Value::Object(m.to_json()).to_string()),
            }))
            .unwrap();
        let v = |q: &str| format!("{:?}", answer(&bytes, q).unwrap().1.values);
        assert_eq!(
            v(r#"{"dataset": "q", "null_count": []}"#),
            "[U64(4)]",
            "{chunk:?}"
        );
        assert_eq!(
            v(r#"{"dataset": "q", "null_count": {"axis": "y"}}"#),
            "[U64(1), U64(2), U64(0), U64(1)]"
        );
        assert_eq!(
            v(r#"{"dataset": "q", "nan_sum": {"axis": "x"}}"#),
            "[F64(12.0), F64(6.0)]",
            "{chunk:?}"
        );
        assert_eq!(
            v(r#"{"dataset": "q", "nan_mean": {"axis": "y"}}"#),
            "[F64(5.0), F64(NaN), F64(4.5), F64(4.0)]"
        );
        assert_eq!(
            v(r#"{"dataset": "q", "nan_max": {"axis": "x"}}"#),
            "[F64(7.0), F64(4.0)]"
        );
        assert_eq!(v(r#"{"dataset": "q", "sum": []}"#), "[I64(-32753)]");
    }
}

/// Every value of a `missing_value` list marks (xarray masks them all): a Zarr-style
/// JSON list in `missing_value`, and the `missing_value_list` `convert` keeps beside a
/// NetCDF list's first value, with `_FillValue` too.
#[test]
fn missing_value_lists_mark_with_every_value() {
    let shape = [6u64];
    let values: [i32; 6] = [5, -1, -2, -3, 7, 100];
    for (key, list) in [
        ("missing_value", "[-1, -2, -3]"),
        ("missing_value_list", "[-1, -2, -3]"),
    ] {
        let specs = [DatasetSpec {
            name: "a",
            dtype: DType::I32,
            shape: &shape,
            chunk_shape: &[4],
        }];
        let mut w = Writer::new(Vec::new(), &specs).unwrap();
        let data: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        w.write_array(DatasetId(0), &data, Codec::Raw).unwrap();
        let mut m = Metadata::default();
        m.edit("a", |d| {
            d.set_attr(key, list);
            d.set_attr("_FillValue", "100");
            if key == "missing_value_list" {
                d.set_attr("missing_value", "-1");
            }
        });
        let bytes = w
            .finish(Some(&FooterSpec {
                history: Vec::new(),
                metadata: Some(serde_json::Value::Object(m.to_json()).to_string()),
            }))
            .unwrap();
        let file = TetFile::open(&bytes).unwrap();
        assert!(meta::findings(&file).is_empty(), "{key}");
        let v = |q: &str| format!("{:?}", answer(&bytes, q).unwrap().1.values);
        // NumPy: np.isin(a, [100, -1, -2, -3]).sum() == 4; the others sum to 12.
        assert_eq!(
            v(r#"{"dataset": "a", "null_count": []}"#),
            "[U64(4)]",
            "{key}"
        );
        assert_eq!(
            v(r#"{"dataset": "a", "nan_sum": []}"#),
            "[F64(12.0)]",
            "{key}"
        );
        assert_eq!(
            v(r#"{"dataset": "a", "nan_min": []}"#),
            "[F64(5.0)]",
            "{key}"
        );
        assert_eq!(
            v(r#"{"dataset": "a", "nan_count": []}"#),
            "[U64(4)]",
            "{key}"
        );
        assert_eq!(v(r#"{"dataset": "a", "sum": []}"#), "[I64(106)]", "{key}");
    }
}

/// `tests/tests/data/peer/session_dims.tet`, written by the other implementation's
/// session writer (tests/interop/make_peer_dims_fixture.sh): `temperature` (f32 4×3,
/// chunks 2×3) holds 1.5·i with -9999 at flat indices 4 and 9, `dim_names` (time,
/// station), labels for both axes, `units` and `_FillValue` attrs. Its own answers (the
/// script prints them), which ours equal: mean over time [-2496.375, -2493, 9.75], sum
/// over station [4.5, -9987, 31.5, -9967.5], the label selection's sum -9969, null_count
/// 2, max over time [9, 15, 16.5]. Its null_count over station is [0, 0, 0, 0]; the data
/// say [0, 1, 0, 1].
#[test]
fn peer_file_with_dims_coords_and_attrs() {
    let bytes = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/peer/session_dims.tet"
    ))
    .unwrap();
    let file = TetFile::open(&bytes).unwrap();
    assert!(meta::findings(&file).is_empty());
    let m = meta::read(&file).unwrap().unwrap();
    let d = m.dataset("temperature").unwrap();
    assert_eq!(
        d.dim_names.as_deref(),
        Some(&["time".to_string(), "station".to_string()][..])
    );
    assert_eq!(
        d.coord(1),
        Some(&Coord::Labels(vec!["A".into(), "B".into(), "C".into()]))
    );
    let v = |q: &str| format!("{:?}", answer(&bytes, q).unwrap().1.values);
    assert_eq!(
        v(r#"{"dataset": "temperature", "mean": "time"}"#),
        "[F64(-2496.375), F64(-2493.0), F64(9.75)]"
    );
    assert_eq!(
        v(r#"{"dataset": "temperature", "sum": {"axes": ["station"]}}"#),
        "[F64(4.5), F64(-9987.0), F64(31.5), F64(-9967.5)]"
    );
    let (sel, out) = answer(
        &bytes,
        r#"{"dataset": "temperature", "selection": [{"start_label": "2024-01-02", "stop_label": "2024-01-04"}, {"start_label": "B"}], "sum": []}"#,
    )
    .unwrap();
    assert_eq!(
        (sel[0].start, sel[0].stop, sel[1].start),
        (Some(1), Some(3), Some(1))
    );
    assert_eq!(format!("{:?}", out.values), "[F64(-9969.0)]");
    assert_eq!(
        v(r#"{"dataset": "temperature", "null_count": []}"#),
        "[U64(2)]"
    );
    assert_eq!(
        v(r#"{"dataset": "temperature", "null_count": "station"}"#),
        "[U64(0), U64(1), U64(0), U64(1)]"
    );
    assert_eq!(
        v(r#"{"dataset": "temperature", "max": "time"}"#),
        "[F64(9.0), F64(15.0), F64(16.5)]"
    );
    // By name and by number alike, for every operation.
    for op in ops() {
        for (names, nums) in [
            ("\"time\"", "0"),
            ("\"station\"", "1"),
            ("[\"time\", \"station\"]", "[0, 1]"),
        ] {
            let q = |a: &str| format!(r#"{{"dataset": "temperature", "{op}": {{"axes": {a}}}}}"#);
            assert_eq!(
                format!("{:?}", answer(&bytes, &q(names))),
                format!("{:?}", answer(&bytes, &q(nums))),
                "{op} {names}"
            );
        }
    }
}

/// `bytes` with its footer JSON replaced by `json` (the payload area is unchanged, so
/// only the footer differs).
fn with_footer(bytes: &[u8], json: &str) -> Vec<u8> {
    let file = TetFile::open(bytes).unwrap();
    let at = file.footer().unwrap().json_offset() as usize;
    let mut out = bytes[..at].to_vec();
    out.extend_from_slice(json.as_bytes());
    out.extend_from_slice(&(json.len() as u64).to_le_bytes());
    out.extend_from_slice(&1u32.to_le_bytes());
    out.extend_from_slice(b"THST");
    out
}

fn codes(bytes: &[u8]) -> Vec<(Code, String)> {
    let file = TetFile::open(bytes).unwrap();
    meta::findings(&file)
        .into_iter()
        .map(|(f, n)| (f.code, n))
        .collect()
}

#[test]
fn hostile_metadata_gives_findings() {
    let c = Case {
        shape: [3, 2, 2],
        chunk: [3, 2, 2],
        steps: vec![1, 1, 1],
        values: (0..12).map(f64::from).collect(),
    };
    let bytes = write(&c, None);
    let many: Vec<String> = (0..70_000).map(|i| format!("\"{i}\"")).collect();
    let cases: Vec<(String, Code, &str)> = vec![
        (
            r#"{"dim_names":["a","b"]}"#.into(),
            Code::MetadataDims,
            "2 names for 3 axes",
        ),
        (
            r#"{"dim_names":["a","b","a"]}"#.into(),
            Code::MetadataDims,
            "names two axes",
        ),
        (
            r#"{"dim_names":["a","","c"]}"#.into(),
            Code::MetadataDims,
            "is empty",
        ),
        (
            r#"{"dim_names":["a","1","c"]}"#.into(),
            Code::MetadataDims,
            "is a number",
        ),
        (
            r#"{"dim_names":["t","y","x"],"coords":{"y":{"labels":["p"]}}}"#.into(),
            Code::MetadataCoords,
            "1 labels for 2 indices",
        ),
        (
            r#"{"coords":{"z":{"labels":["p"]}}}"#.into(),
            Code::MetadataCoords,
            "neither a dimension name",
        ),
        (
            r#"{"tet_coords":{"0":{"dataset":"nope"}}}"#.into(),
            Code::MetadataCoords,
            "does not have",
        ),
        (
            r#"{"tet_coords":{"0":{"dataset":"temp"}}}"#.into(),
            Code::MetadataCoords,
            "of 3 axes",
        ),
        (
            r#"{"tet_coords":{"1":{"dataset":"time"}}}"#.into(),
            Code::MetadataCoords,
            "of 3 values for 2 indices",
        ),
        (
            r#"{"coords":{"0":{"labels":["a","b","c"]}},"tet_coords":{"0":{"dataset":"time"}}}"#
                .into(),
            Code::MetadataCoords,
            "both inline labels",
        ),
        (
            r#"{"attrs":{"_FillValue":"n/a"}}"#.into(),
            Code::MetadataAttrs,
            "not a number",
        ),
        (
            format!(r#"{{"coords":{{"0":{{"labels":[{}]}}}}}}"#, many.join(",")),
            Code::MetadataShape,
            "more than 65536",
        ),
        (
            format!(r#"{{"attrs":{{"u":"{}"}}}}"#, "x".repeat(5000)),
            Code::MetadataShape,
            "5000 bytes",
        ),
        (
            r#"{"dim_names":["a","b","c","d","e","f","g","h","i"]}"#.into(),
            Code::MetadataShape,
            "more than 8",
        ),
        (
            r#"{"attrs":{"u":{"nested":1}}}"#.into(),
            Code::MetadataShape,
            "attr value",
        ),
        (
            r#"{"coords":{"0":{}}}"#.into(),
            Code::MetadataShape,
            "labels",
        ),
    ];
    for (entry, code, says) in cases {
        let json = format!(r#"{{"history":[],"metadata":{{"datasets":{{"temp":{entry}}}}}}}"#);
        let b = with_footer(&bytes, &json);
        let found = codes(&b);
        assert!(
            found.iter().any(|(c, n)| *c == code && n.contains(says)),
            "{says}: {found:?}"
        );
        // Queries on the file answer by number, or refuse by name with a message.
        let r = std::panic::catch_unwind(|| answer(&b, r#"{"dataset": "temp", "mean": "t"}"#));
        assert!(r.is_ok(), "a query on {says} panicked");
        // The same metadata is refused by the writer.
        let m = format!(r#"{{"datasets":{{"temp":{entry}}}}}"#);
        let t = [3u64];
        let specs = [
            DatasetSpec {
                name: "temp",
                dtype: DType::F64,
                shape: &c.shape,
                chunk_shape: &c.chunk,
            },
            DatasetSpec {
                name: "time",
                dtype: DType::I64,
                shape: &t,
                chunk_shape: &t,
            },
        ];
        let mut w = Writer::new(Vec::new(), &specs).unwrap();
        w.write_array(DatasetId(0), &[0u8; 96], Codec::Raw).unwrap();
        w.write_array(DatasetId(1), &[0u8; 24], Codec::Raw).unwrap();
        let footer = FooterSpec {
            history: Vec::new(),
            metadata: Some(m),
        };
        if code.severity() == tet_core::tet::Severity::Error {
            assert!(w.finish(Some(&footer)).is_err(), "writer took {says}");
        }
    }
    // Metadata for a dataset the file lacks is free metadata: no finding.
    let b = with_footer(
        &bytes,
        r#"{"metadata":{"datasets":{"ghost":{"attrs":{"u":"K"}}}}}"#,
    );
    assert_eq!(codes(&b), vec![]);
    // A spill named outside the file is metadata-spill's (the verifier's), not ours.
    let b = with_footer(&bytes, r#"{"metadata_ref":{"offset":999999,"len":5}}"#);
    assert_eq!(codes(&b), vec![]);
}

#[test]
fn the_writer_keeps_peer_limits_and_big_coordinates_go_in_datasets() {
    let c = Case {
        shape: [3, 2, 70],
        chunk: [3, 2, 70],
        steps: vec![1, 1, 1],
        values: vec![0.0; 420],
    };
    // 70 inline labels are over the other implementation's 64: refused.
    let mut m = metadata(&c);
    m.edit("temp", |d| {
        d.coords.retain(|(k, _)| k != "lon");
        d.coords.push((
            "lon".into(),
            Coord::Labels((0..70).map(|i| i.to_string()).collect()),
        ));
    });
    let t = std::panic::catch_unwind(|| write(&c, Some(&m)));
    assert!(t.is_err(), "70 inline labels were written");
    // The same axis as a coordinate dataset is fine, and costs no JSON.
    let mut ok = metadata(&c);
    ok.edit("temp", |d| d.coords.retain(|(k, _)| k != "lon"));
    let bytes = write(&c, Some(&ok));
    tet_tests::assert_peer_readable(&bytes);
    let file = TetFile::open(&bytes).unwrap();
    assert!(meta::findings(&file).is_empty());
    let d: DatasetMeta = meta::read(&file)
        .unwrap()
        .unwrap()
        .dataset("temp")
        .unwrap()
        .clone();
    assert_eq!(d.coord(0), Some(&Coord::Dataset("time".into())));
}

/// A masked decode holds its copy beside the tile: as large as the tile, or 8 bytes an
/// element when widened to f64; the scheduler sizes its threads by it.
#[test]
fn masked_decodes_count_their_copy() {
    use tet_alloc::tet::decode::{ChunkDecoder, Marker, Markers, Mask, Ruzstd};
    let d = ChunkDecoder::new(Ruzstd::new(), 1 << 30);
    let m = Markers::from(Marker::parse("255").unwrap());
    let raw = 4u64 << 20;
    let plain = d.memory_needed(raw);
    let widened = d.memory_needed_masked(raw, DType::U8, Mask::Missing(m));
    assert_eq!(widened - plain, 8 * raw);
    let counted = d.memory_needed_masked(raw, DType::U8, Mask::Indicator(m));
    assert_eq!(counted - plain, raw);
    let float = d.memory_needed_masked(raw, DType::F32, Mask::Missing(m));
    assert_eq!(float - plain, raw);
}
