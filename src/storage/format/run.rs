//! Sample rows of a window keyspace, hot or sealed: each row holds a *run* of one series'
//! samples, keyed by the run's first timestamp (`keys::point_key(bucket, id, first_ts)`).
//!
//! A row value is either
//! - 8 bytes: a single sample, the value's bits big-endian (the format of saltdb's first hot
//!   rows, still read; a flushed run of one sample is stored this way, without a chunk header); or
//! - a *raw run* (first byte [`RAW_RUN`]), what head flushes wrote before format 6 (and still
//!   write when a compact run would be 8 bytes long, the length of a single sample): cheap to encode, and it
//!   decodes at memory speed, because recent data is what dashboards read most. Layout: the
//!   marker, the sample count `n` (u32 LE), the first timestamp (i64 LE), the `n` values' bits
//!   (u64 LE each), then `n - 1` timestamp deltas (unsigned LEB128 varints, > 0). About 10 bytes
//!   a sample before the keyspace's LZ4; sealing rewrites it compactly; or
//! - a *compact run* (first byte [`COMPACT_RUN`]), what head flushes write since format 6:
//!   the first timestamp is the key's, then varint timestamp deltas of deltas and the values as
//!   varint deltas of decimal mantissas (or XOR'd bits, byte-trimmed). About 4 bytes a scraped
//!   sample instead of 10, still decoded without a bit reader or zstd (layout: `docs/format.md`);
//! - a chunk (see [`super::chunk`], at least its 11-byte header, first byte its version):
//!   Gorilla or decimal + zstd for sealed windows.
//!
//! Invariant, per series and keyspace: runs never overlap in time. Runs sort newest first (keys
//! hold reversed timestamps), so their last timestamps descend too, and a range read stops at
//! the first run that starts at or before the range's start.

use super::chunk;
use super::compact_run;
use super::keys;
use crate::sample::Sample;
use crate::storage::error::{Result, StorageError};
use crate::storage::series_id::SeriesId;

/// Most samples in one hot run; a longer merged run is split.
pub const MAX_RUN_SAMPLES: usize = 4096;
/// First byte of a raw run (chunk versions are small numbers).
pub const RAW_RUN: u8 = 0x80;
const RAW_HEADER_LEN: usize = 13;

/// Encodes a run for a hot keyspace into `dst` (cleared first).
///
/// # Errors
/// [`StorageError::Corrupt`] when `samples` is empty, too long or not strictly ascending (a bug
/// upstream).
pub fn encode_hot(samples: &[Sample], dst: &mut Vec<u8>) -> Result<()> {
    dst.clear();
    let unsorted = StorageError::Corrupt { what: "unsorted run" };
    let (Some(_), true) = (samples.first(), samples.len() <= MAX_RUN_SAMPLES) else { return Err(unsorted) };
    if let [one] = samples {
        dst.extend_from_slice(&keys::encode_value(one.value));
        return Ok(());
    }
    if !compact_run::encode(samples, dst) {
        return Err(unsorted);
    }
    // Eight bytes would read as a single sample: such a (short) run is written raw instead.
    if dst.len() != 8 {
        return Ok(());
    }
    encode_raw(samples, dst)
}

/// Encodes a raw run (see the module doc) into `dst` (cleared first): what head flushes wrote
/// before format 6, still written where a compact run would be 8 bytes long.
///
/// # Errors
/// [`StorageError::Corrupt`] when `samples` has fewer than 2 samples, too many, or is not strictly
/// ascending (a bug upstream).
pub(crate) fn encode_raw(samples: &[Sample], dst: &mut Vec<u8>) -> Result<()> {
    dst.clear();
    let unsorted = StorageError::Corrupt { what: "unsorted run" };
    let (Some(first), true) = (samples.first(), (2..=MAX_RUN_SAMPLES).contains(&samples.len())) else {
        return Err(unsorted);
    };
    dst.reserve(RAW_HEADER_LEN + samples.len() * 10);
    dst.push(RAW_RUN);
    dst.extend_from_slice(&(samples.len() as u32).to_le_bytes());
    dst.extend_from_slice(&first.timestamp_ms.to_le_bytes());
    for s in samples {
        dst.extend_from_slice(&s.value.to_bits().to_le_bytes());
    }
    for w in samples.windows(2) {
        let [a, b] = w else { continue };
        let delta = b.timestamp_ms.wrapping_sub(a.timestamp_ms);
        if delta <= 0 {
            return Err(unsorted);
        }
        let mut d = delta.unsigned_abs();
        while d >= 0x80 {
            dst.push((d as u8) | 0x80);
            d >>= 7;
        }
        dst.push(d as u8);
    }
    Ok(())
}

