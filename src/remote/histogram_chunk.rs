//! Prometheus' histogram chunk encodings (`tsdb/chunkenc/histogram.go`, `float_histogram.go`,
//! `histogram_meta.go`, `varbit.go`), byte for byte, as remote read's `STREAMED_XOR_CHUNKS`
//! response carries them in chunks of type `HISTOGRAM` (integer histograms) and
//! `FLOAT_HISTOGRAM`. Deciding where chunks are cut ([`plan`]) is separate from encoding one
//! chunk ([`encode`]); [`decode`] reads a chunk back (tests and tools).
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

use crate::bits::{BitReader, BitWriter, EndOfBits};
use crate::histogram::{CounterResetHint, Histogram, Span, CUSTOM_BUCKETS_SCHEMA};
use crate::remote::xor::{self, SAMPLES_PER_CHUNK};
use crate::sample::HistogramSample;

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

/// One chunk to cut from a run of histogram samples: `samples[range]`, its encoding and header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Planned {
    /// Indexes of the chunk's samples in the run; never empty.
    pub range: std::ops::Range<usize>,
    /// `FLOAT_HISTOGRAM` rather than `HISTOGRAM`.
    pub float: bool,
    /// The counter reset header.
    pub header: ResetHeader,
}

/// Splits a run of histogram samples (ascending timestamps) into chunks as Prometheus cuts
/// them (module docs).
pub fn plan(samples: &[HistogramSample]) -> Vec<Planned> {
    let mut out: Vec<Planned> = Vec::new();
    for (i, s) in samples.iter().enumerate() {
        let cur = &s.histogram;
        let cut = match out.last() {
            None => Some(fresh_header(cur)),
            Some(open) => {
                // `open.range` is never empty and ends at `i`.
                let prev = &samples.get(i - 1).map_or(cur, |p| &p.histogram);
                let verdict = appendable(open, prev, cur);
                match verdict {
                    Ok(()) if open.range.len() >= SAMPLES_PER_CHUNK => {
                        Some(if is_gauge(cur) { ResetHeader::Gauge } else { ResetHeader::NotCounterReset })
                    }
                    Ok(()) => None,
                    Err(header) => Some(header),
                }
            }
        };
        match (cut, out.last_mut()) {
            (None, Some(open)) => open.range.end = i + 1,
            (header, _) => out.push(Planned {
                range: i..i + 1,
                float: !encodes_as_integer(cur),
                header: header.unwrap_or_default(),
            }),
        }
    }
    out
}

fn is_gauge(h: &Histogram) -> bool {
    h.counter_reset_hint == CounterResetHint::Gauge
}

/// Integer histograms whose counts fit the integer encoding go into `HISTOGRAM` chunks.
fn encodes_as_integer(h: &Histogram) -> bool {
    h.integer && h.to_integer_deltas().is_some()
}

/// The header of a chunk that continues no chunk of its kind.
fn fresh_header(h: &Histogram) -> ResetHeader {
    match h.counter_reset_hint {
        CounterResetHint::Gauge => ResetHeader::Gauge,
        CounterResetHint::CounterReset => ResetHeader::CounterReset,
        _ => ResetHeader::Unknown,
    }
}

/// Whether `cur` may follow `prev` (the last histogram of `open`) in the same chunk, as
/// Prometheus' `appendable`/`appendableGauge` decide; otherwise the header of the new chunk.
fn appendable(open: &Planned, prev: &Histogram, cur: &Histogram) -> Result<(), ResetHeader> {
    if !cur.is_stale() && open.float == encodes_as_integer(cur) {
        return Err(fresh_header(cur));
    }
    let open_gauge = open.header == ResetHeader::Gauge;
    let same_layout = prev.schema == cur.schema
        && prev.zero_threshold == cur.zero_threshold
        && (prev.schema != CUSTOM_BUCKETS_SCHEMA || prev.custom_values == cur.custom_values);
    if is_gauge(cur) {
        if !open_gauge || (!cur.is_stale() && (prev.is_stale() || !same_layout)) {
            return Err(ResetHeader::Gauge);
        }
        return Ok(());
    }
    if open_gauge {
        return Err(ResetHeader::Unknown);
    }
    if cur.counter_reset_hint == CounterResetHint::CounterReset {
        return Err(ResetHeader::CounterReset);
    }
    if cur.is_stale() {
        return Ok(());
    }
    if prev.is_stale() {
        return Err(ResetHeader::Unknown);
    }
    if cur.count < prev.count {
        return Err(ResetHeader::CounterReset);
    }
    if prev.schema != cur.schema || prev.zero_threshold != cur.zero_threshold {
        return Err(ResetHeader::Unknown);
    }
    if !same_layout || cur.zero_count < prev.zero_count || bucket_went_down(prev, cur) {
        return Err(ResetHeader::CounterReset);
    }
    Ok(())
}

