//! Storage on fjall. Synchronous: nothing here knows about tokio. The HTTP layer reaches it only
//! through `http/blocking.rs`.
//!
//! Layout of the keys and tables: see [`keys`]. Manifest: see [`manifest`].

mod cardinality;
pub mod chunk;
mod churn;
mod close;
mod db;
mod delete;
mod disk;
mod error;
mod exemplars;
pub use exemplars::{SeriesExemplars, DEFAULT_MAX_EXEMPLARS};
mod head;
mod histogram_run;
mod index_cache;
pub mod keys;
mod known_label_sets;
pub mod manifest;
mod matchers;
mod migrate;
mod postings;
pub mod querier;
mod reseal;
mod run;
pub mod seal;
mod select;
pub mod series;
mod shared;
mod snapshot;
mod start_ts;
pub use start_ts::{start_at, SeriesStarts, StartChange};
mod wal;
mod window;
mod write;

pub use cardinality::{Cardinality, CardinalityQuery, Stat};
pub use db::{
    check_time_range, now_ms, EngineStats, FsyncMode, HeadFigures, Storage, StorageConfig, StorageQuerier,
    StorageStats, WindowState, WindowStats, WindowStatus,
};
pub use delete::DeleteOutcome;
pub use disk::du_bytes;
pub use error::{Result, StorageError};
pub use keys::{BucketScheme, Bucketing};
pub use postings::index_rows_scanned;
pub use querier::{MemQuerier, Querier, ReadLimits, ReadStrategy, SampleBudget, SeriesMap};
pub use seal::SealOutcome;
pub use snapshot::SnapshotOutcome;
pub use write::{HeadLimits, SealSwap, WriteOutcome, RUN_SAMPLES};
