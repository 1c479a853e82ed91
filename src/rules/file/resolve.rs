//! go-yaml v3's scalar resolution (`resolve.go`): the tag of a plain scalar (`5` is `!!int`,
//! `~` is `!!null`, `2001-12-14` is `!!timestamp`), and what an explicitly tagged scalar
//! decodes to (`!!int abc` is an error).

/// Null (`~`, `null`, empty).
pub(super) const NULL: &str = "!!null";
/// `true`, `false` in three spellings each.
pub(super) const BOOL: &str = "!!bool";
/// A string.
pub(super) const STR: &str = "!!str";
/// An integer.
pub(super) const INT: &str = "!!int";
/// A float.
pub(super) const FLOAT: &str = "!!float";
/// A date or date and time.
pub(super) const TIMESTAMP: &str = "!!timestamp";
/// A sequence.
pub(super) const SEQ: &str = "!!seq";
/// A mapping.
pub(super) const MAP: &str = "!!map";
/// Base64 bytes.
pub(super) const BINARY: &str = "!!binary";
/// The merge key `<<`.
pub(super) const MERGE: &str = "!!merge";

/// The prefix of the YAML core tags in long form.
const LONG_PREFIX: &str = "tag:yaml.org,2002:";

/// A scalar's value as go-yaml resolves it (only what decoding into rule files needs).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Resolved {
    /// Null.
    Null,
    /// A boolean.
    Bool,
    /// An integer that fits an `int64`.
    Int(i64),
    /// An integer above `int64`'s range.
    Uint(u64),
    /// A float.
    Float(f64),
    /// A timestamp.
    Timestamp,
    /// Text (also the merge key, and anything under a tag go-yaml does not resolve).
    Str,
}

/// `tag:yaml.org,2002:int` as `!!int`; other tags unchanged.
pub(super) fn short_tag(tag: &str) -> String {
    match tag.strip_prefix(LONG_PREFIX) {
        Some(rest) => format!("!!{rest}"),
        None => tag.to_owned(),
    }
}

/// The tag go-yaml gives a plain, untagged scalar.
pub(super) fn plain_tag(text: &str) -> &'static str {
    resolve_text("", text).0
}

/// go-yaml's `resolve(tag, in)`: the tag and value of `text` under the explicit `tag` (short
/// form, or empty).
///
/// # Errors
/// go-yaml's failure when `text` is not of the tag's kind:
/// ``yaml: cannot decode !!str `abc` as a !!int``.
pub(super) fn resolve(tag: &str, text: &str) -> Result<(String, Resolved), String> {
    if !matches!(tag, "" | STR | BOOL | INT | FLOAT | NULL | TIMESTAMP) {
        return Ok((tag.to_owned(), Resolved::Str));
    }
    let (rtag, value) = resolve_text(tag, text);
    match (tag, value) {
        ("" | STR | BINARY, _) => Ok((rtag.to_owned(), value)),
        (t, _) if t == rtag => Ok((rtag.to_owned(), value)),
        (FLOAT, Resolved::Int(i)) => Ok((FLOAT.to_owned(), Resolved::Float(i as f64))),
        _ => Err(format!("yaml: cannot decode {rtag} `{text}` as a {tag}")),
    }
}

/// The resolution proper, before the check against the explicit tag.
fn resolve_text(tag: &str, text: &str) -> (&'static str, Resolved) {
    let hint = match text.as_bytes().first() {
        None => b'N',
        Some(b'+' | b'-') => b'S',
        Some(b'0'..=b'9') => b'D',
        Some(b'y' | b'Y' | b'n' | b'N' | b't' | b'T' | b'f' | b'F' | b'o' | b'O' | b'~') => b'M',
        Some(b'.') => b'.',
        Some(_) => 0,
    };
    if hint == 0 || tag == STR || tag == BINARY {
        return (STR, Resolved::Str);
    }
    if let Some(known) = known_word(text) {
        return known;
    }
    match hint {
        b'.' => {
            if let Some(f) = go_parse_float(text) {
                return (FLOAT, Resolved::Float(f));
            }
        }
        b'D' | b'S' => {
            if (tag.is_empty() || tag == TIMESTAMP) && is_timestamp(text) {
                return (TIMESTAMP, Resolved::Timestamp);
            }
            let plain = text.replace('_', "");
            if let Some(i) = go_parse_int(&plain) {
                return (INT, Resolved::Int(i));
            }
            if let Some(u) = go_parse_uint(&plain) {
                return (INT, Resolved::Uint(u));
            }
            if is_yaml_style_float(&plain) {
                if let Some(f) = go_parse_float(&plain) {
                    return (FLOAT, Resolved::Float(f));
                }
            }
        }
        _ => {}
    }
    (STR, Resolved::Str)
}

