//! Native histograms through the evaluator, table-driven, against the in-memory source
//! ([`MemQuerier`], which keeps histograms). Expected values are worked out by hand from Prometheus' semantics (see
//! each case), or checked against a brute-force reference: the same counts as float series
//! (`rate` of a histogram's count is the `rate` of its count series), and folds of
//! [`Histogram::add`].

use std::sync::Arc;

use proptest::prelude::*;

use super::{Engine, EngineOptions, Value};
use crate::histogram::{CounterResetHint, Histogram, Span};
use crate::labels::Labels;
use crate::sample::{HistogramSample, Sample, SeriesSamples};
use crate::storage::MemQuerier;

/// A schema-0 counter histogram with `k` times the counts of step `i`: buckets (0.5, 1] and
/// (1, 2] holding `i` and `3i`, so the count is `4i` and the sum `10i`.
fn counter(i: i64, k: f64) -> Histogram {
    let i = i as f64 * k;
    Histogram {
        schema: 0,
        count: 4.0 * i,
        sum: 10.0 * i,
        positive_spans: vec![Span { offset: 0, length: 2 }],
        positive_buckets: vec![i, 3.0 * i],
        ..Histogram::default()
    }
}

fn labels(pairs: &[(&str, &str)]) -> Labels {
    Labels::from_pairs(pairs.iter().copied()).unwrap()
}

fn hist_series(pairs: &[(&str, &str)], points: Vec<(i64, Histogram)>) -> SeriesSamples {
    SeriesSamples {
        labels: labels(pairs),
        samples: Vec::new(),
        histograms: points
            .into_iter()
            .map(|(t, h)| HistogramSample { timestamp_ms: t, histogram: Arc::new(h) })
            .collect(),
    }
}

fn float_series(pairs: &[(&str, &str)], points: &[(i64, f64)]) -> SeriesSamples {
    SeriesSamples {
        labels: labels(pairs),
        samples: points.iter().map(|&(t, v)| Sample::new(t, v)).collect(),
        histograms: Vec::new(),
    }
}

/// `h_total{job="a"|"b"}`: [`counter`] every minute from 0 to 10m (b with twice the counts);
/// `h_count{job=...}`: their counts as floats; `mixed`: floats at 0 and 1m, a histogram at
/// 2m; `gone`: a histogram at 0 and a histogram stale marker at 1m.
fn fixture() -> MemQuerier {
    let steps = 0..=10i64;
    let mut series = Vec::new();
    for (job, k) in [("a", 1.0), ("b", 2.0)] {
        let hs = steps.clone().map(|i| (i * 60_000, counter(i, k))).collect();
        series.push(hist_series(&[("__name__", "h_total"), ("job", job)], hs));
        let counts: Vec<(i64, f64)> = steps.clone().map(|i| (i * 60_000, 4.0 * i as f64 * k)).collect();
        series.push(float_series(&[("__name__", "h_count"), ("job", job)], &counts));
    }
    let mut mixed = float_series(&[("__name__", "mixed")], &[(0, 1.0), (60_000, 5.0)]);
    mixed.histograms.push(HistogramSample { timestamp_ms: 120_000, histogram: Arc::new(counter(1, 1.0)) });
    series.push(mixed);
    series.push(hist_series(&[("__name__", "gone")], vec![(0, counter(1, 1.0)), (60_000, Histogram::stale())]));
    MemQuerier::new(series)
}

/// An instant result as sorted `labels value` lines; a histogram shows as `H(count/sum)`.
fn render(v: &Value) -> Vec<String> {
    let mut out: Vec<String> = match v {
        Value::Scalar { value, .. } => vec![format!("{value}")],
        Value::Vector(v) => v
            .iter()
            .map(|s| match &s.histogram {
                Some(h) => format!("{} H({}/{})", s.labels, h.count, h.sum),
                None => format!("{} {}", s.labels, s.value),
            })
            .collect(),
        Value::Matrix(m) => m
            .iter()
            .map(|s| {
                let hs: Vec<String> = s.histograms.iter().map(|p| format!("H({})", p.histogram.count)).collect();
                format!("{} {:?} {:?}", s.labels, s.samples.iter().map(|p| p.value).collect::<Vec<_>>(), hs)
            })
            .collect(),
        Value::String { value, .. } => vec![value.clone()],
    };
    out.sort();
    out
}

