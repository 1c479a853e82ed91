//! The unit test file of `promtool test rules`, as `saltdb test rules` reads it: rule files,
//! an evaluation interval, test groups with input series, expected alerts and expected query
//! answers. Unknown fields are refused, as promtool refuses them.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer};

/// A whole unit test file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UnitTestFile {
    /// Rule files (globs), relative to the test file's directory.
    #[serde(default)]
    pub rule_files: Vec<String>,
    /// Time between evaluations (default 1m).
    #[serde(default, deserialize_with = "duration")]
    pub evaluation_interval: Option<i64>,
    /// Group names in the order to evaluate them (groups not named come first).
    #[serde(default)]
    pub group_eval_order: Vec<String>,
    /// Compare floats as equal when they are at most one representable step apart.
    #[serde(default)]
    pub fuzzy_compare: bool,
    /// Test groups.
    #[serde(default)]
    pub tests: Vec<TestGroup>,
}

/// One test group: its own data, rules evaluated from time 0 (or `start_timestamp`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TestGroup {
    /// Time between input values (default: the evaluation interval).
    #[serde(default, deserialize_with = "duration")]
    pub interval: Option<i64>,
    /// Input series.
    #[serde(default)]
    pub input_series: Vec<InputSeries>,
    /// Expected firing alerts.
    #[serde(default)]
    pub alert_rule_test: Vec<AlertTest>,
    /// Expected answers of queries.
    #[serde(default)]
    pub promql_expr_test: Vec<ExprTest>,
    /// `$externalLabels` of templates.
    #[serde(default)]
    pub external_labels: BTreeMap<String, String>,
    /// `$externalURL` of templates.
    #[serde(default)]
    pub external_url: String,
    /// The group's name in messages.
    #[serde(default)]
    pub name: String,
    /// Time 0 of the group (RFC 3339 or Unix seconds; default the Unix epoch).
    #[serde(default, deserialize_with = "text")]
    pub start_timestamp: Option<String>,
}

/// One input series.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InputSeries {
    /// The series as a selector: `metric{label="value"}`.
    #[serde(deserialize_with = "required_text")]
    pub series: String,
    /// Its values in series notation.
    #[serde(default, deserialize_with = "text")]
    pub values: Option<String>,
}

/// Alerts expected at one evaluation time.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AlertTest {
    /// Offset from time 0.
    #[serde(default, deserialize_with = "duration")]
    pub eval_time: Option<i64>,
    /// The alert rule's name.
    #[serde(default)]
    pub alertname: String,
    /// The firing alerts expected (none: no alert fires).
    #[serde(default)]
    pub exp_alerts: Vec<ExpectedAlert>,
}

/// One expected alert.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExpectedAlert {
    /// Its labels, without `alertname`.
    #[serde(default)]
    pub exp_labels: BTreeMap<String, String>,
    /// Its annotations.
    #[serde(default)]
    pub exp_annotations: BTreeMap<String, String>,
}

/// A query's expected answer at one time.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExprTest {
    /// The expression.
    pub expr: String,
    /// Offset from time 0.
    #[serde(default, deserialize_with = "duration")]
    pub eval_time: Option<i64>,
    /// Expected samples, in any order.
    #[serde(default)]
    pub exp_samples: Vec<ExpectedSample>,
}

/// One expected sample.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExpectedSample {
    /// The series as a selector (empty: no labels).
    #[serde(default, deserialize_with = "text")]
    pub labels: Option<String>,
    /// The float value.
    #[serde(default)]
    pub value: f64,
    /// A native histogram in series notation (not read yet: such a sample fails its test).
    #[serde(default)]
    pub histogram: Option<String>,
}

/// A YAML scalar of any type, as the text Go's YAML decoder would give a string field.
#[derive(Deserialize)]
#[serde(untagged)]
enum Scalar {
    Text(String),
    Int(i64),
    Float(f64),
    Bool(bool),
}

impl Scalar {
    fn into_text(self) -> String {
        match self {
            Self::Text(s) => s,
            Self::Int(i) => i.to_string(),
            Self::Float(f) => f.to_string(),
            Self::Bool(b) => b.to_string(),
        }
    }
}

fn text<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Ok(Option::<Scalar>::deserialize(d)?.map(Scalar::into_text))
}

fn required_text<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Ok(Scalar::deserialize(d)?.into_text())
}

/// A Prometheus duration (`1m`, `1h30m`, `0`), in milliseconds.
fn duration<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    let Some(text) = text(d)? else { return Ok(None) };
    crate::duration::parse_ms(&text).map(Some).map_err(serde::de::Error::custom)
}
