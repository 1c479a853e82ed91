//! `saltdb test rules` against `promtool test rules`: Prometheus' own unit test files, run by
//! both, give the same verdict, file by file.
//!
//! - `promtool-v2.42.0/`: Debian's `promtool` 2.42 runs beside saltdb. One file differs by
//!   design: saltdb evaluates range selectors and the lookback as Prometheus 3 does (a sample
//!   exactly at `t - range` is outside the window), Prometheus 2 included it; in
//!   `unittest.yml` two expressions depend on that sample (`count_over_time(fixed_data[1h])`
//!   is 61 in 2.42 and 60 in 3, and `timestamp(test_missing)` at `5m` sees the sample of `0m`
//!   in 2.42 only), and the rules reading them. The test checks that these are saltdb's only
//!   failures there.
//! - `promtool-head/`: the verdicts Prometheus' `cmd/promtool/unittest_test.go` expects (the
//!   folder's README), which follow Prometheus 3.

use std::path::{Path, PathBuf};
use std::process::Command;

fn rules_tests() -> Option<PathBuf> {
    let dir = std::env::var_os("SALTDB_RULES_TESTS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/rules-tests"));
    if dir.join("promtool-v2.42.0").is_dir() {
        return Some(dir);
    }
    crate::skip::skip(
        "rules_unit",
        &format!("Prometheus' rule test files are not at {}", dir.display()),
        "set SALTDB_RULES_TESTS to a folder holding promtool-v2.42.0/ and promtool-head/",
    );
    None
}

/// Runs `saltdb test rules FILE`: (passed, everything it printed).
fn saltdb(file: &Path) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_saltdb")).args(["test", "rules"]).arg(file).output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

/// Unit test files of a folder (the rule files they load are not tests).
fn unit_tests(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| std::fs::read_to_string(p).is_ok_and(|t| t.lines().any(|l| l.starts_with("tests:"))))
        .collect();
    files.sort();
    files
}

#[test]
fn saltdb_and_promtool_2_42_agree_on_every_unit_test_file() {
    let Some(dir) = rules_tests() else { return };
    if !crate::peers::installed("promtool", "rules_unit::saltdb_and_promtool_2_42_agree", "prometheus") {
        return;
    }
    let files = unit_tests(&dir.join("promtool-v2.42.0"));
    assert!(files.len() >= 8, "{files:?}");
    for file in &files {
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        let promtool = Command::new("promtool").args(["test", "rules"]).arg(file).output().unwrap();
        let (passed, text) = saltdb(file);
        if name == "unittest.yml" {
            assert!(promtool.status.success());
            let exprs: Vec<&str> = text.lines().filter_map(|l| l.trim().strip_prefix("expr: ")).collect();
            for e in &exprs {
                assert!(
                    e.contains("count_over_time") || e.contains("test_missing"),
                    "{name}: a failure beyond the documented window difference: {e}\n{text}"
                );
            }
            assert!(!passed && !exprs.is_empty(), "{name}: the window difference no longer shows:\n{text}");
            assert!(!text.contains("alertname:"), "{name}: alerts differ:\n{text}");
            continue;
        }
        assert_eq!(passed, promtool.status.success(), "{name}: saltdb says:\n{text}");
    }
}

#[test]
fn saltdb_gives_the_verdicts_prometheus_expects_on_the_newest_files() {
    let Some(dir) = rules_tests() else { return };
    let head = dir.join("promtool-head");
    let pass = [
        "unittest.yml",
        "long-period.yml",
        "no-test-group-interval.yml",
        "start-time-test.yml",
        "at-modifier-test.yml",
        "negative-offset-test.yml",
    ];
    let fail = [
        "bad-input-series.yml",
        "bad-promql.yml",
        "bad-rules-syntax-test.yml",
        "bad-rules-error-test.yml",
        "failing.yml",
    ];
    for name in pass {
        let (passed, text) = saltdb(&head.join(name));
        assert!(passed, "{name} must pass:\n{text}");
    }
    for name in fail {
        let (passed, text) = saltdb(&head.join(name));
        assert!(!passed, "{name} must fail:\n{text}");
        assert!(text.contains("FAILED"), "{name}: {text}");
    }
}
