//! Rules per tenant, as Mimir's ruler keeps them: each tenant sets its own rule groups through
//! the ruler API (Grafana's alerting UI with the tenant's data source), they are evaluated on
//! that tenant's series alone, what they record is written into that tenant, their alerts go to
//! Alertmanager with the tenant in `X-Scope-OrgID`, and no tenant sees or changes another's
//! groups; deleting a tenant deletes its rules. The operator's rule files still read every
//! tenant.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::alertmanager::Webhook;
use crate::common::*;

const OP: &str = "operator-secret";

/// `(tenant header, alertname, instance)` of every alert a stand-in Alertmanager received.
fn alerts_received(am: &Webhook) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    for (tenant, body) in am.received_by_tenant() {
        for a in body.as_array().into_iter().flatten() {
            let label = |n: &str| a["labels"][n].as_str().unwrap_or_default().to_owned();
            out.push((tenant.clone(), label("alertname"), label("instance")));
        }
    }
    out
}

/// How a request names who it is: tenant `a` by its token, any other tenant by the operator's
/// token and the header, the default tenant by the operator's token alone.
fn headers(tenant: &str) -> Vec<(&'static str, String)> {
    match tenant {
        "a" => vec![("Authorization", "Bearer token-of-a".to_owned())],
        "default" => vec![("Authorization", format!("Bearer {OP}"))],
        t => vec![("Authorization", format!("Bearer {OP}")), ("X-Scope-OrgID", t.to_owned())],
    }
}

fn request(method: reqwest::Method, url: &str, tenant: &str, body: Option<&str>) -> (u16, String) {
    let mut req = client().request(method, url);
    for (k, v) in headers(tenant) {
        req = req.header(k, v);
    }
    if let Some(b) = body {
        req = req.header("Content-Type", "application/yaml").body(b.to_owned());
    }
    let resp = req.send().expect("request");
    (resp.status().as_u16(), resp.text().unwrap_or_default())
}

fn json_as(bin: &Binary, path: &str, tenant: &str) -> Value {
    let (status, text) = request(reqwest::Method::GET, &bin.url(path), tenant, None);
    assert_eq!(status, 200, "{path} as {tenant}: {text}");
    serde_json::from_str(&text).unwrap()
}

/// `(labels without __name__, value)` of an instant query as `tenant`.
fn query(bin: &Binary, expr: &str, tenant: &str) -> Vec<(String, f64)> {
    let v = json_as(bin, &format!("/api/v1/query?query={}", urlencoding(expr)), tenant);
    let mut out: Vec<(String, f64)> = v["data"]["result"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let mut m = s["metric"].as_object().unwrap().clone();
            m.remove("__name__");
            let labels = m.iter().map(|(k, v)| format!("{k}={}", v.as_str().unwrap())).collect::<Vec<_>>().join(",");
            (labels, s["value"][1].as_str().unwrap().parse().unwrap())
        })
        .collect();
    out.sort_by(|x, y| x.0.cmp(&y.0));
    out
}

fn urlencoding(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn until<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "not within 30 s: {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn import_up(bin: &Binary, tenant: &str, instance: &str, value: f64) {
    let now = chrono::Utc::now().timestamp_millis();
    let line = format!(
        "{{\"metric\":{{\"__name__\":\"up\",\"job\":\"node\",\"instance\":\"{instance}\"}},\"values\":[{value}],\"timestamps\":[{now}]}}\n"
    );
    let mut req = client().post(bin.url("/api/v1/import"));
    for (k, v) in headers(tenant) {
        req = req.header(k, v);
    }
    let resp = req.body(line).send().unwrap();
    assert_eq!(resp.status().as_u16(), 204, "{}", resp.text().unwrap_or_default());
}

const GROUP: &str = "name: node\ninterval: 1s\nrules:\n  - record: job:up:count\n    expr: count by (job) (up)\n  - alert: NodeDown\n    expr: up == 0\n";

