//! Function calls as the evaluator runs them: it evaluates the arguments (gathering a range
//! function's windows series by series from the loaded samples, or taking the series-major
//! path of `grid.rs`) and hands the values to `functions/`, which compute.

use std::collections::HashMap;

use promql_parser::parser::{Call, Expr, MatrixSelector};

use super::grid::{self, PerSeries};
use super::{shape, Query};
use crate::labels::Labels;
use crate::promql::error::{EvalError, Result};
use crate::promql::extended::{self, Modifier};
use crate::promql::functions::histogram::{self, HistogramFn};
use crate::promql::functions::info::{self, InfoSelection};
use crate::promql::functions::rollup::{self, Rollup, Span};
use crate::promql::functions::{self, start_ts, transform, Args, Function};
use crate::promql::points;
use crate::promql::step;
use crate::promql::value::{Elem, StepValue};
use crate::storage::StartChange;

/// What an `info` call with arguments `args` selects, from its second argument.
///
/// # Errors
/// A second argument that is not a label selector, or a matcher that does not compile.
pub(super) fn info_selection(args: &[Box<Expr>]) -> Result<InfoSelection> {
    let selector = match args.get(1).map(|a| &**a) {
        None => None,
        Some(Expr::VectorSelector(vs)) => Some(vs),
        Some(_) => return Err(EvalError::bad("the second argument of info() must be a label selector")),
    };
    InfoSelection::of(selector)
}

