//! `saltdb-bench clickhouse-replication` (issue 36): what replicated ClickHouse shards cost
//! saltdb's ingest and queries, against the unreplicated cluster. For each setup, in one run:
//!
//! | setup | servers | node flags |
//! |---|---|---|
//! | `unreplicated` | 2 shards of 1 `clickhouse-server` | |
//! | `replicated` | 2 shards x 2 replicas, 1 ZooKeeper | (quorum 1, the default) |
//! | `quorum2` | the same | `--clickhouse-insert-quorum 2` |
//!
//! it starts fresh servers and a `saltdb serve --storage clickhouse` node on them, remote-writes
//! the same fleet (`fleet.rs`: Prometheus-shaped requests of `--series-per-request` series x 1
//! sample over `--concurrency` connections, every scrape of every series in time order), and
//! measures samples/s (acknowledged samples over the wall time of the whole send), CPU seconds
//! per million samples of the node and of every ClickHouse server and ZooKeeper (from the first
//! request until every process is idle again and no replica has anything queued, so merges and
//! replica fetches count), bytes on disk of each server's data directory (`du`) once settled
//! and again after `OPTIMIZE TABLE ... FINAL` of every table (with each table's active parts,
//! rows and bytes), the node's ClickHouse requests per remote-write request and their mean
//! latency (its `/metrics`), and the median latency of a few queries through the node. Each
//! setup's replicas must end with the same `samples` rows (printed). The node runs with
//! `--maintenance-interval 1h`: no seal and no settling of postings runs during the
//! measurement (both would run on every setup alike).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::ValueEnum;

use crate::fleet::{Body, Fleet, INTERVAL_MS};
use crate::http_client::{excerpt, Conn, Server};
use crate::peers::Peer;

/// Options of the replication benchmark.
#[derive(Debug, clap::Args)]
pub struct ReplicationArgs {
    /// Series: `--metrics` metric names on `series / metrics` hosts.
    #[arg(long, default_value_t = 100_000)]
    series: usize,
    /// Metric names per host (`m0`, `m1`, ...).
    #[arg(long, default_value_t = 10)]
    metrics: usize,
    /// Samples per series (scrapes 15 s apart, ending about now).
    #[arg(long, default_value_t = 120)]
    scrapes: usize,
    /// Series (of one sample each) per remote-write request.
    #[arg(long, default_value_t = 2_000)]
    series_per_request: usize,
    /// Keep-alive connections writing at once.
    #[arg(long, default_value_t = 4)]
    concurrency: usize,
    /// Timed runs per query (after one warm-up); the median is reported.
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Setups to run, in order (repeatable). Default: all three.
    #[arg(long = "setup", value_enum)]
    setups: Vec<Setup>,
    /// The `saltdb` binary (default: the one next to this bench binary).
    #[arg(long)]
    saltdb_bin: Option<PathBuf>,
    /// Longest wait for one HTTP request, in seconds.
    #[arg(long, default_value_t = 120)]
    timeout_secs: u64,
    /// Longest wait for the servers to go idle after the writes and after `OPTIMIZE`, in seconds.
    #[arg(long, default_value_t = 600)]
    settle_secs: u64,
    /// Directory for the servers' data directories (default: the system temp dir).
    #[arg(long)]
    pub work_dir: Option<PathBuf>,
    /// Leave the data directories behind (their paths are printed).
    #[arg(long)]
    pub keep: bool,
}

/// One cluster layout and insert quorum.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Setup {
    /// 2 shards of one server each (no ZooKeeper).
    Unreplicated,
    /// 2 shards x 2 replicas and one ZooKeeper, `--clickhouse-insert-quorum 1`.
    Replicated,
    /// The same with `--clickhouse-insert-quorum 2`.
    Quorum2,
}

impl Setup {
    fn name(self) -> &'static str {
        match self {
            Self::Unreplicated => "unreplicated",
            Self::Replicated => "replicated",
            Self::Quorum2 => "quorum2",
        }
    }

    fn replicas(self) -> usize {
        if self == Self::Unreplicated {
            1
        } else {
            2
        }
    }

    fn quorum(self) -> u32 {
        if self == Self::Quorum2 {
            2
        } else {
            1
        }
    }
}

