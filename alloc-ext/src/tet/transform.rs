//! Element-wise transforms of a dataset, chunk by chunk: `zscore`, `minmax`, `center`,
//! `scale`, `log1p`, `sqrt` and `clip` (docs/query.md, "Transforms").
//!
//! A transform is a map of each element on its own, with at most two statistics of the
//! whole dataset fixed before it starts: the mean and population standard deviation for
//! `zscore`, the minimum and maximum for `minmax`, the mean for `center`. Those come from
//! the fold engine ([`Transform::needs`] names the reductions; [`stats`] runs them on one
//! thread, `tet-host` on every core with the same bits). Then every chunk maps on its
//! own ([`Map::apply`]), so chunks can be mapped in any order and on any thread and the
//! output is the same.
//!
//! Output types follow NumPy's: a float dataset keeps its type (`f16`, `f32`, `f64`);
//! an integer one becomes `f64` for every transform but `clip`, which keeps the type
//! (NumPy gives `float16`/`float32` for the small integers under `sqrt` and `log1p`; here
//! it is `f64`, `numpy.sqrt(a.astype(numpy.float64))`). Arithmetic is in `f64`: each
//! element widened exactly (integers beyond 2^53 rounded, as NumPy's cast rounds them),
//! mapped, and rounded once to the output type.

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt;

use tet_core::tet::fold::{Reduce, Value};
use tet_core::tet::{DType, TetFile};

use crate::tet::decode::{nearest_f32, ChunkDecoder, FrameBackend};
use crate::tet::query::{execute, Axes, Operation, QueryError, ReadPlan};

/// An element-wise transform.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Transform {
    /// `(a - a.mean()) / a.std()`.
    ZScore,
    /// `(a - a.min()) / (a.max() - a.min())`.
    MinMax,
    /// `a - a.mean()`.
    Center,
    /// `a * factor`.
    Scale(f64),
    /// `numpy.log1p(a)`.
    Log1p,
    /// `numpy.sqrt(a)`.
    Sqrt,
    /// `numpy.clip(a, min, max)`: either bound may be absent, not both.
    Clip {
        /// The lower bound.
        min: Option<f64>,
        /// The upper bound.
        max: Option<f64>,
    },
}

/// The names [`Transform::parse`] takes (`min_max_normalize` is the other
/// implementation's name of `minmax`).
pub const NAMES: [&str; 8] = [
    "zscore",
    "minmax",
    "min_max_normalize",
    "center",
    "scale",
    "log1p",
    "sqrt",
    "clip",
];

/// Why a transform cannot be made.
#[derive(Clone, Debug, PartialEq)]
pub enum TransformError {
    /// The name is not a transform's.
    Unknown(String),
    /// A parameter is missing, not allowed, or not a number it can be.
    Parameter(String),
    /// A statistic the transform needs did not come out of the fold engine.
    Stats(&'static str),
}

impl fmt::Display for TransformError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TransformError::Unknown(n) => {
                write!(f, "unknown transform '{n}' (one of: {})", NAMES.join(", "))
            }
            TransformError::Parameter(m) => f.write_str(m),
            TransformError::Stats(s) => write!(f, "the dataset's {s} could not be computed"),
        }
    }
}

impl Transform {
    /// The transform called `name` with its parameters: `factor` for `scale` (required),
    /// `min` and `max` for `clip` (at least one); any other parameter is refused.
    pub fn parse(
        name: &str,
        factor: Option<f64>,
        min: Option<f64>,
        max: Option<f64>,
    ) -> Result<Transform, TransformError> {
        let t = match name {
            "zscore" => Transform::ZScore,
            "minmax" | "min_max_normalize" => Transform::MinMax,
            "center" => Transform::Center,
            "scale" => Transform::Scale(factor.ok_or_else(|| {
                TransformError::Parameter(String::from("scale needs its factor (--factor F)"))
            })?),
            "log1p" => Transform::Log1p,
            "sqrt" => Transform::Sqrt,
            "clip" => {
                if min.is_none() && max.is_none() {
                    return Err(TransformError::Parameter(String::from(
                        "clip needs a bound (--min A, --max B, or both)",
                    )));
                }
                if min.is_some_and(f64::is_nan) || max.is_some_and(f64::is_nan) {
                    return Err(TransformError::Parameter(String::from(
                        "clip's bounds must be numbers, not NaN",
                    )));
                }
                Transform::Clip { min, max }
            }
            other => return Err(TransformError::Unknown(other.to_string())),
        };
        if factor.is_some() && !matches!(t, Transform::Scale(_)) {
            return Err(TransformError::Parameter(format!(
                "{name} takes no factor (--factor is for scale)"
            )));
        }
        if (min.is_some() || max.is_some()) && !matches!(t, Transform::Clip { .. }) {
            return Err(TransformError::Parameter(format!(
                "{name} takes no bounds (--min and --max are for clip)"
            )));
        }
        Ok(t)
    }