/// Decodes a raw run (see the module doc), appending to `out`.
fn decode_raw(value: &[u8], out: &mut Vec<Sample>) -> Result<()> {
    let corrupt = || StorageError::Corrupt { what: "raw run" };
    let header = value.get(..RAW_HEADER_LEN).ok_or_else(corrupt)?;
    let n = u32::from_le_bytes(header.get(1..5).and_then(|b| b.try_into().ok()).ok_or_else(corrupt)?) as usize;
    let mut ts = i64::from_le_bytes(header.get(5..13).and_then(|b| b.try_into().ok()).ok_or_else(corrupt)?);
    // Values take 8 bytes each and every delta at least one: bound `n` by the row's size.
    if !(2..=MAX_RUN_SAMPLES).contains(&n) || value.len() < RAW_HEADER_LEN + n * 9 - 1 {
        return Err(corrupt());
    }
    let (values, deltas) = value.get(RAW_HEADER_LEN..).ok_or_else(corrupt)?.split_at(n * 8);
    out.reserve(n);
    let mut at = 0usize;
    for (i, bits) in values.chunks_exact(8).enumerate() {
        if i > 0 {
            let mut d = 0u64;
            let mut shift = 0;
            loop {
                let b = *deltas.get(at).ok_or_else(corrupt)?;
                at += 1;
                d |= u64::from(b & 0x7f) << shift;
                if b < 0x80 {
                    break;
                }
                shift += 7;
                if shift > 63 {
                    return Err(corrupt());
                }
            }
            ts = ts.wrapping_add(d as i64);
        }
        let bits: [u8; 8] = bits.try_into().map_err(|_| corrupt())?;
        out.push(Sample::new(ts, f64::from_bits(u64::from_le_bytes(bits))));
    }
    if at != deltas.len() {
        return Err(corrupt());
    }
    Ok(())
}

/// Appends the samples of one row to `out`, ascending.
///
/// # Errors
/// [`StorageError::Corrupt`] for a key or value that is not a run row.
pub fn decode_row(key: &[u8], value: &[u8], out: &mut Vec<Sample>) -> Result<()> {
    // Length first: a single value's first byte may be anything (-0.0 starts with 0x80).
    if value.len() != 8 && value.first() == Some(&RAW_RUN) {
        return decode_raw(value, out);
    }
    if value.len() != 8 && value.first() == Some(&compact_run::MARKER) {
        let (_, _, first_ts) = keys::decode_point_key(key).ok_or(StorageError::Corrupt { what: "point key" })?;
        return compact_run::decode(first_ts, value, MAX_RUN_SAMPLES, out)
            .map_err(|_| StorageError::Corrupt { what: "compact run" });
    }
    if value.len() == 8 {
        return match (keys::decode_point_key(key), keys::decode_value(value)) {
            (Some((_, _, ts)), Some(v)) => {
                out.push(Sample::new(ts, v));
                Ok(())
            }
            (None, _) => Err(StorageError::Corrupt { what: "point key" }),
            (_, None) => Err(StorageError::Corrupt { what: "point value" }),
        };
    }
    chunk::decode(value, out).map_err(|_| StorageError::Corrupt { what: "chunk" })
}

/// Samples of a series in `[start, end]` from the runs of one keyspace, appended to `out`
/// ascending. Scans from the newest run starting at or before `end` back to the first run that
/// starts at or before `start`.
///
/// # Errors
/// Engine errors and corrupt rows.
pub fn read(
    ks: &fjall::Keyspace,
    bucket: u16,
    id: SeriesId,
    start_ms: i64,
    end_ms: i64,
    out: &mut Vec<Sample>,
) -> Result<()> {
    if end_ms < 0 || start_ms > end_ms {
        return Ok(());
    }
    let lo = keys::point_key(bucket, id, end_ms);
    let hi = keys::point_key(bucket, id, 0);
    // Runs are met newest first: collect the rows (cheap shared slices) down to the first run
    // that starts at or before `start`, then decode them oldest first, straight into place.
    let mut rows = Vec::new();
    for guard in ks.range(lo..=hi) {
        let (key, value) = guard.into_inner()?;
        let first = keys::decode_point_key(&key).map_or(i64::MIN, |(_, _, ts)| ts);
        rows.push((key, value));
        if first <= start_ms {
            break;
        }
    }
    decode_rows(&mut rows, start_ms, end_ms, out)
}

