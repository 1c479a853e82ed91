//! Series-major evaluation over the outer steps of a range query part.
//!
//! A range query evaluates its expression once per step; done naively, every step visits every
//! series again, which misses the CPU caches at each step and builds a vector of elements per step.
//! For the expressions that dominate dashboards, a selector or a rollup of a range selector without
//! parameters or with a constant one ([`PerSeries`]), the values of all of a part's steps are
//! computed at first use instead, one series at a time, and cached per node (see
//! [`Query::rollup_cache`]); the aggregations over them fold each series straight into its group
//! (`aggr::SeriesFold`). A parameterless rollup over a subquery ([`subquery_step_vector`]) is
//! computed the same way, from the subquery's inner steps gathered once per series for all of the
//! part's windows.
//!
//! Invariant: every value equals, bit for bit, what the per-step path computes at that step;
//! `range_steps_equal_instant_queries_for_subqueries` (promql tests) checks it against instant
//! queries, which never take this path.

use std::sync::atomic::{AtomicUsize, Ordering};

use promql_parser::parser::{Expr, MatrixSelector, SubqueryExpr, VectorSelector};

use super::{dur_ms, offset_ms, shape, Query};
use crate::labels::Labels;
use crate::promql::budget::GrowingHold;
use crate::promql::error::{EvalError, Result};
use crate::promql::extended;
use crate::promql::functions::native_rollup;
use crate::promql::functions::rollup::{self, Rollup};
use crate::promql::points;
use crate::promql::step::{self, grid_time, seek, StepValues, StepWindow};
use crate::promql::value::{Elem, Point};
use crate::sample::{is_stale_marker, HistogramSample, Sample, SeriesSamples};
use crate::storage::SampleSink;

