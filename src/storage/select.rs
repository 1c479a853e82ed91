//! The read path: matchers + time range -> series ids -> per-bucket scans in parallel ->
//! series with ascending samples.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use super::chunk;
use super::error::{Result, StorageError};
use super::keys;
use super::matchers;
use super::postings;
use super::series::{self, SeriesId};
use super::shared::Shared;
use super::window::Window;
use crate::labels::Labels;
use crate::matcher::Matcher;
use crate::sample::{Sample, SeriesSamples};

/// The keyspaces of a window: the chunks first, then the hot rows.
fn keyspaces(w: &Window) -> impl Iterator<Item = &fjall::Keyspace> {
    w.chunks.as_ref().map(|(_, ks)| ks).into_iter().chain(w.points.as_ref())
}

/// Series present (per the window index) in any of `windows`.
///
/// # Errors
/// Engine errors and corrupt keys.
pub fn universe(windows: &[Window]) -> Result<HashSet<SeriesId>> {
    let mut ids = HashSet::new();
    for ks in windows.iter().flat_map(keyspaces) {
        for guard in ks.prefix(keys::WINDOW_INDEX_PREFIX) {
            let key = guard.key()?;
            ids.insert(keys::decode_window_index_key(&key).ok_or(StorageError::Corrupt { what: "window index key" })?);
        }
    }
    Ok(ids)
}

/// The windows overlapping `[start, end]` and the ids of the series in them matching `matchers`.
///
/// # Errors
/// Engine errors and corrupt keys.
pub fn matching_ids(
    sh: &Shared,
    matchers: &[Matcher],
    start_ms: i64,
    end_ms: i64,
) -> Result<(Vec<Window>, Vec<SeriesId>)> {
    let windows = sh.windows.overlapping(start_ms, end_ms);
    if windows.is_empty() || start_ms > end_ms {
        return Ok((windows, Vec::new()));
    }
    let universe = universe(&windows)?;
    let ids = matchers::resolve(&sh.postings, matchers, &universe)?;
    Ok((windows, ids))
}

/// Appends the samples of one series in `[start, end]` to `out`, ascending. Per window: the
/// chunks overlapping the range are decoded (newest first, stopping at the one that starts at
/// or before `start`), the hot rows are one range scan over newest-first keys, and the two are
/// merged with the hot rows winning on equal timestamps.
///
/// # Errors
/// Engine errors and corrupt rows.
pub fn read_series(
    windows: &[Window],
    bucket: u16,
    id: SeriesId,
    start_ms: i64,
    end_ms: i64,
    out: &mut Vec<Sample>,
) -> Result<()> {
    for w in windows {
        let cold = match &w.chunks {
            Some((_, ks)) => read_chunks(ks, bucket, id, start_ms, end_ms)?,
            None => Vec::new(),
        };
        match &w.points {
            // The common case (an unsealed window): straight into `out`, no merge.
            Some(ks) if cold.is_empty() => read_points(ks, bucket, id, start_ms, end_ms, out)?,
            Some(ks) => {
                let mut hot = Vec::new();
                read_points(ks, bucket, id, start_ms, end_ms, &mut hot)?;
                merge_into(out, cold, hot);
            }
            None => out.extend(cold),
        }
    }
    Ok(())
}

/// Appends the hot rows of a series in `[start, end]` to `out`, ascending.
fn read_points(
    ks: &fjall::Keyspace,
    bucket: u16,
    id: SeriesId,
    start_ms: i64,
    end_ms: i64,
    out: &mut Vec<Sample>,
) -> Result<()> {
    let lo = keys::point_key(bucket, id, end_ms.max(0));
    let hi = keys::point_key(bucket, id, start_ms.max(0));
    let first = out.len();
    for guard in ks.range(lo..=hi) {
        let (key, value) = guard.into_inner()?;
        // A `match` rather than `ok_or`: this runs once per sample, and `ok_or` builds (and
        // drops) the error value every time.
        match (keys::decode_point_key(&key), keys::decode_value(&value)) {
            (Some((_, _, ts)), Some(value)) => out.push(Sample::new(ts, value)),
            (None, _) => return Err(StorageError::Corrupt { what: "point key" }),
            (_, None) => return Err(StorageError::Corrupt { what: "point value" }),
        }
    }
    // Keys run newest first.
    if let Some(added) = out.get_mut(first..) {
        added.reverse();
    }
    Ok(())
}

