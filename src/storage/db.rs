//! [`Storage`]: opens fjall, recovers, owns the writer thread and the background fsync.

use std::path::PathBuf;
use std::sync::mpsc::{self, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::labels::Labels;
use crate::matcher::Matcher;
use crate::sample::{PackedBatch, Sample, SeriesSamples, WriteBatch};
use crate::storage::disk::du_bytes;
use crate::storage::error::{Result, StorageError};
use crate::storage::format::exemplars::{self, ExemplarStore, SeriesExemplars};
use crate::storage::format::histogram_run;
use crate::storage::format::keys::{BucketScheme, Bucketing};
use crate::storage::format::manifest::{self, Manifest};
use crate::storage::index::matchers::Selection;
use crate::storage::index::series;
use crate::storage::lifecycle::class::{self, Class, ClassId, ClassTable, RetentionRule, SeriesClasses, DEFAULT_CLASS};
use crate::storage::lifecycle::close::{self, JournalReclaim};
use crate::storage::lifecycle::delete::{DeleteOutcome, DeleteRange};
use crate::storage::lifecycle::downsample::{self, DownsampleAge, DownsampleOutcome};
use crate::storage::lifecycle::migrate;
use crate::storage::lifecycle::seal::{self, SealOutcome};
use crate::storage::lifecycle::snapshot::{self, SnapshotOutcome};
use crate::storage::lifecycle::window::{Window, WindowKey, Windows};
use crate::storage::read::querier::{Querier, ReadLimits, ReadStrategy, SeriesMap, SinkFactory};
use crate::storage::read::select;
use crate::storage::shared::MeasuredSeries;
use crate::storage::shared::Shared;
use crate::storage::write::wal;
use crate::storage::write::{Command, HeadLimits, Prepared, WalPosition, WriteOutcome, Writer};

/// What a successful write promises beyond surviving `kill -9` of the server (every mode hands
/// the journal to the OS before acknowledging).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum FsyncMode {
    /// fsync the journal before acknowledging: acknowledged writes survive power loss.
    Always,
    /// fsync the journal in the background every second: a power loss loses at most ~1 s.
    Batch,
    /// Never fsync explicitly; the OS writes back when it likes.
    Never,
}

/// How to open a database.
#[derive(Clone, Debug)]
pub struct StorageConfig {
    /// Data directory (created if missing).
    pub data_dir: PathBuf,
    /// Bucket scheme for a new database (must match an existing one).
    pub bucket_scheme: BucketScheme,
    /// Bucket count for a new database (must match an existing one).
    pub buckets: u16,
    /// Window length in ms for a new database (must match an existing one).
    pub window_ms: i64,
    /// Samples older than this are rejected and their windows dropped; `None` keeps forever.
    /// The retention of the default class when there are [`retention_rules`](Self::retention_rules).
    pub retention_ms: Option<i64>,
    /// `--retention-rule`: series matching a rule (the first that matches) keep their own
    /// windows, dropped at the rule's retention (see `lifecycle/class.rs`). Empty (the default):
    /// every series has `retention_ms`.
    pub retention_rules: Vec<RetentionRule>,
    /// Samples more than this far ahead of the wall clock are rejected (each far-future day
    /// would create a window that retention never drops); `None` accepts up to year 2262.
    pub max_future_ms: Option<i64>,
    /// Durability of acknowledged writes.
    pub fsync: FsyncMode,
    /// Entries in the label-set -> id cache.
    pub series_cache_size: usize,
    /// fjall block cache in bytes.
    pub block_cache_bytes: u64,
    /// Bytes of decoded label sets the read path keeps (see [`crate::storage::index::series::LabelsCache`]).
    pub labels_cache_bytes: u64,
    /// Bytes of window-index answers the read path keeps (see [`crate::storage::index::index_cache`]).
    pub index_cache_bytes: u64,
    /// Bytes fjall's memtables may hold over all keyspaces before the writer seals the largest
    /// (see `write/memtables.rs`).
    pub write_buffer_bytes: u64,
    /// fjall's flush and compaction threads (`--storage-threads`).
    pub storage_threads: usize,
    /// Exemplars kept, newest first (see [`crate::storage::format::exemplars`]); 0 keeps none.
    pub max_exemplars: usize,
    /// When the in-memory head is flushed into window keyspaces.
    pub head: HeadLimits,
    /// How reads take the samples of many series (for measuring; default `Auto`).
    pub read_strategy: ReadStrategy,
    /// Intervals (ms) of the downsampled tiers each seal builds beside the chunks
    /// (`--downsample`); empty (the default) builds none. Each must divide the window length.
    pub tier_intervals_ms: Vec<i64>,
    /// When old windows drop their raw samples (`--downsample 7d:5m`): each age's interval must
    /// be one of [`tier_intervals_ms`](Self::tier_intervals_ms), and coarser intervals come with
    /// longer ages (see `lifecycle/downsample.rs`). Empty (the default) keeps raw samples for
    /// the whole retention.
    pub downsample_after: Vec<DownsampleAge>,
    /// The density below which a seal writes no tier row (see [`crate::tier::MIN_DENSITY`],
    /// the default); `0` writes every row (for tests and measurements).
    pub tier_min_density: u64,
    /// After this long without a write (or a seal, deletion, ...), flush the head and every
    /// memtable into tables and roll the journal over, so that the journal files, which then only
    /// repeat tables, are deleted (see `write/idle.rs`); `None` never (`--idle-flush`).
    pub idle_flush: Option<Duration>,
}

impl StorageConfig {
    /// Defaults: hash scheme, 16 buckets, 1-day windows, 30-day retention, background fsync.
    pub fn new(data_dir: PathBuf) -> Self {
        Self {
            data_dir,
            bucket_scheme: BucketScheme::Hash,
            buckets: 16,
            window_ms: 86_400_000,
            retention_ms: Some(30 * 86_400_000),
            retention_rules: Vec::new(),
            max_future_ms: Some(DEFAULT_MAX_FUTURE_MS),
            fsync: FsyncMode::Batch,
            series_cache_size: 1_000_000,
            block_cache_bytes: 256 << 20,
            labels_cache_bytes: 64 << 20,
            index_cache_bytes: 16 << 20,
            write_buffer_bytes: DEFAULT_WRITE_BUFFER_BYTES,
            storage_threads: 1,
            max_exemplars: exemplars::DEFAULT_MAX_EXEMPLARS,
            head: HeadLimits { max_samples: 4_000_000, max_bytes: 1 << 30, max_age: Duration::from_secs(300) },
            read_strategy: ReadStrategy::Auto,
            idle_flush: Some(DEFAULT_IDLE_FLUSH),
            tier_intervals_ms: Vec::new(),
            downsample_after: Vec::new(),
            tier_min_density: crate::tier::MIN_DENSITY,
        }
    }
}

/// The tier intervals of `wanted`, ascending without repeats, once each is checked: positive
/// and dividing the window length (a tier point then never straddles a window boundary but at
/// its end, see `format/tier_rows.rs`).
///
/// # Errors
/// [`StorageError::Manifest`] naming the first interval that is not.
fn tier_intervals(wanted: &[i64], window_ms: i64) -> Result<Vec<i64>> {
    let mut out = wanted.to_vec();
    out.sort_unstable();
    out.dedup();
    if let Some(bad) = out.iter().find(|&&i| i <= 0 || window_ms % i != 0) {
        return Err(StorageError::Manifest(format!(
            "downsampling interval {bad} ms must be positive and divide the window length of {window_ms} ms"
        )));
    }
    Ok(out)
}

