//! Tier rows: a sealed window's downsampled points, one row per (series, interval) holding the
//! series' points of that interval in the window as one tier run ([`super::tier_run`]), keyed
//! by [`keys::tier_key`].
//!
//! Invariant: a tier row of a series holds exactly [`tier::points_of`] of the series' float
//! samples in the window's chunks (staleness markers included), for a series without native
//! histograms there. A seal writes rows only where their points are dense enough to be worth
//! reading ([`tier::MIN_DENSITY`]); readers cut the points of a missing row from the raw
//! samples. A downsampled window (see `lifecycle/downsample.rs`) has rows and no raw samples. Whoever rewrites a series' chunks rewrites its tier rows in the same batch
//! ([`put_series`] or [`rebuild_series`]), so the two never disagree once the batch is visible.
//!
//! A window `[start, start + W)` with intervals dividing `W` has a point ending at `start`
//! holding only a sample at `start`; the window before has a point with the same end holding
//! its samples after `start - interval`. Readers merge the two, earlier first.

use crate::sample::Sample;
use crate::storage::error::{Result, StorageError};
use crate::storage::format::keys;
use crate::storage::format::tier_run;
use crate::storage::series_id::SeriesId;
use crate::tier::{self, FloatPoint};

fn corrupt(_: tier_run::TierRunError) -> StorageError {
    StorageError::Corrupt { what: "tier run" }
}

/// Writes (into `batch`, for `ks`) the tier rows of one series for each of `intervals_ms`,
/// cut from its float `samples` (ascending, the whole of the series in the window); an interval
/// whose points would be empty (no samples) or [`tier::too_sparse`] for `min_density` has its
/// row removed. Returns the rows written.
///
/// # Errors
/// [`StorageError::Corrupt`] when the samples are not ascending (the codec refuses them).
pub fn put_series(
    batch: &mut fjall::OwnedWriteBatch,
    ks: &fjall::Keyspace,
    (bucket, id): (u16, SeriesId),
    samples: &[Sample],
    (intervals_ms, min_density): (&[i64], u64),
    buf: &mut Vec<u8>,
) -> Result<usize> {
    let mut rows = 0;
    for &interval in intervals_ms {
        let key = keys::tier_key(bucket, id, interval);
        // Sparse for sure (each point stands for at most its samples): not even cut.
        let intervals = tier::intervals_holding(samples, interval);
        if intervals > tier::DENSITY_MIN_POINTS && (samples.len() as u64) < min_density.saturating_mul(intervals as u64)
        {
            batch.remove(ks, key);
            continue;
        }
        let points = tier::points_of(samples, interval);
        if points.is_empty() || tier::too_sparse(&points, min_density) {
            batch.remove(ks, key);
            continue;
        }
        buf.clear();
        tier_run::encode(interval, &points, buf).map_err(corrupt)?;
        batch.insert(ks, key, buf.clone());
        rows += 1;
    }
    Ok(rows)
}

/// The intervals (ms, ascending) of the tier rows `ks` holds for a series.
///
/// # Errors
/// Engine errors.
pub fn intervals_of(ks: &fjall::Keyspace, bucket: u16, id: SeriesId) -> Result<Vec<i64>> {
    let mut out = Vec::new();
    for guard in ks.prefix(keys::tier_series_prefix(bucket, id)) {
        let key = guard.key()?;
        if let Some((_, _, interval)) = keys::decode_point_key(&key) {
            out.push(interval);
        }
    }
    out.sort_unstable();
    Ok(out)
}

/// Rewrites the tier rows `ks` already holds for a series from its new `samples` (after a
/// deletion rewrote its chunks), removing those now sparser than `min_density`; nothing when
/// it holds none. Returns the rows written.
///
/// # Errors
/// As [`put_series`], and engine errors.
pub fn rebuild_series(
    batch: &mut fjall::OwnedWriteBatch,
    ks: &fjall::Keyspace,
    (bucket, id): (u16, SeriesId),
    (samples, min_density): (&[Sample], u64),
    buf: &mut Vec<u8>,
) -> Result<usize> {
    let intervals = intervals_of(ks, bucket, id)?;
    put_series(batch, ks, (bucket, id), samples, (&intervals, min_density), buf)
}

