//! Label matchers (`=`, `!=`, `=~`, `!~`), with Prometheus semantics:
//! regexes are fully anchored and `.` matches newlines; a label that is absent has the
//! value `""`, so a matcher that matches the empty string also selects series without the label.

use regex::Regex;

/// The comparison a matcher makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MatchOp {
    /// `=`
    Equal,
    /// `!=`
    NotEqual,
    /// `=~`
    RegexMatch,
    /// `!~`
    RegexNoMatch,
}

/// A matcher whose regex could not be compiled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid regular expression {pattern:?} in matcher for label {name:?}: {reason}")]
pub struct MatcherError {
    /// Label name of the matcher.
    pub name: String,
    /// The pattern as written (its first 200 bytes when longer).
    pub pattern: String,
    /// What the regex engine said.
    pub reason: String,
}

/// Upper bound on the compiled size of one matcher regex (protects against regex bombs;
/// the engine is linear-time, so only size needs a bound). Grafana's "All" over 2,000
/// instances, a 70 KB alternation, compiles to more than 1 MiB (it passes under this limit).
const REGEX_SIZE_LIMIT: usize = 8 << 20;

/// Largest accepted [`regex_cost`] of one regex, or of all string literals of one PromQL query.
/// Compiling takes time in proportion to the cost: found by fuzzing, `\w{200}` (cost 154,000)
/// took seconds to compile, and the PromQL parser compiles every matcher regex itself, without
/// a size limit, before saltdb sees it. RE2 (Prometheus) accepts such patterns; nobody needs them.
pub const MAX_REGEX_COST: u64 = 20_000;

/// A rough estimate of a regex's compile cost. Inside a counted repetition, literals count their
/// bytes and character classes their ranges (at least 8, the UTF-8 states of "any character"),
/// multiplied by the repetition count: that is what explodes (`.{7847,}`, `\pL{300}`). Outside
/// any repetition, literals and classes compile to a few states each, quickly, so they count a
/// sixteenth: Grafana's "All" expands to an alternation of every value, easily tens of
/// kilobytes, and must stay accepted.
/// `None` when `pattern` does not parse as a regex (compiling it then fails fast anyway).
pub fn regex_cost(pattern: &str) -> Option<u64> {
    let hir = regex_syntax::ParserBuilder::new().dot_matches_new_line(true).build().parse(pattern).ok()?;
    Some(hir_cost(&hir, false).div_ceil(16))
}

/// Cost in sixteenths outside repetitions (see [`regex_cost`]).
fn hir_cost(h: &regex_syntax::hir::Hir, repeated: bool) -> u64 {
    use regex_syntax::hir::{Class, HirKind};
    let weight = if repeated { 16 } else { 1 };
    match h.kind() {
        HirKind::Empty | HirKind::Look(_) => weight,
        HirKind::Literal(l) => weight * l.0.len() as u64,
        HirKind::Class(Class::Unicode(c)) => weight * (c.ranges().len() as u64).max(8),
        HirKind::Class(Class::Bytes(c)) => weight * (c.ranges().len() as u64).max(1),
        HirKind::Repetition(r) => {
            let copies = r.max.unwrap_or(r.min.saturating_add(1)).max(1);
            hir_cost(&r.sub, true).saturating_mul(u64::from(copies))
        }
        HirKind::Capture(c) => hir_cost(&c.sub, repeated),
        HirKind::Concat(v) | HirKind::Alternation(v) => {
            v.iter().map(|h| hir_cost(h, repeated)).fold(0, u64::saturating_add)
        }
    }
}

/// One label matcher. Invariant: `regex` is `Some` exactly when `op` is a regex op.
#[derive(Clone, Debug)]
pub struct Matcher {
    /// Label name.
    pub name: String,
    /// Comparison.
    pub op: MatchOp,
    /// Value or pattern as written.
    pub value: String,
    regex: Option<Regex>,
}

impl PartialEq for Matcher {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name && self.op == other.op && self.value == other.value
    }
}

