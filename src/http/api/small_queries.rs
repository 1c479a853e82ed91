//! Small queries evaluated on the async thread that took the request. Handing a query to the
//! blocking pool and back costs two thread wake-ups: 100-200 µs on the 2-core VMs the benches
//! run on, more than the whole evaluation of a query over a few series (measured on a 1 M-series
//! directory: a one-series range query took 260-330 µs inside the server through the pool and
//! 80-95 µs evaluated in place). Dashboards ask the same small queries at every refresh.
//!
//! A query (its text, its kind, the length of its range and its step; not its absolute time)
//! whose last evaluation loaded at most [`SMALL_SAMPLES`] samples in under [`SMALL_TIME`] is
//! evaluated in place the next time, within a budget of [`INLINE_SAMPLES`] samples and
//! [`INLINE_TIME`]. Past the budget the attempt is dropped and the query goes to the pool with
//! its full limits, as a first-time query does. So a worker thread is never held longer than
//! the budget by a query, whatever the data has become since; the reads of a query that small
//! are a few seeks into blocks the last evaluation left in the block cache. Only queries on the
//! embedded store are evaluated in place (a ClickHouse read waits on the network).

use std::time::Duration;

use super::query_kind::Kind;
use crate::promql::EvalError;
use crate::storage::StorageError;

/// Most samples a query may have loaded to count as small.
pub const SMALL_SAMPLES: usize = 2_000;
/// Longest a query's evaluation may have taken to count as small.
pub const SMALL_TIME: Duration = Duration::from_millis(1);
/// Most samples an evaluation in place may load or hold.
pub const INLINE_SAMPLES: usize = 20_000;
/// Longest an evaluation in place may run.
pub const INLINE_TIME: Duration = Duration::from_millis(5);
/// Queries remembered as small.
const REMEMBERED: usize = 4096;

fn remembered() -> &'static quick_cache::sync::Cache<u64, ()> {
    static CACHE: std::sync::OnceLock<quick_cache::sync::Cache<u64, ()>> = std::sync::OnceLock::new();
    CACHE.get_or_init(|| quick_cache::sync::Cache::new(REMEMBERED))
}

/// What identifies a query across refreshes: its text, its kind, and for a range query the
/// length of its range and its step.
pub fn key(query: &str, kind: Kind) -> u64 {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    h.update(query.as_bytes());
    match kind {
        Kind::Instant { .. } => h.update(&[0]),
        Kind::Range { start_ms, end_ms, step_ms } => {
            h.update(&[1]);
            h.update(&end_ms.wrapping_sub(start_ms).to_le_bytes());
            h.update(&step_ms.to_le_bytes());
        }
    }
    h.digest()
}

/// Whether the query's last evaluation was small.
pub fn was_small(key: u64) -> bool {
    remembered().get(&key).is_some()
}

/// Records how the query's evaluation went: remembered when it was small, forgotten otherwise.
pub fn record(key: u64, loaded_samples: usize, took: Duration) {
    if loaded_samples <= SMALL_SAMPLES && took < SMALL_TIME {
        remembered().insert(key, ());
    } else {
        forget(key);
    }
}

/// Forgets the query (an evaluation in place went over the budget).
pub fn forget(key: u64) {
    remembered().remove(&key);
}

/// Whether an evaluation in place failed on its budget (then the query goes to the pool with
/// its full limits) rather than on something the pool would fail on too.
pub fn over_budget(e: &EvalError) -> bool {
    matches!(
        e,
        EvalError::Timeout(_)
            | EvalError::TooManySamples(_)
            | EvalError::TooManyScanned { .. }
            | EvalError::TooMuchMemory { .. }
            | EvalError::Storage(StorageError::TooManySamples { .. } | StorageError::Timeout)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_query_is_small_until_an_evaluation_is_not() {
        let range = |start_ms, end_ms| Kind::Range { start_ms, end_ms, step_ms: 60_000 };
        let k = key("rate(small_queries_test[5m])", range(0, 3_600_000));
        // The same range length later is the same query (a dashboard's refresh); another length
        // or kind is not.
        assert_eq!(k, key("rate(small_queries_test[5m])", range(60_000, 3_660_000)));
        assert_ne!(k, key("rate(small_queries_test[5m])", range(0, 7_200_000)));
        assert_ne!(k, key("rate(small_queries_test[5m])", Kind::Instant { time_ms: 0 }));
        assert!(!was_small(k));
        record(k, 10, Duration::from_micros(50));
        assert!(was_small(k));
        record(k, SMALL_SAMPLES + 1, Duration::from_micros(50));
        assert!(!was_small(k));
        record(k, 10, Duration::from_micros(50));
        record(k, 10, SMALL_TIME);
        assert!(!was_small(k));
    }

    #[test]
    fn only_the_budget_sends_a_query_to_the_pool() {
        assert!(over_budget(&EvalError::Timeout("x")));
        assert!(over_budget(&EvalError::Storage(StorageError::Timeout)));
        assert!(!over_budget(&EvalError::BadData("x".into())));
        assert!(!over_budget(&EvalError::Storage(StorageError::Cancelled)));
    }
}
