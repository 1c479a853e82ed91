//! The ruler API as Grafana's alerting UI and Mimir's tools use it: feature discovery, groups
//! created, read, replaced and deleted as YAML, evaluated beside the `--rule-file` groups, and
//! every rule file case of Prometheus' `rulefmt` round-tripped through it.
//!
//! Shapes follow Grafana's `public/app/features/alerting/unified/api/buildInfo.ts`
//! (`discoverDataSourceFeatures`: buildinfo, then `/api/v1/status/flags`, then a probe of
//! `<ruler>/test/test` whose `404 group does not exist` means "ruler supported") and
//! `ruler.ts` (`rulerGetRequest`), its backend's `pkg/services/ngalert/api/lotex_ruler.go`
//! (prefixes `/rules` and, for Mimir, `/config/v1/rules`), and Mimir's
//! `pkg/ruler/api.go` (YAML bodies, `202 Accepted` with `{"status":"success",...}` on changes).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::common::{client, get_json, Binary};

const GROUP: &str = "name: api-group\ninterval: 1s\nrules:\n  - record: job:up:count\n    expr: count by (job) (up)\n";

fn text(resp: reqwest::blocking::Response) -> (u16, String) {
    let status = resp.status().as_u16();
    (status, resp.text().unwrap_or_default())
}

#[test]
fn grafana_discovers_the_ruler_and_groups_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let server = Binary::spawn(dir.path(), &[]);
    let base = server.url("");

    // Discovery, in Grafana's order.
    let info = get_json(&format!("{base}/api/v1/status/buildinfo"));
    assert_eq!(info["data"]["features"]["ruler_config_api"], "true");
    let flags = get_json(&format!("{base}/api/v1/status/flags"));
    assert_eq!(flags["status"], "success");
    for prefix in ["/rules", "/config/v1/rules", "/prometheus/config/v1/rules"] {
        let (status, body) = text(client().get(format!("{base}{prefix}/test/test")).send().unwrap());
        assert_eq!((status, body.trim()), (404, "group does not exist"), "{prefix}");
    }
    let (status, body) = text(client().get(format!("{base}/prometheus/config/v1/rules")).send().unwrap());
    assert_eq!((status, body.trim()), (404, "no rule groups found"));

    // Create (Grafana's Mimir path), read back three ways.
    let resp = client()
        .post(format!("{base}/config/v1/rules/team%20a"))
        .header("Content-Type", "application/yaml")
        .body(GROUP)
        .send()
        .unwrap();
    let (status, body) = text(resp);
    assert_eq!(status, 202, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v, serde_json::json!({"status": "success", "data": null, "errorType": "", "error": ""}));

    let (status, all) = text(client().get(format!("{base}/prometheus/config/v1/rules")).send().unwrap());
    assert_eq!(status, 200);
    let all: serde_norway::Value = serde_norway::from_str(&all).unwrap();
    assert_eq!(all["team a"][0]["name"].as_str(), Some("api-group"), "{all:?}");
    let (_, ns) = text(client().get(format!("{base}/prometheus/config/v1/rules/team%20a")).send().unwrap());
    let ns: serde_norway::Value = serde_norway::from_str(&ns).unwrap();
    assert_eq!(ns["team a"][0]["rules"][0]["record"].as_str(), Some("job:up:count"));
    let (_, g) = text(client().get(format!("{base}/rules/team%20a/api-group")).send().unwrap());
    let g: serde_norway::Value = serde_norway::from_str(&g).unwrap();
    assert_eq!(g["rules"][0]["expr"].as_str(), Some("count by (job) (up)"));

    // It is evaluated: /api/v1/rules lists it under its namespace.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let rules = get_json(&format!("{base}/api/v1/rules"));
        let group = &rules["data"]["groups"][0];
        if group["file"] == "team a" && group["rules"][0]["health"] == "ok" {
            break;
        }
        assert!(Instant::now() < deadline, "the API group was not evaluated: {rules}");
        std::thread::sleep(Duration::from_millis(200));
    }

    // A bad group is refused and changes nothing.
    let (status, body) = text(
        client()
            .post(format!("{base}/config/v1/rules/team%20a"))
            .body("name: api-group\nrules:\n  - record: x\n")
            .send()
            .unwrap(),
    );
    assert_eq!(status, 400, "{body}");
    let (_, g) = text(client().get(format!("{base}/rules/team%20a/api-group")).send().unwrap());
    assert!(g.contains("job:up:count"), "{g}");

    // Delete the group, then the namespace is gone.
    let (status, _) =
        text(client().delete(format!("{base}/prometheus/config/v1/rules/team%20a/api-group")).send().unwrap());
    assert_eq!(status, 202);
    let (status, _) = text(client().get(format!("{base}/prometheus/config/v1/rules/team%20a")).send().unwrap());
    assert_eq!(status, 404);
    assert_eq!(get_json(&format!("{base}/api/v1/rules"))["data"]["groups"], serde_json::json!([]));
}

