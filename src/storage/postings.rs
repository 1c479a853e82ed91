//! The per-window inverted index. In every window keyspace (hot and sealed), each series with
//! data in the window has its window-index row `0xFFFF series_id` and one postings row
//! `0xFFFE name 0x00 value 0x00 series_id` per label (see [`keys`]). Both are written in the
//! same batch, so a series is either fully indexed in a keyspace or not at all, and they
//! disappear with the keyspace when retention drops the window.
//!
//! Reads cost what they match: the ids of one label pair are one prefix scan, the distinct
//! values of a label name skip over the ids of each value, and label names skip over values.

use super::error::{Result, StorageError};
use super::keys;
use super::series::SeriesId;

/// Consecutive rows of one value read before a value walk seeks past the rest of them: a
/// seek costs about as much as reading this many rows.
const ROWS_BEFORE_SEEK: usize = 16;

/// Adds the window-index row and the postings of series `id` (its canonical label set) to
/// `batch`, for keyspace `ks`.
pub fn insert_series(batch: &mut fjall::OwnedWriteBatch, ks: &fjall::Keyspace, id: SeriesId, canonical: &[u8]) {
    batch.insert(ks, keys::window_index_key(id), Vec::new());
    for pair in keys::canonical_pairs(canonical) {
        batch.insert(ks, keys::postings_key_from_pair(pair, id), Vec::new());
    }
}

/// Adds the removal of the window-index row and the postings of series `id` to `batch`.
pub fn remove_series(batch: &mut fjall::OwnedWriteBatch, ks: &fjall::Keyspace, id: SeriesId, canonical: &[u8]) {
    batch.remove(ks, keys::window_index_key(id));
    for pair in keys::canonical_pairs(canonical) {
        batch.remove(ks, keys::postings_key_from_pair(pair, id));
    }
}

fn corrupt() -> StorageError {
    StorageError::Corrupt { what: "window postings key" }
}

/// Every series id of the window index of `ks`, ascending.
///
/// # Errors
/// Engine errors and corrupt keys.
pub fn all_ids(ks: &fjall::Keyspace) -> Result<Vec<SeriesId>> {
    let ids: Vec<SeriesId> = ks
        .prefix(keys::WINDOW_INDEX_PREFIX)
        .map(|guard| {
            keys::decode_window_index_key(&guard.key()?).ok_or(StorageError::Corrupt { what: "window index key" })
        })
        .collect::<Result<_>>()?;
    INDEX_ROWS_SCANNED.fetch_add(ids.len() as u64, std::sync::atomic::Ordering::Relaxed);
    Ok(ids)
}

/// Rows read by [`all_ids`] in this process: the cost of full walks of window indexes, whose
/// size grows with the series count (shown as `saltdb_storage_index_rows_scanned_total`, so a
/// test can tell that a `/metrics` scrape does none).
static INDEX_ROWS_SCANNED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Rows read by full walks of window indexes since the process started (see [`all_ids`]).
pub fn index_rows_scanned() -> u64 {
    INDEX_ROWS_SCANNED.load(std::sync::atomic::Ordering::Relaxed)
}

/// The ids of the series carrying any of the label pairs given by their prefixes, read a few
/// at a time: several of these advance in turns until the first is exhausted (the smallest
/// list, found at the cost of reading it once per competitor).
pub struct PairIds {
    prefixes: Vec<Vec<u8>>,
    next_prefix: usize,
    current: Option<(fjall::Iter, usize)>,
    /// Ids read so far (ascending within each pair; pairs of one label name are disjoint).
    pub ids: Vec<SeriesId>,
    exhausted: bool,
}

