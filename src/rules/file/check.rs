//! `saltdb check rules`: checks rule files as `promtool check rules` does, with its output and
//! exit statuses.
//!
//! For each file, `Checking FILE` on standard output, then `  SUCCESS: N rules found` on
//! standard output, or `  FAILED:` and one error per line (`FILE: <Prometheus' message>`) on
//! standard error, then an empty line. Without files, standard input is checked. The
//! `duplicate-rules` lint (on by default) reports rules of the same name and labels (group
//! labels included) as `lint error N duplicate rule(s) found.` on standard error; it fails the
//! check (exit status 3) only with `--lint-fatal`. Exit status 1 when any file is refused.

use std::collections::BTreeMap;
use std::io::{Read, Write};

use super::{NameValidation, ParseOptions, RuleFile};

/// Exit status of a check that found no problem (lint findings included, without
/// `--lint-fatal`).
pub const SUCCESS: u8 = 0;
/// Exit status of a check that refused a file.
pub const FAILURE: u8 = 1;
/// Exit status of a check whose only problems are lint findings, with `--lint-fatal`.
pub const LINT_FAILURE: u8 = 3;

/// `saltdb check rules` flags (those of `promtool check rules`, and `--name-validation`).
#[derive(Debug, Clone, clap::Args)]
pub struct CheckRulesArgs {
    /// The rule files to check; standard input when none is given.
    pub files: Vec<String>,
    /// Lint checks, comma-separated: `duplicate-rules`, `all` or `none`.
    #[arg(long, default_value = "duplicate-rules")]
    pub lint: String,
    /// Exit with status 3 when a lint check finds something.
    #[arg(long)]
    pub lint_fatal: bool,
    /// Accept fields Prometheus does not know (they are refused when the files are loaded).
    #[arg(long)]
    pub ignore_unknown_fields: bool,
    /// How label, annotation and metric names are checked: `utf8` (Prometheus 3) or `legacy`
    /// (Prometheus 2).
    #[arg(long, value_enum, default_value_t = NameValidation::Utf8)]
    pub name_validation: NameValidation,
}

/// Runs the check on the process' standard streams; the exit status.
pub fn run(args: &CheckRulesArgs) -> u8 {
    let (stdin, stdout, stderr) = (std::io::stdin(), std::io::stdout(), std::io::stderr());
    // A failed write to the terminal leaves nothing else to report to.
    check(args, &mut stdin.lock(), &mut stdout.lock(), &mut stderr.lock()).unwrap_or(FAILURE)
}

/// Checks the files of `args` (or `input`), writing what promtool writes to standard output on
/// `out` and what it writes to standard error on `err`; the exit status.
///
/// # Errors
/// A failed write.
pub fn check(
    args: &CheckRulesArgs,
    input: &mut dyn Read,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> std::io::Result<u8> {
    let lint_duplicates = lint_duplicates(&args.lint, out)?;
    let options = ParseOptions { names: args.name_validation, ignore_unknown_fields: args.ignore_unknown_fields };
    let (mut failed, mut refused) = (false, false);
    let stdin = [String::new()];
    let files = if args.files.is_empty() { &stdin[..] } else { &args.files[..] };
    for file in files {
        let parsed = if file.is_empty() {
            writeln!(out, "Checking standard input")?;
            let mut bytes = Vec::new();
            match input.read_to_end(&mut bytes) {
                Ok(_) => super::parse_with("", &bytes, &options),
                Err(e) => Err(vec![super::RuleFileError {
                    path: String::new(),
                    problem: super::Problem::Read(e.to_string()),
                }]),
            }
        } else {
            writeln!(out, "Checking {file}")?;
            super::read(file, &options)
        };
        match parsed {
            Err(errors) => {
                (failed, refused) = (true, true);
                writeln!(err, "  FAILED:")?;
                for e in errors {
                    writeln!(err, "{e}")?;
                }
            }
            Ok(rules) => match duplicates(&rules).filter(|_| lint_duplicates) {
                Some(report) => {
                    failed = true;
                    writeln!(err, "  FAILED:")?;
                    writeln!(err, "lint error {report}")?;
                }
                None => writeln!(out, "  SUCCESS: {} rules found", rule_count(&rules))?,
            },
        }
        writeln!(out)?;
    }
    Ok(match (failed, refused) {
        (true, true) => FAILURE,
        (true, false) if args.lint_fatal => LINT_FAILURE,
        _ => SUCCESS,
    })
}

/// Whether `--lint` asks for the duplicate-rules check; warns of unknown options on `out`, as
/// promtool does.
fn lint_duplicates(lint: &str, out: &mut dyn Write) -> std::io::Result<bool> {
    let mut duplicates = false;
    for option in lint.split(',') {
        match option {
            "all" | "duplicate-rules" => duplicates = true,
            "none" => {}
            other => writeln!(out, "WARNING: unknown lint option {other}")?,
        }
    }
    Ok(duplicates)
}

fn rule_count(file: &RuleFile) -> usize {
    file.groups.iter().map(|g| g.rules.len()).sum()
}

/// promtool's duplicate-rules report, when rules share a name and labels (a rule's labels over
/// its group's): `N duplicate rule(s) found.`, then each duplicate's name and labels.
fn duplicates(file: &RuleFile) -> Option<String> {
    let mut rules: Vec<(&str, Vec<(&str, &str)>)> = file
        .groups
        .iter()
        .flat_map(|g| {
            g.rules.iter().map(move |r| {
                let mut labels: BTreeMap<&str, &str> = g.labels.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
                labels.extend(r.labels.iter().map(|(k, v)| (k.as_str(), v.as_str())));
                (r.name(), labels.into_iter().collect())
            })
        })
        .collect();
    rules.sort();
    let mut repeated: Vec<&(&str, Vec<(&str, &str)>)> = Vec::new();
    for pair in rules.windows(2) {
        if let [last, this] = pair {
            if last == this && repeated.last() != Some(&last) {
                repeated.push(this);
            }
        }
    }
    if repeated.is_empty() {
        return None;
    }
    let mut report = format!("{} duplicate rule(s) found.\n", repeated.len());
    for (metric, labels) in repeated {
        report.push_str(&format!("Metric: {metric}\nLabel(s):\n"));
        for (name, value) in labels {
            report.push_str(&format!("\t{name}: {value}\n"));
        }
    }
    report.push_str("Might cause inconsistency while recording expressions");
    Some(report)
}
