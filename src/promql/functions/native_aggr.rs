//! `sum` and `avg` of groups holding native histograms, with Prometheus 3.x's semantics (its
//! `aggregation` in `engine.go`): a group mixing floats and histograms has no value (a
//! warning); histograms are added with [`Histogram::add`], the average divides the sum by the
//! group's size; results are compacted; colliding counter reset hints and reconciled custom
//! bounds are annotated. The other aggregations are dispatched in `aggr.rs`.

use std::sync::Arc;

use super::context::{Context, Spot};
use super::native_rollup::{add_noting, note};
use crate::histogram::{CounterResetHint, Histogram};
use crate::labels::{Labels, METRIC_NAME};
use crate::promql::value::Elem;

/// `sum` (or `avg` when `average`) of one group that holds at least one histogram; `None`
/// when the group has no value (mixed kinds, or histograms that cannot be added).
pub(crate) fn sum_or_avg(cx: &dyn Context, average: bool, labels: Labels, elems: &[Elem]) -> Option<Elem> {
    if elems.iter().any(Elem::is_float) {
        cx.warn("encountered a mix of histograms and floats for aggregation".to_owned());
        return None;
    }
    let mut hists = elems.iter().filter_map(|e| e.hist.as_deref().map(|h| (h, &e.labels)));
    let (first, _) = hists.next()?;
    let mut running = Running::new(first, average);
    let (mut reset, mut not_reset) = (false, false);
    let mut track = |h: &Histogram| match h.counter_reset_hint {
        CounterResetHint::CounterReset => reset = true,
        CounterResetHint::NotCounterReset => not_reset = true,
        _ => {}
    };
    track(first);
    for (h, l) in hists {
        track(h);
        if !running.add(cx, l.get(METRIC_NAME).unwrap_or(""), h, "aggregation") {
            return None;
        }
    }
    let mut sum = running.finish();
    sum.compact(0);
    if reset && not_reset {
        cx.warn(note::counter_reset_collision("aggregation"));
    }
    let drop = elems.iter().any(|e| e.drop_name);
    Some(Elem::histogram(labels, Arc::new(sum), drop))
}

/// A running sum or mean of histograms.
pub(crate) enum Running {
    Sum(CompensatedSum),
    Mean(HistogramMean),
}

impl Running {
    /// A sum (or with `average` a mean) starting at `first`.
    pub(crate) fn new(first: &Histogram, average: bool) -> Self {
        if average {
            Running::Mean(HistogramMean::new(first))
        } else {
            Running::Sum(CompensatedSum::new(first))
        }
    }

    /// Adds `other`; `false` (after a warning) when it cannot be added.
    pub(crate) fn add(&mut self, cx: &dyn Context, name: &str, other: &Histogram, operation: &str) -> bool {
        match self {
            Running::Sum(s) => s.add(cx, name, other, operation),
            Running::Mean(m) => m.add(cx, name, other, operation),
        }
    }

    /// The sum or mean.
    pub(crate) fn finish(self) -> Histogram {
        match self {
            Running::Sum(s) => s.finish(),
            Running::Mean(m) => m.finish(),
        }
    }
}

/// Magnitude below which adding two histograms cannot overflow, even with the buckets merged
/// by a reduction of the schema (at most 2^12 into one).
const SAFE_MAGNITUDE: f64 = 1e300;

/// A running mean of histograms, as Prometheus' `avg` and `avg_over_time` compute it: the
/// compensated sum divided by the count at the end while the sum stays finite; once adding a
/// histogram would overflow, an incremental mean (`mean * (n-1)/n + h/n`) from then on.
pub(crate) struct HistogramMean {
    /// The sum, or once `incremental` the mean (its compensations scaled alike).
    running: CompensatedSum,
    /// Histograms seen.
    n: f64,
    incremental: bool,
}

impl HistogramMean {
    /// A mean starting at `first`.
    pub(crate) fn new(first: &Histogram) -> Self {
        Self { running: CompensatedSum::new(first), n: 1.0, incremental: false }
    }

    /// Adds `other` as [`CompensatedSum::add`] does; `false` when it cannot be added.
    pub(crate) fn add(&mut self, cx: &dyn Context, name: &str, other: &Histogram, operation: &str) -> bool {
        self.n += 1.0;
        if !self.incremental {
            let safe = |h: &Histogram| h.largest_magnitude() < SAFE_MAGNITUDE;
            if safe(&self.running.acc) && safe(other) {
                return self.running.add(cx, name, other, operation);
            }
            let mut trial = self.running.clone();
            if !trial.add(cx, name, other, operation) {
                return false;
            }
            if !trial.acc.has_overflow() {
                self.running = trial;
                return true;
            }
            self.incremental = true;
            self.running.scale(1.0 / (self.n - 1.0));
        }
        let keep = (self.n - 1.0) / self.n;
        self.running.scale(keep);
        let mut part = other.clone();
        part.div(self.n);
        self.running.add(cx, name, &part, operation)
    }

