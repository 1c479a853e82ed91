//! Pure cardinality counting: from the postings rows of a window (label pair and series id, in
//! key order) to series counts per metric name, label name and label pair, as Prometheus'
//! `/api/v1/status/tsdb` and VictoriaMetrics' cardinality explorer report them. No I/O: the
//! storage side ([`super`]) feeds it rows.

use std::collections::BTreeMap;

use crate::storage::format::keys;
use crate::storage::index::postings;

/// One entry of a top list: a name (metric, label name or `name=value`) and its count.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stat {
    /// Metric name, label name, or `name=value`.
    pub name: String,
    /// Series (or values, or bytes) counted for it.
    pub value: u64,
}

/// What [`Tally::finish`] reports; every list is sorted by count descending, then name, and
/// holds at most the `top_n` first entries.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Cardinality {
    /// Series counted.
    pub total_series: u64,
    /// Distinct label pairs (Prometheus' `numLabelPairs`).
    pub distinct_label_pairs: u64,
    /// Label pairs over all series, one per label of each series (VictoriaMetrics'
    /// `totalLabelValuePairs`).
    pub total_label_value_pairs: u64,
    /// Series per metric name (values of `__name__`).
    pub series_by_metric_name: Vec<Stat>,
    /// Series carrying each label name.
    pub series_by_label_name: Vec<Stat>,
    /// Series per `name=value` pair.
    pub series_by_label_pair: Vec<Stat>,
    /// Distinct values per label name.
    pub values_by_label_name: Vec<Stat>,
    /// Per label name, the summed length of its distinct values (Prometheus'
    /// `memoryInBytesByLabelName`).
    pub bytes_by_label_name: Vec<Stat>,
    /// Series per value of the focus label, if one was given (VictoriaMetrics' `focusLabel`).
    pub series_by_focus_value: Vec<Stat>,
}

/// Counts of one label name.
#[derive(Default)]
struct NameCounts {
    series: u64,
    values: u64,
    bytes: u64,
}

/// Accumulates label pairs with their series counts.
#[derive(Default)]
pub struct Tally {
    names: BTreeMap<String, NameCounts>,
    metrics: Vec<Stat>,
    pairs: Vec<Stat>,
    total_pairs: u64,
    focus: Option<String>,
    focus_values: Vec<Stat>,
}

impl Tally {
    /// A tally that also counts series per value of label `focus`, when given.
    pub fn new(focus: Option<String>) -> Self {
        Self { focus, ..Self::default() }
    }

    /// Counts `series` series carrying `name=value`. Each pair must be added once, with every
    /// series that carries it (a series carries one value per name).
    pub fn add_pair(&mut self, name: &str, value: &str, series: u64) {
        if series == 0 {
            return;
        }
        let counts = self.names.entry(name.to_owned()).or_default();
        counts.series += series;
        counts.values += 1;
        counts.bytes += value.len() as u64;
        if name == crate::labels::METRIC_NAME {
            self.metrics.push(Stat { name: value.to_owned(), value: series });
        }
        if self.focus.as_deref() == Some(name) {
            self.focus_values.push(Stat { name: value.to_owned(), value: series });
        }
        self.pairs.push(Stat { name: format!("{name}={value}"), value: series });
        self.total_pairs += series;
    }

    /// The top `top_n` of each list, with `total_series` series counted.
    pub fn finish(self, total_series: u64, top_n: usize) -> Cardinality {
        let by_name = |f: fn(&NameCounts) -> u64| -> Vec<Stat> {
            top(self.names.iter().map(|(n, c)| Stat { name: n.clone(), value: f(c) }).collect(), top_n)
        };
        Cardinality {
            total_series,
            distinct_label_pairs: self.pairs.len() as u64,
            total_label_value_pairs: self.total_pairs,
            series_by_label_name: by_name(|c| c.series),
            values_by_label_name: by_name(|c| c.values),
            bytes_by_label_name: by_name(|c| c.bytes),
            series_by_metric_name: top(self.metrics, top_n),
            series_by_label_pair: top(self.pairs, top_n),
            series_by_focus_value: top(self.focus_values, top_n),
        }
    }
}

