//! The lexer: Go's `text/template/parse` scanner (`{{`/`}}` delimiters, `{{-`/`-}}` trim
//! markers, comments), producing the whole token list up front. It stops at the first error,
//! which it reports as an [`Kind::Error`] token for the parser to raise where it reaches it.

use super::strconv::{quote, unicode_sharp};

/// A token's kind (Go's `itemType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Error,
    Bool,
    Char,
    CharConstant,
    Complex,
    Assign,
    Declare,
    Eof,
    Field,
    Identifier,
    LeftDelim,
    LeftParen,
    Number,
    Pipe,
    RawString,
    RightDelim,
    RightParen,
    Space,
    String,
    Text,
    Variable,
    // Keywords.
    Block,
    Break,
    Continue,
    Dot,
    Define,
    Else,
    End,
    If,
    Nil,
    Range,
    Template,
    With,
}

impl Kind {
    fn is_keyword(self) -> bool {
        matches!(
            self,
            Kind::Block
                | Kind::Break
                | Kind::Continue
                | Kind::Dot
                | Kind::Define
                | Kind::Else
                | Kind::End
                | Kind::If
                | Kind::Nil
                | Kind::Range
                | Kind::Template
                | Kind::With
        )
    }

    fn keyword(word: &str) -> Option<Kind> {
        Some(match word {
            "block" => Kind::Block,
            "break" => Kind::Break,
            "continue" => Kind::Continue,
            "define" => Kind::Define,
            "else" => Kind::Else,
            "end" => Kind::End,
            "if" => Kind::If,
            "nil" => Kind::Nil,
            "range" => Kind::Range,
            "template" => Kind::Template,
            "with" => Kind::With,
            _ => return None,
        })
    }
}

/// A token: its kind, byte offset, text (the message for an error) and line.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Item {
    pub(super) kind: Kind,
    pub(super) pos: usize,
    pub(super) val: String,
    pub(super) line: usize,
}

impl std::fmt::Display for Item {
    /// Go's `item.String`, as parse errors quote tokens.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.kind {
            Kind::Eof => f.write_str("EOF"),
            Kind::Error => f.write_str(&self.val),
            k if k.is_keyword() => write!(f, "<{}>", self.val),
            _ if self.val.len() > 10 => {
                let head: String = self.val.chars().take(10).collect();
                write!(f, "{}...", quote(&head))
            }
            _ => f.write_str(&quote(&self.val)),
        }
    }
}

const LEFT_DELIM: &str = "{{";
const RIGHT_DELIM: &str = "}}";
const LEFT_COMMENT: &str = "/*";
const RIGHT_COMMENT: &str = "*/";

fn is_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\r' | '\n')
}

fn is_space_byte(b: Option<&u8>) -> bool {
    matches!(b, Some(b' ' | b'\t' | b'\r' | b'\n'))
}

fn is_alphanumeric(c: char) -> bool {
    c == '_' || c.is_alphabetic() || c.is_numeric()
}

fn has_left_trim_marker(s: &str) -> bool {
    s.as_bytes().first() == Some(&b'-') && is_space_byte(s.as_bytes().get(1))
}

fn has_right_trim_marker(s: &str) -> bool {
    is_space_byte(s.as_bytes().first()) && s.as_bytes().get(1) == Some(&b'-')
}

fn trim_len_right(s: &str) -> usize {
    s.len() - s.trim_end_matches(is_space).len()
}

fn trim_len_left(s: &str) -> usize {
    s.len() - s.trim_start_matches(is_space).len()
}

struct Lexer<'a> {
    input: &'a str,
    pos: usize,
    start: usize,
    paren_depth: i64,
    newlines: Vec<usize>,
    items: Vec<Item>,
}

/// What to scan next.
enum State {
    Text,
    InsideAction,
    Done,
}

/// Scans `input` into tokens; the last is [`Kind::Eof`] or [`Kind::Error`].
pub(super) fn lex(input: &str) -> Vec<Item> {
    let newlines = input.bytes().enumerate().filter(|&(_, b)| b == b'\n').map(|(i, _)| i).collect();
    let mut l = Lexer { input, pos: 0, start: 0, paren_depth: 0, newlines, items: Vec::new() };
    let mut state = State::Text;
    loop {
        state = match state {
            State::Text => l.lex_text(),
            State::InsideAction => l.lex_inside_action(),
            State::Done => return l.items,
        };
    }
}

