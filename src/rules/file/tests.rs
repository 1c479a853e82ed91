//! Rule file tests: Prometheus' own test files (`model/rulefmt/testdata`, read by path from the
//! shared folder), each message of Prometheus and go-yaml, the model built, loading by glob,
//! `check rules`' output, and a parser that never panics.
//!
//! The shared folder: env `SALTDB_RULES_TESTS` (default `<repo>/../shared/rules-tests`). When it
//! is missing, the tests that need it print a `SKIPPED:` line and pass, unless `CI` is set.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use proptest::prelude::*;

use super::check::{check, CheckRulesArgs, FAILURE, LINT_FAILURE, SUCCESS};
use super::*;

/// The shared rule test files, or `None` after announcing the skip.
///
/// # Panics
/// When `SALTDB_RULES_TESTS` names a missing directory, or under `CI` when the folder is missing.
fn shared_dir(test: &str, sub: &str) -> Option<PathBuf> {
    let root = match std::env::var_os("SALTDB_RULES_TESTS") {
        Some(d) => {
            let d = PathBuf::from(d);
            assert!(d.is_dir(), "SALTDB_RULES_TESTS={} is not a directory", d.display());
            d
        }
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/rules-tests"),
    };
    let dir = root.join(sub);
    if dir.is_dir() {
        return Some(dir);
    }
    let line = format!(
        "SKIPPED: {test}: Prometheus' rule test files are not at {}; set SALTDB_RULES_TESTS to a folder holding \
         rulefmt-head/ (model/rulefmt/testdata of Prometheus)",
        dir.display()
    );
    assert!(std::env::var_os("CI").is_none(), "{line} (CI is set, so a skip is a failure)");
    // Straight to stderr: libtest captures eprintln! of passing tests.
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "\n{line}");
    None
}

/// The files of `dir` whose names `keep` accepts, sorted.
fn files(dir: &Path, keep: impl Fn(&str) -> bool) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(&keep))
        .collect();
    found.sort();
    found
}

fn name_of(path: &Path) -> &str {
    path.file_name().unwrap().to_str().unwrap()
}

/// The name validation Prometheus' tests use for a test file.
fn names_for(file: &str) -> NameValidation {
    if file.starts_with("legacy_validation") {
        NameValidation::Legacy
    } else {
        NameValidation::Utf8
    }
}

fn read_with(path: &Path, names: NameValidation) -> Result<RuleFile, Vec<RuleFileError>> {
    read(path.to_str().unwrap(), &ParseOptions { names, ..ParseOptions::default() })
}

/// The messages of `yaml` refused (without a path), or `[]`.
fn errors_with(yaml: &str, options: &ParseOptions) -> Vec<String> {
    match parse_with("", yaml.as_bytes(), options) {
        Ok(_) => Vec::new(),
        Err(errors) => errors.iter().map(ToString::to_string).collect(),
    }
}

fn errors(yaml: &str) -> Vec<String> {
    errors_with(yaml, &ParseOptions::default())
}

fn legacy_errors(yaml: &str) -> Vec<String> {
    errors_with(yaml, &ParseOptions { names: NameValidation::Legacy, ..ParseOptions::default() })
}

fn parsed(yaml: &str) -> RuleFile {
    parse("rules.yml", yaml.as_bytes()).unwrap_or_else(|e| panic!("{yaml}\nrefused: {e:?}"))
}

/// A one-rule file around `rule` (indented under `rules:`).
fn one_rule(rule: &str) -> String {
    let body: String = rule.lines().map(|l| format!("      {l}\n")).collect();
    format!("groups:\n  - name: g\n    rules:\n{body}")
}

// ---------------------------------------------------------------------------------------------
// Prometheus' test files (model/rulefmt/testdata)

/// `TestParseFileFailure`'s table: the file, the validation scheme, and the text Prometheus'
/// first error contains; where saltdb's words differ, the text saltdb's first error contains.
const BAD_FILES: &[(&str, NameValidation, &str, Option<&str>)] = &[
    ("duplicate_grp.bad.yaml", NameValidation::Utf8, "groupname: \"yolo\" is repeated in the same file", None),
    // Prometheus' PromQL parser says "1:6: parse error: expected type range vector in call to
    // function "rate", got instant vector"; saltdb's (the query API's) words differ.
    (
        "bad_expr.bad.yaml",
        NameValidation::Utf8,
        "parse error",
        Some("5:15: group \"yolo\", rule 1, \"yolo\": could not parse expression: expected type matrix"),
    ),
    ("record_and_alert.bad.yaml", NameValidation::Utf8, "only one of 'record' and 'alert' must be set", None),
    ("no_rec_alert.bad.yaml", NameValidation::Utf8, "one of 'record' or 'alert' must be set", None),
    ("noexpr.bad.yaml", NameValidation::Utf8, "field 'expr' must be set in rule", None),
    (
        "invalid_record_name.bad.yaml",
        NameValidation::Utf8,
        "braces present in the recording rule name; should it be in expr?: strawberry{flavor=\"sweet\"}",
        None,
    ),
    ("bad_field.bad.yaml", NameValidation::Utf8, "field annotation not found", None),
    ("invalid_label_name.bad.yaml", NameValidation::Utf8, "invalid label name", None),
    ("record_and_for.bad.yaml", NameValidation::Utf8, "invalid field 'for' in recording rule", None),
    (
        "record_and_keep_firing_for.bad.yaml",
        NameValidation::Utf8,
        "invalid field 'keep_firing_for' in recording rule",
        None,
    ),
    ("legacy_validation_annotation.bad.yaml", NameValidation::Legacy, "invalid annotation name: ins-tance", None),
];

