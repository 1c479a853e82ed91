//! Tests of the hints a selector's histograms read with: against a reference that merges the
//! series' points and asks [`read_hint`] about each histogram and the point before it, and
//! that reading a series in two parts (the second resolved with the point before it) gives the
//! hints of reading it whole.

use std::sync::Arc;

use proptest::prelude::*;

use super::{derive, resolve_first};
use crate::histogram::{read_hint, CounterResetHint, Histogram, Span};
use crate::labels::Labels;
use crate::sample::{HistogramSample, Sample, SeriesSamples, STALE_NAN_BITS};

#[derive(Clone, Debug)]
enum Point {
    Float(f64),
    Histogram(Histogram),
}

fn hist(count: u32, buckets: &[u32], hint: CounterResetHint) -> Histogram {
    Histogram {
        counter_reset_hint: hint,
        count: f64::from(count),
        sum: 1.0,
        positive_spans: vec![Span { offset: 0, length: buckets.len() as u32 }],
        positive_buckets: buckets.iter().map(|&b| f64::from(b)).collect(),
        ..Histogram::default()
    }
}

fn arb_point() -> impl Strategy<Value = Point> {
    let hint = (0u8..4).prop_map(|c| CounterResetHint::from_code(c).unwrap_or_default());
    prop_oneof![
        1 => Just(Point::Float(1.0)),
        1 => Just(Point::Float(f64::from_bits(STALE_NAN_BITS))),
        1 => Just(Point::Histogram(Histogram::stale())),
        8 => (0u32..6, proptest::collection::vec(0u32..4, 1..3), hint)
            .prop_map(|(c, b, h)| Point::Histogram(hist(c, &b, h))),
    ]
}

fn series(points: &[Point], first_ts: i64) -> SeriesSamples {
    let mut s = SeriesSamples { labels: Labels::empty(), samples: Vec::new(), histograms: Vec::new() };
    for (ts, p) in (first_ts..).zip(points) {
        match p {
            Point::Float(v) => s.samples.push(Sample::new(ts, *v)),
            Point::Histogram(h) => {
                s.histograms.push(HistogramSample { timestamp_ms: ts, histogram: Arc::new(h.clone()) });
            }
        }
    }
    s
}

/// Each histogram's hint from the point right before it.
fn reference(points: &[Point]) -> Vec<CounterResetHint> {
    let mut out = Vec::new();
    for (i, p) in points.iter().enumerate() {
        if let Point::Histogram(h) = p {
            let prev = match i.checked_sub(1).and_then(|j| points.get(j)) {
                Some(Point::Histogram(p)) => Some(p),
                _ => None,
            };
            out.push(read_hint(prev, h));
        }
    }
    out
}

fn hints(s: &SeriesSamples) -> Vec<CounterResetHint> {
    s.histograms.iter().map(|h| h.histogram.counter_reset_hint).collect()
}

proptest! {
    #[test]
    fn a_whole_series_reads_as_the_reference(points in proptest::collection::vec(arb_point(), 0..30)) {
        let mut s = series(&points, 0);
        derive(&mut s);
        prop_assert_eq!(hints(&s), reference(&points));
    }

    #[test]
    fn a_series_read_from_anywhere_reads_alike(
        points in proptest::collection::vec(arb_point(), 1..30),
        split in any::<prop::sample::Index>(),
    ) {
        let j = split.index(points.len());
        let whole = reference(&points);
        let (head, tail) = points.split_at(j);
        let mut s = series(tail, j as i64);
        let pending = derive(&mut s);
        let first_needs = match tail.first() {
            Some(Point::Histogram(h)) => matches!(
                h.counter_reset_hint,
                CounterResetHint::Unknown | CounterResetHint::NotCounterReset
            ),
            _ => false,
        };
        prop_assert_eq!(pending, first_needs.then_some(j as i64));
        if let Some(t) = pending {
            let before = match head.last() {
                Some(Point::Histogram(h)) => Some(h),
                _ => None,
            };
            resolve_first(&mut s, t, before);
        }
        let in_head = head.iter().filter(|p| matches!(p, Point::Histogram(_))).count();
        prop_assert_eq!(hints(&s), whole[in_head..].to_vec());
    }
}

#[test]
fn a_range_read_from_inside_a_chunk_reads_not_reset() {
    // range_queries.test: `{{count:0}}+{{count:1}}x4`, read at 2m over `[2m]`: (0, 2m].
    let points: Vec<Point> = (0..5).map(|c| Point::Histogram(hist(c, &[], CounterResetHint::Unknown))).collect();
    let mut s = series(&points[1..3], 1);
    let t = derive(&mut s);
    assert_eq!(hints(&s), [CounterResetHint::Unknown, CounterResetHint::NotCounterReset]);
    let Some(Point::Histogram(before)) = points.first() else { unreachable!() };
    resolve_first(&mut s, t.unwrap(), Some(before));
    assert_eq!(hints(&s), [CounterResetHint::NotCounterReset; 2]);
}

#[test]
fn a_float_between_histograms_starts_over() {
    let g = |c| Point::Histogram(hist(c, &[c], CounterResetHint::Unknown));
    let mut s = series(&[g(1), Point::Float(1.0), g(2), g(3)], 0);
    assert_eq!(derive(&mut s), Some(0));
    use CounterResetHint::{NotCounterReset, Unknown};
    assert_eq!(hints(&s), [Unknown, Unknown, NotCounterReset]);
}
