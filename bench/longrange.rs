//! `saltdb-bench longrange`: long-range dashboard queries and bytes on disk, saltdb against
//! VictoriaMetrics 1.79 in the same run.
//!
//! 1. One dataset (see `longrange/dataset.rs`): by default 10 metrics x 200 hosts = 2,000
//!    series, 30 days at 60 s (86.4 M samples), ending now; `--preset 15s` is 500 series at 15 s.
//! 2. Remote-written in time order into a fresh `saltdb serve` (release binary, default flags
//!    but `--retention 0`), then into a fresh VictoriaMetrics (rollup result cache on), one
//!    after the other over `--concurrency` connections: samples/s of each.
//! 3. Bytes on disk of each data directory as `du` counts them (allocated blocks of the whole
//!    tree), right after ingest and every 10 s for `--disk-watch`; then settled:
//!    VictoriaMetrics force-merged, saltdb once every closed window is sealed (and again once it
//!    is idle). saltdb's biggest directories and files after ingest and once settled.
//! 4. The seven range queries of the issue over the whole range, each target's first call and
//!    the median of `--runs` repeats, saltdb with and without `nocache=1`, VictoriaMetrics with
//!    `nocache=1` and with its cache (see `longrange/queries.rs` for what a first call is);
//!    `--queries year`, six panels of a year-long dashboard instead (with `--days 365`).
//! 5. Peak RSS of each server during each first call (VmHWM reset through
//!    `/proc/PID/clear_refs` just before), beside the response's size.

mod dataset;
mod disk;
pub(crate) mod queries;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::ValueEnum;

use crate::fleet::Body;
use crate::http_client::Server;
use crate::peers::{self, Peer};
use crate::sender::Sent;
use dataset::Dataset;
use disk::{mb, DiskPoint};
use queries::{ms, PerTarget, QueryTarget, QUERIES, YEAR_QUERIES};

/// The datasets: the 30-day dashboard set at 60 s and at 15 s.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Preset {
    /// 200 hosts x 10 metrics = 2,000 series, 30 days at 60 s (86.4 M samples).
    #[value(name = "60s")]
    Minute,
    /// 50 hosts x 10 metrics = 500 series, 30 days at 15 s (86.4 M samples).
    #[value(name = "15s")]
    Quarter,
}

/// The query sets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum QuerySet {
    /// The seven dashboard queries at steps of 30 minutes to 3 hours (the 30-day sets).
    Dashboard,
    /// Six panels of a year-long dashboard at steps of 6 hours and a day (`--days 365`).
    Year,
}

/// Above this many samples the remote-write bodies are not held: each target's are built a
/// slice at a time while the slice before is sent (a year at 15 s, 1.05 B samples, is 12 GB of
/// snappy bodies).
const SLICE_BODIES_ABOVE: u64 = 300_000_000;
/// Samples in one slice of bodies built while the previous one is sent.
const SLICE_SAMPLES: usize = 50_000_000;

