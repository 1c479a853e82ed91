//! The rule groups' figures on `/metrics`, under Prometheus' own names so that dashboards and
//! alerts written for Prometheus' rule evaluation (the Prometheus mixin's
//! `PrometheusRuleFailures`, `PrometheusMissingRuleEvaluations`) work unchanged. Every series
//! has `rule_group="<file>;<group>"`, and the groups of a tenant (set through the ruler API as
//! that tenant, `--tenants`) `tenant="<tenant>"` as well.
//!
//! | Metric | Type |
//! |---|---|
//! | `prometheus_rule_evaluations_total` | counter |
//! | `prometheus_rule_evaluation_failures_total` | counter |
//! | `prometheus_rule_group_iterations_total` | counter (evaluated and missed) |
//! | `prometheus_rule_group_iterations_missed_total` | counter |
//! | `prometheus_rule_group_interval_seconds` | gauge |
//! | `prometheus_rule_group_last_duration_seconds` | gauge |
//! | `prometheus_rule_group_last_evaluation_timestamp_seconds` | gauge |
//! | `prometheus_rule_group_last_evaluation_samples` | gauge |
//! | `prometheus_rule_group_rules` | gauge |
//!
//! And, as in Prometheus, two summaries without labels over every group (see [`super::summary`]):
//!
//! | Metric | Quantiles |
//! |---|---|
//! | `prometheus_rule_evaluation_duration_seconds` (each rule's evaluation) | 0.5, 0.9, 0.99 |
//! | `prometheus_rule_group_duration_seconds` (each group's evaluation) | 0.01, 0.05, 0.5, 0.9, 0.99 |

use std::fmt::Write;

use super::group::GroupRun;
use super::summary::{EvaluationDurations, Summary, GROUP_QUANTILES, RULE_QUANTILES};

type Figure = fn(&GroupRun) -> f64;

const FIGURES: &[(&str, &str, &str, Figure)] = &[
    ("prometheus_rule_evaluations_total", "counter", "The total number of rule evaluations.", |g| {
        g.rule_evaluations as f64
    }),
    ("prometheus_rule_evaluation_failures_total", "counter", "The total number of rule evaluation failures.", |g| {
        g.rule_failures as f64
    }),
    (
        "prometheus_rule_group_iterations_total",
        "counter",
        "The total number of scheduled rule group evaluations, whether executed or missed.",
        |g| (g.iterations + g.missed) as f64,
    ),
    (
        "prometheus_rule_group_iterations_missed_total",
        "counter",
        "The total number of rule group evaluations missed due to slow rule group evaluation.",
        |g| g.missed as f64,
    ),
    ("prometheus_rule_group_interval_seconds", "gauge", "The interval of a rule group.", |g| {
        g.interval_ms as f64 / 1000.0
    }),
    ("prometheus_rule_group_last_duration_seconds", "gauge", "The duration of the last rule group evaluation.", |g| {
        g.evaluation_seconds
    }),
    (
        "prometheus_rule_group_last_evaluation_timestamp_seconds",
        "gauge",
        "The timestamp of the last rule group evaluation in seconds.",
        |g| g.last_timestamp_ms.map_or(0.0, |t| t as f64 / 1000.0),
    ),
    (
        "prometheus_rule_group_last_evaluation_samples",
        "gauge",
        "The number of samples returned during the last rule group evaluation.",
        |g| g.last_samples as f64,
    ),
    ("prometheus_rule_group_rules", "gauge", "The number of rules.", |g| g.rules.len() as f64),
];

