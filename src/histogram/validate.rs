//! Prometheus' validation rules for native histograms (`Histogram.Validate` for the integer
//! form, `FloatHistogram.Validate` for the float form), as one typed error.

use super::types::{is_custom_schema, is_exponential_schema, Histogram, Span, MAX_EXACT_INTEGER};

/// Which bucket side an error is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// The positive buckets.
    Positive,
    /// The negative buckets.
    Negative,
}

impl std::fmt::Display for Side {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Positive => "positive",
            Self::Negative => "negative",
        })
    }
}

/// What makes a histogram invalid.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ValidationError {
    /// The schema is neither `-4..=8` nor -53.
    #[error("histogram has an invalid schema {0}, which must be between -4 and 8 for exponential buckets, or -53 for custom buckets")]
    InvalidSchema(i32),
    /// A span after the first has a negative offset (for custom buckets: any span).
    #[error("{side} side: span number {span} has negative offset {offset}")]
    SpanNegativeOffset {
        /// The side.
        side: Side,
        /// 1-based number of the span.
        span: usize,
        /// Its offset.
        offset: i32,
    },
    /// The spans of a side cover a different number of buckets than it has counts.
    #[error("{side} side: spans need {spans_need} buckets, have {buckets} buckets")]
    SpansBucketsMismatch {
        /// The side.
        side: Side,
        /// Sum of the span lengths.
        spans_need: u64,
        /// Number of counts.
        buckets: usize,
    },
    /// A bucket count is negative.
    #[error("{side} side: bucket number {bucket} has observation count of {count}")]
    NegativeBucketCount {
        /// The side.
        side: Side,
        /// 1-based number of the bucket.
        bucket: usize,
        /// The count.
        count: f64,
    },
    /// The zero bucket count is negative.
    #[error("zero bucket has observation count of {0}")]
    NegativeZeroCount(f64),
    /// The observation count is negative.
    #[error("histogram's observation count is negative: {0}")]
    NegativeCount(f64),
    /// The zero threshold is negative or NaN (a saltdb rule; Prometheus does not check it).
    #[error("zero threshold {0} must be a non-negative number")]
    InvalidZeroThreshold(f64),
    /// Integer form: a count is not a non-negative integer of at most 2^53.
    #[error("integer histogram has a count of {value}, not a non-negative integer of at most 2^53")]
    NotInteger {
        /// The count.
        value: f64,
    },
    /// Integer form, sum not NaN: the count differs from the observations in the buckets.
    #[error("{buckets} observations found in buckets, but the count field is {count}")]
    CountMismatch {
        /// The count field.
        count: u64,
        /// Zero count plus all bucket counts.
        buckets: u128,
    },
    /// Integer form, sum NaN: the count is below the observations in the buckets.
    #[error("{buckets} observations found in buckets, but the count field is only {count}")]
    CountNotBigEnough {
        /// The count field.
        count: u64,
        /// Zero count plus all bucket counts.
        buckets: u128,
    },
    /// Custom bounds: a bound is NaN.
    #[error("custom buckets: bound number {0} is NaN")]
    CustomBoundsNaN(usize),
    /// Custom bounds: a bound is not above the one before.
    #[error("custom buckets: bound number {0} is not above the previous bound")]
    CustomBoundsNotIncreasing(usize),
    /// Custom bounds: the last bound is +Inf (it is implicit and must not be written).
    #[error("custom buckets: the last +Inf bound must not be explicitly defined")]
    CustomBoundsInfinite,
    /// Custom bounds: fewer bounds than the spans reach.
    #[error("custom buckets: {bounds} custom bounds cannot cover a total span length of {span_length}")]
    CustomBoundsTooFew {
        /// Number of bounds.
        bounds: usize,
        /// Offsets plus lengths of all spans.
        span_length: i64,
    },
    /// Custom buckets with a zero count.
    #[error("custom buckets: must have zero count of 0")]
    CustomBucketsZeroCount,
    /// Custom buckets with a zero threshold.
    #[error("custom buckets: must have zero threshold of 0")]
    CustomBucketsZeroThreshold,
    /// Custom buckets with negative spans.
    #[error("custom buckets: must not have negative spans")]
    CustomBucketsNegativeSpans,
    /// Custom buckets with negative buckets.
    #[error("custom buckets: must not have negative buckets")]
    CustomBucketsNegativeBuckets,
    /// An exponential schema with custom bounds.
    #[error("histogram with exponential schema must not have custom bounds")]
    ExponentialWithCustomBounds,
    /// Integer form: a running sum of bucket deltas leaves `i64`.
    #[error("bucket number {bucket}: the sum of the deltas overflows")]
    BucketCountOverflow {
        /// 0-based number of the bucket.
        bucket: usize,
    },
    /// Integer form: a count beyond 2^53, which an `f64` does not hold exactly.
    #[error("count {value} is beyond 2^53")]
    CountNotExact {
        /// The count.
        value: f64,
    },
}

