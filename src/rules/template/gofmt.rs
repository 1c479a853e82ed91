//! Go's `fmt` for template values: `Sprint`, `Sprintln` and `Sprintf` with the verbs, flags,
//! widths, precisions and argument indexes of Go, and its `%!verb(type=value)` error forms.
//!
//! Not covered: `%x`/`%b` of floats and `%#g` (they print as a bad verb, or as `%g`), `%p`,
//! and pointer addresses (a list of samples prints its samples, where Go prints addresses).

use super::strconv::{format_float, is_print, quote_with};
use super::value::{Data, Sample, Value};

/// `fmt.Sprint`: operands in their default format, a space between two that are not strings.
pub(super) fn sprint(args: &[Value]) -> String {
    let mut p = Printer::default();
    let mut prev_string = false;
    for (i, a) in args.iter().enumerate() {
        let is_string = a.as_str().is_some();
        if i > 0 && !is_string && !prev_string {
            p.buf.push(' ');
        }
        p.print_arg(a, 'v');
        prev_string = is_string;
    }
    p.buf
}

/// `fmt.Sprintln`: operands separated by spaces, then a newline.
pub(super) fn sprintln(args: &[Value]) -> String {
    let mut p = Printer::default();
    for (i, a) in args.iter().enumerate() {
        if i > 0 {
            p.buf.push(' ');
        }
        p.print_arg(a, 'v');
    }
    p.buf.push('\n');
    p.buf
}

/// A value as `%v` prints it.
pub(super) fn sprint_v(v: &Value) -> String {
    let mut p = Printer::default();
    p.print_arg(v, 'v');
    p.buf
}

/// Go's `fmt` flags of one verb.
#[derive(Default, Clone, Copy)]
struct Flags {
    plus: bool,
    minus: bool,
    sharp: bool,
    space: bool,
    zero: bool,
    plus_v: bool,
    sharp_v: bool,
    wid: Option<usize>,
    prec: Option<usize>,
}

#[derive(Default)]
struct Printer {
    buf: String,
    f: Flags,
}

/// Widths and precisions above this are errors in Go (`tooLarge`).
const TOO_LARGE: usize = 1_000_000;
/// Go accepts widths up to 99,999,999 from the format: ours stop just past the output limit,
/// which then fails the expansion, instead of allocating that much first.
const WIDTH_CAP: usize = super::MAX_OUTPUT + 1;

