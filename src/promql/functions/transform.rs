//! Instant-vector and scalar functions: math, clamping, label manipulation, sorting,
//! date/time, `absent`, `scalar`, `vector`, `timestamp`. Registry: [`call`].

use std::cmp::Ordering;

use chrono::{DateTime, Datelike, Timelike, Utc};
use promql_parser::parser::Expr;

use super::stats::{go_max, go_min};
use crate::labels::{Label, Labels, METRIC_NAME};
use crate::promql::error::{EvalError, Result};
use crate::promql::eval::Query;
use crate::promql::value::{with_label, Elem, StepValue};

/// Evaluates the instant function `name` at `t`; `None` when `name` is not in this family.
pub(crate) fn call(q: &Query, name: &str, args: &[Box<Expr>], t: i64) -> Result<Option<StepValue>> {
    if let Some(f) = math_fn(name) {
        let v = vector_arg(q, args, 0, t)?;
        return Ok(Some(map_values(v, f)));
    }
    let secs = t as f64 / 1e3;
    let out = match name {
        "time" => StepValue::Scalar(secs),
        "pi" => StepValue::Scalar(std::f64::consts::PI),
        "start" => StepValue::Scalar(q.start_ms() as f64 / 1e3),
        "end" => StepValue::Scalar(q.end_ms() as f64 / 1e3),
        "range" => StepValue::Scalar((q.end_ms() - q.start_ms()) as f64 / 1e3),
        "step" => StepValue::Scalar(q.interval_ms() as f64 / 1e3),
        "vector" => StepValue::Vector(vec![Elem::new(Labels::empty(), scalar_arg(q, args, 0, t)?, false)]),
        "scalar" => {
            // Histograms do not count (Prometheus' `funcScalar`).
            let v = floats_only(vector_arg(q, args, 0, t)?);
            StepValue::Scalar(match v.as_slice() {
                [one] => one.value,
                _ => f64::NAN,
            })
        }
        "min_of" => StepValue::Scalar(go_min(scalar_arg(q, args, 0, t)?, scalar_arg(q, args, 1, t)?)),
        "max_of" => StepValue::Scalar(go_max(scalar_arg(q, args, 0, t)?, scalar_arg(q, args, 1, t)?)),
        "round" => round(q, args, t)?,
        "clamp" => clamp(q, args, t)?,
        "clamp_min" => {
            let (v, m) = (vector_arg(q, args, 0, t)?, scalar_arg(q, args, 1, t)?);
            map_values(v, move |x| go_max(m, x))
        }
        "clamp_max" => {
            let (v, m) = (vector_arg(q, args, 0, t)?, scalar_arg(q, args, 1, t)?);
            map_values(v, move |x| go_min(m, x))
        }
        "timestamp" => timestamp(q, args, t)?,
        "start_timestamp" => super::start_ts::start_timestamp(q, args, t)?,
        "absent" => {
            let v = vector_arg(q, args, 0, t)?;
            let arg = args.first().map(|a| a.as_ref());
            StepValue::Vector(match (v.is_empty(), arg) {
                (true, Some(a)) => vec![Elem::new(absent_labels(a), 1.0, false)],
                _ => Vec::new(),
            })
        }
        "label_replace" => label_replace(q, args, t)?,
        "label_join" => label_join(q, args, t)?,
        "sort" | "sort_desc" => sort_by_value(floats_only(vector_arg(q, args, 0, t)?), name == "sort_desc"),
        "sort_by_label" | "sort_by_label_desc" => sort_by_label(q, args, t, name == "sort_by_label_desc")?,
        "minute" | "hour" | "day_of_month" | "day_of_week" | "day_of_year" | "days_in_month" | "month" | "year" => {
            date_fn(q, name, args, t)?
        }
        "info" => StepValue::Vector(super::info::eval(q, args, t)?),
        _ => return Ok(None),
    };
    Ok(Some(out))
}