/// True when a bucket of `cur` holds less than in `prev` (a bucket missing counts as 0).
fn bucket_went_down(prev: &Histogram, cur: &Histogram) -> bool {
    let side = |ps: &[Span], pb: &[f64], cs: &[Span], cb: &[f64]| {
        let cur: Vec<(i32, f64)> = indexed(cs, cb).collect();
        indexed(ps, pb).any(|(i, p)| {
            let c = cur.binary_search_by_key(&i, |&(j, _)| j).ok().and_then(|k| cur.get(k)).map_or(0.0, |&(_, c)| c);
            c < p
        }) || cur.iter().any(|&(_, c)| c < 0.0)
    };
    side(&prev.positive_spans, &prev.positive_buckets, &cur.positive_spans, &cur.positive_buckets)
        || side(&prev.negative_spans, &prev.negative_buckets, &cur.negative_spans, &cur.negative_buckets)
}

/// The buckets of one side as (absolute index, count), in span order.
fn indexed<'a>(spans: &'a [Span], counts: &'a [f64]) -> impl Iterator<Item = (i32, f64)> + 'a {
    bucket_indexes(spans).zip(counts.iter().copied())
}

/// The absolute index of every bucket the spans cover, in order (Prometheus' bucket iterator).
fn bucket_indexes(spans: &[Span]) -> impl Iterator<Item = i32> + '_ {
    let mut next = 0i32;
    spans.iter().enumerate().flat_map(move |(k, s)| {
        let start = if k == 0 { s.offset } else { next.wrapping_add(s.offset) };
        next = start.wrapping_add(s.length as i32);
        (0..s.length as i32).map(move |j| start.wrapping_add(j))
    })
}

