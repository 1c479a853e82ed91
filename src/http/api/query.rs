//! `GET|POST /api/v1/query` and `/api/v1/query_range`: PromQL through [`crate::promql::Engine`],
//! reading storage through a [`Querier`](crate::storage::Querier) that carries the request's
//! sample limit, deadline and cancellation.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{ConnectInfo, RawQuery, State};
use axum::http::{header, HeaderMap, Method};
use axum::response::{IntoResponse, Response};
use axum::Extension;

use super::query_kind::Kind;
use super::streamed::{self, ArrayPieces};
use super::{limit, params};
use super::{slow_log, small_queries};
use crate::http::blocking;
use crate::http::client_addr::ClientAddr;
use crate::http::error::ApiError;
use crate::http::params::{parse_duration_ms, Params};
use crate::http::state::AppState;
use crate::labels::Labels;
use crate::promql::result_cache::{Lookup, Outcome, RangeRequest, ResultCache};
use crate::promql::{Annotations, InstantSample, QueryResult, QueryStats, RangeSeries, Severity, Value};
use crate::tenant::Scope;

/// Instant query.
///
/// # Errors
/// 400 for bad parameters or an invalid query, 422 for evaluation errors, 503 on timeout or
/// when no query slot frees up in time.
pub async fn instant(
    State(state): State<Arc<AppState>>,
    Extension(scope): Extension<Scope>,
    client: Option<Extension<ConnectInfo<ClientAddr>>>,
    method: Method,
    RawQuery(q): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let p = params(&state, &method, q.as_deref(), &headers, body).await?;
    let time_ms = p.time_ms("time", crate::storage::now_ms())?;
    run(state, scope, &p, Kind::Instant { time_ms }, client.map(|c| c.0 .0)).await
}

/// Range query.
///
/// # Errors
/// As [`instant`]; also 400 for a missing or non-positive `step` or too many points.
pub async fn range(
    State(state): State<Arc<AppState>>,
    Extension(scope): Extension<Scope>,
    client: Option<Extension<ConnectInfo<ClientAddr>>>,
    method: Method,
    RawQuery(q): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let p = params(&state, &method, q.as_deref(), &headers, body).await?;
    let required = |name: &str| p.get(name).ok_or_else(|| ApiError::BadData(format!("missing parameter {name:?}")));
    required("start")?;
    required("end")?;
    let (start_ms, end_ms) = (p.time_ms("start", 0)?, p.time_ms("end", 0)?);
    let step = required("step")?;
    // A negative number is a valid duration to Prometheus, refused by the step check below with
    // its message; parse_duration_ms refuses it earlier with a vaguer one.
    let negative = step.parse::<f64>().is_ok_and(|v| v < 0.0);
    let step_ms = if negative {
        0
    } else {
        parse_duration_ms(step).map_err(|why| ApiError::BadData(format!("invalid parameter \"step\": {why}")))?
    };
    if step_ms <= 0 {
        return Err(ApiError::BadData(
            "zero or negative query resolution step widths are not accepted. Try a positive integer".into(),
        ));
    }
    if end_ms < start_ms {
        return Err(ApiError::BadData("invalid parameter \"end\": end timestamp must not be before start time".into()));
    }
    if (end_ms - start_ms) / step_ms > 11_000 {
        return Err(ApiError::BadData(
            "exceeded maximum resolution of 11,000 points per timeseries. Try decreasing the query resolution (?step=XX)".into(),
        ));
    }
    run(state, scope, &p, Kind::Range { start_ms, end_ms, step_ms }, client.map(|c| c.0 .0)).await
}

