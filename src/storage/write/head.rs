//! The head: samples acknowledged but not yet flushed into window keyspaces, in memory, one
//! sorted vector per series, sharded by bucket.
//!
//! The writer thread appends after each group commit (the samples are durable by then, in the
//! write-ahead log, see [`super::wal`]) and periodically flushes the head into runs (see
//! `write/mod.rs`), which is what turns many small writes into few large rows.
//!
//! Invariants:
//! - every series' vector is sorted by strictly ascending timestamp; a second write of a
//!   timestamp replaces the value (last write wins);
//! - a flush commits its rows to fjall *before* clearing the head, and readers read the head
//!   *before* the keyspaces, so a sample is never missed by a read racing a flush (at worst it
//!   is seen twice, with equal values, and merged);
//! - a shard being flushed in the background is *frozen*: its float series move, whole and under
//!   its lock, to the shard's frozen slot, which appends never touch and the flush reads without
//!   a lock, while new samples go to the emptied live shard. Readers take the live shard's lock,
//!   then the frozen slot's, and merge the two (the live sample wins on an equal timestamp: it
//!   was written later). The frozen slot is emptied only after the flush committed its rows.

use std::ops::Deref;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use smallvec::SmallVec;

use crate::sample::{HistogramSample, Sample};
use crate::storage::series_id::{IdMap, SeriesId};

/// Samples of a series the head keeps in its map entry, without an allocation of their own: at
/// millions of active series a flush period holds a few samples per series, and an append then
/// touches the entry only (no second cache miss on a heap buffer, no allocation to free at the
/// flush). Longer series spill to the heap.
pub const INLINE_SAMPLES: usize = 4;

/// One series' float samples in the head: 72 bytes (with smallvec's `union` layout), 80 with the
/// map entry's id; a unit test checks both.
pub type FloatSeries = SmallVec<[Sample; INLINE_SAMPLES]>;

/// One bucket's series in the head.
pub type Shard = IdMap<FloatSeries>;

/// One bucket's native histogram series in the head (same invariants as [`Shard`]).
pub type HistogramShard = IdMap<Vec<HistogramSample>>;

/// Bytes the head counts for each float series it holds besides its samples' heap slots: the
/// map entry (id, and the vector with its [`INLINE_SAMPLES`] inline slots) with the hash
/// table's slack.
pub const SERIES_BYTES: usize = 96;
/// Bytes the head counts for each histogram series it holds besides its samples: the map entry
/// (id and vector header) with the hash table's slack, and the allocation's own overhead.
const HISTOGRAM_SERIES_BYTES: usize = 64;
/// Bytes of one sample slot in a series' vector.
const SLOT_BYTES: usize = std::mem::size_of::<Sample>();

/// Bytes of one histogram slot besides its buckets.
const HISTOGRAM_SLOT_BYTES: usize =
    std::mem::size_of::<HistogramSample>() + std::mem::size_of::<crate::histogram::Histogram>() + 16;

/// The in-memory head.
///
/// Invariants (writer thread updates, anyone reads): `samples` is the number of float and
/// histogram samples held, `series` the number of entries of the float and histogram maps (a
/// series holding both counts twice), and `bytes` is [`SERIES_BYTES`] per float series plus
/// `SLOT_BYTES` per heap slot of the float vectors, plus [`HISTOGRAM_SERIES_BYTES`] per histogram
/// series and, per histogram held, [`HISTOGRAM_SLOT_BYTES`] and its
/// buckets. No timestamp of a series is in both its float and its histogram vector: a write of
/// one kind removes the other kind's sample at that timestamp (last write wins).
pub struct Head {
    shards: Vec<RwLock<Shard>>,
    /// Per shard, the float series a background flush is writing (see the module docs);
    /// counted in `samples`, `series` and `bytes` until [`Head::clear_frozen`].
    frozen: Vec<RwLock<Option<Arc<Shard>>>>,
    histograms: Vec<RwLock<HistogramShard>>,
    /// Series held in the histogram maps: while 0, float appends skip them.
    histogram_series: AtomicUsize,
    samples: AtomicUsize,
    series: AtomicUsize,
    bytes: AtomicUsize,
}

