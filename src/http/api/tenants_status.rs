//! `GET /api/v1/status/tenants`: every tenant with series on disk, its series in the newest
//! window and its share of the bytes on disk, estimated window by window as the window's bytes
//! times the tenant's share of its series (from the window postings of `__tenant__`). The
//! operator's: a tenant's token gets a 403. Embedded store only.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::State;
use axum::response::Response;
use axum::Extension;
use serde_json::json;

use super::success;
use crate::http::access::Identity;
use crate::http::error::ApiError;
use crate::http::state::AppState;
use crate::tenant::{TenantId, DEFAULT_TENANT, TENANT_LABEL};

/// One tenant's figures.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
struct Share {
    /// Series in the newest windows (of every retention class).
    series: u64,
    /// Windows it has series in.
    windows: u64,
    /// Estimated bytes on disk.
    bytes: f64,
}

/// The handler.
///
/// # Errors
/// 403 for a tenant's token; 501 on ClickHouse; 5xx when storage fails.
pub async fn tenants(
    State(state): State<Arc<AppState>>,
    identity: Option<Extension<Identity>>,
) -> Result<Response, ApiError> {
    if let Some(Extension(Identity::Tenant(t))) = identity {
        return Err(ApiError::Forbidden(format!(
            "the tenants' status is the operator's; the token sent is tenant {:?}'s",
            t.as_str()
        )));
    }
    let storage = state.embedded("the tenants' status")?.clone();
    let shares = crate::http::blocking::run(move || {
        let windows = storage.window_status()?;
        let split = storage.series_per_value(TENANT_LABEL)?;
        Ok(shares(&windows, &split))
    })
    .await?;
    let mut rows: Vec<(String, Share)> = shares.into_iter().collect();
    rows.sort_by(|a, b| b.1.bytes.total_cmp(&a.1.bytes).then_with(|| a.0.cmp(&b.0)));
    let data: Vec<serde_json::Value> = rows
        .iter()
        .map(|(tenant, s)| {
            json!({"tenant": tenant, "series": s.series, "windows": s.windows, "estimatedBytes": s.bytes.round() as u64})
        })
        .collect();
    Ok(success(json!({"tenants": state.tenants, "byTenant": data}), Vec::new()))
}

/// Each tenant's figures from the windows' series and bytes and their series per tenant value.
fn shares(windows: &[crate::storage::WindowStatus], split: &[crate::storage::WindowValues]) -> BTreeMap<String, Share> {
    let newest = windows.iter().map(|w| w.start_ms).max();
    let mut out: BTreeMap<String, Share> = BTreeMap::new();
    for w in windows {
        let of_tenants: Vec<(String, u64)> = split
            .iter()
            .find(|v| v.start_ms == w.start_ms && v.class == w.class)
            .map(|v| v.series.iter().map(|(t, n)| (TenantId::of_label_value(t).as_str().to_owned(), *n)).collect())
            .unwrap_or_default();
        let others: u64 = of_tenants.iter().map(|(_, n)| n).sum();
        let default = w.series.saturating_sub(others);
        let all = of_tenants.into_iter().chain((default > 0).then(|| (DEFAULT_TENANT.to_owned(), default)));
        for (tenant, n) in all {
            let share = out.entry(tenant).or_default();
            share.windows += 1;
            if Some(w.start_ms) == newest {
                share.series += n;
            }
            if w.series > 0 {
                share.bytes += w.bytes as f64 * n as f64 / w.series as f64;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::{WindowState, WindowStatus, WindowValues};

    fn window(start_ms: i64, series: u64, bytes: u64) -> WindowStatus {
        WindowStatus {
            start_ms,
            class: 0,
            end_ms: start_ms + 10,
            state: WindowState::Hot,
            series,
            samples: 0,
            bytes,
            downsampled_ms: None,
        }
    }

    #[test]
    fn bytes_follow_each_windows_series_shares() {
        let windows = [window(0, 4, 400), window(10, 10, 1000)];
        let split = [
            WindowValues { start_ms: 0, class: 0, series: vec![("a".into(), 1)] },
            WindowValues { start_ms: 10, class: 0, series: vec![("a".into(), 5), ("b".into(), 5)] },
        ];
        let s = shares(&windows, &split);
        assert_eq!(s["a"], Share { series: 5, windows: 2, bytes: 600.0 });
        assert_eq!(s["b"], Share { series: 5, windows: 1, bytes: 500.0 });
        assert_eq!(s["default"], Share { series: 0, windows: 1, bytes: 300.0 });
    }
}
