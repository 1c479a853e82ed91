//! The language: constructs, Go's semantics and error wording, limits, and no panic on any
//! input. Expectations follow Go's `text/template` and Prometheus' `template_test.go`.

use std::cell::RefCell;
use std::collections::BTreeMap;

use proptest::prelude::*;

use super::funcs::Env;
use super::value::Value;
use super::*;

/// A `query` that answers the same samples to every expression, at Prometheus' test time.
#[derive(Default)]
pub(super) struct Fake {
    pub(super) samples: Vec<QuerySample>,
    pub(super) asked: RefCell<Vec<String>>,
}

impl TemplateQuery for Fake {
    fn query(&self, expr: &str) -> Result<Vec<QuerySample>, String> {
        self.asked.borrow_mut().push(expr.to_owned());
        if expr == "fail" {
            return Err("query failed".into());
        }
        Ok(self.samples.clone())
    }

    fn timestamp_ms(&self) -> i64 {
        1_353_755_652_000
    }
}

/// A sample with `name` and `instance` labels.
pub(super) fn sample(name: &str, instance: &str, value: f64) -> QuerySample {
    let mut labels = BTreeMap::from([("__name__".to_owned(), name.to_owned())]);
    if !instance.is_empty() {
        labels.insert("instance".into(), instance.into());
    }
    QuerySample { labels, value }
}

/// Runs `text` as Prometheus' `template_test.go` does: named `test`, no preamble, data `nil`.
pub(super) fn raw(text: &str, samples: Vec<QuerySample>) -> Result<String, String> {
    let q = Fake { samples, ..Fake::default() };
    let env = Env { query: &q, external_url: "http://testhost:9090/path/prefix", now_ms: q.timestamp_ms() };
    let trees = parse::parse("test", text).map_err(|e| format!("error parsing template test: {e}"))?;
    exec::execute(&trees, "test", text, Value::Nil, &env).map_err(|e| format!("error executing template test: {e}"))
}

/// Table rows: template, then the output or the error.
pub(super) fn check_table(rows: &[(&str, Result<&str, &str>)]) {
    for (text, want) in rows {
        let got = raw(text, Vec::new());
        assert_eq!(got.as_deref().map_err(String::as_str), *want, "template {text:?}");
    }
}

fn alert_labels() -> BTreeMap<String, String> {
    BTreeMap::from([
        ("alertname".to_owned(), "HighLoad".to_owned()),
        ("instance".to_owned(), "host1:9100".to_owned()),
        ("job".to_owned(), "node".to_owned()),
    ])
}

/// Expands `text` as an alert's annotation of alert `HighLoad`, value 1234567.
fn alert(text: &str, samples: Vec<QuerySample>) -> Result<String, String> {
    let labels = alert_labels();
    let external = BTreeMap::from([("cluster".to_owned(), "eu1".to_owned())]);
    let data = TemplateData {
        labels: &labels,
        external_labels: &external,
        external_url: "http://prom.example:9090/prefix",
        value: 1_234_567.0,
    };
    let q = Fake { samples, ..Fake::default() };
    expand("__alert_HighLoad", text, &data, &q).map_err(|e| e.0)
}

