//! Starting and stopping a server: open storage, apply retention, bind, serve, shut down.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::backend::Backend;
use crate::http::access::AccessPolicy;
use crate::http::connections::{self, ConnectionLimits};
use crate::http::tenant_limits::{self, TenantLimitsHandle};
use crate::http::tls::{self, TlsError, TlsFiles};
use crate::http::{router, AppState, Limits, QueryConfig};
use crate::storage::{Storage, StorageConfig, StorageError};

/// Everything `saltdb serve` needs.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// Address to listen on (port 0 picks a free one).
    pub listen: SocketAddr,
    /// Storage settings (of the embedded store).
    pub storage: StorageConfig,
    /// Run on these ClickHouse shards instead of the embedded store (`--storage clickhouse`).
    pub clickhouse: Option<crate::clickhouse::ClickHouseConfig>,
    /// Request limits.
    pub limits: Limits,
    /// Open connections and their timeouts.
    pub connections: ConnectionLimits,
    /// Query limits.
    pub query: QueryConfig,
    /// Background retention and sealing.
    pub maintenance: Maintenance,
    /// Credentials for the read and write paths (open by default).
    pub access: AccessPolicy,
    /// Whether requests act as tenants (`--tenants`).
    pub tenants: bool,
    /// Limits per tenant, reloaded when the file changes (`--tenant-limits-file`).
    pub tenant_limits_file: Option<std::path::PathBuf>,
    /// The retention rules of `--retention-rule` and `--retention-rules-file`: the tenants'
    /// `retention_period` rules follow them when the limits file changes.
    pub base_retention_rules: Vec<crate::storage::RetentionRule>,
    /// Whether the admin API is enabled.
    pub admin_api: bool,
    /// How OTLP metric names are translated (`--otlp-metric-names`).
    pub otlp_naming: crate::ingest::otlp::Naming,
    /// Serve HTTPS with this certificate and key instead of plain HTTP.
    pub tls: Option<TlsFiles>,
    /// The command line's flags and values (see [`crate::config::Cli::parse_with_flags`]),
    /// shown by `/api/v1/status/flags`; empty for a server built in code.
    pub flags: std::collections::BTreeMap<String, String>,
    /// Recording and alerting rules (`--rule-file`); none by default.
    pub rules: crate::rules::evaluator::RulesConfig,
}

impl ServerConfig {
    /// Defaults for everything but the address and storage.
    pub fn new(listen: SocketAddr, storage: StorageConfig) -> Self {
        Self {
            listen,
            storage,
            clickhouse: None,
            limits: Limits::default(),
            connections: ConnectionLimits::default(),
            query: QueryConfig::default(),
            maintenance: Maintenance::default(),
            access: AccessPolicy::default(),
            tenants: false,
            tenant_limits_file: None,
            base_retention_rules: Vec::new(),
            admin_api: false,
            otlp_naming: crate::ingest::otlp::Naming::default(),
            tls: None,
            flags: std::collections::BTreeMap::new(),
            rules: crate::rules::evaluator::RulesConfig::default(),
        }
    }
}

/// The background task that drops expired windows and seals closed ones.
#[derive(Clone, Copy, Debug)]
pub struct Maintenance {
    /// How often it runs.
    pub interval: Duration,
    /// How long after a window closes its hot rows are sealed into chunks (late samples that
    /// arrive later still land, in an overlay the next seal merges). `None` disables sealing.
    pub ooo_grace_ms: Option<i64>,
}

