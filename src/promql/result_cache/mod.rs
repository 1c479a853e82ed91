//! The query result cache: per-step answers of range queries for the part of their range that
//! reads only the settled past (before the sealed windows' end or five minutes ago, see
//! `storage/immutable.rs`), so that a dashboard's repeated range query evaluates only its new
//! steps.
//!
//! - **Key**: the query text as sent (dashboards repeat it byte for byte; a normalized print of
//!   the tree could merge texts that differ), the step, the start's phase on the step grid
//!   (`start mod step`: only then do two ranges share steps) and the lookback delta.
//! - **Entry**: the answer's series for one contiguous run of steps `[first, last]`, sorted by
//!   labels as the evaluator sorts them, the annotations raised computing them, and the
//!   storage generation they were computed under. An entry is used only while the querier
//!   reports the same generation ([`crate::storage::Querier::immutable_before`]).
//! - **Cacheable steps**: a step `t` reads data up to `t + ahead` (see [`reach`]); it is kept
//!   when that lies before the boundary. Queries whose steps depend on the query's start and
//!   end (`@`, `range()`) are never kept.
//! - **A request** answers its steps from the entry where it overlaps and evaluates the rest
//!   with the evaluator: the steps before the cached run in one call, everything after it in
//!   another, cut at the boundary (a first call is one evaluation, as without the cache). It
//!   joins the runs by label set and stores the cacheable run it now holds when it evaluated
//!   any of it. Annotations are the union of the parts' (an entry's apply to its whole run,
//!   also when a request uses part of it); an evaluation that crosses the boundary and raised
//!   annotations is followed by one of its kept steps alone, for the entry's, unless every one
//!   of them holds for every step (a downsampled tier's info).
//! - **Memory**: bounded by bytes (`--query-result-cache-size`), entries weighed by their points
//!   and label sets; one entry may take at most an eighth.

mod reach;
mod splice;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::annotations::Annotations;
use super::engine::{parse_at, QueryResult};
use super::error::{EvalError, Result};
use super::footprint;
use super::value::{RangeSeries, Value};

/// Default of `--query-result-cache-size`: 128 MiB.
pub const DEFAULT_BYTES: u64 = 128 << 20;

/// The largest share of the budget one entry may take.
const MAX_SHARE: u64 = 8;

/// A range query as the cache sees it.
#[derive(Clone, Copy, Debug)]
pub struct RangeRequest<'a> {
    /// The tenants the query reads (their names, as `Scope::name` gives them): answers are
    /// kept per scope.
    pub scope: &'a str,
    /// The query text.
    pub query: &'a str,
    /// First step (ms).
    pub start_ms: i64,
    /// Last step or past it (ms).
    pub end_ms: i64,
    /// Step (ms, positive).
    pub step_ms: i64,
    /// The lookback delta the query is evaluated with.
    pub lookback_ms: i64,
}

/// How a request went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// Some steps came from the cache.
    Hit,
    /// Steps could be cached, none were held.
    Miss,
    /// No step could be cached (nothing sealed, a pinned query, or all steps too recent).
    Uncacheable,
}

/// What a request took from the cache and what it evaluated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// Hit, miss or neither.
    pub lookup: Lookup,
    /// Steps answered from the cache.
    pub cached_steps: u64,
    /// Steps evaluated.
    pub evaluated_steps: u64,
}

/// Counters and sizes for `/metrics`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Figures {
    /// Requests with steps answered from the cache.
    pub hits: u64,
    /// Requests that could have been, but found nothing held.
    pub misses: u64,
    /// Steps answered from the cache.
    pub steps_cached: u64,
    /// Steps evaluated by requests that looked in the cache.
    pub steps_evaluated: u64,
    /// Bytes of the entries held.
    pub bytes: u64,
    /// Entries held.
    pub entries: u64,
}

#[derive(Clone, PartialEq, Eq, Hash)]
struct Key {
    scope: Box<str>,
    query: Box<str>,
    step_ms: i64,
    phase_ms: i64,
    lookback_ms: i64,
}

impl Key {
    fn of(r: &RangeRequest<'_>) -> Self {
        Self {
            scope: r.scope.into(),
            query: r.query.into(),
            step_ms: r.step_ms,
            phase_ms: r.start_ms.rem_euclid(r.step_ms),
            lookback_ms: r.lookback_ms,
        }
    }
}

/// The answer for the steps `first_ms..=last_ms` (see the module doc).
struct Entry {
    generation: u64,
    first_ms: i64,
    last_ms: i64,
    series: Vec<RangeSeries>,
    annotations: Annotations,
}

#[derive(Clone)]
struct Weight;

impl quick_cache::Weighter<Key, Arc<Entry>> for Weight {
    fn weight(&self, key: &Key, entry: &Arc<Entry>) -> u64 {
        (key.scope.len() + key.query.len() + entry_bytes(&entry.series, &entry.annotations)) as u64
    }
}

