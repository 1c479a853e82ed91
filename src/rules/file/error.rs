//! Why a rule file is refused, worded as Prometheus words it (`model/rulefmt`, go-yaml), so
//! that `saltdb check rules` and `promtool check rules` print the same lines.

use std::fmt;

/// Where in a file: 1-based line and column. `0:0` stands for a field that is absent, as
/// Prometheus prints it (`0:0: group "g", rule 1, "x": field 'expr' must be set in rule`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Position {
    /// 1-based line; 0 when absent.
    pub line: usize,
    /// 1-based column, in characters; 0 when absent.
    pub column: usize,
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.column)
    }
}

/// A rule file that could not be read or was refused. Displays as Prometheus' `ParseFile`
/// error: `<path>: <problem>` (only the problem when the path is empty, as for standard input).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub struct RuleFileError {
    /// The file, as given.
    pub path: String,
    /// What is wrong.
    pub problem: Problem,
}

impl fmt::Display for RuleFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            write!(f, "{}", self.problem)
        } else {
            write!(f, "{}: {}", self.path, self.problem)
        }
    }
}

/// What is wrong with a rule file.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Problem {
    /// The file could not be read (Go's words: `open x.yml: no such file or directory`).
    #[error("{0}")]
    Read(String),
    /// A malformed glob pattern (Go's `filepath.ErrBadPattern`).
    #[error("syntax error in pattern")]
    BadPattern,
    /// The YAML does not parse, or decoding stopped (`yaml: line 3: did not find expected key`,
    /// `yaml: unknown anchor 'x' referenced`, `not a valid duration string: "5"`).
    #[error("{0}")]
    Yaml(String),
    /// Values of the wrong type and unknown fields, one line each, as go-yaml lists them
    /// (`line 8: field annotation not found in type rulefmt.Rule`).
    #[error("yaml: unmarshal errors:\n  {}", .0.join("\n  "))]
    Unmarshal(Vec<String>),
    /// A group without a name.
    #[error("{at}: Groupname must not be empty")]
    EmptyGroupName {
        /// The group.
        at: Position,
    },
    /// A second group of the same name in the file.
    #[error("{at}: groupname: \"{name}\" is repeated in the same file")]
    DuplicateGroup {
        /// The second group.
        at: Position,
        /// Its name.
        name: String,
    },
    /// A group label's name is not a valid label name (or is `__name__`).
    #[error("invalid label name: {0}")]
    GroupLabelName(String),
    /// A group label's value cannot be stored (it holds the byte 0x00).
    #[error("invalid label value: {0}")]
    GroupLabelValue(String),
    /// A problem of one rule.
    #[error("{0}")]
    Rule(Box<RuleError>),
}

/// A problem of one rule: `[<line>:<col>: [<line>:<col>: ]]group "G", rule N, "name": <problem>`.
#[derive(Debug, Clone, PartialEq)]
pub struct RuleError {
    /// The rule's group.
    pub group: String,
    /// The rule's 1-based index in its group.
    pub rule: usize,
    /// The rule's `alert`, else its `record`.
    pub name: String,
    /// Where: the field at fault (`0:0` when it is absent); `None` for label and annotation
    /// problems, which Prometheus reports without a position.
    pub at: Option<Position>,
    /// A second field at fault (`alert`, beside `record`).
    pub also_at: Option<Position>,
    /// What is wrong.
    pub problem: RuleProblem,
}

impl fmt::Display for RuleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(at) = self.at {
            write!(f, "{at}: ")?;
            if let Some(also) = self.also_at {
                write!(f, "{also}: ")?;
            }
        }
        let (group, name) = (go_quote(&self.group), go_quote(&self.name));
        write!(f, "group {group}, rule {}, {name}: {}", self.rule, self.problem)
    }
}