fn math_fn(name: &str) -> Option<fn(f64) -> f64> {
    Some(match name {
        "abs" => f64::abs,
        "ceil" => f64::ceil,
        "floor" => f64::floor,
        "exp" => f64::exp,
        "sqrt" => f64::sqrt,
        "ln" => f64::ln,
        "log2" => f64::log2,
        "log10" => f64::log10,
        "sin" => f64::sin,
        "cos" => f64::cos,
        "tan" => f64::tan,
        "asin" => f64::asin,
        "acos" => f64::acos,
        "atan" => f64::atan,
        "sinh" => f64::sinh,
        "cosh" => f64::cosh,
        "tanh" => f64::tanh,
        "asinh" => f64::asinh,
        "acosh" => f64::acosh,
        "atanh" => f64::atanh,
        "deg" => |v| v * 180.0 / std::f64::consts::PI,
        "rad" => |v| v * std::f64::consts::PI / 180.0,
        "sgn" => |v: f64| {
            if v < 0.0 {
                -1.0
            } else if v > 0.0 {
                1.0
            } else {
                v
            }
        },
        _ => return None,
    })
}

pub(crate) fn vector_arg(q: &Query, args: &[Box<Expr>], i: usize, t: i64) -> Result<Vec<Elem>> {
    let a = args.get(i).ok_or_else(|| EvalError::bad(format!("missing argument {}", i + 1)))?;
    q.eval_vector(a, t)
}

pub(crate) fn scalar_arg(q: &Query, args: &[Box<Expr>], i: usize, t: i64) -> Result<f64> {
    let a = args.get(i).ok_or_else(|| EvalError::bad(format!("missing argument {}", i + 1)))?;
    q.eval_scalar(a, t)
}

fn string_arg(q: &Query, args: &[Box<Expr>], i: usize, t: i64) -> Result<String> {
    let a = args.get(i).ok_or_else(|| EvalError::bad(format!("missing argument {}", i + 1)))?;
    q.eval_string(a, t)
}

/// Applies `f` to every float value; the result loses its metric name. Histograms are
/// dropped, as Prometheus' `simpleFloatFunc` drops them.
fn map_values(v: Vec<Elem>, f: impl Fn(f64) -> f64) -> StepValue {
    StepValue::Vector(v.into_iter().filter(Elem::is_float).map(|e| Elem::new(e.labels, f(e.value), true)).collect())
}

/// The float elements of `v` (Prometheus' `filterFloats`).
fn floats_only(mut v: Vec<Elem>) -> Vec<Elem> {
    if v.iter().any(|e| !e.is_float()) {
        v.retain(Elem::is_float);
    }
    v
}

fn round(q: &Query, args: &[Box<Expr>], t: i64) -> Result<StepValue> {
    let v = vector_arg(q, args, 0, t)?;
    let to = if args.len() > 1 { scalar_arg(q, args, 1, t)? } else { 1.0 };
    let inv = 1.0 / to;
    Ok(map_values(v, move |x| (x * inv + 0.5).floor() / inv))
}

fn clamp(q: &Query, args: &[Box<Expr>], t: i64) -> Result<StepValue> {
    let v = vector_arg(q, args, 0, t)?;
    let (lo, hi) = (scalar_arg(q, args, 1, t)?, scalar_arg(q, args, 2, t)?);
    if hi < lo {
        return Ok(StepValue::Vector(Vec::new()));
    }
    Ok(map_values(v, move |x| go_max(lo, go_min(hi, x))))
}

/// `timestamp(v)`: the sample timestamps for a plain selector, otherwise the evaluation time.
fn timestamp(q: &Query, args: &[Box<Expr>], t: i64) -> Result<StepValue> {
    let mut arg = args.first().map(|a| a.as_ref()).ok_or_else(|| EvalError::bad("missing argument"))?;
    while let Expr::Paren(p) = arg {
        arg = &p.expr;
    }
    if let Expr::VectorSelector(vs) = arg {
        let out = q.select_instant(vs, t).into_iter().map(|(e, ts)| Elem::new(e.labels, ts as f64 / 1e3, true));
        return Ok(StepValue::Vector(out.collect()));
    }
    let v = q.eval_vector(arg, t)?;
    Ok(StepValue::Vector(v.into_iter().map(|e| Elem::new(e.labels, t as f64 / 1e3, true)).collect()))
}

