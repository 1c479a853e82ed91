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
//! Each retention class (see [`super::class`]) has windows of its own: a class other than the
//! default one tags its keyspace names and manifest keys (`points_r604800000_<start_ms>_<generation>`,
//! `sealed/r604800000/<start_ms>`), so windows of several classes may share a start.
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
use crate::storage::lifecycle::class::{ClassId, ClassTable, DEFAULT_CLASS};

/// Keyspace-name prefix of hot windows.
const POINTS_PREFIX: &str = "points_";
/// Keyspace-name prefix of sealed windows.
const CHUNKS_PREFIX: &str = "chunks_";

/// Which window: its start and its retention class (see `class.rs`). Ordered by start, then
/// class.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WindowKey {
    /// First millisecond of the window.
    pub start_ms: i64,
    /// Its retention class.
    pub class: ClassId,
}

impl WindowKey {
    /// The default class's window starting at `start_ms`.
    pub fn default_class(start_ms: i64) -> Self {
        Self { start_ms, class: DEFAULT_CLASS }
    }
}

/// A window keyspace's name: `<prefix>[<tag>_]<start_ms>_<generation>` (the tag of a class other
/// than the default one, see `class.rs`).
fn generation_name(prefix: &str, tag: Option<&str>, start_ms: i64, generation: u32) -> String {
    match tag {
        Some(tag) => format!("{prefix}{tag}_{start_ms}_{generation}"),
        None => format!("{prefix}{start_ms}_{generation}"),
    }
}

/// `(tag, start, generation)` of a window keyspace name (see [`generation_name`]).
fn parse_generation_name<'a>(name: &'a str, prefix: &str) -> Option<(Option<&'a str>, i64, u32)> {
    let rest = name.strip_prefix(prefix)?;
    let (tag, rest) = match rest.strip_prefix('r') {
        Some(_) => {
            let (tag, rest) = rest.split_once('_')?;
            (Some(tag), rest)
        }
        None => (None, rest),
    };
    let (start, generation) = rest.split_once('_')?;
    Some((tag, start.parse().ok()?, generation.parse().ok()?))
}

/// `(tag, start, generation)` parsed back from a hot keyspace name.
pub fn parse_keyspace_name(name: &str) -> Option<(Option<&str>, i64, u32)> {
    parse_generation_name(name, POINTS_PREFIX)
}

/// `(tag, start, generation)` parsed back from a chunks keyspace name.
pub fn parse_chunks_keyspace_name(name: &str) -> Option<(Option<&str>, i64, u32)> {
    parse_generation_name(name, CHUNKS_PREFIX)
}

/// A window's manifest key under `family`: `<family>/<start_ms>` for the default class,
/// `<family>/<tag>/<start_ms>` for another.
fn manifest_key(family: &str, tag: Option<&str>, start_ms: i64) -> String {
    match tag {
        Some(tag) => format!("{family}/{tag}/{start_ms}"),
        None => format!("{family}/{start_ms}"),
    }
}

/// The intervals of a [`Windows::downsampled_key`] value; `None` for a value that is not a list
/// of positive `i64`s.
pub fn decode_downsampled(value: &[u8]) -> Option<Vec<i64>> {
    if value.is_empty() || !value.len().is_multiple_of(8) {
        return None;
    }
    let out: Vec<i64> = value.chunks_exact(8).filter_map(|c| c.try_into().ok()).map(i64::from_be_bytes).collect();
    out.iter().all(|&i| i > 0).then_some(out)
}

/// The [`Windows::downsampled_key`] value of `intervals_ms`.
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
    /// Its retention class: windows of several classes may share a start (see `class.rs`).
    pub class: ClassId,
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

    /// Which window it is.
    pub fn key(&self) -> WindowKey {
        WindowKey { start_ms: self.start_ms, class: self.class }
    }
}

