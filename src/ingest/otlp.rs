//! OTLP metrics over HTTP (`POST /opentelemetry/v1/metrics`, `/api/v1/otlp/v1/metrics`):
//! protobuf `ExportMetricsServiceRequest` bodies (messages from the maintained
//! `opentelemetry-proto` crate), translated as Prometheus 3 translates them by default
//! (`UnderscoreEscapingWithSuffixes`):
//!
//! - **Names**: the metric name split at every character outside `[a-zA-Z0-9:]` and joined with
//!   `_`; the unit appended (`s` -> `seconds`, `By` -> `bytes`, `By/s` -> `bytes_per_second`,
//!   nothing for `1` or `{...}` units, nothing already in the name); `_total` for monotonic sums;
//!   `_ratio` for gauges of unit `1`; a leading digit gets `_`. [`Naming::KeepUtf8`] keeps the
//!   name as sent and only adds the suffixes (Prometheus' `NoUTF8EscapingWithSuffixes`).
//! - **Labels**: data point attributes, names with invalid characters replaced by `_` (runs of
//!   `_` collapsed), a leading digit prefixed with `key_`; two attributes that become one name
//!   have their values joined with `;`. Under [`Naming::KeepUtf8`] attribute names are kept as
//!   sent (`service.name`, `名前`), as Prometheus keeps them, unless `--ingest-legacy-label-names`
//!   asks for the translation ([`SeriesLimits::legacy_label_names`]). `job` is
//!   `service.namespace/service.name` (or `service.name`), `instance` is `service.instance.id`.
//! - **`target_info`**: one sample of 1 per resource with other attributes, carrying them as
//!   labels beside `job` and `instance`, at the newest timestamp of the resource's points.
//! - **Types**: gauges and non-monotonic sums as gauges; monotonic cumulative sums as counters;
//!   histograms as classic `_bucket{le}` (cumulative), `_sum`, `_count`; summaries as
//!   `{quantile}`, `_sum`, `_count`. A point flagged "no recorded value" becomes a staleness
//!   marker.
//! - **Exponential histograms** as native histograms (see [`exponential`]), named like gauges
//!   (no suffix but the unit's).
//! - **Refused with 400**: delta temporality (Prometheus 3 drops it unless a feature flag
//!   converts it; saltdb says so instead of storing wrong counters).

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::{metric::Data, number_data_point, AggregationTemporality, Metric};
use prost::Message;

use super::{BatchBuilder, Pairs, Rejection, Reserve, SeriesLimits, Stop};
use crate::sample::{check_timestamp, HistogramSample, PackedBatch, Sample, STALE_NAN_BITS};

#[path = "otlp/exponential.rs"]
pub mod exponential;

/// How metric names are translated (`--otlp-metric-names`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Naming {
    /// Prometheus' default: invalid characters to `_`, unit and type suffixes added.
    #[default]
    UnderscoreEscapingWithSuffixes,
    /// The name as sent (UTF-8 allowed), unit and type suffixes added; attribute names kept as
    /// sent too (Prometheus' `NoUTF8EscapingWithSuffixes`).
    KeepUtf8,
}

/// What a request says beyond its body.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// Metric name translation.
    pub naming: Naming,
    /// Per-series limits.
    pub limits: SeriesLimits,
}

/// How much memory prost's decoded messages take per byte of protobuf, at most (strings and
/// vectors of small messages): reserved before decoding.
const MESSAGE_FACTOR: usize = 4;

