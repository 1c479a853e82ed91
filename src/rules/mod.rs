//! Recording and alerting rules, as Prometheus evaluates them.
//!
//! - [`file`]: rule files (Prometheus' `rulefmt`): the model, YAML parsing and validation.
//! - [`template`]: Go text/template expansion of alert labels and annotations, with
//!   Prometheus' template functions.

pub mod alert;
pub mod file;
pub mod group;
pub mod notify;
pub mod output;
pub mod slot;
pub mod template;
pub mod unit;

use file::{Group, RuleFile};

/// The rule files a server or a test runs: every group of every file, in file order.
#[derive(Debug, Clone, Default)]
pub struct RuleFiles {
    files: Vec<RuleFile>,
}

impl RuleFiles {
    /// Reads and validates the files matching `patterns` (paths or globs).
    ///
    /// # Errors
    /// Every problem of every file, as Prometheus words them.
    pub fn load(patterns: &[String]) -> Result<Self, Vec<String>> {
        let mut files = Vec::new();
        let mut errors = Vec::new();
        for path in patterns {
            match std::fs::read(path) {
                Ok(bytes) => match parse_file(path, &bytes) {
                    Ok(f) => files.push(f),
                    Err(e) => errors.extend(e),
                },
                Err(e) => errors.push(format!("{path}: {e}")),
            }
        }
        if errors.is_empty() {
            Ok(Self { files })
        } else {
            Err(errors)
        }
    }

    /// These files and `more` after them.
    pub fn with(mut self, more: Vec<RuleFile>) -> Self {
        self.files.extend(more);
        self
    }

    /// Every group, file by file.
    pub fn groups(&self) -> impl Iterator<Item = &Group> {
        self.files.iter().flat_map(|f| &f.groups)
    }
}
pub mod evaluator;
pub mod exposition;
mod scratch_parse;

/// Parses and validates one rule file's bytes; `path` names it in messages and in its groups.
///
/// # Errors
/// Every problem, as Prometheus words them, each naming the file.
pub fn parse_file(path: &str, bytes: &[u8]) -> Result<RuleFile, Vec<String>> {
    scratch_parse::parse(path, bytes).map_err(|e| vec![format!("{path}: {e}")])
}
pub mod ruler;
pub mod state;
