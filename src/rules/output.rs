//! The series a recording rule writes: the answer's labels with `__name__` set to the rule's
//! `record` and the rule's labels applied (group labels first, the rule's own over them; an
//! empty value removes the label), refused when two outputs end up with one label set or the
//! group's limit is exceeded.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use crate::histogram::Histogram;
use crate::labels::{Label, Labels};

/// One sample of a rule's answer or output.
#[derive(Debug, Clone)]
pub struct OutputSample {
    /// Its labels.
    pub labels: Labels,
    /// The float value (0 for a histogram).
    pub value: f64,
    /// The native histogram, when it is one.
    pub histogram: Option<Arc<Histogram>>,
}

/// The labels a rule sets: the group's, then the rule's over them.
pub fn rule_labels(group: &BTreeMap<String, String>, rule: &BTreeMap<String, String>) -> Vec<(String, String)> {
    let mut merged = group.clone();
    merged.extend(rule.iter().map(|(k, v)| (k.clone(), v.clone())));
    merged.into_iter().collect()
}

/// `labels` with `set` applied: each pair replaces the label of its name; an empty value
/// removes it.
pub fn relabel(labels: &Labels, set: &[(String, String)]) -> Labels {
    let mut out: Vec<Label> = labels.iter().filter(|l| !set.iter().any(|(k, _)| *k == l.name)).cloned().collect();
    out.extend(set.iter().filter(|(_, v)| !v.is_empty()).map(|(k, v)| Label::new(k.clone(), v.clone())));
    Labels::from_trusted(out)
}

/// A recording rule's output from its answer.
///
/// # Errors
/// Prometheus' messages: two outputs with one label set, or more outputs than `limit` (0: no
/// limit).
pub fn recorded(
    answer: Vec<OutputSample>,
    record: &str,
    labels: &[(String, String)],
    limit: usize,
) -> Result<Vec<OutputSample>, String> {
    let mut set = Vec::with_capacity(labels.len() + 1);
    set.push(("__name__".to_owned(), record.to_owned()));
    set.extend(labels.iter().cloned());
    let mut seen = HashSet::with_capacity(answer.len());
    let mut out = Vec::with_capacity(answer.len());
    for s in answer {
        let labels = relabel(&s.labels, &set);
        if !seen.insert(labels.clone()) {
            return Err("vector contains metrics with the same labelset after applying rule labels".to_owned());
        }
        out.push(OutputSample { labels, ..s });
    }
    if limit > 0 && out.len() > limit {
        return Err(format!("exceeded limit of {limit} with {} series", out.len()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(pairs: &[(&str, &str)], value: f64) -> OutputSample {
        OutputSample { labels: Labels::from_pairs(pairs.iter().copied()).unwrap(), value, histogram: None }
    }

    fn set(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn the_record_name_and_rule_labels_replace_the_answers() {
        let answer = vec![sample(&[("__name__", "x"), ("job", "a"), ("drop", "me")], 1.0)];
        let out = recorded(answer, "job:x:sum", &set(&[("drop", ""), ("team", "t")]), 0).unwrap();
        assert_eq!(out[0].labels.to_string(), r#"job:x:sum{job="a", team="t"}"#);
    }

    #[test]
    fn rule_labels_override_group_labels() {
        let group = BTreeMap::from([("a".to_owned(), "g".to_owned()), ("b".to_owned(), "g".to_owned())]);
        let rule = BTreeMap::from([("b".to_owned(), "r".to_owned())]);
        assert_eq!(rule_labels(&group, &rule), set(&[("a", "g"), ("b", "r")]));
    }

    #[test]
    fn outputs_that_collide_are_refused() {
        let answer = vec![sample(&[("job", "a")], 1.0), sample(&[("job", "b")], 2.0)];
        let err = recorded(answer, "r", &set(&[("job", "same")]), 0).unwrap_err();
        assert_eq!(err, "vector contains metrics with the same labelset after applying rule labels");
    }

    #[test]
    fn more_series_than_the_limit_are_refused() {
        let answer = vec![sample(&[("job", "a")], 1.0), sample(&[("job", "b")], 2.0)];
        assert_eq!(recorded(answer.clone(), "r", &[], 1).unwrap_err(), "exceeded limit of 1 with 2 series");
        assert_eq!(recorded(answer, "r", &[], 2).unwrap().len(), 2);
    }
}
