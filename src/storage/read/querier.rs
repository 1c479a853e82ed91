//! The read seam: everything that reads series goes through a [`Querier`]. The PromQL engine
//! and every HTTP read path (query, series, labels, export, remote read) use only this trait,
//! so a second storage backend implements it and nothing above changes.
//!
//! A querier carries the limits of one request ([`ReadLimits`]): the sample budget, the
//! deadline and a cancellation flag (set when the client goes away). Scans check them as they
//! go, so a request past its deadline stops inside the scan rather than after it.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use crate::labels::Labels;
use crate::matcher::Matcher;
use crate::sample::{Sample, SeriesSamples};
use crate::storage::error::{Result, StorageError};
use crate::storage::format::start_ts::SeriesStarts;
use crate::tier::FloatPoint;

/// A transformation applied to each selected series where it is read (see [`Querier::select`]).
pub type SeriesMap<'a> = &'a (dyn Fn(&mut SeriesSamples) + Sync);

/// Consumes one series' float samples as they are decoded, in ascending batches, and keeps
/// what it needs of them (see [`Querier::select_reduced`]): a reduction that never holds a
/// long range's samples at once, and reads each batch while it is in the CPU caches.
pub trait SampleSink {
    /// The next samples of the series, all after those fed before.
    fn feed(&mut self, batch: &[Sample]);
    /// What the series keeps, once every sample was fed.
    fn finish(self: Box<Self>) -> Vec<Sample>;
}

/// One series' tier points (see [`Querier::select_points`]): `(end, point)` per interval
/// `(end - interval, end]` holding samples of the series, ascending by end.
#[derive(Clone, Debug, PartialEq)]
pub struct SeriesPoints {
    /// The series identity.
    pub labels: Labels,
    /// The points, ascending by interval end (empty once a [`PointsMap`] reduced them).
    pub points: Vec<(i64, FloatPoint)>,
    /// What a [`PointsMap`] kept of the points (a rollup's step values); empty otherwise.
    pub values: Vec<Sample>,
}

/// Reduces one series' points where they are read (see [`PointsRead`]): a rollup's values at
/// every step go to `values` and the points are dropped, so that a long range's points are
/// never held at once.
pub type PointsMap<'a> = &'a (dyn Fn(&mut SeriesPoints) + Sync);

/// How [`Querier::select_points`] reads.
#[derive(Clone, Copy, Default)]
pub struct PointsRead<'a> {
    /// The fewest samples a stored tier point must stand for on average, in any tier row read
    /// with more than [`DENSITY_MIN_POINTS`] points, for the answer to be given in points: tier
    /// points cost more to decode and merge than samples, so a sparse tier is slower than the
    /// raw samples it stands for. `0` reads the tier whatever its density.
    pub min_density: u64,
    /// Applied to each series on the thread that read it.
    pub map: Option<PointsMap<'a>>,
    /// The fields of the points the reader uses (see [`crate::tier::FloatPoint::absorb`]):
    /// stored points are decoded and merged for these only, the others left meaningless.
    pub fields: crate::tier::Fields,
}

pub use crate::tier::{too_sparse, DENSITY_MIN_POINTS};

/// The points of `samples` (ascending, one series) for the intervals of `interval_ms` ending in
/// `[first_end, last_end]`: what [`Querier::select_points`] answers, computed from raw samples.
pub fn points_in(samples: &[Sample], interval_ms: i64, (first_end, last_end): (i64, i64)) -> Vec<(i64, FloatPoint)> {
    let lo = samples.partition_point(|s| s.timestamp_ms <= first_end.saturating_sub(interval_ms));
    let hi = samples.partition_point(|s| s.timestamp_ms <= last_end);
    crate::tier::points_of(samples.get(lo..hi).unwrap_or_default(), interval_ms)
}

