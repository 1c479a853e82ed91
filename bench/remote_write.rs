//! `saltdb-rw-bench`: remote-write load of realistic shape (1,000-2,000 series x a few samples per
//! request, in time order per series) against any remote-write URL, reporting accepted samples/s
//! and the receiver's peak RSS (`VmHWM`).
//!
//! Targets are either given as `--target NAME=URL[@PID]` (already running) or spawned fresh for
//! every run with `--spawn saltdb|prometheus|victoria-metrics` (loopback, free port, temp dir,
//! flags from `PEERS.md`, killed by PID afterwards). With `--runs N` it prints the median per
//! target and each target's ratio to `--baseline NAME`.
//!
//! Example (what the README's numbers come from):
//! ```text
//! cargo build --release
//! target/release/saltdb-rw-bench --spawn saltdb --spawn victoria-metrics --spawn prometheus \
//!     --runs 5 --baseline victoria-metrics
//! ```

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::Parser;
use http_body_util::{BodyExt, Full};
use hyper::{Request, StatusCode};
use hyper_util::rt::TokioIo;
use saltdb::remote::proto;
use saltdb::remote::snappy_body;

#[path = "latencies.rs"]
mod latencies;

/// Command line.
#[derive(Debug, Parser)]
#[command(name = "saltdb-rw-bench", about = "Remote-write load generator and comparison")]
struct Args {
    /// Already-running target: NAME=URL or NAME=URL@PID (PID for peak RSS).
    #[arg(long)]
    target: Vec<String>,
    /// Spawn a fresh target per run: saltdb, prometheus or victoria-metrics.
    #[arg(long)]
    spawn: Vec<String>,
    /// saltdb binary for `--spawn saltdb` (default: next to this binary).
    #[arg(long)]
    saltdb_bin: Option<PathBuf>,
    /// Distinct series.
    #[arg(long, default_value_t = 10_000)]
    series: usize,
    /// Samples per series over the whole run.
    #[arg(long, default_value_t = 360)]
    samples: usize,
    /// Series per request (Prometheus sends up to max_samples_per_send samples per request).
    #[arg(long, default_value_t = 1_500)]
    series_per_request: usize,
    /// Samples per series in one request.
    #[arg(long, default_value_t = 3)]
    samples_per_request: usize,
    /// Scrape interval of the generated data, in ms.
    #[arg(long, default_value_t = 10_000)]
    interval_ms: i64,
    /// Concurrent connections (Prometheus' shards).
    #[arg(long, default_value_t = 4)]
    concurrency: usize,
    /// Runs per target; the median is reported.
    #[arg(long, default_value_t = 1)]
    runs: usize,
    /// Also time saltdb's decoder alone on the same bodies, one thread (the ceiling of the HTTP side).
    #[arg(long)]
    decode_only: bool,
    /// Target the others are compared with.
    #[arg(long, default_value = "victoria-metrics")]
    baseline: String,
    /// Native histograms instead of floats: each sample is a request-latency histogram (schema
    /// 3, integer counts, ~30 populated buckets, `--observations` more each scrape). Prometheus
    /// is started with `--enable-feature=native-histograms`; VictoriaMetrics 1.79 stores none.
    #[arg(long)]
    histograms: bool,
    /// With `--histograms`: observations added to each series' histogram per scrape.
    #[arg(long, default_value_t = 100)]
    observations: usize,
}

/// One run's outcome against one target.
#[derive(Clone, Debug)]
struct RunResult {
    accepted: u64,
    rejected: u64,
    seconds: f64,
    peak_rss_bytes: Option<u64>,
    first_error: Option<String>,
}

impl RunResult {
    fn rate(&self) -> f64 {
        self.accepted as f64 / self.seconds.max(1e-9)
    }
}

/// Prebuilt request bodies, one list per connection, in send order.
struct Workload {
    per_worker: Vec<Vec<(Bytes, u64)>>,
    total_samples: u64,
}

