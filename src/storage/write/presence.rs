//! Which series are known to have a window-index row, for the few most recent windows: what
//! lets the writer index a series in a window once, without reading the keyspace at each write.
//!
//! A window's set is a bitmap over series ids. Ids are dense (allocated one after the other from
//! 1 by the writer, never taken from input), so a bit per id allocated costs 125 KB a million
//! series, where a hash set of the same ids took ~16 MB, and an insert is a shift and an OR
//! instead of a probe that misses the CPU caches (it was 7% of the writer thread's time under
//! new-series ingest).

use std::collections::VecDeque;

use crate::storage::error::{Result, StorageError};
use crate::storage::index::postings;
use crate::storage::lifecycle::window::WindowKey;
use crate::storage::series_id::SeriesId;

/// Windows whose series-presence sets are kept in memory (the newest ones written to; with
/// retention classes, windows of several classes at one start each take one).
pub(super) const PRESENCE_WINDOWS: usize = 8;

/// A set of series ids as a bitmap: bit `id % 64` of word `id / 64`.
///
/// Invariant: `len` is the number of bits set.
#[derive(Default, Debug, Clone)]
pub(super) struct IdBits {
    words: Vec<u64>,
    len: usize,
}

impl IdBits {
    /// Adds `id`; true when it was not in the set.
    pub(super) fn insert(&mut self, id: SeriesId) -> bool {
        let (word, bit) = Self::place(id);
        if word >= self.words.len() {
            // Doubling: a set follows the id counter up, one series at a time.
            self.words.resize((word + 1).max(self.words.len() * 2), 0);
        }
        let Some(w) = self.words.get_mut(word) else { return false };
        let added = *w & bit == 0;
        *w |= bit;
        self.len += usize::from(added);
        added
    }

    /// True when `id` is in the set.
    pub(super) fn contains(&self, id: SeriesId) -> bool {
        let (word, bit) = Self::place(id);
        self.words.get(word).is_some_and(|w| w & bit != 0)
    }

    /// Ids in the set.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    fn place(id: SeriesId) -> (usize, u64) {
        (usize::try_from(id / 64).unwrap_or(usize::MAX), 1u64 << (id % 64))
    }
}

impl Extend<SeriesId> for IdBits {
    fn extend<I: IntoIterator<Item = SeriesId>>(&mut self, ids: I) {
        for id in ids {
            self.insert(id);
        }
    }
}

/// The presence sets of the [`PRESENCE_WINDOWS`] windows last written to.
///
/// Invariant: a set holds every series indexed in its window's hot keyspace, *including* those
/// the batch being built indexes (not yet committed). A series missing from the set would be
/// indexed again, and its postings blocks (keyed by their first id) would overwrite the blocks
/// of the earlier batch, dropping the other series those listed.
#[derive(Default)]
pub(super) struct Presence {
    windows: VecDeque<(WindowKey, IdBits)>,
}

impl Presence {
    /// Loads (by a prefix scan of the window index) or returns the set of a window. A set
    /// loaded here, while a batch is being built, must also hold what that batch indexes in the
    /// window (`uncommitted`, a superset is fine): a group or flush touching more than
    /// [`PRESENCE_WINDOWS`] windows evicts a set it has added to and loads it again.
    ///
    /// Every id allocated is below `next_id`: a stored row of a greater one is corrupt (and
    /// would make the bitmap as large as the id).
    pub(super) fn set(
        &mut self,
        key: WindowKey,
        points: &fjall::Keyspace,
        uncommitted: impl Iterator<Item = SeriesId>,
        next_id: SeriesId,
    ) -> Result<&mut IdBits> {
        if let Some(pos) = self.windows.iter().position(|(k, _)| *k == key) {
            let entry = self.windows.remove(pos).ok_or(StorageError::ShuttingDown)?;
            self.windows.push_front(entry);
        } else {
            let mut ids = IdBits::default();
            let stored = postings::all_ids(points)?;
            if stored.iter().any(|&id| id >= next_id) {
                return Err(StorageError::Corrupt { what: "window index row of an id never allocated" });
            }
            ids.extend(stored);
            ids.extend(uncommitted);
            self.windows.push_front((key, ids));
            self.windows.truncate(PRESENCE_WINDOWS);
        }
        match self.windows.front_mut() {
            Some((_, set)) => Ok(set),
            None => Err(StorageError::ShuttingDown),
        }
    }

    /// The set of window `key` when it is loaded (without loading it or reordering).
    pub(super) fn loaded(&self, key: WindowKey) -> Option<&IdBits> {
        self.windows.iter().find(|(k, _)| *k == key).map(|(_, set)| set)
    }

    /// True when a loaded window set holds `id`.
    pub(super) fn contains_any(&self, id: SeriesId) -> bool {
        self.windows.iter().any(|(_, set)| set.contains(id))
    }

    /// The newest start of a loaded window and how many series the sets of that start hold
    /// (of every class loaded; a series is in one class).
    pub(super) fn newest(&self) -> Option<(i64, usize)> {
        let newest = self.windows.iter().map(|(k, _)| k.start_ms).max()?;
        Some((newest, self.windows.iter().filter(|(k, _)| k.start_ms == newest).map(|(_, set)| set.len()).sum()))
    }

    /// Drops the set of window `key` (reloaded from disk when next needed).
    pub(super) fn forget(&mut self, key: WindowKey) {
        self.windows.retain(|(k, _)| *k != key);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use proptest::prelude::*;

    use super::IdBits;

    proptest! {
        /// Inserts answer, membership and the count agree with a hash set of the same ids.
        #[test]
        fn id_bits_agree_with_a_hash_set(ids in proptest::collection::vec(prop_oneof![0u64..300, 0u64..100_000], 0..400),
                                         probes in proptest::collection::vec(0u64..100_100, 0..100)) {
            let mut bits = IdBits::default();
            let mut reference = HashSet::new();
            for &id in &ids {
                prop_assert_eq!(bits.insert(id), reference.insert(id));
                prop_assert_eq!(bits.len(), reference.len());
            }
            for id in probes.iter().chain(&ids) {
                prop_assert_eq!(bits.contains(*id), reference.contains(id));
            }
        }
    }

    #[test]
    fn the_largest_id_is_a_member_like_any_other() {
        let mut bits = IdBits::default();
        assert!(!bits.contains(u64::MAX));
        assert!(bits.insert(0));
        assert!(bits.contains(0) && !bits.contains(1) && !bits.contains(64));
        assert!(bits.insert(63) && bits.insert(64) && !bits.insert(64));
        assert_eq!(bits.len(), 3);
    }
}
