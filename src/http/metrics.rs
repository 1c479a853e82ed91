//! `GET /metrics` and the middleware that counts every request by route and status code.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::blocking;
use super::error::ApiError;
use super::state::AppState;
use super::tenant_figures::{measure, Due};
use crate::metrics::{StorageFigures, TEXT_CONTENT_TYPE};

/// Renders every metric, refreshing the storage figures first. Reads only counters and
/// metadata storage keeps current (no walk of an index or table that grows with the series),
/// but for the tenant figures, measured at the first scrape and then in the background at most
/// every `tenant_figures::MAX_AGE`.
///
/// # Errors
/// 5xx when storage cannot be measured.
pub async fn metrics(State(state): State<Arc<AppState>>) -> Result<Response, ApiError> {
    let st = state.clone();
    if let Some(cache) = &state.result_cache {
        state.metrics.set_result_cache(&cache.figures());
    }
    if let Some(limits) = &state.tenant_limits {
        state.metrics.set_tenant_active_series(&limits.active_series());
    }
    if state.tenants {
        refresh_tenant_figures(&state).await;
    }
    let text = blocking::run(move || {
        // The embedded store's figures, or the ClickHouse shards' counters.
        let storage = match &st.backend {
            crate::backend::Backend::Embedded(s) => s,
            crate::backend::Backend::ClickHouse(c) => {
                st.metrics.set_clickhouse(&c.replica_figures());
                return Ok(st.metrics.render());
            }
        };
        let stats = storage.stats()?;
        let engine = storage.engine_stats()?;
        let windows_by_class = storage
            .retention_classes()
            .into_iter()
            .map(|(id, _)| {
                let (windows, bytes) = stats.class_windows(id);
                (storage.class_name(id), windows, bytes)
            })
            .collect();
        let figures = StorageFigures {
            series_total: stats.series_total,
            active_series: storage.active_series(),
            index_rows_scanned: crate::storage::index_rows_scanned(),
            series_created: stats.series_created,
            samples_per_bucket: stats.samples_per_bucket,
            windows: stats.windows.len() as u64,
            windows_by_resolution: by_resolution(&stats.windows),
            windows_by_class,
            disk_bytes: stats.disk_bytes,
            table_bytes: stats.table_bytes,
            engine: Some(engine),
        };
        st.metrics.set_storage(&figures, st.remote.metadata.len());
        st.metrics.set_label_cache(st.remote.known_labels.bytes());
        Ok(st.metrics.render())
    })
    .await?;
    let text = match &state.rules {
        Some(rules) => text + &crate::rules::exposition::render(&rules.groups(), &rules.durations()),
        None => text,
    };
    Ok(([(header::CONTENT_TYPE, TEXT_CONTENT_TYPE)], text).into_response())
}

/// Measures the tenant figures when none were, or starts a refresh in the background when
/// they are old (see `tenant_figures.rs`). A failure is logged; the scrape goes on.
async fn refresh_tenant_figures(state: &Arc<AppState>) {
    let Some(storage) = state.backend.embedded().cloned() else { return };
    let due = state.tenant_figures.due();
    if due == Due::Fresh {
        return;
    }
    let st = Arc::clone(state);
    let run = move || {
        let measured = measure(&storage);
        match &measured {
            Ok(rows) => {
                let rows: Vec<(String, u64, u64)> =
                    rows.iter().map(|(t, s)| (t.clone(), s.series, s.bytes.round() as u64)).collect();
                st.metrics.set_tenant_figures(&rows, chrono::Utc::now().timestamp());
            }
            Err(e) => tracing::warn!(error = %e, "measuring the tenants' series and bytes failed"),
        }
        st.tenant_figures.measured(measured.is_ok());
    };
    let task = tokio::task::spawn_blocking(run);
    if due == Due::Now {
        if let Err(e) = task.await {
            tracing::warn!(error = %e, "the tenants' figures task failed");
        }
    }
}

/// Counts the request in `saltdb_http_requests_total` and times it in
/// `saltdb_http_request_duration_seconds`, labelled with the route pattern (never the raw path,
/// so label cardinality stays bounded).
pub async fn track(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let route = req.extensions().get::<MatchedPath>().map_or_else(|| "other".to_owned(), |p| p.as_str().to_owned());
    let started = Instant::now();
    let resp = next.run(req).await;
    state.metrics.observe_http(&route, resp.status().as_u16(), started.elapsed().as_secs_f64());
    resp
}

/// Windows and their bytes per resolution kept (`raw`, `5m`, ...), finest first.
fn by_resolution(windows: &[crate::storage::WindowStats]) -> Vec<(String, u64, u64)> {
    let mut by: std::collections::BTreeMap<i64, (u64, u64)> = std::collections::BTreeMap::new();
    for w in windows {
        let e = by.entry(w.downsampled_ms.unwrap_or(0)).or_default();
        e.0 += 1;
        e.1 += w.hot_bytes + w.chunk_bytes;
    }
    by.into_iter()
        .map(|(ms, (n, bytes))| (if ms == 0 { "raw".to_owned() } else { crate::duration::format_ms(ms) }, n, bytes))
        .collect()
}