/// Decodes a whole (decompressed) body.
///
/// # Errors
/// [`Stop::Invalid`] for a body that is not an OTLP metrics request or holds something saltdb
/// refuses (naming the metric), or the budget's refusal.
pub fn decode<E: std::fmt::Debug>(
    body: &[u8],
    opts: &Options,
    reserve: Reserve<'_, E>,
) -> Result<PackedBatch, Stop<E>> {
    reserve(body.len().saturating_mul(MESSAGE_FACTOR)).map_err(Stop::Refused)?;
    let request = ExportMetricsServiceRequest::decode(body)
        .map_err(|e| Stop::Invalid(Rejection::body(format!("invalid OTLP protobuf: {e}"))))?;
    let mut out = BatchBuilder::new(opts.limits, reserve);
    let names = if opts.naming == Naming::UnderscoreEscapingWithSuffixes || opts.limits.legacy_label_names {
        LabelNames::Translated
    } else {
        LabelNames::AsSent
    };
    for rm in &request.resource_metrics {
        let attrs = rm.resource.as_ref().map_or(&[][..], |r| &r.attributes[..]);
        let resource = Resource::of(attrs, names)?;
        let mut newest: Option<i64> = None;
        for sm in &rm.scope_metrics {
            for metric in &sm.metrics {
                let at = |m: String| Stop::Invalid(Rejection::body(format!("metric {:?}: {m}", metric.name)));
                let last = translate(metric, opts.naming, names, &resource, &mut out).map_err(|s| match s {
                    Stop::Invalid(r) => at(r.message),
                    other => other,
                })?;
                newest = newest.max(last);
            }
        }
        if let (Some(ts), false) = (newest, resource.info.is_empty()) {
            let mut labels = resource.info.clone();
            labels.extend(resource.identity());
            out.push("target_info".to_owned(), labels, &[Sample::new(ts, 1.0)])?;
        }
    }
    Ok(out.finish())
}

/// The labels a resource gives its series.
struct Resource {
    job: Option<String>,
    instance: Option<String>,
    /// The other attributes (for `target_info`), as labels.
    info: Pairs,
}

impl Resource {
    fn of<E>(attrs: &[KeyValue], names: LabelNames) -> Result<Self, Stop<E>> {
        let get = |k: &str| attrs.iter().find(|a| a.key == k).map(|a| value_text(a.value.as_ref()));
        let job = match (get("service.namespace"), get("service.name")) {
            (Some(ns), Some(name)) if !ns.is_empty() => Some(format!("{ns}/{name}")),
            (_, name) => name,
        };
        let instance = get("service.instance.id");
        let rest: Vec<&KeyValue> = attrs
            .iter()
            .filter(|a| !matches!(a.key.as_str(), "service.name" | "service.namespace" | "service.instance.id"))
            .collect();
        Ok(Self { job, instance, info: labels_of(rest.into_iter(), names)? })
    }

    fn identity(&self) -> Pairs {
        let mut out = Vec::new();
        if let Some(j) = self.job.as_ref().filter(|j| !j.is_empty()) {
            out.push(("job".to_owned(), j.clone()));
        }
        if let Some(i) = self.instance.as_ref().filter(|i| !i.is_empty()) {
            out.push(("instance".to_owned(), i.clone()));
        }
        out
    }
}

/// How attribute names become label names.
#[derive(Clone, Copy, PartialEq, Eq)]
enum LabelNames {
    /// Prometheus' translation ([`label_name`]).
    Translated,
    /// As sent (any non-empty UTF-8).
    AsSent,
}

/// The kind of series a metric becomes (for its name's suffixes).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Gauge,
    Counter,
    Other,
}

