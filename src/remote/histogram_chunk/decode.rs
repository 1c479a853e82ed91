//! Decoding one chunk: the state of Prometheus' histogram iterators.

use crate::bits::BitReader;
use crate::histogram::{CounterResetHint, Histogram};
use crate::remote::xor;

use super::fields::{Fields, XorField};
use super::layout::ChunkLayout;
use super::varbit::{read_varbit_int, read_varbit_uint};
use super::{HistogramChunkError, ResetHeader};

/// A decoded chunk: its header and histograms. Hints are as Prometheus' iterators give them:
/// `Gauge` in a gauge chunk; otherwise `Unknown` for the first histogram and `NotCounterReset`
/// for the others.
#[derive(Clone, Debug)]
pub struct Decoded {
    /// The counter reset header.
    pub header: ResetHeader,
    /// The histograms with their timestamps; `integer` is set for a `HISTOGRAM` chunk.
    pub histograms: Vec<(i64, Histogram)>,
}

/// Decodes one chunk of type `HISTOGRAM` (`float == false`) or `FLOAT_HISTOGRAM`.
///
/// # Errors
/// [`HistogramChunkError`] when the data ends early or holds impossible values.
pub fn decode(data: &[u8], float: bool) -> Result<Decoded, HistogramChunkError> {
    let mut r = BitReader::new(data);
    let n = r.read(16)? as usize;
    let header = ResetHeader::from_byte(r.read(8)? as u8);
    let mut out = Vec::with_capacity(n.min(data.len()));
    let mut layout = ChunkLayout::default();
    let mut dec = Decoder::default();
    for i in 0..n {
        if i == 0 {
            layout = ChunkLayout::read(&mut r)?;
        }
        let (t, f) =
            if float { dec.next_float(&mut r, &layout, i == 0)? } else { dec.next_integer(&mut r, &layout, i == 0)? };
        let hint = match (header, i) {
            (ResetHeader::Gauge, _) => CounterResetHint::Gauge,
            (_, 0) => CounterResetHint::Unknown,
            _ => CounterResetHint::NotCounterReset,
        };
        out.push((t, histogram_of(&layout, f, hint, !float)));
    }
    Ok(Decoded { header, histograms: out })
}

fn histogram_of(layout: &ChunkLayout, f: Fields, hint: CounterResetHint, integer: bool) -> Histogram {
    if crate::sample::is_stale_marker(f.sum) {
        return Histogram { integer, ..Histogram::stale() };
    }
    Histogram {
        counter_reset_hint: hint,
        schema: layout.schema,
        zero_threshold: layout.zero_threshold,
        zero_count: f.zero_count,
        count: f.count,
        sum: f.sum,
        positive_spans: layout.positive.clone(),
        negative_spans: layout.negative.clone(),
        positive_buckets: f.positive,
        negative_buckets: f.negative,
        custom_values: layout.custom_values.clone(),
        integer,
    }
}

/// State of Prometheus' histogram iterators.
#[derive(Default)]
struct Decoder {
    t: i64,
    t_delta: i64,
    count: i64,
    count_delta: i64,
    zero_count: i64,
    zero_count_delta: i64,
    buckets: [Vec<(i64, i64)>; 2],
    sum: u64,
    leading: u8,
    trailing: u8,
    fields: Vec<XorField>,
}

impl Decoder {
    fn time(&mut self, r: &mut BitReader<'_>, first: bool) -> Result<i64, HistogramChunkError> {
        if first {
            self.t = read_varbit_int(r)?;
        } else {
            self.t_delta = self.t_delta.wrapping_add(read_varbit_int(r)?);
            self.t = self.t.wrapping_add(self.t_delta);
        }
        Ok(self.t)
    }

    fn next_integer(
        &mut self,
        r: &mut BitReader<'_>,
        layout: &ChunkLayout,
        first: bool,
    ) -> Result<(i64, Fields), HistogramChunkError> {
        let t = self.time(r, first)?;
        let (np, nn) = layout.bucket_counts();
        if first {
            self.count = read_varbit_uint(r)? as i64;
            self.zero_count = read_varbit_uint(r)? as i64;
            self.sum = r.read(64)?;
            for (state, n) in self.buckets.iter_mut().zip([np, nn]) {
                state.clear();
                for _ in 0..n {
                    state.push((read_varbit_int(r)?, 0));
                }
            }
        } else {
            self.count_delta = self.count_delta.wrapping_add(read_varbit_int(r)?);
            self.count = self.count.wrapping_add(self.count_delta);
            self.zero_count_delta = self.zero_count_delta.wrapping_add(read_varbit_int(r)?);
            self.zero_count = self.zero_count.wrapping_add(self.zero_count_delta);
            self.sum = xor::read_xor(r, self.sum, &mut self.leading, &mut self.trailing)
                .map_err(|_| HistogramChunkError("bad xor sum"))?;
            if !crate::sample::is_stale_marker(f64::from_bits(self.sum)) {
                for st in self.buckets.iter_mut().flatten() {
                    st.1 = st.1.wrapping_add(read_varbit_int(r)?);
                    st.0 = st.0.wrapping_add(st.1);
                }
            }
        }
        let absolute = |side: &[(i64, i64)]| {
            let mut run = 0i64;
            side.iter()
                .map(|&(d, _)| {
                    run = run.wrapping_add(d);
                    run as f64
                })
                .collect()
        };
        let [p, n] = &self.buckets;
        let fields = Fields {
            count: self.count as u64 as f64,
            zero_count: self.zero_count as u64 as f64,
            sum: f64::from_bits(self.sum),
            positive: absolute(p),
            negative: absolute(n),
        };
        Ok((t, fields))
    }

    fn next_float(
        &mut self,
        r: &mut BitReader<'_>,
        layout: &ChunkLayout,
        first: bool,
    ) -> Result<(i64, Fields), HistogramChunkError> {
        let t = self.time(r, first)?;
        let (np, nn) = layout.bucket_counts();
        if first {
            self.fields.clear();
            for _ in 0..3 + np + nn {
                self.fields.push(XorField { bits: r.read(64)?, leading: 0, trailing: 0 });
            }
        } else {
            let mut stale = false;
            for (k, field) in self.fields.iter_mut().enumerate() {
                if k == 3 && stale {
                    break;
                }
                let v = field.read(r)?;
                stale = k == 2 && crate::sample::is_stale_marker(v);
            }
        }
        let v = |k: usize| self.fields.get(k).map_or(0.0, |f| f64::from_bits(f.bits));
        let fields = Fields {
            count: v(0),
            zero_count: v(1),
            sum: v(2),
            positive: (3..3 + np).map(v).collect(),
            negative: (3 + np..3 + np + nn).map(v).collect(),
        };
        Ok((t, fields))
    }
}
