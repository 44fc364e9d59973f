//! Reductions over decoded tiles, without allocation: an [`Acc`] folds runs of elements
//! and merges with other accumulators, so a chunk, a group of chunks or a whole dataset
//! reduce the same way. Every operation except quantiles is here (quantiles need the
//! elements themselves; `tet-alloc` has them).
//!
//! Exactness: integer sums and products are exact in 128 bits (a result that does not fit
//! the output type is an error, never a wrap). Float sums add 8 lanes in `f64` per block of
//! 1024 elements and fold the block sums with Neumaier compensation; variance is two-pass
//! per run and merged with Chan's formula. Results depend only on the order of merges,
//! which callers fix (grid order), never on thread count.

use super::DType;

/// A reduction.
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Reduce {
    /// Sum (NaN propagates).
    Sum,
    /// Sum ignoring NaN.
    NanSum,
    /// Product.
    Prod,
    /// Arithmetic mean.
    Mean,
    /// Mean ignoring NaN.
    NanMean,
    /// Minimum (NaN propagates).
    Min,
    /// Maximum (NaN propagates).
    Max,
    /// Minimum ignoring NaN.
    NanMin,
    /// Maximum ignoring NaN.
    NanMax,
    /// Position of the first minimum (of the first NaN, if any).
    ArgMin,
    /// Position of the first maximum (of the first NaN, if any).
    ArgMax,
    /// Number of elements.
    Count,
    /// Number of NaN elements.
    NanCount,
    /// Number of ±infinite elements.
    InfCount,
    /// Whether every element is finite.
    AllFinite,
    /// Variance with `ddof` delta degrees of freedom.
    Var(u32),
    /// Standard deviation with `ddof`.
    Std(u32),
    /// Variance ignoring NaN.
    NanVar(u32),
    /// Standard deviation ignoring NaN.
    NanStd(u32),
    /// Sum of absolute values, as `f64` (`numpy.linalg.norm(a.ravel(), 1)`).
    NormL1,
    /// Square root of the sum of squares, as `f64` (`numpy.linalg.norm(a.ravel())`).
    NormL2,
    /// Whether any element is NaN (`numpy.isnan(a).any()`).
    AnyNan,
    /// Whether any element is ±infinite (`numpy.isinf(a).any()`).
    AnyInf,
}

impl Reduce {
    /// Whether NaN elements are skipped.
    pub fn skips_nan(self) -> bool {
        matches!(
            self,
            Reduce::NanSum
                | Reduce::NanMean
                | Reduce::NanMin
                | Reduce::NanMax
                | Reduce::NanVar(_)
                | Reduce::NanStd(_)
        )
    }

    fn class(self) -> Class {
        match self {
            Reduce::Sum | Reduce::NanSum | Reduce::Mean | Reduce::NanMean => Class::Sum,
            Reduce::Prod => Class::Prod,
            Reduce::Min | Reduce::NanMin | Reduce::ArgMin => Class::Min,
            Reduce::Max | Reduce::NanMax | Reduce::ArgMax => Class::Max,
            Reduce::Count
            | Reduce::NanCount
            | Reduce::InfCount
            | Reduce::AllFinite
            | Reduce::AnyNan
            | Reduce::AnyInf => Class::Count,
            Reduce::NormL1 | Reduce::NormL2 => Class::Norm,
            Reduce::Var(_) | Reduce::Std(_) | Reduce::NanVar(_) | Reduce::NanStd(_) => {
                Class::Moments
            }
        }
    }

    /// The name used in queries and output (`sum`, `nan_mean`, `var`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Reduce::Sum => "sum",
            Reduce::NanSum => "nan_sum",
            Reduce::Prod => "prod",
            Reduce::Mean => "mean",
            Reduce::NanMean => "nan_mean",
            Reduce::Min => "min",
            Reduce::Max => "max",
            Reduce::NanMin => "nan_min",
            Reduce::NanMax => "nan_max",
            Reduce::ArgMin => "argmin",
            Reduce::ArgMax => "argmax",
            Reduce::Count => "count",
            Reduce::NanCount => "nan_count",
            Reduce::InfCount => "inf_count",
            Reduce::AllFinite => "all_finite",
            Reduce::Var(_) => "var",
            Reduce::Std(_) => "std",
            Reduce::NanVar(_) => "nan_var",
            Reduce::NanStd(_) => "nan_std",
            Reduce::NormL1 => "norm_l1",
            Reduce::NormL2 => "norm_l2",
            Reduce::AnyNan => "any_nan",
            Reduce::AnyInf => "any_inf",
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Class {
    Sum,
    Prod,
    Min,
    Max,
    Count,
    Moments,
    /// A compensated sum of `|x|` or `x²` (in `fsum`).
    Norm,
}

/// A Neumaier-compensated `f64` sum.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct FSum {
    sum: f64,
    comp: f64,
}

impl FSum {
    /// Adds `x`.
    #[inline]
    pub fn add(&mut self, x: f64) {
        let t = self.sum + x;
        if !t.is_finite() {
            // Once the sum is infinite or NaN the compensation means nothing (and would
            // turn ±inf into NaN through inf - inf).
            self.sum = t;
            return;
        }
        if self.sum.abs() >= x.abs() {
            self.comp += (self.sum - t) + x;
        } else {
            self.comp += (x - t) + self.sum;
        }
        self.sum = t;
    }

    /// The sum.
    pub fn value(&self) -> f64 {
        if self.sum.is_finite() {
            self.sum + self.comp
        } else {
            self.sum
        }
    }

    fn merge(&mut self, o: &FSum) {
        self.add(o.sum);
        self.add(o.comp);
    }
}

/// An extreme value and where it was.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Extreme {
    /// Integers exactly, floats as `f64`.
    int: i128,
    float: f64,
    pos: u64,
}

