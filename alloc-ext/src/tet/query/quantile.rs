//! Quantiles and medians: the selected elements of one group of output cells gathered
//! at a time, then NumPy's rules (`numpy.quantile`'s `linear` method, `numpy.median`).

use alloc::vec;
use alloc::vec::Vec;

use tet_core::arith::u64_of;
use tet_core::tet::fold::{fold_f64, FoldError, Value};
use tet_core::tet::select::for_each_run;
use tet_core::tet::{DType, TetFile};

use crate::tet::decode::{ChunkDecoder, FrameBackend};

use super::fold::{box_index, box_to_out};
use super::*;

/// Gathers the selected elements per output cell of each group and takes the quantiles
/// `qs` (the output gets a first axis of one entry per quantile when `several`, as
/// `numpy.quantile` with a list of `q`), or the median when `qs` is `None`.
pub(super) fn quantile<'f, B: FrameBackend>(
    file: &TetFile<'f>,
    plan: &ReadPlan<'f>,
    qs: Option<&[Quantile]>,
    several: bool,
    axes: &Axes,
    dec: &mut ChunkDecoder<B>,
) -> Result<Output, QueryError> {
    for q in qs.unwrap_or(&[]) {
        if !(0.0..=1.0).contains(&q.q) {
            return Err(QueryError::Quantile(q.q));
        }
    }
    let nq = qs.map_or(1, <[Quantile]>::len).max(1);
    let budget = dec.budget();
    let sel_shape = plan.selection.shape();
    let out_shape = axes.out_shape(sel_shape.as_slice());
    let cells = out_shape.iter().fold(1u64, |a, n| a.saturating_mul(*n));
    let per_cell = plan.selection.len().checked_div(cells.max(1)).unwrap_or(0);
    let dtype = plan.dtype();
    let cells_n = usize::try_from(cells).unwrap_or(0);
    let mut values = vec![Value::F64(f64::NAN); cells_n.saturating_mul(nq)];
    // A count accumulator per cell tells where each element goes: reuse the groups.
    let gs = groups(plan, axes, None, budget)?;
    // `f16` and `f32` elements are gathered as 4-byte keys (exact: their `f64` is the
    // widened `f32`), others as 8-byte ones; either way ordered as `f64::total_cmp`.
    let narrow = matches!(dtype, DType::F16 | DType::F32);
    let key_size: u64 = if narrow { 4 } else { 8 };
    for g in &gs {
        let needed = u64_of(g.width())
            .saturating_mul(per_cell)
            .saturating_mul(key_size);
        if needed > budget {
            return Err(QueryError::Budget {
                needed,
                budget,
                what: "the quantile's elements",
            });
        }
        let cap = usize::try_from(per_cell).unwrap_or(0);
        let mut put = |cell: usize, vs: Vec<f64>| {
            let out_idx = box_to_out(&g.origin, &out_shape, cell);
            let at = usize::try_from(out_idx).unwrap_or(usize::MAX);
            for (k, v) in vs.into_iter().enumerate() {
                let i = k.saturating_mul(cells_n).saturating_add(at);
                if let Some(slot) = values.get_mut(i) {
                    *slot = Value::F64(v);
                }
            }
        };
        let empty = |cell: usize| QueryError::Fold {
            error: FoldError::Empty,
            cell: box_to_out(&g.origin, &out_shape, cell),
        };
        if narrow {
            let (mut buckets, nan) = gather(file, plan, g, axes, dec, cap, key32)?;
            for (cell, b) in buckets.iter_mut().enumerate() {
                let nan = nan.get(cell).copied().unwrap_or(false);
                let vs = of_keys(b, nan, qs, back32).ok_or_else(|| empty(cell))?;
                // The elements are not needed any more: free them before the next cell.
                *b = Vec::new();
                put(cell, vs);
            }
        } else {
            let (mut buckets, nan) = gather(file, plan, g, axes, dec, cap, key64)?;
            for (cell, b) in buckets.iter_mut().enumerate() {
                let nan = nan.get(cell).copied().unwrap_or(false);
                let vs = of_keys(b, nan, qs, back64).ok_or_else(|| empty(cell))?;
                *b = Vec::new();
                put(cell, vs);
            }
        }
    }
    if cells > 0 && gs.is_empty() {
        return Err(QueryError::Fold {
            error: FoldError::Empty,
            cell: 0,
        });
    }
    let mut shape = out_shape;
    if several {
        shape.insert(0, u64_of(nq));
    }
    Ok(Output {
        shape,
        values,
        nothing_left: None,
    })
}

