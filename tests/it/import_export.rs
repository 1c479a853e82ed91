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
