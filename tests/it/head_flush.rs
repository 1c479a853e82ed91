//! Issue 13 item 6, defect 1: the head is flushed when it is due (`--head-max-samples`,
//! `--head-flush-interval`) or when an operation needs its samples in a window keyspace, not by
//! every maintenance pass.

use std::time::{Duration, Instant};

use saltdb::labels::Labels;
use saltdb::sample::{Sample, SeriesSamples, WriteBatch};
use saltdb::server::{Maintenance, ServerConfig};
use saltdb::storage::{HeadLimits, Storage};

use crate::common::*;

const DAY: i64 = 86_400_000;

fn batch(name: &str, series: usize, t0: i64, samples: usize) -> WriteBatch {
    WriteBatch {
        series: (0..series)
            .map(|s| SeriesSamples {
                labels: Labels::from_pairs([("__name__", name), ("s", &s.to_string())]).unwrap(),
                samples: (0..samples).map(|i| Sample::new(t0 + i as i64 * 1000, i as f64)).collect(),
                histograms: Vec::new(),
            })
            .collect(),
    }
}

#[test]
fn maintenance_passes_leave_a_head_that_is_not_due() {
    let dir = tempfile::tempdir().unwrap();
    let mut storage = storage_config(dir.path());
    storage.retention_ms = Some(30 * DAY);
    storage.head = HeadLimits { max_samples: 4_000_000, max_bytes: 1 << 30, max_age: Duration::from_secs(3600) };
    let now = chrono::Utc::now().timestamp_millis();
    let today = now - now % DAY;
    // A closed window with flushed hot rows, for the maintenance pass to seal.
    {
        let s = Storage::open(storage.clone()).unwrap();
        s.write(batch("old", 10, today - 2 * DAY, 100)).unwrap();
        s.flush_head().unwrap();
        assert_eq!(s.head_samples(), 0);
    }
    let mut config = ServerConfig::new("127.0.0.1:0".parse().unwrap(), storage);
    config.maintenance = Maintenance { interval: Duration::from_millis(50), ooo_grace_ms: Some(0) };
    let server = InProcess::start_with(runtime(), config);
    let s = server.server.as_ref().unwrap().storage().expect("embedded store").clone();
    // Samples of today's window, which no pass seals or drops.
    let recent = (now - 60_000).max(today);
    s.write(batch("recent", 20, recent, 50)).unwrap();
    assert_eq!(s.head_samples(), 1000);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !s.stats().unwrap().windows.iter().any(|w| w.start_ms == today - 2 * DAY && w.sealed) {
        assert!(Instant::now() < deadline, "maintenance never sealed the closed window");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Many more passes (retention, log compaction, sealing) at 50 ms.
    std::thread::sleep(Duration::from_millis(1000));
    assert_eq!(s.head_samples(), 1000, "a maintenance pass flushed a head that was not due");
    // The samples read back from the head, and the sealed window from its chunks.
    let all = saltdb::matcher::Matcher::new(saltdb::matcher::MatchOp::RegexMatch, "__name__", ".+").unwrap();
    let got: usize = s.select(&[all], 0, now + DAY, usize::MAX).unwrap().iter().map(|x| x.samples.len()).sum();
    assert_eq!(got, 2000);
    drop(s);
    server.stop();
}

#[test]
fn the_head_is_flushed_when_a_window_is_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let mut storage = storage_config(dir.path());
    storage.retention_ms = Some(3 * DAY);
    storage.head = HeadLimits { max_samples: 4_000_000, max_bytes: 1 << 30, max_age: Duration::from_secs(3600) };
    let now = chrono::Utc::now().timestamp_millis();
    let today = now - now % DAY;
    let s = Storage::open(storage).unwrap();
    s.write(batch("kept", 3, today, 10)).unwrap();
    assert_eq!(s.enforce_retention(now).unwrap(), Vec::<i64>::new());
    assert_eq!(s.head_samples(), 30, "nothing expired: the head stays");
    // Three days later today's window expires: the head is flushed and the window dropped with
    // its samples, so the next flush does not recreate it.
    assert_eq!(s.enforce_retention(now + 4 * DAY).unwrap(), vec![today]);
    assert_eq!(s.head_samples(), 0);
    s.flush_head().unwrap();
    assert!(s.stats().unwrap().windows.is_empty());
}

#[test]
fn sealing_a_window_flushes_the_head_only_for_that_windows_samples() {
    let dir = tempfile::tempdir().unwrap();
    let mut storage = storage_config(dir.path());
    storage.head = HeadLimits { max_samples: 4_000_000, max_bytes: 1 << 30, max_age: Duration::from_secs(3600) };
    let now = chrono::Utc::now().timestamp_millis();
    let today = now - now % DAY;
    let s = Storage::open(storage).unwrap();
    s.write(batch("old", 5, today - 2 * DAY, 10)).unwrap();
    s.flush_head().unwrap();
    s.write(batch("recent", 4, today, 10)).unwrap();
    // The closed window's samples are all in its keyspace: sealing it leaves the head alone.
    let sealed = s.seal_due(now, 0).unwrap();
    assert_eq!(sealed.iter().map(|o| (o.start_ms, o.series)).collect::<Vec<_>>(), vec![(today - 2 * DAY, 5)]);
    assert_eq!(s.head_samples(), 40);
    // A late sample for it in the head is the window's: the re-seal flushes the head first.
    s.write(batch("old", 1, today - 2 * DAY + 1, 1)).unwrap();
    let resealed = s.seal_due(now, 0).unwrap();
    assert_eq!(resealed.iter().map(|o| o.start_ms).collect::<Vec<_>>(), vec![today - 2 * DAY]);
    assert_eq!(s.head_samples(), 0);
}

