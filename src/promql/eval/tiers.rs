//! A rollup's step values read from downsampled tier points instead of raw samples (see
//! `docs/tiers.md`): which tier a selector may read ([`choose`]) and, from the points the
//! storage returns, each series' values at every step ([`step_values`]), the shape the
//! preload's reduction gives (see `grid.rs`).

use super::grid::Stepper;
use crate::promql::functions::rollup::Rollup;
use crate::promql::functions::tier_rollup;
use crate::promql::step::{grid_time, StepWindow};
use crate::sample::Sample;
use crate::storage::SeriesPoints;
use crate::tier::FloatPoint;

/// Which tiers a query may read: the `max_source_resolution` request parameter.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SourceResolution {
    /// The coarsest tier [`choose`] allows.
    #[default]
    Auto,
    /// Raw samples only.
    Raw,
    /// Tiers of at most this interval (ms).
    Max(i64),
}

impl SourceResolution {
    /// `auto`, `raw`, or a duration as the query API takes durations: `5m`, `1h`, or seconds
    /// (`300`, as Thanos reads it); `0s` and `0` are `raw`.
    ///
    /// # Errors
    /// What is wrong with any other text.
    pub fn parse(s: &str) -> Result<Self, String> {
        let ms = match s {
            "auto" => return Ok(Self::Auto),
            "raw" => return Ok(Self::Raw),
            _ => match s.parse::<f64>() {
                Ok(secs) if secs.is_finite() && secs >= 0.0 && secs * 1e3 <= i64::MAX as f64 => {
                    Some((secs * 1e3).round() as i64)
                }
                Ok(_) => None,
                Err(_) => crate::duration::parse_ms(s).ok(),
            },
        };
        match ms {
            Some(0) => Ok(Self::Raw),
            Some(ms) if ms > 0 => Ok(Self::Max(ms)),
            _ => Err(format!("{s:?} is not auto, raw or a duration such as 5m or 1h")),
        }
    }

    fn allows(self, interval_ms: i64) -> bool {
        match self {
            Self::Auto => true,
            Self::Raw => false,
            Self::Max(ms) => interval_ms <= ms,
        }
    }
}

/// The fewest raw samples a tier point must stand for on average for `auto` to read the tier
/// (see [`crate::storage::PointsRead::min_density`] and [`crate::tier::MIN_DENSITY`]).
pub(crate) const AUTO_MIN_DENSITY: u64 = crate::tier::MIN_DENSITY;

/// A tier read planned for one selector.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TierRead {
    /// The tier's interval, ms.
    pub interval_ms: i64,
    /// The first and last interval ends the steps read.
    pub ends: (i64, i64),
    /// See [`AUTO_MIN_DENSITY`]: `0` when the request named a resolution.
    pub min_density: u64,
    /// The steps' windows are not whole intervals: each takes the points ending inside it, so
    /// its edges move by less than an interval (only where raw samples are gone).
    pub approximate: bool,
}

/// The time range `(start, end]` rollups over `window` at the steps of `grid` read.
pub(crate) fn read_range(window: StepWindow, (first, step, steps): (i64, i64, usize)) -> (i64, i64) {
    let (start, _) = window.bounds(first);
    let (_, end) = window.bounds(grid_time(first, step, steps.saturating_sub(1)));
    (start, end)
}

/// The coarsest of `intervals` (ms) from which rollup `f` over `window` at every step of
/// `grid` (`(first, step, count)`, a range query's) is answered: one `allowed` lets read, at
/// most a fifth of the step and half the range, and [`tier_rollup::aligned`] with the grid.
/// Never for a single step (an instant query, or a range query of one step, which answers as
/// the instant query at its time does), unless the range reaches downsampled windows (below):
/// then with no bound from the step.
///
/// Where the range reaches downsampled windows (`downsampled`: the finest interval they all
/// keep), only that interval or coarser ones answer there, and raw samples are no alternative:
/// then any aligned interval up to the step and the range is taken, however sparse its points;
/// failing that (Grafana's `$__rate_interval` is a step plus a scrape interval), the finest
/// kept interval up to the step and the range answers [`approximate`](TierRead::approximate)ly.
pub(crate) fn choose(
    f: Rollup,
    window: StepWindow,
    grid: (i64, i64, usize),
    (intervals, downsampled): (&[i64], Option<i64>),
    allowed: SourceResolution,
) -> Option<TierRead> {
    let (_, step, steps) = grid;
    // A single step (an instant query, a range query of one step) reads points only where raw
    // samples are gone, with no step to bound the interval.
    let single = steps == 1 && downsampled.is_some();
    if !tier_rollup::answers(f) || (!single && (steps < 2 || step <= 0)) {
        return None;
    }
    let step = if single { i64::MAX } else { step };
    let (step_share, range_share) = if downsampled.is_some() { (1, 1) } else { (5, 2) };
    let interval_ms = intervals.iter().copied().filter(|&i| {
        i > 0
            && allowed.allows(i)
            && downsampled.is_none_or(|finest| i >= finest)
            && i.saturating_mul(step_share) <= step
            && i.saturating_mul(range_share) <= window.range
            && tier_rollup::aligned(window, grid, i)
    });
    let (start, end) = read_range(window, grid);
    let Some(interval_ms) = interval_ms.max() else {
        return approximate(window, step, (intervals, downsampled?), allowed, (start, end));
    };
    let min_density = if allowed == SourceResolution::Auto && downsampled.is_none() { AUTO_MIN_DENSITY } else { 0 };
    Some(TierRead { interval_ms, ends: (start.saturating_add(interval_ms), end), min_density, approximate: false })
}

