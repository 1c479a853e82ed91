//! `saltdb-bench cardinality` (issue 13, "cost proportional to the work"): saltdb against
//! VictoriaMetrics 1.79 at high series counts, one target after the other (never both loaded at
//! once), on a fleet of hosts (see `fleet.rs`) written by remote-write 1.0.
//!
//! Default mode: `--rounds` scrapes of `--series` series (round 1 creates every series, the
//! others only append), then the median latency of small and large API requests over that data,
//! peak RSS, and bytes on disk once the target has flushed (for saltdb also per keyspace and key
//! family, as `saltdb disk-usage` prints them). `--churn`: rounds of new series
//! replacing the previous ones, with a few small requests, RSS and disk after each round, so a
//! cost that grows with the series ever seen (rather than the ones asked for) shows as a
//! growing line. See `bench/README.md`.

mod probe;
mod report;
mod target;
mod write;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::ValueEnum;

use crate::fleet::{Fleet, INTERVAL_MS};
use probe::{api, instant, secs, time_probe, Answer, Probe, Timing};
use report::{
    churn_mismatches, mib, print_churn_header, print_churn_line, print_ingest, print_queries, report_json, thousands,
};
use target::{Settled, Target};
use write::{scrape, Sent};

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
    /// Extra flag for VictoriaMetrics (repeatable), e.g. `--vm-arg=-search.maxUniqueTimeseries=3000000`.
    /// Its defaults refuse queries over more than 300,000 series and series lists over 30,000:
    /// where the run's requests need more (above 3 M series), both limits are raised to the host
    /// count unless given here.
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
    /// After the requests, print the running target's bytes on disk (`du`, journals apart)
    /// every 10 s for this many seconds from the end of the last round, before it is settled
    /// (saltdb's idle flush, `--idle-flush`, runs meanwhile). 0: not watched.
    #[arg(long, default_value_t = 0)]
    watch_disk: u64,
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
    /// With `--churn`: run the rounds in real time, this many seconds apart (at least
    /// `--churn-samples` x 15 s), each scrape sent when its timestamp comes, instead of
    /// backfilling them 6 min apart. With `--saltdb-arg=--window=1m --saltdb-arg=--retention=3m`
    /// retention drops the rounds that stopped while the bench runs: the churn of a real fleet.
    #[arg(long, value_name = "SECS")]
    churn_live: Option<u64>,
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

/// Churn rounds are at least this far apart, more than the 5 min lookback of an instant
/// query, so a round's instant queries see only its own series.
const CHURN_MIN_GAP_MS: i64 = 6 * 60_000;
/// The host most requests ask about (or the last host of a smaller fleet).
const PROBE_HOST: usize = 42;

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

/// The longest the bench waits for a target to go idle after ingest before timing requests.
const IDLE_LIMIT: std::time::Duration = std::time::Duration::from_secs(180);

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
    let ingested = Instant::now();
    if let Err(e) = target.make_searchable() {
        println!("  !! {}: {e}", target.name());
    }
    // Requests are timed once the target has finished what the ingest left it (saltdb's
    // flushes and compactions, VictoriaMetrics' buffered rows and merges): otherwise that
    // work runs inside the sub-millisecond requests and decides their ratios.
    let (waited, idle) = crate::wait_idle(&target.pid(), IDLE_LIMIT);
    println!(
        "  {}idle {:.1}s after the last round{}",
        if idle { "" } else { "!! not " },
        waited.as_secs_f64(),
        if idle { "" } else { "; timing requests anyway" }
    );
    for p in probes {
        let t = time_probe(&target, p, args.runs);
        println!("  {:<36} {:>10} ms  {}", p.name, report::ms(Some(&t)), t.answer.map_or("-".into(), Answer::show));
        report.timings.push(t);
    }
    watch_disk(&target.dir, ingested, args.watch_disk);
    report.settled = settle(target, args);
    println!(
        "  peak RSS {:.1} MiB, on disk {:.1} MiB ({})",
        mib(report.settled.peak_rss),
        mib(report.settled.disk_bytes),
        report.settled.notes.join("; ")
    );
    report
}

