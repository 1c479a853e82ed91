//! A tenant's active series, counted for `max_global_series_per_user` and
//! `max_global_series_per_metric` (docs/limits-per-tenant.md).
//!
//! A tenant's *active series* are the distinct series it wrote samples to in the last 30 to 60
//! minutes, counted in memory in two generations rotated every [`GENERATION_SECONDS`]: a series
//! is active while it is in the current or the previous generation; on rotation the previous
//! generation is dropped and the current one becomes the previous. Series are identified by a
//! 64-bit hash of their canonical label bytes ([`series_hash`]) and metrics by a 64-bit hash of
//! their name ([`metric_hash`]): two series colliding count as one, so a collision only makes a
//! count slightly low. The counts start empty when the process starts.
//!
//! Pure: time comes in as seconds from any fixed origin.

use std::collections::{HashMap, HashSet};

/// How long one generation lasts: a series stays active 30 to 60 minutes after its last write.
pub const GENERATION_SECONDS: f64 = 1800.0;

/// The hash identifying a series: xxh3 of its canonical label encoding.
pub fn series_hash(labels: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(labels)
}

/// The hash identifying a metric: xxh3 of its name (`__name__`'s value; empty without one).
pub fn metric_hash(name: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64_with_seed(name, 1)
}

/// Why a write was refused: it would take the tenant over a limit. Nothing was recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Over {
    /// Over `max_global_series_per_user`.
    User {
        /// The tenant's active series now.
        active: usize,
        /// The limit.
        limit: u64,
        /// Series of the write not active yet.
        adding: usize,
    },
    /// Over `max_global_series_per_metric` for the metric of hash `metric`.
    Metric {
        /// The metric's [`metric_hash`].
        metric: u64,
        /// Its active series now.
        active: usize,
        /// The limit.
        limit: u64,
        /// Its series in the write not active yet.
        adding: usize,
    },
}

/// The active series of one tenant: two generations of series hashes, each with the hash of
/// its metric, and the number of active series per metric.
#[derive(Clone, Debug)]
pub struct ActiveSeries {
    /// When the current generation started.
    started: f64,
    current: HashMap<u64, u64>,
    previous: HashMap<u64, u64>,
    /// Active series (current or previous) per metric hash; no zero entries.
    per_metric: HashMap<u64, usize>,
}

impl ActiveSeries {
    /// No active series; the first generation starts at `now`.
    pub fn new(now: f64) -> Self {
        Self { started: now, current: HashMap::new(), previous: HashMap::new(), per_metric: HashMap::new() }
    }

    /// Rotates the generations that ended by `now`: after one generation the current becomes
    /// the previous (the previous is dropped); after two or more, nothing is active.
    pub fn rotate(&mut self, now: f64) {
        if now < self.started + GENERATION_SECONDS {
            return;
        }
        let elapsed = ((now - self.started) / GENERATION_SECONDS).floor();
        self.started += elapsed * GENERATION_SECONDS;
        if elapsed >= 2.0 {
            self.current.clear();
            self.previous.clear();
            self.per_metric.clear();
            return;
        }
        let dropped = std::mem::take(&mut self.previous);
        for (series, metric) in dropped {
            if !self.current.contains_key(&series) {
                if let Some(n) = self.per_metric.get_mut(&metric) {
                    *n = n.saturating_sub(1);
                    if *n == 0 {
                        self.per_metric.remove(&metric);
                    }
                }
            }
        }
        self.previous = std::mem::take(&mut self.current);
    }

    /// Active series (as of the last rotation).
    pub fn len(&self) -> usize {
        self.current.len() + self.previous.keys().filter(|s| !self.current.contains_key(s)).count()
    }

    /// Whether no series is active.
    pub fn is_empty(&self) -> bool {
        self.current.is_empty() && self.previous.is_empty()
    }

    /// Active series of the metric of hash `metric`.
    pub fn of_metric(&self, metric: u64) -> usize {
        self.per_metric.get(&metric).copied().unwrap_or(0)
    }

    fn is_active(&self, series: u64) -> bool {
        self.current.contains_key(&series) || self.previous.contains_key(&series)
    }

    /// What writing `batch` (`(series hash, metric hash)` pairs, repeats allowed) would add:
    /// the distinct series not active yet, and how many of them each metric gets.
    pub fn would_add(&self, batch: &[(u64, u64)]) -> (usize, HashMap<u64, usize>) {
        let mut seen = HashSet::new();
        let mut per_metric: HashMap<u64, usize> = HashMap::new();
        for &(series, metric) in batch {
            if !self.is_active(series) && seen.insert(series) {
                *per_metric.entry(metric).or_default() += 1;
            }
        }
        (seen.len(), per_metric)
    }

