//! Range queries through the engine on a querier answering in tier points
//! ([`MemQuerier::with_tiers`]) against the same queries on its raw samples: the same answers,
//! the tier the rules choose (named by the info), and raw reads wherever a rule says so.

use std::sync::Arc;

use proptest::prelude::*;

use super::*;
use crate::histogram::{Histogram, Span};
use crate::labels::Labels;
use crate::promql::functions::rollup::{lookup, parameterless_fn};
use crate::promql::functions::tier_rollup::tests::{agrees, conditioning, series as generated, shape, ANSWERED};
use crate::promql::result_cache::{RangeRequest, ResultCache};
use crate::promql::{Engine, EngineOptions, QueryResult, RangeSeries, Value};
use crate::sample::{is_stale_marker, HistogramSample, Sample, SeriesSamples};
use crate::storage::MemQuerier;

const MIN: i64 = 60_000;
const HOUR: i64 = 60 * MIN;
const DAY: i64 = 24 * HOUR;
const TIERS: [i64; 2] = [5 * MIN, HOUR];

/// The parameterless rollups that tier points answer. With `predict_linear` (a constant
/// parameter, drawn beside them in the range-query proptest) they are every rollup a range
/// query may read from a tier.
const FUNCTIONS: [&str; 22] = [
    "rate",
    "increase",
    "delta",
    "irate",
    "idelta",
    "deriv",
    "resets",
    "changes",
    "avg_over_time",
    "min_over_time",
    "max_over_time",
    "sum_over_time",
    "count_over_time",
    "stddev_over_time",
    "stdvar_over_time",
    "last_over_time",
    "first_over_time",
    "present_over_time",
    "ts_of_min_over_time",
    "ts_of_max_over_time",
    "ts_of_last_over_time",
    "ts_of_first_over_time",
];

/// Exact from tier points (see `tier_rollup.rs`): the same bits as from the samples.
const EXACT: [&str; 14] = [
    "irate",
    "idelta",
    "resets",
    "changes",
    "min_over_time",
    "max_over_time",
    "count_over_time",
    "last_over_time",
    "first_over_time",
    "present_over_time",
    "ts_of_min_over_time",
    "ts_of_max_over_time",
    "ts_of_last_over_time",
    "ts_of_first_over_time",
];

fn engine(resolution: SourceResolution) -> Engine {
    Engine::new(EngineOptions { source_resolution: resolution, ..EngineOptions::default() })
}

fn tiered(series: Vec<SeriesSamples>) -> MemQuerier {
    MemQuerier::new(series).with_tiers(TIERS.to_vec())
}

/// The tiers the answer's infos say were read (`5m`, `1h`).
fn tiers_read(r: &QueryResult) -> Vec<String> {
    r.annotations
        .infos()
        .iter()
        .filter_map(|i| i.split(" read from the ").nth(1).and_then(|rest| rest.split(' ').next()).map(str::to_owned))
        .collect()
}

fn matrix(r: QueryResult) -> Vec<RangeSeries> {
    match r.value {
        Value::Matrix(m) => m,
        other => panic!("a range query answers a matrix, not {other:?}"),
    }
}

/// `x{s="<i>", g="<i % 2>"}`, one per sample list.
fn labelled(samples: Vec<Vec<Sample>>) -> Vec<SeriesSamples> {
    samples
        .into_iter()
        .enumerate()
        .map(|(i, samples)| SeriesSamples {
            labels: Labels::from_pairs([("__name__", "x"), ("s", &i.to_string()), ("g", &(i % 2).to_string())])
                .unwrap(),
            samples,
            histograms: Vec::new(),
        })
        .collect()
}

/// A counter and a decimal gauge scraped every 15 s for three days from midnight: 240 samples
/// an hour, 20 per five minutes.
fn dense() -> Vec<SeriesSamples> {
    let n = 3 * DAY / 15_000;
    let counter = (0..n).map(|i| Sample::new(DAY + i * 15_000, ((i % 5_000) * 3) as f64)).collect();
    let gauge = (0..n).map(|i| Sample::new(DAY + i * 15_000, ((i * 7) % 1_000) as f64 / 100.0)).collect();
    labelled(vec![counter, gauge])
}

