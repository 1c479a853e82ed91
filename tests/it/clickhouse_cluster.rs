//! A ClickHouse cluster on loopback for tests: `clickhouse-server` processes (Debian's 18.16)
//! with their own free ports and data under a test's temporary directory, killed when dropped.
//! Shared by `tests/it/clickhouse.rs` and the PromQL conformance runner (included by path).

#![allow(dead_code)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// True when `clickhouse-server` is on PATH.
pub fn installed() -> bool {
    Command::new("sh").args(["-c", "command -v clickhouse-server"]).output().is_ok_and(|o| o.status.success())
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// `n` shards under `dir` (`shard-0`, `shard-1`, ...).
pub fn start(dir: &Path, n: usize) -> Vec<Shard> {
    (0..n).map(|i| Shard::start(&dir.join(format!("shard-{i}")))).collect()
}

/// `shards` shards of `replicas` servers each, replicating through the ZooKeeper on
/// `zookeeper_port`, under `dir` (`shard-0-replica-0`, ...); by shard, then replica.
pub fn start_replicated(dir: &Path, shards: usize, replicas: usize, zookeeper_port: u16) -> Vec<Vec<Shard>> {
    (0..shards)
        .map(|s| {
            (0..replicas)
                .map(|r| {
                    let replication = Replication { zookeeper_port, replica: format!("r{r}") };
                    Shard::start_replica(&dir.join(format!("shard-{s}-replica-{r}")), Some(replication))
                })
                .collect()
        })
        .collect()
}

/// What makes a server a replica: the ZooKeeper it uses and its `replica` macro.
#[derive(Clone, Debug)]
pub struct Replication {
    /// ZooKeeper's client port on loopback.
    pub zookeeper_port: u16,
    /// The server's `replica` macro.
    pub replica: String,
}

/// One `clickhouse-server` process.
pub struct Shard {
    child: Child,
    /// The shard's HTTP URL.
    pub url: String,
    dir: PathBuf,
}

impl Shard {
    /// Starts a server with its data in `dir` and waits until it answers. Its ports are free when
    /// chosen but may be taken by another test before the server binds them: a server that exits
    /// with "Address already in use" is started again on new ports (up to 5 times).
    pub fn start(dir: &Path) -> Shard {
        Self::start_replica(dir, None)
    }

    /// [`Shard::start`], as a replica when `replication` says so.
    pub fn start_replica(dir: &Path, replication: Option<Replication>) -> Shard {
        crate::watchdog::watch();
        for _ in 0..4 {
            if let Some(shard) = Self::try_start(dir, replication.as_ref()) {
                return shard;
            }
        }
        Self::try_start(dir, replication.as_ref())
            .unwrap_or_else(|| panic!("clickhouse-server found no free ports in 5 tries"))
    }

    /// One start on freshly chosen ports: `None` when the server lost a port to someone else.
    fn try_start(dir: &Path, replication: Option<&Replication>) -> Option<Shard> {
        std::fs::create_dir_all(dir).unwrap();
        let _ = std::fs::remove_file(dir.join("server.log"));
        let (http, tcp) = (free_port(), free_port());
        let d = dir.display();
        // Replicas fetch parts from each other on their interserver port; a short ZooKeeper
        // session lets the others see a killed replica gone soon.
        let replica = replication.map_or_else(String::new, |r| {
            format!(
                "  <interserver_http_port>{}</interserver_http_port>\n  <interserver_http_host>127.0.0.1</interserver_http_host>\n  \
                 <zookeeper><node><host>127.0.0.1</host><port>{}</port></node><session_timeout_ms>5000</session_timeout_ms></zookeeper>\n  \
                 <macros><replica>{}</replica></macros>\n",
                free_port(),
                r.zookeeper_port,
                r.replica
            )
        });
        let config = format!(
            r#"<?xml version="1.0"?>
<yandex>
  <logger><level>warning</level><console>1</console></logger>
  <http_port>{http}</http_port>
  <tcp_port>{tcp}</tcp_port>
  <listen_host>127.0.0.1</listen_host>
  <path>{d}/data/</path>
  <tmp_path>{d}/tmp/</tmp_path>
  <user_files_path>{d}/user_files/</user_files_path>
  <users_config>/etc/clickhouse-server/users.xml</users_config>
  <default_profile>default</default_profile>
  <default_database>default</default_database>
  <mark_cache_size>5368709120</mark_cache_size>
{replica}</yandex>
"#
        );
        std::fs::write(dir.join("config.xml"), config).unwrap();
        let mut shard = Shard { child: Self::spawn(dir), url: format!("http://127.0.0.1:{http}"), dir: dir.to_owned() };
        if shard.wait_ready() {
            return Some(shard);
        }
        let log = std::fs::read_to_string(dir.join("server.log")).unwrap_or_default();
        if log.contains("Address already in use") {
            shard.kill9();
            return None;
        }
        panic!("clickhouse-server at {} did not answer within 60 s; its log:\n{log}", shard.url);
    }

    fn spawn(dir: &Path) -> Child {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(dir.join("server.log")).unwrap();
        Command::new("clickhouse-server")
            .arg(format!("--config-file={}", dir.join("config.xml").display()))
            .current_dir(dir)
            .stdout(Stdio::from(log.try_clone().unwrap()))
            .stderr(Stdio::from(log))
            .spawn()
            .expect("start clickhouse-server")
    }

    /// Starts the server again on its ports and data (after [`Shard::kill9`]).
    pub fn restart(&mut self) {
        self.child = Self::spawn(&self.dir);
        if !self.wait_ready() {
            let log = std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default();
            panic!("clickhouse-server at {} did not answer within 60 s after a restart; its log:\n{log}", self.url);
        }
    }

    /// Waits until the server answers (true), or has exited or 60 s have passed (false).
    fn wait_ready(&mut self) -> bool {
        let deadline = Instant::now() + Duration::from_secs(60);
        let client = reqwest::blocking::Client::new();
        while Instant::now() < deadline {
            if client.get(format!("{}/?query=SELECT%201", self.url)).send().is_ok_and(|r| r.status().is_success()) {
                return true;
            }
            if self.child.try_wait().is_ok_and(|status| status.is_some()) {
                return false;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        false
    }

    /// `kill -9`.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Shard {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// A standalone ZooKeeper 3.8 server on a free loopback port, its data under a test's
/// directory, killed when dropped.
pub struct ZooKeeper {
    child: Child,
    /// Its client port.
    pub port: u16,
    dir: PathBuf,
}

impl ZooKeeper {
    /// Where Debian installs ZooKeeper's start script.
    pub const SCRIPT: &'static str = "/usr/share/zookeeper/bin/zkServer.sh";

    /// True when Debian's `zookeeper` is installed.
    pub fn installed() -> bool {
        Path::new(Self::SCRIPT).exists()
    }

    /// Starts a server with its data in `dir` and waits until it answers `ruok`.
    pub fn start(dir: &Path) -> ZooKeeper {
        crate::watchdog::watch();
        std::fs::create_dir_all(dir.join("data")).unwrap();
        let port = free_port();
        let config = format!(
            "tickTime=2000\ndataDir={}\nclientPort={port}\nclientPortAddress=127.0.0.1\nadmin.enableServer=false\n\
             4lw.commands.whitelist=ruok,srvr\nmaxSessionTimeout=60000\nminSessionTimeout=1000\n",
            dir.join("data").display()
        );
        std::fs::write(dir.join("zoo.cfg"), config).unwrap();
        let mut zk = ZooKeeper { child: Self::spawn(dir), port, dir: dir.to_owned() };
        zk.wait_ready();
        zk
    }

    fn spawn(dir: &Path) -> Child {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(dir.join("zookeeper.log")).unwrap();
        Command::new(Self::SCRIPT)
            .arg("start-foreground")
            .arg(dir.join("zoo.cfg"))
            .env("ZOOCFGDIR", dir)
            .env("ZOO_LOG_DIR", dir)
            .stdout(Stdio::from(log.try_clone().unwrap()))
            .stderr(Stdio::from(log))
            .spawn()
            .expect("start ZooKeeper")
    }

    fn wait_ready(&mut self) {
        use std::io::{Read, Write};
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            let addr = std::net::SocketAddr::from(([127, 0, 0, 1], self.port));
            if let Ok(mut c) = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2)) {
                // A ZooKeeper still starting may take the connection and not answer: without
                // these timeouts the read waited for ever (a CI run hung here for 30 minutes).
                let _ = c.set_read_timeout(Some(Duration::from_secs(2)));
                let _ = c.set_write_timeout(Some(Duration::from_secs(2)));
                let mut answer = String::new();
                if c.write_all(b"ruok").is_ok() && c.read_to_string(&mut answer).is_ok() && answer == "imok" {
                    return;
                }
            }
            if self.child.try_wait().is_ok_and(|status| status.is_some()) {
                break;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        let log = std::fs::read_to_string(self.dir.join("zookeeper.log")).unwrap_or_default();
        panic!("ZooKeeper on port {} did not answer within 60 s; its log:\n{log}", self.port);
    }

    /// `kill -9`.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Starts it again on its port and data (after [`ZooKeeper::kill9`]).
    pub fn restart(&mut self) {
        self.child = Self::spawn(&self.dir);
        self.wait_ready();
    }
}

impl Drop for ZooKeeper {
    fn drop(&mut self) {
        self.kill9();
    }
}
