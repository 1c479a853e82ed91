//! Tenants (`--tenants`): every write door and every read endpoint, as every tenant, through
//! the three ways of naming one (the `X-Scope-OrgID` header, the `/insert|select/<tenant>/`
//! URLs, a tenant's token); the operator's reads of several tenants; the reserved label; a data
//! directory written without tenants opening as the default tenant; `kill -9` during
//! mixed-tenant ingest.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use saltdb::remote::{proto, snappy_body};

use crate::common::*;

const TENANTS: [&str; 4] = ["default", "a", "team-b", "c.d"];
const READ: &str = "op-read";
const WRITE: &str = "op-write";

/// How a request names its tenant.
#[derive(Clone, Copy, Debug)]
enum Naming {
    /// `X-Scope-OrgID`, with the operator's credentials.
    Header,
    /// `/insert/<tenant>/...` or `/select/<tenant>/...`, with the operator's credentials.
    Url,
    /// The tenant's own token, naming nothing else.
    Token,
}

fn token_of(tenant: &str) -> String {
    format!("token-of-{tenant}")
}

/// A server with the four tenants' tokens and the operator's.
fn start(dir: &std::path::Path, extra: &[&str]) -> Binary {
    std::fs::create_dir_all(dir).unwrap();
    let tokens = dir.join("tenant-tokens");
    let lines: String = TENANTS.iter().map(|t| format!("{t}:{}\n", token_of(t))).collect();
    std::fs::write(&tokens, format!("# tenant:token\n{lines}")).unwrap();
    let data = dir.join("data");
    let mut args = vec![
        "--tenants",
        "--tenant-tokens-file",
        tokens.to_str().unwrap(),
        "--read-token",
        READ,
        "--write-token",
        WRITE,
    ];
    args.extend_from_slice(extra);
    Binary::spawn(&data, &args)
}

/// The URL and headers of a request of `tenant` to `path`, named as `naming` says.
fn addressed(bin: &Binary, path: &str, tenant: &str, naming: Naming, write: bool) -> (String, Vec<(String, String)>) {
    let op = if write { WRITE } else { READ };
    match naming {
        Naming::Header => (
            bin.url(path),
            vec![("Authorization".into(), format!("Bearer {op}")), ("X-Scope-OrgID".into(), tenant.into())],
        ),
        Naming::Url => {
            let (door, form) = match (write, path) {
                (true, "/write") => ("insert", "influx"),
                (true, "/api/put") => ("insert", "opentsdb"),
                (true, _) => ("insert", "prometheus"),
                (false, _) => ("select", "prometheus"),
            };
            (bin.url(&format!("/{door}/{tenant}/{form}{path}")), vec![("Authorization".into(), format!("Bearer {op}"))])
        }
        Naming::Token => (bin.url(path), vec![("Authorization".into(), format!("Bearer {}", token_of(tenant)))]),
    }
}

fn send(
    bin: &Binary,
    path: &str,
    tenant: &str,
    naming: Naming,
    extra: &[(&str, &str)],
    body: Vec<u8>,
) -> (u16, String) {
    let (url, headers) = addressed(bin, path, tenant, naming, true);
    let mut all: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    all.extend_from_slice(extra);
    let (status, _, text) = post(&url, &all, body);
    (status, text)
}

fn get(bin: &Binary, path: &str, query: &[(&str, &str)], tenant: &str, naming: Naming) -> (u16, String) {
    let (url, headers) = addressed(bin, path, tenant, naming, false);
    let req = headers.iter().fold(client().get(url).query(query), |r, (k, v)| r.header(k, v));
    let resp = req.send().expect("request");
    (resp.status().as_u16(), resp.text().unwrap_or_default())
}

fn json_of(status_text: (u16, String)) -> serde_json::Value {
    let (status, text) = status_text;
    assert_eq!(status, 200, "{text}");
    serde_json::from_str(&text).expect("JSON")
}

/// One series written: its tenant, its door and its `host`.
#[derive(Clone, Debug)]
struct Written {
    tenant: usize,
    door: usize,
    host: u8,
    naming: Naming,
}

fn naming() -> impl Strategy<Value = Naming> {
    prop_oneof![Just(Naming::Header), Just(Naming::Url), Just(Naming::Token)]
}

