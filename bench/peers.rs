//! Peer databases for same-run comparisons: Prometheus 2.42 and VictoriaMetrics 1.79 from
//! Debian, started on loopback in a work directory (flags from shared/PEERS.md); ClickHouse
//! 18.16 servers (replicas too) and ZooKeeper 3.8 for saltdb's ClickHouse backend.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::http_client::{excerpt, Conn};

/// Whether `program` is an executable file on `PATH` (peers are optional: a missing one is
/// skipped with a message).
pub fn installed(program: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|dir| {
            std::fs::metadata(dir.join(program)).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
    })
}

/// A running peer, killed on drop.
pub struct Peer {
    pub name: &'static str,
    pub base: String,
    child: Child,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).unwrap_or(0)
}

fn wait_ready(base: &str, path: &str) -> bool {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if crate::http_client::get_status(base, path) == Some(200) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    false
}

/// Where Debian's `zookeeper` package installs its start script.
pub const ZOOKEEPER_SCRIPT: &str = "/usr/share/zookeeper/bin/zkServer.sh";

/// Whether the ZooKeeper on loopback `port` answers `ruok` with `imok`.
fn zookeeper_ok(port: u16) -> bool {
    use std::io::{Read, Write};
    let Ok(mut c) = std::net::TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_secs(2)) else {
        return false;
    };
    let _ = c.set_read_timeout(Some(Duration::from_secs(2)));
    let mut answer = String::new();
    c.write_all(b"ruok").is_ok() && c.read_to_string(&mut answer).is_ok() && answer == "imok"
}

impl Peer {
    /// Prometheus as a remote-write receiver (no scrapes), or `None` when not installed.
    pub fn prometheus(dir: &Path) -> Option<Self> {
        Self::prometheus_with(dir, &[])
    }

    /// [`Peer::prometheus`] with extra flags (e.g. `--enable-feature=native-histograms`).
    pub fn prometheus_with(dir: &Path, extra: &[&str]) -> Option<Self> {
        Self::prometheus_config(dir, "global:\n  scrape_interval: 1h\n", extra)
    }

    /// Prometheus with `config` as its `prometheus.yml` (e.g. with `rule_files`) and extra flags.
    pub fn prometheus_config(dir: &Path, config: &str, extra: &[&str]) -> Option<Self> {
        let port = free_port();
        std::fs::create_dir_all(dir).ok()?;
        std::fs::write(dir.join("prometheus.yml"), config).ok()?;
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", dir.join("prometheus.yml").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
            .args(["--storage.tsdb.retention.time=15d", "--web.enable-remote-write-receiver", "--web.enable-admin-api"])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        let peer = Self { name: "prometheus", base: format!("http://127.0.0.1:{port}"), child };
        wait_ready(&peer.base, "/-/ready").then_some(peer)
    }

    /// VictoriaMetrics, or `None` when not installed.
    pub fn victoria_metrics(dir: &Path) -> Option<Self> {
        Self::victoria_metrics_with(dir, &[])
    }

    /// VictoriaMetrics with extra flags after the usual ones (e.g. a higher
    /// `-search.maxUniqueTimeseries`), or `None` when not installed or not ready within 60 s.
    pub fn victoria_metrics_with(dir: &Path, extra: &[String]) -> Option<Self> {
        Self::spawn_victoria_metrics(dir, true, extra)
    }

    /// [`Peer::victoria_metrics_with`] with its rollup result cache on (no
    /// `-search.disableCache`): repeated range queries are answered from it unless the request
    /// says `nocache=1`.
    pub fn victoria_metrics_cached(dir: &Path, extra: &[String]) -> Option<Self> {
        Self::spawn_victoria_metrics(dir, false, extra)
    }

    fn spawn_victoria_metrics(dir: &Path, disable_cache: bool, extra: &[String]) -> Option<Self> {
        let port = free_port();
        let child = Command::new("victoria-metrics")
            .arg(format!("-httpListenAddr=127.0.0.1:{port}"))
            .arg(format!("-storageDataPath={}", dir.display()))
            .args(["-retentionPeriod=100y", "-search.latencyOffset=0s"])
            .args(disable_cache.then_some("-search.disableCache"))
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        let peer = Self { name: "victoria-metrics", base: format!("http://127.0.0.1:{port}"), child };
        wait_ready(&peer.base, "/health").then_some(peer)
    }

    /// One ClickHouse server (a shard for `saltdb serve --storage clickhouse`) with its data in
    /// `dir`, or `None` when not installed or not ready within 60 s. Parts replaced by a merge or
    /// a mutation are removed after 5 s instead of 8 minutes, so `du` measures settled tables.
    pub fn clickhouse(dir: &Path) -> Option<Self> {
        Self::clickhouse_replica(dir, None)
    }