/// The approximate read of [`choose`] over downsampled windows keeping `finest` and coarser.
fn approximate(
    window: StepWindow,
    step: i64,
    (intervals, finest): (&[i64], i64),
    allowed: SourceResolution,
    (start, end): (i64, i64),
) -> Option<TierRead> {
    if window.pinned.is_some() {
        return None;
    }
    let interval_ms = intervals
        .iter()
        .copied()
        .filter(|&i| i >= finest && allowed.allows(i) && i <= step && i <= window.range)
        .min()?;
    // The intervals ending inside the read range, as `tier_rollup::each_step` takes them.
    let first_end = start.saturating_add(interval_ms).saturating_sub(start.rem_euclid(interval_ms));
    let last_end = end.saturating_sub(end.rem_euclid(interval_ms));
    (first_end <= last_end).then_some(TierRead {
        interval_ms,
        ends: (first_end, last_end),
        min_density: 0,
        approximate: true,
    })
}

/// The tier read of a plain selector (see [`Stepper::Latest`]) at every step of `grid`
/// (`(first, step, count)`), where the selection reaches downsampled windows (`downsampled`:
/// the finest interval they all keep): the finest kept interval `allowed` lets read, when every
/// step's time (less the offset, or the `@` time) is on its grid. There the answer is exact
/// (see [`latest_values`]); elsewhere `None`, and the caller reads raw samples.
pub(crate) fn choose_latest(
    (pinned, offset, lookback): (Option<i64>, i64, i64),
    (first, step, steps): (i64, i64, usize),
    (intervals, downsampled): (&[i64], Option<i64>),
    allowed: SourceResolution,
) -> Option<TierRead> {
    let finest = downsampled?;
    let interval_ms = intervals.iter().copied().filter(|&i| i >= finest && i > 0 && allowed.allows(i)).min()?;
    let te = |t: i64| pinned.unwrap_or(t).saturating_sub(offset);
    let (te_first, te_last) = (te(first), te(grid_time(first, step, steps.saturating_sub(1))));
    let on_grid = te_first.rem_euclid(interval_ms) == 0
        && (pinned.is_some() || steps <= 1 || (step > 0 && step.rem_euclid(interval_ms) == 0));
    // The intervals holding samples of the first step's reach `(te_first - lookback, te_first]`
    // and after.
    let first_end =
        te_first.saturating_sub(lookback).div_euclid(interval_ms).saturating_add(1).saturating_mul(interval_ms);
    (on_grid && lookback > 0 && first_end <= te_last).then_some(TierRead {
        interval_ms,
        ends: (first_end, te_last),
        min_density: 0,
        approximate: false,
    })
}

/// Replaces one series' tier points by a plain selector's values at the steps of `grid`, as
/// the preload's reduction leaves a series. The points stand for their raw samples as each
/// interval's last sample (its real time and value) followed, when the interval ended with a
/// staleness marker, by a marker at the interval's end. At a time on the interval grid (what
/// [`choose_latest`] makes sure of) the newest raw sample at or before it is the last one of
/// the newest interval ending at or before it, or that interval's marker (which is no later
/// than the interval's end), so each step reads exactly what it reads from the raw samples:
/// the same value, the same lookback, the same staleness.
pub(crate) fn latest_values(stepper: Stepper, grid: (i64, i64, usize), series: &mut SeriesPoints) {
    let mut samples = Vec::with_capacity(series.points.len() + 1);
    for (end, p) in &series.points {
        if p.count > 0 {
            samples.push(p.last);
        }
        if p.ends_stale {
            samples.push(Sample::new(*end, f64::from_bits(crate::sample::STALE_NAN_BITS)));
        }
    }
    series.points = Vec::new();
    series.values = stepper.step_samples(&samples, grid);
}