    /// The mean.
    pub(crate) fn finish(self) -> Histogram {
        let n = self.n;
        let mut out = self.running.finish();
        if !self.incremental {
            out.div(n);
        }
        out
    }
}

/// `elems` without histograms; an info names `aggregation` when some were dropped.
pub(crate) fn without_histograms(cx: &dyn Context, aggregation: &str, mut elems: Vec<Elem>) -> Vec<Elem> {
    if elems.iter().any(|e| !e.is_float()) {
        // Prometheus points at the aggregated expression, but at `topk`/`bottomk` themselves.
        let spot = if matches!(aggregation, "topk" | "bottomk") { Spot::Node } else { Spot::Subject };
        cx.info_at(spot, format!("ignored histogram in {aggregation} aggregation"));
        elems.retain(Elem::is_float);
    }
    elems
}

/// A running sum of histograms with Kahan compensation of the count, the sum and (while the
/// zero buckets agree) the zero count, as Prometheus' `KahanAdd` compensates them; buckets are
/// added plainly with [`Histogram::add`].
#[derive(Clone)]
pub(crate) struct CompensatedSum {
    acc: Histogram,
    /// Compensations of `count`, `sum` and `zero_count`.
    c: [f64; 3],
}

impl CompensatedSum {
    /// A sum starting at `first`.
    pub(crate) fn new(first: &Histogram) -> Self {
        Self { acc: first.clone(), c: [0.0; 3] }
    }

    /// Adds `other`, raising the annotations of [`add_noting`]; `false` when it cannot be added.
    pub(crate) fn add(&mut self, cx: &dyn Context, name: &str, other: &Histogram, operation: &str) -> bool {
        let before = [self.acc.count, self.acc.sum, self.acc.zero_count];
        let same_zero = self.acc.zero_threshold == other.zero_threshold;
        if !add_noting(cx, name, &mut self.acc, other, operation) {
            return false;
        }
        let incs = [other.count, other.sum, other.zero_count];
        for (k, (&inc, &sum)) in incs.iter().zip(&before).enumerate() {
            if k == 2 && !(same_zero && self.acc.zero_threshold == other.zero_threshold) {
                continue;
            }
            let (t, c) = crate::kahan::kahan_inc(inc, sum, self.c[k]);
            self.c[k] = c;
            match k {
                0 => self.acc.count = t,
                1 => self.acc.sum = t,
                _ => self.acc.zero_count = t,
            }
        }
        true
    }

    /// Multiplies the sum and its compensations by `factor`.
    fn scale(&mut self, factor: f64) {
        self.acc.mul(factor);
        self.c.iter_mut().for_each(|c| *c *= factor);
    }

    /// The compensated sum.
    pub(crate) fn finish(mut self) -> Histogram {
        let fields = [&mut self.acc.count, &mut self.acc.sum, &mut self.acc.zero_count];
        for (v, c) in fields.into_iter().zip(self.c) {
            if !v.is_infinite() {
                *v += c;
            }
        }
        self.acc
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::promql::functions::context::Recorder;

    #[test]
    fn compensated_sum_keeps_small_terms() {
        let cx = Recorder::default();
        let h = |sum: f64| Histogram { sum, count: 1.0, ..Histogram::default() };
        let mut s = CompensatedSum::new(&h(1e100));
        for x in [1.0, -1e100] {
            assert!(s.add(&cx, "x", &h(x), "aggregation"));
        }
        let got = s.finish();
        // Plain addition loses the 1 (1e100 + 1 == 1e100).
        assert_eq!(got.sum, 1.0);
        assert_eq!(got.count, 3.0);
    }

    #[test]
    fn mean_turns_incremental_where_the_sum_would_overflow() {
        let cx = Recorder::default();
        let h = |count: f64| Histogram { count, sum: 3.0, ..Histogram::default() };
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-12 * b.abs();

        let mut plain = HistogramMean::new(&h(1.0));
        for c in [2.0, 6.0] {
            assert!(plain.add(&cx, "x", &h(c), "aggregation"));
        }
        let got = plain.finish();
        assert_eq!((got.count, got.sum), (3.0, 3.0));

        let mut big = HistogramMean::new(&h(f64::MAX));
        for c in [f64::MAX, 0.0] {
            assert!(big.add(&cx, "x", &h(c), "aggregation"));
        }
        let got = big.finish();
        assert!(close(got.count, f64::MAX / 3.0 * 2.0), "{}", got.count);
        assert!(close(got.sum, 3.0), "{}", got.sum);
    }
}
