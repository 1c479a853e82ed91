//! OpenTSDB HTTP `POST /api/put`: one data point or an array of them.
//!
//! ```json
//! [{"metric": "sys.cpu.nice", "timestamp": 1346846400, "value": 18, "tags": {"host": "web01"}}]
//! ```
//!
//! - `metric` becomes the metric name as sent (VictoriaMetrics keeps `sys.cpu.nice` too);
//!   tag keys that are not valid label names are sanitized (`dc-id` -> `dc_id`).
//! - `timestamp`: seconds, or milliseconds when above 9,999,999,999 (13 digits), as OpenTSDB
//!   tells them apart; `value`: a number or a string holding one.
//! - A bad point refuses the whole request, naming the point (1-based) and the problem.

use serde_json::Value;

use super::{at, sanitize_label_name, BatchBuilder, Pairs, Rejection, Reserve, SeriesLimits, Stop};
use crate::sample::{check_timestamp, PackedBatch, Sample};

/// Largest timestamp read as seconds; larger ones are milliseconds.
const MAX_SECONDS: i64 = 9_999_999_999;

/// A decoded body: the batch and how many points it had.
#[derive(Debug, Default)]
pub struct Decoded {
    /// The series, one per point.
    pub batch: PackedBatch,
    /// Points in the body.
    pub points: usize,
}

/// Decodes a whole body.
///
/// # Errors
/// [`Stop::Invalid`] with the first bad point (see [`point_json`]), or the budget's refusal.
pub fn decode<E: std::fmt::Debug>(
    body: &[u8],
    limits: SeriesLimits,
    reserve: Reserve<'_, E>,
) -> Result<Decoded, Stop<E>> {
    let json: Value = serde_json::from_slice(body).map_err(|e| {
        Stop::Invalid(Rejection::body(format!("invalid JSON: {e} (expected a data point object or an array of them)")))
    })?;
    let points = match json {
        Value::Array(a) => a,
        one @ Value::Object(_) => vec![one],
        _ => return Err(Stop::Invalid(Rejection::body("expected a data point object or an array of them"))),
    };
    let mut out = BatchBuilder::new(limits, reserve);
    for (i, p) in points.iter().enumerate() {
        let (name, tags, sample) =
            point(p).map_err(|m| Stop::Invalid(Rejection { where_: Some(("point", i + 1)), message: m }))?;
        out.push(name, tags, &[sample]).map_err(at("point", i + 1))?;
    }
    Ok(Decoded { batch: out.finish(), points: points.len() })
}

fn point(p: &Value) -> Result<(String, Pairs, Sample), String> {
    let obj = p.as_object().ok_or("is not an object")?;
    let metric =
        obj.get("metric").and_then(Value::as_str).filter(|m| !m.is_empty()).ok_or("has no \"metric\" string")?;
    let ts = match obj.get("timestamp") {
        Some(Value::Number(n)) => n.as_i64().ok_or_else(|| format!("timestamp {n} is not an integer"))?,
        Some(Value::String(s)) => s.parse::<i64>().map_err(|_| format!("timestamp {s:?} is not an integer"))?,
        _ => return Err("has no \"timestamp\"".into()),
    };
    let ms = if ts > MAX_SECONDS { Some(ts) } else { ts.checked_mul(1000) };
    let ms = ms.filter(|ms| check_timestamp(*ms).is_ok()).ok_or_else(|| format!("timestamp {ts} is out of range"))?;
    let value = match obj.get("value") {
        Some(Value::Number(n)) => n.as_f64(),
        Some(Value::String(s)) => s.trim().parse::<f64>().ok(),
        _ => return Err("has no \"value\"".into()),
    }
    .filter(|v| v.is_finite())
    .ok_or_else(|| format!("value {} is not a finite number", obj.get("value").unwrap_or(&Value::Null)))?;
    let mut tags = Vec::new();
    match obj.get("tags") {
        None | Some(Value::Null) => {}
        Some(Value::Object(t)) => {
            for (k, v) in t {
                let v = match v {
                    Value::String(s) => s.clone(),
                    Value::Number(n) => n.to_string(),
                    _ => return Err(format!("tag {k:?} is not a string")),
                };
                if !v.is_empty() {
                    tags.push((sanitize_label_name(k), v));
                }
            }
        }
        Some(_) => return Err("\"tags\" is not an object".into()),
    }
    Ok((metric.to_owned(), tags, Sample::new(ms, value)))
}

