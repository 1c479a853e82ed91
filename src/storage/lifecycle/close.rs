//! A clean close: what the last [`crate::storage::Storage`] handle does once the writer thread has flushed
//! the head, so that the data directory holds tables and little else.
//!
//! 1. The `wal` keyspace is emptied ([`empty`]): after the final head flush it holds no live row,
//!    only the flushed rows and tombstones of every flush since its last compaction (their tables grew
//!    to 120-170 MiB while 1 M series were written).
//! 2. The close marker (`last_clean_close` in `meta`) is written, then every keyspace's memtable
//!    is flushed to tables and the journal fsynced. The marker is the newest write of the
//!    database, so the sequence counter fjall recovers at the next open (from the tables, once
//!    the journal is empty) is above every sequence number used before, including those of
//!    fjall's keyspace-deletion records: a keyspace id that fjall hands out again after the
//!    restart then registers above the deletion record of its previous owner instead of under
//!    it.
//! 3. After fjall has closed (its lock released), [`JournalReclaim`] takes the directory lock
//!    itself and empties the journal: with every memtable in tables the journal only repeats
//!    them (replay skips what tables hold). Sealed journals are deleted, the active one is
//!    truncated to zero bytes but kept: fjall recovers its sequence counter from the tables only
//!    when an active journal exists (a missing one is created as if the database were new).
//!
//! Nothing is reclaimed when any step fails, the head is not empty, or the lock is held by
//! anyone (another handle of this process still open, or another process): the journal is then
//! replayed at the next open as after a crash.

use std::fs::{File, OpenOptions, TryLockError};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::storage::error::{Result, StorageError};
use crate::storage::shared::Shared;

/// Manifest key written last at a clean close: the wall-clock time of the close (ms, i64 BE).
pub const LAST_CLEAN_CLOSE: &str = "last_clean_close";
/// fjall's lock file in the data directory (`fjall::file::LOCK_FILE`, not exported).
const FJALL_LOCK_FILE: &str = "lock";
/// Longest wait for every keyspace's sealed memtables to reach tables, all keyspaces together
/// (a wait per keyspace would hold a close for hours on a store whose flushes fail, with a
/// keyspace per window).
const FLUSH_WAIT: Duration = Duration::from_secs(120);

/// Steps 1 and 2: clears the write-ahead log, writes the close marker, flushes every memtable
/// to tables and fsyncs the journal. The head must be empty and the log hold no live row.
///
/// # Errors
/// Engine errors; [`StorageError::ShuttingDown`] when a flush does not finish in time.
pub fn flush_everything(sh: &Shared) -> Result<()> {
    empty(&sh.wal)?;
    let mut mark = sh.db.batch().durability(Some(fjall::PersistMode::SyncAll));
    mark.insert(&sh.meta, LAST_CLEAN_CLOSE, crate::storage::db::now_ms().to_be_bytes());
    mark.commit()?;
    let deadline = Instant::now() + FLUSH_WAIT;
    for name in sh.db.list_keyspace_names() {
        let ks = sh.db.keyspace(&name, fjall::KeyspaceCreateOptions::default)?;
        flush_keyspace(&ks, deadline)?;
    }
    sh.db.persist(fjall::PersistMode::SyncAll)?;
    Ok(())
}

/// Removes every row of `ks`, and the files of its tables with them.
///
/// fjall's `clear` alone swaps in an empty version of the tree and forgets its tables without
/// marking them deleted (lsm-tree deletes a table's file only once a compaction marked it), so
/// their files stayed on disk until the next open removed them as orphans: after a clean close
/// at 1 M series, 120-170 MiB of log tables in one run out of two or three. Here the tables are
/// dropped first, through a compaction (it waits for any other compaction of the keyspace to
/// end), which marks them deleted: their files go once no reader holds them, at the latest when
/// the database closes. Then the memtables are cleared. A sealed memtable still being written
/// when the tables are dropped would become a table the clear forgets, so those are waited for
/// first, for at most [`FLUSH_WAIT`].
///
/// Nothing may write to `ks` meanwhile.
///
/// # Errors
/// Engine errors; [`StorageError::ShuttingDown`] when a sealed memtable is not written in time.
pub fn empty(ks: &fjall::Keyspace) -> Result<()> {
    use fjall::AbstractTree;
    let deadline = Instant::now() + FLUSH_WAIT;
    wait_for_sealed(ks, deadline)?;
    ks.tree.drop_range::<&[u8], _>(..).map_err(fjall::Error::from)?;
    ks.clear()?;
    Ok(())
}

