//! Prometheus remote-write in, remote read and export out, over real HTTP with real
//! snappy + protobuf bodies built from the same prost types senders use; every bad input with its
//! status and reason; metrics counting what happened.

use std::collections::BTreeMap;
use std::sync::Arc;

use prost::Message;
use saltdb::http::remote_write;
use saltdb::http::{AppState, Limits};
use saltdb::remote::proto::{self, histogram::Count, histogram::ZeroCount, v2, MatcherType, MetricType, ResponseType};
use saltdb::remote::{read, snappy_body, xor};
use saltdb::sample::STALE_NAN_BITS;
use saltdb::server::ServerConfig;

use crate::common::*;

fn v1(ts: Vec<proto::TimeSeries>) -> Vec<u8> {
    snappy_body(&proto::WriteRequest { timeseries: ts, metadata: vec![] })
}

pub fn write_v1(base: &str, body: Vec<u8>) -> (u16, String) {
    let (s, _, t) = post(&format!("{base}/api/v1/write"), &V1_HEADERS, body);
    (s, t)
}

fn matcher(t: MatcherType, name: &str, value: &str) -> proto::LabelMatcher {
    proto::LabelMatcher { r#type: t as i32, name: name.into(), value: value.into() }
}

/// Remote read of one query; returns series as label map -> [(ts, bits)], decoded from either
/// response type.
pub fn remote_read(
    base: &str,
    matchers: Vec<proto::LabelMatcher>,
    start: i64,
    end: i64,
    accepted: &[ResponseType],
) -> Exported {
    let req = proto::ReadRequest {
        queries: vec![proto::Query { start_timestamp_ms: start, end_timestamp_ms: end, matchers, hints: None }],
        accepted_response_types: accepted.iter().map(|t| *t as i32).collect(),
    };
    let headers = [("Content-Type", "application/x-protobuf"), ("Content-Encoding", "snappy")];
    let resp = headers
        .iter()
        .fold(client().post(format!("{base}/api/v1/read")), |r, (k, v)| r.header(*k, *v))
        .body(snappy_body(&req))
        .send()
        .expect("remote read");
    assert_eq!(resp.status().as_u16(), 200, "remote read failed");
    let ct = resp.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
    let body = resp.bytes().unwrap().to_vec();
    decode_read_response(&ct, &body)
}

/// Decodes a remote-read response of either type into label map -> [(ts, value bits)].
pub fn decode_read_response(content_type: &str, body: &[u8]) -> Exported {
    let mut out = Exported::new();
    let key = |labels: &[proto::Label]| -> BTreeMap<String, String> {
        labels.iter().map(|l| (l.name.clone(), l.value.clone())).collect()
    };
    if content_type.starts_with("application/x-streamed-protobuf") {
        let mut rest = body;
        while !rest.is_empty() {
            let (frame, tail) = read::read_frame(rest).expect("valid frame");
            rest = tail;
            for cs in frame.chunked_series {
                let entry = out.entry(key(&cs.labels)).or_default();
                for c in cs.chunks {
                    assert_eq!(c.r#type, proto::ChunkEncoding::Xor as i32);
                    let samples = xor::decode(&c.data).expect("valid XOR chunk");
                    assert_eq!(samples.first().map(|s| s.timestamp_ms), Some(c.min_time_ms));
                    assert_eq!(samples.last().map(|s| s.timestamp_ms), Some(c.max_time_ms));
                    entry.extend(samples.iter().map(|s| (s.timestamp_ms, s.value.to_bits())));
                }
            }
        }
    } else {
        assert_eq!(content_type, "application/x-protobuf");
        let raw = snap::raw::Decoder::new().decompress_vec(body).expect("snappy response");
        let resp = proto::ReadResponse::decode(raw.as_slice()).expect("ReadResponse");
        for r in resp.results {
            for ts in r.timeseries {
                out.insert(key(&ts.labels), ts.samples.iter().map(|s| (s.timestamp, s.value.to_bits())).collect());
            }
        }
    }
    out
}

pub fn metrics(base: &str) -> String {
    client().get(format!("{base}/metrics")).send().unwrap().text().unwrap()
}

/// The value of one exposition line, `0` when absent.
pub fn metric_value(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|rest| rest.strip_prefix(' ')))
        .map_or(0.0, |v| v.trim().parse().unwrap())
}

