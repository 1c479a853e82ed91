//! `saltdb-bench`: measures saltdb ingest on a node-exporter-like workload, in-process and over
//! HTTP (JSON-lines import against the real `saltdb` binary), and prints samples/s, bytes on disk
//! per sample after a flush, and peak RSS. See `bench/README.md`.

mod cardinality;
mod clickhouse_replication;
mod crash;
mod fleet;
mod flood;
mod histogram_size;
mod http_client;
mod latencies;
mod longrange;
mod neighbours;
mod peers;
mod protocols;
mod query;
mod rules;
mod scan;
mod sender;
mod size;
mod soak;
mod tier_size;
mod workload;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use clap::{Parser, ValueEnum};
use saltdb::sample::WriteBatch;
use saltdb::storage::{FsyncMode, Storage, StorageConfig};

use workload::Workload;

/// The server's allocator, so in-process figures match what `saltdb serve` does.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Mode {
    InProcess,
    Http,
    Both,
}

/// saltdb benchmarks: ingest throughput and bytes on disk, query latency against peers.
#[derive(Debug, Parser)]
enum Bench {
    /// Ingest a node-exporter-like workload in-process and over HTTP.
    Ingest(Args),
    /// Time query_range against saltdb, Prometheus and VictoriaMetrics loaded with the same data.
    Query(query::QueryArgs),
    /// Bytes on disk per sample (saltdb sealed vs Prometheus vs VictoriaMetrics), hot vs sealed queries.
    Size(size::SizeArgs),
    /// A flood of large imports, with and without the write budget: accepted, 429s, peak RSS.
    Flood(flood::FloodArgs),
    /// A noisy neighbour: one tenant's ingest and queries alone, then beside another flooding past its limits.
    Neighbours(neighbours::NeighboursArgs),
    /// saltdb vs VictoriaMetrics at a million series and more: ingest, requests, RSS, disk; churn.
    Cardinality(cardinality::CardinalityArgs),
    /// Minutes of mixed writes, imports, queries and hostile requests: RSS over time, statuses, latencies.
    Soak(soak::SoakArgs),
    /// kill -9 during the remote-write ingest of new series: acknowledged vs found, restart time.
    Crash(crash::CrashArgs),
    /// Ingest throughput per protocol (line protocol, OpenTSDB, Prometheus text, JSON, OTLP) vs VictoriaMetrics.
    Protocols(protocols::ProtocolArgs),
    /// Long-range queries over sealed data in-process: time, samples read per second per core, the decode limit.
    Scan(scan::ScanArgs),
    /// 30-day range queries and bytes on disk of a running server vs VictoriaMetrics.
    Longrange(longrange::LongRangeArgs),
    /// saltdb on ClickHouse: ingest and query cost of replicated shards (quorum 1 and 2) vs unreplicated.
    ClickhouseReplication(clickhouse_replication::ReplicationArgs),
    /// 1,000 recording rules over 1 M series vs Prometheus: CPU per evaluation, lag, RSS, same outputs.
    Rules(rules::RulesArgs),
}

/// Options of the ingest benchmark.
#[derive(Debug, clap::Args)]
struct Args {
    /// Hosts to simulate (about 500 series each).
    #[arg(long, default_value_t = 20)]
    hosts: usize,
    /// Hours of data at a 15 s interval.
    #[arg(long, default_value_t = 2.0)]
    hours: f64,
    /// Scrapes per series in one request (samples per series per request).
    #[arg(long, default_value_t = 10)]
    scrapes_per_request: usize,
    /// Series per request.
    #[arg(long, default_value_t = 1000)]
    series_per_request: usize,
    /// Concurrent writers (threads or HTTP connections).
    #[arg(long, default_value_t = 4)]
    concurrency: usize,
    /// Where to ingest.
    #[arg(long, value_enum, default_value_t = Mode::Both)]
    mode: Mode,
    /// fsync modes to measure in-process (comma-separated: always,batch,never).
    #[arg(long, value_delimiter = ',', default_value = "batch,always")]
    fsync: Vec<String>,
    /// Directory for the temporary data directories (default: system temp dir).
    #[arg(long)]
    work_dir: Option<PathBuf>,
}

