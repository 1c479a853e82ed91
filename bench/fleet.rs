//! A fleet of hosts for the cardinality benchmark: `metrics` metric names on every host, each
//! series labelled like a real fleet (`__name__`, `env`, `instance`, `job`, `region`, `zone`),
//! one sample per series per scrape, encoded as remote-write 1.0 bodies (protobuf + snappy).
//!
//! Series `s` belongs to host `s / metrics` and is metric `m{s % metrics}`. Values and
//! timestamps are pure functions of (series, scrape), so any scrape of any range of series can be
//! built on its own, for every target alike, without keeping state for millions of series.

use std::ops::Range;

use saltdb::remote::proto::{Label, Sample, TimeSeries, WriteRequest};

/// The `job` of host `h` is `JOBS[h % 10]`.
const JOBS: [&str; 10] = ["node", "api", "web", "db", "cache", "queue", "auth", "search", "billing", "batch"];
/// The `region` of host `h` is `REGIONS[(h / 10) % 4]`, its zone one of three in it.
const REGIONS: [&str; 4] = ["us-east", "us-west", "eu-west", "ap-south"];
const ZONES: [&str; 3] = ["a", "b", "c"];
/// Three environments, `prod` on 3 hosts of 5.
const ENVS: [&str; 5] = ["prod", "prod", "prod", "staging", "dev"];

/// Scrape interval of the fleet.
pub const INTERVAL_MS: i64 = 15_000;

/// One remote-write request body, ready to send.
pub struct Body {
    /// Snappy-compressed `WriteRequest`.
    pub bytes: Vec<u8>,
    /// Samples it carries.
    pub samples: u64,
}

/// The fleet's shape: how many metric names each host has.
#[derive(Clone, Copy, Debug)]
pub struct Fleet {
    pub metrics: usize,
}

/// splitmix64: a deterministic hash for values, offsets and jitter.
pub(crate) fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Uniform in [0, 1), from a hash.
pub(crate) fn unit(x: u64) -> f64 {
    (mix(x) >> 11) as f64 / (1u64 << 53) as f64
}

impl Fleet {
    /// Host of series `s`.
    pub fn host(&self, s: usize) -> usize {
        s / self.metrics
    }

    /// `instance` label of host `h`.
    pub fn instance(h: usize) -> String {
        format!("host-{h:06}:9100")
    }

