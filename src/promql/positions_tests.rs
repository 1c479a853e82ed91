use proptest::prelude::*;

use super::*;
use crate::promql::engine::parse;

/// Every node of `e`, in source order.
fn nodes(e: &Expr) -> Vec<&Expr> {
    let mut out = vec![e];
    for c in children(e) {
        out.extend(nodes(c));
    }
    out
}

/// Checks that the offset of every node of the parse of `query` points at that node's text:
/// a selector's name (or `{`), a call's or aggregation's name, a parenthesis, a sign or
/// digit, a string's quote; a binary expression at its left operand, a matrix selector at its
/// selector, a subquery at its expression. Returns the offsets.
fn check(query: &str) -> (Expr, HashMap<usize, usize>) {
    let expr = parse(query).unwrap_or_else(|e| panic!("{query:?}: {e}"));
    let starts = starts(query, &expr).unwrap_or_else(|| panic!("{query:?}: not located"));
    for n in nodes(&expr) {
        let at = *starts.get(&node_key(n)).unwrap_or_else(|| panic!("{query:?}: {n} not located"));
        let text = &query[at..];
        let ok = match n {
            Expr::VectorSelector(vs) => text.starts_with(vs.name.as_deref().unwrap_or("{")) || text.starts_with('{'),
            Expr::MatrixSelector(ms) => {
                starts.get(&key(&ms.vs)).is_none_or(|&s| s == at)
                    && (text.starts_with(ms.vs.name.as_deref().unwrap_or("{")) || text.starts_with('{'))
            }
            Expr::Call(c) => text.starts_with(c.func.name) || text.starts_with('+'),
            Expr::Aggregate(a) => text.to_ascii_lowercase().starts_with(&a.op.to_string()) || text.starts_with('+'),
            Expr::Paren(_) => text.starts_with(['(', '+']),
            Expr::Unary(_) => text.starts_with('-'),
            Expr::NumberLiteral(_) => text.starts_with(|c: char| c.is_ascii_digit() || "+-.".contains(c)),
            Expr::StringLiteral(_) => text.starts_with(['"', '\'', '`']),
            Expr::Binary(b) => starts.get(&node_key(&b.lhs)) == Some(&at),
            Expr::Subquery(s) => starts.get(&node_key(&s.expr)) == Some(&at),
            Expr::Extension(_) => false,
        };
        assert!(ok, "{query:?}: {n} located at {at} ({text:?})");
    }
    (expr, starts)
}

/// The position `locate` gives `spot` of the first node of the parse of `query` for which
/// `pick` holds.
fn spot_of(query: &str, pick: impl Fn(&Expr) -> bool, spot: Spot) -> Option<String> {
    let (expr, _) = check(query);
    let positions = locate(query, &expr);
    let n = nodes(&expr).into_iter().find(|n| pick(n)).expect("a node");
    positions.of(node_key(n), spot).map(|p| p.to_string())
}

fn call(name: &'static str) -> impl Fn(&Expr) -> bool {
    move |e| matches!(e, Expr::Call(c) if c.func.name == name)
}

#[test]
fn positions_are_counted_as_go_does() {
    assert_eq!(Position::at("abc", 0).to_string(), "1:1");
    assert_eq!(Position::at("abc", 2).to_string(), "1:3");
    assert_eq!(Position::at("a\nbc", 2).to_string(), "2:1");
    assert_eq!(Position::at("a\n\nbc", 4).to_string(), "3:2");
    // Columns are bytes: `ü` is two, `€` three.
    assert_eq!(Position::at("{a=\"ü\"} + b", 11).to_string(), "1:12");
    assert_eq!(Position::at("x\n\"€\" b", 8).to_string(), "2:7");
}

#[test]
fn annotations_point_where_prometheus_points() {
    // The examples of Prometheus' test scripts.
    let q = "histogram_count(delta(hist_counter[1m] smoothed))";
    assert_eq!(spot_of(q, call("delta"), Spot::Subject).as_deref(), Some("1:23"));
    let q = "histogram_quantile(0.8, series)";
    assert_eq!(spot_of(q, call("histogram_quantile"), Spot::Subject).as_deref(), Some("1:25"));
    assert_eq!(spot_of(q, call("histogram_quantile"), Spot::Param).as_deref(), Some("1:20"));
    let q = "histogram_fraction(-Inf, 1, series)";
    assert_eq!(spot_of(q, call("histogram_fraction"), Spot::Subject).as_deref(), Some("1:29"));
    let q = "histogram_quantiles(series, \"q\", 0.1, 0.2)";
    assert_eq!(spot_of(q, call("histogram_quantiles"), Spot::Subject).as_deref(), Some("1:21"));
    assert_eq!(spot_of(q, call("histogram_quantiles"), Spot::Arg(3)).as_deref(), Some("1:39"));
    let q = "count(limit_ratio(1.1, http_requests) and http_requests)";
    let limit = |e: &Expr| matches!(e, Expr::Aggregate(a) if a.op.to_string() == "limit_ratio");
    assert_eq!(spot_of(q, limit, Spot::Param).as_deref(), Some("1:19"));
    assert_eq!(spot_of(q, limit, Spot::Node).as_deref(), Some("1:7"));
    let q = "histogram_count(sum(metric))";
    let sum = |e: &Expr| matches!(e, Expr::Aggregate(_));
    assert_eq!(spot_of(q, sum, Spot::Subject).as_deref(), Some("1:21"));
    let q = "metric{series=\"2\"} + ignoring (series) metric{series=\"3\"}";
    assert_eq!(spot_of(q, |e| matches!(e, Expr::Binary(_)), Spot::Subject).as_deref(), Some("1:1"));
    let q = "sum(sort(series))";
    assert_eq!(spot_of(q, call("sort"), Spot::Node).as_deref(), Some("1:5"));
}

