//! Resolves label matchers against the window postings of one keyspace (see [`postings`]),
//! at a cost that follows the smallest matching postings list rather than the window's size.
//!
//! Prometheus semantics: an absent label has the value `""`. A matcher that does not match `""`
//! *selects* series (they must carry a matching value); a matcher that matches `""` only
//! *excludes*. Candidates come from the selecting matchers: each one's values are found
//! (an equality is one value; a regex that is a set of literals is those values; any other
//! regex walks the label's values from its literal prefix, and one without a prefix is left to
//! the label check when a cheaper matcher selects too), their postings lists are read in
//! turns until the first is exhausted (smallest first without knowing sizes), and the lists
//! that finish within a few times its length are intersected with it. Callers then check every
//! matcher against each candidate's labels ([`Selection::accepts`]), which applies the
//! excluding matchers and whatever the postings did not.

use regex_syntax::hir::literal::{ExtractKind, Extractor};

use super::postings::{self, PairIds};
use crate::labels::Labels;
use crate::matcher::{MatchOp, Matcher};
use crate::storage::error::Result;
use crate::storage::series_id::SeriesId;

/// Ids read from each postings list in the first turn while looking for the smallest; each
/// later turn reads twice as many, up to [`MAX_TURN`]: a one-series selector costs a few dozen
/// ids per list, a large one few turns.
const FIRST_TURN: usize = 16;
/// The largest turn.
const MAX_TURN: usize = 4096;
/// Below this many candidates, the other lists are left to the label check rather than read.
const INTERSECT_FROM: usize = 64;
/// Most literals a regex may expand to before its values are walked instead.
const MAX_LITERALS: usize = 4096;

/// Matchers as a read applies them.
#[derive(Clone, Debug)]
pub struct Selection {
    matchers: Vec<Matcher>,
}

impl Selection {
    /// Wraps the matchers of one selector.
    pub fn new(matchers: &[Matcher]) -> Self {
        Self { matchers: matchers.to_vec() }
    }

    /// The matchers.
    pub fn matchers(&self) -> &[Matcher] {
        &self.matchers
    }

    /// Does a series with these labels satisfy every matcher?
    pub fn accepts(&self, labels: &Labels) -> bool {
        self.matchers.iter().all(|m| m.matches(labels.get(&m.name).unwrap_or("")))
    }
}

/// What a regex can match, as far as the postings can use it.
enum RegexValues {
    /// Exactly these strings (the regex is a finite set of literals).
    Exactly(Vec<String>),
    /// Only strings starting with this prefix.
    Prefixed(String),
}

/// The literals of an anchored regex pattern (as [`Matcher`] compiles it).
fn regex_values(pattern: &str) -> RegexValues {
    let parsed = regex_syntax::ParserBuilder::new().dot_matches_new_line(true).build().parse(pattern);
    let Ok(hir) = parsed else { return RegexValues::Prefixed(String::new()) };
    let seq = Extractor::new().kind(ExtractKind::Prefix).limit_total(MAX_LITERALS).extract(&hir);
    if seq.is_exact() {
        if let Some(lits) = seq.literals() {
            let strings: Option<Vec<String>> =
                lits.iter().map(|l| std::str::from_utf8(l.as_bytes()).ok().map(str::to_owned)).collect();
            if let Some(strings) = strings {
                return RegexValues::Exactly(strings);
            }
        }
    }
    let prefix = seq.longest_common_prefix().unwrap_or_default();
    // A byte prefix cut inside a UTF-8 character is shortened to whole characters.
    let prefix = match std::str::from_utf8(prefix) {
        Ok(s) => s.to_owned(),
        Err(e) => std::str::from_utf8(prefix.get(..e.valid_up_to()).unwrap_or_default()).unwrap_or_default().to_owned(),
    };
    RegexValues::Prefixed(prefix)
}

/// Where the values a selecting matcher accepts come from.
enum Values {
    /// Exactly these (an equality, or a regex that is a set of literals).
    Listed(Vec<String>),
    /// Those of a walk of the label's values from this prefix.
    Walk(String),
}

impl Values {
    fn of(m: &Matcher) -> Self {
        match m.op {
            MatchOp::Equal => Self::Listed(vec![m.value.clone()]),
            MatchOp::RegexMatch => match regex_values(&m.value) {
                RegexValues::Exactly(values) => {
                    Self::Listed(values.into_iter().filter(|v| !v.is_empty() && m.matches(v)).collect())
                }
                RegexValues::Prefixed(prefix) => Self::Walk(prefix),
            },
            MatchOp::NotEqual | MatchOp::RegexNoMatch => Self::Walk(String::new()),
        }
    }