/// Series per label pair, counted from whole label sets (for a few matching series, where
/// scanning a window's whole index would cost more than their labels).
#[derive(Default)]
pub struct PairCounts {
    pairs: BTreeMap<(String, String), u64>,
    series: u64,
}

impl PairCounts {
    /// Counts one series with these labels (each series once).
    pub fn add_series<'a>(&mut self, labels: impl IntoIterator<Item = (&'a str, &'a str)>) {
        self.series += 1;
        for (name, value) in labels {
            match self.pairs.get_mut(&(name.to_owned(), value.to_owned())) {
                Some(n) => *n += 1,
                None => {
                    self.pairs.insert((name.to_owned(), value.to_owned()), 1);
                }
            }
        }
    }

    /// Series counted so far.
    pub fn series(&self) -> u64 {
        self.series
    }

    /// Adds every pair to `tally`.
    pub fn add_to(&self, tally: &mut Tally) {
        for ((name, value), &n) in &self.pairs {
            tally.add_pair(name, value, n);
        }
    }
}

/// The `n` largest by count, ties by name ascending (VictoriaMetrics' order).
fn top(mut stats: Vec<Stat>, n: usize) -> Vec<Stat> {
    let by_rank = |a: &Stat, b: &Stat| b.value.cmp(&a.value).then_with(|| a.name.cmp(&b.name));
    if stats.len() > n {
        stats.select_nth_unstable_by(n, by_rank);
        stats.truncate(n);
    }
    stats.sort_unstable_by(by_rank);
    stats
}

/// Counts the series of every label pair of window postings rows (`0xFFFE name 0x00 value
/// 0x00 first_id` -> block, see `storage::postings`) read from several keyspaces, each stream
/// in key order, and adds them to `tally`. A series in several keyspaces (or blocks) counts
/// once: the ids of a pair are gathered from every stream, sorted and deduplicated, so memory
/// follows the largest pair, not the index.
///
/// # Errors
/// The first error of a stream, or `corrupt()` for a row that is not a postings row.
pub fn count_blocks<I, K, V, E>(streams: Vec<I>, tally: &mut Tally, corrupt: &dyn Fn() -> E) -> Result<(), E>
where
    I: Iterator<Item = Result<(K, V), E>>,
    K: AsRef<[u8]>,
    V: AsRef<[u8]>,
{
    let mut streams: Vec<_> = streams.into_iter().map(Iterator::peekable).collect();
    let mut heads = Vec::with_capacity(streams.len());
    for rows in &mut streams {
        heads.push(next_pair(rows, corrupt)?);
    }
    let mut ids = Vec::new();
    loop {
        let Some(pair) = heads.iter().flatten().map(|(p, _)| p).min().cloned() else { return Ok(()) };
        ids.clear();
        for (head, rows) in heads.iter_mut().zip(streams.iter_mut()) {
            if head.as_ref().is_some_and(|(p, _)| *p == pair) {
                if let Some((_, more)) = head.take() {
                    ids.extend(more);
                }
                *head = next_pair(rows, corrupt)?;
            }
        }
        ids.sort_unstable();
        ids.dedup();
        let mut key = pair;
        key.extend_from_slice(&[0; 8]);
        let (name, value, _) = keys::decode_postings_key(&key).ok_or_else(corrupt)?;
        tally.add_pair(name, value, ids.len() as u64);
    }
}

