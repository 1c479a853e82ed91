//! Issue 32 item 4: once writes stop for `--idle-flush`, a running server's data directory is
//! about its size after a clean shutdown (tables, no journal that only repeats them), and what
//! was acknowledged still survives `kill -9`, before and after the idle flush.

use std::path::Path;
use std::time::{Duration, Instant};

use saltdb::storage::du_bytes;

use crate::common::*;

/// Allocated bytes of fjall's journal files (`*.jnl`).
fn journal_bytes(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "jnl"))
        .filter_map(|p| std::fs::metadata(p).ok())
        .map(|m| m.blocks() * 512)
        .sum()
}

/// Waits until the journal holds at most `bytes`; returns how long that took.
fn wait_journal_below(dir: &Path, bytes: u64, within: Duration) -> Duration {
    let began = Instant::now();
    while journal_bytes(dir) > bytes {
        assert!(began.elapsed() < within, "journal still {} bytes after {within:?}", journal_bytes(dir));
        std::thread::sleep(Duration::from_millis(100));
    }
    began.elapsed()
}

#[test]
fn an_idle_server_keeps_tables_only_and_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let now = chrono::Utc::now().timestamp_millis();
    let t0 = now - now % 3_600_000 - 3 * 3_600_000;
    let args = ["--retention", "0", "--head-max-samples", "100000", "--idle-flush", "1s"];
    let bin = Binary::spawn(dir.path(), &args);
    let mut expected = Exported::new();
    // 300,000 samples, as in `clean_close.rs`: about 6 MB of journal once written.
    for part in 0..3 {
        let (body, exp) = dataset(500, 200, t0 + part * 200 * 15_000, "idle");
        assert_eq!(import(&bin.url(""), body), (204, String::new()));
        for (metric, samples) in exp {
            expected.entry(metric).or_default().extend(samples);
        }
    }
    let busy = du_bytes(dir.path()).unwrap();
    let took = wait_journal_below(dir.path(), 64 << 10, Duration::from_secs(30));
    let idle = du_bytes(dir.path()).unwrap();
    eprintln!("300,000 samples: du {busy} bytes after the writes, {idle} once idle ({took:?})");
    // `clean_close.rs` bounds the same data after a clean shutdown below 8 bytes a sample.
    assert!(idle < 300_000 * 8, "du {idle} bytes for 300,000 samples while idle");
    assert!(idle < busy / 2, "du {idle} bytes idle, {busy} right after the writes");

    // Killed after the idle flush: everything is there.
    bin.kill9();
    let bin = Binary::spawn(dir.path(), &args);
    assert_eq!(export(&bin.url(""), r#"{__name__=~"idle.*"}"#), expected);

    // Killed right after a write that followed an idle flush: the write is there too.
    wait_journal_below(dir.path(), 64 << 10, Duration::from_secs(30));
    let (body, exp) = dataset(500, 10, t0 + 600 * 15_000, "idle");
    assert_eq!(import(&bin.url(""), body), (204, String::new()));
    for (metric, samples) in exp {
        expected.entry(metric).or_default().extend(samples);
    }
    bin.kill9();
    let bin = Binary::spawn(dir.path(), &args);
    assert_eq!(export(&bin.url(""), r#"{__name__=~"idle.*"}"#), expected);
    bin.terminate();
}

/// `kill -9` while an idle flush is under way (head flush, memtables sealed, journal padded and
/// rolled over, log compacted): every acknowledged sample is there after the restart.
#[test]
fn kill_9_during_idle_flushes_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let now = chrono::Utc::now().timestamp_millis();
    let t0 = now - now % 3_600_000 - 3 * 3_600_000;
    let args = ["--retention", "0", "--idle-flush", "1s"];
    let mut expected = Exported::new();
    // Kills spread over the second after the idle flush falls due (it takes 0.1-1 s here).
    for (round, wait_ms) in [950u64, 1_050, 1_150, 1_300, 1_600].into_iter().enumerate() {
        let bin = Binary::spawn(dir.path(), &args);
        assert_eq!(export(&bin.url(""), r#"{__name__=~"idlekill.*"}"#), expected, "after restart {round}");
        let (body, exp) = dataset(500, 100, t0 + round as i64 * 100 * 15_000, "idlekill");
        assert_eq!(import(&bin.url(""), body), (204, String::new()));
        for (metric, samples) in exp {
            expected.entry(metric).or_default().extend(samples);
        }
        std::thread::sleep(Duration::from_millis(wait_ms));
        bin.kill9();
    }
    let bin = Binary::spawn(dir.path(), &args);
    assert_eq!(export(&bin.url(""), r#"{__name__=~"idlekill.*"}"#), expected);
    bin.terminate();
}
