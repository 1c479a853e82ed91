//! Alerts sent by saltdb's notifier reach the real Alertmanager (Debian's 0.25) as Prometheus'
//! would: Alertmanager runs on loopback without gossip, routing every alert at once
//! (`group_wait: 0s`) to a webhook served by this test.
//!
//! - a firing alert shows in `GET /api/v2/alerts?active=true` with its labels (external labels
//!   added where the alert lacks them), annotations, generator URL and start time, and the
//!   webhook receives it as `firing`;
//! - the same alert sent resolved leaves the active alerts and the webhook receives `resolved`;
//! - the notifier counted both sends, no error, nothing dropped.
//!
//! Skipped (a `SKIPPED:` line) without `prometheus-alertmanager` on PATH outside CI; a failure
//! in CI (`.ci/run` installs it).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use saltdb::labels::{Label, Labels};
use saltdb::rules::alert::{Alert, AlertState};
use saltdb::rules::group::Outgoing;
use saltdb::rules::notify::payload::rfc3339_millis;
use saltdb::rules::notify::{Notifier, NotifierConfig, NotifierMetrics};
use serde_json::Value;

use crate::common::*;
use crate::peers::{free_port, installed};

const TEST: &str = "alertmanager::alerts_reach_the_real_alertmanager_and_resolve";
const BIN: &str = "prometheus-alertmanager";

/// An Alertmanager process, killed on drop.
pub(crate) struct Alertmanager {
    child: Child,
    pub(crate) base: String,
}

impl Alertmanager {
    /// Starts Alertmanager routing every alert to `webhook` and waits until it is ready.
    pub(crate) fn start(dir: &Path, webhook: &str) -> Self {
        crate::watchdog::watch();
        let config = format!(
            r#"
route:
  receiver: hook
  group_by: [alertname]
  group_wait: 0s
  group_interval: 1s
  repeat_interval: 1h
receivers:
  - name: hook
    webhook_configs:
      - url: {webhook}
        send_resolved: true
"#
        );
        std::fs::write(dir.join("am.yml"), config).unwrap();
        let port = free_port();
        let log = std::fs::File::create(dir.join("alertmanager.log")).unwrap();
        let child = Command::new(BIN)
            .arg(format!("--config.file={}", dir.join("am.yml").display()))
            .arg(format!("--storage.path={}", dir.join("data").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--cluster.listen-address=")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start prometheus-alertmanager");
        let mut am = Self { child, base: format!("http://127.0.0.1:{port}") };
        let log = || std::fs::read_to_string(dir.join("alertmanager.log")).unwrap_or_default();
        let deadline = Instant::now() + Duration::from_secs(60);
        while !client().get(format!("{}/-/ready", am.base)).send().is_ok_and(|r| r.status().is_success()) {
            if let Ok(Some(status)) = am.child.try_wait() {
                panic!("alertmanager exited with {status}: {}", log());
            }
            assert!(Instant::now() < deadline, "alertmanager did not become ready: {}", log());
            std::thread::sleep(Duration::from_millis(100));
        }
        am
    }

    /// The active alerts named `alertname`.
    pub(crate) fn active(&self, alertname: &str) -> Vec<Value> {
        let alerts = get_json(&format!("{}/api/v2/alerts?active=true", self.base));
        let alerts = alerts.as_array().cloned().unwrap_or_default();
        alerts.into_iter().filter(|a| a["labels"]["alertname"] == alertname).collect()
    }
}

impl Drop for Alertmanager {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A webhook receiver on loopback: records every JSON body with its `X-Scope-OrgID` header
/// (empty when absent), answers 200. It also stands in for an Alertmanager (any path).
pub(crate) struct Webhook {
    pub(crate) url: String,
    bodies: Arc<Mutex<Vec<(String, Value)>>>,
}

impl Webhook {
    pub(crate) fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        let bodies = Arc::new(Mutex::new(Vec::new()));
        let recorded = Arc::clone(&bodies);
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let recorded = Arc::clone(&recorded);
                std::thread::spawn(move || serve(stream, &recorded));
            }
        });
        Self { url, bodies }
    }

    /// Every notification received so far.
    pub(crate) fn received(&self) -> Vec<Value> {
        self.bodies.lock().unwrap().iter().map(|(_, b)| b.clone()).collect()
    }

    /// Every body received so far, with its `X-Scope-OrgID` header.
    pub(crate) fn received_by_tenant(&self) -> Vec<(String, Value)> {
        self.bodies.lock().unwrap().clone()
    }

    /// Waits up to 30 s for a notification with `status` (`firing`, `resolved`).
    pub(crate) fn wait_for(&self, status: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some((_, b)) = self.bodies.lock().unwrap().iter().find(|(_, b)| b["status"] == status) {
                return b.clone();
            }
            let seen = self.received();
            assert!(Instant::now() < deadline, "no {status} notification within 30 s; received: {seen:?}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// Answers the requests of one connection until Alertmanager closes it.
fn serve(stream: TcpStream, recorded: &Mutex<Vec<(String, Value)>>) {
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let (mut length, mut tenant) = (0, String::new());
        loop {
            line.clear();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            let header = line.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':') {
                if name.eq_ignore_ascii_case("content-length") {
                    length = value.trim().parse().unwrap();
                } else if name.eq_ignore_ascii_case("x-scope-orgid") {
                    tenant = value.trim().to_owned();
                }
            }
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body).unwrap();
        recorded.lock().unwrap().push((tenant, serde_json::from_slice(&body).unwrap_or(Value::Null)));
        writer.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n").unwrap();
    }
}

