//! A zero-copy scanner of remote-write 1.0 `prometheus.WriteRequest` bodies: label pairs are
//! borrowed from the decompressed body, validated in place and appended straight to a
//! [`PackedBatch`] in canonical form; samples are decoded straight into it. No allocation per
//! label or per series.
//!
//! The scanner only ever *accepts*. Whenever a request is not plain float series, or anything
//! is wrong with it, it answers `None` and the caller decodes the body again with prost
//! ([`super::decode::decode_v1_reference`]), which produces the request's result, error message
//! included. So its contract is one sentence: **when it returns `Some`, the batch equals what
//! the prost decoder and the label checks produce for the same body** (the proptests in
//! `remote/tests.rs` and the `remote_write_v1` fuzz target check exactly this). In particular it
//! must reject everything prost rejects:
//!
//! | wire content | prost | scanner |
//! |---|---|---|
//! | key varint over 10 bytes, 10th byte > 1, or past the end | error | `None` |
//! | key above `u32::MAX`, wire type 6 or 7, field number 0 | error | `None` |
//! | a known field with another wire type | error | `None` |
//! | a length or fixed-width field past its message's end | error | `None` |
//! | a label name or value that is not UTF-8 | error | `None` |
//! | unknown field of wire type varint, 64-bit, length-delimited, 32-bit | skipped | skipped |
//! | group wire types (3, 4), anywhere | skipped or error | `None` |
//! | `WriteRequest.metadata`, `TimeSeries.exemplars`, `TimeSeries.histograms` | decoded | `None` |
//! | a field seen twice in `Label` or `Sample` | last one wins | last one wins |
//!
//! The label checks are those of `decode.rs` (`validate_labels`): names non-empty, valid and
//! strictly ascending, values free of 0x00, the count and length limits, a non-empty
//! `__name__`; labels with empty values are dropped, as [`crate::labels::Labels`] does.

use super::decode::DecodeLimits;
use super::known_labels::KnownLabels;
use crate::labels::{is_storable_label_name, METRIC_NAME};
use crate::sample::{check_timestamp, PackedBatch, Sample};

/// Protobuf wire types.
pub(super) const VARINT: u8 = 0;
pub(super) const FIXED64: u8 = 1;
pub(super) const LEN: u8 = 2;
pub(super) const FIXED32: u8 = 5;

/// A position in a message's bytes.
pub(super) struct Cursor<'a> {
    pub(super) src: &'a [u8],
}

impl<'a> Cursor<'a> {
    pub(super) fn is_empty(&self) -> bool {
        self.src.is_empty()
    }

    /// A varint of at most 10 bytes whose 10th byte is 0 or 1 (prost's rule).
    pub(super) fn varint(&mut self) -> Option<u64> {
        let mut value = 0u64;
        for (i, &b) in self.src.iter().take(10).enumerate() {
            value |= u64::from(b & 0x7f) << (7 * i);
            if b < 0x80 {
                if i == 9 && b > 1 {
                    return None;
                }
                self.src = self.src.get(i + 1..)?;
                return Some(value);
            }
        }
        None
    }

    /// A field key: (field number, wire type). Rejects what prost rejects.
    pub(super) fn key(&mut self) -> Option<(u32, u8)> {
        let key = u32::try_from(self.varint()?).ok()?;
        let (tag, wire) = (key >> 3, (key & 7) as u8);
        (tag != 0).then_some((tag, wire))
    }

    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, tail) = self.src.split_at_checked(n)?;
        self.src = tail;
        Some(head)
    }

    /// The bytes of a length-delimited field.
    pub(super) fn bytes(&mut self) -> Option<&'a [u8]> {
        let n = usize::try_from(self.varint()?).ok()?;
        self.take(n)
    }

    fn fixed64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }

    /// Skips an unknown field as prost does; `None` for groups (left to prost).
    pub(super) fn skip(&mut self, wire: u8) -> Option<()> {
        match wire {
            VARINT => self.varint().map(drop),
            FIXED64 => self.take(8).map(drop),
            LEN => self.bytes().map(drop),
            FIXED32 => self.take(4).map(drop),
            _ => None,
        }
    }
}

/// Scans an uncompressed `prometheus.WriteRequest` into a batch; `None` when the request is
/// anything but valid float series (see the module docs: the caller then decodes it with prost).
pub fn scan_v1(raw: &[u8], limits: &DecodeLimits) -> Option<PackedBatch> {
    scan_v1_granted(raw, limits, None, &mut |_| true)
}

/// [`scan_v1`] with a cache of label sets seen before: the answer is the same, but a series whose
/// label fields `known` holds skips parsing and checking them (see [`KnownLabels`]).
pub fn scan_v1_known(raw: &[u8], limits: &DecodeLimits, known: &KnownLabels) -> Option<PackedBatch> {
    scan_v1_granted(raw, limits, Some(known), &mut |_| true)
}

/// [`scan_v1`], asking `grant` for the bytes of every allocation of the batch before it is made
/// (a first guess from the body's size, then each time a buffer doubles); `None` as soon as
/// `grant` refuses. With `known`, label sets seen before are taken from it (and new ones added).
pub fn scan_v1_granted(
    raw: &[u8],
    limits: &DecodeLimits,
    known: Option<&KnownLabels>,
    grant: &mut dyn FnMut(usize) -> bool,
) -> Option<PackedBatch> {
    let known = known.filter(|k| k.serves(limits));
    let mut batch = PackedBatch::default();
    // A series takes at least ~20 bytes of the body, a sample 11, a label's text about half of
    // its wire bytes.
    if !batch.make_room(raw.len() / 2, raw.len() / 16, raw.len() / 128, grant) {
        return None;
    }
    let mut pairs: Vec<(&str, &str)> = Vec::with_capacity(16);
    let mut series = 0usize;
    let mut body = Cursor { src: raw };
    while !body.is_empty() {
        match body.key()? {
            (1, LEN) => {
                series += 1;
                if series > limits.max_series {
                    return None;
                }
                time_series(body.bytes()?, limits, known, &mut pairs, &mut batch, grant)?;
            }
            (1 | 3, _) => return None,
            (_, wire) => body.skip(wire)?,
        }
    }
    Some(batch)
}

