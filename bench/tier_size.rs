//! `saltdb-bench size --tiers`: what downsampled tiers would take beside the raw chunks, for
//! the same node-exporter-like series: every series' samples cut into days (saltdb's windows),
//! each day sealed into chunks as `seal` writes them, and aggregated into 5-minute points and
//! 1-hour points (the latter merged from the former, not from raw), each tier's points of a
//! series and day encoded as one tier run; then decode throughput of each, and how many raw
//! samples per second a tier's points stand for. No database: the codecs only, as
//! `--breakdown`.

use std::time::Instant;

use saltdb::sample::{Sample, WriteBatch};
use saltdb::storage::format::chunk::{self, CHUNK_SAMPLES, ZSTD_LEVEL};
use saltdb::storage::format::tier_run;
use saltdb::tier::{coarser, points_of, FloatPoint};

const DAY: i64 = 86_400_000;
const FIVE_MINUTES: i64 = 300_000;
const HOUR: i64 = 3_600_000;

/// Bytes of the tier run of `points`, the run kept in `runs`.
fn run_bytes(interval: i64, points: &[(i64, FloatPoint)], runs: &mut Vec<Vec<u8>>) -> usize {
    if points.is_empty() {
        return 0;
    }
    let mut buf = Vec::new();
    tier_run::encode(interval, points, &mut buf).expect("encode tier run");
    let n = buf.len();
    runs.push(buf);
    n
}

/// Median of 5 passes decoding every run with `decode`, which returns the items it decoded:
/// items per second.
fn decode_rate<T>(runs: &[T], mut decode: impl FnMut(&T) -> usize) -> f64 {
    let mut rates: Vec<f64> = (0..5)
        .map(|_| {
            let t = Instant::now();
            let n: usize = runs.iter().map(&mut decode).sum();
            n as f64 / t.elapsed().as_secs_f64()
        })
        .collect();
    rates.sort_by(f64::total_cmp);
    rates[2]
}

