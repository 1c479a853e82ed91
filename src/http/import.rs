//! `POST /api/v1/import`: JSON lines in the VictoriaMetrics format, one series per line:
//! `{"metric":{"__name__":"cpu","host":"a"},"values":[1.5,2],"timestamps":[1700000000000,1700000015000]}`.
//!
//! Values are JSON numbers, or the strings `"NaN"`, `"+Inf"`, `"-Inf"` and `"stale"` (the
//! Prometheus staleness marker). A line of native histograms has `"histograms"` (objects in the
//! form of `ingest/json_sample.rs`) instead of `"values"`. Timestamps are integer milliseconds.
//! The whole body is validated before anything is written: one bad line rejects the request with
//! its line number.

use std::fmt;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use serde::de::{Deserializer, MapAccess, Visitor};
use serde::Deserialize;

use super::error::ApiError;
use super::ingest::{self, Batch, Coding, Refusal};
use super::params::Params;
use super::state::AppState;
use crate::ingest::json_sample::{JsonFloat, JsonHistogram};
use crate::ingest::prom_text;
use crate::labels::Labels;
use crate::metrics::Protocol;
use crate::sample::{check_timestamp, HistogramSample, Sample, SeriesSamples, WriteBatch};
use crate::tenant::Scope;
use axum::Extension;

use crate::ingest::SeriesLimits;

/// A rejected line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {reason}")]
pub struct LineError {
    /// 1-based line number.
    pub line: usize,
    /// What is wrong with it.
    pub reason: String,
}

/// The label object of a line, duplicates kept so they can be rejected.
struct Pairs(Vec<(String, String)>);

impl<'de> Deserialize<'de> for Pairs {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Pairs;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object of label names to string values")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Pairs, A::Error> {
                let mut out = Vec::new();
                while let Some((k, v)) = map.next_entry::<String, String>()? {
                    out.push((k, v));
                }
                Ok(Pairs(out))
            }
        }
        d.deserialize_map(V)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Line {
    metric: Pairs,
    #[serde(default)]
    values: Option<Vec<JsonFloat>>,
    #[serde(default)]
    histograms: Option<Vec<JsonHistogram>>,
    timestamps: Vec<i64>,
}

/// Decodes and validates a whole JSON-lines body. Blank lines are skipped.
///
/// # Errors
/// The first bad line, with its 1-based number and the problem.
pub fn decode_lines(body: &[u8], limits: SeriesLimits) -> Result<WriteBatch, LineError> {
    decode_lines_reserving(body, limits, &mut |_| Ok::<(), std::convert::Infallible>(())).map_err(|s| match s {
        ImportStop::Line(e) => e,
        ImportStop::Refused(never) => match never {},
    })
}

/// Why [`decode_lines_reserving`] stopped.
#[derive(Debug)]
pub enum ImportStop<E> {
    /// A bad line.
    Line(LineError),
    /// The memory budget refused what the next line needs.
    Refused(E),
}

/// [`decode_lines`], asking `reserve` before each line for the memory decoding it may take:
/// its samples as kept (at most one per two commas of the line, 16 bytes each) and its label
/// text, plus, when larger than any line's before, the parser's temporary vectors (values and
/// timestamps as they grow, label strings). A line of `1,1,1,...` holds 4 bytes of JSON per
/// sample, so the body's size alone does not bound the batch.
///
/// # Errors
/// [`ImportStop::Line`] for a bad line, [`ImportStop::Refused`] with `reserve`'s error.
pub fn decode_lines_reserving<E>(
    body: &[u8],
    limits: SeriesLimits,
    reserve: &mut dyn FnMut(usize) -> Result<(), E>,
) -> Result<WriteBatch, ImportStop<E>> {
    let mut batch = WriteBatch::default();
    let mut scratch = 0usize;
    for (i, raw) in body.split(|&b| b == b'\n').enumerate() {
        let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
        if raw.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let err = |reason: String| ImportStop::Line(LineError { line: i + 1, reason });
        let (commas, colons) =
            raw.iter().fold((0usize, 0usize), |(c, k), &b| (c + usize::from(b == b','), k + usize::from(b == b':')));
        let samples = commas / 2 + 1;
        // Held: the samples and the label text. Temporary: two vectors of 8-byte numbers that
        // double as they grow, and a `(String, String)` per label (at most one per colon).
        let mut held = samples * std::mem::size_of::<Sample>() + raw.len();
        let mut temporary = 2 * 8 * samples.next_power_of_two().max(4) + colons * 48 + raw.len();
        if memchr::memmem::find(raw, b"\"histograms\"").is_some() {
            // A histogram per `{` at most, its vectors at most 4 bytes per byte of JSON; the
            // parsed form holds about as much again until it is converted.
            let opens = raw.iter().filter(|&&b| b == b'{').count();
            let per_histogram =
                std::mem::size_of::<HistogramSample>() + std::mem::size_of::<crate::histogram::Histogram>() + 16;
            held += opens * per_histogram + JsonHistogram::HELD_PER_JSON_BYTE * raw.len();
            temporary += opens * std::mem::size_of::<JsonHistogram>() + JsonHistogram::HELD_PER_JSON_BYTE * raw.len();
        }
        reserve(held + temporary.saturating_sub(scratch)).map_err(ImportStop::Refused)?;
        scratch = scratch.max(temporary);
        if batch.series.len() == limits.max_series {
            return Err(err(format!(
                "the request has more than {} series (lines), the limit set by --max-series-per-request",
                limits.max_series
            )));
        }
        let line: Line = serde_json::from_slice(raw).map_err(|e| err(format!("invalid JSON: {e}")))?;
        batch.series.push(validate(line, limits).map_err(err)?);
    }
    Ok(batch)
}

