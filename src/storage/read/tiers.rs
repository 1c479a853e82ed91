//! Reading tier points (see [`Querier::select_points`](super::querier::Querier::select_points)):
//! per series, a sealed window answers from its tier row of the interval asked for, every other
//! part of the range (hot windows, the head, late samples not yet re-sealed, windows sealed
//! before the tier existed) from raw samples cut into the same intervals. The parts meet at
//! window boundaries, where the point ending at a window's start is merged from both sides,
//! earlier first; the result equals the points of every raw sample of the range.

use rayon::prelude::*;

use super::querier::{points_in, too_sparse, PointsRead, ReadLimits, SampleBudget, SeriesPoints};
use super::select::{accepted_labels, by_bucket, in_parallel, matching_ids, read_histograms, read_series};
use crate::storage::error::Result;
use crate::storage::format::tier_run::Decoded;
use crate::storage::format::{histogram_run, tier_rows};
use crate::storage::index::matchers::Selection;
use crate::storage::lifecycle::window::Window;
use crate::storage::series_id::SeriesId;
use crate::storage::shared::Shared;
use crate::tier::{Fields, FloatPoint};

/// Series read between two checks of the deadline and cancellation flag.
const CHECK_EVERY: usize = 64;

/// One series' points as its parts (windows' tier rows, raw samples cut into points) give
/// them, and where each sits among others sharing its end: at equal ends the point of the
/// window starting at that end comes last (it holds only the sample at the end; the window
/// before holds the rest of the interval).
///
/// Invariant: `at_start` has one entry per point; while `in_order`, the points are ascending
/// by `(end, at_start)` and no two share an end (a point arriving in order with the end of the
/// one before is merged into it at once).
struct Parts {
    points: Vec<(i64, FloatPoint)>,
    /// Per point: whether it comes from the window starting at its end.
    at_start: Vec<bool>,
    in_order: bool,
    /// What of the points is merged (see [`FloatPoint::absorb`]).
    fields: Fields,
}

impl Parts {
    /// Room for `n` points, merged for `fields`.
    fn with_capacity(n: usize, fields: Fields) -> Self {
        Self { points: Vec::with_capacity(n), at_start: Vec::with_capacity(n), in_order: true, fields }
    }

    /// Adds the points of the window (or piece of one) starting at `window_start`, at most
    /// `most` of them.
    fn extend(&mut self, (points, most): (impl Iterator<Item = (i64, FloatPoint)>, usize), window_start: i64) {
        self.points.reserve(most);
        self.at_start.reserve(most);
        for (end, p) in points {
            let at_start = end == window_start;
            if !self.joined(self.points.len(), (end, at_start), &p) {
                self.at_start.push(at_start);
                self.points.push((end, p));
            }
        }
    }

    /// Whether point `p` ending at `end`, arriving after the first `held` points, is merged
    /// into the last of them (in order, with its end: the window before's point at this end,
    /// then this window's, make one point, with no vector of them to compact later); notes
    /// when it comes out of order. `at_start` has one entry per point held.
    fn joined(&mut self, held: usize, (end, at_start): (i64, bool), p: &FloatPoint) -> bool {
        if !self.in_order || held == 0 {
            return false;
        }
        match (self.points.get_mut(held - 1), self.at_start.last_mut()) {
            (Some((last_end, last)), Some(last_at)) if *last_end == end && *last_at <= at_start => {
                last.absorb(p, self.fields);
                *last_at = at_start;
                true
            }
            (Some((last_end, _)), Some(last_at)) => {
                self.in_order = (*last_end, *last_at) <= (end, at_start);
                false
            }
            _ => false,
        }
    }

