//! Downsampling old windows (`--downsample 7d:5m`): a sealed window past an age keeps only its
//! tier points of that interval and coarser, and answers from them as its raw samples did;
//! writes into it are refused, deletions reach its points, a `kill -9` leaves it whole (raw or
//! downsampled), and the server does it by itself as windows age.

use proptest::prelude::*;
use saltdb::matcher::{MatchOp, Matcher};
use saltdb::remote::proto;
use saltdb::storage::{DownsampleAge, PointsRead, Querier, ReadLimits, SeriesPoints, Storage, StorageError};

use crate::common::*;
use crate::tiers::{arb_series, batch, every, reference, same, sorted, urlencoding, DAY, FIVE_MIN, HOUR, W0};

fn open(dir: &std::path::Path, tiers: &[i64]) -> Storage {
    let mut c = storage_config(dir);
    c.tier_intervals_ms = tiers.to_vec();
    Storage::open(c).unwrap()
}

fn points(s: &Storage, range: (i64, i64), interval: i64) -> Option<Vec<SeriesPoints>> {
    s.querier(ReadLimits::none()).select_points(&every(), range, interval, PointsRead::default()).unwrap().map(sorted)
}

fn agree(got: Option<Vec<SeriesPoints>>, want: &[SeriesPoints], what: &str) -> Result<(), TestCaseError> {
    let got = got.ok_or_else(|| TestCaseError::fail(format!("{what}: not answered in points")))?;
    prop_assert_eq!(got.len(), want.len(), "{}", what);
    for (g, w) in got.iter().zip(want) {
        prop_assert_eq!(&g.labels, &w.labels, "{}", what);
        let ends = |p: &SeriesPoints| p.points.iter().map(|x| x.0).collect::<Vec<_>>();
        prop_assert_eq!(ends(g), ends(w), "{} {}", what, g.labels);
        for ((end, a), (_, b)) in g.points.iter().zip(&w.points) {
            if let Err(e) = same(a, b) {
                return Err(TestCaseError::fail(format!("{what}: {} at {end}: {e}", g.labels)));
            }
        }
    }
    Ok(())
}

/// Float samples of every series in `[start, end]`.
fn raw_samples(s: &Storage, start: i64, end: i64) -> usize {
    s.select(&every(), start, end, usize::MAX).unwrap().iter().map(|x| x.samples.len()).sum()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(6))]

    /// Three sealed days; the first keeps 5m points, then 1h points merged from them (its raw
    /// samples are gone by then, and the store was sealed without a 1h tier), the second 1h
    /// points cut from raw, the third stays raw: the points read equal the points of the raw
    /// samples as they were, across the windows' seams and a restart.
    #[test]
    fn downsampled_windows_answer_in_points_as_their_raw_samples_did(
        series in arb_series(),
        ends in proptest::collection::vec((0i64..3 * 24, 1i64..3 * 24), 3),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let s = open(dir.path(), &[FIVE_MIN]);
        s.write(batch(&series)).unwrap();
        prop_assert_eq!(s.seal_due(W0 + 3 * DAY, 0).unwrap().len(), 3);
        let ranges: Vec<(i64, i64)> =
            ends.iter().map(|&(a, n)| (W0 + a * HOUR, W0 + (a + n).min(3 * 24) * HOUR)).chain([(W0, W0 + 3 * DAY)]).collect();
        let hourly: Vec<Vec<SeriesPoints>> = ranges.iter().map(|&r| reference(&s, r, HOUR)).collect();
        let third_day = (W0 + 2 * DAY + FIVE_MIN, W0 + 3 * DAY);
        let fine = reference(&s, third_day, FIVE_MIN);
        let first_day = (W0 + FIVE_MIN, W0 + DAY);
        let fine_first = reference(&s, first_day, FIVE_MIN);
        let before = raw_samples(&s, W0 + 1, W0 + DAY - 1);

        let d = s.downsample_window(W0, FIVE_MIN).unwrap().expect("a sealed window is downsampled");
        prop_assert!(d.installed);
        prop_assert_eq!(d.kept_ms, vec![FIVE_MIN]);
        prop_assert_eq!(raw_samples(&s, W0 + 1, W0 + DAY - 1), 0);
        prop_assert!(before == 0 || d.samples_dropped > 0);
        agree(points(&s, first_day, FIVE_MIN), &fine_first, "5m of day 1 from its kept points")?;
        // Already as coarse: nothing to do.
        prop_assert!(s.downsample_window(W0, FIVE_MIN).unwrap().is_none());
        drop(s);

        let s = open(dir.path(), &[FIVE_MIN, HOUR]);
        prop_assert!(s.downsample_window(W0 + DAY, HOUR).unwrap().unwrap().installed);
        prop_assert!(s.downsample_window(W0, HOUR).unwrap().unwrap().installed);
        let check = |s: &Storage, with_5m: bool| -> Result<(), TestCaseError> {
            for (r, want) in ranges.iter().zip(&hourly) {
                agree(points(s, *r, HOUR), want, &format!("1h over {r:?}"))?;
            }
            if with_5m {
                agree(points(s, third_day, FIVE_MIN), &fine, "5m of the raw day")?;
            }
            prop_assert_eq!(raw_samples(s, W0 + 1, W0 + 2 * DAY - 1), 0);
            Ok(())
        };
        check(&s, true)?;
        let status = s.window_status().unwrap();
        let kept: Vec<Option<i64>> = status.iter().map(|w| w.downsampled_ms).collect();
        prop_assert_eq!(kept, vec![Some(HOUR), Some(HOUR), None]);
        drop(s);
        // Whatever the flags now: downsampled windows keep their intervals.
        let s = open(dir.path(), &[]);
        check(&s, false)?;
    }
}

