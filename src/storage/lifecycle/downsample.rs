//! Downsampling old windows (`--downsample 7d:5m,60d:1h`): once a sealed window lies entirely
//! before an age, its float series keep only their tier rows of that age's interval and the
//! coarser ones; their raw samples and finer tier rows go. What a window keeps is its *kept
//! intervals* (ascending), recorded with it ([`super::window::Windows::downsampled_key`]).
//!
//! One pass writes the window's next chunks generation, like a seal, from the visible one:
//! - per series of the window's index, with float samples and no native histograms: a tier row
//!   per kept interval, copied when it exists, else cut from the raw samples, else merged from
//!   the finest tier row whose interval divides it (5m points into an hour, see
//!   [`crate::tier::coarser`]); no raw chunk;
//! - a series with native histograms (tiers hold floats only) keeps its raw chunks and rows as
//!   they are;
//! - every other row (the window index and postings, histogram runs, start timestamps) is copied.
//!
//! The generation is invisible until the writer thread marks it, its kept intervals and its
//! sample count in one fsynced manifest batch, and only when the window has had no write since
//! the pass began (nothing in the head, no overlay): a `kill -9` at any point leaves the window
//! as it was (the unfinished generation is the window's spare, reused by its next rewrite) or
//! downsampled, never half. From then on writes of samples into the window are refused
//! ([`crate::storage::StorageError::Downsampled`]): a sample folded into an aggregate cannot be
//! told apart from it again.

use std::collections::HashSet;
use std::sync::mpsc::{self, SyncSender};

use super::window::{Window, WindowKey};
use crate::sample::MAX_TIMESTAMP_MS;
use crate::storage::error::{Result, StorageError};
use crate::storage::format::{histogram_run, keys, tier_rows, tier_run};
use crate::storage::read::select::{read_series, universe};
use crate::storage::series_id::SeriesId;
use crate::storage::shared::Shared;
use crate::storage::write::Command;
use crate::tier;

/// Rows per write batch while downsampling (bounds memory); a series is never split.
const BATCH_ROWS: usize = 20_000;

/// One age of `--downsample`: windows entirely older than `after_ms` keep nothing finer than
/// `interval_ms`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DownsampleAge {
    /// The age, ms (> 0).
    pub after_ms: i64,
    /// The finest tier interval kept past it, ms.
    pub interval_ms: i64,
}

/// The finest interval a window ending at `end_ms` keeps at wall-clock `now_ms` under `ages`:
/// the coarsest interval among the ages it has passed; `None` while it passed none (raw kept).
pub fn due(ages: &[DownsampleAge], end_ms: i64, now_ms: i64) -> Option<i64> {
    ages.iter().filter(|a| end_ms <= now_ms.saturating_sub(a.after_ms)).map(|a| a.interval_ms).max()
}

/// What one downsampling pass did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DownsampleOutcome {
    /// The window.
    pub start_ms: i64,
    /// Its retention class.
    pub class: crate::storage::lifecycle::class::ClassId,
    /// The intervals it keeps now, ascending.
    pub kept_ms: Vec<i64>,
    /// Series left with tier rows only.
    pub series_tiered: usize,
    /// Series that keep their raw samples (native histograms).
    pub series_raw: usize,
    /// Raw float samples dropped.
    pub samples_dropped: u64,
    /// False when a write reached the window meanwhile: nothing changed, the next pass retries.
    pub installed: bool,
}

/// The last step of downsampling, on the writer thread (see `write/mod.rs`).
pub struct FinishDownsample {
    /// The window.
    pub key: WindowKey,
    /// Generation of the new chunks keyspace.
    pub generation: u32,
    /// The new chunks keyspace, completely written.
    pub chunks: fjall::Keyspace,
    /// What it keeps, ascending.
    pub kept_ms: Vec<i64>,
    /// The window's write counter when the pass started.
    pub writes_at_start: u64,
    /// Samples left in raw rows.
    pub samples: u64,
}

/// Downsamples the sealed window `key` so that it keeps nothing finer than
/// `finest_ms` (configured intervals of `sh` at least as coarse are kept too). `None` when
/// there is nothing to do now: no such window, not sealed, late samples not yet re-sealed, or
/// already that coarse.
///
/// # Errors
/// Engine errors and corrupt rows; the window stays as it was.
pub fn downsample_window(
    sh: &Shared,
    writer: &SyncSender<Command>,
    key: WindowKey,
    finest_ms: i64,
) -> Result<Option<DownsampleOutcome>> {
    let start_ms = key.start_ms;
    let _one_at_a_time = sh.seal_lock.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let Some(w) = sh.windows.get(key) else { return Ok(None) };
    let window_end = start_ms.saturating_add(sh.windows.window_ms());
    if w.chunks.is_none()
        || w.points.is_some()
        || w.finest_kept().is_some_and(|f| f >= finest_ms)
        || sh.head.any_in(start_ms, window_end)
    {
        return Ok(None);
    }
    let mut kept_ms: Vec<i64> = sh
        .tier_intervals_ms
        .iter()
        .chain(w.downsampled.iter().flat_map(|d| d.iter()))
        .copied()
        .filter(|&i| i > finest_ms)
        .collect();
    kept_ms.push(finest_ms);
    kept_ms.sort_unstable();
    kept_ms.dedup();
    tracing::debug!(window = start_ms, kept_ms = ?kept_ms, "downsampling window");
    let writes_at_start = sh.windows.writes(key);
    let (generation, chunks) = super::seal::new_generation(sh, key)?;
    let mut outcome = match write_downsampled(sh, &w, &chunks, &kept_ms) {
        Ok(outcome) => outcome,
        Err(e) => {
            sh.windows.put_spare(key, (generation, chunks));
            return Err(e);
        }
    };
    let samples = sh.windows.sealed_samples(&sh.meta, key)?.saturating_sub(outcome.samples_dropped);
    let (reply, rx) = mpsc::sync_channel(1);
    let finish = FinishDownsample { key, generation, chunks, kept_ms, writes_at_start, samples };
    writer.send(Command::FinishDownsample(finish, reply)).map_err(|_| StorageError::ShuttingDown)?;
    outcome.installed = rx.recv().map_err(|_| StorageError::ShuttingDown)??;
    tracing::debug!(window = start_ms, installed = outcome.installed, "downsampling finished");
    Ok(Some(outcome))
}

