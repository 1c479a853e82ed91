//! Time windows: one `points_<start_ms>` keyspace per window of `window_ms` milliseconds.
//!
//! A window holds the samples with `start <= ts < start + window_ms`, plus the window index
//! (which series have samples in it). Dropping a window is dropping its keyspace, which is how
//! retention deletes data without writing tombstones.

use std::collections::BTreeMap;
use std::sync::RwLock;

use fjall::config::CompressionPolicy;
use fjall::{CompressionType, KeyspaceCreateOptions};

use super::error::Result;

/// Keyspace-name prefix of hot windows.
const POINTS_PREFIX: &str = "points_";

/// Name of the keyspace of the window starting at `start_ms`.
pub fn keyspace_name(start_ms: i64) -> String {
    format!("{POINTS_PREFIX}{start_ms}")
}

/// Start of a window, parsed back from its keyspace name.
pub fn parse_keyspace_name(name: &str) -> Option<i64> {
    name.strip_prefix(POINTS_PREFIX)?.parse().ok()
}

/// Point rows compress well with LZ4 on every level (fjall's default leaves L0/L1 raw).
fn points_options() -> KeyspaceCreateOptions {
    KeyspaceCreateOptions::default()
        .data_block_compression_policy(CompressionPolicy::all(CompressionType::Lz4))
        .index_block_compression_policy(CompressionPolicy::all(CompressionType::Lz4))
}

/// One open window.
#[derive(Clone)]
pub struct Window {
    /// First millisecond of the window.
    pub start_ms: i64,
    /// Its keyspace.
    pub points: fjall::Keyspace,
}

/// The registry of windows on disk. Readers clone handles out of it; only the writer thread
/// creates and drops windows, so a window is never dropped under a commit.
pub struct Windows {
    window_ms: i64,
    open: RwLock<BTreeMap<i64, fjall::Keyspace>>,
}

impl Windows {
    /// Opens every window keyspace found in the database.
    ///
    /// # Errors
    /// Engine errors.
    pub fn load(db: &fjall::Database, window_ms: i64) -> Result<Self> {
        let mut open = BTreeMap::new();
        for name in db.list_keyspace_names() {
            if let Some(start) = parse_keyspace_name(&name) {
                open.insert(start, db.keyspace(&name, points_options)?);
            }
        }
        Ok(Self { window_ms, open: RwLock::new(open) })
    }

    /// Window length in milliseconds.
    pub fn window_ms(&self) -> i64 {
        self.window_ms
    }

    /// Start of the window holding `ts_ms`.
    pub fn start_of(&self, ts_ms: i64) -> i64 {
        ts_ms - ts_ms.rem_euclid(self.window_ms)
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<i64, fjall::Keyspace>> {
        self.open.read().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, BTreeMap<i64, fjall::Keyspace>> {
        self.open.write().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Windows overlapping `[start_ms, end_ms]`, oldest first.
    pub fn overlapping(&self, start_ms: i64, end_ms: i64) -> Vec<Window> {
        let first = self.start_of(start_ms);
        self.read().range(first..=end_ms).map(|(&start_ms, ks)| Window { start_ms, points: ks.clone() }).collect()
    }

    /// Every window, oldest first.
    pub fn all(&self) -> Vec<Window> {
        self.read().iter().map(|(&start_ms, ks)| Window { start_ms, points: ks.clone() }).collect()
    }

    /// The window starting at `start_ms`, if it exists.
    pub fn get(&self, start_ms: i64) -> Option<fjall::Keyspace> {
        self.read().get(&start_ms).cloned()
    }

    /// The window starting at `start_ms`, created if needed. Writer thread only.
    ///
    /// # Errors
    /// Engine errors.
    pub fn get_or_create(&self, db: &fjall::Database, start_ms: i64) -> Result<fjall::Keyspace> {
        if let Some(ks) = self.get(start_ms) {
            return Ok(ks);
        }
        let ks = db.keyspace(&keyspace_name(start_ms), points_options)?;
        self.write().insert(start_ms, ks.clone());
        Ok(ks)
    }

    /// Removes and returns the windows that end at or before `cutoff_ms`. Writer thread only.
    pub fn take_expired(&self, cutoff_ms: i64) -> Vec<Window> {
        let mut open = self.write();
        let expired: Vec<i64> =
            open.keys().copied().take_while(|&start| start.saturating_add(self.window_ms) <= cutoff_ms).collect();
        expired
            .into_iter()
            .filter_map(|start_ms| open.remove(&start_ms).map(|points| Window { start_ms, points }))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        assert_eq!(parse_keyspace_name(&keyspace_name(1_700_000_000_000)), Some(1_700_000_000_000));
        assert_eq!(parse_keyspace_name("postings"), None);
    }
}
