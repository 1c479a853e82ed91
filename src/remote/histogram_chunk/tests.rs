//! Tests of the histogram chunk codec: known bytes, the cutting rules, and random series of valid
//! histograms (integer and float, exponential and custom buckets, hints, gauges, stale markers)
//! round-tripping through [`plan`], [`encode`] and [`decode`].

use std::collections::BTreeMap;
use std::sync::Arc;

use proptest::prelude::*;

use super::layout::{
    indexed, read_custom_bound, read_zero_threshold, spans_of, write_custom_bound, write_zero_threshold,
};
use super::varbit::{read_varbit_int, read_varbit_uint, write_varbit_int, write_varbit_uint};
use super::*;
use crate::bits::{BitReader, BitWriter};
use crate::histogram::{CounterResetHint, Histogram, Span, CUSTOM_BUCKETS_SCHEMA};
use crate::remote::xor::SAMPLES_PER_CHUNK;
use crate::sample::HistogramSample;

fn sample(t: i64, h: Histogram) -> HistogramSample {
    HistogramSample { timestamp_ms: t, histogram: Arc::new(h) }
}

fn int_hist(count: f64, buckets: &[f64], hint: CounterResetHint) -> Histogram {
    Histogram {
        counter_reset_hint: hint,
        schema: 1,
        zero_threshold: 2f64.powi(-128),
        count,
        sum: count * 1.5,
        positive_spans: vec![Span { offset: 0, length: buckets.len() as u32 }],
        positive_buckets: buckets.to_vec(),
        integer: true,
        ..Histogram::default()
    }
}

fn bits_of(data: &[u8]) -> String {
    data.iter().map(|b| format!("{b:08b}")).collect()
}

#[test]
fn known_layout_of_one_integer_histogram() {
    let h = Histogram {
        schema: 1,
        zero_threshold: 2f64.powi(-128),
        count: 3.0,
        zero_count: 1.0,
        sum: 0.0,
        positive_spans: vec![Span { offset: -1, length: 2 }],
        positive_buckets: vec![1.0, 1.0],
        integer: true,
        ..Histogram::default()
    };
    let data = encode(&[sample(2, h)], false, ResetHeader::NotCounterReset);
    let want = [
        "0000000000000001", // one histogram
        "01000000",         // flags: not a counter reset
        "01110100",         // zero threshold 2^-128 as 116
        "10001",            // schema 1
        "10001",            // one positive span
        "10010",            // of length 2
        "10111",            // and offset -1
        "0",                // no negative span
        "10010",            // t = 2
        "10011",            // count 3
        "10001",            // zero count 1
        &"0".repeat(64),    // sum 0.0
        "10001",            // bucket -1: 1
        "0",                // bucket 0: 1, a difference of 0
    ]
    .concat();
    let got = bits_of(&data);
    assert_eq!(&got[..want.len()], want);
    assert!(got[want.len()..].chars().all(|c| c == '0') && got.len() - want.len() < 8);
    let back = decode(&data, false).unwrap();
    assert_eq!(back.header, ResetHeader::NotCounterReset);
    assert_eq!(back.histograms[0].0, 2);
    assert_eq!(back.histograms[0].1.positive_buckets, [1.0, 1.0]);
}

#[test]
fn varbit_buckets_match_prometheus_ranges() {
    for (v, width) in
        [(0i64, 1), (4, 5), (-3, 5), (5, 9), (-4, 9), (32, 9), (256, 13), (2048, 17), (131_072, 24), (16_777_216, 32)]
    {
        let mut w = BitWriter::new();
        write_varbit_int(&mut w, v);
        w.write(0b1, 1);
        let data = w.into_bytes();
        let bits = bits_of(&data);
        assert_eq!(bits[width..].find('1'), Some(0), "{v}: {bits}");
        assert_eq!(read_varbit_int(&mut BitReader::new(&data)).unwrap(), v);
    }
    for v in [i64::MIN, i64::MAX, 1 << 55, -(1 << 55) + 1, (1 << 55) + 1] {
        let mut w = BitWriter::new();
        write_varbit_int(&mut w, v);
        assert_eq!(read_varbit_int(&mut BitReader::new(&w.into_bytes())).unwrap(), v);
    }
    for v in [0u64, 7, 8, 63, 64, 4095, 262_143, 33_554_431, 1 << 56, u64::MAX] {
        let mut w = BitWriter::new();
        write_varbit_uint(&mut w, v);
        assert_eq!(read_varbit_uint(&mut BitReader::new(&w.into_bytes())).unwrap(), v);
    }
}

