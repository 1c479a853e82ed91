//! `saltdb-bench query`: loads one dataset (a counter over `instances x paths` series and a
//! classic histogram over `instances x 10` buckets, 15 s interval) by remote-write into saltdb,
//! Prometheus and VictoriaMetrics, then times `query_range` of the two dashboard-typical queries
//! (and any given with `--query`) over the whole range at step 60 s, and prints median latencies
//! and ratios.

use std::path::Path;
use std::time::Instant;

use saltdb::remote::proto::{Label, Sample, TimeSeries, WriteRequest};

use crate::http_client::{Conn, Server, REMOTE_WRITE_HEADERS};
use crate::peers::Peer;

/// Options of the query benchmark.
#[derive(Debug, clap::Args)]
pub struct QueryArgs {
    /// Instances (each has `--paths` counter series and 10 histogram buckets).
    #[arg(long, default_value_t = 100)]
    instances: usize,
    /// Counter series per instance.
    #[arg(long, default_value_t = 10)]
    paths: usize,
    /// Hours of data.
    #[arg(long, default_value_t = 24.0)]
    hours: f64,
    /// Timed runs per query and target (after one warm-up).
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Only saltdb, in-process (no HTTP, no peers): times storage selection and evaluation
    /// separately. For profiling the evaluator.
    #[arg(long)]
    in_process: bool,
    /// With `--in-process`: keep the data here; a directory that already holds data is reused
    /// as is (no load), so a profiler can run the queries alone.
    #[arg(long)]
    data_dir: Option<std::path::PathBuf>,
    /// Another `saltdb` binary (e.g. a build of the previous commit), loaded and queried in the
    /// same run as target `saltdb-baseline`, for before/after figures on a noisy machine.
    #[arg(long)]
    baseline_saltdb: Option<std::path::PathBuf>,
    /// More PromQL queries to time after the two dashboard queries, over the same range and
    /// step (repeatable), e.g. a subquery: `--query 'sum(max_over_time(bench_requests_total[10m:1m]))'`.
    #[arg(long = "query")]
    queries: Vec<String>,
    /// Also a saltdb node on ClickHouse (`--storage clickhouse`, two local `clickhouse-server`
    /// shards) as target `saltdb-clickhouse`: load time, query latency, bytes in the shards.
    #[arg(long)]
    clickhouse: bool,
}

const LES: [&str; 10] = ["0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1", "2.5", "+Inf"];

fn labels(pairs: &[(&str, String)]) -> Vec<Label> {
    let mut l: Vec<Label> = pairs.iter().map(|(k, v)| Label { name: (*k).to_owned(), value: v.clone() }).collect();
    l.sort_by(|a, b| a.name.cmp(&b.name));
    l
}

/// Time-ordered remote-write requests of 10 scrapes per series each; returns them and the range.
fn build(args: &QueryArgs) -> (Vec<WriteRequest>, usize, i64, i64) {
    let scrapes = (args.hours * 240.0) as i64;
    // Fixed for a reused `--data-dir`; otherwise ending now.
    let now = if args.data_dir.is_some() { 1_700_000_000_000 } else { chrono::Utc::now().timestamp_millis() };
    let t0 = now - now % 60_000 - scrapes * 15_000;
    let mut series: Vec<(Vec<Label>, f64, f64)> = Vec::new();
    for i in 0..args.instances {
        for p in 0..args.paths {
            let l = labels(&[
                ("__name__", "bench_requests_total".into()),
                ("instance", format!("host-{i}")),
                ("path", format!("/p{p}")),
            ]);
            series.push((l, 0.0, 1.0 + (p as f64) * 0.5));
        }
        for (k, le) in LES.iter().enumerate() {
            let l = labels(&[
                ("__name__", "bench_latency_seconds_bucket".into()),
                ("instance", format!("host-{i}")),
                ("le", (*le).into()),
            ]);
            series.push((l, 0.0, 2.0 * (k + 1) as f64));
        }
    }
    let mut bodies = Vec::new();
    let mut samples = 0;
    let mut k = 0;
    while k < scrapes {
        let n = 10.min(scrapes - k);
        let mut req = WriteRequest::default();
        for (j, (l, value, rate)) in series.iter_mut().enumerate() {
            let mut pts = Vec::new();
            for s in k..k + n {
                let jitter = ((j as i64 * 7919 + s * 104_729) % 1000) as f64 / 1000.0;
                *value += *rate * 15.0 * (0.5 + jitter);
                pts.push(Sample { value: value.round(), timestamp: t0 + s * 15_000 + (jitter * 1000.0) as i64 });
            }
            samples += pts.len();
            req.timeseries.push(TimeSeries { labels: l.clone(), samples: pts, ..Default::default() });
        }
        bodies.push(req);
        k += n;
    }
    (bodies, samples, t0, t0 + (scrapes - 1) * 15_000)
}

