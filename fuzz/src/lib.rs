//! The entry calls of saltdb's fuzz targets, one function per target.
//!
//! Every function takes arbitrary bytes, feeds them through the same calls the server makes on
//! untrusted input, and panics only when saltdb misbehaves: a panic inside saltdb, or a broken
//! invariant checked here (a decoded request that would not pass validation, a chunk that does
//! not decode to what was encoded). Errors returned by saltdb are the expected outcome for most
//! inputs and are ignored.
//!
//! `tests/fuzz_regressions.rs` in the main crate includes this file with `#[path]`, so saved
//! crashing inputs are replayed on the stable toolchain through exactly these calls.

use std::time::Duration;

use saltdb::http::import::decode_lines;
use saltdb::ingest::SeriesLimits;
use saltdb::labels::Labels;
use saltdb::promql::{parse, Engine, EngineOptions, EvalError};
use saltdb::remote::decode::{
    decode_v1, decode_v1_reference, decode_v2, decode_write, decompress, DecodeLimits, Decoded, Protocol,
};
use saltdb::remote::footprint::{held, Footprint};
use saltdb::remote::known_labels::KnownLabels;
use saltdb::remote::scan::{scan_v1, scan_v1_known};
use saltdb::sample::{check_timestamp, Sample, SeriesSamples, WriteBatch, STALE_NAN_BITS};
use saltdb::storage::format::chunk;
use saltdb::storage::MemQuerier;

/// The names of all targets, as the `fuzz_targets/*.rs` binaries and the regression folders
/// under `tests/fuzz_regressions/` are called.
pub const TARGETS: [&str; 13] = [
    "remote_write_v1",
    "remote_write_v2",
    "import_lines",
    "influx_lines",
    "opentsdb_put",
    "prometheus_text",
    "otlp_metrics",
    "promql",
    "promql_times",
    "chunk_decode",
    "chunk_roundtrip",
    "clickhouse_rowbinary",
    "histogram_chunk",
];

/// Runs the target called `name` on `data`; false when there is no such target.
pub fn run(name: &str, data: &[u8]) -> bool {
    match name {
        "remote_write_v1" => remote_write_v1(data),
        "remote_write_v2" => remote_write_v2(data),
        "import_lines" => import_lines(data),
        "influx_lines" => influx_lines(data),
        "opentsdb_put" => opentsdb_put(data),
        "prometheus_text" => prometheus_text(data),
        "otlp_metrics" => otlp_metrics(data),
        "promql" => promql(data),
        "promql_times" => promql_times(data),
        "chunk_decode" => chunk_decode(data),
        "chunk_roundtrip" => chunk_roundtrip(data),
        "clickhouse_rowbinary" => clickhouse_rowbinary(data),
        "histogram_chunk" => histogram_chunk(data),
        _ => return false,
    }
    true
}

/// Remote-Write 1.0: the HTTP handler's path (snappy, then protobuf) and the protobuf decoder
/// alone on the raw bytes.
pub fn remote_write_v1(data: &[u8]) {
    remote_write(data, Protocol::V1);
}

/// Remote-Write 2.0: as [`remote_write_v1`].
pub fn remote_write_v2(data: &[u8]) {
    remote_write(data, Protocol::V2);
}

fn remote_write(data: &[u8], protocol: Protocol) {
    let limits = DecodeLimits::default();
    // What the handler does: `decode_write` is `decompress` followed by `decode_v1`/`decode_v2`.
    if let Ok(raw) = decompress(data, limits.max_decoded_bytes) {
        assert!(raw.len() <= limits.max_decoded_bytes, "decompressed past the limit");
    }
    if let Ok(decoded) = decode_write(data, protocol, &limits) {
        check_decoded(&decoded, &limits);
    }
    reservation_covers_batch(data, protocol, &limits);
    // The raw bytes as an already decompressed body, so protobuf parsing is reached directly.
    let direct = match protocol {
        Protocol::V1 => decode_v1(data, &limits),
        Protocol::V2 => decode_v2(data, &limits),
    };
    if let Ok(decoded) = direct {
        check_decoded(&decoded, &limits);
    }
    walk_bounds_prost(data, protocol);
    if let Ok(raw) = decompress(data, limits.max_decoded_bytes) {
        walk_bounds_prost(&raw, protocol);
    }
    if protocol == Protocol::V1 {
        scanner_agrees_with_prost(data, &limits);
        if let Ok(raw) = decompress(data, limits.max_decoded_bytes) {
            scanner_agrees_with_prost(&raw, &limits);
        }
    }
}

