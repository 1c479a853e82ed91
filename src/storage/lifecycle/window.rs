//! Time windows: each window of `window_ms` milliseconds owns up to two keyspaces.
//!
//! - `points_<start_ms>_<generation>`: hot runs flushed from the head (see [`crate::storage::format::run`]).
//!   Before a window is sealed it holds the window's flushed samples; after, it is the overlay of
//!   late samples (absent when there are none).
//! - `chunks_<start_ms>_<generation>`: the sealed window, Gorilla+zstd chunks (see
//!   [`crate::storage::format::chunk`]). It is visible only once the manifest key `sealed/<start_ms>` names its
//!   generation; a chunks keyspace without that mark is a seal that crashed halfway: it is kept
//!   (not deleted) and cleared and reused by the window's next seal (see [`Windows::take_spare`]).
//!
//! Generations come from one persistent counter (see [`crate::storage::shared::Shared::allocate_generation`]),
//! so no keyspace name is ever used twice: a keyspace created under the name of a deleted one
//! lost its registration after a later restart (found by the kill -9 sealing test).
//!
//! Both keyspaces carry the window index (`0xFFFF series_id`). A reader merges chunks and
//! overlay, the overlay winning on equal timestamps. Dropping a window is dropping its
//! keyspaces, which is how retention deletes data without writing tombstones.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use fjall::config::CompressionPolicy;
use fjall::{CompressionType, KeyspaceCreateOptions};

use crate::storage::error::Result;

/// Keyspace-name prefix of hot windows.
const POINTS_PREFIX: &str = "points_";
/// Keyspace-name prefix of sealed windows.
const CHUNKS_PREFIX: &str = "chunks_";

/// Name of generation `generation` of the hot keyspace of the window starting at `start_ms`.
pub fn keyspace_name(start_ms: i64, generation: u32) -> String {
    format!("{POINTS_PREFIX}{start_ms}_{generation}")
}

/// Name of generation `generation` of the chunks keyspace of a window.
pub fn chunks_keyspace_name(start_ms: i64, generation: u32) -> String {
    format!("{CHUNKS_PREFIX}{start_ms}_{generation}")
}

fn parse_generation_name(name: &str, prefix: &str) -> Option<(i64, u32)> {
    let (start, generation) = name.strip_prefix(prefix)?.split_once('_')?;
    Some((start.parse().ok()?, generation.parse().ok()?))
}

/// `(start, generation)` parsed back from a hot keyspace name.
pub fn parse_keyspace_name(name: &str) -> Option<(i64, u32)> {
    parse_generation_name(name, POINTS_PREFIX)
}

/// `(start, generation)` parsed back from a chunks keyspace name.
pub fn parse_chunks_keyspace_name(name: &str) -> Option<(i64, u32)> {
    parse_generation_name(name, CHUNKS_PREFIX)
}

/// Manifest key recording the visible chunks generation of a window.
pub fn sealed_key(start_ms: i64) -> String {
    format!("sealed/{start_ms}")
}

/// Manifest key recording how many samples the visible chunks generation of a window holds.
pub fn sealed_samples_key(start_ms: i64) -> String {
    format!("sealed_samples/{start_ms}")
}

/// The samples the visible chunks generation of a window holds ([`sealed_samples_key`]; 0 when
/// unrecorded).
///
/// # Errors
/// Engine errors.
pub fn sealed_samples(meta: &fjall::Keyspace, start_ms: i64) -> Result<u64> {
    Ok(meta
        .get(sealed_samples_key(start_ms))?
        .and_then(|v| <[u8; 8]>::try_from(v.as_ref()).ok())
        .map_or(0, u64::from_be_bytes))
}

/// Manifest key present once a window is downsampled (see `downsample.rs`): its value, the tier
/// intervals its visible chunks generation keeps, ascending, each an `i64` BE. Written in the
/// batch that marks that generation, so the two never disagree.
pub fn downsampled_key(start_ms: i64) -> String {
    format!("downsampled/{start_ms}")
}

/// The intervals of a [`downsampled_key`] value; `None` for a value that is not a list of
/// positive `i64`s.
pub fn decode_downsampled(value: &[u8]) -> Option<Vec<i64>> {
    if value.is_empty() || !value.len().is_multiple_of(8) {
        return None;
    }
    let out: Vec<i64> = value.chunks_exact(8).filter_map(|c| c.try_into().ok()).map(i64::from_be_bytes).collect();
    out.iter().all(|&i| i > 0).then_some(out)
}

/// The [`downsampled_key`] value of `intervals_ms`.
pub fn encode_downsampled(intervals_ms: &[i64]) -> Vec<u8> {
    intervals_ms.iter().flat_map(|i| i.to_be_bytes()).collect()
}

