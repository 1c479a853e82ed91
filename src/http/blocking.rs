//! The only path from async handlers into storage: fjall calls block, so they run on tokio's
//! blocking pool.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::error::ApiError;
use crate::storage::ReadLimits;

/// Sets its flag when dropped. An async handler holds it while its blocking read runs: when the
/// client goes away, the server drops the handler's future, and the read stops inside its scan.
pub struct CancelOnDrop(Arc<AtomicBool>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// The limits of one read request, from now: at most `max_samples` samples, `timeout` of time,
/// cancelled when the returned guard is dropped.
pub fn read_limits(max_samples: Option<usize>, timeout: Duration) -> (ReadLimits, CancelOnDrop) {
    let cancel = Arc::new(AtomicBool::new(false));
    let limits =
        ReadLimits { max_samples, deadline: Instant::now().checked_add(timeout), cancel: Some(Arc::clone(&cancel)) };
    (limits, CancelOnDrop(cancel))
}

/// Runs `f` on the blocking pool and flattens its result. A panic inside `f` (a dependency's
/// bug reached by some input) is contained there and answered as an error.
///
/// # Errors
/// The closure's error, or [`ApiError::Internal`] if it panicked.
pub async fn run<T, F>(f: F) -> Result<T, ApiError>
where
    F: FnOnce() -> Result<T, ApiError> + Send + 'static,
    T: Send + 'static,
{
    tokio::task::spawn_blocking(move || contain(f))
        .await
        .map_err(|e| ApiError::Internal(format!("storage task failed: {e}")))?
}

/// Runs `f` here, a panic inside it contained and answered as an error (as [`run`] does on the
/// blocking pool): for work bounded to a small budget that an async thread may do itself.
///
/// # Errors
/// The closure's error, or [`ApiError::Internal`] if it panicked.
pub fn contain<T, F>(f: F) -> Result<T, ApiError>
where
    F: FnOnce() -> Result<T, ApiError>,
{
    crate::containment::contain("the request", f).map_err(|p| ApiError::Internal(p.to_string()))?
}