/// Removes from every tier row of a series in `ks` the points whose interval `(end - interval,
/// end]` meets `[start_ms, end_ms]` (the deletion of a range in a downsampled window, where
/// the raw samples to cut a point anew are gone: a point partly in the range goes whole).
/// Returns the raw samples the removed points stood for (of the finest row) and whether any
/// point is left.
///
/// # Errors
/// Engine errors; [`StorageError::Corrupt`] for a row that does not decode.
pub fn delete_range(
    batch: &mut fjall::OwnedWriteBatch,
    ks: &fjall::Keyspace,
    (bucket, id): (u16, SeriesId),
    (start_ms, end_ms): (i64, i64),
    buf: &mut Vec<u8>,
) -> Result<(u64, bool)> {
    let (mut removed_samples, mut left) = (None, false);
    for interval in intervals_of(ks, bucket, id)? {
        let Some(points) = read(ks, bucket, id, interval)? else { continue };
        let (gone, kept): (Vec<_>, Vec<_>) =
            points.into_iter().partition(|(end, _)| *end >= start_ms && end.saturating_sub(interval) < end_ms);
        removed_samples.get_or_insert_with(|| gone.iter().map(|(_, p)| p.count).sum::<u64>());
        left |= !kept.is_empty();
        if gone.is_empty() {
            continue;
        }
        let key = keys::tier_key(bucket, id, interval);
        if kept.is_empty() {
            batch.remove(ks, key);
        } else {
            buf.clear();
            tier_run::encode(interval, &kept, buf).map_err(corrupt)?;
            batch.insert(ks, key, buf.clone());
        }
    }
    Ok((removed_samples.unwrap_or(0), left))
}

/// The points of one series' tier row of `interval_ms` in `ks`, ascending by end; `None` when
/// there is no such row.
///
/// # Errors
/// Engine errors; [`StorageError::Corrupt`] for a row that does not decode or whose interval is
/// not the one its key names.
pub fn read(
    ks: &fjall::Keyspace,
    bucket: u16,
    id: SeriesId,
    interval_ms: i64,
) -> Result<Option<Vec<(i64, FloatPoint)>>> {
    let mut points = Vec::new();
    Ok(read_into(ks, (bucket, id, interval_ms), &mut points)?.then_some(points))
}

/// [`read`] into `out` (cleared first, its allocation reused): false when there is no such
/// row (`out` then empty).
///
/// # Errors
/// As [`read`].
pub fn read_into(ks: &fjall::Keyspace, key: (u16, SeriesId, i64), out: &mut Vec<(i64, FloatPoint)>) -> Result<bool> {
    out.clear();
    read_some_append(ks, key, out, tier_run::Decoded::ALL)
}

/// [`read_into`] decoding only `what` of each point (see [`tier_run::Decoded`]), appended to
/// `out` instead of replacing it (what was there stays; on an error `out` is as it was).
///
/// # Errors
/// As [`read_into`].
pub fn read_some_append(
    ks: &fjall::Keyspace,
    (bucket, id, interval_ms): (u16, SeriesId, i64),
    out: &mut Vec<(i64, FloatPoint)>,
    what: tier_run::Decoded,
) -> Result<bool> {
    let Some(bytes) = ks.get(keys::tier_key(bucket, id, interval_ms))? else { return Ok(false) };
    let base = out.len();
    let interval = tier_run::decode_some_append(&bytes, out, what).map_err(corrupt)?;
    if interval != interval_ms {
        out.truncate(base);
        return Err(StorageError::Corrupt { what: "tier run interval" });
    }
    Ok(true)
}
