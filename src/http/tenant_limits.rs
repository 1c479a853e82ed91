//! The limits per tenant in force (`--tenant-limits-file`, see docs/limits-per-tenant.md): the
//! parsed file behind a lock, reloaded on `POST /-/reload` and when its modification time
//! changes, the ingestion token buckets and the per-tenant query semaphores. What the limits
//! are and how the bucket counts is `tenant/limits.rs`; this holds the state and turns a
//! refusal into the answer.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::error::ApiError;
use super::ingest::Batch;
use crate::tenant::{Buckets, LimitsError, LimitsFile, RateRefusal, TenantId, TenantLimits};

/// How often the file's modification time is checked.
pub const WATCH_INTERVAL: Duration = Duration::from_secs(10);

/// The limits file in force and the state enforcing it.
#[derive(Debug)]
pub struct TenantLimitsHandle {
    path: PathBuf,
    current: RwLock<(Arc<LimitsFile>, Option<SystemTime>)>,
    buckets: Mutex<Buckets>,
    queries: Mutex<HashMap<TenantId, (usize, Arc<Semaphore>)>>,
    epoch: Instant,
}

fn read(path: &Path) -> Result<(LimitsFile, Option<SystemTime>), LimitsError> {
    let name = path.display().to_string();
    let modified = std::fs::metadata(path).and_then(|m| m.modified()).ok();
    let text = std::fs::read_to_string(path)
        .map_err(|e| LimitsError { file: name.clone(), problem: format!("cannot be read: {e}") })?;
    Ok((LimitsFile::parse(&name, &text)?, modified))
}

