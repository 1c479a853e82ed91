//! Prometheus' semantic checks of a decoded rule file (`RuleGroups.Validate`, `Rule.Validate`),
//! in its order and words, and the model built from a file that passes them.
//!
//! Prometheus walks labels and annotations in Go's random map order; here they come in name
//! order, so the errors of one rule always come in the same order.

use std::collections::HashSet;

use super::decode::{RawGroup, RawGroups, RawRule};
use super::error::{Position, Problem, RuleError, RuleProblem};
use super::{Group, NameValidation, Rule, RuleFile, RuleKind};
use crate::labels::{self, METRIC_NAME};

/// The template variables Prometheus defines before an alert's label or annotation template.
pub(super) const TEMPLATE_DEFINITIONS: &str =
    "{{$labels := .Labels}}{{$externalLabels := .ExternalLabels}}{{$externalURL := .ExternalURL}}{{$value := .Value}}";

/// Checks `raw` and builds the model of the file at `path`.
///
/// # Errors
/// Every problem found, in Prometheus' order.
pub(super) fn validate(path: &str, raw: RawGroups, names: NameValidation) -> Result<RuleFile, Vec<Problem>> {
    let mut problems = Vec::new();
    let mut seen = HashSet::new();
    for group in &raw.groups {
        if group.name.is_empty() {
            problems.push(Problem::EmptyGroupName { at: group.at });
        }
        if !seen.insert(group.name.as_str()) {
            problems.push(Problem::DuplicateGroup { at: group.at, name: group.name.clone() });
        }
        for (name, value) in &group.labels {
            if !valid_label_name(names, name) {
                problems.push(Problem::GroupLabelName(name.clone()));
            }
            if !valid_label_value(value) {
                problems.push(Problem::GroupLabelValue(value.clone()));
            }
        }
        for (index, rule) in group.rules.iter().enumerate() {
            problems.extend(check_rule(rule, names).into_iter().map(|(at, also_at, problem)| {
                Problem::Rule(Box::new(RuleError {
                    group: group.name.clone(),
                    rule: index + 1,
                    name: rule_name(rule),
                    at,
                    also_at,
                    problem,
                }))
            }));
        }
    }
    if problems.is_empty() {
        Ok(RuleFile { path: path.to_owned(), groups: raw.groups.into_iter().map(|g| build_group(path, g)).collect() })
    } else {
        Err(problems)
    }
}

/// The rule's name in messages: its `alert`, else its `record`.
fn rule_name(rule: &RawRule) -> String {
    if rule.alert.value.is_empty() {
        rule.record.value.clone()
    } else {
        rule.alert.value.clone()
    }
}

/// A problem of a rule, with the positions Prometheus prints for it.
type Found = (Option<Position>, Option<Position>, RuleProblem);

/// Prometheus' `Rule.Validate`, in its order.
fn check_rule(rule: &RawRule, names: NameValidation) -> Vec<Found> {
    let mut found = Vec::new();
    let (record, alert) = (&rule.record, &rule.alert);
    if !record.value.is_empty() && !alert.value.is_empty() {
        found.push((Some(record.at), Some(alert.at), RuleProblem::RecordAndAlert));
    }
    if record.value.is_empty() && alert.value.is_empty() {
        found.push((Some(record.at), Some(alert.at), RuleProblem::NeitherRecordNorAlert));
    }
    if rule.expr.value.is_empty() {
        found.push((Some(rule.expr.at), None, RuleProblem::MissingExpr));
    } else if let Err(e) = crate::promql::parse(&rule.expr.value) {
        found.push((Some(rule.expr.at), None, RuleProblem::BadExpr(e.to_string())));
    }
    if !record.value.is_empty() {
        found.extend(recording_problems(rule, names).into_iter().map(|p| (Some(record.at), None, p)));
    }
    found.extend(name_problems(rule, names).into_iter().map(|p| (None, None, p)));
    found.extend(template_problems(rule).into_iter().map(|p| (None, None, p)));
    found
}

