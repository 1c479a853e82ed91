//! go-yaml v3's decoding (`decode.go`) of a [`Document`] into Prometheus' rule file types
//! (`rulefmt.RuleGroups`, `rulefmt.RuleGroup`, `rulefmt.Rule`), with what Prometheus' decoder
//! accepts and refuses and the messages it gives:
//!
//! - any scalar is a string (`record: 5` is `"5"`), a null leaves the field unset, and a mapping
//!   or sequence where a string goes is a type error (`line 4: cannot unmarshal !!map into
//!   string`), listed with the others under `yaml: unmarshal errors:`;
//! - a field the type does not have is an error (go-yaml's `KnownFields`), unless unknown fields
//!   are ignored; a key repeated in a mapping is an error;
//! - a sequence item that does not decode (null, a scalar where a rule goes) is dropped;
//! - anchors, aliases and merge keys (`<<: *base`, keys written beside it win) work;
//! - an alias that contains itself, or aliases that expand too much, stop decoding, as a bad
//!   duration does (`not a valid duration string: "5"`).
//!
//! Where a field's value was written is kept for `record`, `alert` and `expr` (Prometheus'
//! `RuleNode`), for each group and for each rule.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::duration;
use super::error::{go_quote, Position};
use super::resolve::{self, Resolved};
use super::yaml::{Document, Kind, NodeId};

/// Type errors kept at most; further ones are dropped (the file is refused all the same).
const MAX_TYPE_ERRORS: usize = 1000;

/// Decoding nested deeper than this (only aliases and merge keys nest beyond the types' own six
/// levels) stops, so that no input can exhaust the stack.
const MAX_DEPTH: usize = 100;

/// `rulefmt.RuleGroups`: a file.
#[derive(Debug, Default)]
pub(super) struct RawGroups {
    /// `groups`.
    pub groups: Vec<RawGroup>,
}

/// `rulefmt.RuleGroup`.
#[derive(Debug, Default)]
pub(super) struct RawGroup {
    /// Where the group was written.
    pub at: Position,
    /// `name`.
    pub name: String,
    /// `interval`, in milliseconds (0: unset).
    pub interval_ms: i64,
    /// `query_offset`, in milliseconds.
    pub query_offset_ms: Option<i64>,
    /// `limit` (Go's `int`).
    pub limit: i64,
    /// `rules`.
    pub rules: Vec<RawRule>,
    /// `labels`.
    pub labels: BTreeMap<String, String>,
}

/// `rulefmt.Rule`, with the positions of `rulefmt.RuleNode`.
#[derive(Debug, Default)]
pub(super) struct RawRule {
    /// Where the rule was written.
    pub at: Position,
    /// `record`.
    pub record: Located,
    /// `alert`.
    pub alert: Located,
    /// `expr`.
    pub expr: Located,
    /// `for`, in milliseconds.
    pub for_ms: i64,
    /// `keep_firing_for`, in milliseconds.
    pub keep_firing_for_ms: i64,
    /// `labels`.
    pub labels: BTreeMap<String, String>,
    /// `annotations`.
    pub annotations: BTreeMap<String, String>,
}

/// A string field and where its value was written (`0:0` when absent).
#[derive(Debug, Default)]
pub(super) struct Located {
    /// The value; empty when absent or null.
    pub value: String,
    /// Where.
    pub at: Position,
}

/// Why decoding failed.
#[derive(Debug, PartialEq)]
pub(super) enum DecodeError {
    /// Type errors and unknown fields (go-yaml's `TypeError`), each `line N: ...`.
    Unmarshal(Vec<String>),
    /// Decoding stopped (go-yaml's `fail`): the message.
    Stopped(String),
}

/// Decodes `doc` as a rule file; `known_fields`: refuse fields the types do not have.
pub(super) fn decode(doc: &Document, known_fields: bool) -> Result<RawGroups, DecodeError> {
    let mut groups = RawGroups::default();
    let Some(root) = doc.root else { return Ok(groups) };
    let mut decoder = Decoder::new(doc, known_fields);
    decoder.unmarshal(root, &mut groups).map_err(DecodeError::Stopped)?;
    if decoder.type_errors.is_empty() {
        Ok(groups)
    } else {
        Err(DecodeError::Unmarshal(decoder.type_errors))
    }
}

