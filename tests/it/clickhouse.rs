//! The ClickHouse backend against real ClickHouse 18.16 servers: two `clickhouse-server`
//! processes on loopback (their own ports and data under the test's temp directory, killed at
//! the end) form a two-shard cluster. The same data is written to the embedded store and to the
//! cluster, and the same questions (PromQL and the series/labels reads) must get the same
//! answers; a write retried as a whole leaves no duplicate; a shard that is down makes writes
//! and reads that need it fail clearly.

use std::path::Path;
use std::time::Duration;

use saltdb::clickhouse::{ClickHouse, ClickHouseConfig};
use saltdb::labels::Labels;
use saltdb::matcher::{MatchOp, Matcher};
use saltdb::promql::{Engine, EngineOptions, Value};
use saltdb::sample::{PackedBatch, Sample, SeriesSamples, WriteBatch, STALE_NAN_BITS};
use saltdb::storage::{Querier, ReadLimits, Storage, StorageError};

use crate::clickhouse_cluster::Shard;
use crate::common::storage_config;
use crate::peers::installed;

/// Two shards, or `None` (announced) when ClickHouse is not installed.
pub(crate) fn cluster(dir: &Path, test: &str) -> Option<Vec<Shard>> {
    if !installed("clickhouse-server", test, "clickhouse-server") {
        return None;
    }
    Some(crate::clickhouse_cluster::start(dir, 2))
}

pub(crate) const T0: i64 = 1_700_000_000_000;
pub(crate) const DAY: i64 = 86_400_000;

/// Series over three days: counters and gauges of several jobs and instances, jittered, with
/// a NaN and a staleness marker.
pub(crate) fn data() -> WriteBatch {
    let mut series = Vec::new();
    for job in ["api", "db", "web"] {
        for instance in 0..6 {
            for (name, counter) in [("reqs_total", true), ("temp_celsius", false)] {
                let labels = Labels::from_pairs([
                    ("__name__", name.to_owned()),
                    ("job", job.to_owned()),
                    ("instance", format!("host-{instance}:9100")),
                    ("zone", if instance % 2 == 0 { "eu".to_owned() } else { "us".to_owned() }),
                ])
                .unwrap();
                let mut samples = Vec::new();
                let mut v = 0.0;
                for i in 0..(3 * 24 * 4) {
                    let ts = T0 + i * 900_000 + (i * 7_919 + instance * 131) % 5_000;
                    v = if counter {
                        v + ((i + instance) % 11) as f64
                    } else {
                        20.0 + ((i * 13 + instance) % 17) as f64 / 4.0
                    };
                    samples.push(Sample::new(ts, v));
                }
                if job == "db" && instance == 3 {
                    samples[100].value = f64::NAN;
                    samples[200].value = f64::from_bits(STALE_NAN_BITS);
                }
                series.push(SeriesSamples { labels, samples, histograms: Vec::new() });
            }
        }
    }
    WriteBatch { series }
}

/// A value with its float bits made comparable (NaN payloads aside, equal values print alike).
fn show(v: &Value) -> String {
    match v {
        Value::Vector(samples) => {
            let mut lines: Vec<String> = samples.iter().map(|s| format!("{:?}", s)).collect();
            lines.sort();
            lines.join("\n")
        }
        other => format!("{other:?}"),
    }
}

const QUERIES: [&str; 12] = [
    "reqs_total",
    r#"temp_celsius{zone="eu"}"#,
    r#"sum by (job) (rate(reqs_total[1h]))"#,
    r#"max_over_time(temp_celsius{job=~"d.*|web", instance!="host-1:9100"}[3h])"#,
    r#"count({__name__=~".+", zone!~"e.*"})"#,
    r#"histogram_quantile(0.9, sum by (le) (rate(reqs_total[2h])))"#,
    r#"topk(3, increase(reqs_total{job="db"}[6h]))"#,
    r#"absent(nonexistent_metric)"#,
    r#"temp_celsius offset 1d"#,
    r#"avg_over_time(temp_celsius{job="db",instance="host-3:9100"}[1d])"#,
    r#"last_over_time(temp_celsius{job="db"}[30m])"#,
    r#"label_replace(reqs_total{job="api"}, "host", "$1", "instance", "(.*):.*")"#,
];

#[test]
fn clickhouse_backend_answers_like_the_embedded_store() {
    let dir = tempfile::tempdir().unwrap();
    let Some(_shards) = cluster(dir.path(), "clickhouse_backend_answers_like_the_embedded_store") else { return };
    let urls: Vec<String> = _shards.iter().map(|s| s.url.clone()).collect();
    let ch = ClickHouse::open(ClickHouseConfig::new(urls.clone())).expect("schema on both shards");
    // Opening again (another node, a restart) finds the schema and changes nothing.
    let ch2 = ClickHouse::open(ClickHouseConfig::new(urls)).unwrap();
    let mut config = storage_config(&dir.path().join("embedded"));
    config.retention_ms = None;
    let embedded = Storage::open(config).unwrap();

    let batch = data();
    embedded.write(batch.clone()).unwrap();
    let packed = PackedBatch::from(&batch);
    assert_eq!(ch.write(&packed).unwrap(), packed.sample_count());
    // The same batch again, through the other node (a retry after a lost acknowledgement).
    ch2.write(&packed).unwrap();

    let (eq, cq) = (embedded.querier(ReadLimits::none()), ch.querier(ReadLimits::none()));
    // Every answer, and every sample bit for bit (the NaN and the staleness marker included),
    // exactly once.
    let compared = compare_answers(&eq, &cq, "after a retried write");
    let all = [Matcher::new(MatchOp::RegexMatch, "__name__", ".+").unwrap()];
    assert_eq!(cq.select(&all, i64::MIN / 2, i64::MAX / 2, None).unwrap().len(), 36);
    // Both shards hold series, each series on one of them only.
    let per_shard = per_shard_count(&_shards, "SELECT uniqExact(series_id) FROM saltdb.samples");
    assert!(per_shard.iter().all(|&n| n > 0) && per_shard.iter().sum::<u64>() == 36, "series per shard: {per_shard:?}");
    // Series, label names and values over a day.
    let job_db = [Matcher::equal("job", "db")];
    let (s, e) = (T0 + DAY, T0 + 2 * DAY - 1);
    let sorted = |mut v: Vec<Labels>| {
        v.sort();
        v
    };
    assert_eq!(sorted(cq.series(&job_db, s, e, None).unwrap()), sorted(eq.series(&job_db, s, e, None).unwrap()));
    assert_eq!(cq.label_names(&[], s, e, None).unwrap(), eq.label_names(&[], s, e, None).unwrap());
    assert_eq!(
        cq.label_values("instance", &job_db, s, e, None).unwrap(),
        eq.label_values("instance", &job_db, s, e, None).unwrap()
    );
    assert_eq!(cq.label_values("zone", &[], s, e, None).unwrap(), ["eu", "us"]);
    println!(
        "clickhouse: {compared} PromQL answers equal to the embedded store's over 2 shards ({per_shard:?} series); \
         36 series bit-exact after a retried write"
    );
}

