//! Label sets: the identity of a series.
//!
//! A [`Labels`] value upholds these invariants, checked once when it is built from untrusted input:
//! - labels are sorted by name and names are unique;
//! - every name matches `[a-zA-Z_][a-zA-Z0-9_]*`;
//! - no value is empty (an empty value means "label absent", as in Prometheus) and no value
//!   contains the byte 0x00 (it separates fields in the canonical encoding and in postings keys).
//!
//! The canonical encoding is `name 0x00 value 0x00` repeated in name order. It is unambiguous
//! because neither names nor values contain 0x00, and equal label sets encode to equal bytes.

use std::fmt;
use std::sync::Arc;

/// The label that carries the metric name.
pub const METRIC_NAME: &str = "__name__";

/// One label pair.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Label {
    /// Label name, `[a-zA-Z_][a-zA-Z0-9_]*`.
    pub name: String,
    /// Label value, non-empty UTF-8 without 0x00.
    pub value: String,
}

impl Label {
    /// Builds a label pair (no validation; see [`Labels::from_pairs`]).
    pub fn new(name: impl Into<String>, value: impl Into<String>) -> Self {
        Self { name: name.into(), value: value.into() }
    }
}

/// Why a label set was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LabelError {
    /// An empty label name, or one holding the byte 0x00 (any other UTF-8 is a valid name, as
    /// in Prometheus 3).
    #[error("invalid label name {0:?}: must be non-empty UTF-8 without the byte 0x00")]
    InvalidName(String),
    /// A label value containing 0x00.
    #[error("label {0:?} has a value containing the byte 0x00")]
    NulInValue(String),
    /// The same name twice.
    #[error("duplicate label name {0:?}")]
    DuplicateName(String),
    /// No `__name__` label (or an empty one).
    #[error("missing metric name (label __name__)")]
    MissingMetricName,
    /// Bytes that are not a canonical label-set encoding (corrupt storage).
    #[error("corrupt label-set encoding")]
    Corrupt,
    /// More labels than the configured limit.
    #[error("series has {count} labels, more than the limit of {limit}")]
    TooManyLabels {
        /// Labels in the series.
        count: usize,
        /// Configured limit.
        limit: usize,
    },
    /// A name or value longer than the configured limit.
    #[error("label {name:?} is {len} bytes long, more than the limit of {limit}")]
    TooLong {
        /// The label's name (truncated to 64 bytes).
        name: String,
        /// Length of the offending name or value.
        len: usize,
        /// Configured limit.
        limit: usize,
    },
}

/// Returns true when `name` is a label name the store keeps: any non-empty UTF-8 without the
/// byte 0x00 (which separates names and values in the canonical encoding), as Prometheus 3
/// accepts UTF-8 names (`service.name`, `名前`).
pub fn is_storable_label_name(name: &str) -> bool {
    !name.is_empty() && !name.as_bytes().contains(&0)
}

/// Returns true when `name` is a legacy Prometheus label name, `[a-zA-Z_][a-zA-Z0-9_]*` (what
/// PromQL's unquoted selectors and `--ingest-legacy-label-names` accept).
pub fn is_valid_label_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    match bytes.next() {
        Some(b) if b.is_ascii_alphabetic() || b == b'_' => {}
        _ => return false,
    }
    bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// Returns true when `name` is a legacy Prometheus metric name, `[a-zA-Z_:][a-zA-Z0-9_:]*`: what
/// the Prometheus text format takes unquoted before the braces.
pub fn is_legacy_metric_name(name: &str) -> bool {
    let mut b = name.bytes();
    matches!(b.next(), Some(c) if c.is_ascii_alphabetic() || c == b'_' || c == b':')
        && b.all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b':')
}

/// A validated, sorted label set. See the module docs for the invariants.
///
/// Shared behind an `Arc`: query evaluation hands the same label set to every step of every
/// function, and a clone must not copy strings.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Labels(Arc<Vec<Label>>);

impl Labels {
    /// The empty label set.
    pub fn empty() -> Self {
        Self::default()
    }

