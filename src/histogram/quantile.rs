//! PromQL's `histogram_quantile` and `histogram_fraction` on native histograms, with Prometheus
//! 3.x semantics (`HistogramQuantile`, `HistogramFraction` in its `promql/quantile.go`).
//!
//! Both walk the buckets in ascending order of value ([`Histogram::all_buckets`]: negative
//! buckets, the zero bucket when populated, positive buckets) and interpolate inside the bucket
//! where the rank or bound falls:
//!
//! | bucket                                   | interpolation                                  |
//! |------------------------------------------|------------------------------------------------|
//! | exponential (schemas -4..=8)             | exponential: linear in the log of the value    |
//! | custom (schema -53)                      | linear                                         |
//! | the zero bucket, or any bucket across 0  | linear                                         |
//!
//! A bucket across zero is taken as `[0, upper]` when the histogram has positive buckets only
//! and as `[lower, 0]` when it has negative buckets only (counted by bucket slots, as
//! Prometheus counts `len(PositiveBuckets)`). Observations of NaN raise the count but land in
//! no bucket (the sum is then NaN); the [`Note`] of an [`Estimate`] says so, for PromQL's info
//! annotations.

use std::cmp::Ordering;

use super::buckets::Bucket;
use super::types::Histogram;

/// A value estimated from a histogram's buckets, with the info annotation PromQL must raise
/// about it, if any.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Estimate {
    /// The estimate (NaN, ±Inf included).
    pub value: f64,
    /// What to tell the user about the estimate; at most one per estimate.
    pub note: Option<Note>,
}

impl Estimate {
    fn plain(value: f64) -> Self {
        Self { value, note: None }
    }
}

/// Why an estimate needs an info annotation. Each is a `PromQL info` in Prometheus; the text
/// is Prometheus' ([`Note::message`], [`Note::message_for`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Note {
    /// The quantile's rank lies beyond every bucket, among NaN observations: the value is NaN.
    QuantileNaN,
    /// The histogram has NaN observations, which the quantile counted as if above every
    /// bucket: the value is skewed higher.
    QuantileSkewedByNaN,
    /// The histogram has NaN observations, which no fraction includes (so
    /// `fraction(-Inf, +Inf)` is below 1).
    FractionExcludesNaN,
}

impl Note {
    /// Prometheus' annotation text, without the `PromQL info: ` prefix and the metric name.
    pub fn message(self) -> &'static str {
        match self {
            Self::QuantileNaN => "input to histogram_quantile has NaN observations, result is NaN",
            Self::QuantileSkewedByNaN => "input to histogram_quantile has NaN observations, result is skewed higher",
            Self::FractionExcludesNaN => {
                "input to histogram_fraction has NaN observations, which are excluded from all fractions"
            }
        }
    }

    /// [`Note::message`] followed by ` for metric name "<name>"`, as Prometheus words it; the
    /// bare message for an empty name.
    pub fn message_for(self, metric_name: &str) -> String {
        if metric_name.is_empty() {
            return self.message().to_owned();
        }
        format!("{} for metric name {metric_name:?}", self.message())
    }
}