#[test]
fn alert_templates() {
    let two = || vec![sample("x", "b", 2.0), sample("x", "a", 1.0)];
    let rows: Vec<(&str, Vec<QuerySample>, &str)> = vec![
        ("{{ $labels.instance }} is down", vec![], "host1:9100 is down"),
        ("{{ $value | humanize }}", vec![], "1.235M"),
        ("{{ humanizeDuration 3661 }}", vec![], "1h 1m 1s"),
        ("{{ with query \"up\" }}{{ . | first | value }}{{ end }}", vec![sample("up", "a", 1.0)], "1"),
        (
            "{{ range query \"x\" | sortByLabel \"instance\" }}{{ .Labels.instance }}={{ .Value }} {{ end }}",
            two(),
            "a=1 b=2 ",
        ),
        ("{{ printf \"%.2f\" $value }}", vec![], "1234567.00"),
        ("{{ reReplaceAll \"(a)b\" \"x$1\" \"ab\" }}", vec![], "xa"),
        ("{{ .Labels.job }}/{{ $externalLabels.cluster }}/{{ .ExternalLabels.cluster }}", vec![], "node/eu1/eu1"),
        (
            "{{ $externalURL }} {{ .ExternalURL }}",
            vec![],
            "http://prom.example:9090/prefix http://prom.example:9090/prefix",
        ),
        ("[{{ $labels.missing }}]", vec![], "[]"),
        ("{{ .Value }} {{ $value }}", vec![], "1.234567e+06 1.234567e+06"),
        ("{{ with $labels }}{{ $.Labels.job }}{{ end }}", vec![], "node"),
        (
            "{{ range $k, $v := $labels }}{{ $k }}={{ $v }};{{ end }}",
            vec![],
            "alertname=HighLoad;instance=host1:9100;job=node;",
        ),
        ("{{ len $labels }} {{ index $labels \"job\" }}", vec![], "3 node"),
        ("{{ printf \"%v\" $labels }}", vec![], "map[alertname:HighLoad instance:host1:9100 job:node]"),
        ("{{ if gt $value 1000.0 }}high{{ else }}low{{ end }}", vec![], "high"),
        ("{{ pathPrefix }} {{ externalURL }}", vec![], "/prefix http://prom.example:9090/prefix"),
        ("{{ now }}", vec![], "1.353755652e+09"),
    ];
    for (text, samples, want) in rows {
        assert_eq!(alert(text, samples).as_deref(), Ok(want), "template {text:?}");
    }
}

#[test]
fn alert_errors() {
    assert_eq!(PREAMBLE.len(), 112);
    let name = "__alert_HighLoad";
    let rows = [
        ("{{ foo }}", format!("error parsing template {name}: template: {name}:1: function \"foo\" not defined")),
        ("{{", format!("error parsing template {name}: template: {name}:1: unclosed action")),
        ("{{ .Labels.job", format!("error parsing template {name}: template: {name}:1: unclosed action")),
        (
            "{{ humanize \"one\" }}",
            format!(
                "error executing template {name}: template: {name}:1:115: executing \"{name}\" at <humanize \"one\">: \
                 error calling humanize: strconv.ParseFloat: parsing \"one\": invalid syntax"
            ),
        ),
        (
            "{{ humanize $labels.job }}",
            format!(
                "error executing template {name}: template: {name}:1:115: executing \"{name}\" at <humanize $labels.job>: \
                 error calling humanize: strconv.ParseFloat: parsing \"node\": invalid syntax"
            ),
        ),
        (
            "{{ .Foo }}",
            format!(
                "error executing template {name}: template: {name}:1:115: executing \"{name}\" at <.Foo>: can't evaluate \
                 field Foo in type struct {{ Labels map[string]string; ExternalLabels map[string]string; ExternalURL \
                 string; Value interface {{}} }}"
            ),
        ),
        (
            "{{ $value | toUpper }}",
            format!(
                "error executing template {name}: template: {name}:1:124: executing \"{name}\" at <toUpper>: wrong type \
                 for value; expected string; got float64"
            ),
        ),
        (
            "{{ gt $value 5 }}",
            format!(
                "error executing template {name}: template: {name}:1:115: executing \"{name}\" at <gt $value 5>: error \
                 calling gt: incompatible types for comparison: float64 and int"
            ),
        ),
        (
            "{{ query \"fail\" }}",
            format!(
                "error executing template {name}: template: {name}:1:115: executing \"{name}\" at <query \"fail\">: \
                 error calling query: query failed"
            ),
        ),
    ];
    for (text, want) in rows {
        assert_eq!(alert(text, vec![]), Err(want), "template {text:?}");
    }
    let labels = alert_labels();
    let data = TemplateData { labels: &labels, external_labels: &labels, external_url: "", value: 0.0 };
    assert_eq!(
        expand_or_error("__alert_X", "{{ nope }}", &data, &Fake::default()),
        "<error expanding template: error parsing template __alert_X: template: __alert_X:1: function \"nope\" not defined>"
    );
    assert_eq!(expand_or_error("__alert_X", "{{ $labels.job }}", &data, &Fake::default()), "node");
}

