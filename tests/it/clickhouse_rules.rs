//! Rules on a ClickHouse cluster, where every saltdb node evaluates every group (docs/rules.md,
//! "Several nodes on ClickHouse"). Two nodes on one two-shard cluster load the same rule file
//! (same path); samples are remote-written once, through one of them; the real Alertmanager 0.25
//! routes every alert to a webhook served by this test.
//!
//! - The recorded series read through either node are the same: one sample per slot, every one
//!   at the group's phase.
//! - Both nodes send the firing alert; Alertmanager holds one alert, with the `startsAt` both
//!   computed, and notifies the webhook once.
//! - A third node started while one alert fires and another is pending reports the same
//!   `activeAt` and state for both as the first node (it takes them from the others'
//!   `ALERTS_FOR_STATE` instead of starting its own `for`); its copy of the firing alert
//!   changes nothing in Alertmanager.
//! - A group POSTed to the ruler API of one node is listed and evaluated by the other, and a
//!   deletion through the other node reaches the first.
//! - The nodes serve tenants (`--tenants`): a tenant's group set through one node is listed by
//!   the other for that tenant alone and evaluated there on that tenant's series alone.
//!
//! Skipped (a `SKIPPED:` line) without `clickhouse-server` or `prometheus-alertmanager` on PATH
//! outside CI; a failure in CI.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use saltdb::remote::{proto, snappy_body};

use crate::alertmanager::{Alertmanager, Webhook};
use crate::common::{client, export, get_json, post, series, Binary, V1_HEADERS};
use crate::peers::installed;

const TEST: &str = "clickhouse_rules::every_node_evaluates_and_alertmanager_pages_once";

const RULES: &str = r#"
groups:
  - name: load
    interval: 1s
    rules:
      - record: job:cluster_load:sum
        expr: sum by (job) (cluster_load)
      - alert: LoadHigh
        expr: job:cluster_load:sum > 5
        for: 3s
        labels:
          severity: page
        annotations:
          summary: "{{ $labels.job }} carries {{ $value }}"
      - alert: LoadHeld
        expr: job:cluster_load:sum > 5
        for: 1h
"#;

/// A group set through the ruler API.
const API_GROUP: &str =
    "name: from-the-api\ninterval: 1s\nrules:\n  - record: job:cluster_load:max\n    expr: max by (job) (cluster_load)\n";

