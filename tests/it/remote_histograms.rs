//! Native histograms over Prometheus remote-write 1.0 and 2.0 and remote read, over real HTTP:
//! every form (integer, float, gauge, custom buckets) written and read back bit for bit, the
//! `-Written` headers, invalid histograms refused whole, `kill -9` after a 204, and the same
//! remote-write and remote read against a real Prometheus 2.42.

use std::collections::BTreeMap;

use prost::Message;
use saltdb::remote::proto::{self, histogram::Count, histogram::ZeroCount, v2, MatcherType, ResponseType};
use saltdb::remote::{read, snappy_body};

use crate::common::*;
use crate::remote_write::{metric_value, metrics};

fn span(offset: i32, length: u32) -> proto::BucketSpan {
    proto::BucketSpan { offset, length }
}

/// An integer histogram with exponential buckets on both sides; `i` varies the counts (the
/// layout stays the same, so a peer keeps it as sent).
fn integer(t: i64, i: u64) -> proto::Histogram {
    proto::Histogram {
        count: Some(Count::CountInt(9 + 3 * i)),
        zero_count: Some(ZeroCount::ZeroCountInt(2 + i)),
        sum: 12.5 + i as f64,
        schema: 1,
        zero_threshold: 0.001,
        positive_spans: vec![span(0, 2), span(2, 1)],
        positive_deltas: vec![2, -1, 2 + i as i64],
        negative_spans: vec![span(-1, 1)],
        negative_deltas: vec![1 + i as i64],
        timestamp: t,
        ..Default::default()
    }
}

/// A float gauge histogram with fractional counts.
fn float_gauge(t: i64, i: u64) -> proto::Histogram {
    proto::Histogram {
        count: Some(Count::CountFloat(6.5 + i as f64)),
        zero_count: Some(ZeroCount::ZeroCountFloat(0.5)),
        sum: -3.25,
        schema: -2,
        zero_threshold: 1e-128,
        positive_spans: vec![span(3, 2)],
        positive_counts: vec![1.5, 2.5 + i as f64],
        negative_spans: vec![span(0, 1)],
        negative_counts: vec![2.0],
        reset_hint: 3,
        timestamp: t,
        ..Default::default()
    }
}

/// An integer gauge histogram (counts go down).
fn integer_gauge(t: i64, i: u64) -> proto::Histogram {
    let n = 10 - i;
    proto::Histogram {
        count: Some(Count::CountInt(n)),
        zero_count: Some(ZeroCount::ZeroCountInt(0)),
        sum: n as f64 * 0.5,
        schema: 3,
        zero_threshold: 0.0,
        positive_spans: vec![span(-4, 1)],
        positive_deltas: vec![n as i64],
        reset_hint: 3,
        timestamp: t,
        ..Default::default()
    }
}

/// A histogram with custom buckets (NHCB, schema -53).
fn nhcb(t: i64, i: u64) -> proto::Histogram {
    proto::Histogram {
        count: Some(Count::CountInt(7 + i)),
        zero_count: Some(ZeroCount::ZeroCountInt(0)),
        sum: 100.0 + i as f64,
        schema: -53,
        positive_spans: vec![span(0, 2), span(1, 1)],
        positive_deltas: vec![3, -1, i as i64],
        custom_values: vec![0.1, 0.5, 1.0],
        reset_hint: 2,
        timestamp: t,
        ..Default::default()
    }
}

type Histograms = BTreeMap<BTreeMap<String, String>, (Vec<proto::Sample>, Vec<proto::Histogram>)>;