async fn run(
    state: Arc<AppState>,
    scope: Scope,
    p: &Params,
    kind: Kind,
    client: Option<ClientAddr>,
) -> Result<Response, ApiError> {
    let received = Instant::now();
    let query = p.get("query").ok_or_else(|| ApiError::BadData("missing parameter \"query\"".into()))?.to_owned();
    let limit = limit(p)?;
    let stats = stats_request(p);
    let counted = stats.is_some();
    let mut opts = state.engine.options().clone();
    if let Some(t) = p.get("timeout") {
        let ms =
            parse_duration_ms(t).map_err(|why| ApiError::BadData(format!("invalid parameter \"timeout\": {why}")))?;
        // A client may shorten the server's timeout, never extend it.
        opts.timeout = opts.timeout.min(Duration::from_millis(u64::try_from(ms).unwrap_or(0)));
    }
    if let Some(d) = p.get("lookback_delta") {
        let ms = parse_duration_ms(d)
            .map_err(|why| ApiError::BadData(format!("invalid parameter \"lookback_delta\": {why}")))?;
        if ms > 0 {
            opts.lookback_ms = ms;
        }
    }
    opts.source_resolution = source_resolution(p)?;
    // The result cache keeps answers of the default resolution only.
    let other_resolution = opts.source_resolution != crate::promql::SourceResolution::Auto;
    let timeout = opts.timeout;
    // Stats count what a whole evaluation reads: such requests are evaluated whole.
    let cached = match (&state.result_cache, kind) {
        (Some(_), Kind::Range { .. }) if counted || other_resolution || p.flag("nocache") => Cached::Bypassed,
        (Some(_), Kind::Range { .. }) => Cached::Asked,
        _ => Cached::Off,
    };
    let key = small_queries::key(&query, kind);
    // The tenant's limits (`--tenant-limits-file`), before its query slot and then the server's.
    let tenant_slot = tenant_limits(&state, &scope, kind, &mut opts, timeout).await?;
    let slot = super::query_slot(&state, timeout).await?;
    let queued = received.elapsed();
    let mut answered = None;
    // Only the embedded store reads from memory and local files: a ClickHouse read waits on the
    // network, which an async thread must not do.
    if state.backend.embedded().is_some() && small_queries::was_small(key) {
        // In place, within the small budget (see `small_queries`); past it, to the pool below.
        let mut small = opts.clone();
        small.max_samples = small.max_samples.min(small_queries::INLINE_SAMPLES);
        small.max_scanned_samples = small.max_scanned_samples.min(small_queries::INLINE_SAMPLES);
        small.timeout = small.timeout.min(small_queries::INLINE_TIME);
        let (limits, _cancel_on_drop) = blocking::read_limits(Some(small.max_scanned_samples), small.timeout);
        let source = state.querier(&scope, limits);
        let engine = crate::promql::Engine::new(small);
        let cache = cached.cache(&state);
        match blocking::contain(|| Ok(evaluate(&engine, &*source, (&scope.name(), &query), kind, counted, key, cache)))
        {
            Ok(Err(e)) if small_queries::over_budget(&e) => small_queries::forget(key),
            done => answered = Some(done.and_then(|r| r.map_err(ApiError::from))),
        }
    }
    let result = match answered {
        Some(result) => {
            drop(slot);
            drop(tenant_slot);
            result
        }
        None => {
            let engine = crate::promql::Engine::new(opts);
            // Storage stops reading past the scan limit; what the query holds of what it reads
            // is limited by the engine as each series arrives.
            let (limits, _cancel_on_drop) = blocking::read_limits(Some(engine.options().max_scanned_samples), timeout);
            let source = state.querier(&scope, limits);
            let query = query.clone();
            let st = Arc::clone(&state);
            let name = scope.name().into_owned();
            blocking::run(move || {
                let _slot = slot;
                let _tenant_slot = tenant_slot;
                evaluate(&engine, &*source, (&name, &query), kind, counted, key, cached.cache(&st))
                    .map_err(ApiError::from)
            })
            .await
        }
    };
    let (result, outcome) = match result {
        Ok((r, outcome)) => (Ok(r), outcome),
        Err(e) => (Err(e), None),
    };
    if let Some(threshold) = state.slow_query {
        slow_log::record(threshold, &query, kind, received.elapsed(), result.as_ref().ok(), client);
    }
    let mut response = render(result?, limit, stats.map(|per_step| (per_step, queued)));
    let told = match (cached, outcome) {
        (Cached::Off, _) => None,
        (Cached::Bypassed, _) => Some("bypass".to_owned()),
        (Cached::Asked, Some(o)) => Some(format!(
            "{}; cached={}; evaluated={}",
            match o.lookup {
                Lookup::Hit => "hit",
                Lookup::Miss => "miss",
                Lookup::Uncacheable => "uncacheable",
            },
            o.cached_steps,
            o.evaluated_steps
        )),
        (Cached::Asked, None) => None,
    };
    if let Some(value) = told.and_then(|v| header::HeaderValue::from_str(&v).ok()) {
        response.headers_mut().insert(RESULT_CACHE_HEADER, value);
    }
    Ok(response)
}

