//! The web UI in a real browser: Debian's `chromium` driven headless through `chromedriver`
//! (WebDriver, from Rust with `fantoccini`), against a real server holding data written through
//! remote-write. One browser session runs every check, as a user would: type a query and find
//! its rows in the table; switch to the graph and find one line per series with the legend's
//! labels; drag over the graph to zoom; type the first letters of a metric and be offered it;
//! see a bad query's error; find the top metric on the cardinality page, the windows on the
//! storage page, the metric's TYPE and series count on the explore page; check the phone layout;
//! and collect the browser's console log after each page (no errors allowed). A server with a
//! rule file shows its group and rules on the rules page and its firing alert on the alerts page;
//! one without says how to configure rules. Screenshots of every page go to
//! `<target>/ui-screenshots/`.
//!
//! Without chromium and chromedriver the test says it is skipped, and fails under `CI`.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::actions::{InputSource, MouseActions, PointerAction, MOUSE_BUTTON_LEFT};
use fantoccini::key::Key;
use fantoccini::wd::WebDriverCompatibleCommand;
use fantoccini::{Client, ClientBuilder, Locator};
use saltdb::config::{Cli, Command as CliCommand};
use saltdb::remote::proto::{self, MetricType};
use saltdb::remote::snappy_body;
use serde_json::{json, Value};

use crate::common::*;

const TOP_METRIC: &str = "saltui_requests_total";
const OTHER_METRIC: &str = "saltui_temperature_celsius";
/// A metric and label names outside the legacy character sets, kept as sent.
const UTF8_METRIC: &str = "saltui.utf8";
const UTF8_LABELS: [(&str, &str); 3] = [("tag,x", "b"), ("service.name", "a"), ("名前", "c")];
const WAIT: Duration = Duration::from_secs(20);

/// `chromedriver` on a free port, killed on drop.
struct Driver {
    child: Child,
    url: String,
}

impl Driver {
    fn start() -> Self {
        crate::watchdog::watch();
        let port = crate::peers::free_port();
        let child = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        let driver = Self { child, url: format!("http://127.0.0.1:{port}") };
        let deadline = Instant::now() + WAIT;
        while client().get(format!("{}/status", driver.url)).send().is_err() {
            assert!(Instant::now() < deadline, "chromedriver did not start listening");
            std::thread::sleep(Duration::from_millis(100));
        }
        driver
    }

    /// A headless Chromium session at desktop size, its console log kept for [`console_errors`].
    async fn session(&self) -> Client {
        let mut caps = serde_json::Map::new();
        caps.insert("browserName".into(), json!("chrome"));
        caps.insert(
            "goog:chromeOptions".into(),
            json!({"binary": "/usr/bin/chromium", "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,900"]}),
        );
        caps.insert("goog:loggingPrefs".into(), json!({"browser": "ALL"}));
        ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(caps)
            .connect(&self.url)
            .await
            .expect("WebDriver session")
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// chromedriver's log endpoint (not in the W3C protocol, so not in fantoccini): the browser's
/// console messages since the last call.
#[derive(Debug)]
struct BrowserLog;

impl WebDriverCompatibleCommand for BrowserLog {
    fn endpoint(&self, base: &reqwest::Url, session: Option<&str>) -> Result<reqwest::Url, url_parse::ParseError> {
        base.join(&format!("session/{}/se/log", session.unwrap_or_default()))
    }

