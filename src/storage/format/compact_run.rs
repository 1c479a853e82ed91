//! Compact runs: the hot sample rows head flushes write since format 6 (`docs/format.md`,
//! *Sample rows*). Pure: no I/O.
//!
//! Layout: the marker [`MARKER`], the sample count `n >= 2` (varint), the first timestamp delta
//! (varint, > 0), the `n - 2` further deltas as zigzag varints of their difference from the delta
//! before (0 for a regular scrape); then the values, in one of two modes named by one byte:
//!
//! - `e` in `0..=15`, **decimal**: every value is `m / 10^e` for an integer `|m| <= 2^53`, bit for
//!   bit; the first `m` and the `n - 1` differences of the next ones follow as zigzag varints
//!   (wrapping at 64 bits). Counters, percentages and byte gauges take 1-3 bytes a value.
//! - [`XOR_MODE`]: the first value's bits (u64 LE), then for each next value its bits XOR the
//!   previous value's, byte-trimmed: a byte `lead << 4 | trail` (zero bytes at the top and at the
//!   bottom, `lead + trail <= 8`; `0x80` for identical bits) and the `8 - lead - trail` bytes
//!   between, least significant first.
//!
//! The first timestamp is the row key's (the run's key holds it), so it is not repeated.

use crate::sample::Sample;
use crate::varint;

/// First byte of a compact run.
pub const MARKER: u8 = 0x81;
/// Value mode byte of XOR'd values (decimal modes are the exponent, `0..=15`).
pub const XOR_MODE: u8 = 0x10;

const POW10: [f64; 16] = [1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15];
const MAX_MANTISSA: f64 = 9_007_199_254_740_992.0; // 2^53

/// Why a compact run did not decode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("corrupt compact run")]
pub struct CompactRunError;

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(u: u64) -> i64 {
    (u >> 1) as i64 ^ -((u & 1) as i64)
}

/// The mantissa of `v` at exponent `p = 10^e`, when `m / p` gives back `v` bit for bit.
fn mantissa(v: f64, p: f64) -> Option<i64> {
    let m = (v * p).round();
    if !m.is_finite() || m.abs() > MAX_MANTISSA {
        return None;
    }
    let m = m as i64;
    // Exactly what the decoder computes (this also turns -0.0 away).
    ((m as f64 / p).to_bits() == v.to_bits()).then_some(m)
}

/// The smallest exponent at which every value is a decimal mantissa.
fn decimal_exponent(samples: &[Sample]) -> Option<u8> {
    (0u8..16)
        .find(|&e| POW10.get(usize::from(e)).is_some_and(|&p| samples.iter().all(|s| mantissa(s.value, p).is_some())))
}

/// Appends a compact run of `samples` (at least 2, strictly ascending: the caller checks) to
/// `dst`. Returns false, with `dst` as it was, when a timestamp delta is not positive.
pub fn encode(samples: &[Sample], dst: &mut Vec<u8>) -> bool {
    let start = dst.len();
    dst.push(MARKER);
    varint::put(dst, samples.len() as u64);
    let mut prev_delta = 0i64;
    for (i, w) in samples.windows(2).enumerate() {
        let [a, b] = w else { continue };
        let delta = b.timestamp_ms.wrapping_sub(a.timestamp_ms);
        if delta <= 0 {
            dst.truncate(start);
            return false;
        }
        if i == 0 {
            varint::put(dst, delta as u64);
        } else {
            varint::put(dst, zigzag(delta.wrapping_sub(prev_delta)));
        }
        prev_delta = delta;
    }
    let values_at = dst.len();
    if let Some(e) = decimal_exponent(samples) {
        let p = POW10.get(usize::from(e)).copied().unwrap_or(1.0);
        dst.push(e);
        let mut prev = 0i64;
        for s in samples {
            let m = mantissa(s.value, p).unwrap_or_default();
            varint::put(dst, zigzag(m.wrapping_sub(prev)));
            prev = m;
        }
        // Long-exponent decimals may cost more than their bits: keep the shorter.
        let decimal_len = dst.len() - values_at;
        if decimal_len <= xor_len(samples) {
            return true;
        }
        dst.truncate(values_at);
    }
    put_xor(samples, dst);
    true
}

fn xor_len(samples: &[Sample]) -> usize {
    let mut len = 1 + 8;
    for w in samples.windows(2) {
        let [a, b] = w else { continue };
        let (lead, trail) = trim(a.value.to_bits() ^ b.value.to_bits());
        len += 9 - lead - trail;
    }
    len
}

