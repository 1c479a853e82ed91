//! OpenTSDB HTTP `POST /api/put`: one data point or an array of them.
//!
//! ```json
//! [{"metric": "sys.cpu.nice", "timestamp": 1346846400, "value": 18, "tags": {"host": "web01"}}]
//! ```
//!
//! - `metric` becomes the metric name as sent (VictoriaMetrics keeps `sys.cpu.nice` too); tag
//!   keys become label names as sent (`dc-id`, `service.name`, `名前`), as VictoriaMetrics and
//!   Prometheus 3 keep UTF-8 names. Under `--ingest-legacy-label-names` the keys that are not
//!   legacy Prometheus names are sanitized instead (`dc-id` -> `dc_id`); the metric stays as
//!   sent either way. An empty key is refused (400, naming the point).
//! - `timestamp`: seconds, or milliseconds when above 9,999,999,999 (13 digits), as OpenTSDB
//!   tells them apart; `value`: a number or a string holding one.
//! - A bad point refuses the whole request, naming the point (1-based) and the problem.

mod scan;

use std::borrow::Cow;

use serde::de::{Deserialize, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use super::{at, label_name, BatchBuilder, Rejection, Reserve, SeriesLimits, Stop};
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

/// Decodes a whole body: with the scanner of the usual shape ([`scan`]) when it can, else
/// with the serde path ([`decode_serde`]), which answers for every body alike.
///
/// # Errors
/// As [`decode_serde`].
pub fn decode<E: std::fmt::Debug>(
    body: &[u8],
    limits: SeriesLimits,
    reserve: Reserve<'_, E>,
) -> Result<Decoded, Stop<E>> {
    // What the scanner reserved stays reserved; the serde path is credited with it.
    let mut reserved = 0usize;
    {
        let mut counted = |n: usize| -> Result<(), E> {
            reserve(n)?;
            reserved = reserved.saturating_add(n);
            Ok(())
        };
        let mut out = BatchBuilder::new(limits, &mut counted);
        if let Some(points) = scan::decode(body, &mut out) {
            return Ok(Decoded { batch: out.finish(), points });
        }
    }
    let mut credited = |n: usize| {
        let ask = n.saturating_sub(reserved);
        reserved = reserved.saturating_sub(n);
        if ask > 0 {
            reserve(ask)
        } else {
            Ok(())
        }
    };
    decode_serde(body, limits, &mut credited)
}

/// Decodes a whole body with serde_json.
///
/// Points are deserialized one at a time straight into borrowed fields and added to the batch
/// as they come (no `serde_json::Value` tree, no list of points, no copy of a string without
/// escapes); unknown fields are ignored, and a key given twice keeps its last value, as a JSON
/// object would. The first bad point stops the decoding.
///
/// # Errors
/// [`Stop::Invalid`] with the first bad point (see [`point_json`]), or the budget's refusal.
pub fn decode_serde<E: std::fmt::Debug>(
    body: &[u8],
    limits: SeriesLimits,
    reserve: Reserve<'_, E>,
) -> Result<Decoded, Stop<E>> {
    let mut sink = Sink { out: BatchBuilder::new(limits, reserve), points: 0, stop: None };
    let mut json = serde_json::Deserializer::from_slice(body);
    BodySeed(&mut sink).deserialize(&mut json).and_then(|()| json.end()).map_err(|e| {
        // Every value below the top level is accepted whatever its type (and checked after), so
        // a data error can only be a body that is neither an array nor an object.
        Stop::Invalid(Rejection::body(if e.is_data() {
            "expected a data point object or an array of them".to_owned()
        } else {
            format!("invalid JSON: {e} (expected a data point object or an array of them)")
        }))
    })?;
    if let Some(stop) = sink.stop {
        return Err(stop);
    }
    Ok(Decoded { batch: sink.out.finish(), points: sink.points })
}

/// Where decoded points go.
struct Sink<'a, E> {
    out: BatchBuilder<'a, E>,
    /// Points seen so far.
    points: usize,
    /// Why the request is refused, once a point was bad.
    stop: Option<Stop<E>>,
}