/// Whatever prost decodes, the walk the write path reserves memory by bounds what it holds.
fn walk_bounds_prost(raw: &[u8], protocol: Protocol) {
    let (bound, held) = match protocol {
        Protocol::V1 => (Footprint::of_v1(raw).prost_bytes, held::decoding_v1(raw)),
        Protocol::V2 => (Footprint::of_v2(raw).prost_bytes, held::decoding_v2(raw)),
    };
    if let Some(held) = held {
        assert!(bound >= held, "the walk bounds {bound} bytes but prost holds {held}");
    }
}

/// The zero-copy 1.0 scanner may decline any body, but a body it accepts must decode with prost
/// and the label checks to exactly the same batch (sample values compared bit for bit).
/// Scanning through a cache of label sets seen before gives the same answer, the first time
/// (entries learned) and the second (entries taken).
fn scanner_agrees_with_prost(raw: &[u8], limits: &DecodeLimits) {
    let known = KnownLabels::new(1 << 20, limits);
    let plain = scan_v1(raw, limits);
    for round in 0..2 {
        let cached = scan_v1_known(raw, limits, &known);
        assert!(cached == plain, "round {round}: with known labels {cached:?}, without {plain:?}");
    }
    if let Some(batch) = plain {
        match decode_v1_reference(raw, limits) {
            Ok(reference) => assert!(
                reference.batch == batch && reference.metadata.is_empty() && reference.batch.histogram_count() == 0,
                "the scanner and prost disagree: {batch:?} vs {:?}",
                reference.batch
            ),
            Err(e) => panic!("the scanner accepted a body prost rejects: {e}"),
        }
    }
}

/// What the decoder reserves covers the decompressed body and the batch it returns (its
/// float samples and native histograms).
fn reservation_covers_batch(data: &[u8], protocol: Protocol, limits: &DecodeLimits) {
    let mut reserved = 0usize;
    let decoded = saltdb::remote::decode::decode_write_reserving(data, protocol, limits, &mut |n| {
        reserved = reserved.saturating_add(n);
        Ok::<(), ()>(())
    });
    if let Ok(d) = decoded {
        let held = d.batch.heap_bytes();
        assert!(reserved >= held, "reserved {reserved} bytes for a batch holding {held}");
    }
}

/// What every accepted request must satisfy before it reaches storage.
fn check_decoded(d: &Decoded, limits: &DecodeLimits) {
    match d.batch.unpack() {
        Ok(batch) => check_batch(&batch, limits.max_labels, limits.max_label_len),
        Err(e) => panic!("accepted a batch whose label bytes do not decode: {e}"),
    }
    // Every accepted histogram is valid and survives remote read's encoding bit for bit.
    for h in d.batch.histograms() {
        assert!(check_timestamp(h.timestamp_ms).is_ok(), "accepted histogram timestamp {}", h.timestamp_ms);
        assert!(h.histogram.validate().is_ok(), "accepted an invalid histogram: {:?}", h.histogram);
        let back =
            saltdb::remote::histogram::from_proto(&saltdb::remote::histogram::to_proto(h.timestamp_ms, &h.histogram));
        assert!(
            back.as_ref().is_ok_and(|b| b.identical(&h.histogram)),
            "histogram does not survive remote read: {:?} vs {back:?}",
            h.histogram
        );
    }
}

fn check_batch(batch: &WriteBatch, max_labels: usize, max_len: usize) {
    for s in &batch.series {
        assert!(s.labels.require_metric_name().is_ok(), "accepted a series without a metric name: {}", s.labels);
        assert!(s.labels.check_limits(max_labels, max_len).is_ok(), "accepted a series over the limits");
        // The label set must survive the storage key encoding unchanged.
        let decoded = Labels::decode(&s.labels.to_bytes());
        assert!(decoded.as_ref().is_ok_and(|l| *l == s.labels), "labels do not round-trip: {}", s.labels);
        for p in &s.samples {
            assert!(check_timestamp(p.timestamp_ms).is_ok(), "accepted timestamp {}", p.timestamp_ms);
        }
    }
}

