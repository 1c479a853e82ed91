//! The read path: matchers + time range -> the windows overlapping it -> candidate ids from each
//! window's postings (see [`matchers`]) -> per bucket, on the shared read pool, labels checked
//! and samples read -> series with ascending samples.

use std::collections::{BTreeMap, BTreeSet};

use rayon::prelude::*;

use super::querier::{ReadLimits, ReadStrategy, SampleBudget, SeriesMap, SinkFactory};
use super::stream::Streamed;
use crate::labels::Labels;
use crate::sample::{HistogramSample, Sample, SeriesSamples};
use crate::spare_samples;
use crate::storage::error::Result;
use crate::storage::format::histogram_run;
use crate::storage::format::run;
use crate::storage::format::start_ts::{self, SeriesStarts, StartChange};
use crate::storage::index::matchers::{self, Selection};
use crate::storage::index::postings;
use crate::storage::lifecycle::window::{self, Window};
use crate::storage::series_id::SeriesId;
use crate::storage::shared::Shared;
use crate::storage::write::head::Head;

/// Series read between two checks of the deadline and cancellation flag (and read together).
const CHECK_EVERY: usize = 64;
/// Ids a limited series request may check per answer wanted before it resolves the selection in
/// full (see [`series_labels_probed`]).
const PROBE_FACTOR: usize = 8;
/// See [`dense`]: unwanted series one iterator may pass over per wanted series.
const DENSE_FACTOR: u64 = 4;

/// The keyspaces of a window: the chunks first, then the hot rows.
pub fn keyspaces(w: &Window) -> impl Iterator<Item = &fjall::Keyspace> {
    w.chunks.as_ref().map(|(_, ks)| ks).into_iter().chain(w.points.as_ref())
}

/// Ids (ascending, each once) of the series of window `w` in the postings list `list` gives
/// for each of its keyspaces: a series in both the hot rows and the chunks counts once.
///
/// # Errors
/// Engine errors and corrupt keys, and those of `list`.
pub fn window_ids(
    w: &Window,
    mut list: impl FnMut(&fjall::Keyspace) -> Result<postings::PairIds>,
) -> Result<Vec<SeriesId>> {
    let mut ids = Vec::new();
    for ks in keyspaces(w) {
        let mut l = list(ks)?;
        l.advance(ks, usize::MAX)?;
        ids.append(&mut l.ids);
    }
    ids.sort_unstable();
    ids.dedup();
    Ok(ids)
}

/// Ids of the series present (per the window index) in any of `windows`, ascending.
///
/// # Errors
/// Engine errors and corrupt keys.
pub fn universe(windows: &[Window]) -> Result<Vec<SeriesId>> {
    let mut ids = Vec::new();
    for ks in windows.iter().flat_map(keyspaces) {
        ids.extend(postings::all_ids(ks)?);
    }
    ids.sort_unstable();
    ids.dedup();
    Ok(ids)
}

/// The windows overlapping `[start, end]` and the candidate ids (ascending) of the series in
/// them that may match `sel`; each candidate's labels must still pass [`Selection::accepts`].
///
/// # Errors
/// Engine errors and corrupt keys.
pub fn matching_ids(sh: &Shared, sel: &Selection, start_ms: i64, end_ms: i64) -> Result<(Vec<Window>, Vec<SeriesId>)> {
    let windows = sh.windows.overlapping(start_ms, end_ms);
    if windows.is_empty() || start_ms > end_ms {
        return Ok((windows, Vec::new()));
    }
    let mut ids = Vec::new();
    let mut sources = 0;
    for ks in windows.iter().flat_map(keyspaces) {
        ids.extend_from_slice(&sh.index.candidates(ks, sel, || matchers::candidates(ks, sel))?);
        sources += 1;
    }
    if sources > 1 {
        ids.sort_unstable();
        ids.dedup();
    }
    Ok((windows, ids))
}

/// Ids (ascending) of the series matching `sel` with data in a window overlapping `[start, end]`.
///
/// # Errors
/// Engine errors and corrupt rows.
pub fn accepted_ids(sh: &Shared, sel: &Selection, start_ms: i64, end_ms: i64) -> Result<Vec<SeriesId>> {
    let (_, candidates) = matching_ids(sh, sel, start_ms, end_ms)?;
    let mut ids = Vec::with_capacity(candidates.len());
    for id in candidates {
        if accepted_labels(sh, sel, id)?.is_some() {
            ids.push(id);
        }
    }
    Ok(ids)
}

/// The labels of a candidate when it passes every matcher; `None` when it does not, or when its
/// series row is gone (retention removed the series after the candidates were read).
pub(super) fn accepted_labels(sh: &Shared, sel: &Selection, id: SeriesId) -> Result<Option<Labels>> {
    Ok(sh.labels.get(&sh.series, id)?.filter(|labels| sel.accepts(labels)))
}

/// Appends the samples of one series in `[start, end]` to `out`, ascending. The head (when
/// given) is read first, then per window the sealed chunks and the hot runs (see [`run`]); hot
/// wins over sealed and the head over both on equal timestamps. Reading the head before the
/// keyspaces is what makes a read racing a head flush see every sample (see `write/head.rs`).
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
        match (&w.chunks, &w.points) {
            // The common cases (a sealed window without late samples, an unsealed window):
            // straight into `out`, no merge.
            (Some((_, ks)), None) | (None, Some(ks)) => run::read(ks, bucket, id, start_ms, end_ms, out)?,
            (Some((_, sealed)), Some(hot_ks)) => {
                let mut cold = spare_samples::take();
                run::read(sealed, bucket, id, start_ms, end_ms, &mut cold)?;
                if cold.is_empty() {
                    run::read(hot_ks, bucket, id, start_ms, end_ms, out)?;
                } else {
                    let mut hot = spare_samples::take();
                    run::read(hot_ks, bucket, id, start_ms, end_ms, &mut hot)?;
                    run::merge_into(out, &cold, &hot);
                    spare_samples::give(hot);
                }
                spare_samples::give(cold);
            }
            (None, None) => {}
        }
    }
    if window::shared_starts(windows) {
        ascending_from(out, base, |s| s.timestamp_ms);
    }
    append_head(out, base, &recent);
    Ok(())
}

