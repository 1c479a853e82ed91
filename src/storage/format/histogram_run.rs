//! Histogram runs: a series' native histogram samples in a window keyspace (hot or sealed), one
//! row per run of at most [`MAX_RUN_HISTOGRAMS`] samples, keyed in the histogram family
//! ([`keys::histogram_key`]: the float runs' key with `0x8000` added to the bucket), the value a
//! histogram chunk (`docs/format.md`, *Histogram chunks*).
//!
//! Invariants, as for float runs: per series and keyspace, histogram runs never overlap in time,
//! and the newest run is the first key a seek meets. Float and histogram runs of one series are
//! separate families and may overlap in time; no timestamp holds both once written through the
//! head (see `write/head.rs`), and should two rows ever disagree, reads keep the histogram.

use std::sync::Arc;

use super::keys;
use crate::histogram::chunk as histogram_chunk;
use crate::histogram::Histogram;
use crate::sample::HistogramSample;
use crate::storage::series_id::SeriesId;
use crate::storage::{Result, StorageError};

/// Samples per histogram run row at most.
pub const MAX_RUN_HISTOGRAMS: usize = 120;

/// Appends the row value of `samples` (strictly ascending, at least one) to `dst`.
///
/// # Errors
/// [`StorageError::Corrupt`] when they cannot be encoded (not ascending, or spans that do not
/// fit the buckets, which ingest validation rules out).
pub fn encode(samples: &[HistogramSample], dst: &mut Vec<u8>) -> Result<()> {
    let borrowed: Vec<(i64, &Histogram)> = samples.iter().map(|s| (s.timestamp_ms, &*s.histogram)).collect();
    histogram_chunk::encode(&borrowed, dst).map_err(|_| StorageError::Corrupt { what: "histogram samples to encode" })
}

/// Decodes a row value, appending its samples (ascending) to `out`.
///
/// # Errors
/// [`StorageError::Corrupt`] for bytes that are not a histogram chunk.
pub fn decode(value: &[u8], out: &mut Vec<HistogramSample>) -> Result<()> {
    let samples = histogram_chunk::decode(value).map_err(|_| StorageError::Corrupt { what: "histogram chunk" })?;
    out.extend(samples.into_iter().map(|(timestamp_ms, h)| HistogramSample { timestamp_ms, histogram: Arc::new(h) }));
    Ok(())
}

/// True when the keyspace holds any histogram row (one seek).
///
/// # Errors
/// Engine errors.
pub fn any(ks: &fjall::Keyspace) -> Result<bool> {
    let (lo, hi) = keys::histogram_family_bounds();
    match ks.range(lo..hi).next() {
        Some(guard) => guard.into_inner().map(|_| true).map_err(StorageError::from),
        None => Ok(false),
    }
}

/// Whether `ks` holds a histogram run of one series.
///
/// # Errors
/// Engine errors.
pub fn any_of(ks: &fjall::Keyspace, bucket: u16, id: SeriesId) -> Result<bool> {
    match ks.prefix(keys::histogram_series_prefix(bucket, id)).next() {
        Some(guard) => guard.into_inner().map(|_| true).map_err(StorageError::from),
        None => Ok(false),
    }
}

/// The histogram samples of a series in `[start, end]` from one keyspace, appended to `out`
/// ascending. Reads from the newest run starting at or before `end` back to the first run that
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
    out: &mut Vec<HistogramSample>,
) -> Result<()> {
    if end_ms < 0 || start_ms > end_ms {
        return Ok(());
    }
    let mut rows = Vec::new();
    for guard in ks.range(keys::histogram_key(bucket, id, end_ms)..=keys::histogram_key(bucket, id, 0)) {
        let (key, value) = guard.into_inner()?;
        let first = keys::decode_point_key(&key).map_or(i64::MIN, |(_, _, ts)| ts);
        rows.push(value);
        if first <= start_ms {
            break;
        }
    }
    for value in rows.iter().rev() {
        let from = out.len();
        decode(value, out)?;
        let run = out.get(from..).unwrap_or_default();
        let keep_from = run.partition_point(|s| s.timestamp_ms < start_ms);
        let keep_to = run.partition_point(|s| s.timestamp_ms <= end_ms);
        out.truncate(from + keep_to);
        out.drain(from..from + keep_from);
    }
    Ok(())
}

