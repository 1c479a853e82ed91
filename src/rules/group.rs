//! One rule group evaluated at one timestamp, as Prometheus' `Group.Eval` evaluates it: rules in
//! order, each rule's output written before the next rule runs (so the next one reads it),
//! series a rule no longer produces marked stale, alerting rules' `ALERTS` and
//! `ALERTS_FOR_STATE` series written beside their state.
//!
//! The caller decides when (see [`super::slot`]); this module decides what is written.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Instant;

use crate::backend::Backend;
use crate::labels::{Label, Labels};
use crate::matcher::Matcher;
use crate::promql::{Engine, Value};
use crate::sample::{HistogramSample, PackedBatch, Sample, STALE_NAN_BITS};
use crate::storage::{Querier, ReadLimits};
use crate::tenant::{Scope, ScopedQuerier};

use super::alert::{Alert, AlertSet, AlertState, Holds, Raised};
use super::file::{Group, Rule, RuleKind};
use super::for_state::{self, Seen, Slots};
use super::output::{self, OutputSample};
use super::slot::group_hash;
use super::template::{self, QuerySample, TemplateData, TemplateQuery};

/// What a tenant's rule outputs pass before they are written: the tenant's limits, as any write
/// of the tenant (Mimir's ruler writes through the same limits as remote-write).
pub trait WriteGate: Send + Sync {
    /// Admits `batch`, stamped with `tenant`'s label, taking it from the tenant's ingestion
    /// rate and active series (and hands it back), or refuses it whole with the limit's message.
    ///
    /// # Errors
    /// The message naming the tenant and the limit.
    fn admit(&self, tenant: &crate::tenant::TenantId, batch: PackedBatch) -> Result<PackedBatch, String>;

    /// Counts `samples` of `tenant` written.
    fn written(&self, tenant: &crate::tenant::TenantId, samples: usize);
}

/// What a group's evaluation reads from and writes to, and the server's identity in templates.
#[derive(Clone, Copy)]
pub struct Env<'a> {
    /// The evaluator.
    pub engine: &'a Engine,
    /// The store rules read and write.
    pub backend: &'a Backend,
    /// Whose series the group reads, and whose its outputs become (its tenant's, or every
    /// series for [`Scope::Unscoped`]).
    pub scope: &'a Scope,
    /// The tenants' limits the outputs of a tenant's group pass (`None`: no limits).
    pub gate: Option<&'a dyn WriteGate>,
    /// `$externalLabels` of templates, and labels added to alerts sent to Alertmanager.
    pub external_labels: &'a BTreeMap<String, String>,
    /// `$externalURL` of templates.
    pub external_url: &'a str,
}

impl Env<'_> {
    /// A querier of the group's series alone.
    fn querier(&self) -> Box<dyn Querier> {
        let limits =
            ReadLimits { deadline: Some(Instant::now() + self.engine.options().timeout), ..ReadLimits::default() };
        ScopedQuerier::confine(self.backend.querier(limits), self.scope)
    }

    /// Writes `batch` as the group's tenant's. A group of no tenant writes its series as they
    /// are: an output keeps the tenant label of its input.
    fn write(&self, mut batch: PackedBatch) -> Result<(), String> {
        let tenant = match self.scope {
            Scope::One(t) => Some(t),
            _ => None,
        };
        if tenant.is_some() {
            self.scope.stamp_packed(&mut batch).map_err(|e| e.to_string())?;
        }
        let gated = tenant.zip(self.gate);
        if let Some((t, gate)) = gated {
            batch = gate.admit(t, batch)?;
        }
        let samples = batch.sample_count() + batch.histogram_count();
        self.backend.write_packed(batch).map_err(|e| e.to_string())?;
        if let Some((t, gate)) = gated {
            gate.written(t, samples);
        }
        Ok(())
    }

    /// The instant vector of `expr` at `t_ms` (a scalar as one sample without labels).
    fn query(&self, expr: &str, t_ms: i64) -> Result<Vec<OutputSample>, String> {
        let querier = self.querier();
        let result = self.engine.instant(&*querier, expr, t_ms).map_err(|e| e.to_string())?;
        match result.value {
            Value::Vector(v) => Ok(v
                .into_iter()
                .map(|s| OutputSample { labels: s.labels, value: s.value, histogram: s.histogram })
                .collect()),
            Value::Scalar { value, .. } => Ok(vec![OutputSample { labels: Labels::empty(), value, histogram: None }]),
            _ => Err("rule result is not a vector or scalar".to_owned()),
        }
    }

    /// The latest `ALERTS_FOR_STATE` sample in `[from_ms, to_ms]` of each alert of the rule
    /// `name` (a staleness marker included), by the alert's labels (the series' without
    /// `__name__`).
    fn for_state(&self, name: &str, from_ms: i64, to_ms: i64) -> Result<HashMap<Labels, f64>, String> {
        let matchers = [Matcher::equal("__name__", "ALERTS_FOR_STATE"), Matcher::equal("alertname", name)];
        let series = self.querier().select(&matchers, from_ms, to_ms, None).map_err(|e| e.to_string())?;
        Ok(series
            .into_iter()
            .filter_map(|s| {
                let latest = s.samples.last()?.value;
                let labels = s.labels.iter().filter(|l| l.name != "__name__").cloned().collect();
                Some((Labels::from_trusted(labels), latest))
            })
            .collect())
    }
}

