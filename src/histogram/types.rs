//! The native histogram value in Prometheus' float form, and its conversions from and to the
//! integer form remote-write sends (delta-encoded `i64` buckets).

use crate::sample::{is_stale_marker, STALE_NAN_BITS};

use super::validate::ValidationError;

/// The schema of histograms with custom bucket bounds (NHCB): bucket `i` ends at
/// `custom_values[i]`.
pub const CUSTOM_BUCKETS_SCHEMA: i32 = -53;
/// The smallest exponential schema (buckets grow by a factor of 2^16).
pub const MIN_EXPONENTIAL_SCHEMA: i32 = -4;
/// The largest exponential schema (buckets grow by a factor of 2^(2^-8)).
pub const MAX_EXPONENTIAL_SCHEMA: i32 = 8;

/// Largest integer every smaller one of which an `f64` holds exactly: 2^53.
pub(crate) const MAX_EXACT_INTEGER: f64 = 9_007_199_254_740_992.0;

/// True for the exponential schemas `-4..=8`.
pub fn is_exponential_schema(schema: i32) -> bool {
    (MIN_EXPONENTIAL_SCHEMA..=MAX_EXPONENTIAL_SCHEMA).contains(&schema)
}

/// True for the custom buckets schema (-53).
pub fn is_custom_schema(schema: i32) -> bool {
    schema == CUSTOM_BUCKETS_SCHEMA
}

/// A run of consecutive buckets. The first span's `offset` is the index of its first bucket;
/// every further span starts `offset` buckets after the end of the span before it (so further
/// offsets of a valid histogram are never negative).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Span {
    /// Gap before the span (absolute start index for the first span).
    pub offset: i32,
    /// Number of buckets in the span.
    pub length: u32,
}

/// Whether a histogram follows a counter reset, as the sender knows it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum CounterResetHint {
    /// Not known; readers detect resets by comparing with the previous histogram.
    #[default]
    Unknown,
    /// A counter reset happened right before this histogram.
    CounterReset,
    /// No counter reset happened since the previous histogram.
    NotCounterReset,
    /// A gauge histogram: counts go up and down, resets do not apply.
    Gauge,
}

impl CounterResetHint {
    /// The number remote-write's `ResetHint` uses (0 unknown, 1 yes, 2 no, 3 gauge), also the
    /// 2-bit code of the chunk format.
    pub fn code(self) -> u8 {
        match self {
            Self::Unknown => 0,
            Self::CounterReset => 1,
            Self::NotCounterReset => 2,
            Self::Gauge => 3,
        }
    }

    /// The hint of a remote-write `ResetHint` number; `None` for numbers above 3.
    pub fn from_code(code: u8) -> Option<Self> {
        match code {
            0 => Some(Self::Unknown),
            1 => Some(Self::CounterReset),
            2 => Some(Self::NotCounterReset),
            3 => Some(Self::Gauge),
            _ => None,
        }
    }
}

/// One native histogram sample with absolute float counts, as PromQL sees it.
///
/// Invariants of a valid histogram are checked by [`Histogram::validate`]: the spans of each side
/// cover exactly as many buckets as the side has counts; exponential schemas have no custom
/// values; the custom schema has no zero bucket and no negative side.
#[derive(Clone, Debug, Default)]
pub struct Histogram {
    /// Counter reset information from the sender.
    pub counter_reset_hint: CounterResetHint,
    /// `-4..=8` (exponential: bucket bounds grow by 2^(2^-schema)) or -53 (custom bounds).
    pub schema: i32,
    /// Observations with an absolute value at most this fall into the zero bucket.
    pub zero_threshold: f64,
    /// Observations in the zero bucket.
    pub zero_count: f64,
    /// Total number of observations.
    pub count: f64,
    /// Sum of observations; Prometheus' stale NaN here marks the series stale.
    pub sum: f64,
    /// Spans of the positive buckets.
    pub positive_spans: Vec<Span>,
    /// Spans of the negative buckets (index `i` covers `[-base^i, -base^(i-1))`).
    pub negative_spans: Vec<Span>,
    /// Absolute counts of the positive buckets, one per bucket the spans cover.
    pub positive_buckets: Vec<f64>,
    /// Absolute counts of the negative buckets, one per bucket the spans cover.
    pub negative_buckets: Vec<f64>,
    /// Upper bounds of the custom buckets (schema -53 only), strictly increasing, without the
    /// implicit last +Inf.
    pub custom_values: Vec<f64>,
    /// The histogram came in as an integer histogram (remote-write's delta-encoded `i64`
    /// buckets); its counts are then non-negative integers. Results of arithmetic are float
    /// histograms (`false`). [`Histogram::equals`] ignores this flag.
    pub integer: bool,
}

