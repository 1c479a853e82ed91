//! The same rule file evaluated by a real Prometheus 2.42 and by saltdb, fed the same samples,
//! sending to one real Alertmanager: recording outputs, `ALERTS`, `/api/v1/rules`,
//! `/api/v1/alerts` and Alertmanager's alerts compared.
//!
//! **How the race is ruled out.** Both evaluate a group at the same slots (the slot's phase is a
//! hash of the file path and the group name, which both are given identically). Every sample is
//! written to both with a timestamp 3 s *ahead* of the wall clock when it is sent, so by the time
//! a slot `T` is evaluated (never before the wall clock reaches `T`) every sample at or before `T`
//! has been in both stores for 3 s, and samples after `T` are not read by an evaluation at `T`.
//! Each compares results only for the slots both evaluated.
//!
//! Documented differences, left out of the comparison: `evaluationTime` and `lastEvaluation`
//! (wall-clock measurements), saltdb's `keepFiringSince` field on alerts (Prometheus 2.42 has
//! none), and `activeAt` to the millisecond (Prometheus prints the slot's nanoseconds; saltdb
//! keeps times in milliseconds).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use saltdb::remote::{proto, snappy_body};
use serde_json::Value;

use crate::alertmanager::{Alertmanager, Webhook};
use crate::common::{get_json, post, series, Binary, V1_HEADERS};
use crate::peers::{installed, Prometheus};

const RULES: &str = r#"groups:
  - name: diff
    interval: 2s
    rules:
      - record: job:req:rate10s
        expr: sum by (job) (rate(req_total[10s]))
      - record: job:req:rate10s_x2
        expr: job:req:rate10s * 2
      - alert: HighRate
        expr: job:req:rate10s > 5
        for: 4s
        keep_firing_for: 4s
        labels:
          severity: page
        annotations:
          summary: '{{ $labels.job }} serves {{ $value | humanize }} req/s'
          series: '{{ with query "count(req_total)" }}{{ . | first | value }}{{ end }}'
  - name: limited
    interval: 2s
    limit: 1
    rules:
      - record: instance:req:rate10s
        expr: sum by (instance) (rate(req_total[10s]))
"#;

/// Requests per second of each series, and when (ms after the start) `api` stops.
const RATES: [(&str, &str, f64); 3] = [("api", "i1", 10.0), ("api", "i2", 3.0), ("web", "w1", 1.0)];
const API_STOPS_MS: i64 = 14_000;
const FEED_MS: i64 = 26_000;

/// The counter value of series `k` at `t_ms`, a pure function of the timestamp.
fn counter(k: usize, start_ms: i64, t_ms: i64) -> f64 {
    let (job, _, rate) = RATES[k];
    let elapsed = if job == "api" { (t_ms - start_ms).min(API_STOPS_MS) } else { t_ms - start_ms };
    rate * elapsed as f64 / 1000.0
}

fn feed(targets: &[String], start_ms: i64, stop: &AtomicBool) {
    let mut t = start_ms;
    while !stop.load(Ordering::Relaxed) && t <= start_ms + FEED_MS {
        let now = chrono::Utc::now().timestamp_millis();
        // Sent 3 s before its timestamp (see the module's doc).
        if t > now + 3_000 {
            std::thread::sleep(Duration::from_millis(((t - now - 3_000) as u64).min(500)));
            continue;
        }
        let ts: Vec<proto::TimeSeries> = RATES
            .iter()
            .enumerate()
            .map(|(k, (job, instance, _))| {
                series(
                    &[("__name__", "req_total"), ("instance", instance), ("job", job)],
                    &[(t, counter(k, start_ms, t))],
                )
            })
            .collect();
        let body = snappy_body(&proto::WriteRequest { timeseries: ts, metadata: vec![] });
        for target in targets {
            let (status, _, text) = post(&format!("{target}/api/v1/write"), &V1_HEADERS, body.clone());
            assert!(status == 204 || status == 200, "{target}: {status} {text}");
        }
        t += 500;
    }
}