impl Head {
    /// An empty head with one shard per bucket.
    pub fn new(buckets: u16) -> Self {
        Self {
            shards: (0..buckets.max(1)).map(|_| RwLock::new(Shard::default())).collect(),
            frozen: (0..buckets.max(1)).map(|_| RwLock::new(None)).collect(),
            histograms: (0..buckets.max(1)).map(|_| RwLock::new(HistogramShard::default())).collect(),
            histogram_series: AtomicUsize::new(0),
            samples: AtomicUsize::new(0),
            series: AtomicUsize::new(0),
            bytes: AtomicUsize::new(0),
        }
    }

    /// Number of shards (the bucket count).
    pub fn shard_count(&self) -> usize {
        self.shards.len()
    }

    fn shard(&self, bucket: u16) -> Option<&RwLock<Shard>> {
        self.shards.get(usize::from(bucket))
    }

    /// Read access to one shard (for flushing).
    pub fn read_shard(&self, index: usize) -> Option<RwLockReadGuard<'_, Shard>> {
        self.shards.get(index).map(|s| s.read().unwrap_or_else(std::sync::PoisonError::into_inner))
    }

    fn write_shard(&self, bucket: u16) -> Option<RwLockWriteGuard<'_, Shard>> {
        self.shard(bucket).map(|s| s.write().unwrap_or_else(std::sync::PoisonError::into_inner))
    }

    /// Samples held.
    pub fn len(&self) -> usize {
        self.samples.load(Ordering::Relaxed)
    }

    /// True when no sample is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Series holding at least one sample.
    pub fn series(&self) -> usize {
        self.series.load(Ordering::Relaxed)
    }

    /// The memory the head's series and samples take, estimated from their vectors' capacities
    /// (see [`SERIES_BYTES`]).
    pub fn bytes(&self) -> usize {
        self.bytes.load(Ordering::Relaxed)
    }

    /// Adds samples (any order) to series `id`. Writer thread only, or its pool on its behalf
    /// while it waits, with concurrent calls on distinct buckets only (each shard's vectors are
    /// then written by one thread; the counters are atomic). `entries` should be grouped by
    /// bucket for fewer lock acquisitions; any order is correct.
    pub fn append<'a>(&self, entries: impl IntoIterator<Item = (u16, SeriesId, &'a [Sample])>) {
        let mut current: Option<(u16, RwLockWriteGuard<'_, Shard>)> = None;
        let (mut added, mut new_series) = (0usize, 0usize);
        // Slots gained and lost (a bulk merge may reallocate smaller).
        let (mut gained, mut lost) = (0usize, 0usize);
        for (bucket, id, samples) in entries {
            if samples.is_empty() {
                continue;
            }
            if current.as_ref().is_none_or(|(b, _)| *b != bucket) {
                current = self.write_shard(bucket).map(|g| (bucket, g));
            }
            let Some((_, shard)) = current.as_mut() else { continue };
            let series = shard.entry(id).or_default();
            let (before, slots) = (series.len(), series.heap_slots());
            new_series += usize::from(before == 0);
            insert(series, samples);
            added += series.len() - before;
            gained += series.heap_slots().saturating_sub(slots);
            lost += slots.saturating_sub(series.heap_slots());
            if self.histogram_series.load(Ordering::Relaxed) > 0 {
                self.remove_histograms_at(bucket, id, samples.iter().map(|s| s.timestamp_ms));
            }
        }
        self.samples.fetch_add(added, Ordering::Relaxed);
        self.series.fetch_add(new_series, Ordering::Relaxed);
        self.bytes.fetch_add(new_series * SERIES_BYTES + gained * SLOT_BYTES, Ordering::Relaxed);
        self.bytes.fetch_sub(lost * SLOT_BYTES, Ordering::Relaxed);
    }

    /// Adds histogram samples (any order; later entries win on equal timestamps) to series
    /// `id`, removing its float samples at those timestamps. Writer thread only.
    pub fn append_histograms<'a>(&self, entries: impl IntoIterator<Item = (u16, SeriesId, &'a [HistogramSample])>) {
        for (bucket, id, samples) in entries {
            if samples.is_empty() {
                continue;
            }
            self.remove_floats_at(bucket, id, samples.iter().map(|s| s.timestamp_ms));
            let Some(shard) = self.histograms.get(usize::from(bucket)) else { continue };
            let mut shard = shard.write().unwrap_or_else(std::sync::PoisonError::into_inner);
            let series = shard.entry(id).or_default();
            let (before, bytes_before) = (series.len(), histogram_bytes(series));
            if before == 0 {
                self.histogram_series.fetch_add(1, Ordering::Relaxed);
                self.series.fetch_add(1, Ordering::Relaxed);
                self.bytes.fetch_add(HISTOGRAM_SERIES_BYTES, Ordering::Relaxed);
            }
            insert(series, samples);
            self.samples.fetch_add(series.len() - before, Ordering::Relaxed);
            self.bytes.fetch_add(histogram_bytes(series), Ordering::Relaxed);
            self.bytes.fetch_sub(bytes_before, Ordering::Relaxed);
        }
    }

    /// Removes the histogram samples of series `id` at `times` (a float was written there).
    fn remove_histograms_at(&self, bucket: u16, id: SeriesId, times: impl Iterator<Item = i64>) {
        let Some(shard) = self.histograms.get(usize::from(bucket)) else { return };
        let mut shard = shard.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        let Some(series) = shard.get_mut(&id) else { return };
        let (before, bytes_before) = (series.len(), histogram_bytes(series));
        for t in times {
            if let Ok(i) = series.binary_search_by_key(&t, |h| h.timestamp_ms) {
                series.remove(i);
            }
        }
        self.samples.fetch_sub(before - series.len(), Ordering::Relaxed);
        self.bytes.fetch_sub(bytes_before - histogram_bytes(series), Ordering::Relaxed);
    }

    /// Removes the float samples of series `id` at `times` (a histogram was written there).
    fn remove_floats_at(&self, bucket: u16, id: SeriesId, times: impl Iterator<Item = i64>) {
        let Some(mut shard) = self.write_shard(bucket) else { return };
        let Some(series) = shard.get_mut(&id) else { return };
        let before = series.len();
        for t in times {
            if let Ok(i) = series.binary_search_by_key(&t, |s| s.timestamp_ms) {
                series.remove(i);
            }
        }
        self.samples.fetch_sub(before - series.len(), Ordering::Relaxed);
    }

    /// Appends the histogram samples of series `id` in `[start, end]` to `out`, ascending.
    pub fn read_histograms(
        &self,
        bucket: u16,
        id: SeriesId,
        start_ms: i64,
        end_ms: i64,
        out: &mut Vec<HistogramSample>,
    ) {
        if self.histogram_series.load(Ordering::Relaxed) == 0 {
            return;
        }
        let Some(shard) = self.histograms.get(usize::from(bucket)) else { return };
        let shard = shard.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(series) = shard.get(&id) {
            let from = series.partition_point(|s| s.timestamp_ms < start_ms);
            let to = series.partition_point(|s| s.timestamp_ms <= end_ms);
            out.extend_from_slice(series.get(from..to).unwrap_or_default());
        }
    }

    /// Read access to one shard's histograms (for flushing).
    pub fn read_histogram_shard(&self, index: usize) -> Option<RwLockReadGuard<'_, HistogramShard>> {
        self.histograms.get(index).map(|s| s.read().unwrap_or_else(std::sync::PoisonError::into_inner))
    }

    /// The live shard and the frozen slot of `bucket`, read-locked in that order (see the
    /// module docs).
    fn read_both(&self, bucket: u16) -> Option<(RwLockReadGuard<'_, Shard>, Option<Arc<Shard>>)> {
        let live = self.shard(bucket)?.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        let frozen = self
            .frozen
            .get(usize::from(bucket))
            .and_then(|f| f.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone());
        Some((live, frozen))
    }

    /// Appends the samples of series `id` in `[start, end]` to `out`, ascending.
    pub fn read(&self, bucket: u16, id: SeriesId, start_ms: i64, end_ms: i64, out: &mut Vec<Sample>) {
        let Some((live, frozen)) = self.read_both(bucket) else { return };
        read_merged(live.get(&id), frozen.as_deref().and_then(|f| f.get(&id)), start_ms, end_ms, out);
    }

    /// [`Head::read`] for several series of one bucket under one lock: appends the samples of
    /// `ids[i]` to `outs[i]`.
    pub fn read_many(&self, bucket: u16, ids: &[SeriesId], start_ms: i64, end_ms: i64, outs: &mut [Vec<Sample>]) {
        let Some((live, frozen)) = self.read_both(bucket) else { return };
        let frozen = frozen.as_deref();
        for (id, out) in ids.iter().zip(outs.iter_mut()) {
            read_merged(live.get(id), frozen.and_then(|f| f.get(id)), start_ms, end_ms, out);
        }
    }

    /// The newest sample of series `id` at or before `at_ms`.
    pub fn latest(&self, bucket: u16, id: SeriesId, at_ms: i64) -> Option<Sample> {
        let (live, frozen) = self.read_both(bucket)?;
        let newest = |series: Option<&FloatSeries>| {
            let series = series?;
            let to = series.partition_point(|s| s.timestamp_ms <= at_ms);
            to.checked_sub(1).and_then(|i| series.get(i)).copied()
        };
        match (newest(live.get(&id)), newest(frozen.as_deref().and_then(|f| f.get(&id)))) {
            // The live one was written later: it wins an equal timestamp.
            (Some(l), Some(f)) => Some(if f.timestamp_ms > l.timestamp_ms { f } else { l }),
            (l, f) => l.or(f),
        }
    }

    /// Samples held with timestamps in `[start, end)` (scans every series; for status pages). A
    /// timestamp both live and frozen counts twice.
    pub fn count_in(&self, start_ms: i64, end_ms: i64) -> usize {
        let shards = self.shards.iter().map(|s| held_in(s, start_ms, end_ms)).sum::<usize>();
        let frozen = self.frozen_shards().iter().map(|s| held_in_shard(s, start_ms, end_ms)).sum::<usize>();
        shards + frozen + self.histograms.iter().map(|s| held_in(s, start_ms, end_ms)).sum::<usize>()
    }

    /// True when some series holds a sample with a timestamp in `[start, end)`; stops at the
    /// first such series.
    pub fn any_in(&self, start_ms: i64, end_ms: i64) -> bool {
        self.shards.iter().any(|s| holds_in(s, start_ms, end_ms))
            || self.frozen_shards().iter().any(|s| holds_in_shard(s, start_ms, end_ms))
            || self.histograms.iter().any(|s| holds_in(s, start_ms, end_ms))
    }

    /// The frozen shards (see the module docs).
    fn frozen_shards(&self) -> Vec<Arc<Shard>> {
        self.frozen.iter().filter_map(|f| f.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone()).collect()
    }

    /// Moves the float series of shard `index` to its frozen slot, leaving the live shard empty,
    /// and returns them, for a background flush; `None` (nothing moved) when the slot is taken.
    /// Writer thread only. The samples stay counted until [`Head::clear_frozen`].
    pub fn freeze(&self, index: usize) -> Option<Arc<Shard>> {
        let live = self.shards.get(index)?;
        let slot = self.frozen.get(index)?;
        let mut live = live.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut slot = slot.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        if slot.is_some() {
            return None;
        }
        // The live map starts empty and grows with what arrives while the step runs: room for
        // all of the frozen series up front made every frozen shard count twice until its flush
        // was done (at 5 M series, 2 x 45 MiB more at each step, for samples that had mostly
        // not arrived yet).
        let frozen = Arc::new(std::mem::take(&mut *live));
        *slot = Some(Arc::clone(&frozen));
        Some(frozen)
    }

    /// Empties the frozen slot of shard `index` (after the flush committed everything in it).
    /// Writer thread only.
    pub fn clear_frozen(&self, index: usize) {
        let Some(slot) = self.frozen.get(index) else { return };
        let Some(frozen) = slot.write().unwrap_or_else(std::sync::PoisonError::into_inner).take() else { return };
        let held: usize = frozen.values().map(|v| v.len()).sum();
        let slots: usize = frozen.values().map(|v| v.heap_slots()).sum();
        let series = frozen.len();
        self.samples.fetch_sub(held, Ordering::Relaxed);
        self.series.fetch_sub(series, Ordering::Relaxed);
        self.bytes.fetch_sub(series * SERIES_BYTES + slots * SLOT_BYTES, Ordering::Relaxed);
    }

    /// Series held in histogram maps (while any are, a flush runs in the foreground: the frozen
    /// slots hold float series only).
    pub fn histogram_series(&self) -> usize {
        self.histogram_series.load(Ordering::Relaxed)
    }

    /// Empties one shard (after a flush committed everything in it). Writer thread only.
    pub fn clear_shard(&self, index: usize) {
        let Some(shard) = self.shards.get(index) else { return };
        let mut shard = shard.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        let held: usize = shard.values().map(|v| v.len()).sum();
        let slots: usize = shard.values().map(|v| v.heap_slots()).sum();
        let series = shard.len();
        // Keep no capacity: the next flush period may hold other series.
        *shard = Shard::default();
        self.samples.fetch_sub(held, Ordering::Relaxed);
        self.series.fetch_sub(series, Ordering::Relaxed);
        self.bytes.fetch_sub(series * SERIES_BYTES + slots * SLOT_BYTES, Ordering::Relaxed);
        drop(shard);
        let Some(hist) = self.histograms.get(index) else { return };
        let mut hist = hist.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        let held: usize = hist.values().map(|v| v.len()).sum();
        let bytes: usize = hist.values().map(|s| histogram_bytes(s)).sum();
        let series = hist.len();
        *hist = HistogramShard::default();
        self.histogram_series.fetch_sub(series, Ordering::Relaxed);
        self.samples.fetch_sub(held, Ordering::Relaxed);
        self.series.fetch_sub(series, Ordering::Relaxed);
        self.bytes.fetch_sub(series * HISTOGRAM_SERIES_BYTES + bytes, Ordering::Relaxed);
    }

    /// Empties the head (after a flush committed everything in it). Writer thread only.
    pub fn clear(&self) {
        for slot in &self.frozen {
            *slot.write().unwrap_or_else(std::sync::PoisonError::into_inner) = None;
        }
        for shard in &self.shards {
            let mut shard = shard.write().unwrap_or_else(std::sync::PoisonError::into_inner);
            // Keep no capacity: the next flush period may hold other series.
            *shard = Shard::default();
        }
        for shard in &self.histograms {
            *shard.write().unwrap_or_else(std::sync::PoisonError::into_inner) = HistogramShard::default();
        }
        self.histogram_series.store(0, Ordering::Relaxed);
        self.samples.store(0, Ordering::Relaxed);
        self.series.store(0, Ordering::Relaxed);
        self.bytes.store(0, Ordering::Relaxed);
    }
}