/// Writes one series of `tenant` (labels `owner`=tenant, `host`, `door`) through `door`:
/// 0 remote-write 1.0 (with metadata and an exemplar), 1 JSON-lines import, 2 InfluxDB line
/// protocol, 3 OpenTSDB, 4 Prometheus text.
fn write_one(bin: &Binary, w: &Written, t_ms: i64) {
    let tenant = TENANTS[w.tenant];
    let host = format!("h{}", w.host);
    let door = w.door.to_string();
    let (status, text) = match w.door {
        0 => {
            let mut s =
                series(&[("__name__", "iso_rw"), ("door", &door), ("host", &host), ("owner", tenant)], &[(t_ms, 1.0)]);
            s.exemplars = vec![proto::Exemplar {
                labels: vec![proto::Label { name: "trace_id".into(), value: format!("trace-{tenant}") }],
                value: 1.0,
                timestamp: t_ms,
            }];
            let metadata = vec![proto::MetricMetadata {
                r#type: 2,
                metric_family_name: format!("iso_meta_of_{}", tenant.replace(['.', '-'], "_")),
                help: format!("sent by {tenant}"),
                unit: String::new(),
            }];
            let body = snappy_body(&proto::WriteRequest { timeseries: vec![s], metadata });
            send(bin, "/api/v1/write", tenant, w.naming, &V1_HEADERS, body)
        }
        1 => {
            let line = serde_json::json!({
                "metric": {"__name__": "iso_import", "owner": tenant, "host": host, "door": door},
                "values": [1.0], "timestamps": [t_ms],
            });
            send(bin, "/api/v1/import", tenant, w.naming, &[], format!("{line}\n").into_bytes())
        }
        2 => {
            let line = format!("iso_influx,owner={tenant},host={host},door={door} value=1 {}\n", t_ms * 1_000_000);
            send(bin, "/write", tenant, w.naming, &[], line.into_bytes())
        }
        3 => {
            let put = serde_json::json!({"metric": "iso_tsdb", "timestamp": t_ms, "value": 1,
                "tags": {"owner": tenant, "host": host, "door": door}});
            send(bin, "/api/put", tenant, w.naming, &[], put.to_string().into_bytes())
        }
        _ => {
            let line = format!("iso_text{{owner=\"{tenant}\",host=\"{host}\",door=\"{door}\"}} 1 {t_ms}\n");
            send(bin, "/api/v1/import/prometheus", tenant, w.naming, &[], line.into_bytes())
        }
    };
    assert!(status == 204 || status == 200, "{w:?}: {status} {text}");
}

/// `(owner, host, door)` of label sets.
fn keys<'a>(sets: impl Iterator<Item = &'a serde_json::Value>) -> BTreeSet<(String, String, String)> {
    sets.map(|m| {
        let s = |k: &str| m[k].as_str().unwrap_or_default().to_owned();
        (s("owner"), s("host"), s("door"))
    })
    .collect()
}

