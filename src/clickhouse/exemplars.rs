//! Exemplars on ClickHouse: the `exemplars` table holds one row per series and time, written
//! with the samples of the write that carried them (`write.rs`; a write spanning shards makes
//! them visible with its samples, `commit.rs`), dropped with their days by retention and
//! deleted with their series' samples. Unlike the embedded store, nothing bounds their number
//! but retention. Within one write, a series' exemplar not newer than the one before it is
//! dropped, as Prometheus drops an out-of-order or repeated one; across writes nodes keep no
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

/// The exemplars of one series in a write that are stored: each newer than the one kept
/// before it.
pub(super) fn in_order(exemplars: &[Exemplar]) -> impl Iterator<Item = &Exemplar> {
    let mut newest = i64::MIN;
    exemplars.iter().filter(move |e| {
        let newer = e.timestamp_ms > newest;
        newest = newest.max(e.timestamp_ms);
        newer
    })
}

/// How many of `batch`'s exemplars a write stores (see [`in_order`]).
pub fn exemplars_stored(batch: &PackedBatch) -> usize {
    batch.series().map(|s| in_order(s.exemplars).count()).sum()
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

    fn at(t: i64) -> Exemplar {
        Exemplar { labels: Labels::default(), value: 1.0, timestamp_ms: t }
    }

    #[test]
    fn out_of_order_and_repeated_exemplars_of_a_write_are_dropped() {
        let given = [at(10), at(5), at(10), at(11), at(3), at(12)];
        let kept: Vec<i64> = in_order(&given).map(|e| e.timestamp_ms).collect();
        assert_eq!(kept, [10, 11, 12]);
    }
}
