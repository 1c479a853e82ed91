//! The ingest pipeline: every write protocol goes through [`run`], which owns admission (the
//! write budget), reading and decompressing the body, the memory the decoder reserves, the
//! hand-off to storage on the blocking pool, the metrics by protocol and reason, and the errors.
//! A protocol supplies only its handler's parameters and a pure decoder (`src/ingest/`,
//! `src/remote/decode.rs`, `http/import.rs`).
//!
//! | step | failure | answer | `reason` counted |
//! |---|---|---|---|
//! | admission | too many writes or bytes in flight | 429 + `Retry-After` | `overloaded` |
//! | admission | the tenant's ingestion bucket holds less than one sample (body discarded unread) | 429 + `Retry-After` | `tenant_rate_limited` |
//! | body | over `--max-request-bytes` / budget | 413 / 429 | `too_large` / `overloaded` |
//! | body | unknown `Content-Encoding` | 415 | `unsupported_media_type` |
//! | body | slower than `--body-read-timeout` | 408 | `body_timeout` |
//! | decode | invalid body | 400 naming the problem | the decoder's (`invalid`, ...) |
//! | tenant | a label longer than the tenant's limit (`--tenant-limits-file`) | 400 naming it | `tenant_label_too_long` |
//! | tenant | a series carries `__tenant__` | 400 | `tenant_label` |
//! | tenant | over the tenant's ingestion rate | 429 + `Retry-After` | `tenant_rate_limited` |
//! | tenant | over the tenant's `max_global_series_per_user` | 429 + `Retry-After` | `tenant_series_limit` |
//! | tenant | over the tenant's `max_global_series_per_metric` | 429 + `Retry-After` | `tenant_metric_series_limit` |
//! | storage | sample refused (too old, too new) | 400 | `storage_rejected` |
//! | storage | failure | 5xx (senders retry) | `storage_failure` |
//!
//! A 2xx is answered only once the whole batch is durable; nothing of a refused request is
//! written.

use std::sync::Arc;

use axum::body::Body;
use axum::http::HeaderMap;

use super::error::ApiError;
use super::state::AppState;
use super::{blocking, body};
use crate::ingest::Stop;
use crate::metrics::Protocol;
use crate::tenant::{Scope, TenantId};

pub use super::batch::Batch;

/// Why a decoder refused a request.
#[derive(Debug)]
pub enum Refusal {
    /// The body is invalid: answered with `error`, counted under `reason` with the `samples`
    /// it held.
    Invalid {
        /// The `reason` label.
        reason: &'static str,
        /// Samples the body held (0 when unknown).
        samples: usize,
        /// The answer.
        error: ApiError,
    },
    /// The write budget refused the decoded memory.
    Budget(ApiError),
}

impl From<Stop<ApiError>> for Refusal {
    fn from(stop: Stop<ApiError>) -> Self {
        match stop {
            Stop::Invalid(r) => {
                Self::Invalid { reason: "invalid", samples: 0, error: ApiError::BadData(r.to_string()) }
            }
            Stop::Refused(e) => Self::Budget(e),
        }
    }
}

/// How the body arrives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Coding {
    /// As `Content-Encoding` says (identity or gzip); the decoder sees the plain body.
    Declared,
    /// As sent; the decoder decompresses it itself (remote-write's snappy, which announces its
    /// decoded size).
    Raw,
}

/// A stored request: its samples and what the decoder reported beside the batch.
#[derive(Debug)]
pub struct Stored<T> {
    /// Float samples written.
    pub samples: usize,
    /// Native histogram samples written.
    pub histograms: usize,
    /// Exemplars stored.
    pub exemplars: usize,
    /// The decoder's report.
    pub report: T,
}

/// The memory callback decoders get: reserves bytes in the request's write budget.
pub type Reserve<'a> = &'a mut dyn FnMut(usize) -> Result<(), ApiError>;

