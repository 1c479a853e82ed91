//! Re-sealing: folding the overlay of a sealed window (hot rows of late samples) into the
//! window's visible chunks keyspace, rewriting only the series the overlay holds. The first seal
//! of a window writes a whole new chunks generation (see `seal.rs`); a late sample afterwards
//! costs the rewrite of its own series' chunks, not of the window.
//!
//! One pass over the overlay keyspace, in key order:
//! - point rows (keys of [`keys::POINT_KEY_LEN`] bytes, bucket `< MAX_BUCKETS`) are gathered per
//!   series; each series' chunks are read, merged with its overlay samples (the overlay wins on
//!   equal timestamps, as readers merge), re-encoded, and written over the series' chunk rows
//!   (a row no longer needed is removed);
//! - index rows (every key whose first byte is `0xFF`: the window's series index and postings)
//!   are copied verbatim into the chunks keyspace.
//!
//! Rows go to the chunks keyspace in atomic fjall batches of whole series, together with the
//! window's sealed-sample count. The overlay is never written here, and the merged chunks of a
//! series read, merged with the overlay, exactly as the old chunks did: so a reader racing the
//! pass (whichever keyspace it reads first) and a crash after any batch see every sample, and
//! the next seal simply merges again. The overlay is dropped at the end by the writer thread,
//! and only when no commit reached it while the pass ran (the window's write counter, see
//! [`super::window::Windows::committed`]); its keyspace deletion follows the chunks' flush to
//! tables.
//!
//! The overlay's rows are not removed batch by batch: the writer thread's head flush rewrites an
//! overlay run in place (same key) while this pass runs, and removing the key it read would
//! drop the samples the flush just added.

use std::sync::mpsc::{self, SyncSender};

use super::seal::SealOutcome;
use super::window::WindowKey;
use crate::sample::{HistogramSample, Sample};
use crate::storage::error::{Result, StorageError};
use crate::storage::format::chunk;
use crate::storage::format::chunk::{CHUNK_SAMPLES, ZSTD_LEVEL};
use crate::storage::format::histogram_run;
use crate::storage::format::keys;
use crate::storage::format::run;
use crate::storage::format::tier_rows;
use crate::storage::index::postings;
use crate::storage::series_id::SeriesId;
use crate::storage::shared::Shared;
use crate::storage::write::{Command, DropOverlay, SealSwap};

/// Rows per write batch while re-sealing (bounds memory); a series is never split.
const BATCH_ROWS: usize = 20_000;

/// What a key of a window keyspace is.
enum RowKind {
    /// A run or chunk of series `id` in `bucket`.
    Point(u16, SeriesId),
    /// A histogram run of series `id` in `bucket`.
    Histogram(u16, SeriesId),
    /// A start-timestamp row (a change point, see `format/start_ts.rs`): copied as it is, replacing
    /// the chunks' row of the same series and timestamp.
    Start,
    /// An index row: copied as it is.
    Index,
}

/// Classifies a key of a window keyspace.
///
/// # Errors
/// [`StorageError::Corrupt`] for a key that is neither a point row nor an index row.
fn classify(key: &[u8]) -> Result<RowKind> {
    if key.first() == Some(&0xFF) {
        return Ok(RowKind::Index);
    }
    match keys::decode_point_key(key) {
        Some((bucket, id, _)) if bucket < keys::MAX_BUCKETS => Ok(RowKind::Point(bucket, id)),
        Some((field, _, _)) if keys::start_bucket(field).is_some() => Ok(RowKind::Start),
        Some((field, id, _)) => keys::histogram_bucket(field)
            .map(|bucket| RowKind::Histogram(bucket, id))
            .ok_or(StorageError::Corrupt { what: "overlay key" }),
        _ => Err(StorageError::Corrupt { what: "overlay key" }),
    }
}

/// Samples of rows met newest first (as keys sort), ascending. Runs of one series never overlap
/// within a keyspace, so reversing the rows orders the samples.
fn ascending(rows_newest_first: Vec<Vec<Sample>>) -> Vec<Sample> {
    rows_newest_first.into_iter().rev().flatten().collect()
}

/// The re-seal pass in progress: the open batch and the running figures.
struct Pass<'a> {
    sh: &'a Shared,
    key: WindowKey,
    chunks: &'a fjall::Keyspace,
    batch: fjall::OwnedWriteBatch,
    /// Samples the visible chunks hold (the manifest figure), kept current batch by batch.
    sealed_samples: u64,
    outcome: SealOutcome,
    buf: Vec<u8>,
}

