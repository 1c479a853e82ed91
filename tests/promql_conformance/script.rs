//! Parser for Prometheus' PromQL test scripts (`promql/promqltest/testdata/*.test`).

use std::collections::BTreeMap;

use saltdb::labels::Labels;
pub use saltdb::promql::notation::{parse_metric, parse_scalar, parse_series, SeqValue, SeriesDesc};

#[derive(Clone, Debug)]
pub struct Load {
    pub step_ms: i64,
    pub with_nhcb: bool,
    pub series: Vec<SeriesDesc>,
    /// `metric@st` lines: per series, the start timestamp's offset from the sample's timestamp
    /// at each step (`None`: the sample has none).
    pub starts: Vec<(Labels, Vec<Option<i64>>)>,
}

#[derive(Clone, Debug, Default)]
pub struct Expect {
    /// `fail`, `warn`, `info`: message (exact) or regex patterns; `None` = any.
    pub fail: Option<Matcher>,
    pub warn: Vec<Matcher>,
    pub info: Vec<Matcher>,
    pub no_warn: bool,
    pub no_info: bool,
    pub ordered: bool,
    pub any_warn: bool,
    pub any_info: bool,
}

#[derive(Clone, Debug)]
pub enum Matcher {
    Any,
    Exact(String),
    Regex(regex::Regex),
}

impl Matcher {
    pub fn matches(&self, s: &str) -> bool {
        match self {
            Matcher::Any => true,
            Matcher::Exact(m) => m == s,
            Matcher::Regex(r) => r.is_match(s),
        }
    }
}

#[derive(Clone, Debug)]
pub enum Expected {
    Empty,
    Scalar(f64),
    Series(Vec<SeriesDesc>),
    String(String),
}

#[derive(Clone, Debug)]
pub struct Eval {
    pub line: usize,
    pub expr: String,
    /// Instant: start == end, step 0.
    pub start_ms: i64,
    pub end_ms: i64,
    pub step_ms: i64,
    pub is_range: bool,
    /// `expect range vector from .. to .. step ..` (an instant query returning a matrix).
    pub range_vector: Option<(i64, i64, i64)>,
    pub expect: Expect,
    pub expected: Expected,
    /// Expected lines mention native histograms.
    pub expects_histograms: bool,
    /// An instant eval that must not be re-run as a range query.
    pub exclude_from_range: bool,
}

#[derive(Clone, Debug)]
pub enum Command {
    Load(Load),
    Clear,
    Eval(Box<Eval>),
}

/// Parses a Prometheus duration (`1m30s`, `100ms`, `0`).
pub fn parse_duration(s: &str) -> Result<i64, String> {
    let s = s.trim();
    if s == "0" {
        return Ok(0);
    }
    let mut total: i64 = 0;
    let mut rest = s;
    if rest.is_empty() {
        return Err("empty duration".into());
    }
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(|b| b.is_ascii_digit()).count();
        if digits == 0 {
            return Err(format!("invalid duration {s:?}"));
        }
        let n: i64 = rest[..digits].parse().map_err(|e| format!("{e}"))?;
        rest = &rest[digits..];
        let unit_len = rest.bytes().take_while(|b| b.is_ascii_alphabetic()).count();
        let mult = match &rest[..unit_len] {
            "ms" => 1,
            "s" => 1000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            "w" => 604_800_000,
            "y" => 31_536_000_000,
            u => return Err(format!("invalid unit {u:?} in duration {s:?}")),
        };
        rest = &rest[unit_len..];
        total += n * mult;
    }
    Ok(total)
}

fn parse_expect_matcher(rest: &str) -> Result<Matcher, String> {
    let rest = rest.trim();
    if rest.is_empty() {
        return Ok(Matcher::Any);
    }
    if let Some(m) = rest.strip_prefix("msg:") {
        return Ok(Matcher::Exact(m.trim().to_string()));
    }
    if let Some(r) = rest.strip_prefix("regex:") {
        return regex::Regex::new(r.trim()).map(Matcher::Regex).map_err(|e| e.to_string());
    }
    Err(format!("bad expect suffix {rest:?}"))
}

fn parse_expect_line(ev: &mut Eval, line: &str) -> Result<(), String> {
    let body = line.trim_start_matches("expect").trim();
    let (kind, rest) = body.split_once(char::is_whitespace).unwrap_or((body, ""));
    match kind {
        "fail" => ev.expect.fail = Some(parse_expect_matcher(rest)?),
        "warn" => ev.expect.warn.push(parse_expect_matcher(rest)?),
        "info" => ev.expect.info.push(parse_expect_matcher(rest)?),
        "no_warn" => ev.expect.no_warn = true,
        "no_info" => ev.expect.no_info = true,
        "ordered" => ev.expect.ordered = true,
        "range" => {
            let r = rest.trim().strip_prefix("vector").ok_or("bad expect range")?.trim();
            let r = r.strip_prefix("from").ok_or("bad expect range")?.trim();
            let (from, r) = r.split_once(" to ").ok_or("bad expect range")?;
            let (to, step) = r.split_once(" step ").ok_or("bad expect range")?;
            let (f, t, s) = (parse_duration(from)?, parse_duration(to)?, parse_duration(step)?);
            ev.range_vector = Some((f, t, s));
            ev.exclude_from_range = true;
        }
        "string" => {
            let lit = rest.trim();
            let value = if let Some(raw) = lit.strip_prefix('`').and_then(|l| l.strip_suffix('`')) {
                raw.to_string()
            } else {
                unescape(lit.strip_prefix('"').and_then(|l| l.strip_suffix('"')).ok_or("bad expect string")?)
            };
            ev.expected = Expected::String(value);
            ev.exclude_from_range = true;
        }
        other => return Err(format!("unknown expect {other:?}")),
    }
    Ok(())
}

