//! The fast path of `/api/put` decoding: a scanner for the body every OpenTSDB client sends,
//! an array of points (or one point) whose members are `metric` (a string), `timestamp` and
//! `value` (numbers or strings) and `tags` (an object of strings, or `null`), with no escapes in
//! strings and no key given twice.
//!
//! It reads straight from the bytes, with no `Deserializer`, no visitor and no
//! `serde_json::Number`: only the JSON grammar this shape needs. Whatever else it meets (an
//! escape, another member, a tag that is a number, invalid JSON, a bad point, the budget's
//! refusal) makes it give up, and the caller decodes the body again with the serde path
//! ([`super::decode`]), which gives the answers for every case: so the scanner need only be
//! right on what it accepts, and a property test checks it against the serde path on that.
//!
//! A point whose metric and raw tags are those of the point before it joins that point's series
//! without its labels being built and checked again ([`BatchBuilder::push_again`]).

use std::borrow::Cow;

use super::{label_name, BatchBuilder, MAX_SECONDS};
use crate::sample::{check_timestamp, Sample};

/// Decodes `body` into `out`; the number of points, or `None` when the scanner gives up (then
/// `out` holds a partial batch, to be dropped).
pub(super) fn decode<E>(body: &[u8], out: &mut BatchBuilder<'_, E>) -> Option<usize> {
    // Validated once here, so that every string is a slice of `text`.
    let text = std::str::from_utf8(body).ok()?;
    let mut scan = Scan { text, at: 0 };
    let mut sink = Sink { out, previous: None, tags: Vec::new(), pairs: Vec::new() };
    let points = match scan.peek()? {
        b'[' => {
            scan.at += 1;
            let mut n = 0;
            if !scan.eat(b']') {
                loop {
                    scan.point(&mut sink)?;
                    n += 1;
                    if scan.eat(b',') {
                        continue;
                    }
                    if scan.eat(b']') {
                        break;
                    }
                    return None;
                }
            }
            n
        }
        b'{' => {
            scan.point(&mut sink)?;
            1
        }
        _ => return None,
    };
    scan.skip_whitespace();
    (scan.at == body.len()).then_some(points)
}

/// A position in the body.
struct Scan<'b> {
    text: &'b str,
    at: usize,
}

/// A `timestamp` or `value` as written: a number literal or a string's contents.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Scalar<'b> {
    Number(&'b str),
    Str(&'b str),
}

/// Where scanned points go, with what the point before left for the next one.
struct Sink<'s, 'a, 'b, E> {
    out: &'s mut BatchBuilder<'a, E>,
    /// The metric and raw tags of the last point added.
    previous: Option<(&'b str, Vec<(&'b str, &'b str)>)>,
    /// The raw tags of the point being read.
    tags: Vec<(&'b str, &'b str)>,
    /// Its label pairs (names sanitized under `--ingest-legacy-label-names`).
    pairs: Vec<(Cow<'b, str>, &'b str)>,
}

impl<'b> Scan<'b> {
    fn byte(&self) -> Option<u8> {
        self.text.as_bytes().get(self.at).copied()
    }

    fn skip_whitespace(&mut self) {
        while matches!(self.byte(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.at += 1;
        }
    }

    /// The next byte that is not whitespace.
    fn peek(&mut self) -> Option<u8> {
        self.skip_whitespace();
        self.byte()
    }

    /// Steps over `c` (after whitespace) when it comes next.
    fn eat(&mut self, c: u8) -> bool {
        let found = self.peek() == Some(c);
        self.at += usize::from(found);
        found
    }

    /// A string without escapes or control characters.
    fn string(&mut self) -> Option<&'b str> {
        if !self.eat(b'"') {
            return None;
        }
        let start = self.at;
        let rest = self.text.as_bytes().get(start..)?;
        let len = rest.iter().position(|&c| c == b'"' || c == b'\\' || c < 0x20)?;
        if rest.get(len) != Some(&b'"') {
            return None;
        }
        self.at = start + len + 1;
        self.text.get(start..start + len)
    }

    /// A number literal as JSON writes one: `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`.
    fn number(&mut self) -> Option<&'b str> {
        self.skip_whitespace();
        let start = self.at;
        self.at += usize::from(self.byte() == Some(b'-'));
        match self.byte()? {
            b'0' => self.at += 1,
            b'1'..=b'9' => self.digits(),
            _ => return None,
        }
        if self.byte() == Some(b'.') {
            self.at += 1;
            self.required_digits()?;
        }
        if matches!(self.byte(), Some(b'e' | b'E')) {
            self.at += 1;
            self.at += usize::from(matches!(self.byte(), Some(b'+' | b'-')));
            self.required_digits()?;
        }
        self.text.get(start..self.at)
    }

    fn digits(&mut self) {
        while self.byte().is_some_and(|c| c.is_ascii_digit()) {
            self.at += 1;
        }
    }

    fn required_digits(&mut self) -> Option<()> {
        let start = self.at;
        self.digits();
        (self.at > start).then_some(())
    }

    fn scalar(&mut self) -> Option<Scalar<'b>> {
        match self.peek()? {
            b'"' => self.string().map(Scalar::Str),
            _ => self.number().map(Scalar::Number),
        }
    }

    /// `null` or an object of strings, into `tags`.
    fn tags(&mut self, tags: &mut Vec<(&'b str, &'b str)>) -> Option<()> {
        if self.peek()? == b'n' {
            return self.keyword("null");
        }
        if !self.eat(b'{') {
            return None;
        }
        if self.eat(b'}') {
            return Some(());
        }
        loop {
            let key = self.string()?;
            if !self.eat(b':') {
                return None;
            }
            tags.push((key, self.string()?));
            if self.eat(b',') {
                continue;
            }
            return self.eat(b'}').then_some(());
        }
    }

    fn keyword(&mut self, word: &str) -> Option<()> {
        let end = self.at + word.len();
        (self.text.get(self.at..end)? == word).then(|| self.at = end)
    }

    /// One point object, added to `sink`.
    fn point<E>(&mut self, sink: &mut Sink<'_, '_, 'b, E>) -> Option<()> {
        if !self.eat(b'{') {
            return None;
        }
        let (mut metric, mut timestamp, mut value, mut has_tags) = (None, None, None, false);
        sink.tags.clear();
        loop {
            let key = self.string()?;
            if !self.eat(b':') {
                return None;
            }
            match key {
                "metric" if metric.is_none() => metric = Some(self.string()?),
                "timestamp" if timestamp.is_none() => timestamp = Some(self.scalar()?),
                "value" if value.is_none() => value = Some(self.scalar()?),
                "tags" if !has_tags => {
                    has_tags = true;
                    self.tags(&mut sink.tags)?;
                }
                _ => return None,
            }
            if self.eat(b',') {
                continue;
            }
            if self.eat(b'}') {
                break;
            }
            return None;
        }
        let sample = Sample::new(timestamp_ms(timestamp?)?, value_of(value?)?);
        sink.add(metric?, sample)
    }
}

