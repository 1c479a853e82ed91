//! The state of every ClickHouse server of a database, for `/api/v1/status/storage` and the
//! storage page: whether it answers, whether requests go to it, and on replicated shards how
//! its replication stands (from its `system.replicas`: read-only for want of ZooKeeper, parts
//! still to fetch or merge, delay behind the other replicas, replicas alive).

use super::rowbinary::Reader;
use super::ClickHouse;

/// One server's state.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplicaState {
    /// Its shard's number.
    pub shard: usize,
    /// Its place in the shard's replicas, from 0.
    pub replica: usize,
    /// Its URL.
    pub url: String,
    /// Whether its shard's requests go to it now.
    pub current: bool,
    /// Why it did not answer; `None` when it did.
    pub error: Option<String>,
    /// Its replication, on replicated shards that answered.
    pub replication: Option<Replication>,
}

/// How a replica's tables replicate (the worst of its tables).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Replication {
    /// Some table is read-only: the server has lost ZooKeeper (or never had it).
    pub readonly: bool,
    /// Entries in its replication queues: parts to fetch, merges to do.
    pub queue: u64,
    /// How far behind the other replicas it is, in seconds.
    pub delay_seconds: u64,
    /// Replicas of the shard with a live ZooKeeper session (the fewest over its tables).
    pub active_replicas: u64,
    /// Replicas of the shard registered in ZooKeeper.
    pub total_replicas: u64,
}

impl ClickHouse {
    /// Every server's state, by shard then replica; the servers are asked in parallel.
    pub fn replica_states(&self) -> Vec<ReplicaState> {
        let db = super::client::quote(&self.inner.config.database);
        let replicated = self.inner.config.replicated;
        let sql = format!(
            "SELECT toUInt8(max(is_readonly)), toUInt64(sum(queue_size)), toUInt64(max(absolute_delay)), \
             toUInt64(min(active_replicas)), toUInt64(max(total_replicas)) FROM system.replicas \
             WHERE database = {db} FORMAT RowBinary"
        );
        std::thread::scope(|scope| {
            let asked: Vec<_> = self
                .inner
                .shards
                .iter()
                .enumerate()
                .flat_map(|(shard, s)| {
                    let current = s.current();
                    s.replicas().iter().enumerate().map(move |(replica, r)| (shard, replica, r, replica == current))
                })
                .map(|(shard, replica, r, current)| {
                    let sql = &sql;
                    let answer = scope.spawn(move || {
                        if replicated {
                            let body = r.query(sql).map_err(|e| e.to_string())?;
                            replication(&body, r.url()).map(Some)
                        } else {
                            r.query("SELECT 1").map(|_| None).map_err(|e| e.to_string())
                        }
                    });
                    (shard, replica, r.url().to_owned(), current, answer)
                })
                .collect();
            asked
                .into_iter()
                .map(|(shard, replica, url, current, answer)| {
                    let answer = answer.join().unwrap_or_else(|_| Err("the status request failed".to_owned()));
                    let (error, replication) = match answer {
                        Ok(r) => (None, r),
                        Err(e) => (Some(e), None),
                    };
                    ReplicaState { shard, replica, url, current, error, replication }
                })
                .collect()
        })
    }
}

fn replication(body: &[u8], url: &str) -> Result<Replication, String> {
    let mut r = Reader::new(body);
    let mut read = || -> Result<Replication, String> {
        Ok(Replication {
            readonly: r.u8().map_err(|e| e.to_string())? != 0,
            queue: r.u64().map_err(|e| e.to_string())?,
            delay_seconds: r.u64().map_err(|e| e.to_string())?,
            active_replicas: r.u64().map_err(|e| e.to_string())?,
            total_replicas: r.u64().map_err(|e| e.to_string())?,
        })
    };
    read().map_err(|e| format!("{url}: malformed system.replicas answer: {e}"))
}