/// The state of a reduction over some elements; merge accumulators in a fixed order to
/// get reproducible floats.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Acc {
    /// Elements folded.
    pub n: u64,
    /// NaN elements folded (for a `sum` or `mean` that keeps NaN, the partial-axis float
    /// sum kernel leaves them uncounted: [`Acc::result`] reads the count only for the
    /// operations that skip or count NaN).
    pub nan: u64,
    /// ±infinite elements folded.
    pub inf: u64,
    /// An integer sum; for a product, minus the product's magnitude (so that 2^127
    /// fits: a product of exactly -2^127 reaches +2^127 first in some orders), its sign
    /// in `int_neg`. The magnitude only grows (no factor is 0 here), so it overflows in
    /// one order exactly when it does in every other.
    int_sum: i128,
    int_overflow: bool,
    /// An integer factor of a product was 0: the exact product is 0 whatever the rest
    /// would have overflowed to, in any order of the elements.
    int_zero: bool,
    /// An integer product's sign: an odd number of negative factors.
    int_neg: bool,
    fsum: FSum,
    fprod: f64,
    ext: Option<Extreme>,
    /// Moments of the elements counted (non-NaN ones when NaN is skipped).
    mn: u64,
    mean: f64,
    m2: f64,
}

impl Default for Acc {
    fn default() -> Self {
        Acc::new()
    }
}

/// Why a result cannot be given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum FoldError {
    /// The operation needs at least one element (min, max, argmin, mean of nothing).
    Empty,
    /// The exact result does not fit the output type.
    Overflow,
    /// Variance with `ddof` at least the element count.
    Ddof,
}

/// A result.
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Value {
    /// Unsigned integer (counts, sums of unsigned types, min/max of unsigned types).
    U64(u64),
    /// Signed integer.
    I64(i64),
    /// An exact integer sum or product outside its 64-bit output type (every sum or
    /// product that fits 128 bits is returned exactly).
    I128(i128),
    /// Floating point.
    F64(f64),
    /// Boolean.
    Bool(bool),
    /// A row-major position in the dataset (argmin/argmax).
    Position(u64),
}

fn is_float(d: DType) -> bool {
    matches!(d, DType::F16 | DType::F32 | DType::F64)
}

fn is_signed(d: DType) -> bool {
    matches!(d, DType::I16 | DType::I32 | DType::I64)
}

/// Elements summed per block before the block sum joins the compensated total.
const BLOCK: usize = 1024;

impl Acc {
    /// An empty accumulator.
    pub const fn new() -> Acc {
        Acc {
            n: 0,
            nan: 0,
            inf: 0,
            int_sum: 0,
            int_overflow: false,
            int_neg: false,
            int_zero: false,
            fsum: FSum {
                sum: 0.0,
                comp: 0.0,
            },
            fprod: 1.0,
            ext: None,
            mn: 0,
            mean: 0.0,
            m2: 0.0,
        }
    }

    /// Folds `count` elements of `dtype` starting at element `index` of `tile` (little-
    /// endian bytes), `stride` elements apart; the first is at dataset position
    /// `position`, the others `position_stride` apart. Elements outside `tile` are
    /// ignored (the caller checked the tile size).
    #[allow(clippy::too_many_arguments)]
    pub fn fold(
        &mut self,
        op: Reduce,
        dtype: DType,
        tile: &[u8],
        index: u64,
        count: u64,
        stride: u64,
        position: u64,
        position_stride: u64,
    ) {
        let Some(r) = Run::new(dtype, tile, index, count, stride, position, position_stride) else {
            return;
        };
        with_elem!(dtype, T => self.fold_typed::<T>(op, &r));
    }

    /// Folds a run a selection produced ([`super::select::for_each_run`]).
    pub fn fold_run(&mut self, op: Reduce, dtype: DType, tile: &[u8], r: &super::select::Run) {
        self.fold(
            op,
            dtype,
            tile,
            r.tile_index,
            r.count,
            r.tile_stride,
            r.position,
            r.position_stride,
        );
    }

    /// Folds element `k` of a selection run into `outs[k]`: the kernel of a reduction
    /// that keeps the run's axis. Stops at the shorter of the run and `outs`.
    pub fn fold_spread(
        outs: &mut [Acc],
        op: Reduce,
        dtype: DType,
        tile: &[u8],
        run: &super::select::Run,
    ) {
        let count = u64::try_from(outs.len()).unwrap_or(u64::MAX).min(run.count);
        let Some(r) = Run::new(
            dtype,
            tile,
            run.tile_index,
            count,
            run.tile_stride,
            run.position,
            run.position_stride,
        ) else {
            return;
        };
        with_elem!(dtype, T => spread_typed::<T>(outs, op, &r));
    }

    /// Adds a block of `counted` float elements (of which `nan` are NaN) whose plain
    /// `f64` sum (NaN elements left out when `op` skips them) is `sum`: the partial-axis
    /// sum kernel sums a chunk's column in plain `f64`, then joins the compensated total.
    pub fn add_sum_block(&mut self, op: Reduce, sum: f64, counted: u64, nan: u64) {
        self.n = self.n.saturating_add(counted);
        self.nan = self.nan.saturating_add(nan);
        let kept = if op.skips_nan() {
            counted.saturating_sub(nan)
        } else {
            counted
        };
        self.mn = self.mn.saturating_add(kept);
        self.fsum.add(sum);
    }

    /// The accumulator [`Acc::add_sum_block`] builds from blocks whose sums were added to
    /// `fsum` in order: `counted` elements in all, `nan` of them NaN. The same bits as
    /// the blocks added one by one, from 32 bytes a cell kept instead of an `Acc`.
    pub fn of_sum_blocks(op: Reduce, fsum: FSum, counted: u64, nan: u64) -> Acc {
        let mut a = Acc::new();
        a.add_sum_block(op, 0.0, counted, nan);
        a.fsum = fsum;
        a
    }

