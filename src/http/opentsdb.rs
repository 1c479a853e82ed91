//! OpenTSDB HTTP `POST /api/put`, with OpenTSDB's answers: 204 by default; with `summary`,
//! 200 and `{"failed":0,"success":N}`; with `details`, also `"errors":[]`. A bad point refuses
//! the whole request (nothing is written): 400, with `summary`/`details` in the same shapes
//! (`"success":0`, every point failed, the bad one listed with its error). `sync` and
//! `sync_timeout` are accepted: every answer is given once the points are durable.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::error::ApiError;
use super::ingest::{self, Batch, Coding, Refusal};
use super::params::Params;
use super::state::AppState;
use crate::ingest::opentsdb::{decode, point_json};
use crate::ingest::{Rejection, Stop};
use crate::metrics::Protocol;
use crate::tenant::Scope;
use axum::Extension;

/// The report a bad body gives for the `details` answer.
#[derive(Debug)]
struct Refused {
    rejection: Rejection,
    point: serde_json::Value,
    points: usize,
}

/// The handler.
///
/// # Errors
/// Unknown parameters (400) and the pipeline's answers other than a bad point.
pub async fn put(
    State(state): State<Arc<AppState>>,
    Extension(scope): Extension<Scope>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let params = Params::parse(query.as_deref(), None);
    params.reject_unknown(&["summary", "details", "sync", "sync_timeout"])?;
    let details = params.flag("details");
    let summary = details || params.flag("summary");
    let limits = state.limits.series;
    // A bad point travels out of the decoder beside the 400, for the detailed answer.
    let refused: Arc<std::sync::Mutex<Option<Refused>>> = Arc::default();
    let keep = Arc::clone(&refused);
    let stored =
        ingest::run(&state, &scope, Protocol::OpenTsdb, &headers, body, Coding::Declared, move |bytes, reserve| {
            let decoded = decode(bytes, limits, reserve).map_err(|stop| {
                if let Stop::Invalid(r) = &stop {
                    let (point, points) = point_json(bytes, r);
                    *keep.lock().unwrap_or_else(std::sync::PoisonError::into_inner) =
                        Some(Refused { rejection: r.clone(), point, points });
                }
                Refusal::from(stop)
            })?;
            Ok((Batch::Packed(decoded.batch), decoded.points))
        })
        .await;
    let bad = refused.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
    match (stored, bad) {
        (Ok(s), _) if details => Ok(Json200(json!({"errors": [], "failed": 0, "success": s.report})).into_response()),
        (Ok(s), _) if summary => Ok(Json200(json!({"failed": 0, "success": s.report})).into_response()),
        (Ok(_), _) => Ok(StatusCode::NO_CONTENT.into_response()),
        (Err(_), Some(bad)) if summary => {
            let mut answer = json!({"failed": bad.points.max(1), "success": 0});
            if details {
                answer["errors"] = json!([{"datapoint": bad.point, "error": bad.rejection.to_string()}]);
            }
            Ok((StatusCode::BAD_REQUEST, axum::Json(answer)).into_response())
        }
        (Err(e), _) => Err(e),
    }
}

/// A 200 with a JSON body.
struct Json200(serde_json::Value);

impl IntoResponse for Json200 {
    fn into_response(self) -> Response {
        (StatusCode::OK, axum::Json(self.0)).into_response()
    }
}
