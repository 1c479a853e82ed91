//! PromQL arithmetic on histograms with Prometheus' semantics (`FloatHistogram.Add`, `Sub`,
//! `Mul`, `Div`): schemas are reconciled by reducing to the coarser one, zero thresholds by
//! widening to the larger one (moving the buckets inside it into the zero bucket), custom
//! bounds by intersecting them.
//!
//! Results differ from Prometheus' only in span structure before compaction: saltdb always
//! writes one span per run of consecutive buckets, where Prometheus may keep adjacent spans.
//! PromQL compacts every result, after which both are the same.

use std::cmp::Ordering;

use super::buckets::{bucket_bound, exponential_bound, Entries};
use super::layout::{build, reduce, ArithError};
use super::types::{is_exponential_schema, CounterResetHint, Histogram, Span};
use crate::kahan::kahan_inc;

/// What an addition or subtraction noticed (PromQL reports these as annotations).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Combined {
    /// One histogram said `CounterReset`, the other `NotCounterReset`; the result says
    /// `Unknown`.
    pub counter_reset_collision: bool,
    /// Custom bounds differed; the result has the bounds both share.
    pub custom_bounds_reconciled: bool,
}

impl Histogram {
    /// Adds `other` into `self`.
    ///
    /// # Errors
    /// [`ArithError::IncompatibleSchema`] when one has custom buckets and the other not.
    pub fn add(&mut self, other: &Histogram) -> Result<Combined, ArithError> {
        self.combine(other, false)
    }

    /// Subtracts `other` from `self`. The hint follows the same rules as [`Histogram::add`];
    /// PromQL's `-` operator sets `Gauge` afterwards.
    ///
    /// # Errors
    /// [`ArithError::IncompatibleSchema`] when one has custom buckets and the other not.
    pub fn sub(&mut self, other: &Histogram) -> Result<Combined, ArithError> {
        self.combine(other, true)
    }

    /// Prometheus' `HasOverflow`: whether the count, the sum, the zero count, a bucket or a
    /// custom bound is infinite (as after a sum that exceeded `f64`).
    pub fn has_overflow(&self) -> bool {
        [self.count, self.sum, self.zero_count]
            .iter()
            .chain(&self.positive_buckets)
            .chain(&self.negative_buckets)
            .chain(&self.custom_values)
            .any(|v| v.is_infinite())
    }

    /// The largest magnitude of the count, the sum, the zero count and the buckets (NaN
    /// ignored; 0 for an empty histogram).
    pub fn largest_magnitude(&self) -> f64 {
        [self.count, self.sum, self.zero_count]
            .iter()
            .chain(&self.positive_buckets)
            .chain(&self.negative_buckets)
            .fold(0.0, |m: f64, v| m.max(v.abs()))
    }

    /// Scales every count and the sum by `factor`; a negative factor makes it a gauge.
    pub fn mul(&mut self, factor: f64) {
        self.integer = false;
        self.zero_count *= factor;
        self.count *= factor;
        self.sum *= factor;
        self.positive_buckets.iter_mut().chain(&mut self.negative_buckets).for_each(|b| *b *= factor);
        if factor < 0.0 {
            self.counter_reset_hint = CounterResetHint::Gauge;
        }
    }

    /// Divides every count and the sum by `scalar`; division by zero removes all buckets (the
    /// counts become infinite or NaN); a negative scalar makes it a gauge.
    pub fn div(&mut self, scalar: f64) {
        self.integer = false;
        self.zero_count /= scalar;
        self.count /= scalar;
        self.sum /= scalar;
        if scalar == 0.0 {
            self.positive_spans.clear();
            self.negative_spans.clear();
            self.positive_buckets.clear();
            self.negative_buckets.clear();
            return;
        }
        self.positive_buckets.iter_mut().chain(&mut self.negative_buckets).for_each(|b| *b /= scalar);
        if scalar < 0.0 {
            self.counter_reset_hint = CounterResetHint::Gauge;
        }
    }

