//! Round trips and every rejection of the remote-write decoder.

use super::decode::{decode_write, DecodeError, DecodeLimits, Protocol, Rejection};
use super::proto::{self, v2, MetricType};
use super::snappy_body;
use crate::sample::STALE_NAN_BITS;
use proptest::prelude::*;

fn label(n: &str, v: &str) -> proto::Label {
    proto::Label { name: n.into(), value: v.into() }
}

fn series(labels: &[(&str, &str)], samples: &[(i64, f64)]) -> proto::TimeSeries {
    proto::TimeSeries {
        labels: labels.iter().map(|(n, v)| label(n, v)).collect(),
        samples: samples.iter().map(|&(t, v)| proto::Sample { value: v, timestamp: t }).collect(),
        ..Default::default()
    }
}

fn v1(ts: Vec<proto::TimeSeries>) -> Vec<u8> {
    snappy_body(&proto::WriteRequest { timeseries: ts, metadata: vec![] })
}

fn decode1(body: &[u8]) -> Result<super::decode::Decoded, Rejection> {
    decode_write(body, Protocol::V1, &DecodeLimits::default())
}

const T: i64 = 1_700_000_000_000;

#[test]
fn v1_round_trip_keeps_stale_markers_bit_exact() {
    let stale = f64::from_bits(STALE_NAN_BITS);
    let body = v1(vec![
        series(&[("__name__", "up"), ("job", "a")], &[(T, 1.0), (T + 15_000, stale)]),
        series(&[("__name__", "up"), ("instance", ""), ("job", "b")], &[(T, 0.0)]),
    ]);
    let d = decode1(&body).unwrap();
    assert_eq!(d.batch.sample_count(), 3);
    assert_eq!(d.batch.series[0].samples[1].value.to_bits(), STALE_NAN_BITS);
    assert_eq!(d.batch.series[1].labels.to_string(), r#"up{job="b"}"#, "empty value means absent");
}

#[test]
fn v1_metadata_is_kept() {
    let body = snappy_body(&proto::WriteRequest {
        timeseries: vec![],
        metadata: vec![proto::MetricMetadata {
            r#type: MetricType::Counter as i32,
            metric_family_name: "http_requests_total".into(),
            help: "Requests.".into(),
            unit: String::new(),
        }],
    });
    let d = decode1(&body).unwrap();
    assert_eq!(d.metadata.len(), 1);
    assert_eq!(d.metadata[0].kind, MetricType::Counter);
    assert_eq!(d.metadata[0].help, "Requests.");
}

fn reject(body: &[u8], reason: &str, needle: &str) {
    let err = decode1(body).expect_err("must be rejected").error;
    assert_eq!(err.reason(), reason, "{err}");
    assert!(err.to_string().contains(needle), "{err:?} does not mention {needle:?}");
}

#[test]
fn every_bad_input_is_rejected_with_a_reason() {
    reject(b"\xff\xff\xff\xff\xff\x01", "invalid_snappy", "snappy");
    reject(&[0x05, 0x00], "invalid_snappy", "snappy");
    reject(&super::read::compress(b"\x0a\xff\xff"), "invalid_protobuf", "prometheus.WriteRequest");
    reject(&v1(vec![series(&[("job", "a"), ("__name__", "up")], &[(T, 1.0)])]), "unsorted_labels", "not sorted");
    reject(
        &v1(vec![series(&[("__name__", "up"), ("a", "1"), ("a", "2")], &[(T, 1.0)])]),
        "duplicate_label",
        "duplicate",
    );
    reject(&v1(vec![series(&[("", "x"), ("__name__", "up")], &[(T, 1.0)])]), "empty_label_name", "empty label name");
    reject(&v1(vec![series(&[("job", "a")], &[(T, 1.0)])]), "missing_metric_name", "__name__");
    reject(&v1(vec![series(&[("__name__", "")], &[(T, 1.0)])]), "missing_metric_name", "__name__");
    reject(&v1(vec![series(&[("__name__", "up"), ("a-b", "1")], &[(T, 1.0)])]), "invalid_label", "a-b");
    reject(&v1(vec![series(&[("__name__", "up"), ("a", "x\0y")], &[(T, 1.0)])]), "invalid_label", "0x00");
    reject(&v1(vec![series(&[("__name__", "up")], &[(-1, 1.0)])]), "timestamp_out_of_range", "-1");
    // Invalid UTF-8 in a label value: hand-built bytes, since prost will not encode it.
    let mut raw =
        proto::WriteRequest { timeseries: vec![series(&[("__name__", "up")], &[(T, 1.0)])], metadata: vec![] }
            .encode_to_vec();
    let pos = raw.windows(2).position(|w| w == b"up").unwrap();
    raw[pos] = 0xff;
    reject(&super::read::compress(&raw), "invalid_protobuf", "UTF-8");
}

#[test]
fn size_limit_is_checked_before_allocating() {
    // A 5-byte body whose header announces 2^32 - 1 bytes.
    let err = decode_write(&[0xff, 0xff, 0xff, 0xff, 0x0f], Protocol::V1, &DecodeLimits::default()).unwrap_err().error;
    assert!(matches!(err, DecodeError::TooLarge { len: 4_294_967_295, .. }), "{err}");
    let limits = DecodeLimits { max_decoded_bytes: 10, ..DecodeLimits::default() };
    let body = v1(vec![series(&[("__name__", "up")], &[(T, 1.0)])]);
    assert_eq!(decode_write(&body, Protocol::V1, &limits).unwrap_err().error.reason(), "too_large");
}

#[test]
fn label_limits() {
    let limits = DecodeLimits { max_labels: 2, max_label_len: 8, ..DecodeLimits::default() };
    let body = v1(vec![series(&[("__name__", "up"), ("a", "1"), ("b", "2")], &[(T, 1.0)])]);
    assert_eq!(decode_write(&body, Protocol::V1, &limits).unwrap_err().error.reason(), "label_limit");
    let body = v1(vec![series(&[("__name__", "up"), ("a", "123456789")], &[(T, 1.0)])]);
    assert_eq!(decode_write(&body, Protocol::V1, &limits).unwrap_err().error.reason(), "label_limit");
}

#[test]
fn series_limit_in_both_protocols() {
    let limits = DecodeLimits { max_series: 2, ..DecodeLimits::default() };
    let one = || series(&[("__name__", "up")], &[(T, 1.0)]);
    assert!(decode_write(&v1(vec![one(), one()]), Protocol::V1, &limits).is_ok());
    let err = decode_write(&v1(vec![one(), one(), one()]), Protocol::V1, &limits).unwrap_err();
    assert_eq!((err.error.reason(), err.samples), ("too_many_series", 3));
    assert!(err.to_string().contains("--max-series-per-request"), "{err}");
    let ts = v2::TimeSeries {
        labels_refs: vec![1, 2],
        samples: vec![proto::Sample { value: 1.0, timestamp: T }],
        ..Default::default()
    };
    let req = |n: usize| {
        snappy_body(&v2::Request {
            symbols: vec!["".into(), "__name__".into(), "up".into()],
            timeseries: vec![ts.clone(); n],
        })
    };
    assert!(decode_write(&req(2), Protocol::V2, &limits).is_ok());
    let err = decode_write(&req(3), Protocol::V2, &limits).unwrap_err().error;
    assert_eq!(err.reason(), "too_many_series");
}

#[test]
fn v2_symbol_expansion_is_bounded_by_the_body_limit() {
    // Each series references one 1 KiB symbol: 4 series expand to 4 KiB of label text from a
    // body a fraction of that size.
    let big = "x".repeat(1024);
    let ts = v2::TimeSeries {
        labels_refs: vec![1, 2, 3, 4],
        samples: vec![proto::Sample { value: 1.0, timestamp: T }],
        ..Default::default()
    };
    let body = snappy_body(&v2::Request {
        symbols: vec!["".into(), "__name__".into(), "up".into(), "a".into(), big],
        timeseries: vec![ts; 4],
    });
    let limits = DecodeLimits { max_decoded_bytes: 3 * 1024, ..DecodeLimits::default() };
    let err = decode_write(&body, Protocol::V2, &limits).unwrap_err().error;
    assert_eq!(err.reason(), "expansion_too_large", "{err}");
    let limits = DecodeLimits { max_decoded_bytes: 8 * 1024, ..DecodeLimits::default() };
    assert_eq!(decode_write(&body, Protocol::V2, &limits).unwrap().batch.series.len(), 4);
}

fn histogram() -> proto::Histogram {
    proto::Histogram { count_int: 3, sum: 1.5, schema: 3, timestamp: T, ..Default::default() }
}

#[test]
fn native_histograms_are_counted_and_only_fatal_when_alone() {
    let mut h = series(&[("__name__", "rpc_latency")], &[]);
    h.histograms = vec![histogram(), histogram()];
    let err = decode1(&v1(vec![h.clone()])).unwrap_err();
    assert_eq!(err.samples, 2);
    let err = err.error;
    assert!(matches!(err, DecodeError::OnlyNativeHistograms { count: 2 }));
    assert!(err.to_string().contains("native histograms are not supported"));
    let d = decode1(&v1(vec![h, series(&[("__name__", "up")], &[(T, 1.0)])])).unwrap();
    assert_eq!((d.histograms, d.batch.series.len()), (2, 1));
}

#[test]
fn empty_request_is_fine() {
    assert_eq!(decode1(&v1(vec![])).unwrap().batch.sample_count(), 0);
}

fn v2_request(symbols: &[&str], refs: Vec<u32>) -> v2::Request {
    v2::Request {
        symbols: symbols.iter().map(|s| s.to_string()).collect(),
        timeseries: vec![v2::TimeSeries {
            labels_refs: refs,
            samples: vec![proto::Sample { value: 4.0, timestamp: T }],
            metadata: Some(v2::Metadata { r#type: MetricType::Gauge as i32, help_ref: 5, unit_ref: 6 }),
            ..Default::default()
        }],
    }
}

const SYMBOLS: &[&str] = &["", "__name__", "temp", "room", "kitchen", "Temperature.", "celsius"];

#[test]
fn v2_round_trip_with_symbols_and_metadata() {
    let body = snappy_body(&v2_request(SYMBOLS, vec![1, 2, 3, 4]));
    let d = decode_write(&body, Protocol::V2, &DecodeLimits::default()).unwrap();
    assert_eq!(d.batch.series[0].labels.to_string(), r#"temp{room="kitchen"}"#);
    assert_eq!(d.metadata[0].metric, "temp");
    assert_eq!((d.metadata[0].help.as_str(), d.metadata[0].unit.as_str()), ("Temperature.", "celsius"));
}

#[test]
fn v2_rejections() {
    let dec =
        |r: v2::Request| decode_write(&snappy_body(&r), Protocol::V2, &DecodeLimits::default()).unwrap_err().error;
    assert!(dec(v2_request(SYMBOLS, vec![1, 2, 3])).to_string().contains("odd length"));
    assert!(dec(v2_request(SYMBOLS, vec![1, 2, 3, 40])).to_string().contains("out of range"));
    assert!(dec(v2_request(&["x", "__name__", "a"], vec![1, 2])).to_string().contains("symbols[0]"));
    assert_eq!(dec(v2_request(SYMBOLS, vec![3, 4, 1, 2])).reason(), "unsorted_labels");
    // A v1 body read as v2 is garbage, not a panic.
    let v1_body = v1(vec![series(&[("__name__", "up")], &[(T, 1.0)])]);
    let _ = decode_write(&v1_body, Protocol::V2, &DecodeLimits::default());
}

use prost::Message;

/// Series as (labels without `__name__`, samples as (timestamp, value bits)).
type ArbSeries = Vec<(std::collections::BTreeMap<String, String>, Vec<(i64, u64)>)>;

fn arb_series() -> impl Strategy<Value = ArbSeries> {
    let labels = proptest::collection::btree_map("[a-z_][a-z0-9_]{0,6}", "[^\u{0}]{1,8}", 0..5);
    let samples = proptest::collection::vec((0i64..4_000_000_000_000, any::<u64>()), 0..5);
    proptest::collection::vec((labels, samples), 0..8)
}

proptest! {
    #[test]
    fn v1_encode_decode_round_trip(input in arb_series()) {
        let ts: Vec<proto::TimeSeries> = input.iter().map(|(labels, samples)| {
            let mut labels = labels.clone();
            labels.insert("__name__".into(), "m".into());
            proto::TimeSeries {
                labels: labels.iter().map(|(n, v)| label(n, v)).collect(),
                samples: samples.iter().map(|&(t, v)| proto::Sample { value: f64::from_bits(v), timestamp: t }).collect(),
                ..Default::default()
            }
        }).collect();
        let d = decode1(&v1(ts.clone())).unwrap();
        let with_samples: Vec<_> = ts.iter().filter(|t| !t.samples.is_empty()).collect();
        prop_assert_eq!(d.batch.series.len(), with_samples.len());
        for (got, sent) in d.batch.series.iter().zip(with_samples) {
            let names: Vec<&str> = got.labels.iter().map(|l| l.name.as_str()).collect();
            let sent_names: Vec<&str> = sent.labels.iter().map(|l| l.name.as_str()).collect();
            prop_assert_eq!(names, sent_names);
            for (a, b) in got.samples.iter().zip(&sent.samples) {
                prop_assert_eq!(a.timestamp_ms, b.timestamp);
                prop_assert_eq!(a.value.to_bits(), b.value.to_bits());
            }
        }
    }

    #[test]
    fn decoder_never_panics_on_random_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        let limits = DecodeLimits::default();
        for p in [Protocol::V1, Protocol::V2] {
            let _ = decode_write(&bytes, p, &limits);
            let _ = decode_write(&super::read::compress(&bytes), p, &limits);
        }
    }
}