/// Point rows and chunks compress well with LZ4 on every level (fjall's default leaves L0/L1 raw).
pub fn keyspace_options() -> KeyspaceCreateOptions {
    KeyspaceCreateOptions::default()
        .data_block_compression_policy(CompressionPolicy::all(CompressionType::Lz4))
        .index_block_compression_policy(CompressionPolicy::all(CompressionType::Lz4))
}

/// One window as readers see it.
#[derive(Clone)]
pub struct Window {
    /// First millisecond of the window.
    pub start_ms: i64,
    /// Hot rows (all samples of an unsealed window, the late overlay of a sealed one).
    pub points: Option<fjall::Keyspace>,
    /// The visible chunks generation and its keyspace, once sealed.
    pub chunks: Option<(u32, fjall::Keyspace)>,
    /// Once downsampled (see `downsample.rs`): the tier intervals its chunks keep, ascending.
    /// Its float series without native histograms then have no raw samples, only tier rows of
    /// these intervals, and writes into it are refused.
    pub downsampled: Option<Arc<[i64]>>,
}

impl Window {
    /// The finest interval the window keeps, once downsampled.
    pub fn finest_kept(&self) -> Option<i64> {
        self.downsampled.as_ref().and_then(|d| d.first().copied())
    }
}

#[derive(Clone, Default)]
struct Entry {
    points: Option<fjall::Keyspace>,
    chunks: Option<(u32, fjall::Keyspace)>,
    downsampled: Option<Arc<[i64]>>,
    /// Sequence number of the last group commit into `points`, set once that commit is applied;
    /// a seal drops the overlay only if this did not move while it ran (see
    /// [`Windows::committed`]).
    writes: u64,
}

/// The registry of windows on disk. Readers clone handles out of it; only the writer thread
/// creates and drops keyspaces or swaps a window's state, so nothing is dropped under a commit.
pub struct Windows {
    window_ms: i64,
    open: RwLock<BTreeMap<i64, Entry>>,
    /// Per window, the chunks keyspace of a seal that did not finish, kept (not deleted) for the
    /// window's next seal to clear and reuse. Deleting it at start-up let fjall 3.1 hand its
    /// internal keyspace id to the next keyspace created after a restart, and reusing an id
    /// corrupted the registration of *another* keyspace (found by the kill -9 sealing test).
    spare: std::sync::Mutex<BTreeMap<i64, (u32, fjall::Keyspace)>>,
    /// Group commits so far (process-wide, so a window dropped and created again never repeats
    /// a value a seal of its earlier life read).
    commits: AtomicU64,
    /// No window ending after this is downsampled (writes after it skip the check).
    downsampled_end: AtomicI64,
}

impl Windows {
    /// Opens every window keyspace in the database; keeps the newest chunks keyspace of a seal
    /// that did not finish as the window's spare, and deletes older unfinished ones.
    ///
    /// # Errors
    /// Engine errors.
    pub fn load(db: &fjall::Database, meta: &fjall::Keyspace, window_ms: i64) -> Result<Self> {
        let mut open: BTreeMap<i64, Entry> = BTreeMap::new();
        let mut spare: BTreeMap<i64, (u32, fjall::Keyspace)> = BTreeMap::new();
        let mut names = db.list_keyspace_names();
        // Oldest generation first, so a window's newest unfinished seal is the spare kept.
        names.sort_by_key(|n| parse_chunks_keyspace_name(n).map(|(_, g)| g));
        for name in names {
            if let Some((start, _)) = parse_keyspace_name(&name) {
                let ks = db.keyspace(&name, keyspace_options)?;
                // At most one hot keyspace per window exists: a new one is created only after
                // the previous one was deleted.
                if let Some(other) = open.entry(start).or_default().points.replace(ks) {
                    tracing::error!(
                        window = start,
                        "BUG: two hot keyspaces for one window; keeping both readable is not supported"
                    );
                    open.entry(start).or_default().points = Some(other);
                }
            } else if let Some((start, generation)) = parse_chunks_keyspace_name(&name) {
                let visible = meta
                    .get(sealed_key(start))?
                    .and_then(|v| <[u8; 4]>::try_from(v.as_ref()).ok())
                    .map(u32::from_be_bytes);
                let ks = db.keyspace(&name, keyspace_options)?;
                if visible == Some(generation) {
                    let entry = open.entry(start).or_default();
                    entry.chunks = Some((generation, ks));
                    if let Some(v) = meta.get(downsampled_key(start))? {
                        let kept = decode_downsampled(&v)
                            .ok_or(crate::storage::error::StorageError::Corrupt { what: "downsampled window mark" })?;
                        entry.downsampled = Some(kept.into());
                    }
                } else {
                    tracing::info!(keyspace = %&*name, "keeping chunks of an unfinished seal for the next seal to reuse");
                    if let Some((_, older)) = spare.insert(start, (generation, ks)) {
                        db.delete_keyspace(older)?;
                    }
                }
            }
        }
        let downsampled_end = open
            .iter()
            .filter(|(_, e)| e.downsampled.is_some())
            .map(|(&s, _)| s.saturating_add(window_ms))
            .max()
            .unwrap_or(i64::MIN);
        Ok(Self {
            window_ms,
            open: RwLock::new(open),
            spare: std::sync::Mutex::new(spare),
            commits: AtomicU64::new(0),
            downsampled_end: AtomicI64::new(downsampled_end),
        })
    }