fn unescape(s: &str) -> String {
    let mut out = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some('n') => out.push('\n'),
                Some('t') => out.push('\t'),
                Some(o) => out.push(o),
                None => {}
            }
        } else {
            out.push(c);
        }
    }
    out
}

fn parse_eval_header(line: &str, lineno: usize) -> Result<Eval, String> {
    let (head, rest) = line.split_once(char::is_whitespace).ok_or("bad eval")?;
    let modifier = head.strip_prefix("eval").ok_or("bad eval")?.trim_start_matches('_');
    let rest = rest.trim();
    let mut ev = Eval {
        line: lineno,
        expr: String::new(),
        start_ms: 0,
        end_ms: 0,
        step_ms: 0,
        is_range: false,
        range_vector: None,
        expect: Expect::default(),
        expected: Expected::Empty,
        expects_histograms: false,
        exclude_from_range: false,
    };
    if let Some(r) = rest.strip_prefix("instant") {
        let r = r.trim().strip_prefix("at").ok_or("eval instant without at")?.trim();
        let (at, expr) = r.split_once(char::is_whitespace).ok_or("bad eval instant")?;
        ev.start_ms = parse_duration(at)?;
        ev.end_ms = ev.start_ms;
        ev.expr = expr.trim().to_string();
    } else if let Some(r) = rest.strip_prefix("range") {
        let r = r.trim().strip_prefix("from").ok_or("bad eval range")?.trim();
        let (from, r) = r.split_once(" to ").ok_or("bad eval range")?;
        let (to, r) = r.trim().split_once(" step ").ok_or("bad eval range")?;
        let (step, expr) = r.trim().split_once(char::is_whitespace).ok_or("bad eval range")?;
        ev.start_ms = parse_duration(from)?;
        ev.end_ms = parse_duration(to)?;
        ev.step_ms = parse_duration(step)?;
        ev.is_range = true;
        ev.expr = expr.trim().to_string();
    } else {
        return Err(format!("bad eval line {line:?}"));
    }
    match modifier {
        "" => {}
        "fail" => ev.expect.fail = Some(Matcher::Any),
        "warn" => ev.expect.any_warn = true,
        "info" => ev.expect.any_info = true,
        "ordered" => ev.expect.ordered = true,
        m => return Err(format!("unknown eval modifier {m:?}")),
    }
    Ok(ev)
}

fn parse_eval(lines: &[(usize, String)], i: &mut usize) -> Result<Eval, String> {
    let (lineno, header) = &lines[*i];
    let mut ev = parse_eval_header(header, *lineno)?;
    let mut series = Vec::new();
    while *i + 1 < lines.len() && !lines[*i + 1].1.is_empty() {
        *i += 1;
        let l = lines[*i].1.as_str();
        if l.contains("{{") {
            ev.expects_histograms = true;
        }
        if let Some(m) = l.strip_prefix("expected_fail_message") {
            ev.expect.fail = Some(Matcher::Exact(m.trim().to_string()));
        } else if let Some(r) = l.strip_prefix("expected_fail_regexp") {
            ev.expect.fail = Some(Matcher::Regex(regex::Regex::new(r.trim()).map_err(|e| e.to_string())?));
        } else if l.split(' ').next() == Some("expect") {
            parse_expect_line(&mut ev, l)?;
        } else if let Some(v) = parse_scalar(l.trim()) {
            ev.expected = Expected::Scalar(v);
        } else {
            series.push(parse_series(l)?);
        }
    }
    if !series.is_empty() {
        ev.expected = Expected::Series(series);
    }
    Ok(ev)
}

fn parse_load(lines: &[(usize, String)], i: &mut usize) -> Result<Load, String> {
    let header = &lines[*i].1;
    let mut parts = header.split_whitespace();
    let cmd = parts.next().unwrap_or("");
    let step = parts.next().ok_or("load without step")?;
    let mut load = Load {
        step_ms: parse_duration(step)?,
        with_nhcb: cmd == "load_with_nhcb",
        series: Vec::new(),
        starts: Vec::new(),
    };
    while *i + 1 < lines.len() && !lines[*i + 1].1.is_empty() {
        *i += 1;
        let l = lines[*i].1.as_str();
        let first = l.split_whitespace().next().unwrap_or("");
        if let Some(metric) = first.strip_suffix("@st") {
            let offsets = l.get(first.len()..).unwrap_or("").split_whitespace();
            let mut out = Vec::new();
            for item in offsets {
                parse_st_item(item, &mut out)?;
            }
            load.starts.push((parse_metric(metric)?, out));
            continue;
        }
        load.series.push(parse_series(l)?);
    }
    Ok(load)
}

