//! The parser: Go's `text/template/parse` recursive descent over the [`lex`](super::lex)
//! tokens, with its three-token lookahead (error lines come from the latest token read, as in
//! Go), its variable scoping checks and its error wording.

use std::collections::HashMap;

use super::ast::{
    is_empty_list, new_number, Action, Arg, Command, Conditional, List, Node, Pipe, RangeNode, TemplateNode,
};
use super::lex::{lex, Item, Kind};
use super::strconv::{quote, unquote};
use super::{funcs::Func, MAX_DEPTH};

/// The templates of one text by name: the top-level one and those `{{define}}`d or
/// `{{block}}`ed in it.
pub(super) type TreeSet = HashMap<String, List>;

type PResult<T> = Result<T, String>;

/// Where a list of items ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Term {
    End,
    Else,
}

impl Term {
    fn text(self) -> &'static str {
        match self {
            Term::End => "{{end}}",
            Term::Else => "{{else}}",
        }
    }
}

/// What `textOrAction` found.
enum Parsed {
    Node(Node),
    Term(Term),
}

struct Parser {
    items: std::vec::IntoIter<Item>,
    last: Item,
    token: [Item; 3],
    peek_count: usize,
    vars: Vec<String>,
    tree_set: TreeSet,
    parse_name: String,
    action_line: usize,
    range_depth: usize,
    depth: usize,
}

/// Parses `text` named `name`: the templates it defines, `name` among them. The error is Go's
/// (`template: name:line: message`).
pub(super) fn parse(name: &str, text: &str) -> Result<TreeSet, String> {
    let blank = Item { kind: Kind::Eof, pos: 0, val: String::new(), line: 0 };
    let mut p = Parser {
        items: lex(text).into_iter(),
        last: blank.clone(),
        token: [blank.clone(), blank.clone(), blank],
        peek_count: 0,
        vars: vec!["$".to_owned()],
        tree_set: TreeSet::new(),
        parse_name: name.to_owned(),
        action_line: 0,
        range_depth: 0,
        depth: 0,
    };
    let root = p.parse_top()?;
    p.add(name.to_owned(), root)?;
    Ok(p.tree_set)
}

impl Parser {
    fn lex_next(&mut self) -> Item {
        match self.items.next() {
            Some(item) => {
                self.last = item.clone();
                item
            }
            // After an error or the end, the lexer keeps answering EOF.
            None => Item { kind: Kind::Eof, pos: self.last.pos, val: "EOF".into(), line: self.last.line },
        }
    }

    fn next(&mut self) -> Item {
        if self.peek_count > 0 {
            self.peek_count -= 1;
        } else {
            self.token[0] = self.lex_next();
        }
        self.token[self.peek_count].clone()
    }

    fn backup(&mut self) {
        self.peek_count += 1;
    }

    fn backup2(&mut self, t1: Item) {
        self.token[1] = t1;
        self.peek_count = 2;
    }

    fn backup3(&mut self, t2: Item, t1: Item) {
        self.token[1] = t1;
        self.token[2] = t2;
        self.peek_count = 3;
    }

    fn peek(&mut self) -> Item {
        if self.peek_count > 0 {
            return self.token[self.peek_count - 1].clone();
        }
        self.peek_count = 1;
        self.token[0] = self.lex_next();
        self.token[0].clone()
    }

    fn next_non_space(&mut self) -> Item {
        loop {
            let t = self.next();
            if t.kind != Kind::Space {
                return t;
            }
        }
    }

    fn peek_non_space(&mut self) -> Item {
        let t = self.next_non_space();
        self.backup();
        t
    }

    fn errorf<T>(&self, msg: impl std::fmt::Display) -> PResult<T> {
        Err(format!("template: {}:{}: {msg}", self.parse_name, self.token[0].line))
    }

    fn expect(&mut self, kind: Kind, context: &str) -> PResult<Item> {
        let t = self.next_non_space();
        if t.kind != kind {
            return self.unexpected(&t, context);
        }
        Ok(t)
    }

    fn unexpected<T>(&self, token: &Item, context: &str) -> PResult<T> {
        if token.kind == Kind::Error {
            let mut extra = String::new();
            if self.action_line != 0 && self.action_line != token.line {
                extra = format!(" in action started at {}:{}", self.parse_name, self.action_line);
                if token.val.ends_with(" action") {
                    extra = extra[" in action".len()..].to_owned();
                }
            }
            return self.errorf(format_args!("{token}{extra}"));
        }
        self.errorf(format_args!("unexpected {token} in {context}"))
    }