/// The same questions to both stores: every PromQL answer of [`QUERIES`] at three times and
/// over a day, and every sample bit for bit; returns how many answers were compared.
pub(crate) fn compare_answers(eq: &dyn Querier, cq: &dyn Querier, when: &str) -> usize {
    let engine = Engine::new(EngineOptions::default());
    let mut compared = 0;
    let all = [Matcher::new(MatchOp::RegexMatch, "__name__", ".+").unwrap()];
    let bits = |q: &dyn Querier| {
        let mut v: Vec<(String, Vec<(i64, u64)>)> = q
            .select(&all, i64::MIN / 2, i64::MAX / 2, None)
            .unwrap()
            .into_iter()
            .map(|s| (s.labels.to_string(), s.samples.iter().map(|p| (p.timestamp_ms, p.value.to_bits())).collect()))
            .collect();
        v.sort();
        v
    };
    let (got, want) = (bits(cq), bits(eq));
    if let Some((g, w)) = got.iter().zip(&want).find(|(g, w)| g != w) {
        let first = g.1.iter().zip(&w.1).position(|(a, b)| a != b);
        panic!(
            "{when}: series {} differs from {} at sample {first:?}: {:?} vs {:?} ({} vs {} samples)",
            g.0,
            w.0,
            first.and_then(|i| g.1.get(i)),
            first.and_then(|i| w.1.get(i)),
            g.1.len(),
            w.1.len()
        );
    }
    assert_eq!(got.len(), want.len(), "{when}: series");
    for q in QUERIES {
        for t in [T0 + DAY / 2, T0 + DAY + 3_600_123, T0 + 3 * DAY - 60_000] {
            let want = engine.instant(eq, q, t).unwrap_or_else(|e| panic!("{q} @ {t}: {e}"));
            let got = engine.instant(cq, q, t).unwrap_or_else(|e| panic!("{when}: {q} @ {t} on ClickHouse: {e}"));
            assert_eq!(show(&got.value), show(&want.value), "{when}: {q} @ {t}");
            compared += 1;
        }
        let want = engine.range(eq, q, T0 + DAY, T0 + 2 * DAY, 600_000).unwrap();
        let got = engine.range(cq, q, T0 + DAY, T0 + 2 * DAY, 600_000).unwrap();
        assert_eq!(format!("{:?}", got.value), format!("{:?}", want.value), "{when}: range {q}");
        compared += 1;
    }
    compared
}

/// Runs each statement on every shard, in order; panics naming the one that fails.
pub(crate) fn on_every_shard(shards: &[Shard], statements: &[&str]) {
    let http = reqwest::blocking::Client::new();
    for sql in statements {
        for sh in shards {
            let resp = http.post(format!("{}/", sh.url)).body(sql.to_string()).send().unwrap();
            assert!(resp.status().is_success(), "{sql}: {}", resp.text().unwrap_or_default());
        }
    }
}

/// `sql`'s single number on every shard.
pub(crate) fn per_shard_count(shards: &[Shard], sql: &str) -> Vec<u64> {
    let http = reqwest::blocking::Client::new();
    shards
        .iter()
        .map(|sh| {
            let text = http.post(format!("{}/", sh.url)).body(sql.to_owned()).send().unwrap().text().unwrap();
            text.trim().parse().unwrap_or_else(|_| panic!("{}: {sql}: {text}", sh.url))
        })
        .collect()
}

/// Closed days sealed into chunks in saltdb's codec answer exactly as before and as the
/// embedded store; a late sample (new, or overwriting a sealed one) lands in `samples`, wins,
/// and is folded in by the next seal; deleting from sealed days rewrites their chunks; a second
/// node sealing again changes nothing.
#[test]
fn sealed_days_answer_like_the_embedded_store_and_take_late_samples() {
    let dir = tempfile::tempdir().unwrap();
    let Some(shards) = cluster(dir.path(), "sealed_days_answer_like_the_embedded_store_and_take_late_samples") else {
        return;
    };
    let urls: Vec<String> = shards.iter().map(|s| s.url.clone()).collect();
    // Seals take rows inserted up to 50 ms before they start, instead of the request timeout
    // plus a minute, so the test need not wait.
    let mut config = ClickHouseConfig::new(urls.clone());
    config.seal_margin_ms = Some(50);
    let ch = ClickHouse::open(config.clone()).unwrap();
    let other_node = ClickHouse::open(config).unwrap();
    let mut config = storage_config(&dir.path().join("embedded"));
    config.retention_ms = None;
    let embedded = Storage::open(config).unwrap();
    let batch = data();
    embedded.write(batch.clone()).unwrap();
    ch.write(&PackedBatch::from(&batch)).unwrap();
    let (eq, cq) = (embedded.querier(ReadLimits::none()), ch.querier(ReadLimits::none()));
    let total: usize = batch.series.iter().map(|s| s.samples.len()).sum();
    let rows = |table: &str| per_shard_count(&shards, &format!("SELECT count() FROM saltdb.{table}"));
    let bytes = |table: &str| {
        per_shard_count(
            &shards,
            &format!("SELECT sum(bytes_on_disk) FROM system.parts WHERE database = 'saltdb' AND table = '{table}' AND active"),
        )
        .iter()
        .sum::<u64>()
    };
    compare_answers(&eq, &cq, "before sealing");
    let samples_bytes = bytes("samples");

    // A seal leaves rows inserted within its margin for a later one.
    let now = || chrono::Utc::now().timestamp_millis();
    assert_eq!(ch.seal_closed_days(now() - 60_000).unwrap().samples, 0, "rows inserted just now wait");
    std::thread::sleep(Duration::from_millis(100));
    let sealed = ch.seal_closed_days(now()).unwrap();
    assert_eq!(sealed.samples, total as u64, "{sealed:?}");
    assert!(sealed.days >= 6, "three or four days on each of two shards: {sealed:?}");
    assert_eq!(rows("samples").iter().sum::<u64>(), 0, "sealed rows leave `samples`");
    assert_eq!(rows("chunks").iter().sum::<u64>(), sealed.chunks);
    let chunks_bytes = bytes("chunks");
    let compared = compare_answers(&eq, &cq, "after sealing");
    // Another node's pass finds nothing left to seal.
    assert_eq!(other_node.seal_closed_days(now()).unwrap().samples, 0);

    // Late samples: one overwrites a sealed sample, one is new, in a sealed day.
    let job = |labels: &[(&str, &str)]| Labels::from_pairs(labels.iter().map(|(k, v)| (*k, (*v).to_owned()))).unwrap();
    let old = &batch.series[5];
    let late = WriteBatch {
        series: vec![
            SeriesSamples {
                labels: old.labels.clone(),
                samples: vec![Sample::new(old.samples[10].timestamp_ms, -7.5)],
                histograms: Vec::new(),
            },
            SeriesSamples {
                labels: job(&[("__name__", "temp_celsius"), ("job", "late"), ("instance", "x"), ("zone", "eu")]),
                samples: vec![Sample::new(T0 + DAY + 1_000, 3.25), Sample::new(T0 + DAY + 901_000, 4.5)],
                histograms: Vec::new(),
            },
        ],
    };
    embedded.write(late.clone()).unwrap();
    ch.write(&PackedBatch::from(&late)).unwrap();
    compare_answers(&eq, &cq, "after late samples");
    // The late rows are above the watermark of a seal that started before them: they wait.
    assert_eq!(ch.seal_closed_days(now() - 60_000).unwrap().samples, 0);
    std::thread::sleep(Duration::from_millis(100));
    let resealed = other_node.seal_closed_days(now()).unwrap();
    assert_eq!(resealed.samples, 3, "{resealed:?}");
    assert_eq!(rows("samples").iter().sum::<u64>(), 0);
    let doubled = per_shard_count(
        &shards,
        "SELECT count() FROM (SELECT series_id, day FROM saltdb.chunks GROUP BY series_id, day HAVING count() > 1)",
    );
    assert_eq!(doubled.iter().sum::<u64>(), 0, "one version per series and day once sealed again");
    compare_answers(&eq, &cq, "after sealing late samples");

    // Deleting part of sealed days, and the whole of one series.
    let (from, to) = (T0 + DAY / 3, T0 + DAY + DAY / 2);
    let zone_us = [Matcher::equal("zone", "us")];
    embedded.delete_series(&zone_us, from, to).unwrap();
    ch.delete_series(&zone_us, from, to).unwrap();
    let late_one = [Matcher::equal("job", "late")];
    embedded.delete_series(&late_one, 0, T0 + 10 * DAY).unwrap();
    ch.delete_series(&late_one, 0, T0 + 10 * DAY).unwrap();
    compare_answers(&eq, &cq, "after deletes");

    println!(
        "clickhouse sealing: {total} samples in {} chunk rows; {compared} answers equal before and after; \
         samples table {samples_bytes} B ({:.2} B/sample) -> chunks table {chunks_bytes} B ({:.2} B/sample)",
        sealed.chunks,
        samples_bytes as f64 / total as f64,
        chunks_bytes as f64 / total as f64
    );
}