/// Puts `out[base..]` back in ascending order of `ts`, one sample per timestamp (the first
/// kept), after windows of two retention classes at one start both held samples of the series
/// (its class changed between two runs, see `lifecycle/class.rs`). Costs one pass when nothing
/// is out of order.
fn ascending_from<T>(out: &mut Vec<T>, base: usize, ts: impl Fn(&T) -> i64) {
    let Some(tail) = out.get_mut(base..) else { return };
    if tail.windows(2).all(|p| matches!(p, [a, b] if ts(a) < ts(b))) {
        return;
    }
    tail.sort_by_key(&ts);
    let mut kept = out.split_off(base);
    kept.dedup_by_key(|s| ts(s));
    out.extend(kept);
}

/// The histogram samples of one series in `[start, end]`, ascending: the head first (see
/// [`read_series`] for why), then, once any histogram run is stored, per window the sealed
/// chunks and the hot runs; hot wins over sealed and the head over both on equal timestamps.
///
/// # Errors
/// Engine errors and corrupt rows.
pub fn read_histograms(
    sh: &Shared,
    windows: &[Window],
    head: Option<&Head>,
    bucket: u16,
    id: SeriesId,
    (start_ms, end_ms): (i64, i64),
) -> Result<Vec<HistogramSample>> {
    let mut recent = Vec::new();
    if let Some(head) = head {
        head.read_histograms(bucket, id, start_ms, end_ms, &mut recent);
    }
    // After the head (see `Shared::histograms_stored` for why the order matters).
    if !sh.histograms_stored() {
        return Ok(recent);
    }
    let mut out = Vec::new();
    for w in windows {
        let mut stored = Vec::new();
        if let Some((_, ks)) = &w.chunks {
            histogram_run::read(ks, bucket, id, start_ms, end_ms, &mut stored)?;
        }
        if let Some(ks) = &w.points {
            let mut newer = Vec::new();
            histogram_run::read(ks, bucket, id, start_ms, end_ms, &mut newer)?;
            stored = histogram_run::merge(&stored, &newer);
        }
        out.extend(stored);
    }
    if window::shared_starts(windows) {
        ascending_from(&mut out, 0, |h| h.timestamp_ms);
    }
    Ok(if recent.is_empty() { out } else { histogram_run::merge(&out, &recent) })
}

/// Adds the head's samples of a series (`recent`) to its stored samples (`out[base..]`): the
/// head usually holds only newer samples, appended; otherwise the two are merged, the head
/// winning on equal timestamps.
fn append_head(out: &mut Vec<Sample>, base: usize, recent: &[Sample]) {
    let newer = match (out.get(base..).and_then(<[Sample]>::last), recent.first()) {
        (Some(a), Some(b)) => a.timestamp_ms < b.timestamp_ms,
        _ => true,
    };
    if newer {
        out.extend_from_slice(recent);
    } else {
        let stored = out.split_off(base);
        run::merge_into(out, &stored, recent);
    }
}

/// As [`read_series`] for several series of one bucket (`ids` ascending), reading each keyspace
/// with one iterator for all of them (see [`run::read_many`]); returns their samples in the
/// order of `ids`.
///
/// # Errors
/// Engine errors and corrupt rows.
pub fn read_series_many(
    windows: &[Window],
    head: Option<&Head>,
    bucket: u16,
    ids: &[SeriesId],
    start_ms: i64,
    end_ms: i64,
) -> Result<Vec<Vec<Sample>>> {
    // The head first, for every series, before any keyspace (see `read_series`).
    let mut recent = vec![Vec::new(); ids.len()];
    if let Some(head) = head {
        head.read_many(bucket, ids, start_ms, end_ms, &mut recent);
    }
    let mut outs: Vec<Vec<Sample>> = ids.iter().map(|_| spare_samples::take()).collect();
    for w in windows {
        let (sealed, hot_ks) = match (&w.chunks, &w.points) {
            // The common cases (a sealed window without late samples, an unsealed window):
            // straight into place, no copy.
            (Some((_, ks)), None) | (None, Some(ks)) => {
                run::read_many(ks, bucket, ids, start_ms, end_ms, &mut outs)?;
                continue;
            }
            (Some((_, sealed)), Some(hot_ks)) => (sealed, hot_ks),
            (None, None) => continue,
        };
        let mut cold: Vec<Vec<Sample>> = ids.iter().map(|_| spare_samples::take()).collect();
        run::read_many(sealed, bucket, ids, start_ms, end_ms, &mut cold)?;
        let mut hot: Vec<Vec<Sample>> = ids.iter().map(|_| spare_samples::take()).collect();
        run::read_many(hot_ks, bucket, ids, start_ms, end_ms, &mut hot)?;
        for ((out, cold), hot) in outs.iter_mut().zip(cold).zip(hot) {
            match (cold.is_empty(), hot.is_empty()) {
                (true, _) => out.extend_from_slice(&hot),
                (false, true) => out.extend_from_slice(&cold),
                (false, false) => run::merge_into(out, &cold, &hot),
            }
            spare_samples::give(cold);
            spare_samples::give(hot);
        }
    }
    let shared = window::shared_starts(windows);
    for (out, recent) in outs.iter_mut().zip(&recent) {
        if shared {
            ascending_from(out, 0, |s| s.timestamp_ms);
        }
        append_head(out, 0, recent);
    }
    Ok(outs)
}

