//! Starting and stopping a server: open storage, apply retention, bind, serve, shut down.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::http::{router, AppState, Limits, QueryConfig};
use crate::storage::{Storage, StorageConfig, StorageError};

/// Everything `saltdb serve` needs.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// Address to listen on (port 0 picks a free one).
    pub listen: SocketAddr,
    /// Storage settings.
    pub storage: StorageConfig,
    /// Request limits.
    pub limits: Limits,
    /// Query limits.
    pub query: QueryConfig,
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
    /// The server task failed.
    #[error("server: {0}")]
    Io(#[from] std::io::Error),
}

/// A running server.
pub struct Server {
    addr: SocketAddr,
    storage: Storage,
    stop: watch::Sender<bool>,
    task: JoinHandle<std::io::Result<()>>,
}

/// How often the retention task looks for expired windows.
const RETENTION_INTERVAL: Duration = Duration::from_secs(60);

impl Server {
    /// Opens storage (replaying the journal), drops expired windows, binds and starts serving.
    ///
    /// # Errors
    /// [`ServeError`] when storage cannot be opened or the address cannot be bound.
    pub async fn start(config: ServerConfig) -> Result<Self, ServeError> {
        let storage_config = config.storage.clone();
        let storage = tokio::task::spawn_blocking(move || -> Result<Storage, StorageError> {
            let storage = Storage::open(storage_config)?;
            let dropped = storage.enforce_retention(crate::storage::now_ms())?;
            if !dropped.is_empty() {
                tracing::info!(windows = dropped.len(), "dropped windows past retention at start-up");
            }
            Ok(storage)
        })
        .await
        .map_err(|e| ServeError::Io(std::io::Error::other(e)))??;
        let listener = TcpListener::bind(config.listen)
            .await
            .map_err(|source| ServeError::Bind { addr: config.listen, source })?;
        let addr = listener.local_addr()?;
        let state = Arc::new(AppState::new(storage.clone(), config.limits, config.query));
        let (stop, stopped) = watch::channel(false);
        spawn_retention(storage.clone(), stopped.clone());
        let app = router(state);
        let task = tokio::spawn(async move {
            let mut stopped = stopped;
            axum::serve(listener, app)
                .with_graceful_shutdown(async move {
                    let _ = stopped.wait_for(|&s| s).await;
                })
                .await
        });
        Ok(Self { addr, storage, stop, task })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The storage behind the server (for in-process tests and benchmarks).
    pub fn storage(&self) -> &Storage {
        &self.storage
    }

    /// Stops accepting, finishes in-flight requests, and closes storage.
    ///
    /// # Errors
    /// The server task's I/O error.
    pub async fn shutdown(self) -> Result<(), ServeError> {
        let _ = self.stop.send(true);
        let result = self.task.await.map_err(|e| ServeError::Io(std::io::Error::other(e)))?;
        let storage = self.storage;
        // Dropping the last handle joins the writer and syncs the journal: do it off the executor.
        tokio::task::spawn_blocking(move || drop(storage))
            .await
            .map_err(|e| ServeError::Io(std::io::Error::other(e)))?;
        result.map_err(ServeError::Io)
    }
}

fn spawn_retention(storage: Storage, mut stopped: watch::Receiver<bool>) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(RETENTION_INTERVAL);
        tick.tick().await;
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = stopped.wait_for(|&s| s) => return,
            }
            let s = storage.clone();
            match tokio::task::spawn_blocking(move || s.enforce_retention(crate::storage::now_ms())).await {
                Ok(Ok(dropped)) if !dropped.is_empty() => {
                    tracing::info!(windows = dropped.len(), "dropped windows past retention")
                }
                Ok(Ok(_)) => {}
                Ok(Err(e)) => tracing::error!(error = %e, "retention failed"),
                Err(e) => tracing::error!(error = %e, "retention task failed"),
            }
        }
    });
}
