//! `GET /api/v1/status/storage`: saltdb's storage at a glance, for the web UI's storage page and
//! operators: bucket scheme and samples written per bucket since start (the skew the bucket
//! prefix is there to prevent), the in-memory head, window length, retention, bytes on disk per
//! table and series counters. The windows themselves are `/api/v1/status/windows`.

use std::sync::Arc;

use axum::extract::State;
use axum::response::Response;
use serde_json::{json, Value};

use super::success;
use crate::http::error::ApiError;
use crate::http::state::AppState;

/// The storage status.
///
/// # Errors
/// 5xx when storage fails.
pub async fn storage(State(state): State<Arc<AppState>>) -> Result<Response, ApiError> {
    let storage = state.embedded("the storage status")?.clone();
    let (config, bucketing, poisoned) = (storage.config().clone(), storage.bucketing(), storage.poisoned());
    let (stats, head) = crate::http::blocking::run(move || Ok((storage.stats()?, storage.head_figures()))).await?;
    let tables: serde_json::Map<String, Value> =
        stats.table_bytes.iter().map(|(name, bytes)| ((*name).to_owned(), Value::from(*bytes))).collect();
    Ok(success(
        json!({
            "buckets": {
                "scheme": bucketing.scheme().as_str(),
                "count": bucketing.count(),
                "samplesWritten": stats.samples_per_bucket,
            },
            "head": {
                "samples": head.samples,
                "series": head.series,
                "bytes": head.bytes,
                "maxSamples": config.head.max_samples,
                "maxBytes": config.head.max_bytes,
                "flushIntervalMs": u64::try_from(config.head.max_age.as_millis()).unwrap_or(u64::MAX),
            },
            "windowMs": config.window_ms,
            "retentionMs": config.retention_ms,
            "diskBytes": stats.disk_bytes,
            "tableBytes": tables,
            "seriesCreated": stats.series_created,
            "seriesTotal": stats.series_total,
            "poisoned": poisoned,
        }),
        Vec::new(),
    ))
}
