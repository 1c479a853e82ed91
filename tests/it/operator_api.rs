//! The operator APIs against the real Prometheus 2.42 on the same data: identical recent,
//! jittered samples remote-written to both, then compared field by field:
//!
//! - `/api/v1/status/runtimeinfo`: the same keys with the same JSON types, the same
//!   `storageRetention`, `reloadConfigSuccess` and `corruptionCount`;
//! - `stats` on `/api/v1/query` and `/api/v1/query_range`: the same stats object (keys and types
//!   throughout), the same `totalQueryableSamples` and `totalQueryableSamplesPerStep` (Prometheus
//!   started with `--enable-feature=promql-per-step-stats`), no per-step counts without
//!   `stats=all`, no stats object without `stats`;
//! - `/federate`: the same exposition lines (TYPE lines, labels with `instance=""` added,
//!   values, timestamps), stale and out-of-lookback series left out alike; then a second, empty
//!   Prometheus federates from saltdb (`honor_labels: true`) and holds the same latest samples;
//! - the slow-query log of the same saltdb (`--query-log-slow 1ms`): a line naming the query,
//!   its duration, samples and the client's address.
//!
//! Skipped (a `SKIPPED:` line) without `prometheus` on PATH outside CI; a failure in CI.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use saltdb::remote::proto::{Label, Sample, TimeSeries, WriteRequest};
use serde_json::Value;

use crate::common::*;
use crate::peers::{available, Prometheus};

const TEST: &str = "operator_api::operator_apis_match_prometheus";
const STEP_MS: i64 = 15_000;
const SCRAPES: i64 = 80;

