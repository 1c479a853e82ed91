//! The cardinality benchmark's tables and JSON.

use serde_json::{json, Value};

use super::probe::{Answer, Probe, Timing};
use super::target::{saltdb_bin, vm_args};
use super::write::Sent;
use super::{CardinalityArgs, ChurnRound, Report};

pub(super) fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1 << 20) as f64
}

/// `1234567` as `1,234,567`.
pub(super) fn thousands(n: u64) -> String {
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

/// A median in milliseconds, to a hundredth below 10 ms.
pub(super) fn ms(t: Option<&Timing>) -> String {
    t.and_then(Timing::median_ms).map_or("-".into(), |m| if m < 10.0 { format!("{m:.2}") } else { format!("{m:.1}") })
}

pub(super) fn print_churn_header() {
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

pub(super) fn print_churn_line(c: usize, r: &ChurnRound) {
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
pub(super) fn print_ingest(reports: &[Report], samples_per_round: usize) {
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
pub(super) fn print_queries(reports: &[Report], probes: &[Probe]) -> Vec<String> {
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
pub(super) fn churn_mismatches(reports: &[Report]) -> Vec<String> {
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

pub(super) fn report_json(
    args: &CardinalityArgs,
    reports: &[Report],
    probes: &[Probe],
    mismatches: &[String],
) -> Value {
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
            "saltdb_bin": saltdb_bin(args), "saltdb_args": args.saltdb_args, "vm_args": vm_args(args),
            "timeout_secs": args.timeout_secs,
        },
        "targets": targets,
        "mismatches": mismatches,
    })
}
