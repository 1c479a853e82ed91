//! Step evaluation: one [`Query`] holds the series preloaded for every selector and evaluates
//! expression nodes at one timestamp at a time. Range queries call [`Query::eval`] per step;
//! subqueries call it per inner step.
//!
//! The evaluator walks the tree: selectors and subqueries here, function calls in `calls.rs`,
//! aggregations and binary operators in `operators.rs`, the series-major paths of range
//! queries in `grid.rs`, the shapes of expressions it recognises in `shape.rs`. It hands values
//! to `functions/`, which compute, and is their [`Context`].

mod calls;
mod grid;
mod intake;
mod operators;
mod shape;
pub mod tiers;

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use promql_parser::parser::{AtModifier, Expr, MatrixSelector, Offset, SubqueryExpr, UnaryExpr, VectorSelector};

use self::grid::{PerSeries, StepSink, Stepper};
use self::intake::Intake;
use super::annotations::Annotations;
use super::budget::Budget;
use super::engine::{deadline_after, EngineOptions};
use super::error::{EvalError, Result};
use super::extended::{self, Modifier};
use super::footprint;
use super::functions::aggr::GroupCache;
use super::functions::rollup::Rollup;
use super::functions::{native_extended, native_rollup, Context};
use super::hints;
use super::identity::{AddrMap, IdentityCache};
use super::points;
use super::positions::{Positions, Spot};
use super::step::{self, grid_time, seek, StepValues, StepWindow};
use super::value::{Elem, Point, StepValue, Window};
use crate::labels::{Labels, METRIC_NAME};
use crate::matcher::Matcher;
use crate::sample::{is_stale_marker, HistogramSample, Sample, SeriesSamples, MAX_TIMESTAMP_MS, MIN_TIMESTAMP_MS};
use crate::storage::{Querier, SampleSink, SeriesMap, SinkFactory, StartChange};

/// Step of a subquery written without one (`[5m:]`), as Prometheus' default evaluation interval.
pub const DEFAULT_SUBQUERY_STEP_MS: i64 = 60_000;

/// Shortest step at which a plain selector of a range query is reduced to its step values where
/// it is read (see [`Query::plan`]): below the longest common scrape interval, one value per
/// step per series may outnumber the samples it replaces.
const MIN_REDUCED_STEP_MS: i64 = 60_000;

/// A range-vector argument at one step: its windows and their bounds `(start, end]`.
type RangeArg = (Vec<Window>, i64, i64);

/// Inner steps of one subquery evaluation, cached by (node, timestamp) because consecutive
/// outer steps share most of their (absolutely aligned) inner steps.
type SubqueryCache = HashMap<(usize, i64), StepValue>;

/// The state of one query evaluation.
pub(crate) struct Query<'o> {
    opts: &'o EngineOptions,
    /// Query start and end (equal for instant queries); `@ start()` / `@ end()` refer to them.
    start: i64,
    end: i64,
    /// Range query step (0 for instant queries).
    interval: i64,
    /// Series loaded per selector node (keyed by the node's address, stable during the query);
    /// shared by the forks that evaluate parts of a range query in parallel.
    data: Arc<HashMap<usize, Vec<SeriesSamples>>>,
    deadline: Instant,
    /// Set when the request is abandoned (the client went away): the querier's flag, taken by
    /// [`Query::preload`].
    cancel: Option<Arc<AtomicBool>>,
    /// Samples the selectors read from storage (see [`intake`]).
    scanned: Cell<usize>,
    /// Samples the selectors keep in memory after reducing them where they are read.
    kept: Cell<usize>,
    /// Most samples held at once so far (kept, cached and in the result; see
    /// [`Query::check_samples`]), over this query and its forks.
    peak: Arc<AtomicUsize>,
    /// Bytes held by this query and its forks (loaded series, caches), against
    /// `max_memory_bytes`; see `footprint.rs`.
    held: Arc<AtomicUsize>,
    annotations: RefCell<Annotations>,
    /// Where the query's nodes start in its text (see `positions.rs`); empty when unknown.
    positions: Arc<Positions>,
    /// The node (its address) whose evaluation raises the annotations raised now: set by
    /// [`Query::within`] around each node that may raise some (0: none).
    site: Cell<usize>,
    subquery_cache: RefCell<SubqueryCache>,
    /// Per subquery node pinned by `@`: its windows, the same at every outer step (Prometheus'
    /// step-invariant evaluation), computed once instead of at every step.
    pinned_subqueries: RefCell<AddrMap<Arc<RangeArg>>>,
    /// Per subquery node: the numbers of the label sets its inner steps produced.
    subquery_ids: RefCell<AddrMap<LabelIds>>,
    cached_points: Cell<usize>,
    /// Per matrix selector node: each series' window bounds `(a, b)` (indexes into its samples)
    /// at the previous evaluation, where the next search starts.
    cursors: RefCell<AddrMap<Vec<(usize, usize)>>>,
    /// Per aggregation node: the group of each input label set.
    groups: RefCell<AddrMap<GroupCache>>,
    /// The outer steps this query (or fork) evaluates: first, count (the step is `interval`).
    part: (i64, usize),
    /// Per node (see `grid::step_vector` and `Query::aggregate_over_series`): its value at every
    /// step of `part`, computed series by series on first use; each step's value is taken once.
    rollups: RefCell<HashMap<(usize, usize), CachedSteps>>,
    /// Selector nodes whose loaded series hold, instead of samples, their expression's value at
    /// every outer step of the query (stamped with the step's time); see [`Planned::reduce`].
    stepped: Arc<HashSet<usize>>,
    /// Selector nodes of which some loaded series holds native histograms: their values take
    /// the general paths (see `points.rs`), not the float-only fast paths.
    with_histograms: Arc<HashSet<usize>>,
    /// Per selector node read by a function that uses start timestamps (`rate`, `irate`,
    /// `increase`, `resets` on a range selector, `start_timestamp` on an instant one), the
    /// change points of its series that have any (see `shape::start_nodes`). Such nodes are
    /// also in `with_histograms`, so they take the general paths, where those functions look
    /// for them.
    starts: Arc<HashMap<usize, HashMap<Labels, Vec<StartChange>>>>,
    /// Whether the preload may reduce a selector's series to per-step values as it reads them
    /// (off when the query is measured: the count reads the samples themselves, except where a
    /// downsampled tier answers, see [`TierCount`]).
    may_reduce: bool,
    /// Per selector node read from a downsampled tier by a measured query: the tier and the
    /// points each outer step's window holds, which `stats` counts as that step's samples.
    tier_counts: Arc<HashMap<usize, TierCount>>,
}

/// What a measured query's selector read from a downsampled tier (see `Query::tier_counts`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TierCount {
    /// The tier's interval.
    pub interval_ms: i64,
    /// Points in each outer step's window, summed over the series, in step order.
    pub per_step: Vec<u64>,
}

/// A selector the preload loads: its node, the selector, the time range, whether it is a range
/// selector (its windows never hold staleness markers), and the per-series expression over it,
/// when its series can be reduced to their values at the outer steps as they are read.
struct Planned<'e> {
    node: usize,
    vs: &'e VectorSelector,
    /// Matchers to select with instead of the selector's own (the info series of an `info`
    /// call, whose `vs` is its first argument's timing selector).
    matchers: Option<Vec<Matcher>>,
    lo: i64,
    hi: i64,
    in_range: bool,
    /// Set for a rollup of a range selector (no parameter, or a constant one), or a selector under
    /// an aggregation that streams its input ([`PerSeries`]), evaluated at the outer steps of a
    /// range query or at an instant query's time only (not in a subquery): nothing else reads the
    /// selector's samples. An instant query's, or a [`latest_only`](Self::latest_only) one's, is
    /// reduced only where a tier answers it.
    reduce: Option<PerSeries<'e>>,
    /// An instant vector selector evaluated at one time only (`hi`: an instant query, or a
    /// selector pinned by `@`): only its newest sample at or before `hi` is ever read (see
    /// [`Query::select_instant`]), so the others are dropped where the samples are read.
    latest_only: bool,
}

fn key<T>(node: &T) -> usize {
    node as *const T as usize
}

