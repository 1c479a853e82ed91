//! The rule file both targets evaluate: `groups` groups of `rules_per_group` recording rules, one
//! rule per metric of the fleet, each aggregating the metric's series (one per host) over 5 min.
//! Counters (even metrics) get `sum by (region) (rate(m[5m]))`, gauges (odd metrics)
//! `avg by (job) (avg_over_time(m[5m]))`.

use std::fmt::Write;

/// The window of every rule's range selector, in ms.
pub(super) const RANGE_MS: i64 = 300_000;

/// The shape of the rule file.
#[derive(Clone, Copy, Debug)]
pub(super) struct RuleSet {
    pub(super) groups: usize,
    pub(super) rules_per_group: usize,
    pub(super) interval_ms: i64,
}

impl RuleSet {
    pub(super) fn rules(self) -> usize {
        self.groups * self.rules_per_group
    }

    /// Name of group `g`.
    pub(super) fn group(g: usize) -> String {
        format!("bench-{g:02}")
    }

    /// The recorded series and expression of the rule over metric `m{i}`.
    pub(super) fn rule(i: usize) -> (String, String) {
        if i.is_multiple_of(2) {
            (format!("region:m{i}:rate5m"), format!("sum by (region) (rate(m{i}[5m]))"))
        } else {
            (format!("job:m{i}:avg_over_time5m"), format!("avg by (job) (avg_over_time(m{i}[5m]))"))
        }
    }

    /// A selector of every series the rules record.
    pub(super) const RECORDED: &'static str = "{__name__=~\"(region|job):m[0-9]+:.+\"}";

    /// The rule file's text.
    pub(super) fn yaml(self) -> String {
        let mut out = String::from("groups:\n");
        for g in 0..self.groups {
            let interval = match self.interval_ms % 1000 {
                0 => format!("{}s", self.interval_ms / 1000),
                _ => format!("{}ms", self.interval_ms),
            };
            let _ = writeln!(out, "  - name: {}\n    interval: {interval}\n    rules:", Self::group(g));
            for i in g * self.rules_per_group..(g + 1) * self.rules_per_group {
                let (record, expr) = Self::rule(i);
                let _ = writeln!(out, "      - record: {record}\n        expr: {expr}");
            }
        }
        out
    }

    /// The residues, modulo the interval, of the timestamps that fall exactly at the start of a
    /// rule's 5-minute window at one of the groups' slots (rule file at `path`). Prometheus 2.x
    /// includes a sample at exactly `t - 5m` and saltdb, as Prometheus 3, leaves it out; the
    /// data avoids these timestamps so that both compute over the same samples.
    pub(super) fn window_starts(self, path: &str) -> Vec<i64> {
        let interval_ns = self.interval_ms.max(1) * 1_000_000;
        let mut out: Vec<i64> = (0..self.groups)
            .map(|g| {
                let hash = saltdb::rules::slot::group_hash(path, &Self::group(g));
                let phase_ms = (hash % interval_ns.unsigned_abs()) as i64 / 1_000_000;
                (phase_ms - RANGE_MS).rem_euclid(self.interval_ms)
            })
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_has_every_rule_once_and_parses() {
        let set = RuleSet { groups: 3, rules_per_group: 4, interval_ms: 15_000 };
        let file = saltdb::rules::parse_file("rules.yml", set.yaml().as_bytes()).expect("a valid rule file");
        let rules: Vec<_> = file.groups.iter().flat_map(|g| &g.rules).collect();
        assert_eq!(rules.len(), 12);
        assert_eq!(file.groups[2].name, "bench-02");
        assert_eq!(file.groups[1].interval_ms, Some(15_000));
        assert_eq!(rules[11].expr, "avg by (job) (avg_over_time(m11[5m]))");
        assert!(set.window_starts("/x/rules.yml").iter().all(|r| (0..15_000).contains(r)));
    }
}
