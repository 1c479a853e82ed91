//! What Alertmanager receives: the `postableAlert` of its v2 API, built from an alert due to be
//! sent the way Prometheus builds it (`rules.SendAlerts`, then `notifier.Manager.Send`).
//!
//! - `labels`: the alert's labels, plus every external label the alert does not have;
//! - `annotations`: the expanded annotations, left out when there are none (Go's `omitempty`);
//! - `startsAt`: when the alert fired (left out if it never did: Alertmanager then starts it at
//!   `endsAt`, as it does for Go's zero time);
//! - `endsAt`: when it was resolved, or else until when it is valid;
//! - `generatorURL`: the external URL and `/graph?g0.expr=<expr>&g0.tab=1`.
//!
//! Times are RFC 3339 in UTC with milliseconds, as Go's `strfmt.DateTime` writes them. Keys come
//! in the order Prometheus writes them.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::rules::group::Outgoing;
use crate::tenant::TenantId;

/// One alert as Alertmanager's `POST /api/v2/alerts` takes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PostableAlert {
    /// Descriptive text; not part of the alert's identity.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// Resolution time, or the time until which the alert is valid.
    #[serde(rename = "endsAt")]
    pub ends_at: String,
    /// Firing time.
    #[serde(rename = "startsAt", skip_serializing_if = "Option::is_none")]
    pub starts_at: Option<String>,
    /// A link to the expression that raised the alert.
    #[serde(rename = "generatorURL")]
    pub generator_url: String,
    /// The alert's identity.
    pub labels: BTreeMap<String, String>,
    /// The tenant it is sent for (`X-Scope-OrgID`), not part of the body.
    #[serde(skip)]
    pub tenant: Option<TenantId>,
}

impl PostableAlert {
    /// The alert of `outgoing`, with the `external_labels` it lacks, linked from `external_url`.
    pub fn new(outgoing: &Outgoing, external_labels: &BTreeMap<String, String>, external_url: &str) -> Self {
        let alert = &outgoing.alert;
        let mut labels: BTreeMap<String, String> =
            alert.labels.iter().map(|l| (l.name.clone(), l.value.clone())).collect();
        for (name, value) in external_labels {
            if labels.get(name).is_none_or(|v| v.is_empty()) {
                labels.insert(name.clone(), value.clone());
            }
        }
        Self {
            annotations: alert.annotations.iter().map(|l| (l.name.clone(), l.value.clone())).collect(),
            ends_at: rfc3339_millis(alert.resolved_at_ms.unwrap_or(alert.valid_until_ms)),
            starts_at: alert.fired_at_ms.map(rfc3339_millis),
            generator_url: generator_url(external_url, &outgoing.expr),
            labels,
            tenant: outgoing.tenant.clone(),
        }
    }
}

/// Prometheus' link to the table view of `expr`: `<external_url>/graph?g0.expr=...&g0.tab=1`.
pub fn generator_url(external_url: &str, expr: &str) -> String {
    format!("{}/graph?g0.expr={}&g0.tab=1", external_url.trim_end_matches('/'), query_escape(expr))
}

/// Go's `url.QueryEscape`: letters, digits and `-_.~` as they are, a space as `+`, every other
/// byte as `%XX` (upper-case hex).
pub fn query_escape(text: &str) -> String {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = String::with_capacity(text.len() * 3 / 2);
    for &b in text.as_bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => out.push(char::from(b)),
            b' ' => out.push('+'),
            _ => {
                out.push('%');
                out.push(char::from(HEX[usize::from(b >> 4)]));
                out.push(char::from(HEX[usize::from(b & 0xf)]));
            }
        }
    }
    out
}

