//! Import 1,000 series x 100 samples, export them back equal, restart, export again.

use crate::common::*;

#[test]
fn import_export_round_trip_survives_restart() {
    let dir = tempfile::tempdir().unwrap();
    round_trip(dir.path(), None);
}

/// The same on the ClickHouse backend (two real shards); the restart is a new node.
#[test]
fn import_export_round_trip_on_clickhouse() {
    let test = "import_export::import_export_round_trip_on_clickhouse";
    if !crate::peers::installed("clickhouse-server", test, "clickhouse-server") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let shards = crate::clickhouse_cluster::start(&dir.path().join("clickhouse"), 2);
    round_trip(dir.path(), Some(shards.iter().map(|s| s.url.clone()).collect()));
}

/// Imports 1,000 series of 100 samples in two requests, exports them (all, one series, a time
/// range), restarts the server and exports again.
fn round_trip(dir: &std::path::Path, clickhouse: Option<Vec<String>>) {
    let t0 = 1_700_000_000_000;
    let (body, expected) = dataset(1000, 100, t0, "rt");
    let start = || {
        let mut config = saltdb::server::ServerConfig::new("127.0.0.1:0".parse().unwrap(), storage_config(dir));
        config.clickhouse = clickhouse.clone().map(saltdb::clickhouse::ClickHouseConfig::new);
        InProcess::start_with(crate::common::runtime(), config)
    };

    let server = start();
    let base = server.url("");
    // Two requests, so ids are allocated across group commits too.
    let split = body[..body.len() / 2].rfind('\n').unwrap() + 1;
    let (a, b) = body.split_at(split);
    assert_eq!(import(&base, a.to_owned()), (204, String::new()));
    assert_eq!(import(&base, b.to_owned()), (204, String::new()));

    let got = export(&base, r#"{__name__=~"rt_.*"}"#);
    assert_eq!(got.len(), 1000);
    assert_eq!(got, expected, "export differs from import");

    // A narrower selector and time range.
    let one = export(&base, r#"rt_metric_0{host="host-0"}"#);
    assert_eq!(one.len(), 1);
    let resp = client()
        .get(format!("{base}/api/v1/export"))
        .query(&[
            ("match[]", r#"{host="host-1"}"#),
            ("start", &((t0 + 15_000) as f64 / 1000.0).to_string()),
            ("end", "2023-11-14T22:14:05Z"),
        ])
        .send()
        .unwrap();
    let ranged = parse_lines(&resp.text().unwrap());
    let samples = ranged.values().next().unwrap();
    assert_eq!(samples.iter().map(|s| s.0).collect::<Vec<_>>(), vec![t0 + 15_000, t0 + 30_000, t0 + 45_000]);

    server.stop();
    let server = start();
    let again = export(&server.url(""), r#"{__name__=~"rt_.*"}"#);
    assert_eq!(again, expected, "export after restart differs");
    server.stop();
}

#[test]
fn gzip_import_special_values_and_last_write_wins() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let server = InProcess::start(storage_config(dir.path()));
    let base = server.url("");
    let body = concat!(
        r#"{"metric":{"__name__":"sv","k":"v"},"values":[1,"NaN","+Inf","-Inf","stale",-0.0],"timestamps":[1000,2000,3000,4000,5000,6000]}"#,
        "\n",
        r#"{"metric":{"k":"v","__name__":"sv"},"values":[42],"timestamps":[1000]}"#,
        "\n"
    );
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(body.as_bytes()).unwrap();
    let resp = client()
        .post(format!("{base}/api/v1/import"))
        .header("Content-Encoding", "gzip")
        .body(gz.finish().unwrap())
        .send()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 204);
    let got = export(&base, "sv");
    let samples = got.values().next().unwrap();
    assert_eq!(samples[0], (1000, 42f64.to_bits()), "last write wins");
    assert!(f64::from_bits(samples[1].1).is_nan());
    assert_eq!(samples[2].1, f64::INFINITY.to_bits());
    assert_eq!(samples[3].1, f64::NEG_INFINITY.to_bits());
    assert_eq!(samples[4].1, saltdb::sample::STALE_NAN_BITS, "stale marker bit-exact");
    assert_eq!(samples[5].1, (-0.0f64).to_bits(), "negative zero kept");
    server.stop();
}

#[test]
fn health_endpoints_answer() {
    let dir = tempfile::tempdir().unwrap();
    let server = InProcess::start(storage_config(dir.path()));
    for path in ["/-/healthy", "/-/ready"] {
        let resp = client().get(server.url(path)).send().unwrap();
        assert_eq!(resp.status().as_u16(), 200, "{path}");
    }
    let resp = client().get(server.url("/no/such/thing")).send().unwrap();
    assert_eq!(resp.status().as_u16(), 404);
    let v: serde_json::Value = serde_json::from_str(&resp.text().unwrap()).unwrap();
    assert_eq!(v["status"], "error");
    server.stop();
}

/// Native histograms through JSON lines: imported (integer and float, exponential and custom
/// buckets, reset hints, a stale marker, a series with floats too), answered by PromQL, exported,
/// imported into a second server and exported from it identically, also after a restart; a bad
/// histogram refuses its whole request.
#[test]
fn native_histograms_import_export_round_trip() {
    let t0 = 1_700_000_000_000i64;
    let body = format!(
        "{}\n{}\n{}\n",
        format_args!(
            r#"{{"metric":{{"__name__":"hx","job":"a"}},"histograms":[{{"schema":3,"zero_threshold":0.001,"zero_count":1,"count":6,"sum":12.5,"positive_spans":[[-2,2],[1,1]],"positive_buckets":[1,2,1],"negative_spans":[[0,1]],"negative_buckets":[1]}},{{"schema":3,"zero_threshold":0.001,"zero_count":2,"count":9,"sum":20,"positive_spans":[[-2,2],[1,1]],"positive_buckets":[2,3,1],"negative_spans":[[0,1]],"negative_buckets":[1],"reset_hint":"not_reset"}},{{"schema":3,"count":0,"sum":"stale"}}],"timestamps":[{},{},{}]}}"#,
            t0,
            t0 + 15_000,
            t0 + 30_000
        ),
        format_args!(
            r#"{{"metric":{{"__name__":"hy","job":"b"}},"histograms":[{{"schema":-53,"count":3.5,"sum":7.25,"positive_spans":[[0,3]],"positive_buckets":[1.5,1,1],"custom_values":[0.5,1,2.5],"reset_hint":"gauge","float":true}}],"timestamps":[{}]}}"#,
            t0 + 60_000
        ),
        format_args!(r#"{{"metric":{{"__name__":"hy","job":"b"}},"values":[4],"timestamps":[{}]}}"#, t0),
    );
    let dir = tempfile::tempdir().unwrap();
    let server = InProcess::start(storage_config(&dir.path().join("a")));
    let base = server.url("");
    assert_eq!(import(&base, body), (204, String::new()));

    let at = |expr: &str, t: i64| {
        let time = (t as f64 / 1000.0).to_string();
        let resp = client().get(format!("{base}/api/v1/query")).query(&[("query", expr), ("time", &time)]).send();
        let v: serde_json::Value = resp.unwrap().text().unwrap().parse().unwrap();
        assert_eq!(v["status"], "success", "{expr}: {v}");
        v["data"]["result"].clone()
    };
    assert_eq!(at("histogram_count(hx)", t0 + 15_000)[0]["value"][1], "9");
    assert_eq!(at("histogram_sum(hy)", t0 + 60_000)[0]["value"][1], "7.25");
    assert_eq!(at("hx", t0 + 30_000).as_array().map(Vec::len), Some(0), "the stale marker ends the series");
    assert_eq!(at("hy", t0)[0]["value"][1], "4", "the same series' float");

    let exported = export_text(&base, r#"{__name__=~"h."}"#);
    let lines = sorted_lines(&exported);
    assert_eq!(lines.len(), 3, "{exported}");
    assert!(exported.contains(r#""reset_hint":"not_reset""#) && exported.contains(r#""float":true"#), "{exported}");
    assert!(exported.contains(r#""sum":"stale""#), "{exported}");

    // Into a second server and out again: the same lines.
    let other = InProcess::start(storage_config(&dir.path().join("b")));
    assert_eq!(import(&other.url(""), exported.clone()), (204, String::new()));
    assert_eq!(sorted_lines(&export_text(&other.url(""), r#"{__name__=~"h."}"#)), lines);
    other.stop();
    server.stop();
    let server = InProcess::start(storage_config(&dir.path().join("a")));
    assert_eq!(sorted_lines(&export_text(&server.url(""), r#"{__name__=~"h."}"#)), lines, "after a restart");

    // A bad histogram refuses the whole request, naming its line and the rule.
    let good = format!(r#"{{"metric":{{"__name__":"hz"}},"values":[1],"timestamps":[{t0}]}}"#);
    let bad = format!(
        r#"{{"metric":{{"__name__":"hz2"}},"histograms":[{{"schema":0,"count":1,"sum":1,"positive_spans":[[0,2]],"positive_buckets":[1]}}],"timestamps":[{t0}]}}"#
    );
    let (status, text) = import(&server.url(""), format!("{good}\n{bad}\n"));
    assert_eq!(status, 400, "{text}");
    assert!(
        text.contains("line 2") && text.contains("histogram number 1") && text.contains("spans need 2 buckets"),
        "{text}"
    );
    let both = format!(r#"{{"metric":{{"__name__":"hz3"}},"values":[1],"histograms":[],"timestamps":[{t0}]}}"#);
    let (status, text) = import(&server.url(""), both);
    assert!(status == 400 && text.contains("not both"), "{status} {text}");
    assert!(
        export_text(&server.url(""), r#"{__name__=~"hz.*"}"#).is_empty(),
        "nothing of a refused request is written"
    );
    server.stop();
}

fn export_text(base: &str, selector: &str) -> String {
    let resp = client().get(format!("{base}/api/v1/export")).query(&[("match[]", selector)]).send().unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    resp.text().unwrap()
}

fn sorted_lines(text: &str) -> Vec<String> {
    let mut v: Vec<String> = text.lines().filter(|l| !l.is_empty()).map(str::to_owned).collect();
    v.sort();
    v
}
