//! `saltdb rules replay`: rule files evaluated over past data by a running server, driven
//! through the real binary's command line. Outputs land at the groups' live slots, equal the
//! rules' expressions evaluated at those times, each rule reads the previous one's output,
//! alerts go pending, firing and keep firing as live evaluation has them, `limit` is enforced,
//! and bad input is refused before anything is written.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};

use crate::common::{export, get_json, import, Binary};

const STEP_MS: i64 = 15_000;
const MINUTE_MS: i64 = 60_000;

const RULES: &str = r#"
groups:
  - name: traffic
    interval: 1m
    rules:
      - record: job:requests:rate5m
        expr: sum(rate(requests_total[5m]))
      - record: job:requests:rate5m_x2
        expr: job:requests:rate5m * 2
      - alert: HighTraffic
        expr: job:requests:rate5m > 0.2
        for: 5m
        keep_firing_for: 3m
        labels:
          severity: page
        annotations:
          summary: "traffic at {{ $value | printf \"%.3f\" }} requests/s"
"#;

/// The start of the data: three hours ago, on a minute.
fn t0() -> i64 {
    let now = chrono::Utc::now().timestamp_millis();
    now - now % MINUTE_MS - 180 * MINUTE_MS
}

/// Two counters over two hours every 15 s: `a` grows by 1 a step throughout, `b` by 6 a step
/// from minute 60 to minute 80 only (so the sum's 5-minute rate crosses 0.2 for about 25 min).
fn feed(base: &str, t0: i64) {
    let steps = 120 * MINUTE_MS / STEP_MS;
    let ts: Vec<i64> = (0..steps).map(|i| t0 + i * STEP_MS).collect();
    let a: Vec<f64> = (0..steps).map(|i| i as f64).collect();
    let mut b = Vec::with_capacity(ts.len());
    let mut total = 0.0;
    for &t in &ts {
        if t > t0 + 60 * MINUTE_MS && t <= t0 + 80 * MINUTE_MS {
            total += 6.0;
        }
        b.push(total);
    }
    let line = |instance: &str, values: &[f64]| {
        serde_json::json!({
            "metric": {"__name__": "requests_total", "job": "web", "instance": instance},
            "values": values,
            "timestamps": ts,
        })
        .to_string()
    };
    let (status, body) = import(base, format!("{}\n{}\n", line("a", &a), line("b", &b)));
    assert_eq!(status, 204, "import: {body}");
}

