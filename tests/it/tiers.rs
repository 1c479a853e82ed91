//! Downsampled tiers in a real data directory: a seal writes each series' tier rows beside its
//! chunks, and a selection in points reads them, stitched with points cut from raw samples where
//! a window has no tier row (hot windows, the head, late samples, deleted ranges), equal to the
//! points of every raw sample.

use proptest::prelude::*;
use saltdb::labels::Labels;
use saltdb::matcher::{MatchOp, Matcher};
use saltdb::sample::{Sample, SeriesSamples, WriteBatch, STALE_NAN_BITS};
use saltdb::storage::{points_in, PointsRead, Querier, ReadLimits, SeriesPoints, Storage, StorageError};
use saltdb::tier::Fields;
use saltdb::tier::FloatPoint;

use crate::common::*;

pub(crate) const DAY: i64 = 86_400_000;
pub(crate) const FIVE_MIN: i64 = 300_000;
pub(crate) const HOUR: i64 = 3_600_000;
pub(crate) const W0: i64 = 19_600 * DAY; // a window start in 2023

pub(crate) fn every() -> Vec<Matcher> {
    vec![Matcher::new(MatchOp::RegexMatch, "__name__", ".+").unwrap()]
}

pub(crate) fn batch(series: &[(String, Vec<(i64, f64)>)]) -> WriteBatch {
    WriteBatch {
        series: series
            .iter()
            .map(|(name, pts)| SeriesSamples {
                labels: Labels::from_pairs([("__name__", "tiered"), ("s", name.as_str())]).unwrap(),
                samples: pts.iter().map(|&(t, v)| Sample::new(t, v)).collect(),
                histograms: Vec::new(),
            })
            .collect(),
    }
}

/// Up to four series over three days at a 15 s-ish scrape: counters with resets, decimal gauges,
/// any float, staleness markers, gaps.
pub(crate) fn arb_series() -> impl Strategy<Value = Vec<(String, Vec<(i64, f64)>)>> {
    let value = prop_oneof![
        6 => (-10_000i64..10_000).prop_map(|v| v as f64 / 100.0),
        1 => any::<u64>().prop_map(f64::from_bits),
        1 => Just(f64::from_bits(STALE_NAN_BITS)),
        1 => Just(0.0),
    ];
    let gaps = proptest::collection::vec((1i64..60, value), 1..1200);
    proptest::collection::vec((1i64..400, gaps), 1..5).prop_map(|ss| {
        ss.into_iter()
            .enumerate()
            .map(|(i, (stride, pts))| {
                let stride = stride * 15_000 / 7; // 2 s .. 14 min between samples
                let mut t = W0;
                let samples = pts
                    .into_iter()
                    .map(|(gap, v)| {
                        t += gap * stride / 4 + 1;
                        (t.min(W0 + 3 * DAY - 1), v)
                    })
                    .collect::<std::collections::BTreeMap<_, _>>();
                // Samples at window starts: the point ending there is merged from two windows.
                let mut samples = samples;
                for k in 1..3 {
                    if i % 2 == 0 || samples.range(..W0 + k * DAY).next_back().is_some_and(|(_, &v)| v > 0.0) {
                        samples.insert(W0 + k * DAY, k as f64);
                    }
                }
                (format!("s{i}"), samples.into_iter().collect())
            })
            .collect()
    })
}

pub(crate) fn sorted(mut v: Vec<SeriesPoints>) -> Vec<SeriesPoints> {
    v.sort_by_key(|a| a.labels.to_string());
    v
}

/// The points of every raw sample of the range, series by series.
pub(crate) fn reference(s: &Storage, (first_end, last_end): (i64, i64), interval: i64) -> Vec<SeriesPoints> {
    let raw = s.select(&every(), first_end - interval + 1, last_end, usize::MAX).unwrap();
    sorted(
        raw.into_iter()
            .map(|r| SeriesPoints {
                points: points_in(&r.samples, interval, (first_end, last_end)),
                labels: r.labels,
                values: Vec::new(),
            })
            .filter(|p| !p.points.is_empty())
            .collect(),
    )
}

