//! InfluxDB line protocol (`POST /write`, `POST /api/v2/write`), mapped as VictoriaMetrics maps
//! it: each field of a line becomes the series `{measurement}_{field}` (just `{field}` for an
//! empty measurement) with the line's tags as labels, plus `db="<db>"` when the request names a
//! database and no tag is called `db`.
//!
//! ```text
//! weather,location=us-midwest,season=summer temperature=82,humidity=71i 1465839830100400200
//! ```
//!
//! - Field values: floats, integers (`71i`), unsigned integers (`71u`) and booleans (`t`, `T`,
//!   `true`, `True`, `TRUE` = 1, `f`... = 0) are stored. String fields (`"text"`) are skipped and
//!   counted ([`Decoded::string_fields`]); VictoriaMetrics 1.79 stores them as 0. NaN and
//!   infinities are not line protocol and are refused.
//! - Escapes: `\,`, `\ ` and `\=` in tag keys, tag values and field keys; `\,` and `\ ` in
//!   measurements; `\"` and `\\` in string fields.
//! - Tag keys are label names as sent, escapes undone (`tag\,x` is the label `tag,x`,
//!   `host-name` and `名前` stay), as VictoriaMetrics and Prometheus 3 keep UTF-8 names; under
//!   `--ingest-legacy-label-names` ([`SeriesLimits::legacy_label_names`]) the keys that are not
//!   legacy Prometheus names are sanitized instead (`host-name` -> `host_name`), so that two keys
//!   may become one label (refused as a duplicate). Measurement and field are kept as sent in
//!   the metric name either way, as VictoriaMetrics keeps them. A tag with an empty value is
//!   left out.
//! - Timestamps are in `precision` units (nanoseconds by default), truncated to milliseconds;
//!   a line without one gets the request's arrival time.
//! - Blank lines and `#` comment lines are skipped. Any other malformed line refuses the whole
//!   request, naming the line (VictoriaMetrics skips it and answers 204).

use std::borrow::Cow;

use super::{at, label_name, BatchBuilder, Rejection, Reserve, SeriesLimits, Stop};
use crate::sample::{check_timestamp, PackedBatch, Sample};

/// The unit of line timestamps (`precision`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Precision {
    /// Nanoseconds (the default).
    #[default]
    Nanoseconds,
    /// Microseconds.
    Microseconds,
    /// Milliseconds.
    Milliseconds,
    /// Seconds.
    Seconds,
    /// Minutes (InfluxDB 1.x only).
    Minutes,
    /// Hours (InfluxDB 1.x only).
    Hours,
}

impl Precision {
    /// Parses the `precision` parameter as InfluxDB 1.x and 2.x spell it.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "ns" | "n" => Self::Nanoseconds,
            "us" | "u" | "µ" | "µs" => Self::Microseconds,
            "ms" => Self::Milliseconds,
            "s" => Self::Seconds,
            "m" => Self::Minutes,
            "h" => Self::Hours,
            _ => return None,
        })
    }

    /// `ts` in this unit as milliseconds (`None` when out of the i64 range).
    fn to_ms(self, ts: i64) -> Option<i64> {
        match self {
            Self::Nanoseconds => Some(ts.div_euclid(1_000_000)),
            Self::Microseconds => Some(ts.div_euclid(1_000)),
            Self::Milliseconds => Some(ts),
            Self::Seconds => ts.checked_mul(1_000),
            Self::Minutes => ts.checked_mul(60_000),
            Self::Hours => ts.checked_mul(3_600_000),
        }
    }
}

/// What a request says beyond its body.
#[derive(Clone, Debug)]
pub struct Options {
    /// Unit of the timestamps.
    pub precision: Precision,
    /// The `db` parameter (v1), added as the `db` label.
    pub db: Option<String>,
    /// Timestamp of lines without one (the request's arrival), in milliseconds.
    pub now_ms: i64,
    /// Per-series limits.
    pub limits: SeriesLimits,
}

/// A decoded body.
#[derive(Debug, Default)]
pub struct Decoded {
    /// The series, one per numeric field of each line.
    pub batch: PackedBatch,
    /// String fields skipped.
    pub string_fields: usize,
}