/// The point a rejection names (`Value::Null` when it names none) and how many points the body
/// holds, for OpenTSDB's `details` and `summary` answers.
pub fn point_json(body: &[u8], rejection: &Rejection) -> (Value, usize) {
    let (mut points, total) = match serde_json::from_slice::<Value>(body) {
        Ok(Value::Array(a)) => {
            let n = a.len();
            (a, n)
        }
        Ok(one @ Value::Object(_)) => (vec![one], 1),
        _ => (Vec::new(), 0),
    };
    let point = match rejection.where_ {
        Some(("point", n)) if n >= 1 && n <= points.len() => points.swap_remove(n - 1),
        _ => Value::Null,
    };
    (point, total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::labels::METRIC_NAME;

    fn run(body: &str) -> Result<Vec<(String, String, i64, f64)>, Rejection> {
        let d = decode(body.as_bytes(), SeriesLimits::default(), &mut |_| Ok::<(), ()>(())).map_err(|s| match s {
            Stop::Invalid(r) => r,
            Stop::Refused(_) => unreachable!(),
        })?;
        Ok(d.batch
            .unpack()
            .unwrap()
            .series
            .iter()
            .map(|s| {
                let tags: Vec<String> = s
                    .labels
                    .iter()
                    .filter(|l| l.name != METRIC_NAME)
                    .map(|l| format!("{}={}", l.name, l.value))
                    .collect();
                (
                    s.labels.get(METRIC_NAME).unwrap_or_default().to_owned(),
                    tags.join(","),
                    s.samples[0].timestamp_ms,
                    s.samples[0].value,
                )
            })
            .collect())
    }

    #[test]
    fn one_point_or_many_seconds_or_milliseconds() {
        let one =
            run(r#"{"metric":"sys.cpu.nice","timestamp":1346846400,"value":18,"tags":{"host":"web01","dc-id":"lga"}}"#)
                .unwrap();
        assert_eq!(one, vec![("sys.cpu.nice".into(), "dc_id=lga,host=web01".into(), 1_346_846_400_000, 18.0)]);
        let many = run(r#"[{"metric":"a","timestamp":1346846400123,"value":"1.5","tags":{"n":7}},{"metric":"b","timestamp":"1346846400","value":2}]"#)
            .unwrap();
        assert_eq!(
            many,
            vec![
                ("a".into(), "n=7".into(), 1_346_846_400_123, 1.5),
                ("b".into(), String::new(), 1_346_846_400_000, 2.0)
            ]
        );
    }

    #[test]
    fn bad_points_are_named() {
        let ok = r#"{"metric":"a","timestamp":1,"value":1}"#;
        for (bad, why) in [
            (r#"{"timestamp":1,"value":1}"#, "no \"metric\""),
            (r#"{"metric":"a","value":1}"#, "no \"timestamp\""),
            (r#"{"metric":"a","timestamp":1.5,"value":1}"#, "not an integer"),
            (r#"{"metric":"a","timestamp":-5,"value":1}"#, "out of range"),
            (r#"{"metric":"a","timestamp":1}"#, "no \"value\""),
            (r#"{"metric":"a","timestamp":1,"value":"x"}"#, "not a finite number"),
            (r#"{"metric":"a","timestamp":1,"value":1,"tags":[]}"#, "not an object"),
            (r#"{"metric":"a","timestamp":1,"value":1,"tags":{"t":{}}}"#, "not a string"),
            (r#"7"#, "is not an object"),
        ] {
            let err = run(&format!("[{ok},{bad},{ok}]")).unwrap_err();
            assert_eq!(err.where_, Some(("point", 2)), "{bad}");
            assert!(err.message.contains(why), "{bad}: {}", err.message);
        }
        assert!(run("nope").unwrap_err().message.contains("invalid JSON"));
        assert!(run("5").unwrap_err().message.contains("expected a data point"));
        let body = format!("[{ok},{{\"metric\":\"x\"}}]");
        let err = run(&body).unwrap_err();
        assert_eq!(point_json(body.as_bytes(), &err), (serde_json::json!({"metric": "x"}), 2));
    }
}
