//! A target of the cardinality benchmark: saltdb or VictoriaMetrics started on loopback with a
//! fresh data directory, flushed and measured at the end.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::{CardinalityArgs, TargetKind};
use crate::http_client::{request_ok, Server};
use crate::peers::{self, Peer};

/// Longest wait for a target to exit cleanly, or for VictoriaMetrics' merges to finish.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(900);

enum Process {
    Saltdb(Server),
    Vm(Peer),
}

/// A started target, killed on drop (through `Server`'s and `Peer`'s guards).
pub(super) struct Target {
    kind: TargetKind,
    process: Process,
    pub(super) dir: PathBuf,
    pub(super) addr: SocketAddr,
    pub(super) timeout: Duration,
}

/// What a target left behind once flushed.
#[derive(Default)]
pub(super) struct Settled {
    pub(super) peak_rss: u64,
    pub(super) rss: u64,
    /// Allocated bytes of the data directory, as `du` counts them.
    pub(super) disk_bytes: u64,
    /// Sum of file lengths, for reference (preallocated journals count in full here).
    pub(super) apparent_bytes: u64,
    pub(super) notes: Vec<String>,
}

/// `--vm-arg`s, and the limits VictoriaMetrics needs to answer every request of the run where
/// its defaults refuse one and `--vm-arg` sets none: `-search.maxUniqueTimeseries` (300,000) for
/// the aggregations over `m0`'s series (one per host), `-search.maxSeries` (30,000) for the
/// series of a zone (a twelfth of the hosts: 4 regions x 3 zones).
pub(super) fn vm_args(args: &CardinalityArgs) -> Vec<String> {
    let hosts = args.series / args.metrics.max(1);
    let mut out = args.vm_args.clone();
    for (flag, default, needed) in
        [("-search.maxUniqueTimeseries", 300_000, hosts), ("-search.maxSeries", 30_000, hosts.div_ceil(12))]
    {
        if needed > default && !out.iter().any(|a| a.trim_start_matches('-').starts_with(flag.trim_start_matches('-')))
        {
            out.push(format!("{flag}={hosts}"));
        }
    }
    out
}

pub(super) fn saltdb_bin(args: &CardinalityArgs) -> PathBuf {
    args.saltdb_bin.clone().unwrap_or_else(Server::default_bin)
}

impl Target {
    /// Starts `kind` on a free loopback port with a fresh data directory under `root`.
    pub(super) fn start(kind: TargetKind, args: &CardinalityArgs, root: &Path) -> Result<Self, String> {
        let dir = root.join(kind.name());
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        let timeout = Duration::from_secs(args.timeout_secs.max(1));
        match kind {
            TargetKind::Saltdb => {
                let bin = saltdb_bin(args);
                if !bin.is_file() {
                    return Err(format!(
                        "{} not found: build it (cargo build --release) or pass --saltdb-bin",
                        bin.display()
                    ));
                }
                let extra: Vec<&str> = args.saltdb_args.iter().map(String::as_str).collect();
                let server = Server::try_spawn_bin(&bin, &dir, &extra)?;
                let addr = server.addr;
                Ok(Self { kind, process: Process::Saltdb(server), dir, addr, timeout })
            }
            TargetKind::VictoriaMetrics => {
                if !peers::installed("victoria-metrics") {
                    return Err("victoria-metrics is not installed (apt-get install -y victoria-metrics)".into());
                }
                let peer = Peer::victoria_metrics_with(&dir, &vm_args(args))
                    .ok_or("victoria-metrics did not become ready within 60 s")?;
                let addr = peer.base.trim_start_matches("http://").parse().map_err(|e| format!("{e}"))?;
                Ok(Self { kind, process: Process::Vm(peer), dir, addr, timeout })
            }
        }
    }

    pub(super) fn name(&self) -> &'static str {
        self.kind.name()
    }

    pub(super) fn pid(&self) -> String {
        match &self.process {
            Process::Saltdb(s) => s.pid(),
            Process::Vm(p) => p.pid(),
        }
    }

    /// One GET on a fresh connection, bounded by the request timeout; an error unless 200.
    fn get(&self, path: &str) -> Result<Vec<u8>, String> {
        request_ok(self.addr, self.timeout, "GET", path)
    }

    /// Makes everything written so far visible to queries: VictoriaMetrics buffers new rows
    /// for a second or two; saltdb answers from its head at once.
    pub(super) fn make_searchable(&self) -> Result<(), String> {
        match self.process {
            Process::Saltdb(_) => Ok(()),
            Process::Vm(_) => self.get("/internal/force_flush").map(drop),
        }
    }

    /// Current RSS and peak RSS (VmHWM), bytes.
    pub(super) fn rss(&self) -> (u64, u64) {
        crate::rss_and_peak(&self.pid())
    }

    /// Flushes and stops the target, measuring its data directory once everything is on disk:
    /// saltdb is stopped with SIGTERM and measured after its clean exit; VictoriaMetrics is
    /// flushed and force-merged, measured, then stopped.
    pub(super) fn settle(self) -> Settled {
        let mut out = Settled::default();
        match self.process {
            Process::Saltdb(server) => {
                (out.rss, out.peak_rss) = crate::rss_and_peak(&server.pid());
                let t = Instant::now();
                match server.stop_within(SETTLE_TIMEOUT) {
                    Ok(status) if status.success() => {
                        out.notes.push(format!("clean exit {:.1}s after SIGTERM", t.elapsed().as_secs_f64()));
                    }
                    Ok(status) => out.notes.push(format!("!! exited with {status} after SIGTERM")),
                    Err(e) => out.notes.push(format!("!! {e}")),
                }
            }
            Process::Vm(ref peer) => {
                for path in ["/internal/force_flush", "/internal/force_merge"] {
                    if let Err(e) = self.get(path) {
                        out.notes.push(format!("!! {e}"));
                    }
                }
                let t = Instant::now();
                match peers::wait_vm_merges(&peer.base, self.timeout, SETTLE_TIMEOUT) {
                    Ok(()) => out.notes.push(format!("merges done in {:.1}s", t.elapsed().as_secs_f64())),
                    Err(e) => out.notes.push(format!("!! {e}")),
                }
                (out.rss, out.peak_rss) = crate::rss_and_peak(&peer.pid());
            }
        }
        out.disk_bytes = crate::dir_allocated_bytes(&self.dir);
        out.apparent_bytes = crate::dir_bytes(&self.dir);
        // VictoriaMetrics is killed here, after the measurement (dropping `self.process`).
        out
    }
}

pub(super) use crate::http_client::excerpt;
