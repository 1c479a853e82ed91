//! Alert state that survives restarts: every alert of every alerting rule, whole (state, active
//! since, fired at, resolved at, keep-firing since, last sent, valid until), one file per group
//! under `<data-dir>/rules/`.
//!
//! Prometheus keeps only `ALERTS_FOR_STATE` and brings firing alerts back as pending; here a
//! firing alert comes back firing and remembers when it was last sent, so a restart neither
//! re-pages before the resend delay nor drops it.
//!
//! A file is replaced atomically (written beside, synced, renamed, directory synced): after a
//! crash it holds one complete state, the latest saved or the one before. It is saved after an
//! evaluation changed something that matters to notifications, before the evaluation's alerts
//! are sent.
//!
//! | File | Contents |
//! |---|---|
//! | `rules/<xxh64 of file and group, hex>.json` | `{"file", "group", "evaluated_at_ms", "rules": [{"name", "labels", "alerts": [...]}]}` |
//!
//! `file` is the group's identity ([`crate::rules::file::Group::identity`]): its file, or
//! `<tenant>\0<namespace>` for a group of a tenant other than the default one.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::alert::{Alert, AlertSet, AlertState};
use super::group::GroupRun;
use super::slot::group_hash;
use crate::labels::{Label, Labels};

/// How long a server may be down and still resume its pending alerts' `for` (Prometheus'
/// `--rules.alert.for-outage-tolerance`): after a longer outage pending alerts start again.
pub const OUTAGE_TOLERANCE_MS: i64 = 3_600_000;

/// One alert as saved.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct SavedAlert {
    labels: BTreeMap<String, String>,
    annotations: Vec<(String, String)>,
    value: f64,
    state: String,
    active_at_ms: i64,
    fired_at_ms: Option<i64>,
    resolved_at_ms: Option<i64>,
    keep_firing_since_ms: Option<i64>,
    last_sent_at_ms: Option<i64>,
    valid_until_ms: i64,
}

/// One rule's alerts as saved; a rule is matched again by name and labels.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct SavedRule {
    name: String,
    labels: BTreeMap<String, String>,
    alerts: Vec<SavedAlert>,
}

/// A group's alert state as saved.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct SavedGroup {
    file: String,
    group: String,
    evaluated_at_ms: Option<i64>,
    rules: Vec<SavedRule>,
}

/// Where the groups' states live.
#[derive(Debug, Clone)]
pub struct StateDir {
    dir: PathBuf,
}

impl StateDir {
    /// States under `dir` (created on the first save).
    pub fn new(dir: PathBuf) -> Self {
        Self { dir }
    }

    fn path(&self, file: &str, group: &str) -> PathBuf {
        self.dir.join(format!("{:016x}.json", group_hash(file, group)))
    }

    /// Saves the alert state of `run` (only alerting rules with alerts are written).
    ///
    /// # Errors
    /// The I/O error; the previous state stays in place.
    pub fn save(&self, run: &GroupRun) -> std::io::Result<()> {
        let saved = snapshot(run);
        let bytes = serde_json::to_vec(&saved).map_err(std::io::Error::other)?;
        std::fs::create_dir_all(&self.dir)?;
        let path = self.path(&run.group.identity(), &run.group.name);
        let temp = path.with_extension("json.tmp");
        let mut f = std::fs::File::create(&temp)?;
        f.write_all(&bytes)?;
        f.sync_all()?;
        drop(f);
        std::fs::rename(&temp, &path)?;
        std::fs::File::open(&self.dir)?.sync_all()
    }