/// `ms` (Unix milliseconds) as `2006-01-02T15:04:05.000Z`; a time chrono cannot represent (more
/// than 262,000 years away) as the Unix epoch.
pub fn rfc3339_millis(ms: i64) -> String {
    DateTime::<Utc>::from_timestamp_millis(ms)
        .unwrap_or(DateTime::UNIX_EPOCH)
        .format("%Y-%m-%dT%H:%M:%S%.3fZ")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::labels::{Label, Labels};
    use crate::rules::alert::{Alert, AlertState};

    fn outgoing(resolved_at_ms: Option<i64>, annotations: Vec<Label>) -> Outgoing {
        Outgoing {
            alert: Alert {
                labels: Labels::from_trusted(vec![
                    Label::new("alertname", "Down"),
                    Label::new("instance", "a:9100"),
                    Label::new("region", "eu"),
                ]),
                annotations,
                value: 1.0,
                state: if resolved_at_ms.is_some() { AlertState::Inactive } else { AlertState::Firing },
                active_at_ms: 1_000,
                fired_at_ms: Some(1_675_000_000_123),
                resolved_at_ms,
                keep_firing_since_ms: None,
                last_sent_at_ms: Some(1_675_000_060_000),
                valid_until_ms: 1_675_000_300_000,
            },
            expr: r#"up{job="node"} == 0"#.to_owned(),
            tenant: None,
        }
    }

    fn external() -> BTreeMap<String, String> {
        [("region", "us"), ("replica", "r1")].into_iter().map(|(k, v)| (k.to_owned(), v.to_owned())).collect()
    }

    #[test]
    fn a_firing_alert_has_alertmanagers_postable_alert_shape() {
        let a = PostableAlert::new(
            &outgoing(None, vec![Label::new("summary", "a:9100 down")]),
            &external(),
            "http://prom.example:9090",
        );
        let json = serde_json::to_string(&a).unwrap();
        assert_eq!(
            json,
            concat!(
                r#"{"annotations":{"summary":"a:9100 down"},"#,
                r#""endsAt":"2023-01-29T13:51:40.000Z","startsAt":"2023-01-29T13:46:40.123Z","#,
                r#""generatorURL":"http://prom.example:9090/graph?g0.expr=up%7Bjob%3D%22node%22%7D+%3D%3D+0&g0.tab=1","#,
                r#""labels":{"alertname":"Down","instance":"a:9100","region":"eu","replica":"r1"}}"#
            ),
            "the alert's own `region` wins over the external label; `replica` is added"
        );
    }

    #[test]
    fn a_resolved_alert_ends_at_its_resolution_and_empty_annotations_are_left_out() {
        let a = PostableAlert::new(&outgoing(Some(1_675_000_120_000), vec![]), &BTreeMap::new(), "");
        let json: serde_json::Value = serde_json::to_value(&a).unwrap();
        assert_eq!(json["endsAt"], "2023-01-29T13:48:40.000Z");
        assert_eq!(json["startsAt"], "2023-01-29T13:46:40.123Z");
        assert!(json.get("annotations").is_none(), "{json}");
        assert_eq!(json["generatorURL"], "/graph?g0.expr=up%7Bjob%3D%22node%22%7D+%3D%3D+0&g0.tab=1");
    }

    #[test]
    fn an_alert_that_never_fired_has_no_start() {
        let mut o = outgoing(None, vec![]);
        o.alert.fired_at_ms = None;
        let json = serde_json::to_value(PostableAlert::new(&o, &BTreeMap::new(), "")).unwrap();
        assert!(json.get("startsAt").is_none(), "{json}");
    }

    #[test]
    fn query_escape_matches_gos() {
        // Go: url.QueryEscape("rate(x[5m]) * 2 / ~é") == "rate%28x%5B5m%5D%29+%2A+2+%2F+~%C3%A9"
        assert_eq!(query_escape("rate(x[5m]) * 2 / ~é"), "rate%28x%5B5m%5D%29+%2A+2+%2F+~%C3%A9");
        assert_eq!(query_escape("a-b_c.d"), "a-b_c.d");
    }

    #[test]
    fn generator_url_has_no_double_slash_and_matches_prometheus_test() {
        // Prometheus' TestSendAlerts: external URL http://localhost:9090, expression `up`.
        assert_eq!(generator_url("http://localhost:9090", "up"), "http://localhost:9090/graph?g0.expr=up&g0.tab=1");
        assert_eq!(generator_url("http://h/prom/", "up"), "http://h/prom/graph?g0.expr=up&g0.tab=1");
    }

    #[test]
    fn times_are_utc_with_milliseconds() {
        assert_eq!(rfc3339_millis(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339_millis(-1), "1969-12-31T23:59:59.999Z");
        assert_eq!(rfc3339_millis(i64::MAX), "1970-01-01T00:00:00.000Z");
    }
}
