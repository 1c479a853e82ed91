//! Exemplars (issue 17, item 3): stored with the write that carried them (remote-write 1.0 and
//! 2.0), bounded by `--max-exemplars`, kept across a restart and a crash, and answered by
//! `/api/v1/query_exemplars` over HTTP in Prometheus' shape.

use saltdb::labels::Labels;
use saltdb::matcher::{MatchOp, Matcher};
use saltdb::sample::{Exemplar, PackedBatch, Sample};
use saltdb::storage::Storage;

use saltdb::remote::proto::{self, v2};
use saltdb::remote::snappy_body;

use crate::common::*;
use crate::remote_write::{metric_value, metrics};

const T0: i64 = 1_700_000_000_000;

fn trace(id: &str) -> Labels {
    Labels::from_pairs([("trace_id", id)]).unwrap()
}

/// A batch of series `name{job=...}` with one sample and the given exemplars each.
fn batch(series: &[(&str, &str, Vec<Exemplar>)]) -> PackedBatch {
    let mut b = PackedBatch::default();
    for (name, job, exemplars) in series {
        b.push_label("__name__", name);
        b.push_label("job", job);
        b.push_sample(Sample::new(T0, 1.0));
        for e in exemplars {
            b.push_exemplar(e.clone());
        }
        b.finish_series();
    }
    b
}

fn ex(t: i64, v: f64, id: &str) -> Exemplar {
    Exemplar { labels: trace(id), value: v, timestamp_ms: t }
}

fn job(j: &str) -> Vec<Vec<Matcher>> {
    vec![vec![Matcher::new(MatchOp::Equal, "job", j).unwrap()]]
}

#[test]
fn exemplars_are_stored_bounded_and_kept_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = storage_config(dir.path());
    config.max_exemplars = 5;
    let s = Storage::open(config.clone()).unwrap();
    let first = s
        .write_packed(batch(&[
            ("req", "a", vec![ex(T0, 1.5, "t1"), ex(T0 + 10, 2.5, "t2")]),
            ("req", "b", vec![ex(T0 + 5, 3.0, "t3")]),
        ]))
        .unwrap();
    assert_eq!(first.exemplars, 3);
    // Out of order and a duplicate: dropped, as Prometheus drops them.
    let second = s.write_packed(batch(&[("req", "a", vec![ex(T0 + 1, 9.0, "late"), ex(T0 + 10, 2.5, "t2")])])).unwrap();
    assert_eq!(second.exemplars, 0);
    let a = s.exemplars(&job("a"), 0, i64::MAX).unwrap();
    assert_eq!(a.len(), 1);
    assert_eq!(a[0].exemplars, vec![ex(T0, 1.5, "t1"), ex(T0 + 10, 2.5, "t2")]);
    assert_eq!(s.exemplars(&job("a"), T0 + 1, T0 + 9).unwrap(), vec![], "nothing of a in the range");
    // Past the bound of 5, the oldest go.
    s.write_packed(batch(&[(
        "req",
        "b",
        vec![ex(T0 + 20, 1.0, "t4"), ex(T0 + 21, 1.0, "t5"), ex(T0 + 22, 1.0, "t6")],
    )]))
    .unwrap();
    assert_eq!(s.exemplar_figures(), (5, 5));
    let a = s.exemplars(&job("a"), 0, i64::MAX).unwrap();
    assert_eq!(a[0].exemplars, vec![ex(T0 + 10, 2.5, "t2")], "t1 was the oldest");
    drop(s);

    let s = Storage::open(config.clone()).unwrap();
    assert_eq!(s.exemplar_figures(), (5, 5));
    let all = s.exemplars(&[vec![Matcher::new(MatchOp::Equal, "__name__", "req").unwrap()]], 0, i64::MAX).unwrap();
    let ids: Vec<Vec<String>> = all
        .iter()
        .map(|x| x.exemplars.iter().map(|e| e.labels.get("trace_id").unwrap_or("").to_owned()).collect())
        .collect();
    assert_eq!(ids, vec![vec!["t2"], vec!["t3", "t4", "t5", "t6"]]);
    drop(s);

    // A lower bound at the next start drops the oldest rows for good.
    config.max_exemplars = 2;
    drop(Storage::open(config.clone()).unwrap());
    config.max_exemplars = 100;
    let s = Storage::open(config).unwrap();
    assert_eq!(s.exemplar_figures(), (2, 100));
}