#[test]
fn each_tenant_s_rules_read_and_write_its_own_series() {
    let dir = tempfile::tempdir().unwrap();
    let am = Webhook::start();
    let am_base = am.url.trim_end_matches("/hook").to_owned();
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, "a:token-of-a\n").unwrap();
    let operator_rules = dir.path().join("operator.yml");
    std::fs::write(
        &operator_rules,
        "groups:\n  - name: fleet\n    interval: 1s\n    rules:\n      - record: fleet:up:count\n        expr: count(up)\n",
    )
    .unwrap();
    let data = dir.path().join("data");
    let args = [
        "--tenants",
        "--tenant-tokens-file",
        tokens.to_str().unwrap(),
        "--read-token",
        OP,
        "--write-token",
        OP,
        "--rule-file",
        operator_rules.to_str().unwrap(),
        "--alertmanager-url",
        &am_base,
        "--enable-admin-api",
    ];
    let bin = Binary::spawn(&data, &args);
    import_up(&bin, "a", "a1", 0.0);
    import_up(&bin, "b", "b1", 1.0);
    import_up(&bin, "b", "b2", 1.0);
    import_up(&bin, "default", "d1", 1.0);

    // Each tenant sets a group of the same namespace and name; b's carries a label of its own.
    let ruler = bin.url("/prometheus/config/v1/rules/team");
    let (status, body) = request(reqwest::Method::POST, &ruler, "a", Some(GROUP));
    assert_eq!(status, 202, "{body}");
    let b_group = GROUP.replace("interval: 1s\n", "interval: 1s\nlabels:\n  owner: b\n");
    let (status, body) = request(reqwest::Method::POST, &ruler, "b", Some(&b_group));
    assert_eq!(status, 202, "{body}");

    // What each recorded comes from its own series and lands in its own tenant.
    let for_a = until("a's recording", || Some(query(&bin, "job:up:count", "a")).filter(|r| !r.is_empty()));
    assert_eq!(for_a, [("job=node".to_owned(), 1.0)]);
    let for_b = until("b's recording", || Some(query(&bin, "job:up:count", "b")).filter(|r| !r.is_empty()));
    assert_eq!(for_b, [("job=node,owner=b".to_owned(), 2.0)]);
    assert!(query(&bin, "job:up:count", "default").is_empty(), "the default tenant set no group");
    let both = query(&bin, "job:up:count", "a|b");
    assert_eq!(both, [("__tenant__=a,job=node".to_owned(), 1.0), ("__tenant__=b,job=node,owner=b".to_owned(), 2.0)]);
    // The operator's rule file reads every tenant.
    let fleet =
        until("the operator's recording", || Some(query(&bin, "fleet:up:count", "default")).filter(|r| !r.is_empty()));
    assert_eq!(fleet, [(String::new(), 4.0)]);

    // Alerts: a's instance is down; the alert reaches Alertmanager as a's, b has none.
    let sent = until("a's alert at Alertmanager", || {
        let alerts = alerts_received(&am);
        (!alerts.is_empty()).then_some(alerts)
    });
    assert!(sent.iter().all(|s| s == &("a".to_owned(), "NodeDown".to_owned(), "a1".to_owned())), "{sent:?}");
    let alerts_of = |t: &str| json_as(&bin, "/api/v1/alerts", t)["data"]["alerts"].as_array().unwrap().len();
    assert_eq!((alerts_of("a"), alerts_of("b"), alerts_of("default")), (1, 0, 0));

    // Listings: each tenant its own groups; the default tenant the operator's files.
    let groups_of = |t: &str| -> Vec<(String, String)> {
        let v = json_as(&bin, "/api/v1/rules", t);
        v["data"]["groups"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| (g["file"].as_str().unwrap().to_owned(), g["name"].as_str().unwrap().to_owned()))
            .collect()
    };
    assert_eq!(groups_of("a"), [("team".to_owned(), "node".to_owned())]);
    assert_eq!(groups_of("b"), [("team".to_owned(), "node".to_owned())]);
    assert_eq!(groups_of("default"), [(operator_rules.to_str().unwrap().to_owned(), "fleet".to_owned())]);
    let (_, a_text) = request(reqwest::Method::GET, &bin.url("/prometheus/config/v1/rules"), "a", None);
    assert!(a_text.contains("job:up:count") && !a_text.contains("owner"), "{a_text}");
    let (status, _) = request(reqwest::Method::GET, &bin.url("/prometheus/config/v1/rules"), "default", None);
    assert_eq!(status, 404, "the default tenant has no namespace");

    // A tenant's token cannot act for another, and no group writes into another tenant.
    let (status, body) = client()
        .post(&ruler)
        .header("Authorization", "Bearer token-of-a")
        .header("X-Scope-OrgID", "b")
        .body(GROUP)
        .send()
        .map(|r| (r.status().as_u16(), r.text().unwrap_or_default()))
        .unwrap();
    assert_eq!(status, 403, "{body}");
    let sneaky =
        GROUP.replace("expr: count by (job) (up)\n", "expr: count by (job) (up)\n    labels:\n      __tenant__: b\n");
    let (status, body) = request(reqwest::Method::POST, &ruler, "a", Some(&sneaky));
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("__tenant__"), "{body}");
    let (status, body) = request(reqwest::Method::POST, &bin.url("/prometheus/config/v1/rules/x"), "a|b", Some(GROUP));
    assert!(status == 400 || status == 403, "{status} {body}");

    // Per-tenant figures on /metrics.
    let metrics = client().get(bin.url("/metrics")).send().unwrap().text().unwrap();
    assert!(metrics.contains("prometheus_rule_group_rules{rule_group=\"team;node\",tenant=\"a\"} 2"), "{metrics}");
    assert!(metrics.contains("prometheus_rule_group_rules{rule_group=\"team;node\",tenant=\"b\"} 2"), "{metrics}");

    // They survive kill -9, each still its tenant's; deleting a's namespace leaves b's.
    bin.kill9();
    let bin = Binary::spawn(&data, &args);
    let ruler = bin.url("/prometheus/config/v1/rules/team");
    let (status, body) = request(reqwest::Method::DELETE, &ruler, "a", None);
    assert_eq!(status, 202, "{body}");
    let groups_of = |t: &str| json_as(&bin, "/api/v1/rules", t)["data"]["groups"].as_array().unwrap().len();
    assert_eq!((groups_of("a"), groups_of("b")), (0, 1));
    let (status, b_text) = request(reqwest::Method::GET, &ruler, "b", None);
    assert_eq!(status, 200, "{b_text}");
    assert!(b_text.contains("owner: b"), "{b_text}");

    // Deleting tenant b deletes its rules first.
    let (status, body) = request(reqwest::Method::POST, &bin.url("/api/v1/admin/tsdb/delete_tenant"), "b", None);
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["data"]["ruleNamespaces"], 1, "{v}");
    assert_eq!(groups_of("b"), 0);
    assert!(query(&bin, "up", "b").is_empty());
}