/// The health of a rule after its latest evaluation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    /// Not evaluated yet.
    Unknown,
    /// The latest evaluation succeeded.
    Ok,
    /// The latest evaluation failed (see [`RuleRun::last_error`]).
    Err,
}

impl Health {
    /// Prometheus' word: `unknown`, `ok`, `err`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Unknown => "unknown",
            Self::Ok => "ok",
            Self::Err => "err",
        }
    }
}

/// A rule with what its evaluations left behind.
#[derive(Debug, Clone)]
pub struct RuleRun {
    /// The rule.
    pub rule: Rule,
    /// Health after the latest evaluation.
    pub health: Health,
    /// The latest evaluation's error.
    pub last_error: Option<String>,
    /// Wall-clock time the latest evaluation started (Unix milliseconds).
    pub last_evaluation_ms: Option<i64>,
    /// How long the latest evaluation took, seconds.
    pub evaluation_seconds: f64,
    /// Alerting rules: their alerts.
    pub alerts: AlertSet,
    /// The series the latest successful evaluation wrote (for stale markers).
    previous: HashSet<Labels>,
    /// Whether the rule has been evaluated on this node since it started: on a shared store
    /// its first evaluation brings every alert it raises in line with the other evaluators'
    /// (see [`super::for_state`]), later ones only the alerts new to this node.
    caught_up: bool,
}

impl RuleRun {
    /// A rule not yet evaluated.
    pub fn new(rule: Rule) -> Self {
        Self {
            rule,
            health: Health::Unknown,
            last_error: None,
            last_evaluation_ms: None,
            evaluation_seconds: 0.0,
            alerts: AlertSet::default(),
            previous: HashSet::new(),
            caught_up: false,
        }
    }

    /// The series the latest successful evaluation wrote.
    pub fn written_series(&self) -> impl Iterator<Item = &Labels> {
        self.previous.iter()
    }
}

/// A group with its rules' state.
#[derive(Debug, Clone)]
pub struct GroupRun {
    /// The group as loaded.
    pub group: Group,
    /// The evaluation interval in force (the group's, or the global one).
    pub interval_ms: i64,
    /// The query offset in force (the group's, or the global one).
    pub query_offset_ms: i64,
    /// Its rules, in order.
    pub rules: Vec<RuleRun>,
    /// Wall-clock time the latest evaluation started (Unix milliseconds).
    pub last_evaluation_ms: Option<i64>,
    /// How long the latest evaluation took, seconds.
    pub evaluation_seconds: f64,
    /// Evaluation timestamp of the latest evaluation (milliseconds).
    pub last_timestamp_ms: Option<i64>,
    /// Slots skipped because an evaluation ran past the next one.
    pub missed: u64,
    /// Evaluations of the group so far (`prometheus_rule_group_iterations_total` less missed).
    pub iterations: u64,
    /// Rule evaluations so far.
    pub rule_evaluations: u64,
    /// Rule evaluations that failed so far.
    pub rule_failures: u64,
    /// Samples the latest evaluation wrote.
    pub last_samples: u64,
}

