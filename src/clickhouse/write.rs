//! Writes, as group commits. Each write request becomes a job for the store's writer thread,
//! which takes every job queued meanwhile (more arrive while it waits briefly, or while the
//! previous group's inserts run), splits their series by owning shard into `RowBinary` rows
//! of the three tables, and inserts them on every shard concerned in parallel: one insert per
//! table and shard per group, however many requests it holds, so ClickHouse's part count
//! follows the group rate, not the request rate. A job is acknowledged once every shard it
//! touched has acknowledged; a shard that fails fails only the jobs that touched it.
//! Floats and native histograms share the `samples` table (a histogram row carries its sample
//! as a one-sample histogram chunk), so a shard's share of a write, whatever its kinds, is one
//! insert: the shard takes all of it or none. A write touching several shards gets a write id
//! in its rows and is committed once all of them acknowledged, by one commit record on one
//! shard (`commit.rs`): all or nothing.

use std::collections::{BTreeSet, HashSet};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use super::exemplars::InOrder;
use super::rowbinary::{put_len, put_str};
use super::{day_of, ClickHouse, Inner, Placement};
use crate::histogram::chunk as histogram_chunk;
use crate::labels::Labels;
use crate::sample::{Exemplar, PackedBatch, PackedSeries};
use crate::storage::StorageError;

/// A write waiting for its group's inserts.
pub(super) struct Job {
    batch: PackedBatch,
    reply: SyncSender<Result<usize, StorageError>>,
}

/// Jobs waiting for the writer thread (beyond that, writers wait to queue).
pub(super) const QUEUE: usize = 1024;
/// A group stops growing once no job arrived for this long...
const QUIET: Duration = Duration::from_micros(200);
/// ...or it has waited this long since its first job...
const MAX_WAIT: Duration = Duration::from_millis(100);
/// ...or it holds this many samples.
const MAX_SAMPLES: usize = 2_000_000;

/// The rows of one group for one shard.
#[derive(Default)]
struct ShardRows {
    series: Vec<u8>,
    postings: Vec<u8>,
    samples: Vec<u8>,
    /// `starts` rows: one per sample with a start timestamp (empty for most writes).
    starts: Vec<u8>,
    /// `exemplars` rows and how many.
    exemplars: Vec<u8>,
    exemplar_count: u64,
    /// `(id, day, write_id)` whose postings rows are in `postings`: a series indexed by two
    /// jobs of a group under different write ids gets rows under both, so that one job's abort
    /// cannot hide the other's series.
    indexed: HashSet<(u64, u16, u64)>,
    /// Series ids with a `series` row here.
    with_series_row: HashSet<u64>,
    /// Rows in `series`, `postings` and `samples`.
    counts: [u64; 3],
    /// The `inserted_at` of this group's samples: this node's clock when the group was built
    /// (a seal leaves rows inserted after its watermark for the next seal, see `seal.rs`).
    stamp: i64,
}

