//! PromQL functions and operators, computed from evaluated values: the evaluator (`eval/`)
//! evaluates the arguments and calls them with values and a [`Context`] (annotations, limits,
//! the query's time range); nothing here sees the evaluator or evaluates an expression.
//!
//! One family per file: [`rollup`] (range-vector functions, over the windows the evaluator
//! gathers), [`transform`] (instant-vector and scalar functions), [`aggr`] (aggregation
//! operators), [`binary_op`] (operators), [`histogram`] (classic-bucket histogram functions),
//! [`info`] (the info-series join), [`start_ts`] (start timestamps); the `native*` files hold
//! the native-histogram side of each family. [`lookup`] is the registry of functions by name.

pub(crate) mod aggr;
pub(crate) mod args;
pub(crate) mod binary_op;
pub(crate) mod context;
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
pub(crate) mod tier_rollup;
pub(crate) mod transform;

pub(crate) use args::Args;
pub(crate) use context::Context;

/// A function, by how the evaluator gathers its arguments.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Function {
    /// A range-vector function: its windows are gathered per series (see [`rollup`]).
    Rollup(rollup::Rollup),
    /// An instant-vector or scalar function of its evaluated arguments.
    Transform(transform::Transform),
    /// A histogram function of its evaluated arguments.
    Histogram(histogram::HistogramFn),
    /// `timestamp(v)`: the samples' own timestamps when `v` is a selector.
    Timestamp,
    /// `start_timestamp(v)`: the start timestamps of a selector's samples (see [`start_ts`]).
    StartTimestamp,
    /// `absent(v)`: labelled from `v`'s matchers.
    Absent,
    /// `info(v, ...)`: joined with the info series loaded for the call (see [`info`]).
    Info,
}

/// The registry: function name -> function.
pub(crate) fn lookup(name: &str) -> Option<Function> {
    if let Some(f) = rollup::lookup(name) {
        return Some(Function::Rollup(f));
    }
    match name {
        "timestamp" => return Some(Function::Timestamp),
        "start_timestamp" => return Some(Function::StartTimestamp),
        "absent" => return Some(Function::Absent),
        "info" => return Some(Function::Info),
        _ => {}
    }
    if let Some(f) = transform::lookup(name) {
        return Some(Function::Transform(f));
    }
    histogram::lookup(name).map(Function::Histogram)
}
