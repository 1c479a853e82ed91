//! Label sets seen on the wire before, by their exact bytes.
//!
//! A Prometheus server sends each series' labels again in every remote-write request, byte for
//! byte the same: the same `Label` messages in the same order. Parsing them, checking their
//! UTF-8 and names and building their canonical encoding is most of the decoder's work per
//! series. [`KnownLabels`] remembers, for the exact bytes of a series' label fields, the
//! canonical encoding the scanner built from them, so a series seen before costs one hash, one
//! comparison and one copy.
//!
//! Invariants:
//! - an entry maps the bytes of *all* the label fields of a `TimeSeries` (contiguous on the wire)
//!   to the canonical encoding the scanner produced from them and accepted: a hit yields exactly
//!   what scanning the same bytes would (the label checks depend only on those bytes and on the
//!   limits, which are fixed per cache: a lookup under other limits misses);
//! - keys are compared byte for byte, never by hash alone, so a hash collision is a miss;
//! - memory is bounded by bytes: each of the [`SHARDS`] shards keeps two generations, and when
//!   the current one reaches half the shard's share of the budget it becomes the previous one
//!   (the old previous is dropped); a hit in the previous generation moves the entry back to
//!   the current one, so label sets sent every scrape stay while departed ones age out;
//! - a shard whose working set outgrows it admits only a fixed part of the hash space: when a
//!   generation rotates having served fewer hits than it took new entries (every series sent
//!   once per scrape, more of them than fit, is that cache's worst case: each lookup misses and
//!   each learn evicts one that will be asked for next), the admitted part shrinks by a
//!   quarter; a shard that served two lookups of admitted label sets per entry it holds (and
//!   [`GROW_AFTER_LOOKUPS`]) without rotating, two passes over what it admits, admits half as
//!   much again. The label sets admitted then stay and hit; the others are decoded in full, without
//!   the cost of learning and evicting them, nor of the shard's lock: each shard's admitted part
//!   is also kept in an atomic, read before the lock is taken.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::Mutex;

use super::decode::DecodeLimits;

/// Independent shards (by the top bits of the hash), so decoding threads rarely wait on each other.
const SHARDS: usize = 16;

/// A shard that served this many lookups of admitted label sets, plus twice the entries it
/// holds, without rotating admits half as much again of the hash space (see the module docs).
const GROW_AFTER_LOOKUPS: usize = 64;

/// The smallest part of the hash space a shard admits, out of `u32::MAX`: about 1/1024.
const MIN_ADMIT: u32 = u32::MAX >> 10;

/// Bytes an entry costs beyond its key and value bytes: the table slot (hash, pointer, length,
/// split) at a load factor of 7/8 and the allocation's header.
const ENTRY_OVERHEAD: usize = 56;

/// Hashes a key that is already a hash (xxh3 of the label bytes) by taking it as is.
#[derive(Default)]
struct PassThrough(u64);

impl Hasher for PassThrough {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// Wire bytes of a series' label fields, then the canonical encoding built from them.
struct Entry {
    bytes: Box<[u8]>,
    wire_len: usize,
}

impl Entry {
    fn wire(&self) -> &[u8] {
        self.bytes.get(..self.wire_len).unwrap_or_default()
    }

    fn canonical(&self) -> &[u8] {
        self.bytes.get(self.wire_len..).unwrap_or_default()
    }

    fn cost(&self) -> usize {
        self.bytes.len() + ENTRY_OVERHEAD
    }
}

type Table = HashMap<u64, Entry, BuildHasherDefault<PassThrough>>;

struct Shard {
    current: Table,
    previous: Table,
    current_bytes: usize,
    previous_bytes: usize,
    /// Label sets whose hash's low 32 bits are at most this are learned (see the module docs).
    admit: u32,
    /// Hits, and entries learned, since the current generation began.
    hits: u32,
    learned: u32,
    /// Lookups of admitted label sets since the last rotation or growth of `admit`.
    lookups: usize,
}

impl Default for Shard {
    fn default() -> Self {
        Self {
            current: Table::default(),
            previous: Table::default(),
            current_bytes: 0,
            previous_bytes: 0,
            admit: u32::MAX,
            hits: 0,
            learned: 0,
            lookups: 0,
        }
    }
}

impl Shard {
    /// Counts a lookup; admits a larger part of the hash space after enough without rotating.
    fn looked_up(&mut self, hash: u64, hit: bool) {
        self.hits = self.hits.saturating_add(u32::from(hit));
        if self.admit == u32::MAX || !self.admits(hash) {
            return;
        }
        self.lookups += 1;
        if self.lookups >= 2 * (self.current.len() + self.previous.len()) + GROW_AFTER_LOOKUPS {
            self.lookups = 0;
            self.admit = self.admit.saturating_add(self.admit / 2);
        }
    }