#[test]
fn check_parses_only() {
    assert_eq!(check("__alert_A", "{{ $labels.x }} {{ query \"up\" | first | value | humanize }}"), Ok(()));
    assert_eq!(check("__alert_A", "{{ humanize \"one\" }}"), Ok(()));
    assert_eq!(
        check("__alert_A", "{{ nope }}"),
        Err(TemplateError("template: __alert_A:1: function \"nope\" not defined".into()))
    );
    assert_eq!(
        check("__alert_A", "a\nb {{ end }}"),
        Err(TemplateError("template: __alert_A:2: unexpected {{end}}".into()))
    );
    assert_eq!(
        check("__alert_A", "{{ define \"x\" }}{{ $labels }}{{ end }}"),
        Err(TemplateError("template: __alert_A:1: undefined variable \"$labels\"".into()))
    );
}

#[test]
fn constructs() {
    check_table(&[
        ("plain text", Ok("plain text")),
        ("{{ 1 }}", Ok("1")),
        ("{{ \"<b>\" }}", Ok("<b>")),
        ("{{ .Foo }}", Ok("<no value>")),
        ("{{/* a comment */}}x", Ok("x")),
        ("a  {{- 1 -}}  b", Ok("a1b")),
        ("a \n {{- /* c */ -}} \n b", Ok("ab")),
        ("x {{/* c */}} y", Ok("x  y")),
        ("{{-3}}", Ok("-3")),
        ("{{ \"a\" | printf \"%s-%s\" \"b\" }}", Ok("b-a")),
        ("{{ $x := 1 }}{{ $x }}{{ $x = 2 }}{{ $x }}", Ok("12")),
        ("{{ $x := \"outer\" }}{{ if true }}{{ $x := \"inner\" }}{{ $x }}{{ end }}{{ $x }}", Ok("innerouter")),
        ("{{ $x := 1 }}{{ if true }}{{ $x = 2 }}{{ end }}{{ $x }}", Ok("2")),
        ("{{ if $x := 0 }}a{{ else if $y := 2 }}{{ $x }}{{ $y }}{{ end }}", Ok("02")),
        ("{{ if eq 1 2 }}a{{ else if eq 1 1 }}b{{ else }}c{{ end }}", Ok("b")),
        ("{{ if 0 }}a{{ else if \"\" }}b{{ else }}c{{ end }}", Ok("c")),
        ("{{ if and 1 0 }}x{{ else }}y{{ end }}", Ok("y")),
        ("{{ or 0 \"\" \"z\" }} {{ and 1 2 }} {{ not 0 }} {{ or 0 false }}", Ok("z 2 true false")),
        ("{{ 0 | and 1 }} {{ 3 | or 0 }}", Ok("0 3")),
        ("{{ with \"\" }}x{{ else }}none{{ end }}", Ok("none")),
        ("{{ with \"v\" }}{{ . }}{{ end }}", Ok("v")),
        ("{{ with \"\" }}a{{ else with \"b\" }}{{ . }}{{ end }}", Ok("b")),
        ("{{ range 3 }}{{ . }}{{ end }}", Ok("012")),
        ("{{ range $i := 3 }}{{ $i }}{{ end }}|{{ range 0 }}x{{ else }}none{{ end }}", Ok("012|none")),
        ("{{ range $k, $e := args 1 2 3 4 }}{{ if eq $e 3 }}{{ break }}{{ end }}{{ $k }}={{ $e }} {{ end }}", Ok("arg0=1 arg1=2 ")),
        ("{{ range args 1 2 3 4 }}{{ if eq . 2 }}{{ continue }}{{ end }}{{ . }}{{ end }}", Ok("134")),
        ("{{ $i := 9 }}{{ range $i, $e := args \"a\" }}{{ $i }}{{ end }}{{ $i }}", Ok("arg09")),
        ("{{ $e := 0 }}{{ range $e = args 5 6 }}{{ end }}{{ $e }}", Ok("6")),
        ("{{ range query \"none\" }}x{{ else }}empty{{ end }}", Ok("empty")),
        ("{{ range .Missing }}x{{ else }}nil{{ end }}", Ok("nil")),
        ("{{ define \"t\" }}[{{ . }}]{{ end }}{{ template \"t\" \"x\" }}{{ template \"t\" }}", Ok("[x][<no value>]")),
        ("{{ block \"b\" \"y\" }}<{{ . }}>{{ end }}", Ok("<y>")),
        ("{{ define \"b\" }}x{{ end }}{{ block \"b\" . }}y{{ end }}", Err("error parsing template test: template: test:1: template: multiple definition of template \"b\"")),
        ("{{ define \"b\" }} {{ end }}{{ block \"b\" . }}y{{ end }}", Ok("y")),
        ("{{define \"x\"}}{{.arg0}} {{.arg1}}{{end}}{{template \"x\" (args 1 \"2\")}}", Ok("1 2")),
        ("{{ printf \"%d\" (len \"abc\") }}", Ok("3")),
        ("{{ \"a\\tb\" }}|{{ `x\\ny` }}|{{ 'a' }}|{{ '\\n' }}|{{ true }}", Ok("a\tb|x\\ny|97|10|true")),
        ("{{ 0x1F }} {{ 1e3 }} {{ 1_000 }} {{ 0o17 }} {{ 017 }} {{ 0b101 }} {{ 1.5 }} {{ -2 }} {{ .5 }}", Ok("31 1000 1000 15 15 5 1.5 -2 0.5")),
        ("{{ 1+2i }} {{ 2i }} {{ 0x1p-2 }}", Ok("(1+2i) (0+2i) 0.25")),
        ("{{ 1e21 }} {{ 123456 }} {{ 1234567.0 }} {{ 0.0001 }} {{ 0.00001 }}", Ok("1e+21 123456 1.234567e+06 0.0001 1e-05")),
        ("{{ print 1 2 \"a\" \"b\" 3 }}|{{ println 1 \"a\" }}|{{ print }}", Ok("1 2ab3|1 a\n|")),
        ("{{ print .Missing }} {{ print nil }}", Ok("<nil> <nil>")),
        ("{{ len \"héllo\" }} {{ index \"abc\" 1 }} {{ slice \"abcdef\" 1 3 }} {{ slice \"abc\" 1 }}", Ok("6 98 bc bc")),
        ("{{ index (args \"a\" \"b\") \"arg1\" }}|{{ index (args 1) \"nope\" }}", Ok("b|<no value>")),
        ("{{ eq 3 1 2 3 }} {{ eq \"a\" \"b\" }} {{ ne 1 2 }} {{ lt 1 2 }} {{ le 2 2 }} {{ gt \"b\" \"a\" }} {{ ge 1.5 2.5 }}", Ok("true false true true true true false")),
        ("{{ eq .Missing nil }} {{ eq 1 .Missing }} {{ eq \"a\" (safeHtml \"a\") }}", Ok("true false true")),
        ("{{ html \"<a href=\\\"x\\\">'&'</a>\" }}", Ok("&lt;a href=&#34;x&#34;&gt;&#39;&amp;&#39;&lt;/a&gt;")),
        ("{{ js \"a'b\\\"c<d>=&\" }}", Ok("a\\'b\\\"c\\u003Cd\\u003E\\u003D\\u0026")),
        ("{{ urlquery \"a b&c=d/é\" }} {{ html .Missing }} {{ html 1 2 }}", Ok("a+b%26c%3Dd%2F%C3%A9 &lt;no value&gt; 1 2")),
        ("{{ \"x\" | html | printf \"%s!\" }}", Ok("x!")),
        ("{{ (args 1).arg0 }} {{ $m := args 7 }}{{ $m.arg0 }}", Ok("1 7")),
    ]);
}