fn entry_bytes(series: &[RangeSeries], annotations: &Annotations) -> usize {
    let points: usize = series
        .iter()
        .map(|s| {
            std::mem::size_of::<RangeSeries>()
                + footprint::labels_heap_bytes(&s.labels)
                + s.samples.len() * footprint::SAMPLE_BYTES
                + footprint::histograms_bytes(&s.histograms)
        })
        .sum();
    let notes: usize = annotations.iter().map(|a| a.message.len() + 32).sum();
    points + notes + 160
}

/// The cache (see the module doc).
pub struct ResultCache {
    entries: quick_cache::sync::Cache<Key, Arc<Entry>, Weight>,
    max_entry: u64,
    hits: AtomicU64,
    misses: AtomicU64,
    steps_cached: AtomicU64,
    steps_evaluated: AtomicU64,
}

impl ResultCache {
    /// A cache holding entries of at most `bytes` in all.
    pub fn new(bytes: u64) -> Self {
        let items = usize::try_from(bytes / 16_384).unwrap_or(usize::MAX).max(16);
        // One shard: quick_cache splits the budget among its shards (4 per core by default) and
        // refuses an entry heavier than one shard's share, which on 32 cores would have been
        // 1/128 of the budget. A range query looks up and stores once: no lock to spread.
        let options = quick_cache::OptionsBuilder::new()
            .estimated_items_capacity(items)
            .weight_capacity(bytes.max(1))
            .shards(1)
            .build();
        let entries = match options {
            Ok(o) => quick_cache::sync::Cache::with_options(o, Weight, Default::default(), Default::default()),
            Err(_) => quick_cache::sync::Cache::with_weighter(items, bytes.max(1), Weight),
        };
        Self {
            entries,
            max_entry: bytes / MAX_SHARE,
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            steps_cached: AtomicU64::new(0),
            steps_evaluated: AtomicU64::new(0),
        }
    }

    /// Counters and sizes.
    pub fn figures(&self) -> Figures {
        Figures {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            steps_cached: self.steps_cached.load(Ordering::Relaxed),
            steps_evaluated: self.steps_evaluated.load(Ordering::Relaxed),
            bytes: self.entries.weight(),
            entries: self.entries.len() as u64,
        }
    }

