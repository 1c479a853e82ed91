//! The tables of a saltdb database on one shard, created at start-up (versioned, idempotent).
//! Layouts are described in `docs/format.md`.
//!
//! **Replicated shards** (`--clickhouse-url` listing several servers for a shard, or
//! `--clickhouse-replicated`): every table but `schema_version` is the `Replicated` variant of
//! its engine, created on each replica with the ZooKeeper path
//! `/clickhouse/saltdb/<database>/shard-<n>/<table>` (the shard's number from saltdb's own
//! order, so two shards can never share a path whatever the servers' macros say) and the
//! replica name `{replica}`, the macro each server's configuration must define, different on
//! each replica of a shard. `schema_version` stays local: each server records its own.

use super::client::{Replica, Shard};
use super::rowbinary::Reader;
use crate::storage::StorageError;

/// The schema version this build creates and reads. Version 2 added `samples.inserted_at` and
/// the `chunks` table (sealed days in saltdb's chunk codec); a version-1 database is upgraded in
/// place (its rows read `inserted_at` 0, so they are sealed like any other). Version 3 added
/// `samples.histogram` (a native histogram sample, empty for a float) and histogram chunks in
/// `chunks`; older rows read an empty `histogram`, so they stay floats. Version 4 added the
/// `starts` table (start timestamps), created empty. Version 5 made writes spanning shards
/// all-or-nothing (`commit.rs`): `samples.write_id` and `starts.write_id`, appended to both
/// tables' sorting keys (older rows read 0: committed), the `commits` table, and the
/// `exemplars` table (created empty). Version 6 made the index of such writes all-or-nothing
/// too: `postings.write_id` (appended to its sorting key) and `postings.inserted_at` (older rows
/// read 0 for both: committed, settled). Version 7 added the `rule_namespaces` table (the
/// ruler API's namespaces, shared by every node), created empty.
pub const VERSION: u32 = 7;

/// Ensures the schema on every replica of `shard` (see [`ensure`]); `replication` is the shard's
/// number when its tables are replicated. A replicated shard needs one replica up: a replica
/// that is down is skipped with a warning (its tables exist if it ever served this database; a
/// new replica must be up when saltdb starts).
///
/// # Errors
/// [`ensure`]'s, of the only replica or of the last one tried when none is up.
pub fn ensure_shard(shard: &Shard, db: &str, replication: Option<usize>) -> Result<(), StorageError> {
    let mut ensured = 0;
    let mut last = None;
    for replica in shard.replicas() {
        match ensure(replica, db, replication) {
            Ok(()) => ensured += 1,
            Err(StorageError::Unavailable(why)) if replication.is_some() && shard.replicas().len() > 1 => {
                tracing::warn!(replica = replica.url(), error = %why, "a ClickHouse replica is down at start-up; its schema is not checked");
                last = Some(StorageError::Unavailable(why));
            }
            Err(e) => return Err(e),
        }
    }
    match (ensured, last) {
        (0, Some(e)) => Err(e),
        _ => Ok(()),
    }
}

