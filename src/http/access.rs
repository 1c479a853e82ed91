//! Access control: optional bearer tokens and basic-auth users, separately for the read and the
//! write paths, checked by one middleware in front of every route.
//!
//! | path | needs |
//! |---|---|
//! | `/api/v1/write` (and Mimir's `/api/v1/push`), `/api/v1/import`, `/api/v1/import/prometheus`, `/write`, `/api/v2/write`, `/api/put`, `/opentelemetry/v1/metrics`, `/api/v1/otlp/v1/metrics`, `/api/v1/admin/*` | write credentials, if any are set |
//! | `POST`/`PUT` `/-/reload`; changes (`POST`, `DELETE`) through the ruler API (`/prometheus/config/v1/rules/*`, `/config/v1/rules/*`, `/rules/*`) | write credentials, if any are set |
//! | `/metrics` | read credentials if `--metrics-auth read`, else nothing |
//! | `/-/healthy`, `/-/ready`, `/ping` | read credentials if `--health-auth read`, else nothing |
//! | the web UI's pages (`/`, `/graph`, ...) and `/ui/<file>` | nothing: they hold no data; the API requests they make need the read credentials |
//! | everything else (queries, series, labels, export, remote read, status, unknown paths) | read credentials, if any are set |
//!
//! Invariants: secrets are compared in constant time (both sides hashed with SHA-256 first, so
//! neither the content nor the length leaks through timing); a secret is never logged, never
//! echoed in an error and never shown by `Debug`.

use std::path::Path;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// A secret string: compared in constant time, redacted in `Debug`.
#[derive(Clone)]
pub struct Secret([u8; 32]);

impl Secret {
    /// Keeps only the SHA-256 of `s`.
    pub fn new(s: &str) -> Self {
        Self(Sha256::digest(s.as_bytes()).into())
    }

    /// Whether `candidate` is this secret, in time independent of both.
    pub fn matches(&self, candidate: &[u8]) -> bool {
        let digest: [u8; 32] = Sha256::digest(candidate).into();
        self.0.ct_eq(&digest).into()
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

/// A secret as given on the command line or in the environment: its `Debug` is redacted, so
/// printing the parsed flags never shows it.
#[derive(Clone)]
pub struct SecretString(String);

impl SecretString {
    /// The secret itself (to hash it; never to print it).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::str::FromStr for SecretString {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(Self(s.to_owned()))
    }
}

impl std::fmt::Debug for SecretString {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

/// Who may use one path class: any of the tokens or any of the users. Empty means open.
#[derive(Clone, Debug, Default)]
pub struct Credentials {
    tokens: Vec<Secret>,
    users: Vec<(String, Secret)>,
}

/// Why a credentials file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum CredentialsError {
    /// The file could not be read.
    #[error("cannot read basic-auth file {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// OS error.
        source: std::io::Error,
    },
    /// A line is not `user:password`.
    #[error("basic-auth file {path}, line {line}: expected `user:password` (the user may not contain ':')")]
    Line {
        /// The file.
        path: String,
        /// 1-based line number.
        line: usize,
    },
    /// The file has no users.
    #[error("basic-auth file {path} has no `user:password` lines")]
    Empty {
        /// The file.
        path: String,
    },
}

impl Credentials {
    /// Credentials from an optional bearer token and an optional basic-auth file.
    ///
    /// # Errors
    /// [`CredentialsError`] when the file is unreadable, malformed or empty.
    pub fn new(token: Option<&str>, basic_auth_file: Option<&Path>) -> Result<Self, CredentialsError> {
        let mut c = Self::default();
        if let Some(t) = token {
            c.tokens.push(Secret::new(t));
        }
        if let Some(path) = basic_auth_file {
            let shown = path.display().to_string();
            let text = std::fs::read_to_string(path)
                .map_err(|source| CredentialsError::Read { path: shown.clone(), source })?;
            c.users = parse_users(&text).map_err(|line| CredentialsError::Line { path: shown.clone(), line })?;
            if c.users.is_empty() {
                return Err(CredentialsError::Empty { path: shown });
            }
        }
        Ok(c)
    }

