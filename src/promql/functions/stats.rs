//! Numerics shared by rollups and aggregations: compensated sums, means, quantiles and the
//! least-squares fit, each following Prometheus' float behaviour (NaN and ±Inf included).

use crate::kahan::kahan_inc;
use crate::sample::Sample;

/// A running Kahan-Neumaier sum: [`KahanSum::add`] values one at a time, read the sum with
/// [`KahanSum::value`] at any point. Same arithmetic, in the same order, as [`kahan_sum`].
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct KahanSum {
    sum: f64,
    c: f64,
}

impl KahanSum {
    pub(crate) fn add(&mut self, v: f64) {
        (self.sum, self.c) = kahan_inc(v, self.sum, self.c);
    }

    pub(crate) fn value(&self) -> f64 {
        if self.sum.is_infinite() {
            self.sum
        } else {
            self.sum + self.c
        }
    }
}

/// Compensated sum of `values`.
pub(crate) fn kahan_sum<I>(values: I) -> f64
where
    I: IntoIterator<Item = f64>,
    I::IntoIter: Clone,
{
    let values = values.into_iter();
    if let Some((sum, c, _)) = finite_neumaier(values.clone()) {
        return sum + c;
    }
    let mut sum = KahanSum::default();
    for v in values {
        sum.add(v);
    }
    sum.value()
}

/// Neumaier's running sum of `values` (the arithmetic of [`kahan_inc`], in the same order)
/// without its check for an infinite partial sum, with the count of values: `(sum, c, n)`,
/// the same `sum` and `c` as [`KahanSum`] gives, whenever that sum is finite, and `None`
/// otherwise. A partial sum that overflows stays infinite or turns NaN, never finite again, so
/// a finite result means the check never fired. Without it the loop is one dependent addition
/// per value: the long-range rollups (`sum_over_time`, `avg_over_time` over days) spend their
/// time here.
fn finite_neumaier(values: impl Iterator<Item = f64>) -> Option<(f64, f64, usize)> {
    let (mut sum, mut c, mut n) = (0.0f64, 0.0f64, 0usize);
    for inc in values {
        let t = sum + inc;
        c += if sum.abs() >= inc.abs() { (sum - t) + inc } else { (inc - t) + sum };
        sum = t;
        n += 1;
    }
    sum.is_finite().then_some((sum, c, n))
}

/// A running arithmetic mean that survives overflow: a compensated sum while it stays finite,
/// an incremental mean once it would overflow. [`Mean::value`] of no values is NaN.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Mean {
    sum: f64,
    c: f64,
    count: f64,
    mean: f64,
    /// Set once the sum would overflow; `mean` holds the running mean from then on.
    incremental: bool,
}

impl Mean {
    pub(crate) fn add(&mut self, f: f64) {
        self.count += 1.0;
        let count = self.count;
        if !self.incremental {
            let (ns, nc) = kahan_inc(f, self.sum, self.c);
            if count == 1.0 || !ns.is_infinite() {
                (self.sum, self.c) = (ns, nc);
                return;
            }
            self.incremental = true;
            self.mean = self.sum / (count - 1.0);
            self.c /= count - 1.0;
        }
        if self.mean.is_infinite() {
            if f.is_infinite() && (self.mean > 0.0) == (f > 0.0) {
                return;
            }
            if !f.is_infinite() && !f.is_nan() {
                return;
            }
        }
        let corrected = self.mean + self.c;
        (self.mean, self.c) = kahan_inc(f / count - corrected / count, self.mean, self.c);
    }

    pub(crate) fn value(&self) -> f64 {
        if self.count == 0.0 {
            f64::NAN
        } else if self.incremental {
            self.mean + self.c
        } else {
            self.sum / self.count + self.c / self.count
        }
    }
}

/// Arithmetic mean of `values` (see [`Mean`]).
pub(crate) fn mean<I>(values: I) -> f64
where
    I: IntoIterator<Item = f64>,
    I::IntoIter: Clone,
{
    let values = values.into_iter();
    if let Some((sum, c, n)) = finite_neumaier(values.clone()) {
        // What `Mean` gives when its sum never overflows; `n` counts exactly (below 2^53).
        let count = n as f64;
        return if n == 0 { f64::NAN } else { sum / count + c / count };
    }
    let mut mean = Mean::default();
    for v in values {
        mean.add(v);
    }
    mean.value()
}

/// Population variance (Welford with compensated accumulators).
pub(crate) fn variance(values: impl IntoIterator<Item = f64>) -> f64 {
    let (mut count, mut mean, mut c_mean, mut aux, mut c_aux) = (0.0f64, 0.0f64, 0.0f64, 0.0f64, 0.0f64);
    for f in values {
        count += 1.0;
        let delta = f - (mean + c_mean);
        (mean, c_mean) = kahan_inc(delta / count, mean, c_mean);
        (aux, c_aux) = kahan_inc(delta * (f - (mean + c_mean)), aux, c_aux);
    }
    (aux + c_aux) / count
}

/// Sorts ascending with NaN first (Prometheus' order for quantiles).
pub(crate) fn sort_nan_first(v: &mut [f64]) {
    v.sort_by(|a, b| match (a.is_nan(), b.is_nan()) {
        (true, true) => std::cmp::Ordering::Equal,
        (true, false) => std::cmp::Ordering::Less,
        (false, true) => std::cmp::Ordering::Greater,
        _ => a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal),
    });
}