/// Applies the limits of a request's tenant (`--tenant-limits-file`; one tenant, tenants on):
/// lowers the sample limits to `max_fetched_samples_per_query`, refuses a range longer than
/// `max_total_query_length` (400) and takes one of its `max_concurrent_queries` slots (503 past
/// `timeout`, as the server's own slots). A read of several tenants (an admin's) has none.
async fn tenant_limits(
    state: &AppState,
    scope: &Scope,
    kind: Kind,
    opts: &mut crate::promql::EngineOptions,
    timeout: Duration,
) -> Result<Option<tokio::sync::OwnedSemaphorePermit>, ApiError> {
    let (Scope::One(tenant), Some(handle), true) = (scope, state.tenant_limits.as_deref(), state.tenants) else {
        return Ok(None);
    };
    let limits = handle.of(tenant);
    if let Some(max) = limits.max_fetched_samples_per_query {
        let max = usize::try_from(max).unwrap_or(usize::MAX);
        opts.max_samples = opts.max_samples.min(max);
        opts.max_scanned_samples = opts.max_scanned_samples.min(max);
    }
    if let (Some(max_ms), Kind::Range { start_ms, end_ms, .. }) = (limits.max_total_query_length_ms(), kind) {
        let length = end_ms.saturating_sub(start_ms);
        if length > max_ms {
            state.metrics.tenant_refused(tenant.as_str(), "query_too_long");
            return Err(ApiError::BadData(format!(
                "the query time range exceeds the limit (query length: {}, limit: {}) of tenant {:?} (max_total_query_length)",
                crate::duration::format_prometheus(length),
                limits.max_total_query_length.as_deref().unwrap_or_default(),
                tenant.as_str()
            )));
        }
    }
    handle.query_slot(tenant, timeout).await.inspect_err(|_| {
        state.metrics.tenant_refused(tenant.as_str(), "too_many_concurrent_queries");
    })
}

/// The response header telling what the query result cache did for a range query:
/// `hit; cached=<steps>; evaluated=<steps>`, `miss; ...`, `uncacheable; ...` or `bypass`
/// (`nocache=1`, or `stats` asked for); absent when the cache is off.
pub const RESULT_CACHE_HEADER: &str = "x-saltdb-result-cache";

/// Whether a request goes through the query result cache.
#[derive(Clone, Copy)]
enum Cached {
    /// No cache (turned off, or an instant query).
    Off,
    /// `nocache=1` or `stats`: evaluated whole.
    Bypassed,
    /// Through the cache.
    Asked,
}

impl Cached {
    fn cache(self, state: &AppState) -> Option<&ResultCache> {
        match self {
            Self::Asked => state.result_cache.as_ref(),
            Self::Off | Self::Bypassed => None,
        }
    }
}

