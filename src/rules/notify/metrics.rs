//! The notifier's figures under Prometheus' own names, labels and meaning, as the rule group
//! metrics (`super::super::exposition`), so that the Prometheus mixin's notification alerts
//! (`PrometheusErrorSendingAlertsToSomeAlertmanagers`, `PrometheusNotificationQueueRunningFull`)
//! work unchanged:
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `prometheus_notifications_sent_total` (alerts sent, including sends that failed) | counter | `alertmanager` |
//! | `prometheus_notifications_errors_total` (alerts in sends that failed) | counter | `alertmanager` |
//! | `prometheus_notifications_dropped_total` (alerts lost: queue overflow, or no Alertmanager took them) | counter | |
//! | `prometheus_notifications_queue_length`, `prometheus_notifications_queue_capacity` | gauge | |
//! | `prometheus_notifications_alertmanagers_discovered` | gauge | |
//!
//! `alertmanager` is the URL alerts are posted to (`http://host:9093/api/v2/alerts`). Errors count
//! alerts, not requests, as Prometheus does since 3.1 (2.42 counted one per failed request), so
//! `errors_total / sent_total` is the share of alerts affected by errors.

use prometheus::{IntCounter, IntCounterVec, IntGauge, Opts, Registry};

/// The prefix of every notifier metric.
pub const PREFIX: &str = "prometheus_notifications_";

/// The notifier's metrics; clones share the registered figures.
#[derive(Clone, Debug)]
pub struct NotifierMetrics {
    sent: IntCounterVec,
    errors: IntCounterVec,
    dropped: IntCounter,
    queue_length: IntGauge,
    queue_capacity: IntGauge,
    alertmanagers_discovered: IntGauge,
}

impl NotifierMetrics {
    /// Builds the metrics and registers them in `registry` (once per registry).
    ///
    /// # Panics
    /// Only on a programming error: registering them twice in the same registry.
    pub fn register(registry: &Registry) -> Self {
        Self {
            sent: counter_vec(registry, "sent_total", "Total number of alerts sent."),
            errors: counter_vec(registry, "errors_total", "Total number of alerts affected by errors when sending."),
            dropped: register(
                registry,
                IntCounter::new(
                    format!("{PREFIX}dropped_total"),
                    "Total number of alerts dropped due to errors when sending to Alertmanager.",
                )
                .unwrap_or_else(|e| panic!("BUG: metric {PREFIX}dropped_total: {e}")),
            ),
            queue_length: gauge(registry, "queue_length", "The number of alert notifications in the queue."),
            queue_capacity: gauge(registry, "queue_capacity", "The capacity of the alert notifications queue."),
            alertmanagers_discovered: gauge(
                registry,
                "alertmanagers_discovered",
                "The number of alertmanagers discovered and active.",
            ),
        }
    }

    /// Unregistered figures (a notifier without a metrics endpoint, tests).
    pub fn detached() -> Self {
        Self::register(&Registry::new())
    }

    /// Sets up a notifier's figures: its queue's capacity and its Alertmanagers (each one's
    /// counters created at 0).
    pub fn configured(&self, queue_capacity: usize, alertmanagers: &[String]) {
        self.queue_capacity.set(clamp(queue_capacity));
        self.alertmanagers_discovered.set(clamp(alertmanagers.len()));
        for url in alertmanagers {
            self.sent.with_label_values(&[url]);
            self.errors.with_label_values(&[url]);
        }
    }

    /// `alerts` were posted to `alertmanager`, successfully or not.
    pub fn sent(&self, alertmanager: &str, alerts: usize) {
        self.sent.with_label_values(&[alertmanager]).inc_by(alerts as u64);
    }

    /// The post of `alerts` to `alertmanager` failed.
    pub fn errors(&self, alertmanager: &str, alerts: usize) {
        self.errors.with_label_values(&[alertmanager]).inc_by(alerts as u64);
    }

    /// `alerts` were lost.
    pub fn dropped(&self, alerts: usize) {
        self.dropped.inc_by(alerts as u64);
    }

    /// The queue now holds `alerts`.
    pub fn queue_length(&self, alerts: usize) {
        self.queue_length.set(clamp(alerts));
    }

    /// Alerts sent to `alertmanager` so far.
    pub fn sent_count(&self, alertmanager: &str) -> u64 {
        self.sent.with_label_values(&[alertmanager]).get()
    }

    /// Alerts affected by errors sending to `alertmanager` so far.
    pub fn error_count(&self, alertmanager: &str) -> u64 {
        self.errors.with_label_values(&[alertmanager]).get()
    }

    /// Alerts lost so far.
    pub fn dropped_count(&self) -> u64 {
        self.dropped.get()
    }

    /// Alerts in the queue.
    pub fn queue_length_now(&self) -> i64 {
        self.queue_length.get()
    }
}

fn counter_vec(r: &Registry, suffix: &str, help: &str) -> IntCounterVec {
    let name = format!("{PREFIX}{suffix}");
    let c = IntCounterVec::new(Opts::new(name.clone(), help), &["alertmanager"])
        .unwrap_or_else(|e| panic!("BUG: metric {name}: {e}"));
    register(r, c)
}

fn gauge(r: &Registry, suffix: &str, help: &str) -> IntGauge {
    let name = format!("{PREFIX}{suffix}");
    register(r, IntGauge::new(name.clone(), help).unwrap_or_else(|e| panic!("BUG: metric {name}: {e}")))
}

fn register<C: prometheus::core::Collector + Clone + 'static>(r: &Registry, c: C) -> C {
    if let Err(e) = r.register(Box::new(c.clone())) {
        panic!("BUG: registering a notifier metric twice: {e}");
    }
    c
}

fn clamp(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus::{Encoder, TextEncoder};

    #[test]
    fn every_metric_is_exposed_with_prometheus_suffixes() {
        let r = Registry::new();
        let m = NotifierMetrics::register(&r);
        m.configured(10_000, &["http://am:9093/api/v2/alerts".to_owned()]);
        m.sent("http://am:9093/api/v2/alerts", 3);
        m.dropped(2);
        let mut text = Vec::new();
        TextEncoder::new().encode(&r.gather(), &mut text).unwrap();
        let text = String::from_utf8(text).unwrap();
        for line in [
            r#"prometheus_notifications_sent_total{alertmanager="http://am:9093/api/v2/alerts"} 3"#,
            r#"prometheus_notifications_errors_total{alertmanager="http://am:9093/api/v2/alerts"} 0"#,
            "prometheus_notifications_dropped_total 2",
            "prometheus_notifications_queue_length 0",
            "prometheus_notifications_queue_capacity 10000",
            "prometheus_notifications_alertmanagers_discovered 1",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing from:\n{text}");
        }
    }
}
