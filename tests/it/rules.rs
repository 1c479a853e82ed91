//! Recording and alerting rules on a running server: evaluated on their own, listed by
//! `/api/v1/rules` and `/api/v1/alerts`, written where queries read them, reloaded by
//! `POST /-/reload` and SIGHUP (a bad file keeps the running rules).

use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::{client, get_json, import, Binary};

const RULES: &str = r#"
groups:
  - name: example
    interval: 1s
    rules:
      - record: job:up:sum
        expr: sum by (job) (up)
      - alert: InstanceDown
        expr: up == 0
        labels:
          severity: page
        annotations:
          summary: "instance is down"
"#;

fn write_rules(path: &Path, text: &str) {
    std::fs::write(path, text).expect("write the rule file");
}

/// Imports `up` for two instances (one down), a second ago and now: what rules evaluated in
/// the next five minutes see.
fn feed_up(base: &str) {
    let now = chrono::Utc::now().timestamp_millis();
    let lines = format!(
        "{{\"metric\":{{\"__name__\":\"up\",\"job\":\"a\",\"instance\":\"i1\"}},\"values\":[1,1],\"timestamps\":[{},{now}]}}\n\
         {{\"metric\":{{\"__name__\":\"up\",\"job\":\"a\",\"instance\":\"i2\"}},\"values\":[0,0],\"timestamps\":[{},{now}]}}\n",
        now - 1000,
        now - 1000
    );
    let (status, body) = import(base, lines);
    assert_eq!(status, 204, "import: {body}");
}

