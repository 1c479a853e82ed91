//! The parse tree (Go's `text/template/parse` nodes) and its `String` forms, which execution
//! errors quote as `at <...>`.
//!
//! One difference in shape: an `{{if}}` (or `{{with}}`) with `{{else if}}` (`{{else with}}`)
//! branches is one node with a list of branches instead of nested nodes, so that a long chain
//! costs no recursion; its scoping of variables is the nested form's.

use std::fmt;

use super::lex::Kind;
use super::strconv::{parse_float, parse_int, parse_uint, quote, unquote_char, Unquoted};

/// A sequence of nodes.
pub(super) type List = Vec<Node>;

/// A node of a template's body.
#[derive(Debug, Clone)]
pub(super) enum Node {
    /// Plain text.
    Text(String),
    /// `{{pipeline}}`.
    Action(Action),
    /// `{{if}}` with its `{{else if}}` branches.
    If(Box<Conditional>),
    /// `{{with}}` with its `{{else with}}` branches.
    With(Box<Conditional>),
    /// `{{range}}`.
    Range(Box<RangeNode>),
    /// `{{template "name" pipeline}}` (also what `{{block}}` leaves in place).
    Template(TemplateNode),
    /// `{{break}}`.
    Break,
    /// `{{continue}}`.
    Continue,
}

/// `{{pipeline}}`.
#[derive(Debug, Clone)]
pub(super) struct Action {
    pub(super) pipe: Pipe,
}

/// `{{if}}`/`{{with}}`: the branches in order, then the final `{{else}}`.
#[derive(Debug, Clone)]
pub(super) struct Conditional {
    pub(super) branches: Vec<(Pipe, List)>,
    pub(super) else_list: Option<List>,
}

/// `{{range pipeline}} list {{else}} else_list {{end}}`.
#[derive(Debug, Clone)]
pub(super) struct RangeNode {
    pub(super) pipe: Pipe,
    pub(super) list: List,
    pub(super) else_list: Option<List>,
}

/// `{{template "name" pipeline}}`.
#[derive(Debug, Clone)]
pub(super) struct TemplateNode {
    pub(super) pos: usize,
    pub(super) name: String,
    pub(super) pipe: Option<Pipe>,
}

/// `$x := cmd | cmd`.
#[derive(Debug, Clone)]
pub(super) struct Pipe {
    pub(super) pos: usize,
    pub(super) is_assign: bool,
    pub(super) decl: Vec<String>,
    pub(super) cmds: Vec<Command>,
}

/// One stage of a pipeline: an operand and its arguments.
#[derive(Debug, Clone)]
pub(super) struct Command {
    pub(super) pos: usize,
    pub(super) args: Vec<Arg>,
}

/// An operand.
#[derive(Debug, Clone)]
pub(super) enum Arg {
    /// A function name.
    Identifier { pos: usize, name: String },
    /// `.`
    Dot { pos: usize },
    /// `nil`
    Nil { pos: usize },
    /// `$x.Field.Field` (`idents[0]` is the variable).
    Variable { pos: usize, idents: Vec<String> },
    /// `.Field.Field`
    Field { pos: usize, idents: Vec<String> },
    /// `true`, `false`
    Bool { pos: usize, val: bool },
    /// A number, character or complex constant.
    Number(Box<Number>),
    /// A string constant: as written, and its value.
    String { pos: usize, quoted: String, text: String },
    /// `(pipeline)`
    Pipe(Box<Pipe>),
    /// `(pipeline).Field` or `fn.Field`.
    Chain { pos: usize, node: Box<Arg>, fields: Vec<String> },
}

/// A numeric constant and the types it can stand for (Go's `NumberNode`).
#[derive(Debug, Clone)]
pub(super) struct Number {
    pub(super) pos: usize,
    pub(super) text: String,
    pub(super) is_int: bool,
    pub(super) is_uint: bool,
    pub(super) is_float: bool,
    pub(super) is_complex: bool,
    pub(super) int: i64,
    pub(super) float: f64,
    pub(super) complex: (f64, f64),
}