/// The selected elements of group `g`, as keys, per cell of its box (exactly `cap`
/// reserved for each: every cell takes the same number), and whether each cell met a
/// NaN (NaN elements are not kept).
#[allow(clippy::type_complexity)]
fn gather<'f, B: FrameBackend, K: Copy>(
    file: &TetFile<'f>,
    plan: &ReadPlan<'f>,
    g: &Group,
    axes: &Axes,
    dec: &mut ChunkDecoder<B>,
    cap: usize,
    key: fn(f64) -> K,
) -> Result<(Vec<Vec<K>>, Vec<bool>), QueryError> {
    let dtype = plan.dtype();
    let mut buckets: Vec<Vec<K>> = (0..g.width()).map(|_| Vec::with_capacity(cap)).collect();
    let mut nan = vec![false; g.width()];
    let ndim = plan.dataset.ndim();
    let last = ndim.saturating_sub(1);
    let last_kept = axes.kept(last);
    for &i in &g.parts {
        let tile = decode_part(file, plan, i, dec)?;
        let Some(part) = plan.parts.get(i) else {
            continue;
        };
        for_each_run(&plan.dataset, &plan.selection, part, |r| {
            if !last_kept {
                // The run's elements all go to one cell: a typed pass.
                let local = box_index(&g.origin, axes, ndim, &r.ordinals);
                let Ok(l) = usize::try_from(local) else {
                    return;
                };
                if let (Some(b), Some(n)) = (buckets.get_mut(l), nan.get_mut(l)) {
                    // The bucket and the flag by value: kept in registers through the run.
                    let (kept, met) = fold_f64(
                        dtype,
                        tile,
                        r.tile_index,
                        r.count,
                        r.tile_stride,
                        (core::mem::take(b), *n),
                        |(mut b, met), v| {
                            if v.is_nan() {
                                (b, true)
                            } else {
                                b.push(key(v));
                                (b, met)
                            }
                        },
                    );
                    *b = kept;
                    *n = met;
                }
                return;
            }
            for k in 0..r.count {
                let mut ordinals = r.ordinals;
                if let Some(o) = ordinals.get_mut(last) {
                    *o = o.saturating_add(k);
                }
                let local = box_index(&g.origin, axes, ndim, &ordinals);
                let idx = r.tile_index.saturating_add(k.saturating_mul(r.tile_stride));
                let Ok(l) = usize::try_from(local) else {
                    continue;
                };
                if let (Some(b), Some(n), Some(v)) = (
                    buckets.get_mut(l),
                    nan.get_mut(l),
                    tile_element(dtype, tile, idx),
                ) {
                    if v.is_nan() {
                        *n = true;
                    } else {
                        b.push(key(v));
                    }
                }
            }
        });
    }
    Ok((buckets, nan))
}

/// An `f32` value (the `f64` of an `f16` or `f32` element) as a key ordered as
/// `f64::total_cmp` orders the values.
fn key32(v: f64) -> u32 {
    #[allow(clippy::as_conversions, clippy::cast_possible_truncation)]
    let b = (v as f32).to_bits();
    if b >> 31 == 1 {
        !b
    } else {
        b | 0x8000_0000
    }
}

fn back32(k: u32) -> f64 {
    let b = if k >> 31 == 1 { k & 0x7fff_ffff } else { !k };
    f64::from(f32::from_bits(b))
}

/// An `f64` as a key ordered as `f64::total_cmp`.
fn key64(v: f64) -> u64 {
    let b = v.to_bits();
    if b >> 63 == 1 {
        !b
    } else {
        b | 0x8000_0000_0000_0000
    }
}

fn back64(k: u64) -> f64 {
    f64::from_bits(if k >> 63 == 1 {
        k & 0x7fff_ffff_ffff_ffff
    } else {
        !k
    })
}

/// The quantiles `qs` (the median when `None`) of the values whose keys are `v`; NaN
/// when the cell met one; `None` when it has no element.
fn of_keys<K: Ord + Copy>(
    v: &mut [K],
    nan: bool,
    qs: Option<&[Quantile]>,
    back: fn(K) -> f64,
) -> Option<Vec<f64>> {
    let n = qs.map_or(1, <[Quantile]>::len);
    if nan {
        return Some(vec![f64::NAN; n]);
    }
    if v.is_empty() {
        return None;
    }
    match qs {
        Some(qs) => quantiles_by(v, qs, Ord::cmp, back),
        None => median_by(v, Ord::cmp, back).map(|m| vec![m]),
    }
}

/// Element `index` of a tile as `f64`.
fn tile_element(dtype: DType, tile: &[u8], index: u64) -> Option<f64> {
    let size = usize::try_from(dtype.size()).ok()?;
    let at = usize::try_from(index).ok()?.checked_mul(size)?;
    tet_core::tet::fold::element_f64(dtype, tile.get(at..at.checked_add(size)?)?)
}

#[allow(clippy::as_conversions)]
fn i64_f64(v: i64) -> f64 {
    v as f64
}

#[allow(clippy::as_conversions)]
fn u64_f64(v: u64) -> f64 {
    v as f64
}

