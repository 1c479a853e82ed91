//! A synthetic node-exporter-like workload: per host ~500 series of realistic shapes (CPU-seconds
//! counters per core and mode, memory and filesystem gauges, disk and network byte counters,
//! constant info-like series), sampled every 15 s.

use saltdb::labels::Labels;
use saltdb::sample::{Sample, SeriesSamples, WriteBatch};

/// `v` in steps of `unit`, the way an exporter's text output reads back (`12.34`, not
/// `12.340000000000002`).
fn quantize(v: f64, unit: f64) -> f64 {
    if unit < 1.0 {
        let k = (1.0 / unit).round();
        (v * k).round() / k
    } else {
        (v / unit).round() * unit
    }
}

/// One series' shape and state.
#[derive(Clone)]
enum Shape {
    /// Monotonic counter with a jittered rate, in steps of `unit` (0.01 for CPU seconds, 1 for
    /// packets, 512 for disk bytes).
    Counter { value: f64, rate: f64, unit: f64 },
    /// Gauge wandering around a level, with noise, in steps of `unit` (0.01 for ratios and
    /// loads, 4096 for memory and filesystem bytes).
    Gauge { level: f64, noise: f64, unit: f64 },
    /// Never changes.
    Constant(f64),
}

/// The series of all hosts with their state.
pub struct Workload {
    series: Vec<(Labels, Shape)>,
    rng: u64,
}

const MODES: [&str; 8] = ["idle", "user", "system", "iowait", "irq", "softirq", "steal", "nice"];

impl Workload {
    /// `hosts` hosts of about 500 series each.
    pub fn new(hosts: usize) -> Self {
        let mut w = Self { series: Vec::new(), rng: 0x9e37_79b9_7f4a_7c15 };
        for h in 0..hosts {
            let instance = format!("host-{h:04}:9100");
            let mut add = |name: &str, extra: &[(&str, String)], shape: Shape| {
                let mut pairs: Vec<(String, String)> = vec![
                    ("__name__".into(), name.into()),
                    ("instance".into(), instance.clone()),
                    ("job".into(), "node".into()),
                ];
                pairs.extend(extra.iter().map(|(k, v)| ((*k).to_owned(), v.clone())));
                if let Ok(labels) = Labels::from_pairs(pairs) {
                    w.series.push((labels, shape));
                }
            };
            for cpu in 0..32 {
                for (i, mode) in MODES.iter().enumerate() {
                    let rate = if *mode == "idle" { 0.7 } else { 0.3 / (i as f64 + 1.0) };
                    add(
                        "node_cpu_seconds_total",
                        &[("cpu", cpu.to_string()), ("mode", (*mode).into())],
                        Shape::Counter { value: 1e5, rate, unit: 0.01 },
                    );
                }
            }
            for i in 0..40 {
                add(
                    "node_memory_bytes",
                    &[("kind", format!("k{i}"))],
                    Shape::Gauge { level: 1e9 + i as f64 * 1e7, noise: 1e6, unit: 4096.0 },
                );
            }
            for d in 0..8 {
                let dev = format!("sd{}", (b'a' + d) as char);
                for m in [
                    "read_bytes_total",
                    "written_bytes_total",
                    "reads_completed_total",
                    "writes_completed_total",
                    "io_time_seconds_total",
                ] {
                    add(
                        &format!("node_disk_{m}"),
                        &[("device", dev.clone())],
                        Shape::Counter {
                            value: 1e6,
                            rate: 2e4,
                            unit: if m.contains("bytes") {
                                512.0
                            } else if m.contains("seconds") {
                                0.001
                            } else {
                                1.0
                            },
                        },
                    );
                }
            }
            for n in 0..8 {
                for m in [
                    "receive_bytes_total",
                    "transmit_bytes_total",
                    "receive_packets_total",
                    "transmit_packets_total",
                    "receive_errs_total",
                ] {
                    add(
                        &format!("node_network_{m}"),
                        &[("device", format!("eth{n}"))],
                        Shape::Counter { value: 1e7, rate: if m.contains("bytes") { 1e5 } else { 1e2 }, unit: 1.0 },
                    );
                }
            }
            for f in 0..20 {
                add(
                    "node_filesystem_avail_bytes",
                    &[("mountpoint", format!("/mnt/{f}"))],
                    Shape::Gauge { level: 5e10, noise: 1e6, unit: 4096.0 },
                );
                add("node_filesystem_size_bytes", &[("mountpoint", format!("/mnt/{f}"))], Shape::Constant(1e11));
            }
            for l in ["1", "5", "15"] {
                add(&format!("node_load{l}"), &[], Shape::Gauge { level: 2.0, noise: 0.5, unit: 0.01 });
            }
            for i in 0..81 {
                add("node_info_like", &[("item", i.to_string())], Shape::Constant(1.0));
            }
        }
        w
    }

    /// Number of series.
    pub fn series_count(&self) -> usize {
        self.series.len()
    }

    fn next_f64(&mut self) -> f64 {
        // xorshift64*: deterministic, fast, good enough for value noise.
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        (self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
    }

    /// The next `scrapes` samples of series `range`, starting at `t0` every 15 s.
    pub fn batch(&mut self, range: std::ops::Range<usize>, t0: i64, scrapes: usize) -> WriteBatch {
        let mut out = WriteBatch::default();
        for i in range {
            let mut samples = Vec::with_capacity(scrapes);
            for k in 0..scrapes {
                let r = self.next_f64();
                let Some((_, shape)) = self.series.get_mut(i) else { break };
                let v = match shape {
                    Shape::Counter { value, rate, unit } => {
                        *value += *rate * 15.0 * (0.5 + r);
                        quantize(*value, *unit)
                    }
                    Shape::Gauge { level, noise, unit } => quantize(*level + (r - 0.5) * *noise, *unit),
                    Shape::Constant(c) => *c,
                };
                // Scrape timestamps jitter by a few ms, like real scrapes.
                samples.push(Sample::new(t0 + k as i64 * 15_000 + (r * 5.0) as i64, v));
            }
            if let Some((labels, _)) = self.series.get(i) {
                out.series.push(SeriesSamples { labels: labels.clone(), samples, histograms: Vec::new() });
            }
        }
        out
    }
}
