//! The tables of a saltdb database on one shard, created at start-up (versioned, idempotent).
//! Layouts are described in `docs/format.md`.

use super::client::Shard;
use super::rowbinary::Reader;
use crate::storage::StorageError;

/// The schema version this build creates and reads. Version 2 added `samples.inserted_at` and
/// the `chunks` table (sealed days in saltdb's chunk codec); a version-1 database is upgraded in
/// place (its rows read `inserted_at` 0, so they are sealed like any other). Version 3 added
/// `samples.histogram` (a native histogram sample, empty for a float) and histogram chunks in
/// `chunks`; older rows read an empty `histogram`, so they stay floats. Version 4 added the
/// `starts` table (start timestamps), created empty.
pub const VERSION: u32 = 4;

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
    // Version 1's `samples` lacks `inserted_at`, versions 1 and 2 lack `histogram` (18.16 has
    // no `ADD COLUMN IF NOT EXISTS`). Checked with `DESCRIBE` of that one table: `system.columns`
    // lists every table of the server, which grows slow on a shard holding many databases. The
    // columns are added in order, so a crash between the two statements is finished next time.
    if stored < VERSION {
        let described = shard.query(&format!("DESCRIBE TABLE {db}.samples FORMAT TSV"))?;
        let has = |column: &[u8]| described.split(|&b| b == b'\n').any(|line| line.starts_with(column));
        if !has(b"inserted_at\t") {
            shard.query(&format!("ALTER TABLE {db}.samples ADD COLUMN inserted_at Int64 DEFAULT 0"))?;
        }
        if !has(b"histogram\t") {
            shard.query(&format!("ALTER TABLE {db}.samples ADD COLUMN histogram String DEFAULT ''"))?;
        }
        shard.query(&format!("INSERT INTO {db}.schema_version VALUES ({VERSION})"))?;
    }
    Ok(())
}

/// The statements creating the tables.
fn tables(db: &str) -> [String; 5] {
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
            "CREATE TABLE IF NOT EXISTS {db}.samples (bucket UInt16, series_id UInt64, ts Int64, value UInt64, \
             inserted_at Int64 DEFAULT 0, histogram String DEFAULT '') \
             ENGINE = ReplacingMergeTree PARTITION BY intDiv(ts, 86400000) ORDER BY (bucket, series_id, ts)"
        ),
        // Plain MergeTree: a seal removes exactly the versions it merged (see `seal.rs`); a
        // replacing engine could drop a version another node's seal had not read yet.
        format!(
            "CREATE TABLE IF NOT EXISTS {db}.chunks (bucket UInt16, series_id UInt64, day UInt16, version Int64, \
             data String) ENGINE = MergeTree PARTITION BY day ORDER BY (bucket, series_id, day, version)"
        ),
        // One row per sample that has a start timestamp; never sealed, dropped by retention.
        format!(
            "CREATE TABLE IF NOT EXISTS {db}.starts (bucket UInt16, series_id UInt64, ts Int64, start Int64) \
             ENGINE = ReplacingMergeTree PARTITION BY intDiv(ts, 86400000) ORDER BY (bucket, series_id, ts)"
        ),
    ]
}