/// Waits until `ks` has no sealed memtable left, at most until `deadline`.
fn wait_for_sealed(ks: &fjall::Keyspace, deadline: Instant) -> Result<()> {
    while ks.sealed_memtable_count() > 0 {
        if Instant::now() > deadline {
            return Err(StorageError::ShuttingDown);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(())
}

/// Rotates the keyspace's memtable and waits until no sealed memtable is left (fjall's own
/// wait returns at once when the active memtable is empty, even with sealed ones in flight),
/// at most until `deadline`.
fn flush_keyspace(ks: &fjall::Keyspace, deadline: Instant) -> Result<()> {
    ks.rotate_memtable_and_wait()?;
    wait_for_sealed(ks, deadline)
}

/// Step 3, run when dropped (declare it after the fjall handles it must outlive): empties the
/// journal of the data directory once armed. Arm it only after [`flush_everything`] succeeded,
/// with no write since.
pub struct JournalReclaim {
    dir: PathBuf,
    armed: AtomicBool,
}

impl JournalReclaim {
    /// An unarmed reclaim of the journal in `dir`.
    pub fn new(dir: PathBuf) -> Self {
        Self { dir, armed: AtomicBool::new(false) }
    }

    /// Every memtable is in tables: the journal may go once fjall has closed.
    pub fn arm(&self) {
        self.armed.store(true, Ordering::Release);
    }
}

impl Drop for JournalReclaim {
    fn drop(&mut self) {
        if !self.armed.load(Ordering::Acquire) {
            return;
        }
        match empty_journal(&self.dir) {
            Ok(true) => tracing::debug!(dir = %self.dir.display(), "emptied the journal after a clean close"),
            Ok(false) => tracing::info!(dir = %self.dir.display(), "database still open; journal kept"),
            Err(e) => {
                tracing::warn!(error = %e, "emptying the journal after a clean close failed; it is replayed at the next open")
            }
        }
    }
}

/// Journal files of `dir` (`<id>.jnl`), oldest first.
fn journals(dir: &Path) -> std::io::Result<Vec<(u64, PathBuf)>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let id = path
            .extension()
            .filter(|x| *x == "jnl")
            .and_then(|_| path.file_stem())
            .and_then(|s| s.to_str())
            .and_then(|s| s.parse::<u64>().ok());
        if let Some(id) = id {
            out.push((id, path));
        }
    }
    out.sort();
    Ok(out)
}

/// Allocated bytes of the journal files of `dir`: the active one (the newest) and all.
///
/// # Errors
/// I/O errors listing `dir` or reading a file's metadata.
pub fn journal_bytes(dir: &Path) -> std::io::Result<(u64, u64)> {
    let (mut active, mut all) = (0, 0);
    for (_, path) in journals(dir)? {
        active = crate::storage::disk::file_bytes(&path)?;
        all += active;
    }
    Ok((active, all))
}

/// The id of the active journal file of `dir` (the newest), `None` when there is none.
///
/// # Errors
/// I/O errors listing `dir`.
pub fn newest_journal_id(dir: &Path) -> std::io::Result<Option<u64>> {
    Ok(journals(dir)?.pop().map(|(id, _)| id))
}