/// The bodies one target is sent: held for every target, or built in slices as they are sent.
#[derive(Clone, Copy)]
enum Source<'a> {
    Held(&'a [Body]),
    Sliced(&'a Dataset),
}

/// Sends every body of `source` to `addr`, a slice being built while the one before is sent.
fn send_all(addr: std::net::SocketAddr, source: Source<'_>, args: &LongRangeArgs) -> Sent {
    let timeout = Duration::from_secs(args.timeout_secs);
    let ds = match source {
        Source::Held(bodies) => return crate::sender::send(addr, timeout, bodies, args.concurrency),
        Source::Sliced(ds) => *ds,
    };
    let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<Body>>(1);
    let (per_series, per_request) = (args.samples_per_series, args.series_per_request);
    std::thread::scope(|scope| {
        scope.spawn(move || {
            let mut bodies = dataset::Bodies::new(ds, per_series, per_request);
            loop {
                let slice = bodies.next_slice(SLICE_SAMPLES);
                if slice.is_empty() || tx.send(slice).is_err() {
                    break;
                }
            }
        });
        let mut sent = Sent::default();
        for slice in rx {
            sent.add(&crate::sender::send(addr, timeout, &slice, args.concurrency));
        }
        sent
    })
}

/// Options of the long-range benchmark.
#[derive(Debug, clap::Args)]
pub struct LongRangeArgs {
    /// The dataset; `--hosts`, `--series-per-metric` and `--interval` override its figures.
    #[arg(long, value_enum, default_value = "60s")]
    preset: Preset,
    /// Hosts, spread over 3 regions (default: 200 with `--preset 60s`, 50 with `15s`).
    #[arg(long)]
    hosts: Option<usize>,
    /// Series of each of the 10 metrics (default: one per host).
    #[arg(long)]
    series_per_metric: Option<usize>,
    /// Days of data, ending now.
    #[arg(long, default_value_t = 30.0)]
    days: f64,
    /// Scrape interval, e.g. `60s`, `15s` (default: the preset's).
    #[arg(long, value_parser = saltdb::http::params::parse_duration_ms)]
    interval: Option<i64>,
    /// Samples of each series in one remote-write request (consecutive scrapes).
    #[arg(long, default_value_t = 120)]
    samples_per_series: usize,
    /// Series in one remote-write request.
    #[arg(long, default_value_t = 500)]
    series_per_request: usize,
    /// Keep-alive connections writing at once.
    #[arg(long, default_value_t = 4)]
    concurrency: usize,
    /// Seconds to watch the data directories after ingest (a `du` every 10 s).
    #[arg(long, default_value_t = 120)]
    disk_watch: u64,
    /// Stop after the bytes on disk (no queries).
    #[arg(long)]
    disk_only: bool,
    /// saltdb only, no VictoriaMetrics.
    #[arg(long)]
    skip_peers: bool,
    /// The queries run after the load.
    #[arg(long, value_enum, default_value = "dashboard")]
    queries: QuerySet,
    /// Query ranges in days, comma-separated (e.g. `7,30,90,365`): each query runs over the
    /// last that many days of the data, at its own step. Default: the whole range.
    #[arg(long, value_delimiter = ',')]
    query_days: Vec<u32>,
    /// Repeats of each query after its first call (the median is reported).
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Longest wait for saltdb's windows to be sealed, or VictoriaMetrics' merges, in seconds.
    #[arg(long, default_value_t = 1_800)]
    settle_timeout: u64,
    /// Longest wait for one HTTP request, in seconds.
    #[arg(long, default_value_t = 300)]
    timeout_secs: u64,
    /// Seed of the dataset's values.
    #[arg(long, default_value_t = 32)]
    seed: u64,
    /// The `saltdb` binary (default: the one next to this bench binary).
    #[arg(long)]
    saltdb_bin: Option<PathBuf>,
    /// Extra argument for `saltdb serve` (repeatable), e.g. `--saltdb-arg=--ooo-grace=0`.
    #[arg(long = "saltdb-arg", allow_hyphen_values = true)]
    saltdb_args: Vec<String>,
    /// `max_source_resolution` of saltdb's queries (`auto`, `raw`, `5m`, ...; default: none,
    /// which is `auto`). With `--saltdb-arg=--downsample=...` the queries also run read raw.
    #[arg(long)]
    tier_resolution: Option<String>,
    /// Extra flag for VictoriaMetrics (repeatable).
    #[arg(long = "vm-arg", allow_hyphen_values = true)]
    vm_args: Vec<String>,
    /// Directory for the data directories (default: the system temp dir).
    #[arg(long)]
    pub work_dir: Option<PathBuf>,
    /// Keep the data directories (their paths are printed).
    #[arg(long)]
    pub keep: bool,
}

impl LongRangeArgs {
    fn dataset(&self) -> Dataset {
        let (hosts, interval) = match self.preset {
            Preset::Minute => (200, 60_000),
            Preset::Quarter => (50, 15_000),
        };
        let hosts = self.hosts.unwrap_or(hosts);
        let per_metric = self.series_per_metric.unwrap_or(hosts);
        Dataset::ending_now(hosts, per_metric, self.days, self.interval.unwrap_or(interval), self.seed)
    }

    /// Whether saltdb builds downsampled tiers (`--saltdb-arg=--downsample=...`): the queries
    /// then also run on it with `max_source_resolution=raw`.
    fn tiered(&self) -> bool {
        self.saltdb_args.iter().any(|a| a.starts_with("--downsample"))
    }

    /// saltdb's out-of-order grace: how long after a window closes it is sealed.
    fn ooo_grace_ms(&self) -> i64 {
        let mut args = self.saltdb_args.iter();
        while let Some(a) = args.next() {
            let value = match a.strip_prefix("--ooo-grace") {
                Some(v) if v.starts_with('=') => Some(v.trim_start_matches('=').to_owned()),
                Some("") => args.next().cloned(),
                _ => None,
            };
            if let Some(ms) = value.and_then(|v| saltdb::http::params::parse_duration_ms(&v).ok()) {
                return ms;
            }
        }
        3_600_000
    }
}

/// What one target went through before the queries.
struct Loaded {
    name: &'static str,
    sent: Sent,
    cpu_secs: f64,
    after_ingest: Vec<DiskPoint>,
    /// (state, bytes on disk) once settled.
    settled: Vec<(String, u64)>,
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// Sends every body to `addr` and prints the rate.
fn ingest(
    name: &'static str,
    addr: std::net::SocketAddr,
    pid: &str,
    bodies: Source<'_>,
    args: &LongRangeArgs,
) -> (Sent, f64) {
    println!("{name}: ingesting (load average {})", load_average());
    let cpu = crate::cpu_seconds(pid);
    let sent = send_all(addr, bodies, args);
    let cpu_secs = crate::cpu_seconds(pid) - cpu;
    println!(
        "{name}: {} samples in {:.1}s: {:.0} samples/s, {:.2} cpu s per M samples; {} rejected, {} retried (load average {})",
        sent.accepted,
        sent.seconds,
        sent.rate(),
        cpu_secs / sent.accepted.max(1) as f64 * 1e6,
        sent.rejected,
        sent.retried,
        load_average()
    );
    for e in &sent.errors {
        println!("  !! {name}: write error: {e}");
    }
    (sent, cpu_secs)
}

fn du_line(name: &str, state: &str, dir: &Path, samples: u64) -> (String, u64) {
    let bytes = crate::dir_allocated_bytes(dir);
    println!("  {name} {state}: {:.1} MB, {:.3} B/sample", mb(bytes), bytes as f64 / samples.max(1) as f64);
    (state.to_owned(), bytes)
}

/// Loads saltdb, watches its data directory and waits until every closed window is sealed.
fn load_saltdb(server: &Server, dir: &Path, bodies: Source<'_>, args: &LongRangeArgs, samples: u64) -> Loaded {
    let name = "saltdb";
    let (sent, cpu_secs) = ingest(name, server.addr, &server.pid(), bodies, args);
    let done = Instant::now();
    disk::breakdown(name, dir);
    disk::saltdb_tables(server.addr);
    let after_ingest = disk::watch(name, dir, samples, done, Duration::from_secs(args.disk_watch));
    let base = format!("http://{}", server.addr);
    let limit = Duration::from_secs(args.settle_timeout);
    let sealed = crate::http_client::wait_until_sealed(name, &base, args.ooo_grace_ms(), limit);
    let state = format!(
        "{} {:.0}s after ingest",
        if sealed { "sealed" } else { "NOT all sealed" },
        done.elapsed().as_secs_f64()
    );
    let mut settled = vec![du_line(name, &state, dir, samples)];
    let (waited, idle) = crate::wait_idle(&server.pid(), Duration::from_secs(600));
    let state =
        format!("{} {:.0}s after ingest", if idle { "idle" } else { "still busy" }, done.elapsed().as_secs_f64());
    println!("  {name}: waited {:.1}s for the server to go idle", waited.as_secs_f64());
    settled.push(du_line(name, &state, dir, samples));
    disk::breakdown(name, dir);
    disk::saltdb_tables(server.addr);
    Loaded { name, sent, cpu_secs, after_ingest, settled }
}

/// Loads VictoriaMetrics, watches its data directory, then flushes and force-merges it.
fn load_vm(vm: &Peer, dir: &Path, bodies: Source<'_>, args: &LongRangeArgs, samples: u64) -> Loaded {
    let name = "victoria-metrics";
    let addr = vm.base.trim_start_matches("http://").parse().expect("VictoriaMetrics address");
    let (sent, cpu_secs) = ingest(name, addr, &vm.pid(), bodies, args);
    let done = Instant::now();
    let after_ingest = disk::watch(name, dir, samples, done, Duration::from_secs(args.disk_watch));
    for path in ["/internal/force_flush", "/internal/force_merge"] {
        if crate::http_client::get_status(&vm.base, path) != Some(200) {
            println!("  !! {name}: GET {path} failed");
        }
    }
    let timeout = Duration::from_secs(args.timeout_secs);
    if let Err(e) = peers::wait_vm_merges(&vm.base, timeout, Duration::from_secs(args.settle_timeout)) {
        println!("  !! {name}: {e}");
    }
    let state = format!("merged {:.0}s after ingest", done.elapsed().as_secs_f64());
    let settled = vec![du_line(name, &state, dir, samples)];
    Loaded { name, sent, cpu_secs, after_ingest, settled }
}

fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}x", a / b),
        _ => "-".to_owned(),
    }
}