/// Bytes the head counts for a series' histogram vector (see [`Head`]).
fn histogram_bytes(series: &[HistogramSample]) -> usize {
    series.iter().map(|h| HISTOGRAM_SLOT_BYTES + h.histogram.heap_bytes()).sum()
}

/// Samples of one shard (float or histogram) with timestamps in `[start, end)`.
fn held_in<T: Timed, V: Deref<Target = [T]>>(shard: &RwLock<IdMap<V>>, start_ms: i64, end_ms: i64) -> usize {
    held_in_shard(&shard.read().unwrap_or_else(std::sync::PoisonError::into_inner), start_ms, end_ms)
}

fn held_in_shard<T: Timed, V: Deref<Target = [T]>>(shard: &IdMap<V>, start_ms: i64, end_ms: i64) -> usize {
    shard.values().map(|s| s.partition_point(|x| x.ts() < end_ms) - s.partition_point(|x| x.ts() < start_ms)).sum()
}

/// True when a series of one shard holds a sample with a timestamp in `[start, end)`.
fn holds_in<T: Timed, V: Deref<Target = [T]>>(shard: &RwLock<IdMap<V>>, start_ms: i64, end_ms: i64) -> bool {
    holds_in_shard(&shard.read().unwrap_or_else(std::sync::PoisonError::into_inner), start_ms, end_ms)
}