/// Milliseconds of a parser duration (saturating).
pub(crate) fn dur_ms(d: std::time::Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

pub(crate) fn offset_ms(o: &Option<Offset>) -> i64 {
    match o {
        None => 0,
        Some(Offset::Pos(d)) => dur_ms(*d),
        Some(Offset::Neg(d)) => -dur_ms(*d),
    }
}

fn system_time_ms(t: &SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => dur_ms(d),
        Err(e) => -dur_ms(e.duration()),
    }
}

impl<'o> Query<'o> {
    pub fn new(opts: &'o EngineOptions, start: i64, end: i64, interval: i64) -> Self {
        Self {
            opts,
            start,
            end,
            interval,
            data: Arc::new(HashMap::new()),
            deadline: deadline_after(opts.timeout),
            cancel: None,
            scanned: Cell::new(0),
            kept: Cell::new(0),
            peak: Arc::new(AtomicUsize::new(0)),
            held: Arc::new(AtomicUsize::new(0)),
            annotations: RefCell::new(Annotations::new()),
            positions: Arc::new(Positions::default()),
            site: Cell::new(0),
            subquery_cache: RefCell::new(HashMap::new()),
            pinned_subqueries: RefCell::new(AddrMap::default()),
            subquery_ids: RefCell::new(AddrMap::default()),
            cached_points: Cell::new(0),
            cursors: RefCell::new(AddrMap::default()),
            groups: RefCell::new(AddrMap::default()),
            part: (start, if interval > 0 { usize::try_from((end - start) / interval + 1).unwrap_or(0) } else { 0 }),
            rollups: RefCell::new(HashMap::new()),
            stepped: Arc::new(HashSet::new()),
            with_histograms: Arc::new(HashSet::new()),
            starts: Arc::new(HashMap::new()),
            may_reduce: true,
            tier_counts: Arc::new(HashMap::new()),
        }
    }

    /// The positions of the evaluated tree's nodes in the query text, which annotations carry
    /// (see `positions.rs`).
    pub fn set_positions(&mut self, positions: Arc<Positions>) {
        self.positions = positions;
    }

    /// Runs `f` as the evaluation of `node` (its address, see `positions::node_key`): the
    /// annotations raised meanwhile refer to it, unless a node inside sets its own.
    pub fn within<R>(&self, node: usize, f: impl FnOnce() -> R) -> R {
        let outer = self.site.replace(node);
        let r = f();
        self.site.set(outer);
        r
    }

    /// Keeps every selector's samples as read (no reduction to per-step values), for
    /// [`super::stats`].
    pub fn keep_samples(&mut self) {
        self.may_reduce = false;
    }

    /// Samples read from storage so far.
    pub fn loaded(&self) -> usize {
        self.scanned.get()
    }

    /// Most samples this query (with its forks) held at once so far: what its selectors kept,
    /// its cached step values and intermediate points, its result (counted as
    /// [`Query::check_samples`] sees them).
    pub fn peak_samples(&self) -> usize {
        self.peak.load(Ordering::Relaxed)
    }

    /// A query over the same loaded data, with fresh caches, to evaluate other steps on another
    /// thread (the caches are per thread; the results of a step do not depend on them).
    pub fn fork(&self, first_step: i64, steps: usize) -> Self {
        Self {
            part: (first_step, steps),
            rollups: RefCell::new(HashMap::new()),
            opts: self.opts,
            start: self.start,
            end: self.end,
            interval: self.interval,
            data: Arc::clone(&self.data),
            deadline: self.deadline,
            cancel: self.cancel.clone(),
            scanned: Cell::new(self.scanned.get()),
            kept: Cell::new(self.kept.get()),
            peak: Arc::clone(&self.peak),
            held: Arc::clone(&self.held),
            annotations: RefCell::new(Annotations::new()),
            positions: Arc::clone(&self.positions),
            site: Cell::new(0),
            subquery_cache: RefCell::new(HashMap::new()),
            pinned_subqueries: RefCell::new(AddrMap::default()),
            subquery_ids: RefCell::new(AddrMap::default()),
            cached_points: Cell::new(0),
            cursors: RefCell::new(AddrMap::default()),
            groups: RefCell::new(AddrMap::default()),
            stepped: Arc::clone(&self.stepped),
            with_histograms: Arc::clone(&self.with_histograms),
            starts: Arc::clone(&self.starts),
            may_reduce: self.may_reduce,
            tier_counts: Arc::clone(&self.tier_counts),
        }
    }

    pub fn into_annotations(self) -> Annotations {
        self.annotations.into_inner()
    }

    /// Raises a warning about the node being evaluated ([`Spot::Subject`]).
    pub fn warn(&self, msg: impl Into<String>) {
        self.warn_at(Spot::Subject, msg);
    }

    /// Raises a warning about `spot` of the node being evaluated, with its position.
    pub fn warn_at(&self, spot: Spot, msg: impl Into<String>) {
        let at = self.positions.of(self.site.get(), spot);
        self.annotations.borrow_mut().warn_at(at, msg);
    }

    /// Raises an info about `spot` of the node being evaluated, with its position.
    pub fn info_at(&self, spot: Spot, msg: impl Into<String>) {
        let at = self.positions.of(self.site.get(), spot);
        self.annotations.borrow_mut().info_at(at, msg);
    }

    /// Raises an info about the node being evaluated that holds for every step of the
    /// evaluation (see [`super::annotations::Annotation::every_step`]).
    pub fn info_every_step(&self, msg: impl Into<String>) {
        let at = self.positions.of(self.site.get(), Spot::Node);
        self.annotations.borrow_mut().info_every_step_at(at, msg);
    }

    /// Fails once the query is past its deadline or its request was abandoned.
    pub fn check_deadline(&self) -> Result<()> {
        if Instant::now() > self.deadline {
            return Err(EvalError::Timeout("query evaluation"));
        }
        if self.cancel.as_ref().is_some_and(|c| c.load(Ordering::Relaxed)) {
            return Err(EvalError::Storage(crate::storage::StorageError::Cancelled));
        }
        Ok(())
    }

    /// Fails when the samples held (kept by the selectors, cached step values) plus `extra`
    /// intermediate points exceed the limit; records the peak.
    pub fn check_samples(&self, extra: usize) -> Result<()> {
        let total = self.kept.get().saturating_add(extra).saturating_add(self.cached_points.get());
        self.peak.fetch_max(total, Ordering::Relaxed);
        if total > self.opts.max_samples {
            return Err(EvalError::TooManySamples("query execution"));
        }
        Ok(())
    }

    /// Counts `bytes` more as held for the rest of the query (a cache entry, loaded series).
    ///
    /// # Errors
    /// [`EvalError::TooMuchMemory`] when the query then holds more than allowed.
    pub fn hold(&self, bytes: usize, what: &'static str) -> Result<()> {
        let total = self.held.fetch_add(bytes, Ordering::Relaxed).saturating_add(bytes);
        self.check_total(total, what)
    }

