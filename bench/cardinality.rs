//! `saltdb-bench cardinality` (issue 13, "cost proportional to the work"): saltdb against
//! VictoriaMetrics 1.79 at high series counts, one target after the other (never both loaded at
//! once), on a fleet of hosts (see `fleet.rs`) written by remote-write 1.0.
//!
//! Default mode: `--rounds` scrapes of `--series` series (round 1 creates every series, the
//! others only append), then the median latency of small and large API requests over that data,
//! peak RSS, and bytes on disk once the target has flushed. `--churn`: rounds of new series
//! replacing the previous ones, with a few small requests, RSS and disk after each round, so a
//! cost that grows with the series ever seen (rather than the ones asked for) shows as a
//! growing line. See `bench/README.md`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use clap::ValueEnum;
use serde_json::{json, Value};

use crate::fleet::{Body, Fleet, INTERVAL_MS};
use crate::http_client::{Conn, Server, REMOTE_WRITE_HEADERS};
use crate::peers::{self, Peer};

/// Options of the cardinality benchmark.
#[derive(Debug, clap::Args)]
pub struct CardinalityArgs {
    /// Active series: `--metrics` metric names on `series / metrics` hosts.
    #[arg(long, default_value_t = 1_000_000)]
    series: usize,
    /// Metric names per host (`m0`, `m1`, ...); `m0` holds 1/metrics of the series.
    #[arg(long, default_value_t = 10)]
    metrics: usize,
    /// Scrapes (samples per series), 15 s apart, ending about now.
    #[arg(long, default_value_t = 12)]
    rounds: usize,
    /// Series (of one sample each) per remote-write request.
    #[arg(long, default_value_t = 2_000)]
    series_per_request: usize,
    /// Keep-alive connections writing at once.
    #[arg(long, default_value_t = 4)]
    concurrency: usize,
    /// Timed runs per request type (after one warm-up); the median is reported.
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Targets, in order (repeatable): saltdb, victoria-metrics. Default: both.
    #[arg(long = "target", value_enum)]
    targets: Vec<TargetKind>,
    /// The `saltdb` binary (default: the one next to this bench binary).
    #[arg(long)]
    saltdb_bin: Option<PathBuf>,
    /// Extra argument for `saltdb serve` (repeatable), e.g. `--saltdb-arg=--head-max-samples=8000000`.
    #[arg(long = "saltdb-arg", allow_hyphen_values = true)]
    saltdb_args: Vec<String>,
    /// Extra flag for VictoriaMetrics (repeatable), e.g. `--vm-arg=-search.maxUniqueTimeseries=3000000`
    /// (its defaults refuse queries over more than 300,000 series and series lists over 30,000).
    #[arg(long = "vm-arg", allow_hyphen_values = true)]
    vm_args: Vec<String>,
    /// Directory for the targets' data directories (default: the system temp dir).
    #[arg(long)]
    pub work_dir: Option<PathBuf>,
    /// Leave the data directories behind (their paths are printed).
    #[arg(long)]
    pub keep_data: bool,
    /// Also write every figure to this JSON file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Longest wait for one HTTP request, in seconds (a slower answer counts as an error).
    #[arg(long, default_value_t = 120)]
    timeout_secs: u64,
    /// Churn instead: rounds of new series replacing the previous ones.
    #[arg(long)]
    churn: bool,
    /// With `--churn`: rounds.
    #[arg(long, default_value_t = 10)]
    churn_rounds: usize,
    /// With `--churn`: new series per round (the previous round's stop receiving samples).
    #[arg(long, default_value_t = 100_000)]
    churn_series: usize,
    /// With `--churn`: samples per series in its round, 15 s apart.
    #[arg(long, default_value_t = 4)]
    churn_samples: usize,
}

/// A database under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum TargetKind {
    Saltdb,
    VictoriaMetrics,
}

impl TargetKind {
    fn name(self) -> &'static str {
        match self {
            Self::Saltdb => "saltdb",
            Self::VictoriaMetrics => "victoria-metrics",
        }
    }
}

/// Most attempts at one write request refused with 429 or 5xx (or a broken connection).
const MAX_WRITE_ATTEMPTS: u32 = 20;
/// Longest wait for a target to exit cleanly, or for VictoriaMetrics' merges to finish.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(900);
/// Churn rounds are at least this far apart, more than the 5 min lookback of an instant
/// query, so a round's instant queries see only its own series.
const CHURN_MIN_GAP_MS: i64 = 6 * 60_000;
/// The host most requests ask about (or the last host of a smaller fleet).
const PROBE_HOST: usize = 42;

// ---------------------------------------------------------------------------------------------
// Targets

enum Process {
    Saltdb(Server),
    Vm(Peer),
}

/// A started target, killed on drop (through `Server`'s and `Peer`'s guards).
struct Target {
    kind: TargetKind,
    process: Process,
    dir: PathBuf,
    addr: SocketAddr,
    timeout: Duration,
}

/// What a target left behind once flushed.
#[derive(Default)]
struct Settled {
    peak_rss: u64,
    rss: u64,
    /// Allocated bytes of the data directory, as `du` counts them.
    disk_bytes: u64,
    /// Sum of file lengths, for reference (preallocated journals count in full here).
    apparent_bytes: u64,
    notes: Vec<String>,
}

