//! `saltdb-bench rules` (issue 34, "evaluation cost"): 1,000 recording rules over 1 M active
//! series, saltdb against Prometheus 2.42 evaluating the same rule file on the same data, one
//! target after the other (never both running at once).
//!
//! For each target: start it with an empty rule file, remote-write the scrapes of a fleet of
//! 1,000 metrics x 1,000 hosts from `--history` minutes ago, then `--live` minutes more in real
//! time (`ingest.rs`), stop writing, load the rules (10 groups x 100 rules, one per metric,
//! see `ruleset.rs`) with `POST /-/reload`, wait until `--settle` seconds after the end of the
//! data (and at least one interval after the reload), then watch `--evaluations`
//! intervals: the process's CPU (`/proc/<pid>/stat`) per group evaluation carried out (from
//! `prometheus_rule_group_iterations_total` less the missed ones), each evaluation's duration
//! (`prometheus_rule_group_last_duration_seconds`, read every third of an interval), missed
//! iterations, failures and RSS. Last, every sample recorded in the watched intervals is read
//! back and compared with the other target's (`compare.rs`). See `bench/README.md`.

mod compare;
mod figures;
mod ingest;
mod ruleset;
mod target;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use compare::{agree, Points};
use figures::GroupFigures;
use ingest::{Ingested, Timeline};
use ruleset::RuleSet;
use target::{Target, TargetKind};

/// Options of the rules benchmark.
#[derive(Debug, clap::Args)]
pub struct RulesArgs {
    /// Active series: `--metrics` metric names on `series / metrics` hosts.
    #[arg(long, default_value_t = 1_000_000)]
    series: usize,
    /// Metric names (`m0`, `m1`, ...), each on every host; one rule per metric.
    #[arg(long, default_value_t = 1_000)]
    metrics: usize,
    /// Rule groups.
    #[arg(long, default_value_t = 10)]
    groups: usize,
    /// Rules per group (groups x rules per group must not exceed `--metrics`).
    #[arg(long, default_value_t = 100)]
    rules_per_group: usize,
    /// Evaluation interval of every group, seconds.
    #[arg(long = "interval", default_value_t = 30)]
    interval_secs: u64,
    /// Minutes of data before the start, written as fast as the target takes them.
    #[arg(long = "history", default_value_t = 5)]
    history_minutes: i64,
    /// Minutes of data after the start, each scrape written once its interval has passed.
    #[arg(long = "live", default_value_t = 5)]
    live_minutes: i64,
    /// Seconds after the end of the data before the watch starts (the same for every target, so
    /// that their rules' windows hold the same data; at least one interval after the rules are
    /// loaded).
    #[arg(long = "settle", default_value_t = 60)]
    settle_secs: u64,
    /// Intervals watched (the rules' windows empty as the watch goes on: with the defaults they
    /// hold 4 minutes of data at its start, 2 at its end).
    #[arg(long, default_value_t = 4)]
    evaluations: u64,
    /// Series (of one sample each) per remote-write request.
    #[arg(long, default_value_t = 2_000)]
    series_per_request: usize,
    /// Keep-alive connections writing at once.
    #[arg(long, default_value_t = 4)]
    concurrency: usize,
    /// Targets, in order (repeatable): saltdb, prometheus. Default: both.
    #[arg(long = "target", value_enum)]
    targets: Vec<TargetKind>,
    /// The `saltdb` binary (default: the one next to this bench binary).
    #[arg(long)]
    saltdb_bin: Option<PathBuf>,
    /// Extra argument for `saltdb serve` (repeatable), e.g. `--saltdb-arg=--query-timeout=2m`.
    #[arg(long = "saltdb-arg", allow_hyphen_values = true)]
    saltdb_args: Vec<String>,
    /// Longest wait for one HTTP request, in seconds.
    #[arg(long, default_value_t = 120)]
    timeout_secs: u64,
    /// Directory for the rule file and the targets' data directories (default: the system
    /// temp dir).
    #[arg(long)]
    pub work_dir: Option<PathBuf>,
    /// Leave the data directories behind (their paths are printed).
    #[arg(long)]
    pub keep_data: bool,
}

