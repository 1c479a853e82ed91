//! Where each node of a parsed query starts in the text the user sent, so that annotations
//! carry it as Prometheus prints it: ` (line:column)` after the message (`posrange`'s
//! `StartPosInput`).
//!
//! promql-parser records no positions, and the engine rewrites the text before parsing it
//! (`byte_escapes`, `duration_expr`, `extended`, `trim`, `info`). None of those rewrites adds or
//! removes a node: they change string contents, durations, matchers, grouping lists and
//! operator spellings only. So [`locate`] lexes the *original* text (skipping string literals,
//! comments, matcher lists `{...}` and range brackets `[...]` as single tokens) and walks the
//! tree in source order beside the tokens, taking each node's first token as its start. Every
//! name it meets (metric, function, aggregation) is checked against the tree: when the text and
//! the tree disagree anywhere, the whole table is left empty, so that a position is either
//! exact or absent, never wrong.
//!
//! The table is keyed by node address (as the evaluator keys its per-node state), so it
//! belongs to one tree: the engine builds it for the tree it evaluates, after taking it from
//! the parse cache. It depends only on the text and the tree, both fixed by the cache key.
//!
//! Which node an annotation points at follows Prometheus: see [`Spot`] and [`Positions::of`].

use std::collections::HashMap;
use std::fmt;

use promql_parser::parser::{AggregateExpr, Call, Expr, VectorSelector};

use super::extended::skip_string;

/// A position as Prometheus prints it: the 1-based line, and the column, which is the byte
/// offset from the last line break before it (1 for the first byte of a line).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Position {
    /// 1-based line.
    pub line: usize,
    /// Byte offset from the last line break before it (1 for a line's first byte).
    pub column: usize,
}

impl Position {
    /// The position of byte `offset` of `query`, as Go's `StartPosInput` computes it: lines are
    /// counted by `\n`, columns in bytes (a non-ASCII character before the node counts as its
    /// UTF-8 length).
    pub fn at(query: &str, offset: usize) -> Self {
        let before = query.as_bytes().get(..offset).unwrap_or(query.as_bytes());
        let line = 1 + before.iter().filter(|&&b| b == b'\n').count();
        let column = match before.iter().rposition(|&b| b == b'\n') {
            Some(nl) => offset - nl,
            None => offset + 1,
        };
        Self { line, column }
    }
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.column)
    }
}

/// Which node of the one being evaluated an annotation refers to (as Prometheus chooses it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Spot {
    /// The default: for a function call its sample argument (`histogram_quantile`'s second,
    /// `histogram_fraction`'s third, otherwise the first), for an aggregation the aggregated
    /// expression, for any other node the node itself.
    Subject,
    /// The parameter: an aggregation's (`quantile`, `limit_ratio`), a call's first argument.
    Param,
    /// The node itself (`topk` ignoring histograms, `sort` in a range query).
    Node,
    /// A call's argument by index (`histogram_quantiles`' quantiles).
    Arg(usize),
}

/// What is known of one node.
#[derive(Clone, Debug, Default)]
struct Entry {
    at: Option<Position>,
    subject: Option<Position>,
    param: Option<Position>,
    args: Vec<Option<Position>>,
}

/// The positions of a tree's nodes, by node address (see the module documentation).
#[derive(Clone, Debug, Default)]
pub struct Positions {
    nodes: HashMap<usize, Entry>,
}

impl Positions {
    /// Where the annotation of `spot` points when node `node` (its address) is evaluated.
    pub fn of(&self, node: usize, spot: Spot) -> Option<Position> {
        let e = self.nodes.get(&node)?;
        match spot {
            Spot::Subject => e.subject,
            Spot::Param => e.param,
            Spot::Node => e.at,
            Spot::Arg(i) => e.args.get(i).copied().flatten(),
        }
    }

    /// True when no node was located.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }
}

/// The address a node is known by (the evaluator's key for its per-node state).
pub fn key<T>(node: &T) -> usize {
    node as *const T as usize
}

