//! Duration expressions of Prometheus 3 (`[26m+4m]`, `[2m*(10+5)]`, `[29s+1s:5s+5s]`,
//! `offset (20*7s)`, `offset -min_of(step(), 1s)`, `[step()]`, `[range()]`), which the
//! `promql-parser` crate does not parse, folded into plain millisecond durations before the
//! crate sees the query. This keeps one parser (the crate's AST for everything else) and adds
//! only the arithmetic the new syntax brings.
//!
//! Grammar of an expression (seconds; a bare number is seconds, a duration literal like
//! `1h30m` or `8000ms` its length): `+ -` < `* / %` < unary `- +` < `^` (right-associative)
//! < primary: number, duration, `( expr )`, `step()` (the range query's step, 0 for an instant
//! query), `range()` (end - start, 0 for an instant query), `min_of(a, b)`, `max_of(a, b)`.
//! Function names are matched case-insensitively, as Prometheus does.
//!
//! Where it applies:
//! - inside `[...]` (a range, or both sides of a subquery's `range:step`), when the content is
//!   not already a plain duration;
//! - after `offset`: a parenthesized expression, or one atom (optionally signed): a function
//!   call or a parenthesized expression. What follows the atom stays PromQL:
//!   `m offset step()*2` is `(m offset 5s) * 2`, as in Prometheus.
//!
//! String literals and comments are left alone. Anything else is returned unchanged, so the
//! parser's own errors stay what they were.

use std::borrow::Cow;

use super::extended::skip_string;

/// Folds the duration expressions of `query` for a query with this `step` and `range` (end -
/// start), in milliseconds.
///
/// # Errors
/// A message for an expression that cannot be computed (division by zero, bad syntax inside
/// one, a result out of range).
pub fn fold(query: &str, step_ms: i64, range_ms: i64) -> Result<Cow<'_, str>, String> {
    if !query.contains('[') && !contains_ci(query, "offset") {
        return Ok(Cow::Borrowed(query));
    }
    let ctx = Context { step_s: step_ms as f64 / 1000.0, range_s: range_ms as f64 / 1000.0 };
    let b = query.as_bytes();
    let mut out = String::with_capacity(query.len());
    let (mut i, mut copied) = (0, 0);
    let mut changed = false;
    while i < b.len() {
        match b[i] {
            q @ (b'"' | b'\'' | b'`') => i = skip_string(b, i, q),
            b'#' => i = b[i..].iter().position(|&c| c == b'\n').map_or(b.len(), |p| i + p),
            b'[' => {
                let Some(end) = b[i..].iter().position(|&c| c == b']').map(|p| i + p) else { break };
                let inner = &query[i + 1..end];
                if let Some(folded) = fold_brackets(inner, &ctx)? {
                    out.push_str(&query[copied..=i]);
                    out.push_str(&folded);
                    copied = end;
                    changed = true;
                }
                i = end + 1;
            }
            c if (c == b'o' || c == b'O') && keyword_at(b, i, "offset") => {
                let start = i + "offset".len();
                match offset_atom(query, start) {
                    Some(atom_end) => {
                        let text = &query[start..atom_end];
                        let secs = evaluate(text, &ctx)?;
                        let ms = millis(secs)?;
                        if ms == "0ms" {
                            // An offset of nothing (e.g. `range()` of an instant query): the
                            // parser refuses `offset 0ms`, and no offset means the same.
                            out.push_str(&query[copied..i]);
                        } else {
                            out.push_str(&query[copied..start]);
                            out.push(' ');
                            out.push_str(&ms);
                        }
                        copied = atom_end;
                        changed = true;
                        i = atom_end;
                    }
                    None => i = start,
                }
            }
            _ => i += 1,
        }
    }
    if !changed {
        return Ok(Cow::Borrowed(query));
    }
    out.push_str(&query[copied..]);
    Ok(Cow::Owned(out))
}

struct Context {
    step_s: f64,
    range_s: f64,
}

fn contains_ci(s: &str, word: &str) -> bool {
    s.to_ascii_lowercase().contains(word)
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c == b':'
}