/// Prints the bytes on disk of the running target in `dir` every 10 s until `secs` after
/// `since` (the end of the last round).
fn watch_disk(dir: &Path, since: Instant, secs: u64) {
    if secs == 0 {
        return;
    }
    let end = since + Duration::from_secs(secs);
    loop {
        let journals: u64 = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.path().extension().is_some_and(|x| x == "jnl"))
            .filter_map(|e| e.metadata().ok())
            .map(|m| std::os::unix::fs::MetadataExt::blocks(&m) * 512)
            .sum();
        println!(
            "  {:>5.0}s after the last round: on disk {:.1} MiB (journals {:.1} MiB), running",
            since.elapsed().as_secs_f64(),
            mib(crate::dir_allocated_bytes(dir)),
            mib(journals)
        );
        if Instant::now() + Duration::from_secs(10) > end {
            break;
        }
        std::thread::sleep(Duration::from_secs(10));
    }
}

/// Settles the target (see [`Target::settle`]) and removes its data directory unless
/// `--keep-data`.
fn settle(target: Target, args: &CardinalityArgs) -> Settled {
    let dir = target.dir.clone();
    let is_saltdb = target.name() == "saltdb";
    let settled = target.settle();
    if is_saltdb {
        // Where the bytes went, per keyspace and key family (as `saltdb disk-usage` prints).
        match saltdb::storage::disk_usage(&dir) {
            Ok(usage) => print!("{}", indent(&usage.to_string())),
            Err(e) => println!("  !! disk usage of {}: {e}", dir.display()),
        }
    }
    if args.keep_data {
        println!("  data kept in {}", dir.display());
    } else {
        let _ = std::fs::remove_dir_all(&dir);
    }
    settled
}

fn indent(text: &str) -> String {
    text.lines().map(|l| format!("  {l}\n")).collect()
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
    /// Each scrape waits for the wall clock to reach its timestamp.
    live: bool,
}

impl ChurnTimeline {
    fn ending_now(rounds: usize, samples: usize) -> Self {
        let gap_ms = (samples as i64 * INTERVAL_MS).max(CHURN_MIN_GAP_MS);
        let now = chrono::Utc::now().timestamp_millis();
        let first_ms = now - now.rem_euclid(INTERVAL_MS) - rounds as i64 * gap_ms;
        Self { first_ms, gap_ms, samples, live: false }
    }

    /// Rounds `gap_secs` apart from the next 15 s boundary, in real time.
    fn starting_now(gap_secs: u64, samples: usize) -> Self {
        let now = chrono::Utc::now().timestamp_millis();
        let first_ms = now - now.rem_euclid(INTERVAL_MS) + INTERVAL_MS;
        Self { first_ms, gap_ms: gap_secs as i64 * 1000, samples, live: true }
    }

    /// Sleeps until round `c`'s scrape `j` is due (live timelines only).
    fn wait_for(self, round: usize, j: usize) {
        if self.live {
            let due = self.base(round, j) - chrono::Utc::now().timestamp_millis();
            if due > 0 {
                std::thread::sleep(std::time::Duration::from_millis(due as u64));
            }
        }
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
    // A live timeline starts with each target, after its start-up.
    let tl = if tl.live { ChurnTimeline::starting_now(tl.gap_ms as u64 / 1000, tl.samples) } else { tl };
    let mut report = Report { name: target.name(), ..Report::default() };
    println!("== {}: data in {}", target.name(), target.dir.display());
    print_churn_header();
    for c in 0..args.churn_rounds {
        let series = c * args.churn_series..(c + 1) * args.churn_series;
        let mut round = ChurnRound { series_total: series.end, ..ChurnRound::default() };
        for j in 0..tl.samples {
            tl.wait_for(c, j);
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
    if let Some(gap) = args.churn_live {
        if gap.saturating_mul(1000) < args.churn_samples as u64 * INTERVAL_MS as u64 {
            return Err("--churn-live needs at least --churn-samples x 15 seconds between rounds".into());
        }
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
        let tl = match args.churn_live {
            Some(gap) => ChurnTimeline::starting_now(gap, args.churn_samples),
            None => ChurnTimeline::ending_now(args.churn_rounds, args.churn_samples),
        };
        println!(
            "churn: {} rounds of {} new series ({} metrics x {} hosts) x {} samples, rounds {} s apart{}; {} series per request, {} connections",
            args.churn_rounds,
            thousands(args.churn_series as u64),
            args.metrics,
            args.churn_series / args.metrics,
            args.churn_samples,
            tl.gap_ms / 1000,
            if tl.live { " in real time" } else { "" },
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