    /// Counts one level of nesting (control structure or parenthesized pipeline).
    fn enter(&mut self, what: &str) -> PResult<()> {
        if self.depth >= MAX_DEPTH {
            return self.errorf(format_args!("max {what} depth exceeded"));
        }
        self.depth += 1;
        Ok(())
    }

    /// Go's `add`: a template may be defined twice only if one definition is empty.
    fn add(&mut self, name: String, root: List) -> PResult<()> {
        match self.tree_set.get(&name) {
            Some(existing) if !is_empty_list(existing) => {
                if !is_empty_list(&root) {
                    return self.errorf(format_args!("template: multiple definition of template {}", quote(&name)));
                }
            }
            _ => {
                self.tree_set.insert(name, root);
            }
        }
        Ok(())
    }

    fn parse_top(&mut self) -> PResult<List> {
        let mut root = List::new();
        while self.peek().kind != Kind::Eof {
            if self.peek().kind == Kind::LeftDelim {
                let delim = self.next();
                if self.next_non_space().kind == Kind::Define {
                    let saved = (std::mem::replace(&mut self.vars, vec!["$".into()]), self.range_depth);
                    self.range_depth = 0;
                    self.parse_definition()?;
                    (self.vars, self.range_depth) = saved;
                    continue;
                }
                self.backup2(delim);
            }
            match self.text_or_action()? {
                Parsed::Term(t) => return self.errorf(format_args!("unexpected {}", t.text())),
                Parsed::Node(n) => root.push(n),
            }
        }
        Ok(root)
    }

    fn parse_definition(&mut self) -> PResult<()> {
        const CONTEXT: &str = "define clause";
        let name = self.next_non_space();
        if name.kind != Kind::String && name.kind != Kind::RawString {
            return self.unexpected(&name, CONTEXT);
        }
        let Some(name) = unquote(&name.val) else { return self.errorf("invalid syntax") };
        self.expect(Kind::RightDelim, CONTEXT)?;
        let (root, end) = self.item_list()?;
        if end != Term::End {
            return self.errorf(format_args!("unexpected {} in {CONTEXT}", end.text()));
        }
        self.add(name, root)
    }

    fn item_list(&mut self) -> PResult<(List, Term)> {
        let mut list = List::new();
        while self.peek_non_space().kind != Kind::Eof {
            match self.text_or_action()? {
                Parsed::Term(t) => return Ok((list, t)),
                Parsed::Node(n) => list.push(n),
            }
        }
        self.errorf("unexpected EOF")
    }

    fn text_or_action(&mut self) -> PResult<Parsed> {
        let token = self.next_non_space();
        match token.kind {
            Kind::Text => Ok(Parsed::Node(Node::Text(token.val))),
            Kind::LeftDelim => {
                self.action_line = token.line;
                let r = self.action();
                self.action_line = 0;
                r
            }
            _ => self.unexpected(&token, "input"),
        }
    }

    fn action(&mut self) -> PResult<Parsed> {
        let token = self.next_non_space();
        let node = match token.kind {
            Kind::Block => self.block_control()?,
            Kind::Break | Kind::Continue => self.branch_control(token.kind)?,
            Kind::Else => return self.else_control().map(|()| Parsed::Term(Term::Else)),
            Kind::End => return self.expect(Kind::RightDelim, "end").map(|_| Parsed::Term(Term::End)),
            Kind::If => Node::If(Box::new(self.conditional("if")?)),
            Kind::With => Node::With(Box::new(self.conditional("with")?)),
            Kind::Range => self.range_control()?,
            Kind::Template => self.template_control()?,
            _ => {
                self.backup();
                Node::Action(Action { pipe: self.pipeline("command", Kind::RightDelim)? })
            }
        };
        Ok(Parsed::Node(node))
    }

    fn branch_control(&mut self, kind: Kind) -> PResult<Node> {
        let (word, node) =
            if kind == Kind::Break { ("{{break}}", Node::Break) } else { ("{{continue}}", Node::Continue) };
        let token = self.next_non_space();
        if token.kind != Kind::RightDelim {
            return self.unexpected(&token, word);
        }
        if self.range_depth == 0 {
            return self.errorf(format_args!("{word} outside {{{{range}}}}"));
        }
        Ok(node)
    }

