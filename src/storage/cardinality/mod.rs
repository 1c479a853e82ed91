//! Cardinality of a time range (a day, for `/api/v1/status/tsdb`), read from the per-window
//! index (see [`super::postings`]): series per metric name, label name and label pair, distinct
//! values per label name. Its cost follows the size of the overlapping windows' postings (one
//! row per label of each series in them), never a load of label sets from the series table;
//! with selectors, the matching series are found by the ordinary selection first
//! ([`select::accepted_ids`]) and only rows of those series are counted.
//!
//! The counting itself is pure and lives in [`tally`].

mod tally;

use super::error::{Result, StorageError};
use super::keys;
use super::matchers::Selection;
use super::querier::ReadLimits;
use super::select::{self, keyspaces};
use super::series::SeriesId;
use super::shared::Shared;
pub use tally::{Cardinality, Stat};

use tally::{count_rows, MergeUnique, Tally};

use crate::matcher::Matcher;

/// Postings rows read between two checks of the deadline.
const CHECK_EVERY: u64 = 4096;

/// What to count.
#[derive(Clone, Debug)]
pub struct CardinalityQuery {
    /// The series with data in windows overlapping `[start_ms, end_ms]`.
    pub start_ms: i64,
    /// See `start_ms`.
    pub end_ms: i64,
    /// Only the series matching any of these (all series when empty).
    pub selectors: Vec<Vec<Matcher>>,
    /// Entries kept in each list (the largest).
    pub top_n: usize,
    /// A label whose values get their own series counts.
    pub focus_label: Option<String>,
}

/// Counts the series `q` asks for.
///
/// # Errors
/// Engine errors, corrupt keys, and the limits' timeout or cancellation.
pub fn cardinality(sh: &Shared, q: &CardinalityQuery, limits: &ReadLimits) -> Result<Cardinality> {
    let (start_ms, end_ms, selectors) = (q.start_ms, q.end_ms, q.selectors.as_slice());
    let windows = sh.windows.overlapping(start_ms, end_ms);
    let accepted = match selectors {
        [] => None,
        _ => Some(accepted_ids(sh, selectors, start_ms, end_ms)?),
    };
    let index_rows = || windows.iter().flat_map(keyspaces).map(|ks| ks.prefix(keys::WINDOW_POSTINGS_PREFIX));
    let streams: Vec<_> = index_rows().map(|rows| rows.map(|g| g.key().map_err(StorageError::from))).collect();
    let mut read = 0u64;
    let rows = MergeUnique::new(streams).map(|key| {
        read += 1;
        if read.is_multiple_of(CHECK_EVERY) {
            limits.check()?;
        }
        key
    });
    let mut tally = Tally::new(q.focus_label.clone());
    match &accepted {
        Some(ids) => count_rows(rows, |id| ids.binary_search(&id).is_ok(), &mut tally, corrupt)?,
        None => count_rows(rows, |_| true, &mut tally, corrupt)?,
    }
    let total = match accepted {
        Some(ids) => ids.len(),
        None => series_in(&windows)?,
    };
    Ok(tally.finish(total as u64, q.top_n))
}

fn corrupt() -> StorageError {
    StorageError::Corrupt { what: "window postings key" }
}

/// Series in the window index of any of `windows`, counted without collecting their ids.
fn series_in(windows: &[super::window::Window]) -> Result<usize> {
    let streams: Vec<_> =
        windows.iter().flat_map(keyspaces).map(|ks| ks.prefix(keys::WINDOW_INDEX_PREFIX).map(|g| g.key())).collect();
    let mut n = 0;
    for key in MergeUnique::new(streams) {
        key?;
        n += 1;
    }
    Ok(n)
}

/// Ids (ascending) of the series matching any of `selectors` in `[start_ms, end_ms]`.
fn accepted_ids(sh: &Shared, selectors: &[Vec<Matcher>], start_ms: i64, end_ms: i64) -> Result<Vec<SeriesId>> {
    let mut ids = Vec::new();
    for matchers in selectors {
        ids.extend(select::accepted_ids(sh, &Selection::new(matchers), start_ms, end_ms)?);
    }
    ids.sort_unstable();
    ids.dedup();
    Ok(ids)
}
