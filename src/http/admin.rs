//! The admin API, off unless `--enable-admin-api` (and behind the write credentials when they
//! are set, see `access.rs`):
//!
//! | endpoint | does | answers |
//! |---|---|---|
//! | `POST/PUT /api/v1/admin/tsdb/delete_series?match[]=..&start=..&end=..` | deletes the samples of matching series in the range (default: all time) | 204 |
//! | `POST/PUT /api/v1/admin/tsdb/delete_tenant` (tenant named as any request names it) | deletes the tenant's rule namespaces, then every sample of the tenant, all time | 200, `{"tenant": ..., "samples": n, "ruleNamespaces": n}` |
//! | `POST/PUT /api/v1/admin/tsdb/snapshot` | copies the database into `<data-dir>/snapshots/<name>` | 200, `{"name": ...}` |
//!
//! With the API disabled both answer 403 naming the flag (Prometheus answers 503 "admin APIs
//! disabled", which clients would retry).

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::api::{params, success, time_range};
use super::blocking;
use super::error::ApiError;
use super::state::AppState;
use crate::matcher::{MatchOp, Matcher};
use crate::tenant::Scope;
use axum::Extension;

fn enabled(state: &AppState) -> Result<(), ApiError> {
    if state.admin_api {
        Ok(())
    } else {
        Err(ApiError::Forbidden("admin APIs are disabled; start saltdb with --enable-admin-api to use them".into()))
    }
}

