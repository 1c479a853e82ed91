//! Flushing the head into runs of the window keyspaces.
//!
//! A flush that falls due (by size, see [`super::HeadLimits`], or `--head-flush-interval`) runs as a *cycle*
//! of steps, a few head shards (buckets) at a time, between group commits: writes keep being
//! acknowledged while the head drains, instead of stalling for the whole flush. Each step
//! writes its shards' runs in parallel on the writer's pool, one worker per shard (a shard is a
//! bucket: its series, and their rows, are disjoint from the others'), commits them, then
//! removes those shards' series from the head (readers read the
//! head before the keyspaces, see `head.rs`, so a racing read sees every sample). The log rows
//! written before the cycle began are removed when its last step is done: by then every sample
//! they hold is in a run. Samples that arrived during the cycle may already be in runs too;
//! their log rows stay, and a replay after a crash merges them again idempotently.
//!
//! While the head holds no native histogram, a step runs in the background: the writer finds
//! the step's windows and unindexed series and commits their postings, then freezes the step's
//! shards (see `head.rs`: their series move aside, still read by queries, and new samples go to
//! emptied live shards) and hands them to the flush pool. It goes back to its commands at once
//! and collects the step's outcome when it is done (every command but a write waits for it
//! first), and only then empties the frozen shards and starts the next step. A failed
//! background step poisons the database: its samples stay in the head and in the log, which
//! the next start replays. With histograms in the head a step runs in the foreground, as it did
//! before (a write of one kind replaces the other kind's sample at its timestamp in the live
//! head only).
//!
//! A full flush (shutdown, snapshot, delete, retention) first waits for a background step, then
//! flushes every shard at once and removes every log row.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::sync::mpsc::{self, TryRecvError};
use std::sync::Arc;
use std::time::Instant;

use rayon::prelude::*;

use crate::storage::lifecycle::class::ClassId;
use crate::storage::lifecycle::window::WindowKey;
use crate::storage::series_id::IdMap;
use crate::storage::shared::Shared;

use super::flushed_max::FlushedMax;
use super::head::{HistogramShard, Shard};
use super::{histogram_run, in_pool, keys, run, wal, Pending, Result, Sample, SeriesId, StorageError, Writer};

/// Rows per fjall batch while flushing (bounds the batch's memory; the log rows are removed
/// only by the last batch, so a crash in between replays and merges idempotently).
const FLUSH_BATCH_ROWS: usize = 50_000;
/// Samples a step of a flush cycle writes at least (whole shards), between two group commits:
/// 1/64 of `--head-max-samples`, within these bounds.
const STEP_SAMPLES: std::ops::RangeInclusive<usize> = 1_000..=50_000;

/// A flush in progress, a few shards at a time (see [`Writer::flush_step`]).
#[derive(Clone, Copy, Debug)]
pub(super) struct FlushCycle {
    /// The log position when the cycle began: rows before it are removed at its end.
    mark: u64,
    /// The next shard to flush.
    next_shard: usize,
    began: Instant,
}

/// A flush step running in the background (see the module docs).
pub(super) struct InFlight {
    /// The head shards it writes (frozen).
    shards: std::ops::Range<usize>,
    done: mpsc::Receiver<StepDone>,
    started: Instant,
}

/// What a background step sends back: each shard's outcome, and the shards' entries of
/// [`Writer::flushed_max`] it took along.
struct StepDone {
    flushed: Vec<Result<ShardFlushed>>,
    maps: Vec<FlushedMax>,
}

/// The flush pool: a background step's shards are written on it, in parallel. Its own, not the
/// write pool, which the writer's head appends use meanwhile. `None` (logged) when its threads
/// cannot start: every step then runs in the foreground.
pub(super) fn flush_pool() -> Option<Arc<rayon::ThreadPool>> {
    let built = rayon::ThreadPoolBuilder::new()
        .num_threads(crate::cores::available())
        .thread_name(|i| format!("saltdb-flush-{i}"))
        .build();
    match built {
        Ok(pool) => Some(Arc::new(pool)),
        Err(e) => {
            tracing::warn!(error = %e, "cannot start the flush pool; head flushes run on the writer thread");
            None
        }
    }
}