    /// Whether nothing is required.
    pub fn is_open(&self) -> bool {
        self.tokens.is_empty() && self.users.is_empty()
    }

    fn accepts(&self, headers: &HeaderMap) -> Result<(), Denied> {
        if self.is_open() {
            return Ok(());
        }
        let Some(value) = headers.get(header::AUTHORIZATION) else { return Err(Denied::Missing) };
        let value = value.as_bytes();
        let (scheme, rest) = match value.iter().position(|&b| b == b' ') {
            Some(i) => (&value[..i], trim(&value[i + 1..])),
            None => return Err(Denied::Invalid),
        };
        let ok = if scheme.eq_ignore_ascii_case(b"bearer") {
            // Check every token, so the time does not depend on which one matched.
            self.tokens.iter().fold(false, |ok, t| t.matches(rest) | ok)
        } else if scheme.eq_ignore_ascii_case(b"basic") {
            decode_basic(rest).is_some_and(|(user, password)| {
                self.users
                    .iter()
                    .fold(false, |ok, (u, p)| (u.as_bytes() == user.as_slice()) & p.matches(&password) | ok)
            })
        } else {
            false
        };
        if ok {
            Ok(())
        } else {
            Err(Denied::Invalid)
        }
    }

    fn challenges(&self) -> Vec<HeaderValue> {
        let mut out = Vec::new();
        if !self.tokens.is_empty() {
            out.push(HeaderValue::from_static("Bearer realm=\"saltdb\""));
        }
        if !self.users.is_empty() {
            out.push(HeaderValue::from_static("Basic realm=\"saltdb\", charset=\"UTF-8\""));
        }
        out
    }
}

fn trim(b: &[u8]) -> &[u8] {
    let start = b.iter().position(|c| !c.is_ascii_whitespace()).unwrap_or(b.len());
    let end = b.iter().rposition(|c| !c.is_ascii_whitespace()).map_or(start, |i| i + 1);
    &b[start..end.max(start)]
}

/// `user:password` lines; blank lines and `#` comments are skipped. Err is the bad line number.
fn parse_users(text: &str) -> Result<Vec<(String, Secret)>, usize> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() || line.trim_start().starts_with('#') {
            continue;
        }
        match line.split_once(':') {
            Some((user, password)) if !user.is_empty() => out.push((user.to_owned(), Secret::new(password))),
            _ => return Err(i + 1),
        }
    }
    Ok(out)
}

/// Decodes the base64 `user:password` of a basic-auth header.
fn decode_basic(b64: &[u8]) -> Option<(Vec<u8>, Vec<u8>)> {
    use base64::Engine;
    let raw = base64::engine::general_purpose::STANDARD.decode(b64).ok()?;
    let colon = raw.iter().position(|&b| b == b':')?;
    Some((raw[..colon].to_vec(), raw[colon + 1..].to_vec()))
}

/// Whether `/metrics` or the health endpoints need read credentials.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Exposure {
    /// Anyone may call it (the default: scrapers and load balancers rarely carry tokens).
    #[default]
    Public,
    /// Needs the read credentials (open if none are set).
    Read,
}

/// The server's access policy.
#[derive(Clone, Debug, Default)]
pub struct AccessPolicy {
    /// For the write paths and the admin API.
    pub write: Credentials,
    /// For the read paths.
    pub read: Credentials,
    /// Who may read `/metrics`.
    pub metrics: Exposure,
    /// Who may call `/-/healthy` and `/-/ready`.
    pub health: Exposure,
    /// Tokens bound to a tenant (`--tenant-tokens-file`): each reads and writes as its tenant
    /// only. When there are any, the read and write paths need credentials.
    pub tenants: TenantTokens,
}