/// The next label pair of `rows` (`0xFFFE name 0x00 value 0x00`) with the ids of all its rows.
#[allow(clippy::type_complexity)]
fn next_pair<I, K, V, E>(
    rows: &mut std::iter::Peekable<I>,
    corrupt: &dyn Fn() -> E,
) -> Result<Option<(Vec<u8>, Vec<u64>)>, E>
where
    I: Iterator<Item = Result<(K, V), E>>,
    K: AsRef<[u8]>,
    V: AsRef<[u8]>,
{
    let mut out: Option<(Vec<u8>, Vec<u64>)> = None;
    loop {
        let same = match (rows.peek(), &out) {
            (None, _) => break,
            (Some(Err(_)), _) | (Some(Ok(_)), None) => true,
            (Some(Ok((key, _))), Some((pair, _))) => {
                let key = key.as_ref();
                key.len() == pair.len() + 8 && key.starts_with(pair)
            }
        };
        if !same {
            break;
        }
        let Some(row) = rows.next() else { break };
        let (key, value) = row?;
        let key = key.as_ref();
        let (pair, first) = key.split_at_checked(key.len().checked_sub(8).ok_or_else(corrupt)?).ok_or_else(corrupt)?;
        let first = u64::from_be_bytes(<[u8; 8]>::try_from(first).map_err(|_| corrupt())?);
        let (_, ids) = out.get_or_insert_with(|| (pair.to_vec(), Vec::new()));
        postings::decode_block(first, value.as_ref(), ids).map_err(|_| corrupt())?;
    }
    Ok(out)
}

/// Merges several strictly ascending streams of keys into one strictly ascending stream (the
/// same series indexed in a window's hot and sealed keyspaces counts once). An error ends it.
pub struct MergeUnique<I, K, E> {
    streams: Vec<I>,
    heads: Vec<Option<K>>,
    started: bool,
    /// An error met while refilling, returned after the key taken before it.
    pending: Option<E>,
    failed: bool,
}

impl<I, K, E> MergeUnique<I, K, E>
where
    I: Iterator<Item = Result<K, E>>,
{
    /// Merges `streams`.
    pub fn new(streams: Vec<I>) -> Self {
        let heads = streams.iter().map(|_| None).collect();
        Self { streams, heads, started: false, pending: None, failed: false }
    }

    /// Pulls the next key of stream `i` into its head.
    fn refill(&mut self, i: usize) -> Result<(), E> {
        if let (Some(stream), Some(head)) = (self.streams.get_mut(i), self.heads.get_mut(i)) {
            *head = stream.next().transpose()?;
        }
        Ok(())
    }
}