#[test]
fn zero_thresholds_and_custom_bounds_take_prometheus_short_forms() {
    let zt = |v: f64| {
        let mut w = BitWriter::new();
        write_zero_threshold(&mut w, v);
        let data = w.into_bytes();
        assert_eq!(read_zero_threshold(&mut BitReader::new(&data)).unwrap().to_bits(), v.to_bits());
        data
    };
    assert_eq!(zt(0.0), [0]);
    assert_eq!(zt(2f64.powi(-128)), [116]);
    assert_eq!(zt(1024.0), [254]);
    assert_eq!(zt(2f64.powi(-243)), [1]);
    assert_eq!(zt(0.001).len(), 9);
    assert_eq!(zt(2048.0)[0], 255);
    assert_eq!(zt(-0.5)[0], 255);
    let bound = |v: f64| {
        let mut w = BitWriter::new();
        write_custom_bound(&mut w, v);
        let data = w.into_bytes();
        assert_eq!(read_custom_bound(&mut BitReader::new(&data)).unwrap().to_bits(), v.to_bits());
        bits_of(&data)
    };
    // 0.1 -> 101 as a varbit uint of 9 bits; 0.0 -> 1.
    assert!(bound(0.1).starts_with("1110001100101"));
    assert!(bound(0.0).starts_with("10001"));
    for v in [-1.0, 0.0001, 33_554.431, f64::INFINITY, 1e300, 33_554.43] {
        bound(v);
    }
    assert!(bound(-1.0).starts_with('0') && bound(0.0001).starts_with('0'));
}

#[test]
fn cuts_at_120_resets_schema_changes_kinds_gauges_and_after_stale() {
    let grow = |n: usize| (0..n).map(|i| sample(i as i64, int_hist(i as f64, &[i as f64], CounterResetHint::Unknown)));
    let run: Vec<_> = grow(250).collect();
    let p = plan(&run);
    assert_eq!(p.iter().map(|c| c.range.len()).collect::<Vec<_>>(), [120, 120, 10]);
    assert_eq!(
        p.iter().map(|c| c.header).collect::<Vec<_>>(),
        [ResetHeader::Unknown, ResetHeader::NotCounterReset, ResetHeader::NotCounterReset]
    );

    let h = |count: f64, hint| int_hist(count, &[count], hint);
    let float = Histogram { integer: false, ..h(9.0, CounterResetHint::Unknown) };
    let coarser = Histogram { schema: 0, ..h(9.0, CounterResetHint::Unknown) };
    let run = vec![
        sample(1, h(5.0, CounterResetHint::CounterReset)),
        sample(2, h(6.0, CounterResetHint::Unknown)),
        sample(3, h(2.0, CounterResetHint::NotCounterReset)), // went down: a reset whatever the hint
        sample(4, h(3.0, CounterResetHint::CounterReset)),    // the hint alone
        sample(5, coarser),                                   // schema change
        sample(6, float),                                     // float after integer
        sample(7, Histogram { integer: true, ..Histogram::stale() }), // joins the float chunk
        sample(8, h(10.0, CounterResetHint::Unknown)),        // after stale, and integer again
        sample(9, h(4.0, CounterResetHint::Gauge)),
        sample(10, h(1.0, CounterResetHint::Gauge)), // gauges go down
        sample(11, h(12.0, CounterResetHint::Unknown)),
    ];
    let p = plan(&run);
    let got: Vec<_> = p.iter().map(|c| (c.range.clone(), c.float, c.header)).collect();
    use ResetHeader::*;
    assert_eq!(
        got,
        [
            (0..2, false, CounterReset),
            (2..3, false, CounterReset),
            (3..4, false, CounterReset),
            (4..5, false, Unknown),
            (5..7, true, Unknown),
            (7..8, false, Unknown),
            (8..10, false, Gauge),
            (10..11, false, Unknown),
        ]
    );
}

