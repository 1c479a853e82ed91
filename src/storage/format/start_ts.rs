//! Start timestamps (created timestamps): when the counter a sample reports began (or, for a
//! delta series, the interval it covers). They change rarely next to the samples (a cumulative
//! counter keeps one until it restarts), so they are stored sparsely, as **change points**: a
//! row `(series, ts) -> st` says that from the sample at `ts` on the series' samples start at
//! `st` (0: no start timestamp), until the next row. Layout in `docs/format.md`, *Start
//! timestamps*.
//!
//! Rows live in the window keyspaces, keyed like the samples ([`keys::start_key`]: the sample
//! key with [`keys::START_FAMILY`] added to the bucket), so retention drops them with the
//! window and a delete removes them with the samples. The writer thread writes them in the
//! group commit of their samples (the batch that holds the group's log row), so they are as
//! durable as the samples without passing through the head or the log. Each window is
//! self-contained: the first sample with a start timestamp a series writes into a window gets
//! a row even when the start timestamp did not change, so a read never looks at windows the
//! query does not overlap.
//!
//! Invariants: rows of a series never share a timestamp (a later write of one replaces it); a
//! read takes, for a sample at `t`, the newest row at or before `t` among the keyspaces of the
//! sample's own window (the hot keyspace winning over the chunks on equal timestamps), none
//! when there is none. The writer remembers each series' current start timestamp (rebuilt at
//! open from the newest window's rows), so a series that stops sending them writes a row of
//! "none". Samples written out of order take the start timestamp of the change point before
//! them, and the row they write holds for the samples after them.

use super::keys;
use crate::sample::StartTimestamp;
use crate::storage::series_id::SeriesId;
use crate::storage::{Result, StorageError};

/// A change point of a series' start timestamps: from the sample at `timestamp_ms` on, samples
/// start at `start_ms` (0: they have none) until the next change point.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StartChange {
    /// The sample timestamp from which `start_ms` holds.
    pub timestamp_ms: i64,
    /// The start timestamp; 0 means none.
    pub start_ms: i64,
}

/// The start timestamps of one series over a time range: its change points in the range,
/// ascending, preceded by the last one before the range when there is one.
#[derive(Clone, Debug, PartialEq)]
pub struct SeriesStarts {
    /// The series.
    pub labels: crate::labels::Labels,
    /// Change points, strictly ascending by timestamp.
    pub changes: Vec<StartChange>,
}

/// The start timestamp of the sample at `t` under `changes` (ascending): that of the newest
/// change at or before `t`, 0 (none) before the first.
pub fn start_at(changes: &[StartChange], t: i64) -> i64 {
    let i = changes.partition_point(|c| c.timestamp_ms <= t);
    i.checked_sub(1).and_then(|i| changes.get(i)).map_or(0, |c| c.start_ms)
}

/// What the writer remembers of a series whose newest sample has a start timestamp: that
/// start timestamp and the window its last change point was written to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Current {
    /// The start timestamp of the series' newest sample (never 0).
    pub start_ms: i64,
    /// The start of the window of the series' last change point.
    pub window: i64,
}

/// The change points to write for one series' samples at `times` (ascending, distinct) with the
/// start timestamps `starts` (sorted by sample timestamp; a sample missing has none), after
/// `current`; returns them with the state after the last sample. A change point is written
/// where the start timestamp differs from the previous sample's, and at the first sample with
/// a start timestamp in each window (see the module doc).
pub fn changes(
    times: &[i64],
    starts: &[StartTimestamp],
    current: Option<Current>,
    window_of: impl Fn(i64) -> i64,
) -> (Vec<StartChange>, Option<Current>) {
    let mut out = Vec::new();
    let mut state = current;
    let mut next = 0;
    for &t in times {
        while starts.get(next).is_some_and(|s| s.timestamp_ms < t) {
            next += 1;
        }
        let st = starts.get(next).filter(|s| s.timestamp_ms == t).map_or(0, |s| s.start_ms);
        match state {
            None if st == 0 => {}
            Some(c) if c.start_ms == st && c.window == window_of(t) => {}
            _ => {
                out.push(StartChange { timestamp_ms: t, start_ms: st });
                state = (st != 0).then(|| Current { start_ms: st, window: window_of(t) });
            }
        }
    }
    (out, state)
}

