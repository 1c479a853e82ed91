//! The tables of a saltdb database on one shard, created at start-up (versioned, idempotent).
//! Layouts are described in `docs/format.md`.

use super::client::Shard;
use super::rowbinary::Reader;
use crate::storage::StorageError;

/// The schema version this build creates and reads.
pub const VERSION: u32 = 1;

/// Creates the database and tables of version [`VERSION`] on `shard` unless they exist, and
/// records the version.
///
/// # Errors
/// [`StorageError::Unavailable`] when the shard fails; [`StorageError::Manifest`] when it holds
/// a newer schema.
pub fn ensure(shard: &Shard, db: &str) -> Result<(), StorageError> {
    shard.query(&format!("CREATE DATABASE IF NOT EXISTS {db}"))?;
    shard.query(&format!(
        "CREATE TABLE IF NOT EXISTS {db}.schema_version (version UInt32) ENGINE = ReplacingMergeTree ORDER BY version"
    ))?;
    let found = shard.query(&format!("SELECT max(version) FROM {db}.schema_version FORMAT RowBinary"))?;
    let stored = Reader::new(&found).u32().map_err(|e| StorageError::Unavailable(format!("{}: {e}", shard.url())))?;
    if stored > VERSION {
        return Err(StorageError::Manifest(format!(
            "ClickHouse shard {} holds saltdb schema version {stored}; this build knows {VERSION}",
            shard.url()
        )));
    }
    for statement in tables(db) {
        shard.query(&statement)?;
    }
    if stored < VERSION {
        shard.query(&format!("INSERT INTO {db}.schema_version VALUES ({VERSION})"))?;
    }
    Ok(())
}

/// The statements creating version 1's tables.
fn tables(db: &str) -> [String; 3] {
    [
        format!(
            "CREATE TABLE IF NOT EXISTS {db}.series (series_id UInt64, bucket UInt16, names Array(String), \
             values Array(String)) ENGINE = ReplacingMergeTree ORDER BY series_id"
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {db}.postings (day Date, name String, value String, series_id UInt64) \
             ENGINE = ReplacingMergeTree PARTITION BY toYYYYMM(day) ORDER BY (name, value, day, series_id)"
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {db}.samples (bucket UInt16, series_id UInt64, ts Int64, value UInt64) \
             ENGINE = ReplacingMergeTree PARTITION BY intDiv(ts, 86400000) ORDER BY (bucket, series_id, ts)"
        ),
    ]
}