/// An alert due to be sent to Alertmanager, with the expression that raised it.
#[derive(Debug, Clone, PartialEq)]
pub struct Outgoing {
    /// The alert as it stands after the evaluation.
    pub alert: Alert,
    /// The rule's expression (for the generator URL).
    pub expr: String,
    /// The tenant of the group that raised it (sent as `X-Scope-OrgID`, as Mimir's ruler sends
    /// it); `None` for a group of no tenant.
    pub tenant: Option<crate::tenant::TenantId>,
}

/// Tuning of alert sending: Prometheus' `--rules.alert.resend-delay` (1m).
pub const DEFAULT_RESEND_DELAY_MS: i64 = 60_000;

impl GroupRun {
    /// A group ready to run with the global defaults `interval_ms` and `query_offset_ms`.
    pub fn new(group: Group, interval_ms: i64, query_offset_ms: i64) -> Self {
        let interval_ms = group.interval_ms.unwrap_or(interval_ms);
        let query_offset_ms = group.query_offset_ms.unwrap_or(query_offset_ms);
        let rules = group.rules.iter().cloned().map(RuleRun::new).collect();
        Self {
            group,
            interval_ms,
            query_offset_ms,
            rules,
            last_evaluation_ms: None,
            evaluation_seconds: 0.0,
            last_timestamp_ms: None,
            missed: 0,
            iterations: 0,
            rule_evaluations: 0,
            rule_failures: 0,
            last_samples: 0,
        }
    }

    /// Takes over the state of `previous`, the same group before a reload: each rule takes the
    /// state of the first unclaimed rule of the same name and labels (Prometheus' `CopyState`).
    /// Returns the series written by rules that found no successor.
    pub fn adopt(&mut self, previous: GroupRun) -> Vec<Labels> {
        let mut old: Vec<Option<RuleRun>> = previous.rules.into_iter().map(Some).collect();
        for run in &mut self.rules {
            let found = old.iter_mut().find(|o| {
                o.as_ref().is_some_and(|o| o.rule.name() == run.rule.name() && o.rule.labels == run.rule.labels)
            });
            let Some(o) = found.and_then(Option::take) else { continue };
            run.health = o.health;
            run.last_error = o.last_error;
            run.last_evaluation_ms = o.last_evaluation_ms;
            run.evaluation_seconds = o.evaluation_seconds;
            run.previous = o.previous;
            run.alerts = o.alerts;
            run.caught_up = o.caught_up;
        }
        self.last_evaluation_ms = previous.last_evaluation_ms;
        self.evaluation_seconds = previous.evaluation_seconds;
        self.last_timestamp_ms = previous.last_timestamp_ms;
        self.missed = previous.missed;
        self.iterations = previous.iterations;
        self.rule_evaluations = previous.rule_evaluations;
        self.rule_failures = previous.rule_failures;
        self.last_samples = previous.last_samples;
        old.into_iter().flatten().flat_map(|o| o.previous.into_iter()).collect()
    }

    /// Marks `series` stale at `now_ms` less the group's query offset (series of rules a
    /// reload removed).
    pub fn mark_stale(&self, series: Vec<Labels>, now_ms: i64, env: &Env<'_>) {
        Self::write_stale(series, now_ms - self.query_offset_ms, env);
    }

    /// Writes a stale marker at `t_ms` for each of `series`; a failure is logged (the series
    /// then ends by the lookback instead).
    pub fn write_stale(series: Vec<Labels>, t_ms: i64, env: &Env<'_>) {
        if series.is_empty() {
            return;
        }
        let mut batch = PackedBatch::default();
        for labels in &series {
            push_labels(&mut batch, labels);
            batch.push_sample(Sample::new(t_ms, f64::from_bits(STALE_NAN_BITS)));
            batch.finish_series();
        }
        if let Err(e) = env.write(batch) {
            tracing::warn!(series = series.len(), error = %e, "marking the series of removed rules stale failed");
        }
    }