impl Arg {
    /// The byte offset of the operand in the template text.
    pub(super) fn pos(&self) -> usize {
        match self {
            Arg::Identifier { pos, .. }
            | Arg::Dot { pos }
            | Arg::Nil { pos }
            | Arg::Variable { pos, .. }
            | Arg::Field { pos, .. }
            | Arg::Bool { pos, .. }
            | Arg::String { pos, .. }
            | Arg::Chain { pos, .. } => *pos,
            Arg::Number(n) => n.pos,
            Arg::Pipe(p) => p.pos,
        }
    }

    /// Whether the operand is a constant (not executable as a later pipeline stage).
    pub(super) fn is_constant(&self) -> bool {
        matches!(self, Arg::Bool { .. } | Arg::Dot { .. } | Arg::Nil { .. } | Arg::Number(_) | Arg::String { .. })
    }
}

impl fmt::Display for Arg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Arg::Identifier { name, .. } => f.write_str(name),
            Arg::Dot { .. } => f.write_str("."),
            Arg::Nil { .. } => f.write_str("nil"),
            Arg::Variable { idents, .. } => f.write_str(&idents.join(".")),
            Arg::Field { idents, .. } => idents.iter().try_for_each(|id| write!(f, ".{id}")),
            Arg::Bool { val, .. } => write!(f, "{val}"),
            Arg::Number(n) => f.write_str(&n.text),
            Arg::String { quoted, .. } => f.write_str(quoted),
            Arg::Pipe(p) => write!(f, "{p}"),
            Arg::Chain { node, fields, .. } => {
                match node.as_ref() {
                    Arg::Pipe(p) => write!(f, "({p})")?,
                    other => write!(f, "{other}")?,
                }
                fields.iter().try_for_each(|id| write!(f, ".{id}"))
            }
        }
    }
}

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, arg) in self.args.iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            match arg {
                Arg::Pipe(p) => write!(f, "({p})")?,
                other => write!(f, "{other}")?,
            }
        }
        Ok(())
    }
}

impl fmt::Display for Pipe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.decl.is_empty() {
            f.write_str(&self.decl.join(", "))?;
            f.write_str(if self.is_assign { " = " } else { " := " })?;
        }
        for (i, c) in self.cmds.iter().enumerate() {
            if i > 0 {
                f.write_str(" | ")?;
            }
            write!(f, "{c}")?;
        }
        Ok(())
    }
}

fn write_list(f: &mut fmt::Formatter<'_>, list: &List) -> fmt::Result {
    list.iter().try_for_each(|n| write!(f, "{n}"))
}

impl fmt::Display for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Node::Text(t) => f.write_str(t),
            Node::Action(a) => write!(f, "{{{{{}}}}}", a.pipe),
            Node::If(c) => write_conditional(f, "if", c),
            Node::With(c) => write_conditional(f, "with", c),
            Node::Range(r) => {
                write!(f, "{{{{range {}}}}}", r.pipe)?;
                write_list(f, &r.list)?;
                if let Some(e) = &r.else_list {
                    f.write_str("{{else}}")?;
                    write_list(f, e)?;
                }
                f.write_str("{{end}}")
            }
            Node::Template(t) => write!(f, "{t}"),
            Node::Break => f.write_str("{{break}}"),
            Node::Continue => f.write_str("{{continue}}"),
        }
    }
}

/// Go's nested form: `{{if a}}x{{else}}{{if b}}y{{end}}{{end}}`.
fn write_conditional(f: &mut fmt::Formatter<'_>, keyword: &str, c: &Conditional) -> fmt::Result {
    for (i, (pipe, list)) in c.branches.iter().enumerate() {
        if i > 0 {
            f.write_str("{{else}}")?;
        }
        write!(f, "{{{{{keyword} {pipe}}}}}")?;
        write_list(f, list)?;
    }
    if let Some(e) = &c.else_list {
        f.write_str("{{else}}")?;
        write_list(f, e)?;
    }
    for _ in &c.branches {
        f.write_str("{{end}}")?;
    }
    Ok(())
}

