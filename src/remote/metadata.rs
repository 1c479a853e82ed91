//! Metric metadata (TYPE, HELP, UNIT) received through remote-write, kept in memory and served
//! by `GET /api/v1/metadata`. Like Prometheus, saltdb does not persist metadata: senders resend it
//! periodically (Prometheus every minute by default).

use crate::remote::proto::MetricType;
use std::collections::BTreeMap;
use std::sync::RwLock;

/// Metadata of one metric family as a sender reported it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetricMetadata {
    /// Metric family name.
    pub metric: String,
    /// Metric type.
    pub kind: MetricType,
    /// HELP text.
    pub help: String,
    /// UNIT, often empty.
    pub unit: String,
}

/// One distinct (type, help, unit) entry of a metric family.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetadataEntry {
    /// Metric type.
    pub kind: MetricType,
    /// HELP text.
    pub help: String,
    /// UNIT.
    pub unit: String,
}

/// Bounded in-memory metadata store, safe to share between request handlers.
#[derive(Debug)]
pub struct MetadataStore {
    /// Metric family -> distinct entries, oldest first. Must hold at most `max_metrics` keys, at
    /// most [`MAX_ENTRIES_PER_METRIC`] entries per key and at most [`MAX_TEXT_BYTES`] bytes of
    /// names and texts in all.
    families: RwLock<Families>,
    max_metrics: usize,
}

#[derive(Debug, Default)]
struct Families {
    map: BTreeMap<String, Vec<MetadataEntry>>,
    /// Bytes of family names, HELP and UNIT texts held.
    bytes: usize,
}

/// Distinct entries kept per metric family (different targets may disagree on HELP).
pub const MAX_ENTRIES_PER_METRIC: usize = 8;

/// Longest HELP kept (longer texts are cut at a character boundary); UNIT and family names
/// longer than this are ignored.
pub const MAX_HELP_BYTES: usize = 1024;

/// Bytes of names and texts the whole store may hold; new families and entries beyond it are
/// ignored (existing entries are kept), so a sender cannot grow memory without bound.
pub const MAX_TEXT_BYTES: usize = 32 << 20;

impl Default for MetadataStore {
    fn default() -> Self {
        Self::new(100_000)
    }
}

impl MetadataStore {
    /// A store holding at most `max_metrics` metric families; new families beyond that are
    /// ignored (existing ones still update).
    pub fn new(max_metrics: usize) -> Self {
        Self { families: RwLock::new(Families::default()), max_metrics }
    }

    /// Records metadata, keeping entries distinct per family.
    pub fn record(&self, items: Vec<MetricMetadata>) {
        if items.is_empty() {
            return;
        }
        let mut guard = self.families.write().unwrap_or_else(|e| e.into_inner());
        let families = &mut *guard;
        for m in items {
            if m.metric.len() > MAX_HELP_BYTES || m.unit.len() > MAX_HELP_BYTES {
                continue;
            }
            let mut help = m.help;
            help.truncate(crate::excerpt::cut(&help, MAX_HELP_BYTES).len());
            let entry = MetadataEntry { kind: m.kind, help, unit: m.unit };
            let entry_bytes = entry.help.len() + entry.unit.len();
            let full = families.map.len() >= self.max_metrics;
            let new_family = !families.map.contains_key(&m.metric);
            let needed = entry_bytes + if new_family { m.metric.len() } else { 0 };
            if (new_family && full) || families.bytes + needed > MAX_TEXT_BYTES {
                continue;
            }
            let entries = families.map.entry(m.metric).or_default();
            if entries.contains(&entry) {
                continue;
            }
            let mut freed = 0;
            if entries.len() >= MAX_ENTRIES_PER_METRIC {
                let old = entries.remove(0);
                freed = old.help.len() + old.unit.len();
            }
            entries.push(entry);
            families.bytes = families.bytes + needed - freed;
        }
    }

    /// Metadata by family name, as `/api/v1/metadata` returns it: optionally one `metric`, at
    /// most `limit` families and `limit_per_metric` entries each.
    pub fn query(
        &self,
        metric: Option<&str>,
        limit: Option<usize>,
        limit_per_metric: Option<usize>,
    ) -> BTreeMap<String, Vec<MetadataEntry>> {
        let families = self.families.read().unwrap_or_else(|e| e.into_inner());
        families
            .map
            .iter()
            .filter(|(name, _)| metric.is_none_or(|m| m == name.as_str()))
            .take(limit.unwrap_or(usize::MAX))
            .map(|(name, entries)| {
                let n = limit_per_metric.unwrap_or(usize::MAX);
                (name.clone(), entries.iter().take(n).cloned().collect())
            })
            .collect()
    }

    /// Number of metric families known.
    pub fn len(&self) -> usize {
        self.families.read().unwrap_or_else(|e| e.into_inner()).map.len()
    }

    /// True when no metadata was received yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn texts_are_capped_and_the_store_has_a_byte_budget() {
        use super::*;
        let store = MetadataStore::new(usize::MAX);
        let m = |name: String, help: String| MetricMetadata {
            metric: name,
            kind: MetricType::Gauge,
            help,
            unit: String::new(),
        };
        store.record(vec![m("long_help".into(), "é".repeat(MAX_HELP_BYTES))]);
        let got = store.query(Some("long_help"), None, None);
        let help = &got["long_help"][0].help;
        assert!(help.len() <= MAX_HELP_BYTES && help.chars().all(|c| c == 'é'), "cut at a char boundary");
        store.record(vec![m("n".repeat(MAX_HELP_BYTES + 1), "x".into())]);
        assert_eq!(store.len(), 1, "over-long family names are ignored");
        // Fill the budget: new families stop being added, nothing panics, memory stays bounded.
        let batch: Vec<_> = (0..MAX_TEXT_BYTES / 990 + 100).map(|i| m(format!("f{i}"), "h".repeat(990))).collect();
        store.record(batch);
        let held = store.families.read().unwrap().bytes;
        assert!(held <= MAX_TEXT_BYTES, "{held}");
        assert!(store.len() < MAX_TEXT_BYTES / 990 + 100);
    }

    use super::*;

    fn md(metric: &str, help: &str) -> MetricMetadata {
        MetricMetadata { metric: metric.into(), kind: MetricType::Counter, help: help.into(), unit: String::new() }
    }

    #[test]
    fn keeps_distinct_entries_and_bounds() {
        let s = MetadataStore::new(2);
        s.record(vec![md("a", "x"), md("a", "x"), md("a", "y"), md("b", "z"), md("c", "w")]);
        let all = s.query(None, None, None);
        assert_eq!(all.len(), 2, "third family is over the limit");
        assert_eq!(all.get("a").map(Vec::len), Some(2));
        assert_eq!(s.query(Some("b"), None, None).len(), 1);
        assert_eq!(s.query(None, Some(1), None).len(), 1);
        assert_eq!(s.query(Some("a"), None, Some(1)).get("a").map(Vec::len), Some(1));
    }
}