    /// Counts `bytes` (counted by [`Query::hold`] before) as no longer held.
    pub fn release(&self, bytes: usize) {
        let _ = self.held.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |h| Some(h.saturating_sub(bytes)));
    }

    /// Fails when the bytes held plus `extra` transient bytes (windows being gathered, the
    /// result being assembled) exceed the limit.
    pub fn check_held(&self, extra: usize) -> Result<()> {
        self.check_total(self.held.load(Ordering::Relaxed).saturating_add(extra), "query execution")
    }

    fn check_total(&self, total: usize, what: &'static str) -> Result<()> {
        if total > self.opts.max_memory_bytes {
            return Err(EvalError::TooMuchMemory { limit: self.opts.max_memory_bytes, needed: total, what });
        }
        Ok(())
    }

    /// The time an `@` modifier pins to, if any.
    pub fn at_ms(&self, at: &Option<AtModifier>) -> Option<i64> {
        match at {
            None => None,
            Some(AtModifier::Start) => Some(self.start),
            Some(AtModifier::End) => Some(self.end),
            Some(AtModifier::At(t)) => Some(system_time_ms(t)),
        }
    }

    /// Loads, once, the series every selector of `expr` needs over the whole query.
    pub fn preload(&mut self, src: &dyn Querier, expr: &Expr) -> Result<()> {
        self.cancel = src.cancellation();
        let mut plan = Vec::new();
        // An instant query's top-level selectors are planned as a range query's outer ones: the
        // only reduction they get is a tier read over downsampled windows (`read_tier`).
        self.plan(expr, (self.start, self.end), (true, true), &mut plan);
        let steps = if self.interval > 0 {
            usize::try_from((self.end - self.start) / self.interval + 1).unwrap_or(0)
        } else {
            0
        };
        let mut stepped = HashSet::new();
        let mut with_histograms = HashSet::new();
        let start_nodes = shape::start_nodes(expr);
        let mut with_starts = HashMap::new();
        let stats_nodes: HashSet<usize> = hints::stats_selectors(expr).into_iter().collect();
        let mut tier_counts = HashMap::new();
        for Planned { node, vs, matchers, lo, hi, in_range, reduce, latest_only } in plan {
            self.check_deadline()?;
            let groups = match matchers {
                Some(ms) => vec![ms],
                None => matcher_groups(vs)?,
            };
            if start_nodes.contains(&node) {
                let found = select_starts(src, &groups, lo, hi)?;
                if !found.is_empty() {
                    with_starts.insert(node, found);
                }
            }
            let reducible = reduce.filter(|_| !with_starts.contains_key(&node));
            // A measured query counts the samples of range selectors' windows, which a reduction
            // would not keep; reduced instant selectors are counted by their step values, and
            // rollups a tier answers by the points of each step's window.
            let measured = !self.may_reduce && reducible.is_some_and(|r| !matches!(r, PerSeries::Latest(_)));
            // Histograms get the counter reset hints a query sees where they are read, before
            // a map keeps only part of them (see `hints.rs`).
            let pending = hints::Pending::default();
            let stats = stats_nodes.contains(&node);
            // What the selection keeps is counted as it is read (the held limit); what it reads
            // is counted by the storage (the scan limit) and here.
            let intake = Intake::new(
                self.opts,
                (self.kept.get().saturating_add(self.cached_points.get()), self.held.load(Ordering::Relaxed)),
                self.cancel.clone(),
            );
            let read = AtomicUsize::new(0);
            let mut from_tier = false;
            let grid = (self.start, self.interval, steps);
            // An instant query is one step at its time.
            let tier_grid = if self.interval > 0 { grid } else { (self.start, 0, 1) };
            let tiered = match reducible {
                // From a downsampled tier where one answers every step (an instant query's counts
                // are kept too, for its `stats`: its evaluation does not read windows there).
                Some(e) => {
                    let counted = measured || self.interval == 0;
                    self.read_tier(src, (node, &groups), e, tier_grid, (&intake, &read), counted)?
                }
                None => None,
            };
            // What the rest of the load sees: reduced, from a tier or as read (a selector read at
            // one time, an instant query's above all, reduces nothing else).
            let reduce = if tiered.is_some() {
                reducible
            } else {
                reducible.filter(|_| !measured && self.interval > 0 && !latest_only)
            };
            let series = match (tiered, reduce) {
                (Some((series, count)), _) => {
                    stepped.insert(node);
                    from_tier = true;
                    if let Some(count) = count {
                        tier_counts.insert(node, count);
                    }
                    series
                }
                (None, Some(e)) => {
                    let stepper = e.stepper(self);
                    // Reduced as the samples are decoded, while they are in cache: series of
                    // floats through a sink; the few with histograms, read whole, here.
                    let sink =
                        || -> Box<dyn SampleSink + '_> { Box::new(StepSink::new(stepper, grid, in_range, &read)) };
                    let map = |s: &mut SeriesSamples| {
                        if !s.histograms.is_empty() {
                            read.fetch_add(s.samples.len() + s.histograms.len(), Ordering::Relaxed);
                            pending.derive(s);
                            if stats {
                                hints::detect_unknown(s);
                            }
                            stepper.reduce(s, grid, in_range);
                        }
                        intake.admit(s);
                    };
                    let series = intake.finish(select_reduced(src, &groups, (lo, hi), &sink, &map))?;
                    stepped.insert(node);
                    series
                }
                (None, None) => {
                    // Selected samples are in `(lo, hi]`: the newest is the last one.
                    let map = |s: &mut SeriesSamples| {
                        read.fetch_add(s.samples.len() + s.histograms.len(), Ordering::Relaxed);
                        pending.derive(s);
                        if stats {
                            hints::detect_unknown(s);
                        }
                        if latest_only {
                            points::keep_newest(s);
                            pending.forget_unless_first_kept(s);
                        } else if s.samples.capacity() > s.samples.len() + s.samples.len() / 8 {
                            // Reads grow their vectors by doubling: the spare room goes back
                            // here, one series at a time, not once every series is read.
                            s.samples.shrink_to_fit();
                        }
                        intake.admit(s);
                    };
                    intake.finish(select_series(src, &groups, lo, hi, Some(&map)))?
                }
            };
            if !from_tier {
                self.within(node, || self.warn_downsampled(src, vs, (lo, hi)));
            }
            let mut series = series;
            let n = read.into_inner();
            let kept: usize = series.iter().map(|s| s.samples.len() + s.histograms.len()).sum();
            let pending = pending.into_inner();
            if !pending.is_empty() {
                self.resolve_first_hints(src, &groups, lo, &mut series, &pending)?;
            }
            drop(pending);
            self.scanned.set(self.scanned.get().saturating_add(n));
            if self.scanned.get() > self.opts.max_scanned_samples {
                return Err(EvalError::TooManyScanned { limit: self.opts.max_scanned_samples });
            }
            self.kept.set(self.kept.get().saturating_add(kept));
            self.check_samples(0)?;
            // Merged reads grow their vectors by doubling: give back the spare room, which would
            // otherwise be held (and counted) for the whole query.
            for s in series.iter_mut().filter(|s| s.samples.capacity() > s.samples.len() + s.samples.len() / 8) {
                s.samples.shrink_to_fit();
            }
            self.hold(series.iter().map(footprint::series_bytes).sum(), "loading series")?;
            if in_range && reduce.is_none() {
                // Range windows never contain staleness markers: drop them once here, so
                // windows can be borrowed from the loaded samples.
                series.iter_mut().for_each(SeriesSamples::drop_stale_markers);
                series.iter_mut().for_each(points::drop_stale_histograms);
            }
            if in_range || reduce.is_some() {
                series.retain(|s| !s.samples.is_empty() || !s.histograms.is_empty());
            }
            if series.iter().any(|s| !s.histograms.is_empty()) || with_starts.contains_key(&node) {
                with_histograms.insert(node);
            }
            Arc::make_mut(&mut self.data).insert(node, series);
        }
        self.stepped = Arc::new(stepped);
        self.with_histograms = Arc::new(with_histograms);
        self.starts = Arc::new(with_starts);
        self.tier_counts = Arc::new(tier_counts);
        Ok(())
    }

    /// Gives the first histogram of each series in `pending` (with its timestamp) the hint it
    /// reads with after the point right before it, looked for in the lookback delta before
    /// the selection's `(lo, ..]` (see `hints.rs`).
    fn resolve_first_hints(
        &self,
        src: &dyn Querier,
        groups: &[Vec<Matcher>],
        lo: i64,
        series: &mut [SeriesSamples],
        pending: &HashMap<Labels, i64>,
    ) -> Result<()> {
        let newest = points::keep_newest;
        let before = select_series(src, groups, lo.saturating_sub(self.opts.lookback_ms), lo, Some(&newest))?;
        let before: HashMap<&Labels, &SeriesSamples> = before.iter().map(|s| (&s.labels, s)).collect();
        for s in series.iter_mut() {
            let Some(&t) = pending.get(&s.labels) else { continue };
            // After `keep_newest`, a series holds one point: a float or a histogram.
            let prev = before.get(&s.labels).filter(|b| b.samples.is_empty()).and_then(|b| b.histograms.last());
            hints::resolve_first(s, t, prev.map(|p| p.histogram.as_ref()));
        }
        Ok(())
    }

    /// What a measured query read for `vs` from a downsampled tier, if it did.
    pub fn tier_count(&self, vs: &VectorSelector) -> Option<&TierCount> {
        self.tier_counts.get(&key(vs))
    }

    /// What the query's selectors read from downsampled tiers: per tier interval (ascending),
    /// the points read, when it is measured.
    pub fn tiers_read(&self) -> Vec<(i64, u64)> {
        let mut out: Vec<(i64, u64)> = Vec::new();
        for c in self.tier_counts.values() {
            let points = c.per_step.iter().sum::<u64>();
            match out.iter_mut().find(|(i, _)| *i == c.interval_ms) {
                Some((_, n)) => *n = n.saturating_add(points),
                None => out.push((c.interval_ms, points)),
            }
        }
        out.sort_unstable();
        out
    }

    /// Whether the series loaded for `vs` hold step values (see [`Planned::reduce`]).
    pub fn is_stepped(&self, vs: &VectorSelector) -> bool {
        self.stepped.contains(&key(vs))
    }

    /// The start timestamps of the series loaded for `vs`, by labels, when `vs` is read by a
    /// function that uses them and some of its series have any.
    pub fn starts_of(&self, vs: &VectorSelector) -> Option<&HashMap<Labels, Vec<StartChange>>> {
        self.starts.get(&key(vs))
    }

    /// Whether some series loaded for `vs` holds native histograms (or start timestamps, see
    /// [`Query::starts_of`]).
    pub fn has_histograms(&self, vs: &VectorSelector) -> bool {
        self.with_histograms.contains(&key(vs))
    }

    /// Collects every selector under `e`, evaluated at times in `[lo, hi]`; `outer` when those
    /// are the outer steps of a range query (not inside a subquery), `values` when, moreover,
    /// `e`'s value is only ever read through [`Query::eval`] at those steps (nothing reads its
    /// samples' own timestamps, as `timestamp` does): a plain selector there is reduced to its
    /// values at the steps where it is read ([`PerSeries::Latest`]) when the step is at least
    /// [`MIN_REDUCED_STEP_MS`], so a range query over a long range holds a point per step per
    /// series, not every sample (and, read at one time only, where a tier answers it).
    fn plan<'e>(&self, e: &'e Expr, (lo, hi): (i64, i64), (outer, values): (bool, bool), out: &mut Vec<Planned<'e>>) {
        match e {
            Expr::VectorSelector(vs) => {
                let (a, b) = self.shifted(&vs.at, &vs.offset, lo, hi);
                let lo = a.saturating_sub(self.opts.lookback_ms);
                // A smoothed value interpolates towards the next sample, up to the lookback ahead.
                let ahead = if extended::of(vs) == Some(Modifier::Smoothed) { self.opts.lookback_ms } else { 0 };
                let hi = b.saturating_add(ahead);
                let latest_only = a == b && ahead == 0;
                let coarse = self.interval >= MIN_REDUCED_STEP_MS;
                // A selector read at one time only (an instant query's, or one pinned by `@`) is
                // planned as reduced too, but only a tier read over downsampled windows reduces
                // it (`read_tier`): raw samples are read for its newest one alone.
                let reduce = PerSeries::of(e).filter(|_| outer && values && (coarse || latest_only));
                out.push(Planned { node: key(vs), vs, matchers: None, lo, hi, in_range: false, reduce, latest_only });
            }
            Expr::MatrixSelector(ms) => {
                let (a, b) = self.shifted(&ms.vs.at, &ms.vs.offset, lo, hi);
                let (before, after) = self.extended_reach(&ms.vs);
                let lo = a.saturating_sub(dur_ms(ms.range)).saturating_sub(before);
                let hi = b.saturating_add(after);
                out.push(Planned {
                    node: key(&ms.vs),
                    vs: &ms.vs,
                    matchers: None,
                    lo,
                    hi,
                    in_range: true,
                    reduce: None,
                    latest_only: false,
                });
            }
            Expr::Subquery(sq) => {
                let (a, b) = self.shifted(&sq.at, &sq.offset, lo, hi);
                self.plan(&sq.expr, (a.saturating_sub(dur_ms(sq.range)), b), (false, false), out);
            }
            Expr::Aggregate(a) => {
                let streamed = PerSeries::of(&a.expr).filter(|_| outer && operators::streams_input(a));
                let before = out.len();
                self.plan(&a.expr, (lo, hi), (outer, values), out);
                if let (Some(input @ PerSeries::Latest(_)), true) = (streamed, out.len() == before + 1) {
                    if let Some(last) = out.last_mut() {
                        last.reduce = Some(input);
                    }
                }
                if let Some(p) = &a.param {
                    self.plan(p, (lo, hi), (outer, values), out);
                }
            }
            Expr::Unary(u) => self.plan(&u.expr, (lo, hi), (outer, values), out),
            Expr::Binary(b) => {
                self.plan(&b.lhs, (lo, hi), (outer, values), out);
                self.plan(&b.rhs, (lo, hi), (outer, values), out);
            }
            Expr::Paren(p) => self.plan(&p.expr, (lo, hi), (outer, values), out),
            Expr::Call(c) if c.func.name == "info" => {
                // The first argument as usual; the second selects info series, loaded here.
                let args = c.args.args.as_slice();
                if let Some(first) = args.first() {
                    self.plan(first, (lo, hi), (outer, false), out);
                }
                let info = calls::info_selection(args).ok();
                let timing = args.first().and_then(|a| shape::info_timing(a));
                if let (Some(info), Some(timing), Some(node)) = (info, timing, shape::info_node(args)) {
                    let vs = timing.vs;
                    let (a, b) = match self.at_ms(timing.at) {
                        Some(t) => (t, t),
                        None => (lo, hi),
                    };
                    let (a, b) = (a.saturating_sub(timing.offset_ms), b.saturating_sub(timing.offset_ms));
                    let lo = a.saturating_sub(self.opts.lookback_ms);
                    let matchers = Some(info.matchers());
                    out.push(Planned {
                        node,
                        vs,
                        matchers,
                        lo,
                        hi: b,
                        in_range: false,
                        reduce: None,
                        latest_only: false,
                    });
                }
            }
            Expr::Call(c) => {
                let before = out.len();
                let values = values && shape::reads_values_only(c.func.name);
                c.args.args.iter().for_each(|a| self.plan(a, (lo, hi), (outer, values), out));
                let rollup = PerSeries::of(e)
                    .or_else(|| shape::absent_over_range(e).map(|ms| PerSeries::Rollup(Rollup::Present, ms, None)));
                if let Some(rollup @ PerSeries::Rollup(..)) = rollup.filter(|_| outer) {
                    // The call's only selector is its range argument.
                    if out.len() == before + 1 {
                        if let Some(last) = out.last_mut() {
                            last.reduce = Some(rollup);
                        }
                    }
                }
            }
            _ => {}
        }
    }

    /// How far before and after its window a range selector reads: the lookback delta before
    /// for `anchored` and `smoothed`, and after for `smoothed` (see `extended.rs`).
    pub fn extended_reach(&self, vs: &VectorSelector) -> (i64, i64) {
        match extended::of(vs) {
            None => (0, 0),
            Some(Modifier::Anchored) => (self.opts.lookback_ms, 0),
            Some(Modifier::Smoothed) => (self.opts.lookback_ms, self.opts.lookback_ms),
        }
    }

    fn shifted(&self, at: &Option<AtModifier>, off: &Option<Offset>, lo: i64, hi: i64) -> (i64, i64) {
        let o = offset_ms(off);
        match self.at_ms(at) {
            Some(t) => (t.saturating_sub(o), t.saturating_sub(o)),
            None => (lo.saturating_sub(o), hi.saturating_sub(o)),
        }
    }

    /// Restricts this query to the first `steps` outer steps from `first` (the other parts go
    /// to forks).
    pub fn set_part(&mut self, first: i64, steps: usize) {
        self.part = (first, steps);
    }

    /// The outer steps of this query part: `(first, step, count)`, for range queries only.
    pub fn part_grid(&self) -> Option<(i64, i64, usize)> {
        (self.interval > 0 && self.part.1 > 0).then_some((self.part.0, self.interval, self.part.1))
    }

    /// The index of `t` among this part's outer steps, with the part's grid, when `t` is one of
    /// them (range queries only).
    pub fn part_step(&self, t: i64) -> Option<(usize, (i64, i64, usize))> {
        let (first, step, steps) = self.part_grid()?;
        let since = t.checked_sub(first).filter(|d| *d >= 0)?;
        if since % step != 0 {
            return None;
        }
        let k = usize::try_from(since / step).ok()?;
        (k < steps).then_some((k, (first, step, steps)))
    }

    /// The per-step rollup values cached for `node`, computed by `fill` on first use. `fill`
    /// runs without the cache borrowed, so it may evaluate other cached nodes (a subquery's
    /// inner expression does).
    ///
    /// Takes (once) and returns the value at step `k`; its bytes stop counting against the
    /// memory budget then, as the step's value moves on into the result.
    pub fn rollup_cache(
        &self,
        node: (usize, usize),
        fill: impl FnOnce() -> Result<StepValues>,
        k: usize,
    ) -> Result<Option<Vec<Elem>>> {
        let mut cache = self.rollups.borrow_mut();
        if !cache.contains_key(&node) {
            drop(cache);
            let values = fill()?;
            let points: usize = values.iter().flatten().map(Vec::len).sum();
            self.cached_points.set(self.cached_points.get().saturating_add(points));
            self.check_samples(0)?;
            let bytes: Vec<usize> = values.iter().map(|v| v.as_deref().map_or(0, footprint::elems_bytes)).collect();
            self.hold(bytes.iter().sum(), "caching step values")?;
            cache = self.rollups.borrow_mut();
            cache.insert(node, CachedSteps { values, bytes });
        }
        let Some(steps) = cache.get_mut(&node) else { return Ok(None) };
        let taken = steps.values.get_mut(k).and_then(Option::take);
        if let Some(v) = &taken {
            self.release(steps.bytes.get(k).copied().unwrap_or(0));
            // The step's points move on into the result, where they are counted again.
            self.cached_points.set(self.cached_points.get().saturating_sub(v.len()));
        }
        Ok(taken)
    }

    /// The series loaded for selector `vs`.
    pub fn series_of(&self, vs: &VectorSelector) -> &[SeriesSamples] {
        self.series_by_key(key(vs))
    }

    /// The series loaded under node key `k` (see [`Planned::node`]).
    pub fn series_by_key(&self, k: usize) -> &[SeriesSamples] {
        self.data.get(&k).map(Vec::as_slice).unwrap_or(&[])
    }

    /// Evaluates `e` at `t`.
    pub fn eval(&self, e: &Expr, t: i64) -> Result<StepValue> {
        match e {
            Expr::NumberLiteral(n) => Ok(StepValue::Scalar(n.val)),
            Expr::StringLiteral(s) => Ok(StepValue::String(s.val.clone())),
            Expr::Paren(p) => self.eval(&p.expr, t),
            Expr::Unary(u) => self.eval_unary(u, t),
            Expr::VectorSelector(vs) => self.within(key(vs), || {
                if let Some(v) = grid::step_vector(self, PerSeries::Latest(vs), t)
                    .map(|v| v.filter(|_| extended::of(vs).is_none()))?
                {
                    return Ok(StepValue::Vector(v));
                }
                Ok(StepValue::Vector(self.select_instant(vs, t).into_iter().map(|(e, _)| e).collect()))
            }),
            Expr::MatrixSelector(ms) => Ok(StepValue::Matrix(self.select_range(ms, t).0)),
            Expr::Subquery(sq) => Ok(StepValue::Matrix(self.eval_subquery(sq, t)?.0)),
            Expr::Binary(b) => self.within(key(b), || self.eval_binary(b, t)),
            Expr::Aggregate(a) => self.within(key(a), || self.eval_aggregate(a, t)),
            Expr::Call(c) => self.within(key(c), || self.eval_call(c, t)),
            Expr::Extension(_) => Err(EvalError::bad("unsupported expression extension")),
        }
    }

    /// Evaluates `e`, which must be an instant vector.
    pub fn eval_vector(&self, e: &Expr, t: i64) -> Result<Vec<Elem>> {
        match self.eval(e, t)? {
            StepValue::Vector(v) => Ok(v),
            other => Err(EvalError::bad(format!("expected instant vector, got {}", other.type_name()))),
        }
    }

    /// Evaluates `e`, which must be a scalar.
    pub fn eval_scalar(&self, e: &Expr, t: i64) -> Result<f64> {
        match self.eval(e, t)? {
            StepValue::Scalar(v) => Ok(v),
            other => Err(EvalError::bad(format!("expected scalar, got {}", other.type_name()))),
        }
    }

    /// Evaluates `e`, which must be a string.
    pub fn eval_string(&self, e: &Expr, t: i64) -> Result<String> {
        match self.eval(e, t)? {
            StepValue::String(v) => Ok(v),
            other => Err(EvalError::bad(format!("expected string, got {}", other.type_name()))),
        }
    }

    fn eval_unary(&self, u: &UnaryExpr, t: i64) -> Result<StepValue> {
        match self.eval(&u.expr, t)? {
            StepValue::Scalar(v) => Ok(StepValue::Scalar(-v)),
            StepValue::Vector(v) => Ok(StepValue::Vector(
                v.into_iter()
                    .map(|e| match e.hist {
                        Some(h) => {
                            let mut h = Arc::unwrap_or_clone(h);
                            h.mul(-1.0);
                            Elem::histogram(e.labels, Arc::new(h), true)
                        }
                        None => Elem::new(e.labels, -e.value, true),
                    })
                    .collect(),
            )),
            other => Err(EvalError::bad(format!("unary minus is not defined on {}", other.type_name()))),
        }
    }

    /// The latest sample of every selected series in the lookback window `(te - lookback, te]`,
    /// with the sample's own timestamp. A staleness marker as latest sample hides the series.
    pub fn select_instant(&self, vs: &VectorSelector, t: i64) -> Vec<(Elem, i64)> {
        let te = self.at_ms(&vs.at).unwrap_or(t).saturating_sub(offset_ms(&vs.offset));
        let lo = te.saturating_sub(self.opts.lookback_ms);
        let mut out = Vec::new();
        if extended::of(vs) == Some(Modifier::Smoothed) {
            let hi = te.saturating_add(self.opts.lookback_ms);
            for s in self.series_of(vs) {
                let around: Vec<Sample> =
                    step::between(&s.samples, lo, hi).iter().copied().filter(|p| !is_stale_marker(p.value)).collect();
                let hists = points::live_histograms_between(&s.histograms, lo, hi);
                if !hists.is_empty() {
                    out.extend(self.smoothed_histogram(&s.labels, &around, &hists, te).map(|e| (e, te)));
                    continue;
                }
                if let Some(v) = extended::smoothed_value(&around, te) {
                    out.push((Elem::new(s.labels.clone(), v, false), te));
                }
            }
            return out;
        }
        for s in self.series_of(vs) {
            if !s.histograms.is_empty() {
                if let Some((point, ts)) = points::latest(&s.samples, &s.histograms, te, self.opts.lookback_ms) {
                    out.push((Elem::of_point(s.labels.clone(), point, false), ts));
                }
                continue;
            }
            let idx = s.samples.partition_point(|p| p.timestamp_ms <= te);
            let Some(last) = idx.checked_sub(1).and_then(|i| s.samples.get(i)) else {
                continue;
            };
            if last.timestamp_ms <= lo || is_stale_marker(last.value) {
                continue;
            }
            out.push((Elem::new(s.labels.clone(), last.value, false), last.timestamp_ms));
        }
        out
    }

    /// An instant `smoothed` selector's value at `te` for a series with histograms around it
    /// (`floats` and `hists` in `(te - lookback, te + lookback]`); none, after a warning, when
    /// floats are there too.
    fn smoothed_histogram(
        &self,
        labels: &Labels,
        floats: &[Sample],
        hists: &[HistogramSample],
        te: i64,
    ) -> Option<Elem> {
        let name = labels.get(METRIC_NAME).unwrap_or("");
        if !floats.is_empty() {
            self.warn(native_rollup::note::mixed_floats_histograms(name));
            return None;
        }
        let h = native_extended::smoothed_value(self, name, hists, te)?;
        Some(Elem::of_point(labels.clone(), Point::Histogram(Arc::new(h)), false))
    }

    /// The lookback window of instant selectors, in ms.
    pub fn lookback_ms(&self) -> i64 {
        self.opts.lookback_ms
    }

    /// The window `(te - range, te]` of a range selector evaluated at `t`.
    pub fn range_bounds(&self, ms: &MatrixSelector, t: i64) -> (i64, i64) {
        self.step_window(ms).bounds(t)
    }

    /// Where range selector `ms`'s window lies, its modifiers resolved against this query.
    pub fn step_window(&self, ms: &MatrixSelector) -> StepWindow {
        StepWindow { pinned: self.at_ms(&ms.vs.at), offset: offset_ms(&ms.vs.offset), range: dur_ms(ms.range) }
    }

    /// Calls `f` with the labels and the (non-empty) window samples of every series selected
    /// by `ms` at `t`, in label order. Windows are borrowed from the loaded samples, which hold
    /// no staleness markers; the search starts where the previous evaluation's windows ended,
    /// so consecutive steps cost a few comparisons per series rather than a binary search.
    /// Histograms (rare) are cut from their own list by binary search.
    pub fn for_each_window(
        &self,
        ms: &MatrixSelector,
        t: i64,
        mut f: impl FnMut(&Labels, &[Sample], &[HistogramSample]),
    ) {
        let (lo, te) = self.range_bounds(ms, t);
        let series = self.series_of(&ms.vs);
        let mut cursors = self.cursors.borrow_mut();
        let hints = cursors.entry(key(&ms.vs)).or_default();
        hints.resize(series.len(), (0, 0));
        for (s, h) in series.iter().zip(hints.iter_mut()) {
            let a = seek(&s.samples, h.0, lo);
            let b = seek(&s.samples, h.1.max(a), te);
            *h = (a, b);
            let w = s.samples.get(a..b).unwrap_or_default();
            let hw = if s.histograms.is_empty() { &[] } else { points::histograms_between(&s.histograms, lo, te) };
            if !w.is_empty() || !hw.is_empty() {
                f(&s.labels, w, hw);
            }
        }
    }

    /// The samples of every selected series in `(te - range, te]` (staleness markers removed),
    /// with the window bounds.
    pub fn select_range(&self, ms: &MatrixSelector, t: i64) -> (Vec<Window>, i64, i64) {
        let (lo, te) = self.range_bounds(ms, t);
        let mut out = Vec::new();
        if let Some(m) = extended::of(&ms.vs) {
            // The window with its ends picked or interpolated (Prometheus' `extendFloats`).
            let (before, after) = self.extended_reach(&ms.vs);
            for s in self.series_of(&ms.vs) {
                let around = step::between(&s.samples, lo.saturating_sub(before), te.saturating_add(after));
                let samples = extended::extend(around, lo, te, m == Modifier::Smoothed);
                if !samples.is_empty() {
                    out.push(Window::floats(s.labels.clone(), samples, false));
                }
            }
            return (out, lo, te);
        }
        self.for_each_window(ms, t, |labels, w, hw| {
            out.push(Window { labels: labels.clone(), samples: w.to_vec(), drop_name: false, histograms: hw.to_vec() });
        });
        (out, lo, te)
    }

    /// Runs `f` on the group cache of the aggregation node at address `node`.
    pub fn with_groups<R>(&self, node: usize, f: impl FnOnce(&mut GroupCache) -> R) -> R {
        f(self.groups.borrow_mut().entry(node).or_default())
    }

    /// Evaluates a range-vector argument (selector or subquery, possibly in parentheses) at `t`,
    /// returning the windows and their bounds `(start, end]`.
    pub fn eval_range_arg(&self, e: &Expr, t: i64) -> Result<(Vec<Window>, i64, i64)> {
        match e {
            Expr::MatrixSelector(ms) => Ok(self.select_range(ms, t)),
            Expr::Subquery(sq) => self.eval_subquery(sq, t),
            Expr::Paren(p) => self.eval_range_arg(&p.expr, t),
            other => Err(EvalError::bad(format!("expected range vector, got {}", self.eval(other, t)?.type_name()))),
        }
    }

    /// Evaluates the inner expression at every multiple of the subquery step in
    /// `(te - range, te]` and gathers the results into windows.
    pub fn eval_subquery(&self, sq: &SubqueryExpr, t: i64) -> Result<(Vec<Window>, i64, i64)> {
        if sq.at.is_none() {
            return self.gather_subquery(sq, t);
        }
        // Pinned by `@`: the windows do not depend on `t` (found by fuzzing: a pinned
        // `[1y:1d]` under a `[1w:]` subquery was gathered anew at each of 10,080 outer steps).
        let cached = self.pinned_subqueries.borrow().get(&key(sq)).cloned();
        let pinned = match cached {
            Some(hit) => hit,
            None => {
                let fresh = self.gather_subquery(sq, t)?;
                self.hold(footprint::windows_bytes(&fresh.0), "caching pinned subqueries")?;
                let fresh = Arc::new(fresh);
                self.pinned_subqueries.borrow_mut().insert(key(sq), Arc::clone(&fresh));
                fresh
            }
        };
        Ok(pinned.as_ref().clone())
    }

    /// [`Query::eval_subquery`] without the cache of pinned subqueries.
    fn gather_subquery(&self, sq: &SubqueryExpr, t: i64) -> Result<(Vec<Window>, i64, i64)> {
        let te = self.at_ms(&sq.at).unwrap_or(t).saturating_sub(offset_ms(&sq.offset));
        let lo = te.saturating_sub(dur_ms(sq.range));
        let (step, mut ts) = inner_grid(sq, lo)?;
        let mut slots = AddrMap::default();
        let mut windows: Vec<Window> = Vec::new();
        let mut points = 0usize;
        while ts <= te {
            self.check_deadline()?;
            let v = self.eval_cached(sq, ts)?;
            // Borrowed per step: evaluating the step may run nested subqueries.
            let mut all = self.subquery_ids.borrow_mut();
            let ids = all.entry(key(sq)).or_default();
            points = points.saturating_add(gather_step(ids, &mut slots, &mut windows, v, ts)?);
            drop(all);
            // Checked per step: a long subquery of scalars or sparse vectors must hit the sample
            // limit while it grows, not only once it has been fully built.
            self.check_samples(points)?;
            self.check_held(gathered_bytes(points, windows.len()))?;
            let Some(next) = ts.checked_add(step) else { break };
            ts = next;
        }
        if let Some(ids) = self.subquery_ids.borrow_mut().get_mut(&key(sq)) {
            ids.ids.end_round();
        }
        sort_windows(&mut windows);
        Ok((windows, lo, te))
    }

    /// The inner expression of `sq` at every multiple of its step in `(lo, hi]`, gathered into
    /// one window per label set: what [`Query::eval_subquery`] gathers for one outer step,
    /// for a span of outer steps at once. Inner steps are evaluated once each and not cached.
    pub fn subquery_series(&self, sq: &SubqueryExpr, lo: i64, hi: i64) -> Result<Vec<Window>> {
        let (step, mut ts) = inner_grid(sq, lo)?;
        let mut points = 0usize;
        // A selector or a rollup of a range selector (see `PerSeries`): series by series, on the
        // inner grid, instead of a vector per inner step.
        let plain = |e: &PerSeries| !self.is_stepped(e.selector()) && self.starts_of(e.selector()).is_none();
        if let Some(e) = PerSeries::of(&sq.expr).filter(plain) {
            let steps =
                if ts > hi { 0 } else { usize::try_from(hi.abs_diff(ts) / step.unsigned_abs() + 1).unwrap_or(0) };
            let (stepper, drop_name) = (e.stepper(self), e.drops_name());
            // One series may get a point at every inner step of the span (with a range query of
            // 11,000 steps that is up to 11,000 x 11,000): it must fit before it is built.
            if !self.series_of(e.selector()).is_empty() {
                self.check_held(gathered_bytes(steps, 1))?;
            }
            let mut windows = Vec::new();
            for s in self.series_of(e.selector()) {
                self.check_deadline()?;
                let mut samples = Vec::new();
                let mut histograms = Vec::new();
                if s.histograms.is_empty() {
                    stepper.each_step(&s.samples, (ts, step, steps), |i, v| {
                        samples.push(Sample::new(grid_time(ts, step, i), v));
                    });
                } else {
                    e.each_mixed_point(self, s, (ts, step, steps), |i, p| {
                        let t = grid_time(ts, step, i);
                        match p {
                            Point::Float(v) => samples.push(Sample::new(t, v)),
                            Point::Histogram(h) => {
                                histograms.push(HistogramSample { timestamp_ms: t, histogram: points::for_subquery(h) })
                            }
                        }
                    });
                }
                if !samples.is_empty() || !histograms.is_empty() {
                    points = points.saturating_add(samples.len() + histograms.len());
                    self.check_samples(points)?;
                    self.check_held(gathered_bytes(points, windows.len() + 1))?;
                    windows.push(Window { labels: s.labels.clone(), samples, drop_name, histograms });
                }
            }
            sort_windows(&mut windows);
            return Ok(windows);
        }
        let (mut ids, mut slots, mut windows) = (LabelIds::default(), AddrMap::default(), Vec::new());
        while ts <= hi {
            self.check_deadline()?;
            let v = self.eval(&sq.expr, ts)?;
            points = points.saturating_add(gather_step(&mut ids, &mut slots, &mut windows, v, ts)?);
            self.check_samples(points)?;
            self.check_held(gathered_bytes(points, windows.len()))?;
            let Some(next) = ts.checked_add(step) else { break };
            ts = next;
        }
        sort_windows(&mut windows);
        Ok(windows)
    }

    fn eval_cached(&self, sq: &SubqueryExpr, ts: i64) -> Result<StepValue> {
        let k = (key(sq), ts);
        if let Some(v) = self.subquery_cache.borrow().get(&k) {
            return Ok(v.clone());
        }
        let v = self.eval(&sq.expr, ts)?;
        // Every cached step costs memory, even a scalar or an empty vector, so each counts as at
        // least one point; otherwise `[100y:1ms]` over nothing grows the cache until the timeout.
        let points = match &v {
            StepValue::Vector(elems) => elems.len().max(1),
            _ => 1,
        };
        self.cached_points.set(self.cached_points.get().saturating_add(points));
        self.check_samples(0)?;
        self.hold(std::mem::size_of_val(&k) + footprint::step_value_bytes(&v), "caching subquery steps")?;
        self.subquery_cache.borrow_mut().insert(k, v.clone());
        Ok(v)
    }
}