/// What is wrong with a rule, in Prometheus' words.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RuleProblem {
    /// Both `record` and `alert`.
    #[error("only one of 'record' and 'alert' must be set")]
    RecordAndAlert,
    /// Neither `record` nor `alert`.
    #[error("one of 'record' or 'alert' must be set")]
    NeitherRecordNorAlert,
    /// No `expr`, or an empty one.
    #[error("field 'expr' must be set in rule")]
    MissingExpr,
    /// `expr` is not PromQL saltdb's query API accepts (the parser's message).
    #[error("could not parse expression: {0}")]
    BadExpr(String),
    /// A recording rule with annotations.
    #[error("invalid field 'annotations' in recording rule")]
    AnnotationsInRecordingRule,
    /// A recording rule with a non-zero `for`.
    #[error("invalid field 'for' in recording rule")]
    ForInRecordingRule,
    /// A recording rule with a non-zero `keep_firing_for`.
    #[error("invalid field 'keep_firing_for' in recording rule")]
    KeepFiringForInRecordingRule,
    /// `record` is not a valid metric name.
    #[error("invalid recording rule name: {0}")]
    InvalidRecordName(String),
    /// `record` holds `{` or `}` (a selector written where the name goes).
    #[error("braces present in the recording rule name; should it be in expr?: {0}")]
    BracesInRecordName(String),
    /// A label name that is not valid, or `__name__`.
    #[error("invalid label name: {0}")]
    InvalidLabelName(String),
    /// A label value that cannot be stored (it holds the byte 0x00).
    #[error("invalid label value: {0}")]
    InvalidLabelValue(String),
    /// An annotation name that is not a valid label name.
    #[error("invalid annotation name: {0}")]
    InvalidAnnotationName(String),
    /// An alerting rule's label whose template does not parse.
    #[error("label {}: {error}", go_quote(name))]
    LabelTemplate {
        /// The label.
        name: String,
        /// The template parser's message.
        error: String,
    },
    /// An alerting rule's annotation whose template does not parse.
    #[error("annotation {}: {error}", go_quote(name))]
    AnnotationTemplate {
        /// The annotation.
        name: String,
        /// The template parser's message.
        error: String,
    },
}

/// `text` quoted as Go's `strconv.Quote` (and so `%q` and `%#v`) quotes it: `"` and `\`
/// escaped, control and other non-printing characters as `\n`, `\x01`, `\u2028`.
pub(super) fn go_quote(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if go_printable(c) => out.push(c),
            c if (c as u32) < 0x80 => out.push_str(&format!("\\x{:02x}", c as u32)),
            c if (c as u32) < 0x10000 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push_str(&format!("\\U{:08x}", c as u32)),
        }
    }
    out.push('"');
    out
}

/// Go's `unicode.IsPrint`, but for unassigned code points (printed as they are here): not a
/// control, format, separator other than the ASCII space, surrogate or private-use character.
fn go_printable(c: char) -> bool {
    let u = c as u32;
    let separator = matches!(u, 0xa0 | 0x1680 | 0x2000..=0x200a | 0x2028 | 0x2029 | 0x202f | 0x205f | 0x3000);
    let format = matches!(
        u,
        0xad | 0x600..=0x605
            | 0x61c
            | 0x6dd
            | 0x70f
            | 0x890..=0x891
            | 0x8e2
            | 0x180e
            | 0x200b..=0x200f
            | 0x202a..=0x202e
            | 0x2060..=0x2064
            | 0x2066..=0x206f
            | 0xfeff
            | 0xfff9..=0xfffb
            | 0x110bd
            | 0x110cd
            | 0x13430..=0x1343f
            | 0x1bca0..=0x1bca3
            | 0x1d173..=0x1d17a
            | 0xe0001
            | 0xe0020..=0xe007f
    );
    let private = matches!(u, 0xe000..=0xf8ff | 0xf0000..=0xffffd | 0x100000..=0x10fffd);
    !c.is_control() && !separator && !format && !private && !matches!(u, 0xfffe | 0xffff)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_as_go() {
        assert_eq!(go_quote(r#"strawberry{flavor="sweet"}"#), r#""strawberry{flavor=\"sweet\"}""#);
        assert_eq!(go_quote("a\\b\n\t\u{1}\u{7f}"), r#""a\\b\n\t\x01\x7f""#);
        assert_eq!(go_quote("名前 ☺"), "\"名前 ☺\"");
        assert_eq!(go_quote("\u{a0}\u{2028}\u{feff}"), r#""\u00a0\u2028\ufeff""#);
        assert_eq!(go_quote("\u{f0000}"), r#""\U000f0000""#);
    }

    #[test]
    fn rule_errors_are_worded_as_prometheus() {
        let at = |line, column| Some(Position { line, column });
        let err = |at, also_at| RuleError {
            group: "some group".into(),
            rule: 1,
            name: "some rule name".into(),
            at,
            also_at,
            problem: RuleProblem::BadExpr("some error".into()),
        };
        let with_both = err(at(10, 20), at(11, 21));
        assert_eq!(
            with_both.to_string(),
            r#"10:20: 11:21: group "some group", rule 1, "some rule name": could not parse expression: some error"#
        );
        assert_eq!(
            err(at(10, 20), None).to_string(),
            r#"10:20: group "some group", rule 1, "some rule name": could not parse expression: some error"#
        );
        assert_eq!(
            err(None, None).to_string(),
            r#"group "some group", rule 1, "some rule name": could not parse expression: some error"#
        );
    }
}
