//! The `anchored` and `smoothed` selector modifiers of Prometheus 3 ("extended range
//! selectors"), which the `promql-parser` crate does not parse.
//!
//! - `rate(m[5m] anchored)` (also `increase`, `delta`, `changes`, `resets`): the window also
//!   holds the last sample at or before its start (looked back up to the lookback delta), and
//!   `rate`/`increase`/`delta` take the difference between that anchor and the last sample,
//!   without extrapolation.
//! - `rate(m[5m] smoothed)` (also `increase`, `delta`): the values at both ends of the window are
//!   interpolated linearly between the samples around them (looked for up to the lookback delta
//!   beyond each end).
//! - `m smoothed` (an instant selector): the value at the evaluation time interpolated between
//!   the samples before and after it; the last one when none follows.
//!
//! Before the crate parses a query, [`mark`] removes each modifier and records it on the
//! selector it follows as a matcher of the reserved label [`MARKER`]; [`of`] reads it back from
//! the AST, and the engine leaves that matcher out of what it asks storage for. The computations
//! ([`rate`], [`anchored_from`], [`smoothed_value`], [`extend`]) are pure functions of a series'
//! samples.

use std::borrow::Cow;

use promql_parser::parser::VectorSelector;

use crate::sample::Sample;

/// The reserved label whose matcher carries a selector's modifier through the parser.
pub const MARKER: &str = "__saltdb_selector_modifier__";

/// A selector modifier.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Modifier {
    Anchored,
    Smoothed,
}

impl Modifier {
    fn name(self) -> &'static str {
        match self {
            Self::Anchored => "anchored",
            Self::Smoothed => "smoothed",
        }
    }

    fn parse(word: &str) -> Option<Self> {
        if word.eq_ignore_ascii_case("anchored") {
            Some(Self::Anchored)
        } else if word.eq_ignore_ascii_case("smoothed") {
            Some(Self::Smoothed)
        } else {
            None
        }
    }

    /// The functions a range selector with this modifier may be passed to, sorted.
    pub fn functions(self) -> &'static [&'static str] {
        match self {
            Self::Anchored => &["changes", "delta", "increase", "rate", "resets"],
            Self::Smoothed => &["delta", "increase", "rate"],
        }
    }

    /// Prometheus' error for a range selector with this modifier passed to function `f`, or
    /// `None` when `f` accepts it.
    pub fn refuses(self, f: &str) -> Option<String> {
        let allowed = self.functions();
        (!allowed.contains(&f))
            .then(|| format!("{} modifier can only be used with: {} - not with {f}", self.name(), allowed.join(", ")))
    }
}

/// The modifier recorded on `vs` by [`mark`].
pub fn of(vs: &VectorSelector) -> Option<Modifier> {
    let m = &vs.matchers;
    m.matchers
        .iter()
        .chain(m.or_matchers.iter().flatten())
        .find(|m| m.name == MARKER)
        .and_then(|m| Modifier::parse(&m.value))
}

/// Whether a parsed matcher is the [`MARKER`] (left out of storage selections).
pub fn is_marker(m: &promql_parser::label::Matcher) -> bool {
    m.name == MARKER
}

/// Words after which `anchored`/`smoothed` cannot be a modifier (it is then a metric name).
const KEYWORDS: [&str; 14] = [
    "and",
    "or",
    "unless",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "offset",
    "bool",
    "atan2",
    "start",
    "end",
];

/// The selector a modifier may apply to: where its marker goes, and what follows it so far.
#[derive(Clone, Copy)]
struct Selector {
    /// Byte offset of the end of its metric name (no matcher list yet), or of its `}`.
    at: usize,
    /// A matcher list `{...}` exists (the marker goes before its `}`).
    braces: bool,
    /// A subquery range `[a:b]` followed it.
    subquery: bool,
    modifier: Option<Modifier>,
}

