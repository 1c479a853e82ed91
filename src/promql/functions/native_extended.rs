//! The `anchored` and `smoothed` modifiers (see `promql/extended.rs`) on series holding native
//! histograms, with Prometheus 3.x's semantics (`extendedHistogramRate`,
//! `interpolateHistograms`, `pickFirstSampleIndices` in its `functions.go`, `smoothSeries` in
//! its `engine.go`):
//!
//! - [`rollup`]: the range functions that accept the modifiers, over such a window.
//! - [`rate`]: `rate`/`increase`/`delta` over an anchored or smoothed window of histograms:
//!   the histogram at the window's end minus the one at its start (picked, or with `smoothed`
//!   interpolated), plus the value before each counter reset inside.
//! - [`smoothed_value`]: an instant `smoothed` selector's histogram, interpolated between the
//!   samples around the evaluation time.
//! - [`anchored_start`]: where `changes` and `resets` over an anchored window of floats and
//!   histograms begin.
//!
//! Inputs hold no stale markers and ascend by timestamp.

use std::sync::Arc;

use super::context::Context;
use super::native_rollup::{add_noting, count_transitions, note, noted};
use super::rollup::Rollup;
use crate::histogram::{detect_reset, ArithError, CounterResetHint, Histogram};
use crate::labels::{Labels, METRIC_NAME};
use crate::promql::value::Point;
use crate::sample::{is_stale_marker, HistogramSample, Sample};

/// An anchored or smoothed window `(start, end]` and what is computed over it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Extended {
    pub start: i64,
    pub end: i64,
    pub smoothed: bool,
    /// `rate`/`increase` (counter resets corrected) rather than `delta`.
    pub is_counter: bool,
    /// `rate`: per second of the window.
    pub is_rate: bool,
}

/// Rollup `f` over the anchored or smoothed window `w` of a series holding histograms (`floats`
/// and `hists` read from `start - lookback`, smoothed up to `end + lookback`), as
/// the module documentation describes.
pub(crate) fn rollup(
    cx: &dyn Context,
    f: Rollup,
    labels: &Labels,
    floats: &[Sample],
    hists: &[HistogramSample],
    w: Extended,
) -> Option<Point> {
    let name = labels.get(METRIC_NAME).unwrap_or("");
    let floats: Vec<Sample> = floats.iter().copied().filter(|p| !is_stale_marker(p.value)).collect();
    match f {
        Rollup::Rate | Rollup::Increase | Rollup::Delta => {
            if !floats.is_empty() {
                cx.warn(note::mixed_floats_histograms(name));
                return None;
            }
            rate(cx, name, hists, w).map(|h| Point::Histogram(Arc::new(h)))
        }
        Rollup::Changes | Rollup::Resets => {
            let (a, b) = anchored_start(&floats, hists, w.start)?;
            let counted = count_transitions(floats.get(a..)?, hists.get(b..)?, f == Rollup::Resets);
            Some(Point::Float(counted))
        }
        _ => None,
    }
}

/// `rate`, `increase` or `delta` of the histograms `h` of a series (read from `start -
/// lookback`, smoothed up to `end + lookback`); `None` (after a warning where Prometheus gives
/// one) when the window gives no value.
pub(crate) fn rate(cx: &dyn Context, name: &str, h: &[HistogramSample], w: Extended) -> Option<Histogram> {
    let mut last = h.len().checked_sub(1)?;
    let first = h.get(..last)?.partition_point(|p| p.timestamp_ms <= w.start).saturating_sub(1);
    if w.smoothed {
        last = h.get(..last)?.partition_point(|p| p.timestamp_ms < w.end);
    }
    let (hf, hl) = (h.get(first)?, h.get(last)?);
    if hl.timestamp_ms <= w.start || (w.smoothed && hf.timestamp_ms > w.end) {
        return None;
    }
    if !validate(cx, name, h.get(first..=last)?, w.is_counter) {
        return None;
    }
    let left = if w.smoothed && hf.timestamp_ms < w.start {
        interpolate(cx, hf, h.get(first + 1)?, w.start, w.is_counter)
    } else {
        Ok(Histogram::clone(&hf.histogram))
    };
    let right = match last.checked_sub(1).and_then(|p| h.get(p)) {
        Some(before) if w.smoothed && hl.timestamp_ms > w.end => interpolate(cx, before, hl, w.end, w.is_counter),
        _ => Ok(Histogram::clone(&hl.histogram)),
    };
    let (Ok(left), Ok(right)) = (left, right) else {
        cx.warn(note::mixed_exponential_custom(name));
        return None;
    };
    let not_gauge = |x: &Histogram| x.counter_reset_hint != CounterResetHint::Gauge;
    if !w.is_counter && (not_gauge(&left) || not_gauge(&right)) {
        cx.warn(note::not_gauge(name));
    }
    let mut out = right.clone();
    if !combine(cx, name, &mut out, &left, true) {
        return None;
    }
    if w.is_counter {
        let corrected = correction(cx, name, h, (first, last), (&left, &right), w)?;
        if let Some(c) = corrected {
            if !combine(cx, name, &mut out, &c, false) {
                return None;
            }
        }
    }
    if w.is_rate {
        out.div((w.end - w.start) as f64 / 1e3);
    }
    out.counter_reset_hint = CounterResetHint::Gauge;
    out.compact(0);
    Some(out)
}

