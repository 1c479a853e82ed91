//! What readers may remember about the past: a time before which every window is sealed, and a
//! generation counter that moves whenever data below that time changes. A cache of query
//! answers (the query result cache of `promql::result_cache`) keeps per-step answers that read
//! only data below the boundary, with the generation they were computed under, and uses one
//! only while that generation is current.
//!
//! Invariant (as in [`crate::storage::index::index_cache`]): every change to samples below the
//! boundary calls [`Immutable::written_below`] or [`Immutable::changed`] *after* it is visible to
//! readers: a group commit holding a sample below the boundary (a late sample into a sealed
//! window or a gap between them, once it is in the head), a deletion, a re-seal, a retention
//! drop. A reader loads the generation *before* the boundary and before it reads samples
//! ([`Immutable::get`]), so an answer that may have missed a change is stored under a
//! generation that change's bump has already left behind, and is never used.
//!
//! The boundary is the later of two times and only moves forward: the end of the sealed
//! windows ([`Immutable::advance`], after a seal made a window visible) and [`SETTLED_MS`]
//! before now (moved by every [`Immutable::get`] and [`Immutable::written_below`]). A write
//! older than that is rare in steady operation (scrapes arrive within seconds), so the hot
//! window's steps up to five minutes ago are kept too, not only the sealed days (with 1-day
//! windows and a 1-hour grace those end 1 to 25 hours ago); a client catching up on a
//! backlog bumps the generation with every write, and the cache holds nothing meanwhile. A
//! late write that creates a window below the boundary (in a gap, or before the oldest window)
//! leaves the boundary where it was and bumps the generation instead.
//!
//! The reader's move of the boundary comes before its reads, the writer's after its commit is
//! visible (and the head's locks order the two when the read missed the commit), so the writer
//! compares the commit's oldest sample with a boundary at least the reader's. Moving state (head flushes, the
//! first seal of a window, an overlay merged into its chunks) changes no sample a read returns
//! and bumps nothing. Process restarts (snapshot restore, migrations) start with no answers.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use crate::storage::lifecycle::window::Windows;

/// How long before now samples count as settled (see the module doc): VictoriaMetrics' rollup
/// result cache leaves out the last 5 minutes too (`-search.cacheTimestampOffset`).
pub const SETTLED_MS: i64 = 5 * 60_000;

/// The boundary and generation (see the module doc).
pub struct Immutable {
    generation: AtomicU64,
    /// Exclusive: samples strictly before it are covered. `i64::MIN`: nothing is.
    before: AtomicI64,
}

impl Default for Immutable {
    fn default() -> Self {
        Self { generation: AtomicU64::new(0), before: AtomicI64::new(i64::MIN) }
    }
}

impl Immutable {
    /// `(boundary, generation)`: samples before the boundary change only with the generation.
    /// The generation is loaded first (see the module doc).
    pub fn get(&self) -> Option<(i64, u64)> {
        let generation = self.generation.load(Ordering::SeqCst);
        let before = self.settle(crate::storage::now_ms());
        (before != i64::MIN).then_some((before, generation))
    }

    /// Moves the boundary to [`SETTLED_MS`] before `now_ms` if that is later; the boundary.
    fn settle(&self, now_ms: i64) -> i64 {
        let settled = now_ms.saturating_sub(SETTLED_MS);
        self.before.fetch_max(settled, Ordering::SeqCst).max(settled)
    }

    /// Records that samples below the boundary changed. Call it after the change is visible.
    pub fn changed(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
    }

    /// After a commit made samples from `oldest_ms` on visible: a change below the boundary
    /// when `oldest_ms` lies before it.
    pub fn written_below(&self, oldest_ms: i64) {
        self.written_below_at(oldest_ms, crate::storage::now_ms());
    }

    fn written_below_at(&self, oldest_ms: i64, now_ms: i64) {
        if oldest_ms < self.settle(now_ms) {
            self.changed();
        }
    }

    /// Moves the boundary to the end of the newest window that, with every window before it,
    /// is sealed (never backwards). Call it after a seal made its window visible, and at open.
    pub fn advance(&self, windows: &Windows) {
        if let Some(end) = sealed_prefix_end(windows) {
            self.before.fetch_max(end, Ordering::SeqCst);
        }
    }
}

/// The end of the newest window that, with every older window, has a visible chunks keyspace.
fn sealed_prefix_end(windows: &Windows) -> Option<i64> {
    let window_ms = windows.window_ms();
    windows.all().into_iter().take_while(|w| w.chunks.is_some()).last().map(|w| w.start_ms.saturating_add(window_ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_below_the_boundary_move_the_generation() {
        let i = Immutable::default();
        let now = SETTLED_MS + 1_000;
        assert_eq!(i.settle(now), 1_000);
        i.written_below_at(1_000, now);
        assert_eq!(i.generation.load(Ordering::SeqCst), 0, "at the boundary: not below it");
        i.written_below_at(999, now);
        assert_eq!(i.generation.load(Ordering::SeqCst), 1);
        i.changed();
        assert_eq!(i.generation.load(Ordering::SeqCst), 2);
        // A seal moves it past now - 5m; an earlier clock never moves it back.
        i.before.fetch_max(SETTLED_MS * 10, Ordering::SeqCst);
        assert_eq!(i.settle(now), SETTLED_MS * 10);
        i.written_below_at(SETTLED_MS * 10 - 1, now - 60_000);
        assert_eq!(i.generation.load(Ordering::SeqCst), 3);
        assert_eq!(i.settle(now + SETTLED_MS * 20), 1_000 + SETTLED_MS * 20);
    }
}
