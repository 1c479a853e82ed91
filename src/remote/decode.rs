//! Remote-write request bodies -> [`PackedBatch`]: snappy block decompression with a size limit
//! checked before allocating, protobuf decoding (1.0 and 2.0), and the label and timestamp
//! checks remote-write needs on top of [`Labels::from_pairs`].
//!
//! A request is accepted or rejected as a whole: one bad series (bad labels, a timestamp out of
//! range, an invalid native histogram) rejects the request, so nothing is ever partially applied.
//! Float samples and native histograms (integer and float forms, every schema, custom buckets
//! included; see [`crate::remote::histogram`]) and exemplars go into the batch. An invalid
//! exemplar does not fail the request (Prometheus logs and drops it): it is left out and
//! counted in [`Decoded::exemplars_dropped`].

use std::convert::Infallible;

use crate::labels::{is_storable_label_name, LabelError, Labels, METRIC_NAME};
use crate::remote::footprint::Footprint;
use crate::remote::histogram::{self, HistogramProblem};
use crate::remote::known_labels::KnownLabels;
use crate::remote::metadata::MetricMetadata;
use crate::remote::proto::{self, MetricType};
use crate::remote::scan::scan_v1_granted;
use crate::sample::{
    check_timestamp, Exemplar, HistogramSample, PackedBatch, Sample, StartTimestamp, TimestampOutOfRange,
    MAX_EXEMPLAR_LABEL_CHARS,
};
use prost::Message;
use std::sync::Arc;

/// Which remote-write protocol a body is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// Remote-Write 1.0, `prometheus.WriteRequest`.
    V1,
    /// Remote-Write 2.0, `io.prometheus.write.v2.Request`.
    V2,
}

/// Bounds applied while decoding untrusted bodies.
#[derive(Clone, Copy, Debug)]
pub struct DecodeLimits {
    /// Largest accepted decompressed body, in bytes.
    pub max_decoded_bytes: usize,
    /// Most labels one series may carry.
    pub max_labels: usize,
    /// Longest accepted label name or value, in bytes.
    pub max_label_len: usize,
    /// Most series one request may carry (`--max-series-per-request`).
    pub max_series: usize,
}

impl Default for DecodeLimits {
    fn default() -> Self {
        Self { max_decoded_bytes: 64 << 20, max_labels: 256, max_label_len: 32 << 10, max_series: 1_000_000 }
    }
}

/// A decoded, fully validated remote-write request.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Decoded {
    /// The float samples and native histograms, validated, ready for storage.
    pub batch: PackedBatch,
    /// Metric metadata carried by the request.
    pub metadata: Vec<MetricMetadata>,
    /// Exemplars of the request left out of the batch, as Prometheus drops them without
    /// failing the request: labels that are not a valid label set or longer than
    /// [`MAX_EXEMPLAR_LABEL_CHARS`] characters, or a timestamp out of range. The others are in
    /// the batch (storage still drops out-of-order and duplicate ones).
    pub exemplars_dropped: usize,
}

