//! The counter reset hint a query sees: Prometheus' chunks re-derive it on read, and saltdb
//! re-derives it the same way from the histogram before.
//!
//! Prometheus keeps a histogram in the chunk of the one before it while its appender finds no
//! reason to cut (`HistogramAppender.appendable`, `FloatHistogramAppender.appendable`), and
//! reads a hint back from the position in the chunk alone (`counterResetHint` in
//! `tsdb/chunkenc/histogram_meta.go`): every histogram of a gauge chunk is `Gauge`, the first
//! histogram of a counter chunk `Unknown` (the chunk before may be gone, or have been added
//! later, prometheus#15346), every later one `NotCounterReset`. A hint a sender wrote is thus
//! kept only as `Gauge` (and, through the cut it forces, as the reset the engine then detects).
//!
//! [`read_hint`] gives a histogram the hint it would read back with if it followed `prev` in
//! one chunk-building pass:
//!
//! | written hint of `cur` | `prev`, the point right before `cur` | read hint |
//! |---|---|---|
//! | `Gauge` | any | `Gauge` |
//! | `CounterReset` | any | `CounterReset` (see below) |
//! | `Unknown`, `NotCounterReset` | a histogram [`continues`] accepts | `NotCounterReset` |
//! | `Unknown`, `NotCounterReset` | none, a float, or a histogram it refuses | `Unknown` |
//!
//! Differences from Prometheus, all towards saying what is true: a sender's `CounterReset` is
//! kept (Prometheus reads it back as `Unknown`, and loses a reset its counts do not show), and
//! the cuts Prometheus makes for size and time (about 1 KiB of chunk, the block range) are not
//! made, so a histogram after such a cut reads `NotCounterReset` here and `Unknown` there. A
//! derived `NotCounterReset` is never wrong: it is given only where every count of `cur` is at
//! least the one in `prev` with the same layout, which is where [`detect_reset`] finds no
//! reset either. `Unknown` is always safe: the engine then compares the counts itself.
//!
//! [`detect_reset`]: super::detect_reset

use super::buckets::Entries;
use super::types::{CounterResetHint, Histogram, Span};

/// The hint `cur` reads back with when `prev` (`None`: no point, or a float) is the point of its
/// series right before it (see the module's table).
pub fn read_hint(prev: Option<&Histogram>, cur: &Histogram) -> CounterResetHint {
    match cur.counter_reset_hint {
        CounterResetHint::Gauge => CounterResetHint::Gauge,
        CounterResetHint::CounterReset => CounterResetHint::CounterReset,
        CounterResetHint::Unknown | CounterResetHint::NotCounterReset => {
            if prev.is_some_and(|p| continues(p, cur)) {
                CounterResetHint::NotCounterReset
            } else {
                CounterResetHint::Unknown
            }
        }
    }
}

/// Whether Prometheus' appender keeps the counter histogram `cur` in the chunk whose last
/// histogram is `prev`: both counters (no `Gauge` hint) of the same form (integer or float), no
/// `CounterReset` hint on `cur`; then a stale `cur` always continues, and otherwise `prev` must
/// not be stale, the schema, zero threshold and custom bounds must not change, and neither the
/// count, the zero count nor any bucket may shrink (a bucket of `prev` missing in `cur` counts
/// as shrinking unless it is 0).
pub fn continues(prev: &Histogram, cur: &Histogram) -> bool {
    if prev.counter_reset_hint == CounterResetHint::Gauge
        || cur.counter_reset_hint == CounterResetHint::Gauge
        || cur.counter_reset_hint == CounterResetHint::CounterReset
        || prev.integer != cur.integer
    {
        return false;
    }
    if cur.is_stale() {
        return true;
    }
    !prev.is_stale()
        && !shrinks(prev.count, cur.count)
        && cur.schema == prev.schema
        && cur.zero_threshold == prev.zero_threshold
        && (!cur.uses_custom_buckets() || same_bounds(&cur.custom_values, &prev.custom_values))
        && !shrinks(prev.zero_count, cur.zero_count)
        && side_grows(&prev.positive_spans, &prev.positive_buckets, &cur.positive_spans, &cur.positive_buckets)
        && side_grows(&prev.negative_spans, &prev.negative_buckets, &cur.negative_spans, &cur.negative_buckets)
}

/// `cur < prev`, false when either is NaN (as Prometheus compares: a NaN count never shrinks).
fn shrinks(prev: f64, cur: f64) -> bool {
    cur < prev
}

/// Prometheus' `CustomBucketBoundsMatch`.
fn same_bounds(a: &[f64], b: &[f64]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y)
}

/// Prometheus' `expandFloatSpansAndBuckets` as a yes/no: no bucket of `prev` larger than the same
/// bucket of `cur`, none missing in `cur` unless it is 0 (buckets only in `cur` are fine).
fn side_grows(prev_spans: &[Span], prev_counts: &[f64], cur_spans: &[Span], cur_counts: &[f64]) -> bool {
    let mut cur = Entries::new(cur_spans, cur_counts).peekable();
    for (index, count) in Entries::new(prev_spans, prev_counts) {
        while cur.next_if(|&(i, _)| i < index).is_some() {}
        match cur.peek() {
            Some(&(i, c)) if i == index => {
                if count > c {
                    return false;
                }
            }
            _ => {
                if count != 0.0 {
                    return false;
                }
            }
        }
    }
    true
}

#[cfg(test)]
#[path = "hint_tests.rs"]
mod tests;
