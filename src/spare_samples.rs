//! Spare sample vectors, kept per thread for the next read to fill.
//!
//! A long-range read decodes each series into a vector of up to hundreds of thousands of
//! samples, and a reduction where the samples are read (a rollup at each step of a range
//! query, see `promql/eval/grid.rs`) replaces it with a few hundred values at once. Freed,
//! those large vectors go back to the operating system (the server's allocator purges freed
//! memory at once), and the next series faults and zeroes the same pages again: measured at 40%
//! of a 30-day query's CPU (`perf`: `clear_page_erms`), with another 20% in copies as vectors
//! grew. Given back here instead, they are filled again by the next series read on the thread.
//!
//! Invariants: [`take`] returns an empty vector; a thread keeps at most [`MAX_KEPT`] vectors
//! and [`MAX_KEPT_BYTES`] of capacity, so what the pool holds is bounded per thread.

use std::cell::RefCell;

use crate::sample::Sample;

/// Most vectors one thread keeps.
pub const MAX_KEPT: usize = 128;
/// Most bytes of capacity one thread keeps.
pub const MAX_KEPT_BYTES: usize = 8 << 20;
/// Vectors smaller than this (in samples) are not worth keeping.
const MIN_KEPT_SAMPLES: usize = 1_024;

struct Spare {
    vectors: Vec<Vec<Sample>>,
    bytes: usize,
}

thread_local! {
    static SPARE: RefCell<Spare> = const { RefCell::new(Spare { vectors: Vec::new(), bytes: 0 }) };
}

fn bytes_of(v: &Vec<Sample>) -> usize {
    v.capacity() * std::mem::size_of::<Sample>()
}

/// An empty vector, with the capacity of one given back on this thread if there is one.
pub fn take() -> Vec<Sample> {
    SPARE
        .with(|s| {
            let mut s = s.borrow_mut();
            let v = s.vectors.pop()?;
            s.bytes = s.bytes.saturating_sub(bytes_of(&v));
            Some(v)
        })
        .unwrap_or_default()
}

/// Gives `v` back for a later [`take`] on this thread (emptied), or frees it when the thread
/// keeps enough.
pub fn give(mut v: Vec<Sample>) {
    if v.capacity() < MIN_KEPT_SAMPLES {
        return;
    }
    v.clear();
    SPARE.with(|s| {
        let mut s = s.borrow_mut();
        let bytes = bytes_of(&v);
        if s.vectors.len() < MAX_KEPT && s.bytes.saturating_add(bytes) <= MAX_KEPT_BYTES {
            s.bytes += bytes;
            s.vectors.push(v);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn given_vectors_come_back_empty_and_the_pool_is_bounded() {
        let mut v = Vec::with_capacity(4_096);
        v.push(Sample::new(1, 1.0));
        give(v);
        let back = take();
        assert!(back.is_empty());
        assert!(back.capacity() >= 4_096);
        assert_eq!(take().capacity(), 0, "only one was given");
        // Small vectors are not kept; the byte bound holds.
        give(Vec::with_capacity(10));
        assert_eq!(take().capacity(), 0);
        let big = MAX_KEPT_BYTES / std::mem::size_of::<Sample>();
        give(Vec::with_capacity(big));
        give(Vec::with_capacity(MIN_KEPT_SAMPLES));
        assert!(take().capacity() >= big);
        assert_eq!(take().capacity(), 0, "the second did not fit beside the first");
    }
}
