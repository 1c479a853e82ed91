//! `GET /api/v1/rules`, `GET /api/v1/alerts` and `POST|PUT /-/reload`, in Prometheus' shapes.
//!
//! `/api/v1/rules` reads `type` (`alert` or `record`), `rule_name[]`, `rule_group[]`, `file[]`,
//! `match[]` (selectors the rules' configured labels must satisfy), `exclude_alerts` and the
//! pagination pair `group_limit` / `group_next_token` (a SHA-256 of `file;group`, as Prometheus
//! makes it); a group is listed when any of its rules remains, as in Prometheus 3.
//!
//! With `--tenants` both list the groups of the tenants the request acts as (a tenant's groups
//! are set through the ruler API as that tenant), as Mimir lists them. The rule files' groups,
//! which read every tenant's series, are listed where they were before tenants: without a
//! tenant's token, to requests of the default tenant.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Extension, RawQuery, State};
use axum::http::{HeaderMap, Method};
use axum::response::Response;
use serde_json::{json, Value};

use super::{params, success};
use crate::http::access::Identity;
use crate::http::error::ApiError;
use crate::http::state::AppState;
use crate::labels::{Label, Labels};
use crate::rules::alert::{Alert, AlertState};
use crate::rules::file::RuleKind;
use crate::rules::group::{GroupRun, RuleRun};
use crate::tenant::Scope;

/// The groups a request of `scope` by `identity` sees (see the module's doc).
fn groups_of(state: &AppState, scope: &Scope, identity: Option<&Identity>) -> Vec<Arc<GroupRun>> {
    let mut groups = state.rules.as_ref().map(|r| r.groups()).unwrap_or_default();
    let tenant_token = matches!(identity, Some(Identity::Tenant(_)));
    let sees = |t: &crate::tenant::TenantId, g: &GroupRun| match &g.group.tenant {
        Some(owner) => owner == t,
        None => t.is_default() && !tenant_token,
    };
    match scope {
        Scope::Unscoped => {}
        Scope::One(t) => groups.retain(|g| sees(t, g)),
        Scope::Many(ids) => groups.retain(|g| ids.iter().any(|t| sees(t, g))),
    }
    groups
}

/// Go's zero time, which Prometheus shows for "never".
const NEVER: &str = "0001-01-01T00:00:00Z";

fn rfc3339(ms: Option<i64>) -> String {
    ms.and_then(chrono::DateTime::from_timestamp_millis)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true))
        .unwrap_or_else(|| NEVER.to_owned())
}

fn object(labels: impl Iterator<Item = Label>) -> Value {
    Value::Object(labels.map(|l| (l.name, Value::from(l.value))).collect())
}

fn labels_object(labels: &Labels) -> Value {
    object(labels.iter().cloned())
}

/// Go's `strconv.FormatFloat(v, 'e', -1, 64)`: `1e+00`, `3.5e+01`.
fn go_float_e(v: f64) -> String {
    crate::rules::unit::go_float_e(v).replace('E', "e")
}

/// A float as Go's `encoding/json` writes it: integral values without a fraction (`2`, not
/// `2.0`).
fn go_number(v: f64) -> Value {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        Value::from(v as i64)
    } else {
        Value::from(v)
    }
}

fn alert_json(a: &Alert) -> Value {
    let mut v = json!({
        "labels": labels_object(&a.labels),
        "annotations": object(a.annotations.iter().cloned()),
        "state": a.state.as_str(),
        "activeAt": rfc3339(Some(a.active_at_ms)),
        "value": go_float_e(a.value),
    });
    if let (Some(since), Value::Object(map)) = (a.keep_firing_since_ms, &mut v) {
        map.insert("keepFiringSince".to_owned(), Value::from(rfc3339(Some(since))));
    }
    v
}

