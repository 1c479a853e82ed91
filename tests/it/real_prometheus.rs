//! The real Prometheus (Debian's 2.42) as saltdb's client: it scrapes node_exporter and saltdb's
//! own `/metrics` every second and remote-writes to saltdb; saltdb must then hold exactly the
//! series and samples Prometheus itself returns for the same selector and range. A second,
//! empty Prometheus reads the data back through `remote_read` and its own query API. Prometheus'
//! `STREAMED_XOR_CHUNKS` remote-read answers are decoded with saltdb's XOR decoder and compared,
//! which checks that codec against the real thing.
//!
//! Skipped with a `SKIPPED:` line when `prometheus` is not on PATH, except when `CI` is set:
//! then the missing binary is a failure (`.ci/run` installs it).

use std::collections::BTreeMap;
use std::fs::File;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use saltdb::remote::proto::{self, MatcherType, ResponseType};
use saltdb::remote::snappy_body;

use super::remote_write::decode_read_response;
use crate::common::*;

/// A peer process, killed by PID when dropped.
struct Peer {
    name: &'static str,
    child: Child,
    log: std::path::PathBuf,
}

impl Peer {
    fn spawn(name: &'static str, dir: &Path, cmd: &mut Command) -> Self {
        let log = dir.join(format!("{name}.log"));
        let out = File::create(&log).unwrap();
        let child =
            cmd.stdout(out.try_clone().unwrap()).stderr(out).spawn().unwrap_or_else(|e| panic!("starting {name}: {e}"));
        Self { name, child, log }
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    fn wait_ready(&mut self, url: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("{} exited with {status}:\n{}", self.name, self.log_tail());
            }
            if client().get(url).send().is_ok_and(|r| r.status().is_success()) {
                return;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        panic!("{} not ready at {url}:\n{}", self.name, self.log_tail());
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn on_path(bin: &str) -> bool {
    Command::new(bin).arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok()
}

/// Returns false (after announcing the skip) when the peers are missing outside CI; fails in CI.
fn peers_available() -> bool {
    let missing: Vec<&str> = ["prometheus", "prometheus-node-exporter"].into_iter().filter(|b| !on_path(b)).collect();
    if missing.is_empty() {
        return true;
    }
    crate::skip::skip(
        "real_prometheus::prometheus_remote_writes_to_saltdb_and_reads_back",
        &format!("{} not on PATH", missing.join(", ")),
        "apt-get install prometheus prometheus-node-exporter",
    );
    false
}

fn prometheus(dir: &Path, name: &'static str, config: &str) -> (Peer, String) {
    let port = free_port();
    let cfg = dir.join(format!("{name}.yml"));
    std::fs::write(&cfg, config).unwrap();
    let mut peer = Peer::spawn(
        name,
        dir,
        Command::new("prometheus")
            .arg(format!("--config.file={}", cfg.display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg(format!("--storage.tsdb.path={}", dir.join(format!("{name}-data")).display()))
            .arg("--storage.tsdb.retention.time=15d"),
    );
    let base = format!("http://127.0.0.1:{port}");
    peer.wait_ready(&format!("{base}/-/ready"));
    (peer, base)
}

/// Series -> samples (ts, value bits) from a Prometheus API matrix.
fn matrix(base: &str, query: &str, time_ms: i64) -> Exported {
    let resp: serde_json::Value = client()
        .post(format!("{base}/api/v1/query"))
        .form(&[("query", query), ("time", &format!("{:.3}", time_ms as f64 / 1000.0))])
        .send()
        .unwrap()
        .text()
        .unwrap()
        .parse::<serde_json::Value>()
        .unwrap();
    assert_eq!(resp["status"], "success", "{query}: {resp}");
    let mut out = Exported::new();
    for r in resp["data"]["result"].as_array().unwrap() {
        let metric: BTreeMap<String, String> =
            r["metric"].as_object().unwrap().iter().map(|(k, v)| (k.clone(), v.as_str().unwrap().to_owned())).collect();
        let samples = r["values"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                let ts = (p[0].as_f64().unwrap() * 1000.0).round() as i64;
                let v: f64 = match p[1].as_str().unwrap() {
                    "NaN" => f64::NAN,
                    "+Inf" => f64::INFINITY,
                    "-Inf" => f64::NEG_INFINITY,
                    s => s.parse().unwrap(),
                };
                (ts, v.to_bits())
            })
            .collect();
        out.insert(metric, samples);
    }
    out
}

/// Drops staleness markers (the query API never returns them) and folds every NaN to one
/// pattern (the API prints them all as "NaN").
fn comparable(mut e: Exported) -> Exported {
    for samples in e.values_mut() {
        samples.retain(|&(_, bits)| bits != saltdb::sample::STALE_NAN_BITS);
        for s in samples.iter_mut() {
            if f64::from_bits(s.1).is_nan() {
                s.1 = f64::NAN.to_bits();
            }
        }
    }
    e.retain(|_, s| !s.is_empty());
    e
}

/// A readable difference between two series sets.
fn diff(left: &Exported, right: &Exported) -> String {
    let mut out = String::new();
    for (k, v) in left {
        match right.get(k) {
            None => out += &format!("only in Prometheus: {k:?} ({} samples)\n", v.len()),
            Some(w) if w != v => out += &format!("differs: {k:?}\n  prometheus {v:?}\n  saltdb     {w:?}\n"),
            _ => {}
        }
    }
    for k in right.keys().filter(|k| !left.contains_key(*k)) {
        out += &format!("only in saltdb: {k:?}\n");
    }
    out
}

fn export_range(base: &str, selector: &str, start_ms: i64, end_ms: i64) -> Exported {
    let resp = client()
        .get(format!("{base}/api/v1/export"))
        .query(&[
            ("match[]", selector),
            ("start", &format!("{:.3}", start_ms as f64 / 1000.0)),
            ("end", &format!("{:.3}", end_ms as f64 / 1000.0)),
        ])
        .send()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    parse_lines(&resp.text().unwrap())
}

fn streamed_read(base: &str, start: i64, end: i64) -> Exported {
    let req = proto::ReadRequest {
        queries: vec![proto::Query {
            start_timestamp_ms: start,
            end_timestamp_ms: end,
            matchers: vec![proto::LabelMatcher {
                r#type: MatcherType::Eq as i32,
                name: "job".into(),
                value: "node".into(),
            }],
            hints: None,
        }],
        accepted_response_types: vec![ResponseType::StreamedXorChunks as i32],
    };
    let resp = client()
        .post(format!("{base}/api/v1/read"))
        .header("Content-Type", "application/x-protobuf")
        .header("Content-Encoding", "snappy")
        .header("X-Prometheus-Remote-Read-Version", "0.1.0")
        .body(snappy_body(&req))
        .send()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200, "streamed remote read from {base}");
    let ct = resp.headers()["content-type"].to_str().unwrap().to_owned();
    let mut out = decode_read_response(&ct, &resp.bytes().unwrap());
    // Chunks cover whole chunk time ranges; keep the asked range only.
    for s in out.values_mut() {
        s.retain(|&(t, _)| (start..=end).contains(&t));
    }
    out.retain(|_, s| !s.is_empty());
    out
}

#[test]
fn prometheus_remote_writes_to_saltdb_and_reads_back() {
    if !peers_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    remote_write_and_read_back(dir.path(), &["--retention", "0"], "");
}

/// The same with saltdb on the ClickHouse backend (two real shards).
#[test]
fn prometheus_remote_writes_to_saltdb_on_clickhouse_and_reads_back() {
    let test = "real_prometheus::prometheus_remote_writes_to_saltdb_on_clickhouse_and_reads_back";
    if !peers_available() || !crate::peers::installed("clickhouse-server", test, "clickhouse-server") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let shards = crate::clickhouse_cluster::start(&dir.path().join("clickhouse"), 2);
    let urls = shards.iter().map(|s| s.url.as_str()).collect::<Vec<_>>().join(",");
    remote_write_and_read_back(
        dir.path(),
        &["--retention", "0", "--storage", "clickhouse", "--clickhouse-url", &urls],
        " on ClickHouse",
    );
}

/// Prometheus scrapes node_exporter and saltdb (started with `args`) and remote-writes to it;
/// saltdb must then answer exactly what Prometheus holds, through export, streamed remote read
/// and a second Prometheus reading through `remote_read`.
fn remote_write_and_read_back(dir: &Path, args: &[&str], what: &str) {
    let saltdb = Binary::spawn(&dir.join("saltdb"), args);
    let saltdb_base = saltdb.url("");

    let ne_port = free_port();
    let mut node_exporter = Peer::spawn(
        "node_exporter",
        dir,
        Command::new("prometheus-node-exporter")
            .arg(format!("--web.listen-address=127.0.0.1:{ne_port}"))
            .arg("--no-collector.systemd"),
    );
    node_exporter.wait_ready(&format!("http://127.0.0.1:{ne_port}/metrics"));

    let config = crate::peers::scrape_and_remote_write_config(ne_port, saltdb.addr);
    let (writer, prom_base) = prometheus(dir, "prometheus-writer", &config);
    // Prometheus applies new scrape targets up to 5 s after start: wait for the first scrapes.
    let deadline = Instant::now() + Duration::from_secs(60);
    while matrix(&prom_base, "up[1m]", chrono::Utc::now().timestamp_millis()).len() < 2 {
        assert!(Instant::now() < deadline, "Prometheus never scraped:\n{}", writer.log_tail());
        std::thread::sleep(Duration::from_millis(250));
    }
    let started = chrono::Utc::now().timestamp_millis();
    std::thread::sleep(Duration::from_secs(8));

    // Compare a closed range that remote-write has had time to deliver.
    let end = chrono::Utc::now().timestamp_millis() - 3_000;
    let range_s = (end - started) / 1000;
    assert!(range_s >= 4, "range too short: {range_s}s");
    let start = end - range_s * 1000;
    let selector = r#"{job=~"node|saltdb"}"#;
    let want = comparable(matrix(&prom_base, &format!("{selector}[{range_s}s]"), end));
    assert!(want.len() > 200, "node_exporter and saltdb should give hundreds of series, got {}", want.len());
    assert!(want.keys().any(|k| k.get("__name__").map(String::as_str) == Some("saltdb_samples_ingested_total")));
    let mut got = Exported::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        got = comparable(export_range(&saltdb_base, selector, start, end));
        if got == want {
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    assert!(got == want, "saltdb differs from Prometheus for {selector} over {range_s}s:\n{}", diff(&want, &got));
    let samples: usize = want.values().map(Vec::len).sum();
    println!("real_prometheus: {} series, {samples} samples equal in Prometheus and saltdb{what}", want.len());

    // Prometheus' own STREAMED_XOR_CHUNKS answer, decoded by saltdb's XOR decoder, equals
    // saltdb's streamed answer (staleness markers included, bit for bit).
    let theirs = streamed_read(&prom_base, start, end);
    let ours = streamed_read(&saltdb_base, start, end);
    assert!(theirs.len() > 100);
    assert!(theirs == ours, "streamed remote read differs:\n{}", diff(&theirs, &ours));

    // Metadata arrived through remote-write.
    let md: serde_json::Value = get_json(&format!("{saltdb_base}/api/v1/metadata?metric=node_cpu_seconds_total"));
    assert_eq!(md["data"]["node_cpu_seconds_total"][0]["type"], "counter", "{md}");

    // Nothing was rejected.
    let m = client().get(format!("{saltdb_base}/metrics")).send().unwrap().text().unwrap();
    assert!(!m.contains("saltdb_write_requests_rejected_total{"), "rejections:\n{m}");
    drop(writer);

    // A second Prometheus with no data of its own reads through remote_read from saltdb.
    let config = format!("global: {{}}\nremote_read:\n  - url: {saltdb_base}/api/v1/read\n    read_recent: true\n");
    let (_reader, reader_base) = prometheus(dir, "prometheus-reader", &config);
    for query in [format!(r#"{{job="node"}}[{range_s}s]"#), format!(r#"up[{range_s}s]"#)] {
        let want_q = want
            .iter()
            .filter(|(k, _)| if query.starts_with("up") { k["__name__"] == "up" } else { k["job"] == "node" })
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect::<Exported>();
        let via = comparable(matrix(&reader_base, &query, end));
        assert!(!via.is_empty());
        assert!(via == want_q, "Prometheus reading {query} through remote_read differs:\n{}", diff(&want_q, &via));
    }
    drop(node_exporter);
    saltdb.terminate();
}
