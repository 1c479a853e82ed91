//! Protobuf messages of Prometheus remote-write 1.0 (`prometheus.WriteRequest`), remote-write 2.0
//! (`io.prometheus.write.v2.Request`) and remote read, hand-written with `prost` derives so that
//! no `protoc` is needed. Field numbers follow `prompb/types.proto`, `prompb/remote.proto` and
//! `prompb/io/prometheus/write/v2/types.proto` of the Prometheus repository.
//!
//! Only what saltdb reads or writes is modelled; unknown fields are skipped by prost, so a
//! sender using a newer schema still decodes.

#![allow(missing_docs)] // Wire structs mirror the .proto files field by field.

/// Remote-write 1.0 request.
#[derive(Clone, PartialEq, prost::Message)]
pub struct WriteRequest {
    #[prost(message, repeated, tag = "1")]
    pub timeseries: Vec<TimeSeries>,
    #[prost(message, repeated, tag = "3")]
    pub metadata: Vec<MetricMetadata>,
}

/// One series with its samples (remote-write 1.0 and remote-read `SAMPLES` responses).
#[derive(Clone, PartialEq, prost::Message)]
pub struct TimeSeries {
    /// Must be sorted by name, names unique and non-empty.
    #[prost(message, repeated, tag = "1")]
    pub labels: Vec<Label>,
    #[prost(message, repeated, tag = "2")]
    pub samples: Vec<Sample>,
    #[prost(message, repeated, tag = "3")]
    pub exemplars: Vec<Exemplar>,
    #[prost(message, repeated, tag = "4")]
    pub histograms: Vec<Histogram>,
}

/// A label pair.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct Label {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub value: String,
}

/// A float sample.
#[derive(Clone, Copy, PartialEq, prost::Message)]
pub struct Sample {
    #[prost(double, tag = "1")]
    pub value: f64,
    #[prost(int64, tag = "2")]
    pub timestamp: i64,
}

/// An exemplar (not stored by saltdb; counted and dropped).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Exemplar {
    #[prost(message, repeated, tag = "1")]
    pub labels: Vec<Label>,
    #[prost(double, tag = "2")]
    pub value: f64,
    #[prost(int64, tag = "3")]
    pub timestamp: i64,
}

/// A native histogram sample (`prometheus.Histogram`; remote-write 2.0's
/// `io.prometheus.write.v2.Histogram` has the same fields and numbers, see [`v2::Histogram`]).
///
/// The form is chosen by the `count` oneof: `CountFloat` makes a float histogram (absolute
/// counts in `*_counts`, `zero_count` as `ZeroCountFloat`), anything else an integer histogram
/// (delta-encoded counts in `*_deltas`), as Prometheus' `IsFloatHistogram` decides.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Histogram {
    #[prost(oneof = "histogram::Count", tags = "1, 2")]
    pub count: Option<histogram::Count>,
    #[prost(double, tag = "3")]
    pub sum: f64,
    #[prost(sint32, tag = "4")]
    pub schema: i32,
    #[prost(double, tag = "5")]
    pub zero_threshold: f64,
    #[prost(oneof = "histogram::ZeroCount", tags = "6, 7")]
    pub zero_count: Option<histogram::ZeroCount>,
    #[prost(message, repeated, tag = "8")]
    pub negative_spans: Vec<BucketSpan>,
    #[prost(sint64, repeated, tag = "9")]
    pub negative_deltas: Vec<i64>,
    #[prost(double, repeated, tag = "10")]
    pub negative_counts: Vec<f64>,
    #[prost(message, repeated, tag = "11")]
    pub positive_spans: Vec<BucketSpan>,
    #[prost(sint64, repeated, tag = "12")]
    pub positive_deltas: Vec<i64>,
    #[prost(double, repeated, tag = "13")]
    pub positive_counts: Vec<f64>,
    /// `ResetHint`: 0 unknown, 1 yes, 2 no, 3 gauge.
    #[prost(int32, tag = "14")]
    pub reset_hint: i32,
    #[prost(int64, tag = "15")]
    pub timestamp: i64,
    /// Bounds of the custom buckets (schema -53).
    #[prost(double, repeated, tag = "16")]
    pub custom_values: Vec<f64>,
}