/// `fmt.Sprintf`.
pub(super) fn sprintf(format: &str, args: &[Value]) -> String {
    let mut p = Printer::default();
    let b = format.as_bytes();
    let end = b.len();
    let mut arg_num = 0usize;
    let mut reordered = false;
    let mut i = 0;
    while i < end {
        let last = i;
        while i < end && b[i] != b'%' {
            i += 1;
        }
        p.buf.push_str(&format[last..i]);
        if i >= end {
            break;
        }
        i += 1;
        p.f = Flags::default();
        while i < end {
            match b[i] {
                b'#' => p.f.sharp = true,
                b'0' => p.f.zero = true,
                b'+' => p.f.plus = true,
                b'-' => p.f.minus = true,
                b' ' => p.f.space = true,
                _ => break,
            }
            i += 1;
        }
        let mut good_arg_num = true;
        let mut after_index;
        (arg_num, i, after_index) = arg_number(arg_num, format, i, args.len(), &mut reordered, &mut good_arg_num);
        if i < end && b[i] == b'*' {
            i += 1;
            let (w, ok, n) = int_from_arg(args, arg_num);
            arg_num = n;
            if !ok {
                p.buf.push_str("%!(BADWIDTH)");
            }
            p.f.wid = ok.then_some(w.unsigned_abs() as usize);
            if w < 0 {
                p.f.minus = true;
            }
            after_index = false;
        } else {
            let (w, ok, n) = parse_num(format, i);
            i = n;
            p.f.wid = ok.then_some(w.min(WIDTH_CAP));
            if after_index && ok {
                good_arg_num = false;
            }
        }
        if i + 1 < end && b[i] == b'.' {
            i += 1;
            if after_index {
                good_arg_num = false;
            }
            (arg_num, i, after_index) = arg_number(arg_num, format, i, args.len(), &mut reordered, &mut good_arg_num);
            if i < end && b[i] == b'*' {
                i += 1;
                let (pr, ok, n) = int_from_arg(args, arg_num);
                arg_num = n;
                p.f.prec = (ok && pr >= 0).then_some(pr as usize);
                if !ok {
                    p.buf.push_str("%!(BADPREC)");
                }
                after_index = false;
            } else {
                let (pr, ok, n) = parse_num(format, i);
                i = n;
                p.f.prec = Some(if ok { pr.min(WIDTH_CAP) } else { 0 });
            }
        }
        if !after_index {
            (arg_num, i, _) = arg_number(arg_num, format, i, args.len(), &mut reordered, &mut good_arg_num);
        }
        let Some(verb) = format[i..].chars().next() else {
            p.buf.push_str("%!(NOVERB)");
            break;
        };
        i += verb.len_utf8();
        if p.f.minus {
            p.f.zero = false;
        }
        match verb {
            '%' => p.buf.push('%'),
            _ if !good_arg_num => p.buf.push_str(&format!("%!{verb}(BADINDEX)")),
            _ if arg_num >= args.len() => p.buf.push_str(&format!("%!{verb}(MISSING)")),
            _ => {
                if verb == 'v' {
                    p.f.sharp_v = std::mem::take(&mut p.f.sharp);
                    p.f.plus_v = std::mem::take(&mut p.f.plus);
                }
                p.print_arg(&args[arg_num], verb);
                arg_num += 1;
            }
        }
    }
    if !reordered && arg_num < args.len() {
        p.f = Flags::default();
        p.buf.push_str("%!(EXTRA ");
        for (k, a) in args[arg_num..].iter().enumerate() {
            if k > 0 {
                p.buf.push_str(", ");
            }
            if matches!(a, Value::Nil) {
                p.buf.push_str("<nil>");
            } else {
                p.buf.push_str(a.type_name());
                p.buf.push('=');
                p.print_arg(a, 'v');
            }
        }
        p.buf.push(')');
    }
    p.buf
}

/// Go's `parsenum`: digits at `i`; an absurdly long number swallows the rest of the format.
fn parse_num(s: &str, start: usize) -> (usize, bool, usize) {
    let b = s.as_bytes();
    let mut num = 0usize;
    let mut is_num = false;
    let mut i = start;
    while i < b.len() && b[i].is_ascii_digit() {
        if num > TOO_LARGE {
            return (0, false, b.len());
        }
        num = num * 10 + usize::from(b[i] - b'0');
        is_num = true;
        i += 1;
    }
    (num, is_num, i)
}

/// Go's `argNumber`: an explicit `[n]` argument index at `i`.
fn arg_number(
    arg_num: usize,
    format: &str,
    i: usize,
    num_args: usize,
    reordered: &mut bool,
    good: &mut bool,
) -> (usize, usize, bool) {
    let b = format.as_bytes();
    if b.len() <= i || b[i] != b'[' {
        return (arg_num, i, false);
    }
    *reordered = true;
    let rest = &format[i..];
    let (index, wid, ok) = match rest.bytes().skip(1).position(|c| c == b']') {
        _ if rest.len() < 3 => (0, 1, false),
        Some(close) => {
            let close = close + 1;
            let (n, is_num, newi) = parse_num(rest, 1);
            if !is_num || newi != close {
                (0, close + 1, false)
            } else {
                (n as i64 - 1, close + 1, true)
            }
        }
        None => (0, 1, false),
    };
    if ok && index >= 0 && (index as usize) < num_args {
        return (index as usize, i + wid, true);
    }
    *good = false;
    (arg_num, i + wid, ok)
}

/// Go's `intFromArg`: a `*` width or precision.
fn int_from_arg(args: &[Value], arg_num: usize) -> (i64, bool, usize) {
    match args.get(arg_num) {
        Some(Value::Int(n)) if n.unsigned_abs() <= TOO_LARGE as u64 => (*n, true, arg_num + 1),
        Some(_) => (0, false, arg_num + 1),
        None => (0, false, arg_num),
    }
}