fn saltdb_bin(args: &CardinalityArgs) -> PathBuf {
    args.saltdb_bin.clone().unwrap_or_else(Server::default_bin)
}

impl Target {
    /// Starts `kind` on a free loopback port with a fresh data directory under `root`.
    fn start(kind: TargetKind, args: &CardinalityArgs, root: &Path) -> Result<Self, String> {
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
                let peer = Peer::victoria_metrics_with(&dir, &args.vm_args)
                    .ok_or("victoria-metrics did not become ready within 60 s")?;
                let addr = peer.base.trim_start_matches("http://").parse().map_err(|e| format!("{e}"))?;
                Ok(Self { kind, process: Process::Vm(peer), dir, addr, timeout })
            }
        }
    }

    fn name(&self) -> &'static str {
        self.kind.name()
    }

    fn pid(&self) -> String {
        match &self.process {
            Process::Saltdb(s) => s.pid(),
            Process::Vm(p) => p.pid(),
        }
    }

    /// One GET on a fresh connection, bounded by the request timeout; an error unless 200.
    fn get(&self, path: &str) -> Result<Vec<u8>, String> {
        let mut conn = Conn::try_connect(self.addr, Some(self.timeout)).map_err(|e| format!("connect: {e}"))?;
        match conn.try_request("GET", path, &[], b"") {
            Ok((200, body)) => Ok(body),
            Ok((status, body)) => Err(format!("GET {path}: HTTP {status}: {}", excerpt(&body))),
            Err(e) => Err(format!("GET {path}: {e}")),
        }
    }

    /// Makes everything written so far visible to queries: VictoriaMetrics buffers new rows
    /// for a second or two; saltdb answers from its head at once.
    fn make_searchable(&self) -> Result<(), String> {
        match self.process {
            Process::Saltdb(_) => Ok(()),
            Process::Vm(_) => self.get("/internal/force_flush").map(drop),
        }
    }

    /// Current RSS and peak RSS (VmHWM), bytes.
    fn rss(&self) -> (u64, u64) {
        let pid = self.pid();
        (crate::status_kib(&pid, "VmRSS:") * 1024, crate::peak_rss(&pid))
    }

    /// Flushes and stops the target, measuring its data directory once everything is on disk:
    /// saltdb is stopped with SIGTERM and measured after its clean exit; VictoriaMetrics is
    /// flushed and force-merged, measured, then stopped.
    fn settle(self) -> Settled {
        let mut out = Settled::default();
        match self.process {
            Process::Saltdb(server) => {
                (out.rss, out.peak_rss) = {
                    let pid = server.pid();
                    (crate::status_kib(&pid, "VmRSS:") * 1024, crate::peak_rss(&pid))
                };
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
                match wait_vm_merges(&self) {
                    Ok(()) => out.notes.push(format!("merges done in {:.1}s", t.elapsed().as_secs_f64())),
                    Err(e) => out.notes.push(format!("!! {e}")),
                }
                let pid = peer.pid();
                (out.rss, out.peak_rss) = (crate::status_kib(&pid, "VmRSS:") * 1024, crate::peak_rss(&pid));
            }
        }
        out.disk_bytes = crate::dir_allocated_bytes(&self.dir);
        out.apparent_bytes = crate::dir_bytes(&self.dir);
        // VictoriaMetrics is killed here, after the measurement (dropping `self.process`).
        out
    }
}