/// A step of decoding: `Ok(decoded)`, or `Err` when decoding stops (the message).
type Step<T> = Result<T, String>;

/// go-yaml's `decoder`.
struct Decoder<'d> {
    doc: &'d Document,
    known_fields: bool,
    type_errors: Vec<String>,
    /// Aliases being expanded (an alias met again inside its own expansion contains itself).
    expanding: HashSet<NodeId>,
    /// Keys already set while merging (`<<`): the mapping's own keys, then earlier merged ones.
    merged: Option<HashSet<String>>,
    decodes: usize,
    alias_decodes: usize,
    alias_depth: usize,
    depth: usize,
}

/// A Go type a node decodes into. By default, every kind of node is a type error.
trait Target {
    /// The Go type's name in messages (`string`, `map[string]string`, `rulefmt.Rule`).
    const TYPE: &'static str;

    /// go-yaml's `d.null`: true (and cleared) for maps, slices and pointers.
    fn null(&mut self) -> bool {
        false
    }

    /// A type with its own `UnmarshalYAML`: decodes any non-null node itself.
    fn unmarshaler(&mut self, _d: &mut Decoder<'_>, _id: NodeId) -> Option<Step<bool>> {
        None
    }

    /// A non-null scalar: `tag` and `value` as resolved, `text` its text (decoded for
    /// `!!binary`).
    fn scalar(&mut self, d: &mut Decoder<'_>, id: NodeId, tag: &str, _value: Resolved, _text: String) -> Step<bool> {
        d.type_error(id, tag, Self::TYPE);
        Ok(false)
    }

    /// A mapping (its keys already checked for repeats).
    fn mapping(&mut self, d: &mut Decoder<'_>, id: NodeId) -> Step<bool> {
        d.type_error(id, resolve::MAP, Self::TYPE);
        Ok(false)
    }

    /// A sequence.
    fn sequence(&mut self, d: &mut Decoder<'_>, id: NodeId) -> Step<bool> {
        d.type_error(id, resolve::SEQ, Self::TYPE);
        Ok(false)
    }
}

/// A Go struct: fields by YAML key.
trait Struct: Target {
    /// The keys of the fields, in field order.
    const FIELDS: &'static [&'static str];

    /// Decodes `value` into field `index` of [`Struct::FIELDS`].
    fn field(&mut self, d: &mut Decoder<'_>, index: usize, value: NodeId) -> Step<()>;
}

/// An item of a Go slice, told where it was written.
trait Item: Target + Default {
    /// The slice type's name (`[]rulefmt.Rule`).
    const SLICE: &'static str;

    /// Records where the item was written.
    fn place(&mut self, at: Position);
}

impl<'d> Decoder<'d> {
    fn new(doc: &'d Document, known_fields: bool) -> Self {
        Self {
            doc,
            known_fields,
            type_errors: Vec::new(),
            expanding: HashSet::new(),
            merged: None,
            decodes: 0,
            alias_decodes: 0,
            alias_depth: 0,
            depth: 0,
        }
    }

    fn position(&self, id: NodeId) -> Position {
        let n = self.doc.node(id);
        Position { line: n.line, column: n.column }
    }

    fn note(&mut self, message: String) {
        if self.type_errors.len() < MAX_TYPE_ERRORS {
            self.type_errors.push(message);
        }
    }

    /// go-yaml's `terror`: ``line N: cannot unmarshal !!str `abc` into int``.
    fn type_error(&mut self, id: NodeId, tag: &str, into: &str) {
        let n = self.doc.node(id);
        let tag = if n.tag.is_empty() { tag } else { n.tag.as_str() };
        let value = if tag == resolve::SEQ || tag == resolve::MAP {
            String::new()
        } else if n.value.len() > 10 {
            format!(" `{}...`", String::from_utf8_lossy(&n.value.as_bytes()[..7]))
        } else {
            format!(" `{}`", n.value)
        };
        let message = format!("line {}: cannot unmarshal {tag}{value} into {into}", n.line);
        self.note(message);
    }