/// True when two of `windows` (ordered by key) share a start: a series whose class changed
/// (its rule was edited between two runs) may then have samples in both, which readers merge
/// instead of appending (see `read/select.rs`).
pub fn shared_starts(windows: &[Window]) -> bool {
    windows.windows(2).any(|p| matches!(p, [a, b] if a.start_ms == b.start_ms))
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

/// The registry of windows on disk, of every retention class. Readers clone handles out of it;
/// only the writer thread creates and drops keyspaces or swaps a window's state, so nothing is
/// dropped under a commit.
pub struct Windows {
    window_ms: i64,
    /// Only grows: classes are added at start-up and when retention rules change.
    classes: RwLock<ClassTable>,
    open: RwLock<BTreeMap<WindowKey, Entry>>,
    /// Per window, the chunks keyspace of a seal that did not finish, kept (not deleted) for the
    /// window's next seal to clear and reuse. Deleting it at start-up let fjall 3.1 hand its
    /// internal keyspace id to the next keyspace created after a restart, and reusing an id
    /// corrupted the registration of *another* keyspace (found by the kill -9 sealing test).
    spare: std::sync::Mutex<BTreeMap<WindowKey, (u32, fjall::Keyspace)>>,
    /// Group commits so far (process-wide, so a window dropped and created again never repeats
    /// a value a seal of its earlier life read).
    commits: AtomicU64,
    /// No window ending after this is downsampled (writes after it skip the check).
    downsampled_end: AtomicI64,
}

impl Windows {
    /// Opens every window keyspace in the database, of every class in `classes` and every class
    /// a keyspace name tags (added to the table); keeps the newest chunks keyspace of a seal
    /// that did not finish as the window's spare, and deletes older unfinished ones.
    ///
    /// # Errors
    /// Engine errors.
    pub fn load(db: &fjall::Database, meta: &fjall::Keyspace, window_ms: i64, classes: ClassTable) -> Result<Self> {
        let mut this = Self {
            window_ms,
            classes: RwLock::new(classes),
            open: RwLock::new(BTreeMap::new()),
            spare: std::sync::Mutex::new(BTreeMap::new()),
            commits: AtomicU64::new(0),
            downsampled_end: AtomicI64::new(i64::MIN),
        };
        let mut open: BTreeMap<WindowKey, Entry> = BTreeMap::new();
        let mut spare: BTreeMap<WindowKey, (u32, fjall::Keyspace)> = BTreeMap::new();
        let mut names = db.list_keyspace_names();
        // Oldest generation first, so a window's newest unfinished seal is the spare kept.
        names.sort_by_key(|n| parse_chunks_keyspace_name(n).map(|(_, _, g)| g));
        for name in names {
            if let Some((tag, start, _)) = parse_keyspace_name(&name) {
                let Some(class) = this.class_of_tag(tag) else { continue };
                let key = WindowKey { start_ms: start, class };
                let ks = db.keyspace(&name, keyspace_options)?;
                // At most one hot keyspace per window exists: a new one is created only after
                // the previous one was deleted.
                if let Some(other) = open.entry(key).or_default().points.replace(ks) {
                    tracing::error!(
                        window = start,
                        "BUG: two hot keyspaces for one window; keeping both readable is not supported"
                    );
                    open.entry(key).or_default().points = Some(other);
                }
            } else if let Some((tag, start, generation)) = parse_chunks_keyspace_name(&name) {
                let Some(class) = this.class_of_tag(tag) else { continue };
                let key = WindowKey { start_ms: start, class };
                let visible = meta
                    .get(this.sealed_key(key))?
                    .and_then(|v| <[u8; 4]>::try_from(v.as_ref()).ok())
                    .map(u32::from_be_bytes);
                let ks = db.keyspace(&name, keyspace_options)?;
                if visible == Some(generation) {
                    let downsampled = match meta.get(this.downsampled_key(key))? {
                        Some(v) => {
                            Some(decode_downsampled(&v).ok_or(crate::storage::error::StorageError::Corrupt {
                                what: "downsampled window mark",
                            })?)
                        }
                        None => None,
                    };
                    let entry = open.entry(key).or_default();
                    entry.chunks = Some((generation, ks));
                    entry.downsampled = downsampled.map(Into::into);
                } else {
                    tracing::info!(keyspace = %&*name, "keeping chunks of an unfinished seal for the next seal to reuse");
                    if let Some((_, older)) = spare.insert(key, (generation, ks)) {
                        db.delete_keyspace(older)?;
                    }
                }
            }
        }
        let downsampled_end = open
            .iter()
            .filter(|(_, e)| e.downsampled.is_some())
            .map(|(k, _)| k.start_ms.saturating_add(window_ms))
            .max()
            .unwrap_or(i64::MIN);
        this.open = RwLock::new(open);
        this.spare = std::sync::Mutex::new(spare);
        this.downsampled_end = AtomicI64::new(downsampled_end);
        Ok(this)
    }

    /// The class a keyspace-name tag names (added to the table when new); `None` for a tag
    /// that names no class (such a keyspace is left alone).
    fn class_of_tag(&mut self, tag: Option<&str>) -> Option<ClassId> {
        match tag {
            None => Some(DEFAULT_CLASS),
            Some(tag) => {
                let class =
                    self.classes.get_mut().unwrap_or_else(std::sync::PoisonError::into_inner).find_or_add_tag(tag);
                if class.is_none_or(|c| c == DEFAULT_CLASS) {
                    tracing::warn!(tag, "window keyspace of an unknown retention class left unread");
                    return None;
                }
                class
            }
        }
    }

    /// The retention classes now (a copy: a few entries).
    pub fn classes(&self) -> ClassTable {
        self.classes.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// Adds the classes of `rules` the table lacks; returns the table then.
    pub fn add_classes(&self, rules: &[crate::storage::lifecycle::class::RetentionRule]) -> ClassTable {
        let mut classes = self.classes.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        classes.add_rules(rules);
        classes.clone()
    }

    fn tag(&self, class: ClassId) -> Option<String> {
        self.classes
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(class)
            .and_then(crate::storage::lifecycle::class::Class::tag)
    }

    /// Name of generation `generation` of the hot keyspace of window `key`.
    pub fn keyspace_name(&self, key: WindowKey, generation: u32) -> String {
        generation_name(POINTS_PREFIX, self.tag(key.class).as_deref(), key.start_ms, generation)
    }

    /// Name of generation `generation` of the chunks keyspace of window `key`.
    pub fn chunks_keyspace_name(&self, key: WindowKey, generation: u32) -> String {
        generation_name(CHUNKS_PREFIX, self.tag(key.class).as_deref(), key.start_ms, generation)
    }

    /// Manifest key recording the visible chunks generation of a window.
    pub fn sealed_key(&self, key: WindowKey) -> String {
        manifest_key("sealed", self.tag(key.class).as_deref(), key.start_ms)
    }

    /// Manifest key recording how many samples the visible chunks generation of a window holds.
    pub fn sealed_samples_key(&self, key: WindowKey) -> String {
        manifest_key("sealed_samples", self.tag(key.class).as_deref(), key.start_ms)
    }

    /// Manifest key present once a window is downsampled (see `downsample.rs`): its value, the
    /// tier intervals its visible chunks generation keeps, ascending, each an `i64` BE. Written
    /// in the batch that marks that generation, so the two never disagree.
    pub fn downsampled_key(&self, key: WindowKey) -> String {
        manifest_key("downsampled", self.tag(key.class).as_deref(), key.start_ms)
    }

    /// The samples the visible chunks generation of a window holds ([`Windows::sealed_samples_key`];
    /// 0 when unrecorded).
    ///
    /// # Errors
    /// Engine errors.
    pub fn sealed_samples(&self, meta: &fjall::Keyspace, key: WindowKey) -> Result<u64> {
        Ok(meta
            .get(self.sealed_samples_key(key))?
            .and_then(|v| <[u8; 8]>::try_from(v.as_ref()).ok())
            .map_or(0, u64::from_be_bytes))
    }

    fn spares(&self) -> std::sync::MutexGuard<'_, BTreeMap<WindowKey, (u32, fjall::Keyspace)>> {
        self.spare.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Takes the window's spare chunks keyspace (of an unfinished seal), if any. Its content is
    /// unknown: clear it before use.
    pub fn take_spare(&self, key: WindowKey) -> Option<(u32, fjall::Keyspace)> {
        self.spares().remove(&key)
    }

    /// Keeps a chunks keyspace a seal could not finish as the window's spare.
    pub fn put_spare(&self, key: WindowKey, chunks: (u32, fjall::Keyspace)) {
        self.spares().insert(key, chunks);
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

    /// The window of class `class` holding `ts_ms`.
    pub fn key_of(&self, ts_ms: i64, class: ClassId) -> WindowKey {
        WindowKey { start_ms: self.start_of(ts_ms), class }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<WindowKey, Entry>> {
        self.open.read().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, BTreeMap<WindowKey, Entry>> {
        self.open.write().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn view(key: WindowKey, e: &Entry) -> Window {
        Window {
            start_ms: key.start_ms,
            class: key.class,
            points: e.points.clone(),
            chunks: e.chunks.clone(),
            downsampled: e.downsampled.clone(),
        }
    }

    /// Windows of every class overlapping `[start_ms, end_ms]`, oldest first (by key).
    pub fn overlapping(&self, start_ms: i64, end_ms: i64) -> Vec<Window> {
        let first = self.start_of(start_ms);
        if end_ms < first {
            return Vec::new();
        }
        let (from, to) = (WindowKey { start_ms: first, class: 0 }, WindowKey { start_ms: end_ms, class: ClassId::MAX });
        self.read().range(from..=to).map(|(&k, e)| Self::view(k, e)).collect()
    }

    /// Every window, oldest first (by key).
    pub fn all(&self) -> Vec<Window> {
        self.read().iter().map(|(&k, e)| Self::view(k, e)).collect()
    }

    /// The window `key`, if it exists.
    pub fn get(&self, key: WindowKey) -> Option<Window> {
        self.read().get(&key).map(|e| Self::view(key, e))
    }

    /// The windows of every class starting at `start_ms`.
    pub fn starting_at(&self, start_ms: i64) -> Vec<Window> {
        self.overlapping(start_ms, start_ms).into_iter().filter(|w| w.start_ms == start_ms).collect()
    }

    /// Sequence number of the last group commit into the window's hot keyspace. A seal that
    /// reads it before scanning sees every row of that commit and of every earlier one.
    pub fn writes(&self, key: WindowKey) -> u64 {
        self.read().get(&key).map_or(0, |e| e.writes)
    }

    /// The hot keyspace of window `key`, created (under a fresh generation from `allocate`) if
    /// needed. Writer thread only; once the group is committed, report the windows it wrote to
    /// with [`Windows::committed`].
    ///
    /// # Errors
    /// Engine errors.
    pub fn points_for_write(
        &self,
        db: &fjall::Database,
        key: WindowKey,
        allocate: impl FnOnce() -> Result<u32>,
    ) -> Result<fjall::Keyspace> {
        if let Some(ks) = self.read().get(&key).and_then(|e| e.points.clone()) {
            return Ok(ks);
        }
        let ks = db.keyspace(&self.keyspace_name(key, allocate()?), keyspace_options)?;
        self.write().entry(key).or_default().points = Some(ks.clone());
        Ok(ks)
    }

    /// Records a group commit into the hot keyspaces of windows `keys`. Called after the commit
    /// is applied, never before: a seal that started between filling a group and committing it
    /// must see the count move, or it would drop the overlay holding rows it never read. Writer
    /// thread only.
    pub fn committed(&self, keys: impl IntoIterator<Item = WindowKey>) {
        let seq = self.commits.fetch_add(1, Ordering::Relaxed) + 1;
        let mut open = self.write();
        for key in keys {
            if let Some(e) = open.get_mut(&key) {
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
        key: WindowKey,
        chunks: (u32, fjall::Keyspace),
        writes_at_start: u64,
    ) -> Option<(Option<fjall::Keyspace>, Option<fjall::Keyspace>)> {
        let mut open = self.write();
        let entry = open.get_mut(&key)?;
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
        key: WindowKey,
        chunks: (u32, fjall::Keyspace),
        kept: &[i64],
        writes_at_start: u64,
    ) -> Option<fjall::Keyspace> {
        let mut open = self.write();
        let entry = open.get_mut(&key)?;
        if entry.points.is_some() || entry.writes != writes_at_start || entry.chunks.is_none() {
            return None;
        }
        entry.downsampled = Some(kept.into());
        self.downsampled_end.fetch_max(key.start_ms.saturating_add(self.window_ms), Ordering::Relaxed);
        entry.chunks.replace(chunks).map(|(_, ks)| ks)
    }

    /// No window ending after this is downsampled.
    pub fn downsampled_end(&self) -> i64 {
        self.downsampled_end.load(Ordering::Relaxed)
    }

    /// A downsampled window (of any class) holding `ts_ms`, if there is one (see
    /// [`Window::downsampled`]): a time span once downsampled takes no more writes. Cheap for
    /// samples after every downsampled window.
    pub fn downsampled_at(&self, ts_ms: i64) -> Option<Window> {
        if ts_ms >= self.downsampled_end.load(Ordering::Relaxed) {
            return None;
        }
        self.starting_at(self.start_of(ts_ms)).into_iter().find(|w| w.downsampled.is_some())
    }

    /// Where retention cuts class `class` at wall-clock `now_ms`: its windows ending at or before
    /// it are dropped. `None` when the class keeps forever.
    pub fn cutoff(&self, class: ClassId, now_ms: i64) -> Option<i64> {
        let retention = self
            .classes
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(class)?
            .retention_ms
            .filter(|&r| r > 0)?;
        Some(now_ms.saturating_sub(retention))
    }

    fn expired(&self, key: WindowKey, now_ms: i64) -> bool {
        self.cutoff(key.class, now_ms).is_some_and(|cut| key.start_ms.saturating_add(self.window_ms) <= cut)
    }

    /// True when some window has expired at `now_ms` (what [`Windows::take_expired`] would
    /// remove).
    pub fn any_expired(&self, now_ms: i64) -> bool {
        self.read().keys().any(|&k| self.expired(k, now_ms))
    }

    /// Takes the window's overlay (hot keyspace) out of the registry when no commit reached it
    /// since a re-seal read `writes_at_start`, for the caller to delete; `Some(None)` when it
    /// must stay, `None` when the window is gone. Writer thread only.
    pub fn take_overlay(&self, key: WindowKey, writes_at_start: u64) -> Option<Option<fjall::Keyspace>> {
        let mut open = self.write();
        let entry = open.get_mut(&key)?;
        Some(if entry.writes == writes_at_start { entry.points.take() } else { None })
    }

    /// Removes and returns the windows expired at `now_ms`: per class, those ending at or before
    /// its retention cutoff. Writer thread only.
    pub fn take_expired(&self, now_ms: i64) -> Vec<Window> {
        let mut open = self.write();
        let expired: Vec<WindowKey> = open.keys().copied().filter(|&k| self.expired(k, now_ms)).collect();
        expired.into_iter().filter_map(|k| open.remove(&k).map(|e| Self::view(k, &e))).collect()
    }

    /// Removes and returns the spare keyspaces of windows expired at `now_ms`.
    pub fn take_expired_spares(&self, now_ms: i64) -> Vec<fjall::Keyspace> {
        let mut spares = self.spares();
        let expired: Vec<WindowKey> = spares.keys().copied().filter(|&k| self.expired(k, now_ms)).collect();
        expired.into_iter().filter_map(|k| spares.remove(&k).map(|(_, ks)| ks)).collect()
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::storage::lifecycle::class::RetentionRule;

    const DAY: i64 = 86_400_000;

    fn rule(retention_ms: i64) -> RetentionRule {
        RetentionRule { selector: String::new(), matchers: Vec::new(), retention_ms }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]

        /// Windows of several classes, created by writes: listed in key order, found in a
        /// range as a brute-force filter finds them, found again (classes included) when the
        /// database is opened anew, and expired per class at each class's retention.
        #[test]
        fn windows_of_classes_list_reload_and_expire_as_a_brute_force_model_says(
            created in prop::collection::btree_set((0i64..12, 0u8..3), 1..16),
            (from, to) in (0i64..14, 0i64..14),
            now_day in 0i64..20,
        ) {
            let dir = tempfile::tempdir().unwrap();
            let db = fjall::Database::builder(dir.path()).open().unwrap();
            let meta = db.keyspace("meta", fjall::KeyspaceCreateOptions::default).unwrap();
            // The default class keeps 10 days, the others 2 and 5.
            let table = || ClassTable::new(Some(10 * DAY), &[rule(2 * DAY), rule(5 * DAY)]);
            let retention = [10 * DAY, 2 * DAY, 5 * DAY];
            let windows = Windows::load(&db, &meta, DAY, table()).unwrap();
            let mut generation = 0;
            for &(day, class) in &created {
                windows.points_for_write(&db, WindowKey { start_ms: day * DAY, class }, || { generation += 1; Ok(generation) }).unwrap();
            }
            let keys = |ws: Vec<Window>| ws.iter().map(|w| (w.start_ms / DAY, w.class)).collect::<Vec<_>>();
            let model: Vec<(i64, u8)> = created.iter().copied().collect();
            prop_assert_eq!(keys(windows.all()), model.clone());
            let (from, to) = (from.min(to), from.max(to));
            let inside: Vec<(i64, u8)> = model.iter().copied().filter(|&(d, _)| d >= from && d <= to).collect();
            prop_assert_eq!(keys(windows.overlapping(from * DAY, to * DAY + DAY - 1)), inside);
            drop(windows);
            // Opened without the rules, the classes are found again by their names' retention.
            let bare = Windows::load(&db, &meta, DAY, ClassTable::new(Some(10 * DAY), &[])).unwrap();
            let by_retention = |w: &Windows| {
                let mut v: Vec<(i64, Option<i64>)> = w
                    .all()
                    .iter()
                    .map(|x| (x.start_ms / DAY, w.classes().get(x.class).and_then(|c| c.retention_ms)))
                    .collect();
                v.sort_unstable();
                v
            };
            let mut wanted: Vec<(i64, Option<i64>)> =
                model.iter().map(|&(d, c)| (d, Some(retention[usize::from(c)]))).collect();
            wanted.sort_unstable();
            prop_assert_eq!(by_retention(&bare), wanted);
            drop(bare);
            let windows = Windows::load(&db, &meta, DAY, table()).unwrap();
            prop_assert_eq!(keys(windows.all()), model.clone());
            let now = now_day * DAY;
            let gone = |&(d, c): &(i64, u8)| (d + 1) * DAY <= now - retention[usize::from(c)];
            let expired: Vec<(i64, u8)> = model.iter().copied().filter(gone).collect();
            prop_assert_eq!(windows.any_expired(now), !expired.is_empty());
            prop_assert_eq!(keys(windows.take_expired(now)), expired);
            let kept: Vec<(i64, u8)> = model.iter().copied().filter(|k| !gone(k)).collect();
            prop_assert_eq!(keys(windows.all()), kept);
        }
    }

    #[test]
    fn names_round_trip() {
        let points = generation_name(POINTS_PREFIX, None, 1_700_000_000_000, 4);
        assert_eq!(points, "points_1700000000000_4");
        assert_eq!(parse_keyspace_name(&points), Some((None, 1_700_000_000_000, 4)));
        assert_eq!(parse_keyspace_name("postings"), None);
        let chunks = generation_name(CHUNKS_PREFIX, None, 86_400_000, 3);
        assert_eq!(parse_chunks_keyspace_name(&chunks), Some((None, 86_400_000, 3)));
        assert_eq!(parse_chunks_keyspace_name(&generation_name(POINTS_PREFIX, None, 5, 1)), None);
        let tagged = generation_name(POINTS_PREFIX, Some("r604800000"), -86_400_000, 9);
        assert_eq!(tagged, "points_r604800000_-86400000_9");
        assert_eq!(parse_keyspace_name(&tagged), Some((Some("r604800000"), -86_400_000, 9)));
        assert_eq!(parse_keyspace_name("points_r5_x_1"), None);
        assert_eq!(manifest_key("sealed", None, 7), "sealed/7");
        assert_eq!(manifest_key("sealed", Some("r5"), 7), "sealed/r5/7");
    }
}
