//! Hostile input across every endpoint: one table of malformed and abusive requests, each with
//! the status and the readable reason it must get. After every request the server still answers
//! `/-/healthy` and holds exactly the data of the valid writes; at checkpoints and at the end a
//! valid remote-write reads back bit-exact through export, remote read and the query API.
//!
//! The real binary is used, so a stack overflow or abort shows up as a dead server (named by
//! the case that killed it) instead of taking the test process down.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::{Duration, Instant};

use prost::Message;
use saltdb::remote::proto::{self, v2, MatcherType, ResponseType};
use saltdb::remote::{read, snappy_body};

use crate::common::*;
use crate::remote_write::remote_read;

/// The body limit the server runs with (`--max-request-bytes`).
const LIMIT: usize = 16 << 20;
/// The series limit the server runs with (`--max-series-per-request`).
const MAX_SERIES: usize = 1_000;
const V2_CT: &str = "application/x-protobuf;proto=io.prometheus.write.v2.Request";
const FORM: (&str, &str) = ("Content-Type", "application/x-www-form-urlencoded");

/// One hostile request and what it must get.
struct Case {
    name: &'static str,
    method: &'static str,
    path: String,
    headers: Vec<(&'static str, String)>,
    body: Vec<u8>,
    status: u16,
    /// A substring of the error message (of the body for a success).
    needle: &'static str,
}

fn get(name: &'static str, path: impl Into<String>, status: u16, needle: &'static str) -> Case {
    Case { name, method: "GET", path: path.into(), headers: vec![], body: vec![], status, needle }
}

fn send(
    name: &'static str,
    method: &'static str,
    path: impl Into<String>,
    headers: &[(&'static str, &str)],
    body: impl Into<Vec<u8>>,
    status: u16,
    needle: &'static str,
) -> Case {
    let headers = headers.iter().map(|(k, v)| (*k, (*v).to_owned())).collect();
    Case { name, method, path: path.into(), headers, body: body.into(), status, needle }
}

fn v1_headers() -> Vec<(&'static str, &'static str)> {
    V1_HEADERS.to_vec()
}

fn v2_headers() -> Vec<(&'static str, &'static str)> {
    vec![("Content-Type", V2_CT), ("Content-Encoding", "snappy"), ("X-Prometheus-Remote-Write-Version", "2.0.0")]
}

fn read_headers() -> Vec<(&'static str, &'static str)> {
    vec![("Content-Type", "application/x-protobuf"), ("Content-Encoding", "snappy")]
}

fn v1(ts: Vec<proto::TimeSeries>) -> Vec<u8> {
    snappy_body(&proto::WriteRequest { timeseries: ts, metadata: vec![] })
}

fn v2(symbols: &[&str], series: Vec<v2::TimeSeries>) -> Vec<u8> {
    snappy_body(&v2::Request { symbols: symbols.iter().map(|s| (*s).to_owned()).collect(), timeseries: series })
}

fn v2_series(labels_refs: Vec<u32>, samples: &[(i64, f64)]) -> v2::TimeSeries {
    v2::TimeSeries {
        labels_refs,
        samples: samples.iter().map(|&(t, v)| proto::Sample { value: v, timestamp: t }).collect(),
        ..Default::default()
    }
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(data).unwrap();
    gz.finish().unwrap()
}

/// `s` percent-encoded for a query string or form.
fn enc(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

/// Replaces the first `marker` in an encoded message by bytes that are not UTF-8 (same length).
fn break_utf8(mut encoded: Vec<u8>, marker: &[u8]) -> Vec<u8> {
    let pos = encoded.windows(marker.len()).position(|w| w == marker).expect("marker in the message");
    encoded[pos] = 0xc3;
    encoded[pos + 1] = 0x28;
    encoded
}

fn import_line(metric: &str, values: &str, timestamps: &str) -> String {
    format!(r#"{{"metric":{metric},"values":{values},"timestamps":{timestamps}}}"#)
}

fn range_url(start: &str, end: &str, step: &str) -> String {
    format!("/api/v1/query_range?query=up&start={start}&end={end}&step={step}")
}

fn cases(t0: i64) -> Vec<Case> {
    let marker = |extra: &[(&str, &str)], samples: &[(i64, f64)]| {
        let mut labels = vec![("__name__", "hostile_marker")];
        labels.extend_from_slice(extra);
        series(&labels, samples)
    };
    let ok_sample = [(t0, 1.0)];
    let good_v1 = v1(vec![marker(&[("a", "b")], &ok_sample)]);

    // Remote-write 1.0 bodies.
    let truncated = good_v1[..good_v1.len() / 2].to_vec();
    let mut huge_header = vec![0xff, 0xff, 0xff, 0xff, 0x0f];
    huge_header.extend_from_slice(&[0u8; 64]);
    let ten_mb = "v".repeat(10 << 20);
    let ten_mb_v1 = v1(vec![marker(&[("big", &ten_mb)], &ok_sample)]);
    let names: Vec<String> = (0..1_000_000).map(|i| format!("l{i:07}")).collect();
    let mut million = marker(&[], &ok_sample);
    million.labels.extend(names.iter().map(|n| proto::Label { name: n.clone(), value: "v".into() }));
    let million_v1 = v1(vec![million]);
    let bad_utf8_v1 = read::compress(&break_utf8(
        proto::WriteRequest { timeseries: vec![marker(&[("a", "zz")], &ok_sample)], metadata: vec![] }.encode_to_vec(),
        b"zz",
    ));
    let bad_name_utf8_v1 = read::compress(&break_utf8(
        proto::WriteRequest { timeseries: vec![marker(&[("zz", "b")], &ok_sample)], metadata: vec![] }.encode_to_vec(),
        b"zz",
    ));
    let too_many_series_v1 =
        v1((0..=MAX_SERIES).map(|i| marker(&[("i", &i.to_string())], &ok_sample)).collect::<Vec<_>>());

    // Remote-write 2.0 bodies. Symbols: 0 "", 1 __name__, 2 hostile_marker, 3 a, 4 b.
    let syms = ["", "__name__", "hostile_marker", "a", "b"];
    let mut million_refs = vec![1, 2];
    million_refs.extend(std::iter::repeat_n([3u32, 4], 1_000_000).flatten());
    // 100 labels per series all pointing at one 16 KiB symbol: a few hundred bytes of references
    // per series that would copy 1.6 MB each, 1.6 GB for the request.
    let big_symbol = "s".repeat(16 * 1024);
    let mut bomb_syms: Vec<String> = vec!["".into(), "__name__".into(), "hostile_marker".into(), big_symbol];
    bomb_syms.extend((0..100).map(|i| format!("a{i:03}")));
    let mut bomb_refs = vec![1, 2];
    bomb_refs.extend((0..100u32).flat_map(|i| [4 + i, 3]));
    let bomb_v2 = snappy_body(&v2::Request {
        symbols: bomb_syms,
        timeseries: (0..MAX_SERIES).map(|_| v2_series(bomb_refs.clone(), &ok_sample)).collect(),
    });
    let bad_utf8_v2 = read::compress(&break_utf8(
        v2::Request {
            symbols: ["", "__name__", "hostile_marker", "a", "zz"].map(String::from).to_vec(),
            timeseries: vec![v2_series(vec![1, 2, 3, 4], &ok_sample)],
        }
        .encode_to_vec(),
        b"zz",
    ));

    // Import bodies.
    let nested = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let nested_metric =
        format!(r#"{{"metric":{}1{},"values":[1],"timestamps":[1]}}"#, r#"{"a":"#.repeat(50_000), "}".repeat(50_000));
    let huge_line =
        import_line(r#"{"__name__":"hostile_marker"}"#, &format!("[{}1]", "1,".repeat((LIMIT + (2 << 20)) / 2)), "[1]");
    let garbage_line = "x".repeat(8 << 20);
    let ten_mb_json = import_line(&format!(r#"{{"__name__":"hostile_marker","big":"{ten_mb}"}}"#), "[1]", "[1]");
    let mut million_json = String::from(r#"{"__name__":"hostile_marker""#);
    for n in &names {
        million_json.push_str(&format!(r#","{n}":"v""#));
    }
    million_json.push('}');
    let million_json = import_line(&million_json, "[1]", &format!("[{t0}]"));
    let mut bad_utf8_json =
        import_line(r#"{"__name__":"hostile_marker","a":"zz"}"#, "[1]", &format!("[{t0}]")).into_bytes();
    bad_utf8_json = break_utf8(bad_utf8_json, b"zz");
    let mut bad_utf8_name_json =
        import_line(r#"{"__name__":"hostile_marker","zz":"b"}"#, "[1]", &format!("[{t0}]")).into_bytes();
    bad_utf8_name_json = break_utf8(bad_utf8_name_json, b"zz");
    let m = r#"{"__name__":"hostile_marker"}"#;
    let too_many_lines: String = (0..=MAX_SERIES)
        .map(|i| {
            import_line(&format!(r#"{{"__name__":"hostile_marker","i":"{i}"}}"#), "[1]", &format!("[{t0}]")) + "\n"
        })
        .collect();
    let zeros = vec![0u8; 64 << 20];
    let gzip_bomb = gzip(&zeros);
    drop(zeros);

    // Query API bodies.
    let parens = |n: usize, inner: &str| format!("{}{inner}{}", "(".repeat(n), ")".repeat(n));
    let form = |key: &str, value: &str| format!("{key}={}", enc(value)).into_bytes();
    let many_matches: String = (0..100_000).map(|i| format!("match[]=up{i}&")).collect();
    let huge_regex =
        format!("{{__name__=~\"{}\"}}", (0..200_000).map(|i| format!("w{i}")).collect::<Vec<_>>().join("|"));
    let rr = |matchers: Vec<proto::LabelMatcher>, start: i64, end: i64| {
        snappy_body(&proto::ReadRequest {
            queries: vec![proto::Query { start_timestamp_ms: start, end_timestamp_ms: end, matchers, hints: None }],
            accepted_response_types: vec![],
        })
    };
    let re = |value: &str| proto::LabelMatcher {
        r#type: MatcherType::Re as i32,
        name: "__name__".into(),
        value: value.into(),
    };

    let w = "/api/v1/write";
    let too_big = vec![b'x'; LIMIT + (1 << 20)];
    vec![
        // --- remote-write 1.0 ---
        send("v1 truncated snappy", "POST", w, &v1_headers(), truncated, 400, "snappy"),
        send("v1 snappy header declares 4 GiB", "POST", w, &v1_headers(), huge_header.clone(), 413, "larger than the limit"),
        send("v1 garbage protobuf", "POST", w, &v1_headers(), read::compress(b"\x0a\xff\xff\xff\xff\x0f garbage"), 400, "invalid protobuf"),
        send("v1 empty body", "POST", w, &v1_headers(), vec![], 400, "snappy"),
        send("v1 10 MB label value", "POST", w, &v1_headers(), ten_mb_v1, 400, "more than the limit of 16384"),
        send("v1 a million labels", "POST", w, &v1_headers(), million_v1, 400, "1000001 labels, more than the limit of 128"),
        send("v1 duplicate labels", "POST", w, &v1_headers(), v1(vec![marker(&[("a", "1"), ("a", "2")], &ok_sample)]), 400, "duplicate label name"),
        send("v1 invalid UTF-8 label value", "POST", w, &v1_headers(), bad_utf8_v1, 400, "UTF-8"),
        send("v1 invalid UTF-8 label name", "POST", w, &v1_headers(), bad_name_utf8_v1, 400, "UTF-8"),
        send("v1 timestamp i64::MAX", "POST", w, &v1_headers(), v1(vec![marker(&[], &[(i64::MAX, 1.0)])]), 400, "outside the supported range"),
        send("v1 timestamp just after 2262-04-11", "POST", w, &v1_headers(), v1(vec![marker(&[], &[(9_223_372_036_855, 1.0)])]), 400, "outside the supported range"),
        send("v1 negative timestamp", "POST", w, &v1_headers(), v1(vec![marker(&[], &[(-1, 1.0)])]), 400, "outside the supported range"),
        send("v1 more series than --max-series-per-request", "POST", w, &v1_headers(), too_many_series_v1, 400, "1001 series, more than the limit of 1000 set by --max-series-per-request"),
        send("v1 body over the limit", "POST", w, &v1_headers(), too_big.clone(), 413, "larger than the limit"),
        send("v1 JSON content type", "POST", w, &[("Content-Type", "application/json"), ("Content-Encoding", "snappy")], good_v1.clone(), 415, "Content-Type"),
        send("v1 gzip instead of snappy", "POST", w, &[("Content-Type", "application/x-protobuf"), ("Content-Encoding", "gzip")], gzip(&good_v1), 415, "Content-Encoding"),
        send("v1 framed snappy", "POST", w, &v1_headers(), b"\xff\x06\x00\x00sNaPpY".to_vec(), 400, "snappy"),
        // --- remote-write 2.0 ---
        send("v2 garbage protobuf", "POST", w, &v2_headers(), read::compress(b"\x12\xff\xff\xff\xff\x0f"), 400, "invalid protobuf io.prometheus.write.v2.Request"),
        send("v2 empty body", "POST", w, &v2_headers(), vec![], 400, "snappy"),
        send("v2 symbol reference out of range", "POST", w, &v2_headers(), v2(&syms, vec![v2_series(vec![1, 2, 3, 4_000_000_000], &ok_sample)]), 400, "out of range"),
        send("v2 a million labels", "POST", w, &v2_headers(), v2(&syms, vec![v2_series(million_refs, &ok_sample)]), 400, "1000001 labels, more than the limit of 128"),
        send("v2 symbols expand past the body limit", "POST", w, &v2_headers(), bomb_v2, 400, "expand to more than 16777216 bytes"),
        send("v2 duplicate labels", "POST", w, &v2_headers(), v2(&syms, vec![v2_series(vec![1, 2, 3, 4, 3, 4], &ok_sample)]), 400, "duplicate label name"),
        send("v2 invalid UTF-8 symbol", "POST", w, &v2_headers(), bad_utf8_v2, 400, "UTF-8"),
        send("v2 timestamp i64::MIN", "POST", w, &v2_headers(), v2(&syms, vec![v2_series(vec![1, 2], &[(i64::MIN, 1.0)])]), 400, "outside the supported range"),
        send("v2 more series than --max-series-per-request", "POST", w, &v2_headers(), v2(&syms, (0..=MAX_SERIES).map(|_| v2_series(vec![1, 2], &ok_sample)).collect()), 400, "--max-series-per-request"),
        send("v2 unknown proto", "POST", w, &[("Content-Type", "application/x-protobuf;proto=io.prometheus.write.v3.Request"), ("Content-Encoding", "snappy")], good_v1.clone(), 415, "v3"),
        // --- import ---
        send("import 100k nested arrays", "POST", "/api/v1/import", &[], nested, 400, "line 1: invalid JSON"),
        send("import 50k nested objects", "POST", "/api/v1/import", &[], nested_metric, 400, "line 1: invalid JSON"),
        send("import line over the body limit", "POST", "/api/v1/import", &[], huge_line, 413, "larger than the limit"),
        send("import 8 MB of garbage on one line", "POST", "/api/v1/import", &[], garbage_line, 400, "line 1: invalid JSON"),
        send("import 10 MB label value", "POST", "/api/v1/import", &[], ten_mb_json, 400, "more than the limit of 16384"),
        send("import a million labels", "POST", "/api/v1/import", &[], million_json, 400, "1000001 labels, more than the limit of 128"),
        send("import duplicate labels", "POST", "/api/v1/import", &[], import_line(r#"{"__name__":"hostile_marker","a":"1","a":"2"}"#, "[1]", &format!("[{t0}]")), 400, "duplicate label name"),
        send("import invalid UTF-8 label value", "POST", "/api/v1/import", &[], bad_utf8_json, 400, "invalid unicode code point"),
        send("import invalid UTF-8 label name", "POST", "/api/v1/import", &[], bad_utf8_name_json, 400, "invalid unicode code point"),
        send("import lone surrogate escape", "POST", "/api/v1/import", &[], import_line(r#"{"__name__":"hostile_marker","a":"\udc00"}"#, "[1]", "[1]"), 400, "surrogate"),
        send("import NaN timestamp", "POST", "/api/v1/import", &[], import_line(m, "[1]", "[NaN]"), 400, "invalid JSON"),
        send("import \"NaN\" timestamp", "POST", "/api/v1/import", &[], import_line(m, "[1]", r#"["NaN"]"#), 400, "expected i64"),
        send("import non-numeric timestamp", "POST", "/api/v1/import", &[], import_line(m, "[1]", r#"["2024-01-01"]"#), 400, "expected i64"),
        send("import timestamp past i64", "POST", "/api/v1/import", &[], import_line(m, "[1]", "[99999999999999999999]"), 400, "expected i64"),
        send("import timestamp after 2262", "POST", "/api/v1/import", &[], import_line(m, "[1]", "[9223372036855]"), 400, "outside the supported range"),
        send("import timestamp i64::MIN", "POST", "/api/v1/import", &[], import_line(m, "[1]", "[-9223372036854775808]"), 400, "outside the supported range"),
        send("import value 1e999", "POST", "/api/v1/import", &[], import_line(m, "[1e999]", "[1]"), 400, "number out of range"),
        send("import more series than --max-series-per-request", "POST", "/api/v1/import", &[], too_many_lines, 400, "line 1001: the request has more than 1000 series (lines), the limit set by --max-series-per-request"),
        send("import gzip bomb", "POST", "/api/v1/import", &[("Content-Encoding", "gzip")], gzip_bomb.clone(), 413, "larger than the limit"),
        send("import corrupt gzip", "POST", "/api/v1/import", &[("Content-Encoding", "gzip")], b"\x1f\x8b not really".to_vec(), 400, "invalid gzip body"),
        send("import snappy encoding", "POST", "/api/v1/import", &[("Content-Encoding", "snappy")], good_v1.clone(), 415, "Content-Encoding"),
        send("import body over the limit", "POST", "/api/v1/import", &[], too_big.clone(), 413, "larger than the limit"),
        send("import empty body", "POST", "/api/v1/import", &[], vec![], 204, ""),
        // --- line protocol, OpenTSDB, Prometheus text ---
        send("influx malformed field", "POST", "/write", &[], b"hostile_marker v=oops".to_vec(), 400, "line 1: invalid field value"),
        send("influx NaN field", "POST", "/write", &[], b"hostile_marker v=NaN".to_vec(), 400, "invalid field value"),
        send("influx timestamp before 1970", "POST", "/write", &[], b"hostile_marker v=1 -1".to_vec(), 400, "out of range"),
        send("influx timestamp past i64", "POST", "/write?precision=h", &[], b"hostile_marker v=1 9223372036854775807".to_vec(), 400, "out of range"),
        send("influx invalid UTF-8", "POST", "/write", &[], b"hostile_marker,a=\xff\xfe v=1".to_vec(), 400, "not valid UTF-8"),
        send("influx unknown precision", "POST", "/write?precision=fortnight", &[], b"hostile_marker v=1".to_vec(), 400, "precision"),
        send("influx gzip bomb", "POST", "/write", &[("Content-Encoding", "gzip")], gzip_bomb.clone(), 413, "larger than the limit"),
        send("influx body over the limit", "POST", "/api/v2/write", &[], too_big.clone(), 413, "larger than the limit"),
        send("opentsdb not JSON", "POST", "/api/put", &[], b"{nope".to_vec(), 400, "invalid JSON"),
        send("opentsdb NaN value", "POST", "/api/put", &[], br#"{"metric":"hostile_marker","timestamp":1700000000,"value":"NaN"}"#.to_vec(), 400, "not a finite number"),
        send("opentsdb timestamp out of range", "POST", "/api/put", &[], br#"{"metric":"hostile_marker","timestamp":-5,"value":1}"#.to_vec(), 400, "out of range"),
        send("opentsdb gzip bomb", "POST", "/api/put", &[("Content-Encoding", "gzip")], gzip_bomb.clone(), 413, "larger than the limit"),
        send("prometheus text invalid label name", "POST", "/api/v1/import/prometheus", &[], b"hostile_marker{1a=\"x\"} 1".to_vec(), 400, "invalid label name"),
        send("prometheus text timestamp out of range", "POST", "/api/v1/import/prometheus", &[], b"hostile_marker 1 -1".to_vec(), 400, "outside the supported range"),
        send("otlp not protobuf", "POST", "/opentelemetry/v1/metrics", &[("Content-Type", "application/x-protobuf")], b"\xff\xff\xff not protobuf".to_vec(), 400, "invalid OTLP protobuf"),
        send("otlp JSON", "POST", "/api/v1/otlp/v1/metrics", &[("Content-Type", "application/json")], b"{}".to_vec(), 415, "OTLP/JSON is not accepted"),
        send("otlp gzip bomb", "POST", "/opentelemetry/v1/metrics", &[("Content-Type", "application/x-protobuf"), ("Content-Encoding", "gzip")], gzip_bomb.clone(), 413, "larger than the limit"),
        send("prometheus text gzip bomb", "POST", "/api/v1/import/prometheus", &[("Content-Encoding", "gzip")], gzip_bomb.clone(), 413, "larger than the limit"),
        // --- export ---
        get("export without match[]", "/api/v1/export", 400, "missing parameter \"match[]\""),
        get("export 10k nested parens in match[]", format!("/api/v1/export?match[]={}", enc(&parens(10_000, "up"))), 400, "brackets are nested more than 200 levels deep"),
        send("export 100k match[]", "POST", "/api/v1/export", &[FORM], many_matches.clone(), 400, "too many \"match[]\" parameters: 100000 given, at most 1000"),
        get("export start NaN", "/api/v1/export?match[]=up&start=NaN", 400, "cannot parse \"NaN\" to a valid timestamp"),
        get("export start after end", "/api/v1/export?match[]=up&start=2000&end=1000", 400, "end timestamp must not be before start time"),
        // --- remote read ---
        send("read garbage protobuf", "POST", "/api/v1/read", &read_headers(), read::compress(b"\x0a\xff\xff\xff\xff\x0f"), 400, "invalid protobuf"),
        send("read snappy header declares 4 GiB", "POST", "/api/v1/read", &read_headers(), huge_header, 413, "larger than the limit"),
        send("read empty body", "POST", "/api/v1/read", &read_headers(), vec![], 400, "snappy"),
        send("read regex bomb", "POST", "/api/v1/read", &read_headers(), rr(vec![re("(a{1000}){1000}")], 0, t0), 400, "invalid regular expression"),
        send("read nested-quantifier regex", "POST", "/api/v1/read", &read_headers(), rr(vec![re("(a+)+$")], 0, t0), 200, ""),
        send("read i64 time range", "POST", "/api/v1/read", &read_headers(), rr(vec![re("hostile_.*")], i64::MIN, i64::MAX), 200, ""),
        send("read without snappy", "POST", "/api/v1/read", &read_headers()[..1], rr(vec![re("up")], 0, t0), 415, "snappy"),
        // --- query ---
        send("query 100k nested parens", "POST", "/api/v1/query", &[FORM], form("query", &parens(100_000, "1")), 400, "nested more than 200 levels deep"),
        send("query 100k unary minus", "POST", "/api/v1/query", &[FORM], form("query", &format!("{}up", "-".repeat(100_000))), 400, "query is too complex"),
        send("query 20k chained +", "POST", "/api/v1/query", &[FORM], form("query", &vec!["1"; 20_000].join("+")), 400, "query is too complex: more than 2000 operators"),
        send("query 10k chained or", "POST", "/api/v1/query", &[FORM], form("query", &vec!["up"; 10_000].join(" or ")), 400, "query is too complex: more than 2000 operators"),
        send("query 10k nested function calls", "POST", "/api/v1/query", &[FORM], form("query", &format!("{}up{}", "abs(".repeat(10_000), ")".repeat(10_000))), 400, "nested more than 200 levels deep"),
        send("query 300 nested function calls", "POST", "/api/v1/query", &[FORM], form("query", &format!("{}up{}", "abs(".repeat(300), ")".repeat(300))), 400, "nested more than 200 levels deep"),
        get("query nested-quantifier regex", format!("/api/v1/query?query={}", enc(r#"{__name__=~"(a+)+$"}"#)), 200, "\"result\":[]"),
        get("query regex over the size limit", format!("/api/v1/query?query={}", enc(r#"{__name__=~"(a{1000}){1000}"}"#)), 400, "regexes are too complex"),
        send("query 1.6 MB regex", "POST", "/api/v1/query", &[FORM], form("query", &huge_regex), 400, "regexes are too complex"),
        get("query time NaN", "/api/v1/query?query=up&time=NaN", 400, "cannot parse \"NaN\" to a valid timestamp"),
        get("query time not a number", "/api/v1/query?query=up&time=yesterday", 400, "use RFC3339 or Unix seconds"),
        get("query time in year 9999", "/api/v1/query?query=up&time=9999-12-31T23:59:59Z", 200, "\"result\":[]"),
        get("query time 1e300", "/api/v1/query?query=up&time=1e300", 200, "\"result\":[]"),
        get("query time -1e15", "/api/v1/query?query=up&time=-1e15", 200, "\"result\":[]"),
        get("query without query", "/api/v1/query", 400, "missing parameter \"query\""),
        send("query empty POST", "POST", "/api/v1/query", &[FORM], vec![], 400, "missing parameter \"query\""),
        send("query JSON body", "POST", "/api/v1/query", &[("Content-Type", "application/json")], br#"{"query":"up"}"#.to_vec(), 415, "application/x-www-form-urlencoded"),
        send("query brotli body", "POST", "/api/v1/query", &[FORM, ("Content-Encoding", "br")], b"query=up".to_vec(), 415, "Content-Encoding"),
        send("export JSON body", "POST", "/api/v1/export", &[("Content-Type", "application/json")], br#"{"match[]":"up"}"#.to_vec(), 415, "application/x-www-form-urlencoded"),
        send("query gzip bomb", "POST", "/api/v1/query", &[FORM, ("Content-Encoding", "gzip")], gzip_bomb, 413, "larger than the limit"),
        send("query form over the limit", "POST", "/api/v1/query", &[FORM], too_big, 413, "larger than the limit"),
        send("query DELETE", "DELETE", "/api/v1/query", &[], vec![], 405, "method DELETE is not allowed"),
        // --- query_range ---
        get("range billions of points", range_url("0", "9223372036", "0.001"), 400, "exceeded maximum resolution of 11,000 points per timeseries. Try decreasing the query resolution (?step=XX)"),
        get("range step 0", range_url("0", "100", "0"), 400, "zero or negative query resolution step widths are not accepted"),
        get("range negative step", range_url("0", "100", "-5"), 400, "zero or negative query resolution step widths are not accepted"),
        get("range step rounds to 0 ms", range_url("0", "100", "1e-9"), 400, "zero or negative query resolution step widths are not accepted"),
        get("range step NaN", range_url("0", "100", "NaN"), 400, "invalid parameter \"step\""),
        get("range step Inf", range_url("0", "100", "Inf"), 400, "invalid parameter \"step\""),
        get("range start after end", range_url("200", "100", "5"), 400, "end timestamp must not be before start time"),
        get("range start NaN", range_url("NaN", "100", "5"), 400, "cannot parse \"NaN\" to a valid timestamp"),
        get("range without step", "/api/v1/query_range?query=up&start=0&end=100", 400, "missing parameter \"step\""),
        get("range across all time", range_url("-1e15", "9999-12-31T23:59:59Z", "1e12"), 200, "\"result\":[]"),
        // --- series, labels, label values ---
        get("series without match[]", "/api/v1/series", 400, "no match[] parameter provided"),
        send("series 100k match[]", "POST", "/api/v1/series", &[FORM], many_matches.clone(), 400, "at most 1000 are accepted"),
        send("series 100k nested parens in match[]", "POST", "/api/v1/series", &[FORM], form("match[]", &parens(100_000, "up")), 400, "brackets are nested more than 200 levels deep"),
        get("series match[] is not a selector", format!("/api/v1/series?match[]={}", enc("rate(up[5m])")), 400, "is not a series selector"),
        get("series negative limit", "/api/v1/series?match[]=up&limit=-1", 400, "invalid parameter \"limit\""),
        send("labels 100k match[]", "POST", "/api/v1/labels", &[FORM], many_matches, 400, "at most 1000 are accepted"),
        get("labels regex over the size limit", format!("/api/v1/labels?match[]={}", enc(r#"{a=~"(a{1000}){1000}"}"#)), 400, "regexes are too complex"),
        get("labels start after end", "/api/v1/labels?start=10&end=1", 400, "end timestamp must not be before start time"),
        // Any UTF-8 is a label name (as in Prometheus 3): these only have no values.
        get("label values path traversal", "/api/v1/label/..%2F..%2Fetc%2Fpasswd/values", 200, r#""data":[]"#),
        get("label values UTF-8 name", "/api/v1/label/1abc/values", 200, r#""data":[]"#),
        get("label values non-UTF-8 name", "/api/v1/label/%ff%fe/values", 400, "invalid label name"),
        get("label values bad U__ escape", "/api/v1/label/U__a_zz_/values", 400, "invalid label name"),
        get("label values 40 KB name", format!("/api/v1/label/{}/values", "a-".repeat(20_000)), 200, r#""data":[]"#),
        send("label values POST", "POST", "/api/v1/label/job/values", &[], vec![], 405, "method POST is not allowed"),
        // --- metadata, status ---
        get("metadata non-numeric limit", "/api/v1/metadata?limit=abc", 400, "is not an integer"),
        get("metadata non-numeric limit_per_metric", "/api/v1/metadata?limit_per_metric=x", 400, "is not an integer"),
        send("metadata POST", "POST", "/api/v1/metadata", &[], vec![], 405, "not allowed"),
        get("status unknown page", "/api/v1/status/config", 404, "no endpoint at /api/v1/status/config"),
        send("status windows PUT", "PUT", "/api/v1/status/windows", &[], vec![], 405, "not allowed"),
        // --- unknown paths ---
        get("unknown API version", "/api/v3/write", 404, "no endpoint at /api/v3/write"),
        get("GET on the v2 line-protocol write", "/api/v2/write", 405, "method GET is not allowed on /api/v2/write"),
        get("encoded dot-dot path", "/%2e%2e/%2e%2e/etc/passwd", 404, "no endpoint"),
        get("60 KB path (the most an HTTP URI may hold)", format!("/{}", "a".repeat(60_000)), 404, "no endpoint"),
    ]
}

/// Sends a case; returns status and body.
fn run(base: &str, case: &Case) -> (u16, String) {
    let method = reqwest::Method::from_bytes(case.method.as_bytes()).unwrap();
    let mut req = client().request(method, format!("{base}{}", case.path)).body(case.body.clone());
    for (k, v) in &case.headers {
        req = req.header(*k, v);
    }
    let resp = req.send().unwrap_or_else(|e| {
        let alive = if healthy(base) { "still healthy" } else { "the server died" };
        panic!("{}: no answer ({alive}): {}", case.name, e.without_url())
    });
    let status = resp.status().as_u16();
    (status, resp.text().unwrap_or_default())
}

fn healthy(base: &str) -> bool {
    client().get(format!("{base}/-/healthy")).send().is_ok_and(|r| r.status().as_u16() == 200)
}

/// Everything stored, by export, and the series count by the series API.
fn stored(base: &str) -> (Exported, usize) {
    let all = export(base, r#"{__name__=~".+"}"#);
    let resp = client()
        .get(format!("{base}/api/v1/series"))
        .query(&[("match[]", r#"{__name__=~".+"}"#)])
        .send()
        .unwrap()
        .text()
        .unwrap();
    let v: serde_json::Value = serde_json::from_str(&resp).unwrap();
    (all, v["data"].as_array().map_or(0, Vec::len))
}

/// A valid remote-write of fresh series, read back bit-exact through export, remote read and
/// the query API; adds them to `expected`.
fn write_and_read_back(base: &str, round: usize, t0: i64, expected: &mut Exported) {
    let round_s = round.to_string();
    let samples: Vec<(i64, f64)> = (0..5).map(|i| (t0 + i * 15_000, round as f64 * 100.0 + i as f64 + 0.25)).collect();
    let ts = vec![
        series(&[("__name__", "hostile_ok"), ("kind", "a"), ("round", &round_s)], &samples),
        series(&[("__name__", "hostile_ok"), ("kind", "b"), ("round", &round_s)], &samples[..2]),
    ];
    let mine: Exported = ts
        .iter()
        .map(|s| {
            let labels: BTreeMap<String, String> = s.labels.iter().map(|l| (l.name.clone(), l.value.clone())).collect();
            (labels, s.samples.iter().map(|p| (p.timestamp, p.value.to_bits())).collect())
        })
        .collect();
    let (status, _, text) = post(&format!("{base}/api/v1/write"), &V1_HEADERS, v1(ts));
    assert_eq!((status, text.as_str()), (204, ""), "round {round}: valid write refused");
    let selector = format!(r#"hostile_ok{{round="{round}"}}"#);
    assert_eq!(export(base, &selector), mine, "round {round}: export differs from what was written");
    let matchers = vec![
        proto::LabelMatcher { r#type: MatcherType::Eq as i32, name: "__name__".into(), value: "hostile_ok".into() },
        proto::LabelMatcher { r#type: MatcherType::Eq as i32, name: "round".into(), value: round_s.clone() },
    ];
    for accepted in [&[ResponseType::Samples][..], &[ResponseType::StreamedXorChunks]] {
        assert_eq!(remote_read(base, matchers.clone(), t0, t0 + 60_000, accepted), mine, "round {round}: remote read");
    }
    let last = samples.last().unwrap();
    let resp = client()
        .get(format!("{base}/api/v1/query"))
        .query(&[
            ("query", format!(r#"hostile_ok{{round="{round}",kind="a"}}"#)),
            ("time", format!("{}", last.0 / 1000)),
        ])
        .send()
        .unwrap()
        .text()
        .unwrap();
    let v: serde_json::Value = serde_json::from_str(&resp).unwrap();
    assert_eq!(v["data"]["result"][0]["value"][1], format!("{}", last.1), "round {round}: query {resp}");
    expected.extend(mine);
}

#[test]
fn hostile_requests_get_clear_errors_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let server = Binary::spawn(
        dir.path(),
        &["--max-request-bytes", "16MiB", "--max-series-per-request", &MAX_SERIES.to_string(), "--retention", "0"],
    );
    let base = server.url("");
    // Whole seconds, so the query API's value at `last.0 / 1000` is the last sample.
    let t0 = recent_ms() - recent_ms() % 1000;
    let mut expected = Exported::new();
    write_and_read_back(&base, 0, t0, &mut expected);

    let cases = cases(t0);
    assert!(cases.len() >= 40, "only {} cases", cases.len());
    let mut names = std::collections::HashSet::new();
    for c in &cases {
        assert!(names.insert(c.name), "duplicate case name {}", c.name);
    }
    let checkpoints = [cases.len() / 3, 2 * cases.len() / 3];
    let mut failures = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        let started = Instant::now();
        let (status, text) = run(&base, case);
        let took = started.elapsed();
        let shown: String = text.chars().take(400).collect();
        if status != case.status {
            failures.push(format!("{}: status {status}, want {}: {shown}", case.name, case.status));
        } else if status >= 400 {
            match serde_json::from_str::<serde_json::Value>(&text) {
                Ok(v) if v["status"] == "error" && v["errorType"].is_string() => {
                    let msg = v["error"].as_str().unwrap_or("");
                    if !msg.contains(case.needle) {
                        failures.push(format!("{}: error {msg:?} does not say {:?}", case.name, case.needle));
                    }
                    if msg.len() > 2_000 {
                        failures.push(format!("{}: error message is {} bytes long", case.name, msg.len()));
                    }
                }
                _ => failures.push(format!("{}: not the Prometheus error envelope: {shown}", case.name)),
            }
        } else if !text.contains(case.needle) {
            failures.push(format!("{}: body does not contain {:?}: {shown}", case.name, case.needle));
        }
        if took > Duration::from_secs(20) {
            failures.push(format!("{}: took {took:?}", case.name));
        }
        assert!(healthy(&base), "server is not healthy after {:?}; failures so far: {failures:#?}", case.name);
        let (all, series) = stored(&base);
        assert_eq!(all, expected, "{}: stored data changed", case.name);
        assert_eq!(series, expected.len(), "{}: series count changed", case.name);
        if checkpoints.contains(&i) {
            write_and_read_back(&base, i, t0, &mut expected);
        }
    }
    assert!(failures.is_empty(), "{} of {} cases failed:\n{}", failures.len(), cases.len(), failures.join("\n"));
    write_and_read_back(&base, cases.len(), t0, &mut expected);
    assert_eq!(stored(&base), (expected.clone(), expected.len()));
    server.terminate();
}
