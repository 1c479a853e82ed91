//! A shard: one ClickHouse server, or several replicas of it, over their HTTP interface:
//! statements in the request body, inserts as `INSERT ... FORMAT RowBinary` with the rows as
//! the body, results as `RowBinary`. Blocking (called from the storage threads, never from the
//! async executor).
//!
//! **Replicas.** A shard of several servers holds `Replicated*MergeTree` tables (see
//! `schema.rs`): ClickHouse copies every insert and every `ALTER` to the other replicas through
//! ZooKeeper, so each request goes to one replica. It goes to the shard's **current** replica;
//! when that one fails (unreachable, or it refused), the same request goes to the next replica,
//! and so on round the list once; the first that answers becomes the current one. Requests
//! stay on a replica while it answers rather than going back to the first one listed, so a
//! replica that just came back and is still catching up does not serve reads before it must.
//!
//! Retrying an insert elsewhere is safe: a replicated table drops an inserted block identical to
//! one of its last 100 (ClickHouse's `replicated_deduplication_window`), so a block that reached
//! the first replica before it failed is not stored twice. Nor can that drop a different write:
//! rows carry their write's random write id (writes spanning shards, `commit.rs`) and the
//! millisecond their group was built (`inserted_at`), so blocks are identical only when they
//! hold the same samples stamped the same millisecond, and readers rank samples of one time by
//! that millisecond (`recency.rs`), leaving same-millisecond ones unordered anyway.
//! With `insert_quorum` above 1, an insert is acknowledged only once that many replicas hold it.

use std::io::Read;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Most bytes of a response read (a larger one is an error, not an allocation).
const MAX_RESPONSE_BYTES: u64 = 1 << 30;

/// A failed request to a shard (to its last replica tried).
#[derive(Debug, Clone, thiserror::Error)]
pub enum ShardError {
    /// The server could not be reached or did not answer in time.
    #[error("ClickHouse server {url} is unreachable: {detail}")]
    Unreachable {
        /// The server (the shard's last replica tried).
        url: String,
        /// What failed.
        detail: String,
    },
    /// The server answered with an error.
    #[error("ClickHouse server {url} refused a statement ({status}): {detail}")]
    Refused {
        /// The server (the shard's last replica tried).
        url: String,
        /// HTTP status.
        status: u16,
        /// ClickHouse's message.
        detail: String,
    },
}

/// What a replica was asked since the process started (read by `/metrics`).
#[derive(Debug, Default)]
pub struct ReplicaStats {
    /// Requests answered with 200.
    pub ok: AtomicU64,
    /// Requests that failed (unreachable, or refused).
    pub failed: AtomicU64,
    /// Time spent in requests, in microseconds.
    pub micros: AtomicU64,
    /// Rows inserted into `series`, `postings`, `samples` and `chunks`.
    pub rows: [AtomicU64; 4],
}

/// A shard: its replicas (one, when it is not replicated) and the one requests go to.
#[derive(Clone)]
pub struct Shard {
    replicas: Arc<[Replica]>,
    current: Arc<AtomicUsize>,
    /// `url` of every replica, joined by `|` (as `--clickhouse-url` writes a shard).
    name: String,
    /// `insert_quorum` of inserts (0 or 1: none).
    quorum: u32,
    /// The request timeout, in milliseconds.
    timeout_ms: u64,
}

impl std::fmt::Debug for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shard").field("replicas", &self.name).finish()
    }
}

impl Shard {
    /// The shard of the replicas at `urls` (`http://host:8123`, at least one); requests time
    /// out after `timeout`; inserts wait for `quorum` replicas when it is above 1.
    pub fn new(urls: &[String], timeout: Duration, quorum: u32) -> Self {
        let replicas: Arc<[Replica]> = urls.iter().map(|u| Replica::new(u, timeout)).collect();
        let name = replicas.iter().map(Replica::url).collect::<Vec<_>>().join("|");
        let timeout_ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
        Self { replicas, current: Arc::default(), name, quorum, timeout_ms }
    }