/// The positions of the nodes of `expr`, parsed from `query` (the original text, before any
/// rewrite). Empty when the text and the tree disagree (see the module documentation).
pub fn locate(query: &str, expr: &Expr) -> Positions {
    let Some(starts) = starts(query, expr) else { return Positions::default() };
    let pos = |k: usize| starts.get(&k).map(|&o| Position::at(query, o));
    let mut nodes = HashMap::new();
    let mut stack = vec![expr];
    while let Some(e) = stack.pop() {
        let k = node_key(e);
        let at = pos(k);
        let entry = match e {
            Expr::Call(c) => {
                let args: Vec<Option<Position>> = c.args.args.iter().map(|a| pos(node_key(a))).collect();
                let sample = match c.func.name {
                    "histogram_quantile" => 1,
                    "histogram_fraction" => 2,
                    _ => 0,
                };
                let subject = if args.is_empty() { at } else { args.get(sample).copied().flatten() };
                Entry { at, subject, param: args.first().copied().flatten(), args }
            }
            Expr::Aggregate(a) => Entry {
                at,
                subject: pos(node_key(&a.expr)),
                param: a.param.as_deref().and_then(|p| pos(node_key(p))),
                args: Vec::new(),
            },
            _ => Entry { at, subject: at, param: None, args: Vec::new() },
        };
        nodes.insert(k, entry);
        stack.extend(children(e));
    }
    Positions { nodes }
}

/// The key of `e`: the address of its variant's content (what the evaluator keys by).
pub fn node_key(e: &Expr) -> usize {
    match e {
        Expr::Aggregate(x) => key(x),
        Expr::Unary(x) => key(x),
        Expr::Binary(x) => key(x),
        Expr::Paren(x) => key(x),
        Expr::Subquery(x) => key(x),
        Expr::NumberLiteral(x) => key(x),
        Expr::StringLiteral(x) => key(x),
        Expr::VectorSelector(x) => key(x),
        Expr::MatrixSelector(x) => key(x),
        Expr::Call(x) => key(x),
        Expr::Extension(x) => key(x),
    }
}

/// The direct children of `e`, in source order.
fn children(e: &Expr) -> Vec<&Expr> {
    match e {
        Expr::Aggregate(a) => a.param.as_deref().into_iter().chain(std::iter::once(&*a.expr)).collect(),
        Expr::Unary(u) => vec![&*u.expr],
        Expr::Binary(b) => vec![&*b.lhs, &*b.rhs],
        Expr::Paren(p) => vec![&*p.expr],
        Expr::Subquery(s) => vec![&*s.expr],
        Expr::Call(c) => c.args.args.iter().map(|a| &**a).collect(),
        _ => Vec::new(),
    }
}

/// The byte offset in `query` where each node of `expr` starts, by [`node_key`]; `None` when
/// the text and the tree disagree.
pub fn starts(query: &str, expr: &Expr) -> Option<HashMap<usize, usize>> {
    let tokens = lex(query);
    let mut w = Walker { tokens: &tokens, i: 0, starts: HashMap::new() };
    w.node(expr)?;
    // Everything must be used: a trailing token means the walk went astray.
    (w.i == tokens.len()).then_some(w.starts)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// A name or keyword (`[A-Za-z_:][A-Za-z0-9_:]*`).
    Word,
    /// A number or duration literal.
    Number,
    /// A string literal.
    Str,
    /// A whole matcher list `{...}`.
    Braces,
    /// A whole range or subquery bracket `[...]`.
    Brackets,
    Open,
    Close,
    Comma,
    At,
    /// An operator (`+`, `==`, `</`, ...).
    Op,
    /// Anything else, one character.
    Other,
}

#[derive(Clone, Copy, Debug)]
struct Token<'q> {
    kind: Kind,
    text: &'q str,
    start: usize,
}

