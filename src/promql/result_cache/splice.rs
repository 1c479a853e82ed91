//! Cutting a range query's series to a run of steps and joining runs of steps back into one
//! answer, ordered as the evaluator orders it (by label set).

use std::cmp::Ordering;

use crate::promql::value::RangeSeries;

/// The points of `series` (sorted by labels) from `first_ms` to `last_ms` inclusive; series
/// without a point there are left out, as the evaluator leaves them out.
pub fn slice(series: &[RangeSeries], first_ms: i64, last_ms: i64) -> Vec<RangeSeries> {
    series
        .iter()
        .filter_map(|s| {
            let floats = within(&s.samples, |p| p.timestamp_ms, first_ms, last_ms);
            let hists = within(&s.histograms, |p| p.timestamp_ms, first_ms, last_ms);
            (!floats.is_empty() || !hists.is_empty()).then(|| RangeSeries {
                labels: s.labels.clone(),
                samples: floats.to_vec(),
                histograms: hists.to_vec(),
            })
        })
        .collect()
}

/// Splits `series` (sorted by labels) into its points up to `last_ms` inclusive and those after,
/// moving them; each side keeps only the series with a point on it, in the same order.
pub fn split(series: Vec<RangeSeries>, last_ms: i64) -> (Vec<RangeSeries>, Vec<RangeSeries>) {
    let mut early = Vec::with_capacity(series.len());
    let mut late = Vec::new();
    for mut s in series {
        let floats = s.samples.partition_point(|p| p.timestamp_ms <= last_ms);
        let hists = s.histograms.partition_point(|p| p.timestamp_ms <= last_ms);
        let after = RangeSeries {
            labels: s.labels.clone(),
            samples: s.samples.split_off(floats),
            histograms: s.histograms.split_off(hists),
        };
        if !after.samples.is_empty() || !after.histograms.is_empty() {
            late.push(after);
        }
        if !s.samples.is_empty() || !s.histograms.is_empty() {
            early.push(s);
        }
    }
    (early, late)
}

fn within<T>(points: &[T], time: impl Fn(&T) -> i64, first_ms: i64, last_ms: i64) -> &[T] {
    let from = points.partition_point(|p| time(p) < first_ms);
    let to = points.partition_point(|p| time(p) <= last_ms);
    points.get(from..to.max(from)).unwrap_or(&[])
}

/// Joins runs of steps given oldest first, each sorted by labels, into one answer sorted by
/// labels: a series in several runs gets their points one run after the other.
pub fn join(runs: Vec<Vec<RangeSeries>>) -> Vec<RangeSeries> {
    runs.into_iter().reduce(join_two).unwrap_or_default()
}

/// Merges two label-sorted runs, `later`'s points after `earlier`'s.
fn join_two(earlier: Vec<RangeSeries>, later: Vec<RangeSeries>) -> Vec<RangeSeries> {
    if earlier.is_empty() {
        return later;
    }
    let mut out = Vec::with_capacity(earlier.len().max(later.len()));
    let mut a = earlier.into_iter().peekable();
    let mut b = later.into_iter().peekable();
    loop {
        let order = match (a.peek(), b.peek()) {
            (Some(x), Some(y)) => x.labels.cmp(&y.labels),
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (None, None) => break,
        };
        match order {
            Ordering::Less => out.extend(a.next()),
            Ordering::Greater => out.extend(b.next()),
            Ordering::Equal => {
                if let (Some(mut x), Some(y)) = (a.next(), b.next()) {
                    x.samples.extend(y.samples);
                    x.histograms.extend(y.histograms);
                    out.push(x);
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::labels::Labels;
    use crate::sample::Sample;

    fn series(name: &str, times: &[i64]) -> RangeSeries {
        RangeSeries {
            labels: Labels::from_pairs([("__name__", name)]).unwrap(),
            samples: times.iter().map(|&t| Sample::new(t, t as f64)).collect(),
            histograms: Vec::new(),
        }
    }

    #[test]
    fn slices_and_joins_back_to_the_whole() {
        let whole = vec![series("a", &[10, 20, 30, 40]), series("b", &[30, 40]), series("c", &[10])];
        let early = slice(&whole, 10, 20);
        assert_eq!(early, vec![series("a", &[10, 20]), series("c", &[10])]);
        let late = slice(&whole, 30, 40);
        assert_eq!(join(vec![early, Vec::new(), late]), whole);
        assert_eq!(slice(&whole, 41, 50), Vec::new());
        assert_eq!(join(Vec::new()), Vec::new());
        for cut in [0, 10, 25, 30, 40, 99] {
            let (a, b) = split(whole.clone(), cut);
            assert_eq!(
                (a.clone(), b.clone()),
                (slice(&whole, i64::MIN, cut), slice(&whole, cut + 1, i64::MAX)),
                "{cut}"
            );
            assert_eq!(join(vec![a, b]), whole);
        }
    }
}
