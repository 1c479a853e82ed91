//! Downsampled tiers: what is kept of a series per interval (5 minutes, an hour, ...) once its
//! raw samples are old, so that a long range is read as one aggregate per interval instead of
//! every raw sample.
//!
//! - [`FloatPoint`]: the aggregate of one series' float samples in one interval
//!   `(end - interval, end]`, holding what every PromQL range function needs to answer from it
//!   without the samples.
//! - Points of adjacent intervals [`merge`](FloatPoint::merge) into the point of their union, so
//!   a 1h tier is built from 5m points without going back to raw, and a query window of many
//!   intervals folds its points into one.
//!
//! The invariant that makes answers from tiers exact: for samples cut anywhere into
//! consecutive parts, the merge of the parts' points equals the point of all the samples, to
//! the bit in every count, sample, flag, minimum and maximum, exactly in the integer moments
//! (of the times, and of the values when they are short decimals: [`Exact`]), and within
//! floating-point rounding in the float sums and moments (they add in a different order).
//! `promql::functions::tier_rollup` turns a point into each function's value; its tests
//! check both, against the raw samples.
//!
//! Stored by `storage::format::tier_rows` (a seal writes them, `Querier::select_points` reads
//! them); not yet here: native histograms.

pub mod point;

pub use point::{Exact, Fields, FloatPoint};

use crate::sample::Sample;

/// The fewest raw samples a tier point must stand for on average for points to be worth
/// storing and reading: decoding and merging a point costs about as much as decoding 20 to 60
/// raw samples, so sparser points read slower than the samples they stand for (the 5m points
/// of a 60 s scrape, 5 samples each, read 12x slower in `saltdb-bench longrange`). A seal
/// stores no tier row sparser than this (the points are cut from the raw samples when asked
/// for, equal and faster); queries read points by default only this dense. Downsampling, which
/// drops the raw samples, stores its rows whatever their density.
pub const MIN_DENSITY: u64 = 100;

/// Points of a series in a window up to this many (a series present for part of a window) do
/// not decide on density.
pub const DENSITY_MIN_POINTS: usize = 8;

/// Whether `points` (one series' in one window) are too sparse for `min_density` (see
/// [`MIN_DENSITY`]); `0` never is.
pub fn too_sparse(points: &[(i64, FloatPoint)], min_density: u64) -> bool {
    points.len() > DENSITY_MIN_POINTS
        && points.iter().map(|(_, p)| p.count).sum::<u64>() < min_density.saturating_mul(points.len() as u64)
}

/// The end of the interval `(end - interval_ms, end]` holding time `t` (`interval_ms > 0`,
/// `t` a sample time: within `0..=MAX_TIMESTAMP_MS`).
fn interval_end(t: i64, interval_ms: i64) -> i64 {
    (t + interval_ms - 1).div_euclid(interval_ms) * interval_ms
}

/// The points of one series' raw `samples` (time order, staleness markers included), one per
/// interval `(end - interval_ms, end]` holding samples, with its end, in ascending order.
pub fn points_of(samples: &[Sample], interval_ms: i64) -> Vec<(i64, FloatPoint)> {
    let mut out = Vec::new();
    let mut rest = samples;
    while let Some(first) = rest.first() {
        let end = interval_end(first.timestamp_ms, interval_ms);
        let (inside, after) = rest.split_at(rest.partition_point(|s| s.timestamp_ms <= end));
        if let Some(p) = FloatPoint::of(inside) {
            out.push((end, p));
        }
        rest = after;
    }
    out
}

/// How many intervals of `interval_ms` hold samples of `samples` (ascending): the number of
/// points [`points_of`] cuts, found without cutting them.
pub fn intervals_holding(samples: &[Sample], interval_ms: i64) -> usize {
    let mut n = 0;
    let mut last = None;
    for s in samples {
        let end = interval_end(s.timestamp_ms, interval_ms);
        if last != Some(end) {
            n += 1;
            last = Some(end);
        }
    }
    n
}

/// `fine` points (with their ends, ascending) merged into the coarser intervals of
/// `interval_ms` (a multiple of theirs): 5-minute points into hours.
pub fn coarser(fine: &[(i64, FloatPoint)], interval_ms: i64) -> Vec<(i64, FloatPoint)> {
    let mut out: Vec<(i64, FloatPoint)> = Vec::new();
    for &(end, p) in fine {
        let coarse_end = interval_end(end, interval_ms);
        match out.last_mut() {
            Some((e, acc)) if *e == coarse_end => *acc = acc.merge(&p),
            _ => out.push((coarse_end, p)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn intervals_holding_counts_the_points_cut(gaps in proptest::collection::vec(1i64..400_000, 0..300), interval in 1i64..900_000) {
            let mut t = 0;
            let samples: Vec<Sample> = gaps.iter().map(|g| { t += g; Sample::new(t, 1.0) }).collect();
            prop_assert_eq!(intervals_holding(&samples, interval), points_of(&samples, interval).len());
        }
    }
}