/// Samples of a series in `[start, end]` from its chunks, ascending. Chunk keys carry the
/// chunk's first timestamp, reversed: scanning from `end` meets the newest relevant chunk first.
fn read_chunks(ks: &fjall::Keyspace, bucket: u16, id: SeriesId, start_ms: i64, end_ms: i64) -> Result<Vec<Sample>> {
    let from = keys::point_key(bucket, id, end_ms.max(0));
    let prefix = keys::series_prefix(bucket, id);
    let mut runs: Vec<Vec<Sample>> = Vec::new();
    for guard in ks.range(from..) {
        let (key, value) = guard.into_inner()?;
        if !key.starts_with(&prefix) {
            break;
        }
        let mut run = Vec::new();
        chunk::decode(&value, &mut run).map_err(|_| StorageError::Corrupt { what: "chunk" })?;
        let first = run.first().map_or(i64::MIN, |s| s.timestamp_ms);
        run.retain(|s| (start_ms..=end_ms).contains(&s.timestamp_ms));
        runs.push(run);
        if first <= start_ms {
            break;
        }
    }
    Ok(runs.into_iter().rev().flatten().collect())
}

/// Appends the ascending merge of `cold` and `hot` to `out`; `hot` wins on equal timestamps.
fn merge_into(out: &mut Vec<Sample>, cold: Vec<Sample>, hot: Vec<Sample>) {
    if cold.is_empty() {
        out.extend(hot);
        return;
    }
    if hot.is_empty() {
        out.extend(cold);
        return;
    }
    let (mut c, mut h) = (cold.into_iter().peekable(), hot.into_iter().peekable());
    loop {
        match (c.peek(), h.peek()) {
            (Some(a), Some(b)) if a.timestamp_ms < b.timestamp_ms => out.extend(c.next()),
            (Some(a), Some(b)) if a.timestamp_ms == b.timestamp_ms => {
                c.next();
                out.extend(h.next());
            }
            (_, Some(_)) => out.extend(h.next()),
            (Some(_), None) => out.extend(c.next()),
            (None, None) => break,
        }
    }
}

/// Groups ids by bucket, in bucket order.
fn by_bucket(sh: &Shared, ids: &[SeriesId]) -> Vec<(u16, Vec<SeriesId>)> {
    let mut groups: BTreeMap<u16, Vec<SeriesId>> = BTreeMap::new();
    for &id in ids {
        groups.entry(sh.bucketing.bucket(id)).or_default().push(id);
    }
    groups.into_iter().collect()
}

/// Shared budget of loaded samples across the parallel bucket scans.
struct Budget {
    limit: usize,
    used: AtomicUsize,
    exceeded: AtomicBool,
}

impl Budget {
    fn take(&self, n: usize) -> Result<()> {
        let used = self.used.fetch_add(n, Ordering::Relaxed) + n;
        if used > self.limit || self.exceeded.load(Ordering::Relaxed) {
            self.exceeded.store(true, Ordering::Relaxed);
            return Err(StorageError::TooManySamples { limit: self.limit });
        }
        Ok(())
    }
}

fn scan_bucket(
    sh: &Shared,
    windows: &[Window],
    (bucket, ids): &(u16, Vec<SeriesId>),
    start_ms: i64,
    end_ms: i64,
    budget: &Budget,
) -> Result<Vec<SeriesSamples>> {
    let mut out = Vec::with_capacity(ids.len());
    // Series of one selection tend to have similar sample counts: size each buffer like the last.
    let mut expect = 0;
    for &id in ids {
        let mut samples = Vec::with_capacity(expect);
        read_series(windows, *bucket, id, start_ms, end_ms, &mut samples)?;
        expect = samples.len();
        if samples.is_empty() {
            continue;
        }
        budget.take(samples.len())?;
        out.push(SeriesSamples { labels: series::labels_of(&sh.series, id)?, samples });
    }
    Ok(out)
}

/// Every series matching `matchers` with samples in `[start, end]`, samples ascending. Buckets
/// are scanned in parallel (one thread per core at most) and the results merged.
///
/// # Errors
/// Engine errors, corrupt rows, or [`StorageError::TooManySamples`] past `max_samples`.
pub fn select(
    sh: &Shared,
    matchers: &[Matcher],
    start_ms: i64,
    end_ms: i64,
    max_samples: usize,
) -> Result<Vec<SeriesSamples>> {
    let (windows, ids) = matching_ids(sh, matchers, start_ms, end_ms)?;
    let groups = by_bucket(sh, &ids);
    let budget = Budget { limit: max_samples, used: AtomicUsize::new(0), exceeded: AtomicBool::new(false) };
    let workers = std::thread::available_parallelism().map_or(1, usize::from).min(groups.len());
    if workers <= 1 {
        let mut out = Vec::new();
        for g in &groups {
            out.extend(scan_bucket(sh, &windows, g, start_ms, end_ms, &budget)?);
        }
        return Ok(out);
    }
    let next = AtomicUsize::new(0);
    let results: Vec<Result<Vec<SeriesSamples>>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                scope.spawn(|| {
                    let mut out = Vec::new();
                    while let Some(g) = groups.get(next.fetch_add(1, Ordering::Relaxed)) {
                        out.extend(scan_bucket(sh, &windows, g, start_ms, end_ms, &budget)?);
                    }
                    Ok(out)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or(Err(StorageError::Corrupt { what: "bucket scan (worker panicked)" })))
            .collect()
    });
    let mut out = Vec::with_capacity(ids.len());
    for r in results {
        out.extend(r?);
    }
    Ok(out)
}

