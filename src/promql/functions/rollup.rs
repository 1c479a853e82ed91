//! Range-vector functions (`rate`, `*_over_time`, ...): one value per series window, computed
//! from the window's samples ([`compute`], over floats; `native_rollup.rs` over histograms),
//! for one step or for every step of a grid at once ([`each_step`]). The evaluator gathers the
//! windows. Registry: [`lookup`] maps a function name to its [`Rollup`].

use super::context::Context;
use super::stats::{kahan_sum, linear_regression, mean, quantile, variance};
use super::{native_extended, native_rollup};
use crate::labels::Labels;
use crate::promql::error::{EvalError, Result};
use crate::promql::extended;
use crate::promql::step::{grid_time, seek, StepWindow};
use crate::promql::value::{Elem, Point, Window};
use crate::sample::{HistogramSample, Sample};

/// A range-vector function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Rollup {
    Rate,
    Increase,
    Delta,
    Irate,
    Idelta,
    Deriv,
    PredictLinear,
    Resets,
    Changes,
    Avg,
    Min,
    Max,
    Sum,
    Count,
    Quantile,
    Stddev,
    Stdvar,
    Last,
    First,
    Present,
    Mad,
    TsOfMin,
    TsOfMax,
    TsOfLast,
    TsOfFirst,
    DoubleExpSmoothing,
    AbsentOverTime,
}

/// The registry: function name -> rollup.
pub(crate) fn lookup(name: &str) -> Option<Rollup> {
    use Rollup::*;
    Some(match name {
        "rate" => Rate,
        "increase" => Increase,
        "delta" => Delta,
        "irate" => Irate,
        "idelta" => Idelta,
        "deriv" => Deriv,
        "predict_linear" => PredictLinear,
        "resets" => Resets,
        "changes" => Changes,
        "avg_over_time" => Avg,
        "min_over_time" => Min,
        "max_over_time" => Max,
        "sum_over_time" => Sum,
        "count_over_time" => Count,
        "quantile_over_time" => Quantile,
        "stddev_over_time" => Stddev,
        "stdvar_over_time" => Stdvar,
        "last_over_time" => Last,
        "first_over_time" => First,
        "present_over_time" => Present,
        "mad_over_time" => Mad,
        "ts_of_min_over_time" => TsOfMin,
        "ts_of_max_over_time" => TsOfMax,
        "ts_of_last_over_time" => TsOfLast,
        "ts_of_first_over_time" => TsOfFirst,
        "double_exponential_smoothing" | "holt_winters" => DoubleExpSmoothing,
        "absent_over_time" => AbsentOverTime,
        _ => return None,
    })
}

/// One window of a rollup: its bounds, the evaluation time and the scalar parameters.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Span<'p> {
    /// Window `(start, end]` in ms.
    pub start: i64,
    pub end: i64,
    /// Evaluation time in ms.
    pub t: i64,
    pub params: &'p [f64],
    /// Set when no value of the window is below its predecessor or below zero, so the
    /// counter-reset correction of `rate` and `increase` would add nothing and can be skipped.
    /// `false` is always correct.
    monotonic: bool,
}

impl<'p> Span<'p> {
    /// The window `(start, end]` evaluated at `t`, with `params`.
    pub(crate) fn new((start, end, t): (i64, i64, i64), params: &'p [f64]) -> Self {
        Self { start, end, t, params, monotonic: false }
    }
}

/// Rollup `f` over one series' window `span`: its floats `s` and its histograms `hs` (a window
/// of floats alone is [`compute`]d; one with histograms goes to `native_rollup.rs`).
#[inline]
pub(crate) fn window_point(
    cx: &dyn Context,
    f: Rollup,
    labels: &Labels,
    (s, hs): (&[Sample], &[HistogramSample]),
    span: &Span,
) -> Option<Point> {
    if hs.is_empty() {
        return compute(f, s, span).map(Point::Float);
    }
    native_rollup::rollup_point(cx, f, labels, s, hs, (span.start, span.end, span.t), span.params)
}

