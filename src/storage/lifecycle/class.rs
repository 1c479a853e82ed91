//! Retention classes (`--retention-rule '{team="batch"}:7d'`): the series a rule matches keep
//! their own windows, dropped at the rule's retention, so dropping data stays dropping whole
//! keyspaces. The first rule a series matches decides its class; a series matching none is in
//! the default class (retention `--retention`), whose keyspaces and manifest keys keep the names
//! they had before classes existed.
//!
//! A class is named by its retention (`r604800000` for 7 days), in the names of its keyspaces and
//! manifest keys (see `docs/format.md`): a class that no rule names any more is still found at
//! start-up, read, and dropped at the retention its name says.
//!
//! Pure: rules, the class table and names; which class a series is in is decided once per
//! process per series ([`SeriesClasses`]) and kept in memory only.

use std::sync::RwLock;

use crate::labels::Labels;
use crate::matcher::Matcher;
use crate::storage::error::Result;
use crate::storage::series_id::{IdMap, SeriesId};

/// A class's index in the [`ClassTable`]; [`DEFAULT_CLASS`] is the default class.
pub type ClassId = u8;

/// The class of series no rule matches.
pub const DEFAULT_CLASS: ClassId = 0;

/// Classes one database can hold (the default class included).
pub const MAX_CLASSES: usize = 128;

/// `--retention-rule`: series matching every matcher are kept `retention_ms`.
#[derive(Clone, Debug)]
pub struct RetentionRule {
    /// The selector, as written (for messages and status pages).
    pub selector: String,
    /// Its matchers, one list per `or` alternative; a series matches when every matcher of
    /// some list does.
    pub matchers: Vec<Vec<Matcher>>,
    /// How long the series it matches are kept; positive.
    pub retention_ms: i64,
}

impl RetentionRule {
    /// Whether `labels` match every matcher of some alternative (a missing label matches as the
    /// empty value, as in PromQL).
    pub fn matches(&self, labels: &Labels) -> bool {
        self.matchers.iter().any(|group| group.iter().all(|m| m.matches(labels.get(&m.name).unwrap_or(""))))
    }
}

/// One retention class.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Class {
    /// The retention its name carries; `None` for the default class, which follows `--retention`.
    pub named_ms: Option<i64>,
    /// How long its windows are kept (`None`: forever).
    pub retention_ms: Option<i64>,
}

impl Class {
    /// The name part of its keyspaces and manifest keys (`r<ms>`); `None` for the default class.
    pub fn tag(&self) -> Option<String> {
        self.named_ms.map(|ms| format!("r{ms}"))
    }
}

/// The classes of a database: the default one first, then those the rules name (in the order of
/// the rules), then those found on disk that no rule names any more.
#[derive(Clone, Debug)]
pub struct ClassTable {
    classes: Vec<Class>,
}

impl ClassTable {
    /// The default class (kept `default_retention_ms`; `None` forever) and one class per
    /// distinct retention of `rules` other than the default one.
    pub fn new(default_retention_ms: Option<i64>, rules: &[RetentionRule]) -> Self {
        let mut table = Self { classes: vec![Class { named_ms: None, retention_ms: default_retention_ms }] };
        for r in rules {
            table.class_of_retention(r.retention_ms);
        }
        table
    }

    /// Adds a class for each retention of `rules` the table lacks (rules changed while the
    /// database is open, see [`crate::storage::Storage::set_retention_rules`]).
    pub fn add_rules(&mut self, rules: &[RetentionRule]) {
        for r in rules {
            self.class_of_retention(r.retention_ms);
        }
    }

    /// The class kept `retention_ms`, added when missing (the default class when that is the
    /// default retention and no class is named by it).
    fn class_of_retention(&mut self, retention_ms: i64) -> ClassId {
        if let Some(i) = self.classes.iter().position(|c| c.named_ms == Some(retention_ms)) {
            return ClassId::try_from(i).unwrap_or(DEFAULT_CLASS);
        }
        if self.classes.first().is_some_and(|d| d.retention_ms == Some(retention_ms)) {
            return DEFAULT_CLASS;
        }
        self.add(retention_ms)
    }