/// Creates the database and tables of version [`VERSION`] on `replica` unless they exist, and
/// records the version; `replication` is the shard's number when its tables are replicated.
///
/// # Errors
/// [`StorageError::Unavailable`] when the server fails; [`StorageError::Manifest`] when it holds
/// a newer schema, its tables are replicated and `replication` is `None` or the other way
/// round, or a replicated shard's server defines no `replica` macro.
pub fn ensure(shard: &Replica, db: &str, replication: Option<usize>) -> Result<(), StorageError> {
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
    if replication.is_some() {
        let macros = shard.query("SELECT count() FROM system.macros WHERE macro = 'replica' FORMAT RowBinary")?;
        if Reader::new(&macros).u64().map_err(|e| StorageError::Unavailable(format!("{}: {e}", shard.url())))? == 0 {
            return Err(StorageError::Manifest(format!(
                "ClickHouse server {} defines no `replica` macro: a replicated shard's servers each need \
                 <macros><replica>NAME</replica></macros> in their configuration, NAME different on each replica",
                shard.url()
            )));
        }
    }
    check_engine(shard, db, replication.is_some())?;
    for statement in tables(db, replication) {
        shard.query(&statement)?;
    }
    // Version 1's `samples` lacks `inserted_at`, versions 1 and 2 lack `histogram`, versions 1
    // to 4 lack `write_id`, versions 1 to 5 lack `postings.write_id` and `postings.inserted_at`
    // (18.16 has no `ADD COLUMN IF NOT EXISTS`). Checked with `DESCRIBE` of
    // the table: `system.columns` lists every table of the server, which grows slow on a shard
    // holding many databases. Each step is one statement and they run in order, so a crash
    // between two is finished next time.
    if stored < VERSION {
        let samples = Described::of(shard, db, "samples")?;
        if !samples.has("inserted_at") {
            shard.query(&format!("ALTER TABLE {db}.samples ADD COLUMN inserted_at Int64 DEFAULT 0"))?;
        }
        if !samples.has("histogram") {
            shard.query(&format!("ALTER TABLE {db}.samples ADD COLUMN histogram String DEFAULT ''"))?;
        }
        for table in ["samples", "starts", "postings"] {
            if !Described::of(shard, db, table)?.has("write_id") {
                shard.query(&add_write_id(db, table))?;
            }
        }
        if !Described::of(shard, db, "postings")?.has("inserted_at") {
            shard.query(&format!("ALTER TABLE {db}.postings ADD COLUMN inserted_at Int64 DEFAULT 0"))?;
        }
        shard.query(&format!("INSERT INTO {db}.schema_version VALUES ({VERSION})"))?;
    }
    Ok(())
}

/// Refuses a database whose `samples` table is replicated when the configuration is not, or the
/// other way round (a fresh database has no `samples` yet and passes).
fn check_engine(shard: &Replica, db: &str, replicated: bool) -> Result<(), StorageError> {
    let found = shard.query(&format!(
        "SELECT engine FROM system.tables WHERE database = {} AND name = 'samples' FORMAT TSV",
        super::client::quote(db)
    ))?;
    let engine = String::from_utf8_lossy(&found).trim().to_owned();
    if engine.is_empty() || engine.starts_with("Replicated") == replicated {
        return Ok(());
    }
    let (holds, asked) = if replicated { ("unreplicated", "replicated") } else { ("replicated", "unreplicated") };
    Err(StorageError::Manifest(format!(
        "ClickHouse server {} holds database {db} with {holds} tables ({engine}), but saltdb was started with \
         {asked} shards; see docs/clickhouse.md for moving a database to replicated shards",
        shard.url()
    )))
}

/// The engine of `table`, `kind` being the unreplicated one (`ReplacingMergeTree`, `MergeTree`,
/// `ReplacingMergeTree(version)`): its `Replicated` variant on shard `replication`'s ZooKeeper
/// path when replicated, the engine's own parameters after the path and replica name.
fn engine(kind: &str, db: &str, table: &str, replication: Option<usize>) -> String {
    let Some(n) = replication else { return kind.to_owned() };
    let (family, params) = match kind.split_once('(') {
        Some((family, rest)) => (family, format!(", {}", rest.trim_end_matches(')'))),
        None => (kind, String::new()),
    };
    format!("Replicated{family}('/clickhouse/saltdb/{db}/shard-{n}/{table}', '{{replica}}'{params})")
}

/// The columns of a table, as `DESCRIBE` lists them.
struct Described(Vec<u8>);

impl Described {
    fn of(shard: &Replica, db: &str, table: &str) -> Result<Self, StorageError> {
        Ok(Self(shard.query(&format!("DESCRIBE TABLE {db}.{table} FORMAT TSV"))?))
    }

    fn has(&self, column: &str) -> bool {
        let prefix = format!("{column}\t");
        self.0.split(|&b| b == b'\n').any(|line| line.starts_with(prefix.as_bytes()))
    }
}

/// The upgrade of `table` to its `write_id` column (`samples` and `starts`: version 5;
/// `postings`: version 6), appended to the sorting key in the same statement (18.16 allows only
/// a new column there, and only without a default expression: a `UInt64` reads 0 anyway). The
/// primary key stays the old sorting key, so a table created afresh declares it the same way.
fn add_write_id(db: &str, table: &str) -> String {
    let key = if table == "postings" { "name, value, day, series_id" } else { "bucket, series_id, ts" };
    format!("ALTER TABLE {db}.{table} ADD COLUMN write_id UInt64, MODIFY ORDER BY ({key}, write_id)")
}