/// The oneofs of [`Histogram`].
pub mod histogram {
    /// `oneof count`.
    #[derive(Clone, Copy, PartialEq, prost::Oneof)]
    pub enum Count {
        #[prost(uint64, tag = "1")]
        CountInt(u64),
        #[prost(double, tag = "2")]
        CountFloat(f64),
    }

    /// `oneof zero_count`.
    #[derive(Clone, Copy, PartialEq, prost::Oneof)]
    pub enum ZeroCount {
        #[prost(uint64, tag = "6")]
        ZeroCountInt(u64),
        #[prost(double, tag = "7")]
        ZeroCountFloat(f64),
    }
}

/// A run of consecutive histogram buckets.
#[derive(Clone, PartialEq, prost::Message)]
pub struct BucketSpan {
    #[prost(sint32, tag = "1")]
    pub offset: i32,
    #[prost(uint32, tag = "2")]
    pub length: u32,
}

/// Metric metadata of remote-write 1.0 (`prometheus.MetricMetadata`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct MetricMetadata {
    /// A [`MetricType`] value.
    #[prost(enumeration = "MetricType", tag = "1")]
    pub r#type: i32,
    #[prost(string, tag = "2")]
    pub metric_family_name: String,
    #[prost(string, tag = "4")]
    pub help: String,
    #[prost(string, tag = "5")]
    pub unit: String,
}

/// Metric type, shared by 1.0 (`MetricMetadata.MetricType`) and 2.0 (`Metadata.MetricType`);
/// both use the same numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum MetricType {
    Unknown = 0,
    Counter = 1,
    Gauge = 2,
    Histogram = 3,
    Gaugehistogram = 4,
    Summary = 5,
    Info = 6,
    Stateset = 7,
}

impl MetricType {
    /// The name Prometheus' `/api/v1/metadata` uses for the type.
    pub fn api_name(self) -> &'static str {
        match self {
            Self::Unknown => "unknown",
            Self::Counter => "counter",
            Self::Gauge => "gauge",
            Self::Histogram => "histogram",
            Self::Gaugehistogram => "gaugehistogram",
            Self::Summary => "summary",
            Self::Info => "info",
            Self::Stateset => "stateset",
        }
    }
}

/// Remote-write 2.0 messages (`io.prometheus.write.v2`).
pub mod v2 {
    /// Remote-write 2.0 request: strings are interned in `symbols`, `symbols[0]` must be `""`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Request {
        #[prost(string, repeated, tag = "4")]
        pub symbols: Vec<String>,
        #[prost(message, repeated, tag = "5")]
        pub timeseries: Vec<TimeSeries>,
    }

    /// One series; labels are pairs of indexes into `symbols`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct TimeSeries {
        #[prost(uint32, repeated, tag = "1")]
        pub labels_refs: Vec<u32>,
        #[prost(message, repeated, tag = "2")]
        pub samples: Vec<super::Sample>,
        #[prost(message, repeated, tag = "3")]
        pub histograms: Vec<Histogram>,
        #[prost(message, repeated, tag = "4")]
        pub exemplars: Vec<Exemplar>,
        #[prost(message, optional, tag = "5")]
        pub metadata: Option<Metadata>,
        #[prost(int64, tag = "6")]
        pub created_timestamp: i64,
    }

    /// An exemplar (counted and dropped).
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Exemplar {
        #[prost(uint32, repeated, tag = "1")]
        pub labels_refs: Vec<u32>,
        #[prost(double, tag = "2")]
        pub value: f64,
        #[prost(int64, tag = "3")]
        pub timestamp: i64,
    }

    /// Per-series metadata; help and unit are indexes into `symbols`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Metadata {
        /// A [`super::MetricType`] value (0 is "unspecified").
        #[prost(enumeration = "super::MetricType", tag = "1")]
        pub r#type: i32,
        #[prost(uint32, tag = "3")]
        pub help_ref: u32,
        #[prost(uint32, tag = "4")]
        pub unit_ref: u32,
    }

    /// A native histogram sample: the same message as remote-write 1.0's.
    pub type Histogram = super::Histogram;
}