    fn else_control(&mut self) -> PResult<()> {
        let peek = self.peek_non_space();
        if peek.kind == Kind::If || peek.kind == Kind::With {
            // `{{else if ...}}`: the `if` is left for the enclosing conditional.
            return Ok(());
        }
        self.expect(Kind::RightDelim, "else").map(|_| ())
    }

    /// `{{if}}`/`{{with}}` and their `{{else if}}`/`{{else with}}` chain, to one `{{end}}`.
    fn conditional(&mut self, context: &str) -> PResult<Conditional> {
        let mark = self.vars.len();
        let keyword = if context == "if" { Kind::If } else { Kind::With };
        let mut node = Conditional { branches: Vec::new(), else_list: None };
        let depth = self.depth;
        self.enter("nesting")?;
        loop {
            let pipe = self.pipeline(context, Kind::RightDelim)?;
            let (list, term) = self.item_list()?;
            node.branches.push((pipe, list));
            if term == Term::End {
                break;
            }
            if self.peek().kind == keyword {
                self.next();
                continue;
            }
            let (list, term) = self.item_list()?;
            if term != Term::End {
                return self.errorf(format_args!("expected end; found {}", term.text()));
            }
            node.else_list = Some(list);
            break;
        }
        self.depth = depth;
        self.vars.truncate(mark);
        Ok(node)
    }

    fn range_control(&mut self) -> PResult<Node> {
        let mark = self.vars.len();
        self.enter("nesting")?;
        let pipe = self.pipeline("range", Kind::RightDelim)?;
        self.range_depth += 1;
        let (list, term) = self.item_list()?;
        self.range_depth -= 1;
        let mut else_list = None;
        if term == Term::Else {
            let (list, term) = self.item_list()?;
            if term != Term::End {
                return self.errorf(format_args!("expected end; found {}", term.text()));
            }
            else_list = Some(list);
        }
        self.depth -= 1;
        self.vars.truncate(mark);
        Ok(Node::Range(Box::new(RangeNode { pipe, list, else_list })))
    }

    fn template_name(&mut self, token: &Item, context: &str) -> PResult<String> {
        match token.kind {
            Kind::String | Kind::RawString => match unquote(&token.val) {
                Some(s) => Ok(s),
                None => self.errorf("invalid syntax"),
            },
            _ => self.unexpected(token, context),
        }
    }

    fn block_control(&mut self) -> PResult<Node> {
        const CONTEXT: &str = "block clause";
        let token = self.next_non_space();
        let name = self.template_name(&token, CONTEXT)?;
        let pipe = self.pipeline(CONTEXT, Kind::RightDelim)?;
        let saved = (std::mem::replace(&mut self.vars, vec!["$".into()]), self.range_depth);
        self.range_depth = 0;
        self.enter("nesting")?;
        let (root, end) = self.item_list()?;
        self.depth -= 1;
        (self.vars, self.range_depth) = saved;
        if end != Term::End {
            return self.errorf(format_args!("unexpected {} in {CONTEXT}", end.text()));
        }
        self.add(name.clone(), root)?;
        Ok(Node::Template(TemplateNode { pos: token.pos, name, pipe: Some(pipe) }))
    }

    fn template_control(&mut self) -> PResult<Node> {
        const CONTEXT: &str = "template clause";
        let token = self.next_non_space();
        let name = self.template_name(&token, CONTEXT)?;
        let mut pipe = None;
        if self.next_non_space().kind != Kind::RightDelim {
            self.backup();
            pipe = Some(self.pipeline(CONTEXT, Kind::RightDelim)?);
        }
        Ok(Node::Template(TemplateNode { pos: token.pos, name, pipe }))
    }