fn rule_json(run: &RuleRun, with_alerts: bool) -> Value {
    let rule = &run.rule;
    let labels = object(rule.labels.iter().map(|(k, v)| Label::new(k.clone(), v.clone())));
    let common = |mut v: Value| {
        if let Value::Object(map) = &mut v {
            map.insert("health".into(), Value::from(run.health.as_str()));
            // `omitempty` in Prometheus' shape.
            if let Some(e) = run.last_error.clone().filter(|e| !e.is_empty()) {
                map.insert("lastError".into(), Value::from(e));
            }
            map.insert("evaluationTime".into(), Value::from(run.evaluation_seconds));
            map.insert("lastEvaluation".into(), Value::from(rfc3339(run.last_evaluation_ms)));
        }
        v
    };
    match &rule.kind {
        RuleKind::Recording { record } => {
            let mut v = json!({"name": record, "query": rule.expr, "type": "recording"});
            if let (false, Value::Object(map)) = (rule.labels.is_empty(), &mut v) {
                map.insert("labels".into(), labels);
            }
            common(v)
        }
        RuleKind::Alerting { alert, for_ms, keep_firing_for_ms, annotations } => {
            let alerts: Vec<Value> =
                if with_alerts { run.alerts.active().map(alert_json).collect() } else { Vec::new() };
            let state = if run.alerts.active().next().is_none() { AlertState::Inactive } else { run.alerts.state() };
            common(json!({
                "state": state.as_str(),
                "name": alert,
                "query": rule.expr,
                "duration": go_number(*for_ms as f64 / 1000.0),
                "keepFiringFor": go_number(*keep_firing_for_ms as f64 / 1000.0),
                "labels": labels,
                "annotations": object(annotations.iter().map(|(k, v)| Label::new(k.clone(), v.clone()))),
                "alerts": alerts,
                "type": "alerting",
            }))
        }
    }
}

/// What `/api/v1/rules` was asked to list.
struct RuleFilter {
    kind: Option<bool>,
    names: Vec<String>,
    groups: Vec<String>,
    files: Vec<String>,
    selectors: Vec<Vec<crate::matcher::Matcher>>,
    with_alerts: bool,
}

impl RuleFilter {
    fn keeps_group(&self, g: &GroupRun) -> bool {
        (self.groups.is_empty() || self.groups.contains(&g.group.name))
            && (self.files.is_empty() || self.files.contains(&g.group.file))
    }

    fn keeps_rule(&self, r: &RuleRun) -> bool {
        let alerting = matches!(r.rule.kind, RuleKind::Alerting { .. });
        let labels = &r.rule.labels;
        let selected = self.selectors.is_empty()
            || self
                .selectors
                .iter()
                .any(|set| set.iter().all(|m| m.matches(labels.get(&m.name).map_or("", String::as_str))));
        selected
            && self.kind.is_none_or(|k| k == alerting)
            && (self.names.is_empty() || self.names.iter().any(|n| n == r.rule.name()))
    }
}