/// A database of schema version 1 (no `inserted_at`, no `chunks`, no `histogram`) is upgraded in
/// place when a node of this build opens it: nothing is lost, its old rows are sealed like new
/// ones, and a second open changes nothing.
#[test]
fn a_version_1_database_is_upgraded_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let Some(shards) = cluster(dir.path(), "a_version_1_database_is_upgraded_in_place") else { return };
    let urls: Vec<String> = shards.iter().map(|s| s.url.clone()).collect();
    let mut config = ClickHouseConfig::new(urls);
    config.seal_margin_ms = Some(50);
    let batch = data();
    let total: usize = batch.series.iter().map(|s| s.samples.len()).sum();
    ClickHouse::open(config.clone()).unwrap().write(&PackedBatch::from(&batch)).unwrap();
    // Back to version 1's tables, as a node of the previous build left them.
    on_every_shard(
        &shards,
        &[
            "ALTER TABLE saltdb.samples DROP COLUMN histogram",
            "ALTER TABLE saltdb.samples DROP COLUMN inserted_at",
            "DROP TABLE saltdb.chunks",
            "DROP TABLE saltdb.schema_version",
            "CREATE TABLE saltdb.schema_version (version UInt32) ENGINE = ReplacingMergeTree ORDER BY version",
            "INSERT INTO saltdb.schema_version VALUES (1)",
        ],
    );
    assert_eq!(
        per_shard_count(
            &shards,
            "SELECT count() FROM system.columns WHERE database = 'saltdb' AND table = 'samples' AND name = 'inserted_at'"
        ),
        [0, 0]
    );

    let upgraded = ClickHouse::open(config.clone()).unwrap();
    assert_eq!(per_shard_count(&shards, "SELECT max(version) FROM saltdb.schema_version"), [7, 7]);
    assert_eq!(
        per_shard_count(&shards, "SELECT count() FROM system.tables WHERE database = 'saltdb' AND name = 'starts'"),
        [1, 1]
    );
    assert_eq!(
        per_shard_count(
            &shards,
            "SELECT count() FROM system.columns WHERE database = 'saltdb' AND table = 'samples' AND name = 'histogram'"
        ),
        [1, 1]
    );
    assert_eq!(
        per_shard_count(&shards, "SELECT count() FROM saltdb.samples WHERE inserted_at = 0").iter().sum::<u64>(),
        total as u64
    );
    ClickHouse::open(config).unwrap();
    let mut embedded_config = storage_config(&dir.path().join("embedded"));
    embedded_config.retention_ms = None;
    let embedded = Storage::open(embedded_config).unwrap();
    embedded.write(batch).unwrap();
    let (eq, cq) = (embedded.querier(ReadLimits::none()), upgraded.querier(ReadLimits::none()));
    compare_answers(&eq, &cq, "after the upgrade");
    std::thread::sleep(Duration::from_millis(100));
    let sealed = upgraded.seal_closed_days(chrono::Utc::now().timestamp_millis()).unwrap();
    assert_eq!(sealed.samples, total as u64, "{sealed:?}");
    compare_answers(&eq, &cq, "after sealing the upgraded rows");
}

#[test]
fn a_shard_that_is_down_fails_writes_and_reads_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let Some(mut shards) = cluster(dir.path(), "a_shard_that_is_down_fails_writes_and_reads_clearly") else { return };
    let mut config = ClickHouseConfig::new(shards.iter().map(|s| s.url.clone()).collect());
    config.timeout = Duration::from_secs(5);
    let ch = ClickHouse::open(config).unwrap();
    let packed = PackedBatch::from(&data());
    ch.write(&packed).unwrap();
    shards[1].kill9();
    match ch.write(&packed) {
        Err(StorageError::Unavailable(msg)) => assert!(msg.contains(&shards[1].url), "{msg}"),
        other => panic!("a write to a dead shard gave {other:?}"),
    }
    let q = ch.querier(ReadLimits::none());
    match q.select(&[Matcher::equal("job", "api")], T0, T0 + DAY, None) {
        Err(StorageError::Unavailable(msg)) => assert!(msg.contains(&shards[1].url), "{msg}"),
        other => panic!("a read needing a dead shard gave {other:?}"),
    }
}