impl ShardRows {
    /// Adds the rows of one series' samples and histograms (and its index rows for the days
    /// not known yet).
    /// `in_order` is the job's: which of its exemplars are stored, over all its series.
    fn add<'a>(
        &mut self,
        place: Placement,
        series: &PackedSeries<'a>,
        known: &HashSet<(u64, u16)>,
        write_id: u64,
        in_order: &mut InOrder<'a>,
    ) -> Result<(), StorageError> {
        let stamps = series.samples.iter().map(|p| p.timestamp_ms);
        let stamps = stamps
            .chain(series.histograms.iter().map(|h| h.timestamp_ms))
            .chain(series.exemplars.iter().map(|e| e.timestamp_ms));
        let days: BTreeSet<u16> = stamps.map(day_of).collect();
        self.index(place, series.labels, days, known, write_id)?;
        // A histogram replaces a float of the same series and time in one write, as the embedded
        // store's head and log replay do; the rows then never disagree within one insert.
        let shadowed: HashSet<i64> = series.histograms.iter().map(|h| h.timestamp_ms).collect();
        for p in series.samples.iter().filter(|p| shadowed.is_empty() || !shadowed.contains(&p.timestamp_ms)) {
            self.sample_row(place, p.timestamp_ms, p.value.to_bits(), &[], write_id);
        }
        let mut encoded = Vec::new();
        for h in series.histograms {
            encoded.clear();
            histogram_chunk::encode(&[(h.timestamp_ms, (*h.histogram).clone())], &mut encoded)
                .map_err(|_| StorageError::Corrupt { what: "histogram to write" })?;
            self.sample_row(place, h.timestamp_ms, 0, &encoded, write_id);
        }
        for st in series.starts {
            self.starts.extend_from_slice(&place.bucket.to_le_bytes());
            self.starts.extend_from_slice(&place.id.to_le_bytes());
            self.starts.extend_from_slice(&st.timestamp_ms.to_le_bytes());
            self.starts.extend_from_slice(&st.start_ms.to_le_bytes());
            self.starts.extend_from_slice(&write_id.to_le_bytes());
        }
        for e in in_order.keep(series.labels, series.exemplars) {
            self.exemplar_row(place, e, write_id);
        }
        Ok(())
    }

    /// Adds one `samples` row: a float's bits, or (`histogram` not empty) one histogram sample
    /// as a histogram chunk; `write_id` 0 unless the write spans shards.
    fn sample_row(&mut self, place: Placement, ts: i64, bits: u64, histogram: &[u8], write_id: u64) {
        self.counts[2] += 1;
        self.samples.extend_from_slice(&place.bucket.to_le_bytes());
        self.samples.extend_from_slice(&place.id.to_le_bytes());
        self.samples.extend_from_slice(&ts.to_le_bytes());
        self.samples.extend_from_slice(&bits.to_le_bytes());
        self.samples.extend_from_slice(&self.stamp.to_le_bytes());
        put_str(&mut self.samples, histogram);
        self.samples.extend_from_slice(&write_id.to_le_bytes());
    }

    /// Adds one `exemplars` row: its time, value bits and label set, under `write_id`.
    fn exemplar_row(&mut self, place: Placement, e: &Exemplar, write_id: u64) {
        self.exemplar_count += 1;
        self.exemplars.extend_from_slice(&place.bucket.to_le_bytes());
        self.exemplars.extend_from_slice(&place.id.to_le_bytes());
        self.exemplars.extend_from_slice(&e.timestamp_ms.to_le_bytes());
        self.exemplars.extend_from_slice(&e.value.to_bits().to_le_bytes());
        put_len(&mut self.exemplars, e.labels.len() as u64);
        for label in e.labels.iter() {
            put_str(&mut self.exemplars, label.name.as_bytes());
        }
        put_len(&mut self.exemplars, e.labels.len() as u64);
        for label in e.labels.iter() {
            put_str(&mut self.exemplars, label.value.as_bytes());
        }
        self.exemplars.extend_from_slice(&write_id.to_le_bytes());
    }

    /// Adds the `series` and `postings` rows of a series for `days` not known yet, the postings
    /// under `write_id` (as the write's samples: readers list the series only once it commits).
    fn index(
        &mut self,
        place: Placement,
        canonical: &[u8],
        days: BTreeSet<u16>,
        known: &HashSet<(u64, u16)>,
        write_id: u64,
    ) -> Result<(), StorageError> {
        let mut labels = None;
        for day in days {
            if known.contains(&(place.id, day)) || !self.indexed.insert((place.id, day, write_id)) {
                continue;
            }
            let l = match &labels {
                Some(l) => l,
                None => {
                    labels.insert(Labels::decode(canonical).map_err(|_| StorageError::Corrupt { what: "label set" })?)
                }
            };
            if self.with_series_row.insert(place.id) {
                self.counts[0] += 1;
                self.series.extend_from_slice(&place.id.to_le_bytes());
                self.series.extend_from_slice(&place.bucket.to_le_bytes());
                put_len(&mut self.series, l.len() as u64);
                for label in l.iter() {
                    put_str(&mut self.series, label.name.as_bytes());
                }
                put_len(&mut self.series, l.len() as u64);
                for label in l.iter() {
                    put_str(&mut self.series, label.value.as_bytes());
                }
            }
            self.counts[1] += l.len() as u64;
            for label in l.iter() {
                self.postings.extend_from_slice(&day.to_le_bytes());
                put_str(&mut self.postings, label.name.as_bytes());
                put_str(&mut self.postings, label.value.as_bytes());
                self.postings.extend_from_slice(&place.id.to_le_bytes());
                self.postings.extend_from_slice(&write_id.to_le_bytes());
                self.postings.extend_from_slice(&self.stamp.to_le_bytes());
            }
        }
        Ok(())
    }
}