/// Pre-built requests in time order.
fn build_batches(args: &Args) -> (Vec<WriteBatch>, usize) {
    let mut w = Workload::new(args.hosts);
    let series = w.series_count();
    let scrapes = (args.hours * 240.0) as usize;
    let t0 = chrono::Utc::now().timestamp_millis() - scrapes as i64 * 15_000;
    let mut batches = Vec::new();
    let mut k = 0;
    while k < scrapes {
        let n = args.scrapes_per_request.min(scrapes - k);
        let mut start = 0;
        while start < series {
            let end = (start + args.series_per_request).min(series);
            batches.push(w.batch(start..end, t0 + k as i64 * 15_000, n));
            start = end;
        }
        k += n;
    }
    (batches, series)
}

/// CPU time (user + system) the process has used so far, in seconds (`/proc/<pid>/stat`, in
/// clock ticks of 10 ms). On a shared machine a query's CPU time varies far less than its
/// latency, which waits for whatever else is running.
pub(crate) fn cpu_seconds(pid: &str) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may hold spaces), from field 3 on.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<u64> = rest.split_whitespace().map(|x| x.parse().unwrap_or(0)).collect();
    let ticks = f.get(11).copied().unwrap_or(0) + f.get(12).copied().unwrap_or(0);
    ticks as f64 / 100.0
}

/// Waits until the process `pid` uses less than 5% of a core over 200 ms, at most `limit`;
/// returns how long it waited and whether it went idle. Benches call it between a write
/// phase and what they time next, so background work (a peer's buffered rows, flushes,
/// compactions) does not run inside the next measurement.
pub(crate) fn wait_idle(pid: &str, limit: std::time::Duration) -> (std::time::Duration, bool) {
    let started = std::time::Instant::now();
    let mut last = cpu_seconds(pid);
    while started.elapsed() < limit {
        std::thread::sleep(std::time::Duration::from_millis(200));
        let now = cpu_seconds(pid);
        if now - last < 0.01 {
            return (started.elapsed(), true);
        }
        last = now;
    }
    (started.elapsed(), false)
}

/// A `kB` field of `/proc/<pid>/status` (`VmRSS:`, `VmHWM:`...), in KiB; 0 when unreadable.
fn status_kib(pid: &str, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Watches a process' resident set size every few ms until [`RssWatch::peak_mib`].
struct RssWatch {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    peak_kib: std::sync::Arc<std::sync::atomic::AtomicU64>,
    thread: std::thread::JoinHandle<()>,
    pid: String,
}

impl RssWatch {
    /// Starts watching `pid`, polling every `every`.
    fn start(pid: &str, every: std::time::Duration) -> Self {
        use std::sync::atomic::{AtomicBool, AtomicU64};
        let (stop, peak_kib) = (std::sync::Arc::new(AtomicBool::new(false)), std::sync::Arc::new(AtomicU64::new(0)));
        let thread = {
            let (stop, peak, pid) = (stop.clone(), peak_kib.clone(), pid.to_owned());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    peak.fetch_max(status_kib(&pid, "VmRSS:"), Ordering::Relaxed);
                    std::thread::sleep(every);
                }
            })
        };
        Self { stop, peak_kib, thread, pid: pid.to_owned() }
    }

    /// Stops watching: the peak RSS seen (or the kernel's high-water mark, if higher), in MiB.
    fn peak_mib(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.thread.join();
        self.peak_kib.load(Ordering::Relaxed).max(status_kib(&self.pid, "VmHWM:")) / 1024
    }
}

/// Peak resident set size of a process in bytes (VmHWM).
fn peak_rss(pid: &str) -> u64 {
    status_kib(pid, "VmHWM:") * 1024
}

/// Current and peak resident set size of a process in bytes (VmRSS, VmHWM).
fn rss_and_peak(pid: &str) -> (u64, u64) {
    (status_kib(pid, "VmRSS:") * 1024, peak_rss(pid))
}