/// Whether reading `ids` (ascending, one bucket) with one iterator beats a seek per series: the
/// iterator also reads the series of the bucket between them that are not wanted, about
/// `span / buckets` of them (ids are spread evenly over buckets); it wins while that is at most
/// [`DENSE_FACTOR`] times the wanted ones.
fn dense(ids: &[SeriesId], buckets: u16) -> bool {
    let (Some(&first), Some(&last)) = (ids.first(), ids.last()) else { return false };
    let in_range = (last - first + 1) / u64::from(buckets.max(1));
    in_range <= DENSE_FACTOR * ids.len() as u64
}

/// Series-window pairs from which a read is spread over the read pool, bucket by bucket: each
/// pair costs at least an engine lookup (microseconds), the pool's hand-off tens of them. So a
/// few series over a year of windows (a dashboard panel of 50 hosts, 18,250 pairs) are read on
/// every core, as 128 series over one window are, and one series over a day is not.
const PARALLEL_SERIES_WINDOWS: usize = 2 * CHECK_EVERY;

/// Whether a read of `series` series in `groups` buckets over `windows` windows is spread over
/// the read pool (see [`PARALLEL_SERIES_WINDOWS`]).
pub(super) fn in_parallel(groups: usize, series: usize, windows: usize) -> bool {
    groups > 1 && series.saturating_mul(windows.max(1)) >= PARALLEL_SERIES_WINDOWS
}

/// Groups ids by bucket, in bucket order.
pub(super) fn by_bucket(sh: &Shared, ids: &[SeriesId]) -> Vec<(u16, Vec<SeriesId>)> {
    let mut groups: BTreeMap<u16, Vec<SeriesId>> = BTreeMap::new();
    for &id in ids {
        groups.entry(sh.bucketing.bucket(id)).or_default().push(id);
    }
    groups.into_iter().collect()
}

/// One request's read of a set of windows.
struct Scan<'a> {
    sh: &'a Shared,
    sel: &'a Selection,
    windows: &'a [Window],
    start_ms: i64,
    end_ms: i64,
    limits: &'a ReadLimits,
    budget: SampleBudget,
}

impl Scan<'_> {
    /// Reads one bucket's candidates, [`CHECK_EVERY`] at a time: labels checked, then samples
    /// (with one iterator per keyspace where the candidates are [`dense`], else a seek per
    /// series), then `map`.
    fn bucket(
        &self,
        (bucket, ids): &(u16, Vec<SeriesId>),
        map: Option<SeriesMap<'_>>,
        sink: Option<SinkFactory<'_>>,
    ) -> Result<Vec<SeriesSamples>> {
        let mut out = Vec::with_capacity(ids.len());
        for part in ids.chunks(CHECK_EVERY) {
            self.limits.check()?;
            let mut accepted = Vec::with_capacity(part.len());
            let mut labels = Vec::with_capacity(part.len());
            for &id in part {
                if let Some(l) = accepted_labels(self.sh, self.sel, id)? {
                    accepted.push(id);
                    labels.push(l);
                }
            }
            let one_iterator = match self.sh.read_strategy {
                ReadStrategy::Auto => dense(&accepted, self.sh.bucketing.count()),
                ReadStrategy::Seek => false,
                ReadStrategy::Range => true,
            };
            if let Some(sink) = sink {
                self.reduced_part(*bucket, (accepted, labels), one_iterator, (sink, map), &mut out)?;
                continue;
            }
            let samples = if one_iterator {
                read_series_many(self.windows, Some(&self.sh.head), *bucket, &accepted, self.start_ms, self.end_ms)?
            } else {
                // The head first for every series, under one lock (see `read_series`).
                let mut recent = vec![Vec::new(); accepted.len()];
                self.sh.head.read_many(*bucket, &accepted, self.start_ms, self.end_ms, &mut recent);
                let mut each = Vec::with_capacity(accepted.len());
                for (&id, recent) in accepted.iter().zip(&recent) {
                    let mut samples = spare_samples::take();
                    read_series(self.windows, None, *bucket, id, self.start_ms, self.end_ms, &mut samples)?;
                    append_head(&mut samples, 0, recent);
                    each.push(samples);
                }
                each
            };
            for ((labels, samples), id) in labels.into_iter().zip(samples).zip(accepted) {
                let histograms = read_histograms(
                    self.sh,
                    self.windows,
                    Some(&self.sh.head),
                    *bucket,
                    id,
                    (self.start_ms, self.end_ms),
                )?;
                if samples.is_empty() && histograms.is_empty() {
                    spare_samples::give(samples);
                    continue;
                }
                self.keep_whole(SeriesSamples { labels, samples, histograms }, map, &mut out)?;
            }
        }
        Ok(out)
    }

    /// Keeps a series read whole: floats shadowed by histograms dropped, its samples taken from
    /// the budget, then `map` applied.
    fn keep_whole(
        &self,
        mut series: SeriesSamples,
        map: Option<SeriesMap<'_>>,
        out: &mut Vec<SeriesSamples>,
    ) -> Result<()> {
        histogram_run::drop_shadowed(&mut series.samples, &series.histograms);
        self.budget.take(series.samples.len() + series.histograms.len())?;
        if let Some(map) = map {
            map(&mut series);
        }
        out.push(series);
        Ok(())
    }

    /// [`Scan::bucket`] for one part of a reduced selection (see [`select_reduced`]): the series
    /// with native histograms are read whole, the others fed to their sinks window by window.
    fn reduced_part(
        &self,
        bucket: u16,
        (ids, labels): (Vec<SeriesId>, Vec<Labels>),
        one_iterator: bool,
        (sink, map): (SinkFactory<'_>, Option<SeriesMap<'_>>),
        out: &mut Vec<SeriesSamples>,
    ) -> Result<()> {
        let range = (self.start_ms, self.end_ms);
        let mut plain = Vec::with_capacity(ids.len());
        let mut plain_labels = Vec::with_capacity(ids.len());
        for (id, labels) in ids.into_iter().zip(labels) {
            let histograms = read_histograms(self.sh, self.windows, Some(&self.sh.head), bucket, id, range)?;
            if histograms.is_empty() {
                plain.push(id);
                plain_labels.push(labels);
                continue;
            }
            let mut samples = spare_samples::take();
            read_series(self.windows, Some(&self.sh.head), bucket, id, self.start_ms, self.end_ms, &mut samples)?;
            self.keep_whole(SeriesSamples { labels, samples, histograms }, map, out)?;
        }
        if plain.is_empty() {
            return Ok(());
        }
        let mut sinks: Vec<_> = plain.iter().map(|_| sink()).collect();
        let streamed = Streamed {
            windows: self.windows,
            window_ms: self.sh.windows.window_ms(),
            head: &self.sh.head,
            bucket,
            ids: &plain,
            start_ms: self.start_ms,
            end_ms: self.end_ms,
            one_iterator: one_iterator && dense(&plain, self.sh.bucketing.count()),
        };
        let any = streamed.feed(&mut sinks, &self.budget)?;
        for ((labels, sink), any) in plain_labels.into_iter().zip(sinks).zip(any) {
            if !any {
                continue;
            }
            let mut series = SeriesSamples { labels, samples: sink.finish(), histograms: Vec::new() };
            if let Some(map) = map {
                map(&mut series);
            }
            out.push(series);
        }
        Ok(())
    }
}

