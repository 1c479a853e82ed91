//! Cardinality of a time range (a day, for `/api/v1/status/tsdb`): series per metric name,
//! label name and label pair, distinct values per label name.
//!
//! - All series: read from the per-window index (see [`crate::storage::index::postings`]). The cost follows the
//!   size of the overlapping windows' postings (blocks of the ids carrying each label pair), never
//!   a load of label sets from the series table.
//! - With selectors: the ordinary selection ([`select::for_each_accepted`]) finds the matching
//!   series, checking each candidate's labels, and those same labels are counted: the cost
//!   follows the selection, not the window.
//!
//! The counting itself is pure and lives in [`tally`].

mod tally;

use std::collections::HashSet;

use crate::storage::error::{Result, StorageError};
use crate::storage::format::keys;
use crate::storage::index::matchers::Selection;
use crate::storage::lifecycle::window::Window;
use crate::storage::read::querier::ReadLimits;
use crate::storage::read::select::{self, keyspaces};
use crate::storage::shared::Shared;
use tally::{count_blocks, MergeUnique, PairCounts, Tally};
pub use tally::{Cardinality, Stat};

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

/// One window's series per value of a label (see [`series_per_value`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WindowValues {
    /// The window's first millisecond.
    pub start_ms: i64,
    /// Its retention class.
    pub class: crate::storage::ClassId,
    /// `(value, series carrying it)`, by value; series without the label are not counted.
    pub series: Vec<(String, u64)>,
}

/// For every window, oldest first, how many of its series carry each value of label `name`:
/// from the window postings (each value's list read once), never from label sets.
///
/// # Errors
/// Engine errors and corrupt keys.
pub fn series_per_value(sh: &Shared, name: &str) -> Result<Vec<WindowValues>> {
    let mut out = Vec::new();
    for w in sh.windows.all() {
        let mut values = Vec::new();
        for ks in keyspaces(&w) {
            crate::storage::index::postings::for_each_value(ks, name, "", |v| {
                values.push(v.to_owned());
                true
            })?;
        }
        values.sort();
        values.dedup();
        let mut series = Vec::with_capacity(values.len());
        for v in values {
            let ids =
                select::window_ids(&w, |_| Ok(crate::storage::index::postings::PairIds::new(name, [v.as_str()])))?;
            series.push((v, ids.len() as u64));
        }
        out.push(WindowValues { start_ms: w.start_ms, class: w.class, series });
    }
    Ok(out)
}

/// Counts the series `q` asks for.
///
/// # Errors
/// Engine errors, corrupt keys, and the limits' timeout or cancellation.
pub fn cardinality(sh: &Shared, q: &CardinalityQuery, limits: &ReadLimits) -> Result<Cardinality> {
    let mut tally = Tally::new(q.focus_label.clone());
    let total = if q.selectors.is_empty() {
        let windows = sh.windows.overlapping(q.start_ms, q.end_ms);
        count_index(&windows, limits, &mut tally)?;
        series_in(&windows)?
    } else {
        let counts = count_selected(sh, q, limits)?;
        counts.add_to(&mut tally);
        counts.series()
    };
    Ok(tally.finish(total, q.top_n))
}

/// Adds every label pair of the window postings of `windows` to `tally`, with its series.
fn count_index(windows: &[Window], limits: &ReadLimits, tally: &mut Tally) -> Result<()> {
    let read = std::cell::Cell::new(0u64);
    let streams: Vec<_> = windows
        .iter()
        .flat_map(keyspaces)
        .map(|ks| {
            ks.prefix(keys::WINDOW_POSTINGS_PREFIX).map(|g| {
                read.set(read.get() + 1);
                if read.get().is_multiple_of(CHECK_EVERY) {
                    limits.check()?;
                }
                g.into_inner().map_err(StorageError::from)
            })
        })
        .collect();
    count_blocks(streams, tally, &corrupt)
}

/// Label pairs of the series matching any of the selectors of `q` (each series once).
fn count_selected(sh: &Shared, q: &CardinalityQuery, limits: &ReadLimits) -> Result<PairCounts> {
    let mut counts = PairCounts::default();
    // A series matched by several selectors counts once (label sets are unique per series).
    let mut seen = HashSet::new();
    let several = q.selectors.len() > 1;
    for matchers in &q.selectors {
        select::for_each_accepted(sh, &Selection::new(matchers), q.start_ms, q.end_ms, limits, |labels| {
            if !several || seen.insert(labels.clone()) {
                counts.add_series(labels.iter().map(|l| (l.name.as_str(), l.value.as_str())));
            }
            true
        })?;
    }
    Ok(counts)
}

fn corrupt() -> StorageError {
    StorageError::Corrupt { what: "window postings key" }
}

/// Series in the window index of any of `windows`, counted without collecting their ids.
fn series_in(windows: &[Window]) -> Result<u64> {
    let streams: Vec<_> =
        windows.iter().flat_map(keyspaces).map(|ks| ks.prefix(keys::WINDOW_INDEX_PREFIX).map(|g| g.key())).collect();
    let mut n = 0;
    for key in MergeUnique::new(streams) {
        key?;
        n += 1;
    }
    Ok(n)
}