/// Every read endpoint, as `tenant`, sees exactly `want` (its own series) and nothing of any
/// other tenant: no series, label value, metadata entry, exemplar or statistic.
fn check_reads(
    bin: &Binary,
    (tenant, naming): (&str, Naming),
    want: &BTreeSet<(String, String, String)>,
    t_ms: i64,
    embedded: bool,
) {
    let all = r#"{owner=~".+"}"#;
    let (start, end) = ((t_ms / 1000 - 60).to_string(), (t_ms / 1000 + 60).to_string());
    let ctx = format!("as {tenant} by {naming:?}");
    // Series.
    let v = json_of(get(bin, "/api/v1/series", &[("match[]", all), ("start", &start), ("end", &end)], tenant, naming));
    let found = keys(v["data"].as_array().unwrap().iter());
    assert_eq!(&found, want, "series {ctx}");
    assert!(v["data"].as_array().unwrap().iter().all(|m| m.get("__tenant__").is_none()), "{ctx}: {v}");
    // A selector naming another tenant's label finds nothing.
    let v = json_of(get(
        bin,
        "/api/v1/series",
        &[("match[]", r#"{owner=~".+", __tenant__=~".+"}"#), ("start", &start), ("end", &end)],
        tenant,
        naming,
    ));
    assert_eq!(v["data"], serde_json::json!([]), "{ctx}");
    // Labels and values.
    let v = json_of(get(bin, "/api/v1/labels", &[("start", &start), ("end", &end)], tenant, naming));
    let names: Vec<&str> = v["data"].as_array().unwrap().iter().filter_map(|n| n.as_str()).collect();
    assert!(!names.contains(&"__tenant__"), "{ctx}: {names:?}");
    assert_eq!(names.contains(&"owner"), !want.is_empty(), "{ctx}: {names:?}");
    let v = json_of(get(bin, "/api/v1/label/owner/values", &[("start", &start), ("end", &end)], tenant, naming));
    let owners: BTreeSet<String> = want.iter().map(|k| k.0.clone()).collect();
    let got: BTreeSet<String> = v["data"].as_array().unwrap().iter().map(|x| x.as_str().unwrap().to_owned()).collect();
    assert_eq!(got, owners, "label values {ctx}");
    let v = json_of(get(bin, "/api/v1/label/__tenant__/values", &[], tenant, naming));
    assert_eq!(v["data"], serde_json::json!([]), "{ctx}");
    // Instant and range queries.
    let q = format!("count by (owner, host, door) ({all})");
    let v = json_of(get(bin, "/api/v1/query", &[("query", &q), ("time", &(t_ms / 1000).to_string())], tenant, naming));
    let found = keys(v["data"]["result"].as_array().unwrap().iter().map(|r| &r["metric"]));
    assert_eq!(&found, want, "query {ctx}");
    let v = json_of(get(
        bin,
        "/api/v1/query_range",
        &[("query", &q), ("start", &start), ("end", &end), ("step", "15")],
        tenant,
        naming,
    ));
    let found = keys(v["data"]["result"].as_array().unwrap().iter().map(|r| &r["metric"]));
    assert_eq!(&found, want, "range query {ctx}");
    // Export and federation.
    let (status, text) = get(bin, "/api/v1/export", &[("match[]", all)], tenant, naming);
    assert_eq!(status, 200, "{text}");
    let exported = parse_lines(&text);
    let found: BTreeSet<_> = exported
        .keys()
        .map(|m| (m["owner"].clone(), m["host"].clone(), m.get("door").cloned().unwrap_or_default()))
        .collect();
    assert_eq!(&found, want, "export {ctx}");
    assert!(exported.keys().all(|m| !m.contains_key("__tenant__")), "{ctx}");
    let (status, text) = get(bin, "/federate", &[("match[]", all)], tenant, naming);
    assert_eq!(status, 200, "{text}");
    for other in TENANTS.iter().filter(|t| **t != tenant) {
        assert!(!text.contains(&format!("owner=\"{other}\"")), "federate {ctx}: {text}");
    }
    assert!(!text.contains("__tenant__"), "{ctx}: {text}");
    // Metadata and exemplars sent with remote-write.
    let v = json_of(get(bin, "/api/v1/metadata", &[], tenant, naming));
    for (name, entries) in v["data"].as_object().unwrap() {
        if name.starts_with("iso_meta_of_") {
            assert_eq!(entries[0]["help"], format!("sent by {tenant}"), "metadata {ctx}");
        }
    }
    let v = json_of(get(
        bin,
        "/api/v1/query_exemplars",
        &[("query", "iso_rw"), ("start", &start), ("end", &end)],
        tenant,
        naming,
    ));
    for s in v["data"].as_array().unwrap() {
        assert_eq!(s["seriesLabels"]["owner"], tenant, "exemplars {ctx}");
        assert!(s["seriesLabels"].get("__tenant__").is_none(), "{ctx}");
        for e in s["exemplars"].as_array().unwrap() {
            assert_eq!(e["labels"]["trace_id"], format!("trace-{tenant}"), "{ctx}");
        }
    }
    // Cardinality statistics (the embedded store's).
    let date = chrono::DateTime::from_timestamp_millis(t_ms).unwrap().format("%Y-%m-%d").to_string();
    let stats = if embedded {
        json_of(get(bin, "/api/v1/status/tsdb", &[("date", &date), ("topN", "1000")], tenant, naming))
    } else {
        serde_json::json!({"data": {"seriesCountByLabelValuePair": []}})
    };
    for pair in stats["data"]["seriesCountByLabelValuePair"].as_array().unwrap() {
        let name = pair["name"].as_str().unwrap();
        assert!(!name.starts_with("__tenant__"), "{ctx}: {name}");
        if let Some(owner) = name.strip_prefix("owner=") {
            assert_eq!(owner, tenant, "status/tsdb {ctx}");
        }
    }
    // Remote read.
    let req = proto::ReadRequest {
        queries: vec![proto::Query {
            start_timestamp_ms: t_ms - 60_000,
            end_timestamp_ms: t_ms + 60_000,
            matchers: vec![proto::LabelMatcher { r#type: 2, name: "owner".into(), value: ".+".into() }],
            hints: None,
        }],
        accepted_response_types: vec![0],
    };
    let (url, headers) = addressed(bin, "/api/v1/read", tenant, naming, false);
    let mut all_headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    all_headers.extend([("Content-Type", "application/x-protobuf"), ("Content-Encoding", "snappy")]);
    let resp = all_headers.iter().fold(client().post(url), |r, (k, v)| r.header(*k, *v)).body(snappy_body(&req)).send();
    let resp = resp.expect("remote read");
    assert_eq!(resp.status().as_u16(), 200, "remote read {ctx}");
    let ct = resp.headers().get("content-type").unwrap().to_str().unwrap().to_owned();
    let read = crate::remote_write::decode_read_response(&ct, &resp.bytes().unwrap());
    let found: BTreeSet<_> = read
        .keys()
        .map(|m| (m["owner"].clone(), m["host"].clone(), m.get("door").cloned().unwrap_or_default()))
        .collect();
    assert_eq!(&found, want, "remote read {ctx}");
}

/// Random tenants write random series through every door, each naming its tenant in one of the
/// three ways; then every read endpoint, asked as every tenant in every way, sees its series
/// and nothing of the others'. The operator reads several tenants at once, each series with its
/// `__tenant__`.
fn isolation_case(bin: &Binary, writes: Vec<(usize, usize, u8, Naming)>, embedded: bool) {
    let t_ms = recent_ms();
    let mut model: BTreeMap<&str, BTreeSet<(String, String, String)>> =
        TENANTS.iter().map(|t| (*t, BTreeSet::new())).collect();
    for (tenant, door, host, naming) in writes {
        let w = Written { tenant, door, host, naming };
        write_one(bin, &w, t_ms);
        let key = (TENANTS[tenant].to_owned(), format!("h{host}"), door.to_string());
        model.get_mut(TENANTS[tenant]).unwrap().insert(key);
    }
    for (tenant, want) in &model {
        for naming in [Naming::Header, Naming::Url, Naming::Token] {
            check_reads(bin, (tenant, naming), want, t_ms, embedded);
        }
    }
    // The operator reads two tenants at once: each series labelled with its tenant.
    let resp = client()
        .get(bin.url("/api/v1/series"))
        .query(&[("match[]", r#"{owner=~".+"}"#)])
        .header("Authorization", format!("Bearer {READ}"))
        .header("X-Scope-OrgID", "default|a")
        .send()
        .unwrap();
    let (status, text) = (resp.status().as_u16(), resp.text().unwrap());
    assert_eq!(status, 200, "{text}");
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let mut want: BTreeSet<(String, String)> = BTreeSet::new();
    for t in ["default", "a"] {
        want.extend(model[t].iter().map(|k| (t.to_owned(), k.0.clone())));
    }
    let got: BTreeSet<(String, String)> = v["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["__tenant__"].as_str().unwrap().to_owned(), m["owner"].as_str().unwrap().to_owned()))
        .collect();
    assert_eq!(got, want);
}

fn writes() -> impl Strategy<Value = Vec<(usize, usize, u8, Naming)>> {
    proptest::collection::vec((0usize..4, 0usize..5, 0u8..3, naming()), 1..14)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3, ..ProptestConfig::default() })]

    /// [`isolation_case`] on the embedded store.
    #[test]
    fn every_read_sees_only_its_tenants_series(writes in writes()) {
        let dir = tempfile::tempdir().unwrap();
        let bin = start(dir.path(), &[]);
        isolation_case(&bin, writes, true);
        bin.terminate();
    }
}

/// [`isolation_case`] on ClickHouse (two shards): the same isolation, a few random cases on
/// one cluster (each case its own database).
#[test]
fn every_read_sees_only_its_tenants_series_on_clickhouse() {
    let test = "every_read_sees_only_its_tenants_series_on_clickhouse";
    let dir = tempfile::tempdir().unwrap();
    let Some(shards) = crate::clickhouse::cluster(dir.path(), test) else { return };
    let urls = shards.iter().map(|s| s.url.as_str()).collect::<Vec<_>>().join(",");
    let config = ProptestConfig { cases: 2, failure_persistence: None, ..ProptestConfig::default() };
    let mut runner = proptest::test_runner::TestRunner::new(config);
    let case = std::sync::atomic::AtomicUsize::new(0);
    runner
        .run(&writes(), |w| {
            let n = case.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let node = dir.path().join(format!("node-{n}"));
            std::fs::create_dir_all(&node).unwrap();
            let database = format!("tenants_{n}");
            let bin = start(
                &node,
                &[
                    "--storage",
                    "clickhouse",
                    "--clickhouse-url",
                    &urls,
                    "--clickhouse-database",
                    &database,
                    "--retention",
                    "0",
                ],
            );
            isolation_case(&bin, w, false);
            bin.terminate();
            Ok(())
        })
        .unwrap();
}

/// What a tenant may not do is refused with a status naming why, and writes nothing.
#[test]
fn refusals_name_the_tenant_problem() {
    let dir = tempfile::tempdir().unwrap();
    let bin = start(dir.path(), &[]);
    let t_ms = recent_ms();
    let line = |labels: serde_json::Value| {
        format!("{}\n", serde_json::json!({"metric": labels, "values": [1.0], "timestamps": [t_ms]})).into_bytes()
    };
    let body = line(serde_json::json!({"__name__": "refused_m", "owner": "x"}));
    type Case<'a> = (Vec<(&'a str, String)>, String, u16, &'a str);
    let cases: Vec<Case> = vec![
        // A token acting for another tenant.
        (
            vec![("Authorization", format!("Bearer {}", token_of("a"))), ("X-Scope-OrgID", "team-b".into())],
            bin.url("/api/v1/import"),
            403,
            "belongs to tenant",
        ),
        // An invalid tenant id.
        (
            vec![("Authorization", format!("Bearer {WRITE}")), ("X-Scope-OrgID", "a/b".into())],
            bin.url("/api/v1/import"),
            400,
            "invalid tenant",
        ),
        // Several tenants on a write.
        (
            vec![("Authorization", format!("Bearer {WRITE}")), ("X-Scope-OrgID", "a|c.d".into())],
            bin.url("/api/v1/import"),
            400,
            "one tenant",
        ),
        // URL and header disagree.
        (
            vec![("Authorization", format!("Bearer {WRITE}")), ("X-Scope-OrgID", "a".into())],
            bin.url("/insert/c.d/prometheus/api/v1/import"),
            400,
            "the URL names tenant",
        ),
        // A select URL on a write path.
        (
            vec![("Authorization", format!("Bearer {WRITE}"))],
            bin.url("/select/a/prometheus/api/v1/import"),
            404,
            "read endpoints",
        ),
        // No credentials at all.
        (vec![], bin.url("/api/v1/import"), 401, "credentials"),
    ];
    for (headers, url, status, says) in cases {
        let h: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let (got, _, text) = post(&url, &h, body.clone());
        assert_eq!(got, status, "{url} {headers:?}: {text}");
        assert!(text.contains(says), "{url}: {text}");
    }
    // The reserved label, whoever sends it.
    for auth in [format!("Bearer {WRITE}"), format!("Bearer {}", token_of("a"))] {
        let sneaky = line(serde_json::json!({"__name__": "refused_m", "__tenant__": "team-b"}));
        let (got, _, text) = post(&bin.url("/api/v1/import"), &[("Authorization", auth.as_str())], sneaky);
        assert_eq!(got, 400, "{text}");
        assert!(text.contains("__tenant__") && text.contains("reserves"), "{text}");
    }
    // Reading several tenants needs the operator's credentials.
    let resp = client()
        .get(bin.url("/api/v1/labels"))
        .header("Authorization", format!("Bearer {}", token_of("a")))
        .header("X-Scope-OrgID", "a|team-b")
        .send()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 403);
    // A tenant's token does not reach the operator's endpoints.
    let resp = client()
        .post(bin.url("/api/v1/admin/tsdb/snapshot"))
        .header("Authorization", format!("Bearer {}", token_of("a")))
        .send()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 401);
    // Nothing of the refused requests was stored, for any tenant.
    for t in TENANTS {
        let v = json_of(get(&bin, "/api/v1/series", &[("match[]", "refused_m")], t, Naming::Token));
        assert_eq!(v["data"], serde_json::json!([]), "{t}");
    }
    bin.terminate();
}

/// A data directory written without `--tenants` opens, with it, as the default tenant's: its
/// series are the default tenant's, other tenants see none of them, and its readers (no header)
/// read on as before.
#[test]
fn a_directory_from_before_tenants_is_the_default_tenant() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let t_ms = recent_ms();
    let bin = Binary::spawn(&data, &[]);
    let lines: String = (0..5)
        .map(|i| {
            format!(
                "{}\n",
                serde_json::json!({"metric": {"__name__": "before_tenants", "i": i.to_string()}, "values": [i as f64], "timestamps": [t_ms]})
            )
        })
        .collect();
    assert_eq!(import(&bin.url(""), lines), (204, String::new()));
    let before = export(&bin.url(""), "before_tenants");
    bin.terminate();

    let bin = Binary::spawn(&data, &["--tenants"]);
    assert_eq!(export(&bin.url(""), "before_tenants"), before, "no header: the default tenant");
    let as_tenant = |t: &str| {
        let resp = client()
            .get(bin.url("/api/v1/export"))
            .query(&[("match[]", "before_tenants")])
            .header("X-Scope-OrgID", t)
            .send()
            .unwrap();
        parse_lines(&resp.text().unwrap())
    };
    assert_eq!(as_tenant("default"), before);
    assert!(as_tenant("a").is_empty(), "another tenant sees none of it");
    // Label names and values of the default tenant, alone in the store and beside another.
    let values = |t: &str, path: &str| -> Vec<String> {
        let resp = client().get(bin.url(path)).header("X-Scope-OrgID", t).send().unwrap();
        let v: serde_json::Value = serde_json::from_str(&resp.text().unwrap()).unwrap();
        v["data"].as_array().unwrap().iter().map(|x| x.as_str().unwrap().to_owned()).collect()
    };
    let i_values: Vec<String> = (0..5).map(|i| i.to_string()).collect();
    assert_eq!(values("default", "/api/v1/label/i/values"), i_values);
    assert!(values("default", "/api/v1/labels").contains(&"i".to_owned()));
    assert!(values("a", "/api/v1/label/i/values").is_empty());
    // A tenant writing the same labels gets a series of its own.
    let line =
        serde_json::json!({"metric": {"__name__": "before_tenants", "i": "0"}, "values": [42.0], "timestamps": [t_ms]});
    let (status, _, text) =
        post(&bin.url("/api/v1/import"), &[("X-Scope-OrgID", "a")], format!("{line}\n").into_bytes());
    assert_eq!(status, 204, "{text}");
    assert_eq!(as_tenant("a").len(), 1);
    assert_eq!(values("a", "/api/v1/label/i/values"), ["0"]);
    assert_eq!(values("default", "/api/v1/label/i/values"), i_values);
    assert!(!values("default", "/api/v1/labels").contains(&"__tenant__".to_owned()));
    assert_eq!(export(&bin.url(""), "before_tenants"), before, "the default tenant's series are untouched");
    bin.terminate();
}

/// `kill -9` during ingest from three tenants at once: every acknowledged sample is back after
/// the restart, in the tenant that wrote it, and no other.
#[test]
fn acknowledged_tenant_writes_survive_kill_9_in_their_tenant() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let bin = Binary::spawn(&data, &["--tenants"]);
    let base = bin.url("");
    let t0 = recent_ms() - 600_000;
    let acked: std::sync::Mutex<BTreeMap<&str, Vec<i64>>> = std::sync::Mutex::default();
    std::thread::scope(|scope| {
        for tenant in ["default", "a", "team-b"] {
            let (base, acked) = (&base, &acked);
            scope.spawn(move || {
                let client = client();
                for i in 0..2_000i64 {
                    let line = serde_json::json!({"metric": {"__name__": "crash_m", "writer": tenant},
                        "values": [i as f64], "timestamps": [t0 + i]});
                    let sent = try_post(
                        &client,
                        &format!("{base}/api/v1/import"),
                        &[("X-Scope-OrgID", tenant)],
                        format!("{line}\n").into_bytes(),
                    );
                    match sent {
                        Ok((204, _, _)) => acked.lock().unwrap().entry(tenant).or_default().push(t0 + i),
                        _ => break,
                    }
                }
            });
        }
        std::thread::sleep(std::time::Duration::from_millis(700));
        bin.kill9();
    });
    let acked = acked.into_inner().unwrap();
    assert!(acked.values().map(Vec::len).sum::<usize>() > 0, "some writes were acknowledged");
    let bin = Binary::spawn(&data, &["--tenants"]);
    for tenant in ["default", "a", "team-b"] {
        let resp = client()
            .get(bin.url("/api/v1/export"))
            .query(&[("match[]", "crash_m")])
            .header("X-Scope-OrgID", tenant)
            .send()
            .unwrap();
        let found = parse_lines(&resp.text().unwrap());
        assert!(found.keys().all(|m| m["writer"] == tenant), "{tenant} sees only its own: {found:?}");
        let have: BTreeSet<i64> = found.values().flatten().map(|(t, _)| *t).collect();
        let missing: Vec<&i64> = acked.get(tenant).into_iter().flatten().filter(|t| !have.contains(t)).collect();
        assert!(missing.is_empty(), "{tenant}: {} acknowledged samples lost: {missing:?}", missing.len());
    }
    bin.terminate();
}

