//! The first YAML document of a file as a node tree, as go-yaml v3 (which Prometheus uses)
//! builds it: every node with its 1-based line and column, its tag in go-yaml's short form, and
//! aliases pointing at the node of their anchor.
//!
//! The events come from `saphyr-parser` (like go-yaml, a port of libyaml). What go-yaml does
//! differently is redone here: the input is checked for the characters libyaml's reader refuses,
//! plain scalars get the tag go-yaml resolves for them, an empty value is placed just after its
//! `:` or `-` (libyaml's position), and errors are worded as go-yaml words them where the words
//! can be known (`yaml: unknown anchor 'x' referenced`; syntax errors keep the problem and
//! saphyr's line).

use std::collections::HashMap;

use saphyr_parser::{Event, Parser, ScalarStyle, ScanError, Span, Tag};

use super::resolve;

/// Index of a node in its [`Document`].
pub(super) type NodeId = usize;

/// What a node is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Kind {
    /// A scalar: text.
    Scalar,
    /// A mapping: keys and values, alternating in [`Node::content`].
    Mapping,
    /// A sequence: items in [`Node::content`].
    Sequence,
    /// An alias (`*name`) of an anchored node ([`Node::target`]).
    Alias,
}

/// One node, as go-yaml's `yaml.Node`.
#[derive(Debug, Clone)]
pub(super) struct Node {
    /// What it is.
    pub kind: Kind,
    /// go-yaml's `Node.Tag`: the explicit tag in short form (`!!int`, `!local`), else `!!str`
    /// for a quoted or block scalar, `!!map` or `!!seq` for a collection, the resolved tag of a
    /// plain scalar, and nothing for an alias.
    pub tag: String,
    /// A scalar's text; an alias' anchor name.
    pub value: String,
    /// 1-based line of the node's first character (its anchor or tag when it has one).
    pub line: usize,
    /// 1-based column, in characters.
    pub column: usize,
    /// A mapping's keys and values, alternating; a sequence's items.
    pub content: Vec<NodeId>,
    /// An alias' anchored node.
    pub target: Option<NodeId>,
}

/// The first document of a YAML stream.
#[derive(Debug, Default)]
pub(super) struct Document {
    /// All nodes; a node's children come after it.
    pub nodes: Vec<Node>,
    /// The document's root node; `None` for a stream without documents (empty, or comments).
    pub root: Option<NodeId>,
    /// Whether anything follows the first document (another document, or an error in it).
    pub more_documents: bool,
}

impl Document {
    /// The node `id`.
    pub fn node(&self, id: NodeId) -> &Node {
        // Ids come from this document's own builder: always in range.
        &self.nodes[id]
    }

    /// go-yaml's `Node.ShortTag()`: `!!str` for an indicated string, an alias' target's tag,
    /// otherwise the node's tag.
    pub fn short_tag(&self, id: NodeId) -> &str {
        let mut n = self.node(id);
        // An alias' target is never an alias: the chain ends after one step.
        if let Some(target) = n.target {
            n = self.node(target);
        }
        &n.tag
    }

    /// Whether `id` holds null (`~`, `null`, empty, `!!null`), through an alias too.
    pub fn is_null(&self, id: NodeId) -> bool {
        self.short_tag(id) == resolve::NULL
    }

    /// Whether `id` is the merge key `<<` (plain, or tagged `!!merge`).
    pub fn is_merge_key(&self, id: NodeId) -> bool {
        let n = self.node(id);
        n.kind == Kind::Scalar && n.value == "<<" && (n.tag.is_empty() || n.tag == "!" || n.tag == resolve::MERGE)
    }

    /// The pairs of a mapping node.
    pub fn pairs(&self, id: NodeId) -> impl Iterator<Item = (NodeId, NodeId)> + '_ {
        self.node(id).content.chunks_exact(2).filter_map(|kv| match kv {
            [k, v] => Some((*k, *v)),
            _ => None,
        })
    }
}

/// Parses the first document of `bytes`.
///
/// # Errors
/// go-yaml's message: `yaml: ...`.
pub(super) fn parse(bytes: &[u8]) -> Result<Document, String> {
    let text = readable_text(bytes)?;
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut builder = Builder::new(text);
    let mut events = Parser::new_from_str(text);
    for event in events.by_ref() {
        let (event, span) = event.map_err(|e| scan_error(text, &e, builder.innermost_line()))?;
        if builder.on_event(event, span)? {
            break;
        }
    }
    builder.document.more_documents = !matches!(events.next(), None | Some(Ok((Event::StreamEnd, _))));
    Ok(builder.document)
}

