//! `POST /api/v1/read`: Prometheus remote read. Answers `SAMPLES` (one snappy-compressed
//! `ReadResponse`, float samples and native histograms) or, when the client prefers it,
//! `STREAMED_XOR_CHUNKS` (frames of XOR chunks, and histogram chunks for native histograms);
//! see [`crate::remote::read`] for both encodings.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderMap};
use axum::response::Response;

use super::error::ApiError;
use super::state::AppState;
use super::{blocking, body};
use crate::matcher::Matcher;
use crate::remote::decode::DecodeError;
use crate::remote::proto::ResponseType;
use crate::remote::read;
use crate::sample::{MAX_TIMESTAMP_MS, MIN_TIMESTAMP_MS};
use crate::storage::ReadLimits;
use crate::tenant::{Scope, ScopedQuerier};
use axum::Extension;

/// Most samples (float and histogram samples alike) one remote-read request may load (across its
/// queries).
pub const MAX_READ_SAMPLES: usize = 20_000_000;

/// The handler.
///
/// # Errors
/// 400 for an undecodable request, a bad matcher, a query without a non-empty matcher or only
/// unsupported response types; 415 for a body that is not snappy; 422 over the sample limit;
/// 5xx when storage fails.
pub async fn read(
    State(state): State<Arc<AppState>>,
    Extension(scope): Extension<Scope>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    match headers.get(header::CONTENT_ENCODING).map(|v| v.to_str().map(str::trim)) {
        Some(Ok(v)) if v.eq_ignore_ascii_case("snappy") => {}
        _ => {
            return Err(ApiError::UnsupportedMedia(
                "remote-read requests must be snappy block format with Content-Encoding: snappy".into(),
            ))
        }
    }
    let raw = body::read_limited(&headers, body, state.limits.max_request_bytes).await?;
    let req = read::decode_request(&raw, state.limits.max_request_bytes).map_err(|e| match e {
        read::ReadError::Body(DecodeError::TooLarge { limit, .. }) => ApiError::TooLarge { limit },
        e @ read::ReadError::Expands { .. } => ApiError::Oversized(e.to_string()),
        other => ApiError::BadData(other.to_string()),
    })?;
    let response_type = read::negotiate(&req.accepted_response_types).map_err(|e| ApiError::BadData(e.to_string()))?;
    let mut queries: Vec<(Vec<Matcher>, i64, i64)> = Vec::with_capacity(req.queries.len());
    for (i, q) in req.queries.iter().enumerate() {
        let matchers = read::matchers(i, &q.matchers).map_err(|e| ApiError::BadData(e.to_string()))?;
        if matchers.iter().all(Matcher::matches_empty) {
            return Err(ApiError::BadData(format!(
                "query #{i}: at least one label matcher must not match the empty string"
            )));
        }
        // Nothing is stored outside the supported range; clamping keeps i64::MIN..i64::MAX
        // ranges (which some clients send for "everything") away from window arithmetic.
        let clamp = |t: i64| t.clamp(MIN_TIMESTAMP_MS, MAX_TIMESTAMP_MS);
        queries.push((matchers, clamp(q.start_timestamp_ms), clamp(q.end_timestamp_ms)));
    }
    let backend = state.backend.clone();
    let timeout = state.engine.options().timeout;
    let slot = super::api::query_slot(&state, timeout).await?;
    let notice = {
        let (limits, _cancel_on_drop) = blocking::read_limits(None, timeout);
        let q = ScopedQuerier::confine(backend.complete_querier(limits), &scope);
        super::downsampled::notice(q.as_ref(), queries.iter().map(|(_, start, end)| (*start, *end)))
    };
    let with_notice = |resp: Response| {
        let mut resp = resp;
        if let Some(v) = notice.clone() {
            resp.headers_mut().insert(super::downsampled::HEADER, v);
        }
        resp
    };
    if response_type == ResponseType::StreamedXorChunks {
        return streamed((backend, scope), queries, slot, timeout).await.map(with_notice);
    }
    let (limits, _cancel_on_drop) = blocking::read_limits(None, timeout);
    let results = blocking::run(move || {
        let _slot = slot;
        let mut left = MAX_READ_SAMPLES;
        let mut out = Vec::with_capacity(queries.len());
        for (matchers, start, end) in &queries {
            let querier = ScopedQuerier::confine(
                backend.complete_querier(ReadLimits { max_samples: Some(left), ..limits.clone() }),
                &scope,
            );
            let series = querier.select(matchers, *start, *end, None)?;
            left = left.saturating_sub(series.iter().map(|s| s.samples.len() + s.histograms.len()).sum());
            out.push(series);
        }
        Ok(out)
    })
    .await?;
    let resp = Response::builder()
        .header(header::CONTENT_TYPE, read::SAMPLES_CONTENT_TYPE)
        .header(header::CONTENT_ENCODING, "snappy")
        .body(Body::from(read::samples_response(&results)));
    resp.map(with_notice).map_err(|e| ApiError::Internal(format!("building response: {e}")))
}

/// `STREAMED_XOR_CHUNKS`: one frame per series (more past 1 MiB of chunks), framed as the
/// series is read and sent as the client takes it (a bounded pipe), so the response is never
/// held whole. The sample limit (float and histogram samples) counts across the request's
/// queries; past it, or on a storage failure, the transfer is cut (a 422 or 5xx when that
/// happens before the first frame).
async fn streamed(
    (backend, scope): (crate::backend::Backend, Scope),
    queries: Vec<(Vec<Matcher>, i64, i64)>,
    slot: tokio::sync::OwnedSemaphorePermit,
    timeout: std::time::Duration,
) -> Result<Response, ApiError> {
    let (tx, rx) = super::piped::pipe();
    let (limits, cancel_on_drop) = blocking::read_limits(None, timeout);
    tokio::task::spawn_blocking(move || {
        let (_slot, _cancel_on_drop) = (slot, cancel_on_drop);
        let mut read = 0usize;
        for (i, (matchers, start, end)) in queries.iter().enumerate() {
            let left = MAX_READ_SAMPLES.saturating_sub(read);
            let querier = ScopedQuerier::confine(
                backend.complete_querier(ReadLimits { max_samples: Some(left), ..limits.clone() }),
                &scope,
            );
            let result = querier.for_each_series(matchers, *start, *end, &mut |s| {
                read = read.saturating_add(s.samples.len() + s.histograms.len());
                let mut frame = Vec::new();
                read::write_frame(&mut frame, i, &s);
                tx.blocking_send(Ok(Bytes::from(frame))).is_ok()
            });
            let result = result.and_then(|()| {
                if read > MAX_READ_SAMPLES {
                    return Err(crate::storage::StorageError::TooManySamples { limit: MAX_READ_SAMPLES });
                }
                Ok(())
            });
            if let Err(e) = result {
                tracing::warn!(error = %e, "streamed remote read stopped early");
                let _ = tx.blocking_send(Err(e));
                return;
            }
        }
    });
    super::piped::response(read::STREAMED_CONTENT_TYPE, rx).await
}
