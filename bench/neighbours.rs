//! `saltdb-bench neighbours`: a noisy neighbour. Tenant `b` ingests at a steady offered rate
//! (Prometheus-shaped requests: one sample for each of many series) and runs its dashboard
//! queries, first alone, then while tenant `a` floods past its limits (new series in every
//! request, as fast as its clients can send). Prints `b`'s achieved rate and its write and query
//! latencies in both runs with their ratios, `a`'s accepted and refused requests, whether
//! anything of `a`'s refused requests was stored, and the server's peak RSS.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::http_client::{Conn, Server};

/// Distinct bodies of new series tenant `a` cycles through (more series than its limit).
const A_BODIES: usize = 64;

/// Options of the noisy-neighbour benchmark.
#[derive(Debug, clap::Args)]
pub struct NeighboursArgs {
    /// How long each run lasts, in seconds.
    #[arg(long, default_value_t = 20)]
    seconds: u64,
    /// Samples per second tenant `b` offers.
    #[arg(long, default_value_t = 20_000)]
    b_rate: u64,
    /// Series of tenant `b` (each request sends one sample of `--b-batch` of them, in turn).
    #[arg(long, default_value_t = 10_000)]
    b_series: usize,
    /// Series per request of tenant `b`.
    #[arg(long, default_value_t = 500)]
    b_batch: usize,
    /// Concurrent flooding clients of tenant `a`.
    #[arg(long, default_value_t = 4)]
    a_clients: usize,
    /// New series per request of tenant `a`.
    #[arg(long, default_value_t = 2_000)]
    a_batch: usize,
    /// Tenant `a`'s `ingestion_rate` (samples/s; its burst is twice that).
    #[arg(long, default_value_t = 5_000.0)]
    a_rate_limit: f64,
    /// Tenant `a`'s `max_global_series_per_user`.
    #[arg(long, default_value_t = 20_000)]
    a_series_limit: u64,
    /// The saltdb binary (default: the release build beside this one).
    #[arg(long)]
    bin: Option<std::path::PathBuf>,
}

/// One run's figures.
struct Outcome {
    b_samples: u64,
    seconds: f64,
    b_write_ms: Vec<f64>,
    b_query_ms: Vec<f64>,
    b_failed: u64,
    a_accepted: u64,
    a_refused: u64,
    a_other: u64,
    a_acked_series: u64,
    a_stored_series: u64,
    peak_mib: u64,
}

fn percentile(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let i = ((v.len() - 1) as f64 * p).round() as usize;
    v[i.min(v.len() - 1)]
}

/// A JSON-lines body of one sample at `t_ms` for each series `name{host=...}` of `hosts`.
fn body(name: &str, hosts: impl Iterator<Item = usize>, t_ms: i64) -> Vec<u8> {
    let mut out = String::new();
    for h in hosts {
        let line = serde_json::json!({"metric": {"__name__": name, "host": format!("h{h}")},
            "values": [h as f64], "timestamps": [t_ms]});
        out.push_str(&line.to_string());
        out.push('\n');
    }
    out.into_bytes()
}

/// How tenant `a` sends.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Flood {
    /// Not at all: `b` alone.
    Off,
    /// As Prometheus does with `retry_on_http_429`: after a 429 it waits, doubling from 30 ms to
    /// 5 s over refusals in a row (its `min_backoff` and `max_backoff`), and starts again after
    /// a success.
    BacksOff,
    /// Ignores 429s and sends again at once.
    Hammers,
}