    /// The transform's name.
    pub fn name(&self) -> &'static str {
        match self {
            Transform::ZScore => "zscore",
            Transform::MinMax => "minmax",
            Transform::Center => "center",
            Transform::Scale(_) => "scale",
            Transform::Log1p => "log1p",
            Transform::Sqrt => "sqrt",
            Transform::Clip { .. } => "clip",
        }
    }

    /// The reductions over the whole dataset the map needs, in the order [`Stats`]
    /// takes them.
    pub fn needs(&self) -> &'static [Reduce] {
        match self {
            Transform::ZScore => &[Reduce::Mean, Reduce::Std(0)],
            Transform::MinMax => &[Reduce::Min, Reduce::Max],
            Transform::Center => &[Reduce::Mean],
            _ => &[],
        }
    }

    /// The output's element type for a dataset of `dtype`.
    pub fn out_dtype(&self, dtype: DType) -> DType {
        match (self, dtype) {
            (_, DType::F16 | DType::F32 | DType::F64) => dtype,
            (Transform::Clip { .. }, d) => d,
            _ => DType::F64,
        }
    }
}

/// The statistics of a dataset a transform needs, as the fold engine gives them.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Stats {
    /// The values of [`Transform::needs`], in its order.
    pub values: [Option<Value>; 2],
}

/// An integer or float [`Value`] as `f64` (integers rounded to the nearest).
fn value_f64(v: &Value) -> Option<f64> {
    match v {
        Value::F64(f) => Some(*f),
        Value::I64(i) => Some(crate::tet::meta::int_f64(i128::from(*i))),
        Value::U64(u) => Some(crate::tet::meta::int_f64(i128::from(*u))),
        Value::I128(i) => Some(crate::tet::meta::int_f64(*i)),
        _ => None,
    }
}

/// An integer [`Value`] exactly.
fn value_int(v: &Value) -> Option<i128> {
    match v {
        Value::I64(i) => Some(i128::from(*i)),
        Value::U64(u) => Some(i128::from(*u)),
        Value::I128(i) => Some(*i),
        _ => None,
    }
}

/// Runs the reductions `t` needs over `plan` on one thread.
pub fn stats<'f, B: FrameBackend>(
    file: &TetFile<'f>,
    plan: &ReadPlan<'f>,
    t: Transform,
    dec: &mut ChunkDecoder<B>,
) -> Result<Stats, QueryError> {
    let axes = Axes::new(plan.dataset.ndim(), None)?;
    let mut s = Stats::default();
    for (slot, r) in s.values.iter_mut().zip(t.needs()) {
        let out = execute(file, plan, Operation::Reduce(*r), &axes, dec)?;
        *slot = out.values.first().copied();
    }
    Ok(s)
}

/// The elementary functions `log1p` and `sqrt` take, from the caller: without `std` this
/// crate has no `log1p`, and `tet-host` passes the platform's (`f64::ln_1p`,
/// `f64::sqrt`: the C library's, which NumPy's `float64` loops call too). Firmware passes
/// its own (a `libm`).
#[derive(Clone, Copy, Debug)]
pub struct Funcs {
    /// `ln(1 + x)`.
    pub log1p: fn(f64) -> f64,
    /// The correctly rounded square root.
    pub sqrt: fn(f64) -> f64,
}

/// A transform made ready for one dataset: its constants fixed.
#[derive(Clone, Copy, Debug)]
pub struct Map {
    t: Transform,
    funcs: Funcs,
    from: DType,
    to: DType,
    /// zscore, center: the mean; minmax: the minimum (as `f64`).
    shift: f64,
    /// zscore: the standard deviation; minmax: `max - min`.
    div: f64,
    /// minmax over integers: the exact minimum.
    int_min: i128,
    /// clip over integers: the bounds, exactly (absent: the type's range).
    int_lo: i128,
    int_hi: i128,
}

/// A float's bound of `clip` over an integer dtype: an integral value, clamped to what
/// `i128` holds (every integer dtype's values are inside it).
fn int_bound(b: f64, name: &str) -> Result<i128, TransformError> {
    // Finite and below 2^127 in size, an integral value converts back to itself.
    let integral =
        !b.is_finite() || b.abs() >= 1.7e38 || crate::tet::meta::int_f64(saturate_i128(b)) == b;
    if !integral {
        return Err(TransformError::Parameter(format!(
            "clip's {name} {b} is not an integer, and the dataset's integers stay integers \
             (convert to float first, or give an integral bound)"
        )));
    }
    Ok(saturate_i128(b))
}

