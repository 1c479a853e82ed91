//! The function table: Go's predefined template functions and Prometheus' (`template.go`'s
//! `NewTemplateExpander` funcMap), with their signatures and Prometheus' implementations.

use std::collections::BTreeMap;
use std::rc::Rc;

use super::builtins::{self, query_escape};
use super::gofmt::{sprint, sprint_v, sprintf, sprintln};
use super::gotime::GoTime;
use super::strconv::{format_float, parse_float, quote};
use super::value::{Sample, Ty, Value};
use super::{TemplateQuery, MAX_OUTPUT};

/// What the functions reach outside their arguments.
pub(super) struct Env<'a> {
    /// `query`'s data.
    pub(super) query: &'a dyn TemplateQuery,
    /// `externalURL`, `pathPrefix`.
    pub(super) external_url: &'a str,
    /// `now`, in milliseconds since the epoch.
    pub(super) now_ms: i64,
}

/// The parameters of a function: fixed ones, then a variadic one.
pub(super) struct Sig {
    pub(super) fixed: &'static [Ty],
    pub(super) variadic: Option<Ty>,
}

const fn sig(fixed: &'static [Ty], variadic: Option<Ty>) -> Sig {
    Sig { fixed, variadic }
}

macro_rules! funcs {
    ($($variant:ident = $name:literal,)*) => {
        /// A template function.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub(super) enum Func { $($variant,)* }

        impl Func {
            /// The function called `name`.
            pub(super) fn lookup(name: &str) -> Option<Func> {
                match name { $($name => Some(Func::$variant),)* _ => None }
            }
        }
    };
}

funcs! {
    And = "and", Or = "or", Not = "not", Len = "len", Index = "index", Slice = "slice",
    Print = "print", Printf = "printf", Println = "println", Eq = "eq", Ne = "ne", Lt = "lt",
    Le = "le", Gt = "gt", Ge = "ge", Html = "html", Js = "js", Urlquery = "urlquery", Call = "call",
    Query = "query", First = "first", Label = "label", ValueOf = "value", Strvalue = "strvalue",
    Args = "args", ReReplaceAll = "reReplaceAll", SafeHtml = "safeHtml", Match = "match",
    Title = "title", ToUpper = "toUpper", ToLower = "toLower", GraphLink = "graphLink",
    TableLink = "tableLink", SortByLabel = "sortByLabel", StripPort = "stripPort",
    StripDomain = "stripDomain", Humanize = "humanize", Humanize1024 = "humanize1024",
    HumanizeDuration = "humanizeDuration", HumanizePercentage = "humanizePercentage",
    HumanizeTimestamp = "humanizeTimestamp", ToTime = "toTime", ToDuration = "toDuration",
    Now = "now", PathPrefix = "pathPrefix", ExternalUrl = "externalURL",
    ParseDuration = "parseDuration", UrlQueryEscape = "urlQueryEscape",
}

/// Go's runtime error for a method on a nil `*sample`.
const NIL_DEREF: &str = "runtime error: invalid memory address or nil pointer dereference";

impl Func {
    /// The function's parameters.
    pub(super) fn sig(self) -> Sig {
        use Func::*;
        const ANY: &[Ty] = &[Ty::Any];
        const STR: &[Ty] = &[Ty::Str];
        match self {
            And | Or | Index | Slice | Eq | Call => sig(ANY, Some(Ty::Any)),
            Not | Len | Humanize | Humanize1024 | HumanizeDuration | HumanizePercentage | HumanizeTimestamp
            | ToTime | ToDuration => sig(ANY, None),
            Print | Println | Html | Js | Urlquery | Args => sig(&[], Some(Ty::Any)),
            Printf => sig(STR, Some(Ty::Any)),
            Ne | Lt | Le | Gt | Ge => sig(&[Ty::Any, Ty::Any], None),
            Query | SafeHtml | Title | ToUpper | ToLower | GraphLink | TableLink | StripPort | StripDomain
            | ParseDuration | UrlQueryEscape => sig(STR, None),
            First => sig(&[Ty::QueryResult], None),
            Label => sig(&[Ty::Str, Ty::Sample], None),
            ValueOf | Strvalue => sig(&[Ty::Sample], None),
            ReReplaceAll => sig(&[Ty::Str, Ty::Str, Ty::Str], None),
            Match => sig(&[Ty::Str, Ty::Str], None),
            SortByLabel => sig(&[Ty::Str, Ty::QueryResult], None),
            Now | PathPrefix | ExternalUrl => sig(&[], None),
        }
    }

