//! Range-vector functions over windows that hold native histograms, with Prometheus 3.x's
//! semantics (`promql/functions.go`): `rate`/`increase`/`delta` and `irate`/`idelta` of
//! histograms, `sum`/`avg_over_time` of histograms, `resets`/`changes` across floats and
//! histograms, the functions that count or pick points, and the float-only functions that
//! ignore histograms with an info annotation. Windows of floats alone go to `rollup.rs`.

use std::sync::Arc;

use super::context::Context;
use super::rollup::{self, Rollup};
use crate::histogram::{detect_reset, ArithError, Combined, CounterResetHint, Histogram};
use crate::labels::{Labels, METRIC_NAME};
use crate::promql::value::Point;
use crate::sample::{HistogramSample, Sample};

/// The messages of the annotations raised here (Prometheus' wording, without the
/// `PromQL warning: ` / `PromQL info: ` prefix the annotations add).
pub(crate) mod note {
    /// A window or input holding both floats and histograms where only one kind is allowed.
    pub fn mixed_floats_histograms(name: &str) -> String {
        format!("encountered a mix of histograms and floats for metric name {name:?}")
    }
    /// Histograms with exponential and custom buckets cannot be combined.
    pub fn mixed_exponential_custom(name: &str) -> String {
        format!(
            "vector contains a mix of histograms with exponential and custom buckets schemas for metric name {name:?}"
        )
    }
    /// A counter function met a gauge histogram.
    pub fn not_counter(name: &str) -> String {
        format!("this native histogram metric is not a counter: {name:?}")
    }
    /// A gauge function met a counter histogram.
    pub fn not_gauge(name: &str) -> String {
        format!("this native histogram metric is not a gauge: {name:?}")
    }
    /// A float-only range function skipped the histograms of its window.
    pub fn ignored_in_mixed_range(name: &str) -> String {
        format!("ignored histograms in a range containing both floats and histograms for metric name {name:?}")
    }
    /// Custom bounds were intersected during `operation` (`addition`, `subtraction`,
    /// `aggregation`).
    pub fn reconciled_custom_buckets(operation: &str) -> String {
        format!("mismatched custom buckets were reconciled during {operation}")
    }
    /// Counter reset hints collided during `operation`.
    pub fn counter_reset_collision(operation: &str) -> String {
        format!("conflicting counter resets during histogram {operation}")
    }
}

/// The value of rollup `f` over one window of a series holding histograms: `floats` and
/// `hists` are the window's points (no staleness markers), `(start, end, t)` its bounds and the
/// evaluation time, `params` the scalar parameters. `None` when the series has no value.
pub(crate) fn rollup_point(
    cx: &dyn Context,
    f: Rollup,
    labels: &Labels,
    floats: &[Sample],
    hists: &[HistogramSample],
    bounds: (i64, i64, i64),
    params: &[f64],
) -> Option<Point> {
    if hists.is_empty() {
        return rollup::compute_floats(f, floats, bounds, params).map(Point::Float);
    }
    let name = labels.get(METRIC_NAME).unwrap_or("");
    use Rollup::*;
    match f {
        Rate | Increase | Delta => {
            if !floats.is_empty() {
                cx.warn(note::mixed_floats_histograms(name));
                return None;
            }
            extrapolated_histogram_rate(cx, name, hists, bounds, f != Delta, f == Rate).map(into_point)
        }
        Irate | Idelta => instant_value(cx, name, floats, hists, f == Irate),
        Resets => Some(Point::Float(count_transitions(floats, hists, true))),
        Changes => Some(Point::Float(count_transitions(floats, hists, false))),
        Sum | Avg => {
            if !floats.is_empty() {
                cx.warn(note::mixed_floats_histograms(name));
                return None;
            }
            sum_histograms(cx, name, hists, f == Avg).map(into_point)
        }
        Count => Some(Point::Float((floats.len() + hists.len()) as f64)),
        Present => Some(Point::Float(1.0)),
        Last | TsOfLast => {
            let (h, fl) = (hists.last(), floats.last());
            let hist_wins = h.is_some_and(|h| fl.is_none_or(|p| h.timestamp_ms > p.timestamp_ms));
            picked(f == TsOfLast, hist_wins, h, fl)
        }
        First | TsOfFirst => {
            let (h, fl) = (hists.first(), floats.first());
            let hist_wins = h.is_some_and(|h| fl.is_none_or(|p| h.timestamp_ms < p.timestamp_ms));
            picked(f == TsOfFirst, hist_wins, h, fl)
        }
        AbsentOverTime => None,
        Deriv | PredictLinear | DoubleExpSmoothing | Quantile | Stddev | Stdvar | Min | Max | Mad | TsOfMin
        | TsOfMax => {
            if floats.is_empty() {
                return None;
            }
            cx.info(note::ignored_in_mixed_range(name));
            rollup::compute_floats(f, floats, bounds, params).map(Point::Float)
        }
    }
}

