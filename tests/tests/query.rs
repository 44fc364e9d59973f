//! The fold engine against a naive in-test reference: random shapes (1–5 dims), chunk
//! shapes with clipped edges, all dtypes, raw and zstd chunks, random selections and axes,
//! every operation. Integers must match exactly, floats within a stated tolerance; `-j 1`
//! and `-j 4` must agree bit for bit, and so must files whose index rows are shuffled.

use proptest::prelude::*;
use tet_alloc::tet::query::{
    numpy_median, numpy_quantile, numpy_quantiles, plan, Axes, Cov, Histogram, Operation, Output,
    Quantile, Quantiles,
};
use tet_alloc::tet::testing::TetWriter;
use tet_alloc::tet::writer::{DatasetSpec, Writer};
use tet_core::tet::fold::{Reduce, Value};
use tet_core::tet::select::Slice;
use tet_core::tet::{Codec, DType, DatasetId, TetFile};
use tet_host::tet::query::run;

/// Relative tolerance for float results (sums of up to a few thousand elements).
const TOL: f64 = 1e-9;

#[derive(Debug, Clone)]
struct Spec {
    dtype: DType,
    shape: Vec<u64>,
    chunk: Vec<u64>,
    data: Vec<u8>,
}

fn elem_bytes(dtype: DType, v: i64, special: u8) -> Vec<u8> {
    match dtype {
        DType::U8 => vec![v as u8],
        DType::U16 => (v as u16).to_le_bytes().to_vec(),
        DType::U32 => (v as u32).to_le_bytes().to_vec(),
        DType::U64 => (v as u64).to_le_bytes().to_vec(),
        DType::I16 => (v as i16).to_le_bytes().to_vec(),
        DType::I32 => (v as i32).to_le_bytes().to_vec(),
        DType::I64 => v.to_le_bytes().to_vec(),
        DType::F16 | DType::F32 | DType::F64 => {
            let f = match special {
                0 => f64::NAN,
                1 => f64::INFINITY,
                2 => f64::NEG_INFINITY,
                _ => v as f64 / 4.0,
            };
            match dtype {
                DType::F16 => half::f16::from_f64(f).to_le_bytes().to_vec(),
                DType::F32 => (f as f32).to_le_bytes().to_vec(),
                _ => f.to_le_bytes().to_vec(),
            }
        }
    }
}

fn spec() -> impl Strategy<Value = Spec> {
    spec_of(1..=5)
}

fn spec_of(ndims: std::ops::RangeInclusive<usize>) -> impl Strategy<Value = Spec> {
    (0usize..10, ndims)
        .prop_flat_map(|(t, ndim)| {
            (
                Just(DType::ALL[t]),
                proptest::collection::vec(1u64..=5, ndim),
                proptest::collection::vec(1u64..=3, ndim),
            )
        })
        .prop_flat_map(|(dtype, shape, chunk)| {
            let n = shape.iter().product::<u64>() as usize;
            (
                Just(dtype),
                Just(shape),
                Just(chunk),
                proptest::collection::vec((-300i64..300, 0u8..40), n),
            )
        })
        .prop_map(|(dtype, shape, chunk, vals)| {
            let data = vals
                .iter()
                .flat_map(|(v, s)| {
                    let v = if matches!(dtype, DType::U8 | DType::U16 | DType::U32 | DType::U64) {
                        v.abs()
                    } else {
                        *v
                    };
                    elem_bytes(dtype, v, *s)
                })
                .collect();
            Spec {
                dtype,
                shape,
                chunk,
                data,
            }
        })
}

fn slices(ndim: usize) -> impl Strategy<Value = Vec<Slice>> {
    proptest::collection::vec(
        (
            proptest::option::of(-6i64..6),
            proptest::option::of(-6i64..8),
            proptest::option::of(1i64..4),
        )
            .prop_map(|(start, stop, step)| Slice { start, stop, step }),
        0..=ndim,
    )
}

fn ops() -> impl Strategy<Value = Operation> {
    prop_oneof![
        Just(Operation::Reduce(Reduce::Sum)),
        Just(Operation::Reduce(Reduce::NanSum)),
        Just(Operation::Reduce(Reduce::Prod)),
        Just(Operation::Reduce(Reduce::Mean)),
        Just(Operation::Reduce(Reduce::NanMean)),
        Just(Operation::Reduce(Reduce::Min)),
        Just(Operation::Reduce(Reduce::Max)),
        Just(Operation::Reduce(Reduce::NanMin)),
        Just(Operation::Reduce(Reduce::NanMax)),
        Just(Operation::Reduce(Reduce::ArgMin)),
        Just(Operation::Reduce(Reduce::ArgMax)),
        Just(Operation::Reduce(Reduce::Count)),
        Just(Operation::Reduce(Reduce::NanCount)),
        Just(Operation::Reduce(Reduce::InfCount)),
        Just(Operation::Reduce(Reduce::AllFinite)),
        Just(Operation::Reduce(Reduce::AnyNan)),
        Just(Operation::Reduce(Reduce::AnyInf)),
        Just(Operation::Reduce(Reduce::NormL1)),
        Just(Operation::Reduce(Reduce::NormL2)),
        (0u32..2).prop_map(|d| Operation::Reduce(Reduce::Var(d))),
        (0u32..2).prop_map(|d| Operation::Reduce(Reduce::Std(d))),
        (0u32..2).prop_map(|d| Operation::Reduce(Reduce::NanVar(d))),
        (0u32..2).prop_map(|d| Operation::Reduce(Reduce::NanStd(d))),
        (0u32..=4).prop_map(|q| Operation::Quantile(Quantile {
            q: f64::from(q) / 4.0,
            integral: false
        })),
        (0u32..=1).prop_map(|q| Operation::Quantile(Quantile {
            q: f64::from(q),
            integral: true
        })),
        Just(Operation::Median),
        proptest::collection::vec((0u32..=8, any::<bool>()), 1..4).prop_map(|qs| {
            let qs: Vec<Quantile> = qs
                .into_iter()
                .map(|(q, int)| Quantile {
                    q: if int {
                        f64::from(q / 8)
                    } else {
                        f64::from(q) / 8.0
                    },
                    integral: int,
                })
                .collect();
            Operation::Quantiles(Quantiles::new(&qs).unwrap())
        }),
        (
            1u32..5,
            prop_oneof![
                Just(None),
                Just(Some((-20.0, 20.0))),
                Just(Some((0.0, 0.0))),
                Just(Some((-1.25, 3.75))),
            ]
        )
            .prop_map(|(bins, range)| Operation::Histogram(Histogram { bins, range })),
    ]
}