    /// Calls the function with arguments of its [`sig`](Self::sig) types (`and`, `or` and
    /// `call` are the executor's). The error is the function's, without Go's `error calling`.
    pub(super) fn call(self, env: &Env<'_>, args: &[Value]) -> Result<Value, String> {
        use Func::*;
        let arg = |i: usize| args.get(i).unwrap_or(&Value::Nil);
        let s = |i: usize| arg(i).as_str().unwrap_or("");
        let text = |t: String| Ok(Value::str(t));
        match self {
            And | Or | Call => Ok(Value::Nil),
            Not => Ok(Value::Bool(!arg(0).truth())),
            Len => builtins::len(arg(0)),
            Index => builtins::index(arg(0), args.get(1..).unwrap_or(&[])),
            Slice => builtins::slice(arg(0), args.get(1..).unwrap_or(&[])),
            Print => text(sprint(args)),
            Printf => text(sprintf(s(0), args.get(1..).unwrap_or(&[]))),
            Println => text(sprintln(args)),
            Eq => builtins::eq(arg(0), args.get(1..).unwrap_or(&[])).map(Value::Bool),
            Ne => builtins::eq(arg(0), args.get(1..2).unwrap_or(&[])).map(|b| Value::Bool(!b)),
            Lt => builtins::lt(arg(0), arg(1)).map(Value::Bool),
            Le => builtins::le(arg(0), arg(1)).map(Value::Bool),
            Gt => builtins::le(arg(0), arg(1)).map(|b| Value::Bool(!b)),
            Ge => builtins::lt(arg(0), arg(1)).map(|b| Value::Bool(!b)),
            Html => text(builtins::html(args)),
            Js => text(builtins::js(args)),
            Urlquery => text(builtins::urlquery(args)),
            Query => {
                let samples = env.query.query(s(0))?;
                let samples: Vec<Rc<Sample>> = samples
                    .into_iter()
                    .map(|q| Rc::new(Sample { labels: Rc::new(q.labels), value: q.value }))
                    .collect();
                Ok(Value::Samples(samples.into()))
            }
            First => match arg(0) {
                Value::Samples(v) if !v.is_empty() => Ok(Value::Sample(Some(v[0].clone()))),
                _ => Err("first() called on vector with no elements".into()),
            },
            Label => sample(arg(1)).map(|smp| Value::str(smp.labels.get(s(0)).map_or("", String::as_str))),
            ValueOf => sample(arg(0)).map(|smp| Value::Float(smp.value)),
            Strvalue => sample(arg(0)).map(|smp| Value::str(smp.labels.get("__value__").map_or("", String::as_str))),
            Args => Ok(Value::AnyMap(Rc::new(
                args.iter().enumerate().map(|(i, a)| (format!("arg{i}"), a.clone())).collect::<BTreeMap<_, _>>(),
            ))),
            ReReplaceAll => {
                let re = compile(s(0)).map_err(|e| format!("regexp: Compile({}): {e}", quote(s(0))))?;
                replace_all(&re, s(2), s(1)).map(Value::str)
            }
            SafeHtml => Ok(Value::Html(s(0).into())),
            Match => Ok(Value::Bool(compile(s(0))?.is_match(s(1)))),
            Title => text(title(s(0))),
            ToUpper => text(map_chars(s(0), |c| c.to_uppercase())),
            ToLower => text(map_chars(s(0), |c| c.to_lowercase())),
            GraphLink => text(format!("/graph?g0.expr={}&g0.tab=0", query_escape(s(0)))),
            TableLink => text(format!("/graph?g0.expr={}&g0.tab=1", query_escape(s(0)))),
            UrlQueryEscape => text(query_escape(s(0))),
            SortByLabel => {
                let mut v: Vec<Rc<Sample>> = match arg(1) {
                    Value::Samples(v) => v.to_vec(),
                    _ => Vec::new(),
                };
                v.sort_by(|a, b| {
                    a.labels.get(s(0)).map_or("", String::as_str).cmp(b.labels.get(s(0)).map_or("", String::as_str))
                });
                Ok(Value::Samples(v.into()))
            }
            StripPort => text(match split_host_port(s(0)) {
                Some((host, _)) => host.to_owned(),
                None => s(0).to_owned(),
            }),
            StripDomain => text(strip_domain(s(0))),
            Humanize => humanize(arg(0)).map(Value::str),
            Humanize1024 => humanize1024(arg(0)).map(Value::str),
            HumanizeDuration => humanize_duration(arg(0)).map(Value::str),
            HumanizePercentage => Ok(Value::str(format!("{}%", g4(convert_to_float(arg(0))? * 100.0)))),
            HumanizeTimestamp => {
                let v = convert_to_float(arg(0))?;
                match float_to_time(v) {
                    Ok(t) => text(t.to_string()),
                    Err(None) => text(g4(v)),
                    Err(Some(e)) => Err(e),
                }
            }
            ToTime => {
                let v = convert_to_float(arg(0))?;
                float_to_time(v)
                    .map(|t| Value::Time(t, true))
                    .map_err(|e| e.unwrap_or_else(|| "value is NaN or Inf".into()))
            }
            ToDuration => Ok(Value::Duration((convert_to_float(arg(0))? * 1e9) as i64, true)),
            Now => Ok(Value::Float(env.now_ms as f64 / 1000.0)),
            PathPrefix => text(url_path(env.external_url).to_owned()),
            ExternalUrl => text(env.external_url.to_owned()),
            ParseDuration => parse_duration(s(0)).map(|ns| Value::Float(ns as f64 / 1e9)),
        }
    }
}

