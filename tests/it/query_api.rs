//! `/api/v1/query` and `/api/v1/query_range` over real HTTP: result shapes, Grafana's request
//! pattern (form POST, float seconds), limits and errors.

use serde_json::{json, Value};

use saltdb::http::QueryConfig;
use saltdb::server::ServerConfig;

use crate::common::*;

fn json_of(resp: reqwest::blocking::Response) -> (u16, Value) {
    let status = resp.status().as_u16();
    (status, serde_json::from_str(&resp.text().unwrap()).unwrap())
}

/// Status and JSON body of the instant query `q` at `time` (seconds).
fn instant_at(c: &reqwest::blocking::Client, base: &str, q: &str, time: &str) -> (u16, Value) {
    json_of(c.get(format!("{base}/api/v1/query")).query(&[("query", q), ("time", time)]).send().unwrap())
}

const T: i64 = 1_700_000_000_000;

fn load(base: &str) {
    // Two counters rising 1/s and 2/s, scraped every 15 s for 10 minutes.
    let ts: Vec<i64> = (0..=40).map(|i| T + i * 15_000).collect();
    let body = ["a", "b"]
        .iter()
        .enumerate()
        .map(|(k, inst)| {
            let values: Vec<f64> = (0..=40).map(|i| (i * 15 * (k as i64 + 1)) as f64).collect();
            json!({"metric":{"__name__":"reqs_total","job":"api","instance":inst},"values":values,"timestamps":ts})
                .to_string()
                + "\n"
        })
        .collect::<String>();
    assert_eq!(import(base, body), (204, String::new()));
}

#[test]
fn instant_and_range_queries() {
    let dir = tempfile::tempdir().unwrap();
    let server = InProcess::start(storage_config(dir.path()));
    let base = server.url("");
    load(&base);
    let c = client();
    let at = (T + 600_000) as f64 / 1000.0;

    // Grafana's health check, as a form POST.
    let (s, v) = json_of(
        c.post(format!("{base}/api/v1/query")).form(&[("query", "1+1"), ("time", &at.to_string())]).send().unwrap(),
    );
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["data"], json!({"resultType":"scalar","result":[1_700_000_600, "2"]}));

    let (_, v) = json_of(
        c.get(format!("{base}/api/v1/query"))
            .query(&[("query", "sum by (job) (rate(reqs_total[1m]))"), ("time", &at.to_string())])
            .send()
            .unwrap(),
    );
    assert_eq!(v["data"]["resultType"], "vector");
    let r = &v["data"]["result"][0];
    assert_eq!(r["metric"], json!({"job":"api"}));
    let rate: f64 = r["value"][1].as_str().unwrap().parse().unwrap();
    assert!((rate - 3.0).abs() < 1e-9, "rate {rate}");

    // Range query the way Grafana sends it: form POST, float seconds, integer step.
    let (s, v) = json_of(
        c.post(format!("{base}/api/v1/query_range"))
            .form(&[
                ("query", r#"reqs_total{instance="a"}"#),
                ("start", &((T as f64) / 1000.0 + 0.5).to_string()),
                ("end", &at.to_string()),
                ("step", "60"),
            ])
            .send()
            .unwrap(),
    );
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["data"]["resultType"], "matrix");
    let values = v["data"]["result"][0]["values"].as_array().unwrap();
    assert_eq!(values.len(), 10);
    assert_eq!(values[0], json!([1_700_000_000.5, "0"]));
    assert_eq!(values[1], json!([1_700_000_060.5, "60"]));

    // Errors.
    for (path, params, status, kind) in [
        ("query", vec![("query", "sum(")], 400, "bad_data"),
        ("query", vec![("time", "1")], 400, "bad_data"),
        ("query_range", vec![("query", "up"), ("start", "1"), ("end", "2"), ("step", "0")], 400, "bad_data"),
        ("query_range", vec![("query", "up"), ("start", "0"), ("end", "100000000"), ("step", "1")], 400, "bad_data"),
        ("query_range", vec![("query", "up"), ("start", "10"), ("end", "1"), ("step", "1")], 400, "bad_data"),
        ("query_range", vec![("query", "up"), ("end", "1"), ("step", "1")], 400, "bad_data"),
    ] {
        let (s, v) = json_of(c.get(format!("{base}/api/v1/{path}")).query(&params).send().unwrap());
        assert_eq!((s, v["errorType"].as_str().unwrap()), (status, kind), "{path} {params:?}: {v}");
        assert!(!v["error"].as_str().unwrap().is_empty());
    }
    server.stop();
}

