//! The only path from async handlers into storage: fjall calls block, so they run on tokio's
//! blocking pool.

use super::error::ApiError;

/// Runs `f` on the blocking pool and flattens its result.
///
/// # Errors
/// The closure's error, or [`ApiError::Internal`] if it panicked.
pub async fn run<T, F>(f: F) -> Result<T, ApiError>
where
    F: FnOnce() -> Result<T, ApiError> + Send + 'static,
    T: Send + 'static,
{
    tokio::task::spawn_blocking(f).await.map_err(|e| ApiError::Internal(format!("storage task failed: {e}")))?
}
