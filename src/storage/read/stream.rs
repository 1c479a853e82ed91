//! Reading float series piece by piece into [`SampleSink`]s (see
//! [`Querier::select_reduced`](super::querier::Querier::select_reduced)): per window, each
//! series' samples are decoded into a small scratch vector and fed to its sink at once, while
//! they are in the CPU caches, instead of being collected over the whole range first. A 30-day
//! read of a series at 60 s then holds one day of it (23 KB), not 30 (690 KB), and the sink
//! reads what was just written rather than memory evicted since.
//!
//! What each sink is fed equals, in order, what [`super::select::read_series`] collects for the
//! series: per window the sealed chunks and the hot overlay merged (hot wins on equal
//! timestamps), and the head's samples merged into the window holding them (the head wins).
//! Windows are disjoint and read oldest first, so the batches ascend. The head is read first,
//! for every series, before any keyspace (see `read_series` for why).

use super::querier::{SampleBudget, SampleSink};
use crate::sample::Sample;
use crate::spare_samples;
use crate::storage::error::Result;
use crate::storage::format::run;
use crate::storage::lifecycle::window::Window;
use crate::storage::series_id::SeriesId;
use crate::storage::write::head::Head;

/// Where and what to read: one bucket's series `ids` (ascending) in `[start, end]`.
pub(super) struct Streamed<'a> {
    pub windows: &'a [Window],
    pub window_ms: i64,
    pub head: &'a Head,
    pub bucket: u16,
    pub ids: &'a [SeriesId],
    pub start_ms: i64,
    pub end_ms: i64,
    /// One iterator per keyspace for all `ids`, else a seek per series.
    pub one_iterator: bool,
}

impl Streamed<'_> {
    /// Feeds each series' samples to its sink (`sinks[i]` for `ids[i]`); returns, per series,
    /// whether it had any. The budget takes every batch before it is fed.
    ///
    /// # Errors
    /// Engine errors, corrupt rows, the budget's error.
    pub fn feed(&self, sinks: &mut [Box<dyn SampleSink + '_>], budget: &SampleBudget) -> Result<Vec<bool>> {
        let n = self.ids.len();
        let mut recent: Vec<Vec<Sample>> = Vec::with_capacity(n);
        for &id in self.ids {
            let mut v = Vec::new();
            self.head.read(self.bucket, id, self.start_ms, self.end_ms, &mut v);
            recent.push(v);
        }
        let mut fed_head = vec![0usize; n];
        let mut any = vec![false; n];
        let mut feed = |i: usize, batch: &[Sample], sinks: &mut [Box<dyn SampleSink + '_>]| -> Result<()> {
            if batch.is_empty() {
                return Ok(());
            }
            budget.take(batch.len())?;
            if let (Some(sink), Some(a)) = (sinks.get_mut(i), any.get_mut(i)) {
                sink.feed(batch);
                *a = true;
            }
            Ok(())
        };
        let mut stored: Vec<Vec<Sample>> = (0..n).map(|_| spare_samples::take()).collect();
        let mut merged = spare_samples::take();
        for w in self.windows {
            stored.iter_mut().for_each(Vec::clear);
            self.read_window(w, &mut stored)?;
            let w_end = w.start_ms.saturating_add(self.window_ms);
            for (i, samples) in stored.iter().enumerate() {
                let (Some(head), Some(done)) = (recent.get(i), fed_head.get_mut(i)) else { continue };
                let head = head.get(*done..).unwrap_or_default();
                // Head samples in no window on disk before this one, then those in this one.
                let before = head.partition_point(|p| p.timestamp_ms < w.start_ms);
                let inside = head.get(before..).unwrap_or_default();
                let inside = inside.get(..inside.partition_point(|p| p.timestamp_ms < w_end)).unwrap_or_default();
                *done += before + inside.len();
                feed(i, head.get(..before).unwrap_or_default(), sinks)?;
                if inside.is_empty() {
                    feed(i, samples, sinks)?;
                } else {
                    merged.clear();
                    run::merge_into(&mut merged, samples, inside);
                    feed(i, &merged, sinks)?;
                }
            }
        }
        for (i, (head, done)) in recent.iter().zip(&fed_head).enumerate() {
            feed(i, head.get(*done..).unwrap_or_default(), sinks)?;
        }
        stored.into_iter().for_each(spare_samples::give);
        spare_samples::give(merged);
        Ok(any)
    }

    /// Appends each series' samples in window `w` to `outs[i]`: its sealed chunks and hot
    /// overlay merged, the hot rows winning on equal timestamps.
    fn read_window(&self, w: &Window, outs: &mut [Vec<Sample>]) -> Result<()> {
        match (&w.chunks, &w.points) {
            (Some((_, ks)), None) | (None, Some(ks)) => self.read_keyspace(ks, outs),
            (Some((_, sealed)), Some(hot_ks)) => {
                let mut cold: Vec<Vec<Sample>> = outs.iter().map(|_| spare_samples::take()).collect();
                let mut hot: Vec<Vec<Sample>> = outs.iter().map(|_| spare_samples::take()).collect();
                self.read_keyspace(sealed, &mut cold)?;
                self.read_keyspace(hot_ks, &mut hot)?;
                for ((out, cold), hot) in outs.iter_mut().zip(cold).zip(hot) {
                    run::merge_into(out, &cold, &hot);
                    spare_samples::give(cold);
                    spare_samples::give(hot);
                }
                Ok(())
            }
            (None, None) => Ok(()),
        }
    }

    fn read_keyspace(&self, ks: &fjall::Keyspace, outs: &mut [Vec<Sample>]) -> Result<()> {
        if self.one_iterator {
            return run::read_many(ks, self.bucket, self.ids, self.start_ms, self.end_ms, outs);
        }
        for (&id, out) in self.ids.iter().zip(outs.iter_mut()) {
            run::read(ks, self.bucket, id, self.start_ms, self.end_ms, out)?;
        }
        Ok(())
    }
}