/// Equal points: counts, samples, flags, extremes and exact moments to the bit; float sums and
/// moments within rounding (merged in another order, or rebuilt from exact integers).
/// What every read gives of a point, bit for bit: its count, samples and staleness.
#[allow(clippy::type_complexity)]
fn ends(p: &FloatPoint) -> (u64, (i64, u64), (i64, u64), Option<(i64, u64)>, bool) {
    (
        p.count,
        (p.first.timestamp_ms, p.first.value.to_bits()),
        (p.last.timestamp_ms, p.last.value.to_bits()),
        p.before_last.map(|s| (s.timestamp_ms, s.value.to_bits())),
        p.ends_stale,
    )
}

pub(crate) fn same(a: &FloatPoint, b: &FloatPoint) -> Result<(), String> {
    let exact = |p: &FloatPoint| {
        (
            ends(p),
            (p.min.to_bits(), p.min_ts, p.max.to_bits(), p.max_ts),
            (p.constant, p.resets, p.changes, p.x_sum_ms, p.x_sq_ms),
        )
    };
    if exact(a) != exact(b) {
        return Err(format!("{:?} != {:?}", exact(a), exact(b)));
    }
    let scale = a.min.abs().max(a.max.abs()) * a.count as f64;
    let checks = [
        ("sum", a.sum_value(), b.sum_value(), scale),
        ("m2", a.m2, b.m2, scale * scale),
        ("sxy", a.sxy, b.sxy, scale * 1e9),
        ("reset_sum", a.reset_sum, b.reset_sum, scale),
    ];
    for (name, x, y, scale) in checks {
        if !close_sums(x, y, scale) {
            return Err(format!("{name}: {x} != {y}"));
        }
    }
    Ok(())
}

/// Sums added in another order: within rounding of `scale`, and, where samples overflow or are
/// NaN, non-finite both ways (-inf added to +inf in one order is NaN, -inf in another). Where a
/// sum reaches the edge of the f64 range, one order overflows and another stays finite (a saved
/// case: NaN against -1.1e308 from the same samples).
fn close_sums(x: f64, y: f64, scale: f64) -> bool {
    let edge = |v: f64| !v.is_finite() || v.abs() > 1e300;
    x.to_bits() == y.to_bits()
        || (!x.is_finite() && !y.is_finite())
        || ((!x.is_finite() || !y.is_finite()) && edge(x) && edge(y))
        || (x - y).abs() <= 1e-9 * scale.max(1.0)
}

/// What of two points a read of `fields` must give alike (see `FloatPoint::absorb`): what every
/// read gives, and the fields named; sums within rounding, as in [`same`].
fn same_fields(a: &FloatPoint, b: &FloatPoint, fields: Fields) -> Result<(), String> {
    if fields == Fields::All {
        return same(a, b);
    }
    let named = |p: &FloatPoint| match fields {
        Fields::Extremes => (p.min.to_bits(), p.min_ts, p.max.to_bits(), p.max_ts),
        Fields::Counter => (p.resets, i64::try_from(p.changes).unwrap_or(-1), 0, 0),
        _ => (0, 0, 0, 0),
    };
    if (ends(a), named(a)) != (ends(b), named(b)) {
        return Err(format!("{fields:?}: {:?} != {:?}", (ends(a), named(a)), (ends(b), named(b))));
    }
    let close = |x: f64, y: f64| close_sums(x, y, x.abs());
    match fields {
        Fields::Sums if !close(a.sum_value(), b.sum_value()) => {
            Err(format!("sum: {} != {}", a.sum_value(), b.sum_value()))
        }
        Fields::Counter if !close(a.reset_sum, b.reset_sum) => {
            Err(format!("reset_sum: {} != {}", a.reset_sum, b.reset_sum))
        }
        _ => Ok(()),
    }
}