impl Default for Maintenance {
    fn default() -> Self {
        Self { interval: Duration::from_secs(60), ooo_grace_ms: Some(3_600_000) }
    }
}

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// Storage could not be opened.
    #[error("{0}")]
    Storage(#[from] StorageError),
    /// The address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// Requested address.
        addr: SocketAddr,
        /// OS error.
        source: std::io::Error,
    },
    /// The TLS certificate or key is unusable.
    #[error("{0}")]
    Tls(#[from] TlsError),
    /// The tenant limits file is bad.
    #[error("{0}")]
    TenantLimits(#[from] crate::tenant::LimitsError),
    /// A rule file is bad (every problem, one per line).
    #[error("{}", .0.join("\n"))]
    Rules(Vec<String>),
    /// The server task failed.
    #[error("server: {0}")]
    Io(#[from] std::io::Error),
}

/// A running server.
pub struct Server {
    addr: SocketAddr,
    backend: Backend,
    stop: watch::Sender<bool>,
    task: JoinHandle<std::io::Result<()>>,
    /// Retention and sealing (on ClickHouse, retention only).
    maintenance: JoinHandle<()>,
    /// The watch of the tenant limits file, when there is one.
    limits_watch: Option<JoinHandle<()>>,
    /// The tenant limits, reloaded with the rules.
    tenant_limits: Option<Arc<TenantLimitsHandle>>,
    /// The rule evaluator, when rule files are configured.
    rules: Option<Arc<crate::rules::evaluator::Evaluator>>,
}

impl Server {
    /// Opens storage (replaying the journal), drops expired windows, binds and starts serving.
    ///
    /// # Errors
    /// [`ServeError`] when storage cannot be opened or the address cannot be bound.
    pub async fn start(config: ServerConfig) -> Result<Self, ServeError> {
        // Refuse a bad certificate before touching the data directory.
        let acceptor = config.tls.as_ref().map(tls::acceptor).transpose()?;
        let tenant_limits = match &config.tenant_limits_file {
            Some(path) => {
                let path = path.clone();
                let handle = tokio::task::spawn_blocking(move || TenantLimitsHandle::load(&path))
                    .await
                    .map_err(|e| ServeError::Io(std::io::Error::other(e)))??;
                Some(Arc::new(handle))
            }
            None => None,
        };
        let storage_config = config.storage.clone();
        let clickhouse = config.clickhouse.clone();
        let backend = tokio::task::spawn_blocking(move || -> Result<Backend, StorageError> {
            if let Some(ch) = clickhouse {
                return Ok(Backend::ClickHouse(crate::clickhouse::ClickHouse::open(ch)?));
            }
            let storage = Storage::open(storage_config)?;
            let dropped = storage.enforce_retention(crate::storage::now_ms())?;
            if !dropped.is_empty() {
                tracing::info!(windows = dropped.len(), "dropped windows past retention at start-up");
            }
            storage.refresh_active_series()?;
            Ok(Backend::Embedded(storage))
        })
        .await
        .map_err(|e| ServeError::Io(std::io::Error::other(e)))??;
        if let (Some(limits), Backend::Embedded(storage)) = (&tenant_limits, &backend) {
            let (storage, base) = (storage.clone(), config.base_retention_rules.clone());
            limits.on_retention_change(Box::new(move |file| {
                let mut rules = base.clone();
                rules.extend(crate::config::tenant_retention_rules(file)?);
                storage.set_retention_rules(rules).map_err(|e| e.to_string())
            }));
        }
        let listener = TcpListener::bind(config.listen)
            .await
            .map_err(|source| ServeError::Bind { addr: config.listen, source })?;
        let addr = listener.local_addr()?;
        let mut state = AppState::over(backend.clone(), config.limits, config.query);
        state.access = Arc::new(config.access);
        state.admin_api = config.admin_api;
        state.tenants = config.tenants;
        state.tenant_limits = tenant_limits.clone();
        state.otlp_naming = config.otlp_naming;
        state.flags = Arc::new(config.flags);
        state.rule_defaults = Arc::new(crate::rules::replay::Defaults::of(&config.rules));
        let rules = start_rules(config.rules, &state).await?;
        state.rules = rules.clone();
        let (stop, stopped) = watch::channel(false);
        let maintenance = match &backend {
            Backend::Embedded(s) => spawn_maintenance(s.clone(), config.maintenance, stopped.clone()),
            Backend::ClickHouse(c) => spawn_clickhouse_maintenance(c.clone(), config.maintenance, stopped.clone()),
        };
        // Each connection's remote address reaches handlers (the slow-query log names it), as
        // `ConnectInfo<ClientAddr>` (see `connections.rs`).
        let limits_watch = tenant_limits.clone().map(|l| tenant_limits::spawn_watch(l, stopped.clone()));
        let connection_metrics = state.metrics.connections();
        let app = router(Arc::new(state));
        let task =
            tokio::spawn(connections::serve(listener, acceptor, app, config.connections, connection_metrics, stopped));
        Ok(Self { addr, backend, stop, task, maintenance, limits_watch, tenant_limits, rules })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The embedded store behind the server (for in-process tests and benchmarks); `None` on
    /// ClickHouse.
    pub fn storage(&self) -> Option<&Storage> {
        self.backend.embedded()
    }

    /// Reads the tenant limits file and the rule files again (SIGHUP); the limits in force and
    /// the running rules stay when one is bad.
    ///
    /// # Errors
    /// The files' problems.
    pub async fn reload_rules(&self) -> Result<(), ServeError> {
        if let Some(limits) = self.tenant_limits.clone() {
            tokio::task::spawn_blocking(move || limits.reload())
                .await
                .map_err(|e| ServeError::Io(std::io::Error::other(e)))??;
        }
        let Some(rules) = self.rules.clone() else { return Ok(()) };
        tokio::task::spawn_blocking(move || rules.reload())
            .await
            .map_err(|e| ServeError::Io(std::io::Error::other(e)))?
            .map_err(ServeError::Rules)
    }

    /// Stops accepting, finishes in-flight requests, and closes storage.
    ///
    /// # Errors
    /// The server task's I/O error.
    pub async fn shutdown(self) -> Result<(), ServeError> {
        let _ = self.stop.send(true);
        let result = self.task.await.map_err(|e| ServeError::Io(std::io::Error::other(e)))?;
        // Rule evaluations write: stop them before the store closes.
        if let Some(rules) = self.rules {
            tokio::task::spawn_blocking(move || rules.stop())
                .await
                .map_err(|e| ServeError::Io(std::io::Error::other(e)))?;
        }
        if let Some(watch) = self.limits_watch {
            watch.await.map_err(|e| ServeError::Io(std::io::Error::other(e)))?;
        }
        // A running maintenance pass holds a storage handle until it ends.
        self.maintenance.await.map_err(|e| ServeError::Io(std::io::Error::other(e)))?;
        let storage = self.backend;
        // Dropping the last handle joins the writer, flushes the head and every table and
        // empties the journal (see `storage/lifecycle/close.rs`): do it off the executor.
        tokio::task::spawn_blocking(move || drop(storage))
            .await
            .map_err(|e| ServeError::Io(std::io::Error::other(e)))?;
        result.map_err(ServeError::Io)
    }
}

/// Starts the rule evaluator when rule files are configured.
async fn start_rules(
    config: crate::rules::evaluator::RulesConfig,
    state: &AppState,
) -> Result<Option<Arc<crate::rules::evaluator::Evaluator>>, ServeError> {
    if config.files.is_empty() && config.ruler_dir.is_none() {
        return Ok(None);
    }
    let (engine, backend) = (state.engine.clone(), state.backend.clone());
    let sink: Option<Arc<dyn crate::rules::evaluator::AlertSink>> = if config.alertmanagers.is_empty() {
        None
    } else {
        let notifier = crate::rules::notify::Notifier::new(
            crate::rules::notify::NotifierConfig {
                alertmanagers: config.alertmanagers.clone(),
                external_labels: config.external_labels.clone(),
                external_url: config.external_url.clone(),
                queue_capacity: config.notification_queue_capacity,
                ..crate::rules::notify::NotifierConfig::default()
            },
            state.metrics.notifications(),
        )
        .map_err(|e| ServeError::Rules(vec![format!("--alertmanager-url: {e}")]))?;
        Some(Arc::new(notifier))
    };
    // A tenant's rule outputs count against its limits, as its remote-writes do.
    let gate: Option<Arc<dyn crate::rules::group::WriteGate>> = state
        .tenant_limits
        .clone()
        .map(|limits| Arc::new(tenant_limits::RuleWrites { limits, counters: state.metrics.tenant_counters() }) as _);
    let evaluator = tokio::task::spawn_blocking(move || {
        crate::rules::evaluator::Evaluator::start(config, engine, backend, sink, gate)
    })
    .await
    .map_err(|e| ServeError::Io(std::io::Error::other(e)))?
    .map_err(ServeError::Rules)?;
    let evaluator = Arc::new(evaluator);
    evaluator.watch_namespaces();
    Ok(Some(evaluator))
}

fn spawn_maintenance(storage: Storage, every: Maintenance, mut stopped: watch::Receiver<bool>) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every.interval);
        tick.tick().await;
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = stopped.wait_for(|&s| s) => return,
            }
            let s = storage.clone();
            let work = tokio::task::spawn_blocking(move || maintain(&s, every.ooo_grace_ms));
            if let Err(e) = work.await {
                tracing::error!(error = %e, "maintenance task failed");
            }
        }
    })
}

