//! Writes spanning shards, all or nothing. ClickHouse 18.16 has no transaction across servers,
//! so a write that touches several shards commits in two steps:
//!
//! 1. Its rows in `samples`, `starts`, `exemplars` and `postings` carry its **write id**
//!    (`write_id`, never 0) and are inserted on every shard concerned, as any write's
//!    (`write.rs`). They are invisible.
//! 2. Once every shard acknowledged them, one **commit record** (`commits`: `write_id`, `day`)
//!    is inserted on the write's **coordinator**, the lowest-numbered shard it touched, and
//!    only then is the write acknowledged. That insert is the commit point: one row on one
//!    server, so it is there or not. If a shard failed, no record is written, the client gets
//!    the shard's 503, and the rows already inserted elsewhere stay invisible for ever.
//!
//! Readers (queries, exports, remote read, start timestamps, exemplars, and through `postings`
//! series, label names and values: `postings.rs`) and seals see a row of write id `w != 0` only
//! when `w` has a commit record. A write touching one shard keeps write id 0 and is
//! visible as soon as its insert is, as before: it pays nothing more.
//!
//! - **Write ids** are random 64-bit numbers (a per-process random seed hashed with a counter:
//!   unique across nodes without coordination; an aborted write would show only if a later
//!   write drew its id, odds about `2^-63` per committed write kept), rounded so that
//!   `write_id % shards` is the coordinator: a reader finds a row's commit record without
//!   asking every shard.
//! - **Deadline.** A node writes a commit record only within the request timeout of building
//!   the group (the rows' `inserted_at`), so every record is in place [`ClickHouse::abort_horizon`]
//!   (twice the timeout plus a minute of clock skew) after `inserted_at`. A row older than
//!   that without a record belongs to an aborted write: seals skip it and delete it with the
//!   rows they fold (`seal.rs`), and readers remember it as aborted.
//! - **Cache.** Decided write ids (committed, or aborted past the horizon) are kept per node
//!   (at most [`DECIDED_MAX`], then forgotten): a read asks a coordinator only about the write
//!   ids it has not seen yet, usually none.
//! - **Retries** write the same rows under a new write id. The write id is the last column of
//!   the tables' sorting key, so merges never fold an aborted row into a committed one of the
//!   same series and time (`ReplacingMergeTree` keeps the last inserted); readers resolve the
//!   copies to one sample, and the next seal keeps one.
//!
//! A node that crashes after the commit and before answering leaves a committed write: the
//! client's retry writes it again, which reads and seals resolve to one copy.

use std::collections::{HashMap, HashSet};
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::read::{malformed, IDS_PER_STATEMENT};
use super::rowbinary::Reader;
use super::{day_of, ClickHouse};
use crate::storage::StorageError;

/// Most write ids a node remembers as decided; past that it forgets them all and asks again.
pub const DECIDED_MAX: usize = 1 << 20;

/// Called by the writer between a group's data inserts and its commit records (tests only: it
/// lets a test stop the coordinator at exactly that point).
#[derive(Clone)]
pub struct CommitHook(pub Arc<dyn Fn() + Send + Sync>);

impl std::fmt::Debug for CommitHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CommitHook")
    }
}

/// A node's source of write ids.
pub(super) struct WriteIds {
    seed: u64,
    next: AtomicU64,
}

impl WriteIds {
    pub(super) fn new() -> Self {
        // `RandomState` is seeded from the operating system's randomness once per thread;
        // the process id and the clock keep two processes apart even if that failed.
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let seed = std::collections::hash_map::RandomState::new().hash_one((std::process::id(), nanos));
        Self { seed, next: AtomicU64::new(0) }
    }

