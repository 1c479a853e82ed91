//! Round trips and every rejection of the remote-write decoder.

use super::decode::{decode_write, DecodeError, DecodeLimits, Protocol, Rejection};
use super::footprint::held;
use super::proto::{self, histogram::Count, v2, MetricType};
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
    let batch = d.batch.unpack().unwrap();
    assert_eq!(batch.series[0].samples[1].value.to_bits(), STALE_NAN_BITS);
    assert_eq!(batch.series[1].labels.to_string(), r#"up{job="b"}"#, "empty value means absent");
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
    reject(&v1(vec![series(&[("__name__", "up"), ("a\0b", "1")], &[(T, 1.0)])]), "invalid_label", "a\\0b");
    // Any other UTF-8 name is kept as sent, as Prometheus 3 keeps it.
    let d = decode1(&v1(vec![series(&[("__name__", "up"), ("a-b", "1"), ("名前", "x")], &[(T, 1.0)])])).unwrap();
    assert_eq!(d.batch.unpack().unwrap().series[0].labels.get("名前"), Some("x"));
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
    assert_eq!(decode_write(&body, Protocol::V2, &limits).unwrap().batch.len(), 4);
}

/// A valid integer histogram: 3 observations in positive bucket 1 of schema 3.
fn histogram() -> proto::Histogram {
    proto::Histogram {
        count: Some(Count::CountInt(3)),
        sum: 1.5,
        schema: 3,
        positive_spans: vec![proto::BucketSpan { offset: 1, length: 1 }],
        positive_deltas: vec![3],
        timestamp: T,
        ..Default::default()
    }
}

#[test]
fn native_histograms_are_stored_alone_or_beside_floats() {
    let mut h = series(&[("__name__", "rpc_latency")], &[]);
    h.histograms = vec![histogram(), proto::Histogram { timestamp: T + 1, ..histogram() }];
    let d = decode1(&v1(vec![h.clone()])).unwrap();
    assert_eq!((d.batch.histogram_count(), d.batch.sample_count(), d.batch.len()), (2, 0, 1));
    let d = decode1(&v1(vec![h.clone(), series(&[("__name__", "up")], &[(T, 1.0)])])).unwrap();
    assert_eq!((d.batch.histogram_count(), d.batch.sample_count(), d.batch.len()), (2, 1, 2));
    let batch = d.batch.unpack().unwrap();
    assert_eq!(batch.series[0].histograms[1].timestamp_ms, T + 1);
    assert_eq!(batch.series[0].histograms[0].histogram.positive_buckets, [3.0]);
    assert!(batch.series[1].histograms.is_empty());
    // The same through remote-write 2.0.
    let body = snappy_body(&v2::Request {
        symbols: vec!["".into(), "__name__".into(), "rpc_latency".into()],
        timeseries: vec![v2::TimeSeries { labels_refs: vec![1, 2], histograms: h.histograms, ..Default::default() }],
    });
    let d = decode_write(&body, Protocol::V2, &DecodeLimits::default()).unwrap();
    assert_eq!(d.batch.histogram_count(), 2);
}