/// Who a request's credentials say it is; in the request's extensions once access is checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Identity {
    /// No credentials were needed (an open path).
    Anonymous,
    /// The server's own read or write credentials: the operator, who may act for any tenant.
    Operator,
    /// A tenant's token: acts for that tenant only.
    Tenant(crate::tenant::TenantId),
}

/// Tokens bound to tenants: `Authorization: Bearer <token>`, or basic auth with the tenant as
/// the user and the token as the password (what a Mimir gateway takes).
#[derive(Clone, Debug, Default)]
pub struct TenantTokens(Vec<(crate::tenant::TenantId, Secret)>);

/// Why a tenant tokens file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum TenantTokensError {
    /// The file could not be read.
    #[error("cannot read tenant tokens file {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// OS error.
        source: std::io::Error,
    },
    /// A line is not `tenant:token` with a valid tenant and a non-empty token.
    #[error("tenant tokens file {path}, line {line}: {reason}")]
    Line {
        /// The file.
        path: String,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        reason: String,
    },
}

impl TenantTokens {
    /// Reads `tenant:token` lines (blank lines and `#` comments skipped).
    ///
    /// # Errors
    /// [`TenantTokensError`] naming the file and line.
    pub fn read(path: &Path) -> Result<Self, TenantTokensError> {
        let shown = path.display().to_string();
        let text =
            std::fs::read_to_string(path).map_err(|source| TenantTokensError::Read { path: shown.clone(), source })?;
        Self::parse(&text).map_err(|(line, reason)| TenantTokensError::Line { path: shown, line, reason })
    }

    /// [`TenantTokens::read`] of a file's text; the error is the line number and reason.
    ///
    /// # Errors
    /// The first bad line.
    pub fn parse(text: &str) -> Result<Self, (usize, String)> {
        let mut out = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let Some((tenant, token)) = line.split_once(':') else {
                return Err((i + 1, "expected `tenant:token`".into()));
            };
            let tenant = crate::tenant::TenantId::parse(tenant.trim()).map_err(|e| (i + 1, e.to_string()))?;
            if token.trim().is_empty() {
                return Err((i + 1, "the token is empty".into()));
            }
            out.push((tenant, Secret::new(token.trim())));
        }
        Ok(Self(out))
    }

    /// Whether no token is bound.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The tenant whose token the request carries, if any. Every token is compared, so the
    /// time does not depend on which matched.
    fn tenant_of(&self, headers: &HeaderMap) -> Option<crate::tenant::TenantId> {
        let value = headers.get(header::AUTHORIZATION)?.as_bytes();
        let i = value.iter().position(|&b| b == b' ')?;
        let (scheme, rest) = (&value[..i], trim(&value[i + 1..]));
        let mut found = None;
        if scheme.eq_ignore_ascii_case(b"bearer") {
            for (tenant, secret) in &self.0 {
                if secret.matches(rest) {
                    found = Some(tenant.clone());
                }
            }
        } else if scheme.eq_ignore_ascii_case(b"basic") {
            let (user, password) = decode_basic(rest)?;
            for (tenant, secret) in &self.0 {
                if (tenant.as_str().as_bytes() == user.as_slice()) & secret.matches(&password) {
                    found = Some(tenant.clone());
                }
            }
        }
        found
    }
}

/// The path classes of the table in the module docs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Class {
    /// The web UI's pages and scripts: no data, served without credentials (the API requests
    /// they make need the read credentials).
    Shell,
    Write,
    Read,
    Metrics,
    Health,
}

/// Paths of the ruler API (rule groups managed over HTTP): reading them needs the read
/// credentials, changing them the write credentials.
pub const RULER_PREFIXES: [&str; 3] = ["/prometheus/config/v1/rules", "/config/v1/rules", "/rules/"];