impl<I, K, E> Iterator for MergeUnique<I, K, E>
where
    I: Iterator<Item = Result<K, E>>,
    K: Ord,
{
    type Item = Result<K, E>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        if let Some(e) = self.pending.take() {
            self.failed = true;
            return Some(Err(e));
        }
        if !self.started {
            self.started = true;
            for i in 0..self.streams.len() {
                if let Err(e) = self.refill(i) {
                    self.failed = true;
                    return Some(Err(e));
                }
            }
        }
        let (min, _) = self
            .heads
            .iter()
            .enumerate()
            .filter_map(|(i, h)| h.as_ref().map(|k| (i, k)))
            .min_by(|a, b| a.1.cmp(b.1))?;
        let key = self.heads.get_mut(min)?.take()?;
        for i in 0..self.heads.len() {
            let equal = i == min || self.heads.get(i).and_then(Option::as_ref) == Some(&key);
            if equal {
                if let Err(e) = self.refill(i) {
                    self.pending = Some(e);
                    break;
                }
            }
        }
        Some(Ok(key))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet, HashMap};

    use proptest::prelude::*;

    use super::*;

    type LabelSet = BTreeMap<String, String>;

    /// The window postings rows of `series` (id -> labels), in key order, in blocks of up to
    /// `block` ids (as batches of that many series write them).
    fn rows(series: &BTreeMap<u64, LabelSet>, block: usize) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut by_pair: BTreeMap<(String, String), Vec<u64>> = BTreeMap::new();
        for (&id, ls) in series {
            for (n, v) in ls {
                by_pair.entry((n.clone(), v.clone())).or_default().push(id);
            }
        }
        let mut rows = Vec::new();
        for ((n, v), ids) in by_pair {
            for chunk in ids.chunks(block) {
                let mut value = Vec::new();
                postings::encode_block(chunk, &mut value);
                rows.push((keys::postings_key(&n, &v, chunk[0]), value));
            }
        }
        rows.sort();
        rows
    }

    /// Counts the plain way, from whole label sets.
    fn brute_force(series: &BTreeMap<u64, LabelSet>, accepted: &BTreeSet<u64>, top_n: usize) -> Cardinality {
        let mut by_name: HashMap<String, (u64, BTreeSet<String>, u64)> = HashMap::new();
        let mut metrics: HashMap<String, u64> = HashMap::new();
        let mut pairs: HashMap<String, u64> = HashMap::new();
        let mut total_pairs = 0;
        for (id, labels) in series {
            if !accepted.contains(id) {
                continue;
            }
            for (n, v) in labels {
                let e = by_name.entry(n.clone()).or_default();
                e.0 += 1;
                if e.1.insert(v.clone()) {
                    e.2 += v.len() as u64;
                }
                *pairs.entry(format!("{n}={v}")).or_default() += 1;
                total_pairs += 1;
                if n == "__name__" {
                    *metrics.entry(v.clone()).or_default() += 1;
                }
            }
        }
        let list = |m: Vec<(String, u64)>| -> Vec<Stat> {
            let mut v: Vec<Stat> = m.into_iter().map(|(name, value)| Stat { name, value }).collect();
            v.sort_by(|a, b| b.value.cmp(&a.value).then(a.name.cmp(&b.name)));
            v.truncate(top_n);
            v
        };
        Cardinality {
            total_series: accepted.iter().filter(|id| series.contains_key(id)).count() as u64,
            distinct_label_pairs: pairs.len() as u64,
            total_label_value_pairs: total_pairs,
            series_by_metric_name: list(metrics.into_iter().collect()),
            series_by_label_name: list(by_name.iter().map(|(n, c)| (n.clone(), c.0)).collect()),
            values_by_label_name: list(by_name.iter().map(|(n, c)| (n.clone(), c.1.len() as u64)).collect()),
            bytes_by_label_name: list(by_name.iter().map(|(n, c)| (n.clone(), c.2)).collect()),
            series_by_focus_value: list(
                pairs.iter().filter_map(|(p, &c)| p.strip_prefix("job=").map(|v| (v.to_owned(), c))).collect(),
            ),
            series_by_label_pair: list(pairs.into_iter().collect()),
        }
    }

    fn label_set() -> impl Strategy<Value = LabelSet> {
        (
            prop::sample::select(vec!["up", "cpu", "mem", "http_requests_total"]),
            prop::collection::btree_map(prop::sample::select(vec!["job", "instance", "path", "a"]), "[a-c]{0,2}", 0..4),
        )
            .prop_map(|(metric, rest)| {
                let mut ls: LabelSet =
                    rest.into_iter().filter(|(_, v)| !v.is_empty()).map(|(n, v)| (n.to_owned(), v)).collect();
                ls.insert("__name__".into(), metric.into());
                ls
            })
    }

    proptest! {
        /// Series spread over up to three keyspaces (a series may be in several): merging their
        /// rows and counting gives what counting their label sets gives.
        #[test]
        fn index_counts_match_brute_force(
            series in prop::collection::btree_map(0u64..200, label_set(), 0..40),
            placement in prop::collection::vec(1u8..8, 40),
            top_n in 1usize..12,
            block in 1usize..5,
        ) {
            let ids: Vec<u64> = series.keys().copied().collect();
            let mut keyspaces: Vec<BTreeMap<u64, LabelSet>> = vec![BTreeMap::new(); 3];
            for (i, id) in ids.iter().enumerate() {
                let mask = placement.get(i).copied().unwrap_or(1);
                for (k, ks) in keyspaces.iter_mut().enumerate() {
                    if mask & (1 << k) != 0 {
                        ks.insert(*id, series[id].clone());
                    }
                }
            }
            let accepted: BTreeSet<u64> = ids.iter().copied().collect();
            let streams: Vec<_> = keyspaces.iter().map(|ks| rows(ks, block).into_iter().map(Ok::<_, ()>)).collect();
            let mut tally = Tally::new(Some("job".into()));
            count_blocks(streams, &mut tally, &|| ()).unwrap();
            let total = keyspaces.iter().flat_map(|ks| ks.keys()).collect::<BTreeSet<_>>().len() as u64;
            prop_assert_eq!(tally.finish(total, top_n), brute_force(&series, &accepted, top_n));
        }

        /// Counting the accepted label sets themselves gives the same answer.
        #[test]
        fn label_set_counts_match_brute_force(
            series in prop::collection::btree_map(0u64..200, label_set(), 0..40),
            accepted_bits in prop::collection::vec(any::<bool>(), 40),
            top_n in 1usize..12,
        ) {
            let accepted: BTreeSet<u64> =
                series.keys().zip(&accepted_bits).filter(|(_, &b)| b).map(|(&id, _)| id).collect();
            let mut counts = PairCounts::default();
            for id in &accepted {
                counts.add_series(series[id].iter().map(|(n, v)| (n.as_str(), v.as_str())));
            }
            let mut tally = Tally::new(Some("job".into()));
            counts.add_to(&mut tally);
            prop_assert_eq!(tally.finish(counts.series(), top_n), brute_force(&series, &accepted, top_n));
        }

        /// Merged streams come out strictly ascending with every key of every stream.
        #[test]
        fn merge_is_the_sorted_union(streams in prop::collection::vec(prop::collection::btree_set(0u32..100, 0..30), 0..4)) {
            let union: Vec<u32> = streams.iter().flatten().copied().collect::<BTreeSet<_>>().into_iter().collect();
            let merged: Result<Vec<u32>, ()> =
                MergeUnique::new(streams.iter().map(|s| s.iter().copied().map(Ok)).collect()).collect();
            prop_assert_eq!(merged.unwrap(), union);
        }
    }

    #[test]
    fn an_error_ends_the_merge() {
        let streams = vec![vec![Ok(1), Err("bad"), Ok(3)].into_iter(), vec![Ok(2)].into_iter()];
        let got: Vec<Result<i32, &str>> = MergeUnique::new(streams).collect();
        assert_eq!(got, vec![Ok(1), Err("bad")]);
    }

    #[test]
    fn a_corrupt_row_is_an_error() {
        let rows = vec![Ok::<_, &str>((keys::postings_key("a", "b", 1), vec![])), Ok((vec![0xFF, 0xFE, 1, 2], vec![]))];
        assert_eq!(count_blocks(vec![rows.into_iter()], &mut Tally::default(), &|| "corrupt"), Err("corrupt"));
        let bad_block = vec![Ok::<_, &str>((keys::postings_key("a", "b", 1), vec![0x80]))];
        assert_eq!(count_blocks(vec![bad_block.into_iter()], &mut Tally::default(), &|| "corrupt"), Err("corrupt"));
    }

    #[test]
    fn ties_rank_by_name() {
        let mut t = Tally::default();
        t.add_pair("job", "b", 2);
        t.add_pair("job", "a", 2);
        t.add_pair("__name__", "up", 3);
        let c = t.finish(3, 2);
        let names: Vec<&str> = c.series_by_label_pair.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["__name__=up", "job=a"]);
        let by_name: Vec<(&str, u64)> = c.series_by_label_name.iter().map(|s| (s.name.as_str(), s.value)).collect();
        assert_eq!(by_name, [("job", 4), ("__name__", 3)]);
    }
}
