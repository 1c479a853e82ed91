//! Prometheus text exposition format and OpenMetrics (`POST /api/v1/import/prometheus`), as a
//! scrape would see them:
//!
//! ```text
//! # HELP http_requests_total Requests.
//! # TYPE http_requests_total counter
//! http_requests_total{method="post",code="200"} 1027 1395066363000
//! http_requests_total{method="post",code="400"}    3
//! ```
//!
//! - Comment lines (`# HELP`, `# TYPE`, `# UNIT`, `# EOF`) and blank lines are skipped.
//! - Values: floats, `NaN`, `+Inf`, `-Inf`.
//! - Timestamps are integer milliseconds in the Prometheus format and (possibly fractional)
//!   seconds in OpenMetrics; a line without one gets the request's default timestamp (the
//!   `timestamp` parameter, else the arrival time).
//! - OpenMetrics exemplars (`# {trace_id="x"} 1 1.5` after the value) are skipped.
//! - Label values may escape `\\`, `\"` and `\n`.
//! - Names outside the legacy character sets are quoted, as Prometheus 3 writes them: a metric
//!   name inside the braces where a label would stand (`{"my.metric",job="x"} 1`), a label name
//!   before its `=` (`m{"service.name"="a"} 1`); quoted names escape as values do, and are kept
//!   as sent (any UTF-8 but an empty name or the byte 0x00).
//!
//! A malformed line refuses the whole request, naming the line.

use std::borrow::Cow;

use super::{at, BatchBuilder, Rejection, Reserve, SeriesLimits, Stop};
use crate::labels::is_valid_label_name;
use crate::sample::{check_timestamp, PackedBatch, Sample};

/// What a request says beyond its body.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// OpenMetrics (timestamps in seconds) rather than the Prometheus format (milliseconds).
    pub openmetrics: bool,
    /// Timestamp of lines without one, in milliseconds.
    pub default_ms: i64,
    /// Per-series limits.
    pub limits: SeriesLimits,
}

/// Decodes a whole body.
///
/// # Errors
/// [`Stop::Invalid`] naming the first bad line, or the budget's refusal.
pub fn decode<E: std::fmt::Debug>(
    body: &[u8],
    opts: &Options,
    reserve: Reserve<'_, E>,
) -> Result<PackedBatch, Stop<E>> {
    let text = std::str::from_utf8(body).map_err(|e| {
        let line = body.get(..e.valid_up_to()).map_or(0, |b| b.iter().filter(|&&c| c == b'\n').count()) + 1;
        Stop::Invalid(Rejection::line(line, "is not valid UTF-8"))
    })?;
    let mut out = BatchBuilder::new(opts.limits, reserve);
    // Reused from line to line: label names and values borrow from the body (a value is copied
    // only when it holds an escape).
    let mut labels = Vec::new();
    // The series part (name and labels) of the last line pushed. A line starting with the same
    // bytes followed by whitespace names the same series, so it skips parsing and checking
    // them: a backfill holds runs of lines of one series.
    let mut last_series: &str = "";
    for (i, raw) in text.split('\n').enumerate() {
        let line = raw.strip_suffix('\r').unwrap_or(raw).trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let bad = |m: String| Stop::Invalid(Rejection::line(i + 1, m));
        let point = |ts: Option<i64>, value: f64| {
            let ts = ts.unwrap_or(opts.default_ms);
            check_timestamp(ts).map(|()| [Sample::new(ts, value)]).map_err(|e| bad(e.to_string()))
        };
        if let Some(rest) = same_series(line, last_series) {
            let (value, ts) = parse_point(rest, opts).map_err(bad)?;
            if out.push_again(&point(ts, value)?).map_err(at("line", i + 1))? {
                continue;
            }
        }
        let (name, series_len) = parse_series(line, &mut labels).map_err(bad)?;
        let (value, ts) = parse_point(line.get(series_len..).unwrap_or(""), opts).map_err(bad)?;
        out.push_pairs(&name, &mut labels, &point(ts, value)?).map_err(at("line", i + 1))?;
        last_series = line.get(..series_len).unwrap_or("");
    }
    Ok(out.finish())
}

