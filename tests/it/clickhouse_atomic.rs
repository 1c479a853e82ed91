//! Writes spanning both shards of a ClickHouse cluster are all or nothing (issue 16): a shard
//! down, or the commit point failing after every shard took its rows, leaves nothing of the
//! write visible (query, export, remote read, from any node, after the shard is back and after
//! a seal), and the client's retry then stores every sample exactly once. The write's new
//! series are not listed either (series, label names, label values) until the retry. Also the
//! in-place upgrades of a version-4 database (before write ids) and of a version-5 one (before
//! the postings' write ids).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use saltdb::clickhouse::{ClickHouse, ClickHouseConfig, CommitHook, Sealed, Settled};
use saltdb::matcher::Matcher;
use saltdb::remote::proto;
use saltdb::remote::snappy_body;
use saltdb::sample::{PackedBatch, Sample, StartTimestamp, WriteBatch};
use saltdb::storage::{Querier, ReadLimits, Storage, StorageError};

use crate::clickhouse::histograms::{node, remote_read};
use crate::clickhouse::{cluster, compare_answers, data, on_every_shard, per_shard_count, DAY, T0};
use crate::clickhouse_cluster::Shard;
use crate::common::{export, get_json, post, series, storage_config, V1_HEADERS};

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

/// What `/api/v1/series`, `/api/v1/labels` and `/api/v1/label/<name>/values` through `base`
/// list of the request's series: series, whether label `k` is a name, values of `k`, whether
/// `chh_atomic` is a value of `__name__`.
fn listed(base: &str, when: &str) -> (usize, bool, usize, bool) {
    let data = |path: &str| {
        let v = get_json(&format!("{base}{path}"));
        assert_eq!(v["status"], "success", "{when}: {path}: {v}");
        v["data"].as_array().cloned().unwrap_or_default()
    };
    let series = data("/api/v1/series?match[]=chh_atomic").len();
    let names = data("/api/v1/labels").iter().any(|n| n == "k");
    let values = data("/api/v1/label/k/values").len();
    let metric = data("/api/v1/label/__name__/values").iter().any(|n| n == "chh_atomic");
    (series, names, values, metric)
}