/// Prometheus' `getRuleGroupNextToken`: the hex SHA-256 of `file;group`.
fn next_token(file: &str, group: &str) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(format!("{file};{group}").as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

/// `group_limit` and `group_next_token`, checked as Prometheus checks them.
fn pagination(p: &crate::http::params::Params) -> Result<(Option<usize>, Option<String>), ApiError> {
    let token = p.get("group_next_token").filter(|t| !t.is_empty()).map(str::to_owned);
    let limit = match p.get("group_limit").filter(|l| !l.is_empty()) {
        None if token.is_some() => {
            return Err(ApiError::BadData(
                "invalid parameter \"group_next_token\": group_limit needs to be present in order to paginate over the groups".into(),
            ))
        }
        None => None,
        Some(l) => match l.parse::<i32>() {
            Ok(n) if n > 0 => Some(n as usize),
            Ok(_) => return Err(ApiError::BadData("invalid parameter \"group_limit\": group_limit needs to be greater than 0".into())),
            Err(e) => {
                return Err(ApiError::BadData(format!(
                    "invalid parameter \"group_limit\": group_limit needs to be a valid number: {e}"
                )))
            }
        },
    };
    Ok((limit, token))
}

/// `GET /api/v1/rules`.
///
/// # Errors
/// 400 for a `type` other than `alert` or `record`, or a bad `exclude_alerts`.
pub async fn rules(
    State(state): State<Arc<AppState>>,
    Extension(scope): Extension<Scope>,
    identity: Option<Extension<Identity>>,
    method: Method,
    RawQuery(q): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let p = params(&state, &method, q.as_deref(), &headers, body).await?;
    let kind = match p.get("type").map(str::to_ascii_lowercase).as_deref() {
        None | Some("") => None,
        Some("alert") => Some(true),
        Some("record") => Some(false),
        Some(_) => {
            let other = p.get("type").unwrap_or_default();
            return Err(ApiError::BadData(format!("invalid parameter \"type\": not supported value {other:?}")));
        }
    };
    // Go's strconv.ParseBool.
    let with_alerts = match p.get("exclude_alerts").map(str::to_ascii_lowercase).as_deref() {
        None | Some("" | "0" | "f" | "false") => true,
        Some("1" | "t" | "true") => false,
        Some(_) => {
            let other = p.get("exclude_alerts").unwrap_or_default();
            return Err(ApiError::BadData(format!(
                "invalid parameter \"exclude_alerts\": error converting exclude_alerts: strconv.ParseBool: parsing {other:?}: invalid syntax"
            )));
        }
    };
    let (limit, token) = pagination(&p)?;
    let own = |name: &str| p.all(name).into_iter().map(str::to_owned).collect::<Vec<_>>();
    let filter = RuleFilter {
        kind,
        names: own("rule_name[]"),
        groups: own("rule_group[]"),
        files: own("file[]"),
        selectors: p.selectors("match[]")?,
        with_alerts,
    };
    let groups = groups_of(&state, &scope, identity.as_deref());
    let mut listed = Vec::new();
    let mut found_token = token.is_none();
    let mut next = None;
    for g in &groups {
        if !found_token {
            if token.as_deref() != Some(next_token(&g.group.file, &g.group.name).as_str()) {
                continue;
            }
            found_token = true;
        }
        if !filter.keeps_group(g) {
            continue;
        }
        let rules: Vec<Value> =
            g.rules.iter().filter(|r| filter.keeps_rule(r)).map(|r| rule_json(r, filter.with_alerts)).collect();
        if rules.is_empty() {
            continue;
        }
        if limit.is_some_and(|l| listed.len() == l) {
            next = Some(next_token(&g.group.file, &g.group.name));
            break;
        }
        listed.push(json!({
            "name": g.group.name,
            "file": g.group.file,
            "rules": rules,
            "interval": go_number(g.interval_ms as f64 / 1000.0),
            "limit": g.group.limit,
            "evaluationTime": g.evaluation_seconds,
            "lastEvaluation": rfc3339(g.last_evaluation_ms),
        }));
    }
    if !found_token {
        return Err(ApiError::BadData(format!(
            "invalid parameter \"group_next_token\": invalid group_next_token '{}'. were rule groups changed?",
            token.unwrap_or_default()
        )));
    }
    let mut data = json!({ "groups": listed });
    if let (Some(next), Value::Object(map)) = (next, &mut data) {
        map.insert("groupNextToken".to_owned(), Value::from(next));
    }
    Ok(success(data, Vec::new()))
}

/// `GET /api/v1/alerts`: every pending and firing alert.
pub async fn alerts(
    State(state): State<Arc<AppState>>,
    Extension(scope): Extension<Scope>,
    identity: Option<Extension<Identity>>,
) -> Response {
    let groups = groups_of(&state, &scope, identity.as_deref());
    let alerts: Vec<Value> =
        groups.iter().flat_map(|g| &g.rules).flat_map(|r| r.alerts.active().map(alert_json)).collect();
    success(json!({ "alerts": alerts }), Vec::new())
}

/// `POST|PUT /-/reload`: reads the tenant limits file (`--tenant-limits-file`) and the rule
/// files again; 500 with the files' errors when one is bad (the limits in force and the running
/// rules stay), as Prometheus answers.
///
/// # Errors
/// [`ApiError::Internal`] (500) with the errors.
pub async fn reload(State(state): State<Arc<AppState>>) -> Result<Response, ApiError> {
    if let Some(limits) = state.tenant_limits.clone() {
        let outcome = tokio::task::spawn_blocking(move || limits.reload())
            .await
            .map_err(|e| ApiError::Internal(format!("reload task failed: {e}")))?;
        if let Err(e) = outcome {
            tracing::warn!(error = %e, "keeping the tenant limits in force");
            return Err(ApiError::Internal(format!("failed to reload config: {e}")));
        }
    }
    let Some(rules) = state.rules.clone() else {
        return Ok(axum::response::IntoResponse::into_response("no rule files are configured; nothing to reload\n"));
    };
    let outcome = tokio::task::spawn_blocking(move || rules.reload())
        .await
        .map_err(|e| ApiError::Internal(format!("reload task failed: {e}")))?;
    match outcome {
        Ok(()) => Ok(axum::response::IntoResponse::into_response("")),
        Err(errors) => Err(ApiError::Internal(format!("failed to reload config: {}", errors.join("; ")))),
    }
}