/// The series of a head shard in id order, which is their rows' key order within the shard's
/// bucket: fjall inserts a batch's rows into the memtable's skiplist one after the other, and a
/// search that follows the previous one's path finds it in the CPU caches (the map's own order
/// misses them at every level).
fn by_id<V>(shard: &IdMap<V>) -> Vec<(&SeriesId, &V)> {
    let mut series: Vec<(&SeriesId, &V)> = shard.iter().collect();
    series.sort_unstable_by_key(|&(&id, _)| id);
    series
}

impl Writer {
    /// True while a flush cycle is under way (the writer then does not wait long for commands).
    pub(super) fn flushing(&self) -> bool {
        self.cycle.is_some()
    }

    /// True while a flush step runs in the background (the writer then polls for its end).
    pub(super) fn flushing_in_background(&self) -> bool {
        self.in_flight.is_some()
    }

    /// Waits for the background flush step, if any, and collects it (see the module docs).
    ///
    /// # Errors
    /// The step's failure (the database is then poisoned).
    pub(super) fn settle_flush(&mut self) -> Result<()> {
        self.collect_step(true).map(|_| ())
    }

    /// Collects the background step if it is done (or, with `wait`, once it is): puts back the
    /// `flushed_max` entries, records the windows written, empties the frozen shards and moves
    /// the cycle past them. Returns false while the step still runs; true when there is none
    /// (any more).
    fn collect_step(&mut self, wait: bool) -> Result<bool> {
        let Some(job) = self.in_flight.as_ref() else { return Ok(true) };
        let done = if wait {
            job.done.recv().ok()
        } else {
            match job.done.try_recv() {
                Ok(done) => Some(done),
                Err(TryRecvError::Empty) => return Ok(false),
                Err(TryRecvError::Disconnected) => None,
            }
        };
        let Some(job) = self.in_flight.take() else { return Ok(true) };
        let sh = Arc::clone(&self.shared);
        let Some(done) = done else {
            return Err(self.background_failed(StorageError::Corrupt { what: "a background head flush stopped" }));
        };
        for (slot, map) in self.flushed_max.get_mut(job.shards.clone()).unwrap_or_default().iter_mut().zip(done.maps) {
            *slot = map;
        }
        let (mut runs, mut samples, mut windows, mut failed) = (0usize, 0usize, Vec::new(), None);
        for step in done.flushed {
            match step {
                Ok(step) => {
                    runs += step.runs;
                    samples += step.samples;
                    windows.extend(step.windows);
                }
                Err(e) => failed = Some(e),
            }
        }
        // Whatever was committed counts, before a seal may look (see `Windows::committed`).
        sh.windows.committed(windows);
        if let Some(e) = failed {
            return Err(self.background_failed(e));
        }
        for shard in job.shards.clone() {
            sh.head.clear_frozen(shard);
        }
        if let Some(cycle) = self.cycle.as_mut() {
            cycle.next_shard = cycle.next_shard.max(job.shards.end);
        }
        let elapsed_ms = job.started.elapsed().as_millis() as u64;
        tracing::debug!(samples, runs, elapsed_ms, background = true, "flushed head shards");
        Ok(true)
    }

    /// A background step failed: the database is poisoned whatever the error, so that no log
    /// row is removed and the frozen samples, still in the head for reads, are replayed at the
    /// next start.
    fn background_failed(&mut self, e: StorageError) -> StorageError {
        self.shared.poison(&e.to_string());
        tracing::error!(error = %e, "flushing the head failed; refusing further writes");
        e
    }

