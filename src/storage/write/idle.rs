//! Flushing on idle: once no command has reached the writer for `--idle-flush`, everything
//! that only the journal holds goes into tables, and the journal files that then only repeat
//! tables are deleted, so that the data directory of a running server that stopped receiving
//! writes is about the size it has after a clean close (see `lifecycle/close.rs`).
//!
//! fjall deletes a sealed journal file only once every keyspace that wrote to it has flushed
//! its memtable past it, and it flushes a memtable only once that memtable reaches 64 MiB. The
//! keyspaces written rarely (the series tables, the manifest, a sealed window's chunks, the
//! write-ahead log once the head is flushed) therefore held back every journal written since
//! their last flush, and each deleted keyspace (a window's hot rows once sealed) stayed on disk
//! for as long as a journal naming it did: 163 MB of journals a minute after the 30-day set was
//! sealed. An idle flush:
//!
//! 1. flushes the head into its windows, so the write-ahead log holds no live row;
//! 2. seals every keyspace's non-empty memtable, which fjall's workers then write into tables
//!    (and after each, delete the sealed journals every keyspace has flushed past);
//! 3. rolls the journal over when its active file holds more than [`ROLL_MIN_BYTES`] and more
//!    than 1/[`ROLL_SHARE`] of the data directory: fjall 3.1 starts a new journal file only when
//!    it flushes a memtable while the active file is past 64,000,000 bytes, and offers no other
//!    way. The writer pads the journal past that mark with zeros in the `journal_pad` keyspace,
//!    rows removed in the same memtable (flushed as tombstones, compressed), at most
//!    [`PAD_STEP`] at a time, so the memtable never holds more; the flush that follows seals
//!    the active file, and it is deleted with the others once every memtable written before it
//!    is in tables;
//! 4. compacts the write-ahead log's tables away, once its memtable is in them.
//!
//! Durability is unchanged: nothing is removed that fjall's own rules would keep (a journal
//! goes only once every keyspace has flushed past it), the steps only make those rules apply
//! sooner.

use std::time::{Duration, Instant};

use fjall::AbstractTree;

use super::Writer;
use crate::storage::error::{Result, StorageError};
use crate::storage::lifecycle::close;

/// The keyspace the journal is padded through (see the module documentation).
pub const PAD_KEYSPACE: &str = "journal_pad";
/// fjall seals the active journal at a flush once the journal is past this many bytes
/// (`worker_pool.rs`, fjall 3.1).
const FJALL_ROLL_BYTES: u64 = 64_000_000;
/// Bytes written to the pad keyspace per memtable.
const PAD_STEP: usize = 8 << 20;
/// The pad keyspace's one row kept (see [`Writer::pad_journal`]); the pad rows are `u32` BE.
const PAD_LIVE_KEY: &[u8] = b"live";
/// Size of one pad row.
const PAD_ROW: usize = 1 << 20;
/// The active journal is rolled over only when it holds at least this much ...
pub const ROLL_MIN_BYTES: u64 = 1 << 20;
/// ... and at least this share (1/n) of the data directory: padding writes up to 64 MB, worth
/// it to reclaim a journal that is a noticeable part of the directory, not a few kilobytes.
pub const ROLL_SHARE: u64 = 32;
/// Longest wait for a keyspace's sealed memtables to reach tables during an idle flush.
const FLUSH_WAIT: Duration = Duration::from_secs(30);

/// The writer's idle state.
#[derive(Debug)]
pub(super) struct Idle {
    /// Flush after this long without a command; `None` never.
    pub(super) after: Option<Duration>,
    /// When the writer last handled a command.
    pub(super) last: Instant,
    /// Whether a command arrived since the last idle flush.
    pub(super) dirty: bool,
}

impl Idle {
    pub(super) fn new(after: Option<Duration>) -> Self {
        Self { after, last: Instant::now(), dirty: true }
    }

    /// Records a command.
    pub(super) fn touch(&mut self) {
        self.last = Instant::now();
        self.dirty = true;
    }

    fn due(&self) -> bool {
        self.dirty && self.after.is_some_and(|after| self.last.elapsed() >= after)
    }
}

impl Writer {
    /// Runs an idle flush when one is due (see the module documentation). A failure is logged;
    /// the next command and idle period try again.
    pub(super) fn flush_if_idle(&mut self) {
        if !self.idle.due() || self.flushing() {
            return;
        }
        self.idle.dirty = false;
        let began = Instant::now();
        match self.flush_idle() {
            Ok(rolled) => tracing::debug!(elapsed = ?began.elapsed(), rolled, "flushed on idle"),
            Err(e) => tracing::warn!(error = %e, "flushing on idle failed; retried after the next write"),
        }
    }

