//! Histogram chunks: a strictly ascending run of `(timestamp ms, Histogram)` samples in few
//! bytes, decoded back bit for bit. Byte layout: `docs/format.md`, *Histogram chunks*.
//!
//! In the spirit of Prometheus' histogram chunks: the layout (schema, zero threshold, spans,
//! custom bounds) is written only when it changes, timestamps as delta-of-deltas, the sum XORed
//! with the previous one. Integral counts go per bucket as the delta minus a prediction (the
//! previous delta, as Prometheus' delta-of-deltas, or a running mean of the deltas, whichever
//! makes the chunk smaller), Rice-coded with a parameter that adapts to each bucket; other counts
//! are XORed. Unlike Prometheus, one chunk holds any sequence: layout, hint and integer flag may
//! change from sample to sample, and a bucket keeps its history across layout changes.
//!
//! Decoding takes untrusted bytes: it never panics, sizes every allocation by the bits left in the
//! input, and stops at the first error. (Each sample owns copies of its layout, so the decoded
//! samples together can take more memory than the input times a constant: iterate with
//! [`Samples`] to hold one at a time.)

mod decode;
mod encode;
mod state;
mod varbit;

pub use decode::{decode, sample_count, Samples};
pub use encode::{encode, encode_fast};

/// First byte of a histogram chunk: kind 0xA (histogram chunk), version 1.
pub const MARKER: u8 = 0xA1;

/// Why samples cannot be encoded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EncodeError {
    /// No samples: a chunk holds at least one.
    #[error("a histogram chunk needs at least one sample")]
    Empty,
    /// A timestamp not above the one before.
    #[error("sample {index}: timestamp {timestamp} ms is not above the previous one")]
    NotAscending {
        /// 0-based number of the sample.
        index: usize,
        /// Its timestamp.
        timestamp: i64,
    },
    /// A histogram whose spans cover a different number of buckets than it has counts.
    #[error("sample {index}: spans do not cover exactly the bucket counts")]
    SpansBucketsMismatch {
        /// 0-based number of the sample.
        index: usize,
    },
}

/// Why bytes are not a histogram chunk.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The first byte is not [`MARKER`] (or there is none).
    #[error("not a histogram chunk (first byte {0:?})")]
    Marker(Option<u8>),
    /// Unknown value mode byte.
    #[error("unknown histogram chunk value mode {0}")]
    Mode(u8),
    /// A header varint is truncated or too long.
    #[error("histogram chunk header: {0}")]
    Header(#[from] crate::varint::VarintError),
    /// The header's sample count is 0 or more than the bits could hold.
    #[error("histogram chunk sample count {0} is impossible for its length")]
    SampleCount(u64),
    /// The bits ended inside a sample.
    #[error("histogram chunk truncated")]
    Truncated,
    /// A layout needs more buckets, spans or bounds than the bits left could describe.
    #[error("histogram chunk layout too large for its length")]
    LayoutTooLarge,
    /// A number does not fit its field.
    #[error("histogram chunk field out of range: {0}")]
    OutOfRange(&'static str),
    /// Bits that no encoder writes.
    #[error("corrupt histogram chunk: {0}")]
    Corrupt(&'static str),
    /// A timestamp not above the one before.
    #[error("histogram chunk timestamps not strictly ascending at sample {0}")]
    NotAscending(usize),
    /// Bytes after the last sample, or padding bits that are not zero.
    #[error("histogram chunk has trailing data")]
    TrailingData,
}

/// Zigzag: small magnitudes of either sign become small unsigned numbers.
fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(u: u64) -> i64 {
    ((u >> 1) as i64) ^ -((u & 1) as i64)
}

#[cfg(test)]
mod tests;