/// What a recording rule may not have, and its name.
fn recording_problems(rule: &RawRule, names: NameValidation) -> Vec<RuleProblem> {
    let record = &rule.record.value;
    let mut found = Vec::new();
    if !rule.annotations.is_empty() {
        found.push(RuleProblem::AnnotationsInRecordingRule);
    }
    if rule.for_ms != 0 {
        found.push(RuleProblem::ForInRecordingRule);
    }
    if rule.keep_firing_for_ms != 0 {
        found.push(RuleProblem::KeepFiringForInRecordingRule);
    }
    if !valid_metric_name(names, record) {
        found.push(RuleProblem::InvalidRecordName(record.clone()));
    }
    if record.contains(['{', '}']) {
        found.push(RuleProblem::BracesInRecordName(record.clone()));
    }
    found
}

/// Label names and values, and annotation names.
fn name_problems(rule: &RawRule, names: NameValidation) -> Vec<RuleProblem> {
    let mut found = Vec::new();
    for (name, value) in &rule.labels {
        if !valid_label_name(names, name) {
            found.push(RuleProblem::InvalidLabelName(name.clone()));
        }
        if !valid_label_value(value) {
            found.push(RuleProblem::InvalidLabelValue(value.clone()));
        }
    }
    for name in rule.annotations.keys() {
        if !valid_annotation_name(names, name) {
            found.push(RuleProblem::InvalidAnnotationName(name.clone()));
        }
    }
    found
}

/// An alerting rule's label and annotation templates that do not parse.
fn template_problems(rule: &RawRule) -> Vec<RuleProblem> {
    let alert = &rule.alert.value;
    if alert.is_empty() {
        return Vec::new();
    }
    let template = format!("__alert_{alert}");
    let parses = |text: &str| crate::rules::template::check(&template, &format!("{TEMPLATE_DEFINITIONS}{text}"));
    let labels = rule.labels.iter().filter_map(|(name, text)| {
        parses(text).err().map(|e| RuleProblem::LabelTemplate { name: name.clone(), error: e.to_string() })
    });
    let annotations = rule.annotations.iter().filter_map(|(name, text)| {
        parses(text).err().map(|e| RuleProblem::AnnotationTemplate { name: name.clone(), error: e.to_string() })
    });
    labels.chain(annotations).collect()
}

/// A label name: any non-empty UTF-8 without the byte 0x00 (what saltdb stores), or
/// `[a-zA-Z_][a-zA-Z0-9_]*` under legacy validation; never `__name__`.
fn valid_label_name(names: NameValidation, name: &str) -> bool {
    let valid = match names {
        NameValidation::Utf8 => labels::is_storable_label_name(name),
        NameValidation::Legacy => labels::is_valid_label_name(name),
    };
    valid && name != METRIC_NAME
}

/// An annotation name: a label name, `__name__` included.
fn valid_annotation_name(names: NameValidation, name: &str) -> bool {
    match names {
        NameValidation::Utf8 => labels::is_storable_label_name(name),
        NameValidation::Legacy => labels::is_valid_label_name(name),
    }
}

/// A metric name: any non-empty UTF-8 without the byte 0x00, or `[a-zA-Z_:][a-zA-Z0-9_:]*`
/// under legacy validation.
fn valid_metric_name(names: NameValidation, name: &str) -> bool {
    match names {
        NameValidation::Utf8 => labels::is_storable_label_name(name),
        NameValidation::Legacy => labels::is_legacy_metric_name(name),
    }
}

/// A label value saltdb can store: without the byte 0x00.
fn valid_label_value(value: &str) -> bool {
    !value.contains('\0')
}

fn build_group(path: &str, raw: RawGroup) -> Group {
    Group {
        name: raw.name,
        file: path.to_owned(),
        interval_ms: (raw.interval_ms != 0).then_some(raw.interval_ms),
        query_offset_ms: raw.query_offset_ms,
        // Prometheus limits only above zero: a negative limit is no limit.
        limit: usize::try_from(raw.limit).unwrap_or(0),
        labels: raw.labels,
        rules: raw.rules.into_iter().map(build_rule).collect(),
        tenant: None,
    }
}

fn build_rule(raw: RawRule) -> Rule {
    let kind = if raw.record.value.is_empty() {
        RuleKind::Alerting {
            alert: raw.alert.value,
            for_ms: raw.for_ms,
            keep_firing_for_ms: raw.keep_firing_for_ms,
            annotations: raw.annotations,
        }
    } else {
        RuleKind::Recording { record: raw.record.value }
    };
    Rule { kind, expr: raw.expr.value, labels: raw.labels, line: raw.at.line }
}