/// Replaces one series' tier points by the values of `f` at the steps of `grid` (each stamped
/// with its step's time), as the preload's reduction leaves a series. `f` must be one
/// [`tier_rollup::answers`] ([`choose`] makes sure).
pub(crate) fn step_values(
    (f, param): (Rollup, Option<f64>),
    window: StepWindow,
    (grid, interval): ((i64, i64, usize), i64),
    series: &mut SeriesPoints,
) {
    let mut values = Vec::new();
    let answered = tier_rollup::each_step((f, param.as_slice()), window, (interval, &series.points), grid, |i, v| {
        values.push(Sample::new(grid_time(grid.0, grid.1, i), v));
    });
    debug_assert!(answered.is_ok(), "BUG: a tier was chosen for a rollup points do not answer");
    series.points = Vec::new();
    series.values = values;
}

/// Calls `each(i, n)` with the number `n` of `points` (`(end, point)`, ascending) in the window
/// of each step `i` of `grid`: what a measured query counts as the samples that step read.
pub(crate) fn count_per_step(
    window: StepWindow,
    (first, step, steps): (i64, i64, usize),
    points: &[(i64, FloatPoint)],
    mut each: impl FnMut(usize, u64),
) {
    for i in 0..steps {
        let (start, end) = window.bounds(grid_time(first, step, i));
        let a = points.partition_point(|(e, _)| *e <= start);
        let b = points.partition_point(|(e, _)| *e <= end).max(a);
        if b > a {
            each(i, u64::try_from(b - a).unwrap_or(u64::MAX));
        }
    }
}

