//! `GET|POST /api/v1/status/tsdb`: cardinality statistics in Prometheus' shape (`headStats`,
//! `seriesCountByMetricName`, `labelValueCountByLabelName`, `memoryInBytesByLabelName`,
//! `seriesCountByLabelValuePair`) plus VictoriaMetrics' fields (`totalSeries`,
//! `totalLabelValuePairs`, `seriesCountByLabelName`, `seriesCountByFocusLabelValue`) and its
//! parameters: `topN` (Prometheus 2.x: `limit`), `date` (`YYYY-MM-DD`, UTC; default today),
//! `match[]` and `focusLabel`. Where Prometheus reports its head block, saltdb reports the
//! series with data on that day, counted from the per-window index.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, Method};
use axum::response::Response;
use serde_json::{json, Value};

use super::{params, query_slot, success};
use crate::http::error::ApiError;
use crate::http::params::Params;
use crate::http::state::AppState;
use crate::storage::{Cardinality, CardinalityQuery, Stat};
use crate::tenant::{Scope, TENANT_LABEL};
use axum::Extension;

/// Entries per list when `topN` is not given (Prometheus and VictoriaMetrics both show 10).
const DEFAULT_TOP_N: usize = 10;
/// The largest `topN` accepted.
const MAX_TOP_N: usize = 10_000;
const DAY_MS: i64 = 86_400_000;

/// The cardinality of one day.
///
/// # Errors
/// 400 for bad parameters; 503 past the query timeout; 5xx on storage failure.
pub async fn tsdb(
    State(state): State<Arc<AppState>>,
    Extension(scope): Extension<Scope>,
    method: Method,
    RawQuery(q): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let p = params(&state, &method, q.as_deref(), &headers, body).await?;
    let start_ms = day_start(&p)?;
    // The tenant's series only; one more of each list, as the tenant label's may be taken out.
    let mut selectors = p.selectors("match[]")?;
    if selectors.is_empty() && scope.matcher().is_some() {
        selectors.push(Vec::new());
    }
    let top_n = top_n(&p)?;
    let query = CardinalityQuery {
        start_ms,
        end_ms: start_ms + DAY_MS - 1,
        selectors: selectors.iter().map(|m| scope.select(m).into_owned()).collect(),
        top_n: top_n + 1,
        focus_label: p.get("focusLabel").map(str::to_owned),
    };
    let timeout = state.engine.options().timeout;
    let slot = query_slot(&state, timeout).await?;
    let (limits, _cancel_on_drop) = crate::http::blocking::read_limits(None, timeout);
    let storage = state.embedded("the cardinality statistics")?.clone();
    let c = crate::http::blocking::run(move || {
        let _slot = slot;
        Ok(storage.cardinality(&query, &limits)?)
    })
    .await?;
    let c = shown(c, &scope, top_n);
    Ok(success(body_of(&c, start_ms), Vec::new()))
}

/// The statistics as `scope` sees them: for one tenant, without its tenant label (its pair is
/// on every series of a tenant other than the default); each list cut to `top_n`.
fn shown(mut c: Cardinality, scope: &Scope, top_n: usize) -> Cardinality {
    let hides = matches!(scope, Scope::One(_));
    let pair_prefix = format!("{TENANT_LABEL}=");
    for list in [
        &mut c.series_by_metric_name,
        &mut c.series_by_label_name,
        &mut c.series_by_label_pair,
        &mut c.values_by_label_name,
        &mut c.bytes_by_label_name,
        &mut c.series_by_focus_value,
    ] {
        if hides {
            list.retain(|s| s.name != TENANT_LABEL && !s.name.starts_with(&pair_prefix));
        }
        list.truncate(top_n);
    }
    if hides && matches!(scope, Scope::One(t) if !t.is_default()) && c.total_series > 0 {
        c.distinct_label_pairs = c.distinct_label_pairs.saturating_sub(1);
        c.total_label_value_pairs = c.total_label_value_pairs.saturating_sub(c.total_series);
    }
    c
}

/// `topN` (or Prometheus' `limit`): a positive integer up to [`MAX_TOP_N`].
fn top_n(p: &Params) -> Result<usize, ApiError> {
    let Some((name, v)) = p.get("topN").map(|v| ("topN", v)).or_else(|| p.get("limit").map(|v| ("limit", v))) else {
        return Ok(DEFAULT_TOP_N);
    };
    match v.parse::<usize>() {
        Ok(n) if (1..=MAX_TOP_N).contains(&n) => Ok(n),
        _ => Err(ApiError::BadData(format!("invalid parameter {name:?}: {v:?} is not an integer in 1..={MAX_TOP_N}"))),
    }
}

/// Start (ms, UTC midnight) of the day named by `date` (`YYYY-MM-DD`), today by default.
fn day_start(p: &Params) -> Result<i64, ApiError> {
    let Some(v) = p.get("date") else {
        let now = crate::storage::now_ms();
        return Ok(now - now.rem_euclid(DAY_MS));
    };
    let date = chrono::NaiveDate::parse_from_str(v, "%Y-%m-%d")
        .map_err(|_| ApiError::BadData(format!("invalid parameter \"date\": {v:?} is not a date like 2024-05-31")))?;
    Ok(date.and_time(chrono::NaiveTime::MIN).and_utc().timestamp_millis())
}

fn stats(list: &[Stat]) -> Value {
    list.iter().map(|s| json!({"name": s.name, "value": s.value})).collect()
}

/// Prometheus' fields, then VictoriaMetrics'. `chunkCount` is 0: saltdb's chunks are not
/// Prometheus' head chunks; `minTime`/`maxTime` are the day's bounds.
fn body_of(c: &Cardinality, start_ms: i64) -> Value {
    json!({
        "headStats": {
            "numSeries": c.total_series,
            "numLabelPairs": c.distinct_label_pairs,
            "chunkCount": 0,
            "minTime": start_ms,
            "maxTime": start_ms + DAY_MS - 1,
        },
        "seriesCountByMetricName": stats(&c.series_by_metric_name),
        "labelValueCountByLabelName": stats(&c.values_by_label_name),
        "memoryInBytesByLabelName": stats(&c.bytes_by_label_name),
        "seriesCountByLabelValuePair": stats(&c.series_by_label_pair),
        "totalSeries": c.total_series,
        "totalLabelValuePairs": c.total_label_value_pairs,
        "seriesCountByLabelName": stats(&c.series_by_label_name),
        "seriesCountByFocusLabelValue": stats(&c.series_by_focus_value),
    })
}
