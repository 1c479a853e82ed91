//! `POST /api/v1/write`: Prometheus remote-write 1.0 and 2.0.
//!
//! | request | answer |
//! |---|---|
//! | valid, stored durably | 204, empty body (2.0: `X-Prometheus-Remote-Write-*-Written` headers) |
//! | bad snappy/protobuf, bad labels, bad timestamps, an invalid native histogram | 400, reason in the body; nothing written |
//! | body over `--max-request-bytes` (compressed, or as announced by the snappy header) | 413 |
//! | body that decodes to more memory than the whole `--max-inflight-bytes` | 413 |
//! | `Content-Type`/`Content-Encoding` other than protobuf + snappy | 415 |
//! | over `--max-concurrent-writes` or `--max-inflight-bytes` | 429 with `Retry-After` (senders retry) |
//! | storage failure | 500/503 (senders retry) |
//!
//! Every rejection is counted in `saltdb_write_requests_rejected_total{protocol,reason}` and its
//! samples (float and native histogram samples alike) in `saltdb_samples_rejected_total`. Native
//! histograms are stored like float samples and counted in `saltdb_samples_ingested_total`.
//! Exemplars are stored (see `storage/format/exemplars.rs`); those dropped, invalid (labels over 128
//! characters, a bad timestamp) or out of order and duplicate per series, are counted with
//! `reason="exemplar"` and do not fail the request, as in Prometheus.
//! Remote-write 2.0 answers carry `X-Prometheus-Remote-Write-Samples-Written` (float samples),
//! `-Histograms-Written` (native histogram samples) and `-Exemplars-Written`: exactly what was
//! stored, all 0 on a 4xx.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use super::error::ApiError;
use super::ingest::{self, Batch, Coding, Refusal};
use super::remote_state::decode_limits;
use super::state::AppState;
use crate::metrics::Protocol as MetricsProtocol;
use crate::remote::decode::{decode_write_known, DecodeError, Protocol, Stopped};
use crate::tenant::Scope;
use axum::Extension;

/// Content type of remote-write 2.0 requests.
pub const V2_CONTENT_TYPE: &str = "application/x-protobuf;proto=io.prometheus.write.v2.Request";

fn metrics_protocol(p: Protocol) -> MetricsProtocol {
    match p {
        Protocol::V1 => MetricsProtocol::RemoteWriteV1,
        Protocol::V2 => MetricsProtocol::RemoteWriteV2,
    }
}

/// Reads the protocol from `Content-Type` and checks `Content-Encoding: snappy`.
///
/// A missing `Content-Type` means 1.0, as the 2.0 spec asks receivers to assume.
///
/// # Errors
/// [`ApiError::UnsupportedMedia`] naming what was sent and what is accepted.
pub fn protocol_of(headers: &HeaderMap) -> Result<Protocol, ApiError> {
    match headers.get(header::CONTENT_ENCODING).map(|v| v.to_str().map(str::trim)) {
        Some(Ok(v)) if v.eq_ignore_ascii_case("snappy") => {}
        other => {
            let sent = match other {
                None => "none".to_owned(),
                Some(v) => format!("{:?}", v.unwrap_or("<not text>")),
            };
            return Err(ApiError::UnsupportedMedia(format!(
                "unsupported Content-Encoding {sent}: remote-write bodies must be snappy block format with Content-Encoding: snappy"
            )));
        }
    }
    let Some(ct) = headers.get(header::CONTENT_TYPE) else { return Ok(Protocol::V1) };
    let ct = ct.to_str().unwrap_or("");
    let mut parts = ct.split(';').map(str::trim);
    let media = parts.next().unwrap_or("");
    let proto = parts
        .filter_map(|p| p.split_once('='))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("proto"))
        .map(|(_, v)| v.trim().trim_matches('"'));
    if !media.eq_ignore_ascii_case("application/x-protobuf") {
        return Err(ApiError::UnsupportedMedia(format!(
            "unsupported Content-Type {ct:?}: use application/x-protobuf (remote-write 1.0) or {V2_CONTENT_TYPE}"
        )));
    }
    match proto {
        None | Some("prometheus.WriteRequest") => Ok(Protocol::V1),
        Some("io.prometheus.write.v2.Request") => Ok(Protocol::V2),
        Some(other) => Err(ApiError::UnsupportedMedia(format!(
            "unsupported remote-write message {other:?}: use prometheus.WriteRequest or io.prometheus.write.v2.Request"
        ))),
    }
}

