//! Keeping fjall's memtables within `--write-buffer`.
//!
//! fjall seals a keyspace's memtable only once that memtable alone reaches its
//! `max_memtable_size` (64 MiB by default), and it has no bound over all keyspaces (its
//! `max_write_buffer_size` is not implemented in 3.1). The log keyspace and the newest window's
//! points keyspace are written all the time, so each filled towards 64 MiB, and their memtables
//! (skiplist nodes on top of the bytes fjall counts) were most of the RSS growth of the soak run's
//! first 45 minutes (`bench/README.md`, *Soak*). After each group commit the writer compares
//! fjall's write buffer with the budget and, when it is over, seals the largest active memtable;
//! fjall's flush workers then write it into a table and free it.
//!
//! The log's memtable is left out of that choice until it alone holds [`LOG_SHARE`] times the
//! budget: every row in it is removed by the next head flush, which the head's own limits bound,
//! and a log memtable sealed before that writes the log to disk a second time (at 1 M series,
//! 121-168 MiB of log tables during ingest, deleted only by compaction). The end of each head
//! flush seals it instead ([`Writer::seal_log`]), when its rows are removed: fjall then writes
//! their tombstones, not their samples.

use fjall::AbstractTree;

use super::Writer;

/// An active memtable is sealed for the budget only from this share of the budget (and 1 MiB)
/// up: while fjall's workers are still flushing sealed memtables, the write buffer can stay over
/// the budget for a while, and sealing every small memtable meanwhile would only make small
/// tables for compaction to merge.
const MIN_SHARE: u64 = 4;
const MIN_SEALED_BYTES: u64 = 1 << 20;
/// The log's memtable is a candidate for sealing only past this many times the budget.
const LOG_SHARE: u64 = 2;

impl Writer {
    /// Seals the largest active memtable when fjall's write buffer (active and sealed
    /// memtables of every keyspace) exceeds `--write-buffer`. A failure only leaves a memtable
    /// bigger; fjall reports its flush errors itself.
    pub(super) fn bound_memtables(&self) {
        let sh = &self.shared;
        if sh.db.write_buffer_size() <= self.write_buffer_budget {
            return;
        }
        let windows = sh.windows.all();
        let log = (sh.wal.tree.active_memtable().size() > self.write_buffer_budget.saturating_mul(LOG_SHARE))
            .then_some(&sh.wal);
        let fixed = [&sh.series, &sh.series_by_labels, &sh.meta, &sh.exemplar_rows];
        let hot = windows.iter().filter_map(|w| w.points.as_ref());
        let largest = fixed
            .into_iter()
            .chain(log)
            .chain(hot)
            .map(|ks| (ks.tree.active_memtable().size(), ks))
            .max_by_key(|&(size, _)| size);
        let floor = (self.write_buffer_budget / MIN_SHARE).max(MIN_SEALED_BYTES);
        if let Some((_, ks)) = largest.filter(|&(size, _)| size >= floor) {
            if let Err(e) = ks.rotate_memtable() {
                tracing::warn!(error = %e, keyspace = %ks.name(), "sealing a memtable for --write-buffer failed");
            }
        }
    }

    /// Seals the log's memtable after a head flush removed its rows (see the module docs), once
    /// it holds at least 1 MiB. A failure only leaves the memtable bigger.
    pub(super) fn seal_log(&self) {
        let log = &self.shared.wal;
        if log.tree.active_memtable().size() >= MIN_SEALED_BYTES {
            if let Err(e) = log.rotate_memtable() {
                tracing::warn!(error = %e, "sealing the log's memtable after a head flush failed");
            }
        }
    }
}