fn sample(v: &Value) -> Result<&Sample, String> {
    match v {
        Value::Sample(Some(s)) => Ok(s),
        _ => Err(NIL_DEREF.into()),
    }
}

/// `%.4g`.
fn g4(v: f64) -> String {
    format_float(v, 'g', Some(4))
}

/// Prometheus' `ConvertToFloat`: a number, a numeric string or a duration.
fn convert_to_float(v: &Value) -> Result<f64, String> {
    match v {
        Value::Float(f) => Ok(*f),
        Value::Int(i) => Ok(*i as f64),
        Value::Duration(d, false) => Ok((d / 1_000_000_000) as f64 + (d % 1_000_000_000) as f64 / 1e9),
        Value::Str(s) => parse_float(s).map_err(|e| format!("strconv.ParseFloat: parsing {}: {}", quote(s), e.text())),
        other => Err(format!("can't convert {} to float", other.type_name())),
    }
}

/// Prometheus' `floatToTime` (millisecond precision); `Err(None)` for NaN and infinities.
fn float_to_time(v: f64) -> Result<GoTime, Option<String>> {
    if !v.is_finite() {
        return Err(None);
    }
    let ts = v * 1e9;
    if ts > i64::MAX as f64 || ts < i64::MIN as f64 {
        return Err(Some(format!(
            "{} cannot be represented as a nanoseconds timestamp since it overflows int64",
            sprint_v(&Value::Float(v))
        )));
    }
    let ms = (ts as i64) / 1_000_000;
    Ok(GoTime::unix(ms / 1000, (ms % 1000) * 1_000_000))
}

fn humanize(v: &Value) -> Result<String, String> {
    let mut v = convert_to_float(v)?;
    if v == 0.0 || !v.is_finite() {
        return Ok(g4(v));
    }
    let mut prefix = "";
    if v.abs() >= 1.0 {
        for p in ["k", "M", "G", "T", "P", "E", "Z", "Y"] {
            if v.abs() < 1000.0 {
                break;
            }
            prefix = p;
            v /= 1000.0;
        }
    } else {
        for p in ["m", "u", "n", "p", "f", "a", "z", "y"] {
            if v.abs() >= 1.0 {
                break;
            }
            prefix = p;
            v *= 1000.0;
        }
    }
    Ok(format!("{}{prefix}", g4(v)))
}

fn humanize1024(v: &Value) -> Result<String, String> {
    let mut v = convert_to_float(v)?;
    if v.abs() <= 1.0 || !v.is_finite() {
        return Ok(g4(v));
    }
    let mut prefix = "";
    for p in ["ki", "Mi", "Gi", "Ti", "Pi", "Ei", "Zi", "Yi"] {
        if v.abs() < 1024.0 {
            break;
        }
        prefix = p;
        v /= 1024.0;
    }
    Ok(format!("{}{prefix}", g4(v)))
}