/// Evaluates `query` on `source`, with the querier's warnings added to the answer's, and
/// records in [`small_queries`] how an evaluation that succeeded went.
fn evaluate(
    engine: &crate::promql::Engine,
    source: &dyn crate::storage::Querier,
    (scope, query): (&str, &str),
    kind: Kind,
    counted: bool,
    key: u64,
    cache: Option<&ResultCache>,
) -> Result<(QueryResult, Option<Outcome>), crate::promql::EvalError> {
    let began = Instant::now();
    if let (Some(cache), Kind::Range { start_ms, end_ms, step_ms }) = (cache, kind) {
        // Asked before anything is read (see `Querier::immutable_before`).
        let immutable = source.immutable_before();
        let r = RangeRequest { scope, query, start_ms, end_ms, step_ms, lookback_ms: engine.options().lookback_ms };
        // The parts it evaluates share the query's time.
        let deadline = began.checked_add(engine.options().timeout).unwrap_or(began);
        let (mut r, outcome) = cache.range(&r, immutable, &mut |first, last| {
            let mut opts = engine.options().clone();
            opts.timeout = deadline.saturating_duration_since(Instant::now());
            crate::promql::Engine::new(opts).range(source, query, first, last, step_ms)
        })?;
        small_queries::record(key, r.loaded_samples, began.elapsed());
        for w in source.warnings() {
            r.annotations.warn(w);
        }
        return Ok((r, Some(outcome)));
    }
    let r = match (kind, counted) {
        (Kind::Instant { time_ms }, false) => engine.instant(source, query, time_ms),
        (Kind::Instant { time_ms }, true) => engine.instant_with_stats(source, query, time_ms),
        (Kind::Range { start_ms, end_ms, step_ms }, false) => engine.range(source, query, start_ms, end_ms, step_ms),
        (Kind::Range { start_ms, end_ms, step_ms }, true) => {
            engine.range_with_stats(source, query, start_ms, end_ms, step_ms)
        }
    };
    r.map(|mut r| {
        small_queries::record(key, r.loaded_samples, began.elapsed());
        for w in source.warnings() {
            r.annotations.warn(w);
        }
        (r, None)
    })
}

/// The downsampled tiers a query may read: `max_source_resolution` (Thanos' name), `auto` when
/// absent or empty.
///
/// # Errors
/// 400 naming the parameter and the value when it is not `auto`, `raw` or a duration.
fn source_resolution(p: &Params) -> Result<crate::promql::SourceResolution, ApiError> {
    p.get("max_source_resolution").map_or(Ok(crate::promql::SourceResolution::Auto), |r| {
        crate::promql::SourceResolution::parse(r)
            .map_err(|why| ApiError::BadData(format!("invalid parameter \"max_source_resolution\": {why}")))
    })
}

/// What `stats` asks for: Prometheus adds its stats object for any non-empty value, with the
/// per-step counts for `all`. `Some(per_step)` when asked.
fn stats_request(p: &Params) -> Option<bool> {
    p.get("stats").filter(|v| !v.is_empty()).map(|v| v == "all")
}

/// A sample as Prometheus writes it: `[<seconds>,"<value>"]`.
fn write_point(out: &mut String, timestamp_ms: i64, value: f64) {
    out.push('[');
    write_ts(out, timestamp_ms);
    out.push(',');
    write_value(out, value);
    out.push(']');
}

/// Prometheus' time format: seconds with up to millisecond decimals (`1700000000.5`).
fn write_ts(out: &mut String, ms: i64) {
    let (secs, frac) = (ms.div_euclid(1000), ms.rem_euclid(1000));
    out.push_str(itoa::Buffer::new().format(secs));
    if frac != 0 {
        let digits = [b'0' + (frac / 100) as u8, b'0' + (frac / 10 % 10) as u8, b'0' + (frac % 10) as u8];
        let digits = std::str::from_utf8(&digits).unwrap_or("000");
        out.push('.');
        out.push_str(digits.trim_end_matches('0'));
    }
}

/// Prometheus' value format: a JSON string, `NaN`, `+Inf`, `-Inf` or the shortest decimal that
/// reads back as the same value, never in exponent form (Go's `FormatFloat(v, 'f', -1, 64)`,
/// which is also what Rust's `Display` prints).
fn write_value(out: &mut String, v: f64) {
    out.push('"');
    if v.is_nan() {
        out.push_str("NaN");
    } else if v.is_infinite() {
        out.push_str(if v > 0.0 { "+Inf" } else { "-Inf" });
    } else {
        write_finite(out, v);
    }
    out.push('"');
}