    /// A fresh write id whose coordinator (`id % shards`) is `coordinator`.
    pub(super) fn next(&self, coordinator: usize, shards: usize) -> u64 {
        let n = shards.max(1) as u64;
        loop {
            let counter = self.next.fetch_add(1, Ordering::Relaxed);
            let r = xxhash_rust::xxh3::xxh3_64_with_seed(&counter.to_le_bytes(), self.seed);
            match (r - r % n).checked_add(coordinator as u64) {
                Some(id) if id != 0 => return id,
                _ => continue,
            }
        }
    }
}

/// The coordinator shard of write id `id` among `shards`.
pub(super) fn coordinator(id: u64, shards: usize) -> usize {
    usize::try_from(id % shards.max(1) as u64).unwrap_or(0)
}

/// Write ids whose fate a node knows.
#[derive(Default)]
pub(super) struct Decided {
    committed: HashSet<u64>,
    aborted: HashSet<u64>,
}

impl Decided {
    fn remember(&mut self, id: u64, committed: bool) {
        if self.committed.len() + self.aborted.len() >= DECIDED_MAX {
            self.committed.clear();
            self.aborted.clear();
        }
        if committed {
            self.committed.insert(id);
        } else {
            self.aborted.insert(id);
        }
    }
}

/// The write ids of rows read, each with the `inserted_at` of its rows (the latest seen).
#[derive(Default)]
pub(super) struct SeenIds {
    ids: HashMap<u64, i64>,
    /// The last row's write id and `inserted_at` (rows of one write come together).
    last: (u64, i64),
}

impl SeenIds {
    /// Notes a row's write id (0, a single-shard write, needs no answer).
    pub(super) fn note(&mut self, write_id: u64, inserted_at: i64) {
        if write_id == 0 || self.last == (write_id, inserted_at) {
            return;
        }
        self.last = (write_id, inserted_at);
        let at = self.ids.entry(write_id).or_insert(inserted_at);
        *at = (*at).max(inserted_at);
    }

    /// The write ids noted.
    pub(super) fn ids(&self) -> impl Iterator<Item = u64> + '_ {
        self.ids.keys().copied()
    }
}

/// Which write ids' rows are visible: 0 and the committed ones.
pub(super) struct Visible(HashSet<u64>);

impl Visible {
    pub(super) fn contains(&self, write_id: u64) -> bool {
        write_id == 0 || self.0.contains(&write_id)
    }
}

impl ClickHouse {
    /// How long after its rows' `inserted_at` a write's commit record is surely in place, or
    /// never will be: twice the request timeout (the data inserts, then the commit record,
    /// sent only within the first) plus a minute for the nodes' clocks to differ.
    pub(super) fn abort_horizon(&self) -> i64 {
        let timeout = i64::try_from(self.inner.config.timeout.as_millis()).unwrap_or(i64::MAX / 4);
        timeout.saturating_mul(2).saturating_add(60_000)
    }

    /// A fresh write id coordinated by shard `coordinator`.
    pub(super) fn write_id(&self, coordinator: usize) -> u64 {
        self.inner.write_ids.next(coordinator, self.inner.shards.len())
    }

    /// Whether write id `id` is known here to be committed (`Some(true)`) or aborted
    /// (`Some(false)`); `None` when its coordinator must be asked ([`ClickHouse::visible`]).
    pub(super) fn decided(&self, id: u64) -> Option<bool> {
        if id == 0 {
            return Some(true);
        }
        let decided = self.inner.decided.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if decided.committed.contains(&id) {
            Some(true)
        } else if decided.aborted.contains(&id) {
            Some(false)
        } else {
            None
        }
    }

