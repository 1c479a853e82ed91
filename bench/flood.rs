//! `saltdb-bench flood`: many clients post large imports at once, against the release binary with
//! the write budget (`--max-inflight-bytes`, `--max-concurrent-writes`) and again with the budget
//! effectively off; prints accepted/refused requests and the server's peak RSS for both.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::http_client::{Conn, Server};
use crate::status_kib;

/// Options of the flood benchmark.
#[derive(Debug, clap::Args)]
pub struct FloodArgs {
    /// Concurrent clients.
    #[arg(long, default_value_t = 24)]
    clients: usize,
    /// How long the flood lasts, in seconds.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Series per request (150 samples each; 1,500 is about 8 MiB of JSON lines).
    #[arg(long, default_value_t = 1500)]
    series: usize,
    /// `--max-inflight-bytes` of the bounded run.
    #[arg(long, default_value = "48MiB")]
    max_inflight_bytes: String,
    /// `--max-concurrent-writes` of the bounded run.
    #[arg(long, default_value_t = 4)]
    max_concurrent_writes: usize,
}

fn body(series: usize) -> Vec<u8> {
    let mut out = String::new();
    for s in 0..series {
        let ts: Vec<i64> = (0..150).map(|i| 1_600_000_000_000 + i * 15_000).collect();
        let vs: Vec<f64> = (0..150).map(|i| (i as f64) * (s as f64 + 1.0) * 1.37).collect();
        let line = serde_json::json!({"metric": {"__name__": format!("flood_{}", s % 7), "host": format!("h{s}")}, "values": vs, "timestamps": ts});
        out.push_str(&line.to_string());
        out.push('\n');
    }
    out.into_bytes()
}

struct Outcome {
    accepted: u64,
    refused: u64,
    other: u64,
    baseline_mib: u64,
    peak_mib: u64,
}

fn run(args: &FloodArgs, flags: &[&str], body: &Arc<Vec<u8>>, dir: &std::path::Path) -> Outcome {
    let mut all = vec!["--retention", "0", "--max-request-bytes", "12MiB"];
    all.extend_from_slice(flags);
    let server = Server::spawn(dir, &all);
    let pid = server.pid();
    let baseline_mib = status_kib(&pid, "VmRSS:") / 1024;
    let counts = Arc::new([AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)]);
    let deadline = Instant::now() + Duration::from_secs(args.seconds);
    let clients: Vec<_> = (0..args.clients)
        .map(|_| {
            let (body, counts, addr) = (body.clone(), counts.clone(), server.addr);
            std::thread::spawn(move || {
                let mut conn = Conn::connect(addr);
                while Instant::now() < deadline {
                    let slot = match conn.post("/api/v1/import", &body) {
                        204 => 0,
                        429 => 1,
                        _ => 2,
                    };
                    counts[slot].fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    let watch = crate::RssWatch::start(&pid, Duration::from_millis(10));
    for c in clients {
        let _ = c.join();
    }
    let peak_mib = watch.peak_mib();
    server.stop();
    Outcome {
        accepted: counts[0].load(Ordering::Relaxed),
        refused: counts[1].load(Ordering::Relaxed),
        other: counts[2].load(Ordering::Relaxed),
        baseline_mib,
        peak_mib,
    }
}

/// Runs the flood against both configurations and prints the table.
pub fn flood(args: &FloodArgs, root: &std::path::Path) {
    let body = Arc::new(body(args.series));
    println!(
        "flood: {} clients x {} s, {:.1} MiB import bodies ({} samples each)",
        args.clients,
        args.seconds,
        body.len() as f64 / (1 << 20) as f64,
        args.series * 150
    );
    let concurrency = args.max_concurrent_writes.to_string();
    let bounded: Vec<&str> =
        vec!["--max-inflight-bytes", &args.max_inflight_bytes, "--max-concurrent-writes", &concurrency];
    let open = ["--max-inflight-bytes", "64GiB", "--max-concurrent-writes", "100000"];
    println!(
        "{:<52} {:>9} {:>9} {:>7} {:>13} {:>10}",
        "server flags", "accepted", "429", "other", "baseline RSS", "peak RSS"
    );
    for (i, flags) in [bounded.as_slice(), open.as_slice()].into_iter().enumerate() {
        let o = run(args, flags, &body, &root.join(format!("flood-{i}")));
        println!(
            "{:<52} {:>9} {:>9} {:>7} {:>9} MiB {:>6} MiB",
            flags.join(" "),
            o.accepted,
            o.refused,
            o.other,
            o.baseline_mib,
            o.peak_mib
        );
    }
}
