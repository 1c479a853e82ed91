//! Which label sets `series_by_labels` may hold: a filter over their md5s that answers
//! "certainly not" or "maybe", so the writer skips the point read of `series_by_labels` (its
//! memtables, then every table's bloom filter) for a label set it has never stored. That read
//! always misses for a new series, and at a million series and more it was the largest single
//! cost of new-series ingest after the inserts themselves.
//!
//! Two filters: `since_start` holds every md5 this writer has put into `series_by_labels`
//! (added before the batch commits: a failed commit leaves a "maybe" that costs one read), and
//! `scanned` is built by a background thread from a snapshot of `series_by_labels` taken after
//! the writer started. Until that scan is done every answer is "maybe". Once it is, every md5 in
//! `series_by_labels` is in one of the two: rows committed before the snapshot are in the scan,
//! rows committed after it were added to `since_start` first. Removed series leave their bits,
//! which costs a read, never a wrong answer. Invariant: **no false "certainly not"**, or a
//! known label set would get a second series id.
//!
//! Under churn the filters would outgrow the label sets stored (removed series leave their
//! bits, and `since_start` holds every series created), so once more were added than the scan
//! found, a new scan and a new `since_start` replace them (see [`KnownLabelSets`]).
//!
//! Each filter is a list of split-block bloom filters (256-bit blocks, 8 bits set per md5, 16
//! bits per md5 of capacity: about 0.1% of "maybe" for absent md5s at capacity); when the
//! newest is full a twice larger one is added, so memory follows the number of label sets
//! (2 bytes each) without a rebuild.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;

/// Bits of filter per md5 of capacity.
const BITS_PER_KEY: usize = 16;
/// Capacity of the first filter of `since_start`.
const FIRST_CAPACITY: usize = 1 << 16;
/// Bounds of the first filter of the scan, sized from the number of ids ever allocated (an upper
/// bound of the label sets stored: series that were removed had ids too).
const SCAN_CAPACITY: (usize, usize) = (1 << 16, 1 << 23);
/// md5s added since a scan before a rescan is considered (and only once more were added than
/// the scan found: see [`KnownLabelSets`]).
const RESCAN_AFTER: usize = 1 << 20;
/// Rows the scan reads between looks at the stop flag.
const ROWS_PER_CHECK: usize = 4096;

/// Odd multipliers picking the bit of each of a block's eight words (any distinct odd
/// constants spread the bits; these are fixed so a filter means the same in every build).
const SALTS: [u32; 8] =
    [0x9e37_79b1, 0x85eb_ca77, 0xc2b2_ae3d, 0x27d4_eb2f, 0x1656_67b1, 0xd3a2_646d, 0xfd70_46c5, 0xb55a_4f09];

/// One split-block bloom filter of fixed capacity.
struct Blocks {
    blocks: Vec<[u32; 8]>,
    capacity: usize,
    len: usize,
}

impl Blocks {
    fn with_capacity(capacity: usize) -> Self {
        let n = (capacity * BITS_PER_KEY).div_ceil(256).max(1);
        Self { blocks: vec![[0; 8]; n], capacity, len: 0 }
    }

    /// The block of `h` (its high 32 bits, scaled to the block count) and the word masks (its
    /// low 32 bits through the salts).
    fn place(&self, h: u64) -> (usize, [u32; 8]) {
        let block = (((h >> 32) * self.blocks.len() as u64) >> 32) as usize;
        let low = h as u32;
        (block, SALTS.map(|salt| 1u32 << (low.wrapping_mul(salt) >> 27)))
    }

    fn insert(&mut self, h: u64) {
        let (block, masks) = self.place(h);
        if let Some(words) = self.blocks.get_mut(block) {
            for (word, mask) in words.iter_mut().zip(masks) {
                *word |= mask;
            }
        }
        self.len += 1;
    }

    fn contains(&self, h: u64) -> bool {
        let (block, masks) = self.place(h);
        self.blocks.get(block).is_some_and(|words| words.iter().zip(masks).all(|(w, m)| w & m == m))
    }
}

/// A filter that grows: a list of [`Blocks`], each twice the capacity of the one before.
struct Filter {
    parts: Vec<Blocks>,
}

impl Filter {
    fn with_capacity(capacity: usize) -> Self {
        Self { parts: vec![Blocks::with_capacity(capacity.max(1))] }
    }

    fn insert(&mut self, h: u64) {
        let full = self.parts.last().is_none_or(|b| b.len >= b.capacity);
        if full {
            let capacity = self.parts.last().map_or(FIRST_CAPACITY, |b| b.capacity * 2);
            self.parts.push(Blocks::with_capacity(capacity));
        }
        if let Some(last) = self.parts.last_mut() {
            last.insert(h);
        }
    }

    fn contains(&self, h: u64) -> bool {
        self.parts.iter().any(|b| b.contains(h))
    }

