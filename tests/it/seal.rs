//! Sealing hot windows into chunks: reads stay bit-exact, late samples still land, a crash at
//! any point loses nothing and duplicates nothing.

use proptest::prelude::*;
use saltdb::labels::Labels;
use saltdb::matcher::{MatchOp, Matcher};
use saltdb::sample::{Sample, SeriesSamples, WriteBatch, STALE_NAN_BITS};
use saltdb::storage::{SealSwap, Storage};

use crate::common::*;

const DAY: i64 = 86_400_000;
const W0: i64 = 19_600 * DAY; // a window start in 2023

fn all(s: &Storage) -> Vec<(String, Vec<(i64, u64)>)> {
    all_in(s, 0, i64::MAX / 4)
}

/// [`all`] over `[start, end]`.
fn all_in(s: &Storage, start: i64, end: i64) -> Vec<(String, Vec<(i64, u64)>)> {
    let m = Matcher::new(MatchOp::RegexMatch, "__name__", ".+").unwrap();
    bits(s.select(&[m], start, end, usize::MAX).unwrap())
}

/// Series as sorted `(labels, [(timestamp, value bits)])`, to compare bit for bit.
fn bits(series: Vec<SeriesSamples>) -> Vec<(String, Vec<(i64, u64)>)> {
    let mut out: Vec<(String, Vec<(i64, u64)>)> = series
        .into_iter()
        .map(|x| (x.labels.to_string(), x.samples.iter().map(|p| (p.timestamp_ms, p.value.to_bits())).collect()))
        .collect();
    out.sort();
    out
}

fn batch(series: &[(String, Vec<(i64, f64)>)]) -> WriteBatch {
    WriteBatch {
        series: series
            .iter()
            .map(|(name, pts)| SeriesSamples {
                labels: Labels::from_pairs([("__name__", "sealme"), ("s", name.as_str())]).unwrap(),
                samples: pts.iter().map(|&(t, v)| Sample::new(t, v)).collect(),
                histograms: Vec::new(),
            })
            .collect(),
    }
}

