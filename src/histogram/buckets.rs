//! Bucket boundaries per schema and iteration over a histogram's buckets.
//!
//! Exponential schema `s`: bucket `i` covers `(base^(i-1), base^i]` with `base = 2^(2^-s)`
//! (negative bucket `i` the mirror image, `[-base^i, -base^(i-1))`). Custom schema (-53): bucket
//! `i` covers `(custom_values[i-1], custom_values[i]]`, the first from -Inf, the one past the last
//! bound up to +Inf. Exponential bounds are built as Prometheus builds them (`getBoundExponential`):
//! a fraction `2^(j/256 - 1)` scaled by a power of two as Go's `math.Ldexp` does; the fractions
//! are computed, not copied from Prometheus' table, so a bound may differ from Prometheus' in
//! its last binary places.

use super::types::{is_custom_schema, Histogram, Span, MAX_EXPONENTIAL_SCHEMA, MIN_EXPONENTIAL_SCHEMA};

/// The upper bound of bucket `index` (the lower bound is that of `index - 1`): the custom bound
/// for schema -53 (+Inf from `custom_values.len()` on, -Inf at -1 and below), else
/// [`exponential_bound`].
pub fn bucket_bound(index: i32, schema: i32, custom_values: &[f64]) -> f64 {
    if !is_custom_schema(schema) {
        return exponential_bound(index, schema);
    }
    match usize::try_from(index) {
        Ok(i) => custom_values.get(i).copied().unwrap_or(f64::INFINITY),
        Err(_) => f64::NEG_INFINITY,
    }
}

/// The upper bound of exponential bucket `index` in `schema`, `base^index` computed as
/// Prometheus does; NaN for a schema outside `-4..=8`. The last finite bucket ends at
/// `f64::MAX` (not +Inf, which belongs to the bucket of infinite observations).
pub fn exponential_bound(index: i32, schema: i32) -> f64 {
    if !(MIN_EXPONENTIAL_SCHEMA..=MAX_EXPONENTIAL_SCHEMA).contains(&schema) {
        return f64::NAN;
    }
    if schema < 0 {
        let exp = i64::from(index) << -schema;
        if exp == 1024 {
            return f64::MAX;
        }
        return ldexp(1.0, exp);
    }
    let frac_index = (index & ((1 << schema) - 1)) << (MAX_EXPONENTIAL_SCHEMA - schema);
    let frac = fractions().get(frac_index as usize).copied().unwrap_or(f64::NAN);
    let exp = i64::from(index >> schema) + 1;
    if frac == 0.5 && exp == 1025 {
        return f64::MAX;
    }
    ldexp(frac, exp)
}

/// `frac * 2^exp` for a normal `frac`, rounded once, as Go's `math.Ldexp` does (results below
/// the normal range are built 53 binary places higher and scaled down by one multiplication).
fn ldexp(frac: f64, exp: i64) -> f64 {
    if frac == 0.0 || !frac.is_finite() {
        return frac;
    }
    let bits = frac.to_bits();
    let e = exp + ((bits >> 52) & 0x7ff) as i64 - 1023;
    if e < -1075 {
        return 0.0f64.copysign(frac);
    }
    if e > 1023 {
        return f64::INFINITY.copysign(frac);
    }
    let (e, scale) = if e < -1022 { (e + 53, 1.0 / (1u64 << 53) as f64) } else { (e, 1.0) };
    let bits = (bits & !(0x7ff << 52)) | (((e + 1023) as u64) << 52);
    scale * f64::from_bits(bits)
}

/// The index in `target` schema of the bucket holding bucket `index` of schema `origin`
/// (`target <= origin`): Prometheus' `targetIdx`, `((index - 1) >> (origin - target)) + 1`.
pub fn target_index(index: i32, origin: i32, target: i32) -> i32 {
    let shift = u32::try_from(origin.saturating_sub(target)).unwrap_or(0).min(31);
    (index.wrapping_sub(1) >> shift).wrapping_add(1)
}

/// The bucket indices and counts of one side, in span order. Stops early, without complaint,
/// where spans and counts disagree (only an invalid histogram has that).
#[derive(Clone, Debug)]
pub(crate) struct Entries<'a> {
    spans: std::slice::Iter<'a, Span>,
    counts: std::slice::Iter<'a, f64>,
    /// Index of the next bucket.
    next: i32,
    /// Buckets left in the current span.
    left: u32,
    started: bool,
}

impl<'a> Entries<'a> {
    /// The buckets of `spans` with `counts`.
    pub(crate) fn new(spans: &'a [Span], counts: &'a [f64]) -> Self {
        Self { spans: spans.iter(), counts: counts.iter(), next: 0, left: 0, started: false }
    }
}

