//! `/api/v1/status/tsdb` and `/api/v1/status/flags` next to the real Prometheus 2.42 and, for
//! VictoriaMetrics' extensions (`topN`, `date`, `match[]`, `focusLabel`), VictoriaMetrics 1.79,
//! all three fed the same remote-write request. Compared field by field: Prometheus' fields by
//! shape and value except where saltdb reports something else by design (`chunkCount`,
//! `minTime`/`maxTime`: see the README), VictoriaMetrics' fields exactly. Ties in Prometheus'
//! top-10 lists are in no defined order, so there names are compared only for counts that are
//! unique in the list.

use std::collections::BTreeMap;

use saltdb::remote::proto;
use saltdb::remote::snappy_body;
use serde_json::Value;

use crate::common::*;
use crate::peers::{self, Prometheus, VictoriaMetrics};

/// Series of three metrics with several labels, distinct counts where it helps, and samples
/// over the last 2.5 minutes (in time order, within Prometheus' head).
fn request() -> Vec<u8> {
    let now = chrono::Utc::now().timestamp_millis();
    let end = now - now % 15_000;
    let samples: Vec<(i64, f64)> = (0..10).map(|i| (end - (9 - i) * 15_000, i as f64)).collect();
    let mut timeseries = Vec::new();
    let mut add = |labels: Vec<(&str, String)>| {
        let mut labels = labels;
        labels.sort();
        let refs: Vec<(&str, &str)> = labels.iter().map(|(n, v)| (*n, v.as_str())).collect();
        timeseries.push(series(&refs, &samples));
    };
    for i in 0..12 {
        let job = if i < 7 { "api" } else { "batch" };
        add(vec![
            ("__name__", "http_requests_total".into()),
            ("job", job.into()),
            ("instance", format!("host-{i}")),
            ("code", ["200", "500", "404"][i % 3].into()),
        ]);
    }
    for i in 0..5 {
        add(vec![
            ("__name__", "process_cpu_seconds_total".into()),
            ("job", "api".into()),
            ("instance", format!("host-{i}")),
        ]);
    }
    for zone in ["eu", "us"] {
        add(vec![("__name__", "up".into()), ("job", "node".into()), ("zone", zone.into())]);
    }
    snappy_body(&proto::WriteRequest { timeseries, metadata: vec![] })
}

fn write(base: &str, body: &[u8]) {
    let (status, _, text) = post(&format!("{base}/api/v1/write"), &V1_HEADERS, body.to_vec());
    assert!((200..300).contains(&status), "{base}: {status} {text}");
}

fn tsdb(base: &str, params: &[(&str, &str)]) -> Value {
    let resp = client().get(format!("{base}/api/v1/status/tsdb")).query(params).send().expect("request");
    assert_eq!(resp.status().as_u16(), 200, "{base}");
    let body: Value = serde_json::from_str(&resp.text().unwrap()).expect("JSON");
    assert_eq!(body["status"], "success");
    body["data"].clone()
}

/// `[{name, value}]` as pairs, in order.
fn stats(v: &Value) -> Vec<(String, u64)> {
    v.as_array()
        .unwrap_or_else(|| panic!("a list of stats, got {v}"))
        .iter()
        .map(|s| (s["name"].as_str().expect("name").to_owned(), s["value"].as_u64().expect("value")))
        .collect()
}

/// Same counts in the same (descending) order, and the same name wherever a count is unique.
fn assert_same_top(field: &str, ours: &[(String, u64)], theirs: &[(String, u64)]) {
    let counts = |l: &[(String, u64)]| l.iter().map(|(_, v)| *v).collect::<Vec<_>>();
    assert_eq!(counts(ours), counts(theirs), "{field}: counts\n ours {ours:?}\n theirs {theirs:?}");
    let mut seen: BTreeMap<u64, usize> = BTreeMap::new();
    for (_, v) in theirs {
        *seen.entry(*v).or_default() += 1;
    }
    for ((a, v), (b, _)) in ours.iter().zip(theirs) {
        if seen[v] == 1 {
            assert_eq!(a, b, "{field}: the entry counting {v}");
        }
    }
}