/// Shards in every setup.
const SHARDS: usize = 2;

/// Quiet seconds in a row that make a cluster settled: longer than the 5 s a replicated table's
/// leader sleeps between looking for parts to merge once it found none, so a merge it assigns
/// after the writes is waited for (and its CPU counted).
const QUIET_SECONDS: u32 = 10;

/// The workload, built once (untimed) and sent to every setup byte for byte.
struct Workload {
    bodies: Vec<Body>,
    samples: u64,
    /// First and last scrape's scheduled time, ms.
    start_ms: i64,
    end_ms: i64,
}

fn build(args: &ReplicationArgs) -> Workload {
    let fleet = Fleet { metrics: args.metrics.max(1) };
    let now = chrono::Utc::now().timestamp_millis();
    let start_ms = now - now % 60_000 - args.scrapes as i64 * INTERVAL_MS;
    let mut bodies = Vec::new();
    for k in 0..args.scrapes {
        bodies.extend(fleet.bodies(0..args.series, k, start_ms + k as i64 * INTERVAL_MS, args.series_per_request));
    }
    let samples = bodies.iter().map(|b| b.samples).sum();
    Workload { bodies, samples, start_ms, end_ms: start_ms + (args.scrapes as i64 - 1) * INTERVAL_MS }
}

/// A setup's processes, killed on drop.
struct Cluster {
    setup: Setup,
    dir: PathBuf,
    zookeeper: Option<Peer>,
    /// By shard, then replica.
    servers: Vec<Vec<Peer>>,
    node: Server,
}

impl Cluster {
    /// Fresh servers under `dir`, then the node on them.
    fn start(setup: Setup, args: &ReplicationArgs, dir: &Path) -> Result<Self, String> {
        let _ = std::fs::remove_dir_all(dir);
        let zookeeper = match setup {
            Setup::Unreplicated => None,
            _ => Some(
                Peer::zookeeper(&dir.join("zookeeper")).ok_or("ZooKeeper did not start (apt-get install zookeeper)")?,
            ),
        };
        let zookeeper_port = zookeeper.as_ref().and_then(|z| z.base.rsplit(':').next()?.parse::<u16>().ok());
        let mut servers = Vec::new();
        for s in 0..SHARDS {
            let mut replicas = Vec::new();
            for r in 0..setup.replicas() {
                let name = format!("r{r}");
                let replica = zookeeper_port.map(|port| (port, name.as_str()));
                let server = Peer::clickhouse_replica(&dir.join(format!("clickhouse-{s}-{r}")), replica)
                    .ok_or("clickhouse-server did not start (apt-get install clickhouse-server)")?;
                replicas.push(server);
            }
            servers.push(replicas);
        }
        let urls: Vec<String> =
            servers.iter().map(|rs| rs.iter().map(|p| p.base.as_str()).collect::<Vec<_>>().join("|")).collect();
        let (urls, quorum) = (urls.join(","), setup.quorum().to_string());
        let mut flags = vec!["--storage", "clickhouse", "--clickhouse-url", &urls, "--retention", "0"];
        flags.extend(["--maintenance-interval", "1h", "--clickhouse-insert-quorum", &quorum]);
        let bin = args.saltdb_bin.clone().unwrap_or_else(Server::default_bin);
        let node = Server::try_spawn_bin(&bin, &dir.join("node"), &flags)?;
        Ok(Self { setup, dir: dir.to_owned(), zookeeper, servers, node })
    }

    fn all_servers(&self) -> impl Iterator<Item = &Peer> {
        self.servers.iter().flatten()
    }

    /// CPU seconds so far: the node's, and every ClickHouse server's and ZooKeeper's.
    fn cpu(&self) -> Cpu {
        Cpu {
            node: crate::cpu_seconds(&self.node.pid()),
            clickhouse: self.all_servers().map(|p| crate::cpu_seconds(&p.pid())).sum(),
            zookeeper: self.zookeeper.as_ref().map_or(0.0, |z| crate::cpu_seconds(&z.pid())),
        }
    }