/// Prints raw and tier bytes for `data`'s series.
pub fn run(data: &[WriteBatch], samples: usize) {
    let series = data.first().map_or(0, |b| b.series.len());
    let (mut raw_bytes, mut bytes5, mut bytes1h, mut points5, mut points1h) = (0usize, 0usize, 0usize, 0usize, 0usize);
    let mut build_secs = 0.0;
    let (mut chunks, mut runs5, mut runs1h) = (Vec::new(), Vec::new(), Vec::new());
    // Per metric name: samples, raw bytes, 5m bytes, 1h bytes.
    let mut per_name: std::collections::BTreeMap<String, [usize; 4]> = Default::default();
    for i in 0..series {
        let s: Vec<Sample> = data.iter().filter_map(|b| b.series.get(i)).flat_map(|s| s.samples.clone()).collect();
        let name =
            data.first().and_then(|b| b.series.get(i)).and_then(|s| s.labels.metric_name()).unwrap_or("").to_owned();
        let before = (raw_bytes, bytes5, bytes1h);
        let mut rest = &s[..];
        while let Some(first) = rest.first() {
            let day_end = (first.timestamp_ms.div_euclid(DAY) + 1) * DAY;
            let n = rest.partition_point(|p| p.timestamp_ms < day_end);
            let (day, after) = rest.split_at(n);
            rest = after;
            for run in day.chunks(CHUNK_SAMPLES) {
                let mut buf = Vec::new();
                chunk::encode(run, ZSTD_LEVEL, &mut buf).expect("encode chunk");
                raw_bytes += buf.len();
                chunks.push(buf);
            }
            let t = Instant::now();
            let five = points_of(day, FIVE_MINUTES);
            let hour = coarser(&five, HOUR);
            let (b5, b1h) = (run_bytes(FIVE_MINUTES, &five, &mut runs5), run_bytes(HOUR, &hour, &mut runs1h));
            build_secs += t.elapsed().as_secs_f64();
            (bytes5, bytes1h, points5, points1h) =
                (bytes5 + b5, bytes1h + b1h, points5 + five.len(), points1h + hour.len());
        }
        let e = per_name.entry(name).or_default();
        e[0] += s.len();
        e[1] += raw_bytes - before.0;
        e[2] += bytes5 - before.1;
        e[3] += bytes1h - before.2;
    }
    let per_sample = |b: usize| b as f64 / samples as f64;
    let per_point = |b: usize, n: usize| b as f64 / n.max(1) as f64;
    println!("tiers beside the raw chunks ({series} series, {samples} samples):");
    println!("  raw chunks   {raw_bytes:>12} B  {:.3} B/sample", per_sample(raw_bytes));
    println!(
        "  5m tier      {bytes5:>12} B  {:.2} B/point ({points5} points)  {:.1}% of raw",
        per_point(bytes5, points5),
        100.0 * bytes5 as f64 / raw_bytes as f64
    );
    println!(
        "  1h tier      {bytes1h:>12} B  {:.2} B/point ({points1h} points)  {:.1}% of raw",
        per_point(bytes1h, points1h),
        100.0 * bytes1h as f64 / raw_bytes as f64
    );
    println!(
        "  5m + 1h      {:>12} B  {:.1}% of raw",
        bytes5 + bytes1h,
        100.0 * (bytes5 + bytes1h) as f64 / raw_bytes as f64
    );
    println!("  {:<36} {:>10} {:>9} {:>9} {:>9}", "metric", "samples", "raw B/s", "5m %raw", "1h %raw");
    for (name, e) in &per_name {
        let pct = |b: usize| 100.0 * b as f64 / e[1].max(1) as f64;
        println!(
            "  {name:<36} {:>10} {:>9.3} {:>8.1}% {:>8.1}%",
            e[0],
            e[1] as f64 / e[0] as f64,
            pct(e[2]),
            pct(e[3])
        );
    }
    for (tier, runs, points) in [("5m", &runs5, points5), ("1h", &runs1h, points1h)] {
        let mut cols: Vec<(&str, usize, usize)> = Vec::new();
        let mut total = 0usize;
        for r in runs {
            total += r.len();
            for (i, (name, raw, alone)) in tier_run::column_sizes(r).expect("tier run columns").into_iter().enumerate()
            {
                match cols.get_mut(i) {
                    Some(c) => (c.1, c.2) = (c.1 + raw, c.2 + alone),
                    None => cols.push((name, raw, alone)),
                }
            }
        }
        let alone: usize = cols.iter().map(|c| c.2).sum();
        println!(
            "  {tier} columns per point: uncompressed, compressed alone, and that scaled to the run ({:.2} B/point):",
            per_point(total, points)
        );
        for (name, raw, a) in cols {
            let scaled = a as f64 * total as f64 / alone.max(1) as f64;
            println!(
                "    {name:<16} {:>7.2} {:>7.2} {:>7.2}",
                per_point(raw, points),
                per_point(a, points),
                scaled / points.max(1) as f64
            );
        }
    }
    let mut out = Vec::new();
    let raw_rate = decode_rate(&chunks, |c| {
        out.clear();
        chunk::decode(c, &mut out).expect("decode chunk");
        out.len()
    });
    let mut points = Vec::new();
    let mut point_rate = |runs: &[Vec<u8>]| {
        decode_rate(runs, |r| {
            tier_run::decode_into(r, &mut points).expect("decode tier run");
            points.len()
        })
    };
    let (rate5, rate1h) = (point_rate(&runs5), point_rate(&runs1h));
    let covered = |rate: f64, points: usize| rate * samples as f64 / points.max(1) as f64;
    println!("  decode (median of 5 passes, one core):");
    println!("    raw chunks {:>8.1} M samples/s", raw_rate / 1e6);
    println!(
        "    5m tier    {:>8.1} M points/s ({:.0} M samples/s of raw covered, {:.1}x)",
        rate5 / 1e6,
        covered(rate5, points5) / 1e6,
        covered(rate5, points5) / raw_rate
    );
    println!(
        "    1h tier    {:>8.1} M points/s ({:.0} M samples/s of raw covered, {:.1}x)",
        rate1h / 1e6,
        covered(rate1h, points1h) / 1e6,
        covered(rate1h, points1h) / raw_rate
    );
    println!(
        "  build: {:.1} M samples/s into both tiers, encoding included ({build_secs:.2} s)",
        samples as f64 / build_secs / 1e6
    );
}
