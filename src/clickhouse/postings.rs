//! The index (`postings`) as readers see it: all or nothing, like the samples. A postings row
//! carries its write's id and `inserted_at` (schema version 6), so a series, a label name or a
//! label value whose only rows belong to a write spanning shards that never committed is not
//! listed (`commit.rs`). Two things keep that cheap:
//!
//! - **Settling.** Every node's maintenance pass rewrites, on each shard, the postings rows of
//!   decided writes (inserted more than the abort horizon ago): the rows of committed writes are
//!   copied under write id 0, then every row of a non-zero write id under the watermark is
//!   deleted (one `ALTER TABLE postings DELETE`; ClickHouse rewrites only the parts holding such
//!   rows: those inserted since the last pass). So only the rows of recent writes carry an id.
//! - **Reads ask only where no settled row exists.** The statements group by the key asked for
//!   (a label value, a series id) and return its write ids only when none of its rows has
//!   write id 0: `if(min(write_id) = 0, [], groupUniqArray(write_id))`. A key is listed when a
//!   row is settled or one of its write ids is committed; the ids are decided as the samples'
//!   (the node's cache of decided ids first, then one look-up per coordinator).
//!
//! Invariants:
//! - A postings row of write id `w != 0` is copied under 0 only once `w` is committed, and
//!   deleted only once it is decided (committed and copied, or aborted past the horizon): the
//!   deletion takes rows with `inserted_at` at or below the watermark, all of whose write ids
//!   the pass decided and whose committed ones it copied before.
//! - Between the copy and the deletion both rows are there, and equal as an answer.
//! - `series` rows carry no write id: they are only read for ids the postings gave.

use std::collections::BTreeSet;

use super::client::{quote, Shard};
use super::commit::SeenIds;
use super::read::{malformed, IDS_PER_STATEMENT};
use super::rowbinary::{Malformed, Reader};
use super::ClickHouse;
use crate::storage::StorageError;

type Result<T> = std::result::Result<T, StorageError>;

/// Keys read from `postings`, each with the write ids that could make it visible (none when a
/// settled row, write id 0, lists it).
pub(super) struct Gated<K> {
    keys: Vec<(K, Vec<u64>)>,
    seen: SeenIds,
}

impl<K> Default for Gated<K> {
    fn default() -> Self {
        Self { keys: Vec::new(), seen: SeenIds::default() }
    }
}

impl<K> Gated<K> {
    /// Adds the rows of `body`: `key, ids Array(UInt64), inserted_at Int64` (`inserted_at` the
    /// latest of the key's rows: a write id is decided aborted only past the horizon of it).
    fn read<'a>(
        &mut self,
        shard: &Shard,
        body: &'a [u8],
        mut key: impl FnMut(&mut Reader<'a>) -> std::result::Result<K, Malformed>,
    ) -> Result<()> {
        let mut r = Reader::new(body);
        while !r.is_empty() {
            let k = key(&mut r).map_err(|e| malformed(shard, e))?;
            let n = r.len().map_err(|e| malformed(shard, e))?;
            let ids = (0..n).map(|_| r.u64()).collect::<std::result::Result<Vec<u64>, _>>();
            let ids = ids.map_err(|e| malformed(shard, e))?;
            let at = r.i64().map_err(|e| malformed(shard, e))?;
            for &id in &ids {
                self.seen.note(id, at);
            }
            self.keys.push((k, ids));
        }
        Ok(())
    }

    /// The keys listed by a settled row or by a committed write.
    fn visible(self, store: &ClickHouse) -> Result<Vec<K>> {
        let visible = store.visible(&self.seen, crate::storage::now_ms())?;
        Ok(self
            .keys
            .into_iter()
            .filter(|(_, ids)| ids.is_empty() || ids.iter().any(|&id| visible.contains(id)))
            .map(|(k, _)| k)
            .collect())
    }
}

/// The aggregates that follow a grouped key: its write ids unless one row is settled, and its
/// rows' latest `inserted_at`.
const GATE: &str = "if(min(write_id) = 0, emptyArrayUInt64(), groupUniqArray(write_id)), max(inserted_at)";

/// What one settling pass did, summed over shards (a write id with rows on two shards counts
/// twice).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Settled {
    /// Committed write ids whose postings rows were rewritten under write id 0.
    pub committed: u64,
    /// Aborted write ids whose postings rows were deleted.
    pub aborted: u64,
}