/// Scans one `TimeSeries` and, when it has samples, appends it to `batch`. Samples are taken
/// first; the label fields are only noted (their count, and their span when they are contiguous,
/// as every sender writes them), then taken from `known` when it holds that span, or parsed and
/// checked (and then added to `known`).
fn time_series<'a>(
    src: &'a [u8],
    limits: &DecodeLimits,
    known: Option<&KnownLabels>,
    pairs: &mut Vec<(&'a str, &'a str)>,
    batch: &mut PackedBatch,
    grant: &mut dyn FnMut(usize) -> bool,
) -> Option<()> {
    pairs.clear();
    batch.abandon_series();
    // Label fields: how many, and the span (start, end) of the contiguous run holding all of
    // them (`None` once a label field is found after another field).
    let mut labels = 0usize;
    let mut span: Option<(usize, usize)> = None;
    let mut contiguous = true;
    let mut ts = Cursor { src };
    while !ts.is_empty() {
        let field_start = src.len() - ts.src.len();
        match ts.key()? {
            (1, LEN) => {
                if labels >= limits.max_labels {
                    return None;
                }
                labels += 1;
                ts.bytes()?;
                let field_end = src.len() - ts.src.len();
                span = match span {
                    None => Some((field_start, field_end)),
                    Some((start, end)) if end == field_start => Some((start, field_end)),
                    Some(other) => {
                        contiguous = false;
                        Some(other)
                    }
                };
            }
            (2, LEN) => {
                let s = sample(ts.bytes()?)?;
                batch.make_room(0, 1, 0, grant).then_some(())?;
                batch.push_sample(s);
            }
            (1..=4, _) => return None,
            (_, wire) => ts.skip(wire)?,
        }
    }
    let wire = match (known, span) {
        (Some(_), Some((start, end))) if contiguous => src.get(start..end),
        _ => None,
    };
    if let (Some(known), Some(wire)) = (known, wire) {
        let has_samples = batch.open_samples() > 0;
        let mut room = true;
        let hit = known.lookup(wire, |canonical| {
            if has_samples {
                room = batch.make_room(canonical.len(), 0, 1, grant);
                if room {
                    batch.push_canonical(canonical);
                }
            }
        });
        if hit {
            room.then_some(())?;
            if has_samples {
                batch.finish_series();
            }
            return Some(());
        }
    }
    let mut ls = Cursor { src };
    while !ls.is_empty() {
        match ls.key()? {
            (1, LEN) => pairs.push(label(ls.bytes()?)?),
            (_, wire) => ls.skip(wire)?,
        }
    }
    check_labels(pairs, limits)?;
    if batch.open_samples() == 0 {
        return Some(());
    }
    let text: usize = pairs.iter().filter(|(_, v)| !v.is_empty()).map(|(n, v)| n.len() + v.len() + 2).sum();
    batch.make_room(text, 0, 1, grant).then_some(())?;
    for &(name, value) in pairs.iter() {
        if !value.is_empty() {
            batch.push_label(name, value);
        }
    }
    if let (Some(known), Some(wire)) = (known, wire) {
        known.learn(wire, batch.open_labels());
    }
    batch.finish_series();
    Some(())
}

/// Scans one `Label`: (name, value), empty when absent.
fn label(src: &[u8]) -> Option<(&str, &str)> {
    let (mut name, mut value) = ("", "");
    let mut l = Cursor { src };
    while !l.is_empty() {
        match l.key()? {
            (1, LEN) => name = std::str::from_utf8(l.bytes()?).ok()?,
            (2, LEN) => value = std::str::from_utf8(l.bytes()?).ok()?,
            (1 | 2, _) => return None,
            (_, wire) => l.skip(wire)?,
        }
    }
    Some((name, value))
}

/// Scans one `Sample`; its timestamp must be in range.
fn sample(src: &[u8]) -> Option<Sample> {
    let (mut value, mut timestamp) = (0u64, 0i64);
    let mut s = Cursor { src };
    while !s.is_empty() {
        match s.key()? {
            (1, FIXED64) => value = s.fixed64()?,
            (2, VARINT) => timestamp = s.varint()? as i64,
            (1 | 2, _) => return None,
            (_, wire) => s.skip(wire)?,
        }
    }
    check_timestamp(timestamp).ok()?;
    Some(Sample::new(timestamp, f64::from_bits(value)))
}

/// The label checks of `decode.rs` on borrowed pairs; `None` on any problem.
fn check_labels(pairs: &[(&str, &str)], limits: &DecodeLimits) -> Option<()> {
    let mut prev: Option<&str> = None;
    let mut has_name = false;
    for &(name, value) in pairs {
        if name.is_empty() || prev.is_some_and(|p| p >= name) || !is_storable_label_name(name) {
            return None;
        }
        prev = Some(name);
        if value.as_bytes().contains(&0) || name.len().max(value.len()) > limits.max_label_len {
            return None;
        }
        has_name |= name == METRIC_NAME && !value.is_empty();
    }
    has_name.then_some(())
}
