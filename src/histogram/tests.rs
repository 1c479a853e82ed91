//! Property tests of the histogram module: generators of valid histograms, validation, the
//! integer form, arithmetic against a brute-force reference, compaction and reset detection.
//! The chunk codec's own tests are in `chunk/tests.rs` and use the generators here.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::buckets::Entries;
use super::*;

/// Spans as a sender may write them: the first offset anywhere near 0, further offsets `>= 0`
/// (0 means adjacent spans), lengths including 0.
fn arb_spans(max: usize) -> impl Strategy<Value = Vec<Span>> {
    (-12i32..12, proptest::collection::vec((0i32..4, 0u32..5), 0..max)).prop_map(|(first, rest)| {
        rest.iter()
            .enumerate()
            .map(|(i, &(offset, length))| Span { offset: if i == 0 { first } else { offset }, length })
            .collect()
    })
}

fn covered(spans: &[Span]) -> usize {
    spans.iter().map(|s| s.length as usize).sum()
}

/// Counts for `n` buckets: integers, or quarters (exact in any sum the tests make).
fn arb_counts(n: usize, integer: bool) -> impl Strategy<Value = Vec<f64>> {
    proptest::collection::vec(0u32..400, n)
        .prop_map(move |v| v.into_iter().map(|c| if integer { f64::from(c / 4) } else { f64::from(c) / 4.0 }).collect())
}

fn arb_hint() -> impl Strategy<Value = CounterResetHint> {
    (0u8..4).prop_map(|c| CounterResetHint::from_code(c).unwrap())
}

fn arb_sum() -> impl Strategy<Value = f64> {
    prop_oneof![
        6 => -1e6f64..1e6,
        1 => Just(f64::NAN),
        1 => Just(f64::INFINITY),
        1 => Just(f64::from_bits(0x7ff0_0000_0000_0002)),
    ]
}

/// A valid exponential histogram at `zero_threshold`.
fn arb_exponential_at(zero_threshold: f64) -> impl Strategy<Value = Histogram> {
    (-4i32..=8, arb_spans(5), arb_spans(4), any::<bool>(), arb_sum(), arb_hint(), 0u32..5).prop_flat_map(
        move |(schema, pos, neg, integer, sum, hint, extra)| {
            let (np, nn) = (covered(&pos), covered(&neg));
            (arb_counts(np, integer), arb_counts(nn, integer), arb_counts(1, integer)).prop_map(move |(pb, nb, zc)| {
                let zero_count = if zero_threshold == 0.0 { 0.0 } else { zc[0] };
                let total = zero_count + pb.iter().sum::<f64>() + nb.iter().sum::<f64>();
                let count = if sum.is_nan() { total + f64::from(extra) } else { total };
                Histogram {
                    counter_reset_hint: hint,
                    schema,
                    zero_threshold,
                    zero_count,
                    count,
                    sum,
                    positive_spans: pos.clone(),
                    negative_spans: neg.clone(),
                    positive_buckets: pb,
                    negative_buckets: nb,
                    custom_values: Vec::new(),
                    integer,
                }
            })
        },
    )
}

fn arb_exponential() -> impl Strategy<Value = Histogram> {
    prop_oneof![Just(0.0), Just(2f64.powi(-128)), Just(0.001), Just(0.75)].prop_flat_map(arb_exponential_at)
}

/// A valid histogram with custom bounds.
fn arb_custom() -> impl Strategy<Value = Histogram> {
    (
        proptest::collection::vec((0i32..3, 0u32..4), 0..4),
        proptest::collection::vec(1u32..100, 0..6),
        any::<bool>(),
        arb_sum(),
        arb_hint(),
    )
        .prop_flat_map(|(raw, steps, integer, sum, hint)| {
            let spans: Vec<Span> = raw.iter().map(|&(offset, length)| Span { offset, length }).collect();
            let reach: i32 = spans.iter().map(|s| s.offset + s.length as i32).sum();
            let mut bound = -5.0;
            let mut custom_values: Vec<f64> = steps
                .iter()
                .map(|&s| {
                    bound += f64::from(s) / 8.0;
                    bound
                })
                .collect();
            while (custom_values.len() as i32) + 1 < reach {
                bound += 1.0;
                custom_values.push(bound);
            }
            arb_counts(covered(&spans), integer).prop_map(move |buckets| Histogram {
                counter_reset_hint: hint,
                schema: CUSTOM_BUCKETS_SCHEMA,
                count: buckets.iter().fold(0.0, |a, b| a + b),
                sum,
                positive_spans: spans.clone(),
                positive_buckets: buckets,
                custom_values: custom_values.clone(),
                integer,
                ..Histogram::default()
            })
        })
}