fn replay(base: &str, from_ms: i64, to_ms: i64, files: &[&Path]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_saltdb"))
        .args(["rules", "replay", "--url", base])
        .arg(format!("--from={}", from_ms as f64 / 1000.0))
        .arg(format!("--to={}", to_ms as f64 / 1000.0))
        .args(files)
        .output()
        .expect("run saltdb rules replay")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The value of `expr` at `t_ms`, by the query API (one sample expected).
fn value_at(base: &str, expr: &str, t_ms: i64) -> Option<f64> {
    let url = format!(
        "{base}/api/v1/query?query={}&time={}",
        form_urlencoded::byte_serialize(expr.as_bytes()).collect::<String>(),
        t_ms as f64 / 1000.0
    );
    let v = get_json(&url);
    assert_eq!(v["status"], "success", "{v}");
    let result = v["data"]["result"].as_array().cloned().unwrap_or_default();
    assert!(result.len() <= 1, "{expr} at {t_ms}: {v}");
    result.first().map(|s| s["value"][1].as_str().unwrap().parse().unwrap())
}

/// The one series of `selector` as (timestamp, value) pairs, stale markers as `None`.
fn samples(base: &str, selector: &str) -> Vec<(i64, Option<f64>)> {
    let exported = export(base, selector);
    assert_eq!(exported.len(), 1, "{selector}: {exported:?}");
    exported
        .into_values()
        .next()
        .unwrap()
        .into_iter()
        .map(|(t, bits)| (t, (bits != saltdb::sample::STALE_NAN_BITS).then(|| f64::from_bits(bits))))
        .collect()
}

#[test]
fn a_replay_writes_what_live_evaluation_would_have_written_at_the_same_slots() {
    let dir = tempfile::tempdir().unwrap();
    let server = Binary::spawn(&dir.path().join("data"), &[]);
    let base = server.url("");
    let t0 = t0();
    feed(&base, t0);
    let file = dir.path().join("traffic.yml");
    std::fs::write(&file, RULES).unwrap();
    let (from, to) = (t0 + 10 * MINUTE_MS, t0 + 110 * MINUTE_MS);

    let out = replay(&base, from, to, &[&file]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "status {:?}\nstdout: {stdout}\nstderr: {}", out.status, text(&out.stderr));

    // The slots a live evaluator of this file and group picks within the span.
    let hash = saltdb::rules::slot::group_hash(&file.display().to_string(), "traffic");
    let slots: Vec<i64> = saltdb::rules::replay::slots(hash, MINUTE_MS, from, to).collect();
    assert_eq!(slots.len(), 100, "one slot a minute over 100 minutes");
    assert!(
        stdout.contains(&format!("traffic: {} evaluations", slots.len())) && stdout.contains("0 failed"),
        "{stdout}"
    );

    // Recording outputs: at exactly those slots, equal to the expression at that time; the
    // second rule read the first one's output.
    let recorded = samples(&base, "job:requests:rate5m");
    assert_eq!(recorded.iter().map(|s| s.0).collect::<Vec<_>>(), slots);
    let doubled = samples(&base, "job:requests:rate5m_x2");
    assert_eq!(doubled.len(), slots.len());
    let mut firing_condition = Vec::new();
    for (i, &t) in slots.iter().enumerate() {
        let want = value_at(&base, "sum(rate(requests_total[5m]))", t).expect("data at every slot");
        let got = recorded[i].1.expect("a value, not a stale marker");
        assert!((got - want).abs() <= 1e-9 * want.abs().max(1.0), "at {t}: recorded {got}, expression {want}");
        let twice = doubled[i].1.expect("a value");
        assert!((twice - 2.0 * got).abs() <= 1e-9 * got.abs().max(1.0), "at {t}: {twice} is not 2 x {got}");
        firing_condition.push(want > 0.2);
    }

    // The alert: pending from the first slot over the threshold, firing 5 minutes later,
    // firing until 3 minutes after the last slot over it (keep_firing_for), then resolved.
    let first_true = firing_condition.iter().position(|c| *c).expect("the burst crosses the threshold");
    let last_true = firing_condition.iter().rposition(|c| *c).unwrap();
    assert!(firing_condition[first_true..=last_true].iter().all(|c| *c), "one burst");
    let active_at = slots[first_true];
    let fires_at = slots[first_true..].iter().copied().find(|t| t - active_at >= 5 * MINUTE_MS).unwrap();
    let last_false_start = slots[last_true + 1];
    let last_firing = slots[last_true + 1..].iter().copied().rfind(|t| t - last_false_start < 3 * MINUTE_MS);
    let pending: Vec<i64> = slots.iter().copied().filter(|t| (active_at..fires_at).contains(t)).collect();
    let firing: Vec<i64> =
        slots.iter().copied().filter(|t| *t >= fires_at && *t <= last_firing.unwrap_or(slots[last_true])).collect();
    assert_eq!(firing.len(), last_true - first_true + 1 - pending.len() + 3, "keep_firing_for adds 3 slots");

    let alerts = |state: &str| samples(&base, &format!("ALERTS{{alertname=\"HighTraffic\",alertstate=\"{state}\"}}"));
    let with_values =
        |s: Vec<(i64, Option<f64>)>| s.into_iter().filter_map(|(t, v)| v.map(|v| (t, v))).collect::<Vec<_>>();
    let stale = |s: &[(i64, Option<f64>)]| s.iter().filter(|(_, v)| v.is_none()).map(|(t, _)| *t).collect::<Vec<_>>();
    let pending_series = alerts("pending");
    assert_eq!(with_values(pending_series.clone()), pending.iter().map(|t| (*t, 1.0)).collect::<Vec<_>>());
    assert_eq!(stale(&pending_series), vec![fires_at], "pending ends as firing starts");
    let firing_series = alerts("firing");
    assert_eq!(with_values(firing_series.clone()), firing.iter().map(|t| (*t, 1.0)).collect::<Vec<_>>());
    let resolved_at = slots.iter().copied().find(|t| t > firing.last().unwrap()).unwrap();
    assert_eq!(stale(&firing_series), vec![resolved_at], "firing ends when resolved");
    let for_state = samples(&base, "ALERTS_FOR_STATE{alertname=\"HighTraffic\"}");
    let for_values = with_values(for_state);
    assert_eq!(for_values.first().map(|s| s.0), Some(active_at));
    assert!(for_values.iter().all(|(_, v)| *v == (active_at / 1000) as f64), "{for_values:?}");

    // A replay again writes the same samples: nothing changes.
    let again = replay(&base, from, to, &[&file]);
    assert!(again.status.success(), "{}", text(&again.stderr));
    assert_eq!(samples(&base, "job:requests:rate5m"), recorded);
}

#[test]
fn a_group_over_its_limit_fails_each_evaluation_and_the_command_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let server = Binary::spawn(&dir.path().join("data"), &[]);
    let base = server.url("");
    let t0 = t0();
    feed(&base, t0);
    let file = dir.path().join("limited.yml");
    std::fs::write(
        &file,
        "groups:\n  - name: limited\n    interval: 1m\n    limit: 1\n    rules:\n      - record: instance:requests:rate5m\n        expr: rate(requests_total[5m])\n",
    )
    .unwrap();
    let out = replay(&base, t0 + 10 * MINUTE_MS, t0 + 20 * MINUTE_MS, &[&file]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "stdout: {stdout}\nstderr: {}", text(&out.stderr));
    assert!(stdout.contains("limited: 10 evaluations, 0 samples written, 10 failed"), "{stdout}");
    assert!(
        stdout.contains("instance:requests:rate5m at ") && stdout.contains("exceeded limit of 1 with 2 series"),
        "{stdout}"
    );
    assert!(text(&out.stderr).contains("10 rule evaluations failed"), "{}", text(&out.stderr));
    assert!(export(&base, "instance:requests:rate5m").is_empty());
}