#[test]
fn printf_verbs() {
    check_table(&[
        (
            "{{ printf \"%5.1f|%-5d|%05d|%x|%X|%q|%v|%s|%%\" 3.14159 42 42 255 255 \"hi\" 1.5 \"s\" }}",
            Ok("  3.1|42   |00042|ff|FF|\"hi\"|1.5|s|%"),
        ),
        (
            "{{ printf \"%d\" 1.5 }}|{{ printf \"%d %d\" 1 }}|{{ printf \"%d\" 1 2 }}",
            Ok("%!d(float64=1.5)|1 %!d(MISSING)|1%!(EXTRA int=2)"),
        ),
        (
            "{{ printf \"%e|%E|%g|%.3g|%G\" 123456.789 0.5 0.000012345 1234.5 1e-10 }}",
            Ok("1.234568e+05|5.000000E-01|1.2345e-05|1.23e+03|1E-10"),
        ),
        ("{{ printf \"%T %T %T %T\" 1 1.5 \"s\" true }}", Ok("int float64 string bool")),
        (
            "{{ printf \"%[2]d %[1]d\" 1 2 }}|{{ printf \"%*d|%-*d|\" 5 1 3 2 }}|{{ printf \"%[3]d\" 1 }}",
            Ok("2 1|    1|2  ||%!d(BADINDEX)"),
        ),
        ("{{ printf \"%+d % d %+.1f % .1f\" 5 5 1.5 1.5 }}", Ok("+5  5 +1.5  1.5")),
        ("{{ printf \"%c%c %U %#U %q\" 72 105 65 233 65 }}", Ok("Hi U+0041 U+00E9 'é' 'A'")),
        ("{{ printf \"%08.3f|%-8.2f|%8.2e\" -1.5 2.25 1234.5 }}", Ok("-001.500|2.25    |1.23e+03")),
        (
            "{{ printf \"%t %v\" true false }}|{{ printf \"%s\" nil }}|{{ printf \"%v\" nil }}",
            Ok("true false|%!s(<nil>)|<nil>"),
        ),
        ("{{ printf \"%\" }}|{{ printf \"%!\" }}|{{ printf \"%z\" 1 }}", Ok("%!(NOVERB)|%!!(MISSING)|%!z(int=1)")),
        (
            "{{ printf \"%.2s|%5s|%-5s|%x|%X|%#x\" \"abcdef\" \"ab\" \"ab\" \"hi\" \"hi\" \"hi\" }}",
            Ok("ab|   ab|ab   |6869|6869|0x6869"),
        ),
        ("{{ printf \"%b %o %O %#o %#x\" 5 8 8 8 255 }}", Ok("101 10 0o10 010 0xff")),
        ("{{ printf \"%5.2d|%.0d|%x\" 7 0 -255 }}", Ok("   07||-ff")),
        ("{{ printf \"%q %+q %#q\" \"a\\nb\" \"é\" \"x\" }}", Ok("\"a\\nb\" \"\\u00e9\" `x`")),
        ("{{ printf \"%v|%+v\" (args 1 \"a\") (args 2) }}", Ok("map[arg0:1 arg1:a]|map[arg0:2]")),
        ("{{ printf \"%6.2f%%\" 12.345 }}", Ok(" 12.35%")),
        ("{{ printf \"%v %.1f %g %e\" 1.0 0.05 100000.0 0.0 }}", Ok("1 0.1 100000 0.000000e+00")),
        ("{{ printf \"%x\" 1.5 }}", Ok("%!x(float64=1.5)")),
        (
            "{{ printf \"%d\" (toDuration 1.5) }}|{{ printf \"%s\" (toDuration 90) }}",
            Ok("%!d(*time.Duration=1.5s)|1m30s"),
        ),
    ]);
}

