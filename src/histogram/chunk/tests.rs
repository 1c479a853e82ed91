//! Chunk codec tests: round trips of generated series, arbitrary and damaged bytes, sizes.

use proptest::prelude::*;

use super::encode::encode_bits;
use super::state::Mode;
use super::*;
use crate::histogram::tests::{arb_histogram, arb_series};
use crate::histogram::{CounterResetHint, Histogram, Span};

fn timestamps(gaps: &[i64]) -> Vec<i64> {
    let mut t = 1_700_000_000_000i64;
    gaps.iter()
        .map(|g| {
            t += g;
            t
        })
        .collect()
}

fn arb_samples() -> impl Strategy<Value = Vec<(i64, Histogram)>> {
    prop_oneof![arb_series(), proptest::collection::vec(arb_histogram(), 1..12)].prop_flat_map(|hs| {
        let n = hs.len();
        proptest::collection::vec(prop_oneof![Just(15_000i64), 14_990i64..15_010, 1i64..1_000_000_000], n)
            .prop_map(move |gaps| timestamps(&gaps).into_iter().zip(hs.clone()).collect())
    })
}

fn assert_round_trip(samples: &[(i64, Histogram)]) -> Result<Vec<u8>, TestCaseError> {
    let mut buf = vec![0x55];
    encode(samples, &mut buf).unwrap();
    let bytes = buf.split_off(1);
    let got = decode(&bytes).unwrap();
    prop_assert_eq!(got.len(), samples.len());
    for ((t, h), (wt, wh)) in got.iter().zip(samples) {
        prop_assert_eq!(t, wt);
        prop_assert!(h.identical(wh), "decoded {:?}\nwanted {:?}", h, wh);
    }
    prop_assert_eq!(sample_count(&bytes), Ok(samples.len()));
    Ok(bytes)
}

proptest! {
    #[test]
    fn chunks_round_trip(samples in arb_samples()) {
        assert_round_trip(&samples)?;
    }

    #[test]
    fn arbitrary_floats_round_trip(
        raw in proptest::collection::vec((any::<u64>(), any::<u64>(), any::<u64>(), any::<u64>()), 1..20),
    ) {
        // Any bit patterns at all in every float field, one layout throughout.
        let samples: Vec<(i64, Histogram)> = raw.iter().enumerate().map(|(i, &(a, b, c, d))| {
            (i as i64 * 1000 - 5000, Histogram {
                schema: 3,
                zero_threshold: f64::from_bits(d),
                count: f64::from_bits(a),
                zero_count: f64::from_bits(b),
                sum: f64::from_bits(c),
                positive_spans: vec![Span { offset: -3, length: 2 }],
                positive_buckets: vec![f64::from_bits(a ^ b), f64::from_bits(c.rotate_left(7))],
                custom_values: vec![f64::from_bits(d ^ a)],
                ..Histogram::default()
            })
        }).collect();
        assert_round_trip(&samples)?;
    }

    #[test]
    fn arbitrary_bytes_never_panic(mut bytes in proptest::collection::vec(any::<u8>(), 0..200), marked in any::<bool>(), mode in 0u8..3) {
        if marked && bytes.len() >= 2 {
            bytes[0] = MARKER;
            bytes[1] = mode;
        }
        if let Ok(samples) = decode(&bytes) {
            assert_round_trip(&samples)?;
        }
    }

    #[test]
    fn damaged_chunks_never_panic(samples in arb_samples(), at in any::<prop::sample::Index>(), xor in 1u8..=255, cut in any::<bool>()) {
        let mut bytes = Vec::new();
        encode(&samples, &mut bytes).unwrap();
        let i = at.index(bytes.len());
        if cut {
            bytes.truncate(i);
        } else {
            bytes[i] ^= xor;
        }
        if let Ok(decoded) = decode(&bytes) {
            assert_round_trip(&decoded)?;
        }
    }
}

#[test]
fn encode_refuses_bad_input() {
    let h = Histogram::default();
    assert_eq!(encode::<Histogram>(&[], &mut Vec::new()), Err(EncodeError::Empty));
    assert_eq!(
        encode(&[(5, h.clone()), (5, h.clone())], &mut Vec::new()),
        Err(EncodeError::NotAscending { index: 1, timestamp: 5 })
    );
    let bad = Histogram { positive_spans: vec![Span { offset: 0, length: 2 }], ..h };
    assert_eq!(encode(&[(5, bad)], &mut Vec::new()), Err(EncodeError::SpansBucketsMismatch { index: 0 }));
}

#[test]
fn decode_names_what_is_wrong() {
    let mut ok = Vec::new();
    encode(&[(1, Histogram::stale()), (2, Histogram::default())], &mut ok).unwrap();
    assert!(decode(&ok).is_ok());
    assert_eq!(decode(&[]).err(), Some(DecodeError::Marker(None)));
    assert_eq!(decode(&[1, 2, 3]).err(), Some(DecodeError::Marker(Some(1))));
    assert_eq!(decode(&[MARKER, 7]).err(), Some(DecodeError::Mode(7)));
    assert_eq!(decode(&[MARKER, 0, 0, 0, 0]).err(), Some(DecodeError::SampleCount(0)));
    assert_eq!(decode(&[MARKER, 0, 100, 0, 0]).err(), Some(DecodeError::SampleCount(100)));
    let mut long = ok.clone();
    long.push(0);
    assert_eq!(decode(&long).err(), Some(DecodeError::TrailingData));
    assert_eq!(decode(&ok[..ok.len() - 1]).err(), Some(DecodeError::Truncated));
}

