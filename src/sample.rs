//! Samples and the write batch every ingest protocol decodes into.

use crate::labels::Labels;

/// Smallest accepted timestamp: 1970-01-01T00:00:00Z.
pub const MIN_TIMESTAMP_MS: i64 = 0;
/// Largest accepted timestamp: 2262-04-11T23:47:16.854Z, the end of Prometheus' time range
/// (`i64::MAX` nanoseconds).
pub const MAX_TIMESTAMP_MS: i64 = 9_223_372_036_854;

/// Bit pattern of the Prometheus staleness marker, a NaN that must be stored bit-exact.
pub const STALE_NAN_BITS: u64 = 0x7ff0_0000_0000_0002;

/// Returns true when `v` is the Prometheus staleness marker (not just any NaN).
pub fn is_stale_marker(v: f64) -> bool {
    v.to_bits() == STALE_NAN_BITS
}

/// One point: milliseconds since the Unix epoch and a float value (any bit pattern).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sample {
    /// Milliseconds since the Unix epoch, within `MIN_TIMESTAMP_MS..=MAX_TIMESTAMP_MS`.
    pub timestamp_ms: i64,
    /// The value; NaN payloads (staleness markers) are preserved.
    pub value: f64,
}

impl Sample {
    /// Builds a sample.
    pub fn new(timestamp_ms: i64, value: f64) -> Self {
        Self { timestamp_ms, value }
    }
}

/// A timestamp outside the supported range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("timestamp {0} ms is outside the supported range 1970-01-01..2262-04-11 ({MIN_TIMESTAMP_MS}..={MAX_TIMESTAMP_MS} ms)")]
pub struct TimestampOutOfRange(pub i64);

/// Checks that a timestamp lies in the supported range.
///
/// # Errors
/// [`TimestampOutOfRange`] naming the timestamp.
pub fn check_timestamp(ts_ms: i64) -> Result<(), TimestampOutOfRange> {
    if (MIN_TIMESTAMP_MS..=MAX_TIMESTAMP_MS).contains(&ts_ms) {
        Ok(())
    } else {
        Err(TimestampOutOfRange(ts_ms))
    }
}

/// The samples of one series. In a [`WriteBatch`] they may come in any order; as a read
/// result they must be sorted by ascending timestamp with no duplicate timestamps.
#[derive(Clone, Debug, PartialEq)]
pub struct SeriesSamples {
    /// The series identity.
    pub labels: Labels,
    /// The points.
    pub samples: Vec<Sample>,
}

/// What every ingest protocol decodes into: validated series, committed atomically as a whole.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WriteBatch {
    /// The series and their samples. Labels must be validated and carry `__name__`;
    /// timestamps must pass [`check_timestamp`].
    pub series: Vec<SeriesSamples>,
}

impl WriteBatch {
    /// Total number of samples in the batch.
    pub fn sample_count(&self) -> usize {
        self.series.iter().map(|s| s.samples.len()).sum()
    }
}
