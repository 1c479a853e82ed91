//! Reads: every request fans out to all shards in parallel (a series lives on one shard, so
//! shards' answers merge without overlap). On each shard, the matchers that need a value pick
//! candidate ids from `postings` over the days of the range (regex matchers are decided here,
//! on the label's distinct values, with saltdb's own regex semantics), the candidates' label
//! sets come from `series` and are checked against every matcher, and their samples in the
//! range come from `chunks` (sealed days, by ascending version) and then `samples`, the later
//! of two samples at one time winning (which also drops the not-yet-merged duplicates of
//! retried inserts and of a seal in progress). Rows of a write spanning shards that is not
//! committed are left out (`commit.rs`), its postings rows too (`postings.rs`): a series, label
//! name or value listed only by such a write is not listed.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use super::client::{quote, Shard};
use super::commit::SeenIds;
use super::recency::Candidates;
use super::rowbinary::Reader;
use super::{day_of, ClickHouse};
use crate::labels::{Label, Labels, METRIC_NAME};
use crate::matcher::{MatchOp, Matcher};
use crate::sample::SeriesSamples;
use crate::storage::{Querier, ReadLimits, SampleBudget, SeriesMap, SeriesStarts, StartChange, StorageError};

type Result<T> = std::result::Result<T, StorageError>;

/// Bytes of SQL literals per `IN (...)` list (statements stay well under ClickHouse's
/// 256 KiB query limit).
const IN_LIST_BYTES: usize = 64 * 1024;

/// SQL literals joined by commas into `IN (...)` lists of about [`IN_LIST_BYTES`] each (a
/// literal is never split; a list passes the bound by at most its last literal).
pub(super) fn in_lists(literals: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut lists: Vec<String> = Vec::new();
    for literal in literals {
        match lists.last_mut() {
            Some(list) if list.len() < IN_LIST_BYTES => {
                list.push(',');
                list.push_str(&literal);
            }
            _ => lists.push(literal),
        }
    }
    lists
}
/// Ids per `IN (...)` list (at most 21 bytes each: about 105 KiB).
pub(super) const IDS_PER_STATEMENT: usize = 5_000;

/// A series a read selected on one shard.
pub(super) struct Candidate {
    pub(super) id: u64,
    pub(super) bucket: u16,
    pub(super) labels: Labels,
}

/// One row of the statement reading a series' samples and chunks (`samples` and `chunks` in
/// one `UNION ALL`, see [`ClickHouseQuerier::samples`]).
struct ReadRow<'a> {
    id: u64,
    /// 0: a `samples` row (`t` its timestamp); 1: a `chunks` row (`t` its version).
    kind: u8,
    t: i64,
    bits: u64,
    inserted_at: i64,
    /// Empty for a float sample, else a histogram sample's or the sealed chunk's bytes.
    data: &'a [u8],
    /// 0 for chunks and for writes of one shard (see `commit.rs`).
    write_id: u64,
}

impl<'a> ReadRow<'a> {
    fn read(r: &mut Reader<'a>) -> std::result::Result<Self, super::rowbinary::Malformed> {
        Ok(Self {
            id: r.u64()?,
            kind: r.u8()?,
            t: r.i64()?,
            bits: r.u64()?,
            inserted_at: r.i64()?,
            data: r.bytes()?,
            write_id: r.u64()?,
        })
    }
}

/// The candidate samples of the series of one statement, gathered from its rows.
struct Gather {
    /// Series index by id.
    index: HashMap<u64, usize>,
    samples: Vec<Candidates>,
    /// The last series found: rows of one series mostly come together (a part is sorted by
    /// series), so it is tried first.
    last: Option<(u64, usize)>,
    /// Samples taken (for the read's sample budget).
    read: usize,
    decoded: Vec<crate::sample::Sample>,
    start_ms: i64,
    end_ms: i64,
}

impl Gather {
    fn new(series: &[Candidate], start_ms: i64, end_ms: i64) -> Self {
        Self {
            index: series.iter().enumerate().map(|(i, c)| (c.id, i)).collect(),
            samples: vec![Candidates::default(); series.len()],
            last: None,
            read: 0,
            decoded: Vec::new(),
            start_ms,
            end_ms,
        }
    }