/// Checks the ages of `--downsample` against the tiers built and the retention: each age is
/// positive, below the retention, and names a tier built; a coarser interval comes with a
/// longer age (a window drops its finer tiers as it grows older, never the other way).
///
/// # Errors
/// [`StorageError::Manifest`] naming the first age that is not.
fn downsample_ages(ages: &[DownsampleAge], tiers_ms: &[i64], retention_ms: Option<i64>) -> Result<()> {
    let fmt = crate::duration::format_ms;
    let mut sorted = ages.to_vec();
    sorted.sort_by_key(|a| a.interval_ms);
    for a in &sorted {
        let name = format!("{}:{}", fmt(a.after_ms), fmt(a.interval_ms));
        if a.after_ms <= 0 {
            return Err(StorageError::Manifest(format!("downsampling age {name}: the age must be longer than 0")));
        }
        if !tiers_ms.contains(&a.interval_ms) {
            return Err(StorageError::Manifest(format!("downsampling age {name}: no tier of that interval is built")));
        }
        if let Some(r) = retention_ms.filter(|&r| r > 0 && a.after_ms >= r) {
            return Err(StorageError::Manifest(format!(
                "downsampling age {name}: the age must be shorter than the retention ({}), which drops the window first",
                fmt(r)
            )));
        }
    }
    for pair in sorted.windows(2) {
        if let [finer, coarser] = pair {
            if finer.interval_ms == coarser.interval_ms || finer.after_ms >= coarser.after_ms {
                return Err(StorageError::Manifest(format!(
                    "downsampling ages {}:{} and {}:{}: each interval appears once, and a coarser interval needs a \
                     longer age",
                    fmt(finer.after_ms),
                    fmt(finer.interval_ms),
                    fmt(coarser.after_ms),
                    fmt(coarser.interval_ms)
                )));
            }
        }
    }
    Ok(())
}

/// Bytes of sealed journal files past which fjall flushes the memtables holding the oldest back.
pub const MAX_JOURNAL_BYTES: u64 = 128 << 20;

/// How long the writer waits without a write before flushing everything (`--idle-flush`).
pub const DEFAULT_IDLE_FLUSH: Duration = Duration::from_secs(20);

/// What fjall's memtables may hold by default over all keyspaces (`--write-buffer`).
pub const DEFAULT_WRITE_BUFFER_BYTES: u64 = 64 << 20;

/// How far ahead of the wall clock a sample may lie by default: two days, VictoriaMetrics'
/// bound (Prometheus 2.42 has none), room for clock skew and time zones mistaken for UTC.
pub const DEFAULT_MAX_FUTURE_MS: i64 = 2 * 86_400_000;

/// Size of the write-ahead log's tables above which maintenance compacts them away.
pub const WAL_COMPACT_BYTES: u64 = 16 << 20;

/// Per-window figures for status pages and benchmarks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WindowStats {
    /// First millisecond of the window.
    pub start_ms: i64,
    /// Its retention class (see [`Storage::retention_classes`]).
    pub class: ClassId,
    /// One past the last millisecond.
    pub end_ms: i64,
    /// Bytes on disk of the hot rows (flushed tables only).
    pub hot_bytes: u64,
    /// Bytes on disk of the sealed chunks (flushed tables only).
    pub chunk_bytes: u64,
    /// True once the window has a visible chunks generation.
    pub sealed: bool,
    /// Once downsampled, the finest tier interval it keeps (ms).
    pub downsampled_ms: Option<i64>,
}

/// Where a window is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WindowState {
    /// Samples are rows in the hot keyspace.
    Hot,
    /// Being rewritten into chunks right now.
    Sealing,
    /// Chunks are visible (a hot overlay of late samples may exist too).
    Sealed,
}

impl WindowState {
    /// The API spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Hot => "hot",
            Self::Sealing => "sealing",
            Self::Sealed => "sealed",
        }
    }
}

/// One window as `/api/v1/status/windows` reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WindowStatus {
    /// First millisecond of the window.
    pub start_ms: i64,
    /// Its retention class (see [`Storage::retention_classes`]).
    pub class: ClassId,
    /// One past the last millisecond.
    pub end_ms: i64,
    /// Hot, sealing or sealed.
    pub state: WindowState,
    /// Series with samples in the window.
    pub series: u64,
    /// Samples in the window: exact for sealed chunks and the in-memory head; flushed hot runs
    /// count one each (a lower bound until the window is sealed).
    pub samples: u64,
    /// Bytes on disk (flushed tables).
    pub bytes: u64,
    /// Once downsampled, the finest tier interval it keeps (ms): its float series have no raw
    /// samples left.
    pub downsampled_ms: Option<i64>,
}

/// Whole-database figures.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StorageStats {
    /// Bytes allocated on disk under the data directory, as `du` counts them (journal and
    /// snapshots included).
    pub disk_bytes: u64,
    /// Bytes per table (`meta`, `series`, `series_by_labels`, `wal`, `points`, `chunks`; the
    /// window postings are in `points` and `chunks`).
    pub table_bytes: Vec<(&'static str, u64)>,
    /// Windows on disk.
    pub windows: Vec<WindowStats>,
    /// Samples written per bucket since start.
    pub samples_per_bucket: Vec<u64>,
    /// Series created since start.
    pub series_created: u64,
    /// Highest series id allocated (total series ever created).
    pub series_total: u64,
}

impl StorageStats {
    /// The windows of retention class `class` and their bytes on disk (flushed tables).
    pub fn class_windows(&self, class: ClassId) -> (u64, u64) {
        let of = self.windows.iter().filter(|w| w.class == class);
        (of.clone().count() as u64, of.map(|w| w.hot_bytes + w.chunk_bytes).sum())
    }
}

struct Inner {
    shared: Arc<Shared>,
    config: StorageConfig,
    tx: Mutex<Option<SyncSender<Command>>>,
    writer: Mutex<Option<JoinHandle<()>>>,
    syncer: Mutex<Option<(SyncSender<()>, JoinHandle<()>)>>,
    /// Must stay the last field: fields drop in order, and the journal is emptied only after
    /// `shared` (the fjall database) has closed.
    reclaim: JournalReclaim,
}

/// The database. Cheap to clone; the last clone dropped stops the writer and persists.
#[derive(Clone)]
pub struct Storage {
    inner: Arc<Inner>,
}

