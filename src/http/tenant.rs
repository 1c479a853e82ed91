//! Which tenant a request acts as ([`Scope`], in the request's extensions for the handlers):
//! from the URL (VictoriaMetrics cluster's `/insert/<tenant>/prometheus/...` and
//! `/select/<tenant>/prometheus/...`), the `X-Scope-OrgID` header (Grafana Mimir's), or the
//! tenant a token is bound to (see [`super::access::TenantTokens`]).
//!
//! | credentials | tenant named | scope |
//! |---|---|---|
//! | a tenant's token | none, or its own | its tenant |
//! | a tenant's token | another | 403 |
//! | none needed, or the operator's | none | `default` |
//! | none needed, or the operator's | one | that tenant |
//! | the operator's | several (`a\|b`), on a read path | those tenants, labelled |
//! | none needed | several | 403: several tenants are the operator's |
//!
//! Without `--tenants` every request is [`Scope::Unscoped`] and the header is ignored.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::extract::{Request, State};
use axum::http::Uri;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;

use super::access::{self, Identity};
use super::error::ApiError;
use super::state::AppState;
use crate::tenant::{parse_list, Scope, TenantId};

/// The header naming the tenant (Grafana Mimir's).
pub const HEADER: &str = "x-scope-orgid";

/// The tenant a URL named, before validation, and whether the URL was a write (`/insert/`).
#[derive(Clone, Debug)]
struct UrlTenant {
    tenant: String,
    insert: bool,
}

/// Where the tenant-named URL forms lead: `(prefix after the tenant, replacement)`.
const INSERT_FORMS: [(&str, &str); 4] =
    [("/prometheus/", "/"), ("/influx/", "/"), ("/opentsdb/", "/"), ("/opentelemetry/", "/opentelemetry/")];
const SELECT_FORMS: [(&str, &str); 1] = [("/prometheus/", "/")];

/// The path a tenant-named or Mimir-style URL stands for, with the tenant it names:
/// `/insert/a/prometheus/api/v1/write` is `/api/v1/write` for `a`, and Mimir's
/// `/prometheus/api/v1/query` is `/api/v1/query` (its remote-write path, `/api/v1/push`,
/// is routed as is).
fn rewrite(path: &str) -> Option<(String, Option<UrlTenant>)> {
    if let Some(rest) = path.strip_prefix("/prometheus/api/") {
        return Some((format!("/api/{rest}"), None));
    }
    for (door, forms, insert) in [("/insert/", &INSERT_FORMS[..], true), ("/select/", &SELECT_FORMS[..], false)] {
        let Some(rest) = path.strip_prefix(door) else { continue };
        let (tenant, tail) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        for (form, to) in forms {
            if let Some(after) = tail.strip_prefix(form) {
                return Some((format!("{to}{after}"), Some(UrlTenant { tenant: tenant.to_owned(), insert })));
            }
        }
    }
    None
}

/// The router behind the URL forms: rewrites a tenant-named path to the path it stands for
/// (noting the tenant in the request) before routing.
#[derive(Clone)]
pub struct TenantPaths(pub Router);

impl tower_service::Service<Request> for TenantPaths {
    type Response = Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut request: Request) -> Self::Future {
        if let Some((path, tenant)) = rewrite(request.uri().path()) {
            let mut parts = request.uri().clone().into_parts();
            let query = request.uri().query().map(|q| format!("?{q}")).unwrap_or_default();
            if let Ok(pq) = format!("{path}{query}").parse() {
                parts.path_and_query = Some(pq);
                if let Ok(uri) = Uri::from_parts(parts) {
                    *request.uri_mut() = uri;
                    if let Some(t) = tenant {
                        request.extensions_mut().insert(t);
                    }
                }
            }
        }
        let mut router = self.0.clone();
        Box::pin(async move { tower_service::Service::call(&mut router, request).await })
    }
}

/// Decides a request's scope (see the module table).
///
/// # Errors
/// 400 for an invalid tenant or several on a write, 403 for a token acting for another tenant
/// or several tenants asked without the operator's credentials, 404 for a tenant URL without
/// `--tenants` or on a path of the other kind.
fn decide(
    tenants: bool,
    identity: &Identity,
    url: Option<&UrlTenant>,
    header: Option<&[u8]>,
    write: bool,
) -> Result<Scope, ApiError> {
    if !tenants {
        return match url {
            Some(_) => Err(ApiError::NotFound(
                "tenant URLs (/insert/<tenant>/..., /select/<tenant>/...) need --tenants".into(),
            )),
            None => Ok(Scope::Unscoped),
        };
    }
    if let Some(u) = url {
        if u.insert != write {
            let (door, what) = if u.insert { ("/insert/", "write") } else { ("/select/", "read") };
            return Err(ApiError::NotFound(format!("{door}<tenant>/ URLs lead to {what} endpoints only")));
        }
    }
    let from_url = url.map(|u| u.tenant.as_str());
    let from_header = match header {
        None => None,
        Some(h) => Some(
            std::str::from_utf8(h)
                .map(str::trim)
                .map_err(|_| ApiError::BadData("invalid X-Scope-OrgID header: not UTF-8".into()))?,
        ),
    };
    let named = match (from_url, from_header) {
        (Some(u), Some(h)) if u != h => {
            return Err(ApiError::BadData(format!(
                "the URL names tenant {u:?} and the X-Scope-OrgID header {h:?}: name one, or the same"
            )))
        }
        (Some(u), _) => Some(("URL", u)),
        (None, Some(h)) => Some(("X-Scope-OrgID header", h)),
        (None, None) => None,
    };
    let ids = match named {
        None => None,
        Some((where_, text)) => {
            Some(parse_list(text).map_err(|e| ApiError::BadData(format!("invalid tenant in the {where_}: {e}")))?)
        }
    };
    match (identity, ids) {
        (Identity::Tenant(own), None) => Ok(Scope::One(own.clone())),
        (Identity::Tenant(own), Some(ids)) => match ids.as_slice() {
            [one] if one == own => Ok(Scope::One(own.clone())),
            _ => Err(ApiError::Forbidden(format!(
                "the token sent belongs to tenant {own:?} and cannot act for {:?}",
                ids.iter().map(TenantId::as_str).collect::<Vec<_>>().join("|")
            ))),
        },
        (_, None) => Ok(Scope::One(TenantId::default_tenant())),
        (_, Some(mut ids)) if ids.len() == 1 => Ok(Scope::One(ids.remove(0))),
        (_, Some(_)) if write => {
            Err(ApiError::BadData("a write goes to one tenant; the request names several (a|b)".into()))
        }
        (Identity::Operator, Some(ids)) => Ok(Scope::Many(ids)),
        (_, Some(_)) => Err(ApiError::Forbidden(
            "reading several tenants at once (a|b) needs the operator's read credentials (--read-token)".into(),
        )),
    }
}

