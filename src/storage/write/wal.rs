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
//!
//! A group with native histograms writes version 2: the version byte (2), the byte length of
//! the float entries (varint), the float entries as in version 1, then per series with
//! histograms: `series_id` (varint), the byte length of a histogram chunk (varint) and the chunk
//! (`docs/format.md`, *Histogram chunks*) of its histograms, ascending. Replay applies the float
//! entries first, so a histogram wins over a float of the same timestamp in one group.

use std::sync::Arc;

use crate::histogram::chunk as histogram_chunk;
use crate::sample::{HistogramSample, Sample};
use crate::storage::series_id::SeriesId;

const VERSION: u8 = 1;
const VERSION_WITH_HISTOGRAMS: u8 = 2;

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

/// Appends the histogram entry of series `id` to `dst`, the row's histogram section (see
/// [`finish`]); `samples` must be strictly ascending (a chunk's order).
///
/// # Errors
/// [`WalError::Invalid`] when the samples cannot be encoded (not ascending, or a histogram whose
/// spans do not fit its buckets, which ingest validation rules out).
pub fn push_histograms(dst: &mut Vec<u8>, id: SeriesId, samples: &[HistogramSample]) -> Result<(), WalError> {
    let borrowed: Vec<(i64, &crate::histogram::Histogram)> =
        samples.iter().map(|s| (s.timestamp_ms, &*s.histogram)).collect();
    let mut chunk = Vec::new();
    histogram_chunk::encode_fast(&borrowed, &mut chunk)
        .map_err(|_| WalError::Invalid("histograms cannot be encoded"))?;
    put_varint(dst, id);
    put_varint(dst, chunk.len() as u64);
    dst.extend_from_slice(&chunk);
    Ok(())
}