/// The JSON-lines import decoder.
pub fn import_lines(data: &[u8]) {
    let limits = SeriesLimits::default();
    if let Ok(batch) = decode_lines(data, limits) {
        check_batch(&batch, limits.max_labels, limits.max_label_bytes);
    }
}

/// InfluxDB line protocol: every precision, with and without a `db`; a decoded batch must
/// pass validation and the reservations must cover what it holds.
pub fn influx_lines(data: &[u8]) {
    use saltdb::ingest::influx::{decode, Options, Precision};
    let limits = SeriesLimits::default();
    for (precision, db) in [(Precision::Nanoseconds, None), (Precision::Hours, Some("db".to_owned()))] {
        let opts = Options { precision, db, now_ms: 1_700_000_000_000, limits };
        let mut reserved = 0usize;
        if let Ok(d) = decode(data, &opts, &mut |n| {
            reserved += n;
            Ok::<(), ()>(())
        }) {
            let batch = d.batch.unpack().expect("the builder writes canonical label bytes");
            check_batch(&batch, limits.max_labels, limits.max_label_bytes);
            check_reserved(&batch, reserved);
        }
    }
}

/// OpenTSDB `/api/put` bodies.
pub fn opentsdb_put(data: &[u8]) {
    let limits = SeriesLimits::default();
    let mut reserved = 0usize;
    match saltdb::ingest::opentsdb::decode(data, limits, &mut |n| {
        reserved += n;
        Ok::<(), ()>(())
    }) {
        Ok(d) => {
            let batch = d.batch.unpack().expect("the builder writes canonical label bytes");
            check_batch(&batch, limits.max_labels, limits.max_label_bytes);
            check_reserved(&batch, reserved);
        }
        Err(saltdb::ingest::Stop::Invalid(r)) => {
            let _ = saltdb::ingest::opentsdb::point_json(data, &r);
        }
        Err(saltdb::ingest::Stop::Refused(())) => {}
    }
    // The scanner of the usual shape, and the serde path it falls back to, answer alike.
    let serde = saltdb::ingest::opentsdb::decode_serde(data, limits, &mut |_| Ok::<(), ()>(()));
    match (saltdb::ingest::opentsdb::decode(data, limits, &mut |_| Ok::<(), ()>(())), serde) {
        (Ok(a), Ok(b)) => assert!(a.batch == b.batch && a.points == b.points, "the scanner decoded another batch"),
        (Err(saltdb::ingest::Stop::Invalid(a)), Err(saltdb::ingest::Stop::Invalid(b))) => assert_eq!(a, b),
        (a, b) => panic!("the scanner answered {:?}, the serde path {:?}", a.err(), b.err()),
    }
}

/// Prometheus text exposition and OpenMetrics.
pub fn prometheus_text(data: &[u8]) {
    use saltdb::ingest::prom_text::{decode, Options};
    let limits = SeriesLimits::default();
    for openmetrics in [false, true] {
        let opts = Options { openmetrics, default_ms: 1_700_000_000_000, limits };
        let mut reserved = 0usize;
        if let Ok(packed) = decode(data, &opts, &mut |n| {
            reserved += n;
            Ok::<(), ()>(())
        }) {
            let batch = packed.unpack().expect("the builder writes canonical label bytes");
            check_batch(&batch, limits.max_labels, limits.max_label_bytes);
            check_reserved(&batch, reserved);
        }
    }
}

/// OTLP metrics requests (protobuf), with both name translations.
pub fn otlp_metrics(data: &[u8]) {
    use saltdb::ingest::otlp::{decode, Naming, Options};
    let limits = SeriesLimits::default();
    for naming in [Naming::UnderscoreEscapingWithSuffixes, Naming::KeepUtf8] {
        let opts = Options { naming, limits };
        let mut reserved = 0usize;
        if let Ok(packed) = decode(data, &opts, &mut |n| {
            reserved += n;
            Ok::<(), ()>(())
        }) {
            let batch = packed.unpack().expect("the builder writes canonical label bytes");
            check_batch(&batch, limits.max_labels, limits.max_label_bytes);
            check_reserved(&batch, reserved);
        }
    }
}

