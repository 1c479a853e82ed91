//! OTLP exponential histogram points as native histograms, as Prometheus' OTLP translator
//! converts them (`exponentialToNativeHistogram`): the OTLP scale is the schema (scales above 8
//! are merged down to schema 8; below -4 is refused), OTLP bucket `i` (covering
//! `(base^i, base^(i+1)]`) is Prometheus bucket `i + 1` (covering `(base^(i-1), base^i]`), the
//! zero bucket keeps its count with the point's zero threshold (Prometheus' default `1e-128`
//! when the point has none), counts stay integers, and a point flagged "no recorded value"
//! becomes a stale marker. Pure: no I/O.

use std::collections::BTreeMap;

use opentelemetry_proto::tonic::metrics::v1::exponential_histogram_data_point::Buckets;
use opentelemetry_proto::tonic::metrics::v1::ExponentialHistogramDataPoint;

use crate::histogram::{CounterResetHint, Histogram, Span, MAX_EXPONENTIAL_SCHEMA, MIN_EXPONENTIAL_SCHEMA};
use crate::sample::STALE_NAN_BITS;

/// Zero threshold of a point that sets none (Prometheus' `defaultZeroThreshold`).
const DEFAULT_ZERO_THRESHOLD: f64 = 1e-128;
/// Zero buckets kept inside a span rather than starting a new one (a span costs more).
const MAX_GAP: i32 = 2;

/// The native histogram of one exponential histogram point.
///
/// # Errors
/// A message for a scale below -4, a zero count with a non-zero sum, or buckets that do not fit
/// the count (the result fails [`Histogram::validate`]).
pub fn to_native(p: &ExponentialHistogramDataPoint) -> Result<Histogram, String> {
    if p.scale < MIN_EXPONENTIAL_SCHEMA {
        return Err(format!(
            "an exponential histogram point has scale {}: native histograms need a scale of at least {MIN_EXPONENTIAL_SCHEMA}",
            p.scale
        ));
    }
    let scale_down = (p.scale - MAX_EXPONENTIAL_SCHEMA).max(0);
    let (positive_spans, positive_buckets) = layout(p.positive.as_ref(), scale_down);
    let (negative_spans, negative_buckets) = layout(p.negative.as_ref(), scale_down);
    let mut h = Histogram {
        counter_reset_hint: CounterResetHint::Unknown,
        schema: p.scale - scale_down,
        zero_threshold: if p.zero_threshold > 0.0 { p.zero_threshold } else { DEFAULT_ZERO_THRESHOLD },
        zero_count: p.zero_count as f64,
        count: p.count as f64,
        sum: p.sum.unwrap_or(0.0),
        positive_spans,
        negative_spans,
        positive_buckets,
        negative_buckets,
        integer: true,
        ..Default::default()
    };
    if p.flags & 1 == 1 {
        h.sum = f64::from_bits(STALE_NAN_BITS);
        return Ok(h);
    }
    if p.count == 0 && h.sum != 0.0 {
        return Err("an exponential histogram point has a zero count but a non-zero sum".to_owned());
    }
    h.validate().map_err(|e| format!("an exponential histogram point is not a valid histogram: {e}"))?;
    Ok(h)
}