/// Bytes of `points` samples gathered into `windows` windows (label sets are the inner
/// expression's, shared).
fn gathered_bytes(points: usize, windows: usize) -> usize {
    points.saturating_mul(footprint::SAMPLE_BYTES).saturating_add(windows.saturating_mul(std::mem::size_of::<Window>()))
}

impl Budget for Query<'_> {
    fn check_samples(&self, extra: usize) -> Result<()> {
        Query::check_samples(self, extra)
    }

    fn hold(&self, bytes: usize, what: &'static str) -> Result<()> {
        Query::hold(self, bytes, what)
    }

    fn release(&self, bytes: usize) {
        Query::release(self, bytes);
    }
}

impl Context for Query<'_> {
    fn warn_at(&self, spot: Spot, msg: String) {
        Query::warn_at(self, spot, msg);
    }

    fn info_at(&self, spot: Spot, msg: String) {
        Query::info_at(self, spot, msg);
    }

    fn start_ms(&self) -> i64 {
        self.start
    }

    fn end_ms(&self) -> i64 {
        self.end
    }

    fn interval_ms(&self) -> i64 {
        self.interval
    }
}

/// A node's cached values at every step of a query part (see [`Query::rollup_cache`]), with
/// the bytes each step's value was counted for.
struct CachedSteps {
    values: StepValues,
    bytes: Vec<usize>,
}

