//! What an instant or range query evaluates ([`Kind`]), shared by the query handler, the
//! slow-query log and the small-query memory.

/// What to evaluate.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Kind {
    Instant { time_ms: i64 },
    Range { start_ms: i64, end_ms: i64, step_ms: i64 },
}