#[test]
#[ignore = "run by exemplars_survive_a_crash in a child process"]
fn child_writes_exemplars_then_aborts() {
    let Ok(dir) = std::env::var("SALTDB_TEST_EXEMPLAR_CRASH_DIR") else { return };
    let s = Storage::open(storage_config(std::path::Path::new(&dir))).unwrap();
    for i in 0..20 {
        s.write_packed(batch(&[("crash", "c", vec![ex(T0 + i, i as f64, &format!("t{i}"))])])).unwrap();
    }
    std::process::abort();
}

#[test]
fn exemplars_survive_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "exemplars::child_writes_exemplars_then_aborts", "--ignored", "--nocapture"])
        .env("SALTDB_TEST_EXEMPLAR_CRASH_DIR", dir.path())
        .status()
        .unwrap();
    assert!(!status.success(), "the child must abort: {status:?}");
    let s = Storage::open(storage_config(dir.path())).unwrap();
    let found = s.exemplars(&job("c"), 0, i64::MAX).unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].exemplars, (0..20).map(|i| ex(T0 + i, i as f64, &format!("t{i}"))).collect::<Vec<_>>());
}

#[test]
fn query_exemplars_answers_over_http_like_prometheus() {
    let dir = tempfile::tempdir().unwrap();
    {
        let s = Storage::open(storage_config(dir.path())).unwrap();
        s.write_packed(batch(&[
            ("http_request_duration_seconds_bucket", "api", vec![ex(T0 + 479, 0.25, "abc"), ex(T0 + 1000, 6.0, "def")]),
            ("other", "api", vec![ex(T0, 1.0, "zzz")]),
        ]))
        .unwrap();
    }
    let bin = Binary::spawn(dir.path(), &["--retention", "0"]);
    let q = "histogram_quantile(0.9, sum by (le) (rate(http_request_duration_seconds_bucket[5m])))";
    let url = |q: &str, start: i64, end: i64| {
        let mut u = reqwest::Url::parse(&bin.url("/api/v1/query_exemplars")).unwrap();
        u.query_pairs_mut()
            .append_pair("query", q)
            .append_pair("start", &start.to_string())
            .append_pair("end", &end.to_string());
        u.to_string()
    };
    let got = get_json(&url(q, T0 / 1000 - 60, T0 / 1000 + 60));
    assert_eq!(
        got,
        serde_json::json!({"status": "success", "data": [{
            "seriesLabels": {"__name__": "http_request_duration_seconds_bucket", "job": "api"},
            "exemplars": [
                {"labels": {"trace_id": "abc"}, "value": "0.25", "timestamp": 1_700_000_000.479},
                {"labels": {"trace_id": "def"}, "value": "6", "timestamp": 1_700_000_001.0},
            ],
        }]})
    );
    // Outside the range: none.
    let none = get_json(&url(q, T0 / 1000 + 2, T0 / 1000 + 60));
    assert_eq!(none["data"], serde_json::json!([]));
    // A query that does not parse is a 400 naming the parameter.
    let (status, body) = {
        let r = client().get(url("sum(", 0, 1)).send().unwrap();
        (r.status().as_u16(), r.text().unwrap())
    };
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("invalid parameter \\\"query\\\""), "{body}");
    bin.terminate();
}