impl ClickHouse {
    /// Stores `batch` (validated: labels canonical and carrying a name); returns the samples
    /// written (floats and histograms; its exemplars are stored too, with them). Blocks until
    /// the group holding it is stored.
    ///
    /// # Errors
    /// [`StorageError::TooOld`] / [`StorageError::TooNew`] for a sample outside the accepted
    /// range (nothing is written); [`StorageError::Unavailable`] when a shard the batch needs
    /// fails (nothing of the batch is visible, though a shard may hold its invisible rows:
    /// retrying the batch is safe);
    /// [`StorageError::Corrupt`] for label bytes that are not canonical.
    pub fn write(&self, batch: &PackedBatch) -> Result<usize, StorageError> {
        self.write_owned(batch.clone())
    }

    /// [`ClickHouse::write`], taking the batch.
    ///
    /// # Errors
    /// As [`ClickHouse::write`].
    pub fn write_owned(&self, batch: PackedBatch) -> Result<usize, StorageError> {
        self.check_time_range(&batch, crate::storage::now_ms())?;
        if batch.is_empty() {
            return Ok(0);
        }
        let (reply, rx) = std::sync::mpsc::sync_channel(1);
        self.inner.writer.send(Job { batch, reply }).map_err(|_| StorageError::ShuttingDown)?;
        rx.recv().map_err(|_| StorageError::ShuttingDown)?
    }
}

/// The writer thread of a store: groups jobs and stores each group, until the store is gone.
pub(super) fn run(store: Weak<Inner>, jobs: Receiver<Job>) {
    while let Ok(first) = jobs.recv() {
        let started = Instant::now();
        let mut samples = first.batch.sample_count() + first.batch.histogram_count();
        let mut group = vec![first];
        while samples < MAX_SAMPLES && started.elapsed() < MAX_WAIT {
            match jobs.recv_timeout(QUIET) {
                Ok(job) => {
                    samples += job.batch.sample_count() + job.batch.histogram_count();
                    group.push(job);
                }
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => break,
            }
        }
        let Some(inner) = store.upgrade() else {
            for job in group {
                let _ = job.reply.send(Err(StorageError::ShuttingDown));
            }
            return;
        };
        store_group(&ClickHouse { inner }, group);
    }
}

/// What a job of a group needs: the shards it touched, and its write id (0 when it touched one).
struct Plan {
    touched: Vec<bool>,
    write_id: u64,
}