    /// Adds element `k` of a run of float elements to `sums[k]` (counting NaN in
    /// `nans[k]`, and leaving it out of the sum when `skip`): the inner loop of a
    /// partial-axis float sum. Returns `false` (doing nothing) for integer dtypes.
    /// Without `skip`, a contiguous run's NaNs may go uncounted: a `sum` or `mean` that
    /// keeps NaN reads no NaN count ([`Acc::result`]), its sum being NaN already.
    pub fn spread_sum(
        sums: &mut [f64],
        nans: &mut [u64],
        dtype: DType,
        tile: &[u8],
        index: u64,
        stride: u64,
        skip: bool,
    ) -> bool {
        let count = u64::try_from(sums.len()).unwrap_or(u64::MAX);
        let Some(r) = Run::new(dtype, tile, index, count, stride, 0, 0) else {
            return true;
        };
        match dtype {
            DType::F16 => spread_sum_typed::<half::f16>(sums, nans, &r, skip),
            DType::F32 => spread_sum_typed::<f32>(sums, nans, &r, skip),
            DType::F64 => spread_sum_typed::<f64>(sums, nans, &r, skip),
            _ => return false,
        }
        true
    }

    /// Adds one element (the spread kernel's step).
    #[inline]
    fn push<T: Elem>(&mut self, op: Reduce, x: T, pos: u64) {
        let v = x.f64();
        let is_nan = T::FLOAT && v.is_nan();
        self.n = self.n.saturating_add(1);
        self.nan = self.nan.saturating_add(u64::from(is_nan));
        let skip = op.skips_nan() && is_nan;
        match op.class() {
            Class::Count => {
                self.inf = self
                    .inf
                    .saturating_add(u64::from(T::FLOAT && v.is_infinite()));
            }
            Class::Sum => {
                if T::FLOAT {
                    if !skip {
                        self.fsum.add(v);
                        self.mn = self.mn.saturating_add(1);
                    }
                } else {
                    match self.int_sum.checked_add(x.int()) {
                        Some(s) => self.int_sum = s,
                        None => self.int_overflow = true,
                    }
                    self.mn = self.mn.saturating_add(1);
                }
            }
            Class::Prod => {
                if T::FLOAT {
                    self.fprod *= v;
                } else {
                    self.int_factor(x.int());
                }
            }
            Class::Min | Class::Max => {
                if skip {
                    return;
                }
                let cand = Extreme {
                    int: if T::FLOAT { 0 } else { x.int() },
                    float: v,
                    pos,
                };
                self.ext = Some(match self.ext {
                    None => cand,
                    Some(cur) => pick(cur, cand, op.class() == Class::Min),
                });
            }
            Class::Norm => self.fsum.add(norm_term(op, v)),
            Class::Moments => {
                if skip {
                    return;
                }
                // Welford's update.
                self.mn = self.mn.saturating_add(1);
                let delta = v - self.mean;
                self.mean += delta / to_f64(self.mn);
                self.m2 += delta * (v - self.mean);
            }
        }
    }

