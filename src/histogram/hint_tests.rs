//! Tests of the read hints: [`continues`] against a brute-force reference (every bucket
//! compared through a map of index to count), the claim that a derived `NotCounterReset` never
//! hides a reset [`detect_reset`] would find, and Prometheus' cases one by one.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::super::tests::{arb_histogram, arb_series};
use super::super::{detect_reset, CounterResetHint, Histogram, Span};
use super::{continues, read_hint};

/// Bucket index to count, walking the spans as their definition says (the first offset is
/// absolute, every later one counts from the end of the span before).
fn dense(spans: &[Span], counts: &[f64]) -> BTreeMap<i32, f64> {
    let mut out = BTreeMap::new();
    let mut counts = counts.iter();
    let mut pos = 0i32;
    for (j, s) in spans.iter().enumerate() {
        pos = if j == 0 { s.offset } else { pos + s.offset };
        for _ in 0..s.length {
            out.insert(pos, *counts.next().unwrap());
            pos += 1;
        }
    }
    out
}

/// Prometheus' appender, decision by decision (`appendable` of the float and integer chunks).
fn reference(prev: &Histogram, cur: &Histogram) -> bool {
    use CounterResetHint::{CounterReset, Gauge};
    if prev.counter_reset_hint == Gauge || cur.counter_reset_hint == Gauge || prev.integer != cur.integer {
        return false;
    }
    if cur.counter_reset_hint == CounterReset {
        return false;
    }
    if cur.sum.to_bits() == Histogram::stale().sum.to_bits() {
        return true;
    }
    if prev.sum.to_bits() == Histogram::stale().sum.to_bits() || cur.count < prev.count {
        return false;
    }
    if cur.schema != prev.schema || cur.zero_threshold != prev.zero_threshold {
        return false;
    }
    if cur.schema == -53 && cur.custom_values != prev.custom_values {
        return false;
    }
    if cur.zero_count < prev.zero_count {
        return false;
    }
    let side_ok = |ps: &[Span], pc: &[f64], cs: &[Span], cc: &[f64]| {
        let cur = dense(cs, cc);
        dense(ps, pc).iter().all(|(i, &c)| match cur.get(i) {
            Some(&d) => c.partial_cmp(&d) != Some(std::cmp::Ordering::Greater),
            None => c == 0.0,
        })
    };
    side_ok(&prev.positive_spans, &prev.positive_buckets, &cur.positive_spans, &cur.positive_buckets)
        && side_ok(&prev.negative_spans, &prev.negative_buckets, &cur.negative_spans, &cur.negative_buckets)
}

proptest! {
    #[test]
    fn continues_as_the_reference_does_along_a_series(series in arb_series()) {
        for pair in series.windows(2) {
            prop_assert_eq!(continues(&pair[0], &pair[1]), reference(&pair[0], &pair[1]));
        }
    }

    #[test]
    fn continues_as_the_reference_does_for_any_two(a in arb_histogram(), b in arb_histogram()) {
        prop_assert_eq!(continues(&a, &b), reference(&a, &b));
    }

    /// Where the hint says "not a reset", the engine's own detection would have said so too.
    #[test]
    fn a_derived_not_reset_hides_no_reset(series in arb_series()) {
        for pair in series.windows(2) {
            let (prev, cur) = (&pair[0], &pair[1]);
            if read_hint(Some(prev), cur) == CounterResetHint::NotCounterReset && !cur.is_stale() {
                let unknown = Histogram { counter_reset_hint: CounterResetHint::Unknown, ..cur.clone() };
                prop_assert!(!detect_reset(prev, &unknown), "{prev:?} -> {cur:?}");
            }
        }
    }

    /// Gauge and reset hints stay; the others depend only on whether the chunk continues.
    #[test]
    fn read_hints_follow_the_table(prev in proptest::option::of(arb_histogram()), cur in arb_histogram()) {
        let got = read_hint(prev.as_ref(), &cur);
        let want = match cur.counter_reset_hint {
            CounterResetHint::Gauge | CounterResetHint::CounterReset => cur.counter_reset_hint,
            _ if prev.as_ref().is_some_and(|p| continues(p, &cur)) => CounterResetHint::NotCounterReset,
            _ => CounterResetHint::Unknown,
        };
        prop_assert_eq!(got, want);
    }
}