fn holds_in_shard<T: Timed, V: Deref<Target = [T]>>(shard: &IdMap<V>, start_ms: i64, end_ms: i64) -> bool {
    shard.values().any(|s| s.get(s.partition_point(|x| x.ts() < start_ms)).is_some_and(|x| x.ts() < end_ms))
}

/// The part in `[start, end]` of an ascending series.
fn in_range(series: &[Sample], start_ms: i64, end_ms: i64) -> &[Sample] {
    let from = series.partition_point(|s| s.timestamp_ms < start_ms);
    let to = series.partition_point(|s| s.timestamp_ms <= end_ms);
    series.get(from..to).unwrap_or_default()
}

/// Appends to `out` the samples in `[start, end]` of a series' live and frozen parts, ascending,
/// the live sample kept of two at one timestamp.
fn read_merged(
    live: Option<&FloatSeries>,
    frozen: Option<&FloatSeries>,
    start_ms: i64,
    end_ms: i64,
    out: &mut Vec<Sample>,
) {
    let live = live.map_or(&[][..], |s| in_range(s, start_ms, end_ms));
    let frozen = frozen.map_or(&[][..], |s| in_range(s, start_ms, end_ms));
    if frozen.is_empty() {
        out.extend_from_slice(live);
        return;
    }
    if live.is_empty() || frozen.last().is_some_and(|f| live.first().is_some_and(|l| f.timestamp_ms < l.timestamp_ms)) {
        out.extend_from_slice(frozen);
        out.extend_from_slice(live);
        return;
    }
    out.reserve(live.len() + frozen.len());
    let (mut l, mut f) = (live.iter().peekable(), frozen.iter().peekable());
    loop {
        match (l.peek(), f.peek()) {
            (Some(a), Some(b)) if a.timestamp_ms < b.timestamp_ms => out.extend(l.next()),
            (Some(a), Some(b)) if a.timestamp_ms > b.timestamp_ms => out.extend(f.next()),
            (Some(_), Some(_)) => {
                out.extend(l.next());
                f.next();
            }
            (Some(_), None) => out.extend(l.next()),
            (None, Some(_)) => out.extend(f.next()),
            (None, None) => break,
        }
    }
}