/// `numpy.histogram(a.astype(float), bins, range)` written from its documentation, not
/// its arithmetic: NumPy's `linspace` edges, each element in the last bin whose left edge
/// is at or below it (the last bin closed); then the counts below the range, above it and
/// NaN (NumPy drops those). `None` where NumPy raises.
fn histogram_ref(
    all: &[f64],
    cells: &[Vec<f64>],
    bins: u32,
    range: Option<(f64, f64)>,
) -> Option<Vec<Value>> {
    let (mut lo, mut hi) = match range {
        Some(r) => r,
        None if all.is_empty() => (0.0, 1.0),
        None => {
            if all.iter().any(|x| x.is_nan()) {
                return None;
            }
            let lo = all.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = all.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            if !(lo.is_finite() && hi.is_finite()) {
                return None;
            }
            (lo, hi)
        }
    };
    if lo == hi {
        lo -= 0.5;
        hi += 0.5;
    }
    let n = bins as usize;
    let step = (hi - lo) / n as f64;
    let mut edges: Vec<f64> = (0..n).map(|i| i as f64 * step + lo).collect();
    edges.push(hi);
    let mut out = Vec::new();
    for c in cells {
        let mut counts = vec![0u64; n + 3];
        for &x in c {
            let slot = if x.is_nan() {
                n + 2
            } else if x < lo {
                n
            } else if x > hi {
                n + 1
            } else {
                (0..n).rev().find(|&i| edges[i] <= x).unwrap_or(0)
            };
            counts[slot] += 1;
        }
        out.extend(counts.into_iter().map(Value::U64));
    }
    Some(out)
}

/// (f64 value, exact integer, NaN?) of every element, row-major.
fn elements(s: &Spec) -> Vec<(f64, i128)> {
    let es = s.dtype.size() as usize;
    s.data
        .chunks(es)
        .map(|b| {
            let f = tet_tests::element(s.dtype, b);
            let i = match s.dtype {
                DType::U8 => i128::from(b[0]),
                DType::U16 => i128::from(u16::from_le_bytes(b.try_into().unwrap())),
                DType::U32 => i128::from(u32::from_le_bytes(b.try_into().unwrap())),
                DType::U64 => i128::from(u64::from_le_bytes(b.try_into().unwrap())),
                DType::I16 => i128::from(i16::from_le_bytes(b.try_into().unwrap())),
                DType::I32 => i128::from(i32::from_le_bytes(b.try_into().unwrap())),
                DType::I64 => i128::from(i64::from_le_bytes(b.try_into().unwrap())),
                _ => 0,
            };
            (f, i)
        })
        .collect()
}

/// Python's slice on one axis, written independently of the engine.
fn indices(len: u64, s: &Slice) -> Vec<u64> {
    let len = len as i64;
    let fix = |v: i64| if v < 0 { (v + len).max(0) } else { v.min(len) };
    let start = s.start.map_or(0, fix);
    let stop = s.stop.map_or(len, fix);
    let step = s.step.unwrap_or(1);
    (start..stop)
        .step_by(step as usize)
        .map(|i| i as u64)
        .collect()
}

#[derive(Debug)]
enum Expect {
    Ok(Vec<Value>),
    Err,
}