fn validate(line: Line, limits: SeriesLimits) -> Result<SeriesSamples, String> {
    let labels = Labels::from_pairs(line.metric.0).map_err(|e| e.to_string())?;
    labels.require_metric_name().map_err(|e| e.to_string())?;
    labels.check_limits(limits.max_labels, limits.max_label_bytes).map_err(|e| e.to_string())?;
    let same_length = |field: &str, n: usize| {
        if n == line.timestamps.len() {
            Ok(())
        } else {
            Err(format!(
                "\"{field}\" has {n} entries but \"timestamps\" has {}; they must be the same length",
                line.timestamps.len()
            ))
        }
    };
    // Allocated at their final size (collecting `Result`s would grow them by doubling), as the
    // memory reserved for the line assumes.
    match (line.values, line.histograms) {
        (Some(values), None) => {
            same_length("values", values.len())?;
            let mut samples = Vec::with_capacity(line.timestamps.len());
            for (ts, JsonFloat(v)) in line.timestamps.into_iter().zip(values) {
                check_timestamp(ts).map_err(|e| e.to_string())?;
                samples.push(Sample::new(ts, v));
            }
            Ok(SeriesSamples { labels, samples, histograms: Vec::new() })
        }
        (None, Some(histograms)) => {
            same_length("histograms", histograms.len())?;
            let mut out = Vec::with_capacity(line.timestamps.len());
            for (i, (ts, h)) in line.timestamps.into_iter().zip(histograms).enumerate() {
                check_timestamp(ts).map_err(|e| e.to_string())?;
                let histogram = h.into_histogram().map_err(|e| format!("histogram number {}: {e}", i + 1))?;
                out.push(HistogramSample { timestamp_ms: ts, histogram: std::sync::Arc::new(histogram) });
            }
            Ok(SeriesSamples { labels, samples: Vec::new(), histograms: out })
        }
        (Some(_), Some(_)) => Err(
            "a line has \"values\" or \"histograms\", not both (write floats and histograms of a series on two lines)"
                .into(),
        ),
        (None, None) => Err("a line needs \"values\" (floats) or \"histograms\" (native histograms)".into()),
    }
}