    /// Starts a background step over head shards `shards` (see the module docs).
    fn start_step(&mut self, shards: std::ops::Range<usize>) -> Result<()> {
        let sh = Arc::clone(&self.shared);
        if let Some(reason) = sh.poisoned() {
            return Err(StorageError::Poisoned(reason));
        }
        let Some(pool) = self.flush_pool.clone() else { return Ok(()) };
        let started = Instant::now();
        // Planned and indexed before the shards are frozen: only this thread appends to the
        // head, so nothing arrives in between, and nothing can fail once they are frozen.
        let mut pending = Pending::default();
        let plans = self.plan_shards(shards.clone())?;
        let keyspaces = match self.index_planned(&plans, &mut pending) {
            Ok(keyspaces) => keyspaces,
            Err(e) => return Err(self.flush_failed(e, &pending)),
        };
        let mut frozen = Vec::with_capacity(shards.len());
        for shard in shards.clone() {
            match sh.head.freeze(shard) {
                Some(f) => frozen.push(f),
                None => return Err(self.background_failed(StorageError::Corrupt { what: "a head shard frozen twice" })),
            }
        }
        let mut maps: Vec<FlushedMax> =
            self.flushed_max.get_mut(shards.clone()).unwrap_or_default().iter_mut().map(std::mem::take).collect();
        let (fresh_from, durability) = (self.fresh_from, self.durability);
        let (tx, rx) = mpsc::sync_channel(1);
        let first = shards.start;
        pool.spawn(move || {
            let context = RunContext { sh: &sh, keyspaces: &keyspaces, fresh_from, durability };
            let flushed = crate::containment::contain("flushing the head", || {
                maps.par_iter_mut()
                    .zip(frozen.par_iter())
                    .enumerate()
                    .map(|(i, (max, floats))| flush_shard(&context, first + i, Some(floats), None, max))
                    .collect::<Vec<_>>()
            })
            .unwrap_or_else(|panic| {
                tracing::error!(error = %panic, "a background head flush panicked");
                vec![Err(StorageError::Corrupt { what: "a background head flush panicked" })]
            });
            // The writer may have gone (shutdown after a failure): nothing to report to then.
            let _ = tx.send(StepDone { flushed, maps });
        });
        self.in_flight = Some(InFlight { shards, done: rx, started });
        Ok(())
    }

    /// Begins a flush cycle when one falls due, and advances the current one by a step.
    pub(super) fn flush_if_due(&mut self) {
        if self.cycle.is_none() {
            let head = &self.shared.head;
            let due = self.limits.full(head.len(), head.series(), head.bytes())
                || self.head_since.is_some_and(|t| t.elapsed() >= self.limits.max_age);
            if !due || self.wal.first == self.wal.next {
                return;
            }
            self.cycle = Some(FlushCycle { mark: self.wal.next, next_shard: 0, began: Instant::now() });
        }
        // A failure poisoned the database and was logged; the head stays readable.
        let _ = self.flush_step();
    }

    /// Flushes shards of the current cycle until a step's samples (see [`STEP_SAMPLES`]) are
    /// written or the cycle ends.
    fn flush_step(&mut self) -> Result<()> {
        if !self.collect_step(false)? {
            return Ok(());
        }
        let Some(mut cycle) = self.cycle else { return Ok(()) };
        let sh = Arc::clone(&self.shared);
        let width = self.step_width();
        if cycle.next_shard < sh.head.shard_count() && self.flush_pool.is_some() && sh.head.histogram_series() == 0 {
            let to = (cycle.next_shard + width).min(sh.head.shard_count());
            return self.start_step(cycle.next_shard..to);
        }
        let step = (self.limits.max_samples / 64).clamp(*STEP_SAMPLES.start(), *STEP_SAMPLES.end());
        let mut written = 0;
        while written < step && cycle.next_shard < sh.head.shard_count() {
            let to = (cycle.next_shard + width).min(sh.head.shard_count());
            written += self.flush_shards(cycle.next_shard..to, None)?;
            cycle.next_shard = to;
            self.cycle = Some(cycle);
        }
        if cycle.next_shard < sh.head.shard_count() {
            return Ok(());
        }
        let mut fb = sh.db.batch().durability(self.durability);
        for seq in self.wal.first..cycle.mark {
            fb.remove(&sh.wal, wal::key(seq));
        }
        if let Err(e) = fb.commit() {
            return Err(self.flush_failed(StorageError::from(e), &Pending::default()));
        }
        self.wal.first = cycle.mark;
        self.cycle = None;
        self.seal_log();
        // What the head holds now arrived during the cycle.
        self.head_since = (!sh.head.is_empty()).then_some(cycle.began);
        Ok(())
    }

