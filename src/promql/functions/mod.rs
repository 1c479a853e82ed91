//! Function families, one registry per file: [`rollup`] (range-vector functions),
//! [`transform`] (instant-vector and scalar functions), [`aggr`] (aggregation operators),
//! [`binary_op`] (operators), [`histogram`] (classic-bucket histogram functions), [`info`]
//! (the info-series join).

pub(crate) mod aggr;
pub(crate) mod binary_op;
pub(crate) mod histogram;
pub(crate) mod info;
pub(crate) mod native;
pub(crate) mod native_aggr;
pub(crate) mod native_binop;
pub(crate) mod native_extended;
pub(crate) mod native_rollup;
pub(crate) mod rollup;
pub(crate) mod start_ts;
pub(crate) mod stats;
pub(crate) mod transform;

use promql_parser::parser::Call;

use super::error::{EvalError, Result};
use super::eval::Query;
use super::value::StepValue;

/// Evaluates a function call at `t`.
pub(crate) fn call(q: &Query, c: &Call, t: i64) -> Result<StepValue> {
    let name = c.func.name;
    let args = c.args.args.as_slice();
    // An anchored or smoothed range selector goes only to the functions that handle one.
    for a in args {
        if let Some(m) = rollup::matrix_selector(a).and_then(|ms| super::extended::of(&ms.vs)) {
            if let Some(e) = m.refuses(name) {
                return Err(EvalError::bad(e));
            }
        }
    }
    if let Some(f) = rollup::lookup(name) {
        return rollup::eval(q, f, args, t);
    }
    if let Some(v) = transform::call(q, name, args, t)? {
        return Ok(v);
    }
    if let Some(v) = histogram::call(q, name, args, t)? {
        return Ok(v);
    }
    Err(EvalError::bad(format!("function {name:?} is not supported")))
}
