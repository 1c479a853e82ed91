//! Histogram functions: over classic (`le`-labelled) bucket series here, over native
//! histograms in `native.rs` (an input vector may hold both), from their evaluated arguments.
//! Registry: [`lookup`] maps a function name to its [`HistogramFn`]; [`call`] computes it.

use std::collections::HashMap;

use super::args::Args;
use super::context::{Context, Spot};
use super::native::{self, Property};
use super::stats::format_float;
use crate::labels::Labels;
use crate::promql::error::Result;
use crate::promql::value::{Elem, StepValue};

const BUCKET_LABEL: &str = "le";

#[derive(Clone, Copy, Debug)]
struct Bucket {
    upper: f64,
    count: f64,
}

/// A histogram function.
#[derive(Clone, Copy, Debug)]
pub(crate) enum HistogramFn {
    /// `histogram_quantile(phi, v)`.
    Quantile,
    /// `histogram_fraction(lower, upper, v)`.
    Fraction,
    /// `histogram_count(v)`, `histogram_sum(v)`, ...: a property of each native histogram.
    Property(Property),
    /// `histogram_quantiles(v, "label", phi...)`, see [`labelled_quantiles`].
    Quantiles,
}

/// The registry: function name -> histogram function.
pub(crate) fn lookup(name: &str) -> Option<HistogramFn> {
    Some(match name {
        "histogram_quantile" => HistogramFn::Quantile,
        "histogram_fraction" => HistogramFn::Fraction,
        "histogram_quantiles" => HistogramFn::Quantiles,
        other => HistogramFn::Property(Property::of(other)?),
    })
}

/// Histogram function `f` of the evaluated arguments `args`.
pub(crate) fn call(cx: &dyn Context, f: HistogramFn, mut args: Args) -> Result<StepValue> {
    Ok(match f {
        HistogramFn::Quantile => {
            let phi = args.scalar(0)?;
            let v = args.vector(1)?;
            if !(0.0..=1.0).contains(&phi) {
                cx.warn_at(Spot::Param, format!("quantile value should be between 0 and 1, got {}", format_float(phi)));
            }
            let (natives, classic) = native::split_classic(cx, v);
            let mut out = native::quantiles(cx, phi, &natives);
            out.extend(per_histogram(cx, classic, |b, name| quantile_noting(cx, phi, b, name)));
            StepValue::Vector(out)
        }
        HistogramFn::Fraction => {
            let lower = args.scalar(0)?;
            let upper = args.scalar(1)?;
            let v = args.vector(2)?;
            let (natives, classic) = native::split_classic(cx, v);
            let mut out = native::fractions(cx, lower, upper, &natives);
            out.extend(per_histogram(cx, classic, |b, _| bucket_fraction(lower, upper, b)));
            StepValue::Vector(out)
        }
        HistogramFn::Property(p) => StepValue::Vector(native::property(p, args.vector(0)?)),
        HistogramFn::Quantiles => {
            let v = args.vector(0)?;
            let label = args.string(1)?;
            let phis: Vec<Result<f64>> = (2..args.len()).map(|i| args.scalar(i)).collect();
            labelled_quantiles(cx, v, &label, phis)?
        }
    })
}

/// `histogram_quantiles(v, "label", phi...)`: one output series per quantile, told apart by
/// `label`. The quantiles `phis` are taken one at a time, each after the previous one's
/// results (the evaluator evaluates each when it is taken).
pub(crate) fn labelled_quantiles(
    cx: &dyn Context,
    v: Vec<Elem>,
    label: &str,
    phis: impl IntoIterator<Item = Result<f64>>,
) -> Result<StepValue> {
    if !crate::promql::byte_escapes::is_utf8_label_name(label) {
        let label = crate::promql::byte_escapes::quote(label);
        return Err(crate::promql::error::EvalError::exec(format!("invalid label name {label}")));
    }
    let mut out = Vec::new();
    // The quantiles are the arguments from the third on.
    for (i, phi) in phis.into_iter().enumerate() {
        let phi = phi?;
        if !(0.0..=1.0).contains(&phi) {
            cx.warn_at(
                Spot::Arg(i + 2),
                format!("quantile value should be between 0 and 1, got {}", format_float(phi)),
            );
        }
        let (natives, classic) = native::split_classic(cx, v.clone());
        let mut res = native::quantiles(cx, phi, &natives);
        res.extend(per_histogram(cx, classic, |b, name| quantile_noting(cx, phi, b, name)));
        let tag = quantile_label(phi);
        for e in res {
            if e.labels.get(label).is_some() {
                return Err(crate::promql::error::EvalError::exec(
                    "vector cannot contain metrics with the same labelset",
                ));
            }
            out.push(Elem::new(crate::promql::value::with_label(&e.labels, label, &tag), e.value, e.drop_name));
        }
    }
    Ok(StepValue::Vector(out))
}

