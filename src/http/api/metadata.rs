//! `GET /api/v1/metadata?metric=&limit=&limit_per_metric=`: metric metadata received through
//! remote-write, in Prometheus' shape: `{"status":"success","data":{"<metric>":[{"type":..,
//! "help":..,"unit":..}]}}`.

use std::sync::Arc;

use axum::extract::{RawQuery, State};
use axum::Json;
use serde_json::{json, Map, Value};

use crate::http::error::ApiError;
use crate::http::params::Params;
use crate::http::state::AppState;
use crate::tenant::Scope;
use axum::Extension;

fn limit(params: &Params, name: &str) -> Result<Option<usize>, ApiError> {
    match params.get(name) {
        None => Ok(None),
        Some(v) => {
            let n: i64 = v
                .parse()
                .map_err(|_| ApiError::BadData(format!("invalid parameter {name:?}: {v:?} is not an integer")))?;
            Ok(usize::try_from(n).ok())
        }
    }
}

/// The handler.
///
/// # Errors
/// 400 for a non-integer limit. Parameters it does not read are ignored, as Prometheus does.
pub async fn metadata(
    State(state): State<Arc<AppState>>,
    Extension(scope): Extension<Scope>,
    RawQuery(query): RawQuery,
) -> Result<Json<Value>, ApiError> {
    let params = Params::parse(query.as_deref(), None);
    let found = state.remote.metadata.query(
        &scope,
        params.get("metric"),
        limit(&params, "limit")?,
        limit(&params, "limit_per_metric")?,
    );
    let data: Map<String, Value> = found
        .into_iter()
        .map(|(metric, entries)| {
            let list = entries
                .into_iter()
                .map(|e| json!({"type": e.kind.api_name(), "help": e.help, "unit": e.unit}))
                .collect();
            (metric, Value::Array(list))
        })
        .collect();
    Ok(Json(json!({"status": "success", "data": data})))
}
