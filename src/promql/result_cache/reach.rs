//! How far past its evaluation time a step of a query reads: what decides whether a step lies
//! entirely in the settled past. Pure, over the parsed expression (the evaluator's `plan` reads
//! the same modifiers to load the samples).
//!
//! Only the reach *ahead* matters: everything before the boundary is covered by the
//! storage generation, however far back a range, lookback or subquery reads.

use promql_parser::parser::{Expr, VectorSelector};

use crate::promql::eval::offset_ms;
use crate::promql::extended::{self, Modifier};

/// Milliseconds past its evaluation time that a step of `expr` may read (a negative `offset`,
/// a `smoothed` selector's interpolation towards the next sample, up to `lookback_ms`), or
/// `None` when a step's answer depends on more than its time and the data (`@`, pinned to a
/// time or to the query's start or end; an extension node the evaluator adds).
pub fn ahead_ms(expr: &Expr, lookback_ms: i64) -> Option<i64> {
    match expr {
        Expr::NumberLiteral(_) | Expr::StringLiteral(_) => Some(0),
        Expr::VectorSelector(vs) => selector(vs, lookback_ms),
        Expr::MatrixSelector(ms) => selector(&ms.vs, lookback_ms),
        Expr::Subquery(sq) => {
            if sq.at.is_some() {
                return None;
            }
            Some(forward(offset_ms(&sq.offset)).saturating_add(ahead_ms(&sq.expr, lookback_ms)?))
        }
        Expr::Aggregate(a) => {
            let param = match &a.param {
                Some(p) => ahead_ms(p, lookback_ms)?,
                None => 0,
            };
            Some(ahead_ms(&a.expr, lookback_ms)?.max(param))
        }
        Expr::Unary(u) => ahead_ms(&u.expr, lookback_ms),
        Expr::Paren(p) => ahead_ms(&p.expr, lookback_ms),
        Expr::Binary(b) => Some(ahead_ms(&b.lhs, lookback_ms)?.max(ahead_ms(&b.rhs, lookback_ms)?)),
        Expr::Call(c) => c.args.args.iter().try_fold(0i64, |most, a| Some(most.max(ahead_ms(a, lookback_ms)?))),
        Expr::Extension(_) => None,
    }
}

fn selector(vs: &VectorSelector, lookback_ms: i64) -> Option<i64> {
    if vs.at.is_some() {
        return None;
    }
    let interpolated = if extended::of(vs) == Some(Modifier::Smoothed) { lookback_ms } else { 0 };
    Some(forward(offset_ms(&vs.offset)).saturating_add(interpolated))
}

/// The part of an offset that reads ahead: a negative one.
fn forward(offset_ms: i64) -> i64 {
    offset_ms.saturating_neg().max(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ahead(q: &str) -> Option<i64> {
        ahead_ms(&crate::promql::parse(q).unwrap(), 300_000)
    }

    #[test]
    fn reads_ahead_only_with_negative_offsets_and_smoothing() {
        assert_eq!(ahead("sum(rate(x[5m]))"), Some(0));
        assert_eq!(ahead("x offset 1h"), Some(0));
        assert_eq!(ahead("x offset -1h"), Some(3_600_000));
        assert_eq!(ahead("max_over_time(x[1h] offset -10m) + y offset -1h"), Some(3_600_000));
        assert_eq!(ahead("max_over_time(rate(x[5m] offset -1m)[1h:5m] offset -10m)"), Some(660_000));
        assert_eq!(ahead("quantile(scalar(x offset -2m), y)"), Some(120_000));
        assert_eq!(ahead("x smoothed"), Some(300_000));
        assert_eq!(ahead("rate(x[5m] smoothed)"), Some(300_000));
        assert_eq!(ahead("rate(x[5m] anchored)"), Some(0));
        assert_eq!(ahead("label_replace(x, \"a\", \"$1\", \"b\", \"(.*)\")"), Some(0));
        assert_eq!(ahead("1 + 2"), Some(0));
    }

    #[test]
    fn pinned_times_are_not_cached() {
        for q in ["x @ 100", "x @ start()", "rate(x[5m] @ end())", "max_over_time(x[1h:] @ 100)", "1 + sum(x @ 5)"] {
            assert_eq!(ahead(q), None, "{q}");
        }
    }
}