    /// go-yaml's `unmarshal`: decodes node `id` into `out`; false when it did not decode.
    fn unmarshal<T: Target>(&mut self, id: NodeId, out: &mut T) -> Step<bool> {
        self.count()?;
        self.depth += 1;
        let decoded = if self.depth > MAX_DEPTH {
            Err(format!("yaml: aliases and merge keys nest deeper than {MAX_DEPTH} levels"))
        } else {
            self.unmarshal_node(id, out)
        };
        self.depth -= 1;
        decoded
    }

    fn unmarshal_node<T: Target>(&mut self, id: NodeId, out: &mut T) -> Step<bool> {
        let kind = self.doc.node(id).kind;
        if kind == Kind::Alias {
            return self.alias(id, out);
        }
        if !self.doc.is_null(id) {
            if let Some(decoded) = out.unmarshaler(self, id) {
                return decoded;
            }
        }
        match kind {
            Kind::Scalar => self.scalar(id, out),
            Kind::Mapping if self.keys_unique(id) => out.mapping(self, id),
            Kind::Mapping => Ok(false),
            Kind::Sequence => out.sequence(self, id),
            Kind::Alias => Ok(false),
        }
    }

    /// go-yaml's guard against alias expansion ("billion laughs"): past 1,000 decodes, at most
    /// 99% of them (10% past 4,000,000) may come from aliases.
    fn count(&mut self) -> Step<()> {
        self.decodes += 1;
        if self.alias_depth > 0 {
            self.alias_decodes += 1;
        }
        let allowed = match self.decodes {
            ..=400_000 => 0.99,
            4_000_000.. => 0.10,
            n => 0.99 - 0.89 * ((n - 400_000) as f64 / 3_600_000.0),
        };
        if self.alias_decodes > 100 && self.decodes > 1000 && self.alias_decodes as f64 / self.decodes as f64 > allowed
        {
            return Err("yaml: document contains excessive aliasing".to_owned());
        }
        Ok(())
    }

    fn alias<T: Target>(&mut self, id: NodeId, out: &mut T) -> Step<bool> {
        let n = self.doc.node(id);
        if !self.expanding.insert(id) {
            return Err(format!("yaml: anchor '{}' value contains itself", n.value));
        }
        self.alias_depth += 1;
        let decoded = match n.target {
            Some(target) => self.unmarshal(target, out),
            None => Ok(false),
        };
        self.alias_depth -= 1;
        self.expanding.remove(&id);
        decoded
    }

    fn scalar<T: Target>(&mut self, id: NodeId, out: &mut T) -> Step<bool> {
        let n = self.doc.node(id);
        let (tag, value) = if n.tag == resolve::STR {
            (resolve::STR.to_owned(), Resolved::Str)
        } else {
            resolve::resolve(&n.tag, &n.value)?
        };
        if value == Resolved::Null {
            return Ok(out.null());
        }
        let text = if tag == resolve::BINARY { binary(&n.value)? } else { n.value.clone() };
        out.scalar(self, id, &tag, value, text)
    }

    /// go-yaml's check that no key is repeated in a mapping: one error for each later key equal
    /// (same kind, same text) to an earlier one.
    fn keys_unique(&mut self, id: NodeId) -> bool {
        let keys: Vec<NodeId> = self.doc.pairs(id).map(|(k, _)| k).collect();
        let mut same: HashMap<(Kind, &str), Vec<NodeId>> = HashMap::new();
        for &k in &keys {
            let n = self.doc.node(k);
            same.entry((n.kind, n.value.as_str())).or_default().push(k);
        }
        if same.len() == keys.len() {
            return true;
        }
        let mut repeats = Vec::new();
        for &k in &keys {
            let first = self.doc.node(k);
            let group = same.get(&(first.kind, first.value.as_str())).map(Vec::as_slice).unwrap_or_default();
            for &later in group.iter().skip_while(|&&o| o != k).skip(1) {
                if repeats.len() >= MAX_TYPE_ERRORS {
                    break;
                }
                let line = self.doc.node(later).line;
                repeats.push(format!(
                    "line {line}: mapping key {} already defined at line {}",
                    go_quote(&first.value),
                    first.line
                ));
            }
        }
        for message in repeats {
            self.note(message);
        }
        false
    }