    /// Answers the range query `r` from held steps and `evaluate(first_ms, last_ms)` (the
    /// evaluator over a sub-range of `r`'s steps, with `r`'s step), keeping what may be kept.
    /// `immutable` is the querier's [`crate::storage::Querier::immutable_before`], asked before
    /// anything is read.
    ///
    /// Everything after the held steps is evaluated in one call and cut at the boundary, so that
    /// a first call costs one evaluation as without the cache, plus the copy it keeps. Only when
    /// that evaluation raised annotations (other than ones holding for every step, see
    /// [`super::annotations::Annotation::every_step`]) and crosses the boundary is the kept part
    /// evaluated again on its own: an entry must hold the annotations of its steps and no others.
    ///
    /// # Errors
    /// Those of `evaluate` (nothing is stored then).
    pub fn range(
        &self,
        r: &RangeRequest<'_>,
        immutable: Option<(i64, u64)>,
        evaluate: &mut dyn FnMut(i64, i64) -> Result<QueryResult>,
    ) -> Result<(QueryResult, Outcome)> {
        let step = r.step_ms;
        let steps = |first: i64, last: i64| u64::try_from((last - first) / step + 1).unwrap_or(0);
        let total = steps(r.start_ms, r.end_ms);
        let Some((last, generation)) = immutable.and_then(|(before, g)| Some((last_cacheable(r, before)?, g))) else {
            let result = evaluate(r.start_ms, r.end_ms)?;
            return Ok((result, Outcome { lookup: Lookup::Uncacheable, cached_steps: 0, evaluated_steps: total }));
        };
        let key = Key::of(r);
        let held = match self.entries.get(&key) {
            Some(e) if e.generation == generation => Some(e),
            Some(_) => {
                self.entries.remove(&key);
                None
            }
            None => None,
        };
        let overlap = held.as_ref().and_then(|e| {
            let (lo, hi) = (r.start_ms.max(e.first_ms), last.min(e.last_ms));
            (lo <= hi).then_some((e, lo, hi))
        });
        let mut parts = Parts::default();
        // The held run, and the kept steps evaluated before it.
        let (mut kept_runs, mut kept_notes, rest_from) = match overlap {
            Some((e, lo, hi)) => {
                let mut notes = Annotations::default();
                let mut runs = Vec::new();
                if lo > r.start_ms {
                    let (series, n) = parts.evaluate(evaluate, r.start_ms, lo - step)?;
                    runs.push(series);
                    notes.merge(n);
                }
                runs.push(splice::slice(&e.series, lo, hi));
                notes.merge(e.annotations.clone());
                (runs, notes, hi + step)
            }
            None => (Vec::new(), Annotations::default(), r.start_ms),
        };
        let evaluated_kept = rest_from <= last || overlap.is_some_and(|(_, lo, _)| lo > r.start_ms);
        // The rest in one evaluation: kept steps up to `last`, then the recent ones.
        let mut recent = Vec::new();
        let mut recent_notes = Annotations::default();
        if rest_from <= r.end_ms {
            let (series, notes) = parts.evaluate(evaluate, rest_from, r.end_ms)?;
            if last < rest_from {
                recent = series;
                recent_notes = notes;
            } else if last >= r.end_ms || notes.all_every_step() {
                // No annotation, or only ones that hold for every step (how the data was read):
                // both parts carry them.
                let (early, late) = splice::split(series, last);
                kept_runs.push(early);
                recent = late;
                if last < r.end_ms {
                    recent_notes = notes.clone();
                }
                kept_notes.merge(notes);
            } else {
                // Which steps raised the annotations is not known: the kept part again, alone.
                let (kept, notes_kept) = parts.evaluate(evaluate, rest_from, last)?;
                kept_runs.push(kept);
                kept_notes.merge(notes_kept);
                recent = splice::split(series, last).1;
                recent_notes = notes;
            }
        }
        let kept = splice::join(kept_runs);
        if evaluated_kept {
            self.store(
                key,
                Entry {
                    generation,
                    first_ms: r.start_ms,
                    last_ms: last,
                    series: kept.clone(),
                    annotations: kept_notes.clone(),
                },
            );
        }
        let cached = overlap.map_or(0, |(_, lo, hi)| steps(lo, hi));
        let outcome = Outcome {
            lookup: if cached > 0 { Lookup::Hit } else { Lookup::Miss },
            cached_steps: cached,
            evaluated_steps: total - cached,
        };
        let counter = if cached > 0 { &self.hits } else { &self.misses };
        counter.fetch_add(1, Ordering::Relaxed);
        self.steps_cached.fetch_add(outcome.cached_steps, Ordering::Relaxed);
        self.steps_evaluated.fetch_add(outcome.evaluated_steps, Ordering::Relaxed);
        let value = Value::Matrix(splice::join(vec![kept, recent]));
        let mut annotations = kept_notes;
        annotations.merge(recent_notes);
        let result = QueryResult {
            // The parts were held one after the other; the answer assembled from them at once.
            peak_samples: parts.peak.max(value.points()),
            value,
            annotations,
            stats: None,
            loaded_samples: parts.loaded,
        };
        Ok((result, outcome))
    }

    fn store(&self, key: Key, entry: Entry) {
        let bytes = (key.scope.len() + key.query.len() + entry_bytes(&entry.series, &entry.annotations)) as u64;
        if bytes <= self.max_entry {
            self.entries.insert(key, Arc::new(entry));
        }
    }
}

/// What a request's evaluations read and held, summed over its parts.
#[derive(Default)]
struct Parts {
    loaded: usize,
    peak: usize,
}

impl Parts {
    /// The series and annotations of `evaluate(first_ms, last_ms)`.
    fn evaluate(
        &mut self,
        evaluate: &mut dyn FnMut(i64, i64) -> Result<QueryResult>,
        first_ms: i64,
        last_ms: i64,
    ) -> Result<(Vec<RangeSeries>, Annotations)> {
        let r = evaluate(first_ms, last_ms)?;
        let Value::Matrix(series) = r.value else {
            return Err(EvalError::exec("BUG: a range query answered with something else than a matrix"));
        };
        self.loaded = self.loaded.saturating_add(r.loaded_samples);
        self.peak = self.peak.max(r.peak_samples);
        Ok((series, r.annotations))
    }
}

/// The last step of `r` whose reads all lie before `before`, when there is one and `r`'s steps
/// depend on nothing but their time and the data.
fn last_cacheable(r: &RangeRequest<'_>, before: i64) -> Option<i64> {
    let span = r.end_ms.checked_sub(r.start_ms)?;
    let expr = parse_at(r.query, r.step_ms, span).ok()?;
    // `range()` folds into the text as the query's span: such a query is kept by nobody.
    if parse_at(r.query, r.step_ms, span.saturating_add(r.step_ms)).ok()? != expr {
        return None;
    }
    let ahead = reach::ahead_ms(&expr, r.lookback_ms)?;
    let limit = before.saturating_sub(1).saturating_sub(ahead).min(r.end_ms);
    (limit >= r.start_ms).then(|| r.start_ms + (limit - r.start_ms) / r.step_ms * r.step_ms)
}

#[cfg(test)]
mod tests;
