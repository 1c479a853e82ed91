//! Reading a series that holds native histograms beside floats: the latest point before a time
//! and the histograms of a window. Series of floats alone never come here (their paths in
//! `eval.rs` and `grid.rs` read `Sample`s directly).
//!
//! Invariant of the inputs: floats and histograms each ascend by timestamp, and no timestamp
//! is in both (see [`SeriesSamples`](crate::sample::SeriesSamples)).

use std::sync::Arc;

use super::value::Point;
use crate::histogram::{CounterResetHint, Histogram};
use crate::sample::{is_stale_marker, HistogramSample, Sample, SeriesSamples};

/// The histograms of `h` in `(lo, hi]`.
pub(crate) fn histograms_between(h: &[HistogramSample], lo: i64, hi: i64) -> &[HistogramSample] {
    let a = h.partition_point(|p| p.timestamp_ms <= lo);
    let b = h.partition_point(|p| p.timestamp_ms <= hi).max(a);
    h.get(a..b).unwrap_or_default()
}

/// The histograms of `h` in `(lo, hi]` without stale markers (windows never hold them).
pub(crate) fn live_histograms_between(h: &[HistogramSample], lo: i64, hi: i64) -> Vec<HistogramSample> {
    histograms_between(h, lo, hi).iter().filter(|p| !p.histogram.is_stale()).cloned().collect()
}

/// The newest point of a series at or before `te` and after `te - lookback`, with its
/// timestamp; `None` when there is none or it is a stale marker (float or histogram).
pub(crate) fn latest(
    floats: &[Sample],
    histograms: &[HistogramSample],
    te: i64,
    lookback: i64,
) -> Option<(Point, i64)> {
    let f = floats.partition_point(|p| p.timestamp_ms <= te).checked_sub(1).and_then(|i| floats.get(i));
    let h = histograms.partition_point(|p| p.timestamp_ms <= te).checked_sub(1).and_then(|i| histograms.get(i));
    let (point, ts) = match (f, h) {
        (Some(f), Some(h)) if h.timestamp_ms > f.timestamp_ms => histogram_point(h)?,
        (Some(f), _) => float_point(f)?,
        (None, Some(h)) => histogram_point(h)?,
        (None, None) => return None,
    };
    (ts > te.saturating_sub(lookback)).then_some((point, ts))
}

fn float_point(f: &Sample) -> Option<(Point, i64)> {
    (!is_stale_marker(f.value)).then_some((Point::Float(f.value), f.timestamp_ms))
}

fn histogram_point(h: &HistogramSample) -> Option<(Point, i64)> {
    (!h.histogram.is_stale()).then(|| (Point::Histogram(Arc::clone(&h.histogram)), h.timestamp_ms))
}

/// A histogram as a subquery returns it: the hints `CounterReset` and `NotCounterReset`
/// become `Unknown`, since a subquery may skip samples or return one several times (as
/// Prometheus' `evalSubquery` does; resets are then detected from the counts, as for floats).
pub(crate) fn for_subquery(h: Arc<Histogram>) -> Arc<Histogram> {
    match h.counter_reset_hint {
        CounterResetHint::CounterReset | CounterResetHint::NotCounterReset => {
            let mut h = Arc::unwrap_or_clone(h);
            h.counter_reset_hint = CounterResetHint::Unknown;
            Arc::new(h)
        }
        _ => h,
    }
}

/// Removes histogram stale markers (without touching the vector when there are none).
pub(crate) fn drop_stale_histograms(s: &mut SeriesSamples) {
    if s.histograms.iter().any(|h| h.histogram.is_stale()) {
        s.histograms.retain(|h| !h.histogram.is_stale());
    }
}

/// Keeps only the newest point of `s` (float or histogram, whichever is later).
pub(crate) fn keep_newest(s: &mut SeriesSamples) {
    let newest_float = s.samples.last().map(|p| p.timestamp_ms);
    let newest_hist = s.histograms.last().map(|p| p.timestamp_ms);
    match (newest_float, newest_hist) {
        (Some(f), Some(h)) if h > f => s.samples.clear(),
        (Some(_), Some(_)) => s.histograms.clear(),
        _ => {}
    }
    let newest: Vec<Sample> = s.samples.last().copied().into_iter().collect();
    // The samples read go back for the next series read on this thread.
    crate::spare_samples::give(std::mem::replace(&mut s.samples, newest));
    let drop = s.histograms.len().saturating_sub(1);
    s.histograms.drain(..drop);
    s.histograms.shrink_to_fit();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hs(t: i64, count: f64) -> HistogramSample {
        HistogramSample { timestamp_ms: t, histogram: Arc::new(Histogram { count, ..Histogram::default() }) }
    }

    #[test]
    fn latest_picks_the_newer_kind_and_hides_stale_markers() {
        let floats = [Sample::new(10, 1.0), Sample::new(30, 3.0)];
        let hists = [hs(20, 2.0), hs(40, 4.0)];
        let at = |te| latest(&floats, &hists, te, 15).map(|(p, t)| (matches!(p, Point::Histogram(_)), t));
        assert_eq!(at(35), Some((false, 30)));
        assert_eq!(at(45), Some((true, 40)));
        assert_eq!(at(25), Some((true, 20)));
        // Out of the lookback.
        assert_eq!(at(60), None);
        let stale = [HistogramSample { timestamp_ms: 50, histogram: Arc::new(Histogram::stale()) }];
        assert!(latest(&floats, &stale, 55, 100).is_none());
        assert!(latest(&floats, &stale, 45, 100).is_some());
    }

    #[test]
    fn keep_newest_keeps_one_point() {
        let mut s = SeriesSamples {
            labels: crate::labels::Labels::empty(),
            samples: vec![Sample::new(1, 1.0), Sample::new(5, 1.0)],
            histograms: vec![hs(3, 1.0), hs(4, 1.0)],
        };
        keep_newest(&mut s);
        assert_eq!((s.samples.len(), s.histograms.len()), (1, 0));
        s.histograms.push(hs(9, 1.0));
        keep_newest(&mut s);
        assert_eq!((s.samples.len(), s.histograms.len()), (0, 1));
    }
}