/// Adds the series of one metric; returns the newest timestamp it carried.
fn translate<E: std::fmt::Debug>(
    metric: &Metric,
    naming: Naming,
    names: LabelNames,
    resource: &Resource,
    out: &mut BatchBuilder<'_, E>,
) -> Result<Option<i64>, Stop<E>> {
    let invalid = |m: &str| Stop::Invalid(Rejection::body(m.to_owned()));
    let mut newest = None;
    let mut emit = |out: &mut BatchBuilder<'_, E>, name: String, mut labels: Pairs, ts_nanos: u64, value: f64| {
        let ts = i64::try_from(ts_nanos / 1_000_000).unwrap_or(i64::MAX);
        check_timestamp(ts).map_err(|e| Stop::Invalid(Rejection::body(e.to_string())))?;
        newest = newest.max(Some(ts));
        labels.extend(resource.identity());
        out.push(name, labels, &[Sample::new(ts, value)])
    };
    match &metric.data {
        None => Ok(None),
        Some(Data::Gauge(g)) => {
            let name = metric_name(metric, Kind::Gauge, naming)?;
            for p in &g.data_points {
                let v = number(p.value.as_ref(), p.flags);
                emit(out, name.clone(), labels_of(p.attributes.iter(), names)?, p.time_unix_nano, v)?;
            }
            Ok(newest)
        }
        Some(Data::Sum(s)) => {
            if s.aggregation_temporality == AggregationTemporality::Delta as i32 {
                return Err(invalid("delta temporality is not accepted (as Prometheus 3 without its delta conversion): configure the sender for cumulative temporality"));
            }
            // A non-monotonic sum keeps its name without `_total` or `_ratio`, as Prometheus'.
            let name = metric_name(metric, if s.is_monotonic { Kind::Counter } else { Kind::Other }, naming)?;
            for p in &s.data_points {
                let v = number(p.value.as_ref(), p.flags);
                emit(out, name.clone(), labels_of(p.attributes.iter(), names)?, p.time_unix_nano, v)?;
            }
            Ok(newest)
        }
        Some(Data::Histogram(h)) => {
            if h.aggregation_temporality == AggregationTemporality::Delta as i32 {
                return Err(invalid("delta temporality is not accepted (as Prometheus 3 without its delta conversion): configure the sender for cumulative temporality"));
            }
            let base = metric_name(metric, Kind::Other, naming)?;
            for p in &h.data_points {
                let labels = labels_of(p.attributes.iter(), names)?;
                let stale = p.flags & 1 == 1;
                let val = |v: f64| if stale { f64::from_bits(STALE_NAN_BITS) } else { v };
                if p.bucket_counts.len() != p.explicit_bounds.len() + 1 && !p.bucket_counts.is_empty() {
                    return Err(invalid(&format!(
                        "a histogram point has {} bucket counts for {} bounds (must be one more)",
                        p.bucket_counts.len(),
                        p.explicit_bounds.len()
                    )));
                }
                if let Some(sum) = p.sum {
                    emit(out, format!("{base}_sum"), labels.clone(), p.time_unix_nano, val(sum))?;
                }
                emit(out, format!("{base}_count"), labels.clone(), p.time_unix_nano, val(p.count as f64))?;
                let mut cumulative = 0u64;
                for (i, count) in p.bucket_counts.iter().enumerate() {
                    cumulative = cumulative.saturating_add(*count);
                    let le = p.explicit_bounds.get(i).map_or_else(|| "+Inf".to_owned(), |b| format_bound(*b));
                    let mut l = labels.clone();
                    l.push(("le".to_owned(), le));
                    emit(out, format!("{base}_bucket"), l, p.time_unix_nano, val(cumulative as f64))?;
                }
            }
            Ok(newest)
        }
        Some(Data::Summary(s)) => {
            let base = metric_name(metric, Kind::Other, naming)?;
            for p in &s.data_points {
                let labels = labels_of(p.attributes.iter(), names)?;
                let stale = p.flags & 1 == 1;
                let val = |v: f64| if stale { f64::from_bits(STALE_NAN_BITS) } else { v };
                emit(out, format!("{base}_sum"), labels.clone(), p.time_unix_nano, val(p.sum))?;
                emit(out, format!("{base}_count"), labels.clone(), p.time_unix_nano, val(p.count as f64))?;
                for q in &p.quantile_values {
                    let mut l = labels.clone();
                    l.push(("quantile".to_owned(), format_bound(q.quantile)));
                    emit(out, base.clone(), l, p.time_unix_nano, val(q.value))?;
                }
            }
            Ok(newest)
        }
        Some(Data::ExponentialHistogram(e)) => {
            if e.aggregation_temporality == AggregationTemporality::Delta as i32 {
                return Err(invalid("delta temporality is not accepted (as Prometheus 3 without its delta conversion): configure the sender for cumulative temporality"));
            }
            let name = metric_name(metric, Kind::Other, naming)?;
            let mut newest = None;
            for p in &e.data_points {
                let ts = i64::try_from(p.time_unix_nano / 1_000_000).unwrap_or(i64::MAX);
                check_timestamp(ts).map_err(|e| Stop::Invalid(Rejection::body(e.to_string())))?;
                let histogram = exponential::to_native(p).map_err(|m| invalid(&m))?;
                newest = newest.max(Some(ts));
                let mut labels = labels_of(p.attributes.iter(), names)?;
                labels.extend(resource.identity());
                let sample = HistogramSample { timestamp_ms: ts, histogram: std::sync::Arc::new(histogram) };
                out.push_histogram(name.clone(), labels, sample)?;
            }
            Ok(newest)
        }
    }
}

