//! The slow-query log (`--query-log-slow`, default 5s like VictoriaMetrics'
//! `-search.logSlowQueryDuration`; `0` turns it off): one `warn` line per instant or range
//! query that ran at least that long, answered or not, with the query text (quoted, at most 1
//! KiB), its time range, the duration from receipt to answer, the samples it loaded from
//! storage, and the client's address.

use std::time::Duration;

use super::query_kind::Kind;
use crate::http::client_addr::ClientAddr;
use crate::promql::QueryResult;

/// Longest query text quoted in the log.
const MAX_QUERY_BYTES: usize = 1024;

/// Logs the query when it took at least `threshold`. `result` is `None` for a query that failed
/// (its sample count is then unknown).
pub(crate) fn record(
    threshold: Duration,
    query: &str,
    kind: Kind,
    took: Duration,
    result: Option<&QueryResult>,
    client: Option<ClientAddr>,
) {
    if took < threshold {
        return;
    }
    let shown = crate::excerpt::excerpt(query, MAX_QUERY_BYTES);
    let client = client.map_or_else(|| "unknown".to_owned(), |c| c.to_string());
    let (start_ms, end_ms, step_ms) = match kind {
        Kind::Instant { time_ms } => (time_ms, time_ms, 0),
        Kind::Range { start_ms, end_ms, step_ms } => (start_ms, end_ms, step_ms),
    };
    match result {
        Some(r) => tracing::warn!(
            query = ?shown,
            start_ms,
            end_ms,
            step_ms,
            duration_seconds = took.as_secs_f64(),
            samples = r.loaded_samples,
            client = %client,
            "slow query"
        ),
        None => tracing::warn!(
            query = ?shown,
            start_ms,
            end_ms,
            step_ms,
            duration_seconds = took.as_secs_f64(),
            client = %client,
            "slow query failed"
        ),
    }
}
