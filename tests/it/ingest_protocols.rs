//! The ingest doors beside remote-write and JSON import, driven over real HTTP: InfluxDB line
//! protocol (`/write`, `/api/v2/write`, gzip, the `influx` CLI of InfluxDB 1.6), OpenTSDB
//! `/api/put` with its `summary`/`details` answers, and Prometheus text / OpenMetrics import. The
//! same bodies go into VictoriaMetrics 1.79, and the series, labels, values and timestamps must
//! match except for the differences docs/ingest.md lists (string fields, bad lines refused rather
//! than skipped); label names compare as sent.

use std::collections::BTreeMap;
use std::io::Write;

use crate::common::*;
use crate::peers::{free_port, VictoriaMetrics};

/// Everything in a store.
fn everything(base: &str) -> Exported {
    export(base, r#"{__name__=~".+"}"#)
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
}

fn gzip(body: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(body).unwrap();
    e.finish().unwrap()
}

/// A second at the start of the last hour (inside every retention), in seconds.
fn recent_s() -> i64 {
    recent_ms() / 1000
}

#[test]
fn line_protocol_v1_v2_gzip_and_bad_lines() {
    let dir = tempfile::tempdir().unwrap();
    let saltdb = InProcess::start(saltdb::storage::StorageConfig::new(dir.path().to_path_buf()));
    let t = recent_s();
    let body = format!(
        "cpu,host=a,dc-id=x usage=1.5,idle=2i,up=true,msg=\"hello, world\" {t}000000000\ncpu,host=b usage=0.5 {t}000000000\n"
    );
    let (status, _, text) = post(&saltdb.url("/write?db=prod"), &[], body.into_bytes());
    assert_eq!(status, 204, "{text}");
    let v2 = format!("mem,host=a free=7u {}", t + 15);
    let (status, _, text) = post(
        &saltdb.url("/api/v2/write?org=o&bucket=b&precision=s"),
        &[("Content-Encoding", "gzip")],
        gzip(v2.as_bytes()),
    );
    assert_eq!(status, 204, "{text}");
    let got = everything(&saltdb.url(""));
    let ms = t * 1000;
    let expected: Exported = [
        (
            labels(&[("__name__", "cpu_usage"), ("host", "a"), ("dc-id", "x"), ("db", "prod")]),
            vec![(ms, 1.5f64.to_bits())],
        ),
        (
            labels(&[("__name__", "cpu_idle"), ("host", "a"), ("dc-id", "x"), ("db", "prod")]),
            vec![(ms, 2f64.to_bits())],
        ),
        (labels(&[("__name__", "cpu_up"), ("host", "a"), ("dc-id", "x"), ("db", "prod")]), vec![(ms, 1f64.to_bits())]),
        (labels(&[("__name__", "cpu_usage"), ("host", "b"), ("db", "prod")]), vec![(ms, 0.5f64.to_bits())]),
        (labels(&[("__name__", "mem_free"), ("host", "a")]), vec![(ms + 15_000, 7f64.to_bits())]),
    ]
    .into_iter()
    .collect();
    assert_eq!(got, expected);
    let metrics = client().get(saltdb.url("/metrics")).send().unwrap().text().unwrap();
    assert!(metrics.contains(r#"saltdb_samples_ingested_total{protocol="influx"} 5"#), "{metrics}");
    assert!(metrics.contains(r#"saltdb_samples_rejected_total{protocol="influx",reason="string_field"} 1"#));

    // A bad line refuses the whole body, naming the line; nothing of it is written.
    let bad = format!("good v=1 {t}000000000\nbad v=oops {t}000000000\n");
    let (status, _, text) = post(&saltdb.url("/write"), &[], bad.into_bytes());
    assert_eq!(status, 400);
    assert!(text.contains("line 2") && text.contains("invalid field value"), "{text}");
    assert!(export(&saltdb.url(""), "good_v").is_empty());
    for (url, why) in [("/write?precision=x", "precision"), ("/write?bogus=1", "bogus"), ("/api/v2/write?db=x", "db")] {
        let (status, _, text) = post(&saltdb.url(url), &[], b"m v=1".to_vec());
        assert_eq!(status, 400, "{url}");
        assert!(text.contains(why), "{url}: {text}");
    }
    let ping = client().get(saltdb.url("/ping")).send().unwrap();
    assert_eq!(ping.status().as_u16(), 204);
    assert!(ping.headers().contains_key("X-Influxdb-Version"));
    saltdb.stop();
}

#[test]
fn opentsdb_put_answers_as_opentsdb() {
    let dir = tempfile::tempdir().unwrap();
    let saltdb = InProcess::start(saltdb::storage::StorageConfig::new(dir.path().to_path_buf()));
    let t = recent_s();
    let one = format!(r#"{{"metric":"sys.cpu.nice","timestamp":{t},"value":18,"tags":{{"host":"web01"}}}}"#);
    let (status, _, text) = post(&saltdb.url("/api/put"), &[], one.into_bytes());
    assert_eq!(status, 204, "{text}");
    let many = format!(
        r#"[{{"metric":"sys.cpu.user","timestamp":{t}500,"value":"1.5","tags":{{"host":"web01","dc-id":"lga"}}}},{{"metric":"sys.cpu.user","timestamp":{t},"value":2,"tags":{{"host":"web02"}}}}]"#
    );
    let (status, _, text) = post(&saltdb.url("/api/put?details"), &[], many.into_bytes());
    assert_eq!(status, 200);
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&text).unwrap(),
        serde_json::json!({"errors": [], "failed": 0, "success": 2})
    );
    let got = everything(&saltdb.url(""));
    let expected: Exported = [
        (labels(&[("__name__", "sys.cpu.nice"), ("host", "web01")]), vec![(t * 1000, 18f64.to_bits())]),
        (
            labels(&[("__name__", "sys.cpu.user"), ("host", "web01"), ("dc-id", "lga")]),
            vec![(t * 1000 + 500, 1.5f64.to_bits())],
        ),
        (labels(&[("__name__", "sys.cpu.user"), ("host", "web02")]), vec![(t * 1000, 2f64.to_bits())]),
    ]
    .into_iter()
    .collect();
    assert_eq!(got, expected);

    // A bad point refuses all of them; summary and details say so in OpenTSDB's shapes.
    let bad = format!(
        r#"[{{"metric":"x.ok","timestamp":{t},"value":1}},{{"metric":"x.bad","timestamp":{t},"value":"NaN?"}}]"#
    );
    let (status, _, text) = post(&saltdb.url("/api/put?summary"), &[], bad.clone().into_bytes());
    assert_eq!(status, 400);
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&text).unwrap(),
        serde_json::json!({"failed": 2, "success": 0})
    );
    let (status, _, text) = post(&saltdb.url("/api/put?details"), &[], bad.clone().into_bytes());
    assert_eq!(status, 400);
    let answer: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(answer["failed"], 2);
    assert_eq!(answer["errors"][0]["datapoint"]["metric"], "x.bad");
    assert!(answer["errors"][0]["error"].as_str().unwrap().contains("point 2"), "{answer}");
    let (status, _, text) = post(&saltdb.url("/api/put"), &[], bad.into_bytes());
    assert_eq!(status, 400);
    assert!(text.contains("point 2") && text.contains("not a finite number"), "{text}");
    assert!(export(&saltdb.url(""), r#"{__name__=~"x.*"}"#).is_empty());
    saltdb.stop();
}

/// Points of one series sent back to back go into one series of the batch (issue 18's ingest
/// speed-ups): what is stored is what separate points give, in any order, the later point
/// winning on an equal timestamp, for OpenTSDB (its scanner and its serde path) and line
/// protocol alike.
#[test]
fn repeated_points_of_a_series_are_stored_as_sent() {
    let dir = tempfile::tempdir().unwrap();
    let saltdb = InProcess::start(saltdb::storage::StorageConfig::new(dir.path().to_path_buf()));
    let t = recent_s();
    let points = [("1", t + 2, 1), ("1", t, 2), ("1", t + 2, 3), ("2", t, 4), ("1", t + 1, 5)];
    let expected = |name: &str| -> Exported {
        let ms = |s: i64| s * 1000;
        [
            (
                labels(&[("__name__", name), ("h", "1")]),
                vec![(ms(t), 2f64.to_bits()), (ms(t + 1), 5f64.to_bits()), (ms(t + 2), 3f64.to_bits())],
            ),
            (labels(&[("__name__", name), ("h", "2")]), vec![(ms(t), 4f64.to_bits())]),
        ]
        .into_iter()
        .collect()
    };
    for (metric, escaped) in [("scanned", "scanned"), ("serde", "s\\u0065rde")] {
        let body: Vec<String> = points
            .iter()
            .map(|(h, ts, v)| format!(r#"{{"metric":"{escaped}","timestamp":{ts},"value":{v},"tags":{{"h":"{h}"}}}}"#))
            .collect();
        let (status, _, text) = post(&saltdb.url("/api/put"), &[], format!("[{}]", body.join(",")).into_bytes());
        assert_eq!(status, 204, "{text}");
        assert_eq!(export(&saltdb.url(""), &format!("{{__name__={metric:?}}}")), expected(metric));
    }
    let lines: Vec<String> = points.iter().map(|(h, ts, v)| format!("lp,h={h} value={v} {ts}")).collect();
    let (status, _, text) = post(&saltdb.url("/write?precision=s"), &[], lines.join("\n").into_bytes());
    assert_eq!(status, 204, "{text}");
    assert_eq!(export(&saltdb.url(""), r#"{__name__="lp_value"}"#), expected("lp_value"));
    saltdb.stop();
}

#[test]
fn prometheus_text_and_openmetrics_import() {
    let dir = tempfile::tempdir().unwrap();
    let saltdb = InProcess::start(saltdb::storage::StorageConfig::new(dir.path().to_path_buf()));
    let ms = recent_ms();
    let body = format!(
        "# HELP http_requests_total Requests.\n# TYPE http_requests_total counter\nhttp_requests_total{{method=\"post\",code=\"200\"}} 1027 {ms}\nhttp_requests_total{{method=\"post\",code=\"400\"}} 3\n"
    );
    let at = ms / 1000 - 60;
    let (status, _, text) =
        post(&saltdb.url(&format!("/api/v1/import/prometheus?timestamp={at}")), &[], body.into_bytes());
    assert_eq!(status, 204, "{text}");
    let om = format!("# TYPE jobs counter\njobs_total{{q=\"a\"}} 5 {}.250 # {{trace_id=\"x\"}} 1\n# EOF\n", ms / 1000);
    let (status, _, text) = post(
        &saltdb.url("/api/v1/import/prometheus"),
        &[("Content-Type", "application/openmetrics-text; version=1.0.0; charset=utf-8")],
        om.into_bytes(),
    );
    assert_eq!(status, 204, "{text}");
    let expected: Exported = [
        (
            labels(&[("__name__", "http_requests_total"), ("method", "post"), ("code", "200")]),
            vec![(ms, 1027f64.to_bits())],
        ),
        (
            labels(&[("__name__", "http_requests_total"), ("method", "post"), ("code", "400")]),
            vec![(at * 1000, 3f64.to_bits())],
        ),
        (labels(&[("__name__", "jobs_total"), ("q", "a")]), vec![(ms + 250, 5f64.to_bits())]),
    ]
    .into_iter()
    .collect();
    assert_eq!(everything(&saltdb.url("")), expected);
    let (status, _, text) = post(&saltdb.url("/api/v1/import/prometheus"), &[], b"ok 1\nbad{x=1} 2\n".to_vec());
    assert_eq!(status, 400);
    assert!(text.contains("line 2") && text.contains("not quoted"), "{text}");
    saltdb.stop();
}

#[test]
fn the_influx_cli_writes_line_protocol() {
    const TEST: &str = "ingest_protocols::the_influx_cli_writes_line_protocol";
    if !crate::peers::installed("influx", TEST, "influxdb-client") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let saltdb = InProcess::start(saltdb::storage::StorageConfig::new(dir.path().to_path_buf()));
    let addr: std::net::SocketAddr =
        saltdb.url("").trim_start_matches("http://").trim_end_matches('/').parse().unwrap();
    let t = recent_s();
    let out = std::process::Command::new("influx")
        .args(["-host", "127.0.0.1", "-port", &addr.port().to_string(), "-database", "telegraf", "-precision", "s"])
        .args(["-execute", &format!("INSERT weather,location=us-midwest temperature=82,humidity=71i {t}")])
        .output()
        .expect("run influx");
    assert!(
        out.status.success(),
        "influx failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let got = everything(&saltdb.url(""));
    let expected: Exported = [
        (
            labels(&[("__name__", "weather_temperature"), ("location", "us-midwest"), ("db", "telegraf")]),
            vec![(t * 1000, 82f64.to_bits())],
        ),
        (
            labels(&[("__name__", "weather_humidity"), ("location", "us-midwest"), ("db", "telegraf")]),
            vec![(t * 1000, 71f64.to_bits())],
        ),
    ]
    .into_iter()
    .collect();
    assert_eq!(got, expected);
    // And it reads back through the Prometheus API as a dashboard would.
    let q = get_json(&saltdb.url(&format!("/api/v1/query?query=weather_temperature&time={t}")));
    assert_eq!(q["data"]["result"][0]["value"][1], "82");
    saltdb.stop();
}

/// The same bodies into VictoriaMetrics 1.79 and saltdb give the same series, except for the
/// documented differences, applied to VictoriaMetrics' answer here.
#[test]
fn the_same_bodies_as_victoriametrics() {
    const TEST: &str = "ingest_protocols::the_same_bodies_as_victoriametrics";
    if !crate::peers::installed("victoria-metrics", TEST, "victoria-metrics") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let tsdb_port = free_port();
    let vm = VictoriaMetrics::start_with(dir.path(), &[format!("-opentsdbHTTPListenAddr=127.0.0.1:{tsdb_port}")]);
    let saltdb = InProcess::start(saltdb::storage::StorageConfig::new(dir.path().join("saltdb")));
    let base = saltdb.url("");
    let t = recent_s();
    let influx = format!(
        "cpu,host=a,region=eu usage=1.5,idle=2i,total=3u,up=true,down=F,note=\"a string\" {t}000000000\n\
         disk\\ io,dev=sd\\,a,path=/var reads=10i,writes=2.25 {t}500000000\n\
         ,host=c value=4 {t}000000000\n\
         net,iface=eth0,dc-id=x rx=1e3 {}000000000\n\
         names,tag\\,x=1,tag_x=2,service.name=a,名前=x v=1 {t}000000000\n",
        t + 10
    );
    let tsdb = format!(
        r#"[{{"metric":"sys.cpu.user","timestamp":{t},"value":42.5,"tags":{{"host":"web01","dc":"lga","dc-id":"l","名前":"x"}}}},{{"metric":"sys.mem","timestamp":{t}250,"value":"7","tags":{{"host":"web02"}}}}]"#
    );
    let text = format!(
        "# TYPE req counter\nreq_total{{code=\"200\",path=\"/a b\"}} 10 {ms}\nreq_total{{code=\"500\",path=\"/x\\\"y\"}} 1.5e2 {ms}\nup{{job=\"n\"}} 1 {ms}\n",
        ms = t * 1000
    );
    for (target, tsdb_url) in
        [(&vm.base, format!("http://127.0.0.1:{tsdb_port}/api/put")), (&base, format!("{base}/api/put"))]
    {
        let (s, _, b) = post(&format!("{target}/write?db=mydb"), &[], influx.clone().into_bytes());
        assert_eq!(s, 204, "{target} /write: {b}");
        let (s, _, b) = post(&tsdb_url, &[], tsdb.clone().into_bytes());
        assert!(s == 204 || s == 200, "{tsdb_url}: {s} {b}");
        let (s, _, b) = post(&format!("{target}/api/v1/import/prometheus"), &[], text.clone().into_bytes());
        assert_eq!(s, 204, "{target} prometheus text: {b}");
    }
    vm.flush();
    let mut expected = Exported::new();
    // VictoriaMetrics' answer arrives within a few seconds of the flush.
    for _ in 0..50 {
        expected = everything(&vm.base);
        if expected.len() >= 16 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    // The documented difference: VictoriaMetrics stores string fields as 0 (saltdb skips them).
    // Label names compare as sent (`tag,x` beside `tag_x`, `dc-id`, `service.name`, `名前`).
    let expected: Exported =
        expected.into_iter().filter(|(l, _)| l.get("__name__").map(String::as_str) != Some("cpu_note")).collect();
    let got = everything(&base);
    assert_eq!(got.len(), 15, "{got:#?}");
    assert!(got.keys().any(|l| l.get("tag,x").is_some() && l.get("名前").is_some()), "{got:#?}");
    assert_eq!(got, expected);
    saltdb.stop();
}