    /// Waits until no replica has entries queued, no merge runs and every process used less
    /// than 5% of a core over a second, [`QUIET_SECONDS`] seconds in a row (at most `limit`);
    /// returns the time waited and whether they settled.
    fn settle(&self, limit: Duration) -> (Duration, bool) {
        let started = Instant::now();
        let mut quiet = 0;
        let mut last = self.per_process_cpu();
        while started.elapsed() < limit {
            std::thread::sleep(Duration::from_secs(1));
            let now = self.per_process_cpu();
            let idle = now.iter().zip(&last).all(|(n, l)| n - l < 0.05);
            last = now;
            let busy = self.all_servers().any(|p| {
                let pending = sql(&p.base, "SELECT (SELECT count() FROM system.merges) + (SELECT toUInt64(sum(queue_size)) FROM system.replicas)");
                pending.trim() != "0"
            });
            quiet = if idle && !busy { quiet + 1 } else { 0 };
            if quiet >= QUIET_SECONDS {
                return (started.elapsed(), true);
            }
        }
        (started.elapsed(), false)
    }

    fn per_process_cpu(&self) -> Vec<f64> {
        let pids = std::iter::once(self.node.pid())
            .chain(self.all_servers().map(Peer::pid))
            .chain(self.zookeeper.iter().map(Peer::pid));
        pids.map(|p| crate::cpu_seconds(&p)).collect()
    }

    /// Bytes of each server's data directory (by shard, then replica), once every part replaced
    /// by a merge is deleted (inactive parts: 5 s after the merge on every table, see
    /// [`Peer::clickhouse`], and a replicated table's cleanup thread runs every 30-40 s), at
    /// most `limit` later.
    fn server_bytes(&self, limit: Duration) -> Vec<Vec<u64>> {
        let started = Instant::now();
        let inactive = |p: &Peer| sql(&p.base, "SELECT count() FROM system.parts WHERE active = 0").trim() == "0";
        // A replicated table drops a replaced part from system.parts before its files are
        // deleted (once ZooKeeper forgot it): wait for the directories too.
        let on_disk = |s: usize, r: usize, p: &Peer| {
            let active: usize = sql(&p.base, "SELECT count() FROM system.parts WHERE database = 'saltdb' AND active")
                .trim()
                .parse()
                .unwrap_or(0);
            self.part_directories(&format!("clickhouse-{s}-{r}")) == active
        };
        let clean = || {
            self.servers
                .iter()
                .enumerate()
                .all(|(s, rs)| rs.iter().enumerate().all(|(r, p)| inactive(p) && on_disk(s, r, p)))
        };
        while !clean() && started.elapsed() < limit {
            std::thread::sleep(Duration::from_secs(1));
        }
        if !clean() {
            println!("  !! replaced parts still on disk after {limit:?}; measured anyway");
        }
        (0..SHARDS)
            .map(|s| (0..self.setup.replicas()).map(|r| self.data_bytes(&format!("clickhouse-{s}-{r}"))).collect())
            .collect()
    }

    /// Part directories of the saltdb tables in `server`'s data directory (`detached` apart).
    fn part_directories(&self, server: &str) -> usize {
        let tables = self.dir.join(server).join("data").join("data").join("saltdb");
        let Ok(tables) = std::fs::read_dir(tables) else { return 0 };
        tables
            .flatten()
            .filter_map(|t| std::fs::read_dir(t.path()).ok())
            .flat_map(|parts| parts.flatten())
            .filter(|p| p.file_name() != "detached" && p.file_type().is_ok_and(|t| t.is_dir()))
            .count()
    }

    fn data_bytes(&self, server: &str) -> u64 {
        saltdb::storage::du_bytes(&self.dir.join(server).join("data")).unwrap_or(0)
    }