/// `saltdb serve --storage clickhouse`: two saltdb nodes over the same two shards. Samples
/// imported through either node are answered by both (queries, series, labels, export), the
/// nodes keep no data of their own, and an endpoint that needs the embedded store is a 501.
#[test]
fn two_stateless_nodes_serve_one_clickhouse_cluster() {
    let dir = tempfile::tempdir().unwrap();
    let Some(mut shards) = cluster(dir.path(), "two_stateless_nodes_serve_one_clickhouse_cluster") else { return };
    let urls = shards.iter().map(|s| s.url.as_str()).collect::<Vec<_>>().join(",");
    let args = ["--storage", "clickhouse", "--clickhouse-url", &urls, "--retention", "0", "--enable-admin-api"];
    let (dir_a, dir_b) = (dir.path().join("node-a"), dir.path().join("node-b"));
    let a = crate::common::Binary::spawn(&dir_a, &args);
    let b = crate::common::Binary::spawn(&dir_b, &args);
    let now = chrono::Utc::now().timestamp_millis() / 1000 * 1000;
    // Each node imports half of the series.
    let lines = |node: usize| -> String {
        (0..10)
            .filter(|i| i % 2 == node)
            .map(|i| {
                let ts: Vec<i64> = (0..30).map(|k| now - 600_000 + k * 20_000).collect();
                let values: Vec<f64> = (0..30).map(|k| (i * 100 + k) as f64).collect();
                serde_json::json!({"metric": {"__name__": "ch_up", "node": node.to_string(), "i": i.to_string()}, "values": values, "timestamps": ts})
                    .to_string()
                    + "\n"
            })
            .collect()
    };
    assert_eq!(crate::common::import(&a.url(""), lines(0)), (204, String::new()));
    assert_eq!(crate::common::import(&b.url(""), lines(1)), (204, String::new()));
    let http = reqwest::blocking::Client::new();
    for node in [&a, &b] {
        let v: serde_json::Value = http
            .get(node.url("/api/v1/query"))
            .query(&[("query", "sum(ch_up)"), ("time", &(now / 1000).to_string())])
            .send()
            .unwrap()
            .text()
            .map(|t| serde_json::from_str(&t).unwrap())
            .unwrap();
        // The newest samples: i*100 + 29 for i in 0..10.
        assert_eq!(v["data"]["result"][0]["value"][1], "4790", "{v}");
        let v: serde_json::Value = http
            .get(node.url("/api/v1/query_range"))
            .query(&[
                ("query", "count(ch_up)"),
                ("start", &((now - 300_000) / 1000).to_string()),
                ("end", &(now / 1000).to_string()),
                ("step", "60"),
            ])
            .send()
            .unwrap()
            .text()
            .map(|t| serde_json::from_str(&t).unwrap())
            .unwrap();
        let points = v["data"]["result"][0]["values"].as_array().unwrap();
        assert!(points.len() == 6 && points.iter().all(|p| p[1] == "10"), "{v}");
        let v: serde_json::Value =
            serde_json::from_str(&http.get(node.url("/api/v1/label/i/values")).send().unwrap().text().unwrap())
                .unwrap();
        assert_eq!(v["data"].as_array().unwrap().len(), 10, "{v}");
        let exported = crate::common::export(&node.url(""), "{__name__=\"ch_up\"}");
        assert_eq!(exported.len(), 10);
        assert!(exported.values().all(|s| s.len() == 30));
        // Needs the embedded store: a clear 501.
        let resp = http.get(node.url("/api/v1/status/tsdb")).send().unwrap();
        assert_eq!(resp.status().as_u16(), 501);
        assert!(resp.text().unwrap().contains("not available on the clickhouse storage backend"));
    }
    // A deletion through one node is seen by the other.
    let resp =
        http.post(a.url("/api/v1/admin/tsdb/delete_series")).form(&[("match[]", r#"{i=~"0|1"}"#)]).send().unwrap();
    assert_eq!(resp.status().as_u16(), 204, "{}", resp.text().unwrap_or_default());
    let exported = crate::common::export(&b.url(""), "{__name__=\"ch_up\"}");
    assert_eq!(exported.len(), 8, "{:?}", exported.keys().collect::<Vec<_>>());
    // Per-shard counters in /metrics: node a inserted its 5 series x 30 samples.
    let text = http.get(a.url("/metrics")).send().unwrap().text().unwrap();
    let value = |prefix: &str| -> f64 {
        text.lines().filter(|l| l.starts_with(prefix)).filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok()).sum()
    };
    assert_eq!(
        value("saltdb_clickhouse_rows_written_total{replica=\"0\",shard=\"0\",table=\"samples\"}")
            + value("saltdb_clickhouse_rows_written_total{replica=\"0\",shard=\"1\",table=\"samples\"}"),
        150.0,
        "{text}"
    );
    assert!(value("saltdb_clickhouse_requests_total{outcome=\"ok\",replica=\"0\",shard=\"0\"}") > 0.0, "{text}");
    assert!(value("saltdb_clickhouse_request_seconds_total{replica=\"0\",shard=\"1\"}") > 0.0, "{text}");
    // A shard down: a write that needs it is a 503 with Retry-After naming the shard, and a
    // query that needs it a 503 too.
    shards[1].kill9();
    let resp = http.post(a.url("/api/v1/import")).body(lines(0)).send().unwrap();
    assert_eq!(resp.status().as_u16(), 503);
    assert_eq!(resp.headers()["retry-after"], "1");
    assert!(resp.text().unwrap().contains(&shards[1].url));
    let resp = http.get(b.url("/api/v1/query")).query(&[("query", "sum(ch_up)")]).send().unwrap();
    assert_eq!(resp.status().as_u16(), 503);
    // Stateless: neither node wrote a data directory.
    assert!(!dir_a.join("keyspaces").exists() && !dir_b.join("keyspaces").exists());
    a.terminate();
    b.terminate();
}

/// Retention on ClickHouse: whole days past the cutoff are dropped on every shard (the start of
/// the day `now - retention` falls in is kept), and writes outside the accepted range are
/// refused with nothing written.
#[test]
fn retention_drops_whole_days_and_refuses_old_and_future_samples() {
    let dir = tempfile::tempdir().unwrap();
    let Some(shards) = cluster(dir.path(), "retention_drops_whole_days_and_refuses_old_and_future_samples") else {
        return;
    };
    let urls: Vec<String> = shards.iter().map(|s| s.url.clone()).collect();
    let forever = ClickHouse::open(ClickHouseConfig::new(urls.clone())).unwrap();
    let now = chrono::Utc::now().timestamp_millis();
    let series: Vec<SeriesSamples> = (0..8)
        .map(|i| SeriesSamples {
            labels: Labels::from_pairs([("__name__", "kept_for".to_owned()), ("i", i.to_string())]).unwrap(),
            samples: (0..20).map(|k| Sample::new(now - 5 * DAY + k * 6 * 3_600_000, k as f64)).collect(),
            histograms: Vec::new(),
        })
        .collect();
    forever.write(&PackedBatch::from(&WriteBatch { series })).unwrap();
    let mut config = ClickHouseConfig::new(urls);
    config.retention_ms = Some(2 * DAY);
    config.max_future_ms = Some(3_600_000);
    let kept = ClickHouse::open(config).unwrap();
    let cutoff = kept.retention_cutoff(now).unwrap();
    let dropped = kept.enforce_retention(now).unwrap();
    assert!(dropped >= 3, "dropped {dropped} partitions");
    // Running it again (another node's maintenance) drops nothing more.
    assert_eq!(kept.enforce_retention(now).unwrap(), 0);
    let all = [Matcher::equal("__name__", "kept_for")];
    let left = kept.querier(ReadLimits::none()).select(&all, 0, now + DAY, None).unwrap();
    assert_eq!(left.len(), 8);
    for s in &left {
        let want: Vec<i64> = (0..20).map(|k| now - 5 * DAY + k * 6 * 3_600_000).filter(|&t| t >= cutoff).collect();
        assert_eq!(s.samples.iter().map(|p| p.timestamp_ms).collect::<Vec<_>>(), want);
    }
    let one = |ts: i64| {
        PackedBatch::from(&WriteBatch {
            series: vec![SeriesSamples {
                labels: Labels::from_pairs([("__name__", "kept_for"), ("i", "new")]).unwrap(),
                samples: vec![Sample::new(ts, 1.0)],
                histograms: Vec::new(),
            }],
        })
    };
    assert!(matches!(kept.write(&one(cutoff - 1)), Err(StorageError::TooOld { .. })));
    assert!(matches!(kept.write(&one(now + 2 * 3_600_000)), Err(StorageError::TooNew { .. })));
    assert_eq!(kept.write(&one(now)).unwrap(), 1);
}

/// Two nodes writing the same series at the same time, through both shards (each sends every
/// batch, in a different order, as two Prometheus replicas or a retrying client would): every
/// sample is found exactly once, compared with what was sent.
#[test]
fn two_nodes_writing_the_same_series_concurrently_lose_and_duplicate_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let test = "two_nodes_writing_the_same_series_concurrently_lose_and_duplicate_nothing";
    let Some(shards) = cluster(dir.path(), test) else { return };
    let urls: Vec<String> = shards.iter().map(|s| s.url.clone()).collect();
    let nodes = [
        ClickHouse::open(ClickHouseConfig::new(urls.clone())).unwrap(),
        ClickHouse::open(ClickHouseConfig::new(urls)).unwrap(),
    ];
    // 40 batches of 50 series x 10 samples; batch b holds samples b*10.. of every series.
    let batches: Vec<PackedBatch> = (0..40)
        .map(|b| {
            let series = (0..50)
                .map(|i| SeriesSamples {
                    labels: Labels::from_pairs([("__name__", "shared_total".to_owned()), ("i", i.to_string())])
                        .unwrap(),
                    samples: (0..10)
                        .map(|k| Sample::new(T0 + (b * 10 + k) * 15_000, (b * 10 + k + i) as f64))
                        .collect(),
                    histograms: Vec::new(),
                })
                .collect();
            PackedBatch::from(&WriteBatch { series })
        })
        .collect();
    std::thread::scope(|scope| {
        for (n, node) in nodes.iter().enumerate() {
            let batches = &batches;
            scope.spawn(move || {
                let order: Vec<usize> = if n == 0 { (0..40).collect() } else { (0..40).rev().collect() };
                for b in order {
                    node.write(&batches[b]).unwrap();
                }
            });
        }
    });
    let all = [Matcher::equal("__name__", "shared_total")];
    for node in &nodes {
        let mut got = node.querier(ReadLimits::none()).select(&all, T0, T0 + DAY, None).unwrap();
        got.sort_by(|a, b| a.labels.cmp(&b.labels));
        assert_eq!(got.len(), 50);
        for s in &got {
            let i: i64 = s.labels.get("i").unwrap().parse().unwrap();
            let want: Vec<(i64, f64)> = (0..400).map(|k| (T0 + k * 15_000, (k + i) as f64)).collect();
            let have: Vec<(i64, f64)> = s.samples.iter().map(|p| (p.timestamp_ms, p.value)).collect();
            assert_eq!(have, want, "series {i}");
        }
    }
}

/// A shard killed with `kill -9` while a client writes one-series batches: writes of series on
/// the other shard keep succeeding, writes to the dead one fail clearly, and after it restarts
/// every acknowledged sample is there.
#[test]
fn acknowledged_writes_survive_a_shard_killed_during_writes() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Mutex;
    let dir = tempfile::tempdir().unwrap();
    let Some(mut shards) = cluster(dir.path(), "acknowledged_writes_survive_a_shard_killed_during_writes") else {
        return;
    };
    let mut config = ClickHouseConfig::new(shards.iter().map(|s| s.url.clone()).collect());
    config.timeout = Duration::from_secs(3);
    let ch = ClickHouse::open(config).unwrap();
    let stop = AtomicBool::new(false);
    // (series number, acknowledged, written while the shard was down)
    let outcomes: Mutex<Vec<(i64, bool, bool)>> = Mutex::new(Vec::new());
    let down = AtomicBool::new(false);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            let mut n = 0i64;
            while !stop.load(Ordering::SeqCst) {
                let batch = PackedBatch::from(&WriteBatch {
                    series: vec![SeriesSamples {
                        labels: Labels::from_pairs([("__name__", "fault_total".to_owned()), ("n", n.to_string())])
                            .unwrap(),
                        samples: vec![Sample::new(T0 + n, n as f64)],
                        histograms: Vec::new(),
                    }],
                });
                let was_down = down.load(Ordering::SeqCst);
                let ok = match ch.write(&batch) {
                    Ok(_) => true,
                    Err(StorageError::Unavailable(_)) => false,
                    Err(e) => panic!("write {n}: unexpected {e}"),
                };
                outcomes.lock().unwrap().push((n, ok, was_down && down.load(Ordering::SeqCst)));
                n += 1;
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        std::thread::sleep(Duration::from_millis(800));
        down.store(true, Ordering::SeqCst);
        shards[1].kill9();
        std::thread::sleep(Duration::from_millis(1500));
        shards[1].restart();
        down.store(false, Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(500));
        stop.store(true, Ordering::SeqCst);
    });
    let outcomes = outcomes.into_inner().unwrap();
    let during: Vec<&(i64, bool, bool)> = outcomes.iter().filter(|o| o.2).collect();
    let (ok_during, failed_during) = (during.iter().filter(|o| o.1).count(), during.iter().filter(|o| !o.1).count());
    assert!(ok_during > 0, "no write to the live shard succeeded while the other was down ({} tried)", during.len());
    assert!(failed_during > 0, "no write failed while a shard was down ({} tried)", during.len());
    let found = ch
        .querier(ReadLimits::none())
        .select(&[Matcher::equal("__name__", "fault_total")], T0, T0 + DAY, None)
        .unwrap();
    let present: std::collections::HashSet<i64> =
        found.iter().flat_map(|s| s.samples.iter().map(|p| p.timestamp_ms - T0)).collect();
    let acked: Vec<i64> = outcomes.iter().filter(|o| o.1).map(|o| o.0).collect();
    let lost: Vec<&i64> = acked.iter().filter(|n| !present.contains(n)).collect();
    assert!(lost.is_empty(), "{} of {} acknowledged samples lost: {lost:?}", lost.len(), acked.len());
    println!(
        "clickhouse fault: {} writes, {} acknowledged, all found after the restart; while shard 1 was down: {ok_during} succeeded, {failed_during} failed",
        outcomes.len(),
        acked.len()
    );
}