fn build_workload(a: &Args) -> Workload {
    let modes = ["user", "system", "idle", "iowait", "irq", "softirq", "steal", "nice"];
    let labels: Vec<Vec<proto::Label>> = (0..a.series)
        .map(|i| {
            let host = i / 64;
            let l = |n: &str, v: String| proto::Label { name: n.into(), value: v };
            vec![
                l("__name__", format!("node_bench_metric_{}_total", i % 8)),
                l("cpu", format!("{}", (i / 8) % 8)),
                l("instance", format!("10.1.{}.{}:9100", host / 256, host % 256)),
                l("job", "node".into()),
                l("mode", modes.get(i % 8).copied().unwrap_or("user").into()),
            ]
        })
        .collect();
    let start = chrono::Utc::now().timestamp_millis() - a.samples as i64 * a.interval_ms - 60_000;
    let groups: Vec<std::ops::Range<usize>> = (0..a.series)
        .step_by(a.series_per_request.max(1))
        .map(|s| s..(s + a.series_per_request).min(a.series))
        .collect();
    let rounds = a.samples.div_ceil(a.samples_per_request.max(1));
    let workers = a.concurrency.max(1);
    let mut per_worker = vec![Vec::new(); workers];
    let mut total = 0u64;
    // With --histograms: each series' histogram, grown scrape by scrape as samples are built
    // (each series' samples are built in time order).
    let mut latencies: Vec<latencies::Latencies> = if a.histograms {
        (0..a.series).map(|i| latencies::Latencies::new(i as u64 + 1)).collect()
    } else {
        Vec::new()
    };
    for r in 0..rounds {
        for (g, range) in groups.iter().enumerate() {
            let mut n = 0u64;
            let timeseries = range
                .clone()
                .map(|i| {
                    let scrapes = r * a.samples_per_request..((r + 1) * a.samples_per_request).min(a.samples);
                    if let Some(l) = latencies.get_mut(i) {
                        let histograms = scrapes
                            .map(|k| {
                                n += 1;
                                l.observe(a.observations);
                                saltdb::remote::histogram::to_proto(start + k as i64 * a.interval_ms, &l.histogram())
                            })
                            .collect();
                        return proto::TimeSeries {
                            labels: labels.get(i).cloned().unwrap_or_default(),
                            histograms,
                            ..Default::default()
                        };
                    }
                    let samples = scrapes
                        .map(|k| {
                            n += 1;
                            // Counters growing by a pseudo-random two-decimal amount.
                            let x = (i as u64).wrapping_mul(2_654_435_761).wrapping_add(k as u64 * 40_503);
                            let value = k as f64 * 3.0 + (x % 10_000) as f64 / 100.0;
                            proto::Sample { value, timestamp: start + k as i64 * a.interval_ms }
                        })
                        .collect();
                    proto::TimeSeries {
                        labels: labels.get(i).cloned().unwrap_or_default(),
                        samples,
                        ..Default::default()
                    }
                })
                .collect();
            let body = snappy_body(&proto::WriteRequest { timeseries, metadata: vec![] });
            total += n;
            if let Some(w) = per_worker.get_mut(g % workers) {
                w.push((Bytes::from(body), n));
            }
        }
    }
    Workload { per_worker, total_samples: total }
}

