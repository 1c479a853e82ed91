//! One-time upgrades of data directories written in an older format, run at open before the
//! writer starts and before anything is read.
//!
//! Crash safety: an upgrade only adds rows derived from rows that stay, commits them, and bumps
//! `format_version` last with an fsync. A crash before the bump leaves a directory in the old
//! version with some derived rows already there; the next open runs the upgrade again, and
//! writing a row twice is harmless. Rows of the old format are removed or rewritten only after
//! the bump (the legacy postings at every open while any are left; `series_by_labels` rows while
//! the manifest marks them pending).

use std::collections::HashMap;

use super::window::Windows;
use crate::storage::error::{Result, StorageError};
use crate::storage::format::keys;
use crate::storage::format::manifest::{FORMAT_VERSION, FORMAT_VERSION_KEY, SLIM_PENDING_KEY};
use crate::storage::index::postings;
use crate::storage::index::series;
use crate::storage::series_id::SeriesId;

/// Rows per write batch while upgrading (bounds memory).
const BATCH_ROWS: usize = 50_000;
/// The keyspace of format 1's all-time postings.
const LEGACY_POSTINGS: &str = "postings";

/// Upgrades the directory from format `from` to [`FORMAT_VERSION`].
///
/// Version 1 -> 2: `series_by_labels` moves to primary rows keyed by the md5 alone (one point
/// read per look-up); every window keyspace (hot, and the visible chunks generation) gets the
/// window postings of the series in its window index, built from their label sets.
/// Version 2 -> 3: only the version (format 2's postings rows are valid blocks of one id);
/// 3 -> 4 and 4 -> 5 likewise (they add key families that older formats never hold).
/// Version 5 -> 6: `series_by_labels` rows lose their copy of the label set (format 6 reads it
/// from `series`) and hot runs may be compact runs. The version is bumped together with the
/// manifest mark [`SLIM_PENDING_KEY`], then [`finish_slimming`] rewrites the rows: format 6
/// reads both shapes, while a build that reads only format 5 would take a slimmed primary row
/// for another label set's and give its series a second id, so it must never see one.
///
/// # Errors
/// Engine errors; a series in a window index without its `series` row.
pub fn upgrade(
    db: &fjall::Database,
    meta: &fjall::Keyspace,
    [series, series_by_labels]: [&fjall::Keyspace; 2],
    windows: &Windows,
    from: u32,
) -> Result<()> {
    tracing::warn!(from, to = FORMAT_VERSION, "upgrading the data directory's format (one time, at start-up)");
    let started = std::time::Instant::now();
    // 2 -> 3 changes nothing stored: format 2's postings rows are blocks of one id.
    let indexed = if from < 2 { upgrade_1_to_2(db, [series, series_by_labels], windows)? } else { 0 };
    // The journal is written in order: persisting the bump persists every batch before it.
    let mut bump = db.batch().durability(Some(fjall::PersistMode::SyncAll));
    bump.insert(meta, FORMAT_VERSION_KEY, FORMAT_VERSION.to_be_bytes().to_vec());
    if from < 6 {
        bump.insert(meta, SLIM_PENDING_KEY, []);
    }
    bump.commit()?;
    tracing::warn!(
        from,
        to = FORMAT_VERSION,
        series_windows = indexed,
        elapsed_ms = started.elapsed().as_millis() as u64,
        "upgraded the data directory's format"
    );
    Ok(())
}

/// Format 1 -> 2 (see [`upgrade`]); returns the (window, series) pairs indexed.
fn upgrade_1_to_2(
    db: &fjall::Database,
    [series, series_by_labels]: [&fjall::Keyspace; 2],
    windows: &Windows,
) -> Result<u64> {
    rekey_series_by_labels(db, series_by_labels)?;
    let mut batch = db.batch();
    let mut indexed = 0u64;
    for w in windows.all() {
        for ks in w.points.iter().chain(w.chunks.as_ref().map(|(_, ks)| ks)) {
            let mut index = postings::PostingsBuilder::default();
            for id in postings::all_ids(ks)? {
                index.add(id, &series::canonical_of(series, id)?);
                indexed += 1;
                if index.len() >= BATCH_ROWS {
                    index.write(&mut batch, ks);
                    std::mem::replace(&mut batch, db.batch()).commit()?;
                }
            }
            index.write(&mut batch, ks);
        }
    }
    batch.commit()?;
    Ok(indexed)
}