/// `histogram_quantile(q, h)`: the value below which a fraction `q` of the observations lie.
///
/// - `q < 0` gives -Inf, `q > 1` +Inf, a NaN `q` or a zero count NaN (without a note).
/// - The bucket is found from below for `q < 0.5` or a NaN sum (NaN observations count as
///   above every bucket), else from above; empty buckets are skipped.
/// - Custom buckets: the first bucket (from -Inf) gives its upper bound if that is at most 0,
///   else is taken as starting at 0; the last (to +Inf) gives its lower bound.
/// - A rank beyond every bucket gives NaN with [`Note::QuantileNaN`] when the sum is NaN, else
///   the upper bound of the last bucket visited.
/// - With a NaN sum and observations missing from the buckets, [`Note::QuantileSkewedByNaN`].
///
/// Like Prometheus, with a NaN sum the interpolation uses the rank within the chosen bucket
/// but the bounds and count of the histogram's last bucket (Prometheus reuses its bucket
/// variable while counting the rest); kept so that answers match.
///
/// Never panics; a histogram whose spans and counts disagree is read as far as they agree.
pub fn quantile(q: f64, h: &Histogram) -> Estimate {
    if q < 0.0 {
        return Estimate::plain(f64::NEG_INFINITY);
    }
    if q > 1.0 {
        return Estimate::plain(f64::INFINITY);
    }
    if h.count == 0.0 || q.is_nan() {
        return Estimate::plain(f64::NAN);
    }
    let forward = h.sum.is_nan() || q < 0.5;
    let mut buckets: Vec<Bucket> = h.all_buckets().collect();
    if !forward {
        buckets.reverse();
    }
    let mut rest = buckets.into_iter();
    let rank = if forward { q * h.count } else { (1.0 - q) * h.count };
    let (mut bucket, mut count) = rank_bucket(&mut rest, rank);
    bucket = match settle_bounds(h, bucket) {
        Ok(b) => b,
        Err(value) => return Estimate::plain(value),
    };
    if count > h.count {
        count = h.count; // Rounding can make the bucket sum exceed the count.
    }
    if count < rank {
        if h.sum.is_nan() {
            return Estimate { value: f64::NAN, note: Some(Note::QuantileNaN) };
        }
        return Estimate::plain(bucket.upper);
    }
    let rank_in_bucket = if forward { rank - (count - bucket.count) } else { count - rank };
    let mut note = None;
    if h.sum.is_nan() {
        for b in rest {
            bucket = b;
            count += b.count;
        }
        if count < h.count {
            note = Some(Note::QuantileSkewedByNaN);
        }
    }
    Estimate { value: interpolate(h, &bucket, rank_in_bucket / bucket.count), note }
}

/// The first non-empty bucket at which the running count reaches `rank`, and that count; the
/// last bucket visited (or an empty `[0, 0]` one) and the total when none does.
fn rank_bucket(buckets: &mut impl Iterator<Item = Bucket>, rank: f64) -> (Bucket, f64) {
    let mut bucket =
        Bucket { lower: 0.0, upper: 0.0, count: 0.0, lower_inclusive: false, upper_inclusive: false, index: 0 };
    let mut count = 0.0;
    for b in buckets {
        bucket = b;
        if b.count == 0.0 {
            continue;
        }
        count += b.count;
        if count >= rank {
            break;
        }
    }
    (bucket, count)
}

/// The bounds to interpolate between: a zero bucket made one-sided, custom edge buckets
/// clipped at 0; `Err` with the answer where the bucket gives it directly (custom edges).
fn settle_bounds(h: &Histogram, mut b: Bucket) -> Result<Bucket, f64> {
    if !h.uses_custom_buckets() {
        if b.lower < 0.0 && b.upper > 0.0 {
            one_sided_zero_bucket(h, &mut b);
        }
        return Ok(b);
    }
    if b.lower == f64::NEG_INFINITY {
        if b.upper <= 0.0 {
            return Err(b.upper);
        }
        b.lower = 0.0;
    } else if b.upper == f64::INFINITY {
        return Err(b.lower);
    }
    Ok(b)
}

/// A bucket across zero starts at 0 when only positive buckets exist, and ends at 0 when only
/// negative ones do.
fn one_sided_zero_bucket(h: &Histogram, b: &mut Bucket) {
    if h.negative_buckets.is_empty() && !h.positive_buckets.is_empty() {
        b.lower = 0.0;
    } else if h.positive_buckets.is_empty() && !h.negative_buckets.is_empty() {
        b.upper = 0.0;
    }
}

/// The value a `fraction` (0..=1) of the way through bucket `b`.
fn interpolate(h: &Histogram, b: &Bucket, fraction: f64) -> f64 {
    if h.uses_custom_buckets() || (b.lower <= 0.0 && b.upper >= 0.0) {
        return b.lower + (b.upper - b.lower) * fraction;
    }
    let (log_lower, log_upper) = (b.lower.abs().log2(), b.upper.abs().log2());
    if b.lower > 0.0 {
        return (log_lower + (log_upper - log_lower) * fraction).exp2();
    }
    -(log_upper + (log_lower - log_upper) * (1.0 - fraction)).exp2()
}