/// At every maintenance interval: drops the ClickHouse partitions past retention, then seals the
/// closed days (see `clickhouse/seal.rs`).
fn spawn_clickhouse_maintenance(
    store: crate::clickhouse::ClickHouse,
    every: Maintenance,
    mut stopped: watch::Receiver<bool>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every.interval);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = stopped.wait_for(|&s| s) => return,
            }
            let s = store.clone();
            // Retention first (never seal what is about to be dropped), then sealing, then the
            // settling of the index rows of decided writes.
            let pass = tokio::task::spawn_blocking(move || {
                let now = crate::storage::now_ms();
                (s.enforce_retention(now), s.seal_closed_days(now), s.settle_postings(now))
            });
            match pass.await {
                Ok((retention, sealed, settled)) => {
                    if let Err(e) = settled {
                        tracing::error!(error = %e, "settling ClickHouse postings failed");
                    }
                    match retention {
                        Ok(0) => {}
                        Ok(n) => tracing::info!(partitions = n, "dropped ClickHouse partitions past retention"),
                        Err(e) => tracing::error!(error = %e, "ClickHouse retention failed"),
                    }
                    if let Err(e) = sealed {
                        tracing::error!(error = %e, "ClickHouse sealing failed");
                    }
                }
                Err(e) => tracing::error!(error = %e, "ClickHouse maintenance task failed"),
            }
        }
    })
}