/// True when the keyword `word` (any case) stands alone at `i`.
fn keyword_at(b: &[u8], i: usize, word: &str) -> bool {
    let end = i + word.len();
    end <= b.len()
        && b[i..end].eq_ignore_ascii_case(word.as_bytes())
        && (i == 0 || !is_ident(b[i - 1]))
        && b.get(end).is_none_or(|&c| !is_ident(c))
}

/// A range or subquery's content folded, or `None` when it is plain already.
fn fold_brackets(inner: &str, ctx: &Context) -> Result<Option<String>, String> {
    let (range, step) = match top_level_colon(inner) {
        Some(p) => (&inner[..p], Some(&inner[p + 1..])),
        None => (inner, None),
    };
    if is_plain(range) && step.is_none_or(is_plain) {
        return Ok(None);
    }
    let mut out = fold_part(range, ctx)?;
    if let Some(step) = step {
        out.push(':');
        out.push_str(&fold_part(step, ctx)?);
    }
    Ok(Some(out))
}

fn fold_part(part: &str, ctx: &Context) -> Result<String, String> {
    if is_plain(part) {
        Ok(part.to_owned())
    } else {
        millis(evaluate(part, ctx)?)
    }
}

/// A duration literal, a number or nothing: what the parser reads itself.
fn is_plain(s: &str) -> bool {
    let s = s.trim();
    s.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'.')
        && !["step", "range", "min_of", "max_of"].iter().any(|f| contains_ci(s, f))
}

fn top_level_colon(s: &str) -> Option<usize> {
    let mut depth = 0i32;
    for (i, c) in s.bytes().enumerate() {
        match c {
            b'(' => depth += 1,
            b')' => depth -= 1,
            b':' if depth == 0 => return Some(i),
            _ => {}
        }
    }
    None
}

/// The end of the duration atom after `offset` at `start`, when it needs folding: a
/// parenthesized expression or a function call, optionally signed.
fn offset_atom(q: &str, start: usize) -> Option<usize> {
    let b = q.as_bytes();
    let mut i = start;
    while b.get(i).is_some_and(u8::is_ascii_whitespace) {
        i += 1;
    }
    if matches!(b.get(i), Some(b'-' | b'+')) {
        i += 1;
        while b.get(i).is_some_and(u8::is_ascii_whitespace) {
            i += 1;
        }
    }
    let name_end = (i..b.len()).find(|&j| !is_ident(b[j])).unwrap_or(b.len());
    let name = q[i..name_end].to_ascii_lowercase();
    let open = if b.get(i) == Some(&b'(') {
        i
    } else if ["step", "range", "min_of", "max_of"].contains(&name.as_str()) && b.get(name_end) == Some(&b'(') {
        name_end
    } else {
        return None;
    };
    let mut depth = 0i32;
    for (j, &c) in b.iter().enumerate().skip(open) {
        match c {
            b'(' => depth += 1,
            b')' => {
                depth -= 1;
                if depth == 0 {
                    return Some(j + 1);
                }
            }
            _ => {}
        }
    }
    None
}

/// Seconds as a millisecond duration literal.
fn millis(secs: f64) -> Result<String, String> {
    let ms = (secs * 1000.0).round();
    if !ms.is_finite() || ms.abs() > 9.2e15 {
        return Err(format!("duration expression out of range: {secs}s"));
    }
    Ok(format!("{}ms", ms as i64))
}

/// Evaluates a duration expression, in seconds.
fn evaluate(text: &str, ctx: &Context) -> Result<f64, String> {
    let tokens = tokens(text)?;
    let mut p = Parser { tokens: &tokens, at: 0, ctx };
    let v = p.expr()?;
    if p.at != tokens.len() {
        return Err(format!("unexpected {:?} in duration expression {text:?}", tokens[p.at]));
    }
    Ok(v)
}

#[derive(Clone, Debug, PartialEq)]
enum Token {
    Num(f64),
    Op(u8),
    Open,
    Close,
    Comma,
    Func(String),
}