impl Storage {
    /// Opens or creates the database in `config.data_dir`, replaying the journal.
    ///
    /// # Errors
    /// [`StorageError::ManifestMismatch`] when the directory was created with other bucket or
    /// window settings; engine errors (I/O, corruption, a directory locked by another process).
    pub fn open(config: StorageConfig) -> Result<Self> {
        let bucketing = Bucketing::new(config.bucket_scheme, config.buckets).ok_or_else(|| {
            StorageError::Manifest(format!(
                "bucket count {} must be between 1 and {}",
                config.buckets,
                crate::storage::format::keys::MAX_BUCKETS
            ))
        })?;
        if config.window_ms <= 0 {
            return Err(StorageError::Manifest("window must be positive".into()));
        }
        std::fs::create_dir_all(&config.data_dir).map_err(|e| StorageError::Engine(Arc::new(e.into())))?;
        let db = fjall::Database::builder(&config.data_dir)
            .cache_size(config.block_cache_bytes)
            .manual_journal_persist(true)
            // The journal's big values are log rows of float bits, which LZ4 barely shrinks:
            // compressing them cost the writer thread ~15% of its time. Recovery reads both.
            .journal_compression(fjall::CompressionType::None)
            // Past this much in sealed journal files, fjall flushes the memtables that hold the
            // oldest back (512 MiB by default: under steady ingest the rarely written series
            // and manifest tables held up to that much, see `write/idle.rs`).
            .max_journaling_size(MAX_JOURNAL_BYTES)
            .worker_threads(config.storage_threads.max(1))
            .open()?;
        let ks = |name: &str| db.keyspace(name, fjall::KeyspaceCreateOptions::default);
        let meta = ks("meta")?;
        let manifest = Manifest::load_or_create(
            &db,
            &meta,
            Manifest { bucketing, window_ms: config.window_ms, upgrade_from: None },
        )?;
        let next_id = manifest::next_series_id(&meta)?;
        class::check_rules(&config.retention_rules).map_err(StorageError::Manifest)?;
        let class_table = ClassTable::new(config.retention_ms.filter(|&r| r > 0), &config.retention_rules);
        let windows = Windows::load(&db, &meta, manifest.window_ms, class_table)?;
        let classes = SeriesClasses::new(&config.retention_rules, &windows.classes());
        let tier_intervals = tier_intervals(&config.tier_intervals_ms, manifest.window_ms)?;
        downsample_ages(&config.downsample_after, &tier_intervals, config.retention_ms)?;
        // Label sets repeat their names and most values from row to row: LZ4 on every level
        // (fjall leaves L0 and L1 raw by default) about halves the series tables. Options are
        // fixed when a keyspace is created; older directories keep theirs.
        let series_table = |name: &str| db.keyspace(name, series::table_options);
        let (series, series_by_labels) = (series_table("series")?, series_table("series_by_labels")?);
        if let Some(from) = manifest.upgrade_from {
            migrate::upgrade(&db, &meta, [&series, &series_by_labels], &windows, from)?;
        }
        migrate::finish_slimming(&db, &meta, &series_by_labels)?;
        migrate::clear_legacy_postings(&db)?;
        let tables = [meta, series, series_by_labels, ks("wal")?];
        let exemplar_rows = ks("exemplars")?;
        let (exemplars, beyond) = ExemplarStore::load(&exemplar_rows, config.max_exemplars)?;
        if !beyond.is_empty() {
            // `--max-exemplars` was lowered: the oldest rows go.
            let mut batch = db.batch();
            for seq in beyond {
                batch.remove(&exemplar_rows, exemplars::key(seq));
            }
            batch.commit()?;
        }
        let shared = Arc::new(Shared::new(
            db,
            tables,
            (read_pool()?, config.read_strategy),
            (windows, classes),
            (manifest.bucketing, tier_intervals, config.tier_min_density),
            (next_id, config.labels_cache_bytes, config.index_cache_bytes),
            (exemplars, exemplar_rows),
        ));
        for w in shared.windows.all() {
            for ks in select::keyspaces(&w) {
                if histogram_run::any(ks)? {
                    shared.mark_histograms_stored();
                }
                if crate::storage::format::start_ts::any(ks)? {
                    shared.mark_starts_stored();
                }
            }
        }
        crate::storage::lifecycle::churn::recover(&shared)?;
        let wal = replay_wal(&shared)?;
        shared.immutable.advance(&shared.windows);

        let durability = match config.fsync {
            FsyncMode::Always => fjall::PersistMode::SyncData,
            FsyncMode::Batch | FsyncMode::Never => fjall::PersistMode::Buffer,
        };
        let (tx, rx) = mpsc::sync_channel(1024);
        let mut writer = Writer::new(
            Arc::clone(&shared),
            next_id,
            config.series_cache_size,
            Some(durability),
            wal,
            config.head,
            config.write_buffer_bytes,
        );
        if shared.starts_stored() {
            writer.restore_starts()?;
        }
        writer.flush_on_idle(config.idle_flush, config.data_dir.clone());
        let writer = std::thread::Builder::new()
            .name("saltdb-writer".into())
            .spawn(move || writer.run(&rx))
            .map_err(|e| StorageError::Engine(Arc::new(e.into())))?;
        let syncer = (config.fsync == FsyncMode::Batch).then(|| spawn_syncer(Arc::clone(&shared))).transpose()?;
        let reclaim = JournalReclaim::new(config.data_dir.clone());
        Ok(Self {
            inner: Arc::new(Inner {
                shared,
                config,
                tx: Mutex::new(Some(tx)),
                writer: Mutex::new(Some(writer)),
                syncer: Mutex::new(syncer),
                reclaim,
            }),
        })
    }

    fn send(&self, cmd: Command) -> Result<()> {
        self.writer()?.send(cmd).map_err(|_| StorageError::ShuttingDown)
    }

    /// The writer thread's queue; [`StorageError::ShuttingDown`] once closed.
    fn writer(&self) -> Result<SyncSender<Command>> {
        let tx = self.inner.tx.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        tx.ok_or(StorageError::ShuttingDown)
    }

    /// How long samples are kept (`None`: forever); with retention rules, the default class's.
    pub fn retention_ms(&self) -> Option<i64> {
        self.inner.config.retention_ms.filter(|&r| r > 0)
    }

    /// The retention classes (see `lifecycle/class.rs`), by id: the default one first.
    pub fn retention_classes(&self) -> Vec<(ClassId, Class)> {
        self.inner.shared.windows.classes().iter().map(|(id, c)| (id, c.clone())).collect()
    }

    /// How status pages name class `class`: `default`, or its retention (`7d`).
    pub fn class_name(&self, class: ClassId) -> String {
        match self.inner.shared.windows.classes().get(class).and_then(|c| c.named_ms) {
            Some(ms) => crate::duration::format_ms(ms),
            None => "default".to_owned(),
        }
    }

    /// The retention of class `class` (`None`: forever).
    pub fn class_retention_ms(&self, class: ClassId) -> Option<i64> {
        self.inner.shared.windows.classes().get(class).and_then(|c| c.retention_ms).filter(|&r| r > 0)
    }

    /// The retention rules, first match first, with the class each sends its series to.
    pub fn retention_rules(&self) -> Vec<(RetentionRule, ClassId)> {
        self.inner.shared.classes().rules().map(|(r, c)| (r.clone(), c)).collect()
    }

    /// The oldest timestamp retention still keeps, at wall-clock `now_ms`: of the class kept
    /// longest (a sample older than its own class's retention is accepted and goes with its
    /// window at the next retention pass).
    pub fn retention_cutoff(&self, now_ms: i64) -> Option<i64> {
        let retention = self.inner.shared.windows.classes().longest_retention().filter(|&r| r > 0)?;
        let cutoff = now_ms.saturating_sub(retention);
        // Whole windows are dropped, so a window is kept while any part of it is in retention.
        Some(self.inner.shared.windows.start_of(cutoff))
    }

    /// The newest timestamp accepted at wall-clock `now_ms`.
    pub fn future_limit(&self, now_ms: i64) -> Option<i64> {
        self.inner.config.max_future_ms.map(|ahead| now_ms.saturating_add(ahead.max(0)))
    }

