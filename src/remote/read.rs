//! Remote read: request decoding, label matchers, response-type negotiation, and both response
//! encodings — `SAMPLES` (one snappy-compressed `ReadResponse`) and `STREAMED_XOR_CHUNKS`
//! (a stream of `ChunkedReadResponse` frames with chunks, not compressed).
//!
//! Native histograms: a `SAMPLES` response carries them in `TimeSeries.histograms`, in the form
//! Prometheus' `codec.go` answers with ([`crate::remote::histogram::to_proto`]). A streamed
//! response carries them as Prometheus' own chunks do: integer histograms in `HISTOGRAM` chunks,
//! float histograms in `FLOAT_HISTOGRAM` chunks ([`crate::remote::histogram_chunk`]), floats in
//! `XOR` chunks ([`crate::remote::xor`]). A series' chunks follow each other in time order, a
//! series that switches between floats and histograms getting a chunk of each kind in turn.
//!
//! Stream framing, as Prometheus' `storage/remote/chunked.go` writes it (one series per frame;
//! a series whose chunks pass [`MAX_BYTES_IN_FRAME`] goes on in further frames, as Prometheus'
//! `StreamChunkedReadResponses` splits it):
//!
//! | part | encoding |
//! |---|---|
//! | length | uvarint, byte length of the message |
//! | checksum | CRC-32 Castagnoli of the message, `u32` big-endian |
//! | message | protobuf `prometheus.ChunkedReadResponse` |

use crate::labels::Labels;
use crate::matcher::{MatchOp, Matcher, MatcherError};
use crate::remote::decode::{decompress, DecodeError};
use crate::remote::footprint::Footprint;
use crate::remote::histogram;
use crate::remote::histogram_chunk;
use crate::remote::proto::{self, ChunkEncoding, MatcherType, ResponseType};
use crate::remote::xor;
use crate::sample::{HistogramSample, Sample, SeriesSamples};
use prost::Message;

/// Content type of a `SAMPLES` response.
pub const SAMPLES_CONTENT_TYPE: &str = "application/x-protobuf";
/// Content type of a `STREAMED_XOR_CHUNKS` response.
pub const STREAMED_CONTENT_TYPE: &str = "application/x-streamed-protobuf; proto=prometheus.ChunkedReadResponse";