    /// Takes in the points of the window starting at `window_start` that a decode appended
    /// to `points` from `base` on (ascending, one per end): those ending outside `[first_end,
    /// last_end]` go, and the first is merged into the point before when they share an end,
    /// as [`Parts::extend`] does.
    fn adopt(&mut self, base: usize, window_start: i64, (first_end, last_end): (i64, i64)) {
        let fresh = self.points.get(base..).unwrap_or_default();
        let (lo, hi) = (fresh.partition_point(|(e, _)| *e < first_end), fresh.partition_point(|(e, _)| *e <= last_end));
        self.points.truncate(base + hi.max(lo));
        self.points.drain(base..base + lo);
        // The first may join the points held before the decode (`at_start` has one entry for
        // each of them); the others stay where the decode put them.
        if let Some(&(end, first)) = self.points.get(base) {
            if self.joined(base, (end, end == window_start), &first) {
                self.points.remove(base);
            }
        }
        let added = self.points.get(base..).unwrap_or_default();
        self.at_start.extend(added.iter().map(|(end, _)| *end == window_start));
    }

    /// The points ordered by end, those sharing an end merged in order. Windows are read
    /// oldest first, so the points are most often in order already, and merged as they came.
    fn merged(self) -> Vec<(i64, FloatPoint)> {
        let Parts { mut points, at_start, in_order, fields } = self;
        if in_order {
            // Sized for the whole range: a series with points in a part of it gives the rest back.
            if points.capacity() > 2 * points.len() + 64 {
                points.shrink_to_fit();
            }
            return points;
        }
        let mut keyed: Vec<((i64, bool), FloatPoint)> =
            at_start.into_iter().zip(points).map(|(s, (end, p))| ((end, s), p)).collect();
        keyed.sort_by_key(|(key, _)| *key);
        points = keyed.into_iter().map(|((end, _), p)| (end, p)).collect();
        points.dedup_by(|later, kept| {
            let same = later.0 == kept.0;
            if same {
                kept.1.absorb(&later.1, fields);
            }
            same
        });
        points
    }
}

/// The points of `interval_ms` ending in `[first_end, last_end]` of every series matching
/// `sel` with samples in `(first_end - interval_ms, last_end]`; `None` when one of them holds
/// native histograms there (see the trait method).
///
/// # Errors
/// Engine errors, corrupt rows, or the limits' errors.
pub fn select_points(
    sh: &Shared,
    sel: &Selection,
    ((first_end, last_end), interval_ms): ((i64, i64), i64),
    how: PointsRead<'_>,
    limits: &ReadLimits,
) -> Result<Option<Vec<SeriesPoints>>> {
    limits.check()?;
    let lo = first_end.saturating_sub(interval_ms).saturating_add(1);
    let (windows, ids) = matching_ids(sh, sel, lo, last_end)?;
    let window_ms = sh.windows.window_ms();
    // Sealed windows without late samples (in an overlay or the head) answer from tier rows.
    let (tiered, raw): (Vec<Window>, Vec<Window>) = windows.into_iter().partition(|w| {
        w.chunks.is_some() && w.points.is_none() && !sh.head.any_in(w.start_ms, w.start_ms.saturating_add(window_ms))
    });
    let read = Read { sh, sel, tiered: &tiered, raw: &raw, range: (first_end, last_end), interval_ms, how, limits };
    let budget = SampleBudget::new(limits.max_samples);
    let groups = by_bucket(sh, &ids);
    let parts: Vec<Result<Option<Vec<SeriesPoints>>>> =
        if !in_parallel(groups.len(), ids.len(), tiered.len() + raw.len()) {
            groups.iter().map(|g| read.bucket(g, &budget)).collect()
        } else {
            sh.pool.install(|| groups.par_iter().map(|g| read.bucket(g, &budget)).collect())
        };
    let mut out = Vec::with_capacity(ids.len());
    for part in parts {
        match part? {
            Some(series) => out.extend(series),
            None => return Ok(None),
        }
    }
    Ok(Some(out))
}

/// One tier read: what every bucket's part of it shares.
struct Read<'a> {
    sh: &'a Shared,
    sel: &'a Selection,
    tiered: &'a [Window],
    raw: &'a [Window],
    range: (i64, i64),
    interval_ms: i64,
    how: PointsRead<'a>,
    limits: &'a ReadLimits,
}