    fn pipeline(&mut self, context: &str, end: Kind) -> PResult<Pipe> {
        let token = self.peek_non_space();
        let mut pipe = Pipe { pos: token.pos, is_assign: false, decl: Vec::new(), cmds: Vec::new() };
        loop {
            let v = self.peek_non_space();
            if v.kind != Kind::Variable {
                break;
            }
            self.next();
            let after = self.peek();
            let next = self.peek_non_space();
            if next.kind == Kind::Assign || next.kind == Kind::Declare {
                pipe.is_assign = next.kind == Kind::Assign;
                self.next_non_space();
                pipe.decl.push(v.val.clone());
                self.vars.push(v.val);
            } else if next.kind == Kind::Char && next.val == "," {
                self.next_non_space();
                pipe.decl.push(v.val.clone());
                self.vars.push(v.val);
                if context == "range" && pipe.decl.len() < 2 {
                    match self.peek_non_space().kind {
                        Kind::Variable | Kind::RightDelim | Kind::RightParen => continue,
                        _ => return self.errorf("range can only initialize variables"),
                    }
                }
                return self.errorf(format_args!("too many declarations in {context}"));
            } else if after.kind == Kind::Space {
                self.backup3(v, after);
            } else {
                self.backup2(v);
            }
            break;
        }
        loop {
            let token = self.next_non_space();
            match token.kind {
                k if k == end => {
                    if pipe.cmds.is_empty() {
                        return self.errorf(format_args!("missing value for {context}"));
                    }
                    if let Some(i) = pipe.cmds.iter().skip(1).position(|c| c.args[0].is_constant()) {
                        return self.errorf(format_args!("non executable command in pipeline stage {}", i + 2));
                    }
                    return Ok(pipe);
                }
                Kind::Bool
                | Kind::CharConstant
                | Kind::Complex
                | Kind::Dot
                | Kind::Field
                | Kind::Identifier
                | Kind::Number
                | Kind::Nil
                | Kind::RawString
                | Kind::String
                | Kind::Variable
                | Kind::LeftParen => {
                    self.backup();
                    let cmd = self.command()?;
                    pipe.cmds.push(cmd);
                }
                _ => return self.unexpected(&token, context),
            }
        }
    }

    fn command(&mut self) -> PResult<Command> {
        let mut cmd = Command { pos: self.peek_non_space().pos, args: Vec::new() };
        loop {
            self.peek_non_space();
            if let Some(op) = self.operand()? {
                cmd.args.push(op);
            }
            let token = self.next();
            match token.kind {
                Kind::Space => continue,
                Kind::RightDelim | Kind::RightParen => self.backup(),
                Kind::Pipe => {}
                _ => return self.unexpected(&token, "operand"),
            }
            break;
        }
        if cmd.args.is_empty() {
            return self.errorf("empty command");
        }
        Ok(cmd)
    }

    fn operand(&mut self) -> PResult<Option<Arg>> {
        let Some(node) = self.term()? else { return Ok(None) };
        if self.peek().kind != Kind::Field {
            return Ok(Some(node));
        }
        let pos = self.peek().pos;
        let mut fields = Vec::new();
        while self.peek().kind == Kind::Field {
            fields.push(self.next().val[1..].to_owned());
        }
        Ok(Some(match node {
            Arg::Field { mut idents, .. } => {
                idents.extend(fields);
                Arg::Field { pos, idents }
            }
            Arg::Variable { mut idents, .. } => {
                idents.extend(fields);
                Arg::Variable { pos, idents }
            }
            n if n.is_constant() => {
                return self.errorf(format_args!("unexpected . after term {}", quote(&n.to_string())))
            }
            n => Arg::Chain { pos, node: Box::new(n), fields },
        }))
    }

    fn term(&mut self) -> PResult<Option<Arg>> {
        let token = self.next_non_space();
        let pos = token.pos;
        Ok(Some(match token.kind {
            Kind::Identifier => {
                if Func::lookup(&token.val).is_none() {
                    return self.errorf(format_args!("function {} not defined", quote(&token.val)));
                }
                Arg::Identifier { pos, name: token.val }
            }
            Kind::Dot => Arg::Dot { pos },
            Kind::Nil => Arg::Nil { pos },
            Kind::Variable => {
                if !self.vars.contains(&token.val) {
                    return self.errorf(format_args!("undefined variable {}", quote(&token.val)));
                }
                Arg::Variable { pos, idents: vec![token.val] }
            }
            Kind::Field => Arg::Field { pos, idents: token.val[1..].split('.').map(str::to_owned).collect() },
            Kind::Bool => Arg::Bool { pos, val: token.val == "true" },
            Kind::CharConstant | Kind::Complex | Kind::Number => match new_number(pos, &token.val, token.kind) {
                Ok(n) => Arg::Number(Box::new(n)),
                Err(e) => return self.errorf(e),
            },
            Kind::LeftParen => {
                self.enter("expression")?;
                let pipe = self.pipeline("parenthesized pipeline", Kind::RightParen)?;
                self.depth -= 1;
                Arg::Pipe(Box::new(pipe))
            }
            Kind::String | Kind::RawString => match unquote(&token.val) {
                Some(text) => Arg::String { pos, quoted: token.val, text },
                None => return self.errorf("invalid syntax"),
            },
            _ => {
                self.backup();
                return Ok(None);
            }
        }))
    }
}
