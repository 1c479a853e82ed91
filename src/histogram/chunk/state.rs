//! The state encoder and decoder keep in step: previous values of every field, per bucket
//! remembered across layout changes, so that a bucket keeps its history when the layout around it
//! changes (a new bucket appearing, a stale marker in between).

use std::collections::BTreeMap;

use super::varbit::{Counter, Predict, Xor};
use crate::histogram::types::{CounterResetHint, Histogram, Span};

/// How counts are written, for the whole chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Mode {
    /// Counts XORed with their previous value.
    Float = 0,
    /// Integer counts, each delta predicted by the previous delta.
    IntPrevious = 1,
    /// Integer counts, each delta predicted by a running mean of deltas.
    IntMean = 2,
}

impl Mode {
    pub(super) fn from_byte(b: u8) -> Option<Self> {
        match b {
            0 => Some(Self::Float),
            1 => Some(Self::IntPrevious),
            2 => Some(Self::IntMean),
            _ => None,
        }
    }

    /// The prediction of the integer modes.
    pub(super) fn predict(self) -> Predict {
        if self == Self::IntMean {
            Predict::Mean
        } else {
            Predict::Previous
        }
    }
}

/// The state of one bucket.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Slot {
    pub(super) int: Counter,
    pub(super) xor: Xor,
}

/// A bucket's identity across layouts: side (false = positive) and index.
type Key = (bool, i64);

/// Everything but the timestamps.
#[derive(Debug)]
pub(super) struct State {
    pub(super) mode: Mode,
    pub(super) hint: CounterResetHint,
    pub(super) integer: bool,
    /// The current layout, kept in a histogram with no counts.
    pub(super) layout: Histogram,
    pub(super) sum: Xor,
    pub(super) count: Xor,
    pub(super) zero: Xor,
    pub(super) zero_int: Counter,
    /// Count minus zero count minus all bucket counts, integer modes (0 for client histograms).
    pub(super) residual: i64,
    /// One per bucket of the current layout, positive then negative.
    pub(super) slots: Vec<Slot>,
    keys: Vec<Key>,
    remembered: BTreeMap<Key, Slot>,
}

impl State {
    /// The state before the first sample: hint unknown, not integer, the empty layout of schema 0.
    pub(super) fn new(mode: Mode) -> Self {
        Self {
            mode,
            hint: CounterResetHint::Unknown,
            integer: false,
            layout: Histogram::default(),
            sum: Xor::default(),
            count: Xor::default(),
            zero: Xor::default(),
            zero_int: Counter::default(),
            residual: 0,
            slots: Vec::new(),
            keys: Vec::new(),
            remembered: BTreeMap::new(),
        }
    }

    /// Switches to the layout of `h` (its counts are ignored): the current slots are remembered,
    /// the new layout's taken from memory (fresh ones for buckets never seen).
    pub(super) fn set_layout(&mut self, h: &Histogram) {
        for (key, slot) in self.keys.drain(..).zip(self.slots.drain(..)) {
            self.remembered.insert(key, slot);
        }
        self.keys = keys(false, &h.positive_spans).chain(keys(true, &h.negative_spans)).collect();
        self.slots = self.keys.iter().map(|k| self.remembered.get(k).copied().unwrap_or_default()).collect();
        self.layout = Histogram {
            schema: h.schema,
            zero_threshold: h.zero_threshold,
            positive_spans: h.positive_spans.clone(),
            negative_spans: h.negative_spans.clone(),
            custom_values: h.custom_values.clone(),
            ..Histogram::default()
        };
    }

    /// Whether `h` has the current layout, bit for bit.
    pub(super) fn same_layout(&self, h: &Histogram) -> bool {
        let l = &self.layout;
        l.schema == h.schema
            && l.zero_threshold.to_bits() == h.zero_threshold.to_bits()
            && l.positive_spans == h.positive_spans
            && l.negative_spans == h.negative_spans
            && same_bits(&l.custom_values, &h.custom_values)
    }
}

/// Equal as bit patterns.
pub(super) fn same_bits(a: &[f64], b: &[f64]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

/// The keys of the buckets the spans cover, in order.
fn keys(negative: bool, spans: &[Span]) -> impl Iterator<Item = Key> + '_ {
    let mut start = 0i64;
    spans.iter().enumerate().flat_map(move |(n, s)| {
        start = if n == 0 { i64::from(s.offset) } else { start + i64::from(s.offset) };
        let first = start;
        start += i64::from(s.length);
        (first..start).map(move |i| (negative, i))
    })
}
