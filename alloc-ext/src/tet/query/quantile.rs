//! Quantiles: the selected elements of one group of output cells gathered at a time,
//! then NumPy's linear interpolation.

use alloc::vec;
use alloc::vec::Vec;

use tet_core::arith::u64_of;
use tet_core::tet::fold::{FoldError, Value};
use tet_core::tet::select::for_each_run;
use tet_core::tet::{DType, TetFile};

use crate::tet::decode::{ChunkDecoder, FrameBackend};

use super::fold::{box_index, box_to_out};
use super::*;

/// Gathers the selected elements per output cell of each group and interpolates.
pub(super) fn quantile<'f, B: FrameBackend>(
    file: &TetFile<'f>,
    plan: &ReadPlan<'f>,
    q: f64,
    axes: &Axes,
    dec: &mut ChunkDecoder<B>,
) -> Result<Output, QueryError> {
    if !(0.0..=1.0).contains(&q) {
        return Err(QueryError::Quantile(q));
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
            let v = interpolate(b, q).ok_or(QueryError::Fold {
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

/// NumPy's default (`linear`) quantile of `v`; NaN when any element is NaN; `None` when
/// `v` is empty.
fn interpolate(v: &mut [f64], q: f64) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    if v.iter().any(|x| x.is_nan()) {
        return Some(f64::NAN);
    }
    v.sort_unstable_by(f64::total_cmp);
    let last = u64_of(v.len()).saturating_sub(1);
    let pos = q * u64_f64(last);
    let lo = floor(pos);
    let frac = pos - lo;
    #[allow(
        clippy::as_conversions,
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss
    )]
    let lo_i = lo as usize;
    let a = *v.get(lo_i)?;
    let b = *v.get(lo_i.saturating_add(1)).unwrap_or(&a);
    // NumPy's `_lerp`, to the operation: a + (b - a) t below t = 0.5, b - (b - a)(1 - t)
    // from there (so infinities give NaN exactly where NumPy's do).
    let diff = b - a;
    Some(if frac < 0.5 {
        a + diff * frac
    } else {
        b - diff * (1.0 - frac)
    })
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