/// Every table of a database but `schema_version`, in the order [`tables`] creates them.
pub const TABLES: [&str; 8] =
    ["series", "postings", "samples", "chunks", "starts", "commits", "exemplars", "rule_namespaces"];

/// The statements creating the tables.
fn tables(db: &str, replication: Option<usize>) -> [String; 8] {
    let replacing = |table: &str| engine("ReplacingMergeTree", db, table, replication);
    let plain = |table: &str| engine("MergeTree", db, table, replication);
    [
        format!(
            "CREATE TABLE IF NOT EXISTS {db}.series (series_id UInt64, bucket UInt16, names Array(String), \
             values Array(String)) ENGINE = {} ORDER BY series_id",
            replacing("series")
        ),
        // `write_id` and `inserted_at` as their write's `samples` rows; the maintenance pass
        // settles them (`settle.rs`).
        format!(
            "CREATE TABLE IF NOT EXISTS {db}.postings (day Date, name String, value String, series_id UInt64, \
             write_id UInt64, inserted_at Int64 DEFAULT 0) ENGINE = {} PARTITION BY toYYYYMM(day) \
             PRIMARY KEY (name, value, day, series_id) ORDER BY (name, value, day, series_id, write_id)",
            replacing("postings")
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {db}.samples (bucket UInt16, series_id UInt64, ts Int64, value UInt64, \
             inserted_at Int64 DEFAULT 0, histogram String DEFAULT '', write_id UInt64) \
             ENGINE = {} PARTITION BY intDiv(ts, 86400000) PRIMARY KEY (bucket, series_id, ts) \
             ORDER BY (bucket, series_id, ts, write_id)",
            replacing("samples")
        ),
        // Plain MergeTree: a seal removes exactly the versions it merged (see `seal.rs`); a
        // replacing engine could drop a version another node's seal had not read yet.
        format!(
            "CREATE TABLE IF NOT EXISTS {db}.chunks (bucket UInt16, series_id UInt64, day UInt16, version Int64, \
             data String) ENGINE = {} PARTITION BY day ORDER BY (bucket, series_id, day, version)",
            plain("chunks")
        ),
        // One row per sample that has a start timestamp; never sealed, dropped by retention.
        format!(
            "CREATE TABLE IF NOT EXISTS {db}.starts (bucket UInt16, series_id UInt64, ts Int64, start Int64, \
             write_id UInt64) ENGINE = {} PARTITION BY intDiv(ts, 86400000) \
             PRIMARY KEY (bucket, series_id, ts) ORDER BY (bucket, series_id, ts, write_id)",
            replacing("starts")
        ),
        // The commit records of writes spanning shards (`commit.rs`), on each write's
        // coordinator shard; `day` is the day the record was written, for retention.
        format!(
            "CREATE TABLE IF NOT EXISTS {db}.commits (write_id UInt64, day Date) \
             ENGINE = {} PARTITION BY toYYYYMM(day) ORDER BY write_id",
            replacing("commits")
        ),
        // Exemplars: one row per series and time (a later one at that time replaces it once
        // merged), with the write id of the write that carried it; dropped by retention.
        format!(
            "CREATE TABLE IF NOT EXISTS {db}.exemplars (bucket UInt16, series_id UInt64, ts Int64, value UInt64, \
             names Array(String), values Array(String), write_id UInt64) ENGINE = {} \
             PARTITION BY intDiv(ts, 86400000) PRIMARY KEY (bucket, series_id, ts) \
             ORDER BY (bucket, series_id, ts, write_id)",
            replacing("exemplars")
        ),
        // The ruler API's namespaces (`rule_namespaces.rs`), on the first shard: a row per
        // change, the highest version of a namespace is what it holds.
        format!(
            "CREATE TABLE IF NOT EXISTS {db}.rule_namespaces (namespace String, version Int64, deleted UInt8, \
             text String) ENGINE = {} ORDER BY namespace",
            engine("ReplacingMergeTree(version)", db, "rule_namespaces", replication)
        ),
    ]
}