/// The text of `bytes`, refused as libyaml's reader refuses it: invalid UTF-8, and control
/// characters other than tab, line feed and carriage return.
fn readable_text(bytes: &[u8]) -> Result<&str, String> {
    let text = std::str::from_utf8(bytes).map_err(|e| format!("yaml: {}", utf8_problem(bytes, e.valid_up_to())))?;
    let allowed = |c: char| {
        matches!(c, '\t' | '\n' | '\r' | '\u{20}'..='\u{7e}' | '\u{85}' | '\u{a0}'..='\u{d7ff}' | '\u{e000}'..='\u{fffd}')
            || c >= '\u{10000}'
    };
    if text.chars().all(allowed) {
        Ok(text)
    } else {
        Err("yaml: control characters are not allowed".to_owned())
    }
}

/// libyaml's words for the invalid UTF-8 sequence at `at`.
fn utf8_problem(bytes: &[u8], at: usize) -> &'static str {
    let rest = bytes.get(at..).unwrap_or_default();
    let Some(&lead) = rest.first() else { return "incomplete UTF-8 octet sequence" };
    let width = match lead {
        0x00..=0x7f => 1,
        _ if lead & 0xe0 == 0xc0 => 2,
        _ if lead & 0xf0 == 0xe0 => 3,
        _ if lead & 0xf8 == 0xf0 => 4,
        _ => return "invalid leading UTF-8 octet",
    };
    if rest.len() < width {
        return "incomplete UTF-8 octet sequence";
    }
    if rest.iter().take(width).skip(1).any(|b| b & 0xc0 != 0x80) {
        return "invalid trailing UTF-8 octet";
    }
    let payload_bits = [0u32, 0x7f, 0x1f, 0x0f, 0x07];
    let mut value = u32::from(lead) & payload_bits.get(width).copied().unwrap_or(0);
    for b in rest.iter().take(width).skip(1) {
        value = (value << 6) | u32::from(b & 0x3f);
    }
    let shortest = match value {
        0..=0x7f => 1,
        0x80..=0x7ff => 2,
        0x800..=0xffff => 3,
        _ => 4,
    };
    if shortest != width {
        return "invalid length of a UTF-8 sequence";
    }
    "invalid Unicode character"
}

/// A saphyr error in go-yaml's words where they are known, else the problem part of saphyr's
/// message (without its `while parsing ...,` context, as go-yaml prints only the problem).
///
/// The line is go-yaml's where it can be known: for a collection's error (`did not find
/// expected key`, `... '-' indicator`), libyaml's 0-based line of the collection's start
/// (`open_line`, 1-based, is that of the innermost collection being parsed), or of the problem
/// when that is 0, and no line when both are; else saphyr's line of the problem.
fn scan_error(text: &str, e: &ScanError, open_line: Option<usize>) -> String {
    let info = e.info();
    if info.ends_with("found unknown anchor") {
        let name = anchor_name_at(text, e.marker().index() + 1);
        return format!("yaml: unknown anchor '{name}' referenced");
    }
    let (context, problem) = match info.split_once(", ") {
        Some((context, problem)) if context.starts_with("while ") => (context, problem),
        _ => ("", info),
    };
    let collection = matches!(
        context,
        "while parsing a block collection"
            | "while parsing a block mapping"
            | "while parsing a flow sequence"
            | "while parsing a flow mapping"
    );
    let line = match open_line {
        Some(open) if collection => {
            [open, e.marker().line()].into_iter().map(|l| l.saturating_sub(1)).find(|l| *l != 0)
        }
        _ => Some(e.marker().line()),
    };
    match line {
        Some(line) => format!("yaml: line {line}: {problem}"),
        None => format!("yaml: {problem}"),
    }
}

/// The anchor name starting at character `start`: up to a blank or a flow indicator.
fn anchor_name_at(text: &str, start: usize) -> String {
    text.chars().skip(start).take_while(|c| !c.is_whitespace() && !matches!(c, ',' | '[' | ']' | '{' | '}')).collect()
}

/// Builds a [`Document`] from parser events.
struct Builder<'t> {
    text: &'t str,
    /// Character index and byte offset of a point in `text` at or before the next alias (their
    /// spans come in order), to find alias names in linear time overall.
    cursor: (usize, usize),
    document: Document,
    /// Open collections, innermost last.
    open: Vec<NodeId>,
    /// Anchored nodes by saphyr's anchor id.
    anchors: HashMap<usize, NodeId>,
    /// Whether the first document has started.
    started: bool,
}

impl<'t> Builder<'t> {
    fn new(text: &'t str) -> Self {
        Self {
            text,
            cursor: (0, 0),
            document: Document::default(),
            open: Vec::new(),
            anchors: HashMap::new(),
            started: false,
        }
    }