/// The words go-yaml resolves by table: booleans, nulls, infinities, NaN (its `<<` entry is
/// never reached: no word starting with `<` is looked up).
fn known_word(text: &str) -> Option<(&'static str, Resolved)> {
    Some(match text {
        "true" | "True" | "TRUE" | "false" | "False" | "FALSE" => (BOOL, Resolved::Bool),
        "" | "~" | "null" | "Null" | "NULL" => (NULL, Resolved::Null),
        ".nan" | ".NaN" | ".NAN" => (FLOAT, Resolved::Float(f64::NAN)),
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" => (FLOAT, Resolved::Float(f64::INFINITY)),
        "-.inf" | "-.Inf" | "-.INF" => (FLOAT, Resolved::Float(f64::NEG_INFINITY)),
        _ => return None,
    })
}

/// Go's `strconv.ParseInt(s, 0, 64)`.
fn go_parse_int(s: &str) -> Option<i64> {
    let (negative, digits) = match s.as_bytes().first() {
        Some(b'-') => (true, s.get(1..)?),
        Some(b'+') => (false, s.get(1..)?),
        _ => (false, s),
    };
    let magnitude = go_parse_uint(digits)?;
    if negative {
        0i64.checked_sub_unsigned(magnitude)
    } else {
        i64::try_from(magnitude).ok()
    }
}

/// Go's `strconv.ParseUint(s, 0, 64)`: decimal, or `0x`, `0o`, `0b` and a leading `0` (octal).
fn go_parse_uint(s: &str) -> Option<u64> {
    let bytes = s.as_bytes();
    let (radix, digits) = match bytes {
        [] => return None,
        [b'0', p, _, ..] if p.eq_ignore_ascii_case(&b'b') => (2, s.get(2..)?),
        [b'0', p, _, ..] if p.eq_ignore_ascii_case(&b'o') => (8, s.get(2..)?),
        [b'0', p, _, ..] if p.eq_ignore_ascii_case(&b'x') => (16, s.get(2..)?),
        [b'0', ..] => (8, s.get(1..)?),
        _ => (10, s),
    };
    if digits.is_empty() {
        return Some(0);
    }
    if !digits.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return None;
    }
    u64::from_str_radix(digits, radix).ok()
}

/// Go's `strconv.ParseFloat(s, 64)` on the decimal forms go-yaml passes it: out of range is an
/// error.
fn go_parse_float(s: &str) -> Option<f64> {
    let decimal = s.bytes().all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'+' | b'-'));
    let f: f64 = s.parse().ok().filter(|_| decimal)?;
    f.is_finite().then_some(f)
}

/// go-yaml's `yamlStyleFloat`: `^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$`.
fn is_yaml_style_float(s: &str) -> bool {
    let digits = |t: &str| t.bytes().take_while(u8::is_ascii_digit).count();
    let rest = s.strip_prefix(['-', '+']).unwrap_or(s);
    let rest = if let Some(frac) = rest.strip_prefix('.') {
        let n = digits(frac);
        if n == 0 {
            return false;
        }
        &frac[n..]
    } else {
        let n = digits(rest);
        if n == 0 {
            return false;
        }
        let after = &rest[n..];
        match after.strip_prefix('.') {
            Some(frac) => &frac[digits(frac)..],
            None => after,
        }
    };
    match rest.strip_prefix(['e', 'E']) {
        None => rest.is_empty(),
        Some(exp) => {
            let exp = exp.strip_prefix(['-', '+']).unwrap_or(exp);
            !exp.is_empty() && digits(exp) == exp.len()
        }
    }
}

/// go-yaml's `parseTimestamp`: a date (`2001-12-14`, months and days of one or two digits),
/// alone or with a time (`T` or `t`, then a zone `Z` or `±hh:mm`; or a space and no zone).
fn is_timestamp(s: &str) -> bool {
    let Some((date, time)) = parse_date(s) else { return false };
    if !date {
        return false;
    }
    match time.as_bytes().first() {
        None => true,
        Some(b'T' | b't') => matches!(parse_clock(&time[1..]), Some(zone) if is_zone(zone)),
        Some(b' ') => parse_clock(&time[1..]) == Some(""),
        Some(_) => false,
    }
}

