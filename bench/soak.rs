//! `saltdb-bench soak`: a bounded soak run against one release `saltdb` binary. For `--minutes`
//! (default 30) it keeps up mixed traffic: a fleet scraped every 15 s in real time over
//! remote-write, JSON-lines imports, queries of several kinds, and at a low rate hostile requests
//! (slow connections, bodies over the limit, bad queries, far-future samples). It reports the
//! server's RSS over time (which must level off), answers by request type and status, and p50/p99
//! latency per request type.

use std::collections::BTreeMap;
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::fleet::{Fleet, INTERVAL_MS};
use crate::http_client::{Conn, Server, REMOTE_WRITE_HEADERS};
use crate::status_kib;

/// Options of the soak run.
#[derive(Debug, clap::Args)]
pub struct SoakArgs {
    /// How long the run lasts.
    #[arg(long, default_value_t = 30.0)]
    minutes: f64,
    /// Series of the fleet scraped over remote-write every 15 s (10 metric names per host).
    #[arg(long, default_value_t = 100_000)]
    series: usize,
    /// Series per remote-write request.
    #[arg(long, default_value_t = 2_000)]
    series_per_request: usize,
    /// Query clients (each runs one query after another).
    #[arg(long, default_value_t = 2)]
    query_clients: usize,
    /// Seconds between hostile requests.
    #[arg(long, default_value_t = 5)]
    hostile_every: u64,
    /// Seconds between RSS samples.
    #[arg(long, default_value_t = 10)]
    sample_every: u64,
    /// Seconds of newest data the range, series and label queries cover (3600: the last hour,
    /// which keeps growing for the first hour of a run).
    #[arg(long, default_value_t = 3600)]
    query_range: i64,
    /// Extra flags for `saltdb serve` (repeatable), e.g. `--server-flag=--max-connections=64`.
    #[arg(long = "server-flag", allow_hyphen_values = true)]
    server_flags: Vec<String>,
}

