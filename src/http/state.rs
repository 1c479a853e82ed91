//! The state every handler reaches ([`AppState`]) and the query limits it is built with
//! ([`QueryConfig`]). Below the handlers and the router: it imports none of them.

use std::sync::Arc;

use tokio::sync::Semaphore;

use super::access::AccessPolicy;
use super::admission::Admission;
use super::error::ApiError;
use super::limits::Limits;
use super::remote_state::RemoteState;
use crate::backend::Backend;
use crate::metrics::Metrics;
use crate::promql::result_cache::ResultCache;
use crate::promql::{Engine, EngineOptions};
use crate::storage::{Querier, ReadLimits, Storage};
use crate::tenant::{Scope, ScopedQuerier};

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
    /// Whether requests act as tenants (`--tenants`; see `tenant.rs`).
    pub tenants: bool,
    /// Limits per tenant (`--tenant-limits-file`); `None`: none.
    pub tenant_limits: Option<Arc<super::tenant_limits::TenantLimitsHandle>>,
    /// When the tenant figures of `/metrics` were measured.
    pub tenant_figures: Arc<super::tenant_figures::TenantFigures>,
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
    /// Steps of range queries over the settled past (`--query-result-cache-size`; `None`: off).
    pub result_cache: Option<ResultCache>,
    /// The rule evaluator (`--rule-file`); `None` when no rules are configured.
    pub rules: Option<Arc<crate::rules::evaluator::Evaluator>>,
    /// The rule settings a replay uses (`--rule-evaluation-interval`, external labels, ...).
    pub rule_defaults: Arc<crate::rules::replay::Defaults>,
    /// One permit: the rule replay running, if any.
    pub replay_slot: Arc<Semaphore>,
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

    /// A reader for one request of `scope`: every read path reaches storage through this, so
    /// that it sees only its tenants' series (see [`crate::tenant::ScopedQuerier`]).
    pub fn querier(&self, scope: &Scope, limits: ReadLimits) -> Box<dyn Querier> {
        ScopedQuerier::confine(self.backend.querier(limits), scope)
    }

    /// [`AppState::querier`] for an answer without room for warnings (see
    /// [`Backend::complete_querier`]).
    pub fn complete_querier(&self, scope: &Scope, limits: ReadLimits) -> Box<dyn Querier> {
        ScopedQuerier::confine(self.backend.complete_querier(limits), scope)
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
            tenants: false,
            tenant_limits: None,
            tenant_figures: Arc::default(),
            admin_api: false,
            otlp_naming: crate::ingest::otlp::Naming::default(),
            flags: Arc::default(),
            slow_query: query.slow_query,
            started: std::time::SystemTime::now(),
            result_cache: (query.result_cache_bytes > 0).then(|| ResultCache::new(query.result_cache_bytes)),
            rules: None,
            rule_defaults: Arc::default(),
            replay_slot: Arc::new(Semaphore::new(1)),
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
    /// Bytes the query result cache may hold (0: no cache).
    pub result_cache_bytes: u64,
}

impl Default for QueryConfig {
    fn default() -> Self {
        Self {
            engine: EngineOptions::default(),
            max_concurrency: 20,
            slow_query: None,
            result_cache_bytes: crate::promql::result_cache::DEFAULT_BYTES,
        }
    }
}