/// Writes the downsampled generation of `w` into `dst` (not yet visible).
fn write_downsampled(sh: &Shared, w: &Window, dst: &fjall::Keyspace, kept_ms: &[i64]) -> Result<DownsampleOutcome> {
    let Some((_, src)) = &w.chunks else { return Err(StorageError::Corrupt { what: "downsampling a hot window" }) };
    let mut outcome = DownsampleOutcome {
        start_ms: w.start_ms,
        class: w.class,
        kept_ms: kept_ms.to_vec(),
        series_tiered: 0,
        series_raw: 0,
        samples_dropped: 0,
        installed: false,
    };
    let new_batch = || sh.db.batch().durability(Some(fjall::PersistMode::Buffer));
    let mut batch = new_batch();
    let mut buf = Vec::new();
    // Series whose raw rows are not copied.
    let mut tiered: HashSet<SeriesId> = HashSet::new();
    for id in universe(std::slice::from_ref(w))? {
        let bucket = sh.bucketing.bucket(id);
        if sh.histograms_stored() && histogram_run::any_of(src, bucket, id)? {
            outcome.series_raw += 1;
            continue;
        }
        let existing = tier_rows::intervals_of(src, bucket, id)?;
        let mut samples = Vec::new();
        read_series(std::slice::from_ref(w), None, bucket, id, 0, MAX_TIMESTAMP_MS, &mut samples)?;
        if samples.is_empty() && existing.is_empty() {
            continue;
        }
        for &interval in kept_ms {
            let key = keys::tier_key(bucket, id, interval);
            if existing.contains(&interval) {
                if let Some(row) = src.get(key)? {
                    batch.insert(dst, key, row);
                }
                continue;
            }
            let points = if samples.is_empty() {
                // Raw samples gone already: merged from the finest finer tier dividing it.
                let Some(&finer) = existing.iter().filter(|&&f| f < interval && interval.rem_euclid(f) == 0).max()
                else {
                    continue;
                };
                let fine = tier_rows::read(src, bucket, id, finer)?.unwrap_or_default();
                tier::coarser(&fine, interval)
            } else {
                tier::points_of(&samples, interval)
            };
            if points.is_empty() {
                continue;
            }
            buf.clear();
            tier_run::encode(interval, &points, &mut buf)
                .map_err(|_| StorageError::Corrupt { what: "unsorted samples while downsampling" })?;
            batch.insert(dst, key, buf.clone());
        }
        tiered.insert(id);
        outcome.series_tiered += 1;
        outcome.samples_dropped += samples.len() as u64;
        if batch.len() >= BATCH_ROWS {
            std::mem::replace(&mut batch, new_batch()).commit()?;
        }
    }
    // Everything else, as it is: raw rows of the series kept raw, histogram runs, start
    // timestamps, the window index and postings.
    for guard in src.iter() {
        let (key, value) = guard.into_inner()?;
        let index_row = key.first() == Some(&keys::INDEX_ROW_BYTE);
        if let Some((field, id, _)) = keys::decode_point_key(&key).filter(|_| !index_row) {
            if keys::tier_bucket(field).is_some() || (field < keys::MAX_BUCKETS && tiered.contains(&id)) {
                continue;
            }
        }
        batch.insert(dst, key, value);
        if batch.len() >= BATCH_ROWS {
            std::mem::replace(&mut batch, new_batch()).commit()?;
        }
    }
    batch.commit()?;
    dst.rotate_memtable()?;
    Ok(outcome)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: i64 = 86_400_000;

    #[test]
    fn a_window_keeps_the_coarsest_interval_of_the_ages_it_passed() {
        let ages = [
            DownsampleAge { after_ms: 7 * DAY, interval_ms: 300_000 },
            DownsampleAge { after_ms: 60 * DAY, interval_ms: 3_600_000 },
        ];
        let now = 100 * DAY;
        assert_eq!(due(&ages, now - 6 * DAY, now), None);
        assert_eq!(due(&ages, now - 7 * DAY, now), Some(300_000));
        assert_eq!(due(&ages, now - 59 * DAY, now), Some(300_000));
        assert_eq!(due(&ages, now - 60 * DAY, now), Some(3_600_000));
        assert_eq!(due(&[], 0, now), None);
    }
}