    fn bytes(&self) -> usize {
        self.parts.iter().map(|b| b.blocks.len() * 32).sum()
    }

    /// md5s inserted.
    fn len(&self) -> usize {
        self.parts.iter().map(|b| b.len).sum()
    }
}

/// The 64 bits of an md5 the filters use (md5 is uniform, so any 8 of its bytes will do).
fn key(md5: &[u8]) -> u64 {
    let mut word = [0u8; 8];
    if let Some(head) = md5.get(..8) {
        word.copy_from_slice(head);
    }
    u64::from_le_bytes(word)
}

/// One scan and the md5s added since it began.
struct Generation {
    /// Every md5 the writer added since the scan's snapshot could have missed it.
    since: Filter,
    scanned: Arc<OnceLock<Filter>>,
    scan: Option<JoinHandle<()>>,
}

impl Generation {
    /// Starts a scan of `series_by_labels` in a background thread, its first filter sized for
    /// `expected` md5s.
    fn start(series_by_labels: &fjall::Keyspace, expected: usize, stop: &Arc<AtomicBool>) -> Self {
        let scanned = Arc::new(OnceLock::new());
        let capacity = expected.clamp(SCAN_CAPACITY.0, SCAN_CAPACITY.1);
        let (keyspace, into, until) = (series_by_labels.clone(), Arc::clone(&scanned), Arc::clone(stop));
        let scan = std::thread::Builder::new()
            .name("saltdb-label-sets".into())
            .spawn(move || {
                if let Some(filter) = scan(&keyspace, capacity, &until) {
                    let _ = into.set(filter);
                }
            })
            .map_err(|e| tracing::warn!(error = %e, "could not start the scan of series_by_labels: every new series is looked up"))
            .ok();
        Self { since: Filter::with_capacity(FIRST_CAPACITY), scanned, scan }
    }

    fn join(&mut self) {
        if let Some(scan) = self.scan.take() {
            let _ = scan.join();
        }
    }
}

/// The label sets `series_by_labels` may hold (see the module documentation). Owned by the
/// writer thread; dropping it stops and joins the scans.
///
/// Series removed by retention leave their bits, and `since` grows with every series created,
/// so under churn the filters would outgrow what is stored. Once more md5s were added since the
/// scan than it found (and at least `rescan_after`), a new generation starts: a fresh scan, and
/// a fresh `since` that every md5 added from then on also goes to. When that scan is done, the
/// new generation replaces the old, so memory follows the label sets stored, not those ever
/// created.
pub struct KnownLabelSets {
    series_by_labels: fjall::Keyspace,
    current: Generation,
    next: Option<Generation>,
    rescan_after: usize,
    stop: Arc<AtomicBool>,
}

impl KnownLabelSets {
    /// Starts the scan of `series_by_labels` in a background thread. `ids_allocated` sizes its
    /// first filter. Must be called after the writer exists and before it writes a series, so
    /// that every row the snapshot misses goes through [`Self::add`].
    pub fn start(series_by_labels: fjall::Keyspace, ids_allocated: u64) -> Self {
        Self::with_rescan_after(series_by_labels, ids_allocated, RESCAN_AFTER)
    }

    fn with_rescan_after(series_by_labels: fjall::Keyspace, ids_allocated: u64, rescan_after: usize) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let expected = usize::try_from(ids_allocated).unwrap_or(usize::MAX);
        let current = Generation::start(&series_by_labels, expected, &stop);
        Self { series_by_labels, current, next: None, rescan_after, stop }
    }

    /// Records that a `series_by_labels` row of `md5` is about to be written.
    pub fn add(&mut self, md5: &[u8; 16]) {
        let h = key(md5);
        self.current.since.insert(h);
        if let Some(next) = &mut self.next {
            next.since.insert(h);
        }
    }

    /// True only when no `series_by_labels` row has this md5 (never while the first scan runs).
    pub fn certainly_absent(&self, md5: &[u8; 16]) -> bool {
        let h = key(md5);
        let current = &self.current;
        current.scanned.get().is_some_and(|scanned| !scanned.contains(h) && !current.since.contains(h))
    }

    /// Whether the scan is done (answers can be "certainly not").
    pub fn ready(&self) -> bool {
        self.current.scanned.get().is_some()
    }

    /// Starts or finishes a new generation (see [`KnownLabelSets`]). Call between commits, with
    /// no row added by [`Self::add`] still uncommitted: a new scan's snapshot must hold every
    /// md5 added before it.
    pub fn between_commits(&mut self) {
        if let Some(next) = &mut self.next {
            if next.scanned.get().is_some() {
                next.join();
                self.current.join();
                if let Some(next) = self.next.take() {
                    self.current = next;
                }
            }
            return;
        }
        let Some(scanned) = self.current.scanned.get() else { return };
        let (found, added) = (scanned.len(), self.current.since.len());
        if added >= self.rescan_after && added > found {
            self.next = Some(Generation::start(&self.series_by_labels, found + added, &self.stop));
        }
    }

    /// Memory the filters take.
    pub fn bytes(&self) -> usize {
        [Some(&self.current), self.next.as_ref()]
            .into_iter()
            .flatten()
            .map(|g| g.since.bytes() + g.scanned.get().map_or(0, Filter::bytes))
            .sum()
    }
}