impl<E> Sink<'_, E> {
    /// Checks and adds the next point unless an earlier one was refused (the rest of the body
    /// is still read, so that invalid JSON is reported as such whatever comes first).
    fn accept(&mut self, p: &Point<'_>) {
        self.points += 1;
        if self.stop.is_some() {
            return;
        }
        let n = self.points;
        let mut tags = Vec::new();
        let added = point(p, self.out.legacy_label_names(), &mut tags)
            .map_err(|m| Stop::Invalid(Rejection { where_: Some(("point", n)), message: m }))
            .and_then(|(name, sample)| self.out.push_pairs(name, &mut tags, &[sample]).map_err(at("point", n)));
        if let Err(stop) = added {
            self.stop = Some(stop);
        }
    }
}

/// Reads the body, an array of points or one point, into a [`Sink`].
struct BodySeed<'s, 'a, E>(&'s mut Sink<'a, E>);

impl<'de, E> DeserializeSeed<'de> for BodySeed<'_, '_, E> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de, E> Visitor<'de> for BodySeed<'_, '_, E> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a data point object or an array of them")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(p) = seq.next_element::<Point<'de>>()? {
            self.0.accept(&p);
        }
        Ok(())
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<(), A::Error> {
        self.0.accept(&PointVisitor.visit_map(map)?);
        Ok(())
    }
}

/// One element of the body, before it is checked.
enum Point<'a> {
    /// Anything but an object.
    NotObject,
    /// An object; `None` for a missing field.
    Object {
        metric: Option<Scalar<'a>>,
        timestamp: Option<Scalar<'a>>,
        value: Option<Scalar<'a>>,
        tags: Option<Tags<'a>>,
    },
}

/// A JSON value where a scalar is expected.
enum Scalar<'a> {
    Number(serde_json::Number),
    Str(Cow<'a, str>),
    /// Anything else, named (`null`, `a boolean`, `an array`, `an object`).
    Other(&'static str),
}

/// The `tags` member of a point.
enum Tags<'a> {
    Null,
    Object(Vec<(Cow<'a, str>, Scalar<'a>)>),
    NotObject,
}

/// Checks a point; its tags (sanitized when `legacy`, empty values left out) go to `tags`.
fn point<'a>(
    p: &'a Point<'a>,
    legacy: bool,
    tags: &mut Vec<(Cow<'a, str>, Cow<'a, str>)>,
) -> Result<(&'a str, Sample), String> {
    tags.clear();
    let Point::Object { metric, timestamp, value, tags: raw_tags } = p else {
        return Err("is not an object".into());
    };
    let metric = match metric {
        Some(Scalar::Str(m)) if !m.is_empty() => m.as_ref(),
        _ => return Err("has no \"metric\" string".into()),
    };
    let ts = match timestamp {
        Some(Scalar::Number(n)) => n.as_i64().ok_or_else(|| format!("timestamp {n} is not an integer"))?,
        Some(Scalar::Str(s)) => s.parse::<i64>().map_err(|_| format!("timestamp {s:?} is not an integer"))?,
        _ => return Err("has no \"timestamp\"".into()),
    };
    let ms = if ts > MAX_SECONDS { Some(ts) } else { ts.checked_mul(1000) };
    let ms = ms.filter(|ms| check_timestamp(*ms).is_ok()).ok_or_else(|| format!("timestamp {ts} is out of range"))?;
    let parsed = match value {
        Some(Scalar::Number(n)) => n.as_f64(),
        Some(Scalar::Str(s)) => s.trim().parse::<f64>().ok(),
        Some(Scalar::Other(_)) | None if value.is_none() => return Err("has no \"value\"".into()),
        Some(Scalar::Other(_)) | None => None,
    };
    let value = parsed.filter(|v| v.is_finite()).ok_or_else(|| {
        let shown = match value {
            Some(Scalar::Number(n)) => n.to_string(),
            Some(Scalar::Str(s)) => format!("{s:?}"),
            Some(Scalar::Other(what)) => (*what).to_owned(),
            None => String::new(),
        };
        format!("value {shown} is not a finite number")
    })?;
    match raw_tags {
        None | Some(Tags::Null) => {}
        Some(Tags::NotObject) => return Err("\"tags\" is not an object".into()),
        Some(Tags::Object(t)) => {
            for (i, (k, v)) in t.iter().enumerate() {
                if t.get(i + 1..).is_some_and(|later| later.iter().any(|(later, _)| later == k)) {
                    continue; // A key given twice keeps its last value.
                }
                let v = match v {
                    Scalar::Str(s) => Cow::Borrowed(s.as_ref()),
                    Scalar::Number(n) => Cow::Owned(n.to_string()),
                    Scalar::Other(_) => return Err(format!("tag {k:?} is not a string")),
                };
                if !v.is_empty() {
                    tags.push((label_name(Cow::Borrowed(k), legacy), v));
                }
            }
        }
    }
    Ok((metric, Sample::new(ms, value)))
}

