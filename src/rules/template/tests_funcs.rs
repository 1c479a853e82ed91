//! Prometheus' template functions, with the expectations of its `template_test.go` (lists of
//! inputs written with `args`, whose keys `arg0`..`arg9` range in order) and of the functions
//! it builds on (`fmt`, `time`, `net`, `strconv`).

use super::tests::{check_table, raw, sample, Fake};
use super::QuerySample;

fn with_samples(text: &str, samples: Vec<QuerySample>) -> Result<String, String> {
    raw(text, samples)
}

#[test]
fn query_functions() {
    let a = || vec![sample("metric", "a", 11.0)];
    let rows: Vec<(&str, Vec<QuerySample>, Result<&str, &str>)> = vec![
        ("{{ query \"1.5\" | first | value }}", vec![sample("", "", 1.5)], Ok("1.5")),
        ("{{ query \"metric{instance='a'}\" | first | value }}", a(), Ok("11")),
        ("{{ query \"metric{instance='a'}\" | first | label \"instance\" }}", a(), Ok("a")),
        ("{{ query \"metric{instance='a'}\" | first | label \"foo\" }}", a(), Ok("")),
        ("{{ $x := query \"metric\" | first }}{{ $x.Labels.foo }}", a(), Ok("")),
        ("{{ $x := query \"metric\" | first }}{{ $x.Labels.__name__ }} {{ $x.Value }}", a(), Ok("metric 11")),
        (
            "{{ range query \"metric\" | sortByLabel \"instance\" }}{{.Labels.instance}}:{{.Value}}: {{end}}",
            vec![sample("metric", "b", 21.0), sample("metric", "a", 11.0)],
            Ok("a:11: b:21: "),
        ),
        (
            "{{ range $i, $s := query \"m\" | sortByLabel \"nope\" }}{{ $i }}{{ $s.Labels.instance }}{{ end }}",
            vec![sample("m", "b", 1.0), sample("m", "a", 2.0)],
            Ok("0b1a"),
        ),
        ("{{ len (query \"m\") }} {{ index (query \"m\") 1 | value }}", vec![sample("m", "a", 1.0), sample("m", "b", 2.0)], Ok("2 2")),
        ("{{ range slice (query \"m\") 1 }}{{ .Value }}{{ end }}", vec![sample("m", "a", 1.0), sample("m", "b", 2.0)], Ok("2")),
        ("{{ query \"m\" | first }}", a(), Ok("{map[__name__:metric instance:a] 11}")),
        ("{{ printf \"%v|%+v\" (query \"m\" | first) (query \"m\" | first) }}", a(), Ok("&{map[__name__:metric instance:a] 11}|&{Labels:map[__name__:metric instance:a] Value:11}")),
        ("{{ with query \"m\" }}yes{{ else }}no{{ end }}", vec![], Ok("no")),
        (
            "{{ query \"missing\" | first }}",
            vec![],
            Err("error executing template test: template: test:1:21: executing \"test\" at <first>: error calling first: first() called on vector with no elements"),
        ),
        (
            "{{ (query \"missing\").banana }}",
            vec![],
            Err("error executing template test: template: test:1:10: executing \"test\" at <\"missing\">: can't evaluate field banana in type template.queryResult"),
        ),
        ("{{ query \"metric{__value__='a'}\" | first | strvalue }}", vec![{
            let mut s = sample("metric", "", 11.0);
            s.labels.insert("__value__".into(), "a".into());
            s
        }], Ok("a")),
        (
            "{{ first 1.5 }}",
            vec![],
            Err("error executing template test: template: test:1:9: executing \"test\" at <1.5>: can't handle 1.5 for arg of type template.queryResult"),
        ),
        (
            "{{ \"x\" | first }}",
            vec![],
            Err("error executing template test: template: test:1:9: executing \"test\" at <first>: wrong type for value; expected template.queryResult; got string"),
        ),
    ];
    for (text, samples, want) in rows {
        assert_eq!(with_samples(text, samples).as_deref().map_err(String::as_str), want, "template {text:?}");
    }
    let q = Fake::default();
    let env = super::funcs::Env { query: &q, external_url: "", now_ms: 0 };
    let trees = super::parse::parse("t", "{{ query \"a\" }}{{ query \"b\" }}").unwrap();
    super::exec::execute(&trees, "t", "", super::value::Value::Nil, &env).unwrap();
    assert_eq!(*q.asked.borrow(), ["a", "b"]);
}