impl Matcher {
    /// Builds a matcher, compiling the anchored regex for regex ops.
    ///
    /// # Errors
    /// [`MatcherError`] when the pattern does not compile or is too large.
    pub fn new(op: MatchOp, name: impl Into<String>, value: impl Into<String>) -> Result<Self, MatcherError> {
        let (name, value) = (name.into(), value.into());
        let regex = match op {
            MatchOp::Equal | MatchOp::NotEqual => None,
            MatchOp::RegexMatch | MatchOp::RegexNoMatch => Some(compile(&name, &value)?),
        };
        Ok(Self { name, op, value, regex })
    }

    /// Shorthand for an `=` matcher (cannot fail).
    pub fn equal(name: impl Into<String>, value: impl Into<String>) -> Self {
        Self { name: name.into(), op: MatchOp::Equal, value: value.into(), regex: None }
    }

    /// Does a label value (`""` for an absent label) satisfy the matcher?
    pub fn matches(&self, value: &str) -> bool {
        match (&self.op, &self.regex) {
            (MatchOp::Equal, _) => self.value == value,
            (MatchOp::NotEqual, _) => self.value != value,
            (MatchOp::RegexMatch, Some(re)) => re.is_match(value),
            (MatchOp::RegexNoMatch, Some(re)) => !re.is_match(value),
            // Unreachable by the struct invariant; treat as no match rather than panic.
            (MatchOp::RegexMatch | MatchOp::RegexNoMatch, None) => false,
        }
    }

    /// True when series lacking the label are selected by this matcher.
    pub fn matches_empty(&self) -> bool {
        self.matches("")
    }

    /// Converts a matcher parsed by `promql-parser`, recompiling its regex with saltdb's
    /// anchoring and limits.
    ///
    /// # Errors
    /// [`MatcherError`] when the pattern does not compile.
    pub fn from_parsed(m: &promql_parser::label::Matcher) -> Result<Self, MatcherError> {
        use promql_parser::label::MatchOp as P;
        let op = match m.op {
            P::Equal => MatchOp::Equal,
            P::NotEqual => MatchOp::NotEqual,
            P::Re(_) => MatchOp::RegexMatch,
            P::NotRe(_) => MatchOp::RegexNoMatch,
        };
        Self::new(op, m.name.clone(), m.value.clone())
    }
}

impl std::fmt::Display for Matcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let op = match self.op {
            MatchOp::Equal => "=",
            MatchOp::NotEqual => "!=",
            MatchOp::RegexMatch => "=~",
            MatchOp::RegexNoMatch => "!~",
        };
        write!(f, "{}{}{:?}", self.name, op, self.value)
    }
}

/// Compiled regexes remembered by [`compile`]; it remembers patterns of at most
/// `REGEX_CACHE_MAX_LEN` bytes and [`regex_cost`] `REGEX_CACHE_MAX_COST`, whose compiled
/// programs are small (tens of KiB at most), so the cache stays within a few tens of MiB
/// whatever clients send.
const REGEX_CACHE_ENTRIES: usize = 512;
const REGEX_CACHE_MAX_LEN: usize = 1024;
const REGEX_CACHE_MAX_COST: u64 = 1_000;

/// Compiled matcher regexes by pattern: dashboards repeat the same few regexes in every refresh
/// (compiling one costs tens of microseconds, more than answering a small request), and a
/// cached regex keeps its lazy-DFA state between requests. Clones share the compiled program.
fn regex_cache() -> &'static quick_cache::sync::Cache<String, Regex> {
    static CACHE: std::sync::OnceLock<quick_cache::sync::Cache<String, Regex>> = std::sync::OnceLock::new();
    CACHE.get_or_init(|| quick_cache::sync::Cache::new(REGEX_CACHE_ENTRIES))
}

/// The anchored regex of a matcher's pattern, from [`regex_cache`] when it was compiled before
/// (only successes are remembered).
fn compile(name: &str, pattern: &str) -> Result<Regex, MatcherError> {
    let short = pattern.len() <= REGEX_CACHE_MAX_LEN;
    if short {
        if let Some(re) = regex_cache().get(pattern) {
            return Ok(re);
        }
    }
    let cost = regex_cost(pattern);
    let re = compile_uncached(name, pattern, cost)?;
    if short && cost.is_some_and(|c| c <= REGEX_CACHE_MAX_COST) {
        regex_cache().insert(pattern.to_owned(), re.clone());
    }
    Ok(re)
}