/// Why a remote-read request was rejected (HTTP 400).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    /// Bad snappy or size.
    #[error(transparent)]
    Body(#[from] DecodeError),
    /// The request's messages would take more memory than the body limit.
    #[error("remote-read request would decode to up to {bytes} bytes of messages, more than the limit of {limit} bytes (--max-request-bytes)")]
    Expands {
        /// Bytes its messages would take.
        bytes: usize,
        /// The limit.
        limit: usize,
    },
    /// Not a `prometheus.ReadRequest`.
    #[error("invalid protobuf prometheus.ReadRequest: {0}")]
    Protobuf(#[source] prost::DecodeError),
    /// A matcher type outside EQ/NEQ/RE/NRE.
    #[error("query #{query}: unknown label matcher type {value}")]
    MatcherType {
        /// Query index.
        query: usize,
        /// The type number sent.
        value: i32,
    },
    /// A regex that does not compile.
    #[error("query #{query}: {source}")]
    Matcher {
        /// Query index.
        query: usize,
        /// What was wrong with the matcher.
        #[source]
        source: MatcherError,
    },
    /// None of the accepted response types is implemented.
    #[error("none of the requested response types {0:?} is implemented (supported: SAMPLES=0, STREAMED_XOR_CHUNKS=1)")]
    ResponseType(Vec<i32>),
    /// A frame of a chunked stream is malformed (used when reading streams, e.g. in tests).
    #[error("malformed chunked frame: {0}")]
    Frame(&'static str),
}

/// Decodes a snappy-compressed `ReadRequest`.
///
/// # Errors
/// [`ReadError`] on bad snappy, oversized bodies or bad protobuf.
pub fn decode_request(body: &[u8], max_decoded_bytes: usize) -> Result<proto::ReadRequest, ReadError> {
    let raw = decompress(body, max_decoded_bytes)?;
    // A few queries of a few matchers each is what clients send; a body of empty messages would
    // decode to ~50 times its size. Decoded, it may be as large as the body limit.
    let bytes = Footprint::of_read_request(&raw).prost_bytes;
    if bytes > max_decoded_bytes {
        return Err(ReadError::Expands { bytes, limit: max_decoded_bytes });
    }
    proto::ReadRequest::decode(raw.as_slice()).map_err(ReadError::Protobuf)
}

/// The response type to answer with: the first of the client's accepted types saltdb
/// implements, or `SAMPLES` when the client names none (remote-read 1.0 clients).
///
/// # Errors
/// [`ReadError::ResponseType`] when the client accepts only types saltdb lacks.
pub fn negotiate(accepted: &[i32]) -> Result<ResponseType, ReadError> {
    if accepted.is_empty() {
        return Ok(ResponseType::Samples);
    }
    accepted
        .iter()
        .find_map(|&t| ResponseType::try_from(t).ok())
        .ok_or_else(|| ReadError::ResponseType(accepted.to_vec()))
}

/// Converts the matchers of query number `query` into saltdb matchers.
///
/// # Errors
/// [`ReadError::MatcherType`] or [`ReadError::Matcher`].
pub fn matchers(query: usize, ms: &[proto::LabelMatcher]) -> Result<Vec<Matcher>, ReadError> {
    ms.iter()
        .map(|m| {
            let op = match MatcherType::try_from(m.r#type) {
                Ok(MatcherType::Eq) => MatchOp::Equal,
                Ok(MatcherType::Neq) => MatchOp::NotEqual,
                Ok(MatcherType::Re) => MatchOp::RegexMatch,
                Ok(MatcherType::Nre) => MatchOp::RegexNoMatch,
                Err(_) => return Err(ReadError::MatcherType { query, value: m.r#type }),
            };
            Matcher::new(op, m.name.clone(), m.value.clone()).map_err(|source| ReadError::Matcher { query, source })
        })
        .collect()
}

/// Label set in wire form (sorted by name).
pub fn proto_labels(labels: &Labels) -> Vec<proto::Label> {
    labels.iter().map(|l| proto::Label { name: l.name.clone(), value: l.value.clone() }).collect()
}

/// Encodes a `SAMPLES` response body (snappy-compressed `ReadResponse`), one result per query.
pub fn samples_response(results: &[Vec<SeriesSamples>]) -> Vec<u8> {
    let resp = proto::ReadResponse {
        results: results
            .iter()
            .map(|series| proto::QueryResult {
                timeseries: series
                    .iter()
                    .map(|s| proto::TimeSeries {
                        labels: proto_labels(&s.labels),
                        samples: s
                            .samples
                            .iter()
                            .map(|p| proto::Sample { value: p.value, timestamp: p.timestamp_ms })
                            .collect(),
                        histograms: s
                            .histograms
                            .iter()
                            .map(|h| histogram::to_proto(h.timestamp_ms, &h.histogram))
                            .collect(),
                        ..Default::default()
                    })
                    .collect(),
            })
            .collect(),
    };
    compress(&resp.encode_to_vec())
}

/// Snappy block compression (infallible for in-memory input below 4 GiB).
pub fn compress(raw: &[u8]) -> Vec<u8> {
    snap::raw::Encoder::new().compress_vec(raw).unwrap_or_default()
}

/// Chunk bytes per frame before a series goes on in a further frame: Prometheus' default
/// `--storage.remote.read-max-bytes-in-frame`.
pub const MAX_BYTES_IN_FRAME: usize = 1 << 20;

/// One series as chunks in time order: runs of floats as XOR chunks of at most
/// [`xor::SAMPLES_PER_CHUNK`] samples, runs of histograms as histogram chunks cut as
/// [`histogram_chunk::plan`] decides.
pub fn chunked_series(series: &SeriesSamples) -> proto::ChunkedSeries {
    let (mut floats, mut hists) = (series.samples.as_slice(), series.histograms.as_slice());
    let mut chunks = Vec::new();
    while !floats.is_empty() || !hists.is_empty() {
        let next_hist = hists.first().map_or(i64::MAX, |h| h.timestamp_ms);
        let (run, rest) = floats.split_at(floats.partition_point(|s| s.timestamp_ms <= next_hist));
        xor_chunks(run, &mut chunks);
        floats = rest;
        let next_float = floats.first().map_or(i64::MAX, |s| s.timestamp_ms);
        let (run, rest) = hists.split_at(hists.partition_point(|h| h.timestamp_ms < next_float));
        histogram_chunks(run, &mut chunks);
        hists = rest;
    }
    proto::ChunkedSeries { labels: proto_labels(&series.labels), chunks }
}

fn xor_chunks(run: &[Sample], dst: &mut Vec<proto::Chunk>) {
    dst.extend(run.chunks(xor::SAMPLES_PER_CHUNK).map(|part| proto::Chunk {
        min_time_ms: part.first().map_or(0, |s| s.timestamp_ms),
        max_time_ms: part.last().map_or(0, |s| s.timestamp_ms),
        r#type: ChunkEncoding::Xor as i32,
        data: xor::encode(part),
    }));
}

fn histogram_chunks(run: &[HistogramSample], dst: &mut Vec<proto::Chunk>) {
    for c in histogram_chunk::plan(run) {
        let part = run.get(c.range).unwrap_or_default();
        let r#type = if c.float { ChunkEncoding::FloatHistogram } else { ChunkEncoding::Histogram };
        dst.push(proto::Chunk {
            min_time_ms: part.first().map_or(0, |s| s.timestamp_ms),
            max_time_ms: part.last().map_or(0, |s| s.timestamp_ms),
            r#type: r#type as i32,
            data: histogram_chunk::encode(part, c.float, c.header),
        });
    }
}

/// Appends the frames (uvarint length, big-endian CRC-32C, message) holding `series` as the
/// answer to query `query_index`: one frame, or more when its chunks pass
/// [`MAX_BYTES_IN_FRAME`] (each frame then repeats the labels).
pub fn write_frame(dst: &mut Vec<u8>, query_index: usize, series: &SeriesSamples) {
    let whole = chunked_series(series);
    let labels_len: usize = whole.labels.iter().map(Message::encoded_len).sum();
    let budget = MAX_BYTES_IN_FRAME.saturating_sub(labels_len);
    let mut chunks = whole.chunks.into_iter().peekable();
    loop {
        let mut part = Vec::new();
        let mut used = 0usize;
        while let Some(c) = chunks.next_if(|_| part.is_empty() || used < budget) {
            used += c.encoded_len();
            part.push(c);
        }
        let more = chunks.peek().is_some();
        put_frame(dst, query_index, proto::ChunkedSeries { labels: whole.labels.clone(), chunks: part });
        if !more {
            return;
        }
    }
}

fn put_frame(dst: &mut Vec<u8>, query_index: usize, series: proto::ChunkedSeries) {
    let msg = proto::ChunkedReadResponse {
        chunked_series: vec![series],
        query_index: i64::try_from(query_index).unwrap_or(i64::MAX),
    };
    let bytes = msg.encode_to_vec();
    prost::encoding::encode_varint(bytes.len() as u64, dst);
    dst.extend_from_slice(&crc32c(&bytes).to_be_bytes());
    dst.extend_from_slice(&bytes);
}

/// Reads one frame from the front of `src`, returning the message and the rest.
///
/// # Errors
/// [`ReadError::Frame`] on truncation or checksum mismatch, [`ReadError::Protobuf`] on bad
/// protobuf.
pub fn read_frame(mut src: &[u8]) -> Result<(proto::ChunkedReadResponse, &[u8]), ReadError> {
    let len = prost::encoding::decode_varint(&mut src).map_err(|_| ReadError::Frame("bad length varint"))?;
    let len = usize::try_from(len).map_err(|_| ReadError::Frame("length too large"))?;
    let (crc, rest) = src.split_first_chunk::<4>().ok_or(ReadError::Frame("truncated checksum"))?;
    let msg = rest.get(..len).ok_or(ReadError::Frame("truncated message"))?;
    if crc32c(msg) != u32::from_be_bytes(*crc) {
        return Err(ReadError::Frame("checksum mismatch"));
    }
    let decoded = proto::ChunkedReadResponse::decode(msg).map_err(ReadError::Protobuf)?;
    Ok((decoded, rest.get(len..).unwrap_or_default()))
}

/// CRC-32 with the Castagnoli polynomial (reflected 0x82F63B78), as Go's `crc32.Castagnoli`.
pub fn crc32c(data: &[u8]) -> u32 {
    const TABLE: [u32; 256] = {
        let mut table = [0u32; 256];
        let mut i = 0;
        while i < 256 {
            let mut c = i as u32;
            let mut k = 0;
            while k < 8 {
                c = if c & 1 == 1 { 0x82F6_3B78 ^ (c >> 1) } else { c >> 1 };
                k += 1;
            }
            table[i] = c;
            i += 1;
        }
        table
    };
    let mut crc = !0u32;
    for &b in data {
        let idx = ((crc ^ u32::from(b)) & 0xff) as usize;
        crc = TABLE.get(idx).copied().unwrap_or(0) ^ (crc >> 8);
    }
    !crc
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sample::Sample;
    use proptest::prelude::*;

    #[test]
    fn crc32c_check_value() {
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(crc32c(b""), 0);
    }

    #[test]
    fn negotiation_prefers_client_order() {
        assert_eq!(negotiate(&[]).unwrap(), ResponseType::Samples);
        assert_eq!(negotiate(&[1]).unwrap(), ResponseType::StreamedXorChunks);
        assert_eq!(negotiate(&[1, 0]).unwrap(), ResponseType::StreamedXorChunks);
        assert_eq!(negotiate(&[7, 0]).unwrap(), ResponseType::Samples);
        assert!(matches!(negotiate(&[7]), Err(ReadError::ResponseType(_))));
    }

    #[test]
    fn matchers_convert_and_reject_bad_ones() {
        let m = |t: MatcherType, v: &str| proto::LabelMatcher { r#type: t as i32, name: "job".into(), value: v.into() };
        let ms = matchers(
            0,
            &[m(MatcherType::Eq, "a"), m(MatcherType::Neq, "b"), m(MatcherType::Re, "c.*"), m(MatcherType::Nre, "d")],
        )
        .unwrap();
        assert_eq!(
            ms.iter().map(|m| m.op).collect::<Vec<_>>(),
            [MatchOp::Equal, MatchOp::NotEqual, MatchOp::RegexMatch, MatchOp::RegexNoMatch]
        );
        assert!(ms[2].matches("cx") && !ms[2].matches("xc"));
        assert!(matches!(matchers(2, &[m(MatcherType::Re, "(")]), Err(ReadError::Matcher { query: 2, .. })));
        let bad = proto::LabelMatcher { r#type: 9, name: "a".into(), value: "b".into() };
        assert!(matches!(matchers(1, &[bad]), Err(ReadError::MatcherType { query: 1, value: 9 })));
    }

    fn series(n: usize) -> SeriesSamples {
        SeriesSamples {
            labels: Labels::from_pairs([("__name__", "up"), ("job", "x")]).unwrap(),
            samples: (0..n).map(|i| Sample::new(1_700_000_000_000 + i as i64 * 15_000, i as f64 / 3.0)).collect(),
            histograms: Vec::new(),
        }
    }

    #[test]
    fn frames_round_trip_and_split_chunks_at_120() {
        let mut buf = Vec::new();
        write_frame(&mut buf, 0, &series(250));
        write_frame(&mut buf, 3, &series(1));
        let (a, rest) = read_frame(&buf).unwrap();
        let (b, rest) = read_frame(rest).unwrap();
        assert!(rest.is_empty());
        assert_eq!(b.query_index, 3);
        let chunks = &a.chunked_series[0].chunks;
        assert_eq!(chunks.iter().map(|c| xor::decode(&c.data).unwrap().len()).collect::<Vec<_>>(), [120, 120, 10]);
        assert_eq!(chunks[1].min_time_ms, 1_700_000_000_000 + 120 * 15_000);
        let all: Vec<Sample> = chunks.iter().flat_map(|c| xor::decode(&c.data).unwrap()).collect();
        assert_eq!(all, series(250).samples);
        let mut corrupt = buf.clone();
        if let Some(last) = corrupt.last_mut() {
            *last ^= 1;
        }
        let (_, rest) = read_frame(&corrupt).unwrap();
        assert!(matches!(read_frame(rest), Err(ReadError::Frame("checksum mismatch"))));
    }

    #[test]
    fn samples_response_carries_histograms_in_their_form() {
        use crate::histogram::{CounterResetHint, Histogram, Span};
        use crate::sample::HistogramSample;
        use std::sync::Arc;
        let mut s = series(1);
        let h = |integer: bool, count: f64| Histogram {
            counter_reset_hint: CounterResetHint::Gauge,
            schema: 0,
            count,
            sum: 2.0,
            positive_spans: vec![Span { offset: 1, length: 1 }],
            positive_buckets: vec![count],
            integer,
            ..Histogram::default()
        };
        s.histograms = vec![
            HistogramSample { timestamp_ms: 5, histogram: Arc::new(h(true, 3.0)) },
            HistogramSample { timestamp_ms: 6, histogram: Arc::new(h(false, 1.5)) },
        ];
        let raw = decompress(&samples_response(&[vec![s]]), 1 << 20).unwrap();
        let resp = proto::ReadResponse::decode(raw.as_slice()).unwrap();
        let hs = &resp.results[0].timeseries[0].histograms;
        assert_eq!(hs.len(), 2);
        assert_eq!((hs[0].timestamp, hs[0].positive_deltas.as_slice(), hs[0].reset_hint), (5, &[3i64][..], 3));
        assert!(!histogram::is_float(&hs[0]) && histogram::is_float(&hs[1]));
        assert_eq!(hs[1].positive_counts, [1.5]);
    }

    #[test]
    fn a_series_switching_between_floats_and_histograms_streams_chunks_of_each_kind_in_time_order() {
        use crate::histogram::{CounterResetHint, Histogram, Span};
        use crate::sample::HistogramSample;
        use std::sync::Arc;
        let h = |t: i64, integer: bool| HistogramSample {
            timestamp_ms: t,
            histogram: Arc::new(Histogram {
                counter_reset_hint: CounterResetHint::NotCounterReset,
                count: t as f64,
                sum: 1.0,
                positive_spans: vec![Span { offset: 0, length: 1 }],
                positive_buckets: vec![t as f64],
                integer,
                ..Histogram::default()
            }),
        };
        let mut s = series(0);
        s.samples = [1, 2, 6, 200].map(|t| Sample::new(t, 0.5)).to_vec();
        s.histograms = (3..6).map(|t| h(t, true)).chain((7..137).map(|t| h(t, t < 130))).collect();
        let cs = chunked_series(&s);
        let got: Vec<_> = cs.chunks.iter().map(|c| (c.r#type, c.min_time_ms, c.max_time_ms)).collect();
        let (x, hi, fh) =
            (ChunkEncoding::Xor as i32, ChunkEncoding::Histogram as i32, ChunkEncoding::FloatHistogram as i32);
        assert_eq!(
            got,
            [(x, 1, 2), (hi, 3, 5), (x, 6, 6), (hi, 7, 126), (hi, 127, 129), (fh, 130, 136), (x, 200, 200)]
        );
        let decoded = histogram_chunk::decode(&cs.chunks[3].data, false).unwrap();
        assert_eq!(decoded.histograms.len(), 120);
        assert_eq!(decoded.histograms[119].1.count, 126.0);
        assert_eq!(histogram_chunk::decode(&cs.chunks[5].data, true).unwrap().histograms[0].0, 130);
    }

    #[test]
    fn a_series_larger_than_a_frame_goes_on_in_further_frames_with_its_labels() {
        let mut s = series(0);
        // Random values take ~8 bytes each: ~4.6 MiB of chunks.
        let mut x = 1u64;
        s.samples = (0..600_000)
            .map(|i| {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                Sample::new(i, f64::from_bits(x >> 2))
            })
            .collect();
        let mut buf = Vec::new();
        write_frame(&mut buf, 1, &s);
        let mut rest = buf.as_slice();
        let mut frames = Vec::new();
        while !rest.is_empty() {
            let (f, r) = read_frame(rest).unwrap();
            frames.push(f);
            rest = r;
        }
        assert!(frames.len() >= 4, "{}", frames.len());
        let mut all = Vec::new();
        for f in &frames {
            let cs = &f.chunked_series[0];
            assert_eq!(cs.labels, proto_labels(&s.labels));
            assert!(cs.chunks.iter().map(|c| c.encoded_len()).sum::<usize>() < MAX_BYTES_IN_FRAME + 4096);
            all.extend(cs.chunks.iter().flat_map(|c| xor::decode(&c.data).unwrap()));
        }
        assert_eq!(all.len(), s.samples.len());
        assert!(all.iter().zip(&s.samples).all(|(a, b)| a.value.to_bits() == b.value.to_bits()));
    }

    #[test]
    fn samples_response_decodes() {
        let body = samples_response(&[vec![series(3)], vec![]]);
        let raw = decompress(&body, 1 << 20).unwrap();
        let resp = proto::ReadResponse::decode(raw.as_slice()).unwrap();
        assert_eq!(resp.results.len(), 2);
        assert_eq!(resp.results[0].timeseries[0].samples.len(), 3);
        assert_eq!(resp.results[0].timeseries[0].labels[0].name, "__name__");
    }

    proptest! {
        #[test]
        fn read_request_decoder_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode_request(&bytes, 1 << 16);
            let _ = decode_request(&compress(&bytes), 1 << 16);
            let _ = read_frame(&bytes);
        }
    }
}
