//! `saltdb-bench scan`: how fast long-range queries read sealed data, in-process (no HTTP), on
//! the 30-day dashboard set (10 metrics x `--hosts` hosts, 30 days at 60 s, every window
//! sealed): per query its time, the samples it read and samples read per second per core,
//! against a plain decode loop of saltdb's own chunk format over the same series (the limit a
//! scan could reach). For profiling: `--data DIR` keeps the loaded directory and reuses it.

use std::path::PathBuf;
use std::time::Instant;

use saltdb::labels::Labels;
use saltdb::promql::{Engine, EngineOptions, SourceResolution};
use saltdb::sample::{Sample, SeriesSamples, WriteBatch};
use saltdb::storage::format::chunk::{self, CHUNK_SAMPLES, ZSTD_LEVEL};
use saltdb::storage::{ReadLimits, Storage, StorageConfig};

/// Options of the scan benchmark.
#[derive(Debug, clap::Args)]
pub struct ScanArgs {
    /// Hosts (10 series each: counters c0..c4, gauges g0..g4).
    #[arg(long, default_value_t = 200)]
    hosts: usize,
    /// Days of data.
    #[arg(long, default_value_t = 30)]
    days: i64,
    /// Seconds between samples.
    #[arg(long, default_value_t = 60)]
    interval: i64,
    /// Data directory to load into, or to reuse when it holds a loaded set already (kept).
    #[arg(long)]
    data: Option<PathBuf>,
    /// Timed calls per query (the median is reported).
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Only this query (default: the dashboard's seven).
    #[arg(long)]
    query: Option<String>,
    /// The query set when no --query is given: `month` (the 30-day dashboard's seven) or
    /// `year` (six panels at steps of 1d and 6h, as `longrange --queries year`).
    #[arg(long, default_value = "month")]
    queries: String,
    /// Tier intervals seals build (as `saltdb serve --downsample`, e.g. `1h` or `5m,1h`); the
    /// queries then read them where they may (`max_source_resolution=auto`).
    #[arg(long, value_delimiter = ',', value_parser = saltdb::duration::parse_ms)]
    downsample: Vec<i64>,
    /// Read raw samples only (`max_source_resolution=raw`), for comparing with the tiers.
    #[arg(long)]
    raw: bool,
}

const REGIONS: [&str; 3] = ["eu", "us", "ap"];

/// The labels of every series: `c0..c4` counters, `g0..g4` gauges, per host.
pub fn series_labels(hosts: usize) -> Vec<Labels> {
    let mut out = Vec::new();
    for m in 0..10 {
        let name = if m < 5 { format!("c{m}") } else { format!("g{}", m - 5) };
        for h in 0..hosts {
            let pairs = [
                ("__name__", name.clone()),
                ("job", "rwgen".to_string()),
                ("host", format!("host-{h:04}")),
                ("region", REGIONS[h % REGIONS.len()].to_string()),
            ];
            out.extend(Labels::from_pairs(pairs));
        }
    }
    out
}

/// Value of series `i` (of `hosts * 10`) at sample `k`: counters grow by a pseudo-random
/// amount (with a reset every ~9 days), gauges wander.
pub fn value(i: usize, k: i64, hosts: usize) -> f64 {
    let x = (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (k as u64).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    let noise = (x >> 40) as f64 / (1u64 << 24) as f64;
    if i < 5 * hosts {
        let since_reset = k % 13_000;
        (since_reset as f64 * 10.0 + (noise * 10.0).floor()).floor()
    } else {
        (50.0 + 40.0 * ((k as f64 / 500.0) + i as f64).sin() + noise).round()
    }
}

fn load(args: &ScanArgs, dir: &std::path::Path, end: i64) -> (Storage, usize) {
    let mut config = StorageConfig::new(dir.to_path_buf());
    config.retention_ms = None;
    config.tier_intervals_ms.clone_from(&args.downsample);
    let storage = Storage::open(config).expect("open");
    let labels = series_labels(args.hosts);
    let step = args.interval * 1000;
    let samples_per_series = args.days * 86_400_000 / step;
    let t0 = end - samples_per_series * step;
    let stats = storage.stats().expect("stats");
    let loaded = stats.table_bytes.iter().map(|(_, b)| *b).sum::<u64>() > 0;
    let total = labels.len() * samples_per_series as usize;
    if loaded {
        println!("reusing {} ({total} samples)", dir.display());
        return (storage, total);
    }
    let began = Instant::now();
    // Two hours of samples per series per batch, in time order.
    let per_batch = (7_200_000 / step).max(1);
    let mut k = 0;
    while k < samples_per_series {
        let n = per_batch.min(samples_per_series - k);
        let series = labels
            .iter()
            .enumerate()
            .map(|(i, l)| SeriesSamples {
                labels: l.clone(),
                samples: (k..k + n).map(|j| Sample::new(t0 + j * step, value(i, j, args.hosts))).collect(),
                histograms: Vec::new(),
            })
            .collect();
        storage.write(WriteBatch { series }).expect("write");
        k += n;
    }
    storage.flush().expect("flush");
    let wrote = began.elapsed().as_secs_f64();
    let sealed = storage.seal_due(end + 1, 0).expect("seal");
    storage.flush().expect("flush");
    storage.compact_wal().expect("compact the write-ahead log");
    println!(
        "loaded {total} samples in {wrote:.1} s, sealed {} windows in {:.1} s",
        sealed.len(),
        began.elapsed().as_secs_f64() - wrote
    );
    (storage, total)
}

/// Samples per second one core decodes from saltdb's chunks, for one series of each kind.
fn decode_limit(args: &ScanArgs) -> f64 {
    let step = args.interval * 1000;
    let n = args.days * 86_400_000 / step;
    let mut chunks = Vec::new();
    for i in [0, 5 * args.hosts] {
        let samples: Vec<Sample> = (0..n).map(|k| Sample::new(k * step, value(i, k, args.hosts))).collect();
        for run in samples.chunks(CHUNK_SAMPLES) {
            let mut buf = Vec::new();
            chunk::encode(run, ZSTD_LEVEL, &mut buf).expect("encode");
            chunks.push(buf);
        }
    }
    let mut out = Vec::with_capacity(CHUNK_SAMPLES);
    let mut best = 0.0f64;
    for _ in 0..5 {
        let t = Instant::now();
        let mut decoded = 0;
        for c in &chunks {
            out.clear();
            chunk::decode(c, &mut out).expect("decode");
            decoded += out.len();
        }
        best = best.max(decoded as f64 / t.elapsed().as_secs_f64());
    }
    best
}

/// Runs the benchmark.
pub fn run(args: &ScanArgs) {
    let now = chrono::Utc::now().timestamp_millis();
    // The data ends at the start of today (UTC), so every window is closed and sealed.
    let end = now - now % 86_400_000;
    let scratch = std::env::temp_dir().join(format!("saltdb-bench-scan-{}", std::process::id()));
    let dir = args.data.clone().unwrap_or_else(|| scratch.clone());
    let (storage, total) = load(args, &dir, end);
    let start = end - args.days * 86_400_000;
    let cores = saltdb::cores::available();
    let limit = decode_limit(args);
    println!("{total} samples, {cores} cores; plain chunk decode: {:.1} M samples/s per core", limit / 1e6);
    println!("{:<42} {:>9} {:>9} {:>12} {:>16}", "query (step)", "first ms", "median ms", "read", "M samples/s/core");
    let source_resolution = if args.raw { SourceResolution::Raw } else { SourceResolution::Auto };
    let engine = Engine::new(EngineOptions {
        max_samples: usize::MAX,
        max_scanned_samples: usize::MAX,
        source_resolution,
        ..EngineOptions::default()
    });
    let set: &[(&str, i64)] = match args.queries.as_str() {
        "year" => &crate::longrange::queries::YEAR_QUERIES,
        _ => &crate::longrange::queries::QUERIES,
    };
    let queries: Vec<(String, i64)> = match &args.query {
        Some(q) => vec![(q.clone(), set.first().map_or(3_600, |(_, s)| *s))],
        None => set.iter().map(|(q, s)| ((*q).to_string(), *s)).collect(),
    };
    for (q, step_s) in &queries {
        let step = step_s * 1000;
        let mut times = Vec::new();
        let mut read = 0;
        for _ in 0..args.runs.max(1) {
            let t = Instant::now();
            let r = engine.range(&storage.querier(ReadLimits::none()), q, start + step, end, step);
            times.push(t.elapsed().as_secs_f64() * 1000.0);
            match r {
                Ok(r) => read = r.loaded_samples,
                Err(e) => println!("{q}: {e}"),
            }
        }
        let first = times[0];
        times.sort_by(f64::total_cmp);
        let median = times[times.len() / 2];
        let per_core = read as f64 / (median / 1000.0) / cores as f64 / 1e6;
        println!("{:<42} {first:>9.1} {median:>9.1} {read:>12} {per_core:>16.1}", format!("{q} ({step_s}s)"));
    }
    drop(storage);
    let _ = std::fs::remove_dir_all(&scratch);
}
