//! Exemplars on ClickHouse: the `exemplars` table holds one row per series and time, written
//! with the samples of the write that carried them (`write.rs`; a write spanning shards makes
//! them visible with its samples, `commit.rs`), dropped with their days by retention and
//! deleted with their series' samples. Unlike the embedded store, nothing bounds their number
//! but retention. Within one write, a series' exemplar not newer than the newest kept before it
//! is dropped, as Prometheus drops an out-of-order or repeated one, however many `TimeSeries`
//! entries of the request carry that series ([`InOrder`]); across writes nodes keep no
//! per-series state to tell, so an exemplar older than one already stored is kept.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::client::Shard;
use super::commit::SeenIds;
use super::read::{malformed, Candidate, IDS_PER_STATEMENT};
use super::rowbinary::Reader;
use super::ClickHouse;
use crate::labels::{Label, Labels};
use crate::matcher::Matcher;
use crate::sample::{Exemplar, PackedBatch};
use crate::storage::{ReadLimits, SeriesExemplars, StorageError};

/// Which exemplars of one write are stored. A sender may split one series over several
/// entries of a request (Prometheus does), which become several series of the batch with equal
/// label bytes: per label set, over all of them in batch order, an exemplar is kept only when
/// it is newer than every exemplar kept before it (a repeated or older one is dropped; the
/// table holds one row per series and time).
///
/// Invariant: equal label sets have equal bytes (the batch holds canonical encodings), so the
/// bytes identify the series.
#[derive(Debug, Default)]
pub(super) struct InOrder<'a> {
    /// Per label set, the time of the newest exemplar kept so far.
    newest: HashMap<&'a [u8], i64>,
}

impl<'a> InOrder<'a> {
    /// The exemplars of one series of the batch (`labels` its canonical label bytes) that are
    /// stored, given those of the series before it.
    pub(super) fn keep<'s>(
        &'s mut self,
        labels: &'a [u8],
        exemplars: &'a [Exemplar],
    ) -> impl Iterator<Item = &'a Exemplar> + 's
    where
        'a: 's,
    {
        exemplars.iter().filter(move |e| match self.newest.get_mut(labels) {
            Some(newest) if e.timestamp_ms <= *newest => false,
            Some(newest) => {
                *newest = e.timestamp_ms;
                true
            }
            None => {
                self.newest.insert(labels, e.timestamp_ms);
                true
            }
        })
    }
}

/// How many of `batch`'s exemplars a write stores (see [`InOrder`]).
pub fn exemplars_stored(batch: &PackedBatch) -> usize {
    let mut in_order = InOrder::default();
    batch.series().map(|s| in_order.keep(s.labels, s.exemplars).count()).sum()
}

impl ClickHouse {
    /// The exemplars in `[start_ms, end_ms]` of the series matching any of `selectors`, one
    /// entry per series (by label set), each by time.
    ///
    /// # Errors
    /// [`StorageError::Unavailable`] when a shard (or a coordinator it needs) fails.
    pub fn exemplars(
        &self,
        selectors: &[Vec<Matcher>],
        start_ms: i64,
        end_ms: i64,
    ) -> Result<Vec<SeriesExemplars>, StorageError> {
        let q = self.querier(ReadLimits::none()).complete();
        let per_shard = q.each_shard(|shard| {
            let mut series: BTreeMap<u64, Candidate> = BTreeMap::new();
            for matchers in selectors {
                for c in q.candidates(shard, matchers, start_ms, end_ms)? {
                    series.entry(c.id).or_insert(c);
                }
            }
            let series: Vec<Candidate> = series.into_values().collect();
            self.exemplars_on(shard, &series, start_ms, end_ms)
        })?;
        let mut out: Vec<SeriesExemplars> = per_shard.into_iter().flatten().collect();
        out.sort_by(|a, b| a.labels.cmp(&b.labels));
        Ok(out)
    }

