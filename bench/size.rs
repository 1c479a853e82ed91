//! `saltdb-bench size`: bytes on disk per sample for one node-exporter-like dataset in saltdb
//! (sealed, index included), Prometheus 2.42 (snapshot block) and VictoriaMetrics 1.79 (after a
//! forced merge), and `query_range` latency over the same data hot and sealed in saltdb.

use std::path::Path;
use std::time::{Duration, Instant};

use saltdb::matcher::{MatchOp, Matcher};
use saltdb::promql::{Engine, EngineOptions};
use saltdb::sample::{Sample, WriteBatch};
use saltdb::storage::format::chunk;
use saltdb::storage::format::chunk::{CHUNK_SAMPLES, ZSTD_LEVEL};
use saltdb::storage::{Storage, StorageConfig};

use crate::http_client::{Conn, REMOTE_WRITE_HEADERS};
use crate::peers::Peer;
use crate::workload::Workload;

/// Options of the size benchmark.
#[derive(Debug, clap::Args)]
pub struct SizeArgs {
    /// Hosts (about 500 series each).
    #[arg(long, default_value_t = 5)]
    hosts: usize,
    /// Hours of data at a 15 s interval.
    #[arg(long, default_value_t = 24.0)]
    hours: f64,
    /// Skip the peers (saltdb only).
    #[arg(long)]
    no_peers: bool,
    /// Only the codec: where the chunk bytes go (timestamps, values, framing) per metric, and
    /// decode throughput; no database, no peers.
    #[arg(long)]
    breakdown: bool,
    /// Also the ClickHouse backend (two local `clickhouse-server` shards): bytes per sample of
    /// the merged `samples` table (ClickHouse's own compression), then of the `chunks` table
    /// once the days are sealed (saltdb's codec).
    #[arg(long)]
    clickhouse: bool,
    /// Only the tiers: bytes of 5-minute and 1-hour tier points against the raw chunks of the
    /// same series (see `tier_size.rs`); no database, no peers.
    #[arg(long)]
    tiers: bool,
    /// Native histograms instead (see `histogram_size.rs`): saltdb's sealed histogram chunks
    /// against Prometheus 2.42 with `--enable-feature=native-histograms`, same series.
    #[arg(long)]
    histograms: bool,
    /// Histogram series for `--histograms`.
    #[arg(long, default_value_t = 200)]
    histogram_series: usize,
    /// Observations added to each histogram per scrape for `--histograms`.
    #[arg(long, default_value_t = 100)]
    observations: usize,
}

fn batches(args: &SizeArgs) -> (Vec<WriteBatch>, usize, i64, i64) {
    let mut w = Workload::new(args.hosts);
    let series = w.series_count();
    let scrapes = (args.hours * 240.0) as usize;
    let now = chrono::Utc::now().timestamp_millis();
    // End the data at the start of today (UTC) so every window is closed and can be sealed.
    let end = now - now % 86_400_000;
    let t0 = end - scrapes as i64 * 15_000;
    let mut out = Vec::new();
    let mut k = 0;
    while k < scrapes {
        let n = 10.min(scrapes - k);
        out.push(w.batch(0..series, t0 + k as i64 * 15_000, n));
        k += n;
    }
    let samples = out.iter().map(WriteBatch::sample_count).sum();
    (out, samples, t0, end)
}

fn time_query(storage: &Storage, q: &str, start: i64, end: i64) -> f64 {
    let engine = Engine::new(EngineOptions::default());
    let mut runs = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        engine.range(&storage.querier(saltdb::storage::ReadLimits::none()), q, start, end, 60_000).expect("query");
        runs.push(t.elapsed().as_secs_f64());
    }
    runs.sort_by(f64::total_cmp);
    runs[runs.len() / 2]
}

