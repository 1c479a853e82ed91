//! OTLP metrics from the real OpenTelemetry Python SDK (`opentelemetry-sdk` with its OTLP/HTTP
//! protobuf exporter, from PyPI into a virtualenv kept under the target directory) into saltdb,
//! read back through the Prometheus API under the names Prometheus' translation gives them,
//! worked out by hand: units, `_total`, attribute names, `job`/`instance` and `target_info`.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

use crate::common::*;

const TEST: &str = "otlp::the_opentelemetry_python_sdk_sends_metrics";
const PACKAGES: [&str; 2] = ["opentelemetry-sdk", "opentelemetry-exporter-otlp-proto-http"];

/// A virtualenv with the SDK, created on first use (`SALTDB_OTEL_VENV` overrides the place).
fn venv() -> Result<PathBuf, String> {
    let dir = std::env::var_os("SALTDB_OTEL_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("..").join("otel-venv"));
    let python = dir.join("bin/python");
    let ready = |p: &PathBuf| {
        Command::new(p)
            .args(["-c", "import opentelemetry.sdk.metrics, opentelemetry.exporter.otlp.proto.http.metric_exporter"])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if ready(&python) {
        return Ok(python);
    }
    let made = Command::new("python3").args(["-m", "venv"]).arg(&dir).output().map_err(|e| format!("python3: {e}"))?;
    if !made.status.success() {
        return Err(format!("python3 -m venv failed: {}", String::from_utf8_lossy(&made.stderr)));
    }
    let pip = Command::new(&python)
        .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check"])
        .args(PACKAGES)
        .output()
        .map_err(|e| format!("pip: {e}"))?;
    if !pip.status.success() || !ready(&python) {
        return Err(format!("pip install {} failed: {}", PACKAGES.join(" "), String::from_utf8_lossy(&pip.stderr)));
    }
    Ok(python)
}

const SCRIPT: &str = r#"
import sys
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.metrics import Observation
from opentelemetry.sdk.metrics.view import View, ExponentialBucketHistogramAggregation

exporter = OTLPMetricExporter(endpoint=sys.argv[1])
reader = PeriodicExportingMetricReader(exporter, export_interval_millis=3600000)
resource = Resource.create({"service.name": "shop-api", "service.namespace": "shop",
                            "service.instance.id": "i-1", "host.name": "h1"})
# rpc.latency gets the exponential histogram aggregation; the other instruments keep their default.
exponential = View(instrument_name="rpc.latency", aggregation=ExponentialBucketHistogramAggregation(max_size=160, max_scale=20))
provider = MeterProvider(resource=resource, metric_readers=[reader], views=[exponential])
meter = provider.get_meter("saltdb-test")
meter.create_counter("http.requests", unit="1").add(5, {"http.method": "GET"})
meter.create_up_down_counter("queue.items", unit="{items}").add(3)
duration = meter.create_histogram("http.server.duration", unit="ms")
duration.record(3, {"http.route": "/a"})
duration.record(7, {"http.route": "/a"})
meter.create_observable_gauge("memory.usage", callbacks=[lambda options: [Observation(1024)]], unit="By")
latency = meter.create_histogram("rpc.latency", unit="s")
for v in (0.002, 0.004, 0.004, 0.1):
    latency.record(v, {"rpc.method": "Get"})
provider.force_flush()
provider.shutdown()
"#;

fn value(base: &str, query: &str) -> Vec<(Value, String)> {
    let answer = get_json(&format!("{base}/api/v1/query?query={}", urlencode(query)));
    assert_eq!(answer["status"], "success", "{query}: {answer}");
    answer["data"]["result"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["metric"].clone(), r["value"][1].as_str().unwrap_or_default().to_owned()))
        .collect()
}

/// `m` without `__name__`, as functions answer.
fn with_no_name(mut m: Value) -> Value {
    if let Some(o) = m.as_object_mut() {
        o.remove("__name__");
    }
    m
}

fn urlencode(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

#[test]
fn the_opentelemetry_python_sdk_sends_metrics() {
    let python = match venv() {
        Ok(p) => p,
        Err(why) => {
            crate::skip::skip(TEST, &why, "install python3 and python3-venv with network access to PyPI");
            return;
        }
    };
    let dir = tempfile::tempdir().unwrap();
    let saltdb = InProcess::start(saltdb::storage::StorageConfig::new(dir.path().to_path_buf()));
    let base = saltdb.url("");
    let out = Command::new(&python)
        .args(["-c", SCRIPT, &format!("{base}/opentelemetry/v1/metrics")])
        .output()
        .expect("run the SDK script");
    assert!(
        out.status.success(),
        "the SDK failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.to_lowercase().contains("failed to export"), "{stderr}");

    let who = serde_json::json!({"job": "shop/shop-api", "instance": "i-1"});
    let with = |name: &str, extra: &[(&str, &str)]| {
        let mut m = who.clone();
        m["__name__"] = Value::String(name.into());
        for (k, v) in extra {
            m[*k] = Value::String((*v).into());
        }
        m
    };
    assert_eq!(
        value(&base, "http_requests_total"),
        vec![(with("http_requests_total", &[("http_method", "GET")]), "5".into())]
    );
    assert_eq!(value(&base, "queue_items"), vec![(with("queue_items", &[]), "3".into())]);
    assert_eq!(value(&base, "memory_usage_bytes"), vec![(with("memory_usage_bytes", &[]), "1024".into())]);
    let route = [("http_route", "/a")];
    assert_eq!(
        value(&base, "http_server_duration_milliseconds_count"),
        vec![(with("http_server_duration_milliseconds_count", &route), "2".into())]
    );
    assert_eq!(
        value(&base, "http_server_duration_milliseconds_sum"),
        vec![(with("http_server_duration_milliseconds_sum", &route), "10".into())]
    );
    let buckets: std::collections::BTreeMap<String, String> = value(&base, "http_server_duration_milliseconds_bucket")
        .into_iter()
        .map(|(m, v)| (m["le"].as_str().unwrap_or_default().to_owned(), v))
        .collect();
    assert_eq!(buckets.get("0").map(String::as_str), Some("0"), "{buckets:?}");
    assert_eq!(buckets.get("5").map(String::as_str), Some("1"), "{buckets:?}");
    assert_eq!(buckets.get("10").map(String::as_str), Some("2"), "{buckets:?}");
    assert_eq!(buckets.get("+Inf").map(String::as_str), Some("2"), "{buckets:?}");
    let q = value(&base, "histogram_quantile(0.5, http_server_duration_milliseconds_bucket)");
    assert_eq!(q.len(), 1, "{q:?}");
    // The exponential histogram is a native histogram (scale 20 merged down to schema 8).
    let method = [("rpc_method", "Get")];
    assert_eq!(
        value(&base, "histogram_count(rpc_latency_seconds)"),
        vec![(with_no_name(with("x", &method)), "4".into())]
    );
    let sum: f64 = value(&base, "histogram_sum(rpc_latency_seconds)")[0].1.parse().unwrap();
    assert!((sum - 0.11).abs() < 1e-9, "{sum}");
    let median: f64 = value(&base, "histogram_quantile(0.5, rpc_latency_seconds)")[0].1.parse().unwrap();
    // Schema 8 buckets are 0.27% wide: the median lies in the bucket holding 0.004.
    assert!((median - 0.004).abs() < 0.004 * 0.003, "{median}");
    let raw = get_json(&format!("{base}/api/v1/query?query=rpc_latency_seconds"));
    assert_eq!(raw["data"]["result"][0]["histogram"][1]["count"], "4", "{raw}");
    // target_info carries the other resource attributes, the SDK's own included.
    let info = value(&base, "target_info");
    assert_eq!(info.len(), 1, "{info:?}");
    let (labels, one) = &info[0];
    assert_eq!(one, "1");
    assert_eq!(labels["host_name"], "h1");
    assert_eq!(labels["telemetry_sdk_language"], "python");
    assert_eq!(labels["job"], "shop/shop-api");
    assert_eq!(labels["instance"], "i-1");
    saltdb.stop();
}