async fn send_all(
    url: &hyper::Uri,
    bodies: Vec<(Bytes, u64)>,
    accepted: Arc<AtomicU64>,
    rejected: Arc<AtomicU64>,
) -> Option<String> {
    let authority = url.authority()?.to_string();
    let mut sender = None;
    let mut first_error = None;
    let total: u64 = bodies.iter().map(|(_, n)| n).sum();
    let mut sent = 0u64;
    for (body, n) in bodies {
        let mut tries = 0;
        loop {
            tries += 1;
            if sender.is_none() {
                sender = connect(&authority).await;
            }
            let Some(s) = sender.as_mut() else {
                first_error.get_or_insert_with(|| format!("cannot connect to {authority}"));
                tokio::time::sleep(Duration::from_millis(100)).await;
                if tries > 50 {
                    // The target is gone: count everything left as rejected and stop.
                    rejected.fetch_add(total - sent, Ordering::Relaxed);
                    return first_error;
                }
                continue;
            };
            let req = Request::post(url.clone())
                .header("Host", authority.as_str())
                .header("Content-Type", "application/x-protobuf")
                .header("Content-Encoding", "snappy")
                .header("X-Prometheus-Remote-Write-Version", "0.1.0")
                .body(Full::new(body.clone()));
            let Ok(req) = req else { break };
            let outcome = s.send_request(req).await;
            match outcome {
                Ok(resp) => {
                    let status = resp.status();
                    let text = resp.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
                    if status.is_success() {
                        accepted.fetch_add(n, Ordering::Relaxed);
                    } else if status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error() {
                        if tries < 20 {
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            continue;
                        }
                        rejected.fetch_add(n, Ordering::Relaxed);
                    } else {
                        rejected.fetch_add(n, Ordering::Relaxed);
                        first_error.get_or_insert_with(|| format!("{status}: {}", String::from_utf8_lossy(&text)));
                    }
                    break;
                }
                Err(e) => {
                    sender = None;
                    first_error.get_or_insert_with(|| format!("request failed: {e}"));
                    if tries > 5 {
                        rejected.fetch_add(n, Ordering::Relaxed);
                        break;
                    }
                }
            }
        }
        sent += n;
    }
    first_error
}

async fn connect(authority: &str) -> Option<hyper::client::conn::http1::SendRequest<Full<Bytes>>> {
    let stream = tokio::net::TcpStream::connect(authority).await.ok()?;
    let _ = stream.set_nodelay(true);
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.ok()?;
    tokio::spawn(conn);
    Some(sender)
}

fn run_once(rt: &tokio::runtime::Runtime, url: &str, pid: Option<u32>, w: &Workload) -> RunResult {
    let uri: hyper::Uri = match url.parse() {
        Ok(u) => u,
        Err(e) => {
            return RunResult {
                accepted: 0,
                rejected: w.total_samples,
                seconds: 0.0,
                peak_rss_bytes: None,
                first_error: Some(format!("bad URL {url}: {e}")),
            }
        }
    };
    let accepted = Arc::new(AtomicU64::new(0));
    let rejected = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let errors = rt.block_on(async {
        let tasks: Vec<_> = w
            .per_worker
            .iter()
            .map(|bodies| tokio::spawn(send_all_owned(uri.clone(), bodies.clone(), accepted.clone(), rejected.clone())))
            .collect();
        let mut errors = Vec::new();
        for t in tasks {
            errors.push(t.await.ok().flatten());
        }
        errors
    });
    let seconds = started.elapsed().as_secs_f64();
    RunResult {
        accepted: accepted.load(Ordering::Relaxed),
        rejected: rejected.load(Ordering::Relaxed),
        seconds,
        peak_rss_bytes: pid.and_then(peak_rss),
        first_error: errors.into_iter().flatten().next(),
    }
}

async fn send_all_owned(
    url: hyper::Uri,
    bodies: Vec<(Bytes, u64)>,
    a: Arc<AtomicU64>,
    r: Arc<AtomicU64>,
) -> Option<String> {
    send_all(&url, bodies, a, r).await
}