/// Rollup `f` over every window of a range vector (windows of one span: a subquery's at one
/// step). The results drop the metric name unless `f` keeps it, then they drop it when the
/// window's series had a pending drop.
pub(crate) fn over_windows(cx: &dyn Context, f: Rollup, windows: Vec<Window>, span: &Span) -> Vec<Elem> {
    let keeps_name = !drops_name(f);
    let mut out = Vec::with_capacity(windows.len());
    for w in windows {
        let drop = if keeps_name { w.drop_name } else { true };
        if let Some(p) = window_point(cx, f, &w.labels, (&w.samples, &w.histograms), span) {
            out.push(Elem::of_point(w.labels, p, drop));
        }
    }
    out
}

/// Rollup `f` (one that [`extended::Modifier::refuses`] not) over one series of an anchored or
/// smoothed range selector (see `extended.rs`): `around` and `hists` are its samples and live
/// histograms read from `start - lookback` (up to `end + lookback` when `smoothed`), for the
/// window `(start, end]` at `t`.
pub(crate) fn extended_point(
    cx: &dyn Context,
    f: Rollup,
    labels: &Labels,
    (around, hists): (&[Sample], &[HistogramSample]),
    (start, end, t): (i64, i64, i64),
    smoothed: bool,
) -> Option<Point> {
    if !hists.is_empty() {
        let w = native_extended::Extended {
            start,
            end,
            smoothed,
            is_counter: f != Rollup::Delta,
            is_rate: f == Rollup::Rate,
        };
        return native_extended::rollup(cx, f, labels, around, hists, w);
    }
    let v = match f {
        Rollup::Rate => extended::rate(around, start, end, smoothed, true, true),
        Rollup::Increase => extended::rate(around, start, end, smoothed, true, false),
        Rollup::Delta => extended::rate(around, start, end, smoothed, false, false),
        _ => extended::anchored_from(around, start)
            .and_then(|from| compute(f, &around[from..], &Span::new((start, end, t), &[]))),
    };
    v.map(Point::Float)
}

/// Calls `emit(i, value)` for every step `i` of `grid` (`(first, step, count)`) at which
/// rollup `f`, with the same `params` at every step, over one series' `samples` has a value; in
/// step order. The window of each step is [`StepWindow::bounds`] of the step's time.
pub(crate) fn each_step(
    f: Rollup,
    window: StepWindow,
    params: &[f64],
    samples: &[Sample],
    grid: (i64, i64, usize),
    emit: impl FnMut(usize, f64),
) {
    // The common rollups get a loop of their own, with the computation inlined.
    match f {
        Rollup::Rate => {
            windows(window, samples, grid, (true, &[]), emit, |w, ctx| extrapolated_rate(w, ctx, true, true))
        }
        Rollup::Increase => {
            windows(window, samples, grid, (true, &[]), emit, |w, ctx| extrapolated_rate(w, ctx, true, false))
        }
        _ => windows(window, samples, grid, (false, params), emit, |w, ctx| compute(f, w, ctx)),
    }
}

/// The loop of [`each_step`]: `value` of every non-empty window, with `params`; `counter`
/// asks for [`Span::monotonic`] to be worked out.
fn windows(
    window: StepWindow,
    samples: &[Sample],
    (first, step, steps): (i64, i64, usize),
    (counter, params): (bool, &[f64]),
    mut emit: impl FnMut(usize, f64),
    value: impl Fn(&[Sample], &Span) -> Option<f64>,
) {
    // The last "fall" among the samples before `scanned`: a sample below its predecessor or
    // below zero. A window [a, b) with no fall at or after `a` is monotonic (a conservative
    // test: a window's first sample counts even when only its predecessor, outside the window,
    // was larger). Samples are scanned as windows reach them, while they are in cache.
    let (mut scanned, mut last_fall, mut prev) = (0usize, None::<usize>, f64::NEG_INFINITY);
    let (mut a, mut b) = (0, 0);
    for i in 0..steps {
        let t = grid_time(first, step, i);
        let (start, end) = window.bounds(t);
        a = seek(samples, a, start);
        b = seek(samples, b.max(a), end);
        let Some(w) = samples.get(a..b).filter(|w| !w.is_empty()) else { continue };
        let monotonic = counter && {
            for (j, p) in samples.iter().enumerate().take(b).skip(scanned) {
                if p.value < prev || p.value < 0.0 {
                    last_fall = Some(j);
                }
                prev = p.value;
            }
            scanned = scanned.max(b);
            last_fall.is_none_or(|j| j < a)
        };
        let ctx = Span { start, end, t, params, monotonic };
        if let Some(v) = value(w, &ctx) {
            emit(i, v);
        }
    }
}