/// Puts the order statistics `wanted` (ascending) of `v` in place: afterwards `v[k]` is
/// the element a sort by `cmp` would put at `k`, for each `k` wanted. Successive
/// selections (`select_nth_unstable_by`), each on what lies above the last one, instead
/// of a sort.
fn select_at<T>(v: &mut [T], wanted: &[usize], cmp: impl Fn(&T, &T) -> core::cmp::Ordering) {
    let mut from = 0usize;
    for &k in wanted {
        let Some(rel) = k.checked_sub(from) else {
            continue;
        };
        let Some(rest) = v.get_mut(from..) else {
            return;
        };
        if rel >= rest.len() {
            return;
        }
        rest.select_nth_unstable_by(rel, &cmp);
        from = k.saturating_add(1);
    }
}

/// Where a quantile reads: the lower and upper neighbours' sorted indices and the weight
/// of the upper one, as NumPy's `linear` method finds them (`None` for an integer `q`,
/// which reads one element without interpolating).
fn neighbours(len: usize, q: Quantile) -> (usize, usize, Option<f64>) {
    let last = len.saturating_sub(1);
    if q.integral {
        // An integer virtual index: the element itself, no interpolation.
        let at = if q.q >= 1.0 { last } else { 0 };
        return (at, at, None);
    }
    let virt = q.q * u64_f64(u64_of(last));
    // NumPy's `_get_indexes`: at or past the last index both neighbours are the last
    // element and `gamma` is measured from index -1 (so `gamma = virt + 1`).
    if virt >= u64_f64(u64_of(last)) {
        return (last, last, Some(virt + 1.0));
    }
    let lo = floor(virt);
    #[allow(
        clippy::as_conversions,
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss
    )]
    let lo_i = lo as usize;
    (lo_i, lo_i.saturating_add(1).min(last), Some(virt - lo))
}

/// NumPy's `_lerp`: `a + (b - a) t`, then `b - (b - a)(1 - t)` where `t >= 0.5` (so
/// infinities give NaN exactly where NumPy's do).
fn lerp(a: f64, b: f64, gamma: f64) -> f64 {
    let diff = b - a;
    if gamma >= 0.5 {
        b - diff * (1.0 - gamma)
    } else {
        a + diff * gamma
    }
}

/// The quantiles `qs` of `v` (not empty, no NaN) ordered by `cmp`, values by `back`.
fn quantiles_by<T: Copy>(
    v: &mut [T],
    qs: &[Quantile],
    cmp: impl Fn(&T, &T) -> core::cmp::Ordering,
    back: impl Fn(T) -> f64,
) -> Option<Vec<f64>> {
    let at: Vec<(usize, usize, Option<f64>)> = qs.iter().map(|q| neighbours(v.len(), *q)).collect();
    let mut wanted: Vec<usize> = at.iter().flat_map(|(lo, hi, _)| [*lo, *hi]).collect();
    wanted.sort_unstable();
    wanted.dedup();
    select_at(v, &wanted, cmp);
    at.iter()
        .map(|(lo, hi, gamma)| {
            let a = back(*v.get(*lo)?);
            let b = back(*v.get(*hi)?);
            Some(gamma.map_or(a, |g| lerp(a, b, g)))
        })
        .collect()
}

/// The median of `v` (not empty, no NaN) ordered by `cmp`, values by `back`.
fn median_by<T: Copy>(
    v: &mut [T],
    cmp: impl Fn(&T, &T) -> core::cmp::Ordering,
    back: impl Fn(T) -> f64,
) -> Option<f64> {
    let half = v.len() / 2;
    if v.len() % 2 == 1 {
        select_at(v, &[half], cmp);
        return v.get(half).copied().map(back);
    }
    let below = half.checked_sub(1)?;
    select_at(v, &[below, half], cmp);
    let lo = back(*v.get(below)?);
    let hi = back(*v.get(half)?);
    Some((lo + hi) / 2.0)
}

/// `numpy.quantile(v, qs)` with the default `linear` method, one value per `q`, by
/// selection rather than a sort (`v` is reordered); `None` when `v` is empty. A NaN in
/// `v` makes every value NaN, as NumPy's.
pub fn numpy_quantiles(v: &mut [f64], qs: &[Quantile]) -> Option<Vec<f64>> {
    if v.is_empty() {
        return None;
    }
    if v.iter().any(|x| x.is_nan()) {
        return Some(vec![f64::NAN; qs.len()]);
    }
    quantiles_by(v, qs, f64::total_cmp, |x| x)
}

/// `numpy.quantile(v, q)` with the default `linear` method; `None` when `v` is empty.
pub fn numpy_quantile(v: &mut [f64], q: Quantile) -> Option<f64> {
    numpy_quantiles(v, core::slice::from_ref(&q))?
        .first()
        .copied()
}

/// `numpy.median(v)`: the middle element, or the `f64` mean of the middle two; `None`
/// when `v` is empty (`v` is reordered).
pub fn numpy_median(v: &mut [f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    if v.iter().any(|x| x.is_nan()) {
        return Some(f64::NAN);
    }
    median_by(v, f64::total_cmp, |x| x)
}

fn floor(x: f64) -> f64 {
    #[allow(clippy::as_conversions, clippy::cast_possible_truncation)]
    let t = x as i64;
    let t = i64_f64(t);
    if t > x {
        t - 1.0
    } else {
        t
    }
}