fn tokens(text: &str) -> Result<Vec<Token>, String> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        match c {
            _ if c.is_ascii_whitespace() => i += 1,
            b'+' | b'-' | b'*' | b'/' | b'%' | b'^' => {
                out.push(Token::Op(c));
                i += 1;
            }
            b'(' => {
                out.push(Token::Open);
                i += 1;
            }
            b')' => {
                out.push(Token::Close);
                i += 1;
            }
            b',' => {
                out.push(Token::Comma);
                i += 1;
            }
            _ if c.is_ascii_digit() || c == b'.' => {
                let end = (i..b.len()).find(|&j| !(b[j].is_ascii_alphanumeric() || b[j] == b'.')).unwrap_or(b.len());
                out.push(Token::Num(duration_seconds(&text[i..end])?));
                i = end;
            }
            _ if c.is_ascii_alphabetic() || c == b'_' => {
                let end = (i..b.len()).find(|&j| !(b[j].is_ascii_alphanumeric() || b[j] == b'_')).unwrap_or(b.len());
                out.push(Token::Func(text[i..end].to_ascii_lowercase()));
                i = end;
            }
            _ => return Err(format!("unexpected character {:?} in duration expression {text:?}", c as char)),
        }
    }
    Ok(out)
}

/// `90`, `1.5`, `1h30m`, `8000ms` in seconds.
fn duration_seconds(s: &str) -> Result<f64, String> {
    let bad = || format!("invalid duration {s:?}");
    if let Ok(n) = s.parse::<f64>() {
        return Ok(n);
    }
    let mut total = 0.0;
    let mut rest = s;
    while !rest.is_empty() {
        let num_end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).ok_or_else(bad)?;
        let n: f64 = rest[..num_end].parse().map_err(|_| bad())?;
        let after = &rest[num_end..];
        let (unit, len) = if after.starts_with("ms") {
            (0.001, 2)
        } else {
            let u = match after.as_bytes().first() {
                Some(b's') => 1.0,
                Some(b'm') => 60.0,
                Some(b'h') => 3600.0,
                Some(b'd') => 86_400.0,
                Some(b'w') => 604_800.0,
                Some(b'y') => 31_536_000.0,
                _ => return Err(bad()),
            };
            (u, 1)
        };
        total += n * unit;
        rest = &after[len..];
    }
    Ok(total)
}

struct Parser<'a> {
    tokens: &'a [Token],
    at: usize,
    ctx: &'a Context,
}

