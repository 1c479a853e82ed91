//! Rule groups managed through the ruler API (Mimir's and Cortex's
//! `/prometheus/config/v1/rules`), kept beside the `--rule-file` groups, which stay read-only.
//!
//! A namespace is one rule file text in Prometheus' format (so `saltdb check rules` and
//! `promtool check rules` read it); a group set through the API replaces the group of the same
//! name in its namespace, or is appended. Each change is validated as a whole file first (a bad
//! group is refused and changes nothing), then stored:
//! - on the embedded store, as the file `<data-dir>/rules/api/<namespace, hex>.yml`, written
//!   atomically (written beside, synced, renamed, directory synced);
//! - on ClickHouse, in the cluster's `rule_namespaces` table (`clickhouse/rule_namespaces.rs`),
//!   so every node sees it; the evaluator polls it for other nodes' changes.
//!
//! Groups of a namespace carry the namespace as their `file`, as Mimir shows them: the same on
//! every node, so every node evaluates them at the same slots.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde_norway::{Mapping, Value};

use super::file::RuleFile;
use crate::clickhouse::ClickHouse;
use crate::storage::StorageError;

/// Why a ruler API request cannot be done.
#[derive(Debug, thiserror::Error)]
pub enum RulerError {
    /// The body is no rule group, or the group does not validate.
    #[error("{0}")]
    Invalid(String),
    /// The namespace or group does not exist (Mimir's words, which Grafana recognises).
    #[error("{0}")]
    NotFound(&'static str),
    /// Reading or writing the namespace file failed.
    #[error("rule storage: {0}")]
    Io(#[from] std::io::Error),
    /// Reading or writing the cluster's namespaces failed.
    #[error("rule storage: {0}")]
    Storage(#[from] StorageError),
}

/// Mimir's message for a missing group.
pub const GROUP_NOT_FOUND: &str = "group does not exist";
/// Mimir's message for a missing namespace.
pub const NAMESPACE_NOT_FOUND: &str = "no rule groups found";

/// Where the namespaces are kept.
enum Shelf {
    /// A file per namespace in this directory.
    Dir(PathBuf),
    /// The cluster's `rule_namespaces` table.
    ClickHouse(ClickHouse),
}

impl std::fmt::Debug for Shelf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Dir(dir) => f.debug_tuple("Dir").field(dir).finish(),
            Self::ClickHouse(ch) => f.debug_tuple("ClickHouse").field(&ch.config().shards).finish(),
        }
    }
}

/// The namespaces of API-managed groups.
#[derive(Debug)]
pub struct RulerStore {
    shelf: Shelf,
    /// Serialises read-modify-write of namespaces on this node.
    lock: Mutex<()>,
}

impl RulerStore {
    /// The store in `dir` (created on the first write).
    pub fn new(dir: PathBuf) -> Self {
        Self { shelf: Shelf::Dir(dir), lock: Mutex::new(()) }
    }

    /// The store in the cluster behind `clickhouse`, shared by every node.
    pub fn on_clickhouse(clickhouse: ClickHouse) -> Self {
        Self { shelf: Shelf::ClickHouse(clickhouse), lock: Mutex::new(()) }
    }

    /// Whether other nodes change these namespaces too (so they must be polled).
    pub fn is_shared(&self) -> bool {
        matches!(self.shelf, Shelf::ClickHouse(_))
    }

    fn path(dir: &Path, namespace: &str) -> PathBuf {
        let hex: String = namespace.bytes().map(|b| format!("{b:02x}")).collect();
        dir.join(format!("{hex}.yml"))
    }

    fn namespace_of(file_name: &str) -> Option<String> {
        let hex = file_name.strip_suffix(".yml")?;
        let bytes: Option<Vec<u8>> =
            (0..hex.len()).step_by(2).map(|i| hex.get(i..i + 2).and_then(|h| u8::from_str_radix(h, 16).ok())).collect();
        String::from_utf8(bytes?).ok()
    }

    /// The text of `namespace` and its version (0 in a directory), `None` when it does not
    /// exist.
    fn read(&self, namespace: &str) -> Result<Option<(Vec<u8>, i64)>, RulerError> {
        match &self.shelf {
            Shelf::Dir(dir) => match std::fs::read(Self::path(dir, namespace)) {
                Ok(b) => Ok(Some((b, 0))),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(e.into()),
            },
            Shelf::ClickHouse(ch) => Ok(ch.rule_namespace(namespace)?.map(|n| (n.text.into_bytes(), n.version))),
        }
    }

