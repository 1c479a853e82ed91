//! Grafana's Prometheus data source against saltdb, screenshot-free.
//!
//! - `dashboards_are_well_formed`: the repository's dashboards and provisioning files, checked the
//!   way GreptimeDB's `grafana/scripts/check.sh` checks theirs (every panel has a description and
//!   the templated data source), plus units, legends, grid layout and variable references.
//! - `grafana_*` request tests: each request Grafana 10/11 sends (health check, buildinfo,
//!   form-encoded `query`/`query_range` with float-second times, `labels`, `label/<n>/values`
//!   with `U__` names, `series`, `metadata`, exemplars), shaped as Grafana's backend shapes them.
//! - `every_dashboard_panel_returns_data`: a real Prometheus scrapes node_exporter and saltdb and
//!   remote-writes into saltdb; every template variable is expanded by running its query, then
//!   every panel target runs as Grafana would run it on a 1,000-pixel panel over the last hour.
//!   Each must answer `success` with at least one series. Skipped outside CI without the peers.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::*;
use crate::peers::{available, free_port, Prometheus};

// ---------------------------------------------------------------------------------------------
// The files
// ---------------------------------------------------------------------------------------------

fn dashboards_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("dashboards")
}

/// Every `*.json` directly under `dashboards/`, parsed, in name order.
fn dashboard_files() -> Vec<(String, Value)> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dashboards_dir())
        .expect("dashboards/ exists")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            let text = std::fs::read_to_string(&p).unwrap();
            let v = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name} is not JSON: {e}"));
            (name, v)
        })
        .collect()
}

/// Every panel, those inside collapsed rows included.
fn all_panels(dashboard: &Value) -> Vec<&Value> {
    let mut out = Vec::new();
    for p in dashboard["panels"].as_array().map(Vec::as_slice).unwrap_or_default() {
        out.push(p);
        if let Some(inner) = p["panels"].as_array() {
            out.extend(inner.iter());
        }
    }
    out
}

fn variables(dashboard: &Value) -> &[Value] {
    dashboard["templating"]["list"].as_array().map(Vec::as_slice).unwrap_or_default()
}

/// The query text of a variable or target: a string, or `{"query": ...}` (Grafana 10+).
fn query_text(v: &Value) -> &str {
    v.as_str().or_else(|| v["query"].as_str()).unwrap_or("")
}

/// Grafana's data-source settings that shape requests, read from the provisioning file.
#[derive(Debug)]
struct DataSource {
    http_method: String,
    /// `jsonData.timeInterval`: the scrape interval, lowest step and base of `$__rate_interval`.
    time_interval_ms: i64,
    /// Custom HTTP headers (`jsonData.httpHeaderNameN`, `secureJsonData.httpHeaderValueN`),
    /// sent with every request (a tenant's `X-Scope-OrgID`).
    headers: Vec<(String, String)>,
}

fn provisioning_file(kind: &str) -> (PathBuf, String) {
    let dir = dashboards_dir().join("provisioning").join(kind);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
        .collect();
    files.sort();
    assert_eq!(files.len(), 1, "one provisioning file expected in {}", dir.display());
    let text = std::fs::read_to_string(&files[0]).unwrap();
    (files.remove(0), text)
}

/// `key: value` of the first line (comments ignored) whose key is `key`, quotes removed.
fn yaml_value<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.lines().map(|l| l.split(" #").next().unwrap_or("").trim()).find_map(|l| {
        let l = l.strip_prefix("- ").unwrap_or(l);
        let (k, v) = l.split_once(':')?;
        (k.trim() == key).then(|| v.trim().trim_matches(|c| c == '"' || c == '\''))
    })
}

fn provisioned_datasource() -> DataSource {
    let (path, text) = provisioning_file("datasources");
    let get = |k: &str| yaml_value(&text, k).unwrap_or_else(|| panic!("{}: no {k}", path.display()));
    assert_eq!(yaml_value(&text, "apiVersion"), Some("1"));
    assert_eq!(get("type"), "prometheus", "saltdb is added as a Prometheus data source");
    assert!(get("url").ends_with(":9201"), "the data source points at saltdb's default port");
    DataSource {
        http_method: get("httpMethod").to_owned(),
        time_interval_ms: saltdb::duration::parse_ms(get("timeInterval")).expect("timeInterval is a duration"),
        headers: Vec::new(),
    }
}

// ---------------------------------------------------------------------------------------------
// Grafana's arithmetic: intervals, steps, built-in variables, variable interpolation
// ---------------------------------------------------------------------------------------------

/// Grafana's `roundInterval` (ms): the "nice" interval near `range / max data points`.
fn round_interval(ms: i64) -> i64 {
    const TABLE: [(i64, i64); 26] = [
        (15, 10),
        (35, 20),
        (75, 50),
        (150, 100),
        (350, 200),
        (750, 500),
        (1_500, 1_000),
        (3_500, 2_000),
        (7_500, 5_000),
        (12_500, 10_000),
        (17_500, 15_000),
        (25_000, 20_000),
        (45_000, 30_000),
        (90_000, 60_000),
        (210_000, 120_000),
        (450_000, 300_000),
        (750_000, 600_000),
        (1_050_000, 900_000),
        (1_500_000, 1_200_000),
        (2_700_000, 1_800_000),
        (5_400_000, 3_600_000),
        (9_000_000, 7_200_000),
        (16_200_000, 10_800_000),
        (32_400_000, 21_600_000),
        (86_400_000, 43_200_000),
        (604_800_000, 86_400_000),
    ];
    TABLE.iter().find(|(below, _)| ms < *below).map_or(604_800_000, |(_, v)| *v)
}

/// Go's `time.Duration.String()` for whole milliseconds: `15s`, `1m0s`, `1h0m0s`, `1.5s`, `500ms`.
/// Grafana writes `$__rate_interval` this way.
fn go_duration(ms: i64) -> String {
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let (h, m, s, frac) = (ms / 3_600_000, ms / 60_000 % 60, ms / 1000 % 60, ms % 1000);
    let secs = if frac == 0 { format!("{s}s") } else { format!("{s}.{}s", format!("{frac:03}").trim_end_matches('0')) };
    match (h, m) {
        (0, 0) => secs,
        (0, m) => format!("{m}m{secs}"),
        (h, m) => format!("{h}h{m}m{secs}"),
    }
}