/// An expression with at most one value per series per step, computed from that series'
/// samples alone.
#[derive(Clone, Copy)]
pub(crate) enum PerSeries<'e> {
    /// An instant vector selector: the latest sample in the lookback window, unless it is a
    /// staleness marker.
    Latest(&'e VectorSelector),
    /// A rollup over a range selector, e.g. `rate(x[5m])`, and its parameter, the same at every
    /// step (`predict_linear(x[1h], 3600)`; see [`shape::stepped_rollup`]).
    Rollup(Rollup, &'e MatrixSelector, Option<f64>),
}

impl<'e> PerSeries<'e> {
    /// The shape of `e`, through any parentheses, if it is one of these.
    pub(crate) fn of(e: &'e Expr) -> Option<Self> {
        match e {
            Expr::Paren(p) => Self::of(&p.expr),
            // An extended selector's values need samples beyond the plain window.
            Expr::VectorSelector(vs) if extended::of(vs).is_some() => None,
            Expr::VectorSelector(vs) => Some(Self::Latest(vs)),
            _ => shape::stepped_rollup(e).map(|(f, ms, param)| Self::Rollup(f, ms, param)),
        }
    }

    /// The selector whose loaded series feed this expression.
    pub(crate) fn selector(&self) -> &'e VectorSelector {
        match self {
            Self::Latest(vs) => vs,
            Self::Rollup(_, ms, _) => &ms.vs,
        }
    }

    /// Whether the results carry a pending metric-name drop.
    pub(crate) fn drops_name(&self) -> bool {
        match self {
            Self::Latest(_) => false,
            Self::Rollup(f, _, _) => rollup::drops_name(*f),
        }
    }

    /// This expression's per-step computation, resolved against `q`.
    pub(crate) fn stepper(&self, q: &Query) -> Stepper {
        match self {
            Self::Latest(vs) => {
                Stepper::Latest { pinned: q.at_ms(&vs.at), offset: offset_ms(&vs.offset), lookback: q.lookback_ms() }
            }
            Self::Rollup(f, ms, param) => Stepper::Rollup(*f, q.step_window(ms), *param),
        }
    }

    /// Calls `emit(i, value)`, in step order, for every outer step `i` of `grid` (`(first,
    /// step, count)`, see [`Query::part_grid`]) at which this expression has a value for the
    /// series with `samples`, one of the series loaded for [`PerSeries::selector`]. When the
    /// preload already reduced that selector's series to their values at every step of the
    /// query ([`Query::is_stepped`]), the values are read back; otherwise they are computed.
    pub(crate) fn each_step(
        &self,
        q: &Query,
        samples: &[Sample],
        grid: (i64, i64, usize),
        mut emit: impl FnMut(usize, f64),
    ) {
        if !q.is_stepped(self.selector()) {
            return self.stepper(q).each_step(samples, grid, emit);
        }
        let (first, step, steps) = grid;
        let from = samples.partition_point(|p| p.timestamp_ms < first);
        for p in samples.get(from..).unwrap_or_default() {
            let i = usize::try_from(p.timestamp_ms.saturating_sub(first) / step).unwrap_or(usize::MAX);
            if i >= steps {
                break;
            }
            emit(i, p.value);
        }
    }

    /// Calls `emit(i, point)`, in step order, for every step `i` of `grid` at which this
    /// expression has a value for `series`, a series holding native histograms (never reduced
    /// by the preload: see [`Stepper::reduce`]). Each step is computed on its own, by binary
    /// search, with annotations raised on `q`.
    pub(crate) fn each_mixed_point(
        &self,
        q: &Query,
        series: &SeriesSamples,
        (first, step, steps): (i64, i64, usize),
        mut emit: impl FnMut(usize, Point),
    ) {
        // Annotations refer to the selector (a rollup's is its range argument, as Prometheus
        // points at a call's first argument), even when an aggregation streams this input.
        q.within(self.node().0, || {
            for i in 0..steps {
                let t = grid_time(first, step, i);
                if let Some(p) = self.mixed_point_at(q, series, t) {
                    emit(i, p);
                }
            }
        })
    }

    /// The value of this expression at `t` for a series holding native histograms.
    fn mixed_point_at(&self, q: &Query, series: &SeriesSamples, t: i64) -> Option<Point> {
        match self {
            Self::Latest(vs) => {
                let te = q.at_ms(&vs.at).unwrap_or(t).saturating_sub(offset_ms(&vs.offset));
                points::latest(&series.samples, &series.histograms, te, q.lookback_ms()).map(|(p, _)| p)
            }
            Self::Rollup(f, ms, param) => {
                let (lo, hi) = q.step_window(ms).bounds(t);
                let floats: Vec<Sample> = step::between(&series.samples, lo, hi)
                    .iter()
                    .copied()
                    .filter(|p| !is_stale_marker(p.value))
                    .collect();
                let hists = points::live_histograms_between(&series.histograms, lo, hi);
                native_rollup::rollup_point(q, *f, &series.labels, &floats, &hists, (lo, hi, t), param.as_slice())
            }
        }
    }

    /// The cache key of this expression's node.
    fn node(&self) -> (usize, usize) {
        match self {
            Self::Latest(vs) => (*vs as *const VectorSelector as usize, usize::MAX - 1),
            Self::Rollup(f, ms, _) => (*ms as *const MatrixSelector as usize, *f as usize),
        }
    }
}

/// A [`PerSeries`] resolved against one query: plain data, so that it can run where the
/// samples are read (see [`Querier::select`](crate::storage::Querier::select)).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Stepper {
    /// See [`PerSeries::Latest`]: the `@` time, the offset and the lookback, in ms.
    Latest { pinned: Option<i64>, offset: i64, lookback: i64 },
    /// See [`PerSeries::Rollup`].
    Rollup(Rollup, StepWindow, Option<f64>),
}

impl Stepper {
    /// Calls `emit(i, value)`, in step order, for every step `i` of `grid` at which the
    /// expression has a value for a series with `samples`.
    pub(crate) fn each_step(&self, samples: &[Sample], grid: (i64, i64, usize), emit: impl FnMut(usize, f64)) {
        match *self {
            Self::Latest { pinned, offset, lookback } => {
                latest_each_step(pinned, offset, lookback, samples, grid, emit)
            }
            Self::Rollup(f, window, param) => rollup::each_step(f, window, param.as_slice(), samples, grid, emit),
        }
    }