/// Any valid histogram.
pub(super) fn arb_histogram() -> impl Strategy<Value = Histogram> {
    prop_oneof![3 => arb_exponential(), 1 => arb_custom(), 1 => Just(Histogram::stale())]
}

/// A series as a counter grows: a start, then each step adds to some counts, or starts over with
/// another histogram (a layout change), or is a stale marker, or changes the hint.
pub(super) fn arb_series() -> impl Strategy<Value = Vec<Histogram>> {
    let step = prop_oneof![
        6 => proptest::collection::vec(0u32..20, 0..40).prop_map(Step::Grow),
        1 => arb_histogram().prop_map(Step::Replace),
        1 => Just(Step::Stale),
        1 => arb_hint().prop_map(Step::Hint),
    ];
    (arb_histogram(), proptest::collection::vec(step, 0..30)).prop_map(|(start, steps)| {
        let mut out = vec![start.clone()];
        let mut cur = start;
        for s in steps {
            match s {
                Step::Grow(inc) => {
                    let mut inc = inc.into_iter().cycle();
                    let mut add = |v: &mut f64| *v += f64::from(inc.next().unwrap_or(0));
                    cur.positive_buckets.iter_mut().chain(&mut cur.negative_buckets).for_each(&mut add);
                    if cur.zero_threshold > 0.0 && !cur.uses_custom_buckets() {
                        add(&mut cur.zero_count);
                    }
                    cur.count = cur.zero_count + cur.positive_buckets.iter().chain(&cur.negative_buckets).sum::<f64>();
                    cur.sum += 1.5;
                    out.push(cur.clone());
                }
                Step::Replace(h) => {
                    cur = h;
                    out.push(cur.clone());
                }
                Step::Stale => out.push(Histogram::stale()),
                Step::Hint(hint) => {
                    cur.counter_reset_hint = hint;
                    out.push(cur.clone());
                }
            }
        }
        out
    })
}

#[derive(Clone, Debug)]
enum Step {
    Grow(Vec<u32>),
    Replace(Histogram),
    Stale,
    Hint(CounterResetHint),
}

/// Every bucket summed into its bucket at `schema`: `(negative, index) -> count`.
fn expand(h: &Histogram, schema: i32) -> BTreeMap<(bool, i32), f64> {
    let mut out = BTreeMap::new();
    for (negative, spans, counts) in
        [(false, &h.positive_spans, &h.positive_buckets), (true, &h.negative_spans, &h.negative_buckets)]
    {
        for (i, c) in Entries::new(spans, counts) {
            *out.entry((negative, target_index(i, h.schema, schema))).or_insert(0.0) += c;
        }
    }
    out
}

/// `h` without the buckets whose upper bound is at most the zero threshold.
fn outside_zero_bucket(h: &Histogram) -> Histogram {
    let keep = |spans: &[Span], counts: &[f64]| {
        super::layout::build(
            Entries::new(spans, counts).filter(|&(i, _)| exponential_bound(i, h.schema) > h.zero_threshold),
        )
    };
    let mut out = h.clone();
    (out.positive_spans, out.positive_buckets) = keep(&h.positive_spans, &h.positive_buckets);
    (out.negative_spans, out.negative_buckets) = keep(&h.negative_spans, &h.negative_buckets);
    out
}

fn canonical(spans: &[Span], counts: &[f64]) -> bool {
    spans.iter().enumerate().all(|(i, s)| s.length > 0 && (i == 0 || s.offset > 0)) && counts.iter().all(|&c| c != 0.0)
}

