//! Storage on fjall. Synchronous: nothing here knows about tokio. The HTTP layer reaches it only
//! through `http/blocking.rs`.
//!
//! The groups, each with a `mod.rs` saying what it owns and what it may not touch:
//!
//! | folder        | holds                                                                        |
//! |---------------|------------------------------------------------------------------------------|
//! | [`format`]    | the bytes of every key and row: keys, manifest, runs, chunks, start timestamps, exemplars |
//! | [`index`]     | series ids and their lookup, per-window postings, matchers, index caches     |
//! | [`write`]     | the writer thread: group commit, write-ahead log, head, flushes, presence    |
//! | [`read`]      | the [`Querier`] seam, the selection of series and samples, cardinality       |
//! | [`lifecycle`] | windows, seal and reseal, retention's drops and churn, delete, snapshot, close, migrate |
//!
//! At the root: [`Storage`] (`db.rs`: open, recover, the handle every caller holds), the state the
//! writer thread shares with readers (`shared.rs`), the series id every row carries
//! (`series_id.rs`), errors and bytes on disk (`disk.rs`; per keyspace and key family of a stopped
//! directory, `disk_usage.rs`).
//!
//! Layout of the keys and tables: see [`format::keys`]. Manifest: see [`format::manifest`].

mod db;
mod disk;
mod disk_usage;
mod error;
pub mod format;
mod immutable;
pub mod index;
pub mod lifecycle;
pub mod read;
mod series_id;
mod shared;
mod write;

pub use db::{
    check_time_range, now_ms, EngineStats, FsyncMode, HeadFigures, Storage, StorageConfig, StorageQuerier,
    StorageStats, WindowState, WindowStats, WindowStatus,
};
pub use disk::du_bytes;
pub use disk_usage::{disk_usage, DiskUsage, FamilyBytes, KeyspaceBytes};
pub use error::{Result, StorageError};
pub use format::exemplars::{SeriesExemplars, DEFAULT_MAX_EXEMPLARS};
pub use format::keys::{BucketScheme, Bucketing};
pub use format::start_ts::{start_at, SeriesStarts, StartChange};
pub use index::postings::index_rows_scanned;
pub use lifecycle::class::{check_rules as check_retention_rules, Class, ClassId, RetentionRule, DEFAULT_CLASS};
pub use lifecycle::delete::DeleteOutcome;
pub use lifecycle::downsample::{DownsampleAge, DownsampleOutcome};
pub use lifecycle::seal::SealOutcome;
pub use lifecycle::snapshot::SnapshotOutcome;
pub use read::cardinality::{Cardinality, CardinalityQuery, Stat, WindowValues};
pub use read::querier::{
    points_in, too_sparse, MemQuerier, PointsMap, PointsRead, Querier, ReadLimits, ReadStrategy, SampleBudget,
    SampleSink, SeriesMap, SeriesPoints, SinkFactory, DENSITY_MIN_POINTS,
};
pub use write::{HeadLimits, SealSwap, WriteOutcome, RUN_SAMPLES};