/// 2^52: whole numbers below it in magnitude print as integers (see [`write_finite`]).
const WHOLE_BELOW: f64 = 4_503_599_627_370_496.0;

/// The shortest decimal of a finite `v` that reads back as `v`, as `Display` prints it but
/// faster (ryu); ryu's exponent forms (below 1e-5, from 1e16) are left to `Display`. Ties
/// between two shortest decimals go to the even one, where `Display` rounds up: both read back
/// as `v`.
fn write_finite(out: &mut String, v: f64) {
    // Whole numbers (counters, most gauges) print their digits: below 2^52 a whole number's
    // shortest decimal is its digits, and itoa takes a fraction of ryu's time (ryu was 30% of
    // answering 480,000 points from the query result cache). -0 keeps its sign through ryu.
    if v.fract() == 0.0 && v.abs() < WHOLE_BELOW && (v != 0.0 || v.is_sign_positive()) {
        out.push_str(itoa::Buffer::new().format(v as i64));
        return;
    }
    let mut buf = ryu::Buffer::new();
    let s = buf.format_finite(v);
    if s.contains('e') {
        let _ = write!(out, "{v}");
    } else {
        out.push_str(s.strip_suffix(".0").unwrap_or(s));
    }
}

fn write_labels(out: &mut String, labels: &Labels) {
    out.push('{');
    for (i, l) in labels.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ =
            write!(out, "{}:{}", serde_json::Value::from(l.name.as_str()), serde_json::Value::from(l.value.as_str()));
    }
    out.push('}');
}

fn annotations_json(annotations: &Annotations) -> String {
    let mut out = String::new();
    for (key, severity) in [("warnings", Severity::Warning), ("infos", Severity::Info)] {
        let items: Vec<String> =
            annotations.iter().filter(|a| a.severity == severity).map(ToString::to_string).collect();
        out.push_str(&streamed::warnings_json(key, &items));
    }
    out
}

/// The success envelope, written directly; vectors and matrices are streamed series by series
/// as the client reads them (see [`streamed`]), each series dropped once written. Prometheus'
/// stats object ends `data` when asked for (`(per-step counts wanted, time spent waiting for a
/// query slot)`).
fn render(result: QueryResult, limit: Option<usize>, stats: Option<(bool, Duration)>) -> Response {
    let stats_json = match (stats, &result.stats) {
        (Some((per_step, queued)), Some(measured)) => {
            format!(",\"stats\":{}", stats_object(measured, per_step, queued))
        }
        _ => String::new(),
    };
    let mut annotations = result.annotations;
    let head =
        format!("{{\"status\":\"success\",\"data\":{{\"resultType\":\"{}\",\"result\":", result.value.type_name());
    match result.value {
        Value::Scalar { timestamp_ms, value } => {
            let mut out = head;
            write_point(&mut out, timestamp_ms, value);
            out.push_str(&stats_json);
            out.push('}');
            out.push_str(&annotations_json(&annotations));
            out.push('}');
            ([(header::CONTENT_TYPE, "application/json")], out).into_response()
        }
        Value::String { timestamp_ms, value } => {
            let mut out = head;
            out.push('[');
            write_ts(&mut out, timestamp_ms);
            let _ = write!(out, ",{}]{stats_json}}}", serde_json::Value::from(value));
            out.push_str(&annotations_json(&annotations));
            out.push('}');
            ([(header::CONTENT_TYPE, "application/json")], out).into_response()
        }
        Value::Vector(mut v) => {
            truncate(&mut v, limit, &mut annotations);
            let tail = format!("]{stats_json}}}{}}}", annotations_json(&annotations));
            let write = |out: &mut String, s: InstantSample| {
                out.push_str("{\"metric\":");
                write_labels(out, &s.labels);
                match &s.histogram {
                    Some(h) => {
                        out.push_str(",\"histogram\":[");
                        write_ts(out, s.timestamp_ms);
                        out.push(',');
                        super::histogram_json::write_histogram(out, h);
                        out.push(']');
                    }
                    None => {
                        out.push_str(",\"value\":");
                        write_point(out, s.timestamp_ms, s.value);
                    }
                }
                out.push('}');
            };
            streamed::json_response(ArrayPieces::new(head + "[", v, write, tail))
        }
        Value::Matrix(mut m) => {
            truncate(&mut m, limit, &mut annotations);
            let tail = format!("]{stats_json}}}{}}}", annotations_json(&annotations));
            let write = |out: &mut String, s: RangeSeries| {
                out.push_str("{\"metric\":");
                write_labels(out, &s.labels);
                // A series without points (none in practice) keeps its empty `values`.
                if !s.samples.is_empty() || s.histograms.is_empty() {
                    out.push_str(",\"values\":[");
                    for (j, p) in s.samples.iter().enumerate() {
                        if j > 0 {
                            out.push(',');
                        }
                        write_point(out, p.timestamp_ms, p.value);
                    }
                    out.push(']');
                }
                if !s.histograms.is_empty() {
                    out.push_str(",\"histograms\":[");
                    for (j, p) in s.histograms.iter().enumerate() {
                        if j > 0 {
                            out.push(',');
                        }
                        out.push('[');
                        write_ts(out, p.timestamp_ms);
                        out.push(',');
                        super::histogram_json::write_histogram(out, &p.histogram);
                        out.push(']');
                    }
                    out.push(']');
                }
                out.push('}');
            };
            streamed::json_response(ArrayPieces::new(head + "[", m, write, tail))
        }
    }
}

