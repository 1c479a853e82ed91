//! The conformance ratchet: the set of evals that pass, recorded one per line in
//! `tests/promql_ratchet.txt`, so that no eval can stop passing unnoticed (a count per file
//! would let a regression hide behind an unrelated fix).
//!
//! An eval is identified by its file and a hash of its own text: the `eval` line and its
//! expectation lines, each trimmed, up to the blank line that ends the block (first 16 hex
//! digits of their SHA-256), plus `#<n>` for the n-th repeat of the same text in one file. The
//! identifier does not depend on line numbers, so an edit elsewhere in a script leaves it alone;
//! it changes only when the eval itself changes (which is then a new eval). The line number and
//! expression are written beside it for people and ignored when reading.
//!
//! File format: `#` comments, then `<file> <id> <line> <expression>` lines, sorted.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use sha2::{Digest, Sha256};

/// One eval: the script's file stem and the hash of its text.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct EvalId {
    pub file: String,
    pub hash: String,
}

/// What is shown beside an identifier: where the eval is and what it evaluates.
#[derive(Clone, Debug)]
pub struct EvalNote {
    pub line: usize,
    pub expr: String,
}

/// Gives each eval of one file its identifier, counting repeats of the same text.
pub struct Identifier<'a> {
    file: String,
    lines: Vec<&'a str>,
    seen: BTreeMap<String, usize>,
}

impl<'a> Identifier<'a> {
    pub fn new(file: &str, text: &'a str) -> Self {
        Self { file: file.to_owned(), lines: text.lines().collect(), seen: BTreeMap::new() }
    }

    /// The identifier of the eval whose `eval` line is `line` (1-based).
    pub fn id(&mut self, line: usize) -> EvalId {
        let mut hasher = Sha256::new();
        for l in self.lines.iter().skip(line.saturating_sub(1)).map(|l| l.trim()) {
            if l.is_empty() || l.starts_with('#') {
                break;
            }
            hasher.update(l.as_bytes());
            hasher.update(b"\n");
        }
        let digest = hasher.finalize();
        let mut hash: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
        let n = self.seen.entry(hash.clone()).or_insert(0);
        *n += 1;
        if *n > 1 {
            hash.push_str(&format!("#{n}"));
        }
        EvalId { file: self.file.clone(), hash }
    }
}

/// The recorded passing evals.
///
/// # Errors
/// A message when the file is missing, unreadable, malformed or records nothing: a ratchet
/// that cannot be read checks nothing, so it must fail rather than pass.
pub fn read(path: &Path) -> Result<BTreeSet<EvalId>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let mut ids = BTreeSet::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut parts = line.split_whitespace();
        match (parts.next(), parts.next()) {
            (Some(file), Some(hash)) if hash.len() >= 16 => {
                ids.insert(EvalId { file: file.to_owned(), hash: hash.to_owned() });
            }
            _ => return Err(format!("{}:{}: not `<file> <id> <line> <expr>`: {line:?}", path.display(), i + 1)),
        }
    }
    if ids.is_empty() {
        return Err(format!("{} records no passing eval", path.display()));
    }
    Ok(ids)
}

/// Writes the passing evals.
///
/// # Errors
/// The I/O error.
pub fn write(path: &Path, passing: &BTreeMap<EvalId, EvalNote>) -> std::io::Result<()> {
    let mut text = String::from(
        "# PromQL conformance ratchet: every eval that passes, one per line: <file> <id> <line> <expression>.\n\
         # <id> = SHA-256 of the eval's text (first 16 hex digits, `#n` for the n-th repeat in a file);\n\
         # the line and expression are only for reading. See tests/promql_conformance/ratchet.rs.\n\
         # Add newly passing evals: SALTDB_PROMQL_RATCHET_UPDATE=1 cargo test --test promql_conformance\n\
         # (refuses to drop a recorded eval unless SALTDB_PROMQL_RATCHET_ALLOW_DROP=1 is set too).\n",
    );
    for (id, note) in passing {
        let expr: String = note.expr.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
        text.push_str(&format!("{} {} {} {}\n", id.file, id.hash, note.line, expr));
    }
    std::fs::write(path, text)
}

/// The recorded evals that no longer pass, each with the reason (its failure, or that it is no
/// longer in the scripts).
pub fn lost(
    recorded: &BTreeSet<EvalId>,
    passing: &BTreeMap<EvalId, EvalNote>,
    failing: &BTreeMap<EvalId, (EvalNote, String)>,
) -> Vec<String> {
    recorded
        .iter()
        .filter(|id| !passing.contains_key(*id))
        .map(|id| match failing.get(id) {
            Some((note, why)) => {
                format!("{}.test line {} ({}): {}\n    {}", id.file, note.line, id.hash, note.expr, why)
            }
            None => {
                format!("{}.test {}: recorded as passing but no longer run (eval gone or skipped)", id.file, id.hash)
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_ignore_line_numbers_and_number_repeats() {
        let a = "load 5m\n  m 1\n\neval instant at 0m m\n  m 1\n\neval instant at 0m m\n  m 1\n";
        let b = format!("# a comment moves every line\n\n{a}");
        let (mut ia, mut ib) = (Identifier::new("f", a), Identifier::new("f", &b));
        let (a1, a2) = (ia.id(4), ia.id(7));
        let (b1, b2) = (ib.id(6), ib.id(9));
        assert_eq!((&a1, &a2), (&b1, &b2));
        assert_ne!(a1, a2);
        assert!(a2.hash.ends_with("#2"));
    }
}