/// Every series matching `sel` with samples in `[start, end]`, samples ascending. Buckets are
/// read in parallel on the shared read pool and the results merged; `map`, when given, is
/// applied to each series on the thread that read it (after the budget took its samples).
///
/// # Errors
/// Engine errors, corrupt rows, or the limits' errors.
pub fn select(
    sh: &Shared,
    sel: &Selection,
    start_ms: i64,
    end_ms: i64,
    limits: &ReadLimits,
    map: Option<SeriesMap<'_>>,
) -> Result<Vec<SeriesSamples>> {
    select_with(sh, sel, (start_ms, end_ms), limits, map, None)
}

fn select_with(
    sh: &Shared,
    sel: &Selection,
    (start_ms, end_ms): (i64, i64),
    limits: &ReadLimits,
    map: Option<SeriesMap<'_>>,
    sink: Option<SinkFactory<'_>>,
) -> Result<Vec<SeriesSamples>> {
    limits.check()?;
    let (windows, ids) = matching_ids(sh, sel, start_ms, end_ms)?;
    let groups = by_bucket(sh, &ids);
    let scan =
        Scan { sh, sel, windows: &windows, start_ms, end_ms, limits, budget: SampleBudget::new(limits.max_samples) };
    let parts: Vec<Result<Vec<SeriesSamples>>> = if !in_parallel(groups.len(), ids.len(), windows.len()) {
        groups.iter().map(|g| scan.bucket(g, map, sink)).collect()
    } else {
        sh.pool.install(|| groups.par_iter().map(|g| scan.bucket(g, map, sink)).collect())
    };
    let mut out = Vec::with_capacity(ids.len());
    for part in parts {
        out.extend(part?);
    }
    Ok(out)
}

/// [`select`] with the float samples of each series without native histograms fed to a sink
/// made by `sink` as they are decoded, window by window (see `stream.rs`), instead of being
/// collected: see [`Querier::select_reduced`](super::querier::Querier::select_reduced).
///
/// # Errors
/// As [`select`].
pub fn select_reduced(
    sh: &Shared,
    sel: &Selection,
    (start_ms, end_ms): (i64, i64),
    limits: &ReadLimits,
    sink: SinkFactory<'_>,
    map: Option<SeriesMap<'_>>,
) -> Result<Vec<SeriesSamples>> {
    select_with(sh, sel, (start_ms, end_ms), limits, map, Some(sink))
}

/// Calls `f` for each matching series in bucket order, one series in memory at a time (for
/// streaming export and remote read). Stops early when `f` returns false.
///
/// # Errors
/// Engine errors, corrupt rows, or the limits' errors.
pub fn for_each_series(
    sh: &Shared,
    sel: &Selection,
    start_ms: i64,
    end_ms: i64,
    limits: &ReadLimits,
    f: &mut dyn FnMut(SeriesSamples) -> bool,
) -> Result<()> {
    let (windows, ids) = matching_ids(sh, sel, start_ms, end_ms)?;
    let budget = SampleBudget::new(limits.max_samples);
    for (bucket, ids) in by_bucket(sh, &ids) {
        for id in ids {
            limits.check()?;
            let Some(labels) = accepted_labels(sh, sel, id)? else { continue };
            let mut samples = Vec::new();
            read_series(&windows, Some(&sh.head), bucket, id, start_ms, end_ms, &mut samples)?;
            let histograms = read_histograms(sh, &windows, Some(&sh.head), bucket, id, (start_ms, end_ms))?;
            if samples.is_empty() && histograms.is_empty() {
                continue;
            }
            histogram_run::drop_shadowed(&mut samples, &histograms);
            budget.take(samples.len() + histograms.len())?;
            if !f(SeriesSamples { labels, samples, histograms }) {
                return Ok(());
            }
        }
    }
    Ok(())
}