/// The summaries of `durations`, then the figures of `groups` (none when there are none), in
/// the text exposition format.
pub fn render(groups: &[std::sync::Arc<GroupRun>], durations: &EvaluationDurations) -> String {
    let mut out = String::new();
    summary(
        &mut out,
        "prometheus_rule_evaluation_duration_seconds",
        "The duration for a rule to execute.",
        &durations.rules,
        &RULE_QUANTILES,
    );
    summary(
        &mut out,
        "prometheus_rule_group_duration_seconds",
        "The duration of rule group evaluations.",
        &durations.groups,
        &GROUP_QUANTILES,
    );
    if groups.is_empty() {
        return out;
    }
    for (name, kind, help, figure) in FIGURES {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for g in groups {
            let key = format!("{};{}", g.group.file, g.group.name);
            let tenant = g.group.tenant.as_ref().map(|t| format!(",tenant=\"{}\"", escape(t.as_str())));
            let _ =
                writeln!(out, "{name}{{rule_group=\"{}\"{}}} {}", escape(&key), tenant.unwrap_or_default(), figure(g));
        }
    }
    out
}

/// One summary family: its quantiles, `_sum` and `_count`.
fn summary(out: &mut String, name: &str, help: &str, s: &Summary, quantiles: &[f64]) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} summary");
    for (q, v) in quantiles.iter().zip(s.quantiles(quantiles)) {
        let _ = writeln!(out, "{name}{{quantile=\"{q}\"}} {}", number(v));
    }
    let _ = writeln!(out, "{name}_sum {}\n{name}_count {}", number(s.sum()), s.count());
}

/// A sample value as the text format spells it (`NaN`, `+Inf`, `-Inf`).
fn number(v: f64) -> String {
    if v.is_nan() {
        "NaN".to_owned()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.to_owned()
    } else {
        v.to_string()
    }
}

/// A label value escaped for the text format.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::file::Group;
    use std::collections::BTreeMap;

    #[test]
    fn each_figure_has_one_series_per_group() {
        let g = Group {
            name: "g\"1".into(),
            file: "r.yml".into(),
            interval_ms: Some(30_000),
            query_offset_ms: None,
            limit: 0,
            labels: BTreeMap::new(),
            rules: Vec::new(),
            tenant: None,
        };
        let mut run = GroupRun::new(g, 60_000, 0);
        run.missed = 2;
        run.iterations = 5;
        let text = render(&[std::sync::Arc::new(run.clone())], &EvaluationDurations::default());
        assert!(text.contains("prometheus_rule_group_iterations_total{rule_group=\"r.yml;g\\\"1\"} 7\n"), "{text}");
        assert!(text.contains("prometheus_rule_group_interval_seconds{rule_group=\"r.yml;g\\\"1\"} 30\n"), "{text}");
        let mut theirs = GroupRun::new(
            Group { tenant: Some(crate::tenant::TenantId::parse("team-a").unwrap()), ..run.group.clone() },
            60_000,
            0,
        );
        theirs.iterations = 1;
        let text = render(&[std::sync::Arc::new(run), std::sync::Arc::new(theirs)], &EvaluationDurations::default());
        assert!(
            text.contains("prometheus_rule_group_iterations_total{rule_group=\"r.yml;g\\\"1\",tenant=\"team-a\"} 1\n"),
            "{text}"
        );
        assert_eq!(text.matches("# TYPE").count(), FIGURES.len() + 2);
    }

    #[test]
    fn the_summaries_are_there_without_groups() {
        let mut durations = EvaluationDurations::default();
        durations.rules.observe(0.5);
        durations.rules.observe(0.5);
        let text = render(&[], &durations);
        for line in [
            "# TYPE prometheus_rule_evaluation_duration_seconds summary\n",
            "prometheus_rule_evaluation_duration_seconds{quantile=\"0.99\"} 0.5\n",
            "prometheus_rule_evaluation_duration_seconds_sum 1\n",
            "prometheus_rule_evaluation_duration_seconds_count 2\n",
            "# TYPE prometheus_rule_group_duration_seconds summary\n",
            "prometheus_rule_group_duration_seconds{quantile=\"0.01\"} NaN\n",
            "prometheus_rule_group_duration_seconds_count 0\n",
        ] {
            assert!(text.contains(line), "{line} in:\n{text}");
        }
        assert!(!text.contains("rule_group="), "{text}");
    }
}
