//! The rule evaluator of a running server: one thread per group, evaluating it at its slots
//! (see [`super::slot`]), writing through the server's store, handing due alerts to the
//! notifier, and publishing each group's state for the APIs after every evaluation.
//!
//! A reload reads the files again. If any is bad, the running rules stay and the error is kept
//! for `/api/v1/status` and the caller. Otherwise the groups are replaced: a group of the same
//! file and name keeps the state of its rules that are unchanged (alerts, series written), as
//! Prometheus' `CopyState` keeps them, and series of rules that went away are marked stale.
//!
//! On ClickHouse the ruler API's namespaces are shared by every node: the evaluator reads them
//! every evaluation interval (`--rule-evaluation-interval`, as Mimir's ruler polls its storage)
//! and reloads when they differ from what its latest load read, as a change through this node
//! reloads at once.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::backend::Backend;
use crate::promql::Engine;

use super::group::{Env, GroupRun, Outgoing, WriteGate};
use super::ruler::RulerStore;
use super::slot::{group_hash, next_slot, slot_at_or_before};
use super::state::{fingerprint, StateDir};
use super::summary::EvaluationDurations;
use super::RuleFiles;

/// What the server evaluates and how.
#[derive(Debug, Clone)]
pub struct RulesConfig {
    /// Rule files (paths or globs), `--rule-file`.
    pub files: Vec<String>,
    /// Interval of groups that set none (`--rule-evaluation-interval`, 1m).
    pub evaluation_interval_ms: i64,
    /// Query offset of groups that set none (`--rule-query-offset`, 0).
    pub query_offset_ms: i64,
    /// Least time between two sends of an unchanged firing alert (`--rules-resend-delay`, 1m).
    pub resend_delay_ms: i64,
    /// `$externalLabels` of templates, added to alerts sent.
    pub external_labels: BTreeMap<String, String>,
    /// `$externalURL` of templates and the generator URL of alerts.
    pub external_url: String,
    /// Where alert state is saved (`<data-dir>/rules`); `None`: not saved.
    pub state_dir: Option<std::path::PathBuf>,
    /// Where the ruler API keeps its namespaces (`<data-dir>/rules/api`); `None`: no ruler API.
    /// On ClickHouse they are kept in the cluster instead, and this only turns the API on.
    pub ruler_dir: Option<std::path::PathBuf>,
    /// Alertmanagers alerts are sent to (`--alertmanager-url`, base URLs).
    pub alertmanagers: Vec<String>,
    /// Alerts queued for Alertmanager at most (`--alertmanager-queue-capacity`).
    pub notification_queue_capacity: usize,
    /// Tenants are on (`--tenants`): the ruler API's groups of the default tenant read and
    /// write its series alone, as every other tenant's groups do theirs (whether tenants are
    /// on or not). Rule files read and write every series either way.
    pub tenants: bool,
}

impl Default for RulesConfig {
    fn default() -> Self {
        Self {
            files: Vec::new(),
            evaluation_interval_ms: 60_000,
            query_offset_ms: 0,
            resend_delay_ms: super::group::DEFAULT_RESEND_DELAY_MS,
            external_labels: BTreeMap::new(),
            external_url: String::new(),
            state_dir: None,
            ruler_dir: None,
            alertmanagers: Vec::new(),
            notification_queue_capacity: 10_000,
            tenants: false,
        }
    }
}

/// Where due alerts go (the Alertmanager notifier, or nothing).
pub trait AlertSink: Send + Sync {
    /// Takes alerts due to be sent; must not block.
    fn send(&self, alerts: Vec<Outgoing>);
    /// Sends what is still queued, within a bound, and stops (after the last evaluation).
    fn stop(&self) {}
}

impl AlertSink for super::notify::Notifier {
    fn send(&self, alerts: Vec<Outgoing>) {
        super::notify::Notifier::send(self, alerts);
    }

    fn stop(&self) {
        super::notify::Notifier::stop(self);
    }
}

/// The outcome of the latest reload.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReloadStatus {
    /// Whether it succeeded.
    pub success: bool,
    /// When it happened (Unix milliseconds).
    pub at_ms: i64,
    /// Its errors.
    pub errors: Vec<String>,
}

/// A group's thread and the state it publishes.
struct GroupThread {
    published: Arc<Mutex<Arc<GroupRun>>>,
    stop: Arc<(Mutex<bool>, Condvar)>,
    handle: Option<JoinHandle<GroupRun>>,
}

