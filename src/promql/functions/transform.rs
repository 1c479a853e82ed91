//! Instant-vector and scalar functions: math, clamping, label manipulation, sorting,
//! date/time, `absent`, `scalar`, `vector`, `timestamp`, computed from their evaluated
//! arguments. Registry: [`lookup`] maps a function name to its [`Transform`]; [`call`] computes
//! it.

use std::cmp::Ordering;

use chrono::{DateTime, Datelike, Timelike, Utc};
use promql_parser::parser::VectorSelector;

use super::args::Args;
use super::context::Context;
use super::stats::{go_max, go_min};
use crate::labels::{Label, Labels, METRIC_NAME};
use crate::promql::error::{EvalError, Result};
use crate::promql::value::{with_label, Elem, StepValue};

/// An instant-vector or scalar function.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Transform {
    /// A function of each float value (`abs`, `ln`, ...).
    Math(fn(f64) -> f64),
    Time,
    Pi,
    Start,
    End,
    Range,
    Step,
    Vector,
    Scalar,
    MinOf,
    MaxOf,
    Round,
    Clamp,
    ClampMin,
    ClampMax,
    LabelReplace,
    LabelJoin,
    Sort {
        desc: bool,
    },
    SortByLabel {
        desc: bool,
    },
    Date(DatePart),
}

/// The part of a date a date function returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DatePart {
    Minute,
    Hour,
    DayOfMonth,
    DayOfWeek,
    DayOfYear,
    DaysInMonth,
    Month,
    Year,
}

/// The registry: function name -> instant function.
pub(crate) fn lookup(name: &str) -> Option<Transform> {
    use Transform::*;
    if let Some(f) = math_fn(name) {
        return Some(Math(f));
    }
    Some(match name {
        "time" => Time,
        "pi" => Pi,
        "start" => Start,
        "end" => End,
        "range" => Range,
        "step" => Step,
        "vector" => Vector,
        "scalar" => Scalar,
        "min_of" => MinOf,
        "max_of" => MaxOf,
        "round" => Round,
        "clamp" => Clamp,
        "clamp_min" => ClampMin,
        "clamp_max" => ClampMax,
        "label_replace" => LabelReplace,
        "label_join" => LabelJoin,
        "sort" => Sort { desc: false },
        "sort_desc" => Sort { desc: true },
        "sort_by_label" => SortByLabel { desc: false },
        "sort_by_label_desc" => SortByLabel { desc: true },
        "minute" => Date(DatePart::Minute),
        "hour" => Date(DatePart::Hour),
        "day_of_month" => Date(DatePart::DayOfMonth),
        "day_of_week" => Date(DatePart::DayOfWeek),
        "day_of_year" => Date(DatePart::DayOfYear),
        "days_in_month" => Date(DatePart::DaysInMonth),
        "month" => Date(DatePart::Month),
        "year" => Date(DatePart::Year),
        _ => return None,
    })
}