/// A small deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn uniform(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Knuth's Poisson sampler (fine for small means).
    fn poisson(&mut self, mean: f64) -> u64 {
        let limit = (-mean).exp();
        let (mut k, mut p) = (0, self.uniform());
        while p > limit {
            k += 1;
            p *= self.uniform();
        }
        k
    }
}

/// A request-latency histogram scraped every 15 s: schema 3, 20 populated buckets in two spans
/// (around 2^(-28/8) = 90 ms), `rate` observations per scrape on average.
fn latency_series(rate: f64, jitter_ms: u64, seed: u64) -> Vec<(i64, Histogram)> {
    let mut rng = Rng(seed);
    let weights: Vec<f64> = (0..20).map(|i| (-((i as f64 - 7.0) / 4.0).powi(2)).exp()).collect();
    let total: f64 = weights.iter().sum();
    let spans = vec![Span { offset: -38, length: 12 }, Span { offset: 2, length: 8 }];
    let mut h = Histogram {
        counter_reset_hint: CounterResetHint::NotCounterReset,
        schema: 3,
        zero_threshold: 2f64.powi(-128),
        positive_spans: spans,
        positive_buckets: vec![0.0; 20],
        integer: true,
        ..Histogram::default()
    };
    let mut t = 1_700_000_000_000i64;
    (0..120)
        .map(|_| {
            for (b, w) in h.positive_buckets.iter_mut().zip(&weights) {
                let n = rng.poisson(rate * w / total);
                *b += n as f64;
                h.count += n as f64;
                h.sum += (0..n).map(|_| 0.02 + 0.2 * rng.uniform()).sum::<f64>();
            }
            t += 15_000;
            let jitter = if jitter_ms == 0 { 0 } else { (rng.next() % (2 * jitter_ms + 1)) as i64 - jitter_ms as i64 };
            (t + jitter, h.clone())
        })
        .collect()
}

/// Bits Prometheus' histogram chunk spends on the same integer series (its `putVarbitInt` classes
/// for the delta-of-deltas of timestamps, counts and bucket deltas, its XOR for the sum; layout
/// and header left out), to compare against.
fn prometheus_bits(samples: &[(i64, Histogram)]) -> u64 {
    let varbit = |v: i64| -> u64 {
        let fits = |n: u32| -(1i64 << (n - 1)) < v && v <= 1i64 << (n - 1);
        match v {
            0 => 1,
            _ if fits(3) => 5,
            _ if fits(6) => 9,
            _ if fits(9) => 13,
            _ if fits(12) => 17,
            _ if fits(18) => 24,
            _ if fits(25) => 32,
            _ if fits(56) => 64,
            _ => 72,
        }
    };
    let fields = |t: i64, h: &Histogram| -> Vec<i64> {
        let mut prev = 0.0;
        let spatial = h.positive_buckets.iter().map(|&b| {
            let d = b - prev;
            prev = b;
            d as i64
        });
        [t, h.count as i64, h.zero_count as i64].into_iter().chain(spatial).collect()
    };
    let (mut bits, mut prev, mut delta) = (0u64, Vec::new(), Vec::new());
    let (mut sum, mut window) = (0u64, None::<(u32, u32)>);
    for (t, h) in samples {
        let f = fields(*t, h);
        let d: Vec<i64> = f.iter().zip(prev.iter().chain(std::iter::repeat(&0))).map(|(a, b)| a - b).collect();
        bits += d.iter().zip(delta.iter().chain(std::iter::repeat(&0))).map(|(a, b)| varbit(a - b)).sum::<u64>();
        (prev, delta) = (f, d);
        let x = h.sum.to_bits() ^ sum;
        sum = h.sum.to_bits();
        bits += match (x, window) {
            (0, _) => 1,
            (x, Some((l, t))) if x.leading_zeros().min(31) >= l && x.trailing_zeros() >= t => 2 + u64::from(64 - l - t),
            (x, _) => {
                let (l, t) = (x.leading_zeros().min(31), x.trailing_zeros());
                window = Some((l, t));
                13 + u64::from(64 - l - t)
            }
        };
    }
    bits
}

#[test]
fn bytes_per_sample_of_a_realistic_series() {
    // cargo test --lib histogram::chunk::tests::bytes_per_sample -- --nocapture
    for (rate, jitter) in [(100.0, 0), (100.0, 5), (20.0, 0), (1000.0, 0)] {
        let samples = latency_series(rate, jitter, 42);
        let mut bytes = Vec::new();
        encode(&samples, &mut bytes).unwrap();
        let per = |m| encode_bits(&samples, m).len() as f64 / 120.0;
        let no_sum: Vec<_> = samples.iter().map(|(t, h)| (*t, Histogram { sum: 0.0, ..h.clone() })).collect();
        println!(
            "schema 3, 20 buckets, {rate} observations/scrape, jitter ±{jitter} ms: {:.2} bytes/sample \
             (previous-delta prediction {:.2}, mean prediction {:.2}, float {:.2}; the sum alone {:.2}; \
             Prometheus' encoding about {:.2})",
            bytes.len() as f64 / 120.0,
            per(Mode::IntPrevious),
            per(Mode::IntMean),
            per(Mode::Float),
            per(Mode::IntMean) - encode_bits(&no_sum, Mode::IntMean).len() as f64 / 120.0,
            prometheus_bits(&samples) as f64 / 8.0 / 120.0,
        );
        assert!(decode(&bytes).unwrap().iter().zip(&samples).all(|(a, b)| a.0 == b.0 && a.1.identical(&b.1)));
        assert!(bytes.len() as u64 * 8 < prometheus_bits(&samples), "{} bytes", bytes.len());
    }
}