#[test]
fn new_and_vanished_buckets_share_one_chunk_as_prometheus_recodes_it() {
    let with = |spans: Vec<Span>, buckets: Vec<f64>| Histogram {
        count: buckets.iter().sum(),
        positive_spans: spans,
        positive_buckets: buckets,
        ..int_hist(0.0, &[], CounterResetHint::Unknown)
    };
    let s = |offset, length| Span { offset, length };
    let run = vec![
        sample(0, with(vec![s(0, 2)], vec![1.0, 0.0])),
        sample(15, with(vec![s(0, 1), s(2, 1)], vec![2.0, 1.0])), // bucket 1 (empty) gone, 3 new
        sample(30, with(vec![s(-2, 1), s(1, 1), s(2, 1)], vec![1.0, 2.0, 1.0])),
    ];
    let p = plan(&run);
    assert_eq!(p.len(), 1);
    let back = decode(&encode(&run, false, p[0].header), false).unwrap();
    // The layout covers every bucket seen: -2, 0, 1 and 3.
    assert_eq!(back.histograms[0].1.positive_spans, [s(-2, 1), s(1, 2), s(1, 1)]);
    let counts: Vec<_> = back.histograms.iter().map(|(_, h)| h.positive_buckets.clone()).collect();
    assert_eq!(counts, [vec![0.0, 1.0, 0.0, 0.0], vec![0.0, 2.0, 0.0, 1.0], vec![1.0, 2.0, 0.0, 1.0]]);
    assert_eq!(
        back.histograms.iter().map(|(_, h)| h.counter_reset_hint).collect::<Vec<_>>(),
        [CounterResetHint::Unknown, CounterResetHint::NotCounterReset, CounterResetHint::NotCounterReset]
    );

    // Layouts that only grow end with the last histogram's spans as sent.
    let run = vec![sample(0, with(vec![s(1, 1)], vec![1.0])), sample(1, with(vec![s(0, 1), s(0, 1)], vec![1.0, 1.0]))];
    let back = decode(&encode(&run, false, ResetHeader::Unknown), false).unwrap();
    assert_eq!(back.histograms[0].1.positive_spans, [s(0, 1), s(0, 1)]);
}

#[test]
fn decoder_rejects_truncation_and_never_panics_on_garbage() {
    let run: Vec<_> = (0..5).map(|i| sample(i, int_hist(i as f64, &[i as f64], CounterResetHint::Unknown))).collect();
    let data = encode(&run, false, ResetHeader::Unknown);
    for cut in 0..data.len() {
        assert!(decode(&data[..cut], false).is_err(), "{cut}");
    }
    assert_eq!(decode(&[0, 0, 0], true).unwrap().histograms.len(), 0);
}

// ---- Random series -------------------------------------------------------------------------

/// One step of a random series.
#[derive(Clone, Debug)]
enum Step {
    /// Counts grow by these amounts (per bucket, cycling), maybe with a new bucket.
    Grow(Vec<u8>, Option<(bool, i8)>),
    /// Empty buckets leave the spans.
    DropEmpty,
    /// Counts fall to these fractions (a counter reset), with or without the hint.
    Reset(bool),
    /// A stale marker.
    Stale,
    /// A new series shape: kind, schema choice, zero threshold choice, gauge, custom bounds.
    Fresh(bool, u8, u8, bool, Vec<u16>),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => (proptest::collection::vec(0u8..20, 1..4), proptest::option::of((any::<bool>(), -8i8..8)))
            .prop_map(|(g, b)| Step::Grow(g, b)),
        1 => Just(Step::DropEmpty),
        1 => any::<bool>().prop_map(Step::Reset),
        1 => Just(Step::Stale),
        1 => (any::<bool>(), 0u8..14, 0u8..4, any::<bool>(), proptest::collection::vec(1u16..2000, 1..5))
            .prop_map(|(i, s, z, g, c)| Step::Fresh(i, s, z, g, c)),
    ]
}

/// The shape and counts a random series is at.
#[derive(Clone, Debug)]
struct State {
    integer: bool,
    schema: i32,
    zero_threshold: f64,
    gauge: bool,
    custom_values: Vec<f64>,
    zero_count: f64,
    sides: [BTreeMap<i32, f64>; 2],
    sum: f64,
    hint: CounterResetHint,
}