    /// Shards a step writes at once: as many as the write pool has threads (they are written
    /// in parallel).
    fn step_width(&self) -> usize {
        self.pool.as_ref().map_or(1, rayon::ThreadPool::current_num_threads).max(1)
    }

    /// Writes everything in the head into runs of the window keyspaces and removes every log
    /// row, then empties the head (ending any cycle under way). It goes [`Writer::step_width`]
    /// shards at a time, emptying each group's shards once its runs are committed and keeping
    /// fjall's memtables within `--write-buffer` in between: the head's memory goes as the
    /// memtables' grows, where flushing every shard at once held both in full (at 5 M series,
    /// a full head and 300 MiB of memtables at the idle flush). The log rows are removed with
    /// the last group, once every sample they hold is in runs. On failure the database is
    /// poisoned; the shards not yet written stay in the head, and the log as it was (the next
    /// start replays it, merging what was written idempotently).
    pub(super) fn flush_head(&mut self) -> Result<()> {
        self.settle_flush()?;
        if self.wal.first == self.wal.next {
            return Ok(());
        }
        let (first, next) = (self.wal.first, self.wal.next);
        let (count, width) = (self.shared.head.shard_count(), self.step_width());
        let mut from = 0;
        while from < count {
            let to = from.saturating_add(width).min(count);
            self.flush_shards(from..to, (to == count).then_some(first..next))?;
            self.bound_memtables();
            from = to;
        }
        self.cycle = None;
        self.head_since = None;
        self.wal.first = next;
        self.seal_log();
        Ok(())
    }

    /// Writes the series of head shards `shards` into runs, removes the log rows `log` (if any)
    /// in the last batch, then removes those shards' series from the head. Returns the samples
    /// written.
    fn flush_shards(&mut self, shards: std::ops::Range<usize>, log: Option<std::ops::Range<u64>>) -> Result<usize> {
        let sh = Arc::clone(&self.shared);
        if let Some(reason) = sh.poisoned() {
            return Err(StorageError::Poisoned(reason));
        }
        let mut pending = Pending::default();
        let result = self.write_runs(shards.clone(), log, &mut pending);
        sh.windows.committed(pending.windows.iter().copied());
        match result {
            Ok(samples) => {
                for shard in shards {
                    sh.head.clear_shard(shard);
                }
                Ok(samples)
            }
            Err(e) => Err(self.flush_failed(e, &pending)),
        }
    }

    fn flush_failed(&mut self, e: StorageError, pending: &Pending) -> StorageError {
        for (key, _) in &pending.marks {
            self.presence.forget(*key);
        }
        if matches!(e, StorageError::Engine(_)) {
            self.shared.poison(&e.to_string());
        }
        tracing::error!(error = %e, "flushing the head failed; refusing further writes");
        e
    }

    /// Writes the runs of head shards `shards` in three steps: the windows their samples fall
    /// in, and the series not known to be indexed there, are found on the write pool (one
    /// worker per shard, reading the head); those series are indexed and their postings
    /// committed first, on this thread (a series is never in runs of a window before it is in
    /// its index); then each worker writes and commits its shard's runs. The log rows `log` are
    /// removed after every run is committed (a crash in between replays them, merging
    /// idempotently).
    fn write_runs(
        &mut self,
        shards: std::ops::Range<usize>,
        log: Option<std::ops::Range<u64>>,
        pending: &mut Pending,
    ) -> Result<usize> {
        let sh = Arc::clone(&self.shared);
        let started = Instant::now();
        let plans = self.plan_shards(shards.clone())?;
        let keyspaces = self.index_planned(&plans, pending)?;
        let context =
            RunContext { sh: &sh, keyspaces: &keyspaces, fresh_from: self.fresh_from, durability: self.durability };
        let maps = self.flushed_max.get_mut(shards.clone()).ok_or(StorageError::ShuttingDown)?;
        let flushed: Vec<Result<ShardFlushed>> = in_pool(self.pool.as_ref(), || {
            maps.par_iter_mut()
                .zip(shards.into_par_iter())
                .map(|(max, shard)| {
                    let floats = sh.head.read_shard(shard);
                    let histograms = sh.head.read_histogram_shard(shard);
                    flush_shard(&context, shard, floats.as_deref(), histograms.as_deref(), max)
                })
                .collect()
        });
        let (mut runs, mut samples) = (0usize, 0usize);
        let mut failed = None;
        for done in flushed {
            match done {
                Ok(done) => {
                    runs += done.runs;
                    samples += done.samples;
                    pending.windows.extend(done.windows);
                }
                Err(e) => failed = Some(e),
            }
        }
        if let Some(e) = failed {
            return Err(e);
        }
        if let Some(log) = log {
            let mut fb = sh.db.batch().durability(self.durability);
            for seq in log {
                fb.remove(&sh.wal, wal::key(seq));
            }
            fb.commit()?;
        }
        tracing::debug!(samples, runs, elapsed_ms = started.elapsed().as_millis() as u64, "flushed head shards");
        Ok(samples)
    }

