//! The single writer thread: group commit of write batches (new series, window-index rows and
//! one write-ahead-log row per group; the samples then join the head), head flushes into runs,
//! series-id allocation, window creation and window drops. Owning all mutations on one thread
//! means ids are allocated without locks and a window is never dropped while a commit or a flush
//! writes into it (every command but a write first waits for a background flush step).
//! Appending a group to the head is handed to the writer's own pool, one worker per bucket,
//! while the writer waits; a head flush step writes its frozen head shards on a flush pool while
//! the writer goes on (`flush.rs`). Buckets share no series, head shard or row (see
//! `docs/scaling.md`).
//!
//! The write group owns, beside this thread: the head of acknowledged samples ([`head`]), its
//! write-ahead log ([`wal`]), flushes of the head into runs (`flush.rs`), keeping fjall's memtables
//! within `--write-buffer` (`memtables.rs`) and which series are indexed in the recent windows
//! (`presence.rs`). It is the only writer of samples, series and postings rows; the lifecycle's
//! changes (window drops, seal swaps, deletes, snapshots) run here as commands. May not: answer
//! reads (that is `read/`), or decode rows other than through `format/`.

use std::collections::{HashMap, HashSet};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TryRecvError};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod flush;
mod flushed_max;
pub(super) mod head;
pub(super) mod idle;
mod memtables;
mod presence;
pub(super) mod wal;

use crate::labels::Labels;
use crate::sample::{Exemplar, PackedBatch, PackedSeries, Sample};
use crate::storage::error::{Result, StorageError};
use crate::storage::format::exemplars;
use crate::storage::format::histogram_run;
use crate::storage::format::keys;
use crate::storage::format::manifest::NEXT_SERIES_ID;
use crate::storage::format::run;
use crate::storage::format::start_ts;
use crate::storage::index::known_label_sets::KnownLabelSets;
use crate::storage::index::postings;
use crate::storage::index::series::{self, Lookup, SeriesCache};
use crate::storage::lifecycle::churn;
use crate::storage::lifecycle::class::{ClassId, RetentionRule, SeriesClasses, DEFAULT_CLASS};
use crate::storage::lifecycle::delete::{self, DeleteOutcome, DeleteRange};
use crate::storage::lifecycle::downsample::FinishDownsample;
use crate::storage::lifecycle::snapshot::Pinned;
use crate::storage::lifecycle::window::{self, WindowKey};
use crate::storage::series_id::IdMap;
use crate::storage::series_id::SeriesId;
use crate::storage::shared::Shared;
use presence::Presence;

/// Samples gathered into one group commit before it is written (bounds the batch's memory).
const GROUP_SAMPLE_BUDGET: usize = 1_000_000;
/// Bytes of new series rows (`series` and `series_by_labels`) after which the writer rotates
/// those keyspaces' memtables, rather than fjall's 64 MiB each (which it cannot lower for a
/// keyspace that exists). Those rows are written once and read from disk or the series cache
/// afterwards, so a big memtable only holds memory: at 1 M new series, ~1.9x its accounted
/// bytes (heaptrack), and until the next burst of new series, which may never come.
const SERIES_MEMTABLE_BYTES: usize = 16 << 20;
/// fjall's accounting of one row in a memtable besides its key and value, roughly.
const MEMTABLE_ROW_BYTES: usize = 32;

/// When the head is flushed into window keyspaces.
///
/// By size, a flush falls due when the head holds `max_samples` samples or, when that is
/// more, [`RUN_SAMPLES`] samples per series it holds, or when its memory reaches `max_bytes`,
/// whichever comes first. The per-series term is what keeps runs several samples long at
/// millions of active series: a fixed count below one sample per series would write one run
/// row per sample (at 10 M series and 4 M samples, known-series ingest ran at 0.20x
/// VictoriaMetrics'). `max_bytes` is the hard bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeadLimits {
    /// Flush once the head holds this many samples, or [`RUN_SAMPLES`] per series it holds
    /// when that is more.
    pub max_samples: usize,
    /// Flush once the head's memory reaches this many bytes (see [`self::head::Head::bytes`]).
    pub max_bytes: usize,
    /// Flush once the oldest unflushed write is this old (bounds log replay and run shortness).
    pub max_age: Duration,
}

/// Samples per series the head gathers before it is due by size, where that exceeds
/// `max_samples` (see [`HeadLimits`]).
pub const RUN_SAMPLES: usize = 4;

impl HeadLimits {
    /// True when a head of `samples` samples over `series` series taking `bytes` bytes is due
    /// for a flush by its size.
    pub fn full(&self, samples: usize, series: usize, bytes: usize) -> bool {
        bytes >= self.max_bytes || samples >= self.max_samples.max(series.saturating_mul(RUN_SAMPLES))
    }
}

/// What one write did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriteOutcome {
    /// Samples written (floats and histograms).
    pub samples: usize,
    /// Series created by this write.
    pub series_created: usize,
    /// Exemplars stored (out-of-order and duplicate ones are not).
    pub exemplars: usize,
}

/// The refusal of a batch with a sample in a downsampled window (see
/// `lifecycle/downsample.rs`), naming the first such sample.
fn into_downsampled(sh: &Shared, p: &Prepared) -> Option<StorageError> {
    p.batch.series().find_map(|s| {
        let floats = s.samples.iter().map(|x| x.timestamp_ms);
        floats.chain(s.histograms.iter().map(|h| h.timestamp_ms)).find_map(|ts| {
            let w = sh.windows.downsampled_at(ts)?;
            Some(StorageError::Downsampled { ts_ms: ts, window_start_ms: w.start_ms, interval_ms: w.finest_kept()? })
        })
    })
}

/// A batch with what can be computed before the writer thread sees it: the identity of every
/// series' label set (see [`series::identity`]), in the order of `batch.series()`.
pub struct Prepared {
    /// The batch.
    pub batch: PackedBatch,
    /// One key per series of the batch.
    pub keys: Vec<SeriesKey>,
    /// The oldest timestamp of the batch (floats and histograms; `i64::MAX` when empty), for
    /// [`crate::storage::immutable::Immutable::written_below`].
    pub oldest_ms: i64,
}

