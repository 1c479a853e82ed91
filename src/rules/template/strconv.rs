//! Go's `strconv`, as far as templates need it: number literals (`ParseInt`/`ParseUint` with
//! base 0, `ParseFloat`), `FormatFloat` (shortest, `e`, `f`, `g`), quoting (`Quote`) and
//! unquoting (`Unquote`, `UnquoteChar`).

/// Why a Go number parse failed (`strconv.ErrSyntax`, `strconv.ErrRange`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum NumError {
    /// `invalid syntax`
    Syntax,
    /// `value out of range`
    Range,
}

impl NumError {
    /// Go's wording.
    pub(super) fn text(self) -> &'static str {
        match self {
            NumError::Syntax => "invalid syntax",
            NumError::Range => "value out of range",
        }
    }
}

/// Go's `underscoreOK`: underscores only between digits, or right after a base prefix.
fn underscore_ok(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = usize::from(b.first().is_some_and(|&c| c == b'-' || c == b'+'));
    let mut saw = b'^';
    let mut hex = false;
    if b.len() >= i + 2 && b[i] == b'0' && matches!(b[i + 1] | 0x20, b'b' | b'o' | b'x') {
        hex = b[i + 1] | 0x20 == b'x';
        i += 2;
        saw = b'0';
    }
    for &c in &b[i..] {
        if c.is_ascii_digit() || (hex && c.is_ascii_hexdigit()) {
            saw = b'0';
        } else if c == b'_' {
            if saw != b'0' {
                return false;
            }
            saw = b'_';
        } else {
            if saw == b'_' {
                return false;
            }
            saw = b'!';
        }
    }
    saw != b'_'
}

/// `strconv.ParseUint(s, 0, 64)`: base prefixes `0x`, `0o`, `0b` and `0` (octal), underscores.
pub(super) fn parse_uint(s0: &str) -> Result<u64, NumError> {
    let mut s = s0.as_bytes();
    if s.is_empty() {
        return Err(NumError::Syntax);
    }
    let mut base = 10u64;
    if s[0] == b'0' {
        if s.len() >= 3 && matches!(s[1] | 0x20, b'b' | b'o' | b'x') {
            base = match s[1] | 0x20 {
                b'b' => 2,
                b'o' => 8,
                _ => 16,
            };
            s = &s[2..];
        } else {
            base = 8;
            s = &s[1..];
        }
    }
    let mut n: u64 = 0;
    let mut underscores = false;
    for &c in s {
        let d = match c {
            b'_' => {
                underscores = true;
                continue;
            }
            b'0'..=b'9' => u64::from(c - b'0'),
            b'a'..=b'z' => u64::from(c - b'a') + 10,
            b'A'..=b'Z' => u64::from(c - b'A') + 10,
            _ => return Err(NumError::Syntax),
        };
        if d >= base {
            return Err(NumError::Syntax);
        }
        n = n.checked_mul(base).and_then(|n| n.checked_add(d)).ok_or(NumError::Range)?;
    }
    if underscores && !underscore_ok(s0) {
        return Err(NumError::Syntax);
    }
    Ok(n)
}

/// `strconv.ParseInt(s, 0, 64)`.
pub(super) fn parse_int(s: &str) -> Result<i64, NumError> {
    let (neg, rest) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let u = parse_uint(rest)?;
    if neg {
        if u > 1 << 63 {
            return Err(NumError::Range);
        }
        Ok((u as i64).wrapping_neg())
    } else {
        i64::try_from(u).map_err(|_| NumError::Range)
    }
}

/// `strconv.ParseFloat(s, 64)`: decimal and hexadecimal (`0x1.8p3`) forms, `Inf`, `Infinity`
/// and `NaN` in any case. A finite number too large is `±Inf` with [`NumError::Range`].
pub(super) fn parse_float(s: &str) -> Result<f64, NumError> {
    if let Some(v) = special_float(s) {
        return Ok(v);
    }
    let b = s.as_bytes();
    let (neg, body) = match b.first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let bb = body.as_bytes();
    let v = if bb.len() > 2 && bb[0] == b'0' && bb[1] | 0x20 == b'x' {
        parse_hex_float(&body[2..])?
    } else {
        if body.contains('_') {
            return Err(NumError::Syntax);
        }
        check_decimal_syntax(bb)?;
        body.parse::<f64>().map_err(|_| NumError::Syntax)?
    };
    if v.is_infinite() {
        return Err(NumError::Range);
    }
    Ok(if neg { -v } else { v })
}