    fn combine(&mut self, other: &Histogram, negate: bool) -> Result<Combined, ArithError> {
        if self.uses_custom_buckets() != other.uses_custom_buckets() {
            return Err(ArithError::IncompatibleSchema);
        }
        let mut notes = Combined { counter_reset_collision: self.adjust_counter_reset(other), ..Combined::default() };
        self.integer = false;
        let other_zero = if self.uses_custom_buckets() { None } else { Some(self.reconcile_zero_buckets(other)) };
        if negate {
            other_zero.inspect(|z| self.zero_count -= z);
            self.count -= other.count;
            self.sum -= other.sum;
        } else {
            other_zero.inspect(|z| self.zero_count += z);
            self.count += other.count;
            self.sum += other.sum;
        }
        if self.uses_custom_buckets() {
            if same_bounds(&self.custom_values, &other.custom_values) {
                let merged = merge(
                    Entries::new(&self.positive_spans, &self.positive_buckets),
                    Entries::new(&other.positive_spans, &other.positive_buckets),
                    negate,
                    |_| false,
                );
                (self.positive_spans, self.positive_buckets) = build(merged);
            } else {
                notes.custom_bounds_reconciled = true;
                let bounds = intersect(&self.custom_values, &other.custom_values);
                (self.positive_spans, self.positive_buckets) = merge_mismatched(self, other, &bounds, negate);
                self.custom_values = bounds;
            }
            return Ok(notes);
        }
        let target = self.schema.min(other.schema);
        let threshold = self.zero_threshold;
        let in_zero = |i: i32| is_exponential_schema(target) && exponential_bound(i, target) <= threshold;
        for positive in [true, false] {
            let (mine, theirs) = if positive {
                (
                    Entries::new(&self.positive_spans, &self.positive_buckets),
                    Entries::new(&other.positive_spans, &other.positive_buckets),
                )
            } else {
                (
                    Entries::new(&self.negative_spans, &self.negative_buckets),
                    Entries::new(&other.negative_spans, &other.negative_buckets),
                )
            };
            let merged =
                merge(reduce(mine, self.schema, target), reduce(theirs, other.schema, target), negate, in_zero);
            let side = build(merged);
            if positive {
                (self.positive_spans, self.positive_buckets) = side;
            } else {
                (self.negative_spans, self.negative_buckets) = side;
            }
        }
        self.schema = target;
        Ok(notes)
    }

    /// Prometheus' `adjustCounterReset`: returns true on a `CounterReset`/`NotCounterReset`
    /// collision.
    fn adjust_counter_reset(&mut self, other: &Histogram) -> bool {
        use CounterResetHint::{Gauge, Unknown};
        let (mine, theirs) = (self.counter_reset_hint, other.counter_reset_hint);
        if mine == theirs || mine == Gauge {
            return false;
        }
        if theirs == Gauge {
            self.counter_reset_hint = Gauge;
            return false;
        }
        if mine == Unknown {
            return false;
        }
        self.counter_reset_hint = Unknown;
        theirs != Unknown
    }

    /// Widens the zero buckets of `self` and (virtually) `other` until they agree on a threshold
    /// that does not cut through a populated bucket of either; returns `other`'s zero count at
    /// that threshold. `self`'s buckets inside the zero bucket are removed (and `self`
    /// compacted), as in Prometheus' `reconcileZeroBuckets`.
    fn reconcile_zero_buckets(&mut self, other: &Histogram) -> f64 {
        let mut other_zero = other.zero_count;
        let mut other_threshold = other.zero_threshold;
        while other_threshold != self.zero_threshold {
            let before = (self.zero_threshold.to_bits(), other_threshold.to_bits());
            if self.zero_threshold > other_threshold {
                (other_zero, other_threshold) = other.zero_count_for_larger_threshold(self.zero_threshold);
            }
            if other_threshold > self.zero_threshold {
                (self.zero_count, self.zero_threshold) = self.zero_count_for_larger_threshold(other_threshold);
                self.trim_buckets_in_zero_bucket();
            }
            if before == (self.zero_threshold.to_bits(), other_threshold.to_bits()) {
                break; // NaN thresholds: no progress possible.
            }
        }
        other_zero
    }

