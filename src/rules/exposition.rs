//! The rule groups' figures on `/metrics`, under Prometheus' own names so that dashboards and
//! alerts written for Prometheus' rule evaluation (the Prometheus mixin's
//! `PrometheusRuleFailures`, `PrometheusMissingRuleEvaluations`) work unchanged. Every series
//! has `rule_group="<file>;<group>"`.
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

use std::fmt::Write;

use super::group::GroupRun;

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

/// The figures of `groups` in the text exposition format (nothing when there are none).
pub fn render(groups: &[std::sync::Arc<GroupRun>]) -> String {
    let mut out = String::new();
    if groups.is_empty() {
        return out;
    }
    for (name, kind, help, figure) in FIGURES {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for g in groups {
            let key = format!("{};{}", g.group.file, g.group.name);
            let _ = writeln!(out, "{name}{{rule_group=\"{}\"}} {}", escape(&key), figure(g));
        }
    }
    out
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
        };
        let mut run = GroupRun::new(g, 60_000, 0);
        run.missed = 2;
        run.iterations = 5;
        let text = render(&[std::sync::Arc::new(run)]);
        assert!(text.contains("prometheus_rule_group_iterations_total{rule_group=\"r.yml;g\\\"1\"} 7\n"), "{text}");
        assert!(text.contains("prometheus_rule_group_interval_seconds{rule_group=\"r.yml;g\\\"1\"} 30\n"), "{text}");
        assert_eq!(text.matches("# TYPE").count(), FIGURES.len());
    }
}