/// Thanos #7908: raw blocks were deleted by retention before they had been downsampled, and the
/// period was lost. Here a window sealed without any tier (the flag came later) is downsampled
/// from its raw samples in the very rewrite that drops them: nothing is lost in between.
#[test]
fn thanos_7908_raw_samples_are_dropped_only_with_their_points_written() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path(), &[]);
    let minutes: Vec<(i64, f64)> = (0..24 * 60).map(|i| (W0 + 30_000 + i * 60_000, (i % 97) as f64)).collect();
    s.write(batch(&[("s0".into(), minutes)])).unwrap();
    assert_eq!(s.seal_due(W0 + DAY, 0).unwrap().len(), 1);
    let day = (W0 + HOUR, W0 + DAY);
    let want = reference(&s, day, HOUR);
    assert_eq!(want[0].points.len(), 24);
    drop(s);
    let s = open(dir.path(), &[HOUR]);
    let d = s.downsample_window(W0, HOUR).unwrap().unwrap();
    assert!(d.installed);
    assert_eq!((d.series_tiered, d.samples_dropped), (1, 24 * 60));
    assert_eq!(raw_samples(&s, W0, W0 + DAY - 1), 0);
    agree(points(&s, day, HOUR), &want, "1h points cut in the pass that dropped the raw samples").unwrap();
}