/// The bucket layout of a histogram as a sender describes it, borrowed from a decoded message.
#[derive(Clone, Copy, Debug, Default)]
pub struct Layout<'a> {
    /// The schema.
    pub schema: i32,
    /// Width of the zero bucket.
    pub zero_threshold: f64,
    /// Spans of the positive buckets.
    pub positive_spans: &'a [Span],
    /// Spans of the negative buckets.
    pub negative_spans: &'a [Span],
    /// Custom bucket bounds (schema -53).
    pub custom_values: &'a [f64],
}

/// The counts of a histogram in remote-write's integer form: each bucket as the difference from
/// the bucket before it on the same side (the first from 0).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IntegerCounts {
    /// Total number of observations.
    pub count: u64,
    /// Observations in the zero bucket.
    pub zero_count: u64,
    /// Positive buckets, delta-encoded.
    pub positive_deltas: Vec<i64>,
    /// Negative buckets, delta-encoded.
    pub negative_deltas: Vec<i64>,
}

impl Histogram {
    /// Heap bytes held by the histogram's vectors (their capacities), for memory accounting.
    pub fn heap_bytes(&self) -> usize {
        (self.positive_spans.capacity() + self.negative_spans.capacity()) * std::mem::size_of::<Span>()
            + (self.positive_buckets.capacity() + self.negative_buckets.capacity() + self.custom_values.capacity())
                * std::mem::size_of::<f64>()
    }

    /// A histogram from remote-write's integer form: bucket counts are the running sums of the
    /// deltas. The result has `integer` set; it is not validated (see [`Histogram::validate`]).
    ///
    /// # Errors
    /// [`ValidationError::BucketCountOverflow`] when a running sum leaves `i64`, and
    /// [`ValidationError::CountNotExact`] for a count beyond 2^53, which an `f64` cannot hold
    /// exactly.
    pub fn from_integer_deltas(
        layout: Layout<'_>,
        count: u64,
        zero_count: u64,
        sum: f64,
        positive_deltas: &[i64],
        negative_deltas: &[i64],
        hint: CounterResetHint,
    ) -> Result<Self, ValidationError> {
        let mut h = Self::with_layout(layout, hint);
        h.count = exact_u64(count)?;
        h.zero_count = exact_u64(zero_count)?;
        h.sum = sum;
        h.positive_buckets = absolute_counts(positive_deltas)?;
        h.negative_buckets = absolute_counts(negative_deltas)?;
        h.integer = true;
        Ok(h)
    }

    /// A histogram from remote-write's float form (absolute counts). Not validated.
    pub fn from_float_counts(
        layout: Layout<'_>,
        count: f64,
        zero_count: f64,
        sum: f64,
        positive_counts: &[f64],
        negative_counts: &[f64],
        hint: CounterResetHint,
    ) -> Self {
        let mut h = Self::with_layout(layout, hint);
        h.count = count;
        h.zero_count = zero_count;
        h.sum = sum;
        h.positive_buckets = positive_counts.to_vec();
        h.negative_buckets = negative_counts.to_vec();
        h
    }