    /// Restores the saved alerts of `run`'s rules that are still there (same name and labels),
    /// at `now_ms`: pending alerts restart their `for` when the outage was longer than
    /// [`OUTAGE_TOLERANCE_MS`]. A missing or unreadable state restores nothing (logged).
    pub fn restore(&self, run: &mut GroupRun, now_ms: i64) {
        let path = self.path(&run.group.identity(), &run.group.name);
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "cannot read a rule group's saved alerts");
                return;
            }
        };
        let saved: SavedGroup = match serde_json::from_slice(&bytes) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "a rule group's saved alerts do not parse; starting afresh");
                return;
            }
        };
        if saved.file != run.group.identity() || saved.group != run.group.name {
            return;
        }
        let outage_ok = saved.evaluated_at_ms.is_none_or(|t| now_ms - t <= OUTAGE_TOLERANCE_MS);
        let mut rules: Vec<Option<SavedRule>> = saved.rules.into_iter().map(Some).collect();
        for r in &mut run.rules {
            let found = rules
                .iter_mut()
                .find(|s| s.as_ref().is_some_and(|s| s.name == r.rule.name() && s.labels == r.rule.labels));
            let Some(s) = found.and_then(Option::take) else { continue };
            let alerts =
                s.alerts.into_iter().filter_map(restored).filter(|a| outage_ok || a.state != AlertState::Pending);
            r.alerts = AlertSet::from_alerts(alerts);
        }
    }
}

/// What [`StateDir::save`] writes for `run`; two equal snapshots need no second save.
pub fn fingerprint(run: &GroupRun) -> Vec<u8> {
    let mut saved = snapshot(run);
    saved.evaluated_at_ms = None;
    for a in saved.rules.iter_mut().flat_map(|r| &mut r.alerts) {
        a.value = 0.0;
        a.annotations.clear();
    }
    serde_json::to_vec(&saved).unwrap_or_default()
}

fn snapshot(run: &GroupRun) -> SavedGroup {
    let rules = run
        .rules
        .iter()
        .filter(|r| r.alerts.iter().next().is_some())
        .map(|r| SavedRule {
            name: r.rule.name().to_owned(),
            labels: r.rule.labels.clone(),
            alerts: r.alerts.iter().map(saved).collect(),
        })
        .collect();
    SavedGroup {
        file: run.group.identity().into_owned(),
        group: run.group.name.clone(),
        evaluated_at_ms: run.last_timestamp_ms,
        rules,
    }
}

fn saved(a: &Alert) -> SavedAlert {
    SavedAlert {
        labels: a.labels.iter().map(|l| (l.name.clone(), l.value.clone())).collect(),
        annotations: a.annotations.iter().map(|l| (l.name.clone(), l.value.clone())).collect(),
        value: a.value,
        state: a.state.as_str().to_owned(),
        active_at_ms: a.active_at_ms,
        fired_at_ms: a.fired_at_ms,
        resolved_at_ms: a.resolved_at_ms,
        keep_firing_since_ms: a.keep_firing_since_ms,
        last_sent_at_ms: a.last_sent_at_ms,
        valid_until_ms: a.valid_until_ms,
    }
}

fn restored(s: SavedAlert) -> Option<Alert> {
    let state = match s.state.as_str() {
        "pending" => AlertState::Pending,
        "firing" => AlertState::Firing,
        "inactive" => AlertState::Inactive,
        _ => return None,
    };
    let labels = Labels::from_pairs(s.labels).ok()?;
    Some(Alert {
        labels,
        annotations: s.annotations.into_iter().map(|(k, v)| Label::new(k, v)).collect(),
        value: s.value,
        state,
        active_at_ms: s.active_at_ms,
        fired_at_ms: s.fired_at_ms,
        resolved_at_ms: s.resolved_at_ms,
        keep_firing_since_ms: s.keep_firing_since_ms,
        last_sent_at_ms: s.last_sent_at_ms,
        valid_until_ms: s.valid_until_ms,
    })
}

/// Removes the saved state of groups no longer loaded (after a reload).
pub fn forget(dir: &StateDir, file: &str, group: &str) {
    let path = dir.path(file, group);
    if let Err(e) = std::fs::remove_file(&path) {
        if e.kind() != std::io::ErrorKind::NotFound {
            tracing::warn!(path = %path.display(), error = %e, "cannot remove a removed rule group's saved alerts");
        }
    }
}