/// Format 1 keyed every `series_by_labels` row `md5 id -> canonical`; format 2 keeps such rows
/// only for md5 collisions and gives each md5 a primary row `md5 -> id canonical`. Idempotent: a
/// row of the old shape becomes the primary when the md5 has none (in the same batch that
/// removes it), is removed when the primary already is that series (a re-run after a crash), and
/// stays as a collision row otherwise.
fn rekey_series_by_labels(db: &fjall::Database, sbl: &fjall::Keyspace) -> Result<()> {
    let mut batch = db.batch();
    let mut primaries: HashMap<[u8; 16], SeriesId> = HashMap::new();
    for guard in sbl.iter() {
        let (key, canonical) = guard.into_inner()?;
        if key.len() != 24 {
            continue;
        }
        let (Some(hash), Some(id)) =
            (key.get(..16).and_then(|h| <[u8; 16]>::try_from(h).ok()), keys::decode_series_by_labels_key(&key))
        else {
            return Err(StorageError::Corrupt { what: "series_by_labels key while upgrading the format" });
        };
        let primary = match primaries.get(&hash) {
            Some(&owner) => Some(owner),
            None => match sbl.get(hash)? {
                Some(v) => Some(
                    v.get(..8)
                        .and_then(|b| <[u8; 8]>::try_from(b).ok())
                        .map(u64::from_be_bytes)
                        .ok_or(StorageError::Corrupt { what: "series_by_labels row while upgrading the format" })?,
                ),
                None => None,
            },
        };
        match primary {
            None => {
                // Format 5's primary row (id and label set): the slimming after the bump rewrites
                // it, so a build of formats 2-5 never meets a format 6 row before then.
                batch.insert(sbl, hash, [&id.to_be_bytes()[..], &canonical].concat());
                batch.remove(sbl, key);
                primaries.insert(hash, id);
            }
            Some(owner) if owner == id => batch.remove(sbl, key),
            Some(_) => {}
        }
        if batch.len() >= BATCH_ROWS {
            std::mem::replace(&mut batch, db.batch()).commit()?;
            primaries.clear();
        }
    }
    batch.commit()?;
    Ok(())
}

/// Rewrites the `series_by_labels` rows of format 5 in the shape of format 6 when the manifest
/// says an upgrade left them (see [`upgrade`]), then removes the mark. Run at every open after
/// [`upgrade`]: a crash during the rewrite is finished at the next open (the rewrite is
/// idempotent).
///
/// # Errors
/// Engine errors and corrupt rows.
pub fn finish_slimming(db: &fjall::Database, meta: &fjall::Keyspace, series_by_labels: &fjall::Keyspace) -> Result<()> {
    if meta.get(SLIM_PENDING_KEY)?.is_none() {
        return Ok(());
    }
    let started = std::time::Instant::now();
    let rows = series::slim_rows(db, series_by_labels, BATCH_ROWS)?;
    let mut done = db.batch();
    done.remove(meta, SLIM_PENDING_KEY);
    done.commit()?;
    tracing::warn!(
        rows,
        elapsed_ms = started.elapsed().as_millis() as u64,
        "series_by_labels rows no longer repeat label sets"
    );
    Ok(())
}

/// Empties format 1's all-time postings keyspace, if the directory still has one (after an
/// upgrade, or after a crash between the bump and this step). The keyspace itself is kept:
/// deleting a keyspace at start-up let fjall 3.1 reuse its internal id (see `window.rs`).
///
/// # Errors
/// Engine errors.
pub fn clear_legacy_postings(db: &fjall::Database) -> Result<()> {
    if !db.list_keyspace_names().iter().any(|n| &**n == LEGACY_POSTINGS) {
        return Ok(());
    }
    let legacy = db.keyspace(LEGACY_POSTINGS, fjall::KeyspaceCreateOptions::default)?;
    if legacy.first_key_value().is_some() {
        tracing::info!("removing the all-time postings of format 1");
        super::close::empty(&legacy)?;
    }
    Ok(())
}
