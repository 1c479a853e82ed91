//! Start timestamps (remote-write 2.0's `created_timestamp`) reach the queries that use them,
//! and survive `kill -9` right after the write is acknowledged.

use saltdb::remote::proto::{self, v2};
use saltdb::remote::snappy_body;

use crate::common::*;

const M: i64 = 60_000;

/// The value of an instant query's only series.
fn instant(base: &str, query: &str, t_ms: i64) -> f64 {
    let body: serde_json::Value = client()
        .get(format!("{base}/api/v1/query"))
        .query(&[("query", query.to_owned()), ("time", format!("{}", t_ms as f64 / 1e3))])
        .send()
        .expect("query request")
        .text()
        .expect("body")
        .parse()
        .expect("JSON body");
    assert_eq!(body["status"], "success", "{query}: {body}");
    let result = body["data"]["result"].as_array().expect("a vector");
    assert_eq!(result.len(), 1, "{query}: {body}");
    result[0]["value"][1].as_str().expect("a value").parse().expect("a number")
}

/// A counter written as two remote-write 2.0 series of one label set: 10, 20, 30 started at
/// `t0 - 30s`, then, restarted at `t0 + 2m30s`, 50 and 60. The restart leaves the value higher
/// than before it, so only the start timestamp tells it.
fn restarted_counter(t0: i64) -> Vec<u8> {
    let symbols: Vec<String> = ["", "__name__", "requests_total", "job", "api"].map(String::from).to_vec();
    let samples = |points: &[(i64, f64)]| -> Vec<proto::Sample> {
        points.iter().map(|&(t, v)| proto::Sample { value: v, timestamp: t }).collect()
    };
    let req = v2::Request {
        symbols,
        timeseries: vec![
            v2::TimeSeries {
                labels_refs: vec![1, 2, 3, 4],
                samples: samples(&[(t0, 10.0), (t0 + M, 20.0), (t0 + 2 * M, 30.0)]),
                created_timestamp: t0 - 30_000,
                ..Default::default()
            },
            v2::TimeSeries {
                labels_refs: vec![1, 2, 3, 4],
                samples: samples(&[(t0 + 3 * M, 50.0), (t0 + 4 * M, 60.0)]),
                created_timestamp: t0 + 2 * M + 30_000,
                ..Default::default()
            },
        ],
    };
    snappy_body(&req)
}

#[test]
fn increase_counts_a_restart_only_the_start_timestamp_shows_and_survives_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let t0 = recent_ms() / M * M;
    let bin = Binary::spawn(dir.path(), &["--retention", "0"]);
    let base = bin.url("");
    let (status, _, text) = post(&format!("{base}/api/v1/write"), &V2_HEADERS, restarted_counter(t0));
    assert_eq!((status, text.as_str()), (204, ""));
    // Window (t0 - 1m, t0 + 4m]: 60 - 10, plus 30 before the restart, plus the first sample's
    // 10 counted from its start (t0 - 30s) instead of extrapolating: 90 over exactly the
    // sampled time. Without start timestamps: 50, extrapolated to 60.
    let check = |base: &str| {
        assert_eq!(instant(base, "increase(requests_total[5m])", t0 + 4 * M), 90.0);
        assert_eq!(instant(base, "resets(requests_total[5m])", t0 + 4 * M), 1.0);
        // irate over the restart: the new counter's 50 over the minute.
        assert_eq!(instant(base, "irate(requests_total[5m])", t0 + 3 * M), 50.0 / 60.0);
        assert_eq!(instant(base, "start_timestamp(requests_total)", t0 + 4 * M), (t0 + 2 * M + 30_000) as f64 / 1e3);
        // A subquery cuts them off: the restart is invisible there.
        assert_eq!(instant(base, "resets(requests_total[5m:1m])", t0 + 4 * M), 0.0);
        // Aggregated, the same (the aggregation's fast path must not skip them).
        assert_eq!(instant(base, "sum(increase(requests_total[5m]))", t0 + 4 * M), 90.0);
    };
    check(&base);
    bin.kill9();
    let bin = Binary::spawn(dir.path(), &["--retention", "0"]);
    check(&bin.url(""));
    bin.terminate();
}