/// Prometheus' stats object (`util/stats/query_stats.go`): timings in seconds and sample counts,
/// the per-step counts as `[<seconds>, <samples>]` pairs only when asked (`stats=all`).
fn stats_object(stats: &QueryStats, per_step: bool, queued: Duration) -> serde_json::Value {
    let t = &stats.timings;
    let eval_total = t.preparation + t.inner_eval + t.result_sort;
    let mut samples = serde_json::Map::new();
    if per_step {
        let steps: Vec<serde_json::Value> =
            stats.samples.per_step.iter().map(|&(ms, n)| serde_json::json!([seconds(ms), n])).collect();
        samples.insert("totalQueryableSamplesPerStep".into(), steps.into());
    }
    samples.insert("totalQueryableSamples".into(), stats.samples.total_queryable.into());
    samples.insert("peakSamples".into(), stats.samples.peak.into());
    if !stats.samples.tiers.is_empty() {
        // saltdb's own: the downsampled tiers read and their points (counted above as samples).
        let tiers: serde_json::Map<String, serde_json::Value> = stats
            .samples
            .tiers
            .iter()
            .map(|&(interval, points)| (crate::duration::format_ms(interval), points.into()))
            .collect();
        samples.insert("tierPoints".into(), tiers.into());
    }
    serde_json::json!({
        "timings": {
            "evalTotalTime": eval_total.as_secs_f64(),
            "resultSortTime": t.result_sort.as_secs_f64(),
            "queryPreparationTime": t.preparation.as_secs_f64(),
            "innerEvalTime": t.inner_eval.as_secs_f64(),
            "execQueueTime": queued.as_secs_f64(),
            "execTotalTime": (queued + eval_total).as_secs_f64(),
        },
        "samples": samples,
    })
}

/// A timestamp in seconds as Go marshals `float64(ms) / 1000`: whole seconds without a fraction.
fn seconds(ms: i64) -> serde_json::Value {
    if ms % 1000 == 0 {
        serde_json::Value::from(ms / 1000)
    } else {
        serde_json::Value::from(ms as f64 / 1000.0)
    }
}

