//! Every native histogram in Prometheus' test scripts parses with saltdb's series notation
//! (`saltdb::promql::notation`).

use std::path::{Path, PathBuf};

use crate::script::{parse_script, Command, Expected, SeqValue, SeriesDesc};

/// The scripts' directory: `SALTDB_PROMQL_TESTS` or the team's shared copy; `None` after a
/// skip notice when the shared copy is absent outside CI.
fn scripts_dir() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("SALTDB_PROMQL_TESTS") {
        return Some(PathBuf::from(d));
    }
    let d = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/promql-tests/promql");
    if d.is_dir() {
        return Some(d);
    }
    crate::skip::skip(
        "notation_scripts::every_script_histogram_parses",
        &format!("Prometheus' PromQL test scripts are not at {}", d.display()),
        "set SALTDB_PROMQL_TESTS to a copy of promql/promqltest/testdata",
    );
    None
}

/// Lines of `text` outside comments that hold `{{`.
fn histogram_lines(text: &str) -> usize {
    text.lines().map(str::trim).filter(|l| !l.starts_with('#') && l.contains("{{")).count()
}

/// Series descriptions of a script's loads and expected results.
fn series_of(cmds: &[Command]) -> Vec<&SeriesDesc> {
    let mut out = Vec::new();
    for c in cmds {
        match c {
            Command::Load(l) => out.extend(&l.series),
            Command::Eval(ev) => {
                if let Expected::Series(s) = &ev.expected {
                    out.extend(s);
                }
            }
            Command::Clear => {}
        }
    }
    out
}

#[test]
fn every_script_histogram_parses() {
    let Some(dir) = scripts_dir() else { return };
    let (mut lines, mut values, mut with_hint) = (0, 0, 0);
    for f in crate::scripts(&dir) {
        let text = std::fs::read_to_string(&f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        let cmds = parse_script(&text).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        let series = series_of(&cmds);
        let flagged = series.iter().filter(|s| s.histogram).count();
        assert_eq!(flagged, histogram_lines(&text), "{}: lines with {{{{ vs histogram series", f.display());
        for v in series.iter().flat_map(|s| &s.values) {
            if let SeqValue::Histogram(h) = v {
                values += 1;
                with_hint += usize::from(h.hint_given);
            }
        }
        lines += flagged;
    }
    assert!(values > 0, "no histogram values in {}", dir.display());
    println!("{lines} series lines with native histograms, {values} histogram values ({with_hint} with a given hint)");
}

#[test]
fn a_bad_histogram_in_a_script_names_its_line_and_column() {
    let e = parse_script("load 1m\n  foo 0 {{sum:1\n").map(|_| ()).unwrap_err();
    assert!(e.starts_with("line 2: column "), "{e}");
}
