//! The rule groups' figures read from a target's `/metrics`: the same names on saltdb and on
//! Prometheus, one series per group with `rule_group="<file>;<group>"`.

use std::collections::BTreeMap;

/// One group's figures at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(super) struct GroupFigures {
    /// `prometheus_rule_group_iterations_total`: scheduled, evaluated or missed.
    pub(super) iterations: f64,
    /// `prometheus_rule_group_iterations_missed_total`.
    pub(super) missed: f64,
    /// `prometheus_rule_evaluation_failures_total`.
    pub(super) failures: f64,
    /// `prometheus_rule_group_last_duration_seconds`.
    pub(super) last_duration: f64,
    /// `prometheus_rule_group_last_evaluation_timestamp_seconds` (changes with every evaluation).
    pub(super) last_evaluation: f64,
}

impl GroupFigures {
    /// Group evaluations carried out (scheduled less missed).
    pub(super) fn evaluated(&self) -> f64 {
        self.iterations - self.missed
    }
}

/// Every group's figures, by `rule_group`, from a `/metrics` text.
pub(super) fn parse(text: &str) -> BTreeMap<String, GroupFigures> {
    let mut out: BTreeMap<String, GroupFigures> = BTreeMap::new();
    for line in text.lines() {
        let Some((name, rest)) = line.split_once("{rule_group=\"") else { continue };
        let Some((group, value)) = rest.split_once("\"} ") else { continue };
        let Ok(value) = value.trim().parse::<f64>() else { continue };
        let figures = out.entry(group.to_owned()).or_default();
        match name {
            "prometheus_rule_group_iterations_total" => figures.iterations = value,
            "prometheus_rule_group_iterations_missed_total" => figures.missed = value,
            "prometheus_rule_evaluation_failures_total" => figures.failures = value,
            "prometheus_rule_group_last_duration_seconds" => figures.last_duration = value,
            "prometheus_rule_group_last_evaluation_timestamp_seconds" => figures.last_evaluation = value,
            _ => {}
        }
    }
    out
}

/// The change of each summed figure from `before` to `after`, over the groups of `after`.
pub(super) fn delta(
    before: &BTreeMap<String, GroupFigures>,
    after: &BTreeMap<String, GroupFigures>,
    figure: fn(&GroupFigures) -> f64,
) -> f64 {
    after.iter().map(|(g, a)| figure(a) - before.get(g).map_or(0.0, figure)).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_are_read_per_group() {
        let text = "# HELP x y\n\
            prometheus_rule_group_iterations_total{rule_group=\"/r.yml;bench-00\"} 12\n\
            prometheus_rule_group_iterations_missed_total{rule_group=\"/r.yml;bench-00\"} 2\n\
            prometheus_rule_group_last_duration_seconds{rule_group=\"/r.yml;bench-00\"} 1.5e-01\n\
            prometheus_rule_group_iterations_total{rule_group=\"/r.yml;bench-01\"} 3\n\
            prometheus_rule_evaluation_duration_seconds{quantile=\"0.5\"} 0.1\n";
        let f = parse(text);
        assert_eq!(f.len(), 2);
        let g = f["/r.yml;bench-00"];
        assert_eq!((g.evaluated(), g.last_duration), (10.0, 0.15));
        let before =
            BTreeMap::from([("/r.yml;bench-01".to_owned(), GroupFigures { iterations: 1.0, ..Default::default() })]);
        assert_eq!(delta(&before, &f, |g| g.iterations), 14.0);
    }
}