/// `delete_series`: removes the samples of every series matching any `match[]` in
/// `[start, end]`.
///
/// # Errors
/// 403 when disabled; 400 without `match[]` or with bad times; 5xx on storage failure.
pub async fn delete_series(
    State(state): State<Arc<AppState>>,
    Extension(scope): Extension<Scope>,
    method: Method,
    RawQuery(q): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    enabled(&state)?;
    let p = params(&state, &method, q.as_deref(), &headers, body).await?;
    p.reject_unknown(&["match[]", "start", "end"])?;
    let selectors = p.selectors("match[]")?;
    if selectors.is_empty() {
        return Err(ApiError::BadData("no match[] parameter provided".into()));
    }
    let (start, end) = time_range(&p)?;
    // A tenant deletes its own series only; several at once is not a delete.
    scope.writer().map_err(|e| ApiError::BadData(e.to_string()))?;
    let selectors: Vec<Vec<Matcher>> = selectors.iter().map(|m| scope.select(m).into_owned()).collect();
    delete(&state, selectors, (start, end)).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// Deletes the samples of the series matching any of `selectors` in `[start, end]`; the
/// samples (embedded store) or series (ClickHouse) deleted.
async fn delete(state: &AppState, selectors: Vec<Vec<Matcher>>, (start, end): (i64, i64)) -> Result<u64, ApiError> {
    match state.backend.clone() {
        crate::backend::Backend::Embedded(storage) => {
            let outcome = blocking::run(move || {
                let mut total = crate::storage::DeleteOutcome::default();
                for matchers in &selectors {
                    total += storage.delete_series(matchers, start, end)?;
                }
                Ok(total)
            })
            .await?;
            tracing::info!(samples = outcome.samples, chunks = outcome.chunks, start, end, "deleted series samples");
            Ok(outcome.samples)
        }
        crate::backend::Backend::ClickHouse(ch) => {
            let series = blocking::run(move || {
                let mut total = 0;
                for matchers in &selectors {
                    total += ch.delete_series(matchers, start, end)?;
                }
                Ok(total)
            })
            .await?;
            tracing::info!(series, start, end, "deleted series samples on ClickHouse");
            Ok(series as u64)
        }
    }
}

/// `delete_tenant`: deletes every sample of the tenant the request names (header or URL; the
/// operator's credentials, as every admin endpoint but `delete_series`), all time, and first
/// its rule namespaces of the ruler API. Its windows'
/// rows go, so the storage engine's compactions reclaim their bytes; the series' labels stay
/// until retention's churn removes series without samples.
///
/// # Errors
/// 403 when disabled; 400 without `--tenants` or for several tenants; 5xx on storage failure.
pub async fn delete_tenant(
    State(state): State<Arc<AppState>>,
    Extension(scope): Extension<Scope>,
    method: Method,
    RawQuery(q): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    enabled(&state)?;
    let p = params(&state, &method, q.as_deref(), &headers, body).await?;
    p.reject_unknown(&[])?;
    let tenant = match &scope {
        Scope::One(t) => t.clone(),
        Scope::Unscoped => {
            return Err(ApiError::BadData("there are no tenants to delete: the server runs without --tenants".into()))
        }
        Scope::Many(_) => return Err(ApiError::BadData("name one tenant to delete, not several".into())),
    };
    // Its rules go first, so that none writes into the tenant after its samples are gone.
    let rule_namespaces = match state.rules.clone() {
        Some(rules) if rules.ruler().is_some() => {
            let owner = tenant.clone();
            blocking::run(move || {
                let Some(store) = rules.ruler() else { return Ok(0) };
                let n = store.delete_owner(Some(&owner)).map_err(|e| match e {
                    crate::rules::ruler::RulerError::Storage(e) => ApiError::Storage(e),
                    e => ApiError::Internal(format!("deleting the tenant's rules: {e}")),
                })?;
                if n > 0 {
                    rules.reload().map_err(|errors| {
                        ApiError::Internal(format!(
                            "the tenant's rules were deleted, but the rules did not reload: {}",
                            errors.join("; ")
                        ))
                    })?;
                }
                Ok(n)
            })
            .await?
        }
        _ => 0,
    };
    let every = Matcher::new(MatchOp::RegexMatch, crate::labels::METRIC_NAME, ".+")
        .map_err(|e| ApiError::Internal(e.to_string()))?;
    let selectors = vec![scope.select(std::slice::from_ref(&every)).into_owned()];
    let deleted = delete(&state, selectors, (crate::sample::MIN_TIMESTAMP_MS, crate::sample::MAX_TIMESTAMP_MS)).await?;
    state.tenant_figures.invalidate();
    tracing::info!(tenant = %tenant, deleted, rule_namespaces, "deleted a tenant");
    let what = if state.backend.embedded().is_some() { "samples" } else { "series" };
    Ok(success(json!({"tenant": tenant.as_str(), what: deleted, "ruleNamespaces": rule_namespaces}), Vec::new()))
}

/// `snapshot`: copies the database into a new directory under `<data-dir>/snapshots`.
///
/// # Errors
/// 403 when disabled; 400 for unknown parameters; 5xx on storage failure.
pub async fn snapshot(
    State(state): State<Arc<AppState>>,
    method: Method,
    RawQuery(q): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    enabled(&state)?;
    let p = params(&state, &method, q.as_deref(), &headers, body).await?;
    // `skip_head` is accepted for Prometheus compatibility and ignored: the writer flushes the
    // in-memory head before pinning the snapshot, so it always includes the most recent samples.
    p.reject_unknown(&["skip_head"])?;
    let name = snapshot_name(crate::storage::now_ms());
    let storage = state.embedded("a snapshot")?.clone();
    let dir = storage.data_dir().join("snapshots").join(&name);
    let outcome = blocking::run(move || Ok(storage.snapshot(&dir)?)).await?;
    tracing::info!(name = %name, keyspaces = outcome.keyspaces, rows = outcome.rows, "snapshot written");
    Ok(success(json!({ "name": name }), Vec::new()))
}

/// `YYYYMMDDTHHMMSSZ-<16 hex>`, like Prometheus' snapshot names; the suffix comes from the
/// clock's nanoseconds and a process-wide counter, so two snapshots never share a name.
fn snapshot_name(now_ms: i64) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let stamp = chrono::DateTime::from_timestamp_millis(now_ms)
        .map_or_else(|| now_ms.to_string(), |t| t.format("%Y%m%dT%H%M%SZ").to_string());
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| u64::from(d.subsec_nanos()));
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{stamp}-{:016x}", (nanos << 20) ^ n ^ (u64::from(std::process::id()) << 44))
}

#[cfg(test)]
mod tests {
    #[test]
    fn snapshot_names_are_unique_and_dated() {
        let a = super::snapshot_name(1_700_000_000_000);
        let b = super::snapshot_name(1_700_000_000_000);
        assert!(a.starts_with("20231114T221320Z-"), "{a}");
        assert_eq!(a.len(), "20231114T221320Z-".len() + 16);
        assert_ne!(a, b);
    }
}
