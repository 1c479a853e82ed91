//! The shapes of expressions the evaluator recognises before evaluating them: a range argument that
//! is a selector or a subquery, a rollup of a range selector without parameters or with a constant
//! one (which the series-major paths compute), the selectors whose series are read with their start
//! timestamps, and the selector that times an `info` call.

use std::collections::HashSet;

use promql_parser::parser::{AtModifier, Call, Expr, MatrixSelector, SubqueryExpr, VectorSelector};

use super::offset_ms;

use crate::promql::extended;
use crate::promql::functions::binary_op::{self, Op};
use crate::promql::functions::rollup::{self, Rollup};
use crate::promql::functions::start_ts::uses_starts;

/// `e` through any parentheses.
pub(super) fn unparen(e: &Expr) -> &Expr {
    match e {
        Expr::Paren(p) => unparen(&p.expr),
        other => other,
    }
}

/// The rollup, range selector and parameter of `e` when it is a call the series-major paths
/// compute with [`rollup::each_step`] (through any parentheses): a rollup that takes no
/// parameters, or `predict_linear` with a [`constant`] duration, on a plain range selector.
pub(super) fn stepped_rollup(e: &Expr) -> Option<(Rollup, &MatrixSelector, Option<f64>)> {
    match e {
        Expr::Paren(p) => stepped_rollup(&p.expr),
        Expr::Call(c) => stepped_call(c),
        _ => None,
    }
}

/// [`stepped_rollup`] of a call: what the plan saw of it, for its evaluation.
pub(super) fn stepped_call(c: &Call) -> Option<(Rollup, &MatrixSelector, Option<f64>)> {
    let f = rollup::lookup(c.func.name)?;
    let (arg, param) = match c.args.args.as_slice() {
        [arg] if rollup::parameterless_fn(f) => (arg, None),
        [arg, param] if f == Rollup::PredictLinear => (arg, Some(constant(param)?)),
        _ => return None,
    };
    matrix_selector(arg).filter(|ms| extended::of(&ms.vs).is_none()).map(|ms| (f, ms, param))
}

/// The value of `e` when it is a number whatever the evaluation time: a number literal, or
/// arithmetic of them (`4 * 3600`), computed as the evaluator computes it at each step.
pub(super) fn constant(e: &Expr) -> Option<f64> {
    match e {
        Expr::NumberLiteral(n) => Some(n.val),
        Expr::Paren(p) => constant(&p.expr),
        Expr::Unary(u) => constant(&u.expr).map(|v| -v),
        Expr::Binary(b) if b.modifier.is_none() => {
            let op = Op::from_name(&b.op.to_string())?;
            let arithmetic = matches!(op, Op::Add | Op::Sub | Op::Mul | Op::Div | Op::Mod | Op::Pow | Op::Atan2);
            arithmetic.then_some(())?;
            binary_op::apply(op, constant(&b.lhs)?, constant(&b.rhs)?)
        }
        _ => None,
    }
}

/// Functions whose instant-vector arguments are read only as values at the step being
/// evaluated, through `Query::eval` (unlike `timestamp`, which reads the samples' own
/// timestamps, or `info`, which reads its argument's timing): their arguments may be reduced to
/// per-step values where they are read (see `Query::plan`).
pub(super) fn reads_values_only(function: &str) -> bool {
    matches!(
        function,
        "abs"
            | "absent"
            | "acos"
            | "acosh"
            | "asin"
            | "asinh"
            | "atan"
            | "atanh"
            | "ceil"
            | "clamp"
            | "clamp_max"
            | "clamp_min"
            | "cos"
            | "cosh"
            | "deg"
            | "exp"
            | "floor"
            | "histogram_quantile"
            | "label_join"
            | "label_replace"
            | "ln"
            | "log10"
            | "log2"
            | "rad"
            | "round"
            | "scalar"
            | "sgn"
            | "sin"
            | "sinh"
            | "sort"
            | "sort_desc"
            | "sqrt"
            | "tan"
            | "tanh"
            | "vector"
    )
}

/// The subquery `e` is, through any parentheses.
pub(super) fn subquery(e: &Expr) -> Option<&SubqueryExpr> {
    match e {
        Expr::Subquery(sq) => Some(sq),
        Expr::Paren(p) => subquery(&p.expr),
        _ => None,
    }
}

/// The range selector `e` is, through any parentheses.
pub(super) fn matrix_selector(e: &Expr) -> Option<&MatrixSelector> {
    match e {
        Expr::MatrixSelector(ms) => Some(ms),
        Expr::Paren(p) => matrix_selector(&p.expr),
        _ => None,
    }
}

/// The range selector of `absent_over_time(x[r])` (through any parentheses around the call)
/// when `x[r]` is a plain range selector: whether such a call answers at a step is whether
/// `present_over_time(x[r])` has any series there, so it is read as that rollup (from tier
/// points too, where they answer it).
pub(super) fn absent_over_range(e: &Expr) -> Option<&MatrixSelector> {
    match e {
        Expr::Paren(p) => absent_over_range(&p.expr),
        Expr::Call(c) => absent_over_call(c),
        _ => None,
    }
}

