//! Start timestamps in PromQL, as Prometheus 3 uses them: `rate`, `increase`, `irate` and
//! `resets` on a range selector treat a sample whose start timestamp lies after the previous
//! sample as a counter reset (a delta series, whose every sample starts where the one before it
//! was taken, adds up its samples), and `rate`/`increase` assume a zero at the first sample's
//! start timestamp, when it lies inside the window, instead of extrapolating towards the
//! window's start; `start_timestamp(v)` returns the start timestamp of each series' current
//! sample. Only series read straight from a selector carry them: a subquery, or any other
//! expression, cuts them off. Series without start timestamps take the usual paths.

use std::collections::HashMap;
use std::sync::Arc;

use super::context::Context;
use super::native_rollup;
use super::rollup::Rollup;
use crate::histogram::{detect_reset, ArithError, CounterResetHint, Histogram};
use crate::labels::{Labels, METRIC_NAME};
use crate::promql::value::{Elem, Point};
use crate::sample::{HistogramSample, Sample};
use crate::storage::{start_at, StartChange};

/// Warnings about start timestamps.
pub(crate) mod note {
    /// A sample's start timestamp lies before the previous sample but is not the previous
    /// sample's start timestamp: the two overlap.
    pub fn start_time_overlap(name: &str) -> String {
        format!("sample has start time that overlaps with previous sample timestamp for metric {name:?}")
    }
}

/// Whether rollup `f` uses start timestamps.
pub(crate) fn uses_starts(f: Rollup) -> bool {
    matches!(f, Rollup::Rate | Rollup::Increase | Rollup::Irate | Rollup::Resets)
}

/// `start_timestamp(v)` of the samples `selected` from an instant selector (each with its
/// own timestamp): the start timestamp, in seconds (0 when it has none), of each series'
/// sample, from `starts`, the start timestamps of the selector's series by labels. (Of any
/// other expression, `start_timestamp` is empty: Prometheus carries start timestamps only
/// from selectors.)
pub(crate) fn start_timestamps(
    selected: Vec<(Elem, i64)>,
    starts: Option<&HashMap<Labels, Vec<StartChange>>>,
) -> Vec<Elem> {
    let out = selected.into_iter().map(|(e, ts)| {
        let st = starts.and_then(|s| s.get(&e.labels)).map_or(0, |changes| start_at(changes, ts));
        Elem::new(e.labels, st as f64 / 1e3, true)
    });
    out.collect()
}

/// Rollup `f` ([`uses_starts`]) over one series' window `(start, end]` at `t`: its floats and
/// live histograms in the window, and its start timestamps `changes`, if it has any (the
/// series of a selector of which some series have them).
pub(crate) fn rollup_point(
    cx: &dyn Context,
    f: Rollup,
    labels: &Labels,
    (floats, hists): (&[Sample], &[HistogramSample]),
    changes: Option<&[StartChange]>,
    (start, end, t): (i64, i64, i64),
) -> Option<Point> {
    // A window of one kind: floats, or histograms (a mixed one goes the usual way).
    let changes = changes.filter(|_| floats.is_empty() || hists.is_empty());
    let name = labels.get(METRIC_NAME).unwrap_or("");
    match changes {
        Some(changes) if hists.is_empty() => {
            let sts: Vec<i64> = floats.iter().map(|p| start_at(changes, p.timestamp_ms)).collect();
            float_rollup(cx, f, name, floats, &sts, (start, end)).map(Point::Float)
        }
        Some(changes) => {
            let sts: Vec<i64> = hists.iter().map(|h| start_at(changes, h.timestamp_ms)).collect();
            histogram_rollup(cx, f, name, hists, &sts, (start, end))
        }
        None if floats.is_empty() && hists.is_empty() => None,
        None => native_rollup::rollup_point(cx, f, labels, floats, hists, (start, end, t), &[]),
    }
}

/// `f` over the floats `s` of window `(start, end]` whose start timestamps are `sts` (0: none).
fn float_rollup(
    cx: &dyn Context,
    f: Rollup,
    name: &str,
    s: &[Sample],
    sts: &[i64],
    (start, end): (i64, i64),
) -> Option<f64> {
    match f {
        Rollup::Rate | Rollup::Increase => {
            let (v, overlap) = extrapolated_rate(s, sts, (start, end), f == Rollup::Rate);
            if overlap {
                cx.warn(note::start_time_overlap(name));
            }
            v
        }
        Rollup::Irate => irate(s, sts),
        Rollup::Resets => Some(resets(s, sts) as f64),
        _ => None,
    }
}