    /// `job` label of host `h`.
    pub fn job(h: usize) -> &'static str {
        JOBS.get(h % JOBS.len()).copied().unwrap_or("node")
    }

    /// `region` label of host `h`.
    pub fn region(h: usize) -> &'static str {
        REGIONS.get((h / 10) % REGIONS.len()).copied().unwrap_or("us-east")
    }

    /// `zone` label of host `h` (three per region).
    pub fn zone(h: usize) -> String {
        let z = ZONES.get((h / 40) % ZONES.len()).copied().unwrap_or("a");
        format!("{}-{z}", Self::region(h))
    }

    /// `env` label of host `h`.
    pub fn env(h: usize) -> &'static str {
        ENVS.get((h / 7) % ENVS.len()).copied().unwrap_or("prod")
    }

    /// Labels of series `s`, sorted by name as remote-write requires.
    pub fn labels(&self, s: usize) -> Vec<Label> {
        let h = self.host(s);
        let l = |name: &str, value: String| Label { name: name.to_owned(), value };
        vec![
            l("__name__", format!("m{}", s % self.metrics)),
            l("env", Self::env(h).to_owned()),
            l("instance", Self::instance(h)),
            l("job", Self::job(h).to_owned()),
            l("region", Self::region(h).to_owned()),
            l("zone", Self::zone(h)),
        ]
    }

    /// Value of series `s` at scrape `k`: even metrics are counters (integer counts growing by a
    /// jittered rate, so `rate(m0[5m])` is meaningful), metrics `4n+1` percentage-like gauges in
    /// steps of 0.01, metrics `4n+3` byte gauges in steps of 4096.
    pub fn value(&self, s: usize, k: usize) -> f64 {
        let (s, k) = (s as u64, k as u64);
        let seed = mix(s);
        match (s as usize % self.metrics) % 4 {
            0 | 2 => {
                let rate = 1.0 + (seed % 200) as f64 / 10.0;
                let base = (mix(seed) % 1_000_000) as f64;
                // Each step adds rate * 15 s * (1 +- 0.25): monotonic, never a reset.
                let jitter = 0.5 * unit(seed ^ k.wrapping_mul(0x2545_f491));
                (base + rate * 15.0 * (k as f64 + jitter)).round()
            }
            1 => {
                let level = (seed % 9_000) as f64 / 100.0;
                let noise = unit(seed ^ k.wrapping_mul(0x9e37)) - 0.5;
                ((level + noise * 5.0).clamp(0.0, 100.0) * 100.0).round() / 100.0
            }
            _ => {
                let level = 1e8 + (seed % 1_000_000) as f64 * 4096.0;
                let noise = unit(seed ^ k.wrapping_mul(0x85eb)) - 0.5;
                ((level + noise * 1e7) / 4096.0).round() * 4096.0
            }
        }
    }

    /// Timestamp of host `h`'s scrape `k` scheduled at `base_ms`: like Prometheus, each target is
    /// scraped at its own offset into the interval, with a few ms of jitter. Always in
    /// `[base_ms, base_ms + INTERVAL_MS)`.
    pub fn timestamp(h: usize, k: usize, base_ms: i64) -> i64 {
        let offset = (mix(h as u64 ^ 0x5bd1_e995) % 1_490) as i64 * 10;
        let jitter = (mix((h as u64) << 20 ^ k as u64) % 5) as i64;
        base_ms + offset + jitter
    }

    /// Remote-write bodies of scrape `k` (scheduled at `base_ms`) of `series`, `per_request`
    /// series of one sample each per body, built on all cores; in series order.
    pub fn bodies(&self, series: Range<usize>, k: usize, base_ms: i64, per_request: usize) -> Vec<Body> {
        self.bodies_with(series, k, base_ms, per_request, &|t| t)
    }

    /// [`Fleet::bodies`] with every timestamp passed through `at` (which must keep each series'
    /// timestamps increasing).
    pub fn bodies_with(
        &self,
        series: Range<usize>,
        k: usize,
        base_ms: i64,
        per_request: usize,
        at: &(dyn Fn(i64) -> i64 + Sync),
    ) -> Vec<Body> {
        let per_request = per_request.max(1);
        let starts: Vec<usize> = series.clone().step_by(per_request).collect();
        let threads = std::thread::available_parallelism().map_or(2, |n| n.get()).min(8);
        let mut out: Vec<(usize, Body)> = std::thread::scope(|scope| {
            let workers: Vec<_> = (0..threads)
                .map(|t| {
                    let starts = &starts;
                    let end = series.end;
                    scope.spawn(move || {
                        starts
                            .iter()
                            .enumerate()
                            .skip(t)
                            .step_by(threads)
                            .map(|(i, &from)| (i, self.body(from..(from + per_request).min(end), k, base_ms, at)))
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            workers.into_iter().flat_map(|w| w.join().expect("building request bodies")).collect()
        });
        out.sort_by_key(|(i, _)| *i);
        out.into_iter().map(|(_, b)| b).collect()
    }

    /// One body: scrape `k` of `series`.
    fn body(&self, series: Range<usize>, k: usize, base_ms: i64, at: &(dyn Fn(i64) -> i64 + Sync)) -> Body {
        let timeseries: Vec<TimeSeries> = series
            .map(|s| TimeSeries {
                labels: self.labels(s),
                samples: vec![Sample {
                    value: self.value(s, k),
                    timestamp: at(Self::timestamp(self.host(s), k, base_ms)),
                }],
                ..Default::default()
            })
            .collect();
        let samples = timeseries.len() as u64;
        Body { bytes: saltdb::remote::snappy_body(&WriteRequest { timeseries, metadata: vec![] }), samples }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_never_decrease_and_timestamps_stay_in_their_interval() {
        let f = Fleet { metrics: 10 };
        for s in [0, 2, 4, 10, 12, 1234] {
            for k in 0..50 {
                assert!(f.value(s, k + 1) >= f.value(s, k), "series {s} scrape {k}");
            }
        }
        for h in 0..1000 {
            let t = Fleet::timestamp(h, 3, 1_000_000);
            assert!((1_000_000..1_000_000 + INTERVAL_MS).contains(&t));
        }
    }

    #[test]
    fn labels_are_sorted() {
        let l = Fleet { metrics: 10 }.labels(123);
        assert!(l.windows(2).all(|w| w[0].name < w[1].name));
        assert_eq!(l[2].value, "host-000012:9100");
    }
}
