//! Retention and the accepted time range on ClickHouse: samples older than the retention
//! cutoff (the start of the day `now - retention` falls in) or further ahead than
//! `max_future` are refused like on the embedded store, and whole partitions past the cutoff
//! are dropped: days of `samples`, `chunks` and `starts`, months of `postings` and (later by
//! `max_future`) of `commits`. Any node may run it (dropping a
//! partition that is gone already is a no-op), so every node's maintenance loop does.

use super::client::{quote, Shard};
use super::rowbinary::Reader;
use super::ClickHouse;
use crate::sample::PackedBatch;
use crate::storage::StorageError;

const DAY_MS: i64 = 86_400_000;

impl ClickHouse {
    /// The oldest timestamp kept at `now_ms` (the start of its day), if retention is set.
    pub fn retention_cutoff(&self, now_ms: i64) -> Option<i64> {
        let retention = self.inner.config.retention_ms.filter(|&r| r > 0)?;
        Some(now_ms.saturating_sub(retention).div_euclid(DAY_MS).saturating_mul(DAY_MS))
    }

    /// Refuses a batch with a sample before the retention cutoff or past the future limit.
    pub(crate) fn check_time_range(&self, batch: &PackedBatch, now_ms: i64) -> Result<(), StorageError> {
        let limit = self.inner.config.max_future_ms.map(|ahead| now_ms.saturating_add(ahead.max(0)));
        crate::storage::check_time_range(batch, self.retention_cutoff(now_ms), limit)
    }

    /// Drops, on every shard, the partitions that lie entirely before the retention cutoff at
    /// `now_ms`; returns how many were dropped.
    ///
    /// # Errors
    /// [`StorageError::Unavailable`] when a shard fails (the others are still done).
    pub fn enforce_retention(&self, now_ms: i64) -> Result<usize, StorageError> {
        let Some(cutoff) = self.retention_cutoff(now_ms) else { return Ok(0) };
        let cutoff_day = cutoff.div_euclid(DAY_MS);
        let (mut dropped, mut failed) = (0, None);
        for shard in &self.inner.shards {
            match self.drop_partitions(shard, cutoff_day) {
                Ok(n) => dropped += n,
                Err(e) => failed = Some(e),
            }
        }
        failed.map_or(Ok(dropped), Err)
    }

    fn drop_partitions(&self, shard: &Shard, cutoff_day: i64) -> Result<usize, StorageError> {
        let mut dropped = 0;
        // `samples` and `chunks`: one partition per day number; `postings`: one per month (YYYYMM), dropped
        // once its last day is before the cutoff.
        let tables =
            [("samples", Expiry::Day), ("chunks", Expiry::Day), ("starts", Expiry::Day), ("exemplars", Expiry::Day)];
        let tables = tables.into_iter().chain([("postings", Expiry::Month)]);
        // `commits`: a record is needed while a row of its write is kept; that row's sample may
        // lie up to `max_future` after the record's day, so records go that much later (and
        // never when any future timestamp is accepted).
        let commits = self.inner.config.max_future_ms.map(|ahead| {
            let cutoff = cutoff_day.saturating_sub(ahead.max(0).div_euclid(DAY_MS)).saturating_sub(1);
            ("commits", Expiry::Month, cutoff)
        });
        let tables = tables.into_iter().map(|(t, e)| (t, e, cutoff_day)).chain(commits);
        for (table, expired, cutoff_day) in tables {
            for partition in self.partitions(shard, table)? {
                let Ok(p) = partition.parse::<i64>() else { continue };
                let gone = match expired {
                    Expiry::Day => p < cutoff_day,
                    Expiry::Month => month_end_day(p).is_some_and(|end| end < cutoff_day),
                };
                if gone {
                    shard.query(&format!("ALTER TABLE {} DROP PARTITION {p}", self.table(table)))?;
                    dropped += 1;
                }
            }
        }
        Ok(dropped)
    }

    /// The active partitions of `table` on `shard` (their ids: day numbers for `samples` and
    /// `chunks`, months for `postings`).
    pub(super) fn partitions(&self, shard: &Shard, table: &str) -> Result<Vec<String>, StorageError> {
        let sql = format!(
            "SELECT DISTINCT partition FROM system.parts WHERE database = {} AND table = {} AND active FORMAT RowBinary",
            quote(&self.inner.config.database),
            quote(table)
        );
        let body = shard.query(&sql)?;
        let mut r = Reader::new(&body);
        let mut out = Vec::new();
        while !r.is_empty() {
            out.push(r.str().map_err(|e| StorageError::Unavailable(format!("{}: {e}", shard.url())))?.to_owned());
        }
        Ok(out)
    }
}

#[derive(Clone, Copy)]
enum Expiry {
    Day,
    Month,
}

/// The last day (days since 1970-01-01) of month `yyyymm`.
fn month_end_day(yyyymm: i64) -> Option<i64> {
    let (y, m) = (yyyymm / 100, yyyymm % 100);
    if !(1..=12).contains(&m) {
        return None;
    }
    let (ny, nm) = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
    let first_of_next = chrono::NaiveDate::from_ymd_opt(i32::try_from(ny).ok()?, u32::try_from(nm).ok()?, 1)?;
    let epoch = chrono::NaiveDate::from_ymd_opt(1970, 1, 1)?;
    Some((first_of_next - epoch).num_days() - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn month_ends() {
        assert_eq!(month_end_day(197001), Some(30));
        assert_eq!(month_end_day(197002), Some(58));
        assert_eq!(month_end_day(202412), Some(20088));
        assert_eq!(month_end_day(202413), None);
    }
}