impl Parser<'_> {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.at)
    }

    fn expect(&mut self, t: &Token) -> Result<(), String> {
        if self.peek() == Some(t) {
            self.at += 1;
            Ok(())
        } else {
            Err(format!("expected {t:?} in duration expression, found {:?}", self.peek()))
        }
    }

    fn expr(&mut self) -> Result<f64, String> {
        let mut v = self.term()?;
        while let Some(Token::Op(op @ (b'+' | b'-'))) = self.peek().cloned() {
            self.at += 1;
            let r = self.term()?;
            v = if op == b'+' { v + r } else { v - r };
        }
        Ok(v)
    }

    fn term(&mut self) -> Result<f64, String> {
        let mut v = self.unary()?;
        while let Some(Token::Op(op @ (b'*' | b'/' | b'%'))) = self.peek().cloned() {
            self.at += 1;
            let r = self.unary()?;
            if op != b'*' && r == 0.0 {
                return Err("division by zero in duration expression".into());
            }
            v = match op {
                b'*' => v * r,
                b'/' => v / r,
                _ => v % r,
            };
        }
        Ok(v)
    }

    fn unary(&mut self) -> Result<f64, String> {
        match self.peek() {
            Some(Token::Op(b'-')) => {
                self.at += 1;
                Ok(-self.unary()?)
            }
            Some(Token::Op(b'+')) => {
                self.at += 1;
                self.unary()
            }
            _ => self.power(),
        }
    }

    fn power(&mut self) -> Result<f64, String> {
        let base = self.primary()?;
        if self.peek() == Some(&Token::Op(b'^')) {
            self.at += 1;
            let exp = self.unary()?;
            return Ok(base.powf(exp));
        }
        Ok(base)
    }

    fn primary(&mut self) -> Result<f64, String> {
        let t = self.peek().cloned().ok_or("duration expression ends too early")?;
        self.at += 1;
        match t {
            Token::Num(n) => Ok(n),
            Token::Open => {
                let v = self.expr()?;
                self.expect(&Token::Close)?;
                Ok(v)
            }
            Token::Func(name) => {
                self.expect(&Token::Open)?;
                let v = match name.as_str() {
                    "step" => self.ctx.step_s,
                    "range" => self.ctx.range_s,
                    "min_of" | "max_of" => {
                        let a = self.expr()?;
                        self.expect(&Token::Comma)?;
                        let b = self.expr()?;
                        if name == "min_of" {
                            a.min(b)
                        } else {
                            a.max(b)
                        }
                    }
                    other => return Err(format!("unknown function {other:?} in duration expression")),
                };
                self.expect(&Token::Close)?;
                Ok(v)
            }
            other => Err(format!("unexpected {other:?} in duration expression")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(q: &str) -> String {
        fold(q, 5_000, 10_000).unwrap().into_owned()
    }

    #[test]
    fn ranges_subqueries_and_offsets_fold() {
        assert_eq!(f("changes(x[26m+4m])"), "changes(x[1800000ms])");
        assert_eq!(f("changes(x[60*30])"), "changes(x[1800000ms])");
        assert_eq!(f("changes(x[2m*(10+5)])"), "changes(x[1800000ms])");
        assert_eq!(f("changes(x[1h30m % 1h])"), "changes(x[1800000ms])");
        assert_eq!(f("changes(x[30m1s-30m1s % 1m])"), "changes(x[1800000ms])");
        assert_eq!(f("changes(x[-5m+35m])"), "changes(x[1800000ms])");
        assert_eq!(f("changes(x[1h/2])"), "changes(x[1800000ms])");
        assert_eq!(f("s(m[29s+1s:5s+5s])"), "s(m[30000ms:10000ms])");
        assert_eq!(f("s(m[29s+1s:((((8 - 2) / 3) * 7s) % 4) + 8000ms])"), "s(m[30000ms:10000ms])");
        assert_eq!(f("m offset (20*(((((8 - 2) / 3) * 7s) % 4) + 8000ms))"), "m offset 200000ms");
        assert_eq!(f("m offset -(20*2)"), "m offset -40000ms");
        assert_eq!(f("m offset (-2 ^ 2)"), "m offset -4000ms");
        assert_eq!(f("m offset step()*0"), "m offset 5000ms*0");
        assert_eq!(f("m offset -min_of(step(), 1s)+8000"), "m offset -1000ms+8000");
        assert_eq!(f("m offset MAX_of(3s,min_of(step(), 1s))+8000"), "m offset 3000ms+8000");
        assert_eq!(f("c(m[((max_of(min_of((STEP()+1),((1h))),1ms)))])"), "c(m[6000ms])");
        assert_eq!(f("c(m[range()])"), "c(m[10000ms])");
        assert_eq!(fold("m offset range()", 0, 0).unwrap(), "m ");
        assert_eq!(fold("m offset step()*0", 0, 0).unwrap(), "m *0");
    }

    #[test]
    fn plain_queries_strings_and_errors_are_left_alone() {
        for q in [
            "rate(x[5m])",
            "x[1h30m:1m]",
            "x[5m:]",
            "x offset 5m",
            "x offset -4",
            "x offset 100 + 2",
            r#"x{a="[1+2]"} offset 5m"#,
            "x # offset (1)\n",
            "offsets_total",
            "my_offset(x)",
        ] {
            assert!(matches!(fold(q, 5_000, 0), Ok(Cow::Borrowed(_))), "{q}");
        }
        assert!(fold("x[1m/0]", 0, 0).unwrap_err().contains("division by zero"));
        assert!(fold("x[foo()+1]", 0, 0).unwrap_err().contains("unknown function"));
        assert!(fold("x[1e308*1e308]", 0, 0).unwrap_err().contains("out of range"));
        assert!(fold("x[(1+]", 0, 0).is_err());
    }
}
