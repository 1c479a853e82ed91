//! A second storage backend: saltdb's data model on ClickHouse servers (the shards), for when
//! one machine is outgrown. saltdb nodes hold no state of their own: any number of them write
//! to and read from the same shards.
//!
//! - **Series ids** come from the label set: the first 8 bytes of the MD5 of its canonical
//!   encoding (big-endian), so nodes need no coordination. Two label sets sharing an id would
//!   merge; at 64 bits the odds are about n^2 / 2^65 (3e-6 for 10 M series).
//! - **Buckets and shards**: a series' bucket is the next 2 bytes of that MD5 modulo `buckets`;
//!   the bucket's shard is `bucket % shards`. Every row of a series lives on one shard, so a
//!   series never crosses shards and a read merges whole series.
//! - **Tables** (per shard, see `schema.rs` and `docs/format.md`): `series` (id -> labels),
//!   `postings` (per day: label pair -> id, the index matchers use) and `samples` (hot samples
//!   keyed `(bucket, series_id, ts)`, partitioned by day; a row holds a float or a native
//!   histogram, so a series has one value per instant whatever its kind). All are
//!   `ReplacingMergeTree`: a retried insert (same rows) leaves no duplicate once merged, and
//!   reads drop the ones not merged yet, so a write is idempotent.
//! - **Writes** (`write.rs`) are grouped (concurrent requests share one insert per table and
//!   shard) and go synchronously to each owning shard, the series and postings first, then the
//!   samples; a write is acknowledged only when every shard it touched has acknowledged. A
//!   shard that fails fails the writes that touched it ([`StorageError::Unavailable`]):
//!   retrying them is safe. A write touching several shards is all or nothing: its rows carry
//!   a write id and become visible together when one commit record is written on one shard
//!   (`commit.rs`), its postings rows included (`postings.rs`).
//! - **Reads** (`read.rs`) fan out to every shard in parallel and merge.
//!
//! - **Sealing** (`seal.rs`): once a day has been closed for `--ooo-grace`, its samples are
//!   encoded per series into saltdb's chunk codecs (the `chunks` table; floats and histograms
//!   in a chunk each) and removed from
//!   `samples`; late samples land in `samples` again and the next seal folds them in. Reads
//!   merge both.
//! - **Exemplars** (`exemplars.rs`) are rows of their own, written and shown with their write.
//! - **Retention** (`retention.rs`) refuses samples past the cutoff and drops whole partitions;
//!   **deletes** (`delete.rs`) are mutations waited for.
//! - **Rule namespaces** of the ruler API (`rule_namespaces.rs`) live on the first shard, so
//!   that every node evaluates the groups set through any of them.

mod client;
mod commit;
mod delete;
mod exemplars;
mod migrate;
mod postings;
mod read;
mod recency;
mod replicas;
mod retention;
pub mod rowbinary;
mod rule_namespaces;
mod schema;
mod seal;
mod write;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use md5::{Digest, Md5};

use client::Shard;
pub use client::ShardError;
pub use commit::CommitHook;
pub use exemplars::exemplars_stored;
pub use migrate::{replicate, Replicated};
pub use postings::Settled;
pub use read::ClickHouseQuerier;
pub use replicas::{ReplicaState, Replication};
pub use rule_namespaces::StoredNamespace;
pub use seal::Sealed;

use crate::storage::{ReadLimits, StorageError};

