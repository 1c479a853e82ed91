//! PromQL's histogram trim operators of Prometheus 3.x: `h </ x` keeps the observations below
//! `x`, `h >/ x` those above it (`FloatHistogram.TrimBuckets` in Prometheus).
//!
//! Each populated bucket is kept whole when it lies entirely on the kept side, emptied when it
//! lies entirely on the other side, and, when it contains `x`, keeps the share of its count on
//! the kept side:
//!
//! | bucket                                   | share on the kept side                          |
//! |------------------------------------------|-------------------------------------------------|
//! | exponential (schemas -4..=8)             | exponential: linear in the log of the value     |
//! | custom (schema -53)                      | linear                                          |
//! | the zero bucket                          | linear, over `[0, t]` (`[-t, 0]`) when only positive (negative) buckets are populated |
//! | a bucket reaching ±Inf                   | see `infinite_bucket`                           |
//!
//! When anything was trimmed, the count becomes the sum of the kept counts and the sum is
//! re-estimated from them: each kept count times the midpoint of its kept interval (geometric
//! for exponential buckets, arithmetic otherwise). Otherwise the histogram is unchanged.

use super::buckets::Bucket;
use super::types::Histogram;

/// Which side of the threshold a trim keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trim {
    /// `</`: keep the observations below the threshold.
    Upper,
    /// `>/`: keep the observations above the threshold.
    Lower,
}

/// Count kept by one bucket and the midpoint its kept observations are estimated at.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Kept {
    count: f64,
    midpoint: f64,
}

impl Histogram {
    /// Trims the observations on one side of `x` (see the module documentation). The result is
    /// compacted when anything was trimmed; it is a float histogram either way.
    pub fn trim(&mut self, x: f64, trim: Trim) {
        self.integer = false;
        let linear = self.uses_custom_buckets();
        let mut totals = Totals::default();
        let positive = trim_side(self.positive_bucket_iter(), x, trim, true, linear, &mut totals);
        let negative = trim_side(self.negative_bucket_iter(), x, trim, false, linear, &mut totals);
        let has_positive = positive.iter().any(|&(_, populated)| populated);
        let has_negative = negative.iter().any(|&(_, populated)| populated);
        for (slot, (count, _)) in self.positive_buckets.iter_mut().zip(positive) {
            *slot = count;
        }
        for (slot, (count, _)) in self.negative_buckets.iter_mut().zip(negative) {
            *slot = count;
        }
        if self.zero_count > 0.0 {
            let kept = zero_bucket(self.zero_bucket(), x, trim, has_negative, has_positive);
            totals.trimmed |= kept.count != self.zero_count;
            self.zero_count = kept.count;
            totals.add(kept);
        }
        if totals.trimmed {
            self.count = totals.count;
            self.sum = totals.sum;
            self.compact(0);
        }
    }
}

/// Running totals of a trim.
#[derive(Clone, Copy, Debug, Default)]
struct Totals {
    count: f64,
    sum: f64,
    /// Some bucket lost observations.
    trimmed: bool,
}

impl Totals {
    fn add(&mut self, k: Kept) {
        self.count += k.count;
        self.sum += k.midpoint * k.count;
    }
}

/// The new count of each bucket of one side, and whether it was populated before.
fn trim_side(
    buckets: impl Iterator<Item = Bucket>,
    x: f64,
    trim: Trim,
    positive: bool,
    linear: bool,
    totals: &mut Totals,
) -> Vec<(f64, bool)> {
    buckets
        .map(|b| {
            if b.count == 0.0 {
                return (b.count, false);
            }
            let (kept, changed) = trim_bucket(&b, x, trim, positive, linear);
            totals.trimmed |= changed;
            totals.add(kept);
            (kept.count, true)
        })
        .collect()
}

