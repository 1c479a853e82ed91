//! The limits per tenant in force (`--tenant-limits-file`, see docs/limits-per-tenant.md): the
//! parsed file behind a lock, reloaded on `POST /-/reload` and when its modification time
//! changes, the ingestion token buckets, the active series of tenants with a series limit and
//! the per-tenant query semaphores. What the limits
//! are and how the bucket counts is `tenant/limits.rs`; this holds the state and turns a
//! refusal into the answer.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::batch::Batch;
use super::error::ApiError;
use crate::tenant::{
    metric_hash, series_hash, ActiveSeries, Buckets, LimitsError, LimitsFile, Over, RateRefusal, TenantId, TenantLimits,
};

/// How often the file's modification time is checked.
pub const WATCH_INTERVAL: Duration = Duration::from_secs(10);

/// Puts a changed limits file's `retention_period`s in force (set by the server over the
/// embedded store); the message says why it could not.
pub type RetentionHook = Box<dyn Fn(&LimitsFile) -> Result<(), String> + Send + Sync>;

/// The limits file in force and the state enforcing it.
pub struct TenantLimitsHandle {
    path: PathBuf,
    current: RwLock<(Arc<LimitsFile>, Option<SystemTime>)>,
    buckets: Mutex<Buckets>,
    /// The active series of each tenant that had a series limit when it wrote.
    active: Mutex<HashMap<TenantId, ActiveSeries>>,
    queries: Mutex<HashMap<TenantId, (usize, Arc<Semaphore>)>>,
    epoch: Instant,
    /// Applies changed retentions; unset on ClickHouse (retention classes are the embedded
    /// store's).
    retention: std::sync::OnceLock<RetentionHook>,
    /// Held by a reload from reading the file to swapping it in.
    reloading: Mutex<()>,
}

impl std::fmt::Debug for TenantLimitsHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TenantLimitsHandle").field("path", &self.path).finish_non_exhaustive()
    }
}

fn read(path: &Path) -> Result<(LimitsFile, Option<SystemTime>), LimitsError> {
    let name = path.display().to_string();
    let modified = std::fs::metadata(path).and_then(|m| m.modified()).ok();
    let text = std::fs::read_to_string(path)
        .map_err(|e| LimitsError { file: name.clone(), problem: format!("cannot be read: {e}") })?;
    Ok((LimitsFile::parse(&name, &text)?, modified))
}

