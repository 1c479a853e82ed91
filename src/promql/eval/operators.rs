//! Aggregations and binary operators as the evaluator runs them: it evaluates the operands
//! (an aggregation's input series by series over every step of a range query part, where it
//! can, see [`Query::aggregate_over_series`]) and hands the values to `functions/aggr.rs` and
//! `functions/binary_op.rs`, which compute.

use promql_parser::parser::{AggregateExpr, BinaryExpr};

use super::grid::PerSeries;
use super::Query;
use crate::promql::error::{EvalError, Result};
use crate::promql::functions::aggr::{Aggregation, SeriesFold};
use crate::promql::functions::binary_op::{self, Op};
use crate::promql::step::StepValues;
use crate::promql::trim;
use crate::promql::value::{Elem, StepValue};

/// Whether aggregation `a` folds its input series by series (see
/// [`Query::aggregate_over_series`]) when the input has the shape.
pub(super) fn streams_input(a: &AggregateExpr) -> bool {
    Aggregation::of(a.op.to_string(), &a.modifier).is_ok_and(|g| g.streams(a.param.is_some()))
}

impl Query<'_> {
    /// Evaluates an aggregation at `t`.
    pub(super) fn eval_aggregate(&self, a: &AggregateExpr, t: i64) -> Result<StepValue> {
        let aggregation = Aggregation::of(a.op.to_string(), &a.modifier)?;
        if aggregation.is_count_values() {
            let p = a.param.as_ref().ok_or_else(|| EvalError::bad("count_values needs a label name"))?;
            let label = self.eval_string(p, t)?;
            let input = self.eval_vector(&a.expr, t)?;
            return aggregation.count_values(input, &label);
        }
        let param = match &a.param {
            Some(p) => Some(self.eval_scalar(p, t)?),
            None => None,
        };
        if let Some(v) = self.aggregate_over_series(&aggregation, a, t)? {
            return Ok(StepValue::Vector(v));
        }
        let input = self.eval_vector(&a.expr, t)?;
        let node = a as *const AggregateExpr as usize;
        self.with_groups(node, |groups| aggregation.apply(self, input, param, groups))
    }

    /// `op by/without (...) (e)` at outer step `t` of a range query, for an expression `e` with
    /// one value per series per step ([`PerSeries`]: a selector, or a rollup such
    /// as `rate(x[5m])`) and an aggregation that [streams](Aggregation::streams): computed for
    /// all of the query part's steps at once, each series of `e` fed to a [`SeriesFold`] in
    /// the order of `e`'s vector (so the values are, bit for bit, those of the per-step path).
    /// `None` when the shape does not apply or the step was already taken; the caller then
    /// evaluates the step alone.
    fn aggregate_over_series(&self, aggregation: &Aggregation, a: &AggregateExpr, t: i64) -> Result<Option<Vec<Elem>>> {
        if !aggregation.streams(a.param.is_some()) {
            return Ok(None);
        }
        let Some(input) = PerSeries::of(&a.expr) else { return Ok(None) };
        if self.has_histograms(input.selector()) {
            return Ok(None);
        }
        let Some((k, grid)) = self.part_step(t) else { return Ok(None) };
        let node = (a as *const AggregateExpr as usize, usize::MAX);
        let fill = || -> Result<StepValues> {
            let Some(mut fold) = SeriesFold::new(self, aggregation, a.param.is_some(), grid.2) else {
                return Ok(Vec::new());
            };
            for series in self.series_of(input.selector()) {
                self.check_deadline()?;
                let Some(mut column) = fold.series(&series.labels)? else { continue };
                input.each_step(self, &series.samples, grid, |i, v| column.add(i, v));
            }
            Ok(fold.finish(input.drops_name()))
        };
        self.rollup_cache(node, fill, k)
    }

    /// Evaluates a binary expression at `t`.
    pub(super) fn eval_binary(&self, b: &BinaryExpr, t: i64) -> Result<StepValue> {
        let (op, written) = match trim::of(b) {
            Some(tr) => (Op::of_trim(tr), trim::modifier(b)),
            None => {
                let name = b.op.to_string();
                (Op::from_name(&name).ok_or_else(|| EvalError::bad(format!("unknown operator {name}")))?, None)
            }
        };
        let lhs = self.eval(&b.lhs, t)?;
        let rhs = self.eval(&b.rhs, t)?;
        let m = if op.is_trim() { written.as_ref() } else { b.modifier.as_ref() };
        binary_op::operate(self, op, m, lhs, rhs)
    }
}
