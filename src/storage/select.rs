//! The read path: matchers + time range -> series ids -> per-bucket scans in parallel ->
//! series with ascending samples.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use super::error::{Result, StorageError};
use super::head::Head;
use super::keys;
use super::matchers;
use super::postings;
use super::run;
use super::series::{self, SeriesId};
use super::shared::Shared;
use super::window::Window;
use crate::labels::Labels;
use crate::matcher::Matcher;
use crate::promql::source::SeriesMap;
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

/// Appends the samples of one series in `[start, end]` to `out`, ascending. The head (when
/// given) is read first, then per window the sealed chunks and the hot runs (see [`run`]); hot
/// wins over sealed and the head over both on equal timestamps. Reading the head before the
/// keyspaces is what makes a read racing a head flush see every sample (see `head.rs`).
///
/// # Errors
/// Engine errors and corrupt rows.
pub fn read_series(
    windows: &[Window],
    head: Option<&Head>,
    bucket: u16,
    id: SeriesId,
    start_ms: i64,
    end_ms: i64,
    out: &mut Vec<Sample>,
) -> Result<()> {
    let mut recent = Vec::new();
    if let Some(head) = head {
        head.read(bucket, id, start_ms, end_ms, &mut recent);
    }
    let base = out.len();
    for w in windows {
        let mut cold = Vec::new();
        if let Some((_, ks)) = &w.chunks {
            run::read(ks, bucket, id, start_ms, end_ms, &mut cold)?;
        }
        match &w.points {
            // The common case (an unsealed window): straight into `out`, no merge.
            Some(ks) if cold.is_empty() => run::read(ks, bucket, id, start_ms, end_ms, out)?,
            Some(ks) => {
                let mut hot = Vec::new();
                run::read(ks, bucket, id, start_ms, end_ms, &mut hot)?;
                run::merge_into(out, &cold, &hot);
            }
            None => out.extend(cold),
        }
    }
    // The head usually holds only samples newer than everything stored: append them.
    let newer = match (out.get(base..).and_then(<[Sample]>::last), recent.first()) {
        (Some(a), Some(b)) => a.timestamp_ms < b.timestamp_ms,
        _ => true,
    };
    if newer {
        out.extend_from_slice(&recent);
    } else {
        let stored = out.split_off(base);
        run::merge_into(out, &stored, &recent);
    }
    Ok(())
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
    map: Option<SeriesMap<'_>>,
) -> Result<Vec<SeriesSamples>> {
    let mut out = Vec::with_capacity(ids.len());
    // Series of one selection tend to have similar sample counts: size each buffer like the last.
    let mut expect = 0;
    for &id in ids {
        let mut samples = Vec::with_capacity(expect);
        read_series(windows, Some(&sh.head), *bucket, id, start_ms, end_ms, &mut samples)?;
        expect = samples.len();
        if samples.is_empty() {
            continue;
        }
        budget.take(samples.len())?;
        let mut series = SeriesSamples { labels: series::labels_of(&sh.series, id)?, samples };
        if let Some(map) = map {
            map(&mut series);
        }
        out.push(series);
    }
    Ok(out)
}

/// Every series matching `matchers` with samples in `[start, end]`, samples ascending. Buckets
/// are scanned in parallel (one thread per core at most) and the results merged; `map`, when
/// given, is applied to each series on the thread that read it (after the sample budget took
/// its samples).
///
/// # Errors
/// Engine errors, corrupt rows, or [`StorageError::TooManySamples`] past `max_samples`.
pub fn select(
    sh: &Shared,
    matchers: &[Matcher],
    start_ms: i64,
    end_ms: i64,
    max_samples: usize,
    map: Option<SeriesMap<'_>>,
) -> Result<Vec<SeriesSamples>> {
    let (windows, ids) = matching_ids(sh, matchers, start_ms, end_ms)?;
    let groups = by_bucket(sh, &ids);
    let budget = Budget { limit: max_samples, used: AtomicUsize::new(0), exceeded: AtomicBool::new(false) };
    let workers = std::thread::available_parallelism().map_or(1, usize::from).min(groups.len());
    if workers <= 1 {
        let mut out = Vec::new();
        for g in &groups {
            out.extend(scan_bucket(sh, &windows, g, start_ms, end_ms, &budget, map)?);
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
                        out.extend(scan_bucket(sh, &windows, g, start_ms, end_ms, &budget, map)?);
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
            read_series(&windows, Some(&sh.head), bucket, id, start_ms, end_ms, &mut samples)?;
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

/// The newest sample at or before `at_ms` of each matching series: the head first, then per
/// window, newest window first, one seek into the hot runs and one into the chunks (decoding
/// only the run that starts at or before `at_ms`); stops at the first window with a hit.
///
/// # Errors
/// Engine errors and corrupt rows.
pub fn latest(sh: &Shared, matchers: &[Matcher], at_ms: i64) -> Result<Vec<(Labels, Sample)>> {
    let (mut windows, ids) = matching_ids(sh, matchers, 0, at_ms)?;
    windows.reverse();
    let mut out = Vec::new();
    for id in ids {
        let bucket = sh.bucketing.bucket(id);
        let recent = sh.head.latest(bucket, id, at_ms);
        let mut stored: Option<Sample> = None;
        for w in &windows {
            // Stored samples cannot beat the head once the window ends before its sample.
            if recent.is_some_and(|r| r.timestamp_ms >= w.start_ms.saturating_add(sh.windows.window_ms())) {
                break;
            }
            let cold = match &w.chunks {
                Some((_, ks)) => run::latest(ks, bucket, id, at_ms)?,
                None => None,
            };
            let hot = match &w.points {
                Some(ks) => run::latest(ks, bucket, id, at_ms)?,
                None => None,
            };
            stored = match (cold, hot) {
                (Some(c), Some(h)) if c.timestamp_ms > h.timestamp_ms => Some(c),
                (c, h) => h.or(c),
            };
            if stored.is_some() {
                break;
            }
        }
        let best = match (stored, recent) {
            (Some(s), Some(r)) if s.timestamp_ms > r.timestamp_ms => Some(s),
            (s, r) => r.or(s),
        };
        if let Some(sample) = best {
            out.push((series::labels_of(&sh.series, id)?, sample));
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