/// What follows the series part of `line` when it begins with `series` (the series part of an
/// earlier line, checked then) and whitespace: parsing it again would give the same name and
/// labels, since a series part ends at its name or its closing `}`.
fn same_series<'a>(line: &'a str, series: &str) -> Option<&'a str> {
    let rest = line.strip_prefix(series).filter(|_| !series.is_empty())?;
    rest.starts_with([' ', '\t']).then_some(rest)
}

/// Label names and values of one line.
type Pairs<'a> = Vec<(Cow<'a, str>, Cow<'a, str>)>;

/// Parses the series part of `line` (its name and labels) into its name and `labels` (cleared
/// first); returns the name and the length of the series part.
///
/// The name is either legacy and unquoted before the braces (`m{a="1"}`), or quoted inside them
/// where a label would stand, without `=` (`{"my.metric",a="1"}`), as Prometheus 3 writes a
/// name outside `[a-zA-Z_:][a-zA-Z0-9_:]*`. Label names are legacy and unquoted, or quoted
/// (`{"service.name"="a"}`).
fn parse_series<'a>(line: &'a str, labels: &mut Pairs<'a>) -> Result<(Cow<'a, str>, usize), String> {
    labels.clear();
    let name_end = line.bytes().position(|c| c == b'{' || c.is_ascii_whitespace()).unwrap_or(line.len());
    let unquoted = line.get(..name_end).unwrap_or_default();
    let mut rest = line.get(name_end..).unwrap_or_default();
    let mut name = None;
    if !unquoted.is_empty() {
        if !crate::labels::is_legacy_metric_name(unquoted) {
            return Err(format!(
                "invalid metric name {unquoted:?}: must match [a-zA-Z_:][a-zA-Z0-9_:]* or be quoted inside the braces ({{\"{unquoted}\"}})"
            ));
        }
        name = Some(Cow::Borrowed(unquoted));
    }
    if let Some(inner) = rest.strip_prefix('{') {
        rest = parse_labels(inner, &mut name, labels)?;
    }
    let name = name.ok_or("has no metric name")?;
    Ok((name, line.len() - rest.len()))
}

/// Parses what follows a series part: the value, an optional timestamp, and an optional
/// exemplar after `#`.
fn parse_point(rest: &str, opts: &Options) -> Result<(f64, Option<i64>), String> {
    let rest = before_exemplar(rest);
    let mut parts = rest.split_ascii_whitespace();
    let value = parts.next().ok_or("has no value")?;
    let value = parse_value(value).ok_or_else(|| format!("invalid value {value:?}"))?;
    let ts = match parts.next() {
        None => None,
        Some(t) if opts.openmetrics => {
            let secs: f64 = t.parse().map_err(|_| format!("invalid timestamp {t:?}: must be seconds"))?;
            let ms = (secs * 1000.0).round();
            if !(-9.2e18..=9.2e18).contains(&ms) {
                return Err(format!("timestamp {t} is out of range"));
            }
            Some(ms as i64)
        }
        Some(t) => {
            Some(t.parse::<i64>().map_err(|_| format!("invalid timestamp {t:?}: must be integer milliseconds"))?)
        }
    };
    if let Some(extra) = parts.next() {
        return Err(format!("unexpected {extra:?} after the timestamp"));
    }
    Ok((value, ts))
}

fn parse_value(v: &str) -> Option<f64> {
    match v {
        "NaN" | "nan" => Some(f64::NAN),
        "+Inf" | "Inf" | "+inf" | "inf" => Some(f64::INFINITY),
        "-Inf" | "-inf" => Some(f64::NEG_INFINITY),
        _ if v.bytes().all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'-' | b'+' | b'e' | b'E')) => v.parse().ok(),
        _ => None,
    }
}