/// [`bucket_quantile`], raising an info when the buckets had to be made monotonic.
fn quantile_noting(cx: &dyn Context, phi: f64, b: &mut Vec<Bucket>, name: &str) -> f64 {
    let (v, forced) = bucket_quantile(phi, b);
    if forced {
        cx.info(format!(
            "input to histogram_quantile needed to be fixed for monotonicity (see https://prometheus.io/docs/prometheus/latest/querying/functions/#histogram_quantile) for metric name {name:?}"
        ));
    }
    v
}

/// A quantile as a label value: integral values keep one decimal (`1.0`).
fn quantile_label(phi: f64) -> String {
    let s = format_float(phi);
    if phi.is_finite() && !s.contains(['.', 'e']) {
        format!("{s}.0")
    } else {
        s
    }
}

/// Groups bucket series by their labels without `le` and the metric name, and computes `f`
/// over each group's buckets.
fn per_histogram(cx: &dyn Context, v: Vec<Elem>, mut f: impl FnMut(&mut Vec<Bucket>, &str) -> f64) -> Vec<Elem> {
    let mut index: HashMap<Labels, usize> = HashMap::new();
    let mut groups: Vec<(Labels, String, Vec<Bucket>)> = Vec::new();
    for e in v {
        let name = e.labels.metric_name().unwrap_or("").to_string();
        let le = e.labels.get(BUCKET_LABEL).unwrap_or("");
        let Some(upper) = parse_le(le) else {
            cx.warn(format!(
                "bucket label {BUCKET_LABEL:?} is missing or has a malformed value of {le:?} for metric name {name:?}"
            ));
            continue;
        };
        let key = Labels::from_trusted(e.labels.iter().filter(|l| l.name != BUCKET_LABEL).cloned().collect());
        let i = *index.entry(key.clone()).or_insert_with(|| {
            groups.push((key, name, Vec::new()));
            groups.len() - 1
        });
        if let Some(g) = groups.get_mut(i) {
            g.2.push(Bucket { upper, count: e.value });
        }
    }
    groups
        .into_iter()
        .map(|(labels, name, mut buckets)| {
            let v = f(&mut buckets, &name);
            Elem::new(labels, v, true)
        })
        .collect()
}

/// Parses an `le` value like Go's `strconv.ParseFloat` (accepts `+Inf`, `.2`, `1e0`).
fn parse_le(s: &str) -> Option<f64> {
    match s {
        "+Inf" | "Inf" | "+inf" | "inf" => Some(f64::INFINITY),
        "-Inf" | "-inf" => Some(f64::NEG_INFINITY),
        _ => s.parse::<f64>().ok().filter(|v| !v.is_nan() || s.eq_ignore_ascii_case("nan")),
    }
}

/// Sorts by upper bound and merges buckets with equal bounds.
fn prepare(buckets: &mut Vec<Bucket>) {
    buckets.sort_by(|a, b| a.upper.partial_cmp(&b.upper).unwrap_or(std::cmp::Ordering::Equal));
    let mut out: Vec<Bucket> = Vec::with_capacity(buckets.len());
    for b in buckets.iter() {
        match out.last_mut() {
            Some(last) if last.upper == b.upper => last.count += b.count,
            _ => out.push(*b),
        }
    }
    *buckets = out;
}

/// Makes counts non-decreasing: precision errors silently, real decreases reported.
fn ensure_monotonic(buckets: &mut [Bucket]) -> bool {
    let Some(mut prev) = buckets.first().map(|b| b.count) else {
        return false;
    };
    for b in buckets.iter_mut().skip(1) {
        let delta = (b.count - prev).abs();
        if delta != 0.0 && delta / b.count <= 1e-12 {
            b.count = prev;
        } else {
            prev = b.count;
        }
    }
    let mut forced = false;
    let mut max = buckets.first().map(|b| b.count).unwrap_or(0.0);
    for b in buckets.iter_mut().skip(1) {
        if b.count > max {
            max = b.count;
        } else if b.count < max {
            b.count = max;
            forced = true;
        }
    }
    forced
}

/// The φ-quantile of classic buckets, interpolated linearly within a bucket; also whether
/// monotonicity had to be forced.
fn bucket_quantile(q: f64, buckets: &mut Vec<Bucket>) -> (f64, bool) {
    if q.is_nan() {
        return (f64::NAN, false);
    }
    if q < 0.0 {
        return (f64::NEG_INFINITY, false);
    }
    if q > 1.0 {
        return (f64::INFINITY, false);
    }
    prepare(buckets);
    if !buckets.last().is_some_and(|b| b.upper == f64::INFINITY) {
        return (f64::NAN, false);
    }
    let forced = ensure_monotonic(buckets);
    let n = buckets.len();
    if n < 2 {
        return (f64::NAN, false);
    }
    let at = |i: usize| buckets.get(i).copied().unwrap_or(Bucket { upper: f64::NAN, count: f64::NAN });
    let observations = at(n - 1).count;
    if observations == 0.0 || observations.is_nan() {
        return (f64::NAN, false);
    }
    let mut rank = q * observations;
    let b = buckets.get(..n - 1).map(|s| s.partition_point(|x| x.count < rank)).unwrap_or(0);
    if b == n - 1 {
        return (at(n - 2).upper, forced);
    }
    if b == 0 && at(0).upper <= 0.0 {
        return (at(0).upper, forced);
    }
    let (mut start, end, mut count) = (0.0, at(b).upper, at(b).count);
    if b > 0 {
        start = at(b - 1).upper;
        count -= at(b - 1).count;
        rank -= at(b - 1).count;
    }
    (start + (end - start) * (rank / count), forced)
}