    fn fold_typed<T: Elem>(&mut self, op: Reduce, r: &Run<'_>) {
        let elems = r.elements::<T>();
        let skip = op.skips_nan();
        match op.class() {
            Class::Count => {
                let mut n = 0u64;
                let mut nan = 0u64;
                let mut inf = 0u64;
                if T::FLOAT && r.stride == 1 {
                    // Contiguous run: a plain pass over whole elements.
                    let len = r.count.min(r.bytes.len().checked_div(T::SIZE).unwrap_or(0));
                    let data = r.bytes.get(..len.saturating_mul(T::SIZE)).unwrap_or(&[]);
                    match non_finite_bits(data, T::SIZE) {
                        Some((a, b)) => (nan, inf) = (a, b),
                        None => {
                            for e in data.chunks_exact(T::SIZE) {
                                let v = T::read(e).map_or(0.0, T::f64);
                                nan = nan.wrapping_add(u64::from(v.is_nan()));
                                inf = inf.wrapping_add(u64::from(v.is_infinite()));
                            }
                        }
                    }
                    n = u64::try_from(len).unwrap_or(u64::MAX);
                } else if T::FLOAT {
                    for x in elems {
                        let v = x.f64();
                        n = n.wrapping_add(1);
                        nan = nan.wrapping_add(u64::from(v.is_nan()));
                        inf = inf.wrapping_add(u64::from(v.is_infinite()));
                    }
                } else {
                    n = u64::try_from(elems.count()).unwrap_or(u64::MAX);
                }
                self.n = self.n.saturating_add(n);
                self.nan = self.nan.saturating_add(nan);
                self.inf = self.inf.saturating_add(inf);
            }
            Class::Sum => {
                if T::FLOAT && r.stride == 1 {
                    // Contiguous run: the same blocks and lanes as below (element i of a
                    // block goes to lane i % 8), in a shape the compiler vectorises.
                    let len = r.count.min(r.bytes.len().checked_div(T::SIZE).unwrap_or(0));
                    let data = r.bytes.get(..len.saturating_mul(T::SIZE)).unwrap_or(&[]);
                    let mut nan = 0u64;
                    for block in data.chunks(BLOCK.saturating_mul(T::SIZE)) {
                        let mut lanes = [0f64; 8];
                        nan = nan.wrapping_add(sum_block::<T>(block, skip, &mut lanes));
                        let b = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3]))
                            + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
                        self.fsum.add(b);
                    }
                    let counted = u64::try_from(len).unwrap_or(u64::MAX);
                    self.n = self.n.saturating_add(counted);
                    self.nan = self.nan.saturating_add(nan);
                    self.mn = self.mn.saturating_add(if skip {
                        counted.saturating_sub(nan)
                    } else {
                        counted
                    });
                } else if T::FLOAT {
                    let mut lanes = [0f64; 8];
                    let mut counted = 0u64;
                    let mut nan = 0u64;
                    let mut it = elems;
                    loop {
                        let mut taken = 0usize;
                        for (i, x) in it.by_ref().take(BLOCK).enumerate() {
                            let v = x.f64();
                            let is_nan = v.is_nan();
                            nan = nan.wrapping_add(u64::from(is_nan));
                            let v = if skip && is_nan { 0.0 } else { v };
                            if let Some(l) = lanes.get_mut(i % 8) {
                                *l += v;
                            }
                            taken = taken.wrapping_add(1);
                        }
                        if taken == 0 {
                            break;
                        }
                        counted = counted.saturating_add(u64::try_from(taken).unwrap_or(0));
                        let block = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3]))
                            + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
                        self.fsum.add(block);
                        lanes = [0.0; 8];
                    }
                    self.n = self.n.saturating_add(counted);
                    self.nan = self.nan.saturating_add(nan);
                    self.mn = self.mn.saturating_add(if skip {
                        counted.saturating_sub(nan)
                    } else {
                        counted
                    });
                } else {
                    let mut total: i128 = 0;
                    let mut counted = 0u64;
                    for x in elems {
                        total = total.wrapping_add(x.int());
                        counted = counted.wrapping_add(1);
                    }
                    // Each element is below 2^64 in magnitude and a run below 2^63 elements,
                    // so the run total fits; only the running total can overflow.
                    match self.int_sum.checked_add(total) {
                        Some(s) => self.int_sum = s,
                        None => self.int_overflow = true,
                    }
                    self.n = self.n.saturating_add(counted);
                    self.mn = self.mn.saturating_add(counted);
                }
            }
            Class::Prod => {
                for x in elems {
                    self.n = self.n.saturating_add(1);
                    if T::FLOAT {
                        self.fprod *= x.f64();
                    } else {
                        self.int_factor(x.int());
                    }
                }
            }
            Class::Min | Class::Max => {
                let want_min = op.class() == Class::Min;
                let mut pos = r.position;
                for x in elems {
                    let here = pos;
                    pos = pos.wrapping_add(r.position_stride);
                    self.n = self.n.saturating_add(1);
                    let cand = Extreme {
                        int: if T::FLOAT { 0 } else { x.int() },
                        float: x.f64(),
                        pos: here,
                    };
                    if T::FLOAT && cand.float.is_nan() {
                        self.nan = self.nan.saturating_add(1);
                        if skip {
                            continue;
                        }
                    }
                    self.ext = Some(match self.ext {
                        None => cand,
                        Some(cur) => pick(cur, cand, want_min),
                    });
                }
            }
            Class::Norm => {
                let l2 = op == Reduce::NormL2;
                let mut counted = 0u64;
                let mut nan = 0u64;
                if r.stride == 1 {
                    // Contiguous run: blocks and lanes as the float sum's.
                    let len = r.count.min(r.bytes.len().checked_div(T::SIZE).unwrap_or(0));
                    let data = r.bytes.get(..len.saturating_mul(T::SIZE)).unwrap_or(&[]);
                    for block in data.chunks(BLOCK.saturating_mul(T::SIZE)) {
                        let mut lanes = [0f64; 8];
                        nan = nan.wrapping_add(if l2 {
                            norm_block::<T, true>(block, &mut lanes)
                        } else {
                            norm_block::<T, false>(block, &mut lanes)
                        });
                        let b = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3]))
                            + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
                        self.fsum.add(b);
                    }
                    counted = u64::try_from(len).unwrap_or(u64::MAX);
                } else {
                    let mut it = elems;
                    loop {
                        let mut lanes = [0f64; 8];
                        let mut taken = 0usize;
                        for (i, x) in it.by_ref().take(BLOCK).enumerate() {
                            let v = x.f64();
                            nan = nan.wrapping_add(u64::from(v.is_nan()));
                            if let Some(l) = lanes.get_mut(i % 8) {
                                *l += norm_term(op, v);
                            }
                            taken = taken.wrapping_add(1);
                        }
                        if taken == 0 {
                            break;
                        }
                        counted = counted.saturating_add(u64::try_from(taken).unwrap_or(0));
                        let b = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3]))
                            + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
                        self.fsum.add(b);
                    }
                }
                self.n = self.n.saturating_add(counted);
                self.nan = self.nan.saturating_add(nan);
            }
            Class::Moments => {
                // Two passes over the run: its mean, then the squared deviations.
                let mut s = FSum::default();
                let mut k = 0u64;
                let mut nan = 0u64;
                for x in elems {
                    let v = x.f64();
                    if v.is_nan() {
                        nan = nan.wrapping_add(1);
                        if skip {
                            continue;
                        }
                    }
                    s.add(v);
                    k = k.wrapping_add(1);
                }
                self.n = self
                    .n
                    .saturating_add(k.saturating_add(if skip { nan } else { 0 }));
                self.nan = self.nan.saturating_add(nan);
                if k == 0 {
                    return;
                }
                let kf = to_f64(k);
                let mean = s.value() / kf;
                let mut m2 = FSum::default();
                for x in r.elements::<T>() {
                    let v = x.f64();
                    if skip && v.is_nan() {
                        continue;
                    }
                    let d = v - mean;
                    m2.add(d * d);
                }
                self.merge_moments(k, mean, m2.value());
            }
        }
    }

    fn merge_moments(&mut self, k: u64, mean: f64, m2: f64) {
        if k == 0 {
            return;
        }
        if self.mn == 0 {
            self.mn = k;
            self.mean = mean;
            self.m2 = m2;
            return;
        }
        let na = to_f64(self.mn);
        let nb = to_f64(k);
        let n = na + nb;
        let delta = mean - self.mean;
        self.mean += delta * nb / n;
        self.m2 += m2 + delta * delta * na * nb / n;
        self.mn = self.mn.saturating_add(k);
    }

    /// Merges `other` (which covers elements after this one's, in the caller's fixed
    /// order) into this accumulator.
    pub fn merge(&mut self, op: Reduce, other: &Acc) {
        let before = self.n;
        self.n = self.n.saturating_add(other.n);
        self.nan = self.nan.saturating_add(other.nan);
        self.inf = self.inf.saturating_add(other.inf);
        match op.class() {
            Class::Count => {}
            Class::Sum => {
                self.fsum.merge(&other.fsum);
                match self.int_sum.checked_add(other.int_sum) {
                    Some(s) => self.int_sum = s,
                    None => self.int_overflow = true,
                }
                self.int_overflow |= other.int_overflow;
                self.mn = self.mn.saturating_add(other.mn);
            }
            Class::Prod => {
                self.fprod *= other.fprod;
                if other.n > 0 {
                    if before == 0 {
                        self.int_sum = other.int_sum;
                    } else {
                        match magnitudes_times(self.int_sum, other.int_sum) {
                            Some(p) => self.int_sum = p,
                            None => self.int_overflow = true,
                        }
                    }
                    self.int_neg ^= other.int_neg;
                }
                self.int_overflow |= other.int_overflow;
                self.int_zero |= other.int_zero;
            }
            Class::Min | Class::Max => {
                let want_min = op.class() == Class::Min;
                if let Some(o) = other.ext {
                    self.ext = Some(match self.ext {
                        None => o,
                        Some(cur) => pick(cur, o, want_min),
                    });
                }
            }
            Class::Norm => self.fsum.merge(&other.fsum),
            Class::Moments => self.merge_moments(other.mn, other.mean, other.m2),
        }
    }

    /// Folds integer factor `x` (the element just counted in `n`) into a product.
    fn int_factor(&mut self, x: i128) {
        if x == 0 {
            self.int_zero = true;
            return;
        }
        self.int_neg ^= x < 0;
        let m = minus_magnitude(x);
        if self.n == 1 {
            self.int_sum = m;
        } else {
            match magnitudes_times(self.int_sum, m) {
                Some(p) => self.int_sum = p,
                None => self.int_overflow = true,
            }
        }
    }

    /// Whether `op` skips NaN, needs an element, and every element folded was NaN
    /// (NumPy's "all-NaN slice"): its result is then NaN rather than an error.
    pub fn nothing_left(&self, op: Reduce) -> bool {
        op.skips_nan() && op != Reduce::NanSum && self.n > 0 && self.nan == self.n
    }

    /// The result of `op` for elements of `dtype`.
    pub fn result(&self, op: Reduce, dtype: DType) -> Result<Value, FoldError> {
        let float = is_float(dtype);
        let signed = is_signed(dtype);
        let int_out = |v: i128| -> Result<Value, FoldError> {
            Ok(if signed {
                i64::try_from(v).map_or(Value::I128(v), Value::I64)
            } else {
                u64::try_from(v).map_or(Value::I128(v), Value::U64)
            })
        };
        // NumPy's all-NaN slice: NaN, not an error (the caller warns).
        let nothing_left = |e: FoldError| {
            if self.nothing_left(op) {
                Ok(Value::F64(f64::NAN))
            } else {
                Err(e)
            }
        };
        match op {
            Reduce::Count => Ok(Value::U64(self.n)),
            Reduce::NanCount => Ok(Value::U64(self.nan)),
            Reduce::InfCount => Ok(Value::U64(self.inf)),
            Reduce::AllFinite => Ok(Value::Bool(self.nan == 0 && self.inf == 0)),
            Reduce::AnyNan => Ok(Value::Bool(self.nan > 0)),
            Reduce::AnyInf => Ok(Value::Bool(self.inf > 0)),
            // NumPy's norm of nothing is 0.
            Reduce::NormL1 => Ok(Value::F64(self.fsum.value())),
            Reduce::NormL2 => Ok(Value::F64(sqrt(self.fsum.value()))),
            Reduce::Sum | Reduce::NanSum => {
                if float {
                    Ok(Value::F64(self.fsum.value()))
                } else if self.int_overflow {
                    Err(FoldError::Overflow)
                } else {
                    int_out(self.int_sum)
                }
            }
            Reduce::Prod => {
                if float {
                    Ok(Value::F64(self.fprod))
                } else if self.n == 0 {
                    int_out(1)
                } else if self.int_zero {
                    int_out(0)
                } else if self.int_overflow {
                    Err(FoldError::Overflow)
                } else if self.int_neg {
                    int_out(self.int_sum)
                } else {
                    // +2^127 does not fit.
                    self.int_sum
                        .checked_neg()
                        .map_or(Err(FoldError::Overflow), int_out)
                }
            }
            Reduce::Mean | Reduce::NanMean => {
                if self.mn == 0 {
                    return nothing_left(FoldError::Empty);
                }
                let total = if float {
                    self.fsum.value()
                } else {
                    if self.int_overflow {
                        return Err(FoldError::Overflow);
                    }
                    i128_to_f64(self.int_sum)
                };
                Ok(Value::F64(total / to_f64(self.mn)))
            }
            Reduce::Min | Reduce::Max | Reduce::NanMin | Reduce::NanMax => {
                let Some(e) = self.ext else {
                    return nothing_left(FoldError::Empty);
                };
                if float {
                    Ok(Value::F64(e.float))
                } else {
                    int_out(e.int)
                }
            }
            Reduce::ArgMin | Reduce::ArgMax => {
                let e = self.ext.ok_or(FoldError::Empty)?;
                Ok(Value::Position(e.pos))
            }
            Reduce::Var(ddof) | Reduce::Std(ddof) | Reduce::NanVar(ddof) | Reduce::NanStd(ddof) => {
                if self.mn == 0 {
                    return nothing_left(FoldError::Empty);
                }
                // Too few elements for `ddof` is refused whatever they hold (a NaN among
                // them included), as the reference and the CLI's table have it.
                let denom = self.mn.checked_sub(u64::from(ddof)).filter(|d| *d > 0);
                let Some(denom) = denom else {
                    return Err(FoldError::Ddof);
                };
                if !op.skips_nan() && self.nan > 0 {
                    return Ok(Value::F64(f64::NAN));
                }
                let var = self.m2 / to_f64(denom);
                let v = if matches!(op, Reduce::Std(_) | Reduce::NanStd(_)) {
                    sqrt(var)
                } else {
                    var
                };
                Ok(Value::F64(v))
            }
        }
    }
}