#[test]
fn tsdb_status_matches_prometheus_and_victoria_metrics() {
    const TEST: &str = "tsdb_status_matches_prometheus_and_victoria_metrics";
    if !peers::available("prometheus", TEST) || !peers::installed("victoria-metrics", TEST, "victoria-metrics") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let saltdb = InProcess::start(storage_config(&dir.path().join("saltdb")));
    let prometheus = Prometheus::start(dir.path(), "global:\n  scrape_interval: 1h\n");
    let vm = VictoriaMetrics::start(dir.path());
    let body = request();
    for base in [saltdb.url(""), prometheus.base.clone(), vm.base.clone()] {
        write(&base, &body);
    }
    vm.flush();
    let ours = tsdb(&saltdb.url(""), &[]);

    // Prometheus: its head is exactly the written series.
    let theirs = tsdb(&prometheus.base, &[]);
    assert_eq!(ours["headStats"]["numSeries"], theirs["headStats"]["numSeries"]);
    assert_eq!(ours["headStats"]["numLabelPairs"], theirs["headStats"]["numLabelPairs"]);
    for k in ["chunkCount", "minTime", "maxTime"] {
        assert!(ours["headStats"][k].is_i64() && theirs["headStats"][k].is_i64(), "headStats.{k} is a number in both");
    }
    for field in [
        "seriesCountByMetricName",
        "labelValueCountByLabelName",
        "memoryInBytesByLabelName",
        "seriesCountByLabelValuePair",
    ] {
        assert_same_top(field, &stats(&ours[field]), &stats(&theirs[field]));
    }

    // VictoriaMetrics: the same day, all series, and with topN, match[] and focusLabel.
    let today = chrono::Utc::now().format("%Y-%m-%d").to_string();
    let cases: [Vec<(&str, &str)>; 4] = [
        vec![("date", today.as_str())],
        vec![("date", today.as_str()), ("topN", "3"), ("match[]", r#"{job="api"}"#)],
        vec![
            ("date", today.as_str()),
            ("topN", "2"),
            ("match[]", "up"),
            ("match[]", r#"{code="500"}"#),
            ("focusLabel", "instance"),
        ],
        vec![("date", "2020-01-01")],
    ];
    let vm_fields = [
        "seriesCountByMetricName",
        "seriesCountByLabelName",
        "seriesCountByFocusLabelValue",
        "seriesCountByLabelValuePair",
        "labelValueCountByLabelName",
    ];
    for params in &cases {
        let ours = tsdb(&saltdb.url(""), params);
        let theirs = tsdb(&vm.base, params);
        assert_eq!(ours["totalSeries"], theirs["totalSeries"], "{params:?}");
        assert_eq!(ours["totalLabelValuePairs"], theirs["totalLabelValuePairs"], "{params:?}");
        for field in vm_fields {
            assert_eq!(stats(&ours[field]), stats(&theirs[field]), "{field} for {params:?}");
        }
    }
    // The data set is not degenerate: the filtered case counts some but not all series.
    let some = tsdb(&saltdb.url(""), &cases[1]);
    assert_eq!(some["totalSeries"], 12);
    saltdb.stop();
}

#[test]
fn flags_match_prometheus_shape() {
    const TEST: &str = "flags_match_prometheus_shape";
    if !peers::available("prometheus", TEST) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let saltdb = Binary::spawn(&dir.path().join("saltdb"), &["--retention", "15d", "--write-token", "s3cret"]);
    let prometheus = Prometheus::start(dir.path(), "global:\n  scrape_interval: 1h\n");
    let ours = get_json(&saltdb.url("/api/v1/status/flags"));
    let theirs = get_json(&format!("{}/api/v1/status/flags", prometheus.base));
    for v in [&ours, &theirs] {
        assert_eq!(v["status"], "success");
        let flags = v["data"].as_object().expect("an object of flags");
        assert!(flags.len() > 20, "{flags:?}");
        assert!(flags.values().all(Value::is_string), "every value is a string: {flags:?}");
    }
    // The one setting both were given: retention, as typed.
    assert_eq!(theirs["data"]["storage.tsdb.retention.time"], "15d");
    assert_eq!(ours["data"]["retention"], "15d");
    // Defaults are shown as well, secrets are not.
    assert_eq!(ours["data"]["window"], "1d");
    assert_eq!(ours["data"]["write-token"], "<set>");
    assert!(!ours.to_string().contains("s3cret"));
}

#[test]
fn tsdb_status_rejects_bad_parameters() {
    let dir = tempfile::tempdir().unwrap();
    let saltdb = InProcess::start(storage_config(dir.path()));
    for (query, needle) in [
        ("date=2024-13-01", r#"parameter "date""#),
        ("topN=0", r#"parameter "topN""#),
        ("topN=abc", r#"parameter "topN""#),
        ("match[]=%7B", r#"parameter "match[]""#),
        ("bogus=1", "unknown parameter"),
    ] {
        let resp = client().get(saltdb.url(&format!("/api/v1/status/tsdb?{query}"))).send().unwrap();
        assert_eq!(resp.status().as_u16(), 400, "{query}");
        let body: Value = serde_json::from_str(&resp.text().unwrap()).unwrap();
        assert_eq!(body["errorType"], "bad_data");
        assert!(body["error"].as_str().unwrap_or_default().contains(needle), "{query}: {body}");
    }
    saltdb.stop();
}