#[test]
fn an_invalid_histogram_rejects_the_whole_request_naming_it() {
    let mut bad = series(&[("__name__", "rpc_latency"), ("job", "api")], &[(T, 1.0)]);
    bad.histograms =
        vec![histogram(), proto::Histogram { count: Some(Count::CountInt(4)), timestamp: T + 7, ..histogram() }];
    let err = decode1(&v1(vec![series(&[("__name__", "up")], &[(T, 1.0)]), bad.clone()])).unwrap_err();
    assert_eq!(err.samples, 4, "float and histogram samples of the request");
    assert_eq!(err.error.reason(), "invalid_histogram");
    let msg = err.error.to_string();
    assert!(
        msg.contains(r#"series #1 rpc_latency{job="api"}: native histogram #1 (timestamp 1700000000007)"#),
        "{msg}"
    );
    assert!(msg.contains("3 observations found in buckets, but the count field is 4"), "{msg}");
    // A histogram timestamp out of range is a timestamp error, as for float samples.
    bad.histograms = vec![proto::Histogram { timestamp: i64::MAX, ..histogram() }];
    let err = decode1(&v1(vec![bad])).unwrap_err();
    assert_eq!(err.error.reason(), "timestamp_out_of_range");
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
    assert_eq!(d.batch.unpack().unwrap().series[0].labels.to_string(), r#"temp{room="kitchen"}"#);
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
        let batch = d.batch.unpack().unwrap();
        prop_assert_eq!(batch.series.len(), with_samples.len());
        for (got, sent) in batch.series.iter().zip(with_samples) {
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

/// A hand encoder for `prometheus.WriteRequest` bodies, so tests control what prost's encoder
/// never writes: unknown fields at every level, repeated singular fields, empty strings present.
mod wire {
    pub fn varint(dst: &mut Vec<u8>, mut v: u64) {
        while v >= 0x80 {
            dst.push((v as u8) | 0x80);
            v >>= 7;
        }
        dst.push(v as u8);
    }

    pub fn len_field(dst: &mut Vec<u8>, tag: u64, payload: &[u8]) {
        varint(dst, tag << 3 | 2);
        varint(dst, payload.len() as u64);
        dst.extend_from_slice(payload);
    }

    /// An unknown field of field number `tag`, of one of the four skippable wire types.
    pub fn unknown(dst: &mut Vec<u8>, tag: u64, kind: u8) {
        match kind % 4 {
            0 => {
                varint(dst, tag << 3);
                varint(dst, 300);
            }
            1 => {
                varint(dst, tag << 3 | 1);
                dst.extend_from_slice(&7u64.to_le_bytes());
            }
            2 => len_field(dst, tag, b"\xff\x00 not a string"),
            _ => {
                varint(dst, tag << 3 | 5);
                dst.extend_from_slice(&[1, 2, 3, 4]);
            }
        }
    }
}

/// One generated series: label pairs as sent (any order, possibly invalid), samples as
/// (timestamp, value bits), and which unknown field (if any) to add at each level.
#[derive(Clone, Debug)]
struct WireSeries {
    labels: Vec<(Vec<u8>, Vec<u8>)>,
    samples: Vec<(i64, u64)>,
    unknown: Option<u8>,
    repeat_name: bool,
}

fn encode_wire(series: &[WireSeries], top_unknown: Option<u8>) -> Vec<u8> {
    let mut body = Vec::new();
    if let Some(k) = top_unknown {
        wire::unknown(&mut body, 2, k);
    }
    for s in series {
        let mut ts = Vec::new();
        for (i, (n, v)) in s.labels.iter().enumerate() {
            let mut l = Vec::new();
            if s.repeat_name && i == 0 {
                wire::len_field(&mut l, 1, b"overwritten");
            }
            wire::len_field(&mut l, 1, n);
            if let Some(k) = s.unknown {
                wire::unknown(&mut l, 3, k);
            }
            wire::len_field(&mut l, 2, v);
            wire::len_field(&mut ts, 1, &l);
        }
        if let Some(k) = s.unknown {
            wire::unknown(&mut ts, 6, k);
        }
        for &(t, v) in &s.samples {
            let mut p = Vec::new();
            if let Some(k) = s.unknown {
                wire::unknown(&mut p, 9, k);
            }
            p.push(0x09);
            p.extend_from_slice(&v.to_le_bytes());
            p.push(0x10);
            wire::varint(&mut p, t as u64);
            wire::len_field(&mut ts, 2, &p);
        }
        wire::len_field(&mut body, 1, &ts);
    }
    if let Some(k) = top_unknown {
        wire::unknown(&mut body, 15, k.wrapping_add(1));
    }
    body
}

fn arb_wire_series() -> impl Strategy<Value = WireSeries> {
    let name = prop_oneof![
        8 => "[a-c_][a-c0-9_]{0,3}".prop_map(String::into_bytes),
        4 => Just(b"__name__".to_vec()),
        1 => Just(Vec::new()),
        1 => Just(b"1x".to_vec()),
        1 => Just(b"\xffa".to_vec()),
    ];
    let value = prop_oneof![
        8 => "[a-z0-9 ]{0,4}".prop_map(String::into_bytes),
        1 => Just(b"a\0b".to_vec()),
        1 => Just(b"\xc3".to_vec()),
        1 => Just("h\u{e9}".as_bytes().to_vec()),
    ];
    let sorted = any::<u8>().prop_map(|b| b % 4 != 0);
    let labels = (proptest::collection::vec((name, value), 0..5), sorted).prop_map(|(mut l, sorted)| {
        if sorted {
            l.sort();
        }
        l
    });
    let timestamp = prop_oneof![8 => 0i64..4_000_000_000_000, 1 => any::<i64>()];
    let value = prop_oneof![4 => any::<u64>(), 1 => Just(STALE_NAN_BITS)];
    let samples = proptest::collection::vec((timestamp, value), 0..4);
    (labels, samples, proptest::option::of(any::<u8>()), any::<bool>())
        .prop_map(|(labels, samples, unknown, repeat_name)| WireSeries { labels, samples, unknown, repeat_name })
}

/// The fast path ([`decode_v1`]) and the prost reference give the same answer, error message
/// and sample count included.
fn same_as_reference(raw: &[u8], limits: &DecodeLimits) -> Result<(), TestCaseError> {
    use super::decode::{decode_v1, decode_v1_reference};
    match (decode_v1(raw, limits), decode_v1_reference(raw, limits)) {
        (Ok(fast), Ok(reference)) => prop_assert!(fast == reference, "{fast:?} != {reference:?}"),
        (Err(fast), Err(reference)) => {
            prop_assert_eq!(fast.to_string(), reference.to_string());
            prop_assert_eq!(fast.samples, reference.samples);
        }
        (fast, reference) => prop_assert!(false, "fast {fast:?} vs reference {reference:?}"),
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Requests of plain float series (valid or not, with unknown fields and repeated singular
    /// fields): the scanner takes exactly those prost and the label checks accept, with the same
    /// batch, bit for bit.
    #[test]
    fn scanner_accepts_exactly_what_prost_accepts(
        series in proptest::collection::vec(arb_wire_series(), 0..6),
        top_unknown in proptest::option::of(any::<u8>()),
        max_labels in 2usize..6,
    ) {
        let raw = encode_wire(&series, top_unknown);
        let limits = DecodeLimits { max_labels, max_label_len: 3, ..DecodeLimits::default() };
        for limits in [DecodeLimits::default(), limits] {
            let scanned = super::scan::scan_v1(&raw, &limits);
            let reference = super::decode::decode_v1_reference(&raw, &limits);
            match (&scanned, &reference) {
                (Some(batch), Ok(reference)) => prop_assert!(*batch == reference.batch, "{batch:?} != {reference:?}"),
                (None, Err(_)) => {}
                _ => prop_assert!(false, "scanner {scanned:?} vs prost {reference:?}"),
            }
            same_as_reference(&raw, &limits)?;
        }
    }

    /// Arbitrary bytes and corrupted valid bodies: whatever the scanner accepts, prost accepts
    /// identically, and the fast path answers as the reference does.
    #[test]
    fn scanner_never_accepts_what_prost_rejects(
        series in proptest::collection::vec(arb_wire_series(), 1..4),
        flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..4),
        cut in any::<usize>(),
        noise in proptest::collection::vec(any::<u8>(), 0..64),
    ) {
        let limits = DecodeLimits::default();
        let mut raw = encode_wire(&series, None);
        for (at, byte) in flips {
            if !raw.is_empty() {
                let at = at % raw.len();
                raw[at] = byte;
            }
        }
        let truncated = raw.get(..cut % (raw.len() + 1)).unwrap_or_default().to_vec();
        for body in [raw, truncated, noise] {
            if let Some(batch) = super::scan::scan_v1(&body, &limits) {
                let reference = super::decode::decode_v1_reference(&body, &limits);
                prop_assert!(reference.as_ref().is_ok_and(|r| r.batch == batch), "{batch:?} vs {reference:?}");
            }
            same_as_reference(&body, &limits)?;
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// A cache of label sets seen before changes no answer: bodies (valid, invalid, corrupted)
    /// scanned one after the other through one [`KnownLabels`] (big or small enough to rotate)
    /// give exactly what the scanner without it gives, under the cache's limits or others.
    #[test]
    fn known_labels_change_no_answer(
        pool in proptest::collection::vec(arb_wire_series(), 1..5),
        picks in proptest::collection::vec(proptest::collection::vec(any::<prop::sample::Index>(), 1..5), 1..6),
        flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..3),
        budget in prop::sample::select(vec![0usize, 20_000, 1 << 20]),
    ) {
        use super::known_labels::KnownLabels;
        let limits = DecodeLimits::default();
        let strict = DecodeLimits { max_labels: 3, max_label_len: 3, ..limits };
        let known = KnownLabels::new(budget, &limits);
        for (i, pick) in picks.iter().enumerate() {
            let series: Vec<_> = pick.iter().map(|ix| ix.get(&pool).clone()).collect();
            let mut raw = encode_wire(&series, None);
            if i % 2 == 1 {
                for &(at, byte) in &flips {
                    if !raw.is_empty() {
                        let at = at % raw.len();
                        raw[at] = byte;
                    }
                }
            }
            for l in [limits, strict] {
                let plain = super::scan::scan_v1(&raw, &l);
                let cached = super::scan::scan_v1_known(&raw, &l, &known);
                prop_assert!(plain == cached, "body {i}: {plain:?} vs {cached:?}");
            }
        }
    }
}

#[test]
fn scanner_leaves_metadata_exemplars_and_histograms_to_prost() {
    let limits = DecodeLimits::default();
    let mut with_exemplar = series(&[("__name__", "up")], &[(T, 1.0)]);
    with_exemplar.exemplars =
        vec![proto::Exemplar { labels: vec![label("trace_id", "abc")], value: 1.0, timestamp: T }];
    let mut with_histogram = series(&[("__name__", "up")], &[(T, 1.0)]);
    with_histogram.histograms = vec![histogram()];
    let metadata =
        proto::MetricMetadata { r#type: 1, metric_family_name: "up".into(), help: "h".into(), unit: String::new() };
    for (req, exemplars) in [
        (proto::WriteRequest { timeseries: vec![with_exemplar], metadata: vec![] }, 1),
        (proto::WriteRequest { timeseries: vec![with_histogram], metadata: vec![] }, 0),
        (
            proto::WriteRequest {
                timeseries: vec![series(&[("__name__", "up")], &[(T, 1.0)])],
                metadata: vec![metadata],
            },
            0,
        ),
    ] {
        let raw = req.encode_to_vec();
        assert!(super::scan::scan_v1(&raw, &limits).is_none());
        let d = super::decode::decode_v1(&raw, &limits).unwrap();
        assert_eq!((d.batch.sample_count(), d.batch.exemplar_count(), d.exemplars_dropped), (1, exemplars, 0));
    }
    // A plain request is the scanner's, and labels with empty values are dropped as prost's path does.
    let raw = proto::WriteRequest {
        timeseries: vec![series(&[("__name__", "up"), ("a", ""), ("b", "x")], &[(T, f64::from_bits(STALE_NAN_BITS))])],
        metadata: vec![],
    }
    .encode_to_vec();
    let batch = super::scan::scan_v1(&raw, &limits).unwrap();
    assert_eq!(batch.unpack().unwrap().series[0].labels.to_string(), r#"up{b="x"}"#);
    assert_eq!(batch.samples()[0].value.to_bits(), STALE_NAN_BITS);
}

/// Decodes under a budget that grants everything and returns what was reserved in total.
fn reserved_for(body: &[u8], protocol: Protocol) -> (usize, Result<super::decode::Decoded, Rejection>) {
    let mut total = 0usize;
    let result = super::decode::decode_write_reserving(body, protocol, &DecodeLimits::default(), &mut |b| {
        total += b;
        Ok::<(), std::convert::Infallible>(())
    });
    let result = result.map_err(|s| match s {
        super::decode::Stopped::Rejected(r) => r,
        super::decode::Stopped::Refused(never) => match never {},
    });
    (total, result)
}

fn arb_v1_request() -> impl Strategy<Value = proto::WriteRequest> {
    let text = "[a-z_]{0,12}";
    let label = (text, text).prop_map(|(name, value)| proto::Label { name, value });
    let sample =
        (any::<f64>(), 0i64..4_000_000_000_000).prop_map(|(value, timestamp)| proto::Sample { value, timestamp });
    let exemplar = proptest::collection::vec(label.clone(), 0..3).prop_map(|labels| proto::Exemplar {
        labels,
        value: 1.0,
        timestamp: T,
    });
    // Valid histograms of every form most of the time, arbitrary deltas (mostly invalid) else.
    let hist = prop_oneof![
        4 => arb_valid_histogram(),
        1 => (proptest::collection::vec(any::<i64>(), 0..20), 0usize..3).prop_map(|(positive_deltas, spans)| {
            proto::Histogram {
                positive_deltas,
                positive_spans: vec![proto::BucketSpan { offset: 1, length: 2 }; spans],
                ..histogram()
            }
        }),
    ];
    let ts = (
        proptest::collection::vec(label, 0..6),
        proptest::collection::vec(sample, 0..40),
        proptest::collection::vec(exemplar, 0..2),
        proptest::collection::vec(hist, 0..2),
    )
        .prop_map(|(labels, samples, exemplars, histograms)| proto::TimeSeries {
            labels,
            samples,
            exemplars,
            histograms,
        });
    let meta = (text, text).prop_map(|(metric_family_name, help)| proto::MetricMetadata {
        r#type: 1,
        metric_family_name,
        help,
        unit: String::new(),
    });
    (proptest::collection::vec(ts, 0..12), proptest::collection::vec(meta, 0..3))
        .prop_map(|(timeseries, metadata)| proto::WriteRequest { timeseries, metadata })
}

/// A valid histogram: integer or float form, exponential or custom buckets, any reset hint.
pub(super) fn arb_valid_histogram() -> impl Strategy<Value = proto::Histogram> {
    use proto::histogram::ZeroCount;
    let counts = proptest::collection::vec(0u32..1000, 0..12);
    (counts.clone(), counts, 0u32..50, any::<bool>(), any::<bool>(), 0i32..4, -4i32..=8, 0i64..4_000_000_000_000)
        .prop_map(|(pos, neg, zero, float, custom, hint, schema, timestamp)| {
            let span =
                |n: usize| if n == 0 { vec![] } else { vec![proto::BucketSpan { offset: -2, length: n as u32 }] };
            let deltas = |c: &[u32]| {
                let mut prev = 0i64;
                c.iter().map(|&x| std::mem::replace(&mut prev, i64::from(x)).wrapping_neg() + i64::from(x)).collect()
            };
            let floats = |c: &[u32]| c.iter().map(|&x| f64::from(x) / 4.0).collect::<Vec<f64>>();
            let (neg, zero) = if custom { (vec![], 0) } else { (neg, zero) };
            let total = pos.iter().chain(&neg).map(|&x| u64::from(x)).sum::<u64>() + u64::from(zero);
            let mut h = proto::Histogram {
                sum: total as f64 * 1.25,
                schema: if custom { -53 } else { schema },
                zero_threshold: if custom { 0.0 } else { 1e-3 },
                negative_spans: span(neg.len()),
                reset_hint: hint,
                timestamp,
                ..Default::default()
            };
            h.positive_spans = if custom {
                if pos.is_empty() {
                    vec![]
                } else {
                    vec![proto::BucketSpan { offset: 0, length: pos.len() as u32 }]
                }
            } else {
                span(pos.len())
            };
            if custom {
                h.custom_values = (0..pos.len()).map(|i| i as f64 * 0.5 + 0.1).collect();
            }
            if float {
                h.count = Some(Count::CountFloat(total as f64 / 4.0));
                h.zero_count = Some(ZeroCount::ZeroCountFloat(f64::from(zero) / 4.0));
                h.positive_counts = floats(&pos);
                h.negative_counts = floats(&neg);
            } else {
                h.count = Some(Count::CountInt(total));
                h.zero_count = Some(ZeroCount::ZeroCountInt(u64::from(zero)));
                h.positive_deltas = deltas(&pos);
                h.negative_deltas = deltas(&neg);
            }
            h
        })
}

fn arb_v2_request() -> impl Strategy<Value = v2::Request> {
    let symbols = proptest::collection::vec("[a-z_]{0,12}", 0..10).prop_map(|mut s| {
        s.insert(0, String::new());
        s
    });
    let refs = proptest::collection::vec(0u32..12, 0..12);
    let sample =
        (any::<f64>(), 0i64..4_000_000_000_000).prop_map(|(value, timestamp)| proto::Sample { value, timestamp });
    let meta = proptest::option::of((0u32..12, 0u32..12))
        .prop_map(|m| m.map(|(help_ref, unit_ref)| v2::Metadata { r#type: 1, help_ref, unit_ref }));
    let ts = (
        refs.clone(),
        proptest::collection::vec(sample, 0..40),
        proptest::collection::vec(refs, 0..2),
        meta,
        proptest::collection::vec(arb_valid_histogram(), 0..3),
    )
        .prop_map(|(labels_refs, samples, exemplars, metadata, histograms)| v2::TimeSeries {
            labels_refs,
            samples,
            histograms,
            exemplars: exemplars
                .into_iter()
                .map(|labels_refs| v2::Exemplar { labels_refs, value: 1.0, timestamp: T })
                .collect(),
            metadata,
            ..Default::default()
        });
    (symbols, proptest::collection::vec(ts, 0..12))
        .prop_map(|(symbols, timeseries)| v2::Request { symbols, timeseries })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// The walk's bound covers every capacity prost really allocates, and its counts are exact.
    #[test]
    fn footprint_bounds_what_prost_allocates(
        req in arb_v1_request(),
        req2 in arb_v2_request(),
        wire in proptest::collection::vec(arb_wire_series(), 0..6),
        cut in any::<usize>(),
    ) {
        use super::footprint::Footprint;
        let raw = req.encode_to_vec();
        let f = Footprint::of_v1(&raw);
        prop_assert!(f.prost_bytes >= held::v1(&req), "{} < {}", f.prost_bytes, held::v1(&req));
        prop_assert_eq!(f.series, req.timeseries.len());
        prop_assert_eq!(f.samples, req.timeseries.iter().map(|t| t.samples.len()).sum::<usize>());
        prop_assert_eq!(f.histograms, req.timeseries.iter().map(|t| t.histograms.len()).sum::<usize>());
        // Hand-encoded bodies with unknown and repeated fields, whole and truncated.
        let raw = encode_wire(&wire, Some(3));
        let truncated = &raw[..cut % (raw.len() + 1)];
        for body in [&raw[..], truncated] {
            if let Ok(decoded) = proto::WriteRequest::decode(body) {
                let f = Footprint::of_v1(body);
                prop_assert!(f.prost_bytes >= held::v1(&decoded), "{} < {}", f.prost_bytes, held::v1(&decoded));
            }
        }
        let raw = req2.encode_to_vec();
        let f = Footprint::of_v2(&raw);
        prop_assert!(f.prost_bytes >= held::v2(&req2), "{} < {}", f.prost_bytes, held::v2(&req2));
        prop_assert_eq!(f.series, req2.timeseries.len());
        prop_assert_eq!(f.histograms, req2.timeseries.iter().map(|t| t.histograms.len()).sum::<usize>());
    }

    /// What the decoder reserves covers what it holds: the decompressed body, the batch at its
    /// capacity, and prost's messages when the scanner left the body to prost.
    #[test]
    fn decoding_reserves_what_it_holds(req in arb_v1_request(), req2 in arb_v2_request()) {
        let raw = req.encode_to_vec();
        let (reserved, result) = reserved_for(&snappy_body(&req), Protocol::V1);
        if let Ok(d) = result {
            let scanned = super::scan::scan_v1(&raw, &DecodeLimits::default()).is_some();
            let prost = if scanned { 0 } else { held::v1(&req) };
            prop_assert!(reserved >= raw.len() + d.batch.heap_bytes() + prost);
        }
        let raw = req2.encode_to_vec();
        let (reserved, result) = reserved_for(&snappy_body(&req2), Protocol::V2);
        if let Ok(d) = result {
            prop_assert!(reserved >= raw.len() + d.batch.heap_bytes() + held::v2(&req2));
        }
    }
}

#[test]
fn footprint_bounds_a_read_request() {
    use super::footprint::Footprint;
    let m = |n: &str| proto::LabelMatcher { r#type: 0, name: n.into(), value: "some value".into() };
    let hints =
        proto::ReadHints { func: "rate".into(), grouping: vec!["a".into(), "job".into()], ..Default::default() };
    let req = proto::ReadRequest {
        queries: vec![
            proto::Query { matchers: vec![m("__name__"), m("job")], hints: Some(hints), ..Default::default() },
            proto::Query { matchers: vec![m("x")], ..Default::default() },
        ],
        accepted_response_types: vec![0, 1],
    };
    let raw = req.encode_to_vec();
    assert!(Footprint::of_read_request(&raw).prost_bytes >= held::read(&req));
    // Hints sent twice in one query are merged by prost: 8 grouping labels and then 1 more grow
    // one Vec to 16, more than two Vecs of 8 and 4.
    let hints = |n: usize| {
        let grouping = (0..n).map(|i| format!("g{i}")).collect();
        proto::ReadHints { func: "f".repeat(n), grouping, ..Default::default() }.encode_to_vec()
    };
    let mut query = Vec::new();
    wire::len_field(&mut query, 4, &hints(8));
    wire::len_field(&mut query, 4, &hints(1));
    let mut twice = Vec::new();
    wire::len_field(&mut twice, 1, &query);
    let decoded = proto::ReadRequest::decode(&twice[..]).unwrap();
    assert_eq!(decoded.queries[0].hints.as_ref().map(|h| h.grouping.len()), Some(9));
    assert!(Footprint::of_read_request(&twice).prost_bytes >= held::read(&decoded));
}

#[test]
fn bodies_of_empty_messages_are_refused_before_decoding() {
    // 64 MiB of empty TimeSeries (3 MB compressed): 33 M series, refused by count before prost
    // builds a 96-byte struct for each.
    let limits = DecodeLimits::default();
    let raw = [0x0a, 0x00].repeat(4 << 20);
    let err = decode_write(&super::read::compress(&raw), Protocol::V1, &limits).unwrap_err();
    assert_eq!(err.error.reason(), "too_many_series");
    // One series with 1 M empty samples: 2 bytes each on the wire, 16 decoded; the decoder
    // reserves at least that before decoding.
    let mut ts = Vec::new();
    wire::len_field(&mut ts, 1, &{
        let mut l = Vec::new();
        wire::len_field(&mut l, 1, b"__name__");
        wire::len_field(&mut l, 2, b"up");
        l
    });
    ts.extend([0x12, 0x00].repeat(1 << 20));
    let mut body = Vec::new();
    wire::len_field(&mut body, 1, &ts);
    let (reserved, _) = reserved_for(&super::read::compress(&body), Protocol::V1);
    assert!(reserved >= 16 << 20, "reserved only {reserved} bytes");
}

/// The histogram seeds of the fuzz targets are what their names say (they are hand-encoded).
#[test]
fn histogram_fuzz_seeds_decode_as_named() {
    let limits = DecodeLimits::default();
    let v1 = include_bytes!("../../tests/fuzz_regressions/remote_write_v1/histograms_every_form_raw");
    let d = super::decode::decode_v1(v1, &limits).unwrap();
    assert_eq!((d.batch.sample_count(), d.batch.histogram_count()), (1, 3));
    let forms: Vec<(i32, bool)> =
        d.batch.histograms().iter().map(|h| (h.histogram.schema, h.histogram.integer)).collect();
    assert_eq!(forms, [(1, true), (-2, false), (-53, true)]);
    let v2 = include_bytes!("../../tests/fuzz_regressions/remote_write_v2/histograms_every_form_raw");
    assert_eq!(super::decode::decode_v2(v2, &limits).unwrap().batch.histogram_count(), 3);
    let only = include_bytes!("../../tests/fuzz_regressions/remote_write_v1/histograms_only_raw");
    assert_eq!(super::decode::decode_v1(only, &limits).unwrap().batch.histogram_count(), 1);
    for (raw, protocol) in [
        (&include_bytes!("../../tests/fuzz_regressions/remote_write_v1/histogram_invalid_count_raw")[..], Protocol::V1),
        (&include_bytes!("../../tests/fuzz_regressions/remote_write_v2/histogram_invalid_count_raw")[..], Protocol::V2),
        (&include_bytes!("../../tests/fuzz_regressions/remote_write_v2/histogram_overflow_raw")[..], Protocol::V2),
    ] {
        let r = match protocol {
            Protocol::V1 => super::decode::decode_v1(raw, &limits),
            Protocol::V2 => super::decode::decode_v2(raw, &limits),
        };
        assert_eq!(r.unwrap_err().error.reason(), "invalid_histogram");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Requests made of valid histograms (every form) are all accepted, every histogram lands
    /// in the batch, and the reservation covers the batch with its histograms, in 1.0 and 2.0.
    #[test]
    fn histogram_requests_reserve_what_their_batch_holds(
        hists in proptest::collection::vec(proptest::collection::vec(arb_valid_histogram(), 1..6), 1..8),
    ) {
        let total: usize = hists.iter().map(Vec::len).sum();
        let timeseries = hists
            .iter()
            .enumerate()
            .map(|(i, hs)| proto::TimeSeries {
                histograms: hs.clone(),
                ..series(&[("__name__", "h"), ("i", &i.to_string())], &[])
            })
            .collect();
        let req = proto::WriteRequest { timeseries, metadata: vec![] };
        let (reserved, result) = reserved_for(&snappy_body(&req), Protocol::V1);
        let d = result.map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(d.batch.histogram_count(), total);
        let raw = req.encode_to_vec();
        prop_assert!(reserved >= raw.len() + d.batch.heap_bytes() + held::v1(&req));
        let mut symbols = vec![String::new(), "__name__".into(), "h".into(), "i".into()];
        let timeseries = hists
            .iter()
            .enumerate()
            .map(|(i, hs)| {
                symbols.push(i.to_string());
                v2::TimeSeries { labels_refs: vec![1, 2, 3, symbols.len() as u32 - 1], histograms: hs.clone(), ..Default::default() }
            })
            .collect();
        let req2 = v2::Request { symbols, timeseries };
        let (reserved, result) = reserved_for(&snappy_body(&req2), Protocol::V2);
        let d = result.map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(d.batch.histogram_count(), total);
        let raw = req2.encode_to_vec();
        prop_assert!(reserved >= raw.len() + d.batch.heap_bytes() + held::v2(&req2));
        // Each decoded histogram is the message, converted.
        for (h, msg) in d.batch.histograms().iter().zip(hists.iter().flatten()) {
            prop_assert_eq!(super::histogram::to_proto(h.timestamp_ms, &h.histogram), msg.clone());
        }
    }
}
