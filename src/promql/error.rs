//! Typed evaluation errors. The HTTP edge maps them once through [`EvalError::error_type`].

use crate::storage::StorageError;

/// Why a query could not be answered.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EvalError {
    /// The query text does not parse, or is semantically invalid before evaluation
    /// (wrong argument types, too deep nesting, too many points per series).
    #[error("{0}")]
    BadData(String),
    /// Evaluation failed (duplicate label sets, invalid function parameters, ...).
    #[error("{0}")]
    Execution(String),
    /// The query ran longer than the configured timeout.
    #[error("query timed out in {0}")]
    Timeout(&'static str),
    /// The query would hold more samples at once (loaded, cached or in its result) than allowed
    /// (`--query-max-samples`).
    #[error("query processing would load too many samples into memory in {0}")]
    TooManySamples(&'static str),
    /// The query would read more samples from storage than allowed
    /// (`--query-max-scanned-samples`), however few of them it holds.
    #[error(
        "query would scan more than {limit} samples from storage (--query-max-scanned-samples): narrow its time range or its selectors"
    )]
    TooManyScanned {
        /// The limit.
        limit: usize,
    },
    /// The query would hold more memory than allowed (`--query-max-memory`).
    #[error(
        "query processing would hold more than {limit} bytes in memory (--query-max-memory) in {what}: {needed} bytes"
    )]
    TooMuchMemory {
        /// The limit in bytes.
        limit: usize,
        /// The bytes it would hold.
        needed: usize,
        /// Where it was exceeded.
        what: &'static str,
    },
    /// Reading storage failed or hit a limit of the request (the HTTP edge maps the storage
    /// error itself: a failure is a 5xx, a limit a 4xx).
    #[error("{0}")]
    Storage(#[from] StorageError),
}

impl EvalError {
    /// The Prometheus API `errorType` for this error: `bad_data`, `execution` or `timeout`.
    pub fn error_type(&self) -> &'static str {
        match self {
            Self::BadData(_) => "bad_data",
            Self::Timeout(_) => "timeout",
            Self::Storage(StorageError::Timeout) => "timeout",
            Self::Execution(_)
            | Self::TooManySamples(_)
            | Self::TooManyScanned { .. }
            | Self::TooMuchMemory { .. }
            | Self::Storage(_) => "execution",
        }
    }

    pub(crate) fn exec(msg: impl Into<String>) -> Self {
        Self::Execution(msg.into())
    }

    pub(crate) fn bad(msg: impl Into<String>) -> Self {
        Self::BadData(msg.into())
    }
}

/// Shorthand for evaluation results.
pub type Result<T> = std::result::Result<T, EvalError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_types_map_to_prometheus_names() {
        assert_eq!(EvalError::bad("x").error_type(), "bad_data");
        assert_eq!(EvalError::exec("x").error_type(), "execution");
        assert_eq!(EvalError::Timeout("eval").error_type(), "timeout");
        assert_eq!(EvalError::TooManySamples("eval").error_type(), "execution");
    }
}