/// Waits until VictoriaMetrics runs no forced or background merge (two quiet polls in a row).
fn wait_vm_merges(target: &Target) -> Result<(), String> {
    let deadline = Instant::now() + SETTLE_TIMEOUT;
    let mut quiet = 0;
    std::thread::sleep(Duration::from_millis(500));
    while Instant::now() < deadline {
        let metrics = String::from_utf8_lossy(&target.get("/metrics")?).into_owned();
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
    Err(format!("VictoriaMetrics still merging after {SETTLE_TIMEOUT:?}; measured anyway"))
}

/// The first 300 characters of a response body, on one line.
fn excerpt(body: &[u8]) -> String {
    String::from_utf8_lossy(body).chars().take(300).collect::<String>().replace('\n', " ")
}

// ---------------------------------------------------------------------------------------------
// Writing

/// One batch of requests sent to a target.
#[derive(Clone, Debug, Default)]
struct Sent {
    seconds: f64,
    accepted: u64,
    rejected: u64,
    /// Attempts repeated after a 429, a 5xx or a broken connection.
    retried: u64,
    errors: Vec<String>,
}

impl Sent {
    fn add(&mut self, other: &Self) {
        self.seconds += other.seconds;
        self.accepted += other.accepted;
        self.rejected += other.rejected;
        self.retried += other.retried;
        self.errors.extend(other.errors.iter().take(10usize.saturating_sub(self.errors.len())).cloned());
    }

    fn rate(&self) -> f64 {
        self.accepted as f64 / self.seconds.max(1e-9)
    }

    fn json(&self) -> Value {
        json!({
            "seconds": self.seconds, "accepted_samples": self.accepted, "rejected_samples": self.rejected,
            "retried_requests": self.retried, "samples_per_second": self.rate(), "errors": self.errors,
        })
    }
}

/// Why a write request failed for good.
enum WriteError {
    /// Counted, and the next request goes on.
    Refused(String),
    /// The target is gone or stuck: the remaining requests are not sent.
    Broken(String),
}

/// Sends one write request, retrying a 429, a 5xx or a broken connection (with backoff).
fn post_write(conn: &mut Option<Conn>, target: &Target, body: &Body, retried: &AtomicU64) -> Result<(), WriteError> {
    let mut last = String::new();
    for attempt in 0..MAX_WRITE_ATTEMPTS {
        if attempt > 0 {
            retried.fetch_add(1, Ordering::Relaxed);
            std::thread::sleep(Duration::from_millis(100 * u64::from(attempt.min(10))));
        }
        if conn.is_none() {
            match Conn::try_connect(target.addr, Some(target.timeout)) {
                Ok(c) => *conn = Some(c),
                Err(e) => {
                    last = format!("connect: {e}");
                    continue;
                }
            }
        }
        let Some(c) = conn.as_mut() else { continue };
        match c.try_request("POST", "/api/v1/write", &REMOTE_WRITE_HEADERS, &body.bytes) {
            Ok((status, _)) if (200..300).contains(&status) => return Ok(()),
            Ok((status, text)) if status == 429 || status >= 500 => last = format!("HTTP {status}: {}", excerpt(&text)),
            Ok((status, text)) => return Err(WriteError::Refused(format!("HTTP {status}: {}", excerpt(&text)))),
            Err(e) if matches!(e.kind(), std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock) => {
                return Err(WriteError::Broken(format!("no answer within {:?}", target.timeout)));
            }
            Err(e) => {
                *conn = None;
                last = e.to_string();
            }
        }
    }
    Err(WriteError::Broken(format!("gave up after {MAX_WRITE_ATTEMPTS} attempts: {last}")))
}

/// Sends `bodies` over `concurrency` keep-alive connections; times the whole batch.
fn send(target: &Target, bodies: &[Body], concurrency: usize) -> Sent {
    let (accepted, rejected, retried) = (AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0));
    let broken = AtomicBool::new(false);
    let errors = Mutex::new(Vec::new());
    let note = |e: String| {
        if let Ok(mut errors) = errors.lock() {
            if errors.len() < 10 {
                errors.push(e);
            }
        }
    };
    let start = Instant::now();
    crate::parallel(bodies.len(), concurrency.max(1), |i| {
        thread_local! { static CONN: std::cell::RefCell<Option<Conn>> = const { std::cell::RefCell::new(None) }; }
        let Some(body) = bodies.get(i) else { return };
        if broken.load(Ordering::Relaxed) {
            rejected.fetch_add(body.samples, Ordering::Relaxed);
            return;
        }
        let outcome = CONN.with(|c| post_write(&mut c.borrow_mut(), target, body, &retried));
        match outcome {
            Ok(()) => {
                accepted.fetch_add(body.samples, Ordering::Relaxed);
            }
            Err(WriteError::Refused(e)) => {
                rejected.fetch_add(body.samples, Ordering::Relaxed);
                note(e);
            }
            Err(WriteError::Broken(e)) => {
                rejected.fetch_add(body.samples, Ordering::Relaxed);
                if !broken.swap(true, Ordering::Relaxed) {
                    note(format!("{e} (the remaining requests were not sent)"));
                }
            }
        }
    });
    let seconds = start.elapsed().as_secs_f64();
    Sent {
        seconds,
        accepted: accepted.into_inner(),
        rejected: rejected.into_inner(),
        retried: retried.into_inner(),
        errors: errors.into_inner().unwrap_or_default(),
    }
}

/// Builds (untimed) and sends (timed) one scrape of `series` scheduled at `base_ms`.
fn scrape(target: &Target, args: &CardinalityArgs, series: std::ops::Range<usize>, k: usize, base_ms: i64) -> Sent {
    let fleet = Fleet { metrics: args.metrics };
    let bodies = fleet.bodies(series, k, base_ms, args.series_per_request);
    let sent = send(target, &bodies, args.concurrency);
    for e in &sent.errors {
        println!("  !! {}: write error: {e}", target.name());
    }
    sent
}

// ---------------------------------------------------------------------------------------------
// Requests

/// One API request to time.
#[derive(Clone, Debug)]
struct Probe {
    name: &'static str,
    /// Path and query string.
    path: String,
    /// Why the targets may legitimately disagree on its answer's size.
    note: Option<&'static str>,
}

/// The size of an answer: series, label names or values (`items`), and samples (`points`) of a
/// query result.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Answer {
    items: usize,
    points: usize,
}

impl Answer {
    fn of(data: &Value) -> Self {
        if let Some(a) = data.as_array() {
            return Self { items: a.len(), points: 0 };
        }
        let result = data["result"].as_array().map_or(&[][..], Vec::as_slice);
        match data["resultType"].as_str() {
            Some("matrix") => Self {
                items: result.len(),
                points: result.iter().map(|s| s["values"].as_array().map_or(0, Vec::len)).sum(),
            },
            Some("vector") => Self { items: result.len(), points: result.len() },
            Some(_) => Self { items: 1, points: 1 },
            None => Self::default(),
        }
    }

    fn show(self) -> String {
        if self.points > 0 && self.points != self.items {
            format!("{}/{}", self.items, self.points)
        } else {
            self.items.to_string()
        }
    }
}

/// Latencies of one request type on one target.
#[derive(Clone, Debug, Default)]
struct Timing {
    runs_ms: Vec<f64>,
    /// Server CPU (user + system) per timed run.
    cpu_ms: Option<f64>,
    answer: Option<Answer>,
    errors: Vec<String>,
}