/// Sums one block of whole elements into eight lanes; returns the NaN count.
#[inline]
fn sum_block<T: Elem>(block: &[u8], skip: bool, lanes: &mut [f64; 8]) -> u64 {
    let mut nan = 0u64;
    let mut groups = block.chunks_exact(T::SIZE.saturating_mul(8));
    for g in &mut groups {
        for (l, e) in lanes.iter_mut().zip(g.chunks_exact(T::SIZE)) {
            let v = T::read(e).map_or(0.0, T::f64);
            let is_nan = v.is_nan();
            nan = nan.wrapping_add(u64::from(is_nan));
            *l += if skip && is_nan { 0.0 } else { v };
        }
    }
    for (l, e) in lanes
        .iter_mut()
        .zip(groups.remainder().chunks_exact(T::SIZE))
    {
        let v = T::read(e).map_or(0.0, T::f64);
        let is_nan = v.is_nan();
        nan = nan.wrapping_add(u64::from(is_nan));
        *l += if skip && is_nan { 0.0 } else { v };
    }
    nan
}

/// What an element adds to a norm: `|v|` (L1) or `v²` (L2); NaN stays NaN.
#[inline]
fn norm_term(op: Reduce, v: f64) -> f64 {
    if op == Reduce::NormL2 {
        v * v
    } else {
        v.abs()
    }
}