proptest! {
    #[test]
    fn generated_histograms_validate(h in arb_histogram()) {
        prop_assert_eq!(h.validate(), Ok(()));
    }

    #[test]
    fn integer_form_round_trips(h in arb_histogram()) {
        match h.to_integer_deltas() {
            Some(ints) => {
                let mut back = Histogram::from_integer_deltas(
                    h.layout(), ints.count, ints.zero_count, h.sum, &ints.positive_deltas, &ints.negative_deltas,
                    h.counter_reset_hint,
                ).unwrap();
                back.integer = h.integer;
                prop_assert!(back.identical(&h), "{:?} vs {:?}", back, h);
            }
            None => prop_assert!(!h.integer),
        }
    }

    #[test]
    fn add_and_sub_match_the_bucket_by_bucket_reference(
        (a, b) in prop_oneof![
            (arb_exponential_at(0.0), arb_exponential_at(0.0)),
            (arb_custom(), arb_custom()).prop_map(|(mut a, mut b)| {
                // The same bounds (the longer list fits both).
                let bounds = if a.custom_values.len() > b.custom_values.len() { &a.custom_values } else { &b.custom_values }.clone();
                a.custom_values = bounds.clone();
                b.custom_values = bounds;
                (a, b)
            }),
            (arb_exponential_at(0.0), arb_custom()),
        ],
        negate in any::<bool>(),
    ) {
        let mut got = a.clone();
        let res = if negate { got.sub(&b) } else { got.add(&b) };
        if a.uses_custom_buckets() != b.uses_custom_buckets() {
            prop_assert_eq!(res, Err(ArithError::IncompatibleSchema));
            return Ok(());
        }
        prop_assert!(!res.unwrap().custom_bounds_reconciled);
        let schema = a.schema.min(b.schema);
        let mut want = expand(&a, schema);
        for (k, v) in expand(&b, schema) {
            let v = if negate { -v } else { v };
            want.entry(k).and_modify(|w| *w += v).or_insert(v);
        }
        prop_assert_eq!(got.schema, schema);
        prop_assert_eq!(expand(&got, schema), want);
        prop_assert_eq!(got.count.to_bits(), if negate { a.count - b.count } else { a.count + b.count }.to_bits());
        if !negate {
            prop_assert_eq!(got.validate(), Ok(()));
        }
    }

    #[test]
    fn zero_threshold_reconciliation_keeps_every_observation(
        (a, b) in (0i32..3).prop_flat_map(|schema| (
            arb_exponential().prop_map(move |mut h| { h.reduce_resolution(schema.min(h.schema)).unwrap(); h.schema = schema; h }),
            arb_exponential().prop_map(move |mut h| { h.reduce_resolution(schema.min(h.schema)).unwrap(); h.schema = schema; h }),
        )),
    ) {
        // Same schema (after reduction, then relabelled): bucket contents change, counts add up.
        // (Buckets inside a histogram's own zero bucket are dropped by an addition, as in
        // Prometheus, so the inputs have none.)
        let (a, b) = (outside_zero_bucket(&a), outside_zero_bucket(&b));
        let total = |h: &Histogram| h.zero_count + h.positive_buckets.iter().chain(&h.negative_buckets).sum::<f64>();
        let mut got = a.clone();
        got.add(&b).unwrap();
        prop_assert_eq!(total(&got), total(&a) + total(&b));
        prop_assert!(got.zero_threshold >= a.zero_threshold.max(b.zero_threshold));
    }

    #[test]
    fn compact_keeps_the_populated_buckets(h in arb_histogram(), max_empty in 0usize..3) {
        let mut c = h.clone();
        c.compact(max_empty);
        let populated = |h: &Histogram| expand(h, h.schema).into_iter().filter(|&(_, v)| v != 0.0).map(|(k, v)| (k, v.to_bits())).collect::<Vec<_>>();
        prop_assert_eq!(populated(&c), populated(&h));
        if max_empty == 0 {
            prop_assert!(canonical(&c.positive_spans, &c.positive_buckets));
            prop_assert!(canonical(&c.negative_spans, &c.negative_buckets));
        }
        prop_assert_eq!(c.validate(), Ok(()));
    }

    #[test]
    fn growing_counters_are_no_reset_and_shrinking_ones_are(h in arb_exponential(), bump in 1u32..5) {
        let mut prev = h.clone();
        prev.counter_reset_hint = CounterResetHint::Unknown;
        let mut cur = prev.clone();
        cur.positive_buckets.iter_mut().chain(&mut cur.negative_buckets).for_each(|c| *c += f64::from(bump));
        cur.count += f64::from(bump) * (cur.positive_buckets.len() + cur.negative_buckets.len()) as f64;
        prop_assert!(!detect_reset(&prev, &cur));
        prop_assert!(!detect_reset(&prev, &prev));
        prop_assert_eq!(detect_reset(&cur, &prev), cur.positive_buckets.len() + cur.negative_buckets.len() > 0);
    }

    #[test]
    fn equals_is_reflexive_and_sees_changed_counts(h in arb_histogram()) {
        prop_assert!(h.equals(&h.clone()));
        let mut other = h.clone();
        other.count += 1.0;
        prop_assert!(!h.equals(&other));
    }
}

