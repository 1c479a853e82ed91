//! The executor: Go's `text/template` `state.walk` and its evaluation of pipelines, fields,
//! variables and calls, with Go's argument checks and error wording (`template: name:1:3:
//! executing "name" at <.Foo>: ...`, the location and context being the last node evaluated,
//! as in Go). Missing map keys give the zero value (Prometheus' `missingkey=zero`).
//!
//! Bounded, unlike Go: output size, steps, and nesting of control structures and templates.

use super::ast::{Arg, Command, Conditional, List, Node, Number, Pipe, RangeNode, TemplateNode};
use super::funcs::{Env, Func};
use super::gofmt::sprint_v;
use super::gotime::Method;
use super::parse::TreeSet;
use super::strconv::quote;
use super::value::{Ty, Value};
use super::{MAX_DEPTH, MAX_OUTPUT, MAX_STEPS};

type EResult<T> = Result<T, String>;

/// How a list of nodes ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flow {
    Normal,
    Break,
    Continue,
}

/// The node an error is reported at.
#[derive(Clone, Copy)]
enum Loc<'t> {
    None,
    Node(&'t Node),
    Pipe(&'t Pipe),
    Cmd(&'t Command),
    Arg(&'t Arg),
}

/// What a call calls.
#[derive(Clone)]
enum Callee {
    Func(Func),
    Method(Method, Value),
}

struct State<'t, 'e> {
    trees: &'t TreeSet,
    text: &'t str,
    top_name: &'t str,
    name: &'t str,
    vars: Vec<(&'t str, Value)>,
    at: Loc<'t>,
    env: &'e Env<'e>,
    out: String,
    steps: usize,
    depth: usize,
    template_depth: usize,
}

/// Executes the template `name` of `trees` (parsed from `text`) on `data`.
pub(super) fn execute(trees: &TreeSet, name: &str, text: &str, data: Value, env: &Env<'_>) -> EResult<String> {
    let Some((name, root)) = trees.get_key_value(name) else {
        return Err(format!("template: {name}: {} is an incomplete or empty template", quote(name)));
    };
    let mut s = State {
        trees,
        text,
        top_name: name,
        name,
        vars: vec![("$", data.clone())],
        at: Loc::None,
        env,
        out: String::new(),
        steps: 0,
        depth: 0,
        template_depth: 0,
    };
    s.walk_list(&data, root)?;
    Ok(s.out)
}

impl<'t> State<'t, '_> {
    fn errorf(&self, msg: impl std::fmt::Display) -> String {
        let (pos, context) = match self.at {
            Loc::None => return format!("template: {}: {msg}", self.name),
            Loc::Node(n) => (node_pos(n), n.to_string()),
            Loc::Pipe(p) => (p.pos, p.to_string()),
            Loc::Cmd(c) => (c.pos, c.to_string()),
            Loc::Arg(a) => (a.pos(), a.to_string()),
        };
        let before = self.text.get(..pos).unwrap_or(self.text);
        let line = 1 + before.matches('\n').count();
        let col = before.rfind('\n').map_or(pos, |nl| pos - nl - 1);
        format!("template: {}:{line}:{col}: executing {} at <{context}>: {msg}", self.top_name, quote(self.name))
    }

    fn step(&mut self) -> EResult<()> {
        self.steps += 1;
        if self.steps > MAX_STEPS {
            return Err(self.errorf(format_args!("template execution exceeds {MAX_STEPS} steps")));
        }
        Ok(())
    }

    fn enter(&mut self) -> EResult<()> {
        self.depth += 1;
        if self.depth > 2 * MAX_DEPTH {
            return Err(self.errorf(format_args!("exceeded maximum nesting depth ({})", 2 * MAX_DEPTH)));
        }
        Ok(())
    }

    fn write(&mut self, s: &str) -> EResult<()> {
        if self.out.len() + s.len() > MAX_OUTPUT {
            return Err(format!("template output exceeds {MAX_OUTPUT} bytes"));
        }
        self.out.push_str(s);
        Ok(())
    }

    fn walk_list(&mut self, dot: &Value, list: &'t List) -> EResult<Flow> {
        for node in list {
            let flow = self.walk(dot, node)?;
            if flow != Flow::Normal {
                return Ok(flow);
            }
        }
        Ok(Flow::Normal)
    }

    fn walk(&mut self, dot: &Value, node: &'t Node) -> EResult<Flow> {
        self.step()?;
        self.at = Loc::Node(node);
        match node {
            Node::Text(t) => self.write(t)?,
            Node::Action(a) => {
                let v = self.eval_pipeline(dot, &a.pipe)?;
                if a.pipe.decl.is_empty() {
                    self.at = Loc::Node(node);
                    let text = match &v {
                        Value::Nil => "<no value>".to_owned(),
                        // Go prints what a pointer to a struct points to.
                        Value::Sample(Some(_)) => sprint_v(&v)[1..].to_owned(),
                        v => sprint_v(v),
                    };
                    self.write(&text)?;
                }
            }
            Node::Break => return Ok(Flow::Break),
            Node::Continue => return Ok(Flow::Continue),
            Node::If(c) => return self.walk_conditional(dot, c, false),
            Node::With(c) => return self.walk_conditional(dot, c, true),
            Node::Range(r) => return self.walk_range(dot, node, r),
            Node::Template(t) => self.walk_template(dot, node, t)?,
        }
        Ok(Flow::Normal)
    }

    fn walk_conditional(&mut self, dot: &Value, c: &'t Conditional, with: bool) -> EResult<Flow> {
        let mark = self.vars.len();
        self.enter()?;
        let flow = self.walk_branches(dot, c, with)?;
        self.depth -= 1;
        self.vars.truncate(mark);
        Ok(flow)
    }

    fn walk_branches(&mut self, dot: &Value, c: &'t Conditional, with: bool) -> EResult<Flow> {
        for (pipe, list) in &c.branches {
            let v = self.eval_pipeline(dot, pipe)?;
            if v.truth() {
                return if with { self.walk_list(&v, list) } else { self.walk_list(dot, list) };
            }
        }
        match &c.else_list {
            Some(list) => self.walk_list(dot, list),
            None => Ok(Flow::Normal),
        }
    }

    fn walk_range(&mut self, dot: &Value, node: &'t Node, r: &'t RangeNode) -> EResult<Flow> {
        self.at = Loc::Node(node);
        let mark0 = self.vars.len();
        // Errors about the value are reported at the last node evaluated, as in Go.
        let val = self.eval_pipeline(dot, &r.pipe)?.indirect();
        self.enter()?;
        let flow = self.range_over(dot, r, val)?;
        self.depth -= 1;
        self.vars.truncate(mark0);
        Ok(flow)
    }

    fn range_over(&mut self, dot: &Value, r: &'t RangeNode, val: Value) -> EResult<Flow> {
        let mark = self.vars.len();
        let ran = match &val {
            Value::Int(n) | Value::Duration(n, false) => {
                if r.pipe.decl.len() > 1 {
                    let msg = format!("can't use {} to iterate over more than one variable", sprint_v(&val));
                    return Err(self.errorf(msg));
                }
                let duration = matches!(val, Value::Duration(..));
                for i in 0..*n {
                    let elem = if duration { Value::Duration(i, false) } else { Value::Int(i) };
                    if self.one_iteration(r, Value::Nil, elem, mark)? == Flow::Break {
                        break;
                    }
                }
                *n > 0
            }
            Value::Samples(v) => {
                for (i, s) in v.iter().enumerate() {
                    if self.one_iteration(r, Value::Int(i as i64), Value::Sample(Some(s.clone())), mark)? == Flow::Break
                    {
                        break;
                    }
                }
                !v.is_empty()
            }
            Value::StrMap(m) => {
                for (k, v) in m.iter() {
                    if self.one_iteration(r, Value::str(k.as_str()), Value::str(v.as_str()), mark)? == Flow::Break {
                        break;
                    }
                }
                !m.is_empty()
            }
            Value::AnyMap(m) => {
                for (k, v) in m.iter() {
                    if self.one_iteration(r, Value::str(k.as_str()), v.clone(), mark)? == Flow::Break {
                        break;
                    }
                }
                !m.is_empty()
            }
            Value::Nil => false,
            other => return Err(self.errorf(format_args!("range can't iterate over {}", sprint_v(other)))),
        };
        if !ran {
            if let Some(list) = &r.else_list {
                // A `{{break}}` of an enclosing range in the else list stops at this range, a
                // `{{continue}}` reaches it (Go's recovery of its break and continue panics).
                if self.walk_list(dot, list)? == Flow::Continue {
                    return Ok(Flow::Continue);
                }
            }
        }
        Ok(Flow::Normal)
    }

    fn one_iteration(&mut self, r: &'t RangeNode, index: Value, elem: Value, mark: usize) -> EResult<Flow> {
        self.step()?;
        let decl = &r.pipe.decl;
        if let Some(first) = decl.first() {
            if r.pipe.is_assign {
                let v = if decl.len() > 1 { index.clone() } else { elem.clone() };
                self.set_var(first, v)?;
            } else {
                self.set_top_var(1, elem.clone());
            }
        }
        if let Some(second) = decl.get(1) {
            if r.pipe.is_assign {
                self.set_var(second, elem.clone())?;
            } else {
                self.set_top_var(2, index);
            }
        }
        let flow = self.walk_list(&elem, &r.list)?;
        self.vars.truncate(mark);
        Ok(flow)
    }

    fn walk_template(&mut self, dot: &Value, node: &'t Node, t: &'t TemplateNode) -> EResult<()> {
        self.at = Loc::Node(node);
        let Some((name, root)) = self.trees.get_key_value(&t.name) else {
            return Err(self.errorf(format_args!("template {} not defined", quote(&t.name))));
        };
        if self.template_depth >= MAX_DEPTH {
            return Err(self.errorf(format_args!("exceeded maximum template depth ({MAX_DEPTH})")));
        }
        let new_dot = match &t.pipe {
            Some(p) => self.eval_pipeline(dot, p)?,
            None => Value::Nil,
        };
        self.enter()?;
        let vars = std::mem::replace(&mut self.vars, vec![("$", new_dot.clone())]);
        let outer = std::mem::replace(&mut self.name, name);
        self.template_depth += 1;
        let result = self.walk_list(&new_dot, root);
        self.template_depth -= 1;
        self.name = outer;
        self.vars = vars;
        self.depth -= 1;
        result.map(|_| ())
    }

    fn var_value(&self, name: &str) -> EResult<Value> {
        match self.vars.iter().rev().find(|(n, _)| *n == name) {
            Some((_, v)) => Ok(v.clone()),
            None => Err(self.errorf(format_args!("undefined variable: {name}"))),
        }
    }

    fn set_var(&mut self, name: &str, value: Value) -> EResult<()> {
        match self.vars.iter_mut().rev().find(|(n, _)| *n == name) {
            Some(slot) => {
                slot.1 = value;
                Ok(())
            }
            None => Err(self.errorf(format_args!("undefined variable: {name}"))),
        }
    }

    fn set_top_var(&mut self, n: usize, value: Value) {
        let len = self.vars.len();
        if let Some(slot) = len.checked_sub(n).and_then(|i| self.vars.get_mut(i)) {
            slot.1 = value;
        }
    }

    fn eval_pipeline(&mut self, dot: &Value, pipe: &'t Pipe) -> EResult<Value> {
        self.at = Loc::Pipe(pipe);
        let mut value = None;
        for cmd in &pipe.cmds {
            value = Some(self.eval_command(dot, cmd, value)?);
        }
        let value = value.unwrap_or(Value::Nil);
        for var in &pipe.decl {
            if pipe.is_assign {
                self.set_var(var, value.clone())?;
            } else {
                self.vars.push((var.as_str(), value.clone()));
            }
        }
        Ok(value)
    }

    fn not_a_function(&self, args: &[Arg], fin: &Option<Value>) -> EResult<()> {
        if args.len() > 1 || fin.is_some() {
            return Err(self.errorf(format_args!("can't give argument to non-function {}", args[0])));
        }
        Ok(())
    }

    fn eval_command(&mut self, dot: &Value, cmd: &'t Command, fin: Option<Value>) -> EResult<Value> {
        self.step()?;
        let first = &cmd.args[0];
        match first {
            Arg::Field { .. } => return self.eval_field_node(dot, first, &cmd.args, fin),
            Arg::Chain { .. } => return self.eval_chain_node(dot, first, &cmd.args, fin),
            Arg::Identifier { name, .. } => return self.eval_function(dot, first, name, Loc::Cmd(cmd), &cmd.args, fin),
            Arg::Variable { .. } => return self.eval_variable_node(dot, first, &cmd.args, fin),
            Arg::Pipe(p) => {
                self.not_a_function(&cmd.args, &fin)?;
                return self.eval_pipeline(dot, p);
            }
            _ => {}
        }
        self.at = Loc::Arg(first);
        self.not_a_function(&cmd.args, &fin)?;
        match first {
            Arg::Bool { val, .. } => Ok(Value::Bool(*val)),
            Arg::Dot { .. } => Ok(dot.clone()),
            Arg::Number(n) => self.ideal_constant(first, n),
            Arg::String { text, .. } => Ok(Value::str(text.as_str())),
            _ => Err(self.errorf("nil is not a command")),
        }
    }

    /// A constant where its type is free: complex, float if written as one, else int.
    fn ideal_constant(&mut self, arg: &'t Arg, n: &Number) -> EResult<Value> {
        self.at = Loc::Arg(arg);
        let t = n.text.as_str();
        let hex_int = t.len() > 2 && (t.starts_with("0x") || t.starts_with("0X")) && !t.contains(['p', 'P']);
        if n.is_complex {
            Ok(Value::Complex(n.complex.0, n.complex.1))
        } else if n.is_float && !hex_int && !t.starts_with('\'') && t.contains(['.', 'e', 'E', 'p', 'P']) {
            Ok(Value::Float(n.float))
        } else if n.is_int {
            Ok(Value::Int(n.int))
        } else if n.is_uint {
            Err(self.errorf(format_args!("{t} overflows int")))
        } else {
            Ok(Value::Nil)
        }
    }

    fn eval_field_node(&mut self, dot: &Value, arg: &'t Arg, args: &'t [Arg], fin: Option<Value>) -> EResult<Value> {
        self.at = Loc::Arg(arg);
        let Arg::Field { idents, .. } = arg else { return Ok(Value::Nil) };
        self.eval_field_chain(dot, dot.clone(), arg, idents, args, fin)
    }

    fn eval_chain_node(&mut self, dot: &Value, arg: &'t Arg, args: &'t [Arg], fin: Option<Value>) -> EResult<Value> {
        self.at = Loc::Arg(arg);
        let Arg::Chain { node, fields, .. } = arg else { return Ok(Value::Nil) };
        if matches!(node.as_ref(), Arg::Nil { .. }) {
            return Err(self.errorf(format_args!("indirection through explicit nil in {arg}")));
        }
        let receiver = self.eval_arg(dot, Ty::Any, node)?;
        self.eval_field_chain(dot, receiver, arg, fields, args, fin)
    }

    fn eval_variable_node(&mut self, dot: &Value, arg: &'t Arg, args: &'t [Arg], fin: Option<Value>) -> EResult<Value> {
        self.at = Loc::Arg(arg);
        let Arg::Variable { idents, .. } = arg else { return Ok(Value::Nil) };
        let value = self.var_value(&idents[0])?;
        if idents.len() == 1 {
            self.not_a_function(args, &fin)?;
            return Ok(value);
        }
        self.eval_field_chain(dot, value, arg, &idents[1..], args, fin)
    }

    fn eval_field_chain(
        &mut self,
        dot: &Value,
        receiver: Value,
        node: &'t Arg,
        idents: &'t [String],
        args: &'t [Arg],
        fin: Option<Value>,
    ) -> EResult<Value> {
        let Some((last, init)) = idents.split_last() else { return Ok(receiver) };
        let mut receiver = receiver;
        for id in init {
            receiver = self.eval_field(dot, id, node, &[], None, receiver)?;
        }
        self.eval_field(dot, last, node, args, fin, receiver)
    }

    fn eval_field(
        &mut self,
        dot: &Value,
        name: &str,
        node: &'t Arg,
        args: &'t [Arg],
        fin: Option<Value>,
        receiver: Value,
    ) -> EResult<Value> {
        if matches!(receiver, Value::Nil) {
            return Ok(Value::Nil);
        }
        if let Some(m) = Method::lookup(&receiver, name) {
            return self.eval_call(dot, Callee::Method(m, receiver), Loc::Arg(node), name, args, fin);
        }
        let has_args = args.len() > 1 || fin.is_some();
        let field = match &receiver {
            Value::Data(d) => match name {
                "Labels" => Some(Value::StrMap(d.labels.clone())),
                "ExternalLabels" => Some(Value::StrMap(d.external_labels.clone())),
                "ExternalURL" => Some(Value::Str(d.external_url.clone())),
                "Value" => Some(Value::Float(d.value)),
                _ => None,
            },
            Value::Sample(Some(s)) => match name {
                "Labels" => Some(Value::StrMap(s.labels.clone())),
                "Value" => Some(Value::Float(s.value)),
                _ => None,
            },
            Value::Sample(None) if name == "Labels" || name == "Value" => {
                return Err(self.errorf(format_args!("nil pointer evaluating *template.sample.{name}")));
            }
            Value::StrMap(m) => {
                if has_args {
                    return Err(self.errorf(format_args!("{name} is not a method but has arguments")));
                }
                return Ok(Value::str(m.get(name).map_or("", String::as_str)));
            }
            Value::AnyMap(m) => {
                if has_args {
                    return Err(self.errorf(format_args!("{name} is not a method but has arguments")));
                }
                return Ok(m.get(name).cloned().unwrap_or(Value::Nil));
            }
            _ => None,
        };
        match field {
            Some(_) if has_args => {
                Err(self.errorf(format_args!("{name} has arguments but cannot be invoked as function")))
            }
            Some(v) => Ok(v),
            None => Err(self.errorf(format_args!("can't evaluate field {name} in type {}", receiver.type_name()))),
        }
    }

    fn eval_function(
        &mut self,
        dot: &Value,
        ident: &'t Arg,
        name: &str,
        node: Loc<'t>,
        args: &'t [Arg],
        fin: Option<Value>,
    ) -> EResult<Value> {
        self.at = Loc::Arg(ident);
        let Some(f) = Func::lookup(name) else {
            return Err(self.errorf(format_args!("{} is not a defined function", quote(name))));
        };
        self.eval_call(dot, Callee::Func(f), node, name, args, fin)
    }

    fn eval_call(
        &mut self,
        dot: &Value,
        callee: Callee,
        node: Loc<'t>,
        name: &str,
        args: &'t [Arg],
        fin: Option<Value>,
    ) -> EResult<Value> {
        let args = args.get(1..).unwrap_or(&[]);
        let (fixed, variadic) = match &callee {
            Callee::Func(f) => {
                let sig = f.sig();
                (sig.fixed, sig.variadic)
            }
            Callee::Method(m, _) => (m.params(), None),
        };
        let num_in = args.len() + usize::from(fin.is_some());
        if variadic.is_some() {
            if num_in < fixed.len() {
                let msg = format!("wrong number of args for {name}: want at least {} got {}", fixed.len(), args.len());
                return Err(self.errorf(msg));
            }
        } else if num_in != fixed.len() {
            return Err(self.errorf(format_args!("wrong number of args for {name}: want {} got {num_in}", fixed.len())));
        }
        if let Callee::Func(f @ (Func::And | Func::Or)) = callee {
            let mut v = Value::Nil;
            for a in args {
                v = self.eval_arg(dot, Ty::Any, a)?;
                if v.truth() == (f == Func::Or) {
                    return Ok(v);
                }
            }
            return Ok(fin.unwrap_or(v));
        }
        let param = |i: usize| fixed.get(i).copied().or(variadic).unwrap_or(Ty::Any);
        let mut argv = Vec::with_capacity(num_in);
        for (i, a) in args.iter().enumerate() {
            argv.push(self.eval_arg(dot, param(i), a)?);
        }
        if let Some(f) = fin {
            argv.push(self.validate_type(f, param(num_in - 1))?);
        }
        let result = match &callee {
            Callee::Func(Func::Call) => Err(match argv.first() {
                Some(Value::Nil) | None => "call of nil".to_owned(),
                Some(v) => {
                    let callee = args.first().map_or_else(|| "<value>".to_owned(), ToString::to_string);
                    format!("non-function {callee} of type {}", v.type_name())
                }
            }),
            Callee::Func(f) => f.call(self.env, &argv),
            Callee::Method(m, receiver) => Ok(m.call(receiver, &argv)),
        };
        match result {
            Ok(v) if v.as_str().is_some_and(|s| s.len() > MAX_OUTPUT) => {
                Err(self.errorf(format_args!("result of {name} exceeds {MAX_OUTPUT} bytes")))
            }
            Ok(v) => Ok(v),
            Err(e) => {
                self.at = node;
                Err(self.errorf(format_args!("error calling {name}: {e}")))
            }
        }
    }

    fn eval_arg(&mut self, dot: &Value, ty: Ty, arg: &'t Arg) -> EResult<Value> {
        self.at = Loc::Arg(arg);
        let v = match arg {
            Arg::Dot { .. } => dot.clone(),
            Arg::Nil { .. } => {
                return ty.nil_value().ok_or_else(|| self.errorf(format_args!("cannot assign nil to {}", ty.name())));
            }
            Arg::Field { .. } => self.eval_field_node(dot, arg, std::slice::from_ref(arg), None)?,
            Arg::Variable { .. } => self.eval_variable_node(dot, arg, &[], None)?,
            Arg::Pipe(p) => self.eval_pipeline(dot, p)?,
            Arg::Identifier { name, .. } => self.eval_function(dot, arg, name, Loc::Arg(arg), &[], None)?,
            Arg::Chain { .. } => self.eval_chain_node(dot, arg, &[], None)?,
            Arg::Bool { val, .. } => match ty {
                Ty::Any => return Ok(Value::Bool(*val)),
                _ => return self.literal_mismatch(ty, arg),
            },
            Arg::Number(n) => match ty {
                Ty::Any => return self.ideal_constant(arg, n),
                Ty::Duration if n.is_int => return Ok(Value::Duration(n.int, false)),
                Ty::Duration => return Err(self.errorf(format_args!("expected integer; found {arg}"))),
                _ => return self.literal_mismatch(ty, arg),
            },
            Arg::String { text, .. } => match ty {
                Ty::Any | Ty::Str => return Ok(Value::str(text.as_str())),
                _ => return self.literal_mismatch(ty, arg),
            },
        };
        self.validate_type(v, ty)
    }

    fn literal_mismatch(&self, ty: Ty, arg: &Arg) -> EResult<Value> {
        Err(match ty {
            Ty::Str => self.errorf(format_args!("expected string; found {arg}")),
            Ty::Duration => self.errorf(format_args!("expected integer; found {arg}")),
            _ => self.errorf(format_args!("can't handle {arg} for arg of type {}", ty.name())),
        })
    }

    /// Go's `validateType`: `value` as an argument of type `ty`.
    fn validate_type(&self, value: Value, ty: Ty) -> EResult<Value> {
        let ok = match (&value, ty) {
            (_, Ty::Any) | (Value::Str(_), Ty::Str) | (Value::Samples(_), Ty::QueryResult) => true,
            (Value::Sample(_), Ty::Sample) => true,
            (Value::Duration(..), Ty::Duration) | (Value::Time(..), Ty::Time) => return Ok(value.indirect()),
            (Value::Nil, _) => {
                return ty
                    .nil_value()
                    .ok_or_else(|| self.errorf(format_args!("invalid value; expected {}", ty.name())));
            }
            _ => false,
        };
        if ok {
            return Ok(value);
        }
        Err(self.errorf(format_args!("wrong type for value; expected {}; got {}", ty.name(), value.type_name())))
    }
}

/// The position Go reports for a node.
fn node_pos(n: &Node) -> usize {
    match n {
        Node::Action(a) => a.pipe.pos,
        Node::If(c) | Node::With(c) => c.branches.first().map_or(0, |(p, _)| p.pos),
        Node::Range(r) => r.pipe.pos,
        Node::Template(t) => t.pos,
        Node::Text(_) | Node::Break | Node::Continue => 0,
    }
}
