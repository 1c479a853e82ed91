//! Prometheus' XOR chunk format (`tsdb/chunkenc/xor.go`), byte for byte, as remote read's
//! `STREAMED_XOR_CHUNKS` response carries it:
//!
//! | part | encoding |
//! |---|---|
//! | header | number of samples, `u16` big-endian |
//! | sample 0 | timestamp as zig-zag varint, value as 64 raw bits |
//! | sample 1 | timestamp delta as uvarint, value XOR-encoded |
//! | sample n | delta-of-delta: `0` / `10`+14 bits / `110`+17 / `1110`+20 / `1111`+64, value XOR-encoded |
//!
//! XOR value encoding: `0` when equal to the previous value; else `1`, then `0` + the meaningful
//! bits when they fit the previous leading/trailing-zero window, or `1` + 5 bits leading zeros +
//! 6 bits significant-bit count (64 written as 0) + the significant bits. Bits are written most
//! significant first.

use crate::bits::{BitReader, BitWriter, EndOfBits};
use crate::sample::Sample;

/// Samples per chunk Prometheus cuts at; remote read uses the same size.
pub const SAMPLES_PER_CHUNK: usize = 120;

/// A chunk that is not valid XOR data.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("corrupt XOR chunk: {0}")]
pub struct XorError(&'static str);

impl From<EndOfBits> for XorError {
    fn from(_: EndOfBits) -> Self {
        Self("unexpected end of data")
    }
}

/// Encodes samples (ascending timestamps, at most `u16::MAX`) into one XOR chunk.
pub fn encode(samples: &[Sample]) -> Vec<u8> {
    let samples = samples.get(..usize::from(u16::MAX)).unwrap_or(samples);
    let mut w = BitWriter::with_capacity(2 + samples.len() * 2);
    // `samples.len() <= u16::MAX` by the slice above.
    let n = u16::try_from(samples.len()).unwrap_or(u16::MAX);
    w.write(u64::from(n), 16);
    let (mut t, mut t_delta, mut v) = (0i64, 0u64, 0u64);
    let (mut leading, mut trailing) = (0xffu8, 0u8);
    for (i, s) in samples.iter().enumerate() {
        let bits = s.value.to_bits();
        match i {
            0 => {
                write_varint(&mut w, s.timestamp_ms);
                w.write(bits, 64);
            }
            1 => {
                t_delta = s.timestamp_ms.wrapping_sub(t) as u64;
                write_uvarint(&mut w, t_delta);
                write_xor(&mut w, bits ^ v, &mut leading, &mut trailing);
            }
            _ => {
                let delta = s.timestamp_ms.wrapping_sub(t) as u64;
                let dod = delta.wrapping_sub(t_delta) as i64;
                if dod == 0 {
                    w.write_bit(false);
                } else if bit_range(dod, 14) {
                    w.write(0b10, 2);
                    w.write(dod as u64, 14);
                } else if bit_range(dod, 17) {
                    w.write(0b110, 3);
                    w.write(dod as u64, 17);
                } else if bit_range(dod, 20) {
                    w.write(0b1110, 4);
                    w.write(dod as u64, 20);
                } else {
                    w.write(0b1111, 4);
                    w.write(dod as u64, 64);
                }
                t_delta = delta;
                write_xor(&mut w, bits ^ v, &mut leading, &mut trailing);
            }
        }
        t = s.timestamp_ms;
        v = bits;
    }
    w.into_bytes()
}

/// Decodes one XOR chunk.
///
/// # Errors
/// [`XorError`] when the data ends early or holds impossible bit widths.
pub fn decode(data: &[u8]) -> Result<Vec<Sample>, XorError> {
    let mut r = BitReader::new(data);
    let n = r.read(16)? as usize;
    let mut out = Vec::with_capacity(n.min(data.len() * 8));
    let (mut t, mut t_delta, mut v) = (0i64, 0u64, 0u64);
    let (mut leading, mut trailing) = (0u8, 0u8);
    for i in 0..n {
        match i {
            0 => {
                t = read_varint(&mut r)?;
                v = r.read(64)?;
            }
            1 => {
                t_delta = read_uvarint(&mut r)?;
                t = t.wrapping_add(t_delta as i64);
                v = read_xor(&mut r, v, &mut leading, &mut trailing)?;
            }
            _ => {
                let mut prefix = 0u8;
                for _ in 0..4 {
                    prefix <<= 1;
                    if !r.bit()? {
                        break;
                    }
                    prefix |= 1;
                }
                let dod = match prefix {
                    0b0 => 0,
                    0b10 => read_signed(&mut r, 14)?,
                    0b110 => read_signed(&mut r, 17)?,
                    0b1110 => read_signed(&mut r, 20)?,
                    _ => r.read(64)? as i64,
                };
                t_delta = (t_delta as i64).wrapping_add(dod) as u64;
                t = t.wrapping_add(t_delta as i64);
                v = read_xor(&mut r, v, &mut leading, &mut trailing)?;
            }
        }
        out.push(Sample::new(t, f64::from_bits(v)));
    }
    Ok(out)
}

fn bit_range(x: i64, nbits: u32) -> bool {
    -((1i64 << (nbits - 1)) - 1) <= x && x <= 1i64 << (nbits - 1)
}

fn read_signed(r: &mut BitReader<'_>, sz: u32) -> Result<i64, XorError> {
    let mut bits = r.read(sz)?;
    // Negative numbers come back as large unsigned ones (Prometheus' docs/bstream.md).
    if bits > 1 << (sz - 1) {
        bits = bits.wrapping_sub(1 << sz);
    }
    Ok(bits as i64)
}

pub(super) fn write_xor(w: &mut BitWriter, delta: u64, leading: &mut u8, trailing: &mut u8) {
    if delta == 0 {
        w.write_bit(false);
        return;
    }
    w.write_bit(true);
    // Both counts are at most 64 and fit u8.
    let new_leading = (delta.leading_zeros() as u8).min(31);
    let new_trailing = delta.trailing_zeros() as u8;
    if *leading != 0xff && new_leading >= *leading && new_trailing >= *trailing {
        w.write_bit(false);
        w.write(delta >> *trailing, 64 - u32::from(*leading) - u32::from(*trailing));
        return;
    }
    *leading = new_leading;
    *trailing = new_trailing;
    w.write_bit(true);
    w.write(u64::from(new_leading), 5);
    let sigbits = 64 - u32::from(new_leading) - u32::from(new_trailing);
    // 64 significant bits are written as 0 (6 bits cannot hold 64).
    w.write(u64::from(sigbits), 6);
    w.write(delta >> new_trailing, sigbits);
}

pub(super) fn read_xor(r: &mut BitReader<'_>, v: u64, leading: &mut u8, trailing: &mut u8) -> Result<u64, XorError> {
    if !r.bit()? {
        return Ok(v);
    }
    if r.bit()? {
        *leading = r.read(5)? as u8;
        let mut sig = r.read(6)? as u8;
        if sig == 0 {
            sig = 64;
        }
        *trailing = 64u8
            .checked_sub(*leading)
            .and_then(|x| x.checked_sub(sig))
            .ok_or(XorError("leading + significant bits exceed 64"))?;
    }
    let sig = 64u32
        .checked_sub(u32::from(*leading) + u32::from(*trailing))
        .ok_or(XorError("leading + trailing bits exceed 64"))?;
    let bits = r.read(sig)?;
    Ok(v ^ bits.checked_shl(u32::from(*trailing)).unwrap_or(0))
}

fn write_varint(w: &mut BitWriter, x: i64) {
    write_uvarint(w, ((x << 1) ^ (x >> 63)) as u64);
}

fn write_uvarint(w: &mut BitWriter, mut x: u64) {
    while x >= 0x80 {
        w.write((x & 0x7f) | 0x80, 8);
        x >>= 7;
    }
    w.write(x, 8);
}

fn read_uvarint(r: &mut BitReader<'_>) -> Result<u64, XorError> {
    let mut x = 0u64;
    for shift in (0..64).step_by(7) {
        let b = r.read(8)?;
        x |= (b & 0x7f) << shift;
        if b < 0x80 {
            return Ok(x);
        }
    }
    Err(XorError("varint overflows 64 bits"))
}

fn read_varint(r: &mut BitReader<'_>) -> Result<i64, XorError> {
    let u = read_uvarint(r)?;
    Ok((u >> 1) as i64 ^ -((u & 1) as i64))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn known_layout_of_two_samples() {
        // Header 2, varint(zigzag(1000)) = d0 0f, 64 value bits of 1.0, uvarint(15) = 0f, then
        // the XOR bit `0` (same value), padded.
        let data = encode(&[Sample::new(1000, 1.0), Sample::new(1015, 1.0)]);
        assert_eq!(data, [0, 2, 0xd0, 0x0f, 0x3f, 0xf0, 0, 0, 0, 0, 0, 0, 0x0f, 0x00]);
        assert_eq!(decode(&data).unwrap(), vec![Sample::new(1000, 1.0), Sample::new(1015, 1.0)]);
    }

    #[test]
    fn empty_chunk() {
        assert_eq!(encode(&[]), [0, 0]);
        assert_eq!(decode(&[0, 0]).unwrap(), vec![]);
        assert!(decode(&[0]).is_err());
        assert!(decode(&[0, 1]).is_err());
    }

    #[test]
    fn stale_marker_survives_bit_exact() {
        let stale = f64::from_bits(crate::sample::STALE_NAN_BITS);
        let s = vec![Sample::new(0, 1.0), Sample::new(15_000, stale), Sample::new(30_000, 2.5)];
        let back = decode(&encode(&s)).unwrap();
        assert_eq!(back[1].value.to_bits(), crate::sample::STALE_NAN_BITS);
    }

    fn arb_samples() -> impl Strategy<Value = Vec<(i64, u64)>> {
        proptest::collection::vec(
            (
                prop_oneof![Just(0i64), Just(15_000), -2_000_000i64..2_000_000, any::<i64>()],
                prop_oneof![Just(0u64), any::<u64>(), (0u32..1000).prop_map(|x| f64::from(x).to_bits())],
            ),
            0..300,
        )
    }

    proptest! {
        #[test]
        fn round_trip_is_bit_exact(steps in arb_samples(), start in any::<i64>()) {
            let mut t = start;
            let samples: Vec<Sample> = steps.iter().map(|&(d, v)| { t = t.wrapping_add(d); Sample::new(t, f64::from_bits(v)) }).collect();
            let back = decode(&encode(&samples)).unwrap();
            prop_assert_eq!(back.len(), samples.len());
            for (a, b) in back.iter().zip(&samples) {
                prop_assert_eq!(a.timestamp_ms, b.timestamp_ms);
                prop_assert_eq!(a.value.to_bits(), b.value.to_bits());
            }
        }

        #[test]
        fn decoder_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode(&bytes);
        }
    }
}
