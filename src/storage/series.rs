//! Series identity: lookups in `series_by_labels`, the id cache, and label-set reads.
//!
//! Series ids come from the persistent counter in the manifest (`next_series_id`), bumped in the
//! same write batch that creates the series, so an id is never reused. The cache maps the
//! [`identity`] of a label set (xxh3-128, computed without building the canonical bytes) to its
//! id; it is only a cache: `series_by_labels` (keyed by md5, checked against the stored
//! canonical bytes) is the truth, and md5 is computed only when the cache misses.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use super::error::{Result, StorageError};
use super::keys;
use crate::labels::Labels;

/// A series id: allocated from 1 upwards, never reused.
pub type SeriesId = u64;

/// The in-memory identity of a label set: xxh3-128 of its canonical encoding (`name 0x00
/// value 0x00` in name order, see [`Labels::encode`]). Two label sets sharing an identity
/// would share a cached id; at 128 bits the odds are below 1e-25 for a million series.
pub fn identity(canonical: &[u8]) -> [u8; 16] {
    xxhash_rust::xxh3::xxh3_128(canonical).to_le_bytes()
}

/// Hashes a 128-bit digest by taking its first 8 bytes: the digest is already uniformly
/// distributed, so hashing it again (SipHash) is wasted work on the writer thread.
#[derive(Default)]
pub struct DigestHasher(u64);

impl Hasher for DigestHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut word = [0u8; 8];
        let n = bytes.len().min(8);
        word[..n].copy_from_slice(&bytes[..n]);
        self.0 = self.0.rotate_left(5) ^ u64::from_le_bytes(word);
    }

    fn write_usize(&mut self, _: usize) {
        // The length prefix of a fixed-size digest carries no information.
    }
}

/// A map keyed by md5 digests.
pub type DigestMap<V> = HashMap<[u8; 16], V, BuildHasherDefault<DigestHasher>>;

/// Two-generation cache from label-set hash to series id and bucket. When the current generation reaches
/// half the capacity it becomes the previous one and the old previous is dropped: memory stays
/// bounded by `capacity` entries while hot series survive rotation (they are promoted on hit).
pub struct SeriesCache {
    current: DigestMap<(SeriesId, u16)>,
    previous: DigestMap<(SeriesId, u16)>,
    generation_capacity: usize,
}

impl SeriesCache {
    /// A cache holding at most about `capacity` entries (at least 2).
    pub fn new(capacity: usize) -> Self {
        Self {
            current: DigestMap::default(),
            previous: DigestMap::default(),
            generation_capacity: (capacity / 2).max(1),
        }
    }

    /// Looks an id and its bucket up, promoting an entry found in the previous generation.
    pub fn get(&mut self, hash: &[u8; 16]) -> Option<(SeriesId, u16)> {
        if let Some(&found) = self.current.get(hash) {
            return Some(found);
        }
        let found = *self.previous.get(hash)?;
        self.insert(*hash, found);
        Some(found)
    }

    /// Records an id and its bucket.
    pub fn insert(&mut self, hash: [u8; 16], id: (SeriesId, u16)) {
        if self.current.len() >= self.generation_capacity {
            self.previous = std::mem::take(&mut self.current);
        }
        self.current.insert(hash, id);
    }

    /// Entries held (both generations).
    pub fn len(&self) -> usize {
        self.current.len() + self.previous.len()
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Finds the id of a label set in `series_by_labels`: a prefix scan over its md5, comparing the
/// stored canonical bytes so an md5 collision can never merge two series.
///
/// # Errors
/// Engine errors and corrupt keys.
pub fn lookup(series_by_labels: &fjall::Keyspace, hash: &[u8; 16], canonical: &[u8]) -> Result<Option<SeriesId>> {
    for guard in series_by_labels.prefix(hash) {
        let (key, value) = guard.into_inner()?;
        if value.as_ref() == canonical {
            let id = keys::decode_series_by_labels_key(&key)
                .ok_or(StorageError::Corrupt { what: "series_by_labels key" })?;
            return Ok(Some(id));
        }
    }
    Ok(None)
}

/// Reads the label set of a series.
///
/// # Errors
/// Engine errors, a missing series row, or corrupt label bytes.
pub fn labels_of(series: &fjall::Keyspace, id: SeriesId) -> Result<Labels> {
    let bytes = series.get(id.to_be_bytes())?.ok_or(StorageError::Corrupt { what: "series row (missing)" })?;
    Labels::decode(&bytes).map_err(|_| StorageError::Corrupt { what: "series label set" })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_stays_bounded_and_promotes() {
        let mut c = SeriesCache::new(4);
        for i in 0..100u64 {
            let mut h = [0u8; 16];
            h[..8].copy_from_slice(&i.to_be_bytes());
            c.insert(h, (i, 0));
            assert!(c.len() <= 4);
        }
        let mut h99 = [0u8; 16];
        h99[..8].copy_from_slice(&99u64.to_be_bytes());
        assert_eq!(c.get(&h99), Some((99, 0)));
    }
}