/// The handler.
pub async fn write(
    State(state): State<Arc<AppState>>,
    Extension(scope): Extension<Scope>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let protocol = match protocol_of(&headers) {
        Ok(p) => p,
        Err(e) => {
            state.metrics.rejected(MetricsProtocol::RemoteWriteV1, "unsupported_media_type", 0, true);
            return e.into_response();
        }
    };
    let mp = metrics_protocol(protocol);
    let limits = decode_limits(&state.limits);
    let st = Arc::clone(&state);
    let metadata = state.remote.metadata.of(&scope.name());
    // The decoder reserves each step's memory (decompressed body, batch, prost's messages)
    // before allocating it.
    let stored = ingest::run(&state, &scope, mp, &headers, body, Coding::Raw, move |raw, reserve| {
        let decoded =
            decode_write_known(raw, protocol, &limits, Some(&st.remote.known_labels), reserve).map_err(|stop| {
                match stop {
                    Stopped::Rejected(rej) => {
                        let reason = rej.error.reason();
                        let samples = rej.samples;
                        let error = match rej.error {
                            DecodeError::TooLarge { limit, .. } => ApiError::TooLarge { limit },
                            _ => ApiError::BadData(rej.to_string()),
                        };
                        Refusal::Invalid { reason, samples, error }
                    }
                    Stopped::Refused(e) => Refusal::Budget(e),
                }
            })?;
        st.metrics.rejected(mp, "exemplar", decoded.exemplars_dropped, false);
        metadata.record(decoded.metadata);
        let sent = decoded.batch.exemplar_count();
        Ok((Batch::Packed(decoded.batch), sent))
    })
    .await;
    match stored {
        Ok(w) => {
            let mut resp = StatusCode::NO_CONTENT.into_response();
            if protocol == Protocol::V2 {
                let h = resp.headers_mut();
                h.insert("X-Prometheus-Remote-Write-Samples-Written", HeaderValue::from(w.samples));
                h.insert("X-Prometheus-Remote-Write-Histograms-Written", HeaderValue::from(w.histograms));
                h.insert("X-Prometheus-Remote-Write-Exemplars-Written", HeaderValue::from(w.exemplars));
            }
            // Out-of-order and duplicate exemplars storage left out.
            state.metrics.rejected(mp, "exemplar", w.report.saturating_sub(w.exemplars), false);
            resp
        }
        Err(e) => {
            let mut resp = e.into_response();
            if protocol == Protocol::V2 && resp.status().is_client_error() {
                let h = resp.headers_mut();
                for name in [
                    "X-Prometheus-Remote-Write-Samples-Written",
                    "X-Prometheus-Remote-Write-Histograms-Written",
                    "X-Prometheus-Remote-Write-Exemplars-Written",
                ] {
                    h.insert(name, HeaderValue::from(0u32));
                }
            }
            resp
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(ct: Option<&str>, ce: Option<&str>) -> HeaderMap {
        let mut h = HeaderMap::new();
        if let Some(ct) = ct {
            h.insert(header::CONTENT_TYPE, HeaderValue::from_str(ct).unwrap());
        }
        if let Some(ce) = ce {
            h.insert(header::CONTENT_ENCODING, HeaderValue::from_str(ce).unwrap());
        }
        h
    }

    #[test]
    fn content_negotiation() {
        let ok = |ct, ce| protocol_of(&headers(ct, ce)).ok();
        assert_eq!(ok(Some("application/x-protobuf"), Some("snappy")), Some(Protocol::V1));
        assert_eq!(ok(None, Some("snappy")), Some(Protocol::V1));
        assert_eq!(
            ok(Some("application/x-protobuf;proto=prometheus.WriteRequest"), Some("snappy")),
            Some(Protocol::V1)
        );
        assert_eq!(ok(Some(V2_CONTENT_TYPE), Some("SNAPPY")), Some(Protocol::V2));
        assert_eq!(
            ok(Some("application/x-protobuf; proto=\"io.prometheus.write.v2.Request\""), Some("snappy")),
            Some(Protocol::V2)
        );
        for (ct, ce) in [
            (Some("application/json"), Some("snappy")),
            (Some("application/x-protobuf;proto=io.prometheus.write.v3.Request"), Some("snappy")),
            (Some("application/x-protobuf"), Some("gzip")),
            (Some("application/x-protobuf"), None),
        ] {
            let err = protocol_of(&headers(ct, ce)).unwrap_err();
            assert_eq!(err.status_and_type().0, StatusCode::UNSUPPORTED_MEDIA_TYPE, "{ct:?} {ce:?}");
        }
    }
}