    /// The plans of head shards `shards` (their live float and histogram series), made on the
    /// write pool, a shard per worker.
    fn plan_shards(&self, shards: std::ops::Range<usize>) -> Result<Vec<ShardPlan>> {
        let (sh, presence) = (&self.shared, &self.presence);
        in_pool(self.pool.as_ref(), || {
            shards
                .into_par_iter()
                .map(|shard| {
                    let floats = sh.head.read_shard(shard);
                    let histograms = sh.head.read_histogram_shard(shard);
                    plan_shard(sh, presence, floats.as_deref(), histograms.as_deref())
                })
                .collect()
        })
    }

    /// The hot keyspace of every window in `plans`, with the planned unindexed series indexed
    /// there and their postings committed (a series is never in runs of a window before it is
    /// in its index).
    fn index_planned(
        &mut self,
        plans: &[ShardPlan],
        pending: &mut Pending,
    ) -> Result<HashMap<WindowKey, fjall::Keyspace>> {
        let sh = Arc::clone(&self.shared);
        let mut keyspaces: HashMap<WindowKey, fjall::Keyspace> = HashMap::new();
        for plan in plans {
            for &key in &plan.windows {
                if let Entry::Vacant(slot) = keyspaces.entry(key) {
                    slot.insert(sh.windows.points_for_write(&sh.db, key, || sh.allocate_generation())?);
                }
            }
            for &(key, id) in &plan.unindexed {
                self.mark_present(pending, key, id, None)?;
            }
        }
        if !pending.postings.is_empty() {
            let mut fb = sh.db.batch().durability(self.durability);
            pending.write_postings(&mut fb);
            fb.commit()?;
            pending.committed(&sh);
        }
        Ok(keyspaces)
    }
}

/// What a shard's flush needs besides the head and the shard's own `flushed_max` entries.
struct RunContext<'a> {
    sh: &'a Shared,
    /// The hot keyspace of every window the flushed samples fall in.
    keyspaces: &'a HashMap<WindowKey, fjall::Keyspace>,
    fresh_from: SeriesId,
    durability: Option<fjall::PersistMode>,
}

/// The windows a head shard's samples fall in, and its series not known to be indexed in them.
#[derive(Default)]
struct ShardPlan {
    windows: Vec<WindowKey>,
    unindexed: Vec<(WindowKey, SeriesId)>,
}

/// What a shard's flush wrote.
struct ShardFlushed {
    samples: usize,
    runs: usize,
    windows: Vec<WindowKey>,
}

/// The windows (of class `class`) of the samples of series `all` (ascending), each once, in order.
fn windows_of(sh: &Shared, class: ClassId, times: impl Iterator<Item = i64>, mut each: impl FnMut(WindowKey)) {
    let mut last = None;
    for t in times {
        let start = sh.windows.start_of(t);
        if last != Some(start) {
            last = Some(start);
            each(WindowKey { start_ms: start, class });
        }
    }
}