    /// The expression's values at the steps of `grid` where it has one, each stamped with its
    /// step's time.
    pub(crate) fn step_samples(&self, samples: &[Sample], grid: (i64, i64, usize)) -> Vec<Sample> {
        let mut points = Vec::new();
        self.each_step(samples, grid, |i, v| points.push(Sample::new(grid_time(grid.0, grid.1, i), v)));
        points
    }

    /// Replaces `series`' samples by the expression's values at every step of `grid`, each
    /// stamped with its step's time. `drop_stale` first removes staleness markers, as the
    /// preload does for range selectors.
    ///
    /// A series holding native histograms is left as read (only its float staleness markers
    /// dropped, if asked): its values need annotations, which are raised where it is read
    /// (see [`PerSeries::each_mixed_point`]). A reduced series therefore never holds histograms.
    pub(crate) fn reduce(&self, series: &mut SeriesSamples, grid: (i64, i64, usize), drop_stale: bool) {
        if drop_stale {
            series.drop_stale_markers();
        }
        if !series.histograms.is_empty() {
            return;
        }
        let mut points = self.step_samples(&series.samples, grid);
        points.shrink_to_fit();
        // The samples read go back for the next series read on this thread.
        crate::spare_samples::give(std::mem::replace(&mut series.samples, points));
    }
}

impl Stepper {
    /// The samples the value at step time `t` reads: those in `(lo, hi]` (for a selector, the
    /// newest of them).
    fn reach(&self, t: i64) -> (i64, i64) {
        match *self {
            Self::Latest { pinned, offset, lookback } => {
                let te = pinned.unwrap_or(t).saturating_sub(offset);
                (te.saturating_sub(lookback), te)
            }
            Self::Rollup(_, window, _) => window.bounds(t),
        }
    }
}

/// [`Stepper::reduce`] as the samples are decoded: a [`SampleSink`] holding only the samples
/// the steps not yet computed still read. Each time a batch arrives, the steps whose reach ends
/// before its last sample are computed (no later sample can fall in them), then the samples
/// before the next step's reach are dropped. The values equal [`Stepper::reduce`]'s on the
/// whole series: each step is computed by [`Stepper::each_step`] over a buffer that holds every
/// sample of its reach.
pub(crate) struct StepSink<'r> {
    stepper: Stepper,
    grid: (i64, i64, usize),
    drop_stale: bool,
    buffer: Vec<Sample>,
    /// The first step not computed yet.
    next: usize,
    out: Vec<Sample>,
    /// Samples fed, over every sink of the selection.
    read: &'r AtomicUsize,
}

impl<'r> StepSink<'r> {
    /// A sink computing `stepper` at every step of `grid`, dropping staleness markers first when
    /// `drop_stale` (as the preload does for range selectors); counts what it is fed in `read`.
    pub(crate) fn new(stepper: Stepper, grid: (i64, i64, usize), drop_stale: bool, read: &'r AtomicUsize) -> Self {
        Self { stepper, grid, drop_stale, buffer: Vec::new(), next: 0, out: Vec::new(), read }
    }

    /// Computes the steps before `until` over the buffer, then drops the samples no later step
    /// reads.
    fn advance(&mut self, until: usize) {
        self.emit_buffered(until);
        self.trim();
    }

    /// Computes the steps from `next` to `until` over `samples`, which hold every sample their
    /// reaches hold.
    fn emit(&mut self, samples: &[Sample], until: usize) {
        let (first, step, _) = self.grid;
        if until > self.next {
            let from = grid_time(first, step, self.next);
            let out = &mut self.out;
            self.stepper.each_step(samples, (from, step, until - self.next), |i, v| {
                out.push(Sample::new(grid_time(from, step, i), v));
            });
            self.next = until;
        }
    }

    /// [`StepSink::emit`] over the buffer.
    fn emit_buffered(&mut self, until: usize) {
        let buffer = std::mem::take(&mut self.buffer);
        self.emit(&buffer, until);
        self.buffer = buffer;
    }

    /// Drops the buffered samples no later step reads: those up to the start of the next
    /// step's reach, which it returns, or all of them once every step is computed (`None`).
    fn trim(&mut self) -> Option<i64> {
        if self.next >= self.grid.2 {
            self.buffer.clear();
            return None;
        }
        let (lo, _) = self.reach_of(self.next);
        let cut = self.buffer.partition_point(|p| p.timestamp_ms <= lo);
        self.buffer.drain(..cut);
        Some(lo)
    }

