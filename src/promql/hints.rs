//! Counter reset hints as a query sees them: every histogram a selector loads is given the hint
//! Prometheus' chunks would read it back with ([`read_hint`], which has the rule), from the
//! point of its series right before it, whatever hint it was written with.
//!
//! Derived where the series is read, never where it is written: the point before a histogram
//! is the one the read finds, so a late write (a point arriving after later ones) changes the
//! hints of the points around it on the next read, and both storage backends answer alike.
//! The point before the first one a selector loads lies outside its range: the preload looks
//! for it in the lookback delta before the range ([`Pending`], [`resolve_first`]); beyond that
//! the first histogram reads `Unknown` (Prometheus may say `NotCounterReset` there, when its
//! chunk reaches that far back; `Unknown` is always safe, the engine then compares counts).
//!
//! Under `histogram_count`, `histogram_sum` and `histogram_avg` Prometheus reads histograms
//! through its `HistogramStatsIterator`, which turns an `Unknown` hint into `CounterReset` or
//! `NotCounterReset` by comparing with the histogram read before it ([`detect_unknown`]); which
//! selectors it reads so is [`stats_selectors`]' rule. That is where an aggregation can see
//! both hints and warn about conflicting counter resets.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use promql_parser::parser::Expr;

use super::trim;
use crate::histogram::{detect_reset, read_hint, CounterResetHint, Histogram};
use crate::labels::Labels;
use crate::sample::{HistogramSample, SeriesSamples};

/// Series whose first loaded point is a counter histogram read as `Unknown` for lack of the
/// point before it, with that point's timestamp (see [`resolve_first`]).
#[derive(Default)]
pub(crate) struct Pending(Mutex<HashMap<Labels, i64>>);

impl Pending {
    /// Derives the hints of `s` (all of its points, as read) and remembers it when its first
    /// point needs the point before it.
    pub(crate) fn derive(&self, s: &mut SeriesSamples) {
        if let Some(t) = derive(s) {
            self.0.lock().unwrap_or_else(PoisonError::into_inner).insert(s.labels.clone(), t);
        }
    }

    /// Forgets `s` when its first loaded point is gone (a map kept only the newest point).
    pub(crate) fn forget_unless_first_kept(&self, s: &SeriesSamples) {
        let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(&t) = map.get(&s.labels) {
            if s.histograms.first().map(|h| h.timestamp_ms) != Some(t) {
                map.remove(&s.labels);
            }
        }
    }

    /// The series remembered, with their first point's timestamp.
    pub(crate) fn into_inner(self) -> HashMap<Labels, i64> {
        self.0.into_inner().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Gives every histogram of `s` its read hint from the point before it in `s`; the first point
/// of `s`, when it is a histogram, is derived as if nothing preceded it. Returns that point's
/// timestamp when its hint would change with a histogram before it.
pub(crate) fn derive(s: &mut SeriesSamples) -> Option<i64> {
    if s.histograms.is_empty() {
        return None;
    }
    let first_float = s.samples.first().map_or(i64::MAX, |p| p.timestamp_ms);
    let mut floats = s.samples.iter().map(|p| p.timestamp_ms).peekable();
    let mut pending = None;
    let mut prev: Option<(i64, Arc<Histogram>)> = None;
    for h in &mut s.histograms {
        let t = h.timestamp_ms;
        // The newest float before `t`, if any came after the previous histogram.
        let mut float_after_prev = false;
        while let Some(ft) = floats.next_if(|&ft| ft < t) {
            float_after_prev |= prev.as_ref().is_none_or(|(pt, _)| ft > *pt);
        }
        let before = if float_after_prev { None } else { prev.as_ref().map(|(_, p)| p.as_ref()) };
        if prev.is_none() && t < first_float && needs_before(&h.histogram) {
            pending = Some(t);
        }
        let original = Arc::clone(&h.histogram);
        set_hint(h, read_hint(before, &original));
        prev = Some((t, original));
    }
    pending
}

/// Whether the hint of `h` depends on the point before it.
fn needs_before(h: &Histogram) -> bool {
    matches!(h.counter_reset_hint, CounterResetHint::Unknown | CounterResetHint::NotCounterReset)
}

/// Derives again the hint of the first histogram of `s`, at `t`, now that `before` (the point of
/// its series right before it, `None` for a float or none) is known.
pub(crate) fn resolve_first(s: &mut SeriesSamples, t: i64, before: Option<&Histogram>) {
    let Some(first) = s.histograms.first_mut().filter(|h| h.timestamp_ms == t) else { return };
    let cur = Arc::clone(&first.histogram);
    set_hint(first, read_hint(before, &cur));
}

/// Prometheus' `HistogramStatsIterator`: every `Unknown` hint after a histogram becomes
/// `CounterReset` or `NotCounterReset` by [`detect_reset`] against the newest non-stale
/// histogram before it (floats and stale markers between are passed over, as the iterator
/// passes over them). The first histogram stays `Unknown`.
pub(crate) fn detect_unknown(s: &mut SeriesSamples) {
    let mut last: Option<Arc<Histogram>> = None;
    for h in &mut s.histograms {
        if h.histogram.is_stale() {
            continue;
        }
        if h.histogram.counter_reset_hint == CounterResetHint::Unknown {
            if let Some(prev) = &last {
                let reset = detect_reset(prev, &h.histogram);
                set_hint(h, if reset { CounterResetHint::CounterReset } else { CounterResetHint::NotCounterReset });
            }
        }
        last = Some(Arc::clone(&h.histogram));
    }
}

/// The selectors of `e` (by the address of their `VectorSelector`, the preload's key) that
/// Prometheus reads without buckets (`detectHistogramStatsDecoding`): those with
/// `histogram_count`, `histogram_sum` or `histogram_avg` above them, and no subquery,
/// `histogram_quantile`, `histogram_quantiles`, `histogram_fraction` or trim operator.
pub(crate) fn stats_selectors(e: &Expr) -> Vec<usize> {
    let mut out = Vec::new();
    visit(e, false, &mut out);
    out
}

fn visit(e: &Expr, stats: bool, out: &mut Vec<usize>) {
    match e {
        Expr::VectorSelector(vs) => {
            if stats {
                out.push(std::ptr::from_ref(vs) as usize);
            }
        }
        Expr::MatrixSelector(ms) => {
            if stats {
                out.push(std::ptr::from_ref(&ms.vs) as usize);
            }
        }
        Expr::Subquery(_) | Expr::NumberLiteral(_) | Expr::StringLiteral(_) | Expr::Extension(_) => {}
        Expr::Aggregate(a) => {
            visit(&a.expr, stats, out);
            if let Some(p) = &a.param {
                visit(p, stats, out);
            }
        }
        Expr::Unary(u) => visit(&u.expr, stats, out),
        Expr::Paren(p) => visit(&p.expr, stats, out),
        Expr::Binary(b) => {
            if trim::of(b).is_none() {
                visit(&b.lhs, stats, out);
                visit(&b.rhs, stats, out);
            }
        }
        Expr::Call(c) => {
            let stats = match c.func.name {
                "histogram_count" | "histogram_sum" | "histogram_avg" => true,
                "histogram_quantile" | "histogram_quantiles" | "histogram_fraction" => return,
                _ => stats,
            };
            c.args.args.iter().for_each(|a| visit(a, stats, out));
        }
    }
}

fn set_hint(h: &mut HistogramSample, hint: CounterResetHint) {
    if h.histogram.counter_reset_hint != hint {
        Arc::make_mut(&mut h.histogram).counter_reset_hint = hint;
    }
}

#[cfg(test)]
#[path = "hints_tests.rs"]
mod tests;