/// Makes the [`SampleSink`] of each series a reduced selection reads.
pub type SinkFactory<'a> = &'a (dyn Fn() -> Box<dyn SampleSink + 'a> + Sync);

/// What one request may spend.
#[derive(Clone, Debug, Default)]
pub struct ReadLimits {
    /// Samples a request may load in all (`None`: no limit).
    pub max_samples: Option<usize>,
    /// When the request must give up.
    pub deadline: Option<Instant>,
    /// Set when the request is abandoned (the client went away).
    pub cancel: Option<Arc<AtomicBool>>,
}

impl ReadLimits {
    /// No limits (for tests and internal reads).
    pub fn none() -> Self {
        Self::default()
    }

    /// Fails once the deadline has passed or the request was cancelled.
    ///
    /// # Errors
    /// [`StorageError::Timeout`] or [`StorageError::Cancelled`].
    pub fn check(&self) -> Result<()> {
        if self.cancel.as_ref().is_some_and(|c| c.load(Ordering::Relaxed)) {
            return Err(StorageError::Cancelled);
        }
        if self.deadline.is_some_and(|d| Instant::now() >= d) {
            return Err(StorageError::Timeout);
        }
        Ok(())
    }
}

/// How a read takes the samples of the series it selected from a window keyspace (for
/// measuring; `Auto` is the default and what a server should use).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum ReadStrategy {
    /// One iterator per bucket range where the wanted series are dense, a seek per series where
    /// they are sparse.
    #[default]
    Auto,
    /// Always a seek per series.
    Seek,
    /// Always one iterator per bucket range (per 64 series).
    Range,
}

/// The sample budget of one request, shared by the scans it runs in parallel.
#[derive(Debug)]
pub struct SampleBudget {
    limit: usize,
    used: AtomicUsize,
}

impl SampleBudget {
    /// A budget of `limit` samples (`None`: unlimited).
    pub fn new(limit: Option<usize>) -> Self {
        Self { limit: limit.unwrap_or(usize::MAX), used: AtomicUsize::new(0) }
    }

    /// Takes `n` samples from the budget.
    ///
    /// # Errors
    /// [`StorageError::TooManySamples`] once the budget is exceeded (and for every later take).
    pub fn take(&self, n: usize) -> Result<()> {
        let used = self.used.fetch_add(n, Ordering::Relaxed).saturating_add(n);
        if used > self.limit {
            return Err(StorageError::TooManySamples { limit: self.limit });
        }
        Ok(())
    }
}

/// Reads series for one request, within its [`ReadLimits`]. Every method's time range is
/// inclusive at both ends. Samples are exact to the millisecond; series, label names and values
/// are those with data in the time windows the range overlaps (the index's granularity, as
/// Prometheus answers per block and VictoriaMetrics per day).
pub trait Querier: Send + Sync {
    /// The flag that is set when this querier's request is abandoned, so that work done
    /// outside the querier (evaluating what it returned) stops too; `None` when it cannot be.
    fn cancellation(&self) -> Option<Arc<AtomicBool>> {
        None
    }

    /// `(boundary, generation)`: samples before `boundary` (exclusive, ms) change only together
    /// with `generation`, so an answer computed from them alone may be kept and reused while
    /// the generation is the same. Load it *before* reading (the embedded store bumps the
    /// generation after a change is visible; its boundary is the later of its sealed windows'
    /// end and five minutes ago, see `storage/immutable.rs`). `None` (the default, and the
    /// ClickHouse backend): nothing may be kept.
    fn immutable_before(&self) -> Option<(i64, u64)> {
        None
    }

    /// The intervals (ms, ascending) of the downsampled tiers [`Querier::select_points`] can
    /// answer from stored points; empty (the default) when this backend keeps none.
    fn tier_intervals(&self) -> Vec<i64> {
        Vec::new()
    }

    /// When windows overlapping `[start_ms, end_ms]` were downsampled (`--downsample 7d:5m`):
    /// the finest tier interval (ms) every one of them still keeps, and the end of the newest
    /// (raw samples before it may be gone). Raw reads find no float samples there for series
    /// without native histograms; [`Querier::select_points`] answers there in points of that
    /// interval or coarser, whatever their density. `None` (the default) when none was.
    fn downsampled_in(&self, start_ms: i64, end_ms: i64) -> Option<(i64, i64)> {
        let _ = (start_ms, end_ms);
        None
    }

