//! Limits per tenant (`--tenant-limits-file`): the ingestion rate, label lengths and the query
//! range refused per tenant with the tenant named, nothing of a refused write stored, a tenant
//! without an override unaffected, `POST /-/reload` changing the limits, and the per-tenant
//! counters on `/metrics`; the active series limits per tenant and metric, and a tenant with an
//! empty ingestion bucket refused before its body is decoded.

use std::path::Path;

use saltdb::server::ServerConfig;

use crate::common::{client, post, recent_ms, runtime, storage_config, InProcess};

const LIMITS: &str = "defaults:\n  max_total_query_length: 1h\noverrides:\n  a:\n    ingestion_rate: 0.001\n    ingestion_burst_size: 10\n    max_label_value_length: 16\n";

fn start(dir: &Path, limits: &Path) -> InProcess {
    let mut config = ServerConfig::new("127.0.0.1:0".parse().unwrap(), storage_config(&dir.join("data")));
    config.tenants = true;
    config.tenant_limits_file = Some(limits.to_path_buf());
    InProcess::start_with(runtime(), config)
}

/// JSON lines of one series `name{k=value}` with `n` samples from `t0`.
fn lines(name: &str, value: &str, n: usize, t0: i64) -> Vec<u8> {
    let values: Vec<String> = (0..n).map(|i| i.to_string()).collect();
    let times: Vec<String> = (0..n).map(|i| (t0 + i as i64 * 1000).to_string()).collect();
    format!(
        r#"{{"metric":{{"__name__":"{name}","k":"{value}"}},"values":[{}],"timestamps":[{}]}}"#,
        values.join(","),
        times.join(",")
    )
    .into_bytes()
}

fn import(s: &InProcess, tenant: &str, body: Vec<u8>) -> (u16, reqwest::header::HeaderMap, String) {
    post(&s.url("/api/v1/import"), &[("X-Scope-OrgID", tenant)], body)
}

fn query(s: &InProcess, tenant: &str, path: &str, params: &[(&str, String)]) -> (u16, serde_json::Value) {
    let resp = client().get(s.url(path)).query(params).header("X-Scope-OrgID", tenant).send().expect("query");
    let status = resp.status().as_u16();
    (status, resp.text().expect("body").parse().expect("JSON"))
}

/// The value of `count_over_time(<metric>[1h])` for `tenant` at `t`, 0 without series.
fn count(s: &InProcess, tenant: &str, metric: &str, t: i64) -> f64 {
    let (status, body) = query(
        s,
        tenant,
        "/api/v1/query",
        &[("query", format!("sum(count_over_time({metric}[1h]))")), ("time", format!("{}", t as f64 / 1000.0))],
    );
    assert_eq!(status, 200, "{body}");
    body["data"]["result"][0]["value"][1].as_str().map_or(0.0, |v| v.parse().unwrap())
}