/// Rewrites `query` so that each `anchored`/`smoothed` modifier becomes a [`MARKER`] matcher of
/// the selector it follows. Queries without the words are returned as they are.
///
/// # Errors
/// Prometheus' messages for a modifier on a subquery and for both modifiers on one selector.
pub fn mark(query: &str) -> Result<Cow<'_, str>, String> {
    let lower = query.to_ascii_lowercase();
    if !lower.contains("anchored") && !lower.contains("smoothed") {
        return Ok(Cow::Borrowed(query));
    }
    let b = query.as_bytes();
    let mut selector: Option<Selector> = None;
    // Whether the last token ends an operand a modifier may follow (`]`, `}`, `)`, a name, a
    // number or duration).
    let mut after_operand = false;
    // (position, bytes removed, text inserted), in position order.
    let mut edits: Vec<(usize, usize, String)> = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        match c {
            b'"' | b'\'' | b'`' => {
                i = skip_string(b, i, c);
                after_operand = false;
            }
            b'#' => i = b[i..].iter().position(|&c| c == b'\n').map_or(b.len(), |p| i + p),
            b'{' => {
                // A matcher list: of the metric name just read, or of a selector without one.
                let end = closing(b, i, b'}');
                selector = Some(Selector { at: end, braces: true, subquery: false, modifier: None });
                i = end.saturating_add(1);
                after_operand = true;
            }
            b'[' => {
                let end = closing(b, i, b']');
                if b.get(i..end).is_some_and(|inner| inner.contains(&b':')) {
                    if let Some(s) = selector.as_mut() {
                        s.subquery = true;
                    }
                }
                i = end.saturating_add(1);
                after_operand = true;
            }
            b')' => {
                i += 1;
                after_operand = true;
            }
            c if c.is_ascii_digit() || (c == b'.' && b.get(i + 1).is_some_and(u8::is_ascii_digit)) => {
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'.') {
                    i += 1;
                }
                after_operand = true;
            }
            c if c.is_ascii_alphabetic() || c == b'_' || c == b':' => {
                let start = i;
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] == b':') {
                    i += 1;
                }
                let word = &query[start..i];
                let next = b[i..].iter().find(|c| !c.is_ascii_whitespace()).copied();
                match (Modifier::parse(word), selector.as_mut()) {
                    (Some(m), Some(s)) if after_operand => {
                        if s.subquery {
                            return Err(format!("{} modifier is not supported for subqueries", m.name()));
                        }
                        if s.modifier.is_some_and(|had| had != m) {
                            return Err("anchored and smoothed modifiers cannot be used together".to_owned());
                        }
                        if s.modifier.is_none() {
                            edits.push(marker_edit(b, *s, m));
                        }
                        s.modifier = Some(m);
                        edits.push((start, i - start, String::new()));
                        // Further modifiers (`offset`, `@`) may follow.
                        after_operand = true;
                        continue;
                    }
                    _ => {}
                }
                let keyword = KEYWORDS.iter().any(|k| word.eq_ignore_ascii_case(k));
                if keyword || next == Some(b'(') {
                    after_operand = false;
                } else {
                    selector = Some(Selector { at: i, braces: false, subquery: false, modifier: None });
                    after_operand = true;
                }
            }
            c if c.is_ascii_whitespace() => i += 1,
            b'@' => {
                i += 1;
                after_operand = false;
            }
            _ => {
                i += 1;
                after_operand = false;
            }
        }
    }
    if edits.is_empty() {
        return Ok(Cow::Borrowed(query));
    }
    edits.sort_by_key(|e| e.0);
    let mut out = String::with_capacity(query.len() + edits.len() * (MARKER.len() + 16));
    let mut copied = 0;
    for (at, removed, text) in edits {
        out.push_str(&query[copied..at]);
        out.push_str(&text);
        copied = at + removed;
    }
    out.push_str(&query[copied..]);
    Ok(Cow::Owned(out))
}

