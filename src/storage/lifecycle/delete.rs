//! Deleting samples of chosen series in a time range (the admin `delete_series` API).
//!
//! Runs on the writer thread (no commit in flight) while the caller holds the seal lock (no seal
//! reads the rows being removed), so the deletion is one consistent step per window:
//! - a run (hot) or chunk (sealed) holding samples in the range is rewritten without them
//!   (removed when nothing is left); its key follows its new first timestamp; a sealed series'
//!   tier rows are rebuilt from the samples left (removed when none are); in a downsampled
//!   window, where a series may have tier rows and no raw samples, its tier points whose
//!   interval meets the range are removed whole;
//! - the head was flushed first (the writer does that before every deletion);
//! - a series left without samples in a window loses its window-index row and its window
//!   postings there, so series and label queries stop listing it for that window.
//!
//! The series' labels and id stay: a later write of the same series reuses its id.

use super::window::Window;
use crate::sample::Sample;
use crate::storage::error::{Result, StorageError};
use crate::storage::format::chunk;
use crate::storage::format::histogram_run;
use crate::storage::format::keys;
use crate::storage::format::run;
use crate::storage::format::start_ts;
use crate::storage::format::tier_rows;
use crate::storage::index::postings;
use crate::storage::series_id::SeriesId;
use crate::storage::shared::Shared;

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
    // Per keyspace holding a window index: the series left without data in it.
    let mut indexed: Vec<(&fjall::Keyspace, Vec<(SeriesId, fjall::Slice)>)> =
        w.points.iter().chain(w.chunks.as_ref().map(|(_, ks)| ks)).map(|ks| (ks, Vec::new())).collect();
    for &id in &range.ids {
        let bucket = sh.bucketing.bucket(id);
        let prefix = keys::series_prefix(bucket, id);
        let mut present = false;
        let keyspaces = w.points.iter().map(|ks| (ks, true)).chain(w.chunks.as_ref().map(|(_, ks)| (ks, false)));
        for (ks, hot) in keyspaces {
            let mut buf = Vec::new();
            // A sealed window's samples of the series left, newest row first, and whether any
            // were removed: its tier rows are then rebuilt from what is left.
            let (mut left_rows, mut removed) = (Vec::new(), false);
            for guard in ks.prefix(prefix) {
                let (key, value) = guard.into_inner()?;
                let mut samples: Vec<Sample> = Vec::new();
                run::decode_row(&key, &value, &mut samples)?;
                let before = samples.len();
                samples.retain(|s| !(start..=end).contains(&s.timestamp_ms));
                if samples.len() < before {
                    out.samples += (before - samples.len()) as u64;
                    out.chunks += u64::from(!hot);
                    removed |= !hot;
                    let new_key = samples.first().map(|s| keys::point_key(bucket, id, s.timestamp_ms));
                    // Removing and inserting one key in one batch would give both the same
                    // sequence number: remove only a key that is not rewritten.
                    if new_key.is_none_or(|k| k.as_slice() != &*key) {
                        batch.remove(ks, key);
                    }
                    if let Some(new_key) = new_key {
                        if hot {
                            run::encode_hot(&samples, &mut buf)?;
                        } else {
                            buf.clear();
                            chunk::encode(&samples, chunk::ZSTD_LEVEL, &mut buf)
                                .map_err(|_| StorageError::Corrupt { what: "unsorted chunk" })?;
                        }
                        batch.insert(ks, new_key, buf.clone());
                    }
                }
                present |= !samples.is_empty();
                if !hot {
                    left_rows.push(samples);
                }
            }
            if removed {
                let left: Vec<Sample> = left_rows.into_iter().rev().flatten().collect();
                tier_rows::rebuild_series(&mut batch, ks, (bucket, id), (&left, sh.tier_min_density), &mut buf)?;
            } else if !hot && w.downsampled.is_some() {
                // Raw samples gone: the points meeting the range go whole.
                let (samples, left) = tier_rows::delete_range(&mut batch, ks, (bucket, id), (start, end), &mut buf)?;
                out.samples += samples;
                present |= left;
            }
            if sh.histograms_stored() {
                let (removed, left) = histogram_run::delete_range(&mut batch, ks, bucket, id, (start, end))?;
                out.samples += removed;
                present |= left;
            }
            if sh.starts_stored() {
                let window_end = w.start_ms.saturating_add(sh.windows.window_ms());
                start_ts::delete_range(&mut batch, ks, bucket, id, (start, end), window_end)?;
            }
        }
        if !present {
            let index = keys::window_index_key(id);
            for (ks, emptied) in indexed.iter_mut() {
                if ks.contains_key(index)? {
                    match sh.series.get(id.to_be_bytes())? {
                        Some(canonical) => emptied.push((id, canonical)),
                        None => batch.remove(ks, index),
                    }
                    out.emptied += 1;
                }
            }
        }
        if batch.len() >= BATCH_ROWS {
            std::mem::replace(&mut batch, sh.db.batch().durability(durability)).commit()?;
        }
    }
    // The index rows and postings of the emptied series go together, in the last batch (one
    // scan of each label pair concerned, see `postings::remove_series`).
    for (ks, emptied) in &indexed {
        let series: Vec<(SeriesId, &[u8])> = emptied.iter().map(|(id, c)| (*id, &**c)).collect();
        postings::remove_series(&mut batch, ks, &series)?;
    }
    batch.commit()?;
    Ok(out)
}
