//! Rebuilding bucket layouts: spans from sorted `(index, count)` entries, schema reduction and
//! compaction (Prometheus' `reduceResolution` and `Compact`).

use super::buckets::{target_index, Entries};
use super::types::{is_custom_schema, is_exponential_schema, Histogram, Span};
use super::validate::{check_spans, Side, ValidationError};

/// Why a layout change cannot be made.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ArithError {
    /// One histogram has custom buckets, the other exponential ones.
    #[error("cannot apply this operation on histograms with a mix of exponential and custom bucket schemas")]
    IncompatibleSchema,
    /// The target schema is finer than the current one, or either is the custom schema.
    #[error("cannot reduce resolution from schema {from} to {to}")]
    CannotReduce {
        /// The histogram's schema.
        from: i32,
        /// The schema asked for.
        to: i32,
    },
    /// The histogram's spans do not fit its buckets.
    #[error(transparent)]
    Invalid(#[from] ValidationError),
}

/// Spans and counts of one side from entries with ascending indices: each maximal run of
/// consecutive indices becomes one span.
pub(crate) fn build(entries: impl IntoIterator<Item = (i32, f64)>) -> (Vec<Span>, Vec<f64>) {
    let mut spans: Vec<Span> = Vec::new();
    let mut counts = Vec::new();
    let mut last = 0i32;
    for (index, count) in entries {
        match spans.last_mut() {
            Some(span) if index == last.wrapping_add(1) => span.length += 1,
            Some(_) => spans.push(Span { offset: index.wrapping_sub(last).wrapping_sub(1), length: 1 }),
            None => spans.push(Span { offset: index, length: 1 }),
        }
        counts.push(count);
        last = index;
    }
    (spans, counts)
}

/// Entries of schema `origin` merged into the buckets of schema `target <= origin`, counts of a
/// target bucket summed in index order.
pub(crate) fn reduce(entries: impl IntoIterator<Item = (i32, f64)>, origin: i32, target: i32) -> Vec<(i32, f64)> {
    let mut out: Vec<(i32, f64)> = Vec::new();
    for (index, count) in entries {
        let t = target_index(index, origin, target);
        match out.last_mut() {
            Some((last, sum)) if *last == t => *sum += count,
            _ => out.push((t, count)),
        }
    }
    out
}

/// The non-empty entries (`count != 0`, so NaN stays and -0.0 goes), gaps of at most
/// `max_empty` buckets filled with zeros.
fn compact_side(spans: &[Span], counts: &[f64], max_empty: usize) -> (Vec<Span>, Vec<f64>) {
    let mut filled: Vec<(i32, f64)> = Vec::new();
    for (index, count) in Entries::new(spans, counts).filter(|&(_, c)| c != 0.0) {
        if let Some(&(last, _)) = filled.last() {
            let gap = i64::from(index) - i64::from(last) - 1;
            if (1..=i64::try_from(max_empty).unwrap_or(i64::MAX)).contains(&gap) {
                filled.extend((1..=gap).map(|k| ((i64::from(last) + k) as i32, 0.0)));
            }
        }
        filled.push((index, count));
    }
    build(filled)
}

impl Histogram {
    /// Prometheus' `Compact`: drops empty buckets, then splits spans at runs of more than
    /// `max_empty` empty buckets and joins spans at most `max_empty` apart (filling the gap with
    /// empty buckets). With `max_empty == 0` the layout is canonical: non-empty buckets only,
    /// one span per run of consecutive indices.
    pub fn compact(&mut self, max_empty: usize) {
        (self.positive_spans, self.positive_buckets) =
            compact_side(&self.positive_spans, &self.positive_buckets, max_empty);
        (self.negative_spans, self.negative_buckets) =
            compact_side(&self.negative_spans, &self.negative_buckets, max_empty);
    }

    /// Merges buckets into the coarser exponential schema `target` (Prometheus'
    /// `ReduceResolution`); the same schema is a no-op.
    ///
    /// # Errors
    /// [`ArithError::CannotReduce`] for custom buckets, a finer or non-exponential target;
    /// [`ArithError::Invalid`] when spans have negative offsets after the first or do not fit
    /// the buckets.
    pub fn reduce_resolution(&mut self, target: i32) -> Result<(), ArithError> {
        let cannot = ArithError::CannotReduce { from: self.schema, to: target };
        if is_custom_schema(self.schema) || !is_exponential_schema(target) || target > self.schema {
            return Err(cannot);
        }
        check_spans(Side::Positive, &self.positive_spans, self.positive_buckets.len())?;
        check_spans(Side::Negative, &self.negative_spans, self.negative_buckets.len())?;
        if target == self.schema {
            return Ok(());
        }
        let pos = reduce(Entries::new(&self.positive_spans, &self.positive_buckets), self.schema, target);
        let neg = reduce(Entries::new(&self.negative_spans, &self.negative_buckets), self.schema, target);
        (self.positive_spans, self.positive_buckets) = build(pos);
        (self.negative_spans, self.negative_buckets) = build(neg);
        self.schema = target;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spans(v: &[(i32, u32)]) -> Vec<Span> {
        v.iter().map(|&(offset, length)| Span { offset, length }).collect()
    }

    #[test]
    fn compact_drops_empty_buckets_and_joins_spans() {
        let mut h = Histogram {
            positive_spans: spans(&[(-2, 4), (0, 2), (3, 0), (1, 3)]),
            positive_buckets: vec![0.0, 1.0, 0.0, 2.0, 0.0, 0.0, 3.0, -0.0, f64::NAN],
            ..Histogram::default()
        };
        let mut h1 = h.clone();
        h.compact(0);
        assert_eq!(h.positive_spans, spans(&[(-1, 1), (1, 1), (6, 1), (1, 1)]));
        assert_eq!(h.positive_buckets[..3], [1.0, 2.0, 3.0]);
        assert!(h.positive_buckets[3].is_nan());
        h1.compact(1);
        assert_eq!(h1.positive_spans, spans(&[(-1, 3), (6, 3)]));
        assert_eq!(h1.positive_buckets[..5], [1.0, 0.0, 2.0, 3.0, 0.0]);
    }

    #[test]
    fn reduce_resolution_merges_pairs() {
        let mut h = Histogram {
            schema: 1,
            positive_spans: spans(&[(-1, 4), (2, 1)]),
            positive_buckets: vec![1.0, 2.0, 3.0, 4.0, 5.0],
            ..Histogram::default()
        };
        h.reduce_resolution(0).unwrap();
        // Indices -1, 0 -> 0; 1, 2 -> 1; 5 -> 3.
        assert_eq!(h.positive_spans, spans(&[(0, 2), (1, 1)]));
        assert_eq!(h.positive_buckets, vec![3.0, 7.0, 5.0]);
        assert_eq!(h.reduce_resolution(1), Err(ArithError::CannotReduce { from: 0, to: 1 }));
    }
}