impl Timing {
    fn median_ms(&self) -> Option<f64> {
        (!self.runs_ms.is_empty()).then(|| crate::query::median(self.runs_ms.clone()))
    }

    fn json(&self, probe: &Probe) -> Value {
        json!({
            "name": probe.name, "request": probe.path, "median_ms": self.median_ms(), "runs_ms": self.runs_ms,
            "server_cpu_ms": self.cpu_ms, "items": self.answer.map(|a| a.items),
            "points": self.answer.map(|a| a.points), "errors": self.errors,
        })
    }
}

/// `path?k=v&...`, URL-encoded.
fn api(path: &str, params: &[(&str, &str)]) -> String {
    let mut q = form_urlencoded::Serializer::new(String::new());
    for (k, v) in params {
        q.append_pair(k, v);
    }
    format!("{path}?{}", q.finish())
}

/// Milliseconds as the API's seconds with a fraction.
fn secs(ms: i64) -> String {
    format!("{}.{:03}", ms.div_euclid(1000), ms.rem_euclid(1000))
}

fn instant(name: &'static str, query: &str, at_ms: i64) -> Probe {
    Probe { name, path: api("/api/v1/query", &[("query", query), ("time", &secs(at_ms))]), note: None }
}

/// One GET, timed; its answer's size. Drops the connection after an I/O error.
fn call(conn: &mut Option<Conn>, target: &Target, path: &str) -> Result<(f64, Answer), String> {
    if conn.is_none() {
        *conn = Some(Conn::try_connect(target.addr, Some(target.timeout)).map_err(|e| format!("connect: {e}"))?);
    }
    let c = conn.as_mut().ok_or("no connection")?;
    let t = Instant::now();
    let response = c.try_request("GET", path, &[], b"");
    let seconds = t.elapsed().as_secs_f64();
    let (status, body) = match response {
        Ok(r) => r,
        Err(e) => {
            *conn = None;
            return Err(match e.kind() {
                std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock => {
                    format!("no answer within {:?}", target.timeout)
                }
                _ => e.to_string(),
            });
        }
    };
    if status != 200 {
        return Err(format!("HTTP {status}: {}", excerpt(&body)));
    }
    let v: Value = serde_json::from_slice(&body).map_err(|e| format!("bad JSON ({e}): {}", excerpt(&body)))?;
    if v["status"] != "success" {
        return Err(format!("status {}: {}", v["status"], excerpt(&body)));
    }
    Ok((seconds, Answer::of(&v["data"])))
}

/// One warm-up, then `runs` timed runs (none when the warm-up fails: a request that times out
/// is not repeated). Errors are printed as they happen.
fn time_probe(target: &Target, probe: &Probe, runs: usize) -> Timing {
    let mut conn = None;
    let mut t = Timing::default();
    let fail = |t: &mut Timing, e: String| {
        println!("  !! {} {}: {e}", target.name(), probe.name);
        t.errors.push(e);
    };
    match call(&mut conn, target, &probe.path) {
        Ok((_, answer)) => t.answer = Some(answer),
        Err(e) => {
            fail(&mut t, format!("warm-up: {e}"));
            return t;
        }
    }
    let pid = target.pid();
    let cpu = crate::cpu_seconds(&pid);
    for _ in 0..runs {
        match call(&mut conn, target, &probe.path) {
            Ok((seconds, answer)) => {
                t.runs_ms.push(seconds * 1000.0);
                if t.answer != Some(answer) {
                    fail(&mut t, format!("answer changed between runs: {answer:?}"));
                }
            }
            Err(e) => fail(&mut t, e),
        }
    }
    t.cpu_ms = Some((crate::cpu_seconds(&pid) - cpu) * 1000.0 / runs.max(1) as f64);
    t
}

/// The request types of the default mode, over data in `[start_ms, end_ms]` on `hosts` hosts.
fn probes(hosts: usize, start_ms: i64, end_ms: i64) -> Vec<Probe> {
    let h = PROBE_HOST.min(hosts.saturating_sub(1));
    let inst = Fleet::instance(h);
    let (start, end) = (secs(start_ms), secs(end_ms));
    // Every metadata request covers the data's time range.
    let span = |path: &str, extra: &[(&str, &str)]| {
        let mut p = extra.to_vec();
        p.push(("start", &start));
        p.push(("end", &end));
        api(path, &p)
    };
    let one = format!(
        "m0{{instance=\"{inst}\",job=\"{}\",region=\"{}\",zone=\"{}\",env=\"{}\"}}",
        Fleet::job(h),
        Fleet::region(h),
        Fleet::zone(h),
        Fleet::env(h)
    );
    let host = format!("{{instance=\"{inst}\"}}");
    let three = (1..=3).map(Fleet::instance).collect::<Vec<_>>().join("|");
    let rate = format!("rate(m0{{instance=\"{inst}\"}}[5m])");
    let zone = format!("m0{{zone=\"{}\"}}", Fleet::zone(h));
    let step_start = secs(end_ms - 3_600_000);
    vec![
        instant("one series, all labels", &one, end_ms),
        instant("one host, all metrics", &host, end_ms),
        instant("regex over 3 hosts", &format!("m0{{instance=~\"{three}\"}}"), end_ms),
        Probe {
            name: "rate of one series, 1h range",
            path: api(
                "/api/v1/query_range",
                &[("query", &rate), ("start", &step_start), ("end", &end), ("step", "60")],
            ),
            note: Some("MetricsQL's rate is computed differently at the edges of the data: point counts may differ"),
        },
        Probe { name: "label values: job", path: span("/api/v1/label/job/values", &[]), note: None },
        Probe {
            name: "label values: instance, few matches",
            path: span("/api/v1/label/instance/values", &[("match[]", "m0{instance=~\"host-00001.*\"}")]),
            note: None,
        },
        Probe { name: "label names", path: span("/api/v1/labels", &[]), note: None },
        Probe { name: "label names, one host", path: span("/api/v1/labels", &[("match[]", &host)]), note: None },
        Probe { name: "series of one host", path: span("/api/v1/series", &[("match[]", &host)]), note: None },
        Probe {
            name: "series of a zone, limit 100",
            path: span("/api/v1/series", &[("match[]", &zone), ("limit", "100")]),
            note: None,
        },
        instant("sum(rate(m0[5m]))", "sum(rate(m0[5m]))", end_ms),
        instant("count by (job) (m0)", "count by (job) (m0)", end_ms),
        instant("topk(5, m0)", "topk(5, m0)", end_ms),
    ]
}

