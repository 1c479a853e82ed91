//! The per-window inverted index. In every window keyspace (hot and sealed), each series with
//! data in the window has its window-index row `0xFFFF series_id` and, for each of its labels,
//! its id in a postings row `0xFFFE name 0x00 value 0x00 first_id` (see [`keys`]). A postings
//! row is a *block*: its value lists further ids of the pair after `first_id`, ascending, as
//! varint deltas (empty: the row holds `first_id` alone, as every row of format 2 does). A
//! batch writes one block per label pair for all the series it indexes (at most
//! [`BLOCK_IDS`] ids each), so indexing a group of new series costs a row per distinct pair,
//! not one per series and label. Blocks of different batches may interleave in id order:
//! readers sort what they gather. The window-index row and the postings of a series are
//! written in the same batch, so a series is either fully indexed in a keyspace or not at all,
//! and they disappear with the keyspace when retention drops the window.
//!
//! Reads cost what they match: the ids of one label pair are one prefix scan, the distinct
//! values of a label name skip over the ids of each value, and label names skip over values.

use std::collections::{HashMap, HashSet};

use crate::storage::error::{Result, StorageError};
use crate::storage::format::keys;
use crate::storage::series_id::SeriesId;

/// Consecutive rows of one value read before a value walk seeks past the rest of them. Measured
/// on a 1 M-series window (three tables): a seek costs about 3 µs, a row read about 0.3 µs, and
/// `label/job/values` (10 values of 100 k series each, hundreds of blocks per value) took 83 µs
/// with 16 rows before the seek; 4 keeps a value of a few blocks to one pass.
const ROWS_BEFORE_SEEK: usize = 4;

/// Most ids in one postings block (bounds a row's size and what a removal rewrites).
pub const BLOCK_IDS: usize = 1024;

/// The window postings one batch adds to one keyspace: series are added one by one, their
/// window-index rows and postings blocks are written by [`Self::write`], which must happen in
/// the same batch.
///
/// The rows go into the batch in key order (blocks by pair, then window-index rows by id): fjall
/// inserts a batch's rows into the memtable's skiplist one after the other, and a search that
/// follows the previous one's path finds it in the CPU caches (a group of new series costs a
/// few memtable inserts each, most of the writer thread's time).
#[derive(Default)]
pub struct PostingsBuilder {
    pairs: HashMap<Box<[u8]>, Vec<SeriesId>>,
    ids: Vec<SeriesId>,
}

impl PostingsBuilder {
    /// Indexes series `id` (its canonical label set).
    pub fn add(&mut self, id: SeriesId, canonical: &[u8]) {
        self.ids.push(id);
        for pair in keys::canonical_pairs(canonical) {
            match self.pairs.get_mut(pair) {
                Some(ids) => ids.push(id),
                None => {
                    self.pairs.insert(pair.into(), vec![id]);
                }
            }
        }
    }

    /// Series added since the last write.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// Adds the window-index rows and the blocks of everything added since the last write to
    /// `batch`, and empties the builder.
    pub fn write(&mut self, batch: &mut fjall::OwnedWriteBatch, ks: &fjall::Keyspace) {
        let mut pairs: Vec<(Box<[u8]>, Vec<SeriesId>)> = self.pairs.drain().collect();
        pairs.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let mut value = Vec::new();
        for (pair, mut ids) in pairs {
            ids.sort_unstable();
            ids.dedup();
            for block in ids.chunks(BLOCK_IDS) {
                let Some(&first) = block.first() else { continue };
                encode_block(block, &mut value);
                batch.insert(ks, keys::postings_key_from_pair(&pair, first), value.as_slice());
            }
        }
        self.ids.sort_unstable();
        self.ids.dedup();
        for id in self.ids.drain(..) {
            batch.insert(ks, keys::window_index_key(id), Vec::new());
        }
    }
}

