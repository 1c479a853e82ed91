//! The write-ahead log of the head: one row per group commit in the `wal` keyspace, key the
//! commit's sequence number (u64 big-endian), value the group's samples by series id. The row
//! is written in the same atomic fjall batch as the group's new series and window-index rows,
//! so an acknowledged write is durable exactly as before; a head flush removes the rows it
//! covered in the batch that writes the runs. On open, the remaining rows are replayed in
//! sequence order into the head. Pure encoding here; no I/O.
//!
//! Value layout: a version byte (1), then per entry: `series_id` (varint), sample count `n >= 1`
//! (varint), the first timestamp (varint), then `n` times: the value's bits (8 bytes, little
//! endian) followed, for every sample but the last, by the next timestamp's delta (zigzag
//! varint). Entries keep the order of the group, so replay applies writes in the order they
//! were acknowledged (a later write of a timestamp wins).

use super::series::SeriesId;
use crate::sample::Sample;

const VERSION: u8 = 1;

/// Why a log row could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WalError {
    /// The bytes end inside an entry.
    #[error("write-ahead log row is truncated")]
    Truncated,
    /// Unknown version byte.
    #[error("unsupported write-ahead log version {0}")]
    Version(u8),
    /// A field is out of range.
    #[error("write-ahead log row is invalid: {0}")]
    Invalid(&'static str),
}

/// Key of log row `seq`.
pub fn key(seq: u64) -> [u8; 8] {
    seq.to_be_bytes()
}

/// Sequence number of a log key.
pub fn decode_key(key: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(key.try_into().ok()?))
}

fn put_varint(dst: &mut Vec<u8>, v: u64) {
    crate::varint::put(dst, v);
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// Starts a log row in `dst` (cleared first).
pub fn begin(dst: &mut Vec<u8>) {
    dst.clear();
    dst.push(VERSION);
}

/// Appends one entry; `samples` must be non-empty, in the order they were written.
pub fn push(dst: &mut Vec<u8>, id: SeriesId, samples: &[Sample]) {
    let Some(first) = samples.first() else { return };
    put_varint(dst, id);
    put_varint(dst, samples.len() as u64);
    put_varint(dst, zigzag(first.timestamp_ms));
    let mut prev = first.timestamp_ms;
    for (i, s) in samples.iter().enumerate() {
        if i > 0 {
            put_varint(dst, zigzag(s.timestamp_ms.wrapping_sub(prev)));
            prev = s.timestamp_ms;
        }
        dst.extend_from_slice(&s.value.to_bits().to_le_bytes());
    }
}

struct Reader<'a> {
    src: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn varint(&mut self) -> Result<u64, WalError> {
        let rest = self.src.get(self.at..).unwrap_or_default();
        let (v, tail) = crate::varint::read(rest).map_err(|e| match e {
            crate::varint::VarintError::Truncated => WalError::Truncated,
            crate::varint::VarintError::Overflow => WalError::Invalid("varint out of range"),
        })?;
        self.at += rest.len() - tail.len();
        Ok(v)
    }

    fn value(&mut self) -> Result<f64, WalError> {
        let b = self.src.get(self.at..self.at + 8).ok_or(WalError::Truncated)?;
        self.at += 8;
        Ok(f64::from_bits(u64::from_le_bytes(b.try_into().map_err(|_| WalError::Truncated)?)))
    }
}

/// Decodes a log row, calling `f` per entry in order. Never panics; never allocates more than
/// the row's size justifies.
///
/// # Errors
/// [`WalError`] describing what is wrong.
pub fn decode(src: &[u8], mut f: impl FnMut(SeriesId, &[Sample])) -> Result<(), WalError> {
    match src.first() {
        Some(&VERSION) => {}
        Some(&v) => return Err(WalError::Version(v)),
        None => return Err(WalError::Truncated),
    }
    let mut r = Reader { src, at: 1 };
    let mut samples = Vec::new();
    while r.at < src.len() {
        let id = r.varint()?;
        let n = r.varint()?;
        // Every sample takes at least 8 bytes: a count beyond that is corrupt.
        if n == 0 || n > (src.len() - r.at) as u64 / 8 {
            return Err(WalError::Invalid("sample count does not fit the row"));
        }
        samples.clear();
        let mut ts = unzigzag(r.varint()?);
        for i in 0..n {
            if i > 0 {
                ts = ts.wrapping_add(unzigzag(r.varint()?));
            }
            samples.push(Sample::new(ts, r.value()?));
        }
        f(id, &samples);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn rows_round_trip_bit_exact(
            entries in proptest::collection::vec(
                (any::<u64>(), proptest::collection::vec((0i64..=crate::sample::MAX_TIMESTAMP_MS, any::<u64>()), 1..20)),
                0..10,
            )
        ) {
            let mut row = Vec::new();
            begin(&mut row);
            for (id, samples) in &entries {
                let samples: Vec<Sample> = samples.iter().map(|&(t, v)| Sample::new(t, f64::from_bits(v))).collect();
                push(&mut row, *id, &samples);
            }
            let mut got = Vec::new();
            decode(&row, |id, s| got.push((id, s.iter().map(|x| (x.timestamp_ms, x.value.to_bits())).collect::<Vec<_>>())))
                .unwrap();
            prop_assert_eq!(got, entries);
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode(&bytes, |_, _| {});
        }
    }

    #[test]
    fn bad_rows_are_errors() {
        assert_eq!(decode(&[], |_, _| {}), Err(WalError::Truncated));
        assert_eq!(decode(&[9], |_, _| {}), Err(WalError::Version(9)));
        assert!(decode(&[1, 5, 0], |_, _| {}).is_err());
        assert!(decode(&[1, 5, 200, 1, 0], |_, _| {}).is_err());
    }
}
