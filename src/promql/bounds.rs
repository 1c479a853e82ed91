//! Bounds on the durations, offsets, `@` times and subquery steps a query may carry, checked
//! before evaluation so that no extreme value reaches the evaluator's time arithmetic or makes
//! it loop until the timeout.
//!
//! | what | bound | as Prometheus |
//! |---|---|---|
//! | range, offset, subquery range and step | at most [`MAX_DURATION_MS`] (~292 years) | yes: an `int64` of nanoseconds, "duration out of range" |
//! | numeric duration (`[300]`, `offset 1e9`) | finite, not negative, at most the same | (Prometheus 2 refuses numbers there) |
//! | `@` time | its milliseconds fit an `i64` | yes: "timestamp out of bounds for @ modifier" |
//! | subquery | at most [`MAX_SUBQUERY_STEPS`] inner steps per window | no: Prometheus evaluates any number |
//! | nested subqueries | at most [`MAX_NESTED_SUBQUERY_STEPS`] inner steps per evaluation | no |
//!
//! Numeric durations are checked on the tokens, before the parser sees them:
//! `promql-parser` 0.11 turns them into a `std::time::Duration` with `Duration::from_secs_f64`,
//! which panics on NaN, infinity, negative values and anything above `u64::MAX` seconds.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lrpar::{Lexeme, Lexer};
use promql_parser::parser::token::{T_ADD, T_COLON, T_DURATION, T_LEFT_BRACKET, T_NUMBER, T_OFFSET, T_SUB};
use promql_parser::parser::{AtModifier, Expr, Offset};

use super::error::{EvalError, Result};

/// Longest duration (range, offset, subquery range or step): Prometheus keeps durations as
/// `int64` nanoseconds, ~292 years.
pub const MAX_DURATION_MS: i64 = i64::MAX / 1_000_000;

/// Most inner steps one subquery window may span (`range / step`): Prometheus' bound on the
/// points of a range query, applied to subqueries, so that `[1y:1ms]` is refused at once
/// instead of evaluating until the timeout.
pub const MAX_SUBQUERY_STEPS: i64 = 11_000;

/// Most inner steps nested subqueries may evaluate for one evaluation of the outermost (the
/// product of their steps per window): `[1w:]` inside `[1w:]` is 10,080 x 10,080 evaluations
/// at every step, found by fuzzing to run into the timeout; 1,000,000 still allows e.g. a
/// `[1d:1m]` inside a `[4w:1h]`.
pub const MAX_NESTED_SUBQUERY_STEPS: i64 = 1_000_000;

/// Refuses a number written where the grammar expects a duration (`offset N`, `[N]`, `[N:N]`)
/// that is not a valid duration. Input the lexer rejects is left to the parser's message.
///
/// # Errors
/// `bad_data` naming the number and its position.
pub(crate) fn check_numeric_durations(query: &str) -> Result<()> {
    let Ok(lexer) = promql_parser::parser::lexer(query) else { return Ok(()) };
    // The two tokens before the current one; a duration follows `offset`, `offset -`, `[` or
    // the `:` of a subquery (the only colon token: inside names it is part of the identifier).
    let (mut before, mut prev) = (None, None);
    for lexeme in lexer.iter().flatten() {
        let tok = lexeme.tok_id();
        let after_offset = prev == Some(T_OFFSET) || (matches!(prev, Some(T_SUB | T_ADD)) && before == Some(T_OFFSET));
        let duration_slot = after_offset || matches!(prev, Some(T_LEFT_BRACKET | T_COLON));
        let span = lexeme.span();
        let text = query.get(span.start()..span.end()).unwrap_or("");
        let checked = match tok {
            T_NUMBER if duration_slot => check_seconds(text),
            T_DURATION => check_unit_counts(text),
            _ => Ok(()),
        };
        checked.map_err(|why| {
            EvalError::bad(format!("invalid duration {text:?} at character {}: {why}", span.start() + 1))
        })?;
        (before, prev) = (prev, Some(tok));
    }
    Ok(())
}

