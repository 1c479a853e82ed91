//! Hostile PromQL on every endpoint that parses it (issue 14): out-of-range durations, offsets
//! and `@` times, and subqueries over extreme ranges. Each must get a 400 naming the problem
//! within a second (the parser panicked on some of them: a 500 "task panicked" on queries and
//! a dropped connection on `match[]`; others evaluated until the two-minute timeout), and the
//! server must go on serving. Remote read's extreme time ranges are answered at once too.
//!
//! The real binary is used, so a panic that escapes containment or a process abort shows up
//! as a failed request or a dead server named by the case.

use std::time::{Duration, Instant};

use saltdb::remote::proto::{self, MatcherType, ResponseType};
use saltdb::remote::snappy_body;

use crate::common::*;

/// Queries refused with 400, each with a substring of its error message.
const HOSTILE: [(&str, &str); 17] = [
    // promql-parser panicked on these (`Duration::from_secs_f64`).
    ("up offset 1e20", "invalid duration \"1e20\""),
    ("up offset Inf", "invalid duration \"Inf\""),
    ("up offset -NaN", "invalid duration \"NaN\""),
    ("rate(up[1e30])", "invalid duration \"1e30\""),
    ("max_over_time(up[5m:1e300])", "invalid duration \"1e300\""),
    ("up offset 0x7fffffffffffffff", "duration out of range"),
    // Past Prometheus' bounds (durations: int64 nanoseconds; `@`: int64 milliseconds).
    ("up offset 293y", "duration out of range"),
    ("up offset 99999999999y", "duration out of range"),
    ("up offset -9223372036854775807ms", "duration out of range"),
    ("rate(up[300y])", "duration out of range"),
    ("up @ 1e300", "timestamp out of bounds for @ modifier"),
    ("up @ 9223372036854775807", "timestamp out of bounds for @ modifier"),
    ("up @ -9223372036854775807", "timestamp out of bounds for @ modifier"),
    // Subqueries that evaluated until the query timeout.
    ("max_over_time(vector(1)[1y:1ms])", "at most 11000"),
    ("max_over_time(rate(up[1y:1ms])[100y:1ms])", "at most 11000"),
    // Found by fuzzing: 10,080 x 10,080 inner steps at every evaluation.
    ("deriv(max_over_time((up @ end())[1w:])[1w:])", "nested subqueries would evaluate 101606400"),
    ("sum by (job) (up offset -9223372036854775807ms @ 9223372036854775807)", "out of"),
];

