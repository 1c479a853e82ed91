//! State shared by the writer thread and readers: the open database, its keyspaces, the window
//! registry, the poison flag and write counters.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use crate::storage::format::keys::Bucketing;
use crate::storage::lifecycle::class::{ClassId, SeriesClasses};
use crate::storage::lifecycle::window::{WindowKey, Windows};
use crate::storage::read::querier::ReadStrategy;
use crate::storage::series_id::SeriesId;
use crate::storage::write::head::Head;

/// Open keyspaces and shared counters. Read-only for readers except the counters.
pub struct Shared {
    /// The fjall database.
    pub db: fjall::Database,
    /// Manifest settings and the series-id counter.
    pub meta: fjall::Keyspace,
    /// `series_id -> canonical labels`.
    pub series: fjall::Keyspace,
    /// `md5(labels) series_id -> canonical labels`.
    pub series_by_labels: fjall::Keyspace,
    /// Decoded label sets of `series` rows, for reads.
    pub labels: crate::storage::index::series::LabelsCache,
    /// Answers of the window index between requests; every commit that adds or removes index
    /// rows must call `index.changed()` after it (see [`crate::storage::index::index_cache`]).
    pub index: crate::storage::index::index_cache::IndexCache,
    /// The sealed past and its generation; every change to samples below its boundary must
    /// call `immutable.changed()` (or `written_below`) after it (see
    /// [`crate::storage::immutable`]).
    pub immutable: crate::storage::immutable::Immutable,
    /// Memory of the writer's label-set filter (see [`crate::storage::index::known_label_sets`]), for
    /// `/metrics`.
    pub label_set_filter_bytes: AtomicU64,
    /// The newest exemplars (see [`crate::storage::format::exemplars`]).
    pub exemplars: crate::storage::format::exemplars::ExemplarStore,
    /// Their rows.
    pub exemplar_rows: fjall::Keyspace,
    /// Set once any window keyspace may hold histogram runs (at open when one does; by a flush
    /// before it commits its first). Reads skip the histogram family while it is false. A read
    /// takes a series' head histograms *before* looking at it, and a flush sets it before its
    /// commit, which comes before it clears the head: a read that found the head cleared also
    /// finds the flag set, and the runs.
    histograms_stored: std::sync::atomic::AtomicBool,
    /// Set once any window keyspace may hold start-timestamp rows (at open when one does, by
    /// the writer before it commits the first): until then reads of start timestamps cost
    /// nothing.
    starts_stored: std::sync::atomic::AtomicBool,
    /// The head's write-ahead log (see [`crate::storage::write::wal`]).
    pub wal: fjall::Keyspace,
    /// Acknowledged samples not yet flushed into window keyspaces.
    pub head: Head,
    /// The process-wide pool that reads buckets in parallel (one thread per core): every
    /// request's fan-out shares it, so concurrent queries cannot multiply threads.
    pub pool: Arc<rayon::ThreadPool>,
    /// How reads take the samples of many series (see [`ReadStrategy`]).
    pub read_strategy: ReadStrategy,
    /// Time windows, of every retention class.
    pub windows: Windows,
    /// Which retention class each series is in (see `lifecycle/class.rs`).
    /// Replaced whole when the retention rules change (by the writer, head flushed).
    classes: RwLock<Arc<SeriesClasses>>,
    /// Bucket scheme and count.
    pub bucketing: Bucketing,
    /// Intervals (ms, ascending, each dividing the window length) of the downsampled tiers a
    /// seal builds (see `format/tier_rows.rs`); empty builds none.
    pub tier_intervals_ms: Vec<i64>,
    /// Below this density a seal writes no tier row ([`crate::tier::MIN_DENSITY`] by default).
    pub tier_min_density: u64,
    poison: Mutex<Option<String>>,
    next_id_committed: AtomicU64,
    samples_per_bucket: Vec<AtomicU64>,
    series_created: AtomicU64,
    /// Next keyspace generation; see [`Shared::allocate_generation`].
    next_generation: Mutex<Option<u32>>,
    /// The newest window the writer wrote to and its series count (from the writer's presence
    /// set), so `/metrics` need not scan that window's index at every scrape.
    newest_window_series: Mutex<Option<(i64, u64)>>,
    /// The newest window's series count as last measured by a scan (for a sealed window, or
    /// before the writer wrote to it), with the state of the window it was measured in.
    measured_series: Mutex<Option<MeasuredSeries>>,
    /// Held for the whole of a seal: one seal at a time.
    pub seal_lock: Mutex<()>,
    /// The window being sealed right now, if any (for status pages).
    pub sealing: Mutex<Option<WindowKey>>,
}

