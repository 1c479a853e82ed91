//! `/api/v1/series`, `/api/v1/labels`, `/api/v1/label/<name>/values`, buildinfo: shapes,
//! time ranges, limits and errors, sent the way Grafana and promtool send them.

use serde_json::Value;

use crate::common::*;

fn json(resp: reqwest::blocking::Response) -> (u16, Value) {
    let status = resp.status().as_u16();
    (status, serde_json::from_str(&resp.text().unwrap()).unwrap())
}

#[test]
fn series_and_label_endpoints() {
    let dir = tempfile::tempdir().unwrap();
    let server = InProcess::start(storage_config(dir.path()));
    let base = server.url("");
    let t = 1_700_000_000_000i64;
    let day = 86_400_000i64;
    let body = [
        serde_json::json!({"metric":{"__name__":"up","job":"api","instance":"a"},"values":[1],"timestamps":[t]}),
        serde_json::json!({"metric":{"__name__":"up","job":"api","instance":"b"},"values":[1],"timestamps":[t]}),
        serde_json::json!({"metric":{"__name__":"up","job":"db","my_label":"x"},"values":[1],"timestamps":[t + 2 * day]}),
    ]
    .iter()
    .map(|l| l.to_string() + "\n")
    .collect::<String>();
    assert_eq!(import(&base, body), (204, String::new()));
    let secs = |ms: i64| (ms as f64 / 1000.0).to_string();
    let c = client();

    // series, GET with a time range covering only the first day.
    let (s, v) = json(
        c.get(format!("{base}/api/v1/series"))
            .query(&[("match[]", "up"), ("start", &secs(t - 1000)), ("end", &secs(t + 1000))])
            .send()
            .unwrap(),
    );
    assert_eq!(s, 200);
    assert_eq!(v["status"], "success");
    assert_eq!(v["data"].as_array().unwrap().len(), 2);
    assert_eq!(v["data"][0], serde_json::json!({"__name__":"up","instance":"a","job":"api"}));

    // labels, POST form like Grafana.
    let (s, v) = json(
        c.post(format!("{base}/api/v1/labels"))
            .form(&[("match[]", r#"{job="db"}"#), ("start", &secs(t)), ("end", &secs(t + 3 * day))])
            .send()
            .unwrap(),
    );
    assert_eq!(s, 200);
    assert_eq!(v["data"], serde_json::json!(["__name__", "job", "my_label"]));

    // label values, time-restricted, with limit and its warning.
    let (_, v) = json(
        c.get(format!("{base}/api/v1/label/instance/values"))
            .query(&[("start", &secs(t - day)), ("end", &secs(t + day))])
            .send()
            .unwrap(),
    );
    assert_eq!(v["data"], serde_json::json!(["a", "b"]));
    let (_, v) = json(
        c.get(format!("{base}/api/v1/label/job/values"))
            .query(&[("start", &secs(t + day)), ("end", &secs(t + 3 * day))])
            .send()
            .unwrap(),
    );
    assert_eq!(v["data"], serde_json::json!(["db"]));
    let (_, v) = json(c.get(format!("{base}/api/v1/label/instance/values?limit=1")).send().unwrap());
    assert_eq!(v["data"], serde_json::json!(["a"]));
    assert_eq!(v["warnings"][0], "results truncated due to limit");
    // UTF-8-escaped label name, as Grafana sends it.
    let (_, v) = json(c.get(format!("{base}/api/v1/label/U__my__label/values")).send().unwrap());
    assert_eq!(v["data"], serde_json::json!(["x"]));

    let (s, v) = json(c.get(format!("{base}/api/v1/status/buildinfo")).send().unwrap());
    assert_eq!(s, 200);
    assert!(v["data"]["version"].is_string() && v["data"]["features"].is_object());

    // Errors: Prometheus' envelope with bad_data.
    for (path, why) in [
        ("/api/v1/series", "no match[]"),
        ("/api/v1/series?match[]=up&limit=-1", "limit"),
        ("/api/v1/series?match[]=up&start=5&end=1", "end timestamp"),
        ("/api/v1/label/U__a_zz_/values", "invalid label name"),
        ("/api/v1/series?match[]=sum(up)", "not a series selector"),
    ] {
        let (s, v) = json(c.get(format!("{base}{path}")).send().unwrap());
        assert_eq!(s, 400, "{path}");
        assert_eq!(v["errorType"], "bad_data", "{path}");
        assert!(v["error"].as_str().unwrap().contains(why), "{path}: {v}");
    }
    let resp =
        c.post(format!("{base}/api/v1/labels")).header("Content-Type", "application/json").body("{}").send().unwrap();
    assert_eq!(resp.status().as_u16(), 415);
    server.stop();
}

/// A dashboard's refresh: the same metadata requests again and again, answered from what the
/// first ones kept (the index cache, the labels cache), while new series arrive and old ones are
/// deleted between refreshes. Every answer must be the current one.
#[test]
fn repeated_metadata_requests_see_every_new_and_deleted_series() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = saltdb::server::ServerConfig::new("127.0.0.1:0".parse().unwrap(), storage_config(dir.path()));
    config.admin_api = true;
    let server = InProcess::start_with(runtime(), config);
    let base = server.url("");
    let t = 1_700_000_000_000i64;
    let line = |job: &str, instance: &str| {
        serde_json::json!({"metric":{"__name__":"up","job":job,"instance":instance},"values":[1],"timestamps":[t]})
            .to_string()
            + "\n"
    };
    let c = client();
    let range = [("start", (t / 1000 - 60).to_string()), ("end", (t / 1000 + 60).to_string())];
    let ask = |path: &str, extra: &[(&str, &str)]| {
        let (s, v) = json(c.get(format!("{base}{path}")).query(&range).query(extra).send().unwrap());
        assert_eq!(s, 200, "{path}: {v}");
        v["data"].clone()
    };
    let refresh = || {
        let jobs = ask("/api/v1/label/job/values", &[]);
        let names = ask("/api/v1/labels", &[]);
        let api = ask("/api/v1/label/instance/values", &[("match[]", r#"up{job="api"}"#)]);
        let series = ask("/api/v1/series", &[("match[]", r#"{job="api"}"#)]).as_array().unwrap().len();
        (jobs, names, api, series)
    };
    assert_eq!(import(&base, line("api", "a")), (204, String::new()));
    for _ in 0..3 {
        assert_eq!(
            refresh(),
            (
                serde_json::json!(["api"]),
                serde_json::json!(["__name__", "instance", "job"]),
                serde_json::json!(["a"]),
                1
            )
        );
    }
    assert_eq!(import(&base, line("api", "b") + &line("db", "c")), (204, String::new()));
    for _ in 0..3 {
        assert_eq!(
            refresh(),
            (
                serde_json::json!(["api", "db"]),
                serde_json::json!(["__name__", "instance", "job"]),
                serde_json::json!(["a", "b"]),
                2
            )
        );
    }
    let deleted = c
        .post(format!("{base}/api/v1/admin/tsdb/delete_series"))
        .query(&[("match[]", r#"{instance="a"}"#)])
        .send()
        .unwrap();
    assert_eq!(deleted.status().as_u16(), 204);
    for _ in 0..3 {
        assert_eq!(
            refresh(),
            (
                serde_json::json!(["api", "db"]),
                serde_json::json!(["__name__", "instance", "job"]),
                serde_json::json!(["b"]),
                1
            )
        );
    }
}