fn class_of(method: &axum::http::Method, path: &str) -> Class {
    let changes = method != axum::http::Method::GET && method != axum::http::Method::HEAD;
    if changes && (path == "/-/reload" || RULER_PREFIXES.iter().any(|p| path.starts_with(p))) {
        return Class::Write;
    }
    match path {
        p if super::ui::is_shell(p) => Class::Shell,
        "/api/v1/write"
        | "/api/v1/push"
        | "/api/v1/import"
        | "/api/v1/import/prometheus"
        | "/write"
        | "/api/v2/write"
        | "/api/put"
        | "/opentelemetry/v1/metrics"
        | "/api/v1/otlp/v1/metrics"
        | "/api/v1/rules/replay" => Class::Write,
        p if p.starts_with("/api/v1/admin/") => Class::Write,
        "/metrics" => Class::Metrics,
        "/-/healthy" | "/-/ready" | "/ping" => Class::Health,
        _ => Class::Read,
    }
}

enum Denied {
    Missing,
    Invalid,
}

impl AccessPolicy {
    fn required(&self, method: &axum::http::Method, path: &str) -> Option<(&Credentials, &'static str)> {
        match class_of(method, path) {
            Class::Shell => None,
            Class::Write => Some((&self.write, "write")),
            Class::Read => Some((&self.read, "read")),
            Class::Metrics => (self.metrics == Exposure::Read).then_some((&self.read, "read")),
            Class::Health => (self.health == Exposure::Read).then_some((&self.read, "read")),
        }
    }
}

/// Whether a tenant's token may call `path`: the read paths and the ingest paths, deleting its
/// own series, and its own rules (the ruler API, `/api/v1/rules`, `/api/v1/alerts`); not
/// snapshots, reloads or replays.
fn tenant_may(method: &axum::http::Method, path: &str) -> bool {
    let rules = path.starts_with("/api/v1/rules/");
    match class_of(method, path) {
        Class::Read => !rules,
        Class::Write => {
            !rules
                && path != "/-/reload"
                && (!path.starts_with("/api/v1/admin/") || path == "/api/v1/admin/tsdb/delete_series")
        }
        _ => false,
    }
}

/// Whether `path` writes data.
pub fn is_write_path(method: &axum::http::Method, path: &str) -> bool {
    class_of(method, path) == Class::Write
}

/// Who the request is, or why it is refused.
fn identify(policy: &AccessPolicy, request: &Request) -> Result<Identity, (Denied, &'static str, Vec<HeaderValue>)> {
    let (method, path) = (request.method(), request.uri().path());
    let Some((creds, what)) = policy.required(method, path) else { return Ok(Identity::Anonymous) };
    let data = tenant_may(method, path);
    // Without the operator's credentials, what a tenant's token may not do stays open.
    if creds.is_open() && (policy.tenants.is_empty() || !data) {
        return Ok(Identity::Anonymous);
    }
    let operator = if creds.is_open() { Err(Denied::Missing) } else { creds.accepts(request.headers()) };
    match operator {
        Ok(()) => Ok(Identity::Operator),
        Err(denied) => match data.then(|| policy.tenants.tenant_of(request.headers())).flatten() {
            Some(tenant) => Ok(Identity::Tenant(tenant)),
            None => {
                let mut challenges = creds.challenges();
                if data && !policy.tenants.is_empty() && challenges.is_empty() {
                    challenges.push(HeaderValue::from_static("Bearer realm=\"saltdb\""));
                }
                let denied =
                    if request.headers().contains_key(header::AUTHORIZATION) { Denied::Invalid } else { denied };
                Err((denied, what, challenges))
            }
        },
    }
}