/// Adds `|x|` (or `x²` when `L2`) of one block of whole elements into eight lanes, element
/// `i` to lane `i % 8` as [`sum_block`] does; returns the NaN count.
#[inline]
fn norm_block<T: Elem, const L2: bool>(block: &[u8], lanes: &mut [f64; 8]) -> u64 {
    let mut nan = 0u64;
    let term = |v: f64| if L2 { v * v } else { v.abs() };
    let mut groups = block.chunks_exact(T::SIZE.saturating_mul(8));
    for g in &mut groups {
        for (l, e) in lanes.iter_mut().zip(g.chunks_exact(T::SIZE)) {
            let v = T::read(e).map_or(0.0, T::f64);
            nan = nan.wrapping_add(u64::from(v.is_nan()));
            *l += term(v);
        }
    }
    for (l, e) in lanes
        .iter_mut()
        .zip(groups.remainder().chunks_exact(T::SIZE))
    {
        let v = T::read(e).map_or(0.0, T::f64);
        nan = nan.wrapping_add(u64::from(v.is_nan()));
        *l += term(v);
    }
    nan
}

fn spread_sum_typed<T: Elem>(sums: &mut [f64], nans: &mut [u64], r: &Run<'_>, skip: bool) {
    // A sum or mean that keeps NaN never reads the NaN count (the sum is NaN): one stream
    // of adds, which the compiler vectorises.
    if !skip && r.stride == 1 {
        for (s, e) in sums.iter_mut().zip(r.bytes.chunks_exact(T::SIZE)) {
            *s += T::read(e).map_or(0.0, T::f64);
        }
        return;
    }
    let add = |s: &mut f64, n: &mut u64, v: f64| {
        let is_nan = v.is_nan();
        *n = n.wrapping_add(u64::from(is_nan));
        *s += if skip && is_nan { 0.0 } else { v };
    };
    if r.stride == 1 {
        for ((s, n), e) in sums
            .iter_mut()
            .zip(nans.iter_mut())
            .zip(r.bytes.chunks_exact(T::SIZE))
        {
            add(s, n, T::read(e).map_or(0.0, T::f64));
        }
    } else {
        for ((s, n), x) in sums.iter_mut().zip(nans.iter_mut()).zip(r.elements::<T>()) {
            add(s, n, x.f64());
        }
    }
}

fn spread_typed<T: Elem>(outs: &mut [Acc], op: Reduce, r: &Run<'_>) {
    let mut pos = r.position;
    for (acc, x) in outs.iter_mut().zip(r.elements::<T>()) {
        acc.push(op, x, pos);
        pos = pos.wrapping_add(r.position_stride);
    }
}

/// Calls `f` with each of `count` elements of `dtype` (as `f64`) starting at element
/// `index` of `tile`, `stride` elements apart, in order; elements outside `tile` are
/// skipped. A kernel for operations that are not an [`Acc`] (histograms).
pub fn for_each_f64(
    dtype: DType,
    tile: &[u8],
    index: u64,
    count: u64,
    stride: u64,
    mut f: impl FnMut(f64),
) {
    let Some(r) = Run::new(dtype, tile, index, count, stride, 0, 0) else {
        return;
    };
    with_elem!(dtype, T => {
        if r.stride == 1 {
            let len = r.count.min(r.bytes.len().checked_div(T::SIZE).unwrap_or(0));
            let data = r.bytes.get(..len.saturating_mul(T::SIZE)).unwrap_or(&[]);
            for e in data.chunks_exact(T::SIZE) {
                f(T::read(e).map_or(0.0, T::f64));
            }
        } else {
            for x in r.elements::<T>() {
                f(x.f64());
            }
        }
    });
}

/// Folds each of `count` elements of `dtype` (as `f64`) starting at element `index` of
/// `tile`, `stride` elements apart, in order, into `acc`: [`for_each_f64`] with the state
/// passed by value, so a kernel's counters stay in registers.
#[inline]
pub fn fold_f64<A>(
    dtype: DType,
    tile: &[u8],
    index: u64,
    count: u64,
    stride: u64,
    mut acc: A,
    mut f: impl FnMut(A, f64) -> A,
) -> A {
    let Some(r) = Run::new(dtype, tile, index, count, stride, 0, 0) else {
        return acc;
    };
    with_elem!(dtype, T => {
        if r.stride == 1 {
            let len = r.count.min(r.bytes.len().checked_div(T::SIZE).unwrap_or(0));
            let data = r.bytes.get(..len.saturating_mul(T::SIZE)).unwrap_or(&[]);
            for e in data.chunks_exact(T::SIZE) {
                acc = f(acc, T::read(e).map_or(0.0, T::f64));
            }
        } else {
            for x in r.elements::<T>() {
                acc = f(acc, x.f64());
            }
        }
    });
    acc
}

