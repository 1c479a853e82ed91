//! Series-major evaluation over the outer steps of a range query part.
//!
//! A range query evaluates its expression once per step; done naively, every step visits every
//! series again, which misses the CPU caches at each step and builds a vector of elements per
//! step. For the expressions that dominate dashboards, a selector or a parameterless rollup of
//! a range selector ([`PerSeries`]), the values of all of a part's steps are computed at first
//! use instead, one series at a time, and cached per node (see [`Query::rollup_cache`]); the
//! aggregations over them fold each series straight into its group (`aggr::over_series`).
//!
//! Invariant: every value equals, bit for bit, what the per-step path computes at that step;
//! `range_steps_equal_instant_queries_for_subqueries` (promql tests) checks it against instant
//! queries, which never take this path.

use promql_parser::parser::{Expr, MatrixSelector, VectorSelector};

use super::error::Result;
use super::eval::{offset_ms, seek, Query, StepValues};
use super::functions::rollup::{self, Rollup};
use super::value::Elem;
use crate::sample::{is_stale_marker, Sample};

/// An expression with at most one value per series per step, computed from that series'
/// samples alone.
#[derive(Clone, Copy)]
pub(crate) enum PerSeries<'e> {
    /// An instant vector selector: the latest sample in the lookback window, unless it is a
    /// staleness marker.
    Latest(&'e VectorSelector),
    /// A rollup without parameters over a range selector, e.g. `rate(x[5m])`.
    Rollup(Rollup, &'e MatrixSelector),
}

impl<'e> PerSeries<'e> {
    /// The shape of `e`, through any parentheses, if it is one of these.
    pub(crate) fn of(e: &'e Expr) -> Option<Self> {
        match e {
            Expr::Paren(p) => Self::of(&p.expr),
            Expr::VectorSelector(vs) => Some(Self::Latest(vs)),
            _ => rollup::parameterless(e).map(|(f, ms)| Self::Rollup(f, ms)),
        }
    }

    /// The selector whose loaded series feed this expression.
    pub(crate) fn selector(&self) -> &'e VectorSelector {
        match self {
            Self::Latest(vs) => vs,
            Self::Rollup(_, ms) => &ms.vs,
        }
    }

    /// Whether the results carry a pending metric-name drop.
    pub(crate) fn drops_name(&self) -> bool {
        match self {
            Self::Latest(_) => false,
            Self::Rollup(f, _) => rollup::drops_name(*f),
        }
    }

    /// Calls `emit(i, value)`, in step order, for every outer step `i` of `grid` (`(first,
    /// step, count)`, see [`Query::part_grid`]) at which this expression has a value for the
    /// series with `samples`.
    pub(crate) fn each_step(
        &self,
        q: &Query,
        samples: &[Sample],
        grid: (i64, i64, usize),
        emit: impl FnMut(usize, f64),
    ) {
        match self {
            Self::Latest(vs) => latest_each_step(q, vs, samples, grid, emit),
            Self::Rollup(f, ms) => rollup::each_step(q, *f, ms, samples, grid, emit),
        }
    }

    /// The cache key of this expression's node.
    fn node(&self) -> (usize, usize) {
        match self {
            Self::Latest(vs) => (*vs as *const VectorSelector as usize, usize::MAX - 1),
            Self::Rollup(f, ms) => (*ms as *const MatrixSelector as usize, *f as usize),
        }
    }
}

/// [`PerSeries::Latest`] at every step: what `Query::select_instant` finds at each step, with
/// a cursor carried from step to step instead of a binary search per step.
fn latest_each_step(
    q: &Query,
    vs: &VectorSelector,
    samples: &[Sample],
    (first, step, steps): (i64, i64, usize),
    mut emit: impl FnMut(usize, f64),
) {
    let pinned = q.at_ms(&vs.at);
    let off = offset_ms(&vs.offset);
    let mut idx = 0;
    for i in 0..steps {
        let te = pinned.unwrap_or(first + i as i64 * step) - off;
        idx = seek(samples, idx, te);
        let Some(last) = idx.checked_sub(1).and_then(|j| samples.get(j)) else { continue };
        if last.timestamp_ms <= te - q.lookback_ms() || is_stale_marker(last.value) {
            continue;
        }
        emit(i, last.value);
    }
}

/// The value of `e` at outer step `t` of a range query, from the values of all of the query
/// part's steps, computed series by series at first use. `None` when `t` is not an outer step
/// of this part or was already taken; the caller then evaluates the step alone (same result).
pub(crate) fn step_vector(q: &Query, e: PerSeries, t: i64) -> Result<Option<Vec<Elem>>> {
    let Some((k, grid)) = q.part_step(t) else { return Ok(None) };
    let fill = || -> Result<StepValues> {
        let mut out: Vec<Vec<Elem>> = (0..grid.2).map(|_| Vec::new()).collect();
        let drop = e.drops_name();
        for series in q.series_of(e.selector()) {
            q.check_deadline()?;
            e.each_step(q, &series.samples, grid, |i, v| {
                if let Some(slot) = out.get_mut(i) {
                    slot.push(Elem::new(series.labels.clone(), v, drop));
                }
            });
        }
        Ok(out.into_iter().map(Some).collect())
    };
    q.rollup_cache(e.node(), fill, |values| values.get_mut(k).and_then(Option::take))
}
