//! Exemplar storage: the newest `--max-exemplars` exemplars of all series, as Prometheus keeps
//! them (one circular buffer for the whole database), but persistent: each exemplar is a row
//! of the `exemplars` keyspace written in the group commit of the write that carried it, so an
//! acknowledged exemplar survives a crash like a sample; the rows past the bound are removed in
//! the same commit. At open the rows are read back into memory (at most the bound).
//!
//! | key | value |
//! |---|---|
//! | `seq u64` (ascending with arrival) | `series_id u64` `timestamp i64` `value bits u64` (all BE), then the exemplar's canonical label set |
//!
//! Per series, exemplars are kept in timestamp order; one older than the series' newest, or
//! equal to the newest (same time, value and labels), is dropped, as Prometheus drops
//! out-of-order and duplicate exemplars.

use std::collections::{BTreeMap, VecDeque};
use std::sync::RwLock;

use crate::labels::Labels;
use crate::sample::Exemplar;
use crate::storage::error::{Result, StorageError};
use crate::storage::series_id::IdMap;
use crate::storage::series_id::SeriesId;

/// Exemplars Prometheus keeps by default (`--storage.exemplars.max-exemplars`).
pub const DEFAULT_MAX_EXEMPLARS: usize = 100_000;

/// The exemplars of one series (see `Storage::exemplars`).
#[derive(Clone, Debug, PartialEq)]
pub struct SeriesExemplars {
    /// The series.
    pub labels: Labels,
    /// Its exemplars, by time.
    pub exemplars: Vec<Exemplar>,
}

/// One stored exemplar.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredExemplar {
    /// Arrival order, the row's key.
    pub seq: u64,
    /// The series it belongs to.
    pub series: SeriesId,
    /// The exemplar.
    pub exemplar: Exemplar,
}

/// Encodes a row's key.
pub fn key(seq: u64) -> [u8; 8] {
    seq.to_be_bytes()
}

/// Encodes a row's value.
pub fn encode(series: SeriesId, e: &Exemplar) -> Vec<u8> {
    let mut v = Vec::with_capacity(24 + 32);
    v.extend_from_slice(&series.to_be_bytes());
    v.extend_from_slice(&e.timestamp_ms.to_be_bytes());
    v.extend_from_slice(&e.value.to_bits().to_be_bytes());
    e.labels.encode(&mut v);
    v
}

/// Decodes a row.
///
/// # Errors
/// [`StorageError::Corrupt`] for bytes that are not an exemplar row.
pub fn decode(key: &[u8], value: &[u8]) -> Result<StoredExemplar> {
    let corrupt = || StorageError::Corrupt { what: "exemplar row" };
    let seq = u64::from_be_bytes(key.try_into().map_err(|_| corrupt())?);
    let word = |i: usize| -> Result<[u8; 8]> {
        value.get(i * 8..i * 8 + 8).and_then(|b| b.try_into().ok()).ok_or_else(corrupt)
    };
    let series = u64::from_be_bytes(word(0)?);
    let timestamp_ms = i64::from_be_bytes(word(1)?);
    let value_bits = u64::from_be_bytes(word(2)?);
    let labels = Labels::decode(value.get(24..).unwrap_or_default()).map_err(|_| corrupt())?;
    Ok(StoredExemplar { seq, series, exemplar: Exemplar { labels, value: f64::from_bits(value_bits), timestamp_ms } })
}

/// The exemplars in memory: arrival order for eviction, and per series by time for queries.
#[derive(Default)]
struct Ring {
    /// `(seq, series, timestamp)` in arrival order.
    order: VecDeque<(u64, SeriesId, i64)>,
    /// Per series: `(timestamp, seq) -> exemplar`.
    by_series: IdMap<BTreeMap<(i64, u64), Exemplar>>,
    next_seq: u64,
}

/// What a write adds to the store: its rows, and the rows it pushes out.
#[derive(Debug, Default)]
pub struct Admitted {
    /// New exemplars with their sequence numbers.
    pub added: Vec<StoredExemplar>,
    /// The tag of each of `added` (the caller's: which request it came from).
    pub tags: Vec<usize>,
    /// Sequence numbers evicted to stay within the bound.
    pub evicted: Vec<u64>,
    /// Exemplars refused (out of order or duplicate).
    pub dropped: usize,
}

/// The exemplar store (see the module docs). Writer thread admits and applies; anyone reads.
pub struct ExemplarStore {
    max: usize,
    ring: RwLock<Ring>,
}