#[test]
fn limits_per_tenant_refuse_name_the_tenant_and_reload() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("limits.yml");
    std::fs::write(&file, LIMITS).unwrap();
    let s = start(dir.path(), &file);
    let t0 = recent_ms() - 600_000;
    let at = t0 + 300_000;

    // Larger than the burst: refused whole, whatever the bucket holds.
    let (status, _, body) = import(&s, "a", lines("refused", "y", 11, t0));
    assert_eq!(status, 429, "{body}");
    assert!(body.contains("larger than the burst"), "{body}");
    // A label value over a's 16 bytes (refused before the rate takes anything).
    let (status, _, body) = import(&s, "a", lines("long", "a-value-longer-than-sixteen-bytes", 1, t0));
    assert_eq!(status, 400, "{body}");
    assert!(
        body.contains("max_label_value_length") && body.contains(r#"\"k\""#) && body.contains(r#"tenant \"a\""#),
        "{body}"
    );
    assert_eq!(count(&s, "a", "long", at), 0.0);

    // Tenant a: the burst of 10 fits, then the bucket is empty.
    assert_eq!(import(&s, "a", lines("m", "x", 10, t0)).0, 204);
    let (status, headers, body) = import(&s, "a", lines("refused", "x", 5, t0));
    assert_eq!(status, 429, "{body}");
    assert!(
        body.contains(r#"tenant \"a\""#) && body.contains("ingestion rate limit of 0.001 samples/s (burst 10)"),
        "{body}"
    );
    let retry: u64 = headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!(retry >= 1, "{retry}");
    assert_eq!(count(&s, "a", "m", at), 10.0);
    assert_eq!(count(&s, "a", "refused", at), 0.0, "nothing of a refused write is stored");

    // Tenant b has no override: no rate limit, and the defaults' query length.
    assert_eq!(import(&s, "b", lines("m", "a-value-longer-than-sixteen-bytes", 50, t0)).0, 204);
    assert_eq!(count(&s, "b", "m", at), 50.0);

    // A range over the defaults' max_total_query_length, for either tenant.
    for tenant in ["a", "b"] {
        let (status, body) = query(
            &s,
            tenant,
            "/api/v1/query_range",
            &[("query", "m".into()), ("start", "0".into()), ("end", "7200".into()), ("step", "60".into())],
        );
        assert_eq!(status, 400, "{body}");
        let error = body["error"].as_str().unwrap();
        assert!(error.contains("exceeds the limit") && error.contains(&format!("tenant {tenant:?}")), "{error}");
    }
    let (status, body) = query(
        &s,
        "a",
        "/api/v1/query_range",
        &[("query", "m".into()), ("start", "0".into()), ("end", "3600".into()), ("step", "60".into())],
    );
    assert_eq!(status, 200, "{body}");

    // A bad file on reload keeps the limits in force and names the problem.
    std::fs::write(&file, "overrides:\n  a:\n    ingestion_rat: 5\n").unwrap();
    let (status, _, body) = post(&s.url("/-/reload"), &[], Vec::new());
    assert_eq!(status, 500, "{body}");
    assert!(body.contains("limits.yml") && body.contains("ingestion_rat"), "{body}");
    assert_eq!(import(&s, "a", lines("refused", "z", 5, t0)).0, 429);

    // A new limit, in force once reloaded.
    std::fs::write(&file, "overrides:\n  a:\n    ingestion_rate: 1000\n    ingestion_burst_size: 1000\n").unwrap();
    let (status, _, body) = post(&s.url("/-/reload"), &[], Vec::new());
    assert_eq!(status, 200, "{body}");
    assert_eq!(import(&s, "a", lines("later", "x", 100, t0)).0, 204);
    assert_eq!(count(&s, "a", "later", at), 100.0);

    let metrics = client().get(s.url("/metrics")).send().unwrap().text().unwrap();
    for line in [
        r#"saltdb_tenant_samples_ingested_total{tenant="a"} 110"#,
        r#"saltdb_tenant_samples_ingested_total{tenant="b"} 50"#,
        r#"saltdb_tenant_refused_total{reason="tenant_rate_limited",tenant="a"} 3"#,
        r#"saltdb_tenant_refused_total{reason="tenant_label_too_long",tenant="a"} 1"#,
        r#"saltdb_tenant_refused_total{reason="query_too_long",tenant="b"} 1"#,
        // The over-burst request's 11 samples; those refused unread are not known.
        r#"saltdb_samples_rejected_total{protocol="import",reason="tenant_rate_limited"} 11"#,
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} missing from /metrics");
    }
    s.stop();
}

#[test]
fn a_bad_limits_file_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("limits.yml");
    std::fs::write(&file, "defaults:\n  max_concurrent_queries: 0\n").unwrap();
    let mut config = ServerConfig::new("127.0.0.1:0".parse().unwrap(), storage_config(&dir.path().join("data")));
    config.tenants = true;
    config.tenant_limits_file = Some(file);
    let e = runtime().block_on(saltdb::server::Server::start(config)).err().expect("refused");
    let e = e.to_string();
    assert!(e.contains("limits.yml") && e.contains("max_concurrent_queries"), "{e}");
}

const SERIES_LIMITS: &str = "overrides:\n  a:\n    max_global_series_per_user: 5\n    max_global_series_per_metric: 3\n  c:\n    ingestion_rate: 0.01\n    ingestion_burst_size: 2\n";

/// JSON lines of one sample for each series `name{k=value}` of `series`.
fn series_lines(series: &[(&str, &str)], t: i64) -> Vec<u8> {
    series
        .iter()
        .map(|(n, v)| String::from_utf8(lines(n, v, 1, t)).unwrap())
        .collect::<Vec<_>>()
        .join("\n")
        .into_bytes()
}