/// Zero bytes at the top and at the bottom of `x` (`(8, 0)` for 0).
fn trim(x: u64) -> (usize, usize) {
    if x == 0 {
        return (8, 0);
    }
    ((x.leading_zeros() / 8) as usize, (x.trailing_zeros() / 8) as usize)
}

fn put_xor(samples: &[Sample], dst: &mut Vec<u8>) {
    dst.push(XOR_MODE);
    let mut prev = 0u64;
    for (i, s) in samples.iter().enumerate() {
        let bits = s.value.to_bits();
        if i == 0 {
            dst.extend_from_slice(&bits.to_le_bytes());
        } else {
            let x = bits ^ prev;
            let (lead, trail) = trim(x);
            dst.push(((lead as u8) << 4) | trail as u8);
            let bytes = x.to_le_bytes();
            dst.extend_from_slice(bytes.get(trail..8 - lead).unwrap_or_default());
        }
        prev = bits;
    }
}

fn take_varint(src: &mut &[u8]) -> Result<u64, CompactRunError> {
    let (v, rest) = varint::read(src).map_err(|_| CompactRunError)?;
    *src = rest;
    Ok(v)
}

fn take_byte(src: &mut &[u8]) -> Result<u8, CompactRunError> {
    let (&b, rest) = src.split_first().ok_or(CompactRunError)?;
    *src = rest;
    Ok(b)
}

/// Decodes a compact run whose first timestamp is `first_ts` (the row key's), appending its
/// samples to `out`; `max_samples` bounds the count.
///
/// # Errors
/// [`CompactRunError`] for anything but a whole compact run: a wrong marker, a count below 2 or
/// above `max_samples`, a timestamp not ascending or out of range, a truncated value or bytes
/// left over.
pub fn decode(first_ts: i64, value: &[u8], max_samples: usize, out: &mut Vec<Sample>) -> Result<(), CompactRunError> {
    let base = out.len();
    let decoded = decode_into(first_ts, value, max_samples, out);
    if decoded.is_err() {
        out.truncate(base);
    }
    decoded
}