/// Decodes a whole body.
///
/// Lines are parsed into slices of the body (a name or value is copied only when it holds an
/// escape or, under `--ingest-legacy-label-names`, a tag key must be sanitized), so a line
/// costs no allocation once the buffers below have grown.
///
/// # Errors
/// [`Stop::Invalid`] naming the first bad line, or the budget's refusal.
pub fn decode<E: std::fmt::Debug>(body: &[u8], opts: &Options, reserve: Reserve<'_, E>) -> Result<Decoded, Stop<E>> {
    let text = std::str::from_utf8(body).map_err(|e| {
        let line = body.get(..e.valid_up_to()).map_or(0, |b| b.iter().filter(|&&c| c == b'\n').count()) + 1;
        Stop::Invalid(Rejection::line(line, "is not valid UTF-8"))
    })?;
    let mut out = BatchBuilder::new(opts.limits, reserve);
    let mut string_fields = 0;
    let db = opts.db.as_deref().filter(|d| !d.is_empty());
    // Reused from line to line.
    let mut line_parts = Parts::default();
    let mut name = String::new();
    // The series key (measurement and tags) and the one numeric field of the last line pushed,
    // when it had exactly one: a line with the same key and that field alone is the same
    // series, so it skips parsing and checking the tags (a backfill holds runs of lines of one
    // series).
    let mut last: Option<(&str, Cow<'_, str>)> = None;
    for (i, raw) in text.split('\n').enumerate() {
        let line = raw.strip_suffix('\r').unwrap_or(raw).trim_start();
        if line.trim_end().is_empty() || line.starts_with('#') {
            continue;
        }
        let bad = |m: String| Stop::Invalid(Rejection::line(i + 1, m));
        let to_ms = |timestamp: Option<i64>| match timestamp {
            None => Ok(opts.now_ms),
            Some(t) => opts
                .precision
                .to_ms(t)
                .filter(|ms| check_timestamp(*ms).is_ok())
                .ok_or_else(|| bad(format!("timestamp {t} is out of range"))),
        };
        let (key, fields, timestamp) = split_line(line).map_err(bad)?;
        if let Some((last_key, last_field)) = &last {
            if key == *last_key {
                parse_fields(fields, &mut line_parts.fields).map_err(bad)?;
                if let [(field, Some(value))] = line_parts.fields.as_slice() {
                    if field == last_field {
                        let ts = to_ms(timestamp)?;
                        if out.push_again(&[Sample::new(ts, *value)]).map_err(at("line", i + 1))? {
                            continue;
                        }
                    }
                }
            }
        }
        last = None;
        parse_key(key, opts.limits.legacy_label_names, &mut line_parts).map_err(bad)?;
        parse_fields(fields, &mut line_parts.fields).map_err(bad)?;
        let ts = to_ms(timestamp)?;
        let Parts { measurement, tags, fields } = &mut line_parts;
        if let Some(db) = db {
            if !tags.iter().any(|(k, _)| k == "db") {
                tags.push((Cow::Borrowed("db"), Cow::Borrowed(db)));
            }
        }
        for (field, value) in fields.iter() {
            let Some(value) = *value else {
                string_fields += 1;
                continue;
            };
            name.clear();
            if !measurement.is_empty() {
                name.push_str(measurement);
                name.push('_');
            }
            name.push_str(field);
            out.push_pairs(&name, tags, &[Sample::new(ts, value)]).map_err(at("line", i + 1))?;
        }
        if let [(field, Some(_))] = fields.as_slice() {
            last = Some((key, field.clone()));
        }
    }
    Ok(Decoded { batch: out.finish(), string_fields })
}

/// One parsed line, borrowing from the body: fields hold `None` for string values, tags with
/// an empty value are left out and tag keys are unescaped (and sanitized under
/// `--ingest-legacy-label-names`).
#[derive(Debug, Default, PartialEq)]
struct Parts<'a> {
    measurement: Cow<'a, str>,
    tags: Vec<(Cow<'a, str>, Cow<'a, str>)>,
    fields: Vec<(Cow<'a, str>, Option<f64>)>,
}

/// Splits `line` into its series key (measurement and tags), its fields and its timestamp.
fn split_line(line: &str) -> Result<(&str, &str, Option<i64>), String> {
    let (key, rest) = split_unescaped(line, b' ', false);
    let rest = rest.ok_or("has no fields (expected `measurement[,tag=value...] field=value[,...] [timestamp]`)")?;
    let rest = rest.trim_start_matches(' ');
    let (fields, ts) = split_unescaped(rest, b' ', true);
    let timestamp = match ts.map(str::trim) {
        None | Some("") => None,
        Some(t) => Some(t.parse::<i64>().map_err(|_| format!("invalid timestamp {t:?}: must be an integer"))?),
    };
    Ok((key, fields, timestamp))
}

/// Parses a series key into the measurement and tags of `parts`.
fn parse_key<'a>(key: &'a str, legacy: bool, parts: &mut Parts<'a>) -> Result<(), String> {
    parts.tags.clear();
    let mut tags = Pieces::new(key, b',', false);
    parts.measurement = unescape(tags.next().unwrap_or_default());
    if parts.measurement.is_empty() && key.is_empty() {
        return Err("has an empty measurement".into());
    }
    for tag in tags {
        let (k, v) = split_unescaped(tag, b'=', false);
        let v = v.ok_or_else(|| format!("tag {:?} has no `=`", unescape(k)))?;
        if k.is_empty() {
            return Err(format!("a tag with value {:?} has an empty key", unescape(v)));
        }
        if !v.is_empty() {
            parts.tags.push((label_name(unescape(k), legacy), unescape(v)));
        }
    }
    Ok(())
}