    /// `OPTIMIZE TABLE ... PARTITION ... FINAL` of every partition of every saltdb table, on the
    /// first replica of each shard (a replicated table's merge is carried out by every
    /// replica). ClickHouse 18.16 fails an `OPTIMIZE` of a replicated table that finds nothing
    /// to merge at that moment (`Unknown log entry type: 0`), so empty tables are skipped and a
    /// failure is retried a few times; the errors that remain are returned.
    fn optimize(&self) -> Vec<String> {
        let mut errors = Vec::new();
        for replicas in &self.servers {
            let Some(first) = replicas.first() else { continue };
            let partitions = sql(
                &first.base,
                "SELECT DISTINCT table, partition FROM system.parts WHERE database = 'saltdb' AND active FORMAT TSV",
            );
            for (table, partition) in partitions.lines().filter_map(|l| l.split_once('\t')) {
                let statement = format!("OPTIMIZE TABLE saltdb.{table} PARTITION {partition} FINAL");
                let mut outcome = try_sql(&first.base, &statement);
                for _ in 0..5 {
                    if outcome.is_ok() {
                        break;
                    }
                    std::thread::sleep(Duration::from_secs(2));
                    outcome = try_sql(&first.base, &statement);
                }
                if let Err(e) = outcome {
                    errors.push(format!("{table} {partition}: {e}"));
                }
            }
        }
        errors
    }

    /// Active parts and their bytes per table on each server, as system.parts counts them.
    fn tables(&self) -> Vec<String> {
        let statement = "SELECT table, count(), sum(rows), sum(bytes_on_disk) FROM system.parts \
                         WHERE database = 'saltdb' AND active GROUP BY table ORDER BY table FORMAT TSV";
        self.servers
            .iter()
            .enumerate()
            .flat_map(|(s, rs)| rs.iter().enumerate().map(move |(r, p)| (s, r, p)))
            .map(|(s, r, p)| {
                let tables: Vec<String> = sql(&p.base, statement)
                    .lines()
                    .filter_map(|l| {
                        let f: Vec<&str> = l.split('\t').collect();
                        let bytes: f64 = f.get(3)?.parse().ok()?;
                        Some(format!(
                            "{} {} parts {} rows {:.1} MiB",
                            f.first()?,
                            f.get(1)?,
                            f.get(2)?,
                            bytes / (1 << 20) as f64
                        ))
                    })
                    .collect();
                format!("shard {s} replica {r}: {}", tables.join(", "))
            })
            .collect()
    }

    /// `samples` rows on each server (by shard, then replica): replicas of a shard must agree.
    fn sample_rows(&self) -> Vec<Vec<u64>> {
        let count = |p: &Peer| sql(&p.base, "SELECT count() FROM saltdb.samples").trim().parse().unwrap_or(0);
        self.servers.iter().map(|rs| rs.iter().map(count).collect()).collect()
    }

    /// Stops the node (SIGTERM), then the servers.
    fn stop(self) {
        let _ = self.node.stop_within(Duration::from_secs(60));
    }
}

/// The node's ClickHouse requests so far and the seconds spent in them (its `/metrics`).
fn clickhouse_requests(addr: SocketAddr) -> (f64, f64) {
    let Ok(mut conn) = Conn::try_connect(addr, Some(Duration::from_secs(30))) else { return (0.0, 0.0) };
    let Ok((200, body)) = conn.try_request("GET", "/metrics", &[], b"") else { return (0.0, 0.0) };
    let text = String::from_utf8_lossy(&body);
    let sum = |name: &str| -> f64 {
        text.lines()
            .filter(|l| l.strip_prefix(name).is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' ')))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    (sum("saltdb_clickhouse_requests_total"), sum("saltdb_clickhouse_request_seconds_total"))
}

/// CPU seconds by process group.
#[derive(Clone, Copy, Debug, Default)]
struct Cpu {
    node: f64,
    clickhouse: f64,
    zookeeper: f64,
}

impl std::ops::Sub for Cpu {
    type Output = Self;
    fn sub(self, o: Self) -> Self {
        Self {
            node: self.node - o.node,
            clickhouse: self.clickhouse - o.clickhouse,
            zookeeper: self.zookeeper - o.zookeeper,
        }
    }
}

/// One SQL statement over ClickHouse's HTTP interface; the body, or why not.
fn try_sql(base: &str, statement: &str) -> Result<String, String> {
    let mut resp = ureq::post(&format!("{base}/"))
        .config()
        .http_status_as_error(false)
        .build()
        .send(statement)
        .map_err(|e| e.to_string())?;
    let status = resp.status().as_u16();
    let body = resp.body_mut().read_to_string().map_err(|e| e.to_string())?;
    if status == 200 {
        Ok(body)
    } else {
        Err(format!("HTTP {status}: {}", body.trim()))
    }
}