/// Sorts a series' start timestamps by sample timestamp, the last one written for a timestamp
/// winning, and drops zeros (none).
pub fn sorted(starts: &[StartTimestamp]) -> Vec<StartTimestamp> {
    let mut v: Vec<StartTimestamp> = starts.iter().rev().filter(|s| s.start_ms != 0).copied().collect();
    // Stable on the reversed order: of equal timestamps, the last written comes first.
    v.sort_by_key(|s| s.timestamp_ms);
    v.dedup_by_key(|s| s.timestamp_ms);
    v
}

/// The value of a row: the start timestamp, `i64` big-endian.
pub fn encode_value(start_ms: i64) -> [u8; 8] {
    start_ms.to_be_bytes()
}

/// Decodes a row value.
///
/// # Errors
/// [`StorageError::Corrupt`] when it is not 8 bytes.
pub fn decode_value(value: &[u8]) -> Result<i64> {
    <[u8; 8]>::try_from(value)
        .map(i64::from_be_bytes)
        .map_err(|_| StorageError::Corrupt { what: "start timestamp row" })
}

/// True when the keyspace holds any start-timestamp row (one seek).
///
/// # Errors
/// Engine errors.
pub fn any(ks: &fjall::Keyspace) -> Result<bool> {
    let (lo, hi) = keys::start_family_bounds();
    match ks.range(lo..hi).next() {
        Some(guard) => guard.into_inner().map(|_| true).map_err(StorageError::from),
        None => Ok(false),
    }
}

/// Appends to `out`, ascending, the change points of a series in one keyspace from the last one
/// at or before `start_ms` to the last one at or before `end_ms`.
///
/// # Errors
/// Engine errors and corrupt rows.
pub fn read(
    ks: &fjall::Keyspace,
    bucket: u16,
    id: SeriesId,
    (start_ms, end_ms): (i64, i64),
    out: &mut Vec<StartChange>,
) -> Result<()> {
    if end_ms < 0 {
        return Ok(());
    }
    let from = out.len();
    for guard in ks.range(keys::start_key(bucket, id, end_ms)..=keys::start_key(bucket, id, 0)) {
        let (key, value) = guard.into_inner()?;
        let (_, _, timestamp_ms) =
            keys::decode_point_key(&key).ok_or(StorageError::Corrupt { what: "start timestamp key" })?;
        out.push(StartChange { timestamp_ms, start_ms: decode_value(&value)? });
        if timestamp_ms <= start_ms {
            break;
        }
    }
    if let Some(tail) = out.get_mut(from..) {
        tail.reverse();
    }
    Ok(())
}

/// Merges the change points read from several keyspaces (each ascending, later lists winning on
/// equal timestamps) and keeps those from the last one at or before `start_ms` on.
pub fn merge(lists: Vec<Vec<StartChange>>, start_ms: i64) -> Vec<StartChange> {
    let mut all: Vec<StartChange> = lists.into_iter().rev().flatten().collect();
    // Stable: of equal timestamps, the one of the later list comes first and is kept.
    all.sort_by_key(|c| c.timestamp_ms);
    all.dedup_by_key(|c| c.timestamp_ms);
    let first = all.partition_point(|c| c.timestamp_ms <= start_ms).saturating_sub(1);
    all.drain(..first);
    all
}

/// Per series with rows in `ks`: the start timestamp of its newest row (0: none), from which the
/// writer's state is rebuilt at open. One seek a series.
///
/// # Errors
/// Engine errors and corrupt rows.
pub fn newest(ks: &fjall::Keyspace) -> Result<Vec<(SeriesId, i64)>> {
    let (lo, hi) = keys::start_family_bounds();
    let mut from = lo.to_vec();
    let mut out = Vec::new();
    while let Some(guard) = ks.range(from.clone()..hi.to_vec()).next() {
        let (key, value) = guard.into_inner()?;
        let (field, id, _) =
            keys::decode_point_key(&key).ok_or(StorageError::Corrupt { what: "start timestamp key" })?;
        out.push((id, decode_value(&value)?));
        from = match id.checked_add(1) {
            Some(next) => keys::series_prefix(field, next).to_vec(),
            None => field.saturating_add(1).to_be_bytes().to_vec(),
        };
    }
    Ok(out)
}

/// Adds to `fb` the rows of `changes` (ascending) of series `id` in `ks`.
pub fn write(
    fb: &mut fjall::OwnedWriteBatch,
    ks: &fjall::Keyspace,
    bucket: u16,
    id: SeriesId,
    changes: &[StartChange],
) {
    for c in changes {
        fb.insert(ks, keys::start_key(bucket, id, c.timestamp_ms), encode_value(c.start_ms));
    }
}