impl PairIds {
    /// The ids of the series carrying label `name` with any of `values`.
    pub fn new<'a>(name: &str, values: impl IntoIterator<Item = &'a str>) -> Self {
        let prefixes = values.into_iter().map(|v| keys::postings_pair_prefix(name, v)).collect();
        Self { prefixes, next_prefix: 0, current: None, ids: Vec::new(), exhausted: false }
    }

    /// Reads up to `n` more ids; returns true once the list is exhausted.
    ///
    /// # Errors
    /// Engine errors and corrupt keys.
    pub fn advance(&mut self, ks: &fjall::Keyspace, n: usize) -> Result<bool> {
        let goal = self.ids.len().saturating_add(n);
        while self.ids.len() < goal && !self.exhausted {
            let Some((iter, prefix_len)) = &mut self.current else {
                match self.prefixes.get(self.next_prefix) {
                    Some(prefix) => {
                        self.current = Some((ks.prefix(prefix), prefix.len()));
                        self.next_prefix += 1;
                    }
                    None => self.exhausted = true,
                }
                continue;
            };
            match iter.next() {
                Some(guard) => {
                    let key = guard.key()?;
                    let sid = key.get(*prefix_len..).and_then(|b| <[u8; 8]>::try_from(b).ok()).ok_or_else(corrupt)?;
                    self.ids.push(u64::from_be_bytes(sid));
                }
                None => self.current = None,
            }
        }
        Ok(self.exhausted)
    }
}

/// The part of a window postings key after `0xFFFE name 0x00`: the value, up to its 0x00.
fn value_of(key: &[u8], name_prefix_len: usize) -> Option<&[u8]> {
    let rest = key.get(name_prefix_len..)?;
    let end = rest.len().checked_sub(9)?;
    rest.get(..end).filter(|_| rest.get(end) == Some(&0))
}

/// Calls `f` with each distinct value of label `name` in `ks` that starts with `prefix`, in
/// byte order, until `f` returns false. Reads a few rows of each value and seeks past the
/// rest, so the cost follows the number of values, not of series.
///
/// # Errors
/// Engine errors and corrupt keys.
pub fn for_each_value(ks: &fjall::Keyspace, name: &str, prefix: &str, mut f: impl FnMut(&str) -> bool) -> Result<()> {
    let name_prefix = keys::postings_name_prefix(name);
    let mut scan_prefix = name_prefix.clone();
    scan_prefix.extend_from_slice(prefix.as_bytes());
    let mut from = scan_prefix.clone();
    loop {
        let mut last: Option<Vec<u8>> = None;
        let mut repeats = 0;
        let mut seek_to = None;
        for guard in ks.range(from.as_slice()..) {
            let key = guard.key()?;
            if !key.starts_with(&scan_prefix) {
                return Ok(());
            }
            let value = value_of(&key, name_prefix.len()).ok_or_else(corrupt)?;
            if last.as_deref() == Some(value) {
                repeats += 1;
                if repeats >= ROWS_BEFORE_SEEK {
                    // Past every key of this value: `value 0x00 id` < `value 0x01`, and no
                    // value holds 0x00.
                    let mut next = name_prefix.clone();
                    next.extend_from_slice(value);
                    next.push(1);
                    seek_to = Some(next);
                    break;
                }
                continue;
            }
            repeats = 0;
            if !f(std::str::from_utf8(value).map_err(|_| corrupt())?) {
                return Ok(());
            }
            last = Some(value.to_vec());
        }
        match seek_to {
            Some(next) => from = next,
            None => return Ok(()),
        }
    }
}

/// Calls `f` with each distinct label name in the postings of `ks`, in byte order. One seek
/// per name.
///
/// # Errors
/// Engine errors and corrupt keys.
pub fn for_each_name(ks: &fjall::Keyspace, mut f: impl FnMut(&str)) -> Result<()> {
    let mut from = keys::WINDOW_POSTINGS_PREFIX.to_vec();
    loop {
        let Some(guard) = ks.range(from.as_slice()..).next() else { return Ok(()) };
        let key = guard.key()?;
        let Some(rest) = key.strip_prefix(&keys::WINDOW_POSTINGS_PREFIX) else { return Ok(()) };
        let end = rest.iter().position(|&b| b == 0).ok_or_else(corrupt)?;
        let name = rest.get(..end).ok_or_else(corrupt)?;
        f(std::str::from_utf8(name).map_err(|_| corrupt())?);
        // Past every key of this name: `name 0x00 ...` < `name 0x01`.
        from = keys::WINDOW_POSTINGS_PREFIX.to_vec();
        from.extend_from_slice(name);
        from.push(1);
    }
}