impl Query<'_> {
    /// Evaluates a function call at `t`.
    pub(super) fn eval_call(&self, c: &Call, t: i64) -> Result<StepValue> {
        let name = c.func.name;
        let args = c.args.args.as_slice();
        // An anchored or smoothed range selector goes only to the functions that handle one.
        for a in args {
            if let Some(m) = shape::matrix_selector(a).and_then(|ms| extended::of(&ms.vs)) {
                if let Some(e) = m.refuses(name) {
                    return Err(EvalError::bad(e));
                }
            }
        }
        let Some(f) = functions::lookup(name) else {
            return Err(EvalError::bad(format!("function {name:?} is not supported")));
        };
        match f {
            Function::Rollup(f) => self.eval_rollup(f, c, t),
            Function::Timestamp => self.eval_timestamp(args, t),
            Function::StartTimestamp => self.eval_start_timestamp(args, t),
            Function::Absent => {
                let arg = args.first().ok_or_else(|| EvalError::bad("missing argument 1"))?;
                let v = self.eval_vector(arg, t)?;
                Ok(StepValue::Vector(transform::absent(!v.is_empty(), shape::absent_selector(arg))))
            }
            Function::Info => Ok(StepValue::Vector(self.eval_info(args, t)?)),
            Function::Histogram(HistogramFn::Quantiles) => {
                // The quantiles are evaluated one at a time, as they are taken.
                let v = self.eval_vector(args.first().ok_or_else(|| EvalError::bad("missing argument 1"))?, t)?;
                let label = match args.get(1) {
                    Some(a) => self.eval_string(a, t)?,
                    None => return Err(EvalError::bad("histogram_quantiles needs a label name")),
                };
                let phis = args.iter().skip(2).map(|a| self.eval_scalar(a, t));
                histogram::labelled_quantiles(self, v, &label, phis)
            }
            Function::Histogram(f) => histogram::call(self, f, self.eval_args(args, t)?),
            Function::Transform(f) => transform::call(self, f, self.eval_args(args, t)?, t),
        }
    }

    /// The values of `args` at `t`, in order.
    fn eval_args(&self, args: &[Box<Expr>], t: i64) -> Result<Args> {
        let values = args.iter().map(|a| self.eval(a, t)).collect::<Result<Vec<_>>>()?;
        Ok(Args::new(values))
    }

    /// Evaluates rollup `f` over `args` at `t`.
    fn eval_rollup(&self, f: Rollup, c: &Call, t: i64) -> Result<StepValue> {
        let args = c.args.args.as_slice();
        let matrix_pos = if f == Rollup::Quantile { 1 } else { 0 };
        let arg = args.get(matrix_pos).ok_or_else(|| EvalError::bad("missing range vector argument"))?;
        let mut params = Vec::new();
        for (i, a) in args.iter().enumerate() {
            if i != matrix_pos {
                params.push(self.eval_scalar(a, t)?);
            }
        }
        if let Some(ms) = shape::matrix_selector(arg).filter(|_| start_ts::uses_starts(f)) {
            if let Some(starts) = self.starts_of(&ms.vs) {
                return Ok(StepValue::Vector(self.rollup_with_starts(f, ms, starts, t)));
            }
        }
        if let Some((ms, m)) = shape::matrix_selector(arg).and_then(|ms| Some((ms, extended::of(&ms.vs)?))) {
            return Ok(StepValue::Vector(self.rollup_extended(f, ms, m, t)));
        }
        if let Some(ms) = shape::matrix_selector(arg).filter(|_| f != Rollup::AbsentOverTime) {
            rollup::check_params(self, f, &params)?;
            // As the plan saw the call: no parameters, or a constant one.
            if let Some((_, _, param)) = shape::stepped_call(c) {
                if let Some(v) = grid::step_vector(self, PerSeries::Rollup(f, ms, param), t)? {
                    return Ok(StepValue::Vector(v));
                }
            }
            let (start, end) = self.range_bounds(ms, t);
            let span = Span::new((start, end, t), &params);
            // Windows straight from a selector never carry a pending name drop.
            let drop = rollup::drops_name(f);
            let mut out = Vec::new();
            self.for_each_window(ms, t, |labels, s, hs| {
                if let Some(p) = rollup::window_point(self, f, labels, (s, hs), &span) {
                    out.push(Elem::of_point(labels.clone(), p, drop));
                }
            });
            return Ok(StepValue::Vector(out));
        }
        let parameterless = params.is_empty() && rollup::drops_name(f) && rollup::parameterless_fn(f);
        if let (Some(sq), true) = (shape::subquery(arg), parameterless) {
            if let Some(v) = grid::subquery_step_vector(self, f, sq, t)? {
                return Ok(StepValue::Vector(v));
            }
        }
        if let Some(ms) = shape::absent_over_call(c) {
            // Absent where `present_over_time` has no series: its step values, read as the
            // plan read them (from tier points where they answer it, see `shape::absent_over_range`).
            if let Some(present) = grid::step_vector(self, PerSeries::Rollup(Rollup::Present, ms, None), t)? {
                return Ok(StepValue::Vector(transform::absent(!present.is_empty(), Some(&ms.vs))));
            }
        }
        let (windows, start, end) = self.eval_range_arg(arg, t)?;
        if f == Rollup::AbsentOverTime {
            return Ok(StepValue::Vector(transform::absent(!windows.is_empty(), shape::absent_selector(arg))));
        }
        rollup::check_params(self, f, &params)?;
        Ok(StepValue::Vector(rollup::over_windows(self, f, windows, &Span::new((start, end, t), &params))))
    }

    /// Rollup `f` (one that [`Modifier::refuses`] not) over the anchored or smoothed range
    /// selector `ms` at `t` (see `extended.rs`).
    fn rollup_extended(&self, f: Rollup, ms: &MatrixSelector, m: Modifier, t: i64) -> Vec<Elem> {
        let (start, end) = self.range_bounds(ms, t);
        let (before, after) = self.extended_reach(&ms.vs);
        let smoothed = m == Modifier::Smoothed;
        let mut out = Vec::new();
        for s in self.series_of(&ms.vs) {
            let (lo, hi) = (start.saturating_sub(before), end.saturating_add(after));
            let around = step::between(&s.samples, lo, hi);
            let hists = points::live_histograms_between(&s.histograms, lo, hi);
            if let Some(p) = rollup::extended_point(self, f, &s.labels, (around, &hists), (start, end, t), smoothed) {
                out.push(Elem::of_point(s.labels.clone(), p, true));
            }
        }
        out
    }

    /// Rollup `f` ([`start_ts::uses_starts`]) over range selector `ms` at `t`, for a selector
    /// some of whose series have start timestamps (`starts`, by labels).
    fn rollup_with_starts(
        &self,
        f: Rollup,
        ms: &MatrixSelector,
        starts: &HashMap<Labels, Vec<StartChange>>,
        t: i64,
    ) -> Vec<Elem> {
        let (start, end) = self.range_bounds(ms, t);
        let mut out = Vec::new();
        for s in self.series_of(&ms.vs) {
            let floats = step::between(&s.samples, start, end);
            let hists = points::live_histograms_between(&s.histograms, start, end);
            let changes = starts.get(&s.labels).map(Vec::as_slice);
            if let Some(p) = start_ts::rollup_point(self, f, &s.labels, (floats, &hists), changes, (start, end, t)) {
                out.push(Elem::of_point(s.labels.clone(), p, true));
            }
        }
        out
    }

    /// `timestamp(v)`: the sample timestamps for a plain selector, otherwise the evaluation time.
    fn eval_timestamp(&self, args: &[Box<Expr>], t: i64) -> Result<StepValue> {
        let arg = args.first().map(|a| a.as_ref()).ok_or_else(|| EvalError::bad("missing argument"))?;
        if let Expr::VectorSelector(vs) = shape::unparen(arg) {
            return Ok(StepValue::Vector(transform::sample_timestamps(self.select_instant(vs, t))));
        }
        let v = self.eval_vector(shape::unparen(arg), t)?;
        Ok(StepValue::Vector(transform::step_timestamps(v, t)))
    }

    /// `start_timestamp(v)`: for an instant selector, the start timestamps of its samples at `t`;
    /// for any other expression, evaluated for its errors and annotations, nothing.
    fn eval_start_timestamp(&self, args: &[Box<Expr>], t: i64) -> Result<StepValue> {
        let arg = args.first().map(|a| shape::unparen(a)).ok_or_else(|| EvalError::bad("missing argument"))?;
        let Expr::VectorSelector(vs) = arg else {
            self.eval_vector(arg, t)?;
            return Ok(StepValue::Vector(Vec::new()));
        };
        Ok(StepValue::Vector(start_ts::start_timestamps(self.select_instant(vs, t), self.starts_of(vs))))
    }

    /// `info(args...)` at `t`: the first argument's value joined with the info series loaded
    /// for the call.
    fn eval_info(&self, args: &[Box<Expr>], t: i64) -> Result<Vec<Elem>> {
        let first = args.first().ok_or_else(|| EvalError::bad("info() needs an argument"))?;
        let base = self.eval_vector(first, t)?;
        let sel = info_selection(args)?;
        let te = match shape::info_timing(first) {
            Some(timing) => self.at_ms(timing.at).unwrap_or(t).saturating_sub(timing.offset_ms),
            None => t,
        };
        let lo = te.saturating_sub(self.lookback_ms());
        let loaded = shape::info_node(args).map(|k| self.series_by_key(k)).unwrap_or(&[]);
        info::join(&sel, base, loaded, (lo, te))
    }
}