/// `--clickhouse-partial-reads`: with a shard down, queries answer from the other shard with a
/// warning naming the missing one (instead of a 503); writes that need it still fail.
#[test]
fn partial_reads_answer_from_the_live_shard_with_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let Some(mut shards) = cluster(dir.path(), "partial_reads_answer_from_the_live_shard_with_a_warning") else {
        return;
    };
    let urls = shards.iter().map(|s| s.url.as_str()).collect::<Vec<_>>().join(",");
    let node = crate::common::Binary::spawn(
        &dir.path().join("node"),
        &["--storage", "clickhouse", "--clickhouse-url", &urls, "--retention", "0", "--clickhouse-partial-reads"],
    );
    let now = chrono::Utc::now().timestamp_millis() / 1000 * 1000;
    let body: String = (0..40)
        .map(|i| serde_json::json!({"metric": {"__name__": "part_up", "i": i.to_string()}, "values": [1], "timestamps": [now]}).to_string() + "\n")
        .collect();
    assert_eq!(crate::common::import(&node.url(""), body.clone()), (204, String::new()));
    let http = reqwest::blocking::Client::new();
    let count = |v: &serde_json::Value| v["data"]["result"][0]["value"][1].as_str().unwrap_or("none").to_owned();
    let get = |path: &str, q: &[(&str, &str)]| -> (u16, serde_json::Value) {
        let resp = http.get(node.url(path)).query(q).send().unwrap();
        let status = resp.status().as_u16();
        (status, serde_json::from_str(&resp.text().unwrap()).unwrap())
    };
    let t = (now / 1000).to_string();
    let (s, v) = get("/api/v1/query", &[("query", "count(part_up)"), ("time", &t)]);
    assert_eq!((s, count(&v)), (200, "40".to_owned()), "{v}");
    assert!(v.get("warnings").is_none(), "{v}");
    shards[1].kill9();
    let (s, v) = get("/api/v1/query", &[("query", "count(part_up)"), ("time", &t)]);
    assert_eq!(s, 200, "{v}");
    let live: u32 = count(&v).parse().unwrap();
    assert!(live > 0 && live < 40, "{v}");
    let warnings = v["warnings"].to_string();
    assert!(warnings.contains("partial answer") && warnings.contains(&shards[1].url), "{v}");
    let (s, v) = get("/api/v1/series", &[("match[]", "part_up")]);
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["data"].as_array().unwrap().len() as u32, live, "{v}");
    assert!(v["warnings"].to_string().contains("partial answer"), "{v}");
    let resp = http.post(node.url("/api/v1/import")).body(body).send().unwrap();
    assert_eq!(resp.status().as_u16(), 503);
    // Answers without a place for a warning are never partial.
    let export = http.get(node.url("/api/v1/export")).query(&[("match[]", "part_up")]).send().unwrap();
    assert_eq!(export.status().as_u16(), 503, "export");
    let federate = http.get(node.url("/federate")).query(&[("match[]", "part_up")]).send().unwrap();
    assert_eq!(federate.status().as_u16(), 503, "federate");
    println!("partial reads: {live} of 40 series answered with shard 1 down; export and federate refused");
    node.terminate();
}

/// Concurrent writes are grouped: 40 writers x 25 small batches cost far fewer inserts than
/// batches (one per table and shard per group), and every sample is stored.
#[test]
fn concurrent_writes_share_inserts() {
    let dir = tempfile::tempdir().unwrap();
    let Some(shards) = cluster(dir.path(), "concurrent_writes_share_inserts") else { return };
    let ch = ClickHouse::open(ClickHouseConfig::new(shards.iter().map(|s| s.url.clone()).collect())).unwrap();
    let requests = |c: &ClickHouse| c.replica_figures().iter().map(|f| f.requests_ok).sum::<u64>();
    let before = requests(&ch);
    std::thread::scope(|scope| {
        for w in 0..40 {
            let ch = &ch;
            scope.spawn(move || {
                for k in 0..25 {
                    let series = (0..5)
                        .map(|i| SeriesSamples {
                            labels: Labels::from_pairs([
                                ("__name__", "grouped".to_owned()),
                                ("w", w.to_string()),
                                ("i", i.to_string()),
                            ])
                            .unwrap(),
                            samples: vec![Sample::new(T0 + k * 1_000, k as f64)],
                            histograms: Vec::new(),
                        })
                        .collect();
                    ch.write(&PackedBatch::from(&WriteBatch { series })).unwrap();
                }
            });
        }
    });
    let inserts = requests(&ch) - before;
    let found =
        ch.querier(ReadLimits::none()).select(&[Matcher::equal("__name__", "grouped")], T0, T0 + DAY, None).unwrap();
    assert_eq!(found.len(), 200);
    assert!(found.iter().all(|s| s.samples.len() == 25));
    assert!(inserts < 1_000, "1,000 writes took {inserts} inserts");
    println!("grouped writes: 1,000 writes of 5 series in {inserts} inserts over 2 shards x 3 tables");
}