    /// Evaluates every rule at `ts_ms` in order, writing outputs and stale markers through
    /// `env.backend`. Returns the alerts due to be sent (resend delay `resend_delay_ms`).
    /// A failing rule records its error and the next rule still runs.
    pub fn evaluate(&mut self, ts_ms: i64, env: &Env<'_>, resend_delay_ms: i64) -> Vec<Outgoing> {
        let started = Instant::now();
        self.last_evaluation_ms = Some(chrono::Utc::now().timestamp_millis());
        self.last_timestamp_ms = Some(ts_ms);
        let mut outgoing = Vec::new();
        let (interval_ms, query_ts) = (self.interval_ms, ts_ms - self.query_offset_ms);
        let slots =
            Slots { hash: group_hash(&self.group.identity(), &self.group.name), interval_ms: interval_ms.max(1) };
        self.iterations += 1;
        let mut samples = 0u64;
        for i in 0..self.rules.len() {
            let rule_started = Instant::now();
            let Some(run) = self.rules.get_mut(i) else { continue };
            run.last_evaluation_ms = Some(chrono::Utc::now().timestamp_millis());
            let produced = produce(run, &self.group, At { ts_ms, query_ts, slots }, env);
            self.rule_evaluations += 1;
            match produced.and_then(|out| {
                samples += out.len() as u64;
                write(run, out, query_ts, env)
            }) {
                Ok(()) => {
                    run.health = Health::Ok;
                    run.last_error = None;
                    if let RuleKind::Alerting { .. } = run.rule.kind {
                        let due = run.alerts.due_for_sending(ts_ms, resend_delay_ms, interval_ms);
                        let tenant = &self.group.tenant;
                        outgoing.extend(due.into_iter().map(|alert| Outgoing {
                            alert,
                            expr: run.rule.expr.clone(),
                            tenant: tenant.clone(),
                        }));
                    }
                }
                Err(e) => {
                    tracing::warn!(group = %self.group.name, rule = %run.rule.name(), error = %e, "rule evaluation failed");
                    run.health = Health::Err;
                    run.last_error = Some(e);
                    self.rule_failures += 1;
                }
            }
            run.evaluation_seconds = rule_started.elapsed().as_secs_f64();
        }
        self.evaluation_seconds = started.elapsed().as_secs_f64();
        self.last_samples = samples;
        outgoing
    }
}

/// When a rule is evaluated.
#[derive(Clone, Copy)]
struct At {
    /// The evaluation's timestamp (the slot), milliseconds.
    ts_ms: i64,
    /// Its query time: the timestamp less the query offset, where outputs are written.
    query_ts: i64,
    /// The group's slots.
    slots: Slots,
}

/// Runs one rule's query and turns the answer into the samples to write.
fn produce(run: &mut RuleRun, group: &Group, at: At, env: &Env<'_>) -> Result<Vec<OutputSample>, String> {
    let At { ts_ms, query_ts, .. } = at;
    let answer = env.query(&run.rule.expr, query_ts)?;
    let labels = output::rule_labels(&group.labels, &run.rule.labels);
    match &run.rule.kind {
        RuleKind::Recording { record } => output::recorded(answer, record, &labels, group.limit),
        RuleKind::Alerting { alert, for_ms, keep_firing_for_ms, annotations } => {
            let raised = raise(alert, &labels, annotations, answer, query_ts, env)?;
            let holds = Holds { for_ms: *for_ms, keep_firing_for_ms: *keep_firing_for_ms, limit: group.limit };
            if env.backend.is_shared() {
                let restored = !std::mem::replace(&mut run.caught_up, true);
                join_others(&mut run.alerts, restored, alert, &raised, at, holds.for_ms, env);
            }
            run.alerts.update(ts_ms, raised, holds).map_err(|e| e.to_string())?;
            Ok(run
                .alerts
                .series(alert)
                .into_iter()
                .map(|(labels, value)| OutputSample { labels, value, histogram: None })
                .collect())
        }
    }
}

/// On a store several nodes share: brings the alerts this evaluation raised that the node
/// does not hold pending or firing (all of them at the rule's first evaluation here,
/// `restored`) in line
/// with the other evaluators', read from their `ALERTS_FOR_STATE` within the group's interval
/// and the lookback before the query time (see [`super::for_state`]). A failed read is logged
/// and the alerts start here as on a store of one's own.
fn join_others(
    alerts: &mut AlertSet,
    restored: bool,
    name: &str,
    raised: &[Raised],
    at: At,
    for_ms: i64,
    env: &Env<'_>,
) {
    let At { ts_ms, query_ts, slots } = at;
    let wanted: Vec<&Labels> = raised
        .iter()
        .map(|r| &r.labels)
        .filter(|l| restored || alerts.get(l).is_none_or(|a| a.state == AlertState::Inactive))
        .collect();
    if wanted.is_empty() {
        return;
    }
    let window = slots.interval_ms.saturating_add(env.engine.options().lookback_ms);
    match env.for_state(name, query_ts.saturating_sub(window), query_ts) {
        Ok(latest) => {
            for labels in wanted {
                let seen = Seen::from_latest(latest.get(labels).copied());
                for_state::join(alerts, labels, seen, restored, ts_ms, for_ms, slots);
            }
        }
        Err(e) => tracing::warn!(alert = %name, error = %e, "reading the other evaluators' alert state failed"),
    }
}