fn humanize_duration(v: &Value) -> Result<String, String> {
    let mut v = convert_to_float(v)?;
    if !v.is_finite() {
        return Ok(g4(v));
    }
    if v == 0.0 {
        return Ok(format!("{}s", g4(v)));
    }
    if v.abs() >= 1.0 {
        let sign = if v < 0.0 { "-" } else { "" };
        v = v.abs();
        let d = v as i64;
        let (secs, mins, hours, days) = (d % 60, d / 60 % 60, d / 3600 % 24, d / 86_400);
        return Ok(if days != 0 {
            format!("{sign}{days}d {hours}h {mins}m {secs}s")
        } else if hours != 0 {
            format!("{sign}{hours}h {mins}m {secs}s")
        } else if mins != 0 {
            format!("{sign}{mins}m {secs}s")
        } else {
            format!("{sign}{}s", g4(v))
        });
    }
    let mut prefix = "";
    for p in ["m", "u", "n", "p", "f", "a", "z", "y"] {
        if v.abs() >= 1.0 {
            break;
        }
        prefix = p;
        v *= 1000.0;
    }
    Ok(format!("{}{prefix}s", g4(v)))
}

/// Prometheus' `model.ParseDurationAllowNegative`, in nanoseconds.
fn parse_duration(s: &str) -> Result<i64, String> {
    if let Some(rest) = s.strip_prefix('-') {
        return parse_duration_positive(rest).map(|d| -d);
    }
    parse_duration_positive(s)
}

fn parse_duration_positive(s: &str) -> Result<i64, String> {
    match s {
        "0" => return Ok(0),
        "" => return Err("empty duration string".into()),
        _ => {}
    }
    let invalid = || format!("not a valid duration string: {}", quote(s));
    const UNITS: [(&str, u64); 7] = [
        ("y", 365 * 86_400 * 1_000_000_000),
        ("w", 7 * 86_400 * 1_000_000_000),
        ("d", 86_400 * 1_000_000_000),
        ("h", 3_600 * 1_000_000_000),
        ("m", 60 * 1_000_000_000),
        ("s", 1_000_000_000),
        ("ms", 1_000_000),
    ];
    let mut rest = s;
    let mut total: u64 = 0;
    let mut last_unit = 0;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(invalid());
        }
        let v: u64 = rest[..digits].parse().map_err(|_| invalid())?;
        rest = &rest[digits..];
        let ulen = rest.bytes().take_while(|b| !b.is_ascii_digit()).count();
        if ulen == 0 {
            return Err(invalid());
        }
        let unit = &rest[..ulen];
        rest = &rest[ulen..];
        let Some(pos) = UNITS.iter().position(|(u, _)| *u == unit) else {
            return Err(format!("unknown unit {} in duration {}", quote(unit), quote(s)));
        };
        if pos < last_unit {
            return Err(invalid());
        }
        last_unit = pos + 1;
        let mult = UNITS[pos].1;
        if v > (1u64 << 63) / mult {
            return Err("duration out of range".into());
        }
        total += v * mult;
        if total > i64::MAX as u64 {
            return Err("duration out of range".into());
        }
    }
    Ok(total as i64)
}

/// The path of a URL (`https://host:9090/prefix?x` → `/prefix`).
fn url_path(url: &str) -> &str {
    let after_scheme = match url.find("://") {
        Some(i) => match url[i + 3..].find('/') {
            Some(j) => &url[i + 3 + j..],
            None => return "",
        },
        None => url,
    };
    after_scheme.split(['?', '#']).next().unwrap_or("")
}

/// Go's `net.SplitHostPort`.
fn split_host_port(hostport: &str) -> Option<(&str, &str)> {
    let i = hostport.rfind(':')?;
    let (host, j, k) = if hostport.starts_with('[') {
        let end = hostport.find(']')?;
        if end + 1 != i {
            return None;
        }
        (&hostport[1..end], 1, end + 1)
    } else {
        let host = &hostport[..i];
        if host.contains(':') {
            return None;
        }
        (host, 0, 0)
    };
    if hostport[j..].contains('[') || hostport[k..].contains(']') {
        return None;
    }
    Some((host, &hostport[i + 1..]))
}