fn reference(s: &Spec, sl: &[Slice], op: Operation, axes: Option<&[usize]>) -> (Vec<u64>, Expect) {
    let n = s.shape.len();
    let idx: Vec<Vec<u64>> = (0..n)
        .map(|d| indices(s.shape[d], sl.get(d).unwrap_or(&Slice::default())))
        .collect();
    let reduced = |d: usize| axes.is_none_or(|a| a.contains(&d));
    let out_shape: Vec<u64> = (0..n)
        .filter(|d| !reduced(*d))
        .map(|d| idx[d].len() as u64)
        .collect();
    let cells: u64 = out_shape.iter().product();
    let mut groups: Vec<Vec<(u64, f64, i128)>> = vec![Vec::new(); cells as usize];
    let el = elements(s);
    let total: u64 = idx.iter().map(|v| v.len() as u64).product();
    for k in 0..total {
        let mut rem = k;
        let mut ord = vec![0u64; n];
        for d in (0..n).rev() {
            let c = idx[d].len() as u64;
            ord[d] = rem % c;
            rem /= c;
        }
        let mut pos = 0u64;
        let mut out = 0u64;
        for d in 0..n {
            pos = pos * s.shape[d] + idx[d][ord[d] as usize];
            if !reduced(d) {
                out = out * idx[d].len() as u64 + ord[d];
            }
        }
        let (f, i) = el[pos as usize];
        groups[out as usize].push((pos, f, i));
    }
    let float = matches!(s.dtype, DType::F16 | DType::F32 | DType::F64);
    let signed = matches!(s.dtype, DType::I16 | DType::I32 | DType::I64);
    let int_val = |v: i128| -> Option<Value> {
        // Exact whatever the size: 64-bit types when they hold it.
        Some(if signed {
            i64::try_from(v).map_or(Value::I128(v), Value::I64)
        } else {
            u64::try_from(v).map_or(Value::I128(v), Value::U64)
        })
    };
    if let Operation::Histogram(h) = op {
        let all: Vec<f64> = groups.iter().flatten().map(|e| e.1).collect();
        let cells: Vec<Vec<f64>> = groups
            .iter()
            .map(|g| g.iter().map(|e| e.1).collect())
            .collect();
        let mut shape = out_shape;
        shape.push(u64::from(h.bins) + 3);
        return match histogram_ref(&all, &cells, h.bins, h.range) {
            Some(v) => (shape, Expect::Ok(v)),
            None => (shape, Expect::Err),
        };
    }
    if let Operation::Covariance(c) = op {
        // numpy.cov(m, rowvar, ddof) / numpy.corrcoef(m, rowvar): rowvar=True (observations
        // along axis 1) unless axis 0 alone is reduced.
        if n != 2 {
            return (vec![], Expect::Err);
        }
        let obs = match axes {
            None => 1,
            Some(a) if a.len() == 2 => 1,
            Some([0]) => 0,
            Some([1]) => 1,
            _ => return (vec![], Expect::Err),
        };
        let (rows, cols) = (idx[0].len(), idx[1].len());
        let el = elements(s);
        let m: Vec<f64> = (0..rows * cols)
            .map(|k| el[(idx[0][k / cols] * s.shape[1] + idx[1][k % cols]) as usize].0)
            .collect();
        let (vars, nobs) = if obs == 1 { (rows, cols) } else { (cols, rows) };
        let x = |v: usize, o: usize| {
            if obs == 1 {
                m[v * cols + o]
            } else {
                m[o * cols + v]
            }
        };
        let ddof = if c.correlation { 1 } else { c.ddof as usize };
        if nobs == 0 || nobs <= ddof {
            return (vec![], Expect::Err);
        }
        let means: Vec<f64> = (0..vars)
            .map(|v| (0..nobs).map(|o| x(v, o)).sum::<f64>() / nobs as f64)
            .collect();
        let mut cov = vec![0f64; vars * vars];
        for i in 0..vars {
            for j in 0..vars {
                cov[i * vars + j] = (0..nobs)
                    .map(|o| (x(i, o) - means[i]) * (x(j, o) - means[j]))
                    .sum::<f64>()
                    / (nobs - ddof) as f64;
            }
        }
        if c.correlation {
            let sd: Vec<f64> = (0..vars).map(|i| cov[i * vars + i].sqrt()).collect();
            for k in 0..vars * vars {
                cov[k] = (cov[k] / sd[k / vars] / sd[k % vars]).clamp(-1.0, 1.0);
            }
        }
        return (
            vec![vars as u64, vars as u64],
            Expect::Ok(cov.into_iter().map(Value::F64).collect()),
        );
    }
    if let Operation::Quantiles(qs) = op {
        // numpy.quantile(a, [q, ...], axis): one quantile at a time, a first axis of qs.
        let qs = qs.to_vec();
        let mut vals = vec![Value::F64(0.0); qs.len() * groups.len()];
        for (c, g) in groups.iter().enumerate() {
            for (k, q) in qs.iter().enumerate() {
                let mut v: Vec<f64> = g.iter().map(|e| e.1).collect();
                match numpy_quantile(&mut v, *q) {
                    Some(x) => vals[k * groups.len() + c] = Value::F64(x),
                    None => return (out_shape, Expect::Err),
                }
            }
        }
        let mut shape = vec![qs.len() as u64];
        shape.extend(out_shape);
        return (shape, Expect::Ok(vals));
    }
    let mut vals = Vec::new();
    for g in &groups {
        let non_nan: Vec<_> = g.iter().filter(|e| !e.1.is_nan()).copied().collect();
        let v = match op {
            // NumPy's all-NaN slice: NaN, with a warning.
            Operation::Reduce(r)
                if r.skips_nan() && r != Reduce::NanSum && !g.is_empty() && non_nan.is_empty() =>
            {
                Some(Value::F64(f64::NAN))
            }
            Operation::Reduce(r) => {
                let set = if r.skips_nan() { &non_nan } else { g };
                match r {
                    Reduce::Count => Some(Value::U64(g.len() as u64)),
                    Reduce::NanCount => {
                        Some(Value::U64(g.iter().filter(|e| e.1.is_nan()).count() as u64))
                    }
                    Reduce::InfCount => Some(Value::U64(
                        g.iter().filter(|e| e.1.is_infinite()).count() as u64,
                    )),
                    Reduce::AllFinite => Some(Value::Bool(g.iter().all(|e| e.1.is_finite()))),
                    // NumPy: np.isnan(a).any(), np.isinf(a).any().
                    Reduce::AnyNan => Some(Value::Bool(g.iter().any(|e| e.1.is_nan()))),
                    Reduce::AnyInf => Some(Value::Bool(g.iter().any(|e| e.1.is_infinite()))),
                    // NumPy: np.sum(np.abs(a.astype(float)), axis) and
                    // np.sqrt(np.sum(np.square(a.astype(float)), axis)); 0 when empty.
                    Reduce::NormL1 => Some(Value::F64(g.iter().map(|e| e.1.abs()).sum())),
                    Reduce::NormL2 => {
                        Some(Value::F64(g.iter().map(|e| e.1 * e.1).sum::<f64>().sqrt()))
                    }
                    Reduce::Sum | Reduce::NanSum => {
                        if float {
                            Some(Value::F64(set.iter().map(|e| e.1).sum()))
                        } else {
                            set.iter()
                                .try_fold(0i128, |a, e| a.checked_add(e.2))
                                .and_then(int_val)
                        }
                    }
                    Reduce::Prod => {
                        if float {
                            Some(Value::F64(set.iter().map(|e| e.1).product()))
                        } else if set.iter().any(|e| e.2 == 0) {
                            // Exact: a zero factor makes 0, whatever the others overflow to.
                            int_val(0)
                        } else {
                            // Exact: the magnitude in u128 and the sign apart, so no
                            // order passes through a value that does not fit.
                            let neg = set.iter().filter(|e| e.2 < 0).count() % 2 == 1;
                            set.iter()
                                .try_fold(1u128, |a, e| a.checked_mul(e.2.unsigned_abs()))
                                .and_then(|m| {
                                    if neg {
                                        0i128.checked_sub_unsigned(m)
                                    } else {
                                        i128::try_from(m).ok()
                                    }
                                })
                                .and_then(int_val)
                        }
                    }
                    Reduce::Mean | Reduce::NanMean => (!set.is_empty()).then(|| {
                        let t: f64 = if float {
                            set.iter().map(|e| e.1).sum()
                        } else {
                            set.iter().map(|e| e.2).sum::<i128>() as f64
                        };
                        Value::F64(t / set.len() as f64)
                    }),
                    Reduce::Min
                    | Reduce::Max
                    | Reduce::NanMin
                    | Reduce::NanMax
                    | Reduce::ArgMin
                    | Reduce::ArgMax => {
                        let want_min = matches!(r, Reduce::Min | Reduce::NanMin | Reduce::ArgMin);
                        let mut best: Option<(u64, f64, i128)> = None;
                        for e in set {
                            best = Some(match best {
                                None => *e,
                                Some(b) if b.1.is_nan() => b,
                                Some(_) if e.1.is_nan() => *e,
                                Some(b) => {
                                    let better = if float {
                                        if want_min {
                                            e.1 < b.1
                                        } else {
                                            e.1 > b.1
                                        }
                                    } else if want_min {
                                        e.2 < b.2
                                    } else {
                                        e.2 > b.2
                                    };
                                    if better {
                                        *e
                                    } else {
                                        b
                                    }
                                }
                            });
                        }
                        best.and_then(|b| {
                            if matches!(r, Reduce::ArgMin | Reduce::ArgMax) {
                                Some(Value::Position(b.0))
                            } else if float {
                                Some(Value::F64(b.1))
                            } else {
                                int_val(b.2)
                            }
                        })
                    }
                    Reduce::Var(dd) | Reduce::Std(dd) | Reduce::NanVar(dd) | Reduce::NanStd(dd) => {
                        if set.is_empty() || set.len() as u64 <= u64::from(dd) {
                            None
                        } else if set.iter().any(|e| e.1.is_nan()) {
                            Some(Value::F64(f64::NAN))
                        } else {
                            let m = set.iter().map(|e| e.1).sum::<f64>() / set.len() as f64;
                            let v = set.iter().map(|e| (e.1 - m) * (e.1 - m)).sum::<f64>()
                                / (set.len() as f64 - f64::from(dd));
                            Some(Value::F64(
                                if matches!(r, Reduce::Std(_) | Reduce::NanStd(_)) {
                                    v.sqrt()
                                } else {
                                    v
                                },
                            ))
                        }
                    }
                }
            }
            // The gathering is what is tested here; the rules themselves are checked
            // against NumPy's own answers (`numpy_rules_match_numpy` below).
            Operation::Quantile(q) => {
                let mut v: Vec<f64> = g.iter().map(|e| e.1).collect();
                numpy_quantile(&mut v, q).map(Value::F64)
            }
            Operation::Median => {
                let mut v: Vec<f64> = g.iter().map(|e| e.1).collect();
                numpy_median(&mut v).map(Value::F64)
            }
            Operation::Histogram(_) | Operation::Quantiles(_) | Operation::Covariance(_) => {
                unreachable!("handled above")
            }
        };
        match v {
            Some(v) => vals.push(v),
            None => return (out_shape, Expect::Err),
        }
    }
    (out_shape, Expect::Ok(vals))
}

