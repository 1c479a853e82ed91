//! The instant functions of native histograms: `histogram_count`, `histogram_sum`,
//! `histogram_avg`, `histogram_stddev`, `histogram_stdvar`, and the native half of
//! `histogram_quantile` and `histogram_fraction` (the classic half is in `histogram.rs`).
//! Every result is a float that drops the metric name; float inputs are skipped, as in
//! Prometheus' `simpleHistogramFunc`.

use std::collections::HashSet;

use super::context::Context;
use crate::histogram::{self, Histogram};
use crate::labels::{Labels, METRIC_NAME};
use crate::promql::value::Elem;

/// A property of one histogram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Property {
    Count,
    Sum,
    Avg,
    StdDev,
    StdVar,
}

impl Property {
    /// The registry: function name -> property.
    pub(crate) fn of(name: &str) -> Option<Self> {
        Some(match name {
            "histogram_count" => Self::Count,
            "histogram_sum" => Self::Sum,
            "histogram_avg" => Self::Avg,
            "histogram_stddev" => Self::StdDev,
            "histogram_stdvar" => Self::StdVar,
            _ => return None,
        })
    }

    fn of_histogram(self, h: &Histogram) -> f64 {
        match self {
            Self::Count => h.count,
            Self::Sum => h.sum,
            Self::Avg => h.sum / h.count,
            Self::StdDev => histogram::std_dev(h),
            Self::StdVar => histogram::std_var(h),
        }
    }
}

/// `histogram_count(v)` and its siblings: the property of every histogram of `v`.
pub(crate) fn property(p: Property, v: Vec<Elem>) -> Vec<Elem> {
    v.into_iter().filter_map(|e| Some(Elem::new(e.labels, p.of_histogram(e.hist.as_deref()?), true))).collect()
}

/// Splits `v` into its native histograms and its floats (classic buckets, keyed by their
/// labels without `le`). A native histogram whose labels equal the key of a classic
/// histogram is a conflict: both are dropped, with Prometheus' warning.
pub(crate) fn split_classic(cx: &dyn Context, v: Vec<Elem>) -> (Vec<Elem>, Vec<Elem>) {
    let (natives, floats): (Vec<Elem>, Vec<Elem>) = v.into_iter().partition(|e| e.hist.is_some());
    if natives.is_empty() {
        return (natives, floats);
    }
    let classic_key = |l: &Labels| Labels::from_trusted(l.iter().filter(|l| l.name != "le").cloned().collect());
    let classic: HashSet<Labels> = floats.iter().map(|e| classic_key(&e.labels)).collect();
    let mut conflicts: HashSet<Labels> = HashSet::new();
    let natives = natives
        .into_iter()
        .filter(|e| {
            if !classic.contains(&e.labels) {
                return true;
            }
            let name = e.labels.get(METRIC_NAME).unwrap_or("");
            cx.warn(format!("vector contains a mix of classic and native histograms for metric name {name:?}"));
            conflicts.insert(e.labels.clone());
            false
        })
        .collect();
    let floats = if conflicts.is_empty() {
        floats
    } else {
        floats.into_iter().filter(|e| !conflicts.contains(&classic_key(&e.labels))).collect()
    };
    (natives, floats)
}

/// `histogram_quantile(phi, ...)` of native histograms, raising the info each estimate notes.
pub(crate) fn quantiles(cx: &dyn Context, phi: f64, natives: &[Elem]) -> Vec<Elem> {
    estimates(cx, natives, |h| histogram::quantile(phi, h))
}

/// `histogram_fraction(lower, upper, ...)` of native histograms.
pub(crate) fn fractions(cx: &dyn Context, lower: f64, upper: f64, natives: &[Elem]) -> Vec<Elem> {
    estimates(cx, natives, |h| histogram::fraction(lower, upper, h))
}

fn estimates(cx: &dyn Context, natives: &[Elem], f: impl Fn(&Histogram) -> histogram::Estimate) -> Vec<Elem> {
    natives
        .iter()
        .filter_map(|e| {
            let est = f(e.hist.as_deref()?);
            if let Some(note) = est.note {
                cx.info(note.message_for(e.labels.get(METRIC_NAME).unwrap_or("")));
            }
            Some(Elem::new(e.labels.clone(), est.value, true))
        })
        .collect()
}

/// A histogram as Prometheus' `FloatHistogram.String` writes it, the label value
/// `count_values` gives a histogram: `{count:20, sum:10, [-2,-1):2, [-0.001,0.001]:2,
/// (0.5,1]:1}`, non-empty buckets in ascending order of value, numbers as Go's `%g`.
pub(crate) fn histogram_string(h: &Histogram) -> String {
    let mut out = format!("{{count:{}, sum:{}", go_g(h.count), go_g(h.sum));
    let negative: Vec<histogram::Bucket> = h.negative_bucket_iter().filter(|b| b.count != 0.0).collect();
    let zero = (h.zero_count != 0.0).then(|| h.zero_bucket());
    let positive = h.positive_bucket_iter().filter(|b| b.count != 0.0);
    for b in negative.into_iter().rev().chain(zero).chain(positive) {
        out.push_str(&format!(
            ", {}{},{}{}:{}",
            if b.lower_inclusive { '[' } else { '(' },
            go_g(b.lower),
            go_g(b.upper),
            if b.upper_inclusive { ']' } else { ')' },
            go_g(b.count)
        ));
    }
    out.push('}');
    out
}

/// Go's `%g` of a float (`strconv.FormatFloat(v, 'g', -1, 64)`): the shortest decimal, in
/// exponent form (`1e+06`, `1e-05`) when the decimal exponent is below -4 or at least 6.
fn go_g(v: f64) -> String {
    if v.is_nan() {
        return "NaN".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "+Inf".into() } else { "-Inf".into() };
    }
    if v == 0.0 {
        return if v.is_sign_negative() { "-0".into() } else { "0".into() };
    }
    let e = format!("{v:e}");
    let (mantissa, exp) = e.split_once('e').unwrap_or((&e, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if !(-4..6).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        return format!("{mantissa}e{sign}{:02}", exp.unsigned_abs());
    }
    format!("{v}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::histogram::Span;

    #[test]
    fn histogram_string_is_prometheus_string() {
        // The histogram of Prometheus' count_values test (aggregators.test), with its label.
        let h = Histogram {
            schema: 0,
            zero_threshold: 0.001,
            zero_count: 2.0,
            count: 20.0,
            sum: 10.0,
            positive_spans: vec![Span { offset: 0, length: 2 }],
            positive_buckets: vec![1.0, 2.0],
            negative_spans: vec![Span { offset: 0, length: 2 }],
            negative_buckets: vec![1.0, 2.0],
            ..Histogram::default()
        };
        assert_eq!(
            histogram_string(&h),
            "{count:20, sum:10, [-2,-1):2, [-1,-0.5):1, [-0.001,0.001]:2, (0.5,1]:1, (1,2]:2}"
        );
        assert_eq!(go_g(1e21), "1e+21");
        assert_eq!(go_g(1e6), "1e+06");
        assert_eq!(go_g(1e-5), "1e-05");
        assert_eq!(go_g(123456.5), "123456.5");
    }
}