/// `[0-9]* [. [0-9]*] [e [+-] [0-9]+]` with at least one mantissa digit.
fn check_decimal_syntax(b: &[u8]) -> Result<(), NumError> {
    let mut i = 0;
    let mut digits = 0;
    while i < b.len() && b[i].is_ascii_digit() {
        i += 1;
        digits += 1;
    }
    if i < b.len() && b[i] == b'.' {
        i += 1;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
            digits += 1;
        }
    }
    if digits == 0 {
        return Err(NumError::Syntax);
    }
    if i < b.len() && b[i] | 0x20 == b'e' {
        i += 1;
        if i < b.len() && (b[i] == b'+' || b[i] == b'-') {
            i += 1;
        }
        let start = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        if i == start {
            return Err(NumError::Syntax);
        }
    }
    if i == b.len() {
        Ok(())
    } else {
        Err(NumError::Syntax)
    }
}

/// The digits after `0x`: hex mantissa with an optional point, then a mandatory `p` exponent.
fn parse_hex_float(s: &str) -> Result<f64, NumError> {
    if s.contains('_') && !underscore_ok(&format!("0x{s}")) {
        return Err(NumError::Syntax);
    }
    let s = s.replace('_', "");
    let (mant, exp) = s.split_once(['p', 'P']).ok_or(NumError::Syntax)?;
    let exp: i32 = match exp.parse::<i64>() {
        Ok(e) => e.clamp(-10_000, 10_000) as i32,
        Err(_) if !exp.is_empty() && exp.trim_start_matches(['+', '-']).bytes().all(|c| c.is_ascii_digit()) => {
            if exp.starts_with('-') {
                -10_000
            } else {
                10_000
            }
        }
        Err(_) => return Err(NumError::Syntax),
    };
    let mut value = 0f64;
    let mut scale = 0i32;
    let mut seen_point = false;
    let mut digits = 0;
    for c in mant.chars() {
        if c == '.' && !seen_point {
            seen_point = true;
            continue;
        }
        let d = c.to_digit(16).ok_or(NumError::Syntax)?;
        digits += 1;
        value = value * 16.0 + f64::from(d);
        if seen_point {
            scale -= 4;
        }
    }
    if digits == 0 {
        return Err(NumError::Syntax);
    }
    Ok(value * 2f64.powi(exp.saturating_add(scale)))
}

/// `Inf`, `+Inf`, `-Infinity`, `NaN` (no sign), in any case.
fn special_float(s: &str) -> Option<f64> {
    let (sign, rest) = match s.as_bytes().first() {
        Some(b'+') => (1.0, &s[1..]),
        Some(b'-') => (-1.0, &s[1..]),
        _ => (0.0, s),
    };
    if rest.eq_ignore_ascii_case("inf") || rest.eq_ignore_ascii_case("infinity") {
        return Some(if sign < 0.0 { f64::NEG_INFINITY } else { f64::INFINITY });
    }
    (sign == 0.0 && rest.eq_ignore_ascii_case("nan")).then_some(f64::NAN)
}

/// One unquoted unit: a character, or a single byte (`\xff`, `\377`) in a double-quoted string.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Unquoted {
    /// A character.
    Char(char),
    /// A raw byte value.
    Byte(u8),
}