/// A label set's in-memory identity (the id-cache key).
pub struct SeriesKey {
    /// xxh3-128 of the canonical label-set bytes.
    pub identity: [u8; 16],
}

impl Prepared {
    /// Hashes every series of `batch`.
    pub fn new(batch: PackedBatch) -> Self {
        let keys = batch.series().map(|s| SeriesKey { identity: series::identity(s.labels) }).collect();
        let oldest_ms = batch
            .series()
            .flat_map(|s| {
                let floats = s.samples.iter().map(|p| p.timestamp_ms);
                floats.chain(s.histograms.iter().map(|h| h.timestamp_ms))
            })
            .min()
            .unwrap_or(i64::MAX);
        Self { batch, keys, oldest_ms }
    }
}

/// A request to the writer thread.
pub enum Command {
    /// Commit a batch; reply once it is durable per the fsync mode. The writer drops its handle
    /// before replying, so the caller frees the batch.
    Write(Arc<Prepared>, SyncSender<Result<WriteOutcome>>),
    /// Drop every window retention has passed at the given wall-clock time (per class, see
    /// `lifecycle/class.rs`); reply with the dropped window starts. The head is flushed first
    /// only when some window actually goes.
    DropExpired(i64, SyncSender<Result<Vec<i64>>>),
    /// Make a fully written chunks keyspace the window's visible generation (see `lifecycle/seal.rs`).
    FinishSeal(FinishSeal, SyncSender<Result<SealSwap>>),
    /// Make a downsampled chunks keyspace the window's visible generation, unless a write
    /// reached the window meanwhile (see `lifecycle/downsample.rs`); reply whether it did.
    FinishDownsample(FinishDownsample, SyncSender<Result<bool>>),
    /// Drop the overlay of a window whose late samples were merged into its chunks (see
    /// `lifecycle/reseal.rs`), unless a commit reached it meanwhile.
    DropOverlay(DropOverlay, SyncSender<Result<SealSwap>>),
    /// Delete samples of some series in a time range (see `lifecycle/delete.rs`).
    Delete(DeleteRange, SyncSender<Result<DeleteOutcome>>),
    /// Pin a consistent instant for a snapshot (see `lifecycle/snapshot.rs`), after flushing the head.
    Pin(SyncSender<Result<Pinned>>),
    /// Flush the head into the window keyspaces; reply once committed.
    Flush(SyncSender<Result<()>>),
    /// Flush the head, then send the series of later writes to the classes of these retention
    /// rules (see `lifecycle/class.rs`); reply once in force.
    SetRetentionRules(Vec<RetentionRule>, SyncSender<Result<()>>),
}

/// The last step of sealing a window, run on the writer thread so that no commit is in flight.
pub struct FinishSeal {
    /// The window.
    pub key: WindowKey,
    /// Generation of the new chunks keyspace.
    pub generation: u32,
    /// The new chunks keyspace, completely written.
    pub chunks: fjall::Keyspace,
    /// The window's write counter when sealing started.
    pub writes_at_start: u64,
    /// Samples in the new chunks.
    pub samples: u64,
}

/// The last step of a re-seal: the overlay's samples are in the visible chunks.
pub struct DropOverlay {
    /// The window.
    pub key: WindowKey,
    /// The window's write counter when the re-seal started (before it read the overlay).
    pub writes_at_start: u64,
}

/// What finishing a seal did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SealSwap {
    /// The chunks are visible and the hot keyspace was dropped.
    Sealed,
    /// The chunks are visible; late writes arrived meanwhile, so the hot keyspace stays as the
    /// overlay for the next seal to merge.
    SealedWithOverlay,
    /// Retention dropped the window meanwhile; the new chunks were deleted.
    WindowGone,
}

/// Where the write-ahead log stands: rows `first..next` hold exactly what the head holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WalPosition {
    /// Oldest row not yet flushed.
    pub first: u64,
    /// Sequence number of the next row.
    pub next: u64,
}

/// State owned by the writer thread.
pub struct Writer {
    shared: Arc<Shared>,
    cache: SeriesCache,
    next_id: SeriesId,
    presence: Presence,
    durability: Option<fjall::PersistMode>,
    wal: WalPosition,
    limits: HeadLimits,
    /// When the head last went from empty to holding samples.
    head_since: Option<Instant>,
    /// Per series, an upper bound of the series' timestamps stored in the window last flushed
    /// into (always a timestamp of that window, so the window is `start_of` it): a run
    /// starting after it cannot overlap a stored run (no read needed). Deletions and seals only
    /// lower the true maximum, so the bound stays valid. 12 bytes a series (see
    /// `flushed_max.rs`). One map per bucket, indexed by bucket, so that the flush writes the
    /// buckets' runs in parallel.
    flushed_max: Vec<flushed_max::FlushedMax>,
    /// The first id this writer allocated: a series with an id at or above it that has no
    /// `flushed_max` entry has never had a run written (by this life or an earlier one), so its
    /// first flush needs no read of the keyspace.
    fresh_from: SeriesId,
    /// The head flush under way, if any (see `flush.rs`).
    cycle: Option<flush::FlushCycle>,
    /// The step of `cycle` running in the background on `flush_pool`, if any.
    in_flight: Option<flush::InFlight>,
    /// Where background flush steps run (see `flush.rs`).
    flush_pool: Option<Arc<rayon::ThreadPool>>,
    /// The id-cache answers for a batch's series (reused across groups).
    cached_buf: Vec<Option<(SeriesId, u16)>>,
    /// Per series of a batch, whether it is known to be indexed in the batch's first window.
    indexed_buf: Vec<bool>,
    log_buf: Vec<u8>,
    /// Bytes of series rows written since the series keyspaces' memtables were last rotated.
    series_rows_bytes: usize,
    /// Bytes fjall's memtables may hold over all keyspaces (`--write-buffer`, see
    /// `memtables.rs`).
    write_buffer_budget: u64,
    /// The md5s `series_by_labels` may hold: a new series skips its point read.
    label_sets: KnownLabelSets,
    /// Whether `Shared::label_set_filter_bytes` includes the scanned filter.
    label_sets_published: bool,
    /// Per series whose newest sample (written by this life of the writer) has a start
    /// timestamp: it and the window of its last change point (see `format/start_ts.rs`). Empty, and
    /// never consulted, while no start timestamp is written.
    starts: IdMap<start_ts::Current>,
    /// When the writer last had something to do, for flushing on idle (see `idle.rs`).
    idle: idle::Idle,
    /// The data directory (its journal is measured on idle).
    data_dir: std::path::PathBuf,
    /// Threads (one per core) the writer hands per-bucket work to and waits for: appending a
    /// group to the head, flushing it. Its own, not the read pool: a long query keeping the
    /// read pool's threads busy must not hold writes back. `None` if it could not be started
    /// (that work then runs on the writer thread).
    pool: Option<rayon::ThreadPool>,
}

