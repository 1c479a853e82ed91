//! Prometheus' series notation, as its test scripts (`promqltest`) and rule unit tests
//! (`promtool test rules`) write series: `metric{l="v"} 0 1+2x3 _ stale {{schema:1 sum:3}}`,
//! one value per step.
//!
//! | Item | Values |
//! |---|---|
//! | `v` | `v` (a number, `Inf`, `NaN`) |
//! | `_`, `_xN` | none at this step, none for `N` steps |
//! | `vxN` | `v`, `N + 1` times |
//! | `a+bxN`, `a-bxN` | `a`, then `N` more, each `b` above (below) the one before |
//! | `stale` | a staleness marker |
//! | `{{...}}` and its expansions | native histograms (see [`histogram`]) |

pub mod histogram;

use crate::labels::{Label, Labels};
use crate::sample::STALE_NAN_BITS;

pub use histogram::HistogramValue;

/// One value in a series description: a float, a native histogram, or nothing at that step.
#[derive(Clone, Debug)]
pub enum SeqValue {
    /// `_`: no sample at this step.
    Omitted,
    /// A float (a staleness marker for `stale`).
    Float(f64),
    /// A native histogram.
    Histogram(Box<HistogramValue>),
}

/// A series line of a `load` block or an expected result.
#[derive(Clone, Debug)]
pub struct SeriesDesc {
    /// The series.
    pub labels: Labels,
    /// One value per step, floats and histograms in line order.
    pub values: Vec<SeqValue>,
    /// The line holds native histogram values (`{{...}}`).
    pub histogram: bool,
}

/// A number in a series description (no hex: `0x59` there means "0 repeated 59 times").
fn parse_number(s: &str) -> Option<f64> {
    if s.len() > 1 && s.trim_start_matches(['-', '+']).starts_with("0x") {
        return None;
    }
    parse_scalar(s)
}