/// The memory a decoder reserved covers at least the samples and label text it kept.
fn check_reserved(batch: &WriteBatch, reserved: usize) {
    let held: usize = batch
        .series
        .iter()
        .map(|s| {
            s.samples.len() * std::mem::size_of::<Sample>()
                + s.labels.iter().map(|l| l.name.len() + l.value.len()).sum::<usize>()
        })
        .sum();
    assert!(reserved >= held, "reserved {reserved} bytes for a batch holding {held}");
}

/// Engine limits small enough that an expensive query fails fast instead of timing out the
/// fuzzer.
fn engine() -> Engine {
    Engine::new(EngineOptions {
        lookback_ms: 300_000,
        max_samples: 1_000_000,
        max_scanned_samples: 10_000_000,
        max_memory_bytes: 256 << 20,
        timeout: Duration::from_secs(1),
        ..EngineOptions::default()
    })
}

/// Instant query time and range query bounds: 101 steps over the fixture.
const EVAL_AT_MS: i64 = 600_000;
const RANGE: (i64, i64, i64) = (0, 600_000, 6_000);

fn series(pairs: &[(&str, &str)], samples: Vec<Sample>) -> SeriesSamples {
    match Labels::from_pairs(pairs.iter().copied()) {
        Ok(labels) => SeriesSamples { labels, samples, histograms: Vec::new() },
        Err(e) => panic!("fixture labels {pairs:?}: {e}"),
    }
}

/// `n` samples every `step` ms from `from`, valued `f(i)`.
fn regular(from: i64, step: i64, n: i64, f: impl Fn(i64) -> f64) -> Vec<Sample> {
    (0..n).map(|i| Sample::new(from + i * step, f(i))).collect()
}

/// A handful of series covering counters (with a reset), gauges with special values, classic
/// histogram buckets and a sparse series.
pub fn promql_fixture() -> MemQuerier {
    let stale = f64::from_bits(STALE_NAN_BITS);
    let specials = [1.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -0.0, stale, f64::MAX, f64::MIN_POSITIVE, -1e300];
    let mut out = vec![
        series(
            &[("__name__", "req_total"), ("job", "a"), ("instance", "1")],
            regular(0, 15_000, 61, |i| (i * 10) as f64),
        ),
        series(
            &[("__name__", "req_total"), ("job", "b"), ("instance", "2")],
            regular(7_000, 15_000, 61, |i| ((i % 25) * 3) as f64),
        ),
        series(
            &[("__name__", "gauge"), ("job", "a")],
            regular(0, 30_000, 31, |i| specials.get(i as usize % specials.len()).copied().unwrap_or(0.0)),
        ),
        series(&[("__name__", "up"), ("job", "a")], regular(0, 60_000, 11, |_| 1.0)),
        series(&[("__name__", "sparse"), ("job", "c")], vec![Sample::new(100_000, 5.0), Sample::new(590_000, -2.5)]),
    ];
    for (le, per) in [("0.1", 1.0), ("1", 3.0), ("10", 4.0), ("+Inf", 5.0)] {
        out.push(series(
            &[("__name__", "lat_bucket"), ("job", "a"), ("le", le)],
            regular(0, 30_000, 21, |i| i as f64 * per),
        ));
    }
    MemQuerier::new(out)
}

/// A PromQL query: parsed, then evaluated as an instant and a range query over
/// [`promql_fixture`].
pub fn promql(data: &[u8]) {
    let Ok(query) = std::str::from_utf8(data) else { return };
    if parse(query).is_err() {
        return;
    }
    let src = promql_fixture();
    let engine = engine();
    let _ = engine.instant(&src, query, EVAL_AT_MS);
    let (start, end, step) = RANGE;
    let _ = engine.range(&src, query, start, end, step);
}

/// Times at and past the edges of what the evaluator accepts: Prometheus' `@` bounds (an `i64` of
/// ms), the supported sample range, zero, and the first and last `i64`.
const EXTREME_MS: [i64; 10] = [
    0,
    EVAL_AT_MS,
    -1,
    saltdb::sample::MAX_TIMESTAMP_MS,
    9_223_372_036_854_775_000,
    -9_223_372_036_854_775_000,
    i64::MAX,
    i64::MIN,
    i64::MAX / 2,
    -86_400_000,
];

