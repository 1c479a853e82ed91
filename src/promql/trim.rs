//! The histogram trim operators of Prometheus 3.x, `h </ x` (keep the observations below `x`)
//! and `h >/ x` (keep those above), which the `promql-parser` crate does not lex.
//!
//! Before the crate parses a query, [`mark`] rewrites each trim operator into the comparison
//! of the same precedence (`<` or `>`) with modifiers the crate accepts between any operands,
//! and a marker label in the grouping list:
//!
//! | written                        | parsed                                                  |
//! |--------------------------------|---------------------------------------------------------|
//! | `a </ b`                       | `a < bool ignoring() group_left(__saltdb_trim__) b`     |
//! | `a >/ on(l) b`                 | `a > bool on(l) group_left(__saltdb_trim__) b`          |
//! | `a </ on(l) group_right(x) b`  | `a < bool on(l) group_right(x, __saltdb_trim_grouped__) b` |
//!
//! `bool` keeps the crate from refusing a comparison between scalars (Prometheus accepts
//! `1 </ 2` when parsing and fails when evaluating); an empty `ignoring()` is what allows a
//! grouping clause without restricting the operands to vectors. The evaluator recognizes the
//! marked expression with [`of`] and takes the modifiers as written from [`modifier`].
//! `bool` written after a trim operator is refused as Prometheus refuses it.

use std::borrow::Cow;

use promql_parser::label::Labels;
use promql_parser::parser::{BinModifier, BinaryExpr, VectorMatchCardinality};

use super::extended::{closing, skip_string};
use crate::histogram::Trim;

/// The grouping label marking a trim written without `group_left`/`group_right`.
pub const MARKER: &str = "__saltdb_trim__";
/// The grouping label marking a trim written with `group_left`/`group_right`.
pub const GROUPED_MARKER: &str = "__saltdb_trim_grouped__";

/// Rewrites the trim operators of `query` as the module documentation shows; a query without
/// one is returned as it is. String literals and comments are left alone.
///
/// # Errors
/// Prometheus' message for `bool` after a trim operator.
pub fn mark(query: &str) -> Result<Cow<'_, str>, String> {
    if !query.contains("</") && !query.contains(">/") {
        return Ok(Cow::Borrowed(query));
    }
    let b = query.as_bytes();
    let mut out = String::with_capacity(query.len() + 64);
    let (mut i, mut copied) = (0, 0);
    while i < b.len() {
        match b[i] {
            q @ (b'"' | b'\'' | b'`') => i = skip_string(b, i, q),
            b'#' => i = b[i..].iter().position(|&c| c == b'\n').map_or(b.len(), |p| i + p),
            op @ (b'<' | b'>') if b.get(i + 1) == Some(&b'/') => {
                out.push_str(&query[copied..i]);
                let (text, next) = operator(query, i + 2, op)?;
                out.push_str(&text);
                (i, copied) = (next, next);
            }
            _ => i += 1,
        }
    }
    if copied == 0 {
        return Ok(Cow::Borrowed(query));
    }
    out.push_str(&query[copied..]);
    Ok(Cow::Owned(out))
}

/// The comparison and modifiers replacing the trim operator `op` whose modifiers (if any)
/// start at `from`, and the offset just past the modifiers consumed.
fn operator(query: &str, from: usize, op: u8) -> Result<(String, usize), String> {
    let b = query.as_bytes();
    let mut j = skip_space(b, from);
    let (word, after) = word_at(query, j);
    if word.eq_ignore_ascii_case("bool") {
        return Err("bool modifier can only be used on comparison operators".to_owned());
    }
    let mut matching = "ignoring()";
    let mut has_matching = false;
    if word.eq_ignore_ascii_case("on") || word.eq_ignore_ascii_case("ignoring") {
        let open = skip_space(b, after);
        if b.get(open) == Some(&b'(') {
            let close = closing(b, open, b')');
            if close < b.len() {
                matching = &query[j..=close];
                has_matching = true;
                j = skip_space(b, close + 1);
            }
        }
    }
    let (word, after) = word_at(query, j);
    let mut group = ("group_left", String::new(), MARKER);
    let grouped = word.eq_ignore_ascii_case("group_left") || word.eq_ignore_ascii_case("group_right");
    if grouped && has_matching {
        group.0 = if word.eq_ignore_ascii_case("group_left") { "group_left" } else { "group_right" };
        group.2 = GROUPED_MARKER;
        j = after;
        let open = skip_space(b, after);
        if b.get(open) == Some(&b'(') {
            let close = closing(b, open, b')');
            if close < b.len() {
                let labels = query[open + 1..close].trim().trim_end_matches(',').trim_end();
                if !labels.is_empty() {
                    group.1 = format!("{labels}, ");
                }
                j = close + 1;
            }
        }
    } else if grouped {
        // `group_left` without `on`/`ignoring`: left for the parser to refuse.
        let text = format!("{} bool ", op as char);
        return Ok((text, from));
    }
    let (kind, labels, marker) = group;
    Ok((format!("{} bool {matching} {kind}({labels}{marker}) ", op as char), skip_space(b, j)))
}

