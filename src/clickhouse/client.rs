//! One ClickHouse server (a shard) over its HTTP interface: statements in the request body,
//! inserts as `INSERT ... FORMAT RowBinary` with the rows as the body, results as `RowBinary`.
//! Blocking (called from the storage threads, never from the async executor).

use std::io::Read;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Most bytes of a response read (a larger one is an error, not an allocation).
const MAX_RESPONSE_BYTES: u64 = 1 << 30;

/// A failed request to a shard.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ShardError {
    /// The shard could not be reached or did not answer in time.
    #[error("ClickHouse shard {url} is unreachable: {detail}")]
    Unreachable {
        /// The shard.
        url: String,
        /// What failed.
        detail: String,
    },
    /// The shard answered with an error.
    #[error("ClickHouse shard {url} refused a statement ({status}): {detail}")]
    Refused {
        /// The shard.
        url: String,
        /// HTTP status.
        status: u16,
        /// ClickHouse's message.
        detail: String,
    },
}

/// What a shard was asked since the process started (read by `/metrics`).
#[derive(Debug, Default)]
pub struct ShardStats {
    /// Requests answered with 200.
    pub ok: AtomicU64,
    /// Requests that failed (unreachable, or refused).
    pub failed: AtomicU64,
    /// Time spent in requests, in microseconds.
    pub micros: AtomicU64,
    /// Rows inserted into `series`, `postings`, `samples` and `chunks`.
    pub rows: [AtomicU64; 4],
}

/// A shard's HTTP endpoint.
#[derive(Clone)]
pub struct Shard {
    url: String,
    agent: ureq::Agent,
    stats: Arc<ShardStats>,
}

impl std::fmt::Debug for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shard").field("url", &self.url).finish()
    }
}

impl Shard {
    /// The shard at `url` (`http://host:8123`); requests time out after `timeout`.
    pub fn new(url: &str, timeout: Duration) -> Self {
        let agent =
            ureq::Agent::config_builder().http_status_as_error(false).timeout_global(Some(timeout)).build().new_agent();
        Self { url: url.trim_end_matches('/').to_owned(), agent, stats: Arc::default() }
    }

    /// The shard's request counters.
    pub fn stats(&self) -> &ShardStats {
        &self.stats
    }

    /// The shard's URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Runs `sql` and returns the response body (`FORMAT RowBinary` answers are bytes).
    ///
    /// # Errors
    /// [`ShardError`].
    pub fn query(&self, sql: &str) -> Result<Vec<u8>, ShardError> {
        self.post(&format!("{}/", self.url), sql.as_bytes())
    }

    /// Inserts `count` rows (`rows`, `RowBinary`) with `insert` (`INSERT INTO t (cols)`),
    /// counted under `table` (0 `series`, 1 `postings`, 2 `samples`, 3 `chunks`).
    ///
    /// # Errors
    /// [`ShardError`].
    pub fn insert(&self, insert: &str, rows: &[u8], table: usize, count: u64) -> Result<(), ShardError> {
        let statement = format!("{insert} FORMAT RowBinary");
        let url = format!(
            "{}/?query={}",
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