/// `q` over `(start, end, step)` on the raw samples and on the tiers with `resolution`: equal
/// answers (exactly), and the tiers the latter read.
fn both(
    series: &[SeriesSamples],
    q: &str,
    (start, end, step): (i64, i64, i64),
    resolution: SourceResolution,
) -> Vec<String> {
    let raw = engine(resolution).range(&MemQuerier::new(series.to_vec()), q, start, end, step).unwrap();
    let tier = engine(resolution).range(&tiered(series.to_vec()), q, start, end, step).unwrap();
    assert!(tiers_read(&raw).is_empty(), "{q}: {:?}", raw.annotations);
    let read = tiers_read(&tier);
    let (raw, tier) = (matrix(raw), matrix(tier));
    assert!(!raw.is_empty(), "{q}: an answer to compare");
    assert_eq!(raw.len(), tier.len(), "{q}");
    for (a, b) in raw.iter().zip(&tier) {
        assert_eq!(a.labels, b.labels, "{q}");
        let ts = |s: &RangeSeries| s.samples.iter().map(|p| p.timestamp_ms).collect::<Vec<_>>();
        assert_eq!(ts(a), ts(b), "{q} {}", a.labels);
        for (x, y) in a.samples.iter().zip(&b.samples) {
            assert!(
                agrees(Some(x.value), Some(y.value), 1e-9, 1.0),
                "{q} {} at {}: {} {}",
                a.labels,
                x.timestamp_ms,
                x.value,
                y.value
            );
        }
    }
    read
}

#[test]
fn every_function_tiers_answer_is_in_the_tests() {
    let reduced: Vec<&str> = ANSWERED.iter().copied().filter(|n| parameterless_fn(lookup(n).unwrap())).collect();
    assert_eq!(reduced, FUNCTIONS);
    assert!(EXACT.iter().all(|n| FUNCTIONS.contains(n)));
    // The others: `predict_linear` (in the range query proptest, with a constant duration) and
    // `absent_over_time` (read as `present_over_time`).
    let others: Vec<&str> = ANSWERED.iter().copied().filter(|n| !FUNCTIONS.contains(n)).collect();
    assert_eq!(others, ["predict_linear", "absent_over_time"]);
}

#[test]
fn auto_reads_the_coarsest_tier_dense_enough_and_a_named_resolution_caps_it() {
    let series = dense();
    let days = (2 * DAY, 4 * DAY, DAY);
    let hours = (2 * DAY, 3 * DAY, HOUR);
    // 1d steps over 1d: the 1h tier, 240 samples a point.
    assert_eq!(both(&series, "sum_over_time(x[1d])", days, SourceResolution::Auto), ["1h"]);
    assert_eq!(both(&series, "sum by (g) (rate(x[1d]))", days, SourceResolution::Auto), ["1h"]);
    // Max(5m) never reads the 1h tier, whatever the density of the 5m one.
    assert_eq!(both(&series, "sum_over_time(x[1d])", days, SourceResolution::Max(5 * MIN)), ["5m"]);
    assert_eq!(both(&series, "sum_over_time(x[1d])", days, SourceResolution::Max(59 * MIN)), ["5m"]);
    // 1h steps: at most the 5m tier (a fifth of the step), too sparse for `auto` (20 samples a
    // point); named, it is read.
    assert!(both(&series, "rate(x[1h])", hours, SourceResolution::Auto).is_empty());
    assert_eq!(both(&series, "rate(x[1h])", hours, SourceResolution::Max(HOUR)), ["5m"]);
    // raw (and 0s): never.
    for raw in [SourceResolution::Raw, SourceResolution::parse("0s").unwrap()] {
        assert!(both(&series, "sum_over_time(x[1d])", days, raw).is_empty());
    }
    // Two selectors, each named by its info.
    let r = engine(SourceResolution::Auto)
        .range(&tiered(series.clone()), "max_over_time(x[1d]) - min_over_time(x[1d] offset 1d)", 3 * DAY, 4 * DAY, DAY)
        .unwrap();
    let infos = r.annotations.infos();
    assert_eq!(infos.len(), 2, "{infos:?}");
    let said = |text: &str| infos.iter().any(|i| i.starts_with(&format!("PromQL info: {text} read from the 1h tier")));
    assert!(said("x[1d]") && said("x[1d] offset 1d"), "{infos:?}");
    assert!(infos[0].contains("(max_source_resolution=raw reads raw samples) (1:"), "{infos:?}");
    // `or` matchers: each series once.
    let q = r#"count_over_time(x{s="0" or g="0" or s="1"}[1d])"#;
    assert_eq!(both(&series, q, days, SourceResolution::Auto), ["1h"]);
}

