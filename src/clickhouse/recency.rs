//! Which of several samples of one series at one timestamp wins on ClickHouse: the most recent
//! write, as on the embedded store. A row of `samples` is as recent as its `inserted_at`; the
//! samples of a `chunks` row are as recent as its version (at least the watermark of the seal
//! that wrote it, and every row that seal folded in was inserted at or before it). Between two
//! of equal recency, the one added last wins (the rows of one insert, in write order).
//!
//! Reads, seals and deletes all resolve samples this way, so two nodes sealing the same day at
//! once, or a seal racing a late write, cannot put an older value over a newer one.

use crate::sample::Sample;
use crate::storage::{chunk, StorageError};

/// The samples of one series gathered from chunk rows and sample rows, each with its recency.
#[derive(Clone, Debug, Default)]
pub struct Candidates(Vec<(i64, i64, u64)>);

impl Candidates {
    /// Adds a sample at `ts` with float bits `bits`, as recent as `recency`.
    pub fn push(&mut self, ts: i64, recency: i64, bits: u64) {
        self.0.push((ts, recency, bits));
    }

    /// Adds the samples of a `chunks` row (`data` in the chunk codec) for which `keep` holds on
    /// the timestamp, as recent as the row's `version`; returns how many. `scratch` is a decode
    /// buffer reused across calls.
    ///
    /// # Errors
    /// [`StorageError::Corrupt`] when `data` does not decode.
    pub fn push_chunk(
        &mut self,
        data: &[u8],
        version: i64,
        keep: impl Fn(i64) -> bool,
        scratch: &mut Vec<Sample>,
    ) -> Result<usize, StorageError> {
        scratch.clear();
        chunk::decode(data, scratch).map_err(|_| StorageError::Corrupt { what: "ClickHouse chunk" })?;
        let before = self.0.len();
        self.0.extend(
            scratch.iter().filter(|p| keep(p.timestamp_ms)).map(|p| (p.timestamp_ms, version, p.value.to_bits())),
        );
        Ok(self.0.len() - before)
    }

    /// One sample per timestamp, the most recent (the last added among equally recent ones),
    /// by ascending timestamp.
    pub fn resolve(mut self) -> Vec<Sample> {
        // Stable: equal (timestamp, recency) keep the order they were added in.
        self.0.sort_by_key(|&(ts, recency, _)| (ts, recency));
        let mut out: Vec<Sample> = Vec::with_capacity(self.0.len());
        for (ts, _, bits) in self.0 {
            if out.last().is_some_and(|p| p.timestamp_ms == ts) {
                out.pop();
            }
            out.push(Sample::new(ts, f64::from_bits(bits)));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_most_recent_wins_and_ties_keep_the_last_added() {
        let mut c = Candidates::default();
        c.push(10, 5, 1);
        c.push(10, 7, 2);
        c.push(10, 6, 3);
        c.push(20, 1, 4);
        c.push(20, 1, 5);
        c.push(5, 0, 6);
        let got: Vec<(i64, u64)> = c.resolve().iter().map(|p| (p.timestamp_ms, p.value.to_bits())).collect();
        assert_eq!(got, [(5, 6), (10, 2), (20, 5)]);
    }

    proptest! {
        /// Against a brute force: for each timestamp, the greatest recency, and among those the
        /// last one added.
        #[test]
        fn resolve_agrees_with_a_brute_force(entries in proptest::collection::vec((0i64..6, 0i64..4, any::<u64>()), 0..40)) {
            let mut c = Candidates::default();
            for &(ts, r, bits) in &entries {
                c.push(ts, r, bits);
            }
            let got: Vec<(i64, u64)> = c.resolve().iter().map(|p| (p.timestamp_ms, p.value.to_bits())).collect();
            let mut want = Vec::new();
            for ts in 0..6 {
                let best = entries
                    .iter()
                    .enumerate()
                    .filter(|(_, e)| e.0 == ts)
                    .max_by_key(|(i, e)| (e.1, *i))
                    .map(|(_, e)| (ts, e.2));
                want.extend(best);
            }
            prop_assert_eq!(got, want);
        }
    }
}