/// A series given twice in one write, with different values at one time: the later value is
/// the one stored (as on the embedded store and as Prometheus' test loader expects), before and
/// after ClickHouse merges the parts.
#[test]
fn the_later_of_two_samples_at_one_time_in_a_write_wins() {
    let dir = tempfile::tempdir().unwrap();
    let Some(shards) = cluster(dir.path(), "the_later_of_two_samples_at_one_time_in_a_write_wins") else { return };
    let ch = ClickHouse::open(ClickHouseConfig::new(shards.iter().map(|s| s.url.clone()).collect())).unwrap();
    let labels = Labels::from_pairs([("__name__", "twice"), ("k", "v")]).unwrap();
    let series = |v: f64| SeriesSamples {
        labels: labels.clone(),
        samples: vec![Sample::new(T0, v), Sample::new(T0 + 1, v)],
        histograms: Vec::new(),
    };
    ch.write(&PackedBatch::from(&WriteBatch { series: vec![series(f64::INFINITY), series(f64::NEG_INFINITY)] }))
        .unwrap();
    let read = || {
        let found =
            ch.querier(ReadLimits::none()).select(&[Matcher::equal("__name__", "twice")], T0, T0 + 1, None).unwrap();
        found[0].samples.iter().map(|p| p.value).collect::<Vec<f64>>()
    };
    assert_eq!(read(), [f64::NEG_INFINITY, f64::NEG_INFINITY]);
    on_every_shard(&shards, &["OPTIMIZE TABLE saltdb.samples FINAL"]);
    assert_eq!(read(), [f64::NEG_INFINITY, f64::NEG_INFINITY]);
}

/// A regex matcher over thousands of long label values selects every matching series (the
/// matched values go back to ClickHouse in `IN` lists cut by size; 3,000 values of 120 bytes
/// make about 370 KB of them).
#[test]
fn a_regex_over_many_long_values_selects_them_all() {
    let dir = tempfile::tempdir().unwrap();
    let Some(shards) = cluster(dir.path(), "a_regex_over_many_long_values_selects_them_all") else { return };
    let ch = ClickHouse::open(ClickHouseConfig::new(shards.iter().map(|s| s.url.clone()).collect())).unwrap();
    let series: Vec<SeriesSamples> = (0..3_000)
        .map(|i| SeriesSamples {
            labels: Labels::from_pairs([("__name__", "long".to_owned()), ("path", format!("/{i:0>119}"))]).unwrap(),
            samples: vec![Sample::new(T0, i as f64)],
            histograms: Vec::new(),
        })
        .collect();
    ch.write(&PackedBatch::from(&WriteBatch { series })).unwrap();
    let m = [Matcher::new(MatchOp::RegexMatch, "path", "/0.*").unwrap()];
    let found = ch.querier(ReadLimits::none()).select(&m, T0, T0, None).unwrap();
    assert_eq!(found.len(), 3_000);
}

/// Native histograms on ClickHouse, through real HTTP: remote-write 1.0 and 2.0 requests.
pub(crate) mod histograms {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use prost::Message;
    use saltdb::clickhouse::{ClickHouse, ClickHouseConfig};
    use saltdb::remote::proto::{self, histogram::Count, histogram::ZeroCount, v2, MatcherType, ResponseType};
    use saltdb::remote::snappy_body;
    use saltdb::sample::STALE_NAN_BITS;

    use super::{cluster, per_shard_count, DAY, T0};
    use crate::common::{client, post, series, Binary, V1_HEADERS, V2_HEADERS};

    pub(crate) type Read = BTreeMap<BTreeMap<String, String>, (Vec<proto::Sample>, Vec<proto::Histogram>)>;

    fn span(offset: i32, length: u32) -> proto::BucketSpan {
        proto::BucketSpan { offset, length }
    }

    /// An integer counter histogram with exponential buckets on both sides.
    fn integer(t: i64, i: u64) -> proto::Histogram {
        proto::Histogram {
            count: Some(Count::CountInt(9 + 3 * i)),
            zero_count: Some(ZeroCount::ZeroCountInt(2 + i)),
            sum: 12.5 + i as f64,
            schema: 1,
            zero_threshold: 0.001,
            positive_spans: vec![span(0, 2), span(2, 1)],
            positive_deltas: vec![2, -1, 2 + i as i64],
            negative_spans: vec![span(-1, 1)],
            negative_deltas: vec![1 + i as i64],
            reset_hint: if i == 0 { 1 } else { 2 },
            timestamp: t,
            ..Default::default()
        }
    }

    /// A float gauge histogram; every fifth a stale marker (sum: the staleness NaN).
    fn float_gauge(t: i64, i: u64) -> proto::Histogram {
        proto::Histogram {
            count: Some(Count::CountFloat(6.5 + i as f64)),
            zero_count: Some(ZeroCount::ZeroCountFloat(0.5)),
            sum: if i % 5 == 4 { f64::from_bits(STALE_NAN_BITS) } else { -3.25 - i as f64 / 3.0 },
            schema: -2,
            zero_threshold: 1e-128,
            positive_spans: vec![span(3, 2)],
            positive_counts: vec![1.5, 2.5 + i as f64],
            negative_spans: vec![span(0, 1)],
            negative_counts: vec![2.0],
            reset_hint: 3,
            timestamp: t,
            ..Default::default()
        }
    }