/// Labels `absent()` reports: the selector's equality matchers (a label matched twice or
/// by another operator is left out).
pub(crate) fn absent_labels(e: &Expr) -> Labels {
    let vs = match e {
        Expr::VectorSelector(vs) => vs,
        Expr::MatrixSelector(ms) => &ms.vs,
        _ => return Labels::empty(),
    };
    let mut out: Vec<Label> = Vec::new();
    let mut has: Vec<&str> = Vec::new();
    for m in &vs.matchers.matchers {
        if m.name == METRIC_NAME || crate::promql::extended::is_marker(m) {
            continue;
        }
        let is_eq = matches!(m.op, promql_parser::label::MatchOp::Equal);
        if is_eq && !has.contains(&m.name.as_str()) {
            out.retain(|l| l.name != m.name);
            out.push(Label::new(m.name.clone(), m.value.clone()));
            has.push(&m.name);
        } else {
            out.retain(|l| l.name != m.name);
        }
    }
    Labels::from_trusted(out)
}

fn check_label_name(func: &str, name: &str) -> Result<()> {
    if !crate::labels::is_valid_label_name(name) {
        return Err(EvalError::exec(format!("invalid destination label name in {func}(): {name}")));
    }
    Ok(())
}

fn unique(v: Vec<Elem>) -> Result<StepValue> {
    let mut seen = std::collections::HashSet::with_capacity(v.len());
    for e in &v {
        if !seen.insert(&e.labels) {
            return Err(EvalError::exec("vector cannot contain metrics with the same labelset"));
        }
    }
    Ok(StepValue::Vector(v))
}

fn label_replace(q: &Query, args: &[Box<Expr>], t: i64) -> Result<StepValue> {
    let v = vector_arg(q, args, 0, t)?;
    let dst = string_arg(q, args, 1, t)?;
    let repl = string_arg(q, args, 2, t)?;
    let src = string_arg(q, args, 3, t)?;
    let pattern = string_arg(q, args, 4, t)?;
    let re = regex::Regex::new(&format!("^(?s:{pattern})$"))
        .map_err(|e| EvalError::exec(format!("invalid regular expression in label_replace(): {pattern}: {e}")))?;
    check_label_name("label_replace", &dst)?;
    let mut out = Vec::with_capacity(v.len());
    for mut e in v {
        let value = e.labels.get(&src).unwrap_or("");
        if let Some(caps) = re.captures(value) {
            let mut res = String::new();
            caps.expand(&repl, &mut res);
            e.labels = with_label(&e.labels, &dst, &res);
            if dst == METRIC_NAME {
                e.drop_name = false;
            }
        }
        out.push(e);
    }
    unique(out)
}

fn label_join(q: &Query, args: &[Box<Expr>], t: i64) -> Result<StepValue> {
    let v = vector_arg(q, args, 0, t)?;
    let dst = string_arg(q, args, 1, t)?;
    let sep = string_arg(q, args, 2, t)?;
    let mut srcs = Vec::new();
    for i in 3..args.len() {
        srcs.push(string_arg(q, args, i, t)?);
    }
    check_label_name("label_join", &dst)?;
    let out = v
        .into_iter()
        .map(|mut e| {
            let joined: Vec<&str> = srcs.iter().map(|s| e.labels.get(s).unwrap_or("")).collect();
            let joined = joined.join(&sep);
            e.labels = with_label(&e.labels, &dst, &joined);
            if dst == METRIC_NAME {
                e.drop_name = false;
            }
            e
        })
        .collect();
    unique(out)
}

fn sort_by_value(mut v: Vec<Elem>, desc: bool) -> StepValue {
    v.sort_by(|a, b| match (a.value.is_nan(), b.value.is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        _ => {
            let o = a.value.partial_cmp(&b.value).unwrap_or(Ordering::Equal);
            if desc {
                o.reverse()
            } else {
                o
            }
        }
    });
    StepValue::Vector(v)
}

