//! Retention drops whole windows past the cutoff at start-up; newer windows stay.

use saltdb::remote::{proto, snappy_body};

use crate::common::*;

const DAY: i64 = 86_400_000;

#[test]
fn old_windows_are_dropped_at_startup() {
    let dir = tempfile::tempdir().unwrap();
    let now = chrono::Utc::now().timestamp_millis();
    // An hour into the day 40 days ago, so that `old + 60 s` is in the same window whatever the
    // time of day the test runs (it failed once a minute before midnight UTC).
    let old = now - 40 * DAY - (now - 40 * DAY).rem_euclid(DAY) + 3_600_000;
    let recent = now - DAY;
    let body = format!(
        "{}\n{}\n",
        serde_json::json!({"metric":{"__name__":"ret","age":"old"},"values":[1,2],"timestamps":[old, old + 60_000]}),
        serde_json::json!({"metric":{"__name__":"ret","age":"recent"},"values":[3],"timestamps":[recent]}),
    );
    // Written with retention off, so the old data is accepted.
    let bin = Binary::spawn(dir.path(), &["--retention", "0"]);
    assert_eq!(import(&bin.url(""), body), (204, String::new()));
    assert_eq!(export(&bin.url(""), "ret").len(), 2);
    bin.terminate();
    let windows_before = count_windows(dir.path());

    let bin = Binary::spawn(dir.path(), &["--retention", "30d"]);
    let left = export(&bin.url(""), "ret");
    assert_eq!(left.len(), 1, "only the recent series is left: {left:?}");
    assert_eq!(left.keys().next().unwrap()["age"], "recent");

    // Writes into dropped time are rejected, clearly.
    let (status, text) = import(
        &bin.url(""),
        serde_json::json!({"metric":{"__name__":"ret"},"values":[1],"timestamps":[old]}).to_string(),
    );
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("retention"), "{text}");
    bin.terminate();
    assert_eq!(count_windows(dir.path()), windows_before - 1, "the old window's keyspace is gone");
}

/// Window keyspaces known to the database, counted through a fresh open.
fn count_windows(dir: &std::path::Path) -> usize {
    let storage = saltdb::storage::Storage::open(storage_config(dir)).unwrap();
    storage.stats().unwrap().windows.len()
}

/// Churn: series whose every window expired lose their rows (a write of the same labels then
/// creates the series anew), while series still in a kept window keep theirs; queries over the
/// kept time do not see the removed ones.
#[test]
fn series_without_data_in_kept_windows_are_removed() {
    use saltdb::labels::Labels;
    use saltdb::matcher::Matcher;
    use saltdb::sample::{Sample, SeriesSamples, WriteBatch};
    use saltdb::storage::Storage;

    let dir = tempfile::tempdir().unwrap();
    let now = chrono::Utc::now().timestamp_millis();
    let (old, recent) = (now - 10 * DAY, now - DAY);
    let series = |name: &str, ts: i64| SeriesSamples {
        labels: Labels::from_pairs([("__name__", name), ("job", "churn")]).unwrap(),
        samples: vec![Sample::new(ts, 1.0)],
        histograms: Vec::new(),
    };
    {
        let s = Storage::open(storage_config(dir.path())).unwrap();
        let written =
            s.write(WriteBatch { series: (0..100).map(|i| series(&format!("gone_{i}"), old)).collect() }).unwrap();
        assert_eq!(written.series_created, 100);
        s.write(WriteBatch { series: vec![series("kept", old), series("kept", recent)] }).unwrap();
    }
    let mut config = storage_config(dir.path());
    config.retention_ms = Some(3 * DAY);
    let s = Storage::open(config.clone()).unwrap();
    assert_eq!(s.enforce_retention(now).unwrap().len(), 1, "one window expired");
    let all = Matcher::equal("job", "churn");
    let left = s.series(std::slice::from_ref(&all), 0, now).unwrap();
    assert_eq!(left.len(), 1, "{left:?}");
    // The kept series keeps its id; the removed ones are new series when they come back.
    let again = s.write(WriteBatch { series: vec![series("kept", now), series("gone_7", now)] }).unwrap();
    assert_eq!(again.series_created, 1);
    drop(s);
    // The removal is durable, and the returning series reads back.
    let s = Storage::open(config).unwrap();
    assert_eq!(s.series(&[all], 0, now + 1).unwrap().len(), 2);
    assert_eq!(s.label_values("__name__", &[], 0, now + 1).unwrap(), ["gone_7", "kept"]);
}