fn arb_series() -> impl Strategy<Value = Vec<(String, Vec<(i64, f64)>)>> {
    let value = prop_oneof![
        (-10_000i64..10_000).prop_map(|v| v as f64 / 100.0),
        any::<u64>().prop_map(f64::from_bits),
        Just(f64::from_bits(STALE_NAN_BITS)),
        Just(f64::NAN),
        Just(f64::INFINITY),
        Just(-0.0),
        Just(7.0),
    ];
    proptest::collection::vec(proptest::collection::vec((0..2 * DAY, value), 1..1600), 1..6).prop_map(|ss| {
        ss.into_iter()
            .enumerate()
            .map(|(i, pts)| (format!("s{i}"), pts.into_iter().map(|(t, v)| (W0 + t, v)).collect()))
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]

    #[test]
    fn sealing_preserves_every_bit(series in arb_series(), late in proptest::collection::vec((0..DAY, any::<u64>()), 0..20)) {
        let dir = tempfile::tempdir().unwrap();
        let s = Storage::open(storage_config(dir.path())).unwrap();
        s.write(batch(&series)).unwrap();
        let before = all(&s);
        let sealed = s.seal_due(W0 + 3 * DAY, 0).unwrap();
        prop_assert!(!sealed.is_empty());
        prop_assert_eq!(&all(&s), &before);
        // Late samples into the sealed first window land in an overlay and win over chunks.
        let late: Vec<(String, Vec<(i64, f64)>)> = vec![("s0".into(), late.iter().map(|&(t, b)| (W0 + t, f64::from_bits(b))).collect())];
        if !late[0].1.is_empty() {
            s.write(batch(&late)).unwrap();
        }
        let with_late = all(&s);
        let again = s.seal_window(W0).unwrap();
        prop_assert_eq!(&all(&s), &with_late);
        if !late[0].1.is_empty() {
            prop_assert_eq!(again.map(|o| o.swap), Some(SealSwap::Sealed));
        }
        drop(s);
        let s = Storage::open(storage_config(dir.path())).unwrap();
        prop_assert_eq!(&all(&s), &with_late);
        let stats = s.stats().unwrap();
        prop_assert!(stats.windows.iter().all(|w| w.sealed && w.hot_bytes == 0));
    }
}

#[test]
fn sealed_windows_answer_ranges_and_latest() {
    let dir = tempfile::tempdir().unwrap();
    let s = Storage::open(storage_config(dir.path())).unwrap();
    // Two chunks' worth of samples spread over the day window, so a range can span a chunk
    // boundary whatever `CHUNK_SAMPLES` is.
    let per_chunk = saltdb::storage::format::chunk::CHUNK_SAMPLES as i64;
    let (n, step) = (2 * per_chunk, DAY / (2 * per_chunk));
    let pts: Vec<(i64, f64)> = (0..n).map(|i| (W0 + i * step, i as f64)).collect();
    s.write(batch(&[("a".into(), pts)])).unwrap();
    let out = s.seal_window(W0).unwrap().unwrap();
    assert_eq!((out.series, out.samples as i64, out.swap), (1, n, SealSwap::Sealed));
    assert_eq!(out.chunks, 2);
    let m = [Matcher::equal("s", "a")];
    // A range inside one chunk and one spanning a chunk boundary.
    let got = s.select(&m, W0 + step, W0 + 3 * step, usize::MAX).unwrap();
    assert_eq!(
        got[0].samples,
        vec![Sample::new(W0 + step, 1.0), Sample::new(W0 + 2 * step, 2.0), Sample::new(W0 + 3 * step, 3.0)]
    );
    let got = s.select(&m, W0 + (per_chunk - 1) * step, W0 + per_chunk * step, usize::MAX).unwrap();
    assert_eq!(got[0].samples.len(), 2);
    let latest = s.latest(&m, W0 + 100 * step + 7).unwrap();
    assert_eq!(latest[0].1, Sample::new(W0 + 100 * step, 100.0));
    // Late write newer than every chunked sample shows in latest.
    s.write(batch(&[("a".into(), vec![(W0 + DAY - 1, -1.0)])])).unwrap();
    assert_eq!(s.latest(&m, W0 + 2 * DAY).unwrap()[0].1, Sample::new(W0 + DAY - 1, -1.0));
}

#[test]
fn unfinished_seal_is_discarded_on_open() {
    let dir = tempfile::tempdir().unwrap();
    {
        let s = Storage::open(storage_config(dir.path())).unwrap();
        s.write(batch(&[("a".into(), vec![(W0, 1.0), (W0 + 1, 2.0)])])).unwrap();
    }
    // A seal that crashed before its manifest mark: a chunks keyspace with rows nobody marked.
    {
        let db = fjall::Database::builder(dir.path()).open().unwrap();
        let ks = db.keyspace(&format!("chunks_{W0}_1"), fjall::KeyspaceCreateOptions::default).unwrap();
        ks.insert([0u8; 18], b"garbage".to_vec()).unwrap();
        db.persist(fjall::PersistMode::SyncAll).unwrap();
    }
    let s = Storage::open(storage_config(dir.path())).unwrap();
    assert_eq!(all(&s), vec![(r#"sealme{s="a"}"#.to_owned(), vec![(W0, 1f64.to_bits()), (W0 + 1, 2f64.to_bits())])]);
    assert_eq!(s.seal_window(W0).unwrap().map(|o| o.swap), Some(SealSwap::Sealed));
    assert_eq!(all(&s).len(), 1);
}

#[test]
fn kill_9_during_sealing_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let now = chrono::Utc::now().timestamp_millis();
    let t0 = now - now % DAY - 3 * DAY;
    // Three closed days of 150 series at 30 s.
    let mut expected = Exported::new();
    let bin = Binary::spawn(dir.path(), &["--retention", "0", "--ooo-grace", "0", "--maintenance-interval", "1h"]);
    for day in 0..3 {
        let (body, exp) = dataset(150, 2880, t0 + day * DAY, &format!("seal{day}"));
        assert_eq!(import(&bin.url(""), body), (204, String::new()));
        expected.extend(exp);
    }
    bin.kill9();
    // Restart with sealing every 200 ms and kill it at staggered moments while it works.
    for delay_ms in [150, 400, 700, 1100] {
        let bin =
            Binary::spawn(dir.path(), &["--retention", "0", "--ooo-grace", "0", "--maintenance-interval", "200ms"]);
        std::thread::sleep(std::time::Duration::from_millis(delay_ms));
        bin.kill9();
        let bin = Binary::spawn(dir.path(), &["--retention", "0", "--ooo-grace", "0", "--maintenance-interval", "1h"]);
        assert_eq!(
            export(&bin.url(""), r#"{__name__=~"seal.*"}"#),
            expected,
            "after a kill {delay_ms} ms into sealing"
        );
        bin.kill9();
    }
    // Let sealing finish, then check once more.
    let bin = Binary::spawn(dir.path(), &["--retention", "0", "--ooo-grace", "0", "--maintenance-interval", "200ms"]);
    std::thread::sleep(std::time::Duration::from_secs(4));
    assert_eq!(export(&bin.url(""), r#"{__name__=~"seal.*"}"#), expected);
    bin.terminate();
    let s = Storage::open(storage_config(dir.path())).unwrap();
    let windows = s.stats().unwrap().windows;
    assert!(
        windows.len() >= 3 && windows.iter().all(|w| w.sealed && w.hot_bytes == 0),
        "the server sealed every closed window: {windows:?}"
    );
}

#[test]
fn sealed_windows_survive_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let day = |d: i64| -> Vec<(i64, f64)> { (0..2880).map(|i| (W0 + d * DAY + i * 15_000, i as f64)).collect() };
    {
        let s = Storage::open(storage_config(dir.path())).unwrap();
        s.write(batch(&[("a".into(), day(0)), ("b".into(), day(1)), ("c".into(), day(2))])).unwrap();
        let sealed = s.seal_due(W0 + 10 * DAY, 0).unwrap();
        assert_eq!(sealed.len(), 3);
        assert_eq!(s.stats().unwrap().windows.len(), 3);
    }
    let s = Storage::open(storage_config(dir.path())).unwrap();
    let w = s.stats().unwrap().windows;
    assert_eq!(w.len(), 3, "{w:?}");
    assert_eq!(all(&s).len(), 3);
}

#[test]
fn window_status_and_inspect_show_sealing() {
    let dir = tempfile::tempdir().unwrap();
    let now = chrono::Utc::now().timestamp_millis();
    let day0 = now - now % DAY - 2 * DAY;
    let bin = Binary::spawn(dir.path(), &["--retention", "0", "--maintenance-interval", "1h"]);
    let (body, _) = dataset(20, 100, day0, "status");
    assert_eq!(import(&bin.url(""), body), (204, String::new()));
    let status = |base: &str| -> serde_json::Value {
        serde_json::from_str(&client().get(format!("{base}/api/v1/status/windows")).send().unwrap().text().unwrap())
            .unwrap()
    };
    let v = status(&bin.url(""));
    assert_eq!(v["status"], "success");
    let w = &v["data"][0];
    assert_eq!(
        (w["start"].as_i64(), w["end"].as_i64(), w["state"].as_str()),
        (Some(day0), Some(day0 + DAY), Some("hot"))
    );
    assert_eq!(w["series"], 20);
    bin.terminate();

    let bin = Binary::spawn(dir.path(), &["--retention", "0", "--ooo-grace", "0", "--maintenance-interval", "100ms"]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let v = status(&bin.url(""));
        if v["data"][0]["state"] == "sealed" {
            assert_eq!(v["data"][0]["samples"], 2000);
            assert_eq!(v["data"][0]["series"], 20);
            break;
        }
        assert!(std::time::Instant::now() < deadline, "window never sealed: {v}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_saltdb"))
        .args(["inspect", "--url", &bin.url("")])
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(table.contains("sealed") && table.contains("B/sample") && table.contains("2000"), "{table}");
    bin.terminate();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_saltdb"))
        .args(["inspect", "--url", "http://127.0.0.1:1"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot reach"));
}

#[test]
fn a_write_racing_a_seal_is_not_dropped_with_the_overlay() {
    // A seal that starts while the writer thread is still filling a group into the window must
    // keep the overlay: the group's rows are committed only after the seal has read the window.
    let dir = tempfile::tempdir().unwrap();
    let s = Storage::open(storage_config(dir.path())).unwrap();
    s.write(batch(&[("base".into(), vec![(W0, 1.0), (W0 + 1, 2.0)])])).unwrap();
    let mut expected = 2;
    for round in 0..4i64 {
        // One long series: the window's write counter moves when its first sample is filled,
        // long before the group commits.
        let pts = (0..200_000).map(|j| (W0 + 1_000 + round * 2_000_000 + j * 10, j as f64)).collect();
        let late = vec![(format!("late{round}"), pts)];
        expected += 200_000;
        let writer = {
            let s = s.clone();
            let b = batch(&late);
            std::thread::spawn(move || s.write(b))
        };
        // Start the seal while the writer thread fills the group (at various points of it).
        std::thread::sleep(std::time::Duration::from_millis([15, 2, 8, 30][round as usize]));
        s.seal_window(W0).unwrap();
        writer.join().unwrap().unwrap();
        let stored: usize = all(&s).iter().map(|(_, pts)| pts.len()).sum();
        assert_eq!(stored, expected, "round {round}: an acknowledged write raced a seal and was lost");
    }
}

/// Rows of the window's visible chunks keyspace (the database must be closed).
fn chunk_rows(dir: &std::path::Path, start_ms: i64) -> std::collections::BTreeMap<Vec<u8>, Vec<u8>> {
    let db = fjall::Database::builder(dir).open().unwrap();
    let meta = db.keyspace("meta", fjall::KeyspaceCreateOptions::default).unwrap();
    let generation =
        u32::from_be_bytes(meta.get(format!("sealed/{start_ms}")).unwrap().unwrap().as_ref().try_into().unwrap());
    let ks = db.keyspace(&format!("chunks_{start_ms}_{generation}"), fjall::KeyspaceCreateOptions::default).unwrap();
    ks.iter().map(|g| g.into_inner().unwrap()).map(|(k, v)| (k.to_vec(), v.to_vec())).collect()
}

#[test]
fn a_late_sample_reseals_only_its_series() {
    // Issue 13 item 6: a late sample for a sealed window used to rewrite every series of the
    // window into a new chunks generation; only its own series' chunks are rewritten now.
    let dir = tempfile::tempdir().unwrap();
    let (series, per) = (600usize, 240i64);
    let day: Vec<(String, Vec<(i64, f64)>)> = (0..series)
        .map(|s| (format!("s{s}"), (0..per).map(|i| (W0 + i * 360_000, (s as i64 * 1000 + i) as f64 / 4.0)).collect()))
        .collect();
    let s = Storage::open(storage_config(dir.path())).unwrap();
    s.write(batch(&day)).unwrap();
    let first = s.seal_window(W0).unwrap().unwrap();
    assert_eq!((first.series, first.swap), (series, SealSwap::Sealed));
    drop(s);
    let before = chunk_rows(dir.path(), W0);

    let s = Storage::open(storage_config(dir.path())).unwrap();
    // One new sample between two sealed ones and one rewrite of a sealed sample, same series.
    s.write(batch(&[("s7".into(), vec![(W0 + 1_000, -1.0), (W0 + 360_000, -2.0)])])).unwrap();
    let expected = all(&s);
    let s7 = &expected.iter().find(|(l, _)| l.contains(r#"s="s7""#)).unwrap().1;
    assert_eq!(
        &s7[..3],
        &[(W0, 1750f64.to_bits()), (W0 + 1_000, (-1f64).to_bits()), (W0 + 360_000, (-2f64).to_bits())]
    );
    let started = std::time::Instant::now();
    let again = s.seal_window(W0).unwrap().unwrap();
    eprintln!("re-seal of 1 late series in a window of {series} series: {:?}", started.elapsed());
    assert_eq!((again.series, again.samples, again.chunks, again.swap), (1, per as usize + 1, 1, SealSwap::Sealed));
    assert_eq!(all(&s), expected);
    let stats = s.stats().unwrap();
    assert!(stats.windows.iter().all(|w| w.sealed && w.hot_bytes == 0), "the overlay is gone: {:?}", stats.windows);
    let status = s.window_status().unwrap();
    assert_eq!(status[0].samples, series as u64 * per as u64 + 1);
    drop(s);

    let after = chunk_rows(dir.path(), W0);
    let changed: std::collections::BTreeSet<Vec<u8>> = before
        .keys()
        .chain(after.keys())
        .filter(|k| before.get(*k) != after.get(*k))
        .map(|k| k[..10].to_vec())
        .collect();
    assert_eq!(changed.len(), 1, "rows of one series changed, of {} series", changed.len());
    assert_eq!(before.len(), after.len(), "same rows: one chunk per series, the index unchanged");
    let s = Storage::open(storage_config(dir.path())).unwrap();
    assert_eq!(all(&s), expected);
}

#[test]
fn kill_9_during_a_reseal_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let now = chrono::Utc::now().timestamp_millis();
    let t0 = now - now % DAY - 2 * DAY;
    let hour = ["--retention", "0", "--ooo-grace", "0", "--maintenance-interval", "1h"];
    let fast = ["--retention", "0", "--ooo-grace", "0", "--maintenance-interval", "200ms"];
    let bin = Binary::spawn(dir.path(), &fast);
    let (body, mut expected) = dataset(400, 2880, t0, "reseal");
    assert_eq!(import(&bin.url(""), body), (204, String::new()));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let sealed = |base: &str| get_json(&format!("{base}/api/v1/status/windows"))["data"][0]["state"] == "sealed";
    while !sealed(&bin.url("")) {
        assert!(std::time::Instant::now() < deadline, "the window was never sealed");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    bin.kill9();
    // Late samples for every series: new timestamps, then rewritten values (shifted by 100
    // samples, so each differs from the sealed one it replaces).
    let bin = Binary::spawn(dir.path(), &hour);
    for (offset, n) in [(7_500, 1440), (1_500_000, 500)] {
        let (late, late_expected) = dataset(400, n, t0 + offset, "reseal");
        assert_eq!(import(&bin.url(""), late), (204, String::new()));
        for (metric, samples) in late_expected {
            let all = expected.get_mut(&metric).unwrap();
            let mut merged: std::collections::BTreeMap<i64, u64> = all.iter().copied().collect();
            merged.extend(samples);
            *all = merged.into_iter().collect();
        }
    }
    assert_eq!(export(&bin.url(""), r#"{__name__=~"reseal.*"}"#), expected);
    bin.kill9();
    // The re-seal starts about 200 ms after the server listens and may take little more than
    // 100 ms on an idle machine: the kills come densely from then on. A kill after it finished
    // leaves the later ones nothing to cut.
    let delays = [200, 240, 280, 330, 400, 500, 700, 1000, 1500];
    let mut cut_short = 0;
    for delay_ms in delays {
        let log = dir.path().join(format!("kill-{delay_ms}.log"));
        let bin = Binary::spawn_logged(dir.path(), &fast, "saltdb=debug", &log);
        std::thread::sleep(std::time::Duration::from_millis(delay_ms));
        bin.kill9();
        let log = std::fs::read_to_string(&log).unwrap();
        cut_short += usize::from(log.contains("sealing window") && !log.contains("re-seal finished"));
        let bin = Binary::spawn(dir.path(), &hour);
        assert_eq!(
            export(&bin.url(""), r#"{__name__=~"reseal.*"}"#),
            expected,
            "after a kill {delay_ms} ms into re-sealing"
        );
        bin.kill9();
    }
    eprintln!("{cut_short} of {} kills landed inside a re-seal", delays.len());
    assert!(cut_short > 0, "no kill landed inside a re-seal");
    let bin = Binary::spawn(dir.path(), &fast);
    std::thread::sleep(std::time::Duration::from_secs(4));
    assert_eq!(export(&bin.url(""), r#"{__name__=~"reseal.*"}"#), expected);
    bin.terminate();
    let s = Storage::open(storage_config(dir.path())).unwrap();
    let windows = s.stats().unwrap().windows;
    assert!(windows.iter().all(|w| w.sealed && w.hot_bytes == 0), "the re-seal finished: {windows:?}");
}

/// A sink that keeps every sample it is fed.
struct Collect(Vec<Sample>);

impl saltdb::storage::SampleSink for Collect {
    fn feed(&mut self, batch: &[Sample]) {
        self.0.extend_from_slice(batch);
    }
    fn finish(self: Box<Self>) -> Vec<Sample> {
        self.0
    }
}

/// Every series as fed to sinks by `select_reduced` (window by window), in the shape of [`all`].
fn all_fed(s: &Storage, start: i64, end: i64) -> Vec<(String, Vec<(i64, u64)>)> {
    use saltdb::storage::Querier;
    let m = Matcher::new(MatchOp::RegexMatch, "__name__", ".+").unwrap();
    let sink = || -> Box<dyn saltdb::storage::SampleSink> { Box::new(Collect(Vec::new())) };
    let q = s.querier(saltdb::storage::ReadLimits::none());
    bits(q.select_reduced(&[m], start, end, &sink, None).unwrap())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]

    /// A reduced read feeds its sinks, window by window, exactly what a whole read collects:
    /// hot windows, sealed ones, sealed ones with late samples in their overlay, and samples
    /// still in the head (flushed or not), over any range.
    #[test]
    fn reduced_reads_feed_what_whole_reads_collect(
        series in arb_series(),
        late in proptest::collection::vec((0..DAY, any::<u64>()), 0..20),
        newer in proptest::collection::vec((0..DAY, -100i64..100), 0..50),
        (from, to) in (0..3 * DAY, 0..3 * DAY),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let s = Storage::open(storage_config(dir.path())).unwrap();
        let (start, end) = (W0 + from.min(to), W0 + from.max(to));
        let check = |s: &Storage| -> Result<(), TestCaseError> {
            prop_assert_eq!(all_fed(s, start, end), all_in(s, start, end));
            prop_assert_eq!(all_fed(s, 0, i64::MAX / 4), all(s));
            Ok(())
        };
        s.write(batch(&series)).unwrap();
        check(&s)?;
        s.flush().unwrap();
        check(&s)?;
        s.seal_due(W0 + 3 * DAY, 0).unwrap();
        check(&s)?;
        let late: Vec<(String, Vec<(i64, f64)>)> = vec![("s0".into(), late.iter().map(|&(t, b)| (W0 + t, f64::from_bits(b))).collect())];
        let newer: Vec<(String, Vec<(i64, f64)>)> = vec![("s1".into(), newer.iter().map(|&(t, v)| (W0 + 2 * DAY + t, v as f64)).collect())];
        for extra in [late, newer] {
            if !extra[0].1.is_empty() {
                s.write(batch(&extra)).unwrap();
            }
        }
        check(&s)?;
        s.flush().unwrap();
        check(&s)?;
    }
}