    /// Adds a visible row's samples to its series' candidates.
    fn push(&mut self, row: &ReadRow<'_>) -> Result<()> {
        let at = match self.last {
            Some((l, at)) if l == row.id => Some(at),
            _ => self.index.get(&row.id).copied(),
        };
        let Some(at) = at else { return Ok(()) };
        self.last = Some((row.id, at));
        let Some(v) = self.samples.get_mut(at) else { return Ok(()) };
        let (t, range) = (row.t, self.start_ms..=self.end_ms);
        if row.kind == 0 && row.data.is_empty() {
            v.push(t, row.inserted_at, row.bits);
            self.read += 1;
        } else if row.kind == 0 {
            // A histogram sample: a histogram chunk of one sample at `t`.
            self.read += v.push_chunk(row.data, row.inserted_at, |ts| ts == t, &mut self.decoded)?;
        } else {
            // A sealed chunk: its samples are as recent as its version `t`.
            self.read += v.push_chunk(row.data, t, |ts| range.contains(&ts), &mut self.decoded)?;
        }
        Ok(())
    }
}

/// A [`Querier`] over a [`ClickHouse`] store, for one request.
pub struct ClickHouseQuerier {
    store: ClickHouse,
    limits: ReadLimits,
    budget: SampleBudget,
    /// Shards left out of answers (with `partial_reads`), as warnings.
    missing: std::sync::Mutex<Vec<String>>,
    /// Whether a shard that is down may be left out (`--clickhouse-partial-reads`, unless
    /// [`ClickHouseQuerier::complete`]).
    partial: bool,
}

/// A shard's answer that cannot be read.
pub(super) fn malformed(shard: &Shard, e: impl std::fmt::Display) -> StorageError {
    StorageError::Unavailable(format!("{}: {e}", shard.url()))
}

impl ClickHouseQuerier {
    pub(super) fn new(store: ClickHouse, limits: ReadLimits) -> Self {
        let budget = SampleBudget::new(limits.max_samples);
        let partial = store.inner.config.partial_reads;
        Self { store, limits, budget, missing: std::sync::Mutex::new(Vec::new()), partial }
    }

    /// This reader, never answering partially: for answers whose format has no place for a
    /// warning (export, federation, remote read), a shard that is down fails the request.
    pub fn complete(mut self) -> Self {
        self.partial = false;
        self
    }

    /// Runs `f` on every shard in parallel; the answers in shard order. With `partial_reads`,
    /// a shard that is unavailable answers `T::default()` and is recorded as missing.
    pub(super) fn each_shard<T: Send + Default>(&self, f: impl Fn(&Shard) -> Result<T> + Sync) -> Result<Vec<T>> {
        self.each_shard_with(self.partial, f)
    }