/// The insertion of the marker matcher for `m` into selector `s`.
fn marker_edit(b: &[u8], s: Selector, m: Modifier) -> (usize, usize, String) {
    let matcher = format!("{MARKER}=\"{}\"", m.name());
    if !s.braces {
        return (s.at, 0, format!("{{{matcher}}}"));
    }
    // Before the `}`: after a comma unless the list is empty or already ends with one.
    let before = last_non_space(b, s.at);
    let sep =
        if before.checked_sub(1).and_then(|p| b.get(p)).is_some_and(|&c| c == b'{' || c == b',') { "" } else { "," };
    (s.at, 0, format!("{sep}{matcher}"))
}

/// The offset just past the last non-space byte before `i`.
pub(crate) fn last_non_space(b: &[u8], i: usize) -> usize {
    let mut j = i;
    while j > 0 && b[j - 1].is_ascii_whitespace() {
        j -= 1;
    }
    j
}

/// The offset of the `close` byte matching the opener at `open` (strings skipped), or the end.
pub(crate) fn closing(b: &[u8], open: usize, close: u8) -> usize {
    let mut i = open + 1;
    while i < b.len() {
        match b[i] {
            q @ (b'"' | b'\'' | b'`') => i = skip_string(b, i, q),
            c if c == close => return i,
            _ => i += 1,
        }
    }
    b.len()
}

/// The offset just past the string literal starting at `i` (quote `q`).
pub(crate) fn skip_string(b: &[u8], i: usize, q: u8) -> usize {
    let mut j = i + 1;
    while j < b.len() {
        match b[j] {
            b'\\' if q != b'`' => j += 2,
            c if c == q => return j + 1,
            _ => j += 1,
        }
    }
    b.len()
}

/// Linear interpolation at `t` between `a` and `b`; a counter that fell (a reset) is taken as
/// starting from zero after `a`.
fn interpolate(a: &Sample, b: &Sample, t: i64, is_counter: bool) -> f64 {
    let (y1, y2) = (a.value, b.value);
    let y1 = if is_counter && y2 < y1 { 0.0 } else { y1 };
    y1 + (y2 - y1) * (t - a.timestamp_ms) as f64 / (b.timestamp_ms - a.timestamp_ms) as f64
}

/// Indexes `(first, last)` of the samples bounding the window `(start, end]`: `first` is the
/// last sample at or before `start` (the first sample when none is), `last` the last sample,
/// or with `smoothed` the first at or after `end` (the last when none is). `s` is not empty.
fn bounding(s: &[Sample], start: i64, end: i64, smoothed: bool) -> (usize, usize) {
    let n = s.len() - 1;
    let first = s[..n].partition_point(|p| p.timestamp_ms <= start).saturating_sub(1);
    let last = if smoothed { s[..n].partition_point(|p| p.timestamp_ms < end) } else { n };
    (first, last)
}

/// The values at both ends of the window `(start, end]`, picked or interpolated; `None` when
/// no sample is after `start` (or, smoothed, none at or before `end`).
fn ends(s: &[Sample], start: i64, end: i64, smoothed: bool, is_counter: bool) -> Option<(usize, usize, f64, f64)> {
    if s.is_empty() {
        return None;
    }
    let (first, last) = bounding(s, start, end, smoothed);
    if s[last].timestamp_ms <= start || (smoothed && s[first].timestamp_ms > end) {
        return None;
    }
    let left = match s.get(first + 1) {
        Some(next) if smoothed && s[first].timestamp_ms < start => interpolate(&s[first], next, start, is_counter),
        _ => s[first].value,
    };
    let right = if smoothed && last > 0 && s[last].timestamp_ms > end {
        interpolate(&s[last - 1], &s[last], end, is_counter)
    } else {
        s[last].value
    };
    Some((first, last, left, right))
}

