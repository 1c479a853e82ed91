//! `info(v [, {data label matchers}])` (Prometheus 3): adds to each series of `v` the labels of
//! the info series (`target_info` by default) that share its identifying labels (`instance`,
//! `job`).
//!
//! - The second argument picks the info metrics (its `__name__` matchers; only negative ones
//!   mean "any `*_info` metric but these") and the data labels to add (its other matchers: only
//!   those labels, from info series matching them). Without it, every label of `target_info`.
//! - A series of `v` that is itself an info metric is passed through unchanged.
//! - Labels the series already has are kept; two info series giving one label two values is an
//!   error (`conflicting label`), as are two info series of one metric and identity with
//!   samples at the same time; otherwise the newest sample's series wins.
//! - A series no info series matches is kept unchanged, unless a data label matcher does not
//!   match the empty value: then it is dropped.
//!
//! The evaluator loads the info series with the query (in its preload), keyed by the
//! first argument's node, over the first argument's time range (its first selector's `@` and
//! `offset`) plus the lookback delta, and hands them to [`join`] with the first argument's value
//! at each step; each one's latest sample in the lookback window counts.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap};

use promql_parser::parser::VectorSelector;

use crate::labels::{Label, Labels, METRIC_NAME};
use crate::matcher::{MatchOp, Matcher};
use crate::promql::error::{EvalError, Result};
use crate::promql::value::Elem;
use crate::sample::{is_stale_marker, SeriesSamples};

/// A matcher [`mark_selectors`] adds to the label selector of an info call, which may hold only
/// matchers of the empty value (`{data=~".*"}`): the parser refuses such a selector anywhere
/// else. Ignored by [`InfoSelection::of`].
const SELECTOR_MARKER: &str = "__saltdb_info_selector__";

/// Adds [`SELECTOR_MARKER`] to the label selector (second argument) of every `info(...)` call
/// of `query`, so that the parser accepts one whose matchers all match the empty value.
pub(crate) fn mark_selectors(query: &str) -> Cow<'_, str> {
    use crate::promql::extended::{closing, last_non_space, skip_string};
    if !query.contains("info") {
        return Cow::Borrowed(query);
    }
    let b = query.as_bytes();
    let mut inserts: Vec<(usize, String)> = Vec::new();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            q @ (b'"' | b'\'' | b'`') => i = skip_string(b, i, q),
            b'#' => i = b[i..].iter().position(|&c| c == b'\n').map_or(b.len(), |p| i + p),
            c if c.is_ascii_alphabetic() || c == b'_' || c == b':' => {
                let start = i;
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] == b':') {
                    i += 1;
                }
                let open = i + b[i..].iter().take_while(|c| c.is_ascii_whitespace()).count();
                if &query[start..i] != "info" || b.get(open) != Some(&b'(') {
                    continue;
                }
                // The top-level comma of the call, then the selector's braces after it.
                let (mut j, mut depth) = (open + 1, 0usize);
                let comma = loop {
                    match b.get(j) {
                        None => break None,
                        Some(&q @ (b'"' | b'\'' | b'`')) => {
                            j = skip_string(b, j, q);
                            continue;
                        }
                        Some(b'#') => {
                            j = b[j..].iter().position(|&c| c == b'\n').map_or(b.len(), |p| j + p);
                            continue;
                        }
                        Some(b'(' | b'[' | b'{') => depth += 1,
                        Some(b')' | b']' | b'}') if depth == 0 => break None,
                        Some(b')' | b']' | b'}') => depth -= 1,
                        Some(b',') if depth == 0 => break Some(j),
                        _ => {}
                    }
                    j += 1;
                };
                let Some(comma) = comma else { continue };
                let brace = comma + 1 + b[comma + 1..].iter().take_while(|c| c.is_ascii_whitespace()).count();
                if b.get(brace) != Some(&b'{') {
                    continue;
                }
                let end = closing(b, brace, b'}');
                let before = last_non_space(b, end);
                let sep =
                    if matches!(before.checked_sub(1).and_then(|p| b.get(p)), Some(b'{' | b',')) { "" } else { "," };
                inserts.push((end, format!("{sep}{SELECTOR_MARKER}=\"1\"")));
            }
            _ => i += 1,
        }
    }
    if inserts.is_empty() {
        return Cow::Borrowed(query);
    }
    // An info call inside another's first argument is found after the outer one, but its
    // selector comes first in the text.
    inserts.sort_by_key(|&(at, _)| at);
    let mut out = String::with_capacity(query.len() + inserts.len() * 32);
    let mut copied = 0;
    for (at, text) in inserts {
        out.push_str(&query[copied..at]);
        out.push_str(&text);
        copied = at;
    }
    out.push_str(&query[copied..]);
    Cow::Owned(out)
}

