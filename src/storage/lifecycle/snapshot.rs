//! Snapshots (the admin `snapshot` API): a consistent copy of the whole database into a new
//! directory that `saltdb serve --data-dir <it>` opens like any other.
//!
//! The copy is logical: the writer thread pins a fjall cross-keyspace snapshot together with the
//! list of windows at one instant between two commits, and the caller copies every keyspace as
//! of that instant into a fresh database, under the same keyspace names. Writes go on while the
//! copy runs; the seal lock, held for the whole copy, keeps sealing and retention from deleting
//! a keyspace that is being copied. The copy is fsynced before it is reported.

use std::path::Path;

use super::window::{self, Window};
use crate::storage::error::{Result, StorageError};
use crate::storage::shared::Shared;

/// Rows per write batch while copying (bounds memory).
const BATCH_ROWS: usize = 50_000;

/// A consistent instant, taken on the writer thread.
pub struct Pinned {
    /// The cross-keyspace read snapshot.
    pub snapshot: fjall::Snapshot,
    /// The windows at that instant.
    pub windows: Vec<Window>,
}

/// What a snapshot copied.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SnapshotOutcome {
    /// Keyspaces copied.
    pub keyspaces: usize,
    /// Rows copied.
    pub rows: u64,
}

/// Copies the pinned state into a new database at `dir`, which must not exist yet.
///
/// # Errors
/// [`StorageError::Engine`] for I/O errors (the partial copy is removed).
pub fn copy_to(sh: &Shared, pinned: &Pinned, dir: &Path) -> Result<SnapshotOutcome> {
    let result = copy(sh, pinned, dir);
    if result.is_err() {
        let _ = std::fs::remove_dir_all(dir);
    }
    result
}

fn copy(sh: &Shared, pinned: &Pinned, dir: &Path) -> Result<SnapshotOutcome> {
    if dir.exists() {
        return Err(StorageError::Engine(std::sync::Arc::new(
            std::io::Error::new(std::io::ErrorKind::AlreadyExists, format!("{} already exists", dir.display())).into(),
        )));
    }
    std::fs::create_dir_all(dir).map_err(|e| StorageError::Engine(std::sync::Arc::new(e.into())))?;
    let target = fjall::Database::builder(dir).manual_journal_persist(true).open()?;
    let mut out = SnapshotOutcome::default();
    let tables = [&sh.meta, &sh.series, &sh.series_by_labels];
    for ks in tables {
        let to = target.keyspace(ks.name(), fjall::KeyspaceCreateOptions::default)?;
        out.rows += copy_keyspace(&target, &pinned.snapshot, ks, &to)?;
        out.keyspaces += 1;
    }
    for w in &pinned.windows {
        for ks in w.points.iter().chain(w.chunks.as_ref().map(|(_, ks)| ks)) {
            let to = target.keyspace(ks.name(), window::keyspace_options)?;
            out.rows += copy_keyspace(&target, &pinned.snapshot, ks, &to)?;
            out.keyspaces += 1;
        }
    }
    target.persist(fjall::PersistMode::SyncAll)?;
    Ok(out)
}

fn copy_keyspace(
    target: &fjall::Database,
    snapshot: &fjall::Snapshot,
    from: &fjall::Keyspace,
    to: &fjall::Keyspace,
) -> Result<u64> {
    use fjall::Readable;
    let mut rows = 0;
    let mut batch = target.batch();
    for guard in snapshot.iter(from) {
        let (key, value) = guard.into_inner()?;
        batch.insert(to, key, value);
        rows += 1;
        if batch.len() >= BATCH_ROWS {
            std::mem::replace(&mut batch, target.batch()).commit()?;
        }
    }
    batch.commit()?;
    Ok(rows)
}