/// `rate`, `increase` (`is_counter`) or `delta` over the window `(start, end]` of an anchored or
/// smoothed selector (Prometheus' `extendedRate`): the difference of the values at the ends,
/// corrected for counter resets inside, per second of `end - start` when `is_rate`. `s` holds
/// the samples in `(start - lookback, end]` (smoothed: `end + lookback`), ascending, without
/// staleness markers.
pub fn rate(s: &[Sample], start: i64, end: i64, smoothed: bool, is_counter: bool, is_rate: bool) -> Option<f64> {
    let (mut first, mut last, left, right) = ends(s, start, end, smoothed, is_counter)?;
    let mut result = right - left;
    if is_counter {
        // The samples strictly inside the window: the ends are `left` and `right`.
        if s[first].timestamp_ms <= start {
            first += 1;
        }
        if s[last].timestamp_ms >= end {
            last = last.wrapping_sub(1);
        }
        let inside = if last == usize::MAX || first > last { &[][..] } else { &s[first..=last] };
        let mut prev = left;
        for p in inside {
            if p.value < prev {
                result += prev;
            }
            prev = p.value;
        }
        if right < prev {
            result += prev;
        }
    }
    if is_rate {
        result /= (end - start) as f64 / 1000.0;
    }
    Some(result)
}

/// Where `changes` and `resets` over an anchored window `(start, end]` begin in `s` (samples
/// in `(start - lookback, end]`): at the last sample at or before `start`, the anchor, if any.
/// `None` when no sample is after `start`.
pub fn anchored_from(s: &[Sample], start: i64) -> Option<usize> {
    let after = s.partition_point(|p| p.timestamp_ms <= start);
    (after < s.len()).then(|| after.saturating_sub(1))
}

/// The value of an instant `smoothed` selector at `t` from the samples in
/// `(t - lookback, t + lookback]` (ascending, no staleness markers): the sample at `t`, or the
/// interpolation between the samples around `t`, or the last one before `t` when none follows.
pub fn smoothed_value(s: &[Sample], t: i64) -> Option<f64> {
    let i = s.partition_point(|p| p.timestamp_ms < t);
    match (s.get(i), i.checked_sub(1).and_then(|j| s.get(j))) {
        (Some(at), _) if at.timestamp_ms == t => Some(at.value),
        (Some(next), Some(prev)) => Some(interpolate(prev, next, t, false)),
        (None, Some(prev)) => Some(prev.value),
        _ => None,
    }
}

