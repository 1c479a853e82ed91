//! `GET|POST /api/v1/series`.

use std::collections::BTreeSet;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, Method};
use axum::response::Response;
use serde_json::{Map, Value};

use super::{apply_limit, limit, params, success, time_range};
use crate::http::blocking;
use crate::http::error::ApiError;
use crate::http::router::AppState;
use crate::labels::Labels;

/// Label sets of the series matching any `match[]` with data in `[start, end]`.
///
/// # Errors
/// 400 without `match[]` or with bad parameters; 5xx on storage failure.
pub async fn series(
    State(state): State<Arc<AppState>>,
    method: Method,
    RawQuery(q): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let p = params(&state, &method, q.as_deref(), &headers, body).await?;
    p.reject_unknown(&["match[]", "start", "end", "limit"])?;
    let selectors = p.selectors("match[]")?;
    if selectors.is_empty() {
        return Err(ApiError::BadData("no match[] parameter provided".into()));
    }
    let (start, end) = time_range(&p)?;
    let limit = limit(&p)?;
    let storage = state.storage.clone();
    let mut found: Vec<Labels> = blocking::run(move || {
        let mut all = BTreeSet::new();
        for matchers in &selectors {
            all.extend(storage.series(matchers, start, end)?);
        }
        Ok(all.into_iter().collect())
    })
    .await?;
    let warnings = apply_limit(&mut found, limit);
    let data: Vec<Value> = found.iter().map(labels_json).collect();
    Ok(success(Value::from(data), warnings))
}

/// A label set as a JSON object.
pub fn labels_json(labels: &Labels) -> Value {
    Value::Object(labels.iter().map(|l| (l.name.clone(), Value::from(l.value.clone()))).collect::<Map<_, _>>())
}