/// The middleware: 401 with `WWW-Authenticate` unless the request carries the credentials its
/// path needs; the request's [`Identity`] goes into its extensions.
pub async fn check(State(policy): State<Arc<AccessPolicy>>, mut request: Request, next: Next) -> Response {
    match identify(&policy, &request) {
        Ok(identity) => {
            request.extensions_mut().insert(identity);
            next.run(request).await
        }
        Err((denied, what, challenges)) => {
            let reason = match denied {
                Denied::Missing => format!(
                    "this endpoint needs the {what} credentials: send `Authorization: Bearer <token>` or basic auth"
                ),
                Denied::Invalid => format!("the credentials sent are not valid for {what} access"),
            };
            let body = serde_json::json!({"status": "error", "errorType": "unauthorized", "error": reason});
            let mut resp = (StatusCode::UNAUTHORIZED, axum::Json(body)).into_response();
            for challenge in challenges {
                resp.headers_mut().append(header::WWW_AUTHENTICATE, challenge);
            }
            resp
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(auth: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, HeaderValue::from_str(auth).unwrap());
        h
    }

    #[test]
    fn tokens_and_users() {
        let c = Credentials {
            tokens: vec![Secret::new("s3cret")],
            users: parse_users("# comment\n\nalice:pa:ss\nbob:\n").unwrap(),
        };
        assert!(c.accepts(&headers("Bearer s3cret")).is_ok());
        assert!(c.accepts(&headers("bearer  s3cret ")).is_ok());
        assert!(c.accepts(&headers("Bearer s3cre")).is_err());
        assert!(c.accepts(&headers("Bearer s3cret2")).is_err());
        assert!(c.accepts(&headers("Basic YWxpY2U6cGE6c3M=")).is_ok(), "alice:pa:ss");
        assert!(c.accepts(&headers("Basic Ym9iOg==")).is_ok(), "bob with an empty password");
        assert!(c.accepts(&headers("Basic YWxpY2U6cGE=")).is_err(), "alice:pa");
        assert!(c.accepts(&headers("Basic !!!")).is_err());
        assert!(c.accepts(&HeaderMap::new()).is_err());
        assert!(Credentials::default().accepts(&HeaderMap::new()).is_ok());
        assert_eq!(parse_users("ok:1\nnocolon\n").unwrap_err(), 2);
        assert_eq!(parse_users(":x").unwrap_err(), 1);
    }

    #[test]
    fn secrets_are_not_shown() {
        let c = Credentials::new(Some("hunter2"), None).unwrap();
        assert!(!format!("{c:?}").contains("hunter2"));
    }

    #[test]
    fn path_classes() {
        const GET: axum::http::Method = axum::http::Method::GET;
        assert_eq!(class_of(&GET, "/api/v1/write"), Class::Write);
        for write in ["/api/v1/import/prometheus", "/write", "/api/v2/write", "/api/put", "/opentelemetry/v1/metrics"] {
            assert_eq!(class_of(&GET, write), Class::Write, "{write}");
        }
        assert_eq!(class_of(&GET, "/ping"), Class::Health);
        assert_eq!(class_of(&GET, "/api/v1/admin/tsdb/snapshot"), Class::Write);
        assert_eq!(class_of(&GET, "/api/v1/query"), Class::Read);
        assert_eq!(class_of(&GET, "/api/v1/read"), Class::Read);
        assert_eq!(class_of(&GET, "/nope"), Class::Read);
        assert_eq!(class_of(&GET, "/metrics"), Class::Metrics);
        assert_eq!(class_of(&GET, "/-/ready"), Class::Health);
        let post = axum::http::Method::POST;
        assert_eq!(class_of(&post, "/-/reload"), Class::Write);
        assert_eq!(class_of(&post, "/prometheus/config/v1/rules/ns"), Class::Write);
        assert_eq!(class_of(&axum::http::Method::DELETE, "/rules/ns/g"), Class::Write);
        assert_eq!(class_of(&GET, "/prometheus/config/v1/rules/ns"), Class::Read);
        for shell in ["/", "/graph", "/storage", "/ui/main.js", "/ui/credentials.js"] {
            assert_eq!(class_of(&GET, shell), Class::Shell, "{shell}");
        }
        for data in ["/ui/", "/ui/a/b.js", "/graphs", "/api/v1/status/flags"] {
            assert_eq!(class_of(&GET, data), Class::Read, "{data}");
        }
    }
}