fn print_ingest(loaded: &[Loaded]) {
    println!("\n| target | samples | seconds | samples/s | cpu s per M samples | rejected |");
    println!("|---|---|---|---|---|---|");
    for l in loaded {
        println!(
            "| {} | {} | {:.1} | {:.0} | {:.2} | {} |",
            l.name,
            l.sent.accepted,
            l.sent.seconds,
            l.sent.rate(),
            l.cpu_secs / l.sent.accepted.max(1) as f64 * 1e6,
            l.sent.rejected
        );
    }
    if let [salt, vm] = loaded {
        println!("saltdb / VictoriaMetrics samples/s: {}", ratio(Some(salt.sent.rate()), Some(vm.sent.rate())));
    }
}

fn print_disk(loaded: &[Loaded], samples: u64) {
    let per = |b: u64| format!("{:.1} MB, {:.3} B/sample", mb(b), b as f64 / samples.max(1) as f64);
    let names: Vec<&str> = loaded.iter().map(|l| l.name).collect();
    println!("\nBytes on disk (du of the data directory, allocated blocks), {samples} samples:");
    println!("| after ingest | {} | saltdb / VM |", names.join(" | "));
    println!("|---|{}---|", "---|".repeat(names.len()));
    let rows = loaded.iter().map(|l| l.after_ingest.len()).max().unwrap_or(0);
    for i in 0..rows {
        let points: Vec<Option<&DiskPoint>> = loaded.iter().map(|l| l.after_ingest.get(i)).collect();
        let secs = points.iter().flatten().map(|p| p.secs).max().unwrap_or(0);
        let cells: Vec<String> = points.iter().map(|p| p.map_or("-".into(), |p| per(p.bytes))).collect();
        let bytes: Vec<Option<f64>> = points.iter().map(|p| p.map(|p| p.bytes as f64)).collect();
        let r = ratio(bytes.first().copied().flatten(), bytes.get(1).copied().flatten());
        println!("| +{secs}s | {} | {r} |", cells.join(" | "));
    }
    for l in loaded {
        for (state, bytes) in &l.settled {
            println!("| {}: {state} | {} |", l.name, per(*bytes));
        }
    }
    if let [salt, vm] = loaded {
        let last = |l: &Loaded| l.settled.last().map(|s| s.1 as f64);
        println!("settled, saltdb / VictoriaMetrics: {}", ratio(last(salt), last(vm)));
    }
}

