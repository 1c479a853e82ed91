//! Deleting samples (`/api/v1/admin/tsdb/delete_series`) on ClickHouse: the matching series are
//! found as a read finds them, then each shard runs an `ALTER TABLE samples DELETE` mutation for
//! its series in the time range, and the call returns once every mutation is done (ClickHouse
//! applies mutations in the background; 18.16 has no synchronous option, so they are polled).
//! Sealed days are rewritten: each chunk row of those series and days is decoded, the range
//! taken out, and what is left written back under a new version before the old versions are
//! deleted (as a seal does, see `seal.rs`). A seal running on another node at the same moment
//! may fold the deleted samples back in from the version it read; deleting again removes them.
//! The series' `series` and `postings` rows stay: a series left without samples answers no
//! selection of samples, but still lists in `/api/v1/series` for its days.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::client::{quote, Shard};
use super::read::{malformed, IDS_PER_STATEMENT};
use super::recency::Candidates;
use super::rowbinary::Reader;
use super::seal::put_chunk_rows;
use super::{day_of, ClickHouse};
use crate::matcher::Matcher;
use crate::storage::{ReadLimits, StorageError};

impl ClickHouse {
    /// Deletes the samples in `[start_ms, end_ms]` of every series matching `matchers`;
    /// returns the series concerned.
    ///
    /// # Errors
    /// [`StorageError::Unavailable`] when a shard fails or a deletion does not finish within
    /// the request timeout (it then goes on in the background).
    pub fn delete_series(&self, matchers: &[Matcher], start_ms: i64, end_ms: i64) -> Result<usize, StorageError> {
        let q = self.querier(ReadLimits::none());
        // Never partial: a deletion must reach every shard.
        let per_shard = q.each_shard_with(false, |shard| {
            let ids: Vec<u64> = q.candidates(shard, matchers, start_ms, end_ms)?.into_iter().map(|c| c.id).collect();
            for chunk in ids.chunks(IDS_PER_STATEMENT) {
                let list = chunk.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
                for table in ["samples", "starts", "exemplars"] {
                    shard.query(&format!(
                        "ALTER TABLE {} DELETE WHERE series_id IN ({list}) AND ts >= {start_ms} AND ts <= {end_ms}",
                        self.table(table)
                    ))?;
                }
            }
            if !ids.is_empty() {
                self.delete_sealed(shard, &ids, start_ms, end_ms)?;
                self.wait_for_mutations(shard, "samples")?;
                self.wait_for_mutations(shard, "chunks")?;
                self.wait_for_mutations(shard, "starts")?;
                self.wait_for_mutations(shard, "exemplars")?;
            }
            Ok(ids.len())
        })?;
        Ok(per_shard.into_iter().sum())
    }

    /// Takes `[start_ms, end_ms]` out of the chunk rows of series `ids` on `shard`.
    fn delete_sealed(&self, shard: &Shard, ids: &[u64], start_ms: i64, end_ms: i64) -> Result<(), StorageError> {
        let chunks = self.table("chunks");
        let (first, last) = (day_of(start_ms), day_of(end_ms));
        let malformed = |e| malformed(shard, e);
        for batch in ids.chunks(IDS_PER_STATEMENT) {
            let list = batch.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
            let body = shard.query(&format!(
                "SELECT bucket, series_id, day, version, data FROM {chunks} WHERE series_id IN ({list}) \
                 AND day >= {first} AND day <= {last} ORDER BY series_id, day, version FORMAT RowBinary"
            ))?;
            let mut r = Reader::new(&body);
            // Per (series, day): its bucket, versions and candidate samples (by recency).
            let mut days: BTreeMap<(u64, u16), (u16, Vec<i64>, Candidates)> = BTreeMap::new();
            let mut decoded = Vec::new();
            while !r.is_empty() {
                let bucket = r.u16().map_err(malformed)?;
                let id = r.u64().map_err(malformed)?;
                let day = r.u16().map_err(malformed)?;
                let version = r.i64().map_err(malformed)?;
                let data = r.bytes().map_err(malformed)?;
                let entry = days.entry((id, day)).or_insert_with(|| (bucket, Vec::new(), Candidates::default()));
                entry.1.push(version);
                entry.2.push_chunk(data, version, |_| true, &mut decoded)?;
            }
            let (mut rows, mut count, mut old) = (Vec::new(), 0u64, Vec::new());
            for ((id, day), (bucket, versions, candidates)) in days {
                let mut run = candidates.resolve();
                let before = run.len();
                run.retain(|ts| !(start_ms..=end_ms).contains(&ts));
                if run.len() == before {
                    continue;
                }
                old.extend(versions.iter().map(|v| format!("({id},{day},{v})")));
                if run.is_empty() {
                    continue;
                }
                let version = versions.iter().max().copied().unwrap_or(0).saturating_add(1);
                count += put_chunk_rows(&mut rows, bucket, id, day, version, &run)?;
            }
            if count > 0 {
                let insert = format!("INSERT INTO {chunks} (bucket, series_id, day, version, data)");
                shard.insert(&insert, &rows, 3, count)?;
            }
            for pairs in old.chunks(IDS_PER_STATEMENT) {
                shard.query(&format!(
                    "ALTER TABLE {chunks} DELETE WHERE (series_id, day, version) IN ({})",
                    pairs.join(",")
                ))?;
            }
        }
        Ok(())
    }

    /// Waits until no mutation of `table` is running on `shard` (at most the request timeout).
    pub(super) fn wait_for_mutations(&self, shard: &Shard, table: &str) -> Result<(), StorageError> {
        let sql = format!(
            "SELECT count() FROM system.mutations WHERE database = {} AND table = {} AND is_done = 0 FORMAT RowBinary",
            quote(&self.inner.config.database),
            quote(table)
        );
        let deadline = Instant::now() + self.inner.config.timeout;
        loop {
            let body = shard.query(&sql)?;
            let running =
                Reader::new(&body).u64().map_err(|e| StorageError::Unavailable(format!("{}: {e}", shard.url())))?;
            if running == 0 {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(StorageError::Unavailable(format!(
                    "{}: the deletion is still running after {:?}; it completes in the background",
                    shard.url(),
                    self.inner.config.timeout
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}