impl Read<'_> {
    /// The series of one bucket; `None` at the first with histograms.
    fn bucket(&self, (bucket, ids): &(u16, Vec<SeriesId>), budget: &SampleBudget) -> Result<Option<Vec<SeriesPoints>>> {
        let mut out = Vec::new();
        for (i, &id) in ids.iter().enumerate() {
            if i % CHECK_EVERY == 0 {
                self.limits.check()?;
            }
            let Some(labels) = accepted_labels(self.sh, self.sel, id)? else { continue };
            let Some(points) = self.series(*bucket, id, budget)? else { return Ok(None) };
            if !points.is_empty() {
                let mut series = SeriesPoints { labels, points, values: Vec::new() };
                if let Some(map) = self.how.map {
                    map(&mut series);
                }
                out.push(series);
            }
        }
        Ok(Some(out))
    }

    /// The points of one series; `None` when it holds histograms in the range.
    fn series(&self, bucket: u16, id: SeriesId, budget: &SampleBudget) -> Result<Option<Vec<(i64, FloatPoint)>>> {
        let sh = self.sh;
        let (first_end, last_end) = self.range;
        let lo = first_end.saturating_sub(self.interval_ms).saturating_add(1);
        // Sized once for the points the range can hold (a year of 1h points is 8,760 per
        // series, each about 250 bytes), and decoded into in place.
        let most = ((last_end.saturating_sub(lo) / self.interval_ms.max(1)).saturating_add(2)).clamp(0, 1 << 16);
        let mut parts = Parts::with_capacity(usize::try_from(most).unwrap_or(0), self.how.fields);
        let mut raw: Vec<Window> = self.raw.to_vec();
        // The time ranges answered from tier rows, whose raw samples (none but in a race with
        // a late write) are left out.
        let mut answered: Vec<(i64, i64)> = Vec::new();
        let window_ms = sh.windows.window_ms();
        for w in self.tiered {
            let Some((_, ks)) = &w.chunks else { continue };
            // Decoded straight into the series' points (a point is about 250 bytes: each copy
            // of them costs).
            let base = parts.points.len();
            let what = Decoded::of(self.how.fields);
            if !tier_rows::read_some_append(ks, (bucket, id, self.interval_ms), &mut parts.points, what)? {
                raw.push(w.clone());
                continue;
            }
            let fresh = parts.points.get(base..).unwrap_or_default();
            // A downsampled window has nothing else to read: its points answer however sparse.
            if (w.downsampled.is_none() && too_sparse(fresh, self.how.min_density))
                || (sh.histograms_stored() && histogram_run::any_of(ks, bucket, id)?)
            {
                return Ok(None);
            }
            budget.take(fresh.len())?;
            answered.push((w.start_ms, w.start_ms.saturating_add(window_ms)));
            parts.adopt(base, w.start_ms, (first_end, last_end));
        }
        raw.sort_by_key(|w| w.start_ms);
        let mut samples = Vec::new();
        read_series(&raw, Some(&sh.head), bucket, id, lo, last_end, &mut samples)?;
        if !read_histograms(sh, &raw, Some(&sh.head), bucket, id, (lo, last_end))?.is_empty() {
            return Ok(None);
        }
        samples.retain(|s| !answered.iter().any(|&(a, b)| (a..b).contains(&s.timestamp_ms)));
        budget.take(samples.len())?;
        // Raw samples cut window by window, so that each point's place at a shared end is known.
        for piece in samples.chunk_by(|a, b| sh.windows.start_of(a.timestamp_ms) == sh.windows.start_of(b.timestamp_ms))
        {
            let Some(first) = piece.first() else { continue };
            let start = sh.windows.start_of(first.timestamp_ms);
            let cut = points_in(piece, self.interval_ms, self.range);
            // Sparse points read slower than the samples: as for stored rows (which a seal
            // does not even write that sparse).
            if too_sparse(&cut, self.how.min_density) {
                return Ok(None);
            }
            let most = cut.len();
            parts.extend((cut.into_iter(), most), start);
        }
        Ok(Some(parts.merged()))
    }
}