    /// Whether a label set of this hash is learned.
    fn admits(&self, hash: u64) -> bool {
        (hash as u32) <= self.admit
    }
}

/// A bounded, shared map from the wire bytes of a series' label fields to their canonical
/// encoding (see the module docs).
pub struct KnownLabels {
    shards: Vec<Mutex<Shard>>,
    /// Each shard's `admit`, copied on every change, so that a label set a shard does not admit
    /// is answered (a miss, nothing learned) without taking the shard's lock.
    admits: Vec<AtomicU32>,
    /// Bytes one generation of one shard may reach before it rotates.
    generation_bytes: usize,
    /// The limits the entries were checked under.
    max_labels: usize,
    max_label_len: usize,
    bytes: AtomicUsize,
}

impl KnownLabels {
    /// A cache of about `budget` bytes for label sets checked under `limits`. A budget too small
    /// for one entry per shard turns the cache off (every lookup misses, nothing is kept).
    pub fn new(budget: usize, limits: &DecodeLimits) -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            admits: (0..SHARDS).map(|_| AtomicU32::new(u32::MAX)).collect(),
            generation_bytes: budget / SHARDS / 2,
            max_labels: limits.max_labels,
            max_label_len: limits.max_label_len,
            bytes: AtomicUsize::new(0),
        }
    }

    /// True when lookups under `limits` may hit.
    pub fn serves(&self, limits: &DecodeLimits) -> bool {
        self.generation_bytes > ENTRY_OVERHEAD
            && limits.max_labels == self.max_labels
            && limits.max_label_len == self.max_label_len
    }

    /// Whether the shard of `hash` admits it, read without its lock (see the `admits` field).
    fn admitted(&self, hash: u64) -> bool {
        self.admits.get(shard_index(hash)).is_none_or(|a| (hash as u32) <= a.load(Ordering::Relaxed))
    }

    /// Copies a shard's `admit` for [`KnownLabels::admitted`], when it changed: the copies of
    /// all shards share a cache line that every lookup reads, and a store on each lookup moved
    /// that line from core to core (reading it was a sixth of the lookup's time at 10,000
    /// series).
    fn publish_admit(&self, hash: u64, shard: &Shard) {
        if let Some(a) = self.admits.get(shard_index(hash)) {
            if a.load(Ordering::Relaxed) != shard.admit {
                a.store(shard.admit, Ordering::Relaxed);
            }
        }
    }

    fn shard(&self, hash: u64) -> std::sync::MutexGuard<'_, Shard> {
        let i = shard_index(hash);
        let shard = self.shards.get(i).or_else(|| self.shards.first());
        match shard {
            Some(m) => m.lock().unwrap_or_else(std::sync::PoisonError::into_inner),
            // `shards` has SHARDS entries from `new` on; unreachable.
            None => unreachable_shard(),
        }
    }

    /// Calls `found` with the canonical encoding of the label fields `wire` when they were seen
    /// before; returns whether they were.
    pub fn lookup(&self, wire: &[u8], found: impl FnOnce(&[u8])) -> bool {
        let hash = xxhash_rust::xxh3::xxh3_64(wire);
        if !self.admitted(hash) {
            // Not learned since the shard last admitted it: at worst an entry from before then
            // is missed, and the label set is decoded in full. The probe would miss the caches,
            // and the lock would be taken for nothing.
            return false;
        }
        let mut shard = self.shard(hash);
        if !shard.admits(hash) {
            return false;
        }
        if let Some(e) = shard.current.get(&hash) {
            let hit = e.wire() == wire;
            if hit {
                found(e.canonical());
            }
            shard.looked_up(hash, hit);
            self.publish_admit(hash, &shard);
            return hit;
        }
        let Some(e) = shard.previous.remove(&hash) else {
            shard.looked_up(hash, false);
            self.publish_admit(hash, &shard);
            return false;
        };
        shard.previous_bytes = shard.previous_bytes.saturating_sub(e.cost());
        if e.wire() != wire {
            self.bytes.fetch_sub(e.cost(), Ordering::Relaxed);
            shard.looked_up(hash, false);
            self.publish_admit(hash, &shard);
            return false;
        }
        found(e.canonical());
        shard.looked_up(hash, true);
        self.publish_admit(hash, &shard);
        // Promoted: it was sent again, so it is still in use.
        self.bytes.fetch_sub(e.cost(), Ordering::Relaxed);
        self.insert(&mut shard, hash, e);
        self.publish_admit(hash, &shard);
        true
    }

    /// Remembers that the label fields `wire` scan to `canonical` (which the scanner accepted).
    pub fn learn(&self, wire: &[u8], canonical: &[u8]) {
        let cost = wire.len() + canonical.len() + ENTRY_OVERHEAD;
        if cost > self.generation_bytes {
            return;
        }
        let hash = xxhash_rust::xxh3::xxh3_64(wire);
        if !self.admitted(hash) {
            return;
        }
        let mut shard = self.shard(hash);
        if !shard.admits(hash) {
            return;
        }
        shard.learned = shard.learned.saturating_add(1);
        let mut bytes = Vec::with_capacity(wire.len() + canonical.len());
        bytes.extend_from_slice(wire);
        bytes.extend_from_slice(canonical);
        self.insert(&mut shard, hash, Entry { bytes: bytes.into_boxed_slice(), wire_len: wire.len() });
        self.publish_admit(hash, &shard);
    }

    fn insert(&self, shard: &mut Shard, hash: u64, entry: Entry) {
        if shard.current_bytes + entry.cost() > self.generation_bytes {
            // The generation served fewer hits than it took entries: the working set outgrows
            // the shard, admit less of it.
            if shard.hits < shard.learned {
                shard.admit = (shard.admit / 4 * 3).max(MIN_ADMIT);
            }
            (shard.hits, shard.learned, shard.lookups) = (0, 0, 0);
            let dropped = shard.previous_bytes;
            shard.previous = std::mem::take(&mut shard.current);
            shard.previous_bytes = std::mem::take(&mut shard.current_bytes);
            self.bytes.fetch_sub(dropped, Ordering::Relaxed);
        }
        let cost = entry.cost();
        if let Some(old) = shard.current.insert(hash, entry) {
            shard.current_bytes = shard.current_bytes.saturating_sub(old.cost());
            self.bytes.fetch_sub(old.cost(), Ordering::Relaxed);
        }
        shard.current_bytes += cost;
        self.bytes.fetch_add(cost, Ordering::Relaxed);
    }

    /// Bytes the entries take (what the budget bounds).
    pub fn bytes(&self) -> usize {
        self.bytes.load(Ordering::Relaxed)
    }
}

