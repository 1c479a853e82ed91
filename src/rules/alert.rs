//! The alerts of one alerting rule and how they move between pending, firing and resolved, as
//! Prometheus moves them (`rules/alerting.go`).
//!
//! Each evaluation hands [`AlertSet::update`] the alerts its expression raised (labels already
//! expanded, `alertname` set). An alert is identified by its labels:
//! - new labels start **pending**, active since this evaluation; one already pending or firing
//!   keeps its state and takes the new value and annotations;
//! - a pending alert **fires** once it has been active for the rule's `for`;
//! - an alert whose labels are no longer raised: pending ones are forgotten; firing ones are
//!   **resolved** (kept [`RESOLVED_RETENTION_MS`] so that notifications carry the resolution),
//!   unless `keep_firing_for` keeps them firing that long after they were last raised.

use std::collections::BTreeMap;

use crate::labels::{Label, Labels};

/// How long a resolved alert is kept (and re-sent as resolved): 15 minutes, as Prometheus.
pub const RESOLVED_RETENTION_MS: i64 = 15 * 60_000;

/// Where an alert stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum AlertState {
    /// No longer raised; kept for a while to send its resolution.
    Inactive,
    /// Raised for less than the rule's `for`.
    Pending,
    /// Raised for at least the rule's `for` (or kept firing by `keep_firing_for`).
    Firing,
}

impl AlertState {
    /// The word Prometheus uses: `inactive`, `pending`, `firing`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Inactive => "inactive",
            Self::Pending => "pending",
            Self::Firing => "firing",
        }
    }
}

/// One alert of a rule: what it is, and the times of its state changes (milliseconds).
#[derive(Debug, Clone, PartialEq)]
pub struct Alert {
    /// Its identity: the expression's labels without `__name__`, the rule's labels expanded,
    /// `alertname`.
    pub labels: Labels,
    /// Annotations, expanded at the latest evaluation that raised it.
    pub annotations: Vec<Label>,
    /// The expression's value at the latest evaluation that raised it.
    pub value: f64,
    /// Where it stands.
    pub state: AlertState,
    /// The evaluation that first raised it (in this run of pending and firing).
    pub active_at_ms: i64,
    /// When it fired; `None` while pending.
    pub fired_at_ms: Option<i64>,
    /// When it was resolved; `None` while active.
    pub resolved_at_ms: Option<i64>,
    /// The first evaluation that no longer raised it while `keep_firing_for` kept it firing;
    /// `None` otherwise.
    pub keep_firing_since_ms: Option<i64>,
    /// When it was last sent to Alertmanager; `None` if never.
    pub last_sent_at_ms: Option<i64>,
    /// Until when Alertmanager may consider it firing without hearing again.
    pub valid_until_ms: i64,
}

/// What one evaluation raised for one set of labels.
#[derive(Debug, Clone, PartialEq)]
pub struct Raised {
    /// Expanded labels (see [`Alert::labels`]).
    pub labels: Labels,
    /// Expanded annotations, in the rule's order.
    pub annotations: Vec<Label>,
    /// The expression's value.
    pub value: f64,
}

/// The rule's `for`, `keep_firing_for` and the group's `limit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Holds {
    /// `for`, milliseconds.
    pub for_ms: i64,
    /// `keep_firing_for`, milliseconds.
    pub keep_firing_for_ms: i64,
    /// Most pending and firing alerts; 0 means no limit.
    pub limit: usize,
}

/// An evaluation that raised more alerts than the group's limit; every alert of the rule is
/// dropped, as Prometheus drops them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("exceeded limit of {limit} with {count} alerts")]
pub struct LimitExceeded {
    /// The group's limit.
    pub limit: usize,
    /// Pending and firing alerts this evaluation would have had.
    pub count: usize,
}

/// All alerts of one rule, by labels.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AlertSet {
    alerts: BTreeMap<Labels, Alert>,
}

impl AlertSet {
    /// A set holding `alerts` (restored state).
    pub fn from_alerts(alerts: impl IntoIterator<Item = Alert>) -> Self {
        Self { alerts: alerts.into_iter().map(|a| (a.labels.clone(), a)).collect() }
    }

    /// The alerts, by labels.
    pub fn iter(&self) -> impl Iterator<Item = &Alert> {
        self.alerts.values()
    }