#[test]
fn query_sample_limit_is_a_clear_422() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = runtime();
    let mut query = QueryConfig::default();
    query.engine.max_samples = 50;
    let config =
        ServerConfig { query, ..ServerConfig::new("127.0.0.1:0".parse().unwrap(), storage_config(dir.path())) };
    let server = InProcess::start_with(runtime, config);
    let base = server.url("");
    load(&base);
    let at = ((T + 600_000) / 1000).to_string();
    let (s, v) = json_of(
        client()
            .get(format!("{base}/api/v1/query"))
            .query(&[("query", "count_over_time(reqs_total[10m])"), ("time", &at)])
            .send()
            .unwrap(),
    );
    assert_eq!(s, 422, "{v}");
    assert_eq!(v["errorType"], "execution");
    assert!(v["error"].as_str().unwrap().contains("samples"), "{v}");
    // The server keeps serving small queries.
    let (s, _) = json_of(
        client().get(format!("{base}/api/v1/query")).query(&[("query", "reqs_total"), ("time", &at)]).send().unwrap(),
    );
    assert_eq!(s, 200);
    server.stop();
}

/// Prometheus 3's duration expressions over HTTP: arithmetic in ranges and offsets, `step()`
/// and `range()` of the query, and a clear 400 for one that cannot be computed.
#[test]
fn duration_expressions_in_ranges_and_offsets() {
    let dir = tempfile::tempdir().unwrap();
    let server = InProcess::start(storage_config(dir.path()));
    let base = server.url("");
    load(&base);
    let c = client();
    let at = ((T + 600_000) / 1000).to_string();
    let value = |q: &str| {
        let (s, v) = instant_at(&c, &base, q, &at);
        assert_eq!(s, 200, "{q}: {v}");
        v["data"]["result"][0]["value"][1].as_str().unwrap_or_default().to_owned()
    };
    // 15 s samples: [2m*2+30s] holds as many as [270s]; offset (2*1m) is offset 2m.
    assert_eq!(
        value(r#"count_over_time(reqs_total{instance="a"}[2m*2+30s])"#),
        value(r#"count_over_time(reqs_total{instance="a"}[270s])"#)
    );
    assert_eq!(value(r#"reqs_total{instance="a"} offset (2*1m)"#), value(r#"reqs_total{instance="a"} offset 2m"#));
    assert_eq!(value(r#"reqs_total{instance="a"} offset (2*1m)"#), "480");
    // step() of a range query: a window of exactly one step holds one 15 s sample per 15 s step.
    let start = ((T + 300_000) / 1000).to_string();
    let (s, v) = json_of(
        c.get(format!("{base}/api/v1/query_range"))
            .query(&[
                ("query", r#"count_over_time(reqs_total{instance="a"}[step()])"#),
                ("start", &start),
                ("end", &at),
                ("step", "15"),
            ])
            .send()
            .unwrap(),
    );
    assert_eq!(s, 200, "{v}");
    let points = v["data"]["result"][0]["values"].as_array().unwrap();
    assert_eq!(points.len(), 21);
    assert!(points.iter().all(|p| p[1] == "1"), "{v}");
    // One that cannot be computed is a 400 naming the problem.
    let (s, v) = json_of(c.get(format!("{base}/api/v1/query")).query(&[("query", "reqs_total[1m/0]")]).send().unwrap());
    assert_eq!(s, 400, "{v}");
    assert!(v["error"].as_str().unwrap().contains("division by zero"), "{v}");
    server.stop();
}

/// Prometheus 3's `anchored` and `smoothed` modifiers over HTTP: interpolated instant values in
/// instant and range queries, an anchored window that includes the sample before its start,
/// and a 400 naming the problem for a function or a subquery that cannot take them.
#[test]
fn anchored_and_smoothed_selectors() {
    let dir = tempfile::tempdir().unwrap();
    let server = InProcess::start(storage_config(dir.path()));
    let base = server.url("");
    load(&base);
    let c = client();
    // Between two 15 s samples: instance "a" counts 1/s from 0 at T.
    let at = format!("{:.1}", (T + 307_500) as f64 / 1000.0);
    let query = |q: &str| instant_at(&c, &base, q, &at);
    let value = |q: &str| {
        let (s, v) = query(q);
        assert_eq!(s, 200, "{q}: {v}");
        v["data"]["result"][0]["value"][1].as_str().unwrap_or_default().to_owned()
    };
    assert_eq!(value(r#"reqs_total{instance="a"}"#), "300");
    assert_eq!(value(r#"reqs_total{instance="a"} smoothed"#), "307.5");
    // Ends interpolated at 247.5 s and 307.5 s.
    assert_eq!(value(r#"increase(reqs_total{instance="b"}[1m] smoothed)"#), "120");
    assert_eq!(value(r#"rate(reqs_total{instance="b"}[1m] smoothed)"#), "2");
    // The window (247.5 s, 307.5 s] holds 4 samples; anchored, also the one at 240 s.
    assert_eq!(value(r#"changes(reqs_total{instance="a"}[1m])"#), "3");
    assert_eq!(value(r#"changes(reqs_total{instance="a"}[1m] anchored)"#), "4");
    assert_eq!(value(r#"increase(reqs_total{instance="a"}[1m] anchored)"#), "60");
    // A range query of a smoothed selector: every step interpolated.
    let (s, v) = json_of(
        c.get(format!("{base}/api/v1/query_range"))
            .query(&[
                ("query", r#"reqs_total{instance="a"} smoothed"#),
                ("start", &format!("{}", (T + 300_000) / 1000)),
                ("end", &format!("{}", (T + 330_000) / 1000)),
                ("step", "7.5"),
            ])
            .send()
            .unwrap(),
    );
    assert_eq!(s, 200, "{v}");
    let values: Vec<&str> =
        v["data"]["result"][0]["values"].as_array().unwrap().iter().map(|p| p[1].as_str().unwrap()).collect();
    assert_eq!(values, ["300", "307.5", "315", "322.5", "330"]);
    // Misuse: clear 400s.
    for (q, msg) in [
        (
            "deriv(reqs_total[1m] smoothed)",
            "smoothed modifier can only be used with: delta, increase, rate - not with deriv",
        ),
        (
            "max_over_time(reqs_total[1m] anchored)",
            "anchored modifier can only be used with: changes, delta, increase, rate, resets",
        ),
        ("rate(reqs_total[5m:1m] anchored)", "anchored modifier is not supported for subqueries"),
        ("reqs_total anchored smoothed", "anchored and smoothed modifiers cannot be used together"),
    ] {
        let (s, v) = query(q);
        assert_eq!(s, 400, "{q}: {v}");
        assert!(v["error"].as_str().unwrap().contains(msg), "{q}: {v}");
    }
    server.stop();
}

/// `info()` over HTTP: a series gains the data labels of the `target_info` series sharing its
/// `instance` and `job`; a data label matcher that needs a value drops the series without one;
/// one that accepts the empty value (which a plain selector may not hold) keeps it.
#[test]
fn info_joins_target_info_labels() {
    let dir = tempfile::tempdir().unwrap();
    let server = InProcess::start(storage_config(dir.path()));
    let base = server.url("");
    load(&base);
    let ts: Vec<i64> = (0..=40).map(|i| T + i * 15_000).collect();
    let info = json!({"metric":{"__name__":"target_info","job":"api","instance":"a","version":"1.2","region":"eu"},
        "values": vec![1.0; ts.len()], "timestamps": ts});
    assert_eq!(import(&base, info.to_string()), (204, String::new()));
    let c = client();
    let at = ((T + 600_000) / 1000).to_string();
    let series = |q: &str| -> Vec<String> {
        let (s, v) = instant_at(&c, &base, q, &at);
        assert_eq!(s, 200, "{q}: {v}");
        let mut out: Vec<String> =
            v["data"]["result"].as_array().unwrap().iter().map(|r| r["metric"].to_string()).collect();
        out.sort();
        out
    };
    assert_eq!(
        series("info(reqs_total)"),
        [
            r#"{"__name__":"reqs_total","instance":"a","job":"api","region":"eu","version":"1.2"}"#,
            r#"{"__name__":"reqs_total","instance":"b","job":"api"}"#
        ]
    );
    assert_eq!(
        series(r#"info(reqs_total, {version=~".+"})"#),
        [r#"{"__name__":"reqs_total","instance":"a","job":"api","version":"1.2"}"#]
    );
    assert_eq!(
        series(r#"info(reqs_total, {version=~".*"})"#),
        [
            r#"{"__name__":"reqs_total","instance":"a","job":"api","version":"1.2"}"#,
            r#"{"__name__":"reqs_total","instance":"b","job":"api"}"#
        ]
    );
    server.stop();
}

/// A query evaluated small before is evaluated in place the next time, within a small budget
/// (`small_queries.rs`): its answers stay those of the blocking pool, and once its data outgrows
/// the budget it still gets its whole answer (from the pool) instead of a limit's error.
#[test]
fn a_small_query_that_grows_still_gets_its_whole_answer() {
    let dir = tempfile::tempdir().unwrap();
    let server = InProcess::start(storage_config(dir.path()));
    let base = server.url("");
    let t = recent_ms();
    let lines = |from: usize, to: usize| -> String {
        (from..to)
            .map(|i| {
                serde_json::json!({"metric":{"__name__":"grows","i":i.to_string()},"values":[1, 2],"timestamps":[t - 60_000, t]})
                    .to_string()
                    + "\n"
            })
            .collect()
    };
    assert_eq!(import(&base, lines(0, 10)), (204, String::new()));
    let ask = |query: &str| {
        let v = get_json(&format!("{base}/api/v1/query?query={query}&time={}", t as f64 / 1000.0));
        assert_eq!(v["status"], "success", "{v}");
        v["data"]["result"][0]["value"][1].as_str().unwrap().to_owned()
    };
    let range = |query: &str| {
        let url = format!(
            "{base}/api/v1/query_range?query={query}&start={}&end={}&step=30",
            (t - 120_000) as f64 / 1000.0,
            t as f64 / 1000.0
        );
        let v = get_json(&url);
        assert_eq!(v["status"], "success", "{v}");
        v["data"]["result"][0]["values"].as_array().unwrap().len()
    };
    for _ in 0..3 {
        assert_eq!(ask("count(grows)"), "10");
        assert_eq!(ask("sum(count_over_time(grows[5m]))"), "20");
        assert_eq!(range("count(grows)"), 3);
    }
    // Far beyond the in-place budget of samples.
    assert_eq!(import(&base, lines(10, 30_000)), (204, String::new()));
    for _ in 0..2 {
        assert_eq!(ask("count(grows)"), "30000");
        assert_eq!(ask("sum(count_over_time(grows[5m]))"), "60000");
        assert_eq!(range("count(grows)"), 3);
    }
}

/// Warnings carry the position of the expression they refer to, as Prometheus' API prints
/// them: ` (line:column)`, the column counted in bytes from the last line break.
#[test]
fn annotations_carry_the_position_of_their_expression() {
    let dir = tempfile::tempdir().unwrap();
    let server = InProcess::start(storage_config(dir.path()));
    let base = server.url("");
    load(&base);
    let c = client();
    let at = ((T + 600_000) / 1000).to_string();
    let instant = |q: &str| {
        let (s, v) = instant_at(&c, &base, q, &at);
        assert_eq!(s, 200, "{q}: {v}");
        v["warnings"].clone()
    };
    let range = |q: &str| {
        let (start, end) = (((T + 300_000) / 1000).to_string(), at.clone());
        let params = [("query", q), ("start", &start), ("end", &end), ("step", "60")];
        let (s, v) = json_of(c.get(format!("{base}/api/v1/query_range")).query(&params).send().unwrap());
        assert_eq!(s, 200, "{q}: {v}");
        v["warnings"].clone()
    };

    // The aggregation's parameter.
    assert_eq!(
        instant("quantile(2, reqs_total)"),
        json!(["PromQL warning: quantile value should be between 0 and 1, got 2 (1:10)"])
    );
    // `é` before the node counts two bytes.
    assert_eq!(
        instant("count(reqs_total{job!=\"é\"}) + quantile(-0.5, reqs_total)"),
        json!(["PromQL warning: quantile value should be between 0 and 1, got -0.5 (1:41)"])
    );
    // Lines count from 1; the duration expression is folded before parsing, the text is not.
    assert_eq!(
        instant("sum(rate(reqs_total[1m+30s]))\n  * on() group_left\n  quantile(\n    1.5, reqs_total)"),
        json!(["PromQL warning: quantile value should be between 0 and 1, got 1.5 (4:5)"])
    );
    // `sort` in a range query: the call itself.
    assert_eq!(
        range("sort(reqs_total)"),
        json!([
            "PromQL warning: sort is ineffective for range queries since results are always ordered by labels (1:1)"
        ])
    );
    assert_eq!(
        range("sum(\n  sort_desc(reqs_total)\n)"),
        json!([
            "PromQL warning: sort is ineffective for range queries since results are always ordered by labels (2:3)"
        ])
    );
}
