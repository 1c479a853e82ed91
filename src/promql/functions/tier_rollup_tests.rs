//! Answers from tier points against answers from the raw samples: random series (counters with
//! resets, gauges, NaN, ±Inf, signed zeros, staleness markers, gaps), cut into intervals,
//! aggregated, merged in random groupings (5m points into 1h ones, then a window's), and every
//! rollup compared over random aligned windows.

use proptest::prelude::*;

use super::*;
use crate::promql::functions::rollup::{self, compute_floats, lookup};
use crate::promql::step::StepWindow;
use crate::sample::{is_stale_marker, Sample, STALE_NAN_BITS};

/// Every rollup tiers answer, by name.
pub(crate) const ANSWERED: [&str; 24] = [
    "rate",
    "increase",
    "delta",
    "irate",
    "idelta",
    "deriv",
    "predict_linear",
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
    "absent_over_time",
];

/// How the values of a generated series look.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Shape {
    /// A counter: small increments, now and then a reset to a small value.
    Counter,
    /// Small integers of both signs.
    SmallInts,
    /// Floats with fractions.
    Floats,
    /// Small integers, signed zeros, NaN and ±Inf.
    Specials,
}

pub(crate) fn shape() -> impl Strategy<Value = Shape> {
    prop_oneof![Just(Shape::Counter), Just(Shape::SmallInts), Just(Shape::Floats), Just(Shape::Specials)]
}

/// Raw samples from generated steps `(gap, roll, number)`: the time advances by `gap`, `roll`
/// picks a staleness marker (about 1 in 16) or the value the shape makes of `number`.
pub(crate) fn series(shape: Shape, steps: &[(i64, u8, i16)]) -> Vec<Sample> {
    let (mut t, mut counter) = (1_000_000i64, 0.0f64);
    let mut out = Vec::with_capacity(steps.len());
    for &(gap, roll, number) in steps {
        t += gap;
        let v = if roll < 16 {
            f64::from_bits(STALE_NAN_BITS)
        } else {
            match shape {
                Shape::Counter if roll < 40 => {
                    counter = f64::from(number.rem_euclid(5));
                    counter
                }
                Shape::Counter => {
                    counter += f64::from(number.rem_euclid(10));
                    counter
                }
                Shape::SmallInts => f64::from(number % 7),
                Shape::Floats => f64::from(number) / 7.0 + f64::from(roll) * 1e3,
                Shape::Specials => match roll % 8 {
                    0 => f64::NAN,
                    1 => f64::INFINITY,
                    2 => f64::NEG_INFINITY,
                    3 => -0.0,
                    4 => 0.0,
                    _ => f64::from(number % 5),
                },
            }
        };
        out.push(Sample::new(t, v));
    }
    out
}

/// The points of the intervals `((k - 1) * interval, k * interval]` for `k` in `ks`, those
/// holding samples, in time order.
fn points(raw: &[Sample], interval: i64, ks: std::ops::Range<i64>) -> Vec<FloatPoint> {
    ks.filter_map(|k| {
        let inside: Vec<Sample> = raw
            .iter()
            .copied()
            .filter(|s| s.timestamp_ms > (k - 1) * interval && s.timestamp_ms <= k * interval)
            .collect();
        FloatPoint::of(&inside)
    })
    .collect()
}

/// Merges `points` in groups of `group` (a coarser tier), then the groups.
fn fold(points: &[FloatPoint], group: usize) -> Option<FloatPoint> {
    let merge_all = |ps: &[FloatPoint]| ps.split_first().map(|(a, rest)| rest.iter().fold(*a, |acc, p| acc.merge(p)));
    let groups: Vec<FloatPoint> = points.chunks(group.max(1)).filter_map(merge_all).collect();
    merge_all(&groups)
}

/// Whether `tier` is the raw answer `raw`: the same bits, or within `tolerance` of the larger
/// of their magnitudes and `scale` when `tolerance` is not zero.
pub(crate) fn agrees(raw: Option<f64>, tier: Option<f64>, tolerance: f64, scale: f64) -> bool {
    match (raw, tier) {
        (None, None) => true,
        (Some(a), Some(b)) if a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()) => true,
        (Some(a), Some(b)) if tolerance > 0.0 && a.is_finite() && b.is_finite() => {
            (a - b).abs() <= tolerance * a.abs().max(b.abs()).max(scale)
        }
        _ => false,
    }
}

