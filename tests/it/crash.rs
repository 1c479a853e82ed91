//! `kill -9` right after a 204: every acknowledged sample is there after restart.

use crate::common::*;

#[test]
fn acknowledged_imports_survive_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let mut expected = Exported::new();
    for round in 0..3 {
        let bin = Binary::spawn(dir.path(), &["--retention", "0"]);
        let base = bin.url("");
        // Everything acknowledged before must still be there.
        assert_eq!(export(&base, r#"{__name__=~"crash_.*"}"#), expected, "after restart {round}");
        let (body, new) = dataset(200, 20, 1_700_000_000_000 + round * 3_600_000, &format!("crash_{round}"));
        assert_eq!(import(&base, body), (204, String::new()));
        expected.extend(new);
        bin.kill9();
    }
    let bin = Binary::spawn(dir.path(), &["--retention", "0"]);
    assert_eq!(export(&bin.url(""), r#"{__name__=~"crash_.*"}"#), expected);
    bin.terminate();
}

/// A head that falls due is flushed in steps between group commits (see
/// `storage/write/flush.rs`). Four writers keep the writer busy with a head limit far below what
/// they send, so flush cycles are under way (some shards flushed, their log rows still there)
/// when `kill -9` comes: every acknowledged batch is there after restart, every batch is there
/// whole or not at all, and nothing is duplicated.
#[test]
fn acknowledged_imports_survive_kill_9_during_head_flush_cycles() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    let dir = tempfile::tempdir().unwrap();
    let args = ["--retention", "0", "--head-max-samples", "20000"];
    let bin = Binary::spawn(dir.path(), &args);
    let base = bin.url("");
    let stop = Arc::new(AtomicBool::new(false));
    // Every batch sent: its series, and whether it was acknowledged.
    let sent: Arc<Mutex<Vec<(Exported, bool)>>> = Arc::default();
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let (base, stop, sent) = (base.clone(), Arc::clone(&stop), Arc::clone(&sent));
            std::thread::spawn(move || {
                for round in 0.. {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let (body, new) =
                        dataset(400, 5, 1_700_000_000_000 + round * 600_000, &format!("cycle_{w}_{round}"));
                    let acked = std::panic::catch_unwind(|| import(&base, body)).is_ok_and(|r| r.0 == 204);
                    sent.lock().unwrap().push((new, acked));
                    if !acked {
                        break;
                    }
                }
            })
        })
        .collect();
    while sent.lock().unwrap().iter().filter(|(_, acked)| *acked).count() < 60 {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    bin.kill9();
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.join().unwrap();
    }
    let bin = Binary::spawn(dir.path(), &args);
    let found = export(&bin.url(""), r#"{__name__=~"cycle_.*"}"#);
    bin.terminate();
    let mut covered = 0;
    for (batch, acked) in sent.lock().unwrap().iter() {
        let present = batch.keys().filter(|labels| found.contains_key(*labels)).count();
        assert!(present == 0 || present == batch.len(), "a batch is there in part: {present} of {}", batch.len());
        assert!(present > 0 || !acked, "an acknowledged batch is gone");
        for (labels, samples) in batch.iter().take(present) {
            assert_eq!(found.get(labels), Some(samples), "{labels:?}");
        }
        covered += present;
    }
    assert_eq!(covered, found.len(), "series found that no batch sent");
}