/// A lock's content even when a thread panicked holding it (the limits are replaced whole).
fn unpoison<G>(r: Result<G, std::sync::PoisonError<G>>) -> G {
    r.unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl TenantLimitsHandle {
    /// Reads `path`.
    ///
    /// # Errors
    /// [`LimitsError`] naming the file and the problem.
    pub fn load(path: &Path) -> Result<Self, LimitsError> {
        let (file, modified) = read(path)?;
        Ok(Self {
            path: path.to_path_buf(),
            current: RwLock::new((Arc::new(file), modified)),
            buckets: Mutex::default(),
            queries: Mutex::default(),
            epoch: Instant::now(),
        })
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads the file again; a bad file keeps the limits in force.
    ///
    /// # Errors
    /// [`LimitsError`] of the bad file.
    pub fn reload(&self) -> Result<(), LimitsError> {
        let (file, modified) = read(&self.path)?;
        *unpoison(self.current.write()) = (Arc::new(file), modified);
        Ok(())
    }

    /// [`TenantLimitsHandle::reload`] when the file's modification time differs from the one
    /// read last; whether it reloaded.
    ///
    /// # Errors
    /// As [`TenantLimitsHandle::reload`]; the time is remembered so that a bad file is reported
    /// once per change.
    pub fn reload_if_changed(&self) -> Result<bool, LimitsError> {
        let modified = std::fs::metadata(&self.path).and_then(|m| m.modified()).ok();
        if modified == unpoison(self.current.read()).1 {
            return Ok(false);
        }
        match self.reload() {
            Ok(()) => Ok(true),
            Err(e) => {
                unpoison(self.current.write()).1 = modified;
                Err(e)
            }
        }
    }

    /// The limits of `tenant` now.
    pub fn of(&self, tenant: &TenantId) -> TenantLimits {
        unpoison(self.current.read()).0.of(tenant).clone()
    }

    /// Refuses a batch with a label name or value longer than `tenant`'s limits (400 naming the
    /// label, the limit and the tenant).
    ///
    /// # Errors
    /// [`ApiError::BadData`].
    pub fn check_labels(&self, tenant: &TenantId, batch: &Batch) -> Result<(), ApiError> {
        let limits = self.of(tenant);
        let (names, values) = (limits.max_label_name_length, limits.max_label_value_length);
        if names.is_none() && values.is_none() {
            return Ok(());
        }
        let check = |name: &[u8], value: &[u8]| -> Result<(), ApiError> {
            let show = |b: &[u8]| String::from_utf8_lossy(b.get(..200).unwrap_or(b)).into_owned();
            if let Some(max) = names.filter(|&m| name.len() > m) {
                return Err(ApiError::BadData(format!(
                    "label name {:?} is {} bytes long, longer than the limit of {max} bytes (max_label_name_length) of tenant {:?}",
                    show(name),
                    name.len(),
                    tenant.as_str()
                )));
            }
            if let Some(max) = values.filter(|&m| value.len() > m) {
                return Err(ApiError::BadData(format!(
                    "the value of label {:?} is {} bytes long, longer than the limit of {max} bytes (max_label_value_length) of tenant {:?}",
                    show(name),
                    value.len(),
                    tenant.as_str()
                )));
            }
            Ok(())
        };
        match batch {
            Batch::Series(b) => b
                .series
                .iter()
                .flat_map(|s| s.labels.iter())
                .try_for_each(|l| check(l.name.as_bytes(), l.value.as_bytes())),
            Batch::Packed(b) => b.series().flat_map(|s| s.label_pairs()).try_for_each(|(n, v)| check(n, v)),
        }
    }

    /// Takes `samples` from `tenant`'s ingestion rate (429 with `Retry-After` naming the tenant
    /// and the limit when it has not enough).
    ///
    /// # Errors
    /// [`ApiError::RateLimited`].
    pub fn take_samples(&self, tenant: &TenantId, samples: usize) -> Result<(), ApiError> {
        let limits = self.of(tenant);
        let (Some(rate), Some(burst)) = (limits.ingestion_rate, limits.burst()) else { return Ok(()) };
        let now = self.epoch.elapsed().as_secs_f64();
        let taken = unpoison(self.buckets.lock()).allow(tenant, (rate, burst), samples as u64, now);
        let over = format!(
            "tenant {:?} is over its ingestion rate limit of {rate} samples/s (burst {burst})",
            tenant.as_str()
        );
        match taken {
            Ok(()) => Ok(()),
            Err(RateRefusal::Wait(seconds)) => Err(ApiError::RateLimited {
                message: format!("{over}: {samples} samples refused, retry later"),
                retry_after: seconds.ceil().max(1.0) as u64,
            }),
            Err(RateRefusal::OverBurst) => Err(ApiError::RateLimited {
                message: format!(
                    "{over}: a request of {samples} samples is larger than the burst; send smaller requests"
                ),
                retry_after: 1,
            }),
        }
    }

    /// A slot of `tenant`'s `max_concurrent_queries`, waited for up to `timeout`; `None` when
    /// the tenant has no such limit.
    ///
    /// # Errors
    /// [`ApiError::Timeout`] (503, as the server's own query slots) naming the tenant.
    pub async fn query_slot(
        &self,
        tenant: &TenantId,
        timeout: Duration,
    ) -> Result<Option<OwnedSemaphorePermit>, ApiError> {
        let Some(max) = self.of(tenant).max_concurrent_queries else { return Ok(None) };
        let semaphore = {
            let mut queries = unpoison(self.queries.lock());
            let entry = queries.entry(tenant.clone()).or_insert_with(|| (max, Arc::new(Semaphore::new(max))));
            if entry.0 != max {
                // A reloaded limit: queries holding the old semaphore's permits finish on it.
                *entry = (max, Arc::new(Semaphore::new(max)));
            }
            Arc::clone(&entry.1)
        };
        let permit = tokio::time::timeout(timeout, semaphore.acquire_owned()).await.map_err(|_| {
            ApiError::Timeout(format!(
                "query of tenant {:?} timed out waiting for one of its {max} query slots (max_concurrent_queries)",
                tenant.as_str()
            ))
        })?;
        permit.map(Some).map_err(|_| ApiError::Internal("tenant query slots closed".into()))
    }
}

/// Watches the file of `limits` every [`WATCH_INTERVAL`] until `stopped`, reloading it when it
/// changed; a bad file keeps the limits in force and is logged.
pub fn spawn_watch(
    limits: Arc<TenantLimitsHandle>,
    mut stopped: tokio::sync::watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(WATCH_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                changed = stopped.changed() => if changed.is_err() { return },
            }
            if *stopped.borrow() {
                return;
            }
            let l = Arc::clone(&limits);
            match tokio::task::spawn_blocking(move || l.reload_if_changed()).await {
                Ok(Ok(true)) => tracing::info!(file = %limits.path().display(), "reloaded the tenant limits file"),
                Ok(Ok(false)) => {}
                Ok(Err(e)) => tracing::warn!(error = %e, "keeping the tenant limits in force"),
                Err(e) => tracing::warn!(error = %e, "tenant limits reload task failed"),
            }
        }
    })
}