fn load(name: &str, base: &str, bodies: &[Vec<u8>]) -> f64 {
    let addr = base.trim_start_matches("http://").parse().expect("addr");
    let mut conn = Conn::connect(addr);
    let start = Instant::now();
    for b in bodies {
        let (status, body) = conn.request("POST", "/api/v1/write", &REMOTE_WRITE_HEADERS, b);
        assert!(status / 100 == 2, "{name}: remote write answered {status}: {}", String::from_utf8_lossy(&body));
    }
    start.elapsed().as_secs_f64()
}

/// Runs a range query; returns (seconds, series in the result).
fn query(base: &str, q: &str, start: i64, end: i64) -> (f64, usize) {
    let addr = base.trim_start_matches("http://").parse().expect("addr");
    let mut conn = Conn::connect(addr);
    let form: String = form_urlencoded::Serializer::new(String::new())
        .append_pair("query", q)
        .append_pair("start", &(start / 1000).to_string())
        .append_pair("end", &(end / 1000).to_string())
        .append_pair("step", "60")
        .finish();
    let t = Instant::now();
    let (status, body) = conn.request(
        "POST",
        "/api/v1/query_range",
        &[("Content-Type", "application/x-www-form-urlencoded")],
        form.as_bytes(),
    );
    let secs = t.elapsed().as_secs_f64();
    assert_eq!(status, 200, "{base} {q}: {}", String::from_utf8_lossy(&body));
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    (secs, v["data"]["result"].as_array().map_or(0, Vec::len))
}

/// The median (the upper one of an even count); NaN when empty.
pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

const QUERIES: [&str; 2] = [
    "sum by (instance) (rate(bench_requests_total[5m]))",
    "histogram_quantile(0.9, sum by (le) (rate(bench_latency_seconds_bucket[5m])))",
];

/// `--in-process`: loads (or reuses) a saltdb data directory and times each query's storage
/// selection and whole evaluation separately.
fn in_process(args: &QueryArgs, root: &Path) {
    use saltdb::matcher::Matcher;
    use saltdb::promql::{Engine, EngineOptions};
    use saltdb::storage::{Storage, StorageConfig};
    let (requests, samples, start, end) = build(args);
    let dir = args.data_dir.clone().unwrap_or_else(|| root.join("saltdb"));
    let reuse = std::fs::read_dir(&dir).is_ok_and(|mut d| d.next().is_some());
    let mut config = StorageConfig::new(dir);
    config.retention_ms = None;
    let storage = Storage::open(config).expect("open");
    if !reuse {
        let t = Instant::now();
        for req in &requests {
            let series = req
                .timeseries
                .iter()
                .map(|ts| saltdb::sample::SeriesSamples {
                    labels: saltdb::labels::Labels::from_pairs(ts.labels.iter().map(|l| (&*l.name, &*l.value)))
                        .expect("labels"),
                    samples: ts.samples.iter().map(|p| saltdb::sample::Sample::new(p.timestamp, p.value)).collect(),
                    histograms: Vec::new(),
                })
                .collect();
            storage.write(saltdb::sample::WriteBatch { series }).expect("write");
        }
        storage.flush().expect("flush");
        println!("loaded {samples} samples in-process in {:.1}s", t.elapsed().as_secs_f64());
    }
    drop(requests);
    let engine = Engine::new(EngineOptions::default());
    for (q, metric) in QUERIES.iter().zip(["bench_requests_total", "bench_latency_seconds_bucket"]) {
        let m = [Matcher::equal("__name__", metric)];
        let mut sel = Vec::new();
        let mut all = Vec::new();
        for _ in 0..args.runs {
            let t = Instant::now();
            let n = storage.select(&m, start - 300_000, end, usize::MAX).expect("select").len();
            sel.push(t.elapsed().as_secs_f64());
            let t = Instant::now();
            let r = engine
                .range(&storage.querier(saltdb::storage::ReadLimits::none()), q, start, end, 60_000)
                .expect("query");
            all.push(t.elapsed().as_secs_f64());
            assert!(n > 0 && matches!(r.value, saltdb::promql::Value::Matrix(ref v) if !v.is_empty()));
        }
        println!(
            "{q:<80} select {:>8.1} ms  query {:>8.1} ms (median of {})",
            median(sel) * 1000.0,
            median(all) * 1000.0,
            args.runs
        );
    }
}