#[test]
fn unaligned_queries_and_what_tiers_cannot_answer_read_raw_samples() {
    let series = dense();
    let named = SourceResolution::Max(HOUR);
    let hours = (2 * DAY, 3 * DAY, HOUR);
    for (q, grid) in [
        // Off the interval grid: the start, the offset, the step, the range.
        ("rate(x[1h])", (2 * DAY + 90_000, 3 * DAY, HOUR)),
        ("rate(x[1h] offset 30s)", hours),
        ("rate(x[1h])", (2 * DAY, 3 * DAY, 61 * MIN)),
        ("rate(x[61m])", hours),
        // A range shorter than two intervals, a step shorter than five.
        ("rate(x[5m])", hours),
        ("rate(x[1h])", (2 * DAY, 3 * DAY, 20 * MIN)),
        // Functions points do not answer, or the preload does not reduce.
        ("quantile_over_time(0.5, x[1h])", hours),
        ("mad_over_time(x[1h])", hours),
        // A parameter that may change from step to step.
        ("predict_linear(x[1h], time() - time() + 3600)", hours),
        // A subquery's inner rollup; a one-step range query.
        ("max_over_time(rate(x[1h])[6h:1h])", hours),
        ("rate(x[1h])", (2 * DAY, 2 * DAY, HOUR)),
    ] {
        assert!(both(&series, q, grid, named).is_empty(), "{q} {grid:?}");
    }
    // The same aligned query reads the tier: the rules above are what sends them raw.
    assert_eq!(both(&series, "rate(x[1h])", hours, named), ["5m"]);
    assert_eq!(both(&series, "predict_linear(x[1h], 3600)", hours, named), ["5m"]);
    // `absent_over_time` is read as `present_over_time`: from the tier where that is, and the
    // same answer whether its series are there (nothing) or not (1 at every step).
    assert_eq!(
        both(&series, "absent_over_time(x{s=\"9\"}[1h]) or absent_over_time(x[1h])", hours, named),
        ["5m", "5m"]
    );
    assert!(both(&series, "absent_over_time(x[1h] offset 30s) or absent_over_time(y[61m])", hours, named).is_empty());
    // An instant query reads raw samples.
    let e = engine(named);
    let instant = e.instant(&tiered(series.clone()), "rate(x[1d])", 3 * DAY).unwrap();
    assert!(tiers_read(&instant).is_empty());
}

/// A query measured with `stats` reads the tier as an unmeasured one does, and counts the
/// points of each step's window as that step's samples (the raw query counts the samples).
#[test]
fn a_measured_query_reads_the_tier_and_counts_its_points() {
    let series = dense();
    let e = engine(SourceResolution::Auto);
    let q = "sum(rate(x[1d])) + count_over_time(x{s=\"0\"}[1d])";
    let measured = e.range_with_stats(&tiered(series.clone()), q, 2 * DAY, 4 * DAY, DAY).unwrap();
    assert_eq!(tiers_read(&measured), ["1h", "1h"]);
    let raw = e.range_with_stats(&MemQuerier::new(series.clone()), q, 2 * DAY, 4 * DAY, DAY).unwrap();
    assert_eq!(measured.value, raw.value);
    let (tiers, raw_stats) = (measured.stats.unwrap(), raw.stats.unwrap());
    // Each step's window is a day: 24 points of each of the 2 series read by `rate`, and of the
    // one read by `count_over_time`; the raw count is 5,760 samples a series a day (the samples
    // end 15 s before the last step).
    let counted: Vec<u64> = tiers.samples.per_step.iter().map(|&(_, n)| n).collect();
    let samples: Vec<u64> = raw_stats.samples.per_step.iter().map(|&(_, n)| n).collect();
    assert_eq!(counted, [3 * 24, 3 * 24, 3 * 24], "{:?}", tiers.samples);
    assert_eq!(samples, [3 * 5_760, 3 * 5_760, 3 * 5_759], "{:?}", raw_stats.samples);
    assert_eq!(tiers.samples.total_queryable, 3 * 3 * 24);
    assert_eq!(tiers.samples.tiers, [(HOUR, 3 * 3 * 24)]);
    assert!(raw_stats.samples.tiers.is_empty());
    // Unmeasured, the same answer.
    let plain = e.range(&tiered(series), q, 2 * DAY, 4 * DAY, DAY).unwrap();
    assert_eq!(plain.value, measured.value);
}

