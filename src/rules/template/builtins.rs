//! Go's predefined template functions that are not plain formatting: `len`, `index`, `slice`,
//! the comparisons (`eq` with several operands, `ne`, `lt`, `le`, `gt`, `ge`, with Go's rules
//! on kinds) and the escapers (`html`, `js`, `urlquery`). `and`, `or` and `call` live in the
//! executor; `print*` in [`gofmt`](super::gofmt).

use std::rc::Rc;

use super::gofmt::{sprint, sprint_v};
use super::value::Value;

/// `len`.
pub(super) fn len(v: &Value) -> Result<Value, String> {
    let n = match v {
        Value::Str(s) | Value::Html(s) => s.len(),
        Value::StrMap(m) => m.len(),
        Value::AnyMap(m) => m.len(),
        Value::Samples(s) => s.len(),
        Value::Sample(None) => return Err("len of nil pointer".into()),
        Value::Nil => return Err("reflect: call of reflect.Value.Type on zero Value".into()),
        other => return Err(format!("len of type {}", pointee_type(other))),
    };
    Ok(Value::Int(n as i64))
}

/// The type name after Go's `indirect` (what a pointer points to).
fn pointee_type(v: &Value) -> &'static str {
    match v {
        Value::Sample(_) => "template.sample",
        Value::Time(..) => "time.Time",
        Value::Duration(..) => "time.Duration",
        other => other.type_name(),
    }
}

/// Go's `indexArg`: an integer index in `0..=cap`.
fn index_arg(index: &Value, cap: usize) -> Result<usize, String> {
    let x = match index {
        Value::Int(x) | Value::Duration(x, false) => *x,
        Value::Nil => return Err("cannot index slice/array with nil".into()),
        other => return Err(format!("cannot index slice/array with type {}", other.type_name())),
    };
    match usize::try_from(x) {
        Ok(i) if i <= cap => Ok(i),
        _ => Err(format!("index out of range: {x}")),
    }
}

/// A map key: a `string`.
fn map_key(index: &Value) -> Result<&str, String> {
    match index {
        Value::Str(s) => Ok(s),
        Value::Nil => Err("value is nil; should be of type string".into()),
        other => Err(format!("value has type {}; should be string", other.type_name())),
    }
}

/// `index item i j ...`.
pub(super) fn index(item: &Value, indexes: &[Value]) -> Result<Value, String> {
    if matches!(item, Value::Nil) {
        return Err("index of untyped nil".into());
    }
    let mut item = item.clone();
    for idx in indexes {
        item = match item.indirect() {
            Value::Nil | Value::Sample(None) => return Err("index of nil pointer".into()),
            Value::Str(s) | Value::Html(s) => {
                let i = index_arg(idx, s.len())?;
                match s.as_bytes().get(i) {
                    Some(&b) => Value::Int(i64::from(b)),
                    None => return Err("reflect: string index out of range".into()),
                }
            }
            Value::Samples(v) => {
                let i = index_arg(idx, v.len())?;
                match v.get(i) {
                    Some(s) => Value::Sample(Some(s.clone())),
                    None => return Err("reflect: slice index out of range".into()),
                }
            }
            Value::StrMap(m) => Value::str(m.get(map_key(idx)?).map_or("", String::as_str)),
            Value::AnyMap(m) => m.get(map_key(idx)?).cloned().unwrap_or(Value::Nil),
            other => return Err(format!("can't index item of type {}", pointee_type(&other))),
        };
    }
    Ok(item)
}

/// `slice item i j k`.
pub(super) fn slice(item: &Value, indexes: &[Value]) -> Result<Value, String> {
    let item = match item {
        Value::Nil => return Err("slice of untyped nil".into()),
        Value::Sample(None) => return Err("slice of nil pointer".into()),
        other => other.clone().indirect(),
    };
    if indexes.len() > 3 {
        return Err(format!("too many slice indexes: {}", indexes.len()));
    }
    let len = match &item {
        Value::Str(s) | Value::Html(s) => {
            if indexes.len() == 3 {
                return Err("cannot 3-index slice a string".into());
            }
            s.len()
        }
        Value::Samples(v) => v.len(),
        other => return Err(format!("can't slice item of type {}", pointee_type(other))),
    };
    let mut idx = [0, len, len];
    for (i, index) in indexes.iter().enumerate() {
        idx[i] = index_arg(index, len)?;
    }
    if idx[0] > idx[1] {
        return Err(format!("invalid slice index: {} > {}", idx[0], idx[1]));
    }
    if indexes.len() == 3 && idx[1] > idx[2] {
        return Err(format!("invalid slice index: {} > {}", idx[1], idx[2]));
    }
    Ok(match item {
        Value::Str(s) => Value::str(String::from_utf8_lossy(&s.as_bytes()[idx[0]..idx[1]])),
        Value::Html(s) => Value::Html(String::from_utf8_lossy(&s.as_bytes()[idx[0]..idx[1]]).into()),
        Value::Samples(v) => Value::Samples(Rc::from(&v[idx[0]..idx[1]])),
        other => other,
    })
}

/// Go's basic kinds, as the comparison functions see them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Invalid,
    Bool,
    Complex,
    Int,
    Float,
    String,
}

fn basic_kind(v: &Value) -> Kind {
    match v {
        Value::Bool(_) => Kind::Bool,
        Value::Int(_) | Value::Duration(_, false) => Kind::Int,
        Value::Float(_) => Kind::Float,
        Value::Complex(..) => Kind::Complex,
        Value::Str(_) | Value::Html(_) => Kind::String,
        _ => Kind::Invalid,
    }
}

fn int_of(v: &Value) -> i64 {
    match v {
        Value::Int(i) | Value::Duration(i, _) => *i,
        _ => 0,
    }
}