/// Runs the benchmark in `root`.
pub fn run(args: &QueryArgs, root: &Path) {
    if args.in_process {
        return in_process(args, root);
    }
    let (requests, samples, start, end) = build(args);
    let bodies: Vec<Vec<u8>> = requests.iter().map(saltdb::remote::snappy_body).collect();
    drop(requests);
    println!(
        "dataset: {} series, {samples} samples over {}h, {} remote-write requests",
        args.instances * (args.paths + LES.len()),
        args.hours,
        bodies.len()
    );
    // Maintenance every 2 s instead of every minute, so the history settles (is sealed) soon
    // after the load; see `wait_until_sealed`.
    let salt_flags = ["--retention", "0", "--maintenance-interval", "2s"];
    let salt = Server::spawn(&root.join("saltdb"), &salt_flags);
    let mut targets: Vec<(String, String)> = vec![("saltdb".into(), format!("http://{}", salt.addr))];
    let mut pids = vec![salt.pid()];
    let baseline =
        args.baseline_saltdb.as_ref().map(|bin| Server::spawn_bin(bin, &root.join("saltdb-baseline"), &salt_flags));
    if let Some(b) = &baseline {
        targets.push(("saltdb-baseline".into(), format!("http://{}", b.addr)));
        pids.push(b.pid());
    }
    let shards: Vec<Peer> = if args.clickhouse && crate::peers::installed("clickhouse-server") {
        (0..2).filter_map(|i| Peer::clickhouse(&root.join(format!("clickhouse-{i}")))).collect()
    } else {
        if args.clickhouse {
            println!("(clickhouse-server missing: apt-get install clickhouse-server)");
        }
        Vec::new()
    };
    let on_clickhouse = (shards.len() == 2).then(|| {
        let urls = shards.iter().map(|s| s.base.as_str()).collect::<Vec<_>>().join(",");
        let flags = ["--storage", "clickhouse", "--clickhouse-url", &urls, "--retention", "0"];
        Server::spawn(&root.join("saltdb-clickhouse"), &flags)
    });
    if let Some(s) = &on_clickhouse {
        targets.push(("saltdb-clickhouse".into(), format!("http://{}", s.addr)));
        pids.push(s.pid());
    }
    let vm = Peer::victoria_metrics(&root.join("vm"));
    let prom = Peer::prometheus(&root.join("prom"));
    for p in [&vm, &prom].into_iter().flatten() {
        targets.push((p.name.into(), p.base.clone()));
        pids.push(p.pid());
    }
    if vm.is_none() || prom.is_none() {
        println!("(peers missing: apt-get install prometheus victoria-metrics)");
    }
    for ((name, base), pid) in targets.iter().zip(&pids) {
        let shard_pids: Vec<String> =
            if name == "saltdb-clickhouse" { shards.iter().map(Peer::pid).collect() } else { Vec::new() };
        let (cpu_before, shards_before): (f64, f64) =
            (crate::cpu_seconds(pid), shard_pids.iter().map(|p| crate::cpu_seconds(p)).sum());
        let secs = load(name, base, &bodies);
        let cpu = crate::cpu_seconds(pid) - cpu_before;
        let shards_cpu: f64 = shard_pids.iter().map(|p| crate::cpu_seconds(p)).sum::<f64>() - shards_before;
        let per_m = |c: f64| c / samples as f64 * 1e6;
        if shard_pids.is_empty() {
            println!(
                "loaded {name} in {secs:.1}s ({:.0} samples/s; {:.2} cpu s per M samples)",
                samples as f64 / secs,
                per_m(cpu)
            );
        } else {
            println!(
                "loaded {name} in {secs:.1}s ({:.0} samples/s; cpu s per M samples: node {:.2}, shards {:.2})",
                samples as f64 / secs,
                per_m(cpu),
                per_m(shards_cpu)
            );
        }
    }
    if let Some(vm) = &vm {
        let _ = crate::http_client::get_status(&vm.base, "/internal/force_flush");
    }
    for (name, base) in targets.iter().filter(|(name, _)| name.starts_with("saltdb") && name != "saltdb-clickhouse") {
        // All but the last hour or so of the 24 h range is then read from sealed chunks, the
        // state of a server that has run for a while.
        crate::http_client::wait_until_sealed(name, base, 3_600_000, std::time::Duration::from_secs(120));
    }
    println!(
        "{:<80} {:<18} {:>10} {:>8} {:>8} {:>12} {:>8}",
        "query (range 24h, step 60s)", "target", "median ms", "series", "vs VM", "cpu ms/query", "vs VM"
    );
    for q in QUERIES.iter().copied().chain(args.queries.iter().map(String::as_str)) {
        // Runs interleave across targets so that background work (compactions, other builds on
        // the machine) weighs on every target alike rather than on whichever runs first.
        for (_, base) in &targets {
            let _ = query(base, q, start, end);
        }
        let mut runs: Vec<Vec<(f64, usize)>> = vec![Vec::new(); targets.len()];
        // CPU seconds each server spent on the timed queries (it is idle in between).
        let mut cpu = vec![0.0; targets.len()];
        for _ in 0..args.runs {
            for (((_, base), r), (pid, c)) in targets.iter().zip(runs.iter_mut()).zip(pids.iter().zip(cpu.iter_mut())) {
                let before = crate::cpu_seconds(pid);
                r.push(query(base, q, start, end));
                *c += crate::cpu_seconds(pid) - before;
            }
        }
        let medians: Vec<f64> = runs.iter().map(|r| median(r.iter().map(|x| x.0).collect())).collect();
        let vm_at = targets.iter().position(|t| t.0 == "victoria-metrics");
        let vs_vm = |all: &[f64], v: f64| match vm_at.and_then(|i| all.get(i)) {
            Some(&vm) if vm > 0.0 => format!("{:.2}x", v / vm),
            _ => "-".to_owned(),
        };
        for (i, ((name, _), r)) in targets.iter().zip(&runs).enumerate() {
            let n = r.first().map_or(0, |x| x.1);
            let (m, c) = (medians.get(i).copied().unwrap_or(0.0), cpu.get(i).copied().unwrap_or(0.0));
            let per_query = c / args.runs.max(1) as f64;
            println!(
                "{q:<80} {name:<18} {:>10.1} {n:>8} {:>8} {:>12.0} {:>8}",
                m * 1000.0,
                vs_vm(&medians, m),
                per_query * 1000.0,
                vs_vm(&cpu, c)
            );
        }
    }
    let mut rss = vec![("saltdb".to_owned(), crate::peak_rss(&salt.pid()))];
    if let Some(b) = baseline {
        rss.push(("saltdb-baseline".to_owned(), crate::peak_rss(&b.pid())));
        b.stop();
    }
    for p in [&vm, &prom].into_iter().flatten() {
        rss.push((p.name.to_owned(), crate::peak_rss(&p.pid())));
    }
    for s in &shards {
        rss.push((format!("clickhouse shard {}", s.base), crate::peak_rss(&s.pid())));
    }
    for (name, bytes) in rss {
        println!("peak RSS {name}: {:.1} MiB", bytes as f64 / (1 << 20) as f64);
    }
    if let Some(s) = on_clickhouse {
        s.stop();
        // Merged as they settle; bytes as `du` sees both shards' data directories.
        let du: u64 = (0..2)
            .map(|i| saltdb::storage::du_bytes(&root.join(format!("clickhouse-{i}")).join("data")).unwrap_or(0))
            .sum();
        let salt_du = saltdb::storage::du_bytes(&root.join("saltdb")).unwrap_or(0);
        println!(
            "on disk: saltdb {:.2} B/sample, ClickHouse shards {:.2} B/sample ({} samples)",
            salt_du as f64 / samples as f64,
            du as f64 / samples as f64,
            samples
        );
    }
    salt.stop();
}