#[test]
fn prometheus_good_files_parse() {
    let Some(dir) = shared_dir("prometheus_good_files_parse", "rulefmt-head") else { return };
    let good = files(&dir, |n| n.ends_with(".good.yaml") || (n.starts_with("test") && n.ends_with(".yaml")));
    assert!(good.len() >= 5, "too few good files in {}: {good:?}", dir.display());
    for path in good {
        let names = names_for(name_of(&path));
        if let Err(e) = read_with(&path, names) {
            panic!("{} refused: {}", path.display(), e.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n"));
        }
    }
}

#[test]
fn prometheus_bad_files_are_refused_with_prometheus_errors() {
    let Some(dir) = shared_dir("prometheus_bad_files_are_refused_with_prometheus_errors", "rulefmt-head") else {
        return;
    };
    let bad = files(&dir, |n| n.ends_with(".bad.yaml"));
    for path in &bad {
        let file = name_of(path);
        let Some((_, names, prometheus, saltdb)) = BAD_FILES.iter().find(|(f, ..)| *f == file) else {
            panic!("{file}: not in the table of expected errors (TestParseFileFailure): add it");
        };
        let errors = read_with(path, *names).expect_err(file);
        let first = errors[0].to_string();
        let expected = saltdb.unwrap_or(prometheus);
        assert!(first.contains(expected), "{file}: first error {first:?} does not contain {expected:?}");
        assert!(first.starts_with(&format!("{}: ", path.display())), "{file}: {first:?} does not name the file");
    }
    assert_eq!(bad.len(), BAD_FILES.len(), "a file of the table is missing from {}", dir.display());
}

#[test]
fn legacy_names_are_utf8_names() {
    let Some(dir) = shared_dir("legacy_names_are_utf8_names", "rulefmt-head") else { return };
    // What legacy validation refuses, UTF-8 validation (the default) accepts: the same file is
    // utf-8_annotation.good.yaml.
    let path = dir.join("legacy_validation_annotation.bad.yaml");
    read_with(&path, NameValidation::Utf8).unwrap();
}

#[test]
fn aliases_and_merge_keys_resolve_as_in_prometheus() {
    let Some(dir) = shared_dir("aliases_and_merge_keys_resolve_as_in_prometheus", "rulefmt-head") else { return };
    let file = read_with(&dir.join("test_aliases.yaml"), NameValidation::Utf8).unwrap();
    let expr = "sum without(instance) (rate(errors_total[5m]))\n/\nsum without(instance) (rate(requests_total[5m]))\n";
    assert_eq!(file.groups.len(), 2);
    for group in &file.groups {
        let r = &group.rules;
        assert_eq!(r[0].name(), "HighAlert");
        assert_eq!(r[0].labels["severity"], "critical");
        let RuleKind::Alerting { annotations, for_ms, .. } = &r[0].kind else { panic!("{:?}", r[0]) };
        assert_eq!(annotations["description"], "stuff's happening with {{ $.labels.service }}");
        assert_eq!(*for_ms, 300_000);
        assert_eq!(r[1].name(), "new_metric");
        assert!(matches!(r[1].kind, RuleKind::Recording { .. }));
        assert_eq!(r[2].name(), "HighAlert");
        assert_eq!(r[2].labels["severity"], "critical");
        assert_eq!(r[3].name(), "HighAlert2");
        assert_eq!(r[3].labels["severity"], "critical");
        for rule in r {
            assert_eq!(rule.expr, expr);
        }
    }
    // The merged rule keeps the anchored rule's fields, its own `alert` winning.
    let RuleKind::Alerting { for_ms, annotations, .. } = &file.groups[0].rules[3].kind else { panic!() };
    assert_eq!((*for_ms, annotations.len()), (300_000, 1));
}

#[test]
fn test_yaml_builds_the_model() {
    let Some(dir) = shared_dir("test_yaml_builds_the_model", "rulefmt-head") else { return };
    let path = dir.join("test.yaml");
    let file = read_with(&path, NameValidation::Utf8).unwrap();
    assert_eq!(file.path, path.to_str().unwrap());
    let names: Vec<&str> = file.groups.iter().map(|g| g.name.as_str()).collect();
    assert_eq!(names, ["my-group-name", "my-another-name"]);
    let g = &file.groups[0];
    assert_eq!(
        (g.interval_ms, g.query_offset_ms, g.limit, g.file.as_str()),
        (Some(30_000), None, 0, file.path.as_str())
    );
    assert_eq!(g.rules.len(), 3);
    assert_eq!((g.rules[0].line, g.rules[1].line, g.rules[2].line), (5, 17, 26));
    assert_eq!(g.rules[1].labels, BTreeMap::from([("abc".into(), "edf".into()), ("uvw".into(), "xyz".into())]));
    assert_eq!(g.rules[1].kind, RuleKind::Recording { record: "new_metric".into() });
}

// ---------------------------------------------------------------------------------------------
// Prometheus' other rulefmt tests

/// `TestTemplateParsing`: a template that does not parse refuses an alerting rule, whatever
/// the template engine (`rules::template::check`) refuses.
#[test]
fn alert_templates_are_checked_by_the_template_parser() {
    let texts = [
        "Instance {{ $labels.instance }} down",
        "Instance {{ $label.instance }} down",
        "{{$this_is_wrong}}",
        "{{$labels.quantile * 100}}",
        "{{ if }}",
    ];
    for text in texts {
        let yaml = one_rule(&format!(
            "- alert: InstanceDown\n  expr: up == 0\n  for: 5m\n  labels:\n    severity: page\n  annotations:\n    summary: {text:?}\n"
        ));
        let template = format!("{}{text}", super::validate::TEMPLATE_DEFINITIONS);
        let expected: Vec<String> = match crate::rules::template::check("__alert_InstanceDown", &template) {
            Ok(()) => Vec::new(),
            Err(e) => vec![format!("group \"g\", rule 1, \"InstanceDown\": annotation \"summary\": {e}")],
        };
        assert_eq!(errors(&yaml), expected, "{text}");
    }
}

/// `TestUniqueErrorNodes`: each rule's error points at its own expression.
#[test]
fn each_error_points_at_its_own_rule() {
    let yaml = "
groups:
- name: example
  rules:
  - alert: InstanceDown
    expr: up ===== 0
    for: 5m
  - alert: InstanceUp
    expr: up ===== 1
    for: 5m
";
    let errors = errors(yaml);
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(errors[0].starts_with("6:11: group \"example\", rule 1, \"InstanceDown\": could not parse expression: "));
    assert!(errors[1].starts_with("9:11: group \"example\", rule 2, \"InstanceUp\": could not parse expression: "));
}

/// `TestMultiDocParse`: only the first document is read.
#[test]
fn only_the_first_document_is_read() {
    let first = "groups:\n- name: example\n  rules:\n  - alert: InstanceDown\n    expr: up == 0\n";
    for yaml in [first.to_owned(), format!("{first}---\ngroups:\n- name: example2\n"), format!("{first}---\n")] {
        let file = parsed(&yaml);
        assert_eq!(file.groups.len(), 1);
        assert_eq!(file.groups[0].name, "example");
    }
    // A second document is not even parsed.
    assert_eq!(parsed(&format!("{first}---\n: : [\n")).groups.len(), 1);
}

// ---------------------------------------------------------------------------------------------
// Each message

#[test]
fn group_names_must_be_set_and_unique() {
    assert_eq!(errors("groups:\n  - name: ''\n"), ["2:5: Groupname must not be empty"]);
    assert_eq!(errors("groups:\n  - rules: []\n"), ["2:5: Groupname must not be empty"]);
    assert_eq!(
        errors("groups:\n  - name: a\n  - name: b\n  - {name: a}\n"),
        ["4:5: groupname: \"a\" is repeated in the same file"]
    );
}

#[test]
fn group_labels_are_checked() {
    let yaml = "groups:\n- name: g\n  labels:\n    ok: x\n    __name__: y\n    \"\": z\n    v: \"a\\0b\"\n";
    assert_eq!(errors(yaml), ["invalid label name: ", "invalid label name: __name__", "invalid label value: a\0b"]);
    assert_eq!(legacy_errors("groups:\n- name: g\n  labels:\n    a.b: x\n"), ["invalid label name: a.b"]);
    assert!(errors("groups:\n- name: g\n  labels:\n    a.b: x\n    名前: y\n").is_empty());
}

#[test]
fn record_or_alert_exactly_one() {
    assert_eq!(
        errors(&one_rule("- record: a\n  alert: b\n  expr: '1'")),
        ["4:17: 5:16: group \"g\", rule 1, \"b\": only one of 'record' and 'alert' must be set"]
    );
    assert_eq!(
        errors(&one_rule("- expr: '1'")),
        ["0:0: 0:0: group \"g\", rule 1, \"\": one of 'record' or 'alert' must be set"]
    );
    // A null `record` is where it is written; the absent `alert` is 0:0.
    assert_eq!(
        errors(&one_rule("- record:\n  expr: '1'")),
        ["4:16: 0:0: group \"g\", rule 1, \"\": one of 'record' or 'alert' must be set"]
    );
}

#[test]
fn expr_must_be_set_and_parse() {
    assert_eq!(errors(&one_rule("- record: a")), ["0:0: group \"g\", rule 1, \"a\": field 'expr' must be set in rule"]);
    assert_eq!(
        errors(&one_rule("- record: a\n  expr: ''")),
        ["5:15: group \"g\", rule 1, \"a\": field 'expr' must be set in rule"]
    );
    let bad = errors(&one_rule("- record: a\n  expr: sum(")).concat();
    assert!(bad.starts_with("5:15: group \"g\", rule 1, \"a\": could not parse expression: "), "{bad}");
    // What the query API accepts, rules accept.
    assert!(errors(&one_rule("- record: a\n  expr: rate(x[5m] offset -1m @ end())")).is_empty());
}

#[test]
fn recording_rules_have_no_alerting_fields() {
    let yaml = one_rule("- record: a\n  expr: '1'\n  for: 1m\n  keep_firing_for: 1m\n  annotations:\n    x: y");
    assert_eq!(
        errors(&yaml),
        [
            "4:17: group \"g\", rule 1, \"a\": invalid field 'annotations' in recording rule",
            "4:17: group \"g\", rule 1, \"a\": invalid field 'for' in recording rule",
            "4:17: group \"g\", rule 1, \"a\": invalid field 'keep_firing_for' in recording rule",
        ]
    );
    // Zero is no value.
    assert!(errors(&one_rule("- record: a\n  expr: '1'\n  for: 0s\n  annotations: {}")).is_empty());
}

#[test]
fn recording_rule_names_are_metric_names() {
    assert_eq!(
        errors(&one_rule("- record: 'a{b=\"c\"}'\n  expr: '1'")),
        ["4:17: group \"g\", rule 1, \"a{b=\\\"c\\\"}\": braces present in the recording rule name; should it be in expr?: a{b=\"c\"}"]
    );
    assert!(errors(&one_rule("- record: job.errors:rate5m\n  expr: '1'")).is_empty());
    assert_eq!(
        legacy_errors(&one_rule("- record: job.errors:rate5m\n  expr: '1'")),
        ["4:17: group \"g\", rule 1, \"job.errors:rate5m\": invalid recording rule name: job.errors:rate5m"]
    );
    assert!(legacy_errors(&one_rule("- record: job:errors:rate5m\n  expr: '1'")).is_empty());
}

#[test]
fn rule_label_and_annotation_names_are_checked() {
    let yaml = one_rule(
        "- alert: a\n  expr: '1'\n  labels:\n    __name__: x\n    ins-tance: y\n  annotations:\n    an-notation: z",
    );
    assert_eq!(errors(&yaml), ["group \"g\", rule 1, \"a\": invalid label name: __name__"]);
    assert_eq!(
        legacy_errors(&yaml),
        [
            "group \"g\", rule 1, \"a\": invalid label name: __name__",
            "group \"g\", rule 1, \"a\": invalid label name: ins-tance",
            "group \"g\", rule 1, \"a\": invalid annotation name: an-notation",
        ]
    );
    assert_eq!(
        errors(&one_rule("- record: a\n  expr: '1'\n  labels:\n    x: \"\\0\"")),
        ["group \"g\", rule 1, \"a\": invalid label value: \0"]
    );
}

#[test]
fn alert_names_are_any_text() {
    assert!(errors(&one_rule("- alert: 'High errors {on} \"this\"'\n  expr: '1'")).is_empty());
}

#[test]
fn durations_are_prometheus_durations() {
    let group = |field: &str| format!("groups:\n- name: g\n  {field}\n");
    let file = parsed(&group("interval: 1h30m\n  query_offset: 0s\n  limit: 10"));
    assert_eq!(
        (file.groups[0].interval_ms, file.groups[0].query_offset_ms, file.groups[0].limit),
        (Some(5_400_000), Some(0), 10)
    );
    assert_eq!(parsed(&group("interval: 0s")).groups[0].interval_ms, None);
    assert_eq!(parsed(&group("interval: ~")).groups[0].interval_ms, None);
    assert_eq!(parsed(&group("query_offset: ~")).groups[0].query_offset_ms, None);
    assert_eq!(parsed(&group("interval: 1d")).groups[0].interval_ms, Some(86_400_000));
    assert_eq!(errors(&group("interval: 5")), ["not a valid duration string: \"5\""]);
    assert_eq!(errors(&group("interval: -5m")), ["not a valid duration string: \"-5m\""]);
    assert_eq!(errors(&group("interval: ''")), ["empty duration string"]);
    assert_eq!(errors(&group("query_offset: 1x")), ["unknown unit \"x\" in duration \"1x\""]);
    assert_eq!(errors(&group("interval: 1000y")), ["duration out of range"]);
    assert_eq!(
        errors(&group("interval: {a: 1}")),
        ["yaml: unmarshal errors:\n  line 3: cannot unmarshal !!map into string"]
    );
    let for_ = one_rule("- alert: a\n  expr: '1'\n  for: 90s\n  keep_firing_for: 1w");
    let RuleKind::Alerting { for_ms, keep_firing_for_ms, .. } = parsed(&for_).groups[0].rules[0].kind.clone() else {
        panic!()
    };
    assert_eq!((for_ms, keep_firing_for_ms), (90_000, 604_800_000));
}

#[test]
fn limits_are_go_ints() {
    let limit = |v: &str| parsed(&format!("groups:\n- name: g\n  limit: {v}\n")).groups[0].limit;
    assert_eq!((limit("0x10"), limit("1_000"), limit("1.9"), limit("-5"), limit("~")), (16, 1000, 1, 0, 0));
    assert_eq!(
        errors("groups:\n- name: g\n  limit: \"5\"\n"),
        ["yaml: unmarshal errors:\n  line 3: cannot unmarshal !!str `5` into int"]
    );
    assert_eq!(
        errors("groups:\n- name: g\n  limit: true\n"),
        ["yaml: unmarshal errors:\n  line 3: cannot unmarshal !!bool `true` into int"]
    );
    assert_eq!(
        errors("groups:\n- name: g\n  limit: 2001-01-01\n"),
        ["yaml: unmarshal errors:\n  line 3: cannot unmarshal !!timestamp `2001-01-01` into int"]
    );
}

#[test]
fn unknown_fields_are_refused_unless_ignored() {
    let yaml =
        "groups:\n- name: g\n  interval_: 1m\n  rules:\n  - record: a\n    expr: '1'\n    annotation: {}\nextra: 1\n";
    assert_eq!(
        errors(yaml),
        [
            "yaml: unmarshal errors:\n  line 3: field interval_ not found in type rulefmt.RuleGroup\n  \
             line 7: field annotation not found in type rulefmt.Rule\n  line 8: field extra not found in type rulefmt.RuleGroups"
        ]
    );
    let ignoring = ParseOptions { ignore_unknown_fields: true, ..ParseOptions::default() };
    assert!(errors_with(yaml, &ignoring).is_empty());
}

#[test]
fn type_errors_are_listed_as_go_yaml_lists_them() {
    let yaml = "groups:\n- name: [a]\n  rules: [5, ~, {record: {x: 1}, expr: '1', labels: [a]}]\n- 7\n";
    assert_eq!(
        errors(yaml),
        [
            "yaml: unmarshal errors:\n  line 2: cannot unmarshal !!seq into string\n  \
             line 3: cannot unmarshal !!int `5` into rulefmt.Rule\n  line 3: cannot unmarshal !!map into string\n  \
             line 3: cannot unmarshal !!seq into map[string]string\n  line 4: cannot unmarshal !!int `7` into rulefmt.RuleGroup"
        ]
    );
    assert_eq!(
        errors("groups: 5\n"),
        ["yaml: unmarshal errors:\n  line 1: cannot unmarshal !!int `5` into []rulefmt.RuleGroup"]
    );
    assert_eq!(
        errors("just some text here\n"),
        ["yaml: unmarshal errors:\n  line 1: cannot unmarshal !!str `just so...` into rulefmt.RuleGroups"]
    );
    assert_eq!(errors("[]\n"), ["yaml: unmarshal errors:\n  line 1: cannot unmarshal !!seq into rulefmt.RuleGroups"]);
}

#[test]
fn scalars_are_strings_and_nulls_are_unset() {
    let file = parsed(&one_rule(
        "- record: 5\n  expr: 1\n  labels:\n    a: true\n    b: ~\n    c: 2001-01-01\n    ~: dropped",
    ));
    let rule = &file.groups[0].rules[0];
    assert_eq!((rule.name(), rule.expr.as_str()), ("5", "1"));
    let labels: Vec<(&str, &str)> = rule.labels.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    assert_eq!(labels, [("a", "true"), ("b", ""), ("c", "2001-01-01")]);
    // Null items of a sequence are dropped.
    assert_eq!(parsed("groups:\n- ~\n- name: a\n  rules: [~]\n").groups.len(), 1);
}

#[test]
fn repeated_keys_are_refused() {
    assert_eq!(
        errors("groups:\n- name: a\n  name: b\n  labels: {x: 1, x: 2, x: 3}\n"),
        ["yaml: unmarshal errors:\n  line 3: mapping key \"name\" already defined at line 2"]
    );
    assert_eq!(
        errors("groups:\n- name: a\n  labels: {x: 1, x: 2, x: 3}\n"),
        [
            "yaml: unmarshal errors:\n  line 3: mapping key \"x\" already defined at line 3\n  \
             line 3: mapping key \"x\" already defined at line 3\n  line 3: mapping key \"x\" already defined at line 3"
        ]
    );
}

#[test]
fn explicit_tags_are_go_yaml_s() {
    assert_eq!(errors(&one_rule("- record: !!int abc\n  expr: '1'")), ["yaml: cannot decode !!str `abc` as a !!int"]);
    assert_eq!(parsed(&one_rule("- record: !!str 5\n  expr: !local '1'")).groups[0].rules[0].name(), "5");
    assert_eq!(parsed(&one_rule("- record: !!binary YWJj\n  expr: '1'")).groups[0].rules[0].name(), "abc");
    assert_eq!(
        errors(&one_rule("- record: !!binary '#'\n  expr: '1'")),
        ["yaml: !!binary value contains invalid base64 data"]
    );
}

#[test]
fn anchors_aliases_and_merges() {
    let yaml = "
base: &base {record: a, expr: '1', labels: {x: '1', y: '2'}}
more: &more {labels: {z: '3'}}
groups:
- name: g
  rules:
  - *base
  - <<: [*base, *more]
    record: b
  - <<: *base
    labels:
      <<: {x: '9', w: '0'}
      x: '8'
";
    let file =
        parse_with("", yaml.as_bytes(), &ParseOptions { ignore_unknown_fields: true, ..ParseOptions::default() })
            .unwrap();
    let rules = &file.groups[0].rules;
    let labels = |i: usize| rules[i].labels.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",");
    assert_eq!((rules[0].name(), labels(0)), ("a", "x=1,y=2".to_owned()));
    // The first mapping merged wins over a later one; keys written beside `<<` win over both.
    assert_eq!((rules[1].name(), labels(1)), ("b", "x=1,y=2".to_owned()));
    assert_eq!((rules[2].name(), labels(2)), ("a", "w=0,x=8".to_owned()));
    // Without ignoring unknown fields, the anchors' own keys are unknown at the top.
    assert_eq!(
        errors(yaml),
        ["yaml: unmarshal errors:\n  line 2: field base not found in type rulefmt.RuleGroups\n  \
          line 3: field more not found in type rulefmt.RuleGroups"]
    );
}