/// Where the shards are and how the data is laid out on them.
#[derive(Clone, Debug)]
pub struct ClickHouseConfig {
    /// Per shard, the HTTP URLs of its replicas (`http://host:8123`; one when the shard is not
    /// replicated); the order of the shards is their number, and must stay the same for a
    /// database.
    pub shards: Vec<Vec<String>>,
    /// Tables are `Replicated*MergeTree`, copied between a shard's replicas through ZooKeeper
    /// (see `schema.rs`); implied by a shard of several replicas.
    pub replicated: bool,
    /// Replicas that must hold an insert before it is acknowledged (`insert_quorum`; 1: the
    /// replica that took it).
    pub insert_quorum: u32,
    /// The database holding saltdb's tables.
    pub database: String,
    /// Buckets the series are spread over (a bucket lives on shard `bucket % shards`).
    pub buckets: u16,
    /// Timeout of one request to a shard.
    pub timeout: Duration,
    /// How long samples are kept (`None`: forever): older ones are refused, and whole days are
    /// dropped by [`ClickHouse::enforce_retention`].
    pub retention_ms: Option<i64>,
    /// Samples further ahead of the clock than this are refused (`None`: any).
    pub max_future_ms: Option<i64>,
    /// Reads answer from the shards that are up when some are down, with a warning naming
    /// the missing ones, instead of failing (`--clickhouse-partial-reads`).
    pub partial_reads: bool,
    /// A day is sealed into chunks once it ended this long ago (`--ooo-grace`); `None`: never.
    pub seal_after_ms: Option<i64>,
    /// A seal takes only sample rows inserted at least this long before it starts (`None`: twice
    /// the request timeout plus a minute, the abort horizon of `commit.rs`; see `seal.rs`).
    /// Smaller only in tests, whose writes are all answered before they seal.
    pub seal_margin_ms: Option<i64>,
    /// Most `(series, day)` pairs this node remembers having indexed (`--series-cache`, at
    /// [`KNOWN_ENTRY_BYTES`] each). The set is only a cache (ids are derived): when it is full it
    /// starts over, and each series then costs its `series` and `postings` rows once more, which
    /// merges remove. It should cover the series active in a day.
    pub known_series: usize,
    /// Tests only: run between a write group's data inserts and its commit records
    /// (`commit.rs`). `None` in production.
    #[doc(hidden)]
    pub commit_hook: Option<CommitHook>,
}

impl ClickHouseConfig {
    /// `shards` (one server each) with the defaults: database `saltdb`, 64 buckets, 30 s timeout, samples kept
    /// forever, any timestamp accepted, days sealed an hour after they end.
    pub fn new(shards: Vec<String>) -> Self {
        Self::replicated(shards.into_iter().map(|url| vec![url]).collect())
    }

    /// `shards`, each a list of replicas, with the defaults of [`ClickHouseConfig::new`];
    /// replicated when a shard has several.
    pub fn replicated(shards: Vec<Vec<String>>) -> Self {
        Self {
            replicated: shards.iter().any(|s| s.len() > 1),
            insert_quorum: 1,
            shards,
            database: "saltdb".to_owned(),
            buckets: 64,
            timeout: Duration::from_secs(30),
            retention_ms: None,
            max_future_ms: None,
            partial_reads: false,
            seal_after_ms: Some(3_600_000),
            seal_margin_ms: None,
            known_series: 4_000_000,
            commit_hook: None,
        }
    }
}

/// About what one entry of the node's set of indexed `(series, day)` costs in memory (16 bytes
/// and the hash set's overhead at its usual load).
pub const KNOWN_ENTRY_BYTES: usize = 32;

/// A saltdb database on ClickHouse.
#[derive(Clone)]
pub struct ClickHouse {
    inner: Arc<Inner>,
}

struct Inner {
    config: ClickHouseConfig,
    shards: Vec<Shard>,
    /// `(series id, day)` whose `series` and `postings` rows are written and visible (write id
    /// 0, or a committed write: never one that failed, see `write.rs`).
    known: Mutex<HashSet<(u64, u16)>>,
    /// Where this node's write ids come from (`commit.rs`).
    write_ids: commit::WriteIds,
    /// Write ids whose commit this node has decided (`commit.rs`).
    decided: Mutex<commit::Decided>,
    /// The writer thread's queue (see `write.rs`); the thread ends when this is dropped.
    writer: std::sync::mpsc::SyncSender<write::Job>,
}

/// One ClickHouse server's counters since the process started.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplicaFigures {
    /// Its shard's number.
    pub shard: usize,
    /// Its place in the shard's replicas, from 0.
    pub replica: usize,
    /// Its URL.
    pub url: String,
    /// Requests that succeeded.
    pub requests_ok: u64,
    /// Requests that failed (unreachable or refused).
    pub requests_failed: u64,
    /// Time spent in requests.
    pub request_seconds: f64,
    /// Rows inserted per table.
    pub rows_written: [(&'static str, u64); 4],
}

/// Where a series lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Placement {
    pub id: u64,
    pub bucket: u16,
    pub shard: usize,
}