/// The φ-quantile of `values` by linear interpolation between closest ranks
/// (`-Inf` below 0, `+Inf` above 1, NaN for NaN or no values).
pub(crate) fn quantile(q: f64, mut values: Vec<f64>) -> f64 {
    if values.is_empty() || q.is_nan() {
        return f64::NAN;
    }
    if q < 0.0 {
        return f64::NEG_INFINITY;
    }
    if q > 1.0 {
        return f64::INFINITY;
    }
    sort_nan_first(&mut values);
    let n = values.len() as f64;
    let rank = q * (n - 1.0);
    let lower = rank.floor().max(0.0);
    let upper = (lower + 1.0).min(n - 1.0);
    let weight = rank - rank.floor();
    let at = |i: f64| values.get(i as usize).copied().unwrap_or(f64::NAN);
    at(lower) * (1.0 - weight) + at(upper) * weight
}

/// Least-squares fit of the samples, x in seconds relative to `intercept_ms`.
/// Returns (slope, intercept).
pub(crate) fn linear_regression(samples: &[Sample], intercept_ms: i64) -> (f64, f64) {
    let Some(first) = samples.first() else {
        return (f64::NAN, f64::NAN);
    };
    let init_y = first.value;
    let mut const_y = true;
    let (mut n, mut sx, mut cx, mut sy, mut cy, mut sxy, mut cxy, mut sx2, mut cx2) =
        (0.0f64, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0);
    for (i, s) in samples.iter().enumerate() {
        if const_y && i > 0 && s.value != init_y {
            const_y = false;
        }
        n += 1.0;
        let x = (s.timestamp_ms - intercept_ms) as f64 / 1e3;
        (sx, cx) = kahan_inc(x, sx, cx);
        (sy, cy) = kahan_inc(s.value, sy, cy);
        (sxy, cxy) = kahan_inc(x * s.value, sxy, cxy);
        (sx2, cx2) = kahan_inc(x * x, sx2, cx2);
    }
    if const_y {
        if init_y.is_infinite() {
            return (f64::NAN, f64::NAN);
        }
        return (0.0, init_y);
    }
    let (sx, sy, sxy, sx2) = (sx + cx, sy + cy, sxy + cxy, sx2 + cx2);
    let cov = sxy - sx * sy / n;
    let var = sx2 - sx * sx / n;
    let slope = cov / var;
    (slope, sy / n - slope * sx / n)
}

/// Go's `math.Max`: NaN wins, +0 beats -0.
pub(crate) fn go_max(a: f64, b: f64) -> f64 {
    if a.is_infinite() && a > 0.0 || b.is_infinite() && b > 0.0 {
        return f64::INFINITY;
    }
    if a.is_nan() || b.is_nan() {
        return f64::NAN;
    }
    if a == 0.0 && a == b {
        return if a.is_sign_negative() { b } else { a };
    }
    if a > b {
        a
    } else {
        b
    }
}

/// Go's `math.Min`: NaN wins, -0 beats +0.
pub(crate) fn go_min(a: f64, b: f64) -> f64 {
    if a.is_infinite() && a < 0.0 || b.is_infinite() && b < 0.0 {
        return f64::NEG_INFINITY;
    }
    if a.is_nan() || b.is_nan() {
        return f64::NAN;
    }
    if a == 0.0 && a == b {
        return if a.is_sign_negative() { a } else { b };
    }
    if a < b {
        a
    } else {
        b
    }
}

/// Formats a float like Go's `strconv.FormatFloat(f, 'f', -1, 64)`.
pub(crate) fn format_float(f: f64) -> String {
    if f.is_nan() {
        "NaN".into()
    } else if f.is_infinite() {
        if f > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        }
    } else {
        format!("{f}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kahan_sum_keeps_small_terms() {
        assert_eq!(kahan_sum([1.0, 1e100, 1.0, -1e100]), 2.0);
    }

    #[test]
    fn quantile_interpolates() {
        assert_eq!(quantile(0.5, vec![1.0, 2.0, 3.0, 4.0]), 2.5);
        assert_eq!(quantile(-1.0, vec![1.0]), f64::NEG_INFINITY);
        assert!(quantile(0.5, vec![]).is_nan());
    }

    #[test]
    fn mean_survives_overflow() {
        assert_eq!(mean([f64::MAX, f64::MAX]), f64::MAX);
    }

    fn value() -> impl proptest::strategy::Strategy<Value = f64> {
        use proptest::prelude::*;
        prop_oneof![
            8 => -1e6f64..1e6,
            2 => any::<f64>(),
            1 => Just(f64::MAX),
            1 => Just(-f64::MAX),
            1 => Just(f64::INFINITY),
            1 => Just(f64::NEG_INFINITY),
            1 => Just(f64::NAN),
            1 => Just(0.0),
        ]
    }

    proptest::proptest! {
        /// The unchecked loop is an optimisation only: the sum and the mean are the running
        /// accumulators' to the bit, overflow, infinities and NaN included.
        #[test]
        fn sum_and_mean_equal_the_running_accumulators(values in proptest::collection::vec(value(), 0..40)) {
            let mut running = KahanSum::default();
            let mut m = Mean::default();
            for &v in &values {
                running.add(v);
                m.add(v);
            }
            proptest::prop_assert_eq!(kahan_sum(values.iter().copied()).to_bits(), running.value().to_bits());
            proptest::prop_assert_eq!(mean(values.iter().copied()).to_bits(), m.value().to_bits());
        }
    }
}