/// NaN and infinity counts of contiguous little-endian `f32` (`size` 4) or `f64` (`size`
/// 8) elements, from their bits: an element is not finite when its exponent bits are all
/// ones, NaN when its fraction is nonzero too. Counted in `u32` lanes over blocks the
/// compiler vectorises (a plain pass at memory speed). `None` for other sizes.
fn non_finite_bits(data: &[u8], size: usize) -> Option<(u64, u64)> {
    /// Elements per block: the `u32` counts cannot overflow.
    const BLOCK_ELEMS: usize = 1 << 16;
    let (mut nan, mut inf) = (0u64, 0u64);
    match size {
        4 => {
            const ABS: u32 = 0x7fff_ffff;
            const EXP: u32 = 0x7f80_0000;
            for block in data.chunks(BLOCK_ELEMS.saturating_mul(4)) {
                let (mut a, mut b) = (0u32, 0u32);
                for e in block.chunks_exact(4) {
                    let bits = e.try_into().map_or(0, u32::from_le_bytes) & ABS;
                    a = a.wrapping_add(u32::from(bits > EXP));
                    b = b.wrapping_add(u32::from(bits == EXP));
                }
                nan = nan.wrapping_add(u64::from(a));
                inf = inf.wrapping_add(u64::from(b));
            }
        }
        8 => {
            const ABS: u64 = 0x7fff_ffff_ffff_ffff;
            const EXP: u64 = 0x7ff0_0000_0000_0000;
            for block in data.chunks(BLOCK_ELEMS.saturating_mul(8)) {
                let (mut a, mut b) = (0u64, 0u64);
                for e in block.chunks_exact(8) {
                    let bits = e.try_into().map_or(0, u64::from_le_bytes) & ABS;
                    a = a.wrapping_add(u64::from(bits > EXP));
                    b = b.wrapping_add(u64::from(bits == EXP));
                }
                nan = nan.wrapping_add(a);
                inf = inf.wrapping_add(b);
            }
        }
        _ => return None,
    }
    Some((nan, inf))
}

/// One little-endian element of `dtype` as `f64` (integers above 2^53 round), or `None`
/// when `bytes` is not exactly one element.
pub fn element_f64(dtype: DType, bytes: &[u8]) -> Option<f64> {
    with_elem!(dtype, T => T::read(bytes).map(T::f64))
}

/// `u64` to `f64`, rounding to nearest (counts are exact below 2^53).
fn to_f64(v: u64) -> f64 {
    #[allow(clippy::as_conversions)]
    let f = v as f64;
    f
}

/// `-|x|`, which is defined for every `i128`.
fn minus_magnitude(x: i128) -> i128 {
    if x > 0 {
        x.saturating_neg()
    } else {
        x
    }
}

/// `-(|a| * |b|)` for `a, b <= 0` (minus two magnitudes), or `None` past 2^127.
fn magnitudes_times(a: i128, b: i128) -> Option<i128> {
    match b.checked_neg() {
        Some(mb) => a.checked_mul(mb),
        // |b| = 2^127: only a factor of magnitude 0 or 1 keeps the product in range.
        None if a == 0 => Some(0),
        None if a == -1 => Some(i128::MIN),
        None => None,
    }
}

fn i128_to_f64(v: i128) -> f64 {
    #[allow(clippy::as_conversions)]
    let f = v as f64;
    f
}

/// The square root of `v` (NaN below 0), correctly rounded, without `std`.
pub fn sqrt(v: f64) -> f64 {
    // `f64::sqrt` lives in `std`; Newton iterations from the bit-level estimate converge to
    // the correctly rounded root within a few steps for every finite positive input.
    if v.is_nan() || v < 0.0 {
        return f64::NAN;
    }
    if v == 0.0 || v.is_infinite() {
        return v;
    }
    let mut x = f64::from_bits((v.to_bits() >> 1).wrapping_add(0x1ff8_0000_0000_0000));
    for _ in 0..6 {
        x = 0.5 * (x + v / x);
    }
    x
}

/// The better of two extremes: a NaN first (for operations that keep NaN, NaN is the
/// answer), then the smaller (or larger) value, then the earlier position. Symmetric, so
/// it gives the same answer whatever order partial results merge in.
fn pick(a: Extreme, b: Extreme, want_min: bool) -> Extreme {
    let (x, y) = if a.pos <= b.pos { (a, b) } else { (b, a) };
    if x.float.is_nan() {
        return x;
    }
    if y.float.is_nan() {
        return y;
    }
    let y_wins = if x.int != y.int {
        (y.int < x.int) == want_min
    } else if x.float != y.float {
        (y.float < x.float) == want_min
    } else {
        false
    };
    if y_wins {
        y
    } else {
        x
    }
}

struct Run<'a> {
    bytes: &'a [u8],
    count: usize,
    stride: usize,
    position: u64,
    position_stride: u64,
}

/// Runs `$e` with `$t` bound to the element type of `$d`.
macro_rules! with_elem {
    ($d:expr, $t:ident => $e:expr) => {
        match $d {
            DType::U8 => {
                type $t = u8;
                $e
            }
            DType::U16 => {
                type $t = u16;
                $e
            }
            DType::U32 => {
                type $t = u32;
                $e
            }
            DType::U64 => {
                type $t = u64;
                $e
            }
            DType::I16 => {
                type $t = i16;
                $e
            }
            DType::I32 => {
                type $t = i32;
                $e
            }
            DType::I64 => {
                type $t = i64;
                $e
            }
            DType::F16 => {
                type $t = half::f16;
                $e
            }
            DType::F32 => {
                type $t = f32;
                $e
            }
            DType::F64 => {
                type $t = f64;
                $e
            }
        }
    };
}
use with_elem;