#[test]
fn parse_errors() {
    check_table(&[
        ("{{", Err("error parsing template test: template: test:1: unclosed action")),
        ("{{ 1", Err("error parsing template test: template: test:1: unclosed action")),
        ("{{ 1\n", Err("error parsing template test: template: test:2: unclosed action started at test:1")),
        ("{{ if true }}", Err("error parsing template test: template: test:1: unexpected EOF")),
        ("{{ end }}", Err("error parsing template test: template: test:1: unexpected {{end}}")),
        ("{{ else }}", Err("error parsing template test: template: test:1: unexpected {{else}}")),
        ("{{ $x }}", Err("error parsing template test: template: test:1: undefined variable \"$x\"")),
        ("a\n{{ foo }}", Err("error parsing template test: template: test:2: function \"foo\" not defined")),
        ("{{ break }}", Err("error parsing template test: template: test:1: {{break}} outside {{range}}")),
        (
            "{{ range 1 }}{{ continue 1 }}{{ end }}",
            Err("error parsing template test: template: test:1: unexpected \"1\" in {{continue}}"),
        ),
        (
            "{{ 1 | 2 }}",
            Err("error parsing template test: template: test:1: non executable command in pipeline stage 2"),
        ),
        ("{{ (1 }}", Err("error parsing template test: template: test:1: unclosed left paren")),
        ("{{ 1) }}", Err("error parsing template test: template: test:1: unexpected right paren")),
        ("{{ \"abc }}", Err("error parsing template test: template: test:1: unterminated quoted string")),
        ("{{ `abc }}", Err("error parsing template test: template: test:1: unterminated raw quoted string")),
        ("{{ 'ab' }}", Err("error parsing template test: template: test:1: malformed character constant: 'ab'")),
        ("{{/* x */ }}", Err("error parsing template test: template: test:1: comment ends before closing delimiter")),
        ("{{/* x", Err("error parsing template test: template: test:1: unclosed comment")),
        ("{{ 3x }}", Err("error parsing template test: template: test:1: bad number syntax: \"3x\"")),
        ("{{ 089 }}", Err("error parsing template test: template: test:1: integer overflow: \"089\"")),
        ("{{ .a-b }}", Err("error parsing template test: template: test:1: bad character U+002D '-'")),
        (
            "{{ \u{a0} }}",
            Err("error parsing template test: template: test:1: unrecognized character in action: U+00A0"),
        ),
        ("{{ $x := }}", Err("error parsing template test: template: test:1: missing value for command")),
        ("{{ \"x\".y }}", Err("error parsing template test: template: test:1: unexpected . after term \"\\\"x\\\"\"")),
        (
            "{{ range $a, $b, $c := 1 }}{{ end }}",
            Err("error parsing template test: template: test:1: too many declarations in range"),
        ),
        (
            "{{ if 1 }}{{ else }}{{ else }}{{ end }}",
            Err("error parsing template test: template: test:1: expected end; found {{else}}"),
        ),
        (
            "{{ define \"a\" }}x{{ end }}{{ define \"a\" }}y{{ end }}",
            Err("error parsing template test: template: test:1: template: multiple definition of template \"a\""),
        ),
        ("{{ template x }}", Err("error parsing template test: template: test:1: unexpected \"x\" in template clause")),
        ("{{ 1 = 2 }}", Err("error parsing template test: template: test:1: unexpected \"=\" in operand")),
        (
            "{{ 18446744073709551616 }}",
            Err("error parsing template test: template: test:1: integer overflow: \"18446744073709551616\""),
        ),
    ]);
}

