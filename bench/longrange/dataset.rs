//! The long-range dataset: 10 metrics (5 counters `c0`..`c4`, 5 gauges `g0`..`g4`) over `hosts`
//! hosts in 3 regions, labelled `job="rwgen"`, `host`, `region`, one sample per series every
//! `interval` over `days`, ending at the current time rounded down to the interval.
//!
//! Values are deterministic for a seed: counters grow by random integer increments around a rate
//! of their own (0.5-50 a second) and reset to zero about once in 20,000 samples; gauges wander
//! around a level of their own (mean-reverting noise, two decimals). Each host is scraped at its
//! own offset into the interval with a few ms of jitter, as Prometheus scrapes, so timestamps are
//! off the queries' step grid.

use saltdb::remote::proto::{Label, Sample, TimeSeries, WriteRequest};

use crate::fleet::{mix, unit, Body};

/// Metric names: counters first.
pub(super) const METRICS: [&str; 10] = ["c0", "c1", "c2", "c3", "c4", "g0", "g1", "g2", "g3", "g4"];
/// The `region` of host `h` is `REGIONS[h % 3]`.
const REGIONS: [&str; 3] = ["eu-west", "us-east", "ap-south"];
/// A counter resets about once in this many samples.
const RESET_EVERY: f64 = 20_000.0;

/// The shape of the dataset and its time range.
#[derive(Clone, Copy, Debug)]
pub(super) struct Dataset {
    pub(super) hosts: usize,
    /// Series of each metric; series `i` of a metric is on host `i % hosts` (with a `slot` label
    /// `i / hosts` when there are more series than hosts).
    pub(super) per_metric: usize,
    pub(super) interval_ms: i64,
    /// Samples per series.
    pub(super) points: usize,
    /// Scrape `k` of every series is due at `start_ms + k * interval_ms`.
    pub(super) start_ms: i64,
    /// The current time when the dataset was made, rounded down to the interval; every timestamp
    /// is below it.
    pub(super) end_ms: i64,
    pub(super) seed: u64,
}

impl Dataset {
    /// `days` of samples every `interval_ms`, ending now.
    pub(super) fn ending_now(hosts: usize, per_metric: usize, days: f64, interval_ms: i64, seed: u64) -> Self {
        let interval_ms = interval_ms.max(1);
        let now = chrono::Utc::now().timestamp_millis();
        let end_ms = now - now % interval_ms;
        let points = ((days * 86_400_000.0) / interval_ms as f64).round().max(1.0) as usize;
        let start_ms = end_ms - points as i64 * interval_ms;
        Self { hosts: hosts.max(1), per_metric: per_metric.max(1), interval_ms, points, start_ms, end_ms, seed }
    }

    pub(super) fn series(&self) -> usize {
        METRICS.len() * self.per_metric
    }

    pub(super) fn samples(&self) -> u64 {
        (self.series() * self.points) as u64
    }

    fn is_counter(&self, s: usize) -> bool {
        s / self.per_metric < METRICS.len() / 2
    }

    /// Labels of series `s` (metric `s / per_metric`), sorted by name as remote-write requires.
    fn labels(&self, s: usize) -> Vec<Label> {
        let (m, i) = (s / self.per_metric, s % self.per_metric);
        let h = i % self.hosts;
        let l = |name: &str, value: String| Label { name: name.to_owned(), value };
        let mut labels = vec![
            l("__name__", METRICS.get(m).copied().unwrap_or("c0").to_owned()),
            l("host", format!("host-{h:03}")),
            l("job", "rwgen".to_owned()),
            l("region", REGIONS.get(h % REGIONS.len()).copied().unwrap_or("eu-west").to_owned()),
        ];
        if self.per_metric > self.hosts {
            labels.push(l("slot", (i / self.hosts).to_string()));
        }
        labels
    }

    /// A random draw in [0, 1) for series `s`, scrape `k` and purpose `what`.
    fn draw(&self, s: usize, k: usize, what: u64) -> f64 {
        unit(mix(self.seed ^ what) ^ ((s as u64) << 32) ^ k as u64)
    }

    /// Value of series `s` before its first scrape.
    fn initial(&self, s: usize) -> f64 {
        if self.is_counter(s) {
            (self.draw(s, 0, 1) * 1e6).round()
        } else {
            self.level(s)
        }
    }

    /// A gauge's level, around which it wanders.
    fn level(&self, s: usize) -> f64 {
        (10.0 + 990.0 * self.draw(s, 0, 2)).round()
    }

    /// Advances series `s` from `value` to scrape `k`.
    fn next(&self, s: usize, k: usize, value: f64) -> f64 {
        if self.is_counter(s) {
            let rate = 0.5 + 49.5 * self.draw(s, 0, 3);
            let step = (rate * self.interval_ms as f64 / 1000.0 * (0.5 + self.draw(s, k, 4))).round();
            if self.draw(s, k, 5) < 1.0 / RESET_EVERY {
                step
            } else {
                value + step
            }
        } else {
            let level = self.level(s);
            let noise = (self.draw(s, k, 6) - 0.5) * 0.04 * level;
            ((value + 0.05 * (level - value) + noise) * 100.0).round() / 100.0
        }
    }

