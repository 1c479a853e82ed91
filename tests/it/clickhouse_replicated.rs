//! Replicated ClickHouse shards against real servers: a ZooKeeper 3.8 and two shards of two
//! `clickhouse-server` 18.16 replicas each, on loopback. Writes and reads go on, without one
//! error, while one replica of every shard is killed with `kill -9`, comes back and catches up,
//! and then the other one is killed; once back, nothing acknowledged is missing, and the answers
//! from either replica equal the embedded store's. With ZooKeeper down, reads go on and writes are refused with a message
//! saying why; once it is back, writes succeed again.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use saltdb::clickhouse::{ClickHouse, ClickHouseConfig};
use saltdb::labels::Labels;
use saltdb::matcher::Matcher;
use saltdb::sample::{PackedBatch, Sample, SeriesSamples, WriteBatch};
use saltdb::storage::{Querier, ReadLimits, Storage, StorageError};

use crate::clickhouse::{compare_answers, data, DAY, T0};
use crate::clickhouse_cluster::{start_replicated, Shard, ZooKeeper};
use crate::common::storage_config;
use crate::peers::installed;

/// A ZooKeeper and two shards of two replicas, or `None` (announced) when ClickHouse or
/// ZooKeeper is not installed.
pub fn replicated_cluster(dir: &Path, test: &str) -> Option<(ZooKeeper, Vec<Vec<Shard>>)> {
    if !installed("clickhouse-server", test, "clickhouse-server") {
        return None;
    }
    if !ZooKeeper::installed() {
        crate::skip::skip(test, &format!("{} is missing", ZooKeeper::SCRIPT), "apt-get install zookeeper");
        return None;
    }
    let zookeeper = ZooKeeper::start(&dir.join("zookeeper"));
    let shards = start_replicated(dir, 2, 2, zookeeper.port);
    Some((zookeeper, shards))
}

fn urls(shards: &[Vec<Shard>]) -> Vec<Vec<String>> {
    shards.iter().map(|replicas| replicas.iter().map(|r| r.url.clone()).collect()).collect()
}