/// [`try_sql`], empty on error.
fn sql(base: &str, statement: &str) -> String {
    try_sql(base, statement).unwrap_or_default()
}

/// The queries timed through the node: (label, path, form).
fn queries(w: &Workload) -> Vec<(&'static str, &'static str, String)> {
    let form = |pairs: &[(&str, String)]| {
        let mut s = form_urlencoded::Serializer::new(String::new());
        for (k, v) in pairs {
            s.append_pair(k, v);
        }
        s.finish()
    };
    let (start, end) = ((w.start_ms / 1000).to_string(), (w.end_ms / 1000 + 15).to_string());
    vec![
        (
            "range sum(rate(m0[5m])), step 60s",
            "/api/v1/query_range",
            form(&[
                ("query", "sum(rate(m0[5m]))".into()),
                ("start", start.clone()),
                ("end", end.clone()),
                ("step", "60".into()),
            ]),
        ),
        (
            "range m0 of one host, step 60s",
            "/api/v1/query_range",
            form(&[
                ("query", format!("m0{{instance=\"{}\"}}", Fleet::instance(1))),
                ("start", start),
                ("end", end.clone()),
                ("step", "60".into()),
            ]),
        ),
        ("instant m1 (every host)", "/api/v1/query", form(&[("query", "m1".into()), ("time", end)])),
    ]
}

/// Runs one query; (seconds, series in the answer).
fn run_query(addr: SocketAddr, path: &str, form: &str) -> Result<(f64, usize), String> {
    let mut conn = Conn::try_connect(addr, Some(Duration::from_secs(120))).map_err(|e| format!("connect: {e}"))?;
    let headers = [("Content-Type", "application/x-www-form-urlencoded")];
    let t = Instant::now();
    let (status, body) = conn.try_request("POST", path, &headers, form.as_bytes()).map_err(|e| e.to_string())?;
    let secs = t.elapsed().as_secs_f64();
    if status != 200 {
        return Err(format!("HTTP {status}: {}", excerpt(&body)));
    }
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    Ok((secs, v["data"]["result"].as_array().map_or(0, Vec::len)))
}

/// What one setup gave.
struct Outcome {
    setup: Setup,
    sent: crate::sender::Sent,
    /// CPU from the first request until settled.
    cpu: Cpu,
    settle_secs: f64,
    settled: bool,
    /// By shard, then replica: once settled, and after `OPTIMIZE FINAL`.
    bytes: Vec<Vec<u64>>,
    optimized: Vec<Vec<u64>>,
    zookeeper_bytes: u64,
    /// Per query: median seconds and series in the answer.
    queries: Vec<(f64, usize)>,
}