#[test]
fn rewritten_queries_keep_their_original_positions() {
    // Duration expressions, extended selectors, trim operators, info selectors, byte escapes,
    // comments, line breaks and non-ASCII text before the node.
    let cases = [
        ("rate(foo[1m+30s])", "rate", "1:6"),
        ("rate(foo[2m*(10+5)] anchored) + rate(bar[5m] smoothed)", "rate", "1:6"),
        ("deriv(foo[5m] offset (20*7s))", "deriv", "1:7"),
        ("max_over_time(rate(foo[5m])[30m+step():1m])", "rate", "1:20"),
        ("abs(foo offset -min_of(step(), 1s))", "abs", "1:5"),
        ("info(up{a=\"\\xc3\\x85\"}, {data=~\".*\"})", "info", "1:6"),
        ("abs(h </ on(a) group_left(b) (c + 1))", "abs", "1:5"),
        ("# a comment with \"quotes\" and rate(\n  rate(\n    foo[5m]\n  )", "rate", "3:5"),
        ("sum by (\"ü\") (x{a=\"€€\"}) + rate(y[5m])", "rate", "1:38"),
        ("x{a=\"\\xff\\\"\"} / delta(\ny{b='\\x80'}[1m])", "delta", "2:1"),
        ("+abs(foo)", "abs", "1:6"),
    ];
    for (q, f, want) in cases {
        assert_eq!(spot_of(q, call(f), Spot::Subject).as_deref(), Some(want), "{q}");
    }
    // A unary plus makes no node, but Prometheus' node starts at the sign.
    assert_eq!(spot_of("+abs(foo)", call("abs"), Spot::Node).as_deref(), Some("1:1"));
}

#[test]
fn a_tree_of_another_text_gets_no_positions() {
    let expr = parse("rate(foo[5m])").unwrap();
    assert!(locate("rate(bar[5m])", &expr).is_empty());
    assert!(locate("rate(foo[5m]) + 1", &expr).is_empty());
    assert!(!locate("rate(foo[5m])", &expr).is_empty());
}

/// Queries of random shape, spacing and comments, through every rewrite.
fn query() -> impl Strategy<Value = String> {
    let sep = prop_oneof![4 => Just(" "), 1 => Just(""), 1 => Just("\n  "), 1 => Just(" # a \"comment\"\n")];
    let name = prop_oneof![Just("foo"), Just("bar_total"), Just("job:rate5m"), Just("smoothed_x")];
    let matchers = prop_oneof![
        Just(""),
        Just("{a=\"b\"}"),
        Just("{a=\"ü €\", b!~'x.*'}"),
        Just("{a=\"\\xc3\\x85\"}"),
        Just("{a=\"}\\\"{\"}"),
    ];
    let selector =
        (name.clone(), matchers.clone(), prop_oneof![Just(""), Just(" offset 5m"), Just(" @ 100"), Just(" smoothed")])
            .prop_map(|(n, m, modifier)| format!("{n}{m}{modifier}"));
    let range = (
        name,
        matchers,
        prop_oneof![Just("[5m]"), Just("[1m+30s]"), Just("[2m*(1+1)] anchored"), Just("[5m] smoothed")],
    )
        .prop_map(|(n, m, r)| format!("{n}{m}{r}"));
    let info = selector.clone().prop_map(|s| format!("info({s}, {{k=~\".*\"}})"));
    let nested_info = selector.clone().prop_map(|s| format!("info(info({s}, {{k=~\".*\"}}), {{k=~\".*\"}})"));
    let leaf = prop_oneof![
        4 => selector,
        1 => info,
        1 => nested_info,
        2 => (range.clone(), sep.clone()).prop_map(|(r, s)| format!("rate({s}{r}{s})")),
        1 => range.prop_map(|r| format!("delta({r})")),
        1 => Just("{__name__=\"up\"}".to_string()),
    ];
    leaf.prop_recursive(4, 24, 3, move |inner| {
        let s = sep.clone();
        prop_oneof![
            (inner.clone(), s.clone()).prop_map(|(e, s)| format!("abs({s}{e})")),
            (inner.clone(), s.clone()).prop_map(|(e, s)| format!("histogram_quantile(0.9,{s}{e})")),
            (inner.clone(), s.clone()).prop_map(|(e, s)| format!("sum by (a){s}({e})")),
            (inner.clone(), s.clone()).prop_map(|(e, s)| format!("topk(-3,{s}{e}) without (b)")),
            (inner.clone(), inner.clone(), s.clone()).prop_map(|(a, b, s)| format!("({a}{s}+ on(c) group_left {b})")),
            (inner.clone(), inner.clone(), s.clone()).prop_map(|(a, b, s)| format!("({a} and {s}{b})")),
            (inner.clone(), s.clone()).prop_map(|(e, s)| format!("({e} </{s}5)")),
            (inner.clone(), s.clone()).prop_map(|(e, s)| format!("-{s}({e})")),
            (inner.clone(), s.clone()).prop_map(|(e, s)| format!("max_over_time({s}({e})[10m:1m])")),
            (inner, s).prop_map(|(e, s)| format!("label_replace({e},{s}\"d\", \"$1\", \"a\", \"(.*)\")")),
        ]
    })
}

proptest! {
    /// Every node of every generated query is located at its own text in the original query.
    #[test]
    fn every_node_is_located_at_its_text(q in query()) {
        // A few shapes are refused by the parser (e.g. `info` of a scalar): not this test's concern.
        prop_assume!(parse(&q).is_ok());
        check(&q);
    }
}
