//! Alerts that other evaluators of the same rule already hold, on a store several nodes share
//! (ClickHouse), where every node evaluates every group (docs/rules.md, "Several nodes on
//! ClickHouse").
//!
//! A node that meets an alert it does not hold (it just started, was restarted, lost its saved
//! state, or the alert was raised again) takes over the `activeAt` the others wrote in the
//! alert's `ALERTS_FOR_STATE` series instead of starting its own `for`, as Prometheus'
//! `restoreForState` does once at start-up, but for every alert a node joins. Otherwise its
//! `ALERTS_FOR_STATE` samples (value: active since, Unix seconds) would conflict with theirs at
//! the same timestamps, its alert would fire later, and Alertmanager would hear another
//! `startsAt`.
//!
//! Pure: the caller reads the latest sample of each alert's series (see `group.rs`); this module
//! decides what the node's alert becomes.

use crate::labels::Labels;
use crate::sample::is_stale_marker;

use super::alert::{Alert, AlertSet, AlertState};
use super::slot::slot_at_or_before;

/// What the other evaluators wrote of one alert: the latest sample of its `ALERTS_FOR_STATE`
/// series in the window read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    /// A value: the alert is pending or firing there, active since that Unix second.
    Active {
        /// The sample's value.
        since_s: i64,
    },
    /// A staleness marker: the evaluators saw the alert end.
    Ended,
    /// No sample: nobody evaluated the alert in the window.
    Unknown,
}

impl Seen {
    /// What the latest sample's value (`None`: no sample) says. A value that is no whole-second
    /// time (not finite) says nothing.
    pub fn from_latest(value: Option<f64>) -> Self {
        match value {
            None => Self::Unknown,
            Some(v) if is_stale_marker(v) => Self::Ended,
            Some(v) if v.is_finite() && v.abs() < 9.2e15 => Self::Active { since_s: v.floor() as i64 },
            Some(_) => Self::Unknown,
        }
    }
}

/// A group's slots: the phase of its file and name ([`super::slot::group_hash`]) and its
/// interval. Must be the same on every node for the alerts' times to agree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slots {
    /// The group's hash.
    pub hash: u64,
    /// The group's evaluation interval, milliseconds (at least 1).
    pub interval_ms: i64,
}

impl Slots {
    /// The group's slot (milliseconds) in the Unix second `second`. `ALERTS_FOR_STATE` keeps
    /// whole seconds, and an alert becomes active at a slot, so with an interval of a second
    /// or more this is the exact `activeAt`. When no slot falls in that second (the interval
    /// changed since, or it is under a second and several do, of which the latest is taken),
    /// the second's start.
    pub fn in_second(&self, second: i64) -> i64 {
        let start_ms = second.saturating_mul(1000);
        let (Some(start_ns), Some(interval_ns)) =
            (second.checked_mul(1_000_000_000), self.interval_ms.checked_mul(1_000_000))
        else {
            return start_ms;
        };
        let slot_ns = slot_at_or_before(self.hash, interval_ns, start_ns.saturating_add(999_999_999));
        if slot_ns >= start_ns {
            slot_ns.div_euclid(1_000_000)
        } else {
            start_ms
        }
    }

    /// The slot at which an alert active since the slot `active_at_ms` fires: the first at
    /// least `for_ms` after it, as evaluators that ran every slot fired it.
    pub fn firing_slot(&self, active_at_ms: i64, for_ms: i64) -> i64 {
        let interval = self.interval_ms.max(1);
        let steps = for_ms.max(0).saturating_add(interval - 1) / interval;
        active_at_ms.saturating_add(steps.saturating_mul(interval))
    }
}

