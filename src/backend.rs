//! The store a server runs on: the embedded fjall store (the default) or a ClickHouse cluster
//! (`--storage clickhouse`). Both are read through the [`Querier`] seam and written with the
//! same batches; what only the embedded store has (its status pages, cardinality statistics,
//! snapshots, deletes, sealing and retention passes) is reached through [`Backend::embedded`].

use crate::clickhouse::ClickHouse;
use crate::sample::{PackedBatch, WriteBatch};
use crate::storage::{Querier, ReadLimits, Result, Storage, WriteOutcome};

/// A server's store.
#[derive(Clone)]
pub enum Backend {
    /// The embedded store in the data directory.
    Embedded(Storage),
    /// Shards of a ClickHouse cluster; the node keeps no data of its own.
    ClickHouse(ClickHouse),
}

impl Backend {
    /// A reader for one request.
    pub fn querier(&self, limits: ReadLimits) -> Box<dyn Querier> {
        match self {
            Self::Embedded(s) => Box::new(s.querier(limits)),
            Self::ClickHouse(c) => Box::new(c.querier(limits)),
        }
    }

    /// A reader for one request whose answer has no place for a warning (export, federation,
    /// remote read): on ClickHouse it fails when a shard is down, even with
    /// `--clickhouse-partial-reads`.
    pub fn complete_querier(&self, limits: ReadLimits) -> Box<dyn Querier> {
        match self {
            Self::Embedded(s) => Box::new(s.querier(limits)),
            Self::ClickHouse(c) => Box::new(c.querier(limits).complete()),
        }
    }

    /// Stores a validated batch (blocks: call it off the async executor).
    ///
    /// # Errors
    /// The store's errors ([`crate::storage::StorageError`]).
    pub fn write(&self, batch: WriteBatch) -> Result<WriteOutcome> {
        match self {
            Self::Embedded(s) => s.write(batch),
            Self::ClickHouse(_) => self.write_packed(PackedBatch::from(&batch)),
        }
    }

    /// [`Backend::write`] for a packed batch.
    ///
    /// # Errors
    /// As [`Backend::write`].
    pub fn write_packed(&self, batch: PackedBatch) -> Result<WriteOutcome> {
        match self {
            Self::Embedded(s) => s.write_packed(batch),
            // Series ids are derived, not allocated: a write cannot tell which series are new.
            Self::ClickHouse(c) => {
                let exemplars = crate::clickhouse::exemplars_stored(&batch);
                c.write_owned(batch).map(|samples| WriteOutcome { samples, series_created: 0, exemplars })
            }
        }
    }

    /// Whether other nodes read and write the same data (ClickHouse): what one node writes,
    /// every node reads, so rule evaluators must agree (see `rules/for_state.rs`).
    pub fn is_shared(&self) -> bool {
        matches!(self, Self::ClickHouse(_))
    }

    /// The embedded store, when the server runs on it.
    pub fn embedded(&self) -> Option<&Storage> {
        match self {
            Self::Embedded(s) => Some(s),
            Self::ClickHouse(_) => None,
        }
    }

    /// The backend's name, for messages (`embedded`, `clickhouse`).
    pub fn name(&self) -> &'static str {
        match self {
            Self::Embedded(_) => "embedded",
            Self::ClickHouse(_) => "clickhouse",
        }
    }
}