fn sort_by_label(q: &Query, args: &[Box<Expr>], t: i64, desc: bool) -> Result<StepValue> {
    let mut v = vector_arg(q, args, 0, t)?;
    let mut names = Vec::new();
    for i in 1..args.len() {
        names.push(string_arg(q, args, i, t)?);
    }
    v.sort_by(|a, b| {
        let mut o = Ordering::Equal;
        for n in &names {
            o = natural_cmp(a.labels.get(n).unwrap_or(""), b.labels.get(n).unwrap_or(""));
            if o != Ordering::Equal {
                break;
            }
        }
        if o == Ordering::Equal {
            o = a.labels.cmp(&b.labels);
        }
        if desc {
            o.reverse()
        } else {
            o
        }
    });
    Ok(StepValue::Vector(v))
}

/// Natural order: runs of digits compare as numbers, everything else byte-wise.
pub(crate) fn natural_cmp(a: &str, b: &str) -> Ordering {
    let (ca, cb) = (chunks(a), chunks(b));
    for (x, y) in ca.iter().zip(cb.iter()) {
        let xd = x.bytes().all(|c| c.is_ascii_digit());
        let yd = y.bytes().all(|c| c.is_ascii_digit());
        let o = if xd && yd {
            let (xt, yt) = (x.trim_start_matches('0'), y.trim_start_matches('0'));
            xt.len().cmp(&yt.len()).then_with(|| xt.cmp(yt))
        } else {
            x.cmp(y)
        };
        if o != Ordering::Equal {
            return o;
        }
    }
    ca.len().cmp(&cb.len())
}

fn chunks(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut prev: Option<bool> = None;
    for (i, c) in s.char_indices() {
        let d = c.is_ascii_digit();
        if prev.is_some_and(|p| p != d) {
            out.push(s.get(start..i).unwrap_or(""));
            start = i;
        }
        prev = Some(d);
    }
    if start < s.len() {
        out.push(s.get(start..).unwrap_or(""));
    }
    out
}

fn date_fn(q: &Query, name: &str, args: &[Box<Expr>], t: i64) -> Result<StepValue> {
    let v = if args.is_empty() {
        vec![Elem::new(Labels::empty(), t as f64 / 1e3, false)]
    } else {
        vector_arg(q, args, 0, t)?
    };
    let mut out = Vec::with_capacity(v.len());
    for e in floats_only(v) {
        if !e.value.is_finite() || e.value.abs() > 9.2e15 {
            continue;
        }
        let Some(d) = DateTime::<Utc>::from_timestamp(e.value as i64, 0) else {
            continue;
        };
        let x = match name {
            "minute" => d.minute(),
            "hour" => d.hour(),
            "day_of_month" => d.day(),
            "day_of_week" => d.weekday().num_days_from_sunday(),
            "day_of_year" => d.ordinal(),
            "days_in_month" => days_in_month(d.year(), d.month()),
            "month" => d.month(),
            _ => {
                out.push(Elem::new(e.labels, d.year() as f64, true));
                continue;
            }
        };
        out.push(Elem::new(e.labels, x as f64, true));
    }
    Ok(StepValue::Vector(out))
}

fn days_in_month(year: i32, month: u32) -> u32 {
    let (ny, nm) = if month == 12 { (year + 1, 1) } else { (year, month + 1) };
    let first_next = chrono::NaiveDate::from_ymd_opt(ny, nm, 1);
    let first = chrono::NaiveDate::from_ymd_opt(year, month, 1);
    match (first, first_next) {
        (Some(a), Some(b)) => (b - a).num_days() as u32,
        _ => 30,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn natural_order_compares_numbers() {
        assert_eq!(natural_cmp("4m5", "4m600"), Ordering::Less);
        assert_eq!(natural_cmp("1.2.3", "1.11.3"), Ordering::Less);
        assert_eq!(natural_cmp("a", "a"), Ordering::Equal);
    }

    #[test]
    fn february_leap_year() {
        assert_eq!(days_in_month(2024, 2), 29);
        assert_eq!(days_in_month(2023, 12), 31);
    }
}
