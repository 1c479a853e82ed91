//! `GET|POST /federate?match[]=SELECTOR`: the latest sample of every matching series in the
//! Prometheus text exposition format (0.0.4), so a Prometheus can scrape saltdb as it scrapes
//! another Prometheus (`honor_labels: true`, `metrics_path: /federate`).
//!
//! Prometheus' semantics (`web/federate.go`): a series' latest sample at or before now, no
//! older than the lookback delta (`--query-lookback-delta`, 5m); a staleness marker as latest
//! sample hides the series (the format cannot carry it); every sample keeps its own timestamp;
//! families are ordered by metric name, each with `# TYPE <name> untyped`; series without a
//! name are left out; and `instance=""` is added to a series without an `instance` label (the
//! external label Prometheus always adds), so a scraper with `honor_labels: true` keeps the
//! series' own `job` and `instance`. Values are printed as Go prints them (`1e+06`). A metric
//! or label name outside the legacy character set is quoted as Prometheus 3's text format quotes
//! it (`{"sys.cpu.nice","service.name"="a"}`), which Prometheus 3 parses and 2.x does not.

use std::collections::HashSet;
use std::fmt::Write as _;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{RawQuery, State};
use axum::http::{header, HeaderMap, Method};
use axum::response::{IntoResponse, Response};

use super::error::ApiError;
use super::state::AppState;
use crate::labels::{is_legacy_metric_name, is_valid_label_name, Labels, METRIC_NAME};
use crate::sample::is_stale_marker;
use crate::tenant::Scope;
use axum::Extension;

/// The text exposition format's content type.
const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// One series' latest sample.
struct Latest {
    labels: Labels,
    timestamp_ms: i64,
    value: f64,
}

/// The handler.
///
/// # Errors
/// 400 for an invalid selector (parameters it does not read are ignored); 503 past the query timeout; 5xx when
/// storage fails.
pub async fn federate(
    State(state): State<Arc<AppState>>,
    Extension(scope): Extension<Scope>,
    method: Method,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let params = super::api::params(&state, &method, query.as_deref(), &headers, body).await?;
    let selectors = params.selectors("match[]")?;
    let maxt = crate::storage::now_ms();
    let mint = maxt.saturating_sub(state.engine.options().lookback_ms);
    let timeout = state.engine.options().timeout;
    let slot = super::api::query_slot(&state, timeout).await?;
    let (limits, _cancel_on_drop) = super::blocking::read_limits(Some(state.engine.options().max_samples), timeout);
    let querier = state.complete_querier(&scope, limits);
    let mut latest = super::blocking::run(move || {
        let _slot = slot;
        let mut seen: HashSet<Vec<u8>> = HashSet::new();
        let mut out = Vec::new();
        for matchers in &selectors {
            querier.for_each_series(matchers, mint, maxt, &mut |s| {
                if !seen.insert(s.labels.to_bytes()) {
                    return true;
                }
                let last = s.samples.iter().rev().find(|p| p.timestamp_ms >= mint && p.timestamp_ms <= maxt);
                if let Some(p) = last.filter(|p| !is_stale_marker(p.value)) {
                    out.push(Latest { labels: s.labels, timestamp_ms: p.timestamp_ms, value: p.value });
                }
                true
            })?;
        }
        Ok(out)
    })
    .await?;
    latest.sort_by(|a, b| (a.labels.metric_name(), &a.labels).cmp(&(b.labels.metric_name(), &b.labels)));
    Ok(([(header::CONTENT_TYPE, CONTENT_TYPE)], exposition(&latest)).into_response())
}

/// The samples in the text format, one `# TYPE` line per metric name.
fn exposition(latest: &[Latest]) -> String {
    let mut out = String::new();
    let mut family: Option<&str> = None;
    for s in latest {
        let Some(name) = s.labels.metric_name().filter(|n| !n.is_empty()) else { continue };
        let legacy = is_legacy_metric_name(name);
        if family != Some(name) {
            if legacy {
                let _ = writeln!(out, "# TYPE {name} untyped");
            } else {
                let _ = writeln!(out, "# TYPE \"{}\" untyped", escape(name));
            }
            family = Some(name);
        }
        // A name outside the legacy character set goes inside the braces, quoted, as Prometheus
        // 3's text format writes it (`{"sys.cpu.nice",host="a"}`).
        let mut first = true;
        if legacy {
            out.push_str(name);
        } else {
            let _ = write!(out, "{{\"{}\"", escape(name));
            first = false;
        }
        let mut has_instance = false;
        for l in s.labels.iter().filter(|l| l.name != METRIC_NAME && !l.value.is_empty()) {
            has_instance |= l.name == "instance";
            out.push(if first { '{' } else { ',' });
            first = false;
            if is_valid_label_name(&l.name) {
                let _ = write!(out, "{}=\"{}\"", l.name, escape(&l.value));
            } else {
                let _ = write!(out, "\"{}\"=\"{}\"", escape(&l.name), escape(&l.value));
            }
        }
        if !has_instance {
            out.push_str(if first { "{" } else { "," });
            out.push_str("instance=\"\"");
        }
        out.push_str("} ");
        out.push_str(&go_float(s.value));
        let _ = writeln!(out, " {}", s.timestamp_ms);
    }
    out
}

