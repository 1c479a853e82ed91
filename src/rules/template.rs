//! Go text/template expansion of alerting rules' labels and annotations, with Prometheus'
//! template data (`$labels`, `$externalLabels`, `$externalURL`, `$value`) and functions.
//!
//! (Interface only; the engine lands with its tests.)

use std::collections::BTreeMap;

/// What a template sees.
#[derive(Debug, Clone, Copy)]
pub struct TemplateData<'a> {
    /// The alert's labels (`$labels`, `.Labels`).
    pub labels: &'a BTreeMap<String, String>,
    /// The server's external labels (`$externalLabels`).
    pub external_labels: &'a BTreeMap<String, String>,
    /// The server's external URL (`$externalURL`).
    pub external_url: &'a str,
    /// The alert's value (`$value`, `.Value`).
    pub value: f64,
}

/// One sample of a `query` function's answer.
#[derive(Debug, Clone, PartialEq)]
pub struct QuerySample {
    /// The series' labels, `__name__` included.
    pub labels: BTreeMap<String, String>,
    /// Its value.
    pub value: f64,
}

/// How a template's `query` function reaches the data: an instant query at the rule's
/// evaluation time.
pub trait TemplateQuery {
    /// The instant vector (a scalar as one sample without labels) of `expr`.
    ///
    /// # Errors
    /// The query's error, as text.
    fn query(&self, expr: &str) -> Result<Vec<QuerySample>, String>;
}

/// A template that failed to parse or to run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct TemplateError(pub String);

/// Expands `text`, named `name` in messages (Prometheus: `__alert_<alertname>`).
///
/// # Errors
/// A parse or execution error, worded as Go's text/template words it.
pub fn expand(
    name: &str,
    text: &str,
    data: &TemplateData<'_>,
    query: &dyn TemplateQuery,
) -> Result<String, TemplateError> {
    let _ = (name, data, query);
    Ok(text.to_owned())
}

/// Parses `text` without running it (rule file validation).
///
/// # Errors
/// The parse error.
pub fn check(name: &str, text: &str) -> Result<(), TemplateError> {
    let _ = (name, text);
    Ok(())
}
