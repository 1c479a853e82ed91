//! Access control (bearer tokens, basic auth), the admin API (delete_series, snapshot) and TLS,
//! driven over real HTTP(S).

use std::collections::BTreeMap;
use std::io::Read;

use saltdb::http::access::{AccessPolicy, Credentials, Exposure};
use saltdb::server::ServerConfig;

use crate::common::*;

const T0: i64 = 1_700_000_000_000;

fn start(dir: &std::path::Path, edit: impl FnOnce(&mut ServerConfig)) -> InProcess {
    let mut config = ServerConfig::new("127.0.0.1:0".parse().unwrap(), storage_config(dir));
    edit(&mut config);
    InProcess::start_with(runtime(), config)
}

/// Sends a request with an optional `Authorization` header; returns status, headers and body.
fn call(
    method: &str,
    url: &str,
    auth: Option<&str>,
    body: Option<String>,
) -> (u16, reqwest::header::HeaderMap, String) {
    let c = client();
    let mut req = match method {
        "GET" => c.get(url),
        "POST" => c.post(url),
        "PUT" => c.put(url),
        other => panic!("method {other}"),
    };
    if let Some(a) = auth {
        req = req.header("Authorization", a);
    }
    if let Some(b) = body {
        req = req.body(b);
    }
    let resp = req.send().expect("request");
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    (status, headers, resp.text().unwrap_or_default())
}

fn line(name: &str, host: &str, points: &[(i64, f64)]) -> String {
    let ts: Vec<i64> = points.iter().map(|p| p.0).collect();
    let vs: Vec<f64> = points.iter().map(|p| p.1).collect();
    format!("{}\n", serde_json::json!({"metric": {"__name__": name, "host": host}, "values": vs, "timestamps": ts}))
}

fn basic(user: &str, password: &str) -> String {
    use base64::Engine;
    format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}")))
}