/// What one populated bucket keeps, and whether that differs from its count.
fn trim_bucket(b: &Bucket, x: f64, trim: Trim, positive: bool, linear: bool) -> (Kept, bool) {
    let (whole, split) = match trim {
        Trim::Upper => (b.upper <= x, b.lower < x),
        Trim::Lower => (b.lower >= x, b.upper > x),
    };
    if whole {
        return (Kept { count: b.count, midpoint: midpoint(b.lower, b.upper, positive, linear) }, false);
    }
    if !split {
        // Entirely on the trimmed side (or `x` is NaN).
        return (Kept { count: 0.0, midpoint: 0.0 }, true);
    }
    let kept = if b.lower == f64::NEG_INFINITY || b.upper == f64::INFINITY {
        infinite_bucket(b, x, trim)
    } else {
        let below = b.count * fraction_below(b, x, linear);
        match trim {
            Trim::Upper => Kept { count: below, midpoint: midpoint(b.lower, x, positive, linear) },
            Trim::Lower => Kept { count: b.count - below, midpoint: midpoint(x, b.upper, positive, linear) },
        }
    };
    (kept, kept.count != b.count)
}

/// The share of bucket `b` below `x`, for `x` inside it: linear, or linear in the log of the
/// absolute value (negative buckets mirrored).
fn fraction_below(b: &Bucket, x: f64, linear: bool) -> f64 {
    if linear {
        return (x - b.lower) / (b.upper - b.lower);
    }
    let (log_lower, log_upper, log_x) = (b.lower.abs().log2(), b.upper.abs().log2(), x.abs().log2());
    if x > 0.0 {
        (log_x - log_lower) / (log_upper - log_lower)
    } else {
        1.0 - (log_x - log_upper) / (log_lower - log_upper)
    }
}

/// A bucket reaching -Inf (custom buckets' first) or +Inf (their last) with `x` strictly inside
/// it. Its observations' spread is unknown, so it is kept or dropped whole, as Prometheus
/// decides per case, except that a first custom bucket with a positive finite upper bound is
/// taken to start at 0 when `x` is positive (`</`) or not negative (`>/`).
fn infinite_bucket(b: &Bucket, x: f64, trim: Trim) -> Kept {
    let finite_or_zero = |v: f64| if v.is_infinite() { 0.0 } else { v };
    let dropped = |at: f64| Kept { count: 0.0, midpoint: finite_or_zero(at) };
    if b.lower == f64::NEG_INFINITY {
        let finite_positive_upper = b.upper > 0.0 && b.upper.is_finite();
        return match trim {
            Trim::Upper if x > 0.0 && finite_positive_upper => Kept { count: b.count * x / b.upper, midpoint: x / 2.0 },
            Trim::Upper if b.upper <= 0.0 => Kept { count: b.count, midpoint: x },
            Trim::Lower if x >= 0.0 && finite_positive_upper => {
                Kept { count: b.count * (1.0 - x / b.upper), midpoint: (x + b.upper) / 2.0 }
            }
            _ => dropped(b.upper),
        };
    }
    // The upper bound is +Inf and `x` lies above the lower bound: a lower trim keeps the
    // bucket (at `x`), an upper trim drops it.
    match trim {
        Trim::Lower => Kept { count: b.count, midpoint: x },
        Trim::Upper => dropped(b.lower),
    }
}

/// What the zero bucket keeps: it is taken as `[0, t]` when only positive buckets are
/// populated, `[-t, 0]` when only negative ones are, `[-t, t]` otherwise; linear inside.
fn zero_bucket(z: Bucket, x: f64, trim: Trim, has_negative: bool, has_positive: bool) -> Kept {
    let lower = if has_positive && !has_negative { 0.0 } else { z.lower };
    let upper = if has_negative && !has_positive { 0.0 } else { z.upper };
    let none = Kept { count: 0.0, midpoint: 0.0 };
    let whole = Kept { count: z.count, midpoint: (lower + upper) / 2.0 };
    match trim {
        Trim::Upper if x <= lower => none,
        Trim::Upper if x >= upper => whole,
        Trim::Upper => Kept { count: z.count * (x - lower) / (upper - lower), midpoint: (lower + x) / 2.0 },
        Trim::Lower if x <= lower => whole,
        Trim::Lower if x >= upper => none,
        Trim::Lower => Kept { count: z.count * (upper - x) / (upper - lower), midpoint: (x + upper) / 2.0 },
    }
}

