//! A storage failure during a query is the server's fault: the client gets a 5xx (not a 4xx
//! that tells it to stop retrying), and the server keeps answering everything else.

use crate::common::*;

/// Replaces every sample row of the series whose labels contain `needle` with bytes that do not
/// decode, in a stopped server's data directory.
fn corrupt_rows_of(dir: &std::path::Path, needle: &str) -> usize {
    let db = fjall::Database::builder(dir).open().unwrap();
    let series = db.keyspace("series", fjall::KeyspaceCreateOptions::default).unwrap();
    let mut ids = Vec::new();
    for guard in series.iter() {
        let (key, value) = guard.into_inner().unwrap();
        if value.windows(needle.len()).any(|w| w == needle.as_bytes()) {
            ids.push(u64::from_be_bytes(key.as_ref().try_into().unwrap()));
        }
    }
    let mut corrupted = 0;
    for name in db.list_keyspace_names() {
        if !name.starts_with("points_") && !name.starts_with("chunks_") {
            continue;
        }
        let ks = db.keyspace(&name, fjall::KeyspaceCreateOptions::default).unwrap();
        let keys: Vec<fjall::Slice> = ks
            .iter()
            .map(|g| g.key().unwrap())
            .filter(|k| k.len() == 18 && ids.contains(&u64::from_be_bytes(k[2..10].try_into().unwrap())))
            .collect();
        for key in keys {
            // A raw-run marker with a truncated header.
            ks.insert(key, vec![0x80u8, 0xff]).unwrap();
            corrupted += 1;
        }
    }
    db.persist(fjall::PersistMode::SyncAll).unwrap();
    corrupted
}

#[test]
fn a_storage_failure_during_a_query_is_a_5xx() {
    let dir = tempfile::tempdir().unwrap();
    let t = recent_ms();
    let body = format!(
        "{}\n{}\n",
        serde_json::json!({"metric":{"__name__":"broken","part":"a"},"values":[1,2],"timestamps":[t - 60_000, t]}),
        serde_json::json!({"metric":{"__name__":"fine","part":"b"},"values":[3],"timestamps":[t]}),
    );
    let bin = Binary::spawn(dir.path(), &["--retention", "0"]);
    assert_eq!(import(&bin.url(""), body).0, 204);
    bin.terminate();
    assert!(corrupt_rows_of(dir.path(), "broken") > 0, "the series' rows were found");

    let bin = Binary::spawn(dir.path(), &["--retention", "0"]);
    let at = format!("{}", t as f64 / 1000.0);
    let instant = [("query", "broken"), ("time", at.as_str())];
    let range = [("query", "broken"), ("start", at.as_str()), ("end", at.as_str()), ("step", "15")];
    for (path, form) in [("/api/v1/query", &instant[..]), ("/api/v1/query_range", &range[..])] {
        let resp = client().post(bin.url(path)).form(form).send().unwrap();
        let status = resp.status().as_u16();
        let v: serde_json::Value = serde_json::from_str(&resp.text().unwrap()).unwrap();
        assert_eq!(status, 500, "{path}: {v}");
        assert_eq!(v["errorType"], "internal", "{v}");
        assert!(v["error"].as_str().unwrap().contains("corrupt"), "{v}");
    }
    let export = client().get(bin.url("/api/v1/export")).query(&[("match[]", "broken")]).send().unwrap();
    assert!(export.status().is_server_error(), "export: {}", export.status());
    // Everything else still works.
    let text = client().post(bin.url("/api/v1/query")).form(&[("query", "fine"), ("time", &at)]).send().unwrap().text();
    let v: serde_json::Value = serde_json::from_str(&text.unwrap()).unwrap();
    assert_eq!(v["data"]["result"][0]["value"][1], "3", "{v}");
    bin.terminate();
}