impl State {
    fn fresh(integer: bool, schema: u8, zt: u8, gauge: bool, bounds_seed: &[u16]) -> Self {
        let schema = if schema == 13 { CUSTOM_BUCKETS_SCHEMA } else { i32::from(schema) - 4 };
        let custom = schema == CUSTOM_BUCKETS_SCHEMA;
        let mut bounds: Vec<f64> = bounds_seed.iter().map(|&c| f64::from(c) / 8.0 - 10.0).collect();
        bounds.sort_by(f64::total_cmp);
        bounds.dedup();
        Self {
            integer,
            schema,
            zero_threshold: if custom { 0.0 } else { [0.0, 2f64.powi(-128), 0.001, 1e-300][usize::from(zt)] },
            gauge,
            custom_values: if custom { bounds } else { Vec::new() },
            zero_count: 0.0,
            sides: [BTreeMap::new(), BTreeMap::new()],
            sum: 0.0,
            hint: if gauge { CounterResetHint::Gauge } else { CounterResetHint::Unknown },
        }
    }

    fn apply(&mut self, step: &Step) {
        let custom = self.schema == CUSTOM_BUCKETS_SCHEMA;
        let unit = if self.integer { 1.0 } else { 0.25 };
        self.hint = if self.gauge { CounterResetHint::Gauge } else { CounterResetHint::NotCounterReset };
        match step {
            Step::Grow(by, new) => {
                if let Some((negative, idx)) = *new {
                    let negative = negative && !custom;
                    let idx = if custom {
                        i32::from(idx.rem_euclid(8)).min(self.custom_values.len() as i32)
                    } else {
                        i32::from(idx)
                    };
                    self.sides[usize::from(negative)].entry(idx).or_insert(0.0);
                }
                let mut k = 0;
                for side in &mut self.sides {
                    for c in side.values_mut() {
                        let d = f64::from(by[k % by.len()]) * unit;
                        // Gauges also go down.
                        *c = if self.gauge && k % 2 == 1 { (*c - d).max(0.0) } else { *c + d };
                        k += 1;
                    }
                }
                if !custom {
                    self.zero_count += f64::from(by[0] % 3) * unit;
                }
                self.sum += f64::from(by[0]) * 0.7;
            }
            Step::DropEmpty => {
                for side in &mut self.sides {
                    side.retain(|_, c| *c != 0.0);
                }
            }
            Step::Reset(hinted) => {
                for side in &mut self.sides {
                    for c in side.values_mut() {
                        *c = (*c / 2.0 / unit).floor() * unit;
                    }
                }
                self.zero_count = 0.0;
                self.sum /= 3.0;
                if *hinted && !self.gauge {
                    self.hint = CounterResetHint::CounterReset;
                } else if !self.gauge {
                    self.hint = CounterResetHint::Unknown;
                }
            }
            Step::Stale | Step::Fresh(..) => {}
        }
    }

    fn histogram(&self) -> Histogram {
        let side = |m: &BTreeMap<i32, f64>| {
            let idx: Vec<i32> = m.keys().copied().collect();
            (spans_of(&idx), m.values().copied().collect::<Vec<f64>>())
        };
        let (positive_spans, positive_buckets) = side(&self.sides[0]);
        let (negative_spans, negative_buckets) = side(&self.sides[1]);
        let count = self.zero_count + positive_buckets.iter().sum::<f64>() + negative_buckets.iter().sum::<f64>();
        Histogram {
            counter_reset_hint: self.hint,
            schema: self.schema,
            zero_threshold: self.zero_threshold,
            zero_count: self.zero_count,
            count,
            sum: self.sum,
            positive_spans,
            negative_spans,
            positive_buckets,
            negative_buckets,
            custom_values: self.custom_values.clone(),
            integer: self.integer,
        }
    }
}

