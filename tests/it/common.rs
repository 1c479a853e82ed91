//! Test harness: servers in-process and as the real binary, and an HTTP client.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use saltdb::remote::proto;
use saltdb::server::{Server, ServerConfig};
use saltdb::storage::StorageConfig;

/// A server running inside the test process, on its own runtime.
pub struct InProcess {
    pub runtime: tokio::runtime::Runtime,
    pub server: Option<Server>,
    pub addr: SocketAddr,
}

impl InProcess {
    pub fn start(storage: StorageConfig) -> Self {
        let config = ServerConfig::new("127.0.0.1:0".parse().unwrap(), storage);
        Self::start_with(runtime(), config)
    }

    pub fn start_with(runtime: tokio::runtime::Runtime, config: ServerConfig) -> Self {
        crate::watchdog::watch();
        let server = runtime.block_on(Server::start(config)).expect("server starts");
        let addr = server.addr();
        Self { runtime, server: Some(server), addr }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    pub fn stop(mut self) {
        if let Some(s) = self.server.take() {
            self.runtime.block_on(s.shutdown()).expect("clean shutdown");
        }
    }
}

/// The runtime a test server (or a handler called directly) runs on.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

/// Storage settings for tests: keep data forever (test data may be old), default buckets.
pub fn storage_config(dir: &Path) -> StorageConfig {
    let mut c = StorageConfig::new(dir.to_path_buf());
    c.retention_ms = None;
    c
}

/// The real `saltdb` binary.
pub struct Binary {
    pub child: Child,
    pub addr: SocketAddr,
}

impl Binary {
    pub fn spawn(data_dir: &Path, extra: &[&str]) -> Self {
        Self::try_spawn(data_dir, extra).unwrap_or_else(|stderr| panic!("saltdb did not start: {stderr}"))
    }

    /// Starts the binary; `Err(stderr)` if it exits before listening.
    pub fn try_spawn(data_dir: &Path, extra: &[&str]) -> Result<Self, String> {
        Self::start(data_dir, extra, "warn", None)
    }

    /// Starts the binary with its log (`RUST_LOG=rust_log`, no colours) appended to `log`, which
    /// nothing has to drain, so a chatty server never blocks on a full pipe.
    pub fn spawn_logged(data_dir: &Path, extra: &[&str], rust_log: &str, log: &Path) -> Self {
        Self::start(data_dir, extra, rust_log, Some(log))
            .unwrap_or_else(|stderr| panic!("saltdb did not start: {stderr}"))
    }