    /// The text of a key for the set of merged keys (`None`: a null key, never merged).
    fn key_text(&self, id: NodeId) -> Step<Option<String>> {
        let mut n = self.doc.node(id);
        if let Some(target) = n.target {
            n = self.doc.node(target);
        }
        match n.kind {
            Kind::Mapping => Err("yaml: runtime error: hash of unhashable type map[string]interface {}".to_owned()),
            Kind::Sequence => Err("yaml: runtime error: hash of unhashable type []interface {}".to_owned()),
            _ if self.doc.is_null(id) => Ok(None),
            _ => Ok(Some(n.value.clone())),
        }
    }

    /// go-yaml's `mappingStruct`.
    fn mapping_struct<S: Struct>(&mut self, id: NodeId, out: &mut S) -> Step<bool> {
        let mut merged = self.merged.take();
        let mut done = vec![false; S::FIELDS.len()];
        let mut merge = None;
        let pairs: Vec<(NodeId, NodeId)> = self.doc.pairs(id).collect();
        for (key, value) in pairs {
            if self.doc.is_merge_key(key) {
                merge = Some(value);
                continue;
            }
            let mut name = String::new();
            if !self.unmarshal(key, &mut name)? {
                continue;
            }
            if let Some(merged) = merged.as_mut() {
                if !merged.insert(name.clone()) {
                    continue;
                }
            }
            let line = self.doc.node(key).line;
            match S::FIELDS.iter().position(|f| *f == name) {
                Some(index) if done.get(index).copied().unwrap_or_default() => {
                    self.note(format!("line {line}: field {name} already set in type {}", S::TYPE));
                }
                Some(index) => {
                    if let Some(d) = done.get_mut(index) {
                        *d = true;
                    }
                    out.field(self, index, value)?;
                }
                None if self.known_fields => {
                    self.note(format!("line {line}: field {name} not found in type {}", S::TYPE));
                }
                None => {}
            }
        }
        self.merged = merged;
        if let Some(merge) = merge {
            self.merge(id, merge, out)?;
        }
        Ok(true)
    }

    /// go-yaml's `mapping` into `map[string]string`.
    fn mapping_map(&mut self, id: NodeId, out: &mut BTreeMap<String, String>) -> Step<bool> {
        let mut merged = self.merged.take();
        let mut merge = None;
        let pairs: Vec<(NodeId, NodeId)> = self.doc.pairs(id).collect();
        for (key, value) in pairs {
            if self.doc.is_merge_key(key) {
                merge = Some(value);
                continue;
            }
            let mut name = String::new();
            if !self.unmarshal(key, &mut name)? {
                continue;
            }
            if let Some(merged) = merged.as_mut() {
                if !merged.insert(name.clone()) {
                    continue;
                }
            }
            let mut text = String::new();
            if self.unmarshal(value, &mut text)? || (self.doc.is_null(value) && !out.contains_key(&name)) {
                out.insert(name, text);
            }
        }
        self.merged = merged;
        if let Some(merge) = merge {
            self.merge(id, merge, out)?;
        }
        Ok(true)
    }