    fn method_and_body(&self, _: &reqwest::Url) -> (axum::http::Method, Option<String>) {
        (axum::http::Method::POST, Some(r#"{"type":"browser"}"#.into()))
    }
}

mod url_parse {
    pub use reqwest::Url;
    pub type ParseError = <Url as std::str::FromStr>::Err;
}

/// Console messages of level SEVERE (errors, uncaught exceptions, failed loads) since the last
/// call.
async fn console_errors(c: &Client) -> Vec<String> {
    let log = c.issue_cmd(BrowserLog).await.expect("read the browser log");
    log.as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["level"] == "SEVERE")
        .map(|e| e["message"].as_str().unwrap_or_default().to_owned())
        .collect()
}

fn screenshot_dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("..").join("ui-screenshots");
    std::fs::create_dir_all(&dir).expect("screenshot directory");
    dir
}

async fn screenshot(c: &Client, name: &str) {
    let png = c.screenshot().await.expect("screenshot");
    std::fs::write(screenshot_dir().join(format!("{name}.png")), png).expect("write screenshot");
}

/// Polls `f` until it returns `Some`, for at most [`WAIT`].
async fn eventually<T, F, Fut>(what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn texts(c: &Client, css: &str) -> Vec<String> {
    let mut out = Vec::new();
    for e in c.find_all(Locator::Css(css)).await.unwrap_or_default() {
        out.push(e.text().await.unwrap_or_default());
    }
    out
}

/// The data set: `TOP_METRIC` in 5 series (2 jobs), `OTHER_METRIC` in 2, one sample every 15 s
/// over the last hour, with TYPE/HELP metadata, written through remote-write.
fn write_data(base: &str) -> i64 {
    let now = chrono::Utc::now().timestamp_millis();
    let end = now - now % 15_000;
    let times: Vec<i64> = (0..240).map(|i| end - (239 - i) * 15_000).collect();
    let mut timeseries = Vec::new();
    for (j, (job, instances)) in [("api", &["a", "b", "c"][..]), ("web", &["a", "b"][..])].into_iter().enumerate() {
        for (k, instance) in instances.iter().enumerate() {
            let slope = 2 * k + j + 1;
            let samples: Vec<(i64, f64)> = times.iter().enumerate().map(|(i, &t)| (t, (i * slope) as f64)).collect();
            timeseries.push(series(&[("__name__", TOP_METRIC), ("instance", instance), ("job", job)], &samples));
        }
    }
    for room in ["hall", "lab"] {
        let samples: Vec<(i64, f64)> = times.iter().enumerate().map(|(i, &t)| (t, 20.0 + (i % 7) as f64)).collect();
        timeseries.push(series(&[("__name__", OTHER_METRIC), ("room", room)], &samples));
    }
    let metadata = vec![
        proto::MetricMetadata {
            r#type: MetricType::Counter as i32,
            metric_family_name: TOP_METRIC.into(),
            help: "Requests served.".into(),
            unit: String::new(),
        },
        proto::MetricMetadata {
            r#type: MetricType::Gauge as i32,
            metric_family_name: OTHER_METRIC.into(),
            help: "Room temperature.".into(),
            unit: "celsius".into(),
        },
    ];
    let (status, _, text) =
        post(&format!("{base}/api/v1/write"), &V1_HEADERS, snappy_body(&proto::WriteRequest { timeseries, metadata }));
    assert_eq!((status, text.as_str()), (204, ""));
    end
}

/// One series of `UTF8_METRIC` with `UTF8_LABELS`, over the same hour, through remote-write.
fn write_utf8(base: &str, end: i64) {
    let samples: Vec<(i64, f64)> = (0..240).map(|i| (end - (239 - i) * 15_000, i as f64)).collect();
    let mut labels = vec![("__name__", UTF8_METRIC)];
    labels.extend(UTF8_LABELS);
    // Remote-write wants the labels sorted by name.
    labels.sort_unstable();
    let (status, _, text) = post(
        &format!("{base}/api/v1/write"),
        &V1_HEADERS,
        snappy_body(&proto::WriteRequest { timeseries: vec![series(&labels, &samples)], metadata: Vec::new() }),
    );
    assert_eq!((status, text.as_str()), (204, ""));
}

/// Series names as the UI prints them, from an API result: as Prometheus 3's UI, names outside
/// the legacy sets quoted, a metric name among the labels (`{"my.metric", "a.b"="x"}`).
fn ui_name(metric: &Value) -> String {
    let legacy_label = |n: &str| {
        n.chars().enumerate().all(|(i, c)| c == '_' || c.is_ascii_alphabetic() || (i > 0 && c.is_ascii_digit()))
    };
    let map = metric.as_object().expect("label object");
    let name = map.get("__name__").and_then(Value::as_str).unwrap_or_default();
    let mut labels: Vec<String> = map
        .iter()
        .filter(|(k, _)| *k != "__name__")
        .map(|(k, v)| if legacy_label(k) { format!("{k}={v}") } else { format!("{}={v}", Value::from(k.as_str())) })
        .collect();
    if !name.chars().all(|c| c == ':' || c.is_ascii_alphanumeric() || c == '_') {
        labels.insert(0, Value::from(name).to_string());
        return format!("{{{}}}", labels.join(", "));
    }
    if labels.is_empty() {
        name.to_owned()
    } else {
        format!("{name}{{{}}}", labels.join(", "))
    }
}

#[test]
fn web_ui_in_a_real_browser() {
    const TEST: &str = "web_ui_in_a_real_browser";
    if !crate::peers::installed("chromium", TEST, "chromium")
        || !crate::peers::installed("chromedriver", TEST, "chromium-driver")
    {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // Started from a command line, as `saltdb serve` is, so the flags page has flags to show.
    let data_dir = dir.path().display().to_string();
    let cli = Cli::try_parse_with_flags_from([
        "saltdb",
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        &data_dir,
        "--retention",
        "0",
        "--downsample",
        "5m,1h",
        "--retention-rule",
        "{room!=\"\"}:400d",
    ])
    .expect("command line");
    let CliCommand::Serve(args) = cli.command else { panic!("serve") };
    let server = InProcess::start_with(runtime(), args.server_config().expect("config"));
    let base = server.url("");
    let end_ms = write_data(&base);
    write_utf8(&base, end_ms);

    // What the API says, to compare the pages with.
    let instant = get_json(&format!("{base}/api/v1/query?query={TOP_METRIC}&time={}", end_ms / 1000));
    let expected_rows: BTreeSet<(String, String)> = instant["data"]["result"]
        .as_array()
        .expect("vector")
        .iter()
        .map(|s| (ui_name(&s["metric"]), s["value"][1].as_str().unwrap_or_default().to_owned()))
        .collect();
    assert_eq!(expected_rows.len(), 5);
    let expected_names: BTreeSet<String> = expected_rows.iter().map(|(n, _)| n.clone()).collect();
    let bad_query = "sum(saltui_requests_total";
    let bad = client().get(format!("{base}/api/v1/query")).query(&[("query", bad_query)]).send().unwrap();
    assert_eq!(bad.status().as_u16(), 400);
    let bad_error = serde_json::from_str::<Value>(&bad.text().unwrap()).unwrap()["error"].as_str().unwrap().to_owned();
    let range = format!("start={}&end={}&step=15", end_ms / 1000 - 3600, end_ms / 1000);
    let sorted = get_json(&format!("{base}/api/v1/query_range?query=sort(saltui_requests_total)&{range}"));
    let expected_warning = sorted["warnings"][0].as_str().expect("sort() in a range query warns").to_owned();
    let windows = get_json(&format!("{base}/api/v1/status/windows"))["data"].as_array().unwrap().len();
    let utf8_selector = format!("{{\"{UTF8_METRIC}\"}}");
    let utf8 = client()
        .get(format!("{base}/api/v1/query"))
        .query(&[("query", utf8_selector.as_str()), ("time", &(end_ms / 1000).to_string())])
        .send()
        .unwrap();
    let utf8: Value = serde_json::from_str(&utf8.text().unwrap()).unwrap();
    let utf8_name = ui_name(&utf8["data"]["result"][0]["metric"]);
    assert_eq!(utf8_name, r#"{"saltui.utf8", "service.name"="a", "tag,x"="b", "名前"="c"}"#);

    // A second server whose reads need a bearer token (writes stay open).
    let guarded_dir = tempfile::tempdir().unwrap();
    let mut guarded_config = saltdb::server::ServerConfig::new(
        "127.0.0.1:0".parse().unwrap(),
        saltdb::storage::StorageConfig::new(guarded_dir.path().to_path_buf()),
    );
    guarded_config.access.read = saltdb::http::access::Credentials::new(Some("s3cret"), None).expect("credentials");
    let guarded = InProcess::start_with(runtime(), guarded_config);
    let guarded_base = guarded.url("");
    write_data(&guarded_base);

    let driver = Driver::start();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let c = driver.session().await;
        let mut failures = Vec::new();

        // Query: type an expression, Enter, rows in the table.
        c.goto(&format!("{base}/graph?g0.tab=1")).await.unwrap();
        let expr = c.wait().at_most(WAIT).for_element(Locator::Css("#expr")).await.unwrap();
        expr.send_keys(TOP_METRIC).await.unwrap();
        // Close the suggestions first: Enter with the list open accepts a suggestion.
        expr.send_keys(&Key::Escape.to_string()).await.unwrap();
        expr.send_keys(&Key::Enter.to_string()).await.unwrap();
        let rows = eventually("the result table", || async {
            let cells = texts(&c, "#result-table tbody td").await;
            (cells.len() == 10).then_some(cells)
        })
        .await;
        let shown: BTreeSet<(String, String)> = rows.chunks(2).map(|p| (p[0].clone(), p[1].clone())).collect();
        assert_eq!(shown, expected_rows, "table rows");
        let url = c.current_url().await.unwrap();
        assert!(url.query().unwrap_or_default().contains("g0.expr=saltui_requests_total"), "state in the URL: {url}");
        screenshot(&c, "query-table").await;
        failures.extend(console_errors(&c).await.into_iter().map(|e| format!("query table: {e}")));

        // Graph, reached from the keyboard (arrow keys move between the tabs): one line per
        // series, the legend naming each.
        c.find(Locator::Css("#tab-table")).await.unwrap().send_keys(&Key::Right.to_string()).await.unwrap();
        let graph_tab = c.find(Locator::Css("#tab-graph")).await.unwrap();
        assert_eq!(
            graph_tab.attr("aria-selected").await.unwrap().as_deref(),
            Some("true"),
            "the right arrow selects the graph tab"
        );
        assert_eq!(
            graph_tab.attr("tabindex").await.unwrap().as_deref(),
            Some("0"),
            "the selected tab is in the Tab order"
        );
        // (name, points) of every line, read in one go (a redraw replaces the elements).
        let lines = eventually("five lines", || async {
            let mut out = Vec::new();
            for p in c.find_all(Locator::Css(".plot path.series")).await.ok()? {
                let d = p.attr("d").await.ok()??;
                out.push((p.attr("data-series").await.ok()??, d.matches('L').count()));
            }
            (out.len() == 5).then_some(out)
        })
        .await;
        assert!(lines.iter().all(|(_, points)| *points > 100), "every line has its points: {lines:?}");
        let line_names: BTreeSet<String> = lines.into_iter().map(|(name, _)| name).collect();
        assert_eq!(line_names, expected_names);
        let legend: BTreeSet<String> = texts(&c, ".legend .legend-label").await.into_iter().collect();
        assert_eq!(legend, expected_names, "legend");
        // Hover shows the values at the pointer.
        let overlay = c.find(Locator::Css(".plot .overlay")).await.unwrap();
        c.perform_actions(MouseActions::new("mouse".into()).then(PointerAction::MoveToElement {
            element: overlay.clone(),
            duration: None,
            x: 0.0,
            y: 0.0,
        }))
        .await
        .unwrap();
        let readout = eventually("the hover readout", || async {
            let t = texts(&c, ".readout").await.join("\n");
            (t.contains(TOP_METRIC)).then_some(t)
        })
        .await;
        assert_eq!(readout.matches(TOP_METRIC).count(), 5, "{readout}");
        // The same readout from the keyboard: focus the plot, End jumps to the newest step and
        // an arrow moves one step back.
        overlay.send_keys(&Key::End.to_string()).await.unwrap();
        let newest = overlay.attr("aria-valuemax").await.unwrap();
        let (at_end, end_text) = eventually("the keyboard cursor at the end", || async {
            let now = overlay.attr("aria-valuenow").await.ok()??;
            let t = texts(&c, ".readout").await.join("\n");
            (Some(&now) == newest.as_ref() && t.contains(TOP_METRIC)).then_some((now, t))
        })
        .await;
        overlay.send_keys(&Key::Left.to_string()).await.unwrap();
        let (back, back_text) = eventually("the keyboard cursor one step back", || async {
            let now = overlay.attr("aria-valuenow").await.ok()??;
            let t = texts(&c, ".readout").await.join("\n");
            (now != at_end).then_some((now, t))
        })
        .await;
        let (end_ms, back_ms): (f64, f64) = (at_end.parse().unwrap(), back.parse().unwrap());
        assert!(back_ms < end_ms, "the left arrow moved the cursor from {end_ms} to {back_ms}");
        assert_ne!(end_text, back_text, "the readout did not follow the keyboard cursor");
        assert_eq!(back_text.matches(TOP_METRIC).count(), 5, "{back_text}");
        screenshot(&c, "query-graph").await;
        // Drag over a part of the graph: the range shrinks to it.
        let before = c.current_url().await.unwrap().to_string();
        c.perform_actions(
            MouseActions::new("mouse".into())
                .then(PointerAction::MoveToElement { element: overlay.clone(), duration: None, x: -200.0, y: 0.0 })
                .then(PointerAction::Down { button: MOUSE_BUTTON_LEFT })
                .then(PointerAction::MoveToElement {
                    element: overlay.clone(),
                    duration: Some(Duration::from_millis(100)),
                    x: 100.0,
                    y: 0.0,
                })
                .then(PointerAction::Up { button: MOUSE_BUTTON_LEFT }),
        )
        .await
        .unwrap();
        let zoomed = eventually("the zoomed URL", || async {
            let u = c.current_url().await.ok()?.to_string();
            (u != before && !u.contains("g0.range_input=1h")).then_some(u)
        })
        .await;
        assert!(zoomed.contains("g0.end_input="), "zoom sets the end time: {zoomed}");
        failures.extend(console_errors(&c).await.into_iter().map(|e| format!("query graph: {e}")));

        // Autocomplete: the first letters of a metric offer it.
        c.goto(&format!("{base}/graph")).await.unwrap();
        let expr = c.wait().at_most(WAIT).for_element(Locator::Css("#expr")).await.unwrap();
        expr.send_keys("saltui_r").await.unwrap();
        let offered = eventually("suggestions", || async {
            let items = texts(&c, "#autocomplete-list li .ac-text").await;
            (!items.is_empty()).then_some(items)
        })
        .await;
        assert!(offered.contains(&TOP_METRIC.to_owned()), "offered {offered:?}");
        assert!(!offered.contains(&OTHER_METRIC.to_owned()), "offered {offered:?}");
        screenshot(&c, "query-autocomplete").await;
        expr.send_keys(&Key::Enter.to_string()).await.unwrap();
        assert_eq!(expr.prop("value").await.unwrap().unwrap_or_default(), TOP_METRIC, "Enter accepts the suggestion");
        failures.extend(console_errors(&c).await.into_iter().map(|e| format!("autocomplete: {e}")));

        // A bad query shows the server's error.
        expr.clear().await.unwrap();
        expr.send_keys(bad_query).await.unwrap();
        expr.send_keys(&Key::Escape.to_string()).await.unwrap();
        expr.send_keys(&Key::Enter.to_string()).await.unwrap();
        let error = eventually("the error", || async {
            let t = texts(&c, ".alert.error").await.join("\n");
            (!t.is_empty()).then_some(t)
        })
        .await;
        assert!(error.contains(&bad_error), "shown {error:?}, the API says {bad_error:?}");
        screenshot(&c, "query-error").await;
        // The browser reports the 400 answer itself as a failed load (which also shows that the
        // log is read); nothing else may show.
        let logged = console_errors(&c).await;
        assert!(logged.iter().any(|e| e.contains("400 (Bad Request)")), "the failed load is logged: {logged:?}");
        failures
            .extend(logged.into_iter().filter(|e| !e.contains("400 (Bad Request)")).map(|e| format!("bad query: {e}")));

        // Warnings as Prometheus shows them: sort() does nothing in a range query.
        let warned = "sort(saltui_requests_total)";
        expr.clear().await.unwrap();
        expr.send_keys(warned).await.unwrap();
        expr.send_keys(&Key::Escape.to_string()).await.unwrap();
        expr.send_keys(&Key::Enter.to_string()).await.unwrap();
        let warning = eventually("the warning", || async {
            let t = texts(&c, ".alert.warning").await.join("\n");
            (!t.is_empty()).then_some(t)
        })
        .await;
        assert!(warning.contains(&expected_warning), "shown {warning:?}, the API says {expected_warning:?}");
        assert_eq!(c.find_all(Locator::Css(".plot path.series")).await.unwrap().len(), 5, "the result is drawn too");
        screenshot(&c, "query-warning").await;
        failures.extend(console_errors(&c).await.into_iter().map(|e| format!("warning: {e}")));

        // UTF-8 names: the table and the legend print them quoted, as Prometheus 3's UI; the
        // autocomplete offers them and writes them quoted into the query it builds.
        c.goto(&format!("{base}/graph")).await.unwrap();
        let expr = c.wait().at_most(WAIT).for_element(Locator::Css("#expr")).await.unwrap();
        expr.send_keys("saltui").await.unwrap();
        let offered = eventually("UTF-8 metric suggestions", || async {
            let items = texts(&c, "#autocomplete-list li .ac-text").await;
            items.first().is_some_and(|f| f == UTF8_METRIC).then_some(items)
        })
        .await;
        assert!(offered.contains(&TOP_METRIC.to_owned()), "offered {offered:?}");
        expr.send_keys(&Key::Enter.to_string()).await.unwrap();
        assert_eq!(
            expr.prop("value").await.unwrap().unwrap_or_default(),
            utf8_selector,
            "a UTF-8 metric name is inserted quoted"
        );
        // A quoted label name being typed, then its values: the query selects the series. (A
        // closed list keeps its items hidden, their text reading empty: wait for the new ones.)
        // On a fresh page: WebDriver's clear blurs the box, whose list closes 100 ms later.
        c.goto(&format!("{base}/graph")).await.unwrap();
        let expr = c.wait().at_most(WAIT).for_element(Locator::Css("#expr")).await.unwrap();
        expr.send_keys("{\"名").await.unwrap();
        let offered = eventually("UTF-8 label suggestions", || async {
            let items = texts(&c, "#autocomplete-list li .ac-text").await;
            (!items.is_empty() && items.iter().all(|t| !t.is_empty())).then_some(items)
        })
        .await;
        assert_eq!(offered, ["名前"], "label names offered after a quote");
        expr.send_keys(&Key::Enter.to_string()).await.unwrap();
        expr.send_keys("=\"").await.unwrap();
        let offered = eventually("values of a UTF-8 label", || async {
            let items = texts(&c, "#autocomplete-list li .ac-text").await;
            (!items.is_empty() && items.iter().all(|t| !t.is_empty())).then_some(items)
        })
        .await;
        assert_eq!(offered, ["c"], "values of 名前");
        expr.send_keys(&Key::Enter.to_string()).await.unwrap();
        expr.send_keys("\"}").await.unwrap();
        let built = expr.prop("value").await.unwrap().unwrap_or_default();
        assert_eq!(built, r#"{"名前"="c"}"#, "the query the autocomplete built");
        expr.send_keys(&Key::Enter.to_string()).await.unwrap();
        let legend = eventually("the UTF-8 legend", || async {
            let t = texts(&c, ".legend .legend-label").await;
            (t.len() == 1).then_some(t)
        })
        .await;
        assert_eq!(legend, std::slice::from_ref(&utf8_name), "legend");
        c.find(Locator::Css("#tab-table")).await.unwrap().click().await.unwrap();
        let rows = eventually("the UTF-8 series in the table", || async {
            let cells = texts(&c, "#result-table tbody td").await;
            (cells.len() == 2).then_some(cells)
        })
        .await;
        assert_eq!(rows[0], utf8_name, "table row");
        screenshot(&c, "query-utf8").await;
        failures.extend(console_errors(&c).await.into_iter().map(|e| format!("utf-8 names: {e}")));

        // Downsampled tiers (the server keeps 5m and 1h points): the graph offers the resolution,
        // reads the 5m tier when asked (its statistics and an info say so, the URL keeps it),
        // and raw samples when asked for raw.
        let tier_query = format!("sum(rate({TOP_METRIC}[10m]))");
        c.goto(&format!("{base}/graph?g0.expr={tier_query}&g0.tab=0&g0.range_input=1h&g0.step_input=30m"))
            .await
            .unwrap();
        let resolution = c.wait().at_most(WAIT).for_element(Locator::Css("#resolution")).await.unwrap();
        let offered = eventually("the resolutions offered", || async {
            let o = texts(&c, "#resolution option").await;
            (o.len() == 4).then_some(o)
        })
        .await;
        assert_eq!(offered, ["auto", "raw", "5m", "1h"], "resolutions");
        resolution.select_by_value("5m").await.unwrap();
        let stats = eventually("the 5m tier in the statistics", || async {
            let t = texts(&c, "#query-stats").await.join(" ");
            t.contains("Tiers: 5m (").then_some(t)
        })
        .await;
        assert!(stats.contains("points)"), "{stats}");
        let infos = texts(&c, ".messages").await.join("\n");
        assert!(infos.contains("read from the 5m tier"), "the info naming the tier: {infos}");
        let url = c.current_url().await.unwrap();
        assert!(
            url.query().unwrap_or_default().contains("g0.max_source_resolution=5m"),
            "resolution in the URL: {url}"
        );
        screenshot(&c, "query-tier").await;
        let resolution = c.find(Locator::Css("#resolution")).await.unwrap();
        resolution.select_by_value("raw").await.unwrap();
        eventually("raw samples in the statistics", || async {
            let t = texts(&c, "#query-stats").await.join(" ");
            (t.contains("Samples: ") && !t.contains("Tiers:")).then_some(t)
        })
        .await;
        failures.extend(console_errors(&c).await.into_iter().map(|e| format!("tiers: {e}")));

        // Cardinality: the top metric first.
        c.goto(&format!("{base}/cardinality")).await.unwrap();
        let top = eventually("the top metrics", || async {
            let cells = texts(&c, "#top-metrics tbody tr:first-child td").await;
            (cells.len() >= 2).then_some(cells)
        })
        .await;
        assert_eq!((top[0].as_str(), top[1].as_str()), (TOP_METRIC, "5"));
        assert_eq!(texts(&c, "#total-series").await, ["8"]);
        screenshot(&c, "cardinality").await;
        failures.extend(console_errors(&c).await.into_iter().map(|e| format!("cardinality: {e}")));

        // Storage: every window, and the flags of the command line.
        c.goto(&format!("{base}/storage")).await.unwrap();
        let shown = eventually("the windows table", || async {
            let rows = c.find_all(Locator::Css("#windows-table tbody tr")).await.unwrap_or_default();
            (!rows.is_empty()).then_some(rows.len())
        })
        .await;
        assert_eq!(shown, windows);
        // The retention classes: the default one and the rule's.
        let classes = texts(&c, "#classes-table tbody tr").await;
        assert_eq!(classes.len(), 2, "{classes:?}");
        assert!(classes[1].starts_with("400d") && classes[1].contains("{room!=\"\"}"), "{classes:?}");
        let flags = texts(&c, "#flags-table tbody tr").await;
        assert!(flags.iter().any(|r| r.starts_with("--retention") && r.ends_with('0')), "flags {flags:?}");
        screenshot(&c, "storage").await;
        failures.extend(console_errors(&c).await.into_iter().map(|e| format!("storage: {e}")));

        // Explore: type, help and series count; the labels of a metric.
        c.goto(&format!("{base}/explore")).await.unwrap();
        let row = eventually("the metrics table", || async {
            let rows = texts(&c, "#metrics-table tbody tr").await;
            rows.into_iter().find(|r| r.starts_with(TOP_METRIC))
        })
        .await;
        assert!(row.contains("counter") && row.contains("Requests served.") && row.contains('5'), "row {row:?}");
        c.find(Locator::XPath(&format!("//tr[td/a[text()='{TOP_METRIC}']]//button")))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
        let labels = eventually("the labels", || async {
            let t = texts(&c, "#metric-detail tbody tr").await;
            (t.len() == 2).then_some(t)
        })
        .await;
        assert!(labels.iter().any(|l| l.starts_with("job") && l.contains("api, web")), "labels {labels:?}");
        screenshot(&c, "explore").await;
        // A UTF-8 metric: its labels listed by name as sent, its link a query that selects it.
        c.find(Locator::XPath(&format!("//tr[td/a[text()='{UTF8_METRIC}']]//button")))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
        let labels = eventually("the UTF-8 labels", || async {
            let t = texts(&c, "#metric-detail tbody tr").await;
            (t.len() == 3).then_some(t)
        })
        .await;
        for (name, value) in UTF8_LABELS {
            assert!(labels.iter().any(|l| l.starts_with(name) && l.ends_with(value)), "{name}: labels {labels:?}");
        }
        let link = c.find(Locator::Css("#metric-detail h2 a")).await.unwrap();
        assert_eq!(link.text().await.unwrap(), UTF8_METRIC);
        link.click().await.unwrap();
        let rows = eventually("the UTF-8 metric's query", || async {
            let cells = texts(&c, "#result-table tbody td").await;
            (cells.len() == 2).then_some(cells)
        })
        .await;
        assert_eq!(rows[0], utf8_name, "explore's link queries the metric");
        failures.extend(console_errors(&c).await.into_iter().map(|e| format!("explore utf-8: {e}")));
        failures.extend(console_errors(&c).await.into_iter().map(|e| format!("explore: {e}")));

        // A phone: the pages fit the width (tables scroll inside their boxes).
        c.set_window_size(390, 844).await.unwrap();
        for (page, name) in [
            ("/graph?g0.expr=saltui_requests_total&g0.tab=0", "phone-query-graph"),
            ("/cardinality", "phone-cardinality"),
            ("/storage", "phone-storage"),
        ] {
            c.goto(&format!("{base}{page}")).await.unwrap();
            c.wait().at_most(WAIT).for_element(Locator::Css("main table, main svg")).await.unwrap();
            let overflow =
                c.execute("return document.documentElement.scrollWidth - window.innerWidth", vec![]).await.unwrap();
            assert!(overflow.as_i64().unwrap_or(1) <= 0, "{page} is wider than a phone by {overflow}px");
            screenshot(&c, name).await;
        }
        failures.extend(console_errors(&c).await.into_iter().map(|e| format!("phone: {e}")));

        // Reads behind a bearer token: the page loads, asks for the token, refuses a wrong one
        // and shows the data with the right one.
        c.set_window_size(1280, 900).await.unwrap();
        c.goto(&format!("{guarded_base}/graph?g0.expr={TOP_METRIC}&g0.tab=1")).await.unwrap();
        let token = c.wait().at_most(WAIT).for_element(Locator::Css("#credentials #auth-token")).await.unwrap();
        token.send_keys("wrong").await.unwrap();
        token.send_keys(&Key::Enter.to_string()).await.unwrap();
        let refusal = eventually("the form again after a wrong token", || async {
            let t = texts(&c, "#credentials p").await.join(" ");
            t.contains("not valid").then_some(t)
        })
        .await;
        assert!(refusal.contains("read"), "{refusal}");
        let token = c.find(Locator::Css("#credentials #auth-token")).await.unwrap();
        token.send_keys("s3cret").await.unwrap();
        token.send_keys(&Key::Enter.to_string()).await.unwrap();
        let rows = eventually("rows read with the token", || async {
            let t = texts(&c, "main table tbody tr").await;
            (t.len() == 5).then_some(t)
        })
        .await;
        assert!(rows.iter().all(|r| r.contains(TOP_METRIC)), "{rows:?}");
        screenshot(&c, "query-with-token").await;
        // 401s are expected here; anything else is not.
        failures
            .extend(console_errors(&c).await.into_iter().filter(|e| !e.contains("401")).map(|e| format!("token: {e}")));

        c.close().await.unwrap();
        assert!(failures.is_empty(), "console errors: {failures:#?}");
    });
    eprintln!("screenshots in {}", screenshot_dir().display());
    guarded.stop();
    server.stop();
}

/// One group evaluated every second: a recording rule and two alerting rules, one of which
/// fires at its first evaluation (`for: 0s`) and one that never does.
const RULES: &str = r#"
groups:
  - name: saltui-rules
    interval: 1s
    rules:
      - record: job:saltui_up:sum
        expr: sum by (job) (saltui_up)
      - alert: SaltuiInstanceDown
        expr: saltui_up == 0
        for: 0s
        labels:
          severity: page
        annotations:
          summary: instance is down
      - alert: SaltuiNeverFires
        expr: saltui_up > 1
"#;

/// Whether both browser tools are here (a skip otherwise, a failure under `CI`).
fn browser_installed(test: &str) -> bool {
    crate::peers::installed("chromium", test, "chromium")
        && crate::peers::installed("chromedriver", test, "chromium-driver")
}

/// The cells (`th` and `td`) of the rules-page row of rule `name`.
async fn rule_cells(c: &Client, name: &str) -> Vec<String> {
    texts(c, &format!("#rules-output tr[data-rule='{name}'] > *")).await
}

/// Page width beyond the window's (none allowed) of `path` on a phone.
async fn phone_overflow(c: &Client, url: &str, ready: &str) -> i64 {
    c.goto(url).await.unwrap();
    c.wait().at_most(WAIT).for_element(Locator::Css(ready)).await.unwrap();
    let overflow = c.execute("return document.documentElement.scrollWidth - window.innerWidth", vec![]).await.unwrap();
    overflow.as_i64().unwrap_or(1)
}

#[test]
fn rules_and_alerts_pages_in_a_real_browser() {
    const TEST: &str = "rules_and_alerts_pages_in_a_real_browser";
    if !browser_installed(TEST) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let rule_file = dir.path().join("rules.yml");
    std::fs::write(&rule_file, RULES).unwrap();
    let server = Binary::spawn(&dir.path().join("data"), &["--rule-file", rule_file.to_str().unwrap()]);
    let base = server.url("");
    // `saltui_up` of two instances, one down, a second ago and now: what the next five minutes
    // of evaluations see.
    let now = chrono::Utc::now().timestamp_millis();
    let lines: String = [("i1", 1), ("i2", 0)]
        .iter()
        .map(|(instance, v)| {
            format!(
                "{{\"metric\":{{\"__name__\":\"saltui_up\",\"job\":\"a\",\"instance\":\"{instance}\"}},\"values\":[{v},{v}],\"timestamps\":[{},{now}]}}\n",
                now - 1000
            )
        })
        .collect();
    let (status, body) = import(&base, lines);
    assert_eq!(status, 204, "import: {body}");
    // Wait (through the API) for an evaluation that saw the data: every rule healthy, the alert
    // firing and the recorded series queryable.
    let deadline = Instant::now() + WAIT;
    loop {
        let groups = get_json(&format!("{base}/api/v1/rules"))["data"]["groups"].clone();
        let rules = groups[0]["rules"].as_array().cloned().unwrap_or_default();
        let recorded = get_json(&format!("{base}/api/v1/query?query=job:saltui_up:sum"))["data"]["result"].clone();
        if rules.len() == 3
            && rules.iter().all(|r| r["health"] == "ok")
            && rules[1]["state"] == "firing"
            && recorded.as_array().is_some_and(|r| !r.is_empty())
        {
            break;
        }
        assert!(Instant::now() < deadline, "the rules were not evaluated: {groups}");
        std::thread::sleep(Duration::from_millis(200));
    }

    let driver = Driver::start();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let c = driver.session().await;
        let mut failures = Vec::new();

        // Rules: the group with its file and interval, each rule with its type, query, labels,
        // state and health.
        c.goto(&format!("{base}/rules")).await.unwrap();
        let group = eventually("the rule group", || async {
            let t = texts(&c, "#rules-output .rule-group h2").await;
            (!t.is_empty()).then_some(t)
        })
        .await;
        assert_eq!(group, ["saltui-rules"]);
        assert_eq!(c.title().await.unwrap(), "Rules · saltdb");
        let current = c.find(Locator::Css("nav a[aria-current='page']")).await.unwrap();
        assert_eq!(current.text().await.unwrap(), "Rules");
        let meta = texts(&c, "#rules-output .rule-group dl.meta").await.join("\n");
        assert!(meta.contains(rule_file.to_str().unwrap()) && meta.contains("Interval\n1s"), "{meta}");
        assert!(!meta.contains("never"), "the group was evaluated: {meta}");
        assert_eq!(c.find_all(Locator::Css("#rules-output tbody tr")).await.unwrap().len(), 3);

        let record = rule_cells(&c, "job:saltui_up:sum").await;
        assert_eq!(record.len(), 6, "{record:?}");
        assert!(
            record[0].contains("job:saltui_up:sum") && record[0].contains("sum by (job) (saltui_up)"),
            "{record:?}"
        );
        assert_eq!((record[1].as_str(), record[2].as_str(), record[3].as_str()), ("recording", "–", "ok"));
        assert!(record[4].ends_with(" ago"), "last evaluation {record:?}");
        let alerting = rule_cells(&c, "SaltuiInstanceDown").await;
        assert!(alerting[0].contains("saltui_up == 0") && alerting[0].contains("for 0s"), "{alerting:?}");
        assert!(alerting[0].contains("severity=\"page\""), "labels as chips: {alerting:?}");
        assert_eq!(
            (alerting[1].as_str(), alerting[2].as_str(), alerting[3].as_str()),
            ("alerting", "firing\n1 alert", "ok")
        );
        let quiet = rule_cells(&c, "SaltuiNeverFires").await;
        assert_eq!((quiet[2].as_str(), quiet[3].as_str()), ("inactive\n0 alerts", "ok"));
        let title = c
            .find(Locator::Css("#rules-output tr[data-rule='job:saltui_up:sum'] time"))
            .await
            .unwrap()
            .attr("title")
            .await
            .unwrap()
            .unwrap_or_default();
        assert!(title.ends_with(" UTC"), "the absolute time on hover: {title:?}");
        screenshot(&c, "rules").await;

        // The filters: by name, then by type; both in the URL.
        let filter = c.find(Locator::Css("#rule-filter")).await.unwrap();
        filter.send_keys("down").await.unwrap();
        let shown = eventually("the filtered rules", || async {
            let rows = c.find_all(Locator::Css("#rules-output tbody tr")).await.ok()?;
            let mut names = Vec::new();
            for r in rows {
                names.push(r.attr("data-rule").await.ok()??);
            }
            (names.len() == 1).then_some(names)
        })
        .await;
        assert_eq!(shown, ["SaltuiInstanceDown"]);
        assert!(c.current_url().await.unwrap().query().unwrap_or_default().contains("search=down"));
        filter.clear().await.unwrap();
        c.find(Locator::Css("#rule-type option[value='recording']")).await.unwrap().click().await.unwrap();
        eventually("the recording rules only", || async {
            let rows = c.find_all(Locator::Css("#rules-output tbody tr")).await.ok()?;
            (rows.len() == 1 && rule_cells(&c, "job:saltui_up:sum").await.len() == 6).then_some(())
        })
        .await;

        // A rule's query links to the query page, which runs it.
        c.find(Locator::Css("#rules-output tr[data-rule='job:saltui_up:sum'] a.expr-link"))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
        let rows = eventually("the rule's query in the table", || async {
            let cells = texts(&c, "#result-table tbody td").await;
            (cells.len() == 2).then_some(cells)
        })
        .await;
        assert_eq!(rows[0], "{job=\"a\"}", "the rule's expression was run");
        assert_eq!(
            c.find(Locator::Css("#expr")).await.unwrap().prop("value").await.unwrap().as_deref(),
            Some("sum by (job) (saltui_up)")
        );
        failures.extend(console_errors(&c).await.into_iter().map(|e| format!("rules: {e}")));

        // Alerts: the rules by state with counts; the firing rule expands to its alert.
        c.goto(&format!("{base}/alerts")).await.unwrap();
        let firing = eventually("the firing section", || async {
            let t = texts(&c, "#alerts-firing h2").await;
            (!t.is_empty()).then_some(t)
        })
        .await;
        assert_eq!(firing, ["Firing (1)"]);
        assert_eq!(texts(&c, "#alerts-pending h2").await, ["Pending (0)"]);
        assert_eq!(texts(&c, "#alerts-inactive h2").await, ["Inactive (1)"]);
        assert_eq!(texts(&c, "#alerts-inactive summary .rule-name").await, ["SaltuiNeverFires"]);
        let current = c.find(Locator::Css("nav a[aria-current='page']")).await.unwrap();
        assert_eq!(current.text().await.unwrap(), "Alerts");
        let summary = c.find(Locator::Css("#alerts-firing details summary")).await.unwrap();
        let summary_text = summary.text().await.unwrap();
        assert!(summary_text.contains("SaltuiInstanceDown") && summary_text.contains("(1 active)"), "{summary_text}");
        summary.click().await.unwrap();
        let chips = eventually("the alert's labels", || async {
            let t = texts(&c, "#alerts-firing table.alerts tbody .chip").await;
            (!t.is_empty() && t.iter().all(|c| !c.is_empty())).then_some(t)
        })
        .await;
        assert_eq!(chips, ["alertname=\"SaltuiInstanceDown\"", "instance=\"i2\"", "job=\"a\"", "severity=\"page\""]);
        let cells = texts(&c, "#alerts-firing table.alerts tbody td").await;
        assert_eq!(cells.len(), 5, "{cells:?}");
        assert_eq!((cells[1].as_str(), cells[3].as_str()), ("firing", "0e+00"), "{cells:?}");
        assert!(cells[2].ends_with(" ago"), "active since {cells:?}");
        assert!(cells[4].contains("summary") && cells[4].contains("instance is down"), "annotations {cells:?}");
        let definition = texts(&c, "#alerts-firing dl.definition").await.join("\n");
        assert!(definition.contains("saltui_up == 0") && definition.contains("severity=\"page\""), "{definition}");
        screenshot(&c, "alerts").await;
        // Hiding a state drops its section and keeps the count.
        c.find(Locator::Css("#show-inactive")).await.unwrap().click().await.unwrap();
        eventually("the inactive rules hidden", || async {
            c.find_all(Locator::Css("#alerts-inactive")).await.ok()?.is_empty().then_some(())
        })
        .await;
        assert!(c.current_url().await.unwrap().query().unwrap_or_default().contains("hide=inactive"));
        failures.extend(console_errors(&c).await.into_iter().map(|e| format!("alerts: {e}")));

        // A phone: both pages fit the width.
        c.set_window_size(390, 844).await.unwrap();
        assert!(
            phone_overflow(&c, &format!("{base}/rules"), "#rules-output table").await <= 0,
            "/rules is wider than a phone"
        );
        screenshot(&c, "phone-rules").await;
        assert!(
            phone_overflow(&c, &format!("{base}/alerts"), "#alerts-firing details").await <= 0,
            "/alerts is wider than a phone"
        );
        c.find(Locator::Css("#alerts-firing details summary")).await.unwrap().click().await.unwrap();
        let overflow =
            c.execute("return document.documentElement.scrollWidth - window.innerWidth", vec![]).await.unwrap();
        assert!(overflow.as_i64().unwrap_or(1) <= 0, "an expanded alert is wider than a phone by {overflow}px");
        screenshot(&c, "phone-alerts").await;
        failures.extend(console_errors(&c).await.into_iter().map(|e| format!("phone: {e}")));

        c.close().await.unwrap();
        assert!(failures.is_empty(), "console errors: {failures:#?}");
    });
}

#[test]
fn rules_and_alerts_pages_without_rules_say_how_to_configure_them() {
    const TEST: &str = "rules_and_alerts_pages_without_rules_say_how_to_configure_them";
    if !browser_installed(TEST) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let server = Binary::spawn(dir.path(), &[]);
    let base = server.url("");
    let driver = Driver::start();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let c = driver.session().await;
        for (page, says) in [("/rules", "No rules are configured."), ("/alerts", "No alerting rules are configured.")] {
            c.goto(&format!("{base}{page}")).await.unwrap();
            let shown = eventually("the empty state", || async {
                let t = texts(&c, "main .empty-state").await.join("\n");
                (!t.is_empty()).then_some(t)
            })
            .await;
            assert!(
                shown.starts_with(says) && shown.contains("--rule-file") && shown.contains("docs/rules.md"),
                "{page}: {shown}"
            );
            screenshot(&c, &format!("{}-empty", &page[1..])).await;
        }
        let logged = console_errors(&c).await;
        c.close().await.unwrap();
        assert!(logged.is_empty(), "console errors: {logged:#?}");
    });
}