impl ClickHouse {
    /// Connects to every shard and creates or upgrades the schema there (idempotent).
    ///
    /// # Errors
    /// [`StorageError::Unavailable`] when a shard cannot be reached or refuses the schema;
    /// [`StorageError::Manifest`] when a shard holds a schema newer than this build's, or the
    /// configuration is unusable.
    pub fn open(config: ClickHouseConfig) -> Result<Self, StorageError> {
        if config.shards.is_empty() || config.shards.iter().any(Vec::is_empty) {
            return Err(StorageError::Manifest("no ClickHouse shard URL given".to_owned()));
        }
        let replicas = config.shards.iter().map(Vec::len).max().unwrap_or(1);
        if config.insert_quorum as usize > replicas {
            return Err(StorageError::Manifest(format!(
                "an insert quorum of {} needs shards of at least {} replicas; the largest has {replicas}",
                config.insert_quorum, config.insert_quorum
            )));
        }
        if config.buckets == 0 || usize::from(config.buckets) < config.shards.len() {
            return Err(StorageError::Manifest(format!(
                "{} buckets cannot cover {} shards",
                config.buckets,
                config.shards.len()
            )));
        }
        if !config.database.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            return Err(StorageError::Manifest(format!(
                "database name {:?} is not a plain identifier",
                config.database
            )));
        }
        let shards: Vec<Shard> =
            config.shards.iter().map(|urls| Shard::new(urls, config.timeout, config.insert_quorum)).collect();
        for (number, shard) in shards.iter().enumerate() {
            let replication = config.replicated.then_some(number);
            schema::ensure_shard(shard, &config.database, replication)?;
        }
        let (writer, jobs) = std::sync::mpsc::sync_channel(write::QUEUE);
        let inner = Arc::new(Inner {
            config,
            shards,
            known: Mutex::new(HashSet::new()),
            write_ids: commit::WriteIds::new(),
            decided: Mutex::new(commit::Decided::default()),
            writer,
        });
        write::start(&inner, jobs)
            .map_err(|e| StorageError::Unavailable(format!("starting the ClickHouse writer: {e}")))?;
        Ok(Self { inner })
    }

    /// The configuration this store was opened with.
    pub fn config(&self) -> &ClickHouseConfig {
        &self.inner.config
    }

    /// A reader for one request.
    pub fn querier(&self, limits: ReadLimits) -> ClickHouseQuerier {
        ClickHouseQuerier::new(self.clone(), limits)
    }

    /// Where the series with canonical label encoding `canonical` lives.
    pub(crate) fn place(&self, canonical: &[u8]) -> Placement {
        let digest = Md5::digest(canonical);
        let mut id = [0u8; 8];
        id.copy_from_slice(&digest[..8]);
        let bucket = u16::from_be_bytes([digest[8], digest[9]]) % self.inner.config.buckets;
        let shard = usize::from(bucket) % self.inner.shards.len();
        Placement { id: u64::from_be_bytes(id), bucket, shard }
    }

    /// Per ClickHouse server (by shard, then replica): its URL and request counters, for
    /// `/metrics`.
    pub fn replica_figures(&self) -> Vec<ReplicaFigures> {
        use std::sync::atomic::Ordering::Relaxed;
        let mut out = Vec::new();
        for (shard, s) in self.inner.shards.iter().enumerate() {
            for (replica, r) in s.replicas().iter().enumerate() {
                let st = r.stats();
                out.push(ReplicaFigures {
                    shard,
                    replica,
                    url: r.url().to_owned(),
                    requests_ok: st.ok.load(Relaxed),
                    requests_failed: st.failed.load(Relaxed),
                    request_seconds: st.micros.load(Relaxed) as f64 / 1e6,
                    rows_written: [
                        ("series", st.rows[0].load(Relaxed)),
                        ("postings", st.rows[1].load(Relaxed)),
                        ("samples", st.rows[2].load(Relaxed)),
                        ("chunks", st.rows[3].load(Relaxed)),
                    ],
                });
            }
        }
        out
    }

    fn table(&self, name: &str) -> String {
        format!("{}.{name}", self.inner.config.database)
    }
}

impl From<ShardError> for StorageError {
    fn from(e: ShardError) -> Self {
        StorageError::Unavailable(e.to_string())
    }
}

/// The day (a ClickHouse `Date`: days since 1970-01-01) of a timestamp, clamped to what a
/// `Date` holds.
pub(crate) fn day_of(ts_ms: i64) -> u16 {
    u16::try_from(ts_ms.div_euclid(86_400_000).clamp(0, i64::from(u16::MAX))).unwrap_or(u16::MAX)
}