impl Printer {
    fn write_padding(&mut self, n: usize) {
        let c = if self.f.zero && !self.f.minus { '0' } else { ' ' };
        self.buf.extend(std::iter::repeat_n(c, n));
    }

    /// Pads `s` to the width, on the left unless `-`.
    fn pad(&mut self, s: &str) {
        let n = s.chars().count();
        let Some(w) = self.f.wid.filter(|&w| w > n) else {
            self.buf.push_str(s);
            return;
        };
        if self.f.minus {
            self.buf.push_str(s);
            self.write_padding(w - n);
        } else {
            self.write_padding(w - n);
            self.buf.push_str(s);
        }
    }

    fn bad_verb(&mut self, verb: char, v: &Value) {
        self.buf.push_str("%!");
        self.buf.push(verb);
        self.buf.push('(');
        if matches!(v, Value::Nil) {
            self.buf.push_str("<nil>");
        } else {
            self.buf.push_str(v.type_name());
            self.buf.push('=');
            self.print_value(v, 'v', 0);
        }
        self.buf.push(')');
    }

    fn print_arg(&mut self, v: &Value, verb: char) {
        match (v, verb) {
            (Value::Nil, 'v' | 'T') => self.pad("<nil>"),
            (Value::Nil, _) => self.bad_verb(verb, v),
            (_, 'T') => self.pad(v.type_name()),
            _ => self.print_value(v, verb, 0),
        }
    }

    fn print_value(&mut self, v: &Value, verb: char, depth: usize) {
        // Stringers (`time.Time`, `time.Duration`) print their String for the string verbs.
        if matches!(verb, 'v' | 's' | 'x' | 'X' | 'q') && !self.f.sharp_v {
            match v {
                Value::Time(t, _) => return self.fmt_string(&t.to_string(), verb, v),
                Value::Duration(d, _) => return self.fmt_string(&super::gotime::duration_string(*d), verb, v),
                _ => {}
            }
        }
        match v {
            Value::Nil => self.buf.push_str("<nil>"),
            Value::Bool(b) => match verb {
                't' | 'v' => self.pad(if *b { "true" } else { "false" }),
                _ => self.bad_verb(verb, v),
            },
            Value::Int(i) | Value::Duration(i, false) => self.fmt_int(*i, verb, v),
            Value::Duration(_, true) | Value::Time(..) => self.bad_verb(verb, v),
            Value::Float(x) => match verb {
                'v' => self.fmt_float(*x, 'g', None),
                'g' | 'G' | 'e' | 'E' | 'f' | 'F' => self.fmt_float(*x, verb, None),
                _ => self.bad_verb(verb, v),
            },
            Value::Complex(re, im) => match verb {
                'v' | 'g' | 'G' | 'e' | 'E' | 'f' | 'F' => {
                    let fv = if verb == 'v' { 'g' } else { verb };
                    let plus = self.f.plus;
                    self.buf.push('(');
                    self.fmt_float(*re, fv, None);
                    self.f.plus = true;
                    self.fmt_float(*im, fv, None);
                    self.buf.push_str("i)");
                    self.f.plus = plus;
                }
                _ => self.bad_verb(verb, v),
            },
            Value::Str(s) | Value::Html(s) => self.fmt_string(s, verb, v),
            Value::StrMap(m) => {
                self.open(v, "map[", "{");
                for (i, (k, val)) in m.iter().enumerate() {
                    self.sep(i);
                    self.fmt_string(k, verb, &Value::str(k.as_str()));
                    self.buf.push(':');
                    self.fmt_string(val, verb, &Value::str(val.as_str()));
                }
                self.close(']');
            }
            Value::AnyMap(m) => {
                self.open(v, "map[", "{");
                for (i, (k, val)) in m.iter().enumerate() {
                    self.sep(i);
                    self.fmt_string(k, verb, &Value::str(k.as_str()));
                    self.buf.push(':');
                    self.print_value(val, verb, depth + 1);
                }
                self.close(']');
            }
            Value::Samples(s) => {
                self.open(v, "[", "{");
                for (i, smp) in s.iter().enumerate() {
                    self.sep(i);
                    self.print_sample(smp, verb, depth + 1);
                }
                self.close(']');
            }
            Value::Sample(Some(s)) => self.print_sample(s, verb, depth),
            Value::Sample(None) => self.pad("<nil>"),
            Value::Data(d) => self.print_data(d, verb, depth),
        }
    }