impl<'a> Run<'a> {
    /// The run of `count` elements of `dtype` starting at element `index` of `tile`,
    /// `stride` elements apart; `None` when `index` is past the tile.
    #[allow(clippy::too_many_arguments)]
    fn new(
        dtype: DType,
        tile: &'a [u8],
        index: u64,
        count: u64,
        stride: u64,
        position: u64,
        position_stride: u64,
    ) -> Option<Run<'a>> {
        let size = usize::try_from(dtype.size()).ok()?;
        let start = usize::try_from(index).ok()?.checked_mul(size)?;
        Some(Run {
            bytes: tile.get(start..)?,
            count: usize::try_from(count).unwrap_or(usize::MAX),
            stride: usize::try_from(stride).unwrap_or(usize::MAX).max(1),
            position,
            position_stride,
        })
    }

    fn elements<T: Elem>(&self) -> impl Iterator<Item = T> + 'a {
        let step = T::SIZE.saturating_mul(self.stride);
        let bytes = self.bytes;
        let count = self.count;
        (0..count).map_while(move |i| {
            let at = i.checked_mul(step)?;
            T::read(bytes.get(at..at.checked_add(T::SIZE)?)?)
        })
    }
}

/// Element types as the kernels see them.
pub trait Elem: Copy {
    /// Bytes per element.
    const SIZE: usize;
    /// Whether the type is a float.
    const FLOAT: bool;
    /// Reads one little-endian element from exactly `SIZE` bytes.
    fn read(b: &[u8]) -> Option<Self>;
    /// The value as `f64`.
    fn f64(self) -> f64;
    /// The value as an exact integer (0 for floats).
    fn int(self) -> i128;
}

macro_rules! int_elem {
    ($t:ty) => {
        impl Elem for $t {
            const SIZE: usize = core::mem::size_of::<$t>();
            const FLOAT: bool = false;
            #[inline]
            fn read(b: &[u8]) -> Option<Self> {
                Some(<$t>::from_le_bytes(b.try_into().ok()?))
            }
            #[inline]
            #[allow(clippy::as_conversions)]
            fn f64(self) -> f64 {
                self as f64
            }
            #[inline]
            fn int(self) -> i128 {
                i128::from(self)
            }
        }
    };
}
int_elem!(u8);
int_elem!(u16);
int_elem!(u32);
int_elem!(u64);
int_elem!(i16);
int_elem!(i32);
int_elem!(i64);

impl Elem for f32 {
    const SIZE: usize = 4;
    const FLOAT: bool = true;
    #[inline]
    fn read(b: &[u8]) -> Option<Self> {
        Some(f32::from_le_bytes(b.try_into().ok()?))
    }
    #[inline]
    fn f64(self) -> f64 {
        f64::from(self)
    }
    fn int(self) -> i128 {
        0
    }
}

impl Elem for f64 {
    const SIZE: usize = 8;
    const FLOAT: bool = true;
    #[inline]
    fn read(b: &[u8]) -> Option<Self> {
        Some(f64::from_le_bytes(b.try_into().ok()?))
    }
    #[inline]
    fn f64(self) -> f64 {
        self
    }
    fn int(self) -> i128 {
        0
    }
}

impl Elem for half::f16 {
    const SIZE: usize = 2;
    const FLOAT: bool = true;
    #[inline]
    fn read(b: &[u8]) -> Option<Self> {
        Some(half::f16::from_le_bytes(b.try_into().ok()?))
    }
    #[inline]
    fn f64(self) -> f64 {
        self.to_f64()
    }
    fn int(self) -> i128 {
        0
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::restriction, reason = "tests fail by panicking")]
    use super::*;

    #[test]
    fn an_acc_of_sum_blocks_is_the_blocks_added_one_by_one() {
        let blocks = [
            (1.5e16, 32u64, 0u64),
            (3.25, 32, 2),
            (-1.5e16, 32, 0),
            (0.1, 7, 7),
        ];
        for op in [Reduce::Sum, Reduce::NanSum, Reduce::Mean, Reduce::NanMean] {
            let mut one_by_one = Acc::new();
            let (mut fsum, mut n, mut nan) = (FSum::default(), 0, 0);
            for (s, c, k) in blocks {
                one_by_one.add_sum_block(op, s, c, k);
                fsum.add(s);
                n += c;
                nan += k;
            }
            let of = Acc::of_sum_blocks(op, fsum, n, nan);
            assert_eq!(of, one_by_one, "{op:?}");
            assert_eq!(of.result(op, DType::F32), one_by_one.result(op, DType::F32));
        }
    }

    #[test]
    fn non_finite_bits_counts_every_nan_and_infinity_pattern() {
        let f32s: [u32; 10] = [
            0x7fc0_0000, // quiet NaN
            0xffc0_0000, // negative quiet NaN
            0x7f80_0001, // signalling NaN, lowest payload
            0xffff_ffff, // negative NaN, every bit
            0x7f80_0000, // +inf
            0xff80_0000, // -inf
            0x7f7f_ffff, // largest finite
            0x0000_0001, // smallest subnormal
            0x8000_0000, // -0
            0x3f80_0000, // 1
        ];
        let bytes: Vec<u8> = f32s.iter().flat_map(|b| b.to_le_bytes()).collect();
        assert_eq!(non_finite_bits(&bytes, 4), Some((4, 2)));
        let f64s: [u64; 7] = [
            0x7ff8_0000_0000_0000,
            0xfff0_0000_0000_0001,
            0x7ff0_0000_0000_0000,
            0xfff0_0000_0000_0000,
            0x7fef_ffff_ffff_ffff,
            0x8000_0000_0000_0000,
            0x0000_0000_0000_0001,
        ];
        let bytes: Vec<u8> = f64s.iter().flat_map(|b| b.to_le_bytes()).collect();
        assert_eq!(non_finite_bits(&bytes, 8), Some((2, 2)));
        assert_eq!(non_finite_bits(&[0u8; 4], 2), None);
        // The same answers as the element-wise reading, over more than one block.
        let many: Vec<u8> = (0..(1u32 << 17) + 5)
            .flat_map(|i| f32s[(i % 10) as usize].to_le_bytes())
            .collect();
        let (mut nan, mut inf) = (0u64, 0u64);
        for e in many.chunks_exact(4) {
            let v = f32::from_le_bytes(e.try_into().unwrap());
            nan += u64::from(v.is_nan());
            inf += u64::from(v.is_infinite());
        }
        assert_eq!(non_finite_bits(&many, 4), Some((nan, inf)));
    }
}
