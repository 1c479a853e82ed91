//! promtool's wording of unit test failures: Go's duration and float formats, label sets as
//! `{a="b", c="d"}`, alerts as numbered `Labels:`/`Annotations:` pairs.

use std::collections::BTreeMap;

use crate::labels::Labels;
use crate::rules::alert::AlertState;
use crate::rules::group::GroupRun;

use super::file::ExpectedAlert;

/// Go's `time.Duration.String()` of whole milliseconds: `0s`, `1.5s`, `5m0s`, `1h0m0s`, `250ms`.
pub fn go_duration(ms: i64) -> String {
    if ms == 0 {
        return "0s".to_owned();
    }
    let sign = if ms < 0 { "-" } else { "" };
    let ms = ms.unsigned_abs();
    if ms < 1000 {
        return format!("{sign}{ms}ms");
    }
    let (h, m, s, frac) = (ms / 3_600_000, ms / 60_000 % 60, ms / 1000 % 60, ms % 1000);
    let secs = if frac == 0 { format!("{s}s") } else { format!("{s}.{}s", format!("{frac:03}").trim_end_matches('0')) };
    match (h, m) {
        (0, 0) => format!("{sign}{secs}"),
        (0, m) => format!("{sign}{m}m{secs}"),
        (h, m) => format!("{sign}{h}h{m}m{secs}"),
    }
}

/// Go's `strconv.FormatFloat(v, 'E', -1, 64)`: `1E+00`, `3.5E+01`, `NaN`, `+Inf`.
pub fn go_float_e(v: f64) -> String {
    if v.is_nan() {
        return "NaN".to_owned();
    }
    if v.is_infinite() {
        return if v > 0.0 { "+Inf" } else { "-Inf" }.to_owned();
    }
    let text = format!("{v:E}");
    let (mantissa, exponent) = text.split_once('E').unwrap_or((&text, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let sign = if exponent < 0 { '-' } else { '+' };
    format!("{mantissa}E{sign}{:02}", exponent.unsigned_abs())
}

/// Prometheus 2's `Labels.String()`: every label, `__name__` included, Go-quoted.
pub fn labels_text(labels: impl IntoIterator<Item = (String, String)>) -> String {
    let parts: Vec<String> = labels.into_iter().map(|(k, v)| format!("{k}={v:?}")).collect();
    format!("{{{}}}", parts.join(", "))
}

fn pairs(labels: &Labels) -> Vec<(String, String)> {
    labels.iter().map(|l| (l.name.clone(), l.value.clone())).collect()
}

/// Samples as promtool prints them: `{labels} value, ...`, or `nil`.
pub fn samples_text(samples: &[(Labels, String)]) -> String {
    if samples.is_empty() {
        return "nil".to_owned();
    }
    let parts: Vec<String> = samples.iter().map(|(l, v)| format!("{} {v}", labels_text(pairs(l)))).collect();
    parts.join(", ")
}

/// A sample's value as promtool prints it: the float in Go's `%E` form, or the histogram.
pub fn value_text(value: f64, histogram: Option<&crate::histogram::Histogram>) -> String {
    match histogram {
        Some(h) => format!("{h:?}"),
        None => go_float_e(value),
    }
}

/// Whether two floats are equal: exactly (NaN never equals), or at most one step apart when
/// `fuzzy`.
pub fn float_equal(a: f64, b: f64, fuzzy: bool) -> bool {
    a == b || (fuzzy && (a.next_down() == b || a.next_up() == b))
}

/// Alerts compared by labels and annotations, in a fixed order.
#[derive(Debug, PartialEq)]
pub struct AlertText(Vec<(BTreeMap<String, String>, BTreeMap<String, String>)>);

impl AlertText {
    /// The firing alerts of every alerting rule named `name`, across groups.
    pub fn firing(groups: &[GroupRun], name: &str) -> Self {
        let mut out = Vec::new();
        for run in groups.iter().flat_map(|g| &g.rules).filter(|r| r.rule.name() == name) {
            for a in run.alerts.iter().filter(|a| a.state == AlertState::Firing) {
                let labels = pairs(&a.labels).into_iter().collect();
                let annotations = a.annotations.iter().map(|l| (l.name.clone(), l.value.clone())).collect();
                out.push((labels, annotations));
            }
        }
        out.sort();
        Self(out)
    }

    /// The expected alerts of a test, `alertname` added.
    pub fn expected(name: &str, alerts: &[ExpectedAlert]) -> Self {
        let mut out: Vec<_> = alerts
            .iter()
            .map(|a| {
                let mut labels = a.exp_labels.clone();
                labels.insert("alertname".to_owned(), name.to_owned());
                (labels, a.exp_annotations.clone())
            })
            .collect();
        out.sort();
        Self(out)
    }

    /// Same alerts (fuzzy makes no difference: alerts hold no floats).
    pub fn equals(&self, other: &Self, _fuzzy: bool) -> bool {
        self == other
    }

    /// promtool's listing, continuation lines indented by `indent`.
    pub fn indented(&self, indent: &str) -> String {
        if self.0.is_empty() {
            return "[]".to_owned();
        }
        let mut s = String::from("[");
        for (i, (labels, annotations)) in self.0.iter().enumerate() {
            if i > 0 {
                s.push(',');
            }
            let one =
                format!("\nLabels:{}\nAnnotations:{}", labels_text(labels.clone()), labels_text(annotations.clone()));
            s.push_str(&format!("\n{i}:{}", one.replace('\n', "\n  ")));
        }
        s.push_str("\n]");
        s.replace('\n', &format!("\n{indent}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_go_prints_them() {
        let cases = [
            (0, "0s"),
            (250, "250ms"),
            (1500, "1.5s"),
            (300_000, "5m0s"),
            (3_600_000, "1h0m0s"),
            (3_661_000, "1h1m1s"),
        ];
        for (ms, want) in cases {
            assert_eq!(go_duration(ms), want);
        }
    }

    #[test]
    fn floats_read_as_go_prints_them() {
        let cases = [(1.0, "1E+00"), (35.0, "3.5E+01"), (0.00125, "1.25E-03"), (f64::INFINITY, "+Inf"), (0.0, "0E+00")];
        for (v, want) in cases {
            assert_eq!(go_float_e(v), want);
        }
    }

    #[test]
    fn fuzzy_equality_allows_one_step() {
        assert!(float_equal(0.1 + 0.2, 0.3, true));
        assert!(!float_equal(0.1 + 0.2, 0.3, false));
        assert!(!float_equal(f64::NAN, f64::NAN, true));
    }
}