/// Adds to `fb` the rows storing `piece` (ascending, one window) of series `id` in `ks`, merged
/// with the runs of the keyspace it overlaps (`piece` wins on equal timestamps), and removes
/// the rows it replaces. Returns the rows written.
///
/// # Errors
/// Engine errors and corrupt rows.
pub fn write(
    fb: &mut fjall::OwnedWriteBatch,
    ks: &fjall::Keyspace,
    bucket: u16,
    id: SeriesId,
    piece: &[HistogramSample],
) -> Result<usize> {
    let (Some(first), Some(last)) = (piece.first(), piece.last()) else { return Ok(0) };
    let (a, b) = (first.timestamp_ms, last.timestamp_ms);
    // Runs starting at or before `b`, newest first; stop at the first one ending before `a`.
    let mut old_keys = Vec::new();
    let mut found: Vec<Vec<HistogramSample>> = Vec::new();
    for guard in ks.range(keys::histogram_key(bucket, id, b)..=keys::histogram_key(bucket, id, 0)) {
        let (key, value) = guard.into_inner()?;
        let mut run = Vec::new();
        decode(&value, &mut run)?;
        if run.last().is_none_or(|s| s.timestamp_ms < a) {
            break;
        }
        old_keys.push(key);
        found.push(run);
    }
    let old: Vec<HistogramSample> = found.into_iter().rev().flatten().collect();
    let merged = merge(&old, piece);
    let mut new_keys = Vec::new();
    let mut buf = Vec::new();
    for part in merged.chunks(MAX_RUN_HISTOGRAMS) {
        let Some(head) = part.first() else { continue };
        buf.clear();
        encode(part, &mut buf)?;
        let key = keys::histogram_key(bucket, id, head.timestamp_ms);
        fb.insert(ks, key, buf.clone());
        new_keys.push(key);
    }
    for key in old_keys {
        if !new_keys.iter().any(|k| k.as_slice() == &*key) {
            fb.remove(ks, key);
        }
    }
    Ok(new_keys.len())
}

/// Adds to `fb` the rewrite of series `id`'s histogram rows in `ks` without the samples in
/// `[start, end]`. Returns the samples removed and whether any sample of the series is left in
/// the keyspace.
///
/// # Errors
/// Engine errors and corrupt rows.
pub fn delete_range(
    fb: &mut fjall::OwnedWriteBatch,
    ks: &fjall::Keyspace,
    bucket: u16,
    id: SeriesId,
    (start_ms, end_ms): (i64, i64),
) -> Result<(u64, bool)> {
    let (mut removed, mut left) = (0u64, false);
    let mut buf = Vec::new();
    for guard in ks.prefix(keys::histogram_series_prefix(bucket, id)) {
        let (key, value) = guard.into_inner()?;
        let mut samples = Vec::new();
        decode(&value, &mut samples)?;
        let before = samples.len();
        samples.retain(|s| !(start_ms..=end_ms).contains(&s.timestamp_ms));
        left |= !samples.is_empty();
        if samples.len() == before {
            continue;
        }
        removed += (before - samples.len()) as u64;
        let new_key = samples.first().map(|s| keys::histogram_key(bucket, id, s.timestamp_ms));
        // A key removed and inserted in one batch would get one sequence number.
        if new_key.is_none_or(|k| k.as_slice() != &*key) {
            fb.remove(ks, key);
        }
        if let Some(new_key) = new_key {
            buf.clear();
            encode(&samples, &mut buf)?;
            fb.insert(ks, new_key, buf.clone());
        }
    }
    Ok((removed, left))
}