fn close(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::F64(x), Value::F64(y)) => {
            (x.is_nan() && y.is_nan())
                || x == y
                || (x - y).abs() <= TOL * x.abs().max(y.abs()).max(1.0)
        }
        _ => a == b,
    }
}

fn write(s: &Spec, zstd: bool) -> Vec<u8> {
    let d = [DatasetSpec {
        name: "a",
        dtype: s.dtype,
        shape: &s.shape,
        chunk_shape: &s.chunk,
    }];
    let mut w = Writer::new(Vec::new(), &d).unwrap();
    w.write_array(
        DatasetId(0),
        &s.data,
        if zstd { Codec::Zstd } else { Codec::Raw },
    )
    .unwrap();
    w.finish(None).unwrap()
}

/// The same data with the index rows in reverse order.
fn reversed(s: &Spec) -> Vec<u8> {
    let canon = write(s, false);
    let f = TetFile::open(&canon).unwrap();
    let ds = f.dataset("a").unwrap();
    let mut w = TetWriter::new();
    let a = w.add_dataset("a", s.dtype, &s.shape, &s.chunk).unwrap();
    for cell in (0..ds.grid_cells()).rev() {
        let c = ds.delinearize(cell);
        let ch = f.chunk(&ds, c.as_slice()).unwrap();
        w.add_chunk_raw(a, c.as_slice(), ch.payload);
    }
    w.to_bytes().unwrap()
}

fn run_on(
    bytes: &[u8],
    sl: &[Slice],
    op: Operation,
    axes: Option<&[usize]>,
    threads: usize,
) -> Result<Output, String> {
    let f = TetFile::open(bytes).unwrap();
    let ds = f.dataset("a").unwrap();
    let p = plan(&f, ds, sl).map_err(|e| e.to_string())?;
    let ax = Axes::new(ds.ndim(), axes).map_err(|e| e.to_string())?;
    run(&f, &p, op, &ax, threads, 1 << 30).map_err(|e| e.to_string())
}