/// The alerts an alerting rule's answer raises: labels and annotations expanded per sample.
fn raise(
    name: &str,
    labels: &[(String, String)],
    annotations: &BTreeMap<String, String>,
    answer: Vec<OutputSample>,
    query_ts: i64,
    env: &Env<'_>,
) -> Result<Vec<Raised>, String> {
    let query = AtTime { env, t_ms: query_ts };
    let template_name = format!("__alert_{name}");
    let mut seen = HashSet::with_capacity(answer.len());
    let mut raised = Vec::with_capacity(answer.len());
    for s in answer {
        let sample_labels: BTreeMap<String, String> =
            s.labels.iter().map(|l| (l.name.clone(), l.value.clone())).collect();
        let data = TemplateData {
            labels: &sample_labels,
            external_labels: env.external_labels,
            external_url: env.external_url,
            value: s.value,
        };
        let expand = |text: &str| match template::expand(&template_name, text, &data, &query) {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!(alert = %name, error = %e, "expanding an alert template failed");
                format!("<error expanding template: {e}>")
            }
        };
        let mut out: BTreeMap<String, String> = sample_labels.clone();
        out.remove("__name__");
        for (k, v) in labels {
            out.insert(k.clone(), expand(v));
        }
        out.insert("alertname".to_owned(), name.to_owned());
        let alert_labels = Labels::from_trusted(out.into_iter().map(|(k, v)| Label::new(k, v)).collect());
        if !seen.insert(alert_labels.clone()) {
            return Err("vector contains metrics with the same labelset after applying alert labels".to_owned());
        }
        let annotations = annotations.iter().map(|(k, v)| Label::new(k.clone(), expand(v))).collect();
        raised.push(Raised { labels: alert_labels, annotations, value: s.value });
    }
    Ok(raised)
}

/// A template's `query` function: instant queries at the rule's query time.
struct AtTime<'a> {
    env: &'a Env<'a>,
    t_ms: i64,
}

impl TemplateQuery for AtTime<'_> {
    fn timestamp_ms(&self) -> i64 {
        self.t_ms
    }

    fn query(&self, expr: &str) -> Result<Vec<QuerySample>, String> {
        let answer = self.env.query(expr, self.t_ms)?;
        Ok(answer
            .into_iter()
            .map(|s| QuerySample {
                labels: s.labels.iter().map(|l| (l.name.clone(), l.value.clone())).collect(),
                value: s.value,
            })
            .collect())
    }
}

/// Writes a rule's samples at `t_ms` and stale markers for the series its previous evaluation
/// wrote and this one did not; the rule's series set moves on only once the write succeeded.
fn write(run: &mut RuleRun, samples: Vec<OutputSample>, t_ms: i64, env: &Env<'_>) -> Result<(), String> {
    let mut batch = PackedBatch::default();
    let mut written = HashSet::with_capacity(samples.len());
    for s in samples {
        push_labels(&mut batch, &s.labels);
        match s.histogram {
            Some(histogram) => batch.push_histogram(HistogramSample { timestamp_ms: t_ms, histogram }),
            None => batch.push_sample(Sample::new(t_ms, s.value)),
        }
        batch.finish_series();
        written.insert(s.labels);
    }
    for gone in run.previous.iter().filter(|l| !written.contains(*l)) {
        push_labels(&mut batch, gone);
        batch.push_sample(Sample::new(t_ms, f64::from_bits(STALE_NAN_BITS)));
        batch.finish_series();
    }
    if !batch.is_empty() {
        env.write(batch).map_err(|e| format!("writing the rule's samples: {e}"))?;
    }
    run.previous = written;
    Ok(())
}

fn push_labels(batch: &mut PackedBatch, labels: &Labels) {
    for l in labels.iter() {
        batch.push_label(&l.name, &l.value);
    }
}
