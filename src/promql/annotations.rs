//! Warnings and infos returned beside a result, never instead of one (Prometheus'
//! `annotations.Annotations`). Messages use Prometheus' wording so clients see the same text,
//! and carry, as Prometheus' HTTP API (and its main branch's test framework) prints them, the
//! position in the query of the expression they refer to: ` (line:column)` after the message
//! (see `positions.rs`).
//!
//! Like Prometheus, annotations are told apart by their message alone: the same message raised
//! at two positions is one annotation, which keeps the position raised last (Prometheus' map
//! keyed by the message without position, where a later `Add` or `Merge` replaces the entry).

pub use super::positions::Position;

/// How serious an annotation is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Severity {
    /// Something is likely wrong with the query or the data (`PromQL warning: ...`).
    Warning,
    /// A hint that the result may not mean what the user expects (`PromQL info: ...`).
    Info,
}

/// One annotation.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Annotation {
    /// Warning or info.
    pub severity: Severity,
    /// The message without the `PromQL warning: ` / `PromQL info: ` prefix and the position.
    pub message: String,
    /// Where in the query the expression it refers to starts, when known.
    pub position: Option<Position>,
    /// Says how the whole evaluation read its data (a downsampled tier), not what particular
    /// steps met: it holds for every step the evaluation answered, so a part of them kept apart
    /// (the query result cache's) carries it without being evaluated again.
    pub every_step: bool,
}

impl std::fmt::Display for Annotation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.severity {
            Severity::Warning => write!(f, "PromQL warning: {}", self.message)?,
            Severity::Info => write!(f, "PromQL info: {}", self.message)?,
        }
        match self.position {
            Some(p) => write!(f, " ({p})"),
            None => Ok(()),
        }
    }
}

/// A deduplicated set of annotations, in the order first raised.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Annotations(Vec<Annotation>);

impl Annotations {
    /// No annotations.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a warning without position (see [`Annotations::add`]).
    pub fn warn(&mut self, message: impl Into<String>) {
        self.add(Severity::Warning, message.into(), None);
    }

    /// Adds an info without position (see [`Annotations::add`]).
    pub fn info(&mut self, message: impl Into<String>) {
        self.add(Severity::Info, message.into(), None);
    }

    /// Adds a warning about the expression at `position` (see [`Annotations::add`]).
    pub fn warn_at(&mut self, position: Option<Position>, message: impl Into<String>) {
        self.add(Severity::Warning, message.into(), position);
    }

    /// Adds an info about the expression at `position` (see [`Annotations::add`]).
    pub fn info_at(&mut self, position: Option<Position>, message: impl Into<String>) {
        self.add(Severity::Info, message.into(), position);
    }

    /// Adds an annotation; when one of the same severity and message is present, it stays
    /// where it is and takes the new position, if any (Prometheus keeps the one added last).
    pub fn add(&mut self, severity: Severity, message: String, position: Option<Position>) {
        self.insert(Annotation { severity, message, position, every_step: false });
    }

    /// Adds an info that holds for every step of the evaluation (see [`Annotation::every_step`]).
    pub fn info_every_step_at(&mut self, position: Option<Position>, message: impl Into<String>) {
        self.insert(Annotation { severity: Severity::Info, message: message.into(), position, every_step: true });
    }

    /// See [`Annotations::add`]; the same message raised both for every step and not is not.
    fn insert(&mut self, new: Annotation) {
        match self.0.iter_mut().find(|a| a.severity == new.severity && a.message == new.message) {
            Some(a) => {
                a.position = new.position.or(a.position);
                a.every_step &= new.every_step;
            }
            None => self.0.push(new),
        }
    }

    /// Whether every annotation holds for every step (true when there are none).
    pub fn all_every_step(&self) -> bool {
        self.0.iter().all(|a| a.every_step)
    }

    /// Iterates all annotations.
    pub fn iter(&self) -> std::slice::Iter<'_, Annotation> {
        self.0.iter()
    }

    /// The warnings, formatted with their `PromQL warning: ` prefix.
    pub fn warnings(&self) -> Vec<String> {
        self.of(Severity::Warning)
    }

    /// The infos, formatted with their `PromQL info: ` prefix.
    pub fn infos(&self) -> Vec<String> {
        self.of(Severity::Info)
    }

    fn of(&self, severity: Severity) -> Vec<String> {
        self.0.iter().filter(|a| a.severity == severity).map(ToString::to_string).collect()
    }

    /// True when there is nothing to report.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Moves all annotations of `other` into `self`, as raised after those of `self`.
    pub fn merge(&mut self, other: Annotations) {
        for a in other.0 {
            self.insert(a);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dedups_and_prefixes() {
        let mut a = Annotations::new();
        a.warn("w");
        a.warn("w");
        a.info("i");
        assert_eq!(a.warnings(), vec!["PromQL warning: w".to_string()]);
        assert_eq!(a.infos(), vec!["PromQL info: i".to_string()]);
    }

    #[test]
    fn positions_follow_the_message_and_the_last_one_wins() {
        let at = |line, column| Some(Position { line, column });
        let mut a = Annotations::new();
        a.warn_at(at(1, 6), "w");
        a.info_at(at(2, 1), "w");
        a.warn_at(at(1, 23), "w");
        a.warn_at(None, "w");
        assert_eq!(a.warnings(), vec!["PromQL warning: w (1:23)".to_string()]);
        assert_eq!(a.infos(), vec!["PromQL info: w (2:1)".to_string()]);
        let mut b = Annotations::new();
        b.warn_at(at(3, 4), "w");
        b.warn("x");
        a.merge(b);
        assert_eq!(a.warnings(), vec!["PromQL warning: w (3:4)".to_string(), "PromQL warning: x".to_string()]);
    }
}
