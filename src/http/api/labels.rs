//! `GET|POST /api/v1/labels` and `GET /api/v1/label/<name>/values`.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, Method};
use axum::response::Response;
use serde_json::Value;

use super::{limit, params, success, time_range, union_over_selectors};
use crate::http::error::ApiError;
use crate::http::params::Params;
use crate::http::state::AppState;
use crate::labels::is_storable_label_name;
use crate::matcher::Matcher;
use crate::tenant::Scope;
use axum::Extension;

/// Selectors from `match[]`, or one empty selector (all series) when none is given.
fn selectors_or_all(p: &Params) -> Result<Vec<Vec<Matcher>>, ApiError> {
    let s = p.selectors("match[]")?;
    Ok(if s.is_empty() { vec![Vec::new()] } else { s })
}

/// Label names.
///
/// # Errors
/// 400 for bad parameters; 5xx on storage failure.
pub async fn names(
    State(state): State<Arc<AppState>>,
    Extension(scope): Extension<Scope>,
    method: Method,
    RawQuery(q): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let p = params(&state, &method, q.as_deref(), &headers, body).await?;
    let selectors = selectors_or_all(&p)?;
    let (names, warnings): (Vec<String>, _) = union_over_selectors(
        &state,
        &scope,
        selectors,
        time_range(&p)?,
        limit(&p)?,
        (|q, m, a, b, n| q.held_label_names(m, a, b, n), |q, m, a, b, n| q.label_names(m, a, b, n)),
    )
    .await?;
    Ok(success(Value::from(names), warnings))
}

/// Values of one label.
///
/// # Errors
/// 400 for an invalid label name or bad parameters; 5xx on storage failure.
pub async fn values(
    State(state): State<Arc<AppState>>,
    Extension(scope): Extension<Scope>,
    name: Result<Path<String>, PathRejection>,
    method: Method,
    RawQuery(q): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    // A path segment that is not UTF-8 once percent-decoded (`/label/%ff/values`) gets the error
    // envelope like every other bad label name, not axum's plain-text rejection.
    let Path(name) =
        name.map_err(|e| ApiError::BadData(format!("invalid label name in the URL path: {}", e.body_text())))?;
    let name = label_name_from_path(&name)?;
    let p = params(&state, &method, q.as_deref(), &headers, body).await?;
    let selectors = selectors_or_all(&p)?;
    let (values, warnings): (Vec<String>, _) = union_over_selectors(
        &state,
        &scope,
        selectors,
        time_range(&p)?,
        limit(&p)?,
        (|q, m, a, b, n| q.held_label_values(&name, m, a, b, n), {
            let name = name.clone();
            move |q, m, a, b, n| q.label_values(&name, m, a, b, n)
        }),
    )
    .await?;
    Ok(success(Value::from(values), warnings))
}

/// The label name of a `label/<name>/values` path (percent-decoded by the router): any UTF-8
/// name as Prometheus 3 takes it (`service.name`, `名前`), or a `U__`-escaped one (Grafana
/// escapes names such as `service.name` that way).
fn label_name_from_path(raw: &str) -> Result<String, ApiError> {
    let invalid = || ApiError::BadData(format!("invalid label name: {}", crate::http::params::truncated(raw)));
    let name = unescape_label_name(raw).ok_or_else(invalid)?;
    if is_storable_label_name(&name) {
        Ok(name)
    } else {
        Err(invalid())
    }
}

/// Undoes Prometheus' `U__` escaping of label names in URLs (`U__` prefix, `_` written as `__`,
/// other characters as `_<hex code point>_`). Names without the prefix are returned unchanged.
pub fn unescape_label_name(s: &str) -> Option<String> {
    let Some(rest) = s.strip_prefix("U__") else { return Some(s.to_owned()) };
    let mut out = String::new();
    let mut chars = rest.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '_' {
            out.push(c);
            continue;
        }
        if chars.peek() == Some(&'_') {
            chars.next();
            out.push('_');
            continue;
        }
        let hex: String = chars.by_ref().take_while(|&c| c != '_').collect();
        out.push(u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32)?);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unescapes_utf8_label_names() {
        assert_eq!(unescape_label_name("job").as_deref(), Some("job"));
        assert_eq!(unescape_label_name("U__my__label").as_deref(), Some("my_label"));
        assert_eq!(unescape_label_name("U__a_2e_b").as_deref(), Some("a.b"));
        assert_eq!(unescape_label_name("U__a_zz_"), None);
        assert_eq!(label_name_from_path("U__service_2e_name").ok().as_deref(), Some("service.name"));
        assert_eq!(label_name_from_path("job").ok().as_deref(), Some("job"));
        assert_eq!(label_name_from_path("service.name").ok().as_deref(), Some("service.name"));
        assert_eq!(label_name_from_path("名前").ok().as_deref(), Some("名前"));
        assert!(label_name_from_path("").is_err());
        assert!(label_name_from_path("U__a_0_b").is_err());
    }
}
