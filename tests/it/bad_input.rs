//! Every bad import gets a 400/413/415 naming the problem, and nothing is written.

use std::io::Write;

use saltdb::http::Limits;
use saltdb::server::ServerConfig;

use crate::common::*;

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    gz.write_all(data).unwrap();
    gz.finish().unwrap()
}

#[test]
fn bad_imports_are_rejected_and_write_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = runtime();
    let limits = Limits { max_request_bytes: 1 << 20, ..Limits::default() };
    let config =
        ServerConfig { limits, ..ServerConfig::new("127.0.0.1:0".parse().unwrap(), storage_config(dir.path())) };
    let server = InProcess::start_with(runtime, config);
    let base = server.url("");
    let good = r#"{"metric":{"__name__":"ok","a":"b"},"values":[1],"timestamps":[1700000000000]}"#;
    assert_eq!(import(&base, good), (204, String::new()));
    // Let the background fsync settle so the file listing is stable.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let before_files = dir_listing(dir.path());
    let before = export(&base, r#"{__name__=~".+"}"#);

    let line =
        |metric: &str, values: &str, ts: &str| format!(r#"{{"metric":{metric},"values":{values},"timestamps":{ts}}}"#);
    let cases: Vec<(&str, String, &str)> = vec![
        ("not JSON", "this is not json".into(), "invalid JSON"),
        ("truncated JSON", r#"{"metric":{"__name__":"x"},"values":[1"#.into(), "invalid JSON"),
        ("no __name__", line(r#"{"a":"b"}"#, "[1]", "[1700000000000]"), "missing metric name"),
        ("empty __name__", line(r#"{"__name__":"","a":"b"}"#, "[1]", "[1700000000000]"), "missing metric name"),
        ("length mismatch", line(r#"{"__name__":"x"}"#, "[1,2]", "[1700000000000]"), "same length"),
        ("empty label name", line(r#"{"__name__":"x","":"c"}"#, "[1]", "[1700000000000]"), "invalid label name"),
        (
            "NUL in label name",
            line(r#"{"__name__":"x","a\u0000b":"c"}"#, "[1]", "[1700000000000]"),
            "invalid label name",
        ),
        ("NUL in value", line(r#"{"__name__":"x","a":"b\u0000c"}"#, "[1]", "[1700000000000]"), "0x00"),
        ("before 1970", line(r#"{"__name__":"x"}"#, "[1]", "[-1]"), "outside the supported range"),
        ("after 2262", line(r#"{"__name__":"x"}"#, "[1]", "[9999999999999999]"), "outside the supported range"),
        ("duplicate label", line(r#"{"__name__":"x","a":"1","a":"2"}"#, "[1]", "[1700000000000]"), "duplicate label"),
        ("string value", line(r#"{"__name__":"x"}"#, r#"["abc"]"#, "[1700000000000]"), "invalid JSON"),
        ("float timestamp", line(r#"{"__name__":"x"}"#, "[1]", "[1.5]"), "invalid JSON"),
        (
            "unknown field",
            r#"{"metric":{"__name__":"x"},"values":[1],"timestamps":[1],"extra":1}"#.into(),
            "unknown field",
        ),
        ("label value not string", line(r#"{"__name__":"x","a":1}"#, "[1]", "[1700000000000]"), "invalid JSON"),
    ];
    for (what, bad, reason) in &cases {
        // The bad line sits between good lines: the good ones must not be written either.
        let body = format!("{good}\n{}\n{bad}\n", good.replace("\"ok\"", "\"partial\""));
        let (status, text) = import(&base, body);
        assert_eq!(status, 400, "{what}: {text}");
        assert!(text.contains("line 3"), "{what}: body must name the line: {text}");
        assert!(text.contains(reason), "{what}: body must say {reason:?}: {text}");
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["errorType"], "bad_data");
    }

    // Oversized body, plain and as a gzip bomb that only expands past the limit.
    // Over the 1 MiB limit but under the 2 MiB drain cap, so the client always reads the 413.
    let big = format!("{}\n", good).repeat((3 << 19) / (good.len() + 1));
    let (status, text) = import(&base, big.clone());
    assert_eq!(status, 413, "{text}");
    let resp = client()
        .post(format!("{base}/api/v1/import"))
        .header("Content-Encoding", "gzip")
        .body(gzip(big.as_bytes()))
        .send()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 413);
    // Corrupt gzip, unknown encoding, unknown parameter.
    let resp = client()
        .post(format!("{base}/api/v1/import"))
        .header("Content-Encoding", "gzip")
        .body("not gzip")
        .send()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 400);
    assert!(resp.text().unwrap().contains("gzip"));
    let resp =
        client().post(format!("{base}/api/v1/import")).header("Content-Encoding", "br").body(good).send().unwrap();
    assert_eq!(resp.status().as_u16(), 415);
    let resp = client().post(format!("{base}/api/v1/import?bogus=1")).body(good).send().unwrap();
    assert_eq!(resp.status().as_u16(), 400);
    assert!(resp.text().unwrap().contains("bogus"));
    // Export errors: missing selector, bad selector, bad time.
    for q in ["", "?match[]=rate(x[5m])", "?match[]=up&start=yesterday", "?match[]={"] {
        let resp = client().get(format!("{base}/api/v1/export{q}")).send().unwrap();
        assert_eq!(resp.status().as_u16(), 400, "export{q}");
    }

    assert_eq!(export(&base, r#"{__name__=~".+"}"#), before, "a rejected request changed the data");
    assert_eq!(dir_listing(dir.path()), before_files, "a rejected request changed the data directory");
    // The server still serves writes.
    assert_eq!(import(&base, good.replace("\"ok\"", "\"after\"")), (204, String::new()));
    assert_eq!(export(&base, "after").len(), 1);
    server.stop();
}