#[test]
fn a_series_with_native_histograms_sends_the_selector_back_to_raw_samples() {
    let mut series = dense();
    let h = Histogram {
        schema: 0,
        count: 4.0,
        sum: 10.0,
        positive_spans: vec![Span { offset: 0, length: 2 }],
        positive_buckets: vec![1.0, 3.0],
        ..Histogram::default()
    };
    let mut mixed = labelled(vec![vec![Sample::new(2 * DAY, 1.0)]]).remove(0);
    mixed.labels = Labels::from_pairs([("__name__", "x"), ("s", "h")]).unwrap();
    mixed.histograms =
        (1..48).map(|i| HistogramSample { timestamp_ms: 2 * DAY + i * HOUR, histogram: Arc::new(h.clone()) }).collect();
    series.push(mixed);
    let days = (2 * DAY, 4 * DAY, DAY);
    assert!(both(&series, "count_over_time(x[1d])", days, SourceResolution::Auto).is_empty());
    // Another selector of the same query still reads its tier.
    let q = r#"count_over_time(x{s="0"}[1d]) + count_over_time(x{s="h"}[1d])"#;
    let r = engine(SourceResolution::Auto).range(&tiered(series), q, 2 * DAY, 4 * DAY, DAY).unwrap();
    assert_eq!(tiers_read(&r), ["1h"]);
    assert!(r.annotations.infos()[0].contains(r#"x{s="0"}[1d] read from"#), "{:?}", r.annotations);
}

/// The result cache joins the annotations of the parts it evaluates: a tier's info is the same
/// text in every part, so an answer carries it once.
#[test]
fn an_answer_through_the_result_cache_names_its_tier_once() {
    let series = dense();
    let cache = ResultCache::new(64 << 20);
    let q = "sum by (g) (rate(x[1d]))";
    let r =
        RangeRequest { scope: "", query: q, start_ms: 2 * DAY, end_ms: 4 * DAY, step_ms: HOUR, lookback_ms: 300_000 };
    let e = engine(SourceResolution::Max(HOUR));
    let src = tiered(series);
    let calls = std::cell::RefCell::new(Vec::new());
    let mut eval = |a: i64, b: i64| {
        calls.borrow_mut().push((a, b));
        e.range(&src, q, a, b, HOUR)
    };
    let whole = e.range(&src, q, r.start_ms, r.end_ms, HOUR).unwrap();
    // Sealed up to the middle: the first request evaluates the range once (the tier's info holds
    // for every step, so the kept half is not evaluated again to learn its annotations), the
    // second only the half after the boundary.
    for want in [vec![(2 * DAY, 4 * DAY)], vec![(3 * DAY, 4 * DAY)]] {
        calls.borrow_mut().clear();
        let (answer, _) = cache.range(&r, Some((3 * DAY, 1)), &mut eval).unwrap();
        assert_eq!(answer.annotations, whole.annotations);
        assert_eq!(tiers_read(&answer), ["5m"]);
        assert_eq!(answer.value, whole.value);
        assert_eq!(*calls.borrow(), want);
    }
}

/// Per step, a bound on the rounding of `name`'s values over the samples of every series in
/// the step's window: what a sum of them may be off by.
fn rounding_scale(name: &str, series: &[SeriesSamples], window: StepWindow, t: i64) -> f64 {
    let (start, end) = window.bounds(t);
    series
        .iter()
        .map(|s| {
            let inside: Vec<Sample> = s
                .samples
                .iter()
                .copied()
                .filter(|p| p.timestamp_ms > start && p.timestamp_ms <= end && !is_stale_marker(p.value))
                .collect();
            let big = inside.iter().map(|p| p.value.abs()).filter(|v| v.is_finite()).fold(1.0, f64::max);
            let n = inside.len() as f64;
            match name {
                "stdvar_over_time" => big * big * n,
                "deriv" => big * n * conditioning(&inside, inside.first().map_or(0, |p| p.timestamp_ms)),
                // The line at `t` plus 4 h of its slope.
                "predict_linear" => big * n * (1.0 + 4.0 * 3600.0) * conditioning(&inside, t),
                _ => big * n,
            }
        })
        .sum::<f64>()
        .max(1.0)
}

/// One to four series `x{s, g}` of a generated shape (see `tier_rollup_tests.rs`: counters,
/// gauges, NaN, staleness markers, gaps), scraped every 30 s, 2 or 10 minutes with jitter.
fn fleet() -> impl Strategy<Value = Vec<SeriesSamples>> {
    let one = (
        shape(),
        prop::sample::select(vec![30_000i64, 120_000, 600_000]),
        prop::collection::vec((any::<u32>(), any::<u8>(), any::<i16>()), 1..400),
    );
    prop::collection::vec(one, 1..5).prop_map(|all| {
        labelled(
            all.iter()
                .map(|(shape, scrape, steps)| {
                    let steps: Vec<(i64, u8, i16)> =
                        steps.iter().map(|&(g, roll, n)| (1 + i64::from(g) % (2 * scrape), roll, n)).collect();
                    generated(*shape, &steps)
                })
                .collect(),
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// `f(x[r])` and `sum by (g) (f(x[r]))` for every function tiers answer, at aligned steps
    /// of an hour to a day over ranges of an hour to a day (plain, `offset 1h` or `@ end()`),
    /// from the 5m and 1h tiers and from raw samples: the same series and timestamps, values
    /// of the same bits for the exact functions and within rounding for the others, and the
    /// tier the rules choose (the coarsest allowed, a fifth of the step and half the range).
    #[test]
    fn range_queries_read_the_chosen_tier_and_answer_as_raw_samples(
        generated_series in fleet(),
        name in prop::sample::select([&FUNCTIONS[..], &["predict_linear"]].concat()),
        step in prop::sample::select(vec![HOUR, 6 * HOUR, DAY]),
        range in prop::sample::select(vec![HOUR, 2 * HOUR, DAY]),
        modifier in prop::sample::select(vec!["", " offset 1h", " @ end()"]),
        cap in prop::sample::select(vec![HOUR, 30 * MIN, 5 * MIN]),
        (from_hours, count) in (0i64..12, 2i64..12),
        aggregate in any::<bool>(),
    ) {
        let series = generated_series;
        let (start, end) = (from_hours * HOUR, from_hours * HOUR + (count - 1) * step);
        // `predict_linear` with a constant duration, as dashboards write it.
        let param = if name == "predict_linear" { ", 4 * 3600" } else { "" };
        let inner = format!("{name}(x[{}s]{modifier}{param})", range / 1000);
        let q = if aggregate { format!("sum by (g) ({inner})") } else { inner };
        let resolution = SourceResolution::Max(cap);
        let raw = engine(resolution).range(&MemQuerier::new(series.clone()), &q, start, end, step).unwrap();
        let tier = engine(resolution).range(&tiered(series.clone()), &q, start, end, step).unwrap();
        let want = TIERS.iter().copied().filter(|&i| i <= cap && 5 * i <= step && 2 * i <= range).max();
        let want: Vec<String> = want.map(crate::duration::format_ms).into_iter().collect();
        prop_assert_eq!(tiers_read(&tier), want, "{}", q);
        prop_assert!(tiers_read(&raw).is_empty());
        let window = StepWindow {
            pinned: (modifier == " @ end()").then_some(end),
            offset: if modifier == " offset 1h" { HOUR } else { 0 },
            range,
        };
        let exact = EXACT.contains(&name);
        let (raw, tier) = (matrix(raw), matrix(tier));
        prop_assert_eq!(raw.len(), tier.len(), "{}", q);
        for (a, b) in raw.iter().zip(&tier) {
            prop_assert_eq!(&a.labels, &b.labels);
            prop_assert_eq!(a.samples.len(), b.samples.len(), "{} {}", q, a.labels);
            for (x, y) in a.samples.iter().zip(&b.samples) {
                prop_assert_eq!(x.timestamp_ms, y.timestamp_ms);
                let ok = if exact {
                    agrees(Some(x.value), Some(y.value), 0.0, 0.0)
                } else {
                    agrees(Some(x.value), Some(y.value), 1e-9, rounding_scale(name, &series, window, x.timestamp_ms))
                };
                prop_assert!(ok, "{} {} at {}: raw {} tier {}", q, a.labels, x.timestamp_ms, x.value, y.value);
            }
        }
    }

    /// A plain selector (`x`, `x offset 1h`, `x @ end()`, alone or summed) of a range query
    /// over windows said to be downsampled (keeping 5m or 1h and coarser): at steps whose times
    /// (less the offset, or the `@` time) are on the kept interval's grid, it reads that tier
    /// and answers as the raw samples do, bit for bit, staleness and lookback included; off the
    /// grid it reads raw samples.
    #[test]
    fn plain_selectors_over_downsampled_windows_read_points_and_answer_as_raw_samples(
        generated_series in fleet(),
        finest in prop::sample::select(TIERS.to_vec()),
        step in prop::sample::select(vec![5 * MIN, HOUR, 6 * HOUR]),
        modifier in prop::sample::select(vec!["", " offset 1h", " @ end()"]),
        shift in prop::sample::select(vec![0, 0, MIN]),
        (from_hours, count) in (0i64..12, 2i64..12),
        aggregate in any::<bool>(),
    ) {
        let series = generated_series;
        let start = from_hours * HOUR + shift;
        let end = start + (count - 1) * step;
        let q = if aggregate { format!("sum by (g) (x{modifier})") } else { format!("x{modifier}") };
        let auto = SourceResolution::Auto;
        let raw = engine(auto).range(&MemQuerier::new(series.clone()), &q, start, end, step).unwrap();
        let downsampled = tiered(series.clone()).with_downsampled(finest, i64::MAX);
        let tier = engine(auto).range(&downsampled, &q, start, end, step).unwrap();
        let te_first = match modifier {
            " @ end()" => end,
            " offset 1h" => start - HOUR,
            _ => start,
        };
        let on_grid = te_first % finest == 0 && (modifier == " @ end()" || step % finest == 0);
        let want: Vec<String> = on_grid.then(|| crate::duration::format_ms(finest)).into_iter().collect();
        prop_assert_eq!(tiers_read(&tier), want, "{} from {} step {}", q, start, step);
        let (raw, tier) = (matrix(raw), matrix(tier));
        prop_assert_eq!(raw.len(), tier.len(), "{}", q);
        for (a, b) in raw.iter().zip(&tier) {
            prop_assert_eq!(&a.labels, &b.labels);
            // The same values in the same order, so a sum of them has the same bits too.
            let bits = |s: &RangeSeries| s.samples.iter().map(|p| (p.timestamp_ms, p.value.to_bits())).collect::<Vec<_>>();
            prop_assert_eq!(bits(a), bits(b), "{} {}", q, a.labels);
        }
    }

    /// The same selectors in an instant query (a Grafana table or stat panel over a past
    /// time): at a time (less the offset) on the kept interval's grid, the tier answers, bit
    /// for bit as the raw samples do; off it, raw samples.
    #[test]
    fn plain_selectors_of_instant_queries_over_downsampled_windows_answer_as_raw_samples(
        generated_series in fleet(),
        finest in prop::sample::select(TIERS.to_vec()),
        modifier in prop::sample::select(vec!["", " offset 1h", " @ end()"]),
        at in prop::sample::select(vec![0, 5 * MIN, 15 * MIN, MIN, 30_000]),
        hours in 0i64..14,
        aggregate in any::<bool>(),
    ) {
        let series = generated_series;
        let t = hours * HOUR + at;
        let q = if aggregate { format!("sum by (g) (x{modifier})") } else { format!("x{modifier}") };
        let auto = SourceResolution::Auto;
        let raw = engine(auto).instant(&MemQuerier::new(series.clone()), &q, t).unwrap();
        let downsampled = tiered(series.clone()).with_downsampled(finest, i64::MAX);
        let tier = engine(auto).instant(&downsampled, &q, t).unwrap();
        let te = if modifier == " offset 1h" { t - HOUR } else { t };
        let want: Vec<String> = (te % finest == 0).then(|| crate::duration::format_ms(finest)).into_iter().collect();
        prop_assert_eq!(tiers_read(&tier), want, "{} at {}", q, t);
        let elems = |r: QueryResult| match r.value {
            Value::Vector(v) => v.into_iter().map(|e| (e.labels, e.timestamp_ms, e.value.to_bits())).collect::<Vec<_>>(),
            other => panic!("an instant query of a selector answers a vector, not {other:?}"),
        };
        let (mut raw, mut tier) = (elems(raw), elems(tier));
        raw.sort_by(|a, b| a.0.cmp(&b.0));
        tier.sort_by(|a, b| a.0.cmp(&b.0));
        prop_assert_eq!(raw, tier, "{} at {}", q, t);
    }
}
