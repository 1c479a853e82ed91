//! The values one histogram stores in a chunk, and the state of one XOR-encoded value.

use crate::bits::{BitReader, BitWriter};
use crate::histogram::Histogram;
use crate::remote::xor;

use super::layout::{expand, ChunkLayout};
use super::HistogramChunkError;

/// Counts of one histogram on the chunk's layout, as the stale rule leaves them.
pub(super) struct Fields {
    pub(super) count: f64,
    pub(super) zero_count: f64,
    pub(super) sum: f64,
    pub(super) positive: Vec<f64>,
    pub(super) negative: Vec<f64>,
}

impl Fields {
    pub(super) fn of(h: &Histogram, layout: &ChunkLayout) -> Self {
        if h.is_stale() {
            // Prometheus encodes a stale marker as an empty histogram with the stale sum.
            return Self { count: 0.0, zero_count: 0.0, sum: h.sum, positive: Vec::new(), negative: Vec::new() };
        }
        Self {
            count: h.count,
            zero_count: h.zero_count,
            sum: h.sum,
            positive: expand(&layout.positive, &h.positive_spans, &h.positive_buckets),
            negative: expand(&layout.negative, &h.negative_spans, &h.negative_buckets),
        }
    }
}

/// One XOR-encoded field: its last bits and leading/trailing-zero window.
#[derive(Clone, Copy)]
pub(super) struct XorField {
    pub(super) bits: u64,
    pub(super) leading: u8,
    pub(super) trailing: u8,
}

impl XorField {
    pub(super) fn new(v: f64) -> Self {
        Self { bits: v.to_bits(), leading: 0xff, trailing: 0 }
    }

    pub(super) fn write(&mut self, w: &mut BitWriter, v: f64) {
        xor::write_xor(w, v.to_bits() ^ self.bits, &mut self.leading, &mut self.trailing);
        self.bits = v.to_bits();
    }

    pub(super) fn read(&mut self, r: &mut BitReader<'_>) -> Result<f64, HistogramChunkError> {
        self.bits = xor::read_xor(r, self.bits, &mut self.leading, &mut self.trailing)
            .map_err(|_| HistogramChunkError("bad xor value"))?;
        Ok(f64::from_bits(self.bits))
    }
}