    /// The zero count this histogram would have with the zero threshold raised to `larger`, and
    /// the threshold actually needed: raised further to the end of a populated bucket that
    /// `larger` falls inside (Prometheus' `zeroCountForLargerThreshold`).
    pub(crate) fn zero_count_for_larger_threshold(&self, larger: f64) -> (f64, f64) {
        let mut larger = larger;
        if larger.partial_cmp(&self.zero_threshold) != Some(Ordering::Greater) {
            return (self.zero_count, larger);
        }
        let bound = |i: i32| bucket_bound(i, self.schema, &self.custom_values);
        'outer: loop {
            let mut zero = self.zero_count;
            for (index, count) in Entries::new(&self.positive_spans, &self.positive_buckets) {
                if bound(index.wrapping_sub(1)) >= larger {
                    break;
                }
                zero += count;
                let upper = bound(index);
                if upper > larger {
                    if count != 0.0 {
                        larger = upper;
                    }
                    break;
                }
            }
            for (index, count) in Entries::new(&self.negative_spans, &self.negative_buckets) {
                if bound(index.wrapping_sub(1)) >= larger {
                    break;
                }
                zero += count;
                let outer = bound(index);
                if outer > larger {
                    if count != 0.0 {
                        larger = outer;
                        continue 'outer;
                    }
                    break;
                }
            }
            return (zero, larger);
        }
    }

    /// Empties the buckets inside the zero bucket, then compacts (Prometheus'
    /// `trimBucketsInZeroBucket`).
    fn trim_buckets_in_zero_bucket(&mut self) {
        let threshold = self.zero_threshold;
        let (schema, custom) = (self.schema, &self.custom_values);
        for (spans, counts) in
            [(&self.positive_spans, &mut self.positive_buckets), (&self.negative_spans, &mut self.negative_buckets)]
        {
            let inside = Entries::new(spans, counts)
                .take_while(|&(i, _)| {
                    bucket_bound(i.wrapping_sub(1), schema, custom).partial_cmp(&threshold).is_none_or(Ordering::is_lt)
                })
                .count();
            counts.iter_mut().take(inside).for_each(|c| *c = 0.0);
        }
        self.compact(0);
    }
}

/// Sorted merge of two sides: counts at the same index added (or `b`'s subtracted); a bucket only
/// in `b` is taken as is (or negated). `b`'s leading buckets for which `skip` holds (those inside
/// the zero bucket) are left out.
fn merge(
    a: impl IntoIterator<Item = (i32, f64)>,
    b: impl IntoIterator<Item = (i32, f64)>,
    negate: bool,
    skip: impl Fn(i32) -> bool,
) -> Vec<(i32, f64)> {
    let mut b = b.into_iter().skip_while(|&(i, _)| skip(i)).peekable();
    let signed = |c: f64| if negate { -c } else { c };
    let mut out = Vec::new();
    for (i, count) in a {
        while let Some((j, c)) = b.next_if(|&(j, _)| j < i) {
            out.push((j, signed(c)));
        }
        match b.next_if(|&(j, _)| j == i) {
            Some((_, c)) => out.push((i, count + signed(c))),
            None => out.push((i, count)),
        }
    }
    out.extend(b.map(|(j, c)| (j, signed(c))));
    out
}

/// Custom bounds equal element by element (NaN never equal).
fn same_bounds(a: &[f64], b: &[f64]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y)
}

/// The bounds both lists have (both strictly increasing).
fn intersect(a: &[f64], b: &[f64]) -> Vec<f64> {
    let (mut a, mut b) = (a.iter().peekable(), b.iter().peekable());
    let mut out = Vec::new();
    while let (Some(&&x), Some(&&y)) = (a.peek(), b.peek()) {
        if x == y {
            out.push(x);
            a.next();
            b.next();
        } else if x < y {
            a.next();
        } else {
            b.next();
        }
    }
    out
}