    /// Steps 1-4; returns whether the journal was rolled over.
    fn flush_idle(&mut self) -> Result<bool> {
        self.flush_head()?;
        let sh = std::sync::Arc::clone(&self.shared);
        for name in sh.db.list_keyspace_names() {
            sh.db.keyspace(&name, fjall::KeyspaceCreateOptions::default)?.rotate_memtable()?;
        }
        let rolled = match close::journal_bytes(&self.data_dir) {
            Ok((active, all))
                if active >= ROLL_MIN_BYTES && active >= self.data_dir_bytes().saturating_sub(all) / ROLL_SHARE =>
            {
                self.pad_journal(active)?;
                true
            }
            Ok(_) => false,
            Err(e) => {
                tracing::debug!(error = %e, "measuring the journal failed; not rolled over");
                false
            }
        };
        if sh.head.is_empty() && sh.wal.first_key_value().is_none() {
            wait_flushed(&sh.wal)?;
            if sh.wal.table_count() > 0 {
                let before = sh.wal.disk_space();
                sh.wal.major_compact()?;
                tracing::debug!(before, after = sh.wal.disk_space(), "compacted the write-ahead log on idle");
            }
            if sh.wal.table_count() == 0 {
                // fjall deletes no journal file naming a keyspace without tables (it reads the
                // keyspace's flushed position from them): leave one table, holding only the
                // removal of a row already removed.
                let mut keep = sh.db.batch().durability(Some(fjall::PersistMode::Buffer));
                keep.remove(&sh.wal, super::wal::key(self.wal.next.saturating_sub(1)));
                keep.commit()?;
                sh.wal.rotate_memtable()?;
                wait_flushed(&sh.wal)?;
            }
        }
        Ok(rolled)
    }

    fn data_dir_bytes(&self) -> u64 {
        crate::storage::disk::du_bytes(&self.data_dir).unwrap_or(0)
    }

    /// Writes zeros through the pad keyspace until fjall starts a new journal file (the active
    /// one holds `active` bytes now), each step's rows removed again and its memtable sealed.
    fn pad_journal(&mut self, active: u64) -> Result<()> {
        let sh = std::sync::Arc::clone(&self.shared);
        let pad = sh.db.keyspace(PAD_KEYSPACE, crate::storage::index::series::table_options)?;
        let zeros = fjall::Slice::from(vec![0u8; PAD_ROW]);
        let newest = || close::newest_journal_id(&self.data_dir).ok().flatten();
        let before = newest();
        // The file's allocated blocks trail the writer's position by its buffer (8 KiB); the
        // loop ends as soon as the file was sealed, whatever this count says.
        let mut left = FJALL_ROLL_BYTES.saturating_sub(active) + (PAD_STEP as u64);
        while left > 0 && newest() == before {
            // Rows and their removal in two batches: the rows of one batch share a sequence
            // number, so a row and its removal in one would be unordered.
            let mut rows = sh.db.batch().durability(Some(fjall::PersistMode::Buffer));
            let mut removals = sh.db.batch().durability(Some(fjall::PersistMode::Buffer));
            let mut key = 0u32;
            while (key as usize) * PAD_ROW < PAD_STEP && left > 0 {
                rows.insert(&pad, key.to_be_bytes(), zeros.clone());
                removals.remove(&pad, key.to_be_bytes());
                key += 1;
                left = left.saturating_sub(PAD_ROW as u64);
            }
            rows.commit()?;
            removals.commit()?;
            pad.rotate_memtable()?;
            wait_flushed(&pad)?;
        }
        // One live row, so that compaction never leaves the keyspace without tables (fjall
        // deletes no journal file naming a keyspace without tables).
        pad.insert(PAD_LIVE_KEY, [])?;
        pad.rotate_memtable()?;
        Ok(())
    }
}

/// Waits until `ks` has no sealed memtable left.
fn wait_flushed(ks: &fjall::Keyspace) -> Result<()> {
    let deadline = Instant::now() + FLUSH_WAIT;
    while ks.tree.sealed_memtable_count() > 0 {
        if Instant::now() > deadline {
            let late = std::io::Error::new(std::io::ErrorKind::TimedOut, "a memtable flush took over 30 s");
            return Err(StorageError::Engine(std::sync::Arc::new(late.into())));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(())
}
