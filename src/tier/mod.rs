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
//! Not yet here: native histograms, and the server building, storing and reading tiers (the
//! tier-run format is in `storage::format::tier_run`).

pub mod point;

pub use point::{Exact, FloatPoint};