/// The middleware (inside the access check, which sets the [`Identity`]): puts the request's
/// [`Scope`] into its extensions, or answers the error of [`decide`].
pub async fn resolve(State(state): State<Arc<AppState>>, mut request: Request, next: Next) -> Response {
    let write = access::is_write_path(request.method(), request.uri().path());
    let identity = request.extensions().get::<Identity>().cloned().unwrap_or(Identity::Anonymous);
    let url = request.extensions().get::<UrlTenant>();
    let header = request.headers().get(HEADER).map(axum::http::HeaderValue::as_bytes);
    match decide(state.tenants, &identity, url, header, write) {
        Ok(scope) => {
            request.extensions_mut().insert(scope);
            next.run(request).await
        }
        Err(e) => e.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(s: &str) -> TenantId {
        TenantId::parse(s).unwrap()
    }

    fn url(t: &str, insert: bool) -> UrlTenant {
        UrlTenant { tenant: t.into(), insert }
    }

    #[test]
    fn tenant_urls_lead_to_the_plain_paths() {
        let (p, t) = rewrite("/insert/team-a/prometheus/api/v1/write").unwrap();
        assert_eq!(
            (p.as_str(), t.as_ref().map(|t| (t.tenant.as_str(), t.insert))),
            ("/api/v1/write", Some(("team-a", true)))
        );
        assert_eq!(rewrite("/insert/a/influx/write").unwrap().0, "/write");
        assert_eq!(rewrite("/insert/a/opentelemetry/v1/metrics").unwrap().0, "/opentelemetry/v1/metrics");
        let (p, t) = rewrite("/select/b/prometheus/api/v1/query").unwrap();
        assert_eq!((p.as_str(), t.map(|t| t.insert)), ("/api/v1/query", Some(false)));
        assert_eq!(rewrite("/select/b/prometheus/federate").unwrap().0, "/federate");
        let (p, t) = rewrite("/prometheus/api/v1/labels").unwrap();
        assert_eq!(p, "/api/v1/labels");
        assert!(t.is_none());
        assert!(rewrite("/select/b/graphite/x").is_none());
        assert!(rewrite("/api/v1/query").is_none());
        assert!(rewrite("/prometheus/config/v1/rules").is_none());
    }

    #[test]
    fn scopes_follow_the_module_table() {
        let anon = Identity::Anonymous;
        assert_eq!(decide(false, &anon, None, Some(b"a"), false).unwrap(), Scope::Unscoped);
        assert!(matches!(decide(false, &anon, Some(&url("a", false)), None, false), Err(ApiError::NotFound(_))));
        assert_eq!(decide(true, &anon, None, None, true).unwrap(), Scope::One(TenantId::default_tenant()));
        assert_eq!(decide(true, &anon, None, Some(b" a "), true).unwrap(), Scope::One(id("a")));
        assert_eq!(decide(true, &anon, Some(&url("a", true)), Some(b"a"), true).unwrap(), Scope::One(id("a")));
        assert!(matches!(decide(true, &anon, Some(&url("a", true)), Some(b"b"), true), Err(ApiError::BadData(_))));
        assert!(matches!(decide(true, &anon, Some(&url("a", true)), None, false), Err(ApiError::NotFound(_))));
        assert!(matches!(decide(true, &anon, None, Some(b"a b"), false), Err(ApiError::BadData(_))));
        assert!(matches!(decide(true, &anon, None, Some(b"a|b"), false), Err(ApiError::Forbidden(_))));
        let op = Identity::Operator;
        assert_eq!(decide(true, &op, None, Some(b"b|a"), false).unwrap(), Scope::Many(vec![id("a"), id("b")]));
        assert!(matches!(decide(true, &op, None, Some(b"a|b"), true), Err(ApiError::BadData(_))));
        let t = Identity::Tenant(id("t"));
        assert_eq!(decide(true, &t, None, None, true).unwrap(), Scope::One(id("t")));
        assert_eq!(decide(true, &t, None, Some(b"t"), false).unwrap(), Scope::One(id("t")));
        assert!(matches!(decide(true, &t, None, Some(b"u"), false), Err(ApiError::Forbidden(_))));
        assert!(matches!(decide(true, &t, Some(&url("u", false)), None, false), Err(ApiError::Forbidden(_))));
        assert!(matches!(decide(true, &t, None, Some(b"t|u"), false), Err(ApiError::Forbidden(_))));
    }
}