impl<'b, E> Sink<'_, '_, 'b, E> {
    /// Adds a point of `metric` with the raw tags in `self.tags`.
    fn add(&mut self, metric: &'b str, sample: Sample) -> Option<()> {
        if metric.is_empty() {
            return None;
        }
        let same = self.previous.as_ref().is_some_and(|(m, t)| *m == metric && *t == self.tags);
        if same && self.out.push_again(&[sample]).ok()? {
            return Some(());
        }
        self.pairs.clear();
        let legacy = self.out.legacy_label_names();
        for (i, &(k, v)) in self.tags.iter().enumerate() {
            // A key given twice keeps its last value (as the serde path does).
            if self.tags.get(i + 1..).is_some_and(|later| later.iter().any(|(later, _)| *later == k)) {
                continue;
            }
            if !v.is_empty() {
                self.pairs.push((label_name(Cow::Borrowed(k), legacy), v));
            }
        }
        self.out.push_pairs(metric, &mut self.pairs, &[sample]).ok()?;
        match &mut self.previous {
            Some((m, t)) => {
                *m = metric;
                t.clone_from(&self.tags);
            }
            None => self.previous = Some((metric, self.tags.clone())),
        }
        Some(())
    }
}

/// The timestamp in milliseconds, as the serde path reads it (`None` where it refuses it).
fn timestamp_ms(raw: Scalar<'_>) -> Option<i64> {
    let ts = match raw {
        // serde_json reads `-0`, and integers beyond i64, as floats: not an integer there.
        Scalar::Number(n) if n.bytes().all(|c| c.is_ascii_digit()) => n.parse::<u64>().ok()?.try_into().ok()?,
        Scalar::Number(n) if n.starts_with('-') && n != "-0" && n.bytes().skip(1).all(|c| c.is_ascii_digit()) => {
            n.parse::<i64>().ok()?
        }
        Scalar::Number(_) => return None,
        Scalar::Str(s) => s.parse::<i64>().ok()?,
    };
    let ms = if ts > MAX_SECONDS { Some(ts) } else { ts.checked_mul(1000) };
    ms.filter(|ms| check_timestamp(*ms).is_ok())
}

/// The value, as the serde path reads it (`None` where it refuses it). A number literal parses
/// to the nearest double, as serde_json's `float_roundtrip` parsing and its integer-to-double
/// conversion give; one beyond the doubles is invalid JSON to serde_json.
fn value_of(raw: Scalar<'_>) -> Option<f64> {
    let v = match raw {
        Scalar::Number(n) => n.parse::<f64>().ok()?,
        Scalar::Str(s) => s.trim().parse::<f64>().ok()?,
    };
    v.is_finite().then_some(v)
}

#[cfg(test)]
mod tests;