#[test]
fn host_and_string_functions() {
    check_table(&[
        ("{{ \"foo.example.com\" | stripPort }}", Ok("foo.example.com")),
        ("{{ \"foo.example.com:12345\" | stripPort }}", Ok("foo.example.com")),
        ("{{ \"192.0.2.1\" | stripPort }}", Ok("192.0.2.1")),
        ("{{ \"192.0.2.1:12345\" | stripPort }}", Ok("192.0.2.1")),
        ("{{ \"2001:0DB8::1\" | stripPort }}", Ok("2001:0DB8::1")),
        ("{{ \"[2001:0DB8::1]:12345\" | stripPort }}", Ok("2001:0DB8::1")),
        ("{{ \"[2001:0DB8::1]::12345\" | stripPort }}", Ok("[2001:0DB8::1]::12345")),
        ("{{ \"foo.example.com\" | stripDomain }}", Ok("foo")),
        ("{{ \"foo.example.com:12345\" | stripDomain }}", Ok("foo:12345")),
        ("{{ \"192.0.2.1\" | stripDomain }}", Ok("192.0.2.1")),
        ("{{ \"192.0.2.1:12345\" | stripDomain }}", Ok("192.0.2.1:12345")),
        ("{{ \"2001:0DB8::1\" | stripDomain }}", Ok("2001:0DB8::1")),
        ("{{ \"[2001:0DB8::1]:12345\" | stripDomain }}", Ok("[2001:0DB8::1]:12345")),
        ("{{ \"[2001:0DB8::1]::12345\" | stripDomain }}", Ok("[2001:0DB8::1]::12345")),
        ("{{ \"aa bb CC\" | title }}|{{ \"don't stop-me now.x\" | title }}", Ok("Aa Bb CC|Don't Stop-Me Now.x")),
        ("{{ \"aa bb CC\" | toUpper }}|{{ \"aA bB CC\" | toLower }}|{{ \"straße\" | toUpper }}", Ok("AA BB CC|aa bb cc|STRAßE")),
        ("{{ match \"a+\" \"aa\" }} {{ match \"a+\" \"b\" }} {{ match \"^a{\" \"a{\" }}", Ok("true false true")),
        ("{{ reReplaceAll \"(a)b\" \"x$1\" \"ab\" }}|{{ reReplaceAll \"(?P<h>[^:]+):.*\" \"${h}\" \"host:9100\" }}", Ok("xa|host")),
        ("{{ reReplaceAll \"a*\" \"-\" \"baaac\" }}|{{ reReplaceAll \"b\" \"$$\" \"abc\" }}", Ok("-b-c-|a$c")),
        (
            "{{ match \"(\" \"x\" }}",
            Err("error executing template test: template: test:1:3: executing \"test\" at <match \"(\" \"x\">: error calling match: error parsing regexp: unclosed group: `(`"),
        ),
        (
            "{{ reReplaceAll \"(\" \"\" \"x\" }}",
            Err("error executing template test: template: test:1:3: executing \"test\" at <reReplaceAll \"(\" \"\" \"x\">: error calling reReplaceAll: regexp: Compile(\"(\"): error parsing regexp: unclosed group: `(`"),
        ),
        ("{{ graphLink \"up\" }}|{{ tableLink \"rate(x[5m]) > 0\" }}", Ok("/graph?g0.expr=up&g0.tab=0|/graph?g0.expr=rate%28x%5B5m%5D%29+%3E+0&g0.tab=1")),
        ("{{ urlQueryEscape \"a b/c?d=é\" }}", Ok("a+b%2Fc%3Fd%3D%C3%A9")),
        ("{{ \"<b>\" | safeHtml }}|{{ printf \"%T\" (safeHtml \"x\") }}", Ok("<b>|template.HTML")),
        ("{{ pathPrefix }}|{{ externalURL }}", Ok("/path/prefix|http://testhost:9090/path/prefix")),
        ("{{ $a := args 1 \"2\" nil }}{{ $a.arg0 }} {{ $a.arg1 }} {{ $a.arg2 }} {{ len $a }}", Ok("1 2 <no value> 3")),
    ]);
}