    /// The reach of step `i`.
    fn reach_of(&self, i: usize) -> (i64, i64) {
        self.stepper.reach(grid_time(self.grid.0, self.grid.1, i))
    }

    /// The first step from `next` on whose reach does not end before `last`: the steps before
    /// it can be computed once a sample at `last` has arrived.
    fn due(&self, last: i64) -> usize {
        let mut until = self.next;
        while until < self.grid.2 && self.reach_of(until).1 < last {
            until += 1;
        }
        until
    }

    /// [`SampleSink::feed`] with the staleness markers dropped: the buffer takes the whole
    /// batch, filtered.
    fn feed_filtered(&mut self, batch: &[Sample]) {
        self.buffer.extend(batch.iter().filter(|p| !is_stale_marker(p.value)));
        let Some(last) = self.buffer.last().map(|p| p.timestamp_ms) else { return };
        self.advance(self.due(last));
    }
}

impl SampleSink for StepSink<'_> {
    /// The steps whose reach ends before the batch's last sample are computed: those that
    /// reach into the buffer over the buffer and the part of the batch they read, the others
    /// straight over the batch. Only the samples a later step reads are copied into the buffer.
    fn feed(&mut self, batch: &[Sample]) {
        self.read.fetch_add(batch.len(), Ordering::Relaxed);
        if self.next >= self.grid.2 {
            return;
        }
        if self.drop_stale && batch.iter().any(|p| is_stale_marker(p.value)) {
            return self.feed_filtered(batch);
        }
        let Some(last) = batch.last().map(|p| p.timestamp_ms) else { return };
        let until = self.due(last);
        // The buffer holds every sample fed after the next step's reach starts, all before the
        // batch's: the steps reaching before its last one read from it.
        let mut taken = 0;
        if let Some(buffered) = self.buffer.last().map(|p| p.timestamp_ms) {
            let mut mid = self.next;
            while mid < until && self.reach_of(mid).0 < buffered {
                mid += 1;
            }
            if mid > self.next {
                let hi = self.reach_of(mid - 1).1;
                taken = batch.partition_point(|p| p.timestamp_ms <= hi);
                self.buffer.extend_from_slice(&batch[..taken]);
                self.emit_buffered(mid);
            }
        }
        self.emit(batch, until);
        let Some(lo) = self.trim() else { return };
        let from = batch.partition_point(|p| p.timestamp_ms <= lo).max(taken);
        self.buffer.extend_from_slice(&batch[from..]);
    }

    fn finish(mut self: Box<Self>) -> Vec<Sample> {
        self.advance(self.grid.2);
        let mut out = std::mem::take(&mut self.out);
        out.shrink_to_fit();
        out
    }
}

/// [`PerSeries::Latest`] at every step: what `Query::select_instant` finds at each step, with
/// a cursor carried from step to step instead of a binary search per step.
fn latest_each_step(
    pinned: Option<i64>,
    offset: i64,
    lookback: i64,
    samples: &[Sample],
    (first, step, steps): (i64, i64, usize),
    mut emit: impl FnMut(usize, f64),
) {
    let mut idx = 0;
    for i in 0..steps {
        let te = pinned.unwrap_or_else(|| grid_time(first, step, i)).saturating_sub(offset);
        idx = seek(samples, idx, te);
        let Some(last) = idx.checked_sub(1).and_then(|j| samples.get(j)) else { continue };
        if last.timestamp_ms <= te.saturating_sub(lookback) || is_stale_marker(last.value) {
            continue;
        }
        emit(i, last.value);
    }
}