#[test]
fn exec_errors() {
    check_table(&[
        ("{{ nil }}", Err("error executing template test: template: test:1:3: executing \"test\" at <nil>: nil is not a command")),
        ("{{ 1 2 }}", Err("error executing template test: template: test:1:3: executing \"test\" at <1>: can't give argument to non-function 1")),
        ("{{ 18446744073709551615 }}", Err("error executing template test: template: test:1:3: executing \"test\" at <18446744073709551615>: 18446744073709551615 overflows int")),
        ("{{ template \"nope\" }}", Err("error executing template test: template: test:1:12: executing \"test\" at <{{template \"nope\"}}>: template \"nope\" not defined")),
        ("{{ define \"r\" }}{{ template \"r\" . }}{{ end }}{{ template \"r\" }}", Err("error executing template test: template: test:1:28: executing \"r\" at <{{template \"r\" .}}>: exceeded maximum template depth (100)")),
        ("{{ range $i, $e := 3 }}{{ end }}", Err("error executing template test: template: test:1:19: executing \"test\" at <3>: can't use 3 to iterate over more than one variable")),
        ("{{ range 1.5 }}{{ end }}", Err("error executing template test: template: test:1:9: executing \"test\" at <1.5>: range can't iterate over 1.5")),
        ("{{ len 3 }}", Err("error executing template test: template: test:1:3: executing \"test\" at <len 3>: error calling len: len of type int")),
        ("{{ index \"abc\" 5 }}", Err("error executing template test: template: test:1:3: executing \"test\" at <index \"abc\" 5>: error calling index: index out of range: 5")),
        ("{{ index 1 0 }}", Err("error executing template test: template: test:1:3: executing \"test\" at <index 1 0>: error calling index: can't index item of type int")),
        ("{{ slice \"abc\" 2 1 }}", Err("error executing template test: template: test:1:3: executing \"test\" at <slice \"abc\" 2 1>: error calling slice: invalid slice index: 2 > 1")),
        ("{{ lt true false }}", Err("error executing template test: template: test:1:3: executing \"test\" at <lt true false>: error calling lt: invalid type for comparison")),
        ("{{ eq 1 }}", Err("error executing template test: template: test:1:3: executing \"test\" at <eq 1>: error calling eq: missing argument for comparison")),
        ("{{ eq (args 1) (args 1) }}", Err("error executing template test: template: test:1:3: executing \"test\" at <eq (args 1) (args 1)>: error calling eq: non-comparable type map[arg0:1]: map[string]interface {}")),
        ("{{ not }}", Err("error executing template test: template: test:1:3: executing \"test\" at <not>: wrong number of args for not: want 1 got 0")),
        ("{{ printf }}", Err("error executing template test: template: test:1:3: executing \"test\" at <printf>: wrong number of args for printf: want at least 1 got 0")),
        ("{{ toUpper 1 }}", Err("error executing template test: template: test:1:11: executing \"test\" at <1>: expected string; found 1")),
        ("{{ first 1 }}", Err("error executing template test: template: test:1:9: executing \"test\" at <1>: can't handle 1 for arg of type template.queryResult")),
        ("{{ toUpper nil }}", Err("error executing template test: template: test:1:11: executing \"test\" at <nil>: cannot assign nil to string")),
        ("{{ toUpper .Missing }}", Err("error executing template test: template: test:1:11: executing \"test\" at <.Missing>: invalid value; expected string")),
        ("{{ $x := args 1 }}{{ $x.arg0 2 }}", Err("error executing template test: template: test:1:23: executing \"test\" at <$x.arg0>: arg0 is not a method but has arguments")),
        ("{{ (\"x\" | safeHtml) | toUpper }}", Err("error executing template test: template: test:1:22: executing \"test\" at <toUpper>: wrong type for value; expected string; got template.HTML")),
        ("{{ call 1 }}", Err("error executing template test: template: test:1:3: executing \"test\" at <call 1>: error calling call: non-function 1 of type int")),
        ("{{ label \"x\" nil }}", Err("error executing template test: template: test:1:3: executing \"test\" at <label \"x\" nil>: error calling label: runtime error: invalid memory address or nil pointer dereference")),
    ]);
}

