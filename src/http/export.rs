//! `GET|POST /api/v1/export?match[]=SELECTOR&start=&end=`: streams matching series as JSON
//! lines in the import format, one series in memory at a time.

use std::collections::HashSet;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, Method};
use axum::response::Response;
use serde_json::{Map, Value};

use super::error::ApiError;
use super::state::AppState;
use crate::ingest::json_sample::{float_json, histogram_json};
use crate::sample::{SeriesSamples, MAX_TIMESTAMP_MS, MIN_TIMESTAMP_MS};
use crate::tenant::Scope;
use axum::Extension;

/// One series as JSON lines (each with its trailing newline): its floats, then its native
/// histograms on a second line (the import format has one kind of value per line).
pub fn encode_line(s: &SeriesSamples) -> Vec<u8> {
    let metric: Map<String, Value> = s.labels.iter().map(|l| (l.name.clone(), Value::from(l.value.clone()))).collect();
    let mut out = Vec::new();
    if !s.samples.is_empty() {
        let line = serde_json::json!({
            "metric": metric,
            "values": s.samples.iter().map(|p| float_json(p.value)).collect::<Vec<_>>(),
            "timestamps": s.samples.iter().map(|p| p.timestamp_ms).collect::<Vec<_>>(),
        });
        out.extend(serde_json::to_vec(&line).unwrap_or_default());
        out.push(b'\n');
    }
    if !s.histograms.is_empty() {
        let line = serde_json::json!({
            "metric": metric,
            "histograms": s.histograms.iter().map(|h| histogram_json(&h.histogram)).collect::<Vec<_>>(),
            "timestamps": s.histograms.iter().map(|h| h.timestamp_ms).collect::<Vec<_>>(),
        });
        out.extend(serde_json::to_vec(&line).unwrap_or_default());
        out.push(b'\n');
    }
    out
}

/// The handler.
///
/// # Errors
/// 400 for a missing or invalid selector or time; a storage error before the first line is a
/// 5xx; one after it aborts the transfer (and is logged), as the status is already sent.
pub async fn export(
    State(state): State<Arc<AppState>>,
    Extension(scope): Extension<Scope>,
    method: Method,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let params = super::api::params(&state, &method, query.as_deref(), &headers, body).await?;
    let selectors = params.selectors("match[]")?;
    if selectors.is_empty() {
        return Err(ApiError::BadData("missing parameter \"match[]\": give at least one series selector".into()));
    }
    let start = params.time_ms("start", MIN_TIMESTAMP_MS)?;
    let end = params.time_ms("end", MAX_TIMESTAMP_MS)?;
    if end < start {
        return Err(ApiError::BadData("end timestamp must not be before start time".into()));
    }
    let (tx, rx) = super::piped::pipe();
    // Like a query: a slot, and the query timeout (a client that goes away stops the export
    // at its next line, when the send fails).
    let timeout = state.engine.options().timeout;
    let slot = super::api::query_slot(&state, timeout).await?;
    let (limits, cancel_on_drop) = super::blocking::read_limits(None, timeout);
    let querier = state.complete_querier(&scope, limits);
    let notice = super::downsampled::notice(querier.as_ref(), [(start, end)]);
    tokio::task::spawn_blocking(move || {
        let (_slot, _cancel_on_drop) = (slot, cancel_on_drop);
        let mut seen: HashSet<Vec<u8>> = HashSet::new();
        let dedupe = selectors.len() > 1;
        for matchers in &selectors {
            let result = querier.for_each_series(matchers, start, end, &mut |s| {
                if dedupe && !seen.insert(s.labels.to_bytes()) {
                    return true;
                }
                tx.blocking_send(Ok(Bytes::from(encode_line(&s)))).is_ok()
            });
            if let Err(e) = result {
                tracing::error!(error = %e, "export stopped early");
                let _ = tx.blocking_send(Err(e));
                return;
            }
        }
    });
    let mut resp = super::piped::response("application/stream+json", rx).await?;
    if let Some(v) = notice {
        resp.headers_mut().insert(super::downsampled::HEADER, v);
    }
    Ok(resp)
}
