//! The JSON forms of one sample's value, as `/api/v1/import` takes them and `/api/v1/export`
//! writes them (JSON lines, see `http/import.rs`): a float, and a native histogram.
//!
//! **Floats** are JSON numbers, or the strings `"NaN"`, `"+Inf"` (also `"Inf"`), `"-Inf"` and
//! `"stale"` (Prometheus' staleness marker, a NaN with a payload that a number cannot carry).
//!
//! **Native histograms** are objects in the histogram's own layout, so an export imports back bit
//! for bit (Prometheus' query API prints bucket boundaries instead, which lose the schema, the
//! spans, the reset hint and whether the counts were integers):
//!
//! ```json
//! {"schema":3,"zero_threshold":2.938735877055719e-39,"zero_count":1,"count":12,"sum":3.5,
//!  "positive_spans":[[-2,2],[1,1]],"positive_buckets":[4,5,2],"reset_hint":"not_reset"}
//! ```
//!
//! | field | meaning | default |
//! |---|---|---|
//! | `schema` | `-4..=8` (exponential buckets) or `-53` (custom bucket bounds) | required |
//! | `count`, `sum` | observations and their sum (floats as above; `"sum":"stale"` is a stale marker) | required |
//! | `zero_threshold`, `zero_count` | width and count of the zero bucket | 0 |
//! | `positive_spans`, `negative_spans` | `[offset, length]` pairs, as in remote-write | none |
//! | `positive_buckets`, `negative_buckets` | absolute counts, one per bucket the spans cover | none |
//! | `custom_values` | upper bounds of the custom buckets (schema -53), without +Inf | none |
//! | `reset_hint` | `"unknown"`, `"reset"`, `"not_reset"` or `"gauge"` | `"unknown"` |
//! | `float` | `true` for a float histogram; otherwise every count must be a whole number in `0..=2^53` | `false` |
//!
//! Decoding checks everything [`Histogram::validate`] checks; export leaves out fields at their
//! default.

use std::fmt;

use serde::de::{Deserializer, Visitor};
use serde::Deserialize;
use serde_json::{Map, Number, Value};

use crate::histogram::{CounterResetHint, Histogram, Span};
use crate::sample::{is_stale_marker, STALE_NAN_BITS};

/// A float in its JSON form: a number or one of the special strings.
#[derive(Clone, Copy, Debug, Default)]
pub struct JsonFloat(pub f64);

impl<'de> Deserialize<'de> for JsonFloat {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = JsonFloat;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(r#"a number or one of "NaN", "+Inf", "-Inf", "stale""#)
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<JsonFloat, E> {
                Ok(JsonFloat(v))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<JsonFloat, E> {
                Ok(JsonFloat(v as f64))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<JsonFloat, E> {
                Ok(JsonFloat(v as f64))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<JsonFloat, E> {
                special(v).map(JsonFloat).ok_or_else(|| E::invalid_value(serde::de::Unexpected::Str(v), &self))
            }
        }
        d.deserialize_any(V)
    }
}

/// `"NaN"`, `"+Inf"`/`"Inf"`, `"-Inf"`, `"stale"` -> value.
fn special(s: &str) -> Option<f64> {
    match s {
        "NaN" => Some(f64::NAN),
        "+Inf" | "Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        "stale" => Some(f64::from_bits(STALE_NAN_BITS)),
        _ => None,
    }
}

/// The JSON form of a float: numbers as numbers, the rest as the strings [`JsonFloat`] reads.
pub fn float_json(v: f64) -> Value {
    if is_stale_marker(v) {
        Value::from("stale")
    } else if v.is_nan() {
        Value::from("NaN")
    } else if v.is_infinite() {
        Value::from(if v > 0.0 { "+Inf" } else { "-Inf" })
    } else {
        Number::from_f64(v).map_or(Value::Null, Value::Number)
    }
}

/// A native histogram as a line holds it (see the module documentation).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JsonHistogram {
    schema: i32,
    count: JsonFloat,
    sum: JsonFloat,
    #[serde(default)]
    zero_threshold: JsonFloat,
    #[serde(default)]
    zero_count: JsonFloat,
    #[serde(default)]
    positive_spans: Vec<(i32, u32)>,
    #[serde(default)]
    positive_buckets: Vec<JsonFloat>,
    #[serde(default)]
    negative_spans: Vec<(i32, u32)>,
    #[serde(default)]
    negative_buckets: Vec<JsonFloat>,
    #[serde(default)]
    custom_values: Vec<JsonFloat>,
    #[serde(default)]
    reset_hint: ResetHint,
    #[serde(default)]
    float: bool,
}

/// The counter reset hint's JSON names.
#[derive(Clone, Copy, Debug, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
enum ResetHint {
    #[default]
    Unknown,
    Reset,
    NotReset,
    Gauge,
}

impl From<ResetHint> for CounterResetHint {
    fn from(h: ResetHint) -> Self {
        match h {
            ResetHint::Unknown => Self::Unknown,
            ResetHint::Reset => Self::CounterReset,
            ResetHint::NotReset => Self::NotCounterReset,
            ResetHint::Gauge => Self::Gauge,
        }
    }
}

fn hint_name(h: CounterResetHint) -> &'static str {
    match h {
        CounterResetHint::Unknown => "unknown",
        CounterResetHint::CounterReset => "reset",
        CounterResetHint::NotCounterReset => "not_reset",
        CounterResetHint::Gauge => "gauge",
    }
}

