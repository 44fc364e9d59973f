//! Quantiles and medians: the selected elements of one group of output cells gathered
//! at a time, then NumPy's rules (`numpy.quantile`'s `linear` method, `numpy.median`).

use alloc::vec;
use alloc::vec::Vec;

use tet_core::arith::u64_of;
use tet_core::tet::fold::{FoldError, Value};
use tet_core::tet::select::for_each_run;
use tet_core::tet::{DType, TetFile};

use crate::tet::decode::{ChunkDecoder, FrameBackend};

use super::fold::{box_index, box_to_out};
use super::*;

/// Gathers the selected elements per output cell of each group and takes the quantile
/// `q`, or the median when `q` is `None`.
pub(super) fn quantile<'f, B: FrameBackend>(
    file: &TetFile<'f>,
    plan: &ReadPlan<'f>,
    q: Option<Quantile>,
    axes: &Axes,
    dec: &mut ChunkDecoder<B>,
) -> Result<Output, QueryError> {
    if let Some(Quantile { q, .. }) = q {
        if !(0.0..=1.0).contains(&q) {
            return Err(QueryError::Quantile(q));
        }
    }
    let budget = dec.budget();
    let sel_shape = plan.selection.shape();
    let out_shape = axes.out_shape(sel_shape.as_slice());
    let cells = out_shape.iter().fold(1u64, |a, n| a.saturating_mul(*n));
    let per_cell = plan.selection.len().checked_div(cells.max(1)).unwrap_or(0);
    let dtype = plan.dataset.dtype();
    let mut values = vec![Value::F64(f64::NAN); usize::try_from(cells).unwrap_or(0)];
    // A count accumulator per cell tells where each element goes: reuse the groups.
    let gs = groups(plan, axes, budget)?;
    for g in &gs {
        let needed = u64_of(g.cells.len())
            .saturating_mul(per_cell)
            .saturating_mul(8);
        if needed > budget {
            return Err(QueryError::Budget {
                needed,
                budget,
                what: "the quantile's elements",
            });
        }
        let mut buckets: Vec<Vec<f64>> = vec![Vec::new(); g.cells.len()];
        let ndim = plan.dataset.ndim();
        for &i in &g.parts {
            let tile = decode_part(file, plan, i, dec)?;
            let Some(part) = plan.parts.get(i) else {
                continue;
            };
            for_each_run(&plan.dataset, &plan.selection, part, |r| {
                let last = ndim.saturating_sub(1);
                for k in 0..r.count {
                    let mut ordinals = r.ordinals;
                    if let Some(o) = ordinals.get_mut(last) {
                        *o = o.saturating_add(k);
                    }
                    let local = box_index(&g.origin, axes, ndim, &ordinals);
                    let idx = r.tile_index.saturating_add(k.saturating_mul(r.tile_stride));
                    if let (Some(b), Some(v)) = (
                        usize::try_from(local).ok().and_then(|l| buckets.get_mut(l)),
                        tile_element(dtype, tile, idx),
                    ) {
                        b.push(v);
                    }
                }
            });
        }
        for (cell, b) in buckets.iter_mut().enumerate() {
            let out_idx = box_to_out(&g.origin, &out_shape, cell);
            let v = match q {
                Some(q) => numpy_quantile(b, q),
                None => numpy_median(b),
            }
            .ok_or(QueryError::Fold {
                error: FoldError::Empty,
                cell: out_idx,
            })?;
            if let Some(slot) = usize::try_from(out_idx)
                .ok()
                .and_then(|i| values.get_mut(i))
            {
                *slot = Value::F64(v);
            }
        }
    }
    if cells > 0 && gs.is_empty() {
        return Err(QueryError::Fold {
            error: FoldError::Empty,
            cell: 0,
        });
    }
    Ok(Output {
        shape: out_shape,
        values,
        nothing_left: None,
    })
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

/// Sorts `v`; `None` when it is empty, NaN when it holds a NaN (NumPy's quantile and
/// median both check for a NaN after sorting).
fn sorted(v: &mut [f64]) -> Option<Result<&[f64], f64>> {
    if v.is_empty() {
        return None;
    }
    if v.iter().any(|x| x.is_nan()) {
        return Some(Err(f64::NAN));
    }
    v.sort_unstable_by(f64::total_cmp);
    Some(Ok(v))
}

/// `numpy.quantile(v, q)` with the default `linear` method; `None` when `v` is empty.
pub fn numpy_quantile(v: &mut [f64], q: Quantile) -> Option<f64> {
    let v = match sorted(v)? {
        Ok(v) => v,
        Err(nan) => return Some(nan),
    };
    let last = v.len().saturating_sub(1);
    if q.integral {
        // An integer virtual index: the element itself, no interpolation.
        return v.get(if q.q >= 1.0 { last } else { 0 }).copied();
    }
    let virt = q.q * u64_f64(u64_of(last));
    // NumPy's `_get_indexes`: at or past the last index both neighbours are the last
    // element and `gamma` is measured from index -1 (so `gamma = virt + 1`).
    let (lo, gamma) = if virt >= u64_f64(u64_of(last)) {
        (last, virt + 1.0)
    } else {
        let lo = floor(virt);
        #[allow(
            clippy::as_conversions,
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss
        )]
        let lo_i = lo as usize;
        (lo_i, virt - lo)
    };
    let a = *v.get(lo)?;
    let b = *v.get(lo.saturating_add(1).min(last))?;
    // NumPy's `_lerp`: a + (b - a) t, then b - (b - a)(1 - t) where t >= 0.5 (so
    // infinities give NaN exactly where NumPy's do).
    let diff = b - a;
    Some(if gamma >= 0.5 {
        b - diff * (1.0 - gamma)
    } else {
        a + diff * gamma
    })
}

/// `numpy.median(v)`: the middle element, or the `f64` mean of the middle two; `None`
/// when `v` is empty.
pub fn numpy_median(v: &mut [f64]) -> Option<f64> {
    let v = match sorted(v)? {
        Ok(v) => v,
        Err(nan) => return Some(nan),
    };
    let half = v.len() / 2;
    let hi = *v.get(half)?;
    if v.len() % 2 == 1 {
        return Some(hi);
    }
    let lo = *v.get(half.checked_sub(1)?)?;
    Some((lo + hi) / 2.0)
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