/// `histogram_fraction(lower, upper, h)`: the estimated share of observations between `lower`
/// and `upper`, interpolated as [`quantile`] does (its inverse for a point inside a bucket).
///
/// - A zero count or a NaN bound gives NaN; `lower >= upper` gives 0 (no note for either).
/// - -Inf and +Inf bounds take everything below or above; an infinite-width custom bucket (the
///   first when its bound is negative, the last) contributes nothing to an interpolated bound.
/// - A bound on a bucket boundary counts that boundary's bucket below it.
/// - With a NaN sum, NaN observations are in no fraction; if the buckets hold fewer
///   observations than the count, [`Note::FractionExcludesNaN`].
///
/// The result is in `[0, 1]` for a histogram with non-negative counts whose buckets add up to
/// at most its count. Never panics.
pub fn fraction(lower: f64, upper: f64, h: &Histogram) -> Estimate {
    if h.count == 0.0 || lower.is_nan() || upper.is_nan() {
        return Estimate::plain(f64::NAN);
    }
    if lower >= upper {
        return Estimate::plain(0.0);
    }
    let mut buckets = h.all_buckets();
    let mut walk = RankWalk { lower, upper, rank: 0.0, count: 0.0, lower_rank: None, upper_rank: None };
    for b in buckets.by_ref() {
        if walk.visit(h, b) {
            break;
        }
    }
    let (mut count, mut note) = (walk.count, None);
    if h.sum.is_nan() {
        for b in buckets {
            count += b.count;
        }
        if count < h.count {
            note = Some(Note::FractionExcludesNaN);
        }
    } else {
        count = h.count;
    }
    let capped = |r: Option<f64>| match r {
        Some(r) if r.partial_cmp(&count) != Some(Ordering::Greater) => r,
        _ => count,
    };
    Estimate { value: (capped(walk.upper_rank) - capped(walk.lower_rank)) / h.count, note }
}

/// The state of [`fraction`]'s walk up the buckets.
struct RankWalk {
    lower: f64,
    upper: f64,
    /// Observations in the buckets below the current one.
    rank: f64,
    /// Observations in the buckets visited, the current one included.
    count: f64,
    /// Observations below `lower`, once known.
    lower_rank: Option<f64>,
    /// Observations below `upper`, once known.
    upper_rank: Option<f64>,
}

impl RankWalk {
    /// Takes in the next bucket; true when both ranks are known.
    fn visit(&mut self, h: &Histogram, mut b: Bucket) -> bool {
        self.count += b.count;
        let across_zero = b.lower <= 0.0 && b.upper >= 0.0;
        if across_zero {
            one_sided_zero_bucket(h, &mut b);
        }
        let linear = h.uses_custom_buckets() || across_zero;
        let rank = self.rank;
        if self.lower_rank.is_none() && b.lower >= self.lower {
            self.lower_rank = Some(rank);
        }
        if self.upper_rank.is_none() && b.lower >= self.upper {
            self.upper_rank = Some(rank);
        }
        if self.lower_rank.is_some() && self.upper_rank.is_some() {
            return true;
        }
        for (bound, slot) in [(self.lower, &mut self.lower_rank), (self.upper, &mut self.upper_rank)] {
            if slot.is_none() && b.lower < bound && b.upper > bound {
                *slot = Some(rank_below(bound, &b, rank, linear));
            }
        }
        if self.lower_rank.is_some() && self.upper_rank.is_some() {
            return true;
        }
        self.rank += b.count;
        false
    }
}

/// Observations below `v` (strictly inside bucket `b`), given `rank` below the bucket. A bucket
/// from -Inf cannot be interpolated in and counts whole.
fn rank_below(v: f64, b: &Bucket, rank: f64, linear: bool) -> f64 {
    if !linear {
        return rank + b.count * log_fraction_below(v, b);
    }
    if b.lower == f64::NEG_INFINITY {
        return b.count;
    }
    rank + b.count * ((v - b.lower) / (b.upper - b.lower))
}

/// The share of exponential bucket `b` below `v`, linear in `log2 |x|` (mirrored for negative
/// buckets).
fn log_fraction_below(v: f64, b: &Bucket) -> f64 {
    let (log_lower, log_upper, log_v) = (b.lower.abs().log2(), b.upper.abs().log2(), v.abs().log2());
    if v > 0.0 {
        return (log_v - log_lower) / (log_upper - log_lower);
    }
    1.0 - (log_v - log_upper) / (log_lower - log_upper)
}
