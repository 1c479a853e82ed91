//! Where the bytes of a data directory go (`saltdb disk-usage`): the bytes on disk of each
//! keyspace's tables, journals apart, and within each keyspace the rows, key bytes and value
//! bytes of every key family (`docs/format.md`), read by walking every row.
//!
//! The directory must not be in use: it is opened as the server opens it (fjall replays its
//! journal), but nothing saltdb-specific runs (no upgrade, no log replay into a head).

use std::fmt;
use std::path::Path;

use super::disk::du_bytes;
use super::error::{Result, StorageError};
use super::format::keys;
use super::format::{compact_run, run};

/// Rows of one key family of a keyspace, as stored (before fjall's block compression).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FamilyBytes {
    /// The family (see [`family`]).
    pub family: &'static str,
    /// Rows.
    pub rows: u64,
    /// Bytes of their keys.
    pub key_bytes: u64,
    /// Bytes of their values.
    pub value_bytes: u64,
}

/// One keyspace.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeyspaceBytes {
    /// Its name (`series`, `points_<window start ms>_<generation>`, ...).
    pub name: String,
    /// Bytes allocated on disk to its directory (tables and their metadata), as `du` counts.
    pub disk_bytes: u64,
    /// Its tables.
    pub tables: usize,
    /// Its key families, largest first.
    pub families: Vec<FamilyBytes>,
}

impl KeyspaceBytes {
    fn stored_bytes(&self) -> u64 {
        self.families.iter().map(|f| f.key_bytes + f.value_bytes).sum()
    }

    /// The share of [`Self::disk_bytes`] of one family, in proportion to its stored bytes
    /// (fjall compresses whole blocks, so this is an estimate).
    pub fn disk_share(&self, family: &FamilyBytes) -> u64 {
        let all = self.stored_bytes();
        if all == 0 {
            return 0;
        }
        (u128::from(self.disk_bytes) * u128::from(family.key_bytes + family.value_bytes) / u128::from(all)) as u64
    }
}

/// Bytes of a whole data directory.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DiskUsage {
    /// Bytes allocated under the directory (`du`).
    pub total_bytes: u64,
    /// Bytes allocated to fjall's journal files (`*.jnl`).
    pub journal_bytes: u64,
    /// The keyspaces, largest first.
    pub keyspaces: Vec<KeyspaceBytes>,
}

/// The key family of a row of keyspace `keyspace`, by the layouts of `docs/format.md`.
pub fn family(keyspace: &str, key: &[u8], value: &[u8]) -> &'static str {
    match keyspace {
        "meta" => "manifest",
        "series" => "id -> label set",
        "series_by_labels" if key.len() == 16 && value.len() == 8 => "md5 -> id",
        "series_by_labels" if key.len() == 16 => "md5 -> id, label set (format 5)",
        "series_by_labels" => "md5, id -> label set (collisions)",
        "wal" => "log rows",
        "exemplars" => "exemplars",
        "journal_pad" => "journal padding",
        name if name.starts_with("points_") || name.starts_with("chunks_") => window_family(key, value),
        _ => "rows",
    }
}

fn window_family(key: &[u8], value: &[u8]) -> &'static str {
    let Some(&prefix) = key.first_chunk::<2>() else { return "unknown" };
    match u16::from_be_bytes(prefix) {
        keys::WINDOW_INDEX_BUCKET => "window index",
        keys::WINDOW_POSTINGS_BUCKET => "window postings",
        p if p >= keys::HISTOGRAM_FAMILY => "histogram runs",
        p if p >= keys::START_FAMILY => "start timestamps",
        p if p >= keys::TIER_FAMILY => "tier runs",
        _ => row_kind(value),
    }
}

/// What a sample row's value is: a single sample, a raw run, a compact run or a sealed chunk.
fn row_kind(value: &[u8]) -> &'static str {
    match (value.len(), value.first()) {
        (8, _) => "single samples",
        (_, Some(&run::RAW_RUN)) => "raw runs",
        (_, Some(&compact_run::MARKER)) => "compact runs",
        _ => "chunks",
    }
}