fn exp_hist() -> Histogram {
    Histogram {
        schema: 2,
        zero_threshold: 0.001,
        zero_count: 1.0,
        count: 6.0,
        sum: 10.0,
        positive_spans: vec![Span { offset: -1, length: 2 }, Span { offset: 1, length: 1 }],
        positive_buckets: vec![1.0, 2.0, 1.0],
        negative_spans: vec![Span { offset: 0, length: 1 }],
        negative_buckets: vec![1.0],
        integer: true,
        ..Histogram::default()
    }
}

fn custom_hist() -> Histogram {
    Histogram {
        schema: -53,
        count: 3.0,
        custom_values: vec![0.1, 1.0],
        positive_spans: vec![Span { offset: 0, length: 3 }],
        positive_buckets: vec![1.0, 1.0, 1.0],
        integer: true,
        ..Histogram::default()
    }
}

/// A way to break a valid histogram, and the error it must give.
type Case = (Box<dyn Fn(&mut Histogram)>, ValidationError);

#[test]
fn validate_names_what_is_wrong() {
    use ValidationError as E;
    assert_eq!(exp_hist().validate(), Ok(()));
    assert_eq!(custom_hist().validate(), Ok(()));
    let cases: Vec<Case> = vec![
        (Box::new(|h| h.schema = 9), E::InvalidSchema(9)),
        (Box::new(|h| h.schema = -5), E::InvalidSchema(-5)),
        (
            Box::new(|h| h.positive_spans[1].offset = -1),
            E::SpanNegativeOffset { side: Side::Positive, span: 2, offset: -1 },
        ),
        (
            Box::new(|h| h.negative_buckets.push(0.0)),
            E::SpansBucketsMismatch { side: Side::Negative, spans_need: 1, buckets: 2 },
        ),
        (
            Box::new(|h| h.negative_buckets[0] = -1.0),
            E::NegativeBucketCount { side: Side::Negative, bucket: 1, count: -1.0 },
        ),
        (
            Box::new(|h| h.positive_buckets[2] = -1.0),
            E::NegativeBucketCount { side: Side::Positive, bucket: 3, count: -1.0 },
        ),
        (Box::new(|h| h.zero_count = -1.0), E::NegativeZeroCount(-1.0)),
        (Box::new(|h| h.count = 7.0), E::CountMismatch { count: 7, buckets: 6 }),
        (Box::new(|h| h.positive_buckets[0] = 1.5), E::NotInteger { value: 1.5 }),
        (
            Box::new(|h| {
                h.sum = f64::NAN;
                h.count = 5.0
            }),
            E::CountNotBigEnough { count: 5, buckets: 6 },
        ),
        (Box::new(|h| h.custom_values = vec![1.0]), E::ExponentialWithCustomBounds),
        (Box::new(|h| h.zero_threshold = -1.0), E::InvalidZeroThreshold(-1.0)),
    ];
    for (i, (break_it, want)) in cases.into_iter().enumerate() {
        let mut h = exp_hist();
        break_it(&mut h);
        assert_eq!(h.validate(), Err(want), "case {i}");
    }
    // NaN sum: a larger count is fine; float form: no count check, NaN counts pass.
    let mut h = exp_hist();
    h.sum = f64::NAN;
    h.count = 9.0;
    assert_eq!(h.validate(), Ok(()));
    h.integer = false;
    h.count = 2.5;
    h.positive_buckets[0] = f64::NAN;
    assert_eq!(h.validate(), Ok(()));
    h.count = -1.0;
    assert_eq!(h.validate(), Err(E::NegativeCount(-1.0)));

    let custom_cases: Vec<Case> = vec![
        (Box::new(|h| h.custom_values = vec![0.1, f64::NAN]), E::CustomBoundsNaN(2)),
        (Box::new(|h| h.custom_values = vec![1.0, 1.0]), E::CustomBoundsNotIncreasing(2)),
        (Box::new(|h| h.custom_values = vec![0.1, f64::INFINITY]), E::CustomBoundsInfinite),
        (Box::new(|h| h.custom_values = vec![0.1]), E::CustomBoundsTooFew { bounds: 1, span_length: 3 }),
        (
            Box::new(|h| h.positive_spans[0].offset = -1),
            E::SpanNegativeOffset { side: Side::Positive, span: 1, offset: -1 },
        ),
        (Box::new(|h| h.zero_count = 1.0), E::CustomBucketsZeroCount),
        (Box::new(|h| h.zero_threshold = 0.5), E::CustomBucketsZeroThreshold),
        (Box::new(|h| h.negative_spans = vec![Span::default()]), E::CustomBucketsNegativeSpans),
        (Box::new(|h| h.negative_buckets = vec![1.0]), E::CustomBucketsNegativeBuckets),
        (
            Box::new(|h| {
                h.positive_buckets.pop();
            }),
            E::SpansBucketsMismatch { side: Side::Positive, spans_need: 3, buckets: 2 },
        ),
    ];
    for (i, (break_it, want)) in custom_cases.into_iter().enumerate() {
        let mut h = custom_hist();
        break_it(&mut h);
        assert_eq!(h.validate(), Err(want), "custom case {i}");
    }
}