/// The start of every refusal by the ingestion rate.
fn over_rate(tenant: &TenantId, rate: f64, burst: u64) -> String {
    format!("tenant {:?} is over its ingestion rate limit of {rate} samples/s (burst {burst})", tenant.as_str())
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
            active: Mutex::default(),
            queries: Mutex::default(),
            epoch: Instant::now(),
            retention: std::sync::OnceLock::new(),
            reloading: Mutex::new(()),
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
        let _one_at_a_time = unpoison(self.reloading.lock());
        let (file, modified) = read(&self.path)?;
        // Applied before the file is swapped in, without holding its lock: the write path
        // reads the limits while the head is flushed for the change.
        let in_force = unpoison(self.current.read()).0.retention_selectors();
        if in_force != file.retention_selectors() {
            match self.retention.get() {
                Some(apply) => {
                    apply(&file).map_err(|problem| LimitsError { file: self.path.display().to_string(), problem })?;
                    tracing::info!(
                        file = %self.path.display(),
                        "a tenant's retention_period changed: samples written from now on follow it"
                    );
                }
                None => tracing::warn!(
                    file = %self.path.display(),
                    "a tenant's retention_period changed, but retention per tenant needs the embedded store"
                ),
            }
        }
        *unpoison(self.current.write()) = (Arc::new(file), modified);
        Ok(())
    }

    /// Sets what puts changed retentions in force (once; later calls are ignored).
    pub fn on_retention_change(&self, apply: RetentionHook) {
        let _ = self.retention.set(apply);
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

    /// The limits file in force now (each tenant's limits by [`LimitsFile::of`], borrowed, not
    /// copied, on the write path).
    pub fn file(&self) -> Arc<LimitsFile> {
        Arc::clone(&unpoison(self.current.read()).0)
    }

    /// The limits of `tenant` now.
    pub fn of(&self, tenant: &TenantId) -> TenantLimits {
        self.file().of(tenant).clone()
    }

    /// Refuses a batch with a label name or value longer than `tenant`'s limits (400 naming the
    /// label, the limit and the tenant).
    ///
    /// # Errors
    /// [`ApiError::BadData`].
    pub fn check_labels(&self, tenant: &TenantId, batch: &Batch) -> Result<(), ApiError> {
        let file = self.file();
        let limits = file.of(tenant);
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
        let file = self.file();
        let limits = file.of(tenant);
        let (Some(rate), Some(burst)) = (limits.ingestion_rate, limits.burst()) else { return Ok(()) };
        let now = self.epoch.elapsed().as_secs_f64();
        let taken = unpoison(self.buckets.lock()).allow(tenant, (rate, burst), samples as u64, now);
        let over = over_rate(tenant, rate, burst);
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

    /// What every write of `tenant` passes once its batch is stamped: its ingestion rate for
    /// `samples` ([`TenantLimitsHandle::take_samples`]), then its active series limits
    /// ([`TenantLimitsHandle::admit_series`]). Samples taken from the bucket by a write the
    /// series limits then refuse are not given back.
    ///
    /// # Errors
    /// The refusal with the `reason` to count it under.
    pub fn admit_write(
        &self,
        tenant: &TenantId,
        batch: &Batch,
        samples: usize,
    ) -> Result<(), (ApiError, &'static str)> {
        self.take_samples(tenant, samples).map_err(|e| (e, "tenant_rate_limited"))?;
        self.admit_series(tenant, batch)
    }

    /// Refuses a request of `tenant` before its body is read when its ingestion bucket holds
    /// less than one sample's token (the 429 of [`TenantLimitsHandle::take_samples`], with
    /// `Retry-After`); takes nothing.
    ///
    /// # Errors
    /// [`ApiError::RateLimited`].
    pub fn refuse_exhausted(&self, tenant: &TenantId) -> Result<(), ApiError> {
        let file = self.file();
        let limits = file.of(tenant);
        let (Some(rate), Some(burst)) = (limits.ingestion_rate, limits.burst()) else { return Ok(()) };
        let now = self.epoch.elapsed().as_secs_f64();
        match unpoison(self.buckets.lock()).exhausted(tenant, (rate, burst), now) {
            None => Ok(()),
            Some(seconds) => Err(ApiError::RateLimited {
                message: format!("{}: request refused unread, retry later", over_rate(tenant, rate, burst)),
                retry_after: seconds.ceil().max(1.0) as u64,
            }),
        }
    }

    /// Checks `batch` (stamped with `tenant`) against the tenant's `max_global_series_per_user`
    /// and `max_global_series_per_metric`, counting only its series with samples that are not
    /// active yet, and records them as active when it fits (one lock around both, so two
    /// concurrent requests cannot both take the last slot). They are recorded before the
    /// write: a write that then fails in storage leaves them counted until they age out.
    ///
    /// # Errors
    /// 429 ([`ApiError::RateLimited`], `Retry-After` one minute) naming the tenant, the limit,
    /// the count and (per metric) the metric, with the `reason` to count it under
    /// (`tenant_series_limit`, `tenant_metric_series_limit`).
    pub fn admit_series(&self, tenant: &TenantId, batch: &Batch) -> Result<(), (ApiError, &'static str)> {
        let (user, metric) = self.file().of(tenant).series_limits();
        if user.is_none() && metric.is_none() {
            return Ok(());
        }
        let hashes = batch_hashes(batch);
        if hashes.is_empty() {
            return Ok(());
        }
        let now = self.epoch.elapsed().as_secs_f64();
        let admitted = unpoison(self.active.lock())
            .entry(tenant.clone())
            .or_insert_with(|| ActiveSeries::new(now))
            .admit(user, metric, &hashes, now);
        let refuse = |message: String, reason| Err((ApiError::RateLimited { message, retry_after: 60 }, reason));
        match admitted {
            Ok(()) => Ok(()),
            Err(Over::User { active, limit, adding }) => refuse(
                format!(
                    "tenant {:?} has {active} active series, its limit is {limit} (max_global_series_per_user); this request would add {adding} more",
                    tenant.as_str()
                ),
                "tenant_series_limit",
            ),
            Err(Over::Metric { metric, active, limit, adding }) => refuse(
                format!(
                    "tenant {:?} has {active} active series of metric {:?}, its limit is {limit} (max_global_series_per_metric); this request would add {adding} more",
                    tenant.as_str(),
                    metric_name(batch, metric)
                ),
                "tenant_metric_series_limit",
            ),
        }
    }

    /// The active series of each tenant with a series limit in force, as of `now` (for the
    /// `saltdb_tenant_active_series` gauge); forgets the counts of tenants that no longer have
    /// one.
    pub fn active_series(&self) -> Vec<(String, usize)> {
        let now = self.epoch.elapsed().as_secs_f64();
        let file = self.file();
        let mut active = unpoison(self.active.lock());
        active.retain(|t, _| file.of(t).limits_series());
        active
            .iter_mut()
            .map(|(t, a)| {
                a.rotate(now);
                (t.as_str().to_owned(), a.len())
            })
            .collect()
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
        let Some(max) = self.file().of(tenant).max_concurrent_queries else { return Ok(None) };
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

/// The `(series hash, metric hash)` of each series of `batch` with samples (float or
/// histogram): a series is its canonical label bytes, its metric the value of `__name__`.
fn batch_hashes(batch: &Batch) -> Vec<(u64, u64)> {
    match batch {
        Batch::Series(b) => {
            let mut buf = Vec::new();
            b.series
                .iter()
                .filter(|s| !s.samples.is_empty() || !s.histograms.is_empty())
                .map(|s| {
                    buf.clear();
                    s.labels.encode(&mut buf);
                    (series_hash(&buf), metric_hash(s.labels.metric_name().unwrap_or("").as_bytes()))
                })
                .collect()
        }
        Batch::Packed(b) => b
            .series()
            .filter(|s| !s.samples.is_empty() || !s.histograms.is_empty())
            .map(|s| (series_hash(s.labels), metric_hash(packed_name(s.label_pairs()))))
            .collect(),
    }
}

fn packed_name<'a>(mut pairs: impl Iterator<Item = (&'a [u8], &'a [u8])>) -> &'a [u8] {
    pairs.find(|(n, _)| *n == crate::labels::METRIC_NAME.as_bytes()).map_or(&[], |(_, v)| v)
}

/// The name of the metric of hash `hash` among `batch`'s series.
fn metric_name(batch: &Batch, hash: u64) -> String {
    let name = match batch {
        Batch::Series(b) => b
            .series
            .iter()
            .map(|s| s.labels.metric_name().unwrap_or("").as_bytes().to_vec())
            .find(|n| metric_hash(n) == hash),
        Batch::Packed(b) => b.series().map(|s| packed_name(s.label_pairs()).to_vec()).find(|n| metric_hash(n) == hash),
    };
    String::from_utf8_lossy(&name.unwrap_or_default()).into_owned()
}

/// The outputs of a tenant's rule groups through the tenant's limits (label lengths, ingestion
/// rate, active series), refusals and writes counted per tenant as a request's are.
pub struct RuleWrites {
    /// The limits in force.
    pub limits: Arc<TenantLimitsHandle>,
    /// `saltdb_tenant_*` counters.
    pub counters: crate::metrics::TenantCounters,
}

impl crate::rules::group::WriteGate for RuleWrites {
    fn admit(
        &self,
        tenant: &TenantId,
        batch: crate::sample::PackedBatch,
    ) -> Result<crate::sample::PackedBatch, String> {
        let batch = Batch::Packed(batch);
        let refused = |reason: &str, e: ApiError| {
            self.counters.refused(tenant.as_str(), reason);
            format!("the rule's output is refused by its tenant's limits: {e}")
        };
        self.limits.check_labels(tenant, &batch).map_err(|e| refused("tenant_label_too_long", e))?;
        let samples = batch.sample_count() + batch.histogram_count();
        self.limits.admit_write(tenant, &batch, samples).map_err(|(e, reason)| refused(reason, e))?;
        match batch {
            Batch::Packed(b) => Ok(b),
            Batch::Series(_) => Err("BUG: a rule's output changed form".to_owned()),
        }
    }

    fn written(&self, tenant: &TenantId, samples: usize) {
        self.counters.ingested(tenant.as_str(), samples);
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