/// `{{schema:0 count:c sum:1 buckets:[b...]}}` with buckets from index 0.
fn h(count: f64, buckets: &[f64]) -> Histogram {
    Histogram {
        count,
        sum: 1.0,
        positive_spans: vec![Span { offset: 0, length: buckets.len() as u32 }],
        positive_buckets: buckets.to_vec(),
        ..Histogram::default()
    }
}

fn with_hint(mut h: Histogram, hint: CounterResetHint) -> Histogram {
    h.counter_reset_hint = hint;
    h
}

#[test]
fn growth_continues_and_reads_not_reset() {
    let (a, b) = (h(4.0, &[1.0, 2.0, 1.0]), h(7.0, &[2.0, 3.0, 2.0]));
    assert_eq!(read_hint(Some(&a), &b), CounterResetHint::NotCounterReset);
    assert_eq!(read_hint(None, &b), CounterResetHint::Unknown);
    // A hint written as "not a reset" is not believed without the point before.
    let b_not = with_hint(b.clone(), CounterResetHint::NotCounterReset);
    assert_eq!(read_hint(None, &b_not), CounterResetHint::Unknown);
}

#[test]
fn every_reason_prometheus_cuts_a_chunk_reads_unknown() {
    let a = h(4.0, &[1.0, 2.0, 1.0]);
    let cut = |b: Histogram| assert_eq!(read_hint(Some(&a), &b), CounterResetHint::Unknown, "{b:?}");
    cut(h(3.0, &[1.0, 1.0, 1.0])); // smaller count
    cut(h(5.0, &[1.0, 1.0, 3.0])); // a bucket shrinks, the count grows
    cut(h(5.0, &[5.0])); // populated buckets vanish
    cut(Histogram { schema: 1, ..h(8.0, &[2.0, 4.0, 2.0]) });
    cut(Histogram { zero_threshold: 0.5, ..h(8.0, &[2.0, 4.0, 2.0]) });
    cut(Histogram { integer: true, ..h(8.0, &[2.0, 4.0, 2.0]) });
    let stale = Histogram::stale();
    assert_eq!(read_hint(Some(&stale), &a), CounterResetHint::Unknown);
    let gauge = with_hint(a.clone(), CounterResetHint::Gauge);
    assert_eq!(read_hint(Some(&gauge), &h(8.0, &[2.0, 4.0, 2.0])), CounterResetHint::Unknown);
}

#[test]
fn empty_buckets_may_vanish_and_new_ones_appear() {
    let a = h(3.0, &[1.0, 0.0, 2.0]);
    let b = Histogram {
        positive_spans: vec![Span { offset: 0, length: 1 }, Span { offset: 1, length: 2 }],
        positive_buckets: vec![1.0, 2.0, 5.0],
        ..h(8.0, &[])
    };
    assert!(continues(&a, &b));
}

#[test]
fn gauges_and_written_resets_keep_their_hint() {
    let a = h(4.0, &[1.0, 2.0, 1.0]);
    let gauge = with_hint(h(1.0, &[1.0]), CounterResetHint::Gauge);
    assert_eq!(read_hint(Some(&a), &gauge), CounterResetHint::Gauge);
    assert_eq!(read_hint(None, &gauge), CounterResetHint::Gauge);
    let reset = with_hint(h(9.0, &[3.0, 4.0, 2.0]), CounterResetHint::CounterReset);
    assert_eq!(read_hint(Some(&a), &reset), CounterResetHint::CounterReset);
}

#[test]
fn custom_bounds_must_match() {
    let custom = |bounds: &[f64]| Histogram { schema: -53, custom_values: bounds.to_vec(), ..h(2.0, &[1.0, 1.0]) };
    assert!(continues(&custom(&[5.0, 10.0]), &custom(&[5.0, 10.0])));
    assert!(!continues(&custom(&[5.0, 10.0]), &custom(&[5.0, 20.0])));
}