/// Two real Prometheus 2.42 servers remote-write as two tenants, one naming it in the URL (with
/// the operator's write token), the other by its tenant's token alone; each tenant then reads,
/// the way Grafana's data source sends its custom header, its own Prometheus' series and
/// metadata and none of the other's. (Debian's Prometheus 2.42 sends no `remote_write.headers`,
/// so it cannot name its tenant in `X-Scope-OrgID`: checked by capturing its requests.)
#[test]
fn two_real_prometheus_servers_write_as_two_tenants() {
    let test = "tenants::two_real_prometheus_servers_write_as_two_tenants";
    if !crate::peers::available("prometheus", test) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = start(&dir.path().join("saltdb"), &[]);
    let addr = bin.url("").trim_start_matches("http://").to_owned();
    let config = |name: &str, path: &str, auth: &str| {
        format!(
            r#"
global:
  scrape_interval: 1s
  external_labels: {{prom: {name}}}
scrape_configs:
  - job_name: saltdb
    static_configs: [{{targets: ["{addr}"]}}]
remote_write:
  - url: http://{addr}{path}
    queue_config: {{batch_send_deadline: 500ms}}
    metadata_config: {{send_interval: 1s}}
{auth}
"#
        )
    };
    let (one_dir, two_dir) = (dir.path().join("one"), dir.path().join("two"));
    std::fs::create_dir_all(&one_dir).unwrap();
    std::fs::create_dir_all(&two_dir).unwrap();
    let by_url = format!("    authorization: {{credentials: {WRITE}}}");
    let by_token = format!("    authorization: {{credentials: {}}}", token_of("team-b"));
    let _one = crate::peers::Prometheus::start(&one_dir, &config("one", "/insert/a/prometheus/api/v1/write", &by_url));
    let _two = crate::peers::Prometheus::start(&two_dir, &config("two", "/api/v1/write", &by_token));
    // As Grafana asks: the operator's read token and the tenant in X-Scope-OrgID.
    let ask = |tenant: &str, path: &str, query: &[(&str, &str)]| -> serde_json::Value {
        let resp = client()
            .get(bin.url(path))
            .query(query)
            .header("Authorization", format!("Bearer {READ}"))
            .header("X-Scope-OrgID", tenant)
            .send()
            .unwrap();
        assert_eq!(resp.status().as_u16(), 200);
        serde_json::from_str(&resp.text().unwrap()).unwrap()
    };
    let proms_of = |tenant: &str| -> BTreeSet<String> {
        let v = ask(tenant, "/api/v1/query", &[("query", r#"count by (prom) ({job="saltdb"})"#)]);
        v["data"]["result"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["metric"]["prom"].as_str().unwrap().to_owned())
            .collect()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while proms_of("a").is_empty() || proms_of("team-b").is_empty() {
        let log = |d: &std::path::Path| std::fs::read_to_string(d.join("prometheus.log")).unwrap_or_default();
        assert!(
            std::time::Instant::now() < deadline,
            "no remote-written series within 60 s:\n{}\n{}\n{}",
            log(&one_dir),
            log(&two_dir),
            client()
                .get(bin.url("/metrics"))
                .send()
                .unwrap()
                .text()
                .unwrap()
                .lines()
                .filter(|l| l.contains("samples_") || l.contains("requests_total"))
                .collect::<Vec<_>>()
                .join("\n")
        );
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    // Give both a few more batches, then compare.
    std::thread::sleep(std::time::Duration::from_secs(3));
    assert_eq!(proms_of("a"), BTreeSet::from(["one".to_owned()]));
    assert_eq!(proms_of("team-b"), BTreeSet::from(["two".to_owned()]));
    assert!(proms_of("default").is_empty());
    assert!(proms_of("c.d").is_empty());
    let values = ask("a", "/api/v1/label/prom/values", &[]);
    assert_eq!(values["data"], serde_json::json!(["one"]));
    // Metadata (sent by Prometheus every second) reaches its tenant only.
    let has_metadata = |tenant: &str| ask(tenant, "/api/v1/metadata", &[]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while has_metadata("a")["data"].as_object().is_none_or(|m| m.is_empty()) {
        assert!(std::time::Instant::now() < deadline, "no metadata within 30 s");
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    assert_eq!(has_metadata("default")["data"], serde_json::json!({}), "no metadata in the default tenant");
    // The operator sees both, each labelled with its tenant.
    let both = ask("a|team-b", "/api/v1/query", &[("query", r#"count by (__tenant__, prom) (up{job="saltdb"})"#)]);
    let pairs: BTreeSet<(String, String)> = both["data"]["result"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (r["metric"]["__tenant__"].as_str().unwrap().to_owned(), r["metric"]["prom"].as_str().unwrap().to_owned())
        })
        .collect();
    assert_eq!(pairs, BTreeSet::from([("a".into(), "one".into()), ("team-b".into(), "two".into())]));
    bin.terminate();
}

/// `delete_tenant` removes every sample of one tenant and nothing of the others; a tenant's own
/// token cannot call it.
#[test]
fn deleting_a_tenant_leaves_the_others() {
    let dir = tempfile::tempdir().unwrap();
    let bin = start(dir.path(), &["--enable-admin-api"]);
    let t_ms = recent_ms();
    let lines: String = (0..50)
        .map(|i| {
            let line = serde_json::json!({"metric": {"__name__": "doomed_m", "i": i.to_string()},
                "values": (0..60).map(f64::from).collect::<Vec<_>>(),
                "timestamps": (0..60).map(|k| t_ms - 60_000 * k).rev().collect::<Vec<_>>()});
            format!("{line}\n")
        })
        .collect();
    for t in ["default", "a", "team-b"] {
        assert_eq!(send(&bin, "/api/v1/import", t, Naming::Header, &[], lines.clone().into_bytes()).0, 204);
    }
    let samples_of = |t: &str| -> usize {
        let (status, text) = get(&bin, "/api/v1/export", &[("match[]", "doomed_m")], t, Naming::Header);
        assert_eq!(status, 200, "{text}");
        parse_lines(&text).values().map(Vec::len).sum()
    };
    assert_eq!(samples_of("a"), 3000);
    let delete = |auth: String, tenant: &str| {
        post(
            &bin.url("/api/v1/admin/tsdb/delete_tenant"),
            &[("Authorization", auth.as_str()), ("X-Scope-OrgID", tenant)],
            Vec::new(),
        )
    };
    let (status, _, text) = delete(format!("Bearer {}", token_of("a")), "a");
    assert_eq!(status, 401, "a tenant's token cannot delete its tenant: {text}");
    // Nor read the tenants' status, which the operator can.
    let tenants_status = |auth: String| {
        let resp = client().get(bin.url("/api/v1/status/tenants")).header("Authorization", auth).send().unwrap();
        (resp.status().as_u16(), resp.text().unwrap())
    };
    assert_eq!(tenants_status(format!("Bearer {}", token_of("a"))).0, 403);
    let (status, text) = tenants_status(format!("Bearer {READ}"));
    assert_eq!(status, 200, "{text}");
    assert!(["\"a\"", "\"team-b\"", "\"default\""].iter().all(|t| text.contains(t)), "{text}");
    // And /metrics has each tenant's series and estimated bytes (of the windows' tables on
    // disk: here still in memory, so no byte count is asserted).
    let metrics = client().get(bin.url("/metrics")).send().unwrap().text().unwrap();
    let figure = |name: &str, t: &str| -> f64 {
        let prefix = format!("{name}{{tenant=\"{t}\"}} ");
        let line = metrics.lines().find(|l| l.starts_with(&prefix));
        line.and_then(|l| l[prefix.len()..].parse().ok()).unwrap_or_else(|| panic!("no {prefix}in {metrics}"))
    };
    for t in ["default", "a", "team-b"] {
        assert_eq!(figure("saltdb_tenant_series", t), 50.0, "{t}");
        assert!(figure("saltdb_tenant_disk_bytes_estimated", t) >= 0.0, "{t}");
    }
    assert!(metrics.contains("saltdb_tenant_figures_timestamp_seconds "), "{metrics}");
    let (status, _, text) = delete(format!("Bearer {WRITE}"), "a");
    assert_eq!(status, 200, "{text}");
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!((v["data"]["tenant"].as_str(), v["data"]["samples"].as_u64()), (Some("a"), Some(3000)));
    assert_eq!(samples_of("a"), 0);
    assert_eq!(samples_of("team-b"), 3000);
    assert_eq!(samples_of("default"), 3000);
    // The default tenant too, without touching the others.
    let (status, _, text) = delete(format!("Bearer {WRITE}"), "default");
    assert_eq!(status, 200, "{text}");
    assert_eq!((samples_of("default"), samples_of("team-b")), (0, 3000));
    bin.terminate();
}

/// `retention_period` per tenant in the limits file: at start-up each becomes a retention class,
/// so a restart drops one tenant's old days while another's (and the default tenant's, on
/// `--retention`) stay.
#[test]
fn retention_per_tenant_from_the_limits_file() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let limits = dir.path().join("limits.yml");
    std::fs::write(&limits, "overrides:\n  short:\n    retention_period: 3d\n").unwrap();
    let args = ["--tenants", "--tenant-limits-file", limits.to_str().unwrap(), "--retention", "30d"];
    let day = 86_400_000;
    let now = chrono::Utc::now().timestamp_millis();
    let old = now - 10 * day - (now - 10 * day).rem_euclid(day) + 3_600_000;
    let bin = Binary::spawn(&data, &args);
    for t in ["short", "long", "default"] {
        let line = serde_json::json!({"metric": {"__name__": "kept_m", "who": t}, "values": [1.0, 2.0], "timestamps": [old, now - 60_000]});
        let (status, _, text) =
            post(&bin.url("/api/v1/import"), &[("X-Scope-OrgID", t)], format!("{line}\n").into_bytes());
        assert_eq!(status, 204, "{t}: {text}");
    }
    let classes = get_json(&bin.url("/api/v1/status/storage"))["data"]["retentionClasses"].clone();
    assert!(classes.to_string().contains("__tenant__"), "the tenant's class is shown: {classes}");
    bin.terminate();
    // The restart runs retention: the short tenant's old day goes.
    let bin = Binary::spawn(&data, &args);
    let samples = |t: &str| -> Vec<i64> {
        let resp = client()
            .get(bin.url("/api/v1/export"))
            .query(&[("match[]", "kept_m")])
            .header("X-Scope-OrgID", t)
            .send()
            .unwrap();
        parse_lines(&resp.text().unwrap()).values().flatten().map(|(t, _)| *t).collect()
    };
    assert_eq!(samples("short"), [now - 60_000]);
    assert_eq!(samples("long"), [old, now - 60_000]);
    assert_eq!(samples("default"), [old, now - 60_000]);
    // The operator's view of the tenants: each with its series and a share of the bytes.
    let status = get_json(&bin.url("/api/v1/status/tenants"));
    let rows: BTreeMap<String, (u64, u64)> = status["data"]["byTenant"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (r["tenant"].as_str().unwrap().to_owned(), (r["series"].as_u64().unwrap(), r["windows"].as_u64().unwrap()))
        })
        .collect();
    assert_eq!(rows["short"], (1, 1), "{status}");
    assert_eq!(rows["long"], (1, 2), "{status}");
    assert_eq!(rows["default"], (1, 2), "{status}");
    // /metrics shows the same figures.
    let metrics = client().get(bin.url("/metrics")).send().unwrap().text().unwrap();
    for r in status["data"]["byTenant"].as_array().unwrap() {
        let t = r["tenant"].as_str().unwrap();
        for (name, field) in
            [("saltdb_tenant_series", "series"), ("saltdb_tenant_disk_bytes_estimated", "estimatedBytes")]
        {
            let line = format!("{name}{{tenant=\"{t}\"}} {}\n", r[field]);
            assert!(metrics.contains(&line), "{line} in {metrics}");
        }
    }
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_saltdb"))
        .args(["inspect", "--tenants", "--url", &bin.url("")])
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{table}");
    assert!(table.starts_with("tenant") && ["short", "long", "default"].iter().all(|t| table.contains(t)), "{table}");
    bin.terminate();
}

/// A changed `retention_period`, reloaded without a restart: the tenant's samples written after
/// the change follow it (dropped once older, by the maintenance pass), those written before keep
/// the retention they were written under.
#[test]
fn a_changed_retention_period_applies_without_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let limits = dir.path().join("limits.yml");
    std::fs::write(&limits, "overrides:\n  other:\n    ingestion_rate: 1000000\n").unwrap();
    let args = [
        "--tenants",
        "--tenant-limits-file",
        limits.to_str().unwrap(),
        "--retention",
        "30d",
        "--maintenance-interval",
        "1s",
    ];
    let bin = Binary::spawn(&dir.path().join("data"), &args);
    let day = 86_400_000;
    let now = chrono::Utc::now().timestamp_millis();
    let (ten_days, five_days) = (now - 10 * day, now - 5 * day);
    let write = |t_ms: i64| {
        let line = serde_json::json!({"metric": {"__name__": "shrinking_m"}, "values": [1.0], "timestamps": [t_ms]});
        let (status, _, text) =
            post(&bin.url("/api/v1/import"), &[("X-Scope-OrgID", "short")], format!("{line}\n").into_bytes());
        assert_eq!(status, 204, "{text}");
    };
    let samples = || -> Vec<i64> {
        let resp = client()
            .get(bin.url("/api/v1/export"))
            .query(&[("match[]", "shrinking_m")])
            .header("X-Scope-OrgID", "short")
            .send()
            .unwrap();
        parse_lines(&resp.text().unwrap()).values().flatten().map(|(t, _)| *t).collect()
    };
    write(ten_days);
    std::fs::write(&limits, "overrides:\n  short:\n    retention_period: 3d\n").unwrap();
    let resp = client().post(bin.url("/-/reload")).send().unwrap();
    assert_eq!(resp.status().as_u16(), 200, "{}", resp.text().unwrap_or_default());
    let classes = get_json(&bin.url("/api/v1/status/storage"))["data"]["retentionClasses"].clone();
    assert!(classes.to_string().contains("__tenant__=\\\"short\\\""), "the new rule is in force: {classes}");
    write(five_days);
    write(now - 60_000);
    // The maintenance pass drops the 3-day class's window of five days ago.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let got = samples();
        if got == [ten_days, now - 60_000] {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "after the reload: {got:?}");
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
    // A bad retention in a reloaded file keeps the limits in force.
    std::fs::write(&limits, "overrides:\n  short:\n    retention_period: soon\n").unwrap();
    let resp = client().post(bin.url("/-/reload")).send().unwrap();
    assert_eq!(resp.status().as_u16(), 500);
    assert!(resp.text().unwrap().contains("soon"));
    bin.terminate();
}