/// `strconv.UnquoteChar(s, quote)`: the first character or escape of `s` and the rest.
pub(super) fn unquote_char(s: &str, quote: char) -> Option<(Unquoted, &str)> {
    let mut chars = s.chars();
    let c = chars.next()?;
    if c == quote && (quote == '\'' || quote == '"') {
        return None;
    }
    if c != '\\' {
        return Some((Unquoted::Char(c), chars.as_str()));
    }
    let e = chars.next()?;
    let rest = chars.as_str();
    let simple = |v: char| Some((Unquoted::Char(v), rest));
    match e {
        'a' => simple('\u{7}'),
        'b' => simple('\u{8}'),
        'f' => simple('\u{c}'),
        'n' => simple('\n'),
        'r' => simple('\r'),
        't' => simple('\t'),
        'v' => simple('\u{b}'),
        '\\' => simple('\\'),
        '\'' | '"' if e == quote => simple(e),
        'x' | 'u' | 'U' => {
            let n = match e {
                'x' => 2,
                'u' => 4,
                _ => 8,
            };
            let hex = rest.get(..n)?;
            if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                return None;
            }
            let v = u32::from_str_radix(hex, 16).ok()?;
            let rest = &rest[n..];
            if e == 'x' {
                return Some((Unquoted::Byte(v as u8), rest));
            }
            Some((Unquoted::Char(char::from_u32(v)?), rest))
        }
        '0'..='7' => {
            let more = rest.get(..2)?;
            if !more.bytes().all(|b| (b'0'..=b'7').contains(&b)) {
                return None;
            }
            let v = (e as u32 - '0' as u32) * 64 + u32::from_str_radix(more, 8).ok()?;
            let byte = u8::try_from(v).ok()?;
            Some((Unquoted::Byte(byte), &rest[2..]))
        }
        _ => None,
    }
}

/// `strconv.Unquote` of a double-quoted or back-quoted literal (quotes included). Bytes that are
/// not UTF-8 (`"\xff"`) become U+FFFD.
pub(super) fn unquote(s: &str) -> Option<String> {
    let quote = s.chars().next().filter(|&q| q == '"' || q == '`')?;
    if s.len() < 2 || !s.ends_with(quote) {
        return None;
    }
    let body = &s[1..s.len() - 1];
    match quote {
        '`' => (!body.contains('`')).then(|| body.replace('\r', "")),
        _ => {
            if body.contains('\n') {
                return None;
            }
            let mut out = Vec::with_capacity(body.len());
            let mut rest = body;
            while !rest.is_empty() {
                let (u, r) = unquote_char(rest, '"')?;
                match u {
                    Unquoted::Char(c) => out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
                    Unquoted::Byte(b) => out.push(b),
                }
                rest = r;
            }
            Some(String::from_utf8_lossy(&out).into_owned())
        }
    }
}

/// An approximation of Go's `unicode.IsPrint`: letters, marks, numbers, punctuation, symbols and
/// the ASCII space; not control, format, other space or private-use characters.
pub(super) fn is_print(c: char) -> bool {
    if c == ' ' {
        return true;
    }
    if c.is_control() || c.is_whitespace() {
        return false;
    }
    !matches!(c as u32,
        0xAD | 0x600..=0x605 | 0x61C | 0x6DD | 0x70F | 0x180E | 0x200B..=0x200F | 0x202A..=0x202E
        | 0x2060..=0x206F | 0xFEFF | 0xFFF9..=0xFFFB | 0xE000..=0xF8FF | 0xE0000..=0xE007F
        | 0xF0000..=0x10FFFF)
}

/// `strconv.Quote` (or `QuoteToASCII` when `ascii`), also `QuoteRune` when `quote` is `'`.
pub(super) fn quote_with(s: &str, quote: char, ascii: bool) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push(quote);
    for c in s.chars() {
        if c == quote || c == '\\' {
            out.push('\\');
            out.push(c);
            continue;
        }
        if is_print(c) && (!ascii || c.is_ascii()) {
            out.push(c);
            continue;
        }
        match c {
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => out.push_str(&format!("\\x{:02x}", c as u32)),
            c if (c as u32) < 0x10000 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push_str(&format!("\\U{:08x}", c as u32)),
        }
    }
    out.push(quote);
    out
}

/// `strconv.Quote`.
pub(super) fn quote(s: &str) -> String {
    quote_with(s, '"', false)
}

/// Go's `%#U` of a rune: `U+0041 'A'`, or `U+00A0` for one that does not print.
pub(super) fn unicode_sharp(c: char) -> String {
    if is_print(c) {
        format!("U+{:04X} '{c}'", c as u32)
    } else {
        format!("U+{:04X}", c as u32)
    }
}