/// Remote read (`SAMPLES`) of everything named like `name_re`: label map -> (samples, histograms).
fn read_samples(base: &str, name_re: &str, start: i64, end: i64) -> Histograms {
    let req = proto::ReadRequest {
        queries: vec![proto::Query {
            start_timestamp_ms: start,
            end_timestamp_ms: end,
            matchers: vec![proto::LabelMatcher {
                r#type: MatcherType::Re as i32,
                name: "__name__".into(),
                value: name_re.into(),
            }],
            hints: None,
        }],
        accepted_response_types: vec![ResponseType::Samples as i32],
    };
    let headers = [
        ("Content-Type", "application/x-protobuf"),
        ("Content-Encoding", "snappy"),
        ("X-Prometheus-Remote-Read-Version", "0.1.0"),
    ];
    let resp = headers
        .iter()
        .fold(client().post(format!("{base}/api/v1/read")), |r, (k, v)| r.header(*k, *v))
        .body(snappy_body(&req))
        .send()
        .expect("remote read");
    let status = resp.status().as_u16();
    let body = resp.bytes().unwrap().to_vec();
    assert_eq!(status, 200, "remote read: {}", String::from_utf8_lossy(&body));
    let raw = saltdb::remote::decode::decompress(&body, 64 << 20).expect("snappy response");
    let resp = proto::ReadResponse::decode(raw.as_slice()).expect("ReadResponse");
    let mut out = Histograms::new();
    for ts in resp.results.into_iter().flat_map(|r| r.timeseries) {
        let labels = ts.labels.iter().map(|l| (l.name.clone(), l.value.clone())).collect();
        out.insert(labels, (ts.samples, ts.histograms));
    }
    out
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(n, v)| ((*n).to_owned(), (*v).to_owned())).collect()
}

/// The remote-write 1.0 request of the round-trip tests and what it should read back as.
fn v1_request(t0: i64) -> (proto::WriteRequest, Histograms) {
    let steps = |f: fn(i64, u64) -> proto::Histogram| (0..4).map(|i| f(t0 + i as i64 * 15_000, i)).collect::<Vec<_>>();
    let mut want = Histograms::new();
    let mut timeseries = Vec::new();
    for (name, hs) in [
        ("rh1_integer", steps(integer)),
        ("rh1_float_gauge", steps(float_gauge)),
        ("rh1_integer_gauge", steps(integer_gauge)),
        ("rh1_nhcb", steps(nhcb)),
    ] {
        let mut ts = series(&[("__name__", name), ("job", "v1")], &[]);
        ts.histograms = hs.clone();
        timeseries.push(ts);
        want.insert(labels(&[("__name__", name), ("job", "v1")]), (vec![], hs));
    }
    let floats = [(t0, 1.0), (t0 + 15_000, 2.5)];
    timeseries.push(series(&[("__name__", "rh1_floats"), ("job", "v1")], &floats));
    want.insert(
        labels(&[("__name__", "rh1_floats"), ("job", "v1")]),
        (floats.iter().map(|&(timestamp, value)| proto::Sample { value, timestamp }).collect(), vec![]),
    );
    (proto::WriteRequest { timeseries, metadata: vec![] }, want)
}

/// The remote-write 2.0 request: one series of each form, plus a series with floats and
/// histograms at different timestamps.
fn v2_request(t0: i64) -> (v2::Request, Histograms) {
    let symbols: Vec<String> = ["", "__name__", "rh2_integer", "rh2_float_gauge", "rh2_nhcb", "rh2_mixed", "job", "v2"]
        .map(String::from)
        .to_vec();
    let hs = |f: fn(i64, u64) -> proto::Histogram| (0..3).map(|i| f(t0 + i as i64 * 10_000, i)).collect::<Vec<_>>();
    let mixed_hist = vec![integer(t0 + 5_000, 1)];
    let mixed_floats =
        vec![proto::Sample { value: 4.0, timestamp: t0 }, proto::Sample { value: 5.0, timestamp: t0 + 10_000 }];
    let mut want = Histograms::new();
    let mut timeseries = Vec::new();
    for (name_ref, name, samples, histograms) in [
        (2, "rh2_integer", vec![], hs(integer)),
        (3, "rh2_float_gauge", vec![], hs(float_gauge)),
        (4, "rh2_nhcb", vec![], hs(nhcb)),
        (5, "rh2_mixed", mixed_floats, mixed_hist),
    ] {
        timeseries.push(v2::TimeSeries {
            labels_refs: vec![1, name_ref, 6, 7],
            samples: samples.clone(),
            histograms: histograms.clone(),
            ..Default::default()
        });
        want.insert(labels(&[("__name__", name), ("job", "v2")]), (samples, histograms));
    }
    (v2::Request { symbols, timeseries }, want)
}