/// Nothing of `chh_atomic` through `base`: query, range query, export, remote read, exemplars,
/// and its series and labels are not listed.
fn assert_none_visible(base: &str, when: &str) {
    assert_eq!(listed(base, when), (0, false, 0, false), "{when}: series, label names, k's values, metric names");
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

/// The library's series, label names and label values (all, and of `k`) list nothing of the
/// request through `store`.
fn assert_none_listed(store: &ClickHouse, when: &str) {
    let q = store.querier(ReadLimits::none());
    let all = [Matcher::equal("__name__", "chh_atomic")];
    let (start, end) = (T0 - DAY, T0 + DAY);
    assert_eq!(q.series(&all, start, end, None).unwrap().len(), 0, "{when}: series");
    assert_eq!(q.label_names(&[], start, end, None).unwrap(), Vec::<String>::new(), "{when}: label names");
    assert_eq!(q.label_values("k", &[], start, end, None).unwrap(), Vec::<String>::new(), "{when}: k's values");
    assert_eq!(q.label_values("k", &all, start, end, None).unwrap(), Vec::<String>::new(), "{when}: k's values");
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
    assert_eq!(listed(base, when), (16, true, 16, true), "{when}: series, label names, k's values, metric names");
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

/// A maintenance pass of a [`sealer`] over `urls`: the seal of closed days, then the settling of
/// postings; what both did.
fn maintain(urls: Vec<String>) -> (Sealed, Settled) {
    std::thread::sleep(Duration::from_millis(100));
    let store = sealer(urls);
    let now = chrono::Utc::now().timestamp_millis();
    (store.seal_closed_days(now).unwrap(), store.settle_postings(now).unwrap())
}

const POSTINGS_OF_WRITES: &str = "SELECT count() FROM saltdb.postings WHERE write_id != 0";

/// Issue 16: a remote write spanning both shards while shard 1 is down is a 503 with
/// `Retry-After` naming it; shard 0 took its share, yet none of it is visible from either node,
/// neither after shard 1 is back nor after a maintenance pass (whose seal deletes the aborted
/// rows and whose settling deletes their postings); its new series are not listed. The
/// client's retry through the node that got the 503 (which must not remember the series as
/// indexed) stores every sample once and lists the series, and a replay of it through the other
/// node duplicates nothing.
#[test]
fn a_write_spanning_shards_with_one_down_shows_nothing_until_retried() {
    let test = "a_write_spanning_shards_with_one_down_shows_nothing_until_retried";
    let dir = tempfile::tempdir().unwrap();
    let Some(mut shards) = cluster(dir.path(), test) else { return };
    let urls: Vec<String> = shards.iter().map(|s| s.url.clone()).collect();
    let (a, b) = (node(&dir.path().join("node-a"), &urls.join(",")), node(&dir.path().join("node-b"), &urls.join(",")));
    let mut partial_config = ClickHouseConfig::new(urls.clone());
    partial_config.partial_reads = true;
    let partial_reader = ClickHouse::open(partial_config).unwrap();
    shards[1].kill9();
    let (status, headers, text) = post(&a.url("/api/v1/write"), &V1_HEADERS, snappy_body(&request()));
    assert_eq!(status, 503, "{text}");
    assert_eq!(headers["retry-after"], "1");
    assert!(text.contains(&shards[1].url), "{text}");
    let partial = count_on(&shards[0], ROWS_OF_WRITES);
    assert!(partial > 0 && partial < 160, "shard 0 took its share of the write: {partial} rows");
    assert!(count_on(&shards[0], POSTINGS_OF_WRITES) > 0, "shard 0 took the postings of its series");
    assert!(count_on(&shards[0], "SELECT count() FROM saltdb.exemplars") > 0, "and its exemplars");
    // Shard 0 holds the postings of its share, uncommitted: a reader answering from it alone
    // lists none of them.
    assert_none_listed(&partial_reader, "shard 1 down, partial reads");
    shards[1].restart();
    for n in [&a, &b] {
        assert_none_visible(&n.url(""), "shard 1 back");
    }
    let (sealed, settled) = maintain(urls.clone());
    assert_eq!((sealed.samples, sealed.aborted, sealed.chunks), (0, partial, 0), "{sealed:?}");
    assert_eq!((settled.committed, settled.aborted), (0, 1), "{settled:?}");
    assert_eq!(count_on(&shards[0], "SELECT count() FROM saltdb.exemplars"), 0, "the seal deleted the exemplars");
    assert_eq!(per_shard_count(&shards, "SELECT count() FROM saltdb.samples"), [0, 0]);
    assert_eq!(per_shard_count(&shards, "SELECT count() FROM saltdb.postings"), [0, 0]);
    for n in [&a, &b] {
        assert_none_visible(&n.url(""), "after a seal");
    }
    // The client retries through the node that got the 503, then replays the request through
    // the other one.
    for n in [&a, &b] {
        let (status, _, text) = post(&n.url("/api/v1/write"), &V1_HEADERS, snappy_body(&request()));
        assert_eq!((status, text.as_str()), (204, ""));
        for n in [&a, &b] {
            assert_all_once(&n.url(""), "retried");
        }
    }
    // Each series' postings carry both writes' ids (neither node knew it): listed from both.
    let twice = "SELECT count() FROM (SELECT series_id FROM saltdb.postings GROUP BY series_id \
                 HAVING min(write_id) != 0 AND uniqExact(write_id) = 2)";
    assert_eq!(per_shard_count(&shards, twice).iter().sum::<u64>(), 16);
    let (sealed, settled) = maintain(urls);
    assert_eq!((sealed.samples, sealed.aborted), (320, 0), "both copies folded into one: {sealed:?}");
    assert_eq!((settled.committed, settled.aborted), (4, 0), "two write ids on both shards: {settled:?}");
    assert_eq!(per_shard_count(&shards, POSTINGS_OF_WRITES), [0, 0], "every postings row settled");
    for n in [&a, &b] {
        assert_all_once(&n.url(""), "retried and sealed");
    }
    a.terminate();
    b.terminate();
}

/// Issue 16: the commit point failing after every shard took its rows (the coordinator, shard
/// 0, killed between the data inserts and the commit record, by the writer's test hook): the
/// write fails naming it, nothing is visible to this node or a fresh one once it is back (nor
/// listed: series, label names, label values), a maintenance pass removes the rows and postings
/// from both shards, and the retry through the same node (which must not remember the series as
/// indexed by the failed write) completes the write and lists its series.
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
        assert_none_listed(n, "commit failed");
    }
    assert!(stored(POSTINGS_OF_WRITES).iter().all(|&n| n > 0), "both shards took their postings");
    assert!(stored("SELECT count() FROM saltdb.starts").iter().all(|&n| n > 0), "and start timestamps");
    let (sealed, settled) = maintain(urls);
    assert_eq!((sealed.samples, sealed.aborted, sealed.chunks), (0, 160, 0), "{sealed:?}");
    assert_eq!((settled.committed, settled.aborted), (0, 2), "one write id on both shards: {settled:?}");
    assert_eq!(stored("SELECT count() FROM saltdb.samples"), [0, 0]);
    assert_eq!(stored("SELECT count() FROM saltdb.starts"), [0, 0], "the seal deleted the start timestamps");
    assert_eq!(stored("SELECT count() FROM saltdb.postings"), [0, 0]);
    for n in [&writer, &fresh] {
        assert_none_listed(n, "after a maintenance pass");
    }
    assert_eq!(writer.write(&batch()).unwrap(), 160);
    for n in [&writer, &fresh] {
        let q = n.querier(ReadLimits::none());
        let (start, end) = (T0 - DAY, T0 + DAY);
        assert_eq!(q.series(&all, start, end, None).unwrap().len(), 16, "retried: series");
        assert!(q.label_names(&[], start, end, None).unwrap().contains(&"k".to_owned()), "retried: label names");
        assert_eq!(q.label_values("k", &[], start, end, None).unwrap().len(), 16, "retried: k's values");
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

/// A fresh two-shard cluster (under a temporary directory, named after the test) holding
/// [`data`], written by this release: the upgrade tests then take its tables back to an older
/// schema. `None` when ClickHouse is not installed (outside CI).
fn written_by_this_release(test: &str) -> Option<(tempfile::TempDir, Vec<Shard>, Vec<String>, WriteBatch)> {
    let dir = tempfile::tempdir().unwrap();
    let shards = cluster(dir.path(), test)?;
    let urls: Vec<String> = shards.iter().map(|s| s.url.clone()).collect();
    let old = data();
    ClickHouse::open(ClickHouseConfig::new(urls.clone())).unwrap().write(&PackedBatch::from(&old)).unwrap();
    Some((dir, shards, urls, old))
}

/// After an upgrade and a second open: the second open recorded the version again and changed
/// nothing else, and `upgraded` answers `old` as the embedded store does; returns that store.
fn opened_twice_and_answers_as_the_embedded_store(
    dir: &std::path::Path,
    shards: &[Shard],
    old: WriteBatch,
    upgraded: &ClickHouse,
) -> Storage {
    assert_eq!(per_shard_count(shards, "SELECT count() FROM saltdb.schema_version"), [2, 2]);
    let mut embedded_config = storage_config(&dir.join("embedded"));
    embedded_config.retention_ms = None;
    let embedded = Storage::open(embedded_config).unwrap();
    embedded.write(old).unwrap();
    let (eq, cq) = (embedded.querier(ReadLimits::none()), upgraded.querier(ReadLimits::none()));
    compare_answers(&eq, &cq, "after the upgrade to version 7");
    embedded
}

/// Takes every shard back to schema `version` as a node of that release left it: `statements`
/// (what else differs from version 6), then `postings` without `write_id` and `inserted_at`
/// (versions 4 and 5 alike) and no `rule_namespaces` (versions 1 to 6), then the recorded
/// version.
fn back_to_version(shards: &[Shard], version: u32, statements: &[&str]) {
    let recorded = format!("INSERT INTO saltdb.schema_version VALUES ({version})");
    let mut all = statements.to_vec();
    all.extend([
        "CREATE TABLE saltdb.postings_old (day Date, name String, value String, series_id UInt64) \
         ENGINE = ReplacingMergeTree PARTITION BY toYYYYMM(day) ORDER BY (name, value, day, series_id)",
        "INSERT INTO saltdb.postings_old SELECT day, name, value, series_id FROM saltdb.postings",
        "DROP TABLE saltdb.postings",
        "RENAME TABLE saltdb.postings_old TO saltdb.postings",
        "DROP TABLE saltdb.rule_namespaces",
        "DROP TABLE saltdb.schema_version",
        "CREATE TABLE saltdb.schema_version (version UInt32) ENGINE = ReplacingMergeTree ORDER BY version",
        &recorded,
    ]);
    on_every_shard(shards, &all);
}

/// A database of schema version 4 (no `write_id`, no `commits`, no `exemplars`) is upgraded in place
/// (through versions 5 and 6 to 7): the column joins the sorting keys of `samples`, `starts` and `postings`, old rows read as committed, writes spanning shards
/// commit, and a second open changes nothing.
#[test]
fn a_version_4_database_is_upgraded_in_place() {
    let Some((dir, shards, urls, old)) = written_by_this_release("a_version_4_database_is_upgraded_in_place") else {
        return;
    };
    // Back to version 4's tables, as a node of the previous release left them.
    back_to_version(
        &shards,
        4,
        &[
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
        ],
    );
    let write_ids = "SELECT count() FROM system.columns WHERE database = 'saltdb' \
                     AND table IN ('samples', 'starts', 'postings') AND name = 'write_id'";
    assert_eq!(per_shard_count(&shards, write_ids), [0, 0]);
    let upgraded = ClickHouse::open(ClickHouseConfig::new(urls.clone())).unwrap();
    assert_eq!(per_shard_count(&shards, "SELECT max(version) FROM saltdb.schema_version"), [7, 7]);
    assert_eq!(per_shard_count(&shards, write_ids), [3, 3]);
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
    opened_twice_and_answers_as_the_embedded_store(dir.path(), &shards, old, &upgraded);
    // A write spanning shards on the upgraded tables commits and reads back.
    assert_eq!(upgraded.write(&batch()).unwrap(), 160);
    assert!(per_shard_count(&shards, ROWS_OF_WRITES).iter().all(|&n| n > 0));
    let found = upgraded
        .querier(ReadLimits::none())
        .select(&[Matcher::equal("__name__", "chh_atomic")], T0, T0 + DAY, None)
        .unwrap();
    assert_eq!(found.iter().map(|s| s.samples.len()).sum::<usize>(), 160);
}

/// A database of schema version 5 (postings without `write_id` and `inserted_at`) is upgraded in
/// place: both columns are added (the first to the sorting key), version 7's `rule_namespaces`
/// is created, old rows read as settled,
/// series written since are listed only once committed, settling takes them to write id 0,
/// and a second open changes nothing.
#[test]
fn a_version_5_database_is_upgraded_in_place() {
    let Some((dir, shards, urls, old)) = written_by_this_release("a_version_5_database_is_upgraded_in_place") else {
        return;
    };
    // Back to version 5's postings, as a node of the previous release left them.
    back_to_version(&shards, 5, &[]);
    let columns = "SELECT count() FROM system.columns WHERE database = 'saltdb' AND table = 'postings' \
                   AND name IN ('write_id', 'inserted_at')";
    assert_eq!(per_shard_count(&shards, columns), [0, 0]);
    let upgraded = ClickHouse::open(ClickHouseConfig::new(urls.clone())).unwrap();
    assert_eq!(per_shard_count(&shards, "SELECT max(version) FROM saltdb.schema_version"), [7, 7]);
    assert_eq!(per_shard_count(&shards, columns), [2, 2]);
    let ruler = "SELECT count() FROM system.tables WHERE database = 'saltdb' AND name = 'rule_namespaces'";
    assert_eq!(per_shard_count(&shards, ruler), [1, 1], "version 7's table, created empty");
    let keyed = "SELECT count() FROM system.tables WHERE database = 'saltdb' AND name = 'postings' \
                 AND position(create_table_query, 'ORDER BY (name, value, day, series_id, write_id)') > 0";
    assert_eq!(per_shard_count(&shards, keyed), [1, 1]);
    ClickHouse::open(ClickHouseConfig::new(urls.clone())).unwrap();
    let embedded = opened_twice_and_answers_as_the_embedded_store(dir.path(), &shards, old, &upgraded);
    // A write spanning shards on the upgraded tables is listed, and settled by a maintenance pass.
    assert_eq!(upgraded.write(&batch()).unwrap(), 160);
    assert!(per_shard_count(&shards, POSTINGS_OF_WRITES).iter().all(|&n| n > 0));
    let all = [Matcher::equal("__name__", "chh_atomic")];
    let listed = |store: &ClickHouse| store.querier(ReadLimits::none()).series(&all, T0, T0 + DAY, None).unwrap().len();
    assert_eq!(listed(&upgraded), 16);
    let (_, settled) = maintain(urls);
    assert_eq!((settled.committed, settled.aborted), (2, 0), "one write id on both shards: {settled:?}");
    assert_eq!(per_shard_count(&shards, POSTINGS_OF_WRITES), [0, 0]);
    assert_eq!(listed(&upgraded), 16);
    let every = [Matcher::new(saltdb::matcher::MatchOp::RegexMatch, "__name__", ".+").unwrap()];
    let count = |q: &dyn Querier| q.series(&every, T0 - DAY, T0 + 3 * DAY, None).unwrap().len();
    let (eq, cq) = (embedded.querier(ReadLimits::none()), upgraded.querier(ReadLimits::none()));
    assert_eq!(count(&cq), count(&eq) + 16, "the old series and the new");
}