    /// Its replicas, in the order given.
    pub fn replicas(&self) -> &[Replica] {
        &self.replicas
    }

    /// The shard as `--clickhouse-url` writes it: its replicas' URLs joined by `|`.
    pub fn url(&self) -> &str {
        &self.name
    }

    /// The replica requests go to now.
    pub fn current(&self) -> usize {
        self.current.load(Ordering::Relaxed) % self.replicas.len().max(1)
    }

    /// Runs `sql` on the current replica, or the next that answers; returns the response body
    /// (`FORMAT RowBinary` answers are bytes).
    ///
    /// # Errors
    /// [`ShardError`] of the last replica tried, when none answered.
    pub fn query(&self, sql: &str) -> Result<Vec<u8>, ShardError> {
        self.on_replicas(|r| r.query(sql), |_| true)
    }

    /// Inserts `count` rows (`rows`, `RowBinary`) with `insert` (`INSERT INTO t (cols)`) into
    /// the current replica, or the next that takes them, counted under `table` (0 `series`,
    /// 1 `postings`, 2 `samples`, 3 `chunks`).
    ///
    /// # Errors
    /// [`ShardError`] of the last replica tried, when none took them.
    pub fn insert(&self, insert: &str, rows: &[u8], table: usize, count: u64) -> Result<(), ShardError> {
        // A quorum not reached in half the request's time fails the insert (the rows stay on
        // the replica that took them, and a retry is deduplicated) rather than the request.
        let settings = if self.quorum > 1 {
            format!("&insert_quorum={}&insert_quorum_timeout={}", self.quorum, (self.timeout_ms / 2).max(1))
        } else {
            String::new()
        };
        // With a quorum, an insert the first replica took but could not get to the quorum is
        // not retried elsewhere: the other replica would drop the block as a duplicate and
        // answer success without the quorum. Nor is one whose outcome ClickHouse does not know
        // (its session with ZooKeeper lost meanwhile).
        let quorum = self.quorum > 1;
        let retry = |e: &ShardError| match e {
            ShardError::Refused { detail, .. } => {
                !(quorum && (detail.to_lowercase().contains("quorum") || detail.contains("Code: 319")))
            }
            ShardError::Unreachable { .. } => true,
        };
        self.on_replicas(|r| r.insert(insert, &settings, rows, table, count), retry).map_err(|e| match e {
            ShardError::Refused { url, status, detail } if detail.contains("readonly mode") => ShardError::Refused {
                url,
                status,
                detail: format!(
                    "the shard's replicas lost ZooKeeper, so their tables are read-only until it is back: {detail}"
                ),
            },
            ShardError::Refused { url, status, detail } if detail.contains("Code: 286") => ShardError::Refused {
                url,
                status,
                detail: format!(
                    "an earlier write reached fewer replicas than --clickhouse-insert-quorum asks, and ClickHouse \
                     refuses quorum writes to the table until it does: bring back the replica that took it \
                     (see docs/clickhouse.md): {detail}"
                ),
            },
            ShardError::Refused { url, status, detail }
                if quorum && (detail.to_lowercase().contains("quorum") || detail.contains("Code: 319")) =>
            {
                ShardError::Refused {
                    url,
                    status,
                    detail: format!(
                        "the write did not reach the replicas --clickhouse-insert-quorum asks for in time (a \
                         replica down or slow), so it is not acknowledged; a retry is deduplicated: {detail}"
                    ),
                }
            }
            e => e,
        })
    }

