//! InfluxDB line protocol: `POST /write` (1.x: `db`, `rp`, `precision`, `consistency`, `u`, `p`)
//! and `POST /api/v2/write` (2.x: `org`, `orgID`, `bucket`, `precision`), and `GET /ping`, which
//! Influx clients call before writing. Decoding is `ingest/influx.rs`; the rest is the ingest
//! pipeline. Success is 204, as InfluxDB answers; errors carry `"error"` in their JSON body, the
//! field Influx clients read.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use super::error::ApiError;
use super::ingest::{self, Batch, Coding, Refusal};
use super::params::Params;
use super::state::AppState;
use crate::ingest::influx::{decode, Options, Precision};
use crate::metrics::Protocol;
use crate::tenant::Scope;
use axum::Extension;

/// `POST /write`.
///
/// # Errors
/// 400 for a bad parameter or line (naming it), and the pipeline's answers.
pub async fn write_v1(
    State(state): State<Arc<AppState>>,
    Extension(scope): Extension<Scope>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Result<StatusCode, ApiError> {
    let params = Params::parse(query.as_deref(), None);
    params.reject_unknown(&["db", "rp", "precision", "consistency", "u", "p"])?;
    let db = params.get("db").filter(|d| !d.is_empty()).map(str::to_owned);
    write(state, scope, &params, db, headers, body).await
}

/// `POST /api/v2/write`. The bucket is not a label (VictoriaMetrics does not add one either).
///
/// # Errors
/// As [`write_v1`].
pub async fn write_v2(
    State(state): State<Arc<AppState>>,
    Extension(scope): Extension<Scope>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Result<StatusCode, ApiError> {
    let params = Params::parse(query.as_deref(), None);
    params.reject_unknown(&["org", "orgID", "bucket", "precision"])?;
    write(state, scope, &params, None, headers, body).await
}

async fn write(
    state: Arc<AppState>,
    scope: Scope,
    params: &Params,
    db: Option<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<StatusCode, ApiError> {
    let precision = match params.get("precision") {
        None | Some("") => Precision::default(),
        Some(p) => Precision::parse(p).ok_or_else(|| {
            ApiError::BadData(format!("invalid parameter \"precision\": {p:?} is not one of ns, u, ms, s, m, h"))
        })?,
    };
    let opts = Options { precision, db, now_ms: crate::storage::now_ms(), limits: state.limits.series };
    let st = Arc::clone(&state);
    ingest::run(&state, &scope, Protocol::Influx, &headers, body, Coding::Declared, move |bytes, reserve| {
        let decoded = decode(bytes, &opts, reserve).map_err(Refusal::from)?;
        st.metrics.rejected(Protocol::Influx, "string_field", decoded.string_fields, false);
        Ok((Batch::Packed(decoded.batch), ()))
    })
    .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `GET`/`HEAD /ping`: 204 with the version header Influx clients look for.
pub async fn ping() -> Response {
    let mut resp = StatusCode::NO_CONTENT.into_response();
    resp.headers_mut().insert("X-Influxdb-Version", HeaderValue::from_static("1.8-saltdb"));
    resp.headers_mut().insert("X-Influxdb-Build", HeaderValue::from_static("OSS"));
    resp
}
