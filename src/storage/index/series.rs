//! Series identity: lookups in `series_by_labels`, the id cache, and label-set reads.
//!
//! Series ids come from the persistent counter in the manifest (`next_series_id`), bumped in the
//! same write batch that creates the series, so an id is never reused. The cache maps the
//! [`identity`] of a label set (xxh3-128, computed without building the canonical bytes) to its
//! id; it is only a cache: `series_by_labels` (keyed by md5, checked against the stored
//! label set in `series`) is the truth, and md5 is computed only when the cache misses. Its rows:
//! `md5 -> series_id` (the primary row, found by one point read) and, only for a second label
//! set with the same md5, `md5 series_id -> empty` (see `docs/format.md`). The label set is not
//! repeated: a look-up reads it from `series` (format 5 repeated it, half of the series tables'
//! bytes).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use crate::labels::Labels;
use crate::storage::error::{Result, StorageError};
use crate::storage::format::keys;
use crate::storage::series_id::SeriesId;

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

/// Memory one cache entry takes: a 16-byte key and an 8-byte [`CachedId`], one control byte,
/// and the table's spare capacity (load factor 7/8, doubling growth).
pub const CACHE_ENTRY_BYTES: usize = 32;

/// A series id and its bucket in one word, as the cache holds them: the id in the low
/// [`CachedId::ID_BITS`] bits, the bucket above. A `(SeriesId, u16)` pair takes 16 bytes
/// (padding), which made a cache entry 32 bytes instead of 24 (at 5 M series, 8 M buckets: 64
/// MiB).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct CachedId(u64);

impl CachedId {
    /// Bits of the id. An id at or above `2^48` (never reached: ids count series created, one
    /// at a time) is not cached, which costs a look-up, never a wrong answer.
    const ID_BITS: u32 = 48;

    /// The packed pair, `None` when the id does not fit.
    fn new(id: SeriesId, bucket: u16) -> Option<Self> {
        (id >> Self::ID_BITS == 0).then(|| Self(id | (u64::from(bucket) << Self::ID_BITS)))
    }

    /// The id and its bucket.
    fn get(self) -> (SeriesId, u16) {
        // The shift leaves 16 bits: the cast cannot truncate.
        (self.0 & ((1 << Self::ID_BITS) - 1), (self.0 >> Self::ID_BITS) as u16)
    }
}

/// Two-generation cache from label-set hash to series id and bucket. When the current generation reaches
/// half the capacity it becomes the previous one and the old previous is dropped: memory stays
/// bounded by `capacity` entries while hot series survive rotation (they are promoted on hit).
pub struct SeriesCache {
    current: DigestMap<CachedId>,
    previous: DigestMap<CachedId>,
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
            return Some(found.get());
        }
        let found = *self.previous.get(hash)?;
        self.insert_packed(*hash, found);
        Some(found.get())
    }

    /// Records an id and its bucket. An id past [`CachedId::ID_BITS`] is not kept, and neither
    /// is any entry the label set had, so that a look-up never answers an older id.
    pub fn insert(&mut self, hash: [u8; 16], (id, bucket): (SeriesId, u16)) {
        match CachedId::new(id, bucket) {
            Some(packed) => self.insert_packed(hash, packed),
            None => {
                self.current.remove(&hash);
                self.previous.remove(&hash);
            }
        }
    }

    fn insert_packed(&mut self, hash: [u8; 16], id: CachedId) {
        if self.current.len() >= self.generation_capacity {
            self.previous = std::mem::take(&mut self.current);
        }
        self.current.insert(hash, id);
    }

    /// Forgets a label-set hash (its series was removed).
    pub fn remove(&mut self, hash: &[u8; 16]) {
        self.current.remove(hash);
        self.previous.remove(hash);
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

/// What `series_by_labels` says of a label set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// The series exists with this id.
    Found(SeriesId),
    /// No series has this label set; `primary_taken` when another label set with the same md5
    /// holds the primary row (a new series then gets a collision row).
    Absent {
        /// The md5's primary row belongs to another label set.
        primary_taken: bool,
    },
}

fn corrupt_row() -> StorageError {
    StorageError::Corrupt { what: "series_by_labels row" }
}

/// The series id of a primary row: its value's first 8 bytes (format 6 stores nothing more;
/// format 5 followed them with the canonical label set, ignored here, and a directory upgraded
/// from it may hold such rows until [`slim_rows`] rewrote them).
fn primary_id(value: &[u8]) -> Result<SeriesId> {
    let id = value.first_chunk::<8>().ok_or_else(corrupt_row)?;
    Ok(u64::from_be_bytes(*id))
}

