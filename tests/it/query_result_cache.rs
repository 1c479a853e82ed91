//! The query result cache: with it on, every range query answers what it answers with it off,
//! across late writes into sealed windows, deletions and re-seals; a repeat evaluates only the
//! steps it does not hold; `nocache=1` skips it.

use proptest::prelude::*;
use saltdb::labels::Labels;
use saltdb::matcher::{MatchOp, Matcher};
use saltdb::promql::result_cache::{Lookup, RangeRequest, ResultCache};
use saltdb::promql::{Engine, QueryResult, Value};
use saltdb::sample::{Sample, SeriesSamples, WriteBatch};
use saltdb::storage::{Querier, ReadLimits, Storage, StorageConfig};

use crate::common::*;

const MIN: i64 = 60_000;
const HOUR: i64 = 3_600_000;
/// An hour start in 2023.
const T0: i64 = 19_600 * 86_400_000;
/// Hours of data written at first; the first `SEALED` are sealed.
const HOURS: i64 = 6;
const SEALED: i64 = 4;

const QUERIES: [&str; 8] = [
    "sum(rate(m0[5m]))",
    "m1",
    "max_over_time(m0[20m])",
    "sum by (host) (increase(m1[10m]))",
    "m0 offset -10m",
    "avg_over_time(m1[30m:5m])",
    "quantile(0.9, m0 - m1)",
    "count(m0 > 50) or vector(0)",
];

fn labels(metric: usize, host: usize) -> Labels {
    Labels::from_pairs([("__name__", format!("m{metric}").as_str()), ("host", format!("h{host}").as_str())]).unwrap()
}

fn write(s: &Storage, metric: usize, host: usize, points: &[(i64, f64)]) {
    let samples = points.iter().map(|&(t, v)| Sample::new(t, v)).collect();
    s.write(WriteBatch {
        series: vec![SeriesSamples { labels: labels(metric, host), samples, histograms: Vec::new() }],
    })
    .unwrap();
}

/// Series and label sets with the bits of every value: NaN equals NaN here.
fn render(r: &QueryResult) -> Vec<(String, Vec<(i64, u64)>)> {
    let Value::Matrix(m) = &r.value else { panic!("not a matrix: {:?}", r.value) };
    m.iter()
        .map(|s| (s.labels.to_string(), s.samples.iter().map(|p| (p.timestamp_ms, p.value.to_bits())).collect()))
        .collect()
}

fn notes(r: &QueryResult) -> std::collections::BTreeSet<String> {
    r.annotations.iter().map(ToString::to_string).collect()
}

#[derive(Clone, Debug)]
enum Op {
    /// Query `QUERIES[q]` from `T0 + start` over `span` at `step` (asked after every op from here on).
    Query { q: usize, start: i64, span: i64, step: i64 },
    /// A sample at `T0 + at` (late when in a sealed window).
    Write { metric: usize, host: usize, at: i64, value: f64 },
    /// Deletes a series' samples in `[T0 + from, T0 + from + len]`.
    Delete { metric: usize, host: usize, from: i64, len: i64 },
    /// Seals (or re-seals) hour `hour`.
    Seal { hour: i64 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..QUERIES.len(), 0..HOURS * 60, 1..4 * 60i64, prop_oneof![Just(MIN), Just(5 * MIN), Just(7 * MIN), Just(HOUR)])
            .prop_map(|(q, start, span, step)| Op::Query { q, start: start * MIN + 30_000 * (start % 2), span: span * MIN, step }),
        2 => (0..2usize, 0..3usize, 0..HOURS * 60, -1_000i64..1_000)
            .prop_map(|(metric, host, at, v)| Op::Write { metric, host, at: at * MIN + 7_000, value: v as f64 / 10.0 }),
        1 => (0..2usize, 0..3usize, 0..HOURS * 60, 0..90i64)
            .prop_map(|(metric, host, from, len)| Op::Delete { metric, host, from: from * MIN, len: len * MIN }),
        1 => (0..HOURS).prop_map(|hour| Op::Seal { hour }),
    ]
}