    /// `request` on the current replica, then on each other in turn until one succeeds or fails
    /// with an error `retry` says not to take elsewhere.
    fn on_replicas<T>(
        &self,
        mut request: impl FnMut(&Replica) -> Result<T, ShardError>,
        retry: impl Fn(&ShardError) -> bool,
    ) -> Result<T, ShardError> {
        let n = self.replicas.len();
        let first = self.current();
        let mut last = None;
        for i in 0..n {
            let at = (first + i) % n;
            let Some(replica) = self.replicas.get(at) else { break };
            match request(replica) {
                Ok(v) => {
                    if i > 0 {
                        self.current.store(at, Ordering::Relaxed);
                        tracing::warn!(shard = %self.name, replica = replica.url(), "ClickHouse requests moved to another replica");
                    }
                    return Ok(v);
                }
                Err(e) if !retry(&e) => return Err(e),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| ShardError::Unreachable { url: self.name.clone(), detail: "no replica".into() }))
    }
}

/// One ClickHouse server's HTTP endpoint.
#[derive(Clone)]
pub struct Replica {
    url: String,
    agent: ureq::Agent,
    stats: Arc<ReplicaStats>,
}

impl std::fmt::Debug for Replica {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replica").field("url", &self.url).finish()
    }
}

impl Replica {
    /// The server at `url` (`http://host:8123`); requests time out after `timeout`.
    pub fn new(url: &str, timeout: Duration) -> Self {
        let agent =
            ureq::Agent::config_builder().http_status_as_error(false).timeout_global(Some(timeout)).build().new_agent();
        Self { url: url.trim_end_matches('/').to_owned(), agent, stats: Arc::default() }
    }

    /// The server's request counters.
    pub fn stats(&self) -> &ReplicaStats {
        &self.stats
    }

    /// The server's URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Runs `sql` and returns the response body.
    ///
    /// # Errors
    /// [`ShardError`].
    pub fn query(&self, sql: &str) -> Result<Vec<u8>, ShardError> {
        self.post(&format!("{}/", self.url), sql.as_bytes())
    }

    /// Inserts `count` rows with `insert` and the URL-encoded `settings` (`&name=value`...).
    fn insert(&self, insert: &str, settings: &str, rows: &[u8], table: usize, count: u64) -> Result<(), ShardError> {
        let statement = format!("{insert} FORMAT RowBinary");
        let url = format!(
            "{}/?query={}{settings}",
            self.url,
            form_urlencoded::byte_serialize(statement.as_bytes()).collect::<String>()
        );
        self.post(&url, rows)?;
        if let Some(c) = self.stats.rows.get(table) {
            c.fetch_add(count, Ordering::Relaxed);
        }
        Ok(())
    }

    fn post(&self, url: &str, body: &[u8]) -> Result<Vec<u8>, ShardError> {
        let started = Instant::now();
        let result = self.post_timed(url, body);
        let micros = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
        self.stats.micros.fetch_add(micros, Ordering::Relaxed);
        let outcome = if result.is_ok() { &self.stats.ok } else { &self.stats.failed };
        outcome.fetch_add(1, Ordering::Relaxed);
        result
    }

    fn post_timed(&self, url: &str, body: &[u8]) -> Result<Vec<u8>, ShardError> {
        let unreachable =
            |e: &dyn std::fmt::Display| ShardError::Unreachable { url: self.url.clone(), detail: e.to_string() };
        let mut resp = self.agent.post(url).send(body).map_err(|e| unreachable(&e))?;
        let status = resp.status().as_u16();
        let mut out = Vec::new();
        resp.body_mut().as_reader().take(MAX_RESPONSE_BYTES).read_to_end(&mut out).map_err(|e| unreachable(&e))?;
        if status != 200 {
            let detail = String::from_utf8_lossy(&out).chars().take(500).collect::<String>().trim().to_owned();
            return Err(ShardError::Refused { url: self.url.clone(), status, detail });
        }
        Ok(out)
    }
}

/// A ClickHouse string literal of `s`.
pub fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('\'');
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("\\'"),
            '\0' => out.push_str("\\0"),
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_escape_quotes_and_backslashes() {
        assert_eq!(quote(r"it's a \ path"), r"'it\'s a \\ path'");
        assert_eq!(quote(""), "''");
    }
}