/// Both histograms' buckets mapped onto `bounds` (each into the first bucket whose bound is at
/// least its own upper bound) and added; empty results left out (Prometheus'
/// `addCustomBucketsWithMismatches`, whose sums are Kahan-compensated but return the plain sum).
fn merge_mismatched(a: &Histogram, b: &Histogram, bounds: &[f64], negate: bool) -> (Vec<Span>, Vec<f64>) {
    let mut sums = vec![(0.0f64, 0.0f64); bounds.len() + 1];
    for (h, negative) in [(a, false), (b, negate)] {
        let mut next_bound = 0;
        for (index, count) in Entries::new(&h.positive_spans, &h.positive_buckets) {
            let mut target = bounds.len();
            if let Some(&upper) = usize::try_from(index).ok().and_then(|i| h.custom_values.get(i)) {
                while let Some(&b) = bounds.get(next_bound) {
                    if b >= upper {
                        target = next_bound;
                        break;
                    }
                    next_bound += 1;
                }
            }
            if let Some(slot) = sums.get_mut(target) {
                let (sum, c) = *slot;
                *slot = kahan_inc(if negative { -count } else { count }, sum, c);
            }
        }
    }
    build(sums.iter().enumerate().filter(|(_, &(s, c))| s != 0.0 || c != 0.0).map(|(i, &(s, _))| (i as i32, s)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(schema: i32, zt: f64, zc: f64, pos: (i32, &[f64])) -> Histogram {
        Histogram {
            schema,
            zero_threshold: zt,
            zero_count: zc,
            count: zc + pos.1.iter().sum::<f64>(),
            positive_spans: vec![Span { offset: pos.0, length: pos.1.len() as u32 }],
            positive_buckets: pos.1.to_vec(),
            ..Histogram::default()
        }
    }

    #[test]
    fn add_reduces_to_the_coarser_schema() {
        let mut a = h(1, 0.0, 0.0, (1, &[1.0, 2.0, 3.0])); // indices 1..=3 -> schema 0: 1, 1, 2
        let b = h(0, 0.0, 0.0, (2, &[10.0, 20.0])); // indices 2, 3
        a.add(&b).unwrap();
        assert_eq!(a.schema, 0);
        assert_eq!(a.positive_spans, vec![Span { offset: 1, length: 3 }]);
        assert_eq!(a.positive_buckets, vec![3.0, 13.0, 20.0]);
        assert_eq!(a.count, 36.0);
    }

    #[test]
    fn larger_zero_threshold_absorbs_buckets() {
        // Schema 0 bucket 0 is (0.5, 1], bucket 1 (1, 2].
        let mut a = h(0, 1.0, 5.0, (1, &[2.0]));
        let b = h(0, 0.5, 1.0, (0, &[3.0, 4.0]));
        a.add(&b).unwrap();
        assert_eq!(a.zero_threshold, 1.0);
        assert_eq!(a.zero_count, 5.0 + 1.0 + 3.0);
        assert_eq!(a.positive_buckets, vec![6.0]);
        // The other way round: self's buckets move into the zero bucket.
        let mut b = h(0, 0.5, 1.0, (0, &[3.0, 4.0]));
        b.add(&h(0, 1.0, 5.0, (1, &[2.0]))).unwrap();
        assert_eq!((b.zero_threshold, b.zero_count), (1.0, 9.0));
        assert_eq!(b.positive_spans, vec![Span { offset: 1, length: 1 }]);
        assert_eq!(b.positive_buckets, vec![6.0]);
    }

    #[test]
    fn threshold_inside_a_populated_bucket_is_raised_to_its_end() {
        let a = h(0, 0.0, 0.0, (0, &[1.0, 2.0])); // (0.5, 1], (1, 2]
        assert_eq!(a.zero_count_for_larger_threshold(0.75), (1.0, 1.0));
        assert_eq!(a.zero_count_for_larger_threshold(1.5), (3.0, 2.0));
    }

    #[test]
    fn mismatched_custom_bounds_intersect() {
        let mut a = Histogram {
            schema: -53,
            custom_values: vec![1.0, 2.0, 5.0],
            positive_spans: vec![Span { offset: 0, length: 4 }],
            positive_buckets: vec![1.0, 2.0, 3.0, 4.0],
            count: 10.0,
            ..Histogram::default()
        };
        let b = Histogram {
            schema: -53,
            custom_values: vec![2.0, 10.0],
            positive_spans: vec![Span { offset: 0, length: 3 }],
            positive_buckets: vec![10.0, 20.0, 30.0],
            count: 60.0,
            ..Histogram::default()
        };
        let notes = a.add(&b).unwrap();
        assert!(notes.custom_bounds_reconciled);
        assert_eq!(a.custom_values, vec![2.0]);
        assert_eq!(a.positive_buckets, vec![13.0, 57.0]);
        assert_eq!(a.count, 70.0);
    }

    #[test]
    fn hints_and_scalars() {
        let mut a = Histogram { counter_reset_hint: CounterResetHint::CounterReset, ..Histogram::default() };
        let b = Histogram { counter_reset_hint: CounterResetHint::NotCounterReset, ..Histogram::default() };
        assert!(a.add(&b).unwrap().counter_reset_collision);
        assert_eq!(a.counter_reset_hint, CounterResetHint::Unknown);
        let mut c = h(0, 0.0, 1.0, (0, &[2.0]));
        c.mul(-2.0);
        assert_eq!((c.count, c.positive_buckets[0], c.counter_reset_hint), (-6.0, -4.0, CounterResetHint::Gauge));
        c.div(0.0);
        assert!(c.positive_buckets.is_empty() && c.positive_spans.is_empty());
        assert_eq!(c.count, f64::NEG_INFINITY);
        let mut exp = h(0, 0.0, 0.0, (0, &[1.0]));
        let nhcb = Histogram { schema: -53, ..Histogram::default() };
        assert_eq!(exp.add(&nhcb), Err(ArithError::IncompatibleSchema));
    }
}