/// The tokens of `query`, without white space and comments.
fn lex(query: &str) -> Vec<Token<'_>> {
    let b = query.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let start = i;
        let c = b[i];
        let kind = match c {
            b' ' | b'\t' | b'\n' | b'\r' => {
                i += 1;
                continue;
            }
            b'#' => {
                i = b[i..].iter().position(|&c| c == b'\n').map_or(b.len(), |p| i + p);
                continue;
            }
            b'"' | b'\'' | b'`' => {
                i = skip_string(b, i, b[i]);
                Kind::Str
            }
            b'{' | b'[' => {
                let close = if c == b'{' { b'}' } else { b']' };
                let mut depth = 0usize;
                while i < b.len() {
                    match b[i] {
                        b'"' | b'\'' | b'`' if c == b'{' => {
                            i = skip_string(b, i, b[i]);
                            continue;
                        }
                        x if x == c => depth += 1,
                        x if x == close => {
                            depth -= 1;
                            if depth == 0 {
                                i += 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                    i += 1;
                }
                if c == b'{' {
                    Kind::Braces
                } else {
                    Kind::Brackets
                }
            }
            b'(' => {
                i += 1;
                Kind::Open
            }
            b')' => {
                i += 1;
                Kind::Close
            }
            b',' => {
                i += 1;
                Kind::Comma
            }
            b'@' => {
                i += 1;
                Kind::At
            }
            c if c.is_ascii_alphabetic() || c == b'_' || c == b':' => {
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] == b':') {
                    i += 1;
                }
                Kind::Word
            }
            c if c.is_ascii_digit() || (c == b'.' && b.get(i + 1).is_some_and(u8::is_ascii_digit)) => {
                let hex = c == b'0' && matches!(b.get(i + 1), Some(b'x' | b'X'));
                while i < b.len() {
                    let x = b[i];
                    let exponent_sign = !hex
                        && matches!(x, b'+' | b'-')
                        && matches!(b[i - 1], b'e' | b'E')
                        && b.get(i + 1).is_some_and(u8::is_ascii_digit);
                    if x.is_ascii_alphanumeric() || x == b'.' || x == b'_' || exponent_sign {
                        i += 1;
                    } else {
                        break;
                    }
                }
                Kind::Number
            }
            _ => {
                let two = b.get(i..i + 2).unwrap_or_default();
                let len = match two {
                    b"==" | b"!=" | b">=" | b"<=" | b"</" | b">/" | b"=~" | b"!~" => 2,
                    _ if matches!(c, b'+' | b'-' | b'*' | b'/' | b'%' | b'^' | b'<' | b'>' | b'=') => 1,
                    _ => 0,
                };
                if len > 0 {
                    i += len;
                    Kind::Op
                } else {
                    // One character, whole (never inside one: the text stays on char boundaries).
                    i += query[i..].chars().next().map_or(1, char::len_utf8);
                    Kind::Other
                }
            }
        };
        out.push(Token { kind, text: query.get(start..i).unwrap_or(""), start });
    }
    out
}

/// The walk of a tree beside its tokens (see [`starts`]).
struct Walker<'t, 'q> {
    tokens: &'t [Token<'q>],
    i: usize,
    starts: HashMap<usize, usize>,
}