/// Checks the window's histograms: `false` (after a warning) when exponential and custom
/// buckets mix; a warning for each gauge histogram in a counter function.
fn validate(cx: &dyn Context, name: &str, h: &[HistogramSample], is_counter: bool) -> bool {
    let custom = h.first().is_some_and(|p| p.histogram.uses_custom_buckets());
    for p in h {
        if p.histogram.uses_custom_buckets() != custom {
            cx.warn(note::mixed_exponential_custom(name));
            return false;
        }
        if is_counter && p.histogram.counter_reset_hint == CounterResetHint::Gauge {
            cx.warn(note::not_counter(name));
        }
    }
    true
}

/// The sum of the histograms before each counter reset strictly inside the window (the
/// samples at `first` and `last` stand for the ends `left` and `right`); `Some(None)` when
/// there is none, `None` (after a warning) when they cannot be added.
fn correction(
    cx: &dyn Context,
    name: &str,
    h: &[HistogramSample],
    (first, last): (usize, usize),
    (left, right): (&Histogram, &Histogram),
    w: Extended,
) -> Option<Option<Histogram>> {
    let mut from = first + 1;
    let mut prev = left;
    if let (Some(a), Some(b)) = (h.get(first), h.get(first + 1)) {
        // The left end was interpolated across this reset, which it already accounts for.
        if w.smoothed && a.timestamp_ms < w.start && detect_reset(&a.histogram, &b.histogram) {
            prev = &*b.histogram;
            from += 1;
        }
    }
    if from > last {
        return Some(None);
    }
    let mut sum: Option<Histogram> = None;
    let mut add = |x: &Histogram| match sum.as_mut() {
        None => {
            sum = Some(x.clone());
            true
        }
        Some(s) => combine(cx, name, s, x, false),
    };
    for p in h.get(from..last)? {
        if detect_reset(prev, &p.histogram) && !add(prev) {
            return None;
        }
        prev = &*p.histogram;
    }
    if detect_reset(prev, right) && !add(prev) {
        return None;
    }
    Some(sum)
}

/// Adds (or with `subtract` subtracts) `other` into `acc`, raising Prometheus' annotations;
/// `false` (after a warning) when they cannot be combined.
fn combine(cx: &dyn Context, name: &str, acc: &mut Histogram, other: &Histogram, subtract: bool) -> bool {
    if subtract {
        noted(cx, name, acc.sub(other), "subtraction")
    } else {
        add_noting(cx, name, acc, other, "addition")
    }
}

/// The histogram at `t` between samples `a` and `b` (`a` before `b`), linear in time; a
/// counter (`is_counter`) reset between them is taken as a restart from zero at `a`'s time.
///
/// # Errors
/// When `a` and `b` cannot be subtracted (exponential and custom buckets).
fn interpolate(
    cx: &dyn Context,
    a: &HistogramSample,
    b: &HistogramSample,
    t: i64,
    is_counter: bool,
) -> Result<Histogram, ArithError> {
    if t == a.timestamp_ms {
        return Ok(Histogram::clone(&a.histogram));
    }
    if t == b.timestamp_ms {
        return Ok(Histogram::clone(&b.histogram));
    }
    let fraction = (t - a.timestamp_ms) as f64 / (b.timestamp_ms - a.timestamp_ms) as f64;
    let mut out = Histogram::clone(&b.histogram);
    if is_counter && detect_reset(&a.histogram, &b.histogram) {
        out.mul(fraction);
        return Ok(out);
    }
    if out.sub(&a.histogram)?.custom_bounds_reconciled {
        cx.info(note::reconciled_custom_buckets("subtraction"));
    }
    out.mul(fraction);
    if out.add(&a.histogram)?.custom_bounds_reconciled {
        cx.info(note::reconciled_custom_buckets("addition"));
    }
    Ok(out)
}