/// The series `tenant` has between `start` and `end` (ms), as `name/k`, sorted.
fn series_of(s: &InProcess, tenant: &str, start: i64, end: i64) -> Vec<String> {
    let (status, body) = query(
        s,
        tenant,
        "/api/v1/series",
        &[
            ("match[]", r#"{__name__=~".+"}"#.into()),
            ("start", format!("{}", start as f64 / 1000.0)),
            ("end", format!("{}", end as f64 / 1000.0)),
        ],
    );
    assert_eq!(status, 200, "{body}");
    let mut names: Vec<String> = body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| format!("{}/{}", l["__name__"].as_str().unwrap(), l["k"].as_str().unwrap_or("")))
        .collect();
    names.sort();
    names
}

#[test]
fn active_series_limits_per_tenant_and_metric() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("limits.yml");
    std::fs::write(&file, SERIES_LIMITS).unwrap();
    let s = start(dir.path(), &file);
    let t = recent_ms() - 60_000;

    // Three series of m1 fit its max_global_series_per_metric of 3; a fourth does not.
    assert_eq!(import(&s, "a", series_lines(&[("m1", "1"), ("m1", "2"), ("m1", "3")], t)).0, 204);
    let (status, _, body) = import(&s, "a", series_lines(&[("m1", "4")], t));
    assert_eq!(status, 429, "{body}");
    assert!(
        body.contains(r#"tenant \"a\" has 3 active series of metric \"m1\", its limit is 3 (max_global_series_per_metric); this request would add 1 more"#),
        "{body}"
    );
    // Two of another metric fit (5 in all); one more of any metric is over the tenant's 5.
    assert_eq!(import(&s, "a", series_lines(&[("m2", "1"), ("m2", "2")], t)).0, 204);
    for more in [("m1", "5"), ("m3", "1")] {
        let (status, _, body) = import(&s, "a", series_lines(&[("m2", "1"), more], t + 1000));
        assert_eq!(status, 429, "{body}");
        assert!(
            body.contains(r#"tenant \"a\" has 5 active series, its limit is 5 (max_global_series_per_user); this request would add 1 more"#),
            "{body}"
        );
    }
    // Rewriting active series still passes.
    assert_eq!(import(&s, "a", series_lines(&[("m1", "2"), ("m2", "1"), ("m1", "2")], t + 2000)).0, 204);
    assert_eq!(
        series_of(&s, "a", t - 60_000, t + 60_000),
        ["m1/1", "m1/2", "m1/3", "m2/1", "m2/2"],
        "exactly the admitted series, nothing of the refused requests"
    );
    // m2/1 at t and t + 2s, m2/2 at t: the refused requests' m2/1 at t + 1s was not written.
    assert_eq!(count(&s, "a", "m2", t + 30_000), 3.0);

    // Tenant b has no limits.
    let many: Vec<String> = (0..20).map(|i| i.to_string()).collect();
    let many: Vec<(&str, &str)> = many.iter().map(|v| ("m1", v.as_str())).collect();
    assert_eq!(import(&s, "b", series_lines(&many, t)).0, 204);
    assert_eq!(series_of(&s, "b", t - 60_000, t + 60_000).len(), 20);

    // Tenant c empties its bucket; a further request is refused unread: an invalid body gets
    // the rate limit's 429, not the decoder's 400.
    assert_eq!(import(&s, "c", lines("m", "x", 2, t)).0, 204);
    let (status, headers, body) = import(&s, "c", b"this is not JSON".to_vec());
    assert_eq!(status, 429, "{body}");
    assert!(body.contains(r#"tenant \"c\""#) && body.contains("ingestion rate limit"), "{body}");
    assert!(headers["retry-after"].to_str().unwrap().parse::<u64>().unwrap() >= 1);
    // Tenant b's invalid body is decoded, and refused as such.
    assert_eq!(import(&s, "b", b"this is not JSON".to_vec()).0, 400);

    let metrics = client().get(s.url("/metrics")).send().unwrap().text().unwrap();
    for line in [
        r#"saltdb_tenant_active_series{tenant="a"} 5"#,
        r#"saltdb_tenant_refused_total{reason="tenant_metric_series_limit",tenant="a"} 1"#,
        r#"saltdb_tenant_refused_total{reason="tenant_series_limit",tenant="a"} 2"#,
        r#"saltdb_tenant_refused_total{reason="tenant_rate_limited",tenant="c"} 1"#,
        r#"saltdb_samples_rejected_total{protocol="import",reason="tenant_series_limit"} 4"#,
        r#"saltdb_samples_rejected_total{protocol="import",reason="tenant_metric_series_limit"} 1"#,
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} missing from /metrics");
    }
    assert!(!metrics.contains(r#"saltdb_tenant_active_series{tenant="b"}"#), "b has no series limit");
    s.stop();
}