/// The start timestamps of the matching series that have any in `[start, end]` (see
/// [`crate::storage::Querier::start_timestamps`]): nothing is read unless some keyspace of the windows
/// overlapping the range holds start-timestamp rows; then one seek per series and keyspace.
///
/// # Errors
/// Engine errors, corrupt rows, or the limits' errors.
pub fn start_timestamps(
    sh: &Shared,
    sel: &Selection,
    start_ms: i64,
    end_ms: i64,
    limits: &ReadLimits,
) -> Result<Vec<SeriesStarts>> {
    if !sh.starts_stored() || start_ms > end_ms {
        return Ok(Vec::new());
    }
    let windows = sh.windows.overlapping(start_ms, end_ms);
    // Per window (ascending), its keyspaces holding start-timestamp rows.
    let mut holding: Vec<(i64, Vec<&fjall::Keyspace>)> = Vec::new();
    for w in &windows {
        let mut with_rows = Vec::new();
        for ks in keyspaces(w) {
            if start_ts::any(ks)? {
                with_rows.push(ks);
            }
        }
        holding.push((w.start_ms, with_rows));
    }
    if holding.iter().all(|(_, with_rows)| with_rows.is_empty()) {
        return Ok(Vec::new());
    }
    let (_, ids) = matching_ids(sh, sel, start_ms, end_ms)?;
    let mut out = Vec::new();
    for (i, id) in ids.into_iter().enumerate() {
        if i % CHECK_EVERY == 0 {
            limits.check()?;
        }
        let bucket = sh.bucketing.bucket(id);
        let mut changes = Vec::new();
        for (window_start, keyspaces) in &holding {
            // Each window answers for its own samples (see `format/start_ts.rs`): nothing carries over
            // from the window before, whose last row may be a start timestamp the series no
            // longer has.
            let mut lists = Vec::new();
            for ks in keyspaces {
                let mut found = Vec::new();
                start_ts::read(ks, bucket, id, (start_ms.max(*window_start), end_ms), &mut found)?;
                if !found.is_empty() {
                    lists.push(found);
                }
            }
            let merged = start_ts::merge(lists, start_ms.max(*window_start));
            if !changes.is_empty() && merged.first().is_none_or(|c| c.timestamp_ms > *window_start) {
                changes.push(StartChange { timestamp_ms: *window_start, start_ms: 0 });
            }
            changes.extend(merged);
        }
        if changes.is_empty() {
            continue;
        }
        let changes = start_ts::merge(vec![changes], start_ms);
        if changes.iter().all(|c| c.start_ms == 0) {
            continue;
        }
        if let Some(labels) = accepted_labels(sh, sel, id)? {
            out.push(SeriesStarts { labels, changes });
        }
    }
    Ok(out)
}

