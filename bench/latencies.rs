//! Request-latency native histograms as client libraries expose them (exponential schema 3,
//! integer counts, a zero bucket), for the benchmarks that write histograms
//! (`saltdb-bench size --histograms`, `saltdb-rw-bench --histograms`): each scrape adds
//! log-normally distributed latencies, so buckets grow at different rates and the populated span
//! widens and narrows over time.

use saltdb::histogram::{CounterResetHint, Histogram, Span};

/// One series' latency histogram, growing scrape by scrape (counts per bucket index of schema 3).
pub struct Latencies {
    counts: std::collections::BTreeMap<i32, u64>,
    zero: u64,
    sum: f64,
    rng: u64,
}

impl Latencies {
    pub fn new(seed: u64) -> Self {
        Self { counts: Default::default(), zero: 0, sum: 0.0, rng: seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1 }
    }

    fn uniform(&mut self) -> f64 {
        // xorshift64*
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        (self.rng.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Adds `n` observations: latencies around 50 ms, log-normal with sigma 0.8.
    pub fn observe(&mut self, n: usize) {
        for _ in 0..n {
            let (u1, u2) = (self.uniform().max(1e-12), self.uniform());
            let normal = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
            let v = 0.05 * (0.8 * normal).exp();
            self.sum += v;
            if v <= 1e-128 {
                self.zero += 1;
            } else {
                // Schema 3: bucket i covers (2^((i-1)/8), 2^(i/8)].
                let i = (v.log2() * 8.0).ceil() as i32;
                *self.counts.entry(i).or_default() += 1;
            }
        }
    }

    pub fn histogram(&self) -> Histogram {
        let mut spans: Vec<Span> = Vec::new();
        let mut buckets = Vec::new();
        let mut prev: Option<i32> = None;
        for (&i, &c) in &self.counts {
            match prev {
                Some(p) if i == p + 1 => {
                    if let Some(last) = spans.last_mut() {
                        last.length += 1;
                    }
                }
                Some(p) => spans.push(Span { offset: i - p - 1, length: 1 }),
                None => spans.push(Span { offset: i, length: 1 }),
            }
            buckets.push(c as f64);
            prev = Some(i);
        }
        let count = self.zero + self.counts.values().sum::<u64>();
        Histogram {
            counter_reset_hint: CounterResetHint::Unknown,
            schema: 3,
            zero_threshold: 1e-128,
            zero_count: self.zero as f64,
            count: count as f64,
            sum: self.sum,
            positive_spans: spans,
            positive_buckets: buckets,
            integer: true,
            ..Default::default()
        }
    }
}