/// True when series `id`'s `series` row holds `canonical`. A missing row is no match.
fn holds(series: &fjall::Keyspace, id: SeriesId, canonical: &[u8]) -> Result<bool> {
    Ok(series.get(id.to_be_bytes())?.is_some_and(|stored| stored.as_ref() == canonical))
}

/// Finds the id of a label set through `series_by_labels` (layout: `docs/format.md`): one point
/// read of its md5, which the tables' bloom filters answer without a disk read for a new label
/// set, and one of the `series` row of the id found, whose label set must be `canonical`; only
/// when it is another label set with the same md5 are the collision rows scanned (each checked
/// against `series` the same way). So a collision can never merge two series.
///
/// # Errors
/// Engine errors and corrupt rows.
pub fn lookup(
    series: &fjall::Keyspace,
    series_by_labels: &fjall::Keyspace,
    hash: &[u8; 16],
    canonical: &[u8],
) -> Result<Lookup> {
    let Some(primary) = series_by_labels.get(hash)? else { return Ok(Lookup::Absent { primary_taken: false }) };
    let id = primary_id(&primary)?;
    if holds(series, id, canonical)? {
        return Ok(Lookup::Found(id));
    }
    for guard in series_by_labels.prefix(hash) {
        let key = guard.key()?;
        if key.len() == 24 {
            let other = keys::decode_series_by_labels_key(&key).ok_or_else(corrupt_row)?;
            if holds(series, other, canonical)? {
                return Ok(Lookup::Found(other));
            }
        }
    }
    Ok(Lookup::Absent { primary_taken: true })
}

/// Adds the `series_by_labels` row of a new series to `batch`: the md5's primary row
/// (`md5 -> id`), or a collision row (`md5 id -> empty`) when the primary is taken.
pub fn insert_by_labels(
    batch: &mut fjall::OwnedWriteBatch,
    series_by_labels: &fjall::Keyspace,
    hash: &[u8; 16],
    id: SeriesId,
    primary_taken: bool,
) {
    if primary_taken {
        batch.insert(series_by_labels, keys::series_by_labels_key(hash, id), []);
    } else {
        batch.insert(series_by_labels, *hash, id.to_be_bytes());
    }
}

/// Adds the removal of series `id`'s `series_by_labels` row to `batch`. When that is the md5's
/// primary row and a collision row exists, the collision row becomes the primary.
///
/// # Errors
/// Engine errors and corrupt rows.
pub fn remove_by_labels(
    batch: &mut fjall::OwnedWriteBatch,
    series_by_labels: &fjall::Keyspace,
    id: SeriesId,
    canonical: &[u8],
) -> Result<()> {
    let hash = keys::labels_hash(canonical);
    let is_primary = match series_by_labels.get(hash)? {
        Some(v) => primary_id(&v)? == id,
        None => false,
    };
    if !is_primary {
        batch.remove(series_by_labels, keys::series_by_labels_key(&hash, id).to_vec());
        return Ok(());
    }
    batch.remove(series_by_labels, hash.to_vec());
    for guard in series_by_labels.prefix(hash) {
        let key = guard.key()?;
        if key.len() == 24 {
            let other = keys::decode_series_by_labels_key(&key).ok_or_else(corrupt_row)?;
            insert_by_labels(batch, series_by_labels, &hash, other, false);
            batch.remove(series_by_labels, key);
            break;
        }
    }
    Ok(())
}

/// Rewrites the `series_by_labels` rows of format 5 in the shape of format 6: a primary row keeps
/// its id alone, a collision row its key alone (the label sets are in `series`). Idempotent, in
/// batches of `batch_rows`; returns the rows rewritten.
///
/// # Errors
/// Engine errors and corrupt rows.
pub fn slim_rows(db: &fjall::Database, series_by_labels: &fjall::Keyspace, batch_rows: usize) -> Result<u64> {
    let mut batch = db.batch();
    let mut rewritten = 0u64;
    for guard in series_by_labels.iter() {
        let (key, value) = guard.into_inner()?;
        match key.len() {
            16 if value.len() > 8 => {
                batch.insert(series_by_labels, key, primary_id(&value)?.to_be_bytes());
            }
            24 if !value.is_empty() => batch.insert(series_by_labels, key, []),
            16 | 24 => continue,
            _ => return Err(corrupt_row()),
        }
        rewritten += 1;
        if batch.len() >= batch_rows {
            std::mem::replace(&mut batch, db.batch()).commit()?;
        }
    }
    batch.commit()?;
    Ok(rewritten)
}