/// Per subquery node: a number for each label set its inner steps produced, found by identity
/// (see `identity.rs`), so that each outer step finds its windows without hashing labels.
/// Equal label sets get the same number whatever their allocation.
#[derive(Default)]
struct LabelIds {
    ids: IdentityCache<usize>,
    by_value: HashMap<Labels, usize>,
}

impl LabelIds {
    fn id(&mut self, labels: &Labels) -> usize {
        let by_value = &mut self.by_value;
        *self.ids.get_or_insert_with(labels, |l| {
            let next = by_value.len();
            *by_value.entry(l.clone()).or_insert(next)
        })
    }
}

/// A subquery's step and its first inner step after `lo`: inner steps are the multiples of the
/// step (absolute, not relative to the query's start), as in Prometheus.
fn inner_grid(sq: &SubqueryExpr, lo: i64) -> Result<(i64, i64)> {
    let step = sq.step.map(dur_ms).unwrap_or(DEFAULT_SUBQUERY_STEP_MS);
    if step <= 0 {
        return Err(EvalError::bad("subquery step must be positive"));
    }
    // `lo` may lie within a step of `i64::MIN` or `i64::MAX` (an `@` time at the bounds): the
    // first inner step saturates instead of wrapping, and the loops stop where it would overflow.
    let ts = lo.div_euclid(step).saturating_mul(step);
    Ok((step, if ts <= lo { ts.saturating_add(step) } else { ts }))
}

