//! Replay: rule groups evaluated over past data, as if they had been running then.
//!
//! Each group is evaluated at every one of its slots in `[from, to]` (the slots a live
//! evaluator would have picked: the same phase from the hash of the group's file and name, see
//! [`super::slot`]), oldest first, by the same [`GroupRun::evaluate`] as live evaluation. So a
//! replay keeps every rule of Prometheus' semantics: rules in order, each reading the
//! previous one's output; `limit`; `query_offset`; stale markers for series that disappear;
//! `for` and `keep_firing_for`; the `ALERTS` and `ALERTS_FOR_STATE` series. Outputs are written
//! through the normal write path at their historic timestamps.
//!
//! What a replay does not do: send to Alertmanager, save alert state, or carry state in or out
//! (alerts active at `from` start pending at its first slot; no stale marker is written after
//! `to`). Groups are replayed one after another, in file order.
//!
//! [`client`] is the command line's side (`saltdb rules replay`); the server's side streams
//! [`Line`]s as JSON lines (`POST /api/v1/rules/replay`).

pub mod client;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::backend::Backend;
use crate::promql::Engine;

use super::evaluator::RulesConfig;
use super::file::Group;
use super::group::{Env, GroupRun, Health};
use super::slot::{group_hash, slot_at_or_before};

/// Errors kept per group in its report; more are counted, not kept.
pub const ERRORS_KEPT: usize = 10;

/// How often a running group reports its progress.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);

/// What a replay takes from the server's rule settings.
#[derive(Debug, Clone)]
pub struct Defaults {
    /// Interval of groups that set none (`--rule-evaluation-interval`).
    pub interval_ms: i64,
    /// Query offset of groups that set none (`--rule-query-offset`).
    pub query_offset_ms: i64,
    /// `$externalLabels` of templates.
    pub external_labels: BTreeMap<String, String>,
    /// `$externalURL` of templates.
    pub external_url: String,
}

impl Defaults {
    /// The settings of a server's rules.
    pub fn of(config: &RulesConfig) -> Self {
        Self {
            interval_ms: config.evaluation_interval_ms,
            query_offset_ms: config.query_offset_ms,
            external_labels: config.external_labels.clone(),
            external_url: config.external_url.clone(),
        }
    }
}

impl Default for Defaults {
    fn default() -> Self {
        Self::of(&RulesConfig::default())
    }
}

/// The evaluation timestamps (milliseconds) of a group of `hash` every `interval_ms` within
/// `[from_ms, to_ms]`, oldest first: the slots a live evaluator picks, floored to the
/// millisecond as it writes them.
pub fn slots(hash: u64, interval_ms: i64, from_ms: i64, to_ms: i64) -> impl Iterator<Item = i64> {
    let interval_ns = interval_ms.max(1).saturating_mul(1_000_000);
    let to_ns = to_ms.saturating_mul(1_000_000);
    std::iter::successors(Some(first_slot_ns(hash, interval_ns, from_ms)), move |s| s.checked_add(interval_ns))
        .take_while(move |s| *s <= to_ns)
        .map(|s| s.div_euclid(1_000_000))
}

/// How many slots [`slots`] yields.
pub fn slot_count(hash: u64, interval_ms: i64, from_ms: i64, to_ms: i64) -> u64 {
    let interval_ns = interval_ms.max(1).saturating_mul(1_000_000);
    let first = first_slot_ns(hash, interval_ns, from_ms);
    let to_ns = to_ms.saturating_mul(1_000_000);
    if first > to_ns {
        return 0;
    }
    u64::try_from((i128::from(to_ns) - i128::from(first)) / i128::from(interval_ns) + 1).unwrap_or(u64::MAX)
}

/// The group's first slot at or after `from_ms`, in nanoseconds.
fn first_slot_ns(hash: u64, interval_ns: i64, from_ms: i64) -> i64 {
    let from_ns = from_ms.saturating_mul(1_000_000);
    let slot = slot_at_or_before(hash, interval_ns, from_ns);
    if slot < from_ns {
        slot.saturating_add(interval_ns)
    } else {
        slot
    }
}

/// One line of a replay's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Line {
    /// A group under way.
    Progress(Tally),
    /// A group finished.
    Group(Tally),
    /// Every group finished.
    Done {
        /// Groups replayed.
        groups: usize,
        /// Group evaluations.
        evaluations: u64,
        /// Samples written.
        samples: u64,
        /// Rule evaluations that failed.
        failures: u64,
    },
}

/// Where a group's replay stands.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Tally {
    /// The group's file, as given.
    pub file: String,
    /// The group's name.
    pub group: String,
    /// Evaluations done.
    pub evaluations: u64,
    /// Evaluations the replay makes in all.
    pub total: u64,
    /// Timestamp of the latest evaluation done (Unix seconds); `None` before the first.
    pub time: Option<f64>,
    /// Samples the rules wrote: recorded series, `ALERTS` and `ALERTS_FOR_STATE` (stale
    /// markers not counted).
    pub samples: u64,
    /// Rule evaluations that failed.
    pub failures: u64,
    /// The first [`ERRORS_KEPT`] failures.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<Failure>,
}