    /// Every series matching all `matchers` with a sample in `(first_end - interval_ms,
    /// last_end]`, with its points of `interval_ms` (one of [`Querier::tier_intervals`]) ending
    /// in `[first_end, last_end]` (both multiples of `interval_ms`): for each interval
    /// `(end - interval_ms, end]` holding samples, the [`FloatPoint`] of exactly those samples
    /// (staleness markers included), as [`points_in`] computes it from them. Read from stored
    /// tier points where they exist, computed from raw samples elsewhere.
    ///
    /// `Ok(None)` when the answer cannot be given in points (no tier of that interval, a
    /// matching series holds native histograms in the range, or a tier row is sparser than
    /// `how.min_density`): the caller reads samples. The sample budget counts points and the
    /// raw samples read. `how.map`, when given, runs on each series where it is read.
    ///
    /// # Errors
    /// As [`Querier::select`].
    fn select_points(
        &self,
        matchers: &[Matcher],
        (first_end, last_end): (i64, i64),
        interval_ms: i64,
        how: PointsRead<'_>,
    ) -> Result<Option<Vec<SeriesPoints>>> {
        let _ = (matchers, first_end, last_end, interval_ms, how.min_density);
        Ok(None)
    }

    /// Warnings about what this querier's answers lack so far (a backend answering partially
    /// when part of it is down); the query API adds them to the response's warnings.
    fn warnings(&self) -> Vec<String> {
        Vec::new()
    }

    /// Every series matching all `matchers` with at least one sample in `[start_ms, end_ms]`,
    /// with exactly the samples in that range, ascending by timestamp; the order of the series
    /// is unspecified. `map`, when given, is applied to each series on the thread that read it,
    /// before it is collected (a reduction then runs while the samples are in the CPU caches,
    /// and only what it keeps is held); the sample budget counts the samples read, before `map`.
    ///
    /// # Errors
    /// Storage failures, [`StorageError::TooManySamples`], [`StorageError::Timeout`],
    /// [`StorageError::Cancelled`].
    fn select(
        &self,
        matchers: &[Matcher],
        start_ms: i64,
        end_ms: i64,
        map: Option<SeriesMap<'_>>,
    ) -> Result<Vec<SeriesSamples>>;

    /// As [`Querier::select`], but the float samples of every series without native histograms
    /// go through a sink made by `sink` instead of being collected: the series holds what the
    /// sink's [`SampleSink::finish`] returns. A series with histograms is collected whole, as
    /// by `select`. `map` then runs on every series. The sample budget counts the samples read.
    /// The default collects each series, then feeds it whole; a backend that decodes in pieces
    /// feeds them as they come, so a long range is never held at once.
    ///
    /// # Errors
    /// As [`Querier::select`].
    fn select_reduced(
        &self,
        matchers: &[Matcher],
        start_ms: i64,
        end_ms: i64,
        sink: SinkFactory<'_>,
        map: Option<SeriesMap<'_>>,
    ) -> Result<Vec<SeriesSamples>> {
        let each = |s: &mut SeriesSamples| {
            if s.histograms.is_empty() {
                let mut reduced = sink();
                reduced.feed(&s.samples);
                s.samples = reduced.finish();
            }
            if let Some(map) = map {
                map(s);
            }
        };
        self.select(matchers, start_ms, end_ms, Some(&each))
    }

    /// Calls `f` with each matching series (as [`Querier::select`] without `map`), one series in
    /// memory at a time; stops when `f` returns false.
    ///
    /// # Errors
    /// As [`Querier::select`].
    fn for_each_series(
        &self,
        matchers: &[Matcher],
        start_ms: i64,
        end_ms: i64,
        f: &mut dyn FnMut(SeriesSamples) -> bool,
    ) -> Result<()>;

    /// The start timestamps of the matching series that have any in `[start_ms, end_ms]`: per
    /// series its change points in the range and the last one before it (see
    /// [`crate::storage::start_at`]); series without start timestamps are left out. A backend that
    /// stores none answers with none (the default).
    ///
    /// # Errors
    /// As [`Querier::select`].
    fn start_timestamps(&self, matchers: &[Matcher], start_ms: i64, end_ms: i64) -> Result<Vec<SeriesStarts>> {
        let _ = (matchers, start_ms, end_ms);
        Ok(Vec::new())
    }

    /// Label sets of the matching series with data in the range; at most `limit` of them
    /// (which ones is unspecified when more match).
    ///
    /// # Errors
    /// As [`Querier::select`].
    fn series(&self, matchers: &[Matcher], start_ms: i64, end_ms: i64, limit: Option<usize>) -> Result<Vec<Labels>>;