impl Iterator for Entries<'_> {
    type Item = (i32, f64);

    fn next(&mut self) -> Option<(i32, f64)> {
        while self.left == 0 {
            let span = self.spans.next()?;
            self.next = if self.started { self.next.wrapping_add(span.offset) } else { span.offset };
            self.started = true;
            self.left = span.length;
        }
        let count = *self.counts.next()?;
        let index = self.next;
        self.next = self.next.wrapping_add(1);
        self.left -= 1;
        Some((index, count))
    }
}

/// One bucket with its bounds. Exponential buckets include the bound farther from zero;
/// custom buckets include their upper bound (and the first also its lower bound, -Inf).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bucket {
    /// Lower bound.
    pub lower: f64,
    /// Upper bound.
    pub upper: f64,
    /// Observations in the bucket.
    pub count: f64,
    /// Whether `lower` belongs to the bucket.
    pub lower_inclusive: bool,
    /// Whether `upper` belongs to the bucket.
    pub upper_inclusive: bool,
    /// Index within the schema and side (irrelevant for the zero bucket).
    pub index: i32,
}

impl Bucket {
    fn new(index: i32, count: f64, positive: bool, h: &Histogram) -> Self {
        let outer = bucket_bound(index, h.schema, &h.custom_values);
        let inner = bucket_bound(index.wrapping_sub(1), h.schema, &h.custom_values);
        let (lower, upper) = if positive { (inner, outer) } else { (-outer, -inner) };
        let (lower_inclusive, upper_inclusive) =
            if h.uses_custom_buckets() { (index == 0, true) } else { (lower < 0.0, upper > 0.0) };
        Self { lower, upper, count, lower_inclusive, upper_inclusive, index }
    }
}

impl Histogram {
    /// The positive buckets, ascending (empty ones included).
    pub fn positive_bucket_iter(&self) -> impl Iterator<Item = Bucket> + '_ {
        Entries::new(&self.positive_spans, &self.positive_buckets).map(|(i, c)| Bucket::new(i, c, true, self))
    }

    /// The negative buckets from zero downwards (ascending index, descending value).
    pub fn negative_bucket_iter(&self) -> impl Iterator<Item = Bucket> + '_ {
        Entries::new(&self.negative_spans, &self.negative_buckets).map(|(i, c)| Bucket::new(i, c, false, self))
    }

    /// The zero bucket, `[-zero_threshold, zero_threshold]`.
    pub fn zero_bucket(&self) -> Bucket {
        Bucket {
            lower: -self.zero_threshold,
            upper: self.zero_threshold,
            count: self.zero_count,
            lower_inclusive: true,
            upper_inclusive: true,
            index: 0,
        }
    }

    /// Every bucket in ascending order of value, as Prometheus' `AllBucketIterator`: negative
    /// buckets (descending index), the zero bucket when its count is above 0 (never for custom
    /// buckets), positive buckets (ascending index). A bucket overlapping the zero bucket has
    /// that bound moved to the zero threshold.
    pub fn all_buckets(&self) -> impl Iterator<Item = Bucket> + '_ {
        let zt = self.zero_threshold;
        let clamp = move |mut b: Bucket| {
            if b.upper < 0.0 && b.upper > -zt {
                b.upper = -zt;
            } else if b.lower > 0.0 && b.lower < zt {
                b.lower = zt;
            }
            b
        };
        let negative: Vec<Bucket> = self.negative_bucket_iter().map(clamp).collect();
        let zero = (self.zero_count > 0.0 && !self.uses_custom_buckets()).then(|| self.zero_bucket());
        negative.into_iter().rev().chain(zero).chain(self.positive_bucket_iter().map(clamp))
    }
}