/// Why a remote-write body was rejected. Every variant is the sender's fault (HTTP 400).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The snappy header announces more bytes than allowed.
    #[error("snappy body decompresses to {len} bytes, more than the limit of {limit} bytes")]
    TooLarge {
        /// Decompressed length announced by the body.
        len: usize,
        /// Configured limit.
        limit: usize,
    },
    /// Not a valid snappy block (remote-write uses the block format, not the framed one).
    #[error("invalid snappy block format body: {0}")]
    Snappy(#[source] snap::Error),
    /// Not a valid protobuf message of the expected type.
    #[error("invalid protobuf {message}: {source}")]
    Protobuf {
        /// The message type expected.
        message: &'static str,
        /// What prost reported (includes the field path, e.g. invalid UTF-8 in `Label.value`).
        #[source]
        source: prost::DecodeError,
    },
    /// A label problem in one series.
    #[error("series #{index} {series}: {problem}")]
    Series {
        /// Position of the series in the request.
        index: usize,
        /// The series' labels as sent (truncated).
        series: String,
        /// What was wrong.
        problem: SeriesProblem,
    },
    /// A sample with a timestamp out of range.
    #[error("series #{index} {series}: {source}")]
    Timestamp {
        /// Position of the series in the request.
        index: usize,
        /// The series' labels (truncated).
        series: String,
        /// The offending timestamp.
        #[source]
        source: TimestampOutOfRange,
    },
    /// A remote-write 2.0 symbol reference problem.
    #[error("remote-write 2.0 series #{index}: {problem}")]
    Symbols {
        /// Position of the series in the request.
        index: usize,
        /// What was wrong.
        problem: String,
    },
    /// More series than `--max-series-per-request` allows.
    #[error("request has {count} series, more than the limit of {limit} set by --max-series-per-request")]
    TooManySeries {
        /// Series in the request.
        count: usize,
        /// Configured limit.
        limit: usize,
    },
    /// Remote-write 2.0 symbol references that expand to more label and metadata text than a
    /// body may hold: a few bytes of references can each point at the same huge symbol.
    #[error("remote-write 2.0 request: its symbol references expand to more than {limit} bytes of labels and metadata (the --max-request-bytes limit)")]
    ExpandsTooMuch {
        /// The limit in bytes.
        limit: usize,
    },
    /// An invalid native histogram sample.
    #[error("series #{index} {series}: native histogram #{sample} (timestamp {timestamp_ms}): {problem}")]
    Histogram {
        /// Position of the series in the request.
        index: usize,
        /// The series' labels (truncated).
        series: String,
        /// Position of the histogram in the series.
        sample: usize,
        /// Its timestamp.
        timestamp_ms: i64,
        /// What was wrong (boxed: it is the largest of the errors).
        problem: Box<HistogramProblem>,
    },
}

/// A rejected request: why, and how many samples it held (0 when the body did not decode), so the
/// caller can count them.
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
pub struct Rejection {
    /// What was wrong.
    #[source]
    pub error: DecodeError,
    /// Samples in the request: float samples plus native histogram samples.
    pub samples: usize,
}

impl From<DecodeError> for Rejection {
    fn from(error: DecodeError) -> Self {
        Self { error, samples: 0 }
    }
}

/// A label-set problem of one series.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SeriesProblem {
    /// Names must be sorted ascending, as the remote-write spec requires.
    #[error("label names are not sorted: {before:?} comes before {after:?}")]
    Unsorted {
        /// The earlier name.
        before: String,
        /// The later, smaller name.
        after: String,
    },
    /// A label with an empty name.
    #[error("empty label name")]
    EmptyName,
    /// Rejected by the shared label validation.
    #[error("{0}")]
    Label(#[from] LabelError),
}

impl DecodeError {
    /// Short machine-friendly reason, used as the `reason` label of rejection metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::TooLarge { .. } => "too_large",
            Self::Snappy(_) => "invalid_snappy",
            Self::Protobuf { .. } => "invalid_protobuf",
            Self::Series { problem, .. } => match problem {
                SeriesProblem::Unsorted { .. } => "unsorted_labels",
                SeriesProblem::EmptyName => "empty_label_name",
                SeriesProblem::Label(LabelError::DuplicateName(_)) => "duplicate_label",
                SeriesProblem::Label(LabelError::MissingMetricName) => "missing_metric_name",
                SeriesProblem::Label(LabelError::TooManyLabels { .. } | LabelError::TooLong { .. }) => "label_limit",
                SeriesProblem::Label(_) => "invalid_label",
            },
            Self::Timestamp { .. } => "timestamp_out_of_range",
            Self::Symbols { .. } => "invalid_symbol_ref",
            Self::TooManySeries { .. } => "too_many_series",
            Self::ExpandsTooMuch { .. } => "expansion_too_large",
            Self::Histogram { .. } => "invalid_histogram",
        }
    }
}

/// Why [`decode_write_reserving`] stopped: the body is bad, or the caller's memory budget
/// refused a step.
#[derive(Debug)]
pub enum Stopped<E> {
    /// The body was rejected (the sender's fault).
    Rejected(Rejection),
    /// The budget refused the bytes the next step needed.
    Refused(E),
}

