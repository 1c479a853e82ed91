//! Go text/template expansion of alerting rules' labels and annotations, with Prometheus'
//! template data (`$labels`, `$externalLabels`, `$externalURL`, `$value`) and functions.
//!
//! As Prometheus' `rules/alerting.go` does, [`expand`] prefixes the text with
//! `{{$labels := .Labels}}{{$externalLabels := .ExternalLabels}}{{$externalURL := .ExternalURL}}{{$value := .Value}}`
//! and names it as given (`__alert_<alertname>`); error positions count the prefix, as
//! Prometheus' do. Map keys that are missing give the empty string (`missingkey=zero`).
//!
//! The engine is our own rather than the `gtmpl` crate (a Go template port): gtmpl words its
//! errors its own way (no `template: name:line:col: executing "name" at <...>:` form, which
//! users see in alert annotations), takes functions as bare `fn` pointers (so `query` would
//! need a thread-local), lacks `break`/`continue` and Go's `printf` verbs, and is unmaintained
//! since 2021. Ours follows Go's `text/template` (lexer, parser, executor) and `fmt` closely
//! enough to reproduce the outputs and error messages of Prometheus' `template_test.go`.
//!
//! - [`lex`], [`parse`], [`ast`]: Go's `text/template/parse`.
//! - [`exec`]: Go's executor: fields, variables, pipelines, calls, `if`/`with`/`range`/`template`.
//! - [`value`]: the Go values templates compute with.
//! - [`funcs`]: the function table and Prometheus' functions; [`builtins`]: Go's `len`,
//!   `index`, `slice`, comparisons and escapers; [`gofmt`]: Go's `fmt`; [`gotime`]: `time.Time`
//!   and `time.Duration`; [`strconv`]: Go's literals and quoting.
//!
//! Left out of Go's semantics: methods of `time.Time` other than the common ones (`Month`,
//! `Weekday`, `Truncate`, `In`, ... ), ranging over strings, functions and channels (none
//! exist here), `%x`/`%b` of floats and `%#g`, printing pointer addresses (a list of samples
//! prints its samples), regex classes `\d`, `\w`, `\s`, `\b` being Unicode-aware (Go's are
//! ASCII), and `sortByLabel` sorting a copy (Go sorts the query result in place). Limits Go has
//! not: 1 MiB of output (or of any string value), 1,000,000 execution steps, nesting of 100
//! control structures or parentheses, 100 nested template calls.

mod ast;
mod builtins;
mod exec;
mod funcs;
mod gofmt;
mod gotime;
mod lex;
mod parse;
mod strconv;
mod value;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_funcs;

use std::collections::BTreeMap;
use std::rc::Rc;

/// Nesting of control structures and parenthesized pipelines (parse), and of template calls.
const MAX_DEPTH: usize = 100;
/// The most bytes an expansion, or any string it computes, may have.
const MAX_OUTPUT: usize = 1 << 20;
/// The most nodes and commands an expansion may evaluate.
const MAX_STEPS: usize = 1_000_000;

/// The definitions Prometheus puts before an alert's label and annotation templates.
pub const PREAMBLE: &str =
    "{{$labels := .Labels}}{{$externalLabels := .ExternalLabels}}{{$externalURL := .ExternalURL}}{{$value := .Value}}";

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

    /// The evaluation time, in milliseconds since the epoch: what the template function `now`
    /// answers. By default the current time.
    fn timestamp_ms(&self) -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
    }
}

/// A template that failed to parse or to run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct TemplateError(pub String);

/// Expands `text`, named `name` in messages (Prometheus: `__alert_<alertname>`), after
/// [`PREAMBLE`].
///
/// # Errors
/// A parse or execution error, worded as Prometheus' `Expander.Expand` words it:
/// `error parsing template NAME: template: NAME:1: unclosed action`,
/// `error executing template NAME: template: NAME:1:40: executing "NAME" at <...>: ...`.
pub fn expand(
    name: &str,
    text: &str,
    data: &TemplateData<'_>,
    query: &dyn TemplateQuery,
) -> Result<String, TemplateError> {
    let full = format!("{PREAMBLE}{text}");
    let trees = parse::parse(name, &full).map_err(|e| TemplateError(format!("error parsing template {name}: {e}")))?;
    let data_value = value::Value::Data(Rc::new(value::Data {
        labels: Rc::new(data.labels.clone()),
        external_labels: Rc::new(data.external_labels.clone()),
        external_url: data.external_url.into(),
        value: data.value,
    }));
    let env = funcs::Env { query, external_url: data.external_url, now_ms: query.timestamp_ms() };
    exec::execute(&trees, name, &full, data_value, &env)
        .map_err(|e| TemplateError(format!("error executing template {name}: {e}")))
}

/// [`expand`], or on error what Prometheus puts in the label or annotation instead:
/// `<error expanding template: ...>`.
pub fn expand_or_error(name: &str, text: &str, data: &TemplateData<'_>, query: &dyn TemplateQuery) -> String {
    expand(name, text, data, query).unwrap_or_else(|e| format!("<error expanding template: {e}>"))
}

/// Parses `text` (after [`PREAMBLE`]) without running it (rule file validation).
///
/// # Errors
/// The parse error, as Go words it (`template: NAME:1: function "foo" not defined`).
pub fn check(name: &str, text: &str) -> Result<(), TemplateError> {
    parse::parse(name, &format!("{PREAMBLE}{text}")).map(|_| ()).map_err(TemplateError)
}