/// Instant function `f` of the evaluated arguments `args` at `t`.
pub(crate) fn call(cx: &dyn Context, f: Transform, mut args: Args, t: i64) -> Result<StepValue> {
    let secs = t as f64 / 1e3;
    Ok(match f {
        Transform::Math(f) => map_values(args.vector(0)?, f),
        Transform::Time => StepValue::Scalar(secs),
        Transform::Pi => StepValue::Scalar(std::f64::consts::PI),
        Transform::Start => StepValue::Scalar(cx.start_ms() as f64 / 1e3),
        Transform::End => StepValue::Scalar(cx.end_ms() as f64 / 1e3),
        Transform::Range => StepValue::Scalar((cx.end_ms() - cx.start_ms()) as f64 / 1e3),
        Transform::Step => StepValue::Scalar(cx.interval_ms() as f64 / 1e3),
        Transform::Vector => StepValue::Vector(vec![Elem::new(Labels::empty(), args.scalar(0)?, false)]),
        Transform::Scalar => {
            // Histograms do not count (Prometheus' `funcScalar`).
            let v = floats_only(args.vector(0)?);
            StepValue::Scalar(match v.as_slice() {
                [one] => one.value,
                _ => f64::NAN,
            })
        }
        Transform::MinOf => StepValue::Scalar(go_min(args.scalar(0)?, args.scalar(1)?)),
        Transform::MaxOf => StepValue::Scalar(go_max(args.scalar(0)?, args.scalar(1)?)),
        Transform::Round => round(args)?,
        Transform::Clamp => clamp(args)?,
        Transform::ClampMin => {
            let (v, m) = (args.vector(0)?, args.scalar(1)?);
            map_values(v, move |x| go_max(m, x))
        }
        Transform::ClampMax => {
            let (v, m) = (args.vector(0)?, args.scalar(1)?);
            map_values(v, move |x| go_min(m, x))
        }
        Transform::LabelReplace => label_replace(args)?,
        Transform::LabelJoin => label_join(args)?,
        Transform::Sort { desc } => sort_by_value(floats_only(args.vector(0)?), desc),
        Transform::SortByLabel { desc } => sort_by_label(args, desc)?,
        Transform::Date(part) => date_fn(part, args, t)?,
    })
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

fn round(mut args: Args) -> Result<StepValue> {
    let v = args.vector(0)?;
    let to = if args.len() > 1 { args.scalar(1)? } else { 1.0 };
    let inv = 1.0 / to;
    Ok(map_values(v, move |x| (x * inv + 0.5).floor() / inv))
}

fn clamp(mut args: Args) -> Result<StepValue> {
    let v = args.vector(0)?;
    let (lo, hi) = (args.scalar(1)?, args.scalar(2)?);
    if hi < lo {
        return Ok(StepValue::Vector(Vec::new()));
    }
    Ok(map_values(v, move |x| go_max(lo, go_min(hi, x))))
}

/// `timestamp(v)` of the samples `selected` from an instant selector, each with its own
/// timestamp: those timestamps, in seconds.
pub(crate) fn sample_timestamps(selected: Vec<(Elem, i64)>) -> Vec<Elem> {
    selected.into_iter().map(|(e, ts)| Elem::new(e.labels, ts as f64 / 1e3, true)).collect()
}

/// `timestamp(v)` of any other instant vector `v`: the evaluation time `t`, in seconds.
pub(crate) fn step_timestamps(v: Vec<Elem>, t: i64) -> Vec<Elem> {
    v.into_iter().map(|e| Elem::new(e.labels, t as f64 / 1e3, true)).collect()
}

/// `absent(v)` or `absent_over_time(v)` when `v` is `present` or not: `selector` is the
/// argument, when it is a selector (not in parentheses), whose labels the result takes.
pub(crate) fn absent(present: bool, selector: Option<&VectorSelector>) -> Vec<Elem> {
    if present {
        return Vec::new();
    }
    vec![Elem::new(selector.map_or_else(Labels::empty, absent_labels), 1.0, false)]
}

/// Labels `absent()` reports: the selector's equality matchers (a label matched twice or
/// by another operator is left out).
fn absent_labels(vs: &VectorSelector) -> Labels {
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

/// Any UTF-8 name but an empty one (or one holding 0x00) is a valid label name, as in
/// Prometheus 3; `role` is `destination` or `source`.
fn check_label_name(func: &str, role: &str, name: &str) -> Result<()> {
    if !crate::promql::byte_escapes::is_utf8_label_name(name) {
        let name = crate::promql::byte_escapes::quote(name);
        let name = name.strip_prefix('"').and_then(|n| n.strip_suffix('"')).unwrap_or(&name);
        return Err(EvalError::exec(format!("invalid {role} label name in {func}(): {name}")));
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

fn label_replace(mut args: Args) -> Result<StepValue> {
    let v = args.vector(0)?;
    let dst = args.string(1)?;
    let repl = args.string(2)?;
    let src = args.string(3)?;
    let pattern = args.string(4)?;
    let re = regex::Regex::new(&format!("^(?s:{pattern})$"))
        .map_err(|e| EvalError::exec(format!("invalid regular expression in label_replace(): {pattern}: {e}")))?;
    check_label_name("label_replace", "destination", &dst)?;
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

fn label_join(mut args: Args) -> Result<StepValue> {
    let v = args.vector(0)?;
    let dst = args.string(1)?;
    let sep = args.string(2)?;
    let mut srcs = Vec::new();
    for i in 3..args.len() {
        let src = args.string(i)?;
        check_label_name("label_join", "source", &src)?;
        srcs.push(src);
    }
    check_label_name("label_join", "destination", &dst)?;
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

fn sort_by_label(mut args: Args, desc: bool) -> Result<StepValue> {
    let mut v = args.vector(0)?;
    let mut names = Vec::new();
    for i in 1..args.len() {
        names.push(args.string(i)?);
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

fn date_fn(part: DatePart, mut args: Args, t: i64) -> Result<StepValue> {
    let v = if args.is_empty() { vec![Elem::new(Labels::empty(), t as f64 / 1e3, false)] } else { args.vector(0)? };
    let mut out = Vec::with_capacity(v.len());
    for e in floats_only(v) {
        if !e.value.is_finite() || e.value.abs() > 9.2e15 {
            continue;
        }
        let Some(d) = DateTime::<Utc>::from_timestamp(e.value as i64, 0) else {
            continue;
        };
        let x = match part {
            DatePart::Minute => d.minute(),
            DatePart::Hour => d.hour(),
            DatePart::DayOfMonth => d.day(),
            DatePart::DayOfWeek => d.weekday().num_days_from_sunday(),
            DatePart::DayOfYear => d.ordinal(),
            DatePart::DaysInMonth => days_in_month(d.year(), d.month()),
            DatePart::Month => d.month(),
            DatePart::Year => {
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

    fn string(s: &str) -> StepValue {
        StepValue::String(s.to_owned())
    }

    #[test]
    fn label_replace_of_argument_values() {
        let cx = crate::promql::functions::context::Recorder::default();
        let labels = Labels::from_pairs([("__name__", "up"), ("src", "a-1")]).unwrap();
        let v = StepValue::Vector(vec![Elem::new(labels, 1.0, false)]);
        let args = Args::new(vec![v, string("dst"), string("$1"), string("src"), string("(.*)-.*")]);
        let Some(f) = lookup("label_replace") else { panic!("label_replace is registered") };
        let StepValue::Vector(out) = call(&cx, f, args, 0).unwrap() else { panic!("a vector") };
        assert_eq!(out[0].labels.get("dst"), Some("a"));
        assert_eq!(out[0].labels.get("__name__"), Some("up"));
        // A pattern that does not compile is an error of the function.
        let v = StepValue::Vector(Vec::new());
        let args = Args::new(vec![v, string("dst"), string("$1"), string("src"), string("(")]);
        assert!(call(&cx, f, args, 0).is_err());
    }

    #[test]
    fn clamp_and_time_of_values() {
        let cx = crate::promql::functions::context::Recorder::default();
        let labels = Labels::from_pairs([("__name__", "up")]).unwrap();
        let v = || StepValue::Vector(vec![Elem::new(labels.clone(), 5.0, false)]);
        let clamp = |lo: f64, hi: f64| {
            let args = Args::new(vec![v(), StepValue::Scalar(lo), StepValue::Scalar(hi)]);
            match call(&cx, Transform::Clamp, args, 0).unwrap() {
                StepValue::Vector(out) => out.iter().map(|e| (e.value, e.drop_name)).collect::<Vec<_>>(),
                other => panic!("{}", other.type_name()),
            }
        };
        assert_eq!(clamp(0.0, 3.0), [(3.0, true)]);
        assert_eq!(clamp(3.0, 0.0), []);
        let StepValue::Scalar(t) = call(&cx, Transform::Time, Args::new(Vec::new()), 1500).unwrap() else { panic!() };
        assert_eq!(t, 1.5);
    }
}
