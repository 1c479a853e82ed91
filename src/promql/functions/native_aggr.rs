//! `sum` and `avg` of groups holding native histograms, with Prometheus 3.x's semantics (its
//! `aggregation` in `engine.go`): a group mixing floats and histograms has no value (a
//! warning); histograms are added with [`Histogram::add`], the average divides the sum by the
//! group's size; results are compacted; colliding counter reset hints and reconciled custom
//! bounds are annotated. The other aggregations are dispatched in `aggr.rs`.

use std::sync::Arc;

use super::native_rollup::{add_noting, note};
use crate::histogram::{CounterResetHint, Histogram};
use crate::labels::{Labels, METRIC_NAME};
use crate::promql::eval::Query;
use crate::promql::value::Elem;

/// `sum` (or `avg` when `average`) of one group that holds at least one histogram; `None`
/// when the group has no value (mixed kinds, or histograms that cannot be added).
pub(crate) fn sum_or_avg(q: &Query, average: bool, labels: Labels, elems: &[Elem]) -> Option<Elem> {
    if elems.iter().any(Elem::is_float) {
        q.warn("encountered a mix of histograms and floats for aggregation");
        return None;
    }
    let mut hists = elems.iter().filter_map(|e| e.hist.as_deref().map(|h| (h, &e.labels)));
    let (first, _) = hists.next()?;
    let mut sum: Histogram = first.clone();
    let (mut reset, mut not_reset) = (false, false);
    let mut track = |h: &Histogram| match h.counter_reset_hint {
        CounterResetHint::CounterReset => reset = true,
        CounterResetHint::NotCounterReset => not_reset = true,
        _ => {}
    };
    track(first);
    for (h, l) in hists {
        track(h);
        if !add_noting(q, l.get(METRIC_NAME).unwrap_or(""), &mut sum, h, "aggregation") {
            return None;
        }
    }
    if average {
        sum.div(elems.len() as f64);
    }
    sum.compact(0);
    if reset && not_reset {
        q.warn(note::counter_reset_collision("aggregation"));
    }
    let drop = elems.iter().any(|e| e.drop_name);
    Some(Elem::histogram(labels, Arc::new(sum), drop))
}

/// `elems` without histograms; an info names `aggregation` when some were dropped.
pub(crate) fn without_histograms(q: &Query, aggregation: &str, mut elems: Vec<Elem>) -> Vec<Elem> {
    if elems.iter().any(|e| !e.is_float()) {
        q.info(format!("ignored histogram in {aggregation} aggregation"));
        elems.retain(Elem::is_float);
    }
    elems
}