/// A tenant's rules write as the tenant: their outputs count against its limits
/// (`--tenant-limits-file`), so a recording rule cannot take a tenant past its series limit. The
/// rule's evaluation fails naming the limit, nothing of it is stored, and the refusal is counted
/// under the tenant.
#[test]
fn a_tenant_s_rule_outputs_count_against_its_limits() {
    let dir = tempfile::tempdir().unwrap();
    let limits = dir.path().join("limits.yml");
    std::fs::write(&limits, "overrides:\n  c:\n    max_global_series_per_user: 3\n").unwrap();
    let data = dir.path().join("data");
    let bin = Binary::spawn(&data, &["--tenants", "--tenant-limits-file", limits.to_str().unwrap()]);
    let now = chrono::Utc::now().timestamp_millis();
    let lines: String = (0..3)
        .map(|i| {
            let line = serde_json::json!({"metric": {"__name__": "up", "instance": format!("c{i}")}, "values": [1.0], "timestamps": [now]});
            format!("{line}\n")
        })
        .collect();
    for tenant in ["c", "d"] {
        let (status, _, text) =
            post(&bin.url("/api/v1/import"), &[("X-Scope-OrgID", tenant)], lines.clone().into_bytes());
        assert_eq!(status, 204, "{tenant}: {text}");
    }
    let group = "name: copy\ninterval: 1s\nrules:\n  - record: instance:up:copy\n    expr: up\n";
    for tenant in ["c", "d"] {
        let resp = client()
            .post(bin.url("/prometheus/config/v1/rules/ns"))
            .header("X-Scope-OrgID", tenant)
            .body(group)
            .send()
            .unwrap();
        assert_eq!(resp.status().as_u16(), 202, "{}", resp.text().unwrap_or_default());
    }
    let rule_of = |tenant: &str| -> Value {
        let resp = client().get(bin.url("/api/v1/rules")).header("X-Scope-OrgID", tenant).send().unwrap();
        let v: Value = serde_json::from_str(&resp.text().unwrap()).unwrap();
        v["data"]["groups"][0]["rules"][0].clone()
    };
    let refused = until("c's rule refused", || Some(rule_of("c")).filter(|r| r["health"] == "err"));
    let error = refused["lastError"].as_str().unwrap_or_default();
    assert!(error.contains("max_global_series_per_user") && error.contains("\"c\""), "{refused}");
    until("d's rule written", || Some(rule_of("d")).filter(|r| r["health"] == "ok"));
    let copies = |tenant: &str| -> usize {
        let resp = client()
            .get(bin.url("/api/v1/query"))
            .query(&[("query", "instance:up:copy")])
            .header("X-Scope-OrgID", tenant)
            .send()
            .unwrap();
        let v: Value = serde_json::from_str(&resp.text().unwrap()).unwrap();
        v["data"]["result"].as_array().map_or(0, Vec::len)
    };
    until("d's copies", || (copies("d") == 3).then_some(()));
    assert_eq!(copies("c"), 0, "nothing of the refused output is stored");
    let metrics = client().get(bin.url("/metrics")).send().unwrap().text().unwrap();
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("saltdb_tenant_refused_total{reason=\"tenant_series_limit\",tenant=\"c\"}")),
        "{metrics}"
    );
}