/// The histogram of an instant `smoothed` selector at `te` from the series' histograms `h`
/// in `(te - lookback, te + lookback]`: the sample at `te`, else the interpolation between the
/// samples around it (a counter unless both are gauges), else the last before it (its hint
/// then unknown). `None` (after a warning when exponential and custom buckets meet) otherwise.
pub(crate) fn smoothed_value(cx: &dyn Context, name: &str, h: &[HistogramSample], te: i64) -> Option<Histogram> {
    let i = h.partition_point(|p| p.timestamp_ms < te);
    let prev = i.checked_sub(1).and_then(|j| h.get(j));
    match (prev, h.get(i)) {
        (_, Some(next)) if next.timestamp_ms == te => Some(Histogram::clone(&next.histogram)),
        (Some(prev), Some(next)) => {
            let (a, b) = (&prev.histogram, &next.histogram);
            let is_counter =
                a.counter_reset_hint != CounterResetHint::Gauge || b.counter_reset_hint != CounterResetHint::Gauge;
            if a.uses_custom_buckets() != b.uses_custom_buckets() {
                cx.warn(note::mixed_exponential_custom(name));
                return None;
            }
            interpolate(cx, prev, next, te, is_counter).map_err(|_| cx.warn(note::mixed_exponential_custom(name))).ok()
        }
        (Some(prev), None) => {
            let mut out = Histogram::clone(&prev.histogram);
            out.counter_reset_hint = CounterResetHint::Unknown;
            Some(out)
        }
        (None, _) => None,
    }
}

/// Where `changes` and `resets` over an anchored window after `start` begin in a series'
/// `floats` and `hists` (read from `start - lookback`): at the newest point at or before
/// `start`, of either kind, skipping every earlier point of both kinds. `None` when no point
/// is after `start`.
pub(crate) fn anchored_start(floats: &[Sample], hists: &[HistogramSample], start: i64) -> Option<(usize, usize)> {
    let nf = floats.partition_point(|p| p.timestamp_ms <= start);
    let nh = hists.partition_point(|p| p.timestamp_ms <= start);
    if nf >= floats.len() && nh >= hists.len() {
        return None;
    }
    let last_float = nf.checked_sub(1).and_then(|i| floats.get(i)).map(|p| p.timestamp_ms);
    let last_hist = nh.checked_sub(1).and_then(|i| hists.get(i)).map(|p| p.timestamp_ms);
    Some(match (last_float, last_hist) {
        (None, None) => (0, 0),
        (Some(tf), th) if th.is_none_or(|th| tf >= th) => (nf - 1, nh),
        _ => (nf, nh.saturating_sub(1)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hs(t: i64, count: f64) -> HistogramSample {
        let h = Histogram { schema: 0, count, sum: count, ..Histogram::default() };
        HistogramSample { timestamp_ms: t, histogram: Arc::new(h) }
    }

    fn fs(t: i64) -> Sample {
        Sample { timestamp_ms: t, value: 1.0 }
    }

    #[test]
    fn anchored_start_is_the_newest_point_at_or_before_the_start() {
        let floats = [fs(0), fs(60)];
        let hists = [hs(30, 1.0), hs(90, 2.0)];
        // Newest at or before 60 is the float at 60: the histogram at 30 is skipped.
        assert_eq!(anchored_start(&floats, &hists, 60), Some((1, 1)));
        // Newest at or before 40 is the histogram at 30: the float at 0 is skipped.
        assert_eq!(anchored_start(&floats, &hists, 40), Some((1, 0)));
        assert_eq!(anchored_start(&floats, &hists, -1), Some((0, 0)));
        assert_eq!(anchored_start(&floats, &hists, 90), None);
        assert_eq!(anchored_start(&[], &[], 0), None);
    }
}