#[test]
fn limits() {
    let out = raw("{{ range 2000 }}{{ printf \"%1000d\" 1 }}{{ end }}", vec![]);
    assert_eq!(out, Err("error executing template test: template output exceeds 1048576 bytes".into()));
    let out = raw("{{ range 100000000 }}{{ end }}", vec![]);
    assert!(out.is_err_and(|e| e.ends_with("template execution exceeds 1000000 steps")));
    let out = raw("{{ $s := \"xxxxxxxxxx\" }}{{ range 30 }}{{ $s = printf \"%s%s\" $s $s }}{{ end }}", vec![]);
    assert!(out.is_err_and(|e| e.ends_with("result of printf exceeds 1048576 bytes")), "string growth");
    let out = raw("{{ printf \"%9999999d\" 1 }}", vec![]);
    assert!(out.is_err_and(|e| e.ends_with("result of printf exceeds 1048576 bytes")), "huge width");
    assert_eq!(raw("{{ printf \"%99999999d\" 1 }}", vec![]).as_deref(), Ok("%!(NOVERB)%!(EXTRA int=1)"));
    let nested = format!("{}{}", "{{ if 1 }}".repeat(101), "{{ end }}".repeat(101));
    assert_eq!(
        raw(&nested, vec![]),
        Err("error parsing template test: template: test:1: max nesting depth exceeded".into())
    );
    let parens = format!("{{{{ {}1{} }}}}", "(".repeat(101), ")".repeat(101));
    assert_eq!(
        raw(&parens, vec![]),
        Err("error parsing template test: template: test:1: max expression depth exceeded".into())
    );
    let ok = format!("{}x{}", "{{ if 1 }}".repeat(100), "{{ end }}".repeat(100));
    assert_eq!(raw(&ok, vec![]).as_deref(), Ok("x"));
    let chain = format!("{{{{ if 0 }}}}{}{{{{ else }}}}y{{{{ end }}}}", "{{ else if 0 }}".repeat(5000));
    assert_eq!(raw(&chain, vec![]).as_deref(), Ok("y"), "else-if chains cost no nesting");
}

