//! Native histogram values in Prometheus' test-script notation (`{{schema:1 sum:3 count:2
//! buckets:[1 1]}}`), read as Prometheus' series-description lexer and grammar
//! (`promql/parser/lex.go`, `generated_parser.y`, `parse.go`) read them.
//!
//! | Part | Form | Default |
//! |---|---|---|
//! | value | `{{` key `:` val, one or more, separated by spaces, optional trailing space `}}`; `{{}}` or `{{ }}` for an empty one. No space after `{{` or around `:` | |
//! | `schema`, `offset`, `n_offset` | `-`? decimal digits | 0 |
//! | `sum`, `count`, `z_bucket` | `-`? number | 0 |
//! | `z_bucket_w` | number (no sign) | 0 |
//! | `buckets`, `n_buckets`, `custom_values` | `[` `-`?number, separated by spaces, optional trailing space `]`; at least one, no `-Inf` | none |
//! | `counter_reset_hint` | `unknown`, `reset`, `not_reset`, `gauge` | `unknown`, not given |
//! | number | digits with at most one `.` and one exponent, `_` between digits (Go's `ParseInt(s, 0, 64)`, so a leading `0` means octal when the digits allow, then `ParseFloat`), or `Inf`/`NaN` | |
//!
//! Keys and hint words are case-insensitive; a key given twice is an error. `buckets` and
//! `offset` make exactly one span `{offset, len(buckets)}`, zeros included (no splitting); without
//! buckets there is no span and the offset is ignored. `custom_values` are taken for any schema.
//!
//! Series items: `H` (one value), `HxN` (N+1 copies), `H+IxN` and `H-IxN` (N+1 values: `H`, then
//! each the one before plus (minus) `I`, with `FloatHistogram.Add`/`Sub` semantics: schemas and
//! zero buckets reconciled, the counter reset hint combined each step — equal hints stay, gauge
//! wins, then unknown, and reset with not_reset gives unknown). An expansion fails when the running
//! histogram's schema is finer than the increment's, or custom buckets meet exponential ones. Whether
//! the hint counts as given (Prometheus compares hints only then) comes from `H` for `H`/`HxN`
//! and from the increment `I` for all values of `H+IxN`/`H-IxN`, the base included.
//!
//! Where this reader is stricter than Prometheus, on input no script uses: a schema or offset
//! beyond `i32` is an error (Go wraps it), `xN` beyond [`MAX_REPEAT`] values is an error, and
//! stray letters in a bucket list (`[Infx]`, which Prometheus' lexer folds into the `]`) are an
//! error. Expanded values can differ from Prometheus' in span structure only: saltdb's
//! `Histogram::add` writes one span per run of consecutive buckets, where Prometheus' `addBuckets`
//! may leave two adjacent spans; Prometheus' runner compares histograms after `Compact(0)`, which
//! makes both the same.

use std::fmt;

use crate::histogram::{CounterResetHint, Histogram, Span};

/// Repetitions of one item beyond which it is refused instead of filling memory.
pub const MAX_REPEAT: u64 = 1_000_000;

/// One histogram value of a series line.
#[derive(Clone, Debug)]
pub struct HistogramValue {
    /// The histogram, in float form (`integer` is false), not validated.
    pub histogram: Histogram,
    /// The notation wrote `counter_reset_hint:`; Prometheus' runner compares the hint of an
    /// expected histogram only then.
    pub hint_given: bool,
}

impl HistogramValue {
    /// Whether `got` matches this expected histogram, as Prometheus' runner decides: both
    /// compacted (no empty buckets), the same schema, zero threshold, custom bounds (custom schema)
    /// and buckets, counts and sums almost equal, and the hint only when the script gave one.
    pub fn matches(&self, got: &Histogram, almost_equal: impl Fn(f64, f64) -> bool) -> bool {
        let (mut w, mut g) = (self.histogram.clone(), got.clone());
        w.compact(0);
        g.compact(0);
        let buckets = |spans: &[Span], counts: &[f64]| -> Vec<(i64, f64)> {
            let mut out = Vec::new();
            let mut index = 0i64;
            let mut counts = counts.iter();
            for (k, s) in spans.iter().enumerate() {
                index = if k == 0 { i64::from(s.offset) } else { index + i64::from(s.offset) };
                for _ in 0..s.length {
                    out.push((index, counts.next().copied().unwrap_or(f64::NAN)));
                    index += 1;
                }
            }
            out
        };
        let same_buckets = |a: Vec<(i64, f64)>, b: Vec<(i64, f64)>| {
            a.len() == b.len() && a.iter().zip(&b).all(|(x, y)| x.0 == y.0 && almost_equal(x.1, y.1))
        };
        w.schema == g.schema
            && almost_equal(w.count, g.count)
            && almost_equal(w.sum, g.sum)
            && (!w.uses_custom_buckets() || w.custom_values == g.custom_values)
            && w.zero_threshold == g.zero_threshold
            && almost_equal(w.zero_count, g.zero_count)
            && same_buckets(
                buckets(&w.negative_spans, &w.negative_buckets),
                buckets(&g.negative_spans, &g.negative_buckets),
            )
            && same_buckets(
                buckets(&w.positive_spans, &w.positive_buckets),
                buckets(&g.positive_spans, &g.positive_buckets),
            )
            && (!self.hint_given || w.counter_reset_hint == g.counter_reset_hint)
    }
}