/// Plans the flush of a head shard's float and histogram series (see [`ShardPlan`]);
/// `presence` is read, not loaded.
///
/// # Errors
/// Engine errors and corrupt rows (reading the labels of a series whose class is not known yet).
fn plan_shard(
    sh: &Shared,
    presence: &super::presence::Presence,
    floats: Option<&Shard>,
    histograms: Option<&HistogramShard>,
) -> Result<ShardPlan> {
    let mut plan = ShardPlan::default();
    let note = |key: WindowKey, id: SeriesId, plan: &mut ShardPlan| {
        if !plan.windows.contains(&key) {
            plan.windows.push(key);
        }
        if !presence.loaded(key).is_some_and(|set| set.contains(id)) {
            plan.unindexed.push((key, id));
        }
    };
    if let Some(series) = floats {
        for (&id, all) in series.iter() {
            // Nearly always one window: its first and last sample share it.
            let (Some(first), Some(last)) = (all.first(), all.last()) else { continue };
            let class = sh.class_of(id)?;
            let start = sh.windows.start_of(first.timestamp_ms);
            if start == sh.windows.start_of(last.timestamp_ms) {
                note(WindowKey { start_ms: start, class }, id, &mut plan);
            } else {
                windows_of(sh, class, all.iter().map(|s| s.timestamp_ms), |w| note(w, id, &mut plan));
            }
        }
    }
    if let Some(histograms) = histograms {
        for (&id, all) in histograms.iter() {
            let class = sh.class_of(id)?;
            windows_of(sh, class, all.iter().map(|h| h.timestamp_ms), |w| note(w, id, &mut plan));
        }
    }
    Ok(plan)
}

/// Writes and commits the runs of the float and histogram series of head shard `shard` (whose
/// series are in bucket `shard`), keeping `flushed_max`, the shard's entries of
/// [`Writer::flushed_max`], up to date.
fn flush_shard(
    ctx: &RunContext<'_>,
    shard: usize,
    floats: Option<&Shard>,
    histograms: Option<&HistogramShard>,
    flushed_max: &mut FlushedMax,
) -> Result<ShardFlushed> {
    let sh = ctx.sh;
    let bucket = u16::try_from(shard).map_err(|_| StorageError::Corrupt { what: "head shard past the buckets" })?;
    let (mut runs, mut samples) = (0usize, 0usize);
    let mut windows: Vec<WindowKey> = Vec::new();
    let mut fb = sh.db.batch().durability(ctx.durability);
    let mut buf = Vec::new();
    let keyspace = |key: WindowKey| {
        ctx.keyspaces.get(&key).cloned().ok_or(StorageError::Corrupt { what: "window of a head sample not planned" })
    };
    if let Some(series) = floats {
        for (&id, all) in by_id(series) {
            let class = sh.class_of(id)?;
            // Split the series' samples at window boundaries.
            let mut rest = all.as_slice();
            while let Some(first) = rest.first() {
                let start = sh.windows.start_of(first.timestamp_ms);
                let end = start.saturating_add(sh.windows.window_ms());
                let cut = rest.partition_point(|s| s.timestamp_ms < end);
                let (piece, tail) = rest.split_at(cut);
                rest = tail;
                let key = WindowKey { start_ms: start, class };
                let ks = keyspace(key)?;
                if !windows.contains(&key) {
                    windows.push(key);
                }
                let run = RunTarget { window: start, ks: &ks, bucket, id };
                runs += write_run(ctx, flushed_max, &mut fb, &run, piece, &mut buf)?;
                samples += piece.len();
            }
            if fb.len() >= FLUSH_BATCH_ROWS {
                std::mem::replace(&mut fb, sh.db.batch().durability(ctx.durability)).commit()?;
            }
        }
    }
    if let Some(histograms) = histograms {
        if !histograms.is_empty() {
            // Before the commit that makes the runs visible (see `Shared::histograms_stored`).
            sh.mark_histograms_stored();
        }
        for (&id, all) in by_id(histograms) {
            let class = sh.class_of(id)?;
            let mut rest = all.as_slice();
            while let Some(first) = rest.first() {
                let start = sh.windows.start_of(first.timestamp_ms);
                let end = start.saturating_add(sh.windows.window_ms());
                let (piece, tail) = rest.split_at(rest.partition_point(|s| s.timestamp_ms < end));
                rest = tail;
                let key = WindowKey { start_ms: start, class };
                let ks = keyspace(key)?;
                if !windows.contains(&key) {
                    windows.push(key);
                }
                runs += histogram_run::write(&mut fb, &ks, bucket, id, piece)?;
                samples += piece.len();
            }
            if fb.len() >= FLUSH_BATCH_ROWS {
                std::mem::replace(&mut fb, sh.db.batch().durability(ctx.durability)).commit()?;
            }
        }
    }
    fb.commit()?;
    Ok(ShardFlushed { samples, runs, windows })
}

