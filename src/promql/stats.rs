//! Query statistics for `stats=all`, in the terms of Prometheus' stats object
//! (`util/stats/query_stats.go`): timings of the evaluation phases, and the samples each step
//! read.
//!
//! `totalQueryableSamples` is counted as Prometheus 2.42 counts it, per outer step: an instant
//! selector adds one per series it finds, a range selector or a subquery (as a function
//! argument) adds the points in each series' window, and the other nodes add what their
//! operands add. It is computed by a walk over the expression beside the evaluation, not inside
//! it, so saltdb's evaluator keeps its shortcuts (series reduced as they are read, rollups per
//! series) and a query without `stats` pays nothing. Prometheus counts a subquery's inner
//! selectors, and `@`-pinned (step-invariant) expressions, in ways tied to its evaluator; here
//! those count as described above.
//!
//! A range selector read from a downsampled tier (see `docs/tiers.md`) counts the tier points
//! in each step's window, one a sample, and `tiers` names the tiers and their points.
//!
//! `peakSamples` is saltdb's own figure: the most samples the query held at once, counted as
//! `--query-max-samples` counts them: what its selectors kept after being reduced where they
//! were read (saltdb holds a selector's kept samples for the whole evaluation), its cached step
//! values and the points of its result. Prometheus' figure follows its evaluator's buffers, so
//! the two differ. A query measured with `stats` keeps its selectors' samples unreduced, so
//! its peak is that of the unreduced evaluation.

use std::time::Duration;

use promql_parser::parser::Expr;

use super::error::Result;
use super::eval::Query;

/// How long each phase of a query took, as Prometheus names them.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Timings {
    /// Parsing and loading the selectors' samples from storage.
    pub preparation: Duration,
    /// Evaluating the expression at every step.
    pub inner_eval: Duration,
    /// Assembling and ordering the result.
    pub result_sort: Duration,
}

/// The samples a query read: in total, per outer step, and at the peak.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SampleStats {
    /// Samples read, summed over the steps (Prometheus' `totalQueryableSamples`).
    pub total_queryable: u64,
    /// `(step timestamp ms, samples read at that step)`, one per outer step.
    pub per_step: Vec<(i64, u64)>,
    /// Samples held at once at the peak (see the module documentation).
    pub peak: u64,
    /// Per downsampled tier read (its interval in ms, ascending), the points read from it; a
    /// point counts as one sample in the other figures.
    pub tiers: Vec<(i64, u64)>,
}

/// Timings and sample counts of one query.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct QueryStats {
    /// Phase timings.
    pub timings: Timings,
    /// Sample counts.
    pub samples: SampleStats,
}

/// The samples `e` reads at each of `steps`.
///
/// # Errors
/// A timeout, or the error of a subquery evaluated to count its windows.
pub(crate) fn per_step(q: &Query<'_>, e: &Expr, steps: &[i64]) -> Result<Vec<(i64, u64)>> {
    let mut counts = vec![0u64; steps.len()];
    walk(q, e, steps, &mut counts)?;
    Ok(steps.iter().copied().zip(counts).collect())
}

fn walk(q: &Query<'_>, e: &Expr, steps: &[i64], counts: &mut [u64]) -> Result<()> {
    match e {
        Expr::VectorSelector(vs) if q.is_stepped(vs) => each_step(q, steps, counts, |t| Ok(stepped_at(q, vs, t))),
        Expr::VectorSelector(vs) => each_step(q, steps, counts, |t| Ok(q.select_instant(vs, t).len())),
        Expr::MatrixSelector(ms) => match q.tier_count(&ms.vs).filter(|c| c.per_step.len() == steps.len()) {
            // Read from a downsampled tier: each step read the points of its window.
            Some(c) => {
                for (n, read) in counts.iter_mut().zip(&c.per_step) {
                    *n = n.saturating_add(*read);
                }
                Ok(())
            }
            None => each_step(q, steps, counts, |t| {
                let mut n = 0;
                q.for_each_window(ms, t, |_, w, h| n += w.len() + h.len());
                Ok(n)
            }),
        },
        Expr::Subquery(sq) => {
            each_step(q, steps, counts, |t| Ok(q.eval_subquery(sq, t)?.0.iter().map(|w| w.samples.len()).sum()))
        }
        Expr::Paren(p) => walk(q, &p.expr, steps, counts),
        Expr::Unary(u) => walk(q, &u.expr, steps, counts),
        Expr::Binary(b) => {
            walk(q, &b.lhs, steps, counts)?;
            walk(q, &b.rhs, steps, counts)
        }
        Expr::Aggregate(a) => {
            walk(q, &a.expr, steps, counts)?;
            a.param.as_ref().map_or(Ok(()), |p| walk(q, p, steps, counts))
        }
        Expr::Call(c) => c.args.args.iter().try_for_each(|a| walk(q, a, steps, counts)),
        Expr::NumberLiteral(_) | Expr::StringLiteral(_) | Expr::Extension(_) => Ok(()),
    }
}

/// The series of a selector reduced to its values at the outer steps (see
/// `Query::is_stepped`) that have one at outer step `t`: each value is stamped with its step's
/// time, so this is what [`Query::select_instant`] finds on the unreduced samples. A series
/// holding histograms is never reduced and is looked at as read.
fn stepped_at(q: &Query<'_>, vs: &promql_parser::parser::VectorSelector, t: i64) -> usize {
    q.series_of(vs)
        .iter()
        .filter(|s| {
            if s.histograms.is_empty() {
                s.samples.binary_search_by_key(&t, |p| p.timestamp_ms).is_ok()
            } else {
                let te = q.at_ms(&vs.at).unwrap_or(t).saturating_sub(super::eval::offset_ms(&vs.offset));
                super::points::latest(&s.samples, &s.histograms, te, q.lookback_ms()).is_some()
            }
        })
        .count()
}

fn each_step(q: &Query<'_>, steps: &[i64], counts: &mut [u64], mut at: impl FnMut(i64) -> Result<usize>) -> Result<()> {
    for (&t, c) in steps.iter().zip(counts.iter_mut()) {
        q.check_deadline()?;
        *c = c.saturating_add(u64::try_from(at(t)?).unwrap_or(u64::MAX));
    }
    Ok(())
}
