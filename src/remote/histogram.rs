//! Native histograms between the protobuf `Histogram` of remote-write 1.0/2.0 and remote read
//! ([`proto::Histogram`]) and saltdb's [`Histogram`].
//!
//! - [`from_proto`]: a received histogram, checked with Prometheus' rules
//!   ([`Histogram::validate`]). The form follows the `count` oneof, as Prometheus'
//!   `IsFloatHistogram` does: `count_float` makes a float histogram (absolute counts), anything
//!   else an integer one (delta-encoded counts). Unlike Prometheus, a message mixing the forms
//!   (an integer count with float bucket counts, say) is refused instead of read halfway.
//! - [`to_proto`]: a stored histogram for remote read, in the form Prometheus' `codec.go`
//!   answers with: integer form (`HistogramToHistogramProto`) for histograms that came in as
//!   integer histograms, float form (`FloatHistogramToHistogramProto`) otherwise.
//!
//! Invariant: `from_proto(&to_proto(t, h))` is `h` bit for bit ([`Histogram::identical`]) for
//! every valid `h` whose `integer` flag is only set on integral counts (what `from_proto`
//! produces).

use crate::histogram::{CounterResetHint, Histogram, Layout, Span, ValidationError};
use crate::remote::proto::{self, histogram::Count, histogram::ZeroCount};

/// Why a received histogram is refused.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum HistogramProblem {
    /// Broken against Prometheus' rules (spans, counts, schema, custom bounds...).
    #[error(transparent)]
    Invalid(#[from] ValidationError),
    /// A `reset_hint` outside UNKNOWN=0, YES=1, NO=2, GAUGE=3.
    #[error("reset_hint {0} is not one of UNKNOWN=0, YES=1, NO=2, GAUGE=3")]
    ResetHint(i32),
    /// Fields of the integer form in a float histogram, or the reverse.
    #[error("{form} histogram (by its count field) carries {field}, a field of the other form")]
    MixedForms {
        /// `"integer"` or `"float"`.
        form: &'static str,
        /// The field of the other form.
        field: &'static str,
    },
}

/// The spans of a message, as [`Span`]s.
fn spans(spans: &[proto::BucketSpan]) -> Vec<Span> {
    spans.iter().map(|s| Span { offset: s.offset, length: s.length }).collect()
}

/// The hint of a `ResetHint` number.
fn hint(code: i32) -> Result<CounterResetHint, HistogramProblem> {
    u8::try_from(code).ok().and_then(CounterResetHint::from_code).ok_or(HistogramProblem::ResetHint(code))
}

/// True when the message is a float histogram (its count is `count_float`).
pub fn is_float(h: &proto::Histogram) -> bool {
    matches!(h.count, Some(Count::CountFloat(_)))
}

/// A received histogram, validated.
///
/// # Errors
/// The first [`HistogramProblem`] found.
pub fn from_proto(h: &proto::Histogram) -> Result<Histogram, HistogramProblem> {
    let hint = hint(h.reset_hint)?;
    let (positive_spans, negative_spans) = (spans(&h.positive_spans), spans(&h.negative_spans));
    let layout = Layout {
        schema: h.schema,
        zero_threshold: h.zero_threshold,
        positive_spans: &positive_spans,
        negative_spans: &negative_spans,
        custom_values: &h.custom_values,
    };
    let histogram = match h.count {
        Some(Count::CountFloat(count)) => {
            let mixed = |field| HistogramProblem::MixedForms { form: "float", field };
            if matches!(h.zero_count, Some(ZeroCount::ZeroCountInt(_))) {
                return Err(mixed("zero_count_int"));
            }
            if !h.positive_deltas.is_empty() {
                return Err(mixed("positive_deltas"));
            }
            if !h.negative_deltas.is_empty() {
                return Err(mixed("negative_deltas"));
            }
            let zero_count = match h.zero_count {
                Some(ZeroCount::ZeroCountFloat(z)) => z,
                _ => 0.0,
            };
            Histogram::from_float_counts(layout, count, zero_count, h.sum, &h.positive_counts, &h.negative_counts, hint)
        }
        Some(Count::CountInt(_)) | None => {
            let mixed = |field| HistogramProblem::MixedForms { form: "integer", field };
            if matches!(h.zero_count, Some(ZeroCount::ZeroCountFloat(_))) {
                return Err(mixed("zero_count_float"));
            }
            if !h.positive_counts.is_empty() {
                return Err(mixed("positive_counts"));
            }
            if !h.negative_counts.is_empty() {
                return Err(mixed("negative_counts"));
            }
            let count = match h.count {
                Some(Count::CountInt(c)) => c,
                _ => 0,
            };
            let zero_count = match h.zero_count {
                Some(ZeroCount::ZeroCountInt(z)) => z,
                _ => 0,
            };
            Histogram::from_integer_deltas(
                layout,
                count,
                zero_count,
                h.sum,
                &h.positive_deltas,
                &h.negative_deltas,
                hint,
            )?
        }
    };
    histogram.validate()?;
    Ok(histogram)
}

