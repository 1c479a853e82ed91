//! The Prometheus HTTP API: parameters and response shapes as Prometheus has them.

pub mod cardinality;
pub mod exemplars;
pub mod flags;
pub mod histogram_json;
pub mod labels;
pub mod metadata;
pub mod query;
pub(crate) mod query_kind;
pub mod replay;
pub mod ruler;
pub mod rules;
pub mod runtimeinfo;
pub mod series;
pub mod slow_log;
pub(crate) mod small_queries;
pub mod status;
pub mod storage_status;
pub mod streamed;
pub mod tenants_status;

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderMap, Method};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use super::body::read_decoded;
use super::error::ApiError;
use super::params::Params;
use super::state::AppState;
use crate::sample::{MAX_TIMESTAMP_MS, MIN_TIMESTAMP_MS};
use crate::storage::Querier;

/// `{"status":"success","data":...}`, with `warnings` when there are any.
pub fn success(data: Value, warnings: Vec<String>) -> Response {
    let mut body = serde_json::json!({"status": "success", "data": data});
    if !warnings.is_empty() {
        body["warnings"] = Value::from(warnings);
    }
    axum::Json(body).into_response()
}

/// Query string plus, for POST, the form body (Prometheus accepts both).
///
/// # Errors
/// 413 over the body limit (also after gzip); 415 for a POST body that is not a form or has a
/// coding other than gzip.
pub async fn params(
    state: &Arc<AppState>,
    method: &Method,
    query: Option<&str>,
    headers: &HeaderMap,
    body: Body,
) -> Result<Params, ApiError> {
    if method != Method::POST {
        return Ok(Params::parse(query, None));
    }
    let ct = headers.get(axum::http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    let is_form =
        ct.split(';').next().is_some_and(|t| t.trim().eq_ignore_ascii_case("application/x-www-form-urlencoded"));
    // gzip is decoded under the same limit (a bomb gets 413); another coding gets 415 instead of
    // being parsed as a form.
    let form = read_decoded(headers, body, state.limits.max_request_bytes, None).await?;
    if !form.is_empty() && !is_form {
        return Err(ApiError::UnsupportedMedia(format!(
            "POST body must be application/x-www-form-urlencoded, got {ct:?}"
        )));
    }
    Ok(Params::parse(query, Some(&form)))
}

/// The `start`/`end` pair with Prometheus' defaults (all time), checked for order.
///
/// # Errors
/// 400 for unparsable times or `end < start`.
pub fn time_range(p: &Params) -> Result<(i64, i64), ApiError> {
    let start = p.time_ms("start", MIN_TIMESTAMP_MS)?;
    let end = p.time_ms("end", MAX_TIMESTAMP_MS)?;
    if end < start {
        return Err(ApiError::BadData("invalid parameter \"end\": end timestamp must not be before start time".into()));
    }
    Ok((start, end))
}

/// The `limit` parameter: 0 or absent means no limit.
///
/// # Errors
/// 400 for a negative or non-integer limit.
pub fn limit(p: &Params) -> Result<Option<usize>, ApiError> {
    match p.get("limit") {
        None => Ok(None),
        Some(v) => match v.parse::<i64>() {
            Ok(0) => Ok(None),
            Ok(n) if n > 0 => Ok(usize::try_from(n).ok()),
            _ => Err(ApiError::BadData(format!("invalid parameter \"limit\": {v:?} is not a non-negative integer"))),
        },
    }
}

/// Waits (at most `timeout`) for one of the query slots that bound concurrent reads.
///
/// # Errors
/// 503 when no slot frees up in time.
pub async fn query_slot(state: &AppState, timeout: Duration) -> Result<tokio::sync::OwnedSemaphorePermit, ApiError> {
    tokio::time::timeout(timeout, Arc::clone(&state.query_slots).acquire_owned())
        .await
        .map_err(|_| {
            ApiError::Timeout(format!("query timed out waiting for one of {} query slots", state.query_max_concurrency))
        })?
        .map_err(|_| ApiError::Internal("query slots closed".into()))
}

/// Runs `lookup` for every selector on the blocking pool and returns the sorted, deduplicated
/// union over `[start, end]`, truncated to `limit` with the warning Prometheus gives then. Like
/// a query, it takes a query slot and reads within the query timeout and sample limit; each
/// lookup stops after `limit + 1` results (one more shows that the answer was truncated). When
/// the querier holds every selector's answer in memory (`held`, see
/// [`Querier::held_series`]), that is the answer, given at once.
///
/// # Errors
/// The storage error of the first failing lookup; 503 past the timeout.
pub async fn union_over_selectors<T, H, F>(
    state: &Arc<AppState>,
    scope: &crate::tenant::Scope,
    selectors: Vec<Vec<crate::matcher::Matcher>>,
    (start, end): (i64, i64),
    limit: Option<usize>,
    (held, lookup): (H, F),
) -> Result<(Vec<T>, Vec<String>), ApiError>
where
    T: Ord + Send + 'static,
    H: Fn(&dyn Querier, &[crate::matcher::Matcher], i64, i64, Option<usize>) -> Option<Vec<T>>,
    F: Fn(&dyn Querier, &[crate::matcher::Matcher], i64, i64, Option<usize>) -> crate::storage::Result<Vec<T>>
        + Send
        + 'static,
{
    let timeout = state.engine.options().timeout;
    let each = limit.map(|n| n.saturating_add(1));
    // An answer held in memory is given here, without a hand-off to the blocking pool (two
    // thread switches, most of such a request's time).
    let (limits, cancel_on_drop) = super::blocking::read_limits(Some(state.engine.options().max_samples), timeout);
    let querier = state.querier(scope, limits);
    let mut from_memory = std::collections::BTreeSet::new();
    let all_held =
        selectors.iter().all(|m| held(&*querier, m, start, end, each).map(|v| from_memory.extend(v)).is_some());
    if all_held {
        let mut found: Vec<T> = from_memory.into_iter().collect();
        let mut warnings = apply_limit(&mut found, limit);
        warnings.extend(querier.warnings());
        return Ok((found, warnings));
    }
    let slot = query_slot(state, timeout).await?;
    let _cancel_on_drop = cancel_on_drop;
    let mut found: (Vec<T>, Vec<String>) = super::blocking::run(move || {
        let _slot = slot;
        let mut all = std::collections::BTreeSet::new();
        for matchers in &selectors {
            all.extend(lookup(&*querier, matchers, start, end, each)?);
        }
        Ok((all.into_iter().collect(), querier.warnings()))
    })
    .await?;
    let mut warnings = apply_limit(&mut found.0, limit);
    warnings.extend(found.1);
    Ok((found.0, warnings))
}

/// Truncates to `limit`, returning the warning Prometheus gives when it does.
pub fn apply_limit<T>(items: &mut Vec<T>, limit: Option<usize>) -> Vec<String> {
    match limit {
        Some(n) if items.len() > n => {
            items.truncate(n);
            vec!["results truncated due to limit".into()]
        }
        _ => Vec::new(),
    }
}