/// Runs tenant `b`'s load (and `a`'s flood) against a fresh server.
fn run(args: &NeighboursArgs, dir: &std::path::Path, flood: Flood) -> Outcome {
    std::fs::create_dir_all(dir).expect("work dir");
    let limits = dir.join("limits.yml");
    std::fs::write(
        &limits,
        format!(
            "overrides:\n  a:\n    ingestion_rate: {}\n    ingestion_burst_size: {}\n    max_global_series_per_user: {}\n",
            args.a_rate_limit,
            (args.a_rate_limit * 2.0) as u64,
            args.a_series_limit
        ),
    )
    .expect("limits file");
    let flags = ["--tenants", "--tenant-limits-file", limits.to_str().expect("utf-8 path"), "--retention", "0"];
    let data = dir.join("data");
    let server = match &args.bin {
        Some(bin) => Server::spawn_bin(bin, &data, &flags),
        None => Server::spawn(&data, &flags),
    };
    let (addr, pid) = (server.addr, server.pid());
    let t0 = chrono::Utc::now().timestamp_millis() - 3_600_000;
    let a_bodies: Arc<Vec<Vec<u8>>> = Arc::new(if flood != Flood::Off {
        (0..A_BODIES).map(|i| body("bench_a", i * args.a_batch..(i + 1) * args.a_batch, t0)).collect()
    } else {
        Vec::new()
    });
    let started = Instant::now();
    let deadline = started + Duration::from_secs(args.seconds);

    // Tenant b: paced writes, one request every b_batch / b_rate seconds.
    let b_writes = Arc::new(Mutex::new(Vec::new()));
    let b_samples = Arc::new(AtomicU64::new(0));
    let b_failed = Arc::new(AtomicU64::new(0));
    let writer = {
        let (lat, samples, failed) = (b_writes.clone(), b_samples.clone(), b_failed.clone());
        let (series, batch, rate) = (args.b_series, args.b_batch, args.b_rate);
        std::thread::spawn(move || {
            let mut conn = Conn::connect(addr);
            let interval = Duration::from_secs_f64(batch as f64 / rate as f64);
            let mut next = Instant::now();
            let mut round = 0usize;
            while Instant::now() < deadline {
                let first = (round * batch) % series;
                let t_ms = t0 + (round * batch / series) as i64 * 1_000;
                let body = body("bench_b", (first..first + batch).map(|h| h % series), t_ms);
                let sent = Instant::now();
                let (status, _) = conn.request("POST", "/api/v1/import", &[("X-Scope-OrgID", "b")], &body);
                lat.lock().expect("lock").push(sent.elapsed().as_secs_f64() * 1e3);
                if status == 204 {
                    samples.fetch_add(batch as u64, Ordering::Relaxed);
                } else {
                    failed.fetch_add(1, Ordering::Relaxed);
                }
                round += 1;
                next += interval;
                if let Some(wait) = next.checked_duration_since(Instant::now()) {
                    std::thread::sleep(wait);
                }
            }
        })
    };
    // Tenant b's dashboard: a range query and an instant query every 500 ms.
    let b_queries = Arc::new(Mutex::new(Vec::new()));
    let dashboard = {
        let lat = b_queries.clone();
        std::thread::spawn(move || {
            let mut conn = Conn::connect(addr);
            let end = (t0 / 1000) + 3_600;
            let range = format!(
                "/api/v1/query_range?query=sum%20by%20(host)%20(count_over_time(bench_b%5B5m%5D))&start={}&end={end}&step=60",
                t0 / 1000
            );
            let instant = format!("/api/v1/query?query=count(bench_b)&time={}", t0 / 1000 + 60);
            while Instant::now() < deadline {
                for q in [&range, &instant] {
                    let sent = Instant::now();
                    let (status, _) = conn.request("GET", q, &[("X-Scope-OrgID", "b")], &[]);
                    if status == 200 {
                        lat.lock().expect("lock").push(sent.elapsed().as_secs_f64() * 1e3);
                    }
                }
                std::thread::sleep(Duration::from_millis(500));
            }
        })
    };
    // Tenant a: new series in every request (bodies built before the clock starts, so that the
    // clients spend the machine's cores on sending, not on building), as fast as the clients go.
    let a_counts = Arc::new([AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)]);
    let next_body = Arc::new(AtomicU64::new(0));
    let accepted_bodies = Arc::new(Mutex::new(std::collections::BTreeSet::new()));
    let flooders: Vec<_> = (0..if flood == Flood::Off { 0 } else { args.a_clients })
        .map(|_| {
            let (counts, next_body, bodies, accepted) =
                (a_counts.clone(), next_body.clone(), a_bodies.clone(), accepted_bodies.clone());
            std::thread::spawn(move || {
                let mut conn = Conn::connect(addr);
                let mut backoff = Duration::from_millis(30);
                while Instant::now() < deadline {
                    let i = next_body.fetch_add(1, Ordering::Relaxed) as usize % bodies.len();
                    let slot = match conn.request("POST", "/api/v1/import", &[("X-Scope-OrgID", "a")], &bodies[i]).0 {
                        204 => {
                            accepted.lock().expect("lock").insert(i);
                            backoff = Duration::from_millis(30);
                            0
                        }
                        429 => {
                            if flood == Flood::BacksOff {
                                std::thread::sleep(backoff.min(deadline.saturating_duration_since(Instant::now())));
                                backoff = (backoff * 2).min(Duration::from_secs(5));
                            }
                            1
                        }
                        _ => 2,
                    };
                    counts[slot].fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    let watch = crate::RssWatch::start(&pid, Duration::from_millis(20));
    let _ = writer.join();
    let seconds = started.elapsed().as_secs_f64();
    let _ = dashboard.join();
    for f in flooders {
        let _ = f.join();
    }
    let peak_mib = watch.peak_mib();
    // What of tenant a was stored: its series, against those of its accepted requests.
    let mut conn = Conn::connect(addr);
    let (_, counted) = conn.request(
        "GET",
        &format!("/api/v1/query?query=count(bench_a)&time={}", t0 / 1000 + 60),
        &[("X-Scope-OrgID", "a")],
        &[],
    );
    let stored: u64 = serde_json::from_slice::<serde_json::Value>(&counted)
        .ok()
        .and_then(|v| v["data"]["result"][0]["value"][1].as_str().and_then(|s| s.parse().ok()))
        .unwrap_or(0);
    server.stop();
    let a_acked = (accepted_bodies.lock().expect("lock").len() * args.a_batch) as u64;
    let take = |m: &Mutex<Vec<f64>>| std::mem::take(&mut *m.lock().expect("lock"));
    Outcome {
        b_samples: b_samples.load(Ordering::Relaxed),
        seconds,
        b_write_ms: take(&b_writes),
        b_query_ms: take(&b_queries),
        b_failed: b_failed.load(Ordering::Relaxed),
        a_accepted: a_counts[0].load(Ordering::Relaxed),
        a_refused: a_counts[1].load(Ordering::Relaxed),
        a_other: a_counts[2].load(Ordering::Relaxed),
        a_acked_series: a_acked,
        a_stored_series: stored,
        peak_mib,
    }
}

/// Runs `b` alone, then beside `a`'s flood, and prints both with their ratios.
pub fn run_all(args: &NeighboursArgs, root: &std::path::Path) {
    println!(
        "neighbours: b offers {} samples/s ({} series, {} per request) and queries every 500 ms for {} s; \
         a floods with {} clients of {} new series per request, limited to {} samples/s (burst {}) and {} series",
        args.b_rate,
        args.b_series,
        args.b_batch,
        args.seconds,
        args.a_clients,
        args.a_batch,
        args.a_rate_limit,
        args.a_rate_limit * 2.0,
        args.a_series_limit
    );
    let mut alone = run(args, &root.join("alone"), Flood::Off);
    let mut backs_off = run(args, &root.join("backs-off"), Flood::BacksOff);
    let mut hammers = run(args, &root.join("hammers"), Flood::Hammers);
    println!(
        "{:<16} {:>12} {:>16} {:>16} {:>8} {:>10} {:>8} {:>6} {:>16} {:>9}",
        "run",
        "b samples/s",
        "b write p50/p99",
        "b query p50/p99",
        "b fails",
        "a 204",
        "a 429",
        "a other",
        "a stored/acked",
        "peak RSS"
    );
    let mut rows = Vec::new();
    for (name, o) in [("b alone", &mut alone), ("a backs off", &mut backs_off), ("a hammers", &mut hammers)] {
        let rate = o.b_samples as f64 / o.seconds;
        let (w50, w99) = (percentile(&mut o.b_write_ms, 0.5), percentile(&mut o.b_write_ms, 0.99));
        let (q50, q99) = (percentile(&mut o.b_query_ms, 0.5), percentile(&mut o.b_query_ms, 0.99));
        println!(
            "{name:<16} {rate:>12.0} {:>16} {:>16} {:>8} {:>10} {:>8} {:>6} {:>16} {:>5} MiB",
            format!("{w50:.1}/{w99:.1} ms"),
            format!("{q50:.1}/{q99:.1} ms"),
            o.b_failed,
            o.a_accepted,
            o.a_refused,
            o.a_other,
            format!("{}/{}", o.a_stored_series, o.a_acked_series),
            o.peak_mib
        );
        rows.push((rate, w50, q50));
    }
    if let [(r0, w0, q0), ref noisy @ ..] = rows[..] {
        for ((r1, w1, q1), name) in noisy.iter().zip(["a backs off", "a hammers"]) {
            println!(
                "ratios ({name} / b alone): b rate {:.3}x, b write p50 {:.2}x, b query p50 {:.2}x",
                r1 / r0,
                w1 / w0,
                q1 / q0
            );
        }
    }
    for (name, o) in [("a backs off", &backs_off), ("a hammers", &hammers)] {
        if o.a_stored_series != o.a_acked_series {
            println!(
                "MISMATCH ({name}): a's stored series ({}) differ from those of its accepted requests ({})",
                o.a_stored_series, o.a_acked_series
            );
        }
    }
}