/// `samples` (any order) ascending, the last of equal timestamps kept: what the head holds
/// after appending them to an empty series.
pub fn ascending_last_wins(samples: &[HistogramSample]) -> Vec<HistogramSample> {
    let mut out = Vec::new();
    insert(&mut out, samples);
    out
}

/// A sample kind the head holds: it has a timestamp.
trait Timed: Clone {
    fn ts(&self) -> i64;
}

impl Timed for Sample {
    fn ts(&self) -> i64 {
        self.timestamp_ms
    }
}

impl Timed for HistogramSample {
    fn ts(&self) -> i64 {
        self.timestamp_ms
    }
}

/// Merges `new` (any order; later entries win on equal timestamps) into the sorted `series`.
fn insert<T: Timed, V: SeriesVec<T>>(series: &mut V, new: &[T]) {
    let ascending = new.windows(2).all(|w| matches!(w, [a, b] if a.ts() < b.ts()));
    let after_last = match (series.last(), new.first()) {
        (Some(last), Some(first)) => last.ts() < first.ts(),
        _ => true,
    };
    if ascending && after_last {
        if series.heap_slots() == 0 {
            // A new series takes room for what it holds, not the 4 slots a first push reserves:
            // at millions of series with one sample each (new fleets, churn), that is 80 bytes a
            // series instead of 128. A second sample grows it as usual.
            series.reserve_exact(new.len());
        }
        series.extend_from_slice(new);
        return;
    }
    if new.len() <= 4 {
        for s in new {
            match series.binary_search_by_key(&s.ts(), T::ts) {
                Ok(i) => {
                    if let Some(slot) = series.get_mut(i) {
                        *slot = s.clone();
                    }
                }
                Err(i) => series.insert(i, s.clone()),
            }
        }
        return;
    }
    // Bulk: stable sort keeps arrival order among equal timestamps; keep the last of each.
    series.extend_from_slice(new);
    series.sort_by_key(T::ts);
    let mut kept: Vec<T> = Vec::with_capacity(series.len());
    for s in series.take_all() {
        match kept.last_mut() {
            Some(last) if last.ts() == s.ts() => *last = s,
            _ => kept.push(s),
        }
    }
    series.replace_with(kept);
}

