//! [`FloatPoint`]: the aggregate of one series' float samples over an interval, built from the
//! samples ([`FloatPoint::of`]) or from the points of consecutive intervals
//! ([`FloatPoint::merge`]).

use crate::kahan::kahan_inc;
use crate::sample::{is_stale_marker, Sample};

/// What one series' float samples in one interval leave for PromQL: counts, the first, last
/// and second-to-last samples, a compensated sum, extremes with their times, central moments
/// (values and times) and a counter record. Staleness markers are not samples here (range
/// selectors drop them); whether the interval's last raw sample was one is kept in
/// [`ends_stale`](Self::ends_stale), which is what an instant selector's lookback needs.
///
/// Fields hold for the non-stale samples `s[0..count]` of the interval, in time order:
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FloatPoint {
    /// Number of samples. 0 only in a point of staleness markers alone, whose other fields
    /// are then meaningless (and [`ends_stale`](Self::ends_stale) is set).
    pub count: u64,
    /// `s[0]`.
    pub first: Sample,
    /// `s[count - 1]`.
    pub last: Sample,
    /// `s[count - 2]`, when `count >= 2` (`irate`, `idelta`).
    pub before_last: Option<Sample>,
    /// The interval's last raw sample is a staleness marker (it then comes after `last`).
    pub ends_stale: bool,
    /// Neumaier's running sum of the values (`sum + sum_c` is the sum), in sample order:
    /// within one interval the same two numbers as PromQL's `sum_over_time` computes.
    pub sum: f64,
    /// The compensation of [`sum`](Self::sum).
    pub sum_c: f64,
    /// The least value, NaN only when every value is NaN (`min_over_time`: the first of equal
    /// minima).
    pub min: f64,
    /// Time of the last sample holding the least value (`ts_of_min_over_time`).
    pub min_ts: i64,
    /// The greatest value, NaN only when every value is NaN (`max_over_time`).
    pub max: f64,
    /// Time of the last sample holding the greatest value (`ts_of_max_over_time`).
    pub max_ts: i64,
    /// Sum of squared deviations from the mean of the values (Welford's `M2`: `stdvar` is
    /// `m2 / count`).
    pub m2: f64,
    /// Sum of the samples' timestamps, in ms (exact: their mean is `x_sum_ms / count`).
    pub x_sum_ms: i128,
    /// Sum of squared deviations of the timestamps from their mean, in s² (`deriv`).
    pub sxx: f64,
    /// Sum of products of the timestamps' deviations (s) and the values' deviations from
    /// their means (`deriv`, `predict_linear`).
    pub sxy: f64,
    /// Every value equals the first (and the first is not NaN, unless it is alone): the
    /// least-squares fit is flat, as PromQL's shortcut finds it.
    pub constant: bool,
    /// Number of `s[i] < s[i - 1]` (`resets`).
    pub resets: u64,
    /// Sum of `s[i - 1]` over those `i`: what a counter lost at its resets (`rate`, `increase`
    /// add it to `last - first`).
    pub reset_sum: f64,
    /// Number of `s[i] != s[i - 1]`, two NaN counting as equal (`changes`).
    pub changes: u64,
}

impl FloatPoint {
    /// The point of the raw samples `raw` of one interval (time order, staleness markers
    /// included); `None` when `raw` is empty.
    pub fn of(raw: &[Sample]) -> Option<FloatPoint> {
        let ends_stale = is_stale_marker(raw.last()?.value);
        let mut values = raw.iter().filter(|s| !is_stale_marker(s.value));
        let Some(&first) = values.next() else {
            return Some(Self::stale_only());
        };
        let mut p = FloatPoint {
            count: 1,
            first,
            last: first,
            before_last: None,
            ends_stale,
            sum: 0.0,
            sum_c: 0.0,
            min: first.value,
            min_ts: first.timestamp_ms,
            max: first.value,
            max_ts: first.timestamp_ms,
            m2: 0.0,
            x_sum_ms: 0,
            sxx: 0.0,
            sxy: 0.0,
            constant: true,
            resets: 0,
            reset_sum: 0.0,
            changes: 0,
        };
        (p.sum, p.sum_c) = kahan_inc(first.value, 0.0, 0.0);
        // Welford's mean and M2 with compensated accumulators, as PromQL's `variance`.
        let (mut mean, mut c_mean, mut aux, mut c_aux) = (0.0f64, 0.0f64, 0.0f64, 0.0f64);
        welford(first.value, 1.0, (&mut mean, &mut c_mean), (&mut aux, &mut c_aux));
        let mut x_sum = i128::from(first.timestamp_ms);
        for &s in values {
            let (prev, v) = (p.last.value, s.value);
            p.count += 1;
            if v < prev {
                p.resets += 1;
                p.reset_sum += prev;
            }
            if !(v == prev || (v.is_nan() && prev.is_nan())) {
                p.changes += 1;
            }
            if p.constant && v != p.first.value {
                p.constant = false;
            }
            (p.sum, p.sum_c) = kahan_inc(v, p.sum, p.sum_c);
            if v < p.min || p.min.is_nan() {
                p.min = v;
            }
            if p.min.is_nan() || (!v.is_nan() && v <= p.min) {
                p.min_ts = s.timestamp_ms;
            }
            if v > p.max || p.max.is_nan() {
                p.max = v;
            }
            if p.max.is_nan() || (!v.is_nan() && v >= p.max) {
                p.max_ts = s.timestamp_ms;
            }
            welford(v, p.count as f64, (&mut mean, &mut c_mean), (&mut aux, &mut c_aux));
            x_sum += i128::from(s.timestamp_ms);
            p.before_last = Some(p.last);
            p.last = s;
        }
        p.m2 = aux + c_aux;
        p.x_sum_ms = x_sum;
        // Second pass for the co-moments, about the exact means.
        let y_mean = p.mean();
        for s in raw.iter().filter(|s| !is_stale_marker(s.value)) {
            let dx = (s.timestamp_ms as f64 - p.x_mean_ms()) / 1e3;
            p.sxx += dx * dx;
            p.sxy += dx * (s.value - y_mean);
        }
        Some(p)
    }

