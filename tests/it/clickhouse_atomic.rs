//! Writes spanning both shards of a ClickHouse cluster are all or nothing (issue 16): a shard
//! down, or the commit point failing after every shard took its rows, leaves nothing of the
//! write visible (query, export, remote read, from any node, after the shard is back and after
//! a seal), and the client's retry then stores every sample exactly once. Also the in-place
//! upgrade of a version-4 database (before write ids) to version 5.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use saltdb::clickhouse::{ClickHouse, ClickHouseConfig, CommitHook};
use saltdb::matcher::Matcher;
use saltdb::remote::proto;
use saltdb::remote::snappy_body;
use saltdb::sample::{PackedBatch, Sample, StartTimestamp};
use saltdb::storage::{Querier, ReadLimits, Storage, StorageError};

use crate::clickhouse::histograms::{node, remote_read};
use crate::clickhouse::{cluster, compare_answers, data, per_shard_count, DAY, T0};
use crate::clickhouse_cluster::Shard;
use crate::common::{client, export, get_json, post, series, storage_config, V1_HEADERS};

/// Series `chh_atomic{k="0".."15"}` (over both shards: all 16 on one has odds 2^-15), ten
/// samples and an exemplar each, as a remote-write request.
fn request() -> proto::WriteRequest {
    let timeseries = (0..16)
        .map(|k| {
            let samples: Vec<(i64, f64)> = (0..10).map(|i| (T0 + i * 60_000, (k * 100 + i) as f64)).collect();
            let mut ts = series(&[("__name__", "chh_atomic"), ("k", k.to_string().as_str())], &samples);
            ts.exemplars = vec![proto::Exemplar {
                labels: vec![proto::Label { name: "trace_id".into(), value: format!("t{k}") }],
                value: 0.5,
                timestamp: T0 + 60_000,
            }];
            ts
        })
        .collect();
    proto::WriteRequest { timeseries, metadata: vec![] }
}

/// The same series as a batch for the library, each sample with a start timestamp 30 s
/// before the first (`starts` rows).
fn batch() -> PackedBatch {
    let mut batch = PackedBatch::default();
    for k in 0..16 {
        batch.push_label("__name__", "chh_atomic");
        batch.push_label("k", &k.to_string());
        for i in 0..10 {
            batch.push_sample(Sample::new(T0 + i * 60_000, (k * 100 + i) as f64));
            batch.push_start(StartTimestamp { timestamp_ms: T0 + i * 60_000, start_ms: T0 - 30_000 });
        }
        batch.finish_series();
    }
    batch
}

/// `sql`'s number on one shard.
fn count_on(shard: &Shard, sql: &str) -> u64 {
    per_shard_count(std::slice::from_ref(shard), sql)[0]
}

const ROWS_OF_WRITES: &str = "SELECT count() FROM saltdb.samples WHERE write_id != 0";

/// The series with exemplars of `chh_atomic` through `base` (`/api/v1/query_exemplars`), and
/// how many exemplars they have.
fn exemplars(base: &str, when: &str) -> (usize, usize) {
    let v = get_json(&format!(
        "{base}/api/v1/query_exemplars?query=chh_atomic&start={}&end={}",
        T0 / 1000 - 60,
        (T0 + DAY) / 1000
    ));
    assert_eq!(v["status"], "success", "{when}: {v}");
    let series = v["data"].as_array().cloned().unwrap_or_default();
    let total = series.iter().map(|s| s["exemplars"].as_array().map_or(0, Vec::len)).sum();
    (series.len(), total)
}

