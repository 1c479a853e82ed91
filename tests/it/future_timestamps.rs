//! Samples too far ahead of the server's clock (`--max-future`, default 2d) are refused with the
//! 400 other bad samples get, on every ingest path, and nothing of the refused request is written.

use saltdb::remote::proto::{self, v2};
use saltdb::remote::snappy_body;

use crate::common::*;

const DAY: i64 = 86_400_000;

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

fn v1_body(name: &str, samples: &[(i64, f64)]) -> Vec<u8> {
    snappy_body(&proto::WriteRequest { timeseries: vec![series(&[("__name__", name)], samples)], metadata: vec![] })
}

fn v2_body(name: &str, samples: &[(i64, f64)]) -> Vec<u8> {
    let series = v2::TimeSeries {
        labels_refs: vec![1, 2],
        samples: samples.iter().map(|&(t, v)| proto::Sample { value: v, timestamp: t }).collect(),
        ..Default::default()
    };
    snappy_body(&v2::Request { symbols: vec![String::new(), "__name__".into(), name.into()], timeseries: vec![series] })
}

fn import_body(name: &str, samples: &[(i64, f64)]) -> String {
    let (ts, vs): (Vec<i64>, Vec<f64>) = samples.iter().copied().unzip();
    serde_json::json!({"metric": {"__name__": name}, "values": vs, "timestamps": ts}).to_string()
}

/// Sends one series through remote-write 1.0, 2.0 and import (a distinct metric name per path);
/// returns each path's status and body.
fn send_everywhere(base: &str, name: &str, samples: &[(i64, f64)]) -> Vec<(&'static str, u16, String)> {
    let write = format!("{base}/api/v1/write");
    let (s1, _, b1) = post(&write, &V1_HEADERS, v1_body(&format!("{name}_v1"), samples));
    let (s2, _, b2) = post(&write, &V2_HEADERS, v2_body(&format!("{name}_v2"), samples));
    let (s3, b3) = import(base, import_body(&format!("{name}_import"), samples));
    vec![("remote-write 1.0", s1, b1), ("remote-write 2.0", s2, b2), ("import", s3, b3)]
}

#[test]
fn far_future_samples_are_refused_on_every_ingest_path() {
    let dir = tempfile::tempdir().unwrap();
    let bin = Binary::spawn(dir.path(), &["--retention", "0"]);
    let base = bin.url("");
    let now = now_ms();

    // Within the default two days: accepted everywhere.
    for (path, status, body) in send_everywhere(&base, "soon", &[(now, 1.0), (now + DAY, 2.0)]) {
        assert_eq!(status, 204, "{path}: a sample one day ahead is accepted: {body}");
    }
    for path in ["v1", "v2", "import"] {
        assert_eq!(export(&base, &format!("soon_{path}")).values().next().map(Vec::len), Some(2), "{path}");
    }

    // Three days ahead, and the year 2200, beside a valid sample: the whole request is refused.
    for (label, far) in [("3 days ahead", now + 3 * DAY), ("year 2200", 7_258_118_400_000)] {
        for (path, status, body) in send_everywhere(&base, "far", &[(now, 1.0), (far, 2.0)]) {
            assert_eq!(status, 400, "{path}, {label}: {body}");
            let err: serde_json::Value = serde_json::from_str(&body).expect("JSON error body");
            assert_eq!(err["errorType"], "bad_data", "{path}, {label}: {body}");
            let msg = err["error"].as_str().unwrap();
            assert!(msg.contains("too far in the future") && msg.contains(&far.to_string()), "{path}, {label}: {msg}");
        }
    }
    for path in ["v1", "v2", "import"] {
        assert!(export(&base, &format!("far_{path}")).is_empty(), "{path}: nothing of a refused request is stored");
    }
    // No window was created for the refused samples: every window starts before the bound.
    let windows = get_json(&bin.url("/api/v1/status/windows"));
    let starts: Vec<i64> = windows["data"].as_array().unwrap().iter().map(|w| w["start"].as_i64().unwrap()).collect();
    assert!(!starts.is_empty() && starts.iter().all(|&s| s <= now + 2 * DAY), "windows start at {starts:?}");
    bin.terminate();
}

#[test]
fn max_future_flag_narrows_or_lifts_the_bound() {
    let dir = tempfile::tempdir().unwrap();
    let now = now_ms();

    let bin = Binary::spawn(dir.path(), &["--retention", "0", "--max-future", "10m"]);
    for (path, status, body) in send_everywhere(&bin.url(""), "hour", &[(now + 3_600_000, 1.0)]) {
        assert_eq!(status, 400, "{path}: an hour ahead is past --max-future 10m: {body}");
    }
    for (path, status, body) in send_everywhere(&bin.url(""), "minute", &[(now + 60_000, 1.0)]) {
        assert_eq!(status, 204, "{path}: a minute ahead is within --max-future 10m: {body}");
    }
    bin.terminate();

    let bin = Binary::spawn(dir.path(), &["--retention", "0", "--max-future", "0"]);
    for (path, status, body) in send_everywhere(&bin.url(""), "y2200", &[(7_258_118_400_000, 1.0)]) {
        assert_eq!(status, 204, "{path}: --max-future 0 accepts any supported timestamp: {body}");
    }
    bin.terminate();
}