fn decode_into(first_ts: i64, value: &[u8], max_samples: usize, out: &mut Vec<Sample>) -> Result<(), CompactRunError> {
    let mut src = value;
    if take_byte(&mut src)? != MARKER {
        return Err(CompactRunError);
    }
    let n = usize::try_from(take_varint(&mut src)?).map_err(|_| CompactRunError)?;
    // Every sample takes at least a byte of timestamp or value: bound `n` by the row's size.
    if !(2..=max_samples).contains(&n) || n > value.len() {
        return Err(CompactRunError);
    }
    let base = out.len();
    out.reserve(n);
    out.push(Sample::new(first_ts, 0.0));
    let (mut ts, mut delta) = (first_ts, 0i64);
    for i in 1..n {
        let raw = take_varint(&mut src)?;
        delta = if i == 1 {
            i64::try_from(raw).map_err(|_| CompactRunError)?
        } else {
            delta.checked_add(unzigzag(raw)).ok_or(CompactRunError)?
        };
        if delta <= 0 {
            return Err(CompactRunError);
        }
        ts = ts.checked_add(delta).ok_or(CompactRunError)?;
        out.push(Sample::new(ts, 0.0));
    }
    let samples = out.get_mut(base..).ok_or(CompactRunError)?;
    match take_byte(&mut src)? {
        XOR_MODE => {
            let mut prev = 0u64;
            for (i, s) in samples.iter_mut().enumerate() {
                let bits = if i == 0 {
                    let (head, rest) = src.split_first_chunk::<8>().ok_or(CompactRunError)?;
                    src = rest;
                    u64::from_le_bytes(*head)
                } else {
                    let c = take_byte(&mut src)?;
                    let (lead, trail) = (usize::from(c >> 4), usize::from(c & 0x0f));
                    let len = 8usize.checked_sub(lead + trail).ok_or(CompactRunError)?;
                    let (mid, rest) = src.split_at_checked(len).ok_or(CompactRunError)?;
                    src = rest;
                    let mut bytes = [0u8; 8];
                    bytes.get_mut(trail..trail + len).ok_or(CompactRunError)?.copy_from_slice(mid);
                    prev ^ u64::from_le_bytes(bytes)
                };
                s.value = f64::from_bits(bits);
                prev = bits;
            }
        }
        e => {
            let p = *POW10.get(usize::from(e)).ok_or(CompactRunError)?;
            let mut m = 0i64;
            for s in samples.iter_mut() {
                m = m.wrapping_add(unzigzag(take_varint(&mut src)?));
                s.value = m as f64 / p;
            }
        }
    }
    if !src.is_empty() {
        return Err(CompactRunError);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn bits(v: &[Sample]) -> Vec<(i64, u64)> {
        v.iter().map(|s| (s.timestamp_ms, s.value.to_bits())).collect()
    }

    fn round_trip(run: &[Sample]) -> Vec<u8> {
        let mut buf = Vec::new();
        assert!(encode(run, &mut buf));
        let mut out = vec![Sample::new(1, 1.0)];
        decode(run[0].timestamp_ms, &buf, 4096, &mut out).unwrap();
        assert_eq!(bits(&out[1..]), bits(run));
        buf
    }

    #[test]
    fn scrapes_take_a_few_bytes_a_sample() {
        // A counter scraped every 15 s with a few ms of jitter: 4 samples in 16 bytes (marker,
        // count, 4 of timestamps, mode, 3 for the first value and 2 for each next one).
        let run: Vec<Sample> =
            (0..4).map(|i| Sample::new(1_700_000_000_000 + i * 15_000 + i % 3, 1e6 + 300.0 * i as f64)).collect();
        let buf = round_trip(&run);
        assert_eq!(buf.len(), 16);
        assert_eq!(buf.get(6), Some(&0), "decimal, e = 0");
        let gauge: Vec<Sample> =
            [45.67, 45.1, 47.0, 0.01].iter().enumerate().map(|(i, &v)| Sample::new(i as i64 + 1, v)).collect();
        assert_eq!(round_trip(&gauge).get(5), Some(&2), "decimal, e = 2");
    }

    #[test]
    fn special_values_use_xor_bits() {
        for v in [-0.0, f64::NAN, f64::from_bits(0x7ff0_0000_0000_0002), f64::INFINITY, 0.1 + 0.2] {
            let run = [Sample::new(-5, 1.0), Sample::new(7, v), Sample::new(8, v)];
            let buf = round_trip(&run);
            assert_eq!(buf.get(4), Some(&XOR_MODE), "{v}");
        }
    }

    #[test]
    fn not_ascending_is_refused() {
        let mut buf = vec![9];
        assert!(!encode(&[Sample::new(5, 1.0), Sample::new(5, 2.0)], &mut buf));
        assert_eq!(buf, [9]);
    }

    /// Runs shaped like scrapes (decimal values, near-regular timestamps) or arbitrary ones.
    fn arb_run() -> impl Strategy<Value = Vec<Sample>> {
        let value = prop_oneof![
            any::<u64>().prop_map(f64::from_bits),
            (-1_000_000i64..1_000_000, 0u32..6).prop_map(|(m, e)| m as f64 / 10f64.powi(e as i32)),
            (0u64..1 << 20).prop_map(|k| (k * 4096) as f64),
            Just(f64::NAN),
            Just(-0.0),
        ];
        let delta = prop_oneof![1i64..1_000_000_000_000, 14_990i64..15_010, Just(15_000i64)];
        (-1_000_000_000_000i64..4_000_000_000_000, proptest::collection::vec((delta, value), 2..200)).prop_map(
            |(start, points)| {
                let mut ts = start;
                points
                    .into_iter()
                    .map(|(d, v)| {
                        ts += d;
                        Sample::new(ts, v)
                    })
                    .collect()
            },
        )
    }

    proptest! {
        /// Against the reference: the samples themselves, and the raw run's decoding of them.
        #[test]
        fn runs_round_trip_bit_exact(run in arb_run()) {
            let mut buf = Vec::new();
            prop_assert!(encode(&run, &mut buf));
            let mut out = Vec::new();
            decode(run[0].timestamp_ms, &buf, 4096, &mut out).unwrap();
            prop_assert_eq!(bits(&out), bits(&run));
            let mut raw = Vec::new();
            super::super::run::encode_raw(&run, &mut raw).unwrap();
            let mut via_raw = Vec::new();
            super::super::run::decode_row(&crate::storage::format::keys::point_key(0, 1, run[0].timestamp_ms), &raw, &mut via_raw).unwrap();
            prop_assert_eq!(bits(&via_raw), bits(&out));
            // Every truncation, and every count above the bound, is an error, never a panic.
            for cut in 0..buf.len() {
                prop_assert!(decode(run[0].timestamp_ms, &buf[..cut], 4096, &mut Vec::new()).is_err());
            }
            prop_assert!(decode(run[0].timestamp_ms, &buf, run.len() - 1, &mut Vec::new()).is_err());
        }

        #[test]
        fn arbitrary_bytes_never_panic(first in any::<i64>(), mut bytes in proptest::collection::vec(any::<u8>(), 0..100)) {
            if let Some(b) = bytes.first_mut() {
                *b = MARKER;
            }
            let _ = decode(first, &bytes, 4096, &mut Vec::new());
        }
    }
}