/// `VmHWM` of a process, in bytes.
fn peak_rss(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// A target process started by the bench; killed by PID on drop.
struct Spawned {
    child: Child,
    dir: PathBuf,
    url: String,
}

impl Drop for Spawned {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Flushes every dirty page of the machine (`sync(1)`), so each run starts from a clean disk.
fn settle_disk() {
    if let Err(e) = std::process::Command::new("sync").status() {
        eprintln!("sync failed ({e}); the next run may pay for this one's writes");
    }
}

fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn spawn(kind: &str, saltdb_bin: &std::path::Path, histograms: bool) -> Result<Spawned, String> {
    let port = free_port().map_err(|e| e.to_string())?;
    let dir = std::env::temp_dir().join(format!("saltdb-rw-bench-{}-{kind}-{port}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let addr = format!("127.0.0.1:{port}");
    let data = dir.join("data");
    let (mut cmd, ready) = match kind {
        "saltdb" => {
            let mut c = Command::new(saltdb_bin);
            c.arg("serve").arg("--listen").arg(&addr).arg("--data-dir").arg(&data);
            (c, "/-/ready")
        }
        "prometheus" => {
            let cfg = dir.join("prometheus.yml");
            std::fs::write(&cfg, "global: {}\n").map_err(|e| e.to_string())?;
            let mut c = Command::new("prometheus");
            c.arg(format!("--config.file={}", cfg.display()))
                .arg(format!("--web.listen-address={addr}"))
                .arg(format!("--storage.tsdb.path={}", data.display()))
                .args(["--storage.tsdb.retention.time=15d", "--web.enable-remote-write-receiver"]);
            if histograms {
                c.arg("--enable-feature=native-histograms");
            }
            (c, "/-/ready")
        }
        "victoria-metrics" => {
            let mut c = Command::new("victoria-metrics");
            c.arg(format!("-httpListenAddr={addr}")).arg(format!("-storageDataPath={}", data.display())).args([
                "-retentionPeriod=100y",
                "-search.disableCache",
                "-search.latencyOffset=0s",
            ]);
            (c, "/health")
        }
        other => return Err(format!("unknown target kind {other:?}: use saltdb, prometheus or victoria-metrics")),
    };
    let child = cmd.stdout(Stdio::null()).stderr(Stdio::null()).spawn().map_err(|e| format!("starting {kind}: {e}"))?;
    let spawned = Spawned { child, dir, url: format!("http://{addr}/api/v1/write") };
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if http_get_ok(&addr, ready) {
            return Ok(spawned);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Err(format!("{kind} did not become ready on {addr}"))
}

/// Minimal blocking readiness probe (HTTP/1.0 GET, 2xx?).
fn http_get_ok(addr: &str, path: &str) -> bool {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(addr) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    if s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes()).is_err() {
        return false;
    }
    let mut buf = [0u8; 12];
    s.read_exact(&mut buf).is_ok() && buf.get(9) == Some(&b'2')
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => 0.0,
        _ if n % 2 == 1 => v.get(n / 2).copied().unwrap_or(0.0),
        _ => (v.get(n / 2 - 1).copied().unwrap_or(0.0) + v.get(n / 2).copied().unwrap_or(0.0)) / 2.0,
    }
}

fn main() -> Result<(), String> {
    let args = Args::parse();
    if args.target.is_empty() && args.spawn.is_empty() {
        return Err("nothing to do: give --target NAME=URL[@PID] and/or --spawn KIND".into());
    }
    let saltdb_bin = args.saltdb_bin.clone().unwrap_or_else(|| {
        std::env::current_exe()
            .ok()
            .and_then(|p| p.parent().map(|d| d.join("saltdb")))
            .unwrap_or_else(|| "saltdb".into())
    });
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let built = Instant::now();
    let w = build_workload(&args);
    let requests: usize = w.per_worker.iter().map(Vec::len).sum();
    let bytes: usize = w.per_worker.iter().flatten().map(|(b, _)| b.len()).sum();
    println!(
        "workload: {} series x {} {} = {} samples in {} requests ({} series x {} samples each, {:.1} KiB snappy avg), {} connections; built in {:.1}s",
        args.series, args.samples, if args.histograms { "native histograms" } else { "float samples" }, w.total_samples, requests, args.series_per_request, args.samples_per_request,
        bytes as f64 / requests.max(1) as f64 / 1024.0, args.concurrency, built.elapsed().as_secs_f64()
    );
    if args.decode_only {
        let limits = saltdb::remote::decode::DecodeLimits::default();
        let t = Instant::now();
        let mut n = 0usize;
        for (body, _) in w.per_worker.iter().flatten() {
            let d = saltdb::remote::decode::decode_write(body, saltdb::remote::decode::Protocol::V1, &limits)
                .map_err(|e| e.to_string())?;
            n += d.batch.sample_count();
        }
        let secs = t.elapsed().as_secs_f64();
        println!("decode only (snappy + protobuf + validation, 1 thread): {:.0} samples/s", n as f64 / secs);
    }
    let mut names: Vec<String> = args.spawn.clone();
    names.extend(args.target.iter().map(|t| t.split('=').next().unwrap_or(t).to_owned()));
    let mut results: Vec<Vec<RunResult>> = vec![Vec::new(); names.len()];
    for run in 1..=args.runs.max(1) {
        for (i, name) in names.iter().enumerate() {
            let result = if let Some(kind) = args.spawn.get(i) {
                let result = match spawn(kind, &saltdb_bin, args.histograms) {
                    Ok(s) => {
                        let pid = s.child.id();
                        run_once(&rt, &s.url, Some(pid), &w)
                    }
                    Err(e) => return Err(e),
                };
                // The target is killed and its directory removed by now. Its unwritten pages
                // would otherwise be written back during the next target's run, and a target
                // that fsyncs (saltdb) pays for them in its journal commits: 2.2-2.5 M samples/s
                // right after VictoriaMetrics against 3.0-3.5 M after saltdb, same binary.
                settle_disk();
                result
            } else {
                let spec = args.target.get(i - args.spawn.len()).cloned().unwrap_or_default();
                let rest = spec.split_once('=').map(|(_, r)| r).unwrap_or(&spec);
                let (url, pid) = match rest.rsplit_once('@') {
                    Some((u, p)) => (u.to_owned(), p.parse().ok()),
                    None => (rest.to_owned(), None),
                };
                run_once(&rt, &url, pid, &w)
            };
            println!(
                "run {run}/{}: {name:<17} {:>12.0} samples/s  ({} accepted, {} rejected, {:.2}s)  peak RSS {}{}",
                args.runs,
                result.rate(),
                result.accepted,
                result.rejected,
                result.seconds,
                result.peak_rss_bytes.map_or("n/a".into(), |b| format!("{:.1} MiB", b as f64 / 1048576.0)),
                result
                    .first_error
                    .as_ref()
                    .map_or(String::new(), |e| format!("  first error: {}", e.chars().take(200).collect::<String>())),
            );
            if let Some(r) = results.get_mut(i) {
                r.push(result);
            }
        }
    }
    let medians: Vec<f64> =
        results.iter().map(|r| median(&mut r.iter().map(RunResult::rate).collect::<Vec<_>>())).collect();
    let base = names.iter().position(|n| *n == args.baseline).and_then(|i| medians.get(i).copied());
    println!("\nmedian of {} run(s):", args.runs);
    println!("{:<17} {:>14} {:>16} {:>10}", "target", "samples/s", "peak RSS (med)", format!("vs {}", args.baseline));
    for (i, name) in names.iter().enumerate() {
        let m = medians.get(i).copied().unwrap_or(0.0);
        let mut rss: Vec<f64> = results
            .get(i)
            .map(|r| r.iter().filter_map(|x| x.peak_rss_bytes).map(|b| b as f64).collect())
            .unwrap_or_default();
        let rss = if rss.is_empty() { "n/a".into() } else { format!("{:.1} MiB", median(&mut rss) / 1048576.0) };
        let ratio = base.filter(|b| *b > 0.0).map_or("n/a".into(), |b| format!("{:.2}x", m / b));
        println!("{name:<17} {m:>14.0} {rss:>16} {ratio:>10}");
    }
    Ok(())
}