impl<'q> Walker<'_, 'q> {
    fn peek(&self) -> Option<Token<'q>> {
        self.tokens.get(self.i).copied()
    }

    fn peek_word(&self, words: &[&str]) -> bool {
        self.peek().is_some_and(|t| t.kind == Kind::Word && words.iter().any(|w| t.text.eq_ignore_ascii_case(w)))
    }

    /// Takes the next token if it is of `kind`; returns its start.
    fn take(&mut self, kind: Kind) -> Option<usize> {
        let t = self.peek().filter(|t| t.kind == kind)?;
        self.i += 1;
        Some(t.start)
    }

    /// Takes the next token if it is the operator `op`.
    fn take_op(&mut self, op: &str) -> Option<usize> {
        let t = self.peek().filter(|t| t.kind == Kind::Op && t.text == op)?;
        self.i += 1;
        Some(t.start)
    }

    /// Skips a parenthesized group (the next token must open it).
    fn skip_group(&mut self) -> Option<()> {
        self.take(Kind::Open)?;
        let mut depth = 1usize;
        while depth > 0 {
            let t = self.peek()?;
            self.i += 1;
            match t.kind {
                Kind::Open => depth += 1,
                Kind::Close => depth -= 1,
                _ => {}
            }
        }
        Some(())
    }

    /// Skips the argument of `offset` or `@`: signs, then a group, or a token optionally
    /// followed by a group (`5m`, `-(1m*2)`, `start()`, `min_of(step(), 1s)`).
    fn skip_atom(&mut self) -> Option<()> {
        while self.take_op("-").or_else(|| self.take_op("+")).is_some() {}
        if self.peek()?.kind == Kind::Open {
            return self.skip_group();
        }
        self.i += 1;
        if self.peek().is_some_and(|t| t.kind == Kind::Open) {
            self.skip_group()?;
        }
        Some(())
    }

    /// Records and returns where `e` starts, consuming its tokens and any modifiers after it.
    fn node(&mut self, e: &Expr) -> Option<usize> {
        // A unary plus leaves no node in promql-parser's tree; in Prometheus' it is a unary
        // expression (or the number it signs), which starts at the sign.
        let plus = match e {
            Expr::NumberLiteral(_) => None,
            _ => {
                let first = self.take_op("+");
                while self.take_op("+").is_some() {}
                first
            }
        };
        let start = match e {
            Expr::Paren(p) => {
                let s = self.take(Kind::Open)?;
                self.node(&p.expr)?;
                self.take(Kind::Close)?;
                s
            }
            Expr::Unary(u) => {
                let s = self.take_op("-")?;
                self.node(&u.expr)?;
                s
            }
            Expr::NumberLiteral(_) => {
                let s = self.peek()?.start;
                while self.take_op("-").or_else(|| self.take_op("+")).is_some() {}
                self.peek().filter(|t| matches!(t.kind, Kind::Number | Kind::Word))?;
                self.i += 1;
                s
            }
            Expr::StringLiteral(_) => self.take(Kind::Str)?,
            Expr::VectorSelector(vs) => self.selector(vs)?,
            Expr::MatrixSelector(ms) => {
                let s = self.selector(&ms.vs)?;
                self.take(Kind::Brackets)?;
                s
            }
            Expr::Subquery(sq) => {
                let s = self.node(&sq.expr)?;
                self.take(Kind::Brackets)?;
                s
            }
            Expr::Call(c) => self.call(c)?,
            Expr::Aggregate(a) => self.aggregate(a)?,
            Expr::Binary(b) => {
                let s = self.node(&b.lhs)?;
                // The operator: a symbol, or `and`/`or`/`unless`/`atan2`.
                self.peek().filter(|t| matches!(t.kind, Kind::Op | Kind::Word))?;
                self.i += 1;
                loop {
                    if self.peek_word(&["bool"]) {
                        self.i += 1;
                    } else if self.peek_word(&["on", "ignoring"]) {
                        self.i += 1;
                        self.skip_group()?;
                    } else if self.peek_word(&["group_left", "group_right"]) {
                        self.i += 1;
                        if self.peek().is_some_and(|t| t.kind == Kind::Open) {
                            self.skip_group()?;
                        }
                    } else {
                        break;
                    }
                }
                self.node(&b.rhs)?;
                s
            }
            Expr::Extension(_) => return None,
        };
        let start = plus.unwrap_or(start);
        self.modifiers()?;
        self.starts.insert(node_key(e), start);
        Some(start)
    }

    /// Skips `offset ...`, `@ ...`, `anchored` and `smoothed` after a node.
    fn modifiers(&mut self) -> Option<()> {
        loop {
            if self.peek_word(&["offset"]) || self.peek().is_some_and(|t| t.kind == Kind::At) {
                self.i += 1;
                self.skip_atom()?;
            } else if self.peek_word(&["anchored", "smoothed"]) {
                self.i += 1;
            } else {
                return Some(());
            }
        }
    }

    /// A selector's name and matchers.
    fn selector(&mut self, vs: &VectorSelector) -> Option<usize> {
        let t = self.peek()?;
        match t.kind {
            Kind::Word => {
                if vs.name.as_deref().is_some_and(|n| n != t.text) {
                    return None;
                }
                self.i += 1;
                let _ = self.take(Kind::Braces);
                Some(t.start)
            }
            Kind::Braces => {
                self.i += 1;
                Some(t.start)
            }
            _ => None,
        }
    }

    fn call(&mut self, c: &Call) -> Option<usize> {
        let t = self.peek().filter(|t| t.kind == Kind::Word && t.text == c.func.name)?;
        self.i += 1;
        self.take(Kind::Open)?;
        for (n, a) in c.args.args.iter().enumerate() {
            if self.peek()?.kind == Kind::Close {
                // An argument the parser supplied: it has no text.
                break;
            }
            if n > 0 {
                self.take(Kind::Comma)?;
            }
            self.node(a)?;
        }
        self.take(Kind::Close)?;
        Some(t.start)
    }

    fn aggregate(&mut self, a: &AggregateExpr) -> Option<usize> {
        let op = a.op.to_string();
        let t = self.peek().filter(|t| t.kind == Kind::Word && t.text.eq_ignore_ascii_case(&op))?;
        self.i += 1;
        self.grouping()?;
        self.take(Kind::Open)?;
        if let Some(p) = &a.param {
            self.node(p)?;
            self.take(Kind::Comma)?;
        }
        self.node(&a.expr)?;
        self.take(Kind::Close)?;
        self.grouping()?;
        Some(t.start)
    }

    /// Skips an aggregation's `by (...)` / `without (...)`, if there.
    fn grouping(&mut self) -> Option<()> {
        if self.peek_word(&["by", "without"]) {
            self.i += 1;
            self.skip_group()?;
        }
        Some(())
    }
}

#[cfg(test)]
#[path = "positions_tests.rs"]
mod tests;