    /// [`Peer::clickhouse`], as a replica when `replica` is `Some((zookeeper_port, name))`: it
    /// replicates through the ZooKeeper on that loopback port (see [`Peer::zookeeper`]), fetches
    /// parts from the other replicas on an interserver port of its own, and its `replica` macro
    /// is `name` (different on each replica of a shard), as in docs/clickhouse.md.
    pub fn clickhouse_replica(dir: &Path, replica: Option<(u16, &str)>) -> Option<Self> {
        let (http, tcp) = (free_port(), free_port());
        std::fs::create_dir_all(dir).ok()?;
        let d = dir.display();
        let replication = replica.map_or_else(String::new, |(zookeeper, name)| {
            format!(
                "  <interserver_http_port>{}</interserver_http_port>\n  <interserver_http_host>127.0.0.1</interserver_http_host>\n  \
                 <zookeeper><node><host>127.0.0.1</host><port>{zookeeper}</port></node></zookeeper>\n  \
                 <macros><replica>{name}</replica></macros>\n",
                free_port()
            )
        });
        let config = format!(
            "<?xml version=\"1.0\"?>\n<yandex>\n  <logger><level>warning</level><console>1</console></logger>\n  \
             <http_port>{http}</http_port>\n  <tcp_port>{tcp}</tcp_port>\n  <listen_host>127.0.0.1</listen_host>\n  \
             <path>{d}/data/</path>\n  <tmp_path>{d}/tmp/</tmp_path>\n  <user_files_path>{d}/user_files/</user_files_path>\n  \
             <users_config>/etc/clickhouse-server/users.xml</users_config>\n  <default_profile>default</default_profile>\n  \
             <default_database>default</default_database>\n  <mark_cache_size>5368709120</mark_cache_size>\n  \
             <merge_tree><old_parts_lifetime>5</old_parts_lifetime></merge_tree>\n{replication}</yandex>\n"
        );
        std::fs::write(dir.join("config.xml"), config).ok()?;
        let child = Command::new("clickhouse-server")
            .arg(format!("--config-file={}", dir.join("config.xml").display()))
            .current_dir(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        let peer = Self { name: "clickhouse", base: format!("http://127.0.0.1:{http}"), child };
        wait_ready(&peer.base, "/ping").then_some(peer)
    }

    /// A standalone ZooKeeper 3.8 (Debian's `zookeeper`) with its data in `dir/data`, listening
    /// on loopback; `base` is its `127.0.0.1:PORT` (not HTTP). `None` when not installed or it
    /// does not answer `ruok` within 60 s. The script execs the JVM, so [`Peer::pid`] is the
    /// server's.
    pub fn zookeeper(dir: &Path) -> Option<Self> {
        let port = free_port();
        std::fs::create_dir_all(dir.join("data")).ok()?;
        let config = format!(
            "tickTime=2000\ndataDir={}\nclientPort={port}\nclientPortAddress=127.0.0.1\nadmin.enableServer=false\n\
             4lw.commands.whitelist=ruok,srvr\n",
            dir.join("data").display()
        );
        std::fs::write(dir.join("zoo.cfg"), config).ok()?;
        let child = Command::new(ZOOKEEPER_SCRIPT)
            .arg("start-foreground")
            .arg(dir.join("zoo.cfg"))
            .env("ZOOCFGDIR", dir)
            .env("ZOO_LOG_DIR", dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        let peer = Self { name: "zookeeper", base: format!("127.0.0.1:{port}"), child };
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if zookeeper_ok(port) {
                return Some(peer);
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        None
    }

    /// Process id, for /proc.
    pub fn pid(&self) -> String {
        self.child.id().to_string()
    }
}

/// Waits until VictoriaMetrics at `base` runs no forced or background merge (two quiet polls of
/// its `/metrics` in a row), at most `limit`; each poll is bounded by `timeout`.
///
/// # Errors
/// `/metrics` cannot be read, or merges still run after `limit` (the caller measures anyway).
pub fn wait_vm_merges(base: &str, timeout: Duration, limit: Duration) -> Result<(), String> {
    let addr = base.trim_start_matches("http://").parse().map_err(|e| format!("{base}: {e}"))?;
    let deadline = Instant::now() + limit;
    let mut quiet = 0;
    std::thread::sleep(Duration::from_millis(500));
    while Instant::now() < deadline {
        let mut conn = Conn::try_connect(addr, Some(timeout)).map_err(|e| format!("connect: {e}"))?;
        let metrics = match conn.try_request("GET", "/metrics", &[], b"") {
            Ok((200, body)) => String::from_utf8_lossy(&body).into_owned(),
            Ok((status, body)) => return Err(format!("GET /metrics: HTTP {status}: {}", excerpt(&body))),
            Err(e) => return Err(format!("GET /metrics: {e}")),
        };
        let active: f64 = metrics
            .lines()
            .filter(|l| l.starts_with("vm_active_force_merges ") || l.starts_with("vm_active_merges{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum();
        quiet = if active == 0.0 { quiet + 1 } else { 0 };
        if quiet >= 2 {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    Err(format!("VictoriaMetrics still merging after {limit:?}; measured anyway"))
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