/// Spans covering exactly the sorted, distinct `indexes`.
fn spans_of(indexes: &[i32]) -> Vec<Span> {
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
fn chunk_spans<'a>(sides: impl Iterator<Item = &'a [Span]>) -> Vec<Span> {
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
fn expand(chunk: &[Span], spans: &[Span], counts: &[f64]) -> Vec<f64> {
    let mut own: Vec<(i32, f64)> = indexed(spans, counts).collect();
    own.sort_by_key(|&(i, _)| i);
    bucket_indexes(chunk)
        .map(|i| own.binary_search_by_key(&i, |&(j, _)| j).ok().and_then(|k| own.get(k)).map_or(0.0, |&(_, c)| c))
        .collect()
}

/// The shared layout of a chunk's histograms.
#[derive(Debug, Default)]
struct ChunkLayout {
    schema: i32,
    zero_threshold: f64,
    positive: Vec<Span>,
    negative: Vec<Span>,
    custom_values: Vec<f64>,
}

impl ChunkLayout {
    /// The layout of the chunk's non-stale histograms (empty when all are stale markers).
    fn of(samples: &[HistogramSample]) -> Self {
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

    fn write(&self, w: &mut BitWriter) {
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

    fn read(r: &mut BitReader<'_>) -> Result<Self, HistogramChunkError> {
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

    fn bucket_counts(&self) -> (usize, usize) {
        let n = |s: &[Span]| s.iter().map(|s| s.length as usize).sum();
        (n(&self.positive), n(&self.negative))
    }
}

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

/// Counts of one histogram on the chunk's layout, as the stale rule leaves them.
struct Fields {
    count: f64,
    zero_count: f64,
    sum: f64,
    positive: Vec<f64>,
    negative: Vec<f64>,
}

impl Fields {
    fn of(h: &Histogram, layout: &ChunkLayout) -> Self {
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

/// One XOR-encoded field: its last bits and leading/trailing-zero window.
#[derive(Clone, Copy)]
struct XorField {
    bits: u64,
    leading: u8,
    trailing: u8,
}

impl XorField {
    fn new(v: f64) -> Self {
        Self { bits: v.to_bits(), leading: 0xff, trailing: 0 }
    }

    fn write(&mut self, w: &mut BitWriter, v: f64) {
        xor::write_xor(w, v.to_bits() ^ self.bits, &mut self.leading, &mut self.trailing);
        self.bits = v.to_bits();
    }

    fn read(&mut self, r: &mut BitReader<'_>) -> Result<f64, HistogramChunkError> {
        self.bits = xor::read_xor(r, self.bits, &mut self.leading, &mut self.trailing)
            .map_err(|_| HistogramChunkError("bad xor value"))?;
        Ok(f64::from_bits(self.bits))
    }
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
        let (t, f) = if float { dec.next_float(&mut r, &layout, i == 0)? } else { dec.next_integer(&mut r, &layout, i == 0)? };
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

/// True when `x` fits `nbits` bits in Prometheus' varbit sense.
fn bit_range(x: i64, nbits: u32) -> bool {
    -((1i64 << (nbits - 1)) - 1) <= x && x <= 1i64 << (nbits - 1)
}

/// Prefix (value, width) and payload width of each varbit bucket, smallest first.
const VARBIT: [(u64, u32, u32); 8] = [
    (0b10, 2, 3),
    (0b110, 3, 6),
    (0b1110, 4, 9),
    (0b11110, 5, 12),
    (0b11_1110, 6, 18),
    (0b111_1110, 7, 25),
    (0b1111_1110, 8, 56),
    (0b1111_1111, 8, 64),
];

fn write_varbit_int(w: &mut BitWriter, v: i64) {
    if v == 0 {
        w.write_bit(false);
        return;
    }
    let (prefix, plen, bits) = VARBIT.into_iter().find(|&(_, _, n)| n == 64 || bit_range(v, n)).unwrap_or(VARBIT[7]);
    w.write(prefix, plen);
    w.write(v as u64, bits);
}

fn write_varbit_uint(w: &mut BitWriter, v: u64) {
    if v == 0 {
        w.write_bit(false);
        return;
    }
    let (prefix, plen, bits) =
        VARBIT.into_iter().find(|&(_, _, n)| n == 64 || v.leading_zeros() >= 64 - n).unwrap_or(VARBIT[7]);
    w.write(prefix, plen);
    w.write(v, bits);
}

/// The payload width a varbit prefix announces (0 for the value 0).
fn read_varbit_width(r: &mut BitReader<'_>) -> Result<u32, HistogramChunkError> {
    let mut ones = 0usize;
    while ones < 8 && r.bit()? {
        ones += 1;
    }
    Ok(match ones {
        0 => 0,
        // Prefixes of 1..=7 ones are followed by a zero bit, 8 ones by none.
        k => VARBIT.get(k - 1).map_or(64, |&(_, _, n)| n),
    })
}

fn read_varbit_int(r: &mut BitReader<'_>) -> Result<i64, HistogramChunkError> {
    let n = read_varbit_width(r)?;
    if n == 0 {
        return Ok(0);
    }
    let mut bits = r.read(n)?;
    if n < 64 && bits > 1 << (n - 1) {
        bits = bits.wrapping_sub(1 << n);
    }
    Ok(bits as i64)
}

fn read_varbit_uint(r: &mut BitReader<'_>) -> Result<u64, HistogramChunkError> {
    let n = read_varbit_width(r)?;
    if n == 0 {
        return Ok(0);
    }
    Ok(r.read(n)?)
}

fn write_zero_threshold(w: &mut BitWriter, zt: f64) {
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

fn read_zero_threshold(r: &mut BitReader<'_>) -> Result<f64, HistogramChunkError> {
    Ok(match r.read(8)? {
        0 => 0.0,
        255 => f64::from_bits(r.read(64)?),
        // 0.5 * 2^(b - 243) = 2^(b - 244), a normal float for b in 1..=254.
        b => f64::from_bits(((b as i64 - 244 + 1023) as u64) << 52),
    })
}

fn write_custom_bound(w: &mut BitWriter, b: f64) {
    let scaled = b * 1000.0;
    let whole = ((scaled.round() as u64) as f64) / 1000.0 == b;
    if scaled < 0.0 || scaled > 33_554_430.0 || !whole {
        w.write_bit(false);
        w.write(b.to_bits(), 64);
        return;
    }
    write_varbit_uint(w, scaled.round() as u64 + 1);
}

fn read_custom_bound(r: &mut BitReader<'_>) -> Result<f64, HistogramChunkError> {
    match read_varbit_uint(r)? {
        0 => Ok(f64::from_bits(r.read(64)?)),
        v => Ok((v - 1) as f64 / 1000.0),
    }
}

#[cfg(test)]
#[path = "histogram_chunk_tests.rs"]
mod tests;