/// The info metric used when the call names none.
const TARGET_INFO: &str = "target_info";
/// The labels an info series and a series must share to be joined.
const IDENTIFYING: [&str; 2] = ["instance", "job"];

/// What an info call selects, from its second argument.
pub(crate) struct InfoSelection {
    /// `__name__` matchers an info metric's name passes, all of them.
    names: Vec<Matcher>,
    /// Data label matchers by label name (not `__name__`).
    data: BTreeMap<String, Vec<Matcher>>,
}

impl InfoSelection {
    /// The selection of an info call whose second argument is the label selector `selector`
    /// (`None` without one).
    ///
    /// # Errors
    /// A matcher that does not compile.
    pub(crate) fn of(selector: Option<&VectorSelector>) -> Result<Self> {
        let mut names = Vec::new();
        let mut data: BTreeMap<String, Vec<Matcher>> = BTreeMap::new();
        if let Some(vs) = selector {
            if let Some(name) = &vs.name {
                names.push(Matcher::equal(METRIC_NAME, name.clone()));
            }
            for m in vs.matchers.matchers.iter().filter(|m| m.name != SELECTOR_MARKER) {
                let m = Matcher::from_parsed(m).map_err(|e| EvalError::bad(e.to_string()))?;
                if m.name == METRIC_NAME {
                    names.push(m);
                } else {
                    data.entry(m.name.clone()).or_default().push(m);
                }
            }
        }
        let positive = names.iter().any(|m| matches!(m.op, MatchOp::Equal | MatchOp::RegexMatch));
        if !positive {
            let any_info = if names.is_empty() {
                Matcher::equal(METRIC_NAME, TARGET_INFO)
            } else {
                Matcher::new(MatchOp::RegexMatch, METRIC_NAME, ".+_info").map_err(|e| EvalError::bad(e.to_string()))?
            };
            names.insert(0, any_info);
        }
        Ok(Self { names, data })
    }

    /// The matchers selecting the info series from storage.
    pub(crate) fn matchers(&self) -> Vec<Matcher> {
        self.names.iter().chain(self.data.values().flatten()).cloned().collect()
    }

    fn is_info_metric(&self, labels: &Labels) -> bool {
        let name = labels.metric_name().unwrap_or("");
        self.names.iter().all(|m| m.matches(name))
    }
}

/// `info(base, ...)` at one time: joins `base` (the first argument's value) with the info series
/// `sel` selects, of which `loaded` holds the samples, each counting with its latest sample in
/// `(lo, te]` (the lookback window at the first argument's time).
pub(crate) fn join(
    sel: &InfoSelection,
    base: Vec<Elem>,
    loaded: &[SeriesSamples],
    (lo, te): (i64, i64),
) -> Result<Vec<Elem>> {
    let names: BTreeSet<&str> = loaded.iter().filter_map(|s| s.labels.metric_name()).collect();
    let mut latest = Vec::new();
    for s in loaded {
        let idx = s.samples.partition_point(|p| p.timestamp_ms <= te);
        let float = idx.checked_sub(1).and_then(|i| s.samples.get(i));
        let idx = s.histograms.partition_point(|p| p.timestamp_ms <= te);
        let hist = idx.checked_sub(1).and_then(|i| s.histograms.get(i));
        // The newer of the two; a histogram is kept (to fail the join), never skipped.
        let newest = match (float, hist) {
            (_, Some(h)) if float.is_none_or(|f| h.timestamp_ms > f.timestamp_ms) => {
                (h.timestamp_ms, false, h.histogram.is_stale())
            }
            (Some(p), _) => (p.timestamp_ms, true, is_stale_marker(p.value)),
            _ => continue,
        };
        if let (ts, float, false) = newest {
            if ts > lo {
                latest.push((&s.labels, ts, float));
            }
        }
    }
    combine(sel, base, &names, &latest)
}