/// Why a histogram item does not parse; `offset` is the byte offset in the item.
#[derive(Clone, Debug, PartialEq)]
pub struct NotationError {
    /// Byte offset in the item where the problem was seen.
    pub offset: usize,
    /// The problem.
    pub problem: Problem,
}

/// What is wrong with a histogram item.
#[derive(Clone, Debug, PartialEq)]
pub enum Problem {
    /// Something else stood where `expected` must.
    Expected {
        /// What the grammar wants here.
        expected: &'static str,
        /// The text found (its start), or `end of item`.
        found: String,
    },
    /// A word that is no key.
    UnknownKey(String),
    /// A key written twice.
    DuplicateKey(&'static str),
    /// A number that Prometheus' lexer or `strconv` refuses.
    BadNumber(String),
    /// An integer that does not fit (schema, offsets: `i32`; repeat counts: `u64`).
    OutOfRange(String),
    /// A `counter_reset_hint` word that is none of the four.
    BadHint(String),
    /// `xN` asks for more values than [`MAX_REPEAT`].
    TooManyRepeats(u64),
    /// `+`/`-` expansion failed (as in Prometheus' `histogramsSeries`).
    Combine(String),
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Expected { expected, found } => write!(f, "expected {expected}, found {found}"),
            Self::UnknownKey(k) => write!(f, "unknown histogram key {k:?}"),
            Self::DuplicateKey(k) => write!(f, "duplicate key {k:?} in histogram"),
            Self::BadNumber(n) => write!(f, "bad number {n:?}"),
            Self::OutOfRange(n) => write!(f, "number {n} out of range"),
            Self::BadHint(h) => write!(f, "bad counter_reset_hint {h:?} (unknown, reset, not_reset or gauge)"),
            Self::TooManyRepeats(n) => write!(f, "repeat count {n} above the limit {MAX_REPEAT}"),
            Self::Combine(why) => write!(f, "error combining histograms: {why}"),
        }
    }
}

impl fmt::Display for NotationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (byte {} of the histogram item)", self.problem, self.offset)
    }
}

/// Splits the value part of a series line at whitespace outside `{{ }}`, returning each item
/// with its byte offset. An unclosed `{{` runs to the end.
pub fn split_items(values: &str) -> Vec<(usize, &str)> {
    let bytes = values.as_bytes();
    let (mut items, mut start, mut inside) = (Vec::new(), None::<usize>, false);
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        let pair = bytes.get(i..i + 2);
        if pair == Some(b"{{") || (inside && pair == Some(b"}}")) {
            inside = pair == Some(b"{{");
            start.get_or_insert(i);
            i += 2;
            continue;
        }
        if is_space(b) && !inside {
            if let Some(s) = start.take() {
                items.extend(values.get(s..i).map(|t| (s, t)));
            }
        } else {
            start.get_or_insert(i);
        }
        i += 1;
    }
    if let Some(s) = start {
        items.extend(values.get(s..).map(|t| (s, t)));
    }
    items
}

/// Expands one item that starts with `{{`: `H`, `HxN`, `H+IxN` or `H-IxN`.
///
/// # Errors
/// The first problem, with its offset in `item`.
pub fn expand_item(item: &str) -> Result<Vec<HistogramValue>, NotationError> {
    let mut cur = Cursor { text: item, pos: 0 };
    let base = cur.histogram()?;
    let out = match cur.peek() {
        None => vec![base],
        Some(b'x') => {
            cur.pos += 1;
            let times = cur.repeat()?;
            vec![base; (times + 1) as usize]
        }
        Some(op @ (b'+' | b'-')) => {
            cur.pos += 1;
            let inc = cur.histogram()?;
            cur.expect("x", "`x` and a repeat count after the increment")?;
            let at = cur.pos;
            let times = cur.repeat()?;
            step_series(base, &inc, times, op == b'-').map_err(|problem| NotationError { offset: at, problem })?
        }
        Some(_) => return Err(cur.unexpected("`x`, `+`, `-` or a space after `}}`")),
    };
    match cur.peek() {
        None => Ok(out),
        Some(_) => Err(cur.unexpected("a space after the repeat count")),
    }
}