    /// Label names of the matching series (of all series when `matchers` is empty) with data in
    /// the range, sorted; at most `limit`.
    ///
    /// # Errors
    /// As [`Querier::select`].
    fn label_names(
        &self,
        matchers: &[Matcher],
        start_ms: i64,
        end_ms: i64,
        limit: Option<usize>,
    ) -> Result<Vec<String>>;

    /// Values of label `name` among the matching series (all series when `matchers` is empty)
    /// with data in the range, sorted; at most `limit`.
    ///
    /// # Errors
    /// As [`Querier::select`].
    fn label_values(
        &self,
        name: &str,
        matchers: &[Matcher],
        start_ms: i64,
        end_ms: i64,
        limit: Option<usize>,
    ) -> Result<Vec<String>>;

    /// The answer of [`Querier::series`] when this querier holds all of it in memory (caches of
    /// earlier answers), else `None`. The HTTP layer asks on its async threads before handing
    /// a request to the blocking pool: it must not block, and its work must stay small. The
    /// default holds nothing.
    fn held_series(
        &self,
        matchers: &[Matcher],
        start_ms: i64,
        end_ms: i64,
        limit: Option<usize>,
    ) -> Option<Vec<Labels>> {
        let _ = (matchers, start_ms, end_ms, limit);
        None
    }

    /// [`Querier::label_names`] from memory, as [`Querier::held_series`].
    fn held_label_names(
        &self,
        matchers: &[Matcher],
        start_ms: i64,
        end_ms: i64,
        limit: Option<usize>,
    ) -> Option<Vec<String>> {
        let _ = (matchers, start_ms, end_ms, limit);
        None
    }

    /// [`Querier::label_values`] from memory, as [`Querier::held_series`].
    fn held_label_values(
        &self,
        name: &str,
        matchers: &[Matcher],
        start_ms: i64,
        end_ms: i64,
        limit: Option<usize>,
    ) -> Option<Vec<String>> {
        let _ = (name, matchers, start_ms, end_ms, limit);
        None
    }
}

/// A fixed in-memory [`Querier`]: answers every selection by filtering a list of series held in
/// memory. Used by tests and the fuzz harness, which need an engine without storage.
#[derive(Clone, Debug, Default)]
pub struct MemQuerier {
    series: Vec<SeriesSamples>,
    starts: Vec<SeriesStarts>,
    tiers: Vec<i64>,
    /// See [`MemQuerier::with_downsampled`].
    downsampled: Option<(i64, i64)>,
}

impl MemQuerier {
    /// Wraps `series`; each one's samples and histograms must be sorted by strictly ascending
    /// timestamp.
    pub fn new(series: Vec<SeriesSamples>) -> Self {
        Self { series, starts: Vec::new(), tiers: Vec::new(), downsampled: None }
    }

    /// Says through [`Querier::downsampled_in`] that windows before `end_ms` were downsampled,
    /// keeping `finest` (ms) and coarser, while still answering raw reads from every held
    /// sample: the engine then reads tiers where it would over downsampled windows, and the
    /// same querier without it gives the raw answers to compare.
    pub fn with_downsampled(mut self, finest: i64, end_ms: i64) -> Self {
        self.downsampled = Some((finest, end_ms));
        self
    }

    /// Answers [`Querier::select_points`] for tiers of these intervals (ms, ascending), with
    /// points computed from the held samples.
    pub fn with_tiers(mut self, intervals_ms: Vec<i64>) -> Self {
        self.tiers = intervals_ms;
        self
    }

    /// Adds start timestamps: per series (by labels), its change points, ascending.
    pub fn with_starts(mut self, starts: Vec<SeriesStarts>) -> Self {
        self.starts = starts;
        self
    }

    fn matching<'a>(
        &'a self,
        matchers: &'a [Matcher],
        start_ms: i64,
        end_ms: i64,
    ) -> impl Iterator<Item = SeriesSamples> + 'a {
        self.series
            .iter()
            .filter(|s| matchers.iter().all(|m| m.matches(s.labels.get(&m.name).unwrap_or(""))))
            .map(move |s| SeriesSamples {
                labels: s.labels.clone(),
                samples: s
                    .samples
                    .iter()
                    .filter(|p| p.timestamp_ms >= start_ms && p.timestamp_ms <= end_ms)
                    .copied()
                    .collect(),
                histograms: s
                    .histograms
                    .iter()
                    .filter(|h| h.timestamp_ms >= start_ms && h.timestamp_ms <= end_ms)
                    .cloned()
                    .collect(),
            })
            .filter(|s| !s.samples.is_empty() || !s.histograms.is_empty())
    }
}