/// A batch with one sample in a downsampled window is refused whole, naming the window and
/// its interval; a deletion there removes the points meeting its range; all of it lasts
/// across a restart.
#[test]
fn writes_into_a_downsampled_window_are_refused_and_deletions_reach_its_points() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path(), &[FIVE_MIN]);
    let minutes: Vec<(i64, f64)> = (0..2 * 24 * 60).map(|i| (W0 + 30_000 + i * 60_000, i as f64)).collect();
    s.write(batch(&[("s0".into(), minutes)])).unwrap();
    assert_eq!(s.seal_due(W0 + 2 * DAY, 0).unwrap().len(), 2);
    assert!(s.downsample_window(W0, FIVE_MIN).unwrap().unwrap().installed);
    let mut s = Some(s);
    for _ in 0..2 {
        // Once as it is, once after a restart.
        let s = s.take().unwrap_or_else(|| open(dir.path(), &[FIVE_MIN]));
        let mixed = batch(&[("s1".into(), vec![(W0 + DAY + 1_000, 1.0)]), ("s0".into(), vec![(W0 + 1_000, 2.0)])]);
        match s.write(mixed) {
            Err(e @ StorageError::Downsampled { ts_ms, window_start_ms, interval_ms }) => {
                assert_eq!((ts_ms, window_start_ms, interval_ms), (W0 + 1_000, W0, FIVE_MIN));
                assert!(e.is_client_error());
                assert!(e.to_string().contains("downsampled"), "{e}");
            }
            other => panic!("not refused: {other:?}"),
        }
        // Nothing of the refused batch was written; the window after takes writes.
        let s1 = vec![Matcher::new(MatchOp::Equal, "s", "s1").unwrap()];
        assert!(s.select(&s1, W0, W0 + 2 * DAY, usize::MAX).unwrap().is_empty());
        s.write(batch(&[("s1".into(), vec![(W0 + DAY + 1_000, 1.0)])])).unwrap();
        assert_eq!(s.select(&s1, W0, W0 + 2 * DAY, usize::MAX).unwrap().len(), 1);
        let m = vec![Matcher::new(MatchOp::Equal, "s", "s1").unwrap()];
        s.delete_series(&m, W0, W0 + 2 * DAY).unwrap();
    }
    let s = open(dir.path(), &[FIVE_MIN]);
    let day = (W0 + FIVE_MIN, W0 + DAY);
    let ends = |s: &Storage| -> Vec<i64> { points(s, day, FIVE_MIN).unwrap()[0].points.iter().map(|p| p.0).collect() };
    assert_eq!(ends(&s).len(), 288);
    // (10m, 12m]: the points ending at 10m (it holds 10m) and 15m go, five samples each.
    let m = vec![Matcher::new(MatchOp::Equal, "s", "s0").unwrap()];
    let out = s.delete_series(&m, W0 + 10 * 60_000, W0 + 12 * 60_000).unwrap();
    assert_eq!(out.samples, 10);
    let left = ends(&s);
    assert_eq!(left.len(), 286);
    assert!(!left.contains(&(W0 + 10 * 60_000)) && !left.contains(&(W0 + 15 * 60_000)));
    assert!(left.contains(&(W0 + 5 * 60_000)) && left.contains(&(W0 + 20 * 60_000)));
    // The whole day: the series leaves the window's index.
    s.delete_series(&m, W0, W0 + DAY - 1).unwrap();
    assert!(points(&s, day, FIVE_MIN).unwrap().is_empty());
    assert!(s.series(&m, W0, W0 + DAY - 1).unwrap().is_empty());
}