/// The newest sample at or before `at_ms` of each matching series with data in
/// `[at_ms - lookback_ms, at_ms]`: the head first, then per window, newest window first, one
/// seek into the hot runs and one into the chunks (decoding only the run that starts at or
/// before `at_ms`); stops at the first window with a hit.
///
/// # Errors
/// Engine errors and corrupt rows.
pub fn latest(sh: &Shared, sel: &Selection, at_ms: i64, lookback_ms: i64) -> Result<Vec<(Labels, Sample)>> {
    let from = at_ms.saturating_sub(lookback_ms);
    let (mut windows, ids) = matching_ids(sh, sel, from, at_ms)?;
    windows.reverse();
    let mut out = Vec::new();
    for id in ids {
        let Some(labels) = accepted_labels(sh, sel, id)? else { continue };
        let bucket = sh.bucketing.bucket(id);
        let recent = sh.head.latest(bucket, id, at_ms);
        let mut stored: Option<Sample> = None;
        for w in &windows {
            // Stored samples cannot beat the head once the window ends before its sample; nor
            // can an older window's beat a newer one's (windows of other classes at the same
            // start are still read).
            if recent.is_some_and(|r| r.timestamp_ms >= w.start_ms.saturating_add(sh.windows.window_ms()))
                || stored.is_some_and(|s| s.timestamp_ms >= w.start_ms.saturating_add(sh.windows.window_ms()))
            {
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
            let here = match (cold, hot) {
                (Some(c), Some(h)) if c.timestamp_ms > h.timestamp_ms => Some(c),
                (c, h) => h.or(c),
            };
            stored = match (stored, here) {
                (Some(s), Some(h)) if s.timestamp_ms >= h.timestamp_ms => Some(s),
                (s, h) => h.or(s),
            };
        }
        let best = match (stored, recent) {
            (Some(s), Some(r)) if s.timestamp_ms > r.timestamp_ms => Some(s),
            (s, r) => r.or(s),
        };
        if let Some(sample) = best.filter(|s| s.timestamp_ms >= from) {
            out.push((labels, sample));
        }
    }
    Ok(out)
}

/// Label sets of the matching series present in `[start, end]`, at most `limit`.
///
/// # Errors
/// Engine errors, corrupt rows, or the limits' errors.
pub fn series_labels(
    sh: &Shared,
    sel: &Selection,
    start_ms: i64,
    end_ms: i64,
    limits: &ReadLimits,
    limit: Option<usize>,
) -> Result<Vec<Labels>> {
    if let Some(n) = limit {
        if let Some(found) = series_labels_probed(sh, sel, start_ms, end_ms, limits, n)? {
            return Ok(found);
        }
    }
    let limit = limit.unwrap_or(usize::MAX);
    let mut out = Vec::new();
    if limit > 0 {
        for_each_accepted(sh, sel, start_ms, end_ms, limits, |labels| {
            out.push(labels);
            out.len() < limit
        })?;
    }
    Ok(out)
}

/// Calls `f` with the label set of each series matching `sel` present in `[start, end]`, one at
/// a time, until `f` returns false.
///
/// # Errors
/// Engine errors, corrupt rows, or the limits' errors.
pub fn for_each_accepted(
    sh: &Shared,
    sel: &Selection,
    start_ms: i64,
    end_ms: i64,
    limits: &ReadLimits,
    mut f: impl FnMut(Labels) -> bool,
) -> Result<()> {
    let (_, ids) = matching_ids(sh, sel, start_ms, end_ms)?;
    for (i, id) in ids.into_iter().enumerate() {
        if i % CHECK_EVERY == 0 {
            limits.check()?;
        }
        if let Some(labels) = accepted_labels(sh, sel, id)? {
            if !f(labels) {
                break;
            }
        }
    }
    Ok(())
}

/// [`series_labels`] with a limit, by reading one matcher's postings list per keyspace a turn at
/// a time and checking each series' labels, so that `limit` answers cost about `limit` divided
/// by the share of the list that matches, not the whole selection. `None` when that would read
/// more than a few times `limit` ids (the caller then resolves the selection in full) or no
/// matcher gives a bounded list.
fn series_labels_probed(
    sh: &Shared,
    sel: &Selection,
    start_ms: i64,
    end_ms: i64,
    limits: &ReadLimits,
    limit: usize,
) -> Result<Option<Vec<Labels>>> {
    const TURN: usize = 256;
    if start_ms > end_ms {
        return Ok(Some(Vec::new()));
    }
    let budget = limit.saturating_mul(PROBE_FACTOR).saturating_add(TURN);
    let windows = sh.windows.overlapping(start_ms, end_ms);
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    for ks in windows.iter().flat_map(keyspaces) {
        let Some(mut list) = matchers::one_list(ks, sel)? else { return Ok(None) };
        loop {
            limits.check()?;
            let read = list.ids.len();
            let exhausted = list.advance(ks, TURN)?;
            for &id in list.ids.get(read..).unwrap_or_default() {
                if !seen.insert(id) {
                    continue;
                }
                if let Some(labels) = accepted_labels(sh, sel, id)? {
                    out.push(labels);
                    if out.len() >= limit {
                        return Ok(Some(out));
                    }
                }
            }
            if exhausted {
                break;
            }
            if seen.len() > budget {
                return Ok(None);
            }
        }
    }
    Ok(Some(out))
}

/// Label names of the matching series present in `[start, end]`, sorted, at most `limit`.
/// Without matchers, read from the window postings (one seek per name).
///
/// # Errors
/// Engine errors, corrupt rows, or the limits' errors.
pub fn label_names(
    sh: &Shared,
    sel: &Selection,
    start_ms: i64,
    end_ms: i64,
    limits: &ReadLimits,
    limit: Option<usize>,
) -> Result<Vec<String>> {
    let mut names = BTreeSet::new();
    if sel.matchers().is_empty() {
        for ks in sh.windows.overlapping(start_ms, end_ms).iter().flat_map(keyspaces) {
            limits.check()?;
            for name in names_in(sh, ks)?.iter() {
                if !names.contains(name) {
                    names.insert(name.clone());
                }
            }
        }
    } else if let Some((pair, plan)) = OnePair::planned(sh, sel, (start_ms, end_ms), |ks, enough| {
        let mut n = 0;
        for name in names_in(sh, ks)?.iter() {
            n += values_in(sh, ks, name)?.len();
            if n > enough {
                break;
            }
        }
        Ok(n)
    })? {
        pair.for_each_keyspace(&plan, limits, |ks, ids| {
            for name in names_in(sh, ks)?.iter() {
                if !names.contains(name) && any_value_carried_by(sh, ks, name, (&pair, ids), limits)? {
                    names.insert(name.clone());
                }
            }
            Ok(())
        })?;
    } else {
        for_each_accepted(sh, sel, start_ms, end_ms, limits, |labels| {
            for l in labels.iter() {
                if !names.contains(&l.name) {
                    names.insert(l.name.clone());
                }
            }
            true
        })?;
    }
    Ok(names.into_iter().take(limit.unwrap_or(usize::MAX)).collect())
}

/// A selection of one matcher on one label whose label names and values are read from the
/// postings, not from the label sets of every series it selects: an equality to a value (a
/// tenant's `__tenant__="a"`, a `job="x"`), or the label's absence (`__tenant__=""`, the
/// default tenant's).
struct OnePair<'a> {
    matcher: &'a crate::matcher::Matcher,
}

/// The windows overlapping a range, each with its [`OnePair::ids`].
type Plan = Vec<(Window, Vec<SeriesId>)>;

/// How many values of the label asked (or of every label, for names) make reading the postings
/// cost as much as decoding one selected series' label set: a series walk decodes each label set
/// once, the postings read at least one list per value.
const VALUES_PER_WALKED_SERIES: usize = 4;

impl<'a> OnePair<'a> {
    fn of(sel: &'a Selection) -> Option<Self> {
        match sel.matchers() {
            [m] if m.op == crate::matcher::MatchOp::Equal => Some(Self { matcher: m }),
            _ => None,
        }
    }

    /// The pair of `sel` and its plan over `[start, end]`, when reading the postings costs
    /// less than walking the selected series: always for an absence (whose selected series are
    /// the window's others), else unless the selected series are fewer than the values the
    /// answer would read (`values` of a keyspace, which may stop counting past its second
    /// argument) divided by [`VALUES_PER_WALKED_SERIES`]
    /// (Grafana's `label_values(up{job="x"}, instance)` over a few series of a label with many
    /// values walks).
    fn planned(
        sh: &Shared,
        sel: &'a Selection,
        (start_ms, end_ms): (i64, i64),
        values: impl Fn(&fjall::Keyspace, usize) -> Result<usize>,
    ) -> Result<Option<(Self, Plan)>> {
        let Some(pair) = Self::of(sel) else { return Ok(None) };
        let mut plan = Vec::new();
        for w in sh.windows.overlapping(start_ms, end_ms).iter() {
            let ids = pair.ids(sh, w)?;
            if !ids.is_empty() || !pair.keeps_carriers() {
                plan.push((w.clone(), ids));
            }
        }
        if pair.keeps_carriers() {
            let walk = plan.iter().map(|(_, ids)| ids.len()).sum::<usize>().saturating_mul(VALUES_PER_WALKED_SERIES);
            let mut read = 0usize;
            for ks in plan.iter().flat_map(|(w, _)| keyspaces(w)) {
                read = read.saturating_add(values(ks, walk - read)?);
                if read > walk {
                    return Ok(None);
                }
            }
        }
        Ok(Some((pair, plan)))
    }