fn check(s: &Storage, range: (i64, i64), interval: i64) -> Result<(), TestCaseError> {
    let want = reference(s, range, interval);
    // Read whole, and for each function family only what it reads.
    for fields in [Fields::All, Fields::Ends, Fields::Extremes, Fields::Counter, Fields::Sums] {
        let how = PointsRead { fields, ..PointsRead::default() };
        let got = s.querier(ReadLimits::none()).select_points(&every(), range, interval, how).unwrap();
        let got = sorted(got.expect("a storage with this tier answers in points"));
        prop_assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(&want) {
            prop_assert_eq!(&g.labels, &w.labels);
            prop_assert_eq!(
                g.points.iter().map(|p| p.0).collect::<Vec<_>>(),
                w.points.iter().map(|p| p.0).collect::<Vec<_>>()
            );
            for ((end, a), (_, b)) in g.points.iter().zip(&w.points) {
                if let Err(e) = same_fields(a, b, fields) {
                    return Err(TestCaseError::fail(format!("{} at {end}: {e}", g.labels)));
                }
            }
        }
    }
    Ok(())
}

/// A store with 5m and 1h tiers whose seals write every tier row, however sparse (the
/// default writes only rows worth reading: see the budget test).
pub(crate) fn tiered(dir: &std::path::Path) -> Storage {
    let mut c = storage_config(dir);
    c.tier_intervals_ms = vec![FIVE_MIN, HOUR];
    c.tier_min_density = 0;
    Storage::open(c).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(10))]

    #[test]
    fn points_read_across_sealed_hot_late_and_deleted_data_equal_the_points_of_the_raw_samples(
        series in arb_series(),
        late in proptest::collection::vec((0..DAY, -1000i64..1000), 0..30),
        ends in proptest::collection::vec((0i64..3 * 24, 1i64..3 * 24), 3),
        deleted in (0..3 * DAY, 0..DAY),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let s = tiered(dir.path());
        s.write(batch(&series)).unwrap();
        // The first two windows sealed with their tiers (where the series reach them), the third hot.
        let sealed = s.seal_due(W0 + 2 * DAY, 0).unwrap();
        prop_assert!(!sealed.is_empty());
        prop_assert!(sealed.iter().any(|o| o.tier_rows > 0));
        let ranges: Vec<(i64, i64)> = ends.iter().map(|&(a, n)| (W0 + a * HOUR, W0 + (a + n).min(3 * 24) * HOUR)).collect();
        let check_all = |s: &Storage| -> Result<(), TestCaseError> {
            for &(a, b) in &ranges {
                check(s, (a, b.max(a)), HOUR)?;
                check(s, (a + FIVE_MIN, b.max(a + FIVE_MIN)), FIVE_MIN)?;
            }
            check(s, (W0, W0 + 3 * DAY), FIVE_MIN)
        };
        check_all(&s)?;
        // Late samples of the first window: read raw (overlay) until re-sealed, then from
        // re-built tier rows.
        let late: Vec<(String, Vec<(i64, f64)>)> = vec![(
            "s0".into(),
            late.iter().map(|&(t, v)| (W0 + t, v as f64 / 10.0)).collect::<std::collections::BTreeMap<_, _>>().into_iter().collect(),
        )];
        if !late[0].1.is_empty() {
            s.write(batch(&late)).unwrap();
            check_all(&s)?;
            s.flush_head().unwrap();
            check_all(&s)?;
            s.seal_due(W0 + 2 * DAY, 0).unwrap();
            check_all(&s)?;
        }
        // A deletion rewrites the tier rows of the sealed windows it reaches.
        let m = vec![Matcher::new(MatchOp::Equal, "s", "s0").unwrap()];
        s.delete_series(&m, W0 + deleted.0, W0 + deleted.0 + deleted.1).unwrap();
        check_all(&s)?;
        // And the tiers are read back after a restart.
        drop(s);
        let s = tiered(dir.path());
        check_all(&s)?;
    }
}