/// The value of `f(sq)`, a rollup without parameters that drops the metric name over a
/// subquery, at outer step `t` of a range query, from the values of all of the query part's
/// steps: the inner expression is evaluated once at every inner step the part's windows cover,
/// gathered into one series per label set, and each series is rolled up over all outer steps
/// as a range selector's samples are. (Per step, every outer step would rebuild every window
/// from the inner steps it covers.) `None` when `t` is not an outer step of this part, or when
/// the windows of consecutive steps leave gaps (a range shorter than the step): inner steps in
/// a gap are evaluated by no outer step, so this path must not evaluate them either.
pub(crate) fn subquery_step_vector(q: &Query, f: Rollup, sq: &SubqueryExpr, t: i64) -> Result<Option<Vec<Elem>>> {
    let Some((k, grid)) = q.part_step(t) else { return Ok(None) };
    let window = StepWindow { pinned: q.at_ms(&sq.at), offset: offset_ms(&sq.offset), range: dur_ms(sq.range) };
    if window.pinned.is_none() && window.range < grid.1 {
        return Ok(None);
    }
    let fill = || -> Result<StepValues> {
        let (first, step, steps) = grid;
        let last = grid_time(first, step, steps.max(1) - 1);
        let (lo, _) = window.bounds(first);
        let (_, hi) = window.bounds(last);
        let series = q.subquery_series(sq, lo, hi)?;
        let mut out: Vec<Vec<Elem>> = (0..steps).map(|_| Vec::new()).collect();
        for w in &series {
            q.check_deadline()?;
            if !w.histograms.is_empty() {
                mixed_window_steps(q, f, window, &w.labels, (&w.samples, &w.histograms), grid, &mut out);
                continue;
            }
            rollup::each_step(f, window, &[], &w.samples, grid, |i, v| {
                if let Some(slot) = out.get_mut(i) {
                    slot.push(Elem::new(w.labels.clone(), v, true));
                }
            });
        }
        Ok(out.into_iter().map(Some).collect())
    };
    let node = (sq as *const SubqueryExpr as usize, f as usize);
    q.rollup_cache(node, fill, k)
}

/// [`subquery_step_vector`] for one gathered series holding histograms: each step's window
/// rolled up on its own.
fn mixed_window_steps(
    q: &Query,
    f: Rollup,
    window: StepWindow,
    labels: &Labels,
    (floats, hists): (&[Sample], &[HistogramSample]),
    (first, step, steps): (i64, i64, usize),
    out: &mut [Vec<Elem>],
) {
    for i in 0..steps {
        let t = grid_time(first, step, i);
        let (lo, hi) = window.bounds(t);
        let fw = step::between(floats, lo, hi);
        let hw = points::histograms_between(hists, lo, hi);
        if let Some(p) = native_rollup::rollup_point(q, f, labels, fw, hw, (lo, hi, t), &[]) {
            if let Some(slot) = out.get_mut(i) {
                slot.push(Elem::of_point(labels.clone(), p, true));
            }
        }
    }
}