struct Shared {
    config: RulesConfig,
    engine: Engine,
    backend: Backend,
    sink: Option<Arc<dyn AlertSink>>,
    gate: Option<Arc<dyn WriteGate>>,
    states: Option<StateDir>,
    ruler: Option<RulerStore>,
    /// On a ruler store other nodes change too: the digest of the namespaces the latest load
    /// read (`None`: unread).
    namespaces_loaded: Mutex<Option<u64>>,
    /// Durations of every rule and group evaluation, for `/metrics`.
    durations: Mutex<EvaluationDurations>,
}

impl Shared {
    /// The `--rule-file` groups, then the ruler API's namespaces.
    fn load(&self) -> Result<RuleFiles, Vec<String>> {
        if let Some(ruler) = self.ruler.as_ref().filter(|r| r.is_shared()) {
            // Taken first: a load that fails is not retried until the namespaces change again.
            *self.namespaces_loaded.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = ruler.digest().ok();
        }
        let files = RuleFiles::load(&self.config.files)?;
        let Some(ruler) = &self.ruler else { return Ok(files) };
        let default = self.config.tenants.then(crate::tenant::TenantId::default_tenant);
        let namespaces = ruler.rule_files()?.into_iter().map(|(owner, mut file)| {
            let tenant = owner.or_else(|| default.clone());
            for g in &mut file.groups {
                g.tenant.clone_from(&tenant);
            }
            file
        });
        Ok(files.with(namespaces.collect()))
    }
}

/// The server's rule evaluator.
pub struct Evaluator {
    shared: Arc<Shared>,
    groups: RwLock<Vec<GroupThread>>,
    reload: Mutex<ReloadStatus>,
    stopped: AtomicBool,
    /// Set to stop the thread polling shared namespaces, if one runs.
    poll_stop: Arc<(Mutex<bool>, Condvar)>,
}

impl Evaluator {
    /// Loads the rule files and starts evaluating; the outputs of tenants' groups pass `gate`
    /// (their limits) when there is one.
    ///
    /// # Errors
    /// Every problem of the rule files (the server refuses to start, as Prometheus does).
    pub fn start(
        config: RulesConfig,
        engine: Engine,
        backend: Backend,
        sink: Option<Arc<dyn AlertSink>>,
        gate: Option<Arc<dyn WriteGate>>,
    ) -> Result<Self, Vec<String>> {
        let states = config.state_dir.clone().map(StateDir::new);
        let ruler = config.ruler_dir.clone().map(|dir| match &backend {
            Backend::ClickHouse(ch) => {
                let left = super::ruler::namespaces_left_in(&dir);
                if !left.is_empty() {
                    tracing::warn!(dir = %dir.display(), namespaces = ?left, "ruler API namespaces kept by this node alone are not read on ClickHouse; set them again through the ruler API");
                }
                RulerStore::on_clickhouse(ch.clone())
            }
            Backend::Embedded(_) => RulerStore::new(dir),
        });
        let namespaces_loaded = Mutex::new(None);
        let durations = Mutex::new(EvaluationDurations::default());
        let shared =
            Arc::new(Shared { config, engine, backend, sink, gate, states, ruler, namespaces_loaded, durations });
        let files = shared.load()?;
        let now = crate::storage::now_ms();
        let groups = files
            .groups()
            .map(|g| {
                let mut run =
                    GroupRun::new(g.clone(), shared.config.evaluation_interval_ms, shared.config.query_offset_ms);
                if let Some(states) = &shared.states {
                    states.restore(&mut run, now);
                }
                spawn(run, &shared)
            })
            .collect();
        let status = ReloadStatus { success: true, at_ms: crate::storage::now_ms(), errors: Vec::new() };
        Ok(Self {
            shared,
            groups: RwLock::new(groups),
            reload: Mutex::new(status),
            stopped: AtomicBool::new(false),
            poll_stop: Arc::new((Mutex::new(false), Condvar::new())),
        })
    }

    /// On a ruler store other nodes change too (ClickHouse): starts polling it every evaluation
    /// interval, reloading when its namespaces changed (see the module's doc). Nothing
    /// otherwise. The thread holds no reference that keeps the evaluator alive.
    pub fn watch_namespaces(self: &Arc<Self>) {
        if !self.shared.ruler.as_ref().is_some_and(RulerStore::is_shared) {
            return;
        }
        let every = Duration::from_millis(self.shared.config.evaluation_interval_ms.max(100).unsigned_abs());
        let (evaluator, stop) = (Arc::downgrade(self), self.poll_stop.clone());
        let spawned = std::thread::Builder::new()
            .name("saltdb-ruler-poll".to_owned())
            .spawn(move || poll(&evaluator, &stop, every));
        if let Err(e) = spawned {
            tracing::error!(error = %e, "cannot start polling the ruler API's namespaces");
        }
    }

