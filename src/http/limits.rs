//! Request limits of the HTTP server ([`Limits`]), set from the command line.

use super::admission::{DEFAULT_MAX_CONCURRENT_WRITES, DEFAULT_MAX_INFLIGHT_BYTES};
use crate::ingest::SeriesLimits;

/// Default of `--remote-write-label-cache`.
pub const DEFAULT_LABEL_CACHE_BYTES: usize = 8 << 20;

/// Request limits.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Largest accepted request body, after decompression too.
    pub max_request_bytes: usize,
    /// Limits on each ingested series.
    pub series: SeriesLimits,
    /// Write requests (remote-write and import) handled at once; more get 429.
    pub max_concurrent_writes: usize,
    /// Memory all write requests in flight may hold together (bodies, decompressed and
    /// decoded forms); a request that does not fit gets 429.
    pub max_inflight_bytes: usize,
    /// Memory for the label sets of remote-write 1.0 series seen before (see
    /// [`crate::remote::known_labels`]); 0 turns the cache off.
    pub label_cache_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_request_bytes: 64 << 20,
            series: SeriesLimits::default(),
            max_concurrent_writes: DEFAULT_MAX_CONCURRENT_WRITES,
            max_inflight_bytes: DEFAULT_MAX_INFLIGHT_BYTES,
            label_cache_bytes: DEFAULT_LABEL_CACHE_BYTES,
        }
    }
}
