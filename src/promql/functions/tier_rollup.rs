//! Range-vector functions answered from a tier point instead of raw samples: the value of
//! rollup `f` over a window is computed from the [`FloatPoint`] its samples aggregate to (the
//! merge of the tier points that tile the window), with the same arithmetic as
//! [`rollup::compute`](super::rollup::compute) where the point holds what it needs.
//!
//! | functions | from a point |
//! |---|---|
//! | `count`, `last`, `first`, `present`, `min`, `max`, `ts_of_*`, `resets`, `changes`, `irate`, `idelta` | exact |
//! | `sum`, `avg`, `stdvar`, `stddev` over one point built from samples | exact (the point keeps PromQL's running sums; one decoded in decimal form has them rebuilt from exact integers: within rounding) |
//! | `rate`, `increase`, `delta` | exact for at most one counter reset, else within rounding (resets add in another order) |
//! | `sum`, `avg`, `stdvar`, `stddev` over merged points, `deriv`, `predict_linear` | within rounding (pairwise sums and moments) |
//! | `quantile_over_time`, `mad_over_time`, `double_exponential_smoothing` | not answered: they need every sample ([`NeedsSamples`]) |
//!
//! `absent_over_time` is not computed here: the engine reads it as `present_over_time` and
//! answers from whether that has any series (`eval/shape.rs`, `absent_over_range`).
//!
//! "Within rounding" is property-tested against the raw answer in `tier_rollup_tests.rs`.
//! Not covered here, so read from raw samples: `rate` and `increase` over series with start
//! timestamps (`start_ts.rs`), anchored and smoothed range selectors (`extended.rs`), and
//! native histograms.

use super::rollup::{extrapolate, instant, Rollup, Span};
use crate::promql::step::{grid_time, StepWindow};
use crate::tier::{Fields, FloatPoint};

/// A rollup that a tier point cannot answer: it depends on every sample's value, not on an
/// aggregate of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct NeedsSamples;

/// Whether tier points answer `f` (see the module's table).
pub(crate) fn answers(f: Rollup) -> bool {
    !matches!(f, Rollup::Quantile | Rollup::Mad | Rollup::DoubleExpSmoothing)
}

/// Rollup `f` over window `span` whose samples aggregate to `p`; `Ok(None)` when the window
/// has no value, as [`rollup::compute`](super::rollup::compute) gives for the samples.
///
/// # Errors
/// [`NeedsSamples`] for a rollup that [`answers`] not.
pub(crate) fn compute(f: Rollup, p: &FloatPoint, span: &Span) -> Result<Option<f64>, NeedsSamples> {
    use Rollup::*;
    if !answers(f) {
        return Err(NeedsSamples);
    }
    if p.count == 0 {
        return Ok(None);
    }
    let p0 = span.params.first().copied().unwrap_or(f64::NAN);
    let n = p.count as f64;
    Ok(Some(match f {
        Rate => return Ok(change(p, span, true, true)),
        Increase => return Ok(change(p, span, true, false)),
        Delta => return Ok(change(p, span, false, false)),
        Irate | Idelta => return Ok(p.before_last.and_then(|prev| instant(prev, p.last, f == Irate))),
        Deriv | PredictLinear if p.count < 2 => return Ok(None),
        Deriv => regression(p, p.first.timestamp_ms).0,
        PredictLinear => {
            let (slope, intercept) = regression(p, span.t);
            slope * p0 + intercept
        }
        Resets => p.resets as f64,
        Changes => p.changes as f64,
        Avg => p.mean(),
        Min => p.min,
        Max => p.max,
        Sum => p.sum_value(),
        Count => n,
        Stdvar => p.m2 / n,
        Stddev => (p.m2 / n).sqrt(),
        Last => p.last.value,
        First => p.first.value,
        Present => 1.0,
        TsOfMin => p.min_ts as f64 / 1e3,
        TsOfMax => p.max_ts as f64 / 1e3,
        TsOfLast => p.last.timestamp_ms as f64 / 1e3,
        TsOfFirst => p.first.timestamp_ms as f64 / 1e3,
        AbsentOverTime => return Ok(None),
        Quantile | Mad | DoubleExpSmoothing => return Err(NeedsSamples),
    }))
}

