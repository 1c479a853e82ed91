//! The inverted index: `name 0x00 value 0x00 series_id -> ()` for every label of every series.
//! Postings are global (all time); a time range is applied through the window index.

use std::collections::HashSet;

use super::error::{Result, StorageError};
use super::keys;
use super::series::SeriesId;
use crate::labels::Labels;

/// Adds the postings of a new series to a write batch.
pub fn insert_series(batch: &mut fjall::OwnedWriteBatch, postings: &fjall::Keyspace, id: SeriesId, labels: &Labels) {
    for l in labels.iter() {
        batch.insert(postings, keys::postings_key(&l.name, &l.value, id), Vec::new());
    }
}

fn corrupt() -> StorageError {
    StorageError::Corrupt { what: "postings key" }
}

/// Ids of the series with label `name="value"`, ascending.
///
/// # Errors
/// Engine errors and corrupt keys.
pub fn ids_for_pair(postings: &fjall::Keyspace, name: &str, value: &str) -> Result<Vec<SeriesId>> {
    let prefix = keys::postings_pair_prefix(name, value);
    postings
        .prefix(&prefix)
        .map(|guard| {
            let key = guard.key()?;
            let sid = key.get(prefix.len()..).and_then(|b| <[u8; 8]>::try_from(b).ok()).ok_or_else(corrupt)?;
            Ok(u64::from_be_bytes(sid))
        })
        .collect()
}

/// Calls `f(value, id)` for every series carrying label `name`, in value order.
///
/// # Errors
/// Engine errors and corrupt keys.
pub fn scan_name(postings: &fjall::Keyspace, name: &str, mut f: impl FnMut(&str, SeriesId)) -> Result<()> {
    for guard in postings.prefix(keys::postings_name_prefix(name)) {
        let key = guard.key()?;
        let (_, value, sid) = keys::decode_postings_key(&key).ok_or_else(corrupt)?;
        f(value, sid);
    }
    Ok(())
}

/// Ids of the series carrying label `name` whose value satisfies `keep`.
///
/// # Errors
/// Engine errors and corrupt keys.
pub fn ids_where(postings: &fjall::Keyspace, name: &str, keep: impl Fn(&str) -> bool) -> Result<HashSet<SeriesId>> {
    let mut out = HashSet::new();
    let mut last_value: Option<(String, bool)> = None;
    scan_name(postings, name, |value, sid| {
        // Values repeat for many series: evaluate the predicate once per distinct value.
        let ok = match &last_value {
            Some((v, ok)) if v == value => *ok,
            _ => {
                let ok = keep(value);
                last_value = Some((value.to_owned(), ok));
                ok
            }
        };
        if ok {
            out.insert(sid);
        }
    })?;
    Ok(out)
}