fn truncate<T>(items: &mut Vec<T>, limit: Option<usize>, annotations: &mut Annotations) {
    if let Some(n) = limit {
        if items.len() > n {
            items.truncate(n);
            annotations.warn("results truncated due to limit");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_source_resolution_is_auto_raw_or_a_duration_else_a_400_naming_it() {
        use crate::promql::SourceResolution::{Auto, Max, Raw};
        let of = |query: &str| source_resolution(&Params::parse(Some(query), None));
        assert_eq!(of("query=up").unwrap(), Auto);
        assert_eq!(of("max_source_resolution=").unwrap(), Auto, "empty: absent, as Prometheus reads parameters");
        assert_eq!(of("max_source_resolution=auto").unwrap(), Auto);
        assert_eq!(of("max_source_resolution=raw").unwrap(), Raw);
        assert_eq!(of("max_source_resolution=0s").unwrap(), Raw);
        assert_eq!(of("max_source_resolution=5m").unwrap(), Max(300_000));
        assert_eq!(of("max_source_resolution=1h").unwrap(), Max(3_600_000));
        assert_eq!(of("max_source_resolution=3600").unwrap(), Max(3_600_000));
        // From a form body too (POST), the last value winning.
        let p = Params::parse(Some("max_source_resolution=raw"), Some(b"max_source_resolution=1h"));
        assert_eq!(source_resolution(&p).unwrap(), Max(3_600_000));
        for bad in ["fine", "-5m", "5x", "RAW"] {
            let err = of(&format!("max_source_resolution={bad}")).unwrap_err();
            assert!(matches!(err, ApiError::BadData(_)), "{bad}: a 400");
            let msg = err.to_string();
            assert!(msg.contains("max_source_resolution") && msg.contains(bad), "{bad}: {msg}");
        }
    }

    #[test]
    fn formats_like_prometheus() {
        let mut s = String::new();
        write_ts(&mut s, 1_700_000_000_500);
        s.push(' ');
        write_ts(&mut s, 1_700_000_000_000);
        s.push(' ');
        write_ts(&mut s, 1_700_000_000_120);
        assert_eq!(s, "1700000000.5 1700000000 1700000000.12");
        let mut v = String::new();
        for x in [1.5, f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 1e21, 0.1] {
            write_value(&mut v, x);
        }
        assert_eq!(v, r#""1.5""NaN""+Inf""-Inf""1000000000000000000000""0.1""#);
        for x in
            [0.0, -0.0, 7.0, -123.0, 1e15, 4_503_599_627_370_495.0, -4_503_599_627_370_495.0, 4_503_599_627_370_496.0]
        {
            let mut fast = String::new();
            write_finite(&mut fast, x);
            assert_eq!(fast, format!("{x}"));
        }
        let mut t = String::new();
        for ms in [-1_500, 0, 1, 10, 999, 1_700_000_000_007] {
            write_ts(&mut t, ms);
            t.push(' ');
        }
        assert_eq!(t, "-2.5 0 0.001 0.01 0.999 1700000000.007 ");
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(20_000))]

        /// The fast formatting prints a plain decimal (no exponent) as short as `Display`'s,
        /// which reads back as the same value bit for bit. (The digits differ from `Display`'s
        /// only when two shortest decimals lie exactly as close to the value, e.g.
        /// 3753031064056.78125: ryu rounds the tie to even, `Display` up. Both read back the same.)
        #[test]
        fn values_print_shortest_and_read_back_exactly(bits in proptest::prelude::any::<u64>(), small in -1e7f64..1e7) {
            for v in [f64::from_bits(bits), small, small.round(), small / 1e3] {
                if v.is_finite() {
                    let mut s = String::new();
                    write_finite(&mut s, v);
                    let display = format!("{v}");
                    proptest::prop_assert!(!s.contains('e'), "{s}");
                    proptest::prop_assert_eq!(s.len(), display.len(), "{} vs {}", s, display);
                    proptest::prop_assert_eq!(s.parse::<f64>().map(f64::to_bits), Ok(v.to_bits()), "{}", s);
                }
            }
        }
    }
}