impl Lexer<'_> {
    fn line_at(&self, pos: usize) -> usize {
        1 + self.newlines.partition_point(|&n| n < pos)
    }

    fn rest(&self) -> &str {
        &self.input[self.pos..]
    }

    fn next(&mut self) -> Option<char> {
        let c = self.rest().chars().next()?;
        self.pos += c.len_utf8();
        Some(c)
    }

    fn backup(&mut self, c: Option<char>) {
        if let Some(c) = c {
            self.pos -= c.len_utf8();
        }
    }

    fn peek(&self) -> Option<char> {
        self.rest().chars().next()
    }

    fn emit_range(&mut self, kind: Kind, start: usize, end: usize) {
        let val = self.input[start..end].to_owned();
        let line = self.line_at(start);
        self.items.push(Item { kind, pos: start, val, line });
        self.start = end;
    }

    fn emit(&mut self, kind: Kind) -> State {
        self.emit_range(kind, self.start, self.pos);
        State::InsideAction
    }

    fn errorf(&mut self, msg: String) -> State {
        let line = self.line_at(self.start);
        self.items.push(Item { kind: Kind::Error, pos: self.start, val: msg, line });
        State::Done
    }

    fn accept(&mut self, valid: &str) -> bool {
        let c = self.next();
        if c.is_some_and(|c| valid.contains(c)) {
            return true;
        }
        self.backup(c);
        false
    }

    fn accept_run(&mut self, valid: &str) {
        while self.accept(valid) {}
    }

    fn lex_text(&mut self) -> State {
        let Some(x) = self.rest().find(LEFT_DELIM) else {
            self.pos = self.input.len();
            if self.pos > self.start {
                self.emit_range(Kind::Text, self.start, self.pos);
            }
            self.emit_range(Kind::Eof, self.pos, self.pos);
            return State::Done;
        };
        if x > 0 {
            self.pos += x;
            let trim = if has_left_trim_marker(&self.input[self.pos + LEFT_DELIM.len()..]) {
                trim_len_right(&self.input[self.start..self.pos])
            } else {
                0
            };
            if self.pos - trim > self.start {
                self.emit_range(Kind::Text, self.start, self.pos - trim);
            }
            self.start = self.pos;
        }
        self.lex_left_delim()
    }

    fn lex_left_delim(&mut self) -> State {
        self.pos += LEFT_DELIM.len();
        let after_marker = if has_left_trim_marker(self.rest()) { 2 } else { 0 };
        if self.input[self.pos + after_marker..].starts_with(LEFT_COMMENT) {
            self.pos += after_marker;
            self.start = self.pos;
            return self.lex_comment();
        }
        self.emit_range(Kind::LeftDelim, self.start, self.pos);
        self.pos += after_marker;
        self.start = self.pos;
        self.paren_depth = 0;
        State::InsideAction
    }

    fn lex_comment(&mut self) -> State {
        self.pos += LEFT_COMMENT.len();
        let Some(x) = self.rest().find(RIGHT_COMMENT) else {
            return self.errorf("unclosed comment".into());
        };
        self.pos += x + RIGHT_COMMENT.len();
        let (delim, trim) = self.at_right_delim();
        if !delim {
            return self.errorf("comment ends before closing delimiter".into());
        }
        if trim {
            self.pos += 2;
        }
        self.pos += RIGHT_DELIM.len();
        if trim {
            self.pos += trim_len_left(self.rest());
        }
        self.start = self.pos;
        State::Text
    }

    /// Whether a right delimiter, possibly after a trim marker (` -}}`), comes next.
    fn at_right_delim(&self) -> (bool, bool) {
        let rest = self.rest();
        if has_right_trim_marker(rest) && rest[2..].starts_with(RIGHT_DELIM) {
            return (true, true);
        }
        (rest.starts_with(RIGHT_DELIM), false)
    }

    fn lex_right_delim(&mut self) -> State {
        let (_, trim) = self.at_right_delim();
        if trim {
            self.pos += 2;
            self.start = self.pos;
        }
        self.pos += RIGHT_DELIM.len();
        self.emit_range(Kind::RightDelim, self.start, self.pos);
        if trim {
            self.pos += trim_len_left(self.rest());
            self.start = self.pos;
        }
        State::Text
    }

    fn lex_inside_action(&mut self) -> State {
        if self.at_right_delim().0 {
            if self.paren_depth == 0 {
                return self.lex_right_delim();
            }
            return self.errorf("unclosed left paren".into());
        }
        let Some(c) = self.next() else {
            return self.errorf("unclosed action".into());
        };
        match c {
            c if is_space(c) => {
                self.backup(Some(c));
                self.lex_space()
            }
            '=' => self.emit(Kind::Assign),
            ':' => {
                if self.next() != Some('=') {
                    return self.errorf("expected :=".into());
                }
                self.emit(Kind::Declare)
            }
            '|' => self.emit(Kind::Pipe),
            '"' => self.lex_quote(),
            '`' => self.lex_raw_quote(),
            '$' => self.lex_variable(),
            '\'' => self.lex_char(),
            '.' if self.rest().as_bytes().first().is_some_and(|b| !b.is_ascii_digit()) => {
                self.lex_field_or_variable(Kind::Field)
            }
            '.' | '+' | '-' | '0'..='9' => {
                self.backup(Some(c));
                self.lex_number()
            }
            c if is_alphanumeric(c) => {
                self.backup(Some(c));
                self.lex_identifier()
            }
            '(' => {
                self.paren_depth += 1;
                self.emit(Kind::LeftParen)
            }
            ')' => {
                self.paren_depth -= 1;
                if self.paren_depth < 0 {
                    return self.errorf("unexpected right paren".into());
                }
                self.emit(Kind::RightParen)
            }
            c if c.is_ascii() && !c.is_ascii_control() => self.emit(Kind::Char),
            c => self.errorf(format!("unrecognized character in action: {}", unicode_sharp(c))),
        }
    }

    fn lex_space(&mut self) -> State {
        let mut spaces = 0;
        while self.peek().is_some_and(is_space) {
            self.pos += 1;
            spaces += 1;
        }
        let last = &self.input[self.pos - 1..];
        if has_right_trim_marker(last) && last[2..].starts_with(RIGHT_DELIM) {
            self.pos -= 1;
            if spaces == 1 {
                return self.lex_right_delim();
            }
        }
        self.emit(Kind::Space)
    }

    fn lex_identifier(&mut self) -> State {
        loop {
            let c = self.next();
            if c.is_some_and(is_alphanumeric) {
                continue;
            }
            self.backup(c);
            if !self.at_terminator() {
                return self.bad_character(c);
            }
            let word = &self.input[self.start..self.pos];
            let kind = match Kind::keyword(word) {
                Some(k) => k,
                None if word == "true" || word == "false" => Kind::Bool,
                None => Kind::Identifier,
            };
            return self.emit(kind);
        }
    }

    fn bad_character(&mut self, c: Option<char>) -> State {
        let shown = c.map(unicode_sharp).unwrap_or_else(|| "U+FFFFFFFFFFFFFFFF".into());
        self.errorf(format!("bad character {shown}"))
    }

    fn lex_variable(&mut self) -> State {
        if self.at_terminator() {
            return self.emit(Kind::Variable);
        }
        self.lex_field_or_variable(Kind::Variable)
    }

    fn lex_field_or_variable(&mut self, kind: Kind) -> State {
        if self.at_terminator() {
            return self.emit(if kind == Kind::Variable { Kind::Variable } else { Kind::Dot });
        }
        let mut c;
        loop {
            c = self.next();
            if !c.is_some_and(is_alphanumeric) {
                self.backup(c);
                break;
            }
        }
        if !self.at_terminator() {
            return self.bad_character(c);
        }
        self.emit(kind)
    }

    /// Whether what follows may end an identifier, field or variable.
    fn at_terminator(&self) -> bool {
        match self.peek() {
            None => true,
            Some(c) if is_space(c) => true,
            Some('.' | ',' | '|' | ':' | ')' | '(') => true,
            Some(_) => self.rest().starts_with(RIGHT_DELIM),
        }
    }

    fn lex_char(&mut self) -> State {
        loop {
            match self.next() {
                Some('\\') => {
                    if matches!(self.next(), Some(c) if c != '\n') {
                        continue;
                    }
                    return self.errorf("unterminated character constant".into());
                }
                None | Some('\n') => return self.errorf("unterminated character constant".into()),
                Some('\'') => return self.emit(Kind::CharConstant),
                Some(_) => {}
            }
        }
    }

    fn lex_number(&mut self) -> State {
        if !self.scan_number() {
            return self.bad_number();
        }
        if matches!(self.peek(), Some('+' | '-')) {
            if !self.scan_number() || !self.input[..self.pos].ends_with('i') {
                return self.bad_number();
            }
            return self.emit(Kind::Complex);
        }
        self.emit(Kind::Number)
    }

    fn bad_number(&mut self) -> State {
        let text = quote(&self.input[self.start..self.pos]);
        self.errorf(format!("bad number syntax: {text}"))
    }

    fn scan_number(&mut self) -> bool {
        self.accept("+-");
        let mut digits = "0123456789_";
        if self.accept("0") {
            if self.accept("xX") {
                digits = "0123456789abcdefABCDEF_";
            } else if self.accept("oO") {
                digits = "01234567_";
            } else if self.accept("bB") {
                digits = "01_";
            }
        }
        self.accept_run(digits);
        if self.accept(".") {
            self.accept_run(digits);
        }
        if digits.len() == 11 && self.accept("eE") {
            self.accept("+-");
            self.accept_run("0123456789_");
        }
        if digits.len() == 23 && self.accept("pP") {
            self.accept("+-");
            self.accept_run("0123456789_");
        }
        self.accept("i");
        if self.peek().is_some_and(is_alphanumeric) {
            self.next();
            return false;
        }
        true
    }

    fn lex_quote(&mut self) -> State {
        loop {
            match self.next() {
                Some('\\') => {
                    if matches!(self.next(), Some(c) if c != '\n') {
                        continue;
                    }
                    return self.errorf("unterminated quoted string".into());
                }
                None | Some('\n') => return self.errorf("unterminated quoted string".into()),
                Some('"') => return self.emit(Kind::String),
                Some(_) => {}
            }
        }
    }

    fn lex_raw_quote(&mut self) -> State {
        loop {
            match self.next() {
                None => return self.errorf("unterminated raw quoted string".into()),
                Some('`') => return self.emit(Kind::RawString),
                Some(_) => {}
            }
        }
    }
}