    /// Reloads when the shared namespaces differ from those the latest load read.
    fn reload_if_namespaces_changed(&self) {
        let Some(ruler) = &self.shared.ruler else { return };
        let loaded = *self.shared.namespaces_loaded.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match ruler.digest() {
            Ok(now) if Some(now) != loaded => {
                tracing::info!("the ruler API's namespaces changed; reloading the rules");
                // A failed reload is logged and kept for /api/v1/status by `reload` itself.
                let _ = self.reload();
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "reading the ruler API's namespaces failed"),
        }
    }

    /// Reads the rule files again and replaces the groups (see the module's doc).
    ///
    /// # Errors
    /// The files' problems; the running rules are kept.
    pub fn reload(&self) -> Result<(), Vec<String>> {
        let mut groups = self.groups.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        if self.stopped.load(Ordering::SeqCst) {
            return Ok(());
        }
        let loaded = self.shared.load();
        let files = match loaded {
            Ok(f) => f,
            Err(errors) => {
                tracing::error!(errors = ?errors, "reloading the rule files failed; the running rules stay");
                *self.reload.lock().unwrap_or_else(std::sync::PoisonError::into_inner) =
                    ReloadStatus { success: false, at_ms: crate::storage::now_ms(), errors: errors.clone() };
                return Err(errors);
            }
        };
        let mut old: Vec<GroupRun> = groups.drain(..).filter_map(stop).collect();
        let mut fresh = Vec::new();
        for g in files.groups() {
            let mut run =
                GroupRun::new(g.clone(), self.shared.config.evaluation_interval_ms, self.shared.config.query_offset_ms);
            if let Some(i) = old.iter().position(|o| o.group.identity() == g.identity() && o.group.name == g.name) {
                let previous = old.swap_remove(i);
                let gone = run.adopt(previous);
                run.mark_stale(gone, crate::storage::now_ms(), &env(&self.shared, &g.scope()));
            }
            fresh.push(spawn(run, &self.shared));
        }
        for removed in old {
            if let Some(states) = &self.shared.states {
                super::state::forget(states, &removed.group.identity(), &removed.group.name);
            }
            let series =
                removed.rules.into_iter().flat_map(|r| r.written_series().cloned().collect::<Vec<_>>()).collect();
            let offset = removed.query_offset_ms;
            GroupRun::write_stale(
                series,
                crate::storage::now_ms() - offset,
                &env(&self.shared, &removed.group.scope()),
            );
        }
        *groups = fresh;
        *self.reload.lock().unwrap_or_else(std::sync::PoisonError::into_inner) =
            ReloadStatus { success: true, at_ms: crate::storage::now_ms(), errors: Vec::new() };
        tracing::info!(groups = groups.len(), "rule files reloaded");
        Ok(())
    }

    /// The latest state of every group, in file order.
    pub fn groups(&self) -> Vec<Arc<GroupRun>> {
        let groups = self.groups.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        groups.iter().map(|g| g.published.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()).collect()
    }