/// Nothing of `chh_atomic` through `base`: query, range query, export, remote read, exemplars.
fn assert_none_visible(base: &str, when: &str) {
    assert_eq!(exemplars(base, when), (0, 0), "{when}: exemplars");
    let at = (T0 + 5 * 60_000) as f64 / 1000.0;
    let v = get_json(&format!("{base}/api/v1/query?query=count(chh_atomic)&time={at}"));
    assert_eq!(v["status"], "success", "{when}: {v}");
    assert_eq!(v["data"]["result"].as_array().map(Vec::len), Some(0), "{when}: {v}");
    let v = get_json(&format!(
        "{base}/api/v1/query_range?query=chh_atomic&start={}&end={}&step=60",
        T0 / 1000,
        (T0 + DAY) / 1000
    ));
    assert_eq!(v["data"]["result"].as_array().map(Vec::len), Some(0), "{when}: {v}");
    assert!(export(base, r#"{__name__="chh_atomic"}"#).is_empty(), "{when}: export");
    assert!(remote_read(base).is_empty(), "{when}: remote read");
}

/// Every sample of the request through `base`, exactly once (export and remote read).
fn assert_all_once(base: &str, when: &str) {
    let exported = export(base, r#"{__name__="chh_atomic"}"#);
    assert_eq!(exported.len(), 16, "{when}");
    for (labels, samples) in &exported {
        let k: i64 = labels["k"].parse().unwrap();
        let want: Vec<(i64, u64)> = (0..10).map(|i| (T0 + i * 60_000, ((k * 100 + i) as f64).to_bits())).collect();
        assert_eq!(samples, &want, "{when}: {labels:?}");
    }
    assert_eq!(exemplars(base, when), (16, 16), "{when}: exemplars");
    let read = remote_read(base);
    assert_eq!(read.len(), 16, "{when}");
    assert!(read.values().all(|(s, h)| s.len() == 10 && h.is_empty()), "{when}");
}

/// A sealer over `urls` that takes every row inserted 50 ms before it starts.
fn sealer(urls: Vec<String>) -> ClickHouse {
    let mut config = ClickHouseConfig::new(urls);
    config.seal_margin_ms = Some(50);
    ClickHouse::open(config).unwrap()
}

/// Issue 16: a remote write spanning both shards while shard 1 is down is a 503 with
/// `Retry-After` naming it; shard 0 took its share, yet none of it is visible from either node,
/// neither after shard 1 is back nor after a seal (which deletes the aborted rows). The
/// client's retry stores every sample once, and a replay of it duplicates nothing.
#[test]
fn a_write_spanning_shards_with_one_down_shows_nothing_until_retried() {
    let test = "a_write_spanning_shards_with_one_down_shows_nothing_until_retried";
    let dir = tempfile::tempdir().unwrap();
    let Some(mut shards) = cluster(dir.path(), test) else { return };
    let urls: Vec<String> = shards.iter().map(|s| s.url.clone()).collect();
    let (a, b) = (node(&dir.path().join("node-a"), &urls.join(",")), node(&dir.path().join("node-b"), &urls.join(",")));
    shards[1].kill9();
    let (status, headers, text) = post(&a.url("/api/v1/write"), &V1_HEADERS, snappy_body(&request()));
    assert_eq!(status, 503, "{text}");
    assert_eq!(headers["retry-after"], "1");
    assert!(text.contains(&shards[1].url), "{text}");
    let partial = count_on(&shards[0], ROWS_OF_WRITES);
    assert!(partial > 0 && partial < 160, "shard 0 took its share of the write: {partial} rows");
    shards[1].restart();
    for n in [&a, &b] {
        assert_none_visible(&n.url(""), "shard 1 back");
    }
    std::thread::sleep(Duration::from_millis(100));
    let sealed = sealer(urls.clone()).seal_closed_days(chrono::Utc::now().timestamp_millis()).unwrap();
    assert_eq!((sealed.samples, sealed.aborted, sealed.chunks), (0, partial, 0), "{sealed:?}");
    assert_eq!(per_shard_count(&shards, "SELECT count() FROM saltdb.samples"), [0, 0]);
    for n in [&a, &b] {
        assert_none_visible(&n.url(""), "after a seal");
    }
    // The client retries (through the other node), then replays the same request.
    for _ in 0..2 {
        let (status, _, text) = post(&b.url("/api/v1/write"), &V1_HEADERS, snappy_body(&request()));
        assert_eq!((status, text.as_str()), (204, ""));
        for n in [&a, &b] {
            assert_all_once(&n.url(""), "retried");
        }
    }
    std::thread::sleep(Duration::from_millis(100));
    let sealed = sealer(urls).seal_closed_days(chrono::Utc::now().timestamp_millis()).unwrap();
    assert_eq!((sealed.samples, sealed.aborted), (320, 0), "both copies folded into one: {sealed:?}");
    for n in [&a, &b] {
        assert_all_once(&n.url(""), "retried and sealed");
    }
    a.terminate();
    b.terminate();
}

/// Issue 16: the commit point failing after every shard took its rows (the coordinator, shard
/// 0, killed between the data inserts and the commit record, by the writer's test hook): the
/// write fails naming it, nothing is visible to this node or a fresh one once it is back, a seal
/// removes the rows from both shards, and the retry completes the write.
#[test]
fn a_write_whose_commit_fails_after_its_inserts_shows_nothing_until_retried() {
    let test = "a_write_whose_commit_fails_after_its_inserts_shows_nothing_until_retried";
    let dir = tempfile::tempdir().unwrap();
    let Some(mut shards) = cluster(dir.path(), test) else { return };
    let urls: Vec<String> = shards.iter().map(|s| s.url.clone()).collect();
    let shard1 = shards.pop().unwrap();
    let shard0 = Arc::new(Mutex::new(shards.pop().unwrap()));
    let armed = Arc::new(AtomicBool::new(false));
    let mut config = ClickHouseConfig::new(urls.clone());
    config.timeout = Duration::from_secs(5);
    let (hook_armed, hook_shard) = (armed.clone(), shard0.clone());
    config.commit_hook = Some(CommitHook(Arc::new(move || {
        if hook_armed.swap(false, Ordering::SeqCst) {
            hook_shard.lock().unwrap().kill9();
        }
    })));
    let writer = ClickHouse::open(config).unwrap();
    armed.store(true, Ordering::SeqCst);
    match writer.write(&batch()) {
        Err(StorageError::Unavailable(msg)) => assert!(msg.contains(&urls[0]), "{msg}"),
        other => panic!("a write whose commit failed gave {other:?}"),
    }
    assert!(!armed.load(Ordering::SeqCst), "the hook ran");
    shard0.lock().unwrap().restart();
    let all = [Matcher::equal("__name__", "chh_atomic")];
    let stored = |sql: &str| [count_on(&shard0.lock().unwrap(), sql), count_on(&shard1, sql)];
    let rows = stored(ROWS_OF_WRITES);
    assert!(rows.iter().all(|&n| n > 0) && rows.iter().sum::<u64>() == 160, "both shards took their rows: {rows:?}");
    let fresh = ClickHouse::open(ClickHouseConfig::new(urls.clone())).unwrap();
    for n in [&writer, &fresh] {
        let q = n.querier(ReadLimits::none());
        let found = q.select(&all, T0 - DAY, T0 + DAY, None).unwrap();
        assert!(found.is_empty(), "{} series visible", found.len());
        let starts = q.start_timestamps(&all, T0 - DAY, T0 + DAY).unwrap();
        assert!(starts.is_empty(), "start timestamps of {} series visible", starts.len());
    }
    std::thread::sleep(Duration::from_millis(100));
    let sealed = sealer(urls).seal_closed_days(chrono::Utc::now().timestamp_millis()).unwrap();
    assert_eq!((sealed.samples, sealed.aborted, sealed.chunks), (0, 160, 0), "{sealed:?}");
    assert_eq!(stored("SELECT count() FROM saltdb.samples"), [0, 0]);
    assert_eq!(writer.write(&batch()).unwrap(), 160);
    for n in [&writer, &fresh] {
        let found = n.querier(ReadLimits::none()).select(&all, T0 - DAY, T0 + DAY, None).unwrap();
        assert_eq!(found.len(), 16);
        for s in &found {
            let k: i64 = s.labels.get("k").unwrap().parse().unwrap();
            let want: Vec<Sample> = (0..10).map(|i| Sample::new(T0 + i * 60_000, (k * 100 + i) as f64)).collect();
            assert_eq!(s.samples, want);
        }
        let starts = n.querier(ReadLimits::none()).start_timestamps(&all, T0 - DAY, T0 + DAY).unwrap();
        assert_eq!(starts.len(), 16);
        for s in &starts {
            let points: Vec<(i64, i64)> = s.changes.iter().map(|c| (c.timestamp_ms, c.start_ms)).collect();
            let want: Vec<(i64, i64)> =
                (0..10).flat_map(|i| [(T0 + i * 60_000, T0 - 30_000), (T0 + i * 60_000 + 1, 0)]).collect();
            assert_eq!(points, want, "{:?}", s.labels);
        }
    }
    assert_eq!(stored("SELECT count() FROM saltdb.commits"), [1, 0], "one commit record, of the retry, on shard 0");
}

/// A database of schema version 4 (no `write_id`, no `commits`, no `exemplars`) is upgraded in place: the
/// column joins both tables' sorting keys, old rows read as committed, writes spanning shards
/// commit, and a second open changes nothing.
#[test]
fn a_version_4_database_is_upgraded_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let Some(shards) = cluster(dir.path(), "a_version_4_database_is_upgraded_in_place") else { return };
    let urls: Vec<String> = shards.iter().map(|s| s.url.clone()).collect();
    let old = data();
    ClickHouse::open(ClickHouseConfig::new(urls.clone())).unwrap().write(&PackedBatch::from(&old)).unwrap();
    // Back to version 4's tables, as a node of the previous release left them.
    let http = client();
    for sql in [
        "CREATE TABLE saltdb.samples_v4 (bucket UInt16, series_id UInt64, ts Int64, value UInt64, \
         inserted_at Int64 DEFAULT 0, histogram String DEFAULT '') ENGINE = ReplacingMergeTree \
         PARTITION BY intDiv(ts, 86400000) ORDER BY (bucket, series_id, ts)",
        "INSERT INTO saltdb.samples_v4 SELECT bucket, series_id, ts, value, inserted_at, histogram FROM saltdb.samples",
        "DROP TABLE saltdb.samples",
        "RENAME TABLE saltdb.samples_v4 TO saltdb.samples",
        "DROP TABLE saltdb.starts",
        "CREATE TABLE saltdb.starts (bucket UInt16, series_id UInt64, ts Int64, start Int64) \
         ENGINE = ReplacingMergeTree PARTITION BY intDiv(ts, 86400000) ORDER BY (bucket, series_id, ts)",
        "DROP TABLE saltdb.commits",
        "DROP TABLE saltdb.exemplars",
        "DROP TABLE saltdb.schema_version",
        "CREATE TABLE saltdb.schema_version (version UInt32) ENGINE = ReplacingMergeTree ORDER BY version",
        "INSERT INTO saltdb.schema_version VALUES (4)",
    ] {
        for sh in &shards {
            let resp = http.post(format!("{}/", sh.url)).body(sql).send().unwrap();
            assert!(resp.status().is_success(), "{sql}: {}", resp.text().unwrap_or_default());
        }
    }
    let write_ids = "SELECT count() FROM system.columns WHERE database = 'saltdb' AND table IN ('samples', 'starts') \
                     AND name = 'write_id'";
    assert_eq!(per_shard_count(&shards, write_ids), [0, 0]);
    let upgraded = ClickHouse::open(ClickHouseConfig::new(urls.clone())).unwrap();
    assert_eq!(per_shard_count(&shards, "SELECT max(version) FROM saltdb.schema_version"), [5, 5]);
    assert_eq!(per_shard_count(&shards, write_ids), [2, 2]);
    let keyed = "SELECT count() FROM system.tables WHERE database = 'saltdb' AND name IN ('samples', 'starts') \
                 AND position(create_table_query, 'ORDER BY (bucket, series_id, ts, write_id)') > 0";
    assert_eq!(per_shard_count(&shards, keyed), [2, 2]);
    assert_eq!(
        per_shard_count(
            &shards,
            "SELECT count() FROM system.tables WHERE database = 'saltdb' AND name IN ('commits', 'exemplars')"
        ),
        [2, 2]
    );
    ClickHouse::open(ClickHouseConfig::new(urls)).unwrap();
    assert_eq!(per_shard_count(&shards, "SELECT count() FROM saltdb.schema_version"), [2, 2]);
    let mut embedded_config = storage_config(&dir.path().join("embedded"));
    embedded_config.retention_ms = None;
    let embedded = Storage::open(embedded_config).unwrap();
    embedded.write(old).unwrap();
    let (eq, cq) = (embedded.querier(ReadLimits::none()), upgraded.querier(ReadLimits::none()));
    compare_answers(&eq, &cq, "after the upgrade to version 5");
    // A write spanning shards on the upgraded tables commits and reads back.
    assert_eq!(upgraded.write(&batch()).unwrap(), 160);
    assert!(per_shard_count(&shards, ROWS_OF_WRITES).iter().all(|&n| n > 0));
    let found = upgraded
        .querier(ReadLimits::none())
        .select(&[Matcher::equal("__name__", "chh_atomic")], T0, T0 + DAY, None)
        .unwrap();
    assert_eq!(found.iter().map(|s| s.samples.len()).sum::<usize>(), 160);
}