/// `H+IxN` / `H-IxN`: the base, then `times` steps each adding (subtracting) `inc` to the value
/// before; every value takes `inc`'s `hint_given`.
fn step_series(
    base: HistogramValue,
    inc: &HistogramValue,
    times: u64,
    subtract: bool,
) -> Result<Vec<HistogramValue>, Problem> {
    let hint_given = inc.hint_given;
    let mut cur = base.histogram;
    let mut out = Vec::with_capacity((times + 1) as usize);
    out.push(HistogramValue { histogram: cur.clone(), hint_given });
    for _ in 0..times {
        if cur.schema > inc.histogram.schema {
            let (from, to) = (inc.histogram.schema, cur.schema);
            return Err(Problem::Combine(format!("cannot merge from schema {from} to {to}")));
        }
        let combined = if subtract { cur.sub(&inc.histogram) } else { cur.add(&inc.histogram) };
        combined.map_err(|e| Problem::Combine(e.to_string()))?;
        out.push(HistogramValue { histogram: cur.clone(), hint_given });
    }
    Ok(out)
}

/// The keys of a histogram description, each at most once.
#[derive(Default)]
struct Fields {
    schema: Option<i32>,
    sum: Option<f64>,
    count: Option<f64>,
    zero_count: Option<f64>,
    zero_threshold: Option<f64>,
    custom_values: Option<Vec<f64>>,
    buckets: Option<Vec<f64>>,
    offset: Option<i32>,
    n_buckets: Option<Vec<f64>>,
    n_offset: Option<i32>,
    hint: Option<CounterResetHint>,
}

impl Fields {
    fn into_value(self) -> HistogramValue {
        let (positive_spans, positive_buckets) = side(self.buckets, self.offset);
        let (negative_spans, negative_buckets) = side(self.n_buckets, self.n_offset);
        let histogram = Histogram {
            counter_reset_hint: self.hint.unwrap_or_default(),
            schema: self.schema.unwrap_or(0),
            zero_threshold: self.zero_threshold.unwrap_or(0.0),
            zero_count: self.zero_count.unwrap_or(0.0),
            count: self.count.unwrap_or(0.0),
            sum: self.sum.unwrap_or(0.0),
            positive_spans,
            negative_spans,
            positive_buckets,
            negative_buckets,
            custom_values: self.custom_values.unwrap_or_default(),
            integer: false,
        };
        HistogramValue { histogram, hint_given: self.hint.is_some() }
    }
}

/// One span `{offset, len}` over all the buckets; none (offset ignored) without buckets.
fn side(buckets: Option<Vec<f64>>, offset: Option<i32>) -> (Vec<Span>, Vec<f64>) {
    let buckets = buckets.unwrap_or_default();
    if buckets.is_empty() {
        return (Vec::new(), buckets);
    }
    let span = Span { offset: offset.unwrap_or(0), length: buckets.len() as u32 };
    (vec![span], buckets)
}

/// Stores `value` in `slot` unless the key was given before.
fn set<T>(slot: &mut Option<T>, value: T, key: &'static str) -> Result<(), Problem> {
    if slot.is_some() {
        return Err(Problem::DuplicateKey(key));
    }
    *slot = Some(value);
    Ok(())
}

fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

/// Letters and `_`: the characters of a key, hint word, `Inf` or `NaN`.
fn is_word(b: u8) -> bool {
    b == b'_' || b.is_ascii_alphabetic()
}

