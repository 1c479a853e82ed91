//! Per series, the newest timestamp the writer flushed into the window it last flushed the
//! series into (see [`super::Writer`]'s `flushed_max`): what lets a flush append a run without
//! reading the keyspace for an overlap.
//!
//! One entry per series ever flushed by this life of the writer, so at millions of series the
//! entry's size is what counts: an id below `2^32` (every id in practice: ids count the series
//! created, one at a time) is kept as a `u32` with the timestamp split in two `u32` halves, 12
//! bytes a 4-byte-aligned entry, where `(u64, i64)` took 16 (at 5 M series, 104 instead of 136
//! MiB with the hash tables' spare room). A wider id goes to a second map of full entries.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;

use crate::storage::series_id::{IdHasher, IdMap, SeriesId};

/// The newest flushed timestamp per series id (see the module docs).
///
/// Invariant: an id is in at most one of the two maps, `narrow` when it fits in a `u32`.
#[derive(Default, Debug)]
pub(super) struct FlushedMax {
    narrow: HashMap<u32, [u32; 2], BuildHasherDefault<IdHasher>>,
    wide: IdMap<i64>,
}

/// A timestamp as two `u32` halves (high, low) and back.
fn split(ts: i64) -> [u32; 2] {
    let bits = ts as u64;
    // Each half is 32 bits: the casts keep exactly those.
    [(bits >> 32) as u32, bits as u32]
}

fn join([high, low]: [u32; 2]) -> i64 {
    ((u64::from(high) << 32) | u64::from(low)) as i64
}

impl FlushedMax {
    /// The newest timestamp flushed of series `id`, if it was flushed.
    pub(super) fn get(&self, id: SeriesId) -> Option<i64> {
        match u32::try_from(id) {
            Ok(narrow) => self.narrow.get(&narrow).copied().map(join),
            Err(_) => self.wide.get(&id).copied(),
        }
    }

    /// Records `max` as the newest timestamp flushed of series `id`.
    pub(super) fn insert(&mut self, id: SeriesId, max: i64) {
        match u32::try_from(id) {
            Ok(narrow) => {
                self.narrow.insert(narrow, split(max));
            }
            Err(_) => {
                self.wide.insert(id, max);
            }
        }
    }

    /// Forgets series `id` (it was removed).
    pub(super) fn remove(&mut self, id: SeriesId) {
        match u32::try_from(id) {
            Ok(narrow) => {
                self.narrow.remove(&narrow);
            }
            Err(_) => {
                self.wide.remove(&id);
            }
        }
    }

    /// Series held.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.narrow.len() + self.wide.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn an_entry_takes_12_bytes() {
        assert_eq!(std::mem::size_of::<(u32, [u32; 2])>(), 12);
    }

    proptest! {
        /// Inserts, overwrites and removals of narrow and wide ids, with any timestamp: the map
        /// answers what a plain map of full entries answers.
        #[test]
        fn agrees_with_a_map_of_full_entries(
            ops in proptest::collection::vec(
                (prop_oneof![0u64..64, (u64::from(u32::MAX) - 2)..(u64::from(u32::MAX) + 64), Just(u64::MAX)],
                 any::<i64>(), any::<bool>()),
                0..200,
            )
        ) {
            let mut map = FlushedMax::default();
            let mut model: std::collections::HashMap<SeriesId, i64> = std::collections::HashMap::new();
            for (id, ts, keep) in ops {
                if keep {
                    map.insert(id, ts);
                    model.insert(id, ts);
                } else {
                    map.remove(id);
                    model.remove(&id);
                }
                prop_assert_eq!(map.get(id), model.get(&id).copied());
            }
            prop_assert_eq!(map.len(), model.len());
            for (&id, &ts) in &model {
                prop_assert_eq!(map.get(id), Some(ts));
            }
        }
    }
}
