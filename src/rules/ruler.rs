//! Rule groups managed through the ruler API (Mimir's and Cortex's
//! `/prometheus/config/v1/rules`), kept in the data directory beside the `--rule-file` groups,
//! which stay read-only.
//!
//! A namespace is a file, `<data-dir>/rules/api/<namespace, hex>.yml`, in Prometheus' rule file
//! format (so `saltdb check rules` and `promtool check rules` read it); a group set through the
//! API replaces the group of the same name in its namespace, or is appended. Each change is
//! validated as a whole file first (a bad group is refused and changes nothing), then written
//! atomically (written beside, synced, renamed, directory synced). Groups of a namespace carry
//! the namespace as their `file`, as Mimir shows them.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Mutex;

use serde_norway::{Mapping, Value};

use super::file::RuleFile;

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
}

/// Mimir's message for a missing group.
pub const GROUP_NOT_FOUND: &str = "group does not exist";
/// Mimir's message for a missing namespace.
pub const NAMESPACE_NOT_FOUND: &str = "no rule groups found";

/// The namespaces of API-managed groups.
#[derive(Debug)]
pub struct RulerStore {
    dir: PathBuf,
    /// Serialises read-modify-write of namespace files.
    lock: Mutex<()>,
}

impl RulerStore {
    /// The store in `dir` (created on the first write).
    pub fn new(dir: PathBuf) -> Self {
        Self { dir, lock: Mutex::new(()) }
    }

    fn path(&self, namespace: &str) -> PathBuf {
        let hex: String = namespace.bytes().map(|b| format!("{b:02x}")).collect();
        self.dir.join(format!("{hex}.yml"))
    }

    fn namespace_of(file_name: &str) -> Option<String> {
        let hex = file_name.strip_suffix(".yml")?;
        let bytes: Option<Vec<u8>> =
            (0..hex.len()).step_by(2).map(|i| hex.get(i..i + 2).and_then(|h| u8::from_str_radix(h, 16).ok())).collect();
        String::from_utf8(bytes?).ok()
    }

    /// The groups of `namespace` as YAML values, in order (empty when it does not exist).
    fn groups_of(&self, namespace: &str) -> Result<Vec<Value>, RulerError> {
        let bytes = match std::fs::read(self.path(namespace)) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e.into()),
        };
        let file: Value = serde_norway::from_slice(&bytes).map_err(|e| RulerError::Invalid(e.to_string()))?;
        Ok(match file.get("groups") {
            Some(Value::Sequence(groups)) => groups.clone(),
            _ => Vec::new(),
        })
    }

    /// Every namespace with its groups.
    ///
    /// # Errors
    /// [`RulerError::Io`] when the directory cannot be read.
    pub fn all(&self) -> Result<BTreeMap<String, Vec<Value>>, RulerError> {
        let mut out = BTreeMap::new();
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
            Err(e) => return Err(e.into()),
        };
        for entry in entries {
            let name = entry?.file_name();
            let Some(namespace) = name.to_str().and_then(Self::namespace_of) else { continue };
            let groups = self.groups_of(&namespace)?;
            if !groups.is_empty() {
                out.insert(namespace, groups);
            }
        }
        Ok(out)
    }

    /// The groups of one namespace.
    ///
    /// # Errors
    /// [`RulerError::NotFound`] when it has none.
    pub fn namespace(&self, namespace: &str) -> Result<Vec<Value>, RulerError> {
        let groups = self.groups_of(namespace)?;
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
        let mut groups = self.groups_of(namespace)?;
        match groups.iter_mut().find(|g| name_of(g) == Some(name.as_str())) {
            Some(g) => *g = group,
            None => groups.push(group),
        }
        self.write(namespace, groups)
    }

    /// Deletes one group.
    ///
    /// # Errors
    /// [`RulerError::NotFound`] when it does not exist.
    pub fn delete_group(&self, namespace: &str, group: &str) -> Result<(), RulerError> {
        let _held = self.lock.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut groups = self.groups_of(namespace)?;
        let before = groups.len();
        groups.retain(|g| name_of(g) != Some(group));
        if groups.len() == before {
            return Err(RulerError::NotFound(GROUP_NOT_FOUND));
        }
        self.write(namespace, groups)
    }

    /// Deletes a namespace with all its groups.
    ///
    /// # Errors
    /// [`RulerError::NotFound`] when it does not exist.
    pub fn delete_namespace(&self, namespace: &str) -> Result<(), RulerError> {
        let _held = self.lock.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match std::fs::remove_file(self.path(namespace)) {
            Ok(()) => Ok(std::fs::File::open(&self.dir)?.sync_all()?),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(RulerError::NotFound(NAMESPACE_NOT_FOUND)),
            Err(e) => Err(e.into()),
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
    /// empty).
    fn write(&self, namespace: &str, groups: Vec<Value>) -> Result<(), RulerError> {
        let path = self.path(namespace);
        if groups.is_empty() {
            std::fs::remove_file(&path)?;
            return Ok(std::fs::File::open(&self.dir)?.sync_all()?);
        }
        let text = file_text(groups)?;
        super::parse_file(namespace, text.as_bytes()).map_err(|e| RulerError::Invalid(e.join("\n")))?;
        std::fs::create_dir_all(&self.dir)?;
        let temp = path.with_extension("yml.tmp");
        let mut f = std::fs::File::create(&temp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        drop(f);
        std::fs::rename(&temp, &path)?;
        Ok(std::fs::File::open(&self.dir)?.sync_all()?)
    }
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