/// A reading position in one item.
struct Cursor<'a> {
    text: &'a str,
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.pos).copied()
    }

    fn rest(&self) -> &'a str {
        self.text.get(self.pos..).unwrap_or("")
    }

    fn eat(&mut self, s: &str) -> bool {
        let found = self.rest().starts_with(s);
        if found {
            self.pos += s.len();
        }
        found
    }

    fn expect(&mut self, s: &str, expected: &'static str) -> Result<(), NotationError> {
        if self.eat(s) {
            Ok(())
        } else {
            Err(self.unexpected(expected))
        }
    }

    /// The longest run from here of ASCII bytes for which `f` holds.
    fn take_while(&mut self, f: impl Fn(u8) -> bool) -> &'a str {
        let start = self.pos;
        while self.peek().is_some_and(&f) {
            self.pos += 1;
        }
        self.text.get(start..self.pos).unwrap_or("")
    }

    fn error_at(&self, offset: usize, problem: Problem) -> NotationError {
        NotationError { offset, problem }
    }

    fn unexpected(&self, expected: &'static str) -> NotationError {
        let rest = self.rest();
        let found = match rest.chars().count() {
            0 => "end of item".to_string(),
            n if n > 24 => format!("{:?}…", rest.chars().take(24).collect::<String>()),
            _ => format!("{rest:?}"),
        };
        self.error_at(self.pos, Problem::Expected { expected, found })
    }

    /// `{{ ... }}`.
    fn histogram(&mut self) -> Result<HistogramValue, NotationError> {
        self.expect("{{", "`{{`")?;
        let mut fields = Fields::default();
        if self.take_while(is_space).is_empty() && !self.rest().starts_with("}}") {
            loop {
                self.field(&mut fields)?;
                let spaced = !self.take_while(is_space).is_empty();
                if self.rest().starts_with("}}") {
                    break;
                }
                if !spaced {
                    return Err(self.unexpected("a space or `}}` after a histogram field"));
                }
            }
        }
        self.expect("}}", "`}}` (no space may follow `{{` unless the histogram is empty)")?;
        Ok(fields.into_value())
    }

    /// `key:value`.
    fn field(&mut self, f: &mut Fields) -> Result<(), NotationError> {
        let at = self.pos;
        let key = self.take_while(is_word).to_ascii_lowercase();
        if key.is_empty() {
            return Err(self.unexpected("a histogram key such as `buckets:`"));
        }
        let Some(&known) = KEYS.iter().find(|k| **k == key) else {
            return Err(self.error_at(at, Problem::UnknownKey(key)));
        };
        self.expect(":", "`:` right after the histogram key")?;
        let stored = match known {
            "schema" => set(&mut f.schema, self.int()?, known),
            "offset" => set(&mut f.offset, self.int()?, known),
            "n_offset" => set(&mut f.n_offset, self.int()?, known),
            "sum" => set(&mut f.sum, self.signed_number()?, known),
            "count" => set(&mut f.count, self.signed_number()?, known),
            "z_bucket" => set(&mut f.zero_count, self.signed_number()?, known),
            "z_bucket_w" => set(&mut f.zero_threshold, self.number()?, known),
            "buckets" => set(&mut f.buckets, self.list()?, known),
            "n_buckets" => set(&mut f.n_buckets, self.list()?, known),
            "custom_values" => set(&mut f.custom_values, self.list()?, known),
            "counter_reset_hint" => set(&mut f.hint, self.hint()?, known),
            _ => Err(Problem::UnknownKey(key)),
        };
        stored.map_err(|p| self.error_at(at, p))
    }

    /// `-`? decimal digits, as an `i32` (schema and offsets).
    fn int(&mut self) -> Result<i32, NotationError> {
        let at = self.pos;
        let negative = self.eat("-");
        let digits = self.number_text()?;
        if !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(self.error_at(at, Problem::BadNumber(digits.to_string())));
        }
        let text = format!("{}{digits}", if negative { "-" } else { "" });
        text.parse::<i32>().map_err(|_| self.error_at(at, Problem::OutOfRange(text)))
    }

    /// `-`? number.
    fn signed_number(&mut self) -> Result<f64, NotationError> {
        let negative = self.eat("-");
        let v = self.number()?;
        Ok(if negative { -v } else { v })
    }

    /// A number without sign: digits (Prometheus' `scanNumber`, then Go's `strconv`), `Inf` or
    /// `NaN`.
    fn number(&mut self) -> Result<f64, NotationError> {
        let at = self.pos;
        if self.peek().is_some_and(is_word) {
            let word = self.take_while(is_word);
            return match word.to_ascii_lowercase().as_str() {
                "inf" => Ok(f64::INFINITY),
                "nan" => Ok(f64::NAN),
                _ => Err(self.error_at(at, Problem::BadNumber(word.to_string()))),
            };
        }
        let text = self.number_text()?;
        go_number(text).ok_or_else(|| self.error_at(at, Problem::BadNumber(text.to_string())))
    }

    /// The text of a number starting with a digit: digits, `.`, `_`, `e`/`E` with an optional
    /// sign; no letter, digit or `_` may follow.
    fn number_text(&mut self) -> Result<&'a str, NotationError> {
        if !self.peek().is_some_and(|b| b.is_ascii_digit()) {
            return Err(self.unexpected("a number"));
        }
        let start = self.pos;
        let mut prev = 0u8;
        while let Some(b) = self.peek() {
            let sign_of_exponent = matches!(b, b'+' | b'-') && matches!(prev, b'e' | b'E');
            if !(b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'e' | b'E') || sign_of_exponent) {
                break;
            }
            prev = b;
            self.pos += 1;
        }
        let text = self.text.get(start..self.pos).unwrap_or("");
        if self.peek().is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_') {
            let bad = format!("{text}{}", self.take_while(|b| b.is_ascii_alphanumeric() || b == b'_'));
            return Err(self.error_at(start, Problem::BadNumber(bad)));
        }
        Ok(text)
    }

    /// `[n n ...]`: numbers separated by spaces, optional trailing space, at least one; a
    /// number is `-`digits or unsigned (`Inf`, `NaN`; not `-Inf`, as Prometheus' lexer).
    fn list(&mut self) -> Result<Vec<f64>, NotationError> {
        self.expect("[", "`[`")?;
        let mut out = Vec::new();
        loop {
            let at = self.pos;
            let v = if self.eat("-") {
                let text = self.number_text()?;
                -go_number(text).ok_or_else(|| self.error_at(at, Problem::BadNumber(text.to_string())))?
            } else {
                self.number()?
            };
            out.push(v);
            let spaced = !self.take_while(is_space).is_empty();
            if self.eat("]") {
                return Ok(out);
            }
            if !spaced {
                return Err(self.unexpected("a space or `]` after a bucket value"));
            }
        }
    }

    fn hint(&mut self) -> Result<CounterResetHint, NotationError> {
        let at = self.pos;
        let word = self.take_while(is_word);
        match word.to_ascii_lowercase().as_str() {
            "unknown" => Ok(CounterResetHint::Unknown),
            "reset" => Ok(CounterResetHint::CounterReset),
            "not_reset" => Ok(CounterResetHint::NotCounterReset),
            "gauge" => Ok(CounterResetHint::Gauge),
            _ if word.is_empty() => Err(self.unexpected("unknown, reset, not_reset or gauge")),
            _ => Err(self.error_at(at, Problem::BadHint(word.to_string()))),
        }
    }

    /// The `N` of `xN`: decimal digits (Go's `ParseUint(s, 10, 64)`), at most [`MAX_REPEAT`].
    fn repeat(&mut self) -> Result<u64, NotationError> {
        let at = self.pos;
        let digits = self.take_while(|b| b.is_ascii_digit());
        if digits.is_empty() {
            return Err(self.unexpected("a repeat count after `x`"));
        }
        let n = digits.parse::<u64>().map_err(|_| self.error_at(at, Problem::OutOfRange(digits.to_string())))?;
        if n >= MAX_REPEAT {
            return Err(self.error_at(at, Problem::TooManyRepeats(n)));
        }
        Ok(n)
    }
}

