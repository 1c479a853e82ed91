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
                Ok(bytes) => match scratch_parse::parse(path, &bytes) {
                    Ok(f) => files.push(f),
                    Err(e) => errors.push(format!("{path}: {e}")),
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

    /// Every group, file by file.
    pub fn groups(&self) -> impl Iterator<Item = &Group> {
        self.files.iter().flat_map(|f| &f.groups)
    }
}
mod scratch_parse;
