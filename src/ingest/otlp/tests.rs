//! OTLP translation cases worked out by hand from Prometheus' documented rules.

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::{
    exponential_histogram_data_point::Buckets, metric::Data, number_data_point, summary_data_point::ValueAtQuantile,
    AggregationTemporality, ExponentialHistogram, ExponentialHistogramDataPoint, Gauge, Histogram, HistogramDataPoint,
    Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum, Summary, SummaryDataPoint,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message;

use super::*;
use crate::labels::METRIC_NAME;

const T: u64 = 1_700_000_000_123_456_789;
const MS: i64 = 1_700_000_000_123;

fn kv(k: &str, v: any_value::Value) -> KeyValue {
    KeyValue { key: k.into(), value: Some(AnyValue { value: Some(v) }), ..Default::default() }
}

fn s(k: &str, v: &str) -> KeyValue {
    kv(k, any_value::Value::StringValue(v.into()))
}

fn point(v: f64, attrs: Vec<KeyValue>) -> NumberDataPoint {
    NumberDataPoint {
        attributes: attrs,
        time_unix_nano: T,
        value: Some(number_data_point::Value::AsDouble(v)),
        ..Default::default()
    }
}

fn metric(name: &str, unit: &str, data: Data) -> Metric {
    Metric { name: name.into(), unit: unit.into(), data: Some(data), ..Default::default() }
}

fn gauge(name: &str, unit: &str, v: f64) -> Metric {
    metric(name, unit, Data::Gauge(Gauge { data_points: vec![point(v, vec![])] }))
}

fn sum(name: &str, unit: &str, monotonic: bool, temporality: AggregationTemporality) -> Metric {
    metric(
        name,
        unit,
        Data::Sum(Sum {
            data_points: vec![point(3.0, vec![])],
            aggregation_temporality: temporality as i32,
            is_monotonic: monotonic,
        }),
    )
}

fn request(resource: Vec<KeyValue>, metrics: Vec<Metric>) -> Vec<u8> {
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(Resource { attributes: resource, ..Default::default() }),
            scope_metrics: vec![ScopeMetrics { metrics, ..Default::default() }],
            ..Default::default()
        }],
    }
    .encode_to_vec()
}

fn opts() -> Options {
    Options { naming: Naming::UnderscoreEscapingWithSuffixes, limits: SeriesLimits::default() }
}

/// `name{label=value,...} value @ms`, sorted.
fn run(body: &[u8], o: &Options) -> Result<Vec<String>, Rejection> {
    let batch = decode(body, o, &mut |_| Ok::<(), ()>(())).map_err(|s| match s {
        Stop::Invalid(r) => r,
        Stop::Refused(()) => unreachable!(),
    })?;
    let mut out: Vec<String> = batch
        .unpack()
        .unwrap()
        .series
        .iter()
        .map(|s| {
            let labels: Vec<String> =
                s.labels.iter().filter(|l| l.name != METRIC_NAME).map(|l| format!("{}={}", l.name, l.value)).collect();
            let v = s.samples[0].value;
            let v = if v.to_bits() == STALE_NAN_BITS { "stale".to_owned() } else { v.to_string() };
            format!(
                "{}{{{}}} {v} @{}",
                s.labels.get(METRIC_NAME).unwrap_or_default(),
                labels.join(","),
                s.samples[0].timestamp_ms
            )
        })
        .collect();
    out.sort();
    Ok(out)
}

fn names(metrics: Vec<Metric>, naming: Naming) -> Vec<String> {
    let o = Options { naming, ..opts() };
    run(&request(vec![], metrics), &o).unwrap().into_iter().map(|l| l[..l.find('{').unwrap()].to_owned()).collect()
}

#[test]
fn names_units_total_and_ratio() {
    use AggregationTemporality::Cumulative;
    let cases = vec![
        (gauge("http.server.request.duration", "s", 1.0), "http_server_request_duration_seconds"),
        (gauge("memory.usage", "By", 1.0), "memory_usage_bytes"),
        (gauge("io.rate", "By/s", 1.0), "io_rate_bytes_per_second"),
        (gauge("cpu.utilization", "1", 1.0), "cpu_utilization_ratio"),
        (gauge("disk.ratio", "1", 1.0), "disk_ratio"),
        (gauge("queue.size", "{items}", 1.0), "queue_size"),
        (gauge("latency_seconds", "s", 1.0), "latency_seconds"),
        (gauge("temp", "Cel", 1.0), "temp_celsius"),
        (gauge("weird..name__x", "", 1.0), "weird_name_x"),
        (gauge("2xx.count", "", 1.0), "_2xx_count"),
        (gauge("rate", "m/h", 1.0), "rate_meters_per_hour"),
        (sum("requests", "1", true, Cumulative), "requests_total"),
        (sum("requests.total", "{req}", true, Cumulative), "requests_total"),
        // The unit is already a token of the name: not appended again.
        (sum("bytes.sent", "By", true, Cumulative), "bytes_sent_total"),
        (sum("net.io", "By", true, Cumulative), "net_io_bytes_total"),
        (sum("active.conns", "1", false, Cumulative), "active_conns"),
    ];
    for (m, want) in cases {
        let label = format!("{} [{}]", m.name, m.unit);
        assert_eq!(names(vec![m], Naming::UnderscoreEscapingWithSuffixes), vec![want.to_owned()], "{label}");
    }
    assert_eq!(
        names(vec![gauge("http.server.duration", "s", 1.0)], Naming::KeepUtf8),
        vec!["http.server.duration_seconds"]
    );
    assert_eq!(names(vec![sum("réquests", "By", true, Cumulative)], Naming::KeepUtf8), vec!["réquests_bytes_total"]);
    assert_eq!(names(vec![gauge("load", "1", 1.0)], Naming::KeepUtf8), vec!["load_ratio"]);
}