fn saltdb(args: &SizeArgs, data: &[WriteBatch], samples: usize, start: i64, end: i64, root: &Path) {
    let mut config = StorageConfig::new(root.join("saltdb"));
    config.retention_ms = None;
    let storage = Storage::open(config).expect("open");
    for b in data {
        storage.write(b.clone()).expect("write");
    }
    storage.flush().expect("flush");
    let hot = storage.stats().expect("stats");
    let q = "sum by (instance) (rate(node_cpu_seconds_total[5m]))";
    let hot_q = time_query(&storage, q, start + 600_000, end - 1);
    let t = Instant::now();
    let sealed = storage.seal_due(end + 1, 0).expect("seal");
    let seal_secs = t.elapsed().as_secs_f64();
    storage.flush().expect("flush");
    // What the server's maintenance pass does: compact away the flushed write-ahead log.
    storage.compact_wal().expect("compact the write-ahead log");
    let cold = storage.stats().expect("stats");
    let cold_q = time_query(&storage, q, start + 600_000, end - 1);
    let check = storage
        .select(&[Matcher::new(MatchOp::RegexMatch, "__name__", ".+").expect("matcher")], 0, end, usize::MAX)
        .expect("select");
    let read_back: usize = check.iter().map(|s| s.samples.len()).sum();
    assert_eq!(read_back, samples, "sealed data reads back every sample");
    let total = |s: &saltdb::storage::StorageStats| s.table_bytes.iter().map(|(_, b)| b).sum::<u64>();
    let chunks = cold.table_bytes.iter().find(|(n, _)| *n == "chunks").map_or(0, |(_, b)| *b);
    println!("saltdb: {} hosts, {samples} samples, {} windows sealed in {seal_secs:.1}s", args.hosts, sealed.len());
    println!("  hot   : {:.2} B/sample (all tables)", total(&hot) as f64 / samples as f64);
    println!(
        "  sealed: {:.3} B/sample (all tables, index included); chunks alone {:.3}",
        total(&cold) as f64 / samples as f64,
        chunks as f64 / samples as f64
    );
    for (name, bytes) in &cold.table_bytes {
        println!("    {name:<18} {bytes:>12} bytes");
    }
    println!(
        "  query_range 24h step 60s `{q}`: hot {:.1} ms, sealed {:.1} ms (median of 5)",
        hot_q * 1000.0,
        cold_q * 1000.0
    );
    drop(storage);
    // The whole data directory after a clean close, as `du` counts it (allocated blocks): the
    // close flushed every memtable, cleared the write-ahead log and emptied the journal.
    let all = dir_bytes(&root.join("saltdb"));
    println!("  data directory after a clean close (du): {:.3} B/sample ({all} bytes)", all as f64 / samples as f64);
}

/// Bytes of the chunks `seal` would write for `samples`, and how many chunks.
fn encoded(samples: &[Sample], out: &mut Vec<Vec<u8>>) -> usize {
    let mut total = 0;
    for run in samples.chunks(CHUNK_SAMPLES) {
        let mut buf = Vec::new();
        chunk::encode(run, ZSTD_LEVEL, &mut buf).expect("encode");
        total += buf.len();
        out.push(buf);
    }
    total
}

/// Where the chunk bytes go, estimated codec-agnostically: the timestamps' share is what a
/// copy with every value replaced by 0 costs beyond a copy with exact 15 s timestamps and zeros
/// (the framing floor); the values' share likewise with exact timestamps and the real values.
/// Then decode throughput over every chunk.
fn breakdown(data: &[WriteBatch], samples: usize) {
    let series = data.first().map_or(0, |b| b.series.len());
    let mut per_name: std::collections::BTreeMap<String, [usize; 5]> = Default::default();
    let mut chunks = Vec::new();
    let mut scratch = Vec::new();
    let mut encode_secs = 0.0;
    for i in 0..series {
        let s: Vec<Sample> = data.iter().filter_map(|b| b.series.get(i)).flat_map(|s| s.samples.clone()).collect();
        let name = data[0].series[i].labels.metric_name().unwrap_or("").to_owned();
        let t0 = s.first().map_or(0, |p| p.timestamp_ms);
        let grid = |k: usize| t0 + k as i64 * 15_000;
        let ts_only: Vec<Sample> = s.iter().map(|p| Sample::new(p.timestamp_ms, 0.0)).collect();
        let values_only: Vec<Sample> = s.iter().enumerate().map(|(k, p)| Sample::new(grid(k), p.value)).collect();
        let floor: Vec<Sample> = (0..s.len()).map(|k| Sample::new(grid(k), 0.0)).collect();
        let e = per_name.entry(name).or_default();
        e[0] += s.len();
        let t = Instant::now();
        e[1] += encoded(&s, &mut chunks);
        encode_secs += t.elapsed().as_secs_f64();
        e[2] += encoded(&ts_only, &mut scratch);
        e[3] += encoded(&values_only, &mut scratch);
        e[4] += encoded(&floor, &mut scratch);
        scratch.clear();
    }
    let mut sum = [0usize; 5];
    println!(
        "codec breakdown ({} chunks of up to {CHUNK_SAMPLES} samples, level {ZSTD_LEVEL}), B/sample:",
        chunks.len()
    );
    println!("  {:<40} {:>9} {:>7} {:>7} {:>7} {:>7}", "metric", "samples", "total", "ts", "values", "frame");
    for (name, e) in &per_name {
        let b = |x: usize| x as f64 / e[0] as f64;
        let (ts, values) = (e[2].saturating_sub(e[4]), e[3].saturating_sub(e[4]));
        println!("  {name:<40} {:>9} {:>7.3} {:>7.3} {:>7.3} {:>7.3}", e[0], b(e[1]), b(ts), b(values), b(e[4]));
        for (a, x) in sum.iter_mut().zip(e) {
            *a += x;
        }
    }
    let b = |x: usize| x as f64 / samples as f64;
    let (ts, values) = (sum[2].saturating_sub(sum[4]), sum[3].saturating_sub(sum[4]));
    println!("  {:<40} {:>9} {:>7.3} {:>7.3} {:>7.3} {:>7.3}", "all", sum[0], b(sum[1]), b(ts), b(values), b(sum[4]));
    println!("  encode: {:.1} M samples/s ({encode_secs:.1} s for every chunk)", samples as f64 / encode_secs / 1e6);
    let mut out = Vec::with_capacity(CHUNK_SAMPLES);
    let mut runs = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        let mut n = 0;
        for c in &chunks {
            out.clear();
            chunk::decode(c, &mut out).expect("decode");
            n += out.len();
        }
        runs.push(n as f64 / t.elapsed().as_secs_f64());
    }
    runs.sort_by(f64::total_cmp);
    println!("  decode: {:.0} M samples/s (median of 5 passes over every chunk)", runs[2] / 1e6);
}