    /// Adds the class named by `named_ms` (found on disk), returning its id; the default class
    /// once [`MAX_CLASSES`] exist (checked before: see [`check_rules`]).
    pub fn add(&mut self, named_ms: i64) -> ClassId {
        if let Some(i) = self.classes.iter().position(|c| c.named_ms == Some(named_ms)) {
            return ClassId::try_from(i).unwrap_or(DEFAULT_CLASS);
        }
        let Ok(id) = ClassId::try_from(self.classes.len()) else { return DEFAULT_CLASS };
        if usize::from(id) >= MAX_CLASSES {
            return DEFAULT_CLASS;
        }
        self.classes.push(Class { named_ms: Some(named_ms), retention_ms: Some(named_ms) });
        id
    }

    /// The id of the class a `tag` names; `None` for a tag that is not `r<positive ms>`.
    pub fn find_or_add_tag(&mut self, tag: &str) -> Option<ClassId> {
        let ms: i64 = tag.strip_prefix('r')?.parse().ok().filter(|&ms| ms > 0)?;
        Some(self.add(ms))
    }

    /// Class `id`.
    pub fn get(&self, id: ClassId) -> Option<&Class> {
        self.classes.get(usize::from(id))
    }

    /// Every class, by id.
    pub fn iter(&self) -> impl Iterator<Item = (ClassId, &Class)> {
        self.classes.iter().enumerate().filter_map(|(i, c)| Some((ClassId::try_from(i).ok()?, c)))
    }

    /// The longest retention of any class (`None`: some class keeps forever).
    pub fn longest_retention(&self) -> Option<i64> {
        self.classes.iter().map(|c| c.retention_ms).try_fold(0i64, |acc, r| r.map(|r| acc.max(r)))
    }
}

/// Checks rules before a database opens: at most [`MAX_CLASSES`] - 1 distinct retentions, each
/// positive.
///
/// # Errors
/// A message naming the offending rule.
pub fn check_rules(rules: &[RetentionRule]) -> std::result::Result<(), String> {
    if let Some(r) = rules.iter().find(|r| r.retention_ms <= 0) {
        return Err(format!("retention rule {}: the retention must be positive", r.selector));
    }
    let mut distinct: Vec<i64> = rules.iter().map(|r| r.retention_ms).collect();
    distinct.sort_unstable();
    distinct.dedup();
    if distinct.len() >= MAX_CLASSES {
        return Err(format!("at most {} distinct retentions in retention rules", MAX_CLASSES - 1));
    }
    Ok(())
}

/// Which class each series is in: the first rule it matches, decided once per process per series
/// and remembered. Free (no map) when there are no rules.
pub struct SeriesClasses {
    rules: Vec<(RetentionRule, ClassId)>,
    known: RwLock<IdMap<ClassId>>,
}

impl SeriesClasses {
    /// The classes of `rules` in `table` (which holds a class for each rule's retention).
    pub fn new(rules: &[RetentionRule], table: &ClassTable) -> Self {
        let mut t = table.clone();
        let rules = rules.iter().map(|r| (r.clone(), t.class_of_retention(r.retention_ms))).collect();
        Self { rules, known: RwLock::new(IdMap::default()) }
    }

    /// True when every series is in the default class.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The rules with the class each sends its series to, first match first.
    pub fn rules(&self) -> impl Iterator<Item = (&RetentionRule, ClassId)> {
        self.rules.iter().map(|(r, c)| (r, *c))
    }

    /// The class of a series with `labels`: its first matching rule's, else the default.
    pub fn of_labels(&self, labels: &Labels) -> ClassId {
        self.rules.iter().find(|(r, _)| r.matches(labels)).map_or(DEFAULT_CLASS, |(_, c)| *c)
    }

