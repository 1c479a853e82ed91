//! `GET|POST /api/v1/query_exemplars`: the exemplars of the series a PromQL expression selects,
//! as Prometheus answers it: every vector selector of `query` (at any depth), the exemplars in
//! `[start, end]` of the series matching any of them, one object per series.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, Method};
use axum::response::Response;
use promql_parser::parser::Expr;
use serde_json::{json, Value};

use super::series::labels_json;
use super::{params, success, time_range};
use crate::backend::Backend;
use crate::http::error::ApiError;
use crate::http::params::{selector_groups, truncated};
use crate::http::state::AppState;
use crate::matcher::Matcher;
use crate::sample::Exemplar;
use crate::tenant::Scope;
use axum::Extension;

/// Exemplars of the series `query` selects.
///
/// # Errors
/// 400 without `query`, for a query that does not parse or bad times; 5xx on storage failure.
pub async fn query_exemplars(
    State(state): State<Arc<AppState>>,
    Extension(scope): Extension<Scope>,
    method: Method,
    RawQuery(q): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let p = params(&state, &method, q.as_deref(), &headers, body).await?;
    let query = p.get("query").ok_or_else(|| ApiError::BadData("invalid parameter \"query\": missing".into()))?;
    let expr = crate::promql::parse(query)
        .map_err(|e| ApiError::BadData(format!("invalid parameter \"query\": {}: {e}", truncated(query))))?;
    let mut selectors = Vec::new();
    selectors_in(&expr, &mut selectors).map_err(|e| ApiError::BadData(format!("invalid parameter \"query\": {e}")))?;
    let (start, end) = time_range(&p)?;
    // The tenant's matcher on every selector, its label off every answer.
    let selectors: Vec<Vec<Matcher>> = selectors.iter().map(|m| scope.select(m).into_owned()).collect();
    let backend = state.backend.clone();
    let mut found = crate::http::blocking::run(move || {
        Ok(match &backend {
            Backend::Embedded(storage) => storage.exemplars(&selectors, start, end)?,
            Backend::ClickHouse(ch) => ch.exemplars(&selectors, start, end)?,
        })
    })
    .await?;
    for s in &mut found {
        scope.show(&mut s.labels);
    }
    let data: Vec<Value> = found
        .iter()
        .map(|s| json!({"seriesLabels": labels_json(&s.labels), "exemplars": s.exemplars.iter().map(exemplar_json).collect::<Vec<_>>()}))
        .collect();
    Ok(success(Value::from(data), Vec::new()))
}

/// Every vector selector's matcher lists in `expr`, in the order met.
fn selectors_in(expr: &Expr, out: &mut Vec<Vec<Matcher>>) -> Result<(), String> {
    match expr {
        Expr::VectorSelector(vs) => out.extend(selector_groups(vs)?),
        Expr::MatrixSelector(ms) => out.extend(selector_groups(&ms.vs)?),
        Expr::Aggregate(a) => {
            selectors_in(&a.expr, out)?;
            if let Some(param) = &a.param {
                selectors_in(param, out)?;
            }
        }
        Expr::Unary(u) => selectors_in(&u.expr, out)?,
        Expr::Binary(b) => {
            selectors_in(&b.lhs, out)?;
            selectors_in(&b.rhs, out)?;
        }
        Expr::Paren(p) => selectors_in(&p.expr, out)?,
        Expr::Subquery(s) => selectors_in(&s.expr, out)?,
        Expr::Call(c) => {
            for a in &c.args.args {
                selectors_in(a, out)?;
            }
        }
        Expr::NumberLiteral(_) | Expr::StringLiteral(_) | Expr::Extension(_) => {}
    }
    Ok(())
}

/// One exemplar as Prometheus prints it: its labels, the value as a string, the time in
/// seconds.
fn exemplar_json(e: &Exemplar) -> Value {
    let value = if e.value.is_nan() {
        "NaN".to_owned()
    } else if e.value.is_infinite() {
        if e.value > 0.0 { "+Inf" } else { "-Inf" }.to_owned()
    } else {
        // Go's FormatFloat(v, 'f', -1, 64), as sample values are printed.
        e.value.to_string()
    };
    json!({"labels": labels_json(&e.labels), "value": value, "timestamp": e.timestamp_ms as f64 / 1000.0})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(q: &str) -> Vec<Vec<String>> {
        let expr = crate::promql::parse(q).unwrap();
        let mut out = Vec::new();
        selectors_in(&expr, &mut out).unwrap();
        out.iter().map(|g| g.iter().map(|m| format!("{}{}", m.name, m.value)).collect()).collect()
    }

    #[test]
    fn every_selector_of_an_expression_is_found() {
        assert_eq!(
            names(r#"sum by (le) (rate(req_bucket{job="a"}[5m])) / on() group_left scalar(up{job="b"}) + 1"#),
            vec![
                vec!["joba".to_owned(), "__name__req_bucket".to_owned()],
                vec!["jobb".to_owned(), "__name__up".to_owned()]
            ]
        );
        assert_eq!(names("topk(3, max_over_time(x[1h:5m]))"), vec![vec!["__name__x".to_owned()]]);
        assert!(names("1 + 2").is_empty());
    }

    #[test]
    fn exemplars_print_as_prometheus_prints_them() {
        let e = Exemplar {
            labels: crate::labels::Labels::from_pairs([("trace_id", "abc")]).unwrap(),
            value: 6.0,
            timestamp_ms: 1_600_096_945_479,
        };
        assert_eq!(
            exemplar_json(&e).to_string(),
            r#"{"labels":{"trace_id":"abc"},"timestamp":1600096945.479,"value":"6"}"#
        );
        let inf = Exemplar { value: f64::NEG_INFINITY, ..e };
        assert_eq!(exemplar_json(&inf)["value"], "-Inf");
    }
}