/// Ends a row begun with [`begin`]: with a non-empty histogram section, turns it into a
/// version 2 row holding both.
pub fn finish(row: &mut Vec<u8>, histograms: &[u8]) {
    if histograms.is_empty() {
        return;
    }
    let floats = row.get(1..).unwrap_or_default().to_vec();
    row.clear();
    row.push(VERSION_WITH_HISTOGRAMS);
    put_varint(row, floats.len() as u64);
    row.extend_from_slice(&floats);
    row.extend_from_slice(histograms);
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

/// Decodes a log row of floats only, calling `f` per entry in order (a row with histograms is
/// refused). Never panics; never allocates more than the row's size justifies.
///
/// # Errors
/// [`WalError`] describing what is wrong.
pub fn decode(src: &[u8], f: impl FnMut(SeriesId, &[Sample])) -> Result<(), WalError> {
    match src.first() {
        Some(&VERSION) => decode_floats(src, 1, f),
        Some(&v) => Err(WalError::Version(v)),
        None => Err(WalError::Truncated),
    }
}

/// Decodes a log row of either version: `f` per float entry in order, then `g` per histogram
/// entry in order. Never panics; never allocates more than the row's size justifies.
///
/// # Errors
/// [`WalError`] describing what is wrong; nothing is reported for a row whose histogram
/// section fails.
pub fn decode_all(
    src: &[u8],
    f: impl FnMut(SeriesId, &[Sample]),
    mut g: impl FnMut(SeriesId, &[HistogramSample]),
) -> Result<(), WalError> {
    match src.first() {
        Some(&VERSION) => return decode(src, f),
        Some(&VERSION_WITH_HISTOGRAMS) => {}
        Some(&v) => return Err(WalError::Version(v)),
        None => return Err(WalError::Truncated),
    }
    let mut r = Reader { src, at: 1 };
    let len = usize::try_from(r.varint()?).map_err(|_| WalError::Truncated)?;
    let end = r.at.checked_add(len).filter(|&e| e <= src.len()).ok_or(WalError::Truncated)?;
    let floats = src.get(r.at..end).ok_or(WalError::Truncated)?;
    // Histograms are decoded first, so a row that fails reports nothing.
    let mut entries = Vec::new();
    let mut h = Reader { src, at: end };
    while h.at < src.len() {
        let id = h.varint()?;
        let n = usize::try_from(h.varint()?).map_err(|_| WalError::Truncated)?;
        let chunk_end = h.at.checked_add(n).filter(|&e| e <= src.len()).ok_or(WalError::Truncated)?;
        let chunk = src.get(h.at..chunk_end).ok_or(WalError::Truncated)?;
        h.at = chunk_end;
        let samples: Vec<HistogramSample> = histogram_chunk::decode(chunk)
            .map_err(|_| WalError::Invalid("histogram chunk"))?
            .into_iter()
            .map(|(timestamp_ms, h)| HistogramSample { timestamp_ms, histogram: Arc::new(h) })
            .collect();
        entries.push((id, samples));
    }
    decode_floats(floats, 0, f)?;
    for (id, samples) in &entries {
        g(*id, samples);
    }
    Ok(())
}

fn decode_floats(src: &[u8], from: usize, mut f: impl FnMut(SeriesId, &[Sample])) -> Result<(), WalError> {
    let mut r = Reader { src, at: from };
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
            let _ = decode_all(&bytes, |_, _| {}, |_, _| {});
            let mut v2 = vec![VERSION_WITH_HISTOGRAMS];
            v2.extend_from_slice(&bytes);
            let _ = decode_all(&v2, |_, _| {}, |_, _| {});
        }

        #[test]
        fn rows_with_histograms_round_trip(
            floats in proptest::collection::vec((any::<u64>(), 0i64..1_000_000, any::<u64>()), 0..5),
            hists in proptest::collection::vec((any::<u64>(), proptest::collection::btree_set(0i64..1_000_000, 1..6), 0u32..50), 0..5),
        ) {
            let mut row = Vec::new();
            begin(&mut row);
            for &(id, t, v) in &floats {
                push(&mut row, id, &[Sample::new(t, f64::from_bits(v))]);
            }
            let mut section = Vec::new();
            let mut want_h = Vec::new();
            for (id, times, c) in &hists {
                let samples: Vec<HistogramSample> = times.iter().map(|&t| histogram_at(t, f64::from(*c) + t as f64)).collect();
                push_histograms(&mut section, *id, &samples).unwrap();
                want_h.push((*id, samples));
            }
            finish(&mut row, &section);
            prop_assert_eq!(row.first().copied(), Some(if hists.is_empty() { VERSION } else { VERSION_WITH_HISTOGRAMS }));
            let (mut got_f, mut got_h) = (Vec::new(), Vec::new());
            decode_all(&row, |id, s| got_f.push((id, s[0].timestamp_ms, s[0].value.to_bits())), |id, s| got_h.push((id, s.to_vec())))
                .unwrap();
            prop_assert_eq!(got_f, floats);
            prop_assert_eq!(got_h, want_h);
        }
    }

    fn histogram_at(t: i64, count: f64) -> HistogramSample {
        let h = crate::histogram::Histogram {
            schema: 1,
            count,
            sum: count * 2.5,
            zero_count: 0.0,
            positive_spans: vec![crate::histogram::Span { offset: 0, length: 1 }],
            positive_buckets: vec![count],
            ..Default::default()
        };
        HistogramSample { timestamp_ms: t, histogram: Arc::new(h) }
    }

    #[test]
    fn a_float_only_reader_refuses_rows_with_histograms() {
        let mut row = Vec::new();
        begin(&mut row);
        let mut section = Vec::new();
        push_histograms(&mut section, 7, &[histogram_at(5, 3.0)]).unwrap();
        finish(&mut row, &section);
        assert_eq!(decode(&row, |_, _| {}), Err(WalError::Version(VERSION_WITH_HISTOGRAMS)));
        // A truncated histogram section is an error, and no entry is reported.
        let cut = &row[..row.len() - 1];
        let (mut floats, mut histograms) = (0, 0);
        assert!(decode_all(cut, |_, _| floats += 1, |_, _| histograms += 1).is_err());
        assert_eq!((floats, histograms), (0, 0));
    }

    #[test]
    fn bad_rows_are_errors() {
        assert_eq!(decode(&[], |_, _| {}), Err(WalError::Truncated));
        assert_eq!(decode(&[9], |_, _| {}), Err(WalError::Version(9)));
        assert!(decode(&[1, 5, 0], |_, _| {}).is_err());
        assert!(decode(&[1, 5, 200, 1, 0], |_, _| {}).is_err());
    }
}