/// Manifest key of the keyspace-generation counter.
const NEXT_GENERATION: &str = "next_keyspace_generation";

impl Shared {
    /// Whether any window keyspace may hold histogram runs (see the field).
    pub fn histograms_stored(&self) -> bool {
        self.histograms_stored.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Records that window keyspaces may hold histogram runs, before they are committed.
    pub fn mark_histograms_stored(&self) {
        self.histograms_stored.store(true, std::sync::atomic::Ordering::Release);
    }

    /// Whether any window keyspace may hold start-timestamp rows (see the field).
    pub fn starts_stored(&self) -> bool {
        self.starts_stored.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Records that window keyspaces may hold start-timestamp rows, before they are committed.
    pub fn mark_starts_stored(&self) {
        self.starts_stored.store(true, std::sync::atomic::Ordering::Release);
    }

    /// Which retention class each series is in now.
    pub fn classes(&self) -> Arc<SeriesClasses> {
        Arc::clone(&self.classes.read().unwrap_or_else(std::sync::PoisonError::into_inner))
    }

    /// Replaces the series' classes (the writer, with the head flushed: no sample waits for
    /// the class of its series to be decided by the rules it was written under).
    pub fn set_classes(&self, classes: SeriesClasses) {
        *self.classes.write().unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(classes);
    }

    /// The retention class of series `id` (see `lifecycle/class.rs`): remembered, or decided
    /// from its labels.
    ///
    /// # Errors
    /// Engine errors and a corrupt or missing label set.
    pub fn class_of(&self, id: SeriesId) -> crate::storage::error::Result<ClassId> {
        self.classes().of(id, || {
            crate::storage::index::series::labels_if_present(&self.series, id)?
                .ok_or(crate::storage::error::StorageError::Corrupt { what: "series without a label set" })
        })
    }

    /// Bundles the opened parts.
    pub fn new(
        db: fjall::Database,
        [meta, series, series_by_labels, wal]: [fjall::Keyspace; 4],
        (pool, read_strategy): (Arc<rayon::ThreadPool>, ReadStrategy),
        (windows, classes): (Windows, SeriesClasses),
        (bucketing, tier_intervals_ms, tier_min_density): (Bucketing, Vec<i64>, u64),
        (next_id, labels_cache_bytes, index_cache_bytes): (u64, u64, u64),
        (exemplars, exemplar_rows): (crate::storage::format::exemplars::ExemplarStore, fjall::Keyspace),
    ) -> Self {
        Self {
            db,
            meta,
            series,
            series_by_labels,
            labels: crate::storage::index::series::LabelsCache::new(labels_cache_bytes),
            index: crate::storage::index::index_cache::IndexCache::new(index_cache_bytes),
            immutable: crate::storage::immutable::Immutable::default(),
            label_set_filter_bytes: AtomicU64::new(0),
            exemplars,
            exemplar_rows,
            histograms_stored: std::sync::atomic::AtomicBool::new(false),
            starts_stored: std::sync::atomic::AtomicBool::new(false),
            wal,
            pool,
            read_strategy,
            head: Head::new(bucketing.count()),
            windows,
            classes: RwLock::new(Arc::new(classes)),
            bucketing,
            tier_intervals_ms,
            tier_min_density,
            poison: Mutex::new(None),
            next_id_committed: AtomicU64::new(next_id),
            samples_per_bucket: (0..bucketing.count()).map(|_| AtomicU64::new(0)).collect(),
            series_created: AtomicU64::new(0),
            next_generation: Mutex::new(None),
            newest_window_series: Mutex::new(None),
            measured_series: Mutex::new(None),
            seal_lock: Mutex::new(()),
            sealing: Mutex::new(None),
        }
    }

    /// A generation number never handed out before in this database (persisted, fsynced, before
    /// it is returned), so that no keyspace name is ever reused.
    ///
    /// # Errors
    /// Engine errors.
    pub fn allocate_generation(&self) -> crate::storage::error::Result<u32> {
        let mut next = self.next_generation.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let current = match *next {
            Some(n) => n,
            None => self
                .meta
                .get(NEXT_GENERATION)?
                .and_then(|v| <[u8; 4]>::try_from(v.as_ref()).ok())
                .map_or(1, u32::from_be_bytes),
        };
        let mut bump = self.db.batch().durability(Some(fjall::PersistMode::SyncAll));
        bump.insert(&self.meta, NEXT_GENERATION, current.saturating_add(1).to_be_bytes());
        bump.commit()?;
        *next = Some(current.saturating_add(1));
        Ok(current)
    }

    /// The reason writes are refused, once a commit has failed.
    pub fn poisoned(&self) -> Option<String> {
        self.poison.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// Refuses all further writes.
    pub fn poison(&self, reason: &str) {
        let mut p = self.poison.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        p.get_or_insert_with(|| reason.to_owned());
    }

    /// The id counter as last committed.
    pub fn next_id_committed(&self) -> u64 {
        self.next_id_committed.load(Ordering::Acquire)
    }

    /// Records a committed counter value.
    pub fn set_next_id_committed(&self, next: u64) {
        self.next_id_committed.store(next, Ordering::Release);
    }

    /// Counts a committed group: `per_bucket` holds samples per bucket, indexed by bucket.
    pub fn record_written(&self, per_bucket: &[u64], created: usize) {
        for (c, &n) in self.samples_per_bucket.iter().zip(per_bucket) {
            if n > 0 {
                c.fetch_add(n, Ordering::Relaxed);
            }
        }
        self.series_created.fetch_add(created as u64, Ordering::Relaxed);
    }

    /// Samples written per bucket since start.
    pub fn samples_per_bucket(&self) -> Vec<u64> {
        self.samples_per_bucket.iter().map(|c| c.load(Ordering::Relaxed)).collect()
    }

    /// Records the series count of the newest window written to (writer thread).
    pub fn set_newest_window_series(&self, start_ms: i64, series: u64) {
        *self.newest_window_series.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some((start_ms, series));
    }

    /// The series count of window `start_ms` if it is the newest window written to.
    pub fn newest_window_series(&self, start_ms: i64) -> Option<u64> {
        let newest = *self.newest_window_series.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        newest.filter(|(s, _)| *s == start_ms).map(|(_, n)| n)
    }

    /// The last measured series count of a window (see [`MeasuredSeries`]).
    pub fn measured_series(&self) -> Option<MeasuredSeries> {
        *self.measured_series.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Records a measured series count.
    pub fn set_measured_series(&self, m: MeasuredSeries) {
        *self.measured_series.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(m);
    }

    /// Marks the measurement of window `start_ms` out of date (its series changed in a way the
    /// window's state does not show, e.g. a deletion); its count stays reported until remeasured.
    pub fn outdate_measured_series(&self, start_ms: i64) {
        if let Some(m) = self.measured_series.lock().unwrap_or_else(std::sync::PoisonError::into_inner).as_mut() {
            if m.start_ms == start_ms {
                m.state = None;
            }
        }
    }

    /// Series created since start.
    pub fn series_created(&self) -> u64 {
        self.series_created.load(Ordering::Relaxed)
    }
}

/// A window's series count measured by a scan of its index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MeasuredSeries {
    /// The window.
    pub start_ms: i64,
    /// Its last commit sequence and visible chunks generation when measured; `None` once
    /// outdated. The count is current while these are.
    pub state: Option<(u64, Option<u32>)>,
    /// Series with a row in the window's index.
    pub count: u64,
}
