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
    /// Metric family -> distinct entries, oldest first. Must hold at most `max_metrics` keys and
    /// at most [`MAX_ENTRIES_PER_METRIC`] entries per key.
    families: RwLock<BTreeMap<String, Vec<MetadataEntry>>>,
    max_metrics: usize,
}

/// Distinct entries kept per metric family (different targets may disagree on HELP).
pub const MAX_ENTRIES_PER_METRIC: usize = 8;

impl Default for MetadataStore {
    fn default() -> Self {
        Self::new(100_000)
    }
}

impl MetadataStore {
    /// A store holding at most `max_metrics` metric families; new families beyond that are
    /// ignored (existing ones still update).
    pub fn new(max_metrics: usize) -> Self {
        Self { families: RwLock::new(BTreeMap::new()), max_metrics }
    }

    /// Records metadata, keeping entries distinct per family.
    pub fn record(&self, items: Vec<MetricMetadata>) {
        if items.is_empty() {
            return;
        }
        let mut families = self.families.write().unwrap_or_else(|e| e.into_inner());
        for m in items {
            let entry = MetadataEntry { kind: m.kind, help: m.help, unit: m.unit };
            let full = families.len() >= self.max_metrics;
            let entries = match families.get_mut(&m.metric) {
                Some(e) => e,
                None if full => continue,
                None => families.entry(m.metric).or_default(),
            };
            if entries.contains(&entry) {
                continue;
            }
            if entries.len() >= MAX_ENTRIES_PER_METRIC {
                entries.remove(0);
            }
            entries.push(entry);
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
        self.families.read().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// True when no metadata was received yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
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