/// Spans and absolute counts of one side: OTLP bucket `offset + i` goes to Prometheus bucket
/// `((offset + i) >> scale_down) + 1`, merged buckets added up, empty buckets left out except
/// short gaps inside a span.
fn layout(buckets: Option<&Buckets>, scale_down: i32) -> (Vec<Span>, Vec<f64>) {
    let mut counts: BTreeMap<i32, u64> = BTreeMap::new();
    if let Some(b) = buckets {
        for (i, &c) in b.bucket_counts.iter().enumerate() {
            let Ok(i) = i32::try_from(i) else { break };
            let Some(otlp) = b.offset.checked_add(i) else { break };
            if c > 0 {
                let index = (otlp >> scale_down).saturating_add(1);
                let slot = counts.entry(index).or_default();
                *slot = slot.saturating_add(c);
            }
        }
    }
    let (mut spans, mut out): (Vec<Span>, Vec<f64>) = (Vec::new(), Vec::new());
    let mut last: Option<i32> = None;
    for (&index, &c) in &counts {
        match last {
            Some(prev) if index - prev - 1 <= MAX_GAP => {
                out.extend(std::iter::repeat_n(0.0, (index - prev - 1) as usize));
                if let Some(span) = spans.last_mut() {
                    span.length += (index - prev) as u32;
                }
            }
            Some(prev) => spans.push(Span { offset: index - prev - 1, length: 1 }),
            None => spans.push(Span { offset: index, length: 1 }),
        }
        out.push(c as f64);
        last = Some(index);
    }
    (spans, out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn point(scale: i32, offset: i32, counts: &[u64], zero: u64, sum: f64) -> ExponentialHistogramDataPoint {
        ExponentialHistogramDataPoint {
            scale,
            zero_count: zero,
            count: zero + counts.iter().sum::<u64>(),
            sum: Some(sum),
            positive: Some(Buckets { offset, bucket_counts: counts.to_vec() }),
            ..Default::default()
        }
    }

    /// Worked by hand: scale 0 (base 2), OTLP buckets 0..3 hold (1, 2], (2, 4], (4, 8]; in
    /// Prometheus they are buckets 1, 2 and 3, the same bounds.
    #[test]
    fn buckets_shift_by_one_and_keep_their_bounds() {
        let h = to_native(&point(0, 0, &[3, 0, 5], 1, 20.0)).unwrap();
        assert_eq!((h.schema, h.count, h.zero_count, h.sum), (0, 9.0, 1.0, 20.0));
        assert_eq!(h.positive_spans, vec![Span { offset: 1, length: 3 }]);
        assert_eq!(h.positive_buckets, vec![3.0, 0.0, 5.0]);
        assert!(h.integer);
        // Prometheus bucket 1 of schema 0 is (1, 2], as OTLP bucket 0.
        assert_eq!(crate::histogram::bucket_bound(1, 0, &[]), 2.0);
    }

    /// Scale 10 merged down to schema 8: four OTLP buckets per Prometheus bucket.
    #[test]
    fn scales_above_8_merge_buckets() {
        let h = to_native(&point(10, 8, &[1, 1, 1, 1, 2], 0, 1.0)).unwrap();
        assert_eq!(h.schema, 8);
        // OTLP 8..=11 >> 2 = 2 -> bucket 3; OTLP 12 >> 2 = 3 -> bucket 4.
        assert_eq!(h.positive_spans, vec![Span { offset: 3, length: 2 }]);
        assert_eq!(h.positive_buckets, vec![4.0, 2.0]);
    }

    #[test]
    fn refusals_and_stale_points() {
        assert!(to_native(&point(-5, 0, &[1], 0, 1.0)).unwrap_err().contains("scale -5"));
        let mut zero = point(0, 0, &[], 0, 3.0);
        zero.count = 0;
        assert!(to_native(&zero).unwrap_err().contains("zero count"));
        let mut wrong = point(0, 0, &[1, 1], 0, 1.0);
        wrong.count = 1;
        assert!(to_native(&wrong).is_err());
        let mut stale = point(0, 0, &[1], 0, 1.0);
        stale.flags = 1;
        assert_eq!(to_native(&stale).unwrap().sum.to_bits(), STALE_NAN_BITS);
    }

    proptest! {
        /// Whatever the layout, the native histogram holds every observation, in buckets whose
        /// bounds contain the OTLP bucket's bounds (merging only widens them).
        #[test]
        fn observations_are_kept_and_bounded(
            scale in -4i32..=12,
            offset in -40i32..40,
            counts in proptest::collection::vec(0u64..5, 0..30),
            zero in 0u64..3,
        ) {
            let total = zero + counts.iter().sum::<u64>();
            let h = to_native(&point(scale, offset, &counts, zero, total as f64)).unwrap();
            prop_assert_eq!(h.positive_buckets.iter().sum::<f64>(), counts.iter().sum::<u64>() as f64);
            prop_assert_eq!(h.count, (zero + counts.iter().sum::<u64>()) as f64);
            prop_assert!(h.schema <= MAX_EXPONENTIAL_SCHEMA);
            prop_assert!(h.validate().is_ok());
        }
    }
}
