//! Reading tier points (see [`Querier::select_points`](super::querier::Querier::select_points)):
//! per series, a sealed window answers from its tier row of the interval asked for, every other
//! part of the range (hot windows, the head, late samples not yet re-sealed, windows sealed
//! before the tier existed) from raw samples cut into the same intervals. The parts meet at
//! window boundaries, where the point ending at a window's start is merged from both sides,
//! earlier first; the result equals the points of every raw sample of the range.

use rayon::prelude::*;

use super::querier::{points_in, too_sparse, PointsRead, ReadLimits, SampleBudget, SeriesPoints};
use super::select::{accepted_labels, by_bucket, matching_ids, read_histograms, read_series};
use crate::storage::error::Result;
use crate::storage::format::{histogram_run, tier_rows};
use crate::storage::index::matchers::Selection;
use crate::storage::lifecycle::window::Window;
use crate::storage::series_id::SeriesId;
use crate::storage::shared::Shared;
use crate::tier::FloatPoint;

/// Series read between two checks of the deadline and cancellation flag.
const CHECK_EVERY: usize = 64;

/// A part of one series' points and where it sits among the others sharing its ends: at equal
/// ends the part of the window starting at that end comes last (it holds only the sample at
/// the end; the window before holds the rest of the interval).
type Part = Vec<((i64, bool), FloatPoint)>;

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
    let parts: Vec<Result<Option<Vec<SeriesPoints>>>> = if groups.len() <= 1 || ids.len() < 2 * CHECK_EVERY {
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
        let mut parts: Part = Vec::new();
        let mut raw: Vec<Window> = self.raw.to_vec();
        // The time ranges answered from tier rows, whose raw samples (none but in a race with
        // a late write) are left out.
        let mut answered: Vec<(i64, i64)> = Vec::new();
        let window_ms = sh.windows.window_ms();
        for w in self.tiered {
            let Some((_, ks)) = &w.chunks else { continue };
            let stored = tier_rows::read(ks, bucket, id, self.interval_ms)?;
            let Some(points) = stored else {
                raw.push(w.clone());
                continue;
            };
            // A downsampled window has nothing else to read: its points answer however sparse.
            if (w.downsampled.is_none() && too_sparse(&points, self.how.min_density))
                || (sh.histograms_stored() && histogram_run::any_of(ks, bucket, id)?)
            {
                return Ok(None);
            }
            budget.take(points.len())?;
            answered.push((w.start_ms, w.start_ms.saturating_add(window_ms)));
            // Points are big: grown once per window, not by doubling (a year of 1h points is
            // 8,760 of them per series).
            parts.reserve(points.len());
            parts.extend(
                points
                    .into_iter()
                    .filter(|(end, _)| (first_end..=last_end).contains(end))
                    .map(|(end, p)| ((end, end == w.start_ms), p)),
            );
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
            parts.reserve(cut.len());
            parts.extend(cut.into_iter().map(|(end, p)| ((end, end == start), p)));
        }
        Ok(Some(merged(parts)))
    }
}

/// The parts' points ordered by end, those sharing an end merged in order (see [`Part`]).
fn merged(mut parts: Part) -> Vec<(i64, FloatPoint)> {
    // Windows are read oldest first, so the parts are most often in order already: sorting
    // moves every point.
    if !parts.is_sorted_by_key(|(key, _)| *key) {
        parts.sort_by_key(|(key, _)| *key);
    }
    let mut out: Vec<(i64, FloatPoint)> = Vec::with_capacity(parts.len());
    for ((end, _), p) in parts {
        match out.last_mut() {
            Some((last_end, last)) if *last_end == end => *last = last.merge(&p),
            _ => out.push((end, p)),
        }
    }
    out
}