/// The value of a postings block holding `ids` (ascending, distinct, not empty): the deltas
/// of `ids[1..]`, each from the id before it, as varints. Every caller builds `ids` sorted
/// (the builder sorts and dedups; removal and reseal filter decoded blocks, which keeps them
/// ascending); [`decode_block`] refuses the zero or wrapped delta an unsorted list would give.
pub fn encode_block(ids: &[SeriesId], dst: &mut Vec<u8>) {
    dst.clear();
    for pair in ids.windows(2) {
        if let [a, b] = pair {
            debug_assert!(a < b, "BUG: postings block ids not ascending: {a} then {b}");
            crate::varint::put(dst, b.wrapping_sub(*a));
        }
    }
}

/// Appends the ids of the postings row `(first, value)` to `out`.
///
/// # Errors
/// A value that is not a list of positive varint deltas within the id range.
pub fn decode_block(first: SeriesId, mut value: &[u8], out: &mut Vec<SeriesId>) -> Result<()> {
    out.push(first);
    let mut id = first;
    while !value.is_empty() {
        let (delta, rest) = crate::varint::read(value).map_err(|_| corrupt_block())?;
        id = id.checked_add(delta).filter(|_| delta > 0).ok_or_else(corrupt_block)?;
        out.push(id);
        value = rest;
    }
    Ok(())
}

/// Adds to `batch` the removal of `series` (id and canonical label set) from the window index
/// and postings of `ks`: their window-index rows go, and every block holding one of them is
/// rewritten without it (one scan per label pair concerned, whatever the number of series).
///
/// # Errors
/// Engine errors and corrupt rows.
pub fn remove_series(
    batch: &mut fjall::OwnedWriteBatch,
    ks: &fjall::Keyspace,
    series: &[(SeriesId, &[u8])],
) -> Result<()> {
    let mut by_pair: HashMap<&[u8], HashSet<SeriesId>> = HashMap::new();
    for &(id, canonical) in series {
        batch.remove(ks, keys::window_index_key(id));
        for pair in keys::canonical_pairs(canonical) {
            by_pair.entry(pair).or_default().insert(id);
        }
    }
    let mut ids = Vec::new();
    let mut value = Vec::new();
    for (pair, gone) in by_pair {
        let prefix = keys::postings_key_from_pair(pair, 0);
        let prefix = prefix.get(..prefix.len() - 8).unwrap_or_default();
        for guard in ks.prefix(prefix) {
            let (key, row) = guard.into_inner()?;
            let first = key.get(prefix.len()..).and_then(|b| <[u8; 8]>::try_from(b).ok()).ok_or_else(corrupt)?;
            ids.clear();
            decode_block(u64::from_be_bytes(first), &row, &mut ids)?;
            let before = ids.len();
            ids.retain(|id| !gone.contains(id));
            if ids.len() == before {
                continue;
            }
            let new_key = ids.first().map(|&f| keys::postings_key_from_pair(pair, f));
            // A key removed and inserted in one batch would get one sequence number for both:
            // remove only a key that is not rewritten.
            if new_key.as_deref() != Some(&*key) {
                batch.remove(ks, key);
            }
            if let Some(new_key) = new_key {
                encode_block(&ids, &mut value);
                batch.insert(ks, new_key, value.as_slice());
            }
        }
    }
    Ok(())
}

fn corrupt() -> StorageError {
    StorageError::Corrupt { what: "window postings key" }
}

