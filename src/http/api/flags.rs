//! `GET /api/v1/status/flags`: every `saltdb serve` flag and its value, as given or defaulted,
//! in Prometheus' shape (an object of flag name to string). Secrets show only whether they are
//! set. A server started without a command line (in-process) has no flags to show.

use std::sync::Arc;

use axum::extract::State;
use axum::response::Response;
use serde_json::Value;

use super::success;
use crate::http::state::AppState;

/// The flags.
pub async fn flags(State(state): State<Arc<AppState>>) -> Response {
    let map: serde_json::Map<String, Value> =
        state.flags.iter().map(|(k, v)| (k.clone(), Value::from(v.as_str()))).collect();
    success(Value::Object(map), Vec::new())
}