/// A number point's value: a staleness marker when flagged "no recorded value".
fn number(v: Option<&number_data_point::Value>, flags: u32) -> f64 {
    if flags & 1 == 1 {
        return f64::from_bits(STALE_NAN_BITS);
    }
    match v {
        Some(number_data_point::Value::AsDouble(d)) => *d,
        Some(number_data_point::Value::AsInt(i)) => *i as f64,
        None => 0.0,
    }
}

/// A bucket bound or quantile as Prometheus prints it (`0.5`, `1`, `+Inf`).
fn format_bound(b: f64) -> String {
    if b == f64::INFINITY {
        "+Inf".to_owned()
    } else if b == f64::NEG_INFINITY {
        "-Inf".to_owned()
    } else {
        let mut buf = ryu::Buffer::new();
        let s = buf.format(b);
        s.strip_suffix(".0").unwrap_or(s).to_owned()
    }
}

/// An attribute value as label text.
fn value_text(v: Option<&AnyValue>) -> String {
    match v.and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::DoubleValue(d)) => format_bound(*d),
        Some(any_value::Value::ArrayValue(a)) => {
            let items: Vec<serde_json::Value> =
                a.values.iter().map(|v| serde_json::Value::String(value_text(Some(v)))).collect();
            serde_json::Value::Array(items).to_string()
        }
        Some(any_value::Value::KvlistValue(kv)) => {
            let map: serde_json::Map<String, serde_json::Value> = kv
                .values
                .iter()
                .map(|a| (a.key.clone(), serde_json::Value::String(value_text(a.value.as_ref()))))
                .collect();
            serde_json::Value::Object(map).to_string()
        }
        Some(any_value::Value::BytesValue(b)) => base64::Engine::encode(&base64::engine::general_purpose::STANDARD, b),
        _ => String::new(),
    }
}

/// Attributes as labels: names translated (or as sent), values joined with `;` where two names
/// are the same.
fn labels_of<'a, E>(attrs: impl Iterator<Item = &'a KeyValue>, names: LabelNames) -> Result<Pairs, Stop<E>> {
    let mut sorted: Vec<&KeyValue> = attrs.collect();
    sorted.sort_by(|a, b| a.key.cmp(&b.key));
    let mut out: Pairs = Vec::new();
    for a in sorted {
        let name = match names {
            LabelNames::Translated => label_name(&a.key),
            LabelNames::AsSent => Some(a.key.clone()).filter(|k| crate::labels::is_storable_label_name(k)),
        };
        let name = name.ok_or_else(|| {
            Stop::Invalid(Rejection::body(format!("attribute name {:?} has no valid label name", a.key)))
        })?;
        let value = value_text(a.value.as_ref());
        match out.iter_mut().find(|(k, _)| *k == name) {
            Some((_, v)) => {
                v.push(';');
                v.push_str(&value);
            }
            None => out.push((name, value)),
        }
    }
    Ok(out)
}

/// Prometheus' label name translation; `None` for a name of underscores only or empty.
fn label_name(key: &str) -> Option<String> {
    let mut name = String::with_capacity(key.len());
    for c in key.chars() {
        let c = if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' };
        if !(c == '_' && name.ends_with('_')) {
            name.push(c);
        }
    }
    if name.chars().all(|c| c == '_') {
        return None;
    }
    if name.starts_with(|c: char| c.is_ascii_digit()) {
        name.insert_str(0, "key_");
    }
    Some(name)
}