fn corrupt_block() -> StorageError {
    StorageError::Corrupt { what: "window postings block" }
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
    /// Ids read so far, in no particular order (blocks of different batches interleave), each
    /// once per pair.
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
                    let (key, value) = guard.into_inner()?;
                    let sid = key.get(*prefix_len..).and_then(|b| <[u8; 8]>::try_from(b).ok()).ok_or_else(corrupt)?;
                    decode_block(u64::from_be_bytes(sid), &value, &mut self.ids)?;
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

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use proptest::prelude::*;

    use super::*;

    fn canonical(labels: &[(String, String)]) -> Vec<u8> {
        let mut out = Vec::new();
        for (n, v) in labels {
            out.extend_from_slice(n.as_bytes());
            out.push(0);
            out.extend_from_slice(v.as_bytes());
            out.push(0);
        }
        out
    }

    /// One step: a batch indexing some series, or a removal of some.
    #[derive(Clone, Debug)]
    enum Step {
        Index(Vec<u64>),
        Remove(Vec<u64>),
    }

    fn steps() -> impl Strategy<Value = Vec<Step>> {
        let ids = proptest::collection::vec(0u64..5000, 0..1500);
        proptest::collection::vec(
            prop_oneof![3 => ids.clone().prop_map(Step::Index), 1 => ids.prop_map(Step::Remove)],
            1..8,
        )
    }

    /// Series `id`'s labels: a few values per name, so pairs are shared by many series.
    fn labels_of(id: u64) -> Vec<(String, String)> {
        vec![("a".into(), format!("{}", id % 3)), ("b".into(), format!("{}", id % 17)), ("id".into(), id.to_string())]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

        /// Blocks written batch by batch, and removals, answer every pair's ids (and the
        /// window index and the label values) as a brute-force set of the indexed series does.
        #[test]
        fn blocks_answer_as_a_brute_force_index(steps in steps()) {
            let dir = tempfile::tempdir().unwrap();
            let db = fjall::Database::builder(dir.path()).open().unwrap();
            let ks = db.keyspace("w", fjall::KeyspaceCreateOptions::default).unwrap();
            let mut indexed: BTreeSet<u64> = BTreeSet::new();
            for step in &steps {
                let mut batch = db.batch();
                match step {
                    Step::Index(ids) => {
                        // As the writer does: a series already indexed in the keyspace is not again.
                        let mut builder = PostingsBuilder::default();
                        for &id in ids {
                            if indexed.insert(id) {
                                builder.add(id, &canonical(&labels_of(id)));
                            }
                        }
                        builder.write(&mut batch, &ks);
                    }
                    Step::Remove(ids) => {
                        let gone: BTreeSet<u64> = ids.iter().copied().filter(|id| indexed.contains(id)).collect();
                        let owned: Vec<(u64, Vec<u8>)> = gone.iter().map(|&id| (id, canonical(&labels_of(id)))).collect();
                        let series: Vec<(u64, &[u8])> = owned.iter().map(|(id, c)| (*id, c.as_slice())).collect();
                        remove_series(&mut batch, &ks, &series).unwrap();
                        indexed.retain(|id| !gone.contains(id));
                    }
                }
                batch.commit().unwrap();
            }
            prop_assert_eq!(all_ids(&ks).unwrap(), indexed.iter().copied().collect::<Vec<_>>());
            let mut expected: BTreeMap<(String, String), BTreeSet<u64>> = BTreeMap::new();
            for &id in &indexed {
                for pair in labels_of(id) {
                    expected.entry(pair).or_default().insert(id);
                }
            }
            for name in ["a", "b", "id"] {
                let mut values = Vec::new();
                for_each_value(&ks, name, "", |v| { values.push(v.to_owned()); true }).unwrap();
                let want: Vec<String> = expected.keys().filter(|(n, _)| n == name).map(|(_, v)| v.clone()).collect::<BTreeSet<_>>().into_iter().collect();
                let mut got = values.clone();
                got.sort();
                prop_assert_eq!(got, want, "values of {}", name);
                for v in values {
                    let mut list = PairIds::new(name, [v.as_str()]);
                    while !list.advance(&ks, 7).unwrap() {}
                    let got: BTreeSet<u64> = list.ids.iter().copied().collect();
                    prop_assert_eq!(got.len(), list.ids.len(), "an id twice in {}={}", name, v);
                    prop_assert_eq!(Some(&got), expected.get(&(name.to_owned(), v.clone())), "{}={}", name, v);
                }
            }
        }

        #[test]
        fn block_values_round_trip(mut ids in proptest::collection::vec(any::<u64>(), 1..100)) {
            ids.sort_unstable();
            ids.dedup();
            let mut value = Vec::new();
            encode_block(&ids, &mut value);
            let mut out = Vec::new();
            decode_block(ids[0], &value, &mut out).unwrap();
            prop_assert_eq!(out, ids);
        }

        #[test]
        fn corrupt_block_values_are_errors_not_panics(first in any::<u64>(), value in proptest::collection::vec(any::<u8>(), 0..32)) {
            let mut out = Vec::new();
            if decode_block(first, &value, &mut out).is_ok() {
                prop_assert!(out.windows(2).all(|w| w[0] < w[1]));
            }
        }
    }
}