    /// Commits a validated batch atomically and returns once it is durable per the fsync mode.
    /// Blocks (call it off the async executor).
    ///
    /// # Errors
    /// [`StorageError::TooOld`] when a sample is outside retention, [`StorageError::TooNew`]
    /// when one is further ahead than `max_future_ms` (nothing is written);
    /// [`StorageError::Poisoned`] after an earlier failed commit; engine errors.
    pub fn write(&self, batch: WriteBatch) -> Result<WriteOutcome> {
        self.write_packed(PackedBatch::from(&batch))
    }

    /// [`Storage::write`] for a batch already packed (what the remote-write decoder produces).
    ///
    /// # Errors
    /// As [`Storage::write`].
    pub fn write_packed(&self, batch: PackedBatch) -> Result<WriteOutcome> {
        self.check_time_range(&batch, now_ms())?;
        if batch.is_empty() {
            return Ok(WriteOutcome::default());
        }
        // Hash the label sets here, on the caller's thread: many callers run in parallel, the
        // writer thread is the one serial step.
        let prepared = Arc::new(Prepared::new(batch));
        let (reply, rx) = mpsc::sync_channel(1);
        self.send(Command::Write(Arc::clone(&prepared), reply))?;
        let outcome = rx.recv().map_err(|_| StorageError::ShuttingDown)?;
        // The writer let go of its handle before replying, so the decoded batch is freed here
        // rather than on the writer thread.
        drop(prepared);
        outcome
    }

    /// Refuses a batch with a sample before the retention cutoff or past the future limit.
    fn check_time_range(&self, batch: &PackedBatch, now_ms: i64) -> Result<()> {
        check_time_range(batch, self.retention_cutoff(now_ms), self.future_limit(now_ms))
    }

    /// Drops every window that lies entirely before its class's retention cutoff at `now_ms`;
    /// returns the start of each dropped window.
    ///
    /// # Errors
    /// Engine errors.
    pub fn enforce_retention(&self, now_ms: i64) -> Result<Vec<i64>> {
        let sh = &self.inner.shared;
        if sh.windows.classes().iter().all(|(id, _)| sh.windows.cutoff(id, now_ms).is_none()) {
            return Ok(Vec::new());
        }
        // Not while a seal, deletion or snapshot reads the keyspaces being dropped.
        let _exclusive = sh.seal_lock.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (reply, rx) = mpsc::sync_channel(1);
        self.send(Command::DropExpired(now_ms, reply))?;
        rx.recv().map_err(|_| StorageError::ShuttingDown)?
    }

    /// Seals the windows (of every retention class) starting at `start_ms` into compressed
    /// chunks (see `lifecycle/seal.rs`); `None` when there is nothing to seal. Blocks for as
    /// long as the rewrites take. With several classes the outcome adds up their figures and
    /// tells the last class's swap.
    ///
    /// # Errors
    /// Engine errors and corrupt rows; the window stays readable as it was.
    pub fn seal_window(&self, start_ms: i64) -> Result<Option<SealOutcome>> {
        let mut total: Option<SealOutcome> = None;
        // Every class, not only those with a window now: the first seal flushes the head's
        // samples of the window, which may create another class's.
        let classes: Vec<ClassId> = self.inner.shared.windows.classes().iter().map(|(id, _)| id).collect();
        for class in classes {
            let key = WindowKey { start_ms, class };
            let Some(done) = seal::seal_window(&self.inner.shared, &self.writer()?, key)? else {
                continue;
            };
            total = Some(match total {
                None => done,
                Some(t) => SealOutcome {
                    series: t.series + done.series,
                    samples: t.samples + done.samples,
                    chunks: t.chunks + done.chunks,
                    tier_rows: t.tier_rows + done.tier_rows,
                    ..done
                },
            });
        }
        Ok(total)
    }

    /// Deletes the samples in `[start_ms, end_ms]` of every series matching `matchers` (see
    /// `lifecycle/delete.rs`). Waits for a running seal to finish; blocks writes while it runs.
    ///
    /// # Errors
    /// Engine errors, corrupt rows, [`StorageError::Poisoned`].
    pub fn delete_series(&self, matchers: &[Matcher], start_ms: i64, end_ms: i64) -> Result<DeleteOutcome> {
        let sh = &self.inner.shared;
        let _exclusive = sh.seal_lock.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let ids = select::accepted_ids(sh, &Selection::new(matchers), start_ms, end_ms)?;
        if ids.is_empty() {
            return Ok(DeleteOutcome::default());
        }
        let (reply, rx) = mpsc::sync_channel(1);
        self.send(Command::Delete(DeleteRange { ids, start_ms, end_ms }, reply))?;
        rx.recv().map_err(|_| StorageError::ShuttingDown)?
    }

    /// Copies the database as of now into `dir` (which must not exist), a directory `saltdb
    /// serve --data-dir` opens; see `lifecycle/snapshot.rs`. Writes continue while it copies.
    ///
    /// # Errors
    /// Engine and I/O errors (the partial copy is removed).
    pub fn snapshot(&self, dir: &std::path::Path) -> Result<SnapshotOutcome> {
        let sh = &self.inner.shared;
        let _exclusive = sh.seal_lock.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (reply, rx) = mpsc::sync_channel(1);
        self.send(Command::Pin(reply))?;
        let pinned = rx.recv().map_err(|_| StorageError::ShuttingDown)??;
        snapshot::copy_to(sh, &pinned, dir)
    }

    /// The data directory.
    pub fn data_dir(&self) -> &std::path::Path {
        &self.inner.config.data_dir
    }

    /// Seals every window closed for longer than `grace_ms` at `now_ms` that still has hot rows.
    ///
    /// # Errors
    /// The first failing seal's error.
    pub fn seal_due(&self, now_ms: i64, grace_ms: i64) -> Result<Vec<SealOutcome>> {
        let window_ms = self.inner.shared.windows.window_ms();
        let due: Vec<WindowKey> = self
            .inner
            .shared
            .windows
            .all()
            .into_iter()
            .filter(|w| w.points.is_some() && w.start_ms.saturating_add(window_ms).saturating_add(grace_ms) <= now_ms)
            .map(|w| w.key())
            .collect();
        let mut out = Vec::new();
        for key in due {
            out.extend(seal::seal_window(&self.inner.shared, &self.writer()?, key)?);
        }
        Ok(out)
    }

    /// Downsamples every sealed window that has passed an age of
    /// [`StorageConfig::downsample_after`] at `now_ms` and keeps finer data than it allows (see
    /// `lifecycle/downsample.rs`); windows with late samples not yet re-sealed wait for the
    /// next call.
    ///
    /// # Errors
    /// The first failing pass' error.
    pub fn downsample_due(&self, now_ms: i64) -> Result<Vec<DownsampleOutcome>> {
        let ages = &self.inner.config.downsample_after;
        if ages.is_empty() {
            return Ok(Vec::new());
        }
        let sh = &self.inner.shared;
        let window_ms = sh.windows.window_ms();
        let due: Vec<(WindowKey, i64)> = sh
            .windows
            .all()
            .into_iter()
            .filter(|w| w.chunks.is_some() && w.points.is_none())
            .filter_map(|w| {
                let finest = downsample::due(ages, w.start_ms.saturating_add(window_ms), now_ms)?;
                (w.finest_kept() < Some(finest)).then_some((w.key(), finest))
            })
            .collect();
        let mut out = Vec::new();
        for (key, finest) in due {
            out.extend(downsample::downsample_window(sh, &self.writer()?, key, finest)?);
        }
        Ok(out)
    }