/// `f` over the histograms `hists` of window `(start, end]` whose start timestamps are `sts`.
fn histogram_rollup(
    cx: &dyn Context,
    f: Rollup,
    name: &str,
    hists: &[HistogramSample],
    sts: &[i64],
    (start, end): (i64, i64),
) -> Option<Point> {
    let into = |h: Histogram| Point::Histogram(Arc::new(h));
    match f {
        Rollup::Rate | Rollup::Increase => {
            histogram_rate(cx, name, hists, sts, (start, end), f == Rollup::Rate).map(into)
        }
        Rollup::Irate => histogram_irate(cx, name, hists, sts).map(into),
        Rollup::Resets => {
            let st_of = |i: usize| sts.get(i).copied().unwrap_or(0);
            let n = hists
                .windows(2)
                .enumerate()
                .filter(|(i, w)| match w {
                    [a, b] => {
                        is_reset(st_of(*i), a.timestamp_ms, st_of(i + 1), b.timestamp_ms)
                            || detect_reset(&a.histogram, &b.histogram)
                    }
                    _ => false,
                })
                .count();
            Some(Point::Float(n as f64))
        }
        _ => None,
    }
}

/// The change of counter histograms `hists` (at least two) over their window, a sample
/// restarted by its start timestamp counting as a reset (Prometheus' `histogramRate`).
fn histogram_change(cx: &dyn Context, name: &str, hists: &[HistogramSample], sts: &[i64]) -> Option<Histogram> {
    let st_of = |i: usize| sts.get(i).copied().unwrap_or(0);
    let (first, last) = (&hists.first()?.histogram, &hists.last()?.histogram);
    let gauge = |h: &Histogram| h.counter_reset_hint == CounterResetHint::Gauge;
    if gauge(first) || gauge(last) {
        cx.warn(native_rollup::note::not_counter(name));
    }
    let reset_at = |i: usize, before: &Histogram| -> bool {
        let (Some(a), Some(b)) = (hists.get(i - 1), hists.get(i)) else { return false };
        is_reset(st_of(i - 1), a.timestamp_ms, st_of(i), b.timestamp_ms) || detect_reset(before, &b.histogram)
    };
    let mut prev: Histogram = (**first).clone();
    if let Some(second) = hists.get(1).map(|h| &h.histogram) {
        if reset_at(1, &prev) {
            prev = Histogram {
                schema: second.schema,
                custom_values: second.custom_values.clone(),
                ..Histogram::default()
            };
        }
    }
    let custom = prev.uses_custom_buckets();
    if last.uses_custom_buckets() != custom {
        cx.warn(native_rollup::note::mixed_exponential_custom(name));
        return None;
    }
    let mut min_schema = last.schema.min(prev.schema);
    for mid in hists.iter().skip(1).take(hists.len().saturating_sub(2)) {
        if gauge(&mid.histogram) {
            cx.warn(native_rollup::note::not_counter(name));
        }
        min_schema = min_schema.min(mid.histogram.schema);
        if mid.histogram.uses_custom_buckets() != custom {
            cx.warn(native_rollup::note::mixed_exponential_custom(name));
            return None;
        }
    }
    let mut h = (**last).clone();
    if !custom && min_schema < h.schema && h.reduce_resolution(min_schema).is_err() {
        return None;
    }
    if !native_rollup::noted(cx, name, h.sub(&prev), "subtraction") {
        return None;
    }
    let mut overlap = false;
    for i in 1..hists.len() {
        let before = if i == 1 { &prev } else { &*hists.get(i - 1)?.histogram };
        overlap |= overlaps(st_of(i - 1), hists.get(i - 1)?.timestamp_ms, st_of(i));
        if reset_at(i, before) && !native_rollup::add_noting(cx, name, &mut h, before, "addition") {
            return None;
        }
    }
    if overlap {
        cx.warn(note::start_time_overlap(name));
    }
    h.counter_reset_hint = CounterResetHint::Gauge;
    h.compact(0);
    Some(h)
}