fn into_point(h: Histogram) -> Point {
    Point::Histogram(Arc::new(h))
}

/// The point `last`/`first_over_time` pick (the histogram when `hist_wins`), or its timestamp
/// in seconds for `ts_of_*`.
fn picked(timestamp: bool, hist_wins: bool, h: Option<&HistogramSample>, f: Option<&Sample>) -> Option<Point> {
    if hist_wins {
        let h = h?;
        return Some(if timestamp {
            Point::Float(h.timestamp_ms as f64 / 1e3)
        } else {
            Point::Histogram(Arc::clone(&h.histogram))
        });
    }
    let f = f?;
    Some(Point::Float(if timestamp { f.timestamp_ms as f64 / 1e3 } else { f.value }))
}

/// Adds `other` into `acc`, raising Prometheus' annotations; `false` (after a warning) when
/// the two cannot be added.
pub(crate) fn add_noting(
    cx: &dyn Context,
    name: &str,
    acc: &mut Histogram,
    other: &Histogram,
    operation: &str,
) -> bool {
    noted(cx, name, acc.add(other), operation)
}

/// Raises the annotations of an addition or subtraction of histograms (`operation`) that
/// returned `combined`; `false` (after a warning) when it failed.
pub(crate) fn noted(cx: &dyn Context, name: &str, combined: Result<Combined, ArithError>, operation: &str) -> bool {
    match combined {
        Ok(c) => {
            if c.custom_bounds_reconciled {
                cx.info(note::reconciled_custom_buckets(operation));
            }
            true
        }
        Err(_) => {
            cx.warn(note::mixed_exponential_custom(name));
            false
        }
    }
}

/// `sum_over_time` (or with `average` `avg_over_time`) of histograms; a collision of `CounterReset` and `NotCounterReset` hints
/// among them raises a warning.
fn sum_histograms(cx: &dyn Context, name: &str, hists: &[HistogramSample], average: bool) -> Option<Histogram> {
    let (first, rest) = hists.split_first()?;
    let mut sum = super::native_aggr::Running::new(&first.histogram, average);
    let (mut reset, mut not_reset) = (false, false);
    for h in hists {
        match h.histogram.counter_reset_hint {
            CounterResetHint::CounterReset => reset = true,
            CounterResetHint::NotCounterReset => not_reset = true,
            _ => {}
        }
    }
    for h in rest {
        if !sum.add(cx, name, &h.histogram, "aggregation") {
            return None;
        }
    }
    if reset && not_reset {
        cx.warn(note::counter_reset_collision("aggregation"));
    }
    Some(sum.finish())
}