/// The sample budget counts points read from tier rows, not the raw samples they stand for: a
/// budget too small for the raw samples of a sealed day holds its 1h points. A seal writes only
/// rows dense enough to be worth reading (the 1h points of a 15 s scrape, 240 samples each, not
/// its 5m points, 20 each): the 5m points are cut from the raw samples when asked for.
#[test]
fn a_budget_too_small_for_raw_samples_holds_their_tier_points() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = storage_config(dir.path());
    c.tier_intervals_ms = vec![FIVE_MIN, HOUR];
    let s = Storage::open(c).unwrap();
    let samples: Vec<(i64, f64)> = (0..DAY / 15_000).map(|i| (W0 + i * 15_000, i as f64)).collect();
    s.write(batch(&[("s0".into(), samples)])).unwrap();
    let sealed = s.seal_due(W0 + DAY, 0).unwrap();
    assert_eq!(sealed.iter().map(|o| o.tier_rows).collect::<Vec<_>>(), vec![1], "only the 1h row");
    let limits = |max: usize| ReadLimits { max_samples: Some(max), ..ReadLimits::none() };
    let raw = s.querier(limits(100)).select(&every(), W0, W0 + DAY - 1, None);
    assert!(matches!(raw, Err(StorageError::TooManySamples { .. })), "{raw:?}");
    let read = |max: usize, interval: i64, how: PointsRead<'_>| {
        s.querier(limits(max)).select_points(&every(), (W0 + interval, W0 + DAY), interval, how)
    };
    let points = read(100, HOUR, PointsRead::default()).unwrap().unwrap();
    assert_eq!(points.len(), 1);
    assert_eq!(points[0].points.len(), 24);
    assert_eq!(points[0].points.iter().map(|(_, p)| p.count).sum::<u64>(), (DAY / 15_000 - 1) as u64);
    // The 5m points come from the raw samples, which the budget counts.
    let cut = read(100, FIVE_MIN, PointsRead::default());
    assert!(matches!(cut, Err(StorageError::TooManySamples { .. })), "{cut:?}");
    assert_eq!(read(10_000, FIVE_MIN, PointsRead::default()).unwrap().unwrap()[0].points.len(), 288);
    // An interval without a tier is not answered in points.
    assert!(read(100, 60_000, PointsRead::default()).unwrap().is_none());
    // Nor points sparser than asked, stored or cut: the 1h points stand for 240 samples each,
    // the 5m ones 20.
    assert!(read(100, HOUR, PointsRead { min_density: 200, map: None, fields: Fields::All }).unwrap().is_some());
    assert!(read(100, HOUR, PointsRead { min_density: 300, map: None, fields: Fields::All }).unwrap().is_none());
    assert!(read(10_000, FIVE_MIN, PointsRead { min_density: 100, map: None, fields: Fields::All }).unwrap().is_none());
    assert!(read(10_000, FIVE_MIN, PointsRead { min_density: 19, map: None, fields: Fields::All }).unwrap().is_some());
    // A map reduces each series where it is read.
    let map = |p: &mut SeriesPoints| {
        p.values = vec![Sample::new(0, p.points.len() as f64)];
        p.points.clear();
    };
    let mapped = read(100, HOUR, PointsRead { min_density: 0, map: Some(&map), fields: Fields::All }).unwrap().unwrap();
    assert_eq!((mapped[0].points.len(), mapped[0].values.clone()), (0, vec![Sample::new(0, 24.0)]));
}

/// A tier interval must divide the window length.
#[test]
fn an_interval_that_does_not_divide_the_window_is_refused_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = storage_config(dir.path());
    c.tier_intervals_ms = vec![7 * 60_000];
    let err = Storage::open(c).err().expect("refused");
    assert!(err.to_string().contains("420000 ms"), "{err}");
}