/// The directory of rule state under a data directory.
pub fn under(data_dir: &Path) -> StateDir {
    StateDir::new(data_dir.join("rules"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::alert::{Holds, Raised};
    use crate::rules::file::{Group, Rule, RuleKind};

    fn group() -> GroupRun {
        let rule = Rule {
            kind: RuleKind::Alerting {
                alert: "Down".into(),
                for_ms: 60_000,
                keep_firing_for_ms: 0,
                annotations: BTreeMap::new(),
            },
            expr: "up == 0".into(),
            labels: BTreeMap::from([("severity".to_owned(), "page".to_owned())]),
            line: 1,
        };
        let g = Group {
            name: "g".into(),
            file: "rules.yml".into(),
            interval_ms: None,
            query_offset_ms: None,
            limit: 0,
            labels: BTreeMap::new(),
            rules: vec![rule],
            tenant: None,
        };
        GroupRun::new(g, 15_000, 0)
    }

    fn raise(run: &mut GroupRun, ts: i64, instance: &str) {
        let labels = Labels::from_pairs([("alertname", "Down"), ("instance", instance)]).unwrap();
        let raised = Raised { labels, annotations: vec![Label::new("summary", "down")], value: 0.0 };
        run.rules[0]
            .alerts
            .update(ts, vec![raised], Holds { for_ms: 60_000, keep_firing_for_ms: 0, limit: 0 })
            .unwrap();
        run.last_timestamp_ms = Some(ts);
    }

    #[test]
    fn a_firing_alert_comes_back_firing_with_its_send_time() {
        let dir = tempfile::tempdir().unwrap();
        let states = StateDir::new(dir.path().join("rules"));
        let mut run = group();
        raise(&mut run, 0, "a");
        raise(&mut run, 60_000, "a");
        run.rules[0].alerts.due_for_sending(60_000, 60_000, 15_000);
        states.save(&run).unwrap();
        let mut fresh = group();
        states.restore(&mut fresh, 75_000);
        assert_eq!(fresh.rules[0].alerts, run.rules[0].alerts);
        let a = fresh.rules[0].alerts.iter().next().unwrap();
        assert_eq!((a.state, a.fired_at_ms, a.last_sent_at_ms), (AlertState::Firing, Some(60_000), Some(60_000)));
    }

    #[test]
    fn pending_alerts_restart_after_a_long_outage() {
        let dir = tempfile::tempdir().unwrap();
        let states = StateDir::new(dir.path().join("rules"));
        let mut run = group();
        raise(&mut run, 0, "a");
        states.save(&run).unwrap();
        let mut soon = group();
        states.restore(&mut soon, OUTAGE_TOLERANCE_MS);
        assert_eq!(soon.rules[0].alerts.iter().count(), 1);
        let mut late = group();
        states.restore(&mut late, OUTAGE_TOLERANCE_MS + 1);
        assert_eq!(late.rules[0].alerts.iter().count(), 0);
    }

    #[test]
    fn a_changed_rule_does_not_take_the_old_alerts() {
        let dir = tempfile::tempdir().unwrap();
        let states = StateDir::new(dir.path().join("rules"));
        let mut run = group();
        raise(&mut run, 0, "a");
        states.save(&run).unwrap();
        let mut changed = group();
        changed.rules[0].rule.labels.insert("severity".into(), "ticket".into());
        states.restore(&mut changed, 1);
        assert_eq!(changed.rules[0].alerts.iter().count(), 0);
    }

    #[test]
    fn a_damaged_file_restores_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let states = StateDir::new(dir.path().to_path_buf());
        let run = group();
        std::fs::write(states.path("rules.yml", "g"), b"{not json").unwrap();
        let mut fresh = group();
        states.restore(&mut fresh, 1);
        assert_eq!(fresh.rules[0].alerts.iter().count(), 0);
        assert_eq!(fingerprint(&fresh), fingerprint(&run));
    }
}