/// As [`read`] for several series of one bucket at once: one iterator over the key range from
/// the first to the last of `ids` (ascending, deduplicated), skipping the rows of series not in
/// `ids`. Appends the samples of `ids[i]` to `outs[i]`. Cheaper than a seek per series when the
/// wanted series are a good part of the range (see `read/select.rs`).
///
/// # Errors
/// Engine errors and corrupt rows.
pub fn read_many(
    ks: &fjall::Keyspace,
    bucket: u16,
    ids: &[SeriesId],
    start_ms: i64,
    end_ms: i64,
    outs: &mut [Vec<Sample>],
) -> Result<()> {
    let (Some(&first), Some(&last)) = (ids.first(), ids.last()) else { return Ok(()) };
    if end_ms < 0 || start_ms > end_ms {
        return Ok(());
    }
    let corrupt = || StorageError::Corrupt { what: "point key" };
    // Rows of the series being read (newest first), and its index in `ids`.
    let mut rows: Vec<(fjall::Slice, fjall::Slice)> = Vec::new();
    let mut current: Option<(usize, bool)> = None;
    let mut next = 0;
    for guard in ks.range(keys::point_key(bucket, first, end_ms)..=keys::point_key(bucket, last, 0)) {
        let (key, value) = guard.into_inner()?;
        let (_, id, first_ts) = keys::decode_point_key(&key).ok_or_else(corrupt)?;
        if current.is_none_or(|(i, _)| ids.get(i) != Some(&id)) {
            if let Some((i, _)) = current.take() {
                decode_rows(&mut rows, start_ms, end_ms, outs.get_mut(i).ok_or_else(corrupt)?)?;
            }
            while ids.get(next).is_some_and(|&want| want < id) {
                next += 1;
            }
            if ids.get(next) == Some(&id) {
                current = Some((next, false));
            }
        }
        let Some((_, done)) = current.as_mut() else { continue };
        // Runs starting after the range hold nothing of it; after the first run starting at
        // or before its start, older runs hold nothing either.
        if *done || first_ts > end_ms {
            continue;
        }
        *done = first_ts <= start_ms;
        rows.push((key, value));
    }
    if let Some((i, _)) = current {
        decode_rows(&mut rows, start_ms, end_ms, outs.get_mut(i).ok_or_else(corrupt)?)?;
    }
    Ok(())
}

/// Decodes `rows` (one series, newest first) oldest first into `out`, keeping `[start, end]`;
/// empties `rows`.
fn decode_rows(
    rows: &mut Vec<(fjall::Slice, fjall::Slice)>,
    start_ms: i64,
    end_ms: i64,
    out: &mut Vec<Sample>,
) -> Result<()> {
    for (key, value) in rows.drain(..).rev() {
        let from = out.len();
        decode_row(&key, &value, out)?;
        let run = out.get(from..).unwrap_or_default();
        let keep_from = run.partition_point(|s| s.timestamp_ms < start_ms);
        let keep_to = run.partition_point(|s| s.timestamp_ms <= end_ms);
        out.truncate(from + keep_to);
        out.drain(from..from + keep_from);
    }
    Ok(())
}

/// The newest sample at or before `at_ms` of a series in one keyspace.
///
/// # Errors
/// Engine errors and corrupt rows.
pub fn latest(ks: &fjall::Keyspace, bucket: u16, id: SeriesId, at_ms: i64) -> Result<Option<Sample>> {
    if at_ms < 0 {
        return Ok(None);
    }
    let Some(guard) = ks.range(keys::point_key(bucket, id, at_ms)..=keys::point_key(bucket, id, 0)).next() else {
        return Ok(None);
    };
    let (key, value) = guard.into_inner()?;
    let mut run = Vec::new();
    decode_row(&key, &value, &mut run)?;
    Ok(run.into_iter().rev().find(|s| s.timestamp_ms <= at_ms))
}