    /// Which of the write ids `seen` are committed, asking their coordinators about those this
    /// node has not decided yet (a write id without a record older than the abort horizon at
    /// `now_ms` is remembered as aborted).
    ///
    /// # Errors
    /// [`StorageError::Unavailable`] when a coordinator that must be asked fails.
    pub(super) fn visible(&self, seen: &SeenIds, now_ms: i64) -> Result<Visible, StorageError> {
        let shards = self.inner.shards.len();
        let mut visible = HashSet::new();
        if seen.ids.is_empty() {
            return Ok(Visible(visible));
        }
        let mut ask: Vec<Vec<u64>> = vec![Vec::new(); shards];
        {
            let decided = self.inner.decided.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            for &id in seen.ids.keys() {
                if decided.committed.contains(&id) {
                    visible.insert(id);
                } else if !decided.aborted.contains(&id) {
                    if let Some(list) = ask.get_mut(coordinator(id, shards)) {
                        list.push(id);
                    }
                }
            }
        }
        for (shard, ids) in self.inner.shards.iter().zip(&ask) {
            for chunk in ids.chunks(IDS_PER_STATEMENT) {
                let list = chunk.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
                let body = shard.query(&format!(
                    "SELECT DISTINCT write_id FROM {} WHERE write_id IN ({list}) FORMAT RowBinary",
                    self.table("commits")
                ))?;
                let mut r = Reader::new(&body);
                while !r.is_empty() {
                    visible.insert(r.u64().map_err(|e| malformed(shard, e))?);
                }
            }
        }
        let horizon = now_ms.saturating_sub(self.abort_horizon());
        let mut decided = self.inner.decided.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        for &id in ask.iter().flatten() {
            if visible.contains(&id) {
                decided.remember(id, true);
            } else if seen.ids.get(&id).is_some_and(|&at| at < horizon) {
                decided.remember(id, false);
            }
        }
        Ok(Visible(visible))
    }

    /// Writes the commit records of `per_coordinator` (write ids by coordinator shard), each
    /// coordinator's in one insert, in parallel; the outcome per shard (`Ok` where none).
    pub(super) fn commit(&self, per_coordinator: &[Vec<u64>], now_ms: i64) -> Vec<Result<(), StorageError>> {
        let insert = format!("INSERT INTO {} (write_id, day)", self.table("commits"));
        let day = day_of(now_ms).to_le_bytes();
        std::thread::scope(|scope| {
            let handles: Vec<_> = per_coordinator
                .iter()
                .zip(&self.inner.shards)
                .map(|(ids, shard)| {
                    let insert = &insert;
                    scope.spawn(move || -> Result<(), StorageError> {
                        if ids.is_empty() {
                            return Ok(());
                        }
                        let mut rows = Vec::with_capacity(ids.len() * 10);
                        for id in ids {
                            rows.extend_from_slice(&id.to_le_bytes());
                            rows.extend_from_slice(&day);
                        }
                        shard.insert(insert, &rows, usize::MAX, ids.len() as u64)?;
                        Ok(())
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| Err(StorageError::Unavailable("a commit insert panicked".to_owned())))
                })
                .collect()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_ids_name_their_coordinator_and_differ() {
        let ids = WriteIds::new();
        let mut seen = HashSet::new();
        for shards in 1..6 {
            for c in 0..shards {
                for _ in 0..200 {
                    let id = ids.next(c, shards);
                    assert_ne!(id, 0);
                    assert_eq!(coordinator(id, shards), c);
                    assert!(seen.insert(id), "write id {id} drawn twice");
                }
            }
        }
        // Another node (another seed) draws other ids.
        let other = WriteIds::new();
        assert!((0..1000).all(|_| !seen.contains(&other.next(1, 2))));
    }

    #[test]
    fn single_shard_rows_are_always_visible_and_others_only_when_committed() {
        let v = Visible(HashSet::from([7]));
        assert!(v.contains(0) && v.contains(7) && !v.contains(8));
    }

    #[test]
    fn decided_ids_are_forgotten_past_the_bound() {
        let mut d = Decided::default();
        for id in 0..DECIDED_MAX as u64 {
            d.remember(id, id % 2 == 0);
        }
        assert_eq!(d.committed.len() + d.aborted.len(), DECIDED_MAX);
        d.remember(u64::MAX, true);
        assert_eq!((d.committed.len(), d.aborted.len()), (1, 0));
    }
}
