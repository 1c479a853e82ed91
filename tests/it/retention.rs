//! Retention drops whole windows past the cutoff at start-up; newer windows stay.

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