/// Polls `f` until it returns `Some`, for at most `secs` seconds.
fn eventually<T>(secs: u64, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn rules_of(base: &str) -> serde_json::Value {
    let v = get_json(&format!("{base}/api/v1/rules"));
    assert_eq!(v["status"], "success", "{v}");
    v["data"]["groups"].clone()
}

fn instant(base: &str, query: &str) -> Vec<serde_json::Value> {
    let v = get_json(&format!("{base}/api/v1/query?query={}", urlencode(query)));
    assert_eq!(v["status"], "success", "{v}");
    v["data"]["result"].as_array().cloned().unwrap_or_default()
}

fn urlencode(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

/// A server evaluating `rules` (written to `rules.yml` in a new directory, returned with it),
/// fed [`feed_up`].
fn fed_server(rules: &str) -> (tempfile::TempDir, std::path::PathBuf, Binary) {
    let dir = tempfile::tempdir().unwrap();
    let rule_file = dir.path().join("rules.yml");
    write_rules(&rule_file, rules);
    let server = Binary::spawn(&dir.path().join("data"), &["--rule-file", rule_file.to_str().unwrap()]);
    feed_up(&server.url(""));
    (dir, rule_file, server)
}

#[test]
fn rules_are_evaluated_written_and_listed() {
    let (_dir, rule_file, server) = fed_server(RULES);
    let base = server.url("");

    // Rules start being evaluated before the data is fed: an evaluation before it finds the
    // alert inactive (and healthy), so wait for one after.
    let groups = eventually(20, "both rules evaluated over the data", || {
        let g = rules_of(&base);
        let rules = g[0]["rules"].as_array()?.clone();
        (rules.iter().all(|r| r["health"] == "ok") && rules.get(1)?["state"] == "firing").then_some(g)
    });
    let group = &groups[0];
    assert_eq!(group["name"], "example");
    assert_eq!(group["file"], rule_file.to_str().unwrap());
    assert_eq!(group["interval"], 1.0);
    let record = &group["rules"][0];
    assert_eq!((record["type"].as_str(), record["name"].as_str()), (Some("recording"), Some("job:up:sum")));
    assert_eq!(record["query"], "sum by (job) (up)");
    let alert = &group["rules"][1];
    assert_eq!((alert["type"].as_str(), alert["state"].as_str()), (Some("alerting"), Some("firing")));
    assert_eq!(alert["duration"], 0.0);
    assert_eq!(alert["alerts"][0]["labels"]["instance"], "i2");
    assert_eq!(alert["alerts"][0]["annotations"]["summary"], "instance is down");

    let recorded = eventually(10, "the recorded series", || {
        let r = instant(&base, "job:up:sum");
        (!r.is_empty()).then_some(r)
    });
    assert_eq!(recorded[0]["metric"], serde_json::json!({"__name__": "job:up:sum", "job": "a"}));
    assert_eq!(recorded[0]["value"][1], "1");

    let alerts = get_json(&format!("{base}/api/v1/alerts"));
    let listed = alerts["data"]["alerts"].as_array().expect("alerts");
    assert_eq!(listed.len(), 1, "{alerts}");
    assert_eq!(
        listed[0]["labels"],
        serde_json::json!({"alertname": "InstanceDown", "instance": "i2", "job": "a", "severity": "page"})
    );
    assert_eq!((listed[0]["state"].as_str(), listed[0]["value"].as_str()), (Some("firing"), Some("0e+00")));

    let series = instant(&base, "ALERTS");
    assert_eq!(series.len(), 1, "{series:?}");
    assert_eq!(series[0]["metric"]["alertstate"], "firing");
    let for_state = instant(&base, "ALERTS_FOR_STATE");
    assert_eq!(for_state[0]["metric"]["alertname"], "InstanceDown");

    let metrics = client().get(format!("{base}/metrics")).send().unwrap().text().unwrap();
    let key = format!("rule_group=\"{};example\"", rule_file.display());
    let evaluations = metrics
        .lines()
        .find(|l| l.starts_with("prometheus_rule_evaluations_total{") && l.contains(&key))
        .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no rule evaluation counter in /metrics:\n{metrics}"));
    assert!(evaluations >= 2.0, "{evaluations}");
    assert!(metrics.contains(&format!("prometheus_rule_group_rules{{{key}}} 2\n")), "{metrics}");
    // Prometheus' two summaries, without labels: every rule evaluation, every group evaluation.
    let rule_count = summary_of(&metrics, "prometheus_rule_evaluation_duration_seconds", &["0.5", "0.9", "0.99"]);
    assert!(rule_count >= 2.0, "{rule_count}");
    let group_count =
        summary_of(&metrics, "prometheus_rule_group_duration_seconds", &["0.01", "0.05", "0.5", "0.9", "0.99"]);
    assert!(group_count >= 1.0 && rule_count >= 2.0 * group_count, "{group_count} {rule_count}");
}

/// Checks that `/metrics` text has the summary `name` with exactly these quantile series, each a
/// duration, and its `_sum`; returns its `_count`.
fn summary_of(metrics: &str, name: &str, quantiles: &[&str]) -> f64 {
    assert!(metrics.contains(&format!("# TYPE {name} summary\n")), "no summary {name}:\n{metrics}");
    let value = |l: &str| l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok());
    let series: Vec<&str> = metrics.lines().filter(|l| l.starts_with(&format!("{name}{{"))).collect();
    let labels: Vec<String> = quantiles.iter().map(|q| format!("{name}{{quantile=\"{q}\"}} ")).collect();
    assert_eq!(series.len(), quantiles.len(), "{series:?}");
    for (line, label) in series.iter().zip(&labels) {
        assert!(line.starts_with(label.as_str()), "{line} is not {label}");
        assert!(value(line).is_some_and(|v| (0.0..60.0).contains(&v)), "{line}");
    }
    let sum = metrics.lines().find(|l| l.starts_with(&format!("{name}_sum "))).and_then(value);
    assert!(sum.is_some_and(|s| s >= 0.0), "{name}_sum: {sum:?}");
    metrics
        .lines()
        .find(|l| l.starts_with(&format!("{name}_count ")))
        .and_then(value)
        .unwrap_or_else(|| panic!("no {name}_count in /metrics:\n{metrics}"))
}

#[test]
fn a_bad_reload_keeps_the_running_rules_and_a_good_one_replaces_them() {
    let (_dir, rule_file, server) = fed_server(RULES);
    let base = server.url("");
    eventually(20, "the recorded series", || (!instant(&base, "job:up:sum").is_empty()).then_some(()));

    write_rules(&rule_file, "groups:\n  - name: example\n    rules:\n      - record: x\n        expr: sum(\n");
    let resp = client().post(format!("{base}/-/reload")).send().unwrap();
    let status = resp.status().as_u16();
    let body = resp.text().unwrap();
    assert_eq!(status, 500, "{body}");
    assert!(body.contains("rules.yml"), "the error names the file: {body}");
    assert_eq!(rules_of(&base)[0]["rules"].as_array().map(Vec::len), Some(2), "the running rules stay");

    let renamed = RULES.replace("job:up:sum", "job:up:total");
    write_rules(&rule_file, &renamed);
    let resp = client().post(format!("{base}/-/reload")).send().unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    assert_eq!(rules_of(&base)[0]["rules"][0]["name"], "job:up:total");
    // The removed rule's series is marked stale at once: it no longer answers.
    assert!(instant(&base, "job:up:sum").is_empty(), "the removed rule's series is stale");
    eventually(20, "the new rule's series", || (!instant(&base, "job:up:total").is_empty()).then_some(()));
    // The alert survived the reload: same rule, same state, still firing.
    let alert = &rules_of(&base)[0]["rules"][1];
    assert_eq!(alert["state"], "firing", "{alert}");

    // SIGHUP reloads too.
    write_rules(&rule_file, &renamed.replace("job:up:total", "job:up:hup"));
    let pid = server.child.id().to_string();
    assert!(std::process::Command::new("kill").args(["-HUP", &pid]).status().unwrap().success());
    eventually(10, "the SIGHUP reload", || (rules_of(&base)[0]["rules"][0]["name"] == "job:up:hup").then_some(()));
}

#[test]
fn a_bad_rule_file_stops_the_server_from_starting() {
    let dir = tempfile::tempdir().unwrap();
    let rule_file = dir.path().join("rules.yml");
    write_rules(&rule_file, "groups:\n  - name: g\n    rules:\n      - record: x\n");
    let err = match Binary::try_spawn(&dir.path().join("data"), &["--rule-file", rule_file.to_str().unwrap()]) {
        Ok(_) => panic!("a bad rule file must stop the start"),
        Err(e) => e,
    };
    assert!(err.contains("rules.yml"), "the error names the file: {err}");
}

#[test]
fn a_firing_alert_is_still_firing_after_kill_9_with_its_times() {
    let (dir, rule_file, server) = fed_server(&RULES.replace("expr: up == 0", "expr: up == 0\n        for: 2s"));
    let data = dir.path().join("data");
    let base = server.url("");
    let before = eventually(20, "the alert firing", || {
        let v = get_json(&format!("{base}/api/v1/alerts"));
        let a = v["data"]["alerts"].as_array()?.first()?.clone();
        (a["state"] == "firing").then_some(a)
    });
    let killed_at = chrono::Utc::now().timestamp_millis();
    server.kill9();

    let server = Binary::spawn(&data, &["--rule-file", rule_file.to_str().unwrap()]);
    let up_at = chrono::Utc::now().timestamp_millis();
    let base = server.url("");
    // Before the first evaluation after the restart, the restored alert is already listed.
    let v = get_json(&format!("{base}/api/v1/alerts"));
    let after = &v["data"]["alerts"][0];
    assert_eq!(after["state"], "firing", "restored as firing, not pending: {v}");
    assert_eq!(after["activeAt"], before["activeAt"], "active since the same time");
    assert_eq!(after["labels"], before["labels"]);
    // And it stays firing once evaluated again (its series are still there).
    std::thread::sleep(Duration::from_millis(2500));
    let v = get_json(&format!("{base}/api/v1/alerts"));
    assert_eq!(v["data"]["alerts"][0]["state"], "firing", "{v}");
    assert_eq!(v["data"]["alerts"][0]["activeAt"], before["activeAt"]);

    // The recording rule resumed at the first slot after the restart: no gap longer than one
    // interval (1 s) beyond the time the server was down, and one sample a slot otherwise.
    let recorded = crate::common::export(&base, "job:up:sum");
    let times: Vec<i64> = recorded.values().next().expect("the recorded series").iter().map(|s| s.0).collect();
    let first_after = *times.iter().find(|t| **t > killed_at).expect("evaluated after the restart");
    assert!(first_after <= up_at + 1000, "first evaluation {first_after} more than an interval after {up_at}");
    for pair in times.windows(2) {
        let spans_the_restart = pair[0] <= killed_at && pair[1] >= first_after;
        assert!(spans_the_restart || pair[1] - pair[0] == 1000, "a gap of {} ms: {times:?}", pair[1] - pair[0]);
    }
}