/// Polls `sql`'s single number on `server` until it is `want` (60 s at most).
fn wait_for(server: &Shard, sql: &str, want: u64, what: &str) {
    let http = reqwest::blocking::Client::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let got = http
            .post(format!("{}/", server.url))
            .body(sql.to_owned())
            .send()
            .ok()
            .and_then(|r| r.text().ok())
            .and_then(|t| t.trim().parse::<u64>().ok());
        if got == Some(want) {
            return;
        }
        assert!(Instant::now() < deadline, "{what}: {sql} on {} is {got:?}, not {want}, after 60 s", server.url);
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Waits until a replica that came back holds everything its shard holds: connected to
/// ZooKeeper again and nothing left in its replication queue.
fn caught_up(server: &Shard) {
    wait_for(
        server,
        "SELECT count() FROM system.replicas WHERE database = 'saltdb' AND (is_readonly OR queue_size > 0 OR absolute_delay > 0)",
        0,
        "catching up",
    );
    wait_for(server, "SELECT count() FROM system.replicas WHERE database = 'saltdb'", 8, "all tables replicated");
}

fn one_sample(name: &str, n: i64) -> PackedBatch {
    PackedBatch::from(&WriteBatch {
        series: vec![SeriesSamples {
            labels: Labels::from_pairs([("__name__", name.to_owned()), ("n", n.to_string())]).unwrap(),
            samples: vec![Sample::new(T0 + n, n as f64)],
            histograms: Vec::new(),
        }],
    })
}

#[test]
fn writes_and_reads_go_on_while_one_replica_of_every_shard_lives() {
    let dir = tempfile::tempdir().unwrap();
    let test = "writes_and_reads_go_on_while_one_replica_of_every_shard_lives";
    let Some((_zookeeper, mut shards)) = replicated_cluster(dir.path(), test) else { return };
    let mut config = ClickHouseConfig::replicated(urls(&shards));
    config.timeout = Duration::from_secs(5);
    assert!(config.replicated);
    let ch = ClickHouse::open(config.clone()).expect("replicated schema on every replica");
    // Every table is replicated, on every replica.
    for replica in shards.iter().flatten() {
        wait_for(
            replica,
            "SELECT count() FROM system.tables WHERE database = 'saltdb' AND engine LIKE 'Replicated%'",
            8,
            "replicated tables",
        );
    }

    let stop = AtomicBool::new(false);
    let acked = Mutex::new(Vec::new());
    let failures = Mutex::new(Vec::new());
    let reads = Mutex::new(0usize);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            let mut n = 0i64;
            while !stop.load(Ordering::SeqCst) {
                match ch.write(&one_sample("replicated_total", n)) {
                    Ok(_) => acked.lock().unwrap().push(n),
                    Err(e) => failures.lock().unwrap().push(format!("write {n}: {e}")),
                }
                n += 1;
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        scope.spawn(|| {
            let q = ch.querier(ReadLimits::none());
            while !stop.load(Ordering::SeqCst) {
                match q.select(&[Matcher::equal("__name__", "replicated_total")], T0, T0 + DAY, None) {
                    Ok(_) => *reads.lock().unwrap() += 1,
                    Err(e) => failures.lock().unwrap().push(format!("read: {e}")),
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        std::thread::sleep(Duration::from_millis(800));
        for replicas in &mut shards {
            replicas[0].kill9();
        }
        std::thread::sleep(Duration::from_secs(2));
        for replicas in &mut shards {
            replicas[0].restart();
        }
        for replicas in &shards {
            caught_up(&replicas[0]);
        }
        for replicas in &mut shards {
            replicas[1].kill9();
        }
        std::thread::sleep(Duration::from_secs(2));
        stop.store(true, Ordering::SeqCst);
    });
    let failures = failures.into_inner().unwrap();
    let acked = acked.into_inner().unwrap();
    assert!(
        failures.is_empty(),
        "{} requests failed while a replica of every shard lived: {failures:?}",
        failures.len()
    );

    // The second replicas come back and catch up: every acknowledged sample is there (with an
    // insert quorum of 1, the last ones acknowledged by a replica just before it died stay on
    // it alone until it is back; see docs/clickhouse.md).
    for replicas in &mut shards {
        replicas[1].restart();
    }
    for replica in shards.iter().flatten() {
        caught_up(replica);
    }
    let found = ch
        .querier(ReadLimits::none())
        .select(&[Matcher::equal("__name__", "replicated_total")], T0, T0 + DAY, None)
        .unwrap();
    let present: std::collections::HashSet<i64> =
        found.iter().flat_map(|s| s.samples.iter().map(|p| p.timestamp_ms - T0)).collect();
    let lost: Vec<&i64> = acked.iter().filter(|n| !present.contains(n)).collect();
    assert!(lost.is_empty(), "{} of {} acknowledged samples lost: {lost:?}", lost.len(), acked.len());

    // Then the first replicas die again: the answers, from the second ones, are the embedded
    // store's.
    let mut embedded_config = storage_config(&dir.path().join("embedded"));
    embedded_config.retention_ms = None;
    let embedded = Storage::open(embedded_config).unwrap();
    let batch = data();
    embedded.write(batch.clone()).unwrap();
    ch.write(&PackedBatch::from(&batch)).unwrap();
    let series = embedded.write(WriteBatch {
        series: acked
            .iter()
            .map(|&n| SeriesSamples {
                labels: Labels::from_pairs([("__name__", "replicated_total".to_owned()), ("n", n.to_string())])
                    .unwrap(),
                samples: vec![Sample::new(T0 + n, n as f64)],
                histograms: Vec::new(),
            })
            .collect(),
    });
    series.unwrap();
    for replicas in &shards {
        caught_up(&replicas[1]);
    }
    for replicas in &mut shards {
        replicas[0].kill9();
    }
    let compared =
        compare_answers(&embedded.querier(ReadLimits::none()), &ch.querier(ReadLimits::none()), "replicas down");
    println!(
        "clickhouse replicated: {} writes acknowledged and {} reads answered without an error while replicas were killed; \
         {compared} answers equal to the embedded store's",
        acked.len(),
        reads.into_inner().unwrap()
    );
}

#[test]
fn with_zookeeper_down_reads_go_on_and_writes_are_refused_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let test = "with_zookeeper_down_reads_go_on_and_writes_are_refused_clearly";
    let Some((mut zookeeper, shards)) = replicated_cluster(dir.path(), test) else { return };
    let mut config = ClickHouseConfig::replicated(urls(&shards));
    config.timeout = Duration::from_secs(5);
    let ch = ClickHouse::open(config).unwrap();
    ch.write(&one_sample("zk_total", 1)).unwrap();

    zookeeper.kill9();
    // The servers notice within their session timeout (5 s); until then a write may still go.
    let deadline = Instant::now() + Duration::from_secs(60);
    let refused = loop {
        match ch.write(&one_sample("zk_total", 2)) {
            Err(StorageError::Unavailable(why)) => break why,
            Err(e) => panic!("unexpected {e}"),
            Ok(_) => {
                assert!(Instant::now() < deadline, "writes still accepted 60 s after ZooKeeper died");
                std::thread::sleep(Duration::from_millis(500));
            }
        }
    };
    assert!(refused.contains("ZooKeeper"), "the refusal says why: {refused}");
    let read = ch.querier(ReadLimits::none()).select(&[Matcher::equal("__name__", "zk_total")], T0, T0 + DAY, None);
    assert!(read.expect("reads go on without ZooKeeper").iter().any(|s| s.samples.iter().any(|p| p.value == 1.0)));

    zookeeper.restart();
    let deadline = Instant::now() + Duration::from_secs(90);
    while let Err(e) = ch.write(&one_sample("zk_total", 3)) {
        assert!(Instant::now() < deadline, "writes still refused 90 s after ZooKeeper came back: {e}");
        std::thread::sleep(Duration::from_millis(500));
    }
    // Replication stalled while ZooKeeper was down, and requests may have moved to the other
    // replica meanwhile: both samples are there once the replicas have caught up.
    for replica in shards.iter().flatten() {
        caught_up(replica);
    }
    let found =
        ch.querier(ReadLimits::none()).select(&[Matcher::equal("__name__", "zk_total")], T0, T0 + DAY, None).unwrap();
    let values: Vec<f64> = found.iter().flat_map(|s| s.samples.iter().map(|p| p.value)).collect();
    assert!(values.contains(&1.0) && values.contains(&3.0), "{values:?}");
}

/// A saltdb node on replicated shards, through HTTP: `/api/v1/status/storage` lists every
/// server with its state and replication; with a replica killed, imports and queries still
/// answer 2xx, the status shows it down and its shard's requests on the other replica.
#[test]
fn a_node_shows_each_replica_and_serves_through_a_failover() {
    let dir = tempfile::tempdir().unwrap();
    let test = "a_node_shows_each_replica_and_serves_through_a_failover";
    let Some((_zookeeper, mut shards)) = replicated_cluster(dir.path(), test) else { return };
    let url = urls(&shards).iter().map(|replicas| replicas.join("|")).collect::<Vec<_>>().join(",");
    let node = crate::common::Binary::spawn(
        &dir.path().join("node"),
        &["--storage", "clickhouse", "--clickhouse-url", &url, "--query-timeout", "5s"],
    );
    let http = crate::common::client();
    let now = chrono::Utc::now().timestamp_millis();
    let import = |n: i64| {
        let line = format!(
            "{{\"metric\":{{\"__name__\":\"replicated_up\",\"n\":\"{n}\"}},\"values\":[1],\"timestamps\":[{now}]}}\n"
        );
        http.post(node.url("/api/v1/import")).body(line).send().unwrap().status().as_u16()
    };
    let count = || -> serde_json::Value {
        let v = crate::common::get_json(&node.url("/api/v1/query?query=count(replicated_up)"));
        assert_eq!(v["status"], "success", "{v}");
        v["data"]["result"][0]["value"][1].clone()
    };
    for n in 0..20 {
        assert_eq!(import(n), 204);
    }
    assert_eq!(count(), "20");
    let status = crate::common::get_json(&node.url("/api/v1/status/storage"));
    let data = &status["data"];
    assert_eq!(data["backend"], "clickhouse", "{status}");
    assert_eq!(data["replicated"], true);
    assert_eq!(data["insertQuorum"], 1);
    assert_eq!(data["shards"].as_array().unwrap().len(), 2);
    for shard in data["shards"].as_array().unwrap() {
        let replicas = shard["replicas"].as_array().unwrap();
        assert_eq!(replicas.len(), 2, "{shard}");
        assert_eq!(replicas[0]["current"], true, "{shard}");
        for r in replicas {
            assert_eq!(r["up"], true, "{r}");
            assert_eq!(r["readonly"], false, "{r}");
            assert_eq!(r["totalReplicas"], 2, "{r}");
        }
    }

    shards[0][0].kill9();
    for n in 20..40 {
        assert_eq!(import(n), 204, "an import with a replica of shard 0 down");
    }
    assert_eq!(count(), "40");
    let status = crate::common::get_json(&node.url("/api/v1/status/storage"));
    let first = &status["data"]["shards"][0]["replicas"];
    assert_eq!(first[0]["up"], false, "{status}");
    assert!(first[0]["error"].as_str().is_some_and(|e| e.contains(&shards[0][0].url)), "{status}");
    assert_eq!((first[0]["current"].clone(), first[1]["current"].clone()), (false.into(), true.into()), "{status}");
    let metrics = http.get(node.url("/metrics")).send().unwrap().text().unwrap();
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("saltdb_clickhouse_requests_total{outcome=\"ok\",replica=\"1\",shard=\"0\"}")),
        "requests counted per replica"
    );
}

/// Seals, late samples folded in by a second seal, deletes and retention on replicated shards:
/// each runs on one replica and reaches the other through ZooKeeper, so once the replicas have
/// caught up, the other replicas alone answer as the embedded store does.
#[test]
fn seals_deletes_and_retention_reach_every_replica() {
    let dir = tempfile::tempdir().unwrap();
    let test = "seals_deletes_and_retention_reach_every_replica";
    let Some((_zookeeper, mut shards)) = replicated_cluster(dir.path(), test) else { return };
    let mut config = ClickHouseConfig::replicated(urls(&shards));
    config.seal_margin_ms = Some(50);
    let ch = ClickHouse::open(config.clone()).unwrap();
    let mut embedded_config = storage_config(&dir.path().join("embedded"));
    embedded_config.retention_ms = None;
    let embedded = Storage::open(embedded_config).unwrap();
    let batch = data();
    embedded.write(batch.clone()).unwrap();
    ch.write(&PackedBatch::from(&batch)).unwrap();
    let now = || chrono::Utc::now().timestamp_millis();
    std::thread::sleep(Duration::from_millis(100));
    let sealed = ch.seal_closed_days(now()).unwrap();
    assert_eq!(sealed.samples, batch.series.iter().map(|s| s.samples.len() as u64).sum::<u64>(), "{sealed:?}");
    // A late sample over a sealed one, sealed again; then a delete across sealed days.
    let old = &batch.series[5];
    let late = WriteBatch {
        series: vec![SeriesSamples {
            labels: old.labels.clone(),
            samples: vec![Sample::new(old.samples[10].timestamp_ms, -7.5)],
            histograms: Vec::new(),
        }],
    };
    embedded.write(late.clone()).unwrap();
    ch.write(&PackedBatch::from(&late)).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(ch.seal_closed_days(now()).unwrap().samples, 1);
    let zone_us = [Matcher::equal("zone", "us")];
    embedded.delete_series(&zone_us, T0 + DAY / 3, T0 + DAY + DAY / 2).unwrap();
    ch.delete_series(&zone_us, T0 + DAY / 3, T0 + DAY + DAY / 2).unwrap();
    // Retention: the first day of the data goes, on both stores.
    let mut kept_config = config;
    kept_config.retention_ms = Some(now() - (T0 + DAY));
    let kept = ClickHouse::open(kept_config).unwrap();
    let cutoff = kept.retention_cutoff(now()).unwrap();
    assert!(kept.enforce_retention(now()).unwrap() > 0);
    embedded
        .delete_series(&[Matcher::new(saltdb::matcher::MatchOp::RegexMatch, "__name__", ".+").unwrap()], 0, cutoff - 1)
        .unwrap();

    for replica in shards.iter().flatten() {
        caught_up(replica);
    }
    for replicas in &mut shards {
        replicas[0].kill9();
    }
    let compared = compare_answers(
        &embedded.querier(ReadLimits::none()),
        &ch.querier(ReadLimits::none()),
        "on the second replicas",
    );
    println!("clickhouse replicated: after a seal, a reseal, a delete and retention, {compared} answers from the second replicas equal the embedded store's");
}

/// A replica lost for good (killed, its disk gone) is replaced as docs/clickhouse.md says: a
/// new server with a new `replica` name takes its place in the URLs, creates its tables when a
/// node opens the database, and fetches everything from the shard's other replica, which can
/// then die too; the old replica's ZooKeeper entries are removed with `zkCli.sh deleteall`.
#[test]
fn a_lost_replica_is_replaced_by_a_new_server_that_fetches_everything() {
    let dir = tempfile::tempdir().unwrap();
    let test = "a_lost_replica_is_replaced_by_a_new_server_that_fetches_everything";
    let Some((zookeeper, mut shards)) = replicated_cluster(dir.path(), test) else { return };
    let ch = ClickHouse::open(ClickHouseConfig::replicated(urls(&shards))).unwrap();
    let mut embedded_config = storage_config(&dir.path().join("embedded"));
    embedded_config.retention_ms = None;
    let embedded = Storage::open(embedded_config).unwrap();
    let batch = data();
    embedded.write(batch.clone()).unwrap();
    ch.write(&PackedBatch::from(&batch)).unwrap();
    drop(ch);
    for replica in shards.iter().flatten() {
        caught_up(replica);
    }

    shards[0][0].kill9();
    std::fs::remove_dir_all(dir.path().join("shard-0-replica-0")).unwrap();
    let replication = crate::clickhouse_cluster::Replication { zookeeper_port: zookeeper.port, replica: "r2".into() };
    let new = Shard::start_replica(&dir.path().join("shard-0-replica-2"), Some(replication));
    let mut replaced = urls(&shards);
    replaced[0][0].clone_from(&new.url);
    let ch = ClickHouse::open(ClickHouseConfig::replicated(replaced)).expect("the new replica gets its tables");
    caught_up(&new);
    shards[0][1].kill9();
    let compared =
        compare_answers(&embedded.querier(ReadLimits::none()), &ch.querier(ReadLimits::none()), "from the new replica");

    // The old replica's entries in ZooKeeper go; the shard then counts two replicas again.
    let tables = ["series", "postings", "samples", "chunks", "starts", "commits", "exemplars", "rule_namespaces"];
    for table in tables {
        let path = format!("/clickhouse/saltdb/saltdb/shard-0/{table}/replicas/r0");
        let out = std::process::Command::new("/usr/share/zookeeper/bin/zkCli.sh")
            .args(["-server", &format!("127.0.0.1:{}", zookeeper.port), "deleteall", &path])
            .output()
            .unwrap();
        assert!(out.status.success(), "zkCli deleteall {path}: {}", String::from_utf8_lossy(&out.stderr));
    }
    wait_for(
        &new,
        "SELECT max(total_replicas) FROM system.replicas WHERE database = 'saltdb'",
        2,
        "the old replica forgotten",
    );
    println!(
        "clickhouse replicated: a new replica fetched the shard; {compared} answers from it equal the embedded store's"
    );
}

/// `--clickhouse-insert-quorum 2` on a shard of three replicas: a write is acknowledged only
/// once two replicas hold it, so with the replica taking the writes killed, and then the next
/// one killed at once (no time to catch up), the last replica still holds every acknowledged
/// write. A write the killed replica took alone stops quorum writes to its table until that
/// replica is back (ClickHouse 18.16): such refusals say so, and writes succeed again once it is.
#[test]
fn with_a_quorum_of_two_every_acknowledged_write_outlives_two_replicas() {
    let dir = tempfile::tempdir().unwrap();
    let test = "with_a_quorum_of_two_every_acknowledged_write_outlives_two_replicas";
    if !installed("clickhouse-server", test, "clickhouse-server") {
        return;
    }
    if !ZooKeeper::installed() {
        crate::skip::skip(test, &format!("{} is missing", ZooKeeper::SCRIPT), "apt-get install zookeeper");
        return;
    }
    let zookeeper = ZooKeeper::start(&dir.path().join("zookeeper"));
    let mut shards = start_replicated(dir.path(), 1, 3, zookeeper.port);
    let mut config = ClickHouseConfig::replicated(urls(&shards));
    config.insert_quorum = 2;
    config.timeout = Duration::from_secs(10);
    let ch = ClickHouse::open(config).unwrap();
    let stop = AtomicBool::new(false);
    let acked = Mutex::new(Vec::new());
    let refused = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        scope.spawn(|| {
            let mut n = 0i64;
            while !stop.load(Ordering::SeqCst) {
                match ch.write(&one_sample("quorum_total", n)) {
                    Ok(_) => acked.lock().unwrap().push(n),
                    Err(e) => refused.lock().unwrap().push(e.to_string()),
                }
                n += 1;
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        std::thread::sleep(Duration::from_secs(1));
        shards[0][0].kill9();
        std::thread::sleep(Duration::from_secs(3));
        stop.store(true, Ordering::SeqCst);
    });
    let acked = acked.into_inner().unwrap();
    let refused = refused.into_inner().unwrap();
    assert!(
        refused.iter().all(|e| e.contains("--clickhouse-insert-quorum") || e.contains("unreachable")),
        "refusals name the quorum: {refused:?}"
    );
    // No catching up: the replica that took the writes dies too, at once.
    let current = if shards[0][1].url == ch.replica_states().iter().find(|r| r.current).unwrap().url { 1 } else { 2 };
    shards[0][current].kill9();
    let found = ch
        .querier(ReadLimits::none())
        .select(&[Matcher::equal("__name__", "quorum_total")], T0, T0 + DAY, None)
        .expect("the last replica answers");
    let present: std::collections::HashSet<i64> =
        found.iter().flat_map(|s| s.samples.iter().map(|p| p.timestamp_ms - T0)).collect();
    let lost: Vec<&i64> = acked.iter().filter(|n| !present.contains(n)).collect();
    assert!(
        lost.is_empty(),
        "{} of {} acknowledged samples missing from the last replica: {lost:?}",
        lost.len(),
        acked.len()
    );

    // Back to two live replicas: quorum writes go again (within the time the first replica needs
    // to hand over a write it held alone).
    shards[0][0].restart();
    let deadline = Instant::now() + Duration::from_secs(60);
    while let Err(e) = ch.write(&one_sample("quorum_total", 1_000_000)) {
        assert!(Instant::now() < deadline, "quorum writes still refused 60 s after the replica came back: {e}");
        std::thread::sleep(Duration::from_millis(500));
    }
    println!(
        "clickhouse quorum 2 of 3: {} writes acknowledged, all on the last replica; {} refused while the first was down",
        acked.len(),
        refused.len()
    );
}

/// `saltdb clickhouse replicate`: a database written on two unreplicated shards (servers
/// already configured with ZooKeeper) moves onto two shards of two replicas, the old servers
/// among them; running it again changes nothing; nodes then open it replicated, and the new
/// replicas alone answer as the embedded store does.
#[test]
fn an_unreplicated_database_moves_onto_replicated_shards() {
    let dir = tempfile::tempdir().unwrap();
    let test = "an_unreplicated_database_moves_onto_replicated_shards";
    if !installed("clickhouse-server", test, "clickhouse-server") {
        return;
    }
    if !ZooKeeper::installed() {
        crate::skip::skip(test, &format!("{} is missing", ZooKeeper::SCRIPT), "apt-get install zookeeper");
        return;
    }
    let zookeeper = ZooKeeper::start(&dir.path().join("zookeeper"));
    let replica = |shard: usize, name: &str| {
        let replication =
            crate::clickhouse_cluster::Replication { zookeeper_port: zookeeper.port, replica: name.into() };
        Shard::start_replica(&dir.path().join(format!("shard-{shard}-{name}")), Some(replication))
    };
    let old: Vec<Shard> = (0..2).map(|s| replica(s, "r0")).collect();
    let unreplicated = ClickHouse::open(ClickHouseConfig::new(old.iter().map(|s| s.url.clone()).collect())).unwrap();
    let mut embedded_config = storage_config(&dir.path().join("embedded"));
    embedded_config.retention_ms = None;
    let embedded = Storage::open(embedded_config).unwrap();
    let batch = data();
    embedded.write(batch.clone()).unwrap();
    unreplicated.write(&PackedBatch::from(&batch)).unwrap();
    drop(unreplicated);

    let new: Vec<Shard> = (0..2).map(|s| replica(s, "r1")).collect();
    let url = (0..2).map(|s| format!("{}|{}", old[s].url, new[s].url)).collect::<Vec<_>>().join(",");
    // Refused as it stands, naming what it found: the database is not replicated.
    let as_replicated: Vec<Vec<String>> = (0..2).map(|s| vec![old[s].url.clone(), new[s].url.clone()]).collect();
    let refused = ClickHouse::open(ClickHouseConfig::replicated(as_replicated)).err().expect("refused before the move");
    assert!(refused.to_string().contains("with unreplicated tables (ReplacingMergeTree)"), "{refused}");
    let run = || {
        std::process::Command::new(env!("CARGO_BIN_EXE_saltdb"))
            .args(["clickhouse", "replicate", "--clickhouse-url", &url])
            .output()
            .unwrap()
    };
    let out = run();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.starts_with("16 tables copied into replicated ones"), "{stdout}");
    let again = run();
    assert!(again.status.success());
    assert!(String::from_utf8_lossy(&again.stdout).contains("0 tables copied into replicated ones (0 rows); 2 shards"));

    let shards: Vec<Vec<Shard>> = old.into_iter().zip(new).map(|(o, n)| vec![o, n]).collect();
    let ch = ClickHouse::open(ClickHouseConfig::replicated(urls(&shards))).expect("opened replicated");
    for replica in shards.iter().flatten() {
        caught_up(replica);
    }
    let mut shards = shards;
    for replicas in &mut shards {
        replicas[0].kill9();
    }
    let compared =
        compare_answers(&embedded.querier(ReadLimits::none()), &ch.querier(ReadLimits::none()), "after the move");
    println!("clickhouse replicate: {stdout}{compared} answers from the new replicas equal the embedded store's");
}
