//! `--write-buffer` bounds fjall's memtables over all keyspaces. Without it, fjall sealed a
//! keyspace's memtable only at 64 MiB of its own, and the log's and the newest window's each
//! filled towards that: most of the soak run's RSS growth in its first 45 minutes
//! (`bench/README.md`, *Soak*).

use std::time::Duration;

use saltdb::labels::Labels;
use saltdb::sample::{Sample, SeriesSamples, WriteBatch};
use saltdb::storage::{HeadLimits, Storage};

use crate::common::*;

const MIB: u64 = 1 << 20;

fn batch(series: usize, t0: i64, samples: usize) -> WriteBatch {
    WriteBatch {
        series: (0..series)
            .map(|s| SeriesSamples {
                labels: Labels::from_pairs([("__name__", "m"), ("s", &s.to_string())]).unwrap(),
                samples: (0..samples).map(|i| Sample::new(t0 + i as i64 * 1000, (s + i) as f64)).collect(),
                histograms: Vec::new(),
            })
            .collect(),
    }
}

/// The most fjall's memtables held while 2.4 M samples (~29 MiB of log rows, then their runs)
/// were written with a write buffer of `budget` bytes, the head flushed every `head_samples`.
fn peak_write_buffer(budget: u64, head_samples: usize) -> u64 {
    let dir = tempfile::tempdir().unwrap();
    let mut config = storage_config(dir.path());
    config.write_buffer_bytes = budget;
    config.head = HeadLimits { max_samples: head_samples, max_bytes: 1 << 30, max_age: Duration::from_secs(3600) };
    let s = Storage::open(config).unwrap();
    let now = chrono::Utc::now().timestamp_millis();
    let t0 = now - now % 86_400_000;
    let mut peak = 0;
    for k in 0..60 {
        s.write(batch(2_000, t0 + k * 20_000, 20)).unwrap();
        peak = peak.max(s.engine_stats().unwrap().write_buffer_bytes);
    }
    peak
}

#[test]
fn memtables_stay_within_the_write_buffer() {
    // Without a bound that bites, and without head flushes, the memtables grow with what is
    // written (the log's rows).
    let unbounded = peak_write_buffer(1 << 30, 10_000_000);
    assert!(unbounded > 24 * MIB, "the memtables held only {unbounded} bytes; the workload no longer fills them");
    // With 4 MiB, the largest is sealed as soon as they hold more (the log's once it alone
    // holds twice the budget); sealed memtables still count until fjall's workers have flushed
    // them, hence the slack.
    let bounded = peak_write_buffer(4 * MIB, 10_000_000);
    assert!(bounded <= 16 * MIB, "memtables held {bounded} bytes with a 4 MiB write buffer");
}

/// The log's memtable is sealed after each head flush, when its rows are removed, so the log
/// does not pile up in memory (nor reach tables first) between flushes even without a budget.
#[test]
fn the_log_memtable_is_sealed_by_each_head_flush() {
    let flushed = peak_write_buffer(1 << 30, 200_000);
    assert!(flushed <= 16 * MIB, "memtables held {flushed} bytes with the head flushed every 200,000 samples");
}