#[test]
fn humanize_functions() {
    check_table(&[
        ("{{ range args 0.0 1.0 1234567.0 .12 }}{{ humanize . }}:{{ end }}", Ok("0:1:1.235M:120m:")),
        ("{{ range args \"0.0\" \"1.0\" \"1234567.0\" \".12\" }}{{ humanize . }}:{{ end }}", Ok("0:1:1.235M:120m:")),
        ("{{ range args 0 -1 1 1234567 9223372036854775807 }}{{ humanize . }}:{{ end }}", Ok("0:-1:1:1.235M:9.223E:")),
        ("{{ range args 0.0 1.0 1048576.0 .12 }}{{ humanize1024 . }}:{{ end }}", Ok("0:1:1Mi:0.12:")),
        ("{{ range args \"0.0\" \"1.0\" \"1048576.0\" \".12\" }}{{ humanize1024 . }}:{{ end }}", Ok("0:1:1Mi:0.12:")),
        ("{{ range args 0 -1 1 1234567 9223372036854775807 }}{{ humanize1024 . }}:{{ end }}", Ok("0:-1:1:1.177Mi:8Ei:")),
        (
            "{{ range args 0 1 60 3600 86400 90000 -183845 899.99 }}{{ humanizeDuration . }}:{{ end }}",
            Ok("0s:1s:1m 0s:1h 0m 0s:1d 0h 0m 0s:1d 1h 0m 0s:-2d 3h 4m 5s:14m 59s:"),
        ),
        ("{{ range args \"0\" \"1\" \"60\" \"3600\" \"86400\" }}{{ humanizeDuration . }}:{{ end }}", Ok("0s:1s:1m 0s:1h 0m 0s:1d 0h 0m 0s:")),
        ("{{ range args .1 .0001 .12345 60.1 60.5 1.2345 12.345 }}{{ humanizeDuration . }}:{{ end }}", Ok("100ms:100us:123.5ms:1m 0s:1m 0s:1.234s:12.35s:")),
        ("{{ range args 0 -1 1 1234567 }}{{ humanizeDuration . }}:{{ end }}", Ok("0s:-1s:1s:14d 6h 56m 7s:")),
        ("{{ humanizeDuration 0.000000002 }} {{ humanizeDuration -0.5 }}", Ok("2ns -500ms")),
        (
            "{{ range args \"+Inf\" \"-Inf\" \"NaN\" }}{{ humanize . }}:{{ humanize1024 . }}:{{ humanizeDuration . }}:{{humanizeTimestamp .}}:{{ end }}",
            Ok("+Inf:+Inf:+Inf:+Inf:-Inf:-Inf:-Inf:-Inf:NaN:NaN:NaN:NaN:"),
        ),
        ("{{ -0.22222 | humanizePercentage }}:{{ 0.0 | humanizePercentage }}:{{ 0.1234567 | humanizePercentage }}:{{ 1.23456 | humanizePercentage }}", Ok("-22.22%:0%:12.35%:123.5%")),
        ("{{ range args 0 -1 1 1234567 9223372036854775807 }}{{ humanizePercentage . }}:{{ end }}", Ok("0%:-100%:100%:1.235e+08%:9.223e+20%:")),
        ("{{ \"-0.22222\" | humanizePercentage }}:{{ \"0.0\" | humanizePercentage }}:{{ \"1.23456\" | humanizePercentage }}", Ok("-22.22%:0%:123.5%")),
        ("{{ humanize 0.000000000000000000000000001 }} {{ humanize 1e30 }}", Ok("0.001y 1e+06Y")),
        (
            "{{ humanize \"one\" }}",
            Err("error executing template test: template: test:1:3: executing \"test\" at <humanize \"one\">: error calling humanize: strconv.ParseFloat: parsing \"one\": invalid syntax"),
        ),
        (
            "{{ humanize1024 \"one\" }}",
            Err("error executing template test: template: test:1:3: executing \"test\" at <humanize1024 \"one\">: error calling humanize1024: strconv.ParseFloat: parsing \"one\": invalid syntax"),
        ),
        (
            "{{ humanizeDuration \"one\" }}",
            Err("error executing template test: template: test:1:3: executing \"test\" at <humanizeDuration \"one\">: error calling humanizeDuration: strconv.ParseFloat: parsing \"one\": invalid syntax"),
        ),
        (
            "{{ \"one\" | humanizePercentage }}",
            Err("error executing template test: template: test:1:11: executing \"test\" at <humanizePercentage>: error calling humanizePercentage: strconv.ParseFloat: parsing \"one\": invalid syntax"),
        ),
        (
            "{{ humanize true }}",
            Err("error executing template test: template: test:1:3: executing \"test\" at <humanize true>: error calling humanize: can't convert bool to float"),
        ),
        (
            "{{ humanize \"1e400\" }}",
            Err("error executing template test: template: test:1:3: executing \"test\" at <humanize \"1e400\">: error calling humanize: strconv.ParseFloat: parsing \"1e400\": value out of range"),
        ),
    ]);
}