fn open(dir: &std::path::Path) -> Storage {
    let mut c: StorageConfig = storage_config(dir);
    c.window_ms = HOUR;
    c.max_future_ms = None;
    let s = Storage::open(c).unwrap();
    for metric in 0..2 {
        for host in 0..3 {
            // Every minute, a counter-like ramp with a reset and a gap.
            let points: Vec<(i64, f64)> = (0..HOURS * 60)
                .filter(|i| (i + host as i64 * 17) % 97 > 3)
                .map(|i| (T0 + i * MIN, ((i * (metric as i64 + 1) + host as i64 * 5) % 240) as f64))
                .collect();
            write(&s, metric, host, &points);
        }
    }
    for hour in 0..SEALED {
        s.seal_window(T0 + hour * HOUR).unwrap();
    }
    s
}

fn cached(cache: &ResultCache, s: &Storage, r: &RangeRequest<'_>) -> (QueryResult, Lookup) {
    let engine = Engine::default();
    let source = s.querier(ReadLimits::none());
    let immutable = source.immutable_before();
    let mut eval = |a: i64, b: i64| engine.range(&source, r.query, a, b, r.step_ms);
    let (res, outcome) = cache.range(r, immutable, &mut eval).unwrap();
    (res, outcome.lookup)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(16))]

    /// Every answer through the cache equals a fresh evaluation's, whatever was written late,
    /// deleted or sealed in between: after each change every query asked so far is asked again.
    #[test]
    fn answers_equal_fresh_evaluations(ops in proptest::collection::vec(op(), 4..24)) {
        let dir = tempfile::tempdir().unwrap();
        let s = open(dir.path());
        let cache = ResultCache::new(64 << 20);
        let mut asked: Vec<(usize, i64, i64, i64)> = Vec::new();
        for op in ops {
            match op {
                Op::Query { q, start, span, step } => asked.push((q, start, span, step)),
                Op::Write { metric, host, at, value } => write(&s, metric, host, &[(T0 + at, value)]),
                Op::Delete { metric, host, from, len } => {
                    let m = |name: &str, value: String| Matcher::new(MatchOp::Equal, name, &value).unwrap();
                    let matchers = [m("__name__", format!("m{metric}")), m("host", format!("h{host}"))];
                    s.delete_series(&matchers, T0 + from, T0 + from + len).unwrap();
                }
                Op::Seal { hour } => {
                    s.seal_window(T0 + hour * HOUR).unwrap();
                }
            }
            for &(q, start, span, step) in &asked {
                let r = RangeRequest {
                    scope: "",
                    query: QUERIES[q],
                    start_ms: T0 + start,
                    end_ms: T0 + start + span,
                    step_ms: step,
                    lookback_ms: 300_000,
                };
                let fresh = Engine::default()
                    .range(&s.querier(ReadLimits::none()), r.query, r.start_ms, r.end_ms, r.step_ms)
                    .unwrap();
                let got = cached(&cache, &s, &r).0;
                prop_assert_eq!(render(&got), render(&fresh), "{:?}", r);
                prop_assert_eq!(notes(&got), notes(&fresh), "{:?}", r);
            }
        }
    }
}