/// The value of `e` at outer step `t` of a range query, from the values of all of the query
/// part's steps, computed series by series at first use; in an instant query whose selector a
/// tier answered (`Query::read_tier`), each series' value at its time. `None` when `t` is not
/// an outer step of this part or was already taken, or the instant query's selector was read
/// as samples; the caller then evaluates the step alone (same result).
pub(crate) fn step_vector(q: &Query, e: PerSeries, t: i64) -> Result<Option<Vec<Elem>>> {
    let Some((k, grid)) = q.part_step(t) else {
        if q.part_grid().is_some() || !q.is_stepped(e.selector()) {
            return Ok(None);
        }
        // The tier read left each series its value at the query's time, stamped with that time
        // (any offset or `@` already applied).
        let drop = e.drops_name();
        let at = |s: &SeriesSamples| s.samples.iter().find(|p| p.timestamp_ms == t).map(|p| p.value);
        return Ok(Some(
            q.series_of(e.selector())
                .iter()
                .filter_map(|s| at(s).map(|v| Elem::new(s.labels.clone(), v, drop)))
                .collect(),
        ));
    };
    let fill = || -> Result<StepValues> {
        let mut out: Vec<Vec<Elem>> = (0..grid.2).map(|_| Vec::new()).collect();
        let drop = e.drops_name();
        // Held as the values grow (elements share the series' labels), where the query's other
        // parts see it, not only once the whole part is built: a part may hold many times the
        // budget. `rollup_cache` holds the finished values instead.
        let mut growing = GrowingHold::new(q, "computing step values");
        for series in q.series_of(e.selector()) {
            q.check_deadline()?;
            let mut elems = 0usize;
            if series.histograms.is_empty() {
                e.each_step(q, &series.samples, grid, |i, v| {
                    if let Some(slot) = out.get_mut(i) {
                        slot.push(Elem::new(series.labels.clone(), v, drop));
                        elems += 1;
                    }
                });
            } else {
                e.each_mixed_point(q, series, grid, |i, p| {
                    if let Some(slot) = out.get_mut(i) {
                        slot.push(Elem::of_point(series.labels.clone(), p, drop));
                        elems += 1;
                    }
                });
            }
            growing.add(elems.saturating_mul(std::mem::size_of::<Elem>()))?;
        }
        Ok(out.into_iter().map(Some).collect())
    };
    let value = q.rollup_cache(e.node(), fill, k)?;
    if value.is_none() && q.is_stepped(e.selector()) {
        // The per-step path cannot run on step values: it must never be reached.
        return Err(EvalError::exec("internal error: a step of a reduced selector was evaluated twice"));
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::labels::Labels;
    use crate::promql::functions::rollup::lookup;
    use crate::sample::STALE_NAN_BITS;

    /// A series: gaps of 1-30 s (mostly 15 s), counter-like values with resets, some staleness
    /// markers.
    fn series() -> impl Strategy<Value = Vec<Sample>> {
        proptest::collection::vec((prop_oneof![4 => Just(15_000i64), 1 => 1_000i64..30_000], 0u8..20), 0..400).prop_map(
            |points| {
                let (mut t, mut v) = (1_000_000i64, 0.0f64);
                points
                    .into_iter()
                    .map(|(gap, kind)| {
                        t += gap;
                        v = match kind {
                            0 => 0.0,
                            1 => return Sample::new(t, f64::from_bits(STALE_NAN_BITS)),
                            k => v + f64::from(k),
                        };
                        Sample::new(t, v)
                    })
                    .collect()
            },
        )
    }

    fn stepper() -> impl Strategy<Value = Stepper> {
        let names =
            ["rate", "increase", "delta", "changes", "resets", "max_over_time", "avg_over_time", "last_over_time"];
        prop_oneof![
            (prop::option::of(1_000_000i64..5_000_000), -60_000i64..600_000, 1_000i64..600_000)
                .prop_map(|(pinned, offset, lookback)| Stepper::Latest { pinned, offset, lookback }),
            (0..names.len(), prop::option::of(1_000_000i64..5_000_000), -60_000i64..600_000, 1_000i64..3_600_000)
                .prop_filter_map("a rollup", move |(f, pinned, offset, range)| {
                    lookup(names[f]).map(|f| Stepper::Rollup(f, StepWindow { pinned, offset, range }, None))
                }),
        ]
    }

    proptest! {
        /// Fed in any batches, the sink computes what the reduction of the whole series does,
        /// bit for bit.
        #[test]
        fn the_sink_equals_the_whole_series_reduction(
            samples in series(),
            stepper in stepper(),
            (first, step, steps) in (900_000i64..2_000_000, 1_000i64..900_000, 0usize..300),
            cuts in proptest::collection::vec(0usize..400, 0..12),
            drop_stale in any::<bool>(),
        ) {
            let grid = (first, step, steps);
            let mut whole = SeriesSamples { labels: Labels::empty(), samples: samples.clone(), histograms: Vec::new() };
            stepper.reduce(&mut whole, grid, drop_stale);
            let read = AtomicUsize::new(0);
            let mut sink: Box<dyn SampleSink> = Box::new(StepSink::new(stepper, grid, drop_stale, &read));
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(samples.len())).collect();
            cuts.push(samples.len());
            cuts.sort_unstable();
            let mut from = 0;
            for c in cuts {
                sink.feed(&samples[from..c]);
                from = c;
            }
            let streamed = sink.finish();
            let bits = |s: &[Sample]| s.iter().map(|p| (p.timestamp_ms, p.value.to_bits())).collect::<Vec<_>>();
            prop_assert_eq!(bits(&streamed), bits(&whole.samples));
            prop_assert_eq!(read.load(Ordering::Relaxed), samples.len());
        }
    }
}