impl fmt::Display for TemplateNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{{{{template {}", quote(&self.name))?;
        if let Some(p) = &self.pipe {
            write!(f, " {p}")?;
        }
        f.write_str("}}")
    }
}

/// Go's `IsEmptyTree`: nothing but space text (a template that may be redefined).
pub(super) fn is_empty_list(list: &List) -> bool {
    list.iter().all(|n| matches!(n, Node::Text(t) if t.trim().is_empty()))
}

/// Go's `newNumber`: which of int, uint, float and complex the constant `text` can be.
pub(super) fn new_number(pos: usize, text: &str, kind: Kind) -> Result<Number, String> {
    let mut n = Number {
        pos,
        text: text.to_owned(),
        is_int: false,
        is_uint: false,
        is_float: false,
        is_complex: false,
        int: 0,
        float: 0.0,
        complex: (0.0, 0.0),
    };
    match kind {
        Kind::CharConstant => {
            let body = &text[1..];
            let (u, tail) = unquote_char(body, '\'').ok_or("invalid syntax")?;
            if tail != "'" {
                return Err(format!("malformed character constant: {text}"));
            }
            let v = match u {
                Unquoted::Char(c) => i64::from(u32::from(c)),
                Unquoted::Byte(b) => i64::from(b),
            };
            (n.is_int, n.is_uint, n.is_float, n.int, n.float) = (true, true, true, v, v as f64);
            return Ok(n);
        }
        Kind::Complex => {
            let (re, im) = parse_complex(text).ok_or_else(|| format!("illegal number syntax: {}", quote(text)))?;
            n.is_complex = true;
            n.complex = (re, im);
            simplify_complex(&mut n);
            return Ok(n);
        }
        _ => {}
    }
    if let Some(imag) = text.strip_suffix('i') {
        if let Ok(f) = parse_float(imag) {
            n.is_complex = true;
            n.complex = (0.0, f);
            simplify_complex(&mut n);
            return Ok(n);
        }
    }
    let u = parse_uint(text);
    if u.is_ok() {
        n.is_uint = true;
    }
    if let Ok(i) = parse_int(text) {
        (n.is_int, n.int) = (true, i);
        if i == 0 {
            n.is_uint = true;
        }
    }
    if n.is_int {
        (n.is_float, n.float) = (true, n.int as f64);
    } else if let Ok(u) = u {
        (n.is_float, n.float) = (true, u as f64);
    } else if let Ok(f) = parse_float(text) {
        if !text.contains(['.', 'e', 'E', 'p', 'P']) {
            return Err(format!("integer overflow: {}", quote(text)));
        }
        (n.is_float, n.float) = (true, f);
        if (f as i64) as f64 == f {
            (n.is_int, n.int) = (true, f as i64);
        }
        if (f as u64) as f64 == f {
            n.is_uint = true;
        }
    }
    if !n.is_int && !n.is_uint && !n.is_float {
        return Err(format!("illegal number syntax: {}", quote(text)));
    }
    Ok(n)
}

/// `1+2i`, `-1.5e3-2i`: the real and imaginary parts.
fn parse_complex(text: &str) -> Option<(f64, f64)> {
    let body = text.strip_suffix('i')?;
    let b = body.as_bytes();
    let split =
        (1..b.len()).rev().find(|&i| (b[i] == b'+' || b[i] == b'-') && !matches!(b[i - 1] | 0x20, b'e' | b'p'))?;
    let re = parse_float(&body[..split]).ok()?;
    let im = parse_float(&body[split..]).ok()?;
    Some((re, im))
}

/// A complex constant with no imaginary part is also a float (and maybe an integer).
fn simplify_complex(n: &mut Number) {
    n.is_float = n.complex.1 == 0.0;
    if n.is_float {
        n.float = n.complex.0;
        n.is_int = (n.float as i64) as f64 == n.float;
        if n.is_int {
            n.int = n.float as i64;
        }
        n.is_uint = (n.float as u64) as f64 == n.float;
    }
}
