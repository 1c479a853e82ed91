//! Comparing histograms: Prometheus' `Equals` (data equality, bit for bit) and `DetectReset`
//! (did the counter reset between two samples).

use std::cmp::Ordering;

use super::buckets::{bucket_bound, exponential_bound, Entries};
use super::layout::reduce;
use super::types::{is_exponential_schema, CounterResetHint, Histogram, Span, CUSTOM_BUCKETS_SCHEMA};

impl Histogram {
    /// Prometheus' `Equals`: same schema, count, sum, zero count and bucket counts compared as
    /// bit patterns (so NaN sums equal when their bits do), zero thresholds and custom bounds
    /// (custom schema only) with `==`, and the same bucket layout (zero-length spans aside).
    /// The hint and the `integer` flag are not compared.
    pub fn equals(&self, other: &Histogram) -> bool {
        let bits = |a: f64, b: f64| a.to_bits() == b.to_bits();
        let all_bits = |a: &[f64], b: &[f64]| a.len() == b.len() && a.iter().zip(b).all(|(x, y)| bits(*x, *y));
        self.schema == other.schema
            && bits(self.count, other.count)
            && bits(self.sum, other.sum)
            && (!self.uses_custom_buckets()
                || (self.custom_values.len() == other.custom_values.len()
                    && self.custom_values.iter().zip(&other.custom_values).all(|(a, b)| a == b)))
            && self.zero_threshold == other.zero_threshold
            && bits(self.zero_count, other.zero_count)
            && spans_match(&self.negative_spans, &other.negative_spans)
            && all_bits(&self.negative_buckets, &other.negative_buckets)
            && spans_match(&self.positive_spans, &other.positive_spans)
            && all_bits(&self.positive_buckets, &other.positive_buckets)
    }
}

/// The same layout once zero-length spans are dropped (their offsets carried to the next span).
fn spans_match(a: &[Span], b: &[Span]) -> bool {
    fn normal(spans: &[Span]) -> impl Iterator<Item = (i32, u32)> + '_ {
        let mut carry = 0i32;
        spans.iter().filter_map(move |s| {
            carry = carry.wrapping_add(s.offset);
            (s.length > 0).then(|| (std::mem::take(&mut carry), s.length))
        })
    }
    normal(a).eq(normal(b))
}

/// Prometheus' `DetectReset`: whether `cur` follows a counter reset after `prev`. The hints
/// `CounterReset` and `NotCounterReset` decide alone; otherwise (also for gauges) a reset is a
/// smaller count, a finer schema, a smaller zero threshold, a zero threshold inside a populated
/// bucket of `prev`, a smaller zero count, or any bucket smaller than in `prev` (or missing
/// while populated there) once `prev` is brought to `cur`'s schema and zero threshold. Custom
/// bounds that differ are compared on the bounds both have.
pub fn detect_reset(prev: &Histogram, cur: &Histogram) -> bool {
    match cur.counter_reset_hint {
        CounterResetHint::CounterReset => return true,
        CounterResetHint::NotCounterReset => return false,
        CounterResetHint::Unknown | CounterResetHint::Gauge => {}
    }
    if cur.count < prev.count {
        return true;
    }
    if cur.uses_custom_buckets() {
        if !prev.uses_custom_buckets() {
            return true;
        }
        let same = cur.custom_values.len() == prev.custom_values.len()
            && cur.custom_values.iter().zip(&prev.custom_values).all(|(a, b)| a == b);
        if !same {
            return reset_with_mismatched_bounds(prev, cur);
        }
    }
    if cur.schema > prev.schema || cur.zero_threshold < prev.zero_threshold {
        return true;
    }
    let (prev_zero, threshold) = prev.zero_count_for_larger_threshold(cur.zero_threshold);
    if threshold != cur.zero_threshold || cur.zero_count < prev_zero {
        return true;
    }
    let side = |h: &Histogram, positive: bool| {
        let entries = if positive {
            Entries::new(&h.positive_spans, &h.positive_buckets)
        } else {
            Entries::new(&h.negative_spans, &h.negative_buckets)
        };
        let mut merged = reduce(entries, h.schema, cur.schema);
        if cur.zero_threshold != 0.0 && is_exponential_schema(cur.schema) {
            let below =
                merged.iter().take_while(|&&(i, _)| exponential_bound(i, cur.schema) <= cur.zero_threshold).count();
            merged.drain(..below);
        }
        merged
    };
    side_reset(&side(prev, true), &side(cur, true)) || side_reset(&side(prev, false), &side(cur, false))
}

/// Any bucket of `prev` populated but missing in `cur`, or larger than in `cur` (both sorted).
fn side_reset(prev: &[(i32, f64)], cur: &[(i32, f64)]) -> bool {
    let mut cur = cur.iter().peekable();
    for &(index, count) in prev {
        while cur.next_if(|&&(i, _)| i < index).is_some() {}
        match cur.peek() {
            Some(&&(i, c)) if i == index => {
                if c < count {
                    return true;
                }
            }
            _ => {
                if count != 0.0 {
                    return true;
                }
            }
        }
    }
    false
}