/// Whether the number of seconds `text` (as the parser reads numbers: decimal, hex, octal,
/// `Inf`, `NaN`) is a valid duration.
fn check_seconds(text: &str) -> std::result::Result<(), String> {
    let secs = promql_parser::util::parse_str_radix(text)?;
    if !secs.is_finite() || secs < 0.0 {
        return Err("a duration must be a finite, non-negative number of seconds".into());
    }
    if secs * 1000.0 > MAX_DURATION_MS as f64 {
        return Err(out_of_range());
    }
    Ok(())
}

/// Whether every count of a unit duration (`5m`, `1h30m`) fits the parser's `u32`: it reads a
/// larger one as zero, silently (`99999999999y` would be "duration must be greater than 0").
fn check_unit_counts(text: &str) -> std::result::Result<(), String> {
    let too_big = text.split(|c: char| !c.is_ascii_digit()).any(|n| !n.is_empty() && n.parse::<u32>().is_err());
    if too_big {
        return Err(out_of_range());
    }
    Ok(())
}

fn out_of_range() -> String {
    format!("duration out of range (at most {MAX_DURATION_MS}ms, about 292 years)")
}

/// Walks a parsed query and refuses durations, offsets and `@` times out of bounds,
/// subqueries of more than [`MAX_SUBQUERY_STEPS`] steps per window, and nested subqueries of more
/// than [`MAX_NESTED_SUBQUERY_STEPS`] inner steps per outer step.
///
/// # Errors
/// `bad_data` saying which bound is exceeded.
pub(crate) fn check_times(e: &Expr) -> Result<()> {
    check_nested(e, 1)
}

/// [`check_times`] under subqueries whose windows together span `outer` inner steps.
fn check_nested(e: &Expr, outer: i64) -> Result<()> {
    match e {
        Expr::VectorSelector(vs) => check_modifiers(&vs.at, &vs.offset),
        Expr::MatrixSelector(ms) => {
            duration_ms(ms.range)?;
            check_modifiers(&ms.vs.at, &ms.vs.offset)
        }
        Expr::Subquery(sq) => {
            check_modifiers(&sq.at, &sq.offset)?;
            let range = duration_ms(sq.range)?;
            let step = sq.step.map(duration_ms).transpose()?.unwrap_or(super::eval::DEFAULT_SUBQUERY_STEP_MS);
            if step <= 0 {
                return Err(EvalError::bad("subquery step must be positive"));
            }
            let (range_text, step_text) = (crate::duration::format_ms(range), crate::duration::format_ms(step));
            let steps = range / step;
            if steps > MAX_SUBQUERY_STEPS {
                return Err(EvalError::bad(format!(
                    "subquery [{range_text}:{step_text}] would evaluate {steps} steps per window; at most {MAX_SUBQUERY_STEPS} are allowed. Try a larger subquery step"
                )));
            }
            let nested = outer.saturating_mul(steps.max(1));
            if nested > MAX_NESTED_SUBQUERY_STEPS {
                return Err(EvalError::bad(format!(
                    "nested subqueries would evaluate {nested} inner steps per evaluation (subquery [{range_text}:{step_text}] inside others); at most {MAX_NESTED_SUBQUERY_STEPS} are allowed. Try larger subquery steps"
                )));
            }
            check_nested(&sq.expr, nested)
        }
        Expr::Aggregate(a) => {
            check_nested(&a.expr, outer)?;
            a.param.as_deref().map_or(Ok(()), |p| check_nested(p, outer))
        }
        Expr::Unary(u) => check_nested(&u.expr, outer),
        Expr::Binary(b) => check_nested(&b.lhs, outer).and_then(|()| check_nested(&b.rhs, outer)),
        Expr::Paren(p) => check_nested(&p.expr, outer),
        Expr::Call(c) => c.args.args.iter().try_for_each(|a| check_nested(a, outer)),
        Expr::NumberLiteral(_) | Expr::StringLiteral(_) | Expr::Extension(_) => Ok(()),
    }
}

