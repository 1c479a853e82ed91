//! The web UI: `ui/*` (hand-written HTML, CSS and JavaScript modules, no build step) embedded in
//! the binary at compile time and served from memory. Page paths (`/`, `/graph`, `/explore`,
//! `/cardinality`, `/storage`, `/rules`, `/alerts`) all answer the page shell, which picks the
//! page from its path; assets live under `/ui/<file>`. Every answer carries an `ETag` (a hash of
//! its bytes) and `Cache-Control: no-cache`, so browsers revalidate cheaply (304) and never run
//! stale code after an upgrade; an unknown asset is a 404.

use std::sync::LazyLock;

use axum::extract::Path;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use super::error::ApiError;

/// One embedded file.
struct Asset {
    name: &'static str,
    content_type: &'static str,
    body: &'static [u8],
}

macro_rules! asset {
    ($name:literal, $type:expr) => {
        Asset {
            name: $name,
            content_type: $type,
            body: include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/ui/", $name)),
        }
    };
}

const JS: &str = "text/javascript; charset=utf-8";

static ASSETS: &[Asset] = &[
    asset!("index.html", "text/html; charset=utf-8"),
    asset!("style.css", "text/css; charset=utf-8"),
    asset!("main.js", JS),
    asset!("api.js", JS),
    asset!("credentials.js", JS),
    asset!("tenant.js", JS),
    asset!("dom.js", JS),
    asset!("format.js", JS),
    asset!("autocomplete.js", JS),
    asset!("graph.js", JS),
    asset!("query.js", JS),
    asset!("explore.js", JS),
    asset!("cardinality.js", JS),
    asset!("storage.js", JS),
    asset!("rules.js", JS),
    asset!("alerts.js", JS),
];

/// Quoted hashes of the assets' bytes, in [`ASSETS`] order.
static ETAGS: LazyLock<Vec<String>> =
    LazyLock::new(|| ASSETS.iter().map(|a| format!("\"{:016x}\"", xxhash_rust::xxh3::xxh3_64(a.body))).collect());

/// Scripts and styles only from saltdb itself (inline `style` attributes are how the graph
/// colours its lines); no frames, plugins or foreign connections.
const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; \
     object-src 'none'; base-uri 'none'; frame-ancestors 'none'";

/// The page paths, each answered with the page shell.
pub const PAGES: [&str; 7] = ["/", "/graph", "/explore", "/cardinality", "/storage", "/rules", "/alerts"];

/// True for the paths of the UI shell: the pages and `/ui/<file>` (code and styles, no data).
pub fn is_shell(path: &str) -> bool {
    PAGES.contains(&path) || path.strip_prefix("/ui/").is_some_and(|f| !f.is_empty() && !f.contains('/'))
}

/// `GET` of a page path: the page shell.
pub async fn page(headers: HeaderMap) -> Response {
    serve(0, &headers)
}

/// `GET /ui/<file>`.
///
/// # Errors
/// 404 for a file that is not embedded.
pub async fn asset(Path(file): Path<String>, headers: HeaderMap) -> Result<Response, ApiError> {
    match ASSETS.iter().position(|a| a.name == file) {
        Some(i) => Ok(serve(i, &headers)),
        None => Err(ApiError::NotFound(format!("no UI asset named {}", super::params::truncated(&file)))),
    }
}

fn serve(i: usize, request: &HeaderMap) -> Response {
    let (Some(asset), Some(etag)) = (ASSETS.get(i), ETAGS.get(i)) else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let fresh = request
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|tag| tag.trim() == etag));
    let mut resp = if fresh { StatusCode::NOT_MODIFIED.into_response() } else { asset.body.into_response() };
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(asset.content_type));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CONTENT_SECURITY_POLICY));
    if let Ok(v) = HeaderValue::from_str(etag) {
        h.insert(header::ETAG, v);
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_asset_the_shell_and_scripts_name_is_embedded() {
        let names: Vec<&str> = ASSETS.iter().map(|a| a.name).collect();
        for a in ASSETS.iter().filter(|a| a.name.ends_with(".js") || a.name.ends_with(".html")) {
            let text = std::str::from_utf8(a.body).expect("UTF-8 asset");
            for reference in text.split(['\'', '"']).filter(|s| s.ends_with(".js") || s.ends_with(".css")) {
                let file = reference.trim_start_matches("./").trim_start_matches("/ui/");
                assert!(names.contains(&file), "{} refers to {reference}, which is not embedded", a.name);
            }
        }
        // And every embedded file is reachable from somewhere.
        let all: String = ASSETS.iter().map(|a| String::from_utf8_lossy(a.body).into_owned()).collect();
        for name in names.iter().filter(|n| **n != "index.html") {
            assert!(all.contains(&format!("{name}'")) || all.contains(&format!("{name}\"")), "{name} is never loaded");
        }
    }

    #[test]
    fn every_file_opens_with_a_comment() {
        for a in ASSETS {
            let text = std::str::from_utf8(a.body).expect("UTF-8 asset");
            let first = text.lines().find(|l| !l.starts_with("<!doctype")).unwrap_or("");
            assert!(
                first.starts_with("//") || first.starts_with("/*") || first.starts_with("<!--"),
                "{} lacks an opening comment",
                a.name
            );
        }
    }
}