/// Parses the fields of a line into `out` (cleared first).
fn parse_fields<'a>(fields: &'a str, out: &mut Vec<(Cow<'a, str>, Option<f64>)>) -> Result<(), String> {
    out.clear();
    for field in Pieces::new(fields, b',', true) {
        let (k, v) = split_unescaped(field, b'=', false);
        let v = v.ok_or_else(|| format!("field {:?} has no `=`", unescape(k)))?;
        if k.is_empty() {
            return Err(format!("a field with value {v:?} has an empty key"));
        }
        out.push((unescape(k), field_value(v)?));
    }
    if out.is_empty() {
        return Err("has no fields".into());
    }
    Ok(())
}

/// A field value: `Some(number)`, or `None` for a string.
fn field_value(v: &str) -> Result<Option<f64>, String> {
    if v.len() >= 2 && v.starts_with('"') && v.ends_with('"') {
        return Ok(None);
    }
    let number = match v {
        "t" | "T" | "true" | "True" | "TRUE" => return Ok(Some(1.0)),
        "f" | "F" | "false" | "False" | "FALSE" => return Ok(Some(0.0)),
        _ if v.ends_with('i') => v[..v.len() - 1].parse::<i64>().map(|n| n as f64).ok(),
        _ if v.ends_with('u') => v[..v.len() - 1].parse::<u64>().map(|n| n as f64).ok(),
        // Only the characters of a decimal or exponent number: no `inf`, `nan` or `infinity`.
        _ if v.bytes().all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'-' | b'+' | b'e' | b'E')) => {
            v.parse::<f64>().ok()
        }
        _ => None,
    };
    match number {
        Some(n) if n.is_finite() => Ok(Some(n)),
        _ => Err(format!(
            "invalid field value {v:?}: expected a number, an integer like 5i, a boolean or a quoted string"
        )),
    }
}

/// Splits at the first `sep` not escaped by `\` (nor inside double quotes when `quotes`).
fn split_unescaped(s: &str, sep: u8, quotes: bool) -> (&str, Option<&str>) {
    match find_unescaped(s.as_bytes(), sep, quotes) {
        Some(i) => (&s[..i], Some(&s[i + 1..])),
        None => (s, None),
    }
}

/// The pieces of a string between every `sep` not escaped by `\` (nor inside double quotes
/// when `quotes`); an empty string is one empty piece.
struct Pieces<'a> {
    rest: Option<&'a str>,
    sep: u8,
    quotes: bool,
}

impl<'a> Pieces<'a> {
    fn new(s: &'a str, sep: u8, quotes: bool) -> Self {
        Self { rest: Some(s), sep, quotes }
    }
}

impl<'a> Iterator for Pieces<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        let (head, tail) = split_unescaped(self.rest?, self.sep, self.quotes);
        self.rest = tail;
        Some(head)
    }
}

