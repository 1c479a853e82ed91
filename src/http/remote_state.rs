//! What the remote protocols keep between requests ([`RemoteState`], part of
//! [`AppState`](super::state::AppState)), and the remote-write decoder's limits derived from the
//! server's.

use super::limits::Limits;
use crate::remote::decode::DecodeLimits;
use crate::remote::known_labels::KnownLabels;
use crate::remote::metadata::MetadataStore;

/// State of the remote protocols, part of [`AppState`](super::state::AppState).
pub struct RemoteState {
    /// Metric metadata received through remote-write.
    pub metadata: MetadataStore,
    /// Label sets of remote-write 1.0 series seen before, by their wire bytes.
    pub known_labels: KnownLabels,
}

impl RemoteState {
    /// Empty state for a server with `limits`.
    pub fn new(limits: &Limits) -> Self {
        Self {
            metadata: MetadataStore::default(),
            known_labels: KnownLabels::new(limits.label_cache_bytes, &decode_limits(limits)),
        }
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
