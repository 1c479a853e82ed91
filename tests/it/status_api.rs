//! `/api/v1/status/tsdb` and `/api/v1/status/flags` next to the real Prometheus 2.42 and, for
//! VictoriaMetrics' extensions (`topN`, `date`, `match[]`, `focusLabel`), VictoriaMetrics 1.79,
//! all three fed the same remote-write request. Compared field by field: Prometheus' fields by
//! shape and value except where saltdb reports something else by design (`chunkCount`,
//! `minTime`/`maxTime`: see docs/api.md), VictoriaMetrics' fields exactly. Ties in Prometheus'
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
    ] {
        let resp = client().get(saltdb.url(&format!("/api/v1/status/tsdb?{query}"))).send().unwrap();
        assert_eq!(resp.status().as_u16(), 400, "{query}");
        let body: Value = serde_json::from_str(&resp.text().unwrap()).unwrap();
        assert_eq!(body["errorType"], "bad_data");
        assert!(body["error"].as_str().unwrap_or_default().contains(needle), "{query}: {body}");
    }
    saltdb.stop();
}

/// A day spread over four 6-hour windows, one sealed and then written to again (so its series
/// are indexed in both its sealed and its hot keyspace): every series counts once, as
/// `/api/v1/series` lists them for that day.
#[test]
fn tsdb_status_counts_each_series_once_across_windows_and_keyspaces() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = storage_config(dir.path());
    config.window_ms = 6 * 3_600_000;
    let saltdb = InProcess::start(config);
    let base = saltdb.url("");
    let day = 1_704_844_800_000i64; // 2024-01-10T00:00:00Z
    let line = |name: &str, job: &str, t: i64| {
        format!("{{\"metric\":{{\"__name__\":\"{name}\",\"job\":\"{job}\"}},\"values\":[1],\"timestamps\":[{t}]}}\n")
    };
    let hour = 3_600_000;
    let first: String = [
        line("cpu", "a", day + hour),
        line("cpu", "b", day + hour),
        line("cpu", "a", day + 7 * hour),
        line("mem", "a", day + 13 * hour),
        line("cpu", "c", day + 19 * hour),
        line("cpu", "a", day - hour),
        line("disk", "z", day + 25 * hour),
    ]
    .concat();
    assert_eq!(import(&base, first), (204, String::new()));
    let storage = saltdb.server.as_ref().unwrap().storage().expect("embedded store").clone();
    storage.flush_head().unwrap();
    assert!(storage.seal_window(day).unwrap().is_some(), "the first window seals");
    // Late samples into the sealed window: one known series, one new.
    assert_eq!(
        import(&base, [line("cpu", "b", day + 2 * hour), line("net", "a", day + 2 * hour)].concat()),
        (204, String::new())
    );
    storage.flush_head().unwrap();

    let listed = get_json(&format!(
        "{base}/api/v1/series?match[]={{__name__=~\".%2B\"}}&start={}&end={}",
        day / 1000,
        (day + 24 * hour - 1) / 1000
    ));
    let listed = listed["data"].as_array().unwrap().clone();
    let c = tsdb(&base, &[("date", "2024-01-10")]);
    assert_eq!(c["totalSeries"].as_u64(), Some(listed.len() as u64));
    let mut per_metric: BTreeMap<String, u64> = BTreeMap::new();
    for s in &listed {
        *per_metric.entry(s["__name__"].as_str().unwrap().to_owned()).or_default() += 1;
    }
    let counted: BTreeMap<String, u64> = stats(&c["seriesCountByMetricName"]).into_iter().collect();
    assert_eq!(counted, per_metric);
    assert_eq!(per_metric.get("cpu"), Some(&3), "the data set spans the windows as meant");
    // With a selector, only its series.
    let c = tsdb(&base, &[("date", "2024-01-10"), ("match[]", r#"{job="a"}"#)]);
    let with_a = listed.iter().filter(|s| s["job"] == "a").count() as u64;
    assert_eq!(c["totalSeries"].as_u64(), Some(with_a));
    assert_eq!(stats(&c["seriesCountByLabelValuePair"]).iter().find(|(n, _)| n == "job=a").map(|p| p.1), Some(with_a));
    saltdb.stop();
}

/// The web UI's files: each page path answers the page shell, assets carry their content type,
/// an ETag that revalidates to 304, `no-cache` and a content security policy; unknown assets
/// are 404 in the API's error envelope.
#[test]
fn web_ui_assets_are_served_with_types_and_cache_headers() {
    let dir = tempfile::tempdir().unwrap();
    let saltdb = InProcess::start(storage_config(dir.path()));
    let c = client();
    for page in ["/", "/graph", "/explore", "/cardinality", "/storage"] {
        let resp = c.get(saltdb.url(page)).send().unwrap();
        assert_eq!(resp.status().as_u16(), 200, "{page}");
        assert_eq!(resp.headers()["content-type"], "text/html; charset=utf-8");
        assert!(resp.text().unwrap().contains(r#"<script type="module" src="/ui/main.js">"#));
    }
    for (asset, content_type) in
        [("main.js", "text/javascript; charset=utf-8"), ("style.css", "text/css; charset=utf-8")]
    {
        let resp = c.get(saltdb.url(&format!("/ui/{asset}"))).send().unwrap();
        assert_eq!(resp.status().as_u16(), 200);
        let h = resp.headers().clone();
        assert_eq!(h["content-type"], content_type);
        assert_eq!(h["cache-control"], "no-cache");
        assert!(h["content-security-policy"].to_str().unwrap().contains("default-src 'self'"));
        let etag = h["etag"].to_str().unwrap().to_owned();
        assert!(!resp.bytes().unwrap().is_empty());
        let again = c.get(saltdb.url(&format!("/ui/{asset}"))).header("If-None-Match", &etag).send().unwrap();
        assert_eq!(again.status().as_u16(), 304);
        assert!(again.bytes().unwrap().is_empty());
        let stale = c.get(saltdb.url(&format!("/ui/{asset}"))).header("If-None-Match", "\"0\"").send().unwrap();
        assert_eq!(stale.status().as_u16(), 200);
    }
    for missing in ["/ui/nope.js", "/ui/..%2FCargo.toml", "/ui/"] {
        let resp = c.get(saltdb.url(missing)).send().unwrap();
        assert_eq!(resp.status().as_u16(), 404, "{missing}");
        let body: Value = serde_json::from_str(&resp.text().unwrap()).unwrap();
        assert_eq!(body["status"], "error", "{missing}");
    }
    saltdb.stop();
}

/// `/api/v1/status/storage` after a write: samples per bucket add up to what was written, the
/// head holds them, and the configured window, retention and bucket count are reported.
#[test]
fn storage_status_reports_buckets_head_and_settings() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = storage_config(dir.path());
    config.buckets = 8;
    config.retention_ms = Some(90 * 86_400_000);
    let saltdb = InProcess::start(config);
    let t = recent_ms();
    let lines: String = (0..20)
        .map(|i| {
            format!(
                "{{\"metric\":{{\"__name__\":\"m\",\"i\":\"{i}\"}},\"values\":[1,2,3],\"timestamps\":[{t},{},{}]}}\n",
                t + 1000,
                t + 2000
            )
        })
        .collect();
    assert_eq!(import(&saltdb.url(""), lines), (204, String::new()));
    let v = get_json(&saltdb.url("/api/v1/status/storage"));
    assert_eq!(v["status"], "success");
    let d = &v["data"];
    let written: Vec<u64> =
        d["buckets"]["samplesWritten"].as_array().unwrap().iter().map(|n| n.as_u64().unwrap()).collect();
    assert_eq!(written.len(), 8);
    assert_eq!(written.iter().sum::<u64>(), 60);
    assert!(written.iter().filter(|&&n| n > 0).count() > 1, "20 series spread over buckets: {written:?}");
    assert_eq!(d["buckets"]["scheme"], "hash");
    assert_eq!(d["head"]["samples"], 60);
    assert_eq!(d["head"]["series"], 20);
    // 20 series of 3 samples: 96 bytes a series, which holds up to 4 samples itself.
    let bytes = d["head"]["bytes"].as_u64().unwrap();
    assert_eq!(bytes, 20 * 96, "head bytes");
    assert_eq!(d["head"]["maxSamples"], 4_000_000);
    assert_eq!(d["head"]["maxBytes"], 1u64 << 30);
    assert_eq!(d["windowMs"], 86_400_000);
    assert_eq!(d["retentionMs"], 90 * 86_400_000i64);
    assert_eq!(d["tierIntervalsMs"], serde_json::json!([]));
    assert_eq!(d["seriesCreated"], 20);
    assert!(d["tableBytes"].as_object().unwrap().contains_key("series"));
    saltdb.stop();
}