/// The shard of a hash: its top bits.
fn shard_index(hash: u64) -> usize {
    (hash >> 60) as usize % SHARDS
}

#[cold]
fn unreachable_shard() -> ! {
    unreachable!("KnownLabels always has its shards")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_only_exact_bytes_and_stays_within_budget() {
        let limits = DecodeLimits::default();
        let known = KnownLabels::new(64 << 10, &limits);
        assert!(known.serves(&limits));
        assert!(!known.serves(&DecodeLimits { max_labels: 3, ..limits }));
        known.learn(b"wire-a", b"canonical-a");
        let mut got = Vec::new();
        assert!(known.lookup(b"wire-a", |c| got = c.to_vec()));
        assert_eq!(got, b"canonical-a");
        assert!(!known.lookup(b"wire-b", |_| panic!("no entry")));
        for i in 0..20_000u32 {
            known.learn(&i.to_le_bytes(), b"x");
            assert!(known.bytes() <= 64 << 10, "{} bytes after {i}", known.bytes());
        }
        let off = KnownLabels::new(0, &limits);
        off.learn(b"wire-a", b"canonical-a");
        assert!(!off.serves(&limits));
        assert!(!off.lookup(b"wire-a", |_| ()));
        assert_eq!(off.bytes(), 0);
    }

    /// Every key asked once per pass, 40x more keys than fit: without admission each lookup
    /// misses (each learn evicts a key asked for later in the pass). With it, a part stays.
    #[test]
    fn a_working_set_larger_than_the_budget_keeps_a_part_that_hits() {
        let limits = DecodeLimits::default();
        let known = KnownLabels::new(64 << 10, &limits);
        let keys: Vec<[u8; 4]> = (0..40_000u32).map(u32::to_le_bytes).collect();
        let mut hits = 0;
        for pass in 0..6 {
            hits = 0;
            for k in &keys {
                if known.lookup(k, |c| assert_eq!(c, b"x")) {
                    hits += 1;
                } else {
                    known.learn(k, b"x");
                }
                assert!(known.bytes() <= 64 << 10, "pass {pass}: {} bytes", known.bytes());
            }
        }
        // About 1,000 entries fit; most of them should be hit by the last pass.
        assert!(hits >= 300, "{hits} hits in the last pass");
    }
}