/// Brings the node's alert of `labels`, raised by the evaluation at `ts_ms`, in line with what
/// the others wrote (`seen`), before [`AlertSet::update`] applies the evaluation.
///
/// `restored`: the rule's first evaluation on this node, so an alert it holds came from its
/// saved state rather than from evaluating beside the others; otherwise the caller asks only
/// for alerts the node does not hold pending or firing.
/// - **Active** elsewhere: the node's alert becomes active since the others' slot, and firing
///   (since [`Slots::firing_slot`]) when `for_ms` has passed by `ts_ms`; a restored alert keeps
///   when it was last sent, so a restart does not page again early. A restored alert already
///   active since then is kept as it is.
/// - **Ended** there: a restored alert is dropped, so the evaluation starts it afresh as the
///   others do.
/// - **Unknown**: nothing changes (a new alert starts at `ts_ms`, a restored one stays, as after
///   a restart of every node).
pub fn join(set: &mut AlertSet, labels: &Labels, seen: Seen, restored: bool, ts_ms: i64, for_ms: i64, slots: Slots) {
    let held = set.get(labels).filter(|a| a.state != AlertState::Inactive);
    if held.is_some() && !restored {
        return;
    }
    match seen {
        Seen::Unknown => {}
        Seen::Ended => {
            if held.is_some() {
                set.remove(labels);
            }
        }
        Seen::Active { since_s } => {
            let active_at_ms = slots.in_second(since_s).min(ts_ms);
            if held.is_some_and(|a| a.active_at_ms == active_at_ms) {
                return;
            }
            let fires_at = slots.firing_slot(active_at_ms, for_ms);
            let firing = fires_at <= ts_ms;
            let (last_sent_at_ms, valid_until_ms) = held.map_or((None, 0), |a| (a.last_sent_at_ms, a.valid_until_ms));
            set.insert(Alert {
                labels: labels.clone(),
                annotations: Vec::new(),
                value: 0.0,
                state: if firing { AlertState::Firing } else { AlertState::Pending },
                active_at_ms,
                fired_at_ms: firing.then_some(fires_at),
                resolved_at_ms: None,
                keep_firing_since_ms: None,
                last_sent_at_ms,
                valid_until_ms,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::labels::Label;
    use crate::rules::alert::{Holds, Raised};
    use crate::rules::slot::group_hash;

    fn labels() -> Labels {
        Labels::from_trusted(vec![Label::new("alertname", "Down"), Label::new("instance", "a")])
    }

    fn raised() -> Vec<Raised> {
        vec![Raised { labels: labels(), annotations: vec![Label::new("summary", "a is down")], value: 1.0 }]
    }

    const HOLD: Holds = Holds { for_ms: 3_000, keep_firing_for_ms: 0, limit: 0 };

    fn slots() -> Slots {
        Slots { hash: group_hash("rules.yml", "node"), interval_ms: 1_000 }
    }

    /// The group's slot `k` intervals after a fixed one.
    fn slot(k: i64) -> i64 {
        let s = slots();
        let first = slot_at_or_before(s.hash, s.interval_ms * 1_000_000, 1_700_000_000_000_000_000) / 1_000_000;
        first + k * s.interval_ms
    }

    #[test]
    fn the_latest_sample_says_active_ended_or_nothing() {
        assert_eq!(Seen::from_latest(None), Seen::Unknown);
        assert_eq!(Seen::from_latest(Some(f64::from_bits(crate::sample::STALE_NAN_BITS))), Seen::Ended);
        assert_eq!(Seen::from_latest(Some(1_700_000_000.0)), Seen::Active { since_s: 1_700_000_000 });
        assert_eq!(Seen::from_latest(Some(f64::NAN)), Seen::Unknown);
        assert_eq!(Seen::from_latest(Some(f64::INFINITY)), Seen::Unknown);
    }

    #[test]
    fn the_second_of_active_at_gives_back_its_slot() {
        let s = slots();
        for k in 0..50 {
            let at = slot(k);
            assert_eq!(s.in_second(at.div_euclid(1000)), at);
        }
        // Every 10 s: the seconds without a slot read as their start.
        let sparse = Slots { interval_ms: 10_000, ..s };
        let at = slot_at_or_before(s.hash, 10_000_000_000, 1_700_000_000_000_000_000) / 1_000_000;
        assert_eq!(sparse.in_second(at.div_euclid(1000)), at);
        for second in at.div_euclid(1000) + 1..at.div_euclid(1000) + 10 {
            assert_eq!(sparse.in_second(second), second * 1000);
        }
    }

    #[test]
    fn an_alert_fires_at_the_first_slot_its_hold_has_passed() {
        let s = slots();
        assert_eq!(s.firing_slot(slot(0), 3_000), slot(3));
        assert_eq!(s.firing_slot(slot(0), 2_500), slot(3));
        assert_eq!(s.firing_slot(slot(0), 0), slot(0));
    }

    /// A node evaluating from the start and one joining later end with the same alert.
    #[test]
    fn a_joining_node_takes_the_others_active_at_and_firing_time() {
        let mut first = AlertSet::default();
        for k in 0..6 {
            first.update(slot(k), raised(), HOLD).unwrap();
        }
        let theirs = first.get(&labels()).unwrap().clone();
        assert_eq!((theirs.state, theirs.fired_at_ms), (AlertState::Firing, Some(slot(3))));
        let written = first.series("Down").into_iter().find(|(l, _)| l.metric_name() == Some("ALERTS_FOR_STATE"));
        let seen = Seen::from_latest(written.map(|(_, v)| v));

        let mut joining = AlertSet::default();
        join(&mut joining, &labels(), seen, true, slot(5), HOLD.for_ms, slots());
        joining.update(slot(5), raised(), HOLD).unwrap();
        let ours = joining.get(&labels()).unwrap();
        assert_eq!(
            (ours.state, ours.active_at_ms, ours.fired_at_ms),
            (theirs.state, theirs.active_at_ms, theirs.fired_at_ms)
        );
        assert_eq!(joining.series("Down"), first.series("Down"));

        // Joining while it is still pending: it fires at the same slot as theirs.
        let mut early = AlertSet::default();
        join(
            &mut early,
            &labels(),
            Seen::Active { since_s: slot(0).div_euclid(1000) },
            true,
            slot(1),
            HOLD.for_ms,
            slots(),
        );
        for k in 1..4 {
            early.update(slot(k), raised(), HOLD).unwrap();
        }
        let a = early.get(&labels()).unwrap();
        assert_eq!((a.state, a.active_at_ms, a.fired_at_ms), (AlertState::Firing, slot(0), Some(slot(3))));
    }

    #[test]
    fn an_alert_held_beside_the_others_is_left_alone() {
        let mut set = AlertSet::default();
        set.update(slot(0), raised(), HOLD).unwrap();
        join(
            &mut set,
            &labels(),
            Seen::Active { since_s: slot(-10).div_euclid(1000) },
            false,
            slot(1),
            HOLD.for_ms,
            slots(),
        );
        assert_eq!(set.get(&labels()).unwrap().active_at_ms, slot(0));
        join(&mut set, &labels(), Seen::Ended, false, slot(1), HOLD.for_ms, slots());
        assert!(set.get(&labels()).is_some());
    }

    #[test]
    fn a_restored_alert_follows_the_others_or_starts_afresh_when_they_saw_it_end() {
        let restored = || {
            let mut set = AlertSet::default();
            set.update(slot(0), raised(), Holds { for_ms: 0, ..HOLD }).unwrap();
            set.due_for_sending(slot(0), 60_000, 1_000);
            set
        };
        let mut set = restored();
        join(
            &mut set,
            &labels(),
            Seen::Active { since_s: slot(2).div_euclid(1000) },
            true,
            slot(8),
            HOLD.for_ms,
            slots(),
        );
        let a = set.get(&labels()).unwrap();
        assert_eq!((a.active_at_ms, a.fired_at_ms, a.last_sent_at_ms), (slot(2), Some(slot(5)), Some(slot(0))));

        let mut set = restored();
        join(&mut set, &labels(), Seen::Ended, true, slot(8), HOLD.for_ms, slots());
        set.update(slot(8), raised(), HOLD).unwrap();
        let a = set.get(&labels()).unwrap();
        assert_eq!((a.state, a.active_at_ms), (AlertState::Pending, slot(8)));

        let mut set = restored();
        join(&mut set, &labels(), Seen::Unknown, true, slot(8), HOLD.for_ms, slots());
        assert_eq!(set.get(&labels()).unwrap().active_at_ms, slot(0), "nobody else evaluated it: kept");
    }

    #[test]
    fn a_new_alert_nobody_holds_starts_at_its_evaluation() {
        for seen in [Seen::Unknown, Seen::Ended] {
            let mut set = AlertSet::default();
            join(&mut set, &labels(), seen, false, slot(4), HOLD.for_ms, slots());
            set.update(slot(4), raised(), HOLD).unwrap();
            assert_eq!(set.get(&labels()).unwrap().active_at_ms, slot(4));
        }
    }
}
