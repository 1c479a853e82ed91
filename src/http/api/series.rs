//! `GET|POST /api/v1/series`.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, Method};
use axum::response::Response;
use serde_json::{Map, Value};

use super::streamed::{self, ArrayPieces};
use super::{limit, params, time_range, union_over_selectors};
use crate::http::error::ApiError;
use crate::http::state::AppState;
use crate::labels::Labels;
use crate::tenant::Scope;
use axum::Extension;

/// Label sets of the series matching any `match[]` with data in `[start, end]`.
///
/// # Errors
/// 400 without `match[]` or with bad parameters; 5xx on storage failure.
pub async fn series(
    State(state): State<Arc<AppState>>,
    Extension(scope): Extension<Scope>,
    method: Method,
    RawQuery(q): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let p = params(&state, &method, q.as_deref(), &headers, body).await?;
    let selectors = p.selectors("match[]")?;
    if selectors.is_empty() {
        return Err(ApiError::BadData("no match[] parameter provided".into()));
    }
    let (found, warnings) = union_over_selectors(
        &state,
        &scope,
        selectors,
        time_range(&p)?,
        limit(&p)?,
        (|q, m, a, b, n| q.held_series(m, a, b, n), |q, m, a, b, n| q.series(m, a, b, n)),
    )
    .await?;
    // Streamed: each label set is written and dropped as the client reads.
    let tail = format!("]{}}}", streamed::warnings_json("warnings", &warnings));
    let write = |out: &mut String, labels: Labels| out.push_str(&labels_json(&labels).to_string());
    Ok(streamed::json_response(ArrayPieces::new("{\"status\":\"success\",\"data\":[".into(), found, write, tail)))
}

/// A label set as a JSON object.
pub fn labels_json(labels: &Labels) -> Value {
    Value::Object(labels.iter().map(|l| (l.name.clone(), Value::from(l.value.clone()))).collect::<Map<_, _>>())
}