    fn open(&mut self, v: &Value, plain: &str, sharp: &str) {
        if self.f.sharp_v {
            self.buf.push_str(v.type_name());
            self.buf.push_str(sharp);
        } else {
            self.buf.push_str(plain);
        }
    }

    fn sep(&mut self, i: usize) {
        if i > 0 {
            self.buf.push_str(if self.f.sharp_v { ", " } else { " " });
        }
    }

    fn close(&mut self, plain: char) {
        self.buf.push(if self.f.sharp_v { '}' } else { plain });
    }

    fn field_name(&mut self, name: &str) {
        if self.f.plus_v || self.f.sharp_v {
            self.buf.push_str(name);
            self.buf.push(':');
        }
    }

    fn print_sample(&mut self, s: &Sample, verb: char, depth: usize) {
        self.buf.push_str(if self.f.sharp_v { "&template.sample{" } else { "&{" });
        self.field_name("Labels");
        self.print_value(&Value::StrMap(s.labels.clone()), verb, depth + 1);
        self.sep(1);
        self.field_name("Value");
        self.print_value(&Value::Float(s.value), verb, depth + 1);
        self.buf.push('}');
    }

    fn print_data(&mut self, d: &Data, verb: char, depth: usize) {
        self.buf.push('{');
        let fields = [
            ("Labels", Value::StrMap(d.labels.clone())),
            ("ExternalLabels", Value::StrMap(d.external_labels.clone())),
            ("ExternalURL", Value::Str(d.external_url.clone())),
            ("Value", Value::Float(d.value)),
        ];
        for (i, (name, v)) in fields.iter().enumerate() {
            self.sep(i);
            self.field_name(name);
            self.print_value(v, verb, depth + 1);
        }
        self.buf.push('}');
    }

    fn fmt_string(&mut self, s: &str, verb: char, v: &Value) {
        let s = match self.f.prec {
            Some(p) if verb != 'x' && verb != 'X' => s.char_indices().nth(p).map_or(s, |(i, _)| &s[..i]),
            _ => s,
        };
        match verb {
            'v' if self.f.sharp_v => self.pad(&quote_with(s, '"', false)),
            'v' | 's' => self.pad(s),
            'q' => {
                let q = if self.f.sharp
                    && !s.contains('`')
                    && s.chars().all(|c| c == '\t' || (is_print(c) && c != '\u{feff}'))
                {
                    format!("`{s}`")
                } else {
                    quote_with(s, '"', self.f.plus)
                };
                self.pad(&q);
            }
            'x' | 'X' => {
                let bytes = match self.f.prec {
                    Some(p) => &s.as_bytes()[..p.min(s.len())],
                    None => s.as_bytes(),
                };
                let mut h = String::with_capacity(bytes.len() * 2 + 2);
                if self.f.sharp && !bytes.is_empty() {
                    h.push_str(if verb == 'x' { "0x" } else { "0X" });
                }
                for b in bytes {
                    h.push_str(&if verb == 'x' { format!("{b:02x}") } else { format!("{b:02X}") });
                }
                self.pad(&h);
            }
            _ => self.bad_verb(verb, v),
        }
    }