/// The point the observations kept in `[lower, upper]` are estimated at: 0 when both bounds are
/// infinite, the finite bound (halved when positive and the lower one is infinite) when one is,
/// else the arithmetic mean (`linear`) or the geometric mean, negative on the negative side.
fn midpoint(lower: f64, upper: f64, positive: bool, linear: bool) -> f64 {
    match (lower.is_infinite(), upper.is_infinite()) {
        (true, true) => 0.0,
        (true, false) if upper > 0.0 => upper / 2.0,
        (true, false) => upper,
        (false, true) => lower,
        (false, false) if linear => (lower + upper) / 2.0,
        (false, false) => {
            let geo = (lower * upper).abs().sqrt();
            if positive {
                geo
            } else {
                -geo
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::histogram::{CounterResetHint, Layout, Span};

    struct Spec<'a> {
        schema: i32,
        zero: (f64, f64),
        positive: (i32, &'a [f64]),
        negative: (i32, &'a [f64]),
        custom: &'a [f64],
        count: f64,
        sum: f64,
    }

    fn hist(s: &Spec) -> Histogram {
        let span = |(offset, b): (i32, &[f64])| {
            if b.is_empty() {
                vec![]
            } else {
                vec![Span { offset, length: b.len() as u32 }]
            }
        };
        let (ps, ns) = (span(s.positive), span(s.negative));
        let layout = Layout {
            schema: s.schema,
            zero_threshold: s.zero.1,
            positive_spans: &ps,
            negative_spans: &ns,
            custom_values: s.custom,
        };
        Histogram::from_float_counts(
            layout,
            s.count,
            s.zero.0,
            s.sum,
            s.positive.1,
            s.negative.1,
            CounterResetHint::Unknown,
        )
    }

    /// `h_test` of Prometheus' `native_histograms.test`.
    fn exponential() -> Histogram {
        hist(&Spec {
            schema: 0,
            zero: (1.0, 0.001),
            positive: (0, &[2.0, 4.0, 8.0, 16.0]),
            negative: (0, &[1.0, 2.0]),
            custom: &[],
            count: 34.0,
            sum: 123.75,
        })
    }

    fn custom(bounds: &[f64], buckets: &[f64]) -> Histogram {
        let count = buckets.iter().sum();
        hist(&Spec {
            schema: -53,
            zero: (0.0, 0.0),
            positive: (0, buckets),
            negative: (0, &[]),
            custom: bounds,
            count,
            sum: 172.5,
        })
    }

    fn trimmed(mut h: Histogram, x: f64, t: Trim) -> Histogram {
        h.trim(x, t);
        h
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * b.abs().max(1.0)
    }

    fn assert_counts(h: &Histogram, count: f64, sum: f64, zero: f64, positive: &[f64], negative: &[f64]) {
        assert!(close(h.count, count), "count {} != {count}", h.count);
        assert!(close(h.sum, sum), "sum {} != {sum}", h.sum);
        assert!(close(h.zero_count, zero), "zero count {} != {zero}", h.zero_count);
        let same = |a: &[f64], b: &[f64]| a.len() == b.len() && a.iter().zip(b).all(|(x, y)| close(*x, *y));
        assert!(same(&h.positive_buckets, positive), "positive {:?} != {positive:?}", h.positive_buckets);
        assert!(same(&h.negative_buckets, negative), "negative {:?} != {negative:?}", h.negative_buckets);
        assert!(!h.integer);
    }

    #[test]
    fn exponential_on_a_bound_keeps_whole_buckets() {
        let h = trimmed(exponential(), 2.0, Trim::Upper);
        assert_counts(&h, 10.0, 3.5355339059327373, 1.0, &[2.0, 4.0], &[1.0, 2.0]);
        let h = trimmed(exponential(), 2.0, Trim::Lower);
        assert_counts(&h, 24.0, 113.13708498984761, 0.0, &[8.0, 16.0], &[]);
        assert_eq!(h.positive_spans, vec![Span { offset: 2, length: 2 }]);
    }

    #[test]
    fn exponential_inside_a_bucket_interpolates_on_the_log_scale() {
        let h = trimmed(exponential(), std::f64::consts::SQRT_2, Trim::Lower);
        assert_counts(&h, 26.0, 116.50067065070982, 0.0, &[2.0, 8.0, 16.0], &[]);
        let h = trimmed(exponential(), -1.0, Trim::Upper);
        assert_counts(&h, 2.0, -2.8284271247461903, 0.0, &[], &[2.0]);
    }

    #[test]
    fn zero_bucket_is_split_linearly() {
        let h = trimmed(exponential(), 0.0, Trim::Upper);
        assert_counts(&h, 3.5, -3.5357839059327376, 0.5, &[], &[1.0, 2.0]);
    }

    #[test]
    fn infinite_thresholds_keep_or_drop_everything_and_nan_drops_the_buckets() {
        let h = trimmed(exponential(), f64::INFINITY, Trim::Upper);
        assert_counts(&h, 34.0, 123.75, 1.0, &[2.0, 4.0, 8.0, 16.0], &[1.0, 2.0]);
        let h = trimmed(exponential(), f64::INFINITY, Trim::Lower);
        assert_counts(&h, 0.0, 0.0, 0.0, &[], &[]);
        let h = trimmed(exponential(), f64::NAN, Trim::Upper);
        assert!(h.positive_buckets.is_empty() && h.negative_buckets.is_empty());
    }

    #[test]
    fn custom_buckets_interpolate_linearly_and_drop_the_infinite_bucket() {
        let bounds = [5.0, 10.0, 15.0, 20.0];
        let h = trimmed(custom(&bounds, &[1.0, 6.0, 4.0, 3.0, 1.0]), 13.0, Trim::Upper);
        assert_counts(&h, 9.4, 75.1, 0.0, &[1.0, 6.0, 2.4], &[]);
        let h = trimmed(custom(&bounds, &[1.0, 6.0, 4.0, 3.0, 1.0]), 13.0, Trim::Lower);
        assert_counts(&h, 5.6, 94.9, 0.0, &[1.6, 3.0, 1.0], &[]);
        let h = trimmed(custom(&bounds, &[1.0, 6.0, 4.0, 3.0, 1.0]), 50.0, Trim::Upper);
        assert_counts(&h, 14.0, 150.0, 0.0, &[1.0, 6.0, 4.0, 3.0], &[]);
    }

    #[test]
    fn first_custom_bucket_starts_at_zero_for_positive_thresholds() {
        let bounds = [-10.0, 5.0, 10.0, 15.0, 20.0];
        let h = trimmed(custom(&bounds, &[2.0, 1.0, 6.0, 4.0, 3.0, 1.0]), -4.0, Trim::Upper);
        assert_counts(&h, 2.4, -22.8, 0.0, &[2.0, 0.4], &[]);
        let h = trimmed(custom(&[0.0], &[1.0, 100.0]), -10.0, Trim::Upper);
        assert_counts(&h, 1.0, -10.0, 0.0, &[1.0], &[]);
        let h = trimmed(custom(&[5.0], &[1.0, 100.0]), 1.0, Trim::Lower);
        assert_counts(&h, 100.8, 502.4, 0.0, &[0.8, 100.0], &[]);
    }
}