fn skip_space(b: &[u8], mut i: usize) -> usize {
    while b.get(i).is_some_and(u8::is_ascii_whitespace) {
        i += 1;
    }
    i
}

/// The identifier starting at `i` (empty if none) and the offset just past it.
fn word_at(query: &str, i: usize) -> (&str, usize) {
    let b = query.as_bytes();
    let mut end = i;
    while b.get(end).is_some_and(|&c| c.is_ascii_alphanumeric() || c == b'_') {
        end += 1;
    }
    (query.get(i..end).unwrap_or(""), end)
}

/// The grouping labels of a marked expression, if `b` is one.
fn marked_labels(b: &BinaryExpr) -> Option<&Labels> {
    match &b.modifier.as_ref()?.card {
        VectorMatchCardinality::ManyToOne(l) | VectorMatchCardinality::OneToMany(l)
            if l.labels.iter().any(|n| n == MARKER || n == GROUPED_MARKER) =>
        {
            Some(l)
        }
        _ => None,
    }
}

/// The trim operator `b` was written with, if it was one.
pub fn of(b: &BinaryExpr) -> Option<Trim> {
    marked_labels(b)?;
    match b.op.to_string().as_str() {
        "<" => Some(Trim::Upper),
        ">" => Some(Trim::Lower),
        _ => None,
    }
}

/// The modifiers of a marked expression as written (without the `bool` and the marker that
/// [`mark`] added), or `None` when `b` is not marked.
pub fn modifier(b: &BinaryExpr) -> Option<BinModifier> {
    let labels = marked_labels(b)?;
    let mut m = b.modifier.clone()?;
    m.return_bool = false;
    if labels.labels.iter().any(|n| n == MARKER) {
        m.card = VectorMatchCardinality::OneToOne;
    } else {
        let kept: Vec<String> = labels.labels.iter().filter(|n| *n != GROUPED_MARKER).cloned().collect();
        let kept = Labels { labels: kept };
        m.card = match m.card {
            VectorMatchCardinality::OneToMany(_) => VectorMatchCardinality::OneToMany(kept),
            _ => VectorMatchCardinality::ManyToOne(kept),
        };
    }
    Some(m)
}

#[cfg(test)]
mod tests {
    use super::*;
    use promql_parser::parser::{Expr, LabelModifier};

    fn m(q: &str) -> String {
        mark(q).unwrap().into_owned()
    }

    fn binary(q: &str) -> BinaryExpr {
        match promql_parser::parser::parse(&m(q)) {
            Ok(Expr::Binary(b)) => b,
            other => panic!("{q}: {other:?}"),
        }
    }

    #[test]
    fn operators_become_marked_comparisons() {
        assert_eq!(m("h </ 2"), format!("h < bool ignoring() group_left({MARKER}) 2"));
        assert_eq!(m("h>/-1"), format!("h> bool ignoring() group_left({MARKER}) -1"));
        assert_eq!(m("h >/ on (label) f"), format!("h > bool on (label) group_left({MARKER}) f"));
        assert_eq!(
            m("h </ ignoring(a) group_right(b,) f"),
            format!("h < bool ignoring(a) group_right(b, {GROUPED_MARKER}) f")
        );
        assert_eq!(m("h </ on(a) group_left f"), format!("h < bool on(a) group_left({GROUPED_MARKER}) f"));
    }

    #[test]
    fn strings_comments_and_other_operators_are_left_alone() {
        for q in [r#"m{a="</"}"#, "m # >/ x\n", "a <= b", "a < -b", "a >= 2 / 3", "a / b"] {
            assert!(matches!(mark(q), Ok(Cow::Borrowed(_))), "{q}");
        }
    }

    #[test]
    fn bool_is_refused() {
        assert_eq!(mark("h </ bool 2").unwrap_err(), "bool modifier can only be used on comparison operators");
    }

    #[test]
    fn the_marked_expression_gives_back_operator_and_modifiers() {
        let b = binary("h </ 2");
        assert_eq!(of(&b), Some(Trim::Upper));
        let md = modifier(&b).unwrap();
        assert!(!md.return_bool);
        assert_eq!(md.card, VectorMatchCardinality::OneToOne);

        let b = binary("h >/ on(l) group_right(x) f");
        assert_eq!(of(&b), Some(Trim::Lower));
        let md = modifier(&b).unwrap();
        assert_eq!(md.card, VectorMatchCardinality::OneToMany(Labels { labels: vec!["x".to_owned()] }));
        assert!(matches!(md.matching, Some(LabelModifier::Include(ref l)) if l.labels == ["l"]));

        // Between scalars the crate accepts it; the evaluator refuses it.
        assert_eq!(of(&binary("1 </ 2")), Some(Trim::Upper));
        assert_eq!(of(&binary("h < bool 2")), None);
        assert!(modifier(&binary("a < b")).is_none());
    }

    #[test]
    fn precedence_is_that_of_comparisons() {
        let b = binary("h </ 1 + 2");
        assert!(matches!(*b.rhs, Expr::Binary(_)));
        let b = binary("h </ 2 and h");
        assert_eq!(b.op.to_string(), "and");
    }
}