/// Runs a bench in a fresh directory `saltdb-bench-<name>-<pid>` under `work_dir` (default: the
/// system temp dir), removed afterwards unless `keep`.
fn in_work_dir(work_dir: Option<&Path>, name: &str, keep: bool, bench: impl FnOnce(&Path)) {
    let base = work_dir.map_or_else(std::env::temp_dir, Path::to_path_buf);
    let root = base.join(format!("saltdb-bench-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&root).expect("work dir");
    bench(&root);
    if !keep {
        let _ = std::fs::remove_dir_all(&root);
    }
}

/// Bytes a directory tree occupies on disk as `du -s --block-size=1` counts them: allocated
/// blocks (`st_blocks` x 512) of every file and directory, hard links counted once. Sparse or
/// preallocated files count what they hold, not their length.
fn dir_allocated_bytes(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut seen = std::collections::HashSet::new();
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        if let Ok(m) = std::fs::symlink_metadata(&d) {
            if seen.insert((m.dev(), m.ino())) {
                total += m.blocks() * 512;
            }
        }
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for e in entries.flatten() {
            match e.metadata() {
                Ok(m) if m.is_dir() => stack.push(e.path()),
                Ok(m) => {
                    if seen.insert((m.dev(), m.ino())) {
                        total += m.blocks() * 512;
                    }
                }
                Err(_) => {}
            }
        }
    }
    total
}

/// Bytes allocated under `dir`, as `du` counts them (0 when it cannot be read).
fn dir_bytes(dir: &Path) -> u64 {
    saltdb::storage::du_bytes(dir).unwrap_or(0)
}

/// Runs `work(i)` for every index from `concurrency` threads.
fn parallel(n: usize, concurrency: usize, work: impl Fn(usize) + Sync) {
    let next = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..concurrency {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    break;
                }
                work(i);
            });
        }
    });
}

struct Row {
    label: String,
    samples: usize,
    seconds: f64,
    disk_bytes: Option<u64>,
    rss: u64,
}

fn in_process(args: &Args, batches: &[WriteBatch], fsync: FsyncMode, root: &Path) -> Row {
    let dir = root.join(format!("inproc-{fsync:?}"));
    let _ = std::fs::remove_dir_all(&dir);
    let mut config = StorageConfig::new(dir.clone());
    config.retention_ms = None;
    config.fsync = fsync;
    let storage = Storage::open(config).expect("open storage");
    let samples: usize = batches.iter().map(WriteBatch::sample_count).sum();
    let start = Instant::now();
    parallel(batches.len(), args.concurrency, |i| {
        if let Some(b) = batches.get(i) {
            storage.write(b.clone()).expect("write");
        }
    });
    let seconds = start.elapsed().as_secs_f64();
    storage.flush().expect("flush");
    let stats = storage.stats().expect("stats");
    let tables: u64 = stats.table_bytes.iter().map(|(_, b)| b).sum();
    drop(storage);
    let _ = std::fs::remove_dir_all(&dir);
    Row {
        label: format!("in-process fsync={fsync:?}"),
        samples,
        seconds,
        disk_bytes: Some(tables),
        rss: peak_rss("self"),
    }
}