    /// True when finding the values costs little whatever the label's cardinality: they are
    /// listed, or a literal prefix bounds the walk.
    fn bounded(&self) -> bool {
        match self {
            Self::Listed(_) => true,
            Self::Walk(prefix) => !prefix.is_empty(),
        }
    }
}

/// The values of `m.name` in `ks` that a selecting matcher accepts.
fn selected_values(ks: &fjall::Keyspace, m: &Matcher, source: Values) -> Result<Vec<String>> {
    let walk_from = match source {
        Values::Listed(values) => return Ok(values),
        Values::Walk(prefix) => prefix,
    };
    let mut values = Vec::new();
    postings::for_each_value(ks, &m.name, &walk_from, |v| {
        if m.matches(v) {
            values.push(v.to_owned());
        }
        true
    })?;
    Ok(values)
}

/// The postings list of one selecting matcher of `sel` in `ks` (an equality when there is one),
/// unread, for a caller that checks labels as it reads and may stop early; `None` when no
/// matcher selects with bounded cost (see [`Values::bounded`]). The list is a superset of the
/// matching series with data in the keyspace.
///
/// # Errors
/// Engine errors and corrupt keys.
pub fn one_list(ks: &fjall::Keyspace, sel: &Selection) -> Result<Option<PairIds>> {
    let mut best: Option<(&Matcher, Values)> = None;
    for m in sel.matchers().iter().filter(|m| !m.matches_empty()) {
        let values = Values::of(m);
        let better = match &best {
            None => values.bounded(),
            Some(_) => m.op == MatchOp::Equal,
        };
        if better {
            best = Some((m, values));
        }
        if best.as_ref().is_some_and(|(m, _)| m.op == MatchOp::Equal) {
            break;
        }
    }
    let Some((m, source)) = best else { return Ok(None) };
    let values = selected_values(ks, m, source)?;
    Ok(Some(PairIds::new(&m.name, values.iter().map(String::as_str))))
}

/// Ids in `ks` of the series that may match `sel`, ascending: a superset of the matching
/// series with data in the keyspace, exact for selections of equalities and literal regexes.
///
/// # Errors
/// Engine errors and corrupt keys.
pub fn candidates(ks: &fjall::Keyspace, sel: &Selection) -> Result<Vec<SeriesId>> {
    let mut selecting: Vec<(&Matcher, Values)> =
        sel.matchers().iter().filter(|m| !m.matches_empty()).map(|m| (m, Values::of(m))).collect();
    if selecting.is_empty() {
        return postings::all_ids(ks);
    }
    // A regex without a literal prefix (or `!=""`) walks every value of its label: when a
    // bounded matcher selects too, leave it to the label check.
    if selecting.iter().any(|(_, v)| v.bounded()) {
        selecting.retain(|(_, v)| v.bounded());
    }
    let mut lists = Vec::with_capacity(selecting.len());
    for (m, source) in selecting {
        let values = selected_values(ks, m, source)?;
        if values.is_empty() {
            return Ok(Vec::new());
        }
        lists.push(PairIds::new(&m.name, values.iter().map(String::as_str)));
    }
    // In turns until one list is exhausted: that one is the smallest (within a turn).
    let mut turn = FIRST_TURN;
    let smallest = 'race: loop {
        for (i, list) in lists.iter_mut().enumerate() {
            if list.advance(ks, turn)? {
                break 'race i;
            }
        }
        turn = (turn * 2).min(MAX_TURN);
    };
    let mut ids = std::mem::take(&mut lists.swap_remove(smallest).ids);
    ids.sort_unstable();
    ids.dedup();
    // Lists not much longer than the smallest are read to the end and intersected; longer ones
    // are left to the label check, which costs one comparison per candidate.
    let budget = ids.len().saturating_mul(4).saturating_add(FIRST_TURN);
    for mut list in lists {
        if ids.len() < INTERSECT_FROM {
            break;
        }
        let read = list.ids.len();
        if list.advance(ks, budget.saturating_sub(read))? {
            let mut other = std::mem::take(&mut list.ids);
            other.sort_unstable();
            ids.retain(|id| other.binary_search(id).is_ok());
        }
    }
    Ok(ids)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literal_regexes_become_value_sets() {
        match regex_values("a|b|c") {
            RegexValues::Exactly(mut v) => {
                v.sort();
                assert_eq!(v, ["a", "b", "c"]);
            }
            RegexValues::Prefixed(_) => panic!("expected a set"),
        }
        assert!(matches!(regex_values("host-1.*"), RegexValues::Prefixed(p) if p == "host-1"));
        assert!(matches!(regex_values(".*x"), RegexValues::Prefixed(p) if p.is_empty()));
        assert!(matches!(regex_values("(?i)ab"), RegexValues::Exactly(v) if v.len() == 4));
        assert!(matches!(regex_values("é.*"), RegexValues::Prefixed(p) if p == "é"));
    }
}