/// `name[120s]` at the end: (labels, timestamp ms) -> value, stale markers left out.
fn raw(base: &str, name: &str, at_s: f64) -> BTreeMap<(String, i64), f64> {
    let url = format!("{base}/api/v1/query?query={name}%5B120s%5D&time={at_s}");
    let v = get_json(&url);
    assert_eq!(v["status"], "success", "{base}: {v}");
    let mut out = BTreeMap::new();
    for s in v["data"]["result"].as_array().unwrap() {
        let labels = s["metric"].to_string();
        for p in s["values"].as_array().unwrap() {
            let t = (p[0].as_f64().unwrap() * 1000.0).round() as i64;
            out.insert((labels.clone(), t), p[1].as_str().unwrap().parse::<f64>().unwrap());
        }
    }
    out
}

/// Compares two raw answers on the timestamps both have (one of them may have started or
/// stopped evaluating a slot earlier); returns how many points matched.
fn compare_raw(name: &str, saltdb: &BTreeMap<(String, i64), f64>, prometheus: &BTreeMap<(String, i64), f64>) -> usize {
    let times = |m: &BTreeMap<(String, i64), f64>| m.keys().map(|k| k.1).collect::<std::collections::BTreeSet<_>>();
    let (ts, tp) = (times(saltdb), times(prometheus));
    let first = *ts.first().unwrap().max(tp.first().unwrap());
    let last = *ts.last().unwrap().min(tp.last().unwrap());
    let window = |m: &BTreeMap<(String, i64), f64>| -> BTreeMap<(String, i64), f64> {
        m.iter().filter(|(k, _)| k.1 >= first && k.1 <= last).map(|(k, v)| (k.clone(), *v)).collect()
    };
    let (a, b) = (window(saltdb), window(prometheus));
    assert_eq!(
        a.keys().collect::<Vec<_>>(),
        b.keys().collect::<Vec<_>>(),
        "{name}: the same series at the same timestamps"
    );
    for (k, v) in &a {
        let w = b[k];
        assert!((v - w).abs() <= 1e-9 * v.abs().max(1.0), "{name} {k:?}: saltdb {v}, Prometheus {w}");
    }
    a.len()
}

/// `/api/v1/rules` without the wall-clock fields.
fn rules_without_timings(base: &str) -> Value {
    let mut v = get_json(&format!("{base}/api/v1/rules"));
    strip(&mut v);
    v
}

fn strip(v: &mut Value) {
    match v {
        Value::Object(map) => {
            for k in ["evaluationTime", "lastEvaluation", "keepFiringSince"] {
                map.remove(k);
            }
            // Prometheus keeps the slot in nanoseconds, saltdb in milliseconds.
            if let Some(Value::String(t)) = map.get_mut("activeAt") {
                if let Some((secs, frac)) = t.trim_end_matches('Z').split_once('.') {
                    *t = format!("{secs}.{:0<3.3}Z", frac);
                }
            }
            map.values_mut().for_each(strip);
        }
        Value::Array(items) => items.iter_mut().for_each(strip),
        _ => {}
    }
}