/// The visitor methods that take an array, a boolean, a number or a string (read through and
/// dropped) as `$other`, for a value whose type is checked after deserializing.
macro_rules! anything_else {
    ($value:ty, $other:expr) => {
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<$value, A::Error> {
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            Ok($other)
        }
        fn visit_bool<E>(self, _: bool) -> Result<$value, E> {
            Ok($other)
        }
        fn visit_i64<E>(self, _: i64) -> Result<$value, E> {
            Ok($other)
        }
        fn visit_u64<E>(self, _: u64) -> Result<$value, E> {
            Ok($other)
        }
        fn visit_f64<E>(self, _: f64) -> Result<$value, E> {
            Ok($other)
        }
        fn visit_str<E>(self, _: &str) -> Result<$value, E> {
            Ok($other)
        }
    };
}

/// Reads one element of the body; anything but an object is [`Point::NotObject`].
struct PointVisitor;

impl<'de> Visitor<'de> for PointVisitor {
    type Value = Point<'de>;
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a data point")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Point<'de>, A::Error> {
        let (mut metric, mut timestamp, mut value, mut tags) = (None, None, None, None);
        while let Some(Key(key)) = map.next_key()? {
            match key.as_ref() {
                "metric" => metric = Some(map.next_value()?),
                "timestamp" => timestamp = Some(map.next_value()?),
                "value" => value = Some(map.next_value()?),
                "tags" => tags = Some(map.next_value()?),
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(Point::Object { metric, timestamp, value, tags })
    }
    fn visit_unit<E>(self) -> Result<Point<'de>, E> {
        Ok(Point::NotObject)
    }
    anything_else!(Point<'de>, Point::NotObject);
}

impl<'de> Deserialize<'de> for Point<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(PointVisitor)
    }
}

impl<'de> Deserialize<'de> for Scalar<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Scalar<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_i64<E>(self, n: i64) -> Result<Scalar<'de>, E> {
                Ok(Scalar::Number(n.into()))
            }
            fn visit_u64<E>(self, n: u64) -> Result<Scalar<'de>, E> {
                Ok(Scalar::Number(n.into()))
            }
            fn visit_f64<E>(self, n: f64) -> Result<Scalar<'de>, E> {
                Ok(serde_json::Number::from_f64(n).map_or(Scalar::Other("a number out of range"), Scalar::Number))
            }
            fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Scalar<'de>, E> {
                Ok(Scalar::Str(Cow::Borrowed(s)))
            }
            fn visit_str<E>(self, s: &str) -> Result<Scalar<'de>, E> {
                Ok(Scalar::Str(Cow::Owned(s.to_owned())))
            }
            fn visit_string<E>(self, s: String) -> Result<Scalar<'de>, E> {
                Ok(Scalar::Str(Cow::Owned(s)))
            }
            fn visit_bool<E>(self, _: bool) -> Result<Scalar<'de>, E> {
                Ok(Scalar::Other("a boolean"))
            }
            fn visit_unit<E>(self) -> Result<Scalar<'de>, E> {
                Ok(Scalar::Other("null"))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Scalar<'de>, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Scalar::Other("an array"))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Scalar<'de>, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Scalar::Other("an object"))
            }
        }
        d.deserialize_any(V)
    }
}

/// An object key, borrowed from the body unless it holds an escape.
struct Key<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(s)))
            }
            fn visit_str<E>(self, s: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(s.to_owned())))
            }
        }
        d.deserialize_str(V)
    }
}