// ---------------------------------------------------------------------------------------------
// Runs

/// Everything measured on one target.
#[derive(Default)]
struct Report {
    name: &'static str,
    skipped: Option<String>,
    rounds: Vec<Sent>,
    timings: Vec<Timing>,
    churn: Vec<ChurnRound>,
    settled: Settled,
}

impl Report {
    fn skipped(kind: TargetKind, why: String) -> Self {
        println!("== {}: skipped: {why}", kind.name());
        Self { name: kind.name(), skipped: Some(why), ..Self::default() }
    }

    /// Ingest of round 1 (every series new) and of the later rounds together.
    fn ingest(&self) -> (Option<&Sent>, Option<Sent>) {
        let later = self.rounds.get(1..).filter(|r| !r.is_empty()).map(|r| {
            let mut all = Sent::default();
            for s in r {
                all.add(s);
            }
            all
        });
        (self.rounds.first(), later)
    }
}

/// The data's schedule in the default mode: scrape `k` at `first_ms + k * 15 s`.
#[derive(Clone, Copy)]
struct Timeline {
    first_ms: i64,
    rounds: usize,
}

impl Timeline {
    /// Ending about now: the last scrape's interval closes before the bench starts.
    fn ending_now(rounds: usize) -> Self {
        let now = chrono::Utc::now().timestamp_millis();
        let last = now - now.rem_euclid(INTERVAL_MS) - INTERVAL_MS;
        Self { first_ms: last - (rounds.max(1) as i64 - 1) * INTERVAL_MS, rounds }
    }

    fn base(self, k: usize) -> i64 {
        self.first_ms + k as i64 * INTERVAL_MS
    }

    /// After every sample.
    fn end(self) -> i64 {
        self.base(self.rounds.max(1) - 1) + INTERVAL_MS
    }
}

fn run_default(kind: TargetKind, args: &CardinalityArgs, root: &Path, tl: Timeline, probes: &[Probe]) -> Report {
    let target = match Target::start(kind, args, root) {
        Ok(t) => t,
        Err(e) => return Report::skipped(kind, e),
    };
    let mut report = Report { name: target.name(), ..Report::default() };
    let series = args.series / args.metrics * args.metrics;
    println!("== {}: data in {}", target.name(), target.dir.display());
    for k in 0..args.rounds {
        let built = Instant::now();
        let sent = scrape(&target, args, 0..series, k, tl.base(k));
        println!(
            "  {}round {:>2}/{}: {:>12} samples/s ({} accepted, {} rejected, {} retried, {:.2}s; whole round incl. building {:.1}s)",
            if sent.rejected > 0 { "!! " } else { "" },
            k + 1,
            args.rounds,
            thousands(sent.rate() as u64),
            thousands(sent.accepted),
            sent.rejected,
            sent.retried,
            sent.seconds,
            built.elapsed().as_secs_f64()
        );
        report.rounds.push(sent);
    }
    if let Err(e) = target.make_searchable() {
        println!("  !! {}: {e}", target.name());
    }
    for p in probes {
        let t = time_probe(&target, p, args.runs);
        println!(
            "  {:<36} {:>10} ms  {}",
            p.name,
            t.median_ms().map_or("-".into(), |m| format!("{m:.1}")),
            t.answer.map_or("-".into(), Answer::show)
        );
        report.timings.push(t);
    }
    report.settled = settle(target, args);
    println!(
        "  peak RSS {:.1} MiB, on disk {:.1} MiB ({})",
        mib(report.settled.peak_rss),
        mib(report.settled.disk_bytes),
        report.settled.notes.join("; ")
    );
    report
}

/// Settles the target (see [`Target::settle`]) and removes its data directory unless
/// `--keep-data`.
fn settle(target: Target, args: &CardinalityArgs) -> Settled {
    let dir = target.dir.clone();
    let settled = target.settle();
    if args.keep_data {
        println!("  data kept in {}", dir.display());
    } else {
        let _ = std::fs::remove_dir_all(&dir);
    }
    settled
}

