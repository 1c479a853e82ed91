//! Deleting samples (`/api/v1/admin/tsdb/delete_series`) on ClickHouse: the matching series are
//! found as a read finds them, then each shard runs an `ALTER TABLE samples DELETE` mutation for
//! its series in the time range, and the call returns once every mutation is done (ClickHouse
//! applies mutations in the background; 18.16 has no synchronous option, so they are polled).
//! The series' `series` and `postings` rows stay: a series left without samples answers no
//! selection of samples, but still lists in `/api/v1/series` for its days.

use std::time::{Duration, Instant};

use super::client::{quote, Shard};
use super::read::IDS_PER_STATEMENT;
use super::rowbinary::Reader;
use super::ClickHouse;
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
                shard.query(&format!(
                    "ALTER TABLE {} DELETE WHERE series_id IN ({list}) AND ts >= {start_ms} AND ts <= {end_ms}",
                    self.table("samples")
                ))?;
            }
            if !ids.is_empty() {
                self.wait_for_mutations(shard)?;
            }
            Ok(ids.len())
        })?;
        Ok(per_shard.into_iter().sum())
    }

    fn wait_for_mutations(&self, shard: &Shard) -> Result<(), StorageError> {
        let sql = format!(
            "SELECT count() FROM system.mutations WHERE database = {} AND table = 'samples' AND is_done = 0 FORMAT RowBinary",
            quote(&self.inner.config.database)
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