    /// Whether the selection keeps the series carrying the pair (an equality) rather than those
    /// without the label (an absence).
    fn keeps_carriers(&self) -> bool {
        !self.matcher.value.is_empty()
    }

    /// The series of window `w` the matcher decides by (ascending): those carrying the pair, or
    /// for an absence those carrying the label with any value.
    fn ids(&self, sh: &Shared, w: &Window) -> Result<Vec<SeriesId>> {
        let m = self.matcher;
        window_ids(w, |ks| {
            Ok(if self.keeps_carriers() {
                postings::PairIds::new(&m.name, [m.value.as_str()])
            } else {
                postings::PairIds::new(&m.name, values_in(sh, ks, &m.name)?.iter().map(String::as_str))
            })
        })
    }

    /// Calls `f` with each keyspace of the plan's windows (those that may hold a selected
    /// series), and the window's [`OnePair::ids`].
    fn for_each_keyspace(
        &self,
        plan: &Plan,
        limits: &ReadLimits,
        mut f: impl FnMut(&fjall::Keyspace, &[SeriesId]) -> Result<()>,
    ) -> Result<()> {
        for (w, ids) in plan {
            for ks in keyspaces(w) {
                limits.check()?;
                f(ks, ids)?;
            }
        }
        Ok(())
    }

    /// Whether series `id` is selected, given [`OnePair::ids`].
    fn selects(&self, ids: &[SeriesId], id: &SeriesId) -> bool {
        ids.binary_search(id).is_ok() == self.keeps_carriers()
    }
}