/// The bucket bound fractions in `[0.5, 1)` for schema 8: entry `j` is `2^(j/256 - 1)`,
/// computed here (Prometheus tabulates the same values; its table can differ from these in the
/// last few binary places, far below the 1e-6 that answers are compared at). Schema `s < 8`
/// uses every `2^(8-s)`th entry.
fn fractions() -> &'static [f64; 256] {
    static FRACTIONS: std::sync::OnceLock<[f64; 256]> = std::sync::OnceLock::new();
    FRACTIONS.get_or_init(|| std::array::from_fn(|j| (j as f64 / 256.0 - 1.0).exp2()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exponential_bounds_match_independent_values() {
        // Exact powers of two.
        assert_eq!(exponential_bound(0, 0), 1.0);
        assert_eq!(exponential_bound(1, 0), 2.0);
        assert_eq!(exponential_bound(-1, 0), 0.5);
        assert_eq!(exponential_bound(8, 3), 2.0);
        assert_eq!(exponential_bound(1, -2), 16.0);
        assert_eq!(exponential_bound(-3, -4), 2f64.powi(-48));
        // sqrt(2) in schema 1 (Prometheus' table holds the value one ulp below).
        assert!((exponential_bound(1, 1) - 2f64.sqrt()).abs() <= f64::EPSILON * 2.0);
        // Schema 3, index 5: 2^(5/8) = 1.5422108254079407...
        assert!((exponential_bound(5, 3) - 1.542_210_825_407_940_8).abs() < 1e-15);
        assert!((exponential_bound(-13, 3) - 2f64.powf(-13.0 / 8.0)).abs() < 1e-15);
        // Schema 8, index 300: 2^(300/256).
        assert!((exponential_bound(300, 8) / 2f64.powf(300.0 / 256.0) - 1.0).abs() < 1e-15);
        // Edges: the last finite bucket ends at f64::MAX, the next one at +Inf.
        assert_eq!(exponential_bound(1024, 0), f64::MAX);
        assert_eq!(exponential_bound(1025, 0), f64::INFINITY);
        assert_eq!(exponential_bound(1024 << 8, 8), f64::MAX);
        assert_eq!(exponential_bound(64, -4), f64::MAX);
        assert_eq!(exponential_bound(-1074, 0), f64::from_bits(1));
        assert_eq!(exponential_bound(-1075, 0), 0.0);
        assert!(exponential_bound(0, 9).is_nan());
    }

    #[test]
    fn fractions_ascend_and_are_the_exact_powers() {
        let mut prev = 0.0;
        for (j, &f) in fractions().iter().enumerate() {
            assert!(f > prev);
            prev = f;
            let exact = 2f64.powf(j as f64 / 256.0 - 1.0);
            assert!((f - exact).abs() <= f64::EPSILON, "entry {j}: {f} vs {exact}");
        }
    }

    #[test]
    fn custom_bounds() {
        let cv = [1.0, 2.5, 10.0];
        assert_eq!(bucket_bound(-1, -53, &cv), f64::NEG_INFINITY);
        assert_eq!(bucket_bound(0, -53, &cv), 1.0);
        assert_eq!(bucket_bound(2, -53, &cv), 10.0);
        assert_eq!(bucket_bound(3, -53, &cv), f64::INFINITY);
        assert_eq!(bucket_bound(7, -53, &cv), f64::INFINITY);
    }

    #[test]
    fn target_index_halves_per_schema_step() {
        assert_eq!(target_index(1, 1, 0), 1);
        assert_eq!(target_index(2, 1, 0), 1);
        assert_eq!(target_index(3, 1, 0), 2);
        assert_eq!(target_index(0, 1, 0), 0);
        assert_eq!(target_index(-1, 1, 0), 0);
        assert_eq!(target_index(-2, 1, 0), -1);
        assert_eq!(target_index(i32::MIN, 8, -4), target_index(i32::MIN, 8, -4));
    }

    #[test]
    fn all_buckets_in_ascending_order_with_zero_bucket() {
        let h = Histogram {
            schema: 0,
            zero_threshold: 0.001,
            zero_count: 2.0,
            positive_spans: vec![Span { offset: 0, length: 2 }],
            positive_buckets: vec![1.0, 3.0],
            negative_spans: vec![Span { offset: 1, length: 1 }],
            negative_buckets: vec![4.0],
            ..Histogram::default()
        };
        let got: Vec<_> =
            h.all_buckets().map(|b| (b.lower, b.upper, b.count, b.lower_inclusive, b.upper_inclusive)).collect();
        assert_eq!(
            got,
            vec![
                (-2.0, -1.0, 4.0, true, false),
                (-0.001, 0.001, 2.0, true, true),
                (0.5, 1.0, 1.0, false, true),
                (1.0, 2.0, 3.0, false, true),
            ]
        );
        let nhcb = Histogram {
            schema: -53,
            custom_values: vec![1.0, 5.0],
            positive_spans: vec![Span { offset: 0, length: 1 }, Span { offset: 1, length: 1 }],
            positive_buckets: vec![1.0, 2.0],
            ..Histogram::default()
        };
        let got: Vec<_> = nhcb.all_buckets().map(|b| (b.lower, b.upper, b.lower_inclusive)).collect();
        assert_eq!(got, vec![(f64::NEG_INFINITY, 1.0, true), (5.0, f64::INFINITY, false)]);
    }
}