/// Durations as PromQL text: unit durations at and past the parser's and Prometheus' bounds
/// (292 years, `u32` counts), numbers of seconds (a numeric duration the parser would turn into
/// a `Duration` with `from_secs_f64`), and small everyday ones.
fn duration_text(b: &mut Bytes) -> String {
    const FIXED: [&str; 24] = [
        "1ms",
        "1s",
        "5m",
        "1h",
        "1d",
        "1w",
        "1y",
        "292y",
        "293y",
        "4294967295y",
        "4294967296ms",
        "9223372036854ms",
        "9223372036855ms",
        "300",
        "0.001",
        "1e9",
        "9223372036854",
        "1e20",
        "1e300",
        "Inf",
        "NaN",
        "0x7fffffffffffffff",
        "0",
        "106751991167d",
    ];
    match b.u8() % 4 {
        0 | 1 => FIXED.get(usize::from(b.u8()) % FIXED.len()).copied().unwrap_or("1s").to_owned(),
        2 => {
            format!("{}{}", b.u16(), ["ms", "s", "m", "h", "d", "w", "y"].get(usize::from(b.u8() % 7)).unwrap_or(&"s"))
        }
        _ => format!("{}", f64::from_bits(b.u64()).abs()),
    }
}

/// An `@` time as PromQL text (seconds): the extremes, `start()`/`end()`, or any `f64`.
fn at_text(b: &mut Bytes) -> String {
    match b.u8() % 4 {
        0 => "start()".to_owned(),
        1 => "end()".to_owned(),
        2 => {
            format!("{}", EXTREME_MS.get(usize::from(b.u8()) % EXTREME_MS.len()).copied().unwrap_or(0) as f64 / 1000.0)
        }
        _ => format!("{:e}", f64::from_bits(b.u64())),
    }
}

/// Optional `offset` and `@` modifiers.
fn modifiers(b: &mut Bytes) -> String {
    let tag = b.u8();
    let mut out = String::new();
    if tag & 1 != 0 {
        out.push_str(&format!(" offset {}{}", if tag & 2 != 0 { "-" } else { "" }, duration_text(b)));
    }
    if tag & 4 != 0 {
        out.push_str(&format!(" @ {}", at_text(b)));
    }
    out
}