/// Where a piece of a series goes: its window, the window's hot keyspace, its bucket and id.
struct RunTarget<'a> {
    window: i64,
    ks: &'a fjall::Keyspace,
    bucket: u16,
    id: SeriesId,
}

/// Adds the rows storing `piece` (ascending, one window) for series `run.id` to `fb`, merged
/// with any run of the keyspace it overlaps (`piece` wins on equal timestamps). Returns the
/// rows written.
fn write_run(
    ctx: &RunContext<'_>,
    flushed_max: &mut FlushedMax,
    fb: &mut fjall::OwnedWriteBatch,
    run: &RunTarget<'_>,
    piece: &[Sample],
    buf: &mut Vec<u8>,
) -> Result<usize> {
    let RunTarget { window, ks, bucket, id } = *run;
    let (Some(first), Some(last)) = (piece.first(), piece.last()) else { return Ok(0) };
    let (a, b) = (first.timestamp_ms, last.timestamp_ms);
    let flushed = flushed_max.get(id).map(|m| (ctx.sh.windows.start_of(m), m));
    // Never flushed, and created by this writer: nothing of it is stored anywhere.
    let never_stored = flushed.is_none() && id >= ctx.fresh_from;
    let known = flushed.filter(|(w, _)| *w == window).map(|(_, m)| m);
    let may_overlap = !never_stored && known.is_none_or(|m| a <= m);
    let mut newest = match known {
        Some(m) => m,
        None if never_stored => i64::MIN,
        // First run of the series into this window since start: learn the newest timestamp
        // already stored (runs written by an earlier life), from the series' newest run.
        None => match ks.prefix(keys::series_prefix(bucket, id)).next() {
            Some(guard) => {
                let (key, value) = guard.into_inner()?;
                let mut run = Vec::new();
                run::decode_row(&key, &value, &mut run)?;
                run.last().map_or(i64::MIN, |s| s.timestamp_ms)
            }
            None => i64::MIN,
        },
    };
    newest = newest.max(b);
    // Within the window: `b` is, and a stored newest read from this window's keyspace is.
    flushed_max.insert(id, newest);
    let mut old_keys: Vec<fjall::Slice> = Vec::new();
    let mut old: Vec<Sample> = Vec::new();
    if may_overlap {
        // Runs starting at or before `b`, newest first; stop at the first ending before `a`.
        let mut found: Vec<Vec<Sample>> = Vec::new();
        for guard in ks.range(keys::point_key(bucket, id, b)..=keys::point_key(bucket, id, 0)) {
            let (key, value) = guard.into_inner()?;
            let mut run = Vec::new();
            run::decode_row(&key, &value, &mut run)?;
            if run.last().is_none_or(|s| s.timestamp_ms < a) {
                break;
            }
            old_keys.push(key);
            found.push(run);
        }
        old = found.into_iter().rev().flatten().collect();
    }
    let merged;
    let all = if old.is_empty() {
        piece
    } else {
        let mut m = Vec::with_capacity(old.len() + piece.len());
        run::merge_into(&mut m, &old, piece);
        merged = m;
        merged.as_slice()
    };
    let mut new_keys = Vec::new();
    for part in all.chunks(run::MAX_RUN_SAMPLES) {
        let Some(head) = part.first() else { continue };
        run::encode_hot(part, buf)?;
        let key = keys::point_key(bucket, id, head.timestamp_ms);
        fb.insert(ks, key, buf.as_slice());
        new_keys.push(key);
    }
    // A key rewritten in this batch must not also be removed in it.
    for key in old_keys {
        if !new_keys.iter().any(|k| k.as_slice() == &*key) {
            fb.remove(ks, key);
        }
    }
    Ok(new_keys.len())
}
