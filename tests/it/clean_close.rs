//! Issue 13 item 6, defect 3: after a clean shutdown the data directory holds tables, not a
//! journal and write-ahead-log rows that only repeat them. Sizes are what `du` counts (blocks
//! allocated), as an operator measures them.

use std::path::Path;

use saltdb::labels::Labels;
use saltdb::matcher::{MatchOp, Matcher};
use saltdb::sample::{Sample, SeriesSamples, WriteBatch};
use saltdb::storage::{du_bytes, SealSwap, Storage};

use crate::common::*;

/// Allocated bytes of fjall's journal files (`*.jnl`) and, separately, the apparent length of
/// every table file (`keyspaces/<id>/tables/<n>`) and how many files and directories there are.
struct Layout {
    journal: u64,
    tables: u64,
    entries: u64,
}

fn layout(dir: &Path) -> Layout {
    use std::os::unix::fs::MetadataExt;
    let mut out = Layout { journal: 0, tables: 0, entries: 0 };
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let meta = e.metadata().unwrap();
            out.entries += 1;
            if meta.is_dir() {
                stack.push(e.path());
            } else if e.path().extension().is_some_and(|x| x == "jnl") {
                out.journal += meta.blocks() * 512;
            } else if e.path().parent().and_then(Path::file_name).is_some_and(|p| p == "tables") {
                out.tables += meta.len();
            }
        }
    }
    out
}

#[test]
fn a_clean_shutdown_leaves_tables_only() {
    let dir = tempfile::tempdir().unwrap();
    let now = chrono::Utc::now().timestamp_millis();
    let t0 = now - now % 3_600_000 - 3 * 3_600_000;
    // 300,000 samples (500 series x 600 at 15 s: 2.5 h) through the real binary, with a head
    // small enough to be flushed a few times on the way.
    let bin = Binary::spawn(dir.path(), &["--retention", "0", "--head-max-samples", "100000"]);
    let mut expected = Exported::new();
    for part in 0..3 {
        let (body, exp) = dataset(500, 200, t0 + part * 200 * 15_000, "close");
        assert_eq!(import(&bin.url(""), body), (204, String::new()));
        for (metric, samples) in exp {
            expected.entry(metric).or_default().extend(samples);
        }
    }
    let open = du_bytes(dir.path()).unwrap();
    bin.terminate();

    let closed = layout(dir.path());
    let du = du_bytes(dir.path()).unwrap();
    eprintln!(
        "300,000 samples: du {du} bytes after a clean shutdown ({open} while running); journal {} bytes; \
         tables {} bytes; {} files and directories",
        closed.journal, closed.tables, closed.entries
    );
    // The journal is empty: every memtable went to tables first.
    assert_eq!(closed.journal, 0, "journal left after a clean shutdown");
    // Everything else is tables, each rounded up to whole 4 KiB blocks, plus per keyspace a few
    // small files (version, config) of one block each: at most one block per file or directory
    // beyond the tables' bytes, and a 64 KiB allowance for fjall's own metadata keyspace.
    let bound = closed.tables + 4096 * closed.entries + (64 << 10);
    assert!(du <= bound, "du {du} bytes > bound {bound} (tables {} bytes)", closed.tables);
    // What the bound excludes: the write-ahead log's ~20 bytes a sample in the journal, and its
    // dead rows in tables (the hot runs alone take about 4-5 bytes a sample).
    assert!(du < 300_000 * 8, "du {du} bytes for 300,000 samples");

    // Everything reads back, and the database keeps working (a rewrite wins, a crash after it
    // replays the journal written since).
    let bin = Binary::spawn(dir.path(), &["--retention", "0"]);
    assert_eq!(export(&bin.url(""), r#"{__name__=~"close.*"}"#), expected);
    let (body, exp) = dataset(500, 10, t0, "close");
    assert_eq!(import(&bin.url(""), body), (204, String::new()));
    for (metric, samples) in exp {
        let all = expected.get_mut(&metric).unwrap();
        let mut merged: std::collections::BTreeMap<i64, u64> = all.iter().copied().collect();
        merged.extend(samples);
        *all = merged.into_iter().collect();
    }
    bin.kill9();
    let bin = Binary::spawn(dir.path(), &["--retention", "0"]);
    assert_eq!(export(&bin.url(""), r#"{__name__=~"close.*"}"#), expected);
    bin.terminate();
}

const DAY: i64 = 86_400_000;
const W0: i64 = 19_600 * DAY;

fn one(name: &str, samples: &[(i64, f64)]) -> WriteBatch {
    WriteBatch {
        series: vec![SeriesSamples {
            labels: Labels::from_pairs([("__name__", "closing"), ("s", name)]).unwrap(),
            samples: samples.iter().map(|&(t, v)| Sample::new(t, v)).collect(),
            histograms: Vec::new(),
        }],
    }
}

fn read(s: &Storage) -> Vec<(String, Vec<Sample>)> {
    let m = Matcher::new(MatchOp::RegexMatch, "__name__", ".+").unwrap();
    let mut out: Vec<(String, Vec<Sample>)> = s
        .select(&[m], 0, i64::MAX / 4, usize::MAX)
        .unwrap()
        .into_iter()
        .map(|x| (x.labels.to_string(), x.samples))
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

#[test]
fn keyspaces_created_after_a_clean_close_survive_restarts() {
    // A re-seal deletes the window's overlay, the newest keyspace; with the journal emptied
    // fjall hands its internal id to the next keyspace created after the restart. That
    // keyspace's registration must not be shadowed by the deletion record of the old one, or
    // the next open deletes it as unreferenced, with its samples.
    let dir = tempfile::tempdir().unwrap();
    {
        let s = Storage::open(storage_config(dir.path())).unwrap();
        s.write(one("a", &[(W0, 1.0), (W0 + 10, 2.0)])).unwrap();
        assert_eq!(s.seal_window(W0).unwrap().map(|o| o.swap), Some(SealSwap::Sealed));
        s.write(one("a", &[(W0 + 5, 3.0)])).unwrap();
        assert_eq!(s.seal_window(W0).unwrap().map(|o| (o.series, o.swap)), Some((1, SealSwap::Sealed)));
    }
    let late = [(W0 + 7, 4.0)];
    {
        let s = Storage::open(storage_config(dir.path())).unwrap();
        s.write(one("a", &late)).unwrap();
        s.flush_head().unwrap();
    }
    let expected = vec![(
        r#"closing{s="a"}"#.to_owned(),
        vec![Sample::new(W0, 1.0), Sample::new(W0 + 5, 3.0), Sample::new(W0 + 7, 4.0), Sample::new(W0 + 10, 2.0)],
    )];
    for _ in 0..2 {
        let s = Storage::open(storage_config(dir.path())).unwrap();
        assert_eq!(read(&s), expected);
    }
}