fn over_http(args: &Args, batches: &[WriteBatch], root: &Path) -> Row {
    let dir = root.join("http");
    let _ = std::fs::remove_dir_all(&dir);
    let bodies: Vec<Vec<u8>> =
        batches.iter().map(|b| b.series.iter().flat_map(saltdb::http::export::encode_line).collect()).collect();
    let samples: usize = batches.iter().map(WriteBatch::sample_count).sum();
    let server = http_client::Server::spawn(&dir, &["--retention", "0"]);
    let start = Instant::now();
    parallel(bodies.len(), args.concurrency, |i| {
        thread_local! { static CONN: std::cell::RefCell<Option<http_client::Conn>> = const { std::cell::RefCell::new(None) }; }
        CONN.with(|c| {
            let mut c = c.borrow_mut();
            let conn = c.get_or_insert_with(|| http_client::Conn::connect(server.addr));
            let status = conn.post("/api/v1/import", bodies.get(i).map_or(&[][..], Vec::as_slice));
            assert_eq!(status, 204, "import failed");
        });
    });
    let seconds = start.elapsed().as_secs_f64();
    let rss = peak_rss(&server.pid());
    server.stop();
    let disk = dir_bytes(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    Row { label: "http import (saltdb binary)".into(), samples, seconds, disk_bytes: Some(disk), rss }
}

fn main() {
    let root = std::env::temp_dir().join(format!("saltdb-bench-{}", std::process::id()));
    match Bench::parse() {
        Bench::Ingest(args) => {
            let root = args.work_dir.clone().map_or(root, |d| d.join(format!("saltdb-bench-{}", std::process::id())));
            std::fs::create_dir_all(&root).expect("work dir");
            ingest(&args, &root);
            let _ = std::fs::remove_dir_all(&root);
        }
        Bench::Size(args) => {
            std::fs::create_dir_all(&root).expect("work dir");
            size::run(&args, &root);
            let _ = std::fs::remove_dir_all(&root);
        }
        Bench::Query(args) => {
            std::fs::create_dir_all(&root).expect("work dir");
            query::run(&args, &root);
            let _ = std::fs::remove_dir_all(&root);
        }
        Bench::Cardinality(args) => {
            in_work_dir(args.work_dir.as_deref(), "cardinality", args.keep_data, |root| cardinality::run(&args, root))
        }
        Bench::Scan(args) => scan::run(&args),
        Bench::Longrange(args) => {
            in_work_dir(args.work_dir.as_deref(), "longrange", args.keep, |root| longrange::run(&args, root))
        }
        Bench::ClickhouseReplication(args) => in_work_dir(args.work_dir.as_deref(), "replication", args.keep, |root| {
            clickhouse_replication::run(&args, root)
        }),
        Bench::Rules(args) => {
            in_work_dir(args.work_dir.as_deref(), "rules", args.keep_data, |root| rules::run(&args, root))
        }
        Bench::Protocols(args) => {
            std::fs::create_dir_all(&root).expect("work dir");
            protocols::run(&args, &root);
            let _ = std::fs::remove_dir_all(&root);
        }
        Bench::Soak(args) => {
            std::fs::create_dir_all(&root).expect("work dir");
            soak::run(&args, &root);
            let _ = std::fs::remove_dir_all(&root);
        }
        Bench::Crash(args) => {
            std::fs::create_dir_all(&root).expect("work dir");
            crash::run(&args, &root);
            let _ = std::fs::remove_dir_all(&root);
        }
        Bench::Neighbours(args) => {
            std::fs::create_dir_all(&root).expect("work dir");
            neighbours::run_all(&args, &root);
            let _ = std::fs::remove_dir_all(&root);
        }
        Bench::Flood(args) => {
            std::fs::create_dir_all(&root).expect("work dir");
            flood::flood(&args, &root);
            let _ = std::fs::remove_dir_all(&root);
        }
    }
}

fn ingest(args: &Args, root: &Path) {
    let gen = Instant::now();
    let (batches, series) = build_batches(args);
    let samples: usize = batches.iter().map(WriteBatch::sample_count).sum();
    println!(
        "workload: {} hosts, {series} series, {samples} samples ({} requests of {} series x {} samples), built in {:.1}s, concurrency {}",
        args.hosts,
        batches.len(),
        args.series_per_request,
        args.scrapes_per_request,
        gen.elapsed().as_secs_f64(),
        args.concurrency
    );
    let mut rows = Vec::new();
    if args.mode != Mode::Http {
        for f in &args.fsync {
            let mode = FsyncMode::from_str(f, true).unwrap_or_else(|e| panic!("--fsync {f}: {e}"));
            rows.push(in_process(args, &batches, mode, root));
        }
    }
    if args.mode != Mode::InProcess {
        rows.push(over_http(args, &batches, root));
    }
    println!(
        "{:<32} {:>10} {:>8} {:>12} {:>14} {:>12}",
        "run", "samples", "seconds", "samples/s", "disk B/sample", "peak RSS MiB"
    );
    for r in rows {
        let per = r.disk_bytes.map_or("-".into(), |b| format!("{:.2}", b as f64 / r.samples as f64));
        println!(
            "{:<32} {:>10} {:>8.2} {:>12.0} {:>14} {:>12.1}",
            r.label,
            r.samples,
            r.seconds,
            r.samples as f64 / r.seconds,
            per,
            r.rss as f64 / (1 << 20) as f64
        );
    }
    println!("(in-process disk = flushed tables after Storage::flush; http disk = data directory after shutdown, journal included; in-process RSS includes the pre-built workload)");
}
