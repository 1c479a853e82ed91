//! Writes: a batch split by owning shard into `RowBinary` rows of the three tables, inserted
//! on every shard concerned in parallel; acknowledged once all have acknowledged.

use std::collections::BTreeSet;

use super::rowbinary::{put_len, put_str};
use super::{day_of, ClickHouse, KNOWN_LIMIT};
use crate::labels::Labels;
use crate::sample::PackedBatch;
use crate::storage::StorageError;

/// The rows one shard receives from one batch.
#[derive(Default)]
struct ShardRows {
    series: Vec<u8>,
    postings: Vec<u8>,
    samples: Vec<u8>,
    /// `(id, day)` whose series and postings rows are in `series`/`postings`.
    indexed: Vec<(u64, u16)>,
    /// Rows in `series`, `postings` and `samples`.
    counts: [u64; 3],
}

impl ClickHouse {
    /// Stores `batch` (validated: labels canonical and carrying a name, timestamps in range);
    /// returns the samples written.
    ///
    /// # Errors
    /// [`StorageError::TooOld`] / [`StorageError::TooNew`] for a sample outside the accepted
    /// range (nothing is written); [`StorageError::Unavailable`] when a shard concerned fails (parts of the batch may have
    /// been stored: retrying the batch is safe); [`StorageError::Corrupt`] for label bytes that
    /// are not canonical.
    pub fn write(&self, batch: &PackedBatch) -> Result<usize, StorageError> {
        self.check_time_range(batch, crate::storage::now_ms())?;
        let mut per_shard: Vec<ShardRows> = (0..self.inner.shards.len()).map(|_| ShardRows::default()).collect();
        {
            let known = self.inner.known.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            for s in batch.series() {
                let place = self.place(s.labels);
                let Some(rows) = per_shard.get_mut(place.shard) else { continue };
                let days: BTreeSet<u16> = s.samples.iter().map(|p| day_of(p.timestamp_ms)).collect();
                let (mut labels, mut series_row) = (None, false);
                for day in days.into_iter().filter(|&d| !known.contains(&(place.id, d))) {
                    let l = match &labels {
                        Some(l) => l,
                        None => labels
                            .insert(Labels::decode(s.labels).map_err(|_| StorageError::Corrupt { what: "label set" })?),
                    };
                    if !series_row {
                        series_row = true;
                        rows.counts[0] += 1;
                        rows.series.extend_from_slice(&place.id.to_le_bytes());
                        rows.series.extend_from_slice(&place.bucket.to_le_bytes());
                        put_len(&mut rows.series, l.len() as u64);
                        for label in l.iter() {
                            put_str(&mut rows.series, label.name.as_bytes());
                        }
                        put_len(&mut rows.series, l.len() as u64);
                        for label in l.iter() {
                            put_str(&mut rows.series, label.value.as_bytes());
                        }
                    }
                    rows.counts[1] += l.len() as u64;
                    for label in l.iter() {
                        rows.postings.extend_from_slice(&day.to_le_bytes());
                        put_str(&mut rows.postings, label.name.as_bytes());
                        put_str(&mut rows.postings, label.value.as_bytes());
                        rows.postings.extend_from_slice(&place.id.to_le_bytes());
                    }
                    rows.indexed.push((place.id, day));
                }
                rows.counts[2] += s.samples.len() as u64;
                for p in s.samples {
                    rows.samples.extend_from_slice(&place.bucket.to_le_bytes());
                    rows.samples.extend_from_slice(&place.id.to_le_bytes());
                    rows.samples.extend_from_slice(&p.timestamp_ms.to_le_bytes());
                    rows.samples.extend_from_slice(&p.value.to_bits().to_le_bytes());
                }
            }
        }
        let (series, postings, samples) = (self.table("series"), self.table("postings"), self.table("samples"));
        let results: Vec<Result<(), StorageError>> = std::thread::scope(|scope| {
            let handles: Vec<_> = per_shard
                .iter()
                .zip(&self.inner.shards)
                .filter(|(rows, _)| !rows.samples.is_empty())
                .map(|(rows, shard)| {
                    let (series, postings, samples) = (&series, &postings, &samples);
                    scope.spawn(move || -> Result<(), StorageError> {
                        // The index first: a sample visible to a read always has its series.
                        if !rows.series.is_empty() {
                            shard.insert(
                                &format!("INSERT INTO {series} (series_id, bucket, names, values)"),
                                &rows.series,
                                0,
                                rows.counts[0],
                            )?;
                        }
                        if !rows.postings.is_empty() {
                            shard.insert(
                                &format!("INSERT INTO {postings} (day, name, value, series_id)"),
                                &rows.postings,
                                1,
                                rows.counts[1],
                            )?;
                        }
                        let insert = format!("INSERT INTO {samples} (bucket, series_id, ts, value)");
                        shard.insert(&insert, &rows.samples, 2, rows.counts[2])?;
                        Ok(())
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| Err(StorageError::Unavailable("a shard insert panicked".to_owned())))
                })
                .collect()
        });
        results.into_iter().collect::<Result<Vec<()>, _>>()?;
        let mut known = self.inner.known.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if known.len() > KNOWN_LIMIT {
            known.clear();
        }
        known.extend(per_shard.iter().flat_map(|r| r.indexed.iter().copied()));
        Ok(batch.sample_count())
    }
}
