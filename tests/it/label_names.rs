//! Label names kept as sent: `tag,x`, `service.name` and `名前` written through InfluxDB line
//! protocol, OpenTSDB and OTLP (`--otlp-metric-names keep-utf8`) over real HTTP, read back
//! through instant queries with quoted names, series, labels, label values (percent-encoded and
//! `U__`-escaped names), export -> import and remote read; `--ingest-legacy-label-names` brings
//! back the rewriting.

use std::collections::BTreeMap;

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::{
    metric::Data, number_data_point, Gauge, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics,
};
use prost::Message;
use saltdb::http::Limits;
use saltdb::ingest::SeriesLimits;
use saltdb::remote::proto::{self, MatcherType, ResponseType};
use saltdb::server::ServerConfig;
use serde_json::Value;

use crate::common::*;
use crate::remote_write::remote_read;

const NAMES: [(&str, &str); 3] = [("tag,x", "a"), ("service.name", "a"), ("名前", "x")];

fn otlp_body(name: &str, t_s: i64) -> Vec<u8> {
    let attributes = NAMES
        .iter()
        .map(|(k, v)| KeyValue {
            key: (*k).into(),
            value: Some(AnyValue { value: Some(any_value::Value::StringValue((*v).into())) }),
            ..Default::default()
        })
        .collect();
    let point = NumberDataPoint {
        attributes,
        time_unix_nano: u64::try_from(t_s).unwrap() * 1_000_000_000,
        value: Some(number_data_point::Value::AsDouble(3.0)),
        ..Default::default()
    };
    let metric =
        Metric { name: name.into(), data: Some(Data::Gauge(Gauge { data_points: vec![point] })), ..Default::default() };
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            scope_metrics: vec![ScopeMetrics { metrics: vec![metric], ..Default::default() }],
            ..Default::default()
        }],
    }
    .encode_to_vec()
}

/// Writes one series through each door (OTLP answering `otlp_status`); the metric names written.
fn write_all(base: &str, t: i64, otlp_status: u16) -> [&'static str; 3] {
    let lp = format!("lp,tag\\,x=a,service.name=a,名前=x v=1 {t}000000000");
    let (s, _, b) = post(&format!("{base}/write"), &[], lp.into_bytes());
    assert_eq!(s, 204, "influx: {b}");
    let tsdb = format!(
        r#"{{"metric":"tsdb.m","timestamp":{t},"value":2,"tags":{{"tag,x":"a","service.name":"a","名前":"x"}}}}"#
    );
    let (s, _, b) = post(&format!("{base}/api/put"), &[], tsdb.into_bytes());
    assert_eq!(s, 204, "opentsdb: {b}");
    let (s, _, b) = post(
        &format!("{base}/opentelemetry/v1/metrics"),
        &[("Content-Type", "application/x-protobuf")],
        otlp_body("otlp.m", t),
    );
    assert_eq!(s, otlp_status, "otlp: {b}");
    ["lp_v", "tsdb.m", "otlp.m"]
}

fn get(url: &str, query: &[(&str, &str)]) -> Value {
    let resp = client().get(url).query(query).send().expect("request");
    assert_eq!(resp.status().as_u16(), 200, "{url} {query:?}");
    serde_json::from_str(&resp.text().expect("body")).expect("JSON")
}

/// The metric names of a result or series list, sorted.
fn names_of(items: &Value) -> Vec<String> {
    let mut out: Vec<String> = items
        .as_array()
        .expect("array")
        .iter()
        .map(|m| {
            let m = if m.get("metric").is_some() { &m["metric"] } else { m };
            for (k, v) in NAMES {
                assert_eq!(m[k], v, "{m}");
            }
            m["__name__"].as_str().unwrap_or_default().to_owned()
        })
        .collect();
    out.sort();
    out
}

fn server(dir: &std::path::Path, legacy: bool) -> InProcess {
    let mut config = ServerConfig::new("127.0.0.1:0".parse().unwrap(), storage_config(dir));
    config.otlp_naming = saltdb::ingest::otlp::Naming::KeepUtf8;
    config.limits =
        Limits { series: SeriesLimits { legacy_label_names: legacy, ..SeriesLimits::default() }, ..config.limits };
    InProcess::start_with(runtime(), config)
}

