//! Storage at its own boundary: matchers, time ranges, latest sample, labels, parallel fan-out.

use saltdb::labels::Labels;
use saltdb::matcher::{MatchOp, Matcher};
use saltdb::sample::{Sample, SeriesSamples, WriteBatch};
use saltdb::storage::Storage;

use crate::common::storage_config;

const T0: i64 = 1_700_000_000_000;
const DAY: i64 = 86_400_000;

fn series(pairs: &[(&str, &str)], samples: &[(i64, f64)]) -> SeriesSamples {
    SeriesSamples {
        labels: Labels::from_pairs(pairs.iter().copied()).unwrap(),
        samples: samples.iter().map(|&(t, v)| Sample::new(t, v)).collect(),
        histograms: Vec::new(),
    }
}

fn m(op: MatchOp, name: &str, value: &str) -> Matcher {
    Matcher::new(op, name, value).unwrap()
}

fn names(result: &[SeriesSamples], label: &str) -> Vec<String> {
    let mut v: Vec<String> = result.iter().map(|s| s.labels.get(label).unwrap_or("").to_owned()).collect();
    v.sort();
    v
}

fn open() -> (tempfile::TempDir, Storage) {
    let dir = tempfile::tempdir().unwrap();
    let storage = Storage::open(storage_config(dir.path())).unwrap();
    (dir, storage)
}

fn fixture(storage: &Storage) {
    let batch = WriteBatch {
        series: vec![
            series(&[("__name__", "up"), ("job", "api"), ("instance", "a")], &[(T0, 1.0), (T0 + 15_000, 1.0)]),
            series(&[("__name__", "up"), ("job", "api"), ("instance", "b")], &[(T0, 0.0)]),
            series(&[("__name__", "up"), ("job", "db")], &[(T0 + DAY, 1.0)]),
            series(&[("__name__", "load"), ("job", "db"), ("instance", "c")], &[(T0 + 2 * DAY, 0.5)]),
        ],
    };
    storage.write(batch).unwrap();
}

#[test]
fn matchers_follow_prometheus_semantics() {
    let (_dir, s) = open();
    fixture(&s);
    let all = (0, i64::MAX / 2);
    let sel = |ms: Vec<Matcher>| s.select(&ms, all.0, all.1, usize::MAX).unwrap();
    let up = m(MatchOp::Equal, "__name__", "up");
    assert_eq!(sel(vec![up.clone()]).len(), 3);
    assert_eq!(names(&sel(vec![up.clone(), m(MatchOp::Equal, "instance", "a")]), "instance"), ["a"]);
    // != and !~ select series lacking the label too.
    assert_eq!(names(&sel(vec![up.clone(), m(MatchOp::NotEqual, "instance", "a")]), "instance"), ["", "b"]);
    assert_eq!(names(&sel(vec![up.clone(), m(MatchOp::RegexNoMatch, "instance", "a|b")]), "instance"), [""]);
    // =~ is anchored.
    assert_eq!(sel(vec![m(MatchOp::RegexMatch, "job", "ap")]).len(), 0);
    assert_eq!(sel(vec![m(MatchOp::RegexMatch, "job", "ap.*")]).len(), 2);
    // ="" selects series without the label.
    assert_eq!(names(&sel(vec![up.clone(), m(MatchOp::Equal, "instance", "")]), "job"), ["db"]);
    // =~ matching empty also selects series without the label.
    assert_eq!(sel(vec![up, m(MatchOp::RegexMatch, "instance", "a|")]).len(), 2);
}