impl<'a> Pass<'a> {
    fn new(sh: &'a Shared, key: WindowKey, chunks: &'a fjall::Keyspace) -> Result<Self> {
        let sealed_samples = sh.windows.sealed_samples(&sh.meta, key)?;
        Ok(Self {
            sh,
            key,
            chunks,
            batch: Self::new_batch(sh),
            sealed_samples,
            outcome: SealOutcome {
                start_ms: key.start_ms,
                class: key.class,
                series: 0,
                samples: 0,
                chunks: 0,
                tier_rows: 0,
                swap: SealSwap::WindowGone,
            },
            buf: Vec::new(),
        })
    }

    fn new_batch(sh: &Shared) -> fjall::OwnedWriteBatch {
        sh.db.batch().durability(Some(fjall::PersistMode::Buffer))
    }

    /// Rewrites the chunks of one series with `hot` (ascending) merged in.
    fn merge_series(&mut self, bucket: u16, id: SeriesId, hot: &[Sample]) -> Result<()> {
        let mut old_keys = Vec::new();
        let mut old_rows = Vec::new();
        for guard in self.chunks.prefix(keys::series_prefix(bucket, id)) {
            let (key, value) = guard.into_inner()?;
            let mut samples = Vec::new();
            run::decode_row(&key, &value, &mut samples)?;
            old_keys.push(key);
            old_rows.push(samples);
        }
        let old = ascending(old_rows);
        let mut merged = Vec::with_capacity(old.len() + hot.len());
        run::merge_into(&mut merged, &old, hot);
        let mut new_keys = Vec::new();
        for part in merged.chunks(CHUNK_SAMPLES) {
            let Some(first) = part.first() else { continue };
            self.buf.clear();
            chunk::encode(part, ZSTD_LEVEL, &mut self.buf)
                .map_err(|_| StorageError::Corrupt { what: "unsorted samples while re-sealing" })?;
            let key = keys::point_key(bucket, id, first.timestamp_ms);
            self.batch.insert(self.chunks, key, self.buf.clone());
            new_keys.push(key);
        }
        // The tier rows follow the chunks in the same batch: those the window has for the
        // series and those of the configured intervals, where dense enough (as a seal writes
        // them).
        let mut intervals = tier_rows::intervals_of(self.chunks, bucket, id)?;
        intervals.extend_from_slice(&self.sh.tier_intervals_ms);
        intervals.sort_unstable();
        intervals.dedup();
        self.outcome.tier_rows += tier_rows::put_series(
            &mut self.batch,
            self.chunks,
            (bucket, id),
            &merged,
            (&intervals, self.sh.tier_min_density),
            &mut self.buf,
        )?;
        // A key rewritten in this batch must not also be removed in it (same sequence number).
        for key in old_keys {
            if !new_keys.iter().any(|k| k.as_slice() == &*key) {
                self.batch.remove(self.chunks, key);
            }
        }
        self.sealed_samples = (self.sealed_samples + merged.len() as u64).saturating_sub(old.len() as u64);
        self.outcome.series += 1;
        self.outcome.samples += merged.len();
        self.outcome.chunks += new_keys.len();
        if self.batch.len() >= BATCH_ROWS {
            self.commit()?;
        }
        Ok(())
    }

    /// Merges the overlay's histograms of one series (ascending) into the chunks keyspace's.
    fn merge_histograms(&mut self, bucket: u16, id: SeriesId, hot: &[HistogramSample]) -> Result<()> {
        self.outcome.chunks += histogram_run::write(&mut self.batch, self.chunks, bucket, id, hot)?;
        self.sealed_samples += hot.len() as u64;
        self.outcome.samples += hot.len();
        if self.batch.len() >= BATCH_ROWS {
            self.commit()?;
        }
        Ok(())
    }

    /// Copies an index row of the overlay into the chunks keyspace. A postings block keeps only
    /// the series not yet indexed in the chunks keyspace (an indexed series has all its
    /// postings there already); rows come in key order, so the window-index rows this pass
    /// copies, which sort after every postings row, are not seen yet.
    fn copy_index_row(&mut self, key: fjall::Slice, value: fjall::Slice) -> Result<()> {
        let (key, value) = if key.starts_with(&keys::WINDOW_POSTINGS_PREFIX) {
            let corrupt = || StorageError::Corrupt { what: "window postings key" };
            let (pair, first) =
                key.split_at_checked(key.len().checked_sub(8).ok_or_else(corrupt)?).ok_or_else(corrupt)?;
            let first = u64::from_be_bytes(<[u8; 8]>::try_from(first).map_err(|_| corrupt())?);
            let mut ids = Vec::new();
            postings::decode_block(first, &value, &mut ids)?;
            let mut new = Vec::with_capacity(ids.len());
            for id in ids {
                if !self.chunks.contains_key(keys::window_index_key(id))? {
                    new.push(id);
                }
            }
            let Some(&first) = new.first() else { return Ok(()) };
            let mut block = Vec::new();
            postings::encode_block(&new, &mut block);
            let mut key = pair.to_vec();
            key.extend_from_slice(&first.to_be_bytes());
            (fjall::Slice::from(key), fjall::Slice::from(block))
        } else {
            (key, value)
        };
        self.batch.insert(self.chunks, key, value);
        if self.batch.len() >= BATCH_ROWS {
            self.commit()?;
        }
        Ok(())
    }

