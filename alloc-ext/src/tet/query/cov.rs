//! Covariance and correlation matrices of a rank-2 selection, as `numpy.cov` and
//! `numpy.corrcoef`: one axis holds the observations, the other the variables.
//!
//! The selection is gathered as `f64` (checked against the budget), each variable's mean
//! and each pair's sum of products of deviations added with Neumaier compensation in
//! observation order, so the result depends on nothing but the elements.

use alloc::vec;
use alloc::vec::Vec;

use tet_core::tet::fold::{for_each_f64, sqrt, FSum, FoldError, Value};
use tet_core::tet::select::for_each_run;

use super::*;

/// A covariance or correlation request.
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Cov {
    /// Delta degrees of freedom (NumPy's default for `cov` is 1; `corrcoef` ignores it).
    pub ddof: u32,
    /// `numpy.corrcoef` rather than `numpy.cov`.
    pub correlation: bool,
}

/// The covariance (or correlation) matrix of `plan`'s selection: rank 2, the
/// observations along the one reduced axis of `axes` (axis 1, NumPy's `rowvar=True`,
/// when every axis is reduced), the variables along the other. The output is
/// `[variables, variables]`.
pub(super) fn covariance<'f, B: FrameBackend>(
    file: &TetFile<'f>,
    plan: &ReadPlan<'f>,
    c: Cov,
    axes: &Axes,
    dec: &mut ChunkDecoder<B>,
) -> Result<Output, QueryError> {
    let ndim = plan.dataset.ndim();
    if ndim != 2 {
        return Err(QueryError::CovRank(ndim));
    }
    let obs_axis = if axes.scalar() {
        1
    } else if !axes.kept(0) && axes.kept(1) {
        0
    } else if axes.kept(0) && !axes.kept(1) {
        1
    } else {
        return Err(QueryError::CovRank(ndim));
    };
    let shape = plan.selection.shape();
    let (rows, cols) = match shape.as_slice() {
        [r, c] => (*r, *c),
        _ => return Err(QueryError::CovRank(ndim)),
    };
    let (vars, nobs) = if obs_axis == 1 {
        (rows, cols)
    } else {
        (cols, rows)
    };
    let budget = dec.budget();
    let needed = rows
        .saturating_mul(cols)
        .saturating_add(vars.saturating_mul(vars))
        .saturating_mul(8)
        .saturating_add(vars.saturating_mul(16));
    if needed > budget {
        return Err(QueryError::Budget {
            needed,
            budget,
            what: "the covariance's elements and matrix",
        });
    }
    let total = usize::try_from(rows.saturating_mul(cols)).unwrap_or(0);
    let mut data = vec![0f64; total];
    let dtype = plan.dtype();
    let width = usize::try_from(cols).unwrap_or(0);
    for (i, part) in plan.parts.iter().enumerate() {
        let tile = decode_part(file, plan, i, dec)?;
        for_each_run(&plan.dataset, &plan.selection, part, |r| {
            let o = r.ordinals.as_slice();
            let row = o
                .first()
                .and_then(|v| usize::try_from(*v).ok())
                .unwrap_or(0);
            let col = o.get(1).and_then(|v| usize::try_from(*v).ok()).unwrap_or(0);
            let mut at = row.saturating_mul(width).saturating_add(col);
            for_each_f64(dtype, tile, r.tile_index, r.count, r.tile_stride, |v| {
                if let Some(slot) = data.get_mut(at) {
                    *slot = v;
                }
                at = at.saturating_add(1);
            });
        });
    }
    let n_vars = usize::try_from(vars).unwrap_or(0);
    let n_obs = usize::try_from(nobs).unwrap_or(0);
    // Element `o` of variable `v`.
    let x = |v: usize, o: usize| -> f64 {
        let at = if obs_axis == 1 {
            v.saturating_mul(width).saturating_add(o)
        } else {
            o.saturating_mul(width).saturating_add(v)
        };
        data.get(at).copied().unwrap_or(f64::NAN)
    };
    if n_obs == 0 {
        return Err(QueryError::Fold {
            error: FoldError::Empty,
            cell: 0,
        });
    }
    // NumPy's cov divides by `nobs - ddof` (corrcoef's ratio does not depend on it).
    let ddof = if c.correlation { 1 } else { c.ddof };
    let denom = nobs
        .checked_sub(u64::from(ddof))
        .filter(|d| *d > 0)
        .ok_or(QueryError::Fold {
            error: FoldError::Ddof,
            cell: 0,
        })?;
    let denom_f = u64_f64(denom);
    let nobs_f = u64_f64(nobs);
    let means: Vec<f64> = (0..n_vars)
        .map(|v| {
            let mut s = FSum::default();
            for o in 0..n_obs {
                s.add(x(v, o));
            }
            s.value() / nobs_f
        })
        .collect();
    let mut cov = vec![0f64; n_vars.saturating_mul(n_vars)];
    for i in 0..n_vars {
        let mi = means.get(i).copied().unwrap_or(f64::NAN);
        for j in i..n_vars {
            let mj = means.get(j).copied().unwrap_or(f64::NAN);
            let mut s = FSum::default();
            for o in 0..n_obs {
                s.add((x(i, o) - mi) * (x(j, o) - mj));
            }
            let v = s.value() / denom_f;
            for at in [
                i.saturating_mul(n_vars).saturating_add(j),
                j.saturating_mul(n_vars).saturating_add(i),
            ] {
                if let Some(slot) = cov.get_mut(at) {
                    *slot = v;
                }
            }
        }
    }
    if c.correlation {
        // NumPy's corrcoef: c / stddev[:, None] / stddev[None, :], clipped to [-1, 1].
        let sd: Vec<f64> = (0..n_vars)
            .map(|i| {
                sqrt(
                    cov.get(i.saturating_mul(n_vars).saturating_add(i))
                        .copied()
                        .unwrap_or(f64::NAN),
                )
            })
            .collect();
        for (k, slot) in cov.iter_mut().enumerate() {
            let i = k.checked_div(n_vars).unwrap_or(0);
            let j = k.checked_rem(n_vars).unwrap_or(0);
            let si = sd.get(i).copied().unwrap_or(f64::NAN);
            let sj = sd.get(j).copied().unwrap_or(f64::NAN);
            let r = *slot / si / sj;
            *slot = r.clamp(-1.0, 1.0);
        }
    }
    Ok(Output {
        shape: vec![vars, vars],
        values: cov.into_iter().map(Value::F64).collect(),
        nothing_left: None,
    })
}

#[allow(clippy::as_conversions)]
fn u64_f64(v: u64) -> f64 {
    v as f64
}