fn dir_bytes(dir: &Path) -> u64 {
    crate::dir_bytes(dir)
}

fn victoria_metrics(data: &[WriteBatch], samples: usize, root: &Path) -> Option<f64> {
    let dir = root.join("vm");
    let vm = Peer::victoria_metrics(&dir)?;
    let addr = vm.base.trim_start_matches("http://").parse().ok()?;
    let mut conn = Conn::connect(addr);
    for b in data {
        let body: Vec<u8> = b.series.iter().flat_map(saltdb::http::export::encode_line).collect();
        let (status, _) = conn.request("POST", "/api/v1/import", &[], &body);
        assert_eq!(status, 204, "vm import");
    }
    let _ = conn.request("GET", "/internal/force_flush", &[], &[]);
    let _ = conn.request("GET", "/internal/force_merge", &[], &[]);
    // The merge runs in the background: wait until the size stops changing.
    let mut last = 0;
    for _ in 0..60 {
        std::thread::sleep(Duration::from_secs(2));
        let now = dir_bytes(&dir);
        if now == last {
            break;
        }
        last = now;
    }
    let bytes = dir_bytes(&dir);
    println!(
        "victoria-metrics: {:.3} B/sample ({bytes} bytes, data directory after force_merge)",
        bytes as f64 / samples as f64
    );
    Some(bytes as f64 / samples as f64)
}