#[allow(
    clippy::as_conversions,
    reason = "f64 to i128 with `as` saturates (±inf to the ends), the clamp wanted"
)]
fn saturate_i128(b: f64) -> i128 {
    b as i128
}

impl Map {
    /// The map of `t` over a dataset of `dtype` whose statistics are `stats`.
    pub fn new(
        t: Transform,
        dtype: DType,
        stats: &Stats,
        funcs: Funcs,
    ) -> Result<Map, TransformError> {
        let get = |i: usize, what| {
            stats
                .values
                .get(i)
                .copied()
                .flatten()
                .ok_or(TransformError::Stats(what))
        };
        let mut m = Map {
            t,
            funcs,
            from: dtype,
            to: t.out_dtype(dtype),
            shift: 0.0,
            div: 1.0,
            int_min: 0,
            int_lo: i128::MIN,
            int_hi: i128::MAX,
        };
        match t {
            Transform::ZScore => {
                m.shift = value_f64(&get(0, "mean")?).ok_or(TransformError::Stats("mean"))?;
                m.div = value_f64(&get(1, "std")?).ok_or(TransformError::Stats("std"))?;
            }
            Transform::Center => {
                m.shift = value_f64(&get(0, "mean")?).ok_or(TransformError::Stats("mean"))?;
            }
            Transform::MinMax => {
                let lo = get(0, "min")?;
                let hi = get(1, "max")?;
                match (value_int(&lo), value_int(&hi)) {
                    // Integers: both differences exact, then divided in f64 (NumPy's
                    // `(a - a.min()) / (a.max() - a.min())` on int64, without its wrap).
                    (Some(l), Some(h)) => {
                        m.int_min = l;
                        m.div = crate::tet::meta::int_f64(h.saturating_sub(l));
                    }
                    _ => {
                        let l = value_f64(&lo).ok_or(TransformError::Stats("min"))?;
                        let h = value_f64(&hi).ok_or(TransformError::Stats("max"))?;
                        m.shift = l;
                        m.div = h - l;
                    }
                }
            }
            Transform::Clip { min, max } if !is_float(dtype) => {
                if let Some(b) = min {
                    m.int_lo = int_bound(b, "min")?;
                }
                if let Some(b) = max {
                    m.int_hi = int_bound(b, "max")?;
                }
            }
            _ => {}
        }
        Ok(m)
    }

    /// The transform.
    pub fn transform(&self) -> Transform {
        self.t
    }

    /// The output's element type.
    pub fn out_dtype(&self) -> DType {
        self.to
    }

    /// Bytes of output for `tile_len` bytes of input.
    pub fn out_len(&self, tile_len: usize) -> usize {
        let from = usize::try_from(self.from.size()).unwrap_or(1).max(1);
        let to = usize::try_from(self.to.size()).unwrap_or(1);
        tile_len.checked_div(from).unwrap_or(0).saturating_mul(to)
    }

    /// The statistics and parameters the map uses, as a history row's `params` (exact:
    /// Rust's shortest text that reads back as the same `f64`).
    pub fn params(&self) -> Vec<(String, String)> {
        let f = |v: f64| format!("{v:?}");
        let mut p = Vec::new();
        match self.t {
            Transform::ZScore => {
                p.push((String::from("mean"), f(self.shift)));
                p.push((String::from("std"), f(self.div)));
            }
            Transform::Center => p.push((String::from("mean"), f(self.shift))),
            Transform::MinMax if !is_float(self.from) => {
                p.push((String::from("min"), self.int_min.to_string()));
                p.push((String::from("range"), f(self.div)));
            }
            Transform::MinMax => {
                p.push((String::from("min"), f(self.shift)));
                p.push((String::from("range"), f(self.div)));
            }
            Transform::Scale(k) => p.push((String::from("factor"), f(k))),
            Transform::Clip { min, max } => {
                if let Some(v) = min {
                    p.push((String::from("min"), f(v)));
                }
                if let Some(v) = max {
                    p.push((String::from("max"), f(v)));
                }
            }
            Transform::Log1p | Transform::Sqrt => {}
        }
        p
    }