/// The handler. Answers 204 once the whole body is durable.
///
/// # Errors
/// 400 naming the bad line, 413 over the size limit, 415 for an unknown encoding, 5xx when
/// storage fails (see `http/ingest.rs`).
pub async fn import(
    State(state): State<Arc<AppState>>,
    Extension(scope): Extension<Scope>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Result<StatusCode, ApiError> {
    Params::parse(query.as_deref(), None).reject_unknown(&[])?;
    let limits = state.limits.series;
    ingest::run(&state, &scope, Protocol::Import, &headers, body, Coding::Declared, move |bytes, reserve| {
        // Each line's decoded memory is reserved before it is parsed.
        let batch = decode_lines_reserving(bytes, limits, reserve).map_err(|stop| match stop {
            ImportStop::Line(e) => {
                Refusal::Invalid { reason: "invalid_line", samples: 0, error: ApiError::BadData(e.to_string()) }
            }
            ImportStop::Refused(e) => Refusal::Budget(e),
        })?;
        Ok((Batch::Series(batch), ()))
    })
    .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /api/v1/import/prometheus`: Prometheus text exposition format, or OpenMetrics when
/// `Content-Type` says `application/openmetrics-text` (timestamps in seconds). Lines without a
/// timestamp get the `timestamp` parameter (RFC 3339 or Unix seconds, as other API times), else
/// the arrival time. Answers 204 once the whole body is durable.
///
/// # Errors
/// 400 naming the bad line or parameter, and the pipeline's answers.
pub async fn import_prometheus(
    State(state): State<Arc<AppState>>,
    Extension(scope): Extension<Scope>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Result<StatusCode, ApiError> {
    let params = Params::parse(query.as_deref(), None);
    params.reject_unknown(&["timestamp"])?;
    let default_ms = params.time_ms("timestamp", crate::storage::now_ms())?;
    let openmetrics = headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.trim_start().to_ascii_lowercase().starts_with("application/openmetrics-text"));
    let opts = prom_text::Options { openmetrics, default_ms, limits: state.limits.series };
    ingest::run(&state, &scope, Protocol::PromText, &headers, body, Coding::Declared, move |bytes, reserve| {
        let batch = prom_text::decode(bytes, &opts, reserve).map_err(Refusal::from)?;
        Ok((Batch::Packed(batch), ()))
    })
    .await?;
    Ok(StatusCode::NO_CONTENT)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sample::STALE_NAN_BITS;

    fn decode(s: &str) -> Result<WriteBatch, LineError> {
        decode_lines(s.as_bytes(), SeriesLimits::default())
    }

    #[test]
    fn decodes_lines_and_special_values() {
        let b = decode(concat!(
            r#"{"metric":{"__name__":"cpu","host":"a"},"values":[1.5,2],"timestamps":[1000,2000]}"#,
            "\n\n",
            r#"{"metric":{"__name__":"x"},"values":["NaN","+Inf","-Inf","stale"],"timestamps":[1,2,3,4]}"#,
            "\r\n"
        ))
        .unwrap();
        assert_eq!(b.series.len(), 2);
        assert_eq!(b.series[0].samples, vec![Sample::new(1000, 1.5), Sample::new(2000, 2.0)]);
        let v: Vec<f64> = b.series[1].samples.iter().map(|s| s.value).collect();
        assert!(v[0].is_nan() && v[1] == f64::INFINITY && v[2] == f64::NEG_INFINITY);
        assert_eq!(v[3].to_bits(), STALE_NAN_BITS);
    }

    #[test]
    fn rejects_with_line_numbers() {
        let ok = r#"{"metric":{"__name__":"a"},"values":[1],"timestamps":[1]}"#;
        let cases = [
            ("not json", "invalid JSON"),
            (r#"{"metric":{"a":"b"},"values":[1],"timestamps":[1]}"#, "missing metric name"),
            (r#"{"metric":{"__name__":"a"},"values":[1,2],"timestamps":[1]}"#, "same length"),
            (r#"{"metric":{"__name__":"a","":"b"},"values":[1],"timestamps":[1]}"#, "invalid label name"),
            (r#"{"metric":{"__name__":"a","b":"x\u0000y"},"values":[1],"timestamps":[1]}"#, "0x00"),
            (r#"{"metric":{"__name__":"a"},"values":[1],"timestamps":[-1]}"#, "outside the supported range"),
            (r#"{"metric":{"__name__":"a"},"values":[1],"timestamps":[9223372036855]}"#, "outside the supported range"),
            (r#"{"metric":{"__name__":"a","b":"1","b":"2"},"values":[1],"timestamps":[1]}"#, "duplicate label"),
            (r#"{"metric":{"__name__":"a"},"values":["x"],"timestamps":[1]}"#, "invalid JSON"),
            (r#"{"metric":{"__name__":"a"},"values":[1],"timestamps":[1.5]}"#, "invalid JSON"),
        ];
        for (bad, why) in cases {
            let err = decode(&format!("{ok}\n{bad}\n{ok}")).unwrap_err();
            assert_eq!(err.line, 2, "{bad}");
            assert!(err.reason.contains(why), "{bad}: {}", err.reason);
        }
    }

    #[test]
    fn lines_reserve_what_their_samples_hold() {
        let ones = |n: usize| vec!["1"; n].join(",");
        let mut body = String::new();
        for (i, n) in [1usize, 7, 1000, 3, 20_000].into_iter().enumerate() {
            let l = format!(
                r#"{{"metric":{{"__name__":"m","i":"{i}"}},"values":[{}],"timestamps":[{}]}}"#,
                ones(n),
                ones(n)
            );
            body.push_str(&l);
            body.push('\n');
        }
        let mut reserved = 0usize;
        let batch = decode_lines_reserving(body.as_bytes(), SeriesLimits::default(), &mut |n| {
            reserved += n;
            Ok::<(), ()>(())
        })
        .unwrap();
        let held: usize = batch.series.iter().map(|s| s.samples.capacity() * std::mem::size_of::<Sample>()).sum();
        assert_eq!(batch.sample_count(), 21_011);
        // 4 bytes of JSON per sample, 16 held and 32 more while parsing.
        assert!(held > 3 * body.len(), "{held} vs {}", body.len());
        assert!(reserved >= held + 2 * 8 * 32_768, "reserved {reserved}, held {held}");
        // A refusal stops decoding with the budget's error.
        let refused = decode_lines_reserving(body.as_bytes(), SeriesLimits::default(), &mut |n| {
            if n > 100_000 {
                Err("no")
            } else {
                Ok(())
            }
        });
        assert!(matches!(refused, Err(ImportStop::Refused("no"))));
    }
}