#[cfg(test)]
#[path = "tiers_tests.rs"]
mod engine_tests;

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: i64 = 60_000;
    const TIERS: [i64; 2] = [5 * MIN, 60 * MIN];

    fn window(range: i64) -> StepWindow {
        StepWindow { pinned: None, offset: 0, range }
    }

    #[test]
    fn the_coarsest_allowed_aligned_tier_is_chosen() {
        let day = 24 * 60 * MIN;
        let grid = |step: i64| (100 * day, step, 30);
        // 1h step, 1h range: 5m (1h is more than a fifth of the step).
        let r = choose(Rollup::Rate, window(60 * MIN), grid(60 * MIN), (&TIERS, None), SourceResolution::Auto);
        let ends = (100 * day - 55 * MIN, 100 * day + 29 * 60 * MIN);
        assert_eq!(r, Some(TierRead { interval_ms: 5 * MIN, ends, min_density: AUTO_MIN_DENSITY, approximate: false }));
        // 1d step and range: 1h.
        let r = choose(Rollup::Avg, window(day), grid(day), (&TIERS, None), SourceResolution::Auto);
        assert_eq!(r.map(|r| r.interval_ms), Some(60 * MIN));
        // Capped by max_source_resolution.
        let r = choose(Rollup::Avg, window(day), grid(day), (&TIERS, None), SourceResolution::Max(5 * MIN));
        assert_eq!(r.map(|r| (r.interval_ms, r.min_density)), Some((5 * MIN, 0)));
        assert_eq!(choose(Rollup::Avg, window(day), grid(day), (&TIERS, None), SourceResolution::Raw), None);
        // A 5m range at a 30m step: no tier is at most half the range.
        assert_eq!(choose(Rollup::Rate, window(5 * MIN), grid(30 * MIN), (&TIERS, None), SourceResolution::Auto), None);
        // Unaligned start, offset or step; a function points cannot answer; an instant query.
        let odd = (100 * day + 90_000, 60 * MIN, 30);
        assert_eq!(choose(Rollup::Rate, window(60 * MIN), odd, (&TIERS, None), SourceResolution::Auto), None);
        let offset = StepWindow { pinned: None, offset: 60_000, range: 60 * MIN };
        assert_eq!(choose(Rollup::Rate, offset, grid(60 * MIN), (&TIERS, None), SourceResolution::Auto), None);
        assert_eq!(
            choose(Rollup::Rate, window(60 * MIN), grid(61 * MIN), (&TIERS, None), SourceResolution::Auto),
            None
        );
        assert_eq!(choose(Rollup::Quantile, window(day), grid(day), (&TIERS, None), SourceResolution::Auto), None);
        assert_eq!(choose(Rollup::Rate, window(day), (100 * day, 0, 1), (&TIERS, None), SourceResolution::Auto), None);
        // A range query of one step answers as the instant query at its time: raw too.
        assert_eq!(
            choose(Rollup::Rate, window(day), (100 * day, day, 1), (&TIERS, None), SourceResolution::Auto),
            None
        );
        assert!(
            choose(Rollup::Rate, window(day), (100 * day, day, 2), (&TIERS, None), SourceResolution::Auto).is_some()
        );
    }

    #[test]
    fn where_raw_samples_are_gone_any_aligned_kept_interval_answers() {
        let day = 24 * 60 * MIN;
        let grid = |step: i64| (100 * day, step, 30);
        // 1h step and range: 5m normally; with the range downsampled to 1h, the 1h points.
        let r =
            choose(Rollup::Rate, window(60 * MIN), grid(60 * MIN), (&TIERS, Some(60 * MIN)), SourceResolution::Auto);
        assert_eq!(r.map(|r| (r.interval_ms, r.min_density)), Some((60 * MIN, 0)));
        // 5m kept: read however sparse (raw samples are no alternative).
        let r = choose(Rollup::Rate, window(60 * MIN), grid(60 * MIN), (&TIERS, Some(5 * MIN)), SourceResolution::Auto);
        assert_eq!(r.map(|r| (r.interval_ms, r.min_density)), Some((60 * MIN, 0)));
        // A 5m range at a 5m step reads the 5m points, not raw samples.
        let r = choose(Rollup::Rate, window(5 * MIN), grid(5 * MIN), (&TIERS, Some(5 * MIN)), SourceResolution::Auto);
        assert_eq!(r.map(|r| r.interval_ms), Some(5 * MIN));
        // Nothing finer than what is kept; `raw` or a lower cap reads raw.
        assert_eq!(
            choose(Rollup::Rate, window(5 * MIN), grid(5 * MIN), (&TIERS, Some(60 * MIN)), SourceResolution::Auto),
            None
        );
        // Unaligned (Grafana's `$__rate_interval`: the step plus a scrape, or a start off the
        // hour): the finest kept interval, approximately, over the intervals ending inside.
        let odd = (100 * day + 90_000, 60 * MIN, 30);
        let r = choose(Rollup::Rate, window(60 * MIN), odd, (&TIERS, Some(5 * MIN)), SourceResolution::Auto);
        let ends = (100 * day - 55 * MIN, 100 * day + 29 * 60 * MIN);
        assert_eq!(r, Some(TierRead { interval_ms: 5 * MIN, ends, min_density: 0, approximate: true }));
        let r = choose(
            Rollup::Rate,
            window(60 * MIN + 15_000),
            grid(60 * MIN),
            (&TIERS, Some(60 * MIN)),
            SourceResolution::Auto,
        );
        assert_eq!(
            r.map(|r| (r.interval_ms, r.ends, r.approximate)),
            Some((60 * MIN, (100 * day - 60 * MIN, 100 * day + 29 * 60 * MIN), true))
        );
        // Not without downsampled windows (raw samples answer exactly), nor over a range shorter
        // than the interval.
        assert_eq!(choose(Rollup::Rate, window(60 * MIN), odd, (&TIERS, None), SourceResolution::Auto), None);
        assert_eq!(
            choose(Rollup::Rate, window(2 * MIN), grid(60 * MIN), (&TIERS, Some(5 * MIN)), SourceResolution::Auto),
            None
        );
        assert_eq!(
            choose(Rollup::Rate, window(60 * MIN), grid(60 * MIN), (&TIERS, Some(5 * MIN)), SourceResolution::Raw),
            None
        );
        assert_eq!(
            choose(
                Rollup::Rate,
                window(60 * MIN),
                grid(60 * MIN),
                (&TIERS, Some(60 * MIN)),
                SourceResolution::Max(5 * MIN)
            ),
            None
        );
    }

    #[test]
    fn max_source_resolution_is_auto_raw_or_a_duration() {
        assert_eq!(SourceResolution::parse("auto"), Ok(SourceResolution::Auto));
        assert_eq!(SourceResolution::parse("raw"), Ok(SourceResolution::Raw));
        assert_eq!(SourceResolution::parse("0s"), Ok(SourceResolution::Raw));
        assert_eq!(SourceResolution::parse("5m"), Ok(SourceResolution::Max(5 * MIN)));
        assert_eq!(SourceResolution::parse("1h"), Ok(SourceResolution::Max(60 * MIN)));
        assert_eq!(SourceResolution::parse("1h30m"), Ok(SourceResolution::Max(90 * MIN)));
        // Seconds, as the query API's other durations and Thanos take them.
        assert_eq!(SourceResolution::parse("300"), Ok(SourceResolution::Max(5 * MIN)));
        assert_eq!(SourceResolution::parse("0"), Ok(SourceResolution::Raw));
        for bad in ["", "fine", "-5m", "5x", "-300", "NaN", "inf", "Auto", "5 m"] {
            assert!(SourceResolution::parse(bad).is_err(), "{bad}");
        }
    }
}