/// Compiles `pattern`, whose [`regex_cost`] is `cost`, anchored.
fn compile_uncached(name: &str, pattern: &str, cost: Option<u64>) -> Result<Regex, MatcherError> {
    let err =
        |reason: String| MatcherError { name: name.to_owned(), pattern: crate::excerpt::excerpt(pattern, 200), reason };
    if let Some(cost) = cost.filter(|&c| c > MAX_REGEX_COST) {
        return Err(err(format!("regex is too complex (estimated size {cost}, limit {MAX_REGEX_COST})")));
    }
    let build = |p: &str| {
        regex::RegexBuilder::new(&format!("^(?s:{p})$"))
            .size_limit(REGEX_SIZE_LIMIT)
            .dfa_size_limit(REGEX_SIZE_LIMIT)
            .build()
    };
    match build(pattern) {
        Ok(re) => Ok(re),
        // Go's RE2 reads a `{` that does not start a repetition as a literal; Rust's regex
        // rejects it. Retry with such braces escaped before giving up.
        Err(first) => build(&escape_literal_braces(pattern)).map_err(|_| err(first.to_string())),
    }
}

/// Escapes every `{` that does not open a valid `{n}`, `{n,}` or `{n,m}` repetition.
fn escape_literal_braces(p: &str) -> String {
    let mut out = String::with_capacity(p.len() + 4);
    let mut chars = p.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' => {
                out.push(c);
                if let Some((_, n)) = chars.next() {
                    out.push(n);
                }
            }
            '{' => {
                let rest = p.get(i + 1..).unwrap_or("");
                let close = rest.find('}');
                let is_repeat = close.is_some_and(|end| {
                    let body = rest.get(..end).unwrap_or("");
                    let mut parts = body.splitn(2, ',');
                    let lo = parts.next().unwrap_or("");
                    let hi = parts.next();
                    !lo.is_empty()
                        && lo.bytes().all(|b| b.is_ascii_digit())
                        && hi.is_none_or(|h| h.bytes().all(|b| b.is_ascii_digit()))
                });
                if !is_repeat {
                    out.push('\\');
                }
                out.push(c);
            }
            _ => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regex_is_anchored_and_dot_matches_newline() {
        let m = Matcher::new(MatchOp::RegexMatch, "a", "b.*").unwrap();
        assert!(m.matches("bcd"));
        assert!(m.matches("b\nc"));
        assert!(!m.matches("ab"));
        assert!(!m.matches_empty());
        let n = Matcher::new(MatchOp::RegexNoMatch, "a", "x|y").unwrap();
        assert!(n.matches_empty());
        assert!(!n.matches("x"));
    }

    #[test]
    fn literal_braces_are_accepted_like_go() {
        let m = Matcher::new(MatchOp::RegexMatch, "a", "x{y}").unwrap();
        assert!(m.matches("x{y}"));
        let r = Matcher::new(MatchOp::RegexMatch, "a", "x{2}").unwrap();
        assert!(r.matches("xx"));
    }

    #[test]
    fn bad_regex_is_an_error() {
        assert!(Matcher::new(MatchOp::RegexMatch, "a", "(").is_err());
    }

    #[test]
    fn remembered_regexes_match_as_compiled_ones_and_errors_are_not_remembered() {
        for _ in 0..2 {
            let m = Matcher::new(MatchOp::RegexMatch, "job", "api|web.*").unwrap();
            assert!(m.matches("api") && m.matches("web-1") && !m.matches("apix") && !m.matches("db"));
            let e = Matcher::new(MatchOp::RegexMatch, "job", "(a|").unwrap_err();
            assert_eq!(e.name, "job");
        }
        // The same pattern on another label: the error names that label.
        assert_eq!(Matcher::new(MatchOp::RegexMatch, "env", "(a|").unwrap_err().name, "env");
        // Too costly to remember: still compiled, and correct.
        let big = Matcher::new(MatchOp::RegexMatch, "a", "[a-z]{300}").unwrap();
        assert!(big.matches(&"q".repeat(300)) && !big.matches(&"q".repeat(299)));
    }
}
