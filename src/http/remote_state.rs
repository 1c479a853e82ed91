//! What the remote protocols keep between requests ([`RemoteState`], part of
//! [`AppState`](super::state::AppState)), and the remote-write decoder's limits derived from the
//! server's.

use super::limits::Limits;
use crate::remote::decode::DecodeLimits;
use crate::remote::known_labels::KnownLabels;
use std::collections::BTreeMap;
use std::sync::Arc;

use crate::remote::metadata::{MetadataEntry, MetadataStore};
use crate::tenant::Scope;

/// State of the remote protocols, part of [`AppState`](super::state::AppState).
pub struct RemoteState {
    /// Metric metadata received through remote-write, per tenant.
    pub metadata: TenantMetadata,
    /// Label sets of remote-write 1.0 series seen before, by their wire bytes.
    pub known_labels: KnownLabels,
}

impl RemoteState {
    /// Empty state for a server with `limits`.
    pub fn new(limits: &Limits) -> Self {
        Self {
            metadata: TenantMetadata::default(),
            known_labels: KnownLabels::new(limits.label_cache_bytes, &decode_limits(limits)),
        }
    }
}

/// Metric metadata per tenant: a tenant sees only what it sent.
#[derive(Default)]
pub struct TenantMetadata {
    stores: std::sync::RwLock<std::collections::HashMap<String, Arc<MetadataStore>>>,
}

impl TenantMetadata {
    /// The store of the tenant a write goes to (`default` when tenants are off).
    pub fn of(&self, tenant: &str) -> Arc<MetadataStore> {
        if let Some(s) = self.stores.read().unwrap_or_else(|e| e.into_inner()).get(tenant) {
            return Arc::clone(s);
        }
        let mut stores = self.stores.write().unwrap_or_else(|e| e.into_inner());
        Arc::clone(stores.entry(tenant.to_owned()).or_default())
    }

    /// `/api/v1/metadata` for `scope`: its tenant's entries, or the union of several tenants'.
    pub fn query(
        &self,
        scope: &Scope,
        metric: Option<&str>,
        limit: Option<usize>,
        limit_per_metric: Option<usize>,
    ) -> BTreeMap<String, Vec<MetadataEntry>> {
        let names: Vec<String> = match scope {
            Scope::Many(ids) => ids.iter().map(|t| t.as_str().to_owned()).collect(),
            _ => vec![scope.name().into_owned()],
        };
        let stores = self.stores.read().unwrap_or_else(|e| e.into_inner());
        let mut out: BTreeMap<String, Vec<MetadataEntry>> = BTreeMap::new();
        for store in names.iter().filter_map(|n| stores.get(n)) {
            for (metric, entries) in store.query(metric, None, None) {
                let all = out.entry(metric).or_default();
                for e in entries {
                    if !all.contains(&e) {
                        all.push(e);
                    }
                }
            }
        }
        let per = limit_per_metric.unwrap_or(usize::MAX);
        out.into_iter()
            .take(limit.unwrap_or(usize::MAX))
            .map(|(m, mut e)| {
                e.truncate(per);
                (m, e)
            })
            .collect()
    }

    /// Metric families known, over every tenant.
    pub fn len(&self) -> usize {
        self.stores.read().unwrap_or_else(|e| e.into_inner()).values().map(|s| s.len()).sum()
    }

    /// Whether no metadata was received.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The decoder's limits from the server's.
pub(crate) fn decode_limits(limits: &Limits) -> DecodeLimits {
    DecodeLimits {
        max_decoded_bytes: limits.max_request_bytes,
        max_labels: limits.series.max_labels,
        max_label_len: limits.series.max_label_bytes,
        max_series: limits.series.max_series,
    }
}
