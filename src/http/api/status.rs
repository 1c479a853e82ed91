//! `GET /api/v1/status/buildinfo`, `/api/v1/status/windows` and `/api/v1/status/tenant`.

use axum::response::Response;
use serde_json::json;

use super::success;

/// Build information in Prometheus' shape. `features.ruler_config_api` tells Grafana's alerting
/// UI that rule groups can be created and edited through the ruler API (`api/ruler.rs`), as
/// Mimir reports it (Grafana's `discoverDataSourceFeatures`, `buildInfo.ts`).
pub async fn buildinfo() -> Response {
    success(
        json!({
            "version": env!("CARGO_PKG_VERSION"),
            "revision": "",
            "branch": "",
            "buildUser": "",
            "buildDate": "",
            "goVersion": "",
            "application": "saltdb",
            "features": {"ruler_config_api": "true"},
        }),
        Vec::new(),
    )
}

/// `GET /api/v1/status/windows`: every time window with its retention class, state, series,
/// samples and bytes (`start`/`end` in milliseconds since the epoch).
///
/// # Errors
/// 5xx when storage fails.
pub async fn windows(
    axum::extract::State(state): axum::extract::State<std::sync::Arc<crate::http::state::AppState>>,
) -> Result<Response, crate::http::error::ApiError> {
    let storage = state.embedded("the window status")?.clone();
    let status = storage.clone();
    let windows = crate::http::blocking::run(move || Ok(status.window_status()?)).await?;
    let data: Vec<serde_json::Value> = windows
        .iter()
        .map(|w| {
            json!({
                "start": w.start_ms,
                "end": w.end_ms,
                "retentionClass": storage.class_name(w.class),
                "retentionMs": storage.class_retention_ms(w.class),
                "state": w.state.as_str(),
                "series": w.series,
                "samples": w.samples,
                "bytes": w.bytes,
                "downsampledMs": w.downsampled_ms,
            })
        })
        .collect();
    Ok(success(serde_json::Value::from(data), Vec::new()))
}

/// `GET /api/v1/status/tenant`: whether the server serves tenants (`--tenants`) and as which
/// tenant this request reads (`default` when it names none; a token's own tenant), for the web
/// UI's tenant picker.
pub async fn tenant(
    axum::extract::State(state): axum::extract::State<std::sync::Arc<crate::http::state::AppState>>,
    axum::Extension(scope): axum::Extension<crate::tenant::Scope>,
) -> Response {
    success(json!({"tenants": state.tenants, "tenant": scope.name()}), Vec::new())
}