/// A signed duration at the start of `s` (`-1m`, `+30s`, `0`, `1ms`), in ms, and the rest.
fn signed_duration(s: &str) -> Result<(i64, &str), String> {
    let (neg, body) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let digits = body.bytes().take_while(u8::is_ascii_digit).count();
    let unit = body[digits..].bytes().take_while(|c| c.is_ascii_alphabetic() && *c != b'x').count();
    if digits == 0 {
        return Err(format!("bad start timestamp offset {s:?}"));
    }
    let text = &body[..digits + unit];
    let ms = if unit == 0 { text.parse::<i64>().map_err(|e| e.to_string())? } else { parse_duration(text)? };
    Ok((if neg { -ms } else { ms }, &body[digits + unit..]))
}

/// Expands one item of an `@st` line (Prometheus' `parseSTItem`): `_`, `_xN`, `<dur>`,
/// `<dur>xN`, `<dur>+<dur>xN`, `<dur>-<dur>xN`.
fn parse_st_item(item: &str, out: &mut Vec<Option<i64>>) -> Result<(), String> {
    if item == "_" {
        out.push(None);
        return Ok(());
    }
    if let Some(n) = item.strip_prefix("_x") {
        let n: usize = n.parse().map_err(|_| format!("bad repeat {item:?}"))?;
        out.extend(std::iter::repeat_n(None, n));
        return Ok(());
    }
    let (base, rest) = signed_duration(item)?;
    if rest.is_empty() {
        out.push(Some(base));
        return Ok(());
    }
    if let Some(n) = rest.strip_prefix('x') {
        let n: usize = n.parse().map_err(|_| format!("bad repeat in {item:?}"))?;
        out.extend(std::iter::repeat_n(Some(base), n + 1));
        return Ok(());
    }
    let (delta, rest) = signed_duration(rest)?;
    let n: usize = rest.strip_prefix('x').and_then(|n| n.parse().ok()).ok_or_else(|| format!("bad item {item:?}"))?;
    out.extend((0..=n as i64).map(|i| Some(base + i * delta)));
    Ok(())
}

/// Start timestamps of a load block: series labels -> (sample timestamp, start timestamp), for
/// the samples whose start timestamp is set and not 0 (none).
pub fn load_starts(load: &Load) -> BTreeMap<Labels, Vec<(i64, i64)>> {
    let mut out: BTreeMap<Labels, Vec<(i64, i64)>> = BTreeMap::new();
    for (labels, offsets) in &load.starts {
        let pts = out.entry(labels.clone()).or_default();
        for (i, off) in offsets.iter().enumerate() {
            let t = i as i64 * load.step_ms;
            if let Some(st) = off.map(|o| t + o).filter(|st| *st != 0) {
                pts.push((t, st));
            }
        }
    }
    out
}

/// Parses a whole script into commands.
pub fn parse_script(text: &str) -> Result<Vec<Command>, String> {
    let lines: Vec<(usize, String)> = text
        .lines()
        .enumerate()
        .map(|(i, l)| {
            let t = l.trim();
            (i + 1, if t.starts_with('#') { String::new() } else { t.to_string() })
        })
        .collect();
    let mut cmds = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let l = &lines[i].1;
        if l.is_empty() {
            i += 1;
            continue;
        }
        let first = l.split_whitespace().next().unwrap_or("").to_ascii_lowercase();
        let cmd = if first == "clear" {
            Command::Clear
        } else if first.starts_with("load") {
            Command::Load(parse_load(&lines, &mut i).map_err(|e| format!("line {}: {e}", lines[i].0))?)
        } else if first.starts_with("eval") {
            Command::Eval(Box::new(parse_eval(&lines, &mut i).map_err(|e| format!("line {}: {e}", lines[i].0))?))
        } else {
            return Err(format!("line {}: unknown command {l:?}", lines[i].0));
        };
        cmds.push(cmd);
        i += 1;
    }
    Ok(cmds)
}

/// Float points of a load block (histogram lines may hold some too): series labels ->
/// samples at `i * step`.
pub fn load_points(load: &Load) -> BTreeMap<Labels, Vec<(i64, f64)>> {
    let mut out: BTreeMap<Labels, Vec<(i64, f64)>> = BTreeMap::new();
    for s in &load.series {
        let pts = out.entry(s.labels.clone()).or_default();
        for (i, v) in s.values.iter().enumerate() {
            if let SeqValue::Float(f) = v {
                pts.push((i as i64 * load.step_ms, *f));
            }
        }
    }
    out
}
