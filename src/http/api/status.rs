//! `GET /api/v1/status/buildinfo` and `GET|POST /api/v1/query_exemplars`.

use axum::response::Response;
use serde_json::json;

use super::success;

/// Build information in Prometheus' shape. The empty `features` object tells Grafana the
/// data source is Prometheus-compatible without claiming Mimir/Thanos features.
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
            "features": {},
        }),
        Vec::new(),
    )
}

/// saltdb stores no exemplars: always an empty list.
pub async fn query_exemplars() -> Response {
    success(json!([]), Vec::new())
}