    /// Downsamples the default class's window starting at `start_ms` to keep nothing finer
    /// than `finest_ms` (see `lifecycle/downsample.rs`); `None` when there is nothing to do now.
    ///
    /// # Errors
    /// Engine errors and corrupt rows; the window stays as it was.
    pub fn downsample_window(&self, start_ms: i64, finest_ms: i64) -> Result<Option<DownsampleOutcome>> {
        let key = WindowKey::default_class(start_ms);
        downsample::downsample_window(&self.inner.shared, &self.writer()?, key, finest_ms)
    }

    /// A [`Querier`] over this database for one request, within `limits`.
    pub fn querier(&self, limits: ReadLimits) -> StorageQuerier {
        StorageQuerier { shared: Arc::clone(&self.inner.shared), limits }
    }

    /// Every series matching `matchers` with samples in `[start, end]`; fails past `max_samples`
    /// loaded samples. A shorthand for [`Storage::querier`] and [`Querier::select`].
    ///
    /// # Errors
    /// Engine errors, corrupt rows, [`StorageError::TooManySamples`].
    pub fn select(
        &self,
        matchers: &[Matcher],
        start_ms: i64,
        end_ms: i64,
        max_samples: usize,
    ) -> Result<Vec<SeriesSamples>> {
        let limits = ReadLimits { max_samples: Some(max_samples), ..ReadLimits::none() };
        self.querier(limits).select(matchers, start_ms, end_ms, None)
    }

    /// Newest sample at or before `at_ms` per matching series (one seek per window).
    ///
    /// # Errors
    /// Engine errors and corrupt rows.
    pub fn latest(&self, matchers: &[Matcher], at_ms: i64) -> Result<Vec<(Labels, Sample)>> {
        select::latest(&self.inner.shared, &Selection::new(matchers), at_ms, i64::MAX)
    }

    /// The exemplars in `[start, end]` of the series matching any of `selectors` (each a list
    /// of matchers), by series labels, each series' exemplars by time.
    ///
    /// # Errors
    /// Engine errors and corrupt rows.
    pub fn exemplars(&self, selectors: &[Vec<Matcher>], start_ms: i64, end_ms: i64) -> Result<Vec<SeriesExemplars>> {
        let sh = &self.inner.shared;
        let selections: Vec<Selection> = selectors.iter().map(|m| Selection::new(m)).collect();
        let mut out = Vec::new();
        for id in sh.exemplars.series_in(start_ms, end_ms) {
            let Some(labels) = sh.labels.get(&sh.series, id)? else { continue };
            if !selections.iter().any(|s| s.accepts(&labels)) {
                continue;
            }
            let exemplars = sh.exemplars.of(id, start_ms, end_ms);
            if !exemplars.is_empty() {
                out.push(SeriesExemplars { labels, exemplars });
            }
        }
        out.sort_by(|a, b| a.labels.cmp(&b.labels));
        Ok(out)
    }

    /// Exemplars held, and the most kept (`--max-exemplars`).
    pub fn exemplar_figures(&self) -> (usize, usize) {
        let store = &self.inner.shared.exemplars;
        (store.len(), store.max())
    }

    /// Label sets of matching series present in `[start, end]` (no limits).
    ///
    /// # Errors
    /// Engine errors and corrupt rows.
    pub fn series(&self, matchers: &[Matcher], start_ms: i64, end_ms: i64) -> Result<Vec<Labels>> {
        self.querier(ReadLimits::none()).series(matchers, start_ms, end_ms, None)
    }

    /// Label names of matching series present in `[start, end]` (no limits).
    ///
    /// # Errors
    /// Engine errors and corrupt rows.
    pub fn label_names(&self, matchers: &[Matcher], start_ms: i64, end_ms: i64) -> Result<Vec<String>> {
        self.querier(ReadLimits::none()).label_names(matchers, start_ms, end_ms, None)
    }

    /// Values of label `name` among matching series present in `[start, end]` (no limits).
    ///
    /// # Errors
    /// Engine errors and corrupt rows.
    pub fn label_values(&self, name: &str, matchers: &[Matcher], start_ms: i64, end_ms: i64) -> Result<Vec<String>> {
        self.querier(ReadLimits::none()).label_values(name, matchers, start_ms, end_ms, None)
    }

    /// Cardinality of the series with data in a time range, all of them or those matching
    /// selectors, each list cut to its largest entries. Counted from the window postings (see
    /// [`crate::storage::read::cardinality`]).
    ///
    /// # Errors
    /// Engine errors, corrupt rows, the limits' timeout or cancellation.
    pub fn cardinality(&self, query: &super::CardinalityQuery, limits: &ReadLimits) -> Result<super::Cardinality> {
        crate::storage::read::cardinality::cardinality(&self.inner.shared, query, limits)
    }

    /// For every window, how many of its series carry each value of label `name` (the
    /// tenants' shares, with `__tenant__`), from the window postings.
    ///
    /// # Errors
    /// Engine errors and corrupt keys.
    pub fn series_per_value(&self, name: &str) -> Result<Vec<crate::storage::WindowValues>> {
        crate::storage::read::cardinality::series_per_value(&self.inner.shared, name)
    }

    /// The window length, retention and bucketing this database runs with.
    pub fn config(&self) -> &StorageConfig {
        &self.inner.config
    }

    /// Flushes the in-memory head into runs of the window keyspaces (which the log replay
    /// would otherwise rebuild at the next start).
    ///
    /// # Errors
    /// Engine errors; [`StorageError::Poisoned`].
    pub fn flush_head(&self) -> Result<()> {
        let (reply, rx) = mpsc::sync_channel(1);
        self.send(Command::Flush(reply))?;
        rx.recv().map_err(|_| StorageError::ShuttingDown)?
    }

    /// Replaces the retention rules while the database is open: the head is flushed, classes
    /// for new retentions are added, and each series' class is decided again from its labels at
    /// its next write or flush. Samples already in windows stay in their class (dropped at its
    /// retention); reads merge a series' windows of two classes at one start.
    ///
    /// # Errors
    /// [`StorageError::Manifest`] for rules [`check_retention_rules`](crate::storage::check_retention_rules)
    /// refuses (nothing changes then); engine errors of the flush.
    pub fn set_retention_rules(&self, rules: Vec<RetentionRule>) -> Result<()> {
        class::check_rules(&rules).map_err(StorageError::Manifest)?;
        let mut table = self.inner.shared.windows.classes();
        table.add_rules(&rules);
        let kept = |ms: i64| {
            table.iter().any(|(id, c)| c.named_ms == Some(ms) || (id == DEFAULT_CLASS && c.retention_ms == Some(ms)))
        };
        if let Some(r) = rules.iter().find(|r| !kept(r.retention_ms)) {
            return Err(StorageError::Manifest(format!(
                "retention rule {}: the database holds {} retention classes already, the most it can",
                r.selector,
                class::MAX_CLASSES
            )));
        }
        let (reply, rx) = mpsc::sync_channel(1);
        self.send(Command::SetRetentionRules(rules, reply))?;
        rx.recv().map_err(|_| StorageError::ShuttingDown)?
    }

    /// Samples held in the in-memory head (acknowledged, not yet flushed into window keyspaces).
    pub fn head_samples(&self) -> usize {
        self.inner.shared.head.len()
    }