#[test]
fn alias_errors_stop_decoding() {
    assert_eq!(errors(&one_rule("- record: *nope\n  expr: '1'")), ["yaml: unknown anchor 'nope' referenced"]);
    assert_eq!(errors("groups:\n- &g\n  name: a\n  labels: *g\n"), ["yaml: anchor 'g' value contains itself"]);
    assert_eq!(errors("groups:\n- &g\n  name: a\n  <<: *g\n"), ["yaml: anchor 'g' value contains itself"]);
    assert_eq!(
        errors("groups:\n- name: a\n  <<: 5\n"),
        ["yaml: map merge requires map or sequence of maps as the value"]
    );
    assert_eq!(
        errors("groups:\n- name: a\n  <<: [{}, 5]\n"),
        ["yaml: map merge requires map or sequence of maps as the value"]
    );
}

#[test]
fn alias_expansion_is_bounded() {
    // A "billion laughs": ten levels of ten aliases each.
    let mut yaml = String::from("a0: &a0 {record: x, expr: '1'}\n");
    for i in 1..10 {
        let items = (0..10).map(|_| format!("*a{}", i - 1)).collect::<Vec<_>>().join(", ");
        yaml.push_str(&format!("a{i}: &a{i} [{items}]\n"));
    }
    yaml.push_str("groups:\n- name: g\n  rules: *a9\n");
    let refused = errors_with(&yaml, &ParseOptions { ignore_unknown_fields: true, ..ParseOptions::default() });
    let lines = ["line 9: cannot unmarshal !!seq into rulefmt.Rule"; 10].join("\n  ");
    assert_eq!(refused, [format!("yaml: unmarshal errors:\n  {lines}")]);
    let mut chain = String::from("b0: &b0 {x: '1'}\n");
    for i in 1..200 {
        chain.push_str(&format!("b{i}: &b{i} {{<<: *b{}}}\n", i - 1));
    }
    chain.push_str("groups:\n- name: g\n  labels: *b199\n");
    let deep = errors_with(&chain, &ParseOptions { ignore_unknown_fields: true, ..ParseOptions::default() });
    assert_eq!(deep, ["yaml: aliases and merge keys nest deeper than 100 levels"]);
}