/// Whether the results of `f` drop the metric name (all but `last_over_time` and
/// `first_over_time` do).
pub(crate) fn drops_name(f: Rollup) -> bool {
    !matches!(f, Rollup::Last | Rollup::First)
}

/// Whether `f` takes no parameters (the rollups [`each_step`] computes, with `predict_linear`).
pub(crate) fn parameterless_fn(f: Rollup) -> bool {
    !matches!(f, Rollup::AbsentOverTime | Rollup::Quantile | Rollup::PredictLinear | Rollup::DoubleExpSmoothing)
}

/// Checks the scalar parameters of `f`: warns about a quantile outside `[0, 1]`, refuses
/// smoothing and trend factors outside `(0, 1)`.
pub(crate) fn check_params(cx: &dyn Context, f: Rollup, params: &[f64]) -> Result<()> {
    match f {
        Rollup::Quantile => {
            let p = params.first().copied().unwrap_or(f64::NAN);
            if !(0.0..=1.0).contains(&p) {
                cx.warn(format!("quantile value should be between 0 and 1, got {}", super::stats::format_float(p)));
            }
        }
        Rollup::DoubleExpSmoothing => {
            let sf = params.first().copied().unwrap_or(f64::NAN);
            let tf = params.get(1).copied().unwrap_or(f64::NAN);
            if !(sf > 0.0 && sf < 1.0) {
                return Err(EvalError::exec(format!("invalid smoothing factor. Expected: 0 < sf < 1, got: {sf}")));
            }
            if !(tf > 0.0 && tf < 1.0) {
                return Err(EvalError::exec(format!("invalid trend factor. Expected: 0 < tf < 1, got: {tf}")));
            }
        }
        _ => {}
    }
    Ok(())
}

fn values(s: &[Sample]) -> impl Iterator<Item = f64> + Clone + '_ {
    s.iter().map(|p| p.value)
}

/// Rollup `f` over the floats `s` of a window `(start, end]` evaluated at `t`, with `params`.
pub(crate) fn compute_floats(f: Rollup, s: &[Sample], bounds: (i64, i64, i64), params: &[f64]) -> Option<f64> {
    compute(f, s, &Span::new(bounds, params))
}