/// Removes the series' rows in `[start, end]` from `ks` (adding to `fb`); when a row was removed
/// and `end + 1` lies before `window_end`, the start timestamp in force at `end` is written at
/// `end + 1`, so the samples after the range keep theirs. Returns the rows removed.
///
/// # Errors
/// Engine errors and corrupt rows.
pub fn delete_range(
    fb: &mut fjall::OwnedWriteBatch,
    ks: &fjall::Keyspace,
    bucket: u16,
    id: SeriesId,
    (start, end): (i64, i64),
    window_end: i64,
) -> Result<usize> {
    let mut in_force = None;
    let mut removed = 0;
    for guard in ks.range(keys::start_key(bucket, id, end)..=keys::start_key(bucket, id, start.max(0))) {
        let (key, value) = guard.into_inner()?;
        in_force.get_or_insert(decode_value(&value)?);
        fb.remove(ks, key);
        removed += 1;
    }
    let after = end.saturating_add(1);
    if let Some(st) = in_force.filter(|_| after < window_end) {
        if !ks.contains_key(keys::start_key(bucket, id, after))? {
            fb.insert(ks, keys::start_key(bucket, id, after), encode_value(st));
        }
    }
    Ok(removed)
}

/// Copies every start-timestamp row of `from` into `to` (adding to `fb`); returns the rows.
///
/// # Errors
/// Engine errors.
pub fn copy_all(fb: &mut fjall::OwnedWriteBatch, from: &fjall::Keyspace, to: &fjall::Keyspace) -> Result<usize> {
    let (lo, hi) = keys::start_family_bounds();
    let mut n = 0;
    for guard in from.range(lo..hi) {
        let (key, value) = guard.into_inner()?;
        fb.insert(to, key, value);
        n += 1;
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const WINDOW: i64 = 1_000;

    fn st(timestamp_ms: i64, start_ms: i64) -> StartTimestamp {
        StartTimestamp { timestamp_ms, start_ms }
    }

    fn ch(timestamp_ms: i64, start_ms: i64) -> StartChange {
        StartChange { timestamp_ms, start_ms }
    }

    #[test]
    fn a_constant_start_timestamp_is_one_row_a_window() {
        let times: Vec<i64> = (0..30).map(|i| i * 100).collect();
        let starts: Vec<StartTimestamp> = times.iter().map(|&t| st(t, 5)).collect();
        let (rows, state) = changes(&times, &starts, None, |t| t.div_euclid(WINDOW) * WINDOW);
        assert_eq!(rows, vec![ch(0, 5), ch(1_000, 5), ch(2_000, 5)]);
        assert_eq!(state, Some(Current { start_ms: 5, window: 2_000 }));
        // The next batch in the same window adds nothing.
        let (rows, _) = changes(&[3_500], &[st(3_500, 5)], Some(Current { start_ms: 5, window: 3_000 }), |t| {
            t.div_euclid(WINDOW) * WINDOW
        });
        assert!(rows.is_empty());
    }

    #[test]
    fn samples_without_start_timestamps_after_some_write_a_none_row() {
        let (rows, state) = changes(&[10, 20, 30], &[st(10, 1)], None, |_| 0);
        assert_eq!(rows, vec![ch(10, 1), ch(20, 0)]);
        assert_eq!(state, None);
        // A series that never had any writes nothing.
        assert_eq!(changes(&[10, 20], &[], None, |_| 0), (Vec::new(), None));
    }

    #[test]
    fn reads_keep_the_last_change_before_the_range() {
        let lists = vec![vec![ch(1, 1), ch(5, 2), ch(9, 3)], vec![ch(5, 7)]];
        assert_eq!(merge(lists, 6), vec![ch(5, 7), ch(9, 3)]);
        assert_eq!(start_at(&[ch(5, 7), ch(9, 0)], 4), 0);
        assert_eq!(start_at(&[ch(5, 7), ch(9, 0)], 8), 7);
        assert_eq!(start_at(&[ch(5, 7), ch(9, 0)], 9), 0);
    }

    /// Through the store: written with samples, read back per window, kept by a seal and a
    /// re-seal, cut by a deletion, and remembered across a reopen.
    #[test]
    fn start_timestamps_live_with_their_samples() {
        use crate::labels::Labels;
        use crate::matcher::Matcher;
        use crate::sample::{PackedBatch, Sample};
        use crate::storage::{FsyncMode, Querier, ReadLimits, Storage, StorageConfig};

        let dir = tempfile::tempdir().unwrap();
        let open = || {
            let mut config = StorageConfig::new(dir.path().to_path_buf());
            config.retention_ms = None;
            config.fsync = FsyncMode::Never;
            config.window_ms = 60_000;
            Storage::open(config).unwrap()
        };
        let labels = Labels::from_pairs([("__name__", "c")]).unwrap();
        let write = |store: &Storage, times: &[i64], start: Option<i64>| {
            let mut batch = PackedBatch::default();
            for l in labels.iter() {
                batch.push_label(&l.name, &l.value);
            }
            for &t in times {
                batch.push_sample(Sample::new(t, t as f64));
                if let Some(start_ms) = start {
                    batch.push_start(st(t, start_ms));
                }
            }
            batch.finish_series();
            store.write_packed(batch).unwrap();
        };
        let read = |store: &Storage, times: &[i64]| -> Vec<i64> {
            let q = store.querier(ReadLimits::none());
            let found = q.start_timestamps(&[Matcher::equal("__name__", "c")], 1, 1_000_000).unwrap();
            let changes = found.first().map(|s| s.changes.clone()).unwrap_or_default();
            times.iter().map(|&t| start_at(&changes, t)).collect()
        };
        let store = open();
        // Started at 5s, over two windows; then none in the third.
        let early: Vec<i64> = (1..12).map(|i| i * 10_000).collect();
        let late: Vec<i64> = (12..17).map(|i| i * 10_000).collect();
        write(&store, &early, Some(5_000));
        write(&store, &late, None);
        let all: Vec<i64> = early.iter().chain(&late).copied().collect();
        let want: Vec<i64> = all.iter().map(|&t| if t < 120_000 { 5_000 } else { 0 }).collect();
        assert_eq!(read(&store, &all), want);
        // Sealed, then a late write into the sealed window (an overlay), then re-sealed.
        store.flush_head().unwrap();
        store.seal_window(0).unwrap();
        assert_eq!(read(&store, &all), want);
        write(&store, &[5_000], Some(1_000));
        store.seal_window(0).unwrap();
        let mut want_late = vec![1_000];
        want_late.extend(&want);
        let mut with_late = vec![5_000];
        with_late.extend(&all);
        assert_eq!(read(&store, &with_late), want_late);
        // A deletion of [10s, 20s] takes the row at 10s; the samples after it keep theirs.
        store.delete_series(&[Matcher::equal("__name__", "c")], 10_000, 20_000).unwrap();
        assert_eq!(read(&store, &[5_000, 30_000, 50_000, 60_000]), vec![1_000, 5_000, 5_000, 5_000]);
        // Reopened, the writer still knows the series' current start timestamp: a sample without
        // one writes "none".
        write(&store, &[165_000], Some(150_000));
        drop(store);
        let store = open();
        write(&store, &[170_000], None);
        assert_eq!(read(&store, &[160_000, 165_000, 170_000]), vec![0, 150_000, 0]);
    }

    proptest! {
        /// Per-sample start timestamps written as change points read back exactly, whatever the
        /// window boundaries and the state the writer starts from.
        #[test]
        fn change_points_round_trip(
            steps in proptest::collection::vec((1i64..400, proptest::option::of(0i64..4)), 1..60),
            window in 1i64..2_000,
        ) {
            let mut t = 0;
            let mut times = Vec::new();
            let mut starts = Vec::new();
            for (dt, s) in steps {
                t += dt;
                times.push(t);
                if let Some(s) = s.filter(|s| *s != 0) {
                    starts.push(st(t, s));
                }
            }
            let window_of = |t: i64| t.div_euclid(window) * window;
            // Written in two batches: the second continues from the first one's state.
            let cut = times.len() / 2;
            let (mut rows, state) = changes(&times[..cut], &starts, None, window_of);
            let (more, _) = changes(&times[cut..], &starts, state, window_of);
            rows.extend(more);
            for &t in &times {
                let want = starts.iter().find(|s| s.timestamp_ms == t).map_or(0, |s| s.start_ms);
                prop_assert_eq!(start_at(&rows, t), want);
                // Each window alone answers for its samples.
                let own: Vec<StartChange> =
                    rows.iter().copied().filter(|c| window_of(c.timestamp_ms) == window_of(t)).collect();
                prop_assert_eq!(start_at(&own, t), want);
            }
            // The row encoding round-trips.
            for c in &rows {
                let key = keys::start_key(7, 42, c.timestamp_ms);
                let (field, id, ts) = keys::decode_point_key(&key).unwrap();
                prop_assert_eq!((keys::start_bucket(field), id, ts), (Some(7), 42, c.timestamp_ms));
                prop_assert_eq!(decode_value(&encode_value(c.start_ms)).unwrap(), c.start_ms);
            }
        }
    }
}
