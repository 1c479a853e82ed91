//! Sealing on ClickHouse: the samples of a closed day, one row per sample in `samples`
//! (27 bytes before ClickHouse's own compression, more for a histogram), become one row per
//! series and kind in `chunks`: its floats in saltdb's chunk codec (`storage::chunk`, about a
//! byte per sample) and its native histograms in the histogram chunk codec
//! (`histogram::chunk`); and leave `samples`.
//!
//! A day is sealed once it ended `--ooo-grace` ago, by every node's maintenance pass, shard by
//! shard and bucket by bucket (a bucket's day is read in parts of at most [`PART_ROWS`] rows, so
//! memory stays bounded however big the day).
//!
//! Invariants, which make a seal safe against concurrent writes, concurrent seals by other
//! nodes and a crash at any step:
//! - **The watermark.** Every sample row carries `inserted_at`, the writing node's clock when
//!   its group was built. A seal reads only rows with `inserted_at <= W`, where `W` is the
//!   sealing node's clock minus the margin (twice the request timeout plus a minute: an insert still
//!   in flight, and clocks of nodes that differ by up to a minute, stay above it), and then
//!   deletes exactly those rows (`ALTER TABLE samples DELETE WHERE day AND inserted_at <= W`).
//!   The margin is also the abort horizon of writes spanning shards (`commit.rs`): a row under
//!   `W` whose write id is not committed never will be, so it is not folded in, and the
//!   deletion removes it (the clean-up of aborted writes), with the `starts` and `exemplars`
//!   rows of those write ids, on that shard. (Their postings rows are deleted by the settling of
//!   postings, `postings.rs`.)
//!   A late sample written during the seal is above `W`: it stays in `samples` for the next
//!   seal. Nodes' clocks must agree within a minute (NTP).
//! - **Versions.** A seal rewrites only the series that have sample rows to fold in: it writes
//!   their chunk rows with the watermark as version, or one above the highest version it merged
//!   for that series (so never one it deletes), and then deletes exactly
//!   the `(series, version)` rows it merged (`chunks` is a plain `MergeTree`, so nothing else
//!   removes a version). Two nodes sealing the same day at once each fold in what they read
//!   and remove only that: no row is lost, at worst some are held twice until the next seal.
//! - **Reads** resolve, per series and timestamp, the chunk rows' and sample rows' samples by
//!   recency (`recency.rs`): a later write wins, as on the embedded store. Between a seal's
//!   insert and its deletions both copies are visible and equal.
//!
//! A crash between the steps leaves duplicates (equal values) that the next seal removes.

use std::collections::{BTreeMap, BTreeSet};

use super::client::Shard;
use super::commit::SeenIds;
use super::read::malformed;
use super::recency::{Candidates, Resolved};
use super::rowbinary::{put_str, Reader};
use super::ClickHouse;
use crate::histogram::{chunk as histogram_chunk, Histogram};
use crate::storage::format::chunk;
use crate::storage::StorageError;

const DAY_MS: i64 = 86_400_000;

/// Most sample rows one part of a seal holds in memory (about 40 bytes each while merged).
const PART_ROWS: u64 = 4_000_000;

/// What one pass sealed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sealed {
    /// Shard-days sealed.
    pub days: usize,
    /// Sample rows moved into chunks.
    pub samples: u64,
    /// Sample rows of aborted writes (spanning shards, never committed: `commit.rs`) deleted
    /// without being moved (their `starts` and `exemplars` rows are deleted too).
    pub aborted: u64,
    /// Chunk rows written.
    pub chunks: u64,
}

impl ClickHouse {
    /// Seals, on every shard, each day that ended at least `seal_after` before `now_ms` and
    /// still has sample rows at or below the watermark.
    ///
    /// # Errors
    /// [`StorageError::Unavailable`] when a shard fails (the other shards are still sealed).
    pub fn seal_closed_days(&self, now_ms: i64) -> Result<Sealed, StorageError> {
        let Some(after) = self.inner.config.seal_after_ms else { return Ok(Sealed::default()) };
        let watermark = now_ms.saturating_sub(self.margin());
        let cutoff = self.retention_cutoff(now_ms).map_or(i64::MIN, |c| c.div_euclid(DAY_MS));
        let (mut total, mut failed) = (Sealed::default(), None);
        for shard in &self.inner.shards {
            let days = match self.partitions(shard, "samples") {
                Ok(p) => p,
                Err(e) => {
                    failed = Some(e);
                    continue;
                }
            };
            for day in days.iter().filter_map(|p| p.parse::<i64>().ok()) {
                let closed = (day + 1).saturating_mul(DAY_MS).saturating_add(after) <= now_ms;
                if !closed || day < cutoff {
                    continue;
                }
                match self.seal_day(shard, day, watermark) {
                    Ok(s) => {
                        total.days += usize::from(s.samples > 0);
                        total.samples += s.samples;
                        total.aborted += s.aborted;
                        total.chunks += s.chunks;
                    }
                    Err(e) => failed = Some(e),
                }
            }
        }
        match failed {
            Some(e) if total.days == 0 => Err(e),
            Some(e) => {
                tracing::warn!(error = %e, "a ClickHouse shard could not be sealed");
                Ok(total)
            }
            None => Ok(total),
        }
    }

