//! Native histograms in the conformance runner, as Prometheus' `promqltest` handles them:
//! the histogram points of a `load` block, the native histograms with custom buckets that
//! `load_with_nhcb` derives from classic `_bucket`/`_count`/`_sum` series (its
//! `appendCustomHistogram` and `convertnhcb`), and the comparison of an expected histogram
//! with a result (`compareNativeHistogram`: both compacted, floats almost equal, the hint
//! only when the script gave one).

use std::collections::BTreeMap;

use saltdb::histogram::{Histogram, Span, CUSTOM_BUCKETS_SCHEMA};
use saltdb::labels::{Label, Labels};

use crate::script::{Load, SeqValue};

/// Histogram points of a load block: series labels -> histograms at `i * step`.
pub fn load_histograms(load: &Load) -> BTreeMap<Labels, Vec<(i64, Histogram)>> {
    let mut out: BTreeMap<Labels, Vec<(i64, Histogram)>> = BTreeMap::new();
    for s in load.series.iter().filter(|s| s.histogram) {
        let pts = out.entry(s.labels.clone()).or_default();
        for (i, v) in s.values.iter().enumerate() {
            if let SeqValue::Histogram(h) = v {
                pts.push((i as i64 * load.step_ms, h.histogram.clone()));
            }
        }
    }
    out
}

/// One NHCB being assembled from classic series at one timestamp (`convertnhcb.TempHistogram`).
#[derive(Default)]
struct Temp {
    /// `(le, cumulative count)`, ascending by `le`.
    buckets: Vec<(f64, f64)>,
    count: Option<f64>,
    sum: f64,
    error: Option<String>,
}

impl Temp {
    fn set_bucket(&mut self, le: f64, count: f64) {
        if self.error.is_some() {
            return;
        }
        if count < 0.0 {
            self.error = Some(format!("bucket count must be non-negative: le={le}, count={count}"));
            return;
        }
        let i = self.buckets.partition_point(|b| b.0 < le);
        if self.buckets.get(i).is_some_and(|b| b.0 == le) {
            return;
        }
        let below = i.checked_sub(1).and_then(|j| self.buckets.get(j)).map(|b| b.1);
        let above = self.buckets.get(i).map(|b| b.1);
        if below.is_some_and(|b| count < b) || above.is_some_and(|a| count > a) {
            self.error = Some(format!("count is not cumulative at le={le}"));
            return;
        }
        self.buckets.insert(i, (le, count));
    }

    /// The histogram (`TempHistogram.Convert`): the buckets' counts de-accumulated, a +Inf
    /// bucket added with the total count when missing, compacted.
    fn convert(mut self) -> Result<Histogram, String> {
        if let Some(e) = self.error {
            return Err(e);
        }
        let count = match self.count {
            Some(c) => c,
            None => self.buckets.last().map_or(0.0, |b| b.1),
        };
        if self.buckets.last().is_none_or(|b| b.0 != f64::INFINITY) {
            self.buckets.push((f64::INFINITY, count));
        }
        if self.buckets.last().is_some_and(|b| b.1 != count) {
            return Err(format!("count mismatch: count={count}"));
        }
        let integer = self.buckets.iter().all(|b| b.1 == b.1.round()) && count == count.round();
        let mut prev = 0.0;
        let counts: Vec<f64> = self
            .buckets
            .iter()
            .map(|b| {
                let c = b.1 - prev;
                prev = b.1;
                c
            })
            .collect();
        let custom_values: Vec<f64> = self.buckets.iter().map(|b| b.0).filter(|le| *le != f64::INFINITY).collect();
        let mut h = Histogram {
            schema: CUSTOM_BUCKETS_SCHEMA,
            count,
            sum: self.sum,
            positive_spans: vec![Span { offset: 0, length: u32::try_from(counts.len()).unwrap_or(u32::MAX) }],
            positive_buckets: counts,
            custom_values,
            integer,
            ..Histogram::default()
        };
        h.compact(if integer { 2 } else { 0 });
        Ok(h)
    }
}

/// The native histograms with custom buckets `load_with_nhcb` adds beside the classic series
/// of `floats` (series labels -> float points): one per classic histogram (labels without
/// `le`, the name without `_bucket`/`_count`/`_sum`) and timestamp.
///
/// # Errors
/// A conversion error, as Prometheus' load then fails.
pub fn nhcb_series(
    floats: &BTreeMap<Labels, Vec<(i64, f64)>>,
) -> Result<BTreeMap<Labels, Vec<(i64, Histogram)>>, String> {
    let mut temps: BTreeMap<Labels, BTreeMap<i64, Temp>> = BTreeMap::new();
    for (labels, points) in floats {
        let Some(name) = labels.metric_name() else { continue };
        let (base, kind) = if let Some(b) = name.strip_suffix("_bucket") {
            (b, 0)
        } else if let Some(b) = name.strip_suffix("_count") {
            (b, 1)
        } else if let Some(b) = name.strip_suffix("_sum") {
            (b, 2)
        } else {
            continue;
        };
        let le = if kind == 0 {
            match labels.get("le").and_then(parse_le) {
                Some(le) if !le.is_nan() => Some(le),
                _ => continue,
            }
        } else {
            None
        };
        let key = Labels::from_trusted(
            labels
                .iter()
                .filter(|l| l.name != "le")
                .map(|l| if l.name == "__name__" { Label::new("__name__", base) } else { l.clone() })
                .collect(),
        );
        let by_ts = temps.entry(key).or_default();
        for &(t, v) in points {
            let temp = by_ts.entry(t).or_default();
            match (kind, le) {
                (0, Some(le)) => temp.set_bucket(le, v),
                (1, _) if v < 0.0 => temp.error = Some(format!("count must be non-negative: {v}")),
                (1, _) => temp.count = Some(v),
                _ => temp.sum = v,
            }
        }
    }
    let mut out = BTreeMap::new();
    for (labels, by_ts) in temps {
        let hs = by_ts.into_iter().map(|(t, temp)| temp.convert().map(|h| (t, h))).collect::<Result<Vec<_>, _>>()?;
        out.insert(labels, hs);
    }
    Ok(out)
}

fn parse_le(s: &str) -> Option<f64> {
    match s {
        "+Inf" | "Inf" | "+inf" | "inf" => Some(f64::INFINITY),
        "-Inf" | "-inf" => Some(f64::NEG_INFINITY),
        _ => s.parse::<f64>().ok(),
    }
}
