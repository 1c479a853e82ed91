//! Routes, shared state and the fallback.

use std::sync::Arc;

use axum::routing::{get, post};
use axum::Router;

use tokio::sync::Semaphore;

use super::access::AccessPolicy;
use super::admission::{Admission, DEFAULT_MAX_CONCURRENT_WRITES, DEFAULT_MAX_INFLIGHT_BYTES};
use super::api::{exemplars, labels, query, series, status};
use super::error::ApiError;
use super::import::SeriesLimits;
use super::remote_write::RemoteState;
use super::{
    access, admin, api, export, federate, health, import, influx, metrics, opentsdb, otlp, remote_read, remote_write,
    ui,
};
use crate::backend::Backend;
use crate::metrics::Metrics;
use crate::promql::{Engine, EngineOptions};
use crate::storage::Storage;

/// Default of `--remote-write-label-cache`.
pub const DEFAULT_LABEL_CACHE_BYTES: usize = 8 << 20;

/// Request limits.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Largest accepted request body, after decompression too.
    pub max_request_bytes: usize,
    /// Limits on each ingested series.
    pub series: SeriesLimits,
    /// Write requests (remote-write and import) handled at once; more get 429.
    pub max_concurrent_writes: usize,
    /// Memory all write requests in flight may hold together (bodies, decompressed and
    /// decoded forms); a request that does not fit gets 429.
    pub max_inflight_bytes: usize,
    /// Memory for the label sets of remote-write 1.0 series seen before (see
    /// [`crate::remote::known_labels`]); 0 turns the cache off.
    pub label_cache_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_request_bytes: 64 << 20,
            series: SeriesLimits::default(),
            max_concurrent_writes: DEFAULT_MAX_CONCURRENT_WRITES,
            max_inflight_bytes: DEFAULT_MAX_INFLIGHT_BYTES,
            label_cache_bytes: DEFAULT_LABEL_CACHE_BYTES,
        }
    }
}

/// What every handler can reach.
pub struct AppState {
    /// The database.
    pub backend: Backend,
    /// Request limits.
    pub limits: Limits,
    /// The PromQL evaluator with the server's query limits.
    pub engine: Engine,
    /// One permit per concurrently running query.
    pub query_slots: Arc<Semaphore>,
    /// Number of query slots (for messages).
    pub query_max_concurrency: usize,
    /// saltdb's own metrics.
    pub metrics: Metrics,
    /// Remote-write metadata.
    pub remote: RemoteState,
    /// The write budget: concurrent write requests and their bytes.
    pub admission: Admission,
    /// Who may call what (open by default).
    pub access: Arc<AccessPolicy>,
    /// Whether `/api/v1/admin/*` is enabled (`--enable-admin-api`; off by default).
    pub admin_api: bool,
    /// How OTLP metric names are translated.
    pub otlp_naming: crate::ingest::otlp::Naming,
    /// The command line's flags and values, for `/api/v1/status/flags` (empty in-process).
    pub flags: Arc<std::collections::BTreeMap<String, String>>,
    /// Queries that run at least this long are logged (`--query-log-slow`; `None`: off).
    pub slow_query: Option<std::time::Duration>,
    /// When the server started (`/api/v1/status/runtimeinfo`).
    pub started: std::time::SystemTime,
}

impl AppState {
    /// The embedded store, or a 501 naming `what` needs it when the server runs on another
    /// backend.
    ///
    /// # Errors
    /// [`ApiError::NotSupported`].
    pub fn embedded(&self, what: &str) -> Result<&Storage, ApiError> {
        self.backend.embedded().ok_or_else(|| {
            ApiError::NotSupported(format!("{what} is not available on the {} storage backend", self.backend.name()))
        })
    }

    /// State for a server over the embedded `storage`.
    pub fn new(storage: Storage, limits: Limits, query: QueryConfig) -> Self {
        Self::over(Backend::Embedded(storage), limits, query)
    }

    /// State for a server over `backend`.
    pub fn over(backend: Backend, limits: Limits, query: QueryConfig) -> Self {
        let slots = query.max_concurrency.max(1);
        Self {
            backend,
            limits,
            engine: Engine::new(query.engine),
            query_slots: Arc::new(Semaphore::new(slots)),
            query_max_concurrency: slots,
            metrics: Metrics::new(),
            remote: RemoteState::new(&limits),
            admission: Admission::new(limits.max_concurrent_writes, limits.max_inflight_bytes),
            access: Arc::new(AccessPolicy::default()),
            admin_api: false,
            otlp_naming: crate::ingest::otlp::Naming::default(),
            flags: Arc::default(),
            slow_query: query.slow_query,
            started: std::time::SystemTime::now(),
        }
    }
}

/// Query limits.
#[derive(Clone, Debug)]
pub struct QueryConfig {
    /// Evaluator limits: timeout, loaded samples, lookback.
    pub engine: EngineOptions,
    /// Queries evaluated at once; more wait for a slot until their timeout.
    pub max_concurrency: usize,
    /// Queries that run at least this long are logged at `warn` (`None`: off).
    pub slow_query: Option<std::time::Duration>,
}

impl Default for QueryConfig {
    fn default() -> Self {
        Self { engine: EngineOptions::default(), max_concurrency: 20, slow_query: None }
    }
}

/// The whole HTTP surface.
pub fn router(state: Arc<AppState>) -> Router {
    let pages = ui::PAGES.iter().fold(Router::new(), |r, path| r.route(path, get(ui::page)));
    pages
        .route("/ui/{file}", get(ui::asset))
        .route("/api/v1/write", post(remote_write::write))
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
        .route("/api/v1/status/tsdb", get(api::cardinality::tsdb).post(api::cardinality::tsdb))
        .route("/api/v1/status/flags", get(api::flags::flags))
        .route("/api/v1/status/storage", get(api::storage_status::storage))
        .route("/api/v1/status/runtimeinfo", get(api::runtimeinfo::runtimeinfo))
        .route("/api/v1/query_exemplars", get(exemplars::query_exemplars).post(exemplars::query_exemplars))
        .route("/api/v1/admin/tsdb/delete_series", post(admin::delete_series).put(admin::delete_series))
        .route("/api/v1/admin/tsdb/snapshot", post(admin::snapshot).put(admin::snapshot))
        .route("/-/healthy", get(health::healthy).head(health::healthy))
        .route("/-/ready", get(health::ready).head(health::ready))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
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