#[test]
fn labels_job_instance_and_target_info() {
    let resource = vec![
        s("service.name", "checkout"),
        s("service.namespace", "shop"),
        s("service.instance.id", "pod-1"),
        s("host.name", "h1"),
        kv("deployment.replicas", any_value::Value::IntValue(3)),
    ];
    let attrs = vec![
        s("http.method", "GET"),
        s("http_method", "get"),
        kv("ok", any_value::Value::BoolValue(true)),
        kv("ratio", any_value::Value::DoubleValue(0.25)),
        s("9lives", "x"),
    ];
    let m = metric("req", "", Data::Gauge(Gauge { data_points: vec![point(2.0, attrs)] }));
    let got = run(&request(resource, vec![m]), &opts()).unwrap();
    assert_eq!(
        got,
        vec![
            format!(
                "req{{http_method=GET;get,instance=pod-1,job=shop/checkout,key_9lives=x,ok=true,ratio=0.25}} 2 @{MS}"
            ),
            format!("target_info{{deployment_replicas=3,host_name=h1,instance=pod-1,job=shop/checkout}} 1 @{MS}"),
        ]
    );
    // A resource with only the service attributes gets no target_info; no namespace: job = name.
    let got = run(&request(vec![s("service.name", "api")], vec![gauge("g", "", 1.0)]), &opts()).unwrap();
    assert_eq!(got, vec![format!("g{{job=api}} 1 @{MS}")]);
}

#[test]
fn keep_utf8_keeps_attribute_names_unless_legacy_names_are_asked_for() {
    let resource = vec![s("service.name", "api"), s("host.name", "h1")];
    let attrs = vec![s("tag,x", "1"), s("tag_x", "2"), s("service.name", "a"), s("名前", "x"), s("dc-id", "d")];
    let body = request(resource, vec![metric("req", "", Data::Gauge(Gauge { data_points: vec![point(2.0, attrs)] }))]);
    let keep = Options { naming: Naming::KeepUtf8, ..opts() };
    assert_eq!(
        run(&body, &keep).unwrap(),
        vec![
            format!("req{{dc-id=d,job=api,service.name=a,tag,x=1,tag_x=2,名前=x}} 2 @{MS}"),
            format!("target_info{{host.name=h1,job=api}} 1 @{MS}"),
        ]
    );
    // Prometheus' default translation, and keep-utf8 with legacy label names: translated, the
    // colliding names joined.
    let legacy = SeriesLimits { legacy_label_names: true, ..SeriesLimits::default() };
    let attrs = vec![s("tag,x", "1"), s("tag_x", "2"), s("service.name", "a"), s("dc-id", "d")];
    let body = request(
        vec![s("service.name", "api"), s("host.name", "h1")],
        vec![metric("req", "", Data::Gauge(Gauge { data_points: vec![point(2.0, attrs)] }))],
    );
    for o in [opts(), Options { limits: legacy, ..keep }] {
        assert_eq!(
            run(&body, &o).unwrap(),
            vec![
                format!("req{{dc_id=d,job=api,service_name=a,tag_x=1;2}} 2 @{MS}"),
                format!("target_info{{host_name=h1,job=api}} 1 @{MS}"),
            ]
        );
    }
    // An empty attribute name is refused, naming it.
    let empty =
        request(vec![], vec![metric("m", "", Data::Gauge(Gauge { data_points: vec![point(1.0, vec![s("", "v")])] }))]);
    let err = run(&empty, &keep).unwrap_err();
    assert!(err.message.contains("attribute name \"\""), "{}", err.message);
}