/// Grafana's `gtime.FormatInterval`: the largest whole unit (`15s`, `1m`, `2h`).
fn format_interval(ms: i64) -> String {
    for (unit, len) in [("y", 31_536_000_000), ("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)] {
        if ms >= len {
            return format!("{}{unit}", ms / len);
        }
    }
    format!("{}ms", ms.max(1))
}

/// One panel query as Grafana's backend computes it.
#[derive(Clone, Copy, Debug)]
struct QueryWindow {
    /// The dashboard time range (unaligned), ms.
    from_ms: i64,
    to_ms: i64,
    /// `step` of the range query and `$__interval`.
    step_ms: i64,
    rate_interval_ms: i64,
}

impl QueryWindow {
    /// `max_data_points` is the panel width in pixels unless the panel sets `maxDataPoints`;
    /// `min_interval_ms` is the target's or panel's `interval`, else the data source's
    /// `timeInterval`.
    fn new(from_ms: i64, to_ms: i64, max_data_points: i64, min_interval_ms: i64, scrape_ms: i64) -> Self {
        let calculated = round_interval((to_ms - from_ms) / max_data_points.max(1)).max(min_interval_ms);
        let safe = round_interval((to_ms - from_ms) / 11_000);
        let step_ms = calculated.max(safe);
        // $__rate_interval: max($__interval + scrape interval, 4 * scrape interval).
        let rate_interval_ms = (step_ms + scrape_ms).max(4 * scrape_ms);
        Self { from_ms, to_ms, step_ms, rate_interval_ms }
    }

    /// Start and end floored to the step, as Grafana aligns range queries.
    fn aligned(&self) -> (i64, i64) {
        (self.from_ms - self.from_ms.rem_euclid(self.step_ms), self.to_ms - self.to_ms.rem_euclid(self.step_ms))
    }

    /// Grafana's built-in variables, longest names first so `$__interval_ms` is not read as
    /// `$__interval` followed by `_ms`.
    fn builtins(&self) -> Vec<(&'static str, String)> {
        let range_ms = self.to_ms - self.from_ms;
        let range_s = (range_ms as f64 / 1000.0).round() as i64;
        vec![
            ("__rate_interval_ms", self.rate_interval_ms.to_string()),
            ("__rate_interval", go_duration(self.rate_interval_ms)),
            ("__interval_ms", self.step_ms.to_string()),
            ("__interval", format_interval(self.step_ms)),
            ("__range_ms", range_ms.to_string()),
            ("__range_s", range_s.to_string()),
            ("__range", format!("{range_s}s")),
        ]
    }
}

/// Replaces `$name`, `${name}` and `[[name]]` for every variable (built-ins included).
/// Variables are tried longest name first so `$job` never eats the start of `$jobs`.
fn interpolate(text: &str, vars: &[(String, String)]) -> String {
    let mut vars: Vec<&(String, String)> = vars.iter().collect();
    vars.sort_by_key(|(n, _)| std::cmp::Reverse(n.len()));
    let mut out = text.to_owned();
    for (name, value) in vars {
        out = out.replace(&format!("${{{name}}}"), value).replace(&format!("[[{name}]]"), value);
        out = out.replace(&format!("${name}"), value);
    }
    out
}

/// Seconds the way Go's `strconv.FormatFloat(x, 'f', -1, 64)` prints them (Grafana's backend).
fn secs(ms: i64) -> String {
    format!("{}", ms as f64 / 1000.0)
}

// ---------------------------------------------------------------------------------------------
// Grafana's requests
// ---------------------------------------------------------------------------------------------

/// Grafana's Prometheus data source, as far as saltdb can tell: its backend for queries and the
/// resource calls its frontend makes for variables and autocomplete.
struct Grafana {
    base: String,
    ds: DataSource,
}

/// `{{label}}` in a legend format.
static LEGEND_PLACEHOLDER: std::sync::LazyLock<regex::Regex> =
    std::sync::LazyLock::new(|| regex::Regex::new(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}").unwrap());

/// Status and parsed body.
fn answer(resp: reqwest::blocking::Response) -> (u16, Value) {
    let status = resp.status().as_u16();
    let text = resp.text().unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

impl Grafana {
    /// A query through the data source's HTTP method: POST with a form body (what the
    /// provisioning file sets), or GET with the same parameters in the URL.
    fn query(&self, endpoint: &str, params: &[(&str, String)]) -> (u16, Value) {
        let url = format!("{}/api/v1/{endpoint}", self.base);
        let req = if self.ds.http_method.eq_ignore_ascii_case("POST") {
            // Go's url.Values.Encode() + Content-Type: application/x-www-form-urlencoded.
            client().post(url).form(params)
        } else {
            client().get(url).query(params)
        };
        answer(self.with_headers(req).send().unwrap())
    }

    /// The data source's custom headers on `req`.
    fn with_headers(&self, req: reqwest::blocking::RequestBuilder) -> reqwest::blocking::RequestBuilder {
        self.ds.headers.iter().fold(req, |r, (k, v)| r.header(k, v))
    }

    fn query_range(&self, expr: &str, w: &QueryWindow) -> (u16, Value) {
        let (start, end) = w.aligned();
        self.query(
            "query_range",
            &[("query", expr.to_owned()), ("start", secs(start)), ("end", secs(end)), ("step", secs(w.step_ms))],
        )
    }

    fn query_instant(&self, expr: &str, time_ms: i64) -> (u16, Value) {
        self.query("query", &[("query", expr.to_owned()), ("time", secs(time_ms))])
    }

    /// `label_values(...)` as Grafana's frontend asks for it when the data source declares a
    /// Prometheus >= 2.24: `GET label/<name>/values` with `match[]`, `start`, `end`.
    fn label_values(&self, label: &str, selector: Option<&str>, from_ms: i64, to_ms: i64) -> (u16, Value) {
        let mut params = vec![("start", (from_ms / 1000).to_string()), ("end", ((to_ms + 999) / 1000).to_string())];
        if let Some(s) = selector {
            params.push(("match[]", s.to_owned()));
        }
        let url = format!("{}/api/v1/label/{}/values", self.base, escape_label_name(label));
        answer(self.with_headers(client().get(url).query(&params)).send().unwrap())
    }

    /// Expands a query variable as Grafana's `PrometheusMetricFindQuery` does; `vars` are the
    /// variables already expanded (Grafana interpolates them into the variable query).
    fn metric_find(
        &self,
        var: &Value,
        vars: &[(String, String)],
        from_ms: i64,
        to_ms: i64,
    ) -> Result<Vec<String>, String> {
        let query = interpolate(query_text(&var["query"]), vars);
        let label_values = regex::Regex::new(r"^label_values\((?:(.+),\s*)?([a-zA-Z_$][a-zA-Z0-9_]*)\)\s*$").unwrap();
        let query_result = regex::Regex::new(r"^query_result\((.+)\)\s*$").unwrap();
        let texts: Vec<String> = if let Some(c) = label_values.captures(&query) {
            let (status, v) = self.label_values(&c[2], c.get(1).map(|m| m.as_str()), from_ms, to_ms);
            if status != 200 || v["status"] != "success" {
                return Err(format!("{query}: {status} {v}"));
            }
            v["data"].as_array().unwrap().iter().map(|s| s.as_str().unwrap().to_owned()).collect()
        } else if let Some(c) = query_result.captures(&query) {
            let w = QueryWindow::new(from_ms, to_ms, 1000, self.ds.time_interval_ms, self.ds.time_interval_ms);
            let builtins: Vec<(String, String)> = w.builtins().into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
            let (status, v) = self.query_instant(&interpolate(&c[1], &builtins), to_ms);
            if status != 200 || v["status"] != "success" {
                return Err(format!("{query}: {status} {v}"));
            }
            query_result_texts(&v["data"])
        } else {
            return Err(format!("unsupported variable query {query:?}"));
        };
        let regex = var["regex"].as_str().unwrap_or("");
        Ok(apply_variable_regex(texts, regex))
    }
}

/// Grafana's `escapeForUtf8Support`: classic names unchanged, others as `U__...`.
fn escape_label_name(name: &str) -> String {
    if saltdb::labels::is_valid_label_name(name) {
        return name.to_owned();
    }
    let mut out = String::from("U__");
    for c in name.chars() {
        match c {
            '_' => out.push_str("__"),
            c if c.is_ascii_alphanumeric() => out.push(c),
            c => out.push_str(&format!("_{:x}_", u32::from(c))),
        }
    }
    out
}

/// The text Grafana makes of each instant result for `query_result()`:
/// `name{a="b",c="d"} value timestamp_ms`.
fn query_result_texts(data: &Value) -> Vec<String> {
    let result = &data["result"];
    let rows: Vec<&Value> = match data["resultType"].as_str() {
        Some("vector") => result.as_array().unwrap().iter().collect(),
        _ => vec![result],
    };
    rows.into_iter()
        .map(|r| {
            let (metric, value) = if r.is_array() { (&Value::Null, r) } else { (&r["metric"], &r["value"]) };
            let name = metric["__name__"].as_str().unwrap_or("");
            let labels: Vec<String> = metric
                .as_object()
                .map(|m| {
                    m.iter()
                        .filter(|(k, _)| *k != "__name__")
                        .map(|(k, v)| format!("{k}=\"{}\"", v.as_str().unwrap()))
                        .collect()
                })
                .unwrap_or_default();
            let ts = (value[0].as_f64().unwrap() * 1000.0).round() as i64;
            format!("{name}{{{}}} {} {ts}", labels.join(","), value[1].as_str().unwrap())
        })
        .collect()
}

/// A variable's `regex` (`/.../` form): keeps matching values, the first group when there is one.
fn apply_variable_regex(values: Vec<String>, regex: &str) -> Vec<String> {
    let Some(pattern) = regex.strip_prefix('/').and_then(|r| r.strip_suffix('/')) else {
        return values;
    };
    let re = regex::Regex::new(pattern).unwrap_or_else(|e| panic!("variable regex {regex}: {e}"));
    values
        .iter()
        .filter_map(|v| re.captures(v).map(|c| c.get(1).unwrap_or_else(|| c.get(0).unwrap()).as_str().to_owned()))
        .collect()
}

/// Grafana's escaping of a single-valued variable substituted into PromQL
/// (`prometheusRegularEscape`).
fn escape_single_value(v: &str) -> String {
    v.replace('\\', "\\\\").replace('\'', "\\\\'")
}

// ---------------------------------------------------------------------------------------------
// dashboards_are_well_formed: GreptimeDB's check.sh, as a Rust test
// ---------------------------------------------------------------------------------------------

const PANEL_TYPES: [&str; 5] = ["timeseries", "stat", "bargauge", "heatmap", "row"];
const DATASOURCE: &str = "${datasource}";

/// Everything wrong with one dashboard, as readable lines.
fn dashboard_problems(name: &str, d: &Value) -> Vec<String> {
    let mut bad = Vec::new();
    let mut problem = |s: String| bad.push(format!("{name}: {s}"));
    if d["schemaVersion"].as_i64().unwrap_or(0) < 36 {
        problem("schemaVersion must be that of Grafana 10/11 (>= 36)".into());
    }
    for key in ["uid", "title", "description"] {
        if d[key].as_str().unwrap_or("").is_empty() {
            problem(format!("no {key}"));
        }
    }
    let vars = variables(d);
    let ds_var = vars.iter().find(|v| v["type"] == "datasource" && v["name"] == "datasource");
    if !ds_var.is_some_and(|v| v["query"] == "prometheus") {
        problem("needs a `datasource` variable of type datasource, query \"prometheus\"".into());
    }
    let mut defined: BTreeSet<String> = vars.iter().filter_map(|v| v["name"].as_str().map(str::to_owned)).collect();
    defined.extend(QueryWindow::new(0, 1, 1, 1, 1).builtins().into_iter().map(|(n, _)| n.to_owned()));
    let reference = regex::Regex::new(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)|\[\[([A-Za-z_][A-Za-z0-9_]*)\]\]").unwrap();
    let check_refs = |what: &str, text: &str, problem: &mut dyn FnMut(String)| {
        for c in reference.captures_iter(text) {
            let n = c.get(1).or(c.get(2)).unwrap().as_str();
            if !defined.contains(n) {
                problem(format!("{what} uses ${n}, which is neither a dashboard variable nor a Grafana built-in"));
            }
        }
    };
    for v in vars.iter().filter(|v| v["type"] == "query") {
        let vname = v["name"].as_str().unwrap_or("?");
        if v["datasource"]["uid"] != DATASOURCE {
            problem(format!("variable ${vname} must use the {DATASOURCE} data source"));
        }
        if v["description"].as_str().unwrap_or("").is_empty() {
            problem(format!("variable ${vname} has no description"));
        }
        let q = query_text(&v["query"]);
        if !(q.starts_with("label_values(") || q.starts_with("query_result(")) {
            problem(format!("variable ${vname}: query {q:?} is neither label_values(...) nor query_result(...)"));
        }
        check_refs(&format!("variable ${vname}"), q, &mut problem);
    }

    let panels = all_panels(d);
    let mut ids = BTreeSet::new();
    let mut cells: BTreeMap<(i64, i64), String> = BTreeMap::new();
    for p in &panels {
        let title = p["title"].as_str().unwrap_or("").to_owned();
        let ty = p["type"].as_str().unwrap_or("");
        if !ids.insert(p["id"].as_i64().unwrap_or(-1)) {
            problem(format!("panel {title:?}: missing or duplicate id"));
        }
        if !PANEL_TYPES.contains(&ty) {
            problem(format!("panel {title:?}: type {ty:?} is not one of {PANEL_TYPES:?}"));
        }
        if title.is_empty() {
            problem(format!("panel id {}: no title", p["id"]));
        }
        // Layout: inside the 24-column grid, sensible sizes, no two panels on one cell.
        let g = &p["gridPos"];
        let (x, y, w, h) = (g["x"].as_i64(), g["y"].as_i64(), g["w"].as_i64(), g["h"].as_i64());
        let (Some(x), Some(y), Some(w), Some(h)) = (x, y, w, h) else {
            problem(format!("panel {title:?}: incomplete gridPos"));
            continue;
        };
        let min_w = match ty {
            "row" => 24,
            "stat" => 3,
            _ => 6,
        };
        let (min_h, max_h) = if ty == "row" { (1, 1) } else { (3, 16) };
        if x < 0 || x + w > 24 || w < min_w || !(min_h..=max_h).contains(&h) {
            problem(format!("panel {title:?}: gridPos {g} is outside the grid or an odd size"));
        }
        for cx in x..x + w {
            for cy in y..y + h {
                if let Some(other) = cells.insert((cx, cy), title.clone()) {
                    problem(format!("panels {other:?} and {title:?} overlap at x={cx}, y={cy}"));
                }
            }
        }
        if ty == "row" {
            continue;
        }
        if p["description"].as_str().unwrap_or("").trim().is_empty() {
            problem(format!("panel {title:?}: no description"));
        }
        if p["datasource"]["uid"] != DATASOURCE || p["datasource"]["type"] != "prometheus" {
            problem(format!("panel {title:?}: datasource must be {{type: prometheus, uid: {DATASOURCE}}}"));
        }
        let unit = if ty == "heatmap" { &p["options"]["yAxis"]["unit"] } else { &p["fieldConfig"]["defaults"]["unit"] };
        if unit.as_str().unwrap_or("").is_empty() {
            problem(format!("panel {title:?}: no unit"));
        }
        let targets = p["targets"].as_array().map(Vec::as_slice).unwrap_or_default();
        if targets.iter().all(|t| t["hide"] == true) {
            problem(format!("panel {title:?}: no query"));
        }
        let mut refs = BTreeSet::new();
        for t in targets {
            let what = format!("panel {title:?} target {}", t["refId"]);
            if !refs.insert(t["refId"].as_str().unwrap_or("").to_owned()) {
                problem(format!("{what}: missing or duplicate refId"));
            }
            if t["datasource"]["uid"] != DATASOURCE {
                problem(format!("{what}: datasource must be {DATASOURCE}"));
            }
            let expr = t["expr"].as_str().unwrap_or("");
            if expr.trim().is_empty() {
                problem(format!("{what}: empty expr"));
            }
            check_refs(&what, expr, &mut problem);
            // Every series gets a written legend; that the legend tells the series of a target
            // apart is checked against live answers in `run_dashboard`.
            if t["legendFormat"].as_str().unwrap_or("").trim().is_empty() || t["legendFormat"] == "__auto" {
                problem(format!("{what}: no legendFormat"));
            }
        }
    }
    bad
}

#[test]
fn dashboards_are_well_formed() {
    let files = dashboard_files();
    let names: Vec<&str> = files.iter().map(|(n, _)| n.as_str()).collect();
    for want in ["saltdb-overview.json", "node-exporter.json"] {
        assert!(names.contains(&want), "dashboards/{want} is missing (found {names:?})");
    }
    let mut bad = Vec::new();
    let mut uids = BTreeSet::new();
    for (name, d) in &files {
        bad.extend(dashboard_problems(name, d));
        if !uids.insert(d["uid"].as_str().unwrap_or("").to_owned()) {
            bad.push(format!("{name}: uid shared with another dashboard"));
        }
    }
    let overview = &files.iter().find(|(n, _)| n == "saltdb-overview.json").unwrap().1;
    let types: BTreeSet<&str> = all_panels(overview).iter().filter_map(|p| p["type"].as_str()).collect();
    for ty in ["timeseries", "stat", "bargauge", "heatmap"] {
        if !types.contains(ty) {
            bad.push(format!("saltdb-overview.json: no {ty} panel"));
        }
    }
    let var_names = |d: &Value| -> BTreeSet<String> {
        variables(d).iter().filter_map(|v| v["name"].as_str().map(str::to_owned)).collect()
    };
    let node = &files.iter().find(|(n, _)| n == "node-exporter.json").unwrap().1;
    for (name, d, want) in
        [("saltdb-overview.json", overview, &["instance"][..]), ("node-exporter.json", node, &["instance", "job"][..])]
    {
        for v in want {
            if !var_names(d).contains(*v) {
                bad.push(format!("{name}: no ${v} variable"));
            }
        }
    }

    // Provisioning: a Prometheus data source using POST, and a provider over dashboards/.
    let ds = provisioned_datasource();
    if !ds.http_method.eq_ignore_ascii_case("POST") {
        bad.push(format!("data source httpMethod is {}, not POST", ds.http_method));
    }
    let (path, provider) = provisioning_file("dashboards");
    if yaml_value(&provider, "type") != Some("file") || yaml_value(&provider, "path") != Some("${SALTDB_DASHBOARDS}") {
        bad.push(format!("{}: a file provider reading ${{SALTDB_DASHBOARDS}} is expected", path.display()));
    }
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    if !readme.contains("## Use with Grafana") || !readme.contains("SALTDB_DASHBOARDS") {
        bad.push("README.md: the \"Use with Grafana\" paragraph must name SALTDB_DASHBOARDS".into());
    }
    let page = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/grafana.md")).unwrap();
    if !page.contains("export SALTDB_DASHBOARDS=") {
        bad.push("docs/grafana.md must say how to set SALTDB_DASHBOARDS".into());
    }
    assert!(bad.is_empty(), "dashboard check failed:\n{}", bad.join("\n"));
}

/// The check must catch what it claims to: a copy of a real dashboard with the usual mistakes.
#[test]
fn dashboard_check_catches_mistakes() {
    let (name, mut d) = dashboard_files().into_iter().find(|(n, _)| n == "saltdb-overview.json").unwrap();
    assert!(dashboard_problems(&name, &d).is_empty());
    let panels = d["panels"].as_array_mut().unwrap();
    let i = panels.iter().position(|p| p["type"] == "timeseries").unwrap();
    let p = &mut panels[i];
    p["description"] = Value::from("");
    p["datasource"]["uid"] = Value::from("P1809F7CD0C75ACF3");
    p["fieldConfig"]["defaults"]["unit"] = Value::Null;
    p["targets"][0]["expr"] = Value::from("sum by (route) (rate(x[$__rate_intervall]))");
    p["targets"][0]["legendFormat"] = Value::from("");
    p["gridPos"]["x"] = Value::from(20);
    let problems = dashboard_problems(&name, &d).join("\n");
    for want in
        ["no description", "datasource must be", "no unit", "$__rate_intervall", "no legendFormat", "outside the grid"]
    {
        assert!(problems.contains(want), "the check did not report {want:?}:\n{problems}");
    }
}

#[test]
fn grafana_interval_arithmetic() {
    // A 1,000-pixel panel over the last hour with timeInterval 15s: step 15s,
    // $__rate_interval = max(15s + 15s, 4 * 15s) = 1m0s, $__range = 3600s.
    let w = QueryWindow::new(0, 3_600_000, 1000, 15_000, 15_000);
    assert_eq!(w.step_ms, 15_000);
    let b: BTreeMap<_, _> = w.builtins().into_iter().collect();
    assert_eq!(
        (b["__rate_interval"].as_str(), b["__interval"].as_str(), b["__range"].as_str()),
        ("1m0s", "15s", "3600s")
    );
    // Without a floor from the data source: 3.6 s rounds to 5 s.
    assert_eq!(QueryWindow::new(0, 3_600_000, 1000, 0, 15_000).step_ms, 5_000);
    assert_eq!(go_duration(5_400_000), "1h30m0s");
    assert_eq!(go_duration(1_500), "1.5s");
    assert_eq!(format_interval(120_000), "2m");
    let vars = vec![("job".to_owned(), "node".to_owned()), ("jobs".to_owned(), "x".to_owned())];
    assert_eq!(interpolate("{job=\"$job\",a=\"${jobs}\",b=\"[[job]]\"}", &vars), "{job=\"node\",a=\"x\",b=\"node\"}");
    assert_eq!(escape_label_name("service.name"), "U__service_2e_name");
    assert_eq!(escape_label_name("my_label"), "my_label");
}

// ---------------------------------------------------------------------------------------------
// Each request Grafana sends, against saltdb with known data
// ---------------------------------------------------------------------------------------------

struct Fixture {
    _dir: tempfile::TempDir,
    server: InProcess,
    /// First sample, ms (samples every 15 s).
    t0: i64,
    samples: usize,
    /// Imported series: labels -> values.
    series: BTreeMap<BTreeMap<String, String>, Vec<f64>>,
}

impl Fixture {
    /// node_exporter-like counters for two instances, one sample every 15 s for 20 minutes.
    fn start() -> Self {
        crate::watchdog::watch();
        let dir = tempfile::tempdir().unwrap();
        let server = InProcess::start(storage_config(dir.path()));
        let samples = 80;
        let t0 = recent_ms() - 30 * 60_000;
        let mut body = String::new();
        let mut series = BTreeMap::new();
        for (i, instance) in ["10.0.0.1:9100", "10.0.0.2:9100"].into_iter().enumerate() {
            for (j, mode) in ["idle", "system", "user"].into_iter().enumerate() {
                let labels: BTreeMap<String, String> = [
                    ("__name__", "node_cpu_seconds_total"),
                    ("job", "node"),
                    ("instance", instance),
                    ("cpu", "0"),
                    ("mode", mode),
                ]
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect();
                let values: Vec<f64> = (0..samples).map(|k| (k * (i + j + 1)) as f64 * 1.5).collect();
                let ts: Vec<i64> = (0..samples).map(|k| t0 + k as i64 * 15_000).collect();
                body += &serde_json::json!({"metric": labels, "values": values, "timestamps": ts}).to_string();
                body.push('\n');
                series.insert(labels, values);
            }
        }
        let (status, text) = import(&server.url(""), body);
        assert_eq!(status, 204, "{text}");
        Self { _dir: dir, server, t0, samples, series }
    }

    fn grafana(&self, method: &str) -> Grafana {
        let ds = DataSource { http_method: method.into(), time_interval_ms: 15_000, headers: Vec::new() };
        Grafana { base: self.server.url(""), ds }
    }

    fn end(&self) -> i64 {
        self.t0 + (self.samples as i64 - 1) * 15_000
    }

    /// The value Prometheus' lookback gives `labels` at `t` (latest sample at or before `t`).
    fn value_at(&self, labels: &BTreeMap<String, String>, t: i64) -> Option<f64> {
        let k = (t - self.t0).div_euclid(15_000).min(self.samples as i64 - 1);
        (t >= self.t0 && t - (self.t0 + k * 15_000) <= 300_000).then(|| self.series[labels][k as usize])
    }
}

fn success(status: u16, v: &Value, what: &str) -> Value {
    assert_eq!((status, v["status"].as_str()), (200, Some("success")), "{what}: {v}");
    v["data"].clone()
}

fn metric_of(r: &Value) -> BTreeMap<String, String> {
    r["metric"].as_object().unwrap().iter().map(|(k, v)| (k.clone(), v.as_str().unwrap().to_owned())).collect()
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array().unwrap_or_else(|| panic!("not a list: {v}")).iter().map(|s| s.as_str().unwrap().to_owned()).collect()
}

/// "Save & test": Grafana's backend runs the instant query `1+1` at time 4 (s) with the data
/// source's method, then the frontend reads buildinfo for the features it may use.
#[test]
fn grafana_health_check_and_buildinfo() {
    let f = Fixture::start();
    for method in ["POST", "GET"] {
        let g = f.grafana(method);
        let (status, v) = g.query("query", &[("query", "1+1".into()), ("time", "4".into())]);
        let data = success(status, &v, "health check");
        assert_eq!(data["resultType"], "scalar", "{v}");
        assert_eq!(data["result"], serde_json::json!([4, "2"]), "{v}");
    }
    let (status, v) = answer(client().get(f.server.url("/api/v1/status/buildinfo")).send().unwrap());
    let data = success(status, &v, "buildinfo");
    assert!(!data["version"].as_str().unwrap_or("").is_empty(), "{v}");
    // Grafana's alerting UI offers editing rules when `ruler_config_api` is "true" (a string).
    assert_eq!(data["features"], serde_json::json!({"ruler_config_api": "true"}), "{v}");
    f.server.stop();
}

/// Panel queries: form-encoded POST to `query_range` and `query` with float-second
/// `start`/`end`/`step`/`time` (Go's FormatFloat), answers checked against the imported data.
#[test]
fn grafana_query_range_and_instant_with_float_seconds() {
    let f = Fixture::start();
    let idle: BTreeMap<String, String> =
        f.series.keys().find(|k| k["mode"] == "idle" && k["instance"] == "10.0.0.1:9100").unwrap().clone();
    let selector = r#"node_cpu_seconds_total{instance="10.0.0.1:9100",mode="idle"}"#;
    for method in ["POST", "GET"] {
        let g = f.grafana(method);
        // Unaligned float seconds with a fractional step, the way an explore query with a
        // 500 ms min interval goes out: start=…​.123, step=7.5.
        for (start, end, step) in
            [(f.t0 + 60_123, f.t0 + 240_123, 7_500), (f.t0, f.end(), 15_000), (f.t0 + 500, f.t0 + 5_500, 500)]
        {
            let params =
                [("query", selector.to_owned()), ("start", secs(start)), ("end", secs(end)), ("step", secs(step))];
            let (status, v) = g.query("query_range", &params);
            let data = success(status, &v, &format!("{method} query_range {params:?}"));
            assert_eq!(data["resultType"], "matrix");
            let result = data["result"].as_array().unwrap();
            assert_eq!(result.len(), 1, "{v}");
            assert_eq!(metric_of(&result[0]), idle, "{v}");
            let got: Vec<(i64, f64)> = result[0]["values"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| ((p[0].as_f64().unwrap() * 1000.0).round() as i64, p[1].as_str().unwrap().parse().unwrap()))
                .collect();
            let want: Vec<(i64, f64)> = (0..)
                .map(|k| start + k * step)
                .take_while(|t| *t <= end)
                .filter_map(|t| f.value_at(&idle, t).map(|v| (t, v)))
                .collect();
            assert!(!want.is_empty());
            assert_eq!(got, want, "{method} query_range {params:?}");
        }
        // $__rate_interval as Grafana writes it ("1m0s") parses and equals the plain duration.
        let w = QueryWindow::new(f.t0 + 120_000, f.end(), 1000, 15_000, 15_000);
        let expr = |d: &str| format!("sum by (mode) (rate(node_cpu_seconds_total[{d}]))");
        let builtins: Vec<(String, String)> = w.builtins().into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
        let grafana_expr = interpolate(&expr("$__rate_interval"), &builtins);
        assert!(grafana_expr.contains("[1m0s]"), "{grafana_expr}");
        let (s1, a) = g.query_range(&grafana_expr, &w);
        let (s2, b) = g.query_range(&expr("60s"), &w);
        let a = success(s1, &a, &grafana_expr);
        assert_eq!(a["result"].as_array().unwrap().len(), 3, "{a}");
        assert_eq!(a, success(s2, &b, "60s"));
        // Instant query at an unaligned float time (a stat/bargauge "instant" target).
        let t = f.t0 + 301_250;
        let (status, v) = g.query_instant(selector, t);
        let data = success(status, &v, "instant");
        let r = &data["result"][0];
        assert_eq!(r["value"][0].as_f64().unwrap(), t as f64 / 1000.0, "{v}");
        assert_eq!(r["value"][1].as_str().unwrap().parse::<f64>().unwrap(), f.value_at(&idle, t).unwrap());
    }
    f.server.stop();
}

/// A tenant's data source as the README provisions it (its YAML block with
/// `httpHeaderName1: X-Scope-OrgID`): Grafana sends the header with every query and variable
/// request, and each answer holds that tenant's series alone.
#[test]
fn grafana_tenant_data_source_from_the_readme_reads_its_tenant() {
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let block = readme
        .split("```yaml\n")
        .skip(1)
        .filter_map(|b| b.split("```").next())
        .find(|b| b.contains("httpHeaderName1"))
        .expect("the README provisions a tenant's data source");
    let get = |k: &str| yaml_value(block, k).unwrap_or_else(|| panic!("README tenant data source: no {k}"));
    assert_eq!(get("type"), "prometheus");
    assert!(get("url").ends_with(":9201"));
    let (header, tenant) = (get("httpHeaderName1").to_owned(), get("httpHeaderValue1").to_owned());
    assert_eq!(header, "X-Scope-OrgID");

    let dir = tempfile::tempdir().unwrap();
    let bin = Binary::spawn(dir.path(), &["--tenants"]);
    let t0 = recent_ms() - 10 * 60_000;
    for (who, instance, value) in [(tenant.as_str(), "ours:9100", 1.0), ("someone-else", "theirs:9100", 100.0)] {
        let lines: String = (0..20)
            .map(|k| {
                let line = serde_json::json!({"metric": {"__name__": "node_load1", "job": "node", "instance": instance},
                    "values": [value], "timestamps": [t0 + k * 15_000]});
                format!("{line}\n")
            })
            .collect();
        let (status, _, text) = post(&bin.url("/api/v1/import"), &[("X-Scope-OrgID", who)], lines.into_bytes());
        assert_eq!(status, 204, "{text}");
    }
    let ds = DataSource {
        http_method: get("httpMethod").to_owned(),
        time_interval_ms: 15_000,
        headers: vec![(header, tenant)],
    };
    let g = Grafana { base: bin.url(""), ds };
    let w = QueryWindow::new(t0, t0 + 19 * 15_000, 1000, 15_000, 15_000);
    let (status, v) = g.query_range("sum(node_load1)", &w);
    let data = success(status, &v, "query_range as the tenant");
    let values: Vec<f64> = data["result"][0]["values"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p[1].as_str().unwrap().parse().unwrap())
        .collect();
    assert!(!values.is_empty() && values.iter().all(|&x| x == 1.0), "{v}");
    let (status, v) = g.label_values("instance", Some("node_load1"), t0, t0 + 19 * 15_000);
    assert_eq!(strings(&success(status, &v, "label values as the tenant")), ["ours:9100"]);
    let (status, v) = g.query("series", &[("match[]", "node_load1".to_owned())]);
    let series = success(status, &v, "series as the tenant");
    assert_eq!(series.as_array().unwrap().len(), 1, "{v}");
    assert!(series[0].get("__tenant__").is_none(), "{v}");
}

/// Autocomplete and variables: `labels` (POST form, GET fallback), `label/<n>/values` with
/// `match[]`, `start`, `end`, `limit`, and `series` with the same, as Grafana 11 sends them.
#[test]
fn grafana_labels_values_and_series() {
    let f = Fixture::start();
    let base = f.server.url("");
    let (start, end) = (((f.t0 / 1000) - 60).to_string(), ((f.end() / 1000) + 60).to_string());
    let names_in_data: BTreeSet<String> = f.series.keys().flat_map(|k| k.keys().cloned()).collect();
    let form = |extra: &[(&str, &str)]| {
        let mut p = vec![("start", start.as_str()), ("end", end.as_str())];
        p.extend_from_slice(extra);
        p.into_iter().map(|(k, v)| (k.to_owned(), v.to_owned())).collect::<Vec<_>>()
    };

    // fetchLabels / fetchSeriesLabelsMatch: POST form (the data source's method) with match[]
    // and limit, then the GET Grafana falls back to, with the parameters in the URL.
    let p = form(&[("match[]", "node_cpu_seconds_total"), ("limit", "40000")]);
    let (s, v) = answer(client().post(format!("{base}/api/v1/labels")).form(&p).send().unwrap());
    let names: BTreeSet<String> = strings(&success(s, &v, "POST labels")).into_iter().collect();
    assert_eq!(names, names_in_data);
    let (s, v) = answer(client().get(format!("{base}/api/v1/labels")).query(&p).send().unwrap());
    assert_eq!(strings(&success(s, &v, "GET labels")).into_iter().collect::<BTreeSet<_>>(), names_in_data);
    // Outside the data's time range there are no labels: Grafana's time filter is honoured.
    let before = [("start", "1000"), ("end", "2000")];
    let (s, v) = answer(client().post(format!("{base}/api/v1/labels")).form(&before).send().unwrap());
    assert_eq!(success(s, &v, "labels before the data"), serde_json::json!([]));

    // Label values, always GET: the metric list, then values filtered by match[], with limit.
    let values = |label: &str, extra: &[(&str, &str)]| -> (u16, Value) {
        answer(client().get(format!("{base}/api/v1/label/{label}/values")).query(&form(extra)).send().unwrap())
    };
    let (s, v) = values("__name__", &[]);
    assert_eq!(strings(&success(s, &v, "metric names")), ["node_cpu_seconds_total"]);
    let (s, v) =
        values("mode", &[("match[]", r#"node_cpu_seconds_total{instance="10.0.0.2:9100"}"#), ("limit", "40000")]);
    assert_eq!(strings(&success(s, &v, "mode values")), ["idle", "system", "user"]);
    let (s, v) = values("instance", &[("match[]", r#"{__name__="node_cpu_seconds_total",mode="user"}"#)]);
    assert_eq!(strings(&success(s, &v, "instance values")), ["10.0.0.1:9100", "10.0.0.2:9100"]);
    let (s, v) = values("mode", &[("limit", "2")]);
    assert_eq!(strings(&success(s, &v, "limited")).len(), 2, "{v}");

    // The series endpoint (Grafana < 2.24 mode and the metrics browser): POST form, two match[].
    let p = form(&[
        ("match[]", r#"node_cpu_seconds_total{mode="idle"}"#),
        ("match[]", r#"node_cpu_seconds_total{instance="10.0.0.1:9100",mode="user"}"#),
        ("limit", "40000"),
    ]);
    let (s, v) = answer(client().post(format!("{base}/api/v1/series")).form(&p).send().unwrap());
    let got: BTreeSet<BTreeMap<String, String>> = success(s, &v, "POST series")
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o.as_object().unwrap().iter().map(|(k, v)| (k.clone(), v.as_str().unwrap().to_owned())).collect())
        .collect();
    let want: BTreeSet<BTreeMap<String, String>> = f
        .series
        .keys()
        .filter(|k| k["mode"] == "idle" || (k["mode"] == "user" && k["instance"] == "10.0.0.1:9100"))
        .cloned()
        .collect();
    assert_eq!(got, want);

    // Variables: label_values(metric, label) and query_result(...) with a regex, expanded the
    // way Grafana expands them.
    let g = f.grafana("POST");
    let var = |query: &str, regex: &str| serde_json::json!({"query": {"query": query, "qryType": 1}, "regex": regex});
    let vars = vec![("mode".to_owned(), "user".to_owned())];
    let got = g.metric_find(
        &var(r#"label_values(node_cpu_seconds_total{mode="$mode"}, instance)"#, ""),
        &vars,
        f.t0,
        f.end(),
    );
    assert_eq!(got.unwrap(), ["10.0.0.1:9100", "10.0.0.2:9100"]);
    let got = g.metric_find(
        &var(
            "query_result(topk(1, sum by (instance) (rate(node_cpu_seconds_total[$__rate_interval]))))",
            r#"/instance="([^"]+)"/"#,
        ),
        &[],
        f.t0,
        f.end(),
    );
    assert_eq!(got.unwrap(), ["10.0.0.2:9100"], "10.0.0.2 counts faster");
    f.server.stop();
}

/// UTF-8 label names: Grafana escapes names that are not classic (`service.name`) to
/// `U__service_2e_name` in the label-values path; classic names written in the escaped form work
/// too. An escaped name nothing was written under has no values (not an error), as in
/// Prometheus.
#[test]
fn grafana_utf8_escaped_label_names() {
    let f = Fixture::start();
    let base = f.server.url("");
    let get = |path: &str| answer(client().get(format!("{base}{path}")).send().unwrap());
    let (s, v) = get("/api/v1/label/U__mode/values");
    assert_eq!(strings(&success(s, &v, "U__mode")), ["idle", "system", "user"]);
    let (s, v) = get(&format!("/api/v1/label/{}/values", escape_label_name("service.name")));
    assert_eq!(success(s, &v, "U__service_2e_name"), serde_json::json!([]));
    let (s, v) = get("/api/v1/label/U__a_0_b/values");
    assert_eq!((s, v["errorType"].as_str()), (400, Some("bad_data")), "a NUL in a label name is refused: {v}");
    f.server.stop();
}

/// Metadata (autocomplete's metric types and help) and exemplars: the shapes Grafana reads.
#[test]
fn grafana_metadata_and_exemplars() {
    let f = Fixture::start();
    let base = f.server.url("");
    let (s, v) = answer(client().get(format!("{base}/api/v1/metadata")).send().unwrap());
    assert!(success(s, &v, "metadata").is_object(), "{v}");
    let (s, v) =
        answer(client().get(format!("{base}/api/v1/metadata?metric=node_cpu_seconds_total&limit=1")).send().unwrap());
    assert!(success(s, &v, "metadata for one metric").is_object(), "{v}");
    let q = [("query", "node_cpu_seconds_total".to_owned()), ("start", secs(f.t0)), ("end", secs(f.end()))];
    let (s, v) = answer(client().get(format!("{base}/api/v1/query_exemplars")).query(&q).send().unwrap());
    assert_eq!(success(s, &v, "exemplars"), serde_json::json!([]));
    f.server.stop();
}

// ---------------------------------------------------------------------------------------------
// Every panel of every dashboard against saltdb fed by a real Prometheus
// ---------------------------------------------------------------------------------------------

/// A child process killed by PID on drop.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits until `check` holds, or fails with `what` after `secs` seconds.
fn wait_for(what: &str, secs: u64, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// The single number of an instant query at `time_ms`, if it returned one series.
fn instant_number(g: &Grafana, expr: &str, time_ms: i64) -> Option<f64> {
    let (status, v) = g.query_instant(expr, time_ms);
    (status == 200).then_some(())?;
    v["data"]["result"][0]["value"][1].as_str()?.parse().ok()
}

/// Runs every target of every panel of `dashboard` as Grafana would; returns the problems.
fn run_dashboard(g: &Grafana, name: &str, dashboard: &Value, now_ms: i64) -> (Vec<String>, usize) {
    let (from_ms, to_ms) = (now_ms - 3_600_000, now_ms);
    let mut bad = Vec::new();
    // Variables in order, each seeing those before it; the first value is selected.
    let mut vars: Vec<(String, String)> = Vec::new();
    for v in variables(dashboard) {
        let vname = v["name"].as_str().unwrap().to_owned();
        match v["type"].as_str() {
            Some("datasource") => vars.push((vname, "saltdb".into())),
            Some("query") => match g.metric_find(v, &vars, from_ms, to_ms) {
                Ok(values) if !values.is_empty() => {
                    println!("grafana: {name} ${vname} = {:?} (of {})", values[0], values.len());
                    vars.push((vname, escape_single_value(&values[0])));
                }
                Ok(_) => bad.push(format!("{name}: variable ${vname} has no values")),
                Err(e) => bad.push(format!("{name}: variable ${vname}: {e}")),
            },
            other => bad.push(format!("{name}: variable ${vname} of unexpected type {other:?}")),
        }
    }
    let mut ran = 0;
    for p in all_panels(dashboard).into_iter().filter(|p| p["type"] != "row") {
        let title = p["title"].as_str().unwrap_or("");
        for t in p["targets"].as_array().unwrap().iter().filter(|t| t["hide"] != true) {
            let min_interval = [&t["interval"], &p["interval"]]
                .iter()
                .find_map(|i| i.as_str().filter(|s| !s.is_empty()))
                .map_or(g.ds.time_interval_ms, |s| saltdb::duration::parse_ms(s).unwrap());
            let max_points = p["maxDataPoints"].as_i64().unwrap_or(1000);
            let w = QueryWindow::new(from_ms, to_ms, max_points, min_interval, g.ds.time_interval_ms);
            let mut all = vars.clone();
            all.extend(w.builtins().into_iter().map(|(k, v)| (k.to_owned(), v)));
            let expr = interpolate(t["expr"].as_str().unwrap(), &all);
            let instant = t["instant"] == true && t["range"] != true;
            let (status, v) = if instant { g.query_instant(&expr, to_ms) } else { g.query_range(&expr, &w) };
            ran += 1;
            let what = format!(
                "{name} / {title} / {} ({})",
                t["refId"].as_str().unwrap_or("?"),
                if instant { "instant" } else { "range" }
            );
            if status != 200 || v["status"] != "success" {
                bad.push(format!("{what}: {status} {v}\n    query: {expr}"));
                continue;
            }
            let result = v["data"]["result"].as_array().cloned().unwrap_or_default();
            if result.is_empty() {
                bad.push(format!("{what}: no series\n    query: {expr}"));
                continue;
            }
            // Every {{label}} of the legend exists on every series (or Grafana prints blanks),
            // and the legend tells the series of the target apart.
            let legend = t["legendFormat"].as_str().unwrap_or("");
            let placeholder = &*LEGEND_PLACEHOLDER;
            let mut shown = BTreeSet::new();
            for r in &result {
                let text = placeholder.replace_all(legend, |c: &regex::Captures| {
                    match r["metric"].get(&c[1]).and_then(Value::as_str) {
                        Some(v) => v.to_owned(),
                        None => {
                            bad.push(format!("{what}: legend {legend:?} names {}, absent from {}", &c[0], r["metric"]));
                            String::new()
                        }
                    }
                });
                if !shown.insert(text.clone().into_owned()) {
                    bad.push(format!("{what}: two series share the legend {text:?}; add the label that differs"));
                }
            }
        }
    }
    (bad, ran)
}

#[test]
fn every_dashboard_panel_returns_data() {
    if !available("prometheus", "grafana::every_dashboard_panel_returns_data")
        || !available("prometheus-node-exporter", "grafana::every_dashboard_panel_returns_data")
    {
        return;
    }
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let saltdb = Binary::spawn(&dir.path().join("saltdb"), &["--retention", "0"]);
    let ne_port = free_port();
    let ne = Proc(
        Command::new("prometheus-node-exporter")
            .arg(format!("--web.listen-address=127.0.0.1:{ne_port}"))
            // Only the collectors the host dashboard reads: a full scrape can take longer than
            // the 1 s scrape interval on a loaded CI machine, and a failed scrape marks every
            // series stale.
            .args([
                "--collector.disable-defaults",
                "--collector.cpu",
                "--collector.diskstats",
                "--collector.filesystem",
                "--collector.loadavg",
                "--collector.meminfo",
                "--collector.netdev",
                "--collector.stat",
                "--collector.uname",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start node_exporter"),
    );
    let g = Grafana { base: saltdb.url(""), ds: provisioned_datasource() };

    // "Save & test" before any data: health check and buildinfo.
    let (status, v) = g.query_instant("1+1", 4_000);
    assert_eq!(success(status, &v, "health check")["result"][1], "2");
    let (status, v) = answer(client().get(saltdb.url("/api/v1/status/buildinfo")).send().unwrap());
    assert_eq!(success(status, &v, "buildinfo")["features"], serde_json::json!({"ruler_config_api": "true"}));

    let config = crate::peers::scrape_and_remote_write_config(ne_port, saltdb.addr);
    let _prometheus = Prometheus::start(dir.path(), &config);
    // Grafana evaluates range queries at step-aligned times, so the newest point a panel shows
    // is at the last step boundary, up to one step ago. Wait until, at that time, every series
    // of both jobs in saltdb has a few samples (series such as the write-latency histogram only
    // appear after the first remote-write, and a slow first scrape of saltdb yields only `up`),
    // some of them taken after the health check (so rate() over query latency has two points).
    let dashboards = dashboard_files();
    let step_ms = dashboards
        .iter()
        .flat_map(|(_, d)| all_panels(d))
        .map(|p| {
            let points = p["maxDataPoints"].as_i64().unwrap_or(1000);
            QueryWindow::new(0, 3_600_000, points, g.ds.time_interval_ms, g.ds.time_interval_ms).step_ms
        })
        .max()
        .unwrap();
    wait_for("three scrapes of node_exporter and saltdb before the last step boundary", 45, || {
        let now = chrono::Utc::now().timestamp_millis();
        let t = now - now % step_ms;
        instant_number(&g, r#"min(count_over_time({job=~"node|saltdb"}[1m]))"#, t).is_some_and(|n| n >= 3.0)
            && instant_number(&g, "count(count by (job) (up == 1))", t).is_some_and(|n| n >= 2.0)
            && instant_number(&g, r#"sum(count_over_time(saltdb_http_requests_total{route="/api/v1/query"}[1m]))"#, t)
                .is_some_and(|n| n >= 3.0)
    });
    let waited = started.elapsed();

    // Autocomplete's metadata (sent by Prometheus through remote-write).
    wait_for("metric metadata through remote-write", 10, || {
        let (_, v) = answer(client().get(saltdb.url("/api/v1/metadata?metric=node_cpu_seconds_total")).send().unwrap());
        v["data"]["node_cpu_seconds_total"][0]["type"] == "counter"
    });

    // On a loaded machine (CI runs every test at once) scrapes and remote-write batches can
    // lag behind the wait above: run all targets again, a few seconds later, before failing.
    let (mut bad, mut ran) = (Vec::new(), 0);
    for attempt in 0..6 {
        if attempt > 0 {
            eprintln!("grafana: {} targets without data yet, retrying", bad.len());
            std::thread::sleep(Duration::from_secs(5));
        }
        let now = chrono::Utc::now().timestamp_millis();
        (bad, ran) = (Vec::new(), 0);
        for (name, d) in &dashboards {
            let (b, n) = run_dashboard(&g, name, d, now);
            bad.extend(b);
            ran += n;
        }
        if bad.is_empty() {
            break;
        }
    }
    println!(
        "grafana: {ran} panel targets ran against saltdb fed by Prometheus ({:.1}s waiting for data, {:.1}s total)",
        waited.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
    assert!(ran > 0, "no panel target ran");
    assert!(bad.is_empty(), "{} panel targets failed:\n{}", bad.len(), bad.join("\n"));
    drop(ne);
    saltdb.terminate();
}