#[test]
fn integer_conversions() {
    let layout = Layout { schema: 0, positive_spans: &[Span { offset: 0, length: 3 }], ..Layout::default() };
    let h = Histogram::from_integer_deltas(layout, 9, 0, 4.5, &[2, 1, -3], &[], CounterResetHint::Unknown).unwrap();
    assert_eq!(h.positive_buckets, vec![2.0, 3.0, 0.0]);
    assert!(h.integer);
    assert_eq!(h.validate(), Err(ValidationError::CountMismatch { count: 9, buckets: 5 }));
    let bad = Histogram::from_integer_deltas(layout, 5, 0, 1.0, &[2, -3, 1], &[], CounterResetHint::Unknown).unwrap();
    assert_eq!(
        bad.validate(),
        Err(ValidationError::NegativeBucketCount { side: Side::Positive, bucket: 2, count: -1.0 })
    );
    assert!(bad.to_integer_deltas().is_none());
    assert_eq!(
        Histogram::from_integer_deltas(layout, 0, 0, 0.0, &[i64::MAX, 1, 0], &[], CounterResetHint::Unknown).err(),
        Some(ValidationError::CountNotExact { value: i64::MAX as f64 })
    );
    assert_eq!(
        Histogram::from_integer_deltas(layout, 1 << 60, 0, 0.0, &[0, 0, 0], &[], CounterResetHint::Unknown).err(),
        Some(ValidationError::CountNotExact { value: (1u64 << 60) as f64 })
    );
    let f = Histogram::from_float_counts(layout, 2.5, 0.0, 1.0, &[0.5, 1.0, 1.0], &[], CounterResetHint::Gauge);
    assert!(!f.integer && f.to_integer_deltas().is_none());
    assert_eq!(f.validate(), Ok(()));
    assert!(Histogram::stale().is_stale() && !f.is_stale());
}