impl ExemplarStore {
    /// Loads the rows of `ks`, keeping the newest `max`; returns the store and the sequence
    /// numbers of rows beyond the bound (for the caller to remove).
    ///
    /// # Errors
    /// Engine errors and corrupt rows.
    pub fn load(ks: &fjall::Keyspace, max: usize) -> Result<(Self, Vec<u64>)> {
        let mut ring = Ring::default();
        for guard in ks.iter() {
            let (k, v) = guard.into_inner()?;
            let e = decode(&k, &v)?;
            ring.next_seq = ring.next_seq.max(e.seq + 1);
            ring.insert(e);
        }
        let mut extra = Vec::new();
        while ring.order.len() > max {
            if let Some(seq) = ring.evict_oldest() {
                extra.push(seq);
            }
        }
        Ok((Self { max, ring: RwLock::new(ring) }, extra))
    }

    /// The bound.
    pub fn max(&self) -> usize {
        self.max
    }

    /// Exemplars held.
    pub fn len(&self) -> usize {
        self.read().order.len()
    }

    /// True when none is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Ring> {
        self.ring.read().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Decides what `batch` (tagged per series, in request order) adds: sequence numbers, drops of
    /// out-of-order and duplicate exemplars (against the store and earlier ones of the batch),
    /// and the evictions that keep the bound. Changes nothing: [`ExemplarStore::apply`] does,
    /// once the rows are committed. Writer thread only.
    pub fn admit<'a>(&self, batch: impl IntoIterator<Item = (usize, SeriesId, &'a [Exemplar])>) -> Admitted {
        let ring = self.read();
        let mut out = Admitted::default();
        if self.max == 0 {
            out.dropped = batch.into_iter().map(|(_, _, e)| e.len()).sum();
            return out;
        }
        let mut seq = ring.next_seq;
        let mut newest: IdMap<(i64, Exemplar)> = IdMap::default();
        for (tag, series, exemplars) in batch {
            for e in exemplars {
                let last = newest.get(&series).cloned().or_else(|| ring.newest(series));
                let refused = last.is_some_and(|(t, l)| {
                    e.timestamp_ms < t
                        || (e.timestamp_ms == t && l.value.to_bits() == e.value.to_bits() && l.labels == e.labels)
                });
                if refused {
                    out.dropped += 1;
                    continue;
                }
                newest.insert(series, (e.timestamp_ms, e.clone()));
                out.added.push(StoredExemplar { seq, series, exemplar: e.clone() });
                out.tags.push(tag);
                seq += 1;
            }
        }
        let total = ring.order.len() + out.added.len();
        let evict = total.saturating_sub(self.max);
        out.evicted = ring.order.iter().take(evict).map(|&(s, _, _)| s).collect();
        // More new exemplars than the bound: the oldest new ones are not kept either.
        let surplus = evict.saturating_sub(ring.order.len());
        if surplus > 0 {
            out.dropped += surplus;
            out.added.drain(..surplus);
            out.tags.drain(..surplus);
        }
        out
    }

    /// Applies what [`ExemplarStore::admit`] decided, after its rows were committed.
    pub fn apply(&self, admitted: Admitted) {
        let mut ring = self.ring.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        for _ in &admitted.evicted {
            ring.evict_oldest();
        }
        for e in admitted.added {
            ring.next_seq = ring.next_seq.max(e.seq + 1);
            ring.insert(e);
        }
    }

    /// The series holding an exemplar in `[start, end]`, ascending.
    pub fn series_in(&self, start_ms: i64, end_ms: i64) -> Vec<SeriesId> {
        if start_ms > end_ms {
            return Vec::new();
        }
        let ring = self.read();
        let mut ids: Vec<SeriesId> = ring
            .by_series
            .iter()
            .filter(|(_, all)| all.range((start_ms, 0)..=(end_ms, u64::MAX)).next().is_some())
            .map(|(&id, _)| id)
            .collect();
        ids.sort_unstable();
        ids
    }

    /// The exemplars of `series` in `[start, end]`, by time.
    pub fn of(&self, series: SeriesId, start_ms: i64, end_ms: i64) -> Vec<Exemplar> {
        if start_ms > end_ms {
            return Vec::new();
        }
        let ring = self.read();
        ring.by_series
            .get(&series)
            .map(|all| all.range((start_ms, 0)..=(end_ms, u64::MAX)).map(|(_, e)| e.clone()).collect())
            .unwrap_or_default()
    }
}

impl Ring {
    fn insert(&mut self, e: StoredExemplar) {
        self.order.push_back((e.seq, e.series, e.exemplar.timestamp_ms));
        self.by_series.entry(e.series).or_default().insert((e.exemplar.timestamp_ms, e.seq), e.exemplar);
    }

    fn evict_oldest(&mut self) -> Option<u64> {
        let (seq, series, ts) = self.order.pop_front()?;
        if let Some(all) = self.by_series.get_mut(&series) {
            all.remove(&(ts, seq));
            if all.is_empty() {
                self.by_series.remove(&series);
            }
        }
        Some(seq)
    }

