//! Series left without data. When retention drops windows, the series that have data in none of
//! the windows kept lose their `series` and `series_by_labels` rows (their window index and
//! postings went with the dropped keyspaces), so memory and disk follow the series of the
//! retention period, not every series ever seen.
//!
//! Crash safety, on the writer thread: the orphans are recorded in the manifest (`meta` key
//! [`PENDING_KEY`], fsynced) *before* their windows are dropped, and their rows are removed in
//! one batch with the record *after*. A crash in between leaves the record; the next open
//! removes the rows of every recorded series that no window mentions ([`recover`]). A series is
//! never removed while a window still lists it, so a read never finds an id without labels
//! except in a read racing the removal (readers skip such ids).

use super::window::Window;
use crate::storage::error::Result;
use crate::storage::format::keys;
use crate::storage::index::series;
use crate::storage::read::select;
use crate::storage::series_id::SeriesId;
use crate::storage::shared::Shared;

/// Manifest key of the series whose rows are being removed: their ids, `u64` BE each.
pub const PENDING_KEY: &str = "series_gc_pending";
/// Rows per write batch while removing (bounds memory).
const BATCH_ROWS: usize = 50_000;

/// Is series `id` in the window index of any of `windows`?
fn listed(windows: &[Window], id: SeriesId) -> Result<bool> {
    let key = keys::window_index_key(id);
    for ks in windows.iter().rev().flat_map(select::keyspaces) {
        if ks.contains_key(key)? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Ids (ascending) of the series listed in `dropped` and in none of `kept`. `known` answers
/// from memory for the ids it knows to be present in a kept window (checked first: most series
/// of a dropped window are still alive, in the newest window); the rest cost a look-up per kept
/// keyspace, newest first.
///
/// # Errors
/// Engine errors and corrupt keys.
pub fn orphans(dropped: &[Window], kept: &[Window], known: impl Fn(SeriesId) -> bool) -> Result<Vec<SeriesId>> {
    let mut out = Vec::new();
    for id in select::universe(dropped)? {
        if !known(id) && !listed(kept, id)? {
            out.push(id);
        }
    }
    Ok(out)
}

fn decode_ids(bytes: &[u8]) -> Vec<SeriesId> {
    bytes.chunks_exact(8).filter_map(|c| <[u8; 8]>::try_from(c).ok()).map(u64::from_be_bytes).collect()
}

/// Records `ids` (with any already recorded) as being removed; fsynced.
///
/// # Errors
/// Engine errors.
pub fn record_pending(sh: &Shared, ids: &[SeriesId]) -> Result<()> {
    let mut all = sh.meta.get(PENDING_KEY)?.map(|v| decode_ids(&v)).unwrap_or_default();
    all.extend_from_slice(ids);
    all.sort_unstable();
    all.dedup();
    let bytes: Vec<u8> = all.iter().flat_map(|id| id.to_be_bytes()).collect();
    let mut batch = sh.db.batch().durability(Some(fjall::PersistMode::SyncAll));
    batch.insert(&sh.meta, PENDING_KEY, bytes);
    batch.commit()?;
    Ok(())
}

/// Removes the `series` and `series_by_labels` rows of `ids` and the pending record; returns
/// the canonical label sets removed (for the caller's caches).
///
/// # Errors
/// Engine errors.
pub fn remove(sh: &Shared, ids: &[SeriesId], durability: Option<fjall::PersistMode>) -> Result<Vec<fjall::Slice>> {
    let mut removed = Vec::with_capacity(ids.len());
    let mut batch = sh.db.batch().durability(durability);
    for &id in ids {
        let Some(canonical) = sh.series.get(id.to_be_bytes())? else { continue };
        batch.remove(&sh.series, id.to_be_bytes().to_vec());
        series::remove_by_labels(&mut batch, &sh.series_by_labels, id, &canonical)?;
        removed.push(canonical);
        if batch.len() >= BATCH_ROWS {
            std::mem::replace(&mut batch, sh.db.batch().durability(durability)).commit()?;
        }
    }
    batch.remove(&sh.meta, PENDING_KEY);
    batch.commit()?;
    sh.labels.forget(ids);
    Ok(removed)
}

/// At open, before the writer starts: finishes a removal a crash interrupted. Recorded series
/// that a window still lists keep their rows (a later drop of that window handles them).
///
/// # Errors
/// Engine errors.
pub fn recover(sh: &Shared) -> Result<usize> {
    let Some(bytes) = sh.meta.get(PENDING_KEY)? else { return Ok(0) };
    let windows = sh.windows.all();
    let mut gone = Vec::new();
    for id in decode_ids(&bytes) {
        if !listed(&windows, id)? {
            gone.push(id);
        }
    }
    let removed = remove(sh, &gone, Some(fjall::PersistMode::SyncAll))?;
    if !removed.is_empty() {
        tracing::info!(series = removed.len(), "finished removing series left without data");
    }
    Ok(removed.len())
}
