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
//!    rows removed again in the same memtable (flushed as tombstones, compressed), at most
//!    [`PAD_STEP`] at a time, so the memtable never holds more; the flush that follows seals
//!    the active file, and it is deleted with the others once every memtable written before it
//!    is in tables;
//! 4. compacts the write-ahead log's tables away, once its memtable is in them, leaving one
//!    table of a single removal: fjall deletes no journal file naming a keyspace without tables
//!    (it reads a keyspace's flushed position from its tables).
//!
//! The writer never waits for fjall's workers: a step that needs a flush finished is retried
//! every 10 ms, between commands. Measured: `bench/README.md`, *Bytes on disk*.
//!
//! Durability is unchanged: nothing is removed that fjall's own rules would keep (a journal
//! goes only once every keyspace has flushed past it), the steps only make those rules apply
//! sooner.

use std::time::{Duration, Instant};

use fjall::AbstractTree;

use super::Writer;
use crate::storage::error::Result;
use crate::storage::lifecycle::close;

/// The keyspace the journal is padded through (see the module documentation).
pub const PAD_KEYSPACE: &str = "journal_pad";
/// fjall seals the active journal at a flush once the journal is past this many bytes
/// (`worker_pool.rs`, fjall 3.1).
const FJALL_ROLL_BYTES: u64 = 64_000_000;
/// Bytes written to the pad keyspace per memtable.
const PAD_STEP: usize = 8 << 20;
/// The pad keyspace's one row kept (so it always has a table); the pad rows are `u32` BE.
const PAD_LIVE_KEY: &[u8] = b"live";
/// Size of one pad row.
const PAD_ROW: usize = 1 << 20;
/// The active journal is rolled over only when it holds at least this much ...
pub const ROLL_MIN_BYTES: u64 = 1 << 20;
/// ... and at least this share (1/n) of the data directory: padding writes up to 64 MB, worth
/// it to reclaim a journal that is a noticeable part of the directory, not a few kilobytes.
pub const ROLL_SHARE: u64 = 32;

/// The writer's idle state.
#[derive(Debug)]
pub(super) struct Idle {
    /// Flush after this long without a command; `None` never.
    after: Option<Duration>,
    /// When the writer last handled a command.
    last: Instant,
    /// Whether a command arrived since the last idle flush began.
    dirty: bool,
    /// The idle flush under way.
    step: Step,
    /// When the idle flush under way began.
    began: Instant,
}

/// Where an idle flush stands. The writer never waits for fjall's workers (a compaction may
/// hold them for many seconds, and a write arriving meanwhile must not wait for it): a step that
/// needs a flush to have finished is retried at the next tick (see [`Idle::busy`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    /// No idle flush under way.
    Quiet,
    /// Padding the journal (step 3): the active journal file's id when padding began, and the
    /// bytes still to write at most.
    Padding { journal: Option<u64>, left: u64 },
    /// Compacting the log (step 4), once its memtable is in tables.
    Log { rolled: bool },
}

impl Idle {
    pub(super) fn new(after: Option<Duration>) -> Self {
        Self { after, last: Instant::now(), dirty: true, step: Step::Quiet, began: Instant::now() }
    }

    /// Records a command.
    pub(super) fn touch(&mut self) {
        self.last = Instant::now();
        self.dirty = true;
    }

    /// True while an idle flush is under way: the writer then checks back every few
    /// milliseconds rather than every second.
    pub(super) fn busy(&self) -> bool {
        self.step != Step::Quiet
    }

    fn due(&self) -> bool {
        self.dirty && self.after.is_some_and(|after| self.last.elapsed() >= after)
    }
}

impl Writer {
    /// Begins an idle flush when one is due, or advances the one under way as far as it can
    /// without waiting (see the module documentation). A failure is logged and ends it; the next
    /// command and idle period try again.
    pub(super) fn flush_if_idle(&mut self) {
        if self.flushing() {
            return;
        }
        if self.idle.step == Step::Quiet {
            if !self.idle.due() {
                return;
            }
            self.idle.dirty = false;
            self.idle.began = Instant::now();
        }
        match self.advance_idle_flush() {
            Ok(step) => {
                if let (Step::Quiet, Step::Log { rolled }) = (step, self.idle.step) {
                    tracing::debug!(elapsed = ?self.idle.began.elapsed(), rolled, "flushed on idle");
                }
                self.idle.step = step;
            }
            Err(e) => {
                self.idle.step = Step::Quiet;
                tracing::warn!(error = %e, "flushing on idle failed; retried after the next write");
            }
        }
    }