#[test]
fn excessive_aliasing_is_refused() {
    let mut yaml = String::from("l0: &l0 {a: '1'}\n");
    for i in 1..12 {
        let items = (0..4).map(|_| format!("*l{}", i - 1)).collect::<Vec<_>>().join(", ");
        yaml.push_str(&format!("l{i}: &l{i} {{<<: [{items}]}}\n"));
    }
    yaml.push_str("groups:\n");
    for _ in 0..50 {
        yaml.push_str("- name: g\n  labels: *l11\n");
    }
    let refused = errors_with(&yaml, &ParseOptions { ignore_unknown_fields: true, ..ParseOptions::default() });
    assert_eq!(refused, ["yaml: document contains excessive aliasing"]);
}

#[test]
fn yaml_syntax_errors_are_go_yaml_s() {
    assert_eq!(
        errors("groups:\n  - name: a\n  rules: []\n   - x\n"),
        ["yaml: line 1: did not find expected '-' indicator"]
    );
    assert_eq!(
        errors("groups:\n  - name: a\n    rules:\n      - record: x\n       expr: 1\n"),
        ["yaml: line 3: did not find expected '-' indicator"]
    );
    assert_eq!(errors("groups:\n- name: \"a\n"), ["yaml: line 2: found unexpected end of stream"]);
    assert_eq!(errors("a: \u{1}\n"), ["yaml: control characters are not allowed"]);
    assert_eq!(errors_bytes(b"groups: \xff\n"), ["yaml: invalid leading UTF-8 octet"]);
    assert_eq!(errors_bytes(b"groups: \xc3"), ["yaml: incomplete UTF-8 octet sequence"]);
    assert_eq!(errors_bytes(b"groups: \xc3("), ["yaml: invalid trailing UTF-8 octet"]);
    assert_eq!(errors_bytes(b"groups: \xc0\x80"), ["yaml: invalid length of a UTF-8 sequence"]);
}