#[test]
fn tokens_guard_the_read_and_write_paths_separately() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), |c| {
        c.access = AccessPolicy {
            write: Credentials::new(Some("w-secret"), None).unwrap(),
            read: Credentials::new(Some("r-secret"), None).unwrap(),
            metrics: Exposure::Public,
            health: Exposure::Public,
            ..AccessPolicy::default()
        };
    });
    let body = line("auth_metric", "a", &[(T0, 1.5)]);
    let import_url = server.url("/api/v1/import");
    let query_url = server.url(&format!("/api/v1/query?query=auth_metric&time={}", T0 / 1000));

    // Write path: nothing, the read token, a near-miss and a bearer-less scheme are refused.
    for auth in [None, Some("Bearer r-secret"), Some("Bearer w-secre"), Some("Bearer w-secret2"), Some("w-secret")] {
        let (status, headers, text) = call("POST", &import_url, auth, Some(body.clone()));
        assert_eq!(status, 401, "{auth:?}: {text}");
        assert_eq!(headers["www-authenticate"], "Bearer realm=\"saltdb\"", "{auth:?}");
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["errorType"], "unauthorized");
        assert!(v["error"].as_str().unwrap().contains("write"), "{text}");
        assert!(!text.contains("secret"), "the error must not echo a secret: {text}");
    }
    // Refused writes stored nothing.
    let (status, _, text) = call("GET", &query_url, Some("Bearer r-secret"), None);
    assert_eq!(status, 200, "{text}");
    assert!(text.contains(r#""result":[]"#), "{text}");

    assert_eq!(call("POST", &import_url, Some("Bearer w-secret"), Some(body)).0, 204);

    // Read path: the write token does not read; the read token does.
    assert_eq!(call("GET", &query_url, None, None).0, 401);
    assert_eq!(call("GET", &query_url, Some("Bearer w-secret"), None).0, 401);
    let (status, _, text) = call("GET", &query_url, Some("bearer   r-secret"), None);
    assert_eq!(status, 200, "{text}");
    assert!(text.contains(r#""1.5""#), "{text}");
    for path in ["/api/v1/series?match[]=up", "/api/v1/labels", "/api/v1/export?match[]=up", "/nope"] {
        assert_eq!(call("GET", &server.url(path), None, None).0, 401, "{path}");
    }
    // Metrics and health are public unless configured otherwise.
    assert_eq!(call("GET", &server.url("/metrics"), None, None).0, 200);
    assert_eq!(call("GET", &server.url("/-/healthy"), None, None).0, 200);
    // Refusals are counted per route and status.
    let (_, _, metrics) = call("GET", &server.url("/metrics"), None, None);
    assert!(metrics.lines().any(|l| l.contains("code=\"401\"") && l.contains("/api/v1/import")), "401s counted");
    server.stop();
}

#[test]
fn basic_auth_files_and_protected_metrics_and_health() {
    let dir = tempfile::tempdir().unwrap();
    let users = dir.path().join("readers");
    std::fs::write(&users, "# readers\ngrafana:pa:ss word\n\nops:hunter2\n").unwrap();
    let server = start(&dir.path().join("data"), |c| {
        c.access = AccessPolicy {
            write: Credentials::default(),
            read: Credentials::new(None, Some(&users)).unwrap(),
            metrics: Exposure::Read,
            health: Exposure::Read,
            ..AccessPolicy::default()
        };
    });
    // Writes are open (no write credentials configured).
    assert_eq!(call("POST", &server.url("/api/v1/import"), None, Some(line("b", "x", &[(T0, 2.0)]))).0, 204);
    let q = server.url(&format!("/api/v1/query?query=b&time={}", T0 / 1000));
    let (status, headers, _) = call("GET", &q, None, None);
    assert_eq!(status, 401);
    assert!(headers["www-authenticate"].to_str().unwrap().starts_with("Basic realm=\"saltdb\""));
    assert_eq!(call("GET", &q, Some(&basic("grafana", "pa:ss word")), None).0, 200);
    assert_eq!(call("GET", &q, Some(&basic("ops", "hunter2")), None).0, 200);
    assert_eq!(call("GET", &q, Some(&basic("ops", "hunter")), None).0, 401);
    assert_eq!(call("GET", &q, Some(&basic("grafana", "hunter2")), None).0, 401, "another user's password");
    assert_eq!(call("GET", &q, Some("Basic not-base64!"), None).0, 401);
    for path in ["/metrics", "/-/healthy", "/-/ready"] {
        assert_eq!(call("GET", &server.url(path), None, None).0, 401, "{path}");
        assert_eq!(call("GET", &server.url(path), Some(&basic("ops", "hunter2")), None).0, 200, "{path}");
    }
    server.stop();

    // A malformed file is refused at start-up with the line number.
    std::fs::write(&users, "ok:1\nno colon here\n").unwrap();
    let err = Credentials::new(None, Some(&users)).unwrap_err().to_string();
    assert!(err.contains("line 2"), "{err}");
}

#[test]
fn the_binary_reads_tokens_from_the_environment_and_never_logs_them() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_saltdb"))
        .args(["serve", "--listen", "127.0.0.1:0", "--retention", "0", "--data-dir"])
        .arg(dir.path())
        .env("SALTDB_WRITE_TOKEN", "env-write-token-7f3a")
        .env("SALTDB_READ_TOKEN", "env-read-token-9c1b")
        .env("RUST_LOG", "debug")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    std::io::BufRead::read_line(&mut stdout, &mut first).unwrap();
    let addr = first.trim().strip_prefix("saltdb listening on ").expect("listening line").to_owned();
    let base = format!("http://{addr}");
    // Drain stderr in the background so debug logging cannot block the server.
    let mut stderr = child.stderr.take().unwrap();
    let log = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let body = line("env_tok", "a", &[(T0, 3.0)]);
    assert_eq!(call("POST", &format!("{base}/api/v1/import"), Some("Bearer wrong"), Some(body.clone())).0, 401);
    assert_eq!(call("POST", &format!("{base}/api/v1/import"), Some("Bearer env-write-token-7f3a"), Some(body)).0, 204);
    let q = format!("{base}/api/v1/query?query=env_tok&time={}", T0 / 1000);
    let (status, _, text) = call("GET", &q, Some("Bearer env-read-token-9c1b"), None);
    assert_eq!(status, 200, "{text}");
    assert!(text.contains(r#""3""#), "{text}");
    let _ = std::process::Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
    assert!(child.wait().unwrap().success());
    let log = log.join().unwrap();
    assert!(!log.is_empty(), "debug logging produced output");
    assert!(!log.contains("env-write-token-7f3a") && !log.contains("env-read-token-9c1b"), "a token was logged");

    // --help names the variables but never shows their values.
    let help = std::process::Command::new(env!("CARGO_BIN_EXE_saltdb"))
        .args(["serve", "--help"])
        .env("SALTDB_WRITE_TOKEN", "env-write-token-7f3a")
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(help.contains("SALTDB_WRITE_TOKEN") && !help.contains("env-write-token-7f3a"), "{help}");
}

fn export_all(base: &str, auth: Option<&str>, selector: &str) -> Exported {
    let url = format!("{base}/api/v1/export?match[]={}", urlencode(selector));
    let (status, _, text) = call("GET", &url, auth, None);
    assert_eq!(status, 200, "{text}");
    parse_lines(&text)
}

fn urlencode(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

#[test]
fn admin_api_is_off_by_default_and_guarded_by_write_credentials() {
    let dir = tempfile::tempdir().unwrap();
    let off = start(&dir.path().join("off"), |_| {});
    for path in ["/api/v1/admin/tsdb/delete_series?match[]=up", "/api/v1/admin/tsdb/snapshot"] {
        let (status, _, text) = call("POST", &off.url(path), None, None);
        assert_eq!(status, 403, "{path}: {text}");
        assert!(text.contains("--enable-admin-api"), "{text}");
    }
    off.stop();

    let on = start(&dir.path().join("on"), |c| {
        c.admin_api = true;
        c.access.write = Credentials::new(Some("admin-w"), None).unwrap();
    });
    let url = on.url("/api/v1/admin/tsdb/delete_series?match[]=up");
    assert_eq!(call("POST", &url, None, None).0, 401);
    assert_eq!(call("POST", &url, Some("Bearer admin-w"), None).0, 204);
    let (status, _, text) = call("POST", &on.url("/api/v1/admin/tsdb/delete_series"), Some("Bearer admin-w"), None);
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("match[]"), "{text}");
    on.stop();
}

#[test]
fn delete_series_removes_the_range_from_hot_and_sealed_windows() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = ServerConfig::new("127.0.0.1:0".parse().unwrap(), storage_config(dir.path()));
    config.admin_api = true;
    config.maintenance.ooo_grace_ms = None;
    let server = InProcess::start_with(runtime(), config);
    let base = server.url("");
    // Two series over two days (two windows), one sample per hour.
    let hour = 3_600_000;
    let day0 = T0 - T0 % 86_400_000;
    let points: Vec<(i64, f64)> = (0..48).map(|h| (day0 + h * hour, h as f64 + 0.25)).collect();
    let body = line("del_me", "a", &points) + &line("del_me", "b", &points) + &line("keep_me", "a", &points);
    assert_eq!(import(&base, body).0, 204);
    // Seal the first day so the deletion has to rewrite chunks there.
    let sealed = server
        .server
        .as_ref()
        .unwrap()
        .storage()
        .expect("embedded store")
        .seal_window(day0)
        .unwrap()
        .expect("first day sealed");
    assert_eq!(sealed.samples, 3 * 24);

    // Delete host a of del_me from hour 20 to hour 30 (crossing the window boundary).
    let (from, to) = (day0 + 20 * hour, day0 + 30 * hour);
    let url = format!(
        "{base}/api/v1/admin/tsdb/delete_series?match[]={}&start={}&end={}",
        urlencode(r#"del_me{host="a"}"#),
        from / 1000,
        to / 1000
    );
    assert_eq!(call("PUT", &url, None, None).0, 204);
    let got = export_all(&base, None, r#"{__name__=~"del_me|keep_me"}"#);
    let key = |name: &str, host: &str| {
        BTreeMap::from([("__name__".to_owned(), name.to_owned()), ("host".to_owned(), host.to_owned())])
    };
    let all: Vec<(i64, u64)> = points.iter().map(|(t, v)| (*t, v.to_bits())).collect();
    let kept: Vec<(i64, u64)> = all.iter().copied().filter(|(t, _)| *t < from || *t > to).collect();
    assert_eq!(got[&key("del_me", "a")], kept);
    assert_eq!(got[&key("del_me", "b")], all);
    assert_eq!(got[&key("keep_me", "a")], all);

    // Deleting all of host b's second day: the series disappears from series queries there,
    // but stays listed for the first day.
    let url = format!(
        "{base}/api/v1/admin/tsdb/delete_series?match[]={}&start={}",
        urlencode(r#"del_me{host="b"}"#),
        (day0 + 24 * hour) / 1000
    );
    assert_eq!(call("POST", &url, None, None).0, 204);
    let series_in = |start: i64, end: i64| {
        let url = format!("{base}/api/v1/series?match[]=del_me&start={}&end={}", start / 1000, end / 1000);
        let (status, _, text) = call("GET", &url, None, None);
        assert_eq!(status, 200, "{text}");
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let mut hosts: Vec<String> =
            v["data"].as_array().unwrap().iter().map(|s| s["host"].as_str().unwrap().to_owned()).collect();
        hosts.sort();
        hosts
    };
    assert_eq!(series_in(day0 + 25 * hour, day0 + 47 * hour), vec!["a"]);
    assert_eq!(series_in(day0, day0 + 10 * hour), vec!["a", "b"]);

    // The deleted series can be written again and reads back.
    assert_eq!(import(&base, line("del_me", "b", &[(day0 + 40 * hour, 99.0)])).0, 204);
    assert_eq!(series_in(day0 + 25 * hour, day0 + 47 * hour), vec!["a", "b"]);
    let got = export_all(&base, None, r#"del_me{host="b"}"#);
    let b = &got[&key("del_me", "b")];
    assert_eq!(b.len(), 25);
    assert_eq!(b.last(), Some(&(day0 + 40 * hour, 99.0f64.to_bits())));

    // The deletion survives a restart (and a re-seal of the first day).
    server.stop();
    let mut config = ServerConfig::new("127.0.0.1:0".parse().unwrap(), storage_config(dir.path()));
    config.maintenance.ooo_grace_ms = None;
    let again = InProcess::start_with(runtime(), config);
    let got = export_all(&again.url(""), None, r#"del_me{host="a"}"#);
    assert_eq!(got[&key("del_me", "a")], kept);
    again.stop();
}

#[test]
fn snapshot_is_a_consistent_copy_that_opens_as_a_database() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut config = ServerConfig::new("127.0.0.1:0".parse().unwrap(), storage_config(&data));
    config.admin_api = true;
    let server = InProcess::start_with(runtime(), config);
    let base = server.url("");
    let (body, before) = dataset(50, 20, T0, "snap");
    assert_eq!(import(&base, body).0, 204);

    let (status, _, text) = call("POST", &server.url("/api/v1/admin/tsdb/snapshot?skip_head=true"), None, None);
    assert_eq!(status, 200, "{text}");
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["status"], "success");
    let name = v["data"]["name"].as_str().unwrap().to_owned();
    let snap_dir = data.join("snapshots").join(&name);
    assert!(snap_dir.is_dir(), "{snap_dir:?}");

    // Later writes do not reach the snapshot.
    let (later, _) = dataset(10, 5, T0 + 86_400_000, "later");
    assert_eq!(import(&base, later).0, 204);
    assert_eq!(call("POST", &server.url("/api/v1/admin/tsdb/snapshot?bogus=1"), None, None).0, 400);
    server.stop();

    // The original directory, snapshot folder inside, still opens with everything.
    let original = InProcess::start(storage_config(&data));
    assert_eq!(export(&original.url(""), r#"{__name__=~"snap_.*"}"#), before);
    assert!(!export(&original.url(""), r#"{__name__=~"later_.*"}"#).is_empty());
    original.stop();

    let copy = InProcess::start(storage_config(&snap_dir));
    assert_eq!(export(&copy.url(""), r#"{__name__=~"snap_.*"}"#), before);
    assert!(export(&copy.url(""), r#"{__name__=~"later_.*"}"#).is_empty());
    // The copy accepts writes of its own.
    let (more, expected_more) = dataset(3, 3, T0 + 2 * 86_400_000, "more");
    assert_eq!(import(&copy.url(""), more).0, 204);
    assert_eq!(export(&copy.url(""), r#"{__name__=~"more_.*"}"#), expected_more);
    copy.stop();
}

fn self_signed(dir: &std::path::Path) -> (std::path::PathBuf, std::path::PathBuf, Vec<u8>) {
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).unwrap();
    let cert_pem = cert.cert.pem();
    let cert_path = dir.join("cert.pem");
    let key_path = dir.join("key.pem");
    std::fs::write(&cert_path, &cert_pem).unwrap();
    std::fs::write(&key_path, cert.signing_key.serialize_pem()).unwrap();
    (cert_path, key_path, cert_pem.into_bytes())
}

#[test]
fn tls_serves_https_and_survives_plain_http_and_bad_handshakes() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key, pem) = self_signed(dir.path());
    let server = start(&dir.path().join("data"), |c| {
        c.tls = Some(saltdb::http::tls::TlsFiles { cert: cert.clone(), key: key.clone() });
        c.access.write = Credentials::new(Some("tls-w"), None).unwrap();
    });
    let port = server.addr.port();
    let https = reqwest::blocking::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(&pem).unwrap())
        .timeout(std::time::Duration::from_secs(30))
        .build()
        .unwrap();
    let base = format!("https://localhost:{port}");

    // Plain HTTP and garbage on the TLS port get no HTTP answer, and the server keeps serving.
    assert!(client().get(format!("http://127.0.0.1:{port}/-/healthy")).send().is_err(), "plain HTTP is not served");
    {
        use std::io::Write;
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.write_all(b"\x16\x03\x01\x00\x05garbage-not-a-hello").unwrap();
    }
    // A client that does not trust the certificate fails the handshake.
    assert!(client().get(format!("{base}/-/healthy")).send().is_err());

    let resp = https.get(format!("{base}/-/healthy")).send().unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let body = line("tls_metric", "a", &[(T0, 4.5)]);
    let resp = https.post(format!("{base}/api/v1/import")).bearer_auth("tls-w").body(body).send().unwrap();
    assert_eq!(resp.status().as_u16(), 204);
    let resp = https
        .get(format!("{base}/api/v1/query"))
        .query(&[("query", "tls_metric"), ("time", &(T0 / 1000).to_string())])
        .send()
        .unwrap();
    let text = resp.text().unwrap();
    assert!(text.contains(r#""4.5""#), "{text}");
    server.stop();

    // A key that is not PEM stops start-up with the file named, before the data dir is touched.
    std::fs::write(&key, "not a key").unwrap();
    let mut config = ServerConfig::new("127.0.0.1:0".parse().unwrap(), storage_config(&dir.path().join("never")));
    config.tls = Some(saltdb::http::tls::TlsFiles { cert, key: key.clone() });
    let err = match runtime().block_on(saltdb::server::Server::start(config)) {
        Ok(_) => panic!("started with a bad key"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("key") && err.contains(&key.display().to_string()), "{err}");
    assert!(!dir.path().join("never").exists());
}
