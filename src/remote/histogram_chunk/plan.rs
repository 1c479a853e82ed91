//! Where a run of histogram samples is cut into chunks: Prometheus' appender rules.

use crate::histogram::{CounterResetHint, Histogram, Span, CUSTOM_BUCKETS_SCHEMA};
use crate::remote::xor::SAMPLES_PER_CHUNK;
use crate::sample::HistogramSample;

use super::layout::indexed;
use super::ResetHeader;

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
pub(super) fn encodes_as_integer(h: &Histogram) -> bool {
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
