//! Routes, shared state and the fallback.

use std::sync::Arc;

use axum::routing::{get, post};
use axum::Router;

use super::error::ApiError;
use super::import::SeriesLimits;
use super::remote_write::RemoteState;
use super::{api, export, health, import, metrics, remote_read, remote_write};
use crate::metrics::Metrics;
use crate::storage::Storage;

/// Request limits.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Largest accepted request body, after decompression too.
    pub max_request_bytes: usize,
    /// Limits on each ingested series.
    pub series: SeriesLimits,
}

impl Default for Limits {
    fn default() -> Self {
        Self { max_request_bytes: 64 << 20, series: SeriesLimits::default() }
    }
}

/// What every handler can reach.
pub struct AppState {
    /// The database.
    pub storage: Storage,
    /// Request limits.
    pub limits: Limits,
    /// saltdb's own metrics.
    pub metrics: Metrics,
    /// Remote-write metadata and in-flight limits.
    pub remote: RemoteState,
}

impl AppState {
    /// State with fresh metrics and remote-protocol state.
    pub fn new(storage: Storage, limits: Limits) -> Self {
        Self { storage, limits, metrics: Metrics::new(), remote: RemoteState::default() }
    }
}

/// The whole HTTP surface.
pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/api/v1/write", post(remote_write::write))
        .route("/api/v1/read", post(remote_read::read))
        .route("/api/v1/metadata", get(api::metadata::metadata))
        .route("/metrics", get(metrics::metrics))
        .route("/api/v1/import", post(import::import))
        .route("/api/v1/export", get(export::export).post(export::export))
        .route("/-/healthy", get(health::healthy).head(health::healthy))
        .route("/-/ready", get(health::ready).head(health::ready))
        .fallback(not_found)
        .layer(axum::middleware::from_fn_with_state(state.clone(), metrics::track))
        .with_state(state)
}

async fn not_found(uri: axum::http::Uri) -> ApiError {
    ApiError::NotFound(format!("no endpoint at {}", uri.path()))
}