    /// What the in-memory head holds now.
    pub fn head_figures(&self) -> HeadFigures {
        let head = &self.inner.shared.head;
        HeadFigures { samples: head.len() as u64, series: head.series() as u64, bytes: head.bytes() as u64 }
    }

    /// Compacts the write-ahead log's keyspace when its tables hold more than
    /// `WAL_COMPACT_BYTES` and mostly dead rows (over 4x what the head holds, at ~12 bytes a
    /// sample): its rows are deleted at every head flush, but the deleted rows and their
    /// tombstones stay on disk until a compaction reaches them, which for a keyspace whose every
    /// row dies young can take long. Blocks while it runs.
    ///
    /// # Errors
    /// Engine errors.
    pub fn compact_wal(&self) -> Result<()> {
        let sh = &self.inner.shared;
        let on_disk = sh.wal.disk_space();
        let live = sh.head.len() as u64 * 12;
        if on_disk > WAL_COMPACT_BYTES && on_disk > live.saturating_mul(4) {
            tracing::debug!(on_disk, live, "compacting the write-ahead log");
            sh.wal.major_compact()?;
        }
        Ok(())
    }

    /// Flushes every memtable to disk tables and fsyncs the journal (for benchmarks and
    /// orderly shutdown).
    ///
    /// # Errors
    /// Engine errors.
    pub fn flush(&self) -> Result<()> {
        self.flush_head()?;
        let sh = &self.inner.shared;
        for ks in [&sh.meta, &sh.series, &sh.series_by_labels, &sh.wal] {
            ks.rotate_memtable_and_wait()?;
        }
        for w in sh.windows.all() {
            for ks in w.points.iter().chain(w.chunks.as_ref().map(|(_, ks)| ks)) {
                ks.rotate_memtable_and_wait()?;
            }
        }
        sh.db.persist(fjall::PersistMode::SyncAll)?;
        Ok(())
    }

    /// Sizes and counters.
    ///
    /// # Errors
    /// I/O errors walking the data directory.
    pub fn stats(&self) -> Result<StorageStats> {
        let sh = &self.inner.shared;
        let window_ms = sh.windows.window_ms();
        let windows: Vec<WindowStats> = sh
            .windows
            .all()
            .into_iter()
            .map(|w| WindowStats {
                start_ms: w.start_ms,
                class: w.class,
                end_ms: w.start_ms + window_ms,
                hot_bytes: w.points.as_ref().map_or(0, fjall::Keyspace::disk_space),
                chunk_bytes: w.chunks.as_ref().map_or(0, |(_, ks)| ks.disk_space()),
                sealed: w.chunks.is_some(),
                downsampled_ms: w.finest_kept(),
            })
            .collect();
        let table_bytes = vec![
            ("meta", sh.meta.disk_space()),
            ("series", sh.series.disk_space()),
            ("series_by_labels", sh.series_by_labels.disk_space()),
            ("wal", sh.wal.disk_space()),
            ("points", windows.iter().map(|w| w.hot_bytes).sum()),
            ("chunks", windows.iter().map(|w| w.chunk_bytes).sum()),
        ];
        let disk_bytes = du_bytes(&self.inner.config.data_dir).map_err(|e| StorageError::Engine(Arc::new(e.into())))?;
        Ok(StorageStats {
            disk_bytes,
            table_bytes,
            windows,
            samples_per_bucket: sh.samples_per_bucket(),
            series_created: sh.series_created(),
            series_total: sh.next_id_committed().saturating_sub(1),
        })
    }

    /// Every window with its state, series, samples and bytes, oldest first. Scans each
    /// window's series index.
    ///
    /// # Errors
    /// Engine errors.
    pub fn window_status(&self) -> Result<Vec<WindowStatus>> {
        let sh = &self.inner.shared;
        let sealing = *sh.sealing.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let window_ms = sh.windows.window_ms();
        let mut out = Vec::new();
        for w in sh.windows.all() {
            let series = select::universe(std::slice::from_ref(&w))?.len() as u64;
            let sealed_samples = match &w.chunks {
                Some(_) => sh.windows.sealed_samples(&sh.meta, w.key())?,
                None => 0,
            };
            let hot_samples = match &w.points {
                Some(ks) => {
                    // Index rows (window index and postings blocks) are not samples.
                    let mut index_rows = 0u64;
                    for guard in ks.prefix([crate::storage::format::keys::INDEX_ROW_BYTE]) {
                        guard.key()?;
                        index_rows += 1;
                    }
                    // Rows are runs: counting each as one sample gives a lower bound.
                    (ks.approximate_len() as u64).saturating_sub(index_rows)
                }
                None => 0,
            };
            // The head's samples are not told apart by class: counted in the default class's window.
            let in_head =
                if w.class == DEFAULT_CLASS { sh.head.count_in(w.start_ms, w.start_ms + window_ms) } else { 0 };
            let hot_samples = hot_samples + in_head as u64;
            let state = if sealing == Some(w.key()) {
                WindowState::Sealing
            } else if w.chunks.is_some() {
                WindowState::Sealed
            } else {
                WindowState::Hot
            };
            let bytes = w.points.as_ref().map_or(0, fjall::Keyspace::disk_space)
                + w.chunks.as_ref().map_or(0, |(_, ks)| ks.disk_space());
            out.push(WindowStatus {
                start_ms: w.start_ms,
                class: w.class,
                end_ms: w.start_ms + window_ms,
                state,
                series,
                samples: sealed_samples + hot_samples,
                bytes,
                downsampled_ms: w.finest_kept(),
            });
        }
        Ok(out)
    }

    /// The bucket scheme and count in use.
    pub fn bucketing(&self) -> Bucketing {
        self.inner.shared.bucketing
    }

    /// The reason writes are refused, if a commit has failed.
    pub fn poisoned(&self) -> Option<String> {
        self.inner.shared.poisoned()
    }
}

/// The embedded store's [`Querier`] for one request (see [`Storage::querier`]).
pub struct StorageQuerier {
    shared: Arc<Shared>,
    limits: ReadLimits,
}

impl Querier for StorageQuerier {
    fn cancellation(&self) -> Option<Arc<std::sync::atomic::AtomicBool>> {
        self.limits.cancel.clone()
    }

    fn immutable_before(&self) -> Option<(i64, u64)> {
        self.shared.immutable.get()
    }

    fn select(
        &self,
        matchers: &[Matcher],
        start_ms: i64,
        end_ms: i64,
        map: Option<SeriesMap<'_>>,
    ) -> Result<Vec<SeriesSamples>> {
        select::select(&self.shared, &Selection::new(matchers), start_ms, end_ms, &self.limits, map)
    }

    fn select_reduced(
        &self,
        matchers: &[Matcher],
        start_ms: i64,
        end_ms: i64,
        sink: SinkFactory<'_>,
        map: Option<SeriesMap<'_>>,
    ) -> Result<Vec<SeriesSamples>> {
        let sel = Selection::new(matchers);
        select::select_reduced(&self.shared, &sel, (start_ms, end_ms), &self.limits, sink, map)
    }