/// Puts a subquery's windows in label order (unless they already are), so that whatever
/// consumes them, a sum above all, sees the same order on every evaluation path: per step,
/// windows appear in the order of their first point in the window, which differs from step to
/// step when series vanish and return.
fn sort_windows(windows: &mut [Window]) {
    if !windows.is_sorted_by(|a, b| a.labels <= b.labels) {
        windows.sort_by(|a, b| a.labels.cmp(&b.labels));
    }
}

/// Appends one inner step's value to the windows; returns how many points it added. `slots`
/// maps label-set numbers (from `ids`) to positions in `windows`.
fn gather_step(
    ids: &mut LabelIds,
    slots: &mut AddrMap<usize>,
    windows: &mut Vec<Window>,
    v: StepValue,
    ts: i64,
) -> Result<usize> {
    let elems = match v {
        StepValue::Scalar(x) => vec![Elem::new(Labels::empty(), x, false)],
        StepValue::Vector(v) => v,
        other => {
            return Err(EvalError::bad(format!(
                "subquery is only allowed on instant vector, got {} instead",
                other.type_name()
            )))
        }
    };
    let added = elems.len();
    for e in elems {
        let i = *slots.entry(ids.id(&e.labels)).or_insert_with(|| {
            windows.push(Window::floats(e.labels.clone(), Vec::new(), false));
            windows.len() - 1
        });
        if let Some(w) = windows.get_mut(i) {
            if w.samples.last().is_some_and(|s| s.timestamp_ms == ts)
                || w.histograms.last().is_some_and(|s| s.timestamp_ms == ts)
            {
                return Err(EvalError::exec("vector cannot contain metrics with the same labelset"));
            }
            match e.hist {
                Some(h) => w.histograms.push(HistogramSample { timestamp_ms: ts, histogram: points::for_subquery(h) }),
                None => w.samples.push(Sample::new(ts, e.value)),
            }
            w.drop_name |= e.drop_name;
        }
    }
    Ok(added)
}

