//! Data directories written by format 1 (all-time postings), format 2 (per-window postings,
//! one row per series and label) and format 5 (`series_by_labels` rows repeating the label set)
//! open in today's format: the one-time upgrade at start-up builds what the format needs, every
//! sample reads back, and the upgrade survives a second open. See `tests/fixtures/README.md` for
//! what the fixtures hold.

use std::path::Path;

use saltdb::matcher::{MatchOp, Matcher};
use saltdb::storage::Storage;

use crate::common::storage_config;

const D0: i64 = 1_704_067_200_000;
const DAY: i64 = 86_400_000;

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

fn m(op: MatchOp, name: &str, value: &str) -> Matcher {
    Matcher::new(op, name, value).unwrap()
}

fn check(s: &Storage, jobs: &[&str]) {
    let all = (0, D0 + 10 * DAY);
    assert_eq!(s.series(&[m(MatchOp::Equal, "job", "late")], all.0, all.1).unwrap().len(), 1);
    let host3 = s
        .select(
            &[m(MatchOp::Equal, "__name__", "up"), m(MatchOp::Equal, "instance", "host-03:9100")],
            all.0,
            all.1,
            usize::MAX,
        )
        .unwrap();
    assert_eq!(host3.len(), 1);
    assert_eq!(host3[0].samples.len(), 43, "20 + 20 sealed, one late, two in the log");
    let day0 =
        s.select(&[m(MatchOp::RegexMatch, "__name__", "up|cpu_seconds_total")], D0, D0 + DAY - 1, usize::MAX).unwrap();
    assert_eq!(day0.len(), 60);
    assert_eq!(day0.iter().map(|x| x.samples.len()).sum::<usize>(), 1200);
    assert_eq!(s.label_values("job", &[], all.0, all.1).unwrap(), jobs);
    let day2: Vec<String> = (0..10).map(|i| format!("host-{i:02}:9100")).collect();
    assert_eq!(s.label_values("instance", &[], D0 + 2 * DAY, D0 + 3 * DAY - 1).unwrap(), day2);
    assert_eq!(s.label_names(&[], all.0, all.1).unwrap(), ["__name__", "instance", "job", "zone"]);
    let z1 = s
        .series(&[m(MatchOp::Equal, "zone", "z1"), m(MatchOp::RegexMatch, "instance", "host-0.*")], all.0, all.1)
        .unwrap();
    assert_eq!(z1.len(), 10, "hosts 01, 03, 05, 07, 09 x two metrics");
}

#[test]
fn a_format_1_directory_is_upgraded_at_open() {
    upgraded_at_open("format-1");
}

#[test]
fn a_format_2_directory_is_upgraded_at_open() {
    upgraded_at_open("format-2");
}

#[test]
fn a_format_5_directory_is_upgraded_at_open() {
    upgraded_at_open("format-5");
}

/// A crash after the version bump of 5 -> 6 and before the rows were rewritten: the next open
/// finishes the rewrite (the manifest marks it pending), and reads meanwhile take both shapes.
#[test]
fn a_format_5_upgrade_interrupted_after_the_bump_is_finished_at_open() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/format-5");
    let dir = tempfile::tempdir().unwrap();
    copy_dir(&fixture, dir.path());
    {
        let db = fjall::Database::builder(dir.path()).open().unwrap();
        let meta = db.keyspace("meta", fjall::KeyspaceCreateOptions::default).unwrap();
        meta.insert("format_version", 6u32.to_be_bytes()).unwrap();
        meta.insert("series_by_labels_slim_pending", []).unwrap();
        db.persist(fjall::PersistMode::SyncAll).unwrap();
    }
    assert_eq!(series_by_labels_families(dir.path()), ["md5 -> id, label set (format 5)"]);
    {
        let s = Storage::open(storage_config(dir.path())).unwrap();
        check(&s, &["job0", "job1", "job2", "late"]);
    }
    assert_eq!(series_by_labels_families(dir.path()), ["md5 -> id"]);
}

/// The key families of `series_by_labels` in the stopped directory `dir`.
fn series_by_labels_families(dir: &Path) -> Vec<&'static str> {
    let usage = saltdb::storage::disk_usage(dir).unwrap();
    let sbl = usage.keyspaces.iter().find(|k| k.name == "series_by_labels").unwrap();
    sbl.families.iter().map(|f| f.family).collect()
}

fn upgraded_at_open(name: &str) {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name);
    let dir = tempfile::tempdir().unwrap();
    copy_dir(&fixture, dir.path());
    {
        let s = Storage::open(storage_config(dir.path())).unwrap();
        check(&s, &["job0", "job1", "job2", "late"]);
        // New writes land in the upgraded index like any other.
        let more = saltdb::sample::WriteBatch {
            series: vec![saltdb::sample::SeriesSamples {
                labels: saltdb::labels::Labels::from_pairs([("__name__", "up"), ("job", "new")]).unwrap(),
                samples: vec![saltdb::sample::Sample::new(D0 + DAY + 5, 1.0)],
                histograms: Vec::new(),
            }],
        };
        s.write(more).unwrap();
        assert_eq!(
            s.label_values("job", &[], D0 + DAY, D0 + 2 * DAY - 1).unwrap(),
            ["job0", "job1", "job2", "late", "new"]
        );
    }
    // Format 6: no `series_by_labels` row repeats its label set.
    assert_eq!(series_by_labels_families(dir.path()), ["md5 -> id"]);
    // Opened again (no second upgrade), and after sealing the window the late writes reached.
    let s = Storage::open(storage_config(dir.path())).unwrap();
    s.seal_window(D0 + DAY).unwrap();
    check(&s, &["job0", "job1", "job2", "late", "new"]);
    assert_eq!(s.series(&[m(MatchOp::Equal, "job", "new")], 0, D0 + 10 * DAY).unwrap().len(), 1);
    // Known label sets keep their ids: writing one again creates no series.
    let up = [m(MatchOp::Equal, "__name__", "up"), m(MatchOp::Equal, "instance", "host-03:9100")];
    let labels = s.series(&up, 0, D0 + 10 * DAY).unwrap().remove(0);
    let again = saltdb::sample::WriteBatch {
        series: vec![saltdb::sample::SeriesSamples {
            labels,
            samples: vec![saltdb::sample::Sample::new(D0 + 2 * DAY + 10, 1.0)],
            histograms: Vec::new(),
        }],
    };
    s.write(again).unwrap();
    let host3 = s.select(&up, 0, D0 + 10 * DAY, usize::MAX).unwrap();
    assert_eq!(host3.len(), 1);
    assert_eq!(host3[0].samples.len(), 44);
}
