//! Long-range queries hold what they need, not what they read (issue 32): on the real binary,
//! a range query whose selectors read twenty times `--query-max-samples` raw samples is
//! answered, exactly, while the peak the engine reports (`stats=all`, `peakSamples`) stays near
//! its output; a query that would hold them all is refused by the held limit; and one that
//! would read more than `--query-max-scanned-samples` is refused by the scan limit, with its own
//! message. The server keeps serving throughout.

use crate::common::*;

const SERIES: usize = 200;
const SAMPLES: usize = 10_000;
const T0_MS: i64 = 1_700_000_000_000;
const SCRAPE_MS: i64 = 15_000;
const MAX_HELD: usize = 100_000;
const MAX_SCANNED: usize = 1_500_000;

/// Series `long{i, half}`, sample `k` at `T0 + k * 15 s` with value `k`; half `a` or `b`.
fn load(base: &str) {
    let stamps: Vec<String> = (0..SAMPLES as i64).map(|k| (T0_MS + k * SCRAPE_MS).to_string()).collect();
    let stamps = stamps.join(",");
    let values: Vec<String> = (0..SAMPLES).map(|k| k.to_string()).collect();
    let values = values.join(",");
    for batch in 0..SERIES / 20 {
        let body: String = (0..20)
            .map(|j| {
                let i = batch * 20 + j;
                let half = if i % 2 == 0 { "a" } else { "b" };
                format!(
                    r#"{{"metric":{{"__name__":"long","i":"{i}","half":"{half}"}},"values":[{values}],"timestamps":[{stamps}]}}"#
                ) + "\n"
            })
            .collect();
        let (status, text) = import(base, body);
        assert_eq!(status, 204, "{text}");
    }
}

fn query_range(base: &str, query: &str, step_s: i64, stats: bool) -> (u16, serde_json::Value) {
    let end_ms = T0_MS + (SAMPLES as i64 - 1) * SCRAPE_MS;
    let mut params = vec![
        ("query", query.to_string()),
        ("start", (T0_MS / 1000).to_string()),
        ("end", (end_ms / 1000).to_string()),
        ("step", step_s.to_string()),
    ];
    if stats {
        params.push(("stats", "all".to_string()));
    }
    let resp = client().post(format!("{base}/api/v1/query_range")).form(&params).send().expect("query");
    let status = resp.status().as_u16();
    (status, serde_json::from_str(&resp.text().expect("whole body")).expect("JSON"))
}

#[test]
fn a_long_range_selector_is_held_as_step_values_within_the_limits() {
    let dir = tempfile::tempdir().unwrap();
    let (held, scanned) = (MAX_HELD.to_string(), MAX_SCANNED.to_string());
    let flags =
        ["--retention", "0", "--query-max-samples", &held, "--query-max-scanned-samples", &scanned, "--ooo-grace", "0"];
    let server = Binary::spawn(dir.path(), &flags);
    let base = server.url("");
    load(&base);

    // Half the series: 1,000,000 raw samples read, ten times the held limit.
    let step_s = 1_500;
    let (status, body) = query_range(&base, r#"long{half="a"}"#, step_s, true);
    assert_eq!(status, 200, "{body}");
    let result = body["data"]["result"].as_array().expect("a matrix");
    assert_eq!(result.len(), SERIES / 2);
    let steps = ((SAMPLES as i64 - 1) * SCRAPE_MS / 1000 / step_s + 1) as usize;
    let mut points = 0;
    for s in result {
        let values = s["values"].as_array().expect("values");
        points += values.len();
        assert_eq!(values.len(), steps, "{}", s["metric"]);
        for (n, v) in values.iter().enumerate() {
            // The newest sample at or before the step: k = step offset / 15 s.
            let expected = (n as i64 * step_s * 1000 / SCRAPE_MS).to_string();
            assert_eq!(v[1].as_str(), Some(expected.as_str()), "{} step {n}", s["metric"]);
        }
    }
    let samples = &body["data"]["stats"]["samples"];
    let peak = samples["peakSamples"].as_u64().expect("peakSamples");
    println!("long range: {points} points returned from 1,000,000 samples read, peak {peak} samples held");
    assert!(peak >= points as u64, "the output itself is held: {samples}");
    assert!(peak <= 3 * points as u64, "held {peak} samples for {points} points of output");
    // Prometheus' count: one sample per series found at each step.
    assert_eq!(samples["totalQueryableSamples"].as_u64(), Some(points as u64), "{samples}");

    // An expression that needs every sample (`timestamp` reads the samples' own times) holds
    // what it reads: refused by the held limit, not the scan limit.
    let (status, body) = query_range(&base, r#"timestamp(long{half="a"})"#, step_s, false);
    assert_eq!(status, 422, "{body}");
    let error = body["error"].as_str().unwrap_or_default();
    assert!(error.contains("too many samples"), "{error}");

    // Every series: 2,000,000 samples read, past the scan limit.
    let (status, body) = query_range(&base, "long", step_s, false);
    assert_eq!(status, 422, "{body}");
    let error = body["error"].as_str().unwrap_or_default();
    assert!(error.contains("--query-max-scanned-samples"), "{error}");
    assert_eq!(body["errorType"], "execution");

    // Still serving, and the aggregations over the half are unchanged by the limits.
    let (status, body) = query_range(&base, r#"count(long{half="b"})"#, step_s, false);
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["data"]["result"][0]["values"][0][1], (SERIES / 2).to_string());
    server.terminate();
}
