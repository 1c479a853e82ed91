//! The bit-level codes of histogram chunks: variable-width signed integers, XOR-compressed floats
//! and adaptive Rice-coded counter streams, written with [`BitWriter`] and read through a reader
//! that counts the bits left.

use crate::bits::{BitReader, BitWriter};

use super::{unzigzag, zigzag, DecodeError};

/// Payload widths of the integer classes: class `k` is `k` one bits, a zero bit (not for the
/// last class), then `WIDTHS[k]` bits of two's complement. Class 0 (a single `0` bit) is 0.
const WIDTHS: [u32; 9] = [0, 2, 4, 7, 10, 14, 20, 32, 64];

/// Appends `v` in the smallest class that holds it.
pub(super) fn put_int(w: &mut BitWriter, v: i64) {
    let last = WIDTHS.len() - 1;
    for (k, &width) in WIDTHS.iter().enumerate() {
        let fits = width == 64 || (width > 0 && (-(1i64 << (width - 1))..(1i64 << (width - 1))).contains(&v));
        if v == 0 || fits {
            let ones = k as u32;
            w.write((1u64 << ones) - 1, ones);
            if k < last {
                w.write_bit(false);
            }
            w.write(v as u64, width);
            return;
        }
    }
}

/// The XOR state of one float stream: the previous value and the meaningful-bit window of the
/// last XOR written with an explicit window.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Xor {
    bits: u64,
    /// `(leading zeros, trailing zeros)`; none before the first explicit window.
    window: Option<(u32, u32)>,
}

/// Appends `v` XORed with the previous value: `0` (same bits), `10` + the bits inside the last
/// window, or `11` + 6 bits leading zeros + 6 bits (length - 1) + the meaningful bits.
pub(super) fn put_xor(w: &mut BitWriter, st: &mut Xor, v: f64) {
    let bits = v.to_bits();
    let x = bits ^ st.bits;
    st.bits = bits;
    if x == 0 {
        w.write_bit(false);
        return;
    }
    let (lead, trail) = (x.leading_zeros(), x.trailing_zeros());
    if let Some((l, t)) = st.window {
        if lead >= l && trail >= t {
            w.write(0b10, 2);
            w.write(x >> t, 64 - l - t);
            return;
        }
    }
    let len = 64 - lead - trail;
    w.write(0b11, 2);
    w.write(u64::from(lead), 6);
    w.write(u64::from(len - 1), 6);
    w.write(x >> trail, len);
    st.window = Some((lead, trail));
}

/// Unary-prefix length after which a Rice code escapes to [`put_int`].
const RICE_ESCAPE: u32 = 20;

/// How a counter stream predicts the next delta.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Predict {
    /// The previous delta (the residual is the delta-of-delta).
    Previous,
    /// A running mean of the deltas (exponential, weight 1/4, in sixteenths).
    Mean,
}

/// An integer stream of one count (a bucket, the zero bucket): the first value written whole,
/// then each delta minus its prediction, Rice-coded with a parameter that follows the recent
/// residual sizes (as JPEG-LS adapts its Golomb codes), so that quiet buckets cost a bit or two
/// and busy ones about their entropy.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Counter {
    /// 0 before the first value, 1 after it, 2 once a delta was seen.
    seen: u8,
    value: i64,
    delta: i64,
    /// Running mean of the deltas, times 16.
    mean: i64,
    /// Sum and number of recent residual sizes (zigzagged), halved every 16.
    size_sum: u64,
    size_n: u64,
}

impl Counter {
    fn predict(&self, p: Predict) -> i64 {
        match p {
            Predict::Previous => self.delta,
            Predict::Mean => self.mean.wrapping_add(8) >> 4,
        }
    }

    fn rice_k(&self) -> u32 {
        let n = self.size_n.max(1);
        let mut k = 0;
        while k < 58 && (n << k) < self.size_sum {
            k += 1;
        }
        k
    }

    fn advance(&mut self, v: i64, delta: i64, size: u64) {
        self.mean = if self.seen < 2 {
            delta.wrapping_shl(4)
        } else {
            self.mean.wrapping_add((delta.wrapping_shl(4).wrapping_sub(self.mean)) >> 2)
        };
        self.size_sum = self.size_sum.saturating_add(size);
        self.size_n += 1;
        if self.size_n >= 16 {
            self.size_sum >>= 1;
            self.size_n >>= 1;
        }
        (self.value, self.delta, self.seen) = (v, delta, 2);
    }