/// Rollup `f` over the floats `s` of window `span`; `None` when the window has no value.
pub(crate) fn compute(f: Rollup, s: &[Sample], ctx: &Span) -> Option<f64> {
    use Rollup::*;
    let first = s.first()?;
    let last = s.last()?;
    let p0 = ctx.params.first().copied().unwrap_or(f64::NAN);
    Some(match f {
        Rate => extrapolated_rate(s, ctx, true, true)?,
        Increase => extrapolated_rate(s, ctx, true, false)?,
        Delta => extrapolated_rate(s, ctx, false, false)?,
        Irate => instant_value(s, true)?,
        Idelta => instant_value(s, false)?,
        Deriv => {
            if s.len() < 2 {
                return None;
            }
            linear_regression(s, first.timestamp_ms).0
        }
        PredictLinear => {
            if s.len() < 2 {
                return None;
            }
            let (slope, intercept) = linear_regression(s, ctx.t);
            slope * p0 + intercept
        }
        Resets => s.windows(2).filter(|w| matches!(w, [a, b] if b.value < a.value)).count() as f64,
        Changes => s
            .windows(2)
            .filter(|w| matches!(w, [a, b] if !(a.value == b.value || (a.value.is_nan() && b.value.is_nan()))))
            .count() as f64,
        Avg => mean(values(s)),
        Min => values(s).fold(first.value, |m, v| if v < m || m.is_nan() { v } else { m }),
        Max => values(s).fold(first.value, |m, v| if v > m || m.is_nan() { v } else { m }),
        Sum => kahan_sum(values(s)),
        Count => s.len() as f64,
        Quantile => quantile(p0, values(s).collect()),
        Stddev => variance(values(s)).sqrt(),
        Stdvar => variance(values(s)),
        Last => last.value,
        First => first.value,
        Present => 1.0,
        Mad => {
            let vals: Vec<f64> = values(s).collect();
            if vals.iter().any(|v| v.is_nan()) {
                return Some(f64::NAN);
            }
            let median = quantile(0.5, vals.clone());
            quantile(0.5, vals.iter().map(|v| (v - median).abs()).collect())
        }
        TsOfMin => ts_of_extreme(s, |v, m| v <= m)?,
        TsOfMax => ts_of_extreme(s, |v, m| v >= m)?,
        TsOfLast => last.timestamp_ms as f64 / 1e3,
        TsOfFirst => first.timestamp_ms as f64 / 1e3,
        DoubleExpSmoothing => double_exp_smoothing(s, p0, ctx.params.get(1).copied().unwrap_or(f64::NAN))?,
        AbsentOverTime => return None,
    })
}

/// Timestamp (seconds) of the last sample that is extreme by `better(value, best)`, NaN
/// values only chosen when there is nothing else.
fn ts_of_extreme(s: &[Sample], better: impl Fn(f64, f64) -> bool) -> Option<f64> {
    let mut best = s.first()?;
    for p in s {
        if best.value.is_nan() || (!p.value.is_nan() && better(p.value, best.value)) {
            best = p;
        }
    }
    Some(best.timestamp_ms as f64 / 1e3)
}

/// `rate`, `increase` and `delta`: the change over the window, extrapolated towards the
/// window bounds (never beyond half an average sample interval, nor below zero for counters).
#[inline(always)]
fn extrapolated_rate(s: &[Sample], ctx: &Span, is_counter: bool, is_rate: bool) -> Option<f64> {
    if s.len() < 2 {
        return None;
    }
    let (first, last) = (*s.first()?, *s.last()?);
    let mut result = last.value - first.value;
    if is_counter && !ctx.monotonic {
        let mut prev = 0.0;
        for p in s {
            if p.value < prev {
                result += prev;
            }
            prev = p.value;
        }
    }
    Some(extrapolate((first, last, s.len()), result, ctx, is_counter, is_rate))
}

/// The extrapolation of [`extrapolated_rate`] for a window of `count` (at least 2) samples
/// from `first` to `last` whose change is `result` (a counter's with its resets added back).
#[inline(always)]
pub(crate) fn extrapolate(
    (first, last, count): (Sample, Sample, usize),
    result: f64,
    ctx: &Span,
    is_counter: bool,
    is_rate: bool,
) -> f64 {
    let mut to_start = (first.timestamp_ms - ctx.start) as f64 / 1e3;
    let mut to_end = (ctx.end - last.timestamp_ms) as f64 / 1e3;
    let sampled = (last.timestamp_ms - first.timestamp_ms) as f64 / 1e3;
    let avg_step = sampled / (count - 1) as f64;
    let threshold = avg_step * 1.1;
    if to_start >= threshold {
        to_start = avg_step / 2.0;
    }
    if is_counter && result > 0.0 && first.value >= 0.0 {
        let to_zero = sampled * (first.value / result);
        if to_zero < to_start {
            to_start = to_zero;
        }
    }
    if to_end >= threshold {
        to_end = avg_step / 2.0;
    }
    let mut factor = (sampled + to_start + to_end) / sampled;
    if is_rate {
        factor /= (ctx.end - ctx.start) as f64 / 1e3;
    }
    result * factor
}