    /// Every namespace's text, by name.
    fn texts(&self) -> Result<BTreeMap<String, Vec<u8>>, RulerError> {
        let dir = match &self.shelf {
            Shelf::Dir(dir) => dir,
            Shelf::ClickHouse(ch) => {
                return Ok(ch.rule_namespaces()?.into_iter().map(|(ns, n)| (ns, n.text.into_bytes())).collect())
            }
        };
        let mut out = BTreeMap::new();
        let entries = match std::fs::read_dir(dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
            Err(e) => return Err(e.into()),
        };
        for entry in entries {
            let name = entry?.file_name();
            let Some(namespace) = name.to_str().and_then(Self::namespace_of) else { continue };
            if let Some((text, _)) = self.read(&namespace)? {
                out.insert(namespace, text);
            }
        }
        Ok(out)
    }

    /// The groups of `namespace` as YAML values, in order (empty when it does not exist), and
    /// the version read.
    fn groups_of(&self, namespace: &str) -> Result<(Vec<Value>, i64), RulerError> {
        match self.read(namespace)? {
            Some((text, version)) => Ok((groups_in(&text)?, version)),
            None => Ok((Vec::new(), 0)),
        }
    }

    /// Every namespace with its groups.
    ///
    /// # Errors
    /// [`RulerError::Io`] or [`RulerError::Storage`] when the namespaces cannot be read.
    pub fn all(&self) -> Result<BTreeMap<String, Vec<Value>>, RulerError> {
        let mut out = BTreeMap::new();
        for (namespace, text) in self.texts()? {
            let groups = groups_in(&text)?;
            if !groups.is_empty() {
                out.insert(namespace, groups);
            }
        }
        Ok(out)
    }

    /// A digest of every namespace as stored: equal digests, equal namespaces (what the
    /// evaluator compares to see other nodes' changes).
    ///
    /// # Errors
    /// As [`RulerStore::all`].
    pub fn digest(&self) -> Result<u64, RulerError> {
        let mut bytes = Vec::new();
        for (namespace, text) in self.texts()? {
            for part in [namespace.as_bytes(), &text] {
                bytes.extend_from_slice(&(part.len() as u64).to_le_bytes());
                bytes.extend_from_slice(part);
            }
        }
        Ok(xxhash_rust::xxh64::xxh64(&bytes, 0))
    }

    /// The groups of one namespace.
    ///
    /// # Errors
    /// [`RulerError::NotFound`] when it has none.
    pub fn namespace(&self, namespace: &str) -> Result<Vec<Value>, RulerError> {
        let (groups, _) = self.groups_of(namespace)?;
        if groups.is_empty() {
            return Err(RulerError::NotFound(NAMESPACE_NOT_FOUND));
        }
        Ok(groups)
    }

    /// One group.
    ///
    /// # Errors
    /// [`RulerError::NotFound`] when it does not exist.
    pub fn group(&self, namespace: &str, group: &str) -> Result<Value, RulerError> {
        self.groups_of(namespace)?
            .0
            .into_iter()
            .find(|g| name_of(g) == Some(group))
            .ok_or(RulerError::NotFound(GROUP_NOT_FOUND))
    }

    /// Sets a group from its YAML (replacing the group of its name, or appended).
    ///
    /// # Errors
    /// [`RulerError::Invalid`] when the body is no valid group; nothing changes then.
    pub fn set(&self, namespace: &str, body: &[u8]) -> Result<(), RulerError> {
        let mut group: Value = serde_norway::from_slice(body).map_err(|e| RulerError::Invalid(e.to_string()))?;
        // Merge keys (`<<: *anchor`) are resolved here: the stored file has no anchors left.
        group.apply_merge().map_err(|e| RulerError::Invalid(e.to_string()))?;
        let Some(name) = name_of(&group).map(str::to_owned) else {
            return Err(RulerError::Invalid("a rule group needs a name".to_owned()));
        };
        if namespace.is_empty() {
            return Err(RulerError::Invalid("the namespace must not be empty".to_owned()));
        }
        let _held = self.lock.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (mut groups, version) = self.groups_of(namespace)?;
        match groups.iter_mut().find(|g| name_of(g) == Some(name.as_str())) {
            Some(g) => *g = group,
            None => groups.push(group),
        }
        self.write(namespace, groups, version)
    }