impl ClickHouse {
    /// The values of label `name` on `shard` in `days` (a condition on `day`) that a settled
    /// row or a committed write lists.
    pub(super) fn visible_values(&self, shard: &Shard, name: &str, days: &str) -> Result<Vec<String>> {
        let sql = format!(
            "SELECT value, {GATE} FROM {} WHERE name = {} AND {days} GROUP BY value FORMAT RowBinary",
            self.table("postings"),
            quote(name),
        );
        let body = shard.query(&sql)?;
        let mut gated = Gated::default();
        gated.read(shard, &body, |r| r.str().map(str::to_owned))?;
        gated.visible(self)
    }

    /// The series ids of `shard` whose label `name` takes a value of `list` (quoted values,
    /// comma-separated) in `days`, that a settled row or a committed write lists.
    pub(super) fn visible_ids(&self, shard: &Shard, name: &str, list: &str, days: &str) -> Result<Vec<u64>> {
        let sql = format!(
            "SELECT series_id, {GATE} FROM {} WHERE name = {} AND value IN ({list}) AND {days} GROUP BY series_id \
             FORMAT RowBinary",
            self.table("postings"),
            quote(name),
        );
        let body = shard.query(&sql)?;
        let mut gated = Gated::default();
        gated.read(shard, &body, Reader::u64)?;
        gated.visible(self)
    }

    /// Settles, on every shard, the postings rows inserted more than the abort horizon before
    /// `now_ms` (the seal's margin): those of committed writes are rewritten under write id 0,
    /// those of aborted writes deleted.
    ///
    /// # Errors
    /// [`StorageError::Unavailable`] when a shard or a coordinator fails (the other shards are
    /// still settled; what is left is settled by the next pass).
    pub fn settle_postings(&self, now_ms: i64) -> Result<Settled> {
        let watermark = now_ms.saturating_sub(self.margin());
        let (mut total, mut failed) = (Settled::default(), None);
        for shard in &self.inner.shards {
            match self.settle_shard(shard, watermark) {
                Ok(s) => {
                    total.committed += s.committed;
                    total.aborted += s.aborted;
                }
                Err(e) => failed = Some(e),
            }
        }
        failed.map_or(Ok(total), Err)
    }

    fn settle_shard(&self, shard: &Shard, watermark: i64) -> Result<Settled> {
        let postings = self.table("postings");
        let under = format!("write_id != 0 AND inserted_at <= {watermark}");
        let body = shard.query(&format!(
            "SELECT write_id, max(inserted_at) FROM {postings} WHERE {under} GROUP BY write_id FORMAT RowBinary"
        ))?;
        let mut seen = SeenIds::default();
        let mut ids = Vec::new();
        let mut r = Reader::new(&body);
        while !r.is_empty() {
            let id = r.u64().map_err(|e| malformed(shard, e))?;
            seen.note(id, r.i64().map_err(|e| malformed(shard, e))?);
            ids.push(id);
        }
        if ids.is_empty() {
            return Ok(Settled::default());
        }
        // Every write id under the watermark is past the horizon: committed, or never will be.
        let visible = self.visible(&seen, watermark.saturating_add(self.margin()))?;
        let committed: BTreeSet<u64> = ids.iter().copied().filter(|&id| visible.contains(id)).collect();
        let list: Vec<u64> = committed.iter().copied().collect();
        for chunk in list.chunks(IDS_PER_STATEMENT) {
            let list = chunk.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
            shard.query(&format!(
                "INSERT INTO {postings} (day, name, value, series_id, write_id, inserted_at) \
                 SELECT day, name, value, series_id, toUInt64(0), inserted_at FROM {postings} \
                 WHERE write_id IN ({list})"
            ))?;
        }
        shard.query(&format!("ALTER TABLE {postings} DELETE WHERE {under}"))?;
        self.wait_for_mutations(shard, "postings")?;
        let settled = Settled { committed: committed.len() as u64, aborted: (ids.len() - committed.len()) as u64 };
        tracing::info!(
            shard = shard.url(),
            committed = settled.committed,
            aborted = settled.aborted,
            "settled postings"
        );
        Ok(settled)
    }
}
