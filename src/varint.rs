//! Unsigned LEB128 varints (7 bits a byte, low groups first, high bit = more follows), the one
//! varint codec of the storage formats that use it (`storage::wal`, `storage::postings`; see
//! `docs/format.md`). Pure: no I/O.

/// Appends `v`.
pub fn put(dst: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        dst.push((v as u8) | 0x80);
        v >>= 7;
    }
    dst.push(v as u8);
}

/// Why a varint could not be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum VarintError {
    /// The input ended inside the varint.
    #[error("truncated varint")]
    Truncated,
    /// More than 10 bytes, or bits beyond 64.
    #[error("varint out of range")]
    Overflow,
}

/// Reads one varint at the start of `src`; returns it and the rest.
///
/// # Errors
/// [`VarintError`] for a truncated or out-of-range varint.
pub fn read(src: &[u8]) -> Result<(u64, &[u8]), VarintError> {
    let mut v = 0u64;
    for (i, &b) in src.iter().enumerate().take(10) {
        let group = u64::from(b & 0x7f);
        let shift = 7 * i as u32;
        if shift == 63 && group > 1 {
            return Err(VarintError::Overflow);
        }
        v |= group << shift;
        if b < 0x80 {
            return Ok((v, src.get(i + 1..).unwrap_or_default()));
        }
    }
    Err(if src.len() < 10 { VarintError::Truncated } else { VarintError::Overflow })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn round_trips(vs in proptest::collection::vec(any::<u64>(), 0..50)) {
            let mut buf = Vec::new();
            for &v in &vs {
                put(&mut buf, v);
            }
            let mut rest = buf.as_slice();
            for &v in &vs {
                let (got, tail) = read(rest).unwrap();
                prop_assert_eq!(got, v);
                rest = tail;
            }
            prop_assert!(rest.is_empty());
        }

        #[test]
        fn never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..16)) {
            let _ = read(&bytes);
        }
    }

    #[test]
    fn refuses_truncated_and_oversized() {
        assert_eq!(read(&[0x80]), Err(VarintError::Truncated));
        assert_eq!(read(&[]), Err(VarintError::Truncated));
        assert_eq!(read(&[0xff; 10]), Err(VarintError::Overflow));
        assert_eq!(read(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]).map(|r| r.0), Ok(u64::MAX));
        assert_eq!(read(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02]), Err(VarintError::Overflow));
    }
}