/// The points of the whole data directory (one in-process open, after the binary is dead), as
/// read from tiers and as cut from the raw samples: they must be equal, so no window is read
/// with half its tier rows.
fn points_agree(dir: &std::path::Path, (first_end, last_end): (i64, i64)) {
    let s = tiered(dir);
    for interval in [FIVE_MIN, HOUR] {
        let got = s.querier(ReadLimits::none()).select_points(
            &every(),
            (first_end, last_end),
            interval,
            PointsRead::default(),
        );
        let got = got.unwrap();
        let got = sorted(got.expect("answered in points"));
        let want = reference(&s, (first_end, last_end), interval);
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(&want) {
            assert_eq!(g.points.len(), w.points.len(), "{}", g.labels);
            for ((end, a), (_, b)) in g.points.iter().zip(&w.points) {
                same(a, b).unwrap_or_else(|e| panic!("{} at {end}: {e}", g.labels));
            }
        }
    }
}

/// `kill -9` at any point of building tiers (a seal, then a re-seal of late samples) loses no
/// acknowledged sample, and every window reads either from raw or from complete tier rows.
#[test]
fn kill_9_while_building_tiers_loses_nothing_and_reads_no_half_tier() {
    let dir = tempfile::tempdir().unwrap();
    let now = chrono::Utc::now().timestamp_millis();
    let t0 = now - now % DAY - 2 * DAY;
    let hour = ["--retention", "0", "--ooo-grace", "0", "--maintenance-interval", "1h", "--downsample", "5m,1h"];
    let fast = ["--retention", "0", "--ooo-grace", "0", "--maintenance-interval", "200ms", "--downsample", "5m,1h"];
    let bin = Binary::spawn(dir.path(), &hour);
    let (body, mut expected) = dataset(300, 2880, t0, "tiered");
    assert_eq!(import(&bin.url(""), body), (204, String::new()));
    bin.kill9();
    let range = (t0 + HOUR, t0 + DAY);
    let mut cut_short = 0;
    for round in 0..2 {
        if round == 1 {
            // Late samples for every series, to be folded in by a re-seal.
            let bin = Binary::spawn(dir.path(), &hour);
            let (late, late_expected) = dataset(300, 500, t0 + 7_500, "tiered");
            assert_eq!(import(&bin.url(""), late), (204, String::new()));
            for (metric, samples) in late_expected {
                let all = expected.get_mut(&metric).unwrap();
                let mut merged: std::collections::BTreeMap<i64, u64> = all.iter().copied().collect();
                merged.extend(samples);
                *all = merged.into_iter().collect();
            }
            bin.kill9();
        }
        // A seal starts about 200 ms after the server listens and takes 100-200 ms on an idle
        // machine: kills before, inside (from several offsets) and after it.
        for delay_ms in [200, 260, 320, 400, 700, 1000] {
            let log = dir.path().join(format!("kill-{round}-{delay_ms}.log"));
            let bin = Binary::spawn_logged(dir.path(), &fast, "saltdb=debug", &log);
            std::thread::sleep(std::time::Duration::from_millis(delay_ms));
            bin.kill9();
            let log = std::fs::read_to_string(&log).unwrap();
            cut_short += usize::from(log.contains("sealing window") && !log.contains("seal finished"));
            points_agree(dir.path(), range);
            let bin = Binary::spawn(dir.path(), &hour);
            assert_eq!(export(&bin.url(""), r#"{__name__=~"tiered.*"}"#), expected, "after a kill {delay_ms} ms in");
            bin.kill9();
        }
    }
    eprintln!("{cut_short} of 12 kills landed inside a seal");
    assert!(cut_short > 0, "no kill landed inside a seal");
    let bin = Binary::spawn(dir.path(), &fast);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let sealed = |base: &str| get_json(&format!("{base}/api/v1/status/windows"))["data"][0]["state"] == "sealed";
    while !sealed(&bin.url("")) {
        assert!(std::time::Instant::now() < deadline, "the window was never sealed");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    std::thread::sleep(std::time::Duration::from_secs(2));
    bin.terminate();
    points_agree(dir.path(), range);
    // The sealed window answers from its tier rows: its 1h points of 300 series (the server
    // writes no 5m rows for a 15 s scrape, 20 samples a point) fit a budget far below its raw
    // samples.
    let s = tiered(dir.path());
    let limits = ReadLimits { max_samples: Some(300 * 30), ..ReadLimits::none() };
    let points = s.querier(limits).select_points(&every(), range, HOUR, PointsRead::default()).unwrap().unwrap();
    assert_eq!(points.len(), 300);
}

/// A range query over sealed days with tiers: `rate`, `max_over_time` and `avg_over_time` at
/// aligned steps read the tier `max_source_resolution` names (an info says which) and answer as
/// the raw samples do (`max_source_resolution=raw`); by default only a dense enough tier is
/// read; unaligned or unanswerable queries read raw; a bad value is a 400 naming the parameter.
#[test]
fn range_queries_over_sealed_days_read_tiers_and_answer_as_raw_samples() {
    let dir = tempfile::tempdir().unwrap();
    let now = chrono::Utc::now().timestamp_millis();
    let t0 = now - now % DAY - 3 * DAY;
    let bin = Binary::spawn(
        dir.path(),
        &["--retention", "0", "--ooo-grace", "0", "--maintenance-interval", "200ms", "--downsample", "5m,1h"],
    );
    // Two days at 15 s: counters with resets, decimal gauges, a series that stops halfway.
    let mut body = String::new();
    for host in 0..6 {
        let n = if host == 5 { 2880 } else { 11_520 };
        let ts: Vec<i64> = (0..n).map(|i| t0 + i as i64 * 15_000 + host * 1_000).collect();
        let counter: Vec<f64> = (0..n).map(|i| ((i % 3_000) * (host as usize + 1)) as f64).collect();
        let gauge: Vec<f64> = (0..n).map(|i| ((i * 7 + host as usize * 13) % 1_000) as f64 / 100.0).collect();
        for (name, values) in [("req_total", counter), ("temp", gauge)] {
            let metric =
                serde_json::json!({"__name__": name, "host": format!("h{host}"), "dc": format!("dc{}", host % 2)});
            body.push_str(&serde_json::json!({"metric": metric, "values": values, "timestamps": ts}).to_string());
            body.push('\n');
        }
    }
    assert_eq!(import(&bin.url(""), body), (204, String::new()));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let windows = |base: &str| get_json(&format!("{base}/api/v1/status/windows"))["data"].clone();
    while windows(&bin.url("")).as_array().unwrap().iter().filter(|w| w["state"] == "sealed").count() < 2 {
        assert!(std::time::Instant::now() < deadline, "windows never sealed: {}", windows(&bin.url("")));
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let query = |q: &str, start: i64, end: i64, step: &str, extra: &str| {
        let url = format!(
            "{}?query={}&start={}&end={}&step={step}{extra}",
            bin.url("/api/v1/query_range"),
            urlencoding(q),
            start / 1000,
            end / 1000
        );
        let r = client().get(url).send().unwrap();
        let status = r.status().as_u16();
        (status, serde_json::from_str::<serde_json::Value>(&r.text().unwrap()).unwrap())
    };
    let infos = |v: &serde_json::Value| v["infos"].as_array().cloned().unwrap_or_default();
    let (start, end) = (t0 + DAY, t0 + 3 * DAY);
    for (q, step, tier) in [
        ("sum by (dc) (rate(req_total[1h]))", "1h", "5m"),
        ("max_over_time(temp[1h])", "30m", "5m"),
        ("avg by (dc) (avg_over_time(temp[1d]))", "1d", "1h"),
        ("increase(req_total[6h])", "6h", "1h"),
    ] {
        let (status, tiered) = query(q, start, end, step, &format!("&max_source_resolution={tier}"));
        assert_eq!(status, 200, "{tiered}");
        let said = infos(&tiered);
        assert!(
            said.iter().any(|i| i.as_str().unwrap().contains(&format!("read from the {tier} tier"))),
            "{q}: {said:?}"
        );
        let (status, raw) = query(q, start, end, step, "&max_source_resolution=raw");
        assert_eq!(status, 200, "{raw}");
        assert!(infos(&raw).is_empty(), "{q}: {raw}");
        let series = |v: &serde_json::Value| v["data"]["result"].as_array().unwrap().clone();
        let (a, b) = (series(&tiered), series(&raw));
        assert!(!a.is_empty(), "{q}");
        assert_eq!(a.len(), b.len(), "{q}");
        for (x, y) in a.iter().zip(&b) {
            assert_eq!(x["metric"], y["metric"], "{q}");
            let values = |s: &serde_json::Value| {
                s["values"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|p| (p[0].as_f64().unwrap(), p[1].as_str().unwrap().parse::<f64>().unwrap()))
                    .collect::<Vec<_>>()
            };
            let (vx, vy) = (values(x), values(y));
            assert_eq!(vx.len(), vy.len(), "{q}");
            for ((tx, x), (ty, y)) in vx.iter().zip(&vy) {
                assert_eq!(tx, ty, "{q}");
                assert!((x - y).abs() <= 1e-9 * y.abs().max(1.0), "{q} at {tx}: tier {x}, raw {y}");
            }
        }
        // By default a tier is read only where its points stand for 100 samples or more: the
        // 1h tier of a 15 s scrape (240), not its 5m tier (20).
        let (_, auto) = query(q, start, end, step, "");
        let from_tier = infos(&auto).iter().any(|i| i.as_str().unwrap().contains("tier"));
        assert_eq!(from_tier, tier == "1h", "{q}: {auto}");
        // Measured (`stats=all`, as the web UI asks), the same answer from the same tier, its
        // points counted as the samples read and named by tier.
        let (status, measured) = query(q, start, end, step, &format!("&max_source_resolution={tier}&stats=all"));
        assert_eq!(status, 200, "{measured}");
        assert_eq!(measured["data"]["result"], tiered["data"]["result"], "{q}");
        let samples = &measured["data"]["stats"]["samples"];
        let points = samples["tierPoints"][tier].as_u64().unwrap_or(0);
        assert!(points > 0, "{q}: {samples}");
        assert_eq!(samples["totalQueryableSamples"].as_u64(), Some(points), "{q}: {samples}");
        let (_, raw_measured) = query(q, start, end, step, "&max_source_resolution=raw&stats=all");
        let raw_samples = &raw_measured["data"]["stats"]["samples"];
        assert!(raw_samples.get("tierPoints").is_none(), "{q}: {raw_samples}");
        assert!(raw_samples["totalQueryableSamples"].as_u64().unwrap_or(0) > points, "{q}: {raw_samples}");
    }
    // Not aligned (a start 90 s off the hour), or a function tiers do not answer: raw.
    for (q, s) in [("max_over_time(temp[1h])", start + 90_000), ("quantile_over_time(0.5, temp[1h])", start)] {
        let (status, v) = query(q, s, end, "1h", "&max_source_resolution=5m");
        assert_eq!(status, 200, "{v}");
        assert!(infos(&v).is_empty(), "{q}: {v}");
    }
    let (status, v) = query("rate(req_total[1h])", start, end, "1h", "&max_source_resolution=fine");
    assert_eq!(status, 400, "{v}");
    assert!(v["error"].as_str().unwrap().contains("max_source_resolution"), "{v}");
    bin.terminate();
}

pub(crate) fn urlencoding(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}