/// Matchers of a selector: its own plus the metric name written before the braces. With
/// `or` groups (`{a="1" or b="2"}`), one matcher list per group.
fn matcher_groups(vs: &VectorSelector) -> Result<Vec<Vec<Matcher>>> {
    let conv = |ms: &[promql_parser::label::Matcher]| -> Result<Vec<Matcher>> {
        let mut out = ms
            .iter()
            .filter(|m| !extended::is_marker(m))
            .map(|m| Matcher::from_parsed(m).map_err(|e| EvalError::bad(e.to_string())))
            .collect::<Result<Vec<_>>>()?;
        if let Some(name) = &vs.name {
            out.push(Matcher::equal(METRIC_NAME, name.clone()));
        }
        Ok(out)
    };
    if vs.matchers.or_matchers.is_empty() {
        return Ok(vec![conv(&vs.matchers.matchers)?]);
    }
    vs.matchers.or_matchers.iter().map(|g| conv(g)).collect()
}

impl Query<'_> {
    /// Warns when raw samples of `vs` were read over `(lo, hi]` where windows were downsampled:
    /// their float samples are gone, so the selection finds none there.
    fn warn_downsampled(&self, src: &dyn Querier, vs: &VectorSelector, (lo, hi): (i64, i64)) {
        let Some((finest, end)) = src.downsampled_in(lo.saturating_add(1), hi) else { return };
        let before = crate::timestamp::format_ms(end);
        let finest = crate::duration::format_ms(finest);
        self.warn(format!(
            "{vs}: raw samples before {before} were downsampled to {finest} points (--downsample), and this \
             selection reads raw samples, so it finds no float samples there; the range functions tiers \
             answer read the points where the range (and a range query's step) is at least {finest}"
        ));
    }

    /// The step values of a rollup over a selector (`e`) at every step of `grid`, read from the
    /// coarsest downsampled tier that answers them (see [`tiers::choose`]), each series
    /// admitted by `intake` and its points counted in `read` as samples read (as the storage's
    /// budget counts them); `None` when no tier answers: the caller reads raw samples, with
    /// nothing admitted yet.
    fn read_tier(
        &self,
        src: &dyn Querier,
        (node, groups): (usize, &[Vec<Matcher>]),
        e: PerSeries<'_>,
        grid: (i64, i64, usize),
        (intake, read): (&Intake<'_>, &AtomicUsize),
        measured: bool,
    ) -> Result<Option<(Vec<SeriesSamples>, Option<TierCount>)>> {
        let stepper = e.stepper(self);
        // What each step reads (for a plain selector: its lookback), and what the selector is
        // named in the info.
        let (window, ms) = match (e, stepper) {
            (PerSeries::Rollup(_, ms, _), Stepper::Rollup(_, window, _)) => (window, ms.to_string()),
            (PerSeries::Latest(vs), Stepper::Latest { pinned, offset, lookback }) => {
                (StepWindow { pinned, offset, range: lookback }, vs.to_string())
            }
            _ => return Ok(None),
        };
        let (start, end) = tiers::read_range(window, grid);
        let downsampled = src.downsampled_in(start.saturating_add(1), end).map(|(finest, _)| finest);
        // A single step reads points only where raw samples are gone (see `tiers::choose`); a
        // plain selector only there too (see `tiers::choose_latest`).
        if (grid.2 == 1 || matches!(stepper, Stepper::Latest { .. })) && downsampled.is_none() {
            return Ok(None);
        }
        let intervals = src.tier_intervals();
        if intervals.is_empty() {
            return Ok(None);
        }
        let allowed = self.opts.source_resolution;
        let plan = match stepper {
            Stepper::Rollup(f, _, _) => tiers::choose(f, window, grid, (&intervals, downsampled), allowed),
            Stepper::Latest { pinned, offset, lookback } => {
                tiers::choose_latest((pinned, offset, lookback), grid, (&intervals, downsampled), allowed)
            }
        };
        let Some(plan) = plan else { return Ok(None) };
        // Each series' points become its step values on the thread that read them; a measured
        // query first counts the points of each step's window.
        let per_step: Vec<AtomicU64> =
            if measured { (0..grid.2).map(|_| AtomicU64::new(0)).collect() } else { Vec::new() };
        let map = |series: &mut crate::storage::SeriesPoints| {
            read.fetch_add(series.points.len(), Ordering::Relaxed);
            if measured {
                tiers::count_per_step(window, grid, &series.points, |i, n| {
                    if let Some(c) = per_step.get(i) {
                        c.fetch_add(n, Ordering::Relaxed);
                    }
                });
            }
            match stepper {
                Stepper::Rollup(f, window, param) => {
                    tiers::step_values((f, param), window, (grid, plan.interval_ms), series)
                }
                Stepper::Latest { .. } => tiers::latest_values(stepper, grid, series),
            }
        };
        let fields = match stepper {
            Stepper::Rollup(f, _, _) => crate::promql::functions::tier_rollup::fields_of(f),
            Stepper::Latest { .. } => crate::tier::Fields::Ends,
        };
        let how = crate::storage::PointsRead { min_density: plan.min_density, map: Some(&map), fields };
        // Every group answers in points before any series is admitted: a group that does not
        // leaves nothing counted twice by the raw read that follows.
        let mut found = Vec::with_capacity(groups.len());
        for g in groups {
            let Some(series) = src.select_points(g, plan.ends, plan.interval_ms, how)? else { return Ok(None) };
            found.push(series);
        }
        let mut seen: HashSet<Labels> = HashSet::new();
        let mut out = Vec::new();
        for points in found.into_iter().flatten() {
            if groups.len() > 1 && !seen.insert(points.labels.clone()) {
                continue;
            }
            let mut series = SeriesSamples { labels: points.labels, samples: points.values, histograms: Vec::new() };
            intake.admit(&mut series);
            out.push(series);
        }
        let mut out = intake.finish(Ok(out))?;
        sort_by_labels(&mut out);
        // The same text for every part of a range (the result cache joins parts' annotations,
        // told apart by their text): the selector and the tier, not what was read.
        let tier = crate::duration::format_ms(plan.interval_ms);
        let msg = if plan.approximate {
            format!(
                "{ms} read from the {tier} tier, approximately: raw samples there were downsampled, and the range or \
                 steps are not multiples of {tier}, so each step takes the {tier} intervals ending inside its range"
            )
        } else {
            format!("{ms} read from the {tier} tier (max_source_resolution=raw reads raw samples)")
        };
        self.within(node, || self.info_every_step(msg));
        let count = measured.then(|| TierCount {
            interval_ms: plan.interval_ms,
            per_step: per_step.into_iter().map(AtomicU64::into_inner).collect(),
        });
        Ok(Some((out, count)))
    }
}

