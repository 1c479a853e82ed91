//! The one seam between the PromQL evaluator and storage.

use crate::matcher::Matcher;
use crate::sample::SeriesSamples;

/// Why a source could not answer.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// Storage failed (I/O, corruption, poisoned database).
    #[error("storage: {0}")]
    Storage(String),
    /// The selection would load more samples than allowed.
    #[error("query would load more than {limit} samples; narrow the selector or time range")]
    TooManySamples {
        /// The configured limit.
        limit: usize,
    },
}

/// Where the evaluator reads series from. Storage implements it; tests use in-memory fakes.
pub trait Source: Send + Sync {
    /// Every series matching all `matchers` with at least one sample in `[start_ms, end_ms]`
    /// (both inclusive), with exactly the samples in that range, sorted ascending by timestamp.
    /// The order of the returned series is unspecified.
    ///
    /// # Errors
    /// [`SourceError`] when storage fails or a limit is exceeded.
    fn select(&self, matchers: &[Matcher], start_ms: i64, end_ms: i64) -> Result<Vec<SeriesSamples>, SourceError>;
}