/// Answers and latencies by request type.
#[derive(Default)]
struct Tally {
    /// (type, status) -> count; status 0 is a failed or cut connection.
    answers: BTreeMap<(&'static str, u16), u64>,
    /// type -> latencies in seconds.
    latencies: BTreeMap<&'static str, Vec<f64>>,
}

type Shared = Arc<Mutex<Tally>>;

fn record(tally: &Shared, kind: &'static str, status: u16, started: Instant) {
    let mut t = tally.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    *t.answers.entry((kind, status)).or_default() += 1;
    t.latencies.entry(kind).or_default().push(started.elapsed().as_secs_f64());
}

/// Sends one request on `conn` (reconnecting once it broke) and records its answer.
fn timed(
    conn: &mut Option<Conn>,
    addr: SocketAddr,
    tally: &Shared,
    kind: &'static str,
    req: (&str, &str, &[(&str, &str)], &[u8]),
) {
    let started = Instant::now();
    let (method, path, headers, body) = req;
    let c = match conn {
        Some(c) => c,
        None => match Conn::try_connect(addr, Some(Duration::from_secs(130))) {
            Ok(c) => conn.insert(c),
            Err(_) => {
                record(tally, kind, 0, started);
                return;
            }
        },
    };
    let status = match c.try_request(method, path, headers, body) {
        Ok((status, _)) => status,
        Err(_) => {
            *conn = None;
            0
        }
    };
    record(tally, kind, status, started);
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// The fleet, scraped every 15 s in real time; scrape `k` is sent when its interval starts.
fn remote_write(args: &SoakArgs, addr: SocketAddr, tally: &Shared, stop: &AtomicBool) {
    let fleet = Fleet { metrics: 10 };
    let series = args.series / fleet.metrics * fleet.metrics;
    let base = now_ms() / INTERVAL_MS * INTERVAL_MS;
    let mut conn = None;
    let mut k = 0;
    while !stop.load(Ordering::Relaxed) {
        let due = base + k as i64 * INTERVAL_MS;
        let wait = due - now_ms();
        if wait > 0 {
            std::thread::sleep(Duration::from_millis(wait.unsigned_abs().min(1_000)));
            continue;
        }
        for body in fleet.bodies(0..series, k, due, args.series_per_request) {
            timed(
                &mut conn,
                addr,
                tally,
                "remote_write",
                ("POST", "/api/v1/write", &REMOTE_WRITE_HEADERS, &body.bytes),
            );
        }
        k += 1;
    }
}

/// An import of 1,000 series x 4 samples (a 1 s interval) every second.
fn imports(addr: SocketAddr, tally: &Shared, stop: &AtomicBool) {
    let mut conn = None;
    while !stop.load(Ordering::Relaxed) {
        let t = now_ms() / 1000 * 1000;
        let mut body = String::new();
        for s in 0..1_000 {
            let ts: Vec<i64> = (0..4).map(|i| t - 3_000 + i * 1_000).collect();
            let line = serde_json::json!({"metric": {"__name__": "soak_import", "series": s.to_string()}, "values": [s, s + 1, s + 2, s + 3], "timestamps": ts});
            body.push_str(&line.to_string());
            body.push('\n');
        }
        timed(&mut conn, addr, tally, "import", ("POST", "/api/v1/import", &[], body.as_bytes()));
        std::thread::sleep(Duration::from_secs(1));
    }
}

fn enc(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

/// Instant, range, series and label queries over the newest `range` seconds, one after another.
fn queries(addr: SocketAddr, tally: &Shared, stop: &AtomicBool, client: usize, range: i64) {
    let mut conn = None;
    let mut i = client;
    while !stop.load(Ordering::Relaxed) {
        let end = now_ms() / 1000;
        let start = end - range;
        let (kind, path) = match i % 5 {
            0 => ("query", format!("/api/v1/query?query={}&time={end}", enc("sum by (job) (rate(m0[5m]))"))),
            1 => (
                "query_range",
                format!("/api/v1/query_range?query={}&start={start}&end={end}&step=60", enc("avg by (region) (m1)")),
            ),
            2 => ("query", format!("/api/v1/query?query={}&time={end}", enc("topk(5, m3) or count(soak_import)"))),
            3 => ("series", format!("/api/v1/series?match[]={}&start={start}&end={end}", enc("m2{job=\"api\"}"))),
            _ => ("labels", format!("/api/v1/label/instance/values?start={start}&end={end}")),
        };
        timed(&mut conn, addr, tally, kind, ("GET", &path, &[], &[]));
        i += 1;
    }
}

/// Opens a connection, sends half a request head, and waits for the server to close it.
fn slow_connection(addr: SocketAddr, tally: &Shared) {
    let started = Instant::now();
    let status = match TcpStream::connect(addr) {
        Ok(mut s) => {
            let _ = s.write_all(b"POST /api/v1/write HTTP/1.1\r\nHost: soak\r\nContent-Le");
            let _ = s.set_read_timeout(Some(Duration::from_secs(120)));
            let mut buf = [0u8; 64];
            // 0: the server closed it without an answer, as it must; 1: still open after 2 min.
            match std::io::Read::read(&mut s, &mut buf) {
                Ok(0) => 0,
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => 0,
                _ => 1,
            }
        }
        Err(_) => 2,
    };
    record(tally, "hostile_slow_connection", status, started);
}

/// One hostile request of each kind in turn, at a low rate.
fn hostile(args: &SoakArgs, addr: SocketAddr, tally: &Shared, stop: &AtomicBool) {
    let huge = vec![b'\n'; 65 << 20];
    let future = format!(
        "{}\n",
        serde_json::json!({"metric": {"__name__": "soak_future"}, "values": [1], "timestamps": [now_ms() + 30 * 86_400_000]})
    );
    let deep = format!("/api/v1/query?query={}", enc(&format!("{}1{}", "(".repeat(300), ")".repeat(300))));
    let mut slow = Vec::new();
    let mut i = 0usize;
    while !stop.load(Ordering::Relaxed) {
        let mut conn = None;
        match i % 5 {
            0 => {
                let tally = tally.clone();
                slow.push(std::thread::spawn(move || slow_connection(addr, &tally)));
            }
            1 => timed(&mut conn, addr, tally, "hostile_huge_body", ("POST", "/api/v1/import", &[], &huge)),
            2 => timed(&mut conn, addr, tally, "hostile_bad_query", ("GET", "/api/v1/query?query=sum(", &[], &[])),
            3 => timed(&mut conn, addr, tally, "hostile_deep_query", ("GET", &deep, &[], &[])),
            _ => timed(
                &mut conn,
                addr,
                tally,
                "hostile_future_sample",
                ("POST", "/api/v1/import", &[], future.as_bytes()),
            ),
        }
        i += 1;
        std::thread::sleep(Duration::from_secs(args.hostile_every));
    }
    for t in slow {
        let _ = t.join();
    }
}

/// The server's gauges of what holds its memory, in MiB: the head, fjall's memtables, the block
/// cache, the labels cache and fjall's pinned index and filter blocks (0 when unanswered).
const BREAKDOWN: [&str; 5] = [
    "saltdb_head_bytes",
    "saltdb_fjall_write_buffer_bytes",
    "saltdb_fjall_block_cache_bytes",
    "saltdb_labels_cache_bytes",
    "saltdb_fjall_pinned_bytes",
];

fn breakdown(conn: &mut Option<Conn>, addr: SocketAddr) -> [f64; 5] {
    let mut parts = [0.0; 5];
    if conn.is_none() {
        *conn = Conn::try_connect(addr, Some(Duration::from_secs(10))).ok();
    }
    let Some(c) = conn else { return parts };
    let Ok((200, body)) = c.try_request("GET", "/metrics", &[], &[]) else {
        *conn = None;
        return parts;
    };
    for line in String::from_utf8_lossy(&body).lines() {
        let mut words = line.split_whitespace();
        let (Some(name), Some(value)) = (words.next(), words.next()) else { continue };
        if let Some(i) = BREAKDOWN.iter().position(|&g| g == name) {
            parts[i] = value.parse::<f64>().unwrap_or(0.0) / (1 << 20) as f64;
        }
    }
    parts
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted.get(idx).copied().unwrap_or(0.0)
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Runs the soak and prints its report.
pub fn run(args: &SoakArgs, root: &std::path::Path) {
    let dir = root.join("soak");
    let mut flags: Vec<&str> = vec!["--retention", "0"];
    flags.extend(args.server_flags.iter().map(String::as_str));
    let server = Server::spawn(&dir, &flags);
    let (addr, pid) = (server.addr, server.pid());
    println!(
        "soak: {} min, fleet of {} series every 15 s ({} per request), 1,000-series import every 1 s, {} query clients over the last {} s, a hostile request every {} s; server flags {:?}",
        args.minutes, args.series, args.series_per_request, args.query_clients, args.query_range, args.hostile_every, flags
    );
    let tally: Shared = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let query_range = args.query_range.max(60);
    let rss = std::thread::scope(|s| {
        s.spawn(|| remote_write(args, addr, &tally, &stop));
        s.spawn(|| imports(addr, &tally, &stop));
        for c in 0..args.query_clients {
            let (tally, stop) = (&tally, &stop);
            s.spawn(move || queries(addr, tally, stop, c, query_range));
        }
        s.spawn(|| hostile(args, addr, &tally, &stop));
        let started = Instant::now();
        let end = started + Duration::from_secs_f64(args.minutes * 60.0);
        let mut rss = Vec::new();
        let mut metrics_conn = None;
        println!(
            "{:>7} {:>9} {:>9} {:>6} {:>6} {:>6} {:>6} {:>6} {:>5} {:>16}",
            "minute", "RSS MiB", "anon MiB", "head", "membuf", "cache", "labels", "pinned", "fds", "load average"
        );
        while Instant::now() < end {
            std::thread::sleep(Duration::from_secs(args.sample_every));
            let mib = status_kib(&pid, "VmRSS:") as f64 / 1024.0;
            let anon = status_kib(&pid, "RssAnon:") as f64 / 1024.0;
            let parts = breakdown(&mut metrics_conn, addr);
            let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map(|d| d.count()).unwrap_or(0);
            let minute = started.elapsed().as_secs_f64() / 60.0;
            println!(
                "{minute:>7.1} {mib:>9.1} {anon:>9.1} {:>6.1} {:>6.1} {:>6.1} {:>6.1} {:>6.1} {fds:>5} {:>16}",
                parts[0],
                parts[1],
                parts[2],
                parts[3],
                parts[4],
                load_average()
            );
            rss.push((minute, mib));
        }
        stop.store(true, Ordering::Relaxed);
        rss
    });
    let peak_mib = status_kib(&pid, "VmHWM:") as f64 / 1024.0;
    server.stop();
    report(&tally, &rss, peak_mib);
}

fn report(tally: &Shared, rss: &[(f64, f64)], peak_mib: f64) {
    let t = tally.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    println!("\nanswers by request type and status (0 = connection failed or cut; slow connections: 0 = closed by the server, 1 = still open after 2 min):");
    for ((kind, status), n) in &t.answers {
        println!("  {kind:<24} {status:>4} {n:>9}");
    }
    println!("\n{:<24} {:>9} {:>10} {:>10}", "latency", "requests", "p50 ms", "p99 ms");
    for (kind, lat) in &t.latencies {
        let mut sorted = lat.clone();
        sorted.sort_by(f64::total_cmp);
        println!(
            "{kind:<24} {:>9} {:>10.1} {:>10.1}",
            sorted.len(),
            percentile(&sorted, 0.5) * 1e3,
            percentile(&sorted, 0.99) * 1e3
        );
    }
    // Mean and max RSS per 5 minutes.
    let mut blocks: BTreeMap<usize, (f64, f64, usize)> = BTreeMap::new();
    for &(minute, mib) in rss {
        let b = blocks.entry((minute / 5.0) as usize).or_insert((0.0, 0.0, 0));
        *b = (b.0 + mib, b.1.max(mib), b.2 + 1);
    }
    println!("\nRSS MiB per 5 minutes (minutes: mean / max):");
    for (b, (sum, max, n)) in &blocks {
        println!("  {:>3}-{:<3} {:>7.0} {:>7.0}", b * 5, b * 5 + 5, sum / *n as f64, max);
    }
    // Levelling off: the newest third's peak against the middle third's.
    let third = rss.len() / 3;
    let max_of = |r: &[(f64, f64)]| r.iter().map(|&(_, m)| m).fold(0.0, f64::max);
    let (middle, last) =
        (max_of(rss.get(third..2 * third).unwrap_or(&[])), max_of(rss.get(2 * third..).unwrap_or(&[])));
    println!(
        "\nRSS: peak {peak_mib:.1} MiB; max of the middle third {middle:.1} MiB, of the last third {last:.1} MiB ({:+.1}%)",
        if middle > 0.0 { (last / middle - 1.0) * 100.0 } else { 0.0 }
    );
}