    /// Deletes one group.
    ///
    /// # Errors
    /// [`RulerError::NotFound`] when it does not exist.
    pub fn delete_group(&self, namespace: &str, group: &str) -> Result<(), RulerError> {
        let _held = self.lock.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (mut groups, version) = self.groups_of(namespace)?;
        let before = groups.len();
        groups.retain(|g| name_of(g) != Some(group));
        if groups.len() == before {
            return Err(RulerError::NotFound(GROUP_NOT_FOUND));
        }
        self.write(namespace, groups, version)
    }

    /// Deletes a namespace with all its groups.
    ///
    /// # Errors
    /// [`RulerError::NotFound`] when it does not exist.
    pub fn delete_namespace(&self, namespace: &str) -> Result<(), RulerError> {
        let _held = self.lock.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match &self.shelf {
            Shelf::Dir(dir) => match std::fs::remove_file(Self::path(dir, namespace)) {
                Ok(()) => Ok(std::fs::File::open(dir)?.sync_all()?),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(RulerError::NotFound(NAMESPACE_NOT_FOUND)),
                Err(e) => Err(e.into()),
            },
            Shelf::ClickHouse(ch) => match ch.rule_namespace(namespace)? {
                Some(stored) => Ok(ch.put_rule_namespace(namespace, None, stored.version)?),
                None => Err(RulerError::NotFound(NAMESPACE_NOT_FOUND)),
            },
        }
    }

    /// The namespaces as rule files (for the evaluator).
    ///
    /// # Errors
    /// Every problem of every namespace.
    pub fn rule_files(&self) -> Result<Vec<RuleFile>, Vec<String>> {
        let all = self.all().map_err(|e| vec![e.to_string()])?;
        let mut files = Vec::new();
        let mut errors = Vec::new();
        for (namespace, groups) in all {
            let text = file_text(groups).map_err(|e| vec![e.to_string()])?;
            match super::parse_file(&namespace, text.as_bytes()) {
                Ok(f) => files.push(f),
                Err(e) => errors.extend(e),
            }
        }
        if errors.is_empty() {
            Ok(files)
        } else {
            Err(errors)
        }
    }