/// Parses `name="value",...}` into `out` and returns what follows the `}`. A quoted string
/// followed by `,` or `}` instead of `=` is the metric name, set in `metric` (an error when it
/// is set already).
fn parse_labels<'a>(mut s: &'a str, metric: &mut Option<Cow<'a, str>>, out: &mut Pairs<'a>) -> Result<&'a str, String> {
    loop {
        s = s.trim_start();
        if let Some(after) = s.strip_prefix('}') {
            return Ok(after);
        }
        let name;
        if let Some(quoted) = s.strip_prefix('"') {
            let (text, end) = label_value(quoted).ok_or("a quoted name is not closed")?;
            s = quoted.get(end + 1..).unwrap_or_default().trim_start();
            if s.starts_with([',', '}']) {
                if let Some(first) = metric {
                    return Err(format!("metric name {text:?} given after the metric name {first:?}"));
                }
                *metric = Some(text);
                s = s.strip_prefix(',').unwrap_or(s);
                continue;
            }
            name = text;
        } else {
            let end = s.find(|c: char| matches!(c, '=' | ',' | '}' | '"') || c.is_whitespace()).unwrap_or(s.len());
            let unquoted = s.get(..end).unwrap_or_default();
            if !is_valid_label_name(unquoted) {
                return Err(format!(
                    "invalid label name {unquoted:?}: must match [a-zA-Z_][a-zA-Z0-9_]* or be quoted (\"{unquoted}\"=...)"
                ));
            }
            name = Cow::Borrowed(unquoted);
            s = s.get(end..).unwrap_or_default().trim_start();
        }
        s = s.strip_prefix('=').ok_or_else(|| format!("label {name:?} has no `=`"))?.trim_start();
        s = s.strip_prefix('"').ok_or_else(|| format!("the value of label {name:?} is not quoted"))?;
        let (value, end) = label_value(s).ok_or_else(|| format!("the value of label {name:?} is not closed"))?;
        out.push((name, value));
        s = s.get(end + 1..).unwrap_or_default().trim_start();
        if let Some(after) = s.strip_prefix(',') {
            s = after;
        } else if !s.starts_with('}') {
            return Err("labels must be separated by `,` and closed by `}`".into());
        }
    }
}

/// `s` up to its first ` # ` (an OpenMetrics exemplar follows it), or all of `s`.
fn before_exemplar(s: &str) -> &str {
    let b = s.as_bytes();
    memchr::memchr_iter(b'#', b)
        .find(|&i| i > 0 && b.get(i - 1) == Some(&b' ') && b.get(i + 1) == Some(&b' '))
        .and_then(|i| s.get(..i - 1))
        .unwrap_or(s)
}

