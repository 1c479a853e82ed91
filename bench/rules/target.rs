//! A target of the rules benchmark: saltdb (`--rule-file`) or Prometheus 2.42 (`rule_files` in
//! its configuration, `--web.enable-remote-write-receiver --web.enable-lifecycle`), started on
//! loopback with a fresh data directory and the same rule file, killed on drop.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::RulesArgs;
use crate::http_client::{request_ok, Server};
use crate::peers::{self, Peer};

/// A database under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum TargetKind {
    Saltdb,
    Prometheus,
}

impl TargetKind {
    pub(super) fn name(self) -> &'static str {
        match self {
            Self::Saltdb => "saltdb",
            Self::Prometheus => "prometheus",
        }
    }
}

enum Process {
    Saltdb(Server),
    Prometheus(Peer),
}

/// A started target.
pub(super) struct Target {
    pub(super) kind: TargetKind,
    process: Process,
    pub(super) dir: PathBuf,
    pub(super) addr: SocketAddr,
    pub(super) timeout: Duration,
}

impl Target {
    /// Starts `kind` under `root` evaluating the rule file at `rules` (an absolute path: both
    /// targets name their groups `<path>;<group>` and place their slots by it).
    pub(super) fn start(kind: TargetKind, args: &RulesArgs, root: &Path, rules: &Path) -> Result<Self, String> {
        let dir = root.join(kind.name());
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        let timeout = Duration::from_secs(args.timeout_secs.max(1));
        let rules = rules.to_str().ok_or("the rule file's path is not UTF-8")?;
        match kind {
            TargetKind::Saltdb => {
                let bin = args.saltdb_bin.clone().unwrap_or_else(Server::default_bin);
                if !bin.is_file() {
                    return Err(format!(
                        "{} not found: build it (cargo build --release) or pass --saltdb-bin",
                        bin.display()
                    ));
                }
                let mut extra = vec!["--rule-file", rules];
                extra.extend(args.saltdb_args.iter().map(String::as_str));
                let server = Server::try_spawn_bin(&bin, &dir, &extra)?;
                let addr = server.addr;
                Ok(Self { kind, process: Process::Saltdb(server), dir, addr, timeout })
            }
            TargetKind::Prometheus => {
                if !peers::installed("prometheus") {
                    return Err("prometheus is not installed (apt-get install -y prometheus)".into());
                }
                let interval = format!("{}ms", args.interval_secs * 1000);
                let config = format!(
                    "global:\n  scrape_interval: 1h\n  evaluation_interval: {interval}\nrule_files:\n  - {rules}\n"
                );
                let peer = Peer::prometheus_config(&dir, &config, &["--web.enable-lifecycle"])
                    .ok_or("prometheus did not become ready within 60 s")?;
                let addr = peer.base.trim_start_matches("http://").parse().map_err(|e| format!("{e}"))?;
                Ok(Self { kind, process: Process::Prometheus(peer), dir, addr, timeout })
            }
        }
    }

    pub(super) fn name(&self) -> &'static str {
        self.kind.name()
    }

    pub(super) fn pid(&self) -> String {
        match &self.process {
            Process::Saltdb(s) => s.pid(),
            Process::Prometheus(p) => p.pid(),
        }
    }

    /// One GET on a fresh connection, bounded by the request timeout; an error unless 200.
    pub(super) fn get(&self, path: &str) -> Result<Vec<u8>, String> {
        request_ok(self.addr, self.timeout, "GET", path)
    }

    /// Reads the rule file again (`POST /-/reload`, on both targets).
    pub(super) fn reload(&self) -> Result<(), String> {
        request_ok(self.addr, self.timeout, "POST", "/-/reload").map(drop)
    }

    /// Current and peak RSS (VmRSS, VmHWM), bytes.
    pub(super) fn rss(&self) -> (u64, u64) {
        crate::rss_and_peak(&self.pid())
    }
}