impl<E> From<Rejection> for Stopped<E> {
    fn from(r: Rejection) -> Self {
        Self::Rejected(r)
    }
}

impl<E> From<DecodeError> for Stopped<E> {
    fn from(e: DecodeError) -> Self {
        Self::Rejected(e.into())
    }
}

/// Asks a memory budget for bytes before an allocation step.
pub type Reserve<'a, E> = &'a mut dyn FnMut(usize) -> Result<(), E>;

/// The result of a decode under a budget that never refuses.
fn unbudgeted<T>(r: Result<T, Stopped<Infallible>>) -> Result<T, Rejection> {
    r.map_err(|s| match s {
        Stopped::Rejected(r) => r,
        Stopped::Refused(never) => match never {},
    })
}

/// Decompresses a snappy block, refusing bodies whose announced length exceeds `limit`
/// before any allocation.
///
/// # Errors
/// [`DecodeError::TooLarge`] or [`DecodeError::Snappy`].
pub fn decompress(body: &[u8], limit: usize) -> Result<Vec<u8>, DecodeError> {
    decompress_reserving(body, limit, &mut |_| Ok::<(), Infallible>(())).map_err(|s| match s {
        Stopped::Rejected(r) => r.error,
        Stopped::Refused(never) => match never {},
    })
}

fn decompress_reserving<E>(body: &[u8], limit: usize, reserve: Reserve<'_, E>) -> Result<Vec<u8>, Stopped<E>> {
    let len = snap::raw::decompress_len(body).map_err(DecodeError::Snappy)?;
    if len > limit {
        return Err(DecodeError::TooLarge { len, limit }.into());
    }
    reserve(len).map_err(Stopped::Refused)?;
    let mut out = vec![0u8; len];
    let n = snap::raw::Decoder::new().decompress(body, &mut out).map_err(DecodeError::Snappy)?;
    out.truncate(n);
    Ok(out)
}

/// Decodes a snappy-compressed remote-write body of the given protocol.
///
/// # Errors
/// A [`Rejection`] describing the first problem found.
pub fn decode_write(body: &[u8], protocol: Protocol, limits: &DecodeLimits) -> Result<Decoded, Rejection> {
    unbudgeted(decode_write_reserving(body, protocol, limits, &mut |_| Ok(())))
}

/// [`decode_write`], asking `reserve` for the memory of each step before the step allocates it:
/// the decompressed body; the zero-copy scanner's batch, each time it grows; and, for bodies
/// the scanner leaves to prost, prost's messages and their batch, bounded from above by a walk
/// over the body ([`Footprint`]). A body's decoded size is not bounded by its wire size (an empty
/// `Sample` is 2 bytes and decodes to 16), so this is what keeps hostile bodies within budget.
///
/// # Errors
/// [`Stopped::Rejected`] for a bad body, [`Stopped::Refused`] with `reserve`'s error.
pub fn decode_write_reserving<E>(
    body: &[u8],
    protocol: Protocol,
    limits: &DecodeLimits,
    reserve: Reserve<'_, E>,
) -> Result<Decoded, Stopped<E>> {
    decode_write_known(body, protocol, limits, None, reserve)
}

/// [`decode_write_reserving`] with a cache of the label sets seen before ([`KnownLabels`]): the
/// result is the same, a repeated series is cheaper.
///
/// # Errors
/// As [`decode_write_reserving`].
pub fn decode_write_known<E>(
    body: &[u8],
    protocol: Protocol,
    limits: &DecodeLimits,
    known: Option<&KnownLabels>,
    reserve: Reserve<'_, E>,
) -> Result<Decoded, Stopped<E>> {
    let raw = decompress_reserving(body, limits.max_decoded_bytes, reserve)?;
    match protocol {
        Protocol::V1 => decode_v1_reserving(&raw, limits, known, reserve),
        Protocol::V2 => decode_v2_reserving(&raw, limits, reserve),
    }
}