/// The quoted label value at the start of `s` (after its opening quote), escapes undone, and the
/// index of its closing quote; `None` when it is not closed.
fn label_value(s: &str) -> Option<(Cow<'_, str>, usize)> {
    let b = s.as_bytes();
    let end = b.iter().position(|&c| c == b'"' || c == b'\\')?;
    if b.get(end) == Some(&b'"') {
        return Some((Cow::Borrowed(s.get(..end)?), end));
    }
    let mut value = String::from(s.get(..end)?);
    let mut chars = s.get(end..)?.char_indices();
    loop {
        match chars.next()? {
            (i, '"') => return Some((Cow::Owned(value), end + i)),
            (_, '\\') => match chars.next()? {
                (_, 'n') => value.push('\n'),
                (_, c @ ('\\' | '"')) => value.push(c),
                (_, c) => {
                    value.push('\\');
                    value.push(c);
                }
            },
            (_, c) => value.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        #[test]
        fn before_exemplar_cuts_at_the_first_space_hash_space(s in "[a #]{0,12}") {
            proptest::prop_assert_eq!(before_exemplar(&s), s.split(" # ").next().unwrap_or_default());
        }
    }
    use crate::labels::METRIC_NAME;

    /// Every sample of a decoded body in order, or the number and message of the line refused.
    fn flat(body: &str) -> Result<Vec<crate::ingest::ComparedSample>, (usize, String)> {
        let batch = decoded(body, &opts(false)).map_err(|r| (r.where_.map_or(0, |w| w.1), r.message))?;
        Ok(crate::ingest::samples_in_order(&batch))
    }

    proptest::proptest! {
        /// Lines that repeat the previous line's series skip its parsing: decoding a body gives
        /// what decoding each of its lines alone gives, samples and refusals alike.
        #[test]
        fn a_body_decodes_as_its_lines_one_by_one(
            lines in proptest::collection::vec(
                (
                    proptest::sample::select(vec![
                        "m", "mm", "m{a=\"1\"}", "m{a=\"1\",b=\"2\"}", "m{b=\"2\",a=\"1\"}", "m{ a = \"1\" }",
                        "m{a=\"1\\\"}\"}", "m{a=\"1\"", "m{}", "m{a=\"1\"}x", "m{a=\"1\",a=\"2\"}", "#", "",
                    ]),
                    proptest::sample::select(vec![" ", "\t", "", "  "]),
                    proptest::sample::select(vec!["1", "2.5", "NaN", "x", "+Inf", ""]),
                    proptest::sample::select(vec!["", " 1700000000000", " 17x", " 1700000000001 9", " 99999999999999999"]),
                    proptest::sample::select(vec!["", " # {t=\"1\"} 1", "\r"]),
                ),
                0..12,
            )
        ) {
            let lines: Vec<String> = lines.iter().map(|(a, b, c, d, e)| format!("{a}{b}{c}{d}{e}")).collect();
            let body = lines.join("\n");
            let mut expected = Ok(Vec::new());
            for (i, line) in lines.iter().enumerate() {
                match (flat(line), &mut expected) {
                    (Ok(samples), Ok(all)) => all.extend(samples),
                    (Err((_, message)), Ok(_)) => expected = Err((i + 1, message)),
                    _ => {}
                }
            }
            proptest::prop_assert_eq!(flat(&body), expected, "body {:?}", body);
        }
    }

    fn opts(openmetrics: bool) -> Options {
        Options { openmetrics, default_ms: 1_700_000_000_000, limits: SeriesLimits::default() }
    }

    fn decoded(body: &str, o: &Options) -> Result<PackedBatch, Rejection> {
        decode(body.as_bytes(), o, &mut |_| Ok::<(), ()>(())).map_err(|s| match s {
            Stop::Invalid(r) => r,
            Stop::Refused(()) => unreachable!(),
        })
    }

    fn run(body: &str, o: &Options) -> Result<Vec<(String, f64, i64)>, Rejection> {
        Ok(decoded(body, o)?
            .unpack()
            .unwrap()
            .series
            .iter()
            .map(|s| {
                let labels: Vec<String> = s
                    .labels
                    .iter()
                    .filter(|l| l.name != METRIC_NAME)
                    .map(|l| format!("{}={}", l.name, l.value))
                    .collect();
                let name = s.labels.get(METRIC_NAME).unwrap_or_default();
                (format!("{name}{{{}}}", labels.join(",")), s.samples[0].value, s.samples[0].timestamp_ms)
            })
            .collect())
    }

    #[test]
    fn prometheus_format() {
        let got = run(
            "# HELP x Requests.\n# TYPE x counter\nx{method=\"post\",code=\"200\"} 1027 1395066363000\nx{ code = \"4\\\"0\\\\0\\n\" , } 3\nup 1e3\n\n",
            &opts(false),
        )
        .unwrap();
        assert_eq!(
            got,
            vec![
                ("x{code=200,method=post}".into(), 1027.0, 1_395_066_363_000),
                ("x{code=4\"0\\0\n}".into(), 3.0, 1_700_000_000_000),
                ("up{}".into(), 1000.0, 1_700_000_000_000),
            ]
        );
        let special = run("a +Inf\nb -Inf\nc NaN", &opts(false)).unwrap();
        assert_eq!(special[0].1, f64::INFINITY);
        assert_eq!(special[1].1, f64::NEG_INFINITY);
        assert!(special[2].1.is_nan());
    }

    /// Prometheus 3's quoted names: the metric name inside the braces, label names before `=`,
    /// escapes undone, kept as sent (the first two lines are one series).
    #[test]
    fn quoted_utf8_names() {
        let got = run(
            concat!(
                "# TYPE \"my.metric\" counter\n",
                "{\"my.metric\", job=\"x\"} 1 1000\n",
                "{\"my.metric\",job=\"x\"} 2 2000\n",
                "m{\"service.name\"=\"a\",\"tag,x\"=\"b\", \"名前\" = \"c\"} 3\n",
                "{job=\"y\" , \"q\\\"uo\\\\te\"} 4\n",
                "{\"up\"} 5\n",
            ),
            &opts(false),
        )
        .unwrap();
        assert_eq!(
            got,
            vec![
                ("my.metric{job=x}".into(), 1.0, 1000),
                ("m{service.name=a,tag,x=b,名前=c}".into(), 3.0, 1_700_000_000_000),
                ("q\"uo\\te{job=y}".into(), 4.0, 1_700_000_000_000),
                ("up{}".into(), 5.0, 1_700_000_000_000),
            ]
        );
    }

    proptest::proptest! {
        /// Any label name and value, quoted as `/federate` quotes them, decode back as sent.
        #[test]
        fn quoted_names_round_trip(name in "[^\\x00]{1,8}", label in "[^\\x00]{1,8}", value in "[^\\x00]{1,8}") {
            let q = |s: &str| format!("\"{}\"", s.replace('\\', r"\\").replace('"', "\\\"").replace('\n', r"\n"));
            let line = format!("{{{}, {}={}}} 7", q(&name), q(&label), q(&value));
            let batch = decoded(&line, &opts(false)).map_err(|r| proptest::test_runner::TestCaseError::fail(r.message))?;
            let series = batch.unpack().map_err(|e| proptest::test_runner::TestCaseError::fail(e.to_string()))?.series;
            proptest::prop_assert_eq!(series.len(), 1);
            let labels = &series[0].labels;
            proptest::prop_assert_eq!(labels.get(METRIC_NAME), Some(name.as_str()));
            if label != METRIC_NAME {
                proptest::prop_assert_eq!(labels.get(&label), Some(value.as_str()));
            }
        }

        /// No input panics; a refusal names its line.
        #[test]
        fn any_line_decodes_or_is_refused(line in "[{}\",= a.\\\\名\n#0-9]{0,24}") {
            if let Err(r) = decoded(&line, &opts(false)) {
                proptest::prop_assert!(r.where_.is_some() || r.message.contains("series"), "{:?}", r);
            }
        }
    }

    #[test]
    fn openmetrics_seconds_and_exemplars() {
        let got = run(
            "# TYPE a counter\na_total{x=\"1\"} 5 1700000000.5 # {trace_id=\"t\"} 1 1700000000.1\n# EOF\n",
            &opts(true),
        )
        .unwrap();
        assert_eq!(got, vec![("a_total{x=1}".into(), 5.0, 1_700_000_000_500)]);
        let got = run("a 1 # {trace_id=\"t\"} 1", &opts(false)).unwrap();
        assert_eq!(got, vec![("a{}".into(), 1.0, 1_700_000_000_000)]);
    }

    #[test]
    fn bad_lines_name_the_problem() {
        for (bad, why) in [
            ("1abc 1", "invalid metric name"),
            ("a{b=\"1\" 1", "closed"),
            ("a{b=1} 1", "not quoted"),
            ("a{b-c=\"1\"} 1", "invalid label name"),
            ("a{b=\"1\"}", "has no value"),
            ("a x", "invalid value"),
            ("a 1 1.5", "integer milliseconds"),
            ("a 1 2 3", "unexpected"),
            ("a 1 -1", "outside the supported range"),
            ("a{b=\"1\",b=\"2\"} 1", "duplicate"),
        ] {
            let err = run(&format!("ok 1\n{bad}\n"), &opts(false)).unwrap_err();
            assert_eq!(err.where_, Some(("line", 2)), "{bad}");
            assert!(err.message.contains(why), "{bad}: {}", err.message);
        }
        for (bad, why) in [
            ("{a=\"1\"} 1", "has no metric name"),
            ("m{\"x\"} 1", "after the metric name"),
            ("{\"x\",\"y\"} 1", "after the metric name"),
            ("{\"x} 1", "not closed"),
            ("{\"x\" 1", "has no `=`"),
            ("{\"x\"=1} 1", "not quoted"),
            ("{\"x\"=\"1\" ", "separated"),
            ("m{a b=\"1\"} 1", "has no `=`"),
            ("my.metric 1", "quoted inside the braces"),
            ("m{\"\"=\"1\"} 1", "invalid label name"),
            ("m{\"a\u{0}\"=\"1\"} 1", "invalid label name"),
            ("{\"\"} 1", "missing metric name"),
        ] {
            let err = run(&format!("ok 1\n{bad}\n"), &opts(false)).expect_err(bad);
            assert_eq!(err.where_, Some(("line", 2)), "{bad}");
            assert!(err.message.contains(why), "{bad}: {}", err.message);
        }
        let err = run("a 1 1e300", &opts(true)).unwrap_err();
        assert!(err.message.contains("out of range"), "{}", err.message);
    }
}