/// The ages of `--downsample` are checked at open: positive, below the retention, naming a
/// tier that is built, coarser intervals with longer ages.
#[test]
fn downsampling_ages_that_cannot_work_are_refused_at_open() {
    let age = |days: i64, interval_ms: i64| DownsampleAge { after_ms: days * DAY, interval_ms };
    for (tiers, ages, retention, says) in [
        (vec![FIVE_MIN], vec![age(7, HOUR)], None, "no tier of that interval"),
        (vec![FIVE_MIN, HOUR], vec![age(7, FIVE_MIN), age(7, HOUR)], None, "longer age"),
        (vec![FIVE_MIN, HOUR], vec![age(30, FIVE_MIN), age(7, HOUR)], None, "longer age"),
        (vec![FIVE_MIN], vec![age(30, FIVE_MIN)], Some(30 * DAY), "shorter than the retention"),
        (vec![FIVE_MIN], vec![age(0, FIVE_MIN)], None, "longer than 0"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let mut c = storage_config(dir.path());
        c.tier_intervals_ms = tiers;
        c.downsample_after = ages;
        c.retention_ms = retention;
        let err = Storage::open(c).err().expect("refused");
        assert!(err.to_string().contains(says), "{err}");
    }
    // And from the command line, before the data directory is touched.
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_saltdb"))
        .args(["serve", "--data-dir"])
        .arg(dir.path())
        .args(["--downsample", "5m,x:1h"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("age \"x\""), "{err}");
}

/// The server downsamples windows as they pass the age: queries at aligned steps answer as
/// before from the kept points, raw reads say the samples are gone, writes into the window get
/// a 400 naming it, and the window takes a fraction of its bytes.
#[test]
fn the_server_downsamples_aged_windows_and_answers_from_their_points() {
    let dir = tempfile::tempdir().unwrap();
    let now = chrono::Utc::now().timestamp_millis();
    let t0 = now - now % DAY - 4 * DAY;
    let common = ["--retention", "0", "--ooo-grace", "0", "--maintenance-interval", "200ms"];
    let spawn = |tiers: &str| Binary::spawn(dir.path(), &[&common[..], &["--downsample", tiers]].concat());
    let bin = spawn("5m,1h");
    let mut body = String::new();
    for host in 0..6 {
        let ts: Vec<i64> = (0..11_520).map(|i| t0 + i as i64 * 15_000 + host * 1_000).collect();
        let counter: Vec<f64> = (0..11_520).map(|i| ((i % 3_000) * (host as usize + 1)) as f64).collect();
        // A noisy gauge (xorshift), as real ones are: its raw samples do not compress to nothing.
        let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ host as u64;
        let gauge: Vec<f64> = (0..11_520)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x % 10_000) as f64 / 100.0
            })
            .collect();
        for (name, values) in [("req_total", counter), ("temp", gauge)] {
            let metric = serde_json::json!({"__name__": name, "host": format!("h{host}")});
            body.push_str(&serde_json::json!({"metric": metric, "values": values, "timestamps": ts}).to_string());
            body.push('\n');
        }
    }
    assert_eq!(import(&bin.url(""), body), (204, String::new()));
    let windows = |bin: &Binary| get_json(&bin.url("/api/v1/status/windows"))["data"].as_array().unwrap().clone();
    let wait = |bin: &Binary, what: &str, done: &dyn Fn(&[serde_json::Value]) -> bool| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while !done(&windows(bin)) {
            assert!(std::time::Instant::now() < deadline, "{what}: {:?}", windows(bin));
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    };
    wait(&bin, "sealed", &|w| w.len() == 2 && w.iter().all(|w| w["state"] == "sealed"));
    let query = |bin: &Binary, q: &str, step: &str, extra: &str| {
        let url = format!(
            "{}?query={}&start={}&end={}&step={step}{extra}",
            bin.url("/api/v1/query_range"),
            urlencoding(q),
            t0 / 1000,
            (t0 + 2 * DAY) / 1000
        );
        let r = client().get(url).send().unwrap();
        assert_eq!(r.status().as_u16(), 200);
        serde_json::from_str::<serde_json::Value>(&r.text().unwrap()).unwrap()
    };
    // A plain selector too (a Grafana graph of `temp`): at steps on the hour, each hour's last
    // sample is the one a step finds.
    let queries = [
        ("sum(rate(req_total[1h]))", "1h"),
        ("max_over_time(temp[2h])", "1h"),
        ("avg_over_time(temp[1d])", "6h"),
        ("temp", "1h"),
        // A "full in 4 hours" panel: a constant parameter is read from the points too.
        ("predict_linear(req_total[6h], 4 * 3600)", "1h"),
    ];
    let before: Vec<serde_json::Value> =
        queries.iter().map(|(q, step)| query(&bin, q, step, "&max_source_resolution=raw")["data"].clone()).collect();
    // Grafana's `$__rate_interval` at a 1h step: 1h plus a scrape interval, not whole hours.
    let rate_interval = "sum(rate(req_total[1h15s]))";
    let unaligned_before = query(&bin, rate_interval, "1h", "&max_source_resolution=raw")["data"].clone();
    // Instant queries (Grafana's stat panels), at the end of an hour and off it.
    let instant = |bin: &Binary, q: &str, at: i64, extra: &str| {
        let url = format!("{}?query={}&time={}{extra}", bin.url("/api/v1/query"), urlencoding(q), at as f64 / 1000.0);
        let r = client().get(url).send().unwrap();
        assert_eq!(r.status().as_u16(), 200);
        serde_json::from_str::<serde_json::Value>(&r.text().unwrap()).unwrap()
    };
    let instants = [
        ("max_over_time(temp[1d])", t0 + DAY),
        ("count_over_time(temp[6h])", t0 + DAY + 7 * HOUR),
        ("sum(increase(req_total[1d]))", t0 + DAY + 12 * HOUR),
        ("sum(rate(req_total[2h]))", t0 + DAY + 30 * 60_000),
        // A table panel of `temp` at a past hour: each hour's last sample.
        ("temp", t0 + DAY + 5 * HOUR),
        ("max(temp offset 1h)", t0 + DAY + 9 * HOUR),
    ];
    let instants_before: Vec<serde_json::Value> =
        instants.iter().map(|(q, at)| instant(&bin, q, *at, "")["data"].clone()).collect();
    let bytes = |w: &[serde_json::Value]| w.iter().map(|w| w["bytes"].as_u64().unwrap()).sum::<u64>();
    let raw_bytes = bytes(&windows(&bin));
    bin.terminate();

    let bin = spawn("5m,2d:1h");
    wait(&bin, "downsampled", &|w| w.iter().all(|w| w["downsampledMs"] == HOUR));
    for ((q, step), want) in queries.iter().zip(&before) {
        let got = query(&bin, q, step, "");
        let infos = got["infos"].to_string();
        assert!(infos.contains("read from the 1h tier"), "{q}: {got}");
        let values = |d: &serde_json::Value| -> Vec<(f64, f64)> {
            d["result"]
                .as_array()
                .unwrap()
                .iter()
                .flat_map(|s| s["values"].as_array().unwrap().clone())
                .map(|p| (p[0].as_f64().unwrap(), p[1].as_str().unwrap().parse().unwrap()))
                .collect()
        };
        let (a, b) = (values(&got["data"]), values(want));
        assert_eq!(a.len(), b.len(), "{q}: {got}");
        assert!(!a.is_empty(), "{q}");
        for ((ta, x), (tb, y)) in a.iter().zip(&b) {
            assert_eq!(ta, tb, "{q}");
            assert!((x - y).abs() <= 1e-9 * y.abs().max(1.0), "{q} at {ta}: {x} after, {y} before");
        }
    }
    // Not whole intervals: answered approximately from the 1h points, and said so.
    let got = query(&bin, rate_interval, "1h", "");
    assert!(got["infos"].to_string().contains("approximately"), "{got}");
    let values = |d: &serde_json::Value| -> Vec<(f64, f64)> {
        d["result"][0]["values"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| (p[0].as_f64().unwrap(), p[1].as_str().unwrap().parse().unwrap()))
            .collect()
    };
    let (a, b) = (values(&got["data"]), values(&unaligned_before));
    assert!(a.len() + 2 >= b.len() && !a.is_empty(), "{} of {} steps: {got}", a.len(), b.len());
    let before: std::collections::HashMap<u64, f64> = b.iter().map(|(t, v)| (t.to_bits(), *v)).collect();
    let mut errors: Vec<f64> =
        a.iter().filter_map(|(t, x)| before.get(&t.to_bits()).map(|y| ((x - y) / y.abs().max(1e-9)).abs())).collect();
    errors.sort_by(f64::total_cmp);
    let median = errors[errors.len() / 2];
    eprintln!("rate over 1h15s from 1h points: median relative error {median:.4} over {} steps", errors.len());
    assert!(median < 0.05, "median relative error {median} over {} steps", errors.len());
    // Instant queries over downsampled windows read the 1h points: exactly at the end of an
    // hour, approximately (said in an info) off it.
    let by_labels = |d: &serde_json::Value| -> std::collections::BTreeMap<String, f64> {
        d["result"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| (s["metric"].to_string(), s["value"][1].as_str().unwrap().parse().unwrap()))
            .collect()
    };
    for ((q, at), want) in instants.iter().zip(&instants_before) {
        let got = instant(&bin, q, *at, "&stats=all");
        let infos = got["infos"].to_string();
        assert!(infos.contains("read from the 1h tier"), "{q}: {got}");
        let aligned = at % HOUR == 0;
        assert_eq!(infos.contains("approximately"), !aligned, "{q}: {infos}");
        assert!(got["warnings"].as_array().is_none_or(Vec::is_empty), "{q}: {got}");
        let (a, b) = (by_labels(&got["data"]), by_labels(want));
        assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>(), "{q}: {got}");
        assert!(!a.is_empty(), "{q}");
        let tolerance = if aligned { 1e-9 } else { 0.05 };
        for (k, x) in &a {
            let y = b[k];
            assert!((x - y).abs() <= tolerance * y.abs().max(1.0), "{q} {k}: {x} from points, {y} raw");
        }
        let points = got["data"]["stats"]["samples"]["tierPoints"]["1h"].as_u64().unwrap_or(0);
        assert!(points > 0, "{q}: {}", got["data"]["stats"]);
    }
    // A raw read says why it finds nothing: a plain selector at steps or at a time off the hour
    // (the tier answers it only on the hour grid, see the first queries and the instants).
    let raw = query(&bin, "temp", "25m", "");
    assert!(raw["warnings"].to_string().contains("were downsampled to 1h points"), "{raw}");
    assert_eq!(raw["data"]["result"].as_array().unwrap().len(), 0, "{raw}");
    let raw = instant(&bin, "temp", t0 + DAY + 5 * HOUR + 60_000, "");
    assert!(raw["warnings"].to_string().contains("were downsampled to 1h points"), "{raw}");
    assert_eq!(raw["data"]["result"].as_array().unwrap().len(), 0, "{raw}");
    // `absent_over_time` asks whether there were samples: the points say so (raw samples alone
    // found none and called every series absent).
    let at = t0 + DAY + 5 * HOUR;
    let present = instant(&bin, "absent_over_time(temp[1h])", at, "");
    assert!(present["infos"].to_string().contains("read from the 1h tier"), "{present}");
    assert!(present["warnings"].as_array().is_none_or(Vec::is_empty), "{present}");
    assert_eq!(present["data"]["result"], serde_json::json!([]), "{present}");
    let absent = instant(&bin, "absent_over_time(temp{host=\"h9\"}[1h])", at, "");
    assert_eq!(absent["data"]["result"][0]["metric"], serde_json::json!({"host": "h9"}), "{absent}");
    let steps = query(&bin, "absent_over_time(temp[1h]) or absent_over_time(nope[1h])", "1h", "");
    let series = steps["data"]["result"].as_array().unwrap();
    assert_eq!(series.len(), 1, "{steps}");
    assert_eq!(series[0]["metric"], serde_json::json!({}), "{steps}");
    assert_eq!(series[0]["values"].as_array().unwrap().len(), 49, "{steps}");
    // Raw reads say so in a header (their formats have no place for a warning): export, and
    // remote read of either response type; a range after the downsampled windows has none.
    let exported = client()
        .get(bin.url("/api/v1/export"))
        .query(&[
            ("match[]", "temp"),
            ("start", &(t0 / 1000).to_string()),
            ("end", &((t0 + 2 * DAY) / 1000).to_string()),
        ])
        .send()
        .unwrap();
    let said = exported.headers().get("x-saltdb-downsampled").map(|v| v.to_str().unwrap().to_owned());
    assert!(said.as_deref().is_some_and(|s| s.contains("downsampled to 1h points")), "{said:?}");
    let later = client()
        .get(bin.url("/api/v1/export"))
        .query(&[("match[]", "temp"), ("start", &((t0 + 3 * DAY) / 1000).to_string())])
        .send()
        .unwrap();
    assert!(later.headers().get("x-saltdb-downsampled").is_none());
    for accepted in [proto::ResponseType::Samples, proto::ResponseType::StreamedXorChunks] {
        let matchers = vec![proto::LabelMatcher {
            r#type: proto::MatcherType::Eq as i32,
            name: "__name__".into(),
            value: "temp".into(),
        }];
        let req = proto::ReadRequest {
            queries: vec![proto::Query {
                start_timestamp_ms: t0,
                end_timestamp_ms: t0 + 2 * DAY,
                matchers,
                hints: None,
            }],
            accepted_response_types: vec![accepted as i32],
        };
        let resp = client()
            .post(bin.url("/api/v1/read"))
            .header("Content-Type", "application/x-protobuf")
            .header("Content-Encoding", "snappy")
            .body(saltdb::remote::snappy_body(&req))
            .send()
            .unwrap();
        assert_eq!(resp.status().as_u16(), 200, "{accepted:?}");
        let said = resp.headers().get("x-saltdb-downsampled").map(|v| v.to_str().unwrap().to_owned());
        assert!(said.as_deref().is_some_and(|s| s.contains("downsampled to 1h points")), "{accepted:?}: {said:?}");
    }
    // A write into it is a 400 naming the cause.
    let late =
        serde_json::json!({"metric": {"__name__": "temp", "host": "h0"}, "values": [1.0], "timestamps": [t0 + 500]});
    let (status, said) = import(&bin.url(""), late.to_string());
    assert_eq!(status, 400, "{said}");
    assert!(said.contains("downsampled"), "{said}");
    // The storage page names the ages; the windows hold a fraction of their bytes.
    let storage = get_json(&bin.url("/api/v1/status/storage"));
    assert_eq!(storage["data"]["downsampleAfter"][0]["intervalMs"], HOUR, "{storage}");
    let inspect = std::process::Command::new(env!("CARGO_BIN_EXE_saltdb"))
        .args(["inspect", "--url", &bin.url("")])
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&inspect.stdout);
    assert_eq!(table.lines().filter(|l| l.contains("sealed   1h ")).count(), 2, "{table}");
    let metrics = client().get(bin.url("/metrics")).send().unwrap().text().unwrap();
    assert!(metrics.contains("saltdb_windows_by_resolution{keeps=\"1h\"} 2"), "{metrics}");
    assert!(!metrics.contains("saltdb_windows_by_resolution{keeps=\"raw\"}"), "{metrics}");
    assert!(metrics.contains("saltdb_window_disk_bytes{keeps=\"1h\"}"), "{metrics}");
    let kept_bytes = bytes(&windows(&bin));
    assert!(kept_bytes * 2 < raw_bytes, "{kept_bytes} bytes downsampled against {raw_bytes} raw with tiers");
    bin.terminate();
}