impl JsonHistogram {
    /// Bytes the histogram holds once decoded, per JSON byte at most: a bucket count or bound of
    /// at least 2 bytes (`1,`) becomes 8, a span of at least 6 (`[0,1],`) becomes 8.
    pub const HELD_PER_JSON_BYTE: usize = 4;

    /// The histogram, validated.
    ///
    /// # Errors
    /// What is wrong, in words: a rule of [`Histogram::validate`] (which also wants the counts
    /// of an integer histogram whole, in `0..=2^53`).
    pub fn into_histogram(self) -> Result<Histogram, String> {
        let floats = |v: Vec<JsonFloat>| v.into_iter().map(|JsonFloat(x)| x).collect::<Vec<f64>>();
        let spans = |v: Vec<(i32, u32)>| v.into_iter().map(|(offset, length)| Span { offset, length }).collect();
        let h = Histogram {
            counter_reset_hint: self.reset_hint.into(),
            schema: self.schema,
            zero_threshold: self.zero_threshold.0,
            zero_count: self.zero_count.0,
            count: self.count.0,
            sum: self.sum.0,
            positive_spans: spans(self.positive_spans),
            negative_spans: spans(self.negative_spans),
            positive_buckets: floats(self.positive_buckets),
            negative_buckets: floats(self.negative_buckets),
            custom_values: floats(self.custom_values),
            integer: !self.float,
        };
        // A stale marker carries no counts to check.
        if h.is_stale() {
            return Ok(h);
        }
        // Also checks that an integer histogram's counts are whole numbers in 0..=2^53.
        h.validate().map_err(|e| e.to_string())?;
        Ok(h)
    }
}

