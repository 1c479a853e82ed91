//! The query API's read endpoints ignore parameters they do not read, as Prometheus and
//! VictoriaMetrics do (clients add their own: `nocache`, `partial_response`, `dedup`,
//! `max_source_resolution`, Grafana's custom query parameters): every answer with them equals the
//! answer without them, for GET and for a POSTed form. Malformed values of the parameters an
//! endpoint does read are still refused, and the write doors and the admin API still refuse
//! what they do not know (a misspelled write or delete parameter would change what is stored).

use crate::common::*;

/// What clients of Prometheus-compatible servers add to their requests.
const EXTRA: &str = "nocache=1&partial_response=true&dedup=false&max_source_resolution=0s&customParam=x";

#[test]
fn read_endpoints_ignore_parameters_they_do_not_read() {
    let dir = tempfile::tempdir().unwrap();
    let saltdb = InProcess::start(storage_config(dir.path()));
    let base = saltdb.url("");
    let now = recent_ms();
    let (t1, t2) = (now - 60_000, now - 30_000);
    let lines = format!(
        "{{\"metric\":{{\"__name__\":\"up\",\"job\":\"a\"}},\"values\":[1,0],\"timestamps\":[{t1},{t2}]}}\n\
         {{\"metric\":{{\"__name__\":\"up\",\"job\":\"b\"}},\"values\":[1,1],\"timestamps\":[{t1},{t2}]}}\n"
    );
    assert_eq!(import(&base, lines), (204, String::new()));
    let (start, end, at) = ((now - 120_000) / 1000, now / 1000, t2 / 1000);
    let paths = [
        format!("/api/v1/query?query=sum(up)&time={at}"),
        format!("/api/v1/query_range?query=up&start={start}&end={end}&step=15s"),
        format!("/api/v1/series?match[]=up&start={start}&end={end}"),
        format!("/api/v1/labels?start={start}&end={end}"),
        format!("/api/v1/label/job/values?start={start}&end={end}"),
        "/api/v1/metadata?limit=5".to_owned(),
        format!("/api/v1/query_exemplars?query=up&start={start}&end={end}"),
        "/api/v1/status/tsdb?topN=5".to_owned(),
        "/federate?match[]=up".to_owned(),
        format!("/api/v1/export?match[]=up&start={start}&end={end}"),
    ];
    let c = client();
    for path in &paths {
        let plain = c.get(format!("{base}{path}")).send().unwrap();
        assert_eq!(plain.status().as_u16(), 200, "{path}");
        let plain = plain.text().unwrap();
        let with = c.get(format!("{base}{path}&{EXTRA}")).send().unwrap();
        assert_eq!(with.status().as_u16(), 200, "{path}&{EXTRA}: {:?}", with.text());
        assert_eq!(with.text().unwrap(), plain, "{path}: the extra parameters changed the answer");
    }
    // A POSTed form, as Grafana sends queries.
    let (path, form) = ("/api/v1/query", format!("query=sum(up)&time={at}"));
    let plain =
        c.post(format!("{base}{path}")).header("Content-Type", "application/x-www-form-urlencoded").body(form.clone());
    let plain = plain.send().unwrap().text().unwrap();
    let with = c
        .post(format!("{base}{path}"))
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body(format!("{form}&{EXTRA}"))
        .send()
        .unwrap();
    assert_eq!(with.status().as_u16(), 200);
    assert_eq!(with.text().unwrap(), plain);
    assert!(plain.contains(r#""value":["#) && plain.contains(r#""1""#), "sum(up) at t2 is 1: {plain}");

    // A parameter the endpoint reads is still checked, extras or not.
    let bad = c.get(format!("{base}/api/v1/query?query=up&time=soon&{EXTRA}")).send().unwrap();
    assert_eq!(bad.status().as_u16(), 400);
    let error: serde_json::Value = serde_json::from_str(&bad.text().unwrap()).unwrap();
    assert!(error["error"].as_str().unwrap_or_default().contains("\"time\""), "{error}");
    // The write doors and the admin API still refuse what they do not know.
    for (url, name) in [("/api/v1/import?precison=s", "precison"), ("/write?precison=s", "precison")] {
        let resp = c.post(format!("{base}{url}")).body("").send().unwrap();
        assert_eq!(resp.status().as_u16(), 400, "{url}");
        assert!(resp.text().unwrap().contains(name), "{url}");
    }
    saltdb.stop();
}