impl RulesArgs {
    fn rule_set(&self) -> RuleSet {
        RuleSet { groups: self.groups, rules_per_group: self.rules_per_group, interval_ms: self.interval_ms() }
    }

    fn interval_ms(&self) -> i64 {
        self.interval_secs.max(1) as i64 * 1000
    }
}

/// The longest wait for a target to go idle after ingest, before its rules are loaded.
const IDLE_LIMIT: Duration = Duration::from_secs(20);

/// Everything measured on one target.
#[derive(Default)]
struct Report {
    name: &'static str,
    skipped: Option<String>,
    ingested: Ingested,
    /// The watch, in milliseconds after the end of the data.
    watch: (i64, i64),
    cpu_seconds: f64,
    /// Group evaluations carried out during the watch.
    evaluations: f64,
    missed: f64,
    failures: f64,
    /// The duration of each group evaluation seen during the watch, seconds.
    durations: Vec<f64>,
    /// Reads of /metrics during the watch, and the CPU seconds one costs the target.
    polls: usize,
    cpu_per_read: f64,
    rss: u64,
    peak_rss: u64,
    points: Points,
    notes: Vec<String>,
}

impl Report {
    fn skipped(name: &'static str, why: String) -> Self {
        println!("== {name}: skipped: {why}");
        Self { name, skipped: Some(why), ..Self::default() }
    }

    /// CPU seconds per evaluation of every rule (one evaluation of each group).
    fn cpu_per_round(&self, groups: usize) -> f64 {
        self.cpu_seconds / self.evaluations * groups as f64
    }

    fn lag(&self, q: f64) -> f64 {
        let mut d = self.durations.clone();
        d.sort_by(f64::total_cmp);
        let i = ((d.len() as f64 - 1.0) * q).round() as usize;
        d.get(i).copied().unwrap_or(f64::NAN)
    }
}

pub fn run(args: &RulesArgs, root: &Path) {
    let set = args.rule_set();
    assert!(set.rules() <= args.metrics, "--groups x --rules-per-group must not exceed --metrics");
    // An absolute path: Prometheus would resolve a relative one against its configuration's
    // directory, and the path names the groups and places their slots.
    let rule_path = root.canonicalize().unwrap_or_else(|_| root.to_path_buf()).join("rules.yml");
    let path = rule_path.to_str().expect("a UTF-8 work directory").to_owned();
    let starts = set.window_starts(&path);
    let interval_ms = args.interval_ms();
    // No sample falls exactly at the start of a rule's window (see `RuleSet::window_starts`).
    let nudge = move |t: i64| {
        let mut t = t;
        while starts.contains(&t.rem_euclid(interval_ms)) {
            t += 1;
        }
        t
    };
    let series = args.series / args.metrics * args.metrics;
    println!(
        "rules: {series} series ({} metrics x {} hosts), {} groups x {} rules every {}s, {} + {} min of data, \
         watch {} intervals from {}s after the data; rule file {}",
        args.metrics,
        series / args.metrics,
        args.groups,
        args.rules_per_group,
        args.interval_secs,
        args.history_minutes,
        args.live_minutes,
        args.evaluations,
        args.settle_secs,
        rule_path.display()
    );
    let targets =
        if args.targets.is_empty() { vec![TargetKind::Saltdb, TargetKind::Prometheus] } else { args.targets.clone() };
    let reports: Vec<Report> = targets.iter().map(|&k| measure(k, args, root, (&rule_path, set), &nudge)).collect();
    print_reports(args, &reports);
}