/// `rate` (`is_rate`) or `increase` of counter histograms with start timestamps, extrapolated as
/// [`extrapolated_rate`] does floats (the zero point from the counts).
fn histogram_rate(
    cx: &dyn Context,
    name: &str,
    hists: &[HistogramSample],
    sts: &[i64],
    (start, end): (i64, i64),
    is_rate: bool,
) -> Option<Histogram> {
    let (first, last) = (hists.first()?, hists.last()?);
    let intervals = hists.len() - 1;
    let mut result = if intervals > 0 { Some(histogram_change(cx, name, hists, sts)?) } else { None };
    let mut to_start = (first.timestamp_ms - start) as f64 / 1e3;
    let mut to_end = (end - last.timestamp_ms) as f64 / 1e3;
    let mut sampled = (last.timestamp_ms - first.timestamp_ms) as f64 / 1e3;
    let avg_step = if intervals > 0 { sampled / intervals as f64 } else { 0.0 };
    let threshold = avg_step * 1.1;
    let st0 = sts.first().copied().unwrap_or(0);
    if st0 != 0 && st0 > start && st0 < first.timestamp_ms {
        to_start = 0.0;
        sampled = (last.timestamp_ms - st0) as f64 / 1e3;
        match result.as_mut() {
            Some(r) => {
                if !native_rollup::add_noting(cx, name, r, &first.histogram, "addition") {
                    return None;
                }
            }
            None => {
                let mut h = (*first.histogram).clone();
                h.counter_reset_hint = CounterResetHint::Gauge;
                result = Some(h);
            }
        }
    } else if intervals == 0 {
        return None;
    } else {
        if to_start >= threshold {
            to_start = avg_step / 2.0;
        }
        if let Some(r) = result.as_ref().filter(|r| r.count > 0.0 && first.histogram.count >= 0.0) {
            to_start = to_start.min(sampled * (first.histogram.count / r.count));
        }
    }
    if to_end >= threshold {
        to_end = avg_step / 2.0;
    }
    let mut factor = if sampled != 0.0 { (sampled + to_start + to_end) / sampled } else { 1.0 };
    if is_rate {
        factor /= (end - start) as f64 / 1e3;
    }
    let mut r = result?;
    r.mul(factor);
    Some(r)
}

/// `irate` of the last two histograms, a start-timestamp reset counting as a reset.
fn histogram_irate(cx: &dyn Context, name: &str, hists: &[HistogramSample], sts: &[i64]) -> Option<Histogram> {
    let n = hists.len();
    let (a, b) = (hists.get(n.checked_sub(2)?)?, hists.get(n - 1)?);
    let (prev_st, st) = (sts.get(n - 2).copied().unwrap_or(0), sts.get(n - 1).copied().unwrap_or(0));
    let interval = b.timestamp_ms - a.timestamp_ms;
    if interval == 0 {
        return None;
    }
    let gauge = |h: &Histogram| h.counter_reset_hint == CounterResetHint::Gauge;
    if gauge(&a.histogram) || gauge(&b.histogram) {
        cx.warn(native_rollup::note::not_counter(name));
    }
    let mut out = (*b.histogram).clone();
    if !is_reset(prev_st, a.timestamp_ms, st, b.timestamp_ms) && !detect_reset(&a.histogram, &b.histogram) {
        match out.sub(&a.histogram) {
            Err(ArithError::IncompatibleSchema) => {
                cx.warn(native_rollup::note::mixed_exponential_custom(name));
                return None;
            }
            Err(_) => return None,
            Ok(c) if c.custom_bounds_reconciled => {
                cx.info(native_rollup::note::reconciled_custom_buckets("subtraction"))
            }
            Ok(_) => {}
        }
    }
    out.counter_reset_hint = CounterResetHint::Gauge;
    out.compact(0);
    out.div(interval as f64 / 1e3);
    Some(out)
}

/// Whether a sample at `t` starting at `st` restarted the counter after the sample at
/// `prev_t` starting at `prev_st` (0: no start timestamp). A start after the previous sample is
/// a reset; one at the previous sample is a reset only when that sample had a start timestamp
/// of its own before it (a delta series), not when it had none or its own time (OpenTelemetry's
/// cumulative series of unknown start); a start at or after `t` itself is not valid.
pub(crate) fn is_reset(prev_st: i64, prev_t: i64, st: i64, t: i64) -> bool {
    if st == 0 || st >= t || st < prev_t {
        return false;
    }
    if st > prev_t {
        return true;
    }
    prev_st != 0 && prev_st < prev_t
}