/// Whether every step of `grid` (`(first, step, count)`) reads, through `window`, a union of
/// whole intervals of `interval` ms: the window's bounds on the interval grid, and moving by
/// whole intervals from step to step. Only then do tier points answer the steps.
pub(crate) fn aligned(window: StepWindow, (first, step, _): (i64, i64, usize), interval: i64) -> bool {
    let (start, end) = window.bounds(first);
    interval > 0
        && start.rem_euclid(interval) == 0
        && end.rem_euclid(interval) == 0
        && (window.pinned.is_some() || step.rem_euclid(interval) == 0)
}

/// Calls `emit(i, value)` for every step `i` of `grid` at which rollup `f`, with `params` at
/// every step, has a value over one series whose tier points of `interval` are `points`:
/// `(end, point)` for the intervals `(end - interval, end]` holding samples, in ascending
/// order. Where `interval` is [`aligned`] with the grid and window, the same values as
/// [`rollup::each_step`](super::rollup::each_step) over the series' samples, as far as the
/// module's table says. Otherwise each step takes the intervals ending inside its window and
/// answers as over their union: the window with both ends moved back to the interval grid (the
/// approximate read of downsampled windows, see `eval/tiers.rs`).
///
/// # Errors
/// [`NeedsSamples`] for a rollup that [`answers`] not.
pub(crate) fn each_step(
    (f, params): (Rollup, &[f64]),
    window: StepWindow,
    (interval, points): (i64, &[(i64, FloatPoint)]),
    (first, step, steps): (i64, i64, usize),
    mut emit: impl FnMut(usize, f64),
) -> Result<(), NeedsSamples> {
    if !answers(f) {
        return Err(NeedsSamples);
    }
    let fields = fields_of(f);
    let snap = |ms: i64| if interval > 0 { ms.saturating_sub(ms.rem_euclid(interval)) } else { ms };
    for i in 0..steps {
        let t = grid_time(first, step, i);
        // Ends are multiples of the interval: snapping keeps the same ones inside.
        let (start, end) = window.bounds(t);
        let (start, end) = (snap(start), snap(end));
        let a = points.partition_point(|(e, _)| *e <= start);
        let b = points.partition_point(|(e, _)| *e <= end).max(a);
        let Some(((_, head), rest)) = points.get(a..b).and_then(<[_]>::split_first) else { continue };
        let mut merged = *head;
        for (_, p) in rest {
            merged.absorb(p, fields);
        }
        if let Some(v) = compute(f, &merged, &Span::new((start, end, t), params))? {
            emit(i, v);
        }
    }
    Ok(())
}

/// The fields of a merged point [`compute`] reads for `f` (see [`FloatPoint::absorb`]).
pub(crate) fn fields_of(f: Rollup) -> Fields {
    use Rollup::*;
    match f {
        Count | Last | First | Present | TsOfLast | TsOfFirst | Irate | Idelta | AbsentOverTime => Fields::Ends,
        Min | Max | TsOfMin | TsOfMax => Fields::Extremes,
        Rate | Increase | Delta | Resets | Changes => Fields::Counter,
        Sum | Avg => Fields::Sums,
        Deriv | PredictLinear | Stdvar | Stddev | Quantile | Mad | DoubleExpSmoothing => Fields::All,
    }
}

/// `rate`, `increase` and `delta` from a point: the change from its first to its last sample,
/// a counter's losses at resets added back, extrapolated as over raw samples.
fn change(p: &FloatPoint, span: &Span, is_counter: bool, is_rate: bool) -> Option<f64> {
    if p.count < 2 {
        return None;
    }
    let mut result = p.last.value - p.first.value;
    // Added only when there is something to add: `-0.0 + 0.0` would turn a negative zero
    // positive, which the sample loop never does.
    if is_counter && p.resets > 0 {
        result += p.reset_sum;
    }
    let count = usize::try_from(p.count).unwrap_or(usize::MAX);
    Some(extrapolate((p.first, p.last, count), result, span, is_counter, is_rate))
}

/// The least-squares fit of the point's samples, x in seconds relative to `origin_ms`:
/// `(slope, intercept)`, flat when every value is equal as PromQL's shortcut finds it.
fn regression(p: &FloatPoint, origin_ms: i64) -> (f64, f64) {
    if p.constant {
        if p.first.value.is_infinite() {
            return (f64::NAN, f64::NAN);
        }
        return (0.0, p.first.value);
    }
    let slope = p.sxy / p.sxx();
    let x_mean = (p.x_mean_ms() - origin_ms as f64) / 1e3;
    (slope, p.mean() - slope * x_mean)
}

#[cfg(test)]
#[path = "tier_rollup_tests.rs"]
pub(crate) mod tests;