/// Histograms compared field by field, floats by their bits.
fn assert_same(got: &Histograms, want: &Histograms) {
    let bits = |h: &proto::Histogram| format!("{h:?} sum bits {:x}", h.sum.to_bits());
    assert_eq!(got.keys().collect::<Vec<_>>(), want.keys().collect::<Vec<_>>());
    for (labels, (samples, hs)) in want {
        let (got_samples, got_hs) = &got[labels];
        assert_eq!(got_samples, samples, "{labels:?}");
        assert_eq!(got_hs.iter().map(bits).collect::<Vec<_>>(), hs.iter().map(bits).collect::<Vec<_>>(), "{labels:?}");
        assert_eq!(got_hs, hs, "{labels:?}");
    }
}

#[test]
fn remote_write_1_and_2_histograms_read_back_bit_for_bit_with_written_headers() {
    let dir = tempfile::tempdir().unwrap();
    let server = InProcess::start(storage_config(dir.path()));
    let base = server.url("");
    let t0 = recent_ms() - 600_000;

    let (req1, want1) = v1_request(t0);
    let (status, h, text) = post(&format!("{base}/api/v1/write"), &V1_HEADERS, snappy_body(&req1));
    assert_eq!((status, text.as_str()), (204, ""));
    assert!(h.get("x-prometheus-remote-write-histograms-written").is_none(), "1.0 answers carry no -Written headers");

    let (req2, want2) = v2_request(t0);
    let (status, h, text) = post(&format!("{base}/api/v1/write"), &V2_HEADERS, snappy_body(&req2));
    assert_eq!((status, text.as_str()), (204, ""));
    assert_eq!(h["x-prometheus-remote-write-samples-written"], "2");
    assert_eq!(h["x-prometheus-remote-write-histograms-written"], "10");
    assert_eq!(h["x-prometheus-remote-write-exemplars-written"], "0");

    assert_same(&read_samples(&base, "rh1_.*", t0 - 1, t0 + 3_600_000), &want1);
    assert_same(&read_samples(&base, "rh2_.*", t0 - 1, t0 + 3_600_000), &want2);
    // The range is honoured for histograms as for floats.
    let late = read_samples(&base, "rh2_integer", t0 + 10_000, t0 + 20_000);
    let (_, hs) = late.values().next().expect("the series");
    assert_eq!(hs.iter().map(|h| h.timestamp).collect::<Vec<_>>(), [t0 + 10_000, t0 + 20_000]);

    let m = metrics(&base);
    assert_eq!(metric_value(&m, r#"saltdb_samples_ingested_total{protocol="remote_write_v1"}"#), 18.0);
    assert_eq!(metric_value(&m, r#"saltdb_samples_ingested_total{protocol="remote_write_v2"}"#), 12.0);
    assert!(!m.contains(r#"reason="native_histogram""#), "histograms are not dropped, so that reason is gone");

    // Streamed remote read cannot carry them (no histogram chunk encoding): it says so instead
    // of leaving them out; float-only series still stream.
    let stream_req = |name: &str| proto::ReadRequest {
        queries: vec![proto::Query {
            start_timestamp_ms: t0 - 1,
            end_timestamp_ms: t0 + 3_600_000,
            matchers: vec![proto::LabelMatcher {
                r#type: MatcherType::Eq as i32,
                name: "__name__".into(),
                value: name.into(),
            }],
            hints: None,
        }],
        accepted_response_types: vec![ResponseType::StreamedXorChunks as i32],
    };
    let headers = [("Content-Type", "application/x-protobuf"), ("Content-Encoding", "snappy")];
    let (status, _, text) = post(&format!("{base}/api/v1/read"), &headers, snappy_body(&stream_req("rh2_integer")));
    assert_eq!(status, 503, "{text}");
    assert!(text.contains("rh2_integer") && text.contains("SAMPLES"), "{text}");
    let resp = headers
        .iter()
        .fold(client().post(format!("{base}/api/v1/read")), |r, (k, v)| r.header(*k, *v))
        .body(snappy_body(&stream_req("rh1_floats")))
        .send()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let body = resp.bytes().unwrap();
    let (frame, rest) = read::read_frame(&body).expect("a frame");
    assert!(rest.is_empty());
    assert_eq!(frame.chunked_series.len(), 1);
    server.stop();
}

#[test]
fn an_invalid_histogram_refuses_the_whole_request_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let server = InProcess::start(storage_config(dir.path()));
    let base = server.url("");
    let url = format!("{base}/api/v1/write");
    let t0 = recent_ms() - 600_000;

    // 1.0: good floats, a good histogram series and one whose second histogram's count does not
    // match its buckets.
    let mut good_hist = series(&[("__name__", "bad_req_ok_hist")], &[]);
    good_hist.histograms = vec![integer(t0, 0)];
    let mut bad = series(&[("__name__", "bad_req_hist"), ("job", "api")], &[(t0, 1.0)]);
    bad.histograms =
        vec![integer(t0 + 1_000, 0), proto::Histogram { count: Some(Count::CountInt(99)), ..integer(t0 + 2_000, 0) }];
    let body = snappy_body(&proto::WriteRequest {
        timeseries: vec![series(&[("__name__", "bad_req_floats")], &[(t0, 1.0)]), good_hist.clone(), bad],
        metadata: vec![],
    });
    let (status, _, text) = post(&url, &V1_HEADERS, body);
    assert_eq!(status, 400, "{text}");
    assert!(text.contains(r#"series #2 bad_req_hist{job=\"api\"}: native histogram #1"#), "{text}");
    assert!(text.contains("9 observations found in buckets, but the count field is 99"), "{text}");

    // 2.0: one series with a negative bucket count (deltas going below zero); the -Written
    // headers say nothing was written.
    let h = proto::Histogram { positive_deltas: vec![2, -3, 2], ..integer(t0, 0) };
    let req = v2::Request {
        symbols: ["", "__name__", "bad_req_v2"].map(String::from).to_vec(),
        timeseries: vec![v2::TimeSeries {
            labels_refs: vec![1, 2],
            samples: vec![proto::Sample { value: 1.0, timestamp: t0 }],
            histograms: vec![h],
            ..Default::default()
        }],
    };
    let (status, headers, text) = post(&url, &V2_HEADERS, snappy_body(&req));
    assert_eq!(status, 400, "{text}");
    assert!(
        text.contains("bad_req_v2") && text.contains("positive side: bucket number 2 has observation count of -1"),
        "{text}"
    );
    for name in ["samples", "histograms", "exemplars"] {
        assert_eq!(headers[format!("x-prometheus-remote-write-{name}-written").as_str()], "0", "{name}");
    }
    // Schema out of range, a reset hint that does not exist, custom bounds not increasing.
    let cases = [
        (proto::Histogram { schema: 9, ..integer(t0, 0) }, "invalid schema 9"),
        (proto::Histogram { reset_hint: 7, ..integer(t0, 0) }, "reset_hint 7"),
        (proto::Histogram { custom_values: vec![0.5, 0.1, 1.0], ..nhcb(t0, 0) }, "bound number 2 is not above"),
        (
            proto::Histogram { positive_spans: vec![span(0, 2)], ..integer(t0, 0) },
            "spans need 2 buckets, have 3 buckets",
        ),
    ];
    for (h, needle) in cases {
        let mut ts = series(&[("__name__", "bad_req_case")], &[]);
        ts.histograms = vec![h];
        let (status, _, text) =
            post(&url, &V1_HEADERS, snappy_body(&proto::WriteRequest { timeseries: vec![ts], metadata: vec![] }));
        assert_eq!(status, 400, "{needle}: {text}");
        assert!(text.contains(needle), "{needle}: {text}");
    }

    assert!(read_samples(&base, "bad_req_.*", 0, t0 + 3_600_000).is_empty(), "nothing of a refused request is written");
    let m = metrics(&base);
    assert_eq!(
        metric_value(
            &m,
            r#"saltdb_write_requests_rejected_total{protocol="remote_write_v1",reason="invalid_histogram"}"#
        ),
        5.0
    );
    // 2 floats and 3 histograms in the first request, 1 histogram in each of the 4 cases.
    assert_eq!(
        metric_value(&m, r#"saltdb_samples_rejected_total{protocol="remote_write_v1",reason="invalid_histogram"}"#),
        9.0
    );
    assert_eq!(
        metric_value(&m, r#"saltdb_samples_rejected_total{protocol="remote_write_v2",reason="invalid_histogram"}"#),
        2.0
    );

    // The good histogram series alone is stored.
    let body = snappy_body(&proto::WriteRequest { timeseries: vec![good_hist], metadata: vec![] });
    assert_eq!(post(&url, &V1_HEADERS, body).0, 204);
    assert_eq!(read_samples(&base, "bad_req_.*", 0, t0 + 3_600_000).len(), 1);
    server.stop();
}

#[test]
fn acknowledged_histograms_survive_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let t0 = recent_ms() - 600_000;
    let (req1, mut want) = v1_request(t0);
    let (req2, want2) = v2_request(t0);
    want.extend(want2);
    let bin = Binary::spawn(dir.path(), &["--retention", "0"]);
    let base = bin.url("");
    assert_eq!(post(&format!("{base}/api/v1/write"), &V1_HEADERS, snappy_body(&req1)).0, 204);
    assert_eq!(post(&format!("{base}/api/v1/write"), &V2_HEADERS, snappy_body(&req2)).0, 204);
    bin.kill9();
    let bin = Binary::spawn(dir.path(), &["--retention", "0"]);
    assert_same(&read_samples(&bin.url(""), "rh[12]_.*", t0 - 1, t0 + 3_600_000), &want);
    bin.terminate();
}

/// Buckets as Prometheus' JSON API lists them: (boundary rule, lower, upper, count), empty
/// buckets left out, sorted.
type JsonBuckets = Vec<(u8, f64, f64, f64)>;

/// A histogram as Prometheus' query API answers it: timestamp (ms), count, sum, buckets.
type JsonHistogram = (i64, f64, f64, JsonBuckets);

/// A remote-read histogram message in the shape of Prometheus' JSON, through saltdb's bucket
/// bounds.
fn json_shape(h: &proto::Histogram) -> JsonHistogram {
    let h2 = saltdb::remote::histogram::from_proto(h).expect("valid histogram");
    let rule = |b: &saltdb::histogram::Bucket| match (b.lower_inclusive, b.upper_inclusive) {
        (false, true) => 0,
        (true, false) => 1,
        (false, false) => 2,
        (true, true) => 3,
    };
    let mut buckets: JsonBuckets =
        h2.all_buckets().filter(|b| b.count != 0.0).map(|b| (rule(&b), b.lower, b.upper, b.count)).collect();
    buckets.sort_by(|a, b| a.1.total_cmp(&b.1));
    (h.timestamp, h2.count, h2.sum, buckets)
}

/// `name[range]` at `time_ms` from Prometheus' query API: its histograms in [`JsonHistogram`] form.
fn prometheus_histograms(base: &str, selector: &str, time_ms: i64) -> Vec<JsonHistogram> {
    let url = format!("{base}/api/v1/query");
    let time = format!("{:.3}", time_ms as f64 / 1000.0);
    let text = client().get(url).query(&[("query", selector), ("time", time.as_str())]).send().unwrap().text().unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    assert_eq!(v["status"], "success", "{v}");
    let f = |x: &serde_json::Value| x.as_str().and_then(|s| s.parse::<f64>().ok()).unwrap_or_else(|| panic!("{x}"));
    let result = v["data"]["result"].as_array().unwrap_or_else(|| panic!("{v}"));
    assert_eq!(result.len(), 1, "{v}");
    let points = result[0]["histograms"].as_array().unwrap_or_else(|| panic!("no histograms: {v}"));
    points
        .iter()
        .map(|p| {
            let t = (p[0].as_f64().unwrap() * 1000.0).round() as i64;
            let h = &p[1];
            let mut buckets: JsonBuckets = h["buckets"]
                .as_array()
                .map(|bs| bs.iter().map(|b| (b[0].as_u64().unwrap() as u8, f(&b[1]), f(&b[2]), f(&b[3]))).collect())
                .unwrap_or_default();
            buckets.sort_by(|a, b| a.1.total_cmp(&b.1));
            (t, f(&h["count"]), f(&h["sum"]), buckets)
        })
        .collect()
}

/// The same remote-write 1.0 request of integer histograms (Prometheus 2.42 receives only
/// integer histograms over remote-write, and no custom buckets) to Prometheus 2.42 with native
/// histograms enabled and to saltdb. Prometheus 2.42's remote read leaves histograms out (it
/// answers the series with no samples), so saltdb's remote read is compared with what
/// Prometheus' query API returns for a range selector: same timestamps, counts, sums and
/// buckets (bounds within 1e-12 relative, since saltdb computes them itself).
#[test]
fn remote_read_histograms_match_prometheus_2_42() {
    use crate::peers;
    const TEST: &str = "remote_read_histograms_match_prometheus_2_42";
    if !peers::available("prometheus", TEST) {
        return;
    }
    let pdir = tempfile::tempdir().unwrap();
    let prom = peers::Prometheus::start_with(
        pdir.path(),
        "global: {scrape_interval: 1h}\n",
        &["--enable-feature=native-histograms"],
    );
    let sdir = tempfile::tempdir().unwrap();
    let server = InProcess::start(storage_config(sdir.path()));
    let base = server.url("");
    let t0 = recent_ms() - 600_000;
    let steps = |f: fn(i64, u64) -> proto::Histogram| (0..5).map(|i| f(t0 + i as i64 * 15_000, i)).collect::<Vec<_>>();
    let names = ["diff_integer", "diff_integer_gauge"];
    let mut timeseries = Vec::new();
    for (name, hs) in names.iter().zip([steps(integer), steps(integer_gauge)]) {
        let mut ts = series(&[("__name__", name), ("job", "diff")], &[]);
        ts.histograms = hs;
        timeseries.push(ts);
    }
    let body = snappy_body(&proto::WriteRequest { timeseries, metadata: vec![] });
    let (status, _, text) = post(&format!("{}/api/v1/write", prom.base), &V1_HEADERS, body.clone());
    assert!((200..300).contains(&status), "prometheus refused the write: {status} {text}");
    assert_eq!(post(&format!("{base}/api/v1/write"), &V1_HEADERS, body).0, 204);

    let ours = read_samples(&base, "diff_.*", t0 - 1, t0 + 3_600_000);
    let close = |a: f64, b: f64| a == b || (a - b).abs() <= 1e-12 * a.abs().max(b.abs());
    let mut compared = 0;
    for name in names {
        let theirs = prometheus_histograms(&prom.base, &format!("{name}[5m]"), t0 + 120_000);
        let (_, hs) = &ours[&labels(&[("__name__", name), ("job", "diff")])];
        let ours: Vec<JsonHistogram> = hs.iter().map(json_shape).collect();
        assert_eq!(ours.len(), theirs.len(), "{name}: {ours:?} vs {theirs:?}");
        for (a, b) in ours.iter().zip(&theirs) {
            assert_eq!((a.0, a.1, a.2), (b.0, b.1, b.2), "{name}");
            assert_eq!(a.3.len(), b.3.len(), "{name}: {a:?} vs {b:?}");
            for (x, y) in a.3.iter().zip(&b.3) {
                assert!(x.0 == y.0 && close(x.1, y.1) && close(x.2, y.2) && x.3 == y.3, "{name}: {x:?} vs {y:?}");
            }
            compared += 1;
        }
    }
    assert_eq!(compared, 10);
    server.stop();
    drop(prom);
}