/// The storage page of a node on replicated ClickHouse shards: a row per server, the killed one
/// shown down and its shard's other replica as the one taking requests; no console error.
#[test]
fn storage_page_on_replicated_clickhouse_shows_each_server() {
    const TEST: &str = "storage_page_on_replicated_clickhouse_shows_each_server";
    if !browser_installed(TEST) || !crate::peers::installed("clickhouse-server", TEST, "clickhouse-server") {
        return;
    }
    if !crate::clickhouse_cluster::ZooKeeper::installed() {
        crate::skip::skip(TEST, "ZooKeeper is not installed", "apt-get install zookeeper");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let zookeeper = crate::clickhouse_cluster::ZooKeeper::start(&dir.path().join("zookeeper"));
    let mut servers = crate::clickhouse_cluster::start_replicated(dir.path(), 1, 2, zookeeper.port);
    let url = format!("{}|{}", servers[0][0].url, servers[0][1].url);
    let server = Binary::spawn(&dir.path().join("node"), &["--storage", "clickhouse", "--clickhouse-url", &url]);
    let base = server.url("");
    servers[0][0].kill9();
    let now = chrono::Utc::now().timestamp_millis();
    let (status, body) =
        import(&base, format!(r#"{{"metric":{{"__name__":"ui_ch"}},"values":[1],"timestamps":[{now}]}}"#));
    assert_eq!(status, 204, "{body}");
    let driver = Driver::start();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let c = driver.session().await;
        c.goto(&format!("{base}/storage")).await.unwrap();
        let rows = eventually("the ClickHouse servers table", || async {
            let rows = texts(&c, "#clickhouse-table tbody tr").await;
            (rows.len() == 2).then_some(rows)
        })
        .await;
        assert!(rows[0].contains(&servers[0][0].url) && rows[0].contains("down"), "{rows:?}");
        assert!(rows[1].contains(&servers[0][1].url) && rows[1].contains("current"), "{rows:?}");
        assert!(rows[1].contains("replicas live"), "{rows:?}");
        screenshot(&c, "storage-clickhouse").await;
        let logged = console_errors(&c).await;
        c.close().await.unwrap();
        assert!(logged.is_empty(), "console errors: {logged:#?}");
    });
}

/// A server with tenants: the header gets a tenant picker; the query table shows the series of
/// the tenant picked (sent as `X-Scope-OrgID` with every request) and none of the other's, the
/// choice survives a reload, and picking `default` again shows the default tenant's.
#[test]
fn the_tenant_picker_shows_one_tenant_at_a_time() {
    const TEST: &str = "the_tenant_picker_shows_one_tenant_at_a_time";
    if !browser_installed(TEST) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let server = Binary::spawn(dir.path(), &["--tenants", "--retention", "0"]);
    let base = server.url("");
    let t_ms = recent_ms();
    for owner in ["default", "team-a", "team-b"] {
        let line =
            json!({"metric": {"__name__": "saltui_tenant_m", "owner": owner}, "values": [1.0], "timestamps": [t_ms]});
        let (status, _, text) =
            post(&format!("{base}/api/v1/import"), &[("X-Scope-OrgID", owner)], format!("{line}\n").into_bytes());
        assert_eq!(status, 204, "{text}");
    }
    let driver = Driver::start();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let c = driver.session().await;
        let owners_shown = || async {
            let rows = texts(&c, "main table tbody tr").await;
            (!rows.is_empty()).then(|| {
                rows.iter()
                    .filter_map(|r| r.split("owner=\"").nth(1)?.split('"').next().map(str::to_owned))
                    .collect::<Vec<_>>()
            })
        };
        let at = chrono::DateTime::from_timestamp_millis(t_ms).unwrap().format("%Y-%m-%d%%20%H:%M:%S").to_string();
        let page = format!("{base}/graph?g0.expr=saltui_tenant_m&g0.tab=1&g0.end_input={at}");
        c.goto(&page).await.unwrap();
        let now = eventually("the tenant picker", || async { texts(&c, "#tenant-now").await.pop() }).await;
        assert_eq!(now, "reading as default");
        assert_eq!(eventually("the default tenant's rows", owners_shown).await, ["default"]);
        for (pick, shows) in [("team-a", "team-a"), ("team-b", "team-b"), ("default", "default")] {
            let input = c.find(Locator::Id("tenant-input")).await.unwrap();
            input.clear().await.unwrap();
            input.send_keys(&format!("{pick}{}", Key::Enter)).await.unwrap();
            let now = eventually("the picked tenant", || async {
                texts(&c, "#tenant-now").await.pop().filter(|t| t == &format!("reading as {pick}"))
            })
            .await;
            assert_eq!(now, format!("reading as {pick}"));
            let rows = eventually("the picked tenant's rows", || async {
                owners_shown().await.filter(|o| o.iter().all(|x| x == shows))
            })
            .await;
            assert_eq!(rows, [shows], "picked {pick}");
            screenshot(&c, &format!("tenant-{pick}")).await;
        }
        let logged = console_errors(&c).await;
        c.close().await.unwrap();
        assert!(logged.is_empty(), "console errors: {logged:#?}");
    });
    server.terminate();
}
