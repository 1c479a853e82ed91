//! OTLP metrics over HTTP: `POST /opentelemetry/v1/metrics` (VictoriaMetrics' path) and
//! `POST /api/v1/otlp/v1/metrics` (Prometheus'), protobuf bodies, gzip or not. Translation is
//! `ingest/otlp.rs`; the rest is the ingest pipeline. Success is 200 with an empty
//! `ExportMetricsServiceResponse` (an empty protobuf body), as OTLP/HTTP receivers answer.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{RawQuery, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use super::error::ApiError;
use super::ingest::{self, Batch, Coding, Refusal};
use super::params::Params;
use super::state::AppState;
use crate::ingest::otlp::{decode, Options};
use crate::metrics::Protocol;
use crate::tenant::Scope;
use axum::Extension;

/// The handler.
///
/// # Errors
/// 415 for OTLP/JSON or another content type, and the pipeline's answers.
pub async fn metrics(
    State(state): State<Arc<AppState>>,
    Extension(scope): Extension<Scope>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    Params::parse(query.as_deref(), None).reject_unknown(&[])?;
    let content_type = headers.get(header::CONTENT_TYPE).map(|v| v.to_str().unwrap_or("<not text>").trim());
    match content_type.map(|c| c.split(';').next().unwrap_or_default().trim().to_ascii_lowercase()) {
        None => {}
        Some(c) if c == "application/x-protobuf" || c == "application/protobuf" => {}
        Some(c) if c == "application/json" => {
            return Err(ApiError::UnsupportedMedia(
                "OTLP/JSON is not accepted: send protobuf (Content-Type: application/x-protobuf), the OTLP/HTTP exporters' default".into(),
            ))
        }
        Some(_) => {
            return Err(ApiError::UnsupportedMedia(format!(
                "unsupported Content-Type {:?}: OTLP metrics must be protobuf (application/x-protobuf)",
                content_type.unwrap_or_default()
            )))
        }
    }
    let opts = Options { naming: state.otlp_naming, limits: state.limits.series };
    ingest::run(&state, &scope, Protocol::Otlp, &headers, body, Coding::Declared, move |bytes, reserve| {
        let batch = decode(bytes, &opts, reserve).map_err(Refusal::from)?;
        Ok((Batch::Packed(batch), ()))
    })
    .await?;
    let mut resp = (StatusCode::OK, Vec::<u8>::new()).into_response();
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/x-protobuf"));
    Ok(resp)
}
