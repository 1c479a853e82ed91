//! Storage errors. The HTTP edge maps each variant to a status once (`http/error.rs`).

use std::sync::Arc;

/// Result alias for storage operations.
pub type Result<T> = std::result::Result<T, StorageError>;

/// Everything storage can fail with. Cloneable so one group-commit failure can be
/// reported to every request in the group.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum StorageError {
    /// fjall (I/O, corruption, journal recovery) failed.
    #[error("storage engine: {0}")]
    Engine(Arc<fjall::Error>),
    /// A previous write failed to persist; the database refuses writes until restarted.
    #[error("storage is poisoned by an earlier failed write ({0}); restart the server after fixing the disk")]
    Poisoned(String),
    /// The data directory was created with other settings than the ones requested.
    #[error("data directory was created with {setting} = {stored}, but {requested} was requested; {setting} can never change for an existing database")]
    ManifestMismatch {
        /// Setting name.
        setting: &'static str,
        /// Value in the manifest.
        stored: String,
        /// Value asked for now.
        requested: String,
    },
    /// The manifest is unreadable or from an unknown format version.
    #[error("manifest: {0}")]
    Manifest(String),
    /// Bytes in storage that do not decode (a key or value of the wrong shape).
    #[error("corrupt {what} in storage")]
    Corrupt {
        /// What could not be decoded.
        what: &'static str,
    },
    /// A sample lies in a window that retention has already dropped.
    #[error("sample at {ts_ms} ms is older than the retention cutoff {cutoff_ms} ms")]
    TooOld {
        /// Offending timestamp.
        ts_ms: i64,
        /// Oldest timestamp still accepted.
        cutoff_ms: i64,
    },
    /// A sample lies in a window whose raw samples were downsampled (`--downsample AGE:INTERVAL`).
    #[error(
        "sample at {ts_ms} ms lies in the window starting at {window_start_ms} ms, whose raw samples were downsampled \
         to {interval_ms} ms points (--downsample); samples cannot be added to it any more"
    )]
    Downsampled {
        /// Offending timestamp.
        ts_ms: i64,
        /// The window's start.
        window_start_ms: i64,
        /// The finest interval the window keeps.
        interval_ms: i64,
    },
    /// A sample lies further in the future than the server accepts.
    #[error("sample at {ts_ms} ms is too far in the future: the newest timestamp accepted now is {limit_ms} ms (see --max-future)")]
    TooNew {
        /// Offending timestamp.
        ts_ms: i64,
        /// Newest timestamp accepted.
        limit_ms: i64,
    },
    /// A selection would load more samples than the caller allowed.
    #[error("selection would load more than {limit} samples")]
    TooManySamples {
        /// The limit.
        limit: usize,
    },
    /// A read ran past its deadline.
    #[error("query timed out while reading storage")]
    Timeout,
    /// A read was abandoned (its client went away).
    #[error("query cancelled")]
    Cancelled,
    /// A storage backend (a ClickHouse shard) is unreachable or failed; retrying may succeed.
    #[error("storage unavailable: {0}")]
    Unavailable(String),
    /// The writer thread is gone (the server is shutting down).
    #[error("storage is shutting down")]
    ShuttingDown,
}

impl From<fjall::Error> for StorageError {
    fn from(e: fjall::Error) -> Self {
        Self::Engine(Arc::new(e))
    }
}

impl StorageError {
    /// True for errors caused by the request (a 4xx), false for server-side failures.
    pub fn is_client_error(&self) -> bool {
        matches!(
            self,
            Self::TooOld { .. } | Self::TooNew { .. } | Self::Downsampled { .. } | Self::TooManySamples { .. }
        )
    }
}