    fn tier_intervals(&self) -> Vec<i64> {
        let mut out = self.shared.tier_intervals_ms.clone();
        // Downsampled windows keep theirs whatever the flags say now (none ends after the
        // horizon: without any, the windows are not listed).
        if self.shared.windows.downsampled_end() > i64::MIN {
            let kept = self.shared.windows.all().into_iter().filter_map(|w| w.downsampled);
            out.extend(kept.flat_map(|d| d.to_vec()));
        }
        out.sort_unstable();
        out.dedup();
        out
    }

    fn downsampled_in(&self, start_ms: i64, end_ms: i64) -> Option<(i64, i64)> {
        // No downsampled window ends after the horizon (the common case: none at all).
        if start_ms >= self.shared.windows.downsampled_end() {
            return None;
        }
        let windows = self.shared.windows.overlapping(start_ms, end_ms);
        let finest = windows.iter().filter_map(Window::finest_kept).max()?;
        let end = windows.iter().filter(|w| w.downsampled.is_some()).map(|w| w.start_ms).max()?;
        Some((finest, end.saturating_add(self.shared.windows.window_ms())))
    }

    fn select_points(
        &self,
        matchers: &[Matcher],
        ends: (i64, i64),
        interval_ms: i64,
        how: crate::storage::PointsRead<'_>,
    ) -> Result<Option<Vec<crate::storage::SeriesPoints>>> {
        if !self.tier_intervals().contains(&interval_ms) {
            return Ok(None);
        }
        let sel = Selection::new(matchers);
        crate::storage::read::tiers::select_points(&self.shared, &sel, (ends, interval_ms), how, &self.limits)
    }

    fn for_each_series(
        &self,
        matchers: &[Matcher],
        start_ms: i64,
        end_ms: i64,
        f: &mut dyn FnMut(SeriesSamples) -> bool,
    ) -> Result<()> {
        select::for_each_series(&self.shared, &Selection::new(matchers), start_ms, end_ms, &self.limits, f)
    }

    fn start_timestamps(
        &self,
        matchers: &[Matcher],
        start_ms: i64,
        end_ms: i64,
    ) -> Result<Vec<crate::storage::SeriesStarts>> {
        select::start_timestamps(&self.shared, &Selection::new(matchers), start_ms, end_ms, &self.limits)
    }

    fn series(&self, matchers: &[Matcher], start_ms: i64, end_ms: i64, limit: Option<usize>) -> Result<Vec<Labels>> {
        select::series_labels(&self.shared, &Selection::new(matchers), start_ms, end_ms, &self.limits, limit)
    }

    fn label_names(
        &self,
        matchers: &[Matcher],
        start_ms: i64,
        end_ms: i64,
        limit: Option<usize>,
    ) -> Result<Vec<String>> {
        select::label_names(&self.shared, &Selection::new(matchers), start_ms, end_ms, &self.limits, limit)
    }

    fn label_values(
        &self,
        name: &str,
        matchers: &[Matcher],
        start_ms: i64,
        end_ms: i64,
        limit: Option<usize>,
    ) -> Result<Vec<String>> {
        select::label_values(&self.shared, name, &Selection::new(matchers), start_ms, end_ms, &self.limits, limit)
    }

    fn held_series(
        &self,
        matchers: &[Matcher],
        start_ms: i64,
        end_ms: i64,
        limit: Option<usize>,
    ) -> Option<Vec<Labels>> {
        select::held_series(&self.shared, &Selection::new(matchers), start_ms, end_ms, limit)
    }

    fn held_label_names(
        &self,
        matchers: &[Matcher],
        start_ms: i64,
        end_ms: i64,
        limit: Option<usize>,
    ) -> Option<Vec<String>> {
        select::held_label_names(&self.shared, &Selection::new(matchers), start_ms, end_ms, limit)
    }

    fn held_label_values(
        &self,
        name: &str,
        matchers: &[Matcher],
        start_ms: i64,
        end_ms: i64,
        limit: Option<usize>,
    ) -> Option<Vec<String>> {
        select::held_label_values(&self.shared, name, &Selection::new(matchers), start_ms, end_ms, limit)
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(tx) = self.tx.get_mut().unwrap_or_else(std::sync::PoisonError::into_inner).take() {
            drop(tx);
        }
        if let Some(writer) = self.writer.get_mut().unwrap_or_else(std::sync::PoisonError::into_inner).take() {
            let _ = writer.join();
        }
        if let Some((stop, handle)) = self.syncer.get_mut().unwrap_or_else(std::sync::PoisonError::into_inner).take() {
            drop(stop);
            let _ = handle.join();
        }
        if let Err(e) = self.shared.db.persist(fjall::PersistMode::SyncAll) {
            tracing::error!(error = %e, "final journal sync failed");
        }
        self.close_cleanly();
    }
}

impl Inner {
    /// After the writer's final head flush: leaves tables only (see `lifecycle/close.rs`) when the head
    /// is empty, the log holds no live row and nothing failed; otherwise the journal and log are
    /// replayed at the next open, as after a crash.
    fn close_cleanly(&self) {
        let sh = &self.shared;
        if sh.poisoned().is_some() || !sh.head.is_empty() {
            return;
        }
        let flushed = match sh.wal.first_key_value() {
            None => close::flush_everything(sh),
            Some(_) => return,
        };
        match flushed {
            Ok(()) => self.reclaim.arm(),
            Err(e) => {
                tracing::warn!(error = %e, "flushing every table at close failed; the journal is replayed at the next open")
            }
        }
    }
}

/// Replays the write-ahead log into the head, in sequence order; returns where the log stands.
fn replay_wal(sh: &Shared) -> Result<WalPosition> {
    let mut pos = WalPosition::default();
    let mut rows = 0u64;
    for guard in sh.wal.iter() {
        let (key, value) = guard.into_inner()?;
        let seq = wal::decode_key(&key).ok_or(StorageError::Corrupt { what: "write-ahead log key" })?;
        if rows == 0 {
            pos.first = seq;
        }
        pos.next = seq.saturating_add(1);
        wal::decode_all(
            &value,
            |id, samples| sh.head.append([(sh.bucketing.bucket(id), id, samples)]),
            |id, samples| sh.head.append_histograms([(sh.bucketing.bucket(id), id, samples)]),
        )
        .map_err(|_| StorageError::Corrupt { what: "write-ahead log row" })?;
        rows += 1;
    }
    if rows > 0 {
        tracing::info!(rows, samples = sh.head.len(), "replayed the write-ahead log into the head");
    }
    Ok(pos)
}

/// Background fsync for [`FsyncMode::Batch`]: every second until the stop sender is dropped.
fn spawn_syncer(shared: Arc<Shared>) -> Result<(SyncSender<()>, JoinHandle<()>)> {
    let (stop, stopped) = mpsc::sync_channel::<()>(0);
    let handle = std::thread::Builder::new()
        .name("saltdb-fsync".into())
        .spawn(move || {
            while let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(Duration::from_secs(1)) {
                if let Err(e) = shared.db.persist(fjall::PersistMode::SyncData) {
                    shared.poison(&e.to_string());
                    tracing::error!(error = %e, "background fsync failed; refusing further writes");
                }
            }
        })
        .map_err(|e| StorageError::Engine(Arc::new(e.into())))?;
    Ok((stop, handle))
}

/// The shared read pool: one thread per core (see [`Shared::pool`]).
fn read_pool() -> Result<Arc<rayon::ThreadPool>> {
    let threads = crate::cores::available();
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .thread_name(|i| format!("saltdb-read-{i}"))
        .build()
        .map_err(|e| StorageError::Engine(Arc::new(std::io::Error::other(e.to_string()).into())))?;
    Ok(Arc::new(pool))
}