fn errors_bytes(bytes: &[u8]) -> Vec<String> {
    parse("", bytes).err().unwrap_or_default().iter().map(ToString::to_string).collect()
}

#[test]
fn empty_files_have_no_groups() {
    for yaml in ["", "# nothing\n", "---\n", "groups:\n", "groups: []\n", "\u{feff}groups: []\n"] {
        assert_eq!(parsed(yaml).groups, [], "{yaml:?}");
    }
}

#[test]
fn errors_name_their_file() {
    let e = parse("rules/a.yml", b"groups:\n- name: ''\n").unwrap_err();
    assert_eq!(e[0].to_string(), "rules/a.yml: 2:3: Groupname must not be empty");
    assert_eq!(e[0].path, "rules/a.yml");
    assert_eq!(e[0].problem, Problem::EmptyGroupName { at: Position { line: 2, column: 3 } });
}

// ---------------------------------------------------------------------------------------------
// Reading and loading

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_owned()
}

#[test]
fn read_errors_are_go_s() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.yml");
    let missing = missing.to_str().unwrap();
    let e = read(missing, &ParseOptions::default()).unwrap_err();
    assert_eq!(e[0].to_string(), format!("{missing}: open {missing}: no such file or directory"));
    let here = dir.path().to_str().unwrap();
    let e = read(here, &ParseOptions::default()).unwrap_err();
    assert_eq!(e[0].to_string(), format!("{here}: read {here}: is a directory"));
}