    fn start(data_dir: &Path, extra: &[&str], rust_log: &str, log: Option<&Path>) -> Result<Self, String> {
        crate::watchdog::watch();
        let stderr = match log {
            Some(path) => Stdio::from(
                std::fs::OpenOptions::new().create(true).append(true).open(path).expect("open the server log"),
            ),
            None => Stdio::piped(),
        };
        let mut child = Command::new(env!("CARGO_BIN_EXE_saltdb"))
            .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(data_dir)
            .args(extra)
            .env("RUST_LOG", rust_log)
            .env("NO_COLOR", "1")
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("spawn saltdb");
        let stdout = child.stdout.take().expect("stdout");
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).expect("read stdout");
        match line.trim().strip_prefix("saltdb listening on ") {
            Some(addr) => Ok(Self { addr: addr.parse().expect("address"), child }),
            None => {
                let out = child.wait_with_output().expect("wait");
                let stderr = match log {
                    Some(path) => std::fs::read_to_string(path).unwrap_or_default(),
                    None => String::from_utf8_lossy(&out.stderr).into_owned(),
                };
                Err(format!("status {:?}, stderr: {stderr}", out.status))
            }
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    /// SIGKILL: no shutdown hook runs.
    pub fn kill9(mut self) {
        self.child.kill().expect("kill -9");
        self.child.wait().expect("reap");
    }

    /// SIGTERM and wait for a clean exit.
    pub fn terminate(mut self) {
        let pid = self.child.id().to_string();
        Command::new("kill").args(["-TERM", &pid]).status().expect("kill -TERM");
        let status = self.child.wait().expect("wait");
        assert!(status.success(), "saltdb exited with {status:?} after SIGTERM");
    }
}

impl Drop for Binary {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn client() -> reqwest::blocking::Client {
    crate::watchdog::watch();
    reqwest::blocking::Client::builder().timeout(Duration::from_secs(60)).build().unwrap()
}

/// Headers of a remote-write 1.0 request.
pub const V1_HEADERS: [(&str, &str); 3] = [
    ("Content-Type", "application/x-protobuf"),
    ("Content-Encoding", "snappy"),
    ("X-Prometheus-Remote-Write-Version", "0.1.0"),
];

/// Headers of a remote-write 2.0 request.
pub const V2_HEADERS: [(&str, &str); 3] = [
    ("Content-Type", "application/x-protobuf;proto=io.prometheus.write.v2.Request"),
    ("Content-Encoding", "snappy"),
    ("X-Prometheus-Remote-Write-Version", "2.0.0"),
];

/// A remote-write 1.0 series.
pub fn series(labels: &[(&str, &str)], samples: &[(i64, f64)]) -> proto::TimeSeries {
    proto::TimeSeries {
        labels: labels.iter().map(|(n, v)| proto::Label { name: (*n).into(), value: (*v).into() }).collect(),
        samples: samples.iter().map(|&(t, v)| proto::Sample { value: v, timestamp: t }).collect(),
        ..Default::default()
    }
}

/// Posts a body with the given headers; returns status, headers and body text.
pub fn post(url: &str, headers: &[(&str, &str)], body: Vec<u8>) -> (u16, reqwest::header::HeaderMap, String) {
    try_post(&client(), url, headers, body).expect("request")
}

/// Like [`post`] on a given client, but a failed or cut request is an error, not a panic.
pub fn try_post(
    client: &reqwest::blocking::Client,
    url: &str,
    headers: &[(&str, &str)],
    body: impl Into<reqwest::blocking::Body>,
) -> reqwest::Result<(u16, reqwest::header::HeaderMap, String)> {
    let req = headers.iter().fold(client.post(url).body(body), |r, (k, v)| r.header(*k, *v));
    let resp = req.send()?;
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    Ok((status, headers, resp.text()?))
}

/// GETs `url` and parses the body as JSON.
pub fn get_json(url: &str) -> serde_json::Value {
    client().get(url).send().expect("request").text().expect("body").parse().expect("JSON body")
}

/// Posts JSON lines to `/api/v1/import`; returns status and body.
pub fn import(base: &str, body: impl Into<reqwest::blocking::Body>) -> (u16, String) {
    let resp = client().post(format!("{base}/api/v1/import")).body(body).send().expect("import request");
    let status = resp.status().as_u16();
    (status, resp.text().unwrap_or_default())
}

/// Series -> samples as exported: label map -> [(ts, value bits)].
pub type Exported = BTreeMap<BTreeMap<String, String>, Vec<(i64, u64)>>;

/// Exports everything matching `selector` and parses it.
pub fn export(base: &str, selector: &str) -> Exported {
    let resp =
        client().get(format!("{base}/api/v1/export")).query(&[("match[]", selector)]).send().expect("export request");
    assert_eq!(resp.status().as_u16(), 200, "export failed");
    parse_lines(&resp.text().unwrap())
}

pub fn parse_lines(text: &str) -> Exported {
    let mut out = Exported::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let v: serde_json::Value = serde_json::from_str(line).expect("export line is JSON");
        let metric: BTreeMap<String, String> =
            v["metric"].as_object().unwrap().iter().map(|(k, v)| (k.clone(), v.as_str().unwrap().to_owned())).collect();
        // Lines of native histograms (`"histograms"`) are left out: this reads floats.
        let Some(values) = v["values"].as_array() else {
            assert!(v["histograms"].is_array(), "an export line without values or histograms: {line}");
            continue;
        };
        let ts = v["timestamps"].as_array().unwrap();
        assert_eq!(values.len(), ts.len());
        let samples = ts
            .iter()
            .zip(values)
            .map(|(t, v)| {
                let value = match v {
                    serde_json::Value::String(s) if s == "stale" => f64::from_bits(saltdb::sample::STALE_NAN_BITS),
                    serde_json::Value::String(s) if s == "NaN" => f64::NAN,
                    serde_json::Value::String(s) if s == "+Inf" => f64::INFINITY,
                    serde_json::Value::String(s) if s == "-Inf" => f64::NEG_INFINITY,
                    other => other.as_f64().unwrap(),
                };
                (t.as_i64().unwrap(), value.to_bits())
            })
            .collect();
        assert!(out.insert(metric, samples).is_none(), "series exported twice");
    }
    out
}

/// Builds an import body and the expected export for `series x samples` points.
pub fn dataset(series: usize, samples: usize, t0: i64, prefix: &str) -> (String, Exported) {
    let mut body = String::new();
    let mut expected = Exported::new();
    for s in 0..series {
        let mut metric = BTreeMap::new();
        metric.insert("__name__".to_owned(), format!("{prefix}_metric_{}", s % 7));
        metric.insert("host".to_owned(), format!("host-{s}"));
        metric.insert("dc".to_owned(), format!("dc{}", s % 3));
        let ts: Vec<i64> = (0..samples).map(|i| t0 + i as i64 * 15_000).collect();
        // Mix of counters, gauges with fractions, negative values and large magnitudes.
        let values: Vec<f64> = (0..samples)
            .map(|i| match s % 4 {
                0 => (i * (s + 1)) as f64,
                1 => (s as f64).sin() * 100.0 + i as f64 / 3.0,
                2 => -1.25 * i as f64,
                _ => 1e300 / (i as f64 + 1.0),
            })
            .collect();
        let line = serde_json::json!({"metric": metric, "values": values, "timestamps": ts});
        body.push_str(&line.to_string());
        body.push('\n');
        expected.insert(metric, ts.iter().zip(&values).map(|(t, v)| (*t, v.to_bits())).collect());
    }
    (body, expected)
}

/// Every file under `dir` with its length (to show a rejected request wrote nothing).
pub fn dir_listing(dir: &Path) -> BTreeMap<PathBuf, u64> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let meta = e.metadata().unwrap();
            if meta.is_dir() {
                stack.push(e.path());
            } else {
                out.insert(e.path(), meta.len());
            }
        }
    }
    out
}

/// A fixed recent timestamp (aligned to a second) for data inside any retention.
pub fn recent_ms() -> i64 {
    let now = chrono::Utc::now().timestamp_millis();
    now - now % 1000 - 3_600_000
}

/// A field of `/proc/<pid>/status` in KiB (0 when unreadable).
pub fn proc_status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}
