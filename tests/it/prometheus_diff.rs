//! Differential test against the real Prometheus 2.42: identical data remote-written to both,
//! then >100 PromQL queries (instant at off-grid times, and range) compared with relative
//! tolerance 1e-6. Timestamps are jittered off the step grid so the 2.x/3.x difference at the
//! left edge of range selectors cannot matter.
//!
//! A second dataset of native histograms (Prometheus with `--enable-feature=native-histograms`)
//! is compared the same way, histograms by count, sum and every bucket; `histogram_quantile`,
//! whose interpolation changed in 3.x, through each version's rule (see [`Tally::quantile`]).

use std::collections::BTreeMap;

use saltdb::remote::proto::{Label, Sample, TimeSeries, WriteRequest};
use serde_json::Value;

use crate::common::*;
use crate::peers::{available, Prometheus};

const STEP_MS: i64 = 15_000;
const SCRAPES: i64 = 241;

/// Deterministic pseudo-random numbers in [0, 1).
pub(crate) struct Rng(pub u64);

impl Rng {
    pub(crate) fn next(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The series of the dataset and how each value evolves per scrape.
struct Series {
    labels: Vec<(&'static str, String)>,
    value: f64,
    kind: Kind,
}

enum Kind {
    Counter { rate: f64, reset_at: Option<i64> },
    Gauge { level: f64, noise: f64 },
    Bucket { share: f64 },
    UpDown,
    Gap { from: i64, to: i64 },
}

fn dataset() -> Vec<Series> {
    let mut out = Vec::new();
    let l = |pairs: &[(&'static str, &str)]| pairs.iter().map(|(k, v)| (*k, (*v).to_owned())).collect::<Vec<_>>();
    for (i, inst) in ["i1", "i2", "i3"].iter().enumerate() {
        for method in ["get", "post"] {
            for code in ["200", "500"] {
                let rate =
                    (i + 1) as f64 * if code == "200" { 10.0 } else { 0.5 } * if method == "get" { 2.0 } else { 1.0 };
                let reset_at = (i == 1 && method == "get" && code == "200").then_some(120);
                out.push(Series {
                    labels: l(&[
                        ("__name__", "http_requests_total"),
                        ("job", "api"),
                        ("instance", inst),
                        ("method", method),
                        ("code", code),
                    ]),
                    value: 100.0 * (i + 1) as f64,
                    kind: Kind::Counter { rate, reset_at },
                });
            }
        }
        for room in ["a", "b"] {
            out.push(Series {
                labels: l(&[("__name__", "temp_celsius"), ("job", "sensors"), ("instance", inst), ("room", room)]),
                value: 0.0,
                kind: Kind::Gauge { level: if room == "a" { 20.0 + i as f64 } else { -5.0 - i as f64 }, noise: 3.0 },
            });
        }
        out.push(Series {
            labels: l(&[("__name__", "up"), ("job", "api"), ("instance", inst)]),
            value: 1.0,
            kind: Kind::UpDown,
        });
        for (k, mode) in ["idle", "user", "system"].iter().enumerate() {
            out.push(Series {
                labels: l(&[
                    ("__name__", "node_cpu_seconds_total"),
                    ("job", "node"),
                    ("instance", inst),
                    ("mode", mode),
                ]),
                value: 1000.0,
                kind: Kind::Counter { rate: [0.8, 0.15, 0.05][k], reset_at: None },
            });
        }
    }
    for inst in ["i1", "i2"] {
        for (le, share) in [("0.1", 0.3), ("0.5", 0.7), ("1", 0.9), ("+Inf", 1.0)] {
            out.push(Series {
                labels: l(&[
                    ("__name__", "req_duration_seconds_bucket"),
                    ("job", "api"),
                    ("instance", inst),
                    ("le", le),
                ]),
                value: 0.0,
                kind: Kind::Bucket { share },
            });
        }
    }
    out.push(Series {
        labels: l(&[("__name__", "sparse_gauge"), ("job", "misc")]),
        value: 5.0,
        kind: Kind::Gap { from: 100, to: 160 },
    });
    out
}

/// Builds one remote-write request per scrape round, in time order.
fn requests(t0: i64) -> Vec<WriteRequest> {
    let mut series = dataset();
    let mut rng = Rng(0x5eed);
    let mut out = Vec::new();
    for k in 0..SCRAPES {
        let mut req = WriteRequest::default();
        for s in &mut series {
            let r = rng.next();
            let v = match &mut s.kind {
                Kind::Counter { rate, reset_at } => {
                    if *reset_at == Some(k) {
                        s.value = 0.0;
                    }
                    s.value += (*rate * 15.0 * (0.5 + r) * 100.0).round() / 100.0;
                    s.value
                }
                Kind::Gauge { level, noise } => ((*level + (r - 0.5) * *noise) * 100.0).round() / 100.0,
                Kind::Bucket { share } => {
                    // Cumulative buckets share one underlying count stream (rng reset per round).
                    s.value += (k as f64 * 0.37).sin().abs() * 20.0 * *share + *share * 5.0;
                    s.value.round()
                }
                Kind::UpDown => {
                    if r < 0.05 {
                        0.0
                    } else {
                        1.0
                    }
                }
                Kind::Gap { from, to } => {
                    if (*from..*to).contains(&k) {
                        continue;
                    }
                    s.value + (k as f64 / 10.0).floor()
                }
            };
            // Jitter: up to 2 s late, never on the step grid.
            let ts = t0 + k * STEP_MS + 137 + (r * 2000.0) as i64;
            let mut labels: Vec<Label> =
                s.labels.iter().map(|(n, v)| Label { name: (*n).to_owned(), value: v.clone() }).collect();
            labels.sort_by(|a, b| a.name.cmp(&b.name));
            req.timeseries.push(TimeSeries {
                labels,
                samples: vec![Sample { value: v, timestamp: ts }],
                ..Default::default()
            });
        }
        out.push(req);
    }
    out
}

fn queries(at_ms: i64) -> Vec<String> {
    let at = at_ms as f64 / 1000.0;
    let mut q: Vec<String> = [
        // selectors
        "http_requests_total",
        r#"http_requests_total{method="get"}"#,
        r#"http_requests_total{code=~"5.."}"#,
        r#"http_requests_total{code!="200"}"#,
        r#"http_requests_total{instance!~"i1|i2"}"#,
        r#"{__name__=~"temp.*"}"#,
        r#"{__name__=~"temp.*", room="b"}"#,
        "temp_celsius offset 5m",
        "sparse_gauge",
        "up == 0",
        // rates and friends
        "rate(http_requests_total[5m])",
        "rate(http_requests_total[1m])",
        "irate(http_requests_total[5m])",
        "increase(http_requests_total[10m])",
        "rate(node_cpu_seconds_total[5m])",
        "delta(temp_celsius[10m])",
        "idelta(temp_celsius[5m])",
        "deriv(temp_celsius[10m])",
        "predict_linear(temp_celsius[10m], 600)",
        "resets(http_requests_total[30m])",
        "changes(up[30m])",
        "changes(sparse_gauge[20m])",
        // *_over_time
        "avg_over_time(temp_celsius[10m])",
        "min_over_time(temp_celsius[10m])",
        "max_over_time(temp_celsius[10m])",
        "sum_over_time(up[10m])",
        "count_over_time(temp_celsius[10m])",
        "last_over_time(sparse_gauge[30m])",
        "present_over_time(sparse_gauge[5m])",
        "stddev_over_time(temp_celsius[10m])",
        "stdvar_over_time(temp_celsius[10m])",
        "quantile_over_time(0.9, temp_celsius[10m])",
        "quantile_over_time(0, temp_celsius[10m])",
        "absent_over_time(nonexistent[5m])",
        "absent_over_time(temp_celsius[5m])",
        // aggregations
        "sum(http_requests_total)",
        "sum by (instance) (rate(http_requests_total[5m]))",
        "sum without (method, code) (rate(http_requests_total[5m]))",
        "avg by (room) (temp_celsius)",
        "min by (room) (temp_celsius)",
        "max(temp_celsius)",
        "count(temp_celsius)",
        "count by (job) ({__name__=~\".+\"})",
        "group by (instance) (http_requests_total)",
        "stddev(temp_celsius)",
        "stdvar by (room) (temp_celsius)",
        "topk(2, temp_celsius)",
        "bottomk(2, rate(http_requests_total[5m]))",
        "topk by (instance) (1, rate(http_requests_total[5m]))",
        "quantile(0.5, temp_celsius)",
        "quantile by (room) (0.9, temp_celsius)",
        "count_values(\"value\", up)",
        "sum(up) by (job)",
        // binary operators
        "http_requests_total * 2",
        "2 ^ up",
        "-temp_celsius",
        "temp_celsius % 3",
        "temp_celsius > 0",
        "temp_celsius > bool 0",
        "temp_celsius == bool temp_celsius",
        "up != 1",
        "rate(http_requests_total{code=\"500\"}[5m]) / ignoring(code) rate(http_requests_total{code=\"200\"}[5m])",
        "sum by (instance) (rate(http_requests_total{code=\"500\"}[5m])) / on(instance) sum by (instance) (rate(http_requests_total[5m]))",
        "rate(http_requests_total[5m]) / on(instance) group_left sum by (instance) (rate(http_requests_total[5m]))",
        "sum by (instance) (rate(http_requests_total[5m])) * on(instance) group_right up",
        "http_requests_total and on(instance) (up == 1)",
        "temp_celsius or http_requests_total",
        "http_requests_total unless on(instance) (up == 0)",
        "temp_celsius{room=\"a\"} - on(instance) temp_celsius{room=\"b\"}",
        "1 + 2 * 3 - 4 / 2",
        "2 ^ 3 ^ 2",
        "(temp_celsius > 0) + 1",
        "scalar(sum(up)) * temp_celsius",
        "vector(1) + scalar(count(up))",
        // functions
        "abs(temp_celsius)",
        "ceil(temp_celsius)",
        "floor(temp_celsius)",
        "round(temp_celsius)",
        "round(temp_celsius, 0.5)",
        "sqrt(abs(temp_celsius))",
        "exp(temp_celsius / 10)",
        "ln(http_requests_total)",
        "log2(http_requests_total)",
        "log10(http_requests_total)",
        "clamp(temp_celsius, -2, 21)",
        "clamp_min(temp_celsius, 0)",
        "clamp_max(temp_celsius, 0)",
        "sgn(temp_celsius)",
        "timestamp(temp_celsius)",
        "time()",
        "vector(time())",
        "absent(nonexistent)",
        "absent(nonexistent{job=\"x\"})",
        "absent(up)",
        "label_replace(up, \"host\", \"$1\", \"instance\", \"i(.*)\")",
        "label_replace(up, \"instance\", \"\", \"instance\", \".*\")",
        "label_join(up, \"combined\", \"-\", \"job\", \"instance\")",
        "sort(temp_celsius)",
        "sort_desc(rate(http_requests_total[5m]))",
        "histogram_quantile(0.9, rate(req_duration_seconds_bucket[5m]))",
        "histogram_quantile(0.5, sum by (le) (rate(req_duration_seconds_bucket[5m])))",
        "histogram_quantile(0.99, sum by (le, instance) (rate(req_duration_seconds_bucket[10m])))",
        "hour()",
        "minute(timestamp(up))",
        "day_of_week()",
        "day_of_month()",
        "days_in_month()",
        "month()",
        "year()",
        "sin(temp_celsius)",
        "cos(temp_celsius)",
        "tan(temp_celsius / 100)",
        "asin(clamp(temp_celsius / 100, -1, 1))",
        "atan(temp_celsius)",
        "sinh(temp_celsius / 10)",
        "deg(temp_celsius)",
        "rad(temp_celsius)",
        "pi()",
        // subqueries
        "max_over_time(rate(http_requests_total[5m])[30m:1m])",
        "avg_over_time(temp_celsius[10m:2m])",
        "min_over_time(sum by (instance) (rate(http_requests_total[5m]))[20m:30s] offset 2m)",
        "rate(sum by (instance) (http_requests_total)[10m:])",
        // Samples and outer steps off the 5 s grid (see `off_every_edge`): 2.42's closed left
        // edges cannot differ from saltdb's left-open ones here.
        "avg_over_time(rate(node_cpu_seconds_total[1m])[2m:10s])",
        "count_over_time(temp_celsius[2m:10s])",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    q.push(format!("temp_celsius @ {at}"));
    q.push(format!("rate(http_requests_total[5m] @ {})", at - 600.0));
    q.push(format!("sum(temp_celsius offset 10m @ {at})"));
    q
}

/// One point of a result: a float or a native histogram.
#[derive(Clone, Debug)]
pub(crate) enum Val {
    F(f64),
    H(Hist),
}

/// A native histogram as the query API prints it: count, sum and the non-empty buckets as
/// (boundary rule, lower, upper, count), sorted by lower bound.
#[derive(Clone, Debug)]
pub(crate) struct Hist {
    pub count: f64,
    pub sum: f64,
    pub buckets: Vec<(u64, f64, f64, f64)>,
}

/// A result reduced to comparable form: series labels -> points (ts, value).
pub(crate) type Points = BTreeMap<String, Vec<(f64, Val)>>;

fn parse_value(v: &Value) -> f64 {
    match v.as_str().unwrap_or_default() {
        "NaN" => f64::NAN,
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        s => s.parse().unwrap_or(f64::NAN),
    }
}

/// A histogram object of the query API (`{"count", "sum", "buckets"}`); Prometheus 2.42 and
/// saltdb print the same fields.
fn parse_hist(h: &Value) -> Hist {
    let mut buckets: Vec<(u64, f64, f64, f64)> = h["buckets"]
        .as_array()
        .map(|bs| {
            bs.iter()
                .map(|b| (b[0].as_u64().unwrap_or(99), parse_value(&b[1]), parse_value(&b[2]), parse_value(&b[3])))
                .filter(|b| b.3 != 0.0)
                .collect()
        })
        .unwrap_or_default();
    buckets.sort_by(|a, b| a.1.total_cmp(&b.1));
    Hist { count: parse_value(&h["count"]), sum: parse_value(&h["sum"]), buckets }
}

/// Reduces a query API answer to its result type and [`Points`]; `strip_name` drops `__name__`
/// from the series keys (to match a function's output with its input).
pub(crate) fn reduce(v: &Value, strip_name: bool) -> Result<(String, Points), String> {
    if v["status"] != "success" {
        return Err(format!("error: {}", v["error"]));
    }
    let kind = v["data"]["resultType"].as_str().unwrap_or_default().to_owned();
    let mut out = Points::new();
    let float = |p: &Value| (p[0].as_f64().unwrap_or(f64::NAN), Val::F(parse_value(&p[1])));
    let hist = |p: &Value| (p[0].as_f64().unwrap_or(f64::NAN), Val::H(parse_hist(&p[1])));
    match kind.as_str() {
        "scalar" | "string" => {
            out.insert(String::new(), vec![float(&v["data"]["result"])]);
        }
        _ => {
            for s in v["data"]["result"].as_array().cloned().unwrap_or_default() {
                let mut metric = s["metric"].clone();
                if strip_name {
                    metric.as_object_mut().map(|m| m.remove("__name__"));
                }
                let mut pts: Vec<(f64, Val)> = Vec::new();
                pts.extend(s["values"].as_array().into_iter().flatten().map(float));
                pts.extend(s["histograms"].as_array().into_iter().flatten().map(hist));
                pts.extend(s.get("value").map(float));
                pts.extend(s.get("histogram").map(hist));
                pts.sort_by(|a, b| a.0.total_cmp(&b.0));
                out.insert(metric.to_string(), pts);
            }
        }
    }
    Ok((kind, out))
}

fn close(a: f64, b: f64) -> bool {
    (a.is_nan() && b.is_nan()) || a == b || (a - b).abs() <= 1e-6 * a.abs().max(b.abs())
}

fn same_value(a: &Val, b: &Val) -> bool {
    match (a, b) {
        (Val::F(a), Val::F(b)) => close(*a, *b),
        (Val::H(a), Val::H(b)) => {
            close(a.count, b.count)
                && close(a.sum, b.sum)
                && a.buckets.len() == b.buckets.len()
                && a.buckets
                    .iter()
                    .zip(&b.buckets)
                    .all(|(x, y)| x.0 == y.0 && close(x.1, y.1) && close(x.2, y.2) && close(x.3, y.3))
        }
        _ => false,
    }
}

fn compare(ours: &Value, theirs: &Value) -> Option<String> {
    compare_reduced(reduce(ours, false), reduce(theirs, false))
}

/// Compares two reduced answers; `None` when they agree (both refusing the query is agreement).
pub(crate) fn compare_reduced(
    ours: Result<(String, Points), String>,
    theirs: Result<(String, Points), String>,
) -> Option<String> {
    let (ours, theirs) = match (ours, theirs) {
        (Ok(o), Ok(t)) => (o, t),
        (Err(_), Err(_)) => return None,
        (o, t) => return Some(format!("saltdb {:?} vs prometheus {:?}", o.map(|x| x.0), t.map(|x| x.0))),
    };
    if ours.0 != theirs.0 {
        return Some(format!("result type {} vs {}", ours.0, theirs.0));
    }
    let (o, t) = (ours.1, theirs.1);
    let keys_o: Vec<_> = o.keys().collect();
    let keys_t: Vec<_> = t.keys().collect();
    if keys_o != keys_t {
        return Some(format!("series differ:\n  saltdb:     {keys_o:?}\n  prometheus: {keys_t:?}"));
    }
    for (k, po) in &o {
        let pt = &t[k];
        if po.len() != pt.len() {
            return Some(format!("{k}: {} points vs {}", po.len(), pt.len()));
        }
        for (a, b) in po.iter().zip(pt) {
            if !close(a.0, b.0) || !same_value(&a.1, &b.1) {
                return Some(format!("{k}: saltdb {a:?} vs prometheus {b:?}"));
            }
        }
    }
    None
}

pub(crate) fn post_write(base: &str, body: &[u8]) {
    let resp = client()
        .post(format!("{base}/api/v1/write"))
        .header("Content-Encoding", "snappy")
        .header("Content-Type", "application/x-protobuf")
        .header("X-Prometheus-Remote-Write-Version", "0.1.0")
        .body(body.to_vec())
        .send()
        .unwrap();
    let status = resp.status().as_u16();
    assert!(status == 204 || status == 200, "{base}: remote write {status}: {}", resp.text().unwrap_or_default());
}

pub(crate) fn get(base: &str, path: &str, params: &[(&str, String)]) -> Value {
    let resp = client().post(format!("{base}{path}")).form(params).send().unwrap();
    serde_json::from_str(&resp.text().unwrap()).unwrap_or(Value::Null)
}

#[test]
fn promql_answers_match_prometheus() {
    if !available("prometheus", "prometheus_diff::promql_answers_match_prometheus") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    answers_match_prometheus(dir.path(), None);
}

/// The same with saltdb on the ClickHouse backend (two real shards).
#[test]
fn promql_answers_on_clickhouse_match_prometheus() {
    let test = "prometheus_diff::promql_answers_on_clickhouse_match_prometheus";
    if !available("prometheus", test) || !crate::peers::installed("clickhouse-server", test, "clickhouse-server") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let shards = crate::clickhouse_cluster::start(&dir.path().join("clickhouse"), 2);
    answers_match_prometheus(dir.path(), Some(shards.iter().map(|s| vec![s.url.clone()]).collect()));
}

/// The same on replicated ClickHouse shards: two shards of two replicas and a ZooKeeper.
#[test]
fn promql_answers_on_replicated_clickhouse_match_prometheus() {
    let test = "prometheus_diff::promql_answers_on_replicated_clickhouse_match_prometheus";
    if !available("prometheus", test) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some((_zookeeper, shards)) =
        crate::clickhouse_replicated::replicated_cluster(&dir.path().join("clickhouse"), test)
    else {
        return;
    };
    let urls = shards.iter().map(|replicas| replicas.iter().map(|r| r.url.clone()).collect());
    answers_match_prometheus(dir.path(), Some(urls.collect()));
}

/// Writes the same data to Prometheus and to saltdb (on ClickHouse when `clickhouse` names
/// shards, each a list of replicas) and compares ~125 queries' answers, instant and range.
fn answers_match_prometheus(dir: &std::path::Path, clickhouse: Option<Vec<Vec<String>>>) {
    std::fs::create_dir_all(dir.join("prom")).unwrap();
    let prom = Prometheus::start(&dir.join("prom"), "global:\n  scrape_interval: 1h\n");
    let mut config =
        saltdb::server::ServerConfig::new("127.0.0.1:0".parse().unwrap(), storage_config(&dir.join("salt")));
    config.clickhouse = clickhouse.map(saltdb::clickhouse::ClickHouseConfig::replicated);
    let on = if config.clickhouse.is_some() { " on ClickHouse" } else { "" };
    let salt = InProcess::start_with(crate::common::runtime(), config);
    let now = chrono::Utc::now().timestamp_millis();
    let t0 = now - now % 60_000 - SCRAPES * STEP_MS;
    let requests = requests(t0);
    let t_end = t0 + (SCRAPES - 1) * STEP_MS;
    let instants = [t_end - 90_500, t_end - 1_234_500, t0 + 1_800_250];
    let range_start = t0 + 1_800_500;
    let samples = requests.iter().flat_map(|r| &r.timeseries).flat_map(|s| &s.samples).map(|s| s.timestamp);
    off_every_edge(samples.chain(instants).chain([range_start]));
    for req in requests {
        let body = saltdb::remote::snappy_body(&req);
        post_write(&prom.base, &body);
        post_write(&salt.url(""), &body);
    }
    let mut failures = Vec::new();
    let mut compared = 0;
    for q in queries(t_end - 300_000) {
        for at in instants {
            let params = [("query", q.clone()), ("time", (at as f64 / 1000.0).to_string())];
            let (o, t) = (get(&salt.url(""), "/api/v1/query", &params), get(&prom.base, "/api/v1/query", &params));
            compared += 1;
            if let Some(why) = compare(&o, &t) {
                failures.push(format!("instant {q} @ {at}: {why}"));
            }
        }
        let params = [
            ("query", q.clone()),
            // Late enough that no window (up to a 20m subquery, offset 2m, over a 5m rate) reaches
            // the first samples: near a series start, `rate` extrapolation follows Prometheus
            // >= 2.51 (half-interval limit before the zero point, prometheus#13725) while the
            // reference here is 2.42. Pinned by a unit test in src/promql/tests.rs.
            ("start", (range_start as f64 / 1000.0).to_string()),
            ("end", ((t_end - 60_000) as f64 / 1000.0).to_string()),
            ("step", "60".to_owned()),
        ];
        let t = get(&prom.base, "/api/v1/query_range", &params);
        if t["status"] == "success" {
            compared += 1;
            let o = get(&salt.url(""), "/api/v1/query_range", &params);
            if let Some(why) = compare(&o, &t) {
                failures.push(format!("range {q}: {why}"));
            }
        }
    }
    eprintln!("prometheus_diff{on}: {compared} comparisons, {} differ", failures.len());
    assert!(compared >= 300, "too few comparisons: {compared}");
    assert!(
        failures.is_empty(),
        "{} of {compared} answers differ from Prometheus:\n{}",
        failures.len(),
        failures.join("\n")
    );
    salt.stop();
}

/// Every duration of the queries (ranges, subquery steps, offsets, range query steps) is a
/// multiple of 5 s, and so is every left edge of a window when its right edge is. Prometheus
/// 2.42 closes windows on the left (`[t - r, t]`), 3.x and saltdb leave them open (`(t - r,
/// t]`): a sample exactly on the left edge of a range selector, or an outer step on the
/// subquery step grid (then the inner step at `t - r` is on the edge), changes 2.42's answer
/// only. The samples and the outer steps are kept off the 5 s grid (the `@` times in the
/// queries pin selectors, no subquery), which makes the comparison deterministic; saltdb's
/// rule is pinned on the edges in `src/promql/tests.rs`
/// (`subquery_windows_are_left_open_at_sample_and_step_edges`), see `docs/promql.md`.
fn off_every_edge(times: impl IntoIterator<Item = i64>) {
    for t in times {
        assert!(t % 5_000 != 0, "{t} ms is on the 5 s grid: 2.42 and 3.x answer differently there");
    }
}

// ---- Native histograms ----

/// The cumulative state of one native histogram series: zero bucket, buckets by index, count
/// and sum.
#[derive(Clone, Default)]
pub(crate) struct HistState {
    pub zero: f64,
    pub positive: BTreeMap<i32, f64>,
    pub negative: BTreeMap<i32, f64>,
    pub count: f64,
    pub sum: f64,
}

/// How a native histogram series of the dataset evolves per round.
struct NativeSeries {
    labels: Vec<(&'static str, &'static str)>,
    schema: i32,
    zero_threshold: f64,
    /// Float histogram (fractional counts) instead of integer.
    float: bool,
    /// Gauge histogram: a fresh snapshot each round (counts go up and down), reset hint GAUGE.
    gauge: bool,
    /// Share of observations that are negative.
    negative_share: f64,
    /// Round at which the counter starts again from zero.
    reset_at: Option<i64>,
    /// Round at which the series lowers its resolution to this schema (its buckets merged),
    /// as a client library does when a histogram grows too many buckets.
    schema_change: Option<(i64, i32)>,
    /// Rounds in which the series sends a float sample (its count) instead of a histogram, as
    /// Prometheus allows a series to switch.
    floats: std::ops::Range<i64>,
    /// Rounds in which the series sends nothing (longer than the 5m lookback).
    missing: std::ops::Range<i64>,
    state: HistState,
}

/// The index of the exponential bucket holding `v > 0` in `schema`: upper bound
/// `2^(index * 2^-schema)`.
fn bucket_index(v: f64, schema: i32) -> i32 {
    (v.log2() * 2f64.powi(schema)).ceil() as i32
}

impl HistState {
    pub(crate) fn observe(&mut self, v: f64, weight: f64, schema: i32, zero_threshold: f64) {
        if v.abs() <= zero_threshold {
            self.zero += weight;
        } else if v > 0.0 {
            *self.positive.entry(bucket_index(v, schema)).or_default() += weight;
        } else {
            *self.negative.entry(bucket_index(-v, schema)).or_default() += weight;
        }
        self.count += weight;
        self.sum += v * weight;
    }
}

fn native_dataset() -> Vec<NativeSeries> {
    let s = |labels: Vec<(&'static str, &'static str)>, schema, zero_threshold, float, gauge| NativeSeries {
        labels,
        schema,
        zero_threshold,
        float,
        gauge,
        negative_share: 0.0,
        reset_at: None,
        schema_change: None,
        floats: 0..0,
        missing: 0..0,
        state: HistState::default(),
    };
    let req = |instance, job| vec![("__name__", "nh_request_seconds"), ("instance", instance), ("job", job)];
    let queue = |instance| vec![("__name__", "nh_queue_size"), ("instance", instance), ("job", "worker")];
    vec![
        s(req("i1", "api"), 0, 0.001, false, false),
        NativeSeries { reset_at: Some(80), ..s(req("i2", "api"), 3, 0.001, false, false) },
        NativeSeries { negative_share: 0.3, ..s(req("i3", "api"), -1, 0.01, false, false) },
        // Named to sort before the float histogram i4: Prometheus 2.42 answers `rate` of an
        // integer histogram series that follows a float histogram series in the same selector
        // with an empty histogram (`histogram_count(rate(nh_request_seconds{instance=~"i4|i5"}[1m]))`
        // gives 0 for i5, while `{instance="i5"}` alone gives the right 1.06).
        NativeSeries { schema_change: Some((50, 1)), ..s(req("i0", "api"), 3, 0.001, false, false) },
        NativeSeries { reset_at: Some(80), ..s(req("i4", "batch"), 1, 0.001, true, false) },
        // The extreme schemas (named to sort before i4, see i0).
        s(req("h8", "api"), 8, 0.001, false, false),
        s(req("h-4", "api"), -4, 0.001, false, false),
        NativeSeries { floats: 40..70, ..s(vec![("__name__", "nh_switch"), ("job", "misc")], 0, 0.001, false, false) },
        NativeSeries { missing: 88..112, ..s(vec![("__name__", "nh_gappy"), ("job", "misc")], 2, 0.001, true, false) },
        s(queue("i1"), 2, 0.001, false, true),
        NativeSeries { negative_share: 0.2, ..s(queue("i2"), 0, 0.001, true, true) },
    ]
}

/// Spans and counts of populated buckets, ascending by index.
pub(crate) fn spans(buckets: &BTreeMap<i32, f64>) -> (Vec<saltdb::remote::proto::BucketSpan>, Vec<f64>) {
    let mut spans: Vec<saltdb::remote::proto::BucketSpan> = Vec::new();
    let mut next: Option<i32> = None;
    for &i in buckets.keys() {
        match (next, spans.last_mut()) {
            (Some(n), Some(last)) if n == i => last.length += 1,
            (Some(n), _) => spans.push(saltdb::remote::proto::BucketSpan { offset: i - n, length: 1 }),
            (None, _) => spans.push(saltdb::remote::proto::BucketSpan { offset: i, length: 1 }),
        }
        next = Some(i + 1);
    }
    (spans, buckets.values().copied().collect())
}

/// Integer bucket counts as deltas to the previous bucket.
pub(crate) fn deltas(counts: &[f64]) -> Vec<i64> {
    let mut prev = 0;
    counts
        .iter()
        .map(|&c| {
            let d = c as i64 - prev;
            prev = c as i64;
            d
        })
        .collect()
}

impl NativeSeries {
    fn to_proto(&self, timestamp: i64) -> saltdb::remote::proto::Histogram {
        use saltdb::remote::proto::histogram::{Count, ZeroCount};
        let st = &self.state;
        let (positive_spans, pos) = spans(&st.positive);
        let (negative_spans, neg) = spans(&st.negative);
        let mut h = saltdb::remote::proto::Histogram {
            sum: st.sum,
            schema: self.schema,
            zero_threshold: self.zero_threshold,
            positive_spans,
            negative_spans,
            reset_hint: if self.gauge { 3 } else { 0 },
            timestamp,
            ..Default::default()
        };
        if self.float {
            h.count = Some(Count::CountFloat(st.count));
            h.zero_count = Some(ZeroCount::ZeroCountFloat(st.zero));
            (h.positive_counts, h.negative_counts) = (pos, neg);
        } else {
            h.count = Some(Count::CountInt(st.count as u64));
            h.zero_count = Some(ZeroCount::ZeroCountInt(st.zero as u64));
            (h.positive_deltas, h.negative_deltas) = (deltas(&pos), deltas(&neg));
        }
        h
    }

    /// One round: a counter gains 5-24 observations (after a reset, from zero); a gauge is a
    /// fresh snapshot of 10-49.
    fn advance(&mut self, round: i64, rng: &mut Rng) {
        if let Some((_, schema)) = self.schema_change.filter(|c| c.0 == round) {
            let delta = self.schema - schema;
            let merge = |buckets: &BTreeMap<i32, f64>| {
                let mut out = BTreeMap::new();
                for (&i, &c) in buckets {
                    *out.entry(((i - 1) >> delta) + 1).or_default() += c;
                }
                out
            };
            self.state.positive = merge(&self.state.positive);
            self.state.negative = merge(&self.state.negative);
            self.schema = schema;
        }
        if self.gauge || self.reset_at == Some(round) {
            self.state = HistState::default();
        }
        let n = if self.gauge { 10 + (rng.next() * 40.0) as usize } else { 5 + (rng.next() * 20.0) as usize };
        for _ in 0..n {
            let r = rng.next();
            let magnitude = if r < 0.08 { 0.0 } else { (rng.next() * 6.0 - 3.0).exp2() };
            let v = if rng.next() < self.negative_share { -magnitude } else { magnitude };
            // Float histograms count observations with fractional weights, multiples of 1/4 so
            // that every sum of them is exact (Prometheus refuses a count below the buckets').
            let weight = if self.float { 0.25 * (1.0 + (rng.next() * 8.0).floor()) } else { 1.0 };
            self.state.observe((v * 1000.0).round() / 1000.0, weight, self.schema, self.zero_threshold);
        }
    }
}

/// One remote-write request per round of the native histogram series, in time order.
fn native_requests(t0: i64) -> Vec<WriteRequest> {
    let mut series = native_dataset();
    let mut rng = Rng(0xb0c5);
    (0..NATIVE_ROUNDS)
        .map(|k| {
            let timeseries = series
                .iter_mut()
                .filter(|s| !s.missing.contains(&k))
                .map(|s| {
                    s.advance(k, &mut rng);
                    // Jitter up to 2 s late, to an odd millisecond: never the left edge of a
                    // window of the queries (at multiples of 250 ms), which 2.x includes and 3.x
                    // leaves out.
                    let ts = t0 + k * STEP_MS + 137 + 2 * (rng.next() * 1000.0) as i64;
                    let labels =
                        s.labels.iter().map(|(n, v)| Label { name: (*n).into(), value: (*v).into() }).collect();
                    if s.floats.contains(&k) {
                        let samples = vec![Sample { value: s.state.count, timestamp: ts }];
                        return TimeSeries { labels, samples, ..Default::default() };
                    }
                    TimeSeries { labels, histograms: vec![s.to_proto(ts)], ..Default::default() }
                })
                .collect();
            WriteRequest { timeseries, metadata: vec![] }
        })
        .collect()
}

const NATIVE_ROUNDS: i64 = 121;

/// Histogram queries compared as they are. Left out because Prometheus 2.42 lacks them:
/// `histogram_avg`, `histogram_stddev`, `histogram_stdvar` (not in 2.42), `avg`,
/// `sum_over_time`, `avg_over_time` of histograms (2.42 aggregates only their float value), and
/// `last_over_time` and `label_replace` (2.42 answers a histogram's float value, 0), `irate`, `idelta`, `resets`,
/// `changes`, `max_over_time` and the like (2.42 reads the float value of histograms), and
/// arithmetic but `+` between histograms or with scalars (2.42 answers floats, 0). Left out
/// because the versions differ: `rate`/`increase` of the gauge histograms (2.42 never clamps
/// a histogram's extrapolation at the zero point, 3.x does, prometheus#16828; with resets
/// detected at every snapshot the zero point falls inside the window: 1.9562 vs 1.9510).
const NATIVE_QUERIES: &[&str] = &[
    "nh_request_seconds",
    "nh_queue_size",
    r#"nh_request_seconds{instance="i2"}"#,
    "nh_request_seconds offset 5m",
    "histogram_count(nh_request_seconds)",
    "histogram_sum(nh_request_seconds)",
    "histogram_count(nh_queue_size)",
    "histogram_sum(nh_queue_size)",
    "rate(nh_request_seconds[5m])",
    "rate(nh_request_seconds[1m])",
    "increase(nh_request_seconds[10m])",
    "histogram_count(rate(nh_request_seconds[5m]))",
    "histogram_sum(rate(nh_request_seconds[5m]))",
    "histogram_count(increase(nh_request_seconds[10m]))",
    "histogram_sum(rate(nh_request_seconds[5m])) / histogram_count(rate(nh_request_seconds[5m]))",
    "sum(rate(nh_request_seconds[5m]))",
    "sum by (job) (rate(nh_request_seconds[5m]))",
    "sum by (instance) (increase(nh_request_seconds[10m]))",
    "sum(nh_queue_size)",
    "sum(nh_request_seconds)",
    "histogram_count(sum(rate(nh_request_seconds[5m])))",
    "histogram_sum(sum by (job) (rate(nh_request_seconds[5m])))",
    "delta(nh_queue_size[5m])",
    "histogram_fraction(0, 1, rate(nh_request_seconds[5m]))",
    // Bounds on bucket boundaries of every schema in the data, since 2.42 interpolates
    // linearly and 3.x exponentially: 1 and 65536 for schema -4, powers of 4 without it.
    "histogram_fraction(0.25, 4, sum by (job) (rate(nh_request_seconds{instance!=\"h-4\"}[5m])))",
    "histogram_fraction(1, 65536, sum by (job) (rate(nh_request_seconds[5m])))",
    "histogram_fraction(1, +Inf, nh_request_seconds)",
    "histogram_fraction(-Inf, 0, nh_queue_size)",
    "histogram_fraction(-Inf, 1, nh_queue_size)",
    "count(nh_request_seconds)",
    "count by (job) (nh_request_seconds)",
    "count_over_time(nh_request_seconds[5m])",
    "timestamp(nh_request_seconds)",
    "present_over_time(nh_queue_size[5m])",
    "group by (job) (nh_request_seconds)",
    "nh_request_seconds unless on(instance) nh_request_seconds{job=\"batch\"}",
    "nh_queue_size and on(instance) nh_request_seconds",
    "rate(nh_request_seconds[5m]) + rate(nh_request_seconds[5m] offset 5m)",
    "nh_queue_size + nh_queue_size",
    "increase(nh_request_seconds[10m:30s])",
    "max_over_time(histogram_count(rate(nh_request_seconds[1m]))[10m:1m])",
    "topk(2, histogram_sum(rate(nh_request_seconds[5m])))",
    "sort_desc(histogram_count(nh_queue_size))",
    "histogram_count(nh_request_seconds) > 500",
    // A series switching from histograms to floats (rounds 40-69) and back.
    "nh_switch",
    "histogram_count(nh_switch)",
    "count_over_time(nh_switch[10m])",
    "rate(nh_switch[5m])",
    "timestamp(nh_switch)",
    "sum(nh_switch)",
    // A float histogram series silent for 6 minutes (rounds 88-111).
    "nh_gappy",
    "count_over_time(nh_gappy[10m])",
    "rate(nh_gappy[10m])",
    "histogram_count(nh_gappy offset 3m)",
];

/// `histogram_quantile(q, inner)` queries. Prometheus 2.42 interpolates linearly inside every
/// bucket, 3.x (and saltdb) exponentially inside exponential buckets (prometheus#14677), so
/// these answers are compared with the quantile computed from Prometheus' own answer for
/// `inner`: saltdb's with 3.x interpolation, Prometheus' with 2.42's.
const NATIVE_QUANTILES: &[(f64, &str)] = &[
    (0.9, "rate(nh_request_seconds[5m])"),
    (0.5, "rate(nh_request_seconds[5m])"),
    (0.1, "rate(nh_request_seconds[1m])"),
    (0.99, "sum by (job) (rate(nh_request_seconds[5m]))"),
    (0.5, "sum(rate(nh_request_seconds[10m]))"),
    (0.75, "increase(nh_request_seconds[10m])"),
    (0.9, "nh_request_seconds"),
    (0.9, "nh_queue_size"),
    (0.25, "nh_queue_size"),
    (0.9, "rate(nh_request_seconds[5m:1m])"),
];

/// `histogram_quantile(q, h)` over the buckets of a query answer: with `exponential`,
/// Prometheus 3.x's rule (from above for `q >= 0.5`, exponential interpolation inside
/// exponential buckets), else 2.42's (from below, linear).
pub(crate) fn quantile(q: f64, h: &Hist, exponential: bool) -> f64 {
    if q < 0.0 {
        return f64::NEG_INFINITY;
    }
    if q > 1.0 {
        return f64::INFINITY;
    }
    if h.count == 0.0 || q.is_nan() {
        return f64::NAN;
    }
    let is_zero = |b: &(u64, f64, f64, f64)| b.1 <= 0.0 && b.2 >= 0.0;
    let has_negative = h.buckets.iter().any(|b| !is_zero(b) && b.2 <= 0.0);
    let has_positive = h.buckets.iter().any(|b| !is_zero(b) && b.1 >= 0.0);
    let forward = !exponential || q < 0.5;
    let mut buckets = h.buckets.clone();
    if !forward {
        buckets.reverse();
    }
    let rank = if forward { q * h.count } else { (1.0 - q) * h.count };
    let (mut bucket, mut count) = ((0, 0.0, 0.0, 0.0), 0.0);
    for b in buckets {
        bucket = b;
        count += b.3;
        if count >= rank {
            break;
        }
    }
    let (_, mut lower, mut upper, n) = bucket;
    if lower < 0.0 && upper > 0.0 {
        if has_positive && !has_negative {
            lower = 0.0;
        } else if has_negative && !has_positive {
            upper = 0.0;
        }
    }
    count = count.min(h.count);
    if count < rank {
        return upper;
    }
    let fraction = if forward { rank - (count - n) } else { count - rank } / n;
    if !exponential || (lower <= 0.0 && upper >= 0.0) {
        return lower + (upper - lower) * fraction;
    }
    let (log_lower, log_upper) = (lower.abs().log2(), upper.abs().log2());
    if lower > 0.0 {
        (log_lower + (log_upper - log_lower) * fraction).exp2()
    } else {
        -(log_upper + (log_lower - log_upper) * (1.0 - fraction)).exp2()
    }
}

/// The answer `histogram_quantile(q, inner)` must give, computed from the answer for `inner`.
pub(crate) fn expected_quantile(q: f64, inner: &(String, Points), exponential: bool) -> (String, Points) {
    let points = inner
        .1
        .iter()
        .map(|(k, pts)| {
            let qs = pts
                .iter()
                .filter_map(|(t, v)| match v {
                    Val::H(h) => Some((*t, Val::F(quantile(q, h, exponential)))),
                    Val::F(_) => None,
                })
                .collect();
            (k.clone(), qs)
        })
        .collect();
    (inner.0.clone(), points)
}

/// The counts of one comparison run of histogram queries.
#[derive(Default)]
pub(crate) struct Tally {
    pub compared: usize,
    pub failures: Vec<String>,
    /// Quantile answers where saltdb (3.x interpolation) and 2.42 differ beyond 1e-6.
    pub interpolation_differs: usize,
    /// Queries Prometheus answered with no series (agreement there proves little).
    pub empty: Vec<String>,
}

impl Tally {
    /// Compares saltdb's answer `ours` with Prometheus' `theirs` for `what`.
    pub(crate) fn answers(&mut self, what: String, ours: &Value, theirs: &Value) {
        self.compared += 1;
        if theirs["data"]["result"].as_array().is_some_and(Vec::is_empty) {
            self.empty.push(what.clone());
        }
        if let Some(why) = compare(ours, theirs) {
            self.failures.push(format!("{what}: {why}"));
        }
    }
}

impl Tally {
    /// Compares `histogram_quantile(q, inner)` with `params` (instant or range): saltdb against
    /// 3.x's rule on Prometheus' buckets for `inner`, Prometheus against 2.42's rule on them.
    pub(crate) fn quantile(
        &mut self,
        salt: &str,
        prom: &str,
        path: &str,
        q: f64,
        inner: &str,
        params: &[(&str, String)],
    ) {
        let full = format!("histogram_quantile({q}, {inner})");
        let with = |query: &str| {
            let mut p = params.to_vec();
            p.retain(|(k, _)| *k != "query");
            p.push(("query", query.to_owned()));
            p
        };
        let theirs_inner = reduce(&get(prom, path, &with(inner)), true);
        let ours = reduce(&get(salt, path, &with(&full)), false);
        let theirs = reduce(&get(prom, path, &with(&full)), false);
        if compare_reduced(ours.clone(), theirs.clone()).is_some() {
            self.interpolation_differs += 1;
        }
        let Ok(inner_points) = theirs_inner else {
            self.failures.push(format!("{path} {inner}: prometheus refused {theirs_inner:?}"));
            return;
        };
        self.compared += 2;
        let at = params.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" ");
        if let Some(why) = compare_reduced(ours, Ok(expected_quantile(q, &inner_points, true))) {
            self.failures.push(format!("{path} {full} ({at}): saltdb vs 3.x rule on prometheus' buckets: {why}"));
        }
        if let Some(why) = compare_reduced(theirs, Ok(expected_quantile(q, &inner_points, false))) {
            self.failures.push(format!("{path} {full} ({at}): prometheus vs 2.42 rule (test model wrong?): {why}"));
        }
    }
}

/// Integer and float native histograms (schemas -1 to 3, a counter reset, a schema change,
/// integer and float gauge histograms) remote-written to Prometheus 2.42 (`--enable-feature=native-histograms`)
/// and to saltdb, then histogram queries compared, instant and range: floats within 1e-6,
/// histograms by count, sum and every bucket's bounds and count.
#[test]
fn native_histogram_answers_match_prometheus() {
    if !available("prometheus", "prometheus_diff::native_histogram_answers_match_prometheus") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    native_histogram_answers(dir.path(), None);
}

/// The same with saltdb on the ClickHouse backend (two real shards): the acceptance check for
/// native histograms there.
#[test]
fn native_histogram_answers_on_clickhouse_match_prometheus() {
    let test = "prometheus_diff::native_histogram_answers_on_clickhouse_match_prometheus";
    if !available("prometheus", test) || !crate::peers::installed("clickhouse-server", test, "clickhouse-server") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let shards = crate::clickhouse_cluster::start(&dir.path().join("clickhouse"), 2);
    native_histogram_answers(dir.path(), Some(shards.iter().map(|s| s.url.clone()).collect()));
}

/// Writes the native histogram dataset to Prometheus and to saltdb (on ClickHouse when
/// `clickhouse` names shards) and compares the histogram queries' answers, instant and range.
fn native_histogram_answers(dir: &std::path::Path, clickhouse: Option<Vec<String>>) {
    std::fs::create_dir_all(dir.join("prom")).unwrap();
    let prom = Prometheus::start_with(
        &dir.join("prom"),
        "global:\n  scrape_interval: 1h\n",
        &["--enable-feature=native-histograms"],
    );
    let mut config =
        saltdb::server::ServerConfig::new("127.0.0.1:0".parse().unwrap(), storage_config(&dir.join("salt")));
    config.clickhouse = clickhouse.map(saltdb::clickhouse::ClickHouseConfig::new);
    let on = if config.clickhouse.is_some() { " on ClickHouse" } else { "" };
    let salt = InProcess::start_with(crate::common::runtime(), config);
    let now = chrono::Utc::now().timestamp_millis();
    let t0 = now - now % 60_000 - NATIVE_ROUNDS * STEP_MS;
    for req in native_requests(t0) {
        let body = saltdb::remote::snappy_body(&req);
        post_write(&prom.base, &body);
        post_write(&salt.url(""), &body);
    }
    let t_end = t0 + (NATIVE_ROUNDS - 1) * STEP_MS;
    // Late in the data, mid-way, just after the counter reset at round 80 and just after the
    // schema change at round 50.
    let instants = [t_end - 90_500, t_end - 634_500, t0 + 80 * STEP_MS + 100_250, t0 + 50 * STEP_MS + 70_250];
    let range = |query: &str| {
        vec![
            ("query", query.to_owned()),
            // No window (10m at most, offset 5m) reaches the first samples: near a series
            // start `rate` extrapolation of histograms differs between 2.42 and 3.x.
            ("start", ((t0 + 900_500) as f64 / 1000.0).to_string()),
            ("end", ((t_end - 60_000) as f64 / 1000.0).to_string()),
            ("step", "60".to_owned()),
        ]
    };
    let (s, p) = (salt.url(""), prom.base.clone());
    let mut tally = Tally::default();
    for q in NATIVE_QUERIES {
        for at in instants {
            let params = [("query", (*q).to_owned()), ("time", (at as f64 / 1000.0).to_string())];
            let (o, t) = (get(&s, "/api/v1/query", &params), get(&p, "/api/v1/query", &params));
            tally.answers(format!("instant {q} @ {at}"), &o, &t);
        }
        let params = range(q);
        let (o, t) = (get(&s, "/api/v1/query_range", &params), get(&p, "/api/v1/query_range", &params));
        tally.answers(format!("range {q}"), &o, &t);
    }
    for &(q, inner) in NATIVE_QUANTILES {
        for at in instants {
            let params = [("time", (at as f64 / 1000.0).to_string())];
            tally.quantile(&s, &p, "/api/v1/query", q, inner, &params);
        }
        tally.quantile(&s, &p, "/api/v1/query_range", q, inner, &range(inner));
    }
    eprintln!(
        "prometheus_diff native histograms{on}: {} comparisons, {} differ; {} histogram_quantile answers differ \
         between saltdb and 2.42 by interpolation alone; empty in Prometheus: {:?}",
        tally.compared,
        tally.failures.len(),
        tally.interpolation_differs,
        tally.empty
    );
    assert!(tally.compared >= 150, "too few comparisons: {}", tally.compared);
    assert!(
        tally.failures.is_empty(),
        "{} of {} answers differ from Prometheus:\n{}",
        tally.failures.len(),
        tally.compared,
        tally.failures.join("\n")
    );
    // Some answers are rightly empty (a `rate` over a window mixing floats and histograms), but
    // a query empty at every instant and in range compares nothing.
    let unanswered: Vec<&&str> = NATIVE_QUERIES
        .iter()
        .filter(|q| {
            let empty =
                tally.empty.iter().filter(|e| e.starts_with(&format!("instant {q} @")) || **e == format!("range {q}"));
            empty.count() == instants.len() + 1
        })
        .collect();
    assert!(unanswered.is_empty(), "queries without any answer compare nothing: {unanswered:?}");
    salt.stop();
}