fn prometheus(data: &[WriteBatch], samples: usize, root: &Path) -> Option<f64> {
    let dir = root.join("prom");
    let prom = Peer::prometheus(&dir)?;
    let addr = prom.base.trim_start_matches("http://").parse().ok()?;
    let mut conn = Conn::connect(addr);
    for b in data {
        let req = saltdb::remote::proto::WriteRequest {
            timeseries: b
                .series
                .iter()
                .map(|s| saltdb::remote::proto::TimeSeries {
                    labels: saltdb::remote::read::proto_labels(&s.labels),
                    samples: s
                        .samples
                        .iter()
                        .map(|p| saltdb::remote::proto::Sample { value: p.value, timestamp: p.timestamp_ms })
                        .collect(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        };
        let (status, body) =
            conn.request("POST", "/api/v1/write", &REMOTE_WRITE_HEADERS, &saltdb::remote::snappy_body(&req));
        assert!(status / 100 == 2, "prometheus write {status}: {}", String::from_utf8_lossy(&body));
    }
    let (status, body) = conn.request("POST", "/api/v1/admin/tsdb/snapshot", &[], &[]);
    assert_eq!(status, 200, "snapshot: {}", String::from_utf8_lossy(&body));
    let v: serde_json::Value = serde_json::from_slice(&body).ok()?;
    let name = v["data"]["name"].as_str()?;
    let bytes = dir_bytes(&dir.join("data").join("snapshots").join(name));
    println!("prometheus: {:.3} B/sample ({bytes} bytes, snapshot blocks)", bytes as f64 / samples as f64);
    Some(bytes as f64 / samples as f64)
}

/// Runs the benchmark in `root`.
pub fn run(args: &SizeArgs, root: &Path) {
    if args.histograms {
        crate::histogram_size::run(args.histogram_series, args.hours, args.observations, args.no_peers, root);
        return;
    }
    let (data, samples, start, end) = batches(args);
    println!(
        "dataset: {} series, {samples} samples, {} h at 15 s",
        data.first().map_or(0, |b| b.series.len()),
        args.hours
    );
    if args.breakdown {
        breakdown(&data, samples);
        return;
    }
    if args.tiers {
        crate::tier_size::run(&data, samples);
        return;
    }
    saltdb(args, &data, samples, start, end, root);
    breakdown(&data, samples);
    if args.clickhouse {
        clickhouse(&data, samples, root);
    }
    if !args.no_peers {
        victoria_metrics(&data, samples, root);
        prometheus(&data, samples, root);
    }
}

/// Bytes per sample on a two-shard ClickHouse cluster, before and after sealing.
fn clickhouse(data: &[WriteBatch], samples: usize, root: &Path) {
    use saltdb::clickhouse::{ClickHouse, ClickHouseConfig};
    let shards: Vec<Peer> = (0..2).filter_map(|i| Peer::clickhouse(&root.join(format!("clickhouse-{i}")))).collect();
    if shards.len() != 2 {
        println!("clickhouse: clickhouse-server is missing or did not start (apt-get install clickhouse-server)");
        return;
    }
    let http = |base: &str, sql: &str| -> String {
        ureq::post(&format!("{base}/"))
            .send(sql)
            .ok()
            .and_then(|mut r| r.body_mut().read_to_string().ok())
            .unwrap_or_default()
    };
    let store = match ClickHouse::open(ClickHouseConfig::new(shards.iter().map(|s| s.base.clone()).collect())) {
        Ok(s) => s,
        Err(e) => {
            println!("clickhouse: {e}");
            return;
        }
    };
    let t = Instant::now();
    for b in data {
        if let Err(e) = store.write(&saltdb::sample::PackedBatch::from(b)) {
            println!("clickhouse: write failed: {e}");
            return;
        }
    }
    let load = t.elapsed().as_secs_f64();
    // Bytes of a table's active parts on both shards, after merging it into one part per partition.
    let table_bytes = |table: &str| -> u64 {
        shards
            .iter()
            .map(|s| {
                http(&s.base, &format!("OPTIMIZE TABLE saltdb.{table} FINAL"));
                let sql = format!(
                    "SELECT sum(bytes_on_disk) FROM system.parts WHERE database = 'saltdb' AND table = '{table}' AND active"
                );
                http(&s.base, &sql).trim().parse::<u64>().unwrap_or(0)
            })
            .sum()
    };
    // Once replaced parts are gone (the shards keep them 5 s, see `Peer::clickhouse`).
    let du = || -> u64 {
        std::thread::sleep(Duration::from_secs(8));
        (0..2).map(|i| saltdb::storage::du_bytes(&root.join(format!("clickhouse-{i}")).join("data")).unwrap_or(0)).sum()
    };
    let per = |b: u64| b as f64 / samples as f64;
    let before = table_bytes("samples");
    let du_before = du();
    let t = Instant::now();
    let sealed = store.seal_closed_days(chrono::Utc::now().timestamp_millis() + 600_000);
    let seal_secs = t.elapsed().as_secs_f64();
    let after = table_bytes("chunks");
    let left = table_bytes("samples");
    let du_after = du();
    println!(
        "clickhouse (2 shards): load {load:.1} s ({:.0} samples/s); samples table merged {:.2} B/sample, \
         data directories {:.2} B/sample",
        samples as f64 / load,
        per(before),
        per(du_before)
    );
    let tables = shards
        .iter()
        .map(|s| {
            let sql = "SELECT database, table, sum(bytes_on_disk), count() FROM system.parts WHERE active \
                       GROUP BY database, table ORDER BY database, table FORMAT TSV";
            http(&s.base, sql).trim().replace('\n', "; ").replace('\t', " ")
        })
        .collect::<Vec<_>>();
    println!("clickhouse parts per table (database, table, bytes, active parts), per shard: {tables:?}");
    println!(
        "clickhouse sealed in {seal_secs:.1} s ({sealed:?}): chunks table {:.2} B/sample ({:.1}x smaller), \
         samples table left {left} B, data directories {:.2} B/sample",
        per(after),
        before as f64 / after.max(1) as f64,
        per(du_after)
    );
}