#[test]
fn histograms_summaries_and_stale_points() {
    let h = metric(
        "rpc.duration",
        "ms",
        Data::Histogram(Histogram {
            data_points: vec![HistogramDataPoint {
                time_unix_nano: T,
                count: 6,
                sum: Some(12.5),
                bucket_counts: vec![1, 2, 3],
                explicit_bounds: vec![0.5, 10.0],
                ..Default::default()
            }],
            aggregation_temporality: AggregationTemporality::Cumulative as i32,
        }),
    );
    let sm = metric(
        "gc.pause",
        "s",
        Data::Summary(Summary {
            data_points: vec![SummaryDataPoint {
                time_unix_nano: T,
                count: 4,
                sum: 2.0,
                quantile_values: vec![ValueAtQuantile { quantile: 0.99, value: 0.9 }],
                ..Default::default()
            }],
        }),
    );
    let mut stale = point(5.0, vec![]);
    stale.flags = 1;
    let st = metric("up", "", Data::Gauge(Gauge { data_points: vec![stale] }));
    let got = run(&request(vec![], vec![h, sm, st]), &opts()).unwrap();
    assert_eq!(
        got,
        vec![
            format!("gc_pause_seconds_count{{}} 4 @{MS}"),
            format!("gc_pause_seconds_sum{{}} 2 @{MS}"),
            format!("gc_pause_seconds{{quantile=0.99}} 0.9 @{MS}"),
            format!("rpc_duration_milliseconds_bucket{{le=+Inf}} 6 @{MS}"),
            format!("rpc_duration_milliseconds_bucket{{le=0.5}} 1 @{MS}"),
            format!("rpc_duration_milliseconds_bucket{{le=10}} 3 @{MS}"),
            format!("rpc_duration_milliseconds_count{{}} 6 @{MS}"),
            format!("rpc_duration_milliseconds_sum{{}} 12.5 @{MS}"),
            format!("up{{}} stale @{MS}"),
        ]
    );
}

#[test]
fn refusals_name_the_metric() {
    let delta = run(&request(vec![], vec![sum("reqs", "", true, AggregationTemporality::Delta)]), &opts()).unwrap_err();
    assert!(delta.message.contains("\"reqs\"") && delta.message.contains("delta temporality"), "{delta}");
    let coarse = ExponentialHistogramDataPoint { scale: -5, count: 1, time_unix_nano: T, ..Default::default() };
    let exp = metric(
        "lat",
        "s",
        Data::ExponentialHistogram(ExponentialHistogram { data_points: vec![coarse], aggregation_temporality: 2 }),
    );
    let err = run(&request(vec![], vec![exp]), &opts()).unwrap_err();
    assert!(err.message.contains("\"lat\"") && err.message.contains("scale -5"), "{err}");
    assert!(run(b"\xff\xff\xff", &opts()).unwrap_err().message.contains("invalid OTLP protobuf"));
    let bad = metric("x", "", Data::Gauge(Gauge { data_points: vec![point(1.0, vec![s("...", "v")])] }));
    assert!(run(&request(vec![], vec![bad]), &opts()).unwrap_err().message.contains("no valid label name"));
    let mut old = point(1.0, vec![]);
    old.time_unix_nano = 0;
    let old = metric("y", "", Data::Gauge(Gauge { data_points: vec![old] }));
    assert!(run(&request(vec![], vec![old]), &opts()).is_ok(), "time 0 is inside the supported range");
    let bad_buckets = metric(
        "h",
        "",
        Data::Histogram(Histogram {
            data_points: vec![HistogramDataPoint {
                time_unix_nano: T,
                bucket_counts: vec![1],
                explicit_bounds: vec![1.0, 2.0],
                ..Default::default()
            }],
            aggregation_temporality: AggregationTemporality::Cumulative as i32,
        }),
    );
    assert!(run(&request(vec![], vec![bad_buckets]), &opts()).unwrap_err().message.contains("bucket counts"));
}

/// An exponential histogram becomes one native histogram series named like a gauge (unit
/// suffix only), with the resource's `job` and `instance`.
#[test]
fn exponential_histograms_become_native_histograms() {
    let p = ExponentialHistogramDataPoint {
        attributes: vec![s("route", "/a")],
        time_unix_nano: T,
        count: 6,
        sum: Some(4.5),
        scale: 1,
        zero_count: 1,
        positive: Some(Buckets { offset: -1, bucket_counts: vec![2, 0, 3] }),
        ..Default::default()
    };
    let exp = metric(
        "rpc.latency",
        "s",
        Data::ExponentialHistogram(ExponentialHistogram { data_points: vec![p], aggregation_temporality: 2 }),
    );
    let body = request(vec![s("service.name", "api")], vec![exp]);
    let batch = decode(&body, &opts(), &mut |_| Ok::<(), ()>(())).map_err(|_| ()).unwrap().unpack().unwrap();
    let series: Vec<_> = batch.series.iter().filter(|x| !x.histograms.is_empty()).collect();
    assert_eq!(series.len(), 1);
    assert_eq!(series[0].labels.to_string(), r#"rpc_latency_seconds{job="api", route="/a"}"#);
    let h = &series[0].histograms[0];
    assert_eq!(h.timestamp_ms, MS);
    assert_eq!((h.histogram.schema, h.histogram.count, h.histogram.sum, h.histogram.zero_count), (1, 6.0, 4.5, 1.0));
    // OTLP buckets -1..=1 are Prometheus buckets 0..=2.
    assert_eq!(h.histogram.positive_spans, vec![crate::histogram::Span { offset: 0, length: 3 }]);
    assert_eq!(h.histogram.positive_buckets, vec![2.0, 0.0, 3.0]);
}