/// [`absent_over_range`] of a call: what the plan saw of it, for its evaluation.
pub(super) fn absent_over_call(c: &Call) -> Option<&MatrixSelector> {
    if rollup::lookup(c.func.name) != Some(Rollup::AbsentOverTime) {
        return None;
    }
    match c.args.args.as_slice() {
        [arg] => matrix_selector(arg).filter(|ms| extended::of(&ms.vs).is_none()),
        _ => None,
    }
}

/// The selector `absent` and `absent_over_time` take their labels from: their argument, when
/// it is an instant or range selector (not in parentheses).
pub(super) fn absent_selector(e: &Expr) -> Option<&VectorSelector> {
    match e {
        Expr::VectorSelector(vs) => Some(vs),
        Expr::MatrixSelector(ms) => Some(&ms.vs),
        _ => None,
    }
}

/// When the info series of an `info` call are looked at, from the first selector of its first
/// argument (depth first, as Prometheus' `parser.Inspect` walks): that selector's `@`, else the
/// `@` of the innermost enclosing subquery that has one (the evaluation time if none has), less
/// the offsets of the selector and of the subqueries up to that one (Prometheus'
/// `infoSelectTimestampAndOffset`).
pub(super) struct InfoTiming<'a> {
    /// The first selector of the first argument.
    pub vs: &'a VectorSelector,
    /// The `@` that pins the info series' time, if any.
    pub at: &'a Option<AtModifier>,
    /// The offsets that shift it, in milliseconds.
    pub offset_ms: i64,
}

pub(super) fn info_timing(e: &Expr) -> Option<InfoTiming<'_>> {
    let mut subqueries = Vec::new();
    let vs = first_selector(e, &mut subqueries)?;
    let mut timing = InfoTiming { vs, at: &vs.at, offset_ms: offset_ms(&vs.offset) };
    for sq in subqueries.iter().rev() {
        if timing.at.is_some() {
            break;
        }
        timing.offset_ms = timing.offset_ms.saturating_add(offset_ms(&sq.offset));
        timing.at = &sq.at;
    }
    Some(timing)
}

/// The first selector under `e`, depth first; `subqueries` ends holding the subqueries that
/// enclose it, outermost first.
fn first_selector<'a>(e: &'a Expr, subqueries: &mut Vec<&'a SubqueryExpr>) -> Option<&'a VectorSelector> {
    match e {
        Expr::VectorSelector(vs) => Some(vs),
        Expr::MatrixSelector(ms) => Some(&ms.vs),
        Expr::Paren(p) => first_selector(&p.expr, subqueries),
        Expr::Unary(u) => first_selector(&u.expr, subqueries),
        Expr::Subquery(s) => {
            subqueries.push(s);
            let found = first_selector(&s.expr, subqueries);
            if found.is_none() {
                subqueries.pop();
            }
            found
        }
        Expr::Aggregate(a) => first_selector(&a.expr, subqueries)
            .or_else(|| a.param.as_deref().and_then(|p| first_selector(p, subqueries))),
        Expr::Binary(b) => first_selector(&b.lhs, subqueries).or_else(|| first_selector(&b.rhs, subqueries)),
        Expr::Call(c) => c.args.args.iter().find_map(|a| first_selector(a, subqueries)),
        _ => None,
    }
}

/// The key the info series of an `info` call with arguments `args` are loaded under: the
/// address of its first argument.
pub(super) fn info_node(args: &[Box<Expr>]) -> Option<usize> {
    args.first().map(|a| &**a as *const Expr as usize)
}

/// The node keys (a selector's address, as the preload keys them) of the selectors under `e`
/// whose series a function reads with their start timestamps: the range selector of `rate`,
/// `increase`, `irate` and `resets` (not `anchored` or `smoothed`), the instant selector of
/// `start_timestamp`, through parentheses.
pub(super) fn start_nodes(e: &Expr) -> HashSet<usize> {
    let mut out = HashSet::new();
    walk_starts(e, &mut out);
    out
}

fn walk_starts(e: &Expr, out: &mut HashSet<usize>) {
    match e {
        Expr::Aggregate(a) => {
            walk_starts(&a.expr, out);
            if let Some(p) = &a.param {
                walk_starts(p, out);
            }
        }
        Expr::Unary(u) => walk_starts(&u.expr, out),
        Expr::Binary(b) => {
            walk_starts(&b.lhs, out);
            walk_starts(&b.rhs, out);
        }
        Expr::Paren(p) => walk_starts(&p.expr, out),
        Expr::Subquery(sq) => walk_starts(&sq.expr, out),
        Expr::Call(c) => {
            let first = c.args.args.first().map(|a| unparen(a));
            match (c.func.name, first) {
                (name, Some(Expr::MatrixSelector(ms)))
                    if rollup::lookup(name).is_some_and(uses_starts) && extended::of(&ms.vs).is_none() =>
                {
                    out.insert(&ms.vs as *const VectorSelector as usize);
                }
                ("start_timestamp", Some(Expr::VectorSelector(vs))) => {
                    out.insert(vs as *const VectorSelector as usize);
                }
                _ => {}
            }
            c.args.args.iter().for_each(|a| walk_starts(a, out));
        }
        _ => {}
    }
}