/// Fraction of observations between `lower` and `upper`, interpolated linearly within buckets
/// (0 is the natural lower bound of a first bucket with a positive upper bound).
fn bucket_fraction(lower: f64, upper: f64, buckets: &mut Vec<Bucket>) -> f64 {
    prepare(buckets);
    if !buckets.last().is_some_and(|b| b.upper == f64::INFINITY) {
        return f64::NAN;
    }
    ensure_monotonic(buckets);
    let total = buckets.last().map(|b| b.count).unwrap_or(0.0);
    if total == 0.0 || lower.is_nan() || upper.is_nan() {
        return f64::NAN;
    }
    if lower >= upper {
        return 0.0;
    }
    let (mut rank, mut lower_rank, mut upper_rank) = (0.0, 0.0, 0.0);
    let (mut lower_set, mut upper_set) = (false, false);
    let mut prev_upper = f64::NEG_INFINITY;
    for (i, b) in buckets.iter().enumerate() {
        let lo = if i == 0 && b.upper > 0.0 { 0.0 } else { prev_upper };
        let count = b.count - rank;
        // No interpolation inside a bucket of infinite width: its observations count as
        // sitting at the infinite end.
        let interp = |v: f64| {
            if lo.is_infinite() {
                rank + count
            } else if b.upper.is_infinite() {
                rank
            } else {
                rank + count * (v - lo) / (b.upper - lo)
            }
        };
        if !lower_set && lo >= lower {
            (lower_rank, lower_set) = (rank, true);
        }
        if !upper_set && lo >= upper {
            (upper_rank, upper_set) = (rank, true);
        }
        if lower_set && upper_set {
            break;
        }
        if !lower_set && lo < lower && b.upper > lower {
            (lower_rank, lower_set) = (interp(lower), true);
        }
        if !upper_set && lo < upper && b.upper > upper {
            (upper_rank, upper_set) = (interp(upper), true);
        }
        if lower_set && upper_set {
            break;
        }
        rank = b.count;
        prev_upper = b.upper;
    }
    if !lower_set || lower_rank > total {
        lower_rank = total;
    }
    if !upper_set || upper_rank > total {
        upper_rank = total;
    }
    (upper_rank - lower_rank) / total
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(upper: f64, count: f64) -> Bucket {
        Bucket { upper, count }
    }

    #[test]
    fn quantile_interpolates_within_bucket() {
        let mut v = vec![b(1.0, 10.0), b(2.0, 20.0), b(f64::INFINITY, 20.0)];
        assert_eq!(bucket_quantile(0.5, &mut v).0, 1.0);
        let mut v = vec![b(1.0, 10.0), b(2.0, 20.0), b(f64::INFINITY, 20.0)];
        assert_eq!(bucket_quantile(0.75, &mut v).0, 1.5);
    }

    #[test]
    fn fraction_of_everything_is_one() {
        let mut v = vec![b(1.0, 10.0), b(2.0, 20.0), b(f64::INFINITY, 20.0)];
        assert_eq!(bucket_fraction(f64::NEG_INFINITY, f64::INFINITY, &mut v), 1.0);
    }

    #[test]
    fn histogram_quantile_of_bucket_values() {
        use crate::promql::functions::context::Recorder;
        let bucket = |le: &str, count: f64| {
            Elem::new(Labels::from_pairs([("__name__", "h_bucket"), ("le", le)]).unwrap(), count, false)
        };
        let buckets = || StepValue::Vector(vec![bucket("1", 10.0), bucket("2", 20.0), bucket("+Inf", 20.0)]);
        let quantile = |cx: &Recorder, phi: f64| match call(
            cx,
            HistogramFn::Quantile,
            Args::new(vec![StepValue::Scalar(phi), buckets()]),
        ) {
            Ok(StepValue::Vector(v)) => v.iter().map(|e| (e.labels.get("le").is_none(), e.value)).collect::<Vec<_>>(),
            other => panic!("{:?}", other.map(|v| v.type_name())),
        };
        let cx = Recorder::default();
        assert_eq!(quantile(&cx, 0.75), [(true, 1.5)]);
        assert!(cx.annotations.borrow().is_empty());
        assert_eq!(quantile(&cx, 2.0), [(true, f64::INFINITY)]);
        assert_eq!(
            cx.annotations.borrow().warnings(),
            ["PromQL warning: quantile value should be between 0 and 1, got 2"]
        );
    }
}