/// Adds the rows of `job` to `per_shard`, under a fresh write id if they span shards.
fn plan(
    store: &ClickHouse,
    job: &Job,
    per_shard: &mut [ShardRows],
    known: &HashSet<(u64, u16)>,
) -> Result<Plan, StorageError> {
    let placed: Vec<(Placement, PackedSeries<'_>)> = job.batch.series().map(|s| (store.place(s.labels), s)).collect();
    let mut touched = vec![false; per_shard.len()];
    for (place, _) in &placed {
        if let Some(t) = touched.get_mut(place.shard) {
            *t = true;
        }
    }
    let write_id = match touched.iter().position(|&t| t) {
        Some(coordinator) if touched.iter().filter(|&&t| t).count() > 1 => store.write_id(coordinator),
        _ => 0,
    };
    // One series may come as several series of the batch (entries of the request).
    let mut in_order = InOrder::default();
    for (place, series) in &placed {
        if let Some(rows) = per_shard.get_mut(place.shard) {
            rows.add(*place, series, known, write_id, &mut in_order)?;
        }
    }
    Ok(Plan { touched, write_id })
}

/// Stores one group and answers each of its jobs.
fn store_group(store: &ClickHouse, group: Vec<Job>) {
    let shards = store.inner.shards.len();
    let stamp = crate::storage::now_ms();
    let mut per_shard: Vec<ShardRows> = (0..shards).map(|_| ShardRows { stamp, ..ShardRows::default() }).collect();
    // Per job: what it needs, or why it cannot be stored.
    let plans: Vec<Result<Plan, StorageError>> = {
        let known = store.inner.known.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        group.iter().map(|job| plan(store, job, &mut per_shard, &known)).collect()
    };
    let results = insert_all(store, &per_shard);
    // Per job: its data's outcome (every shard it touched acknowledged).
    let stored: Vec<Result<&Plan, StorageError>> = plans
        .iter()
        .map(|plan| {
            let plan = plan.as_ref().map_err(Clone::clone)?;
            match plan.touched.iter().zip(&results).find_map(|(&used, r)| used.then_some(r.as_ref().err()).flatten()) {
                Some(e) => Err(e.clone()),
                None => Ok(plan),
            }
        })
        .collect();
    let commits = commit_group(store, &stored, stamp);
    remember_indexed(store, &per_shard, &results, &stored, &commits);
    for ((job, stored), committed) in group.into_iter().zip(stored).zip(commits) {
        let outcome = stored.and(committed).map(|()| job.batch.sample_count() + job.batch.histogram_count());
        let _ = job.reply.send(outcome);
    }
}

/// Adds to the node's known series the `(id, day)` pairs whose postings rows are visible now:
/// those of write id 0 on a shard that took its insert, and those of a write spanning shards
/// that committed. A series indexed only by a write that failed is not remembered, so its next
/// write indexes it again (else a refused write would leave it unlisted for good).
fn remember_indexed(
    store: &ClickHouse,
    per_shard: &[ShardRows],
    results: &[Result<(), StorageError>],
    stored: &[Result<&Plan, StorageError>],
    commits: &[Result<(), StorageError>],
) {
    let committed: HashSet<u64> = stored
        .iter()
        .zip(commits)
        .filter_map(|(s, c)| match (s, c) {
            (Ok(plan), Ok(())) if plan.write_id != 0 => Some(plan.write_id),
            _ => None,
        })
        .collect();
    let mut known = store.inner.known.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if known.len() > store.inner.config.known_series {
        known.clear();
    }
    for (rows, result) in per_shard.iter().zip(results) {
        if result.is_ok() {
            let visible = rows.indexed.iter().filter(|&&(_, _, w)| w == 0 || committed.contains(&w));
            known.extend(visible.map(|&(id, day, _)| (id, day)));
        }
    }
}

/// Writes the commit records of the group's stored jobs that span shards (`commit.rs`); per
/// job, whether it is committed (`Ok` for a job of one shard or one that failed already).
/// A record is written only within the request timeout of `stamp` (the rows' `inserted_at`),
/// so that seals and readers can tell an aborted write from a slow one.
fn commit_group(
    store: &ClickHouse,
    stored: &[Result<&Plan, StorageError>],
    stamp: i64,
) -> Vec<Result<(), StorageError>> {
    let shards = store.inner.shards.len();
    let pending = stored.iter().filter_map(|s| s.as_ref().ok()).filter(|p| p.write_id != 0);
    let mut per_coordinator: Vec<Vec<u64>> = vec![Vec::new(); shards];
    for plan in pending {
        if let Some(ids) = per_coordinator.get_mut(super::commit::coordinator(plan.write_id, shards)) {
            ids.push(plan.write_id);
        }
    }
    if per_coordinator.iter().all(Vec::is_empty) {
        return stored.iter().map(|_| Ok(())).collect();
    }
    if let Some(hook) = &store.inner.config.commit_hook {
        (hook.0)();
    }
    let now = crate::storage::now_ms();
    let deadline = i64::try_from(store.inner.config.timeout.as_millis()).unwrap_or(i64::MAX);
    let results: Vec<Result<(), StorageError>> = if now.saturating_sub(stamp) > deadline {
        let late = StorageError::Unavailable(format!(
            "the ClickHouse shards took {} ms to store a write spanning shards, longer than the timeout: \
             it is not committed (nothing of it is visible); retry",
            now.saturating_sub(stamp)
        ));
        vec![Err(late); shards]
    } else {
        store.commit(&per_coordinator, now)
    };
    stored
        .iter()
        .map(|s| match s {
            Ok(plan) if plan.write_id != 0 => results
                .get(super::commit::coordinator(plan.write_id, shards))
                .cloned()
                .unwrap_or_else(|| Err(StorageError::Unavailable("no coordinator shard".to_owned()))),
            _ => Ok(()),
        })
        .collect()
}

/// Inserts every shard's rows in parallel, the index first (a sample visible to a read always
/// has its series); the outcome per shard.
fn insert_all(store: &ClickHouse, per_shard: &[ShardRows]) -> Vec<Result<(), StorageError>> {
    let (series, postings, samples) = (store.table("series"), store.table("postings"), store.table("samples"));
    let (starts, exemplars) = (store.table("starts"), store.table("exemplars"));
    std::thread::scope(|scope| {
        let handles: Vec<_> = per_shard
            .iter()
            .zip(&store.inner.shards)
            .map(|(rows, shard)| {
                let (series, postings, samples, starts, exemplars) =
                    (&series, &postings, &samples, &starts, &exemplars);
                scope.spawn(move || -> Result<(), StorageError> {
                    if rows.samples.is_empty() && rows.exemplars.is_empty() {
                        return Ok(());
                    }
                    if !rows.series.is_empty() {
                        let insert = format!("INSERT INTO {series} (series_id, bucket, names, values)");
                        shard.insert(&insert, &rows.series, 0, rows.counts[0])?;
                    }
                    if !rows.postings.is_empty() {
                        let insert =
                            format!("INSERT INTO {postings} (day, name, value, series_id, write_id, inserted_at)");
                        shard.insert(&insert, &rows.postings, 1, rows.counts[1])?;
                    }
                    if !rows.starts.is_empty() {
                        // Before the samples, as the index: a sample read has its start timestamp.
                        let insert = format!("INSERT INTO {starts} (bucket, series_id, ts, start, write_id)");
                        shard.insert(&insert, &rows.starts, usize::MAX, (rows.starts.len() / 34) as u64)?;
                    }
                    if !rows.exemplars.is_empty() {
                        let insert =
                            format!("INSERT INTO {exemplars} (bucket, series_id, ts, value, names, values, write_id)");
                        shard.insert(&insert, &rows.exemplars, usize::MAX, rows.exemplar_count)?;
                    }
                    if rows.samples.is_empty() {
                        return Ok(());
                    }
                    let insert = format!(
                        "INSERT INTO {samples} (bucket, series_id, ts, value, inserted_at, histogram, write_id)"
                    );
                    shard.insert(&insert, &rows.samples, 2, rows.counts[2])?;
                    Ok(())
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err(StorageError::Unavailable("a shard insert panicked".to_owned()))))
            .collect()
    })
}

/// Starts the writer thread of the store about to be made of `inner`.
pub(super) fn start(inner: &Arc<Inner>, jobs: Receiver<Job>) -> std::io::Result<()> {
    let weak = Arc::downgrade(inner);
    std::thread::Builder::new().name("clickhouse-writer".to_owned()).spawn(move || run(weak, jobs)).map(|_| ())
}
