//! Encoding one chunk: the state of Prometheus' `HistogramAppender` and
//! `FloatHistogramAppender`.

use crate::bits::BitWriter;
use crate::remote::xor;
use crate::sample::HistogramSample;

use super::fields::{Fields, XorField};
use super::layout::ChunkLayout;
use super::varbit::{write_varbit_int, write_varbit_uint};
use super::{ResetHeader, HEADER_BYTES};

/// Encodes one planned chunk of `samples` (the whole slice is the chunk; at most `u16::MAX`).
pub fn encode(samples: &[HistogramSample], float: bool, header: ResetHeader) -> Vec<u8> {
    let samples = samples.get(..usize::from(u16::MAX)).unwrap_or(samples);
    let layout = ChunkLayout::of(samples);
    let mut w = BitWriter::with_capacity(HEADER_BYTES + 16 + samples.len() * 8);
    // `samples.len() <= u16::MAX` by the slice above.
    w.write(samples.len() as u64, 16);
    w.write(u64::from(header.byte()), 8);
    if float {
        let mut enc = FloatEncoder::default();
        for (i, s) in samples.iter().enumerate() {
            enc.append(&mut w, &layout, i == 0, s);
        }
    } else {
        let mut enc = IntegerEncoder::default();
        for (i, s) in samples.iter().enumerate() {
            enc.append(&mut w, &layout, i == 0, s);
        }
    }
    w.into_bytes()
}

/// State of Prometheus' `HistogramAppender`.
#[derive(Default)]
struct IntegerEncoder {
    t: i64,
    t_delta: i64,
    count: i64,
    count_delta: i64,
    zero_count: i64,
    zero_count_delta: i64,
    /// Per side, each bucket's difference from the bucket before it, and its last delta.
    buckets: [Vec<(i64, i64)>; 2],
    sum: u64,
    leading: u8,
    trailing: u8,
}

impl IntegerEncoder {
    fn append(&mut self, w: &mut BitWriter, layout: &ChunkLayout, first: bool, s: &HistogramSample) {
        let f = Fields::of(&s.histogram, layout);
        // Integer chunks hold integer histograms only (`encodes_as_integer`): exact below 2^53.
        let (count, zero_count) = (f.count as i64, f.zero_count as i64);
        let sides = [bucket_deltas(&f.positive), bucket_deltas(&f.negative)];
        let t = s.timestamp_ms;
        if first {
            layout.write(w);
            write_varbit_int(w, t);
            write_varbit_uint(w, count as u64);
            write_varbit_uint(w, zero_count as u64);
            w.write(f.sum.to_bits(), 64);
            (self.leading, self.trailing) = (0xff, 0);
            for (state, side) in self.buckets.iter_mut().zip(&sides) {
                *state = side.iter().map(|&b| (b, 0)).collect();
            }
            for &b in sides.iter().flatten() {
                write_varbit_int(w, b);
            }
        } else {
            let t_delta = t.wrapping_sub(self.t);
            let count_delta = count.wrapping_sub(self.count);
            let zero_count_delta = zero_count.wrapping_sub(self.zero_count);
            write_varbit_int(w, t_delta.wrapping_sub(self.t_delta));
            let stale = s.histogram.is_stale();
            let dod = |d: i64, prev: i64| if stale { 0 } else { d.wrapping_sub(prev) };
            write_varbit_int(w, dod(count_delta, self.count_delta));
            write_varbit_int(w, dod(zero_count_delta, self.zero_count_delta));
            xor::write_xor(w, f.sum.to_bits() ^ self.sum, &mut self.leading, &mut self.trailing);
            for (state, side) in self.buckets.iter_mut().zip(&sides) {
                for (st, &b) in state.iter_mut().zip(side) {
                    let delta = b.wrapping_sub(st.0);
                    write_varbit_int(w, delta.wrapping_sub(st.1));
                    *st = (b, delta);
                }
            }
            (self.t_delta, self.count_delta, self.zero_count_delta) = (t_delta, count_delta, zero_count_delta);
        }
        (self.t, self.count, self.zero_count, self.sum) = (t, count, zero_count, f.sum.to_bits());
    }
}

/// Absolute integer counts as differences from the bucket before.
fn bucket_deltas(counts: &[f64]) -> Vec<i64> {
    let mut prev = 0i64;
    counts
        .iter()
        .map(|&c| {
            let c = c as i64;
            let d = c.wrapping_sub(prev);
            prev = c;
            d
        })
        .collect()
}

/// State of Prometheus' `FloatHistogramAppender`: count, zero count, sum, then the buckets.
#[derive(Default)]
struct FloatEncoder {
    t: i64,
    t_delta: i64,
    fields: Vec<XorField>,
}

impl FloatEncoder {
    fn append(&mut self, w: &mut BitWriter, layout: &ChunkLayout, first: bool, s: &HistogramSample) {
        let f = Fields::of(&s.histogram, layout);
        let values = [f.count, f.zero_count, f.sum].into_iter().chain(f.positive).chain(f.negative);
        let t = s.timestamp_ms;
        if first {
            layout.write(w);
            write_varbit_int(w, t);
            self.fields = values.map(XorField::new).collect();
            for field in &self.fields {
                w.write(field.bits, 64);
            }
            self.t_delta = 0;
        } else {
            let t_delta = t.wrapping_sub(self.t);
            write_varbit_int(w, t_delta.wrapping_sub(self.t_delta));
            // A stale marker has no buckets: only count, zero count and sum are written.
            for (field, v) in self.fields.iter_mut().zip(values) {
                field.write(w, v);
            }
            self.t_delta = t_delta;
        }
        self.t = t;
    }
}