fn truncated<T>(mut v: Vec<T>, limit: Option<usize>) -> Vec<T> {
    if let Some(n) = limit {
        v.truncate(n);
    }
    v
}

impl Querier for MemQuerier {
    fn tier_intervals(&self) -> Vec<i64> {
        self.tiers.clone()
    }

    fn downsampled_in(&self, start_ms: i64, _end_ms: i64) -> Option<(i64, i64)> {
        self.downsampled.filter(|&(_, end)| start_ms < end)
    }

    fn select_points(
        &self,
        matchers: &[Matcher],
        (first_end, last_end): (i64, i64),
        interval_ms: i64,
        how: PointsRead<'_>,
    ) -> Result<Option<Vec<SeriesPoints>>> {
        if !self.tiers.contains(&interval_ms) {
            return Ok(None);
        }
        let lo = first_end.saturating_sub(interval_ms).saturating_add(1);
        let mut out = Vec::new();
        for s in self.matching(matchers, lo, last_end) {
            if !s.histograms.is_empty() {
                return Ok(None);
            }
            let points = points_in(&s.samples, interval_ms, (first_end, last_end));
            if too_sparse(&points, how.min_density) {
                return Ok(None);
            }
            let mut series = SeriesPoints { labels: s.labels, points, values: Vec::new() };
            if let Some(map) = how.map {
                map(&mut series);
            }
            out.push(series);
        }
        Ok(Some(out))
    }

    fn start_timestamps(&self, matchers: &[Matcher], start_ms: i64, end_ms: i64) -> Result<Vec<SeriesStarts>> {
        let wanted: Vec<crate::labels::Labels> = self.matching(matchers, start_ms, end_ms).map(|s| s.labels).collect();
        Ok(self
            .starts
            .iter()
            .filter(|s| wanted.contains(&s.labels))
            .map(|s| SeriesStarts {
                labels: s.labels.clone(),
                changes: crate::storage::format::start_ts::merge(vec![s.changes.clone()], start_ms)
                    .into_iter()
                    .filter(|c| c.timestamp_ms <= end_ms)
                    .collect(),
            })
            .filter(|s| s.changes.iter().any(|c| c.start_ms != 0))
            .collect())
    }

    fn select(
        &self,
        matchers: &[Matcher],
        start_ms: i64,
        end_ms: i64,
        map: Option<SeriesMap<'_>>,
    ) -> Result<Vec<SeriesSamples>> {
        let mut out: Vec<SeriesSamples> = self.matching(matchers, start_ms, end_ms).collect();
        if let Some(map) = map {
            out.iter_mut().for_each(map);
        }
        Ok(out)
    }

    fn for_each_series(
        &self,
        matchers: &[Matcher],
        start_ms: i64,
        end_ms: i64,
        f: &mut dyn FnMut(SeriesSamples) -> bool,
    ) -> Result<()> {
        for s in self.matching(matchers, start_ms, end_ms) {
            if !f(s) {
                break;
            }
        }
        Ok(())
    }

    fn series(&self, matchers: &[Matcher], start_ms: i64, end_ms: i64, limit: Option<usize>) -> Result<Vec<Labels>> {
        Ok(truncated(self.matching(matchers, start_ms, end_ms).map(|s| s.labels).collect(), limit))
    }

    fn label_names(
        &self,
        matchers: &[Matcher],
        start_ms: i64,
        end_ms: i64,
        limit: Option<usize>,
    ) -> Result<Vec<String>> {
        let names: std::collections::BTreeSet<String> = self
            .matching(matchers, start_ms, end_ms)
            .flat_map(|s| s.labels.iter().map(|l| l.name.clone()).collect::<Vec<_>>())
            .collect();
        Ok(truncated(names.into_iter().collect(), limit))
    }

    fn label_values(
        &self,
        name: &str,
        matchers: &[Matcher],
        start_ms: i64,
        end_ms: i64,
        limit: Option<usize>,
    ) -> Result<Vec<String>> {
        let values: std::collections::BTreeSet<String> =
            self.matching(matchers, start_ms, end_ms).filter_map(|s| s.labels.get(name).map(str::to_owned)).collect();
        Ok(truncated(values.into_iter().collect(), limit))
    }
}
