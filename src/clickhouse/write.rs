//! Writes, as group commits. Each write request becomes a job for the store's writer thread,
//! which takes every job queued meanwhile (more arrive while it waits briefly, or while the
//! previous group's inserts run), splits their series by owning shard into `RowBinary` rows
//! of the three tables, and inserts them on every shard concerned in parallel: one insert per
//! table and shard per group, however many requests it holds, so ClickHouse's part count
//! follows the group rate, not the request rate. A job is acknowledged once every shard it
//! touched has acknowledged; a shard that fails fails only the jobs that touched it.
//! Floats and native histograms share the `samples` table (a histogram row carries its sample
//! as a one-sample histogram chunk), so a shard's share of a write, whatever its kinds, is one
//! insert: the shard takes all of it or none.

use std::collections::{BTreeSet, HashSet};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use super::rowbinary::{put_len, put_str};
use super::{day_of, ClickHouse, Inner, Placement};
use crate::histogram::chunk as histogram_chunk;
use crate::labels::Labels;
use crate::sample::{PackedBatch, PackedSeries};
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
    /// `(id, day)` whose series and postings rows are in `series`/`postings`.
    indexed: HashSet<(u64, u16)>,
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
    fn add(
        &mut self,
        place: Placement,
        series: &PackedSeries<'_>,
        known: &HashSet<(u64, u16)>,
    ) -> Result<(), StorageError> {
        let stamps =
            series.samples.iter().map(|p| p.timestamp_ms).chain(series.histograms.iter().map(|h| h.timestamp_ms));
        let days: BTreeSet<u16> = stamps.map(day_of).collect();
        self.index(place, series.labels, days, known)?;
        // A histogram replaces a float of the same series and time in one write, as the embedded
        // store's head and log replay do; the rows then never disagree within one insert.
        let shadowed: HashSet<i64> = series.histograms.iter().map(|h| h.timestamp_ms).collect();
        for p in series.samples.iter().filter(|p| shadowed.is_empty() || !shadowed.contains(&p.timestamp_ms)) {
            self.sample_row(place, p.timestamp_ms, p.value.to_bits(), &[]);
        }
        let mut encoded = Vec::new();
        for h in series.histograms {
            encoded.clear();
            histogram_chunk::encode(&[(h.timestamp_ms, (*h.histogram).clone())], &mut encoded)
                .map_err(|_| StorageError::Corrupt { what: "histogram to write" })?;
            self.sample_row(place, h.timestamp_ms, 0, &encoded);
        }
        for st in series.starts {
            self.starts.extend_from_slice(&place.bucket.to_le_bytes());
            self.starts.extend_from_slice(&place.id.to_le_bytes());
            self.starts.extend_from_slice(&st.timestamp_ms.to_le_bytes());
            self.starts.extend_from_slice(&st.start_ms.to_le_bytes());
        }
        Ok(())
    }

    /// Adds one `samples` row: a float's bits, or (`histogram` not empty) one histogram sample
    /// as a histogram chunk.
    fn sample_row(&mut self, place: Placement, ts: i64, bits: u64, histogram: &[u8]) {
        self.counts[2] += 1;
        self.samples.extend_from_slice(&place.bucket.to_le_bytes());
        self.samples.extend_from_slice(&place.id.to_le_bytes());
        self.samples.extend_from_slice(&ts.to_le_bytes());
        self.samples.extend_from_slice(&bits.to_le_bytes());
        self.samples.extend_from_slice(&self.stamp.to_le_bytes());
        put_str(&mut self.samples, histogram);
    }

    /// Adds the `series` and `postings` rows of a series for `days` not known yet.
    fn index(
        &mut self,
        place: Placement,
        canonical: &[u8],
        days: BTreeSet<u16>,
        known: &HashSet<(u64, u16)>,
    ) -> Result<(), StorageError> {
        let mut labels = None;
        for day in days {
            if known.contains(&(place.id, day)) || !self.indexed.insert((place.id, day)) {
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
            }
        }
        Ok(())
    }
}