/// Prometheus' `detectResetWithMismatchedCustomBounds`: at each bound both histograms have,
/// compares the counts accumulated since the previous shared bound.
fn reset_with_mismatched_bounds(prev: &Histogram, cur: &Histogram) -> bool {
    let (mut cur_roll, mut prev_roll) = (Rollup::new(cur), Rollup::new(prev));
    let (mut ci, mut pi) = (0, 0);
    while ci <= cur.custom_values.len() && pi <= prev.custom_values.len() {
        let cb = cur.custom_values.get(ci).copied().unwrap_or(f64::INFINITY);
        let pb = prev.custom_values.get(pi).copied().unwrap_or(f64::INFINITY);
        if cb == pb {
            if cur_roll.sum_up_to(cb) < prev_roll.sum_up_to(cb) {
                return true;
            }
            ci += 1;
            pi += 1;
        } else if cb < pb {
            ci += 1;
        } else {
            pi += 1;
        }
    }
    false
}

/// Walks the buckets of a custom-bounds histogram, summing them bound by bound.
struct Rollup<'a> {
    h: &'a Histogram,
    entries: Entries<'a>,
    /// The bucket looked at but not yet summed: `(upper bound, count)`.
    pending: Option<(f64, f64)>,
    started: bool,
}

impl<'a> Rollup<'a> {
    fn new(h: &'a Histogram) -> Self {
        Self { h, entries: Entries::new(&h.positive_spans, &h.positive_buckets), pending: None, started: false }
    }

    fn advance(&mut self) {
        self.pending =
            self.entries.next().map(|(i, c)| (bucket_bound(i, CUSTOM_BUCKETS_SCHEMA, &self.h.custom_values), c));
    }

    /// The counts of the buckets not yet summed whose upper bound is at most `bound`.
    fn sum_up_to(&mut self, bound: f64) -> f64 {
        if !self.started {
            self.started = true;
            self.advance();
        }
        let mut sum = 0.0;
        while let Some((upper, count)) = self.pending {
            if upper.partial_cmp(&bound).is_none_or(Ordering::is_gt) {
                break;
            }
            sum += count;
            self.advance();
        }
        sum
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exp(schema: i32, count: f64, zc: f64, offset: i32, buckets: &[f64]) -> Histogram {
        Histogram {
            schema,
            count,
            zero_count: zc,
            positive_spans: vec![Span { offset, length: buckets.len() as u32 }],
            positive_buckets: buckets.to_vec(),
            ..Histogram::default()
        }
    }

    #[test]
    fn equals_ignores_zero_length_spans_and_compares_nan_bits() {
        let mut a = exp(0, 3.0, 0.0, 1, &[1.0, 2.0]);
        a.sum = f64::NAN;
        let mut b = a.clone();
        b.positive_spans =
            vec![Span { offset: 0, length: 0 }, Span { offset: 1, length: 2 }, Span { offset: 4, length: 0 }];
        assert!(a.equals(&b));
        b.sum = Histogram::stale().sum;
        assert!(!a.equals(&b));
        b.sum = a.sum;
        b.positive_spans = vec![Span { offset: 1, length: 1 }, Span { offset: 0, length: 1 }];
        assert!(!a.equals(&b));
    }

    #[test]
    fn detects_resets() {
        let prev = exp(1, 10.0, 1.0, 0, &[4.0, 5.0]);
        assert!(!detect_reset(&prev, &exp(1, 12.0, 1.0, 0, &[5.0, 6.0])));
        assert!(detect_reset(&prev, &exp(1, 9.0, 1.0, 0, &[4.0, 5.0])));
        assert!(detect_reset(&prev, &exp(1, 12.0, 1.0, 0, &[3.0, 8.0])));
        assert!(detect_reset(&prev, &exp(1, 12.0, 0.0, 0, &[5.0, 7.0])));
        assert!(detect_reset(&prev, &exp(1, 12.0, 1.0, 1, &[5.0, 6.0])));
        assert!(detect_reset(&prev, &exp(2, 12.0, 1.0, 0, &[5.0, 6.0])));
        // Schema 1 indices 1 and 2 are one bucket (index 1) in schema 0.
        let fine = exp(1, 10.0, 1.0, 1, &[4.0, 5.0]);
        assert!(!detect_reset(&fine, &exp(0, 12.0, 1.0, 1, &[9.0])));
        assert!(detect_reset(&fine, &exp(0, 12.0, 1.0, 1, &[8.0])));
        let mut hinted = exp(1, 0.0, 0.0, 0, &[]);
        hinted.counter_reset_hint = CounterResetHint::NotCounterReset;
        assert!(!detect_reset(&prev, &hinted));
        let mut wider = exp(1, 12.0, 10.0, 1, &[6.0]);
        wider.zero_threshold = 1.0; // Takes in bucket 0, (0.707, 1].
        assert!(!detect_reset(&prev, &wider));
        wider.zero_count = 4.0;
        assert!(detect_reset(&prev, &wider));
    }

    #[test]
    fn detects_resets_across_custom_bounds() {
        let nhcb = |cv: &[f64], buckets: &[f64]| Histogram {
            schema: -53,
            count: buckets.iter().sum(),
            custom_values: cv.to_vec(),
            positive_spans: vec![Span { offset: 0, length: buckets.len() as u32 }],
            positive_buckets: buckets.to_vec(),
            ..Histogram::default()
        };
        let prev = nhcb(&[1.0, 2.0, 5.0], &[1.0, 1.0, 1.0, 1.0]);
        assert!(!detect_reset(&prev, &nhcb(&[2.0, 5.0], &[2.0, 1.0, 1.0])));
        assert!(detect_reset(&prev, &nhcb(&[2.0, 5.0], &[1.0, 2.0, 1.0])));
        assert!(detect_reset(&nhcb(&[1.0], &[1.0, 0.0]), &nhcb(&[], &[0.5])));
    }
}