/// Prometheus' `stripDomain`: the first label of a host name, port kept; IPs unchanged.
fn strip_domain(hostport: &str) -> String {
    let (host, port) = split_host_port(hostport).unwrap_or((hostport, ""));
    if host.parse::<std::net::IpAddr>().is_ok() {
        return hostport.to_owned();
    }
    let host = host.split('.').next().unwrap_or("");
    if port.is_empty() {
        return host.to_owned();
    }
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// Go's `strings.ToUpper`/`ToLower`: a character whose case mapping is one character maps.
fn map_chars<I: Iterator<Item = char>>(s: &str, f: impl Fn(char) -> I) -> String {
    s.chars()
        .map(|c| {
            if c == 'İ' {
                return 'i';
            }
            let mut m = f(c);
            match (m.next(), m.next()) {
                (Some(one), None) => one,
                _ => c,
            }
        })
        .collect()
}

/// An approximation of `cases.Title(language.AmericanEnglish, cases.NoLower)`: the first
/// cased letter of each word upper-cased, the rest left as is.
fn title(s: &str) -> String {
    let is_mid = |c: char| {
        matches!(c, '\'' | '.' | ':' | '·' | '’' | '\u{2018}' | '\u{2024}' | '\u{fe52}' | '\u{ff07}' | '\u{ff0e}')
    };
    let mut out = String::with_capacity(s.len());
    let mut mid_word = false;
    let mut prev_mid = false;
    for c in s.chars() {
        if c.is_lowercase() || c.is_uppercase() {
            if mid_word {
                out.push(c);
            } else {
                let mut up = c.to_uppercase();
                out.extend(up.next());
                out.extend(up.flat_map(char::to_lowercase));
                mid_word = true;
            }
        } else {
            out.push(c);
            if !(c.is_alphanumeric() || c == '_' || is_mid(c)) {
                mid_word = false;
            }
        }
        let mid = is_mid(c);
        if prev_mid && mid {
            mid_word = false;
        }
        prev_mid = mid;
    }
    out
}

/// Compiles a Go (RE2) pattern: a `{` that opens no repetition is a literal, as in Go.
fn compile(pattern: &str) -> Result<regex::Regex, String> {
    let build = |p: &str| regex::RegexBuilder::new(p).size_limit(1 << 22).dfa_size_limit(1 << 22).build();
    build(pattern).or_else(|first| {
        build(&escape_literal_braces(pattern)).map_err(|_| {
            let msg = first.to_string();
            let reason = msg.rsplit("error: ").next().unwrap_or(&msg).trim().to_owned();
            format!("error parsing regexp: {reason}: `{pattern}`")
        })
    })
}

/// Escapes each `{` that does not start `{n}`, `{n,}` or `{n,m}`.
fn escape_literal_braces(p: &str) -> String {
    let mut out = String::with_capacity(p.len() + 4);
    let mut escaped = false;
    for (i, c) in p.char_indices() {
        if c == '{' && !escaped {
            let body = p[i + 1..].split('}').next().filter(|_| p[i + 1..].contains('}')).unwrap_or("");
            let (lo, hi) = body.split_once(',').unwrap_or((body, ""));
            let repeat =
                !lo.is_empty() && lo.bytes().all(|b| b.is_ascii_digit()) && hi.bytes().all(|b| b.is_ascii_digit());
            if !repeat {
                out.push('\\');
            }
        }
        escaped = c == '\\' && !escaped;
        out.push(c);
    }
    out
}

/// `Regexp.ReplaceAllString`, `$1`/`${name}` expanded, the result bounded.
fn replace_all(re: &regex::Regex, text: &str, repl: &str) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut last = 0;
    for caps in re.captures_iter(text) {
        let Some(m) = caps.get(0) else { continue };
        out.push_str(&text[last..m.start()]);
        caps.expand(repl, &mut out);
        last = m.end();
        if out.len() > MAX_OUTPUT {
            return Err(format!("result exceeds {MAX_OUTPUT} bytes"));
        }
    }
    out.push_str(&text[last..]);
    Ok(out)
}