    /// go-yaml's `merge`: decodes the mapping(s) of a `<<` key into `out`, skipping keys already
    /// set.
    fn merge<T: Target>(&mut self, parent: NodeId, merge: NodeId, out: &mut T) -> Step<()> {
        let fresh = self.merged.is_none();
        if fresh {
            let mut keys = HashSet::new();
            let parent_keys: Vec<NodeId> = self.doc.pairs(parent).map(|(k, _)| k).collect();
            for key in parent_keys {
                self.count()?;
                if let Some(text) = self.key_text(key)? {
                    keys.insert(text);
                }
            }
            self.merged = Some(keys);
        }
        let doc = self.doc;
        let want_map = || "yaml: map merge requires map or sequence of maps as the value".to_owned();
        let is_map = |id: NodeId| {
            let n = doc.node(id);
            let n = n.target.map_or(n, |t| doc.node(t));
            n.kind == Kind::Mapping
        };
        let sources: Vec<NodeId> = match doc.node(merge).kind {
            Kind::Mapping | Kind::Alias if is_map(merge) => vec![merge],
            Kind::Sequence => doc.node(merge).content.clone(),
            _ => return Err(want_map()),
        };
        for source in sources {
            if !is_map(source) {
                return Err(want_map());
            }
            self.unmarshal(source, out)?;
        }
        if fresh {
            self.merged = None;
        }
        Ok(())
    }

    /// Decodes a sequence into a slice, dropping the items that do not decode.
    fn sequence_into<T: Item>(&mut self, id: NodeId, out: &mut Vec<T>) -> Step<bool> {
        out.clear();
        let items = self.doc.node(id).content.clone();
        for item in items {
            let mut value = T::default();
            value.place(self.position(item));
            if self.unmarshal(item, &mut value)? {
                out.push(value);
            }
        }
        Ok(true)
    }
}

/// A `!!binary` scalar's bytes, as text.
fn binary(text: &str) -> Step<String> {
    use base64::Engine;
    let compact: String = text.chars().filter(|c| !matches!(c, '\r' | '\n')).collect();
    base64::engine::general_purpose::STANDARD
        .decode(compact)
        .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
        .map_err(|_| "yaml: !!binary value contains invalid base64 data".to_owned())
}

impl Target for String {
    const TYPE: &'static str = "string";

    fn scalar(&mut self, _d: &mut Decoder<'_>, _id: NodeId, _tag: &str, _value: Resolved, text: String) -> Step<bool> {
        *self = text;
        Ok(true)
    }
}

/// Go's `int`.
impl Target for i64 {
    const TYPE: &'static str = "int";

    fn scalar(&mut self, d: &mut Decoder<'_>, id: NodeId, tag: &str, value: Resolved, _text: String) -> Step<bool> {
        match value {
            Resolved::Int(i) => *self = i,
            // Go converts a float to an int by truncation, if it is at most 2^63.
            Resolved::Float(f) if f <= i64::MAX as f64 => *self = f as i64,
            _ => {
                d.type_error(id, tag, Self::TYPE);
                return Ok(false);
            }
        }
        Ok(true)
    }
}

/// Prometheus' `model.Duration`, in milliseconds: decoded as a string, then parsed.
#[derive(Debug, Default)]
struct Duration(i64);

impl Target for Duration {
    const TYPE: &'static str = "model.Duration";

    fn unmarshaler(&mut self, d: &mut Decoder<'_>, id: NodeId) -> Option<Step<bool>> {
        let mut text = String::new();
        let errors_before = d.type_errors.len();
        if let Err(stop) = d.unmarshal(id, &mut text) {
            return Some(Err(stop));
        }
        if d.type_errors.len() > errors_before {
            return Some(Ok(false));
        }
        Some(duration::parse_ms(&text).map(|ms| {
            self.0 = ms;
            true
        }))
    }
}

/// `*model.Duration`.
impl Target for Option<i64> {
    const TYPE: &'static str = "*model.Duration";

    fn null(&mut self) -> bool {
        *self = None;
        true
    }

    fn unmarshaler(&mut self, d: &mut Decoder<'_>, id: NodeId) -> Option<Step<bool>> {
        let mut duration = Duration::default();
        let decoded = duration.unmarshaler(d, id);
        *self = Some(duration.0);
        decoded
    }
}

impl Target for BTreeMap<String, String> {
    const TYPE: &'static str = "map[string]string";

    fn null(&mut self) -> bool {
        self.clear();
        true
    }