/// Whether a sample starting at `st` overlaps the previous one (taken at `prev_t`, starting at
/// `prev_st`): it starts before it and not where it started.
pub(crate) fn overlaps(prev_st: i64, prev_t: i64, st: i64) -> bool {
    st != 0 && st < prev_t && st != prev_st
}

/// `rate` (`is_rate`) or `increase` of counter samples `s` with start timestamps `sts`, and
/// whether some sample overlaps its predecessor.
pub(crate) fn extrapolated_rate(
    s: &[Sample],
    sts: &[i64],
    (start, end): (i64, i64),
    is_rate: bool,
) -> (Option<f64>, bool) {
    let (Some(first), Some(last)) = (s.first(), s.last()) else { return (None, false) };
    let st_of = |i: usize| sts.get(i).copied().unwrap_or(0);
    let mut result = last.value - first.value;
    let mut overlap = false;
    for (i, w) in s.windows(2).enumerate() {
        let [prev, cur] = w else { continue };
        overlap |= overlaps(st_of(i), prev.timestamp_ms, st_of(i + 1));
        if cur.value < prev.value || is_reset(st_of(i), prev.timestamp_ms, st_of(i + 1), cur.timestamp_ms) {
            result += prev.value;
        }
    }
    let intervals = s.len() - 1;
    let mut to_start = (first.timestamp_ms - start) as f64 / 1e3;
    let mut to_end = (end - last.timestamp_ms) as f64 / 1e3;
    let mut sampled = (last.timestamp_ms - first.timestamp_ms) as f64 / 1e3;
    let avg_step = if intervals > 0 { sampled / intervals as f64 } else { 0.0 };
    let threshold = avg_step * 1.1;
    let st0 = st_of(0);
    if st0 != 0 && st0 > start && st0 < first.timestamp_ms {
        // A zero at the first sample's start, inside the window: no extrapolation to the left.
        to_start = 0.0;
        sampled = (last.timestamp_ms - st0) as f64 / 1e3;
        result += first.value;
    } else if intervals == 0 {
        return (None, overlap);
    } else {
        if to_start >= threshold {
            to_start = avg_step / 2.0;
        }
        if result > 0.0 && first.value >= 0.0 {
            to_start = to_start.min(sampled * (first.value / result));
        }
    }
    if to_end >= threshold {
        to_end = avg_step / 2.0;
    }
    let mut factor = if sampled != 0.0 { (sampled + to_start + to_end) / sampled } else { 1.0 };
    if is_rate {
        factor /= (end - start) as f64 / 1e3;
    }
    (Some(result * factor), overlap)
}

/// `irate` from the last two samples of `s`, a start-timestamp reset counting as a reset.
pub(crate) fn irate(s: &[Sample], sts: &[i64]) -> Option<f64> {
    let n = s.len();
    let (prev, last) = (s.get(n.checked_sub(2)?)?, s.get(n - 1)?);
    let (prev_st, st) = (sts.get(n - 2).copied().unwrap_or(0), sts.get(n - 1).copied().unwrap_or(0));
    let interval = last.timestamp_ms - prev.timestamp_ms;
    if interval == 0 {
        return None;
    }
    let reset = last.value < prev.value || is_reset(prev_st, prev.timestamp_ms, st, last.timestamp_ms);
    let v = if reset { last.value } else { last.value - prev.value };
    Some(v / (interval as f64 / 1e3))
}