/// A bare number on an expected-result line (Go's `ParseInt(s, 0, 64)` then `ParseFloat`).
pub fn parse_scalar(s: &str) -> Option<f64> {
    let (neg, body) = match s.strip_prefix('-') {
        Some(b) => (true, b),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let v = match body.to_ascii_lowercase().as_str() {
        "inf" => f64::INFINITY,
        "nan" => f64::NAN,
        b if b.starts_with("0x") => i64::from_str_radix(&b[2..], 16).ok()? as f64,
        _ => {
            if !body.bytes().next().is_some_and(|c| c.is_ascii_digit() || c == b'.') {
                return None;
            }
            body.parse::<f64>().ok()?
        }
    };
    Some(if neg { -v } else { v })
}

/// Expands one token of the series value notation.
fn expand(tok: &str, out: &mut Vec<SeqValue>) -> Result<(), String> {
    if tok == "_" {
        out.push(SeqValue::Omitted);
        return Ok(());
    }
    if tok == "stale" {
        out.push(SeqValue::Float(f64::from_bits(STALE_NAN_BITS)));
        return Ok(());
    }
    if let Some(n) = tok.strip_prefix("_x") {
        let n: usize = n.parse().map_err(|_| format!("bad repeat {tok:?}"))?;
        check_repeat(n, tok)?;
        out.extend(std::iter::repeat_n(SeqValue::Omitted, n));
        return Ok(());
    }
    if let Some(v) = parse_number(tok) {
        out.push(SeqValue::Float(v));
        return Ok(());
    }
    // a+bxN, a-bxN, axN
    let (body, times) = tok.rsplit_once('x').ok_or_else(|| format!("bad value {tok:?}"))?;
    let times: usize = times.parse().map_err(|_| format!("bad repeat in {tok:?}"))?;
    check_repeat(times, tok)?;
    if let Some(v) = parse_number(body) {
        out.extend(std::iter::repeat_n(SeqValue::Float(v), times + 1));
        return Ok(());
    }
    let split = body
        .char_indices()
        .skip(1)
        .find(|&(i, c)| (c == '+' || c == '-') && !body[..i].ends_with(['e', 'E']))
        .map(|(i, _)| i)
        .ok_or_else(|| format!("bad value {tok:?}"))?;
    let start = parse_number(&body[..split]).ok_or_else(|| format!("bad start in {tok:?}"))?;
    let inc = parse_number(&body[split..]).ok_or_else(|| format!("bad increment in {tok:?}"))?;
    let mut cur = start;
    for _ in 0..=times {
        out.push(SeqValue::Float(cur));
        cur += inc;
    }
    Ok(())
}

/// Refuses an item expanding to more than [`histogram::MAX_REPEAT`] values.
fn check_repeat(n: usize, tok: &str) -> Result<(), String> {
    if n as u64 >= histogram::MAX_REPEAT {
        return Err(format!("{tok:?} repeats more than {} values", histogram::MAX_REPEAT));
    }
    Ok(())
}

/// Splits a series line into its metric part and value part.
fn split_series_line(line: &str) -> (&str, &str) {
    let bytes = line.as_bytes();
    let mut i = 0;
    let mut in_str: Option<u8> = None;
    let mut brace = false;
    while i < bytes.len() {
        let c = bytes[i];
        if let Some(q) = in_str {
            if c == b'\\' {
                i += 2;
                continue;
            }
            if c == q {
                in_str = None;
            }
        } else if c == b'"' || c == b'\'' || c == b'`' {
            in_str = Some(c);
        } else if c == b'{' {
            brace = true;
        } else if c == b'}' && brace {
            return (&line[..=i], line[i + 1..].trim());
        } else if (c == b' ' || c == b'\t') && !brace {
            return (&line[..i], line[i..].trim());
        }
        i += 1;
    }
    (line, "")
}

/// Parses `metric{a="b"}` / `{a="b"}` / `{}` into labels, using the PromQL parser for quoting.
///
/// # Errors
/// The parser's message, or a selector with matchers other than `=`.
pub fn parse_metric(s: &str) -> Result<Labels, String> {
    let s = s.trim();
    if s == "{}" {
        return Ok(Labels::empty());
    }
    let expr = promql_parser::parser::parse(s).map_err(|e| format!("bad metric {s:?}: {e}"))?;
    let promql_parser::parser::Expr::VectorSelector(vs) = expr else {
        return Err(format!("bad metric {s:?}"));
    };
    let mut labels = Vec::new();
    if let Some(n) = vs.name {
        labels.push(Label::new("__name__", n));
    }
    for m in vs.matchers.matchers {
        if !matches!(m.op, promql_parser::label::MatchOp::Equal) {
            return Err(format!("bad metric {s:?}: only `=` matchers describe a series"));
        }
        labels.push(Label::new(m.name, m.value));
    }
    Ok(Labels::from_trusted(labels))
}

/// A whole series line: `metric{labels} values...`.
///
/// # Errors
/// The metric's or the first bad value's problem.
pub fn parse_series(line: &str) -> Result<SeriesDesc, String> {
    let (metric, values) = split_series_line(line);
    let labels = parse_metric(metric)?;
    // `values` ends where `line` does, but for trailing whitespace: columns count from the line.
    let values_at = line.trim_end().len() - values.len();
    let out = values_from(values, values_at)?;
    let histogram = out.iter().any(|v| matches!(v, SeqValue::Histogram(_)));
    Ok(SeriesDesc { labels, values: out, histogram })
}

/// The values part of a series line alone (`0 1+2x3 _ {{...}}`).
///
/// # Errors
/// The first item that does not parse, with its column.
pub fn parse_values(values: &str) -> Result<Vec<SeqValue>, String> {
    values_from(values, 0)
}

/// [`parse_values`] of text starting at byte `base` of its line (for column numbers).
fn values_from(values: &str, base: usize) -> Result<Vec<SeqValue>, String> {
    let mut out = Vec::new();
    for (at, item) in histogram::split_items(values) {
        if !item.starts_with("{{") {
            expand(item, &mut out)?;
            continue;
        }
        let hs =
            histogram::expand_item(item).map_err(|e| format!("column {}: {}", base + at + e.offset + 1, e.problem))?;
        out.extend(hs.into_iter().map(|h| SeqValue::Histogram(Box::new(h))));
    }
    Ok(out)
}
