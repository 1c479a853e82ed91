//! Bytes a value holds while a query is evaluated, for the query's memory budget
//! (`--query-max-memory`). Counted from capacities and sizes, not points: a subquery step or a
//! cached rollup value costs what its elements and their label sets take, and a label set
//! shared with a loaded series (the common case: elements carry the series' `Arc`) is counted
//! once, with the series.

use std::mem::size_of;

use super::value::{Elem, StepValue, Window};
use crate::histogram::Histogram;
use crate::labels::{Label, Labels};
use crate::sample::{HistogramSample, Sample, SeriesSamples};

/// Bytes of one sample in a `Vec<Sample>`.
pub const SAMPLE_BYTES: usize = size_of::<Sample>();

/// Heap bytes of a label set held by this holder alone: 0 when it is shared (another holder
/// already counted it).
pub fn labels_bytes(labels: &Labels) -> usize {
    if labels.is_shared() {
        return 0;
    }
    labels_heap_bytes(labels)
}

/// Heap bytes of a label set: its vector, strings and reference count.
pub fn labels_heap_bytes(labels: &Labels) -> usize {
    let strings: usize = labels.iter().map(|l| l.name.capacity() + l.value.capacity()).sum();
    2 * size_of::<usize>() + labels.len() * size_of::<Label>() + strings
}

/// A loaded series: samples (by capacity), histograms, labels and the struct.
pub fn series_bytes(s: &SeriesSamples) -> usize {
    size_of::<SeriesSamples>()
        + s.samples.capacity() * SAMPLE_BYTES
        + histograms_bytes(&s.histograms)
        + labels_heap_bytes(&s.labels)
}

/// Histogram points: each point and its histogram (buckets by capacity), counted whether or
/// not the histogram is shared (an upper bound; histograms are rare).
pub fn histograms_bytes(h: &[HistogramSample]) -> usize {
    h.iter().map(|p| size_of::<HistogramSample>() + histogram_bytes(&p.histogram)).sum()
}

/// One histogram: the struct and its vectors by capacity.
pub fn histogram_bytes(h: &Histogram) -> usize {
    size_of::<Histogram>()
        + (h.positive_buckets.capacity() + h.negative_buckets.capacity() + h.custom_values.capacity())
            * size_of::<f64>()
        + (h.positive_spans.capacity() + h.negative_spans.capacity()) * size_of::<crate::histogram::Span>()
}

/// An instant vector's elements.
pub fn elems_bytes(v: &[Elem]) -> usize {
    v.iter().map(|e| size_of::<Elem>() + labels_bytes(&e.labels) + e.hist.as_deref().map_or(0, histogram_bytes)).sum()
}

/// A range vector's windows.
pub fn windows_bytes(v: &[Window]) -> usize {
    v.iter()
        .map(|w| {
            size_of::<Window>()
                + w.samples.capacity() * SAMPLE_BYTES
                + histograms_bytes(&w.histograms)
                + labels_bytes(&w.labels)
        })
        .sum()
}

/// One step's value.
pub fn step_value_bytes(v: &StepValue) -> usize {
    size_of::<StepValue>()
        + match v {
            StepValue::Scalar(_) => 0,
            StepValue::Vector(e) => elems_bytes(e),
            StepValue::Matrix(w) => windows_bytes(w),
            StepValue::String(s) => s.capacity(),
        }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_label_sets_count_once() {
        let labels = Labels::from_pairs([("__name__", "m"), ("job", "a")]).unwrap();
        let alone = labels_bytes(&labels);
        assert!(alone >= 2 * size_of::<Label>() + 5, "{alone}");
        let elems = vec![Elem::new(labels.clone(), 1.0, false), Elem::new(labels.clone(), 2.0, false)];
        assert_eq!(elems_bytes(&elems), 2 * size_of::<Elem>());
        let series = SeriesSamples { labels, samples: Vec::with_capacity(100), histograms: Vec::new() };
        assert!(series_bytes(&series) >= 100 * SAMPLE_BYTES + alone);
    }
}
