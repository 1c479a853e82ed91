//! PromQL's `histogram_stdvar` and `histogram_stddev` on native histograms, with Prometheus 3.x
//! semantics (`histogramVariance` in its `promql/functions.go`): every observation is taken to
//! sit at its bucket's midpoint, the mean is `sum / count`.
//!
//! | bucket                                 | midpoint                                     |
//! |----------------------------------------|----------------------------------------------|
//! | custom (schema -53)                    | `(lower + upper) / 2` (±Inf for the edges)   |
//! | the zero bucket, or any bucket across 0 | 0                                            |
//! | exponential                            | `±sqrt(lower * upper)`, the geometric mean    |

use super::buckets::Bucket;
use super::types::Histogram;
use crate::kahan::kahan_inc;

/// `histogram_stdvar(h)`: the population variance of the observations around `sum / count`,
/// the squared deviations summed with Kahan-Neumaier compensation over the non-empty buckets
/// in ascending order. NaN for a zero count or a NaN sum, +Inf for an infinite sum (or a
/// populated custom edge bucket). Never panics.
pub fn std_var(h: &Histogram) -> f64 {
    let mean = h.sum / h.count;
    let (mut variance, mut compensation) = (0.0, 0.0);
    for b in h.all_buckets().filter(|b| b.count != 0.0) {
        let delta = midpoint(h, &b) - mean;
        (variance, compensation) = kahan_inc(b.count * delta * delta, variance, compensation);
    }
    (variance + compensation) / h.count
}

/// `histogram_stddev(h)`: the square root of [`std_var`].
pub fn std_dev(h: &Histogram) -> f64 {
    std_var(h).sqrt()
}

/// Where the observations of bucket `b` are taken to be.
fn midpoint(h: &Histogram, b: &Bucket) -> f64 {
    if h.uses_custom_buckets() {
        return (b.upper + b.lower) / 2.0;
    }
    if b.lower <= 0.0 && b.upper >= 0.0 {
        return 0.0;
    }
    let geometric = (b.upper * b.lower).sqrt();
    if b.upper < 0.0 {
        -geometric
    } else {
        geometric
    }
}
