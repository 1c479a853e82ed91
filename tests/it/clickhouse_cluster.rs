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
        for _ in 0..4 {
            if let Some(shard) = Self::try_start(dir) {
                return shard;
            }
        }
        Self::try_start(dir).unwrap_or_else(|| panic!("clickhouse-server found no free ports in 5 tries"))
    }

    /// One start on freshly chosen ports: `None` when the server lost a port to someone else.
    fn try_start(dir: &Path) -> Option<Shard> {
        std::fs::create_dir_all(dir).unwrap();
        let _ = std::fs::remove_file(dir.join("server.log"));
        let (http, tcp) = (free_port(), free_port());
        let d = dir.display();
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
</yandex>
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