fn bits(o: &Result<Output, String>) -> Result<Vec<u64>, String> {
    o.as_ref().map_err(Clone::clone).map(|o| {
        o.values
            .iter()
            .map(|v| match v {
                Value::F64(f) => f.to_bits(),
                Value::U64(u) | Value::Position(u) => *u,
                Value::I64(i) => *i as u64,
                Value::I128(i) => *i as u64 ^ (*i >> 64) as u64,
                Value::Bool(b) => u64::from(*b),
            })
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// Covariance and correlation of rank-2 selections against numpy.cov and
    /// numpy.corrcoef written out, every dtype, NaN and ±inf, any row order and `-j`.
    #[test]
    fn covariance_matches_numpy_cov(
        s in spec_of(2..=2),
        sl in slices(2),
        axes_pick in 0u8..4,
        ddof in 0u32..3,
        correlation in any::<bool>(),
        zstd in any::<bool>(),
    ) {
        let op = Operation::Covariance(Cov { ddof, correlation });
        let axes: Option<Vec<usize>> = match axes_pick {
            0 => None,
            1 => Some(vec![0]),
            2 => Some(vec![1]),
            _ => Some(vec![]),
        };
        let bytes = write(&s, zstd);
        let got = run_on(&bytes, &sl, op, axes.as_deref(), 1);
        let (shape, want) = reference(&s, &sl, op, axes.as_deref());
        match (&got, &want) {
            (Ok(o), Expect::Ok(v)) => {
                prop_assert_eq!(&o.shape, &shape);
                for (a, b) in o.values.iter().zip(v) {
                    let ok = match (a, b) {
                        (Value::F64(x), Value::F64(y)) => (x.is_nan() && y.is_nan()) || x == y || (x - y).abs() <= 1e-6 * x.abs().max(y.abs()).max(1.0),
                        _ => false,
                    };
                    prop_assert!(ok, "{:?}: engine {:?}, reference {:?}", op, a, b);
                }
            }
            (Err(_), Expect::Err) => {}
            _ => prop_assert!(false, "{:?} axes {:?}: engine {:?}, reference {:?}", op, axes, got, want),
        }
        let four = run_on(&reversed(&s), &sl, op, axes.as_deref(), 4);
        prop_assert_eq!(bits(&got), bits(&four));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn engine_matches_the_naive_reference(
        s in spec(),
        sl in slices(5),
        op in ops(),
        axes_mask in any::<u8>(),
        scalar in any::<bool>(),
        zstd in any::<bool>(),
    ) {
        let n = s.shape.len();
        let sl: Vec<Slice> = sl.into_iter().take(n).collect();
        let axes: Option<Vec<usize>> = (!scalar).then(|| (0..n).filter(|d| axes_mask >> d & 1 == 1).collect());
        let bytes = write(&s, zstd);
        let got = run_on(&bytes, &sl, op, axes.as_deref(), 1);
        let (shape, want) = reference(&s, &sl, op, axes.as_deref());
        match (&got, &want) {
            (Ok(o), Expect::Ok(v)) => {
                let expect_shape = if axes.as_ref().is_none_or(|a| a.len() == n) && scalar && !matches!(op, Operation::Histogram(_) | Operation::Quantiles(_) | Operation::Covariance(_)) { vec![] } else { shape.clone() };
                prop_assert_eq!(&o.shape, &expect_shape);
                prop_assert_eq!(o.values.len(), v.len());
                for (a, b) in o.values.iter().zip(v) {
                    prop_assert!(close(a, b), "{:?}: engine {:?}, reference {:?}", op, a, b);
                }
            }
            (Err(_), Expect::Err) => {}
            _ => prop_assert!(false, "{:?} axes {:?}: engine {:?}, reference {:?}", op, axes, got, want),
        }
        // Bit-identical across thread counts and index row order.
        let four = run_on(&bytes, &sl, op, axes.as_deref(), 4);
        prop_assert_eq!(bits(&got), bits(&four));
        let rev = run_on(&reversed(&s), &sl, op, axes.as_deref(), 3);
        let raw = run_on(&write(&s, false), &sl, op, axes.as_deref(), 1);
        prop_assert_eq!(bits(&raw), bits(&rev));
    }
}

#[test]
fn conformance_files_through_the_engine() {
    let Some(dir) = tet_tests::conformance_dir() else {
        return;
    };
    let q = |name: &str, ds: &str, op: Reduce| -> Value {
        let b = std::fs::read(dir.join(name)).unwrap();
        let f = TetFile::open(&b).unwrap();
        let d = f.dataset(ds).unwrap();
        let p = plan(&f, d, &[]).unwrap();
        let ax = Axes::new(d.ndim(), None).unwrap();
        run(&f, &p, Operation::Reduce(op), &ax, 2, 1 << 30)
            .unwrap()
            .values[0]
    };
    assert_eq!(
        q("sample.tet", "temperature", Reduce::Sum),
        Value::F64(21.0)
    );
    assert_eq!(
        q("sample.tet", "temperature", Reduce::Mean),
        Value::F64(3.5)
    );
    assert_eq!(q("sample.tet", "temperature", Reduce::Min), Value::F64(1.0));
    assert_eq!(q("sample.tet", "temperature", Reduce::Max), Value::F64(6.0));
    let Value::F64(v) = q("sample.tet", "temperature", Reduce::Var(0)) else {
        panic!()
    };
    assert!((v - 2.916_666_7).abs() < 1e-6);
    for (f, sum) in [
        ("multichunk_u8.tet", Value::U64(21)),
        ("multichunk_u32.tet", Value::U64(21)),
        ("multichunk_f16.tet", Value::F64(21.0)),
    ] {
        assert_eq!(q(f, "a", Reduce::Sum), sum, "{f}");
        assert_eq!(q(f, "a", Reduce::Mean), Value::F64(3.5), "{f}");
    }
    assert_eq!(q("large.tet", "a", Reduce::Sum), Value::F64(2_366_400.0));
    assert_eq!(q("large.tet", "a", Reduce::Mean), Value::F64(1087.5));
    assert_eq!(q("large.tet", "a", Reduce::Min), Value::F64(0.0));
    assert_eq!(q("large.tet", "a", Reduce::Max), Value::F64(2175.0));
    let Value::F64(v) = q("large.tet", "a", Reduce::Var(0)) else {
        panic!()
    };
    assert!((v - 394_581.25).abs() < 1e-6, "{v}");
}

#[test]
fn integer_results_are_exact_to_128_bits_and_an_error_past_them() {
    let s = Spec {
        dtype: DType::U64,
        shape: vec![2],
        chunk: vec![1],
        data: [u64::MAX, 1].iter().flat_map(|v| v.to_le_bytes()).collect(),
    };
    let b = write(&s, false);
    let sum = run_on(&b, &[], Operation::Reduce(Reduce::Sum), None, 1).unwrap();
    assert_eq!(sum.values, vec![Value::I128(1 << 64)]);
    // The mean is still exact in 128 bits.
    let m = run_on(&b, &[], Operation::Reduce(Reduce::Mean), None, 1).unwrap();
    assert_eq!(m.values, vec![Value::F64(9_223_372_036_854_775_808.0)]);
    // i64::MIN squared fits 128 bits; cubed it does not.
    let s = Spec {
        dtype: DType::I64,
        shape: vec![3],
        chunk: vec![2],
        data: [i64::MIN, i64::MIN, -1]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect(),
    };
    let b = write(&s, false);
    let sel = [Slice {
        start: None,
        stop: Some(2),
        step: None,
    }];
    let p = run_on(&b, &sel, Operation::Reduce(Reduce::Prod), None, 1).unwrap();
    assert_eq!(p.values, vec![Value::I128(1 << 126)]);
    let p = run_on(&b, &[], Operation::Reduce(Reduce::Prod), None, 2).unwrap();
    assert_eq!(p.values, vec![Value::I128(-(1 << 126))]);
    let s = Spec {
        dtype: DType::I64,
        shape: vec![3],
        chunk: vec![2],
        data: [i64::MIN; 3].iter().flat_map(|v| v.to_le_bytes()).collect(),
    };
    let e = run_on(
        &write(&s, false),
        &[],
        Operation::Reduce(Reduce::Prod),
        None,
        1,
    )
    .unwrap_err();
    assert!(e.contains("overflows"), "{e}");
}

#[test]
fn a_zero_factor_makes_a_product_zero_in_any_order() {
    // Before the zero the product overflows 128 bits; after it, nothing can.
    for zero_at in [0usize, 2, 5] {
        let mut vals = [i64::MIN; 6];
        vals[zero_at] = 0;
        let s = Spec {
            dtype: DType::I64,
            shape: vec![6],
            chunk: vec![2],
            data: vals.iter().flat_map(|v| v.to_le_bytes()).collect(),
        };
        for threads in [1, 2, 4] {
            for bytes in [write(&s, false), reversed(&s)] {
                let p =
                    run_on(&bytes, &[], Operation::Reduce(Reduce::Prod), None, threads).unwrap();
                assert_eq!(
                    p.values,
                    vec![Value::I64(0)],
                    "zero at {zero_at}, -j {threads}"
                );
            }
        }
    }
}

#[test]
fn a_product_of_exactly_minus_2_to_the_127_is_exact_in_any_order() {
    // (-2^63)(-2^63)(2)(-1) = -2^127, which fits in i128; the first three alone make
    // +2^127, which does not. Every order, chunking and thread count gives the product.
    let orders: [[i64; 4]; 3] = [
        [i64::MIN, i64::MIN, 2, -1],
        [-1, i64::MIN, 2, i64::MIN],
        [2, i64::MIN, -1, i64::MIN],
    ];
    for vals in orders {
        for chunk in [1u64, 2, 4] {
            let s = Spec {
                dtype: DType::I64,
                shape: vec![4],
                chunk: vec![chunk],
                data: vals.iter().flat_map(|v| v.to_le_bytes()).collect(),
            };
            for threads in [1, 2, 4] {
                for bytes in [write(&s, false), reversed(&s)] {
                    let p = run_on(&bytes, &[], Operation::Reduce(Reduce::Prod), None, threads)
                        .unwrap();
                    assert_eq!(
                        p.values,
                        vec![Value::I128(i128::MIN)],
                        "{vals:?}, chunk {chunk}, -j {threads}"
                    );
                }
            }
        }
    }
    // +2^127 is out of range whatever the order.
    let s = Spec {
        dtype: DType::I64,
        shape: vec![4],
        chunk: vec![1],
        data: [i64::MIN, i64::MIN, 2, 1]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect(),
    };
    for bytes in [write(&s, false), reversed(&s)] {
        assert!(run_on(&bytes, &[], Operation::Reduce(Reduce::Prod), None, 2).is_err());
    }
}

#[test]
fn strided_selections_touch_only_their_chunks() {
    let s = Spec {
        dtype: DType::U8,
        shape: vec![1000, 1000],
        chunk: vec![10, 10],
        data: vec![1; 1_000_000],
    };
    let b = write(&s, false);
    let f = TetFile::open(&b).unwrap();
    let ds = f.dataset("a").unwrap();
    let sl = [
        Slice {
            start: None,
            stop: None,
            step: Some(100),
        },
        Slice {
            start: None,
            stop: None,
            step: Some(100),
        },
    ];
    let p = plan(&f, ds, &sl).unwrap();
    // 10 × 10 of the 100 × 100 chunks.
    assert_eq!(p.parts.len(), 100);
    assert_eq!(p.read_bytes, 100 * 100);
    let out = run_on(&b, &sl, Operation::Reduce(Reduce::Count), None, 2).unwrap();
    assert_eq!(out.values, vec![Value::U64(100)]);
}

#[test]
fn a_huge_grid_with_few_rows_is_refused_before_planning() {
    let mut w = TetWriter::new();
    let a = w
        .add_dataset("a", DType::F32, &[1 << 50, 64], &[4, 4])
        .unwrap();
    w.add_chunk_raw(a, &[0, 0], &[0; 64]);
    let b = w.to_bytes().unwrap();
    let e = run_on(&b, &[], Operation::Reduce(Reduce::Sum), None, 2).unwrap_err();
    assert!(e.contains("more chunks than the index has rows (1)"), "{e}");
    // A selection inside the one present chunk still works.
    let sl = [
        Slice {
            start: Some(0),
            stop: Some(4),
            step: None,
        },
        Slice {
            start: Some(0),
            stop: Some(4),
            step: None,
        },
    ];
    let out = run_on(&b, &sl, Operation::Reduce(Reduce::Count), None, 1).unwrap();
    assert_eq!(out.values, vec![Value::U64(16)]);
}

/// `numpy_quantile` and `numpy_median` against NumPy's own answers over 400 random small
/// arrays with ±inf, NaN, repeats and single elements (`data/numpy_quantiles.txt`, written
/// by `tests/interop/numpy_quantiles.py` with NumPy 2.4; the test needs no NumPy).
#[test]
fn numpy_rules_match_numpy() {
    let table = include_str!("data/numpy_quantiles.txt");
    let mut cases = 0;
    for line in table.lines().filter(|l| !l.starts_with('#')) {
        let f: Vec<&str> = line.split('|').collect();
        let mut v: Vec<f64> = f[0].split(',').map(|x| x.parse().unwrap()).collect();
        let want: f64 = f[2].parse().unwrap();
        let got = if f[1] == "median" {
            numpy_median(&mut v)
        } else {
            let q = Quantile {
                q: f[1].parse().unwrap(),
                integral: !f[1].contains(['.', 'e']),
            };
            numpy_quantile(&mut v, q)
        }
        .unwrap();
        assert!(
            got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
            "{line}: got {got}"
        );
        cases += 1;
    }
    assert_eq!(cases, 400);
    // Several quantiles by successive selections give each one's bits, whatever order
    // they are asked in; and the selections agree with a full sort's order statistics.
    for line in table.lines().filter(|l| !l.starts_with('#')) {
        let v: Vec<f64> = line
            .split('|')
            .next()
            .unwrap()
            .split(',')
            .map(|x| x.parse().unwrap())
            .collect();
        let qs: Vec<Quantile> = [0.95, 0.05, 0.5, 1.0, 0.0, 0.25]
            .iter()
            .map(|q| Quantile {
                q: *q,
                integral: false,
            })
            .chain([
                Quantile {
                    q: 1.0,
                    integral: true,
                },
                Quantile {
                    q: 0.0,
                    integral: true,
                },
            ])
            .collect();
        let all = numpy_quantiles(&mut v.clone(), &qs).unwrap();
        for (q, got) in qs.iter().zip(&all) {
            let one = numpy_quantile(&mut v.clone(), *q).unwrap();
            assert!(
                one.to_bits() == got.to_bits() || (one.is_nan() && got.is_nan()),
                "{line} {q:?}"
            );
            if v.iter().any(|x| x.is_nan()) {
                continue;
            }
            // A sort-based reference of NumPy's linear method.
            let mut s = v.clone();
            s.sort_by(f64::total_cmp);
            let last = s.len() - 1;
            let want = if q.integral {
                s[if q.q >= 1.0 { last } else { 0 }]
            } else {
                let virt = q.q * last as f64;
                let (lo, hi, g) = if virt >= last as f64 {
                    (last, last, virt + 1.0)
                } else {
                    let lo = virt.floor() as usize;
                    (lo, (lo + 1).min(last), virt - virt.floor())
                };
                let (a, b) = (s[lo], s[hi]);
                if g >= 0.5 {
                    b - (b - a) * (1.0 - g)
                } else {
                    a + (b - a) * g
                }
            };
            assert!(
                want.to_bits() == got.to_bits() || (want.is_nan() && got.is_nan()),
                "{line} {q:?}: {got} vs sorted {want}"
            );
        }
    }
    // The case: q = 0 over [-inf, 1, 2, 5] is -inf (NumPy, integer q); a float
    // q = 0.0 interpolates -inf + (inf · 0) = NaN, as NumPy does too.
    let q = |q: f64, integral| Quantile { q, integral };
    let mut v = [f64::NEG_INFINITY, 1.0, 2.0, 5.0];
    assert_eq!(
        numpy_quantile(&mut v, q(0.0, true)),
        Some(f64::NEG_INFINITY)
    );
    assert!(numpy_quantile(&mut v, q(0.0, false)).unwrap().is_nan());
    assert_eq!(numpy_quantile(&mut v, q(1.0, false)), Some(5.0));
    // numpy.median([inf, inf]) is inf; numpy.quantile([inf, inf], 0.5) is NaN.
    let mut v = [f64::INFINITY, f64::INFINITY];
    assert_eq!(numpy_median(&mut v), Some(f64::INFINITY));
    assert!(numpy_quantile(&mut v, q(0.5, false)).unwrap().is_nan());
    assert_eq!(numpy_median(&mut [7.0]), Some(7.0));
    assert_eq!(numpy_median(&mut []), None);
}

/// NumPy's all-NaN slice: `nan_*` reductions give NaN for an output cell with only NaN
/// elements, and the output names the first such cell and the count (the CLI warns).
#[test]
fn all_nan_cells_are_nan_and_counted() {
    let n = f32::NAN;
    let s = Spec {
        dtype: DType::F32,
        shape: vec![3, 2],
        chunk: vec![2, 1],
        data: [n, n, 1.0, n, n, n]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect(),
    };
    let b = write(&s, false);
    for r in [
        Reduce::NanMean,
        Reduce::NanMin,
        Reduce::NanMax,
        Reduce::NanVar(0),
        Reduce::NanStd(0),
    ] {
        let o = run_on(&b, &[], Operation::Reduce(r), Some(&[1]), 2).unwrap();
        let Value::F64(mid) = o.values[1] else {
            panic!("{r:?}")
        };
        assert!(matches!(o.values[0], Value::F64(x) if x.is_nan()), "{r:?}");
        assert!(matches!(o.values[2], Value::F64(x) if x.is_nan()), "{r:?}");
        assert!(!mid.is_nan(), "{r:?}");
        assert_eq!(o.nothing_left, Some((0, 2)), "{r:?}");
        // The scalar case: the whole selection NaN.
        let sel = [Slice {
            start: Some(2),
            stop: None,
            step: None,
        }];
        let o = run_on(&b, &sel, Operation::Reduce(r), None, 1).unwrap();
        assert!(
            matches!(o.values[..], [Value::F64(x)] if x.is_nan()),
            "{r:?}"
        );
        assert_eq!(o.nothing_left, Some((0, 1)));
    }
    // nan_sum of nothing is 0, not a warning; plain reductions are NaN without one.
    let o = run_on(&b, &[], Operation::Reduce(Reduce::NanSum), Some(&[1]), 1).unwrap();
    assert_eq!(o.values[0], Value::F64(0.0));
    assert_eq!(o.nothing_left, None);
}

/// Found by `engine_matches_the_naive_reference`: a variance with `ddof` at least the
/// element count is refused even when an element is NaN (the engine returned NaN).
#[test]
fn ddof_is_checked_before_nan() {
    let s = Spec {
        dtype: DType::F32,
        shape: vec![1],
        chunk: vec![1],
        data: f32::NAN.to_le_bytes().to_vec(),
    };
    let bytes = write(&s, false);
    for axes in [None, Some(&[][..])] {
        let got = run_on(&bytes, &[], Operation::Reduce(Reduce::Var(1)), axes, 1);
        assert!(got.is_err(), "{axes:?}: {got:?}");
    }
    let two = Spec {
        dtype: DType::F32,
        shape: vec![2],
        chunk: vec![2],
        data: [f32::NAN, 1.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect(),
    };
    let got = run_on(
        &write(&two, false),
        &[],
        Operation::Reduce(Reduce::Var(1)),
        None,
        1,
    );
    assert!(matches!(got.unwrap().values[..], [Value::F64(v)] if v.is_nan()));
}

/// A time mean over a cube chunked one step at a time: every chunk adds to one output
/// box, which `tet-host` folds in stripes on every thread. The result is bit-identical
/// for any thread count, to the library's one-thread `execute`, and with a budget that
/// leaves room for one stripe at a time; and it is the mean.
#[test]
fn one_box_of_many_chunks_folds_in_stripes_with_the_same_bits() {
    let (t, y, x) = (140u64, 6u64, 5u64);
    let specs = [DatasetSpec {
        name: "a",
        dtype: DType::F32,
        shape: &[t, y, x],
        chunk_shape: &[1, y, x],
    }];
    let vals: Vec<f32> = (0..t * y * x)
        .map(|i| ((i * 7919 % 1000) as f32) / 7.0 - 60.0)
        .collect();
    let data: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
    let mut w = Writer::new(Vec::new(), &specs).unwrap();
    // Raw chunks: decoding takes none of the budget, so the tight one below holds the
    // boxes alone.
    w.write_array(DatasetId(0), &data, Codec::Raw).unwrap();
    let bytes = w.finish(None).unwrap();
    let f = TetFile::open(&bytes).unwrap();
    let ds = f.dataset("a").unwrap();
    let sl = [Slice::default(), Slice::default(), Slice::default()];
    let p = plan(&f, ds, &sl).unwrap();
    let ax = Axes::new(3, Some(&[0])).unwrap();
    assert!(p.parts.len() > tet_alloc::tet::query::STRIPE_PARTS * 4);
    for op in [
        Reduce::Mean,
        Reduce::Sum,
        Reduce::Var(1),
        Reduce::Min,
        Reduce::NanMean,
    ] {
        let op = Operation::Reduce(op);
        let one = run(&f, &p, op, &ax, 1, 1 << 30).map_err(|e| e.to_string());
        for threads in [2, 3, 4] {
            let many = run(&f, &p, op, &ax, threads, 1 << 30).map_err(|e| e.to_string());
            assert_eq!(bits(&one), bits(&many), "{op:?} -j {threads}");
        }
        // Room for the group's box and one stripe's only: one stripe at a time.
        let tight = tet_alloc::tet::query::groups_bytes(&p, &ax);
        let small = run(&f, &p, op, &ax, 4, tight).map_err(|e| e.to_string());
        assert_eq!(bits(&one), bits(&small), "{op:?} under a tight budget");
        let mut dec = tet_alloc::tet::decode::ChunkDecoder::new(
            tet_alloc::tet::decode::Ruzstd::new(),
            1 << 30,
        );
        let lib =
            tet_alloc::tet::query::execute(&f, &p, op, &ax, &mut dec).map_err(|e| e.to_string());
        assert_eq!(bits(&one), bits(&lib), "{op:?}: library and host");
    }
    let mean = run(&f, &p, Operation::Reduce(Reduce::Mean), &ax, 2, 1 << 30).unwrap();
    for cell in 0..(y * x) as usize {
        let want: f64 = (0..t as usize)
            .map(|k| f64::from(vals[k * (y * x) as usize + cell]))
            .sum::<f64>()
            / t as f64;
        let Value::F64(got) = mean.values[cell] else {
            panic!("{:?}", mean.values[cell])
        };
        assert!(
            (got - want).abs() <= 1e-9 * want.abs().max(1.0),
            "{cell}: {got} {want}"
        );
    }
}

/// Long contiguous runs (the histogram's four-set counting path, which short property
/// shapes seldom reach) of `f32` and `f64`, smooth with NaN, ±inf and values on every
/// edge: every axes choice, a selection that clips rows, given and autodetected ranges,
/// against numpy.histogram written out, bit-identical for any `-j` and row order.
#[test]
fn histograms_of_long_runs_match_numpy() {
    for dtype in [DType::F32, DType::F64] {
        let (rows, cols) = (37u64, 900u64);
        let mut data = Vec::new();
        for r in 0..rows {
            for c in 0..cols {
                let v = match (r * cols + c) % 211 {
                    0 => f64::NAN,
                    1 => f64::INFINITY,
                    2 => f64::NEG_INFINITY,
                    // On an edge of 8 bins over [-1, 1].
                    3 => -1.0 + 0.25 * ((r + c) % 9) as f64,
                    _ => ((r as f64) / 7.0).sin() * ((c as f64) / 90.0).cos() * 1.1,
                };
                if dtype == DType::F32 {
                    data.extend_from_slice(&(v as f32).to_le_bytes());
                } else {
                    data.extend_from_slice(&v.to_le_bytes());
                }
            }
        }
        let s = Spec {
            dtype,
            shape: vec![rows, cols],
            chunk: vec![10, 450],
            data,
        };
        let bytes = write(&s, false);
        let clip = [
            Slice::default(),
            Slice {
                start: Some(3),
                stop: Some(-5),
                step: None,
            },
        ];
        for range in [Some((-1.0, 1.0)), None] {
            let op = Operation::Histogram(Histogram { bins: 8, range });
            for axes in [None, Some(vec![1]), Some(vec![0]), Some(vec![0, 1])] {
                for sl in [&[][..], &clip[..]] {
                    let got = run_on(&bytes, sl, op, axes.as_deref(), 1);
                    let (shape, want) = reference(&s, sl, op, axes.as_deref());
                    match (&got, &want) {
                        (Ok(o), Expect::Ok(v)) => {
                            assert_eq!(o.shape, shape, "{dtype:?} {range:?} {axes:?}");
                            assert_eq!(&o.values, v, "{dtype:?} {range:?} {axes:?} {sl:?}");
                        }
                        (Err(_), Expect::Err) => {}
                        _ => panic!("{dtype:?} {range:?} {axes:?}: {got:?} against {want:?}"),
                    }
                    let four = run_on(&reversed(&s), sl, op, axes.as_deref(), 4);
                    assert_eq!(bits(&got), bits(&four));
                }
            }
        }
    }
}