    /// The alerts, to record when they were sent.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut Alert> {
        self.alerts.values_mut()
    }

    /// The alert of `labels`, in whatever state.
    pub fn get(&self, labels: &Labels) -> Option<&Alert> {
        self.alerts.get(labels)
    }

    /// Puts `alert` in the set, in place of the alert of its labels.
    pub fn insert(&mut self, alert: Alert) {
        self.alerts.insert(alert.labels.clone(), alert);
    }

    /// Takes the alert of `labels` out of the set.
    pub fn remove(&mut self, labels: &Labels) -> Option<Alert> {
        self.alerts.remove(labels)
    }

    /// Pending and firing alerts (inactive ones are kept only to be sent).
    pub fn active(&self) -> impl Iterator<Item = &Alert> {
        self.alerts.values().filter(|a| a.state != AlertState::Inactive)
    }

    /// The highest state of any alert: what `/api/v1/rules` shows as the rule's state.
    pub fn state(&self) -> AlertState {
        self.alerts.values().map(|a| a.state).max().unwrap_or(AlertState::Inactive)
    }

    /// Applies one evaluation at `ts_ms` that raised `raised` (labels unique).
    ///
    /// # Errors
    /// [`LimitExceeded`] when more than `holds.limit` alerts are pending or firing afterwards;
    /// the set is then empty.
    pub fn update(&mut self, ts_ms: i64, raised: Vec<Raised>, holds: Holds) -> Result<(), LimitExceeded> {
        let mut current = std::collections::BTreeSet::new();
        for r in raised {
            current.insert(r.labels.clone());
            match self.alerts.get_mut(&r.labels) {
                Some(a) if a.state != AlertState::Inactive => {
                    a.value = r.value;
                    a.annotations = r.annotations;
                }
                _ => {
                    let alert = Alert {
                        labels: r.labels.clone(),
                        annotations: r.annotations,
                        value: r.value,
                        state: AlertState::Pending,
                        active_at_ms: ts_ms,
                        fired_at_ms: None,
                        resolved_at_ms: None,
                        keep_firing_since_ms: None,
                        last_sent_at_ms: None,
                        valid_until_ms: 0,
                    };
                    self.alerts.insert(r.labels, alert);
                }
            }
        }
        let mut counted = 0;
        self.alerts.retain(|labels, a| {
            if current.contains(labels) {
                a.keep_firing_since_ms = None;
            } else {
                let keep_firing = a.state == AlertState::Firing
                    && holds.keep_firing_for_ms > 0
                    && ts_ms - *a.keep_firing_since_ms.get_or_insert(ts_ms) < holds.keep_firing_for_ms;
                let forget = a.state == AlertState::Pending
                    || a.resolved_at_ms.is_some_and(|r| ts_ms - r > RESOLVED_RETENTION_MS);
                if a.state != AlertState::Inactive && !keep_firing {
                    a.state = AlertState::Inactive;
                    a.resolved_at_ms = Some(ts_ms);
                }
                if !keep_firing {
                    return !forget;
                }
            }
            counted += 1;
            if a.state == AlertState::Pending && ts_ms - a.active_at_ms >= holds.for_ms {
                a.state = AlertState::Firing;
                a.fired_at_ms = Some(ts_ms);
            }
            true
        });
        if holds.limit > 0 && counted > holds.limit {
            self.alerts.clear();
            return Err(LimitExceeded { limit: holds.limit, count: counted });
        }
        Ok(())
    }

    /// The firing and resolved alerts due to be sent at `ts_ms` (Prometheus' `needsSending`):
    /// resolved since last sent, or last sent more than `resend_delay_ms` ago. Marks them sent
    /// and valid until four resend periods (or evaluation intervals, if longer) from now, so
    /// that two missed evaluations or sends do not resolve them in Alertmanager.
    pub fn due_for_sending(&mut self, ts_ms: i64, resend_delay_ms: i64, interval_ms: i64) -> Vec<Alert> {
        let delta = resend_delay_ms.max(interval_ms);
        let mut due = Vec::new();
        for a in self.alerts.values_mut() {
            if a.state == AlertState::Pending {
                continue;
            }
            let resolved_since_sent = match (a.resolved_at_ms, a.last_sent_at_ms) {
                (Some(r), Some(sent)) => r > sent,
                (Some(_), None) => true,
                _ => false,
            };
            let resend = a.last_sent_at_ms.is_none_or(|sent| sent.saturating_add(resend_delay_ms) < ts_ms);
            if resolved_since_sent || resend {
                a.last_sent_at_ms = Some(ts_ms);
                a.valid_until_ms = ts_ms.saturating_add(delta.saturating_mul(4));
                due.push(a.clone());
            }
        }
        due
    }

    /// The `ALERTS` and `ALERTS_FOR_STATE` samples of the pending and firing alerts at `ts_ms`:
    /// `ALERTS{alertstate=...} 1` and `ALERTS_FOR_STATE` = active-since in Unix seconds.
    pub fn series(&self, rule_name: &str) -> Vec<(Labels, f64)> {
        let mut out = Vec::with_capacity(self.alerts.len() * 2);
        for a in self.active() {
            let with = |name: &str, state: Option<AlertState>| {
                let mut l: Vec<Label> = a.labels.iter().cloned().collect();
                l.push(Label::new("__name__", name));
                l.push(Label::new("alertname", rule_name));
                if let Some(s) = state {
                    l.push(Label::new("alertstate", s.as_str()));
                }
                Labels::from_trusted(l)
            };
            out.push((with("ALERTS", Some(a.state)), 1.0));
            out.push((with("ALERTS_FOR_STATE", None), (a.active_at_ms.div_euclid(1000)) as f64));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raised(instance: &str, value: f64) -> Raised {
        Raised {
            labels: Labels::from_trusted(vec![Label::new("alertname", "Down"), Label::new("instance", instance)]),
            annotations: vec![Label::new("summary", format!("{instance} down"))],
            value,
        }
    }

    const HOLD: Holds = Holds { for_ms: 120_000, keep_firing_for_ms: 0, limit: 0 };

    fn states(set: &AlertSet) -> Vec<(String, AlertState)> {
        set.iter().map(|a| (a.labels.get("instance").unwrap_or("").to_owned(), a.state)).collect()
    }

    #[test]
    fn an_alert_is_pending_for_its_hold_then_fires() {
        let mut set = AlertSet::default();
        set.update(0, vec![raised("a", 1.0)], HOLD).unwrap();
        assert_eq!(states(&set), [("a".into(), AlertState::Pending)]);
        set.update(60_000, vec![raised("a", 2.0)], HOLD).unwrap();
        assert_eq!(states(&set), [("a".into(), AlertState::Pending)]);
        set.update(120_000, vec![raised("a", 3.0)], HOLD).unwrap();
        let a = set.iter().next().unwrap();
        assert_eq!((a.state, a.active_at_ms, a.fired_at_ms, a.value), (AlertState::Firing, 0, Some(120_000), 3.0));
    }

    #[test]
    fn a_pending_alert_that_stops_is_forgotten_and_a_firing_one_resolves() {
        let mut set = AlertSet::default();
        let zero = Holds { for_ms: 0, ..HOLD };
        set.update(0, vec![raised("a", 1.0), raised("b", 1.0)], HOLD).unwrap();
        set.update(60_000, vec![], HOLD).unwrap();
        assert!(set.iter().next().is_none(), "pending alerts are dropped");
        set.update(120_000, vec![raised("a", 1.0)], zero).unwrap();
        assert_eq!(states(&set), [("a".into(), AlertState::Firing)]);
        set.update(180_000, vec![], zero).unwrap();
        let a = set.iter().next().unwrap();
        assert_eq!((a.state, a.resolved_at_ms), (AlertState::Inactive, Some(180_000)));
        assert!(set.series("Down").is_empty(), "resolved alerts have no ALERTS series");
        set.update(180_000 + RESOLVED_RETENTION_MS, vec![], zero).unwrap();
        assert_eq!(set.iter().count(), 1, "kept for the retention");
        set.update(180_001 + RESOLVED_RETENTION_MS, vec![], zero).unwrap();
        assert_eq!(set.iter().count(), 0, "dropped after it");
    }

    #[test]
    fn a_resolved_alert_raised_again_starts_pending() {
        let mut set = AlertSet::default();
        set.update(0, vec![raised("a", 1.0)], Holds { for_ms: 0, ..HOLD }).unwrap();
        set.update(60_000, vec![], HOLD).unwrap();
        set.update(120_000, vec![raised("a", 1.0)], HOLD).unwrap();
        let a = set.iter().next().unwrap();
        assert_eq!((a.state, a.active_at_ms, a.resolved_at_ms), (AlertState::Pending, 120_000, None));
    }

    #[test]
    fn keep_firing_for_holds_a_firing_alert_after_its_series_goes() {
        let keep = Holds { for_ms: 0, keep_firing_for_ms: 120_000, limit: 0 };
        let mut set = AlertSet::default();
        set.update(0, vec![raised("a", 1.0)], keep).unwrap();
        set.update(60_000, vec![], keep).unwrap();
        set.update(120_000, vec![], keep).unwrap();
        assert_eq!(states(&set), [("a".into(), AlertState::Firing)]);
        assert_eq!(set.iter().next().unwrap().keep_firing_since_ms, Some(60_000));
        set.update(180_000, vec![], keep).unwrap();
        assert_eq!(states(&set), [("a".into(), AlertState::Inactive)]);
    }

    #[test]
    fn keep_firing_for_restarts_when_the_series_comes_back() {
        let keep = Holds { for_ms: 0, keep_firing_for_ms: 120_000, limit: 0 };
        let mut set = AlertSet::default();
        set.update(0, vec![raised("a", 1.0)], keep).unwrap();
        set.update(60_000, vec![], keep).unwrap();
        set.update(120_000, vec![raised("a", 1.0)], keep).unwrap();
        set.update(180_000, vec![], keep).unwrap();
        set.update(240_000, vec![], keep).unwrap();
        assert_eq!(states(&set), [("a".into(), AlertState::Firing)]);
    }

    #[test]
    fn more_alerts_than_the_limit_drop_them_all() {
        let mut set = AlertSet::default();
        let limited = Holds { limit: 1, ..HOLD };
        set.update(0, vec![raised("a", 1.0)], limited).unwrap();
        let err = set.update(60_000, vec![raised("a", 1.0), raised("b", 1.0)], limited).unwrap_err();
        assert_eq!(err.to_string(), "exceeded limit of 1 with 2 alerts");
        assert_eq!(set.iter().count(), 0);
    }

    #[test]
    fn firing_alerts_are_sent_then_resent_after_the_delay_and_once_resolved() {
        let mut set = AlertSet::default();
        let zero = Holds { for_ms: 0, ..HOLD };
        set.update(0, vec![raised("a", 1.0)], zero).unwrap();
        let sent = set.due_for_sending(0, 60_000, 15_000);
        assert_eq!((sent.len(), sent[0].valid_until_ms), (1, 240_000));
        set.update(15_000, vec![raised("a", 1.0)], zero).unwrap();
        assert!(set.due_for_sending(15_000, 60_000, 15_000).is_empty());
        set.update(60_000, vec![raised("a", 1.0)], zero).unwrap();
        assert!(set.due_for_sending(60_000, 60_000, 15_000).is_empty(), "not before the delay has passed");
        set.update(75_000, vec![raised("a", 1.0)], zero).unwrap();
        assert_eq!(set.due_for_sending(75_000, 60_000, 15_000).len(), 1);
        set.update(90_000, vec![], zero).unwrap();
        let resolved = set.due_for_sending(90_000, 60_000, 15_000);
        assert_eq!(resolved[0].resolved_at_ms, Some(90_000), "a resolution is sent at once");
        assert!(set.due_for_sending(105_000, 60_000, 15_000).is_empty());
    }

    #[test]
    fn pending_alerts_are_not_sent() {
        let mut set = AlertSet::default();
        set.update(0, vec![raised("a", 1.0)], HOLD).unwrap();
        assert!(set.due_for_sending(0, 60_000, 15_000).is_empty());
    }

    #[test]
    fn alerts_series_carry_state_and_active_since() {
        let mut set = AlertSet::default();
        set.update(61_500, vec![raised("a", 7.0)], HOLD).unwrap();
        let series = set.series("Down");
        let text: Vec<String> = series.iter().map(|(l, v)| format!("{l} {v}")).collect();
        assert_eq!(
            text,
            [
                r#"ALERTS{alertname="Down", alertstate="pending", instance="a"} 1"#,
                r#"ALERTS_FOR_STATE{alertname="Down", instance="a"} 61"#
            ]
        );
    }
}
