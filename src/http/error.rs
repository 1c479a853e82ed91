//! The one place errors become HTTP responses: Prometheus' error envelope
//! `{"status":"error","errorType":"...","error":"..."}` with a matching status code.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::storage::StorageError;

/// An error answered to a client.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The request is malformed or invalid (400, `bad_data`).
    #[error("{0}")]
    BadData(String),
    /// The body is larger than the configured limit (413).
    #[error("request body is larger than the limit of {limit} bytes")]
    TooLarge {
        /// The limit in bytes.
        limit: usize,
    },
    /// The request would need more memory than the whole write budget (413); the message says
    /// how much.
    #[error("{0}")]
    Oversized(String),
    /// Unsupported `Content-Type` or `Content-Encoding` (415).
    #[error("{0}")]
    UnsupportedMedia(String),
    /// Valid request that could not be executed (422, `execution`).
    #[error("{0}")]
    Execution(String),
    /// Too much load right now; retry later (429 with `Retry-After`).
    #[error("{0}")]
    Overloaded(String),
    /// A tenant is over its ingestion rate (429 with `Retry-After: retry_after`).
    #[error("{message}")]
    RateLimited {
        /// The answer.
        message: String,
        /// Seconds after which a retry may fit.
        retry_after: u64,
    },
    /// The request body did not arrive in time (408, `timeout`); the connection is closed.
    #[error("{0}")]
    BodyTimeout(String),
    /// Query ran out of time (503, `timeout`).
    #[error("{0}")]
    Timeout(String),
    /// The endpoint is switched off by configuration (403, `unavailable`).
    #[error("{0}")]
    Forbidden(String),
    /// No such route or resource (404).
    #[error("{0}")]
    NotFound(String),
    /// The endpoint needs what the server's storage backend does not have (501).
    #[error("{0}")]
    NotSupported(String),
    /// The route exists but not for this method (405).
    #[error("{0}")]
    MethodNotAllowed(String),
    /// Storage failed (500/503, `internal`/`unavailable`).
    #[error("{0}")]
    Storage(#[from] StorageError),
    /// A background task died (500).
    #[error("internal error: {0}")]
    Internal(String),
}

impl ApiError {
    /// Status code and Prometheus `errorType`.
    pub fn status_and_type(&self) -> (StatusCode, &'static str) {
        match self {
            Self::BadData(_) => (StatusCode::BAD_REQUEST, "bad_data"),
            Self::TooLarge { .. } | Self::Oversized(_) => (StatusCode::PAYLOAD_TOO_LARGE, "bad_data"),
            Self::UnsupportedMedia(_) => (StatusCode::UNSUPPORTED_MEDIA_TYPE, "bad_data"),
            Self::Execution(_) => (StatusCode::UNPROCESSABLE_ENTITY, "execution"),
            Self::Overloaded(_) | Self::RateLimited { .. } => (StatusCode::TOO_MANY_REQUESTS, "unavailable"),
            Self::Timeout(_) => (StatusCode::SERVICE_UNAVAILABLE, "timeout"),
            Self::BodyTimeout(_) => (StatusCode::REQUEST_TIMEOUT, "timeout"),
            Self::NotFound(_) => (StatusCode::NOT_FOUND, "not_found"),
            Self::NotSupported(_) => (StatusCode::NOT_IMPLEMENTED, "unavailable"),
            Self::Forbidden(_) => (StatusCode::FORBIDDEN, "unavailable"),
            Self::MethodNotAllowed(_) => (StatusCode::METHOD_NOT_ALLOWED, "bad_data"),
            Self::Storage(e) => match e {
                StorageError::TooOld { .. } | StorageError::TooNew { .. } | StorageError::Downsampled { .. } => {
                    (StatusCode::BAD_REQUEST, "bad_data")
                }
                StorageError::TooManySamples { .. } => (StatusCode::UNPROCESSABLE_ENTITY, "execution"),
                StorageError::Timeout => (StatusCode::SERVICE_UNAVAILABLE, "timeout"),
                // The client is gone; the status is for the logs.
                StorageError::Cancelled => (StatusCode::SERVICE_UNAVAILABLE, "canceled"),
                StorageError::Poisoned(_) | StorageError::ShuttingDown | StorageError::Unavailable(_) => {
                    (StatusCode::SERVICE_UNAVAILABLE, "unavailable")
                }
                _ => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
            },
            Self::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
        }
    }
}

impl From<crate::promql::EvalError> for ApiError {
    fn from(e: crate::promql::EvalError) -> Self {
        if let crate::promql::EvalError::Storage(e) = e {
            return Self::Storage(e);
        }
        match e.error_type() {
            "bad_data" => Self::BadData(e.to_string()),
            "timeout" => Self::Timeout(e.to_string()),
            _ => Self::Execution(e.to_string()),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, error_type) = self.status_and_type();
        let retry_after = match &self {
            Self::RateLimited { retry_after, .. } => HeaderValue::from(*retry_after),
            _ => HeaderValue::from_static("1"),
        };
        if status.is_server_error() {
            tracing::error!(error = %self, "request failed");
        }
        let body = serde_json::json!({"status": "error", "errorType": error_type, "error": self.to_string()});
        let mut resp = (status, axum::Json(body)).into_response();
        if status == StatusCode::TOO_MANY_REQUESTS || status == StatusCode::SERVICE_UNAVAILABLE {
            resp.headers_mut().insert(header::RETRY_AFTER, retry_after);
        }
        if status == StatusCode::REQUEST_TIMEOUT {
            // The rest of the body may still be on its way: the connection cannot be reused.
            resp.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        resp
    }
}
