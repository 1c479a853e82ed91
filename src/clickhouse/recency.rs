//! Which of several samples of one series at one timestamp wins on ClickHouse: the most recent
//! write, as on the embedded store, whether it is a float or a native histogram. A row of `samples` is as recent as its `inserted_at`; the
//! samples of a `chunks` row are as recent as its version (at least the watermark of the seal
//! that wrote it, and every row that seal folded in was inserted at or before it). Between two
//! of equal recency, the one added last wins (the rows of one insert, in write order).
//!
//! Reads, seals and deletes all resolve samples this way, so two nodes sealing the same day at
//! once, or a seal racing a late write, cannot put an older value over a newer one.

use std::sync::Arc;

use crate::histogram::{chunk as histogram_chunk, Histogram};
use crate::sample::{HistogramSample, Sample};
use crate::storage::format::chunk;
use crate::storage::StorageError;

/// One candidate value: a float's bits or a native histogram. A series holds one value per
/// timestamp whatever its kind, so both kinds compete at a timestamp (last write wins).
#[derive(Clone, Debug)]
enum Value {
    Float(u64),
    Histogram(Arc<Histogram>),
}

/// The samples of one series gathered from chunk rows and sample rows, each with its recency.
#[derive(Clone, Debug, Default)]
pub struct Candidates(Vec<(i64, i64, Value)>);

/// A series' samples once resolved: one per timestamp, floats and histograms apart, each
/// ascending, no timestamp in both.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Resolved {
    /// The float samples.
    pub samples: Vec<Sample>,
    /// The native histogram samples.
    pub histograms: Vec<HistogramSample>,
}

impl Resolved {
    /// Keeps only the samples whose timestamp satisfies `keep`.
    pub fn retain(&mut self, keep: impl Fn(i64) -> bool) {
        self.samples.retain(|p| keep(p.timestamp_ms));
        self.histograms.retain(|h| keep(h.timestamp_ms));
    }

    /// Float and histogram samples together.
    pub fn len(&self) -> usize {
        self.samples.len() + self.histograms.len()
    }

    /// True when no sample is left.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Candidates {
    /// Adds a sample at `ts` with float bits `bits`, as recent as `recency`.
    pub fn push(&mut self, ts: i64, recency: i64, bits: u64) {
        self.0.push((ts, recency, Value::Float(bits)));
    }

    /// Adds the samples of a chunk for which `keep` holds on the timestamp, as recent as
    /// `recency`; returns how many. `data` is a float chunk (the chunk codec, a `chunks` row)
    /// or a histogram chunk (`histogram_chunk::MARKER` first: a `chunks` row of histograms, or
    /// the one histogram of a `samples` row). `scratch` is a decode buffer reused across calls.
    ///
    /// # Errors
    /// [`StorageError::Corrupt`] when `data` does not decode.
    pub fn push_chunk(
        &mut self,
        data: &[u8],
        recency: i64,
        keep: impl Fn(i64) -> bool,
        scratch: &mut Vec<Sample>,
    ) -> Result<usize, StorageError> {
        let before = self.0.len();
        if data.first() == Some(&histogram_chunk::MARKER) {
            let samples = histogram_chunk::Samples::new(data)
                .map_err(|_| StorageError::Corrupt { what: "ClickHouse histogram chunk" })?;
            for sample in samples {
                let (ts, h) = sample.map_err(|_| StorageError::Corrupt { what: "ClickHouse histogram chunk" })?;
                if keep(ts) {
                    self.0.push((ts, recency, Value::Histogram(Arc::new(h))));
                }
            }
            return Ok(self.0.len() - before);
        }
        scratch.clear();
        chunk::decode(data, scratch).map_err(|_| StorageError::Corrupt { what: "ClickHouse chunk" })?;
        self.0.extend(
            scratch
                .iter()
                .filter(|p| keep(p.timestamp_ms))
                .map(|p| (p.timestamp_ms, recency, Value::Float(p.value.to_bits()))),
        );
        Ok(self.0.len() - before)
    }

    /// One sample per timestamp, the most recent of either kind (the last added among equally
    /// recent ones), by ascending timestamp.
    pub fn resolve(mut self) -> Resolved {
        // Stable: equal (timestamp, recency) keep the order they were added in.
        self.0.sort_by_key(|&(ts, recency, _)| (ts, recency));
        let mut winners: Vec<(i64, Value)> = Vec::with_capacity(self.0.len());
        for (ts, _, value) in self.0 {
            if winners.last().is_some_and(|(t, _)| *t == ts) {
                winners.pop();
            }
            winners.push((ts, value));
        }
        let mut out = Resolved::default();
        for (ts, value) in winners {
            match value {
                Value::Float(bits) => out.samples.push(Sample::new(ts, f64::from_bits(bits))),
                Value::Histogram(h) => out.histograms.push(HistogramSample { timestamp_ms: ts, histogram: h }),
            }
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
        let got: Vec<(i64, u64)> = c.resolve().samples.iter().map(|p| (p.timestamp_ms, p.value.to_bits())).collect();
        assert_eq!(got, [(5, 6), (10, 2), (20, 5)]);
    }

    fn hist(sum: f64) -> Arc<Histogram> {
        Arc::new(Histogram { sum, ..Histogram::default() })
    }

    #[test]
    fn the_most_recent_wins_across_kinds() {
        let mut c = Candidates::default();
        let mut data = Vec::new();
        let h = hist(4.5);
        histogram_chunk::encode(&[(10, (*h).clone()), (30, (*h).clone())], &mut data).unwrap();
        c.push(10, 5, 1);
        c.push_chunk(&data, 6, |_| true, &mut Vec::new()).unwrap();
        c.push(20, 1, 2);
        c.push(30, 7, 3);
        let got = c.resolve();
        assert_eq!(
            got.samples.iter().map(|p| (p.timestamp_ms, p.value.to_bits())).collect::<Vec<_>>(),
            [(20, 2), (30, 3)]
        );
        assert_eq!(got.histograms.iter().map(|h| (h.timestamp_ms, h.histogram.sum)).collect::<Vec<_>>(), [(10, 4.5)]);
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
            let got: Vec<(i64, u64)> = c.resolve().samples.iter().map(|p| (p.timestamp_ms, p.value.to_bits())).collect();
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
