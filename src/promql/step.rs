//! Time on a query's step grid and in sample windows: the time of each step
//! ([`grid_time`]), where a range selector's window lies at a step ([`StepWindow`]), the
//! samples of a window ([`between`], [`seek`]) and a node's values at every step of a query
//! part ([`StepValues`]). Plain arithmetic over timestamps, shared by the evaluator and the
//! functions.

use super::value::Elem;
use crate::sample::Sample;

/// A node's output at every step of a query part (`None` once taken): a rollup's or selector's
/// (`grid::step_vector`) or an aggregation's (`aggr::SeriesFold`).
pub(crate) type StepValues = Vec<Option<Vec<Elem>>>;

/// The time of step `i` of a grid starting at `first` every `step` ms, saturating at the `i64`
/// bounds (callers stop before a step past them matters: grids hold at most a few million steps
/// of times within the bounds checked in `bounds.rs`).
#[inline]
pub(crate) fn grid_time(first: i64, step: i64, i: usize) -> i64 {
    i64::try_from(i).unwrap_or(i64::MAX).saturating_mul(step).saturating_add(first)
}

/// The first index of `s` (ascending timestamps) whose timestamp is after `bound`, searching
/// forward from `hint` when the answer lies there (the next step of a range query: a few samples
/// further, or a few hundred over a long range at a coarse step): first where the spacing of
/// the samples before the hint puts it, then by galloping (probes 1, 2, 4, 8, ... samples past
/// the hint, then a binary search between the last two), so a step costs about twice the
/// logarithm of the distance moved rather than a binary search over every sample left. Without
/// a usable hint, a binary search.
#[inline]
pub(crate) fn seek(s: &[Sample], hint: usize, bound: i64) -> usize {
    let hint_ok = hint <= s.len() && (hint == 0 || s.get(hint - 1).is_some_and(|p| p.timestamp_ms <= bound));
    if !hint_ok {
        return s.partition_point(|p| p.timestamp_ms <= bound);
    }
    // Invariant: every sample before `lo` is at or before `bound`.
    let mut lo = hint;
    // Samples are mostly evenly spaced: guess the answer from the spacing before the hint and
    // try it first (two neighbouring probes), so that a long move costs no more than a short one.
    if let (Some(before), Some(at)) = (hint.checked_sub(1).and_then(|i| s.get(i)), s.get(hint)) {
        let spacing = at.timestamp_ms.saturating_sub(before.timestamp_ms).max(1);
        let ahead = bound.saturating_sub(at.timestamp_ms) / spacing;
        if let Some(guess) = usize::try_from(ahead).ok().and_then(|a| hint.checked_add(a)).filter(|&g| g > hint) {
            match (s.get(guess - 1), s.get(guess)) {
                (Some(p), Some(q)) if p.timestamp_ms <= bound && q.timestamp_ms > bound => return guess,
                (Some(p), None) if p.timestamp_ms <= bound => return guess,
                (Some(p), _) if p.timestamp_ms <= bound => lo = guess,
                _ => {}
            }
        }
    }
    let mut width = 1usize;
    loop {
        let probe = lo.saturating_add(width - 1);
        match s.get(probe) {
            Some(p) if p.timestamp_ms <= bound => {
                lo = probe + 1;
                width = width.saturating_mul(2);
            }
            Some(_) => {
                // The answer is in `lo..=probe`.
                let within = s.get(lo..probe).unwrap_or_default();
                return lo + within.partition_point(|p| p.timestamp_ms <= bound);
            }
            None => {
                let rest = s.get(lo..).unwrap_or_default();
                return lo + rest.partition_point(|p| p.timestamp_ms <= bound);
            }
        }
    }
}

/// The samples of `s` in `(lo, hi]`.
pub(crate) fn between(s: &[Sample], lo: i64, hi: i64) -> &[Sample] {
    let a = s.partition_point(|p| p.timestamp_ms <= lo);
    let b = s.partition_point(|p| p.timestamp_ms <= hi).max(a);
    &s[a..b]
}

/// Where a range selector's window lies at each step: plain numbers resolved against the
/// query, so the steps can be computed away from it (on storage threads).
#[derive(Clone, Copy, Debug)]
pub(crate) struct StepWindow {
    /// The `@` time, if any.
    pub pinned: Option<i64>,
    /// The `offset`, in ms.
    pub offset: i64,
    /// The range, in ms.
    pub range: i64,
}

impl StepWindow {
    /// The window `(end - range, end]` at evaluation time `t`: `(start, end)`.
    pub(crate) fn bounds(&self, t: i64) -> (i64, i64) {
        let end = self.pinned.unwrap_or(t).saturating_sub(self.offset);
        (end.saturating_sub(self.range), end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn samples(ts: &[i64]) -> Vec<Sample> {
        ts.iter().map(|&t| Sample::new(t, t as f64)).collect()
    }

    #[test]
    fn seek_agrees_with_binary_search_from_any_hint() {
        let s = samples(&[1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 233]);
        for bound in -1..300 {
            let want = s.partition_point(|p| p.timestamp_ms <= bound);
            for hint in 0..=s.len() + 1 {
                assert_eq!(seek(&s, hint, bound), want, "bound {bound} hint {hint}");
            }
        }
    }

    proptest::proptest! {
        /// Against a binary search, over spacings that are regular (where the guess from the
        /// spacing is tried first) and irregular, from every hint.
        #[test]
        fn seek_agrees_with_binary_search_on_any_spacing(
            gaps in proptest::collection::vec(proptest::prop_oneof![3 => proptest::strategy::Just(15i64), 1 => 1i64..100], 0..200),
            bounds in proptest::collection::vec(-10i64..4_000, 1..20),
        ) {
            let mut t = 0;
            let ts: Vec<i64> = gaps.iter().map(|g| { t += g; t }).collect();
            let s = samples(&ts);
            for &bound in &bounds {
                let want = s.partition_point(|p| p.timestamp_ms <= bound);
                for hint in 0..=s.len() + 1 {
                    proptest::prop_assert_eq!(seek(&s, hint, bound), want, "bound {} hint {}", bound, hint);
                }
            }
        }
    }

    #[test]
    fn windows_are_left_open() {
        let s = samples(&[10, 20, 30]);
        assert_eq!(between(&s, 10, 30).len(), 2);
        assert_eq!(StepWindow { pinned: None, offset: 5, range: 10 }.bounds(30), (15, 25));
        assert_eq!(StepWindow { pinned: Some(100), offset: 0, range: 10 }.bounds(30), (90, 100));
        assert_eq!(grid_time(10, 5, 3), 25);
    }
}
