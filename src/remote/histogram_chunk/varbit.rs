//! Prometheus' variable-width integers (`varbit.go`): a prefix of up to eight bits announces
//! the payload's width.

use crate::bits::{BitReader, BitWriter};

use super::HistogramChunkError;

/// True when `x` fits `nbits` bits in Prometheus' varbit sense.
pub(super) fn bit_range(x: i64, nbits: u32) -> bool {
    -((1i64 << (nbits - 1)) - 1) <= x && x <= 1i64 << (nbits - 1)
}

/// Prefix (value, width) and payload width of each varbit bucket, smallest first.
pub(super) const VARBIT: [(u64, u32, u32); 8] = [
    (0b10, 2, 3),
    (0b110, 3, 6),
    (0b1110, 4, 9),
    (0b11110, 5, 12),
    (0b11_1110, 6, 18),
    (0b111_1110, 7, 25),
    (0b1111_1110, 8, 56),
    (0b1111_1111, 8, 64),
];

pub(super) fn write_varbit_int(w: &mut BitWriter, v: i64) {
    if v == 0 {
        w.write_bit(false);
        return;
    }
    let (prefix, plen, bits) = VARBIT.into_iter().find(|&(_, _, n)| n == 64 || bit_range(v, n)).unwrap_or(VARBIT[7]);
    w.write(prefix, plen);
    w.write(v as u64, bits);
}

pub(super) fn write_varbit_uint(w: &mut BitWriter, v: u64) {
    if v == 0 {
        w.write_bit(false);
        return;
    }
    let (prefix, plen, bits) =
        VARBIT.into_iter().find(|&(_, _, n)| n == 64 || v.leading_zeros() >= 64 - n).unwrap_or(VARBIT[7]);
    w.write(prefix, plen);
    w.write(v, bits);
}

/// The payload width a varbit prefix announces (0 for the value 0).
pub(super) fn read_varbit_width(r: &mut BitReader<'_>) -> Result<u32, HistogramChunkError> {
    let mut ones = 0usize;
    while ones < 8 && r.bit()? {
        ones += 1;
    }
    Ok(match ones {
        0 => 0,
        // Prefixes of 1..=7 ones are followed by a zero bit, 8 ones by none.
        k => VARBIT.get(k - 1).map_or(64, |&(_, _, n)| n),
    })
}

pub(super) fn read_varbit_int(r: &mut BitReader<'_>) -> Result<i64, HistogramChunkError> {
    let n = read_varbit_width(r)?;
    if n == 0 {
        return Ok(0);
    }
    let mut bits = r.read(n)?;
    if n < 64 && bits > 1 << (n - 1) {
        bits = bits.wrapping_sub(1 << n);
    }
    Ok(bits as i64)
}

pub(super) fn read_varbit_uint(r: &mut BitReader<'_>) -> Result<u64, HistogramChunkError> {
    let n = read_varbit_width(r)?;
    if n == 0 {
        return Ok(0);
    }
    Ok(r.read(n)?)
}
