//! `saltdb-bench size --histograms`: bytes on disk per native histogram sample in saltdb
//! (sealed histogram chunks, and the whole data directory) and in Prometheus 2.42 with native
//! histograms enabled (snapshot blocks), for the same series remote-written in time order.
//!
//! The data: request-latency histograms as client libraries expose them (exponential schema 3,
//! integer counts, a zero bucket), one per series, scraped every 15 s: each scrape adds about
//! `--observations` log-normally distributed latencies, so buckets grow at different rates and
//! the populated span widens and narrows over time.

use std::path::Path;
use std::sync::Arc;

use saltdb::labels::Labels;
use saltdb::matcher::{MatchOp, Matcher};
use saltdb::sample::{HistogramSample, SeriesSamples, WriteBatch};
use saltdb::storage::{Storage, StorageConfig};

use crate::http_client::{Conn, REMOTE_WRITE_HEADERS};
use crate::latencies::Latencies;
use crate::peers::Peer;

/// Batches of `series` histogram series, `scrapes` scrapes 15 s apart ending at the start of
/// today (UTC), in time order; and the number of histogram samples.
fn dataset(series: usize, scrapes: usize, observations: usize) -> (Vec<WriteBatch>, usize, i64) {
    let now = chrono::Utc::now().timestamp_millis();
    let end = now - now % 86_400_000;
    let t0 = end - scrapes as i64 * 15_000;
    let labels: Vec<Labels> = (0..series)
        .map(|i| {
            Labels::from_pairs([
                ("__name__", "http_request_duration_seconds"),
                ("instance", &format!("host-{:04}:8080", i / 4)),
                ("handler", &format!("/api/v{}", i % 4)),
            ])
            .expect("labels")
        })
        .collect();
    let mut state: Vec<Latencies> = (0..series).map(|i| Latencies::new(i as u64 + 1)).collect();
    let mut out = Vec::new();
    let per_batch = 20;
    let mut k = 0;
    while k < scrapes {
        let n = per_batch.min(scrapes - k);
        let mut batch = WriteBatch::default();
        for (l, s) in labels.iter().zip(state.iter_mut()) {
            let histograms = (0..n)
                .map(|j| {
                    s.observe(observations);
                    HistogramSample { timestamp_ms: t0 + (k + j) as i64 * 15_000, histogram: Arc::new(s.histogram()) }
                })
                .collect();
            batch.series.push(SeriesSamples { labels: l.clone(), samples: Vec::new(), histograms });
        }
        out.push(batch);
        k += n;
    }
    (out, series * scrapes, end)
}

fn saltdb(data: &[WriteBatch], samples: usize, end: i64, root: &Path) -> f64 {
    let dir = root.join("saltdb-histograms");
    let mut config = StorageConfig::new(dir.clone());
    config.retention_ms = None;
    let storage = Storage::open(config).expect("open");
    for b in data {
        storage.write(b.clone()).expect("write");
    }
    storage.flush().expect("flush");
    let sealed = storage.seal_due(end + 1, 0).expect("seal");
    storage.flush().expect("flush");
    storage.compact_wal().expect("compact the write-ahead log");
    let stats = storage.stats().expect("stats");
    let all = storage
        .select(&[Matcher::new(MatchOp::RegexMatch, "__name__", ".+").expect("matcher")], 0, end, usize::MAX)
        .expect("select");
    let read_back: usize = all.iter().map(|s| s.histograms.len()).sum();
    assert_eq!(read_back, samples, "sealed histograms read back");
    let chunks = stats.table_bytes.iter().find(|(n, _)| *n == "chunks").map_or(0, |(_, b)| *b);
    let tables: u64 = stats.table_bytes.iter().map(|(_, b)| b).sum();
    drop(storage);
    let du = crate::dir_bytes(&dir);
    println!(
        "saltdb: {} windows sealed; chunks {:.2} B/histogram, all tables {:.2}, data directory after a clean close (du) {:.2} ({du} bytes)",
        sealed.len(),
        chunks as f64 / samples as f64,
        tables as f64 / samples as f64,
        du as f64 / samples as f64,
    );
    du as f64 / samples as f64
}

fn prometheus(data: &[WriteBatch], samples: usize, root: &Path) -> Option<f64> {
    let dir = root.join("prom-histograms");
    let Some(prom) = Peer::prometheus_with(&dir, &["--enable-feature=native-histograms"]) else {
        println!("prometheus: not installed (apt-get install prometheus), skipped");
        return None;
    };
    let addr = prom.base.trim_start_matches("http://").parse().ok()?;
    let mut conn = Conn::connect(addr);
    for b in data {
        let req = saltdb::remote::proto::WriteRequest {
            timeseries: b
                .series
                .iter()
                .map(|s| saltdb::remote::proto::TimeSeries {
                    labels: saltdb::remote::read::proto_labels(&s.labels),
                    histograms: s
                        .histograms
                        .iter()
                        .map(|h| saltdb::remote::histogram::to_proto(h.timestamp_ms, &h.histogram))
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
    let snapshot = dir.join("data").join("snapshots").join(name);
    let bytes = crate::dir_bytes(&snapshot);
    // The chunk files alone, for the codec comparison.
    let mut chunk_bytes = 0;
    for block in std::fs::read_dir(&snapshot).ok()?.flatten() {
        chunk_bytes += crate::dir_bytes(&block.path().join("chunks"));
    }
    println!(
        "prometheus: chunks {:.2} B/histogram, snapshot blocks {:.2} ({bytes} bytes)",
        chunk_bytes as f64 / samples as f64,
        bytes as f64 / samples as f64
    );
    Some(bytes as f64 / samples as f64)
}

/// Runs the histogram size benchmark in `root`.
pub fn run(series: usize, hours: f64, observations: usize, no_peers: bool, root: &Path) {
    let scrapes = (hours * 240.0) as usize;
    let (data, samples, end) = dataset(series, scrapes, observations);
    println!(
        "dataset: {series} native histogram series (schema 3, integer counts), {samples} histogram samples, {hours} h at 15 s, ~{observations} observations a scrape"
    );
    let salt = saltdb(&data, samples, end, root);
    if !no_peers {
        if let Some(prom) = prometheus(&data, samples, root) {
            println!("saltdb/prometheus (whole directories): {:.2}x", salt / prom);
        }
    }
}