/// `older` and `newer` (each ascending) merged, ascending; `newer` wins on equal timestamps.
pub fn merge(older: &[HistogramSample], newer: &[HistogramSample]) -> Vec<HistogramSample> {
    let mut out = Vec::with_capacity(older.len() + newer.len());
    let (mut i, mut j) = (0, 0);
    while let (Some(o), Some(n)) = (older.get(i), newer.get(j)) {
        if o.timestamp_ms < n.timestamp_ms {
            out.push(o.clone());
            i += 1;
        } else {
            if o.timestamp_ms == n.timestamp_ms {
                i += 1;
            }
            out.push(n.clone());
            j += 1;
        }
    }
    out.extend(older.get(i..).unwrap_or_default().iter().cloned());
    out.extend(newer.get(j..).unwrap_or_default().iter().cloned());
    out
}

/// Removes from `floats` (ascending) every sample whose timestamp `histograms` (ascending) also
/// holds: a series has one value per instant, and a histogram written there wins.
pub fn drop_shadowed(floats: &mut Vec<crate::sample::Sample>, histograms: &[HistogramSample]) {
    if floats.is_empty() || histograms.is_empty() {
        return;
    }
    let mut j = 0;
    floats.retain(|s| {
        while histograms.get(j).is_some_and(|h| h.timestamp_ms < s.timestamp_ms) {
            j += 1;
        }
        histograms.get(j).is_none_or(|h| h.timestamp_ms != s.timestamp_ms)
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::histogram::Span;
    use crate::sample::Sample;
    use proptest::prelude::*;

    fn at(t: i64, c: f64) -> HistogramSample {
        let h = Histogram {
            schema: 0,
            count: c,
            sum: c,
            positive_spans: vec![Span { offset: 1, length: 1 }],
            positive_buckets: vec![c],
            ..Default::default()
        };
        HistogramSample { timestamp_ms: t, histogram: Arc::new(h) }
    }

    proptest! {
        #[test]
        fn merge_equals_a_map_where_newer_wins(
            older in proptest::collection::btree_map(0i64..100, 0u8..10, 0..20),
            newer in proptest::collection::btree_map(0i64..100, 10u8..20, 0..20),
        ) {
            let o: Vec<_> = older.iter().map(|(&t, &c)| at(t, f64::from(c))).collect();
            let n: Vec<_> = newer.iter().map(|(&t, &c)| at(t, f64::from(c))).collect();
            let mut want = older.clone();
            want.extend(newer.iter());
            let want: Vec<_> = want.iter().map(|(&t, &c)| at(t, f64::from(c))).collect();
            prop_assert_eq!(merge(&o, &n), want);
        }

        #[test]
        fn shadowed_floats_are_those_at_histogram_timestamps(
            floats in proptest::collection::btree_set(0i64..60, 0..30),
            hists in proptest::collection::btree_set(0i64..60, 0..30),
        ) {
            let mut f: Vec<Sample> = floats.iter().map(|&t| Sample::new(t, 1.0)).collect();
            let h: Vec<_> = hists.iter().map(|&t| at(t, 1.0)).collect();
            drop_shadowed(&mut f, &h);
            let want: Vec<i64> = floats.difference(&hists).copied().collect();
            prop_assert_eq!(f.iter().map(|s| s.timestamp_ms).collect::<Vec<_>>(), want);
        }
    }

    #[test]
    fn rows_round_trip_and_garbage_is_corrupt() {
        let samples: Vec<_> = (0..5).map(|i| at(1_000 + i * 15_000, i as f64)).collect();
        let mut buf = Vec::new();
        encode(&samples, &mut buf).unwrap();
        let mut out = Vec::new();
        decode(&buf, &mut out).unwrap();
        assert_eq!(out, samples);
        assert!(decode(&[0x80, 1, 2], &mut out).is_err());
        assert!(encode(&[at(5, 1.0), at(5, 2.0)], &mut buf).is_err());
    }
}