impl<'de> Deserialize<'de> for Tags<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Tags<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object of tags")
            }
            fn visit_unit<E>(self) -> Result<Tags<'de>, E> {
                Ok(Tags::Null)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Tags<'de>, A::Error> {
                let mut tags = Vec::new();
                while let Some((Key(k), v)) = map.next_entry()? {
                    tags.push((k, v));
                }
                Ok(Tags::Object(tags))
            }
            anything_else!(Tags<'de>, Tags::NotObject);
        }
        d.deserialize_any(V)
    }
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
        run_with(body, SeriesLimits::default())
    }

    fn run_with(body: &str, limits: SeriesLimits) -> Result<Vec<(String, String, i64, f64)>, Rejection> {
        let d = decode(body.as_bytes(), limits, &mut |_| Ok::<(), ()>(())).map_err(|s| match s {
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
    fn tag_keys_are_kept_as_sent_unless_legacy_names_are_asked_for() {
        let legacy = SeriesLimits { legacy_label_names: true, ..SeriesLimits::default() };
        // The scanner's shape and the serde path's (an escape in a key).
        for body in [
            r#"{"metric":"sys.cpu","timestamp":1,"value":1,"tags":{"tag,x":"1","dc-id":"2","service.name":"3","名前":"4","tag_x":"5"}}"#,
            r#"{"metric":"sys.cpu","timestamp":1,"value":1,"tags":{"tag,x":"1","dc-id":"2","service.name":"3","\u540d前":"4","tag_x":"5"}}"#,
        ] {
            let kept = "dc-id=2,service.name=3,tag,x=1,tag_x=5,名前=4";
            assert_eq!(run(body).unwrap(), vec![("sys.cpu".into(), kept.into(), 1000, 1.0)], "{body}");
            // Legacy names: `tag,x` and `tag_x` collide, as they did before names were kept.
            let err = run_with(body, legacy).unwrap_err();
            assert!(err.message.contains("duplicate label name \"tag_x\""), "{}", err.message);
        }
        let body =
            r#"{"metric":"sys.cpu","timestamp":1,"value":1,"tags":{"tag,x":"1","dc-id":"2","service.name":"3"}}"#;
        let sanitized = "dc_id=2,service_name=3,tag_x=1";
        assert_eq!(run_with(body, legacy).unwrap(), vec![("sys.cpu".into(), sanitized.into(), 1000, 1.0)]);
        // An empty key is no label name: refused, naming the point and the name.
        let err =
            run(r#"[{"metric":"m","timestamp":1,"value":1},{"metric":"m","timestamp":1,"value":1,"tags":{"":"v"}}]"#)
                .unwrap_err();
        assert_eq!(err.where_, Some(("point", 2)));
        assert!(err.message.contains("invalid label name \"\""), "{}", err.message);
    }

    #[test]
    fn one_point_or_many_seconds_or_milliseconds() {
        let one =
            run(r#"{"metric":"sys.cpu.nice","timestamp":1346846400,"value":18,"tags":{"host":"web01","dc-id":"lga"}}"#)
                .unwrap();
        assert_eq!(one, vec![("sys.cpu.nice".into(), "dc-id=lga,host=web01".into(), 1_346_846_400_000, 18.0)]);
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
        assert_eq!(run("5").unwrap_err().message, "expected a data point object or an array of them");
        assert!(run("[1,").unwrap_err().message.starts_with("invalid JSON"));
        // Keys given twice keep their last value; unknown keys are ignored; escapes are undone.
        let twice =
            run(r#"{"metric":"a","metric":"b\u0063","timestamp":1,"value":1,"x":[{}],"tags":{"h":"1","h":"2"}}"#);
        assert_eq!(twice.unwrap(), vec![("bc".into(), "h=2".into(), 1_000, 1.0)]);
        let body = format!("[{ok},{{\"metric\":\"x\"}}]");
        let err = run(&body).unwrap_err();
        assert_eq!(point_json(body.as_bytes(), &err), (serde_json::json!({"metric": "x"}), 2));
    }
}
