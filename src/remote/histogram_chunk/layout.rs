//! The layout a chunk's histograms share (schema, zero threshold, spans, custom bounds), how it
//! is chosen as buckets come and go, and its byte forms.

use crate::bits::{BitReader, BitWriter};
use crate::histogram::{Span, CUSTOM_BUCKETS_SCHEMA};
use crate::sample::HistogramSample;

use super::varbit::{read_varbit_int, read_varbit_uint, write_varbit_int, write_varbit_uint};
use super::HistogramChunkError;

/// The buckets of one side as (absolute index, count), in span order.
pub(super) fn indexed<'a>(spans: &'a [Span], counts: &'a [f64]) -> impl Iterator<Item = (i32, f64)> + 'a {
    bucket_indexes(spans).zip(counts.iter().copied())
}

/// The absolute index of every bucket the spans cover, in order (Prometheus' bucket iterator).
pub(super) fn bucket_indexes(spans: &[Span]) -> impl Iterator<Item = i32> + '_ {
    let mut next = 0i32;
    spans.iter().enumerate().flat_map(move |(k, s)| {
        let start = if k == 0 { s.offset } else { next.wrapping_add(s.offset) };
        next = start.wrapping_add(s.length as i32);
        (0..s.length as i32).map(move |j| start.wrapping_add(j))
    })
}

/// Spans covering exactly the sorted, distinct `indexes`.
pub(super) fn spans_of(indexes: &[i32]) -> Vec<Span> {
    let mut spans: Vec<Span> = Vec::new();
    let mut end = 0i32;
    for &i in indexes {
        match spans.last_mut() {
            Some(s) if i == end => s.length += 1,
            last => {
                let offset = if last.is_some() { i.wrapping_sub(end) } else { i };
                spans.push(Span { offset, length: 1 });
            }
        }
        end = i.wrapping_add(1);
    }
    spans
}

/// The spans of one side of a chunk: the first histogram's, replaced by a histogram's own when
/// it adds buckets and drops none (as Prometheus recodes a chunk to a new histogram's spans),
/// else by spans covering every bucket seen.
pub(super) fn chunk_spans<'a>(sides: impl Iterator<Item = &'a [Span]>) -> Vec<Span> {
    let mut spans: Vec<Span> = Vec::new();
    let mut set: Vec<i32> = Vec::new();
    for (k, s) in sides.enumerate() {
        let mut own: Vec<i32> = bucket_indexes(s).collect();
        own.sort_unstable();
        own.dedup();
        if k == 0 {
            (spans, set) = (s.to_vec(), own);
            continue;
        }
        let covers_old = set.iter().all(|i| own.binary_search(i).is_ok());
        if own == set || (!covers_old && own.iter().all(|i| set.binary_search(i).is_ok())) {
            continue;
        }
        if covers_old {
            (spans, set) = (s.to_vec(), own);
        } else {
            set.extend(own);
            set.sort_unstable();
            set.dedup();
            spans = spans_of(&set);
        }
    }
    spans
}

/// One side of a histogram brought to the chunk's spans: a count per bucket, 0 where missing.
pub(super) fn expand(chunk: &[Span], spans: &[Span], counts: &[f64]) -> Vec<f64> {
    let mut own: Vec<(i32, f64)> = indexed(spans, counts).collect();
    own.sort_by_key(|&(i, _)| i);
    bucket_indexes(chunk)
        .map(|i| own.binary_search_by_key(&i, |&(j, _)| j).ok().and_then(|k| own.get(k)).map_or(0.0, |&(_, c)| c))
        .collect()
}

/// The shared layout of a chunk's histograms.
#[derive(Debug, Default)]
pub(super) struct ChunkLayout {
    pub(super) schema: i32,
    pub(super) zero_threshold: f64,
    pub(super) positive: Vec<Span>,
    pub(super) negative: Vec<Span>,
    pub(super) custom_values: Vec<f64>,
}

