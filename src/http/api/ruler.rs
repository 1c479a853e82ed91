//! The ruler API of Mimir and Cortex, through which Grafana's alerting UI creates and edits rule
//! groups: `GET|POST|DELETE /prometheus/config/v1/rules[/{namespace}[/{group}]]`, also under
//! `/config/v1/rules` (Grafana's path for a data source whose URL is the server's root) and
//! `/rules` (its path before it knows the flavour, which it probes with `GET /rules/test/test`).
//! Bodies and answers are YAML; answers to changes are `202 Accepted` with Mimir's JSON.
//! A change reloads the rules at once; `--rule-file` groups are not visible or changeable here.
//!
//! With `--tenants` each tenant has its own namespaces, as in Mimir: a request reads and changes
//! those of the tenant it acts as (the default tenant's are those of a server without tenants),
//! and that tenant's groups read and write its series alone. A request naming several tenants
//! is refused.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Extension, Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_norway::{Mapping, Value};

use crate::http::state::AppState;
use crate::rules::evaluator::Evaluator;
use crate::rules::ruler::{yaml, RulerError, RulerStore};
use crate::tenant::{Scope, TenantId};

/// What a ruler request answers: YAML, Mimir's `202` JSON, or an error as text.
fn answer(result: Result<Option<Value>, RulerError>) -> Response {
    match result {
        Ok(Some(value)) => match yaml(&value) {
            Ok(text) => ([(header::CONTENT_TYPE, "application/yaml")], text).into_response(),
            Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response(),
        },
        Ok(None) => (
            StatusCode::ACCEPTED,
            axum::Json(serde_json::json!({"status": "success", "data": null, "errorType": "", "error": ""})),
        )
            .into_response(),
        Err(RulerError::NotFound(what)) => (StatusCode::NOT_FOUND, format!("{what}\n")).into_response(),
        Err(RulerError::Invalid(why)) => (StatusCode::BAD_REQUEST, format!("{why}\n")).into_response(),
        Err(e @ RulerError::Io(_)) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response(),
        // The cluster holding the namespaces failed: worth a retry.
        Err(e @ RulerError::Storage(_)) => (StatusCode::SERVICE_UNAVAILABLE, format!("{e}\n")).into_response(),
    }
}

/// Runs `op` on the ruler store off the executor, for the tenant of `scope`; `None` when the
/// server has no ruler API.
async fn with_store<T: Send + 'static>(
    state: &AppState,
    scope: &Scope,
    op: impl FnOnce(&RulerStore, Option<&TenantId>, &Evaluator) -> Result<T, RulerError> + Send + 'static,
) -> Result<T, Response> {
    let Some(rules) = state.rules.clone() else {
        return Err((StatusCode::NOT_FOUND, "the ruler API is not enabled on this server\n").into_response());
    };
    let owner = match scope {
        Scope::Unscoped => None,
        Scope::One(t) => Some(t.clone()),
        Scope::Many(_) => {
            let why = format!("the ruler API acts for one tenant; {:?} names several\n", scope.name());
            return Err((StatusCode::BAD_REQUEST, why).into_response());
        }
    };
    let done = tokio::task::spawn_blocking(move || match rules.ruler() {
        Some(store) => op(store, owner.as_ref(), &rules),
        None => Err(RulerError::NotFound("the ruler API is not enabled on this server")),
    })
    .await;
    match done {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(answer(Err(e))),
        Err(e) => Err((StatusCode::INTERNAL_SERVER_ERROR, format!("ruler task failed: {e}\n")).into_response()),
    }
}

/// Reloads after a change; a reload refused (another namespace or a rule file gone bad) is
/// reported, the change itself stays.
fn reload_after(rules: &Evaluator) -> Result<Option<Value>, RulerError> {
    rules
        .reload()
        .map_err(|errors| RulerError::Invalid(format!("saved, but the rules did not reload: {}", errors.join("; "))))?;
    Ok(None)
}

/// `GET <prefix>`: every namespace with its groups.
pub async fn list(State(state): State<Arc<AppState>>, Extension(scope): Extension<Scope>) -> Response {
    let all = with_store(&state, &scope, |store, owner, _| store.all(owner)).await;
    match all {
        Ok(all) if all.is_empty() => answer(Err(RulerError::NotFound(crate::rules::ruler::NAMESPACE_NOT_FOUND))),
        Ok(all) => {
            let map: Mapping = all.into_iter().map(|(ns, groups)| (Value::from(ns), Value::Sequence(groups))).collect();
            answer(Ok(Some(Value::Mapping(map))))
        }
        Err(r) => r,
    }
}

/// `GET <prefix>/{namespace}`.
pub async fn namespace(
    State(state): State<Arc<AppState>>,
    Extension(scope): Extension<Scope>,
    Path(ns): Path<String>,
) -> Response {
    let key = ns.clone();
    match with_store(&state, &scope, move |store, owner, _| store.namespace(owner, &ns)).await {
        Ok(groups) => {
            let mut map = Mapping::new();
            map.insert(Value::from(key), Value::Sequence(groups));
            answer(Ok(Some(Value::Mapping(map))))
        }
        Err(r) => r,
    }
}

/// `GET <prefix>/{namespace}/{group}`.
pub async fn group(
    State(state): State<Arc<AppState>>,
    Extension(scope): Extension<Scope>,
    Path((ns, group)): Path<(String, String)>,
) -> Response {
    match with_store(&state, &scope, move |store, owner, _| store.group(owner, &ns, &group)).await {
        Ok(g) => answer(Ok(Some(g))),
        Err(r) => r,
    }
}

/// `POST <prefix>/{namespace}` with one group as YAML: creates or replaces it.
pub async fn set(
    State(state): State<Arc<AppState>>,
    Extension(scope): Extension<Scope>,
    Path(ns): Path<String>,
    body: Bytes,
) -> Response {
    let done = with_store(&state, &scope, move |store, owner, rules| {
        store.set(owner, &ns, &body)?;
        reload_after(rules)
    })
    .await;
    done.map_or_else(|r| r, |v| answer(Ok(v)))
}

/// `DELETE <prefix>/{namespace}/{group}`.
pub async fn delete_group(
    State(state): State<Arc<AppState>>,
    Extension(scope): Extension<Scope>,
    Path((ns, group)): Path<(String, String)>,
) -> Response {
    let done = with_store(&state, &scope, move |store, owner, rules| {
        store.delete_group(owner, &ns, &group)?;
        reload_after(rules)
    })
    .await;
    done.map_or_else(|r| r, |v| answer(Ok(v)))
}

/// `DELETE <prefix>/{namespace}`.
pub async fn delete_namespace(
    State(state): State<Arc<AppState>>,
    Extension(scope): Extension<Scope>,
    Path(ns): Path<String>,
) -> Response {
    let done = with_store(&state, &scope, move |store, owner, rules| {
        store.delete_namespace(owner, &ns)?;
        reload_after(rules)
    })
    .await;
    done.map_or_else(|r| r, |v| answer(Ok(v)))
}