/// A stored histogram as the message remote read answers with (see the module docs for the form).
pub fn to_proto(timestamp_ms: i64, h: &Histogram) -> proto::Histogram {
    let spans = |s: &[Span]| s.iter().map(|s| proto::BucketSpan { offset: s.offset, length: s.length }).collect();
    let mut out = proto::Histogram {
        sum: h.sum,
        schema: h.schema,
        zero_threshold: h.zero_threshold,
        negative_spans: spans(&h.negative_spans),
        positive_spans: spans(&h.positive_spans),
        reset_hint: i32::from(h.counter_reset_hint.code()),
        timestamp: timestamp_ms,
        custom_values: h.custom_values.clone(),
        ..Default::default()
    };
    match h.integer.then(|| h.to_integer_deltas()).flatten() {
        Some(ints) => {
            out.count = Some(Count::CountInt(ints.count));
            out.zero_count = Some(ZeroCount::ZeroCountInt(ints.zero_count));
            out.positive_deltas = ints.positive_deltas;
            out.negative_deltas = ints.negative_deltas;
        }
        None => {
            out.count = Some(Count::CountFloat(h.count));
            out.zero_count = Some(ZeroCount::ZeroCountFloat(h.zero_count));
            out.positive_counts = h.positive_buckets.clone();
            out.negative_counts = h.negative_buckets.clone();
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::histogram::ValidationError;
    use crate::sample::STALE_NAN_BITS;

    fn span(offset: i32, length: u32) -> proto::BucketSpan {
        proto::BucketSpan { offset, length }
    }

    /// An integer histogram: 2 + 1 + 3 in positive buckets 0, 1 and 4, 1 negative, 2 in zero.
    fn integer() -> proto::Histogram {
        proto::Histogram {
            count: Some(Count::CountInt(9)),
            zero_count: Some(ZeroCount::ZeroCountInt(2)),
            sum: 12.5,
            schema: 1,
            zero_threshold: 0.001,
            positive_spans: vec![span(0, 2), span(2, 1)],
            positive_deltas: vec![2, -1, 2],
            negative_spans: vec![span(-1, 1)],
            negative_deltas: vec![1],
            timestamp: 1_700_000_000_000,
            ..Default::default()
        }
    }

    fn float() -> proto::Histogram {
        proto::Histogram {
            count: Some(Count::CountFloat(6.5)),
            zero_count: Some(ZeroCount::ZeroCountFloat(0.5)),
            sum: -3.25,
            schema: -2,
            zero_threshold: 1e-128,
            positive_spans: vec![span(3, 2)],
            positive_counts: vec![1.5, 2.5],
            negative_spans: vec![span(0, 1)],
            negative_counts: vec![2.0],
            reset_hint: 3,
            timestamp: 1_700_000_000_000,
            ..Default::default()
        }
    }

    fn nhcb() -> proto::Histogram {
        proto::Histogram {
            count: Some(Count::CountInt(7)),
            zero_count: Some(ZeroCount::ZeroCountInt(0)),
            sum: 100.0,
            schema: -53,
            positive_spans: vec![span(0, 2), span(1, 1)],
            positive_deltas: vec![3, -1, 0],
            custom_values: vec![0.1, 0.5, 1.0],
            reset_hint: 2,
            ..Default::default()
        }
    }

    #[test]
    fn every_form_round_trips_bit_for_bit() {
        for (msg, integer) in [(integer(), true), (float(), false), (nhcb(), true)] {
            let h = from_proto(&msg).unwrap();
            assert_eq!(h.integer, integer);
            assert_eq!(to_proto(msg.timestamp, &h), msg, "{msg:?}");
            assert!(from_proto(&to_proto(0, &h)).unwrap().identical(&h));
        }
        let h = from_proto(&integer()).unwrap();
        assert_eq!(h.positive_buckets, [2.0, 1.0, 3.0]);
        assert_eq!(h.counter_reset_hint, CounterResetHint::Unknown);
        assert_eq!(from_proto(&float()).unwrap().counter_reset_hint, CounterResetHint::Gauge);
    }

    #[test]
    fn stale_markers_and_empty_messages_are_histograms() {
        let stale = proto::Histogram { sum: f64::from_bits(STALE_NAN_BITS), ..Default::default() };
        let h = from_proto(&stale).unwrap();
        assert!(h.is_stale() && h.integer);
        let empty = from_proto(&proto::Histogram::default()).unwrap();
        assert_eq!((empty.count, empty.schema), (0.0, 0));
    }

    #[test]
    fn invalid_histograms_are_refused_with_the_rule_they_break() {
        let with = |f: &dyn Fn(&mut proto::Histogram)| {
            let mut h = integer();
            f(&mut h);
            from_proto(&h).unwrap_err()
        };
        assert_eq!(with(&|h| h.schema = 9), HistogramProblem::Invalid(ValidationError::InvalidSchema(9)));
        assert!(matches!(
            with(&|h| h.count = Some(Count::CountInt(10))),
            HistogramProblem::Invalid(ValidationError::CountMismatch { count: 10, .. })
        ));
        assert!(matches!(
            with(&|h| h.positive_deltas = vec![2, -3, 2]),
            HistogramProblem::Invalid(ValidationError::NegativeBucketCount { .. })
        ));
        assert!(matches!(
            with(&|h| h.positive_spans.push(span(0, 1))),
            HistogramProblem::Invalid(ValidationError::SpansBucketsMismatch { .. })
        ));
        assert!(matches!(
            with(&|h| h.positive_spans[1].offset = -1),
            HistogramProblem::Invalid(ValidationError::SpanNegativeOffset { .. })
        ));
        assert!(matches!(
            with(&|h| h.positive_deltas = vec![i64::MAX, 1, 0]),
            HistogramProblem::Invalid(
                ValidationError::BucketCountOverflow { .. } | ValidationError::CountNotExact { .. }
            )
        ));
        assert_eq!(with(&|h| h.reset_hint = 4), HistogramProblem::ResetHint(4));
        assert_eq!(with(&|h| h.reset_hint = -1), HistogramProblem::ResetHint(-1));
        assert!(matches!(with(&|h| h.positive_counts = vec![1.0]), HistogramProblem::MixedForms { .. }));
        assert!(matches!(
            with(&|h| h.zero_count = Some(ZeroCount::ZeroCountFloat(2.0))),
            HistogramProblem::MixedForms { .. }
        ));
        let mut f = float();
        f.positive_deltas = vec![1];
        assert!(matches!(from_proto(&f), Err(HistogramProblem::MixedForms { form: "float", .. })));
        f = float();
        f.negative_counts = vec![-1.0];
        assert!(matches!(from_proto(&f), Err(HistogramProblem::Invalid(ValidationError::NegativeBucketCount { .. }))));
        let mut c = nhcb();
        c.custom_values = vec![0.5, 0.1, 1.0];
        assert!(matches!(
            from_proto(&c),
            Err(HistogramProblem::Invalid(ValidationError::CustomBoundsNotIncreasing(2)))
        ));
        c = nhcb();
        c.custom_values.truncate(1);
        assert!(matches!(from_proto(&c), Err(HistogramProblem::Invalid(ValidationError::CustomBoundsTooFew { .. }))));
        c = nhcb();
        c.zero_threshold = 0.1;
        assert!(matches!(from_proto(&c), Err(HistogramProblem::Invalid(ValidationError::CustomBucketsZeroThreshold))));
        let mut e = integer();
        e.custom_values = vec![1.0];
        assert!(matches!(from_proto(&e), Err(HistogramProblem::Invalid(ValidationError::ExponentialWithCustomBounds))));
    }

    #[test]
    fn float_counts_of_an_integer_histogram_go_out_in_float_form() {
        // A histogram flagged integer whose counts are no longer integral cannot be written as
        // deltas: it is answered in float form rather than rounded.
        let mut h = from_proto(&integer()).unwrap();
        h.positive_buckets[0] = 2.5;
        let msg = to_proto(0, &h);
        assert!(is_float(&msg));
        assert_eq!(msg.positive_counts, [2.5, 1.0, 3.0]);
    }
}