    /// The durations of every rule and group evaluation so far (a copy).
    pub fn durations(&self) -> EvaluationDurations {
        self.shared.durations.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// The ruler API's store, when the server has one.
    pub fn ruler(&self) -> Option<&RulerStore> {
        self.shared.ruler.as_ref()
    }

    /// The latest reload's outcome.
    pub fn reload_status(&self) -> ReloadStatus {
        self.reload.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// Stops every group after its current evaluation.
    pub fn stop(&self) {
        if self.stopped.swap(true, Ordering::SeqCst) {
            return;
        }
        let (flag, wake) = &*self.poll_stop;
        *flag.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = true;
        wake.notify_all();
        let mut groups = self.groups.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        for g in groups.drain(..) {
            stop(g);
        }
        if let Some(sink) = &self.shared.sink {
            sink.stop();
        }
    }
}

impl Drop for Evaluator {
    fn drop(&mut self) {
        self.stop();
    }
}

/// What a group of `scope` reads from and writes to.
fn env<'a>(shared: &'a Shared, scope: &'a crate::tenant::Scope) -> Env<'a> {
    Env {
        engine: &shared.engine,
        backend: &shared.backend,
        scope,
        gate: shared.gate.as_deref(),
        external_labels: &shared.config.external_labels,
        external_url: &shared.config.external_url,
    }
}

/// The polling thread of [`Evaluator::watch_namespaces`]: until stopped or the evaluator is
/// gone.
fn poll(evaluator: &Weak<Evaluator>, stop: &(Mutex<bool>, Condvar), every: Duration) {
    loop {
        let (flag, wake) = stop;
        let stopped = flag.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (stopped, _) =
            wake.wait_timeout_while(stopped, every, |s| !*s).unwrap_or_else(std::sync::PoisonError::into_inner);
        if *stopped {
            return;
        }
        drop(stopped);
        let Some(evaluator) = evaluator.upgrade() else { return };
        if evaluator.stopped.load(Ordering::SeqCst) {
            return;
        }
        evaluator.reload_if_namespaces_changed();
    }
}

/// Signals a group's thread and waits for it; returns its state.
fn stop(mut g: GroupThread) -> Option<GroupRun> {
    let (flag, wake) = &*g.stop;
    *flag.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = true;
    wake.notify_all();
    g.handle.take().and_then(|h| h.join().ok())
}

fn spawn(run: GroupRun, shared: &Arc<Shared>) -> GroupThread {
    let published = Arc::new(Mutex::new(Arc::new(run.clone())));
    let stop = Arc::new((Mutex::new(false), Condvar::new()));
    let name = format!("saltdb-rules-{}", run.group.name.chars().take(20).collect::<String>());
    let (p, s, sh) = (published.clone(), stop.clone(), shared.clone());
    let handle = std::thread::Builder::new().name(name).spawn(move || run_group(run, &sh, &p, &s));
    match handle {
        Ok(h) => GroupThread { published, stop, handle: Some(h) },
        Err(e) => {
            tracing::error!(error = %e, "cannot start a rule group's thread");
            GroupThread { published, stop, handle: None }
        }
    }
}

fn now_ns() -> i64 {
    chrono::Utc::now().timestamp_nanos_opt().unwrap_or(i64::MAX)
}

/// A group's thread: waits for each slot, evaluates, publishes; returns its state when stopped.
fn run_group(
    mut run: GroupRun,
    shared: &Shared,
    published: &Mutex<Arc<GroupRun>>,
    stop: &(Mutex<bool>, Condvar),
) -> GroupRun {
    let interval_ns = run.interval_ms.max(1).saturating_mul(1_000_000);
    let hash = group_hash(&run.group.identity(), &run.group.name);
    let scope = run.group.scope();
    let mut slot = slot_at_or_before(hash, interval_ns, now_ns()) + interval_ns;
    let mut saved = fingerprint(&run);
    loop {
        if wait_until(slot, stop) {
            return run;
        }
        let outgoing = run.evaluate(slot.div_euclid(1_000_000), &env(shared, &scope), shared.config.resend_delay_ms);
        shared.durations.lock().unwrap_or_else(std::sync::PoisonError::into_inner).observe(&run);
        // Saved before anything is sent: a crash after a send never sends it again early.
        if let Some(states) = &shared.states {
            let now = fingerprint(&run);
            if now != saved {
                match states.save(&run) {
                    Ok(()) => saved = now,
                    Err(e) => {
                        tracing::error!(group = %run.group.name, error = %e, "saving the group's alert state failed")
                    }
                }
            }
        }
        if let (Some(sink), false) = (&shared.sink, outgoing.is_empty()) {
            sink.send(outgoing);
        }
        *published.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(run.clone());
        let (next, missed) = next_slot(slot, interval_ns, now_ns());
        if missed > 0 {
            run.missed += missed as u64;
            tracing::warn!(group = %run.group.name, missed, "rule group evaluation took longer than its interval");
        }
        slot = next;
    }
}

/// Sleeps until `slot_ns`; true when stopped first.
fn wait_until(slot_ns: i64, stop: &(Mutex<bool>, Condvar)) -> bool {
    let (flag, wake) = stop;
    let mut stopped = flag.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    loop {
        if *stopped {
            return true;
        }
        let left = slot_ns - now_ns();
        if left <= 0 {
            return false;
        }
        let wait = Duration::from_nanos(left.unsigned_abs()).min(Duration::from_secs(1));
        stopped = wake.wait_timeout(stopped, wait).unwrap_or_else(std::sync::PoisonError::into_inner).0;
    }
}