/// Calls `f` for each matching series in bucket order, one series in memory at a time (for
/// streaming export). Stops early when `f` returns false.
///
/// # Errors
/// Engine errors and corrupt rows.
pub fn for_each_series(
    sh: &Shared,
    matchers: &[Matcher],
    start_ms: i64,
    end_ms: i64,
    mut f: impl FnMut(SeriesSamples) -> bool,
) -> Result<()> {
    let (windows, ids) = matching_ids(sh, matchers, start_ms, end_ms)?;
    for (bucket, ids) in by_bucket(sh, &ids) {
        for id in ids {
            let mut samples = Vec::new();
            read_series(&windows, bucket, id, start_ms, end_ms, &mut samples)?;
            if samples.is_empty() {
                continue;
            }
            if !f(SeriesSamples { labels: series::labels_of(&sh.series, id)?, samples }) {
                return Ok(());
            }
        }
    }
    Ok(())
}

/// The newest sample at or before `at_ms` of each matching series: per window, newest window
/// first, one seek into the hot rows and one into the chunks (decoding only the newest chunk
/// that starts at or before `at_ms`); stops at the first window with a hit.
///
/// # Errors
/// Engine errors and corrupt rows.
pub fn latest(sh: &Shared, matchers: &[Matcher], at_ms: i64) -> Result<Vec<(Labels, Sample)>> {
    let (mut windows, ids) = matching_ids(sh, matchers, 0, at_ms)?;
    windows.reverse();
    let mut out = Vec::new();
    for id in ids {
        let bucket = sh.bucketing.bucket(id);
        let from = keys::point_key(bucket, id, at_ms.max(0));
        let prefix = keys::series_prefix(bucket, id);
        for w in &windows {
            let mut best: Option<Sample> = None;
            if let Some((_, ks)) = &w.chunks {
                if let Some(guard) = ks.range(from..).next() {
                    let (key, value) = guard.into_inner()?;
                    if key.starts_with(&prefix) {
                        let mut run = Vec::new();
                        chunk::decode(&value, &mut run).map_err(|_| StorageError::Corrupt { what: "chunk" })?;
                        best = run.into_iter().rev().find(|s| s.timestamp_ms <= at_ms);
                    }
                }
            }
            if let Some(ks) = &w.points {
                if let Some(guard) = ks.range(from..).next() {
                    let (key, value) = guard.into_inner()?;
                    if key.starts_with(&prefix) {
                        let (_, _, ts) =
                            keys::decode_point_key(&key).ok_or(StorageError::Corrupt { what: "point key" })?;
                        let v = keys::decode_value(&value).ok_or(StorageError::Corrupt { what: "point value" })?;
                        if best.is_none_or(|b| b.timestamp_ms <= ts) {
                            best = Some(Sample::new(ts, v));
                        }
                    }
                }
            }
            if let Some(sample) = best {
                out.push((series::labels_of(&sh.series, id)?, sample));
                break;
            }
        }
    }
    Ok(out)
}

/// Label sets of the matching series present in `[start, end]`.
///
/// # Errors
/// Engine errors and corrupt rows.
pub fn series_labels(sh: &Shared, matchers: &[Matcher], start_ms: i64, end_ms: i64) -> Result<Vec<Labels>> {
    let (_, ids) = matching_ids(sh, matchers, start_ms, end_ms)?;
    ids.into_iter().map(|id| series::labels_of(&sh.series, id)).collect()
}

/// Label names of the matching series present in `[start, end]`, sorted.
///
/// # Errors
/// Engine errors and corrupt rows.
pub fn label_names(sh: &Shared, matchers: &[Matcher], start_ms: i64, end_ms: i64) -> Result<Vec<String>> {
    let mut names = BTreeSet::new();
    for labels in series_labels(sh, matchers, start_ms, end_ms)? {
        for l in labels.iter() {
            if !names.contains(&l.name) {
                names.insert(l.name.clone());
            }
        }
    }
    Ok(names.into_iter().collect())
}

/// Values of label `name` among the matching series present in `[start, end]`, sorted.
///
/// # Errors
/// Engine errors and corrupt rows.
pub fn label_values(sh: &Shared, name: &str, matchers: &[Matcher], start_ms: i64, end_ms: i64) -> Result<Vec<String>> {
    let (_, ids) = matching_ids(sh, matchers, start_ms, end_ms)?;
    let ids: HashSet<SeriesId> = ids.into_iter().collect();
    let mut values: Vec<String> = Vec::new();
    postings::scan_name(&sh.postings, name, |value, id| {
        if ids.contains(&id) && values.last().map(String::as_str) != Some(value) {
            values.push(value.to_owned());
        }
    })?;
    Ok(values)
}