/// Runs one write request of `protocol` through the pipeline: admits it, reads `body`, decodes
/// it with `decode` on the blocking pool (reserving what it keeps), writes the batch and counts
/// everything.
///
/// # Errors
/// The answer for the request, as in the module table.
pub async fn run<T, D>(
    state: &Arc<AppState>,
    scope: &Scope,
    protocol: Protocol,
    headers: &HeaderMap,
    body: Body,
    coding: Coding,
    decode: D,
) -> Result<Stored<T>, ApiError>
where
    T: Send + 'static,
    D: FnOnce(&[u8], Reserve<'_>) -> Result<(Batch, T), Refusal> + Send + 'static,
{
    let refuse = |e: ApiError| {
        state.metrics.rejected(protocol, reason_of(&e), 0, true);
        e
    };
    let mut ticket = match state.admission.admit() {
        Ok(t) => t,
        Err(e) => {
            body::discard(body, state.limits.max_request_bytes.saturating_mul(2)).await;
            return Err(refuse(e));
        }
    };
    // The tenant whose limits and counters apply: only when tenants are on.
    let tenant = match scope {
        Scope::One(t) if state.tenants => Some(t.clone()),
        _ => None,
    };
    // A tenant with an empty ingestion bucket is refused before its body is read or decoded,
    // so that a flooding tenant spends none of the server's CPU on requests bound to fail.
    if let (Some(tenant), Some(limits)) = (tenant.as_ref(), state.tenant_limits.as_deref()) {
        if let Err(e) = limits.refuse_exhausted(tenant) {
            drop(ticket);
            body::discard(body, state.limits.max_request_bytes.saturating_mul(2)).await;
            state.metrics.tenant_refused(tenant.as_str(), "tenant_rate_limited");
            return Err(refuse(e));
        }
    }
    let limit = state.limits.max_request_bytes;
    let bytes = match coding {
        Coding::Declared => body::read_decoded(headers, body, limit, Some(&mut ticket)).await,
        Coding::Raw => body::read_admitted(headers, body, limit, Some(&mut ticket)).await,
    }
    .map_err(refuse)?;
    let st = Arc::clone(state);
    let scope = scope.clone();
    blocking::run(move || {
        // The ticket holds the body and everything decoded from it until the batch is durable.
        let (mut batch, report) = decode(&bytes, &mut |n| ticket.reserve(n)).map_err(|r| match r {
            Refusal::Invalid { reason, samples, error } => {
                st.metrics.rejected(protocol, reason, samples, true);
                error
            }
            Refusal::Budget(e) => {
                st.metrics.rejected(protocol, reason_of(&e), 0, true);
                e
            }
        })?;
        let (samples, histograms) = (batch.sample_count(), batch.histogram_count());
        // Float and histogram samples are counted alike in the ingest and rejection metrics.
        let all = samples.saturating_add(histograms);
        // The tenant's limits see the labels as sent, before the tenant's own is added.
        if let (Some(tenant), Some(limits)) = (tenant.as_ref(), st.tenant_limits.as_deref()) {
            if let Err(e) = limits.check_labels(tenant, &batch) {
                st.metrics.rejected(protocol, "tenant_label_too_long", all, true);
                st.metrics.tenant_refused(tenant.as_str(), "tenant_label_too_long");
                return Err(e);
            }
        }
        // Every series goes to the request's tenant; one that names a tenant itself is refused.
        let stamped = match &mut batch {
            Batch::Series(b) => scope.stamp_series(b),
            Batch::Packed(b) => scope.stamp_packed(b),
        };
        if let Err(e) = stamped {
            st.metrics.rejected(protocol, "tenant_label", all, true);
            return Err(ApiError::BadData(e.to_string()));
        }
        if let Some(tenant) = tenant.as_ref() {
            enforce(&st, protocol, tenant, &batch, all)?;
        }
        let mut exemplars = 0;
        if all > 0 || batch.exemplar_count() > 0 {
            let started = std::time::Instant::now();
            let written = match batch {
                Batch::Series(b) => st.backend.write(b),
                Batch::Packed(b) => st.backend.write_packed(b),
            };
            st.metrics.observe_write(protocol, started.elapsed().as_secs_f64());
            match written {
                Ok(outcome) => exemplars = outcome.exemplars,
                Err(e) => {
                    let reason = if e.is_client_error() { "storage_rejected" } else { "storage_failure" };
                    st.metrics.rejected(protocol, reason, all, e.is_client_error());
                    return Err(e.into());
                }
            }
        }
        st.metrics.ingested(protocol, all);
        if let Some(tenant) = tenant.as_ref() {
            st.metrics.tenant_ingested(tenant.as_str(), all);
        }
        drop(ticket);
        Ok(Stored { samples, histograms, exemplars, report })
    })
    .await
}

/// The ingestion rate of `tenant`, then its active series limits: refuses the whole batch of
/// `all` samples when its bucket holds fewer, or when its series not active yet would take it
/// over `max_global_series_per_user` or `max_global_series_per_metric`. Samples taken from the
/// bucket by a request the series limits then refuse are not given back.
fn enforce(st: &AppState, protocol: Protocol, tenant: &TenantId, batch: &Batch, all: usize) -> Result<(), ApiError> {
    let Some(limits) = st.tenant_limits.as_deref() else { return Ok(()) };
    if all == 0 && batch.exemplar_count() == 0 {
        return Ok(());
    }
    limits.admit_write(tenant, batch, all).map_err(|(e, reason)| {
        st.metrics.rejected(protocol, reason, all, true);
        st.metrics.tenant_refused(tenant.as_str(), reason);
        e
    })
}

/// The `reason` label of a request refused before decoding.
pub fn reason_of(e: &ApiError) -> &'static str {
    match e {
        ApiError::Overloaded(_) => "overloaded",
        ApiError::RateLimited { .. } => "tenant_rate_limited",
        ApiError::TooLarge { .. } | ApiError::Oversized(_) => "too_large",
        ApiError::UnsupportedMedia(_) => "unsupported_media_type",
        ApiError::BodyTimeout(_) => "body_timeout",
        _ => "bad_body",
    }
}
