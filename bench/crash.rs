//! `saltdb-bench crash`: `kill -9` of the release `saltdb` binary during the remote-write
//! ingest of `--series` (default 1M) new series, then a restart. Reports the samples
//! acknowledged before the kill against the ones found after the restart (every acknowledged
//! one must be there, bit for bit), and how long the restart took.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::fleet::{Fleet, INTERVAL_MS};
use crate::http_client::{get_status, Conn, Server, REMOTE_WRITE_HEADERS};

/// Options of the crash run.
#[derive(Debug, clap::Args)]
pub struct CrashArgs {
    /// New series to ingest (one sample each; 10 metric names per host).
    #[arg(long, default_value_t = 1_000_000)]
    series: usize,
    /// Series per remote-write request.
    #[arg(long, default_value_t = 5_000)]
    series_per_request: usize,
    /// Concurrent writers.
    #[arg(long, default_value_t = 4)]
    concurrency: usize,
    /// Kill once this share of the series is acknowledged.
    #[arg(long, default_value_t = 0.6)]
    kill_at: f64,
    /// `--fsync` of the server.
    #[arg(long, default_value = "batch")]
    fsync: String,
}

/// Runs the crash test and prints its report; exits non-zero when an acknowledged sample is
/// missing.
pub fn run(args: &CrashArgs, root: &std::path::Path) {
    let dir = root.join("crash");
    let fleet = Fleet { metrics: 10 };
    let series = args.series / fleet.metrics * fleet.metrics;
    let base = chrono::Utc::now().timestamp_millis() / INTERVAL_MS * INTERVAL_MS - 5 * INTERVAL_MS;
    let started = Instant::now();
    let bodies = fleet.bodies(0..series, 0, base, args.series_per_request);
    println!(
        "crash: {series} new series x 1 sample in {} remote-write requests ({} series each), {} writers, --fsync {}, kill -9 at {:.0}% acknowledged; bodies built in {:.1}s",
        bodies.len(),
        args.series_per_request,
        args.concurrency,
        args.fsync,
        args.kill_at * 100.0,
        started.elapsed().as_secs_f64()
    );
    let flags = ["--retention", "0", "--fsync", &args.fsync];
    let server = Server::spawn(&dir, &flags);
    let addr = server.addr;
    let kill_after = (series as f64 * args.kill_at) as u64;
    let (next, acked_samples, killed) = (AtomicUsize::new(0), AtomicU64::new(0), AtomicBool::new(false));
    let acked = Mutex::new(Vec::new());
    let server = Mutex::new(Some(server));
    let ingest = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..args.concurrency {
            s.spawn(|| {
                let mut conn = Conn::try_connect(addr, Some(Duration::from_secs(60))).ok();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let (Some(body), Some(c)) = (bodies.get(i), conn.as_mut()) else { break };
                    match c.try_request("POST", "/api/v1/write", &REMOTE_WRITE_HEADERS, &body.bytes) {
                        Ok((204, _)) => {
                            acked.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(i);
                            let total = acked_samples.fetch_add(body.samples, Ordering::SeqCst) + body.samples;
                            if total >= kill_after && !killed.swap(true, Ordering::SeqCst) {
                                // SIGKILL: no shutdown hook runs (Child::kill sends SIGKILL).
                                drop(server.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take());
                            }
                        }
                        Ok((status, _)) => panic!("request {i} answered {status} before the kill"),
                        Err(_) => break,
                    }
                }
            });
        }
    });
    let ingest_secs = ingest.elapsed().as_secs_f64();
    let acked_samples = acked_samples.load(Ordering::SeqCst);
    println!("acknowledged before the kill: {acked_samples} samples in {ingest_secs:.1}s");

    let restart = Instant::now();
    let server = Server::spawn(&dir, &flags);
    let listening = restart.elapsed().as_secs_f64();
    let base_url = format!("http://{}", server.addr);
    while get_status(&base_url, "/-/ready") != Some(200) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let ready = restart.elapsed().as_secs_f64();
    println!("restart: listening after {listening:.2}s, ready after {ready:.2}s");

    let found = exported(server.addr);
    let mut missing = 0u64;
    let mut wrong = 0u64;
    let acked = acked.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner);
    for &i in &acked {
        let from = i * args.series_per_request;
        for s in from..(from + args.series_per_request).min(series) {
            let key = (fleet.labels(s)[0].value.clone(), Fleet::instance(fleet.host(s)));
            match found.get(&key) {
                None => missing += 1,
                Some(&(t, v)) => {
                    let want = (Fleet::timestamp(fleet.host(s), 0, base), fleet.value(s, 0));
                    if t != want.0 || v.to_bits() != want.1.to_bits() {
                        wrong += 1;
                    }
                }
            }
        }
    }
    let found_acked = acked_samples - missing - wrong;
    println!(
        "after restart: {} series found in all; of the {acked_samples} acknowledged samples {found_acked} found bit-exact, {missing} missing, {wrong} different",
        found.len()
    );
    server.stop();
    if missing + wrong > 0 {
        eprintln!("FAILED: acknowledged samples were lost");
        std::process::exit(1);
    }
}

/// Every exported `m*` series: (metric name, instance) -> its (timestamp, value).
fn exported(addr: SocketAddr) -> HashMap<(String, String), (i64, f64)> {
    let mut conn = Conn::try_connect(addr, Some(Duration::from_secs(600))).expect("connect after restart");
    let path = format!(
        "/api/v1/export?match[]={}",
        form_urlencoded::byte_serialize(b"{__name__=~\"m[0-9]+\"}").collect::<String>()
    );
    let (status, body) = conn.request("GET", &path, &[], &[]);
    assert_eq!(status, 200, "export failed: {}", String::from_utf8_lossy(&body));
    let mut out = HashMap::new();
    for line in body.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        let v: serde_json::Value = serde_json::from_slice(line).expect("export line is JSON");
        let name = v["metric"]["__name__"].as_str().unwrap_or_default().to_owned();
        let instance = v["metric"]["instance"].as_str().unwrap_or_default().to_owned();
        let t = v["timestamps"][0].as_i64().unwrap_or(i64::MIN);
        let value = v["values"][0].as_f64().unwrap_or(f64::NAN);
        out.insert((name, instance), (t, value));
    }
    out
}