impl Drop for KnownLabelSets {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.current.join();
        if let Some(next) = &mut self.next {
            next.join();
        }
    }
}

/// Reads the md5 of every row of `series_by_labels` (primary rows and collision rows share the
/// md5 prefix). `None` when stopped or when a read fails (logged: the writer then keeps looking
/// every new series up, which is slower and still right).
fn scan(series_by_labels: &fjall::Keyspace, capacity: usize, stop: &AtomicBool) -> Option<Filter> {
    let started = std::time::Instant::now();
    let mut filter = Filter::with_capacity(capacity);
    for (n, guard) in series_by_labels.iter().enumerate() {
        if n % ROWS_PER_CHECK == 0 && stop.load(Ordering::Relaxed) {
            return None;
        }
        match guard.key() {
            Ok(k) => filter.insert(key(&k)),
            Err(e) => {
                tracing::warn!(error = %e, "reading series_by_labels for the label-set filter failed: every new series is looked up");
                return None;
            }
        }
    }
    let rows = filter.len();
    tracing::debug!(rows, bytes = filter.bytes(), ms = started.elapsed().as_millis() as u64, "label-set filter built");
    Some(filter)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn md5_of(i: u64) -> [u8; 16] {
        crate::storage::format::keys::labels_hash(&i.to_le_bytes())
    }

    proptest! {
        /// Against a brute-force set: nothing inserted is ever "certainly absent", across the
        /// growth of the filter.
        #[test]
        fn an_inserted_key_is_always_found(keys in proptest::collection::vec(any::<u64>(), 0..5000), first in 1usize..300) {
            let mut filter = Filter::with_capacity(first);
            for &k in &keys {
                filter.insert(k);
            }
            for &k in &keys {
                prop_assert!(filter.contains(k));
            }
        }
    }

    /// Against a real keyspace: label sets written before the start, while the first scan runs
    /// and across rescans are never "certainly absent"; rescans happen and bring memory back to
    /// what is stored.
    #[test]
    fn stored_md5s_are_never_certainly_absent_across_rescans() {
        let dir = tempfile::tempdir().unwrap();
        let db = fjall::Database::builder(dir.path()).open().unwrap();
        let ks = db.keyspace("series_by_labels", fjall::KeyspaceCreateOptions::default).unwrap();
        let write = |i: u64| {
            let md5 = md5_of(i);
            ks.insert(md5, i.to_be_bytes()).unwrap();
            md5
        };
        for i in 0..5_000 {
            write(i);
        }
        let mut sets = KnownLabelSets::with_rescan_after(ks.clone(), 5_000, 3_000);
        let mut stored: Vec<u64> = (0..5_000).collect();
        let mut rescans = 0;
        let mut was_rescanning = false;
        for i in 5_000..60_000u64 {
            let md5 = md5_of(i);
            sets.add(&md5);
            write(i);
            stored.push(i);
            // Churn: the oldest label sets go, as retention removes series.
            if i % 2 == 0 {
                let gone = stored.remove(0);
                ks.remove(md5_of(gone)).unwrap();
            }
            sets.between_commits();
            if was_rescanning && sets.next.is_none() {
                rescans += 1;
            }
            was_rescanning = sets.next.is_some();
            if i % 997 == 0 {
                for &k in &stored {
                    assert!(!sets.certainly_absent(&md5_of(k)), "stored label set {k} taken for new");
                }
            }
        }
        for &k in &stored {
            assert!(!sets.certainly_absent(&md5_of(k)), "stored label set {k} taken for new");
        }
        assert!(rescans >= 2, "{rescans} rescans");
        assert!(sets.ready());
        assert!((1_000_000..1_100_000u64).any(|i| sets.certainly_absent(&md5_of(i))));
    }

    #[test]
    fn absent_keys_are_mostly_told_apart_and_growth_adds_parts() {
        let mut filter = Filter::with_capacity(1000);
        for i in 0..20_000u64 {
            filter.insert(key(&md5_of(i)));
        }
        assert!(filter.parts.len() >= 5, "{} parts", filter.parts.len());
        let false_maybes = (1_000_000..1_100_000u64).filter(|&i| filter.contains(key(&md5_of(i)))).count();
        // Each part is at or under capacity: a few tenths of a percent per part at most.
        assert!(false_maybes < 2_000, "{false_maybes} of 100000 absent keys answered maybe");
    }
}
