//! `POST /api/v1/rules/replay?start=..&end=..&file=..` with a rule file as the body: the
//! file's groups evaluated over past data (see [`crate::rules::replay`]). The answer streams
//! JSON lines: a `progress` line about every second, a `group` line as each group ends, and a
//! `done` line last; an answer without `done` was cut short. One replay runs at a time.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{RawQuery, State};
use axum::response::Response;

use crate::http::error::ApiError;
use crate::http::params::Params;
use crate::http::piped;
use crate::http::state::AppState;
use crate::rules::replay::{self, Line};

/// The replay endpoint.
///
/// # Errors
/// 400 for missing or bad parameters, a span ending in the future, or a bad rule file (every
/// problem, in Prometheus' words); 429 while another replay runs.
pub async fn replay(
    State(state): State<Arc<AppState>>,
    RawQuery(q): RawQuery,
    body: Bytes,
) -> Result<Response, ApiError> {
    let p = Params::parse(q.as_deref(), None);
    p.reject_unknown(&["start", "end", "file"])?;
    let required = |name: &str, what: &str| {
        if p.get(name).is_none() {
            Err(ApiError::BadData(format!("missing parameter {name:?}: {what}")))
        } else {
            Ok(())
        }
    };
    required("start", "the first evaluation time")?;
    required("end", "the last evaluation time")?;
    required("file", "the rule file's path as --rule-file names it (it places the groups' evaluation times)")?;
    let (from, to) = (p.time_ms("start", 0)?, p.time_ms("end", 0)?);
    if to < from {
        return Err(ApiError::BadData("invalid parameter \"end\": end timestamp must not be before start time".into()));
    }
    let now = crate::storage::now_ms();
    if to > now {
        return Err(ApiError::BadData(format!(
            "invalid parameter \"end\": {:.3} is in the future (now is {:.3}); a replay evaluates past data only",
            to as f64 / 1000.0,
            now as f64 / 1000.0
        )));
    }
    let file = p.get("file").unwrap_or_default().to_owned();
    let rules = crate::rules::parse_file(&file, &body).map_err(|errors| ApiError::BadData(errors.join("; ")))?;
    let permit = state.replay_slot.clone().try_acquire_owned().map_err(|_| {
        ApiError::Overloaded("another rule replay is running on this server; retry when it has finished".into())
    })?;
    let (tx, rx) = piped::pipe();
    let (engine, backend, defaults) = (state.engine.clone(), state.backend.clone(), state.rule_defaults.clone());
    tokio::task::spawn_blocking(move || {
        let _permit = permit;
        let mut emit = |line: Line| match serde_json::to_vec(&line) {
            Ok(mut text) => {
                text.push(b'\n');
                tx.blocking_send(Ok(Bytes::from(text))).is_ok()
            }
            Err(_) => false,
        };
        let completed = replay::replay(&rules.groups, from, to, &defaults, &engine, &backend, &mut emit);
        if completed {
            tracing::info!(file = %file, groups = rules.groups.len(), from, to, "rule replay finished");
        } else {
            tracing::warn!(file = %file, "rule replay stopped: the client went away");
        }
    });
    piped::response("application/x-ndjson", rx).await
}