/// The JSON form of a histogram, fields at their default left out.
pub fn histogram_json(h: &Histogram) -> Value {
    // Counts of an integer histogram print as integers.
    let count = |v: f64| {
        if h.integer && v.fract() == 0.0 && (0.0..=9_007_199_254_740_992.0).contains(&v) {
            Value::from(v as u64)
        } else {
            float_json(v)
        }
    };
    let spans = |s: &[Span]| {
        Value::from(s.iter().map(|s| Value::from(vec![s.offset as i64, i64::from(s.length)])).collect::<Vec<_>>())
    };
    let mut m = Map::new();
    m.insert("schema".into(), Value::from(h.schema));
    if h.zero_threshold.to_bits() != 0 {
        m.insert("zero_threshold".into(), float_json(h.zero_threshold));
    }
    if h.zero_count.to_bits() != 0 {
        m.insert("zero_count".into(), count(h.zero_count));
    }
    m.insert("count".into(), count(h.count));
    m.insert("sum".into(), float_json(h.sum));
    for (name, s, b) in
        [("positive", &h.positive_spans, &h.positive_buckets), ("negative", &h.negative_spans, &h.negative_buckets)]
    {
        if !s.is_empty() {
            m.insert(format!("{name}_spans"), spans(s));
        }
        if !b.is_empty() {
            m.insert(format!("{name}_buckets"), Value::from(b.iter().map(|&v| count(v)).collect::<Vec<_>>()));
        }
    }
    if !h.custom_values.is_empty() {
        m.insert(
            "custom_values".into(),
            Value::from(h.custom_values.iter().map(|&v| float_json(v)).collect::<Vec<_>>()),
        );
    }
    if h.counter_reset_hint != CounterResetHint::Unknown {
        m.insert("reset_hint".into(), Value::from(hint_name(h.counter_reset_hint)));
    }
    if !h.integer {
        m.insert("float".into(), Value::from(true));
    }
    Value::Object(m)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn decode(json: &str) -> Result<Histogram, String> {
        serde_json::from_str::<JsonHistogram>(json).map_err(|e| e.to_string())?.into_histogram()
    }

    #[test]
    fn reads_the_documented_example() {
        let h = decode(
            r#"{"schema":3,"zero_threshold":2.938735877055719e-39,"zero_count":1,"count":12,"sum":3.5,
                "positive_spans":[[-2,2],[1,1]],"positive_buckets":[4,5,2],"reset_hint":"not_reset"}"#,
        )
        .unwrap();
        assert_eq!(h.schema, 3);
        assert_eq!(h.positive_spans, vec![Span { offset: -2, length: 2 }, Span { offset: 1, length: 1 }]);
        assert_eq!(h.positive_buckets, vec![4.0, 5.0, 2.0]);
        assert_eq!(h.counter_reset_hint, CounterResetHint::NotCounterReset);
        assert!(h.integer);
    }

    #[test]
    fn refuses_what_prometheus_refuses_and_fractional_integer_counts() {
        for (bad, why) in [
            (r#"{"schema":9,"count":0,"sum":0}"#, "invalid schema"),
            (
                r#"{"schema":0,"count":1,"sum":0,"positive_spans":[[0,2]],"positive_buckets":[1]}"#,
                "spans need 2 buckets",
            ),
            (r#"{"schema":0,"count":1.5,"sum":0,"zero_count":1.5}"#, "not a non-negative integer"),
            (r#"{"schema":0,"count":-1,"sum":0,"float":true}"#, "negative"),
            (r#"{"schema":0,"count":1,"sum":0,"colour":"red"}"#, "unknown field"),
            (r#"{"schema":0,"count":1}"#, "missing field `sum`"),
            (r#"{"schema":0,"count":1,"sum":0,"reset_hint":"maybe"}"#, "unknown variant"),
        ] {
            let err = decode(bad).unwrap_err();
            assert!(err.contains(why), "{bad}: {err}");
        }
        // Fractional counts are fine in a float histogram, and a stale marker needs no counts.
        assert!(!decode(r#"{"schema":0,"count":1.5,"sum":0,"zero_count":1.5,"float":true}"#).unwrap().integer);
        assert!(decode(r#"{"schema":0,"count":0,"sum":"stale"}"#).unwrap().is_stale());
    }

    fn histogram() -> impl Strategy<Value = Histogram> {
        let side = prop::collection::vec((0i32..3, 1u32..4), 0..3);
        (
            prop_oneof![(-4i32..=8).boxed(), Just(-53).boxed()],
            side.clone(),
            side,
            any::<bool>(),
            0u8..4,
            prop_oneof![Just(f64::from_bits(STALE_NAN_BITS)), -1e6f64..1e6, Just(f64::NAN)],
        )
            .prop_map(|(schema, pos, neg, float, hint, sum)| {
                let custom = schema == -53;
                let mk =
                    |s: &[(i32, u32)]| s.iter().map(|&(offset, length)| Span { offset, length }).collect::<Vec<_>>();
                let positive_spans = mk(&pos);
                let negative_spans = if custom { Vec::new() } else { mk(&neg) };
                let n = |s: &[Span]| s.iter().map(|s| s.length as usize).sum::<usize>();
                let counts =
                    |k: usize| (0..k).map(|i| if float { i as f64 + 0.25 } else { i as f64 }).collect::<Vec<_>>();
                let positive_buckets = counts(n(&positive_spans));
                let negative_buckets = counts(n(&negative_spans));
                let highest =
                    positive_spans.iter().map(|s| s.offset.max(0) as usize + s.length as usize).sum::<usize>();
                let custom_values = if custom { (0..highest).map(|i| i as f64 + 0.5).collect() } else { Vec::new() };
                let zero_count = if custom || float { 0.0 } else { 3.0 };
                let count = positive_buckets.iter().chain(&negative_buckets).sum::<f64>() + zero_count;
                Histogram {
                    counter_reset_hint: CounterResetHint::from_code(hint).unwrap_or_default(),
                    schema,
                    zero_threshold: if custom { 0.0 } else { 1e-3 },
                    zero_count,
                    count,
                    sum,
                    positive_spans,
                    negative_spans,
                    positive_buckets,
                    negative_buckets,
                    custom_values,
                    integer: !float,
                }
            })
    }

    proptest! {
        /// Export then import gives back the same histogram, bit for bit.
        #[test]
        fn export_imports_back_bit_for_bit(h in histogram()) {
            prop_assume!(h.is_stale() || h.validate().is_ok());
            let json = serde_json::to_string(&histogram_json(&h)).unwrap();
            let back = decode(&json).unwrap();
            prop_assert!(back.identical(&h), "{json}\n{h:?}\n{back:?}");
        }
    }
}