#[test]
fn time_functions() {
    check_table(&[
        (
            "{{ range args 0 -1 1 1234567 9223372036 }}{{ humanizeTimestamp . }}:{{ end }}",
            Ok("1970-01-01 00:00:00 +0000 UTC:1969-12-31 23:59:59 +0000 UTC:1970-01-01 00:00:01 +0000 UTC:1970-01-15 06:56:07 +0000 UTC:2262-04-11 23:47:16 +0000 UTC:"),
        ),
        (
            "{{ humanizeTimestamp -9223372036854775808 }}",
            Err("error executing template test: template: test:1:3: executing \"test\" at <humanizeTimestamp -9223372036854775808>: error calling humanizeTimestamp: -9.223372036854776e+18 cannot be represented as a nanoseconds timestamp since it overflows int64"),
        ),
        ("{{ 1435065584.128 | humanizeTimestamp }}", Ok("2015-06-23 13:19:44.128 +0000 UTC")),
        ("{{ \"1435065584.128\" | humanizeTimestamp }}", Ok("2015-06-23 13:19:44.128 +0000 UTC")),
        ("{{ humanizeTimestamp -0.5 }}", Ok("1969-12-31 23:59:59.5 +0000 UTC")),
        ("{{ (1435065584.128 | toTime).Format \"2006\" }}", Ok("2015")),
        ("{{ (\"1435065584.128\" | toTime).Format \"2006\" }}", Ok("2015")),
        ("{{ 1435065584.128 | toTime }}", Ok("2015-06-23 13:19:44.128 +0000 UTC")),
        ("{{ (1800 | toDuration).String }}|{{ (\"1800\" | toDuration).String }}|{{ toDuration 5400.5 }}", Ok("30m0s|30m0s|1h30m0.5s")),
        ("{{ toDuration 0.0000015 }} {{ toDuration 0.0015 }} {{ toDuration 0 }} {{ toDuration -90 }}", Ok("1.5µs 1.5ms 0s -1m30s")),
        ("{{ now }}", Ok("1.353755652e+09")),
        ("{{ (now | toTime).Format \"Mon Jan 2 15:04:05 2006\" }}", Ok("Sat Nov 24 11:14:12 2012")),
        ("{{ (\"-30m\" | parseDuration | toDuration | (now | toTime).Add).UnixMilli }}", Ok("1353753852000")),
        ("{{ printf \"%0.2f\" (parseDuration \"1h2m10ms\") }}", Ok("3720.01")),
        ("{{ printf \"%0.2f\" (parseDuration \"-1h2m10ms\") }}", Ok("-3720.01")),
        ("{{ parseDuration \"1y2w3d\" }} {{ parseDuration \"0\" }} {{ parseDuration \"90s\" }}", Ok("3.30048e+07 0 90")),
        (
            "{{ parseDuration \"1m1h\" }}",
            Err("error executing template test: template: test:1:3: executing \"test\" at <parseDuration \"1m1h\">: error calling parseDuration: not a valid duration string: \"1m1h\""),
        ),
        (
            "{{ parseDuration \"5x\" }}",
            Err("error executing template test: template: test:1:3: executing \"test\" at <parseDuration \"5x\">: error calling parseDuration: unknown unit \"x\" in duration \"5x\""),
        ),
        (
            "{{ parseDuration \"\" }}",
            Err("error executing template test: template: test:1:3: executing \"test\" at <parseDuration \"\">: error calling parseDuration: empty duration string"),
        ),
        (
            "{{ parseDuration \"300y\" }}",
            Err("error executing template test: template: test:1:3: executing \"test\" at <parseDuration \"300y\">: error calling parseDuration: duration out of range"),
        ),
        (
            "{{ $t := toTime 1435065584.128 }}{{ $t.Format \"2006-01-02T15:04:05.000Z07:00 Jan January Mon Monday 3PM pm _2 002 .999 ,000 -07:00 MST\" }}",
            Ok("2015-06-23T13:19:44.128Z Jun June Tue Tuesday 1PM pm 23 174 .128 ,128 +00:00 UTC"),
        ),
        (
            "{{ $t := toTime 1435065584 }}{{ $t.Year }} {{ $t.Day }} {{ $t.Hour }} {{ $t.Minute }} {{ $t.Second }} {{ $t.YearDay }} {{ $t.Unix }} {{ $t.UTC.Format \".999|15:04\" }}",
            Ok("2015 23 13 19 44 174 1435065584 |13:19"),
        ),
        (
            "{{ $a := toTime 100 }}{{ $b := toTime 40 }}{{ $a.Sub $b }} {{ $a.After $b }} {{ $a.Before $b }} {{ ($a.Sub $b).Minutes }} {{ (toDuration 90).Seconds }}",
            Ok("1m0s true false 1 90"),
        ),
        (
            "{{ toTime \"NaN\" }}",
            Err("error executing template test: template: test:1:3: executing \"test\" at <toTime \"NaN\">: error calling toTime: value is NaN or Inf"),
        ),
        (
            "{{ humanize (toDuration 1) }}",
            Err("error executing template test: template: test:1:3: executing \"test\" at <humanize (toDuration 1)>: error calling humanize: can't convert *time.Duration to float"),
        ),
        (
            "{{ (now | toTime).Nope }}",
            Err("error executing template test: template: test:1:10: executing \"test\" at <toTime>: can't evaluate field Nope in type *time.Time"),
        ),
    ]);
}

#[test]
fn go_float_formatting() {
    use super::strconv::format_float;
    let rows: &[(f64, char, Option<usize>, &str)] = &[
        (1234.5, 'g', Some(4), "1234"),
        (1235.5, 'g', Some(4), "1236"),
        (0.12, 'g', Some(4), "0.12"),
        (120.0, 'g', Some(4), "120"),
        (1e21, 'g', Some(4), "1e+21"),
        (-0.0, 'g', None, "-0"),
        (100.0, 'e', None, "1e+02"),
        (1.5e-300, 'g', None, "1.5e-300"),
        (5e-324, 'g', None, "5e-324"),
        (f64::MAX, 'g', None, "1.7976931348623157e+308"),
        (0.1 + 0.2, 'g', None, "0.30000000000000004"),
        (123456789.0, 'f', Some(1), "123456789.0"),
        (2.5, 'f', Some(0), "2"),
        (0.0, 'g', Some(4), "0"),
        (f64::NEG_INFINITY, 'f', Some(2), "-Inf"),
    ];
    for &(v, fmt, prec, want) in rows {
        assert_eq!(format_float(v, fmt, prec), want, "{v} {fmt} {prec:?}");
    }
}