    /// How far below the clock a seal's watermark lies: the abort horizon (`commit.rs`), so
    /// every row under it belongs to a write that is committed or never will be.
    pub(super) fn margin(&self) -> i64 {
        self.inner.config.seal_margin_ms.unwrap_or_else(|| self.abort_horizon())
    }

    /// Seals day `day` (days since the epoch) on `shard`.
    fn seal_day(&self, shard: &Shard, day: i64, watermark: i64) -> Result<Sealed, StorageError> {
        let samples = self.table("samples");
        let in_day = format!("intDiv(ts, {DAY_MS}) = {day} AND inserted_at <= {watermark}");
        // Rows to seal per bucket (a bucket lives on one shard: these are this shard's).
        let body = shard
            .query(&format!("SELECT bucket, count() FROM {samples} WHERE {in_day} GROUP BY bucket FORMAT RowBinary"))?;
        let mut r = Reader::new(&body);
        let mut buckets = Vec::new();
        while !r.is_empty() {
            buckets.push((r.u16().map_err(|e| malformed(shard, e))?, r.u64().map_err(|e| malformed(shard, e))?));
        }
        if buckets.is_empty() {
            return Ok(Sealed::default());
        }
        let mut sealed = Sealed::default();
        let mut aborted = BTreeSet::new();
        for (bucket, rows) in buckets {
            let parts = rows.div_ceil(PART_ROWS);
            for part in 0..parts {
                let which = format!("bucket = {bucket} AND series_id % {parts} = {part}");
                let s = self.seal_part(shard, &which, bucket, day, &in_day, watermark, &mut aborted)?;
                sealed.samples += s.samples;
                sealed.aborted += s.aborted;
                sealed.chunks += s.chunks;
            }
        }
        shard.query(&format!("ALTER TABLE {samples} DELETE WHERE {in_day}"))?;
        self.delete_aborted(shard, &aborted)?;
        self.wait_for_mutations(shard, "chunks")?;
        self.wait_for_mutations(shard, "samples")?;
        tracing::info!(
            shard = shard.url(),
            day,
            samples = sealed.samples,
            aborted = sealed.aborted,
            chunks = sealed.chunks,
            "sealed a ClickHouse day"
        );
        Ok(sealed)
    }

    /// Deletes the `starts` and `exemplars` rows of the aborted write ids `aborted` on `shard`
    /// (all their days: a write id is of one write, decided aborted for good) and waits for it.
    fn delete_aborted(&self, shard: &Shard, aborted: &BTreeSet<u64>) -> Result<(), StorageError> {
        if aborted.is_empty() {
            return Ok(());
        }
        let ids: Vec<u64> = aborted.iter().copied().collect();
        for table in ["starts", "exemplars"] {
            for chunk in ids.chunks(super::read::IDS_PER_STATEMENT) {
                let list = chunk.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
                shard.query(&format!("ALTER TABLE {} DELETE WHERE write_id IN ({list})", self.table(table)))?;
            }
            self.wait_for_mutations(shard, table)?;
        }
        Ok(())
    }

