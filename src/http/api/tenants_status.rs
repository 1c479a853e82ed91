//! `GET /api/v1/status/tenants`: every tenant with series on disk, its series in the newest
//! window and its share of the bytes on disk (measured as `http/tenant_figures.rs` says). The
//! operator's: a tenant's token gets a 403. Embedded store only.

use std::sync::Arc;

use axum::extract::State;
use axum::response::Response;
use axum::Extension;
use serde_json::json;

use super::success;
use crate::http::access::Identity;
use crate::http::error::ApiError;
use crate::http::state::AppState;
use crate::http::tenant_figures::measure;

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
    let rows = crate::http::blocking::run(move || Ok(measure(&storage)?)).await?;
    let data: Vec<serde_json::Value> = rows
        .iter()
        .map(|(tenant, s)| {
            json!({"tenant": tenant, "series": s.series, "windows": s.windows, "estimatedBytes": s.bytes.round() as u64})
        })
        .collect();
    Ok(success(json!({"tenants": state.tenants, "byTenant": data}), Vec::new()))
}