#[test]
fn load_expands_globs_as_prometheus_rule_files() {
    let dir = tempfile::tempdir().unwrap();
    let rules = "groups:\n- name: g\n  rules:\n  - record: a\n    expr: '1'\n";
    let b = write(dir.path(), "b.yml", rules);
    let a = write(dir.path(), "a.yml", rules);
    write(dir.path(), "sub/c.yml", rules);
    write(dir.path(), "notes.txt", "not yaml: [");
    let root = dir.path().to_str().unwrap();
    let paths = |files: Vec<RuleFile>| files.into_iter().map(|f| f.path).collect::<Vec<_>>();
    assert_eq!(paths(load(&format!("{root}/*.yml")).unwrap()), [a.clone(), b.clone()]);
    assert_eq!(paths(load(&format!("{root}/*/*.yml")).unwrap()), [format!("{root}/sub/c.yml")]);
    // A glob matching nothing is no error; a path that does not exist is.
    assert_eq!(load(&format!("{root}/*.rules")).unwrap(), []);
    let missing = format!("{root}/missing.yml");
    assert_eq!(
        load(&missing).unwrap_err()[0].to_string(),
        format!("{missing}: open {missing}: no such file or directory")
    );
    let bad = format!("{root}/[.yml");
    assert_eq!(load(&bad).unwrap_err()[0].to_string(), format!("{bad}: syntax error in pattern"));
    // Each file once, in the order named; every refused file reported.
    let all = load_all(&[b.clone(), format!("{root}/*.yml")], &ParseOptions::default()).unwrap();
    assert_eq!(paths(all), [b, a]);
    let refused = load_all(&[format!("{root}/*.txt"), missing], &ParseOptions::default()).unwrap_err();
    assert_eq!(refused.len(), 2, "{refused:?}");
}