fn float_of(v: &Value) -> f64 {
    match v {
        Value::Float(f) => *f,
        _ => 0.0,
    }
}

/// The reflect kind of a non-basic value (`can_compare` compares these).
fn reflect_kind(v: &Value) -> &'static str {
    match v {
        Value::Nil => "invalid",
        Value::StrMap(_) | Value::AnyMap(_) => "map",
        Value::Samples(_) => "slice",
        Value::Sample(_) | Value::Time(_, true) | Value::Duration(_, true) => "ptr",
        _ => "struct",
    }
}

const BAD_TYPE: &str = "invalid type for comparison";

/// `eq arg1 arg2 ...`: whether `arg1` equals any of the others.
pub(super) fn eq(arg1: &Value, rest: &[Value]) -> Result<bool, String> {
    if rest.is_empty() {
        return Err("missing argument for comparison".into());
    }
    let k1 = basic_kind(arg1);
    for arg in rest {
        let k2 = basic_kind(arg);
        let truth = if k1 != k2 {
            if !matches!(arg1, Value::Nil) && !matches!(arg, Value::Nil) {
                return Err(format!("incompatible types for comparison: {} and {}", arg1.type_name(), arg.type_name()));
            }
            false
        } else {
            match k1 {
                Kind::Bool => matches!((arg1, arg), (Value::Bool(a), Value::Bool(b)) if a == b),
                Kind::Complex => {
                    matches!((arg1, arg), (Value::Complex(a, b), Value::Complex(c, d)) if a == c && b == d)
                }
                Kind::Float => float_of(arg1) == float_of(arg),
                Kind::Int => int_of(arg1) == int_of(arg),
                Kind::String => arg1.as_str() == arg.as_str(),
                Kind::Invalid => non_basic_eq(arg1, arg)?,
            }
        };
        if truth {
            return Ok(true);
        }
    }
    Ok(false)
}

fn non_basic_eq(a: &Value, b: &Value) -> Result<bool, String> {
    let (ka, kb) = (reflect_kind(a), reflect_kind(b));
    if ka != kb && ka != "invalid" && kb != "invalid" {
        return Err(format!(
            "non-comparable types {}: {}, {}: {}",
            sprint_v(a),
            a.type_name(),
            b.type_name(),
            sprint_v(b)
        ));
    }
    let is_nil = |v: &Value| matches!(v, Value::Nil | Value::Sample(None));
    if is_nil(a) || is_nil(b) {
        return Ok(is_nil(a) == is_nil(b));
    }
    Ok(match (a, b) {
        (Value::Sample(Some(x)), Value::Sample(Some(y))) => Rc::ptr_eq(x, y),
        (Value::Time(x, p), Value::Time(y, q)) if p == q => x == y,
        (Value::Duration(x, true), Value::Duration(y, true)) => x == y,
        _ if kb == "map" || kb == "slice" || matches!(b, Value::Data(_)) => {
            return Err(format!("non-comparable type {}: {}", sprint_v(b), b.type_name()))
        }
        _ => false,
    })
}

/// `lt a b`.
pub(super) fn lt(a: &Value, b: &Value) -> Result<bool, String> {
    let (k1, k2) = (basic_kind(a), basic_kind(b));
    if k1 == Kind::Invalid || k2 == Kind::Invalid {
        return Err(BAD_TYPE.into());
    }
    if k1 != k2 {
        return Err(format!("incompatible types for comparison: {} and {}", a.type_name(), b.type_name()));
    }
    Ok(match k1 {
        Kind::Float => float_of(a) < float_of(b),
        Kind::Int => int_of(a) < int_of(b),
        Kind::String => a.as_str() < b.as_str(),
        _ => return Err(BAD_TYPE.into()),
    })
}

/// `le a b`.
pub(super) fn le(a: &Value, b: &Value) -> Result<bool, String> {
    if lt(a, b)? {
        return Ok(true);
    }
    eq(a, std::slice::from_ref(b))
}

/// Go's `evalArgs` of the escapers: one string as is, else the operands printed (a missing
/// value as `<no value>`).
fn eval_args(args: &[Value]) -> String {
    if let [Value::Str(s)] = args {
        return s.to_string();
    }
    let printable: Vec<Value> =
        args.iter().map(|a| if matches!(a, Value::Nil) { Value::str("<no value>") } else { a.clone() }).collect();
    sprint(&printable)
}

/// `html`: Go's `HTMLEscapeString` of the operands.
pub(super) fn html(args: &[Value]) -> String {
    let s = eval_args(args);
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\0' => out.push('\u{fffd}'),
            '"' => out.push_str("&#34;"),
            '\'' => out.push_str("&#39;"),
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            c => out.push(c),
        }
    }
    out
}

/// `js`: Go's `JSEscapeString` of the operands.
pub(super) fn js(args: &[Value]) -> String {
    let s = eval_args(args);
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("\\'"),
            '"' => out.push_str("\\\""),
            '<' => out.push_str("\\u003C"),
            '>' => out.push_str("\\u003E"),
            '&' => out.push_str("\\u0026"),
            '=' => out.push_str("\\u003D"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04X}", c as u32)),
            c if c.is_ascii() || super::strconv::is_print(c) => out.push(c),
            c => out.push_str(&format!("\\u{:04X}", c as u32)),
        }
    }
    out
}

/// `urlquery`: Go's `url.QueryEscape` of the operands.
pub(super) fn urlquery(args: &[Value]) -> String {
    query_escape(&eval_args(args))
}

/// Go's `url.QueryEscape`: unreserved bytes kept, space as `+`, the rest `%XX`.
pub(super) fn query_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => out.push(b as char),
            b' ' => out.push('+'),
            b => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}
