//! Retention drops whole windows past the cutoff at start-up; newer windows stay.

use crate::common::*;

const DAY: i64 = 86_400_000;

#[test]
fn old_windows_are_dropped_at_startup() {
    let dir = tempfile::tempdir().unwrap();
    let now = chrono::Utc::now().timestamp_millis();
    let old = now - 40 * DAY;
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