/// How much PromQL's least-squares sums (`Σx²-(Σx)²/n`, x from `origin_ms`) amplify rounding
/// for the samples `s`: the largest squared distance from the origin over the variance of the
/// times. Raw answers carry that error; the tier's central moments do not.
pub(crate) fn conditioning(s: &[Sample], origin_ms: i64) -> f64 {
    let xs: Vec<f64> = s.iter().map(|p| (p.timestamp_ms - origin_ms) as f64 / 1e3).collect();
    let n = xs.len().max(1) as f64;
    let mean = xs.iter().sum::<f64>() / n;
    let var = xs.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n;
    let far = xs.iter().fold(0.0f64, |m, x| m.max(x * x));
    if var > 0.0 {
        1.0 + far / var
    } else {
        1.0
    }
}

/// How close the tier's answer of `name` must be: 0 for the same bits.
fn tolerance(name: &str, one_point: bool, resets: u64) -> f64 {
    match name {
        "sum_over_time" | "avg_over_time" | "stddev_over_time" | "stdvar_over_time" if one_point => 0.0,
        "rate" | "increase" if resets <= 1 => 0.0,
        "sum_over_time" | "avg_over_time" | "rate" | "increase" => 1e-12,
        "stddev_over_time" | "stdvar_over_time" => 1e-9,
        "deriv" | "predict_linear" => 1e-9,
        _ => 0.0,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn every_rollup_from_tier_points_is_the_raw_answer(
        shape in shape(),
        steps in prop::collection::vec((1i64..40_000, any::<u8>(), any::<i16>()), 1..80),
        interval in prop::sample::select(vec![1_000i64, 15_000, 60_000, 300_000]),
        (from, len) in (0i64..40, 1i64..60),
        group in 1usize..13,
        predict in -600.0f64..600.0,
    ) {
        let raw = series(shape, &steps);
        let first_k = 1_000_000 / interval + from;
        let (start, end) = ((first_k - 1) * interval, (first_k - 1 + len) * interval);
        let window: Vec<Sample> = raw
            .iter()
            .copied()
            .filter(|s| s.timestamp_ms > start && s.timestamp_ms <= end && !is_stale_marker(s.value))
            .collect();
        let ps = points(&raw, interval, first_k..first_k + len);
        let merged = fold(&ps, group);
        let scale = window.iter().map(|s| s.value.abs()).filter(|v| v.is_finite()).fold(1.0, f64::max);
        for name in ANSWERED {
            let f = lookup(name).unwrap();
            let params = if name == "predict_linear" { vec![predict] } else { vec![] };
            let want = compute_floats(f, &window, (start, end, end), &params);
            let span = Span::new((start, end, end), &params);
            let got = match merged {
                Some(p) => compute(f, &p, &span).unwrap(),
                None => None,
            };
            // What a tier run decodes: moments rebuilt from exact integers, when the values
            // are short decimals.
            let rebuilt = match merged.and_then(|p| p.from_exact()) {
                Some(p) => compute(f, &p, &span).unwrap(),
                None => got,
            };
            let resets = merged.map_or(0, |p| p.resets);
            let tol = tolerance(name, ps.len() <= 1, resets);
            let scale = match name {
                "deriv" | "predict_linear" => {
                    let origin = if name == "deriv" { window.first().map_or(0, |s| s.timestamp_ms) } else { end };
                    scale * (1.0 + predict.abs()) * conditioning(&window, origin)
                }
                "stddev_over_time" => scale,
                "stdvar_over_time" => scale * scale,
                "sum_over_time" | "avg_over_time" | "rate" | "increase" => scale * window.len() as f64,
                _ => scale * (1.0 + predict.abs()),
            };
            prop_assert!(agrees(want, got, tol, scale), "{name}: raw {want:?}, tiers {got:?}, window {window:?}");
            let tol = if matches!(name, "sum_over_time" | "avg_over_time" | "stddev_over_time" | "stdvar_over_time") {
                tolerance(name, false, resets)
            } else {
                tol
            };
            prop_assert!(agrees(want, rebuilt, tol, scale), "{name}: raw {want:?}, rebuilt {rebuilt:?}, window {window:?}");
        }
    }

    /// The library's cut into intervals and merge into coarser ones, against the brute-force
    /// cut of `points` and `fold`.
    #[test]
    fn points_are_cut_at_interval_ends_and_merge_into_coarser_ones(
        shape in shape(),
        steps in prop::collection::vec((1i64..40_000, any::<u8>(), any::<i16>()), 1..80),
        interval in prop::sample::select(vec![1_000i64, 15_000, 60_000]),
        group in 1i64..13,
    ) {
        let raw = series(shape, &steps);
        let last_k = raw.last().map_or(0, |s| s.timestamp_ms) / interval + 2;
        let brute: Vec<(i64, FloatPoint)> = (1..last_k)
            .filter_map(|k| points(&raw, interval, k..k + 1).first().map(|p| (k * interval, *p)))
            .collect();
        let cut = crate::tier::points_of(&raw, interval);
        prop_assert_eq!(format!("{cut:?}"), format!("{brute:?}"));
        let coarse = group * interval;
        let brute_coarse: Vec<(i64, FloatPoint)> = (1..last_k / group + 2)
            .filter_map(|k| {
                let inside: Vec<FloatPoint> =
                    brute.iter().filter(|(e, _)| *e > (k - 1) * coarse && *e <= k * coarse).map(|(_, p)| *p).collect();
                fold(&inside, 1).map(|p| (k * coarse, p))
            })
            .collect();
        prop_assert_eq!(format!("{:?}", crate::tier::coarser(&cut, coarse)), format!("{brute_coarse:?}"));
    }

    #[test]
    fn merged_points_are_the_point_of_all_samples(
        shape in shape(),
        steps in prop::collection::vec((1i64..40_000, any::<u8>(), any::<i16>()), 1..80),
        interval in prop::sample::select(vec![1_000i64, 15_000, 60_000]),
        group in 1usize..13,
    ) {
        let raw = series(shape, &steps);
        let last_k = raw.last().map_or(0, |s| s.timestamp_ms) / interval + 1;
        let merged = fold(&points(&raw, interval, 0..last_k + 1), group).unwrap();
        let whole = FloatPoint::of(&raw).unwrap();
        // Exact: counts, samples, flags, extremes and their times.
        let exact = |p: &FloatPoint| {
            (p.count, p.first.timestamp_ms, p.last.timestamp_ms, p.before_last.map(|s| s.timestamp_ms), p.ends_stale)
        };
        prop_assert_eq!(exact(&merged), exact(&whole));
        let bits = |p: &FloatPoint| {
            [p.first.value, p.last.value, p.before_last.map_or(0.0, |s| s.value), p.min, p.max].map(f64::to_bits)
        };
        prop_assert_eq!(bits(&merged), bits(&whole));
        prop_assert_eq!(
            (merged.min_ts, merged.max_ts, merged.constant, merged.resets, merged.changes),
            (whole.min_ts, whole.max_ts, whole.constant, whole.resets, whole.changes)
        );
        // Exact moments merge without rounding.
        prop_assert_eq!(merged.exact, whole.exact);
        prop_assert_eq!((merged.x_sum_ms, merged.x_sq_ms), (whole.x_sum_ms, whole.x_sq_ms));
    }

    /// A merge of only some fields (`FloatPoint::absorb`, what each rollup folds with) gives
    /// those fields bit for bit as the whole merge does, whatever the points (stale-only ones
    /// included).
    #[test]
    fn merging_some_fields_gives_them_as_the_whole_merge(
        shape in shape(),
        steps in prop::collection::vec((1i64..40_000, any::<u8>(), any::<i16>()), 1..80),
        interval in prop::sample::select(vec![1_000i64, 15_000, 60_000]),
    ) {
        use crate::tier::Fields;
        let raw = series(shape, &steps);
        let last_k = raw.last().map_or(0, |s| s.timestamp_ms) / interval + 1;
        let cut: Vec<FloatPoint> = points(&raw, interval, 0..last_k + 1);
        let Some((head, rest)) = cut.split_first() else { return Ok(()) };
        let whole = rest.iter().fold(*head, |acc, p| acc.merge(p));
        let bits = |s: Sample| (s.timestamp_ms, s.value.to_bits());
        let ends = |p: &FloatPoint| (p.count, bits(p.first), bits(p.last), p.before_last.map(bits), p.ends_stale);
        for fields in [Fields::Ends, Fields::Extremes, Fields::Counter, Fields::Sums, Fields::All] {
            let mut folded = *head;
            for p in rest {
                folded.absorb(p, fields);
            }
            prop_assert_eq!(ends(&folded), ends(&whole), "{:?}", fields);
            match fields {
                Fields::Extremes => prop_assert_eq!(
                    (folded.min.to_bits(), folded.min_ts, folded.max.to_bits(), folded.max_ts),
                    (whole.min.to_bits(), whole.min_ts, whole.max.to_bits(), whole.max_ts)
                ),
                Fields::Counter => prop_assert_eq!(
                    (folded.resets, folded.reset_sum.to_bits(), folded.changes),
                    (whole.resets, whole.reset_sum.to_bits(), whole.changes)
                ),
                Fields::Sums => prop_assert_eq!(
                    (folded.sum.to_bits(), folded.sum_c.to_bits()),
                    (whole.sum.to_bits(), whole.sum_c.to_bits())
                ),
                Fields::All => prop_assert_eq!(format!("{folded:?}"), format!("{whole:?}")),
                Fields::Ends => {}
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// A range query's steps over tier points: every step's window a union of whole
    /// intervals, the values those of the raw samples' steps.
    #[test]
    fn every_step_from_tier_points_is_the_raw_step(
        shape in shape(),
        steps in prop::collection::vec((1i64..40_000, any::<u8>(), any::<i16>()), 1..120),
        interval in prop::sample::select(vec![15_000i64, 60_000, 300_000]),
        (ranges, step_intervals, from, count) in (1i64..6, 1i64..4, 0i64..20, 1usize..30),
        name in prop::sample::select(ANSWERED.to_vec()),
    ) {
        let raw = series(shape, &steps);
        let kept: Vec<Sample> = raw.iter().copied().filter(|s| !is_stale_marker(s.value)).collect();
        let last_k = raw.last().map_or(0, |s| s.timestamp_ms) / interval + 2;
        let ends: Vec<(i64, FloatPoint)> = (1..last_k)
            .filter_map(|k| points(&raw, interval, k..k + 1).first().map(|p| (k * interval, *p)))
            .collect();
        let window = StepWindow { pinned: None, offset: 0, range: ranges * interval };
        let grid = ((1_000_000 / interval + from) * interval, step_intervals * interval, count);
        prop_assert!(aligned(window, grid, interval));
        let f = lookup(name).unwrap();
        let mut want = Vec::new();
        rollup::each_step(f, window, &[], &kept, grid, |i, v| want.push((i, v)));
        let mut got = Vec::new();
        each_step((f, &[]), window, (interval, &ends), grid, |i, v| got.push((i, v))).unwrap();
        prop_assert_eq!(want.iter().map(|w| w.0).collect::<Vec<_>>(), got.iter().map(|g| g.0).collect::<Vec<_>>(), "{}", name);
        let scale = kept.iter().map(|s| s.value.abs()).filter(|v| v.is_finite()).fold(1.0, f64::max);
        for (&(i, w), &(_, g)) in want.iter().zip(&got) {
            let tol = tolerance(name, false, u64::MAX);
            let scale = match name {
                "stdvar_over_time" => scale * scale,
                "deriv" => {
                    let (start, end) = window.bounds(grid_time(grid.0, grid.1, i));
                    let inside: Vec<Sample> =
                        kept.iter().copied().filter(|s| s.timestamp_ms > start && s.timestamp_ms <= end).collect();
                    scale * conditioning(&inside, inside.first().map_or(0, |s| s.timestamp_ms))
                }
                _ => scale * kept.len() as f64,
            };
            prop_assert!(agrees(Some(w), Some(g), tol, scale), "{name} step {i}: raw {w}, tiers {g}");
        }
    }
}

#[test]
fn steps_that_cut_an_interval_are_not_aligned() {
    let window = |range| StepWindow { pinned: None, offset: 0, range };
    assert!(aligned(window(3_600_000), (7_200_000, 3_600_000, 10), 300_000));
    assert!(!aligned(window(3_600_000), (7_200_000, 60_000, 10), 300_000), "step");
    assert!(!aligned(window(3_660_000), (7_200_000, 3_600_000, 10), 300_000), "range");
    assert!(!aligned(window(3_600_000), (7_230_000, 3_600_000, 10), 300_000), "start");
    let offset = StepWindow { pinned: None, offset: 30_000, range: 3_600_000 };
    assert!(!aligned(offset, (7_200_000, 3_600_000, 10), 300_000), "offset");
}

#[test]
fn a_rollup_that_needs_every_sample_is_refused() {
    let p = FloatPoint::of(&[Sample::new(1, 1.0), Sample::new(2, 2.0)]).unwrap();
    for name in ["quantile_over_time", "mad_over_time", "double_exponential_smoothing"] {
        let f = lookup(name).unwrap();
        assert!(!answers(f));
        assert_eq!(compute(f, &p, &Span::new((0, 10, 10), &[0.5, 0.5])), Err(NeedsSamples), "{name}");
    }
}

#[test]
fn a_point_of_staleness_markers_alone_has_no_value_and_ends_the_series() {
    let stale = f64::from_bits(STALE_NAN_BITS);
    let only = FloatPoint::of(&[Sample::new(5, stale)]).unwrap();
    assert_eq!((only.count, only.ends_stale), (0, true));
    let span = Span::new((0, 10, 10), &[]);
    assert_eq!(compute(lookup("count_over_time").unwrap(), &only, &span), Ok(None));
    // A marker in a later interval ends the merged point too; a sample after it revives it.
    let before = FloatPoint::of(&[Sample::new(1, 3.0)]).unwrap();
    let ended = before.merge(&only);
    assert!(ended.ends_stale);
    assert_eq!(ended.count, 1);
    let revived = ended.merge(&FloatPoint::of(&[Sample::new(12, 4.0)]).unwrap());
    assert!(!revived.ends_stale);
    assert_eq!((revived.first.value, revived.last.value, revived.count), (3.0, 4.0, 2));
}

/// The points of `raw` at `interval`, merged: what a window of whole intervals reads.
fn merged(raw: &[Sample], interval: i64) -> FloatPoint {
    let last_k = raw.last().map_or(0, |s| s.timestamp_ms) / interval + 1;
    fold(&points(raw, interval, 1..last_k + 1), 1).unwrap()
}

fn value(name: &str, p: &FloatPoint, (start, end): (i64, i64)) -> Option<f64> {
    compute(lookup(name).unwrap(), p, &Span::new((start, end, end), &[])).unwrap()
}

/// A 5-minute point, a counter scraped every 15 s from `base`.
fn counter_from(base: f64, t0: i64) -> Vec<Sample> {
    (0..20).map(|i| Sample::new(t0 + 15_000 * (i + 1), base + i as f64)).collect()
}

/// Thanos #3644: its counter aggregate hid a reset at a block boundary. Here the reset falls
/// exactly between two 5-minute points and `resets`, `increase` and `rate` still see it.
#[test]
fn thanos_3644_a_reset_at_an_interval_boundary_is_counted() {
    let mut raw = counter_from(100.0, 0);
    raw.extend(counter_from(0.0, 300_000));
    let window: Vec<Sample> = raw.clone();
    let p = merged(&raw, 300_000);
    let span = (0, 600_000);
    assert_eq!(value("resets", &p, span), Some(1.0));
    for name in ["increase", "rate", "resets", "changes"] {
        let want = compute_floats(lookup(name).unwrap(), &window, (0, 600_000, 600_000), &[]);
        assert_eq!(value(name, &p, span), want, "{name}");
    }
}

/// Thanos #2706 and #7404: `stddev_over_time` and `quantile_over_time` over downsampled data
/// were computed over the per-interval averages. Tiers keep the samples' own second moment,
/// and refuse the quantile instead of approximating it silently.
#[test]
fn thanos_2706_7404_stddev_is_over_the_samples_not_the_interval_averages() {
    // Within each 5-minute interval the values swing 0..19; every interval's average is 9.5.
    let raw: Vec<Sample> = (0..60).map(|i| Sample::new(15_000 * (i + 1), (i % 20) as f64)).collect();
    let p = merged(&raw, 300_000);
    let want = compute_floats(lookup("stddev_over_time").unwrap(), &raw, (0, 900_000, 900_000), &[]).unwrap();
    let got = value("stddev_over_time", &p, (0, 900_000)).unwrap();
    assert!((want - got).abs() < 1e-12 && want > 5.0, "raw {want}, tiers {got}");
    let quantile = compute(lookup("quantile_over_time").unwrap(), &p, &Span::new((0, 900_000, 900_000), &[0.9]));
    assert_eq!(quantile, Err(NeedsSamples));
}

/// Thanos #922 and #8155: `sum_over_time` over 1h downsampled data came out inflated. Here a
/// 1h point built from twelve 5m points sums exactly the samples of the hour.
#[test]
fn thanos_922_8155_sum_over_time_from_an_hour_is_not_inflated() {
    let raw: Vec<Sample> = (0..240).map(|i| Sample::new(15_000 * (i + 1), 1.0)).collect();
    let five = points(&raw, 300_000, 1..13);
    let hour = fold(&five, 12).unwrap();
    assert_eq!(value("sum_over_time", &hour, (0, 3_600_000)), Some(240.0));
    assert_eq!(value("count_over_time", &hour, (0, 3_600_000)), Some(240.0));
    assert_eq!(value("avg_over_time", &hour, (0, 3_600_000)), Some(1.0));
}

/// Thanos #4634: a rate over a range holding fewer than two downsampled points came back
/// empty. A point keeps its first and last raw samples, so one point is enough.
#[test]
fn thanos_4634_a_rate_over_one_tier_point_has_a_value() {
    let raw = counter_from(0.0, 0);
    let p = merged(&raw, 300_000);
    let want = compute_floats(lookup("rate").unwrap(), &raw, (0, 300_000, 300_000), &[]);
    assert!(want.is_some());
    assert_eq!(value("rate", &p, (0, 300_000)), want);
    assert_eq!(value("irate", &p, (0, 300_000)), Some(1.0 / 15.0));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// Range queries through the engine, on a querier answering in tier points and on one
    /// holding only the samples: the same series, steps and values (within rounding), and the
    /// first says it read a tier, so the comparison is never between two raw answers.
    #[test]
    fn range_queries_from_tier_points_equal_raw_range_queries(
        generated in prop::collection::vec(
            (shape(), prop::collection::vec((1i64..40_000, any::<u8>(), any::<i16>()), 1..150)),
            1..5,
        ),
        name in prop::sample::select(vec![
            "rate", "increase", "delta", "irate", "resets", "changes", "max_over_time", "min_over_time",
            "count_over_time", "last_over_time", "sum_over_time", "avg_over_time",
        ]),
        (ranges, steps_of_5m, from, count) in (1i64..6, 1i64..4, 0i64..30, 2usize..30),
        aggregate in any::<bool>(),
    ) {
        use crate::labels::Labels;
        use crate::promql::{Engine, Value};
        use crate::sample::SeriesSamples;
        use crate::storage::MemQuerier;
        const MINUTE: i64 = 60_000;
        let series: Vec<SeriesSamples> = generated
            .iter()
            .enumerate()
            .map(|(i, (shape, steps))| SeriesSamples {
                labels: Labels::from_pairs([("__name__", "x"), ("s", &i.to_string()), ("g", &(i % 2).to_string())])
                    .unwrap(),
                samples: series(*shape, steps),
                histograms: Vec::new(),
            })
            .collect();
        let range = ranges * 2 * MINUTE;
        let step = steps_of_5m * 5 * MINUTE;
        let start = (1_000_000 / MINUTE + from) * MINUTE;
        let end = start + (count as i64 - 1) * step;
        let inner = format!("{name}(x[{}s])", range / 1000);
        let q = if aggregate { format!("sum by (g) ({inner})") } else { inner };
        // A named resolution reads the tier whatever the density of these short series.
        let resolution = crate::promql::SourceResolution::Max(5 * MINUTE);
        let engine = Engine::new(crate::promql::EngineOptions { source_resolution: resolution, ..Default::default() });
        let raw = engine.range(&MemQuerier::new(series.clone()), &q, start, end, step).unwrap();
        let tiered =
            engine.range(&MemQuerier::new(series).with_tiers(vec![MINUTE, 5 * MINUTE]), &q, start, end, step).unwrap();
        prop_assert!(tiered.annotations.infos().iter().any(|i| i.contains("tier")), "{:?}", tiered.annotations.infos());
        prop_assert!(raw.annotations.infos().iter().all(|i| !i.contains("tier")));
        let (Value::Matrix(raw), Value::Matrix(tiered)) = (raw.value, tiered.value) else {
            return Err(TestCaseError::fail("range queries answer matrices"));
        };
        prop_assert_eq!(raw.len(), tiered.len(), "{}", q);
        for (r, t) in raw.iter().zip(&tiered) {
            prop_assert_eq!(&r.labels, &t.labels);
            prop_assert_eq!(r.samples.len(), t.samples.len(), "{} {}", q, r.labels);
            let scale = r.samples.iter().fold(1.0f64, |m, s| if s.value.is_finite() { m.max(s.value.abs()) } else { m });
            for (a, b) in r.samples.iter().zip(&t.samples) {
                prop_assert_eq!(a.timestamp_ms, b.timestamp_ms);
                prop_assert!(
                    agrees(Some(a.value), Some(b.value), 1e-9, scale),
                    "{} {} at {}: raw {} tier {}", q, r.labels, a.timestamp_ms, a.value, b.value
                );
            }
        }
    }
}