/// The index of the first `sep` in `b` not escaped by `\` (nor inside double quotes when
/// `quotes`); the scan jumps between the bytes that matter.
fn find_unescaped(b: &[u8], sep: u8, quotes: bool) -> Option<usize> {
    let mut in_quotes = false;
    let mut i = 0;
    loop {
        let rest = b.get(i..)?;
        let at = i + if quotes { memchr::memchr3(sep, b'\\', b'"', rest) } else { memchr::memchr2(sep, b'\\', rest) }?;
        match b.get(at) {
            Some(b'\\') => i = at + 2,
            Some(b'"') if quotes && sep != b'"' => {
                in_quotes = !in_quotes;
                i = at + 1;
            }
            _ if in_quotes => i = at + 1,
            _ => return Some(at),
        }
    }
}

/// Removes the `\` of `\,`, `\ `, `\=` and `\\`; other backslashes stay.
fn unescape(s: &str) -> Cow<'_, str> {
    if !s.as_bytes().contains(&b'\\') {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\\' {
            if let Some(&next) = chars.peek() {
                if matches!(next, ',' | ' ' | '=' | '\\') {
                    out.push(next);
                    chars.next();
                    continue;
                }
            }
        }
        out.push(c);
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::labels::METRIC_NAME;

    fn opts() -> Options {
        Options {
            precision: Precision::Nanoseconds,
            db: None,
            now_ms: 1_700_000_000_000,
            limits: SeriesLimits::default(),
        }
    }

    fn run(body: &str, opts: &Options) -> Result<Decoded, Rejection> {
        decode(body.as_bytes(), opts, &mut |_| Ok::<(), ()>(())).map_err(|s| match s {
            Stop::Invalid(r) => r,
            Stop::Refused(()) => unreachable!(),
        })
    }

    /// `(name, labels without the name, ts, value)` of every series.
    fn flat(d: &Decoded) -> Vec<(String, crate::ingest::Pairs, i64, f64)> {
        d.batch
            .unpack()
            .unwrap()
            .series
            .iter()
            .map(|s| {
                let name = s.labels.get(METRIC_NAME).unwrap_or_default().to_owned();
                let rest = s
                    .labels
                    .iter()
                    .filter(|l| l.name != METRIC_NAME)
                    .map(|l| (l.name.clone(), l.value.clone()))
                    .collect();
                (name, rest, s.samples[0].timestamp_ms, s.samples[0].value)
            })
            .collect()
    }

    /// Every sample of a body in order and the string fields skipped, or the number and
    /// message of the line refused.
    fn samples(body: &str, opts: &Options) -> Result<(Vec<crate::ingest::ComparedSample>, usize), (usize, String)> {
        let d = run(body, opts).map_err(|r| (r.where_.map_or(0, |w| w.1), r.message))?;
        Ok((crate::ingest::samples_in_order(&d.batch), d.string_fields))
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(1000))]
        /// Lines that repeat the previous line's series key and single field skip parsing the
        /// tags: decoding a body gives what decoding each of its lines alone gives.
        #[test]
        fn a_body_decodes_as_its_lines_one_by_one(
            lines in proptest::collection::vec(
                (
                    proptest::sample::select(vec![
                        "m", "m", "m,a=1", "m,a=1", "m,b=2,a=1", "m,a\\ x=1", "m,a=", "n,a=1", "m,=1", "#",
                    ]),
                    proptest::sample::select(vec![" ", "  ", ""]),
                    proptest::sample::select(vec!["v=1", "v=2i", "w=3", "w=4", "v=1,w=2", "v=\"s\"", "v=1u", "v=t", "v=x", "=1"]),
                    proptest::sample::select(vec!["", " 1700000000000000000", " 1700000000000000001", " 17x", "\r"]),
                ),
                0..12,
            ),
            db in proptest::option::of(proptest::sample::select(vec!["d", ""])),
        ) {
            let lines: Vec<String> = lines.iter().map(|(a, b, c, d)| format!("{a}{b}{c}{d}")).collect();
            let body = lines.join("\n");
            let o = Options { db: db.map(str::to_owned), ..opts() };
            let mut expected = Ok((Vec::new(), 0));
            for (i, line) in lines.iter().enumerate() {
                match (samples(line, &o), &mut expected) {
                    (Ok((found, strings)), Ok((all, skipped))) => {
                        all.extend(found);
                        *skipped += strings;
                    }
                    (Err((_, message)), Ok(_)) => expected = Err((i + 1, message)),
                    _ => {}
                }
            }
            proptest::prop_assert_eq!(samples(&body, &o), expected, "body {:?}", body);
        }
    }

    fn l(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn every_field_type_and_the_naming_of_victoriametrics() {
        let d = run(
            "cpu,host=a,my-tag=x usage=1.5,idle=2i,u=3u,ok=true,bad=F,msg=\"hi, there\" 1700000001000000000\n",
            &Options { db: Some("mydb".into()), ..opts() },
        )
        .unwrap();
        let tags = l(&[("db", "mydb"), ("host", "a"), ("my-tag", "x")]);
        let t = 1_700_000_001_000;
        assert_eq!(
            flat(&d),
            vec![
                ("cpu_usage".into(), tags.clone(), t, 1.5),
                ("cpu_idle".into(), tags.clone(), t, 2.0),
                ("cpu_u".into(), tags.clone(), t, 3.0),
                ("cpu_ok".into(), tags.clone(), t, 1.0),
                ("cpu_bad".into(), tags, t, 0.0),
            ]
        );
        assert_eq!(d.string_fields, 1);
    }

    #[test]
    fn escapes_db_tags_precision_and_missing_timestamps() {
        let d = run(
            "weird\\ name,ta\\,g=v\\ 1,db=t f\\=x=3 5\n# comment\n\n,x=1 value=4\nm,empty= v=1",
            &Options { precision: Precision::Seconds, db: Some("other".into()), ..opts() },
        );
        // A measurement cannot be empty when tags follow it? It can: VictoriaMetrics names the
        // series after the field.
        let d = d.unwrap();
        assert_eq!(
            flat(&d),
            vec![
                ("weird name_f=x".into(), l(&[("db", "t"), ("ta,g", "v 1")]), 5_000, 3.0),
                ("value".into(), l(&[("db", "other"), ("x", "1")]), 1_700_000_000_000, 4.0),
                ("m_v".into(), l(&[("db", "other")]), 1_700_000_000_000, 1.0),
            ]
        );
    }

    #[test]
    fn precisions() {
        for (p, ts, ms) in [
            ("ns", 1_700_000_000_123_456_789i64, 1_700_000_000_123i64),
            ("u", 1_700_000_000_123_456, 1_700_000_000_123),
            ("ms", 1_700_000_000_123, 1_700_000_000_123),
            ("s", 1_700_000_000, 1_700_000_000_000),
            ("m", 28_333_333, 1_699_999_980_000),
            ("h", 472_222, 1_699_999_200_000),
        ] {
            let o = Options { precision: Precision::parse(p).unwrap(), ..opts() };
            assert_eq!(flat(&run(&format!("m v=1 {ts}"), &o).unwrap())[0].2, ms, "{p}");
        }
        assert_eq!(Precision::parse("x"), None);
    }

    #[test]
    fn bad_lines_are_refused_with_their_number() {
        for (bad, why) in [
            ("garbage line here", "invalid timestamp"),
            ("garbage line", "has no `=`"),
            ("m", "has no fields"),
            ("m v=", "invalid field value"),
            ("m v=1 abc", "invalid timestamp"),
            ("m v=NaN", "invalid field value"),
            ("m v=inf", "invalid field value"),
            ("m v=1e999", "invalid field value"),
            ("m v=12i3", "invalid field value"),
            ("m,tag v=1", "has no `=`"),
            ("m,=x v=1", "empty key"),
            ("m =1", "empty key"),
            ("m v=1 99999999999999999999", "invalid timestamp"),
            ("m v=1 -9223372036854775808", "out of range"),
        ] {
            let err = run(&format!("ok v=1\n{bad}\nok v=2"), &opts()).unwrap_err();
            assert_eq!(err.where_, Some(("line", 2)), "{bad}");
            assert!(err.message.contains(why), "{bad}: {}", err.message);
        }
        let err = run("m v=1 9223372036854775807", &Options { precision: Precision::Hours, ..opts() }).unwrap_err();
        assert!(err.message.contains("out of range"), "{}", err.message);
        let err = run("m,a-b=1,a_b=2 v=1", &legacy()).unwrap_err();
        assert!(err.message.contains("duplicate"), "{}", err.message);
    }

    fn legacy() -> Options {
        Options { limits: SeriesLimits { legacy_label_names: true, ..SeriesLimits::default() }, ..opts() }
    }

    #[test]
    fn tag_keys_are_kept_as_sent_unless_legacy_names_are_asked_for() {
        let body = "m,tag\\,x=1,dc-id=2,service.name=3,名前=4,tag_x=5,dc_id=6,a\\ b\\=c=7 v=1 1000000";
        let kept = l(&[
            ("a b=c", "7"),
            ("dc-id", "2"),
            ("dc_id", "6"),
            ("service.name", "3"),
            ("tag,x", "1"),
            ("tag_x", "5"),
            ("名前", "4"),
        ]);
        assert_eq!(flat(&run(body, &opts()).unwrap()), vec![("m_v".into(), kept, 1, 1.0)]);
        // Legacy names: `tag,x` and `tag_x` collide, as they did before names were kept.
        let err = run(body, &legacy()).unwrap_err();
        assert!(err.message.contains("duplicate label name"), "{}", err.message);
        let body = "m,tag\\,x=1,dc-id=2,service.name=3,名前=4 v=1 1000000";
        let sanitized = l(&[("__", "4"), ("dc_id", "2"), ("service_name", "3"), ("tag_x", "1")]);
        assert_eq!(flat(&run(body, &legacy()).unwrap()), vec![("m_v".into(), sanitized, 1, 1.0)]);
    }

    proptest::proptest! {
        /// Any tag key (escaped as line protocol escapes it) comes back byte for byte as a label
        /// name; with legacy names it comes back sanitized.
        #[test]
        fn any_tag_key_round_trips(key in "[^\\\\\\n\\r\\x00#]{1,12}", value in "[a-z]{1,4}") {
            let escaped: String = key.chars().flat_map(|c| {
                let e = matches!(c, ',' | ' ' | '=').then_some('\\');
                e.into_iter().chain(std::iter::once(c))
            }).collect();
            let body = format!("m,{escaped}={value} v=1 1000000");
            let name = |o: &Options| run(&body, o).map(|d| flat(&d).into_iter().flat_map(|s| s.1).collect::<Vec<_>>());
            proptest::prop_assert_eq!(name(&opts()), Ok(vec![(key.clone(), value.clone())]));
            let sanitized = crate::ingest::sanitize_label_name(&key).into_owned();
            proptest::prop_assert_eq!(name(&legacy()), Ok(vec![(sanitized, value)]));
        }
    }

    /// The byte-at-a-time scan `find_unescaped` replaced.
    fn find_reference(b: &[u8], sep: u8, quotes: bool) -> Option<usize> {
        let mut in_quotes = false;
        let mut i = 0;
        while i < b.len() {
            match b[i] {
                b'\\' => i += 1,
                b'"' if quotes => in_quotes = !in_quotes,
                c if c == sep && !in_quotes => return Some(i),
                _ => {}
            }
            i += 1;
        }
        None
    }

    proptest::proptest! {
        #[test]
        fn find_unescaped_agrees_with_a_byte_scan(text in "[a ,=\\\\\"]{0,24}", quotes: bool, sep in 0usize..3) {
            let sep = [b' ', b',', b'='][sep];
            proptest::prop_assert_eq!(find_unescaped(text.as_bytes(), sep, quotes), find_reference(text.as_bytes(), sep, quotes));
        }
    }

    #[test]
    fn quoted_strings_may_hold_separators() {
        let d = run("m s=\"a b, c=d \\\" e\",v=2 1000000", &opts()).unwrap();
        assert_eq!(flat(&d), vec![("m_v".into(), vec![], 1, 2.0)]);
        assert_eq!(d.string_fields, 1);
    }

    #[test]
    fn limits_and_budget() {
        let o = Options { limits: SeriesLimits { max_series: 2, ..SeriesLimits::default() }, ..opts() };
        let err = run("m a=1,b=2,c=3", &o).unwrap_err();
        assert!(err.message.contains("--max-series-per-request"), "{}", err.message);
        let refused = decode(b"m a=1", &opts(), &mut |_| Err("full"));
        assert!(matches!(refused, Err(Stop::Refused("full"))));
    }
}