    /// Whether another holder shares this label set's allocation (clones share it).
    pub fn is_shared(&self) -> bool {
        Arc::strong_count(&self.0) > 1
    }

    /// Validates untrusted pairs: checks names and values, drops empty values, sorts,
    /// and rejects duplicate names. Does not require `__name__` (see [`Labels::require_metric_name`]).
    ///
    /// # Errors
    /// The first problem found, as a [`LabelError`].
    pub fn from_pairs<I, N, V>(pairs: I) -> Result<Self, LabelError>
    where
        I: IntoIterator<Item = (N, V)>,
        N: Into<String>,
        V: Into<String>,
    {
        let mut labels = Vec::new();
        for (name, value) in pairs {
            let (name, value) = (name.into(), value.into());
            if !is_storable_label_name(&name) {
                return Err(LabelError::InvalidName(name));
            }
            if value.as_bytes().contains(&0) {
                return Err(LabelError::NulInValue(name));
            }
            labels.push(Label { name, value });
        }
        labels.sort_by(|a, b| a.name.cmp(&b.name));
        if let Some(w) = labels.windows(2).find(|w| matches!(w, [a, b] if a.name == b.name)) {
            let name = w.first().map(|l| l.name.clone()).unwrap_or_default();
            return Err(LabelError::DuplicateName(name));
        }
        labels.retain(|l| !l.value.is_empty());
        Ok(Self(Arc::new(labels)))
    }

    /// Builds a label set from labels the caller already knows to be valid (for example the
    /// output of a PromQL function). Sorts, keeps the last of duplicate names, drops empty values.
    pub fn from_trusted(mut labels: Vec<Label>) -> Self {
        labels.sort_by(|a, b| a.name.cmp(&b.name));
        labels.reverse();
        labels.dedup_by(|a, b| a.name == b.name);
        labels.reverse();
        labels.retain(|l| !l.value.is_empty());
        Self(Arc::new(labels))
    }

    /// Fails unless the set has a non-empty `__name__`.
    ///
    /// # Errors
    /// [`LabelError::MissingMetricName`].
    pub fn require_metric_name(&self) -> Result<(), LabelError> {
        match self.get(METRIC_NAME) {
            Some(_) => Ok(()),
            None => Err(LabelError::MissingMetricName),
        }
    }

    /// Fails when the set exceeds a label-count or label-length limit.
    ///
    /// # Errors
    /// [`LabelError::TooManyLabels`] or [`LabelError::TooLong`].
    pub fn check_limits(&self, max_labels: usize, max_len: usize) -> Result<(), LabelError> {
        if self.0.len() > max_labels {
            return Err(LabelError::TooManyLabels { count: self.0.len(), limit: max_labels });
        }
        for l in self.0.iter() {
            let len = l.name.len().max(l.value.len());
            if len > max_len {
                let mut name = l.name.clone();
                name.truncate(64);
                return Err(LabelError::TooLong { name, len, limit: max_len });
            }
        }
        Ok(())
    }