// ---------------------------------------------------------------------------------------------
// saltdb check rules

fn run_check(args: CheckRulesArgs, stdin: &str) -> (u8, String, String) {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let status = check(&args, &mut stdin.as_bytes(), &mut out, &mut err).unwrap();
    (status, String::from_utf8(out).unwrap(), String::from_utf8(err).unwrap())
}

fn args(files: &[&str]) -> CheckRulesArgs {
    CheckRulesArgs {
        files: files.iter().map(|f| (*f).to_owned()).collect(),
        lint: "duplicate-rules".into(),
        lint_fatal: false,
        ignore_unknown_fields: false,
        name_validation: NameValidation::Utf8,
    }
}

#[test]
fn check_rules_prints_as_promtool() {
    let dir = tempfile::tempdir().unwrap();
    let good = write(
        dir.path(),
        "good.yml",
        "groups:\n- name: g\n  rules:\n  - record: a\n    expr: '1'\n  - record: b\n    expr: '1'\n",
    );
    let bad = write(dir.path(), "bad.yml", "groups:\n- name: g\n  rules:\n  - record: a\n");
    let (status, out, err) = run_check(args(&[&good, &bad]), "");
    assert_eq!(status, FAILURE);
    assert_eq!(out, format!("Checking {good}\n  SUCCESS: 2 rules found\n\nChecking {bad}\n\n"));
    assert_eq!(err, format!("  FAILED:\n{bad}: 0:0: group \"g\", rule 1, \"a\": field 'expr' must be set in rule\n"));
    let (status, out, err) = run_check(args(&[&good]), "");
    assert_eq!(
        (status, out.as_str(), err.as_str()),
        (SUCCESS, &*format!("Checking {good}\n  SUCCESS: 2 rules found\n\n"), "")
    );
}