/// Whether a series `pair` selects (given its [`OnePair::ids`]) carries label `name` = `value`
/// in `ks`: the pair's postings list read a block of ids at a time, until one is selected.
fn carried_by(
    ks: &fjall::Keyspace,
    (name, value): (&str, &str),
    (pair, ids): (&OnePair<'_>, &[SeriesId]),
    limits: &ReadLimits,
) -> Result<bool> {
    let mut list = postings::PairIds::new(name, [value]);
    loop {
        let done = list.advance(ks, 1024)?;
        if list.ids.iter().any(|id| pair.selects(ids, id)) {
            return Ok(true);
        }
        if done {
            return Ok(false);
        }
        list.ids.clear();
        limits.check()?;
    }
}

/// Whether a series `pair` selects carries label `name` (any value) in `ks`.
fn any_value_carried_by(
    sh: &Shared,
    ks: &fjall::Keyspace,
    name: &str,
    selected: (&OnePair<'_>, &[SeriesId]),
    limits: &ReadLimits,
) -> Result<bool> {
    for v in values_in(sh, ks, name)?.iter() {
        if carried_by(ks, (name, v), selected, limits)? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Every label name in `ks`, sorted: held by the index cache, or walked from the postings once.
fn names_in(sh: &Shared, ks: &fjall::Keyspace) -> Result<std::sync::Arc<[String]>> {
    sh.index.names(ks, || {
        let mut found = Vec::new();
        postings::for_each_name(ks, |name| found.push(name.to_owned()))?;
        Ok(found)
    })
}

/// Every value of label `name` in `ks`, sorted: held by the index cache, or walked from the
/// postings once (and then held).
fn values_in(sh: &Shared, ks: &fjall::Keyspace, name: &str) -> Result<std::sync::Arc<[String]>> {
    sh.index.values(ks, name, || {
        let mut found = Vec::new();
        postings::for_each_value(ks, name, "", |v| {
            found.push(v.to_owned());
            true
        })?;
        Ok((found, true))
    })
}

/// Values of label `name` among the matching series present in `[start, end]`, sorted, at most
/// `limit`. Without matchers, read from the window postings (cost per value, not per series);
/// with one equality or absence (a tenant's matcher), from the postings of each value, read
/// until one of its series is selected.
///
/// # Errors
/// Engine errors, corrupt rows, or the limits' errors.
pub fn label_values(
    sh: &Shared,
    name: &str,
    sel: &Selection,
    start_ms: i64,
    end_ms: i64,
    limits: &ReadLimits,
    limit: Option<usize>,
) -> Result<Vec<String>> {
    let limit = limit.unwrap_or(usize::MAX);
    let mut values = BTreeSet::new();
    if sel.matchers().is_empty() {
        for ks in sh.windows.overlapping(start_ms, end_ms).iter().flat_map(keyspaces) {
            limits.check()?;
            // Values come in order, so each keyspace needs at most `limit` of them (a walk that
            // stopped there is not kept).
            let held = sh.index.values(ks, name, || {
                let mut found = Vec::new();
                postings::for_each_value(ks, name, "", |value| {
                    found.push(value.to_owned());
                    found.len() < limit
                })?;
                let whole = found.len() < limit;
                Ok((found, whole))
            })?;
            for value in held.iter().take(limit) {
                if !values.contains(value) {
                    values.insert(value.clone());
                }
            }
        }
    } else if let Some((pair, plan)) =
        OnePair::planned(sh, sel, (start_ms, end_ms), |ks, _| Ok(values_in(sh, ks, name)?.len()))?
    {
        pair.for_each_keyspace(&plan, limits, |ks, ids| {
            for v in values_in(sh, ks, name)?.iter() {
                if !values.contains(v) && carried_by(ks, (name, v), (&pair, ids), limits)? {
                    values.insert(v.clone());
                }
            }
            Ok(())
        })?;
    } else {
        for_each_accepted(sh, sel, start_ms, end_ms, limits, |labels| {
            if let Some(value) = labels.get(name) {
                if !values.contains(value) {
                    values.insert(value.to_owned());
                }
            }
            true
        })?;
    }
    Ok(values.into_iter().take(limit).collect())
}

/// Most candidate series an answer from memory ([`held_series`] and the others) is given for:
/// it runs on an async thread, so its work must stay small.
const HELD_MAX_CANDIDATES: usize = 256;
/// Most names or values a keyspace's held answer may hold for an answer from memory.
const HELD_MAX_STRINGS: usize = 4096;

/// The candidate ids (ascending) of `sel` in the windows overlapping `[start, end]`, when the
/// index cache holds every keyspace's answer and they are few.
fn held_ids(sh: &Shared, sel: &Selection, start_ms: i64, end_ms: i64) -> Option<Vec<SeriesId>> {
    if start_ms > end_ms {
        return Some(Vec::new());
    }
    let mut ids = Vec::new();
    for ks in sh.windows.overlapping(start_ms, end_ms).iter().flat_map(keyspaces) {
        ids.extend_from_slice(&sh.index.held_candidates(ks, sel)?);
        if ids.len() > HELD_MAX_CANDIDATES {
            return None;
        }
    }
    ids.sort_unstable();
    ids.dedup();
    Some(ids)
}

/// The label sets of the series matching `sel` present in `[start, end]` when every part of the
/// answer is held in memory (the index cache's candidates, the labels cache's label sets), at
/// most `limit`; `None` when anything would have to be read. Never blocks.
pub fn held_series(
    sh: &Shared,
    sel: &Selection,
    start_ms: i64,
    end_ms: i64,
    limit: Option<usize>,
) -> Option<Vec<Labels>> {
    let mut out = Vec::new();
    for id in held_ids(sh, sel, start_ms, end_ms)? {
        if out.len() >= limit.unwrap_or(usize::MAX) {
            break;
        }
        let labels = sh.labels.held(id)?;
        if sel.accepts(&labels) {
            out.push(labels);
        }
    }
    Some(out)
}

/// [`label_names`] from memory alone, as [`held_series`].
pub fn held_label_names(
    sh: &Shared,
    sel: &Selection,
    start_ms: i64,
    end_ms: i64,
    limit: Option<usize>,
) -> Option<Vec<String>> {
    let mut names = BTreeSet::new();
    if sel.matchers().is_empty() {
        for ks in sh.windows.overlapping(start_ms, end_ms).iter().flat_map(keyspaces) {
            let held = sh.index.held_names(ks).filter(|h| h.len() <= HELD_MAX_STRINGS)?;
            names.extend(held.iter().cloned());
        }
    } else {
        for labels in held_series(sh, sel, start_ms, end_ms, None)? {
            names.extend(labels.iter().map(|l| l.name.clone()));
        }
    }
    Some(names.into_iter().take(limit.unwrap_or(usize::MAX)).collect())
}

/// [`label_values`] from memory alone, as [`held_series`].
pub fn held_label_values(
    sh: &Shared,
    name: &str,
    sel: &Selection,
    start_ms: i64,
    end_ms: i64,
    limit: Option<usize>,
) -> Option<Vec<String>> {
    let mut values = BTreeSet::new();
    if sel.matchers().is_empty() {
        for ks in sh.windows.overlapping(start_ms, end_ms).iter().flat_map(keyspaces) {
            let held = sh.index.held_values(ks, name).filter(|h| h.len() <= HELD_MAX_STRINGS)?;
            values.extend(held.iter().cloned());
        }
    } else {
        for labels in held_series(sh, sel, start_ms, end_ms, None)? {
            values.extend(labels.get(name).map(str::to_owned));
        }
    }
    Some(values.into_iter().take(limit.unwrap_or(usize::MAX)).collect())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// Two windows' samples of one series appended one after the other (a series that
        /// changed retention class inside a window): put back ascending, one per timestamp,
        /// the first appended winning, as a map of the samples says; `out` before `base`
        /// untouched.
        #[test]
        fn samples_of_two_classes_read_ascending_once_per_timestamp(
            kept in prop::collection::vec(any::<i16>(), 0..5),
            a in prop::collection::btree_map(0i64..200, any::<i16>(), 0..40),
            b in prop::collection::btree_map(0i64..200, any::<i16>(), 0..40),
        ) {
            let sample = |(&t, &v): (&i64, &i16)| Sample::new(t, f64::from(v));
            let mut out: Vec<Sample> = kept.iter().enumerate().map(|(i, &v)| Sample::new(-10 + i as i64, f64::from(v))).collect();
            let base = out.len();
            out.extend(a.iter().map(sample));
            out.extend(b.iter().map(sample));
            ascending_from(&mut out, base, |s: &Sample| s.timestamp_ms);
            let mut model: BTreeMap<i64, f64> = BTreeMap::new();
            for (t, v) in a.iter().chain(&b) {
                model.entry(*t).or_insert(f64::from(*v));
            }
            let want: Vec<(i64, u64)> = model.into_iter().map(|(t, v)| (t, v.to_bits())).collect();
            let got: Vec<(i64, u64)> = out.get(base..).unwrap_or_default().iter().map(|s| (s.timestamp_ms, s.value.to_bits())).collect();
            prop_assert_eq!(got, want);
            let head: Vec<u64> = out.get(..base).unwrap_or_default().iter().map(|s| s.value.to_bits()).collect();
            prop_assert_eq!(head, kept.iter().map(|&v| f64::from(v).to_bits()).collect::<Vec<_>>());
        }
    }
}