/// One churn round on one target.
#[derive(Clone, Debug, Default)]
struct ChurnRound {
    /// Series written so far (all rounds).
    series_total: usize,
    /// The round's first scrape (every series new) and the others.
    new: Sent,
    known: Sent,
    probes: Vec<Probe>,
    timings: Vec<Timing>,
    rss: u64,
    peak_rss: u64,
    dir_bytes: u64,
}

/// The churn schedule: round `c`'s scrape `j` at `first_ms + c * gap_ms + j * 15 s`.
#[derive(Clone, Copy)]
struct ChurnTimeline {
    first_ms: i64,
    gap_ms: i64,
    samples: usize,
}

impl ChurnTimeline {
    fn ending_now(rounds: usize, samples: usize) -> Self {
        let gap_ms = (samples as i64 * INTERVAL_MS).max(CHURN_MIN_GAP_MS);
        let now = chrono::Utc::now().timestamp_millis();
        let first_ms = now - now.rem_euclid(INTERVAL_MS) - rounds as i64 * gap_ms;
        Self { first_ms, gap_ms, samples }
    }

    fn base(self, round: usize, j: usize) -> i64 {
        self.first_ms + round as i64 * self.gap_ms + j as i64 * INTERVAL_MS
    }

    /// `[start, end]` of round `c`'s samples.
    fn span(self, round: usize) -> (i64, i64) {
        (self.base(round, 0), self.base(round, self.samples.max(1) - 1) + INTERVAL_MS)
    }
}

/// Small requests about round `c`'s series, over its time span.
fn churn_probes(args: &CardinalityArgs, tl: ChurnTimeline, c: usize) -> Vec<Probe> {
    let fleet = Fleet { metrics: args.metrics };
    let h = fleet.host(c * args.churn_series + args.churn_series / 2);
    let host = format!("{{instance=\"{}\"}}", Fleet::instance(h));
    let (start_ms, end_ms) = tl.span(c);
    let (start, end) = (secs(start_ms), secs(end_ms));
    vec![
        instant("one series", &format!("m0{{instance=\"{}\"}}", Fleet::instance(h)), end_ms),
        instant("one host", &host, end_ms),
        Probe {
            name: "job values",
            path: api("/api/v1/label/job/values", &[("start", &start), ("end", &end)]),
            note: None,
        },
        Probe {
            name: "host series",
            path: api("/api/v1/series", &[("match[]", &host), ("start", &start), ("end", &end)]),
            note: None,
        },
    ]
}

fn run_churn(kind: TargetKind, args: &CardinalityArgs, root: &Path, tl: ChurnTimeline) -> Report {
    let target = match Target::start(kind, args, root) {
        Ok(t) => t,
        Err(e) => return Report::skipped(kind, e),
    };
    let mut report = Report { name: target.name(), ..Report::default() };
    println!("== {}: data in {}", target.name(), target.dir.display());
    print_churn_header();
    for c in 0..args.churn_rounds {
        let series = c * args.churn_series..(c + 1) * args.churn_series;
        let mut round = ChurnRound { series_total: series.end, ..ChurnRound::default() };
        for j in 0..tl.samples {
            let sent = scrape(&target, args, series.clone(), j, tl.base(c, j));
            if j == 0 {
                round.new = sent;
            } else {
                round.known.add(&sent);
            }
        }
        if let Err(e) = target.make_searchable() {
            println!("  !! {}: {e}", target.name());
        }
        round.probes = churn_probes(args, tl, c);
        round.timings = round.probes.iter().map(|p| time_probe(&target, p, args.runs)).collect();
        (round.rss, round.peak_rss) = target.rss();
        round.dir_bytes = crate::dir_allocated_bytes(&target.dir);
        print_churn_line(c, &round);
        report.churn.push(round);
    }
    report.settled = settle(target, args);
    println!(
        "  after the last round: peak RSS {:.1} MiB, on disk {:.1} MiB once flushed ({})",
        mib(report.settled.peak_rss),
        mib(report.settled.disk_bytes),
        report.settled.notes.join("; ")
    );
    report
}

// ---------------------------------------------------------------------------------------------
// Output

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1 << 20) as f64
}

/// `1234567` as `1,234,567`.
fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn ms(t: Option<&Timing>) -> String {
    t.and_then(Timing::median_ms).map_or("-".into(), |m| format!("{m:.1}"))
}

fn print_churn_header() {
    println!(
        "  {:>5} {:>10} {:>11} {:>11} {:>10} {:>10} {:>10} {:>11} {:>9} {:>9} {:>9}",
        "round",
        "series",
        "new/s",
        "known/s",
        "series ms",
        "host ms",
        "job ms",
        "h.series ms",
        "RSS MiB",
        "peak MiB",
        "dir MiB"
    );
}

fn print_churn_line(c: usize, r: &ChurnRound) {
    let rate = |s: &Sent| if s.accepted == 0 { "-".into() } else { thousands(s.rate() as u64) };
    println!(
        "  {:>5} {:>10} {:>11} {:>11} {:>10} {:>10} {:>10} {:>11} {:>9.1} {:>9.1} {:>9.1}{}",
        c + 1,
        thousands(r.series_total as u64),
        rate(&r.new),
        rate(&r.known),
        ms(r.timings.first()),
        ms(r.timings.get(1)),
        ms(r.timings.get(2)),
        ms(r.timings.get(3)),
        mib(r.rss),
        mib(r.peak_rss),
        mib(r.dir_bytes),
        if r.new.rejected + r.known.rejected > 0 { "  !! samples rejected" } else { "" }
    );
}

fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}x", a / b),
        _ => "-".into(),
    }
}

/// The ingest table; returns nothing to compare.
fn print_ingest(reports: &[Report], samples_per_round: usize) {
    println!(
        "\n{:<17} {:>16} {:>18} {:>9} {:>9} {:>13} {:>12} {:>10}",
        "target", "round 1 samp/s", "rounds 2.. samp/s", "rejected", "retried", "peak RSS MiB", "disk MiB", "B/sample"
    );
    for r in reports.iter().filter(|r| r.skipped.is_none()) {
        let (first, later) = r.ingest();
        let all: u64 = r.rounds.iter().map(|s| s.accepted).sum();
        println!(
            "{:<17} {:>16} {:>18} {:>9} {:>9} {:>13.1} {:>12.1} {:>10.2}",
            r.name,
            first.map_or("-".into(), |s| thousands(s.rate() as u64)),
            later.as_ref().map_or("-".into(), |s| thousands(s.rate() as u64)),
            r.rounds.iter().map(|s| s.rejected).sum::<u64>(),
            r.rounds.iter().map(|s| s.retried).sum::<u64>(),
            mib(r.settled.peak_rss),
            mib(r.settled.disk_bytes),
            r.settled.disk_bytes as f64 / all.max(1) as f64
        );
    }
    println!("({samples_per_round} samples per round; disk = allocated bytes of the data directory once flushed)");
}

/// The query table, and a loud line for every answer whose size differs between saltdb and
/// VictoriaMetrics. Returns the disagreements.
fn print_queries(reports: &[Report], probes: &[Probe]) -> Vec<String> {
    let salt = reports.iter().find(|r| r.name == "saltdb" && r.skipped.is_none());
    let vm = reports.iter().find(|r| r.name == "victoria-metrics" && r.skipped.is_none());
    println!(
        "\n{:<36} {:>11} {:>11} {:>9} {:>10} {:>10} {:>12} {:>12}",
        "request (median)", "saltdb ms", "VM ms", "salt/VM", "salt cpu", "VM cpu", "saltdb n", "VM n"
    );
    let mut mismatches = Vec::new();
    for (i, p) in probes.iter().enumerate() {
        let s = salt.and_then(|r| r.timings.get(i));
        let v = vm.and_then(|r| r.timings.get(i));
        let cpu = |t: Option<&Timing>| t.and_then(|t| t.cpu_ms).map_or("-".into(), |c| format!("{c:.0}"));
        let n = |t: Option<&Timing>| {
            t.map_or("-".into(), |t| {
                let a = t.answer.map_or("error".into(), Answer::show);
                if t.errors.is_empty() {
                    a
                } else {
                    format!("{a} ({} err)", t.errors.len())
                }
            })
        };
        println!(
            "{:<36} {:>11} {:>11} {:>9} {:>10} {:>10} {:>12} {:>12}",
            p.name,
            ms(s),
            ms(v),
            ratio(s.and_then(Timing::median_ms), v.and_then(Timing::median_ms)),
            cpu(s),
            cpu(v),
            n(s),
            n(v)
        );
        if let (Some(sa), Some(va)) = (s.and_then(|t| t.answer), v.and_then(|t| t.answer)) {
            if sa != va {
                mismatches.push(format!(
                    "{}: saltdb answered {}, VictoriaMetrics {}{}",
                    p.name,
                    sa.show(),
                    va.show(),
                    p.note.map_or(String::new(), |n| format!(" (expected? {n})"))
                ));
            }
        }
    }
    println!("(n = series, names or values answered; series/points for range queries; cpu = server CPU ms per run)");
    mismatches
}

/// Churn disagreements between targets, round by round.
fn churn_mismatches(reports: &[Report]) -> Vec<String> {
    let done: Vec<&Report> = reports.iter().filter(|r| r.skipped.is_none()).collect();
    let (Some(a), Some(b)) = (done.first(), done.get(1)) else { return Vec::new() };
    let mut out = Vec::new();
    for (c, (ra, rb)) in a.churn.iter().zip(&b.churn).enumerate() {
        for ((p, ta), tb) in ra.probes.iter().zip(&ra.timings).zip(&rb.timings) {
            if let (Some(x), Some(y)) = (ta.answer, tb.answer) {
                if x != y {
                    out.push(format!(
                        "round {}, {}: {} answered {}, {} {}",
                        c + 1,
                        p.name,
                        a.name,
                        x.show(),
                        b.name,
                        y.show()
                    ));
                }
            }
        }
    }
    out
}