/// A label value (or a quoted name) as the text format writes it: `\`, `"` and newlines escaped.
fn escape(v: &str) -> String {
    v.replace('\\', r"\\").replace('"', "\\\"").replace('\n', r"\n")
}

/// `v` as Go's `strconv.FormatFloat(v, 'g', -1, 64)` prints it (what the text format uses):
/// the shortest decimal that reads back as `v`, in exponent form (`1e+06`, `1.5e-05`) when its
/// decimal exponent is below -4 or at least 6.
fn go_float(v: f64) -> String {
    if v.is_nan() {
        return "NaN".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "+Inf".into() } else { "-Inf".into() };
    }
    if v == 0.0 {
        return if v.is_sign_negative() { "-0".into() } else { "0".into() };
    }
    // Rust's `{:e}` is the shortest round-trip digits: `d.ddde<exp>`.
    let sci = format!("{:e}", v.abs());
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let sign = if v < 0.0 { "-" } else { "" };
    // Go decides with precision 6 when printing the shortest form.
    if !(-4..6).contains(&exp) {
        let frac = digits.get(1..).unwrap_or("");
        let head = digits.get(..1).unwrap_or("0");
        let dot = if frac.is_empty() { String::new() } else { format!(".{frac}") };
        let esign = if exp < 0 { '-' } else { '+' };
        return format!("{sign}{head}{dot}e{esign}{:02}", exp.abs());
    }
    format!("{sign}{}", v.abs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_print_as_go_prints_them() {
        let cases = [
            (1.0, "1"),
            (100.0, "100"),
            (123_456.0, "123456"),
            (1e6, "1e+06"),
            (1_234_567.0, "1.234567e+06"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (-2.5, "-2.5"),
            (1.5e300, "1.5e+300"),
            (f64::INFINITY, "+Inf"),
            (0.1, "0.1"),
        ];
        for (v, want) in cases {
            assert_eq!(go_float(v), want, "{v}");
        }
    }

    #[test]
    fn families_are_typed_and_instance_is_added() {
        let l = |pairs: &[(&str, &str)]| {
            Labels::from_trusted(pairs.iter().map(|(n, v)| crate::labels::Label::new(*n, *v)).collect())
        };
        let latest = vec![
            Latest { labels: l(&[("__name__", "a"), ("job", "x")]), timestamp_ms: 5, value: 1.0 },
            Latest { labels: l(&[("__name__", "a"), ("instance", "i"), ("job", "q\"")]), timestamp_ms: 6, value: 2.0 },
            Latest { labels: l(&[("__name__", "b")]), timestamp_ms: 7, value: 3.0 },
        ];
        assert_eq!(
            exposition(&latest),
            "# TYPE a untyped\na{job=\"x\",instance=\"\"} 1 5\na{instance=\"i\",job=\"q\\\"\"} 2 6\n# TYPE b untyped\nb{instance=\"\"} 3 7\n"
        );
    }

    /// Names outside the legacy character set (kept as sent by the ingest doors) are quoted as
    /// Prometheus 3's text format quotes them, so a federating Prometheus can parse the page.
    #[test]
    fn names_outside_the_legacy_set_are_quoted() {
        let l = |pairs: &[(&str, &str)]| {
            Labels::from_trusted(pairs.iter().map(|(n, v)| crate::labels::Label::new(*n, *v)).collect())
        };
        let latest = vec![
            Latest {
                labels: l(&[("__name__", "a"), ("instance", "i"), ("service.name", "s")]),
                timestamp_ms: 5,
                value: 1.0,
            },
            Latest {
                labels: l(&[("__name__", "sys.cpu.nice"), ("host", "h"), ("tag,x", "v")]),
                timestamp_ms: 6,
                value: 2.0,
            },
        ];
        assert_eq!(
            exposition(&latest),
            "# TYPE a untyped\na{instance=\"i\",\"service.name\"=\"s\"} 1 5\n\
             # TYPE \"sys.cpu.nice\" untyped\n{\"sys.cpu.nice\",host=\"h\",\"tag,x\"=\"v\",instance=\"\"} 2 6\n"
        );
    }
}