    /// Checks `batch` against `limit_user` (active series of the tenant) and `limit_metric`
    /// (active series of any one metric) at `now`, counting only series not active yet, and
    /// records it when it fits: check and record are one call, so one lock around it keeps two
    /// concurrent writes from both taking the last slot.
    ///
    /// # Errors
    /// [`Over`] naming the limit the write would pass (the tenant's first); nothing is
    /// recorded then.
    pub fn admit(
        &mut self,
        limit_user: Option<u64>,
        limit_metric: Option<u64>,
        batch: &[(u64, u64)],
        now: f64,
    ) -> Result<(), Over> {
        self.rotate(now);
        let (adding, per_metric) = self.would_add(batch);
        if let Some(limit) = limit_user {
            let active = self.len();
            if (active + adding) as u64 > limit {
                return Err(Over::User { active, limit, adding });
            }
        }
        if let Some(limit) = limit_metric {
            // The metric over by the most first, then by hash, so the answer is deterministic.
            let worst = per_metric
                .iter()
                .map(|(&metric, &adding)| (self.of_metric(metric), metric, adding))
                .filter(|&(active, _, adding)| (active + adding) as u64 > limit)
                .max_by_key(|&(active, metric, adding)| (active + adding, std::cmp::Reverse(metric)));
            if let Some((active, metric, adding)) = worst {
                return Err(Over::Metric { metric, active, limit, adding });
            }
        }
        for &(series, metric) in batch {
            if self.current.insert(series, metric).is_none() && !self.previous.contains_key(&series) {
                *self.per_metric.entry(metric).or_default() += 1;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn series_age_out_after_two_generations() {
        let mut a = ActiveSeries::new(0.0);
        assert_eq!(a.admit(Some(2), None, &[(1, 10), (2, 10), (1, 10)], 0.0), Ok(()));
        assert_eq!(a.len(), 2);
        assert_eq!(a.admit(Some(2), None, &[(3, 10)], 10.0), Err(Over::User { active: 2, limit: 2, adding: 1 }));
        // Rewriting an active series adds nothing.
        assert_eq!(a.admit(Some(2), None, &[(2, 10)], 1799.0), Ok(()));
        // Series 1 is in the previous generation only, then gone.
        a.rotate(1800.0);
        assert_eq!(a.len(), 2);
        a.rotate(3600.0);
        assert_eq!(a.len(), 0);
        assert!(a.is_empty());
        assert_eq!(a.admit(Some(2), Some(1), &[(3, 10)], 3600.0), Ok(()));
        assert_eq!(
            a.admit(Some(2), Some(1), &[(4, 10)], 3600.0),
            Err(Over::Metric { metric: 10, active: 1, limit: 1, adding: 1 })
        );
        assert_eq!(a.admit(Some(2), Some(1), &[(4, 11)], 3600.0), Ok(()));
        assert_eq!(a.of_metric(10), 1);
        a.rotate(100_000.0);
        assert_eq!((a.len(), a.of_metric(10)), (0, 0));
    }

    /// Brute force: every admitted write with its time; a series is active at `now` when one of
    /// its writes fell in the current generation or the one before.
    fn model_active(writes: &[(f64, u64, u64)], now: f64) -> HashMap<u64, u64> {
        let generation = |t: f64| (t / GENERATION_SECONDS).floor() as i64;
        let g = generation(now);
        writes.iter().filter(|&&(t, _, _)| generation(t) >= g - 1).map(|&(_, s, m)| (s, m)).collect()
    }

    proptest! {
        #[test]
        fn active_series_agree_with_a_brute_force_model(
            limit_user in prop::option::of(0u64..20),
            limit_metric in prop::option::of(0u64..8),
            steps in prop::collection::vec(
                (0u32..2500, prop::collection::vec(0u64..30, 0..6)),
                1..60,
            ),
        ) {
            let mut a = ActiveSeries::new(0.0);
            let mut writes: Vec<(f64, u64, u64)> = Vec::new();
            let mut now = 0.0;
            for (dt, series) in steps {
                now += f64::from(dt);
                // A series' metric is fixed by the series (its name is one of its labels).
                let batch: Vec<(u64, u64)> = series.iter().map(|&s| (s, s % 4)).collect();
                let before = model_active(&writes, now);
                let new: HashSet<u64> = batch.iter().map(|&(s, _)| s).filter(|s| !before.contains_key(s)).collect();
                let over_user = limit_user.is_some_and(|l| (before.len() + new.len()) as u64 > l);
                let over_metric = limit_metric.is_some_and(|l| {
                    (0..4).any(|m| {
                        let active = before.values().filter(|&&x| x == m).count();
                        let adding = new.iter().filter(|&&s| s % 4 == m).count();
                        (active + adding) as u64 > l
                    })
                });
                a.rotate(now);
                let (adding, _) = a.would_add(&batch);
                prop_assert_eq!(adding, new.len());
                let got = a.admit(limit_user, limit_metric, &batch, now);
                match got {
                    Ok(()) => {
                        prop_assert!(!over_user && !over_metric);
                        writes.extend(batch.iter().map(|&(s, m)| (now, s, m)));
                    }
                    Err(Over::User { active, adding, .. }) => {
                        prop_assert!(over_user);
                        prop_assert_eq!((active, adding), (before.len(), new.len()));
                    }
                    Err(Over::Metric { .. }) => prop_assert!(!over_user && over_metric),
                }
                // A refused write changes nothing; the count is the model's.
                let after = model_active(&writes, now);
                prop_assert_eq!(a.len(), after.len());
                for m in 0..4 {
                    prop_assert_eq!(a.of_metric(m), after.values().filter(|&&x| x == m).count());
                }
            }
        }
    }
}