fn measure(
    kind: TargetKind,
    args: &RulesArgs,
    root: &Path,
    (rule_path, set): (&Path, RuleSet),
    nudge: &(dyn Fn(i64) -> i64 + Sync),
) -> Report {
    // No rules while the data is written: they are loaded once it is in.
    if let Err(e) = std::fs::write(rule_path, "groups: []\n") {
        return Report::skipped(kind.name(), format!("writing {}: {e}", rule_path.display()));
    }
    let target = match Target::start(kind, args, root, rule_path) {
        Ok(t) => t,
        Err(e) => return Report::skipped(kind.name(), e),
    };
    println!("== {}: data in {}", target.name(), target.dir.display());
    let tl = Timeline::starting(args.history_minutes * 60_000, args.interval_ms());
    let ingested = ingest::load(&target, args, tl, nudge);
    println!(
        "  {} scrapes, {} samples accepted, {} rejected in {:.1}s, the history in {:.1}s ({:.0} samples/s \
         sending); the last scrape sent {:.1}s after its interval",
        ingested.scrapes,
        ingested.sent.accepted,
        ingested.sent.rejected,
        ingested.wall_seconds,
        ingested.history_seconds,
        ingested.sent.rate(),
        ingested.late_ms as f64 / 1000.0
    );
    let mut report = Report { name: target.name(), ..Report::default() };
    let (idle, went_idle) = crate::wait_idle(&target.pid(), IDLE_LIMIT);
    if !went_idle {
        report.notes.push(format!("not idle {:.0}s after ingest", idle.as_secs_f64()));
    }
    if let Err(e) = std::fs::write(rule_path, set.yaml()).map_err(|e| e.to_string()).and_then(|()| target.reload()) {
        return Report::skipped(kind.name(), format!("loading the rules: {e}"));
    }
    // Every group has had one evaluation before the watch.
    let loaded_ms = chrono::Utc::now().timestamp_millis();
    let start_ms = (ingested.end_ms + args.settle_secs as i64 * 1000).max(loaded_ms + args.interval_ms() + 1000);
    let late = chrono::Utc::now().timestamp_millis().max(start_ms) - ingested.end_ms - args.settle_secs as i64 * 1000;
    if late > 1000 {
        report.notes.push(format!(
            "!! the watch started {:.0}s later than --settle after the data: its windows held less",
            late as f64 / 1000.0
        ));
    }
    let wait = start_ms - chrono::Utc::now().timestamp_millis();
    if wait > 0 {
        std::thread::sleep(Duration::from_millis(wait.unsigned_abs()));
    }
    report.ingested = ingested;
    if let Err(e) = watch(&target, args, &mut report) {
        report.notes.push(format!("!! {e}"));
    }
    (report.rss, report.peak_rss) = target.rss();
    let dir = target.dir.clone();
    drop(target);
    if !args.keep_data {
        let _ = std::fs::remove_dir_all(&dir);
    }
    report
}

/// Reads of `/metrics` timed before the watch.
const READS_TIMED: usize = 10;

/// Watches `--evaluations` intervals of a loaded target, then reads back what it recorded.
fn watch(target: &Target, args: &RulesArgs, report: &mut Report) -> Result<(), String> {
    let read = || target.get("/metrics").map(|b| figures::parse(&String::from_utf8_lossy(&b)));
    let pid = target.pid();
    let end_ms = report.ingested.end_ms;
    // What one read of /metrics costs the target, taken out of the CPU of the watch.
    let cpu_reads = crate::cpu_seconds(&pid);
    for _ in 0..READS_TIMED {
        read()?;
    }
    report.cpu_per_read = (crate::cpu_seconds(&pid) - cpu_reads) / READS_TIMED as f64;
    let before = read()?;
    let cpu_before = crate::cpu_seconds(&pid);
    let from_ms = chrono::Utc::now().timestamp_millis();
    let started = Instant::now();
    let length = Duration::from_millis(args.interval_ms().unsigned_abs() * args.evaluations);
    let poll = Duration::from_millis(args.interval_ms().unsigned_abs() / 3);
    let mut seen: HashMap<String, f64> = before.iter().map(|(g, f)| (g.clone(), f.last_evaluation)).collect();
    let mut note = |now: &BTreeMap<String, GroupFigures>, durations: &mut Vec<f64>| {
        for (g, f) in now {
            if seen.get(g) != Some(&f.last_evaluation) {
                seen.insert(g.clone(), f.last_evaluation);
                durations.push(f.last_duration);
            }
        }
    };
    while started.elapsed() + poll < length {
        std::thread::sleep(poll);
        note(&read()?, &mut report.durations);
        report.polls += 1;
    }
    std::thread::sleep(length.saturating_sub(started.elapsed()));
    let cpu_after = crate::cpu_seconds(&pid);
    let to_ms = chrono::Utc::now().timestamp_millis();
    let after = read()?;
    note(&after, &mut report.durations);
    report.watch = (from_ms - end_ms, to_ms - end_ms);
    report.cpu_seconds = cpu_after - cpu_before - report.cpu_per_read * report.polls as f64;
    report.evaluations = figures::delta(&before, &after, GroupFigures::evaluated);
    report.missed = figures::delta(&before, &after, |g| g.missed);
    report.failures = figures::delta(&before, &after, |g| g.failures);
    if after.len() != args.groups {
        report.notes.push(format!("{} rule groups on /metrics, {} expected", after.len(), args.groups));
    }
    println!(
        "  watched {:.0}s ({}..{} ms after the data): {:.2} CPU s over {} group evaluations, {} missed, {} failed \
         ({} reads of /metrics at {:.1} CPU ms each taken out)",
        (to_ms - from_ms) as f64 / 1000.0,
        report.watch.0,
        report.watch.1,
        report.cpu_seconds,
        report.evaluations,
        report.missed,
        report.failures,
        report.polls,
        report.cpu_per_read * 1000.0
    );
    report.points = compare::fetch(target, RuleSet::RECORDED, from_ms - args.interval_ms(), to_ms, end_ms)?;
    Ok(())
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1 << 20) as f64
}

