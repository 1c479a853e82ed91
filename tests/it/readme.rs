//! The README's first ten minutes, run as a new user would run them: the quick tour's shell
//! block, taken from `README.md` itself (so the README cannot drift from what is tested), is
//! run with `sh` and the real `curl` against a fresh server with default flags (only the port
//! is substituted), and its output is checked; `saltdb inspect` prints the window the tour
//! wrote; and every Prometheus configuration the README shows (remote write and read, scraping,
//! federation) passes `promtool check config`.

use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::Value;

use crate::common::*;

const README_ADDR: &str = "127.0.0.1:9201";

fn readme() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).expect("read README.md")
}

/// The body of the first code block fenced with ```` ```<lang> ```` after the line `heading`.
fn block_after(text: &str, heading: &str, lang: &str) -> String {
    let rest = &text[text.find(heading).unwrap_or_else(|| panic!("README has no {heading:?}"))..];
    let open = format!("```{lang}\n");
    let start = rest.find(&open).unwrap_or_else(|| panic!("no ```{lang} block after {heading:?}")) + open.len();
    let len = rest[start..].find("\n```").expect("unterminated code block");
    rest[start..start + len + 1].to_owned()
}

/// Every code block fenced with ```` ```<lang> ````.
fn blocks(text: &str, lang: &str) -> Vec<String> {
    let open = format!("```{lang}\n");
    text.match_indices(&open)
        .filter_map(|(i, _)| {
            let body = &text[i + open.len()..];
            body.find("\n```").map(|end| body[..=end].to_owned())
        })
        .collect()
}

fn on_path(bin: &str) -> bool {
    Command::new("sh").args(["-c", &format!("command -v {bin}")]).output().is_ok_and(|o| o.status.success())
}

#[test]
fn readme_quick_tour_works_against_a_fresh_server() {
    let test = "readme::readme_quick_tour_works_against_a_fresh_server";
    if !on_path("curl") {
        crate::skip::skip(test, "curl is not on PATH", "apt-get install curl");
        return;
    }
    let tour = block_after(&readme(), "## Quick tour", "sh");
    assert!(tour.contains(README_ADDR), "the quick tour no longer talks to {README_ADDR}:\n{tour}");
    let tmp = tempfile::tempdir().unwrap();
    // Default flags, as `cargo run --release -- serve` has them (30-day retention included).
    let bin = Binary::spawn(&tmp.path().join("data"), &[]);
    let script = tour.replace(README_ADDR, &bin.addr.to_string());
    let before_s = chrono::Utc::now().timestamp();
    let out = Command::new("sh").args(["-eu", "-c", &script]).stdin(Stdio::null()).output().expect("run sh");
    let after_s = chrono::Utc::now().timestamp();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the quick tour failed ({:?}):\n{stdout}\n{stderr}\nscript:\n{script}", out.status);
    let answers: Vec<Value> = serde_json::Deserializer::from_str(&stdout)
        .into_iter::<Value>()
        .collect::<Result<_, _>>()
        .unwrap_or_else(|e| panic!("the tour printed something that is not JSON ({e}):\n{stdout}"));
    let [export, instant, range] = answers.as_slice() else {
        panic!("expected an export line and two query answers, got:\n{stdout}\n{stderr}");
    };

    // The export returns exactly the two imported samples, stamped 15 s apart, the newest now.
    assert_eq!(export["metric"], serde_json::json!({"__name__": "cpu", "host": "a"}), "{stdout}");
    assert_eq!(export["values"], serde_json::json!([1.5, 2.0]), "{stdout}");
    let ts: Vec<i64> = export["timestamps"].as_array().unwrap().iter().map(|t| t.as_i64().unwrap()).collect();
    assert_eq!(ts.len(), 2, "{stdout}");
    assert_eq!(ts[1] - ts[0], 15_000, "{stdout}");
    assert!((before_s * 1000..=after_s * 1000).contains(&ts[1]), "newest sample {} not stamped now", ts[1]);

    // The instant query answers the latest sample; the range query both, on its 15 s grid.
    assert_eq!(instant["status"], "success", "{stdout}");
    assert_eq!(instant["data"]["resultType"], "vector", "{stdout}");
    let result = instant["data"]["result"].as_array().unwrap();
    assert_eq!(result.len(), 1, "{stdout}");
    assert_eq!(result[0]["metric"], export["metric"]);
    assert_eq!(result[0]["value"][1], "2", "{stdout}");
    assert_eq!(range["status"], "success", "{stdout}");
    let series = range["data"]["result"].as_array().unwrap();
    assert_eq!(series.len(), 1, "{stdout}");
    let values: Vec<&str> = series[0]["values"].as_array().unwrap().iter().map(|p| p[1].as_str().unwrap()).collect();
    assert!(values.contains(&"1.5") && values.last() == Some(&"2"), "range answer {values:?}");

    // The README's `saltdb inspect` shows the window the tour wrote.
    let inspect = Command::new(env!("CARGO_BIN_EXE_saltdb"))
        .args(["inspect", "--url", &bin.url("")])
        .output()
        .expect("run saltdb inspect");
    let table = String::from_utf8_lossy(&inspect.stdout);
    assert!(inspect.status.success(), "{table}{}", String::from_utf8_lossy(&inspect.stderr));
    // One series, and its two samples (still in the head, so counted exactly).
    let hot: Vec<&str> = table.lines().filter(|l| l.contains(" hot ")).collect();
    assert!(!hot.is_empty(), "no hot window:\n{table}");
    assert!(hot.iter().all(|row| row.split_whitespace().nth(5) == Some("1")), "one series per window:\n{table}");
    let samples: u64 =
        hot.iter().filter_map(|row| row.split_whitespace().nth(6)?.replace(',', "").parse::<u64>().ok()).sum();
    assert_eq!(samples, 2, "the tour's two samples:\n{table}");
    bin.terminate();
}

