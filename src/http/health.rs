//! `/-/healthy` and `/-/ready`, as Prometheus answers them.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;

use super::state::AppState;

/// Always 200 while the process serves HTTP.
pub async fn healthy() -> &'static str {
    "saltdb is Healthy.\n"
}

/// 200 when writes are accepted; 503 once storage refuses writes after a failed commit.
pub async fn ready(State(state): State<Arc<AppState>>) -> (StatusCode, String) {
    match state.backend.embedded().and_then(|s| s.poisoned()) {
        None => (StatusCode::OK, "saltdb is Ready.\n".into()),
        Some(reason) => (StatusCode::SERVICE_UNAVAILABLE, format!("saltdb is not ready: {reason}\n")),
    }
}