    /// Validates `groups` as the whole namespace file, then replaces it (or removes it when
    /// empty); `replaced`: the version the change read.
    fn write(&self, namespace: &str, groups: Vec<Value>, replaced: i64) -> Result<(), RulerError> {
        let text = if groups.is_empty() {
            None
        } else {
            let text = file_text(groups)?;
            super::parse_file(namespace, text.as_bytes()).map_err(|e| RulerError::Invalid(e.join("\n")))?;
            Some(text)
        };
        let dir = match &self.shelf {
            Shelf::Dir(dir) => dir,
            Shelf::ClickHouse(ch) => return Ok(ch.put_rule_namespace(namespace, text.as_deref(), replaced)?),
        };
        let path = Self::path(dir, namespace);
        let Some(text) = text else {
            std::fs::remove_file(&path)?;
            return Ok(std::fs::File::open(dir)?.sync_all()?);
        };
        std::fs::create_dir_all(dir)?;
        let temp = path.with_extension("yml.tmp");
        let mut f = std::fs::File::create(&temp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        drop(f);
        std::fs::rename(&temp, &path)?;
        Ok(std::fs::File::open(dir)?.sync_all()?)
    }
}

/// The names of the namespace files in `dir`, a directory this node no longer reads because
/// its namespaces are on ClickHouse (left there by a release that kept them per node).
pub fn namespaces_left_in(dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    entries.flatten().filter_map(|e| e.file_name().to_str().and_then(RulerStore::namespace_of)).collect()
}

/// The groups of a namespace's text.
fn groups_in(text: &[u8]) -> Result<Vec<Value>, RulerError> {
    let file: Value = serde_norway::from_slice(text).map_err(|e| RulerError::Invalid(e.to_string()))?;
    Ok(match file.get("groups") {
        Some(Value::Sequence(groups)) => groups.clone(),
        _ => Vec::new(),
    })
}

/// A group's `name`.
pub fn name_of(group: &Value) -> Option<&str> {
    group.get("name").and_then(Value::as_str)
}

/// `groups` as a rule file's text.
fn file_text(groups: Vec<Value>) -> Result<String, RulerError> {
    let mut file = Mapping::new();
    file.insert(Value::from("groups"), Value::Sequence(groups));
    serde_norway::to_string(&Value::Mapping(file)).map_err(|e| RulerError::Invalid(e.to_string()))
}

/// YAML text of a value (ruler API answers).
///
/// # Errors
/// Serialisation failures (not expected for values read from YAML).
pub fn yaml(value: &Value) -> Result<String, RulerError> {
    serde_norway::to_string(value).map_err(|e| RulerError::Invalid(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const GROUP: &str = "name: g1\ninterval: 1m\nrules:\n  - record: job:up:sum\n    expr: sum by (job) (up)\n";

    #[test]
    fn a_group_set_is_read_back_and_replaced_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let store = RulerStore::new(dir.path().join("api"));
        store.set("team a/x", GROUP.as_bytes()).unwrap();
        store.set("team a/x", GROUP.replace("g1", "g2").as_bytes()).unwrap();
        store.set("team a/x", GROUP.replace("job:up:sum", "job:up:total").as_bytes()).unwrap();
        let groups = store.namespace("team a/x").unwrap();
        assert_eq!(groups.iter().map(|g| name_of(g).unwrap()).collect::<Vec<_>>(), ["g1", "g2"]);
        let g1 = yaml(&store.group("team a/x", "g1").unwrap()).unwrap();
        assert!(g1.contains("job:up:total"), "{g1}");
        assert_eq!(store.all().unwrap().keys().collect::<Vec<_>>(), ["team a/x"]);
        let files = store.rule_files().unwrap();
        assert_eq!(files[0].groups.len(), 2);
        assert_eq!(files[0].groups[0].file, "team a/x");
    }

    #[test]
    fn missing_groups_and_namespaces_say_so_as_mimir_does() {
        let dir = tempfile::tempdir().unwrap();
        let store = RulerStore::new(dir.path().join("api"));
        assert!(matches!(store.group("n", "g"), Err(RulerError::NotFound(GROUP_NOT_FOUND))));
        assert!(matches!(store.namespace("n"), Err(RulerError::NotFound(NAMESPACE_NOT_FOUND))));
        assert!(matches!(store.delete_namespace("n"), Err(RulerError::NotFound(NAMESPACE_NOT_FOUND))));
        store.set("n", GROUP.as_bytes()).unwrap();
        store.delete_group("n", "g1").unwrap();
        assert!(store.all().unwrap().is_empty());
    }

    #[test]
    fn the_digest_follows_the_namespaces_and_left_files_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let store = RulerStore::new(dir.path().join("api"));
        let empty = store.digest().unwrap();
        store.set("n", GROUP.as_bytes()).unwrap();
        let one = store.digest().unwrap();
        assert_ne!(one, empty);
        store.set("n", GROUP.as_bytes()).unwrap();
        assert_eq!(store.digest().unwrap(), one, "the same group again changes nothing");
        store.set("n", GROUP.replace("job:up:sum", "job:up:total").as_bytes()).unwrap();
        assert_ne!(store.digest().unwrap(), one);
        store.delete_namespace("n").unwrap();
        assert_eq!(store.digest().unwrap(), empty);
        store.set("team a/x", GROUP.as_bytes()).unwrap();
        assert_eq!(namespaces_left_in(&dir.path().join("api")), ["team a/x"]);
        assert!(namespaces_left_in(&dir.path().join("none")).is_empty());
        assert!(!store.is_shared());
    }

    #[test]
    fn a_bad_group_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let store = RulerStore::new(dir.path().join("api"));
        store.set("n", GROUP.as_bytes()).unwrap();
        assert!(matches!(store.set("n", b"name: g1\nrules:\n  - record: x\n"), Err(RulerError::Invalid(_))));
        assert!(matches!(store.set("n", b"rules: []\n"), Err(RulerError::Invalid(_))));
        assert!(matches!(store.set("n", b"{not yaml"), Err(RulerError::Invalid(_))));
        assert!(yaml(&store.group("n", "g1").unwrap()).unwrap().contains("job:up:sum"));
    }
}