/// The canonical label set of a series, which must exist (a window lists it).
///
/// # Errors
/// Engine errors, or a missing series row.
pub fn canonical_of(series: &fjall::Keyspace, id: SeriesId) -> Result<fjall::Slice> {
    series.get(id.to_be_bytes())?.ok_or(StorageError::Corrupt { what: "series row (missing)" })
}

/// Options of the `series` and `series_by_labels` tables when they are created: LZ4 blocks on
/// every level.
pub fn table_options() -> fjall::KeyspaceCreateOptions {
    use fjall::config::CompressionPolicy;
    fjall::KeyspaceCreateOptions::default()
        .data_block_compression_policy(CompressionPolicy::all(fjall::CompressionType::Lz4))
        .index_block_compression_policy(CompressionPolicy::all(fjall::CompressionType::Lz4))
}

/// Reads the label set of a series, `None` when its row is gone (retention removes the rows of
/// series left without data; a read that found the id earlier may race that).
///
/// # Errors
/// Engine errors or corrupt label bytes.
pub fn labels_if_present(series: &fjall::Keyspace, id: SeriesId) -> Result<Option<Labels>> {
    match series.get(id.to_be_bytes())? {
        Some(bytes) => Labels::decode(&bytes).map(Some).map_err(|_| StorageError::Corrupt { what: "series label set" }),
        None => Ok(None),
    }
}

/// Decoded label sets of series ids, for reads: a dashboard asks about the same series at every
/// refresh, and each miss costs a point read of the `series` table and a decode. Bounded by the
/// bytes of the label sets it holds (`--labels-cache`). A series' row never changes while its
/// id lives (ids are never reused); the churn removal forgets the ids it removes.
pub struct LabelsCache(quick_cache::sync::Cache<SeriesId, Labels, LabelsWeight>);

/// The weight of a cached label set: its strings, a `Label` (two `String` headers) per label,
/// the shared vector's header and the cache entry.
#[derive(Clone)]
struct LabelsWeight;

impl quick_cache::Weighter<SeriesId, Labels> for LabelsWeight {
    fn weight(&self, _: &SeriesId, labels: &Labels) -> u64 {
        let strings: usize = labels.iter().map(|l| l.name.len() + l.value.len()).sum();
        (strings + labels.len() * 48 + 64) as u64
    }
}

impl LabelsCache {
    /// A cache holding label sets of at most `bytes` in all (none when 0).
    pub fn new(bytes: u64) -> Self {
        let items = usize::try_from(bytes / 256).unwrap_or(usize::MAX).max(1);
        Self(quick_cache::sync::Cache::with_weighter(items, bytes.max(1), LabelsWeight))
    }

    /// The label set of a series ([`labels_if_present`]), from the cache when it is there.
    ///
    /// # Errors
    /// As [`labels_if_present`].
    pub fn get(&self, series: &fjall::Keyspace, id: SeriesId) -> Result<Option<Labels>> {
        if let Some(labels) = self.0.get(&id) {
            return Ok(Some(labels));
        }
        let found = labels_if_present(series, id)?;
        if let Some(labels) = &found {
            self.0.insert(id, labels.clone());
        }
        Ok(found)
    }

    /// The label set of a series when the cache holds it (never reads the table).
    pub fn held(&self, id: SeriesId) -> Option<Labels> {
        self.0.get(&id)
    }

    /// Forgets series whose rows are removed.
    pub fn forget(&self, ids: &[SeriesId]) {
        for id in ids {
            self.0.remove(id);
        }
    }