/// A valid `YYYY-M-D` at the start of `s`, and what follows it.
fn parse_date(s: &str) -> Option<(bool, &str)> {
    let year: i64 = s.get(..4)?.parse().ok().filter(|_| s.as_bytes()[..4].iter().all(u8::is_ascii_digit))?;
    let rest = s.get(4..)?.strip_prefix('-')?;
    let (month, rest) = one_or_two_digits(rest)?;
    let rest = rest.strip_prefix('-')?;
    let (day, rest) = one_or_two_digits(rest)?;
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let days = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return Some((false, rest)),
    };
    Some(((1..=days).contains(&day), rest))
}

/// `H:M:S` with optional fraction (each of one or two digits, in range); the rest.
fn parse_clock(s: &str) -> Option<&str> {
    let (hour, rest) = one_or_two_digits(s)?;
    let (minute, rest) = one_or_two_digits(rest.strip_prefix(':')?)?;
    let (second, mut rest) = one_or_two_digits(rest.strip_prefix(':')?)?;
    if hour >= 24 || minute >= 60 || second >= 60 {
        return None;
    }
    if let Some(frac) = rest.strip_prefix(['.', ',']) {
        let n = frac.bytes().take_while(u8::is_ascii_digit).count();
        if n > 0 {
            rest = &frac[n..];
        }
    }
    Some(rest)
}

/// `Z`, or `±hh:mm`, and nothing after.
fn is_zone(s: &str) -> bool {
    if s == "Z" {
        return true;
    }
    let b = s.as_bytes();
    b.len() == 6
        && matches!(b[0], b'+' | b'-')
        && b[1].is_ascii_digit()
        && b[2].is_ascii_digit()
        && b[3] == b':'
        && b[4].is_ascii_digit()
        && b[5].is_ascii_digit()
}

/// Go's `getnum(s, false)`: one digit, or two when the second is a digit too.
fn one_or_two_digits(s: &str) -> Option<(u32, &str)> {
    let n = s.bytes().take(2).take_while(u8::is_ascii_digit).count();
    if n == 0 {
        return None;
    }
    Some((s[..n].parse().ok()?, &s[n..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_scalars_resolve_as_go_yaml_resolves_them() {
        let cases = [
            ("", NULL),
            ("~", NULL),
            ("Null", NULL),
            ("true", BOOL),
            ("yes", STR),
            ("5", INT),
            ("-0x1F", INT),
            ("0o17", INT),
            ("0b101", INT),
            ("1_000", INT),
            ("18446744073709551615", INT),
            ("08", FLOAT),
            ("1.5", FLOAT),
            (".5", FLOAT),
            ("1e3", FLOAT),
            ("1e400", STR),
            (".inf", FLOAT),
            ("2001-12-14", TIMESTAMP),
            ("2001-12-14t21:59:43.10-05:00", TIMESTAMP),
            ("2001-12-14 21:59:43.10", TIMESTAMP),
            ("2001-02-30", STR),
            ("5m", STR),
            // go-yaml resolves no word starting with `<`; its parser tags a plain `<<` itself.
            ("<<", STR),
            ("abc", STR),
        ];
        for (text, tag) in cases {
            assert_eq!(plain_tag(text), tag, "{text:?}");
        }
    }

    #[test]
    fn explicit_tags_are_checked() {
        assert_eq!(resolve(INT, "5"), Ok((INT.to_owned(), Resolved::Int(5))));
        assert_eq!(resolve(FLOAT, "5"), Ok((FLOAT.to_owned(), Resolved::Float(5.0))));
        assert_eq!(resolve(STR, "5"), Ok((STR.to_owned(), Resolved::Str)));
        assert_eq!(resolve("!local", "5"), Ok(("!local".to_owned(), Resolved::Str)));
        assert_eq!(resolve(INT, "abc"), Err("yaml: cannot decode !!str `abc` as a !!int".to_owned()));
        assert_eq!(resolve(NULL, "x"), Err("yaml: cannot decode !!str `x` as a !!null".to_owned()));
    }

    #[test]
    fn long_tags_are_shortened() {
        assert_eq!(short_tag("tag:yaml.org,2002:int"), "!!int");
        assert_eq!(short_tag("!local"), "!local");
    }
}