fn series() -> impl Strategy<Value = Vec<HistogramSample>> {
    (
        any::<bool>(),
        any::<bool>(),
        proptest::collection::vec(
            (step(), prop_oneof![Just(15_000i64), 1i64..100_000, 1i64..i64::from(u32::MAX)]),
            1..300,
        ),
        -1_000_000_000_000i64..2_000_000_000_000,
    )
        .prop_map(|(integer, gauge, steps, t0)| {
            let mut state = State::fresh(integer, 5, 1, gauge, &[]);
            let mut t = t0;
            steps
                .iter()
                .map(|(step, dt)| {
                    t += dt;
                    if let Step::Fresh(i, s, z, g, c) = step {
                        state = State::fresh(*i, *s, *z, *g, c);
                    }
                    state.apply(step);
                    let h = if matches!(step, Step::Stale) {
                        Histogram { integer: state.integer, ..Histogram::stale() }
                    } else {
                        state.histogram()
                    };
                    sample(t, h)
                })
                .collect()
        })
}

/// Non-empty buckets of one side by absolute index.
fn by_index(spans: &[Span], counts: &[f64]) -> Vec<(i32, u64)> {
    indexed(spans, counts).filter(|&(_, c)| c != 0.0).map(|(i, c)| (i, c.to_bits())).collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn random_series_round_trip_through_plan_encode_decode(run in series()) {
        let chunks = plan(&run);
        let mut next = 0;
        for c in &chunks {
            prop_assert_eq!(c.range.start, next);
            prop_assert!(!c.range.is_empty() && c.range.len() <= SAMPLES_PER_CHUNK);
            next = c.range.end;
            let written = &run[c.range.clone()];
            let data = encode(written, c.float, c.header);
            prop_assert_eq!(&encode(written, c.float, c.header), &data, "deterministic");
            let back = decode(&data, c.float).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(back.header, c.header);
            prop_assert_eq!(back.histograms.len(), written.len());
            let first = &written[0].histogram;
            match first.counter_reset_hint {
                CounterResetHint::Gauge if !first.is_stale() => prop_assert_eq!(c.header, ResetHeader::Gauge),
                CounterResetHint::CounterReset => prop_assert_eq!(c.header, ResetHeader::CounterReset),
                _ => {}
            }
            let mut seen_stale = false;
            for (k, (s, (t, h))) in written.iter().zip(&back.histograms).enumerate() {
                let w = &s.histogram;
                prop_assert_eq!(*t, s.timestamp_ms);
                prop_assert_eq!(h.integer, !c.float);
                if k > 0 && !w.is_stale() {
                    prop_assert!(w.counter_reset_hint != CounterResetHint::CounterReset, "a reset hint starts a chunk");
                    prop_assert!(!seen_stale, "only stale markers follow one");
                    if c.header != ResetHeader::Gauge {
                        prop_assert_eq!(h.counter_reset_hint, CounterResetHint::NotCounterReset);
                    }
                }
                seen_stale |= w.is_stale();
                if w.is_stale() {
                    prop_assert!(h.is_stale());
                    continue;
                }
                prop_assert_eq!(h.counter_reset_hint == CounterResetHint::Gauge, w.counter_reset_hint == CounterResetHint::Gauge);
                prop_assert_eq!(w.integer, !c.float);
                prop_assert_eq!(h.schema, w.schema);
                prop_assert_eq!(h.zero_threshold.to_bits(), w.zero_threshold.to_bits());
                prop_assert_eq!(&h.custom_values, &w.custom_values);
                prop_assert_eq!(h.count.to_bits(), w.count.to_bits());
                prop_assert_eq!(h.zero_count.to_bits(), w.zero_count.to_bits());
                prop_assert_eq!(h.sum.to_bits(), w.sum.to_bits());
                prop_assert_eq!(by_index(&h.positive_spans, &h.positive_buckets), by_index(&w.positive_spans, &w.positive_buckets));
                prop_assert_eq!(by_index(&h.negative_spans, &h.negative_buckets), by_index(&w.negative_spans, &w.negative_buckets));
                if written.iter().all(|x| x.histogram.is_stale() || x.histogram.positive_spans == w.positive_spans) {
                    prop_assert_eq!(&h.positive_spans, &w.positive_spans, "a layout that never changes is kept as sent");
                }
            }
        }
        prop_assert_eq!(next, run.len());
    }

    #[test]
    fn decoder_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300), float in any::<bool>()) {
        let _ = decode(&bytes, float);
    }
}
