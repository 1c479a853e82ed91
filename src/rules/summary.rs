//! Summaries of evaluation durations, as Prometheus' `prometheus_rule_evaluation_duration_seconds`
//! (every rule evaluation) and `prometheus_rule_group_duration_seconds` (every group evaluation)
//! report them: quantiles over a sliding window of the last 8 to 10 minutes, with `_sum` and
//! `_count` over the server's lifetime.
//!
//! The `prometheus` crate has no summary, so the quantiles come from an estimator of our own.
//! Prometheus' client keeps a CKMS stream per age bucket (five of two minutes each) with a
//! rank error per quantile (0.5 +- 0.05, 0.9 +- 0.01, 0.99 +- 0.001). Here each age bucket is a
//! histogram of fixed log-spaced bins, [`BINS_PER_DOUBLING`] per power of two from 1 us: a
//! quantile is exact in rank and within 2.2% in value (the middle of its bin, clamped to the
//! smallest and largest value seen). An observation costs one `log2` and one increment; the
//! window holds five buckets of [`BINS`] counters, about 13 KiB per summary whatever the rate.

use std::time::Instant;

use super::group::GroupRun;

/// Bins per power of two: bin bounds are `2^(1/16)` (4.4%) apart.
const BINS_PER_DOUBLING: f64 = 16.0;
/// The lower bound of bin 1, in seconds; smaller values fall in bin 0.
const SMALLEST: f64 = 1e-6;
/// Bins from 1 us to about 12 days (40 doublings); larger values fall in the last bin.
const BINS: usize = 640;
/// Age buckets of the window, as Prometheus' `DefAgeBuckets`.
const AGE_BUCKETS: usize = 5;
/// The window, as Prometheus' `DefMaxAge` (10 min): a bucket ages out every two minutes.
const MAX_AGE_MS: u64 = 600_000;
const BUCKET_MS: u64 = MAX_AGE_MS / AGE_BUCKETS as u64;

/// The bin of a duration in seconds.
fn bin(seconds: f64) -> usize {
    if seconds.is_nan() || seconds < SMALLEST {
        return 0;
    }
    let i = ((seconds / SMALLEST).log2() * BINS_PER_DOUBLING).floor() + 1.0;
    (i as usize).min(BINS - 1)
}

/// The middle (geometric) of bin `i`, in seconds; 0 for bin 0 (below 1 us).
fn middle(i: usize) -> f64 {
    if i == 0 {
        return 0.0;
    }
    SMALLEST * ((i as f64 - 0.5) / BINS_PER_DOUBLING).exp2()
}

/// One age bucket: the observations of one two-minute period.
#[derive(Debug, Clone)]
struct AgeBucket {
    /// Which period (milliseconds since the summary began / [`BUCKET_MS`]) the counts are of.
    period: u64,
    counts: Box<[u32]>,
    min: f64,
    max: f64,
}

impl AgeBucket {
    fn empty(period: u64) -> Self {
        Self { period, counts: vec![0; BINS].into_boxed_slice(), min: f64::INFINITY, max: f64::NEG_INFINITY }
    }
}

/// A summary: windowed quantiles, lifetime sum and count.
#[derive(Debug, Clone)]
pub struct Summary {
    started: Instant,
    buckets: Vec<AgeBucket>,
    sum: f64,
    count: u64,
}

impl Default for Summary {
    fn default() -> Self {
        Self::new()
    }
}