/// `resets` (`resets = true`) or `changes` over a window mixing floats and histograms: a
/// switch between a float and a histogram counts as both.
pub(crate) fn count_transitions(floats: &[Sample], hists: &[HistogramSample], resets: bool) -> f64 {
    enum P<'a> {
        F(f64),
        H(&'a Histogram),
    }
    let (mut i, mut j) = (0, 0);
    let mut prev: Option<P> = None;
    let mut n = 0usize;
    loop {
        let cur = match (floats.get(i), hists.get(j)) {
            (Some(f), Some(h)) if f.timestamp_ms < h.timestamp_ms => {
                i += 1;
                P::F(f.value)
            }
            (_, Some(h)) => {
                j += 1;
                P::H(&h.histogram)
            }
            (Some(f), None) => {
                i += 1;
                P::F(f.value)
            }
            (None, None) => break,
        };
        let counted = match (&prev, &cur) {
            (None, _) => false,
            (Some(P::F(a)), P::F(b)) if resets => b < a,
            (Some(P::F(a)), P::F(b)) => !(a == b || (a.is_nan() && b.is_nan())),
            (Some(P::H(a)), P::H(b)) if resets => detect_reset(a, b),
            (Some(P::H(a)), P::H(b)) => !b.equals(a),
            _ => true,
        };
        n += usize::from(counted);
        prev = Some(cur);
    }
    n as f64
}

/// `irate` (`is_rate`) and `idelta` from the last two points of the window, of either kind.
fn instant_value(
    cx: &dyn Context,
    name: &str,
    floats: &[Sample],
    hists: &[HistogramSample],
    is_rate: bool,
) -> Option<Point> {
    let mut last: Vec<(i64, Point)> = floats
        .iter()
        .rev()
        .take(2)
        .map(|p| (p.timestamp_ms, Point::Float(p.value)))
        .chain(hists.iter().rev().take(2).map(|h| (h.timestamp_ms, Point::Histogram(Arc::clone(&h.histogram)))))
        .collect();
    last.sort_by_key(|(t, _)| *t);
    let n = last.len();
    if n < 2 {
        return None;
    }
    let (t0, p0) = last.get(n - 2)?.clone();
    let (t1, p1) = last.get(n - 1)?.clone();
    let interval = t1 - t0;
    if interval == 0 {
        return None;
    }
    let seconds = interval as f64 / 1e3;
    match (p0, p1) {
        (Point::Float(a), Point::Float(b)) => {
            let v = if is_rate && b < a { b } else { b - a };
            Some(Point::Float(if is_rate { v / seconds } else { v }))
        }
        (Point::Histogram(a), Point::Histogram(b)) => {
            let gauge = |h: &Histogram| h.counter_reset_hint == CounterResetHint::Gauge;
            if is_rate && (gauge(&a) || gauge(&b)) {
                cx.warn(note::not_counter(name));
            }
            let both_gauges = gauge(&a) && gauge(&b);
            if !is_rate && !both_gauges {
                cx.warn(note::not_gauge(name));
            }
            let mut out = (*b).clone();
            if !is_rate || !detect_reset(&a, &b) {
                match out.sub(&a) {
                    Err(ArithError::IncompatibleSchema) => {
                        cx.warn(note::mixed_exponential_custom(name));
                        return None;
                    }
                    Err(_) => return None,
                    Ok(c) if c.custom_bounds_reconciled => cx.info(note::reconciled_custom_buckets("subtraction")),
                    Ok(_) => {}
                }
            }
            out.counter_reset_hint = CounterResetHint::Gauge;
            out.compact(0);
            if is_rate {
                out.div(seconds);
            }
            Some(into_point(out))
        }
        _ => {
            cx.warn(note::mixed_floats_histograms(name));
            None
        }
    }
}