/// A query built from the bytes: selectors over [`promql_fixture`], range selectors and
/// subqueries with extreme durations, offsets and `@` times, under rollups, aggregations and
/// binary operators, at most `depth` levels deep.
fn time_query(b: &mut Bytes, depth: u8) -> String {
    const SELECTORS: [&str; 4] = ["req_total", "gauge", "missing", "lat_bucket"];
    const ROLLUPS: [&str; 6] = ["rate", "max_over_time", "count_over_time", "increase", "deriv", "last_over_time"];
    let pick = |b: &mut Bytes, xs: &[&'static str]| xs.get(usize::from(b.u8()) % xs.len()).copied().unwrap_or("up");
    let leaf = |b: &mut Bytes| format!("{}{}", pick(b, &SELECTORS), modifiers(b));
    if depth == 0 || b.0.is_empty() {
        return leaf(b);
    }
    match b.u8() % 8 {
        0 => leaf(b),
        1 => format!("{}({}[{}]{})", pick(b, &ROLLUPS), pick(b, &SELECTORS), duration_text(b), modifiers(b)),
        2 | 3 => {
            let inner = time_query(b, depth - 1);
            let step = if b.u8().is_multiple_of(3) { String::new() } else { duration_text(b) };
            format!("{}(({})[{}:{}]{})", pick(b, &ROLLUPS), inner, duration_text(b), step, modifiers(b))
        }
        4 => format!("sum by (job) ({})", time_query(b, depth - 1)),
        5 => format!("({}) + on() group_left {}", time_query(b, depth - 1), time_query(b, depth - 1)),
        6 => format!("timestamp({})", time_query(b, depth - 1)),
        _ => format!("vector(time()) - scalar({})", time_query(b, depth - 1)),
    }
}

/// PromQL that reaches evaluation with extreme times: a query built by [`time_query`] (so most
/// inputs parse), evaluated as an instant query at an extreme time and as a range query with
/// extreme bounds and steps. Evaluation may fail, but a panic (wrapping arithmetic is one under
/// `cargo fuzz -a`) or a query that runs into the evaluation timeout instead of being refused
/// is a finding.
pub fn promql_times(data: &[u8]) {
    let TimeCase { query, at, start, end, step } = time_case(data);
    if parse(&query).is_err() {
        return;
    }
    let src = promql_fixture();
    let engine = Engine::new(EngineOptions {
        lookback_ms: 300_000,
        max_samples: 1_000_000,
        max_scanned_samples: 10_000_000,
        max_memory_bytes: 256 << 20,
        timeout: Duration::from_secs(5),
        ..EngineOptions::default()
    });
    let timed_out = |r: Result<saltdb::promql::QueryResult, EvalError>| matches!(r, Err(EvalError::Timeout(_)));
    assert!(!timed_out(engine.instant(&src, &query, at)), "instant {query:?} at {at} ran into the timeout");
    assert!(
        !timed_out(engine.range(&src, &query, start, end, step)),
        "range {query:?} from {start} to {end} step {step} ran into the timeout"
    );
}

/// What [`promql_times`] evaluates for one input.
#[derive(Debug)]
pub struct TimeCase {
    /// The query text.
    pub query: String,
    /// Instant query time, ms.
    pub at: i64,
    /// Range query start, end and step, ms.
    pub start: i64,
    /// See `start`.
    pub end: i64,
    /// See `start`.
    pub step: i64,
}

/// Decodes one [`promql_times`] input: the instant time, the range, then the query.
pub fn time_case(data: &[u8]) -> TimeCase {
    let mut b = Bytes(data);
    let at = EXTREME_MS.get(usize::from(b.u8()) % EXTREME_MS.len()).copied().unwrap_or(0);
    let start = EXTREME_MS.get(usize::from(b.u8()) % EXTREME_MS.len()).copied().unwrap_or(0);
    let span = match b.u8() % 4 {
        0 => 0,
        1 => 600_000,
        2 => i64::from(b.u16()) * 60_000,
        _ => b.u64() as i64,
    };
    let step = match b.u8() % 4 {
        0 => 1,
        1 => 6_000,
        2 => i64::from(b.u16()) + 1,
        _ => b.u64() as i64,
    };
    let query = time_query(&mut b, 3);
    TimeCase { query, at, start, end: start.saturating_add(span), step }
}

/// Chunk decoding of arbitrary bytes: never panics, and a successful decode yields exactly the
/// sample count of the header.
pub fn chunk_decode(data: &[u8]) {
    let mut out = Vec::new();
    if chunk::decode(data, &mut out).is_ok() {
        let n = data.get(3..7).and_then(|b| <[u8; 4]>::try_from(b).ok()).map(u32::from_le_bytes);
        assert_eq!(
            Some(out.len()),
            n.map(|n| n as usize),
            "decoded a different number of samples than the header says"
        );
    }
}

/// Histogram chunk decoding of arbitrary bytes: never panics; a successful decode yields the
/// header's sample count, and encoding the samples again decodes to the same samples bit for
/// bit.
pub fn histogram_chunk(data: &[u8]) {
    use saltdb::histogram::chunk as histogram_chunk;
    let Ok(samples) = histogram_chunk::decode(data) else { return };
    assert_eq!(
        histogram_chunk::sample_count(data).ok(),
        Some(samples.len()),
        "decoded a different number of samples than the header says"
    );
    let mut again = Vec::new();
    histogram_chunk::encode(&samples, &mut again).expect("decoded samples must encode");
    let back = histogram_chunk::decode(&again).expect("an encoded chunk must decode");
    assert_eq!(back.len(), samples.len());
    for ((t, h), (wt, wh)) in back.iter().zip(&samples) {
        assert!(t == wt && h.identical(wh), "re-encoded sample differs: {h:?} vs {wh:?}");
    }
}

/// Reads bytes off the front of the fuzz input; zeros once it runs out.
struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn u8(&mut self) -> u8 {
        let (&b, rest) = self.0.split_first().unwrap_or((&0, &[]));
        self.0 = rest;
        b
    }

    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }

    fn u64(&mut self) -> u64 {
        let mut b = [0u8; 8];
        for x in &mut b {
            *x = self.u8();
        }
        u64::from_le_bytes(b)
    }
}