#[test]
fn bad_replays_are_refused_before_anything_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let server = Binary::spawn(&dir.path().join("data"), &[]);
    let base = server.url("");
    let good = dir.path().join("good.yml");
    std::fs::write(&good, RULES).unwrap();
    let bad = dir.path().join("bad.yml");
    std::fs::write(&bad, "groups:\n  - name: g\n    rules:\n      - record: r\n        expr: 'sum('\n").unwrap();
    let now = chrono::Utc::now().timestamp_millis();

    // A bad file: Prometheus' message, and the good file before it is not replayed either.
    let out = replay(&base, now - 3_600_000, now - 60_000, &[&good, &bad]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("bad.yml") && stderr.contains("could not parse expression"), "{stderr}");
    assert!(export(&base, "{__name__=~\"job:.*|ALERTS.*\"}").is_empty());

    // A span ending in the future, or upside down.
    let out = replay(&base, now - 3_600_000, now + 3_600_000, &[&good]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("is in the future") && text(&out.stderr).contains("past data only"),
        "{}",
        text(&out.stderr)
    );
    let out = replay(&base, now - 60_000, now - 3_600_000, &[&good]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("is before --from"), "{}", text(&out.stderr));
    let out = Command::new(env!("CARGO_BIN_EXE_saltdb"))
        .args(["rules", "replay", "--url", &base, "--from", "yesterday", "--to", "now"])
        .arg(&good)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("--from: cannot parse \"yesterday\""), "{}", text(&out.stderr));

    // The API itself names what is missing or unknown.
    let client = crate::common::client();
    let post = |query: &str, body: &str| {
        let resp = client.post(format!("{base}/api/v1/rules/replay?{query}")).body(body.to_owned()).send().unwrap();
        (resp.status().as_u16(), resp.text().unwrap())
    };
    let start = format!("start={}&end={}", (now - 3_600_000) / 1000, (now - 60_000) / 1000);
    let (status, body) = post(&start, RULES);
    assert_eq!(status, 400);
    assert!(body.contains("missing parameter \\\"file\\\""), "{body}");
    let (status, body) = post(&format!("{start}&file=r.yml&step=15"), RULES);
    assert_eq!(status, 400);
    assert!(body.contains("step"), "{body}");
    let (status, body) = post(&format!("{start}&file=r.yml"), "groups: [");
    assert_eq!(status, 400, "{body}");
    let (status, body) = post(&format!("{start}&file=r.yml"), RULES);
    assert_eq!(status, 200, "{body}");
    let last: serde_json::Value = serde_json::from_str(body.lines().last().unwrap()).unwrap();
    assert_eq!(last["kind"], "done", "{body}");
    let _: BTreeMap<String, serde_json::Value> = serde_json::from_value(last).unwrap();
    assert!(get_json(&format!("{base}/api/v1/status/buildinfo"))["status"] == "success", "the server keeps serving");
}