/// What [`insert`] needs of a series' vector: a `Vec` (histograms) or a [`FloatSeries`].
trait SeriesVec<T>: std::ops::DerefMut<Target = [T]> {
    /// Slots allocated on the heap (none while a [`FloatSeries`] holds its samples inline).
    fn heap_slots(&self) -> usize;
    fn reserve_exact(&mut self, additional: usize);
    fn extend_from_slice(&mut self, new: &[T]);
    fn insert(&mut self, index: usize, value: T);
    /// Moves the contents out, leaving the vector empty.
    fn take_all(&mut self) -> Vec<T>;
    /// Replaces the contents with `kept`, sized to it.
    fn replace_with(&mut self, kept: Vec<T>);
}

impl<T: Clone> SeriesVec<T> for Vec<T> {
    fn heap_slots(&self) -> usize {
        Vec::capacity(self)
    }
    fn reserve_exact(&mut self, additional: usize) {
        Vec::reserve_exact(self, additional);
    }
    fn extend_from_slice(&mut self, new: &[T]) {
        Vec::extend_from_slice(self, new);
    }
    fn insert(&mut self, index: usize, value: T) {
        Vec::insert(self, index, value);
    }
    fn take_all(&mut self) -> Vec<T> {
        std::mem::take(self)
    }
    fn replace_with(&mut self, kept: Vec<T>) {
        *self = kept;
    }
}

