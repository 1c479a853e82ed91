//! `saltdb check rules` against `promtool check rules` (Prometheus 2.42, Debian's): on every
//! file of Prometheus' own rule test folders, the same verdict (exit status).
//!
//! The files: env `SALTDB_RULES_TESTS` (default `<repo>/../shared/rules-tests`), folders
//! `promtool-v2.42.0/` (`cmd/promtool/testdata` of v2.42.0, its `*.yml`) and `rulefmt-head/`
//! (`model/rulefmt/testdata` of Prometheus' main). Without them, or without `promtool` on PATH,
//! the test prints a `SKIPPED:` line and passes, except under `CI`.
//!
//! promtool 2.42 checks names the Prometheus 2 way (legacy), saltdb the Prometheus 3 way (UTF-8)
//! by default: saltdb is run both ways. With `--name-validation=legacy` every verdict is
//! promtool's; by default, the files whose only problem is a UTF-8 name pass (see
//! [`UTF8_NAMES`]).

use std::path::{Path, PathBuf};
use std::process::Command;

const TEST: &str = "rules_check::check_rules_gives_promtool_s_verdicts";

/// Files whose labels or annotations have names that are valid UTF-8 but not legacy names
/// (`ins-tance`): promtool 2.42 refuses them, Prometheus 3 and saltdb accept them.
const UTF8_NAMES: &[&str] =
    &["legacy_validation_annotation.bad.yaml", "utf-8_annotation.good.yaml", "utf-8_lname.good.yaml"];

/// The shared folder `sub`, or `None` after announcing the skip.
fn shared(sub: &str) -> Option<PathBuf> {
    let root = match std::env::var_os("SALTDB_RULES_TESTS") {
        Some(d) => PathBuf::from(d),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/rules-tests"),
    };
    let dir = root.join(sub);
    if dir.is_dir() {
        return Some(dir);
    }
    crate::skip::skip(
        TEST,
        &format!("Prometheus' rule test files are not at {}", dir.display()),
        "set SALTDB_RULES_TESTS to a folder holding promtool-v2.42.0/ and rulefmt-head/",
    );
    None
}

/// The files of `dir` whose names end with one of `extensions`, sorted.
fn files(dir: &Path, extensions: &[&str]) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_str().is_some_and(|p| extensions.iter().any(|x| p.ends_with(x))))
        .collect();
    found.sort();
    found
}

/// The exit status of `command` run in `dir` on `file` (by its name).
fn status(command: &mut Command, dir: &Path, file: &str) -> i32 {
    let output = command.arg(file).current_dir(dir).output().unwrap();
    output.status.code().unwrap_or(-1)
}

#[test]
fn check_rules_gives_promtool_s_verdicts() {
    if !crate::peers::available("promtool", TEST) {
        return;
    }
    let (Some(promtool_files), Some(rulefmt_files)) = (shared("promtool-v2.42.0"), shared("rulefmt-head")) else {
        return;
    };
    let all: Vec<PathBuf> =
        files(&promtool_files, &[".yml"]).into_iter().chain(files(&rulefmt_files, &[".yaml", ".yml"])).collect();
    assert!(all.len() >= 30, "too few rule files: {all:?}");
    let saltdb = || {
        let mut c = Command::new(env!("CARGO_BIN_EXE_saltdb"));
        c.args(["check", "rules"]);
        c
    };
    let mut differences = Vec::new();
    let (mut passed, mut refused) = (0, 0);
    for path in &all {
        let (dir, name) = (path.parent().unwrap(), path.file_name().unwrap().to_str().unwrap());
        let promtool = status(Command::new("promtool").args(["check", "rules"]), dir, name);
        let legacy = status(saltdb().arg("--name-validation=legacy"), dir, name);
        let utf8 = status(&mut saltdb(), dir, name);
        let utf8_expected = if UTF8_NAMES.contains(&name) { 0 } else { promtool };
        if promtool == 0 {
            passed += 1;
        } else {
            refused += 1;
        }
        if legacy != promtool || utf8 != utf8_expected {
            differences.push(format!(
                "{}: promtool {promtool}, saltdb --name-validation=legacy {legacy}, saltdb {utf8} (expected {utf8_expected})",
                path.display()
            ));
        }
    }
    assert!(differences.is_empty(), "verdicts differ:\n{}", differences.join("\n"));
    // Both verdicts occur, so neither side can pass by accepting or refusing everything.
    assert!(passed >= 5 && refused >= 10, "passed {passed}, refused {refused}");
}

#[test]
fn check_rules_prints_promtool_s_lines() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.yml"), "groups:\n- name: g\n  rules:\n  - record: a\n    expr: '1'\n").unwrap();
    std::fs::write(dir.path().join("b.yml"), "groups:\n- name: g\n  rules:\n  - record: b\n").unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_saltdb"))
        .args(["check", "rules", "a.yml", "b.yml"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let (out, err) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert_eq!(out, "Checking a.yml\n  SUCCESS: 1 rules found\n\nChecking b.yml\n\n");
    assert_eq!(err, "  FAILED:\nb.yml: 0:0: group \"g\", rule 1, \"b\": field 'expr' must be set in rule\n");
}