/// Decodes an uncompressed `prometheus.WriteRequest`: plain float series through the zero-copy
/// scanner ([`crate::remote::scan::scan_v1`]), anything else (metadata, exemplars, histograms,
/// any error) through [`decode_v1_reference`], so results and error messages are those of the
/// reference decoder.
///
/// # Errors
/// A [`Rejection`] describing the first problem found.
pub fn decode_v1(raw: &[u8], limits: &DecodeLimits) -> Result<Decoded, Rejection> {
    unbudgeted(decode_v1_reserving(raw, limits, None, &mut |_| Ok(())))
}

fn decode_v1_reserving<E>(
    raw: &[u8],
    limits: &DecodeLimits,
    known: Option<&KnownLabels>,
    reserve: Reserve<'_, E>,
) -> Result<Decoded, Stopped<E>> {
    // The scanner reserves its batch as it grows; prost's messages are bounded by a walk first.
    let mut refused = None;
    let scanned = scan_v1_granted(raw, limits, known, &mut |bytes| match reserve(bytes) {
        Ok(()) => true,
        Err(e) => {
            refused = Some(e);
            false
        }
    });
    if let Some(e) = refused {
        return Err(Stopped::Refused(e));
    }
    if let Some(batch) = scanned {
        return Ok(Decoded { batch, ..Decoded::default() });
    }
    let footprint = Footprint::of_v1(raw);
    check_series_count(&footprint, limits)?;
    reserve(footprint.prost_bytes.saturating_add(footprint.batch_bytes(footprint.label_bytes)))
        .map_err(Stopped::Refused)?;
    Ok(reference_v1(raw, limits, &footprint)?)
}

/// Decodes an uncompressed `prometheus.WriteRequest` with prost into owned messages, then checks
/// them: the reference [`crate::remote::scan::scan_v1`] is tested against, and the decoder of
/// every request the scanner leaves alone.
///
/// # Errors
/// A [`Rejection`] describing the first problem found.
pub fn decode_v1_reference(raw: &[u8], limits: &DecodeLimits) -> Result<Decoded, Rejection> {
    let footprint = Footprint::of_v1(raw);
    check_series_count(&footprint, limits)?;
    reference_v1(raw, limits, &footprint)
}

