//! What reads of raw samples (`/api/v1/export`, remote read) tell their clients about
//! downsampled windows (see `docs/tiers.md`): a response header, since neither format has a
//! place for a warning. The float series of a downsampled window keep only tier points, which
//! these reads do not return.

use axum::http::{HeaderName, HeaderValue};

use crate::storage::Querier;

/// The header naming what a raw read over downsampled windows does not find.
pub const HEADER: HeaderName = HeaderName::from_static("x-saltdb-downsampled");

/// The header value when one of `ranges` (`[start, end]`, ms) reaches downsampled windows:
/// until when raw samples are gone and the finest interval kept, e.g. `raw samples before
/// 2026-11-25T00:00:00Z were downsampled to 1h points; float series there have no raw samples
/// to return`.
pub fn notice(q: &dyn Querier, ranges: impl IntoIterator<Item = (i64, i64)>) -> Option<HeaderValue> {
    let (finest, end) =
        ranges.into_iter().filter_map(|(start, end)| q.downsampled_in(start, end)).max_by_key(|d| d.1)?;
    let text = format!(
        "raw samples before {} were downsampled to {} points; float series there have no raw samples to return",
        crate::timestamp::format_ms(end),
        crate::duration::format_ms(finest)
    );
    HeaderValue::from_str(&text).ok()
}