    fn newest(&self, series: SeriesId) -> Option<(i64, Exemplar)> {
        self.by_series.get(&series)?.last_key_value().map(|((t, _), e)| (*t, e.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ex(t: i64, v: f64, trace: &str) -> Exemplar {
        let labels =
            if trace.is_empty() { Labels::empty() } else { Labels::from_pairs([("trace_id", trace)]).unwrap() };
        Exemplar { labels, value: v, timestamp_ms: t }
    }

    #[test]
    fn rows_round_trip() {
        let e = ex(1_700_000_000_123, f64::from_bits(0x7ff0_0000_0000_0002), "abc");
        let row = decode(&key(42), &encode(7, &e)).unwrap();
        assert_eq!((row.seq, row.series, row.exemplar.timestamp_ms), (42, 7, e.timestamp_ms));
        assert_eq!(row.exemplar.value.to_bits(), e.value.to_bits());
        assert_eq!(row.exemplar.labels, e.labels);
        assert!(decode(&key(1), &[0; 10]).is_err());
        assert!(decode(&[1, 2], &encode(7, &e)).is_err());
    }

    proptest! {
        /// Against a brute-force reference: a list of (seq, series, exemplar) in arrival order,
        /// keeping per series only exemplars newer than its newest (or equal in time but not a
        /// duplicate), then only the newest `max` overall. With `spread`, each exemplar comes
        /// in an entry of its own, so a series' exemplars of one write are spread over several
        /// entries (as a request's `TimeSeries` carry them), interleaved with other series'.
        #[test]
        fn the_store_keeps_what_a_bounded_in_order_list_keeps(
            writes in proptest::collection::vec(proptest::collection::vec((0u64..4, 0i64..30, 0u8..3), 0..8), 0..12),
            max in 0usize..20,
            spread in any::<bool>(),
        ) {
            let dir = tempfile::tempdir().unwrap();
            let db = fjall::Database::builder(dir.path()).open().unwrap();
            let ks = db.keyspace("exemplars", fjall::KeyspaceCreateOptions::default).unwrap();
            let (store, _) = ExemplarStore::load(&ks, max).unwrap();
            let mut reference: Vec<(SeriesId, Exemplar)> = Vec::new();
            for batch in &writes {
                let entries: Vec<(SeriesId, Vec<Exemplar>)> = if spread {
                    batch.iter().map(|&(s, t, v)| (s, vec![ex(t, f64::from(v), "t")])).collect()
                } else {
                    let mut per_series: BTreeMap<SeriesId, Vec<Exemplar>> = BTreeMap::new();
                    for &(s, t, v) in batch {
                        per_series.entry(s).or_default().push(ex(t, f64::from(v), "t"));
                    }
                    per_series.into_iter().collect()
                };
                let admitted = store.admit(entries.iter().map(|(s, e)| (0, *s, e.as_slice())));
                let kept_before = reference.len();
                for (s, es) in &entries {
                    for e in es {
                        let last = reference.iter().rev().find(|(r, _)| r == s).map(|(_, x)| x.clone());
                        let refused = max == 0 || last.is_some_and(|l| e.timestamp_ms < l.timestamp_ms
                            || (e.timestamp_ms == l.timestamp_ms && l.value == e.value && l.labels == e.labels));
                        if !refused {
                            reference.push((*s, e.clone()));
                        }
                    }
                }
                let kept = reference.len() - kept_before;
                prop_assert_eq!(admitted.added.len() + admitted.dropped, batch.len());
                prop_assert_eq!(admitted.added.len(), kept.min(max));
                let cut = reference.len().saturating_sub(max);
                reference.drain(..cut);
                for seq in &admitted.evicted {
                    ks.remove(key(*seq)).unwrap();
                }
                for e in &admitted.added {
                    ks.insert(key(e.seq), encode(e.series, &e.exemplar)).unwrap();
                }
                store.apply(admitted);
                prop_assert_eq!(store.len(), reference.len());
            }
            let want = |store: &ExemplarStore| {
                let got: Vec<(SeriesId, Vec<Exemplar>)> = store
                    .series_in(i64::MIN, i64::MAX)
                    .into_iter()
                    .map(|s| (s, store.of(s, i64::MIN, i64::MAX)))
                    .collect();
                let mut expect: BTreeMap<SeriesId, Vec<Exemplar>> = BTreeMap::new();
                for (s, e) in &reference {
                    expect.entry(*s).or_default().push(e.clone());
                }
                (got, expect.into_iter().collect::<Vec<_>>())
            };
            let (got, expect) = want(&store);
            prop_assert_eq!(got, expect);
            // Reloaded from its rows, the store holds the same.
            let (reloaded, extra) = ExemplarStore::load(&ks, max).unwrap();
            prop_assert!(extra.is_empty());
            let (got, expect) = want(&reloaded);
            prop_assert_eq!(got, expect);
        }
    }
}