    /// [`Self::each_shard`], partial only when `partial`.
    pub(super) fn each_shard_with<T: Send + Default>(
        &self,
        partial: bool,
        f: impl Fn(&Shard) -> Result<T> + Sync,
    ) -> Result<Vec<T>> {
        self.limits.check()?;
        let shards = &self.store.inner.shards;
        let results: Vec<Result<T>> = std::thread::scope(|scope| {
            let handles: Vec<_> = shards.iter().map(|shard| scope.spawn(|| f(shard))).collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| Err(StorageError::Unavailable("a shard read panicked".to_owned())))
                })
                .collect()
        });
        results
            .into_iter()
            .map(|r| match r {
                Err(StorageError::Unavailable(why)) if partial => {
                    let mut missing = self.missing.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                    let warning = format!("partial answer: a ClickHouse shard is missing from it ({why})");
                    if !missing.contains(&warning) {
                        missing.push(warning);
                    }
                    Ok(T::default())
                }
                other => other,
            })
            .collect()
    }

    fn days(start_ms: i64, end_ms: i64) -> String {
        format!("day >= toDate({}) AND day <= toDate({})", day_of(start_ms), day_of(end_ms))
    }

    /// Distinct values of label `name` on `shard` in the days of the range, whatever their
    /// write's fate (for regex matchers: [`Self::ids_with`] then takes only visible rows).
    fn values(&self, shard: &Shard, name: &str, start_ms: i64, end_ms: i64) -> Result<Vec<String>> {
        let sql = format!(
            "SELECT DISTINCT value FROM {} WHERE name = {} AND {} FORMAT RowBinary",
            self.store.table("postings"),
            quote(name),
            Self::days(start_ms, end_ms)
        );
        let body = shard.query(&sql)?;
        let mut r = Reader::new(&body);
        let mut out = Vec::new();
        while !r.is_empty() {
            out.push(r.str().map_err(|e| malformed(shard, e))?.to_owned());
        }
        Ok(out)
    }

    /// Distinct ids of `shard` whose label `name` takes one of `values` in the days of the range,
    /// by a settled postings row or one of a committed write (`postings.rs`).
    fn ids_with(
        &self,
        shard: &Shard,
        name: &str,
        values: &[String],
        start_ms: i64,
        end_ms: i64,
    ) -> Result<BTreeSet<u64>> {
        let mut ids = BTreeSet::new();
        // Values may be long: lists are cut by bytes, well under ClickHouse's query size limit.
        for list in in_lists(values.iter().map(|v| quote(v))) {
            ids.extend(self.store.visible_ids(shard, name, &list, &Self::days(start_ms, end_ms))?);
        }
        Ok(ids)
    }

    /// The series of `shard` matching every matcher, in the days of the range, ids ascending.
    pub(super) fn candidates(
        &self,
        shard: &Shard,
        matchers: &[Matcher],
        start_ms: i64,
        end_ms: i64,
    ) -> Result<Vec<Candidate>> {
        let mut ids: Option<BTreeSet<u64>> = None;
        // Matchers that need the label to hold a value narrow the candidates through the index;
        // with none, every series of the days is a candidate (all carry a name).
        let narrowing: Vec<&Matcher> = matchers.iter().filter(|m| !m.matches_empty()).collect();
        let every =
            [Matcher::new(MatchOp::RegexMatch, METRIC_NAME, ".+")
                .map_err(|e| StorageError::Manifest(e.to_string()))?];
        let narrowing: Vec<&Matcher> = if narrowing.is_empty() { every.iter().collect() } else { narrowing };
        for m in narrowing {
            let values = match m.op {
                MatchOp::Equal => vec![m.value.clone()],
                _ => self.values(shard, &m.name, start_ms, end_ms)?.into_iter().filter(|v| m.matches(v)).collect(),
            };
            let found = self.ids_with(shard, &m.name, &values, start_ms, end_ms)?;
            let next = match ids {
                None => found,
                Some(had) => had.intersection(&found).copied().collect(),
            };
            if next.is_empty() {
                return Ok(Vec::new());
            }
            ids = Some(next);
            self.limits.check()?;
        }
        let ids: Vec<u64> = ids.unwrap_or_default().into_iter().collect();
        let mut out: HashMap<u64, (u16, Labels)> = HashMap::new();
        for chunk in ids.chunks(IDS_PER_STATEMENT) {
            let list = chunk.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
            let sql = format!(
                "SELECT series_id, bucket, names, values FROM {} WHERE series_id IN ({list}) FORMAT RowBinary",
                self.store.table("series")
            );
            let body = shard.query(&sql)?;
            let mut r = Reader::new(&body);
            while !r.is_empty() {
                let id = r.u64().map_err(|e| malformed(shard, e))?;
                let bucket = r.u16().map_err(|e| malformed(shard, e))?;
                let names = r.strings().map_err(|e| malformed(shard, e))?;
                let values = r.strings().map_err(|e| malformed(shard, e))?;
                if out.contains_key(&id) || names.len() != values.len() {
                    continue;
                }
                let labels = Labels::from_trusted(names.iter().zip(&values).map(|(n, v)| Label::new(*n, *v)).collect());
                if matchers.iter().all(|m| m.matches(labels.get(&m.name).unwrap_or(""))) {
                    out.insert(id, (bucket, labels));
                }
            }
            self.limits.check()?;
        }
        let mut out: Vec<Candidate> =
            out.into_iter().map(|(id, (bucket, labels))| Candidate { id, bucket, labels }).collect();
        out.sort_unstable_by_key(|c| c.id);
        Ok(out)
    }

    /// The samples of `series` (ids ascending) on `shard` in `[start_ms, end_ms]`.
    fn samples(&self, shard: &Shard, series: Vec<Candidate>, start_ms: i64, end_ms: i64) -> Result<Vec<SeriesSamples>> {
        let mut out = Vec::with_capacity(series.len());
        // Half the usual ids per statement: the list appears twice in it.
        for chunk in series.chunks(IDS_PER_STATEMENT / 2) {
            let list = chunk.iter().map(|c| c.id.to_string()).collect::<Vec<_>>().join(",");
            let buckets: BTreeSet<u16> = chunk.iter().map(|c| c.bucket).collect();
            let buckets = buckets.iter().map(u16::to_string).collect::<Vec<_>>().join(",");
            let (first, last_day) = (day_of(start_ms), day_of(end_ms));
            // One statement for the sample rows and the sealed chunks (one round trip): rows of
            // kind 0 are samples (`t` the timestamp; `data` empty for a float, else the
            // histogram), of kind 1 chunks (`t` the version; `data` a float or histogram chunk).
            // No ORDER BY: ClickHouse 18.16 would sort every row, though each series' rows are
            // already nearly in order; they are grouped and put in order here instead.
            let sql = format!(
                "SELECT series_id, toUInt8(0) AS kind, ts AS t, value, inserted_at, histogram AS data, write_id \
                 FROM {} WHERE bucket IN ({buckets}) AND series_id IN ({list}) AND ts >= {start_ms} AND ts <= {end_ms} \
                 UNION ALL \
                 SELECT series_id, toUInt8(1) AS kind, version AS t, toUInt64(0) AS value, toInt64(0) AS inserted_at, data, \
                 toUInt64(0) AS write_id \
                 FROM {} WHERE bucket IN ({buckets}) AND series_id IN ({list}) AND day >= {first} AND day <= {last_day} \
                 FORMAT RowBinary",
                self.store.table("samples"),
                self.store.table("chunks")
            );
            let body = shard.query(&sql)?;
            let mut gather = Gather::new(chunk, start_ms, end_ms);
            // Rows of writes spanning shards are taken only when committed (`commit.rs`). At
            // the first row of a write id this node has not decided, the rest of the rows are
            // scanned for every such write id and their coordinators asked once; the rows are
            // then taken in the order read.
            let mut fates: HashMap<u64, bool> = HashMap::new();
            // The last row's write id and whether it is visible (rows of one write come together).
            let mut last = (0, true);
            let mut r = Reader::new(&body);
            while !r.is_empty() {
                let from = r.clone();
                let row = ReadRow::read(&mut r).map_err(|e| malformed(shard, e))?;
                if row.write_id != last.0 {
                    let fate = match fates.get(&row.write_id).copied().or_else(|| self.store.decided(row.write_id)) {
                        Some(fate) => fate,
                        None => self.decide_from(shard, from, &mut fates, row.write_id)?,
                    };
                    fates.insert(row.write_id, fate);
                    last = (row.write_id, fate);
                }
                if last.1 {
                    gather.push(&row)?;
                }
            }
            let (samples, read) = (gather.samples, gather.read);
            for (c, samples) in chunk.iter().zip(samples) {
                // Samples of one timestamp: a retried insert or a seal not merged yet (equal
                // values), a late write over a sealed sample, a histogram over a float or the
                // reverse, or two samples of one series and time in one write (a part holds them
                // in write order): the most recent wins, whatever its kind.
                let resolved = samples.resolve();
                out.push(SeriesSamples {
                    labels: c.labels.clone(),
                    samples: resolved.samples,
                    histograms: resolved.histograms,
                });
            }
            self.budget.take(read)?;
            self.limits.check()?;
        }
        Ok(out)
    }

    /// The start timestamps of `series` on `shard` in `[start_ms, end_ms]`, as change points:
    /// the `starts` table holds one row per sample that has one, so each row is a change point
    /// followed, unless the next row is the next millisecond, by one back to none.
    fn starts(&self, shard: &Shard, series: &[Candidate], start_ms: i64, end_ms: i64) -> Result<Vec<SeriesStarts>> {
        let mut out = Vec::new();
        for chunk in series.chunks(IDS_PER_STATEMENT) {
            let list = chunk.iter().map(|c| c.id.to_string()).collect::<Vec<_>>().join(",");
            let buckets: BTreeSet<u16> = chunk.iter().map(|c| c.bucket).collect();
            let buckets = buckets.iter().map(u16::to_string).collect::<Vec<_>>().join(",");
            let sql = format!(
                "SELECT series_id, ts, start, write_id FROM {} WHERE bucket IN ({buckets}) AND series_id IN ({list}) \
                 AND ts >= {start_ms} AND ts <= {end_ms} FORMAT RowBinary",
                self.store.table("starts")
            );
            let body = shard.query(&sql)?;
            let mut r = Reader::new(&body);
            let mut found: Vec<(u64, i64, i64, u64)> = Vec::new();
            // `starts` has no `inserted_at`: a write id not committed is never remembered as
            // aborted from here (its `samples` rows, read by queries, decide that).
            let mut seen = SeenIds::default();
            while !r.is_empty() {
                let id = r.u64().map_err(|e| malformed(shard, e))?;
                let ts = r.i64().map_err(|e| malformed(shard, e))?;
                let start = r.i64().map_err(|e| malformed(shard, e))?;
                let write_id = r.u64().map_err(|e| malformed(shard, e))?;
                seen.note(write_id, i64::MAX);
                found.push((id, ts, start, write_id));
            }
            let visible = self.store.visible(&seen, crate::storage::now_ms())?;
            let mut rows: HashMap<u64, Vec<(i64, i64)>> = HashMap::new();
            for (id, ts, start, write_id) in found {
                if start != 0 && visible.contains(write_id) {
                    rows.entry(id).or_default().push((ts, start));
                }
            }
            for c in chunk {
                let Some(mut found) = rows.remove(&c.id) else { continue };
                // Rows not merged yet (a retried insert) repeat a timestamp: one is kept.
                found.sort_unstable();
                found.dedup_by_key(|(ts, _)| *ts);
                let mut changes = Vec::with_capacity(found.len() * 2);
                for (i, &(ts, start)) in found.iter().enumerate() {
                    changes.push(StartChange { timestamp_ms: ts, start_ms: start });
                    let next = found.get(i + 1).map(|&(t, _)| t);
                    if next != Some(ts.saturating_add(1)) {
                        changes.push(StartChange { timestamp_ms: ts.saturating_add(1), start_ms: 0 });
                    }
                }
                out.push(SeriesStarts { labels: c.labels.clone(), changes });
            }
            self.limits.check()?;
        }
        Ok(out)
    }

    /// Whether the rows of `write_id` are visible, deciding it, with every write id of the rows
    /// left in `rest` (from that row on) that this node has not decided, into `fates`: the
    /// coordinators are asked about the undecided ones together.
    fn decide_from(
        &self,
        shard: &Shard,
        mut rest: Reader<'_>,
        fates: &mut HashMap<u64, bool>,
        write_id: u64,
    ) -> Result<bool> {
        let mut undecided = SeenIds::default();
        let mut last = None;
        while !rest.is_empty() {
            let row = ReadRow::read(&mut rest).map_err(|e| malformed(shard, e))?;
            if last == Some(row.write_id) || fates.contains_key(&row.write_id) {
                continue;
            }
            last = Some(row.write_id);
            match self.store.decided(row.write_id) {
                Some(fate) => {
                    fates.insert(row.write_id, fate);
                }
                None => undecided.note(row.write_id, row.inserted_at),
            }
        }
        let visible = self.store.visible(&undecided, crate::storage::now_ms())?;
        for id in undecided.ids() {
            // Not committed yet: left out of this read (a later one asks again).
            fates.insert(id, visible.contains(id));
        }
        Ok(fates.get(&write_id).copied().unwrap_or(false))
    }

    fn labels_of_all(&self, matchers: &[Matcher], start_ms: i64, end_ms: i64) -> Result<Vec<Labels>> {
        let per_shard = self.each_shard(|shard| self.candidates(shard, matchers, start_ms, end_ms))?;
        Ok(per_shard.into_iter().flatten().map(|c| c.labels).collect())
    }
}