impl ClickHouse {
    /// Stores `batch` (validated: labels canonical and carrying a name); returns the samples
    /// written (floats and histograms; exemplars are not stored on ClickHouse). Blocks until the group holding it is stored.
    ///
    /// # Errors
    /// [`StorageError::TooOld`] / [`StorageError::TooNew`] for a sample outside the accepted
    /// range (nothing is written); [`StorageError::Unavailable`] when a shard the batch needs
    /// fails (parts of the batch may have been stored: retrying the batch is safe);
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

/// Stores one group and answers each of its jobs.
fn store_group(store: &ClickHouse, group: Vec<Job>) {
    let shards = store.inner.shards.len();
    let stamp = crate::storage::now_ms();
    let mut per_shard: Vec<ShardRows> = (0..shards).map(|_| ShardRows { stamp, ..ShardRows::default() }).collect();
    // Per job: the shards it touched, or why it cannot be stored.
    let mut touched: Vec<Result<Vec<bool>, StorageError>> = Vec::with_capacity(group.len());
    {
        let known = store.inner.known.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        for job in &group {
            let mut mine = vec![false; shards];
            let mut failed = None;
            for s in job.batch.series() {
                let place = store.place(s.labels);
                let Some(rows) = per_shard.get_mut(place.shard) else { continue };
                if let Err(e) = rows.add(place, &s, &known) {
                    failed = Some(e);
                    break;
                }
                mine[place.shard] = true;
            }
            touched.push(failed.map_or(Ok(mine), Err));
        }
    }
    let results = insert_all(store, &per_shard);
    {
        let mut known = store.inner.known.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if known.len() > store.inner.config.known_series {
            known.clear();
        }
        for (rows, result) in per_shard.iter().zip(&results) {
            if result.is_ok() {
                known.extend(rows.indexed.iter().copied());
            }
        }
    }
    for (job, touched) in group.into_iter().zip(touched) {
        let outcome = touched.and_then(|mine| {
            match mine.iter().zip(&results).find_map(|(&used, r)| used.then_some(r.as_ref().err()).flatten()) {
                Some(e) => Err(e.clone()),
                None => Ok(job.batch.sample_count() + job.batch.histogram_count()),
            }
        });
        let _ = job.reply.send(outcome);
    }
}

/// Inserts every shard's rows in parallel, the index first (a sample visible to a read always
/// has its series); the outcome per shard.
fn insert_all(store: &ClickHouse, per_shard: &[ShardRows]) -> Vec<Result<(), StorageError>> {
    let (series, postings, samples) = (store.table("series"), store.table("postings"), store.table("samples"));
    let starts = store.table("starts");
    std::thread::scope(|scope| {
        let handles: Vec<_> = per_shard
            .iter()
            .zip(&store.inner.shards)
            .map(|(rows, shard)| {
                let (series, postings, samples, starts) = (&series, &postings, &samples, &starts);
                scope.spawn(move || -> Result<(), StorageError> {
                    if rows.samples.is_empty() {
                        return Ok(());
                    }
                    if !rows.series.is_empty() {
                        let insert = format!("INSERT INTO {series} (series_id, bucket, names, values)");
                        shard.insert(&insert, &rows.series, 0, rows.counts[0])?;
                    }
                    if !rows.postings.is_empty() {
                        let insert = format!("INSERT INTO {postings} (day, name, value, series_id)");
                        shard.insert(&insert, &rows.postings, 1, rows.counts[1])?;
                    }
                    if !rows.starts.is_empty() {
                        // Before the samples, as the index: a sample read has its start timestamp.
                        let insert = format!("INSERT INTO {starts} (bucket, series_id, ts, start)");
                        shard.insert(&insert, &rows.starts, usize::MAX, (rows.starts.len() / 26) as u64)?;
                    }
                    let insert =
                        format!("INSERT INTO {samples} (bucket, series_id, ts, value, inserted_at, histogram)");
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
