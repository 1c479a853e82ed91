//! Input series of rule unit tests in Prometheus' series notation: `metric{l="v"}` and values
//! such as `0 1 _ 5+2x3 stale 7x2 _x4`, one value per test interval from time 0.
//!
//! | Item | Values |
//! |---|---|
//! | `v` | `v` (a number, `Inf`, `NaN`) |
//! | `_` | none at this step |
//! | `_xN` | none for `N` steps |
//! | `vxN` | `v`, `N + 1` times |
//! | `a+bxN`, `a-bxN` | `a`, then `N` more, each `b` above (below) the one before |
//! | `stale` | a staleness marker |

use crate::labels::{Label, Labels};
use crate::sample::STALE_NAN_BITS;

/// Most values one item may expand to.
pub const MAX_REPEAT: usize = 1_000_000;

/// The labels of a series written as a PromQL selector without matchers other than `=`.
///
/// # Errors
/// The parser's message, or a selector that is not a plain series.
pub fn parse_metric(text: &str) -> Result<Labels, String> {
    let text = text.trim();
    if text == "{}" {
        return Ok(Labels::empty());
    }
    let expr = promql_parser::parser::parse(text).map_err(|e| format!("1:1: parse error: {e}"))?;
    let promql_parser::parser::Expr::VectorSelector(vs) = expr else {
        return Err(format!("{text:?} is not a series"));
    };
    let mut labels = Vec::new();
    if let Some(n) = vs.name {
        labels.push(Label::new("__name__", n));
    }
    for m in vs.matchers.matchers {
        if !matches!(m.op, promql_parser::label::MatchOp::Equal) {
            return Err(format!("{text:?}: only `=` matchers describe a series"));
        }
        labels.push(Label::new(m.name, m.value));
    }
    Ok(Labels::from_trusted(labels))
}

/// The values of a series line, one per step (`None`: no sample at that step).
///
/// # Errors
/// The first item that does not parse, or one expanding beyond [`MAX_REPEAT`].
pub fn parse_values(text: &str) -> Result<Vec<Option<f64>>, String> {
    let mut out = Vec::new();
    for item in text.split_whitespace() {
        expand(item, &mut out)?;
    }
    Ok(out)
}

fn expand(item: &str, out: &mut Vec<Option<f64>>) -> Result<(), String> {
    let bad = || format!("invalid value {item:?} in series values");
    match item {
        "_" => out.push(None),
        "stale" => out.push(Some(f64::from_bits(STALE_NAN_BITS))),
        _ => {
            if let Some(v) = number(item) {
                out.push(Some(v));
                return Ok(());
            }
            let (body, times) = item.rsplit_once('x').ok_or_else(bad)?;
            let times: usize = times.parse().map_err(|_| bad())?;
            if times >= MAX_REPEAT {
                return Err(format!("{item:?} repeats more than {MAX_REPEAT} values"));
            }
            if body == "_" {
                out.extend(std::iter::repeat_n(None, times));
                return Ok(());
            }
            if let Some(v) = number(body) {
                out.extend(std::iter::repeat_n(Some(v), times + 1));
                return Ok(());
            }
            let split = body
                .char_indices()
                .skip(1)
                .find(|&(i, c)| (c == '+' || c == '-') && !body[..i].ends_with(['e', 'E']))
                .map(|(i, _)| i)
                .ok_or_else(bad)?;
            let (start, step) = body.split_at(split);
            let (start, step) = (number(start).ok_or_else(bad)?, number(step).ok_or_else(bad)?);
            let mut v = start;
            for _ in 0..=times {
                out.push(Some(v));
                v += step;
            }
        }
    }
    Ok(())
}

/// A number as the notation writes it (no hex: `0x5` is "0, six times").
fn number(s: &str) -> Option<f64> {
    let body = s.trim_start_matches(['-', '+']);
    if body.starts_with("0x") || body.is_empty() {
        return None;
    }
    let v = match body.to_ascii_lowercase().as_str() {
        "inf" => f64::INFINITY,
        "nan" => f64::NAN,
        b if b.bytes().next().is_some_and(|c| c.is_ascii_digit() || c == b'.') => body.parse().ok()?,
        _ => return None,
    };
    let negative = s.len() - body.len() == 1 && s.starts_with('-');
    Some(if negative { -v } else { v })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sample::is_stale_marker;

    #[test]
    fn items_expand_as_prometheus_expands_them() {
        let v = parse_values("1 _ 2+3x2 4-1x1 5x2 _x2 -Inf").unwrap();
        let want = [
            Some(1.0),
            None,
            Some(2.0),
            Some(5.0),
            Some(8.0),
            Some(4.0),
            Some(3.0),
            Some(5.0),
            Some(5.0),
            Some(5.0),
            None,
            None,
            Some(f64::NEG_INFINITY),
        ];
        assert_eq!(v, want);
    }

    #[test]
    fn stale_is_the_staleness_marker() {
        let v = parse_values("0 stale").unwrap();
        assert!(is_stale_marker(v[1].unwrap()));
    }

    #[test]
    fn bad_items_are_named() {
        assert_eq!(parse_values("1 a").unwrap_err(), "invalid value \"a\" in series values");
        assert!(parse_values("1x99999999999").is_err());
    }

    #[test]
    fn metrics_are_series_selectors() {
        assert_eq!(parse_metric(r#"up{job="a"}"#).unwrap().to_string(), r#"up{job="a"}"#);
        assert!(parse_metric(r#"up{job=~"a"}"#).is_err());
    }

    proptest::proptest! {
        #[test]
        fn no_text_panics(s in ".{0,40}") {
            let _ = parse_values(&s);
            let _ = parse_metric(&s);
        }
    }
}