    fn mapping(&mut self, d: &mut Decoder<'_>, id: NodeId) -> Step<bool> {
        d.mapping_map(id, self)
    }
}

/// A slice of `T`.
struct Slice<'a, T>(&'a mut Vec<T>);

impl<T: Item> Target for Slice<'_, T> {
    const TYPE: &'static str = T::SLICE;

    fn null(&mut self) -> bool {
        self.0.clear();
        true
    }

    fn sequence(&mut self, d: &mut Decoder<'_>, id: NodeId) -> Step<bool> {
        d.sequence_into(id, self.0)
    }
}

/// Decodes `value` into a duration field (milliseconds).
fn duration_field(d: &mut Decoder<'_>, value: NodeId, out: &mut i64) -> Step<()> {
    let mut duration = Duration(*out);
    d.unmarshal(value, &mut duration)?;
    *out = duration.0;
    Ok(())
}

/// Decodes `value` into a string field, keeping where it was written.
fn located_field(d: &mut Decoder<'_>, value: NodeId, out: &mut Located) -> Step<()> {
    out.at = d.position(value);
    d.unmarshal(value, &mut out.value)?;
    Ok(())
}

impl Target for RawGroups {
    const TYPE: &'static str = "rulefmt.RuleGroups";

    fn mapping(&mut self, d: &mut Decoder<'_>, id: NodeId) -> Step<bool> {
        d.mapping_struct(id, self)
    }
}

impl Struct for RawGroups {
    const FIELDS: &'static [&'static str] = &["groups"];

    fn field(&mut self, d: &mut Decoder<'_>, _index: usize, value: NodeId) -> Step<()> {
        d.unmarshal(value, &mut Slice(&mut self.groups))?;
        Ok(())
    }
}

impl Target for RawGroup {
    const TYPE: &'static str = "rulefmt.RuleGroup";

    fn mapping(&mut self, d: &mut Decoder<'_>, id: NodeId) -> Step<bool> {
        d.mapping_struct(id, self)
    }
}

impl Item for RawGroup {
    const SLICE: &'static str = "[]rulefmt.RuleGroup";

    fn place(&mut self, at: Position) {
        self.at = at;
    }
}

impl Struct for RawGroup {
    const FIELDS: &'static [&'static str] = &["name", "interval", "query_offset", "limit", "rules", "labels"];

    fn field(&mut self, d: &mut Decoder<'_>, index: usize, value: NodeId) -> Step<()> {
        match index {
            0 => d.unmarshal(value, &mut self.name).map(drop),
            1 => duration_field(d, value, &mut self.interval_ms),
            2 => d.unmarshal(value, &mut self.query_offset_ms).map(drop),
            3 => d.unmarshal(value, &mut self.limit).map(drop),
            4 => d.unmarshal(value, &mut Slice(&mut self.rules)).map(drop),
            _ => d.unmarshal(value, &mut self.labels).map(drop),
        }
    }
}

impl Target for RawRule {
    const TYPE: &'static str = "rulefmt.Rule";

    fn mapping(&mut self, d: &mut Decoder<'_>, id: NodeId) -> Step<bool> {
        d.mapping_struct(id, self)
    }
}

impl Item for RawRule {
    const SLICE: &'static str = "[]rulefmt.Rule";

    fn place(&mut self, at: Position) {
        self.at = at;
    }
}

impl Struct for RawRule {
    const FIELDS: &'static [&'static str] =
        &["record", "alert", "expr", "for", "keep_firing_for", "labels", "annotations"];

    fn field(&mut self, d: &mut Decoder<'_>, index: usize, value: NodeId) -> Step<()> {
        match index {
            0 => located_field(d, value, &mut self.record),
            1 => located_field(d, value, &mut self.alert),
            2 => located_field(d, value, &mut self.expr),
            3 => duration_field(d, value, &mut self.for_ms),
            4 => duration_field(d, value, &mut self.keep_firing_for_ms),
            5 => d.unmarshal(value, &mut self.labels).map(drop),
            _ => d.unmarshal(value, &mut self.annotations).map(drop),
        }
    }
}
