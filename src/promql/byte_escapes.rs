//! `\xNN` escapes in string literals, which Prometheus reads as bytes (as Go does): `"a\xc5z"`
//! is the bytes `a`, 0xC5, `z`, not valid UTF-8, and `"\xc3\x85"` is `Å`. promql-parser reads
//! `\xNN` as the character U+00NN instead, so before parsing, [`mark`] rewrites each run of
//! such escapes (0x80 and above) in a string literal: bytes that form UTF-8 become their
//! characters, and every other byte a placeholder, U+F0000 plus the byte (a private-use
//! character no label name has), which [`quote`] prints back as `\xNN` in messages, as Go's
//! `%q` prints the byte.

use std::borrow::Cow;
use std::fmt::Write as _;

/// The first placeholder: the byte `b` is `PLACEHOLDER + b`.
const PLACEHOLDER: u32 = 0xF_0000;

/// `query` with the `\xNN` runs of its string literals rewritten (see the module
/// documentation); borrowed when it has none.
pub fn mark(query: &str) -> Cow<'_, str> {
    if !query.contains("\\x") {
        return Cow::Borrowed(query);
    }
    let mut out = String::with_capacity(query.len());
    let mut quote: Option<char> = None;
    let mut rest = query;
    while let Some(c) = rest.chars().next() {
        match quote {
            None => {
                if c == '#' {
                    // A comment runs to the end of the line; quotes in it open nothing.
                    let end = rest.find('\n').unwrap_or(rest.len());
                    out.push_str(rest.get(..end).unwrap_or(rest));
                    rest = rest.get(end..).unwrap_or("");
                    continue;
                }
                if matches!(c, '"' | '\'' | '`') {
                    quote = Some(c);
                }
            }
            Some(q) if c == q => quote = None,
            Some('`') => {}
            Some(_) if c == '\\' => {
                let (bytes, tail) = high_bytes(rest);
                if bytes.is_empty() {
                    // Any other escape: copy it whole, so an escaped quote does not close.
                    let len = rest.chars().take(2).map(char::len_utf8).sum();
                    out.push_str(rest.get(..len).unwrap_or(rest));
                    rest = rest.get(len..).unwrap_or("");
                } else {
                    push_bytes(&mut out, &bytes);
                    rest = tail;
                }
                continue;
            }
            Some(_) => {}
        }
        out.push(c);
        rest = rest.get(c.len_utf8()..).unwrap_or("");
    }
    Cow::Owned(out)
}

/// The bytes of the run of `\xNN` escapes of 0x80 and above at the start of `s`, and the rest.
fn high_bytes(mut s: &str) -> (Vec<u8>, &str) {
    let mut bytes = Vec::new();
    while let Some(b) = s
        .strip_prefix("\\x")
        .and_then(|t| t.get(..2))
        .and_then(|hex| u8::from_str_radix(hex, 16).ok())
        .filter(|&b| b >= 0x80)
    {
        bytes.push(b);
        s = s.get(4..).unwrap_or("");
    }
    (bytes, s)
}

/// Appends `bytes` to a string literal: UTF-8 as characters, other bytes as `\U` escapes of
/// their placeholders.
fn push_bytes(out: &mut String, bytes: &[u8]) {
    for chunk in bytes.utf8_chunks() {
        out.push_str(chunk.valid());
        for &b in chunk.invalid() {
            let _ = write!(out, "\\U{:08X}", PLACEHOLDER + u32::from(b));
        }
    }
}

/// Whether `s` holds a placeholder: a string literal whose bytes are not UTF-8.
pub fn holds_raw_bytes(s: &str) -> bool {
    s.chars().any(|c| placeholder_byte(c).is_some())
}

/// Whether `name` is a label name a PromQL function may take or make: any non-empty UTF-8, as
/// Prometheus 3's `model.UTF8Validation.IsValidLabelName` (a literal whose bytes are not UTF-8
/// is not), and without the byte 0x00, which the store cannot hold in a name.
pub fn is_utf8_label_name(name: &str) -> bool {
    crate::labels::is_storable_label_name(name) && !holds_raw_bytes(name)
}

fn placeholder_byte(c: char) -> Option<u32> {
    u32::from(c).checked_sub(PLACEHOLDER).filter(|b| *b <= 0xFF)
}

/// `s` quoted for a message as Go's `%q` quotes the bytes it stands for: placeholders as
/// `\xNN`, the rest as Rust's `{:?}` does.
pub fn quote(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match placeholder_byte(c) {
            Some(b) => {
                let _ = write!(out, "\\x{b:02x}");
            }
            None => out.extend(c.escape_debug()),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_bytes_become_placeholders_and_quote_back() {
        let marked = mark(r#"count_values("a\xc5z", version)"#);
        assert_eq!(marked, r#"count_values("a\U000F00C5z", version)"#);
        assert_eq!(quote("a\u{F00C5}z"), r#""a\xc5z""#);
        assert!(holds_raw_bytes("a\u{F00C5}z") && !holds_raw_bytes("aÅz"));
        assert_eq!(quote("plain \"q\""), r#""plain \"q\"""#);
    }

    #[test]
    fn utf8_byte_runs_become_characters() {
        assert_eq!(mark(r#"m{a="\xc3\x85\x41"}"#), r#"m{a="Å\x41"}"#);
        assert_eq!(
            mark(r#"label_replace(m, "\xff", "", "src", "(.*)")"#),
            r#"label_replace(m, "\U000F00FF", "", "src", "(.*)")"#
        );
    }

    #[test]
    fn only_string_literals_are_rewritten() {
        for q in [r##"m # "\xc5""##, r#"m{a=`\xc5`}"#, r#"m{a="\\xc5"}"#, "sum(m)"] {
            assert_eq!(mark(q), q);
        }
        assert!(matches!(mark("sum(m)"), Cow::Borrowed(_)));
    }
}