    /// Value of the label `name`, if present.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .binary_search_by(|l| l.name.as_str().cmp(name))
            .ok()
            .and_then(|i| self.0.get(i))
            .map(|l| l.value.as_str())
    }

    /// The metric name, if present.
    pub fn metric_name(&self) -> Option<&str> {
        self.get(METRIC_NAME)
    }

    /// Iterates the labels in name order.
    pub fn iter(&self) -> std::slice::Iter<'_, Label> {
        self.0.iter()
    }

    /// Number of labels.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True when there are no labels.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The labels as a sorted slice.
    pub fn as_slice(&self) -> &[Label] {
        &self.0
    }

    /// The address of the shared allocation: two clones of one set have the same address, and
    /// while a set is alive no other set has its address. Equal addresses imply equal labels
    /// (not the converse), so it serves as a cheap cache key as long as the cache keeps a clone.
    pub fn addr(&self) -> usize {
        Arc::as_ptr(&self.0) as usize
    }

    /// Consumes the set into its sorted labels.
    pub fn into_vec(self) -> Vec<Label> {
        Arc::unwrap_or_clone(self.0)
    }

    /// Appends the canonical encoding (`name 0x00 value 0x00`, in name order) to `dst`.
    pub fn encode(&self, dst: &mut Vec<u8>) {
        for l in self.0.iter() {
            dst.extend_from_slice(l.name.as_bytes());
            dst.push(0);
            dst.extend_from_slice(l.value.as_bytes());
            dst.push(0);
        }
    }

    /// The canonical encoding as a new vector.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.0.iter().map(|l| l.name.len() + l.value.len() + 2).sum());
        self.encode(&mut v);
        v
    }

    /// Decodes a canonical encoding produced by [`Labels::encode`].
    ///
    /// # Errors
    /// [`LabelError::Corrupt`] when the bytes are not a canonical encoding.
    pub fn decode(src: &[u8]) -> Result<Self, LabelError> {
        let Some(body) = src.strip_suffix(&[0]) else {
            return if src.is_empty() { Ok(Self::empty()) } else { Err(LabelError::Corrupt) };
        };
        let fields: Vec<&[u8]> = body.split(|&b| b == 0).collect();
        if !fields.len().is_multiple_of(2) {
            return Err(LabelError::Corrupt);
        }
        let text = |b: &[u8]| std::str::from_utf8(b).map(str::to_owned).map_err(|_| LabelError::Corrupt);
        let labels = fields
            .chunks_exact(2)
            .map(|pair| match pair {
                [name, value] => Ok(Label { name: text(name)?, value: text(value)? }),
                _ => Err(LabelError::Corrupt),
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self(Arc::new(labels)))
    }
}

impl fmt::Display for Labels {
    /// Prometheus text form: `name{a="b", c="d"}`, a name that is not a legacy one quoted
    /// (`name{"service.name"="x"}`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = self.metric_name().unwrap_or("");
        write!(f, "{name}{{")?;
        let mut first = true;
        for l in self.0.iter().filter(|l| l.name != METRIC_NAME) {
            if !first {
                write!(f, ", ")?;
            }
            first = false;
            if is_valid_label_name(&l.name) {
                write!(f, "{}={:?}", l.name, l.value)?;
            } else {
                write!(f, "{:?}={:?}", l.name, l.value)?;
            }
        }
        write!(f, "}}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn sorts_drops_empty_and_rejects_duplicates() {
        let l = Labels::from_pairs([("b", "2"), ("__name__", "m"), ("a", ""), ("c", "3")]).unwrap();
        assert_eq!(l.to_string(), r#"m{b="2", c="3"}"#);
        assert_eq!(Labels::from_pairs([("a", "1"), ("a", "2")]), Err(LabelError::DuplicateName("a".into())));
        assert_eq!(Labels::from_pairs([("", "1")]), Err(LabelError::InvalidName(String::new())));
        assert_eq!(Labels::from_pairs([("a\0b", "1")]), Err(LabelError::InvalidName("a\0b".into())));
        let utf8 = Labels::from_pairs([("__name__", "m"), ("service.name", "a"), ("名前", "x"), ("1a", "1")]).unwrap();
        assert_eq!(utf8.to_string(), r#"m{"1a"="1", "service.name"="a", "名前"="x"}"#);
        assert_eq!(Labels::from_pairs([("a", "x\0y")]), Err(LabelError::NulInValue("a".into())));
    }

    #[test]
    fn empty_set_round_trips() {
        assert_eq!(Labels::decode(&[]).unwrap(), Labels::empty());
    }

    fn arb_labels() -> impl Strategy<Value = Labels> {
        proptest::collection::btree_map("[a-zA-Z_][a-zA-Z0-9_]{0,8}", "[^\u{0}]{0,12}", 0..8)
            .prop_map(|m| Labels::from_pairs(m).unwrap())
    }

    proptest! {
        #[test]
        fn decode_inverts_encode(l in arb_labels()) {
            prop_assert_eq!(Labels::decode(&l.to_bytes()).unwrap(), l);
        }

        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = Labels::decode(&bytes);
        }
    }
}