    /// Appends `v`.
    pub(super) fn put(&mut self, w: &mut BitWriter, p: Predict, v: i64) {
        if self.seen == 0 {
            put_int(w, v);
            (self.value, self.seen) = (v, 1);
            return;
        }
        let delta = v.wrapping_sub(self.value);
        let u = zigzag(delta.wrapping_sub(self.predict(p)));
        let k = self.rice_k();
        let q = u >> k;
        if q < u64::from(RICE_ESCAPE) {
            w.write((1u64 << q) - 1, q as u32);
            w.write_bit(false);
            w.write(u, k);
        } else {
            w.write((1u64 << RICE_ESCAPE) - 1, RICE_ESCAPE);
            put_int(w, u as i64);
        }
        self.advance(v, delta, u);
    }

    /// Reads what [`Counter::put`] wrote.
    pub(super) fn read(&mut self, r: &mut Bits<'_>, p: Predict) -> Result<i64, DecodeError> {
        if self.seen == 0 {
            let v = r.int()?;
            (self.value, self.seen) = (v, 1);
            return Ok(v);
        }
        let mut q = 0;
        while q < RICE_ESCAPE && r.bit()? {
            q += 1;
        }
        let u = if q == RICE_ESCAPE {
            r.int()? as u64
        } else {
            let k = self.rice_k();
            (u64::from(q) << k) | r.read(k)?
        };
        let delta = self.predict(p).wrapping_add(unzigzag(u));
        let v = self.value.wrapping_add(delta);
        self.advance(v, delta, u);
        Ok(v)
    }
}

/// Reads bits, counting how many are left so that decoders can bound what they allocate.
pub(super) struct Bits<'a> {
    reader: BitReader<'a>,
    left: u64,
}

impl<'a> Bits<'a> {
    pub(super) fn new(src: &'a [u8]) -> Self {
        Self { reader: BitReader::new(src), left: src.len() as u64 * 8 }
    }

    /// Bits not read yet.
    pub(super) fn left(&self) -> u64 {
        self.left
    }

    pub(super) fn read(&mut self, n: u32) -> Result<u64, DecodeError> {
        if u64::from(n) > self.left {
            return Err(DecodeError::Truncated);
        }
        self.left -= u64::from(n);
        self.reader.read(n).map_err(|_| DecodeError::Truncated)
    }

    pub(super) fn bit(&mut self) -> Result<bool, DecodeError> {
        Ok(self.read(1)? == 1)
    }

    /// Reads what [`put_int`] wrote.
    pub(super) fn int(&mut self) -> Result<i64, DecodeError> {
        let last = WIDTHS.len() - 1;
        let mut k = 0;
        while k < last && self.bit()? {
            k += 1;
        }
        let width = WIDTHS.get(k).copied().unwrap_or(64);
        let raw = self.read(width)?;
        Ok(match width {
            0 => 0,
            64 => raw as i64,
            w => ((raw << (64 - w)) as i64) >> (64 - w),
        })
    }

    /// Reads what [`put_xor`] wrote.
    pub(super) fn xor(&mut self, st: &mut Xor) -> Result<f64, DecodeError> {
        if self.bit()? {
            let x = if self.bit()? {
                let lead = self.read(6)? as u32;
                let len = self.read(6)? as u32 + 1;
                let trail = 64u32.checked_sub(lead + len).ok_or(DecodeError::Corrupt("XOR window beyond 64 bits"))?;
                st.window = Some((lead, trail));
                self.read(len)? << trail
            } else {
                let (l, t) = st.window.ok_or(DecodeError::Corrupt("XOR window reused before one was set"))?;
                self.read(64 - l - t)? << t
            };
            st.bits ^= x;
        }
        Ok(f64::from_bits(st.bits))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn ints_and_floats_round_trip(
            ints in proptest::collection::vec(prop_oneof![any::<i64>(), -300i64..300], 0..40),
            floats in proptest::collection::vec(prop_oneof![any::<f64>(), (0u32..100).prop_map(f64::from)], 0..40),
        ) {
            let mut w = BitWriter::new();
            ints.iter().for_each(|&v| put_int(&mut w, v));
            let mut st = Xor::default();
            floats.iter().for_each(|&v| put_xor(&mut w, &mut st, v));
            let bytes = w.into_bytes();
            let mut r = Bits::new(&bytes);
            for &v in &ints {
                prop_assert_eq!(r.int().unwrap(), v);
            }
            let mut st = Xor::default();
            for &v in &floats {
                prop_assert_eq!(r.xor(&mut st).unwrap().to_bits(), v.to_bits());
            }
            prop_assert!(r.left() < 8);
        }
    }

    #[test]
    fn small_ints_are_short() {
        let size = |v: i64| {
            let mut w = BitWriter::new();
            put_int(&mut w, v);
            w.into_bytes().len()
        };
        assert_eq!(size(0), 1);
        assert_eq!(size(-2), 1);
        assert_eq!(size(i64::MIN), 9);
    }
}