/// Deletes sealed journals and truncates the active one (the newest) to zero bytes, holding
/// fjall's directory lock. Returns false, touching nothing, when the lock is taken.
fn empty_journal(dir: &Path) -> std::io::Result<bool> {
    let lock = OpenOptions::new().read(true).write(true).open(dir.join(FJALL_LOCK_FILE))?;
    match lock.try_lock() {
        Ok(()) => {}
        Err(TryLockError::WouldBlock) => return Ok(false),
        Err(TryLockError::Error(e)) => return Err(e),
    }
    let mut all = journals(dir)?;
    let Some((_, active)) = all.pop() else { return Ok(true) };
    for (_, sealed) in all {
        std::fs::remove_file(sealed)?;
    }
    let file = OpenOptions::new().write(true).open(active)?;
    file.set_len(0)?;
    file.sync_all()?;
    File::open(dir)?.sync_all()?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_numbered_journals_oldest_first() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["10.jnl", "9.jnl", "x.jnl", "3.txt", "lock"] {
            std::fs::write(dir.path().join(name), b"x").unwrap();
        }
        let ids: Vec<u64> = journals(dir.path()).unwrap().into_iter().map(|(id, _)| id).collect();
        assert_eq!(ids, vec![9, 10]);
    }

    #[test]
    fn a_held_lock_keeps_the_journal() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("1.jnl"), b"journal").unwrap();
        std::fs::write(dir.path().join("2.jnl"), b"journal").unwrap();
        let held = File::create(dir.path().join(FJALL_LOCK_FILE)).unwrap();
        held.try_lock().unwrap();
        assert!(!empty_journal(dir.path()).unwrap());
        assert_eq!(std::fs::metadata(dir.path().join("2.jnl")).unwrap().len(), 7);
        drop(held);
        assert!(empty_journal(dir.path()).unwrap());
        assert!(!dir.path().join("1.jnl").exists());
        assert_eq!(std::fs::metadata(dir.path().join("2.jnl")).unwrap().len(), 0);
    }

    /// Table files under `dir`, wherever fjall keeps them (`keyspaces/<id>/tables/<n>`).
    fn table_files(dir: &Path) -> usize {
        let mut n = 0;
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap() {
                let path = e.unwrap().path();
                if path.is_dir() {
                    stack.push(path);
                } else if path.parent().and_then(Path::file_name).is_some_and(|p| p == "tables") {
                    n += 1;
                }
            }
        }
        n
    }

    #[test]
    fn emptying_a_keyspace_deletes_its_table_files() {
        let dir = tempfile::tempdir().unwrap();
        let db = fjall::Database::builder(dir.path()).open().unwrap();
        let ks = db.keyspace("log", fjall::KeyspaceCreateOptions::default).unwrap();
        let before = table_files(dir.path());
        for round in 0u32..3 {
            for i in 0u32..1000 {
                ks.insert([round.to_be_bytes(), i.to_be_bytes()].concat(), vec![7u8; 100]).unwrap();
            }
            ks.rotate_memtable_and_wait().unwrap();
        }
        // A row still in the memtable goes too.
        ks.insert(b"live", b"row").unwrap();
        assert!(table_files(dir.path()) >= before + 3, "the rows did not reach tables");
        empty(&ks).unwrap();
        assert_eq!(ks.first_key_value().map(|kv| kv.key().unwrap()), None);
        ks.insert(b"after", b"1").unwrap();
        assert_eq!(ks.get(b"after").unwrap().as_deref(), Some(&b"1"[..]));
        drop(ks);
        drop(db);
        // fjall's `clear` alone left the three tables' files on disk until the next open.
        assert_eq!(table_files(dir.path()), before, "table files left behind");
        let db = fjall::Database::builder(dir.path()).open().unwrap();
        let ks = db.keyspace("log", fjall::KeyspaceCreateOptions::default).unwrap();
        let rows: Vec<Vec<u8>> = ks.iter().map(|kv| kv.key().unwrap().to_vec()).collect();
        assert_eq!(rows, vec![b"after".to_vec()]);
    }
}