impl Histogram {
    /// Checks the histogram against Prometheus' rules: `Histogram.Validate` when `integer` is
    /// set (counts must then be integers and the count must equal the observations in the
    /// buckets, or be at least that when the sum is NaN), `FloatHistogram.Validate` otherwise
    /// (which does not compare the count with the buckets, and lets NaN counts through).
    ///
    /// # Errors
    /// The first rule broken, as a [`ValidationError`].
    pub fn validate(&self) -> Result<(), ValidationError> {
        if is_custom_schema(self.schema) {
            self.validate_custom()?;
        } else if is_exponential_schema(self.schema) {
            self.validate_exponential()?;
        } else {
            return Err(ValidationError::InvalidSchema(self.schema));
        }
        if self.count < 0.0 {
            return Err(ValidationError::NegativeCount(self.count));
        }
        check_counts(Side::Positive, &self.positive_buckets)?;
        if self.integer {
            self.validate_integer()?;
        }
        Ok(())
    }

    fn validate_custom(&self) -> Result<(), ValidationError> {
        check_custom_bounds(&self.custom_values, &self.positive_spans, self.positive_buckets.len())?;
        if self.zero_count != 0.0 {
            return Err(ValidationError::CustomBucketsZeroCount);
        }
        if self.zero_threshold != 0.0 {
            return Err(ValidationError::CustomBucketsZeroThreshold);
        }
        if !self.negative_spans.is_empty() {
            return Err(ValidationError::CustomBucketsNegativeSpans);
        }
        if !self.negative_buckets.is_empty() {
            return Err(ValidationError::CustomBucketsNegativeBuckets);
        }
        Ok(())
    }

    fn validate_exponential(&self) -> Result<(), ValidationError> {
        check_spans(Side::Positive, &self.positive_spans, self.positive_buckets.len())?;
        check_spans(Side::Negative, &self.negative_spans, self.negative_buckets.len())?;
        check_counts(Side::Negative, &self.negative_buckets)?;
        if self.zero_count < 0.0 {
            return Err(ValidationError::NegativeZeroCount(self.zero_count));
        }
        if !self.custom_values.is_empty() {
            return Err(ValidationError::ExponentialWithCustomBounds);
        }
        if self.zero_threshold.is_nan() || self.zero_threshold < 0.0 {
            return Err(ValidationError::InvalidZeroThreshold(self.zero_threshold));
        }
        Ok(())
    }

    /// The integer form's rules: integral counts, and the count against the buckets.
    fn validate_integer(&self) -> Result<(), ValidationError> {
        let count = integer(self.count)?;
        let mut in_buckets = u128::from(integer(self.zero_count)?);
        for &c in self.positive_buckets.iter().chain(&self.negative_buckets) {
            in_buckets += u128::from(integer(c)?);
        }
        if self.sum.is_nan() {
            if in_buckets > u128::from(count) {
                return Err(ValidationError::CountNotBigEnough { count, buckets: in_buckets });
            }
        } else if in_buckets != u128::from(count) {
            return Err(ValidationError::CountMismatch { count, buckets: in_buckets });
        }
        Ok(())
    }
}

/// `v` as an integer count.
fn integer(v: f64) -> Result<u64, ValidationError> {
    if (0.0..=MAX_EXACT_INTEGER).contains(&v) && v.fract() == 0.0 {
        Ok(v as u64)
    } else {
        Err(ValidationError::NotInteger { value: v })
    }
}

/// Span offsets (only the first may be negative) and the bucket total.
pub(crate) fn check_spans(side: Side, spans: &[Span], buckets: usize) -> Result<(), ValidationError> {
    let mut need = 0u64;
    for (n, span) in spans.iter().enumerate() {
        if n > 0 && span.offset < 0 {
            return Err(ValidationError::SpanNegativeOffset { side, span: n + 1, offset: span.offset });
        }
        need += u64::from(span.length);
    }
    if need != buckets as u64 {
        return Err(ValidationError::SpansBucketsMismatch { side, spans_need: need, buckets });
    }
    Ok(())
}

/// No negative bucket counts (NaN passes, as in Prometheus).
fn check_counts(side: Side, counts: &[f64]) -> Result<(), ValidationError> {
    match counts.iter().enumerate().find(|(_, &c)| c < 0.0) {
        Some((i, &count)) => Err(ValidationError::NegativeBucketCount { side, bucket: i + 1, count }),
        None => Ok(()),
    }
}

/// Prometheus' `checkHistogramCustomBounds`.
fn check_custom_bounds(bounds: &[f64], spans: &[Span], buckets: usize) -> Result<(), ValidationError> {
    for (i, &b) in bounds.iter().enumerate() {
        if b.is_nan() {
            return Err(ValidationError::CustomBoundsNaN(i + 1));
        }
        if i > 0 && bounds.get(i - 1).is_some_and(|&prev| b <= prev) {
            return Err(ValidationError::CustomBoundsNotIncreasing(i + 1));
        }
    }
    if bounds.last() == Some(&f64::INFINITY) {
        return Err(ValidationError::CustomBoundsInfinite);
    }
    let mut need = 0u64;
    let mut span_length = 0i64;
    for (n, span) in spans.iter().enumerate() {
        if span.offset < 0 {
            return Err(ValidationError::SpanNegativeOffset { side: Side::Positive, span: n + 1, offset: span.offset });
        }
        need += u64::from(span.length);
        span_length += i64::from(span.offset) + i64::from(span.length);
    }
    if need != buckets as u64 {
        return Err(ValidationError::SpansBucketsMismatch { side: Side::Positive, spans_need: need, buckets });
    }
    if (bounds.len() as i64) + 1 < span_length {
        return Err(ValidationError::CustomBoundsTooFew { bounds: bounds.len(), span_length });
    }
    Ok(())
}