    /// Reads the sample rows under the watermark of the series `which` selects on day `day`,
    /// merges them into those series' chunk rows (only theirs: a late sample re-seals its own
    /// series, not the day), writes one chunk row per series, of the watermark as version or one
    /// above the highest version merged, and deletes the versions it merged. The write ids of
    /// the rows left out as aborted are added to `aborted`.
    #[expect(clippy::too_many_arguments, reason = "one part of one day: its selection and the day's state")]
    fn seal_part(
        &self,
        shard: &Shard,
        which: &str,
        bucket: u16,
        day: i64,
        in_day: &str,
        watermark: i64,
        aborted_ids: &mut BTreeSet<u64>,
    ) -> Result<Sealed, StorageError> {
        let malformed = |e| malformed(shard, e);
        let body = shard.query(&format!(
            "SELECT series_id, ts, value, inserted_at, histogram, write_id FROM {} WHERE {which} AND {in_day} \
             FORMAT RowBinary",
            self.table("samples")
        ))?;
        // Rows of writes spanning shards are folded in only when committed; under the watermark
        // (the abort horizon) the others never will be, and the day's deletion removes them.
        let mut seen = SeenIds::default();
        let mut r = Reader::new(&body);
        while !r.is_empty() {
            let row = SealRow::read(&mut r).map_err(malformed)?;
            seen.note(row.write_id, row.inserted_at);
        }
        let visible = self.visible(&seen, crate::storage::now_ms())?;
        let mut r = Reader::new(&body);
        // Per series with rows to fold in: every candidate sample with its recency (see
        // `recency.rs`): its chunk rows' and its sample rows'.
        let mut merged: BTreeMap<u64, Candidates> = BTreeMap::new();
        let (mut samples, mut aborted) = (0u64, 0u64);
        let mut decoded = Vec::new();
        while !r.is_empty() {
            let SealRow { id, ts, bits, inserted_at, histogram, write_id } =
                SealRow::read(&mut r).map_err(malformed)?;
            if !visible.contains(write_id) {
                aborted += 1;
                aborted_ids.insert(write_id);
                continue;
            }
            let series = merged.entry(id).or_default();
            if histogram.is_empty() {
                series.push(ts, inserted_at, bits);
            } else {
                series.push_chunk(histogram, inserted_at, |t| t == ts, &mut decoded)?;
            }
            samples += 1;
        }
        let mut merged_versions: Vec<(u64, i64)> = Vec::new();
        let body = shard.query(&format!(
            "SELECT series_id, version, data FROM {} WHERE day = {day} AND {which} FORMAT RowBinary",
            self.table("chunks")
        ))?;
        let mut r = Reader::new(&body);
        while !r.is_empty() {
            let id = r.u64().map_err(malformed)?;
            let old = r.i64().map_err(malformed)?;
            let data = r.bytes().map_err(malformed)?;
            let Some(series) = merged.get_mut(&id) else { continue };
            series.push_chunk(data, old, |_| true, &mut decoded)?;
            merged_versions.push((id, old));
        }
        // Above every version merged here (one another node may have written meanwhile).
        let version = merged_versions.iter().map(|&(_, v)| v.saturating_add(1)).fold(watermark, i64::max);
        let mut rows = Vec::new();
        let mut count = 0u64;
        let day = u16::try_from(day).unwrap_or(u16::MAX);
        for (id, candidates) in merged {
            count += put_chunk_rows(&mut rows, bucket, id, day, version, &candidates.resolve())?;
        }
        if count > 0 {
            let insert = format!("INSERT INTO {} (bucket, series_id, day, version, data)", self.table("chunks"));
            shard.insert(&insert, &rows, 3, count)?;
        }
        for pairs in merged_versions.chunks(super::read::IDS_PER_STATEMENT) {
            let list = pairs.iter().map(|(id, v)| format!("({id},{v})")).collect::<Vec<_>>().join(",");
            shard.query(&format!(
                "ALTER TABLE {} DELETE WHERE day = {day} AND (series_id, version) IN ({list})",
                self.table("chunks")
            ))?;
        }
        Ok(Sealed { days: 0, samples, aborted, chunks: count })
    }
}

/// One `samples` row as a seal reads it.
struct SealRow<'a> {
    id: u64,
    ts: i64,
    bits: u64,
    inserted_at: i64,
    histogram: &'a [u8],
    write_id: u64,
}

impl<'a> SealRow<'a> {
    fn read(r: &mut Reader<'a>) -> Result<Self, super::rowbinary::Malformed> {
        Ok(Self {
            id: r.u64()?,
            ts: r.i64()?,
            bits: r.u64()?,
            inserted_at: r.i64()?,
            histogram: r.bytes()?,
            write_id: r.u64()?,
        })
    }
}

/// Appends the `chunks` rows (`RowBinary`, columns `bucket, series_id, day, version, data`) of
/// one series and day to `rows`: one of its floats in the chunk codec and one of its histograms
/// in the histogram chunk codec, each only when there are some; returns how many.
///
/// # Errors
/// [`StorageError::Corrupt`] when the samples cannot be encoded (out of order).
pub(super) fn put_chunk_rows(
    rows: &mut Vec<u8>,
    bucket: u16,
    id: u64,
    day: u16,
    version: i64,
    resolved: &Resolved,
) -> Result<u64, StorageError> {
    let mut data = Vec::new();
    let mut count = 0;
    if !resolved.samples.is_empty() {
        chunk::encode(&resolved.samples, chunk::ZSTD_LEVEL, &mut data)
            .map_err(|_| StorageError::Corrupt { what: "samples to seal" })?;
        put_chunk_row(rows, bucket, id, day, version, &data);
        count += 1;
    }
    if !resolved.histograms.is_empty() {
        data.clear();
        let owned: Vec<(i64, Histogram)> =
            resolved.histograms.iter().map(|h| (h.timestamp_ms, (*h.histogram).clone())).collect();
        histogram_chunk::encode(&owned, &mut data).map_err(|_| StorageError::Corrupt { what: "histograms to seal" })?;
        put_chunk_row(rows, bucket, id, day, version, &data);
        count += 1;
    }
    Ok(count)
}

fn put_chunk_row(rows: &mut Vec<u8>, bucket: u16, id: u64, day: u16, version: i64, data: &[u8]) {
    rows.extend_from_slice(&bucket.to_le_bytes());
    rows.extend_from_slice(&id.to_le_bytes());
    rows.extend_from_slice(&day.to_le_bytes());
    rows.extend_from_slice(&version.to_le_bytes());
    put_str(rows, data);
}