    /// Runs the steps of the idle flush from the current one until one must wait; returns the
    /// step to resume at (`Quiet` once done).
    fn advance_idle_flush(&mut self) -> Result<Step> {
        let sh = std::sync::Arc::clone(&self.shared);
        let mut step = self.idle.step;
        loop {
            step = match step {
                Step::Quiet => {
                    // Steps 1 and 2.
                    self.flush_head()?;
                    for name in sh.db.list_keyspace_names() {
                        sh.db.keyspace(&name, fjall::KeyspaceCreateOptions::default)?.rotate_memtable()?;
                    }
                    match self.roll_over_bytes() {
                        Some(left) => Step::Padding { journal: self.newest_journal(), left },
                        None => Step::Log { rolled: false },
                    }
                }
                Step::Padding { journal, left } => {
                    let pad = sh.db.keyspace(PAD_KEYSPACE, crate::storage::index::series::table_options)?;
                    if pad.tree.sealed_memtable_count() > 0 {
                        return Ok(step);
                    }
                    if left == 0 || self.newest_journal() != journal {
                        // One live row, so that compaction never leaves the keyspace without
                        // tables (fjall deletes no journal file naming a keyspace without tables).
                        pad.insert(PAD_LIVE_KEY, [])?;
                        pad.rotate_memtable()?;
                        Step::Log { rolled: true }
                    } else {
                        Step::Padding { journal, left: self.pad_step(&pad, left)? }
                    }
                }
                Step::Log { .. } => {
                    if !(sh.head.is_empty() && sh.wal.first_key_value().is_none()) {
                        // A write arrived meanwhile: the log is live again.
                        return Ok(Step::Quiet);
                    }
                    if sh.wal.tree.sealed_memtable_count() > 0 {
                        return Ok(step);
                    }
                    self.compact_log()?;
                    return Ok(Step::Quiet);
                }
            };
        }
    }

    /// Bytes to pad the journal with for fjall to roll it over, when that is worth it (see
    /// [`ROLL_MIN_BYTES`] and [`ROLL_SHARE`]).
    fn roll_over_bytes(&self) -> Option<u64> {
        match close::journal_bytes(&self.data_dir) {
            Ok((active, all)) => {
                let tables = crate::storage::disk::du_bytes(&self.data_dir).unwrap_or(0).saturating_sub(all);
                // The file's allocated blocks trail the writer's position by its buffer (8 KiB);
                // padding ends as soon as the file was sealed, whatever this count says.
                (active >= ROLL_MIN_BYTES && active >= tables / ROLL_SHARE)
                    .then(|| FJALL_ROLL_BYTES.saturating_sub(active) + PAD_STEP as u64)
            }
            Err(e) => {
                tracing::debug!(error = %e, "measuring the journal failed; not rolled over");
                None
            }
        }
    }

    fn newest_journal(&self) -> Option<u64> {
        close::newest_journal_id(&self.data_dir).ok().flatten()
    }

    /// Writes up to [`PAD_STEP`] zeros through `pad`, removes them again and seals the
    /// memtable; returns the bytes left to write.
    fn pad_step(&self, pad: &fjall::Keyspace, mut left: u64) -> Result<u64> {
        let sh = &self.shared;
        let zeros = fjall::Slice::from(vec![0u8; PAD_ROW]);
        // Rows and their removal in two batches: the rows of one batch share a sequence number,
        // so a row and its removal in one would be unordered.
        let mut rows = sh.db.batch().durability(Some(fjall::PersistMode::Buffer));
        let mut removals = sh.db.batch().durability(Some(fjall::PersistMode::Buffer));
        let mut key = 0u32;
        while (key as usize) * PAD_ROW < PAD_STEP && left > 0 {
            rows.insert(pad, key.to_be_bytes(), zeros.clone());
            removals.remove(pad, key.to_be_bytes());
            key += 1;
            left = left.saturating_sub(PAD_ROW as u64);
        }
        rows.commit()?;
        removals.commit()?;
        pad.rotate_memtable()?;
        Ok(left)
    }

    /// Step 4: compacts the log's tables away (it holds no live row), leaving one table.
    fn compact_log(&self) -> Result<()> {
        let sh = &self.shared;
        if sh.wal.table_count() > 0 {
            let before = sh.wal.disk_space();
            sh.wal.major_compact()?;
            tracing::debug!(before, after = sh.wal.disk_space(), "compacted the write-ahead log on idle");
        }
        if sh.wal.table_count() == 0 {
            // fjall deletes no journal file naming a keyspace without tables (it reads the
            // keyspace's flushed position from them): leave one table, holding only the removal
            // of a row already removed. Written by fjall's workers; not waited for.
            let mut keep = sh.db.batch().durability(Some(fjall::PersistMode::Buffer));
            keep.remove(&sh.wal, super::wal::key(self.wal.next.saturating_sub(1)));
            keep.commit()?;
            sh.wal.rotate_memtable()?;
        }
        Ok(())
    }
}
