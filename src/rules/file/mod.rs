//! Rule files: the groups and rules of Prometheus' rule file format (`rulefmt`).
//!
//! A file holds `groups`; each group has a name unique in its file, an optional evaluation
//! `interval`, `query_offset` and `limit`, optional group `labels`, and its rules in order.
//! A rule is either recording (`record`) or alerting (`alert`), never both.
//!
//! Files are read as Prometheus 3 reads them (`model/rulefmt`): the YAML is decoded as go-yaml
//! decodes it (unknown fields refused, anchors, aliases and merge keys), then validated, and
//! every problem is reported in Prometheus' words ([`RuleFileError`]). Names are checked as
//! UTF-8 by default ([`NameValidation`]).
//!
//! - [`parse`], [`parse_with`]: bytes; [`read`]: a path; [`load`], [`load_all`]: paths and
//!   globs, as Prometheus' `rule_files` (Go's `filepath.Glob`);
//! - [`check`]: `saltdb check rules`, as `promtool check rules`.
//!
//! The steps: `yaml` (node tree with positions) -> `decode` (go-yaml's decoding into the
//! Prometheus types) -> `validate` (Prometheus' checks, and the model).

use std::borrow::Cow;
use std::collections::BTreeMap;

use crate::tenant::{Scope, TenantId};

pub mod check;
mod decode;
mod duration;
mod error;
mod glob;
mod resolve;
#[cfg(test)]
mod tests;
mod validate;
mod yaml;

pub use error::{Position, Problem, RuleError, RuleFileError, RuleProblem};

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
    /// The tenant whose series alone the group reads and writes: a group set through the ruler
    /// API as that tenant. `None`: the group reads and writes every series (rule files, and
    /// every group of a server without `--tenants`).
    pub tenant: Option<TenantId>,
}

impl Group {
    /// What the group's queries read and its outputs are written as.
    pub fn scope(&self) -> Scope {
        self.tenant.clone().map_or(Scope::Unscoped, Scope::One)
    }

    /// The group's file as its identity among every tenant's groups (its evaluation slots,
    /// its saved alerts, what a reload keeps): `file` for a group of no tenant or of the
    /// default tenant (as before tenants), `<tenant>\0<file>` for another tenant's, so that two
    /// tenants' namespaces of one name are two groups (a namespace never holds `\0`).
    pub fn identity(&self) -> Cow<'_, str> {
        match &self.tenant {
            Some(t) if !t.is_default() => Cow::Owned(format!("{t}\0{}", self.file)),
            _ => Cow::Borrowed(&self.file),
        }
    }
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

/// How label, annotation and metric names are checked.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum NameValidation {
    /// Any non-empty UTF-8 (Prometheus 3's default), without the byte 0x00, which saltdb cannot
    /// store.
    #[default]
    Utf8,
    /// `[a-zA-Z_][a-zA-Z0-9_]*` for label and annotation names, `[a-zA-Z_:][a-zA-Z0-9_:]*` for
    /// metric names (Prometheus 2).
    Legacy,
}

/// How a rule file is read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ParseOptions {
    /// How names are checked.
    pub names: NameValidation,
    /// Accept fields Prometheus does not know (`promtool check rules --ignore-unknown-fields`).
    pub ignore_unknown_fields: bool,
}

/// Parses and validates the rule file `bytes`, read from `path` (named in the errors and the
/// groups), with the default [`ParseOptions`].
///
/// # Errors
/// Every problem found, as Prometheus reports them: one YAML or decoding error, or else all the
/// validation errors.
pub fn parse(path: &str, bytes: &[u8]) -> Result<RuleFile, Vec<RuleFileError>> {
    parse_with(path, bytes, &ParseOptions::default())
}