#[test]
fn remote_write_round_trips_through_remote_read_and_export() {
    let dir = tempfile::tempdir().unwrap();
    let server = InProcess::start(storage_config(dir.path()));
    let base = server.url("");
    // Yesterday noon: the 75 minutes of samples below stay inside one day window whatever the
    // time of day the test runs (the active-series count reads the newest window).
    let t0 = {
        let now = recent_ms();
        now - now.rem_euclid(86_400_000) - 43_200_000
    };
    let stale = f64::from_bits(STALE_NAN_BITS);
    // 300 samples for one series so streamed chunks split at 120.
    let long: Vec<(i64, f64)> = (0..300).map(|i| (t0 + i * 15_000, i as f64 * 0.5)).collect();
    let mut batch = vec![
        series(&[("__name__", "up"), ("instance", "a:9100"), ("job", "node")], &[(t0, 1.0), (t0 + 15_000, stale)]),
        series(&[("__name__", "up"), ("instance", "b:9100"), ("job", "node")], &[(t0, f64::NAN), (t0 + 15_000, 0.0)]),
        series(&[("__name__", "temp_celsius"), ("room", "kitchen")], &long),
    ];
    for i in 0..50 {
        let host = format!("h{i}");
        batch.push(series(&[("__name__", "rw_many"), ("host", &host)], &[(t0, i as f64), (t0 + 1, -1e300)]));
    }
    let expected: Exported = batch
        .iter()
        .map(|ts| {
            let labels = ts.labels.iter().map(|l| (l.name.clone(), l.value.clone())).collect();
            (labels, ts.samples.iter().map(|s| (s.timestamp, s.value.to_bits())).collect())
        })
        .collect();
    let metadata = vec![proto::MetricMetadata {
        r#type: MetricType::Gauge as i32,
        metric_family_name: "temp_celsius".into(),
        help: "Room temperature.".into(),
        unit: "celsius".into(),
    }];
    let body = snappy_body(&proto::WriteRequest { timeseries: batch, metadata });
    let (status, headers, text) = post(&format!("{base}/api/v1/write"), &V1_HEADERS, body);
    assert_eq!((status, text.as_str()), (204, ""), "headers {headers:?}");

    // Export: everything, bit-exact (staleness marker and NaN included).
    assert_eq!(export(&base, r#"{__name__=~"up|temp_celsius|rw_many"}"#), expected);

    // Remote read, both response types, same answer.
    let all = vec![matcher(MatcherType::Re, "__name__", "up|temp_celsius|rw_.*")];
    for accepted in [&[][..], &[ResponseType::Samples], &[ResponseType::StreamedXorChunks]] {
        let got = remote_read(&base, all.clone(), t0 - 1, t0 + 10_000_000, accepted);
        assert_eq!(got, expected, "remote read with accepted types {accepted:?}");
    }
    // Matchers and time range are honoured.
    let got = remote_read(
        &base,
        vec![matcher(MatcherType::Eq, "__name__", "up"), matcher(MatcherType::Neq, "instance", "a:9100")],
        t0 + 1,
        t0 + 15_000,
        &[ResponseType::StreamedXorChunks],
    );
    assert_eq!(got.len(), 1);
    let (labels, samples) = got.iter().next().unwrap();
    assert_eq!(labels.get("instance").map(String::as_str), Some("b:9100"));
    assert_eq!(samples, &vec![(t0 + 15_000, 0f64.to_bits())]);
    let got = remote_read(
        &base,
        vec![matcher(MatcherType::Nre, "host", "h[0-8]|h[1-4][0-9]"), matcher(MatcherType::Eq, "__name__", "rw_many")],
        t0,
        t0,
        &[],
    );
    assert_eq!(got.keys().map(|k| k["host"].as_str()).collect::<Vec<_>>(), ["h9"]);

    // Metadata served like Prometheus does.
    let md: serde_json::Value = get_json(&format!("{base}/api/v1/metadata?metric=temp_celsius"));
    assert_eq!(
        md,
        serde_json::json!({"status": "success", "data": {"temp_celsius": [{"type": "gauge", "help": "Room temperature.", "unit": "celsius"}]}})
    );

    // Self-metrics saw it.
    let text = metrics(&base);
    let total = 2 + 2 + 300 + 100;
    assert_eq!(metric_value(&text, r#"saltdb_samples_ingested_total{protocol="remote_write_v1"}"#), total as f64);
    let per_bucket: f64 = text
        .lines()
        .filter(|l| l.starts_with("saltdb_samples_written_total{bucket="))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
        .sum();
    assert_eq!(per_bucket, total as f64, "samples written per bucket add up");
    assert_eq!(metric_value(&text, "saltdb_series"), 53.0);
    assert_eq!(metric_value(&text, "saltdb_active_series"), 53.0);
    assert_eq!(metric_value(&text, r#"saltdb_http_requests_total{code="204",route="/api/v1/write"}"#), 1.0);
    assert!(metric_value(&text, r#"saltdb_http_requests_total{code="200",route="/api/v1/read"}"#) >= 5.0);
    assert!(metric_value(&text, "saltdb_windows") >= 1.0);
    assert!(metric_value(&text, "process_resident_memory_bytes") > 0.0, "{text}");
    assert!(text.contains("saltdb_fjall_journal_bytes"));
    assert_eq!(metric_value(&text, r#"saltdb_storage_write_duration_seconds_count{protocol="remote_write_v1"}"#), 1.0);
    assert!(text.contains(r#"saltdb_table_disk_bytes{table="series_by_labels"}"#));
    server.stop();
}

#[test]
fn remote_write_2_0_with_symbols() {
    let dir = tempfile::tempdir().unwrap();
    let server = InProcess::start(storage_config(dir.path()));
    let base = server.url("");
    let t0 = recent_ms();
    let symbols: Vec<String> =
        ["", "__name__", "http_requests_total", "code", "200", "Requests served.", "500"].map(String::from).to_vec();
    let req = v2::Request {
        symbols,
        timeseries: vec![
            v2::TimeSeries {
                labels_refs: vec![1, 2, 3, 4],
                samples: vec![
                    proto::Sample { value: 10.0, timestamp: t0 },
                    proto::Sample { value: 12.0, timestamp: t0 + 15_000 },
                ],
                metadata: Some(v2::Metadata { r#type: MetricType::Counter as i32, help_ref: 5, unit_ref: 0 }),
                ..Default::default()
            },
            v2::TimeSeries {
                labels_refs: vec![1, 2, 3, 6],
                samples: vec![proto::Sample { value: 1.0, timestamp: t0 }],
                histograms: vec![v2::Histogram {
                    count: Some(Count::CountInt(1)),
                    zero_count: Some(ZeroCount::ZeroCountInt(1)),
                    timestamp: t0 + 1,
                    ..Default::default()
                }],
                ..Default::default()
            },
        ],
    };
    let (status, h, text) = post(&format!("{base}/api/v1/write"), &V2_HEADERS, snappy_body(&req));
    assert_eq!((status, text.as_str()), (204, ""));
    assert_eq!(h["x-prometheus-remote-write-samples-written"], "3");
    assert_eq!(h["x-prometheus-remote-write-histograms-written"], "1");
    let got = export(&base, "http_requests_total");
    assert_eq!(got.len(), 2);
    let md: serde_json::Value = get_json(&format!("{base}/api/v1/metadata"));
    assert_eq!(md["data"]["http_requests_total"][0]["type"], "counter");
    assert_eq!(md["data"]["http_requests_total"][0]["help"], "Requests served.");
    let text = metrics(&base);
    // Float and histogram samples alike.
    assert_eq!(metric_value(&text, r#"saltdb_samples_ingested_total{protocol="remote_write_v2"}"#), 4.0);
    server.stop();
}

#[test]
fn every_bad_remote_write_gets_its_status_and_reason_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = runtime();
    let limits = Limits { max_request_bytes: 1 << 20, ..Limits::default() };
    let config =
        ServerConfig { limits, ..ServerConfig::new("127.0.0.1:0".parse().unwrap(), storage_config(dir.path())) };
    let server = InProcess::start_with(runtime, config);
    let base = server.url("");
    let url = format!("{base}/api/v1/write");
    let t0 = recent_ms();
    let good = || series(&[("__name__", "partial")], &[(t0, 1.0)]);

    let mut bad_utf8 = proto::WriteRequest {
        timeseries: vec![series(&[("__name__", "up"), ("a", "zz")], &[(t0, 1.0)])],
        metadata: vec![],
    }
    .encode_to_vec();
    let pos = bad_utf8.windows(2).position(|w| w == b"zz").unwrap();
    bad_utf8[pos] = 0xc3;
    let mut hist = series(&[("__name__", "rpc_seconds")], &[]);
    // Count 3 but no observation in any bucket: invalid.
    hist.histograms = vec![proto::Histogram {
        count: Some(Count::CountInt(3)),
        sum: 0.5,
        schema: 1,
        timestamp: t0,
        ..Default::default()
    }];
    let huge = vec![series(&[("__name__", "big"), ("v", &"x".repeat(10_000))], &[(t0, 1.0)]); 200];

    type Case = (&'static str, Vec<(&'static str, &'static str)>, Vec<u8>, u16, &'static str, &'static str);
    let cases: Vec<Case> = vec![
        ("not snappy", V1_HEADERS.to_vec(), b"definitely not snappy".to_vec(), 400, "snappy", "invalid_snappy"),
        ("not protobuf", V1_HEADERS.to_vec(), read::compress(b"\x0a\xff\xff\xff"), 400, "protobuf", "invalid_protobuf"),
        (
            "unsorted labels",
            V1_HEADERS.to_vec(),
            v1(vec![good(), series(&[("job", "a"), ("__name__", "up")], &[(t0, 1.0)])]),
            400,
            "not sorted",
            "unsorted_labels",
        ),
        (
            "duplicate label",
            V1_HEADERS.to_vec(),
            v1(vec![good(), series(&[("__name__", "up"), ("a", "1"), ("a", "2")], &[(t0, 1.0)])]),
            400,
            "duplicate label name",
            "duplicate_label",
        ),
        (
            "empty label name",
            V1_HEADERS.to_vec(),
            v1(vec![good(), series(&[("", "x"), ("__name__", "up")], &[(t0, 1.0)])]),
            400,
            "empty label name",
            "empty_label_name",
        ),
        (
            "missing __name__",
            V1_HEADERS.to_vec(),
            v1(vec![good(), series(&[("job", "a")], &[(t0, 1.0)])]),
            400,
            "missing metric name",
            "missing_metric_name",
        ),
        (
            "invalid label name",
            V1_HEADERS.to_vec(),
            v1(vec![good(), series(&[("__name__", "up"), ("a\0b", "1")], &[(t0, 1.0)])]),
            400,
            "invalid label name",
            "invalid_label",
        ),
        ("invalid UTF-8", V1_HEADERS.to_vec(), read::compress(&bad_utf8), 400, "UTF-8", "invalid_protobuf"),
        (
            "timestamp before 1970",
            V1_HEADERS.to_vec(),
            v1(vec![good(), series(&[("__name__", "up")], &[(-5, 1.0)])]),
            400,
            "outside the supported range",
            "timestamp_out_of_range",
        ),
        (
            "invalid native histogram",
            V1_HEADERS.to_vec(),
            v1(vec![good(), hist]),
            400,
            "0 observations found in buckets, but the count field is 3",
            "invalid_histogram",
        ),
        ("decompresses past the limit", V1_HEADERS.to_vec(), v1(huge), 413, "larger than the limit", "too_large"),
        (
            "JSON content type",
            vec![("Content-Type", "application/json"), ("Content-Encoding", "snappy")],
            v1(vec![good()]),
            415,
            "Content-Type",
            "unsupported_media_type",
        ),
        (
            "unknown proto",
            vec![
                ("Content-Type", "application/x-protobuf;proto=io.prometheus.write.v9.Request"),
                ("Content-Encoding", "snappy"),
            ],
            v1(vec![good()]),
            415,
            "v9",
            "unsupported_media_type",
        ),
        (
            "gzip encoding",
            vec![("Content-Type", "application/x-protobuf"), ("Content-Encoding", "gzip")],
            v1(vec![good()]),
            415,
            "Content-Encoding",
            "unsupported_media_type",
        ),
        (
            "no encoding",
            vec![("Content-Type", "application/x-protobuf")],
            v1(vec![good()]),
            415,
            "Content-Encoding",
            "unsupported_media_type",
        ),
        ("body over the limit", V1_HEADERS.to_vec(), vec![0u8; 2 << 20], 413, "larger than the limit", "too_large"),
    ];
    for (what, headers, body, status, needle, reason) in cases {
        let (got, _, text) = post(&url, &headers, body);
        assert_eq!(got, status, "{what}: {text}");
        assert!(text.contains(needle), "{what}: body must mention {needle:?}: {text}");
        let protocol = "remote_write_v1";
        let m = metrics(&base);
        let line = format!(r#"saltdb_write_requests_rejected_total{{protocol="{protocol}",reason="{reason}"}}"#);
        assert!(metric_value(&m, &line) >= 1.0, "{what}: {line} not counted");
    }
    // Nothing of any rejected request was written, including the good series beside the bad ones.
    assert!(export(&base, r#"{__name__=~".+"}"#).is_empty());
    let m = metrics(&base);
    assert_eq!(
        metric_value(&m, r#"saltdb_samples_rejected_total{protocol="remote_write_v1",reason="unsorted_labels"}"#),
        2.0
    );
    assert_eq!(
        metric_value(&m, r#"saltdb_samples_rejected_total{protocol="remote_write_v1",reason="invalid_histogram"}"#),
        2.0,
        "the good float sample and the bad histogram"
    );
    assert_eq!(metric_value(&m, r#"saltdb_http_requests_total{code="415",route="/api/v1/write"}"#), 4.0);

    // Valid native histograms beside float samples: both are stored and counted as ingested.
    let mut mixed = series(&[("__name__", "rpc_seconds")], &[]);
    let valid = |t| proto::Histogram {
        count: Some(Count::CountInt(3)),
        zero_count: Some(ZeroCount::ZeroCountInt(3)),
        timestamp: t,
        ..Default::default()
    };
    mixed.histograms = vec![valid(t0), valid(t0 + 1)];
    assert_eq!(write_v1(&base, v1(vec![mixed, good()])), (204, String::new()));
    assert_eq!(export(&base, "partial").len(), 1);
    let m = metrics(&base);
    assert_eq!(metric_value(&m, r#"saltdb_samples_ingested_total{protocol="remote_write_v1"}"#), 3.0);

    // Bad remote-read requests.
    let read_url = format!("{base}/api/v1/read");
    let rr = |q: Vec<proto::LabelMatcher>, accepted: Vec<i32>| {
        snappy_body(&proto::ReadRequest {
            queries: vec![proto::Query { start_timestamp_ms: 0, end_timestamp_ms: t0, matchers: q, hints: None }],
            accepted_response_types: accepted,
        })
    };
    let read_headers = [("Content-Type", "application/x-protobuf"), ("Content-Encoding", "snappy")];
    for (what, headers, body, status, needle) in [
        (
            "bad regex",
            &read_headers[..],
            rr(vec![matcher(MatcherType::Re, "__name__", "(")], vec![]),
            400,
            "regular expression",
        ),
        (
            "empty matchers",
            &read_headers[..],
            rr(vec![matcher(MatcherType::Re, "a", ".*")], vec![]),
            400,
            "must not match the empty string",
        ),
        (
            "unknown response type",
            &read_headers[..],
            rr(vec![matcher(MatcherType::Eq, "__name__", "up")], vec![5]),
            400,
            "response types",
        ),
        ("announces a huge body", &read_headers[..], vec![0xff, 0xff, 0xff, 0xff, 0x0f], 413, "larger than the limit"),
        ("not snappy", &read_headers[..], b"garbage".to_vec(), 400, "snappy"),
        (
            "no encoding",
            &read_headers[..1],
            rr(vec![matcher(MatcherType::Eq, "__name__", "up")], vec![]),
            415,
            "snappy",
        ),
    ] {
        let (got, _, text) = post(&read_url, headers, body);
        assert_eq!(got, status, "{what}: {text}");
        assert!(text.contains(needle), "{what}: {text}");
    }
    server.stop();
}

#[test]
fn overload_answers_429_with_retry_after() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = runtime();
    let storage = saltdb::storage::Storage::open(storage_config(dir.path())).unwrap();
    let limits = Limits { max_concurrent_writes: 1, ..Limits::default() };
    let state = Arc::new(AppState::new(storage, limits, Default::default()));
    let _busy = state.admission.admit().unwrap();
    let mut headers = axum::http::HeaderMap::new();
    headers.insert("content-type", "application/x-protobuf".parse().unwrap());
    headers.insert("content-encoding", "snappy".parse().unwrap());
    let body = axum::body::Body::from(v1(vec![series(&[("__name__", "up")], &[(recent_ms(), 1.0)])]));
    let resp = runtime.block_on(remote_write::write(
        axum::extract::State(state.clone()),
        axum::Extension(saltdb::tenant::Scope::Unscoped),
        headers,
        body,
    ));
    assert_eq!(resp.status().as_u16(), 429);
    assert_eq!(resp.headers()["retry-after"], "1");
    let text = state.metrics.render();
    let line = r#"saltdb_write_requests_rejected_total{protocol="remote_write_v1",reason="overloaded"}"#;
    assert_eq!(metric_value(&text, line), 1.0, "{text}");
}