fn run_setup(setup: Setup, args: &ReplicationArgs, w: &Workload, root: &Path) -> Result<Outcome, String> {
    let dir = root.join(setup.name());
    let cluster = Cluster::start(setup, args, &dir)?;
    let limit = Duration::from_secs(args.settle_secs);
    // Start-up work (table creation, replicas registering) out of the measurement.
    cluster.settle(limit);
    let idle_from = cluster.cpu();
    std::thread::sleep(Duration::from_secs(5));
    let before = cluster.cpu();
    let idle = before - idle_from;
    println!(
        "{}: idle CPU, % of a core: node {:.1}, ClickHouse {:.1}, ZooKeeper {:.1}",
        setup.name(),
        idle.node * 20.0,
        idle.clickhouse * 20.0,
        idle.zookeeper * 20.0
    );
    let requests_before = clickhouse_requests(cluster.node.addr);
    let sent =
        crate::sender::send(cluster.node.addr, Duration::from_secs(args.timeout_secs), &w.bodies, args.concurrency);
    let requests_after = clickhouse_requests(cluster.node.addr);
    let (requests, request_secs) = (requests_after.0 - requests_before.0, requests_after.1 - requests_before.1);
    let (waited, settled) = cluster.settle(limit);
    let cpu = cluster.cpu() - before;
    println!(
        "{}: sent in {:.1}s ({} accepted, {} rejected, {} retried), settled {:.1}s later{}",
        setup.name(),
        sent.seconds,
        sent.accepted,
        sent.rejected,
        sent.retried,
        waited.as_secs_f64(),
        if settled { "" } else { " (not idle: measured anyway)" }
    );
    for e in &sent.errors {
        println!("  !! write error: {e}");
    }
    println!(
        "  the node's ClickHouse requests during the send: {requests:.0} ({:.2} per remote-write request), mean {:.1} ms",
        requests / w.bodies.len().max(1) as f64,
        request_secs / requests.max(1.0) * 1000.0
    );
    println!("  samples rows by shard and replica: {:?}", cluster.sample_rows());
    let queries = time_queries(&cluster, args, w);
    let bytes = cluster.server_bytes(limit);
    for t in cluster.tables() {
        println!("  settled, {t}");
    }
    for e in cluster.optimize() {
        println!("  !! OPTIMIZE {e}");
    }
    cluster.settle(limit);
    let optimized = cluster.server_bytes(limit);
    for t in cluster.tables() {
        println!("  optimized, {t}");
    }
    let zookeeper_bytes = cluster.zookeeper.as_ref().map_or(0, |_| cluster.data_bytes("zookeeper"));
    cluster.stop();
    if args.keep {
        println!("  data kept in {}", dir.display());
    } else {
        let _ = std::fs::remove_dir_all(&dir);
    }
    Ok(Outcome {
        setup,
        sent,
        cpu,
        settle_secs: waited.as_secs_f64(),
        settled,
        bytes,
        optimized,
        zookeeper_bytes,
        queries,
    })
}

/// Median latency of each query (one warm-up, then `--runs`).
fn time_queries(cluster: &Cluster, args: &ReplicationArgs, w: &Workload) -> Vec<(f64, usize)> {
    queries(w)
        .iter()
        .map(|(label, path, form)| {
            let mut times = Vec::new();
            let mut series = 0;
            for i in 0..=args.runs {
                match run_query(cluster.node.addr, path, form) {
                    Ok((secs, n)) if i > 0 => {
                        times.push(secs);
                        series = n;
                    }
                    Ok(_) => {}
                    Err(e) => println!("  !! {label}: {e}"),
                }
            }
            (crate::query::median(times), series)
        })
        .collect()
}

/// Runs the benchmark in `root`.
pub fn run(args: &ReplicationArgs, root: &Path) {
    if !crate::peers::installed("clickhouse-server") {
        println!("clickhouse-server is missing: apt-get install clickhouse-server");
        return;
    }
    let setups = if args.setups.is_empty() {
        vec![Setup::Unreplicated, Setup::Replicated, Setup::Quorum2]
    } else {
        args.setups.clone()
    };
    let t = Instant::now();
    let w = build(args);
    println!(
        "workload: {} series x {} samples = {} samples, {} remote-write requests of {} series x 1 sample, {} connections (built in {:.1}s)",
        args.series,
        args.scrapes,
        w.samples,
        w.bodies.len(),
        args.series_per_request,
        args.concurrency,
        t.elapsed().as_secs_f64()
    );
    let mut outcomes = Vec::new();
    for setup in setups {
        match run_setup(setup, args, &w, root) {
            Ok(o) => outcomes.push(o),
            Err(e) => println!("{}: {e}", setup.name()),
        }
    }
    report(&outcomes, &w, args);
}

/// Bytes of one copy of the data: each shard's replica `r`, summed over shards.
fn copy_bytes(bytes: &[Vec<u64>], r: usize) -> u64 {
    bytes.iter().filter_map(|rs| rs.get(r)).sum()
}

/// Mean over the replicas of one copy's bytes.
fn bytes_per_copy(bytes: &[Vec<u64>]) -> f64 {
    let replicas = bytes.first().map_or(1, Vec::len).max(1);
    (0..replicas).map(|r| copy_bytes(bytes, r) as f64).sum::<f64>() / replicas as f64
}