/// [`parse`] with `options`. Only the first YAML document is read; a warning is logged when
/// more follow, as Prometheus does.
///
/// # Errors
/// As [`parse`].
pub fn parse_with(path: &str, bytes: &[u8], options: &ParseOptions) -> Result<RuleFile, Vec<RuleFileError>> {
    let in_file = |problems: Vec<Problem>| -> Vec<RuleFileError> {
        problems.into_iter().map(|problem| RuleFileError { path: path.to_owned(), problem }).collect()
    };
    let doc = yaml::parse(bytes).map_err(|message| in_file(vec![Problem::Yaml(message)]))?;
    if doc.more_documents {
        tracing::warn!(
            file = path,
            "Multiple document yaml rules files are not supported, only the first document is processed"
        );
    }
    let raw = decode::decode(&doc, !options.ignore_unknown_fields).map_err(|e| {
        in_file(vec![match e {
            decode::DecodeError::Unmarshal(lines) => Problem::Unmarshal(lines),
            decode::DecodeError::Stopped(message) => Problem::Yaml(message),
        }])
    })?;
    validate::validate(path, raw, options.names).map_err(in_file)
}

/// Reads, parses and validates the rule file at `path` (Prometheus' `rulefmt.ParseFile`).
///
/// # Errors
/// As [`parse`], and the read error (`open x.yml: no such file or directory`).
pub fn read(path: &str, options: &ParseOptions) -> Result<RuleFile, Vec<RuleFileError>> {
    let bytes = std::fs::read(path)
        .map_err(|e| vec![RuleFileError { path: path.to_owned(), problem: Problem::Read(go_read_error(path, &e)) }])?;
    parse_with(path, &bytes, options)
}

/// The paths a `rule_files` entry names: a glob's matches in Go's order (none is not an error),
/// or a plain path as it is (read later, so that a missing one is an error).
///
/// # Errors
/// A malformed glob: `syntax error in pattern`.
pub fn expand(pattern_or_path: &str) -> Result<Vec<String>, RuleFileError> {
    if !glob::has_meta(pattern_or_path) {
        return Ok(vec![pattern_or_path.to_owned()]);
    }
    glob::glob(pattern_or_path)
        .map_err(|glob::BadPattern| RuleFileError { path: pattern_or_path.to_owned(), problem: Problem::BadPattern })
}

/// Loads the rule files a path or glob names (see [`expand`]), with the default options.
///
/// # Errors
/// As [`load_all`].
pub fn load(pattern_or_path: &str) -> Result<Vec<RuleFile>, Vec<RuleFileError>> {
    load_all(&[pattern_or_path], &ParseOptions::default())
}

/// Loads the rule files the paths and globs name (`--rule-file`, repeated), each file once, in
/// the order named.
///
/// # Errors
/// The problems of every file that is refused, and every malformed glob.
pub fn load_all<S: AsRef<str>>(patterns: &[S], options: &ParseOptions) -> Result<Vec<RuleFile>, Vec<RuleFileError>> {
    let mut paths: Vec<String> = Vec::new();
    let mut errors = Vec::new();
    for pattern in patterns {
        match expand(pattern.as_ref()) {
            Ok(found) => paths.extend(found),
            Err(e) => errors.push(e),
        }
    }
    let mut seen = std::collections::HashSet::new();
    paths.retain(|p| seen.insert(p.clone()));
    let mut files = Vec::new();
    for path in paths {
        match read(&path, options) {
            Ok(file) => files.push(file),
            Err(e) => errors.extend(e),
        }
    }
    if errors.is_empty() {
        Ok(files)
    } else {
        Err(errors)
    }
}

/// Go's words for a failed `os.ReadFile`: `open x: no such file or directory`,
/// `read x: is a directory`.
fn go_read_error(path: &str, e: &std::io::Error) -> String {
    let op = if e.kind() == std::io::ErrorKind::IsADirectory { "read" } else { "open" };
    let text = e.to_string();
    let text = match (e.raw_os_error(), text.rfind(" (os error ")) {
        (Some(_), Some(i)) => &text[..i],
        _ => text.as_str(),
    };
    let mut chars = text.chars();
    let lowered: String = chars.next().map(|c| c.to_lowercase().chain(chars).collect()).unwrap_or_default();
    format!("{op} {path}: {lowered}")
}