impl Querier for ClickHouseQuerier {
    fn cancellation(&self) -> Option<Arc<AtomicBool>> {
        self.limits.cancel.clone()
    }

    fn warnings(&self) -> Vec<String> {
        self.missing.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    fn select(
        &self,
        matchers: &[Matcher],
        start_ms: i64,
        end_ms: i64,
        map: Option<SeriesMap<'_>>,
    ) -> Result<Vec<SeriesSamples>> {
        let per_shard = self.each_shard(|shard| {
            let series = self.candidates(shard, matchers, start_ms, end_ms)?;
            let mut found = self.samples(shard, series, start_ms, end_ms)?;
            found.retain(|s| !s.samples.is_empty() || !s.histograms.is_empty());
            if let Some(map) = map {
                found.iter_mut().for_each(map);
            }
            Ok(found)
        })?;
        Ok(per_shard.into_iter().flatten().collect())
    }

    fn for_each_series(
        &self,
        matchers: &[Matcher],
        start_ms: i64,
        end_ms: i64,
        f: &mut dyn FnMut(SeriesSamples) -> bool,
    ) -> Result<()> {
        for s in self.select(matchers, start_ms, end_ms, None)? {
            if !f(s) {
                break;
            }
        }
        Ok(())
    }

    fn start_timestamps(&self, matchers: &[Matcher], start_ms: i64, end_ms: i64) -> Result<Vec<SeriesStarts>> {
        let per_shard = self.each_shard(|shard| {
            let series = self.candidates(shard, matchers, start_ms, end_ms)?;
            if series.is_empty() {
                return Ok(Vec::new());
            }
            self.starts(shard, &series, start_ms, end_ms)
        })?;
        Ok(per_shard.into_iter().flatten().collect())
    }

    fn series(&self, matchers: &[Matcher], start_ms: i64, end_ms: i64, limit: Option<usize>) -> Result<Vec<Labels>> {
        let mut out = self.labels_of_all(matchers, start_ms, end_ms)?;
        out.sort();
        out.truncate(limit.unwrap_or(usize::MAX));
        Ok(out)
    }

    fn label_names(
        &self,
        matchers: &[Matcher],
        start_ms: i64,
        end_ms: i64,
        limit: Option<usize>,
    ) -> Result<Vec<String>> {
        let names: BTreeSet<String> = self
            .labels_of_all(matchers, start_ms, end_ms)?
            .iter()
            .flat_map(|l| l.iter().map(|l| l.name.clone()).collect::<Vec<_>>())
            .collect();
        Ok(names.into_iter().take(limit.unwrap_or(usize::MAX)).collect())
    }

    fn label_values(
        &self,
        name: &str,
        matchers: &[Matcher],
        start_ms: i64,
        end_ms: i64,
        limit: Option<usize>,
    ) -> Result<Vec<String>> {
        let values: BTreeSet<String> = if matchers.is_empty() {
            let days = Self::days(start_ms, end_ms);
            self.each_shard(|shard| self.store.visible_values(shard, name, &days))?.into_iter().flatten().collect()
        } else {
            self.labels_of_all(matchers, start_ms, end_ms)?
                .iter()
                .filter_map(|l| l.get(name).map(str::to_owned))
                .collect()
        };
        Ok(values.into_iter().filter(|v| !v.is_empty()).take(limit.unwrap_or(usize::MAX)).collect())
    }
}