/// The change of the histograms over the window (`histogramRate` in Prometheus), counter
/// resets accounted for when `counter`: the last histogram minus the first, plus every
/// histogram before a reset. `None` (after a warning) when the histograms cannot be combined.
fn histogram_change(cx: &dyn Context, name: &str, hists: &[HistogramSample], counter: bool) -> Option<Histogram> {
    let first = &hists.first()?.histogram;
    let last = &hists.last()?.histogram;
    let gauge = |h: &Histogram| h.counter_reset_hint == CounterResetHint::Gauge;
    if counter && (gauge(first) || gauge(last)) {
        cx.warn(note::not_counter(name));
    }
    let mut prev: Histogram = (**first).clone();
    if counter {
        if let Some(second) = hists.get(1).map(|h| &h.histogram) {
            if detect_reset(&prev, second) {
                prev = Histogram {
                    schema: second.schema,
                    custom_values: second.custom_values.clone(),
                    ..Histogram::default()
                };
            }
        }
    }
    let custom = prev.uses_custom_buckets();
    if last.uses_custom_buckets() != custom {
        cx.warn(note::mixed_exponential_custom(name));
        return None;
    }
    let mut min_schema = last.schema.min(prev.schema);
    for mid in hists.iter().skip(1).take(hists.len().saturating_sub(2)) {
        if !counter {
            continue;
        }
        if gauge(&mid.histogram) {
            cx.warn(note::not_counter(name));
        }
        min_schema = min_schema.min(mid.histogram.schema);
        if mid.histogram.uses_custom_buckets() != custom {
            cx.warn(note::mixed_exponential_custom(name));
            return None;
        }
    }
    let mut h = (**last).clone();
    if !custom && min_schema < h.schema && h.reduce_resolution(min_schema).is_err() {
        return None;
    }
    match h.sub(&prev) {
        Err(_) => {
            cx.warn(note::mixed_exponential_custom(name));
            return None;
        }
        Ok(c) if c.custom_bounds_reconciled => cx.info(note::reconciled_custom_buckets("subtraction")),
        Ok(_) => {}
    }
    if counter {
        for (i, pair) in hists.windows(2).enumerate() {
            let [a, b] = pair else { continue };
            let before = if i == 0 { &prev } else { &*a.histogram };
            if detect_reset(before, &b.histogram) {
                match h.add(before) {
                    Err(_) => {
                        cx.warn(note::mixed_exponential_custom(name));
                        return None;
                    }
                    Ok(c) if c.custom_bounds_reconciled => cx.info(note::reconciled_custom_buckets("addition")),
                    Ok(_) => {}
                }
            }
        }
    } else if !(gauge(first) && gauge(last)) {
        cx.warn(note::not_gauge(name));
    }
    h.counter_reset_hint = CounterResetHint::Gauge;
    h.compact(0);
    Some(h)
}

/// `rate` (`is_rate`), `increase` (`counter`) or `delta` of the histograms of a window
/// `(start, end]`, extrapolated as floats are (Prometheus' `extrapolatedRate`), the zero point
/// of a counter worked out from the counts.
fn extrapolated_histogram_rate(
    cx: &dyn Context,
    name: &str,
    hists: &[HistogramSample],
    (start, end, _): (i64, i64, i64),
    counter: bool,
    is_rate: bool,
) -> Option<Histogram> {
    if hists.len() < 2 {
        return None;
    }
    let mut result = histogram_change(cx, name, hists, counter)?;
    let (first, last) = (hists.first()?, hists.last()?);
    let mut to_start = (first.timestamp_ms - start) as f64 / 1e3;
    let mut to_end = (end - last.timestamp_ms) as f64 / 1e3;
    let sampled = (last.timestamp_ms - first.timestamp_ms) as f64 / 1e3;
    let avg_step = sampled / (hists.len() - 1) as f64;
    let threshold = avg_step * 1.1;
    if to_start >= threshold {
        to_start = avg_step / 2.0;
    }
    if counter && result.count > 0.0 && first.histogram.count >= 0.0 {
        let to_zero = sampled * (first.histogram.count / result.count);
        if to_zero < to_start {
            to_start = to_zero;
        }
    }
    if to_end >= threshold {
        to_end = avg_step / 2.0;
    }
    let mut factor = if sampled != 0.0 { (sampled + to_start + to_end) / sampled } else { 1.0 };
    if is_rate {
        factor /= (end - start) as f64 / 1e3;
    }
    result.mul(factor);
    Some(result)
}
