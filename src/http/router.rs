//! Routes, their middleware and the fallbacks: the top of the HTTP layer, over the handlers and
//! the shared [`AppState`].

use std::sync::Arc;

use axum::routing::{get, post};
use axum::Router;

use super::api::{exemplars, labels, query, series, status};
use super::error::ApiError;
use super::state::AppState;
use super::{
    access, admin, api, export, federate, health, import, influx, metrics, opentsdb, otlp, remote_read, remote_write,
    tenant, ui,
};

/// The whole HTTP surface, behind the tenant-named URL forms (see [`tenant::TenantPaths`]).
pub fn router(state: Arc<AppState>) -> Router {
    Router::new().fallback_service(tenant::TenantPaths(routes(state)))
}

/// The routes and their middleware.
fn routes(state: Arc<AppState>) -> Router {
    let pages = ui::PAGES.iter().fold(Router::new(), |r, path| r.route(path, get(ui::page)));
    pages
        .route("/ui/{file}", get(ui::asset))
        .route("/api/v1/write", post(remote_write::write))
        .route("/api/v1/push", post(remote_write::write))
        .route("/api/v1/read", post(remote_read::read))
        .route("/api/v1/metadata", get(api::metadata::metadata))
        .route("/metrics", get(metrics::metrics))
        .route("/api/v1/import", post(import::import))
        .route("/api/v1/import/prometheus", post(import::import_prometheus))
        .route("/write", post(influx::write_v1))
        .route("/api/v2/write", post(influx::write_v2))
        .route("/ping", get(influx::ping).head(influx::ping))
        .route("/api/put", post(opentsdb::put))
        .route("/opentelemetry/v1/metrics", post(otlp::metrics))
        .route("/api/v1/otlp/v1/metrics", post(otlp::metrics))
        .route("/api/v1/export", get(export::export).post(export::export))
        .route("/federate", get(federate::federate).post(federate::federate))
        .route("/api/v1/query", get(query::instant).post(query::instant))
        .route("/api/v1/query_range", get(query::range).post(query::range))
        .route("/api/v1/series", get(series::series).post(series::series))
        .route("/api/v1/labels", get(labels::names).post(labels::names))
        .route("/api/v1/label/{name}/values", get(labels::values))
        .route("/api/v1/status/buildinfo", get(status::buildinfo))
        .route("/api/v1/status/windows", get(status::windows))
        .route("/api/v1/status/tenant", get(status::tenant))
        .route("/api/v1/status/tenants", get(api::tenants_status::tenants))
        .route("/api/v1/status/tsdb", get(api::cardinality::tsdb).post(api::cardinality::tsdb))
        .route("/api/v1/status/flags", get(api::flags::flags))
        .route("/api/v1/status/storage", get(api::storage_status::storage))
        .route("/api/v1/status/runtimeinfo", get(api::runtimeinfo::runtimeinfo))
        .route("/api/v1/query_exemplars", get(exemplars::query_exemplars).post(exemplars::query_exemplars))
        .route("/api/v1/admin/tsdb/delete_series", post(admin::delete_series).put(admin::delete_series))
        .route("/api/v1/admin/tsdb/delete_tenant", post(admin::delete_tenant).put(admin::delete_tenant))
        .route("/api/v1/admin/tsdb/snapshot", post(admin::snapshot).put(admin::snapshot))
        .route("/api/v1/rules", get(api::rules::rules).post(api::rules::rules))
        .route("/api/v1/rules/replay", post(api::replay::replay))
        .route("/api/v1/alerts", get(api::rules::alerts))
        .route("/prometheus/config/v1/rules", get(api::ruler::list))
        .route("/config/v1/rules", get(api::ruler::list))
        .route(
            "/prometheus/config/v1/rules/{namespace}",
            get(api::ruler::namespace).post(api::ruler::set).delete(api::ruler::delete_namespace),
        )
        .route(
            "/prometheus/config/v1/rules/{namespace}/{group}",
            get(api::ruler::group).delete(api::ruler::delete_group),
        )
        .route(
            "/config/v1/rules/{namespace}",
            get(api::ruler::namespace).post(api::ruler::set).delete(api::ruler::delete_namespace),
        )
        .route("/config/v1/rules/{namespace}/{group}", get(api::ruler::group).delete(api::ruler::delete_group))
        .route(
            "/rules/{namespace}",
            get(api::ruler::namespace).post(api::ruler::set).delete(api::ruler::delete_namespace),
        )
        .route("/rules/{namespace}/{group}", get(api::ruler::group).delete(api::ruler::delete_group))
        .route("/-/reload", post(api::rules::reload).put(api::rules::reload))
        .route("/-/healthy", get(health::healthy).head(health::healthy))
        .route("/-/ready", get(health::ready).head(health::ready))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        // The tenant is decided once access has said who the request is.
        .layer(axum::middleware::from_fn_with_state(state.clone(), tenant::resolve))
        // Access is checked inside the metrics layer, so refused requests are counted too.
        .layer(axum::middleware::from_fn_with_state(state.access.clone(), access::check))
        .layer(axum::middleware::from_fn_with_state(state.clone(), metrics::track))
        // Outermost: a panic in any handler is answered (500 in the error envelope) instead of
        // dropping the connection.
        .layer(tower_http::catch_panic::CatchPanicLayer::custom(answer_panic))
        .with_state(state)
}

/// The answer to a request whose handler panicked.
fn answer_panic(payload: Box<dyn std::any::Any + Send + 'static>) -> axum::response::Response {
    use axum::response::IntoResponse;
    let message = crate::containment::message(payload.as_ref());
    ApiError::Internal(format!("the request failed: a panic was contained ({message})")).into_response()
}

async fn not_found(uri: axum::http::Uri) -> ApiError {
    let path = uri.path();
    let shown = path.get(..200).filter(|_| path.len() > 200).map_or(path.to_owned(), |p| format!("{p}..."));
    ApiError::NotFound(format!("no endpoint at {shown}"))
}

/// A known path with the wrong method: 405 in the error envelope (axum's default has no body).
async fn method_not_allowed(method: axum::http::Method, uri: axum::http::Uri) -> ApiError {
    ApiError::MethodNotAllowed(format!("method {method} is not allowed on {}", uri.path()))
}