fn reference_v1(raw: &[u8], limits: &DecodeLimits, footprint: &Footprint) -> Result<Decoded, Rejection> {
    let req = proto::WriteRequest::decode(raw)
        .map_err(|source| DecodeError::Protobuf { message: "prometheus.WriteRequest", source })?;
    let samples = req.timeseries.iter().map(|t| t.samples.len() + t.histograms.len()).sum();
    let reject = |error| Rejection { error, samples };
    let mut out = Decoded {
        batch: PackedBatch::sized(footprint.series, footprint.samples, footprint.label_bytes),
        ..Decoded::default()
    };
    for (index, ts) in req.timeseries.into_iter().enumerate() {
        // The exemplars' label strings move out of prost's messages (nothing is copied beyond
        // what the reservation counted for those).
        let received = ts.exemplars.len();
        let exemplars: Vec<Exemplar> = ts
            .exemplars
            .into_iter()
            .filter_map(|e| exemplar(e.labels.into_iter().map(|l| (l.name, l.value)).collect(), e.value, e.timestamp))
            .collect();
        out.exemplars_dropped += received - exemplars.len();
        let pairs: Vec<(String, String)> = ts.labels.into_iter().map(|l| (l.name, l.value)).collect();
        push_series(&mut out.batch, index, pairs, (&ts.samples, &ts.histograms, exemplars), limits).map_err(reject)?;
    }
    out.metadata = req
        .metadata
        .into_iter()
        .filter(|m| !m.metric_family_name.is_empty())
        .map(|m| MetricMetadata {
            metric: m.metric_family_name,
            kind: MetricType::try_from(m.r#type).unwrap_or(MetricType::Unknown),
            help: m.help,
            unit: m.unit,
        })
        .collect();
    Ok(out)
}

/// Decodes an uncompressed `io.prometheus.write.v2.Request`.
///
/// # Errors
/// A [`Rejection`] describing the first problem found.
pub fn decode_v2(raw: &[u8], limits: &DecodeLimits) -> Result<Decoded, Rejection> {
    unbudgeted(decode_v2_reserving(raw, limits, &mut |_| Ok(())))
}

fn decode_v2_reserving<E>(raw: &[u8], limits: &DecodeLimits, reserve: Reserve<'_, E>) -> Result<Decoded, Stopped<E>> {
    let footprint = Footprint::of_v2(raw);
    check_series_count(&footprint, limits)?;
    reserve(footprint.prost_bytes).map_err(Stopped::Refused)?;
    let req = proto::v2::Request::decode(raw)
        .map_err(|source| DecodeError::Protobuf { message: "io.prometheus.write.v2.Request", source })?;
    let samples = req.timeseries.iter().map(|t| t.samples.len() + t.histograms.len()).sum();
    let reject = |error| Rejection { error, samples };
    // The text the symbol references expand to, reserved before it is copied out. References
    // out of range count nothing here: the decode below rejects them.
    let text = expanded_text(&req);
    if text > limits.max_decoded_bytes {
        return Err(reject(DecodeError::ExpandsTooMuch { limit: limits.max_decoded_bytes }).into());
    }
    reserve(footprint.batch_bytes(text)).map_err(Stopped::Refused)?;
    Ok(decode_v2_series(&req, limits, PackedBatch::sized(footprint.series, footprint.samples, text)).map_err(reject)?)
}

/// Bytes an exemplar of the batch takes besides its label text: the [`Exemplar`] in the batch's
/// vector (which may double) and its label set's shared allocation.
const EXEMPLAR_BYTES: usize = 2 * std::mem::size_of::<Exemplar>() + 64;

/// Bytes of label and metadata text a 2.0 request's references expand to, with a separator per
/// label name and value (the canonical encoding's), and of the exemplars built from them.
fn expanded_text(req: &proto::v2::Request) -> usize {
    let len = |r: &u32| req.symbols.get(*r as usize).map_or(0, |s| s.len() + 1);
    req.timeseries
        .iter()
        .map(|ts| {
            let meta = ts.metadata.as_ref().map_or(0, |m| len(&m.help_ref) + len(&m.unit_ref));
            // Exemplars: their label text, and a label set's headers for each.
            let exemplars: usize = ts
                .exemplars
                .iter()
                .map(|e| EXEMPLAR_BYTES + e.labels_refs.iter().map(len).sum::<usize>() + e.labels_refs.len() / 2 * 48)
                .sum();
            ts.labels_refs.iter().map(len).sum::<usize>() + meta + exemplars
        })
        .fold(0usize, usize::saturating_add)
}

fn decode_v2_series(
    req: &proto::v2::Request,
    limits: &DecodeLimits,
    batch: PackedBatch,
) -> Result<Decoded, DecodeError> {
    if req.symbols.first().is_some_and(|s| !s.is_empty()) {
        return Err(DecodeError::Symbols { index: 0, problem: "symbols[0] must be the empty string".into() });
    }
    let symbol = |index: usize, r: u32| -> Result<&String, DecodeError> {
        req.symbols.get(r as usize).ok_or_else(|| DecodeError::Symbols {
            index,
            problem: format!("symbol reference {r} is out of range (the table has {} symbols)", req.symbols.len()),
        })
    };
    let mut out = Decoded { batch, ..Decoded::default() };
    for (index, ts) in req.timeseries.iter().enumerate() {
        let mut exemplars = Vec::with_capacity(ts.exemplars.len());
        for e in &ts.exemplars {
            let mut pairs = Vec::with_capacity(e.labels_refs.len() / 2);
            for pair in e.labels_refs.chunks(2) {
                match pair {
                    [n, v] => pairs.push((symbol(index, *n)?.clone(), symbol(index, *v)?.clone())),
                    _ => pairs.push((String::new(), String::new())),
                }
            }
            match exemplar(pairs, e.value, e.timestamp) {
                Some(x) => exemplars.push(x),
                None => out.exemplars_dropped += 1,
            }
        }
        if ts.labels_refs.len() % 2 != 0 {
            return Err(DecodeError::Symbols {
                index,
                problem: format!("labels_refs has odd length {}; it must hold name/value pairs", ts.labels_refs.len()),
            });
        }
        // The count limit is checked before anything is copied, so a million references cost
        // nothing but the check.
        let count = ts.labels_refs.len() / 2;
        if count > limits.max_labels {
            let problem = LabelError::TooManyLabels { count, limit: limits.max_labels }.into();
            return Err(DecodeError::Series { index, series: format!("{{{count} labels}}"), problem });
        }
        let mut pairs = Vec::with_capacity(count);
        for pair in ts.labels_refs.chunks_exact(2) {
            if let [n, v] = pair {
                let (n, v) = (symbol(index, *n)?, symbol(index, *v)?);
                pairs.push((n.clone(), v.clone()));
            }
        }
        let name = pairs.iter().find(|(n, _)| n == METRIC_NAME).map(|(_, v)| v.clone());
        let series = (&ts.samples[..], &ts.histograms[..], exemplars);
        push_series_started(&mut out.batch, index, pairs, series, ts.created_timestamp, limits)?;
        if let (Some(md), Some(metric)) = (&ts.metadata, name) {
            let kind = MetricType::try_from(md.r#type).unwrap_or(MetricType::Unknown);
            let (help, unit) = (symbol(index, md.help_ref)?, symbol(index, md.unit_ref)?);
            let (help, unit) = (help.clone(), unit.clone());
            if kind != MetricType::Unknown || !help.is_empty() || !unit.is_empty() {
                out.metadata.push(MetricMetadata { metric, kind, help, unit });
            }
        }
    }
    Ok(out)
}

/// A received exemplar, checked as Prometheus checks it: `None` (dropped without failing the
/// request) when its labels are not a valid label set (empty values are dropped first, as for
/// series), their names and values are longer than [`MAX_EXEMPLAR_LABEL_CHARS`] characters in
/// all, or its timestamp is out of range.
fn exemplar(pairs: Vec<(String, String)>, value: f64, timestamp_ms: i64) -> Option<Exemplar> {
    let chars: usize = pairs.iter().map(|(n, v)| n.chars().count() + v.chars().count()).sum();
    if chars > MAX_EXEMPLAR_LABEL_CHARS || check_timestamp(timestamp_ms).is_err() {
        return None;
    }
    let pairs: Vec<(String, String)> = pairs.into_iter().filter(|(_, v)| !v.is_empty()).collect();
    let labels = Labels::from_pairs(pairs).ok()?;
    Some(Exemplar { labels, value, timestamp_ms })
}

/// Fails when a request has more series than allowed: checked on the walk, before prost
/// allocates a struct per series.
fn check_series_count(footprint: &Footprint, limits: &DecodeLimits) -> Result<(), Rejection> {
    let count = footprint.series;
    if count > limits.max_series {
        let error = DecodeError::TooManySeries { count, limit: limits.max_series };
        return Err(Rejection { error, samples: footprint.samples.saturating_add(footprint.histograms) });
    }
    Ok(())
}

/// Validates one series and appends it to the batch with its float samples and native
/// histograms (a series with neither is skipped, after validation, so a bad label set is
/// reported even on an empty series).
fn push_series(
    batch: &mut PackedBatch,
    index: usize,
    pairs: Vec<(String, String)>,
    series: (&[proto::Sample], &[proto::Histogram], Vec<Exemplar>),
    limits: &DecodeLimits,
) -> Result<(), DecodeError> {
    push_series_started(batch, index, pairs, series, 0, limits)
}

/// [`push_series`] where `created_ms`, unless 0, is the start timestamp of every sample
/// (remote-write 2.0's `TimeSeries.created_timestamp`).
fn push_series_started(
    batch: &mut PackedBatch,
    index: usize,
    pairs: Vec<(String, String)>,
    (samples, histograms, exemplars): (&[proto::Sample], &[proto::Histogram], Vec<Exemplar>),
    created_ms: i64,
    limits: &DecodeLimits,
) -> Result<(), DecodeError> {
    if let Err(problem) = validate_labels(&pairs, limits) {
        return Err(DecodeError::Series { index, series: render(&pairs), problem });
    }
    // Everything `from_pairs` checks was checked above by reference, so the owned strings can
    // move into the label set without copies.
    let labels = Labels::from_pairs(pairs).map_err(|e| DecodeError::Series {
        index,
        series: String::from("{}"),
        problem: e.into(),
    })?;
    if samples.is_empty() && histograms.is_empty() && exemplars.is_empty() {
        return Ok(());
    }
    let times = samples.iter().map(|s| s.timestamp).chain(histograms.iter().map(|h| h.timestamp));
    if let Some(source) = times.map(check_timestamp).find_map(Result::err) {
        return Err(DecodeError::Timestamp { index, series: labels.to_string(), source });
    }
    // Built in place (no per-series vectors): labels, floats, then each histogram as it is
    // validated. On an error the request is rejected and the batch dropped whole.
    batch.abandon_series();
    for l in labels.iter() {
        batch.push_label(&l.name, &l.value);
    }
    for s in samples {
        batch.push_sample(Sample::new(s.timestamp, s.value));
    }
    for (sample, h) in histograms.iter().enumerate() {
        let histogram = histogram::from_proto(h).map_err(|problem| DecodeError::Histogram {
            index,
            series: labels.to_string(),
            sample,
            timestamp_ms: h.timestamp,
            problem: Box::new(problem),
        })?;
        batch.push_histogram(HistogramSample { timestamp_ms: h.timestamp, histogram: Arc::new(histogram) });
    }
    for e in exemplars {
        batch.push_exemplar(e);
    }
    if created_ms != 0 {
        let times = samples.iter().map(|s| s.timestamp).chain(histograms.iter().map(|h| h.timestamp));
        for timestamp_ms in times {
            batch.push_start(StartTimestamp { timestamp_ms, start_ms: created_ms });
        }
    }
    batch.finish_series();
    Ok(())
}

/// Every check a remote-write label set must pass, made on the pairs as sent: names non-empty,
/// valid and strictly ascending (which rules out duplicates), values free of 0x00, the limits,
/// and a non-empty `__name__`.
fn validate_labels(pairs: &[(String, String)], limits: &DecodeLimits) -> Result<(), SeriesProblem> {
    if pairs.len() > limits.max_labels {
        return Err(LabelError::TooManyLabels { count: pairs.len(), limit: limits.max_labels }.into());
    }
    let mut prev: Option<&str> = None;
    let mut has_name = false;
    for (name, value) in pairs {
        if name.is_empty() {
            return Err(SeriesProblem::EmptyName);
        }
        match prev {
            Some(p) if p == name => return Err(LabelError::DuplicateName(name.clone()).into()),
            Some(p) if p > name.as_str() => {
                return Err(SeriesProblem::Unsorted { before: p.to_owned(), after: name.clone() })
            }
            _ => {}
        }
        prev = Some(name);
        if !is_storable_label_name(name) {
            return Err(LabelError::InvalidName(name.clone()).into());
        }
        if value.as_bytes().contains(&0) {
            return Err(LabelError::NulInValue(name.clone()).into());
        }
        let len = name.len().max(value.len());
        if len > limits.max_label_len {
            let name = name.chars().take(64).collect();
            return Err(LabelError::TooLong { name, len, limit: limits.max_label_len }.into());
        }
        has_name |= name == METRIC_NAME && !value.is_empty();
    }
    if !has_name {
        return Err(LabelError::MissingMetricName.into());
    }
    Ok(())
}

/// Renders raw pairs as `{a="b", c="d"}`, truncated to keep error bodies short.
fn render(pairs: &[(String, String)]) -> String {
    const MAX: usize = 256;
    let mut s = String::from("{");
    for (i, (n, v)) in pairs.iter().enumerate() {
        if i > 0 {
            s.push_str(", ");
        }
        s.push_str(&format!("{n}={v:?}"));
        if s.len() > MAX {
            s.truncate(crate::excerpt::cut(&s, MAX).len());
            s.push_str("...");
            return s + "}";
        }
    }
    s + "}"
}
