//! Deleting samples of chosen series in a time range (the admin `delete_series` API).
//!
//! Runs on the writer thread (no commit in flight) while the caller holds the seal lock (no seal
//! reads the rows being removed), so the deletion is one consistent step per window:
//! - hot rows in the range are removed key by key;
//! - a chunk holding samples in the range is rewritten without them (removed when nothing is
//!   left); its key follows its new first timestamp;
//! - a series left without samples in a window loses its window-index row there, so series and
//!   label queries stop listing it for that window.
//!
//! The series' labels, postings and id stay: a later write of the same series reuses its id.

use super::chunk;
use super::error::{Result, StorageError};
use super::keys;
use super::seal::ZSTD_LEVEL;
use super::series::SeriesId;
use super::shared::Shared;
use super::window::Window;
use crate::sample::Sample;

/// Rows per write batch while deleting (bounds memory).
const BATCH_ROWS: usize = 50_000;

/// What to delete.
#[derive(Clone, Debug)]
pub struct DeleteRange {
    /// The series.
    pub ids: Vec<SeriesId>,
    /// First millisecond deleted.
    pub start_ms: i64,
    /// Last millisecond deleted (inclusive).
    pub end_ms: i64,
}

/// What a deletion removed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeleteOutcome {
    /// Samples removed.
    pub samples: u64,
    /// Chunks rewritten or removed.
    pub chunks: u64,
    /// (window, series) pairs left empty, whose window-index rows were removed.
    pub emptied: u64,
}

impl std::ops::AddAssign for DeleteOutcome {
    fn add_assign(&mut self, other: Self) {
        self.samples += other.samples;
        self.chunks += other.chunks;
        self.emptied += other.emptied;
    }
}

/// Deletes `range` in window `w`; returns what was removed and whether any index row was
/// removed (the writer then forgets its cached presence set for the window).
///
/// # Errors
/// Engine errors and corrupt rows.
pub fn delete_in_window(
    sh: &Shared,
    w: &Window,
    range: &DeleteRange,
    durability: Option<fjall::PersistMode>,
) -> Result<DeleteOutcome> {
    let mut out = DeleteOutcome::default();
    let mut batch = sh.db.batch().durability(durability);
    let (start, end) = (range.start_ms.max(0), range.end_ms);
    if start > end {
        return Ok(out);
    }
    for &id in &range.ids {
        let bucket = sh.bucketing.bucket(id);
        let prefix = keys::series_prefix(bucket, id);
        let mut present = false;
        if let Some(ks) = &w.points {
            for guard in ks.range(keys::point_key(bucket, id, end)..=keys::point_key(bucket, id, start)) {
                batch.remove(ks, guard.key()?);
                out.samples += 1;
            }
            present |= has_rows_outside(ks, &prefix, start, end)?;
        }
        if let Some((_, ks)) = &w.chunks {
            let mut buf = Vec::new();
            for guard in ks.prefix(prefix) {
                let (key, value) = guard.into_inner()?;
                let mut samples: Vec<Sample> = Vec::new();
                chunk::decode(&value, &mut samples).map_err(|_| StorageError::Corrupt { what: "chunk" })?;
                let before = samples.len();
                samples.retain(|s| !(start..=end).contains(&s.timestamp_ms));
                if samples.len() < before {
                    out.samples += (before - samples.len()) as u64;
                    out.chunks += 1;
                    batch.remove(ks, key);
                    if let Some(head) = samples.first() {
                        buf.clear();
                        chunk::encode(&samples, ZSTD_LEVEL, &mut buf)
                            .map_err(|_| StorageError::Corrupt { what: "unsorted chunk" })?;
                        batch.insert(ks, keys::point_key(bucket, id, head.timestamp_ms), buf.clone());
                    }
                }
                present |= !samples.is_empty();
            }
        }
        if !present {
            let index = keys::window_index_key(id);
            let indexed = w.points.iter().chain(w.chunks.as_ref().map(|(_, ks)| ks));
            for ks in indexed {
                if ks.contains_key(index)? {
                    batch.remove(ks, index);
                    out.emptied += 1;
                }
            }
        }
        if batch.len() >= BATCH_ROWS {
            std::mem::replace(&mut batch, sh.db.batch().durability(durability)).commit()?;
        }
    }
    batch.commit()?;
    Ok(out)
}

/// Whether the series under `prefix` has hot rows outside `[start, end]`: its newest row is
/// after `end` or its oldest before `start` (keys sort newest first).
fn has_rows_outside(ks: &fjall::Keyspace, prefix: &[u8], start: i64, end: i64) -> Result<bool> {
    let ts = |key: &[u8]| {
        keys::decode_point_key(key).map(|(_, _, ts)| ts).ok_or(StorageError::Corrupt { what: "point key" })
    };
    let mut rows = ks.prefix(prefix);
    let Some(newest) = rows.next() else { return Ok(false) };
    let newest = ts(&newest.key()?)?;
    if newest > end || newest < start {
        return Ok(true);
    }
    match rows.next_back() {
        Some(oldest) => Ok(ts(&oldest.key()?)? < start),
        None => Ok(false),
    }
}