/// `kill -9` at any point of downsampling: each window is then raw (with its tiers) or
/// downsampled, never half (its 1h points always equal the raw samples'), and the next start
/// finishes the job.
#[test]
fn kill_9_while_downsampling_leaves_each_window_raw_or_downsampled() {
    let dir = tempfile::tempdir().unwrap();
    let now = chrono::Utc::now().timestamp_millis();
    let t0 = now - now % DAY - 4 * DAY;
    let common = ["--retention", "0", "--ooo-grace", "0"];
    let bin = Binary::spawn(
        dir.path(),
        &[&common[..], &["--maintenance-interval", "200ms", "--downsample", "5m,1h"]].concat(),
    );
    for day in 0..2 {
        let (body, _) = dataset(300, 2880, t0 + day * DAY, &format!("d{day}"));
        assert_eq!(import(&bin.url(""), body), (204, String::new()));
    }
    let sealed = |bin: &Binary| {
        let w = get_json(&bin.url("/api/v1/status/windows"))["data"].as_array().unwrap().clone();
        w.len() == 2 && w.iter().all(|w| w["state"] == "sealed")
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !sealed(&bin) {
        assert!(std::time::Instant::now() < deadline, "never sealed");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    bin.terminate();
    let range = (t0 + HOUR, t0 + 2 * DAY);
    let want = {
        let s = open(dir.path(), &[FIVE_MIN, HOUR]);
        reference(&s, range, HOUR)
    };
    let raw_per_day = 300 * 2880;
    let fast = [&common[..], &["--maintenance-interval", "100ms", "--downsample", "5m,1d:1h"]].concat();
    let (mut cut_short, mut done) = (0, 0);
    for delay_ms in [0, 30, 100, 250, 600] {
        let log = dir.path().join(format!("kill-{delay_ms}.log"));
        let bin = Binary::spawn_logged(dir.path(), &fast, "saltdb=debug", &log);
        // Killed a little after a pass starts (or once none is left to start).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while !std::fs::read_to_string(&log).unwrap_or_default().contains("downsampling window") && done < 2 {
            assert!(std::time::Instant::now() < deadline, "no downsampling started");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        std::thread::sleep(std::time::Duration::from_millis(delay_ms));
        bin.kill9();
        let log = std::fs::read_to_string(&log).unwrap();
        cut_short +=
            log.matches("downsampling window").count().saturating_sub(log.matches("downsampling finished").count());
        let s = open(dir.path(), &[FIVE_MIN, HOUR]);
        agree(points(&s, range, HOUR), &want, &format!("after a kill {delay_ms} ms in")).unwrap();
        for (day, w) in s.window_status().unwrap().iter().enumerate() {
            let raw = raw_samples(&s, w.start_ms, w.end_ms - 1);
            match w.downsampled_ms {
                Some(_) => assert_eq!(raw, 0, "day {day} downsampled with raw samples left"),
                None => assert_eq!(raw, raw_per_day, "day {day} raw with samples missing"),
            }
        }
        done = s.window_status().unwrap().iter().filter(|w| w.downsampled_ms.is_some()).count();
    }
    eprintln!("{cut_short} of 5 kills landed inside a downsampling pass; {done} of 2 windows downsampled");
    assert!(cut_short > 0, "no kill landed inside a downsampling pass");
    let bin = Binary::spawn(dir.path(), &fast);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let w = get_json(&bin.url("/api/v1/status/windows"))["data"].clone();
        if w.as_array().unwrap().iter().all(|w| w["downsampledMs"] == HOUR) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "never downsampled: {w}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    bin.terminate();
    let s = open(dir.path(), &[FIVE_MIN, HOUR]);
    agree(points(&s, range, HOUR), &want, "at the end").unwrap();
}