/// [`Querier::start_timestamps`] over what [`select_series`] selects, by labels.
fn select_starts(
    src: &dyn Querier,
    groups: &[Vec<Matcher>],
    lo: i64,
    hi: i64,
) -> Result<HashMap<Labels, Vec<StartChange>>> {
    let start = lo.saturating_add(1).max(MIN_TIMESTAMP_MS);
    let end = hi.min(MAX_TIMESTAMP_MS);
    let mut out = HashMap::new();
    if end < start {
        return Ok(out);
    }
    for g in groups {
        for s in src.start_timestamps(g, start, end)? {
            out.entry(s.labels).or_insert(s.changes);
        }
    }
    Ok(out)
}

fn select_series(
    src: &dyn Querier,
    groups: &[Vec<Matcher>],
    lo: i64,
    hi: i64,
    map: Option<SeriesMap<'_>>,
) -> Result<Vec<SeriesSamples>> {
    select_groups(groups, lo, hi, |ms, start, end| src.select(ms, start, end, map))
}

/// Series above this many are sorted on several threads.
const PARALLEL_SORT_SERIES: usize = 8_192;

/// Sorts series by labels (each label set occurs once, so an unstable sort orders them as a
/// stable one would); a large selection on the cores' pool: sorting 100,000 label sets took
/// half the single-threaded part of an aggregation over them.
fn sort_by_labels(series: &mut [SeriesSamples]) {
    if series.len() >= PARALLEL_SORT_SERIES {
        use rayon::slice::ParallelSliceMut;
        series.par_sort_unstable_by(|a, b| a.labels.cmp(&b.labels));
    } else {
        series.sort_unstable_by(|a, b| a.labels.cmp(&b.labels));
    }
}

/// [`select_series`] through [`Querier::select_reduced`].
fn select_reduced(
    src: &dyn Querier,
    groups: &[Vec<Matcher>],
    (lo, hi): (i64, i64),
    sink: SinkFactory<'_>,
    map: SeriesMap<'_>,
) -> Result<Vec<SeriesSamples>> {
    select_groups(groups, lo, hi, |ms, start, end| src.select_reduced(ms, start, end, sink, Some(map)))
}

/// The series of every matcher group in `(lo, hi]`, each label set once, sorted by labels.
fn select_groups(
    groups: &[Vec<Matcher>],
    lo: i64,
    hi: i64,
    select: impl Fn(&[Matcher], i64, i64) -> crate::storage::Result<Vec<SeriesSamples>>,
) -> Result<Vec<SeriesSamples>> {
    // Windows are left-open: a sample at exactly `lo` is never used.
    let start = lo.saturating_add(1).max(MIN_TIMESTAMP_MS);
    let end = hi.min(MAX_TIMESTAMP_MS);
    if end < start {
        return Ok(Vec::new());
    }
    if groups.len() == 1 {
        let ms = groups.first().map(Vec::as_slice).unwrap_or(&[]);
        let mut out = select(ms, start, end)?;
        sort_by_labels(&mut out);
        return Ok(out);
    }
    let mut seen: HashMap<Labels, ()> = HashMap::new();
    let mut out = Vec::new();
    for g in groups {
        for s in select(g, start, end)? {
            if seen.insert(s.labels.clone(), ()).is_none() {
                out.push(s);
            }
        }
    }
    sort_by_labels(&mut out);
    Ok(out)
}
