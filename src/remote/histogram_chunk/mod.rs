//! Prometheus' histogram chunk encodings (`tsdb/chunkenc/histogram.go`, `float_histogram.go`,
//! `histogram_meta.go`, `varbit.go`), byte for byte, as remote read's `STREAMED_XOR_CHUNKS`
//! response carries them in chunks of type `HISTOGRAM` (integer histograms) and
//! `FLOAT_HISTOGRAM`. Deciding where chunks are cut ([`plan`], `plan.rs`) is separate from
//! encoding one chunk ([`encode`], `encode.rs`); [`decode`] (`decode.rs`) reads a chunk back
//! (tests and tools). `layout.rs` holds the layout every histogram of a chunk shares, `fields.rs`
//! the values each stores, `varbit.rs` Prometheus' variable-width integers.
//!
//! | part | encoding |
//! |---|---|
//! | header | number of histograms, `u16` big-endian |
//! | flags | one byte: the top 2 bits are the counter reset header (`00` unknown, `10` counter reset, `01` no counter reset, `11` gauge), the rest 0 |
//! | layout | zero threshold, schema (**varbit int**), positive spans, negative spans, and for schema -53 the custom bounds |
//! | histogram 0 | timestamp (**varbit int**), then the fields raw (below) |
//! | histogram n | timestamp delta-of-delta (**varbit int**), then the fields as deltas (below) |
//!
//! The stream is one bit stream from the fourth byte on (most significant bit first, the last
//! byte padded with zeros); only the first histogram writes the layout, which every histogram
//! of the chunk shares.
//!
//! - **varbit int**: `0` for 0; else a prefix and the value in two's complement of that many
//!   bits: `10`+3 (-3..=4), `110`+6 (-31..=32), `1110`+9, `11110`+12, `111110`+18, `1111110`+25,
//!   `11111110`+56, `11111111`+64. **varbit uint**: the same prefixes and widths, unsigned.
//! - **zero threshold**: one byte: 0 for 0; `e + 243` for a power of two `0.5 * 2^e` with
//!   `-242 <= e <= 11` (2^-128 is 116); else 255 and the 64 bits of the float.
//! - **spans**: their number (**varbit uint**), then per span its length (**varbit uint**) and
//!   offset (**varbit int**).
//! - **custom bounds**: their number (**varbit uint**), then each bound: `round(b*1000) + 1` as
//!   **varbit uint** when `b*1000` is a whole number in `0..=33554430`, else a `0` bit and the
//!   64 bits of the float.
//! - **xor**: a float against the previous value of the same field, as in XOR chunks
//!   ([`crate::remote::xor`]), each field with its own leading/trailing-zero window.
//!
//! Fields of `HISTOGRAM` (integer) chunks, in this order: count and zero count (**varbit uint**
//! raw, then delta-of-delta as **varbit int**), sum (64 raw bits, then **xor**), each positive
//! then each negative bucket as its difference from the bucket before it on the same side
//! (**varbit int** raw, then the delta-of-delta of that difference). `FLOAT_HISTOGRAM` chunks:
//! count, zero count, sum, then every bucket's absolute count, all 64 raw bits, then **xor**.
//! A stale marker (the sum is Prometheus' stale NaN) writes no buckets (and, in integer chunks,
//! delta-of-deltas of 0 for the counts); only stale markers follow it in its chunk.
//!
//! Chunks are cut as Prometheus' appenders cut them: at 120 histograms, when integer and float
//! histograms alternate, when the schema, zero threshold or custom bounds change, on a counter
//! reset (the `CounterReset` hint, or a count, zero count or bucket that went down), when gauge
//! and counter histograms alternate, and after a stale marker. Buckets that appear or disappear
//! within a chunk are kept as Prometheus recodes them: the chunk's layout covers every bucket of
//! its histograms (missing ones read as 0). Within a counter chunk every histogram after the
//! first reads back as `NotCounterReset`, as from Prometheus' own chunks.

mod decode;
mod encode;
mod fields;
mod layout;
mod plan;
mod varbit;

pub use decode::{decode, Decoded};
pub use encode::encode;
pub use plan::{plan, Planned};

use crate::bits::EndOfBits;

/// Bytes before the bit stream: the sample count and the flags byte.
const HEADER_BYTES: usize = 3;

/// A chunk that is not valid histogram chunk data.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("corrupt histogram chunk: {0}")]
pub struct HistogramChunkError(&'static str);

impl From<EndOfBits> for HistogramChunkError {
    fn from(_: EndOfBits) -> Self {
        Self("unexpected end of data")
    }
}

/// The counter reset header: the top two bits of a chunk's flags byte.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ResetHeader {
    /// Whether the chunk starts with a counter reset is not known.
    #[default]
    Unknown,
    /// The chunk was cut because of a counter reset.
    CounterReset,
    /// The chunk continues the previous one without a reset.
    NotCounterReset,
    /// The chunk holds gauge histograms.
    Gauge,
}

impl ResetHeader {
    /// The flags byte.
    pub fn byte(self) -> u8 {
        match self {
            Self::Unknown => 0b0000_0000,
            Self::CounterReset => 0b1000_0000,
            Self::NotCounterReset => 0b0100_0000,
            Self::Gauge => 0b1100_0000,
        }
    }

    /// The header of a flags byte (its low 6 bits ignored).
    pub fn from_byte(b: u8) -> Self {
        match b & 0b1100_0000 {
            0b1000_0000 => Self::CounterReset,
            0b0100_0000 => Self::NotCounterReset,
            0b1100_0000 => Self::Gauge,
            _ => Self::Unknown,
        }
    }
}

#[cfg(test)]
mod tests;