/// Queries at the bounds that must be answered at once with what Prometheus 2.42 answers.
const EXTREME_BUT_VALID: [(&str, &str); 4] = [
    ("max_over_time(vector(1)[5m:1s] @ 9e15)", r#"[{"metric":{},"value":[1700000000,"1"]}]"#),
    ("max_over_time(vector(1)[5m:1s] offset 292y)", r#"[{"metric":{},"value":[1700000000,"1"]}]"#),
    ("up @ 9223372036854770 offset -292y", "[]"),
    ("max_over_time(up[5m:1m] @ -9223372036854770 offset 292y)", "[]"),
];

/// Sends a request and checks it is answered with `status` within a second, returning the body.
fn answered_fast(name: &str, req: reqwest::blocking::RequestBuilder, status: u16) -> String {
    let started = Instant::now();
    let resp = req.send().unwrap_or_else(|e| panic!("{name}: no answer ({e})"));
    let got = resp.status().as_u16();
    let body = resp.text().unwrap_or_else(|e| panic!("{name}: body cut ({e})"));
    let took = started.elapsed();
    assert_eq!(got, status, "{name}: {body}");
    assert!(took < Duration::from_secs(1), "{name} took {took:?}");
    body
}

fn still_serving(base: &str, after: &str) {
    let c = client();
    let health = c.get(format!("{base}/-/healthy")).send().map(|r| r.status().as_u16());
    assert!(matches!(health, Ok(200)), "{after}: server no longer healthy ({health:?})");
    let q = c.get(format!("{base}/api/v1/query")).query(&[("query", "up"), ("time", "1700000000")]).send();
    let body = q.and_then(|r| r.text()).unwrap_or_default();
    assert!(body.contains(r#""instance":"a""#), "{after}: a normal query no longer answers: {body}");
}

#[test]
fn hostile_queries_get_400_at_once_on_every_endpoint() {
    let dir = tempfile::tempdir().unwrap();
    let server = Binary::spawn(dir.path(), &["--enable-admin-api", "--retention", "0"]);
    let base = format!("http://{}", server.addr);
    let body = (0..10)
        .map(|i| {
            format!(
                r#"{{"metric":{{"__name__":"up","instance":"a"}},"values":[1],"timestamps":[{}]}}"#,
                1_699_999_730_000i64 + i * 30_000
            )
        })
        .collect::<Vec<_>>()
        .join("\n");
    let (status, text) = import(&base, body);
    assert_eq!(status, 204, "{text}");
    still_serving(&base, "start");

    let c = client();
    for (query, needle) in HOSTILE {
        let time = ("time", "1700000000");
        let range = [("query", query), ("start", "1699999000"), ("end", "1700000000"), ("step", "60")];
        let selector_endpoints = ["/api/v1/series", "/api/v1/labels", "/api/v1/label/job/values", "/api/v1/export"];
        let mut requests = vec![
            ("GET query", c.get(format!("{base}/api/v1/query")).query(&[("query", query), time])),
            ("POST query", c.post(format!("{base}/api/v1/query")).form(&[("query", query), time])),
            ("query_range", c.post(format!("{base}/api/v1/query_range")).form(&range)),
        ];
        // A selector with a modifier is still a selector: the endpoints taking match[] parse it.
        if !query.contains('(') {
            for path in selector_endpoints {
                requests.push((path, c.get(format!("{base}{path}")).query(&[("match[]", query)])));
            }
            let delete = c.post(format!("{base}/api/v1/admin/tsdb/delete_series")).query(&[("match[]", query)]);
            requests.push(("delete_series", delete));
        }
        for (endpoint, req) in requests {
            let name = format!("{endpoint} {query:?}");
            let body: serde_json::Value = answered_fast(&name, req, 400).parse().expect("JSON error body");
            let error = body["error"].as_str().unwrap_or_default();
            assert!(error.contains(needle), "{name}: {error:?} does not say {needle:?}");
            assert_eq!(body["errorType"], "bad_data", "{name}: {body}");
        }
        still_serving(&base, query);
    }

    for (query, result) in EXTREME_BUT_VALID {
        let req = c.get(format!("{base}/api/v1/query")).query(&[("query", query), ("time", "1700000000")]);
        let body = answered_fast(query, req, 200);
        assert!(body.contains(&format!(r#""result":{result}"#)), "{query}: {body}");
        let range = [("query", query), ("start", "1699999000"), ("end", "1700000000"), ("step", "1")];
        answered_fast(query, c.post(format!("{base}/api/v1/query_range")).form(&range), 200);
    }

    // Remote read over the whole i64 range and at its ends: answered at once, server unharmed.
    let matchers =
        vec![proto::LabelMatcher { r#type: MatcherType::Eq as i32, name: "__name__".into(), value: "up".into() }];
    for (start, end) in [(i64::MIN, i64::MAX), (i64::MAX - 1, i64::MAX), (i64::MIN, i64::MIN + 1)] {
        for accepted in [ResponseType::Samples, ResponseType::StreamedXorChunks] {
            let req = proto::ReadRequest {
                queries: vec![proto::Query {
                    start_timestamp_ms: start,
                    end_timestamp_ms: end,
                    matchers: matchers.clone(),
                    hints: None,
                }],
                accepted_response_types: vec![accepted as i32],
            };
            let post = c
                .post(format!("{base}/api/v1/read"))
                .header("Content-Type", "application/x-protobuf")
                .header("Content-Encoding", "snappy")
                .body(snappy_body(&req));
            answered_fast(&format!("remote read {start}..{end} {accepted:?}"), post, 200);
        }
        still_serving(&base, "remote read");
    }
    server.terminate();
}