    /// Commits the open batch with the current sealed-sample count.
    fn commit(&mut self) -> Result<()> {
        let sh = self.sh;
        self.batch.insert(&sh.meta, sh.windows.sealed_samples_key(self.key), self.sealed_samples.to_be_bytes());
        std::mem::replace(&mut self.batch, Self::new_batch(sh)).commit()?;
        // It may have indexed series in the visible chunks keyspace.
        sh.index.changed();
        Ok(())
    }
}

/// Merges the overlay `points` of the sealed window `key` into its visible
/// `chunks`, then asks the writer thread to drop the overlay unless a commit reached it since
/// the caller read `writes_at_start` (before anything of the overlay was read). The caller holds
/// the seal lock.
///
/// # Errors
/// Engine errors and corrupt rows; the window reads as before (the next seal merges again).
pub fn merge_overlay(
    sh: &Shared,
    writer: &SyncSender<Command>,
    (key, chunks, points): (WindowKey, &fjall::Keyspace, &fjall::Keyspace),
    writes_at_start: u64,
) -> Result<SealOutcome> {
    let mut pass = Pass::new(sh, key, chunks)?;
    let mut series: Option<(u16, SeriesId)> = None;
    let mut rows: Vec<Vec<Sample>> = Vec::new();
    let mut histogram_series: Option<(u16, SeriesId)> = None;
    let mut histogram_rows: Vec<Vec<HistogramSample>> = Vec::new();
    for guard in points.iter() {
        let (key, value) = guard.into_inner()?;
        match classify(&key)? {
            RowKind::Index => pass.copy_index_row(key, value)?,
            RowKind::Start => {
                pass.batch.insert(chunks, key, value);
            }
            RowKind::Histogram(bucket, id) => {
                if let Some((b, i)) = histogram_series.filter(|s| *s != (bucket, id)) {
                    let rows = std::mem::take(&mut histogram_rows);
                    pass.merge_histograms(b, i, &rows.into_iter().rev().flatten().collect::<Vec<_>>())?;
                }
                histogram_series = Some((bucket, id));
                let mut run = Vec::new();
                histogram_run::decode(&value, &mut run)?;
                histogram_rows.push(run);
            }
            RowKind::Point(bucket, id) => {
                if series.is_some_and(|s| s != (bucket, id)) {
                    if let Some((b, i)) = series {
                        pass.merge_series(b, i, &ascending(std::mem::take(&mut rows)))?;
                    }
                }
                series = Some((bucket, id));
                let mut run = Vec::new();
                run::decode_row(&key, &value, &mut run)?;
                rows.push(run);
            }
        }
    }
    if let Some((b, i)) = series {
        pass.merge_series(b, i, &ascending(rows))?;
    }
    if let Some((b, i)) = histogram_series {
        pass.merge_histograms(b, i, &histogram_rows.into_iter().rev().flatten().collect::<Vec<_>>())?;
    }
    pass.commit()?;
    // The merged chunks go to tables before the overlay's keyspace is deleted: their durability
    // must not rest on replaying a journal across keyspace deletions.
    chunks.rotate_memtable_and_wait()?;
    let mut outcome = pass.outcome;
    let (reply, rx) = mpsc::sync_channel(1);
    writer
        .send(Command::DropOverlay(DropOverlay { key, writes_at_start }, reply))
        .map_err(|_| StorageError::ShuttingDown)?;
    outcome.swap = rx.recv().map_err(|_| StorageError::ShuttingDown)??;
    Ok(outcome)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_point_or_index_rows() {
        assert!(matches!(classify(&keys::point_key(7, 42, 1_000)), Ok(RowKind::Point(7, 42))));
        assert!(matches!(classify(&keys::window_index_key(42)), Ok(RowKind::Index)));
        assert!(matches!(classify(&keys::start_key(7, 42, 1_000)), Ok(RowKind::Start)));
        // Postings rows of a window (`0xFFFE ...`) and any other 0xFF-led key are index rows.
        assert!(matches!(classify(&[0xFF, 0xFE, b'j', 0, b'x', 0, 1]), Ok(RowKind::Index)));
        assert!(matches!(classify(&[0xFF]), Ok(RowKind::Index)));
        // A point-sized key whose bucket is out of range, and keys of other lengths, are corrupt.
        assert!(classify(&keys::point_key(keys::MAX_BUCKETS, 1, 1)).is_err());
        assert!(classify(&[0u8; 17]).is_err());
        assert!(classify(&[]).is_err());
    }
}