/// Runs `work` on `pool` (its parallel iterators then use the pool's threads), or here.
fn in_pool<R: Send>(pool: Option<&rayon::ThreadPool>, work: impl FnOnce() -> R + Send) -> R {
    match pool {
        Some(pool) => pool.install(work),
        None => work(),
    }
}

/// Entries (grouped by bucket) a group must hold before the head append is split by bucket
/// over the write pool: below it, waking the pool costs more than it saves.
const PARALLEL_APPEND_ENTRIES: usize = 1_024;

/// The writer's pool (see [`Writer::pool`]), or `None` (logged) when its threads cannot start.
fn write_pool() -> Option<rayon::ThreadPool> {
    let built = rayon::ThreadPoolBuilder::new()
        .num_threads(crate::cores::available())
        .thread_name(|i| format!("saltdb-write-{i}"))
        .build();
    match built {
        Ok(pool) => Some(pool),
        Err(e) => {
            tracing::warn!(error = %e, "cannot start the write pool; the writer thread does its work alone");
            None
        }
    }
}

/// What a group adds on top of committed state; applied to the caches only after commit.
#[derive(Default)]
struct Pending {
    ids: HashMap<[u8; 16], (SeriesId, u16)>,
    created: usize,
    /// Bytes of the series rows this group writes (see [`SERIES_MEMTABLE_BYTES`]).
    series_rows_bytes: usize,
    marks: Vec<(WindowKey, SeriesId)>,
    /// Samples per bucket, indexed by bucket.
    per_bucket: Vec<u64>,
    /// The window last written to and its hot keyspace: consecutive series of a group nearly
    /// always share it, so the window map is not consulted per series. Valid for one group or
    /// one flush (only the writer thread replaces hot keyspaces, and not in between).
    hot: Option<(WindowKey, fjall::Keyspace)>,
    /// Windows whose hot keyspace the group writes index rows to.
    windows: HashSet<WindowKey>,
    /// `(bucket, id)` of every series of the group, in order.
    resolved: Vec<(u16, SeriesId)>,
    /// md5s whose primary `series_by_labels` row the group writes.
    primaries: HashSet<[u8; 16]>,
    /// Window postings to write with the batch, per window (see [`Pending::write_postings`]).
    postings: HashMap<WindowKey, (fjall::Keyspace, postings::PostingsBuilder)>,
    /// The exemplars the group stores, applied to the store once committed.
    exemplars: exemplars::Admitted,
    /// Start-timestamp state of the series whose change points the group writes, applied to
    /// [`Writer::starts`] once committed (`None`: the newest sample has none).
    starts: IdMap<Option<start_ts::Current>>,
}

impl Pending {
    /// Adds the postings blocks gathered so far to `fb`: before every commit of a batch that
    /// holds window-index rows (a series is indexed with its postings or not at all).
    fn write_postings(&mut self, fb: &mut fjall::OwnedWriteBatch) {
        for (ks, builder) in self.postings.values_mut() {
            builder.write(fb, ks);
        }
    }

    /// After each commit of rows gathered here: once any series was indexed in a window, the
    /// read path's index answers are stale (see [`crate::storage::index::index_cache`]).
    fn committed(&self, sh: &Shared) {
        if !self.marks.is_empty() {
            sh.index.changed();
        }
    }
}

/// A series a group creates: its rows are written once the group is resolved.
struct NewSeries<'a> {
    id: SeriesId,
    /// md5 of `canonical` (the `series_by_labels` key).
    hash: [u8; 16],
    /// Whether the md5's primary `series_by_labels` row is taken (a collision row is written).
    primary_taken: bool,
    canonical: &'a [u8],
}

