//! Rule files: the groups and rules of Prometheus' rule file format (`rulefmt`).
//!
//! A file holds `groups`; each group has a name unique in its file, an optional evaluation
//! `interval`, `query_offset` and `limit`, optional group `labels`, and its rules in order.
//! A rule is either recording (`record`) or alerting (`alert`), never both.

use std::collections::BTreeMap;

/// A parsed, validated rule file.
#[derive(Debug, Clone, PartialEq)]
pub struct RuleFile {
    /// The path the file was read from, as given (Prometheus' `file` of a group).
    pub path: String,
    /// Groups in file order; names are unique within the file.
    pub groups: Vec<Group>,
}

/// A rule group: rules evaluated in order at one timestamp per tick.
#[derive(Debug, Clone, PartialEq)]
pub struct Group {
    /// Unique within its file.
    pub name: String,
    /// The file the group came from, as given.
    pub file: String,
    /// Evaluation interval in milliseconds; `None`: the global evaluation interval.
    pub interval_ms: Option<i64>,
    /// How far back of the evaluation time the rules' queries are evaluated, in milliseconds;
    /// `None`: the global rule query offset.
    pub query_offset_ms: Option<i64>,
    /// Most series (alerts, for alerting rules) a rule may produce; 0 means no limit.
    pub limit: usize,
    /// Labels added to every rule's output, overridden by the rule's own labels.
    pub labels: BTreeMap<String, String>,
    /// Rules in file order.
    pub rules: Vec<Rule>,
}

/// One rule.
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    /// Recording or alerting, with what only that kind has.
    pub kind: RuleKind,
    /// The PromQL expression, as written.
    pub expr: String,
    /// Labels added to (or replacing those of) each output series; for alerting rules, Go
    /// templates.
    pub labels: BTreeMap<String, String>,
    /// The 1-based line of the rule in its file (for messages).
    pub line: usize,
}

/// What a rule produces.
#[derive(Debug, Clone, PartialEq)]
pub enum RuleKind {
    /// Writes the expression's result as series named `record`.
    Recording {
        /// The output metric name (a valid metric name).
        record: String,
    },
    /// Raises an alert named `alert` for each series of the expression's result.
    Alerting {
        /// The alert name (a valid label value).
        alert: String,
        /// How long a series must be present before the alert fires, in milliseconds.
        for_ms: i64,
        /// How long an alert keeps firing after its series disappears, in milliseconds.
        keep_firing_for_ms: i64,
        /// Go templates expanded per alert.
        annotations: BTreeMap<String, String>,
    },
}

impl Rule {
    /// The rule's name: `record` or `alert`.
    pub fn name(&self) -> &str {
        match &self.kind {
            RuleKind::Recording { record } => record,
            RuleKind::Alerting { alert, .. } => alert,
        }
    }
}