    fn spares(&self) -> std::sync::MutexGuard<'_, BTreeMap<i64, (u32, fjall::Keyspace)>> {
        self.spare.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Takes the window's spare chunks keyspace (of an unfinished seal), if any. Its content is
    /// unknown: clear it before use.
    pub fn take_spare(&self, start_ms: i64) -> Option<(u32, fjall::Keyspace)> {
        self.spares().remove(&start_ms)
    }

    /// Keeps a chunks keyspace a seal could not finish as the window's spare.
    pub fn put_spare(&self, start_ms: i64, chunks: (u32, fjall::Keyspace)) {
        self.spares().insert(start_ms, chunks);
    }

    /// Window length in milliseconds.
    pub fn window_ms(&self) -> i64 {
        self.window_ms
    }

    /// Start of the window holding `ts_ms`.
    pub fn start_of(&self, ts_ms: i64) -> i64 {
        // Saturating: a remote-read range may start at i64::MIN.
        ts_ms.saturating_sub(ts_ms.rem_euclid(self.window_ms))
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<i64, Entry>> {
        self.open.read().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, BTreeMap<i64, Entry>> {
        self.open.write().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn view(start_ms: i64, e: &Entry) -> Window {
        Window { start_ms, points: e.points.clone(), chunks: e.chunks.clone(), downsampled: e.downsampled.clone() }
    }

    /// Windows overlapping `[start_ms, end_ms]`, oldest first.
    pub fn overlapping(&self, start_ms: i64, end_ms: i64) -> Vec<Window> {
        let first = self.start_of(start_ms);
        if end_ms < first {
            return Vec::new();
        }
        self.read().range(first..=end_ms).map(|(&s, e)| Self::view(s, e)).collect()
    }

    /// Every window, oldest first.
    pub fn all(&self) -> Vec<Window> {
        self.read().iter().map(|(&s, e)| Self::view(s, e)).collect()
    }

    /// The window starting at `start_ms`, if it exists.
    pub fn get(&self, start_ms: i64) -> Option<Window> {
        self.read().get(&start_ms).map(|e| Self::view(start_ms, e))
    }

    /// Sequence number of the last group commit into the window's hot keyspace. A seal that
    /// reads it before scanning sees every row of that commit and of every earlier one.
    pub fn writes(&self, start_ms: i64) -> u64 {
        self.read().get(&start_ms).map_or(0, |e| e.writes)
    }

    /// The hot keyspace of the window starting at `start_ms`, created (under a fresh generation
    /// from `allocate`) if needed. Writer thread only; once the group is committed, report the
    /// windows it wrote to with [`Windows::committed`].
    ///
    /// # Errors
    /// Engine errors.
    pub fn points_for_write(
        &self,
        db: &fjall::Database,
        start_ms: i64,
        allocate: impl FnOnce() -> Result<u32>,
    ) -> Result<fjall::Keyspace> {
        if let Some(ks) = self.read().get(&start_ms).and_then(|e| e.points.clone()) {
            return Ok(ks);
        }
        let ks = db.keyspace(&keyspace_name(start_ms, allocate()?), keyspace_options)?;
        self.write().entry(start_ms).or_default().points = Some(ks.clone());
        Ok(ks)
    }

    /// Records a group commit into the hot keyspaces of the windows starting at `starts`.
    /// Called after the commit is applied, never before: a seal that started between filling a
    /// group and committing it must see the count move, or it would drop the overlay holding
    /// rows it never read. Writer thread only.
    pub fn committed(&self, starts: impl IntoIterator<Item = i64>) {
        let seq = self.commits.fetch_add(1, Ordering::Relaxed) + 1;
        let mut open = self.write();
        for start in starts {
            if let Some(e) = open.get_mut(&start) {
                e.writes = seq;
            }
        }
    }

    /// Makes `chunks` the window's visible generation; returns the replaced generation's
    /// keyspace, and the overlay when no commit reached it since the seal read `writes_at_start`
    /// (both for the caller to delete). `None` when the window is gone (retention dropped it meanwhile).
    /// Writer thread only.
    #[allow(clippy::type_complexity)]
    pub fn install_chunks(
        &self,
        start_ms: i64,
        chunks: (u32, fjall::Keyspace),
        writes_at_start: u64,
    ) -> Option<(Option<fjall::Keyspace>, Option<fjall::Keyspace>)> {
        let mut open = self.write();
        let entry = open.get_mut(&start_ms)?;
        let old = entry.chunks.replace(chunks).map(|(_, ks)| ks);
        let overlay = if entry.writes == writes_at_start { entry.points.take() } else { None };
        Some((old, overlay))
    }

    /// Makes `chunks`, which keeps only the tier rows of `kept` (ascending) for its tiered
    /// series, the visible generation of a window that is sealed without an overlay; returns the
    /// replaced keyspace for the caller to delete. `None` when the window is gone or has an
    /// overlay or a write since `writes_at_start` (the caller then deletes `chunks`). Writer
    /// thread only.
    pub fn install_downsampled(
        &self,
        start_ms: i64,
        chunks: (u32, fjall::Keyspace),
        kept: &[i64],
        writes_at_start: u64,
    ) -> Option<fjall::Keyspace> {
        let mut open = self.write();
        let entry = open.get_mut(&start_ms)?;
        if entry.points.is_some() || entry.writes != writes_at_start || entry.chunks.is_none() {
            return None;
        }
        entry.downsampled = Some(kept.into());
        self.downsampled_end.fetch_max(start_ms.saturating_add(self.window_ms), Ordering::Relaxed);
        entry.chunks.replace(chunks).map(|(_, ks)| ks)
    }

    /// No window ending after this is downsampled.
    pub fn downsampled_end(&self) -> i64 {
        self.downsampled_end.load(Ordering::Relaxed)
    }

    /// The downsampled window a sample at `ts_ms` would land in, if it is one (see
    /// [`Window::downsampled`]). Cheap for samples after every downsampled window.
    pub fn downsampled_at(&self, ts_ms: i64) -> Option<Window> {
        if ts_ms >= self.downsampled_end.load(Ordering::Relaxed) {
            return None;
        }
        let start = self.start_of(ts_ms);
        self.read().get(&start).filter(|e| e.downsampled.is_some()).map(|e| Self::view(start, e))
    }

    /// True when some window ends at or before `cutoff_ms` (what [`Windows::take_expired`] would
    /// remove).
    pub fn any_expired(&self, cutoff_ms: i64) -> bool {
        self.read().keys().next().is_some_and(|&start| start.saturating_add(self.window_ms) <= cutoff_ms)
    }

    /// Takes the window's overlay (hot keyspace) out of the registry when no commit reached it
    /// since a re-seal read `writes_at_start`, for the caller to delete; `Some(None)` when it
    /// must stay, `None` when the window is gone. Writer thread only.
    pub fn take_overlay(&self, start_ms: i64, writes_at_start: u64) -> Option<Option<fjall::Keyspace>> {
        let mut open = self.write();
        let entry = open.get_mut(&start_ms)?;
        Some(if entry.writes == writes_at_start { entry.points.take() } else { None })
    }

    /// Removes and returns the windows that end at or before `cutoff_ms`. Writer thread only.
    pub fn take_expired(&self, cutoff_ms: i64) -> Vec<Window> {
        let mut open = self.write();
        let expired: Vec<i64> =
            open.keys().copied().take_while(|&start| start.saturating_add(self.window_ms) <= cutoff_ms).collect();
        expired.into_iter().filter_map(|s| open.remove(&s).map(|e| Self::view(s, &e))).collect()
    }

    /// Removes and returns the spare keyspaces of windows that end at or before `cutoff_ms`.
    pub fn take_expired_spares(&self, cutoff_ms: i64) -> Vec<fjall::Keyspace> {
        let mut spares = self.spares();
        let expired: Vec<i64> =
            spares.keys().copied().take_while(|&start| start.saturating_add(self.window_ms) <= cutoff_ms).collect();
        expired.into_iter().filter_map(|s| spares.remove(&s).map(|(_, ks)| ks)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        assert_eq!(parse_keyspace_name(&keyspace_name(1_700_000_000_000, 4)), Some((1_700_000_000_000, 4)));
        assert_eq!(parse_keyspace_name("postings"), None);
        assert_eq!(parse_chunks_keyspace_name(&chunks_keyspace_name(86_400_000, 3)), Some((86_400_000, 3)));
        assert_eq!(parse_chunks_keyspace_name(&keyspace_name(5, 1)), None);
    }
}