/// Polls until `f` gives equal answers for both, for at most 10 s; the last pair otherwise.
fn settle(what: &str, f: impl Fn() -> (Value, Value)) -> (Value, Value) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (a, b) = f();
        if a == b || Instant::now() > deadline {
            if a != b {
                eprintln!("{what} did not settle");
            }
            return (a, b);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn prometheus_and_saltdb_evaluate_one_rule_file_alike() {
    let test = "rules_prometheus::prometheus_and_saltdb_evaluate_one_rule_file_alike";
    if !installed("prometheus", test, "prometheus")
        || !installed("prometheus-alertmanager", test, "prometheus-alertmanager")
    {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let rule_file = dir.path().join("rules.yml");
    std::fs::write(&rule_file, RULES).unwrap();
    let rule_path = rule_file.to_str().unwrap().to_owned();
    let webhook = Webhook::start();
    let am_dir = dir.path().join("am");
    std::fs::create_dir_all(&am_dir).unwrap();
    let am = Alertmanager::start(&am_dir, &webhook.url);
    let am_host = am.base.trim_start_matches("http://").to_owned();

    let prom_dir = dir.path().join("prometheus");
    std::fs::create_dir_all(&prom_dir).unwrap();
    let config = format!(
        "global:\n  evaluation_interval: 2s\n  external_labels:\n    source: prometheus\nrule_files:\n  - {rule_path}\nalerting:\n  alertmanagers:\n    - static_configs:\n        - targets: ['{am_host}']\n"
    );
    let prometheus = Prometheus::start(&prom_dir, &config);
    let server = Binary::spawn(
        &dir.path().join("saltdb"),
        &["--rule-file", &rule_path, "--alertmanager-url", &am.base, "--external-label", "source=saltdb"],
    );
    let base = server.url("");

    let start_ms = (chrono::Utc::now().timestamp_millis() / 1000) * 1000 + 3_000;
    let stop = Arc::new(AtomicBool::new(false));
    let targets = vec![base.clone(), prometheus.base.clone()];
    let feeder = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || feed(&targets, start_ms, &stop))
    };

    // While `api` is busy the alert fires on both; both send it to Alertmanager.
    let deadline = Instant::now() + Duration::from_secs(25);
    loop {
        let sources: Vec<String> =
            am.active("HighRate").iter().filter_map(|a| a["labels"]["source"].as_str().map(str::to_owned)).collect();
        if sources.contains(&"saltdb".to_owned()) && sources.contains(&"prometheus".to_owned()) {
            break;
        }
        assert!(Instant::now() < deadline, "HighRate did not reach Alertmanager from both: {sources:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let mut from: BTreeMap<String, Value> = BTreeMap::new();
    for a in am.active("HighRate") {
        let source = a["labels"]["source"].as_str().unwrap().to_owned();
        let mut labels = a["labels"].clone();
        labels.as_object_mut().unwrap().remove("source");
        from.insert(
            source,
            serde_json::json!({"labels": labels, "annotations": a["annotations"], "startsAt": a["startsAt"]}),
        );
    }
    assert_eq!(from["saltdb"], from["prometheus"], "the same alert in Alertmanager, but for its source");

    // Mid-run, the APIs agree (polled until both have evaluated the same slots).
    let (a, b) = settle("/api/v1/alerts", || {
        let mut a = get_json(&format!("{base}/api/v1/alerts"));
        let mut b = get_json(&format!("{}/api/v1/alerts", prometheus.base));
        strip(&mut a);
        strip(&mut b);
        (a, b)
    });
    assert_eq!(a, b, "/api/v1/alerts");
    let (a, b) = settle("/api/v1/rules", || (rules_without_timings(&base), rules_without_timings(&prometheus.base)));
    assert_eq!(a, b, "/api/v1/rules");

    feeder.join().unwrap();
    stop.store(true, Ordering::Relaxed);
    // keep_firing_for and the resolution happen after `api` stopped; wait for both to see it.
    std::thread::sleep(Duration::from_secs(6));
    let (a, b) =
        settle("/api/v1/rules at the end", || (rules_without_timings(&base), rules_without_timings(&prometheus.base)));
    assert_eq!(a, b, "/api/v1/rules at the end");

    let at_s = chrono::Utc::now().timestamp_millis() as f64 / 1000.0;
    let mut matched = 0;
    for name in ["job:req:rate10s", "job:req:rate10s_x2", "ALERTS", "ALERTS_FOR_STATE"] {
        matched += compare_raw(name, &raw(&base, name, at_s), &raw(&prometheus.base, name, at_s));
    }
    assert!(matched >= 20, "only {matched} points compared");
    assert!(raw(&base, "instance:req:rate10s", at_s).is_empty(), "the limited group wrote nothing");
    println!("rules against Prometheus 2.42: {matched} recorded and ALERTS points equal");
}