/// `resets`: samples below their predecessor or restarted by their start timestamp.
pub(crate) fn resets(s: &[Sample], sts: &[i64]) -> usize {
    let st_of = |i: usize| sts.get(i).copied().unwrap_or(0);
    s.windows(2)
        .enumerate()
        .filter(|(i, w)| match w {
            [a, b] => b.value < a.value || is_reset(st_of(*i), a.timestamp_ms, st_of(i + 1), b.timestamp_ms),
            _ => false,
        })
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn samples(points: &[(i64, f64)]) -> Vec<Sample> {
        points.iter().map(|&(t, v)| Sample::new(t, v)).collect()
    }

    const M: i64 = 60_000;

    #[test]
    fn a_start_after_the_previous_sample_is_a_reset() {
        // Cumulative with a known start: the start stays put, no reset.
        assert!(!is_reset(30, 2 * M, 30, 3 * M));
        // Restarted between the two samples.
        assert!(is_reset(30, 2 * M, 2 * M + 1, 3 * M));
        // Delta (each sample starts at the previous one, which had a start of its own).
        assert!(is_reset(M, 2 * M, 2 * M, 3 * M));
        // OpenTelemetry's unknown start: the previous sample had none, or its own time.
        assert!(!is_reset(0, 2 * M, 2 * M, 3 * M));
        assert!(!is_reset(2 * M, 2 * M, 2 * M, 3 * M));
        // An invalid previous start (after its sample), and an invalid current one.
        assert!(!is_reset(3 * M, 2 * M, 2 * M, 3 * M));
        assert!(!is_reset(M, 2 * M, 3 * M, 3 * M));
    }

    #[test]
    fn increase_of_a_delta_series_adds_its_samples() {
        // 60 every minute, each sample covering the minute before it: 5 samples in (5m, 10m].
        let s = samples(&[(6 * M, 60.0), (7 * M, 60.0), (8 * M, 60.0), (9 * M, 60.0), (10 * M, 60.0)]);
        let sts: Vec<i64> = s.iter().map(|p| p.timestamp_ms - M).collect();
        // The first start (5m) is the window's (open) start: extrapolated, 240 over 4 minutes
        // to 5 minutes.
        let (v, overlap) = extrapolated_rate(&s, &sts, (5 * M, 10 * M), false);
        assert_eq!(v, Some(300.0));
        assert!(!overlap);
        let (v, _) = extrapolated_rate(&s, &sts, (5 * M, 10 * M), true);
        assert_eq!(v, Some(1.0));
        assert_eq!(irate(&s, &sts), Some(1.0));
        assert_eq!(resets(&s, &sts), 4);
        // Without start timestamps it is a flat counter.
        assert_eq!(extrapolated_rate(&s, &[], (5 * M, 10 * M), false).0, Some(0.0));
    }

    #[test]
    fn a_start_inside_the_window_replaces_extrapolation_to_the_left() {
        // Samples 1..5 at 2m..6m, started at 1m30s; window (1m, 6m].
        let s = samples(&[(2 * M, 1.0), (3 * M, 2.0), (4 * M, 3.0), (5 * M, 4.0), (6 * M, 5.0)]);
        let sts = vec![90_000; 5];
        assert_eq!(extrapolated_rate(&s, &sts, (M, 6 * M), false).0, Some(5.0));
        // One sample is enough then: 3 at 4m started at 2m30s, window (1m, 6m]: no
        // extrapolation to the right either.
        let one = samples(&[(4 * M, 3.0)]);
        assert_eq!(extrapolated_rate(&one, &[150_000], (M, 6 * M), false).0, Some(3.0));
        assert_eq!(extrapolated_rate(&one, &[], (M, 6 * M), false).0, None);
    }

    #[test]
    fn resets_by_start_timestamp_and_by_value_add_up() {
        // 5 at 2m (started 1m), 5 at 3m (restarted at 2m59s), 2 at 4m (a drop); window (0, 5m].
        let s = samples(&[(2 * M, 5.0), (3 * M, 5.0), (4 * M, 2.0)]);
        let sts = vec![M, 3 * M - 1_000, 0];
        // 2 - 5 + 5 + 5, plus the first sample from its start at 1m: 12 over 3 minutes,
        // extrapolated by a minute to the right: 16.
        assert_eq!(extrapolated_rate(&s, &sts, (0, 5 * M), false).0, Some(16.0));
        assert_eq!(resets(&s, &sts), 2);
    }

    #[test]
    fn overlapping_starts_are_reported() {
        assert!(overlaps(M, 3 * M, M + 1));
        assert!(!overlaps(M, 3 * M, M));
        assert!(!overlaps(M, 3 * M, 3 * M));
        assert!(!overlaps(M, 3 * M, 0));
        let s = samples(&[(2 * M, 60.0), (3 * M, 120.0), (4 * M, 180.0)]);
        let sts = vec![0, 0, M];
        assert!(extrapolated_rate(&s, &sts, (M, 4 * M), true).1);
    }
}