    /// The class of series `id`: remembered, else decided from its labels (`labels`, called at
    /// most once) and remembered.
    ///
    /// # Errors
    /// What `labels` returns.
    pub fn of(&self, id: SeriesId, labels: impl FnOnce() -> Result<Labels>) -> Result<ClassId> {
        if self.rules.is_empty() {
            return Ok(DEFAULT_CLASS);
        }
        if let Some(&c) = self.known.read().unwrap_or_else(std::sync::PoisonError::into_inner).get(&id) {
            return Ok(c);
        }
        let class = self.of_labels(&labels()?);
        self.known.write().unwrap_or_else(std::sync::PoisonError::into_inner).insert(id, class);
        Ok(class)
    }

    /// Remembers series `id`, whose labels the caller has decoded, as of class `class`.
    pub fn remember(&self, id: SeriesId, class: ClassId) {
        if !self.rules.is_empty() {
            self.known.write().unwrap_or_else(std::sync::PoisonError::into_inner).insert(id, class);
        }
    }

    /// Series whose class is remembered (for `/metrics`-style memory figures).
    pub fn remembered(&self) -> usize {
        self.known.read().unwrap_or_else(std::sync::PoisonError::into_inner).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matcher::MatchOp;

    fn rule(name: &str, value: &str, retention_ms: i64) -> RetentionRule {
        RetentionRule {
            selector: format!("{{{name}=\"{value}\"}}"),
            matchers: vec![vec![
                Matcher::new(MatchOp::Equal, name, value).unwrap_or_else(|_| Matcher::equal(name, value))
            ]],
            retention_ms,
        }
    }

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        Labels::from_pairs(pairs.iter().copied()).unwrap_or_else(|_| Labels::empty())
    }

    #[test]
    fn first_matching_rule_wins_and_equal_retentions_share_a_class() {
        let day = 86_400_000;
        let rules = [rule("team", "batch", 7 * day), rule("env", "dev", 3 * day), rule("team", "ml", 7 * day)];
        let table = ClassTable::new(Some(30 * day), &rules);
        assert_eq!(table.iter().count(), 3);
        let classes = SeriesClasses::new(&rules, &table);
        let batch_dev = labels(&[("__name__", "x"), ("team", "batch"), ("env", "dev")]);
        let dev = labels(&[("__name__", "x"), ("env", "dev")]);
        let ml = labels(&[("__name__", "x"), ("team", "ml")]);
        let other = labels(&[("__name__", "x"), ("team", "web")]);
        assert_eq!(classes.of_labels(&batch_dev), 1);
        assert_eq!(classes.of_labels(&dev), 2);
        assert_eq!(classes.of_labels(&ml), 1);
        assert_eq!(classes.of_labels(&other), DEFAULT_CLASS);
        assert_eq!(table.get(1).and_then(Class::tag).as_deref(), Some("r604800000"));
        assert_eq!(table.longest_retention(), Some(30 * day));
    }

    #[test]
    fn a_rule_of_the_default_retention_is_the_default_class() {
        let rules = [rule("team", "batch", 1000)];
        let table = ClassTable::new(Some(1000), &rules);
        assert_eq!(table.iter().count(), 1);
        assert_eq!(SeriesClasses::new(&rules, &table).of_labels(&labels(&[("team", "batch")])), DEFAULT_CLASS);
        assert_eq!(ClassTable::new(None, &rules).longest_retention(), None);
    }

    #[test]
    fn tags_found_on_disk_become_classes() {
        let mut table = ClassTable::new(Some(1000), &[]);
        assert_eq!(table.find_or_add_tag("r5000"), Some(1));
        assert_eq!(table.find_or_add_tag("r5000"), Some(1));
        assert_eq!(table.find_or_add_tag("r0"), None);
        assert_eq!(table.find_or_add_tag("x5"), None);
        assert_eq!(table.get(1).and_then(|c| c.retention_ms), Some(5000));
    }

    #[test]
    fn too_many_retentions_are_refused() {
        let rules: Vec<_> = (1..=MAX_CLASSES as i64).map(|i| rule("a", "b", i)).collect();
        assert!(check_rules(&rules).is_err());
        assert!(check_rules(rules.get(..10).unwrap_or_default()).is_ok());
        assert!(check_rules(&[rule("a", "b", 0)]).is_err());
    }
}