    /// The visible exemplars of `series` on `shard` in `[start_ms, end_ms]`.
    fn exemplars_on(
        &self,
        shard: &Shard,
        series: &[Candidate],
        start_ms: i64,
        end_ms: i64,
    ) -> Result<Vec<SeriesExemplars>, StorageError> {
        let mut out = Vec::new();
        for chunk in series.chunks(IDS_PER_STATEMENT) {
            let list = chunk.iter().map(|c| c.id.to_string()).collect::<Vec<_>>().join(",");
            let buckets: BTreeSet<u16> = chunk.iter().map(|c| c.bucket).collect();
            let buckets = buckets.iter().map(u16::to_string).collect::<Vec<_>>().join(",");
            let body = shard.query(&format!(
                "SELECT series_id, ts, value, names, values, write_id FROM {} WHERE bucket IN ({buckets}) \
                 AND series_id IN ({list}) AND ts >= {start_ms} AND ts <= {end_ms} FORMAT RowBinary",
                self.table("exemplars")
            ))?;
            let mut r = Reader::new(&body);
            let mut rows = Vec::new();
            // No `inserted_at` here: an undecided write id is never remembered as aborted from
            // exemplars (its samples' reads decide that).
            let mut seen = SeenIds::default();
            while !r.is_empty() {
                let malformed = |e: super::rowbinary::Malformed| malformed(shard, e);
                let id = r.u64().map_err(malformed)?;
                let ts = r.i64().map_err(malformed)?;
                let bits = r.u64().map_err(malformed)?;
                let names = r.strings().map_err(malformed)?;
                let values = r.strings().map_err(malformed)?;
                let write_id = r.u64().map_err(malformed)?;
                if names.len() != values.len() {
                    return Err(super::read::malformed(shard, "an exemplar's label names and values differ in number"));
                }
                seen.note(write_id, i64::MAX);
                let labels = Labels::from_trusted(names.iter().zip(&values).map(|(n, v)| Label::new(*n, *v)).collect());
                rows.push((id, write_id, Exemplar { labels, value: f64::from_bits(bits), timestamp_ms: ts }));
            }
            let visible = self.visible(&seen, crate::storage::now_ms())?;
            // Per series, one exemplar per time: the last read (rows not merged yet repeat one).
            let mut found: HashMap<u64, BTreeMap<i64, Exemplar>> = HashMap::new();
            for (id, write_id, e) in rows {
                if visible.contains(write_id) {
                    found.entry(id).or_default().insert(e.timestamp_ms, e);
                }
            }
            for c in chunk {
                if let Some(exemplars) = found.remove(&c.id) {
                    out.push(SeriesExemplars {
                        labels: c.labels.clone(),
                        exemplars: exemplars.into_values().collect(),
                    });
                }
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sample::Sample;
    use proptest::prelude::*;

    fn at(t: i64) -> Exemplar {
        Exemplar { labels: Labels::default(), value: 1.0, timestamp_ms: t }
    }

    #[test]
    fn out_of_order_and_repeated_exemplars_of_a_write_are_dropped() {
        let given = [at(10), at(5), at(10), at(11), at(3), at(12)];
        let kept: Vec<i64> = InOrder::default().keep(b"s", &given).map(|e| e.timestamp_ms).collect();
        assert_eq!(kept, [10, 11, 12]);
    }

    proptest! {
        /// A batch whose series repeat label sets (a series spread over entries): against a
        /// brute-force reference, an exemplar is stored exactly when it is newer than every
        /// earlier exemplar of the same label set in the batch, whichever entry carried it, and
        /// [`exemplars_stored`] counts exactly those.
        #[test]
        fn a_series_spread_over_entries_keeps_what_one_entry_would(
            entries in proptest::collection::vec((0u8..3, proptest::collection::vec(0i64..20, 0..4)), 0..10),
        ) {
            let mut batch = PackedBatch::default();
            for (series, times) in &entries {
                let labels = Labels::from_pairs([("__name__", "m"), ("s", &series.to_string())]).unwrap();
                for l in labels.iter() {
                    batch.push_label(&l.name, &l.value);
                }
                batch.push_sample(Sample::new(0, 1.0));
                for &t in times {
                    batch.push_exemplar(at(t));
                }
                batch.finish_series();
            }
            // Reference: (entry, time) kept, each compared with every earlier one of its series.
            let flat: Vec<(u8, usize, i64)> = entries
                .iter()
                .enumerate()
                .flat_map(|(i, (s, times))| times.iter().map(move |&t| (*s, i, t)))
                .collect();
            let want: Vec<(usize, i64)> = flat
                .iter()
                .enumerate()
                .filter(|&(k, &(s, _, t))| flat.iter().take(k).all(|&(s2, _, t2)| s2 != s || t2 < t))
                .map(|(_, &(_, i, t))| (i, t))
                .collect();
            let mut in_order = InOrder::default();
            let got: Vec<(usize, i64)> = batch
                .series()
                .enumerate()
                .flat_map(|(i, s)| in_order.keep(s.labels, s.exemplars).map(|e| (i, e.timestamp_ms)).collect::<Vec<_>>())
                .collect();
            prop_assert_eq!(&got, &want);
            prop_assert_eq!(exemplars_stored(&batch), want.len());
        }
    }
}