/// A repeated query over sealed windows is answered from the cache; a late sample changes the
/// next answer; `nocache=1` and `stats` skip the cache; `/metrics` counts the hits.
#[test]
fn repeats_hit_and_late_samples_show() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = storage_config(dir.path());
    config.window_ms = HOUR;
    config.max_future_ms = None;
    let server = InProcess::start(config);
    let base = server.url("");
    let mut lines = String::new();
    for host in ["a", "b", "c"] {
        let times: Vec<i64> = (0..180).map(|i| T0 + i * MIN).collect();
        let values: Vec<f64> = (0..180).map(|i| f64::from(i % 50)).collect();
        lines.push_str(
            &serde_json::json!({"metric": {"__name__": "load", "host": host}, "values": values, "timestamps": times})
                .to_string(),
        );
        lines.push('\n');
    }
    assert_eq!(import(&base, lines).0, 204);
    let storage = server.server.as_ref().and_then(|s| s.storage()).expect("embedded storage");
    for hour in 0..3 {
        storage.seal_window(T0 + hour * HOUR).unwrap();
    }
    let ask = |extra: &[(&str, &str)]| {
        let mut form = vec![
            ("query", "sum(max_over_time(load[10m]))".to_owned()),
            ("start", (T0 / 1000 + 600).to_string()),
            ("end", (T0 / 1000 + 3 * 3600 + 1800).to_string()),
            ("step", "300".to_owned()),
        ];
        form.extend(extra.iter().map(|(k, v)| (*k, (*v).to_owned())));
        let resp = client().post(format!("{base}/api/v1/query_range")).form(&form).send().unwrap();
        assert_eq!(resp.status().as_u16(), 200);
        let told = resp.headers().get("x-saltdb-result-cache").map(|v| v.to_str().unwrap().to_owned());
        let body: serde_json::Value = serde_json::from_str(&resp.text().unwrap()).unwrap();
        (told.unwrap_or_default(), body["data"]["result"].clone())
    };
    // Every step reads data older than five minutes.
    let (told, first) = ask(&[]);
    assert_eq!(told, "miss; cached=0; evaluated=41");
    let (told, again) = ask(&[]);
    assert_eq!(told, "hit; cached=41; evaluated=0");
    assert_eq!(again, first);
    let (told, bypassed) = ask(&[("nocache", "1")]);
    assert_eq!((told.as_str(), &bypassed), ("bypass", &first));
    assert_eq!(ask(&[("stats", "all")]).0, "bypass");
    let metrics = client().get(format!("{base}/metrics")).send().unwrap().text().unwrap();
    assert!(metrics.contains("saltdb_query_result_cache_requests_total{outcome=\"hit\"} 1"), "{metrics}");
    assert!(metrics.contains("saltdb_query_result_cache_steps_total{source=\"cache\"} 41"), "{metrics}");

    // A late sample into the first sealed hour.
    let late = serde_json::json!({"metric": {"__name__": "load", "host": "a"}, "values": [1000.0], "timestamps": [T0 + 30 * MIN + 1]});
    assert_eq!(import(&base, late.to_string()).0, 204);
    let (told, after) = ask(&[]);
    assert_eq!(told, "miss; cached=0; evaluated=41");
    assert_ne!(after, first);
    assert_eq!(after, ask(&[("nocache", "true")]).1);
    assert_eq!(ask(&[]).0, "hit; cached=41; evaluated=0");
    server.stop();
}

/// The storage's generation moves with every change below the boundary (a late sample, a
/// deletion, a re-seal, a retention drop) and stays put for fresh writes and first seals; the
/// boundary (the later of the sealed windows' end and five minutes ago) only moves forward.
#[test]
fn the_generation_moves_with_changes_to_the_settled_past() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = storage_config(dir.path());
    c.window_ms = HOUR;
    c.retention_ms = Some(3 * 86_400_000);
    let s = Storage::open(c).unwrap();
    let now = saltdb::storage::now_ms();
    let first = (now - 2 * 86_400_000) / HOUR * HOUR;
    let state = || s.querier(ReadLimits::none()).immutable_before().unwrap();
    let points: Vec<(i64, f64)> = (0..5 * 60).map(|i| (first + i * MIN, i as f64)).collect();
    write(&s, 0, 0, &points);
    let (boundary, g) = state();
    assert!((now - 5 * MIN..=saltdb::storage::now_ms() - 5 * MIN).contains(&boundary), "{boundary}");
    // Fresh samples and first seals change nothing below it.
    write(&s, 0, 0, &[(saltdb::storage::now_ms(), 1.0)]);
    for hour in 0..3 {
        s.seal_window(first + hour * HOUR).unwrap();
    }
    let (later, g0) = state();
    assert!(later >= boundary);
    assert_eq!(g0, g);
    // A late sample below it.
    write(&s, 0, 1, &[(first + HOUR + 1, 1.0)]);
    let (_, g1) = state();
    assert!(g1 > g0);
    // Its re-seal.
    s.seal_window(first + HOUR).unwrap();
    let (_, g2) = state();
    assert!(g2 > g1);
    // A deletion.
    let m = Matcher::new(MatchOp::Equal, "__name__", "m0").unwrap();
    s.delete_series(&[m], first + 10 * MIN, first + 20 * MIN).unwrap();
    let (_, g3) = state();
    assert!(g3 > g2);
    // Retention drops the first hour.
    assert_eq!(s.enforce_retention(first + HOUR + 3 * 86_400_000).unwrap(), vec![first]);
    let (_, g4) = state();
    assert!(g4 > g3);
}