    /// A histogram with custom buckets (NHCB, schema -53).
    fn nhcb(t: i64, i: u64) -> proto::Histogram {
        proto::Histogram {
            count: Some(Count::CountInt(7 + i)),
            zero_count: Some(ZeroCount::ZeroCountInt(0)),
            sum: 100.0 + i as f64,
            schema: -53,
            positive_spans: vec![span(0, 2), span(1, 1)],
            positive_deltas: vec![3, -1, i as i64],
            custom_values: vec![0.1, 0.5, 1.0],
            timestamp: t,
            ..Default::default()
        }
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(n, v)| ((*n).to_owned(), (*v).to_owned())).collect()
    }

    /// Timestamps over two days from `T0`, every 20 min.
    fn times() -> Vec<i64> {
        (0..144).map(|i| T0 + i * 1_200_000 + (i * 7_919) % 5_000).collect()
    }

    /// A remote-write 1.0 request of 12 series (4 of each form) and what it reads back as.
    fn v1_request() -> (proto::WriteRequest, Read) {
        let (mut timeseries, mut want) = (Vec::new(), Read::new());
        for (form, f) in
            [("integer", integer as fn(i64, u64) -> proto::Histogram), ("gauge", float_gauge), ("nhcb", nhcb)]
        {
            for k in 0..4 {
                let k = k.to_string();
                let pairs = [("__name__", "chh_v1"), ("form", form), ("k", k.as_str())];
                let hs: Vec<proto::Histogram> = times().into_iter().zip(0..).map(|(t, i)| f(t, i)).collect();
                let mut ts = series(&pairs, &[]);
                ts.histograms = hs.clone();
                timeseries.push(ts);
                want.insert(labels(&pairs), (vec![], hs));
            }
        }
        (proto::WriteRequest { timeseries, metadata: vec![] }, want)
    }

    /// A remote-write 2.0 request: a series switching between floats and histograms (even steps
    /// floats, odd steps histograms) and one of histograms only.
    fn v2_request() -> (v2::Request, Read) {
        let symbols: Vec<String> =
            ["", "__name__", "chh_v2_mixed", "chh_v2_integer", "job", "v2"].map(String::from).to_vec();
        let (mut timeseries, mut want) = (Vec::new(), Read::new());
        let t = times();
        let floats: Vec<proto::Sample> = t
            .iter()
            .step_by(2)
            .zip(0..)
            .map(|(&timestamp, i)| proto::Sample { value: i as f64 * 0.1, timestamp })
            .collect();
        let mixed_h: Vec<proto::Histogram> =
            t.iter().skip(1).step_by(2).zip(0..).map(|(&ts, i)| integer(ts, i)).collect();
        let only_h: Vec<proto::Histogram> = t.iter().zip(0..).map(|(&ts, i)| integer(ts, i)).collect();
        for (name_ref, name, samples, histograms) in
            [(2, "chh_v2_mixed", floats, mixed_h), (3, "chh_v2_integer", vec![], only_h)]
        {
            timeseries.push(v2::TimeSeries {
                labels_refs: vec![1, name_ref, 4, 5],
                samples: samples.clone(),
                histograms: histograms.clone(),
                ..Default::default()
            });
            want.insert(labels(&[("__name__", name), ("job", "v2")]), (samples, histograms));
        }
        (v2::Request { symbols, timeseries }, want)
    }

    /// Remote read (`SAMPLES`) of every series named like `chh_.*` over the two days.
    pub(crate) fn remote_read(base: &str) -> Read {
        let req = proto::ReadRequest {
            queries: vec![proto::Query {
                start_timestamp_ms: T0 - DAY,
                end_timestamp_ms: T0 + 3 * DAY,
                matchers: vec![proto::LabelMatcher {
                    r#type: MatcherType::Re as i32,
                    name: "__name__".into(),
                    value: "chh_.*".into(),
                }],
                hints: None,
            }],
            accepted_response_types: vec![ResponseType::Samples as i32],
        };
        let resp = V1_HEADERS
            .iter()
            .fold(client().post(format!("{base}/api/v1/read")), |r, (k, v)| r.header(*k, *v))
            .body(snappy_body(&req))
            .send()
            .expect("remote read");
        let status = resp.status().as_u16();
        let body = resp.bytes().unwrap().to_vec();
        assert_eq!(status, 200, "remote read: {}", String::from_utf8_lossy(&body));
        let raw = saltdb::remote::decode::decompress(&body, 64 << 20).expect("snappy response");
        let resp = proto::ReadResponse::decode(raw.as_slice()).expect("ReadResponse");
        let mut out = Read::new();
        for ts in resp.results.into_iter().flat_map(|r| r.timeseries) {
            let labels = ts.labels.iter().map(|l| (l.name.clone(), l.value.clone())).collect();
            out.insert(labels, (ts.samples, ts.histograms));
        }
        out
    }

    /// Equal series, samples and histograms field by field, floats compared by their bits.
    fn assert_same(got: &Read, want: &Read, when: &str) {
        let bits = |h: &proto::Histogram| format!("{h:?} sum bits {:x}", h.sum.to_bits());
        let sample_bits = |s: &proto::Sample| (s.timestamp, s.value.to_bits());
        assert_eq!(got.keys().collect::<Vec<_>>(), want.keys().collect::<Vec<_>>(), "{when}");
        for (labels, (samples, hs)) in want {
            let (got_samples, got_hs) = &got[labels];
            assert_eq!(
                got_samples.iter().map(sample_bits).collect::<Vec<_>>(),
                samples.iter().map(sample_bits).collect::<Vec<_>>(),
                "{when}: {labels:?}"
            );
            assert_eq!(
                got_hs.iter().map(bits).collect::<Vec<_>>(),
                hs.iter().map(bits).collect::<Vec<_>>(),
                "{when}: {labels:?}"
            );
        }
    }

    pub(crate) fn node(dir: &std::path::Path, urls: &str) -> Binary {
        Binary::spawn(
            dir,
            &["--storage", "clickhouse", "--clickhouse-url", urls, "--retention", "0", "--enable-admin-api"],
        )
    }

    /// Histograms written by remote-write 1.0 through one node and 2.0 through another read back
    /// bit for bit from both nodes (every form: integer and float, gauge, custom buckets, hints,
    /// stale markers; a series switching between floats and histograms), after a retried write,
    /// after their days are sealed into histogram chunks, and after a delete cuts into them.
    #[test]
    fn histograms_read_back_bit_for_bit_across_a_retry_a_seal_a_delete_and_two_nodes() {
        let test = "histograms_read_back_bit_for_bit_across_a_retry_a_seal_a_delete_and_two_nodes";
        let dir = tempfile::tempdir().unwrap();
        let Some(shards) = cluster(dir.path(), test) else { return };
        let urls = shards.iter().map(|s| s.url.as_str()).collect::<Vec<_>>().join(",");
        let (a, b) = (node(&dir.path().join("node-a"), &urls), node(&dir.path().join("node-b"), &urls));
        let (req1, mut want) = v1_request();
        let (req2, want2) = v2_request();
        want.extend(want2);
        for _ in 0..2 {
            // The second time round, a retry: nothing doubles.
            let (status, _, text) = post(&a.url("/api/v1/write"), &V1_HEADERS, snappy_body(&req1));
            assert_eq!((status, text.as_str()), (204, ""));
            let (status, h, text) = post(&b.url("/api/v1/write"), &V2_HEADERS, snappy_body(&req2));
            assert_eq!((status, text.as_str()), (204, ""));
            assert_eq!(h["x-prometheus-remote-write-samples-written"], "72");
            assert_eq!(h["x-prometheus-remote-write-histograms-written"], "216");
        }
        let total: usize = want.values().map(|(s, h)| s.len() + h.len()).sum();
        let rows = |sql: &str| per_shard_count(&shards, sql);
        assert!(
            rows("SELECT count() FROM saltdb.samples WHERE histogram != ''").iter().all(|&n| n > 0),
            "both shards hold some"
        );
        for n in [&a, &b] {
            assert_same(&remote_read(&n.url("")), &want, "written and retried");
        }
        // A query on histograms answers through the node.
        let v = crate::common::get_json(&a.url(&format!(
            "/api/v1/query?query=histogram_count(chh_v1%7Bform%3D%22integer%22,k%3D%220%22%7D)&time={}",
            (times()[3] + 1) as f64 / 1000.0
        )));
        assert_eq!(v["data"]["result"][0]["value"][1], "18", "{v}");

        // Seal both days (a third node, sealing rows inserted 50 ms before it starts).
        let mut config = ClickHouseConfig::new(shards.iter().map(|s| s.url.clone()).collect());
        config.seal_margin_ms = Some(50);
        let sealer = ClickHouse::open(config).unwrap();
        std::thread::sleep(Duration::from_millis(100));
        let sealed = sealer.seal_closed_days(chrono::Utc::now().timestamp_millis()).unwrap();
        // Rows of the retried write that ClickHouse has not merged yet are read (and dropped) too.
        assert!((total as u64..=2 * total as u64).contains(&sealed.samples), "{total} samples: {sealed:?}");
        assert_eq!(rows("SELECT count() FROM saltdb.samples").iter().sum::<u64>(), 0);
        let hist_chunks = rows("SELECT count() FROM saltdb.chunks WHERE substring(data, 1, 1) = unhex('A1')");
        let days: std::collections::BTreeSet<i64> = times().iter().map(|t| t.div_euclid(DAY)).collect();
        assert_eq!(hist_chunks.iter().sum::<u64>(), 14 * days.len() as u64, "one histogram chunk per series and day");
        let bytes = rows("SELECT sum(length(data)) FROM saltdb.chunks WHERE substring(data, 1, 1) = unhex('A1')")
            .iter()
            .sum::<u64>();
        let histograms: usize = want.values().map(|(_, h)| h.len()).sum();
        println!(
            "clickhouse: {histograms} histograms sealed into {bytes} B of histogram chunks ({:.2} B/histogram)",
            bytes as f64 / histograms as f64
        );
        for n in [&a, &b] {
            assert_same(&remote_read(&n.url("")), &want, "sealed");
        }

        // A late write over a sealed day: a float replaces a histogram, a histogram a float.
        let t = times();
        let late = v2::Request {
            symbols: ["", "__name__", "chh_v2_mixed", "job", "v2"].map(String::from).to_vec(),
            timeseries: vec![v2::TimeSeries {
                labels_refs: vec![1, 2, 3, 4],
                samples: vec![proto::Sample { value: -1.5, timestamp: t[1] }],
                histograms: vec![integer(t[2], 7)],
                ..Default::default()
            }],
        };
        let (status, _, text) = post(&a.url("/api/v1/write"), &V2_HEADERS, snappy_body(&late));
        assert_eq!((status, text.as_str()), (204, ""));
        let mixed = want.get_mut(&labels(&[("__name__", "chh_v2_mixed"), ("job", "v2")])).unwrap();
        mixed.1.retain(|h| h.timestamp != t[1]);
        mixed.0.retain(|s| s.timestamp != t[2]);
        mixed.0.insert(1, proto::Sample { value: -1.5, timestamp: t[1] });
        let at = mixed.1.iter().position(|h| h.timestamp > t[2]).unwrap();
        mixed.1.insert(at, integer(t[2], 7));
        for n in [&a, &b] {
            assert_same(&remote_read(&n.url("")), &want, "late writes over sealed samples");
        }

        // A delete cutting through both days of the integer forms, through node b.
        let (from, to) = (t[30], t[100]);
        let resp = client()
            .post(b.url("/api/v1/admin/tsdb/delete_series"))
            .form(&[
                ("match[]", r#"{form="integer"}"#),
                ("match[]", r#"{__name__="chh_v2_mixed"}"#),
                ("start", &(from as f64 / 1000.0).to_string()),
                ("end", &(to as f64 / 1000.0).to_string()),
            ])
            .send()
            .unwrap();
        assert_eq!(resp.status().as_u16(), 204, "{}", resp.text().unwrap_or_default());
        for (l, (s, h)) in want.iter_mut() {
            if l.get("form").map(String::as_str) == Some("integer") || l["__name__"] == "chh_v2_mixed" {
                s.retain(|p| !(from..=to).contains(&p.timestamp));
                h.retain(|p| !(from..=to).contains(&p.timestamp));
            }
        }
        for n in [&a, &b] {
            assert_same(&remote_read(&n.url("")), &want, "after a delete");
        }
        a.terminate();
        b.terminate();
    }

    /// A shard down while a request of histograms (and a float) for series on it is written:
    /// 503 with `Retry-After` naming the shard, and once it is back nothing of the request is
    /// there; a request for series of the live shard succeeds meanwhile.
    #[test]
    fn a_shard_down_during_a_histogram_write_is_a_503_with_nothing_partial() {
        let test = "a_shard_down_during_a_histogram_write_is_a_503_with_nothing_partial";
        let dir = tempfile::tempdir().unwrap();
        let Some(mut shards) = cluster(dir.path(), test) else { return };
        let urls = shards.iter().map(|s| s.url.as_str()).collect::<Vec<_>>().join(",");
        let a = node(&dir.path().join("node"), &urls);
        // Learn where 16 series live: write one float each, ask each shard.
        let probe: Vec<proto::TimeSeries> = (0..16)
            .map(|k| series(&[("__name__", "chh_down"), ("k", k.to_string().as_str())], &[(T0 - 60_000, 1.0)]))
            .collect();
        let req = proto::WriteRequest { timeseries: probe, metadata: vec![] };
        assert_eq!(post(&a.url("/api/v1/write"), &V1_HEADERS, snappy_body(&req)).0, 204);
        let on = |shard: usize| -> Vec<String> {
            let sql = "SELECT values[indexOf(names, 'k')] FROM saltdb.series FORMAT TSV";
            let text = client().post(format!("{}/", shards[shard].url)).body(sql).send().unwrap().text().unwrap();
            text.lines().map(str::to_owned).collect()
        };
        let (on0, on1) = (on(0), on(1));
        assert!(!on0.is_empty() && !on1.is_empty(), "16 series over two shards: {on0:?} {on1:?}");
        let request = |ks: &[String]| {
            let timeseries = ks
                .iter()
                .map(|k| {
                    let mut ts = series(&[("__name__", "chh_down"), ("k", k.as_str())], &[(T0 + 1, 2.0)]);
                    ts.histograms = times().into_iter().skip(1).zip(0..).map(|(t, i)| integer(t, i)).collect();
                    ts
                })
                .collect();
            proto::WriteRequest { timeseries, metadata: vec![] }
        };
        shards[1].kill9();
        let (status, headers, text) = post(&a.url("/api/v1/write"), &V1_HEADERS, snappy_body(&request(&on1)));
        assert_eq!(status, 503, "{text}");
        assert_eq!(headers["retry-after"], "1");
        assert!(text.contains(&shards[1].url), "{text}");
        let (status, _, text) = post(&a.url("/api/v1/write"), &V1_HEADERS, snappy_body(&request(&on0)));
        assert_eq!((status, text.as_str()), (204, ""), "the live shard takes writes");
        shards[1].restart();
        let read = remote_read(&a.url(""));
        for (l, (s, h)) in &read {
            let k = &l["k"];
            if on1.contains(k) {
                assert_eq!((s.len(), h.len()), (1, 0), "{k}: only the probe, nothing of the refused write");
            } else {
                assert_eq!((s.len(), h.len()), (2, times().len() - 1), "{k}");
            }
        }
        assert_eq!(read.len(), 16);
        a.terminate();
    }
}

/// Exemplars on ClickHouse, through real HTTP, as `tests/it/exemplars.rs` checks them on the
/// embedded store: stored with their write and counted as Prometheus counts them (one over
/// 128 label characters dropped, one out of order within the write dropped), answered by
/// `/api/v1/query_exemplars` in Prometheus' shape by another node, without a warning.
mod exemplars {
    use saltdb::remote::proto;
    use saltdb::remote::snappy_body;

    use super::cluster;
    use super::histograms::node;
    use crate::common::{post, recent_ms, V1_HEADERS, V2_HEADERS};
    use crate::remote_write::{metric_value, metrics};

    #[test]
    fn remote_write_exemplars_are_stored_on_clickhouse_and_answered_by_any_node() {
        let test = "remote_write_exemplars_are_stored_on_clickhouse_and_answered_by_any_node";
        let dir = tempfile::tempdir().unwrap();
        let Some(shards) = cluster(dir.path(), test) else { return };
        let urls = shards.iter().map(|s| s.url.as_str()).collect::<Vec<_>>().join(",");
        let (a, b) = (node(&dir.path().join("node-a"), &urls), node(&dir.path().join("node-b"), &urls));
        let t0 = recent_ms() - 600_000;
        let req = crate::exemplars::three_exemplars(t0);
        let (status, h, text) = post(&a.url("/api/v1/write"), &V2_HEADERS, snappy_body(&req));
        assert_eq!((status, text.as_str()), (204, ""));
        assert_eq!(h["x-prometheus-remote-write-samples-written"], "1");
        assert_eq!(h["x-prometheus-remote-write-exemplars-written"], "1");
        // 1.0: an exemplar for the same series, newer; sent twice (a retry): one kept.
        let ts = crate::exemplars::newer_exemplar(t0);
        for _ in 0..2 {
            let body = snappy_body(&proto::WriteRequest { timeseries: vec![ts.clone()], metadata: vec![] });
            let (status, _, text) = post(&a.url("/api/v1/write"), &V1_HEADERS, body);
            assert_eq!((status, text.as_str()), (204, ""));
        }
        let got = crate::exemplars::exemplars_around(&b.url(""), t0);
        assert!(got.get("warnings").is_none(), "{got}");
        crate::exemplars::assert_a1_and_c3_kept(&got);
        assert_eq!(got["data"].as_array().map(Vec::len), Some(1), "{got}");
        let m = metrics(&a.url(""));
        assert_eq!(
            metric_value(&m, r#"saltdb_samples_rejected_total{protocol="remote_write_v2",reason="exemplar"}"#),
            2.0
        );
        a.terminate();
        b.terminate();
    }

    /// One series spread over several entries of a request: each entry's exemplars are stored
    /// and counted, an older or repeated one of a later entry is dropped and not counted,
    /// as on the embedded store (see `crate::exemplars`).
    #[test]
    fn exemplars_of_one_series_spread_over_entries_are_stored_and_counted_on_clickhouse() {
        let test = "exemplars_of_one_series_spread_over_entries_are_stored_and_counted_on_clickhouse";
        let dir = tempfile::tempdir().unwrap();
        let Some(shards) = cluster(dir.path(), test) else { return };
        let urls = shards.iter().map(|s| s.url.as_str()).collect::<Vec<_>>().join(",");
        let (a, b) = (node(&dir.path().join("node-a"), &urls), node(&dir.path().join("node-b"), &urls));
        crate::exemplars::assert_spread_entries_are_stored_and_counted(&a.url(""), &b.url(""));
        a.terminate();
        b.terminate();
    }
}