/// Appends the ascending merge of `older` and `newer` to `out`; `newer` wins on equal timestamps.
/// Both inputs must be ascending.
pub fn merge_into(out: &mut Vec<Sample>, older: &[Sample], newer: &[Sample]) {
    match (older.last(), newer.first()) {
        (None, _) => return out.extend_from_slice(newer),
        (_, None) => return out.extend_from_slice(older),
        (Some(o), Some(n)) if o.timestamp_ms < n.timestamp_ms => {
            out.extend_from_slice(older);
            return out.extend_from_slice(newer);
        }
        _ => {}
    }
    out.reserve(older.len() + newer.len());
    let (mut i, mut j) = (0, 0);
    while let (Some(a), Some(b)) = (older.get(i), newer.get(j)) {
        if a.timestamp_ms < b.timestamp_ms {
            out.push(*a);
            i += 1;
        } else {
            if a.timestamp_ms == b.timestamp_ms {
                i += 1;
            }
            out.push(*b);
            j += 1;
        }
    }
    out.extend_from_slice(older.get(i..).unwrap_or_default());
    out.extend_from_slice(newer.get(j..).unwrap_or_default());
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn s(ts: i64, v: f64) -> Sample {
        Sample::new(ts, v)
    }

    #[test]
    fn single_and_chunk_rows_round_trip() {
        let mut buf = Vec::new();
        let runs = [
            vec![s(5, f64::from_bits(0x7ff0_0000_0000_0002))],
            vec![s(5, -0.0)],
            vec![s(5, 1.0), s(20, -0.0), s(21, f64::NAN)],
        ];
        for run in runs {
            encode_hot(&run, &mut buf).unwrap();
            let mut out = Vec::new();
            decode_row(&keys::point_key(3, 9, run[0].timestamp_ms), &buf, &mut out).unwrap();
            assert_eq!(out.len(), run.len());
            for (a, b) in out.iter().zip(&run) {
                assert_eq!((a.timestamp_ms, a.value.to_bits()), (b.timestamp_ms, b.value.to_bits()));
            }
        }
        assert!(encode_hot(&[], &mut buf).is_err());
        assert!(encode_hot(&[s(2, 1.0), s(2, 1.0)], &mut buf).is_err());
    }

    #[test]
    fn corrupt_rows_are_errors() {
        let mut out = Vec::new();
        assert!(decode_row(&[1, 2, 3], &[0; 8], &mut out).is_err());
        assert!(decode_row(&keys::point_key(0, 1, 1), &[0; 9], &mut out).is_err());
    }

    proptest! {
        #[test]
        fn hot_runs_round_trip_bit_exact(
            start in 0i64..=crate::sample::MAX_TIMESTAMP_MS / 2,
            points in proptest::collection::vec((1i64..1_000_000_000_000, any::<u64>()), 1..300),
        ) {
            let mut ts = start;
            let run: Vec<Sample> = points.iter().map(|&(d, v)| { ts += d; Sample::new(ts, f64::from_bits(v)) }).collect();
            let mut buf = Vec::new();
            encode_hot(&run, &mut buf).unwrap();
            let mut out = Vec::new();
            decode_row(&keys::point_key(1, 2, run[0].timestamp_ms), &buf, &mut out).unwrap();
            let bits = |v: &[Sample]| v.iter().map(|s| (s.timestamp_ms, s.value.to_bits())).collect::<Vec<_>>();
            prop_assert_eq!(bits(&out), bits(&run));
            // Every truncation is an error, never a panic.
            for cut in 0..buf.len() {
                let mut out = Vec::new();
                let decoded = decode_row(&keys::point_key(1, 2, 0), &buf[..cut], &mut out);
                prop_assert!(decoded.is_err() || cut == 8);
            }
        }

        #[test]
        fn arbitrary_rows_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let mut out = Vec::new();
            let _ = decode_row(&keys::point_key(1, 2, 3), &bytes, &mut out);
            let mut raw = bytes.clone();
            if let Some(b) = raw.first_mut() {
                *b = RAW_RUN;
            }
            let _ = decode_row(&keys::point_key(1, 2, 3), &raw, &mut out);
        }

        #[test]
        fn merge_is_sorted_unique_and_newer_wins(
            older in proptest::collection::btree_map(0i64..200, 0u8..4, 0..40),
            newer in proptest::collection::btree_map(0i64..200, 4u8..8, 0..40),
        ) {
            let o: Vec<Sample> = older.iter().map(|(&t, &v)| s(t, f64::from(v))).collect();
            let n: Vec<Sample> = newer.iter().map(|(&t, &v)| s(t, f64::from(v))).collect();
            let mut out = Vec::new();
            merge_into(&mut out, &o, &n);
            let mut expect = older.clone();
            expect.extend(newer.iter().map(|(&t, &v)| (t, v)));
            let expect: Vec<Sample> = expect.iter().map(|(&t, &v)| s(t, f64::from(v))).collect();
            prop_assert_eq!(out, expect);
        }
    }
}
