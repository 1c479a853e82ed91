//! `saltdb clickhouse replicate`: moves a database of unreplicated shards (one server each) onto
//! replicated shards, the old server of each shard becoming one of its replicas. ClickHouse
//! 18.16 cannot change a table's engine, so, on each shard's old server, every table is renamed
//! to `<table>_unreplicated`, the replicated tables are created on every replica of the shard
//! (`schema.rs`), the rows are copied over with `INSERT ... SELECT` on the old server (the other
//! replicas fetch them through ZooKeeper), the copy is counted against the original, and only
//! then is the original dropped. The saltdb nodes must be stopped meanwhile.
//!
//! Interrupted, it can be run again: a table already renamed is not renamed again, a copy
//! already complete (same row count) is not made again, and an empty copy is filled. A copy
//! interrupted halfway is reported, not guessed at.

use super::client::{quote, Replica, Shard};
use super::rowbinary::Reader;
use super::schema::{ensure, TABLES};
use super::ClickHouseConfig;
use crate::storage::StorageError;

/// What a migration did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Replicated {
    /// Tables copied into their replicated form, over all shards.
    pub tables: usize,
    /// Rows copied.
    pub rows: u64,
    /// Shards whose tables were replicated already.
    pub already: usize,
}

/// Moves `config`'s database onto replicated tables (see the module's documentation).
///
/// # Errors
/// [`StorageError::Unavailable`] when a server fails; [`StorageError::Manifest`] when a shard's
/// servers hold no unreplicated database, or a copy is incomplete.
pub fn replicate(config: &ClickHouseConfig) -> Result<Replicated, StorageError> {
    let db = &config.database;
    let mut done = Replicated::default();
    for (n, urls) in config.shards.iter().enumerate() {
        let shard = Shard::new(urls, config.timeout, 1);
        let Some(old) = old_server(&shard, db)? else {
            done.already += 1;
            continue;
        };
        // Bring the unreplicated tables to this build's version first.
        if engine(old, db, "samples")?.is_some_and(|e| !e.starts_with("Replicated")) {
            ensure(old, db, None)?;
        }
        for table in TABLES {
            if engine(old, db, table)?.is_some_and(|e| !e.starts_with("Replicated")) {
                old.query(&format!("RENAME TABLE {db}.{table} TO {db}.{table}_unreplicated"))?;
            }
        }
        for replica in shard.replicas() {
            ensure(replica, db, Some(n))?;
        }
        for table in TABLES {
            let source = format!("{table}_unreplicated");
            if engine(old, db, &source)?.is_none() {
                continue;
            }
            let want = count(old, db, &source)?;
            let have = count(old, db, table)?;
            if have == 0 && want > 0 {
                let columns = columns(old, db, table)?.join(", ");
                old.query(&format!(
                    "INSERT INTO {db}.{table} ({columns}) SELECT {columns} FROM {db}.{source} SETTINGS insert_deduplicate = 0"
                ))?;
                done.rows += want;
            }
            let copied = count(old, db, table)?;
            if copied != want {
                return Err(StorageError::Manifest(format!(
                    "{}: {db}.{table} holds {copied} rows, {db}.{source} {want}: an earlier copy was interrupted; \
                     drop {db}.{table} on every replica of shard {n} and run again",
                    old.url()
                )));
            }
            old.query(&format!("DROP TABLE {db}.{source}"))?;
            done.tables += 1;
            tracing::info!(shard = n, table, rows = want, "table replicated");
        }
    }
    Ok(done)
}

/// The server of `shard` holding its unreplicated tables (or a migration of them under way);
/// `None` when the shard is replicated already.
fn old_server<'a>(shard: &'a Shard, db: &str) -> Result<Option<&'a Replica>, StorageError> {
    let mut found = None;
    for replica in shard.replicas() {
        let unreplicated = TABLES.iter().any(|t| {
            matches!(engine(replica, db, t), Ok(Some(e)) if !e.starts_with("Replicated"))
                || matches!(engine(replica, db, &format!("{t}_unreplicated")), Ok(Some(_)))
        });
        if unreplicated {
            if found.is_some() {
                return Err(StorageError::Manifest(format!(
                    "more than one server of shard {} holds unreplicated tables of {db}; a shard has one old server",
                    shard.url()
                )));
            }
            found = Some(replica);
        }
    }
    if found.is_none() && engine_anywhere(shard, db)?.is_none() {
        return Err(StorageError::Manifest(format!("no server of shard {} holds database {db}", shard.url())));
    }
    Ok(found)
}

fn engine_anywhere(shard: &Shard, db: &str) -> Result<Option<String>, StorageError> {
    for replica in shard.replicas() {
        if let Some(e) = engine(replica, db, "samples")? {
            return Ok(Some(e));
        }
    }
    Ok(None)
}

/// The engine of `db.table` on `server`, `None` when there is no such table.
fn engine(server: &Replica, db: &str, table: &str) -> Result<Option<String>, StorageError> {
    let found = server.query(&format!(
        "SELECT engine FROM system.tables WHERE database = {} AND name = {} FORMAT TSV",
        quote(db),
        quote(table)
    ))?;
    let engine = String::from_utf8_lossy(&found).trim().to_owned();
    Ok((!engine.is_empty()).then_some(engine))
}

fn count(server: &Replica, db: &str, table: &str) -> Result<u64, StorageError> {
    let body = server.query(&format!("SELECT count() FROM {db}.{table} FORMAT RowBinary"))?;
    Reader::new(&body).u64().map_err(|e| StorageError::Unavailable(format!("{}: {e}", server.url())))
}

fn columns(server: &Replica, db: &str, table: &str) -> Result<Vec<String>, StorageError> {
    let body = server.query(&format!("DESCRIBE TABLE {db}.{table} FORMAT TSV"))?;
    Ok(String::from_utf8_lossy(&body)
        .lines()
        .filter_map(|l| l.split('\t').next())
        .filter(|c| !c.is_empty())
        .map(|c| format!("`{c}`"))
        .collect())
}
