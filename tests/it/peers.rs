//! Real peers on loopback: Prometheus 2.42 and VictoriaMetrics 1.79 from Debian, started by hand
//! in a temp directory.
//! Tests that need one are skipped with a visible `SKIPPED:` line when the binary is absent,
//! except in CI (`CI` set), where a missing peer is a failure: `.ci/run` installs it (see
//! [`crate::skip`]).

#![allow(dead_code)]

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// True when `bin` is on PATH; otherwise announces that `test` is skipped (a failure in CI).
pub fn available(bin: &str, test: &str) -> bool {
    let found =
        Command::new("sh").args(["-c", &format!("command -v {bin}")]).output().is_ok_and(|o| o.status.success());
    if !found {
        let package = match bin {
            "promtool" => "prometheus",
            b if b.starts_with("victoria") => "victoria-metrics",
            b => b,
        };
        crate::skip::skip(test, &format!("{bin} is not on PATH"), &format!("apt-get install {package}"));
    }
    found
}

/// True when `bin` is on PATH; otherwise announces that `test` is skipped, naming the Debian
/// `package` that provides it (a failure in CI).
pub fn installed(bin: &str, test: &str, package: &str) -> bool {
    let found =
        Command::new("sh").args(["-c", &format!("command -v {bin}")]).output().is_ok_and(|o| o.status.success());
    if !found {
        crate::skip::skip(test, &format!("{bin} is not on PATH"), &format!("apt-get install {package}"));
    }
    found
}

/// A free loopback port (bound and released).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Prometheus configuration that scrapes node_exporter (on `node_exporter_port`) and saltdb
/// (at `saltdb_addr`, job `saltdb`) every second and remote-writes everything to saltdb with
/// short batching deadlines, so tests see data within seconds.
pub fn scrape_and_remote_write_config(node_exporter_port: u16, saltdb_addr: std::net::SocketAddr) -> String {
    format!(
        r#"
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: node
    static_configs: [{{targets: ["127.0.0.1:{node_exporter_port}"]}}]
  - job_name: saltdb
    static_configs: [{{targets: ["{saltdb_addr}"]}}]
remote_write:
  - url: http://{saltdb_addr}/api/v1/write
    queue_config: {{batch_send_deadline: 500ms, max_samples_per_send: 2000}}
    metadata_config: {{send_interval: 1s}}
"#
    )
}

/// A Prometheus process, killed on drop.
pub struct Prometheus {
    child: Child,
    pub base: String,
}

impl Prometheus {
    /// Starts Prometheus with `config` (YAML) as a remote-write receiver and waits until ready.
    pub fn start(dir: &Path, config: &str) -> Self {
        Self::start_with(dir, config, &[])
    }

    /// [`Prometheus::start`] with extra flags (e.g. `--enable-feature=...`).
    pub fn start_with(dir: &Path, config: &str, extra: &[&str]) -> Self {
        crate::watchdog::watch();
        let port = free_port();
        std::fs::write(dir.join("prometheus.yml"), config).unwrap();
        let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", dir.join("prometheus.yml").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
            .args(["--storage.tsdb.retention.time=15d", "--web.enable-remote-write-receiver", "--web.enable-lifecycle"])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start prometheus");
        let p = Self { child, base: format!("http://127.0.0.1:{port}") };
        let deadline = Instant::now() + Duration::from_secs(60);
        let client = reqwest::blocking::Client::new();
        loop {
            if client.get(format!("{}/-/ready", p.base)).send().is_ok_and(|r| r.status().is_success()) {
                return p;
            }
            assert!(
                Instant::now() < deadline,
                "prometheus did not become ready: {}",
                std::fs::read_to_string(dir.join("prometheus.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A VictoriaMetrics process (remote-write receiver, no caches, nothing hidden as too recent),
/// killed on drop.
pub struct VictoriaMetrics {
    child: Child,
    pub base: String,
}

impl VictoriaMetrics {
    /// Starts VictoriaMetrics with data under `dir` and waits until it answers.
    pub fn start(dir: &Path) -> Self {
        Self::start_with(dir, &[])
    }

    /// [`VictoriaMetrics::start`] with extra flags (e.g. `-opentsdbHTTPListenAddr=...`).
    pub fn start_with(dir: &Path, extra: &[String]) -> Self {
        crate::watchdog::watch();
        let port = free_port();
        let log = std::fs::File::create(dir.join("victoria-metrics.log")).unwrap();
        let child = Command::new("victoria-metrics")
            .arg(format!("-httpListenAddr=127.0.0.1:{port}"))
            .arg(format!("-storageDataPath={}", dir.join("vm-data").display()))
            .args(["-retentionPeriod=100y", "-search.disableCache", "-search.latencyOffset=0s"])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start victoria-metrics");
        let vm = Self { child, base: format!("http://127.0.0.1:{port}") };
        let deadline = Instant::now() + Duration::from_secs(60);
        let client = reqwest::blocking::Client::new();
        while !client.get(format!("{}/health", vm.base)).send().is_ok_and(|r| r.status().is_success()) {
            assert!(Instant::now() < deadline, "victoria-metrics did not start");
            std::thread::sleep(Duration::from_millis(100));
        }
        vm
    }

    /// Makes everything written so far searchable.
    pub fn flush(&self) {
        let r = reqwest::blocking::get(format!("{}/internal/force_flush", self.base)).expect("force_flush");
        assert!(r.status().is_success());
    }
}

impl Drop for VictoriaMetrics {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