fn check_modifiers(at: &Option<AtModifier>, offset: &Option<Offset>) -> Result<()> {
    if let Some(AtModifier::At(t)) = at {
        at_ms(t)?;
    }
    match offset {
        Some(Offset::Pos(d) | Offset::Neg(d)) => duration_ms(*d).map(drop),
        None => Ok(()),
    }
}

/// A duration in ms, refused past [`MAX_DURATION_MS`].
fn duration_ms(d: Duration) -> Result<i64> {
    i64::try_from(d.as_millis()).ok().filter(|ms| *ms <= MAX_DURATION_MS).ok_or_else(|| EvalError::bad(out_of_range()))
}

/// The ms of an `@` time, refused when they do not fit an `i64` (Prometheus' bound).
fn at_ms(t: &SystemTime) -> Result<i64> {
    let ms = match t.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_millis()).ok(),
        Err(e) => i64::try_from(e.duration().as_millis()).ok().map(|ms| -ms),
    };
    ms.ok_or_else(|| {
        let secs = match t.duration_since(UNIX_EPOCH) {
            Ok(d) => d.as_secs_f64(),
            Err(e) => -e.duration().as_secs_f64(),
        };
        EvalError::bad(format!("timestamp out of bounds for @ modifier: {secs}"))
    })
}

#[cfg(test)]
mod tests {
    use crate::promql::parse;

    fn refused(q: &str) -> String {
        match parse(q) {
            Ok(_) => panic!("{q} was accepted"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn numeric_durations_out_of_range_are_refused_before_the_parser_panics() {
        for q in ["up offset 1e20", "up offset Inf", "up offset NaN", "up offset -1e30", "up[1e30]", "up[5m:1e20]"] {
            assert!(refused(q).starts_with("invalid duration"), "{q}: {}", refused(q));
        }
        assert!(refused("rate(up[0x7fffffffffffffff])").contains("out of range"));
        // Numbers elsewhere are no durations.
        for q in ["up > 1e300", "up[5m] offset 300", "vector(Inf)", "up[300:10]", "up{a=\"[1e30]\"}"] {
            assert!(parse(q).is_ok(), "{q}");
        }
    }

    #[test]
    fn durations_and_at_times_past_prometheus_bounds_are_refused() {
        assert!(refused("up offset 293y").contains("duration out of range"));
        assert!(refused("up offset 99999999999y").contains("duration out of range"));
        assert!(refused("up[5m:4294967296s]").contains("duration out of range"));
        assert!(refused("up[300y]").contains("duration out of range"));
        assert!(parse("up offset 292y").is_ok());
        assert!(refused("up @ 1e300").contains("timestamp out of bounds for @ modifier"));
        assert!(refused("up @ -9223372036854775807").contains("timestamp out of bounds"));
        assert!(parse("up @ 9e15").is_ok());
        assert!(parse("up @ -9e15").is_ok());
    }

    #[test]
    fn subqueries_are_bounded_in_steps() {
        let msg = refused("max_over_time(vector(1)[1y:1ms])");
        assert!(msg.contains("subquery [365d:1ms] would evaluate 31536000000 steps"), "{msg}");
        assert!(refused("sum(rate(up[1m:1ms]))").contains("at most 11000"));
        assert!(parse("max_over_time(up[1w:])").is_ok());
        assert!(parse("max_over_time(up[1w:1m])").is_ok());
        assert!(parse("max_over_time(up[11000s:1s])").is_ok());
        let nested = "deriv(max_over_time((up @ end())[1w:])[1w:])";
        assert!(
            refused(nested).contains("nested subqueries would evaluate 101606400 inner steps"),
            "{}",
            refused(nested)
        );
        assert!(parse("max_over_time(max_over_time(up[1d:1m])[4w:1h])").is_ok());
    }
}
