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
//! - **Reads ask only where no settled row exists.** The statement groups by the key asked for
//!   (a label value, a series id) and returns its least and greatest write id: a least of 0 is
//!   a settled row, equal ones the key's only write (the usual case before settling), and only
//!   for the keys with several write ids and no 0 a second statement asks for all of them. A
//!   key is listed when a row is settled or one of its write ids is committed; the ids are
//!   decided as the samples' (the node's cache of decided ids first, then one look-up per
//!   coordinator).
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
use super::read::{in_lists, malformed, IDS_PER_STATEMENT};
use super::rowbinary::{Malformed, Reader};
use super::ClickHouse;
use crate::storage::StorageError;

type Result<T> = std::result::Result<T, StorageError>;

/// Keys read from `postings`: those a settled row (write id 0) lists, and the others with the
/// write ids that could make them visible.
struct Gated<K> {
    settled: Vec<K>,
    /// Keys of one write id (the usual case before settling).
    one: Vec<(K, u64)>,
    /// Keys of several write ids, none 0: asked again for all of them, then in `all`.
    several: Vec<K>,
    all: Vec<(K, Vec<u64>)>,
    seen: SeenIds,
}

impl<K> Gated<K> {
    /// The rows of `body`: `key, min(write_id), max(write_id), max(inserted_at)` (`inserted_at`
    /// the latest of the key's rows: a write id is decided aborted only past the horizon of it).
    fn read(shard: &Shard, body: &[u8], key: &impl ReadKey<K>) -> Result<Self> {
        let (settled, one, several, all) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let mut gated = Self { settled, one, several, all, seen: SeenIds::default() };
        let mut r = Reader::new(body);
        let row =
            |r: &mut Reader<'_>| -> std::result::Result<_, Malformed> { Ok((key(r)?, r.u64()?, r.u64()?, r.i64()?)) };
        while !r.is_empty() {
            let (k, lo, hi, at) = row(&mut r).map_err(|e| malformed(shard, e))?;
            if lo == 0 {
                gated.settled.push(k);
            } else if lo == hi {
                gated.seen.note(lo, at);
                gated.one.push((k, lo));
            } else {
                gated.several.push(k);
            }
        }
        Ok(gated)
    }

    /// Adds the rows of `body`: `key, groupUniqArray(write_id), max(inserted_at)`.
    fn read_several(&mut self, shard: &Shard, body: &[u8], key: &impl ReadKey<K>) -> Result<()> {
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
            self.all.push((k, ids));
        }
        Ok(())
    }

    /// The keys listed by a settled row or by a committed write.
    fn visible(self, store: &ClickHouse) -> Result<Vec<K>> {
        let mut out = self.settled;
        if self.one.is_empty() && self.all.is_empty() {
            return Ok(out);
        }
        let visible = store.visible(&self.seen, crate::storage::now_ms())?;
        out.extend(self.one.into_iter().filter(|&(_, id)| visible.contains(id)).map(|(k, _)| k));
        out.extend(self.all.into_iter().filter(|(_, ids)| ids.iter().any(|&id| visible.contains(id))).map(|(k, _)| k));
        Ok(out)
    }
}

/// Reads one key (an owned value) from a row.
trait ReadKey<K>: for<'b> Fn(&mut Reader<'b>) -> std::result::Result<K, Malformed> {}

impl<K, F: for<'b> Fn(&mut Reader<'b>) -> std::result::Result<K, Malformed>> ReadKey<K> for F {}

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
        let rows = format!("name = {} AND {days}", quote(name));
        self.gated(shard, "value", &rows, &|r: &mut Reader<'_>| r.str().map(str::to_owned), |v| quote(v))
    }

    /// The series ids of `shard` whose label `name` takes a value of `list` (quoted values,
    /// comma-separated) in `days`, that a settled row or a committed write lists.
    pub(super) fn visible_ids(&self, shard: &Shard, name: &str, list: &str, days: &str) -> Result<Vec<u64>> {
        let rows = format!("name = {} AND value IN ({list}) AND {days}", quote(name));
        self.gated(shard, "series_id", &rows, &|r: &mut Reader<'_>| r.u64(), u64::to_string)
    }

    /// The distinct `column` (`value` or `series_id`) of the postings rows `rows` (a condition)
    /// that a settled row or a committed write lists. One statement gives each key's least and
    /// greatest write id: a least of 0 is a settled row, equal ones the key's only write id
    /// (the usual case before settling). The keys with several write ids and no 0 are asked
    /// again, by name, for all their write ids (a key settled meanwhile then shows its 0).
    fn gated<K>(
        &self,
        shard: &Shard,
        column: &str,
        rows: &str,
        key: &impl ReadKey<K>,
        sql_of: impl Fn(&K) -> String,
    ) -> Result<Vec<K>> {
        let postings = self.table("postings");
        let body = shard.query(&format!(
            "SELECT {column}, min(write_id), max(write_id), max(inserted_at) FROM {postings} WHERE {rows} \
             GROUP BY {column} FORMAT RowBinary"
        ))?;
        let mut gated = Gated::read(shard, &body, key)?;
        let several = std::mem::take(&mut gated.several);
        for list in in_lists(several.iter().map(sql_of)) {
            let body = shard.query(&format!(
                "SELECT {column}, groupUniqArray(write_id), max(inserted_at) FROM {postings} \
                 WHERE {rows} AND {column} IN ({list}) GROUP BY {column} FORMAT RowBinary"
            ))?;
            gated.read_several(shard, &body, key)?;
        }
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
        let (mut total, mut failed) = (Settled::default(), None);
        for shard in &self.inner.shards {
            match self.settle_shard(shard, now_ms) {
                Ok(s) => {
                    total.committed += s.committed;
                    total.aborted += s.aborted;
                }
                Err(e) => failed = Some(e),
            }
        }
        failed.map_or(Ok(total), Err)
    }

    /// [`Self::settle_postings`] on one shard.
    fn settle_shard(&self, shard: &Shard, now_ms: i64) -> Result<Settled> {
        let watermark = now_ms.saturating_sub(self.margin());
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
        let visible = self.visible(&seen, now_ms)?;
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
        tracing::debug!(
            shard = shard.url(),
            committed = settled.committed,
            aborted = settled.aborted,
            "settled postings"
        );
        Ok(settled)
    }
}