    /// A point whose interval held staleness markers only.
    pub fn stale_only() -> FloatPoint {
        let nothing = Sample::new(0, f64::NAN);
        FloatPoint {
            count: 0,
            first: nothing,
            last: nothing,
            before_last: None,
            ends_stale: true,
            sum: 0.0,
            sum_c: 0.0,
            min: f64::NAN,
            min_ts: 0,
            max: f64::NAN,
            max_ts: 0,
            m2: 0.0,
            x_sum_ms: 0,
            sxx: 0.0,
            sxy: 0.0,
            constant: true,
            resets: 0,
            reset_sum: 0.0,
            changes: 0,
        }
    }

    /// The point of this point's interval followed by `later`'s: every sample of `later`
    /// must come after every sample of `self`.
    #[must_use]
    pub fn merge(&self, later: &FloatPoint) -> FloatPoint {
        let (a, b) = (self, later);
        if b.count == 0 {
            return FloatPoint { ends_stale: true, ..*a };
        }
        if a.count == 0 {
            return *b;
        }
        let (na, nb) = (a.count as f64, b.count as f64);
        let n = na + nb;
        let (at_seam, prev) = (b.first.value, a.last.value);
        let seam_resets = u64::from(at_seam < prev);
        let seam_changes = u64::from(!(at_seam == prev || (at_seam.is_nan() && prev.is_nan())));
        let (sum, sum_c) = kahan_inc(b.sum, a.sum, a.sum_c + b.sum_c);
        // Chan et al.'s pairwise update of the central moments.
        let dy = b.mean() - a.mean();
        let dx = (b.x_mean_ms() - a.x_mean_ms()) / 1e3;
        let weight = na * nb / n;
        FloatPoint {
            count: a.count + b.count,
            first: a.first,
            last: b.last,
            before_last: b.before_last.or(Some(a.last)),
            ends_stale: b.ends_stale,
            sum,
            sum_c,
            min: if a.min.is_nan() || b.min < a.min { b.min } else { a.min },
            min_ts: if a.min.is_nan() || b.min <= a.min { b.min_ts } else { a.min_ts },
            max: if a.max.is_nan() || b.max > a.max { b.max } else { a.max },
            max_ts: if a.max.is_nan() || b.max >= a.max { b.max_ts } else { a.max_ts },
            m2: a.m2 + b.m2 + dy * dy * weight,
            x_sum_ms: a.x_sum_ms + b.x_sum_ms,
            sxx: a.sxx + b.sxx + dx * dx * weight,
            sxy: a.sxy + b.sxy + dx * dy * weight,
            constant: a.constant && b.constant && b.first.value == a.first.value,
            resets: a.resets + b.resets + seam_resets,
            reset_sum: a.reset_sum + b.reset_sum + if seam_resets == 1 { prev } else { 0.0 },
            changes: a.changes + b.changes + seam_changes,
        }
    }

    /// The mean of the samples' timestamps, in ms.
    pub fn x_mean_ms(&self) -> f64 {
        self.x_sum_ms as f64 / self.count as f64
    }

    /// The compensated sum of the values.
    pub fn sum_value(&self) -> f64 {
        if self.sum.is_infinite() {
            self.sum
        } else {
            self.sum + self.sum_c
        }
    }

    /// The mean of the values, as PromQL's `avg_over_time` computes it when the sum stays
    /// finite (NaN for a point without samples).
    pub fn mean(&self) -> f64 {
        let n = self.count as f64;
        if self.sum.is_infinite() {
            self.sum / n
        } else {
            self.sum / n + self.sum_c / n
        }
    }
}

/// One step of Welford's update with compensated accumulators (PromQL's `variance`).
fn welford(f: f64, count: f64, (mean, c_mean): (&mut f64, &mut f64), (aux, c_aux): (&mut f64, &mut f64)) {
    let delta = f - (*mean + *c_mean);
    (*mean, *c_mean) = kahan_inc(delta / count, *mean, *c_mean);
    (*aux, *c_aux) = kahan_inc(delta * (f - (*mean + *c_mean)), *aux, *c_aux);
}