    /// One float element's image, in `f64`.
    fn float(&self, x: f64) -> f64 {
        match self.t {
            Transform::ZScore | Transform::MinMax => (x - self.shift) / self.div,
            Transform::Center => x - self.shift,
            Transform::Scale(k) => x * k,
            Transform::Log1p => (self.funcs.log1p)(x),
            Transform::Sqrt => (self.funcs.sqrt)(x),
            // NumPy's clip is `minimum(maximum(a, min), max)`: NaN stays NaN, and a
            // `min` above `max` gives `max` everywhere.
            Transform::Clip { min, max } => {
                if x.is_nan() {
                    return x;
                }
                let y = min.map_or(x, |lo| if x < lo { lo } else { x });
                max.map_or(y, |hi| if y > hi { hi } else { y })
            }
        }
    }

    /// One integer element's image: `f64` for every transform but clip.
    fn int(&self, x: i128) -> IntOut {
        match self.t {
            Transform::Clip { .. } => {
                let y = if x < self.int_lo { self.int_lo } else { x };
                IntOut::Int(if y > self.int_hi { self.int_hi } else { y })
            }
            Transform::MinMax => {
                IntOut::Float(crate::tet::meta::int_f64(x.saturating_sub(self.int_min)) / self.div)
            }
            _ => IntOut::Float(self.float(crate::tet::meta::int_f64(x))),
        }
    }

    /// Maps a decoded tile of the dataset (little-endian elements of its type) into
    /// `out` (cleared first), elements of the output type.
    pub fn apply(&self, tile: &[u8], out: &mut Vec<u8>) {
        out.clear();
        out.reserve(self.out_len(tile.len()));
        macro_rules! floats {
            ($t:ty, $n:literal, $wide:expr, $narrow:expr, $clip:expr) => {
                for e in tile.chunks_exact($n) {
                    let Ok(b) = <[u8; $n]>::try_from(e) else {
                        continue;
                    };
                    let x = <$t>::from_le_bytes(b);
                    let y: $t = match self.t {
                        // Clip compares in the element's own type, as NumPy casts the
                        // bounds to the array's dtype first.
                        Transform::Clip { min, max } => $clip(x, min, max),
                        _ => $narrow(self.float($wide(x))),
                    };
                    out.extend_from_slice(&y.to_le_bytes());
                }
            };
        }
        macro_rules! ints {
            ($t:ty, $n:literal) => {
                for e in tile.chunks_exact($n) {
                    let Ok(b) = <[u8; $n]>::try_from(e) else {
                        continue;
                    };
                    let x = i128::from(<$t>::from_le_bytes(b));
                    match self.int(x) {
                        IntOut::Int(v) => {
                            // Inside the type: clamped to bounds that are, or to x.
                            let v = <$t>::try_from(v).unwrap_or(if v < 0 {
                                <$t>::MIN
                            } else {
                                <$t>::MAX
                            });
                            out.extend_from_slice(&v.to_le_bytes());
                        }
                        IntOut::Float(f) => out.extend_from_slice(&f.to_le_bytes()),
                    }
                }
            };
        }
        match self.from {
            DType::F16 => floats!(
                half::f16,
                2,
                |v: half::f16| v.to_f64(),
                half::f16::from_f64,
                |x: half::f16, lo: Option<f64>, hi: Option<f64>| clip_in(
                    x,
                    lo.map(half::f16::from_f64),
                    hi.map(half::f16::from_f64),
                    x.is_nan()
                )
            ),
            DType::F32 => floats!(
                f32,
                4,
                f64::from,
                nearest_f32,
                |x: f32, lo: Option<f64>, hi: Option<f64>| clip_in(
                    x,
                    lo.map(nearest_f32),
                    hi.map(nearest_f32),
                    x.is_nan()
                )
            ),
            DType::F64 => floats!(
                f64,
                8,
                |v: f64| v,
                |v: f64| v,
                |x: f64, lo: Option<f64>, hi: Option<f64>| clip_in(x, lo, hi, x.is_nan())
            ),
            DType::U8 => ints!(u8, 1),
            DType::U16 => ints!(u16, 2),
            DType::U32 => ints!(u32, 4),
            DType::U64 => ints!(u64, 8),
            DType::I16 => ints!(i16, 2),
            DType::I32 => ints!(i32, 4),
            DType::I64 => ints!(i64, 8),
        }
    }
}

/// An integer element's image.
enum IntOut {
    Int(i128),
    Float(f64),
}

fn is_float(d: DType) -> bool {
    matches!(d, DType::F16 | DType::F32 | DType::F64)
}

/// `minimum(maximum(x, lo), hi)` in the element's type; NaN stays.
fn clip_in<T: PartialOrd + Copy>(x: T, lo: Option<T>, hi: Option<T>, nan: bool) -> T {
    if nan {
        return x;
    }
    let y = lo.map_or(x, |l| if x < l { l } else { x });
    hi.map_or(y, |h| if y > h { h } else { y })
}
