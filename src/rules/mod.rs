//! Recording and alerting rules, as Prometheus evaluates them.
//!
//! Pure logic first, then what touches the store, the clock, the disk and the network:
//! - [`file`]: rule files (Prometheus' `rulefmt`): the model, YAML parsing and validation.
//! - [`template`]: Go text/template expansion of alert labels and annotations, with
//!   Prometheus' template functions.
//! - [`alert`]: an alerting rule's alerts and their states; [`output`]: what a recording rule
//!   writes; [`slot`]: when a group is evaluated; [`for_state`]: alerts a node joins on a store
//!   several nodes share, in line with the other evaluators.
//! - [`group`]: one group evaluated at one timestamp against the store.
//! - [`evaluator`]: a server's groups, each on its thread, reloads; [`state`]: alert state
//!   saved across restarts; [`ruler`]: groups managed through the ruler API; [`notify`]:
//!   sending alerts to Alertmanager; [`exposition`]: the groups' metrics; [`summary`]: the
//!   summaries of evaluation durations among them.
//! - [`unit`]: `saltdb test rules`, promtool's unit tests on this evaluator; [`replay`]:
//!   `saltdb rules replay`, groups evaluated over past data.

pub mod alert;
pub mod evaluator;
pub mod exposition;
pub mod file;
pub mod for_state;
pub mod group;
pub mod notify;
pub mod output;
pub mod replay;
pub mod ruler;
pub mod slot;
pub mod state;
pub mod summary;
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
        file::load_all(patterns, &file::ParseOptions::default())
            .map(|files| Self { files })
            .map_err(|errors| errors.iter().map(ToString::to_string).collect())
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
/// Parses and validates one rule file's bytes; `path` names it in messages and in its groups.
///
/// # Errors
/// Every problem, as Prometheus words them, each naming the file.
pub fn parse_file(path: &str, bytes: &[u8]) -> Result<RuleFile, Vec<String>> {
    file::parse(path, bytes).map_err(|errors| errors.iter().map(ToString::to_string).collect())
}