/// Builds a strictly ascending run of samples from the bytes. Layout: zstd level byte (1..=9), first
/// timestamp (8 bytes), then per sample a tag byte: bits 0-1 pick the timestamp delta (repeat the
/// previous delta, 1 + byte, 1 + u16, 1 + u64), bits 2-3 the value (repeat, short decimal i16 /
/// 10^(bits 4-6), raw f64 bits, special value), followed by the bytes they need.
pub fn samples_from_bytes(data: &[u8]) -> (i32, Vec<Sample>) {
    let mut b = Bytes(data);
    // Levels 1..=9: saltdb seals chunks at level 3 (`storage::format::chunk::ZSTD_LEVEL`, with the codec's
    // minimum match of 7). Levels from 11 on inputs as small as chunk byte planes, and 16 and up on
    // any input (zstd's btopt/btultra search) trip an AddressSanitizer stack-use-after-scope report
    // inside zstd-sys' C code (`ZSTD_selectBtGetAllMatches`) that saltdb never reaches.
    let level = i32::from(b.u8() % 9) + 1;
    let mut t = b.u64() as i64;
    let mut v = 0.0f64;
    let mut delta = 15_000i64;
    let mut out = Vec::new();
    const SPECIALS: [f64; 10] =
        [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -0.0, 0.0, f64::MAX, f64::MIN, f64::MIN_POSITIVE, 0.1, -1.0];
    loop {
        let tag = b.u8();
        if !out.is_empty() {
            let d = match tag & 3 {
                0 => delta,
                1 => 1 + i64::from(b.u8()),
                2 => 1 + i64::from(b.u16()),
                _ => (b.u64() >> 2) as i64 + 1,
            };
            let Some(next) = t.checked_add(d) else { break };
            (t, delta) = (next, d);
        }
        v = match (tag >> 2) & 3 {
            0 => v,
            1 => f64::from(b.u16() as i16) / 10f64.powi(i32::from((tag >> 4) & 7)),
            2 => f64::from_bits(b.u64()),
            _ => match b.u8() {
                0 => f64::from_bits(STALE_NAN_BITS),
                x => SPECIALS.get(usize::from(x) % SPECIALS.len()).copied().unwrap_or(0.0),
            },
        };
        out.push(Sample::new(t, v));
        if b.0.is_empty() {
            break;
        }
    }
    (level, out)
}

/// Encode then decode a run of samples built from the bytes: the samples must come back exactly,
/// timestamps and value bit patterns (NaN payloads, staleness markers, -0.0) alike.
pub fn chunk_roundtrip(data: &[u8]) {
    let (level, samples) = samples_from_bytes(data);
    let mut buf = Vec::new();
    if let Err(e) = chunk::encode(&samples, level, &mut buf) {
        panic!("encoding {} sorted samples failed: {e}", samples.len());
    }
    let mut out = Vec::new();
    if let Err(e) = chunk::decode(&buf, &mut out) {
        panic!("decoding a freshly encoded chunk failed: {e}");
    }
    let bits = |s: &[Sample]| s.iter().map(|p| (p.timestamp_ms, p.value.to_bits())).collect::<Vec<_>>();
    assert_eq!(bits(&out), bits(&samples), "chunk round trip changed the samples");
}

/// A ClickHouse `RowBinary` answer (network bytes) read the way the ClickHouse backend reads
/// its three row shapes: samples `(UInt64, Int64, UInt64)`, series `(UInt64, UInt16,
/// Array(String), Array(String))` and strings. Errors are expected; a panic is not.
pub fn clickhouse_rowbinary(data: &[u8]) {
    use saltdb::clickhouse::rowbinary::Reader;
    let Some((&shape, rest)) = data.split_first() else { return };
    let mut r = Reader::new(rest);
    while !r.is_empty() {
        let ok = match shape % 3 {
            0 => r.u64().and_then(|_| r.i64()).and_then(|_| r.u64()).is_ok(),
            1 => r.u64().and_then(|_| r.u16()).and_then(|_| r.strings()).and_then(|_| r.strings()).is_ok(),
            _ => r.str().is_ok(),
        };
        if !ok {
            break;
        }
    }
}
