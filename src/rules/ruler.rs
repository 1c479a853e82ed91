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
//!
//! Each tenant has its own namespaces (`--tenants`; Mimir's ruler keeps them per tenant too).
//! The default tenant's, and every namespace of a server without tenants, are where they were
//! before tenants; another tenant's are `<dir>/tenants/<tenant>/<namespace, hex>.yml`, or on
//! ClickHouse the row whose `namespace` is `\0<tenant>\0<namespace>`. A namespace name holding
//! `\0` is refused, so the two never meet.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde_norway::{Mapping, Value};

use super::file::RuleFile;
use crate::clickhouse::{ClickHouse, StoredNamespace};
use crate::storage::StorageError;
use crate::tenant::TenantId;

/// Whose namespaces: `None` for the default tenant's (and every namespace without tenants).
pub type Owner<'a> = Option<&'a TenantId>;

/// A namespace with its owner, as the whole store lists it.
type Key = (Option<TenantId>, String);

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

    /// The directory of `owner`'s namespace files under `dir`.
    fn dir_of(dir: &Path, owner: Owner<'_>) -> PathBuf {
        match owner.filter(|t| !t.is_default()) {
            Some(t) => dir.join("tenants").join(t.as_str()),
            None => dir.to_path_buf(),
        }
    }

    /// The `namespace` column of `owner`'s namespace on ClickHouse.
    fn row_key(owner: Owner<'_>, namespace: &str) -> String {
        match owner.filter(|t| !t.is_default()) {
            Some(t) => format!("\0{t}\0{namespace}"),
            None => namespace.to_owned(),
        }
    }

    /// Namespace rows read from ClickHouse by owner and name ([`RulerStore::of_row_key`]), with
    /// their texts.
    fn of_rows(rows: BTreeMap<String, StoredNamespace>) -> BTreeMap<Key, Vec<u8>> {
        rows.into_iter().filter_map(|(key, n)| Some((Self::of_row_key(key)?, n.text.into_bytes()))).collect()
    }

    /// The owner and namespace of a `namespace` column ([`RulerStore::row_key`]); `None` for a
    /// key no release wrote.
    fn of_row_key(key: String) -> Option<Key> {
        let Some(rest) = key.strip_prefix('\0') else { return Some((None, key)) };
        let (tenant, namespace) = rest.split_once('\0')?;
        Some((Some(TenantId::parse(tenant).ok()?), namespace.to_owned()))
    }

    fn namespace_of(file_name: &str) -> Option<String> {
        let hex = file_name.strip_suffix(".yml")?;
        let bytes: Option<Vec<u8>> =
            (0..hex.len()).step_by(2).map(|i| hex.get(i..i + 2).and_then(|h| u8::from_str_radix(h, 16).ok())).collect();
        String::from_utf8(bytes?).ok()
    }

    /// The text of `namespace` and its version (0 in a directory), `None` when it does not
    /// exist.
    fn read(&self, owner: Owner<'_>, namespace: &str) -> Result<Option<(Vec<u8>, i64)>, RulerError> {
        match &self.shelf {
            Shelf::Dir(dir) => match std::fs::read(Self::path(&Self::dir_of(dir, owner), namespace)) {
                Ok(b) => Ok(Some((b, 0))),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(e.into()),
            },
            Shelf::ClickHouse(ch) => {
                Ok(ch.rule_namespace(&Self::row_key(owner, namespace))?.map(|n| (n.text.into_bytes(), n.version)))
            }
        }
    }

    /// Every namespace's text of every tenant, by owner and name.
    fn every_text(&self) -> Result<BTreeMap<Key, Vec<u8>>, RulerError> {
        let dir = match &self.shelf {
            Shelf::Dir(dir) => dir,
            Shelf::ClickHouse(ch) => return Ok(Self::of_rows(ch.rule_namespaces()?)),
        };
        let mut out = BTreeMap::new();
        self.add_texts_in(dir, None, &mut out)?;
        let tenants = match std::fs::read_dir(dir.join("tenants")) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
            Err(e) => return Err(e.into()),
        };
        for entry in tenants {
            let name = entry?.file_name();
            let Some(tenant) = name.to_str().and_then(|t| TenantId::parse(t).ok()) else { continue };
            self.add_texts_in(dir, Some(&tenant), &mut out)?;
        }
        Ok(out)
    }

    /// Adds the texts of `owner`'s namespace files under `dir` to `out`.
    fn add_texts_in(&self, dir: &Path, owner: Owner<'_>, out: &mut BTreeMap<Key, Vec<u8>>) -> Result<(), RulerError> {
        for (key_owner, namespace) in Self::names_in(dir, owner)? {
            if let Some((text, _)) = self.read(owner, &namespace)? {
                out.insert((key_owner, namespace), text);
            }
        }
        Ok(())
    }

    /// The namespaces of `owner` kept as files under `dir`.
    fn names_in(dir: &Path, owner: Owner<'_>) -> Result<Vec<Key>, RulerError> {
        let entries = match std::fs::read_dir(Self::dir_of(dir, owner)) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e.into()),
        };
        let mut out = Vec::new();
        for entry in entries {
            let name = entry?.file_name();
            if let Some(namespace) = name.to_str().and_then(Self::namespace_of) {
                out.push((owner.filter(|t| !t.is_default()).cloned(), namespace));
            }
        }
        Ok(out)
    }

    /// `owner`'s namespaces' texts, by name.
    fn texts(&self, owner: Owner<'_>) -> Result<BTreeMap<String, Vec<u8>>, RulerError> {
        let owner = owner.filter(|t| !t.is_default());
        let all = match &self.shelf {
            Shelf::Dir(dir) => {
                let mut out = BTreeMap::new();
                self.add_texts_in(dir, owner, &mut out)?;
                out
            }
            Shelf::ClickHouse(ch) => {
                let prefix = owner.map(|t| Self::row_key(Some(t), ""));
                Self::of_rows(ch.rule_namespaces_of(prefix.as_deref())?)
            }
        };
        Ok(all
            .into_iter()
            .filter(|((o, _), _)| o.as_ref() == owner)
            .map(|((_, namespace), text)| (namespace, text))
            .collect())
    }

    /// The groups of `namespace` as YAML values, in order (empty when it does not exist), and
    /// the version read.
    fn groups_of(&self, owner: Owner<'_>, namespace: &str) -> Result<(Vec<Value>, i64), RulerError> {
        match self.read(owner, namespace)? {
            Some((text, version)) => Ok((groups_in(&text)?, version)),
            None => Ok((Vec::new(), 0)),
        }
    }

    /// Every namespace of `owner` with its groups.
    ///
    /// # Errors
    /// [`RulerError::Io`] or [`RulerError::Storage`] when the namespaces cannot be read.
    pub fn all(&self, owner: Owner<'_>) -> Result<BTreeMap<String, Vec<Value>>, RulerError> {
        let mut out = BTreeMap::new();
        for (namespace, text) in self.texts(owner)? {
            let groups = groups_in(&text)?;
            if !groups.is_empty() {
                out.insert(namespace, groups);
            }
        }
        Ok(out)
    }

    /// A digest of every namespace of every tenant as stored: equal digests, equal namespaces
    /// (what the evaluator compares to see other nodes' changes).
    ///
    /// # Errors
    /// As [`RulerStore::all`].
    pub fn digest(&self) -> Result<u64, RulerError> {
        let mut bytes = Vec::new();
        for ((owner, namespace), text) in self.every_text()? {
            let owner = owner.as_ref().map_or("", TenantId::as_str);
            for part in [owner.as_bytes(), namespace.as_bytes(), &text] {
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
    pub fn namespace(&self, owner: Owner<'_>, namespace: &str) -> Result<Vec<Value>, RulerError> {
        let (groups, _) = self.groups_of(owner, namespace)?;
        if groups.is_empty() {
            return Err(RulerError::NotFound(NAMESPACE_NOT_FOUND));
        }
        Ok(groups)
    }

    /// One group.
    ///
    /// # Errors
    /// [`RulerError::NotFound`] when it does not exist.
    pub fn group(&self, owner: Owner<'_>, namespace: &str, group: &str) -> Result<Value, RulerError> {
        self.groups_of(owner, namespace)?
            .0
            .into_iter()
            .find(|g| name_of(g) == Some(group))
            .ok_or(RulerError::NotFound(GROUP_NOT_FOUND))
    }

    /// Sets a group from its YAML (replacing the group of its name, or appended).
    ///
    /// # Errors
    /// [`RulerError::Invalid`] when the body is no valid group; nothing changes then.
    pub fn set(&self, owner: Owner<'_>, namespace: &str, body: &[u8]) -> Result<(), RulerError> {
        let mut group: Value = serde_norway::from_slice(body).map_err(|e| RulerError::Invalid(e.to_string()))?;
        // Merge keys (`<<: *anchor`) are resolved here: the stored file has no anchors left.
        group.apply_merge().map_err(|e| RulerError::Invalid(e.to_string()))?;
        let Some(name) = name_of(&group).map(str::to_owned) else {
            return Err(RulerError::Invalid("a rule group needs a name".to_owned()));
        };
        if namespace.is_empty() {
            return Err(RulerError::Invalid("the namespace must not be empty".to_owned()));
        }
        if namespace.contains('\0') {
            return Err(RulerError::Invalid("the namespace must not hold the byte 0x00".to_owned()));
        }
        if owner.is_some() && group_sets_tenant_label(&group) {
            return Err(RulerError::Invalid(format!(
                "the group {name:?} sets the label {}, which saltdb reserves for tenants: a tenant's rules write into their tenant",
                crate::tenant::TENANT_LABEL
            )));
        }
        let _held = self.lock.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (mut groups, version) = self.groups_of(owner, namespace)?;
        match groups.iter_mut().find(|g| name_of(g) == Some(name.as_str())) {
            Some(g) => *g = group,
            None => groups.push(group),
        }
        self.write(owner, namespace, groups, version)
    }

    /// Deletes one group.
    ///
    /// # Errors
    /// [`RulerError::NotFound`] when it does not exist.
    pub fn delete_group(&self, owner: Owner<'_>, namespace: &str, group: &str) -> Result<(), RulerError> {
        let _held = self.lock.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (mut groups, version) = self.groups_of(owner, namespace)?;
        let before = groups.len();
        groups.retain(|g| name_of(g) != Some(group));
        if groups.len() == before {
            return Err(RulerError::NotFound(GROUP_NOT_FOUND));
        }
        self.write(owner, namespace, groups, version)
    }

    /// Deletes a namespace with all its groups.
    ///
    /// # Errors
    /// [`RulerError::NotFound`] when it does not exist.
    pub fn delete_namespace(&self, owner: Owner<'_>, namespace: &str) -> Result<(), RulerError> {
        let _held = self.lock.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match &self.shelf {
            Shelf::Dir(dir) => {
                let dir = Self::dir_of(dir, owner);
                match std::fs::remove_file(Self::path(&dir, namespace)) {
                    Ok(()) => Ok(std::fs::File::open(dir)?.sync_all()?),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                        Err(RulerError::NotFound(NAMESPACE_NOT_FOUND))
                    }
                    Err(e) => Err(e.into()),
                }
            }
            Shelf::ClickHouse(ch) => {
                let key = Self::row_key(owner, namespace);
                match ch.rule_namespace(&key)? {
                    Some(stored) => Ok(ch.put_rule_namespace(&key, None, stored.version)?),
                    None => Err(RulerError::NotFound(NAMESPACE_NOT_FOUND)),
                }
            }
        }
    }

    /// Deletes every namespace of `owner` (a tenant deleted); returns how many there were.
    ///
    /// # Errors
    /// [`RulerError::Io`] or [`RulerError::Storage`]; the namespaces deleted before stay deleted.
    pub fn delete_owner(&self, owner: Owner<'_>) -> Result<usize, RulerError> {
        let namespaces: Vec<String> = self.texts(owner)?.into_keys().collect();
        for namespace in &namespaces {
            match self.delete_namespace(owner, namespace) {
                Ok(()) | Err(RulerError::NotFound(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(namespaces.len())
    }

    /// Every tenant's namespaces as rule files (for the evaluator), each with its owner
    /// (`None`: the default tenant's); the groups' `tenant` is left for the caller to set.
    ///
    /// # Errors
    /// Every problem of every namespace.
    pub fn rule_files(&self) -> Result<Vec<(Option<TenantId>, RuleFile)>, Vec<String>> {
        let all = self.every_text().map_err(|e| vec![e.to_string()])?;
        let mut files = Vec::new();
        let mut errors = Vec::new();
        for ((owner, namespace), text) in all {
            let groups = groups_in(&text).map_err(|e| vec![e.to_string()])?;
            if groups.is_empty() {
                continue;
            }
            let text = file_text(groups).map_err(|e| vec![e.to_string()])?;
            match super::parse_file(&namespace, text.as_bytes()) {
                Ok(f) => files.push((owner, f)),
                Err(e) => errors.extend(e.into_iter().map(|e| match &owner {
                    Some(t) => format!("tenant {t}: {e}"),
                    None => e,
                })),
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
    fn write(&self, owner: Owner<'_>, namespace: &str, groups: Vec<Value>, replaced: i64) -> Result<(), RulerError> {
        let text = if groups.is_empty() {
            None
        } else {
            let text = file_text(groups)?;
            super::parse_file(namespace, text.as_bytes()).map_err(|e| RulerError::Invalid(e.join("\n")))?;
            Some(text)
        };
        let dir = match &self.shelf {
            Shelf::Dir(dir) => Self::dir_of(dir, owner),
            Shelf::ClickHouse(ch) => {
                return Ok(ch.put_rule_namespace(&Self::row_key(owner, namespace), text.as_deref(), replaced)?)
            }
        };
        let dir = dir.as_path();
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

/// Whether a group's own labels or any of its rules' labels set the tenant label.
fn group_sets_tenant_label(group: &Value) -> bool {
    let sets =
        |v: Option<&Value>| v.and_then(Value::as_mapping).is_some_and(|m| m.contains_key(crate::tenant::TENANT_LABEL));
    sets(group.get("labels"))
        || group
            .get("rules")
            .and_then(Value::as_sequence)
            .is_some_and(|rules| rules.iter().any(|r| sets(r.get("labels"))))
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
        store.set(None, "team a/x", GROUP.as_bytes()).unwrap();
        store.set(None, "team a/x", GROUP.replace("g1", "g2").as_bytes()).unwrap();
        store.set(None, "team a/x", GROUP.replace("job:up:sum", "job:up:total").as_bytes()).unwrap();
        let groups = store.namespace(None, "team a/x").unwrap();
        assert_eq!(groups.iter().map(|g| name_of(g).unwrap()).collect::<Vec<_>>(), ["g1", "g2"]);
        let g1 = yaml(&store.group(None, "team a/x", "g1").unwrap()).unwrap();
        assert!(g1.contains("job:up:total"), "{g1}");
        assert_eq!(store.all(None).unwrap().keys().collect::<Vec<_>>(), ["team a/x"]);
        let files = store.rule_files().unwrap();
        assert_eq!(files[0].1.groups.len(), 2);
        assert_eq!(files[0].1.groups[0].file, "team a/x");
    }

    #[test]
    fn missing_groups_and_namespaces_say_so_as_mimir_does() {
        let dir = tempfile::tempdir().unwrap();
        let store = RulerStore::new(dir.path().join("api"));
        assert!(matches!(store.group(None, "n", "g"), Err(RulerError::NotFound(GROUP_NOT_FOUND))));
        assert!(matches!(store.namespace(None, "n"), Err(RulerError::NotFound(NAMESPACE_NOT_FOUND))));
        assert!(matches!(store.delete_namespace(None, "n"), Err(RulerError::NotFound(NAMESPACE_NOT_FOUND))));
        store.set(None, "n", GROUP.as_bytes()).unwrap();
        store.delete_group(None, "n", "g1").unwrap();
        assert!(store.all(None).unwrap().is_empty());
    }

    #[test]
    fn the_digest_follows_the_namespaces_and_left_files_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let store = RulerStore::new(dir.path().join("api"));
        let empty = store.digest().unwrap();
        store.set(None, "n", GROUP.as_bytes()).unwrap();
        let one = store.digest().unwrap();
        assert_ne!(one, empty);
        store.set(None, "n", GROUP.as_bytes()).unwrap();
        assert_eq!(store.digest().unwrap(), one, "the same group again changes nothing");
        store.set(None, "n", GROUP.replace("job:up:sum", "job:up:total").as_bytes()).unwrap();
        assert_ne!(store.digest().unwrap(), one);
        store.delete_namespace(None, "n").unwrap();
        assert_eq!(store.digest().unwrap(), empty);
        store.set(None, "team a/x", GROUP.as_bytes()).unwrap();
        assert_eq!(namespaces_left_in(&dir.path().join("api")), ["team a/x"]);
        assert!(namespaces_left_in(&dir.path().join("none")).is_empty());
        assert!(!store.is_shared());
    }

    #[test]
    fn a_bad_group_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let store = RulerStore::new(dir.path().join("api"));
        store.set(None, "n", GROUP.as_bytes()).unwrap();
        assert!(matches!(store.set(None, "n", b"name: g1\nrules:\n  - record: x\n"), Err(RulerError::Invalid(_))));
        assert!(matches!(store.set(None, "n", b"rules: []\n"), Err(RulerError::Invalid(_))));
        assert!(matches!(store.set(None, "n", b"{not yaml"), Err(RulerError::Invalid(_))));
        assert!(yaml(&store.group(None, "n", "g1").unwrap()).unwrap().contains("job:up:sum"));
    }

    #[test]
    fn each_tenant_has_its_own_namespaces() {
        let dir = tempfile::tempdir().unwrap();
        let store = RulerStore::new(dir.path().join("api"));
        let (a, b) = (TenantId::parse("a").unwrap(), TenantId::parse("b").unwrap());
        let default = TenantId::default_tenant();
        store.set(None, "ns", GROUP.as_bytes()).unwrap();
        store.set(Some(&a), "ns", GROUP.replace("job:up:sum", "a:up:sum").as_bytes()).unwrap();
        let before_b = store.digest().unwrap();
        store.set(Some(&b), "other", GROUP.as_bytes()).unwrap();
        assert_ne!(store.digest().unwrap(), before_b, "the digest covers every tenant");
        assert!(yaml(&store.group(Some(&a), "ns", "g1").unwrap()).unwrap().contains("a:up:sum"));
        assert!(yaml(&store.group(None, "ns", "g1").unwrap()).unwrap().contains("job:up:sum"));
        assert!(yaml(&store.group(Some(&default), "ns", "g1").unwrap()).unwrap().contains("job:up:sum"));
        assert!(matches!(store.group(Some(&b), "ns", "g1"), Err(RulerError::NotFound(_))));
        assert_eq!(store.all(Some(&b)).unwrap().keys().collect::<Vec<_>>(), ["other"]);
        assert_eq!(store.all(None).unwrap().keys().collect::<Vec<_>>(), ["ns"]);
        let files = store.rule_files().unwrap();
        let owners: Vec<_> = files.iter().map(|(o, f)| (o.as_ref().map(TenantId::as_str), f.path.as_str())).collect();
        assert_eq!(owners, [(None, "ns"), (Some("a"), "ns"), (Some("b"), "other")]);
        store.delete_namespace(Some(&a), "ns").unwrap();
        assert!(store.group(None, "ns", "g1").is_ok(), "another tenant's namespace of the same name stays");
        store.set(Some(&b), "more", GROUP.as_bytes()).unwrap();
        assert_eq!(store.delete_owner(Some(&b)).unwrap(), 2);
        assert!(store.all(Some(&b)).unwrap().is_empty());
        assert_eq!(store.all(None).unwrap().len(), 1, "the default tenant's stay");
        let refused = store.set(
            Some(&a),
            "ns",
            b"name: g\nrules:\n  - record: x\n    expr: up\n    labels:\n      __tenant__: b\n",
        );
        assert!(matches!(refused, Err(RulerError::Invalid(ref m)) if m.contains("__tenant__")), "{refused:?}");
        assert!(matches!(store.set(None, "n\0s", GROUP.as_bytes()), Err(RulerError::Invalid(_))));
    }

    #[test]
    fn clickhouse_keys_keep_the_owner() {
        let a = TenantId::parse("a").unwrap();
        assert_eq!(RulerStore::row_key(None, "team a/x"), "team a/x");
        assert_eq!(RulerStore::row_key(Some(&TenantId::default_tenant()), "n"), "n");
        let key = RulerStore::row_key(Some(&a), "team a/x");
        assert_eq!(RulerStore::of_row_key(key), Some((Some(a), "team a/x".to_owned())));
        assert_eq!(RulerStore::of_row_key("n".to_owned()), Some((None, "n".to_owned())));
        assert_eq!(RulerStore::of_row_key("\0../x".to_owned()), None);
    }
}