/// Polls `check` every 200 ms for up to `secs` seconds.
fn eventually<T>(secs: u64, what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(t) = check() {
            return t;
        }
        assert!(Instant::now() < deadline, "not within {secs} s: {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The value of the first line of `/metrics` starting with `series` (0 when absent).
fn metric(base: &str, series: &str) -> f64 {
    let text = client().get(format!("{base}/metrics")).send().unwrap().text().unwrap();
    text.lines().find(|l| l.starts_with(series)).and_then(|l| l.rsplit(' ').next()?.parse().ok()).unwrap_or(0.0)
}

/// A node's pending and firing alerts: alertname -> (state, activeAt).
fn alerts(base: &str) -> BTreeMap<String, (String, String)> {
    let v = get_json(&format!("{base}/api/v1/alerts"));
    assert_eq!(v["status"], "success", "{v}");
    v["data"]["alerts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            let name = a["labels"]["alertname"].as_str().unwrap().to_owned();
            (name, (a["state"].as_str().unwrap().to_owned(), a["activeAt"].as_str().unwrap().to_owned()))
        })
        .collect()
}

fn millis(rfc3339: &str) -> i64 {
    rfc3339.parse::<chrono::DateTime<chrono::Utc>>().unwrap().timestamp_millis()
}

#[test]
fn every_node_evaluates_and_alertmanager_pages_once() {
    if !installed("prometheus-alertmanager", TEST, "prometheus-alertmanager") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some(shards) = crate::clickhouse::cluster(dir.path(), TEST) else { return };
    let started = Instant::now();
    let webhook = Webhook::start();
    let am = Alertmanager::start(dir.path(), &webhook.url);
    // One path for the rule file on every node: the group's slots hash it.
    let rules = dir.path().join("rules.yml");
    std::fs::write(&rules, RULES).unwrap();
    let urls = shards.iter().map(|s| s.url.as_str()).collect::<Vec<_>>().join(",");
    let args = [
        "--storage",
        "clickhouse",
        "--clickhouse-url",
        &urls,
        "--retention",
        "0",
        "--tenants",
        "--rule-file",
        rules.to_str().unwrap(),
        "--rule-evaluation-interval",
        "1s",
        "--rule-query-offset",
        "1s",
        "--alertmanager-url",
        &am.base,
    ];
    let node = |name: &str| Binary::spawn(&dir.path().join(name), &args);
    let (a, b) = (node("node-a"), node("node-b"));
    let (base_a, base_b) = (a.url(""), b.url(""));

    // Written once, through one node: 4 + 3 = 7 for the job, within the lookback for minutes.
    let now = chrono::Utc::now().timestamp_millis();
    let body = snappy_body(&proto::WriteRequest {
        timeseries: vec![
            series(&[("__name__", "cluster_load"), ("instance", "i1"), ("job", "api")], &[(now, 4.0)]),
            series(&[("__name__", "cluster_load"), ("instance", "i2"), ("job", "api")], &[(now, 3.0)]),
        ],
        metadata: vec![],
    });
    let (status, _, text) = post(&format!("{base_a}/api/v1/write"), &V1_HEADERS, body);
    assert_eq!(status, 204, "{text}");

    // (b) Both nodes page; Alertmanager holds one alert and notifies once.
    let firing = eventually(30, "LoadHigh firing on node A", || {
        alerts(&base_a).get("LoadHigh").filter(|(state, _)| state == "firing").cloned()
    });
    eventually(10, "both nodes sent the firing alert", || {
        let sent = |base: &str| metric(base, "prometheus_notifications_sent_total{");
        (sent(&base_a) >= 1.0 && sent(&base_b) >= 1.0).then_some(())
    });
    webhook.wait_for("firing");
    let on_b = alerts(&base_b);
    assert_eq!(on_b.get("LoadHigh"), Some(&firing), "nodes A and B agree on the firing alert");
    assert_eq!(on_b.get("LoadHeld"), alerts(&base_a).get("LoadHeld"), "and on the pending one");
    std::thread::sleep(Duration::from_secs(3));
    let shown = am.active("LoadHigh");
    assert_eq!(shown.len(), 1, "one alert in Alertmanager: {shown:?}");
    let starts_at = millis(shown[0]["startsAt"].as_str().unwrap());
    assert_eq!(starts_at, millis(&firing.1) + 3_000, "fired at the first slot 3 s after activeAt: {shown:?}");
    assert_eq!(webhook.received().len(), 1, "one notification: {:?}", webhook.received());

    // (a) The recorded series, read through either node: the same samples, one per slot.
    let recorded = r#"{__name__="job:cluster_load:sum"}"#;
    let (via_a, via_b) = (export(&base_a, recorded), export(&base_b, recorded));
    assert_eq!(via_a, via_b);
    let samples = via_a.values().next().expect("the recorded series");
    assert!(samples.len() >= 5, "{samples:?}");
    let phase = samples[0].0.rem_euclid(1000);
    for pair in samples.windows(2) {
        let step = pair[1].0 - pair[0].0;
        assert!(step > 0 && step % 1000 == 0, "one sample per 1 s slot: {samples:?}");
    }
    assert!(samples.iter().all(|&(t, v)| t.rem_euclid(1000) == phase && f64::from_bits(v) == 7.0), "{samples:?}");
    for base in [&base_a, &base_b] {
        assert!(metric(base, "prometheus_rule_group_iterations_total{") >= 5.0, "{base} evaluates the group");
    }

    // (c) A node started later joins the alerts where they stand.
    let c = node("node-c");
    let base_c = c.url("");
    let on_c = eventually(15, "node C holds both alerts", || {
        let found = alerts(&base_c);
        (found.len() == 2).then_some(found)
    });
    let on_a = alerts(&base_a);
    assert_eq!(on_c, on_a, "node C reports the states and activeAt of node A");
    assert_eq!(on_c["LoadHeld"].0, "pending");
    assert_eq!(on_c["LoadHigh"], firing);
    eventually(10, "node C sent its copy of the firing alert", || {
        (metric(&base_c, "prometheus_notifications_sent_total{") >= 1.0).then_some(())
    });
    std::thread::sleep(Duration::from_secs(2));
    let shown = am.active("LoadHigh");
    assert_eq!(shown.len(), 1, "{shown:?}");
    assert_eq!(millis(shown[0]["startsAt"].as_str().unwrap()), starts_at, "{shown:?}");
    assert_eq!(webhook.received().len(), 1, "still one notification: {:?}", webhook.received());

    // (d) A group set through node A's ruler API: node B lists and evaluates it.
    let http = client();
    let resp = http
        .post(format!("{base_a}/prometheus/config/v1/rules/team"))
        .header("Content-Type", "application/yaml")
        .body(API_GROUP)
        .send()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 202, "{}", resp.text().unwrap_or_default());
    let group_url = |base: &str| format!("{base}/prometheus/config/v1/rules/team/from-the-api");
    let listed = eventually(15, "node B lists the group", || {
        let resp = http.get(group_url(&base_b)).send().ok()?;
        (resp.status().as_u16() == 200).then(|| resp.text().unwrap())
    });
    assert!(listed.contains("job:cluster_load:max"), "{listed}");
    eventually(15, "node B evaluates the group", || {
        let groups = get_json(&format!("{base_b}/api/v1/rules"))["data"]["groups"].clone();
        let group = groups.as_array()?.iter().find(|g| g["name"] == "from-the-api")?.clone();
        (group["file"] == "team" && group["rules"][0]["health"] == "ok").then_some(())
    });
    let max = eventually(15, "the group's output", || {
        let found = export(&base_b, r#"{__name__="job:cluster_load:max"}"#);
        found.into_values().next().filter(|s| !s.is_empty())
    });
    assert!(max.iter().all(|&(_, v)| f64::from_bits(v) == 4.0), "{max:?}");
    // Deleted through node B: node A lets it go.
    let resp = http.delete(format!("{base_b}/prometheus/config/v1/rules/team")).send().unwrap();
    assert_eq!(resp.status().as_u16(), 202);
    eventually(15, "node A no longer lists the group", || {
        (http.get(group_url(&base_a)).send().ok()?.status().as_u16() == 404).then_some(())
    });
    eventually(15, "node A no longer evaluates it", || {
        let groups = get_json(&format!("{base_a}/api/v1/rules"))["data"]["groups"].clone();
        groups.as_array()?.iter().all(|g| g["name"] != "from-the-api").then_some(())
    });

    // (e) A tenant's group, set through node A, is node B's for that tenant alone, and reads
    // that tenant's series alone (its own load of 9 against the default tenant's 4 and 3).
    let now = chrono::Utc::now().timestamp_millis();
    let body = snappy_body(&proto::WriteRequest {
        timeseries: vec![series(&[("__name__", "cluster_load"), ("instance", "i9"), ("job", "api")], &[(now, 9.0)])],
        metadata: vec![],
    });
    let mut headers = V1_HEADERS.to_vec();
    headers.push(("X-Scope-OrgID", "team-x"));
    let (status, _, text) = post(&format!("{base_a}/api/v1/write"), &headers, body);
    assert_eq!(status, 204, "{text}");
    let resp = http
        .post(format!("{base_a}/prometheus/config/v1/rules/team"))
        .header("X-Scope-OrgID", "team-x")
        .body(API_GROUP)
        .send()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 202, "{}", resp.text().unwrap_or_default());
    eventually(15, "node B lists team-x's group for team-x", || {
        (http.get(group_url(&base_b)).header("X-Scope-OrgID", "team-x").send().ok()?.status().as_u16() == 200)
            .then_some(())
    });
    assert_eq!(http.get(group_url(&base_b)).send().unwrap().status().as_u16(), 404, "not the default tenant's");
    // The listing of every namespace reads the tenant's rows alone (its keys start with the
    // byte 0 and the tenant's name), the default tenant's those without that byte.
    let list = format!("{base_b}/prometheus/config/v1/rules");
    let listed = http.get(&list).header("X-Scope-OrgID", "team-x").send().unwrap();
    assert_eq!(listed.status().as_u16(), 200);
    let listed = listed.text().unwrap();
    assert!(listed.starts_with("team:") && listed.contains("from-the-api"), "{listed}");
    let resp = http
        .post(format!("{base_a}/prometheus/config/v1/rules/ops"))
        .body(API_GROUP.replace("from-the-api", "the-default-tenants"))
        .send()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 202, "{}", resp.text().unwrap_or_default());
    let default = http.get(&list).send().unwrap().text().unwrap();
    assert!(default.starts_with("ops:") && !default.contains("team:"), "{default}");
    let tenant = http.get(&list).header("X-Scope-OrgID", "team-x").send().unwrap().text().unwrap();
    assert!(!tenant.contains("ops:") && !tenant.contains("the-default-tenants"), "{tenant}");
    let query = |base: &str, tenant: &str| {
        let resp = http
            .get(format!("{base}/api/v1/query"))
            .query(&[("query", "job:cluster_load:max")])
            .header("X-Scope-OrgID", tenant)
            .send()
            .unwrap();
        let v: serde_json::Value = serde_json::from_str(&resp.text().unwrap()).unwrap();
        v["data"]["result"].as_array().cloned().unwrap_or_default()
    };
    let found = eventually(15, "team-x's recording", || Some(query(&base_b, "team-x")).filter(|r| !r.is_empty()));
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0]["value"][1], "9", "{found:?}");
    assert!(found[0]["metric"].get("__tenant__").is_none(), "{found:?}");

    eprintln!("clickhouse_rules: {:.1} s after ClickHouse started", started.elapsed().as_secs_f64());
    drop((a, b, c));
}
