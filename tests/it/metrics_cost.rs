//! A `/metrics` scrape reads no index whose size grows with the series count: the active-series
//! gauge is kept by the writer or measured off the scrape path, so consecutive scrapes leave
//! `saltdb_storage_index_rows_scanned_total` unchanged, after a restart (the writer has not
//! written yet) and with a sealed newest window alike, while the gauge stays right.

use std::time::{Duration, Instant};

use crate::common::*;
use crate::remote_write::metric_value;

const SERIES: usize = 5_000;

fn scrape(base: &str) -> (f64, f64) {
    let text = client().get(format!("{base}/metrics")).send().unwrap().text().unwrap();
    (metric_value(&text, "saltdb_storage_index_rows_scanned_total"), metric_value(&text, "saltdb_active_series"))
}

/// `SERIES` series with two samples each at `t0`, imported.
fn load(base: &str, t0: i64) {
    let (body, _) = dataset(SERIES, 2, t0, "cost");
    assert_eq!(import(base, body).0, 204);
}

/// Three scrapes in a row: none of them walks an index, and each reports `SERIES` active series.
fn assert_scrapes_are_free(base: &str, phase: &str) {
    let (first, active) = scrape(base);
    assert_eq!(active, SERIES as f64, "{phase}: active series");
    for i in 0..3 {
        let (rows, active) = scrape(base);
        assert_eq!(rows, first, "{phase}: scrape {i} walked {} index rows", rows - first);
        assert_eq!(active, SERIES as f64, "{phase}: active series at scrape {i}");
    }
}

#[test]
fn a_scrape_walks_no_index_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let bin = Binary::spawn(dir.path(), &["--retention", "0"]);
    load(&bin.url(""), recent_ms());
    bin.terminate();
    // After a restart the writer knows no count until it writes: it is measured once at start-up.
    let bin = Binary::spawn(dir.path(), &["--retention", "0"]);
    assert_scrapes_are_free(&bin.url(""), "after a restart");
    bin.terminate();
}

#[test]
fn a_scrape_walks_no_index_when_the_newest_window_is_sealed() {
    let dir = tempfile::tempdir().unwrap();
    let flags = ["--retention", "0", "--window", "1h", "--ooo-grace", "0", "--maintenance-interval", "1s"];
    let bin = Binary::spawn(dir.path(), &flags);
    let base = bin.url("");
    // Three hours ago: a closed window, sealed by the next maintenance pass.
    load(&base, recent_ms() - 3 * 3_600_000);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let windows = get_json(&bin.url("/api/v1/status/windows"));
        if windows["data"].as_array().unwrap().iter().all(|w| w["state"] == "sealed") {
            break;
        }
        assert!(Instant::now() < deadline, "the window was not sealed: {windows}");
        std::thread::sleep(Duration::from_millis(200));
    }
    // Let the maintenance pass after the seal measure the sealed window.
    std::thread::sleep(Duration::from_millis(2_500));
    assert_scrapes_are_free(&base, "sealed newest window");
    bin.terminate();
}