#[test]
fn time_ranges_windows_and_latest() {
    let (_dir, s) = open();
    fixture(&s);
    // Late, out-of-order sample into an older window, and an overwrite.
    let late = WriteBatch {
        series: vec![series(
            &[("__name__", "up"), ("job", "api"), ("instance", "a")],
            &[(T0 - 15_000, 7.0), (T0, 9.0)],
        )],
    };
    s.write(late).unwrap();
    let a = vec![m(MatchOp::Equal, "instance", "a")];
    let got = s.select(&a, 0, T0 + DAY, usize::MAX).unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(
        got[0].samples,
        vec![Sample::new(T0 - 15_000, 7.0), Sample::new(T0, 9.0), Sample::new(T0 + 15_000, 1.0)]
    );
    // Inclusive bounds.
    let got = s.select(&a, T0, T0, usize::MAX).unwrap();
    assert_eq!(got[0].samples, vec![Sample::new(T0, 9.0)]);
    // Series without samples in range are not returned.
    let db = vec![m(MatchOp::Equal, "job", "db")];
    assert_eq!(s.select(&db, T0, T0 + 60_000, usize::MAX).unwrap().len(), 0);
    assert_eq!(s.select(&db, T0, T0 + 3 * DAY, usize::MAX).unwrap().len(), 2);
    // Latest sample, and latest at an earlier time.
    let latest = s.latest(&a, T0 + 3 * DAY).unwrap();
    assert_eq!(latest[0].1, Sample::new(T0 + 15_000, 1.0));
    let latest = s.latest(&a, T0 + 1).unwrap();
    assert_eq!(latest[0].1, Sample::new(T0, 9.0));
    // Sample limit.
    let err = s.select(&[m(MatchOp::RegexMatch, "__name__", ".+")], 0, i64::MAX / 2, 2).unwrap_err();
    assert!(err.to_string().contains("more than 2 samples"), "{err}");
}

#[test]
fn label_names_and_values_respect_time_range() {
    let (_dir, s) = open();
    fixture(&s);
    let day0 = (T0 - 1, T0 + 60_000);
    assert_eq!(s.label_values("instance", &[], day0.0, day0.1).unwrap(), ["a", "b"]);
    assert_eq!(s.label_values("instance", &[], 0, T0 + 3 * DAY).unwrap(), ["a", "b", "c"]);
    assert_eq!(s.label_values("__name__", &[], T0 + 2 * DAY, T0 + 2 * DAY).unwrap(), ["load"]);
    assert_eq!(s.label_values("job", &[m(MatchOp::Equal, "instance", "c")], 0, T0 + 3 * DAY).unwrap(), ["db"]);
    assert_eq!(s.label_names(&[], day0.0, day0.1).unwrap(), ["__name__", "instance", "job"]);
    assert_eq!(s.series(&[m(MatchOp::Equal, "__name__", "up")], T0 + DAY, T0 + DAY).unwrap().len(), 1);
}

#[test]
fn many_series_across_buckets_are_merged() {
    let (dir, s) = open();
    let batch = WriteBatch {
        series: (0..2000)
            .map(|i| {
                series(
                    &[("__name__", "fan"), ("i", &i.to_string())],
                    &[(T0 + i, i as f64), (T0 + DAY + i, -(i as f64))],
                )
            })
            .collect(),
    };
    s.write(batch).unwrap();
    let got = s.select(&[m(MatchOp::Equal, "__name__", "fan")], 0, T0 + 2 * DAY, usize::MAX).unwrap();
    assert_eq!(got.len(), 2000);
    for series in &got {
        let i: i64 = series.labels.get("i").unwrap().parse().unwrap();
        assert_eq!(series.samples, vec![Sample::new(T0 + i, i as f64), Sample::new(T0 + DAY + i, -(i as f64))]);
    }
    let stats = s.stats().unwrap();
    assert_eq!(stats.samples_per_bucket.iter().sum::<u64>(), 4000);
    assert!(stats.samples_per_bucket.iter().all(|&n| n > 0), "every bucket got writes: {:?}", stats.samples_per_bucket);
    assert_eq!(stats.series_total, 2000);
    // Ids persist: reopening continues the counter instead of reusing ids.
    drop(s);
    let s = Storage::open(storage_config(dir.path())).unwrap();
    s.write(WriteBatch { series: vec![series(&[("__name__", "fan"), ("i", "new")], &[(T0, 1.0)])] }).unwrap();
    s.write(WriteBatch { series: vec![series(&[("__name__", "fan"), ("i", "0")], &[(T0 + 5, 5.0)])] }).unwrap();
    assert_eq!(s.stats().unwrap().series_total, 2001);
    assert_eq!(s.select(&[m(MatchOp::Equal, "__name__", "fan")], 0, T0 + 2 * DAY, usize::MAX).unwrap().len(), 2001);
}