const MIN: i64 = 60_000;

#[test]
fn histogram_functions_and_operators() {
    // At 5m: a has count 20, sum 50; b count 40, sum 100.
    let cases: &[(&str, i64, &[&str])] = &[
        ("h_total{job=\"a\"}", 5 * MIN, &[r#"h_total{job="a"} H(20/50)"#]),
        ("h_total{job=\"a\"} offset 1m", 5 * MIN, &[r#"h_total{job="a"} H(16/40)"#]),
        ("h_total{job=\"a\"} @ 120", 5 * MIN, &[r#"h_total{job="a"} H(8/20)"#]),
        ("histogram_count(h_total)", 5 * MIN, &[r#"{job="a"} 20"#, r#"{job="b"} 40"#]),
        ("histogram_sum(h_total)", 5 * MIN, &[r#"{job="a"} 50"#, r#"{job="b"} 100"#]),
        ("histogram_avg(h_total)", 5 * MIN, &[r#"{job="a"} 2.5"#, r#"{job="b"} 2.5"#]),
        // Floats are skipped by the histogram functions, histograms by the float ones.
        ("histogram_count(h_count)", 5 * MIN, &[]),
        ("abs(h_total)", 5 * MIN, &[]),
        ("timestamp(h_total{job=\"a\"})", 5 * MIN, &[r#"{job="a"} 300"#]),
        ("-h_total{job=\"a\"}", 5 * MIN, &[r#"{job="a"} H(-20/-50)"#]),
        ("h_total{job=\"a\"} * 2", 5 * MIN, &[r#"{job="a"} H(40/100)"#]),
        ("2 * h_total{job=\"a\"}", 5 * MIN, &[r#"{job="a"} H(40/100)"#]),
        ("h_total{job=\"a\"} / 4", 5 * MIN, &[r#"{job="a"} H(5/12.5)"#]),
        // Histogram + float has no value (an info says so).
        ("h_total + 1", 5 * MIN, &[]),
        ("h_total{job=\"a\"} + ignoring(job) h_total{job=\"b\"}", 5 * MIN, &["{} H(60/150)"]),
        ("h_total - h_total", 5 * MIN, &[r#"{job="a"} H(0/0)"#, r#"{job="b"} H(0/0)"#]),
        ("h_total == h_total", 5 * MIN, &[r#"h_total{job="a"} H(20/50)"#, r#"h_total{job="b"} H(40/100)"#]),
        ("sum(h_total)", 5 * MIN, &["{} H(60/150)"]),
        ("avg(h_total)", 5 * MIN, &["{} H(30/75)"]),
        ("count(h_total)", 5 * MIN, &["{} 2"]),
        ("max(h_total)", 5 * MIN, &[]),
        ("sum by (job) (h_total)", 5 * MIN, &[r#"{job="a"} H(20/50)"#, r#"{job="b"} H(40/100)"#]),
        // A stale marker hides a histogram series at once.
        ("gone", 30_000, &["gone{} H(4/10)"]),
        ("gone", 90_000, &[]),
        // The window (0, 5m] holds the histograms of 1m..5m.
        ("count_over_time(h_total{job=\"a\"}[5m])", 5 * MIN, &[r#"{job="a"} 5"#]),
        ("present_over_time(h_total{job=\"a\"}[5m])", 5 * MIN, &[r#"{job="a"} 1"#]),
        ("histogram_count(sum_over_time(h_total{job=\"a\"}[5m]))", 5 * MIN, &[r#"{job="a"} 60"#]),
        ("histogram_count(avg_over_time(h_total{job=\"a\"}[5m]))", 5 * MIN, &[r#"{job="a"} 12"#]),
        ("last_over_time(h_total{job=\"a\"}[5m])", 5 * MIN, &[r#"h_total{job="a"} H(20/50)"#]),
        ("max_over_time(h_total{job=\"a\"}[5m])", 5 * MIN, &[]),
        ("resets(h_total{job=\"a\"}[5m])", 5 * MIN, &[r#"{job="a"} 0"#]),
        ("changes(h_total{job=\"a\"}[5m])", 5 * MIN, &[r#"{job="a"} 4"#]),
        // increase: change 16 over 4m, extrapolated 1m back to the window's start (the zero
        // point, 4 / 16 * 4m = 1m, is not earlier): 16 * 5/4 = 20.
        ("histogram_count(increase(h_total{job=\"a\"}[5m]))", 5 * MIN, &[r#"{job="a"} 20"#]),
        // irate: the last two, 16 -> 20 over 60 s.
        ("histogram_count(irate(h_total{job=\"a\"}[5m]))", 5 * MIN, &[r#"{job="a"} 0.06666666666666667"#]),
        ("histogram_count(idelta(h_total{job=\"a\"}[5m]))", 5 * MIN, &[r#"{job="a"} 4"#]),
        // A window of floats and histograms: rate has no value, max takes the floats.
        ("rate(mixed[5m])", 3 * MIN, &[]),
        ("max_over_time(mixed[5m])", 3 * MIN, &["{} 5"]),
        ("count_over_time(mixed[5m])", 3 * MIN, &["{} 3"]),
        ("changes(mixed[5m])", 3 * MIN, &["{} 2"]),
        ("mixed", 3 * MIN, &["mixed{} H(4/10)"]),
        // Quantile 0.5 of a: rank 10 of 20 lies 5 into (1, 2] (15 observations), interpolated
        // exponentially: 2^(5/15).
        ("histogram_quantile(0.5, h_total{job=\"a\"})", 5 * MIN, &[r#"{job="a"} 1.2599210498948732"#]),
        // Fraction below 1: the whole first bucket (5 of 20).
        ("histogram_fraction(0, 1, h_total{job=\"a\"})", 5 * MIN, &[r#"{job="a"} 0.25"#]),
        ("sort(h_total)", 5 * MIN, &[]),
        (
            "label_replace(h_total{job=\"a\"}, \"x\", \"y\", \"\", \"\")",
            5 * MIN,
            &[r#"h_total{job="a", x="y"} H(20/50)"#],
        ),
        ("scalar(h_total{job=\"a\"})", 5 * MIN, &["NaN"]),
        // Trims at 5m (a: 5 in (0.5, 1], 15 in (1, 2]): at a bucket bound whole buckets stay;
        // the name stays as after a comparison.
        ("h_total{job=\"a\"} </ 1", 5 * MIN, &[r#"h_total{job="a"} H(5/3.5355339059327378)"#]),
        ("h_total{job=\"a\"} >/ 1", 5 * MIN, &[r#"h_total{job="a"} H(15/21.213203435596427)"#]),
        ("h_total{job=\"a\"} >/ 0.5", 5 * MIN, &[r#"h_total{job="a"} H(20/50)"#]),
        ("histogram_count(h_total </ 1)", 5 * MIN, &[r#"{job="a"} 5"#, r#"{job="b"} 10"#]),
        // Matching: a float per job as the threshold.
        (
            "h_total >/ on(job) (h_count / h_count)",
            5 * MIN,
            &[r#"{job="a"} H(15/21.213203435596427)"#, r#"{job="b"} H(30/42.42640687119285)"#],
        ),
        // Floats and a histogram on the right side have no value.
        ("h_count </ 1", 5 * MIN, &[]),
        ("1 </ h_total", 5 * MIN, &[]),
        // Anchored: 20 (5m) - 16 (4m), the window (4m, 5m] anchored at 4m.
        ("histogram_count(increase(h_total{job=\"a\"}[1m] anchored))", 5 * MIN, &[r#"{job="a"} 4"#]),
        (
            "histogram_count(rate(h_total{job=\"a\"}[1m] smoothed))",
            5 * MIN + 30_000,
            &[r#"{job="a"} 0.06666666666666667"#],
        ),
        ("resets(h_total{job=\"a\"}[1m] anchored)", 5 * MIN, &[r#"{job="a"} 0"#]),
        ("changes(h_total{job=\"a\"}[1m] anchored)", 5 * MIN, &[r#"{job="a"} 1"#]),
        // Smoothed instant selector: halfway between 16 (4m) and 20 (5m).
        ("h_total{job=\"a\"} smoothed", 4 * MIN + 30_000, &[r#"h_total{job="a"} H(18/45)"#]),
    ];
    let engine = Engine::new(EngineOptions::default());
    let src = fixture();
    for (query, t, want) in cases {
        let got = engine.instant(&src, query, *t).unwrap_or_else(|e| panic!("{query}: {e}"));
        assert_eq!(render(&got.value), want.iter().map(|s| s.to_string()).collect::<Vec<_>>(), "{query} at {t}");
    }
}

#[test]
fn annotations_name_the_problem() {
    // Each ends with the position Prometheus gives it (see `positions.rs`).
    let engine = Engine::new(EngineOptions::default());
    let src = fixture();
    let cases: &[(&str, i64, &str)] = &[
        ("h_total + 1", 5 * MIN, "PromQL info: incompatible sample types encountered for binary operator \"+\": histogram + float (1:1)"),
        ("rate(mixed[5m])", 3 * MIN, "PromQL warning: encountered a mix of histograms and floats for metric name \"mixed\" (1:6)"),
        (
            "max_over_time(mixed[5m])",
            3 * MIN,
            "PromQL info: ignored histograms in a range containing both floats and histograms for metric name \"mixed\" (1:15)",
        ),
        ("max(h_total)", 5 * MIN, "PromQL info: ignored histogram in max aggregation (1:5)"),
        ("topk(1, h_total)", 5 * MIN, "PromQL info: ignored histogram in topk aggregation (1:1)"),
        ("sum({__name__=~\"h_total|h_count\", job=\"a\"})", 5 * MIN, "PromQL warning: encountered a mix of histograms and floats for aggregation (1:5)"),
        ("delta(h_total[5m])", 5 * MIN, "PromQL warning: this native histogram metric is not a gauge: \"h_total\" (1:7)"),
        ("h_count </ 1", 5 * MIN, "PromQL info: incompatible sample types encountered for binary operator \"</\": float </ float (1:1)"),
        ("1 >/ h_total", 5 * MIN, "PromQL info: incompatible sample types encountered for binary operator \">/\": float >/ histogram (1:1)"),
        ("rate(mixed[5m] anchored)", 3 * MIN, "PromQL warning: encountered a mix of histograms and floats for metric name \"mixed\" (1:6)"),
        ("mixed smoothed", 90_000, "PromQL warning: encountered a mix of histograms and floats for metric name \"mixed\" (1:1)"),
    ];
    for (query, t, want) in cases {
        let got = engine.instant(&src, query, *t).unwrap_or_else(|e| panic!("{query}: {e}"));
        let all: Vec<String> = got.annotations.iter().map(ToString::to_string).collect();
        assert!(all.iter().any(|a| a == want), "{query}: {all:?}");
    }
}

/// `rate`, `increase` and `delta` of a histogram have the count and sum of the same function
/// over the float series of its counts and sums: the extrapolation is the same.
#[test]
fn histogram_rates_match_float_rates_of_the_counts() {
    let engine = Engine::new(EngineOptions::default());
    let src = fixture();
    for f in ["rate", "increase", "irate", "idelta", "resets", "changes"] {
        for t in [2 * MIN + 30_000, 5 * MIN, 10 * MIN] {
            for range in ["1m", "3m", "5m"] {
                let h = format!("histogram_count({f}(h_total[{range}]))");
                let c = format!("{f}(h_count[{range}])");
                let (h, c) = (engine.instant(&src, &h, t).unwrap(), engine.instant(&src, &c, t).unwrap());
                let counts = |v: &Value| match v {
                    Value::Vector(v) => v.iter().map(|s| (s.labels.get("job").map(str::to_owned), s.value)).collect(),
                    _ => Vec::new(),
                };
                if matches!(f, "resets" | "changes") {
                    // Counted directly on the histograms, not on their counts.
                    let got: Vec<_> =
                        counts(&engine.instant(&src, &format!("{f}(h_total[{range}])"), t).unwrap().value);
                    assert_eq!(got, counts(&c.value), "{f} {range} at {t}");
                    continue;
                }
                let (hv, cv) = (counts(&h.value), counts(&c.value));
                assert_eq!(hv.len(), cv.len(), "{f} {range} at {t}");
                for (a, b) in hv.iter().zip(&cv) {
                    assert_eq!(a.0, b.0);
                    assert!((a.1 - b.1).abs() <= 1e-9 * b.1.abs().max(1.0), "{f} {range} at {t}: {a:?} vs {b:?}");
                }
            }
        }
    }
}

/// Range queries (which take the series-major paths of `grid.rs`) agree with instant queries
/// at every step, for histogram series too.
#[test]
fn range_steps_equal_instant_queries_with_histograms() {
    let engine = Engine::new(EngineOptions::default());
    let src = fixture();
    let queries = [
        "h_total",
        "mixed",
        "gone",
        "rate(h_total[2m])",
        "sum(h_total)",
        "sum(rate(h_total[3m]))",
        "histogram_count(h_total)",
        "count_over_time(mixed[2m])",
        "last_over_time(mixed[2m])",
        "sum_over_time(h_total[2m:30s])",
        "rate(h_total[2m:1m])",
        "max_over_time(mixed[3m])",
    ];
    for q in queries {
        let range = engine.range(&src, q, 0, 10 * MIN, 30_000).unwrap_or_else(|e| panic!("{q}: {e}"));
        let Value::Matrix(m) = range.value else { panic!("{q}: not a matrix") };
        for k in 0..=20 {
            let t = k * 30_000;
            let Value::Vector(v) = engine.instant(&src, q, t).unwrap().value else { panic!("{q}: not a vector") };
            let mut want: Vec<String> = v.iter().map(|s| point(&s.labels, s.value, s.histogram.as_deref())).collect();
            let mut got: Vec<String> = m
                .iter()
                .filter_map(|s| {
                    let f = s.samples.iter().find(|p| p.timestamp_ms == t).map(|p| point(&s.labels, p.value, None));
                    f.or_else(|| {
                        let h = s.histograms.iter().find(|p| p.timestamp_ms == t)?;
                        Some(point(&s.labels, 0.0, Some(&h.histogram)))
                    })
                })
                .collect();
            want.sort();
            got.sort();
            assert_eq!(got, want, "{q} at {t}");
        }
    }
}

fn point(l: &Labels, v: f64, h: Option<&Histogram>) -> String {
    match h {
        Some(h) => format!("{l} H({:?})", (h.count, h.sum, &h.positive_buckets)),
        None => format!("{l} {v}"),
    }
}

fn arb_histogram() -> impl Strategy<Value = Histogram> {
    (-1i32..=2, prop::collection::vec(0u32..20, 1..6), -3i32..3).prop_map(|(schema, counts, offset)| {
        let buckets: Vec<f64> = counts.iter().map(|&c| f64::from(c)).collect();
        let count = buckets.iter().sum();
        Histogram {
            schema,
            count,
            sum: count * 1.5,
            positive_spans: vec![Span { offset, length: buckets.len() as u32 }],
            positive_buckets: buckets,
            counter_reset_hint: CounterResetHint::Gauge,
            ..Histogram::default()
        }
    })
}

proptest! {
    /// `sum` of histogram series equals folding [`Histogram::add`] over them (compacted), and
    /// `count` counts them.
    #[test]
    fn sum_is_a_fold_of_add(hs in prop::collection::vec(arb_histogram(), 1..6)) {
        let series: Vec<SeriesSamples> = hs
            .iter()
            .enumerate()
            .map(|(i, h)| hist_series(&[("__name__", "x"), ("i", &i.to_string())], vec![(0, h.clone())]))
            .collect();
        let src = MemQuerier::new(series);
        let engine = Engine::new(EngineOptions::default());
        let got = engine.instant(&src, "sum(x)", 0).unwrap();
        let Value::Vector(v) = got.value else { panic!("not a vector") };
        let mut want = hs[0].clone();
        for h in &hs[1..] {
            want.add(h).unwrap();
        }
        want.compact(0);
        prop_assert_eq!(v.len(), 1);
        let sum = v[0].histogram.as_deref().unwrap();
        prop_assert!(sum.equals(&want), "{:?} vs {:?}", sum, want);
        let Value::Vector(c) = engine.instant(&src, "count(x)", 0).unwrap().value else { panic!("not a vector") };
        prop_assert_eq!(c[0].value, hs.len() as f64);
    }
}

#[test]
fn trims_refuse_bool_and_scalar_operands() {
    let engine = Engine::new(EngineOptions::default());
    let src = fixture();
    let bool_err = engine.instant(&src, "h_total </ bool 1", 0).unwrap_err().to_string();
    assert!(bool_err.contains("bool modifier can only be used on comparison operators"), "{bool_err}");
    let scalar_err = engine.instant(&src, "1 </ 2", 0).unwrap_err().to_string();
    assert!(scalar_err.contains("not allowed for Scalar operations"), "{scalar_err}");
}