/// `irate` and `idelta`: from the last two samples.
fn instant_value(s: &[Sample], is_rate: bool) -> Option<f64> {
    let n = s.len();
    if n < 2 {
        return None;
    }
    instant(*s.get(n - 2)?, *s.get(n - 1)?, is_rate)
}

/// `irate` and `idelta` from a window's last two samples, `prev` and `last`.
pub(crate) fn instant(prev: Sample, last: Sample, is_rate: bool) -> Option<f64> {
    let mut v = if is_rate && last.value < prev.value { last.value } else { last.value - prev.value };
    let interval = last.timestamp_ms - prev.timestamp_ms;
    if interval == 0 {
        return None;
    }
    if is_rate {
        v /= interval as f64 / 1e3;
    }
    Some(v)
}

fn double_exp_smoothing(s: &[Sample], sf: f64, tf: f64) -> Option<f64> {
    if s.len() < 2 {
        return None;
    }
    let v = |i: usize| s.get(i).map(|p| p.value).unwrap_or(f64::NAN);
    let (mut s0, mut s1) = (0.0, v(0));
    let mut b = v(1) - v(0);
    for i in 1..s.len() {
        let x = sf * v(i);
        if i > 1 {
            b = tf * (s1 - s0) + (1.0 - tf) * b;
        }
        let y = (1.0 - sf) * (s1 + b);
        s0 = s1;
        s1 = x + y;
    }
    Some(s1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::promql::functions::context::Recorder;
    use crate::promql::step::between;

    fn counter() -> Vec<Sample> {
        let values = [0.0, 4.0, 9.0, 2.0, 6.0, 6.0, 11.0, 1.0, 5.0, 30.0];
        values.iter().enumerate().map(|(i, &v)| Sample::new(15_000 * (i as i64 + 1), v)).collect()
    }

    #[test]
    fn every_step_at_once_equals_each_window_alone() {
        let s = counter();
        let window = StepWindow { pinned: None, offset: 0, range: 45_000 };
        let grid = (0, 10_000, 20);
        for f in
            [Rollup::Rate, Rollup::Increase, Rollup::Delta, Rollup::Resets, Rollup::Sum, Rollup::Max, Rollup::Irate]
        {
            let mut stepped = Vec::new();
            each_step(f, window, &[], &s, grid, |i, v| stepped.push((i, v.to_bits())));
            let mut alone = Vec::new();
            for i in 0..grid.2 {
                let t = grid_time(grid.0, grid.1, i);
                let (start, end) = window.bounds(t);
                if let Some(v) = compute(f, between(&s, start, end), &Span::new((start, end, t), &[])) {
                    alone.push((i, v.to_bits()));
                }
            }
            assert_eq!(stepped, alone, "{f:?}");
        }
    }

    #[test]
    fn rollups_of_gathered_windows() {
        let cx = Recorder::default();
        let labels = Labels::from_pairs([("__name__", "c"), ("job", "j")]).unwrap();
        let windows = || vec![Window::floats(labels.clone(), counter(), false)];
        let span = Span::new((0, 150_000, 150_000), &[]);
        let out = over_windows(&cx, Rollup::Increase, windows(), &span);
        assert_eq!(out.len(), 1);
        assert!(out[0].drop_name);
        // `last_over_time` keeps the name; the window's pending drop carries over.
        let out = over_windows(&cx, Rollup::Last, windows(), &span);
        assert_eq!((out[0].value, out[0].drop_name), (30.0, false));
        // Parameters are checked before any window is computed.
        let e = check_params(&cx, Rollup::DoubleExpSmoothing, &[2.0, 0.5]).unwrap_err();
        assert!(e.to_string().contains("invalid smoothing factor"), "{e}");
        check_params(&cx, Rollup::Quantile, &[1.5]).unwrap();
        assert_eq!(
            cx.annotations.borrow().warnings(),
            ["PromQL warning: quantile value should be between 0 and 1, got 1.5"]
        );
    }
}