/// Bytes per keyspace and key family of the stopped data directory `dir`.
///
/// # Errors
/// [`StorageError::Manifest`] when `dir` holds no saltdb database; engine errors (a directory in
/// use by a running server is locked).
pub fn disk_usage(dir: &Path) -> Result<DiskUsage> {
    let io = |e: std::io::Error| StorageError::Engine(std::sync::Arc::new(e.into()));
    if !dir.join("version").is_file() {
        return Err(StorageError::Manifest(format!("{} holds no saltdb data directory", dir.display())));
    }
    let db = fjall::Database::builder(dir).open()?;
    if !db.keyspace_exists("meta") {
        return Err(StorageError::Manifest(format!("{} holds no saltdb manifest", dir.display())));
    }
    let mut keyspaces = Vec::new();
    for name in db.list_keyspace_names() {
        let ks = db.keyspace(&name, fjall::KeyspaceCreateOptions::default)?;
        keyspaces.push(keyspace_bytes(&name, &ks)?);
    }
    drop(db);
    keyspaces.sort_by(|a, b| b.disk_bytes.cmp(&a.disk_bytes).then_with(|| a.name.cmp(&b.name)));
    let mut journal_bytes = 0;
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let path = entry.map_err(io)?.path();
        if path.extension().is_some_and(|x| x == "jnl") {
            journal_bytes += du_bytes(&path).map_err(io)?;
        }
    }
    Ok(DiskUsage { total_bytes: du_bytes(dir).map_err(io)?, journal_bytes, keyspaces })
}

fn keyspace_bytes(name: &str, ks: &fjall::Keyspace) -> Result<KeyspaceBytes> {
    let mut families: Vec<FamilyBytes> = Vec::new();
    for guard in ks.iter() {
        let (key, value) = guard.into_inner()?;
        let f = family(name, &key, &value);
        let at = match families.iter().position(|x| x.family == f) {
            Some(at) => at,
            None => {
                families.push(FamilyBytes { family: f, ..FamilyBytes::default() });
                families.len() - 1
            }
        };
        if let Some(x) = families.get_mut(at) {
            x.rows += 1;
            x.key_bytes += key.len() as u64;
            x.value_bytes += value.len() as u64;
        }
    }
    families.sort_by_key(|f| std::cmp::Reverse(f.key_bytes + f.value_bytes));
    let disk_bytes = du_bytes(ks.path()).map_err(|e| StorageError::Engine(std::sync::Arc::new(e.into())))?;
    Ok(KeyspaceBytes { name: name.to_owned(), disk_bytes, tables: ks.table_count(), families })
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / f64::from(1 << 20)
}

impl fmt::Display for DiskUsage {
    /// A table: one line per keyspace, then one per key family with its share of the
    /// keyspace's bytes on disk.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let tables: u64 = self.keyspaces.iter().map(|k| k.disk_bytes).sum();
        writeln!(
            f,
            "on disk {:.1} MiB: keyspaces {:.1} MiB, journals {:.1} MiB, other {:.1} MiB",
            mib(self.total_bytes),
            mib(tables),
            mib(self.journal_bytes),
            mib(self.total_bytes.saturating_sub(tables + self.journal_bytes))
        )?;
        writeln!(
            f,
            "{:<40} {:>10} {:>7} {:>12} {:>10} {:>12} {:>9}",
            "keyspace / key family", "disk MiB", "tables", "rows", "key MiB", "value MiB", "B/row"
        )?;
        for k in &self.keyspaces {
            writeln!(f, "{:<40} {:>10.1} {:>7}", k.name, mib(k.disk_bytes), k.tables)?;
            for x in &k.families {
                writeln!(
                    f,
                    "  {:<38} {:>10.1} {:>7} {:>12} {:>10.1} {:>12.1} {:>9.1}",
                    x.family,
                    mib(k.disk_share(x)),
                    "",
                    x.rows,
                    mib(x.key_bytes),
                    mib(x.value_bytes),
                    (x.key_bytes + x.value_bytes) as f64 / x.rows.max(1) as f64
                )?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_rows_fall_in_their_families() {
        let w = "points_0_1";
        assert_eq!(family(w, &keys::point_key(3, 9, 100), &[0; 8]), "single samples");
        assert_eq!(family(w, &keys::window_index_key(9), &[]), "window index");
        assert_eq!(family(w, &keys::postings_key("a", "b", 9), &[]), "window postings");
        assert_eq!(family("series_by_labels", &[0; 16], &[0; 8]), "md5 -> id");
        assert_eq!(family("series_by_labels", &[0; 24], b"a\0b\0"), "md5, id -> label set (collisions)");
    }

    #[test]
    fn a_directory_without_a_database_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(disk_usage(dir.path()), Err(StorageError::Manifest(_))));
        assert!(std::fs::read_dir(dir.path()).unwrap().next().is_none(), "nothing created");
    }
}