/// Adds the `series` and `series_by_labels` rows of a group's new series to `fb`, each table's
/// in key order: fjall inserts a batch's rows into the memtable's skiplist one after the other,
/// and a search that follows the previous one's path finds it in the CPU caches (md5 keys in
/// arrival order miss them at every level).
fn write_new_series(fb: &mut fjall::OwnedWriteBatch, sh: &Shared, created: &mut [NewSeries<'_>]) {
    // Ids are allocated in order: the `series` rows are already sorted.
    for s in created.iter() {
        fb.insert(&sh.series, s.id.to_be_bytes(), s.canonical);
    }
    // A primary row's key is the md5, a collision row's the md5 and the id: primaries first.
    created.sort_unstable_by_key(|s| (s.hash, s.primary_taken, s.id));
    for s in created.iter() {
        series::insert_by_labels(fb, &sh.series_by_labels, &s.hash, s.id, s.primary_taken);
    }
}

impl Writer {
    /// A writer continuing from the persistent id counter and the replayed log.
    pub fn new(
        shared: Arc<Shared>,
        next_id: SeriesId,
        cache_capacity: usize,
        durability: Option<fjall::PersistMode>,
        wal: WalPosition,
        limits: HeadLimits,
        write_buffer_budget: u64,
    ) -> Self {
        let head_since = (!shared.head.is_empty()).then(Instant::now);
        Self {
            shared: Arc::clone(&shared),
            cache: SeriesCache::new(cache_capacity),
            next_id,
            presence: Presence::default(),
            durability,
            wal,
            limits,
            head_since,
            flushed_max: (0..shared.head.shard_count()).map(|_| flushed_max::FlushedMax::default()).collect(),
            fresh_from: next_id,
            cycle: None,
            in_flight: None,
            flush_pool: flush::flush_pool(),
            log_buf: Vec::new(),
            cached_buf: Vec::new(),
            indexed_buf: Vec::new(),
            series_rows_bytes: 0,
            write_buffer_budget,
            label_sets_published: false,
            label_sets: KnownLabelSets::start(shared.series_by_labels.clone(), next_id.saturating_sub(1)),
            starts: IdMap::default(),
            idle: idle::Idle::new(None),
            data_dir: std::path::PathBuf::new(),
            pool: write_pool(),
        }
    }

    /// How long to wait for a command: not at all while a head flush cycle is under way (its
    /// next step runs whenever no command waits), briefly while an idle flush waits for fjall's
    /// workers, otherwise a second.
    fn idle_timeout(&self) -> Duration {
        if self.flushing_in_background() {
            Duration::from_millis(1)
        } else if self.flushing() {
            Duration::ZERO
        } else if self.idle.busy() {
            Duration::from_millis(10)
        } else {
            Duration::from_secs(1)
        }
    }

    /// Flushes everything into tables once no command has arrived for `after` (see `idle.rs`);
    /// `None` never. `data_dir` is the database's directory.
    pub fn flush_on_idle(&mut self, after: Option<Duration>, data_dir: std::path::PathBuf) {
        self.idle = idle::Idle::new(after);
        self.data_dir = data_dir;
    }

    /// Restores what the writer knows of series' start timestamps (see [`Writer::starts`]) from
    /// the newest window's rows: a series whose newest sample there had one writes a row of
    /// "none" when its next sample has none. Series whose last start timestamp is older need
    /// nothing (each window answers for its own samples).
    ///
    /// # Errors
    /// Engine errors and corrupt rows.
    pub fn restore_starts(&mut self) -> Result<()> {
        // The newest window of each retention class (a series is in one class).
        let mut newest: HashMap<ClassId, window::Window> = HashMap::new();
        for w in self.shared.windows.all() {
            newest.insert(w.class, w);
        }
        for w in newest.values() {
            // The chunks first: the hot rows are newer.
            for ks in crate::storage::read::select::keyspaces(w) {
                if start_ts::any(ks)? {
                    for (id, start_ms) in start_ts::newest(ks)? {
                        match start_ms {
                            0 => self.starts.remove(&id),
                            _ => self.starts.insert(id, start_ts::Current { start_ms, window: w.start_ms }),
                        };
                    }
                }
            }
        }
        Ok(())
    }

    /// Runs until every sender is dropped, then flushes the head.
    pub fn run(mut self, rx: &Receiver<Command>) {
        let mut queued: Option<Command> = None;
        loop {
            let first = match queued.take() {
                Some(c) => c,
                // While a flush cycle is under way, its next step runs whenever no command waits.
                None => match rx.recv_timeout(self.idle_timeout()) {
                    Ok(c) => c,
                    Err(RecvTimeoutError::Timeout) => {
                        self.flush_if_due();
                        self.bound_memtables();
                        self.flush_if_idle();
                        continue;
                    }
                    Err(RecvTimeoutError::Disconnected) => break,
                },
            };
            self.idle.touch();
            if !matches!(first, Command::Write(..)) {
                // Every command but a write sees the head and the keyspaces with no flush step
                // in the background. A failure poisoned the database and was logged: the
                // command meets that itself.
                let _ = self.settle_flush();
            }
            match first {
                Command::DropExpired(cutoff, reply) => {
                    let _ = reply.send(self.drop_expired(cutoff));
                }
                Command::FinishSeal(finish, reply) => {
                    let _ = reply.send(self.finish_seal(finish));
                }
                Command::FinishDownsample(finish, reply) => {
                    let _ = reply.send(self.finish_downsample(finish));
                }
                Command::DropOverlay(drop, reply) => {
                    let _ = reply.send(self.drop_overlay(&drop));
                }
                Command::Delete(range, reply) => {
                    let _ = reply.send(self.flush_head().and_then(|()| self.delete(&range)));
                }
                Command::Pin(reply) => {
                    let pinned = self
                        .flush_head()
                        .map(|()| Pinned { snapshot: self.shared.db.snapshot(), windows: self.shared.windows.all() });
                    let _ = reply.send(pinned);
                }
                Command::Flush(reply) => {
                    let _ = reply.send(self.flush_head());
                }
                Command::SetRetentionRules(rules, reply) => {
                    let _ = reply.send(self.flush_head().map(|()| {
                        let table = self.shared.windows.add_classes(&rules);
                        self.shared.set_classes(SeriesClasses::new(&rules, &table));
                    }));
                }
                Command::Write(batch, reply) => {
                    let mut group = vec![(batch, reply)];
                    let points = |b: &PackedBatch| b.sample_count() + b.histogram_count() + b.exemplar_count();
                    let mut samples = group.iter().map(|(b, _)| points(&b.batch)).sum::<usize>();
                    while samples < GROUP_SAMPLE_BUDGET {
                        match rx.try_recv() {
                            Ok(Command::Write(b, r)) => {
                                samples += points(&b.batch);
                                group.push((b, r));
                            }
                            Ok(other) => {
                                queued = Some(other);
                                break;
                            }
                            Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
                        }
                    }
                    self.commit_group(group);
                    self.flush_if_due();
                    self.bound_memtables();
                }
            }
        }
        if let Err(e) = self.flush_head() {
            tracing::error!(error = %e, "flushing the head at shutdown failed; the log will be replayed");
        }
    }

    fn commit_group(&mut self, mut group: Vec<(Arc<Prepared>, SyncSender<Result<WriteOutcome>>)>) {
        if let Some(reason) = self.shared.poisoned() {
            for (_, reply) in group {
                let _ = reply.send(Err(StorageError::Poisoned(reason.clone())));
            }
            return;
        }
        // Writes into downsampled windows are refused here, where no downsampling can finish
        // between the check and the commit (both run on this thread).
        let horizon = self.shared.windows.downsampled_end();
        if group.iter().any(|(b, _)| b.oldest_ms < horizon) {
            let sh = Arc::clone(&self.shared);
            group.retain(|(batch, reply)| match into_downsampled(&sh, batch) {
                Some(refused) => {
                    let _ = reply.send(Err(refused));
                    false
                }
                None => true,
            });
            if group.is_empty() {
                return;
            }
        }
        let first_id = self.next_id;
        let result = self.build_and_commit(&group);
        match result {
            Ok(outcomes) => {
                for ((batch, reply), outcome) in group.into_iter().zip(outcomes) {
                    drop(batch);
                    let _ = reply.send(Ok(outcome));
                }
            }
            Err(e) => {
                self.next_id = first_id;
                if matches!(e, StorageError::Engine(_)) {
                    self.shared.poison(&e.to_string());
                    tracing::error!(error = %e, "write failed; refusing further writes");
                }
                for (batch, reply) in group {
                    drop(batch);
                    let _ = reply.send(Err(e.clone()));
                }
            }
        }
    }

    fn build_and_commit(
        &mut self,
        group: &[(Arc<Prepared>, SyncSender<Result<WriteOutcome>>)],
    ) -> Result<Vec<WriteOutcome>> {
        let sh = Arc::clone(&self.shared);
        let mut fb = sh.db.batch().durability(self.durability);
        let mut pending = Pending::default();
        let committed = self
            .fill(&mut fb, &mut pending, group.iter().map(|(b, _)| &**b))
            .and_then(|outcomes| fb.commit().map(|()| outcomes).map_err(StorageError::from));
        let outcomes = match committed {
            Ok(outcomes) => outcomes,
            Err(e) => {
                // Presence sets were updated optimistically; forget the touched windows so
                // they are reloaded from disk.
                for (key, _) in &pending.marks {
                    self.presence.forget(*key);
                }
                return Err(e);
            }
        };
        self.wal.next += 1;
        pending.committed(&sh);
        sh.exemplars.apply(std::mem::take(&mut pending.exemplars));
        for (id, state) in pending.starts.drain() {
            match state {
                Some(c) => self.starts.insert(id, c),
                None => self.starts.remove(&id),
            };
        }
        // Only now, with the rows applied, may a seal see the windows' counters move.
        sh.windows.committed(pending.windows.iter().copied());
        let series = group.iter().flat_map(|(b, _)| b.batch.series());
        let mut entries: Vec<(u16, SeriesId, &[Sample])> =
            pending.resolved.iter().zip(series).map(|(&(bucket, id), s)| (bucket, id, s.samples)).collect();
        // Grouped by bucket, so each head shard is locked once per group. The sort is stable:
        // writes of one series keep their order (the later one wins).
        entries.sort_by_key(|&(bucket, _, _)| bucket);
        if entries.len() >= PARALLEL_APPEND_ENTRIES && self.pool.is_some() {
            // Buckets are the head's shards: each worker appends to its own.
            use rayon::prelude::*;
            let groups: Vec<&[(u16, SeriesId, &[Sample])]> = entries.chunk_by(|a, b| a.0 == b.0).collect();
            in_pool(self.pool.as_ref(), || groups.par_iter().for_each(|group| sh.head.append(group.iter().copied())));
        } else {
            sh.head.append(entries);
        }
        let series = group.iter().flat_map(|(b, _)| b.batch.series());
        sh.head.append_histograms(
            pending
                .resolved
                .iter()
                .zip(series)
                .filter(|(_, s)| !s.histograms.is_empty())
                .map(|(&(bucket, id), s)| (bucket, id, s.histograms)),
        );
        // Visible now: answers kept about the sealed past are stale if it reached below it.
        sh.immutable.written_below(group.iter().map(|(b, _)| b.oldest_ms).min().unwrap_or(i64::MAX));
        if self.head_since.is_none() && !sh.head.is_empty() {
            self.head_since = Some(Instant::now());
        }
        sh.set_next_id_committed(self.next_id);
        for (hash, id) in pending.ids {
            self.cache.insert(hash, id);
        }
        sh.record_written(&pending.per_bucket, pending.created);
        if pending.created > 0 || !self.label_sets_published {
            // Every md5 added is committed now (see `KnownLabelSets::between_commits`).
            self.label_sets.between_commits();
            self.label_sets_published = self.label_sets.ready();
            sh.label_set_filter_bytes.store(self.label_sets.bytes() as u64, std::sync::atomic::Ordering::Relaxed);
        }
        self.series_rows_bytes += pending.series_rows_bytes;
        if self.series_rows_bytes >= SERIES_MEMTABLE_BYTES {
            self.series_rows_bytes = 0;
            // Sealed memtables are flushed by fjall's workers; a failure here only leaves a
            // memtable bigger, and fjall reports its flush errors itself.
            for ks in [&sh.series, &sh.series_by_labels] {
                if let Err(e) = ks.rotate_memtable() {
                    tracing::warn!(error = %e, keyspace = %ks.name(), "rotating a series memtable failed");
                }
            }
        }
        if let Some((start, series)) = self.presence.newest() {
            sh.set_newest_window_series(start, series as u64);
        }
        Ok(outcomes)
    }

    /// Adds the group's log row, new series and window-index rows to `fb`.
    fn fill<'a>(
        &mut self,
        fb: &mut fjall::OwnedWriteBatch,
        pending: &mut Pending,
        batches: impl Iterator<Item = &'a Prepared>,
    ) -> Result<Vec<WriteOutcome>> {
        let sh = Arc::clone(&self.shared);
        let classes = sh.classes();
        let mut outcomes = Vec::new();
        let mut log = std::mem::take(&mut self.log_buf);
        wal::begin(&mut log);
        let mut histogram_log = Vec::new();
        let mut with_exemplars: Vec<(usize, SeriesId, &'a [Exemplar])> = Vec::new();
        let mut cached = std::mem::take(&mut self.cached_buf);
        let mut indexed = std::mem::take(&mut self.indexed_buf);
        let mut created: Vec<NewSeries<'a>> = Vec::new();
        for (index, Prepared { batch, keys, .. }) in batches.enumerate() {
            let created_before = pending.created;
            // The id cache is looked up for the whole batch first, in a loop of nothing else:
            // each lookup misses the CPU caches, and only back to back do the misses overlap.
            cached.clear();
            cached.extend(keys.iter().map(|k| self.cache.get(&k.identity)));
            // Likewise whether each known series is already indexed in the window of the
            // batch's first sample (nearly always every series' only window). A set only grows
            // while a group is built, so a `true` here stays true.
            let first_window = batch.samples().first().map(|s| sh.windows.start_of(s.timestamp_ms));
            // With retention rules, series of one batch may be in several classes: the cached
            // presence answer is of the default class's window only.
            let first_key = first_window.map(WindowKey::default_class);
            indexed.clear();
            match first_key.and_then(|k| self.presence.loaded(k)) {
                Some(set) => indexed.extend(cached.iter().map(|hit| hit.is_some_and(|(id, _)| set.contains(id)))),
                None => indexed.resize(cached.len(), false),
            }
            for (((s, key), &hit), &is_indexed) in batch.series().zip(keys).zip(cached.iter()).zip(indexed.iter()) {
                let (id, bucket) = match hit {
                    Some(found) => found,
                    None => self.resolve(pending, &mut created, s.labels, key)?,
                };
                pending.resolved.push((bucket, id));
                let class = classes.of(id, || {
                    Labels::decode(s.labels).map_err(|_| StorageError::Corrupt { what: "label set of a write" })
                })?;
                if !s.exemplars.is_empty() {
                    with_exemplars.push((index, id, s.exemplars));
                }
                if !s.samples.is_empty() {
                    wal::push(&mut log, id, s.samples);
                }
                let mut window: Option<i64> = None;
                for sample in s.samples {
                    let start = sh.windows.start_of(sample.timestamp_ms);
                    if window == Some(start) {
                        continue;
                    }
                    window = Some(start);
                    if !(is_indexed && class == DEFAULT_CLASS && Some(start) == first_window) {
                        self.mark_present(pending, WindowKey { start_ms: start, class }, id, Some(s.labels))?;
                    }
                }
                if !s.histograms.is_empty() {
                    let ascending = head::ascending_last_wins(s.histograms);
                    wal::push_histograms(&mut histogram_log, id, &ascending)
                        .map_err(|_| StorageError::Corrupt { what: "histogram samples to log" })?;
                    let mut window: Option<i64> = None;
                    for h in &ascending {
                        let start = sh.windows.start_of(h.timestamp_ms);
                        if window != Some(start) {
                            window = Some(start);
                            self.mark_present(pending, WindowKey { start_ms: start, class }, id, Some(s.labels))?;
                        }
                    }
                }
                // A series with no start timestamp, now or before, costs nothing more.
                let had = (!self.starts.is_empty() && self.starts.contains_key(&id))
                    || (!pending.starts.is_empty() && pending.starts.get(&id).is_some_and(Option::is_some));
                if !s.starts.is_empty() || had {
                    self.write_starts(fb, pending, (bucket, id, class), &s)?;
                }
                let b = usize::from(bucket);
                if pending.per_bucket.len() <= b {
                    pending.per_bucket.resize(b + 1, 0);
                }
                if let Some(n) = pending.per_bucket.get_mut(b) {
                    *n += (s.samples.len() + s.histograms.len()) as u64;
                }
            }
            outcomes.push(WriteOutcome {
                samples: batch.sample_count() + batch.histogram_count(),
                series_created: pending.created - created_before,
                exemplars: 0,
            });
        }
        self.cached_buf = cached;
        self.indexed_buf = indexed;
        wal::finish(&mut log, &histogram_log);
        if !with_exemplars.is_empty() {
            let admitted = sh.exemplars.admit(with_exemplars);
            for seq in &admitted.evicted {
                fb.remove(&sh.exemplar_rows, exemplars::key(*seq));
            }
            for (e, &tag) in admitted.added.iter().zip(&admitted.tags) {
                fb.insert(&sh.exemplar_rows, exemplars::key(e.seq), exemplars::encode(e.series, &e.exemplar));
                if let Some(o) = outcomes.get_mut(tag) {
                    o.exemplars += 1;
                }
            }
            pending.exemplars = admitted;
        }
        write_new_series(fb, &sh, &mut created);
        pending.write_postings(fb);
        // Copied once, into the batch's own value (a clone first would copy it twice).
        fb.insert(&sh.wal, wal::key(self.wal.next), log.as_slice());
        self.log_buf = log;
        if self.next_id != sh.next_id_committed() {
            fb.insert(&sh.meta, NEXT_SERIES_ID, self.next_id.to_be_bytes());
        }
        Ok(outcomes)
    }

    /// Adds to `fb` the start-timestamp change points of series `id` that `s` brings (see
    /// `format/start_ts.rs`), into the hot keyspaces of their windows, which count as written to.
    fn write_starts(
        &mut self,
        fb: &mut fjall::OwnedWriteBatch,
        pending: &mut Pending,
        (bucket, id, class): (u16, SeriesId, ClassId),
        s: &PackedSeries<'_>,
    ) -> Result<()> {
        let sh = Arc::clone(&self.shared);
        let mut times: Vec<i64> =
            s.samples.iter().map(|x| x.timestamp_ms).chain(s.histograms.iter().map(|h| h.timestamp_ms)).collect();
        times.sort_unstable();
        times.dedup();
        let current = match pending.starts.get(&id) {
            Some(state) => *state,
            None => self.starts.get(&id).copied(),
        };
        let window_of = |t: i64| sh.windows.start_of(t);
        let (rows, state) = start_ts::changes(&times, &start_ts::sorted(s.starts), current, window_of);
        pending.starts.insert(id, state);
        if rows.is_empty() {
            return Ok(());
        }
        // Before the rows are committed (see `Shared::starts_stored`).
        sh.mark_starts_stored();
        for group in rows.chunk_by(|a, b| window_of(a.timestamp_ms) == window_of(b.timestamp_ms)) {
            let Some(first) = group.first() else { continue };
            let key = WindowKey { start_ms: window_of(first.timestamp_ms), class };
            let ks = self.hot(pending, key)?;
            start_ts::write(fb, &ks, bucket, id, group);
            pending.windows.insert(key);
        }
        Ok(())
    }

    /// The hot keyspace of window `key` (created if needed), left in `pending.hot`.
    fn hot(&self, pending: &mut Pending, key: WindowKey) -> Result<fjall::Keyspace> {
        match &pending.hot {
            Some((k, ks)) if *k == key => Ok(ks.clone()),
            _ => {
                let sh = &self.shared;
                let ks = sh.windows.points_for_write(&sh.db, key, || sh.allocate_generation())?;
                Ok(pending.hot.insert((key, ks)).1.clone())
            }
        }
    }

    /// Adds series `id` to the window postings of window `key` in `pending` (written with the
    /// batch by [`Pending::write_postings`]) unless it is known to be indexed there; creates the
    /// window's hot keyspace if needed and leaves it in `pending.hot`. `canonical` is the
    /// series' label set when the caller has it (otherwise it is read from the `series` table).
    fn mark_present(
        &mut self,
        pending: &mut Pending,
        key: WindowKey,
        id: SeriesId,
        canonical: Option<&[u8]>,
    ) -> Result<()> {
        let ks = match &pending.hot {
            Some((k, ks)) if *k == key => ks,
            _ => {
                let sh = &self.shared;
                let ks = sh.windows.points_for_write(&sh.db, key, || sh.allocate_generation())?;
                &pending.hot.insert((key, ks)).1
            }
        };
        let uncommitted = pending.marks.iter().filter(|&&(k, _)| k == key).map(|&(_, id)| id);
        if self.presence.set(key, ks, uncommitted, self.next_id)?.insert(id) {
            let (_, builder) = pending.postings.entry(key).or_insert_with(|| (ks.clone(), Default::default()));
            match canonical {
                Some(canonical) => builder.add(id, canonical),
                None => builder.add(id, &series::canonical_of(&self.shared.series, id)?),
            }
            pending.marks.push((key, id));
            pending.windows.insert(key);
        }
        Ok(())
    }

    /// Finds or allocates the id (and bucket) of a label set, given as its canonical encoding;
    /// a new series joins `created` (its rows are written by [`write_new_series`]).
    fn resolve<'a>(
        &mut self,
        pending: &mut Pending,
        created: &mut Vec<NewSeries<'a>>,
        canonical: &'a [u8],
        key: &SeriesKey,
    ) -> Result<(SeriesId, u16)> {
        let identity = key.identity;
        if let Some(found) = self.cache.get(&identity).or_else(|| pending.ids.get(&identity).copied()) {
            return Ok(found);
        }
        let sh = &self.shared;
        let hash = keys::labels_hash(canonical);
        // A label set the filter has certainly never seen is new: no read.
        let looked = if self.label_sets.certainly_absent(&hash) {
            Lookup::Absent { primary_taken: false }
        } else {
            series::lookup(&sh.series, &sh.series_by_labels, &hash, canonical)?
        };
        let id = match looked {
            Lookup::Found(id) => id,
            Lookup::Absent { primary_taken } => {
                // The batch's contract makes this a valid encoding; checked anyway, as bytes
                // that do not decode must never become a series.
                let pairs: usize = keys::canonical_pairs(canonical).map(<[u8]>::len).sum();
                if pairs != canonical.len() || std::str::from_utf8(canonical).is_err() {
                    return Err(StorageError::Corrupt { what: "batch label set" });
                }
                let id = self.next_id;
                self.next_id += 1;
                self.label_sets.add(&hash);
                // Two new label sets of one md5 in one group: the second takes a collision row.
                let primary_taken = primary_taken || !pending.primaries.insert(hash);
                created.push(NewSeries { id, hash, primary_taken, canonical });
                pending.created += 1;
                // Both rows: the id and the label set, the hash and the id with the label set.
                pending.series_rows_bytes += 2 * (canonical.len() + MEMTABLE_ROW_BYTES) + 8 + 24;
                id
            }
        };
        let found = (id, sh.bucketing.bucket(id));
        pending.ids.insert(identity, found);
        Ok(found)
    }

    fn delete(&mut self, range: &DeleteRange) -> Result<DeleteOutcome> {
        let sh = Arc::clone(&self.shared);
        if let Some(reason) = sh.poisoned() {
            return Err(StorageError::Poisoned(reason));
        }
        let mut total = DeleteOutcome::default();
        for w in sh.windows.overlapping(range.start_ms, range.end_ms) {
            let done = delete::delete_in_window(&sh, &w, range, self.durability);
            // Whatever happened, the presence set may be stale now: reload it on the next write.
            self.presence.forget(w.key());
            sh.outdate_measured_series(w.start_ms);
            sh.index.changed();
            sh.immutable.changed();
            total += done?;
        }
        Ok(total)
    }

    /// Drops the windows retention has passed at wall-clock `now_ms` (per class; and the spare
    /// keyspaces of such windows).
    /// The head is flushed first only when a window is dropped: its samples of that window then
    /// leave with it instead of recreating the window at the next flush. With nothing expired
    /// the head is left alone, so the retention pass of every maintenance tick never shortens
    /// `--head-flush-interval`.
    fn drop_expired(&mut self, now_ms: i64) -> Result<Vec<i64>> {
        let sh = Arc::clone(&self.shared);
        if sh.windows.any_expired(now_ms) {
            self.flush_head()?;
        }
        for spare in sh.windows.take_expired_spares(now_ms) {
            sh.db.delete_keyspace(spare)?;
        }
        let expired = sh.windows.take_expired(now_ms);
        if expired.is_empty() {
            return Ok(Vec::new());
        }
        for w in &expired {
            self.presence.forget(w.key());
        }
        // Series listed only in the expired windows lose their rows once those are gone.
        let orphans = churn::orphans(&expired, &sh.windows.all(), |id| self.presence.contains_any(id))?;
        if !orphans.is_empty() {
            churn::record_pending(&sh, &orphans)?;
        }
        let mut dropped = Vec::with_capacity(expired.len());
        for w in expired {
            tracing::debug!(window = w.start_ms, class = w.class, "dropping window past retention");
            let key = w.key();
            for ks in w.points.into_iter().chain(w.chunks.map(|(_, ks)| ks)) {
                sh.db.delete_keyspace(ks)?;
            }
            let mut batch = sh.db.batch().durability(self.durability);
            batch.remove(&sh.meta, sh.windows.sealed_key(key));
            batch.remove(&sh.meta, sh.windows.sealed_samples_key(key));
            batch.remove(&sh.meta, sh.windows.downsampled_key(key));
            batch.commit()?;
            dropped.push(key.start_ms);
        }
        if !orphans.is_empty() {
            for canonical in churn::remove(&sh, &orphans, self.durability)? {
                self.cache.remove(&series::identity(&canonical));
            }
            for id in &orphans {
                if let Some(max) = self.flushed_max.get_mut(usize::from(sh.bucketing.bucket(*id))) {
                    max.remove(*id);
                }
                self.starts.remove(id);
            }
            tracing::debug!(series = orphans.len(), "removed series left without data");
        }
        // Answers about the dropped keyspaces are never asked again (names are not reused);
        // this is for the series rows that went with them.
        sh.index.changed();
        sh.immutable.changed();
        Ok(dropped)
    }

    /// Marks a downsampled generation visible (with its kept intervals, fsynced), swaps it in
    /// and deletes the one it replaces; or, when the window moved since the pass began (a
    /// write, late samples in the head or an overlay, retention), deletes the new generation
    /// and leaves the window as it was. Writer thread only, so no commit comes between the
    /// check and the swap.
    fn finish_downsample(&mut self, f: FinishDownsample) -> Result<bool> {
        let sh = Arc::clone(&self.shared);
        let start_ms = f.key.start_ms;
        let end = start_ms.saturating_add(sh.windows.window_ms());
        let unchanged = sh.windows.get(f.key).is_some_and(|w| w.points.is_none() && w.chunks.is_some())
            && sh.windows.writes(f.key) == f.writes_at_start
            && !sh.head.any_in(start_ms, end);
        if !unchanged {
            sh.db.delete_keyspace(f.chunks)?;
            return Ok(false);
        }
        f.chunks.rotate_memtable_and_wait()?;
        let mut mark = sh.db.batch().durability(Some(fjall::PersistMode::SyncAll));
        mark.insert(&sh.meta, sh.windows.sealed_key(f.key), f.generation.to_be_bytes());
        mark.insert(&sh.meta, sh.windows.sealed_samples_key(f.key), f.samples.to_be_bytes());
        mark.insert(&sh.meta, sh.windows.downsampled_key(f.key), window::encode_downsampled(&f.kept_ms));
        mark.commit()?;
        sh.meta.rotate_memtable_and_wait()?;
        let old = sh.windows.install_downsampled(f.key, (f.generation, f.chunks), &f.kept_ms, f.writes_at_start);
        // Raw reads of the window now find less, and tier reads other rows.
        sh.index.changed();
        sh.immutable.changed();
        if let Some(old) = old {
            sh.db.delete_keyspace(old)?;
        }
        Ok(true)
    }

    /// Deletes the overlay of a re-sealed window unless a commit reached it since the re-seal
    /// read its write counter (then it stays, for the next seal to merge).
    fn drop_overlay(&mut self, d: &DropOverlay) -> Result<SealSwap> {
        let sh = Arc::clone(&self.shared);
        match sh.windows.take_overlay(d.key, d.writes_at_start) {
            None => Ok(SealSwap::WindowGone),
            Some(None) => Ok(SealSwap::SealedWithOverlay),
            Some(Some(points)) => {
                self.presence.forget(d.key);
                sh.db.delete_keyspace(points)?;
                sh.index.changed();
                // A re-seal reads as before; bumped anyway, as a re-seal follows late writes.
                sh.immutable.changed();
                Ok(SealSwap::Sealed)
            }
        }
    }

    /// Marks the new generation visible in the manifest (fsynced), swaps it in, and deletes
    /// what it replaces. A crash before the mark leaves an unmarked chunks keyspace that the
    /// next open deletes; a crash after it leaves at worst an overlay duplicating the chunks,
    /// which readers merge and the next seal folds in.
    fn finish_seal(&mut self, f: FinishSeal) -> Result<SealSwap> {
        let sh = Arc::clone(&self.shared);
        // Chunks and mark go to tables before anything is deleted: their durability must not
        // rest on replaying a journal across keyspace deletions.
        f.chunks.rotate_memtable_and_wait()?;
        let mut mark = sh.db.batch().durability(Some(fjall::PersistMode::SyncAll));
        mark.insert(&sh.meta, sh.windows.sealed_key(f.key), f.generation.to_be_bytes());
        mark.insert(&sh.meta, sh.windows.sealed_samples_key(f.key), f.samples.to_be_bytes());
        mark.commit()?;
        sh.meta.rotate_memtable_and_wait()?;
        let installed = sh.windows.install_chunks(f.key, (f.generation, f.chunks.clone()), f.writes_at_start);
        // The window's keyspaces changed: a new one with its index, and one going.
        sh.index.changed();
        sh.immutable.advance(&sh.windows);
        match installed {
            None => {
                sh.db.delete_keyspace(f.chunks)?;
                let mut unmark = sh.db.batch().durability(self.durability);
                unmark.remove(&sh.meta, sh.windows.sealed_key(f.key));
                unmark.commit()?;
                Ok(SealSwap::WindowGone)
            }
            Some((old, overlay)) => {
                if let Some(old) = old {
                    sh.db.delete_keyspace(old)?;
                    // A re-seal by rewrite: reads as before, bumped as a re-seal (see `drop_overlay`).
                    sh.immutable.changed();
                }
                match overlay {
                    Some(points) => {
                        self.presence.forget(f.key);
                        sh.db.delete_keyspace(points)?;
                        Ok(SealSwap::Sealed)
                    }
                    None => Ok(SealSwap::SealedWithOverlay),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_is_full_by_samples_by_samples_per_series_or_by_bytes() {
        let limits = HeadLimits { max_samples: 1_000, max_bytes: 10_000, max_age: Duration::from_secs(60) };
        // Few series: the sample count decides.
        assert!(!limits.full(999, 10, 0));
        assert!(limits.full(1_000, 10, 0));
        // Many series: RUN_SAMPLES a series.
        assert!(!limits.full(1_000, 300, 0));
        assert!(!limits.full(300 * RUN_SAMPLES - 1, 300, 0));
        assert!(limits.full(300 * RUN_SAMPLES, 300, 0));
        // The memory bound, whatever the counts.
        assert!(limits.full(1, 1, 10_000));
        assert!(limits.full(0, usize::MAX, 10_000));
        assert!(!limits.full(0, usize::MAX, 9_999));
    }
}