/// An anchored or smoothed range selector's window as a range vector (Prometheus'
/// `extendFloats`): the value at `start` (picked or interpolated), the samples strictly inside
/// `(start, end)`, and the value at `end`. Empty when no sample is after `start`.
pub fn extend(s: &[Sample], start: i64, end: i64, smoothed: bool) -> Vec<Sample> {
    let Some((mut first, mut last, left, right)) = ends(s, start, end, smoothed, false) else { return Vec::new() };
    if s[first].timestamp_ms <= start {
        first += 1;
    }
    if s[last].timestamp_ms >= end {
        last = last.wrapping_sub(1);
    }
    let mut out = vec![Sample::new(start, left)];
    if last != usize::MAX && first <= last {
        out.extend_from_slice(&s[first..=last]);
    }
    out.push(Sample::new(end, right));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(q: &str) -> String {
        mark(q).unwrap().into_owned()
    }

    #[test]
    fn modifiers_become_marker_matchers() {
        let k = MARKER;
        assert_eq!(m("increase(metric[1m] anchored)"), format!("increase(metric{{{k}=\"anchored\"}}[1m] )"));
        assert_eq!(m(r#"rate(m{a="b"}[5m] smoothed)"#), format!("rate(m{{a=\"b\",{k}=\"smoothed\"}}[5m] )"));
        assert_eq!(m("rate({a=\"}\"}[5m] anchored)"), format!("rate({{a=\"}}\",{k}=\"anchored\"}}[5m] )"));
        assert_eq!(m("m{} smoothed"), format!("m{{{k}=\"smoothed\"}} "));
        assert_eq!(m("metric offset -100 smoothed + 0"), format!("metric{{{k}=\"smoothed\"}} offset -100  + 0"));
        assert_eq!(m("metric @ 100 smoothed"), format!("metric{{{k}=\"smoothed\"}} @ 100 "));
        // Not a modifier: a metric called so, or text in strings.
        for q in ["anchored", "sum(smoothed)", "a and anchored", r#"m{a="anchored"}"#, "rate(x[5m])"] {
            assert_eq!(m(q), q);
        }
    }

    #[test]
    fn misuse_gets_prometheus_errors() {
        assert_eq!(mark("m[5m:1m] anchored").unwrap_err(), "anchored modifier is not supported for subqueries");
        assert_eq!(
            mark("m[5m] anchored smoothed").unwrap_err(),
            "anchored and smoothed modifiers cannot be used together"
        );
        assert_eq!(
            Modifier::Smoothed.refuses("deriv").unwrap(),
            "smoothed modifier can only be used with: delta, increase, rate - not with deriv"
        );
        assert!(Modifier::Anchored.refuses("resets").is_none());
    }

    fn series(points: &[(i64, f64)]) -> Vec<Sample> {
        points.iter().map(|&(t, v)| Sample::new(t, v)).collect()
    }

    #[test]
    fn anchored_and_smoothed_increase() {
        // A counter of 1, 2, 3, ... every 10 s from t=0.
        let s = series(&(0..12).map(|i| (i * 10_000, (i + 1) as f64)).collect::<Vec<_>>());
        // Anchored at 65 s over 1 m: the anchor is the sample at 0 s (at or before 5 s): 7 - 1.
        let w: Vec<Sample> =
            s.iter().copied().filter(|p| p.timestamp_ms > 5_000 - 300_000 && p.timestamp_ms <= 65_000).collect();
        assert_eq!(rate(&w, 5_000, 65_000, false, true, false), Some(6.0));
        // Smoothed: the ends are interpolated at 5 s (1.5) and 65 s (7.5).
        let w: Vec<Sample> = s.iter().copied().filter(|p| p.timestamp_ms <= 65_000 + 300_000).collect();
        assert_eq!(rate(&w, 5_000, 65_000, true, true, false), Some(6.0));
        assert_eq!(rate(&w, 5_000, 65_000, true, true, true), Some(0.1));
        // A reset inside the window is corrected for.
        let r = series(&[(0, 5.0), (10_000, 6.0), (20_000, 1.0), (30_000, 2.0)]);
        assert_eq!(rate(&r, 0, 30_000, false, true, false), Some(3.0));
        assert_eq!(rate(&r, 0, 30_000, false, false, false), Some(-3.0));
        // Nothing after the start: no value.
        assert_eq!(rate(&r, 30_000, 40_000, false, true, false), None);
    }

    #[test]
    fn smoothed_instant_values_and_anchors() {
        let s = series(&[(0, 1.0), (10_000, 2.0), (20_000, 3.0)]);
        assert_eq!(smoothed_value(&s, 10_000), Some(2.0));
        assert_eq!(smoothed_value(&s, 15_000), Some(2.5));
        assert_eq!(smoothed_value(&s, 25_000), Some(3.0));
        assert_eq!(smoothed_value(&s[1..], 5_000), None);
        assert_eq!(anchored_from(&s, 10_000), Some(1));
        assert_eq!(anchored_from(&s, -1), Some(0));
        assert_eq!(anchored_from(&s, 20_000), None);
        assert_eq!(extend(&s, 5_000, 15_000, true), series(&[(5_000, 1.5), (10_000, 2.0), (15_000, 2.5)]));
        // Anchored windows end at `end`: the sample after it is not read.
        assert_eq!(extend(&s[..2], 5_000, 15_000, false), series(&[(5_000, 1.0), (10_000, 2.0), (15_000, 2.0)]));
    }
}
