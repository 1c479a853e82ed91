//! `GET /api/v1/status/runtimeinfo`: the process' runtime facts in Prometheus' shape (the keys
//! and types of Prometheus 2.42's answer), with saltdb's equivalents of Go's runtime figures:
//! `goroutineCount` is the process' thread count, `GOMAXPROCS` the parallelism the machine
//! offers, `GOGC`/`GODEBUG` are empty (no garbage collector). saltdb has no configuration
//! file, so the configuration was loaded, successfully, at start-up.

use std::sync::Arc;

use axum::extract::State;
use axum::response::Response;
use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::json;

use super::success;
use crate::http::state::AppState;

/// The runtime information.
pub async fn runtimeinfo(State(state): State<Arc<AppState>>) -> Response {
    let started = DateTime::<Utc>::from(state.started).to_rfc3339_opts(SecondsFormat::AutoSi, true);
    let cwd = std::env::current_dir().map(|d| d.display().to_string()).unwrap_or_default();
    let retention = state
        .backend
        .embedded()
        .and_then(|s| s.retention_ms())
        .map_or_else(|| "forever".to_owned(), crate::duration::format_prometheus);
    success(
        json!({
            "startTime": started,
            "CWD": cwd,
            "reloadConfigSuccess": true,
            "lastConfigTime": started,
            "corruptionCount": 0,
            "goroutineCount": threads(),
            "GOMAXPROCS": crate::cores::available(),
            "GOGC": "",
            "GODEBUG": "",
            "storageRetention": retention,
        }),
        Vec::new(),
    )
}

/// The process' threads (`Threads:` of `/proc/self/status`; 0 where unknown).
fn threads() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find_map(|l| l.strip_prefix("Threads:").and_then(|v| v.trim().parse().ok())))
        .unwrap_or(0)
}