#[test]
fn remote_write_exemplars_are_stored_and_counted_as_prometheus_does() {
    let dir = tempfile::tempdir().unwrap();
    let server = InProcess::start(storage_config(dir.path()));
    let base = server.url("");
    let t0 = recent_ms() - 600_000;
    // 2.0: symbols, one series with three exemplars: valid, labels over 128 characters
    // (dropped), and one older than the first (out of order: dropped by storage).
    let req = three_exemplars(t0);
    let (status, h, text) = post(&format!("{base}/api/v1/write"), &V2_HEADERS, snappy_body(&req));
    assert_eq!((status, text.as_str()), (204, ""));
    assert_eq!(h["x-prometheus-remote-write-samples-written"], "1");
    assert_eq!(h["x-prometheus-remote-write-exemplars-written"], "1");
    // 1.0: an exemplar for the same series, newer.
    let body = snappy_body(&proto::WriteRequest { timeseries: vec![newer_exemplar(t0)], metadata: vec![] });
    let (status, _, text) = post(&format!("{base}/api/v1/write"), &V1_HEADERS, body);
    assert_eq!((status, text.as_str()), (204, ""));

    let got = exemplars_around(&base, t0);
    assert_a1_and_c3_kept(&got);
    let m = metrics(&base);
    assert_eq!(metric_value(&m, r#"saltdb_samples_rejected_total{protocol="remote_write_v2",reason="exemplar"}"#), 2.0);
}

/// A remote-write 2.0 request of one series (`rpc_seconds{job="v2"}`, one sample at `t0`) with
/// three exemplars: a valid one (`trace_id="a1"`), one with labels over 128 characters (dropped)
/// and one older than the first (out of order: dropped by storage).
pub fn three_exemplars(t0: i64) -> v2::Request {
    let long = "x".repeat(130);
    let symbols: Vec<String> =
        ["", "__name__", "rpc_seconds", "job", "v2", "trace_id", "a1", "b2", &long].map(String::from).to_vec();
    v2::Request {
        symbols,
        timeseries: vec![v2::TimeSeries {
            labels_refs: vec![1, 2, 3, 4],
            samples: vec![proto::Sample { value: 1.0, timestamp: t0 }],
            exemplars: vec![
                v2::Exemplar { labels_refs: vec![5, 6], value: 0.25, timestamp: t0 },
                v2::Exemplar { labels_refs: vec![5, 8], value: 0.5, timestamp: t0 + 1 },
                v2::Exemplar { labels_refs: vec![5, 7], value: 0.75, timestamp: t0 - 5 },
            ],
            ..Default::default()
        }],
    }
}

/// The same series in remote-write 1.0, 15 s later, with a newer exemplar (`trace_id="c3"`).
pub fn newer_exemplar(t0: i64) -> proto::TimeSeries {
    let mut ts = series(&[("__name__", "rpc_seconds"), ("job", "v2")], &[(t0 + 15_000, 2.0)]);
    ts.exemplars = vec![proto::Exemplar {
        labels: vec![proto::Label { name: "trace_id".into(), value: "c3".into() }],
        value: 1.5,
        timestamp: t0 + 15_000,
    }];
    ts
}

/// `/api/v1/query_exemplars` of `rate(rpc_seconds[5m])` a minute either side of `t0`.
pub fn exemplars_around(base: &str, t0: i64) -> serde_json::Value {
    let mut u = reqwest::Url::parse(&format!("{base}/api/v1/query_exemplars")).unwrap();
    u.query_pairs_mut()
        .append_pair("query", "rate(rpc_seconds[5m])")
        .append_pair("start", &(t0 / 1000 - 60).to_string())
        .append_pair("end", &(t0 / 1000 + 60).to_string());
    get_json(u.as_str())
}

/// What [`exemplars_around`] answers once [`three_exemplars`] and [`newer_exemplar`] were
/// written: the valid exemplar of the first (`a1`) and the newer one (`c3`, 1.5), in time order,
/// of the series `job="v2"`.
pub fn assert_a1_and_c3_kept(got: &serde_json::Value) {
    let exemplars = &got["data"][0]["exemplars"];
    let traces: Vec<&str> =
        exemplars.as_array().unwrap().iter().map(|e| e["labels"]["trace_id"].as_str().unwrap()).collect();
    assert_eq!(traces, ["a1", "c3"], "{got}");
    assert_eq!(got["data"][0]["seriesLabels"]["job"], "v2");
    assert_eq!(exemplars[1]["value"], "1.5");
}

/// `/api/v1/query_exemplars` of `selector` from two hours before `now_ms` to a minute after:
/// the `trace_id` of each exemplar of the first series, in the order answered.
pub fn traces_of(base: &str, selector: &str, now_ms: i64) -> Vec<String> {
    let mut u = reqwest::Url::parse(&format!("{base}/api/v1/query_exemplars")).unwrap();
    u.query_pairs_mut()
        .append_pair("query", selector)
        .append_pair("start", &(now_ms / 1000 - 7200).to_string())
        .append_pair("end", &(now_ms / 1000 + 60).to_string());
    let got = get_json(u.as_str());
    assert_eq!(got["status"], "success", "{got}");
    let data = got["data"].as_array().unwrap();
    assert!(data.len() <= 1, "one series expected: {got}");
    data.iter()
        .flat_map(|s| s["exemplars"].as_array().unwrap().iter())
        .map(|e| e["labels"]["trace_id"].as_str().unwrap().to_owned())
        .collect()
}

/// Remote-write 2.0 entries of one series `name`, one per `(timestamp, trace)`: each with one
/// float sample (or, with `histogram`, one native histogram sample) and one exemplar at that
/// time, in the order given. Symbols: `trace` ids follow the fixed ones.
fn spread_v2(name: &str, points: &[(i64, &str)], histogram: bool) -> v2::Request {
    let mut symbols: Vec<String> = ["", "__name__", name, "trace_id"].map(String::from).to_vec();
    let timeseries = points
        .iter()
        .map(|&(t, trace)| {
            symbols.push(trace.to_owned());
            let exemplar = v2::Exemplar { labels_refs: vec![3, symbols.len() as u32 - 1], value: 0.5, timestamp: t };
            let mut ts = v2::TimeSeries { labels_refs: vec![1, 2], exemplars: vec![exemplar], ..Default::default() };
            if histogram {
                ts.histograms = vec![proto::Histogram {
                    count: Some(proto::histogram::Count::CountInt(1)),
                    zero_count: Some(proto::histogram::ZeroCount::ZeroCountInt(1)),
                    sum: 0.5,
                    timestamp: t,
                    ..Default::default()
                }];
            } else {
                ts.samples = vec![proto::Sample { value: 1.0, timestamp: t }];
            }
            ts
        })
        .collect();
    v2::Request { symbols, timeseries }
}

fn written(h: &reqwest::header::HeaderMap) -> [String; 3] {
    ["samples", "histograms", "exemplars"]
        .map(|k| h[format!("x-prometheus-remote-write-{k}-written").as_str()].to_str().unwrap().to_owned())
}

/// One series spread over several `TimeSeries` entries of a request (as senders batch it):
/// every entry's samples and exemplars are stored and counted, in 2.0 (floats and native
/// histograms) and 1.0; an exemplar of a later entry older than the series' newest, or a
/// duplicate of it, is dropped and not counted, without failing the request. Written through
/// `write_base`, read through `read_base` (another node of the same backend, or the same).
pub fn assert_spread_entries_are_stored_and_counted(write_base: &str, read_base: &str) {
    let write = format!("{write_base}/api/v1/write");
    let now = chrono::Utc::now().timestamp_millis();
    let times = [now - 3_600_000, now - 60_000, now];

    // 2.0, float samples.
    let points = [(times[0], "a"), (times[1], "b"), (times[2], "c")];
    let (status, h, text) = post(&write, &V2_HEADERS, snappy_body(&spread_v2("latency_hist", &points, false)));
    assert_eq!((status, text.as_str()), (204, ""));
    assert_eq!(written(&h), ["3", "0", "3"]);
    assert_eq!(traces_of(read_base, "latency_hist", now), ["a", "b", "c"]);

    // 2.0, native histogram samples.
    let (status, h, text) = post(&write, &V2_HEADERS, snappy_body(&spread_v2("latency_native", &points, true)));
    assert_eq!((status, text.as_str()), (204, ""));
    assert_eq!(written(&h), ["0", "3", "3"]);
    assert_eq!(traces_of(read_base, "latency_native", now), ["a", "b", "c"]);

    // 1.0: the same spread (1.0 answers carry no counts).
    let timeseries = points
        .iter()
        .map(|&(t, trace)| {
            let mut ts = series(&[("__name__", "latency_v1")], &[(t, 1.0)]);
            ts.exemplars = vec![proto::Exemplar {
                labels: vec![proto::Label { name: "trace_id".into(), value: trace.into() }],
                value: 0.5,
                timestamp: t,
            }];
            ts
        })
        .collect();
    let (status, _, text) =
        post(&write, &V1_HEADERS, snappy_body(&proto::WriteRequest { timeseries, metadata: vec![] }));
    assert_eq!((status, text.as_str()), (204, ""));
    assert_eq!(traces_of(read_base, "latency_v1", now), ["a", "b", "c"]);

    // Out of order in a later entry: older than the newest of an earlier entry.
    let points = [(times[0], "d"), (times[2], "e"), (times[1], "late")];
    let (status, h, text) = post(&write, &V2_HEADERS, snappy_body(&spread_v2("latency_ooo", &points, false)));
    assert_eq!((status, text.as_str()), (204, ""));
    assert_eq!(written(&h), ["3", "0", "2"]);
    assert_eq!(traces_of(read_base, "latency_ooo", now), ["d", "e"]);

    // A duplicate of the newest (same labels, value and time) in a later entry; its sample
    // repeats the earlier entry's and is written (the later of equal samples wins).
    let points = [(times[0], "f"), (times[1], "g"), (times[1], "g")];
    let (status, h, text) = post(&write, &V2_HEADERS, snappy_body(&spread_v2("latency_dup", &points, false)));
    assert_eq!((status, text.as_str()), (204, ""));
    assert_eq!(written(&h), ["3", "0", "2"]);
    assert_eq!(traces_of(read_base, "latency_dup", now), ["f", "g"]);
}

#[test]
fn exemplars_of_one_series_spread_over_entries_are_all_stored_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let server = InProcess::start(storage_config(dir.path()));
    let base = server.url("");
    assert_spread_entries_are_stored_and_counted(&base, &base);
    server.stop();
}
