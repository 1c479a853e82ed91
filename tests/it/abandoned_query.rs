//! An abandoned query stops: when the client of a long query goes away, the server stops
//! evaluating it (the CPU falls idle within a second or two) and its query slot is free for the
//! next client, instead of burning cores until `--query-timeout`.

use std::time::{Duration, Instant};

use crate::common::*;

/// CPU time (user + system) the process has used so far.
fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command (which may hold spaces) start after the last ')'.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = [11, 12].iter().filter_map(|&i| fields.get(i)?.parse::<u64>().ok()).sum();
    // USER_HZ is 100 on Linux.
    Duration::from_millis(ticks * 10)
}

#[test]
fn a_query_whose_client_went_away_stops_and_frees_its_slot() {
    let dir = tempfile::tempdir().unwrap();
    let bin = Binary::spawn(dir.path(), &["--retention", "0", "--query-max-concurrency", "1", "--query-timeout", "5m"]);
    let base = format!("http://{}", bin.addr);
    // 40 series of 3 h at 1 s: a per-second quantile over 3 h of each is minutes of work.
    let end = recent_ms() / 1000;
    let start = end - 10_800;
    let client = reqwest::blocking::Client::new();
    let mut body = String::new();
    for s in 0..40 {
        let ts: Vec<i64> = (start..end).map(|t| t * 1000).collect();
        let values: Vec<f64> = (0..ts.len()).map(|i| ((i * 7919 + s) % 1000) as f64).collect();
        body.push_str(
            &serde_json::json!({"metric": {"__name__": "busy", "s": s.to_string()}, "values": values, "timestamps": ts})
                .to_string(),
        );
        body.push('\n');
    }
    let resp = client.post(format!("{base}/api/v1/import")).body(body).send().unwrap();
    assert_eq!(resp.status().as_u16(), 204);

    let heavy =
        format!("{base}/api/v1/query_range?query=quantile_over_time(0.5,busy[3h])&start={start}&end={end}&step=1");
    let impatient = reqwest::blocking::Client::builder().timeout(Duration::from_millis(1_500)).build().unwrap();
    let before = cpu_time(bin.child.id());
    let abandoned = impatient.get(&heavy).send();
    assert!(abandoned.is_err(), "the heavy query finished within 1.5 s; it cannot show cancellation");
    let working = cpu_time(bin.child.id()) - before;
    assert!(working >= Duration::from_millis(500), "the server did not work on the query: {working:?} of CPU");

    // Give the server a moment to notice, then it must be idle.
    std::thread::sleep(Duration::from_millis(1_500));
    let idle_from = cpu_time(bin.child.id());
    std::thread::sleep(Duration::from_secs(2));
    let after = cpu_time(bin.child.id()) - idle_from;
    assert!(after < Duration::from_millis(400), "the server still burns {after:?} of CPU in 2 s on an abandoned query");

    // The only query slot is free: a small query is answered at once.
    let asked = Instant::now();
    let resp = client.get(format!("{base}/api/v1/query?query=count(busy)&time={end}")).send().unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let waited = asked.elapsed();
    assert!(waited < Duration::from_secs(2), "the next query waited {waited:?} for the slot");
    let answer: serde_json::Value = serde_json::from_str(&resp.text().unwrap()).unwrap();
    assert_eq!(answer["data"]["result"][0]["value"][1], "40");
    bin.terminate();
}