#[test]
fn readme_ingest_lines_work_against_a_fresh_server() {
    let test = "readme::readme_ingest_lines_work_against_a_fresh_server";
    if !on_path("curl") {
        crate::skip::skip(test, "curl is not on PATH", "apt-get install curl");
        return;
    }
    let block = block_after(&readme(), "### Ingest protocols", "sh");
    let tmp = tempfile::tempdir().unwrap();
    let bin = Binary::spawn(&tmp.path().join("data"), &[]);
    let script = block.replace(README_ADDR, &bin.addr.to_string());
    let out = Command::new("sh").args(["-eu", "-c", &script]).stdin(Stdio::null()).output().expect("run sh");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the ingest lines failed:\n{stdout}\n{}\nscript:\n{script}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The OpenTSDB details answer, then the query.
    let answers: Vec<Value> =
        serde_json::Deserializer::from_str(&stdout).into_iter::<Value>().collect::<Result<_, _>>().unwrap();
    let [put, query] = answers.as_slice() else { panic!("expected two JSON answers:\n{stdout}") };
    assert_eq!(put["success"], 1, "{stdout}");
    let mut names: Vec<String> = query["data"]["result"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["metric"]["__name__"].as_str().unwrap_or_default().to_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["cpu_usage", "http_requests_total", "mem_free", "sys.cpu.nice"], "{stdout}");
    bin.terminate();
}

#[test]
fn readme_prometheus_configurations_are_valid() {
    let test = "readme::readme_prometheus_configurations_are_valid";
    if !crate::peers::available("promtool", test) {
        return;
    }
    let text = readme();
    let configs: Vec<String> = blocks(&text, "yaml")
        .into_iter()
        .filter(|b| b.contains("remote_write") || b.contains("scrape_configs"))
        .collect();
    assert!(configs.len() >= 3, "the README's Prometheus sections lost their configurations");
    let tmp = tempfile::tempdir().unwrap();
    for (i, config) in configs.iter().enumerate() {
        let path = tmp.path().join(format!("prometheus-{i}.yml"));
        std::fs::write(&path, config).unwrap();
        let out = Command::new("promtool").arg("check").arg("config").arg(&path).output().expect("run promtool");
        assert!(
            out.status.success(),
            "promtool rejects the README's configuration:\n{config}\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// The README's two-shard ClickHouse walkthrough, pasted into a shell: both shards start, and a
/// node started with the walkthrough's `serve` flags stores and answers through them.
#[test]
fn readme_clickhouse_walkthrough_works() {
    let test = "readme::readme_clickhouse_walkthrough_works";
    if !crate::peers::installed("clickhouse-server", test, "clickhouse-server") {
        return;
    }
    let block = block_after(&readme(), "### On a ClickHouse cluster", "sh");
    let (shards, serve) = block.trim_end().rsplit_once('\n').expect("shard setup, then the serve line");
    let serve_args: Vec<&str> =
        serve.split_once(" -- serve ").expect("a `cargo run --release -- serve` line").1.split_whitespace().collect();
    let out = Command::new("sh").args(["-eu", "-c", shards]).stdin(Stdio::null()).output().expect("run sh");
    assert!(out.status.success(), "the walkthrough failed: {}", String::from_utf8_lossy(&out.stderr));
    let stop = || {
        let _ = Command::new("pkill").args(["-f", "saltdb-ch-"]).status();
    };
    let ready = |port: &str| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while std::time::Instant::now() < deadline {
            if reqwest::blocking::get(format!("http://127.0.0.1:{port}/ping")).is_ok_and(|r| r.status().is_success()) {
                return true;
            }
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        false
    };
    if !(ready("8120") && ready("8121")) {
        stop();
        panic!("the walkthrough's shards did not answer on 8120 and 8121");
    }
    let tmp = tempfile::tempdir().unwrap();
    let node = Binary::spawn(&tmp.path().join("node"), &serve_args);
    let now = chrono::Utc::now().timestamp_millis();
    let line = format!(r#"{{"metric":{{"__name__":"walkthrough","a":"1"}},"values":[7],"timestamps":[{now}]}}"#);
    let stored = import(&node.url(""), line);
    let answer = get_json(&format!("{}/api/v1/query?query=walkthrough", node.url("")));
    node.terminate();
    stop();
    assert_eq!(stored, (204, String::new()));
    assert_eq!(answer["data"]["result"][0]["value"][1], "7", "{answer}");
}