/// `--retention-rule`: series a rule matches keep their own windows, dropped at the rule's
/// retention, whole; the others keep `--retention`. Driven through a real server: written by
/// remote-write, restarted (retention runs at start-up), read back by export and PromQL, and
/// shown in the status pages and `/metrics`. A class stays readable and keeps expiring after the
/// rule that made it is removed.
#[test]
fn retention_rules_keep_their_own_windows() {
    let dir = tempfile::tempdir().unwrap();
    let now = chrono::Utc::now().timestamp_millis();
    let day_start = |t: i64| t - t.rem_euclid(DAY) + 3_600_000;
    let (old, recent) = (day_start(now - 10 * DAY), now - DAY);
    let rules =
        ["--retention", "30d", "--retention-rule", r#"{team="batch"}:7d"#, "--retention-rule", r#"{job=~"dbg.*"}:3d"#];
    let bin = Binary::spawn(dir.path(), &rules);
    let write = |bin: &Binary, series: Vec<proto::TimeSeries>| {
        let body = snappy_body(&proto::WriteRequest { timeseries: series, metadata: vec![] });
        let (status, _, text) = post(&bin.url("/api/v1/write"), &V1_HEADERS, body);
        assert_eq!(status, 204, "{text}");
    };
    write(
        &bin,
        vec![
            series(&[("__name__", "jobs"), ("team", "batch")], &[(old, 1.0), (old + 60_000, 2.0), (recent, 3.0)]),
            series(&[("__name__", "jobs"), ("team", "web")], &[(old, 4.0), (recent, 5.0)]),
            // Matches both rules: the first decides (7d).
            series(&[("__name__", "jobs"), ("job", "dbg"), ("team", "batch")], &[(old, 6.0), (recent, 7.0)]),
            series(&[("__name__", "dbg_only"), ("job", "dbg1")], &[(now - 5 * DAY, 8.0), (recent, 9.0)]),
        ],
    );
    // Everything reads back before any retention pass, whatever its class.
    let all = export(&bin.url(""), r#"{__name__=~"jobs|dbg_only"}"#);
    assert_eq!(all.values().map(Vec::len).sum::<usize>(), 9, "{all:?}");
    let classes = get_json(&bin.url("/api/v1/status/storage"))["data"]["retentionClasses"].clone();
    let names: Vec<&str> = classes.as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["default", "1w", "3d"], "{classes}");
    assert_eq!(classes[1]["rules"], serde_json::json!([r#"{team="batch"}"#]), "{classes}");
    bin.terminate();

    // Retention runs at start-up: the 7d class loses its 10-day-old window, the 3d class its
    // 5-day-old one; the default class (30d) keeps everything.
    let bin = Binary::spawn(dir.path(), &rules);
    let left = export(&bin.url(""), r#"{__name__=~"jobs|dbg_only"}"#);
    let values = |team: &str, job: Option<&str>| -> Vec<f64> {
        left.iter()
            .filter(|(k, _)| k.get("team").map(String::as_str) == Some(team) && k.get("job").map(String::as_str) == job)
            .flat_map(|(_, v)| v.iter().map(|(_, x)| f64::from_bits(*x)))
            .collect()
    };
    assert_eq!(values("batch", None), [3.0], "{left:?}");
    assert_eq!(values("web", None), [4.0, 5.0], "{left:?}");
    assert_eq!(values("batch", Some("dbg")), [7.0], "{left:?}");
    let dbg: Vec<f64> = left
        .iter()
        .filter(|(k, _)| k.get("__name__").map(String::as_str) == Some("dbg_only"))
        .flat_map(|(_, v)| v.iter().map(|(_, x)| f64::from_bits(*x)))
        .collect();
    assert_eq!(dbg, [9.0], "{left:?}");
    // PromQL over the whole span sees the same.
    let q = get_json(
        &bin.url(&format!("/api/v1/query?query=sum(count_over_time(jobs[30d]))&time={}", (now / 1000) as f64)),
    );
    assert_eq!(q["data"]["result"][0]["value"][1], "4", "{q}");
    // The status pages name each window's class; /metrics counts them.
    let windows = get_json(&bin.url("/api/v1/status/windows"))["data"].clone();
    let of = |class: &str| windows.as_array().unwrap().iter().filter(|w| w["retentionClass"] == class).count();
    assert_eq!((of("default"), of("1w"), of("3d")), (2, 1, 1), "{windows}");
    let seven = windows.as_array().unwrap().iter().find(|w| w["retentionClass"] == "1w").unwrap();
    assert_eq!(seven["retentionMs"], 7 * DAY, "{seven}");
    let metrics = client().get(bin.url("/metrics")).send().unwrap().text().unwrap();
    assert!(metrics.contains(r#"saltdb_retention_class_windows{class="1w"} 1"#), "{metrics}");
    assert!(metrics.contains(r#"saltdb_retention_class_windows{class="default"} 2"#), "{metrics}");
    bin.terminate();

    // Without the rules: the classes found on disk stay readable and keep their retention, and
    // the series now write into the default class.
    let bin = Binary::spawn(dir.path(), &["--retention", "30d"]);
    let left = export(&bin.url(""), r#"{__name__="jobs",team="batch"}"#);
    assert_eq!(left.values().map(Vec::len).sum::<usize>(), 2, "{left:?}");
    write(&bin, vec![series(&[("__name__", "jobs"), ("team", "batch")], &[(now - 1000, 10.0)])]);
    let left = export(&bin.url(""), r#"{__name__="jobs",team="batch",job=""}"#);
    let got: Vec<f64> = left.values().flat_map(|v| v.iter().map(|(_, x)| f64::from_bits(*x))).collect();
    assert_eq!(got, [3.0, 10.0], "{left:?}");
    let names: Vec<String> = get_json(&bin.url("/api/v1/status/storage"))["data"]["retentionClasses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(names, ["default", "1w", "3d"]);
    bin.terminate();
}

/// One series `name{team=...}` with a sample at each of `ts` (its value the timestamp).
fn team_batch(name: &str, team: &str, ts: &[i64]) -> saltdb::sample::WriteBatch {
    use saltdb::sample::{Sample, SeriesSamples, WriteBatch};
    WriteBatch {
        series: vec![SeriesSamples {
            labels: saltdb::labels::Labels::from_pairs([("__name__", name), ("team", team)]).unwrap(),
            samples: ts.iter().map(|&t| Sample::new(t, t as f64)).collect(),
            histograms: Vec::new(),
        }],
    }
}

/// `{team="batch"}:7d`.
fn batch_team_for_a_week() -> saltdb::storage::RetentionRule {
    saltdb::storage::RetentionRule {
        selector: r#"{team="batch"}"#.into(),
        matchers: vec![vec![saltdb::matcher::Matcher::equal("team", "batch")]],
        retention_ms: 7 * DAY,
    }
}

/// A series whose class changed between two runs, inside one window, reads back in order and
/// once per timestamp (its samples are then in two windows of that start).
#[test]
fn a_series_changing_class_inside_a_window_reads_in_order() {
    use saltdb::matcher::Matcher;
    use saltdb::storage::Storage;

    let dir = tempfile::tempdir().unwrap();
    let now = chrono::Utc::now().timestamp_millis();
    let t0 = now - now.rem_euclid(DAY) - DAY + 3_600_000;
    let batch = |ts: &[i64]| team_batch("moved", "batch", ts);
    let rule = batch_team_for_a_week();
    let with_rule = || {
        let mut c = storage_config(dir.path());
        c.retention_rules = vec![rule.clone()];
        c
    };
    // Interleaved timestamps in the same window, written under two classes, one of them twice.
    Storage::open(with_rule()).unwrap().write(batch(&[t0, t0 + 20_000, t0 + 40_000])).unwrap();
    Storage::open(storage_config(dir.path())).unwrap().write(batch(&[t0 + 10_000, t0 + 30_000, t0 + 40_000])).unwrap();
    for (run, config) in [with_rule(), storage_config(dir.path())].into_iter().enumerate() {
        let s = Storage::open(config).unwrap();
        let sel = [Matcher::equal("__name__", "moved")];
        let got = s.select(&sel, 0, now, usize::MAX).unwrap();
        assert_eq!(got.len(), 1);
        let ts: Vec<i64> = got[0].samples.iter().map(|x| x.timestamp_ms - t0).collect();
        assert_eq!(ts, [0, 10_000, 20_000, 30_000, 40_000]);
        assert_eq!(s.stats().unwrap().windows.len(), 2, "one window per class at that start");
        if run == 0 {
            // Sealing seals both.
            let sealed = s.seal_window(t0 - t0.rem_euclid(DAY)).unwrap().unwrap();
            assert_eq!(sealed.samples, 6, "{sealed:?}");
            assert!(s.window_status().unwrap().iter().all(|w| w.state == saltdb::storage::WindowState::Sealed));
        }
        let ts: Vec<i64> =
            s.select(&sel, 0, now, usize::MAX).unwrap()[0].samples.iter().map(|x| x.timestamp_ms - t0).collect();
        assert_eq!(ts, [0, 10_000, 20_000, 30_000, 40_000]);
    }
}

/// Rules changed while the database is open (`Storage::set_retention_rules`, what a reload of
/// a tenant's `retention_period` does): later writes go to the new class, earlier samples stay in
/// theirs, reads merge both ascending, and a reopen with the new rules reads the same.
#[test]
fn retention_rules_changed_while_open_send_later_writes_to_the_new_class() {
    use saltdb::matcher::Matcher;
    use saltdb::storage::{RetentionRule, Storage};

    let dir = tempfile::tempdir().unwrap();
    let now = chrono::Utc::now().timestamp_millis();
    let t0 = now - now.rem_euclid(DAY) - DAY + 3_600_000;
    let batch = |team: &str, ts: &[i64]| team_batch("changing", team, ts);
    let rule = batch_team_for_a_week();
    let s = Storage::open(storage_config(dir.path())).unwrap();
    s.write(batch("batch", &[t0, t0 + 20_000])).unwrap();
    s.write(batch("web", &[t0])).unwrap();
    s.set_retention_rules(vec![rule.clone()]).unwrap();
    assert_eq!(s.retention_classes().len(), 2);
    assert_eq!(s.retention_rules().len(), 1);
    s.write(batch("batch", &[t0 + 10_000, t0 + 30_000])).unwrap();
    s.write(batch("web", &[t0 + 10_000])).unwrap();
    let read = |s: &Storage, team: &str| -> Vec<i64> {
        let sel = [Matcher::equal("__name__", "changing"), Matcher::equal("team", team)];
        let got = s.select(&sel, 0, now, usize::MAX).unwrap();
        got.iter().flat_map(|x| x.samples.iter().map(|x| x.timestamp_ms - t0)).collect()
    };
    assert_eq!(read(&s, "batch"), [0, 10_000, 20_000, 30_000]);
    assert_eq!(read(&s, "web"), [0, 10_000]);
    s.flush_head().unwrap();
    let classes_of_windows: Vec<_> = s.window_status().unwrap().iter().map(|w| (w.class, w.series)).collect();
    assert_eq!(classes_of_windows.len(), 2, "the default class's window and the new class's: {classes_of_windows:?}");
    assert!(classes_of_windows.iter().any(|&(c, n)| c != 0 && n == 1), "{classes_of_windows:?}");
    // Back to no rules: the series returns to the default class for later writes.
    s.set_retention_rules(Vec::new()).unwrap();
    s.write(batch("batch", &[t0 + 40_000])).unwrap();
    assert_eq!(read(&s, "batch"), [0, 10_000, 20_000, 30_000, 40_000]);
    // Refused rules change nothing.
    let bad = RetentionRule { retention_ms: 0, ..rule.clone() };
    assert!(s.set_retention_rules(vec![bad]).is_err());
    drop(s);
    let mut config = storage_config(dir.path());
    config.retention_rules = vec![rule];
    let s = Storage::open(config).unwrap();
    assert_eq!(read(&s, "batch"), [0, 10_000, 20_000, 30_000, 40_000]);
    assert_eq!(read(&s, "web"), [0, 10_000]);
}

/// Bad rules stop the server before it listens, with a message naming the rule.
#[test]
fn bad_retention_rules_are_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    for (args, expected) in [
        (vec!["--retention-rule", "{team=\"batch\"}"], "expected SELECTOR:DURATION"),
        (vec!["--retention-rule", "{team=\"batch\"}:0s"], "longer than 0"),
        (vec!["--retention-rule", "{team=\"batch\":7d"], "retention-rule"),
        (vec!["--retention-rule", "{team=~\".*\"}:7d"], "at least one non-empty matcher"),
        (
            vec![
                "--retention-rule",
                "{a=\"b\"}:7d",
                "--storage",
                "clickhouse",
                "--clickhouse-url",
                "http://127.0.0.1:1",
            ],
            "embedded storage only",
        ),
        (vec!["--retention-rules-file", "/nonexistent/rules"], "retention-rules-file"),
    ] {
        let err = Binary::try_spawn(dir.path(), &args).err().unwrap_or_else(|| panic!("{args:?} started"));
        assert!(err.contains(expected), "{args:?}: {err}");
    }
    let file = dir.path().join("rules.txt");
    std::fs::write(&file, "# teams\n{team=\"batch\"}:7d\n\nnot a rule\n").unwrap();
    let err =
        Binary::try_spawn(&dir.path().join("data"), &["--retention-rules-file", file.to_str().unwrap()]).err().unwrap();
    assert!(err.contains("line 4"), "{err}");
}

/// `kill -9` with acknowledged samples of two classes still in the head (only in the
/// write-ahead log): after the restart they are all read back, and flushed into their classes'
/// windows (the replay decides each series' class from its stored labels).
#[test]
fn kill_9_with_samples_of_two_classes_in_the_head_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let now = chrono::Utc::now().timestamp_millis();
    let rules = ["--retention-rule", r#"{team="batch"}:7d"#, "--head-flush-interval", "1h"];
    let bin = Binary::spawn(dir.path(), &rules);
    let mut timeseries = Vec::new();
    for i in 0..20 {
        let team = if i % 2 == 0 { "batch" } else { "web" };
        let host = format!("h{i}");
        let samples: Vec<(i64, f64)> = (0..30).map(|k| (now - 600_000 + k * 15_000, (i * 100 + k) as f64)).collect();
        timeseries.push(series(&[("__name__", "crash_classes"), ("host", &host), ("team", team)], &samples));
    }
    let body = snappy_body(&proto::WriteRequest { timeseries, metadata: vec![] });
    let (status, _, text) = post(&bin.url("/api/v1/write"), &V1_HEADERS, body);
    assert_eq!(status, 204, "{text}");
    bin.kill9();

    let bin = Binary::spawn(dir.path(), &rules);
    let got = export(&bin.url(""), "crash_classes");
    assert_eq!(got.len(), 20, "{got:?}");
    assert!(got.values().all(|v| v.len() == 30), "{got:?}");
    // A clean shutdown flushes the replayed head into the windows: each class has its own.
    bin.terminate();
    let mut config = storage_config(dir.path());
    config.retention_rules = vec![saltdb::storage::RetentionRule {
        selector: r#"{team="batch"}"#.into(),
        matchers: vec![vec![saltdb::matcher::Matcher::equal("team", "batch")]],
        retention_ms: 7 * DAY,
    }];
    let s = saltdb::storage::Storage::open(config).unwrap();
    let classes: std::collections::BTreeSet<_> = s.stats().unwrap().windows.iter().map(|w| w.class).collect();
    assert_eq!(classes.len(), 2, "the samples went to both classes' windows");
    let all =
        s.select(&[saltdb::matcher::Matcher::equal("__name__", "crash_classes")], 0, now + 1, usize::MAX).unwrap();
    assert_eq!(all.iter().map(|x| x.samples.len()).sum::<usize>(), 600);
}