fn print_queries(targets: &[QueryTarget], results: &[(String, Vec<PerTarget>)], runs: usize) {
    let vm = targets.iter().position(|t| t.name == "victoria-metrics");
    let salt = targets.iter().position(|t| t.name == "saltdb");
    println!(
        "\nRange queries (over the whole range unless a range is named), ms: first call / median of {runs} repeats"
    );
    println!(
        "| query (step) | saltdb | saltdb `nocache=1` | VM `nocache=1` | VM cache on | first: saltdb / VM nocache | repeat: saltdb / VM cached | nocache repeat: saltdb / VM |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for (q, per) in results {
        let at = |i: Option<usize>| i.and_then(|i| per.get(i));
        let (s, v) = (at(salt), at(vm));
        let cell = |t: Option<&queries::Timed>| t.map_or("-".into(), queries::Timed::show);
        println!(
            "| {q} | {} | {} | {} | {} | {} | {} | {} |",
            cell(s.map(|p| &p.default)),
            cell(s.map(|p| &p.nocache)),
            cell(v.map(|p| &p.nocache)),
            cell(v.map(|p| &p.default)),
            ratio(s.and_then(|p| p.default.first_ms()), v.and_then(|p| p.nocache.first_ms())),
            ratio(s.and_then(|p| p.default.median_ms()), v.and_then(|p| p.default.median_ms())),
            ratio(s.and_then(|p| p.nocache.median_ms()), v.and_then(|p| p.nocache.median_ms())),
        );
    }
    if let Some(raw) = targets.iter().position(|t| t.name == "saltdb raw") {
        println!("\nTiers against raw on the same server (`max_source_resolution=raw`), ms: first call / median of {runs} repeats");
        println!("| query (step) | tiers | tiers `nocache=1` | raw | raw `nocache=1` | nocache repeat: tiers / raw | first: tiers / VM nocache | nocache repeat: tiers / VM |");
        println!("|---|---|---|---|---|---|---|---|");
        for (q, per) in results {
            let at = |i: Option<usize>| i.and_then(|i| per.get(i));
            let (s, r, v) = (at(salt), at(Some(raw)), at(vm));
            let cell = |t: Option<&queries::Timed>| t.map_or("-".into(), queries::Timed::show);
            println!(
                "| {q} | {} | {} | {} | {} | {} | {} | {} |",
                cell(s.map(|p| &p.default)),
                cell(s.map(|p| &p.nocache)),
                cell(r.map(|p| &p.default)),
                cell(r.map(|p| &p.nocache)),
                ratio(s.and_then(|p| p.nocache.median_ms()), r.and_then(|p| p.nocache.median_ms())),
                ratio(s.and_then(|p| p.default.first_ms()), v.and_then(|p| p.nocache.first_ms())),
                ratio(s.and_then(|p| p.nocache.median_ms()), v.and_then(|p| p.nocache.median_ms())),
            );
        }
    }
    println!("\nPeak RSS during each target's first call (VmHWM reset just before; RSS before it), and the answer:");
    println!("| query | target | first call ms | peak RSS MiB | RSS before MiB | response bytes | series | points |");
    println!("|---|---|---|---|---|---|---|---|");
    let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
    for (q, per) in results {
        for (t, p) in targets.iter().zip(per) {
            // saltdb's first call is its default request, VictoriaMetrics' the `nocache=1` one.
            let a = if t.name.starts_with("saltdb") { &p.default.first } else { &p.nocache.first };
            let status = a.error.as_ref().map_or(String::new(), |e| format!(" !! {e}"));
            println!(
                "| {q} | {} | {}{status} | {:.1} | {:.1} | {} | {} | {} |",
                t.name,
                ms(a.ms),
                mib(a.peak_rss),
                mib(a.rss_before),
                a.bytes,
                a.series,
                a.points
            );
        }
    }
}