/// Remote-read request: one or more queries and the response types the client accepts,
/// in its order of preference.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ReadRequest {
    #[prost(message, repeated, tag = "1")]
    pub queries: Vec<Query>,
    #[prost(enumeration = "ResponseType", repeated, tag = "2")]
    pub accepted_response_types: Vec<i32>,
}

/// Remote-read response types.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum ResponseType {
    /// One snappy-compressed [`ReadResponse`] with raw samples.
    Samples = 0,
    /// A stream of [`ChunkedReadResponse`] frames carrying XOR chunks.
    StreamedXorChunks = 1,
}

/// One remote-read query.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Query {
    #[prost(int64, tag = "1")]
    pub start_timestamp_ms: i64,
    #[prost(int64, tag = "2")]
    pub end_timestamp_ms: i64,
    #[prost(message, repeated, tag = "3")]
    pub matchers: Vec<LabelMatcher>,
    #[prost(message, optional, tag = "4")]
    pub hints: Option<ReadHints>,
}

/// A label matcher of remote read.
#[derive(Clone, PartialEq, prost::Message)]
pub struct LabelMatcher {
    /// A [`MatcherType`] value.
    #[prost(enumeration = "MatcherType", tag = "1")]
    pub r#type: i32,
    #[prost(string, tag = "2")]
    pub name: String,
    #[prost(string, tag = "3")]
    pub value: String,
}

/// `LabelMatcher.Type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum MatcherType {
    Eq = 0,
    Neq = 1,
    Re = 2,
    Nre = 3,
}

/// Query hints (ignored: saltdb returns raw data).
#[derive(Clone, PartialEq, prost::Message)]
pub struct ReadHints {
    #[prost(int64, tag = "1")]
    pub step_ms: i64,
    #[prost(string, tag = "2")]
    pub func: String,
    #[prost(int64, tag = "3")]
    pub start_ms: i64,
    #[prost(int64, tag = "4")]
    pub end_ms: i64,
    #[prost(string, repeated, tag = "5")]
    pub grouping: Vec<String>,
    #[prost(bool, tag = "6")]
    pub by: bool,
    #[prost(int64, tag = "7")]
    pub range_ms: i64,
}

/// `SAMPLES` response: one result per query, in query order.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ReadResponse {
    #[prost(message, repeated, tag = "1")]
    pub results: Vec<QueryResult>,
}

/// The series one query selected.
#[derive(Clone, PartialEq, prost::Message)]
pub struct QueryResult {
    #[prost(message, repeated, tag = "1")]
    pub timeseries: Vec<TimeSeries>,
}

/// One frame of a `STREAMED_XOR_CHUNKS` response.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ChunkedReadResponse {
    #[prost(message, repeated, tag = "1")]
    pub chunked_series: Vec<ChunkedSeries>,
    /// Index of the query in the request this frame answers.
    #[prost(int64, tag = "2")]
    pub query_index: i64,
}

/// A series as encoded chunks.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ChunkedSeries {
    #[prost(message, repeated, tag = "1")]
    pub labels: Vec<Label>,
    #[prost(message, repeated, tag = "2")]
    pub chunks: Vec<Chunk>,
}

/// One chunk: `data` is the chunk in the encoding `type` names.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Chunk {
    #[prost(int64, tag = "1")]
    pub min_time_ms: i64,
    #[prost(int64, tag = "2")]
    pub max_time_ms: i64,
    /// A [`ChunkEncoding`] value.
    #[prost(enumeration = "ChunkEncoding", tag = "3")]
    pub r#type: i32,
    #[prost(bytes = "vec", tag = "4")]
    pub data: Vec<u8>,
}

/// `Chunk.Encoding`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum ChunkEncoding {
    Unknown = 0,
    Xor = 1,
    Histogram = 2,
    FloatHistogram = 3,
}