impl Summary {
    /// An empty summary whose window starts now.
    pub fn new() -> Self {
        Self { started: Instant::now(), buckets: Vec::new(), sum: 0.0, count: 0 }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Records a duration in seconds.
    pub fn observe(&mut self, seconds: f64) {
        let now = self.now_ms();
        self.observe_at(seconds, now);
    }

    /// Records a duration `now_ms` after the summary began.
    fn observe_at(&mut self, seconds: f64, now_ms: u64) {
        self.sum += seconds;
        self.count += 1;
        let period = now_ms / BUCKET_MS;
        let slot = (period % AGE_BUCKETS as u64) as usize;
        if self.buckets.len() < AGE_BUCKETS {
            self.buckets.resize_with(AGE_BUCKETS, || AgeBucket::empty(u64::MAX));
        }
        let Some(b) = self.buckets.get_mut(slot) else { return };
        if b.period != period {
            *b = AgeBucket::empty(period);
        }
        if let Some(c) = b.counts.get_mut(bin(seconds)) {
            *c = c.saturating_add(1);
        }
        b.min = b.min.min(seconds);
        b.max = b.max.max(seconds);
    }

    /// The sum of every duration recorded.
    pub fn sum(&self) -> f64 {
        self.sum
    }

    /// How many durations were recorded.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The `q` quantiles of the durations of the last 8 to 10 minutes, in order; NaN when there
    /// were none (as Prometheus reports an empty summary).
    pub fn quantiles(&self, q: &[f64]) -> Vec<f64> {
        self.quantiles_at(q, self.now_ms())
    }

    fn quantiles_at(&self, q: &[f64], now_ms: u64) -> Vec<f64> {
        let period = now_ms / BUCKET_MS;
        let live: Vec<&AgeBucket> =
            self.buckets.iter().filter(|b| b.period <= period && period - b.period < AGE_BUCKETS as u64).collect();
        let total: u64 = live.iter().flat_map(|b| b.counts.iter()).map(|&c| u64::from(c)).sum();
        if total == 0 {
            return vec![f64::NAN; q.len()];
        }
        let min = live.iter().map(|b| b.min).fold(f64::INFINITY, f64::min);
        let max = live.iter().map(|b| b.max).fold(f64::NEG_INFINITY, f64::max);
        q.iter()
            .map(|&q| {
                // The rank of the quantile among the observations, 1-based.
                let rank = ((q * total as f64).ceil() as u64).clamp(1, total);
                let mut seen = 0u64;
                for i in 0..BINS {
                    seen += live.iter().map(|b| u64::from(b.counts.get(i).copied().unwrap_or(0))).sum::<u64>();
                    if seen >= rank {
                        // The last bin has no upper bound: its largest value stands for it.
                        return if i == BINS - 1 { max } else { middle(i).clamp(min, max) };
                    }
                }
                max
            })
            .collect()
    }
}

/// The quantiles Prometheus reports for every rule evaluation.
pub const RULE_QUANTILES: [f64; 3] = [0.5, 0.9, 0.99];
/// The quantiles Prometheus reports for every group evaluation.
pub const GROUP_QUANTILES: [f64; 5] = [0.01, 0.05, 0.5, 0.9, 0.99];

/// The durations of every rule and every group evaluation of a server (Prometheus keeps them
/// without labels: one summary for all groups).
#[derive(Debug, Clone, Default)]
pub struct EvaluationDurations {
    /// Each rule's evaluation: query, output and write.
    pub rules: Summary,
    /// Each group's evaluation, all its rules.
    pub groups: Summary,
}

impl EvaluationDurations {
    /// Records the evaluation `run` has just completed: its rules' durations and its own.
    pub fn observe(&mut self, run: &GroupRun) {
        for r in &run.rules {
            self.rules.observe(r.evaluation_seconds);
        }
        self.groups.observe(run.evaluation_seconds);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_within_the_bin_width_of_the_exact_ones() {
        let mut s = Summary::new();
        for i in 1..=1000 {
            s.observe_at(f64::from(i) / 1000.0, 0);
        }
        let got = s.quantiles_at(&GROUP_QUANTILES, 1);
        for (q, v) in GROUP_QUANTILES.iter().zip(got) {
            assert!((v / q - 1.0).abs() < 0.023, "quantile {q}: {v}");
        }
        assert_eq!(s.count(), 1000);
        assert!((s.sum() - 500.5).abs() < 1e-9);
    }

    #[test]
    fn one_value_is_reported_exactly() {
        let mut s = Summary::new();
        for _ in 0..10 {
            s.observe_at(0.25, 5);
        }
        assert_eq!(s.quantiles_at(&RULE_QUANTILES, 5), vec![0.25; 3]);
    }

    #[test]
    fn tiny_and_huge_values_stay_in_range() {
        let mut s = Summary::new();
        s.observe_at(0.0, 0);
        s.observe_at(1e9, 0);
        assert_eq!(s.quantiles_at(&[0.01, 0.99], 0), vec![0.0, 1e9]);
    }

    #[test]
    fn the_window_forgets_after_eight_to_ten_minutes() {
        let mut s = Summary::new();
        s.observe_at(1.0, 0);
        s.observe_at(2.0, 9 * 60_000);
        // At 9 min both are in the window; the first one's bucket (0-2 min) ages out at 10 min.
        let both = s.quantiles_at(&[0.01, 0.99], 9 * 60_000);
        assert_eq!(both[0], 1.0);
        assert!((both[1] / 2.0 - 1.0).abs() < 0.023, "{both:?}");
        assert_eq!(s.quantiles_at(&[0.01, 0.99], 10 * 60_000), vec![2.0, 2.0]);
        assert!(s.quantiles_at(&[0.5], 19 * 60_000)[0].is_nan());
        // Sum and count are for the whole life.
        assert_eq!((s.sum(), s.count()), (3.0, 2));
        // A bucket slot reused by a later period starts empty.
        s.observe_at(4.0, 20 * 60_000);
        assert_eq!(s.quantiles_at(&[0.01, 0.99], 20 * 60_000), vec![4.0, 4.0]);
    }

    #[test]
    fn an_empty_summary_reports_nan() {
        let s = Summary::new();
        assert!(s.quantiles(&RULE_QUANTILES).iter().all(|v| v.is_nan()));
    }
}