/// The histogram keys, lower case.
const KEYS: [&str; 11] = [
    "schema",
    "sum",
    "count",
    "z_bucket",
    "z_bucket_w",
    "custom_values",
    "buckets",
    "offset",
    "n_buckets",
    "n_offset",
    "counter_reset_hint",
];

/// Prometheus' `parser.number` on a scanned number: Go's `ParseInt(s, 0, 64)` (so `010` is
/// octal 8, `1_000` is 1000), else `ParseFloat(s, 64)`. `None` when both refuse it.
pub(crate) fn go_number(text: &str) -> Option<f64> {
    let b = text.as_bytes();
    let underscores_between_digits = b.iter().enumerate().all(|(i, &c)| {
        c != b'_'
            || (i > 0 && b.get(i - 1).is_some_and(u8::is_ascii_digit) && b.get(i + 1).is_some_and(u8::is_ascii_digit))
    });
    if !underscores_between_digits {
        return None;
    }
    let plain: String = text.chars().filter(|&c| c != '_').collect();
    if plain.bytes().all(|c| c.is_ascii_digit()) {
        let as_int = match plain.strip_prefix('0').filter(|o| !o.is_empty()) {
            Some(octal) => i64::from_str_radix(octal, 8).ok(),
            None => plain.parse::<i64>().ok(),
        };
        if let Some(v) = as_int {
            return Some(v as f64);
        }
    }
    plain.parse::<f64>().ok()
}

#[cfg(test)]
#[path = "histogram_tests.rs"]
mod tests;