/// A series' identity towards info metric `name`: the name and its identifying labels.
type Signature<'a> = (&'a str, [Option<&'a str>; 2]);

fn signature<'a>(name: &'a str, labels: &'a Labels) -> Signature<'a> {
    (name, IDENTIFYING.map(|l| labels.get(l).filter(|v| !v.is_empty())))
}

/// An info series at one time: its labels, the time of its latest sample, and whether that
/// sample is a float (a native histogram is an error once the series is joined, as in
/// Prometheus).
type InfoPoint<'a> = (&'a Labels, i64, bool);

/// Joins `base` with the info series `info` of the info metrics `names` (see the module
/// documentation).
fn combine(sel: &InfoSelection, base: Vec<Elem>, names: &BTreeSet<&str>, info: &[InfoPoint<'_>]) -> Result<Vec<Elem>> {
    // Only info series whose identifying labels take values some series of `base` has count.
    let mut wanted: [BTreeSet<&str>; 2] = Default::default();
    for b in base.iter().filter(|b| !sel.is_info_metric(&b.labels)) {
        for (i, l) in IDENTIFYING.iter().enumerate() {
            if let Some(v) = b.labels.get(l).filter(|v| !v.is_empty()) {
                wanted[i].insert(v);
            }
        }
    }
    let mut by_signature: HashMap<Signature<'_>, (&Labels, i64)> = HashMap::new();
    if wanted.iter().any(|w| !w.is_empty()) {
        for &(labels, ts, float) in info {
            let eligible = IDENTIFYING
                .iter()
                .zip(&wanted)
                .all(|(l, w)| w.is_empty() || labels.get(l).is_some_and(|v| w.contains(v)));
            if !eligible {
                continue;
            }
            if !float {
                return Err(EvalError::exec("info sample should be float"));
            }
            let sig = signature(labels.metric_name().unwrap_or(""), labels);
            match by_signature.get(&sig) {
                Some(&(_, had)) if had > ts => {}
                Some(&(existing, had)) if had == ts => {
                    return Err(EvalError::exec(format!(
                        "found duplicate series for info metric: existing {existing} @ {had}, new {labels} @ {ts}"
                    )));
                }
                _ => {
                    by_signature.insert(sig, (labels, ts));
                }
            }
        }
    }
    let data_matches_empty = sel.data.values().flatten().all(Matcher::matches_empty);
    let mut out = Vec::with_capacity(base.len());
    for b in base {
        if sel.is_info_metric(&b.labels) {
            out.push(b);
            continue;
        }
        let mut added: BTreeMap<&str, &str> = BTreeMap::new();
        let mut matched = false;
        for name in names {
            let Some((info_labels, _)) = by_signature.get(&signature(name, &b.labels)) else { continue };
            matched = true;
            for l in info_labels.iter() {
                if l.name == METRIC_NAME || (!sel.data.is_empty() && !sel.data.contains_key(&l.name)) {
                    continue;
                }
                if added.get(l.name.as_str()).is_some_and(|v| *v != l.value) {
                    return Err(EvalError::exec(format!("conflicting label: {}", l.name)));
                }
                if b.labels.get(&l.name).is_some() {
                    continue;
                }
                added.insert(&l.name, &l.value);
            }
        }
        if !matched && !data_matches_empty {
            continue;
        }
        if added.is_empty() {
            out.push(b);
            continue;
        }
        let mut labels: Vec<Label> = b.labels.iter().cloned().collect();
        labels.extend(added.into_iter().map(|(n, v)| Label::new(n, v)));
        out.push(Elem::new(Labels::from_trusted(labels), b.value, b.drop_name));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        Labels::from_pairs(pairs.iter().copied()).unwrap()
    }

    fn selection(data: &[(&str, MatchOp, &str)]) -> InfoSelection {
        let mut data_map: BTreeMap<String, Vec<Matcher>> = BTreeMap::new();
        let mut names = Vec::new();
        for &(n, op, v) in data {
            let m = Matcher::new(op, n, v).unwrap();
            if n == METRIC_NAME {
                names.push(m);
            } else {
                data_map.entry(n.to_owned()).or_default().push(m);
            }
        }
        if names.is_empty() {
            names.push(Matcher::equal(METRIC_NAME, TARGET_INFO));
        }
        InfoSelection { names, data: data_map }
    }

    #[test]
    fn joins_on_identifying_labels_and_keeps_the_series_own_labels() {
        let target = labels(&[("__name__", "target_info"), ("instance", "a"), ("job", "1"), ("data", "info")]);
        let names: BTreeSet<&str> = ["target_info"].into();
        let base = vec![
            Elem::new(labels(&[("__name__", "m"), ("instance", "a"), ("job", "1")]), 1.0, false),
            Elem::new(labels(&[("__name__", "m"), ("instance", "a"), ("job", "2")]), 2.0, false),
            Elem::new(labels(&[("__name__", "m"), ("instance", "a"), ("job", "1"), ("data", "base")]), 3.0, false),
        ];
        let out = combine(&selection(&[]), base.clone(), &names, &[(&target, 10, true)]).unwrap();
        let shown: Vec<String> = out.iter().map(|e| e.labels.to_string()).collect();
        assert_eq!(
            shown,
            [
                r#"m{data="info", instance="a", job="1"}"#,
                r#"m{instance="a", job="2"}"#,
                r#"m{data="base", instance="a", job="1"}"#
            ]
        );
        // A data matcher not matching "" drops the series no info series matched.
        let out =
            combine(&selection(&[("data", MatchOp::RegexMatch, ".+")]), base, &names, &[(&target, 10, true)]).unwrap();
        assert_eq!(out.len(), 2);
    }

    #[test]
    fn selectors_of_info_calls_are_marked() {
        let m = |q: &str| mark_selectors(q).into_owned();
        assert_eq!(
            m(r#"info(metric, {data=~".*"})"#),
            format!(r#"info(metric, {{data=~".*",{SELECTOR_MARKER}="1"}})"#)
        );
        assert_eq!(m("info(rate(m[5m]), {})"), format!(r#"info(rate(m[5m]), {{{SELECTOR_MARKER}="1"}})"#));
        // Nested calls: the inner selector comes first in the text, though found second.
        assert_eq!(
            m(r#"info(info(foo, {k=~".*"}), {k=~".*"})"#),
            format!(r#"info(info(foo, {{k=~".*",{SELECTOR_MARKER}="1"}}), {{k=~".*",{SELECTOR_MARKER}="1"}})"#)
        );
        // A comment inside a call is skipped, brackets and commas in it included.
        assert_eq!(m("info(metric # (a, b\n, {})"), format!("info(metric # (a, b\n, {{{SELECTOR_MARKER}=\"1\"}})"));
        for q in ["info(metric)", "sum(info)", r#"m{a="info(x, {})"}"#, "info_metric{a=\"b\"}"] {
            assert_eq!(m(q), q);
        }
    }

    #[test]
    fn duplicates_and_conflicts_are_errors() {
        let names: BTreeSet<&str> = ["target_info"].into();
        let a = labels(&[("__name__", "target_info"), ("instance", "a"), ("job", "1"), ("data", "x")]);
        let b = labels(&[("__name__", "target_info"), ("instance", "a"), ("job", "1"), ("data", "y")]);
        let base = vec![Elem::new(labels(&[("__name__", "m"), ("instance", "a"), ("job", "1")]), 1.0, false)];
        let e = combine(&selection(&[]), base.clone(), &names, &[(&a, 5, true), (&b, 5, true)]).unwrap_err();
        assert!(e.to_string().contains("found duplicate series for info metric"), "{e}");
        // The newer one wins otherwise.
        let out = combine(&selection(&[]), base, &names, &[(&a, 5, true), (&b, 6, true)]).unwrap();
        assert_eq!(out[0].labels.get("data"), Some("y"));
        // An info series whose latest sample is a native histogram cannot be joined.
        let e = combine(&selection(&[]), vec![base_elem()], &names, &[(&a, 5, false)]).unwrap_err();
        assert_eq!(e.to_string(), "info sample should be float");
    }

    fn base_elem() -> Elem {
        Elem::new(labels(&[("__name__", "m"), ("instance", "a"), ("job", "1")]), 1.0, false)
    }
}
