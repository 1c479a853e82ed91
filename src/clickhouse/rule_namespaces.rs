//! The ruler API's namespaces on ClickHouse (`rules/ruler.rs`), so that every node sees and
//! evaluates the groups set through any of them.
//!
//! Table `rule_namespaces` (`docs/format.md`), used on the first shard only (it exists on
//! every shard, created with the others): one row per change of a namespace, its whole rule
//! file text or a deletion, at a version above the one it replaced. Readers take each
//! namespace's highest version (`argMax`), so rows not merged yet change nothing;
//! `ReplacingMergeTree(version)` merges the older ones away.
//!
//! There is no lock across nodes: of two changes of one namespace made at the same moment
//! through two nodes, the one of the higher version wins whole (the other's group is lost).

use std::collections::BTreeMap;

use super::client::quote;
use super::rowbinary::{put_str, Reader};
use super::ClickHouse;
use crate::storage::StorageError;

/// A namespace as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredNamespace {
    /// The rule file text of its groups.
    pub text: String,
    /// The version of the change that wrote it.
    pub version: i64,
}

impl ClickHouse {
    /// Every namespace that exists, by name.
    ///
    /// # Errors
    /// [`StorageError::Unavailable`] when the first shard fails or answers bytes that do not
    /// decode.
    pub fn rule_namespaces(&self) -> Result<BTreeMap<String, StoredNamespace>, StorageError> {
        self.read_namespaces("")
    }

    /// The namespaces whose names start with `prefix`, by name; with `prefix` `None`, those
    /// whose names do not start with the byte 0 (the ruler's tenants' namespaces do, see
    /// `rules/ruler.rs`).
    ///
    /// # Errors
    /// As [`ClickHouse::rule_namespaces`].
    pub fn rule_namespaces_of(&self, prefix: Option<&str>) -> Result<BTreeMap<String, StoredNamespace>, StorageError> {
        // `substring` counts bytes from 1; `startsWith` is newer than ClickHouse 18.16.
        self.read_namespaces(&match prefix {
            Some(p) => format!("WHERE substring(namespace, 1, {}) = {}", p.len(), quote(p)),
            None => "WHERE substring(namespace, 1, 1) != '\\0'".to_owned(),
        })
    }

    /// One namespace, `None` when it does not exist.
    ///
    /// # Errors
    /// As [`ClickHouse::rule_namespaces`].
    pub fn rule_namespace(&self, namespace: &str) -> Result<Option<StoredNamespace>, StorageError> {
        let mut found = self.read_namespaces(&format!("WHERE namespace = {}", quote(namespace)))?;
        Ok(found.remove(namespace))
    }

    /// Stores `text` as the namespace (`None`: deletes it), at a version above `replaced`, the
    /// version of what the change read (0 when the namespace did not exist): the later of the
    /// clock (milliseconds) and `replaced + 1`.
    ///
    /// # Errors
    /// [`StorageError::Unavailable`] when the first shard fails; nothing changed then, or the
    /// change is in place (a retry writes it again).
    pub fn put_rule_namespace(&self, namespace: &str, text: Option<&str>, replaced: i64) -> Result<(), StorageError> {
        let version = crate::storage::now_ms().max(replaced.saturating_add(1));
        let mut row = Vec::with_capacity(namespace.len() + text.map_or(0, str::len) + 24);
        put_str(&mut row, namespace.as_bytes());
        row.extend_from_slice(&version.to_le_bytes());
        row.push(u8::from(text.is_none()));
        put_str(&mut row, text.unwrap_or_default().as_bytes());
        let insert = format!("INSERT INTO {} (namespace, version, deleted, text)", self.table("rule_namespaces"));
        // Not one of the four tables whose rows `/metrics` counts.
        self.first_shard()?.insert(&insert, &row, usize::MAX, 1)?;
        Ok(())
    }

    fn read_namespaces(&self, filter: &str) -> Result<BTreeMap<String, StoredNamespace>, StorageError> {
        let sql = format!(
            "SELECT namespace, argMax(text, version), max(version) FROM {} {filter} GROUP BY namespace \
             HAVING argMax(deleted, version) = 0 FORMAT RowBinary",
            self.table("rule_namespaces")
        );
        let shard = self.first_shard()?;
        let body = shard.query(&sql)?;
        let malformed = |e: super::rowbinary::Malformed| StorageError::Unavailable(format!("{}: {e}", shard.url()));
        let mut r = Reader::new(&body);
        let mut out = BTreeMap::new();
        while !r.is_empty() {
            let namespace = r.str().map_err(malformed)?.to_owned();
            let text = r.str().map_err(malformed)?.to_owned();
            let version = r.i64().map_err(malformed)?;
            out.insert(namespace, StoredNamespace { text, version });
        }
        Ok(out)
    }

    fn first_shard(&self) -> Result<&super::client::Shard, StorageError> {
        self.inner.shards.first().ok_or_else(|| StorageError::Manifest("no ClickHouse shard URL given".to_owned()))
    }
}