/// A series' labels and its value at scrape `k` (`None`: no sample).
type Generated = (Vec<(&'static str, String)>, Box<dyn Fn(i64) -> Option<f64>>);

/// Recent series in time order: counters and gauges over the last 20 minutes (jittered off the
/// grid), one that went stale, one whose last sample is older than the lookback, one without
/// `instance`.
fn requests(t0: i64) -> Vec<WriteRequest> {
    let mut series: Vec<Generated> = Vec::new();
    for inst in ["i1", "i2"] {
        for code in ["200", "500"] {
            let rate = if code == "200" { 7.0 } else { 0.25 } * if inst == "i1" { 1.0 } else { 3.0 };
            series.push((
                vec![
                    ("__name__", "http_requests_total".into()),
                    ("job", "api".into()),
                    ("instance", inst.into()),
                    ("code", code.into()),
                ],
                Box::new(move |k| Some(100.0 + rate * k as f64 * 15.0)),
            ));
        }
        series.push((
            vec![("__name__", "temp_celsius".into()), ("job", "sensors".into()), ("instance", inst.into())],
            Box::new(move |k| Some(20.0 + ((k * 7 % 13) as f64) / 4.0 + if inst == "i1" { 0.0 } else { 1e6 })),
        ));
        series.push((
            vec![("__name__", "up".into()), ("job", "api".into()), ("instance", inst.into())],
            Box::new(|_| Some(1.0)),
        ));
    }
    let stale = f64::from_bits(saltdb::sample::STALE_NAN_BITS);
    series.push((
        vec![("__name__", "gone".into()), ("job", "api".into()), ("instance", "i1".into())],
        Box::new(move |k| (k < SCRAPES - 1).then_some(1.0).or(Some(stale))),
    ));
    series.push((
        vec![("__name__", "old".into()), ("job", "api".into()), ("instance", "i1".into())],
        Box::new(|k| (k < SCRAPES - 30).then_some(k as f64)),
    ));
    series
        .push((vec![("__name__", "cluster_total".into()), ("job", "api".into())], Box::new(|k| Some(k as f64 * 0.5))));
    (0..SCRAPES)
        .map(|k| WriteRequest {
            timeseries: series
                .iter()
                .enumerate()
                .filter_map(|(i, (labels, value))| {
                    let v = value(k)?;
                    let jitter = (i as i64 * 37 + k * 11) % 900 + 50;
                    let mut labels: Vec<Label> =
                        labels.iter().map(|(n, v)| Label { name: (*n).into(), value: v.clone() }).collect();
                    labels.sort_by(|a, b| a.name.cmp(&b.name));
                    Some(TimeSeries {
                        labels,
                        samples: vec![Sample { value: v, timestamp: t0 + k * STEP_MS + jitter }],
                        ..Default::default()
                    })
                })
                .collect(),
            ..Default::default()
        })
        .collect()
}

fn post_write(base: &str, body: &[u8]) {
    let (status, _, text) = post(&format!("{base}/api/v1/write"), &V1_HEADERS, body.to_vec());
    assert!(status == 204 || status == 200, "{base}: remote write {status}: {text}");
}

fn form(base: &str, path: &str, params: &[(&str, String)]) -> Value {
    let resp = client().post(format!("{base}{path}")).form(params).send().unwrap();
    serde_json::from_str(&resp.text().unwrap()).unwrap_or(Value::Null)
}

/// Where two JSON values differ in shape: keys, and the type of every value.
fn shape_diff(path: &str, a: &Value, b: &Value, out: &mut Vec<String>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let (kx, ky): (BTreeSet<_>, BTreeSet<_>) = (x.keys().collect(), y.keys().collect());
            if kx != ky {
                out.push(format!("{path}: keys {kx:?} vs {ky:?}"));
            }
            for k in kx.intersection(&ky) {
                shape_diff(&format!("{path}.{k}"), &x[k.as_str()], &y[k.as_str()], out);
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            if let (Some(p), Some(q)) = (x.first(), y.first()) {
                shape_diff(&format!("{path}[0]"), p, q, out);
            }
        }
        (Value::Number(_), Value::Number(_))
        | (Value::String(_), Value::String(_))
        | (Value::Bool(_), Value::Bool(_)) => {}
        (Value::Null, Value::Null) => {}
        _ => out.push(format!("{path}: {a} vs {b}")),
    }
}

/// Exposition lines, sorted (Prometheus' order within a family is unspecified).
fn exposition_lines(text: &str) -> Vec<String> {
    let mut lines: Vec<String> = text.lines().filter(|l| !l.is_empty()).map(str::to_owned).collect();
    lines.sort();
    lines
}

#[test]
fn operator_apis_match_prometheus() {
    if !available("prometheus", TEST) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    for d in ["prom", "federator"] {
        std::fs::create_dir_all(dir.path().join(d)).unwrap();
    }
    let prom = Prometheus::start_with(
        &dir.path().join("prom"),
        "global:\n  scrape_interval: 1h\n",
        &["--enable-feature=promql-per-step-stats"],
    );
    let log = dir.path().join("saltdb.log");
    let salt = Binary::spawn_logged(
        &dir.path().join("salt"),
        &["--retention", "15d", "--query-log-slow", "1ms"],
        "warn",
        &log,
    );
    let now = chrono::Utc::now().timestamp_millis();
    let t0 = now - SCRAPES * STEP_MS;
    for req in requests(t0) {
        let body = saltdb::remote::snappy_body(&req);
        post_write(&prom.base, &body);
        post_write(&salt.url(""), &body);
    }
    let mut compared = Vec::new();
    let mut failures = Vec::new();

    // runtimeinfo
    let (o, t) = (
        get_json(&salt.url("/api/v1/status/runtimeinfo")),
        get_json(&format!("{}/api/v1/status/runtimeinfo", prom.base)),
    );
    shape_diff("runtimeinfo", &o, &t, &mut failures);
    for key in ["storageRetention", "reloadConfigSuccess", "corruptionCount"] {
        if o["data"][key] != t["data"][key] {
            failures.push(format!("runtimeinfo.{key}: {} vs {}", o["data"][key], t["data"][key]));
        }
    }
    compared.push(format!("runtimeinfo: {} keys", t["data"].as_object().map_or(0, serde_json::Map::len)));

    // stats
    let end = t0 + (SCRAPES - 1) * STEP_MS - 4_321;
    let queries = [
        "temp_celsius",
        "http_requests_total{code=\"200\"}",
        "rate(http_requests_total[5m])",
        "sum by (instance) (rate(http_requests_total[2m]))",
        "max_over_time(temp_celsius[3m]) > 21",
        "count(up) + sum(temp_celsius)",
        "http_requests_total / on(instance) group_left up",
        "1 + 1",
        "gone",
        "old",
    ];
    let secs = |ms: i64| (ms as f64 / 1000.0).to_string();
    for q in queries {
        let variants: [(&str, Vec<(&str, String)>); 3] = [
            ("instant", vec![("query", q.to_owned()), ("time", secs(end)), ("stats", "all".into())]),
            (
                "range",
                vec![
                    ("query", q.to_owned()),
                    // Whole seconds here (off-grid for the data), fractions in the instant case.
                    ("start", secs(end - end % 1000 - 600_000)),
                    ("end", secs(end - end % 1000)),
                    ("step", "60".into()),
                    ("stats", "all".into()),
                ],
            ),
            (
                "range without all",
                vec![
                    ("query", q.to_owned()),
                    ("start", secs(end - 300_000)),
                    ("end", secs(end)),
                    ("step", "30".into()),
                    ("stats", "true".into()),
                ],
            ),
        ];
        for (what, params) in variants {
            let path = if what == "instant" { "/api/v1/query" } else { "/api/v1/query_range" };
            let (o, t) = (form(&salt.url(""), path, &params), form(&prom.base, path, &params));
            let (os, ts) = (&o["data"]["stats"], &t["data"]["stats"]);
            if t["status"] != "success" || ts.is_null() {
                failures.push(format!("{what} {q}: Prometheus gave no stats: {t}"));
                continue;
            }
            shape_diff(&format!("{what} {q}: stats"), os, ts, &mut failures);
            for key in ["totalQueryableSamples", "totalQueryableSamplesPerStep"] {
                if os["samples"][key] != ts["samples"][key] {
                    failures
                        .push(format!("{what} {q}: {key} {} vs Prometheus {}", os["samples"][key], ts["samples"][key]));
                }
            }
            compared.push(format!("{what} {q}: totalQueryableSamples {}", ts["samples"]["totalQueryableSamples"]));
        }
        let plain = [("query", q.to_owned()), ("time", secs(end))];
        let (o, t) = (form(&salt.url(""), "/api/v1/query", &plain), form(&prom.base, "/api/v1/query", &plain));
        assert!(o["data"].get("stats").is_none() && t["data"].get("stats").is_none(), "stats without asking: {o} {t}");
    }

    // federate
    let selectors = [vec!["{job=\"api\"}"], vec!["up", "temp_celsius", "up"], vec!["{__name__=~\"gone|old\"}"]];
    let mut federated = String::new();
    for sel in &selectors {
        let params: Vec<(&str, &str)> = sel.iter().map(|s| ("match[]", *s)).collect();
        let fetch = |base: &str| {
            let r = client().get(format!("{base}/federate")).query(&params).send().unwrap();
            (r.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("").to_owned(), r.text().unwrap())
        };
        let ((oc, o), (tc, t)) = (fetch(&salt.url("")), fetch(&prom.base));
        if oc != tc {
            failures.push(format!("federate {sel:?}: content type {oc:?} vs {tc:?}"));
        }
        if exposition_lines(&o) != exposition_lines(&t) {
            failures.push(format!("federate {sel:?}:\nsaltdb:\n{o}\nPrometheus:\n{t}"));
        }
        compared.push(format!("federate {sel:?}: {} lines", t.lines().count()));
        if sel.len() == 1 && sel[0] == "{job=\"api\"}" {
            federated = o;
        }
    }
    assert!(federated.contains("cluster_total{job=\"api\",instance=\"\"}"), "{federated}");
    assert!(!federated.contains("gone") && !federated.contains("old{"), "{federated}");

    // slow-query log (threshold 1ms): a range query over 10,800 steps takes longer than that
    let heavy = [
        ("query", "rate(http_requests_total[5m])".to_owned()),
        ("start", secs(end - 10_799_000)),
        ("end", secs(end)),
        ("step", "1".into()),
    ];
    assert_eq!(form(&salt.url(""), "/api/v1/query_range", &heavy)["status"], "success");
    let logged = std::fs::read_to_string(&log).unwrap();
    let slow: Vec<&str> = logged.lines().filter(|l| l.contains("slow query")).collect();
    assert!(
        slow.iter().any(|l| l.contains("query=\"rate(http_requests_total[5m])\"")
            && l.contains("step_ms=1000")
            && l.contains("samples=")
            && l.contains("client=127.0.0.1:")
            && l.contains("duration_seconds=")),
        "no slow-query line for the rate query:\n{logged}"
    );

    eprintln!("operator_api: compared with Prometheus 2.42:\n  {}", compared.join("\n  "));
    assert!(failures.is_empty(), "{} differences from Prometheus:\n{}", failures.len(), failures.join("\n"));

    // A real Prometheus federates from saltdb and ends up with saltdb's latest samples.
    let config = format!(
        "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: federate\n    honor_labels: true\n    metrics_path: /federate\n    params:\n      'match[]': ['{{job=\"api\"}}']\n    static_configs: [{{targets: [\"{}\"]}}]\n",
        salt.addr
    );
    let federator = Prometheus::start(&dir.path().join("federator"), &config);
    let want: BTreeMap<String, f64> = federated
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| {
            let mut parts = l.rsplitn(3, ' ');
            let (_ts, value, series) = (parts.next()?, parts.next()?, parts.next()?);
            Some((series.replace(",instance=\"\"", "").replace("{instance=\"\"}", ""), value.parse().ok()?))
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    let got = loop {
        let r = form(&federator.base, "/api/v1/query", &[("query", "{job=\"api\"}".to_owned())]);
        let got: BTreeMap<String, f64> = r["data"]["result"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|s| {
                        let m = s["metric"].as_object().unwrap();
                        let name = m["__name__"].as_str().unwrap();
                        let labels: Vec<String> = m
                            .iter()
                            .filter(|(k, _)| k.as_str() != "__name__")
                            .map(|(k, v)| format!("{k}=\"{}\"", v.as_str().unwrap()))
                            .collect();
                        (format!("{name}{{{}}}", labels.join(",")), s["value"][1].as_str().unwrap().parse().unwrap())
                    })
                    .collect()
            })
            .unwrap_or_default();
        if got.len() >= want.len() || Instant::now() > deadline {
            break got;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    // Label order differs (the exposition keeps saltdb's order, the API sorts): compare as sets
    // of sorted label lists.
    let norm = |m: &BTreeMap<String, f64>| -> BTreeMap<String, f64> {
        m.iter()
            .map(|(k, v)| {
                let (name, rest) = k.split_once('{').unwrap_or((k, "}"));
                let mut labels: Vec<&str> = rest.trim_end_matches('}').split(',').filter(|s| !s.is_empty()).collect();
                labels.sort();
                (format!("{name}{{{}}}", labels.join(",")), *v)
            })
            .collect()
    };
    assert_eq!(norm(&got), norm(&want), "what Prometheus federated from saltdb");
    eprintln!("operator_api: a real Prometheus federated {} series from saltdb", got.len());
    salt.terminate();
}
