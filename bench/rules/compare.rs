//! Whether the two targets recorded the same values: every recorded sample of the measured
//! evaluations, matched by series and by its distance from the end of the target's data (the
//! targets' data are a whole number of intervals apart, see `ingest.rs`).

use std::collections::{BTreeMap, HashMap};

use serde_json::Value;

use super::target::Target;

/// Largest relative difference counted as agreement.
pub(super) const TOLERANCE: f64 = 1e-9;

/// Recorded samples: value by (series, milliseconds after the end of the data).
pub(super) type Points = HashMap<(String, i64), f64>;

/// A series' labels as one sorted text.
fn key(metric: &Value) -> String {
    let labels: BTreeMap<&str, &str> = metric
        .as_object()
        .map(|m| m.iter().map(|(k, v)| (k.as_str(), v.as_str().unwrap_or(""))).collect())
        .unwrap_or_default();
    labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect::<Vec<_>>().join(",")
}

/// The samples of `selector` in `(from_ms, to_ms]`, read with one instant query of a range
/// vector at `to_ms`, keyed by their time after `end_ms`.
pub(super) fn fetch(target: &Target, selector: &str, from_ms: i64, to_ms: i64, end_ms: i64) -> Result<Points, String> {
    let range_s = ((to_ms - from_ms) / 1000).max(1);
    let query = format!("{selector}[{range_s}s]");
    let mut q = form_urlencoded::Serializer::new(String::new());
    q.append_pair("query", &query);
    q.append_pair("time", &format!("{}.{:03}", to_ms.div_euclid(1000), to_ms.rem_euclid(1000)));
    let body = target.get(&format!("/api/v1/query?{}", q.finish()))?;
    let v: Value = serde_json::from_slice(&body).map_err(|e| format!("{query}: {e}"))?;
    let mut out = Points::new();
    for s in v["data"]["result"].as_array().map_or(&[][..], Vec::as_slice) {
        let k = key(&s["metric"]);
        for p in s["values"].as_array().map_or(&[][..], Vec::as_slice) {
            let (Some(t), Some(x)) = (p[0].as_f64(), p[1].as_str().and_then(|x| x.parse::<f64>().ok())) else {
                continue;
            };
            out.insert((k.clone(), (t * 1000.0).round() as i64 - end_ms), x);
        }
    }
    Ok(out)
}

/// How two targets' recorded samples compare.
#[derive(Debug, Default)]
pub(super) struct Agreement {
    pub(super) compared: usize,
    pub(super) series: usize,
    pub(super) slots: usize,
    pub(super) differing: usize,
    /// Samples in the common window only one target recorded.
    pub(super) only_first: usize,
    pub(super) only_second: usize,
    pub(super) max_relative: f64,
    pub(super) examples: Vec<String>,
}

/// Compares the samples of `a` and `b` whose time after the end of the data is in `[lo, hi]`.
pub(super) fn agree(a: &Points, b: &Points, lo: i64, hi: i64) -> Agreement {
    let mut out = Agreement::default();
    let inside = |t: i64| (lo..=hi).contains(&t);
    let (mut series, mut slots) = (std::collections::HashSet::new(), std::collections::HashSet::new());
    for ((k, t), x) in a.iter().filter(|((_, t), _)| inside(*t)) {
        let Some(y) = b.get(&(k.clone(), *t)) else {
            out.only_first += 1;
            continue;
        };
        out.compared += 1;
        series.insert(k.as_str());
        slots.insert(*t);
        let relative = if x == y || (x.is_nan() && y.is_nan()) { 0.0 } else { (x - y).abs() / x.abs().max(y.abs()) };
        if relative.is_nan() || relative > TOLERANCE {
            out.differing += 1;
            if out.examples.len() < 5 {
                out.examples.push(format!("{{{k}}} at end{t:+} ms: {x} vs {y}"));
            }
        }
        if relative > out.max_relative {
            out.max_relative = relative;
        }
    }
    out.only_second = b.keys().filter(|(k, t)| inside(*t) && !a.contains_key(&(k.clone(), *t))).count();
    out.series = series.len();
    out.slots = slots.len();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_are_matched_by_series_and_time() {
        let a = Points::from([(("s".into(), 10), 1.0), (("s".into(), 20), 2.0), (("s".into(), 99), 5.0)]);
        let b = Points::from([(("s".into(), 10), 1.0 + 1e-12), (("s".into(), 20), 2.1), (("t".into(), 20), 1.0)]);
        let r = agree(&a, &b, 0, 50);
        assert_eq!((r.compared, r.differing, r.only_first, r.only_second), (2, 1, 0, 1));
        assert!(r.max_relative > 0.04 && r.examples.len() == 1);
    }
}