/// A due head drains in steps while writes go on: every sample stays readable after each write,
/// and the head ends below its limit without anyone asking for a flush.
#[test]
fn a_due_head_drains_in_steps_while_writes_go_on() {
    let dir = tempfile::tempdir().unwrap();
    let mut storage = storage_config(dir.path());
    storage.head = HeadLimits { max_samples: 20_000, max_bytes: 1 << 30, max_age: Duration::from_secs(3600) };
    let now = chrono::Utc::now().timestamp_millis();
    let s = Storage::open(storage).unwrap();
    let all = saltdb::matcher::Matcher::new(saltdb::matcher::MatchOp::RegexMatch, "__name__", ".+").unwrap();
    let t0 = now - 3_600_000;
    let mut written = 0;
    for round in 0..30 {
        s.write(batch("drain", 2_000, t0 + round * 10_000, 5)).unwrap();
        written += 10_000;
        let got: usize =
            s.select(std::slice::from_ref(&all), 0, now, usize::MAX).unwrap().iter().map(|x| x.samples.len()).sum();
        assert_eq!(got, written, "after round {round}");
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while s.head_samples() >= 20_000 {
        assert!(Instant::now() < deadline, "the head never drained: {} samples", s.head_samples());
        std::thread::sleep(Duration::from_millis(20));
    }
    let got: usize = s.select(&[all], 0, now, usize::MAX).unwrap().iter().map(|x| x.samples.len()).sum();
    assert_eq!(got, written);
}

/// At many series the head gathers several samples a series before it is due by size (so each
/// series' run on disk is not one sample long), and its memory bound flushes it whatever the
/// sample counts allow.
#[test]
fn the_head_bound_follows_the_series_it_holds_within_its_memory() {
    let now = chrono::Utc::now().timestamp_millis();
    let t0 = now - 3_600_000;
    let all = || saltdb::matcher::Matcher::new(saltdb::matcher::MatchOp::RegexMatch, "__name__", ".+").unwrap();
    let wait_drained = |s: &Storage, what: &str| {
        let deadline = Instant::now() + Duration::from_secs(20);
        while s.head_samples() > 0 {
            assert!(Instant::now() < deadline, "{what}: the head never drained ({} samples)", s.head_samples());
            std::thread::sleep(Duration::from_millis(20));
        }
    };

    // 2,000 series, one sample each a round, with max_samples 1,000: due at 4 samples a series.
    let dir = tempfile::tempdir().unwrap();
    let mut storage = storage_config(dir.path());
    storage.head = HeadLimits { max_samples: 1_000, max_bytes: 1 << 30, max_age: Duration::from_secs(3600) };
    let s = Storage::open(storage).unwrap();
    for round in 0..3 {
        s.write(batch("wide", 2_000, t0 + round * 10_000, 1)).unwrap();
    }
    // Any flush would have begun right after the last group commit.
    std::thread::sleep(Duration::from_millis(500));
    let held = s.head_figures();
    assert_eq!((held.samples, held.series), (6_000, 2_000), "3 samples a series are not due");
    // 96 bytes a series: its map entry, which holds its first 4 samples.
    assert!(held.bytes >= 2_000 * 96, "the head's bytes count its series and samples: {held:?}");
    s.write(batch("wide", 2_000, t0 + 3 * 10_000, 1)).unwrap();
    wait_drained(&s, "4 samples a series");
    assert_eq!(s.head_figures(), saltdb::storage::HeadFigures::default());
    let got: usize = s.select(&[all()], 0, now, usize::MAX).unwrap().iter().map(|x| x.samples.len()).sum();
    assert_eq!(got, 8_000);
    drop(s);

    // The memory bound: 2,000 series of one sample (at least 96 bytes each) exceed 100 KiB
    // though the sample counts are far from due.
    let dir = tempfile::tempdir().unwrap();
    let mut storage = storage_config(dir.path());
    storage.head = HeadLimits { max_samples: 1_000_000, max_bytes: 100 << 10, max_age: Duration::from_secs(3600) };
    let s = Storage::open(storage).unwrap();
    s.write(batch("wide", 2_000, t0, 1)).unwrap();
    wait_drained(&s, "past max_bytes");
    let got: usize = s.select(&[all()], 0, now, usize::MAX).unwrap().iter().map(|x| x.samples.len()).sum();
    assert_eq!(got, 2_000);
}