/// The deepest recursion the limits allow fits a 2 MiB thread stack (a tokio worker's).
#[test]
fn deep_recursion_fits_a_small_stack() {
    let handle = std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(|| {
            [(60, 39), (1, 98)].map(|(withs, parens)| {
                let body = format!(
                    "{}{{{{ template \"r\" {}.{} }}}}{}",
                    "{{ with 1 }}".repeat(withs),
                    "(".repeat(parens),
                    ")".repeat(parens),
                    "{{ end }}".repeat(withs)
                );
                let text = format!("{{{{ define \"r\" }}}}{body}{{{{ end }}}}{{{{ template \"r\" 1 }}}}");
                raw(&text, vec![])
            })
        })
        .unwrap();
    let [nested, parens] = handle.join().unwrap();
    assert!(nested.is_err_and(|e| e.contains("exceeded maximum nesting depth (200)")));
    assert!(parens.is_err_and(|e| e.contains("exceeded maximum")));
}

fn template_text() -> impl Strategy<Value = String> {
    let tokens = prop::sample::select(vec![
        "{{",
        "}}",
        "{{- ",
        " -}}",
        " ",
        "\n",
        "$",
        "$x",
        ":=",
        "=",
        ".",
        ".Labels",
        ".Value",
        "|",
        "(",
        ")",
        "\"",
        "`",
        "'",
        "a",
        "1",
        "-1",
        "1.5",
        "0x",
        "e",
        "if",
        "else",
        "end",
        "range",
        "with",
        "define",
        "template",
        "block",
        "break",
        "continue",
        "\"t\"",
        "printf",
        "\"%d%s%v%5.2f%[2]*d\"",
        "index",
        "slice",
        "len",
        "eq",
        "lt",
        "and",
        "or",
        "not",
        "print",
        "query",
        "first",
        "value",
        "humanize",
        "humanizeDuration",
        "toTime",
        "toDuration",
        "reReplaceAll",
        "\"(\"",
        "args",
        "html",
        "js",
        "title",
        "nil",
        "true",
        "/*",
        "*/",
        ",",
        "$labels",
        "$value",
        "sortByLabel",
        "label",
        "now",
        "parseDuration",
        "\"1h\"",
        ".Format",
        "\"2006\"",
        "call",
        "match",
    ]);
    prop_oneof![
        prop::collection::vec(tokens, 0..40).prop_map(|t| t.concat()),
        "\\PC{0,60}",
        "[{}$.()|\" a-z0-9:=-]{0,60}",
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// No input panics `check` or `expand`, and an expansion that parses is checked alike.
    #[test]
    fn never_panics(text in template_text()) {
        let labels = alert_labels();
        let data = TemplateData { labels: &labels, external_labels: &labels, external_url: "http://x/y", value: 0.5 };
        let q = Fake { samples: vec![sample("up", "a", 1.0), sample("up", "b", 0.0)], ..Fake::default() };
        let checked = check("__alert_P", &text);
        let expanded = expand("__alert_P", &text, &data, &q);
        if let Err(TemplateError(e)) = &expanded {
            prop_assert_eq!(checked.is_err(), e.starts_with("error parsing template"));
        }
        let _ = raw(&text, vec![]);
    }
}