    fn with_layout(layout: Layout<'_>, hint: CounterResetHint) -> Self {
        Self {
            counter_reset_hint: hint,
            schema: layout.schema,
            zero_threshold: layout.zero_threshold,
            positive_spans: layout.positive_spans.to_vec(),
            negative_spans: layout.negative_spans.to_vec(),
            custom_values: layout.custom_values.to_vec(),
            ..Self::default()
        }
    }

    /// The counts in remote-write's integer form, for export; `None` unless every count is a
    /// non-negative integer of at most 2^53 (whatever the `integer` flag says).
    pub fn to_integer_deltas(&self) -> Option<IntegerCounts> {
        Some(IntegerCounts {
            count: to_u64(self.count)?,
            zero_count: to_u64(self.zero_count)?,
            positive_deltas: deltas(&self.positive_buckets)?,
            negative_deltas: deltas(&self.negative_buckets)?,
        })
    }

    /// The layout of this histogram, borrowed.
    pub fn layout(&self) -> Layout<'_> {
        Layout {
            schema: self.schema,
            zero_threshold: self.zero_threshold,
            positive_spans: &self.positive_spans,
            negative_spans: &self.negative_spans,
            custom_values: &self.custom_values,
        }
    }

    /// Prometheus' stale marker for a histogram series: everything empty, the sum the stale NaN.
    pub fn stale() -> Self {
        Self { sum: f64::from_bits(STALE_NAN_BITS), ..Self::default() }
    }

    /// True when the sum is Prometheus' stale NaN (bit-exact), whatever the other fields hold.
    pub fn is_stale(&self) -> bool {
        is_stale_marker(self.sum)
    }

    /// True when the schema is the custom buckets schema.
    pub fn uses_custom_buckets(&self) -> bool {
        is_custom_schema(self.schema)
    }

    /// Bit-for-bit identity of every field, including the hint, the `integer` flag, span
    /// structure and NaN payloads: what a codec must preserve.
    pub fn identical(&self, other: &Self) -> bool {
        let same_floats =
            |a: &[f64], b: &[f64]| a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits());
        self.counter_reset_hint == other.counter_reset_hint
            && self.schema == other.schema
            && self.integer == other.integer
            && same_floats(
                &[self.zero_threshold, self.zero_count, self.count, self.sum],
                &[other.zero_threshold, other.zero_count, other.count, other.sum],
            )
            && self.positive_spans == other.positive_spans
            && self.negative_spans == other.negative_spans
            && same_floats(&self.positive_buckets, &other.positive_buckets)
            && same_floats(&self.negative_buckets, &other.negative_buckets)
            && same_floats(&self.custom_values, &other.custom_values)
    }
}

/// `v` as an exactly representable `f64`.
fn exact_u64(v: u64) -> Result<f64, ValidationError> {
    if v > 1 << 53 {
        return Err(ValidationError::CountNotExact { value: v as f64 });
    }
    Ok(v as f64)
}

/// Running sums of `deltas`, each exactly representable.
fn absolute_counts(deltas: &[i64]) -> Result<Vec<f64>, ValidationError> {
    let mut out = Vec::with_capacity(deltas.len());
    let mut running = 0i64;
    for (i, &d) in deltas.iter().enumerate() {
        running = running.checked_add(d).ok_or(ValidationError::BucketCountOverflow { bucket: i })?;
        if running.unsigned_abs() > 1 << 53 {
            return Err(ValidationError::CountNotExact { value: running as f64 });
        }
        out.push(running as f64);
    }
    Ok(out)
}

/// `v` as a `u64` when it is a non-negative integer of at most 2^53.
fn to_u64(v: f64) -> Option<u64> {
    ((0.0..=MAX_EXACT_INTEGER).contains(&v) && v.fract() == 0.0).then_some(v as u64)
}

/// Bucket counts as deltas from the bucket before.
fn deltas(counts: &[f64]) -> Option<Vec<i64>> {
    let mut prev = 0i64;
    counts
        .iter()
        .map(|&c| {
            let c = to_u64(c)? as i64;
            let d = c - prev;
            prev = c;
            Some(d)
        })
        .collect()
}