impl<T: Copy, const N: usize> SeriesVec<T> for SmallVec<[T; N]>
where
    [T; N]: smallvec::Array<Item = T>,
{
    fn heap_slots(&self) -> usize {
        if self.spilled() {
            SmallVec::capacity(self)
        } else {
            0
        }
    }
    fn reserve_exact(&mut self, additional: usize) {
        SmallVec::reserve_exact(self, additional);
    }
    fn extend_from_slice(&mut self, new: &[T]) {
        SmallVec::extend_from_slice(self, new);
    }
    fn insert(&mut self, index: usize, value: T) {
        SmallVec::insert(self, index, value);
    }
    fn take_all(&mut self) -> Vec<T> {
        std::mem::take(self).into_vec()
    }
    fn replace_with(&mut self, kept: Vec<T>) {
        *self = SmallVec::from_vec(kept);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The sizes [`SERIES_BYTES`] accounts for: a map entry of 80 bytes (the hash table's
    /// slack, between 1/8 and 9/16 of its buckets, is on top).
    #[test]
    fn a_float_series_entry_takes_80_bytes() {
        assert_eq!(std::mem::size_of::<FloatSeries>(), 72);
        assert_eq!(std::mem::size_of::<(SeriesId, FloatSeries)>(), 80);
        assert!(std::mem::size_of::<(SeriesId, FloatSeries)>() < SERIES_BYTES);
    }

    #[test]
    fn reads_ranges_and_latest() {
        let head = Head::new(4);
        let samples: Vec<Sample> = (0..10).map(|i| Sample::new(i * 10, i as f64)).collect();
        head.append([(2, 7, samples.as_slice())]);
        assert_eq!(head.len(), 10);
        let mut out = Vec::new();
        head.read(2, 7, 15, 40, &mut out);
        assert_eq!(out.iter().map(|s| s.timestamp_ms).collect::<Vec<_>>(), vec![20, 30, 40]);
        assert_eq!(head.latest(2, 7, 45), Some(Sample::new(40, 4.0)));
        assert_eq!(head.latest(2, 7, -1), None);
        assert_eq!(head.latest(1, 7, 45), None);
        assert_eq!((head.count_in(20, 50), head.count_in(0, 1000), head.count_in(91, 95)), (3, 10, 0));
        assert_eq!(
            (head.any_in(20, 50), head.any_in(90, 91), head.any_in(91, 95), head.any_in(-5, 0)),
            (true, true, false, false)
        );
        head.clear();
        assert!(head.is_empty());
        assert_eq!(head.latest(2, 7, 45), None);
    }

    /// The counters against a walk of the shards.
    fn assert_counted(head: &Head) {
        let (mut samples, mut series, mut slots) = (0, 0, 0);
        for i in 0..head.shard_count() {
            let shard = head.read_shard(i).unwrap();
            series += shard.len();
            samples += shard.values().map(|v| v.len()).sum::<usize>();
            slots += shard.values().map(|v| v.heap_slots()).sum::<usize>();
        }
        assert_eq!(
            (head.len(), head.series(), head.bytes()),
            (samples, series, series * SERIES_BYTES + slots * SLOT_BYTES)
        );
    }

    proptest! {
        #[test]
        fn counters_follow_appends_and_clears(
            writes in proptest::collection::vec((0u16..3, 0u64..6, proptest::collection::vec(0i64..40, 0..10)), 0..30),
            clear_at in 0usize..30,
        ) {
            let head = Head::new(3);
            for (i, (bucket, id, times)) in writes.iter().enumerate() {
                let batch: Vec<Sample> = times.iter().map(|&t| Sample::new(t, 1.0)).collect();
                head.append([(*bucket, *id, batch.as_slice())]);
                assert_counted(&head);
                if i == clear_at {
                    head.clear_shard(usize::from(*bucket));
                    assert_counted(&head);
                }
            }
            head.clear();
            assert_counted(&head);
            prop_assert_eq!(head.bytes(), 0);
        }

        #[test]
        fn appends_in_any_order_keep_the_last_write(
            writes in proptest::collection::vec(proptest::collection::vec((0i64..60, -5i32..5), 0..12), 0..12)
        ) {
            let head = Head::new(1);
            let mut expect = std::collections::BTreeMap::new();
            for w in &writes {
                let batch: Vec<Sample> = w.iter().map(|&(t, v)| Sample::new(t, f64::from(v))).collect();
                head.append([(0, 1, batch.as_slice())]);
                for &(t, v) in w {
                    expect.insert(t, f64::from(v));
                }
            }
            let mut out = Vec::new();
            head.read(0, 1, i64::MIN, i64::MAX, &mut out);
            let want: Vec<Sample> = expect.iter().map(|(&t, &v)| Sample::new(t, v)).collect();
            prop_assert_eq!(&out, &want);
            prop_assert_eq!(head.len(), want.len());
        }

        /// Writes before a freeze, more (overwrites, earlier and later timestamps) after it:
        /// every read answers what a head without freezing would (the last write wins), before
        /// and after the frozen part is cleared (reads then see only what came after), and the
        /// counters cover both parts until it is cleared.
        #[test]
        fn a_frozen_shard_reads_merged_with_the_live_one(
            before in proptest::collection::vec((0u64..4, proptest::collection::vec((0i64..60, -5i32..5), 0..8)), 0..10),
            after in proptest::collection::vec((0u64..4, proptest::collection::vec((0i64..60, -5i32..5), 0..8)), 0..10),
            range in (0i64..60, 0i64..60),
            at in 0i64..70,
        ) {
            let head = Head::new(2);
            let mut all: std::collections::BTreeMap<(u64, i64), f64> = std::collections::BTreeMap::new();
            let mut later: std::collections::BTreeMap<(u64, i64), f64> = std::collections::BTreeMap::new();
            for (id, w) in &before {
                let batch: Vec<Sample> = w.iter().map(|&(t, v)| Sample::new(t, f64::from(v))).collect();
                head.append([(1, *id, batch.as_slice())]);
                all.extend(w.iter().map(|&(t, v)| ((*id, t), f64::from(v))));
            }
            let held = head.len();
            let frozen = head.freeze(1).expect("the slot is free");
            prop_assert_eq!(frozen.values().map(|v| v.len()).sum::<usize>(), held);
            prop_assert!(head.freeze(1).is_none(), "a second freeze must wait for the clear");
            for (id, w) in &after {
                let batch: Vec<Sample> = w.iter().map(|&(t, v)| Sample::new(t, f64::from(v))).collect();
                head.append([(1, *id, batch.as_slice())]);
                all.extend(w.iter().map(|&(t, v)| ((*id, t), f64::from(v))));
                later.extend(w.iter().map(|&(t, v)| ((*id, t), f64::from(v))));
            }
            let (lo, hi) = (range.0.min(range.1), range.0.max(range.1));
            let live_held: usize = head.read_shard(1).unwrap().values().map(|v| v.len()).sum();
            prop_assert_eq!(head.len(), held + live_held);
            for (expect, stage) in [(&all, "frozen"), (&later, "cleared")] {
                let want = |id: u64| -> Vec<Sample> {
                    expect.range((id, lo)..=(id, hi)).map(|(&(_, t), &v)| Sample::new(t, v)).collect()
                };
                let ids: Vec<u64> = (0..4).collect();
                let mut outs = vec![Vec::new(); ids.len()];
                head.read_many(1, &ids, lo, hi, &mut outs);
                for &id in &ids {
                    let mut one = Vec::new();
                    head.read(1, id, lo, hi, &mut one);
                    prop_assert_eq!(&one, &want(id), "read of {} ({})", id, stage);
                    prop_assert_eq!(&outs[id as usize], &want(id), "read_many of {} ({})", id, stage);
                    let newest = expect.range((id, i64::MIN)..=(id, at)).next_back().map(|(&(_, t), &v)| Sample::new(t, v));
                    prop_assert_eq!(head.latest(1, id, at), newest, "latest of {} ({})", id, stage);
                }
                prop_assert_eq!(head.any_in(lo, hi + 1), expect.keys().any(|&(_, t)| (lo..=hi).contains(&t)));
                head.clear_frozen(1);
            }
            assert_counted(&head);
            prop_assert_eq!(head.len(), later.len());
        }
    }
}