/// Prometheus' metric name translation with suffixes.
fn metric_name<E>(metric: &Metric, kind: Kind, naming: Naming) -> Result<String, Stop<E>> {
    let (main_unit, per_unit) = unit_suffixes(&metric.unit);
    let name = match naming {
        Naming::UnderscoreEscapingWithSuffixes => {
            let mut tokens: Vec<String> = metric
                .name
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == ':'))
                .filter(|t| !t.is_empty())
                .map(str::to_owned)
                .collect();
            let main = clean_unit(&main_unit);
            let per = clean_unit(&per_unit);
            let per = if per == "per_" { String::new() } else { per.trim_end_matches('_').to_owned() };
            let per = if tokens.contains(&per) { String::new() } else { per };
            let mut main = if tokens.contains(&main) { String::new() } else { main };
            if !per.is_empty() {
                main = main.trim_end_matches('_').to_owned();
            }
            if !main.is_empty() {
                tokens.push(main);
            }
            if !per.is_empty() {
                tokens.push(per);
            }
            if kind == Kind::Counter {
                tokens.retain(|t| t != "total");
                tokens.push("total".to_owned());
            }
            if metric.unit == "1" && kind == Kind::Gauge {
                tokens.retain(|t| t != "ratio");
                tokens.push("ratio".to_owned());
            }
            let mut name = tokens.join("_");
            if name.starts_with(|c: char| c.is_ascii_digit()) {
                name.insert(0, '_');
            }
            name
        }
        Naming::KeepUtf8 => {
            let mut name = metric.name.clone();
            let mut tail = Vec::new();
            if metric.unit == "1" && kind == Kind::Gauge {
                name = trim_suffix(&name, "ratio");
                tail.push("ratio".to_owned());
            }
            if kind == Kind::Counter {
                name = trim_suffix(&name, "total");
                tail.push("total".to_owned());
            }
            if !per_unit.is_empty() {
                name = trim_suffix(&name, &per_unit);
                tail.push(per_unit.clone());
            }
            if !main_unit.is_empty() && !name.ends_with(&main_unit) {
                name = format!("{name}_{main_unit}");
            }
            for t in tail.into_iter().rev() {
                name = format!("{name}_{t}");
            }
            name
        }
    };
    if name.is_empty() || name.chars().all(|c| c == '_') {
        return Err(Stop::Invalid(Rejection::body("the name translates to nothing valid".to_owned())));
    }
    Ok(name)
}

/// `name` without `_suffix` (or any one-character delimiter before it) when it ends with it.
fn trim_suffix(name: &str, suffix: &str) -> String {
    if name.ends_with(suffix) && name.len() > suffix.len() + 1 {
        name[..name.len() - suffix.len() - 1].to_owned()
    } else {
        name.to_owned()
    }
}

/// The unit's main and `per_` parts, mapped to Prometheus' words (`By/s` -> `bytes`,
/// `per_second`); units in braces give nothing.
fn unit_suffixes(unit: &str) -> (String, String) {
    let mut parts = unit.splitn(2, '/');
    let main = parts.next().unwrap_or_default().trim();
    let main = if main.is_empty() || main.contains(['{', '}']) { String::new() } else { main_unit(main).to_owned() };
    let per = match parts.next().map(str::trim) {
        Some(p) if !p.is_empty() && !p.contains(['{', '}']) => format!("per_{}", per_unit(p)),
        _ => String::new(),
    };
    (main, per)
}

fn main_unit(u: &str) -> &str {
    match u {
        "d" => "days",
        "h" => "hours",
        "min" => "minutes",
        "s" => "seconds",
        "ms" => "milliseconds",
        "us" => "microseconds",
        "ns" => "nanoseconds",
        "By" => "bytes",
        "KiBy" => "kibibytes",
        "MiBy" => "mebibytes",
        "GiBy" => "gibibytes",
        "TiBy" => "tibibytes",
        "KBy" => "kilobytes",
        "MBy" => "megabytes",
        "GBy" => "gigabytes",
        "TBy" => "terabytes",
        "m" => "meters",
        "V" => "volts",
        "A" => "amperes",
        "J" => "joules",
        "W" => "watts",
        "g" => "grams",
        "Cel" => "celsius",
        "Hz" => "hertz",
        "1" => "",
        "%" => "percent",
        other => other,
    }
}

fn per_unit(u: &str) -> &str {
    match u {
        "s" => "second",
        "m" => "minute",
        "h" => "hour",
        "d" => "day",
        "w" => "week",
        "mo" => "month",
        "y" => "year",
        other => other,
    }
}

/// A unit made of valid name characters: others become `_`, runs of `_` collapse, no leading `_`.
fn clean_unit(unit: &str) -> String {
    let mut out = String::with_capacity(unit.len());
    for c in unit.chars() {
        let c = if c.is_ascii_alphanumeric() || c == ':' { c } else { '_' };
        if !(c == '_' && out.ends_with('_')) {
            out.push(c);
        }
    }
    out.trim_start_matches('_').to_owned()
}

#[cfg(test)]
mod tests;