    /// Takes one event; true once the first document is complete.
    fn on_event(&mut self, event: Event<'_>, span: Span) -> Result<bool, String> {
        match event {
            Event::StreamStart | Event::Nothing => {}
            Event::StreamEnd => return Ok(true),
            Event::DocumentStart(_) => self.started = true,
            Event::DocumentEnd => return Ok(self.started),
            Event::Scalar(value, style, anchor, tag) => {
                let tag = scalar_tag(tag.as_deref(), style, &value);
                let (line, column) = self.scalar_position(&value, style, anchor, &tag, span);
                let id = self.add(Kind::Scalar, tag, value.into_owned(), (line, column), None);
                self.anchor(anchor, id);
            }
            Event::SequenceStart(anchor, tag) => self.open_collection(Kind::Sequence, anchor, tag.as_deref(), span),
            Event::MappingStart(anchor, tag) => self.open_collection(Kind::Mapping, anchor, tag.as_deref(), span),
            Event::SequenceEnd | Event::MappingEnd => {
                self.open.pop();
            }
            Event::Alias(anchor) => {
                let name = self.alias_name(span);
                let target = self.anchors.get(&anchor).copied();
                if target.is_none() {
                    return Err(format!("yaml: unknown anchor '{name}' referenced"));
                }
                self.add(Kind::Alias, String::new(), name, position(span), target);
            }
        }
        Ok(false)
    }

    /// The line of the innermost collection being parsed.
    fn innermost_line(&self) -> Option<usize> {
        self.open.last().map(|&id| self.document.node(id).line)
    }

    fn open_collection(&mut self, kind: Kind, anchor: usize, tag: Option<&Tag>, span: Span) {
        let default = if kind == Kind::Mapping { resolve::MAP } else { resolve::SEQ };
        let tag = explicit_tag(tag).unwrap_or_else(|| default.to_owned());
        let id = self.add(kind, tag, String::new(), position(span), None);
        self.anchor(anchor, id);
        self.open.push(id);
    }

    /// Adds a node under the innermost open collection (or as the root).
    fn add(&mut self, kind: Kind, tag: String, value: String, at: (usize, usize), target: Option<NodeId>) -> NodeId {
        let id = self.document.nodes.len();
        let (line, column) = at;
        self.document.nodes.push(Node { kind, tag, value, line, column, content: Vec::new(), target });
        match self.open.last() {
            Some(&parent) => {
                if let Some(p) = self.document.nodes.get_mut(parent) {
                    p.content.push(id);
                }
            }
            None => {
                if self.document.root.is_none() {
                    self.document.root = Some(id);
                }
            }
        }
        id
    }

    fn anchor(&mut self, anchor: usize, id: NodeId) {
        if anchor != 0 {
            self.anchors.insert(anchor, id);
        }
    }

    /// libyaml places an empty value (`key:`, `- `) just after its indicator; saphyr places it
    /// on the indicator.
    fn scalar_position(
        &mut self,
        value: &str,
        style: ScalarStyle,
        anchor: usize,
        tag: &str,
        span: Span,
    ) -> (usize, usize) {
        let (line, column) = position(span);
        let bare_empty = value.is_empty() && style == ScalarStyle::Plain && anchor == 0 && tag == resolve::NULL;
        if bare_empty && span.start == span.end {
            let at = self.byte_offset(span.start.index());
            if matches!(self.text.get(at..).and_then(|t| t.chars().next()), Some(':' | '-' | '?')) {
                return (line, column + 1);
            }
        }
        (line, column)
    }

    /// The name of the alias at `span` (`*name`).
    fn alias_name(&mut self, span: Span) -> String {
        let start = self.byte_offset(span.start.index());
        let end = self.byte_offset(span.end.index());
        let raw = self.text.get(start..end).unwrap_or_default();
        raw.strip_prefix('*').unwrap_or(raw).trim_end().to_owned()
    }

    /// The byte offset of character `index`, moving the cursor forward (or restarting it when
    /// asked for an earlier point).
    fn byte_offset(&mut self, index: usize) -> usize {
        if index < self.cursor.0 {
            self.cursor = (0, 0);
        }
        let (mut chars, mut bytes) = self.cursor;
        let mut rest = self.text.get(bytes..).unwrap_or_default().chars();
        while chars < index {
            match rest.next() {
                Some(c) => {
                    chars += 1;
                    bytes += c.len_utf8();
                }
                None => break,
            }
        }
        self.cursor = (chars, bytes);
        bytes
    }
}

/// 1-based line and column of a span's start.
fn position(span: Span) -> (usize, usize) {
    (span.start.line(), span.start.col() + 1)
}

/// An explicit tag in go-yaml's short form; `None` for none or the non-specific `!`.
fn explicit_tag(tag: Option<&Tag>) -> Option<String> {
    let tag = tag?;
    let full = format!("{}{}", tag.handle, tag.suffix);
    if full.is_empty() || full == "!" {
        return None;
    }
    Some(resolve::short_tag(&full))
}

/// go-yaml's tag for a scalar: explicit, `!!str` when quoted or a block, `!!merge` for a plain
/// `<<`, else resolved from the text.
fn scalar_tag(tag: Option<&Tag>, style: ScalarStyle, value: &str) -> String {
    if let Some(explicit) = explicit_tag(tag) {
        return explicit;
    }
    match style {
        ScalarStyle::Plain if value == "<<" => resolve::MERGE.to_owned(),
        ScalarStyle::Plain => resolve::plain_tag(value).to_owned(),
        _ => resolve::STR.to_owned(),
    }
}