/// The alert, firing since `fired_at_ms`, valid for 4 minutes from `now_ms`.
fn firing(fired_at_ms: i64, now_ms: i64) -> Outgoing {
    Outgoing {
        alert: Alert {
            labels: Labels::from_trusted(vec![
                Label::new("alertname", "DiskFull"),
                Label::new("instance", "db1:9100"),
                Label::new("severity", "page"),
            ]),
            annotations: vec![
                Label::new("description", "db1:9100 has 3% free"),
                Label::new("summary", "Disk almost full"),
            ],
            value: 0.03,
            state: AlertState::Firing,
            active_at_ms: fired_at_ms - 60_000,
            fired_at_ms: Some(fired_at_ms),
            resolved_at_ms: None,
            keep_firing_since_ms: None,
            last_sent_at_ms: Some(now_ms),
            valid_until_ms: now_ms + 240_000,
        },
        expr: "disk_free_ratio < 0.1".to_owned(),
        tenant: None,
    }
}

fn map(value: &Value) -> BTreeMap<String, String> {
    serde_json::from_value(value.clone()).unwrap_or_default()
}

fn pairs(items: &[(&str, &str)]) -> BTreeMap<String, String> {
    items.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
}

/// Polls `check` for up to 30 s.
fn until<T>(what: &str, check: impl Fn() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(t) = check() {
            return t;
        }
        assert!(Instant::now() < deadline, "not within 30 s: {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn alerts_reach_the_real_alertmanager_and_resolve() {
    if !installed(BIN, TEST, "prometheus-alertmanager") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let webhook = Webhook::start();
    let am = Alertmanager::start(dir.path(), &webhook.url);
    let metrics = NotifierMetrics::detached();
    let config = NotifierConfig {
        alertmanagers: vec![am.base.clone()],
        external_labels: pairs(&[("replica", "r1"), ("instance", "not-the-alerts")]),
        external_url: "http://saltdb.example:9201".to_owned(),
        ..NotifierConfig::default()
    };
    let notifier = Notifier::new(config, metrics.clone()).unwrap();
    let now_ms = chrono::Utc::now().timestamp_millis();
    let fired_at_ms = now_ms - 30_123;
    let mut alert = firing(fired_at_ms, now_ms);
    notifier.send(vec![alert.clone()]);

    let labels = pairs(&[("alertname", "DiskFull"), ("instance", "db1:9100"), ("replica", "r1"), ("severity", "page")]);
    let annotations = pairs(&[("description", "db1:9100 has 3% free"), ("summary", "Disk almost full")]);
    let generator = "http://saltdb.example:9201/graph?g0.expr=disk_free_ratio+%3C+0.1&g0.tab=1";
    let shown = until("the alert is active in Alertmanager", || am.active("DiskFull").into_iter().next());
    assert_eq!(map(&shown["labels"]), labels, "{shown}");
    assert_eq!(map(&shown["annotations"]), annotations, "{shown}");
    assert_eq!(shown["generatorURL"], generator, "{shown}");
    assert_eq!(shown["status"]["state"], "active", "{shown}");
    let started: chrono::DateTime<chrono::Utc> = shown["startsAt"].as_str().unwrap().parse().unwrap();
    assert_eq!(started.timestamp_millis(), fired_at_ms, "{shown} vs {}", rfc3339_millis(fired_at_ms));

    let fired = webhook.wait_for("firing");
    let sent = &fired["alerts"][0];
    assert_eq!((map(&sent["labels"]), map(&sent["annotations"])), (labels.clone(), annotations.clone()), "{fired}");
    assert_eq!(sent["generatorURL"], generator, "{fired}");

    let resolved_at_ms = chrono::Utc::now().timestamp_millis();
    alert.alert.state = AlertState::Inactive;
    alert.alert.resolved_at_ms = Some(resolved_at_ms);
    notifier.send(vec![alert]);
    until("the alert leaves the active alerts", || am.active("DiskFull").is_empty().then_some(()));
    let resolved = webhook.wait_for("resolved");
    let sent = &resolved["alerts"][0];
    assert_eq!((sent["status"].as_str(), map(&sent["labels"])), (Some("resolved"), labels), "{resolved}");
    let ended: chrono::DateTime<chrono::Utc> = sent["endsAt"].as_str().unwrap().parse().unwrap();
    assert_eq!(ended.timestamp_millis(), resolved_at_ms, "{resolved}");

    let url = &notifier.alertmanagers()[0];
    assert_eq!(url, &format!("{}/api/v2/alerts", am.base));
    assert_eq!((metrics.sent_count(url), metrics.error_count(url), metrics.dropped_count()), (2, 0, 0));
    notifier.stop();
}

/// The value of the first line of `/metrics` starting with `series` (0 when absent).
fn metric(base: &str, series: &str) -> f64 {
    let text = client().get(format!("{base}/metrics")).send().unwrap().text().unwrap();
    text.lines().find(|l| l.starts_with(series)).and_then(|l| l.rsplit(' ').next()?.parse().ok()).unwrap_or(0.0)
}

fn import_up(base: &str, instance: &str, value: f64) {
    let now = chrono::Utc::now().timestamp_millis();
    let line = format!(
        "{{\"metric\":{{\"__name__\":\"up\",\"job\":\"node\",\"instance\":\"{instance}\"}},\"values\":[{value}],\"timestamps\":[{now}]}}\n"
    );
    let (status, body) = import(base, line);
    assert_eq!(status, 204, "{body}");
}

/// A server evaluating an alerting rule pages through the real Alertmanager with its templates
/// expanded and its external labels; after `kill -9` the restored firing alert is not sent
/// again before the resend delay; when its series recovers, Alertmanager hears it resolved.
#[test]
fn a_server_pages_through_alertmanager_and_a_restart_does_not_page_again() {
    if !installed(BIN, "alertmanager::a_server_pages_through_alertmanager", "prometheus-alertmanager") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let webhook = Webhook::start();
    let am = Alertmanager::start(dir.path(), &webhook.url);
    let rules = dir.path().join("rules.yml");
    std::fs::write(
        &rules,
        r#"groups:
  - name: node
    interval: 1s
    rules:
      - alert: NodeDown
        expr: up == 0
        labels:
          severity: page
        annotations:
          summary: "{{ $labels.instance }} of {{ $labels.job }} is down (up = {{ $value }})"
"#,
    )
    .unwrap();
    let args = [
        "--rule-file",
        rules.to_str().unwrap(),
        "--alertmanager-url",
        &am.base,
        "--external-label",
        "source=saltdb",
        "--external-url",
        "http://saltdb.example:9201",
    ];
    let data = dir.path().join("saltdb");
    let server = Binary::spawn(&data, &args);
    import_up(&server.url(""), "n1", 0.0);

    let active = until("the alert in Alertmanager", || am.active("NodeDown").into_iter().next());
    assert_eq!(
        map(&active["labels"]),
        pairs(&[
            ("alertname", "NodeDown"),
            ("instance", "n1"),
            ("job", "node"),
            ("severity", "page"),
            ("source", "saltdb")
        ])
    );
    assert_eq!(active["annotations"]["summary"], "n1 of node is down (up = 0)");
    assert!(active["generatorURL"].as_str().unwrap().starts_with("http://saltdb.example:9201/graph?g0.expr=up"));
    let page = webhook.wait_for("firing");
    assert_eq!(page["alerts"][0]["labels"]["instance"], "n1");
    assert!(metric(&server.url(""), "prometheus_notifications_sent_total{") >= 1.0);
    server.kill9();

    let server = Binary::spawn(&data, &args);
    let base = server.url("");
    std::thread::sleep(Duration::from_millis(3500));
    let alerts = get_json(&format!("{base}/api/v1/alerts"));
    assert_eq!(alerts["data"]["alerts"][0]["state"], "firing", "{alerts}");
    assert_eq!(metric(&base, "prometheus_notifications_sent_total{"), 0.0, "re-sent before the resend delay");
    assert_eq!(am.active("NodeDown").len(), 1);

    import_up(&base, "n1", 1.0);
    webhook.wait_for("resolved");
    until("the alert resolved in Alertmanager", || am.active("NodeDown").is_empty().then_some(()));
}