fn report_json(args: &CardinalityArgs, reports: &[Report], probes: &[Probe], mismatches: &[String]) -> Value {
    let targets: Vec<Value> = reports
        .iter()
        .map(|r| {
            let (first, later) = r.ingest();
            let churn: Vec<Value> = r
                .churn
                .iter()
                .enumerate()
                .map(|(c, x)| {
                    json!({
                        "round": c + 1, "series_total": x.series_total, "new": x.new.json(), "known": x.known.json(),
                        "requests": x.probes.iter().zip(&x.timings).map(|(p, t)| t.json(p)).collect::<Vec<_>>(),
                        "rss_bytes": x.rss, "peak_rss_bytes": x.peak_rss, "dir_bytes": x.dir_bytes,
                    })
                })
                .collect();
            json!({
                "name": r.name,
                "skipped": r.skipped,
                "ingest": {
                    "round_1": first.map(Sent::json),
                    "rounds_2_on": later.as_ref().map(Sent::json),
                    "rounds": r.rounds.iter().map(Sent::json).collect::<Vec<_>>(),
                },
                "requests": probes.iter().zip(&r.timings).map(|(p, t)| t.json(p)).collect::<Vec<_>>(),
                "churn": churn,
                "peak_rss_bytes": r.settled.peak_rss,
                "rss_bytes": r.settled.rss,
                "disk_bytes": r.settled.disk_bytes,
                "apparent_bytes": r.settled.apparent_bytes,
                "notes": r.settled.notes,
            })
        })
        .collect();
    json!({
        "benchmark": "cardinality",
        "unix_ms": chrono::Utc::now().timestamp_millis(),
        "config": {
            "mode": if args.churn { "churn" } else { "default" },
            "series": args.series / args.metrics.max(1) * args.metrics, "metrics": args.metrics, "rounds": args.rounds,
            "series_per_request": args.series_per_request, "concurrency": args.concurrency, "runs": args.runs,
            "churn_rounds": args.churn_rounds, "churn_series": args.churn_series, "churn_samples": args.churn_samples,
            "saltdb_bin": saltdb_bin(args), "saltdb_args": args.saltdb_args, "vm_args": args.vm_args,
            "timeout_secs": args.timeout_secs,
        },
        "targets": targets,
        "mismatches": mismatches,
    })
}

/// Checks the options; an explanation when they cannot work.
fn check(args: &CardinalityArgs) -> Result<(), String> {
    if args.metrics == 0 || args.series < args.metrics {
        return Err("--series must be at least --metrics, and --metrics at least 1".into());
    }
    if args.rounds == 0 || args.series_per_request == 0 || args.concurrency == 0 {
        return Err("--rounds, --series-per-request and --concurrency must be at least 1".into());
    }
    if args.churn && (args.churn_rounds == 0 || args.churn_samples == 0 || args.churn_series < 2 * args.metrics) {
        return Err("--churn needs --churn-rounds and --churn-samples of at least 1 and --churn-series of at least 2 x --metrics".into());
    }
    Ok(())
}

/// Runs the benchmark with data directories under `root`.
pub fn run(args: &CardinalityArgs, root: &Path) {
    if let Err(e) = check(args) {
        eprintln!("saltdb-bench cardinality: {e}");
        std::process::exit(2);
    }
    let mut kinds = args.targets.clone();
    if kinds.is_empty() {
        kinds = vec![TargetKind::Saltdb, TargetKind::VictoriaMetrics];
    }
    kinds.dedup();
    let (reports, probes, mismatches) = if args.churn {
        let tl = ChurnTimeline::ending_now(args.churn_rounds, args.churn_samples);
        println!(
            "churn: {} rounds of {} new series ({} metrics x {} hosts) x {} samples, rounds {} s apart; {} series per request, {} connections",
            args.churn_rounds,
            thousands(args.churn_series as u64),
            args.metrics,
            args.churn_series / args.metrics,
            args.churn_samples,
            tl.gap_ms / 1000,
            args.series_per_request,
            args.concurrency
        );
        let reports: Vec<Report> = kinds.iter().map(|&k| run_churn(k, args, root, tl)).collect();
        let mismatches = churn_mismatches(&reports);
        (reports, Vec::new(), mismatches)
    } else {
        let tl = Timeline::ending_now(args.rounds);
        let hosts = args.series / args.metrics;
        println!(
            "fleet: {} series = {} metrics x {} hosts, {} scrapes 15 s apart ending {}; {} series x 1 sample per request ({} requests per round), {} connections",
            thousands((hosts * args.metrics) as u64),
            args.metrics,
            thousands(hosts as u64),
            args.rounds,
            secs(tl.end()),
            args.series_per_request,
            (hosts * args.metrics).div_ceil(args.series_per_request),
            args.concurrency
        );
        let probes = probes(hosts, tl.first_ms, tl.end());
        let reports: Vec<Report> = kinds.iter().map(|&k| run_default(k, args, root, tl, &probes)).collect();
        let mismatches = if reports.iter().any(|r| r.skipped.is_none()) {
            print_ingest(&reports, hosts * args.metrics);
            print_queries(&reports, &probes)
        } else {
            println!("!! no target ran");
            Vec::new()
        };
        (reports, probes, mismatches)
    };
    if args.churn {
        for r in reports.iter().filter(|r| r.skipped.is_none()) {
            println!("\n{} (churn):", r.name);
            print_churn_header();
            for (c, round) in r.churn.iter().enumerate() {
                print_churn_line(c, round);
            }
            println!("  once flushed: {:.1} MiB on disk", mib(r.settled.disk_bytes));
        }
    }
    for m in &mismatches {
        println!("!! ANSWERS DIFFER: {m}");
    }
    if let Some(path) = &args.json {
        let v = report_json(args, &reports, &probes, &mismatches);
        match serde_json::to_string_pretty(&v).map(|s| std::fs::write(path, s)) {
            Ok(Ok(())) => println!("figures written to {}", path.display()),
            Ok(Err(e)) => println!("!! cannot write {}: {e}", path.display()),
            Err(e) => println!("!! cannot encode figures: {e}"),
        }
    }
}