/// A rule evaluation that failed during a replay.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Failure {
    /// The rule's name (recorded series or alert).
    pub rule: String,
    /// The evaluation's timestamp (Unix seconds).
    pub time: f64,
    /// Why.
    pub error: String,
}

/// Replays `groups` over `[from_ms, to_ms]`, handing each [`Line`] to `emit`; stops as soon as
/// `emit` answers false (the client went away). Returns whether every group was replayed.
pub fn replay(
    groups: &[Group],
    from_ms: i64,
    to_ms: i64,
    defaults: &Defaults,
    engine: &Engine,
    backend: &Backend,
    emit: &mut dyn FnMut(Line) -> bool,
) -> bool {
    let (mut evaluations, mut samples, mut failures) = (0, 0, 0);
    for group in groups {
        let scope = group.scope();
        let env = Env {
            engine,
            backend,
            scope: &scope,
            gate: None,
            external_labels: &defaults.external_labels,
            external_url: &defaults.external_url,
        };
        let Some(tally) = replay_group(group, from_ms, to_ms, defaults, &env, emit) else { return false };
        evaluations += tally.evaluations;
        samples += tally.samples;
        failures += tally.failures;
        if !emit(Line::Group(tally)) {
            return false;
        }
    }
    emit(Line::Done { groups: groups.len(), evaluations, samples, failures })
}

/// One group's replay; `None` when stopped by `emit`.
fn replay_group(
    group: &Group,
    from_ms: i64,
    to_ms: i64,
    defaults: &Defaults,
    env: &Env<'_>,
    emit: &mut dyn FnMut(Line) -> bool,
) -> Option<Tally> {
    let mut run = GroupRun::new(group.clone(), defaults.interval_ms, defaults.query_offset_ms);
    let hash = group_hash(&group.file, &group.name);
    let mut tally = Tally {
        file: group.file.clone(),
        group: group.name.clone(),
        total: slot_count(hash, run.interval_ms, from_ms, to_ms),
        ..Tally::default()
    };
    let mut reported = Instant::now();
    for ts in slots(hash, run.interval_ms, from_ms, to_ms) {
        // Alerts are not sent: the resend delay does not matter.
        run.evaluate(ts, env, i64::MAX);
        tally.evaluations += 1;
        tally.samples += run.last_samples;
        tally.time = Some(ts as f64 / 1000.0);
        for rule in run.rules.iter().filter(|r| r.health == Health::Err) {
            tally.failures += 1;
            if tally.errors.len() < ERRORS_KEPT {
                tally.errors.push(Failure {
                    rule: rule.rule.name().to_owned(),
                    time: ts as f64 / 1000.0,
                    error: rule.last_error.clone().unwrap_or_default(),
                });
            }
        }
        if reported.elapsed() >= PROGRESS_EVERY {
            reported = Instant::now();
            if !emit(Line::Progress(Tally { errors: Vec::new(), ..tally.clone() })) {
                return None;
            }
        }
    }
    Some(tally)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Every slot of the live evaluator's sequence within the span, by brute force.
    fn reference(hash: u64, interval_ms: i64, from_ms: i64, to_ms: i64) -> Vec<i64> {
        let interval_ns = interval_ms * 1_000_000;
        let mut s = slot_at_or_before(hash, interval_ns, from_ms * 1_000_000 - 10 * interval_ns);
        let mut out = Vec::new();
        while s <= to_ms * 1_000_000 {
            if s >= from_ms * 1_000_000 {
                out.push(s.div_euclid(1_000_000));
            }
            s += interval_ns;
        }
        out
    }

    proptest! {
        #[test]
        fn slots_are_the_live_slots_within_the_span(
            hash in any::<u64>(),
            interval_ms in 1i64..200_000,
            from_ms in 0i64..4_000_000_000_000,
            len in 0i64..2_000_000,
        ) {
            let to_ms = from_ms + len;
            let got: Vec<i64> = slots(hash, interval_ms, from_ms, to_ms).collect();
            prop_assert_eq!(&got, &reference(hash, interval_ms, from_ms, to_ms));
            prop_assert_eq!(slot_count(hash, interval_ms, from_ms, to_ms), got.len() as u64);
        }
    }

    #[test]
    fn an_empty_span_has_no_slot() {
        assert_eq!(slots(7, 60_000, 1_000_000, 999_999).count(), 0);
        assert_eq!(slot_count(7, 60_000, 1_000_000, 999_999), 0);
    }

    #[test]
    fn lines_read_back_as_written() {
        let lines = [
            Line::Progress(Tally {
                file: "a.yml".into(),
                group: "g".into(),
                evaluations: 3,
                total: 9,
                time: Some(1.5),
                ..Tally::default()
            }),
            Line::Group(Tally {
                errors: vec![Failure { rule: "r".into(), time: 2.0, error: "bad".into() }],
                ..Tally::default()
            }),
            Line::Done { groups: 1, evaluations: 9, samples: 4, failures: 1 },
        ];
        for line in lines {
            let text = serde_json::to_string(&line).unwrap();
            assert_eq!(serde_json::from_str::<Line>(&text).unwrap(), line, "{text}");
        }
    }
}