/// One maintenance pass: retention first (never seal what is about to be dropped), then sealing.
fn maintain(storage: &Storage, ooo_grace_ms: Option<i64>) {
    let now = crate::storage::now_ms();
    match storage.enforce_retention(now) {
        Ok(dropped) if !dropped.is_empty() => tracing::info!(windows = dropped.len(), "dropped windows past retention"),
        Ok(_) => {}
        Err(e) => tracing::error!(error = %e, "retention failed"),
    }
    if let Err(e) = storage.refresh_active_series() {
        tracing::error!(error = %e, "measuring the active series failed");
    }
    if let Err(e) = storage.compact_wal() {
        tracing::error!(error = %e, "compacting the write-ahead log failed");
    }
    let Some(grace) = ooo_grace_ms else { return };
    match storage.seal_due(now, grace) {
        Ok(sealed) => {
            for s in sealed {
                tracing::info!(window = s.start_ms, series = s.series, samples = s.samples, chunks = s.chunks, outcome = ?s.swap, "sealed window");
            }
        }
        Err(e) => tracing::error!(error = %e, "sealing failed"),
    }
    // After sealing: only sealed windows are downsampled.
    match storage.downsample_due(now) {
        Ok(done) => {
            for d in done.iter().filter(|d| d.installed) {
                tracing::info!(window = d.start_ms, kept_ms = ?d.kept_ms, series = d.series_tiered, samples_dropped = d.samples_dropped, "downsampled window");
            }
        }
        Err(e) => tracing::error!(error = %e, "downsampling failed"),
    }
}