#[test]
fn groups_set_through_the_api_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let server = Binary::spawn(dir.path(), &[]);
    let (status, _) = text(client().post(server.url("/prometheus/config/v1/rules/ns")).body(GROUP).send().unwrap());
    assert_eq!(status, 202);
    server.kill9();
    let server = Binary::spawn(dir.path(), &[]);
    let rules = get_json(&server.url("/api/v1/rules"));
    assert_eq!(rules["data"]["groups"][0]["name"], "api-group", "{rules}");
}

fn rulefmt_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("SALTDB_RULES_TESTS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/rules-tests"))
        .join("rulefmt-head");
    if dir.is_dir() {
        return Some(dir);
    }
    crate::skip::skip(
        "ruler_api::every_rulefmt_case_round_trips",
        &format!("Prometheus' rule file cases are not at {}", dir.display()),
        "set SALTDB_RULES_TESTS to a folder holding rulefmt-head/",
    );
    None
}

/// Every group of every good `rulefmt` case is accepted and read back equal; every bad case is
/// refused (400) group by group where the problem is in a group.
#[test]
fn every_rulefmt_case_round_trips() {
    let Some(cases) = rulefmt_dir() else { return };
    let dir = tempfile::tempdir().unwrap();
    let server = Binary::spawn(dir.path(), &[]);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&cases).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    let (mut accepted, mut refused) = (0, 0);
    for (n, path) in files.iter().enumerate() {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let mut file: serde_norway::Value = match serde_norway::from_slice(&std::fs::read(path).unwrap()) {
            Ok(v) => v,
            Err(_) => continue, // not YAML at all: nothing to post as a group
        };
        file.apply_merge().unwrap();
        let Some(groups) = file.get("groups").and_then(|g| g.as_sequence()) else { continue };
        // `legacy_validation_*` cases are bad only under Prometheus 2's name rules (`saltdb check
        // rules --name-validation=legacy`); the server checks names as Prometheus 3 does.
        let bad = name.ends_with(".bad.yaml") && !name.starts_with("legacy_validation_");
        let mut any_refused = false;
        for group in groups {
            let body = serde_norway::to_string(group).unwrap();
            let url = server.url(&format!("/prometheus/config/v1/rules/case{n}"));
            let (status, answer) = text(client().post(url).body(body.clone()).send().unwrap());
            if status == 400 {
                any_refused = true;
                continue;
            }
            assert_eq!(status, 202, "{name}: {answer}");
            let group_name = group["name"].as_str().unwrap_or_default();
            let url = server.url(&format!("/prometheus/config/v1/rules/case{n}/{}", urlencode(group_name)));
            let (status, back) = text(client().get(url).send().unwrap());
            assert_eq!(status, 200, "{name}: {back}");
            let back: serde_norway::Value = serde_norway::from_str(&back).unwrap();
            assert_eq!(&back, group, "{name}: the group reads back as sent");
        }
        if bad {
            // A repeated group name is a problem of the file, not of a group: through the API
            // the second post replaces the first, as in Mimir.
            assert!(any_refused || name == "duplicate_grp.bad.yaml", "{name}: no group was refused");
            refused += 1;
        } else {
            assert!(!any_refused, "{name}: a good case was refused");
            accepted += 1;
        }
    }
    assert!(accepted >= 5 && refused >= 5, "cases read: {accepted} good, {refused} bad");
    println!("rulefmt cases through the ruler API: {accepted} good accepted and read back, {refused} bad posted");
}

fn urlencode(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>().replace('+', "%20")
}