impl ChunkLayout {
    /// The layout of the chunk's non-stale histograms (empty when all are stale markers).
    pub(super) fn of(samples: &[HistogramSample]) -> Self {
        let live = || samples.iter().map(|s| &*s.histogram).filter(|h| !h.is_stale());
        let Some(first) = live().next() else {
            return Self::default();
        };
        Self {
            schema: first.schema,
            zero_threshold: first.zero_threshold,
            positive: chunk_spans(live().map(|h| h.positive_spans.as_slice())),
            negative: chunk_spans(live().map(|h| h.negative_spans.as_slice())),
            custom_values: if first.schema == CUSTOM_BUCKETS_SCHEMA { first.custom_values.clone() } else { Vec::new() },
        }
    }

    pub(super) fn write(&self, w: &mut BitWriter) {
        write_zero_threshold(w, self.zero_threshold);
        write_varbit_int(w, i64::from(self.schema));
        for spans in [&self.positive, &self.negative] {
            write_varbit_uint(w, spans.len() as u64);
            for s in spans {
                write_varbit_uint(w, u64::from(s.length));
                write_varbit_int(w, i64::from(s.offset));
            }
        }
        if self.schema == CUSTOM_BUCKETS_SCHEMA {
            write_varbit_uint(w, self.custom_values.len() as u64);
            for &b in &self.custom_values {
                write_custom_bound(w, b);
            }
        }
    }

    pub(super) fn read(r: &mut BitReader<'_>) -> Result<Self, HistogramChunkError> {
        let zero_threshold = read_zero_threshold(r)?;
        let schema = i32::try_from(read_varbit_int(r)?).map_err(|_| HistogramChunkError("schema out of range"))?;
        let mut sides = [Vec::new(), Vec::new()];
        for spans in &mut sides {
            let n = read_varbit_uint(r)?;
            for _ in 0..n {
                let length = u32::try_from(read_varbit_uint(r)?).map_err(|_| HistogramChunkError("span too long"))?;
                let offset =
                    i32::try_from(read_varbit_int(r)?).map_err(|_| HistogramChunkError("span offset out of range"))?;
                spans.push(Span { offset, length });
            }
        }
        let mut custom_values = Vec::new();
        if schema == CUSTOM_BUCKETS_SCHEMA {
            for _ in 0..read_varbit_uint(r)? {
                custom_values.push(read_custom_bound(r)?);
            }
        }
        let [positive, negative] = sides;
        Ok(Self { schema, zero_threshold, positive, negative, custom_values })
    }

    pub(super) fn bucket_counts(&self) -> (usize, usize) {
        let n = |s: &[Span]| s.iter().map(|s| s.length as usize).sum();
        (n(&self.positive), n(&self.negative))
    }
}

pub(super) fn write_zero_threshold(w: &mut BitWriter, zt: f64) {
    if zt == 0.0 {
        w.write(0, 8);
        return;
    }
    let bits = zt.to_bits();
    let biased = ((bits >> 52) & 0x7ff) as i32;
    // A positive normal power of two 2^k is 0.5 * 2^(k+1): Go's `Frexp` gives (0.5, k+1).
    let exp = biased - 1023 + 1;
    if zt > 0.0 && bits & ((1 << 52) - 1) == 0 && biased != 0 && (-242..=11).contains(&exp) {
        w.write((exp + 243) as u64, 8);
        return;
    }
    w.write(255, 8);
    w.write(bits, 64);
}

pub(super) fn read_zero_threshold(r: &mut BitReader<'_>) -> Result<f64, HistogramChunkError> {
    Ok(match r.read(8)? {
        0 => 0.0,
        255 => f64::from_bits(r.read(64)?),
        // 0.5 * 2^(b - 243) = 2^(b - 244), a normal float for b in 1..=254.
        b => f64::from_bits(((b as i64 - 244 + 1023) as u64) << 52),
    })
}

pub(super) fn write_custom_bound(w: &mut BitWriter, b: f64) {
    let scaled = b * 1000.0;
    let whole = ((scaled.round() as u64) as f64) / 1000.0 == b;
    if !(0.0..=33_554_430.0).contains(&scaled) || !whole {
        w.write_bit(false);
        w.write(b.to_bits(), 64);
        return;
    }
    write_varbit_uint(w, scaled.round() as u64 + 1);
}

pub(super) fn read_custom_bound(r: &mut BitReader<'_>) -> Result<f64, HistogramChunkError> {
    match read_varbit_uint(r)? {
        0 => Ok(f64::from_bits(r.read(64)?)),
        v => Ok((v - 1) as f64 / 1000.0),
    }
}
