//! `GET /api/v1/status/storage`: saltdb's storage at a glance, for the web UI's storage page and
//! operators: bucket scheme and samples written per bucket since start (the skew the bucket
//! prefix is there to prevent), the in-memory head, window length, retention and the retention
//! classes (their rules, windows and bytes), the intervals of
//! the downsampled tiers seals build, bytes on disk per table and series counters. The windows themselves are `/api/v1/status/windows`. On
//! ClickHouse: the database's layout and each server's state (answering, taking the shard's
//! requests, and on replicated shards its replication: read-only, queue, delay, live replicas).

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
    if let crate::backend::Backend::ClickHouse(ch) = &state.backend {
        return clickhouse(ch.clone()).await;
    }
    let storage = state.embedded("the storage status")?.clone();
    let (config, bucketing, poisoned) = (storage.config().clone(), storage.bucketing(), storage.poisoned());
    let status = storage.clone();
    let (stats, head) = crate::http::blocking::run(move || Ok((status.stats()?, status.head_figures()))).await?;
    let rules = storage.retention_rules();
    let classes: Vec<Value> = storage
        .retention_classes()
        .into_iter()
        .map(|(id, _)| {
            let (windows, bytes) = stats.class_windows(id);
            json!({
                "name": storage.class_name(id),
                "retentionMs": storage.class_retention_ms(id),
                "rules": rules.iter().filter(|(_, c)| *c == id).map(|(r, _)| r.selector.clone()).collect::<Vec<_>>(),
                "windows": windows,
                "bytes": bytes,
            })
        })
        .collect();
    let tables: serde_json::Map<String, Value> =
        stats.table_bytes.iter().map(|(name, bytes)| ((*name).to_owned(), Value::from(*bytes))).collect();
    Ok(success(
        json!({
            "backend": "embedded",
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
            "retentionClasses": classes,
            "tierIntervalsMs": config.tier_intervals_ms,
            "downsampleAfter": config
                .downsample_after
                .iter()
                .map(|a| json!({ "afterMs": a.after_ms, "intervalMs": a.interval_ms }))
                .collect::<Vec<_>>(),
            "diskBytes": stats.disk_bytes,
            "tableBytes": tables,
            "seriesCreated": stats.series_created,
            "seriesTotal": stats.series_total,
            "poisoned": poisoned,
        }),
        Vec::new(),
    ))
}

async fn clickhouse(ch: crate::clickhouse::ClickHouse) -> Result<Response, ApiError> {
    let config = ch.config().clone();
    let states = crate::http::blocking::run(move || Ok(ch.replica_states())).await?;
    let shards: Vec<Value> = (0..config.shards.len())
        .map(|shard| {
            let replicas: Vec<Value> = states
                .iter()
                .filter(|r| r.shard == shard)
                .map(|r| {
                    let mut v = json!({
                        "url": r.url,
                        "current": r.current,
                        "up": r.error.is_none(),
                        "error": r.error,
                    });
                    if let (Some(rep), Some(map)) = (r.replication, v.as_object_mut()) {
                        map.insert("readonly".into(), rep.readonly.into());
                        map.insert("queue".into(), rep.queue.into());
                        map.insert("delaySeconds".into(), rep.delay_seconds.into());
                        map.insert("activeReplicas".into(), rep.active_replicas.into());
                        map.insert("totalReplicas".into(), rep.total_replicas.into());
                    }
                    v
                })
                .collect();
            json!({"shard": shard, "replicas": replicas})
        })
        .collect();
    Ok(success(
        json!({
            "backend": "clickhouse",
            "database": config.database,
            "buckets": config.buckets,
            "replicated": config.replicated,
            "insertQuorum": config.insert_quorum,
            "retentionMs": config.retention_ms,
            "shards": shards,
        }),
        Vec::new(),
    ))
}
