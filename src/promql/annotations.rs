//! Warnings and infos returned beside a result, never instead of one (Prometheus'
//! `annotations.Annotations`). Messages use Prometheus' wording so clients see the same text.

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
    /// The message without the `PromQL warning: ` / `PromQL info: ` prefix.
    pub message: String,
}

impl std::fmt::Display for Annotation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.severity {
            Severity::Warning => write!(f, "PromQL warning: {}", self.message),
            Severity::Info => write!(f, "PromQL info: {}", self.message),
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

    /// Adds a warning (ignored when the same one is already present).
    pub fn warn(&mut self, message: impl Into<String>) {
        self.add(Severity::Warning, message.into());
    }

    /// Adds an info (ignored when the same one is already present).
    pub fn info(&mut self, message: impl Into<String>) {
        self.add(Severity::Info, message.into());
    }

    fn add(&mut self, severity: Severity, message: String) {
        let a = Annotation { severity, message };
        if !self.0.contains(&a) {
            self.0.push(a);
        }
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

    /// Moves all annotations of `other` into `self`.
    pub fn merge(&mut self, other: Annotations) {
        for a in other.0 {
            self.add(a.severity, a.message);
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
}