/// The whole benchmark; data directories under `root`.
pub fn run(args: &LongRangeArgs, root: &Path) {
    let ds = args.dataset();
    let t = Instant::now();
    let samples = ds.samples();
    let sliced = samples > SLICE_BODIES_ABOVE;
    let held = if sliced { Vec::new() } else { ds.bodies(args.samples_per_series, args.series_per_request) };
    let source = if sliced { Source::Sliced(&ds) } else { Source::Held(&held) };
    let body_bytes: usize = held.iter().map(|b| b.bytes.len()).sum();
    println!(
        "dataset: {} metrics x {} series = {} series, {} samples each every {} s over {} days = {samples} samples, \
         {} to {} ms; {} requests ({} series x {} samples, {:.0} MB of snappy bodies) built in {:.1}s{}; seed {}",
        dataset::METRICS.len(),
        ds.per_metric,
        ds.series(),
        ds.points,
        ds.interval_ms / 1000,
        args.days,
        ds.start_ms,
        ds.end_ms,
        held.len(),
        args.series_per_request,
        args.samples_per_series,
        mb(body_bytes as u64),
        t.elapsed().as_secs_f64(),
        if sliced { " (none held: built in slices while sent, on the same cores as the server)" } else { "" },
        args.seed
    );
    let bin = args.saltdb_bin.clone().unwrap_or_else(Server::default_bin);
    let salt_dir = root.join("saltdb");
    // Retention off, as VictoriaMetrics runs with -retentionPeriod=100y: with saltdb's default
    // 30 days the oldest samples would fall out of retention while the bench runs.
    let mut flags = vec!["--retention", "0"];
    flags.extend(args.saltdb_args.iter().map(String::as_str));
    println!("saltdb: {} serve {}", bin.display(), flags.join(" "));
    let salt = match Server::try_spawn_bin(&bin, &salt_dir, &flags) {
        Ok(s) => s,
        Err(e) => return println!("!! saltdb: {e}"),
    };
    let mut loaded = vec![load_saltdb(&salt, &salt_dir, source, args, samples)];
    let vm_dir = root.join("victoria-metrics");
    let vm = if args.skip_peers {
        None
    } else if !peers::installed("victoria-metrics") {
        println!("(victoria-metrics missing: apt-get install -y victoria-metrics)");
        None
    } else {
        Peer::victoria_metrics_cached(&vm_dir, &args.vm_args).or_else(|| {
            println!("!! victoria-metrics did not start");
            None
        })
    };
    if let Some(vm) = &vm {
        loaded.push(load_vm(vm, &vm_dir, source, args, samples));
    }
    drop(held);
    print_ingest(&loaded);
    print_disk(&loaded, samples);
    if !args.disk_only {
        let timeout = Duration::from_secs(args.timeout_secs);
        let extra = args.tier_resolution.iter().map(|r| ("max_source_resolution", r.clone())).collect();
        let mut targets = vec![QueryTarget { name: "saltdb", addr: salt.addr, pid: salt.pid(), timeout, extra }];
        if args.tiered() {
            // The same server read raw: what the tiers save.
            let extra = vec![("max_source_resolution", "raw".to_owned())];
            targets.push(QueryTarget { name: "saltdb raw", addr: salt.addr, pid: salt.pid(), timeout, extra });
        }
        if let Some(vm) = &vm {
            let addr = vm.base.trim_start_matches("http://").parse().expect("VictoriaMetrics address");
            targets.push(QueryTarget { name: "victoria-metrics", addr, pid: vm.pid(), timeout, extra: Vec::new() });
        }
        println!("\nqueries (load average {})", load_average());
        let mut results = Vec::new();
        let set: &[(&str, i64)] = match args.queries {
            QuerySet::Dashboard => &QUERIES,
            QuerySet::Year => &YEAR_QUERIES,
        };
        let ranges: Vec<Option<u32>> =
            if args.query_days.is_empty() { vec![None] } else { args.query_days.iter().copied().map(Some).collect() };
        for (&(q, step), days) in ranges.iter().flat_map(|d| set.iter().map(move |qs| (qs, *d))) {
            // On multiples of the step, as Grafana sends a panel's range.
            let step_ms = step * 1000;
            let from =
                days.map_or(ds.start_ms, |d| ds.end_ms.saturating_sub(i64::from(d) * 86_400_000).max(ds.start_ms));
            let (start, end) = (from - from.rem_euclid(step_ms), ds.end_ms - ds.end_ms.rem_euclid(step_ms));
            let per = queries::run_query(&targets, q, step, start, end, args.runs);
            let label = match days {
                Some(d) => format!("`{q}` ({}, {d} days)", human_step(step)),
                None => format!("`{q}` ({})", human_step(step)),
            };
            let shown: Vec<String> = targets
                .iter()
                .zip(&per)
                .map(|(t, p)| format!("{} {} | {}", t.name, p.default.show(), p.nocache.show()))
                .collect();
            println!("  {label}: {}", shown.join("; "));
            results.push((label, per));
        }
        println!("(load average after the queries: {})", load_average());
        print_queries(&targets, &results, args.runs);
    }
    println!("\nBytes on disk at the end, {samples} samples:");
    let state = if args.disk_only { "at the end" } else { "after the queries" };
    du_line("saltdb", state, &salt_dir, samples);
    if vm.is_some() {
        du_line("victoria-metrics", state, &vm_dir, samples);
    }
    match salt.stop_within(Duration::from_secs(600)) {
        // A clean shutdown flushes every memtable and empties the journals.
        Ok(_) => {
            du_line("saltdb", "after a clean shutdown", &salt_dir, samples);
        }
        Err(e) => println!("!! saltdb: {e}"),
    }
    if args.keep {
        let vm_dir = vm.as_ref().map_or(String::new(), |_| format!(" and {}", vm_dir.display()));
        println!("data kept: {}{vm_dir}", salt_dir.display());
    }
}

fn human_step(s: i64) -> String {
    match s {
        s if s % 86_400 == 0 => format!("{}d", s / 86_400),
        s if s % 3_600 == 0 => format!("{}h", s / 3_600),
        s if s % 60 == 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}