    /// Timestamp of scrape `k` of host `h`: its own offset into the interval, plus 0-4 ms.
    fn timestamp(&self, h: usize, k: usize) -> i64 {
        let slots = (self.interval_ms / 10).max(1) as u64;
        let offset = (mix(self.seed ^ h as u64 ^ 0x5bd1_e995) % slots) as i64 * 10;
        let jitter = (mix(((h as u64) << 32) ^ k as u64) % 5) as i64;
        (self.start_ms + k as i64 * self.interval_ms + offset + jitter).min(self.end_ms - 1)
    }

    /// Every remote-write request, in time order: the first `samples_per_series` scrapes of every
    /// series (`series_per_request` series a request), then the next ones, and so on.
    pub(super) fn bodies(&self, samples_per_series: usize, series_per_request: usize) -> Vec<Body> {
        let mut all = Bodies::new(*self, samples_per_series, series_per_request);
        all.next_slice(usize::MAX)
    }
}

/// The requests of [`Dataset::bodies`] built a slice at a time, so that a dataset larger than
/// memory is sent as it is built.
pub(super) struct Bodies {
    ds: Dataset,
    labels: Vec<Vec<Label>>,
    /// Each series' value at scrape `k0 - 1`.
    values: Vec<f64>,
    /// The first scrape not built yet.
    k0: usize,
    per_series: usize,
    per_request: usize,
}

impl Bodies {
    pub(super) fn new(ds: Dataset, samples_per_series: usize, series_per_request: usize) -> Self {
        let n = ds.series();
        Self {
            labels: (0..n).map(|s| ds.labels(s)).collect(),
            values: (0..n).map(|s| ds.initial(s)).collect(),
            ds,
            k0: 0,
            per_series: samples_per_series.max(1),
            per_request: series_per_request.max(1),
        }
    }

    /// The next requests, in order, holding about `max_samples` samples or more (whole rounds
    /// of `samples_per_series` scrapes of every series); empty once every scrape is built.
    pub(super) fn next_slice(&mut self, max_samples: usize) -> Vec<Body> {
        let ds = self.ds;
        let n = ds.series();
        let mut bodies = Vec::new();
        let mut built = 0usize;
        while self.k0 < ds.points && built < max_samples {
            let (k0, k1) = (self.k0, (self.k0 + self.per_series).min(ds.points));
            let mut first = 0;
            while first < n {
                let last = (first + self.per_request).min(n);
                let mut req = WriteRequest::default();
                for (s, (l, v)) in self.labels.iter().zip(self.values.iter_mut()).enumerate().take(last).skip(first) {
                    let h = (s % ds.per_metric) % ds.hosts;
                    let mut samples = Vec::with_capacity(k1 - k0);
                    for k in k0..k1 {
                        *v = ds.next(s, k, *v);
                        samples.push(Sample { value: *v, timestamp: ds.timestamp(h, k) });
                    }
                    req.timeseries.push(TimeSeries { labels: l.clone(), samples, ..Default::default() });
                }
                let samples = ((last - first) * (k1 - k0)) as u64;
                let mut bytes = saltdb::remote::snappy_body(&req);
                bytes.shrink_to_fit();
                bodies.push(Body { bytes, samples });
                built = built.saturating_add((last - first) * (k1 - k0));
                first = last;
            }
            self.k0 = k1;
        }
        bodies
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> Dataset {
        Dataset { hosts: 4, per_metric: 6, interval_ms: 60_000, points: 50, start_ms: 0, end_ms: 3_000_000, seed: 7 }
    }

    #[test]
    fn counters_only_fall_on_a_reset_and_timestamps_stay_in_their_interval() {
        let d = tiny();
        for s in 0..d.series() {
            let mut v = d.initial(s);
            for k in 0..d.points {
                let next = d.next(s, k, v);
                if d.is_counter(s) {
                    assert!(next >= v || d.draw(s, k, 5) < 1.0 / RESET_EVERY, "series {s} scrape {k}");
                }
                v = next;
                let t = d.timestamp((s % d.per_metric) % d.hosts, k);
                assert!(t >= k as i64 * d.interval_ms && t < (k as i64 + 1) * d.interval_ms);
            }
        }
    }

    #[test]
    fn bodies_carry_every_sample_and_sorted_labels() {
        let d = tiny();
        let bodies = d.bodies(7, 5);
        assert_eq!(bodies.iter().map(|b| b.samples).sum::<u64>(), d.samples());
        // Built in slices, the same bytes.
        let mut sliced = Bodies::new(d, 7, 5);
        let mut again = Vec::new();
        loop {
            let slice = sliced.next_slice(100);
            if slice.is_empty() {
                break;
            }
            again.extend(slice);
        }
        assert_eq!(
            again.iter().map(|b| &b.bytes).collect::<Vec<_>>(),
            bodies.iter().map(|b| &b.bytes).collect::<Vec<_>>()
        );
        for s in 0..d.series() {
            let l = d.labels(s);
            assert!(l.windows(2).all(|w| w[0].name < w[1].name), "{l:?}");
        }
    }
}