/// Writes of one series in the given order, each followed (or not) by a head flush, and across
/// a reopen: whatever the interleaving, a read returns every timestamp once, ascending, with the
/// value of its last write, from the head, from flushed runs and from both merged.
#[test]
fn head_flushes_merge_out_of_order_runs_across_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let cpu = |samples: &[(i64, f64)]| WriteBatch { series: vec![series(&[("__name__", "cpu")], samples)] };
    let mut expect = std::collections::BTreeMap::new();
    let mut write = |s: &Storage, samples: &[(i64, f64)], flush: bool| {
        s.write(cpu(samples)).unwrap();
        for &(t, v) in samples {
            expect.insert(t, v);
        }
        if flush {
            s.flush_head().unwrap();
        }
        let got = s.select(&[m(MatchOp::Equal, "__name__", "cpu")], 0, i64::MAX / 2, usize::MAX).unwrap();
        let want: Vec<Sample> = expect.iter().map(|(&t, &v)| Sample::new(t, v)).collect();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].samples, want, "after writing {samples:?} (flush: {flush})");
        let latest = s.latest(&[m(MatchOp::Equal, "__name__", "cpu")], i64::MAX / 2).unwrap();
        assert_eq!(latest[0].1, *want.last().unwrap());
    };
    let run = |from: i64, to: i64, v: f64| -> Vec<(i64, f64)> { (from..=to).map(|i| (T0 + i * 1000, v)).collect() };
    {
        let s = Storage::open(storage_config(dir.path())).unwrap();
        write(&s, &run(100, 200, 1.0), true);
        write(&s, &run(300, 400, 2.0), true);
        write(&s, &run(150, 160, 3.0), false); // overlaps a flushed run, still in the head
        write(&s, &run(155, 350, 4.0), true); // spans two flushed runs and the head
    }
    // A new life knows nothing of what the last one flushed.
    let s = Storage::open(storage_config(dir.path())).unwrap();
    write(&s, &run(170, 180, 5.0), true);
    write(&s, &run(390, 410, 6.0), true);
    write(&s, &[(T0 + 50_000, 7.0), (T0 + 1_000, 7.5), (T0 + 405_000, 8.0)], false); // unsorted
    write(&s, &run(0, 5000, 9.0)[..5001].iter().rev().step_by(7).copied().collect::<Vec<_>>(), true);
    // Runs longer than one row are split and still read back whole.
    write(&s, &run(6000, 16_000, 10.0), true);
    write(&s, &run(9000, 9100, 11.0), true);
}

/// The writer's filter of stored label sets (built by a scan when storage opens) never takes a
/// stored label set for a new one: after a reopen, once the scan is done, writing every old
/// series again creates no series, and new label sets are still created.
#[test]
fn stored_label_sets_keep_their_ids_once_the_filter_is_built() {
    let dir = tempfile::tempdir().unwrap();
    let name = |i: usize| i.to_string();
    let batch = |ids: std::ops::Range<usize>, t: i64| WriteBatch {
        series: ids.map(|i| series(&[("__name__", "m"), ("i", &name(i))], &[(t, i as f64)])).collect(),
    };
    let stored = 5_000;
    {
        let s = Storage::open(storage_config(dir.path())).unwrap();
        s.write(batch(0..stored, T0)).unwrap();
    }
    let s = Storage::open(storage_config(dir.path())).unwrap();
    // The filter's memory doubles once the scan's part joins the writer's own (both start at
    // 65,536 md5s, 128 KiB), published at the next commit creating a series.
    let mut next = stored;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while s.engine_stats().unwrap().label_set_filter_bytes <= 128 << 10 {
        assert!(std::time::Instant::now() < deadline, "the label-set filter was not built within a minute");
        s.write(batch(next..next + 1, T0)).unwrap();
        next += 1;
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let before = s.stats().unwrap().series_total;
    s.write(batch(0..stored, T0 + 60_000)).unwrap();
    assert_eq!(s.stats().unwrap().series_total, before, "a stored label set got a second id");
    s.write(batch(next..next + 100, T0)).unwrap();
    assert_eq!(s.stats().unwrap().series_total, before + 100);
    let all = s.select(&[m(MatchOp::Equal, "__name__", "m")], 0, i64::MAX / 2, usize::MAX).unwrap();
    assert_eq!(all.len(), next + 100);
    for found in &all {
        let i: usize = found.labels.get("i").unwrap().parse().unwrap();
        let expected = if i < stored { 2 } else { 1 };
        assert_eq!(found.samples.len(), expected, "series i={i}");
    }
}