#[test]
fn utf8_label_names_are_kept_through_every_door_and_read_back_everywhere() {
    let dir = tempfile::tempdir().unwrap();
    let saltdb = server(dir.path(), false);
    let base = saltdb.url("");
    let t = recent_ms() / 1000;
    let mut written: Vec<String> = write_all(&base, t, 200).iter().map(|s| (*s).to_owned()).collect();
    written.sort();
    let time = t.to_string();

    // Instant queries with quoted names.
    for selector in [r#"{"service.name"="a"}"#, r#"{__name__=~".+", "名前"="x"}"#, r#"{"tag,x"="a", "名前"=~"x|y"}"#]
    {
        let q = get(&format!("{base}/api/v1/query"), &[("query", selector), ("time", &time)]);
        assert_eq!(names_of(&q["data"]["result"]), written, "{selector}: {q}");
    }
    // Series, labels, label values (percent-encoded and U__-escaped names).
    let series = get(&format!("{base}/api/v1/series"), &[("match[]", r#"{"tag,x"="a"}"#)]);
    assert_eq!(names_of(&series["data"]), written, "{series}");
    let labels = get(&format!("{base}/api/v1/labels"), &[]);
    for (k, _) in NAMES {
        assert!(labels["data"].as_array().unwrap().iter().any(|l| l == k), "{k}: {labels}");
    }
    for (path, value) in [
        ("/api/v1/label/tag%2Cx/values", "a"),
        ("/api/v1/label/service.name/values", "a"),
        ("/api/v1/label/U__service_2e_name/values", "a"),
        ("/api/v1/label/%E5%90%8D%E5%89%8D/values", "x"),
        ("/api/v1/label/U___540d__524d_/values", "x"),
    ] {
        let v = get(&format!("{base}{path}"), &[]);
        assert_eq!(v["data"], serde_json::json!([value]), "{path}: {v}");
    }

    // Export -> import into another store gives the same series.
    let exported = export(&base, r#"{"名前"="x"}"#);
    assert_eq!(exported.len(), 3, "{exported:#?}");
    let text = client()
        .get(format!("{base}/api/v1/export"))
        .query(&[("match[]", r#"{"名前"="x"}"#)])
        .send()
        .unwrap()
        .text()
        .unwrap();
    let other_dir = tempfile::tempdir().unwrap();
    let other = server(other_dir.path(), false);
    let (s, b) = import(&other.url(""), text);
    assert_eq!(s, 204, "import: {b}");
    assert_eq!(export(&other.url(""), r#"{"名前"="x"}"#), exported);
    other.stop();

    // Remote read matches on the name as sent and returns it.
    let matcher = proto::LabelMatcher { r#type: MatcherType::Eq as i32, name: "名前".into(), value: "x".into() };
    for accepted in [&[ResponseType::Samples][..], &[ResponseType::StreamedXorChunks][..]] {
        let read = remote_read(&base, vec![matcher.clone()], (t - 60) * 1000, (t + 60) * 1000, accepted);
        let got: BTreeMap<_, _> = read.iter().map(|(l, s)| (l.clone(), s.len())).collect();
        assert_eq!(got.len(), 3, "{read:#?}");
        assert!(read.keys().all(|l| NAMES.iter().all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))), "{read:#?}");
    }
    saltdb.stop();
}

#[test]
fn legacy_label_names_rewrite_as_before() {
    let dir = tempfile::tempdir().unwrap();
    let saltdb = server(dir.path(), true);
    let base = saltdb.url("");
    let t = recent_ms() / 1000;
    // OTLP's translation of attribute names refuses `名前` (nothing of it is a valid character);
    // line protocol and OpenTSDB sanitize it to `__`.
    write_all(&base, t, 400);
    let got = export(&base, r#"{__name__=~".+"}"#);
    let expected: Vec<(String, Vec<&str>)> = ["lp_v", "tsdb.m"]
        .into_iter()
        .map(|name| (name.to_owned(), vec!["__", "__name__", "service_name", "tag_x"]))
        .collect();
    let keys: Vec<(String, Vec<&str>)> =
        got.keys().map(|l| (l["__name__"].clone(), l.keys().map(String::as_str).collect())).collect();
    assert_eq!(keys, expected, "{got:#?}");
    saltdb.stop();
}

/// Prometheus 3's quoted names in the text format over `/api/v1/import/prometheus`: what
/// `/federate` writes imports back with the names as sent; a malformed quoted name is a 400
/// naming its line, with nothing written.
#[test]
fn prometheus_text_import_takes_quoted_utf8_names() {
    let dir = tempfile::tempdir().unwrap();
    let saltdb = server(dir.path(), false);
    let base = saltdb.url("");
    // /federate answers the latest samples within the lookback delta of now.
    let t = chrono::Utc::now().timestamp() - 10;
    let written = write_all(&base, t, 200);
    let federated = client()
        .get(format!("{base}/federate"))
        .query(&[("match[]", r#"{"名前"="x"}"#)])
        .send()
        .unwrap()
        .text()
        .unwrap();
    assert!(federated.contains(r#"{"tsdb.m","#), "{federated}");

    let other_dir = tempfile::tempdir().unwrap();
    let other = server(other_dir.path(), false);
    let import_text = |body: String| post(&other.url("/api/v1/import/prometheus"), &[], body.into_bytes());
    let (s, _, b) = import_text(federated);
    assert_eq!(s, 204, "{b}");
    let mut got: Vec<String> = export(&other.url(""), r#"{"名前"="x"}"#)
        .keys()
        .map(|l| {
            for (k, v) in NAMES {
                assert_eq!(l.get(k).map(String::as_str), Some(v), "{l:?}");
            }
            l["__name__"].clone()
        })
        .collect();
    got.sort();
    let mut want: Vec<String> = written.iter().map(|s| (*s).to_owned()).collect();
    want.sort();
    assert_eq!(got, want);

    // Written by hand, as a Prometheus 3 exporter would.
    let (s, _, b) = import_text(format!("{{\"my.metric\", job=\"x\", \"service.name\"=\"a\"}} 4 {t}000\n"));
    assert_eq!(s, 204, "{b}");
    let q = get(
        &other.url("/api/v1/query"),
        &[("query", r#"{"my.metric", "service.name"="a"}"#), ("time", &t.to_string())],
    );
    assert_eq!(
        q["data"]["result"][0]["metric"],
        serde_json::json!({"__name__": "my.metric", "job": "x", "service.name": "a"}),
        "{q}"
    );
    assert_eq!(q["data"]["result"][0]["value"][1], "4", "{q}");

    for bad in
        ["{\"my.metric\" 1\n", "{\"a\",\"b\"} 1\n", "m{service.name=\"a\"} 1\n", "my.metric 1\n", "{job=\"x\"} 1\n"]
    {
        let (s, _, b) = import_text(format!("ok_metric 1\n{bad}"));
        assert_eq!(s, 400, "{bad}: {b}");
        assert!(b.contains("line 2"), "{bad}: {b}");
    }
    let none = get(&other.url("/api/v1/query"), &[("query", "ok_metric"), ("time", &t.to_string())]);
    assert_eq!(none["data"]["result"], serde_json::json!([]), "{none}");
    other.stop();
    saltdb.stop();
}

/// `label_replace` and `label_join` make and read UTF-8 label names over HTTP, as Prometheus 3;
/// an empty destination is a 422 naming it.
#[test]
fn label_functions_take_utf8_names_over_http() {
    let dir = tempfile::tempdir().unwrap();
    let saltdb = server(dir.path(), false);
    let base = saltdb.url("");
    let t = recent_ms() / 1000;
    write_all(&base, t, 200);
    let time = t.to_string();
    let query =
        |q: &str| client().get(format!("{base}/api/v1/query")).query(&[("query", q), ("time", &time)]).send().unwrap();
    let replaced = r#"label_replace(lp_v, "new.名前", "$1-y", "名前", "(.*)")"#;
    let joined = format!(r#"label_join({replaced}, "tag,joined", "|", "tag,x", "new.名前", "service.name")"#);
    let resp = query(&joined);
    assert_eq!(resp.status().as_u16(), 200);
    let v: Value = serde_json::from_str(&resp.text().unwrap()).unwrap();
    let m = &v["data"]["result"][0]["metric"];
    assert_eq!(m["new.名前"], "x-y", "{v}");
    assert_eq!(m["tag,joined"], "a|x-y|a", "{v}");
    let resp = query(r#"label_replace(lp_v, "", "x", "名前", "(.*)")"#);
    assert_eq!(resp.status().as_u16(), 422);
    let body = resp.text().unwrap();
    assert!(body.contains("invalid destination label name in label_replace(): "), "{body}");
    saltdb.stop();
}