    /// Bytes of the label sets held (their weights).
    pub fn bytes(&self) -> u64 {
        self.0.weight()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_cache_answers_as_the_table_and_forgets_removed_series() {
        let dir = tempfile::tempdir().unwrap();
        let db = fjall::Database::builder(dir.path()).open().unwrap();
        let table = db.keyspace("series", fjall::KeyspaceCreateOptions::default).unwrap();
        let labels = |i: u64| Labels::from_pairs([("__name__", "m"), ("i", &i.to_string())]).unwrap();
        for i in 0..100u64 {
            table.insert(i.to_be_bytes(), labels(i).to_bytes()).unwrap();
        }
        // Room for a few label sets only: answers stay those of the table.
        let cache = LabelsCache::new(1_000);
        for round in 0..2 {
            for i in 0..100u64 {
                assert_eq!(cache.get(&table, i).unwrap(), Some(labels(i)), "round {round}");
            }
            assert!(cache.bytes() <= 1_000);
        }
        assert_eq!(cache.get(&table, 500).unwrap(), None);
        table.remove(99u64.to_be_bytes()).unwrap();
        cache.forget(&[99]);
        assert_eq!(cache.get(&table, 99).unwrap(), None);
    }

    /// Two label sets forced onto one md5 (as a real collision would be): each finds its own id
    /// through the primary row or the collision row and `series`, never the other's; removing
    /// the primary promotes the collision row; format 5's rows read the same.
    #[test]
    fn label_sets_sharing_an_md5_keep_their_own_ids() {
        let dir = tempfile::tempdir().unwrap();
        let db = fjall::Database::builder(dir.path()).open().unwrap();
        let series = db.keyspace("series", table_options).unwrap();
        let sbl = db.keyspace("series_by_labels", table_options).unwrap();
        let (a, b, c) = (b"__name__\0a\0".as_slice(), b"__name__\0b\0".as_slice(), b"__name__\0c\0".as_slice());
        let hash = [7u8; 16];
        assert_eq!(lookup(&series, &sbl, &hash, a).unwrap(), Lookup::Absent { primary_taken: false });
        let mut batch = db.batch();
        batch.insert(&series, 1u64.to_be_bytes(), a);
        batch.insert(&series, 2u64.to_be_bytes(), b);
        insert_by_labels(&mut batch, &sbl, &hash, 1, false);
        insert_by_labels(&mut batch, &sbl, &hash, 2, true);
        batch.commit().unwrap();
        assert_eq!(lookup(&series, &sbl, &hash, a).unwrap(), Lookup::Found(1));
        assert_eq!(lookup(&series, &sbl, &hash, b).unwrap(), Lookup::Found(2));
        assert_eq!(lookup(&series, &sbl, &hash, c).unwrap(), Lookup::Absent { primary_taken: true });
        // Removing the primary's series: the collision row becomes the primary.
        let mut batch = db.batch();
        // `remove_by_labels` hashes the label set itself: use rows of the real md5 of `a` here.
        let real = keys::labels_hash(a);
        insert_by_labels(&mut batch, &sbl, &real, 1, false);
        insert_by_labels(&mut batch, &sbl, &real, 2, true);
        batch.commit().unwrap();
        let mut batch = db.batch();
        remove_by_labels(&mut batch, &sbl, 1, a).unwrap();
        batch.remove(&series, 1u64.to_be_bytes());
        batch.commit().unwrap();
        assert_eq!(lookup(&series, &sbl, &real, a).unwrap(), Lookup::Absent { primary_taken: true });
        assert_eq!(lookup(&series, &sbl, &real, b).unwrap(), Lookup::Found(2));
        assert_eq!(sbl.get(real).unwrap().as_deref(), Some(2u64.to_be_bytes().as_slice()));
        assert!(sbl.get(keys::series_by_labels_key(&real, 2)).unwrap().is_none());
        // Format 5's shapes (the label set after the id, and as a collision row's value) read
        // alike, and slimming them is idempotent.
        let old = [7u8; 16].map(|x| x + 1);
        sbl.insert(old, [&3u64.to_be_bytes()[..], c].concat()).unwrap();
        sbl.insert(keys::series_by_labels_key(&old, 4), b).unwrap();
        series.insert(3u64.to_be_bytes(), c).unwrap();
        series.insert(4u64.to_be_bytes(), b).unwrap();
        assert_eq!(lookup(&series, &sbl, &old, c).unwrap(), Lookup::Found(3));
        assert_eq!(lookup(&series, &sbl, &old, b).unwrap(), Lookup::Found(4));
        assert_eq!(slim_rows(&db, &sbl, 1).unwrap(), 2);
        assert_eq!(slim_rows(&db, &sbl, 1).unwrap(), 0);
        assert_eq!(sbl.get(old).unwrap().as_deref(), Some(3u64.to_be_bytes().as_slice()));
        assert_eq!(lookup(&series, &sbl, &old, b).unwrap(), Lookup::Found(4));
    }

    proptest::proptest! {
        /// The packed pair gives back what went in, for every id that fits and every bucket;
        /// an id that does not fit is not cached at all.
        #[test]
        fn cached_ids_round_trip(id in 0u64..(1 << 48), bucket: u16, wide in (1u64 << 48)..) {
            let mut c = SeriesCache::new(8);
            c.insert([1; 16], (id, bucket));
            c.insert([2; 16], (id, bucket));
            c.insert([2; 16], (wide, bucket));
            proptest::prop_assert_eq!(c.get(&[1; 16]), Some((id, bucket)));
            proptest::prop_assert_eq!(c.get(&[2; 16]), None);
        }
    }

    #[test]
    fn a_cache_entry_takes_24_bytes() {
        assert_eq!(std::mem::size_of::<([u8; 16], CachedId)>(), 24);
    }

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