fn report(outcomes: &[Outcome], w: &Workload, args: &ReplicationArgs) {
    let per_m = |cpu: f64, o: &Outcome| cpu / o.sent.accepted.max(1) as f64 * 1e6;
    let mib = |b: f64| b / (1 << 20) as f64;
    println!();
    for o in outcomes {
        let servers: Vec<String> = o
            .bytes
            .iter()
            .zip(&o.optimized)
            .enumerate()
            .flat_map(|(s, (b, opt))| {
                b.iter().zip(opt).enumerate().map(move |(r, (b, opt))| {
                    format!("shard {s} replica {r}: {:.1} MiB ({:.1} optimized)", mib(*b as f64), mib(*opt as f64))
                })
            })
            .collect();
        println!("{} data directories: {}", o.setup.name(), servers.join(", "));
        if o.zookeeper_bytes > 0 {
            println!("{} ZooKeeper data directory: {:.1} MiB", o.setup.name(), mib(o.zookeeper_bytes as f64));
        }
        println!(
            "{} CPU s from the first request until settled ({:.1}s{}): node {:.1}, ClickHouse {:.1}, ZooKeeper {:.1}",
            o.setup.name(),
            o.settle_secs,
            if o.settled { "" } else { ", not idle" },
            o.cpu.node,
            o.cpu.clickhouse,
            o.cpu.zookeeper
        );
    }
    println!();
    println!(
        "{:<13} {:>11} {:>9} {:>9} {:>9} {:>11} {:>11} {:>10} {:>10} {:>10}",
        "setup", "samples/s", "node s/M", "CH+ZK s/M", "(ZK s/M)", "B/sample", "optimized", "q1 ms", "q2 ms", "q3 ms"
    );
    let row = |o: &Outcome| {
        [
            o.sent.rate(),
            per_m(o.cpu.node, o),
            per_m(o.cpu.clickhouse + o.cpu.zookeeper, o),
            per_m(o.cpu.zookeeper, o),
            bytes_per_copy(&o.bytes) / w.samples as f64,
            bytes_per_copy(&o.optimized) / w.samples as f64,
        ]
    };
    for o in outcomes {
        let r = row(o);
        let q: Vec<f64> = o.queries.iter().map(|q| q.0 * 1000.0).collect();
        println!(
            "{:<13} {:>11.0} {:>9.2} {:>9.2} {:>9.2} {:>11.2} {:>11.2} {:>10.1} {:>10.1} {:>10.1}",
            o.setup.name(),
            r[0],
            r[1],
            r[2],
            r[3],
            r[4],
            r[5],
            q.first().copied().unwrap_or(f64::NAN),
            q.get(1).copied().unwrap_or(f64::NAN),
            q.get(2).copied().unwrap_or(f64::NAN)
        );
    }
    if let Some(base) = outcomes.iter().find(|o| o.setup == Setup::Unreplicated) {
        let b = row(base);
        for o in outcomes.iter().filter(|o| o.setup != Setup::Unreplicated) {
            let r = row(o);
            let ratio = |i: usize| r.get(i).zip(b.get(i)).map_or(f64::NAN, |(x, y)| x / y);
            let q = |i: usize| o.queries.get(i).zip(base.queries.get(i)).map_or(f64::NAN, |(x, y)| x.0 / y.0);
            println!(
                "{:<13} {:>10.2}x {:>8.2}x {:>8.2}x {:>9} {:>10.2}x {:>10.2}x {:>9.2}x {:>9.2}x {:>9.2}x",
                "/ unrepl.",
                ratio(0),
                ratio(1),
                ratio(2),
                "",
                ratio(4),
                ratio(5),
                q(0),
                q(1),
                q(2)
            );
        }
    }
    println!(
        "(samples/s: accepted samples over the send's wall time; s/M: CPU seconds per million samples from the first \
         request until every process is idle and no replica has work queued; B/sample: `du` of one copy of the data \
         (each shard's replica r, summed over shards, averaged over r) per sample, settled and after OPTIMIZE TABLE \
         FINAL; a replicated cluster holds {} copies; ZooKeeper's directory apart)",
        outcomes.iter().map(|o| o.setup.replicas()).max().unwrap_or(1)
    );
    for (i, (label, _, _)) in queries(w).iter().enumerate() {
        let series: Vec<String> = outcomes.iter().map(|o| o.queries.get(i).map_or(0, |q| q.1).to_string()).collect();
        println!("q{}: {label}, median of {} ({} series)", i + 1, args.runs, series.join("/"));
    }
}