/// `strconv.FormatFloat(v, fmt, prec, 64)` for `fmt` in `e E f g G`, `prec` `None` for the
/// shortest representation that reads back as `v`.
pub(super) fn format_float(v: f64, fmt: char, prec: Option<usize>) -> String {
    if v.is_nan() {
        return "NaN".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "+Inf" } else { "-Inf" }.into();
    }
    let mut out = String::new();
    if v.is_sign_negative() {
        out.push('-');
    }
    let a = v.abs();
    match fmt {
        'f' => match prec {
            Some(p) => out.push_str(&format!("{a:.p$}")),
            None => {
                let (d, dp) = shortest_digits(a);
                let p = (d.len() as i64 - dp).max(0) as usize;
                fmt_f(&mut out, &d, dp, p);
            }
        },
        'e' | 'E' => {
            let (d, dp) = match prec {
                Some(p) => fixed_digits(a, p + 1),
                None => shortest_digits(a),
            };
            let p = prec.unwrap_or(d.len().saturating_sub(1));
            fmt_e(&mut out, &d, dp, p, fmt);
        }
        _ => {
            let upper = fmt == 'G';
            let (d, dp, mut p, shortest) = match prec {
                Some(p) => {
                    let p = p.max(1);
                    let (d, dp) = fixed_digits(a, p);
                    (d, dp, p, false)
                }
                None => {
                    let (d, dp) = shortest_digits(a);
                    let n = d.len();
                    (d, dp, n, true)
                }
            };
            let nd = d.len();
            let mut eprec = p;
            if eprec > nd && nd as i64 >= dp {
                eprec = nd;
            }
            if shortest {
                eprec = 6;
            }
            let exp = dp - 1;
            if exp < -4 || exp >= eprec as i64 {
                if p > nd {
                    p = nd;
                }
                fmt_e(&mut out, &d, dp, p.saturating_sub(1), if upper { 'E' } else { 'e' });
            } else {
                if p as i64 > dp {
                    p = nd;
                }
                fmt_f(&mut out, &d, dp, (p as i64 - dp).max(0) as usize);
            }
        }
    }
    out
}

/// Digits (no trailing zeros) and decimal point position of `a` (≥ 0): `a = 0.d × 10^dp`.
fn split_exp(s: &str) -> (Vec<u8>, i64) {
    let (mant, exp) = s.split_once('e').unwrap_or((s, "0"));
    let mut d: Vec<u8> = mant.bytes().filter(u8::is_ascii_digit).collect();
    while d.last() == Some(&b'0') {
        d.pop();
    }
    if d.is_empty() {
        return (d, 0);
    }
    (d, exp.parse::<i64>().unwrap_or(0) + 1)
}

fn shortest_digits(a: f64) -> (Vec<u8>, i64) {
    split_exp(&format!("{a:e}"))
}

fn fixed_digits(a: f64, n: usize) -> (Vec<u8>, i64) {
    split_exp(&format!("{a:.prec$e}", prec = n.saturating_sub(1)))
}

fn fmt_e(out: &mut String, d: &[u8], dp: i64, prec: usize, e: char) {
    out.push(d.first().map_or('0', |&c| c as char));
    if prec > 0 {
        out.push('.');
        let m = d.len().min(prec + 1);
        for &c in d.get(1..m).unwrap_or(&[]) {
            out.push(c as char);
        }
        for _ in m.max(1)..=prec {
            out.push('0');
        }
    }
    out.push(e);
    let mut exp = if d.is_empty() { 0 } else { dp - 1 };
    if exp < 0 {
        out.push('-');
        exp = -exp;
    } else {
        out.push('+');
    }
    if exp < 10 {
        out.push('0');
    }
    out.push_str(&exp.to_string());
}

fn fmt_f(out: &mut String, d: &[u8], dp: i64, prec: usize) {
    if dp > 0 {
        let m = d.len().min(dp as usize);
        out.extend(d[..m].iter().map(|&c| c as char));
        for _ in m..dp as usize {
            out.push('0');
        }
    } else {
        out.push('0');
    }
    if prec > 0 {
        out.push('.');
        for i in 1..=prec as i64 {
            let j = dp + i - 1;
            out.push(if j >= 0 && (j as usize) < d.len() { d[j as usize] as char } else { '0' });
        }
    }
}