/// Wall-clock milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// What the in-memory head holds (see [`Storage::head_figures`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HeadFigures {
    /// Samples held.
    pub samples: u64,
    /// Series holding at least one sample.
    pub series: u64,
    /// Memory taken, estimated from the series' vectors (the quantity `--head-max-memory` bounds).
    pub bytes: u64,
}

/// Engine figures for `/metrics`: fjall's (it has no write-stall counter) and the head's.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EngineStats {
    /// What the in-memory head holds.
    pub head: HeadFigures,
    /// Bytes in active and sealed memtables.
    pub write_buffer_bytes: u64,
    /// Bytes in the block cache (bounded by `--block-cache`).
    pub block_cache_bytes: u64,
    /// Memtables waiting to be flushed.
    pub outstanding_flushes: u64,
    /// Compactions running now.
    pub active_compactions: u64,
    /// Compactions completed since open.
    pub compactions_completed: u64,
    /// Time spent compacting since open, in microseconds.
    pub compaction_micros: u64,
    /// Journal files on disk.
    pub journal_files: u64,
    /// Bytes of journal on disk.
    pub journal_bytes: u64,
    /// Index and filter blocks fjall keeps pinned in memory, outside the block cache, summed
    /// over every keyspace (by default the filters of L0 tables and the indexes of L0 and L1
    /// tables): memory that grows with the tables on disk, not bounded by `--block-cache`.
    pub pinned_bytes: u64,
    /// Bytes of decoded label sets the read path keeps (bounded by `--labels-cache`).
    pub labels_cache_bytes: u64,
    /// Bytes of window-index answers the read path keeps (bounded by `--index-cache`).
    pub index_cache_bytes: u64,
    /// Bytes of the writer's filter of stored label sets (2 per series stored or created).
    pub label_set_filter_bytes: u64,
}

// Additive API for `/metrics` (remote branch): engine figures and the active-series count.
impl Storage {
    /// fjall's own counters and gauges.
    ///
    /// # Errors
    /// Engine errors while measuring the journal.
    pub fn engine_stats(&self) -> Result<EngineStats> {
        let db = &self.inner.shared.db;
        Ok(EngineStats {
            head: self.head_figures(),
            write_buffer_bytes: db.write_buffer_size(),
            block_cache_bytes: db.cache_size(),
            outstanding_flushes: db.outstanding_flushes() as u64,
            active_compactions: db.active_compactions() as u64,
            compactions_completed: db.compactions_completed() as u64,
            compaction_micros: u64::try_from(db.time_compacting().as_micros()).unwrap_or(u64::MAX),
            journal_files: db.journal_count() as u64,
            journal_bytes: db.journal_disk_space()?,
            pinned_bytes: self.pinned_bytes(),
            labels_cache_bytes: self.inner.shared.labels.bytes(),
            index_cache_bytes: self.inner.shared.index.bytes(),
            label_set_filter_bytes: self.inner.shared.label_set_filter_bytes.load(std::sync::atomic::Ordering::Relaxed),
        })
    }

    /// Index and filter bytes pinned by every keyspace: the fixed tables and each window's.
    fn pinned_bytes(&self) -> u64 {
        use fjall::AbstractTree;
        let sh = &self.inner.shared;
        let pinned = |ks: &fjall::Keyspace| (ks.tree.pinned_filter_size() + ks.tree.pinned_block_index_size()) as u64;
        let fixed = [&sh.meta, &sh.series, &sh.series_by_labels, &sh.wal, &sh.exemplar_rows];
        let windows: u64 = sh
            .windows
            .all()
            .iter()
            .map(|w| w.points.as_ref().map_or(0, pinned) + w.chunks.as_ref().map_or(0, |(_, ks)| pinned(ks)))
            .sum();
        fixed.into_iter().map(pinned).sum::<u64>() + windows
    }

    /// Series with at least one sample in the newest time window, without reading storage (so a
    /// `/metrics` scrape costs the same at any series count): the writer's count for an unsealed
    /// window it wrote to, else the count [`Storage::refresh_active_series`] last measured (at
    /// most one maintenance interval old). `None` before the newest window was ever measured.
    pub fn active_series(&self) -> Option<u64> {
        let sh = &self.inner.shared;
        let Some(newest) = newest_windows(sh) else { return Some(0) };
        let start_ms = newest.first().map_or(0, |w| w.start_ms);
        if let Some(n) = sh.newest_window_series(start_ms).filter(|_| newest.iter().all(|w| w.chunks.is_none())) {
            return Some(n);
        }
        sh.measured_series().filter(|m| m.start_ms == start_ms).map(|m| m.count)
    }

    /// Measures the newest window's series count by a walk of its index, unless the writer's
    /// count or a measurement of the window in its present state already gives it. Called at
    /// start-up and by each maintenance pass, never by a scrape. Blocks.
    ///
    /// # Errors
    /// Engine errors.
    pub fn refresh_active_series(&self) -> Result<()> {
        let sh = &self.inner.shared;
        let Some(newest) = newest_windows(sh) else { return Ok(()) };
        let start_ms = newest.first().map_or(0, |w| w.start_ms);
        if newest.iter().all(|w| w.chunks.is_none()) && sh.newest_window_series(start_ms).is_some() {
            return Ok(());
        }
        // The windows' state, of every class at that start: a change to any moves it.
        let writes = newest.iter().map(|w| sh.windows.writes(w.key())).fold(0u64, u64::wrapping_add);
        let generation = newest.iter().filter_map(|w| w.chunks.as_ref().map(|(g, _)| *g)).max();
        let state = Some((writes, generation));
        if sh.measured_series().is_some_and(|m| m.start_ms == start_ms && m.state == state) {
            return Ok(());
        }
        let count = select::universe(&newest)?.len() as u64;
        sh.set_measured_series(MeasuredSeries { start_ms, state, count });
        Ok(())
    }
}

/// The windows (of every retention class) at the newest start; `None` when there are none.
fn newest_windows(sh: &Shared) -> Option<Vec<Window>> {
    let start = sh.windows.all().iter().map(|w| w.start_ms).max()?;
    Some(sh.windows.starting_at(start))
}

/// Refuses a batch with a sample before `cutoff` ([`StorageError::TooOld`]) or after `limit`
/// ([`StorageError::TooNew`]); nothing is refused for a bound that is `None`. Shared by every
/// backend, so both refuse the same samples with the same errors.
///
/// # Errors
/// As above.
pub fn check_time_range(batch: &PackedBatch, cutoff: Option<i64>, limit: Option<i64>) -> Result<()> {
    if cutoff.is_none() && limit.is_none() {
        return Ok(());
    }
    let (mut oldest, mut newest) = (i64::MAX, i64::MIN);
    for t in batch.samples().iter().map(|s| s.timestamp_ms).chain(batch.histograms().iter().map(|h| h.timestamp_ms)) {
        oldest = oldest.min(t);
        newest = newest.max(t);
    }
    if let Some(cutoff_ms) = cutoff.filter(|&c| oldest < c) {
        return Err(StorageError::TooOld { ts_ms: oldest, cutoff_ms });
    }
    if let Some(limit_ms) = limit.filter(|&l| newest > l) {
        return Err(StorageError::TooNew { ts_ms: newest, limit_ms });
    }
    Ok(())
}