fn print_reports(args: &RulesArgs, reports: &[Report]) {
    println!();
    println!(
        "{:<11} {:>12} {:>8} {:>16} {:>14} {:>11} {:>11} {:>8} {:>7} {:>9} {:>9}",
        "target",
        "ingest/s",
        "evals",
        format!("CPU s/{} rules", args.groups * args.rules_per_group),
        "CPU ms/group",
        "lag med ms",
        "lag max ms",
        "missed",
        "failed",
        "RSS MiB",
        "peak MiB"
    );
    for r in reports.iter().filter(|r| r.skipped.is_none()) {
        println!(
            "{:<11} {:>12.0} {:>8} {:>16.3} {:>14.1} {:>11.1} {:>11.1} {:>8} {:>7} {:>9.1} {:>9.1}",
            r.name,
            r.ingested.sent.rate(),
            r.evaluations,
            r.cpu_per_round(args.groups),
            r.cpu_seconds / r.evaluations * 1000.0,
            r.lag(0.5) * 1000.0,
            r.lag(1.0) * 1000.0,
            r.missed,
            r.failures,
            mib(r.rss),
            mib(r.peak_rss)
        );
        for n in &r.notes {
            println!("  {}: {n}", r.name);
        }
    }
    println!(
        "(CPU: the process's user + system time over the watch, less the bench's reads of /metrics, per group \
         evaluation carried out, x {} groups; lag: prometheus_rule_group_last_duration_seconds of the {} \
         evaluations seen, read every {:.1}s)",
        args.groups,
        reports.iter().map(|r| r.durations.len().to_string()).collect::<Vec<_>>().join(" and "),
        args.interval_secs as f64 / 3.0
    );
    let (Some(s), Some(p)) = (
        reports.iter().find(|r| r.name == "saltdb" && r.skipped.is_none()),
        reports.iter().find(|r| r.name == "prometheus" && r.skipped.is_none()),
    ) else {
        return;
    };
    println!(
        "saltdb / prometheus: CPU per evaluation {:.2}x, median lag {:.2}x, RSS {:.2}x, peak RSS {:.2}x",
        s.cpu_per_round(args.groups) / p.cpu_per_round(args.groups),
        s.lag(0.5) / p.lag(0.5),
        s.rss as f64 / p.rss as f64,
        s.peak_rss as f64 / p.peak_rss as f64
    );
    // The last interval's evaluations may still have been under way when the samples were read.
    let lo = s.watch.0.max(p.watch.0);
    let hi = s.watch.1.min(p.watch.1) - args.interval_ms();
    let a = agree(&s.points, &p.points, lo, hi);
    println!(
        "outputs ({}..{} ms after the data): {} recorded samples of {} series at {} slots compared, {} differ by more \
         than {:e} relative (largest {:.1e}); only saltdb: {}, only prometheus: {}",
        lo,
        hi,
        a.compared,
        a.series,
        a.slots,
        a.differing,
        compare::TOLERANCE,
        a.max_relative,
        a.only_first,
        a.only_second
    );
    for e in &a.examples {
        println!("  differs: {e}");
    }
}