#[test]
fn check_rules_lints_duplicates_as_promtool() {
    let rules = "groups:
- name: g
  labels: {team: a}
  rules:
  - {alert: A, expr: '1', labels: {severity: page}}
  - {alert: A, expr: '2', labels: {severity: page}}
  - {alert: A, expr: '3', labels: {severity: page}}
  - {alert: A, expr: '4', labels: {severity: page, team: b}}
- name: h
  rules:
  - {alert: A, expr: '4', labels: {severity: page, team: b}}
  - {record: r, expr: '1'}
";
    let (status, out, err) = run_check(args(&[]), rules);
    assert_eq!(status, SUCCESS);
    assert_eq!(out, "Checking standard input\n\n");
    assert_eq!(
        err,
        "  FAILED:\nlint error 2 duplicate rule(s) found.\nMetric: A\nLabel(s):\n\tseverity: page\n\tteam: a\n\
         Metric: A\nLabel(s):\n\tseverity: page\n\tteam: b\nMight cause inconsistency while recording expressions\n"
    );
    let fatal = CheckRulesArgs { lint_fatal: true, ..args(&[]) };
    assert_eq!(run_check(fatal, rules).0, LINT_FAILURE);
    let none = CheckRulesArgs { lint: "none".into(), ..args(&[]) };
    assert_eq!(
        run_check(none, rules),
        (SUCCESS, "Checking standard input\n  SUCCESS: 6 rules found\n\n".into(), String::new())
    );
    let unknown = CheckRulesArgs { lint: "nonsense".into(), ..args(&[]) };
    assert!(run_check(unknown, rules).1.starts_with("WARNING: unknown lint option nonsense\n"));
}

#[test]
fn check_rules_reads_standard_input_and_options() {
    let (status, _, err) = run_check(args(&[]), "groups:\n- name: g\n  extra: 1\n");
    assert_eq!(
        (status, err.as_str()),
        (FAILURE, "  FAILED:\nyaml: unmarshal errors:\n  line 3: field extra not found in type rulefmt.RuleGroup\n")
    );
    let ignoring = CheckRulesArgs { ignore_unknown_fields: true, ..args(&[]) };
    assert_eq!(run_check(ignoring, "groups:\n- name: g\n  extra: 1\n").0, SUCCESS);
    let legacy = CheckRulesArgs { name_validation: NameValidation::Legacy, ..args(&[]) };
    let (status, _, err) = run_check(legacy, "groups:\n- name: g\n  labels: {a-b: c}\n");
    assert_eq!((status, err.as_str()), (FAILURE, "  FAILED:\ninvalid label name: a-b\n"));
}

// ---------------------------------------------------------------------------------------------
// Robustness

/// YAML-ish text: fragments that reach the decoder's corners (anchors, aliases, merges, tags,
/// flow and block collections, rule fields).
fn yamlish() -> impl Strategy<Value = String> {
    let fragment = prop::sample::select(vec![
        "groups:",
        "- ",
        "  ",
        "\n",
        "name: ",
        "rules:",
        "record: ",
        "alert: ",
        "expr: ",
        "for: ",
        "labels:",
        "annotations:",
        "interval: ",
        "limit: ",
        "query_offset: ",
        "&a ",
        "*a",
        "&b ",
        "*b",
        "<<: ",
        "!!int ",
        "!!str ",
        "!!binary ",
        "!x ",
        "{",
        "}",
        "[",
        "]",
        ", ",
        ": ",
        "'",
        "\"",
        "|",
        ">",
        "~",
        "5",
        "1m",
        "-1",
        "x",
        "up",
        "{{ $labels }}",
        "? ",
        "---",
        "...",
        "#",
        "\t",
        "é",
        "\\",
        "%TAG ! !x\n",
    ]);
    prop::collection::vec(fragment, 0..60).prop_map(|parts| parts.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..400)) {
        let _ = parse("p", &bytes);
    }

    #[test]
    fn yamlish_text_never_panics(text in yamlish()) {
        let _ = parse("p", text.as_bytes());
        let _ = parse_with("p", text.as_bytes(), &ParseOptions { ignore_unknown_fields: true, names: NameValidation::Legacy });
    }
}

#[test]
fn deep_nesting_is_refused_without_overflow() {
    for open in ["[", "{", "- ", "a:\n "] {
        let text = open.repeat(50_000);
        let _ = parse("p", text.as_bytes());
    }
}