    fn fmt_int(&mut self, i: i64, verb: char, v: &Value) {
        let u = i.unsigned_abs();
        let neg = i < 0;
        match verb {
            'v' | 'd' => self.fmt_integer(u, neg, 10, verb, false),
            'b' => self.fmt_integer(u, neg, 2, verb, false),
            'o' | 'O' => self.fmt_integer(u, neg, 8, verb, false),
            'x' => self.fmt_integer(u, neg, 16, verb, false),
            'X' => self.fmt_integer(u, neg, 16, verb, true),
            'c' => {
                let c = u32::try_from(i).ok().and_then(char::from_u32).unwrap_or('\u{fffd}');
                self.pad(&c.to_string());
            }
            'q' => {
                let c = u32::try_from(i).ok().and_then(char::from_u32).unwrap_or('\u{fffd}');
                let q = if self.f.sharp && c != '`' && is_print(c) {
                    format!("`{c}`")
                } else {
                    quote_with(&c.to_string(), '\'', self.f.plus)
                };
                self.pad(&q);
            }
            'U' => {
                let mut s = format!("U+{:0w$X}", i, w = self.f.prec.unwrap_or(4).max(4));
                if let Some(c) = u32::try_from(i).ok().and_then(char::from_u32).filter(|&c| self.f.sharp && is_print(c))
                {
                    s.push_str(&format!(" '{c}'"));
                }
                self.pad(&s);
            }
            _ => self.bad_verb(verb, v),
        }
    }

    /// Go's `fmtInteger`.
    fn fmt_integer(&mut self, u: u64, neg: bool, base: u32, verb: char, upper: bool) {
        let mut prec = 0usize;
        if let Some(p) = self.f.prec {
            if p == 0 && u == 0 {
                let zero = std::mem::take(&mut self.f.zero);
                self.write_padding(self.f.wid.unwrap_or(0));
                self.f.zero = zero;
                return;
            }
            prec = p;
        } else if let (true, false, Some(w)) = (self.f.zero, self.f.minus, self.f.wid) {
            prec = w;
            if neg || self.f.plus || self.f.space {
                prec = prec.saturating_sub(1);
            }
        }
        let mut digits = match base {
            2 => format!("{u:b}"),
            8 => format!("{u:o}"),
            16 if upper => format!("{u:X}"),
            16 => format!("{u:x}"),
            _ => u.to_string(),
        };
        if digits.len() < prec {
            digits = "0".repeat(prec - digits.len()) + &digits;
        }
        let mut prefix = String::new();
        if neg {
            prefix.push('-');
        } else if self.f.plus {
            prefix.push('+');
        } else if self.f.space {
            prefix.push(' ');
        }
        if self.f.sharp {
            match base {
                2 => prefix.push_str("0b"),
                8 if !digits.starts_with('0') => prefix.push('0'),
                16 => prefix.push_str(if upper { "0X" } else { "0x" }),
                _ => {}
            }
        }
        if verb == 'O' {
            prefix.push_str("0o");
        }
        let zero = std::mem::take(&mut self.f.zero);
        self.pad(&(prefix + &digits));
        self.f.zero = zero;
    }

    /// Go's `fmt.fmtFloat`: `verb` one of `g G e E f F`, `default_prec` for `%e`/`%f`.
    fn fmt_float(&mut self, x: f64, verb: char, default_prec: Option<usize>) {
        let (fmt, prec) = match verb {
            'f' | 'F' => ('f', self.f.prec.or(default_prec).or(Some(6))),
            'e' | 'E' => (verb, self.f.prec.or(default_prec).or(Some(6))),
            _ => (verb, self.f.prec.or(default_prec)),
        };
        let num = format_float(x, fmt, prec);
        let (mut sign, body) = match num.strip_prefix('-') {
            Some(rest) => ('-', rest),
            None => ('+', num.strip_prefix('+').unwrap_or(&num)),
        };
        if self.f.space && sign == '+' && !self.f.plus {
            sign = ' ';
        }
        if body == "Inf" || body == "NaN" {
            let zero = std::mem::take(&mut self.f.zero);
            if body == "NaN" && !self.f.space && !self.f.plus {
                self.pad(body);
            } else {
                self.pad(&format!("{sign}{body}"));
            }
            self.f.zero = zero;
            return;
        }
        if self.f.plus || sign != '+' {
            let len = body.chars().count() + 1;
            if let (true, false, Some(w)) = (self.f.zero, self.f.minus, self.f.wid) {
                if w > len {
                    self.buf.push(sign);
                    self.write_padding(w - len);
                    self.buf.push_str(body);
                    return;
                }
            }
            self.pad(&format!("{sign}{body}"));
            return;
        }
        self.pad(body);
    }
}
