//! Evaluates label matchers against the postings, within a universe of candidate series
//! (the series present in the windows a query touches).
//!
//! Prometheus semantics: an absent label has the value `""`. A matcher that does not match `""`
//! *selects* series (they must carry a matching value); a matcher that matches `""` only
//! *excludes* series whose value fails it.

use std::collections::HashSet;

use super::error::Result;
use super::postings;
use super::series::SeriesId;
use crate::matcher::{MatchOp, Matcher};

/// Ids in `universe` satisfying every matcher, ascending.
///
/// # Errors
/// Engine errors and corrupt postings.
pub fn resolve(
    postings_ks: &fjall::Keyspace,
    matchers: &[Matcher],
    universe: &HashSet<SeriesId>,
) -> Result<Vec<SeriesId>> {
    let mut selected: Option<HashSet<SeriesId>> = None;
    // Cheapest first: exact pairs are one prefix scan.
    let mut ordered: Vec<&Matcher> = matchers.iter().collect();
    ordered.sort_by_key(|m| (m.matches_empty(), m.op != MatchOp::Equal));
    for m in ordered {
        let next: HashSet<SeriesId> = if m.matches_empty() {
            let excluded = postings::ids_where(postings_ks, &m.name, |v| !m.matches(v))?;
            let base = selected.take().unwrap_or_else(|| universe.clone());
            base.into_iter().filter(|id| !excluded.contains(id)).collect()
        } else {
            let found: HashSet<SeriesId> = if m.op == MatchOp::Equal {
                postings::ids_for_pair(postings_ks, &m.name, &m.value)?.into_iter().collect()
            } else {
                postings::ids_where(postings_ks, &m.name, |v| m.matches(v))?
            };
            match selected.take() {
                None => found.into_iter().filter(|id| universe.contains(id)).collect(),
                Some(base) => base.into_iter().filter(|id| found.contains(id)).collect(),
            }
        };
        let done = next.is_empty();
        selected = Some(next);
        if done {
            break;
        }
    }
    let mut ids: Vec<SeriesId> = selected.unwrap_or_else(|| universe.clone()).into_iter().collect();
    ids.sort_unstable();
    Ok(ids)
}
